"""Node alerts about a node the graph does not hold yet fall back to the cluster, not the exporter.

A node that joined after ``fleetmind graph build`` (the cluster autoscaler's) is no host of the
graph. kube-state-metrics' ``KubeNodeNotReady``/``KubeNodeUnreachable`` about it carry the
exporter's target labels (``pod``/``service``/``job`` of kube-state-metrics) beside ``node``, and
node-exporter's ``NodeFilesystemSpaceFillingUp`` carries ``instance=<InternalIP>:9100`` of the new
node and the new node-exporter pod's labels (kube-prometheus ``manifests/kubeStateMetrics-
prometheusRule.yaml`` and ``nodeExporter-prometheusRule.yaml``, as shipped by kube-prometheus-stack;
label sets as in ``tests/test_alert_mapping_kp.py``). They used to land on the kube-state-metrics
pod (or its Service when that pod is new too) and on the node-exporter Service, so an incident
opened on the exporter and named it the root cause; now the exporter is recognised as such and the
alert falls back as an unknown pod's does, to the cluster node.
"""

from __future__ import annotations

from typing import Any

import pytest
from kps_helpers import CLUSTER, EXT, KSM, NE, kps_graph

from fleetmind.data.graph import DependencyGraph
from fleetmind.serving.alertmap import node_for_alert

C = CLUSTER
FS = {"device": "/dev/nvme0n1p1", "fstype": "ext4", "mountpoint": "/"}
NOT_READY = {"alertname": "KubeNodeNotReady", "condition": "Ready", "status": "true"}

CASES: dict[str, tuple[dict[str, str], str]] = {
    "not_ready_new_node": ({**NOT_READY, **KSM, "node": "gpu-a100-9"}, C),
    "unreachable_new_node": (
        {
            "alertname": "KubeNodeUnreachable",
            **KSM,
            "node": "gpu-a100-9",
            "key": "node.kubernetes.io/unreachable",
            "effect": "NoSchedule",
        },
        C,
    ),
    "not_ready_new_node_new_ksm_pod": (
        {**NOT_READY, **KSM, "pod": "kps-kube-state-metrics-6d5f8b7c9-zzzzz", "node": "gpu-a100-9"},
        C,
    ),
    "filesystem_new_node": (
        {
            "alertname": "NodeFilesystemSpaceFillingUp",
            **NE,
            **FS,
            "instance": "10.0.1.99:9100",
            "pod": "kps-prometheus-node-exporter-qqqqq",
        },
        C,
    ),
    # unchanged: known nodes land on their host
    "not_ready_known_node": ({**NOT_READY, **KSM, "node": "gpu-a100-0"}, f"{C}/host/gpu-a100-0"),
    "filesystem_known_node": (
        {
            "alertname": "NodeFilesystemSpaceFillingUp",
            **NE,
            **FS,
            "instance": "10.0.1.10:9100",
            "pod": "kps-prometheus-node-exporter-7hq9d",
        },
        f"{C}/host/gpu-a100-0",
    ),
    # unchanged: a Deployment's own alert from a new pod, ``instance`` its pod address, is no
    # exporter's: it keeps its Service
    "app_alert_new_pod_pod_address": (
        {
            "alertname": "HighErrorRate",
            "namespace": "ml",
            "service": "ranker",
            "job": "ranker",
            "instance": "10.244.0.130:8080",
            "pod": "ranker-7f9c6d5b4-zzzzz",
        },
        f"{C}/svc/ml/ranker",
    ),
}


@pytest.fixture(scope="module")
def graph() -> DependencyGraph:
    return kps_graph()


@pytest.mark.parametrize("case", sorted(CASES))
def test_node_alerts_of_a_new_node_do_not_land_on_the_exporter(
    graph: DependencyGraph, case: str
) -> None:
    labels, expected = CASES[case]
    alert: dict[str, Any] = {**labels, "severity": "warning", **EXT}
    assert graph.node_for_alert(alert) == expected
    assert node_for_alert(graph, alert) == expected  # the service's fast path agrees
