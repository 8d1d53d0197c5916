"""fleetmind.serving.scheduler.placement.why_no_fit: a 409 for an impossible job says what is missing."""

from __future__ import annotations

import pytest

from fleetmind.serving.scheduler.placement import BestFitPlacer, Option, Reservations, why_no_fit
from fleetmind.serving.schemas import JobSpec
from fleetmind.serving.telemetry.base import FleetSnapshot, GpuState, NodeState


def node(
    name: str,
    free: list[int],
    *,
    cluster: str = "c0",
    cpu_free: int = 8000,
    mem_free: int = 65536,
    model: str = "A100",
    healthy: bool = True,
) -> NodeState:
    return NodeState(
        name=name,
        cluster=cluster,
        gpus=[
            GpuState(index=i, model=model, free_milli=f, healthy=healthy)
            for i, f in enumerate(free)
        ],
        cpu_milli=16000,
        cpu_milli_free=cpu_free,
        memory_mib=131072,
        memory_mib_free=mem_free,
    )


def reason(nodes: list[NodeState], res: Reservations | None = None, **job: object) -> str:
    snap = FleetSnapshot(source="test", nodes=nodes)
    spec = JobSpec(**job)
    res = res or Reservations()
    assert BestFitPlacer().place(snap, spec, res, 1) == []  # the job really is impossible
    return why_no_fit(snap, spec, res)


def test_host_resources_beside_free_gpus() -> None:
    nodes = [node("a", [1000, 1000], cpu_free=500), node("b", [400, 400])]
    r = reason(nodes, num_gpu=1, cpu_milli=1000)
    assert "1 node(s) have GPU room" in r and "1 lack CPU, 0 lack memory" in r
    assert "at most 500 mCPU free (job: 1000)" in r
    nodes = [node("a", [1000], mem_free=1024), node("b", [1000], cpu_free=0)]
    r = reason(nodes, num_gpu=1, cpu_milli=1000, memory_mib=2048)
    assert "2 node(s)" in r and "1 lack CPU, 1 lack memory" in r


def test_split_gpu_room_and_too_little_gpu() -> None:
    nodes = [node("a", [1000, 600]), node("b", [600, 600])]
    r = reason(nodes, num_gpu=2)
    assert r.startswith("free GPU is split: 2800 milli")
    assert "largest free share on one GPU: 1000 milli" in r and "on one node: 1" in r
    r = reason([node("a", [100, 100]), node("b", [200])], num_gpu=1)
    assert r == (
        "not enough free GPU: 400 milli free on healthy GPUs, the job needs 1000 "
        "(the rest in use per DCGM)"
    )


def test_reservations_and_unhealthy_gpus_count() -> None:
    res = Reservations()
    res.book(Option("c0", "a", (0,), 0.0), JobSpec(num_gpu=1, gpu_milli=700))
    nodes = [node("a", [1000]), node("b", [1000], healthy=False)]
    assert reason(nodes, res, num_gpu=1, gpu_milli=500).startswith("not enough free GPU: 300 milli")


def test_unknown_cluster_model_and_cpu_only_jobs() -> None:
    nodes = [node("a", [1000]), node("b", [1000], cluster="c1", model="T4")]
    assert reason(nodes, num_gpu=1, cluster="zz") == "cluster 'zz' has no nodes (clusters: c0, c1)"
    r = reason(nodes, num_gpu=1, gpu_model="H100")
    assert r == "no GPU model matches 'H100' (models here: A100, T4)"
    r = reason(nodes, num_gpu=1, gpu_model="t4", cluster="c0")
    assert r == "no GPU model matches 't4' (models here: A100)"
    r = reason(nodes, num_gpu=0, cpu_milli=9000)
    assert r.startswith("no node has both the CPU and the memory: at most 8000 mCPU free")


@pytest.mark.parametrize("num_gpu", [0, 1, 2])
def test_a_job_that_fits_is_not_called_impossible(num_gpu: int) -> None:
    snap = FleetSnapshot(source="test", nodes=[node("a", [1000, 1000])])
    job = JobSpec(num_gpu=num_gpu, cpu_milli=1000)
    assert BestFitPlacer().place(snap, job, Reservations(), 1)
    assert why_no_fit(snap, job, Reservations()).startswith("1 node(s) can hold it")
