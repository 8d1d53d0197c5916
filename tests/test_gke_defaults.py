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
from collections import Counter
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


def test_gke_a4x_gb200_node_gets_the_gb200_tray_links() -> None:
    """A4X: ``nvidia-gb200``, 4 GB200 per ``a4x-highgpu-4g`` node (GKE's GPU page; ``gb200-4`` of
    ``src/xpk/core/system_characteristics.py`` in AI-Hypercomputer/xpk, ``chips_per_vm=4``)."""
    labels = {
        "cloud.google.com/gke-accelerator": "nvidia-gb200",
        "cloud.google.com/gke-gpu": "true",
        "node.kubernetes.io/instance-type": "a4x-highgpu-4g",
    }
    gke = _node("gke-a4x-1", labels, {"nvidia.com/gpu": "4"})
    gfd = _node("gfd-gb200-1", {"nvidia.com/gpu.product": "NVIDIA-GB200"}, {"nvidia.com/gpu": "4"})
    g, warned = _build([gke, gfd], template_links=True)
    assert warned == []  # before: "no GPU model ... no cloud.google.com/gke-accelerator value"
    hosts = {n.id: n for n in g.nodes if n.kind == "host"}
    assert hosts["prod/host/gke-a4x-1"].attrs["gpu_model"] == "NVIDIA-GB200"
    links = Counter(n.id.split("/")[2] for n in g.nodes if n.kind == "link")
    assert links["gke-a4x-1"] == links["gfd-gb200-1"] == 6  # every pair of the tray's 4 GPUs


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
    assert "1 host(s) in the graph without GPU nodes: 'acc-1'" in warned[0]
    assert "NVIDIA GPUs only (" not in warned[0]


def test_other_devices_beside_nvidia_gpus_are_not_called_hosts_without_gpu_nodes() -> None:
    """An Intel integrated GPU (``gpu.intel.com/i915``, intel/intel-device-plugins-for-kubernetes)
    beside two NVIDIA GPUs: the host keeps its 2 GPU nodes, so the warning must not say it has
    none (it said "their hosts are in the graph without GPU nodes" of every node)."""
    ws = _node(
        "ws-1",
        {"nvidia.com/gpu.product": "NVIDIA-RTX-6000-Ada-Generation"},
        {"nvidia.com/gpu": "2", "gpu.intel.com/i915": "1"},
    )
    gaudi = _node("gaudi-1", {"habana.ai/gaudi": "true"}, {"habana.ai/gaudi": "8"})
    g, warned = _build([ws, gaudi])
    assert sum(n.kind == "gpu" for n in g.nodes) == 2
    assert len(warned) == 1
    assert "accelerators of 2 node(s) not modelled" in warned[0]
    assert "1 host(s) in the graph without GPU nodes: 'gaudi-1' (habana.ai/gaudi x8)" in warned[0]
    assert (
        "1 host(s) in the graph with their NVIDIA GPUs only: 'ws-1' (gpu.intel.com/i915 x1)"
        in warned[0]
    )
    _, alone = _build([ws])
    assert len(alone) == 1 and "without GPU nodes" not in alone[0] and "'ws-1'" in alone[0]


def test_amd_network_operator_nics_are_no_accelerators() -> None:
    """``amd.com/nic`` / ``amd.com/vnic`` (ROCm/network-operator ``docs/device_plugin/
    deviceplugin.md``: the AI NICs' PFs and VFs) on an H100 node: no warning of devices not
    modelled (the ``amd_com_.+`` pattern took them for AMD GPUs)."""
    nic = {"nvidia.com/gpu": "8", "amd.com/nic": "8", "amd.com/vnic": "8"}
    labels = {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}
    _, warned = _build([_node("h100-pollara-1", labels, nic)])
    assert warned == []


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
