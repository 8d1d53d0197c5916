"""Time-slicing replicas of MIG instances are per profile.

GPU feature discovery labels replicas per resource, ``<resource>.replicas``
(``resourceLabeler.key("replicas")`` in ``internal/lm/resource.go`` of NVIDIA/k8s-device-plugin):
with the mixed strategy and a config such as the plugin README's
``sharing.timeSlicing.resources: [{name: nvidia.com/gpu, replicas: 4},
{name: nvidia.com/mig-1g.10gb, replicas: 2}]``, a node gets ``nvidia.com/gpu.replicas=4`` (the GPUs
with MIG disabled) and ``nvidia.com/mig-1g.10gb.replicas=2``; kube-state-metrics exports them as
``label_nvidia_com_gpu_replicas`` and ``label_nvidia_com_mig_1g_10gb_replicas`` (every character
that is not a letter, digit or ``_`` becomes ``_``). FleetMind used to apply the node-wide
``gpu.replicas`` to the MIG instances too.
"""

from __future__ import annotations

from typing import Any

from fleetmind.serving.scheduler.extender import NodeIndex, decide
from fleetmind.serving.scheduler.placement import BestFitPlacer, Reservations
from fleetmind.serving.telemetry.base import FleetSnapshot, NodeState
from fleetmind.serving.telemetry.prometheus import build_nodes, fleet_queries

Sample = tuple[str, dict[str, str], float]
BASE = {"modelName": "NVIDIA H100 80GB HBM3", "node": "mig-node"}


def _instances(profile: str, held: dict[str, str], whole_gpu: bool = True) -> list[Sample]:
    """GPU 0 with MIG disabled (when ``whole_gpu``), GPU 1 with instances ``held`` (GI id ->
    the pod that holds it, ``""`` for none)."""
    out: list[Sample] = []
    if whole_gpu:
        g0 = {**BASE, "gpu": "0", "UUID": "GPU-0"}
        out += [("DCGM_FI_DEV_FB_USED", g0, 0.0), ("DCGM_FI_DEV_FB_FREE", g0, 81000.0)]
    for gi, pod in held.items():
        mig = {**BASE, "gpu": "1", "UUID": "GPU-1", "GPU_I_ID": gi, "GPU_I_PROFILE": profile}
        free = {**mig, "exported_pod": pod, "exported_namespace": "ml"} if pod else mig
        out += [("DCGM_FI_DEV_FB_USED", mig, 5000.0), ("DCGM_FI_DEV_FB_FREE", free, 4800.0)]
    return out


def _ksm(labels: dict[str, str], pods: list[str]) -> list[Sample]:
    out: list[Sample] = [
        ("node_gpu_replicas", {"node": "mig-node", **labels}, 1.0),
        ("kube_node_status_allocatable", {"node": "mig-node", "resource": "cpu"}, 64.0),
        ("kube_node_status_allocatable", {"node": "mig-node", "resource": "memory"}, 512 * 2**30),
    ]
    for p in pods:
        out.append(("kube_pod_info", {"node": "mig-node", "namespace": "ml", "pod": p}, 1.0))
    return out


def _free(node: NodeState) -> list[tuple[int, int]]:
    return [(g.index, g.free_milli) for g in node.gpus]


def _mig_pod(resource: str) -> dict[str, Any]:
    pod = {
        "metadata": {"name": "mig-c", "namespace": "ml", "uid": "u-c"},
        "spec": {"containers": [{"name": "c", "resources": {"limits": {resource: "1"}}}]},
    }
    return {"Pod": pod, "NodeNames": ["mig-node"]}


def test_mig_instances_take_their_profiles_replicas() -> None:
    labels = {
        "label_nvidia_com_gpu_replicas": "4",
        "label_nvidia_com_mig_1g_10gb_replicas": "2",
    }
    held = {"7": "mig-a", "8": "mig-b"}
    (node,) = build_nodes(_instances("1g.10gb", held), _ksm(labels, list(held.values())))
    # one of two replicas of each instance taken: 500 free (the node-wide 4 gave 750)
    assert _free(node) == [(0, 1000), (207, 500), (208, 500)]
    assert node.gpu_replicas == 4 and node.mig_replicas == {"1g_10gb": 2}


def test_a_mig_pod_is_placed_on_a_free_replica_of_its_profile() -> None:
    """``nvidia.com/mig-1g.10gb: 1`` on instances with one of two replicas free: one replica,
    500 milli, fits (it used to ask a whole instance and be refused)."""
    labels = {"label_nvidia_com_mig_1g_10gb_replicas": "2", "label_nvidia_com_gpu_replicas": "4"}
    held = {"7": "mig-a", "8": "mig-b"}
    (node,) = build_nodes(_instances("1g.10gb", held), _ksm(labels, list(held.values())))
    snap = FleetSnapshot(source="test", nodes=[node])
    req, d = decide(
        _mig_pod("nvidia.com/mig-1g.10gb"), snap, Reservations(), BestFitPlacer(), NodeIndex()
    )
    assert [o.node for o in d.options] == ["mig-node"] and d.options[0].gpus[0] in (207, 208)
    assert d.replicas == {"mig-node": 2} and req.job(replicas=2).gpu_milli == 500


def test_gpu_replicas_are_not_applied_to_the_instances_of_a_mixed_node() -> None:
    """Only ``nvidia.com/gpu.replicas``: on a node with a GPU with MIG disabled and MIG instances
    (the mixed strategy) the instances are not time-sliced; a held one has nothing free."""
    held = {"7": "mig-a", "8": ""}
    ksm = _ksm({"label_nvidia_com_gpu_replicas": "4"}, ["mig-a"])
    (node,) = build_nodes(_instances("1g.10gb", held), ksm)
    assert _free(node)[:2] == [(0, 1000), (207, 0)]


def test_gpu_replicas_apply_to_instances_of_one_profile_only() -> None:
    """A node whose GPUs are all instances of one profile may run the single strategy, which
    advertises them as ``nvidia.com/gpu``: ``nvidia.com/gpu.replicas`` applies to them."""
    held = {"7": "mig-a", "8": ""}
    ksm = _ksm({"label_nvidia_com_gpu_replicas": "4"}, ["mig-a"])
    (node,) = build_nodes(_instances("1g.10gb", held, whole_gpu=False), ksm)
    assert _free(node)[0] == (207, 750)


def test_a_media_extension_profile_matches_its_sanitised_label() -> None:
    """DCGM's ``1g.10gb+me`` is the resource ``nvidia.com/mig-1g.10gb.me``; both sanitise to
    ``1g_10gb_me``, the label ``label_nvidia_com_mig_1g_10gb_me_replicas``."""
    from fleetmind.serving.telemetry.base import profile_key

    assert profile_key("1g.10gb+me") == profile_key("1g.10gb.me") == "1g_10gb_me"
    labels = {"label_nvidia_com_mig_1g_10gb_me_replicas": "4"}
    (node,) = build_nodes(_instances("1g.10gb+me", {"7": "mig-a"}), _ksm(labels, ["mig-a"]))
    assert _free(node)[1] == (207, 750)
    snap = FleetSnapshot(source="test", nodes=[node])
    _, d = decide(
        _mig_pod("nvidia.com/mig-1g.10gb.me"), snap, Reservations(), BestFitPlacer(), NodeIndex()
    )
    assert [o.node for o in d.options] == ["mig-node"] and d.replicas == {"mig-node": 4}


def test_the_labels_query_keeps_every_replicas_label() -> None:
    """Label names cannot be matched by a pattern in PromQL: the query keeps each node's labels
    (``max without`` the scrape target's labels, which a second kube-state-metrics target
    duplicates), not only ``label_nvidia_com_gpu_replicas``."""
    q = fleet_queries()["node_gpu_replicas"]
    assert q.startswith("max without (") and "kube_node_labels" in q
