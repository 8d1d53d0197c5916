"""The CEM-searched linear teacher (rl/teacher.py): masking, FGD identity, search, file errors."""

from __future__ import annotations

import json

import numpy as np
import pytest
from ppo_helpers import load_tiny

from fleetmind.data.errors import ModelLoadError
from fleetmind.envs.fgd_mode import run_fgd
from fleetmind.envs.gpu_placement_env import GpuPlacementEnv
from fleetmind.rl.teacher import (
    BLOCKS_3,
    BLOCKS_4,
    FGD_CHOICE_FEATURE,
    NUM_GPU_GLOBAL,
    LinearScorer,
    cem_search,
    episode_metric,
    worst_trace_objective,
)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    nodes, trace = load_tiny(tmp_path_factory.mktemp("teacher"))
    env = GpuPlacementEnv(traces=[trace], nodes=nodes, n_candidates=8)
    return env, nodes, trace


def test_fgd_scorer_reproduces_fgd(tiny):
    env, nodes, trace = tiny
    fgd = LinearScorer.fgd(env.n_candidates, env.n_cand_features)
    got = episode_metric(env, fgd, trace.name, 42)
    assert got == run_fgd(trace, "FGD", 42, nodes).unallocated[100]


def test_random_scorer_only_picks_valid_candidates(tiny):
    env, _, trace = tiny
    rng = np.random.default_rng(0)
    scorer = LinearScorer(rng.normal(size=3 * env.n_cand_features), 8, env.n_cand_features)
    obs, _ = env.reset(options={"trace": trace.name, "workload_seed": 3})
    done, steps = False, 0
    while not done:
        mask = env.action_masks()
        a = scorer(obs, mask)
        assert mask[a]
        obs, _, term, trunc, _ = env.step(a)
        done, steps = term or trunc, steps + 1
    assert steps > 20


def test_cem_search_is_deterministic_and_never_worse_than_fgd(tiny):
    env, _, trace = tiny
    eps = [(trace.name, 1), (trace.name, 2)]
    a = cem_search(env, eps, generations=2, population=4, n_elite=2, seed=3)
    b = cem_search(env, eps, generations=2, population=4, n_elite=2, seed=3)
    assert a.best_score <= a.fgd_score
    assert np.array_equal(a.best.weights, b.best.weights) and a.history == b.history
    assert [h["generation"] for h in a.history] == [0.0, 1.0]
    # the final search mean: same shape, deterministic, FGD flag's scale kept, moved off FGD
    assert a.final_mean.shape == a.best.weights.shape
    assert np.array_equal(a.final_mean, b.final_mean)
    assert a.final_mean[FGD_CHOICE_FEATURE] == 1.0
    assert not np.array_equal(a.final_mean, LinearScorer.fgd(8, env.n_cand_features).weights)
    # the reported score is the scorer's real score on those episodes
    again = np.mean([episode_metric(env, a.best, t, s) for t, s in eps])
    assert again == pytest.approx(a.best_score)


def test_worst_trace_objective_scores_the_worst_trace_relative_to_fgd(tiny):
    obj = worst_trace_objective(["a", "a", "b"])
    fgd = np.array([2.0, 4.0, 5.0])
    # trace a: mean(1.0/2 - 1, 5.0/4 - 1) = -0.125; trace b: 5.5/5 - 1 = 0.1 -> the worst is b
    assert obj(np.array([1.0, 5.0, 5.5]), fgd) == pytest.approx(0.1)
    assert obj(fgd, fgd) == 0.0
    with pytest.raises(ValueError, match="FGD's metric is 0"):
        obj(fgd, np.array([2.0, 0.0, 5.0]))
    # in a search: scores are in the objective's units (FGD 0), and the best is its real score
    env, _, trace = tiny
    eps = [(trace.name, 1), (trace.name, 2)]
    res = cem_search(
        env,
        eps,
        generations=1,
        population=3,
        n_elite=2,
        seed=3,
        objective=worst_trace_objective([t for t, _ in eps]),
    )
    assert res.fgd_score == 0.0 and res.best_score <= 0.0
    m = np.array([episode_metric(env, res.best, t, s) for t, s in eps])
    f = np.array(
        [episode_metric(env, LinearScorer.fgd(8, env.n_cand_features), t, s) for t, s in eps]
    )
    assert res.best_score == pytest.approx(float(np.mean(m / f - 1.0)))


def test_cem_search_reports_each_generation_without_changing_the_search(tiny):
    """on_generation sees the best-so-far after every generation (what a checkpoint saves); the
    search itself is the same with or without it."""
    env, _, trace = tiny
    eps = [(trace.name, 1), (trace.name, 2)]
    calls = []
    kw = dict(generations=3, population=3, n_elite=2, seed=5)
    plain = cem_search(env, eps, **kw)
    res = cem_search(env, eps, **kw, on_generation=lambda *a: calls.append(a))
    assert np.array_equal(res.best.weights, plain.best.weights) and res.history == plain.history
    assert np.array_equal(res.final_mean, plain.final_mean)
    assert [len(h) for _, _, h, _ in calls] == [1, 2, 3]
    for best, score, hist, _mu in calls:
        assert score == hist[-1]["best_so_far"]
        assert np.mean([episode_metric(env, best, t, s) for t, s in eps]) == pytest.approx(score)
    best, score, hist, mu = calls[-1]
    assert np.array_equal(best.weights, res.best.weights) and score == res.best_score
    assert hist == res.history and np.array_equal(mu, res.final_mean)
    # each call got its own copy (a saved checkpoint is not changed by later generations)
    assert len(calls[0][2]) == 1 and not np.shares_memory(calls[0][3], calls[1][3])


def test_bad_arguments_and_files(tiny, tmp_path):
    env, _, _ = tiny
    with pytest.raises(ValueError, match="shape"):
        LinearScorer(np.zeros(5), 8, env.n_cand_features)
    with pytest.raises(ValueError, match="episode"):
        cem_search(env, [])
    s = LinearScorer.fgd(8, env.n_cand_features)
    path = s.save(tmp_path / "t.json")
    assert np.array_equal(LinearScorer.load(path).weights, s.weights)
    with pytest.raises(ModelLoadError, match="does not exist"):
        LinearScorer.load(tmp_path / "missing.json")
    (tmp_path / "bad.json").write_text('{"format": "other"}')
    with pytest.raises(ModelLoadError, match="bad.json"):
        LinearScorer.load(tmp_path / "bad.json")
    (tmp_path / "junk.json").write_text("{not json")
    with pytest.raises(ModelLoadError, match="junk.json"):
        LinearScorer.load(tmp_path / "junk.json")


def test_sched_train_rejects_a_teacher_file_that_does_not_fit(tmp_path):
    from fleetmind.data.errors import ConfigError
    from fleetmind.training.recipes.fgd import FgdArgs, _make_teacher

    LinearScorer(np.zeros(30), 16, 10).save(tmp_path / "f10.json")
    with pytest.raises(ConfigError, match="F=10"):
        _make_teacher(FgdArgs(teacher=str(tmp_path / "f10.json")), {}, tmp_path, {})
    LinearScorer.fgd(8, 18).save(tmp_path / "k8.json")
    with pytest.raises(ConfigError, match="K=8"):
        _make_teacher(FgdArgs(teacher=str(tmp_path / "k8.json")), {}, tmp_path, {})
    with pytest.raises(ModelLoadError, match="does not exist"):
        _make_teacher(FgdArgs(teacher=str(tmp_path / "nope.json")), {}, tmp_path, {})
    ok = _make_teacher(FgdArgs(teacher=str(tmp_path / "k8.json"), n_candidates=8), {}, tmp_path, {})
    assert isinstance(ok, LinearScorer) and ok.weights[1] == 1.0


def test_multi_gpu_block_weighs_only_multi_gpu_pods(tiny):
    env, _, trace = tiny
    k, f = env.n_candidates, env.n_cand_features
    rng = np.random.default_rng(1)
    three = LinearScorer(rng.normal(size=3 * f), k, f)
    four = three.with_blocks(BLOCKS_4)
    assert four.blocks == BLOCKS_4 and four.weights.shape == (4 * f,)
    obs, _ = env.reset(options={"trace": trace.name, "workload_seed": 5})
    # zero block: the same scores (up to summation order) and the same choice
    assert np.allclose(four.scores(obs), three.scores(obs), rtol=0, atol=1e-12)
    assert four(obs, env.action_masks()) == three(obs, env.action_masks())
    feats = four.features(obs)
    for num_gpu, active in ((0.0, False), (1.0, False), (2.0, True), (8.0, True)):
        o = obs.copy()
        o[k * f + NUM_GPU_GLOBAL] = num_gpu / 8.0
        block = four.features(o)[:, 3 * f :]
        assert np.array_equal(block, feats[:, :f] if active else np.zeros((k, f)))
    with pytest.raises(ValueError, match="blocks"):
        LinearScorer(np.zeros(4 * f), k, f, ("all", "multi_gpu"))


def test_cem_search_from_a_saved_scorer(tiny, tmp_path):
    env, _, trace = tiny
    eps = [(trace.name, 1), (trace.name, 2)]
    first = cem_search(env, eps, generations=1, population=4, n_elite=2, seed=3)
    path = first.best.save(tmp_path / "start.json")
    start = LinearScorer.load(path)
    res = cem_search(
        env, eps, generations=1, population=4, n_elite=2, seed=4, init=start, blocks=BLOCKS_4
    )
    assert res.init_score == pytest.approx(first.best_score)  # the start is scored as it was
    assert res.best_score <= res.init_score and res.best.blocks == BLOCKS_4
    # a file written before blocks existed reads as the three-block scorer
    d = json.loads(path.read_text())
    del d["blocks"]
    (tmp_path / "old.json").write_text(json.dumps(d))
    assert LinearScorer.load(tmp_path / "old.json").blocks == BLOCKS_3


def test_fgd_only_cem_options_are_refused_in_dynamic_mode(tmp_path, capsys):
    from fleetmind import cli

    for flags in (["--cem-multi-gpu-block"], ["--cem-init", str(tmp_path / "w.json")]):
        argv = ["sched", "train", "--mode", "dynamic", "--trace", "default", *flags]
        assert cli.main([*argv, "--out", str(tmp_path / "runs")]) == 2
        assert "fgd-mode options" in capsys.readouterr().err
    assert not (tmp_path / "runs").exists()
