"""Several time-slicing replicas per pod with every placement policy, not only the built-in one.

A pod asking ``nvidia.com/gpu: n`` on a time-sliced node becomes a job of ``n`` GPUs with one
replica (``1000 // r`` milli) on each. The simulator that ``PeerPolicyPlacer`` runs its policy on
(the served default: the released PPO; the fallback heuristics) reads ``num_gpu`` > 1 as ``n``
whole GPUs (``ClusterState.feasible`` in ``envs/core.py`` asks each to be fully idle), so once a
replica was held every later such pod was refused ("the placement policy found no room") although
replicas were free. Such a job is now placed by the built-in best fit.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from fleetmind.serving.app import create_app
from fleetmind.serving.scheduler.extender import NodeIndex, decide
from fleetmind.serving.scheduler.placement import (
    BestFitPlacer,
    Option,
    Reservations,
    peer_heuristic,
)
from fleetmind.serving.schemas import JobSpec
from fleetmind.serving.settings import Settings
from fleetmind.serving.telemetry.base import FleetSnapshot, GpuState, NodeState
from fleetmind.serving.telemetry.sim import SimSource

os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")


def _node(name: str, free: list[int], replicas: int) -> NodeState:
    return NodeState(
        name=name,
        cluster="k8s",
        gpus=[GpuState(index=i, model="A100", free_milli=f) for i, f in enumerate(free)],
        cpu_milli=32_000,
        cpu_milli_free=32_000,
        memory_mib=131_072,
        memory_mib_free=131_072,
        gpu_replicas=replicas,
    )


def _args(gpus: str, name: str = "p", nodes: tuple[str, ...] = ("ts",)) -> dict[str, Any]:
    limits = {"cpu": "1", "memory": "1Gi", "nvidia.com/gpu": gpus}
    pod = {
        "metadata": {"name": name, "namespace": "ml", "uid": f"uid-{name}"},
        "spec": {"containers": [{"name": "main", "resources": {"limits": limits}}]},
    }
    return {"Pod": pod, "NodeNames": list(nodes)}


def test_a_heuristic_places_two_replicas_on_gpus_with_one_taken() -> None:
    """GPUs with 750 and 500 free (one and two of four replicas taken): the ``BestFit`` heuristic
    of ``envs.policies`` places a two-replica pod there, as the built-in best fit does."""
    placer = peer_heuristic("BestFit")
    assert placer is not None
    snap = FleetSnapshot(source="test", nodes=[_node("ts", [750, 500], 4)])
    _, d = decide(_args("2"), snap, Reservations(), placer, NodeIndex())
    assert [(o.node, sorted(o.gpus)) for o in d.options] == [("ts", [0, 1])]
    assert d.failed == {} and d.unresolvable == {}


def test_the_policy_placer_gives_a_replica_job_the_built_in_best_fit() -> None:
    """The job the extender builds (two GPUs, 250 milli each) gets the options of
    ``BestFitPlacer`` on the same snapshot and reservations, ``allowed`` and ``k`` included."""
    placer = peer_heuristic("BestFit")
    assert placer is not None
    nodes = [_node("a", [1000, 250, 500], 4), _node("b", [250, 250], 4), _node("c", [0, 250], 4)]
    snap = FleetSnapshot(source="test", nodes=nodes)
    res = Reservations()
    job = JobSpec(num_gpu=2, gpu_milli=250, cpu_milli=1000, memory_mib=1024)
    res.book(Option("k8s", "a", (1,), 0.0), job)  # GPU 1 of a now has no replica free
    for allowed in (None, {("k8s", "a"), ("k8s", "c")}):
        got = placer.place(snap, job, res, 3, allowed=allowed)
        assert got == BestFitPlacer().place(snap, job, res, 3, allowed=allowed)
    assert [(o.node, o.gpus) for o in placer.place(snap, job, res, 3)] == [
        ("b", (0, 1)),
        ("a", (0, 2)),
    ]
    assert placer.place(snap, job, res, 3, allowed={("k8s", "c")}) == []


@pytest.mark.parametrize("model", ["heuristic:BestFit", None])
def test_four_two_replica_pods_fill_a_two_gpu_node_of_four_replicas(
    tmp_path: Path, model: str | None
) -> None:
    """Through filter with the served policy (``None``: the default, the released PPO): a node
    of two GPUs time-sliced x4 takes four pods of two replicas each (one on each GPU), then no
    more. It used to take only the first under any policy but the built-in best fit."""
    settings = Settings(
        database_url=f"sqlite:///{tmp_path}/ts.db",
        rca_model="baseline:upstream-coverage",
        placement_model=model,
        incident_worker=False,
    )
    with TestClient(create_app(settings)) as c:
        served = c.app.state.services.registry.current.placement
        assert served.method == (model or "ppo") and served.fallback_reason is None
        c.app.state.services.telemetry = SimSource([_node("ts", [1000, 1000], 4)])
        passed = []
        for i in range(5):
            out = c.post("/api/v1/scheduler/filter", json=_args("2", name=f"p{i}")).json()
            passed.append((out["NodeNames"], out["FailedNodes"]))
        assert passed[:4] == [(["ts"], {})] * 4
        assert passed[4][0] == [] and "not enough free GPUs" in passed[4][1]["ts"]
        rows = c.app.state.services.reservations.rows()
        assert [(sorted(r["gpus"]), r["gpu_milli"]) for r in rows] == [([0, 1], 250)] * 4
