"""An upload that arrives while the refresher loads a changed ``FLEETMIND_GRAPH`` file is kept.

Loading a large graph file takes seconds (200,000 nodes: about 5 s). The refresher used to swap
the file's graph in unconditionally once loaded, so a ``PUT /api/v1/graph`` answered during the
load was silently replaced by file content written *before* it, though the ``PUT`` answer and
``docs/graph.md`` say an upload is served until the file's content changes. The refresher now
notes the served version when it sees the change and swaps only if that version is still served
(:meth:`GraphStore.replace_if`, a compare-and-swap); the content it loaded counts as seen.

The load is held on a :class:`threading.Event`, so the interleaving is fixed, not timed.
"""

from __future__ import annotations

import json
import logging
import threading
from pathlib import Path
from typing import Any

import pytest

from fleetmind.data.graph import DependencyGraph
from fleetmind.serving import graph_refresh
from fleetmind.serving.defaults.example import build_example_graph
from fleetmind.serving.graph_refresh import GraphRefresher, file_version
from fleetmind.serving.graphstore import API_SOURCE, GraphStore

T0 = 1_800_000_000.0  # a fixed clock, Unix seconds


def _write(path: Path, name: str, hosts: int) -> None:
    graph = build_example_graph(clusters=1, hosts=hosts, gpus=2, services=1, name=name)
    path.write_text(json.dumps(graph.to_json()))


def _setup(tmp_path: Path) -> tuple[Path, GraphStore, GraphRefresher]:
    path = tmp_path / "graph.json"
    _write(path, "v1", hosts=1)
    store = GraphStore(build_example_graph(clusters=1, name="v1"), str(path), clock=lambda: T0)
    return path, store, GraphRefresher(store, str(path), 3600, loaded=file_version(str(path)))


def _slow_load(monkeypatch: pytest.MonkeyPatch) -> tuple[threading.Event, threading.Event]:
    """Make the refresher's file load wait: ``started`` is set once it began, and it returns
    once ``release`` is set."""
    started, release = threading.Event(), threading.Event()
    real_load = DependencyGraph.load

    def held_load(path: Any) -> DependencyGraph:
        graph = real_load(path)
        started.set()
        assert release.wait(30), "the test never released the load"
        return graph

    monkeypatch.setattr(graph_refresh.DependencyGraph, "load", staticmethod(held_load))
    return started, release


def test_an_upload_during_the_file_load_stays_served(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    path, store, refresher = _setup(tmp_path)
    _write(path, "cronjob", hosts=2)  # the CronJob rewrote the file
    started, release = _slow_load(monkeypatch)
    result: list[bool] = []
    worker = threading.Thread(target=lambda: result.append(refresher.check()))
    with caplog.at_level(logging.INFO, logger="fleetmind.serving.graph"):
        worker.start()
        assert started.wait(30)
        upload = build_example_graph(clusters=1, hosts=3, name="uploaded")
        store.replace(upload, source=API_SOURCE)  # what PUT /api/v1/graph does
        release.set()
        worker.join(30)
    assert result == [False] and refresher.reloads == 0
    assert store.graph is upload and store.view.describe()["version"] == 2
    assert refresher.last_error is None
    assert any("swapped in while it loaded" in r.getMessage() for r in caplog.records)
    # that file content counts as seen: neither the next check nor the same bytes again load it
    assert refresher.check() is False
    path.write_bytes(path.read_bytes())
    assert refresher.check() is False and store.graph is upload
    monkeypatch.undo()
    _write(path, "cronjob-next", hosts=4)  # new content: the file's graph replaces the upload
    assert refresher.check() is True
    assert store.graph.name == "cronjob-next" and store.view.describe()["version"] == 3


def test_the_same_bytes_written_again_during_the_load_keep_the_upload(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The file is rewritten with the same bytes (a CronJob's temp file and rename) while the
    load that lost to an upload runs: those bytes stay seen, so the next check keeps the upload
    (it reloaded them and replaced the upload)."""
    import os

    path, store, refresher = _setup(tmp_path)
    _write(path, "cronjob", hosts=2)
    started, release = _slow_load(monkeypatch)
    result: list[bool] = []
    worker = threading.Thread(target=lambda: result.append(refresher.check()))
    worker.start()
    assert started.wait(30)
    upload = build_example_graph(clusters=1, hosts=3, name="uploaded")
    store.replace(upload, source=API_SOURCE)
    again = tmp_path / "graph.json.tmp"
    again.write_bytes(path.read_bytes())
    os.replace(again, path)  # the same bytes, another file: its stat changed
    release.set()
    worker.join(30)
    assert result == [False]
    monkeypatch.undo()
    assert refresher.check() is False and store.graph is upload
    _write(path, "cronjob-next", hosts=4)  # new content still replaces it
    assert refresher.check() is True and store.graph.name == "cronjob-next"


def test_without_an_upload_the_changed_file_is_swapped_in(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path, store, refresher = _setup(tmp_path)
    _write(path, "cronjob", hosts=2)
    started, release = _slow_load(monkeypatch)
    release.set()
    assert refresher.check() is True and started.is_set()
    assert store.graph.name == "cronjob" and refresher.reloads == 1
    assert store.view.describe() == {
        "version": 2,
        "source": str(path),
        "loaded_at": "2027-01-15T08:00:00+00:00",
    }


def test_replace_if_swaps_only_the_version_it_names() -> None:
    store = GraphStore(build_example_graph(clusters=1, name="v1"), "f", clock=lambda: T0)
    assert store.replace_if(build_example_graph(clusters=1, name="stale"), "f", 0) is None
    assert store.graph.name == "v1" and store.view.version == 1
    view = store.replace_if(build_example_graph(clusters=1, name="v2"), "f", 1)
    assert view is store.view and view.version == 2 and store.graph.name == "v2"
