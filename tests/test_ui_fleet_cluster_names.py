"""The fleet page marks alerting GPUs and hosts when telemetry and the graph name the cluster
differently, and ``/readyz`` warns when their cluster names cannot be paired.

kube-prometheus-stack's series and alerts carry no ``cluster`` label unless
``prometheus.prometheusSpec.externalLabels`` sets one (its values.yaml: ``externalLabels: {}``;
the operator adds only ``prometheus: <namespace>/<name>`` to the alerts, and drops
``prometheus_replica`` from them), so telemetry calls the cluster ``FLEETMIND_TELEMETRY_CLUSTER``
(default ``local``) while ``fleetmind graph build --cluster prod-eu`` names it ``prod-eu``
(docs/deploy.md). An alert without ``cluster`` maps onto a one-cluster graph
(:meth:`fleetmind.data.graph.DependencyGraph.alert_subject`); the fleet page must follow it.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families
from serving_helpers import alert, webhook

from fleetmind.serving.app import create_app
from fleetmind.serving.settings import Settings
from fleetmind.serving.telemetry.base import FleetSnapshot, TelemetrySource
from fleetmind.serving.telemetry.prometheus import build_nodes
from fleetmind.serving.ui import auth

TOKEN = "fleet-cluster-names-token"
DATA = Path(__file__).parent / "data" / "k8s"

# dcgm-exporter's labels on its XID series (tests/data/k8s/dcgm_node_a.prom) and the one external
# label kube-prometheus-stack's Prometheus adds to its alerts: no `cluster`.
XID_ALERT = {
    "alertname": "GpuXidError",
    "severity": "critical",
    "gpu": "1",
    "UUID": "GPU-1b2f-a1",
    "device": "nvidia1",
    "modelName": "NVIDIA A100-SXM4-80GB",
    "Hostname": "node-a",
    "DCGM_FI_DRIVER_VERSION": "535.161.08",
    "xid": "79",
    "prometheus": "monitoring/kps-prometheus",
}


def _graph(clusters: tuple[str, ...]) -> dict:
    """node-a with GPUs 0..3 in the first of ``clusters``, one host in each other."""
    first = clusters[0]
    nodes = [{"id": first, "kind": "cluster", "match": {"cluster": first}}]
    nodes.append(
        {
            "id": f"{first}/host/node-a",
            "kind": "host",
            "match": {"cluster": first, "node": "node-a"},
        }
    )
    edges = [{"src": f"{first}/host/node-a", "dst": first, "kind": "member_of"}]
    for g in range(4):
        gid = f"{first}/gpu/node-a/{g}"
        nodes.append(
            {
                "id": gid,
                "kind": "gpu",
                "match": {"cluster": first, "node": "node-a", "gpu": str(g)},
            }
        )
        edges.append({"src": gid, "dst": f"{first}/host/node-a", "kind": "attached_to"})
    for other in clusters[1:]:
        nodes.append({"id": other, "kind": "cluster", "match": {"cluster": other}})
        hid = f"{other}/host/node-z"
        nodes.append({"id": hid, "kind": "host", "match": {"cluster": other, "node": "node-z"}})
        edges.append({"src": hid, "dst": other, "kind": "member_of"})
    for n in nodes:
        n["cluster"] = n["match"]["cluster"]
    return {"name": "fleet-" + "-".join(clusters), "nodes": nodes, "edges": edges}


class RecordedDcgm(TelemetrySource):
    """tests/data/k8s/dcgm_node_a.prom as the Prometheus source reads it (no `cluster` label:
    every node is in ``default_cluster``)."""

    name = "prometheus"

    def __init__(self, default_cluster: str) -> None:
        super().__init__(ttl_s=3600.0)
        self.default_cluster = default_cluster

    def collect(self) -> FleetSnapshot:
        text = (DATA / "dcgm_node_a.prom").read_text()
        samples = [
            (s.name, s.labels, float(s.value))
            for f in text_string_to_metric_families(text)
            for s in f.samples
        ]
        return FleetSnapshot(
            "prometheus", build_nodes(samples, [], default_cluster=self.default_cluster)
        )


def _client(tmp_path: Path, clusters: tuple[str, ...], telemetry_cluster: str) -> TestClient:
    graph = tmp_path / "graph.json"
    graph.write_text(json.dumps(_graph(clusters)))
    settings = Settings(
        database_url=f"sqlite:///{tmp_path}/fleet.db",
        rca_model="baseline:upstream-coverage",
        placement_model="heuristic:builtin-bestfit",
        incident_worker=False,
        api_token=TOKEN,
        graph=str(graph),
    )
    c = TestClient(create_app(settings))
    c.__enter__()
    services = c.app.state.services
    services.telemetry = RecordedDcgm(telemetry_cluster)
    services.telemetry.snapshot()
    return c


def _login(c: TestClient) -> None:
    c.get("/ui/login")
    c.post(
        "/ui/login",
        data={"token": TOKEN, "csrf": c.cookies.get(auth.CSRF_COOKIE), "next": "/ui/fleet"},
        follow_redirects=False,
    )


def _fire_xid(c: TestClient) -> None:
    r = c.post(
        "/api/v1/alerts",
        json=webhook([alert(XID_ALERT, fingerprint="aaaa1")]),
        headers={"Authorization": f"Bearer {TOKEN}"},
    )
    assert r.status_code == 200
    c.app.state.services.incidents.process_pending()


@pytest.fixture
def one_cluster(tmp_path: Path) -> Iterator[TestClient]:
    """Graph built with ``--cluster prod-eu``, telemetry's cluster the default ``local``."""
    c = _client(tmp_path, ("prod-eu",), "local")
    try:
        yield c
    finally:
        c.__exit__(None, None, None)


def test_alert_maps_onto_the_gpu_and_the_fleet_page_marks_it(one_cluster: TestClient) -> None:
    c = one_cluster
    _fire_xid(c)
    rows = c.get("/api/v1/alerts", headers={"Authorization": f"Bearer {TOKEN}"}).json()
    assert [(a["node"], a["incident_id"]) for a in rows] == [("prod-eu/gpu/node-a/1", 1)]
    _login(c)
    html = c.get("/ui/fleet").text
    assert 'data-cluster="local"' in html  # telemetry's name for it
    assert "open incident: #1 GpuXidError" in html
    assert '<div class="node hot" data-node="node-a">' in html
    assert "telemetry:" not in " ".join(c.get("/readyz").json()["warnings"])  # paired: no warning


def test_readyz_warns_when_no_cluster_name_is_shared(tmp_path: Path) -> None:
    """Two clusters in the graph, one unlabelled telemetry cluster: nothing pairs them."""
    c = _client(tmp_path, ("prod-eu", "prod-us"), "local")
    try:
        body = c.get("/readyz").json()
        assert body["status"] == "ready"
        (line,) = [w for w in body["warnings"] if w.startswith("telemetry:")]
        assert "(local)" in line and "(prod-eu, prod-us)" in line
        assert "FLEETMIND_TELEMETRY_CLUSTER" in line
    finally:
        c.__exit__(None, None, None)


def test_no_warning_when_telemetry_names_a_graph_cluster(tmp_path: Path) -> None:
    c = _client(tmp_path, ("prod-eu", "prod-us"), "prod-eu")
    try:
        _fire_xid(c)  # no `cluster` on a two-cluster graph: maps to nothing, marks nothing
        warnings = c.get("/readyz").json()["warnings"]
        assert not [w for w in warnings if w.startswith("telemetry:")]
    finally:
        c.__exit__(None, None, None)
