"""Managed-cluster defaults: GKE's own GPU labels, and accelerators FleetMind does not model.

GKE runs its own NVIDIA device plugin and no GPU feature discovery by default, so its nodes carry
neither ``nvidia.com/gpu.product`` nor ``nvidia.com/gpu.replicas``:

* the GPU type is node label ``cloud.google.com/gke-accelerator`` (values from GKE's "Run GPUs in
  GKE Standard node pools", https://cloud.google.com/kubernetes-engine/docs/how-to/gpus:
  ``nvidia-h100-80gb`` is the A3 High machine series' H100 80 GB);
* time-sharing and MPS advertise allocatable ``nvidia.com/gpu`` = GPUs x
  ``cloud.google.com/gke-max-shared-clients-per-gpu`` (GKE's "Share GPUs with multiple workloads
  using GPU time-sharing", https://cloud.google.com/kubernetes-engine/docs/how-to/timesharing-gpus),
  which kube-state-metrics exports as ``label_cloud_google_com_gke_max_shared_clients_per_gpu``
  of ``kube_node_labels`` (every character not a letter, digit or ``_`` becomes ``_``).

Other vendors' device plugins advertise ``amd.com/gpu`` (ROCm/k8s-device-plugin),
``habana.ai/gaudi`` (Intel Gaudi device plugin), ``google.com/tpu`` (GKE TPU node pools) and
``gpu.intel.com/i915`` (intel/intel-device-plugins-for-kubernetes).
"""

from __future__ import annotations

import warnings
from typing import Any

import pytest

from fleetmind.data.graph_build import GraphBuildWarning, build_graph
from fleetmind.serving.scheduler.extender import NodeIndex, decide
from fleetmind.serving.scheduler.placement import BestFitPlacer, Reservations
from fleetmind.serving.telemetry.base import FleetSnapshot
from fleetmind.serving.telemetry.doctor import _missing_gpus
from fleetmind.serving.telemetry.prometheus import build_nodes

GKE_NODE = "gke-pool-abc123-x9zq"
H100 = "NVIDIA H100 80GB HBM3"
Sample = tuple[str, dict[str, str], float]


def _node(name: str, labels: dict[str, str], capacity: dict[str, str]) -> dict[str, Any]:
    """A ``v1.Node`` as the API lists it (capacity = allocatable)."""
    cap = {"cpu": "208", "memory": "1870000000Ki", **capacity}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": labels},
        "status": {"capacity": cap, "allocatable": dict(cap)},
    }


def _build(nodes: list[dict[str, Any]], **kw: Any) -> tuple[Any, list[str]]:
    """The graph of ``nodes`` (no pods, no services) and the GraphBuildWarnings it printed."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        g = build_graph({"items": nodes}, {"items": []}, {"items": []}, cluster="prod", **kw)
    return g, [str(w.message) for w in caught if issubclass(w.category, GraphBuildWarning)]


def _gke_a3(name: str = GKE_NODE, accelerator: str = "nvidia-h100-80gb") -> dict[str, Any]:
    """An A3 High node as GKE labels it: no GPU feature discovery labels."""
    labels = {
        "cloud.google.com/gke-accelerator": accelerator,
        "cloud.google.com/gke-gpu": "true",
        "node.kubernetes.io/instance-type": "a3-highgpu-8g",
    }
    return _node(name, labels, {"nvidia.com/gpu": "8"})


def test_gke_accelerator_label_names_the_model_and_template_links() -> None:
    g, warned = _build([_gke_a3()], template_links=True)
    hosts = {n.id: n for n in g.nodes if n.kind == "host"}
    assert hosts[f"prod/host/{GKE_NODE}"].attrs["gpu_model"] == "NVIDIA-H100-80GB-HBM3"
    links = [n for n in g.nodes if n.kind == "link"]
    assert len(links) == 28  # every pair of the 8 NVSwitch-connected H100s
    assert {n.attrs["model"] for n in g.nodes if n.kind == "gpu"} == {"NVIDIA-H100-80GB-HBM3"}
    assert warned == []


def test_gfd_product_label_wins_over_the_gke_accelerator() -> None:
    node = _gke_a3()
    node["metadata"]["labels"]["nvidia.com/gpu.product"] = "NVIDIA-H100-80GB-HBM3-SHARED"
    node["metadata"]["labels"]["cloud.google.com/gke-accelerator"] = "nvidia-l4"
    g, _ = _build([node])
    (host,) = [n for n in g.nodes if n.kind == "host"]
    assert host.attrs["gpu_model"] == "NVIDIA-H100-80GB-HBM3"


def test_gpu_host_without_a_model_warns_once_naming_the_hosts() -> None:
    eks = _node("ip-10-0-1-23.ec2.internal", {"k8s.amazonaws.com/accelerator": "nvidia-tesla-h100"},
                {"nvidia.com/gpu": "8"})  # fmt: skip
    unknown_gke = _gke_a3("gke-pool-rtx-1", accelerator="nvidia-rtx-pro-6000")
    g, warned = _build([eks, unknown_gke, _gke_a3()], template_links=True)
    assert len(warned) == 1
    assert "2 GPU host(s)" in warned[0] and "nvidia.com/gpu.product" in warned[0]
    assert "ip-10-0-1-23.ec2.internal" in warned[0] and "gke-pool-rtx-1" in warned[0]
    assert "nvidia-rtx-pro-6000" in warned[0] and GKE_NODE not in warned[0]
    assert {n.id.split("/")[2] for n in g.nodes if n.kind == "link"} == {GKE_NODE}
    # without --template-links nothing is missed, nothing said
    assert _build([eks, unknown_gke], template_links=False)[1] == []


@pytest.mark.parametrize(
    ("resource", "labels"),
    [
        ("amd.com/gpu", {"amd.com/gpu.product-name": "AMD_Instinct_MI300X_OAM"}),
        ("habana.ai/gaudi", {"habana.ai/gaudi": "true"}),
        ("google.com/tpu", {"cloud.google.com/gke-tpu-accelerator": "tpu-v5-lite-podslice"}),
        ("gpu.intel.com/i915", {}),
    ],
)
def test_other_vendors_accelerators_are_named_not_dropped(
    resource: str, labels: dict[str, str]
) -> None:
    nv = _node("nv-1", {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}, {"nvidia.com/gpu": "8"})
    other = _node("acc-1", labels, {resource: "8"})
    idle = _node("acc-0", labels, {resource: "0"})  # kubelet's stale "0" of a gone plugin
    g, warned = _build([nv, other, idle, _node("cpu-1", {}, {})])
    assert len(warned) == 1
    assert "not modelled" in warned[0] and "NVIDIA GPUs only" in warned[0]
    assert "1 node(s)" in warned[0] and "'acc-1'" in warned[0] and f"{resource} x8" in warned[0]
    assert "acc-0" not in warned[0] and "nv-1" not in warned[0]
    assert sum(n.kind == "gpu" for n in g.nodes) == 8  # the NVIDIA node's only


def _gke_timeshared_ksm(labels: dict[str, str]) -> list[Sample]:
    """kube-state-metrics of a 2-GPU GKE node time-shared 4 ways: allocatable 8 devices."""
    ksm: list[Sample] = [
        ("kube_node_status_allocatable", {"node": GKE_NODE, "resource": "cpu"}, 200.0),
        ("kube_node_status_allocatable", {"node": GKE_NODE, "resource": "memory"}, 1e12),
        ("node_gpus", {"__name__": "kube_node_status_capacity", "node": GKE_NODE,
                       "resource": "nvidia_com_gpu"}, 8.0),
        ("node_gpus", {"__name__": "kube_node_status_allocatable", "node": GKE_NODE,
                       "resource": "nvidia_com_gpu"}, 8.0),
        ("node_gpu_replicas", {"node": GKE_NODE, **labels}, 1.0),
    ]  # fmt: skip
    for g in range(2):
        ksm.append(("kube_pod_info", {"node": GKE_NODE, "pod": f"infer-{g}", "namespace": "ml",
                                      "uid": f"u{g}"}, 1.0))  # fmt: skip
    return ksm


def _dcgm_two_gpus() -> list[Sample]:
    """dcgm-exporter: 2 H100s, each with one pod of GKE time-sharing on it."""
    out: list[Sample] = []
    for g in range(2):
        lab = {"gpu": str(g), "UUID": f"GPU-{g}", "modelName": H100, "Hostname": GKE_NODE,
               "exported_pod": f"infer-{g}", "exported_namespace": "ml"}  # fmt: skip
        out += [("DCGM_FI_DEV_FB_USED", lab, 9000.0), ("DCGM_FI_DEV_FB_FREE", lab, 72559.0),
                ("DCGM_FI_DEV_GPU_UTIL", lab, 30.0)]  # fmt: skip
    return out


GKE_SHARING = {
    "label_cloud_google_com_gke_max_shared_clients_per_gpu": "4",
    "label_cloud_google_com_gke_gpu_sharing_strategy": "time-sharing",
}


def test_gke_shared_clients_label_sets_the_replicas() -> None:
    (node,) = build_nodes(_dcgm_two_gpus(), _gke_timeshared_ksm(GKE_SHARING))
    assert node.gpu_replicas == 4
    assert [(g.index, g.healthy, g.free_milli) for g in node.gpus] == [
        (0, True, 750),
        (1, True, 750),
    ]
    pod = {
        "metadata": {"name": "p", "namespace": "ml", "uid": "uid-p"},
        "spec": {"containers": [{"name": "m", "resources": {"limits": {
            "cpu": "1", "memory": "1Gi", "nvidia.com/gpu": "1"}}}]},
    }  # fmt: skip
    snap = FleetSnapshot(source="t", nodes=[node])
    _, d = decide({"Pod": pod, "NodeNames": [GKE_NODE]}, snap, Reservations(), BestFitPlacer(),
                  NodeIndex())  # fmt: skip
    assert [o.node for o in d.options] == [GKE_NODE] and not d.failed


@pytest.mark.parametrize(
    ("labels", "replicas"),
    [
        ({"label_nvidia_com_gpu_replicas": "4"}, 4),
        ({"label_nvidia_com_gpu_replicas": "2", **GKE_SHARING}, 4),
        ({"label_nvidia_com_gpu_replicas": "4",
          "label_cloud_google_com_gke_max_shared_clients_per_gpu": "bogus"}, 4),
        ({}, 1),
    ],
)  # fmt: skip
def test_replicas_are_the_larger_of_the_gfd_and_gke_labels(
    labels: dict[str, str], replicas: int
) -> None:
    (node,) = build_nodes(_dcgm_two_gpus(), _gke_timeshared_ksm(labels))
    assert node.gpu_replicas == replicas


def test_doctor_names_the_gke_label_for_the_allowlist() -> None:
    (node,) = build_nodes(_dcgm_two_gpus(), _gke_timeshared_ksm({}))  # the label not exported
    (finding,) = _missing_gpus(FleetSnapshot(source="t", nodes=[node]))
    assert "cloud.google.com/gke-max-shared-clients-per-gpu" in finding.message
    assert "nvidia.com/gpu.replicas" in finding.message
