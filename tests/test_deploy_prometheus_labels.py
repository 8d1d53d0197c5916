"""The shipped scrape configurations of FleetMind keep the labels its /metrics exports.

Under ``honor_labels: false`` (Prometheus' default) a scraped label that a label Prometheus attaches
itself also names (``job``, ``instance``, a static target label, a service-discovery label) is
renamed ``exported_<name>`` (Prometheus docs, configuration.md, ``honor_labels``). FleetMind's
``fleetmind_cluster_health{cluster}`` names the cluster it scores: a ``cluster`` target label on
its scrape job turned every cluster's health into that one cluster's (``cluster="c1"`` read as
``exported_cluster="c1", cluster="c0"``). The label names come from the running app's /metrics, not
from a list.
"""

from __future__ import annotations

import os
import re
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from fastapi.testclient import TestClient
from k8s_helpers import ExporterServer, prometheus_binary
from prometheus_client.parser import text_string_to_metric_families
from serving_helpers import free_port

from fleetmind.serving.app import create_app
from fleetmind.serving.settings import Settings
from fleetmind.serving.telemetry.base import GpuState, NodeState
from fleetmind.serving.telemetry.sim import SimSource

os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")

DEPLOY = Path(__file__).resolve().parents[1] / "deploy"
SERVER_SIDE = {"job", "instance"}
"""Labels Prometheus attaches to every target."""
OPERATOR_TARGET_LABELS = {"namespace", "service", "pod", "container", "endpoint"}
"""The target labels prometheus-operator gives a ServiceMonitor endpoint (``pkg/prometheus/
promcfg.go``, ``generateServiceMonitorConfig``), besides job and instance."""


def _fleet() -> list[NodeState]:
    """Two clusters, so that /metrics has a ``fleetmind_cluster_health`` series for each."""
    return [
        NodeState(f"{c}-h0", c, [GpuState(0, "A100", util_pct=util, mem_total_mib=80_000.0,
                  mem_used_mib=1_000.0, free_milli=1000)], 64_000, 64_000, 512_000, 512_000)
        for c, util in (("c0", 5.0), ("c1", 90.0))
    ]  # fmt: skip


@pytest.fixture(scope="module")
def metrics_text(tmp_path_factory: pytest.TempPathFactory) -> str:
    """The app's /metrics after a fleet refresh, a placement and a webhook."""
    tmp = tmp_path_factory.mktemp("labels")
    settings = Settings(
        database_url=f"sqlite:///{tmp}/l.db",
        rca_model="baseline:upstream-coverage",
        placement_model="heuristic:builtin-bestfit",
        incident_worker=False,
    )
    with TestClient(create_app(settings)) as c:
        c.app.state.services.telemetry = SimSource(_fleet())
        assert c.get("/api/v1/fleet").status_code == 200
        assert c.post("/api/v1/placements", json={"num_gpu": 1}).status_code == 200
        return c.get("/metrics").text


def _exported_labels(text: str) -> set[str]:
    return {k for f in text_string_to_metric_families(text) for s in f.samples for k in s.labels}


def _fleetmind_job() -> dict[str, Any]:
    cfg = yaml.safe_load((DEPLOY / "prometheus.yml").read_text())
    (job,) = [j for j in cfg["scrape_configs"] if j["job_name"] == "fleetmind"]
    return job


def test_fleetmind_job_keeps_every_label_fleetmind_exports(metrics_text: str) -> None:
    exported = _exported_labels(metrics_text)
    assert "cluster" in exported  # fleetmind_cluster_health{cluster}
    job = _fleetmind_job()
    attached = set(SERVER_SIDE)
    for sc in job.get("static_configs", []):
        attached |= set(sc.get("labels", {}))
    attached |= {r["target_label"] for r in job.get("relabel_configs", []) if "target_label" in r}
    clash = sorted(attached & exported)
    assert not clash or job.get("honor_labels") is True, (
        f"deploy/prometheus.yml's fleetmind job attaches {clash}, which FleetMind's /metrics "
        "exports too: with honor_labels false Prometheus renames FleetMind's to exported_*"
    )
    if job.get("honor_labels") is True:
        # honor_labels lets a scraped job/instance/service win: FleetMind exports none of them
        assert not (SERVER_SIDE | {"service"}) & exported


@pytest.mark.parametrize("path", ["kubernetes/base/servicemonitor.yaml",
                                  "kubernetes/tls/servicemonitor-https.yaml"])  # fmt: skip
def test_servicemonitors_keep_every_label_fleetmind_exports(metrics_text: str, path: str) -> None:
    exported = _exported_labels(metrics_text)
    doc = yaml.safe_load((DEPLOY / path).read_text())
    for ep in doc["spec"]["endpoints"]:
        attached = SERVER_SIDE | OPERATOR_TARGET_LABELS
        attached |= {r["targetLabel"] for r in ep.get("relabelings", []) if "targetLabel" in r}
        clash = sorted(attached & exported)
        assert not clash or ep.get("honorLabels") is True, (path, clash)


@pytest.mark.external
def test_shipped_scrape_keeps_each_clusters_health(metrics_text: str, tmp_path: Path) -> None:
    """A real Prometheus scraping the app's /metrics with the shipped fleetmind job: the health
    of c1 stays c1's, and FleetMind's other series get the job's cluster label."""
    if prometheus_binary() is None:
        pytest.skip("Prometheus not installed (Debian package prometheus)")
    exporter = ExporterServer({"/metrics": metrics_text})
    job = _fleetmind_job()
    for sc in job["static_configs"]:
        sc["targets"] = [f"127.0.0.1:{exporter.port}"]
    job["scrape_interval"] = "1s"
    (tmp_path / "prometheus.yml").write_text(yaml.safe_dump({"scrape_configs": [job]}))
    port = free_port()
    proc = subprocess.Popen(
        [str(prometheus_binary()), f"--config.file={tmp_path / 'prometheus.yml'}",
         f"--storage.tsdb.path={tmp_path / 'tsdb'}", f"--web.listen-address=127.0.0.1:{port}",
         "--log.level=warn"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        import httpx

        def query(promql: str) -> list[dict[str, Any]]:
            try:
                r = httpx.post(f"http://127.0.0.1:{port}/api/v1/query", data={"query": promql})
                return list(r.json()["data"]["result"])
            except (httpx.HTTPError, ValueError, KeyError):
                return []

        deadline = time.monotonic() + 60
        while not query("fleetmind_cluster_health") and time.monotonic() < deadline:
            time.sleep(0.2)
        health = {
            r["metric"].get("cluster"): r["metric"] for r in query("fleetmind_cluster_health")
        }
        assert set(health) == {"c0", "c1"}, health
        assert not any("exported_cluster" in m for m in health.values())
        loads = query("fleetmind_model_loads_total")
        assert loads and {r["metric"].get("cluster") for r in loads} == {"c0"}
        assert re.fullmatch(r"127\.0\.0\.1:\d+", loads[0]["metric"]["instance"])
    finally:
        proc.terminate()
        proc.wait(10)
        exporter.close()
