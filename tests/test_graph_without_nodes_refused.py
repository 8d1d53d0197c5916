"""A graph without nodes is refused wherever a graph comes in: the ``--graph`` file at start-up,
``PUT /api/v1/graph`` and the file the refresher reloads.

Served, such a graph mapped no alert and ranked no cause, and replacing the graph re-ranked the open
incidents on it, so one bad ``graph build`` output (an empty cluster list) wiped every ranked
cause while ``/readyz`` stayed ready. Refusing it follows the rule the refresher already had for an
invalid file: keep serving the last good graph and say why (the pattern of Prometheus, whose
``/-/reload`` keeps the running configuration when the new one fails to load).
"""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from fleetmind import cli
from fleetmind.data.errors import DataError
from fleetmind.data.graph import DependencyGraph
from fleetmind.serving.app import create_app
from fleetmind.serving.defaults.example import build_example_graph
from fleetmind.serving.graph_refresh import GraphRefresher
from fleetmind.serving.graphstore import GraphStore
from fleetmind.serving.settings import Settings

ADMIN = "empty-graph-admin-token"
A = {"Authorization": f"Bearer {ADMIN}"}
EMPTY = {"name": "z", "nodes": [], "edges": []}


def _settings(tmp_path: Path, **kw: Any) -> Settings:
    return Settings(
        database_url=f"sqlite:///{tmp_path}/g.db",
        rca_model="baseline:upstream-coverage",
        placement_model="heuristic:builtin-bestfit",
        incident_worker=False,
        api_token=ADMIN,
        **kw,
    )


def test_from_json_refuses_a_graph_without_nodes() -> None:
    with pytest.raises(DataError, match="graph 'z' has no nodes; a graph needs at least one"):
        DependencyGraph.from_json(EMPTY)


def test_put_of_a_graph_without_nodes_is_422_and_keeps_the_graph(tmp_path: Path) -> None:
    with TestClient(create_app(_settings(tmp_path))) as c:
        before = c.get("/api/v1/graph", headers=A).json()
        r = c.put("/api/v1/graph", json=EMPTY, headers=A)
        assert r.status_code == 422, r.text
        assert "has no nodes" in r.text
        assert c.get("/api/v1/graph", headers=A).json() == before
        inline = {"alerts": [{"labels": {"alertname": "X"}}], "graph": EMPTY}
        assert c.post("/api/v1/rca", json=inline, headers=A).status_code == 422
        assert c.get("/readyz").status_code == 200


def test_refresher_keeps_the_graph_and_records_why(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "graph.json"
    good = build_example_graph(clusters=1, hosts=1, gpus=2, services=1, name="good")
    path.write_text(json.dumps(good.to_json()))
    store = GraphStore(good, str(path))
    refresher = GraphRefresher(store, str(path), interval_s=3600)
    path.write_text(json.dumps(EMPTY) + " ")  # another size: the refresher sees a change
    with caplog.at_level(logging.WARNING, logger="fleetmind.serving.graph"):
        assert refresher.check() is False
    assert store.graph is good
    assert refresher.last_error is not None and "has no nodes" in refresher.last_error
    assert [r.levelno for r in caplog.records] == [logging.ERROR]
    assert "has no nodes" in caplog.records[0].getMessage()


def test_serve_refuses_a_graph_file_without_nodes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import uvicorn

    def started(*_: Any, **__: Any) -> None:
        raise AssertionError("the service started on a graph without nodes")

    monkeypatch.setattr(uvicorn, "run", started)
    path = tmp_path / "g.json"
    path.write_text(json.dumps(EMPTY))
    with (
        pytest.raises(DataError, match="has no nodes"),
        TestClient(create_app(_settings(tmp_path, graph=str(path)))),
    ):
        pass
    assert cli.main(["serve", "--graph", str(path), "--port", "19501"]) == 2
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    assert err == ["fleetmind: error: graph 'z' has no nodes; a graph needs at least one"]


def test_refresher_records_a_file_python_cannot_parse(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A 5,001-digit integer (CPython's ``int()`` limit, CVE-2020-10735) is a one-line ERROR and
    ``last_error``; so is anything else that goes wrong while reloading, whose traceback stays in
    the log."""
    path = tmp_path / "graph.json"
    good = build_example_graph(clusters=1, hosts=1, gpus=2, services=1, name="good")
    path.write_text(json.dumps(good.to_json()))
    store = GraphStore(good, str(path))
    refresher = GraphRefresher(store, str(path), interval_s=0.01)
    path.write_text('{"name": "g", "nodes": [], "edges": [], "n": 1' + "0" * 5000 + "}")
    with caplog.at_level(logging.WARNING, logger="fleetmind.serving.graph"):
        assert refresher.check() is False
    assert (
        refresher.last_error
        == f"graph file {path} is malformed: a number has more than 4,300 digits"
    )
    assert [r.levelno for r in caplog.records] == [logging.ERROR] and not caplog.records[0].exc_info

    def broken(_: str) -> DependencyGraph:
        raise RuntimeError("disk on fire")

    monkeypatch.setattr(DependencyGraph, "load", broken)
    path.write_text(json.dumps(good.to_json()))
    refresher.start()
    try:
        deadline = time.monotonic() + 5
        while "disk on fire" not in (refresher.last_error or "") and time.monotonic() < deadline:
            time.sleep(0.01)
    finally:
        refresher.stop()
    assert refresher.last_error == f"graph {path} not reloaded: RuntimeError: disk on fire"
    assert store.graph is good
