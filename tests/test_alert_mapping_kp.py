"""kube-prometheus-stack's default alerts, with the label sets its scrape defaults give them, land
on their subject.

The cluster (``tests/data/k8s/kps_cluster.json``) is a kube-prometheus-stack release ``kps`` in
``monitoring`` with the GPU Operator's dcgm-exporter, two A100 nodes, a CPU node and a control
plane node; the graph is ``fleetmind graph build --cluster prod-eu`` of it. The label sets are the
ones Prometheus delivers with the charts' defaults:

* kube-state-metrics: its ServiceMonitor scrapes with ``honorLabels: true``
  (prometheus-community/helm-charts ``charts/kube-state-metrics/templates/servicemonitor.yaml``,
  ``honorLabels`` default ``true`` in ``values.yaml``), so a metric's own ``namespace`` wins and
  the target labels fill the rest: ``pod``/``service``/``container``/``endpoint`` of the
  kube-state-metrics pod, ``job="kube-state-metrics"``. The workload rules keep them:
  ``KubeDeploymentReplicasMismatch`` (``kube_deployment_spec_replicas`` vs
  ``kube_deployment_status_replicas_available``, labels ``namespace``, ``deployment``),
  ``KubeStatefulSetReplicasMismatch`` (``statefulset``), ``KubeDaemonSetRolloutStuck``
  (``daemonset``), ``KubeJobFailed`` (``kube_job_failed``, ``job_name``): kube-prometheus
  ``manifests/kubernetesControlPlane-prometheusRule.yaml`` (group ``kubernetes-apps``), shipped
  by kube-prometheus-stack as ``templates/prometheus/rules-1.14/kubernetes-apps.yaml``.
* node-exporter: ``charts/prometheus-node-exporter/templates/servicemonitor.yaml`` with no
  ``relabelings`` by default, the exporter on ``hostNetwork``: ``instance`` is
  ``<node InternalIP>:9100``, and no ``node`` label (``NodeFilesystemSpaceFillingUp``:
  kube-prometheus ``manifests/nodeExporter-prometheusRule.yaml``).
* dcgm-exporter: NVIDIA's chart scrapes with ``honorLabels: false``; without ``hostNetwork`` its
  ``Hostname`` label is the exporter pod's name.
* External labels: kube-prometheus-stack sets none but ``prometheus=<namespace>/<name>`` (the
  Prometheus Operator's default; ``prometheus_replica`` is dropped from alerts); ``cluster`` only
  where ``prometheus.prometheusSpec.externalLabels`` adds it.

Before, the workload alerts fell to the cluster node (or to the kube-state-metrics pod in its own
namespace), node-exporter's to the node-exporter pod, a pod-named ``Hostname`` to the dcgm pod, and
nothing mapped without ``cluster``: in a node-down storm the top cause moved from the host (0.95)
to the kubelet's Service (0.75).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from fleetmind.data.graph import DependencyGraph
from fleetmind.data.graph_build import build_graph
from fleetmind.rca.features.mapping import map_alerts
from fleetmind.serving.alertmap import node_for_alert

DATA = Path(__file__).parent / "data" / "k8s"
C = "prod-eu"
EXT = {"cluster": C, "prometheus": "monitoring/kps-prometheus"}
KSM = {
    "job": "kube-state-metrics",
    "instance": "10.244.0.108:8080",
    "container": "kube-state-metrics",
    "endpoint": "http",
    "service": "kps-kube-state-metrics",
    "pod": "kps-kube-state-metrics-6d5f8b7c9-abcde",
    "namespace": "monitoring",
}
NE_POD = {
    "gpu-a100-0": ("kps-prometheus-node-exporter-7hq9d", "10.0.1.10"),
    "cpu-0": ("kps-prometheus-node-exporter-zt5rw", "10.0.1.20"),
}


def _alert(name: str, severity: str, labels: dict[str, str]) -> dict[str, str]:
    return {"alertname": name, **labels, "severity": severity, **EXT}


def _ksm(**metric: str) -> dict[str, str]:
    """honorLabels: true: the metric's labels win, the target's fill the rest."""
    return {**KSM, **metric}


def _ne(node: str, **metric: str) -> dict[str, str]:
    pod, ip = NE_POD[node]
    return {"job": "node-exporter", "instance": f"{ip}:9100", "container": "node-exporter",
            "endpoint": "http-metrics", "service": "kps-prometheus-node-exporter",
            "namespace": "monitoring", "pod": pod, **metric}  # fmt: skip


def _dcgm(gpu: int, *, hostname_is_pod: bool = False, **metric: str) -> dict[str, str]:
    pod = "nvidia-dcgm-exporter-9fx2k"
    return {"job": "nvidia-dcgm-exporter", "instance": "10.244.0.105:9400",
            "container": "nvidia-dcgm-exporter", "endpoint": "gpu-metrics",
            "service": "nvidia-dcgm-exporter", "namespace": "gpu-operator", "pod": pod,
            "gpu": str(gpu), "UUID": f"GPU-gpu-a100-0-{gpu}", "device": f"nvidia{gpu}",
            "modelName": "NVIDIA A100-SXM4-80GB", "DCGM_FI_DRIVER_VERSION": "550.54.15",
            "Hostname": pod if hostname_is_pod else "gpu-a100-0", **metric}  # fmt: skip


WORKLOAD_CASES = {  # bug 3: a controller's alert lands on its Service, else on its pod
    "KubeDeploymentReplicasMismatch": (
        _alert(
            "KubeDeploymentReplicasMismatch", "warning", _ksm(namespace="ml", deployment="ranker")
        ),
        f"{C}/svc/ml/ranker",
    ),
    "KubeStatefulSetReplicasMismatch": (
        _alert(
            "KubeStatefulSetReplicasMismatch",
            "warning",
            _ksm(namespace="ml", statefulset="llama-train"),
        ),  # fmt: skip
        f"{C}/svc/ml/llama-train",
    ),
    "KubeDaemonSetRolloutStuck_dcgm": (
        _alert(
            "KubeDaemonSetRolloutStuck",
            "warning",
            _ksm(namespace="gpu-operator", daemonset="nvidia-dcgm-exporter"),
        ),  # fmt: skip
        f"{C}/svc/gpu-operator/nvidia-dcgm-exporter",
    ),
    "KubeJobFailed": (  # no Service selects the Job's pod: the pod
        _alert(
            "KubeJobFailed",
            "warning",
            _ksm(namespace="ml", job_name="eval-28391", condition="true"),
        ),
        f"{C}/pod/ml/eval-28391-x8k2m",
    ),
}
EXPORTER_CASES = {  # bugs 1, 2: never the exporter pod when the alert names a host or a workload
    "NodeFilesystemSpaceFillingUp": (
        _alert(
            "NodeFilesystemSpaceFillingUp",
            "warning",
            _ne("gpu-a100-0", device="/dev/nvme0n1p1", fstype="ext4", mountpoint="/"),
        ),  # fmt: skip
        f"{C}/host/gpu-a100-0",
    ),
    "NodeClockNotSynchronising": (
        _alert("NodeClockNotSynchronising", "warning", _ne("cpu-0")),
        f"{C}/host/cpu-0",
    ),
    "KubeDeploymentReplicasMismatch_monitoring": (  # in kube-state-metrics' own namespace
        _alert(
            "KubeDeploymentReplicasMismatch",
            "warning",
            _ksm(namespace="monitoring", deployment="kps-grafana"),
        ),  # fmt: skip
        f"{C}/svc/monitoring/kps-grafana",
    ),
    "KubeStatefulSetReplicasMismatch_alertmanager": (
        _alert(
            "KubeStatefulSetReplicasMismatch",
            "warning",
            _ksm(namespace="monitoring", statefulset="alertmanager-kps-alertmanager"),
        ),  # fmt: skip
        f"{C}/svc/monitoring/kps-alertmanager",
    ),
    "KubeDaemonSetRolloutStuck_node_exporter": (
        _alert(
            "KubeDaemonSetRolloutStuck",
            "warning",
            _ksm(namespace="monitoring", daemonset="kps-prometheus-node-exporter"),
        ),  # fmt: skip
        f"{C}/svc/monitoring/kps-prometheus-node-exporter",
    ),
}
HOSTNAME_CASES = {  # bug 8: Hostname names the dcgm-exporter pod: the host it runs on
    "GpuXidError_hostname_pod": (
        _alert("GpuXidError", "critical", _dcgm(3, hostname_is_pod=True, xid="79")),
        f"{C}/gpu/gpu-a100-0/3",
    ),
    "GpuXidError_hostname_pod_workload": (
        _alert(
            "GpuXidError",
            "critical",
            _dcgm(
                3,
                hostname_is_pod=True,
                exported_namespace="ml",
                exported_pod="llama-train-0",
                exported_container="llama",
                xid="79",
            ),
        ),  # fmt: skip
        f"{C}/gpu/gpu-a100-0/3",
    ),
}
UNCHANGED_CASES = {  # what mapped right before still does
    "KubePodCrashLooping": (
        _alert(
            "KubePodCrashLooping",
            "warning",
            _ksm(
                namespace="ml",
                pod="ranker-7f9c6d5b4-abcde",
                container="ranker",
                reason="CrashLoopBackOff",
            ),
        ),  # fmt: skip
        f"{C}/pod/ml/ranker-7f9c6d5b4-abcde",
    ),
    "KubeNodeNotReady": (
        _alert(
            "KubeNodeNotReady", "warning", _ksm(node="gpu-a100-1", condition="Ready", status="true")
        ),
        f"{C}/host/gpu-a100-1",
    ),
    "CPUThrottlingHigh": (  # instance is the kubelet's node IP; the pod is no kubelet member
        _alert(
            "CPUThrottlingHigh",
            "info",
            {
                "namespace": "ml",
                "pod": "ranker-7f9c6d5b4-abcde",
                "container": "ranker",
                "instance": "10.0.1.10:10250",
                "service": "kps-kubelet",
            },
        ),  # fmt: skip
        f"{C}/pod/ml/ranker-7f9c6d5b4-abcde",
    ),
    "GpuXidError_hostname_node": (
        _alert("GpuXidError", "critical", _dcgm(3, xid="79")),
        f"{C}/gpu/gpu-a100-0/3",
    ),
    "KubeletDown": (_alert("KubeletDown", "critical", {"job": "kubelet"}), C),
}
ALL_CASES = {**WORKLOAD_CASES, **EXPORTER_CASES, **HOSTNAME_CASES, **UNCHANGED_CASES}


def _cluster() -> dict[str, Any]:
    return json.loads((DATA / "kps_cluster.json").read_text())


@pytest.fixture(scope="module")
def graph() -> DependencyGraph:
    k = _cluster()
    model = build_graph(k["nodes"], k["pods"], k["services"], k["endpointslices"], cluster=C)
    return DependencyGraph.from_model(model)


def _both(graph: DependencyGraph, labels: dict[str, str]) -> str | None:
    """The slow path's node, after checking that both fast paths agree with it."""
    slow = graph.node_for_alert(labels)
    assert node_for_alert(graph, labels) == slow
    (fast,) = map_alerts(graph, [{"labels": labels}])
    assert (None if fast is None else graph.nodes[fast].id) == slow
    return slow


@pytest.mark.parametrize("case", sorted(WORKLOAD_CASES))
def test_a_workload_controller_alert_lands_on_its_service_or_pod(
    graph: DependencyGraph, case: str
) -> None:
    labels, expected = WORKLOAD_CASES[case]
    assert _both(graph, labels) == expected


@pytest.mark.parametrize("case", sorted(EXPORTER_CASES))
def test_an_exporter_pod_is_never_the_subject_of_a_host_or_workload_alert(
    graph: DependencyGraph, case: str
) -> None:
    labels, expected = EXPORTER_CASES[case]
    assert _both(graph, labels) == expected


def test_node_exporter_instance_ip_is_its_host(graph: DependencyGraph) -> None:
    """node-exporter's ``instance`` without relabelling is ``<InternalIP>:9100``: the host whose
    Node lists that address (before: ``node="10.0.1.10"``, which names nothing)."""
    labels, _ = EXPORTER_CASES["NodeFilesystemSpaceFillingUp"]
    assert graph.alert_subject(labels)["node"] == "gpu-a100-0"
    assert graph.node(f"{C}/host/gpu-a100-0").attrs["addresses"] == ["10.0.1.10"]


@pytest.mark.parametrize("case", sorted(HOSTNAME_CASES))
def test_a_hostname_naming_the_exporter_pod_is_that_pods_host(
    graph: DependencyGraph, case: str
) -> None:
    labels, expected = HOSTNAME_CASES[case]
    assert _both(graph, labels) == expected


@pytest.mark.parametrize("case", sorted(ALL_CASES))
def test_without_a_cluster_label_the_graphs_one_cluster_is_taken(
    graph: DependencyGraph, case: str
) -> None:
    """kube-prometheus-stack's default external labels are ``prometheus=<ns>/<name>`` only."""
    labels, expected = ALL_CASES[case]
    assert _both(graph, {k: v for k, v in labels.items() if k != "cluster"}) == expected


def test_without_a_cluster_label_two_clusters_map_nothing(graph: DependencyGraph) -> None:
    """With two clusters, an alert without ``cluster`` could be either's: it stays unmapped."""
    other = DependencyGraph.from_json(
        {
            **graph.to_json(),
            "nodes": [
                *graph.to_json()["nodes"],
                {
                    "id": "prod-us",
                    "kind": "cluster",
                    "cluster": "prod-us",
                    "match": {"cluster": "prod-us"},
                },
            ],
        }  # fmt: skip
    )
    labels, _ = EXPORTER_CASES["NodeClockNotSynchronising"]
    assert _both(other, {k: v for k, v in labels.items() if k != "cluster"}) is None
    assert _both(other, labels) == f"{C}/host/cpu-0"


@pytest.mark.parametrize("case", sorted(UNCHANGED_CASES))
def test_alerts_that_mapped_before_still_do(graph: DependencyGraph, case: str) -> None:
    labels, expected = UNCHANGED_CASES[case]
    assert _both(graph, labels) == expected


def test_a_deployment_whose_service_lost_a_not_ready_pod_still_lands_on_it() -> None:
    """A Service whose slices dropped a not-ready pod (a node down) selects only the Deployment's
    pods still: the alert lands on it, not on a pod."""
    k = _cluster()
    for sl in k["endpointslices"]["items"]:
        if sl["metadata"]["name"] == "ranker-x1":
            sl["endpoints"][1]["conditions"]["ready"] = False
    g = DependencyGraph.from_model(
        build_graph(k["nodes"], k["pods"], k["services"], k["endpointslices"], cluster=C)
    )
    labels, expected = WORKLOAD_CASES["KubeDeploymentReplicasMismatch"]
    assert _both(g, labels) == expected


def _storm() -> list[dict[str, Any]]:
    """The hunter's node ``gpu-a100-1`` NotReady storm (``rca_no_xid.json``): exporters' targets
    down, the node NotReady and unreachable, its pods not ready, their controllers short."""
    labels = [
        {
            "job": "node-exporter",
            "namespace": "monitoring",
            "service": "kps-prometheus-node-exporter",
        },
        {
            "job": "nvidia-dcgm-exporter",
            "namespace": "gpu-operator",
            "service": "nvidia-dcgm-exporter",
        },
        {"job": "kubelet", "namespace": "kube-system", "service": "kps-kubelet"},
    ]
    alerts = [_alert("TargetDown", "warning", lab) for lab in labels]
    alerts += [
        _alert(
            "KubeNodeNotReady", "warning", _ksm(node="gpu-a100-1", condition="Ready", status="true")
        ),
        _alert(
            "KubeNodeUnreachable",
            "warning",
            _ksm(node="gpu-a100-1", key="node.kubernetes.io/unreachable", effect="NoSchedule"),
        ),  # fmt: skip
        _alert("KubePodNotReady", "warning", {"namespace": "ml", "pod": "llama-train-1"}),
        _alert("KubePodNotReady", "warning", {"namespace": "ml", "pod": "ranker-7f9c6d5b4-fghij"}),
        WORKLOAD_CASES["KubeDeploymentReplicasMismatch"][0],
        WORKLOAD_CASES["KubeStatefulSetReplicasMismatch"][0],
        EXPORTER_CASES["KubeDaemonSetRolloutStuck_node_exporter"][0],
        WORKLOAD_CASES["KubeDaemonSetRolloutStuck_dcgm"][0],
    ]
    starts = [600] * 3 + [900] * 4 + [960] * 4
    return [{"status": "firing", "labels": lab, "startsAt": 1_780_000_000 + t,
             "endsAt": "0001-01-01T00:00:00Z"} for lab, t in zip(alerts, starts, strict=True)]  # fmt: skip


def test_a_node_down_storm_ranks_the_host_first(graph: DependencyGraph) -> None:
    """Through the released model: the down host first (before: the kubelet's Service, 0.75)."""
    from fleetmind.rca.gat_analyzer import GATAnalyzer

    result = GATAnalyzer.load(None).find_root_causes(graph, _storm(), top_k=3)
    assert result.causes[0].node == f"{C}/host/gpu-a100-1"
    assert result.causes[0].score > 0.9
