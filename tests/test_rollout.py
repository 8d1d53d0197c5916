"""Policy ``rollout`` (``rl.rollout``): the clone improved by rollouts, in both modes."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from placement_helpers import NODES, PODS

from fleetmind import cli
from fleetmind.data.errors import ConfigError
from fleetmind.data.openb import load_openb_nodes, load_openb_trace
from fleetmind.data.paths import MODELS_DIR
from fleetmind.envs.candidates import N_CAND_FEATURES
from fleetmind.envs.fgd_mode import run_fgd
from fleetmind.envs.multicluster_env import MultiClusterPlacementEnv
from fleetmind.rl.dynamic_eval import EnvActorPolicy, actor_fn, job_stream, run_policy
from fleetmind.rl.named_policies import clone_file
from fleetmind.rl.policy_adapter import PPOPlacementPolicy, load_ppo_policy
from fleetmind.rl.rollout import (
    RolloutConfig,
    run_rollout_dynamic,
    run_rollout_fgd,
    splice_future,
)

K = 16
EVERYWHERE = RolloutConfig(k=3, band=(0.0, 101.0))


@pytest.fixture()
def tiny(tmp_path: Path) -> tuple[Path, Path]:
    (tmp_path / "nodes.csv").write_text(NODES)
    (tmp_path / "pods.csv").write_text(PODS)
    return tmp_path / "nodes.csv", tmp_path / "pods.csv"


class Spread:
    """A deterministic stand-in clone that spreads: it prefers the candidate node least used
    after the placement (WorstFit), which fragments GPUs; rollouts have room to fix it."""

    def logits(self, obs: np.ndarray, mask: np.ndarray) -> np.ndarray:
        rows = obs[: K * N_CAND_FEATURES].reshape(K, N_CAND_FEATURES)
        return np.where(mask, -rows[:, 11] - 0.01 * rows[:, 9], -1e8)

    def predict(self, obs: np.ndarray, mask: np.ndarray) -> int:
        return int(np.argmax(self.logits(obs, mask)))


def spread() -> PPOPlacementPolicy:
    return PPOPlacementPolicy(Spread(), K, {}, "spread")


def test_known_future_rollout_never_worse_than_the_clone_and_changes_decisions(tiny) -> None:
    """Bertsekas' cost improvement: with the future known and a deterministic clone, the rollout
    is never worse than the clone, per seed; on this tight cluster it deviates and gains."""
    nodes, tr = load_openb_nodes(tiny[0]), load_openb_trace(tiny[1])
    gains, changed = [], 0
    for seed in range(1, 7):
        base = run_fgd(tr, spread(), seed, nodes).unallocated[100]
        res, log = run_rollout_fgd(tr, spread(), seed, nodes, EVERYWHERE)
        assert res.unallocated[100] <= base
        assert res.policy == "rollout" and res.n_pods == len(res.placed)
        gains.append(base - res.unallocated[100])
        changed += log.summary()["changed"]
        # the logged gains of the decisions it changed add up to what it gained
        assert sum(g for g, c in zip(log.gain, log.changed, strict=True) if c) == pytest.approx(
            base - res.unallocated[100], abs=0.011
        )
    assert changed >= 1 and max(gains) > 1.0


def test_rollout_with_the_released_clone_is_never_worse(tiny) -> None:
    nodes, tr = load_openb_nodes(tiny[0]), load_openb_trace(tiny[1])
    clone = load_ppo_policy(clone_file(MODELS_DIR / "placement"))
    for seed in (1, 2, 3):
        base = run_fgd(tr, clone, seed, nodes).unallocated[100]
        res, _ = run_rollout_fgd(tr, clone, seed, nodes, EVERYWHERE)
        assert res.unallocated[100] <= base


def test_outside_its_band_rollout_is_the_clone(tiny) -> None:
    nodes, tr = load_openb_nodes(tiny[0]), load_openb_trace(tiny[1])
    base = run_fgd(tr, spread(), 8, nodes)
    res, log = run_rollout_fgd(tr, spread(), 8, nodes, RolloutConfig(band=(200.0, 300.0)))
    assert log.index == [] and log.rollouts == 0
    assert np.array_equal(res.node_of, base.node_of)


def test_depth_two_and_strided_lookahead_keep_the_guarantee(tiny) -> None:
    nodes, tr = load_openb_nodes(tiny[0]), load_openb_trace(tiny[1])
    for seed in (2, 8):
        base = run_fgd(tr, spread(), seed, nodes).unallocated[100]
        for cfg in (
            RolloutConfig(k=2, band=(0.0, 101.0), depth=2),
            RolloutConfig(k=3, band=(0.0, 101.0), every=3, depth=2),
        ):
            res, _ = run_rollout_fgd(tr, spread(), seed, nodes, cfg)
            assert res.unallocated[100] <= base


def test_sampled_future_fgd_is_deterministic_for_a_seed(tiny) -> None:
    nodes, tr = load_openb_nodes(tiny[0]), load_openb_trace(tiny[1])
    cfg = RolloutConfig(k=3, band=(0.0, 101.0), future="sampled", samples=2)
    a, log_a = run_rollout_fgd(tr, spread(), 8, nodes, cfg)
    b, log_b = run_rollout_fgd(tr, spread(), 8, nodes, cfg)
    assert np.array_equal(a.node_of, b.node_of) and log_a.gain == log_b.gain
    # 2 or 3 candidates (k = 3, fewer feasible) x 2 samples at every look-ahead decision
    assert 2 * 2 * len(log_a.index) <= log_a.rollouts <= 2 * 3 * len(log_a.index)
    other, _ = run_rollout_fgd(
        tr, spread(), 8, nodes, RolloutConfig(**{**cfg.__dict__, "sample_seed": 5})
    )
    assert other.n_pods == a.n_pods


@pytest.mark.parametrize(
    "kw",
    [{"k": 1}, {"every": 0}, {"future": "oracle"}, {"samples": 0}, {"depth": 3}, {"band": (5, 1)}],
)
def test_bad_options_are_config_errors(kw) -> None:
    with pytest.raises(ConfigError):
        RolloutConfig(**kw)


# -------------------------------------------------------------------------------- dynamic mode
def _dyn_setup(n_jobs: int = 128):  # noqa: ANN202
    from fleetmind.rl.dynamic_eval import load_dynamic_actor

    kw = dict(
        trace="gpuspec20",
        n_jobs=n_jobs,
        n_candidates=16,
        candidate_set="locality",
        node_fraction=0.1,
    )
    model = load_dynamic_actor(clone_file(MODELS_DIR / "placement-dynamic"), n_candidates=16)
    env = MultiClusterPlacementEnv(**kw)
    trace = env.trace
    return model, (lambda: MultiClusterPlacementEnv(**{**kw, "trace": trace})), env


@pytest.mark.filterwarnings("ignore:offered load:UserWarning")  # a short stream on purpose
def test_dynamic_known_future_never_worse_and_sampled_deterministic(shared_data) -> None:
    model, make_env, env = _dyn_setup()
    jobs, prio = job_stream(env, 42)
    base = run_policy(env, jobs, prio, EnvActorPolicy(actor_fn(model), env, "clone"))
    cfg = RolloutConfig(k=3, band=(0, 64), every=2)
    res, log = run_rollout_dynamic(make_env, jobs, prio, model, 42, cfg)
    assert res["mean_slowdown"] <= base["mean_slowdown"] + 1e-12
    assert log.rollouts >= len(log.index) > 0
    scfg = RolloutConfig(k=2, band=(0, 32), every=4, future="sampled", samples=2)
    a, log_a = run_rollout_dynamic(make_env, jobs, prio, model, 42, scfg)
    b, log_b = run_rollout_dynamic(make_env, jobs, prio, model, 42, scfg)
    untimed = [k for k in a if k not in ("policy_s", "ms_per_decision")]
    assert [a[k] for k in untimed] == [b[k] for k in untimed] and log_a.gain == log_b.gain
    assert log_a.rollouts == 2 * 2 * len(log_a.index)


@pytest.mark.filterwarnings("ignore:offered load:UserWarning")
def test_splice_keeps_the_past_and_starts_the_future_now(shared_data) -> None:
    _, _, env = _dyn_setup(64)
    real, _ = job_stream(env, 1)
    sample, _ = job_stream(env, 2)
    out = splice_future(real, sample, 10, now=500.0)
    assert len(out) == len(real)
    assert np.array_equal(out.work_s[:10], real.work_s[:10])
    assert np.array_equal(out.work_s[10:], sample.work_s[10:])
    assert out.arrival_s[10] >= 500.0 and np.all(np.diff(out.arrival_s[10:]) >= 0)


# ------------------------------------------------------------------------------------------ CLI
def test_cli_fgd_teacher_clone_rollout_ppo(tiny, tmp_path) -> None:
    nodes, pods = tiny
    out = tmp_path / "r.json"
    argv = ["sched", "evaluate", "--trace", str(pods), "--nodes", str(nodes), "--seeds", "1-2"]
    argv += ["--policies", "teacher", "clone", "rollout", "ppo", "--rollout-band", "0", "101"]
    assert cli.main([*argv, "--json", str(out)]) == 0
    res = json.loads(out.read_text())["policies"]
    assert set(res) == {"teacher", "clone", "rollout", "ppo"}
    for s in ("1", "2"):
        r, c = res["rollout"]["per_seed"][s], res["clone"]["per_seed"][s]
        assert r["unallocated_gpu_pct_at_100"] <= c["unallocated_gpu_pct_at_100"]
    info = res["rollout"]["rollout"]
    assert info["config"]["band"] == [0.0, 101.0] and set(info["per_seed"]) == {"1", "2"}


@pytest.mark.filterwarnings("ignore:offered load:UserWarning")
def test_cli_dynamic_teacher_clone_rollout_ppo(shared_data, tmp_path) -> None:
    folder = tmp_path / "dyn"
    shutil.copytree(MODELS_DIR / "placement-dynamic", folder)
    meta = json.loads((folder / "metadata.json").read_text())
    meta["env_kwargs"]["n_jobs"] = 96
    (folder / "metadata.json").write_text(json.dumps(meta))
    out = tmp_path / "dyn.json"
    argv = ["sched", "evaluate", "--trace", "gpuspec20", "--mode", "dynamic", "--seeds", "42"]
    argv += ["--model", str(folder), "--policies", "teacher", "clone", "rollout", "ppo"]
    argv += ["--rollout-band", "0", "24", "--rollout-every", "4", "--json", str(out)]
    assert cli.main(argv) == 0
    res = json.loads(out.read_text())["policies"]
    assert set(res) == {"teacher", "clone", "rollout", "ppo"}
    assert res["rollout"]["mean_slowdown"] <= res["clone"]["mean_slowdown"] + 1e-12
    assert res["rollout"]["rollout"]["per_seed"]["42"]["lookaheads"] == 6


def test_cli_bad_rollout_option_is_a_one_line_error(tiny, capsys) -> None:
    nodes, pods = tiny
    argv = ["sched", "evaluate", "--trace", str(pods), "--nodes", str(nodes), "--seeds", "1"]
    assert cli.main([*argv, "--policies", "rollout", "--rollout-k", "1"]) == 2
    err = capsys.readouterr().err
    assert "rollout k must be at least 2" in err and err.count("\n") == 1
    assert cli.main([*argv, "--policies", "rollout", "--ray-address", "local"]) == 2
    assert "runs locally" in capsys.readouterr().err


@pytest.mark.filterwarnings("ignore:offered load:UserWarning")
def test_sim_copy_diverges_without_touching_the_original(shared_data) -> None:
    from fleetmind.envs.dynamic.sim import DynamicSim

    _, _, env = _dyn_setup(64)
    jobs, prio = job_stream(env, 3)
    sim = DynamicSim(env.fleet, jobs, backfill_depth=env.backfill_depth, priority=prio)
    j = sim.next_decision()
    twin = sim.copy()
    node = int(np.flatnonzero(twin.feasible(j))[0])
    twin.place(j, node)
    assert sim.status[j] != twin.status[j] and j in sim.queue and j not in twin.queue
    assert sim.state.allocated_gpu_milli == 0 < twin.state.allocated_gpu_milli
    assert twin.next_decision() is not None and sim.n_decisions == 0
