"""`fleetmind serve` checks the graph before the server starts; with one worker the app, started in
the same process, takes that graph instead of parsing and validating the file a second time."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from fleetmind.data.graph import DependencyGraph
from fleetmind.serving import app as app_module
from fleetmind.serving.app import DEFAULT_GRAPH, load_graph
from fleetmind.serving.settings import Settings


@pytest.fixture
def counted(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    calls: list[str] = []
    real = DependencyGraph.load.__func__  # type: ignore[attr-defined]

    def load(cls: type[DependencyGraph], path: str) -> DependencyGraph:
        calls.append(str(path))
        return real(cls, path)

    monkeypatch.setattr(DependencyGraph, "load", classmethod(load))
    monkeypatch.setattr(app_module, "_CHECKED_GRAPH", [])
    return calls


def _settings(tmp_path: Path) -> tuple[Settings, Path]:
    path = tmp_path / "graph.json"
    shutil.copyfile(DEFAULT_GRAPH, path)
    return Settings(graph=str(path)), path


def test_the_checked_graph_is_taken_once_without_a_second_parse(
    tmp_path: Path, counted: list[str]
) -> None:
    settings, _ = _settings(tmp_path)
    checked, _ = load_graph(settings, keep=True)
    started, source = load_graph(settings)
    assert started is checked and source == settings.graph
    assert len(counted) == 1
    again, _ = load_graph(settings)  # taken once: a later load reads the file
    assert again is not checked and len(counted) == 2


def test_a_graph_file_changed_after_the_check_is_read_again(
    tmp_path: Path, counted: list[str]
) -> None:
    settings, path = _settings(tmp_path)
    checked, _ = load_graph(settings, keep=True)
    st = path.stat()
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))
    started, _ = load_graph(settings)
    assert started is not checked and len(counted) == 2


def test_without_keep_nothing_is_held(tmp_path: Path, counted: list[str]) -> None:
    settings, _ = _settings(tmp_path)
    load_graph(settings)
    load_graph(settings)
    assert len(counted) == 2 and app_module._CHECKED_GRAPH == []
