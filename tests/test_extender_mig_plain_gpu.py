"""A plain ``nvidia.com/gpu`` pod on MIG nodes: the device plugin's MIG strategy, inferred per node.

Upstream behaviour behind the expectations:

* NVIDIA/k8s-device-plugin ``mig-strategy.go``: ``migStrategyMixed.GetPlugins`` serves
  ``nvidia.com/gpu`` from ``NewGpuDeviceManager(true)`` (GPUs with MIG disabled only) and one
  ``nvidia.com/mig-<profile>`` resource per MIG profile; ``migStrategySingle.GetPlugins`` serves
  the MIG instances as ``nvidia.com/gpu`` and refuses a node whose GPUs do not all have MIG
  enabled ("For mig.strategy=single all devices on the node must all be configured with the same
  migEnabled value") or whose instances are of several profiles ("More than one MIG device type
  present on node"). ``internal/rm/rm.go`` ``AddDefaultResourcesToConfig`` (newer releases) keeps
  the names: ``single`` adds the MIG resource as ``gpu``, ``mixed`` as ``mig-<profile>``. README,
  ``MIG_STRATEGY``: "With a MIG_STRATEGY of mixed, you will have additional resources available to
  you of the form nvidia.com/mig-<slice_count>g.<memory_size>gb".
* NVIDIA/gpu-operator ``deployments/gpu-operator/values.yaml``: ``mig: strategy: single`` (the
  default); its MIG page: "Set mig.strategy to mixed when MIG mode is not enabled on all GPUs on a
  node".
* An H100's MIG layouts (mig-parted's default config): ``all-balanced`` (3g.40gb, 2g.20gb,
  2x 1g.10gb), ``all-3g.40gb`` (2x 3g.40gb), ``all-1g.10gb`` (7x 1g.10gb).

The nodes come from dcgm-exporter exposition text, read by the Prometheus source's parser, as a
live node would be: MIG instances carry ``GPU_I_PROFILE``/``GPU_I_ID`` labels.
"""

from __future__ import annotations

from typing import Any

import pytest

from fleetmind.envs.policies import make_policy
from fleetmind.rl.policy_adapter import load_ppo_policy
from fleetmind.serving.scheduler.extender import NodeIndex, decide, filter_result
from fleetmind.serving.scheduler.placement import (
    GPU_CAUSES,
    BestFitPlacer,
    PeerPolicyPlacer,
    Reservations,
    mig_mixed,
    why_no_fit,
)
from fleetmind.serving.schemas import JobSpec
from fleetmind.serving.telemetry.base import FleetSnapshot, NodeState
from fleetmind.serving.telemetry.prometheus import parse_dcgm

H100 = "NVIDIA H100 80GB HBM3"
BALANCED = ("3g.40gb", "2g.20gb", "1g.10gb", "1g.10gb")
ALL_3G = ("3g.40gb", "3g.40gb")
ALL_1G = ("1g.10gb",) * 7
MIB = {"1g.10gb": 9856, "2g.20gb": 19968, "3g.40gb": 40192, None: 81559}

# node -> one entry per physical GPU: None for MIG disabled, else its MIG layout
SHAPES: dict[str, list[tuple[str, ...] | None]] = {
    "mig-mixed": [BALANCED, BALANCED],  # 3 profiles: the mixed strategy
    "mig-partial": [None, None, ALL_3G, ALL_3G],  # whole GPUs beside MIG: the mixed strategy
    "mig-single": [ALL_1G],  # one profile only: single (nvidia.com/gpu) or mixed
    "plain": [None, None, None, None],
}
WHOLE = {"mig-partial": {0, 1}, "mig-single": set(range(101, 108))}
"""GPU indices a plain nvidia.com/gpu pod may take where the node has MIG instances (the
Prometheus source numbers an instance ``100 * (gpu + 1) + GPU_I_ID``)."""


def _exposition(shapes: dict[str, list[tuple[str, ...] | None]]) -> str:
    """dcgm-exporter ``/metrics`` text (as in dcgm-exporter's output with MIG: one series per
    instance, ``GPU_I_PROFILE`` and ``GPU_I_ID`` labels), every GPU idle."""
    lines: list[str] = []
    for field in ("DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_FB_FREE"):
        lines += [f"# HELP {field} x.", f"# TYPE {field} gauge"]
        for host, gpus in shapes.items():
            for g, layout in enumerate(gpus):
                base = (
                    f'gpu="{g}",UUID="GPU-{host}-{g}",device="nvidia{g}",'
                    f'modelName="{H100}",Hostname="{host}"'
                )
                series = [(base, None)] if layout is None else []
                for i, p in enumerate(layout or ()):
                    series.append((f'{base},GPU_I_PROFILE="{p}",GPU_I_ID="{i + 1}"', p))
                for labels, profile in series:
                    value = MIB[profile] if field == "DCGM_FI_DEV_FB_FREE" else 0
                    lines.append(f"{field}{{{labels}}} {value}")
    return "\n".join(lines) + "\n"


def _nodes() -> list[NodeState]:
    nodes = parse_dcgm(_exposition(SHAPES))
    for n in nodes:  # kube-state-metrics' allocatable, as the Prometheus API source adds it
        n.cpu_milli = n.cpu_milli_free = 64_000
        n.memory_mib = n.memory_mib_free = 500_000
    return sorted(nodes, key=lambda n: n.name)


def _snap(*names: str) -> FleetSnapshot:
    nodes = [n for n in _nodes() if not names or n.name in names]
    return FleetSnapshot("test", nodes, collected_ts=1.0)


def _placers() -> list[Any]:
    out: list[Any] = [BestFitPlacer()]
    for name in ("BestFit", "DotProd", "GpuPacking", "GpuClustering"):
        out.append(PeerPolicyPlacer(make_policy(name), f"heuristic:{name}"))
    out.append(PeerPolicyPlacer(load_ppo_policy(), "ppo"))
    return out


PLACERS = _placers()


def _pod(
    resource: str = "nvidia.com/gpu", count: str = "1", name: str = "p", **ann: str
) -> dict[str, Any]:
    limits = {"cpu": "1", "memory": "1Gi"}
    if count != "0":
        limits[resource] = count
    meta: dict[str, Any] = {"name": name, "namespace": "ml", "uid": f"uid-{name}"}
    if ann:
        meta["annotations"] = {f"alibabacloud.com/{k.replace('_', '-')}": v for k, v in ann.items()}
    return {
        "metadata": meta,
        "spec": {"containers": [{"name": "main", "resources": {"limits": limits}}]},
    }


def _args(pod: dict[str, Any], names: list[str]) -> dict[str, Any]:
    """``ExtenderArgs`` as kube-scheduler sends them with ``nodeCacheCapable: true``."""
    return {"Pod": pod, "NodeNames": names, "Nodes": None}


def test_the_nodes_are_what_telemetry_reads() -> None:
    nodes = {n.name: n for n in _nodes()}
    assert [len(nodes[k].gpus) for k in SHAPES] == [8, 6, 7, 4]
    assert {k: mig_mixed(n) for k, n in nodes.items()} == {
        "mig-mixed": True,
        "mig-partial": True,
        "mig-single": False,
        "plain": False,
    }
    assert nodes["mig-partial"].gpus[2].model == f"{H100} MIG 3g.40gb"
    assert nodes["mig-partial"].gpus[2].mig_parent == 2


@pytest.mark.parametrize("placer", PLACERS, ids=lambda p: p.name)
def test_plain_gpu_pod_fails_a_mixed_node_without_whole_gpus(placer: Any) -> None:
    snap = _snap()
    args = _args(_pod(), list(SHAPES))
    _, d = decide(args, snap, Reservations(), placer, NodeIndex())
    out = filter_result(d, None)
    assert out["NodeNames"] == ["mig-partial", "mig-single", "plain"], (placer.name, out)
    assert out["FailedNodes"] == {}
    reason = out["FailedAndUnresolvableNodes"]["mig-mixed"]
    assert reason == (
        "FleetMind: MIG instances here are nvidia.com/mig-<profile> resources (mixed strategy), "
        "not nvidia.com/gpu: ask for one"
    ), reason
    assert "\n" not in reason
    choice = d.options[0]
    allowed = WHOLE.get(choice.node, {0, 1, 2, 3})
    assert choice.gpus and set(choice.gpus) <= allowed, (placer.name, choice)


@pytest.mark.parametrize("placer", PLACERS, ids=lambda p: p.name)
def test_plain_gpu_pods_hold_only_whole_gpus_of_a_partial_mig_node(placer: Any) -> None:
    """Pods one after another, each held: the two GPUs with MIG disabled, then the node fails
    (resolvably: preemption there frees a whole GPU); the 3g.40gb instances stay free."""
    snap = _snap()
    res = Reservations()
    held: list[int] = []
    for i in range(3):
        pod = _pod(name=f"p{i}")
        req, d = decide(_args(pod, ["mig-partial"]), snap, res, placer, NodeIndex())
        if not d.options:
            assert d.failed == {
                "mig-partial": "FleetMind: not enough free GPUs (" + GPU_CAUSES["held"] + ")"
            }, (placer.name, d)
            break
        opt = d.options[0]
        held += opt.gpus
        res.book(opt, req.job(None))
    assert sorted(held) == [0, 1], (placer.name, held)
    _, d = decide(
        _args(_pod("nvidia.com/gpu", "3"), ["mig-partial"]),
        snap,
        Reservations(),
        placer,
        NodeIndex(),
    )
    assert d.unresolvable == {"mig-partial": "FleetMind: node has fewer GPUs than the pod's 3"}


@pytest.mark.parametrize("placer", PLACERS, ids=lambda p: p.name)
def test_single_strategy_node_still_serves_plain_gpu_pods(placer: Any) -> None:
    """All instances of one profile: the single strategy's nvidia.com/gpu (the GPU Operator's
    default) or the mixed strategy's nvidia.com/mig-1g.10gb; telemetry cannot tell, both pass."""
    snap = _snap()
    res = Reservations()
    for i in range(7):
        req, d = decide(_args(_pod(name=f"s{i}"), ["mig-single"]), snap, res, placer, NodeIndex())
        assert [o.node for o in d.options] == ["mig-single"], (placer.name, i, d)
        res.book(d.options[0], req.job(None))
    assert all(res.gpu_used("local", "mig-single", g) == 1000 for g in WHOLE["mig-single"])
    _, d = decide(
        _args(_pod("nvidia.com/mig-1g.10gb"), ["mig-single"]),
        snap,
        Reservations(),
        placer,
        NodeIndex(),
    )
    assert [o.node for o in d.options] == ["mig-single"], placer.name


@pytest.mark.parametrize("placer", PLACERS, ids=lambda p: p.name)
def test_mig_pods_still_get_their_instances_on_mixed_nodes(placer: Any) -> None:
    snap = _snap()
    for resource, node, allowed in (
        ("nvidia.com/mig-3g.40gb", "mig-partial", {301, 302, 401, 402}),
        ("nvidia.com/mig-2g.20gb", "mig-mixed", {102, 202}),
    ):
        _, d = decide(_args(_pod(resource), [node]), snap, Reservations(), placer, NodeIndex())
        assert [o.node for o in d.options] == [node], (placer.name, resource, d)
        assert set(d.options[0].gpus) <= allowed, (placer.name, resource, d.options)
    # no MIG instance on a node without MIG; plain pods keep every GPU of a plain node
    _, d = decide(
        _args(_pod("nvidia.com/mig-3g.40gb"), ["plain"]), snap, Reservations(), placer, NodeIndex()
    )
    assert "plain" in d.unresolvable
    _, d = decide(
        _args(_pod("nvidia.com/gpu", "4"), ["plain"]), snap, Reservations(), placer, NodeIndex()
    )
    assert [o.node for o in d.options] == ["plain"] and sorted(d.options[0].gpus) == [0, 1, 2, 3]


@pytest.mark.parametrize("placer", PLACERS, ids=lambda p: p.name)
def test_placers_give_jobs_without_a_mig_profile_only_whole_gpus_of_mixed_nodes(
    placer: Any,
) -> None:
    """The placers themselves (the /api/v1/place path, and the extender's hold): a job that names
    no model, or a whole-GPU model whose words a MIG instance's name also has ("H100")."""
    snap = _snap("mig-mixed", "mig-partial")
    for model in (None, "H100"):
        job = JobSpec(num_gpu=1, gpu_model=model)
        res = Reservations()
        held = []
        for _ in range(4):
            opts = placer.place(snap, job, res, 2)
            if not opts:
                break
            assert opts[0].node == "mig-partial" and set(opts[0].gpus) <= {0, 1}, (
                placer.name,
                model,
                opts,
            )
            assert all(o.node == "mig-partial" for o in opts), (placer.name, opts)
            held += opts[0].gpus
            res.book(opts[0], job)
        assert sorted(held) == [0, 1], (placer.name, model, held)
    assert placer.place(_snap("mig-mixed"), JobSpec(num_gpu=1), Reservations(), 3) == []
    # a MIG profile is still placed on its instances there
    (opt,) = placer.place(snap, JobSpec(num_gpu=1, gpu_model="MIG 1g.10gb"), Reservations(), 1)
    assert opt.node == "mig-mixed" and opt.gpus[0] in {103, 104, 203, 204}


def test_card_model_annotation_naming_a_profile_does_not_make_nvidia_gpu_a_mig_instance() -> None:
    """``nvidia.com/gpu`` with ``gpu-card-model: MIG 3g.40gb``: on a mixed node the resource has
    no MIG instance (unresolvable); on a single-strategy node of that profile it does. With a
    whole-GPU name beside it, only the whole GPUs are held."""
    snap = _snap()
    names = ["mig-partial", "mig-single"]
    for placer in (PLACERS[0], PLACERS[1], PLACERS[-1]):
        _, d = decide(
            _args(_pod(gpu_card_model="MIG 3g.40gb"), names),
            snap,
            Reservations(),
            placer,
            NodeIndex(),
        )
        assert d.options == [], (placer.name, d)
        assert d.unresolvable["mig-partial"] == (
            "FleetMind: MIG instances here are nvidia.com/mig-<profile> resources (mixed "
            "strategy), not nvidia.com/gpu: ask for one"
        ), d.unresolvable
        assert d.unresolvable["mig-single"].startswith("FleetMind: no GPU of the pod's model"), (
            d.unresolvable
        )
        _, d = decide(
            _args(_pod(gpu_card_model="MIG 1g.10gb"), names),
            snap,
            Reservations(),
            placer,
            NodeIndex(),
        )
        assert [o.node for o in d.options] == ["mig-single"], (placer.name, d)
        _, d = decide(
            _args(_pod(gpu_card_model="MIG 3g.40gb|H100"), ["mig-partial"]),
            snap,
            Reservations(),
            placer,
            NodeIndex(),
        )
        assert [o.node for o in d.options] == ["mig-partial"], (placer.name, d)
        assert set(d.options[0].gpus) <= {0, 1}, (placer.name, d.options)


def test_gpu_share_annotations_and_cpu_only_pods() -> None:
    """A GPU-sharing pod (gpu-milli) is not a MIG resource either; a CPU-only pod is not judged
    by GPUs at all and passes every node."""
    snap = _snap()
    for placer in (PLACERS[0], PLACERS[-1]):
        _, d = decide(
            _args(_pod(count="0", gpu_milli="500"), list(SHAPES)),
            snap,
            Reservations(),
            placer,
            NodeIndex(),
        )
        assert "mig-mixed" in d.unresolvable, (placer.name, d)
        for o in d.options:
            assert set(o.gpus) <= WHOLE.get(o.node, {0, 1, 2, 3}) or not o.gpus, (placer.name, o)
        _, d = decide(
            _args(_pod(count="0"), list(SHAPES)), snap, Reservations(), placer, NodeIndex()
        )
        assert sorted(o.node for o in d.options) == sorted(SHAPES), (placer.name, d)


def test_why_no_fit_names_the_mig_resources() -> None:
    why = why_no_fit(_snap("mig-mixed"), JobSpec(num_gpu=1), Reservations())
    assert why.startswith("no node has 1 healthy GPUs, free or not: the most on one node is 0"), why
    assert (
        "8 MIG instance(s) on nodes of the MIG mixed strategy are nvidia.com/mig-<profile>" in why
    )


def test_a_node_without_gpus_still_fails_for_their_count() -> None:
    """A GPU pod on a CPU node telemetry knows: the reason names the GPU count, as before."""
    cpu = NodeState("cpu-node", "local", [], 64_000, 64_000, 500_000, 500_000)
    snap = FleetSnapshot("test", [*_nodes(), cpu], collected_ts=1.0)
    for placer in (PLACERS[0], PLACERS[-1]):
        _, d = decide(_args(_pod(), ["cpu-node"]), snap, Reservations(), placer, NodeIndex())
        assert d.unresolvable == {"cpu-node": "FleetMind: node has fewer GPUs than the pod's 1"}, d


def test_the_ranking_does_not_depend_on_the_order_kube_scheduler_lists_nodes() -> None:
    """A pod naming a MIG profile and a whole-GPU model is placed in two calls (mixed nodes get
    the whole-GPU names only); the groups were ranked in the order the nodes came, and the first
    option is the one held."""
    snap = _snap()
    pod = _pod(gpu_card_model="MIG 1g.10gb|H100")
    seen = set()
    for order in (
        ["mig-partial", "plain", "mig-single"],
        ["plain", "mig-single", "mig-partial"],
        ["mig-single", "mig-partial", "plain"],
    ):
        _, d = decide(_args(pod, order), snap, Reservations(), BestFitPlacer(), NodeIndex())
        seen.add(tuple((o.node, o.score) for o in d.options))
    assert len(seen) == 1, seen
