"""Dynamic mode, multi-GPU teacher-search options: the nonneg constraint, the per-trace worst case in
the objective, the search time cap, the per-trace search seeds and their metadata round trip."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from fleetmind.data.errors import ConfigError
from fleetmind.envs.multicluster_env import (
    CAND_FEATURE_NAMES,
    GLOBAL_FEATURE_NAMES,
    N_GLOBAL_FEATURES,
)
from fleetmind.rl.dynamic_teacher import (
    DEFAULT_INTERACT,
    DynLinearScorer,
    StreamSet,
    cem_search_dynamic,
    effective_weight,
    project_nonneg,
)
from fleetmind.rl.teacher import cem_loop
from fleetmind.training.recipes.dynamic import DynSearchOptions, search_options

pytestmark = pytest.mark.filterwarnings("ignore:offered load:UserWarning")

K, F = 4, 14
W = (1 + len(DEFAULT_INTERACT)) * F
PACK = CAND_FEATURE_NAMES.index("gpu_used_after")
SHARING = GLOBAL_FEATURE_NAMES.index("is_sharing")


def random_globals(rng: np.random.Generator, n: int) -> np.ndarray:
    """``(n, G)`` globals in the env's ranges (all >= 0; ``is_sharing`` 0 or 1)."""
    g = rng.uniform(0.0, 4.0, size=(n, N_GLOBAL_FEATURES))
    g[:, SHARING] = rng.integers(0, 2, size=n)
    return g


def min_effective(scorer: DynLinearScorer, feature: str, glob: np.ndarray) -> float:
    return min(effective_weight(scorer, feature, g) for g in glob)


def test_projection_keeps_effective_weight_nonnegative_and_leaves_the_rest() -> None:
    rng = np.random.default_rng(0)
    glob = random_globals(rng, 64)
    hit = 0
    for _ in range(50):
        w = rng.normal(0.0, 2.0, W)
        p = project_nonneg(w, ["gpu_used_after", "gpu_speed"], F, DEFAULT_INTERACT)
        s = DynLinearScorer(p, K, F)
        for feat in ("gpu_used_after", "gpu_speed"):
            assert min_effective(s, feat, glob) >= -1e-12
        hit += min_effective(DynLinearScorer(w, K, F), "gpu_used_after", glob) < 0
        touched = [
            b * F + CAND_FEATURE_NAMES.index(f)
            for f in ("gpu_used_after", "gpu_speed")
            for b in range(4)
        ]
        other = np.setdiff1d(np.arange(W), touched)
        np.testing.assert_array_equal(p[other], w[other])
        np.testing.assert_array_equal(project_nonneg(p, ["gpu_used_after"], F, DEFAULT_INTERACT), p)
    assert hit > 10  # the raw draws did violate it: the test exercises the projection
    # a sharing job may keep a negative sharing block as long as base + sharing >= 0
    w = np.zeros(W)
    w[PACK], w[F + PACK] = 1.0, -0.8
    np.testing.assert_array_equal(project_nonneg(w, ["gpu_used_after"], F, DEFAULT_INTERACT), w)
    w[F + PACK] = -3.0
    assert project_nonneg(w, ["gpu_used_after"], F, DEFAULT_INTERACT)[F + PACK] == -1.0
    with pytest.raises(ValueError, match="unknown candidate feature"):
        project_nonneg(w, ["no_such_feature"], F, DEFAULT_INTERACT)


class FakeStreams:
    """Duck-typed :class:`StreamSet`: records every scored weight vector; the objective pulls the
    weights towards a target with a strongly negative ``gpu_used_after`` weight."""

    def __init__(self) -> None:
        self.episodes = [("a", 0, None, None), ("b", 0, None, None)]
        self.scored: list[np.ndarray] = []
        self.worst_seen: list[float] = []
        self.target = np.zeros(W)
        self.target[CAND_FEATURE_NAMES.index("fgd_score")] = 10.0
        self.target[[PACK, 2 * F + PACK, 3 * F + PACK]] = -2.0

    def run(self, scorer: DynLinearScorer) -> list[dict[str, float]]:
        self.scored.append(scorer.weights.copy())
        return [{"d": float(np.sum((scorer.weights - self.target) ** 2))}]

    def objective(self, metrics: list[dict[str, float]], guard: float, worst: float) -> float:
        self.worst_seen.append(worst)
        return metrics[0]["d"]


def test_every_vector_the_search_scores_satisfies_the_constraint() -> None:
    fake = FakeStreams()
    res = cem_search_dynamic(
        fake, K, F, generations=3, population=6, n_elite=2, seed=1, nonneg=["gpu_used_after"]
    )  # type: ignore[arg-type]
    assert len(fake.scored) == 2 + 3 * 6  # FGD, the start, 3 generations
    glob = random_globals(np.random.default_rng(1), 64)
    # the FGD reference (scored first) is e_1; every other vector is a projected one
    for w in fake.scored[1:] + [res.best.weights]:
        assert min_effective(DynLinearScorer(w, K, F), "gpu_used_after", glob) >= -1e-12
    # without the constraint the same search does move the weight below 0 (it is binding)
    free = FakeStreams()
    res_free = cem_search_dynamic(free, K, F, generations=3, population=6, n_elite=2, seed=1)  # type: ignore[arg-type]
    assert min(w[PACK] for w in free.scored) < 0
    assert (
        min(min_effective(DynLinearScorer(w, K, F), "gpu_used_after", glob) for w in free.scored)
        < 0
    )
    assert (
        not np.array_equal(res.best.weights, res_free.best.weights)
        or res.best_score == res_free.best_score
    )


def test_default_search_is_the_released_recipes_draw_for_draw() -> None:
    """Defaults: same draws, same best vector as calling rl.teacher.cem_loop before these options."""
    fake = FakeStreams()
    res = cem_search_dynamic(fake, K, F, generations=2, population=5, n_elite=2, seed=3)  # type: ignore[arg-type]
    assert set(fake.worst_seen) == {0.0} and not res.stopped_early
    ref = FakeStreams()

    def score(s: DynLinearScorer) -> float:
        return ref.objective(ref.run(s), 0.5, 0.0)

    fgd, loc = DynLinearScorer.fgd(K, F), DynLinearScorer.locality(K, F)
    fs, ls = score(fgd), score(loc)
    start, ss = (loc, ls) if ls < fs else (fgd, fs)
    mu = start.weights.copy()
    sd = np.full(mu.shape, 0.5)
    anchor = int(np.argmax(np.abs(mu)))
    sd[anchor] = 0.0
    best, best_score, history, mu_end = cem_loop(
        mu,
        sd,
        anchor,
        lambda w: DynLinearScorer(w, K, F),
        score,
        start,
        ss,
        generations=2,
        population=5,
        n_elite=2,
        sd_floor=0.05,
        rng=np.random.default_rng(3),
    )
    np.testing.assert_array_equal(res.best.weights, best.weights)
    assert res.best_score == best_score and res.history == history
    assert len(fake.scored) == len(ref.scored)
    # the final search mean is cem_loop's, unscored (nothing beyond the loop's draws was scored)
    np.testing.assert_array_equal(res.mean.weights, mu_end)
    assert not any(np.array_equal(w, mu_end) for w in fake.scored)


def test_search_mean_is_projected_and_kept_when_the_time_cap_stops_the_search() -> None:
    fake = FakeStreams()
    res = cem_search_dynamic(
        fake, K, F, generations=3, population=6, n_elite=2, seed=1, nonneg=["gpu_used_after"]
    )  # type: ignore[arg-type]
    glob = random_globals(np.random.default_rng(2), 64)
    assert min_effective(res.mean, "gpu_used_after", glob) >= -1e-12
    # projected like every scored vector: projecting it again changes nothing
    np.testing.assert_array_equal(
        project_nonneg(res.mean.weights, ["gpu_used_after"], F, DEFAULT_INTERACT), res.mean.weights
    )
    capped = cem_search_dynamic(
        FakeStreams(), K, F, generations=4, population=3, n_elite=1, seed=0, max_minutes=1e-9
    )  # type: ignore[arg-type]
    assert capped.stopped_early and capped.mean is not None
    assert capped.mean.weights.shape == (W,)


def test_time_cap_stops_after_the_first_generation() -> None:
    fake = FakeStreams()
    res = cem_search_dynamic(
        fake, K, F, generations=4, population=3, n_elite=1, seed=0, max_minutes=1e-9, worst=1.0
    )  # type: ignore[arg-type]
    assert res.stopped_early and len(res.history) == 1
    assert len(fake.scored) == 2 + 3
    assert set(fake.worst_seen) == {1.0}
    # the best of gen 0 and the start (FGD, scored first, is a reference, not a candidate)
    dist = [float(np.sum((w - fake.target) ** 2)) for w in fake.scored[1:]]
    assert res.best_score == min(dist)


def hand_streams() -> tuple[StreamSet, list[dict[str, float]]]:
    eps = [("a", 1, None, None), ("a", 2, None, None), ("b", 1, None, None)]
    ref = [
        {"mean_slowdown": 2.0, "p99_queue_delay_s": 100.0},
        {"mean_slowdown": 4.0, "p99_queue_delay_s": 200.0},
        {"mean_slowdown": 5.0, "p99_queue_delay_s": 0.5},
    ]
    ms = [
        {"mean_slowdown": 3.0, "p99_queue_delay_s": 50.0},  # ratio 1.5, tail 0
        {"mean_slowdown": 2.0, "p99_queue_delay_s": 300.0},  # ratio 0.5, tail 0.5
        {"mean_slowdown": 4.0, "p99_queue_delay_s": 3.0},  # ratio 0.8, tail 3/max(0.5,1)-1 = 2
    ]
    return StreamSet({}, eps, ref, list(ref)), ms  # type: ignore[arg-type]


def test_objective_worst_trace_term_is_the_documented_formula() -> None:
    ss, ms = hand_streams()
    j = (1.5 + 0.5 + 0.8) / 3 + 0.5 * (0 + 0.5 + 2.0) / 3
    assert ss.objective(ms) == pytest.approx(j)
    assert ss.objective(ms, worst=0.0) == ss.objective(ms)
    # trace a: mean(1.5, 0.5) = 1.0; trace b: 0.8 -> worst case 1.0
    assert ss.trace_ratios(ms) == pytest.approx({"a": 1.0, "b": 0.8})
    assert ss.objective(ms, worst=2.0) == pytest.approx(j + 2.0 * 1.0)
    ms[2]["mean_slowdown"] = 7.5  # trace b becomes the worst (1.5)
    j2 = (1.5 + 0.5 + 1.5) / 3 + 0.5 * (0 + 0.5 + 2.0) / 3
    assert ss.objective(ms, worst=1.0) == pytest.approx(j2 + 1.5)
    both = ss.extend(ss)
    assert [e[0] for e in both.episodes] == ["a", "a", "b", "a", "a", "b"]
    assert both.trace_ratios(ms + ms) == ss.trace_ratios(ms)


def cli_args(argv: list[str]) -> argparse.Namespace:
    from fleetmind.cli.sched import register

    ap = argparse.ArgumentParser()
    register(ap.add_subparsers(dest="group"), "sched", "placement")
    return ap.parse_args(["sched", "train", *argv])


def test_options_parse_check_and_round_trip_through_metadata_and_flags() -> None:
    from fleetmind.cli.sched import _trace_seeds

    base = ["--mode", "dynamic", "--trace", "default", "--trace", "multigpu20", "--teacher", "cem"]
    ns = cli_args(
        base
        + ["--cem-trace-seeds", "multigpu20=1000-1003", "--cem-worst-weight", "1"]
        + ["--cem-nonneg", "gpu_used_after", "--cem-max-minutes", "30"]
    )
    a = argparse.Namespace(
        traces=ns.trace,
        teacher=ns.teacher,
        queue_features=False,
        cem_trace_seeds=_trace_seeds(ns.cem_trace_seeds),
        cem_worst_weight=ns.cem_worst_weight,
        cem_nonneg=ns.cem_nonneg,
        cem_max_minutes=ns.cem_max_minutes,
    )
    opts = search_options(a)
    assert opts == DynSearchOptions(
        {"multigpu20": [1000, 1001, 1002, 1003]}, 1.0, ["gpu_used_after"], 30.0
    )
    assert opts.seeds_for("multigpu20", [1000, 1001]) == [1000, 1001, 1002, 1003]
    assert opts.seeds_for("default", [1000, 1001]) == [1000, 1001]
    back = DynSearchOptions.from_dict(
        json.loads(json.dumps({"teacher_search": opts.to_dict()}))["teacher_search"]
    )
    assert back == opts
    # the card's flags reproduce the options through the CLI parser
    ns2 = cli_args(base + opts.flags().split())
    assert _trace_seeds(ns2.cem_trace_seeds) == opts.trace_seeds
    assert (ns2.cem_worst_weight, ns2.cem_nonneg, ns2.cem_max_minutes) == (
        1.0,
        ["gpu_used_after"],
        30.0,
    )
    # defaults: no flags, no metadata key, old metadata reads as defaults
    d = search_options(argparse.Namespace(traces=["default"], teacher="cem"))
    assert d.is_default() and d.flags() == "" and DynSearchOptions.from_dict(None) == d
    for bad, msg in [
        (dict(cem_trace_seeds={"gpuspec20": [1]}), "not a --trace"),
        (dict(cem_nonneg=["bogus"]), "unknown candidate feature"),
        (dict(cem_worst_weight=-1.0), ">= 0"),
        (dict(cem_max_minutes=0.0), "> 0"),
        (dict(cem_worst_weight=1.0, teacher="fgd"), "need --teacher cem"),
    ]:
        kw: dict[str, Any] = {"traces": ["default"], "teacher": "cem", **bad}
        with pytest.raises(ConfigError, match=msg):
            search_options(argparse.Namespace(**kw))
    with pytest.raises(ConfigError, match="TRACE=SEEDS"):
        _trace_seeds(["multigpu20"])


def test_smoke_run_records_options_and_uses_per_trace_seeds(tmp_path, shared_data) -> None:
    from fleetmind.training.recipes.dynamic import DynamicArgs, run

    args = DynamicArgs(
        traces=["default", "multigpu20"],
        dyn_jobs=64,
        n_candidates=8,
        timesteps=0,
        n_envs=1,
        bc_episodes=1,
        bc_epochs=2,
        teacher="cem",
        cem_generations=1,
        cem_population=2,
        cem_seeds=[1000],
        eval_seeds=[1100],
        out=str(tmp_path / "runs"),
        tracking_uri=f"sqlite:///{tmp_path}/mlflow.db",
        progress=False,
    )
    args.cem_trace_seeds = {"multigpu20": [1000, 1001]}  # type: ignore[attr-defined]
    args.cem_worst_weight = 1.0  # type: ignore[attr-defined]
    args.cem_nonneg = ["gpu_used_after"]  # type: ignore[attr-defined]
    summary = run(args)
    assert summary["cem"]["episodes"] == [
        ["default", 1000],
        ["multigpu20", 1000],
        ["multigpu20", 1001],
    ] or summary["cem"]["episodes"] == [
        ("default", 1000),
        ("multigpu20", 1000),
        ("multigpu20", 1001),
    ]
    assert set(summary["cem"]["teacher_trace_ratios"]) == {"default", "multigpu20"}
    model = Path(summary["artifact"])
    meta = json.loads((model / "metadata.json").read_text())
    opts = DynSearchOptions.from_dict(meta["teacher_search"])
    assert opts == DynSearchOptions({"multigpu20": [1000, 1001]}, 1.0, ["gpu_used_after"], None)
    assert (
        "--cem-trace-seeds multigpu20=1000,1001 --cem-worst-weight 1 --cem-nonneg gpu_used_after"
        in (model / "model_card.md").read_text()
    )
    teacher = DynLinearScorer.load(model / "teacher.json")
    glob = random_globals(np.random.default_rng(2), 32)
    assert min_effective(teacher, "gpu_used_after", glob) >= -1e-12
