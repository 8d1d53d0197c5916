"""``POST /api/v1/rca`` does not answer on heartbeats alone.

kube-prometheus' ``Watchdog`` (``vector(1)``, always firing) and ``InfoInhibitor`` (``ALERTS{
severity="info"} == 1 unless on (namespace) ALERTS{severity=~"warning|critical"}``: the labels of
the info alert it stands for, ``namespace``/``pod``/``container`` included) carry
``severity: none`` (kube-prometheus-stack ``templates/prometheus/rules-1.14/general.rules.yaml``).
They say nothing about where a fault is: the incident worker never groups them
(``FLEETMIND_UNGROUPED_ALERTS``, ``severity="none"``), and the propagation ranker drops
``severity="none"``. Before, a request holding only them got ``mapped_alerts: 1`` and a ranking
(``InfoInhibitor`` alone put its pod first at 0.67); now it gets the answer of "no alert maps":
``mapped_alerts: 0``, no causes. With real alerts beside them the ranking is the one it was.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from serving_helpers import app_on_graph

from fleetmind.data.graph import DependencyGraph
from fleetmind.data.graph_build import build_graph
from fleetmind.rca.features.columnar import AlertColumns
from fleetmind.serving.rca.request import parse_alerts, parse_for, response_json

DATA = Path(__file__).parent / "data" / "k8s"
C = "prod-eu"
T0 = "2026-03-01T10:00:00Z"
EXT = {"prometheus": "monitoring/kps-prometheus"}
WATCHDOG = {"alertname": "Watchdog", "severity": "none", **EXT}
INFO_INHIBITOR = {  # the labels of a CPUThrottlingHigh (severity info) of the ranker pod
    "alertname": "InfoInhibitor", "severity": "none", "alertstate": "firing",
    "namespace": "ml", "pod": "ranker-7f9c6d5b4-abcde", "container": "ranker", **EXT,
}  # fmt: skip
NODE_DOWN = {  # kube-state-metrics' KubeNodeNotReady (kubernetes-system-kubelet.yaml)
    "alertname": "KubeNodeNotReady", "severity": "warning", "job": "kube-state-metrics",
    "instance": "10.244.0.108:8080", "container": "kube-state-metrics", "endpoint": "http",
    "service": "kps-kube-state-metrics", "pod": "kps-kube-state-metrics-6d5f8b7c9-abcde",
    "namespace": "monitoring", "node": "gpu-a100-1", "condition": "Ready", "status": "true", **EXT,
}  # fmt: skip


def _body(*labels: dict[str, str]) -> bytes:
    alerts = [{"status": "firing", "labels": lab, "startsAt": T0} for lab in labels]
    return json.dumps({"alerts": alerts, "top_k": 3}).encode()


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Any:
    tmp = tmp_path_factory.mktemp("hb")
    k = json.loads((DATA / "kps_cluster.json").read_text())
    model = build_graph(k["nodes"], k["pods"], k["services"], k["endpointslices"], cluster=C)
    with app_on_graph(tmp, DependencyGraph.from_model(model)) as c:
        yield c


def _post(client: TestClient, body: bytes) -> dict[str, Any]:
    r = client.post("/api/v1/rca", content=body, headers={"content-type": "application/json"})
    assert r.status_code == 200, r.text
    return r.json()


@pytest.mark.parametrize(
    "alerts",
    [[WATCHDOG], [INFO_INHIBITOR], [WATCHDOG, INFO_INHIBITOR]],
    ids=["watchdog", "info_inhibitor", "both"],
)
def test_heartbeats_alone_are_no_answer(client: TestClient, alerts: list[dict[str, str]]) -> None:
    out = _post(client, _body(*alerts))
    assert out["mapped_alerts"] == 0 and out["causes"] == []


def test_a_heartbeat_beside_real_alerts_changes_nothing(client: TestClient) -> None:
    """The ranking and the count with a Watchdog are what they were (the released GAT was
    trained on incidents that hold one)."""
    out = _post(client, _body(WATCHDOG, NODE_DOWN))
    assert out["mapped_alerts"] == 2 and out["causes"][0]["node"] == f"{C}/host/gpu-a100-1"


def test_ungrouped_names_and_the_dict_path(client: TestClient) -> None:
    """Every parse path (alert columns, alert dicts): a name of ``FLEETMIND_UNGROUPED_ALERTS``
    is a heartbeat whatever its severity; the list is the one given."""
    services = client.app.state.services
    model, graph = services.registry.current.rca, services.graphs.graph
    grafana = {"alertname": "DatasourceNoData", "severity": "critical", "rulename": "gpu-util"}
    # mapped alerts without an ungrouped name: severity "none" stays a heartbeat
    for body, evidence in (
        (_body(grafana), 1),
        (_body(WATCHDOG), 0),
        (_body(INFO_INHIBITOR, grafana), 2),
    ):
        for req, alerts in (parse_for(model.impl, graph, body), parse_alerts(body, True)):
            result = model.impl.find_root_causes(graph, alerts, req.top_k)
            out = json.loads(response_json(model, graph, alerts, req.top_k, result))
            assert out["mapped_alerts"] == 0 and out["causes"] == []
            kept = json.loads(response_json(model, graph, alerts, 3, result, frozenset()))
            assert kept["mapped_alerts"] == evidence and bool(kept["causes"]) == bool(evidence)
    _, cols = parse_for(model.impl, graph, _body(INFO_INHIBITOR))
    assert isinstance(cols, AlertColumns) and cols.labels is not None  # severity is read
