"""``POST /api/v1/placements`` places a job where the scheduler extender puts the same pod, and its
``score`` does not depend on ``alternatives``.

* A CPU-only job went to a GPU node under ppo, FGD, GpuPacking and DotProd while the extender's
  prioritize scored a node without GPUs 10 (``Decision.scores``: "a CPU-only pod should not take a
  GPU node's CPU and memory while a CPU node has room"). Both now order a CPU-only job's options
  with ``placement.cpu_nodes_first``.
* ``score`` was ``-rank`` (0.0) with ``alternatives`` 0 and the policy's score with more; it is now
  the policy's score of the node either way (BestFit's 0..100 for ppo, which only chooses).
"""

from __future__ import annotations

import os
import random
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from fleetmind.serving.app import create_app
from fleetmind.serving.scheduler.placement import (
    BestFitPlacer,
    Option,
    Reservations,
    cpu_nodes_first,
    peer_heuristic,
)
from fleetmind.serving.schemas import JobSpec
from fleetmind.serving.settings import Settings
from fleetmind.serving.telemetry.base import FleetSnapshot, GpuState, NodeState
from fleetmind.serving.telemetry.sim import SimSource

os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")

POLICIES = [
    "ppo",
    "heuristic:FGD",
    "heuristic:GpuPacking",
    "heuristic:DotProd",
    "heuristic:BestFit",
]
"""The served policies compared: the released PPO agent and the heuristics the registry serves."""


def _host(name: str, gpus: list[GpuState], cpu_free: int, mem_free: int) -> NodeState:
    return NodeState(
        name=name,
        cluster="c0",
        gpus=gpus,
        cpu_milli=96_000,
        cpu_milli_free=cpu_free,
        memory_mib=1_048_576,
        memory_mib_free=mem_free,
    )


def _fleet() -> list[NodeState]:
    """Two GPU nodes (8 free A100s; 4 A100s, half used) and two nodes without GPUs (one with
    24 cores free, one with 8)."""
    busy = [GpuState(index=i, model="A100", free_milli=(1000 if i < 2 else 0)) for i in range(4)]
    return [
        _host("gpu-0", [GpuState(index=i, model="A100") for i in range(8)], 96_000, 1_048_576),
        _host("gpu-1", busy, 64_000, 524_288),
        _host("cpu-0", [], 24_000, 262_144),
        _host("cpu-1", [], 8_000, 65_536),
    ]


@pytest.fixture(params=POLICIES)
def client(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[TestClient]:
    """A service of one policy on :func:`_fleet`, with no holds yet (prioritize holds its choice)."""
    policy: str = request.param
    db = tmp_path / "place.db"
    settings = Settings(
        database_url=f"sqlite:///{db}",
        rca_model="baseline:upstream-coverage",
        placement_model=None if policy == "ppo" else policy,
        incident_worker=False,
    )
    with TestClient(create_app(settings)) as c:
        c.app.state.services.telemetry = SimSource(_fleet())
        assert c.get("/api/v1/models").json()["placement"]["method"] == policy
        yield c


def _pod(job: dict[str, int]) -> dict[str, Any]:
    """The pod the extender sees for ``job`` (whole GPUs through ``nvidia.com/gpu``)."""
    limits = {"nvidia.com/gpu": str(job["num_gpu"])} if job["num_gpu"] else {}
    requests = {"cpu": f"{job['cpu_milli']}m", "memory": f"{job['memory_mib']}Mi"}
    return {
        "metadata": {"name": "job", "namespace": "default", "uid": str(uuid.uuid4())},
        "spec": {
            "containers": [{"name": "c", "resources": {"requests": requests, "limits": limits}}]
        },
    }


def _passes_node_resources_fit(node: NodeState, job: dict[str, int]) -> bool:
    """Whether kube-scheduler's NodeResourcesFit passes ``node`` for ``job``'s pod, so that it
    reaches the extender at all: the pod's CPU and memory requests within the node's allocatable
    less the requests of its pods (``fitsRequest`` in kubernetes
    ``pkg/scheduler/framework/plugins/noderesources/fit.go``), which is what this fleet's free
    amounts model. The extender takes the CPU and memory of every node it is sent as fitting."""
    return node.cpu_milli_free >= job["cpu_milli"] and node.memory_mib_free >= job["memory_mib"]


def _extender_top(c: TestClient, job: dict[str, int]) -> str:
    """The node the extender's prioritize scores highest (alone) for ``job``'s pod, sent the nodes
    kube-scheduler would send it (:func:`_passes_node_resources_fit`)."""
    names = [n.name for n in _fleet() if _passes_node_resources_fit(n, job)]
    r = c.post("/api/v1/scheduler/prioritize", json={"Pod": _pod(job), "NodeNames": names})
    assert r.status_code == 200, r.text
    scores = {h["Host"]: h["Score"] for h in r.json()}
    top = [n for n, s in scores.items() if s == max(scores.values())]
    assert len(top) == 1, scores
    return top[0]


def _route(c: TestClient, job: dict[str, int], alternatives: int = 3) -> dict[str, Any]:
    r = c.post("/api/v1/placements", json=dict(job, alternatives=alternatives))
    assert r.status_code == 200, r.text
    return r.json()


def _scattered_fleet() -> list[NodeState]:
    """Eight 8-GPU hosts with GPUs partly used (seeded), where ppo's choice is not BestFit's."""
    rng = random.Random(0)
    return [
        _host(
            f"n{i}",
            [
                GpuState(index=g, model="A100", free_milli=rng.choice([1000, 1000, 0, 500, 300]))
                for g in range(8)
            ],
            rng.randint(20_000, 96_000),
            1_048_576,
        )
        for i in range(8)
    ]


CPU_JOBS = [
    {"num_gpu": 0, "cpu_milli": 4000, "memory_mib": 8192},  # fits both nodes without GPUs
    {"num_gpu": 0, "cpu_milli": 16_000, "memory_mib": 8192},  # only cpu-0 of them
    {"num_gpu": 0, "cpu_milli": 32_000, "memory_mib": 8192},  # no node without GPUs has room
]


@pytest.mark.parametrize("job", CPU_JOBS)
@pytest.mark.parametrize("alternatives", [0, 3])
def test_a_cpu_only_job_goes_where_the_extender_puts_it(
    client: TestClient, job: dict[str, int], alternatives: int
) -> None:
    placed = _route(client, job, alternatives)
    assert placed["node"] == _extender_top(client, job)
    cpu_room = [n.name for n in _fleet() if not n.gpus and n.cpu_milli_free >= job["cpu_milli"]]
    if cpu_room:  # a node without GPUs first while one has room
        assert placed["node"] in cpu_room
        gpu_alts = [i for i, o in enumerate(placed["alternatives"]) if o["node"].startswith("gpu")]
        cpu_alts = [i for i, o in enumerate(placed["alternatives"]) if o["node"].startswith("cpu")]
        assert all(i < j for i in cpu_alts for j in gpu_alts)
    else:
        assert placed["node"].startswith("gpu")


@pytest.mark.parametrize("num_gpu", [1, 2, 4])
def test_gpu_jobs_still_go_where_the_extender_puts_them(client: TestClient, num_gpu: int) -> None:
    job = {"num_gpu": num_gpu, "cpu_milli": 4000, "memory_mib": 8192}
    placed = _route(client, job)
    assert placed["node"] == _extender_top(client, job)
    assert placed["node"].startswith("gpu") and len(placed["gpus"]) == num_gpu


@pytest.mark.parametrize(
    "job",
    [CPU_JOBS[0], {"num_gpu": 1, "gpu_milli": 300, "cpu_milli": 1000, "memory_mib": 1024}]
    + [{"num_gpu": g, "cpu_milli": 1000, "memory_mib": 1024} for g in (1, 2)],
)
@pytest.mark.parametrize("scattered", [False, True])
def test_the_score_does_not_depend_on_alternatives(
    client: TestClient, job: dict[str, int], scattered: bool
) -> None:
    if scattered:
        client.app.state.services.telemetry = SimSource(_scattered_fleet())
    alone, listed = _route(client, job, 0), _route(client, job, 3)
    assert (alone["node"], alone["gpus"]) == (listed["node"], listed["gpus"])
    assert alone["score"] == listed["score"]
    assert alone["alternatives"] == []


@pytest.mark.parametrize(
    "job",
    [
        JobSpec(num_gpu=1, gpu_milli=200),
        JobSpec(num_gpu=1),
        JobSpec(num_gpu=2),
        JobSpec(num_gpu=0, cpu_milli=4000),
    ],
)
def test_each_option_scores_as_in_the_full_ranking(client: TestClient, job: JobSpec) -> None:
    """Every option's ``score`` is its node's score in the policy's ranking of all nodes, whatever
    ``k``; under ppo (a policy that only chooses) that is BestFit's 0..100 score, the alternatives
    in BestFit's order, and ppo's own choice, first, may score below them (docs/serving/api.md)."""
    impl = client.app.state.services.registry.current.placement.impl
    snap = FleetSnapshot("sim", _scattered_fleet(), 1_800_000_000.0)
    every = {o.node: o.score for o in impl.place(snap, job, Reservations(), k=20)}
    for k in (1, 4):
        options = impl.place(snap, job, Reservations(), k)
        assert len(options) == min(k, len(every))
        assert all(o.score == every[o.node] for o in options)
    if impl.name == "ppo":
        bestfit = peer_heuristic("BestFit")
        assert bestfit is not None
        assert every == {o.node: o.score for o in bestfit.place(snap, job, Reservations(), k=20)}
        rest = list(every.values())[1:]
        assert rest == sorted(rest, reverse=True)
        assert all(0.0 <= v <= 100.0 for v in every.values())


def test_builtin_bestfit_breaks_a_tie_for_the_node_without_gpus() -> None:
    """The built-in BestFit scores a CPU-only job by the GPU capacity a node leaves free: a GPU
    node with none free ties with a node without GPUs, and the name ordered the GPU node first."""
    full = [GpuState(index=i, model="A100", free_milli=0) for i in range(4)]
    snap = FleetSnapshot(
        "sim", [_host("a-gpu", full, 96_000, 1_048_576), _host("b-cpu", [], 96_000, 1_048_576)], 0.0
    )
    job = JobSpec(num_gpu=0, cpu_milli=1000, memory_mib=1024)
    assert [o.node for o in BestFitPlacer().place(snap, job, Reservations(), 1)] == ["b-cpu"]
    assert [o.node for o in BestFitPlacer().place(snap, job, Reservations(), 2)] == [
        "b-cpu",
        "a-gpu",
    ]
    gpu = JobSpec(num_gpu=1, cpu_milli=1000, memory_mib=1024)
    assert BestFitPlacer().place(snap, gpu, Reservations(), 2) == []  # no GPU free anywhere


def test_cpu_nodes_first_is_stable_and_keyed_by_cluster_and_name() -> None:
    nodes = [
        _host("x", [GpuState(index=0, model="A100")], 1, 1),
        _host("y", [], 1, 1),
        NodeState(name="x", cluster="c1", gpus=[]),  # same name, another cluster, no GPUs
    ]
    opts = [Option("c0", "x", (), 3.0), Option("c1", "x", (), 2.0), Option("c0", "y", (), 1.0)]
    assert [(o.cluster, o.node) for o in cpu_nodes_first(opts, nodes)] == [
        ("c1", "x"),
        ("c0", "y"),
        ("c0", "x"),
    ]


@pytest.mark.parametrize("k", [1, 4])
def test_topology_best_effort_never_reuses_the_previous_requests_gpu_sets(k: int) -> None:
    """TopologyBestEffort keeps the GPU sets its last score() found; a request whose only
    feasible node skips scoring must not be handed the sets scored for the request before."""

    def host(name: str, free: int) -> NodeState:
        gpus = [
            GpuState(index=i, model="V100M32", free_milli=1000 if i < free else 0) for i in range(8)
        ]
        return NodeState(
            name=name,
            cluster="c0",
            gpus=gpus,
            cpu_milli=96000,
            cpu_milli_free=96000,
            memory_mib=1 << 20,
            memory_mib_free=1 << 20,
        )

    snap = FleetSnapshot("sim", [host("x", 8), host("y", 2)], 1.0)
    placer = peer_heuristic("TopologyBestEffort")
    for n in (2, 4):
        opts = placer.place(snap, JobSpec(num_gpu=n), Reservations(), k)
        assert opts, n
        assert all(len(o.gpus) == n for o in opts), [(o.node, o.gpus) for o in opts]
