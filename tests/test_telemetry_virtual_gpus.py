"""dcgm-exporter's ``--kubernetes-virtual-gpus`` on time-sliced nodes.

In that mode (its mode for time-slicing and MPS) dcgm-exporter exports one series per pod sharing
a GPU, labelled ``vgpu`` (``vgpuAttribute`` in ``internal/pkg/transformation/const.go`` of
NVIDIA/dcgm-exporter), and none for a GPU that no pod holds: ``PodMapper.Process``
(``internal/pkg/transformation/kubernetes.go``) rebuilds each counter's series from
``deviceToPods[deviceID]`` only (NVIDIA/dcgm-exporter#549, #611). The GPUs kube-state-metrics
counts but DCGM does not report are then idle, not lost, on every node of a cluster where any
series carries ``vgpu`` (the flag is one for the whole DaemonSet): they used to become unhealthy
placeholders, so an idle time-sliced node was refused ("node has 0 healthy GPU(s)") and a partly
used one lost its idle GPUs' replicas. A pod holding two replicas of one GPU has one series per
replica, and holds two.
"""

from __future__ import annotations

from typing import Any

from fleetmind.serving.scheduler.extender import NodeIndex, decide
from fleetmind.serving.scheduler.placement import BestFitPlacer, Reservations
from fleetmind.serving.telemetry.base import FleetSnapshot, GpuState, NodeState
from fleetmind.serving.telemetry.prometheus import add_missing_gpus, build_nodes, fleet_queries

Sample = tuple[str, dict[str, str], float]


def _dcgm(node: str, pods_on: dict[int, list[str]], virtual: bool = True) -> list[Sample]:
    """dcgm-exporter's series of ``node``: one per pod of each GPU a pod holds (with ``vgpu``
    when ``virtual``), the chart's scrape (``exported_pod``)."""
    out: list[Sample] = []
    for gpu, pods in pods_on.items():
        base = {"gpu": str(gpu), "UUID": f"GPU-{node}-{gpu}", "modelName": "Tesla T4",
                "node": node, "pod": "dcgm-exporter-x7k2p", "namespace": "gpu-operator"}  # fmt: skip
        for i, pod in enumerate(pods):
            lab = {**base, "exported_pod": pod, "exported_namespace": "ml"}
            if virtual:
                lab["vgpu"] = str(i)
            out += [("DCGM_FI_DEV_GPU_UTIL", lab, 30.0), ("DCGM_FI_DEV_FB_USED", lab, 3000.0),
                    ("DCGM_FI_DEV_FB_FREE", lab, 12000.0)]  # fmt: skip
    return out


def _ksm(node: str, pods: list[str], replicas: int = 4, gpus: int = 4) -> list[Sample]:
    out: list[Sample] = [
        ("node_gpus", {"node": node, "__name__": "kube_node_status_capacity"}, gpus * replicas),
        ("kube_node_status_allocatable", {"node": node, "resource": "cpu"}, 32.0),
        ("kube_node_status_allocatable", {"node": node, "resource": "memory"}, 128 * 2**30),
    ]
    if replicas > 1:
        labels = {"node": node, "label_nvidia_com_gpu_replicas": str(replicas)}
        out.append(("node_gpu_replicas", labels, 1.0))
    for p in pods:
        out.append(("kube_pod_info", {"node": node, "namespace": "ml", "pod": p}, 1.0))
    return out


def _pod_args(nodes: list[str]) -> dict[str, Any]:
    limits = {"nvidia.com/gpu": "1", "cpu": "1", "memory": "1Gi"}
    pod = {
        "metadata": {"name": "new", "namespace": "ml", "uid": "u-new"},
        "spec": {"containers": [{"name": "c", "resources": {"limits": limits}}]},
    }
    return {"Pod": pod, "NodeNames": nodes}


def _by_name(nodes: list[NodeState]) -> dict[str, NodeState]:
    return {n.name: n for n in nodes}


def test_the_idle_gpu_of_a_partly_used_node_keeps_its_replicas() -> None:
    """Three of four GPUs hold one pod each: the fourth is not exported, and is idle (four free
    replicas), so the node has 13 free replicas, not 9."""
    pods = {0: ["a"], 1: ["b"], 2: ["c"]}
    (node,) = build_nodes(_dcgm("ts", pods), _ksm("ts", ["a", "b", "c"]))
    assert [(g.index, g.free_milli, g.healthy, g.missing) for g in node.gpus] == [
        (0, 750, True, False),
        (1, 750, True, False),
        (2, 750, True, False),
        (3, 1000, True, False),
    ]
    assert node.gpus[3].model == "Tesla T4"
    assert sum(g.free_milli for g in node.gpus) * node.gpu_replicas // 1000 == 13


def test_an_idle_time_sliced_node_of_a_virtual_gpu_cluster_takes_pods() -> None:
    """A time-sliced node where no pod holds a GPU exports nothing in that mode; another node of
    its cluster carries ``vgpu``, so its four GPUs are idle and the extender places there."""
    dcgm = _dcgm("busy", {0: ["a", "b"]})
    ksm = _ksm("busy", ["a", "b"], gpus=1) + _ksm("idle", [])
    nodes = _by_name(build_nodes(dcgm, ksm))
    idle = nodes["idle"]
    assert [(g.free_milli, g.healthy, g.missing) for g in idle.gpus] == [(1000, True, False)] * 4
    snap = FleetSnapshot(source="test", nodes=list(nodes.values()))
    args = _pod_args(["idle"])
    _, d = decide(args, snap, Reservations(), BestFitPlacer(), NodeIndex())
    assert [o.node for o in d.options] == ["idle"] and not d.unresolvable


def test_a_failed_gpu_out_of_allocatable_stays_lost_in_virtual_mode() -> None:
    """The device plugin takes an unhealthy GPU's replicas out of allocatable, not out of
    capacity (``ListAndWatch`` reports the devices ``Unhealthy``; the kubelet counts only healthy
    ones as allocatable): capacity 16, allocatable 12 on a 4-GPU node time-sliced x4 means one GPU
    failed, so the one GPU not exported is a placeholder, not idle."""
    pods = {0: ["a"], 1: ["b"], 2: ["c"]}
    ksm = _ksm("ts", ["a", "b", "c"])
    ksm.append(("node_gpus", {"node": "ts", "__name__": "kube_node_status_allocatable"}, 12.0))
    (node,) = build_nodes(_dcgm("ts", pods), ksm)
    assert [(g.index, g.healthy, g.missing) for g in node.gpus][3] == (3, False, True)


def test_without_the_vgpu_label_a_gpu_not_reported_is_still_lost() -> None:
    """dcgm-exporter's default mode exports every GPU: a GPU it does not report has fallen off
    the bus or its target is down, and stays an unhealthy placeholder."""
    pods = {0: ["a"], 1: ["b"], 2: ["c"]}
    (node,) = build_nodes(_dcgm("ts", pods, virtual=False), _ksm("ts", ["a", "b", "c"]))
    assert [(g.index, g.free_milli, g.healthy, g.missing) for g in node.gpus][3] == (
        3,
        0,
        False,
        True,
    )


def test_a_whole_gpu_node_of_a_virtual_gpu_cluster_keeps_its_idle_gpus() -> None:
    """``--kubernetes-virtual-gpus`` is one flag for the whole dcgm-exporter DaemonSet, and
    ``vgpu`` is set only for a shared replica id (``getSharedGPU`` in
    ``internal/pkg/transformation/kubernetes.go``): a whole-GPU node of a virtual-GPU cluster
    exports only the GPUs pods hold, without ``vgpu`` (NVIDIA/dcgm-exporter#611: 5 of 8 unused
    GPUs missing). Its unreported GPU is idle, and the extender places there; allocatable still
    bounds the idle GPUs."""
    dcgm = _dcgm("busy", {0: ["a"]}) + _dcgm("whole", {0: ["w"]}, virtual=False)
    ksm = _ksm("busy", ["a"], gpus=1) + _ksm("whole", ["w"], replicas=1, gpus=2)
    alloc = ("node_gpus", {"node": "whole", "__name__": "kube_node_status_allocatable"}, 2.0)
    nodes = build_nodes(dcgm, [*ksm, alloc])
    whole = _by_name(nodes)["whole"]
    assert [(g.index, g.free_milli, g.healthy, g.missing) for g in whole.gpus] == [
        (0, 0, True, False),
        (1, 1000, True, False),
    ]
    snap = FleetSnapshot(source="test", nodes=nodes)
    _, d = decide(_pod_args(["whole"]), snap, Reservations(), BestFitPlacer(), NodeIndex())
    assert [(o.node, o.gpus) for o in d.options] == [("whole", (1,))] and not d.failed
    # one GPU failed (out of allocatable): the one not reported is that one, not idle
    failed = ("node_gpus", {"node": "whole", "__name__": "kube_node_status_allocatable"}, 1.0)
    whole = _by_name(build_nodes(dcgm, [*ksm, failed]))["whole"]
    assert [(g.index, g.healthy, g.missing) for g in whole.gpus][1] == (1, False, True)


def test_a_pod_with_two_replicas_of_one_gpu_holds_two() -> None:
    """The device plugin's ``distributed`` policy may give one pod two replicas of one GPU
    (``greedyAlloc`` in ``internal/rm/allocate.go`` of NVIDIA/k8s-device-plugin picks the GPU
    with the fewest allocated each time); ``--kubernetes-virtual-gpus`` then exports one series
    per replica, ``vgpu`` "0" and "1" (``toDeviceToSharingPods`` adds one entry per device id).
    Two of four replicas are held: 500 free, not 750."""
    base = {"modelName": "A100", "node": "n1", "UUID": "GPU-0", "gpu": "0"}
    dcgm: list[Sample] = [("DCGM_FI_DEV_FB_USED", base, 20000.0)]
    for v in ("0", "1"):
        lab = {**base, "pod": "p", "namespace": "ml", "vgpu": v}
        dcgm.append(("DCGM_FI_DEV_FB_FREE", lab, 60000.0))
    ksm = _ksm("n1", ["p"], replicas=4, gpus=2)
    (node,) = build_nodes(dcgm, ksm)
    assert [(g.index, g.free_milli, g.healthy) for g in node.gpus] == [
        (0, 500, True),
        (1, 1000, True),
    ]
    # without vgpu (the default mode: one series per pod) the pod is one replica
    plain = [(n, {k: v for k, v in lab.items() if k != "vgpu"}, x) for n, lab, x in dcgm]
    (node,) = build_nodes(plain, ksm)
    assert node.gpus[0].free_milli == 750


def test_a_reported_unhealthy_gpu_takes_no_share_of_allocatable() -> None:
    """Four GPUs time-sliced x4: capacity 16, allocatable 12. GPU 0 is reported unhealthy (its
    four replicas are what allocatable lacks), GPU 1 is held; GPUs 2 and 3 are not reported and
    are both idle: allocatable's 3 healthy GPUs less the one reported healthy."""
    node = NodeState(
        name="ts",
        cluster="k8s",
        gpus=[
            GpuState(index=0, model="T4", free_milli=0, healthy=False),
            GpuState(index=1, model="T4", free_milli=750),
        ],
        gpu_replicas=4,
    )
    counted = {"kube_node_status_capacity": 16.0, "kube_node_status_allocatable": 12.0}
    add_missing_gpus(node, counted, idle=True)
    assert [(g.index, g.free_milli, g.healthy, g.missing) for g in node.gpus] == [
        (0, 0, False, False),
        (1, 750, True, False),
        (2, 1000, True, False),
        (3, 1000, True, False),
    ]


def test_the_server_query_keeps_the_vgpu_label() -> None:
    """The framebuffer query keeps ``vgpu`` (the other DCGM entries aggregate it away)."""
    q = fleet_queries()["DCGM_FI_DEV_FB_FREE"]
    assert "vgpu" in q.split(")")[0]
