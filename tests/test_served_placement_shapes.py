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
from typing import Any

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


# A GPU that fell off the bus has no dcgm-exporter series (its ``gpu`` label is the NVML index,
# https://github.com/NVIDIA/dcgm-exporter ``etc/default-counters.csv``); without kube-state-metrics'
# count no placeholder stands in for it, so telemetry lists GPUs 0, 1, 2, 4, 5, 6, 7 of a DGX-1.
_DGX1_WITHOUT_GPU3 = (0, 1, 2, 4, 5, 6, 7)


@pytest.mark.parametrize("policy", ["ppo", "FGD", "BestFit", "builtin"])
@pytest.mark.parametrize(
    ("busy", "want"),
    [
        ([0], (6, 7)),  # NV2 on one socket; reading positions as GPUs gave (2, 4): no NVLink
        ([0, 7], (1, 2)),  # the pair index order gave before the topology chooser
    ],
)
def test_gpu_missing_from_telemetry_moves_no_gpu_off_its_place(
    served: dict[str, Placer], policy: str, busy: list[int], want: tuple[int, ...]
) -> None:
    def node(name: str) -> NodeState:
        gpus = [
            GpuState(index=i, model=V100, free_milli=0 if i in busy else 1000)
            for i in _DGX1_WITHOUT_GPU3
        ]
        return NodeState(name=name, cluster="c1", gpus=gpus)

    snap = FleetSnapshot("prometheus", [node("a"), node("b")])
    opts = served[policy].place(snap, JobSpec(num_gpu=2), Reservations(), 2)
    assert [o.gpus for o in opts] == [want, want]
    assert _links(V100, want)[0] == 2


def _mig_node(name: str, instances: int) -> NodeState:
    """A DGX A100 of the MIG mixed strategy: GPU 0 split into ``instances`` MIG instances (index
    ``100 (parent + 1) + GI``, as :mod:`fleetmind.serving.telemetry.nvml` numbers them; DCGM's
    ``GPU_I_ID``/``GPU_I_PROFILE`` labels), GPUs 1-7 whole, listed in index order."""
    profile = "1g.10gb" if instances == 7 else "7g.80gb"
    whole = [GpuState(index=i, model=A100) for i in range(1, 8)]
    mig = [
        GpuState(index=101 + gi, model=f"{A100} MIG {profile}", mig_parent=0)
        for gi in range(instances)
    ]
    return NodeState(name=name, cluster="c1", gpus=whole + mig)


@pytest.mark.parametrize("policy", ["ppo", "FGD", "BestFit", "builtin"])
@pytest.mark.parametrize("instances", [1, 7])  # 8 entries (the policy's state) or 14 (BestFit's)
@pytest.mark.parametrize(
    ("k", "want"),
    [
        (2, (2, 3)),  # one PCIe switch (GPUs 1 and 2 are under two)
        (4, (4, 5, 6, 7)),  # one CPU socket, not (1, 2, 3, 4) across both
    ],
)
def test_mig_instances_beside_whole_gpus_move_no_gpu_off_its_place(
    served: dict[str, Placer], policy: str, instances: int, k: int, want: tuple[int, ...]
) -> None:
    snap = FleetSnapshot("prometheus", [_mig_node("a", instances), _mig_node("b", instances)])
    opts = served[policy].place(snap, JobSpec(num_gpu=k, gpu_model=A100), Reservations(), 2)
    assert [o.gpus for o in opts] == [want, want]
    t = telemetry_template_for(A100, 8)
    assert len({int(t.numa[g]) for g in want}) == 1
    assert k > 2 or int(t.level[want[0]][want[1]]) > int(t.level[1][2])


def test_node_template_is_built_once_per_model_and_size(monkeypatch: pytest.MonkeyPatch) -> None:
    """BestFit asks for the topology of every feasible node of every request: the model name is
    parsed into a template once per (name, GPU count), not once per node."""
    from fleetmind.serving.scheduler import placement

    calls: list[tuple[str, int]] = []
    real = placement.telemetry_template_for

    def counting(model: str, n_gpus: int) -> Any:
        calls.append((model, n_gpus))
        return real(model, n_gpus)

    memo = getattr(placement, "_topology_template", None)
    if memo is not None:
        memo.cache_clear()
    monkeypatch.setattr(placement, "telemetry_template_for", counting)
    nodes = [_node(f"n{i}", (V100, L40S)[i % 2], busy=[i % 8]) for i in range(40)]
    snap = FleetSnapshot("prometheus", nodes)
    for k in (2, 4, 2):
        assert len(BestFitPlacer().place(snap, JobSpec(num_gpu=k), Reservations(), 3)) == 3
    if memo is not None:
        memo.cache_clear()
    assert set(calls) == {(V100, 8), (L40S, 8)}
    assert len(calls) == 2


@pytest.mark.parametrize("policy", ["FGD", "builtin"])
def test_mig_instance_known_by_name_only_holds_no_place(
    served: dict[str, Placer], policy: str
) -> None:
    """A MIG instance without ``mig_parent`` (a source that only names it "<model> MIG <profile>")
    is no board position: GPUs 1-7 are still read at their places."""
    node = _mig_node("a", 1)
    node.gpus[-1].mig_parent = None
    snap = FleetSnapshot("prometheus", [node])
    opts = served[policy].place(snap, JobSpec(num_gpu=4, gpu_model=A100), Reservations(), 1)
    assert [o.gpus for o in opts] == [(4, 5, 6, 7)]
