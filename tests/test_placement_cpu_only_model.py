"""A CPU-only job's ``gpu_model`` binds nothing, on every front end.

The scheduler extender asks for no model when a pod takes no GPU (``PodRequest.job``) and
:class:`BestFitPlacer` lists every node with the host room for a CPU-only job, but
:class:`PeerPolicyPlacer` (the served PPO policy and the ``envs.policies`` heuristics) masked the
nodes by the model: ``POST /api/v1/placements`` with ``num_gpu: 0, gpu_model: "V100"`` on a fleet
without V100s answered 409, "... can hold it by the free capacity the service sees, but the serving
policy placed it nowhere".
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from fleetmind.serving.app import create_app
from fleetmind.serving.scheduler.placement import (
    BestFitPlacer,
    Reservations,
    peer_heuristic,
    why_no_fit,
)
from fleetmind.serving.schemas import JobSpec
from fleetmind.serving.settings import Settings
from fleetmind.serving.telemetry.base import FleetSnapshot, GpuState, NodeState
from fleetmind.serving.telemetry.sim import SimSource

os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")


def _nodes() -> list[NodeState]:
    """Two hosts: four A100s and two T4s, 32 cores and 128 GiB each."""
    return [
        NodeState(
            name=name,
            cluster="c0",
            gpus=[GpuState(index=i, model=model) for i in range(n)],
            cpu_milli=32_000,
            cpu_milli_free=32_000,
            memory_mib=131_072,
            memory_mib_free=131_072,
        )
        for name, model, n in (("a100-0", "A100", 4), ("t4-0", "T4", 2))
    ]


def _snapshot() -> FleetSnapshot:
    return FleetSnapshot("sim", _nodes(), 1_800_000_000.0)


@pytest.mark.parametrize("policy", ["BestFit", "Random", "DotProd"])
@pytest.mark.parametrize("model", ["V100", "A100", "T4"])
def test_peer_policies_ignore_the_model_of_a_cpu_only_job(policy: str, model: str) -> None:
    placer = peer_heuristic(policy)
    assert placer is not None
    job = JobSpec(num_gpu=0, cpu_milli=1000, memory_mib=1024, gpu_model=model)
    plain = JobSpec(num_gpu=0, cpu_milli=1000, memory_mib=1024)
    options = placer.place(_snapshot(), job, Reservations(), k=2)
    assert options, f"{policy} placed a CPU-only job with gpu_model={model!r} nowhere"
    assert all(o.gpus == () for o in options)
    # the model changes nothing: the nodes a job without one may take
    assert {o.node for o in options} == {
        o.node for o in placer.place(_snapshot(), plain, Reservations(), k=2)
    }
    assert {o.node for o in BestFitPlacer().place(_snapshot(), job, Reservations(), 2)} == {
        "a100-0",
        "t4-0",
    }


def test_a_gpu_jobs_model_still_binds() -> None:
    placer = peer_heuristic("BestFit")
    assert placer is not None
    job = JobSpec(num_gpu=1, gpu_model="T4")
    assert [o.node for o in placer.place(_snapshot(), job, Reservations(), k=2)] == ["t4-0"]
    missing = JobSpec(num_gpu=1, gpu_model="V100")
    assert placer.place(_snapshot(), missing, Reservations(), k=2) == []
    assert "no GPU model matches 'V100'" in why_no_fit(_snapshot(), missing, Reservations())


@pytest.fixture
def client(tmp_path: Path) -> Iterator[TestClient]:
    settings = Settings(
        database_url=f"sqlite:///{tmp_path}/cpu.db",
        rca_model="baseline:upstream-coverage",
        placement_model="heuristic:BestFit",
        incident_worker=False,
    )
    with TestClient(create_app(settings)) as c:
        c.app.state.services.telemetry = SimSource(_nodes())
        yield c


def test_the_placement_route_places_a_cpu_only_job_with_a_model(client: TestClient) -> None:
    r = client.post(
        "/api/v1/placements", json={"num_gpu": 0, "cpu_milli": 1000, "gpu_model": "V100"}
    )
    assert r.status_code == 200, r.text
    assert r.json()["gpus"] == [] and r.json()["node"] in {"a100-0", "t4-0"}
