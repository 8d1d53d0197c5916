"""Queue-aware candidate features of ``MultiClusterPlacement-v0`` (opt-in ``queue_features``)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from dynamic_helpers import jobs_from_lists, small_env_kwargs, two_cluster_fleet

from fleetmind.envs.dynamic.sim import DynamicSim
from fleetmind.envs.multicluster_env import (
    N_CAND_FEATURES,
    N_GLOBAL_FEATURES,
    N_QUEUE_FEATURES,
    QUEUE_FEATURE_NAMES,
    MultiClusterPlacementEnv,
)
from fleetmind.rl.dynamic_eval import DynEvalConfig, load_dynamic_actor, model_config
from fleetmind.rl.dynamic_teacher import DynLinearScorer

pytestmark = pytest.mark.filterwarnings("ignore:offered load:UserWarning")

F_Q = N_CAND_FEATURES + N_QUEUE_FEATURES


def make_env(**kw) -> MultiClusterPlacementEnv:
    return MultiClusterPlacementEnv(**small_env_kwargs(**{"candidate_set": "locality", **kw}))


def test_default_observation_is_unchanged_and_queue_columns_are_appended() -> None:
    plain, off, on = make_env(), make_env(queue_features=False), make_env(queue_features=True)
    k = plain.n_candidates
    assert plain.observation_space == off.observation_space
    assert on.observation_space.shape == (k * F_Q + N_GLOBAL_FEATURES,)
    assert on.n_cand_features == F_Q and off.n_cand_features == N_CAND_FEATURES
    o1, _ = plain.reset(seed=7)
    o2, _ = off.reset(seed=7)
    o3, _ = on.reset(seed=7)
    rng = np.random.default_rng(1)
    steps, queued_steps = 0, 0
    while True:
        assert o1.tobytes() == o2.tobytes()
        # the first 14 columns and the globals of the wide observation are the default's
        base = o1[: k * N_CAND_FEATURES].reshape(k, N_CAND_FEATURES)
        wide = o3[: k * F_Q].reshape(k, F_Q)
        np.testing.assert_array_equal(wide[:, :N_CAND_FEATURES], base)
        np.testing.assert_array_equal(o3[k * F_Q :], o1[k * N_CAND_FEATURES :])
        assert on.observation_space.contains(o3)
        queued_steps += int(np.any(wide[:, N_CAND_FEATURES:] != 0))
        mask = plain.action_masks()
        assert (mask == on.action_masks()).all()
        a = int(rng.choice(np.flatnonzero(mask)))
        o1, r1, d1, _, _ = plain.step(a)
        o2, r2, d2, _, _ = off.step(a)
        o3, r3, d3, _, _ = on.step(a)
        assert r1 == r2 == r3 and d1 == d2 == d3
        steps += 1
        if d1:
            break
    assert steps > 20 and queued_steps > 0  # the queue features were exercised


def test_queue_feature_values_on_a_hand_built_state() -> None:
    """dgx (8 V100) holds a 4-GPU job, t4-4 a 3-GPU job; job j (1 GPU) is placed while the
    queue holds the head h (4 GPUs: fits the dgx only), w (1 GPU) and an 8-GPU job."""
    fleet = two_cluster_fleet()
    jobs = jobs_from_lists(
        [0.0] * 6, [1000.0] * 6, [4, 3, 1, 4, 1, 8], cpu=[1000] * 6, data_home=[0] * 6
    )
    sim = DynamicSim(fleet, jobs, backfill_depth=8)
    dgx, v1, t4 = (int(np.flatnonzero(fleet.names == n)[0]) for n in ("dgx", "v100-1", "t4-4"))
    assert sim.next_decision() == 0
    sim.place(0, dgx, np.array([0, 1, 2, 3]))
    assert sim.next_decision() == 1
    sim.place(1, t4, np.array([0, 1, 2]))
    assert sim.next_decision() == 2
    env = make_env(fleet=fleet, n_candidates=4, queue_features=True)
    env.attach(sim)
    obs = env.observe(2)
    nodes, _ = env.candidates()
    mask = env.action_masks()
    assert set(nodes[mask].tolist()) == {dgx, v1, t4}
    rows = obs[: 4 * F_Q].reshape(4, F_Q)[:, N_CAND_FEATURES:]
    got = {int(n): rows[i] for i, n in enumerate(nodes) if mask[i]}
    col = {name: i for i, name in enumerate(QUEUE_FEATURE_NAMES)}
    # dgx: 4 idle -> 3: the head no longer fits it (its only node): lost and stranded; the window
    # loses the head there (w still fits); room after = 3 idle GPUs / 4 requested
    assert got[dgx][col["head_fit_lost"]] == 1.0
    assert got[dgx][col["head_stranded"]] == 1.0
    assert got[dgx][col["window_fit_lost"]] == pytest.approx(1 / 4)
    assert got[dgx][col["head_room_after"]] == pytest.approx(0.75 / 4)
    # v100-1 and t4-4: one idle GPU each, taken by j: the head never fit there, w loses the node
    for n in (v1, t4):
        assert got[n][col["head_fit_lost"]] == 0.0
        assert got[n][col["head_stranded"]] == 0.0
        assert got[n][col["window_fit_lost"]] == pytest.approx(1 / 4)
        assert got[n][col["head_room_after"]] == 0.0
    # placing on v100-1 keeps the head's node: the state is what the features predicted
    sim.place(2, v1, None)
    assert sim.state.feasible(sim.pod(3))[dgx]


def test_queue_features_are_zero_without_other_queued_jobs() -> None:
    fleet = two_cluster_fleet()
    jobs = jobs_from_lists([0.0, 5000.0], [100.0, 100.0], [1, 1])
    sim = DynamicSim(fleet, jobs, backfill_depth=8)
    env = make_env(fleet=fleet, queue_features=True)
    env.attach(sim)
    assert sim.next_decision() == 0
    obs = env.observe(0)
    rows = obs[: 4 * F_Q].reshape(4, F_Q)
    assert np.all(rows[:, N_CAND_FEATURES:] == 0)


def test_old_metadata_means_no_queue_features(tmp_path) -> None:
    assert DynEvalConfig.from_metadata({"n_jobs": 96}).queue_features is False
    assert DynEvalConfig.from_metadata({"queue_features": True}).queue_features is True
    root = Path(__file__).resolve().parents[1]
    released = root / "models" / "placement-dynamic"
    # the first dynamic release (2026-11-29) predates the key: its metadata and teacher are kept,
    # its weights are not (benchmarks/README.md), so it is checked with the released weights of
    # the same shape
    kept = root / "benchmarks/results/dynamic/ppo_dynamic_multigpu_fix_models/previous_release"
    first = tmp_path / "first_release"
    first.mkdir()
    shutil.copyfile(kept / "metadata.json", first / "metadata.json")
    shutil.copyfile(kept / "teacher.json", first / "teacher.json")
    if (released / "policy.onnx").is_file():
        shutil.copyfile(released / "policy.onnx", first / "policy.onnx")
    for model_dir, has_key in ((first, False), (released, True)):
        if not (model_dir / "policy.onnx").is_file():
            continue
        meta = json.loads((model_dir / "metadata.json").read_text())
        assert ("queue_features" in meta["env_kwargs"]) is has_key
        assert model_config(model_dir).queue_features is False
        actor = load_dynamic_actor(model_dir / "policy.onnx", n_candidates=16)
        assert actor.n_candidates == 16
        # its teacher (56 weights, no queue features) still loads and scores default observations
        teacher = DynLinearScorer.load(model_dir / "teacher.json")
        assert teacher.n_cand_features == N_CAND_FEATURES
    assert model_config(tmp_path) == DynEvalConfig()  # no metadata: the default setting


def test_linear_scorer_handles_wide_rows(tmp_path) -> None:
    env = make_env(queue_features=True)
    obs, _ = env.reset(seed=3)
    loc = DynLinearScorer.locality(4, F_Q)
    assert loc.weights.shape == (4 * F_Q,)
    narrow = DynLinearScorer.locality(4, N_CAND_FEATURES)
    plain = make_env()
    o_plain, _ = plain.reset(seed=3)
    # zero weights on the queue columns: the same scores as the 14-feature scorer
    np.testing.assert_allclose(loc.scores(obs), narrow.scores(o_plain))
    w = loc.weights.copy()
    w[N_CAND_FEATURES + QUEUE_FEATURE_NAMES.index("head_room_after")] = 3.0
    wide = DynLinearScorer(w, 4, F_Q)
    wide.save(tmp_path / "t.json")
    back = DynLinearScorer.load(tmp_path / "t.json")
    np.testing.assert_array_equal(back.weights, w)
    assert back.n_cand_features == F_Q
    mask = env.action_masks()
    assert back(obs, mask) == wide(obs, mask)
    with pytest.raises(ValueError, match="width"):
        narrow.scores(obs)


def test_training_with_queue_features_round_trips_through_metadata(tmp_path, shared_data) -> None:
    from fleetmind.rl.dynamic_eval import actor_fn, evaluate_streams
    from fleetmind.training.recipes.dynamic import DynamicArgs, run

    args = DynamicArgs(
        traces=["default"],
        dyn_jobs=64,
        n_candidates=8,
        timesteps=0,
        n_envs=1,
        n_steps=64,
        batch_size=32,
        bc_episodes=1,
        bc_epochs=1,
        teacher="fgd",
        eval_seeds=[1100],
        eval_freq=64,
        queue_features=True,
        out=str(tmp_path / "runs"),
        tracking_uri=f"sqlite:///{tmp_path}/mlflow.db",
        progress=False,
        release=False,
    )
    out = run(args)
    model_dir = Path(out["artifact"])
    meta = json.loads((model_dir / "metadata.json").read_text())
    assert meta["env_kwargs"]["queue_features"] is True
    cfg = model_config(model_dir)
    assert cfg.queue_features is True and cfg.n_candidates == 8
    actor = load_dynamic_actor(model_dir, n_candidates=8)
    onnx = load_dynamic_actor(model_dir / "policy.onnx", n_candidates=8)
    res = evaluate_streams(
        "default", [5], {"ppo": actor_fn(actor), "onnx": actor_fn(onnx)}, ["FGD"], cfg
    )
    assert res["ppo"]["per_seed"]["mean_jct_s"] == res["onnx"]["per_seed"]["mean_jct_s"]
    # metadata that contradicts the network's width is refused
    meta["env_kwargs"]["queue_features"] = False
    (model_dir / "metadata.json").write_text(json.dumps(meta))
    from fleetmind.data.errors import ModelLoadError

    with pytest.raises(ModelLoadError, match="queue_features=False"):
        load_dynamic_actor(model_dir, n_candidates=8)


def test_batched_window_fit_matches_the_per_job_rule() -> None:
    from fleetmind.data.openb import ANY_GPU_MODEL
    from fleetmind.envs.core import Pod
    from fleetmind.envs.multicluster_env import fits_rows, fits_window

    rng = np.random.default_rng(0)
    k, w = 12, 9
    cpu = rng.integers(0, 8000, k)
    mem = rng.integers(0, 64_000, k)
    ngpu = rng.choice([0, 1, 4, 8], k)
    idle = np.where(
        np.arange(8)[None, :] < ngpu[:, None], rng.choice([0, 250, 500, 1000], (k, 8)), 0
    )
    bits = rng.choice([1, 2, 4], k)
    req = dict(
        cpu_milli=rng.integers(0, 6000, w),
        memory_mib=rng.integers(0, 48_000, w),
        num_gpu=rng.choice([0, 1, 1, 2, 4], w),
        gpu_milli=rng.choice([200, 500, 1000], w),
        gpu_spec_mask=rng.choice([ANY_GPU_MODEL, 1, 6], w),
    )
    got = fits_window(*req.values(), cpu, mem, idle, bits, ngpu)
    for i in range(w):
        pod = Pod(*(int(v[i]) for v in req.values()))
        np.testing.assert_array_equal(got[i], fits_rows(pod, cpu, mem, idle, bits, ngpu))
    assert got.any() and not got.all()
