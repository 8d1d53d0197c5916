"""The placement service numbers a fleet's GPU models per snapshot: any number of model names
places, and live names never enter the trace vocabulary (``data.openb.GPU_MODELS``).

A live fleet names its GPUs as DCGM does (``DCGM_FI_DEV_...{modelName="NVIDIA A100-SXM4-80GB"}``,
MIG profiles as their own names), so a long-running service sees names come and go. Upstream, the
FGD simulator (hkust-adsl/kubernetes-scheduler-simulator, ``pkg/utils``:
``IsNodeAccessibleToPodByType``) admits a pod to a node when a ``gpu_spec`` entry equals the
node's GPU type: a name comparison, with no bound on how many types a cluster has. The bitmask
ids of ``data.openb`` are FleetMind's simulator encoding (an int64 holds 62 model bits).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from fastapi.testclient import TestClient

from fleetmind.data.fleet_io import openb_template_for
from fleetmind.data.openb import GPU_MODELS
from fleetmind.envs.policies import make_policy
from fleetmind.envs.policies.topology import TopologyBestEffort
from fleetmind.serving.app import create_app
from fleetmind.serving.scheduler import placement
from fleetmind.serving.scheduler.extender import NodeIndex, decide
from fleetmind.serving.scheduler.placement import (
    MAX_MODEL_ID,
    OVERFLOW_MODEL_ID,
    VOCABULARY_MODELS,
    BestFitPlacer,
    PeerPolicyPlacer,
    Reservations,
    snapshot_model_ids,
)
from fleetmind.serving.schemas import JobSpec
from fleetmind.serving.settings import Settings
from fleetmind.serving.telemetry.base import FleetSnapshot, GpuState, NodeState
from fleetmind.serving.telemetry.sim import SimSource

N_MODELS = 70
"""More models than the 62 bits of a ``gpu_spec_mask`` (the failing fleet: 70 hosts, M0..M69)."""


def node(name: str, model: str, n_gpus: int = 1, free: int = 1000) -> NodeState:
    return NodeState(
        name=name,
        cluster="c0",
        gpus=[GpuState(index=i, model=model, free_milli=free) for i in range(n_gpus)],
        cpu_milli=64_000,
        cpu_milli_free=64_000,
        memory_mib=262_144,
        memory_mib_free=262_144,
    )


def many_models_snapshot(prefix: str = "FixM") -> FleetSnapshot:
    """70 one-GPU hosts, each with its own model (``h<i>`` has ``<prefix><i>``), partly used."""
    nodes = [node(f"h{i}", f"{prefix}{i}", free=1000 - 5 * i) for i in range(N_MODELS)]
    return FleetSnapshot(source="test", nodes=nodes)


def peer(name: str = "BestFit") -> PeerPolicyPlacer:
    return PeerPolicyPlacer(make_policy(name), f"heuristic:{name}")


def test_seventy_models_place_and_leave_the_trace_vocabulary_alone() -> None:
    vocabulary = list(GPU_MODELS)
    snap = many_models_snapshot()
    for placer in (BestFitPlacer(), peer()):
        opts = placer.place(snap, JobSpec(num_gpu=1, gpu_milli=100), Reservations(), 3)
        assert len({o.node for o in opts}) == 3 and all(o.gpus == (0,) for o in opts), placer
        # past the 62nd model the ids are shared; the constraint still selects by name
        for want in ("FixM69", "FixM55", "FixM3|FixM60"):
            job = JobSpec(num_gpu=1, gpu_milli=100, gpu_model=want, alternatives=5)
            got = {o.node for o in placer.place(snap, job, Reservations(), 6)}
            assert got == {f"h{w.removeprefix('FixM')}" for w in want.split("|")}, (placer, want)
    assert GPU_MODELS == vocabulary


def test_ids_keep_the_vocabulary_and_put_other_names_after_it() -> None:
    """Known names keep their trace ids (the policies' per-model data: FGD's typical pods'
    ``gpu_spec_mask``, the PPO model-scarcity feature), other names come after them, and at most
    :data:`MAX_MODEL_ID` is used: ``1 << id`` stays a positive int64."""
    names = ["T4", None, "V100M32", "FixX-a", " T4 ", "FixX-b", "FixX-a"]
    ids = snapshot_model_ids(names).tolist()
    first = len(GPU_MODELS)
    assert ids == [GPU_MODELS.index("T4"), -1, GPU_MODELS.index("V100M32"), first, ids[0]] + [
        first + 1,
        first,
    ]
    many = snapshot_model_ids([f"FixY{i}" for i in range(100)])
    own = VOCABULARY_MODELS - first  # names with an id of their own, below the overflow id
    assert many.max() == MAX_MODEL_ID and len(set(many[:own])) == own
    assert set(many[own:].tolist()) == {OVERFLOW_MODEL_ID}
    assert "FixX-a" not in GPU_MODELS and "FixY0" not in GPU_MODELS


def test_names_past_a_full_vocabulary_share_an_id_no_vocabulary_name_has(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With the process-wide vocabulary at its 62 models (ids 0..61), other names took id 61,
    the last vocabulary model's: a trace pod whose ``gpu_spec_mask`` names that model (FGD's
    typical pods) fitted nodes of any unknown model. They share id 62, which no vocabulary name
    has: only an unconstrained pod (:data:`ANY_GPU_MODEL`, all bits) fits them. Upstream, FGD's
    simulator admits a pod by comparing GPU type names (``IsNodeAccessibleToPodByType``), so an
    unknown type never matches a pod that names another."""
    from fleetmind.data.openb import ANY_GPU_MODEL
    from fleetmind.envs.core import ClusterState, Pod

    full = [*GPU_MODELS, *(f"FixV{i}" for i in range(VOCABULARY_MODELS - len(GPU_MODELS)))]
    monkeypatch.setattr(placement, "GPU_MODELS", full)
    ids = snapshot_model_ids(["FixO-a", full[-1], "FixO-b"]).tolist()
    assert ids == [OVERFLOW_MODEL_ID, VOCABULARY_MODELS - 1, OVERFLOW_MODEL_ID]
    assert OVERFLOW_MODEL_ID not in range(VOCABULARY_MODELS)
    n = len(ids)
    state = ClusterState(np.full(n, 64_000), np.full(n, 262_144), np.ones(n, dtype=np.int64), ids)
    assert (state.model_bit > 0).all()  # 1 << 62 is a positive int64
    last_model = Pod(0, 0, 1, 1000, 1 << (VOCABULARY_MODELS - 1))
    assert state.feasible(last_model).tolist() == [False, True, False]
    assert state.feasible(Pod(0, 0, 1, 1000, ANY_GPU_MODEL)).all()


def test_ppo_reads_no_scarcity_for_models_it_never_saw() -> None:
    """``envs.candidates.model_scarcity_penalties`` gives 0 to ids at or past the trained scarcity
    vector: names outside the vocabulary never borrow a trained model's entry."""
    from fleetmind.envs.candidates import model_scarcity_penalties
    from fleetmind.envs.core import ClusterState, Pod

    ids = snapshot_model_ids(["FixZ-a", "T4"])
    state = ClusterState(np.full(2, 64_000), np.full(2, 262_144), np.ones(2, dtype=np.int64), ids)
    scarcity = np.arange(1.0, len(GPU_MODELS) + 1)  # every trained model scarce
    got = model_scarcity_penalties(state, Pod(0, 0, 1, 1000), np.arange(2), scarcity)
    assert got[0] == 0.0 and got[1] == scarcity[GPU_MODELS.index("T4")]


def test_the_released_ppo_policy_places_on_seventy_models() -> None:
    from fleetmind.rl.policy_adapter import load_ppo_policy

    placer = PeerPolicyPlacer(load_ppo_policy(), "ppo")
    snap = many_models_snapshot()
    opts = placer.place(snap, JobSpec(num_gpu=1, gpu_milli=100), Reservations(), 2)
    assert len(opts) == 2 and all(o.gpus == (0,) for o in opts)
    job = JobSpec(num_gpu=1, gpu_milli=100, gpu_model="FixM64", alternatives=0)
    assert [o.node for o in placer.place(snap, job, Reservations(), 1)] == ["h64"]


def test_topology_policy_gets_templates_by_name() -> None:
    """TopologyBestEffort looks its templates up by model id in the trace vocabulary; the placer
    hands it the snapshot's templates by name instead (``data.fleet_io.openb_template_for``), the
    same ones the vocabulary would have given."""
    nodes = [node("v", "V100M32", 8), node("x", "FixT-H100", 8), node("s", "FixT-small", 2)]
    snap = FleetSnapshot(source="test", nodes=nodes)
    placer = peer("TopologyBestEffort")
    opts = placer.place(snap, JobSpec(num_gpu=4), Reservations(), 3)
    assert {o.node for o in opts} == {"v", "x"}
    templates = [openb_template_for(x.gpus[0].model, len(x.gpus)) for x in nodes]
    explicit = PeerPolicyPlacer(TopologyBestEffort(templates=templates), "explicit")
    assert explicit.place(snap, JobSpec(num_gpu=4), Reservations(), 3) == opts


def test_a_topology_policy_reset_before_gets_templates_by_name_and_keeps_its_seed() -> None:
    """A TopologyBestEffort that was reset before (any run fills its ``templates`` from the
    vocabulary) was used as it was: its next reset looked the snapshot's model ids up in the
    vocabulary, where a name outside it has no entry. Whether templates were given is what its
    constructor recorded; the per-snapshot policy keeps the given one's random generator (its
    seed) and allocation rule."""
    from fleetmind.envs.core import ClusterState

    policy = TopologyBestEffort(allocation="partition", seed=7)
    v100 = GPU_MODELS.index("V100M32")
    earlier = ClusterState(
        np.full(2, 64_000), np.full(2, 262_144), np.full(2, 8), np.full(2, v100, dtype=np.int64)
    )
    policy.reset(earlier)  # an earlier run: templates filled in
    assert policy.templates is not None
    nodes = [node("v", "V100M32", 8), node("x", "FixT-H100", 8), node("s", "FixT-small", 2)]
    snap = FleetSnapshot(source="test", nodes=nodes)
    placer = PeerPolicyPlacer(policy, "heuristic:TopologyBestEffort")
    opts = placer.place(snap, JobSpec(num_gpu=4), Reservations(), 3)
    fresh = PeerPolicyPlacer(TopologyBestEffort(allocation="partition"), "fresh")
    assert opts == fresh.place(snap, JobSpec(num_gpu=4), Reservations(), 3)
    used = placer._base_state(snap)[2]
    assert used is not policy and used.rng is policy.rng and used.allocation == "partition"


def test_extender_filter_passes_nodes_of_seventy_models() -> None:
    snap = many_models_snapshot("FixE")
    pod = {
        "metadata": {"name": "p", "namespace": "default", "uid": "u1"},
        "spec": {"containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]},
    }
    names = [f"h{i}" for i in range(N_MODELS)]
    _, d = decide({"Pod": pod, "NodeNames": names}, snap, Reservations(), peer(), NodeIndex())
    assert len(d.options) >= 1 and not d.unresolvable


@pytest.fixture
def client(tmp_path: Path) -> Iterator[TestClient]:
    settings = Settings(
        database_url=f"sqlite:///{tmp_path}/fm.db",
        rca_model="baseline:upstream-coverage",
        placement_model="heuristic:BestFit",
        incident_worker=False,
    )
    with TestClient(create_app(settings)) as c:
        yield c


def test_placement_route_answers_on_a_seventy_model_fleet(client: TestClient) -> None:
    """The fleet of the report: 70 hosts of one GPU each, models M0..M69 (a graph whose GPU nodes
    carry ``attrs.model``); every request placed, none a 422, however many come."""
    nodes = [node(f"h{i}", f"M{i}") for i in range(N_MODELS)]
    client.app.state.services.telemetry = SimSource(nodes)
    for _ in range(3):
        r = client.post("/api/v1/placements", json={"num_gpu": 1})
        assert r.status_code == 200, r.text
    r = client.post("/api/v1/placements", json={"num_gpu": 1, "gpu_model": "M69"})
    assert r.status_code == 200 and r.json()["node"] == "h69", r.text
