"""MIG's mixed strategy and nodes that mix GPU models, under the policy placers the registry
serves (the PPO agent, ``heuristic:*``), and the extender's unresolvable answers.

Upstream behaviour behind the expectations:

* NVIDIA's k8s-device-plugin, ``--mig-strategy=mixed``, advertises each MIG profile as its own
  resource ``nvidia.com/mig-<profile>``; a pod asking for one gets an instance of that profile only.
  It writes a profile's ``+`` as ``.``: DCGM's ``GPU_I_PROFILE`` ``1g.10gb+me`` is the resource
  ``nvidia.com/mig-1g.10gb.me`` (as NVIDIA/mig-parted's ``normalizeProfileName`` in
  ``pkg/mig/builder`` replaces ``+`` with ``.``).
* ``k8s.io/kube-scheduler/extender/v1`` ``ExtenderFilterResult``: ``FailedAndUnresolvableNodes``
  are nodes where "preemption would not change anything"; ``findNodesThatPassExtenders`` in
  ``pkg/scheduler/schedule_one.go`` marks ``FailedNodes`` ``Unschedulable`` (preemption may
  evict pods there) and ``FailedAndUnresolvableNodes`` ``UnschedulableAndUnresolvable``.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from fleetmind.envs.policies import make_policy
from fleetmind.rl.policy_adapter import load_ppo_policy
from fleetmind.serving.scheduler.extender import NodeIndex, decide, filter_result
from fleetmind.serving.scheduler.placement import (
    BestFitPlacer,
    Option,
    PeerPolicyPlacer,
    Reservations,
    gpu_model_matches,
)
from fleetmind.serving.schemas import JobSpec
from fleetmind.serving.telemetry.base import FleetSnapshot, GpuState, NodeState

H100 = "NVIDIA H100 80GB HBM3"
BALANCED = ("3g.40gb", "2g.20gb", "1g.10gb", "1g.10gb")
"""An H100's ``all-balanced`` MIG layout (GPU_I_ID 1..4)."""


def _mig_node(name: str, layout: tuple[str, ...] = BALANCED, gpus: int = 2) -> NodeState:
    """Instances as the Prometheus source builds them: ``index = 100 * (gpu + 1) + GPU_I_ID``,
    model ``"<modelName> MIG <GPU_I_PROFILE>"``."""
    inst = [
        GpuState(100 * (g + 1) + i + 1, f"{H100} MIG {p}", free_milli=1000)
        for g in range(gpus)
        for i, p in enumerate(layout)
    ]
    return NodeState(name, "local", inst, 64_000, 64_000, 500_000, 500_000)


def _mixed_card_node(name: str, first: str, second: str) -> NodeState:
    gpus = [GpuState(i, first if i < 4 else second, free_milli=1000) for i in range(8)]
    return NodeState(name, "local", gpus, 64_000, 64_000, 500_000, 500_000)


def _placers() -> list[Any]:
    out: list[Any] = [BestFitPlacer()]
    for name in ("BestFit", "DotProd", "GpuPacking", "GpuClustering"):
        out.append(PeerPolicyPlacer(make_policy(name), f"heuristic:{name}"))
    out.append(PeerPolicyPlacer(load_ppo_policy(), "ppo"))
    return out


PLACERS = _placers()


def _model_of(node: NodeState, index: int) -> str:
    return next(g.model for g in node.gpus if g.index == index)


# ---------------------------------------------------------------- MIG instances of one profile
@pytest.mark.parametrize("placer", PLACERS, ids=lambda p: p.name)
def test_each_profile_fills_exactly_its_own_instances(placer: Any) -> None:
    """Holds land only on instances of the wanted profile, until every one of them is held."""
    node = _mig_node("mig-node")
    snap = FleetSnapshot("test", [node], collected_ts=1.0)
    res = Reservations()
    held: Counter[str] = Counter()
    for profile in ("3g.40gb", "2g.20gb", "1g.10gb"):
        job = JobSpec(num_gpu=1, gpu_model=f"MIG {profile}")
        for _ in range(8):
            opts = placer.place(snap, job, res, 1)
            if not opts:
                break
            (g,) = opts[0].gpus
            assert _model_of(node, g).endswith(f"MIG {profile}"), (placer.name, profile, g)
            res.book(opts[0], job)
            held[profile] += 1
    assert held == {"3g.40gb": 2, "2g.20gb": 2, "1g.10gb": 4}, placer.name
    assert all(res.gpu_used("local", "mig-node", g.index) == 1000 for g in node.gpus)


@pytest.mark.parametrize("placer", PLACERS, ids=lambda p: p.name)
def test_two_instances_of_a_profile_on_one_node(placer: Any) -> None:
    node = _mig_node("mig-node")
    snap = FleetSnapshot("test", [node], collected_ts=1.0)
    (opt,) = placer.place(snap, JobSpec(num_gpu=2, gpu_model="MIG 2g.20gb"), Reservations(), 1)
    assert sorted(opt.gpus) == [102, 202]
    assert placer.place(snap, JobSpec(num_gpu=3, gpu_model="MIG 2g.20gb"), Reservations(), 1) == []


@pytest.mark.parametrize("placer", PLACERS, ids=lambda p: p.name)
def test_heterogeneous_cards_are_matched_per_gpu(placer: Any) -> None:
    """A node whose first GPUs are A100s and last V100s (``gpu-card-model``): each model's job
    goes on its own cards, whichever comes first."""
    nodes = [
        _mixed_card_node("av", "NVIDIA A100-SXM4-80GB", "Tesla V100-SXM2-32GB"),
        _mixed_card_node("va", "Tesla V100-SXM2-32GB", "NVIDIA A100-SXM4-80GB"),
    ]
    snap = FleetSnapshot("test", nodes, collected_ts=1.0)
    for want in ("A100", "V100"):
        res = Reservations()
        job = JobSpec(num_gpu=2, gpu_model=want)
        for _ in range(4):  # 4 cards of each model per node, 2 per job: 2 jobs per node
            opts = placer.place(snap, job, res, 2)
            assert opts, (placer.name, want)
            o = opts[0]
            node = next(n for n in nodes if n.name == o.node)
            assert all(gpu_model_matches(_model_of(node, g), [want]) for g in o.gpus), o
            res.book(o, job)
        assert placer.place(snap, job, res, 2) == [], (placer.name, want)


# ------------------------------------------------------------------------- through the extender
def _mig_pod(resource: str, count: str = "1", name: str = "p") -> dict[str, Any]:
    limits = {"cpu": "1", "memory": "1Gi", resource: count}
    return {
        "metadata": {"name": name, "namespace": "ml", "uid": f"uid-{name}"},
        "spec": {"containers": [{"name": "main", "resources": {"limits": limits}}]},
    }


@pytest.mark.parametrize("placer", PLACERS, ids=lambda p: p.name)
def test_extender_passes_every_profile_with_free_instances(placer: Any) -> None:
    snap = FleetSnapshot("test", [_mig_node("mig-node")], collected_ts=1.0)
    for profile in ("3g.40gb", "2g.20gb", "1g.10gb"):
        args = {"Pod": _mig_pod(f"nvidia.com/mig-{profile}"), "NodeNames": ["mig-node"]}
        _, d = decide(args, snap, Reservations(), placer, NodeIndex())
        out = filter_result(d, None)
        assert out["NodeNames"] == ["mig-node"], (placer.name, profile, out)


def test_media_extension_profile_matches_the_device_plugin_resource_name() -> None:
    """DCGM names the profile ``1g.10gb+me``; the device plugin's resource is
    ``nvidia.com/mig-1g.10gb.me``. A plain ``1g.10gb`` pod does not take a ``+me`` instance."""
    node = _mig_node("me-node", layout=("1g.10gb+me", "1g.10gb"), gpus=1)
    snap = FleetSnapshot("test", [node], collected_ts=1.0)
    assert gpu_model_matches(f"{H100} MIG 1g.10gb+me", ["MIG 1g.10gb.me"])
    assert not gpu_model_matches(f"{H100} MIG 1g.10gb+me", ["MIG 1g.10gb"])
    assert not gpu_model_matches(f"{H100} MIG 1g.10gb", ["MIG 1g.10gb.me"])
    for placer in (PLACERS[0], PLACERS[1], PLACERS[-1]):
        for resource, index in (
            ("nvidia.com/mig-1g.10gb.me", 101),
            ("nvidia.com/mig-1g.10gb", 102),
        ):
            args = {"Pod": _mig_pod(resource), "NodeNames": ["me-node"]}
            _, d = decide(args, snap, Reservations(), placer, NodeIndex())
            assert [o.node for o in d.options] == ["me-node"], (placer.name, resource, d)
            assert d.options[0].gpus == (index,), (placer.name, resource)


def test_a_full_profile_fails_with_its_own_count() -> None:
    """Both 3g.40gb instances held: the node fails (resolvably) naming that profile's free
    instances, not the node's other free ones."""
    node = _mig_node("mig-node")
    snap = FleetSnapshot("test", [node], collected_ts=1.0)
    res = Reservations()
    job = JobSpec(num_gpu=1, gpu_model="MIG 3g.40gb")
    for g in (101, 201):
        res.book(Option("local", "mig-node", (g,), 0.0), job)
    args = {"Pod": _mig_pod("nvidia.com/mig-3g.40gb"), "NodeNames": ["mig-node"]}
    _, d = decide(args, snap, res, PLACERS[-1], NodeIndex())
    assert d.options == [] and "mig-node" in d.failed, d
    assert d.failed["mig-node"].startswith("FleetMind: not enough free MIG 3g.40gb GPUs ("), (
        d.failed
    )
    args = {"Pod": _mig_pod("nvidia.com/mig-3g.40gb", "3"), "NodeNames": ["mig-node"]}
    _, d = decide(args, snap, Reservations(), PLACERS[-1], NodeIndex())
    assert d.unresolvable == {
        "mig-node": "FleetMind: node has fewer MIG 3g.40gb GPUs than the pod's 3"
    }


# -------------------------------------------------------------------- unresolvable candidates
def test_unknown_and_ambiguous_nodes_are_unresolvable() -> None:
    """Preempting pods on a node FleetMind has no telemetry for (or cannot tell which cluster's
    it is) would not make FleetMind pass it: FailedAndUnresolvableNodes, not FailedNodes."""
    a = _mixed_card_node("gpu-a", H100, H100)
    twin = [_mixed_card_node("twin", H100, H100), _mixed_card_node("twin", H100, H100)]
    twin[1].cluster = "other"
    snap = FleetSnapshot("test", [a, *twin], collected_ts=1.0)
    pod = _mig_pod("nvidia.com/gpu")
    args = {"Pod": pod, "NodeNames": ["gpu-a", "no-exporter", "twin"]}
    _, d = decide(args, snap, Reservations(), BestFitPlacer(), NodeIndex())
    out = filter_result(d, None)
    assert out["NodeNames"] == ["gpu-a"]
    assert out["FailedNodes"] == {}
    unres = out["FailedAndUnresolvableNodes"]
    assert unres["no-exporter"] == "FleetMind: no GPU telemetry for this node"
    assert unres["twin"].startswith("FleetMind: node name is in several clusters"), unres
