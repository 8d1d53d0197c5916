"""Nodes of more than 8 GPUs under the served policies, and pods Kubernetes accepts that FleetMind
cannot place.

Upstream behaviour behind the expectations:

* Nodes of 16 GPUs exist: GCP ``a2-megagpu-16g`` (16 A100 40GB), NVIDIA DGX-2 (16 V100). The
  simulator's state holds 8 GPUs per node (``MAX_GPUS_PER_NODE``, ``envs/core.py``), so the
  policies (the released PPO agent, the heuristics) see only the first 8; decisions on wider nodes
  are BestFit's, which sees every GPU (``PeerPolicyPlacer.place``).
* kube-scheduler's ``HTTPExtender.send`` (``pkg/scheduler/extender.go``) returns an error for any
  status but 200 without reading the body, and ``findNodesThatPassExtenders``
  (``pkg/scheduler/schedule_one.go``) skips an ``ignorable`` extender that errs: a 422 leaves
  "code 422" on the pod, or with ``ignorable: true`` places it without FleetMind. Node entries of
  ``FailedAndUnresolvableNodes`` become ``UnschedulableAndUnresolvable`` (no preemption).
* NVIDIA/k8s-device-plugin's mixed MIG strategy (``mig-strategy.go``) advertises
  ``nvidia.com/gpu`` and one ``nvidia.com/mig-<profile>`` per profile on one node, so a pod may ask
  for several; pod annotations are free text to the API server.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient

from fleetmind.envs.policies import make_policy
from fleetmind.rl.policy_adapter import load_ppo_policy
from fleetmind.serving.app import create_app
from fleetmind.serving.scheduler.extender import NodeIndex, decide
from fleetmind.serving.scheduler.placement import (
    BestFitPlacer,
    PeerPolicyPlacer,
    Reservations,
)
from fleetmind.serving.schemas import JobSpec
from fleetmind.serving.settings import Settings
from fleetmind.serving.telemetry.base import FleetSnapshot, GpuState, NodeState
from fleetmind.serving.telemetry.sim import SimSource

os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")

A100 = "NVIDIA A100-SXM4-40GB"
MIG_1G = "NVIDIA H100 80GB HBM3 MIG 1g.10gb"


def _node(name: str, n: int, busy: range | tuple[int, ...] = (), model: str = A100) -> NodeState:
    """A node of ``n`` GPUs, those in ``busy`` full (nothing free), the others idle."""
    gpus = [
        GpuState(
            i, model, mem_total_mib=40960.0, mem_used_mib=0.0, free_milli=0 if i in busy else 1000
        )
        for i in range(n)
    ]
    return NodeState(name, "local", gpus, 96_000, 96_000, 1_000_000, 1_000_000)


def _mig_node(name: str, instances: int, busy: int) -> NodeState:
    """An all-1g.10gb MIG node (one profile: the single strategy's ``nvidia.com/gpu``) of
    ``instances`` instances, 7 per GPU, numbered as the Prometheus source does; the first ``busy``
    full."""
    gpus = [
        GpuState(
            100 * (i // 7 + 1) + i % 7 + 1,
            MIG_1G,
            mem_total_mib=9856.0,
            mem_used_mib=0.0,
            free_milli=0 if i < busy else 1000,
            mig_parent=i // 7,
        )
        for i in range(instances)
    ]
    return NodeState(name, "local", gpus, 96_000, 96_000, 1_000_000, 1_000_000)


FLEET = [
    _node("big-0", 16),  # idle a2-megagpu-16g
    _node("big-1", 16, busy=range(8)),  # GPUs 0-7 full, 8-15 idle
    _node("small-0", 8, busy=(0, 1)),
    _node("small-1", 8),
    _mig_node("mig-14", 14, busy=8),  # two H100s in all-1g.10gb: 14 instances
]
SNAP = FleetSnapshot("test", FLEET, collected_ts=1.0)


def _placers() -> list[Any]:
    out: list[Any] = [PeerPolicyPlacer(load_ppo_policy(), "ppo")]
    for name in ("BestFit", "DotProd", "GpuPacking", "GpuClustering"):
        out.append(PeerPolicyPlacer(make_policy(name), f"heuristic:{name}"))
    return out


PLACERS = _placers()
IDS = [p.name for p in PLACERS]


def _pod(name: str = "p", limits: dict[str, str] | None = None, **ann: str) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": "ml", "uid": f"uid-{name}"}
    if ann:
        meta["annotations"] = {f"alibabacloud.com/{k.replace('_', '-')}": v for k, v in ann.items()}
    lim = {"cpu": "1", "memory": "1Gi", **(limits or {})}
    return {"metadata": meta, "spec": {"containers": [{"name": "m", "resources": {"limits": lim}}]}}


def _gpu_pod(n: int, name: str = "p") -> dict[str, Any]:
    return _pod(name, {"nvidia.com/gpu": str(n)})


# ------------------------------------------------------------------ nodes of more than 8 GPUs
@pytest.mark.parametrize("placer", PLACERS, ids=IDS)
@pytest.mark.parametrize(
    ("gpus", "node", "expect"),
    [
        (1, "big-1", None),  # one of GPUs 8-15
        (8, "big-1", tuple(range(8, 16))),
        (16, "big-0", tuple(range(16))),
    ],
)
def test_a_wide_node_is_placed_on_with_all_its_gpus(
    placer: Any, gpus: int, node: str, expect: tuple[int, ...] | None
) -> None:
    """Before, the policy saw each node's first 8 GPUs only: all three were FailedNodes ("the
    placement policy found no room for the pod here"), scored 0."""
    _, d = decide({"Pod": _gpu_pod(gpus), "NodeNames": [node]}, SNAP, Reservations(), placer,
                  NodeIndex())  # fmt: skip
    assert not d.failed and not d.unresolvable
    (opt,) = d.options
    assert opt.node == node and len(opt.gpus) == gpus
    assert set(opt.gpus) <= set(range(8, 16)) if expect is None else opt.gpus == expect
    assert d.scores() == {node: 10}


@pytest.mark.parametrize("placer", PLACERS, ids=IDS)
def test_a_mig_node_of_more_than_8_instances_offers_them_all(placer: Any) -> None:
    _, d = decide({"Pod": _gpu_pod(1), "NodeNames": ["mig-14"]}, SNAP, Reservations(), placer,
                  NodeIndex())  # fmt: skip
    (opt,) = d.options
    free = {g.index for g in FLEET[4].gpus if g.free_milli == 1000}
    assert opt.node == "mig-14" and len(opt.gpus) == 1 and opt.gpus[0] in free


@pytest.mark.parametrize("placer", PLACERS, ids=IDS)
def test_a_fleet_mixing_8_and_16_gpu_nodes_keeps_the_policy_choice_on_8_gpu_nodes(
    placer: Any,
) -> None:
    """Per node: the policy decides among the 8-GPU nodes (its choice first, as without wide
    nodes), the wide nodes pass too, ranked after it by BestFit."""
    names = ["big-0", "big-1", "small-0", "small-1"]
    _, d = decide({"Pod": _gpu_pod(1), "NodeNames": names}, SNAP, Reservations(), placer,
                  NodeIndex())  # fmt: skip
    small = FleetSnapshot("test", [n for n in FLEET if len(n.gpus) <= 8], collected_ts=1.0)
    _, alone = decide({"Pod": _gpu_pod(1), "NodeNames": ["small-0", "small-1"]}, small,
                      Reservations(), placer, NodeIndex())  # fmt: skip
    assert d.options[0].node == alone.options[0].node
    assert d.options[0].gpus == alone.options[0].gpus
    assert {o.node for o in d.options} == set(names) and not d.failed
    scores = d.scores()
    assert scores[alone.options[0].node] == 10
    assert all(scores[n] <= 4 for n in names if n != alone.options[0].node)
    # only the wide nodes hold 16 GPUs: BestFit's, the policy is not asked
    _, d16 = decide({"Pod": _gpu_pod(16), "NodeNames": names}, SNAP, Reservations(), placer,
                    NodeIndex())  # fmt: skip
    assert [o.node for o in d16.options] == ["big-0"]
    assert "big-1" in d16.failed and "small-0" in d16.unresolvable


@pytest.mark.parametrize("placer", PLACERS, ids=IDS)
def test_placements_api_placer_uses_wide_nodes_and_their_reservations(placer: Any) -> None:
    job = JobSpec(num_gpu=8, gpu_milli=1000, cpu_milli=1000, memory_mib=1024, alternatives=3)
    only_big1 = {("local", "big-1")}
    (opt,) = placer.place(SNAP, job, Reservations(), 4, allowed=only_big1)
    assert opt.gpus == tuple(range(8, 16))
    res = Reservations()
    res.book(opt, job)  # GPUs 8-15 of big-1 held: nothing left there
    assert placer.place(SNAP, job, res, 4, allowed=only_big1) == []
    _, d = decide({"Pod": _gpu_pod(1), "NodeNames": ["big-1"]}, SNAP, res, placer, NodeIndex())
    assert "held for pods FleetMind placed" in d.failed["big-1"]
    # ranks, not scores of two kinds, when both kinds of node give options: best first
    opts = placer.place(SNAP, job, Reservations(), 4)
    assert [o.score for o in opts] == sorted((o.score for o in opts), reverse=True)
    assert {o.node for o in opts} == {"big-0", "big-1", "small-1"}


def test_bestfit_alone_agrees_on_wide_nodes() -> None:
    """The built-in BestFit placer already saw every GPU: its choice is the one the policies now
    delegate to."""
    _, d = decide({"Pod": _gpu_pod(8), "NodeNames": ["big-1"]}, SNAP, Reservations(),
                  BestFitPlacer(), NodeIndex())  # fmt: skip
    assert d.options[0].gpus == tuple(range(8, 16))


# ------------------------------------------------------------------ pods FleetMind cannot place
@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    d = tmp_path_factory.mktemp("refusals")
    settings = Settings(
        database_url=f"sqlite:///{d}/fm.db",
        rca_model="baseline:upstream-coverage",
        incident_worker=False,
    )
    with TestClient(create_app(settings)) as c_:
        assert c_.app.state.services.registry.current.placement.method == "ppo"
        c_.app.state.services.telemetry = SimSource(FLEET)
        yield c_


REFUSED = {
    "gpu-and-mig": (_pod("a", {"nvidia.com/gpu": "1", "nvidia.com/mig-1g.10gb": "1"}), "both"),
    "two-mig-profiles": (
        _pod("b", {"nvidia.com/mig-2g.20gb": "1", "nvidia.com/mig-1g.10gb": "1"}),
        "several MIG profiles",
    ),
    "gpu-milli-1500": (_pod("c", gpu_milli="1500"), "1..1000"),
    "share-on-two-gpus": (_pod("d", gpu_milli="500", gpu_count="2"), "whole GPUs"),
    "negative-count": (_pod("e", gpu_count="-1"), ">= 0"),
}


@pytest.mark.parametrize("case", list(REFUSED))
def test_pods_kubernetes_accepts_fail_every_node_with_the_reason(
    client: TestClient, case: str
) -> None:
    """Before, each was a 422, which kube-scheduler reads as the extender failing."""
    pod, words = REFUSED[case]
    names = ["big-0", "small-1"]
    r = client.post("/api/v1/scheduler/filter", json={"Pod": pod, "NodeNames": names})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["NodeNames"] == [] and body["FailedNodes"] == {} and body["Error"] == ""
    assert set(body["FailedAndUnresolvableNodes"]) == set(names)
    assert all(words in why for why in body["FailedAndUnresolvableNodes"].values())
    r = client.post("/api/v1/scheduler/prioritize", json={"Pod": pod, "NodeNames": names})
    assert r.status_code == 200, r.text
    assert r.json() == [{"Host": n, "Score": 0} for n in names]
    held = client.app.state.services.reservations.rows()
    assert not [h for h in held if h["pod_key"] == f"ml/{pod['metadata']['name']}"]


@pytest.mark.parametrize(
    "body",
    [[], {"Pod": 1, "NodeNames": ["big-0"]}, {"Pod": _pod("f", gpu_milli="1500")}],
    ids=["not-an-object", "pod-not-an-object", "no-node-names"],
)
def test_bodies_that_are_not_extender_args_are_still_422(client: TestClient, body: Any) -> None:
    r = client.post("/api/v1/scheduler/filter", json=body)
    assert r.status_code == 422 and r.json()["detail"]


def test_a_wide_node_is_held_through_the_service(client: TestClient) -> None:
    """End to end with the released PPO policy: prioritize scores big-1 10 and holds GPUs 8-15."""
    args = {"Pod": _gpu_pod(8, "wide"), "NodeNames": ["big-1"]}
    r = client.post("/api/v1/scheduler/filter", json=args)
    assert r.status_code == 200 and r.json()["NodeNames"] == ["big-1"], r.text
    r = client.post("/api/v1/scheduler/prioritize", json=args)
    assert r.json() == [{"Host": "big-1", "Score": 10}]
    (hold,) = [
        h for h in client.app.state.services.reservations.rows() if h["pod_key"] == "ml/wide"
    ]
    assert hold["node"] == "big-1" and sorted(hold["gpus"]) == list(range(8, 16))
