"""MIG nodes keep their physical GPU identity: placeholders, cluster health, fleet-view marks and
the ``nvml`` source count physical GPUs, not MIG instances.

Upstream behaviour modelled:

* NVIDIA/mig-parted ``deployments/gpu-operator/reconfigure-mig.sh`` (the GPU Operator's MIG
  manager): before it applies a new MIG layout it sets ``nvidia.com/gpu.deploy.device-plugin``
  (and the dcgm-exporter, GFD and DCGM deploy labels) to ``paused-for-mig-change``
  (``maybe_set_paused``), waits for those pods to be deleted, applies the layout with
  ``nvidia-mig-parted apply`` and sets the labels back to ``true``; it never cordons the node.
  Meanwhile the kubelet keeps the stopped plugin's devices in capacity with allocatable 0.
* NVIDIA/k8s-device-plugin MIG ``single`` strategy: every MIG instance is one ``nvidia.com/gpu``
  device, and GPU feature discovery labels ``nvidia.com/gpu.product`` ``<model>-MIG-<profile>``.
* dcgm-exporter labels a MIG instance's series with its physical GPU (``gpu``) and
  ``GPU_I_ID``/``GPU_I_PROFILE``; FleetMind indexes the instance ``100 * (gpu + 1) + GI``.
* NVML ``nvmlDeviceGetMigMode`` returns ``[current, pending]`` (nvidia-ml-py ``pynvml.py``);
  ``nvidia-smi -i N -mig 1`` sets pending to 1 until the GPU is reset, and
  ``nvmlDeviceGetMaxMigDeviceCount`` "returns zero if MIG is not supported or enabled"
  (https://docs.nvidia.com/deploy/nvml-api/).
"""

from __future__ import annotations

from typing import Any

import pynvml
import pytest

from fleetmind.data.graph import DependencyGraph
from fleetmind.serving.health import HealthModel, fleet_health, snapshot_signals
from fleetmind.serving.scheduler.extender import NodeIndex, decide
from fleetmind.serving.scheduler.placement import BestFitPlacer, Reservations
from fleetmind.serving.telemetry import doctor
from fleetmind.serving.telemetry.base import FleetSnapshot, GpuState, NodeState
from fleetmind.serving.telemetry.nvml import NvmlSource
from fleetmind.serving.telemetry.prometheus import Sample, build_nodes
from fleetmind.serving.ui.router import _fleet_node
from tests.test_fleet_health_k8s import _mig, dcgm, ksm_node
from tests.test_telemetry_nvml_faults import _fake_devices

H100_MIG_1G = "NVIDIA-H100-80GB-HBM3-MIG-1g.10gb"  # GFD's product label, single strategy


def _labels(node: str, product: str = "", plugin: str = "") -> Sample:
    """The fleet query's ``node_gpu_replicas`` answer (``kube_node_labels``) for ``node``."""
    lab = {"node": node}
    if product:
        lab["label_nvidia_com_gpu_product"] = product
    if plugin:
        lab["label_nvidia_com_gpu_deploy_device_plugin"] = plugin
    return ("node_gpu_replicas", lab, 1.0)


def _busy(node: str) -> list[Sample]:
    """dcgm-exporter samples of 8 busy H100s on ``node`` (80 % utilisation, 50 GB used)."""
    values = {"DCGM_FI_DEV_GPU_UTIL": 80.0, "DCGM_FI_DEV_FB_USED": 50000.0,
              "DCGM_FI_DEV_FB_FREE": 31559.0}  # fmt: skip
    return [(m, lab, values.get(m, v)) for m, lab, v in dcgm(node, 8)]


def _mig_change_fleet() -> list[NodeState]:
    """A busy 8-GPU node and an 8 x H100 node of 7 x 1g.10gb each (56 devices) mid MIG change:
    plugin and exporter paused, capacity 56, allocatable 0, no DCGM series."""
    ksm = [*ksm_node("ok-0", 8.0, 8.0), *ksm_node("mig-0", 56.0, 0.0),
           _labels("mig-0", H100_MIG_1G, "paused-for-mig-change")]  # fmt: skip
    return build_nodes(_busy("ok-0"), ksm)


def test_node_mid_mig_change_gets_no_placeholders() -> None:
    """Nothing is lost while the MIG manager has the plugin paused: no placeholder, with or
    without GFD's product label (GFD is paused too, and NVIDIA/k8s-device-plugin
    ``gpu-feature-discovery`` removes its output file, so its labels, on exit)."""
    mig = next(n for n in _mig_change_fleet() if n.name == "mig-0")
    assert (mig.gpus, mig.device_plugin) == ([], "paused-for-mig-change")
    ksm = [*ksm_node("mig-0", 56.0, 0.0), _labels("mig-0", plugin="paused-for-mig-change")]
    (n,) = build_nodes([], ksm)
    assert n.gpus == []
    assert doctor._missing_gpus(FleetSnapshot("prometheus", [n])) == []


def test_node_paused_for_mig_change_is_out_of_cluster_health() -> None:
    """The MIG manager never cordons: the node still counts in no signal, like a cordoned one."""
    nodes = _mig_change_fleet()
    alone = [n for n in nodes if n.name == "ok-0"]
    with_it = snapshot_signals(FleetSnapshot("prometheus", nodes))["local"]
    without = snapshot_signals(FleetSnapshot("prometheus", alone))["local"]
    assert (with_it.gpu_util, with_it.vram_pressure) == (without.gpu_util, without.vram_pressure)
    health = fleet_health(HealthModel(), FleetSnapshot("prometheus", nodes)).clusters[0].health
    assert (
        health == fleet_health(HealthModel(), FleetSnapshot("prometheus", alone)).clusters[0].health
    )


def test_device_plugin_back_on_counts_the_node_again() -> None:
    """Label ``true`` (the change done): the node counts again once dcgm-exporter reports it;
    until then every GPU is a placeholder (``NodeState.unscraped``), left out as a node that
    just joined is, not counted as 8 saturated GPUs."""
    ksm = [*ksm_node("ok-0", 8.0, 8.0), *ksm_node("mig-0", 56.0, 0.0),
           _labels("mig-0", H100_MIG_1G, "true")]  # fmt: skip
    nodes = build_nodes(_busy("ok-0"), ksm)
    assert [n.name for n in nodes if n.unscraped] == ["mig-0"]
    signals = snapshot_signals(FleetSnapshot("prometheus", nodes))
    assert signals["local"].gpu_util == pytest.approx(0.8)
    # one instance reported: the node is judged, its placeholders unhealthy (fully used)
    reported = _mig("mig-0", [(0, 7, "1g.10gb")])
    nodes = build_nodes(_busy("ok-0") + reported, ksm)
    assert not any(n.unscraped for n in nodes)
    assert snapshot_signals(FleetSnapshot("prometheus", nodes))["local"].gpu_util > 0.8


def test_single_strategy_gpu_lost_is_one_placeholder_at_its_index() -> None:
    """GPU 5 of 8 (7 instances each) fell off the bus: 49 instances reported, capacity 56."""
    inst = [(g, gi, "1g.10gb") for g in range(8) if g != 5 for gi in range(7, 14)]
    (n,) = build_nodes(_mig("m1", inst), ksm_node("m1", 56.0, 49.0))
    assert [g.index for g in n.gpus if g.missing] == [5]


def test_single_strategy_instances_per_gpu_from_the_reported_gpus() -> None:
    """4 GPUs x 2 x 3g.40gb, GPU 2 lost; no product label: the reported GPUs give 2 per GPU."""
    inst = [(g, gi, "3g.40gb") for g in (0, 1, 3) for gi in (1, 2)]
    (n,) = build_nodes(_mig("sg", inst), ksm_node("sg", 8.0, 6.0))
    assert [(g.index, g.healthy) for g in n.gpus if g.mig_parent is None] == [(2, False)]


def test_mixed_strategy_lost_whole_gpu_is_a_placeholder() -> None:
    """GPUs 0-1 MIG, 2-3 whole (``nvidia.com/gpu`` capacity 2), GPU 3 lost: placeholder 3."""
    inst = [(0, 1, "1g.10gb"), (0, 2, "1g.10gb"), (1, 1, "1g.10gb"), (1, 2, "1g.10gb")]
    samples = dcgm("mx", 3)[6:] + _mig("mx", inst)
    (n,) = build_nodes(samples, ksm_node("mx", 2.0, 1.0))
    assert [(g.index, g.missing) for g in n.gpus if g.mig_parent is None] == [
        (2, False), (3, True)]  # fmt: skip


def test_alert_on_a_mig_gpu_marks_its_instances() -> None:
    """An alert on physical GPU 1 (``gpu="1"``) marks its instances 201, 202, not GPU 0's."""
    graph = DependencyGraph.from_json({"name": "t", "nodes": [
        {"id": "c", "kind": "cluster", "cluster": "c", "match": {"cluster": "c"}},
        {"id": "c/host/n1", "kind": "host", "cluster": "c",
         "match": {"cluster": "c", "node": "n1"}},
        *[{"id": f"c/gpu/n1/{i}", "kind": "gpu", "cluster": "c",
           "match": {"cluster": "c", "node": "n1", "gpu": str(i)}} for i in range(2)]],
        "edges": [{"src": "c/host/n1", "dst": "c", "kind": "member_of"},
                  *[{"src": f"c/gpu/n1/{i}", "dst": "c/host/n1", "kind": "attached_to"}
                    for i in range(2)]]})  # fmt: skip
    alert = {"alertname": "GpuXid", "cluster": "c", "node": "n1", "gpu": "1", "GPU_I_ID": "2",
             "GPU_I_PROFILE": "3g.40gb"}  # fmt: skip
    match = graph.node(graph.node_for_alert(alert)).match
    marks = {(match["cluster"], match["node"], match["gpu"]): ["#7 GpuXid"]}
    node = NodeState(name="n1", cluster="c", gpus=[
        GpuState(index=100 * (p + 1) + gi, model="A100 MIG 3g.40gb", mig_parent=p)
        for p in range(2) for gi in (1, 2)])  # fmt: skip

    class NoHolds:
        def gpu_used(self, *args: Any) -> int:
            return 0

    out = _fleet_node(node, NoHolds(), marks)
    assert {g["index"]: g["incidents"] for g in out["gpus"]} == {
        101: [], 102: [], 201: ["#7 GpuXid"], 202: ["#7 GpuXid"]}  # fmt: skip


def test_nvml_gpu_with_mig_pending_is_not_a_whole_idle_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    """GPU 1's MIG mode is pending enabled (``[0, 1]``): healthy, nothing free; GPU 0 idle."""
    _fake_devices(monkeypatch, lost=set(), count=2)
    enable = pynvml.NVML_DEVICE_MIG_ENABLE
    monkeypatch.setattr(pynvml, "nvmlDeviceGetMigMode", lambda h: [0, enable] if h == 1 else [0, 0])
    monkeypatch.setattr(pynvml, "nvmlDeviceGetMaxMigDeviceCount", lambda h: 0)
    (node,) = NvmlSource(cluster="c0").collect().nodes
    assert [(g.index, g.healthy, g.free_milli > 0) for g in node.gpus] == [
        (0, True, True), (1, True, False)]  # fmt: skip


A100_40 = "NVIDIA A100-SXM4-40GB"


def _a100(node: str, instances: list[tuple[int, int, str]]) -> list[Sample]:
    """dcgm-exporter MIG samples (:func:`_mig`) of an A100-SXM4-40GB (``modelName``)."""
    return [(m, {**lab, "modelName": A100_40}, v) for m, lab, v in _mig(node, instances)]


def test_single_strategy_a100_40gb_1g10gb_without_label_counts_four_per_gpu() -> None:
    """An A100-40GB is cut into 4 x 1g.10gb (NVIDIA MIG user guide, A100 profiles table;
    mig-parted ``all-1g.10gb``), not 7: 8 GPUs = 32 devices; GPU 5 lost, no product label."""
    inst = [(g, gi, "1g.10gb") for g in range(8) if g != 5 for gi in (3, 4, 5, 6)]
    (n,) = build_nodes(_a100("a", inst), ksm_node("a", 32.0, 28.0))
    assert [g.index for g in n.gpus if g.missing] == [5]


def test_reported_instances_win_over_a_stale_product_label() -> None:
    """DCGM reports 8 GPUs x 7 x 1g.10gb (capacity 56) while the label still says 3g.40gb (2 per
    GPU, 28 GPUs): the live series hold, nothing is lost."""
    inst = [(g, gi, "1g.10gb") for g in range(8) for gi in range(7, 14)]
    ksm = [*ksm_node("st", 56.0, 56.0), _labels("st", "NVIDIA-H100-80GB-HBM3-MIG-3g.40gb")]
    (n,) = build_nodes(_mig("st", inst), ksm)
    assert [g.index for g in n.gpus if g.missing] == []


def _mig_resource(node: str, profile: str, v: float) -> list[Sample]:
    """kube-state-metrics' ``nvidia.com/mig-<profile>`` capacity and allocatable of ``node``."""
    return [("node_gpus", {"__name__": f"kube_node_status_{m}", "node": node,
                           "resource": f"nvidia_com_mig_{profile.replace('.', '_')}"}, v)
            for m in ("capacity", "allocatable")]  # fmt: skip


def test_mixed_strategy_whose_only_whole_gpu_is_lost_is_a_placeholder() -> None:
    """Mixed: GPUs 0-1 all-1g.10gb (``nvidia.com/mig-1g.10gb`` 14), GPU 2 MIG disabled
    (``nvidia.com/gpu`` 1) fell off the bus: capacity 1, allocatable 0, no whole GPU reported."""
    inst = [(g, gi, "1g.10gb") for g in (0, 1) for gi in range(7, 14)]
    ksm = [*ksm_node("mx", 1.0, 0.0), *_mig_resource("mx", "1g.10gb", 14.0),
           _labels("mx", "NVIDIA-H100-80GB-HBM3")]  # fmt: skip
    (n,) = build_nodes(_mig("mx", inst), ksm)
    assert [g.index for g in n.gpus if g.missing] == [2]


def test_doctor_names_the_mig_profile_labels() -> None:
    """The missing-GPUs hint names every label a MIG node's count needs in the allowlist."""
    node = NodeState("n", "c", gpus=[GpuState(0, "x", healthy=False, free_milli=0, missing=True)])
    (finding,) = doctor._missing_gpus(FleetSnapshot("prometheus", [node]))
    assert "nvidia.com/gpu.product" in finding.message
    assert "cloud.google.com/gke-gpu-partition-size" in finding.message


def _virtual_mig_fleet(alloc: float) -> NodeState:
    """dcgm-exporter ``--kubernetes-virtual-gpus`` (one held GPU on ``ts``, series with ``vgpu``)
    and an 8 x 7 x 1g.10gb single-strategy node ``mig-0`` no pod holds (nothing exported),
    ``nvidia.com/gpu`` capacity 56, allocatable ``alloc``."""
    held = [
        (m, {**lab, "vgpu": "0", "pod": "p", "namespace": "ml"}, v) for m, lab, v in dcgm("ts", 1)
    ]
    ksm = [
        *ksm_node("ts", 1.0, 1.0),
        *ksm_node("mig-0", 56.0, alloc),
        _labels("mig-0", H100_MIG_1G),
    ]
    return next(n for n in build_nodes(held, ksm) if n.name == "mig-0")


def test_virtual_gpus_idle_mig_node_gpus_are_their_idle_instances() -> None:
    """dcgm-exporter ``--kubernetes-virtual-gpus`` exports no GPU no pod holds: each GPU of an
    idle 8 x 7 x 1g.10gb single-strategy node is its 7 instances, idle, indexed and named as
    reported instances are (``100 * (gpu + 1) + n``, ``"<model> MIG 1g.10gb"``); allocatable 49
    of 56 leaves one GPU's worth out: 7 GPUs of instances and 1 placeholder."""
    for alloc, placeholders in ((56.0, []), (49.0, [7])):
        m = _virtual_mig_fleet(alloc)
        assert [g.index for g in m.gpus if g.missing] == placeholders
        inst = [g for g in m.gpus if not g.missing]
        assert len(inst) == 7 * (8 - len(placeholders))
        assert {g.mig_parent for g in inst} == set(range(8)) - set(placeholders)
        assert [g.index for g in inst if g.mig_parent == 0] == list(range(100, 107))
        assert {g.model for g in inst} == {"NVIDIA-H100-80GB-HBM3 MIG 1g.10gb"}
        assert all(g.healthy and g.free_milli == 1000 for g in inst)


def test_virtual_gpus_idle_mig_node_takes_a_gpu_pod() -> None:
    """The scheduler extender's filter (``decide``) places a 1-GPU pod on the idle MIG node of
    :func:`_virtual_mig_fleet` (an idle MIG node reported by DCGM is placeable too), rather than
    refusing it as "not enough free GPUs"."""
    pod = {"metadata": {"name": "p1", "namespace": "ml", "uid": "u1"},
           "spec": {"containers": [{"name": "c",
                                    "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}}  # fmt: skip
    snap = FleetSnapshot("prometheus", [_virtual_mig_fleet(56.0)])
    _, d = decide({"Pod": pod, "NodeNames": ["mig-0"]}, snap, Reservations(), BestFitPlacer(),
                  NodeIndex())  # fmt: skip
    assert [o.node for o in d.options] == ["mig-0"]
    assert not d.failed and not d.unresolvable


def test_mixed_strategy_with_every_instance_unhealthy_still_finds_the_lost_gpu() -> None:
    """Mixed: GPUs 0-1 all-1g.10gb, every instance unhealthy (``nvidia.com/mig-1g.10gb``
    capacity 14, allocatable 0: the kubelet keeps unhealthy devices in capacity only), GPU 2 (MIG
    disabled, ``nvidia.com/gpu`` capacity 1) fell off the bus: still mixed, GPU 2 a placeholder."""
    inst = [(g, gi, "1g.10gb") for g in (0, 1) for gi in range(7, 14)]
    mig = [(m, lab, 0.0 if "allocatable" in lab["__name__"] else v)
           for m, lab, v in _mig_resource("mx", "1g.10gb", 14.0)]  # fmt: skip
    ksm = [*ksm_node("mx", 1.0, 0.0), *mig, _labels("mx", "NVIDIA-H100-80GB-HBM3")]
    (n,) = build_nodes(_mig("mx", inst), ksm)
    assert [g.index for g in n.gpus if g.missing] == [2]


def test_instances_without_model_name_keep_the_labels_model() -> None:
    """A100-40GB, 4 x 1g.10gb per GPU; the exporter leaves out ``modelName`` (model ``unknown``)
    and GPU 5 is lost: the product label's ``A100-SXM4-40GB`` still gives 4 per GPU (capacity 32
    is 8 GPUs, one placeholder), not 7 per GPU for an unknown model (4 GPUs, none lost)."""
    inst = [(g, gi, "1g.10gb") for g in range(8) if g != 5 for gi in (3, 4, 5, 6)]
    samples = [(m, {k: x for k, x in lab.items() if k != "modelName"}, v)
               for m, lab, v in _mig("a", inst)]  # fmt: skip
    ksm = [*ksm_node("a", 32.0, 28.0), _labels("a", "NVIDIA-A100-SXM4-40GB-MIG-1g.10gb")]
    (n,) = build_nodes(samples, ksm)
    assert [g.index for g in n.gpus if g.missing] == [5]


def test_mig_invalid_product_adds_no_placeholder() -> None:
    """GFD labels ``-MIG-INVALID`` where the single strategy's GPUs disagree (all-balanced: 3g.40gb,
    2g.20gb, 2 x 1g.10gb each): the instances per GPU are not known, so none is added (not 56)."""
    bal = [(g, gi, prof) for g in range(8)
           for gi, prof in ((1, "3g.40gb"), (5, "2g.20gb"), (9, "1g.10gb"), (10, "1g.10gb"))]  # fmt: skip
    ksm = [*ksm_node("bal", 56.0, 0.0), _labels("bal", "NVIDIA-H100-80GB-HBM3-MIG-INVALID")]
    (n,) = build_nodes(_mig("bal", bal), ksm)
    assert [g.index for g in n.gpus if g.missing] == []


def test_gke_partition_size_label_counts_physical_gpus() -> None:
    """GKE runs no GPU feature discovery: its MIG node label ``cloud.google.com/gke-gpu-partition-size``
    (https://cloud.google.com/kubernetes-engine/docs/how-to/gpus-multi) gives the profile; an
    8 x A100 node of 56 x 1g.5gb whose exporter is down has 8 placeholders, not 56."""
    lab = {"node": "gke-0", "label_cloud_google_com_gke_gpu_partition_size": "1g.5gb"}
    (n,) = build_nodes([], [*ksm_node("gke-0", 56.0, 56.0), ("node_gpu_replicas", lab, 1.0)])
    assert [(g.index, g.missing) for g in n.gpus] == [(i, True) for i in range(8)]
