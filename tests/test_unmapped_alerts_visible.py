"""Alerts that match no graph node are visible: ``/readyz`` warns when most recent ones did, and
``fleetmind_alerts_unmapped_total{reason}`` counts them.

The storm is kube-prometheus-stack's node-down set as its rules label it (kube-state-metrics'
``KubeNodeNotReady``/``KubeNodeUnreachable``, ``KubePodNotReady``, ...), with the one external label
its Prometheus adds by default, ``prometheus=<namespace>/<name>``: no ``cluster``
(``prometheus.prometheusSpec.externalLabels: {}`` in its values.yaml). On a graph of two clusters
no alert can be placed (:meth:`fleetmind.data.graph.DependencyGraph.alert_subject` fills a missing
``cluster`` only on a one-cluster graph).
"""

from __future__ import annotations

import json
from pathlib import Path

from fastapi.testclient import TestClient
from serving_helpers import alert, webhook

from fleetmind.data.graph import DependencyGraph
from fleetmind.serving.app import create_app
from fleetmind.serving.health import unmapped_alerts_warning, unmapped_reason
from fleetmind.serving.metrics import Metrics
from fleetmind.serving.settings import Settings

TOKEN = "unmapped-alerts-token"
EXT = {"prometheus": "monitoring/kps-prometheus"}  # kube-prometheus-stack's default external label
KSM = {
    "job": "kube-state-metrics",
    "instance": "10.244.0.107:8080",
    "container": "kube-state-metrics",
    "endpoint": "http",
    "service": "kps-kube-state-metrics",
    "pod": "kps-kube-state-metrics-6d5f8b7c9-abcde",
    "namespace": "monitoring",
}


def _a(name: str, severity: str, labels: dict[str, str], i: int) -> dict:
    return alert(
        {"alertname": name, **labels, "severity": severity, **EXT},
        starts=f"2026-01-01T00:00:{i:02d}Z",
        fingerprint=f"f{i:04d}",
    )


NODE_DOWN = [
    _a("KubeNodeNotReady", "warning", {**KSM, "node": "gpu-a100-0", "condition": "Ready"}, 0),
    _a(
        "KubeNodeUnreachable",
        "warning",
        {**KSM, "node": "gpu-a100-0", "key": "node.kubernetes.io/unreachable"},
        5,
    ),
    _a("TargetDown", "warning", {"job": "node-exporter", "namespace": "monitoring"}, 10),
    _a("TargetDown", "warning", {"job": "kubelet", "namespace": "kube-system"}, 11),
    _a("KubePodNotReady", "warning", {"namespace": "ml", "pod": "ranker-7f9c6d5b4-abcde"}, 20),
    _a("KubePodNotReady", "warning", {"namespace": "ml", "pod": "llama-train-0"}, 21),
    _a("KubeDeploymentReplicasMismatch", "warning", {**KSM, "namespace": "ml"}, 30),
]


def _graph() -> dict:
    """Host gpu-a100-0 in prod-eu, host gpu-a100-1 in prod-us, each with its cluster node."""
    nodes, edges = [], []
    for cluster, host in (("prod-eu", "gpu-a100-0"), ("prod-us", "gpu-a100-1")):
        nodes.append(
            {"id": cluster, "kind": "cluster", "cluster": cluster, "match": {"cluster": cluster}}
        )
        hid = f"{cluster}/host/{host}"
        nodes.append(
            {
                "id": hid,
                "kind": "host",
                "cluster": cluster,
                "match": {"cluster": cluster, "node": host},
            }
        )
        edges.append({"src": hid, "dst": cluster, "kind": "member_of"})
    return {"name": "two-clusters", "nodes": nodes, "edges": edges}


def _client(tmp_path: Path) -> TestClient:
    graph = tmp_path / "graph.json"
    graph.write_text(json.dumps(_graph()))
    settings = Settings(
        database_url=f"sqlite:///{tmp_path}/unmapped.db",
        rca_model="baseline:upstream-coverage",
        placement_model="heuristic:builtin-bestfit",
        incident_worker=False,
        api_token=TOKEN,
        graph=str(graph),
    )
    return TestClient(create_app(settings))


def _post(c: TestClient, alerts: list[dict]) -> None:
    r = c.post("/api/v1/alerts", json=webhook(alerts), headers={"Authorization": f"Bearer {TOKEN}"})
    assert r.status_code == 200
    c.app.state.services.incidents.process_pending()


def test_readyz_warns_when_most_alerts_match_no_node(tmp_path: Path) -> None:
    with _client(tmp_path) as c:
        assert not [w for w in c.get("/readyz").json()["warnings"] if w.startswith("alerts:")]
        _post(c, NODE_DOWN)
        rows = c.get("/api/v1/alerts", headers={"Authorization": f"Bearer {TOKEN}"}).json()
        assert len(rows) == len(NODE_DOWN) and all(a["node"] is None for a in rows)
        body = c.get("/readyz").json()
        assert body["status"] == "ready"  # still ingesting: a warning, not a problem
        (line,) = [w for w in body["warnings"] if w.startswith("alerts:")]
        assert f"{len(NODE_DOWN)} of the last {len(NODE_DOWN)} grouped alerts" in line
        assert "their cluster labels: (none)" in line
        assert "the graph's clusters: prod-eu, prod-us" in line
        metrics = c.get("/metrics").text  # counted where the incident worker groups them
        assert (
            f'fleetmind_alerts_unmapped_total{{reason="no_cluster"}} {float(len(NODE_DOWN))}'
            in metrics
        ), [m for m in metrics.splitlines() if "unmapped" in m]


def test_no_warning_when_alerts_name_the_graphs_cluster(tmp_path: Path) -> None:
    """The same storm with ``externalLabels: {cluster: prod-eu}`` set: every alert maps (the host,
    or the cluster node for what the graph does not hold); with 3 of 7 unlabelled, not most."""
    labelled = [
        {
            **a,
            "labels": {**a["labels"], "cluster": "prod-eu"},
            "fingerprint": "c" + a["fingerprint"],
        }
        for a in NODE_DOWN
    ]
    with _client(tmp_path) as c:
        _post(c, labelled[:4] + NODE_DOWN[4:])
        rows = c.get("/api/v1/alerts", headers={"Authorization": f"Bearer {TOKEN}"}).json()
        assert sorted(a["node"] is None for a in rows) == [False] * 4 + [True] * 3
        assert rows[0]["node"] == "prod-eu/host/gpu-a100-0"
        assert not [w for w in c.get("/readyz").json()["warnings"] if w.startswith("alerts:")]


def test_unmapped_reasons_and_counter() -> None:
    graph = DependencyGraph.from_json(_graph())
    one = DependencyGraph.from_json(
        {**_graph(), "nodes": _graph()["nodes"][:2], "edges": _graph()["edges"][:1]}
    )
    assert unmapped_reason(graph, NODE_DOWN[0]["labels"]) == "no_cluster"
    assert unmapped_reason(graph, {**NODE_DOWN[0]["labels"], "cluster": "prod_eu"}) == (
        "unknown_cluster"
    )
    assert unmapped_reason(graph, {**NODE_DOWN[0]["labels"], "cluster": ""}) == "no_cluster"
    assert unmapped_reason(graph, {**NODE_DOWN[0]["labels"], "cluster": "prod-eu"}) == "no_match"
    assert unmapped_reason(one, NODE_DOWN[4]["labels"]) == "no_match"  # sole cluster filled in
    metrics = Metrics()
    text = metrics.render()[0].decode()
    for reason in ("no_cluster", "unknown_cluster", "no_match"):  # at 0 before any alert
        assert f'fleetmind_alerts_unmapped_total{{reason="{reason}"}} 0.0' in text
    assert metrics.count_unmapped(graph, NODE_DOWN[0]["labels"]) == "no_cluster"
    text = metrics.render()[0].decode()
    assert 'fleetmind_alerts_unmapped_total{reason="no_cluster"} 1.0' in text


def test_warning_needs_a_few_grouped_alerts_and_a_majority() -> None:
    graph = DependencyGraph.from_json(_graph())
    row = {"incident_id": 1, "node": None, "labels": {"cluster": "prod_eu"}}
    assert unmapped_alerts_warning(graph, [row] * 4) is None  # too few to tell
    assert "prod_eu" in (unmapped_alerts_warning(graph, [row] * 5) or "")
    mapped = {"incident_id": 1, "node": "prod-eu/host/gpu-a100-0", "labels": {}}
    assert unmapped_alerts_warning(graph, [row] * 3 + [mapped] * 3) is None
    heartbeat = {"incident_id": None, "node": None, "labels": {}}  # never grouped: not counted
    assert unmapped_alerts_warning(graph, [heartbeat] * 10) is None
