"""Served placement: the health filter matches (cluster, node), and jobs of several whole GPUs get
the node's best-linked idle GPUs.

Fleets model what NVIDIA dcgm-exporter reports (``modelName`` "NVIDIA A100-SXM4-80GB",
"Tesla V100-SXM2-32GB", "NVIDIA L40S": https://github.com/NVIDIA/dcgm-exporter,
``etc/default-counters.csv``); the topologies are the project's real-machine templates
(``dgx1-v100``, ``pcie-8gpu``: ``fleetmind.data.fleet_io.telemetry_template_for``).
"""

from __future__ import annotations

import tempfile
import warnings
from collections.abc import Sequence

import pytest

from fleetmind.data.fleet_io import telemetry_template_for
from fleetmind.rl.policy_adapter import load_ppo_policy
from fleetmind.serving.scheduler.placement import (
    BestFitPlacer,
    PeerPolicyPlacer,
    Placer,
    Reservations,
    peer_heuristic,
)
from fleetmind.serving.schemas import JobSpec
from fleetmind.serving.telemetry.base import FleetSnapshot, GpuState, NodeState

A100 = "NVIDIA A100-SXM4-80GB"
V100 = "Tesla V100-SXM2-32GB"
L40S = "NVIDIA L40S"


def _node(
    name: str,
    model: str,
    busy: Sequence[int],
    cluster: str = "c1",
    cpu: int = 0,
    mem: int = 0,
) -> NodeState:
    """An 8-GPU node with the GPUs ``busy`` fully used; ``cpu``/``mem`` 0: not reported."""
    gpus = [GpuState(index=i, model=model, free_milli=0 if i in busy else 1000) for i in range(8)]
    return NodeState(
        name=name,
        cluster=cluster,
        gpus=gpus,
        cpu_milli=cpu,
        cpu_milli_free=cpu,
        memory_mib=mem,
        memory_mib_free=mem,
    )


@pytest.fixture(scope="module")
def served() -> dict[str, Placer]:
    """The released PPO agent (the default served policy), FGD and BestFit as served."""
    fgd = peer_heuristic("FGD")
    bestfit = peer_heuristic("BestFit")
    assert fgd is not None and bestfit is not None
    return {
        "ppo": PeerPolicyPlacer(load_ppo_policy(), name="ppo"),
        "FGD": fgd,
        "BestFit": bestfit,
        "builtin": BestFitPlacer(),
    }


def _links(model: str, gpus: tuple[int, ...]) -> tuple[int, list[int]]:
    """Fewest NVLinks between two of ``gpus`` and the NUMA nodes they sit on."""
    t = telemetry_template_for(model, 8)
    pairs = [(a, b) for i, a in enumerate(gpus) for b in gpus[i + 1 :]]
    return min(int(t.nvlinks[a][b]) for a, b in pairs), sorted({int(t.numa[g]) for g in gpus})


@pytest.mark.parametrize("policy", ["ppo", "FGD", "BestFit", "builtin"])
@pytest.mark.parametrize(
    ("model", "busy", "k", "want", "nvlinks"),
    [
        (V100, [0, 1, 2, 7], 2, (5, 6), 2),  # NV2 pair on one socket, not (3, 4) across sockets
        (L40S, [0, 1, 2, 7], 2, (4, 5), 0),  # one PCIe switch, one socket
        (L40S, [0, 1, 2], 4, (4, 5, 6, 7), 0),  # one socket, not (3, 4, 5, 6)
    ],
)
def test_multi_gpu_job_gets_the_best_linked_idle_gpus(
    served: dict[str, Placer],
    policy: str,
    model: str,
    busy: list[int],
    k: int,
    want: tuple[int, ...],
    nvlinks: int,
) -> None:
    snap = FleetSnapshot("prometheus", [_node("a", model, busy), _node("b", model, busy)])
    opts = served[policy].place(snap, JobSpec(num_gpu=k), Reservations(), 2)
    assert [o.gpus for o in opts] == [want, want]  # the alternative's GPUs too
    assert _links(model, want) == (nvlinks, [1])


def test_unhealthy_cluster_node_sharing_a_name_gets_no_job() -> None:
    """Cluster ``west`` is far below FLEETMIND_HEALTH_MIN; its empty ``node-1`` shares a name with
    ``east``'s full ``node-1``: the job goes to east's free GPU, not to west."""
    from fastapi.testclient import TestClient

    from fleetmind.serving.app import create_app
    from fleetmind.serving.settings import Settings
    from fleetmind.serving.telemetry.sim import SimSource

    def node(cluster: str, name: str, used: Sequence[int], sick: bool = False) -> NodeState:
        gpus = [
            GpuState(
                index=i,
                model=A100,
                free_milli=0 if i in used else 1000,
                util_pct=100.0 if sick else 30.0,
                mem_total_mib=81920,
                mem_used_mib=81000 if sick else 1000,
                xid_errors=79 if sick else 0,
            )
            for i in range(8)
        ]
        return NodeState(
            name=name,
            cluster=cluster,
            gpus=gpus,
            cpu_milli=256000,
            cpu_milli_free=2000 if sick else 256000 - 8000 * len(used),
            memory_mib=2097152,
            memory_mib_free=2097152 - 131072 * len(used),
        )

    fleet = [
        node("east", "node-1", range(8)),
        node("east", "node-2", range(7)),
        node("west", "node-1", [], sick=True),
        node("west", "node-9", range(4), sick=True),
    ]
    settings_kw = {"rca_model": "baseline:upstream-coverage", "incident_worker": False}
    with tempfile.TemporaryDirectory() as d, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        app = create_app(Settings(database_url=f"sqlite:///{d}/fm.db", **settings_kw))
        with TestClient(app) as c:
            c.app.state.services.telemetry = SimSource(fleet)
            body = {"num_gpu": 1, "cpu_milli": 1000, "memory_mib": 1024, "alternatives": 3}
            r = c.post("/api/v1/placements", json=body)
    assert r.status_code == 200
    got = r.json()
    assert (got["cluster"], got["node"], got["gpus"]) == ("east", "node-2", [7])
    assert all(a["cluster"] == "east" for a in got["alternatives"])
