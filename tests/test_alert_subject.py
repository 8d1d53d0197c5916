"""Alerts land on the node they are about, not on the exporter that reported them.

A graph built from a cluster holds the monitoring stack's own pods. Alerts as kube-prometheus-stack
delivers them keep the scrape target's labels: a Prometheus Operator ``ServiceMonitor`` gives every
series ``namespace``, ``pod``, ``service``, ``container`` and ``endpoint`` of the exporter's
endpoint (prometheus-operator ``pkg/prometheus/promcfg.go``, the target relabelling of
``generateServiceMonitorConfig``), and kube-prometheus' rules keep them (``KubeNodeNotReady``:
``kube_node_status_condition{job="kube-state-metrics",condition="Ready",status="true"} == 0``,
``kubernetesControlPlane-prometheusRule.yaml``). dcgm-exporter's chart scrapes with
``honorLabels: false`` (``deployment/templates/service-monitor.yaml``), so the workload pod the
exporter names becomes ``exported_pod``/``exported_namespace``; its ``Hostname`` is the node's
name under ``hostNetwork``. kube-prometheus-stack's node-exporter ServiceMonitor sets ``instance``
to the node's name (its ``relabelings`` of ``__meta_kubernetes_pod_node_name``).

Matched by label count alone, ``KubeNodeNotReady`` landed on the kube-state-metrics pod (3 labels
against the host's 2) and a GPU's XID on the dcgm-exporter pod (``Hostname`` was not read).
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from fleetmind.data.graph import DependencyGraph
from fleetmind.data.graph_build import build_graph
from fleetmind.rca.features.mapping import map_alerts

DATA = Path(__file__).parent / "data" / "k8s"
C = "prod"


def _pod(ns: str, name: str, node: str, app: str, owner: str) -> dict[str, Any]:
    return {
        "metadata": {
            "name": name,
            "namespace": ns,
            "uid": f"p-{name}",
            "labels": {"app": app},
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": owner, "name": app, "uid": app}],
        },
        "spec": {"nodeName": node, "containers": [{"name": app, "image": "x"}]},
        "status": {"phase": "Running", "podIP": "10.244.9.9"},
    }


def _svc(ns: str, name: str, app: str) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": ns, "uid": f"s-{name}"},
        "spec": {"selector": {"app": app}, "ports": [{"port": 8080}], "type": "ClusterIP"},
    }


@pytest.fixture(scope="module")
def graph() -> DependencyGraph:
    """The recorded cluster plus its monitoring stack (labels and owners as the charts set them)."""
    nodes, pods, services = (
        json.loads((DATA / f"api_{k}.json").read_text()) for k in ("nodes", "pods", "services")
    )
    pods, services = copy.deepcopy(pods), copy.deepcopy(services)
    pods["items"] += [
        _pod("monitoring", "kube-state-metrics-6b8c9d7f5-x7k2p", "cpu-0", "ksm", "ReplicaSet"),
        _pod("monitoring", "node-exporter-q8r2t", "gpu-a100-0", "node-exporter", "DaemonSet"),
        _pod("gpu-operator", "dcgm-exporter-abcde", "gpu-a100-1", "dcgm-exporter", "DaemonSet"),
    ]
    services["items"] += [
        _svc("monitoring", "kube-state-metrics", "ksm"),
        _svc("monitoring", "prometheus-node-exporter", "node-exporter"),
        _svc("gpu-operator", "dcgm-exporter", "dcgm-exporter"),
    ]
    return DependencyGraph.from_model(build_graph(nodes, pods, services, cluster=C))


KSM = {
    "container": "kube-state-metrics",
    "endpoint": "http",
    "instance": "10.244.9.9:8080",
    "job": "kube-state-metrics",
    "namespace": "monitoring",
    "pod": "kube-state-metrics-6b8c9d7f5-x7k2p",
    "service": "kube-state-metrics",
    "cluster": C,
}
DCGM = {
    "container": "exporter",
    "endpoint": "metrics",
    "instance": "10.244.9.9:9400",
    "job": "dcgm-exporter",
    "namespace": "gpu-operator",
    "pod": "dcgm-exporter-abcde",
    "service": "dcgm-exporter",
    "cluster": C,
    "gpu": "1",
    "UUID": "GPU-8f6b1f3c-0d51-4f0e-9a6e-1b2c3d4e5f60",
    "device": "nvidia1",
    "modelName": "NVIDIA A100-SXM4-80GB",
    "Hostname": "gpu-a100-1",
}

CASES = [
    (  # a node alert of kube-state-metrics: about the node, not the exporter
        {**KSM, "alertname": "KubeNodeNotReady", "node": "gpu-a100-1", "condition": "Ready"},
        f"{C}/host/gpu-a100-1",
    ),
    (  # a pod alert of kube-state-metrics (honorLabels: true): about the pod
        {**KSM, "alertname": "KubePodCrashLooping", "namespace": "ml", "pod": "ranker-1"},
        f"{C}/pod/ml/ranker-1",
    ),
    (  # the exporter's own trouble: no node named, the exporter pod it is
        {**KSM, "alertname": "KubeStateMetricsListErrors"},
        f"{C}/pod/monitoring/kube-state-metrics-6b8c9d7f5-x7k2p",
    ),
    (  # dcgm-exporter with hostNetwork: the GPU, by Hostname
        {**DCGM, "alertname": "GPUXidError", "xid": "79"},
        f"{C}/gpu/gpu-a100-1/1",
    ),
    (  # ...and with the workload renamed exported_pod by honorLabels: false
        {
            **DCGM,
            "alertname": "GPUXidError",
            "exported_pod": "ranker-1",
            "exported_namespace": "ml",
        },
        f"{C}/gpu/gpu-a100-1/1",
    ),
    (  # a workload alert through dcgm-exporter's pod mapping: the workload pod
        {
            **{k: v for k, v in DCGM.items() if k not in ("gpu", "UUID", "device", "Hostname")},
            "alertname": "GPUMemoryNearlyFull",
            "exported_pod": "ranker-1",
            "exported_namespace": "ml",
        },
        f"{C}/pod/ml/ranker-1",
    ),
    (  # node-exporter through kube-prometheus-stack: instance is the node's name
        {
            "alertname": "NodeFilesystemSpaceFillingUp",
            "container": "node-exporter",
            "endpoint": "http-metrics",
            "instance": "gpu-a100-0",
            "job": "node-exporter",
            "namespace": "monitoring",
            "pod": "node-exporter-q8r2t",
            "service": "prometheus-node-exporter",
            "mountpoint": "/",
            "cluster": C,
        },
        f"{C}/host/gpu-a100-0",
    ),
    (  # a kubelet (cAdvisor) series keeps its pod: the pod is no member of the kubelet Service
        {
            "alertname": "KubeContainerOOMKilled",
            "service": "kubelet",
            "node": "gpu-a100-1",
            "namespace": "ml",
            "pod": "ranker-1",
            "container": "main",
            "cluster": C,
        },
        f"{C}/pod/ml/ranker-1",
    ),
]


@pytest.mark.parametrize(("labels", "expected"), CASES, ids=[c[0]["alertname"] for c in CASES])
def test_alerts_land_on_their_subject(
    graph: DependencyGraph, labels: dict[str, str], expected: str
) -> None:
    assert graph.node_for_alert(labels) == expected
    (fast,) = map_alerts(graph, [{"labels": labels}])  # the fast path the models use agrees
    assert fast is not None and graph.nodes[fast].id == expected


def test_a_hostname_that_names_an_exporter_pod_is_its_host(graph: DependencyGraph) -> None:
    """dcgm-exporter without hostNetwork reports its pod's name as Hostname: the host that pod
    runs on is the node (it named no host before, and the alert fell to the exporter's pod)."""
    labels = {**DCGM, "alertname": "GPUXidError", "Hostname": "dcgm-exporter-abcde"}
    assert graph.alert_subject(labels)["node"] == "gpu-a100-1"
    assert graph.node_for_alert(labels) == f"{C}/gpu/gpu-a100-1/1"
    (fast,) = map_alerts(graph, [{"labels": labels}])
    assert fast is not None and graph.nodes[fast].id == f"{C}/gpu/gpu-a100-1/1"


def test_a_hostname_that_names_nothing_is_passed_over(graph: DependencyGraph) -> None:
    """A Hostname that names no host nor pod of the graph: ``instance`` stands in as before, and
    the subject is whatever else the labels name."""
    labels = {**DCGM, "alertname": "GPUXidError", "Hostname": "dcgm-exporter-gone"}
    assert graph.alert_subject(labels)["node"] == "10.244.9.9"
    labels["node"] = "gpu-a100-1"  # the usual relabelling of __meta_kubernetes_pod_node_name
    assert graph.node_for_alert(labels) == f"{C}/gpu/gpu-a100-1/1"
