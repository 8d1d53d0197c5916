"""Which graph the service serves over time: the file at start, uploads, and the refresher.

- A file replaced while the service starts (the models take seconds to load) is loaded by the
  first check: its version is taken before the start-up read, not when the refresher is built.
- An upload (``PUT /api/v1/graph``) lasts until the file's *content* changes: the same bytes
  written again (a CronJob on an unchanged cluster, a ``touch``) keep it. The ``PUT`` answer says
  so, and ``GET /api/v1/graph`` and ``/readyz`` say which graph is served (version, source,
  loaded_at).
- A file that cannot be read is retried at every check (only a file whose content is refused
  counts as seen), and a deleted file is logged once at WARNING; ``/readyz`` lists the
  refresher's error under ``warnings`` and stays ready.

The rules follow Prometheus's configuration reload (``prometheus/config`` and ``cmd/prometheus``:
a reload that fails keeps the running configuration, sets
``prometheus_config_last_reload_successful`` to 0 and reloads once the file is fixed) and
kubelet's ConfigMap volumes, which are swapped in whole (``pkg/volume/util/atomic_writer.go``).
The clock is fixed and every check is an explicit :meth:`GraphRefresher.check` call.
"""

from __future__ import annotations

import builtins
import errno
import io
import json
import logging
import os
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from fleetmind.serving.app import create_app
from fleetmind.serving.defaults.example import build_example_graph
from fleetmind.serving.graph_refresh import GraphRefresher, file_version
from fleetmind.serving.graphstore import GraphStore
from fleetmind.serving.registry import ModelRegistry
from fleetmind.serving.settings import Settings

ADMIN = "graph-refresh-admin-token"
A = {"Authorization": f"Bearer {ADMIN}"}
T0 = 1_800_000_000.0  # a fixed clock, Unix seconds


def _graph_text(name: str, hosts: int = 1) -> str:
    graph = build_example_graph(clusters=1, hosts=hosts, gpus=2, services=1, name=name)
    return json.dumps(graph.to_json())


def _settings(tmp_path: Path, path: Path) -> Settings:
    return Settings(
        database_url=f"sqlite:///{tmp_path}/g.db",
        rca_model="baseline:upstream-coverage",
        placement_model="heuristic:builtin-bestfit",
        incident_worker=False,
        api_token=ADMIN,
        graph=str(path),
        graph_refresh_s=3600,  # no check of its own: the tests call check()
    )


def _rewrite_same_bytes(path: Path) -> None:
    """Write the file's bytes again, a second later: a new stamp, the same content."""
    raw = path.read_bytes()
    st = path.stat()
    path.write_bytes(raw)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))


def test_a_file_replaced_while_the_service_starts_is_loaded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "graph.json"
    path.write_text(_graph_text("at-start"))
    load = ModelRegistry.load

    def slow_load(self: ModelRegistry) -> Any:  # the graph build finishes while models load
        path.write_text(_graph_text("built-meanwhile", hosts=2))
        return load(self)

    monkeypatch.setattr(ModelRegistry, "load", slow_load)
    with TestClient(create_app(_settings(tmp_path, path))) as c:
        assert c.get("/api/v1/graph", headers=A).json()["name"] == "at-start"
        assert c.app.state.graph_refresher.check() is True
        assert c.get("/api/v1/graph", headers=A).json()["name"] == "built-meanwhile"


def test_an_upload_lasts_until_the_files_content_changes(tmp_path: Path) -> None:
    path = tmp_path / "graph.json"
    path.write_text(_graph_text("from-file"))
    with TestClient(create_app(_settings(tmp_path, path))) as c:
        refresher = c.app.state.graph_refresher
        upload = json.loads(_graph_text("uploaded", hosts=2))
        r = c.put("/api/v1/graph", json=upload, headers=A)
        assert r.status_code == 200, r.text
        out = r.json()
        assert (out["name"], out["version"], out["source"]) == ("uploaded", 2, "api")
        assert "served until the file's content changes" in out["warnings"][0]
        _rewrite_same_bytes(path)  # the CronJob ran on an unchanged cluster
        assert refresher.check() is False
        assert c.get("/api/v1/graph", headers=A).json()["name"] == "uploaded"
        path.write_text(_graph_text("rebuilt", hosts=3))  # the cluster changed
        assert refresher.check() is True
        served = c.get("/api/v1/graph", headers=A).json()
        assert (served["name"], served["version"], served["source"]) == ("rebuilt", 3, str(path))


def test_get_and_readyz_say_which_graph_is_served(tmp_path: Path) -> None:
    path = tmp_path / "graph.json"
    path.write_text(_graph_text("from-file"))
    with TestClient(create_app(_settings(tmp_path, path))) as c:
        g = c.get("/api/v1/graph", headers=A).json()
        assert (g["name"], g["version"], g["source"]) == ("from-file", 1, str(path))
        assert g["loaded_at"].endswith("+00:00") and len(g["nodes"]) > 1 and g["edges"]
        ready = c.get("/readyz").json()
        assert (ready["graph"], ready["graph_version"], ready["graph_source"]) == (
            "from-file",
            1,
            "file",  # /readyz needs no token: no path
        )
        assert ready["graph_loaded_at"] == g["loaded_at"] and ready["warnings"] == []
        # GET's answer is still a graph PUT takes (the added keys are ignored)
        assert c.put("/api/v1/graph", json=g, headers=A).json()["version"] == 2
        assert c.get("/readyz").json()["graph_source"] == "api"


def test_readyz_warns_of_a_file_the_refresher_refused(tmp_path: Path) -> None:
    path = tmp_path / "graph.json"
    path.write_text(_graph_text("good"))
    with TestClient(create_app(_settings(tmp_path, path))) as c:
        path.write_text('{"name": "broken", "nodes": [')
        assert c.app.state.graph_refresher.check() is False
        r = c.get("/readyz")
        assert r.status_code == 200 and r.json()["status"] == "ready"
        (warning,) = r.json()["warnings"]
        assert warning.startswith(
            "graph: FLEETMIND_GRAPH not loaded, still serving graph version 1"
        )
        assert "is not valid JSON" in warning and str(path) not in warning
        assert r.json()["graph"] == "good"


def test_a_failed_read_is_retried_and_a_refused_content_is_not(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "graph.json"
    path.write_text(_graph_text("v1"))
    store = GraphStore(build_example_graph(clusters=1, name="v1"), str(path), clock=lambda: T0)
    refresher = GraphRefresher(store, str(path), 3600, loaded=file_version(str(path)))
    path.write_text(_graph_text("v2", hosts=2))
    failing = {"on": True}
    real_open = builtins.open

    def flaky_open(file: Any, *args: Any, **kwargs: Any) -> Any:  # EIO once: a network disk
        if failing["on"] and isinstance(file, str | Path) and str(file) == str(path):
            raise OSError(errno.EIO, "Input/output error")
        return real_open(file, *args, **kwargs)

    monkeypatch.setattr(builtins, "open", flaky_open)
    monkeypatch.setattr(io, "open", flaky_open)  # pathlib's read_bytes opens through io.open
    with caplog.at_level(logging.INFO, logger="fleetmind.serving.graph"):
        assert refresher.check() is False
        assert "Input/output error" in (refresher.last_error or "")
        failing["on"] = False
        assert refresher.check() is True  # read again: the file was never seen
    assert store.graph.name == "v2" and refresher.last_error is None
    assert [r.levelno for r in caplog.records if "Input/output" in r.getMessage()] == [
        logging.WARNING
    ]
    path.write_text('{"name": "bad"}')  # refused for its content: that version counts as seen
    assert refresher.check() is False and refresher.check() is False
    assert "malformed graph JSON" in (refresher.last_error or "")


def test_a_deleted_file_is_said_once_and_cleared_when_it_is_back(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "graph.json"
    path.write_text(_graph_text("v1"))
    store = GraphStore(build_example_graph(clusters=1, name="v1"), str(path), clock=lambda: T0)
    refresher = GraphRefresher(store, str(path), 3600, loaded=file_version(str(path)))
    served = store.graph
    moved = tmp_path / "moved.json"
    path.rename(moved)
    with caplog.at_level(logging.WARNING, logger="fleetmind.serving.graph"):
        assert refresher.check() is False and refresher.check() is False
    assert [r.levelno for r in caplog.records] == [logging.WARNING]
    assert "is gone" in caplog.records[0].getMessage()
    assert (
        refresher.last_error
        == f"graph {path} not reloaded: the file is gone (deleted or moved away)"
    )
    moved.rename(path)  # back, same bytes: nothing to load, nothing wrong
    assert refresher.check() is False
    assert refresher.last_error is None and store.graph is served
    assert store.view.describe() == {
        "version": 1,
        "source": str(path),
        "loaded_at": "2027-01-15T08:00:00+00:00",
    }


def _duplicated_pod(name: str) -> str:
    """A graph file whose pod node appears twice: ``duplicate node id '<cluster>/pod/...'``."""
    obj = json.loads(_graph_text(name))
    pod = next(n for n in obj["nodes"] if n["kind"] == "pod")
    obj["nodes"].append(dict(pod))
    return json.dumps(obj)


@pytest.mark.parametrize(
    ("content", "kind"),
    [
        (_duplicated_pod("dup"), "the file is not a valid graph"),
        ('{"name": "broken", "nodes": [', "the file is not valid JSON"),
        (b'{"name": "caf\xe9"}', "the file is not valid JSON"),  # Latin-1, not UTF-8
        (None, "the file cannot be read"),  # deleted
    ],
    ids=["duplicate_id", "not_json", "not_utf8", "deleted"],
)
def test_readyz_names_the_kind_of_failure_not_the_files_contents(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, content: str | bytes | None, kind: str
) -> None:
    """``/readyz`` needs no token, so its warning says what kind of failure kept the file out and
    no more: a node id (``prod-eu/pod/payments/ledger-0``) or a path would tell anyone who can
    reach the port what runs in the cluster. The reason stays in the log, as Prometheus logs why
    a configuration reload failed (``cmd/prometheus/main.go``, ``reloadConfig``) while its
    ``/-/ready`` answers only whether it is ready (``web/web.go``)."""
    path = tmp_path / "graph.json"
    path.write_text(_graph_text("good"))
    with TestClient(create_app(_settings(tmp_path, path))) as c:
        if content is None:
            path.unlink()
        elif isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content)
        with caplog.at_level(logging.WARNING, logger="fleetmind.serving.graph"):
            assert c.app.state.graph_refresher.check() is False
        r = c.get("/readyz")
        assert r.status_code == 200 and r.json()["status"] == "ready"
        (warning,) = r.json()["warnings"]
    assert warning == (
        "graph: FLEETMIND_GRAPH not loaded, still serving graph version 1 (a restart would "
        f"fail): {kind}; the reason is in the service's log"
    )
    logged = " ".join(rec.getMessage() for rec in caplog.records)
    assert str(path) in logged
    if content == _duplicated_pod("dup"):
        pod_id = next(n["id"] for n in json.loads(content)["nodes"] if n["kind"] == "pod")
        assert f"duplicate node id '{pod_id}'" in logged and pod_id not in warning
