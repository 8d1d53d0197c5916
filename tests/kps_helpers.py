"""The kube-prometheus-stack test cluster (``tests/data/k8s/kps_cluster.json``) as a graph, and
the target labels its exporters' alerts carry (as in ``tests/test_alert_mapping_kp.py``)."""

from __future__ import annotations

import json
from pathlib import Path

from fleetmind.data.graph import DependencyGraph
from fleetmind.data.graph_build import build_graph

KPS = Path(__file__).parent / "data" / "k8s" / "kps_cluster.json"
CLUSTER = "prod-eu"
EXT = {"prometheus": "monitoring/kps-prometheus"}
"""External labels of the chart's Prometheus."""
KSM = {
    "job": "kube-state-metrics",
    "instance": "10.244.0.108:8080",
    "container": "kube-state-metrics",
    "endpoint": "http",
    "service": "kps-kube-state-metrics",
    "pod": "kps-kube-state-metrics-6d5f8b7c9-abcde",
    "namespace": "monitoring",
}
"""Target labels of kube-state-metrics' series (``KubeNodeNotReady``, ``KubePodCrashLooping``)."""
NE = {
    "job": "node-exporter",
    "container": "node-exporter",
    "endpoint": "http-metrics",
    "service": "kps-prometheus-node-exporter",
    "namespace": "monitoring",
}
"""Target labels of node-exporter's series, less its ``pod`` and ``instance``."""


def kps_graph() -> DependencyGraph:
    """The graph ``fleetmind graph build`` makes of the test cluster (cluster ``prod-eu``)."""
    k = json.loads(KPS.read_text())
    model = build_graph(k["nodes"], k["pods"], k["services"], k["endpointslices"], cluster=CLUSTER)
    return DependencyGraph.from_model(model)
