"""An exporter pod the graph does not hold yet (a DaemonSet rollout, a new ReplicaSet since the
last ``fleetmind graph build``) is still the exporter: its host and GPU alerts land on the host or
GPU, never on the exporter's Service.

The graph is ``fleetmind graph build --cluster prod-eu`` of ``tests/data/k8s/kps_cluster.json``
(kube-prometheus-stack release ``kps`` and the GPU Operator's dcgm-exporter, see
``tests/test_alert_mapping_kp.py``); the alerts come from pods with names it does not hold. Label
sets as the charts' defaults deliver them:

* node-exporter (prometheus-community/helm-charts ``charts/prometheus-node-exporter``:
  ``hostNetwork: true``, ``templates/servicemonitor.yaml`` without ``relabelings``): ``instance``
  ``<node InternalIP>:9100``, target labels ``job``/``service``/``namespace``/``pod``/
  ``container``/``endpoint``; ``NodeFilesystemSpaceFillingUp`` and ``NodeClockNotSynchronising``
  (kube-prometheus ``manifests/nodeExporter-prometheusRule.yaml``) keep them.
* kube-state-metrics (``charts/kube-state-metrics/templates/servicemonitor.yaml``,
  ``honorLabels: true``): ``KubeNodeNotReady`` (``kube_node_status_condition``, kube-prometheus
  ``kubernetesControlPlane-prometheusRule.yaml``) carries ``node`` and the exporter pod's target
  labels.
* dcgm-exporter (GPU Operator, no ``hostNetwork``, ``honorLabels: false``): ``gpu``, ``UUID``,
  ``device``, ``modelName``, ``Hostname`` (the exporter pod's name), ``DCGM_FI_DRIVER_VERSION``;
  the workload's ``pod``/``namespace`` become ``exported_pod``/``exported_namespace``.
* ``TargetDown`` (kube-prometheus ``kubePrometheus-prometheusRule.yaml``: ``count by (job,
  namespace, service)`` of ``up == 0``) is about the exporter itself and stays on its Service.

Before, the host alerts of a new node-exporter or kube-state-metrics pod and the XID of a new
dcgm-exporter pod landed on the exporter's own Service (its pod name starts like the DaemonSet's
or Deployment's pods).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fleetmind.data.graph import DependencyGraph
from fleetmind.data.graph_build import build_graph
from fleetmind.rca.features.mapping import map_alerts
from fleetmind.serving.alertmap import node_for_alert

DATA = Path(__file__).parent / "data" / "k8s"
C = "prod-eu"
EXT = {"prometheus": "monitoring/kps-prometheus"}
NEW_NE = "kps-prometheus-node-exporter-b8n3f"
NEW_DCGM = "nvidia-dcgm-exporter-w4d7k"
NEW_KSM = "kps-kube-state-metrics-7c8d9e0f1-vwxyz"


@pytest.fixture(scope="module")
def graph() -> DependencyGraph:
    k = json.loads((DATA / "kps_cluster.json").read_text())
    model = build_graph(k["nodes"], k["pods"], k["services"], k["endpointslices"], cluster=C)
    g = DependencyGraph.from_model(model)
    for pod in (NEW_NE, NEW_DCGM, NEW_KSM):
        assert not any(n.match.get("pod") == pod for n in g.nodes)
    return g


def _both(graph: DependencyGraph, labels: dict[str, str]) -> str | None:
    """The slow path's node, after checking that both fast paths agree with it."""
    slow = graph.node_for_alert(labels)
    assert node_for_alert(graph, labels) == slow
    (fast,) = map_alerts(graph, [{"labels": labels}])
    assert (None if fast is None else graph.nodes[fast].id) == slow
    return slow


def _alert(name: str, severity: str, **labels: str) -> dict[str, str]:
    return {"alertname": name, **labels, "severity": severity, **EXT}


def _ne(ip: str, **metric: str) -> dict[str, str]:
    return {"job": "node-exporter", "instance": f"{ip}:9100", "container": "node-exporter",
            "endpoint": "http-metrics", "service": "kps-prometheus-node-exporter",
            "namespace": "monitoring", "pod": NEW_NE, **metric}  # fmt: skip


def _dcgm(gpu: int, hostname: str, **metric: str) -> dict[str, str]:
    return {"job": "nvidia-dcgm-exporter", "instance": "10.244.0.199:9400",
            "container": "nvidia-dcgm-exporter", "endpoint": "gpu-metrics",
            "service": "nvidia-dcgm-exporter", "namespace": "gpu-operator", "pod": NEW_DCGM,
            "gpu": str(gpu), "UUID": f"GPU-gpu-a100-1-{gpu}", "device": f"nvidia{gpu}",
            "modelName": "NVIDIA A100-SXM4-80GB", "DCGM_FI_DRIVER_VERSION": "550.54.15",
            "Hostname": hostname, "xid": "79", **metric}  # fmt: skip


def _ksm(**metric: str) -> dict[str, str]:
    return {"job": "kube-state-metrics", "instance": "10.244.0.201:8080",
            "container": "kube-state-metrics", "endpoint": "http",
            "service": "kps-kube-state-metrics", "pod": NEW_KSM, "namespace": "monitoring",
            **metric}  # fmt: skip


FIXED = {
    "NodeFilesystemSpaceFillingUp": (
        _alert(
            "NodeFilesystemSpaceFillingUp",
            "warning",
            **_ne("10.0.1.10", device="/dev/nvme0n1p1", fstype="ext4", mountpoint="/"),
        ),
        f"{C}/host/gpu-a100-0",
    ),
    "NodeClockNotSynchronising": (
        _alert("NodeClockNotSynchronising", "warning", **_ne("10.0.1.20")),
        f"{C}/host/cpu-0",
    ),
    "KubeNodeNotReady_new_ksm_replicaset": (
        _alert("KubeNodeNotReady", "warning", **_ksm(node="gpu-a100-1", condition="Ready")),
        f"{C}/host/gpu-a100-1",
    ),
    # Hostname names the new pod, which the graph cannot place on a host: the GPU is not known,
    # the cluster is; never the exporter's Service.
    "GpuXidError_idle_gpu_hostname_new_pod": (
        _alert("GpuXidError", "critical", **_dcgm(3, NEW_DCGM)),
        C,
    ),
}
UNCHANGED = {
    "GpuXidError_idle_gpu_hostname_node": (  # Hostname is the node's: its GPU
        _alert("GpuXidError", "critical", **_dcgm(3, "gpu-a100-1")),
        f"{C}/gpu/gpu-a100-1/3",
    ),
    "GpuXidError_busy_gpu": (  # honorLabels: false: the workload's pod
        _alert(
            "GpuXidError",
            "critical",
            **_dcgm(3, NEW_DCGM, exported_pod="llama-train-1", exported_namespace="ml"),
        ),
        f"{C}/pod/ml/llama-train-1",
    ),
    "TargetDown_node_exporter": (  # about the exporter itself
        _alert(
            "TargetDown",
            "warning",
            job="node-exporter",
            namespace="monitoring",
            service="kps-prometheus-node-exporter",
        ),
        f"{C}/svc/monitoring/kps-prometheus-node-exporter",
    ),
    "app_alert_new_replicaset_pod": (  # a Service's own alert from its new pod: the Service
        _alert(
            "RankerHighLatency",
            "warning",
            job="ranker",
            instance="10.244.1.23:8080",
            container="ranker",
            endpoint="http",
            service="ranker",
            namespace="ml",
            pod="ranker-5b8f9c7d6-zzzzz",
        ),
        f"{C}/svc/ml/ranker",
    ),
    "app_alert_new_pod_with_gpu_label": (  # a Deployment's Service is no per-host exporter
        _alert(
            "RankerGpuMemoryHigh",
            "warning",
            job="ranker",
            instance="10.244.1.23:8080",
            service="ranker",
            namespace="ml",
            pod="ranker-5b8f9c7d6-zzzzz",
            gpu="0",
        ),
        f"{C}/svc/ml/ranker",
    ),
    "app_alert_host_network_new_pod": (  # hostNetwork: instance is the host's, still the Service
        _alert(
            "RankerHighLatency",
            "warning",
            job="ranker",
            instance="10.0.1.10:8080",
            service="ranker",
            namespace="ml",
            pod="ranker-5b8f9c7d6-zzzzz",
        ),
        f"{C}/svc/ml/ranker",
    ),
}


@pytest.mark.parametrize("case", sorted(FIXED))
def test_a_new_exporter_pods_host_alert_never_lands_on_its_service(
    graph: DependencyGraph, case: str
) -> None:
    labels, expected = FIXED[case]
    assert _both(graph, labels) == expected
    assert _both(graph, {**labels, "cluster": C}) == expected


@pytest.mark.parametrize("case", sorted(UNCHANGED))
def test_alerts_that_mapped_before_still_do(graph: DependencyGraph, case: str) -> None:
    labels, expected = UNCHANGED[case]
    assert _both(graph, labels) == expected
