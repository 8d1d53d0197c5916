"""The Kubernetes deployment serves the fleet's dependency graph, and says so when it does not.

The base Deployment used to set no ``FLEETMIND_GRAPH``: the service fell back to the embedded
example graph (clusters c0, c1), kube-prometheus-stack's alerts carry no ``cluster`` label by
default (charts/kube-prometheus-stack/values.yaml: ``prometheus.prometheusSpec.externalLabels: {}``), so with two clusters in the graph every alert mapped to
nothing (docs/graph.md, "How an alert finds its node") and every incident had no ranked cause,
while ``/readyz`` said ready and nothing warned. Now the Deployment points ``FLEETMIND_GRAPH`` at
the data volume, an init container puts the example there until the fleet's graph is built (so
the pod starts and ingests instead of crash-looping on a missing file), and the example served to
a real fleet is a start-up WARNING, a ``/readyz`` warning (still ready: ingestion goes on) and a
``fleetmind doctor`` finding.
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from fastapi.testclient import TestClient

from fleetmind.data.paths import REPO_ROOT
from fleetmind.serving.app import create_app
from fleetmind.serving.defaults import DEFAULT_GRAPH
from fleetmind.serving.defaults.example import build_example_graph
from fleetmind.serving.settings import Settings
from fleetmind.serving.telemetry.doctor import graph_findings, has_errors

BASE = REPO_ROOT / "deploy" / "kubernetes" / "base"
TOKEN = "a" * 64


def _pod_spec() -> dict[str, Any]:
    return yaml.safe_load((BASE / "deployment.yaml").read_text())["spec"]["template"]["spec"]


def _env(container: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e.get("value", "") for e in container.get("env", [])}


def _placeholder() -> dict[str, Any]:
    (init,) = [c for c in _pod_spec().get("initContainers", []) if c["name"] == "graph-placeholder"]
    return init


def _run_placeholder(graph: Path) -> subprocess.CompletedProcess[str]:
    """The init container's command, run here as the image runs it (``python -c SCRIPT``)."""
    init = _placeholder()
    assert init["command"][0] == "python"
    env = {**os.environ, "FLEETMIND_GRAPH": str(graph)}
    return subprocess.run(
        [sys.executable, *init["command"][1:], *init["args"]],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_the_deployment_serves_a_graph_file_on_the_data_volume() -> None:
    spec = _pod_spec()
    (server,) = spec["containers"]
    env = _env(server)
    graph = env["FLEETMIND_GRAPH"]
    assert float(env["FLEETMIND_GRAPH_REFRESH_S"]) > 0  # a rebuilt graph is served without restart
    assert _env(_placeholder())["FLEETMIND_GRAPH"] == graph
    volumes = {v["name"]: v for v in spec["volumes"]}
    for container in (server, _placeholder()):
        mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
        assert "persistentVolumeClaim" in volumes[mounts[str(Path(graph).parent)]]
        assert container["image"] == server["image"]  # the kustomize `images` entry sets both


def test_the_init_container_puts_the_example_only_where_no_graph_is(tmp_path: Path) -> None:
    graph = tmp_path / "graph.json"
    done = _run_placeholder(graph)
    assert done.returncode == 0, done.stderr
    assert graph.read_bytes() == DEFAULT_GRAPH.read_bytes()
    assert "fleetmind graph build" in done.stdout
    assert sorted(p.name for p in tmp_path.iterdir()) == ["graph.json"]  # no .tmp left behind
    # a graph already there (built, or copied in by the operator) is never overwritten
    build_example_graph(clusters=1, name="prod-eu").save(graph)
    before = graph.read_bytes()
    done = _run_placeholder(graph)
    assert done.returncode == 0 and done.stdout == "", done.stderr
    assert graph.read_bytes() == before


def _settings(tmp_path: Path, graph: Path | None, **kw: Any) -> Settings:
    return Settings(
        telemetry="sim",
        database_url=f"sqlite:///{tmp_path / 'fm.db'}",
        graph=None if graph is None else str(graph),
        **kw,
    )


def test_the_example_graph_served_to_a_fleet_is_a_warning_not_unready(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    copy = tmp_path / "graph.json"  # as the init container leaves it
    shutil.copyfile(DEFAULT_GRAPH, copy)
    caplog.set_level(logging.WARNING, logger="fleetmind")
    app = create_app(_settings(tmp_path, copy, api_token=TOKEN, bind_host="0.0.0.0"))
    with TestClient(app) as client:  # as the Deployment runs it: a token, every interface
        ready = client.get("/readyz")
        assert ready.status_code == 200 and ready.json()["status"] == "ready"
        (warning,) = ready.json()["warnings"]
        assert "example graph 'fleetmind-example'" in warning and "FLEETMIND_GRAPH" in warning
        assert str(copy) not in warning  # /readyz is public: no file names
        logged = [r for r in caplog.records if r.levelno == logging.WARNING]
        assert any(
            "example graph" in r.getMessage() and str(copy) in r.getMessage() for r in logged
        )
        # the fleet's graph arrives (here by the API; the refresher does the same): warning gone
        real = build_example_graph(clusters=1, name="prod-eu").to_json()
        auth = {"Authorization": f"Bearer {TOKEN}"}
        assert client.put("/api/v1/graph", json=real, headers=auth).status_code == 200
        assert client.get("/readyz").json()["warnings"] == []


@pytest.mark.parametrize("telemetry", ["prometheus", "sim"])
def test_the_warning_needs_a_fleet(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, telemetry: str
) -> None:
    """Telemetry from Prometheus means a real fleet; local sim without tokens (the demo, a trial
    on loopback) is what the example graph is for and stays quiet."""
    caplog.set_level(logging.WARNING, logger="fleetmind")
    settings = _settings(tmp_path, None).model_copy(
        update={"telemetry": telemetry, "prometheus_url": "http://127.0.0.1:9"}
    )
    with TestClient(create_app(settings)) as client:
        warnings = client.get("/readyz").json()["warnings"]
    logged = [r.getMessage() for r in caplog.records if "example graph" in r.getMessage()]
    assert bool(warnings) == bool(logged) == (telemetry == "prometheus")


class _FakePrometheus:
    """Answers the graph check's one query with series of the given ``cluster`` labels."""

    def __init__(self, clusters: list[str | None]) -> None:
        self.clusters = clusters

    def query(
        self, promql: str, name: str | None = None
    ) -> list[tuple[float, dict[str, str], float]]:
        assert promql.startswith("count by (cluster)")
        return [(0.0, {} if c is None else {"cluster": c}, 3.0) for c in self.clusters]


def _levels(findings: list[Any]) -> list[tuple[str, str]]:
    assert {f.check for f in findings} == {"graph"}
    return [(f.level, f.message) for f in findings]


def test_doctor_reports_the_graph(tmp_path: Path) -> None:
    unlabelled = _FakePrometheus([None])
    ((level, msg),) = _levels(graph_findings(unlabelled, None))
    assert level == "warn" and "FLEETMIND_GRAPH is not set" in msg
    copy = tmp_path / "graph.json"
    shutil.copyfile(DEFAULT_GRAPH, copy)
    findings = graph_findings(unlabelled, str(copy))
    ((level, msg),) = _levels(findings)
    assert has_errors(findings) and "embedded example graph" in msg
    ((level, msg),) = _levels(graph_findings(unlabelled, str(tmp_path / "missing.json")))
    assert level == "error" and "missing.json" in msg
    # kube-prometheus-stack's default: no cluster label; a one-cluster graph takes such alerts
    one = tmp_path / "one.json"
    build_example_graph(clusters=1, name="prod-eu").save(one)
    ((level, msg),) = _levels(graph_findings(unlabelled, str(one)))
    assert level == "ok" and "'prod-eu'" in msg
    # with two clusters in the graph, alerts without one map to nothing
    two = tmp_path / "two.json"
    build_example_graph(clusters=2, name="fleet").save(two)
    ((level, msg),) = _levels(graph_findings(unlabelled, str(two)))
    assert level == "warn" and "without a 'cluster' label" in msg
    # a cluster of the series that the graph does not hold
    ((level, msg),) = _levels(graph_findings(_FakePrometheus(["c0", "c7"]), str(two)))
    assert level == "warn" and "c7" in msg and "c0" not in msg.split("which")[0]


def test_the_tutorial_with_a_token_on_loopback_stays_quiet(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """docs/operators.md's incident-page tutorial sets FLEETMIND_API_TOKEN and replays the example
    storms on loopback with simulated telemetry: they map onto the example graph, so a warning
    that "alerts map to no graph node" would contradict the ranked incidents on screen."""
    caplog.set_level(logging.WARNING, logger="fleetmind")
    app = create_app(_settings(tmp_path, None, api_token=TOKEN))
    with TestClient(app) as client:
        assert client.get("/readyz").json()["warnings"] == []
    assert not [r for r in caplog.records if "example graph" in r.getMessage()]
