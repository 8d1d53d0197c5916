"""The init container ``graph-placeholder`` (deploy/kubernetes/base/deployment.yaml) run by several
pods at once on one shared volume, as the PostgreSQL Component's replicas do.

It used to copy the example graph to ``graph.json.tmp`` and rename that over ``graph.json``: two
pods that both found no graph wrote the same temporary file, the second rename found it gone
(``FileNotFoundError``, 9 of 400 runs of two concurrent copies), and that pod went to
``Init:Error`` and back-off; in the same window a graph the CronJob wrote was replaced by the
example. Now each pod copies to a file named after its host name (the pod's name) and installs it
with ``os.link``, which fails with ``FileExistsError`` rather than replace a file (POSIX
``link(2)``: "EEXIST: newpath already exists").

Each pod is a thread here whose ``socket.gethostname()`` is its own name; barriers hold both
between the existence check and the install, the window that raced, so every pair meets in it.
"""

from __future__ import annotations

import errno
import os
import shutil
import socket
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from fleetmind.data.paths import REPO_ROOT
from fleetmind.serving.defaults import DEFAULT_GRAPH
from fleetmind.serving.defaults.example import build_example_graph

DEPLOYMENT = REPO_ROOT / "deploy" / "kubernetes" / "base" / "deployment.yaml"
PAIRS = 50


def _script() -> Any:
    """The init container's ``python -c`` program, compiled."""
    spec = yaml.safe_load(DEPLOYMENT.read_text())["spec"]["template"]["spec"]
    (init,) = [c for c in spec["initContainers"] if c["name"] == "graph-placeholder"]
    assert init["command"] == ["python", "-c"]
    (source,) = init["args"]
    return compile(source, "graph-placeholder", "exec")


def _as_pods(monkeypatch: pytest.MonkeyPatch, graph: Path) -> None:
    """Each thread is a pod: its host name is the thread's name."""
    monkeypatch.setenv("FLEETMIND_GRAPH", str(graph))
    monkeypatch.setattr(socket, "gethostname", lambda: threading.current_thread().name)


def _run_pods(code: Any, names: list[str]) -> dict[str, BaseException | None]:
    """Run the program once per name, concurrently; each pod's exception (None: exit 0)."""
    errors: dict[str, BaseException | None] = {}

    def pod(name: str) -> None:
        try:
            exec(code, {"__name__": "__main__"})
            errors[name] = None
        except BaseException as exc:  # noqa: BLE001 - recorded, asserted by the caller
            errors[name] = exc

    threads = [threading.Thread(target=pod, args=(n,), name=n) for n in names]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    return errors


def _copy_in_step(barrier: threading.Barrier, then: Callable[[], None] | None = None) -> Any:
    """``shutil.copyfile`` that waits for the other pod before and after copying, so both have
    seen no graph and both hold a copy before either installs it; ``then`` runs after."""
    real = shutil.copyfile

    def copyfile(src: Any, dst: Any, **kw: Any) -> Any:
        barrier.wait()
        out = real(src, dst, **kw)
        barrier.wait()
        if then is not None:
            then()
        return out

    return copyfile


def test_two_pods_that_find_no_graph_both_start(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    code = _script()
    for i in range(PAIRS):
        folder = tmp_path / str(i)
        folder.mkdir()
        graph = folder / "graph.json"
        _as_pods(monkeypatch, graph)
        barrier = threading.Barrier(2, timeout=10)
        monkeypatch.setattr(shutil, "copyfile", _copy_in_step(barrier))
        errors = _run_pods(code, [f"fleetmind-7d9f-{i}a", f"fleetmind-7d9f-{i}b"])
        assert errors == {f"fleetmind-7d9f-{i}a": None, f"fleetmind-7d9f-{i}b": None}, i
        assert graph.read_bytes() == DEFAULT_GRAPH.read_bytes()
        assert [p.name for p in folder.iterdir()] == ["graph.json"]  # no temporary file left


def test_a_graph_written_during_the_copy_is_never_replaced(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The graph CronJob (or a second replica) writes graph.json after the check and before the
    install: the fleet's graph stays and the pod still starts."""
    graph = tmp_path / "graph.json"
    _as_pods(monkeypatch, graph)
    fleet = build_example_graph(clusters=1, name="prod-eu")
    one = threading.Barrier(1)
    monkeypatch.setattr(shutil, "copyfile", _copy_in_step(one, then=lambda: fleet.save(graph)))
    errors = _run_pods(_script(), ["fleetmind-7d9f-a"])
    assert errors == {"fleetmind-7d9f-a": None}
    fleet.save(tmp_path / "expected")
    assert graph.read_bytes() == (tmp_path / "expected").read_bytes() != DEFAULT_GRAPH.read_bytes()
    (tmp_path / "expected").unlink()
    assert [p.name for p in tmp_path.iterdir()] == ["graph.json"]
    assert "example graph stands in" not in capsys.readouterr().out


def test_without_hard_links_the_example_still_goes_in(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A file system without link(2) (Azure Files over SMB: "Hard link support: Not supported",
    learn.microsoft.com azure/storage/files/storage-files-compare-protocols) gets a rename."""
    graph = tmp_path / "graph.json"
    _as_pods(monkeypatch, graph)

    def no_link(src: Any, dst: Any, **kw: Any) -> None:
        raise OSError(errno.EOPNOTSUPP, os.strerror(errno.EOPNOTSUPP))

    monkeypatch.setattr(os, "link", no_link)
    errors = _run_pods(_script(), ["fleetmind-7d9f-a"])
    assert errors == {"fleetmind-7d9f-a": None}
    assert graph.read_bytes() == DEFAULT_GRAPH.read_bytes()
    assert [p.name for p in tmp_path.iterdir()] == ["graph.json"]
    assert "example graph stands in" in capsys.readouterr().out
