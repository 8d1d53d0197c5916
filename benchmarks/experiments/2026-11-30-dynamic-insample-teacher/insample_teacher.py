"""Dynamic mode: is the miss a capacity problem or a generalisation problem?

An *in-sample capacity check*, never a release candidate. For a few unseen traces where the
released agent misses the target, this runs the released recipe's teacher search
(``fleetmind.rl.dynamic_teacher.cem_search_dynamic``: the same ``DynLinearScorer`` class, the same objective
``J`` with the better of FGD and LocalityAware per stream as the unit, the same CEM settings:
population 12, 4 elites, initial sd 0.5, noise floor 0.05, guard 0.5, seed 0) directly on that
trace's *evaluation* streams, seeds 42-45 (deliberately in-sample). The searched teacher is then
scored on the same streams (in-sample) and on seeds 46-51 of the same trace (unseen seeds), next
to FGD, LocalityAware, the released teacher and the released PPO agent on the same streams.

Reading: if even the in-sample fitted linear teacher cannot get 10 % below the best heuristic on
its own streams, the scorer class lacks the capacity (or the features) there; if it can in-sample
but not on seeds 46-51, it is a generalisation problem; if it can on both, the training traces
are the problem.

Figures of the released agent and teacher are read from ``benchmarks/results/dynamic/ppo_dynamic_eval*.json``
(streams are deterministic by seed); FGD and LocalityAware are recomputed on all 10 seeds and the
released teacher on seed 42, and compared with those files (``stream_check``).

Writes ``benchmarks/results/dynamic/ppo_dynamic_insample.json`` (machine, versions, command, load
averages, git state, per-trace per-seed figures, wall times, the searched weights), rewritten
after every trace. A wall-clock deadline (``--deadline-utc``) caps each search
(``max_minutes``) so that the trace's evaluation still ends before it; a trace that cannot fit at
least two generations is skipped and recorded as such.

    nice -n 19 python -m benchmarks.experiments.2026-11-30-dynamic-insample-teacher.insample_teacher \
        --traces cpu050 gpushare100 gpushare60 cpu200 --deadline-utc 05:20

``--continue`` (search-budget check) then reads that JSON and runs a second search of the same
size for each listed trace, started at its in-sample teacher, stored under ``continued_search``:

    nice -n 19 python -m benchmarks.experiments.2026-11-30-dynamic-insample-teacher.insample_teacher --traces gpushare60 --continue
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import subprocess
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.provenance import REPO_ROOT as ROOT
from benchmarks.provenance import RESULTS, command, load_now, provenance
from fleetmind.cli.runner import run_main
from fleetmind.cli.sched import parse_seeds
from fleetmind.envs.dynamic.policies import make_dynamic_policy
from fleetmind.envs.multicluster_env import (
    CAND_FEATURE_NAMES,
    GLOBAL_FEATURE_NAMES,
    N_CAND_FEATURES,
)
from fleetmind.errors import ConfigError
from fleetmind.rl.dynamic_eval import (
    DEFAULT_HEURISTICS,
    DynEvalConfig,
    EnvActorPolicy,
    job_stream,
    run_policy,
)
from fleetmind.rl.dynamic_teacher import (
    REFERENCE_POLICIES,
    DynLinearScorer,
    StreamSet,
    cem_search_dynamic,
)

OUT = RESULTS / "dynamic" / "ppo_dynamic_insample.json"
PUBLISHED = (
    RESULTS / "dynamic" / "ppo_dynamic_eval.json",
    RESULTS / "dynamic" / "ppo_dynamic_eval_more_traces.json",
)
RELEASED_TEACHER = ROOT / "models" / "placement-dynamic" / "teacher.json"
KEYS = ("mean_slowdown", "p99_queue_delay_s", "mean_run_slowdown", "remote_data_frac")
TARGET = 0.10
"""The issue's margin: mean slowdown at least 10 % below the best heuristic's."""


def published() -> dict[str, dict[str, Any]]:
    """Per trace: ``{"seeds", "file", "policies": {policy: per_seed dict}}`` from the eval JSONs."""
    out: dict[str, dict[str, Any]] = {}
    for path in PUBLISHED:
        d = json.loads(path.read_text())
        for trace, entry in d["per_trace"].items():
            out[trace] = {
                "seeds": [int(s) for s in d["seeds"]],
                "file": str(path.relative_to(ROOT)),
                "policies": {p: v["per_seed"] for p, v in entry["policies"].items()},
            }
    return out


def named_weights(scorer: DynLinearScorer) -> dict[str, float]:
    """Weights keyed ``feature`` or ``feature*global``."""
    f = scorer.n_cand_features
    names = list(CAND_FEATURE_NAMES)[:f]
    out = {n: float(scorer.weights[i]) for i, n in enumerate(names)}
    for j, g in enumerate(scorer.interact):
        for i, n in enumerate(names):
            out[f"{n}*{GLOBAL_FEATURE_NAMES[g]}"] = float(scorer.weights[(1 + j) * f + i])
    return out


def pick(m: dict[str, float]) -> dict[str, float]:
    return {k: float(m[k]) for k in KEYS if k in m}


def subset_summary(
    per_seed: dict[str, list[dict[str, float]]],
    seeds: list[int],
    idx: list[int],
    best: str,
) -> dict[str, Any]:
    """Means over the seeds ``idx`` (positions in ``seeds``) of every policy, relative to the
    trace's best heuristic ``best`` on the same seeds, and ``J`` per policy (the search objective,
    unit: the better of FGD and LocalityAware per stream, guard 0.5)."""
    ref = [
        min((per_seed[h][i] for h in REFERENCE_POLICIES), key=lambda m: m["mean_slowdown"])
        for i in idx
    ]
    b_sd = float(np.mean([per_seed[best][i]["mean_slowdown"] for i in idx]))
    b_q = float(np.mean([per_seed[best][i]["p99_queue_delay_s"] for i in idx]))
    pols: dict[str, Any] = {}
    for name, rows in per_seed.items():
        r = [rows[i] for i in idx]
        sd = float(np.mean([m["mean_slowdown"] for m in r]))
        q = float(np.mean([m["p99_queue_delay_s"] for m in r]))
        ratio = [m["mean_slowdown"] / f["mean_slowdown"] for m, f in zip(r, ref, strict=True)]
        tail = [
            max(0.0, m["p99_queue_delay_s"] / max(f["p99_queue_delay_s"], 1.0) - 1.0)
            for m, f in zip(r, ref, strict=True)
        ]
        pols[name] = {
            "mean_slowdown": sd,
            "p99_queue_delay_s": q,
            "slowdown_diff_vs_best_pct": 100.0 * (sd - b_sd) / b_sd,
            "p99_queue_diff_vs_best_pct": 100.0 * (q - b_q) / b_q,
            "seeds_below_best": int(
                sum(rows[i]["mean_slowdown"] < per_seed[best][i]["mean_slowdown"] for i in idx)
            ),
            "target_met": bool(sd <= (1.0 - TARGET) * b_sd and q <= b_q),
            "objective_J": float(np.mean(ratio) + 0.5 * np.mean(tail)),
        }
    oracle = {
        "heuristics": [],
        "measured": [],
    }
    for i in idx:
        oracle["heuristics"].append(
            min(per_seed[h][i]["mean_slowdown"] for h in per_seed if h in DEFAULT_HEURISTICS)
        )
        oracle["measured"].append(
            min(per_seed[p][i]["mean_slowdown"] for p in per_seed if p != "insample_teacher")
        )
    return {
        "seeds": [seeds[i] for i in idx],
        "best_heuristic": best,
        "best_mean_slowdown": b_sd,
        "best_p99_queue_delay_s": b_q,
        "policies": pols,
        "per_stream_oracle_diff_vs_best_pct": {
            k: 100.0 * (float(np.mean(v)) - b_sd) / b_sd for k, v in oracle.items()
        },
    }


def git_state() -> dict[str, Any]:
    def git(*a: str) -> str:
        return subprocess.run(
            ["git", *a], cwd=ROOT, capture_output=True, text=True, check=False
        ).stdout.strip()

    files = [
        "rl/dynamic_teacher.py",
        "rl/dynamic_eval.py",
        "rl/teacher.py",
        "envs/dynamic",
        "envs/multicluster_env.py",
    ]
    return {"head": git("rev-parse", "HEAD"), "dirty_inputs": git("status", "--short", *files)}


def run_trace(
    trace: str,
    a: argparse.Namespace,
    pub: dict[str, Any],
    deadline: float | None,
    init: DynLinearScorer | None = None,
) -> dict[str, Any]:
    """Search, evaluate and summarise one trace (``init``: search start instead of the better of
    FGD and the LocalityAware stand-in; used by ``--continue``)."""
    t_start = time.time()
    fit_seeds = parse_seeds(a.fit_seeds)
    test_seeds = parse_seeds(a.test_seeds)
    seeds = fit_seeds + test_seeds
    p = pub[trace]
    pos = {s: p["seeds"].index(s) for s in seeds}
    env_kwargs = asdict(DynEvalConfig())
    res_entry: dict[str, Any] = {"trace": trace, "published_file": p["file"]}

    # 1. the search streams (runs FGD and LocalityAware on each: the objective's unit)
    t0 = time.time()
    fit = StreamSet.build([trace], fit_seeds, env_kwargs)
    env = fit.envs[trace]
    t_build = time.time() - t0

    # 2. stream check + time estimate: the released teacher on the first fit seed
    released = DynLinearScorer.load(RELEASED_TEACHER)
    t0 = time.time()
    _, _, jobs, prio = fit.episodes[0]
    rel_m = run_policy(env, jobs, prio, EnvActorPolicy(released, env, "teacher"))
    t_actor = time.time() - t0
    n_streams = len(fit_seeds)
    gen_s = a.population * n_streams * t_actor
    eval_s = (len(seeds) + 1) * t_actor + 2 * len(seeds) * t_build / (2 * n_streams)
    budget_min: float | None = a.max_minutes_per_trace
    if deadline is not None:
        left = deadline - time.time() - 1.3 * (gen_s + eval_s)
        if left < 2 * gen_s + 2 * n_streams * t_actor:
            res_entry.update(
                skipped=True,
                reason=f"deadline: {left / 60:.1f} min left for the search, one generation "
                f"~{gen_s / 60:.1f} min",
            )
            return res_entry
        budget_min = left / 60 if budget_min is None else min(budget_min, left / 60)

    # 3. the recipe's CEM search, in-sample
    print(
        f"[{trace}] build {t_build:.0f} s, actor run {t_actor:.1f} s, est. generation "
        f"{gen_s / 60:.1f} min, search cap {budget_min if budget_min is None else round(budget_min, 1)} min",
        flush=True,
    )
    n_done = [0]

    def progress(k: int) -> None:
        n_done[0] += k

    t0 = time.time()
    res = cem_search_dynamic(
        fit,
        env.n_candidates,
        N_CAND_FEATURES,
        generations=a.generations,
        population=a.population,
        n_elite=max(1, min(4, a.population // 3)),
        seed=a.seed,
        progress=progress,
        max_minutes=budget_min,
        init=init,
    )
    t_search = time.time() - t0
    print(
        f"[{trace}] search {t_search / 60:.1f} min, {len(res.history)} generations, "
        f"J {res.fgd_score:.3f} (FGD) -> {res.best_score:.3f}",
        flush=True,
    )

    # 4. evaluation: in-sample teacher on every seed, FGD/LocalityAware on the unseen seeds
    t0 = time.time()
    ins_fit = fit.run(res.best)
    heur: dict[str, list[dict[str, float]]] = {h: [] for h in REFERENCE_POLICIES}
    ins_test: list[dict[str, float]] = []
    for s in fit_seeds:
        jb, pr = job_stream(env, s)
        for h in REFERENCE_POLICIES:
            heur[h].append(run_policy(env, jb, pr, make_dynamic_policy(h, env.trace, env.fleet, s)))
    for s in test_seeds:
        jb, pr = job_stream(env, s)
        for h in REFERENCE_POLICIES:
            heur[h].append(run_policy(env, jb, pr, make_dynamic_policy(h, env.trace, env.fleet, s)))
        ins_test.append(run_policy(env, jb, pr, EnvActorPolicy(res.best, env, "insample")))
    t_eval = time.time() - t0

    # 5. stream check against the published per-seed figures
    diffs = []
    for h in REFERENCE_POLICIES:
        for s, m in zip(seeds, heur[h], strict=True):
            for k in ("mean_slowdown", "p99_queue_delay_s"):
                diffs.append(abs(m[k] - p["policies"][h][k][pos[s]]))
    rel_pub = {
        k: p["policies"]["teacher"][k][pos[fit_seeds[0]]]
        for k in ("mean_slowdown", "p99_queue_delay_s")
    }
    diffs += [abs(rel_m[k] - v) for k, v in rel_pub.items()]

    # 6. per-seed rows: recomputed heuristics, published others, the in-sample teacher
    def pub_rows(pol: str) -> list[dict[str, float]]:
        d = p["policies"][pol]
        return [{k: float(d[k][pos[s]]) for k in KEYS if k in d} for s in seeds]

    per_seed: dict[str, list[dict[str, float]]] = {h: [pick(m) for m in heur[h]] for h in heur}
    for h in DEFAULT_HEURISTICS:
        if h not in per_seed:
            per_seed[h] = pub_rows(h)
    per_seed["PPO"] = pub_rows("PPO")
    per_seed["teacher"] = pub_rows("teacher")
    per_seed["insample_teacher"] = [pick(m) for m in ins_fit + ins_test]
    best = min(
        DEFAULT_HEURISTICS,
        key=lambda h: float(np.mean(p["policies"][h]["mean_slowdown"])),
    )
    n_fit = len(fit_seeds)
    idx_fit, idx_test = list(range(n_fit)), list(range(n_fit, len(seeds)))
    res_entry.update(
        skipped=False,
        seeds=seeds,
        fit_seeds=fit_seeds,
        test_seeds=test_seeds,
        best_heuristic=best,
        summary={
            "fit": subset_summary(per_seed, seeds, idx_fit, best),
            "test": subset_summary(per_seed, seeds, idx_test, best),
            "all": subset_summary(per_seed, seeds, idx_fit + idx_test, best),
        },
        per_seed={
            pol: {k: [r[k] for r in rows] for k in rows[0]} for pol, rows in per_seed.items()
        },
        search={
            "objective_fgd": res.fgd_score,
            "objective_start_and_best": res.best_score,
            "history": res.history,
            "generations_done": len(res.history),
            "generations_asked": a.generations,
            "stopped_early": res.stopped_early,
            "vectors_scored": n_done[0] + 1,
            "max_minutes": budget_min,
            "episodes": res.episodes,
        },
        insample_teacher=res.best.to_dict(),
        insample_teacher_named=named_weights(res.best),
        stream_check={
            "recomputed": "FGD, LocalityAware on every seed; released teacher on seed "
            f"{fit_seeds[0]}",
            "max_abs_diff": float(max(diffs)),
        },
        wall_s={
            "build_streams": t_build,
            "released_teacher_check": t_actor,
            "search": t_search,
            "evaluate": t_eval,
            "total": time.time() - t_start,
        },
    )
    return res_entry


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--traces", nargs="+", default=["cpu050", "gpushare100", "gpushare60", "cpu200"]
    )
    ap.add_argument("--fit-seeds", nargs="+", default=["42-45"])
    ap.add_argument("--test-seeds", nargs="+", default=["46-51"])
    ap.add_argument("--generations", type=int, default=7, help="the released recipe: 7")
    ap.add_argument("--population", type=int, default=12, help="the released recipe: 12")
    ap.add_argument("--seed", type=int, default=0, help="CEM seed (the released recipe: 0)")
    ap.add_argument("--max-minutes-per-trace", type=float, default=None)
    ap.add_argument("--deadline-utc", default=None, help="HH:MM today: every search ends in time")
    ap.add_argument("--out", default=str(OUT))
    ap.add_argument(
        "--continue",
        dest="cont",
        action="store_true",
        help="search-budget check: read --out, start a second search of the same size at each "
        "trace's in-sample teacher, store it under continued_search",
    )
    a = ap.parse_args()

    deadline = None
    if a.deadline_utc:
        hh, mm = (int(x) for x in a.deadline_utc.split(":"))
        now = dt.datetime.now(dt.UTC)
        deadline = now.replace(hour=hh, minute=mm, second=0, microsecond=0).timestamp()
    pub = published()
    missing = [t for t in a.traces if t not in pub]
    if missing:
        raise ConfigError(f"no published figures for {missing}")
    t0 = time.time()
    if a.cont:
        continue_searches(a, pub, deadline, t0)
        return
    out: dict[str, Any] = {
        "benchmark": "dynamic_insample_teacher",
        "issue": 6,
        "label": "IN-SAMPLE capacity check: the teacher is fitted on evaluation seeds; never a "
        "release candidate",
        **provenance(__spec__.name, load_start=load_now(), packages=("gymnasium",)),
        "git": git_state(),
        "config": asdict(DynEvalConfig()),
        "cem": {
            "generations": a.generations,
            "population": a.population,
            "n_elite": max(1, min(4, a.population // 3)),
            "init_sd": 0.5,
            "sd_floor": 0.05,
            "guard": 0.5,
            "seed": a.seed,
            "start": "better of FGD and DynLinearScorer.locality on the fit streams",
            "reference_per_stream": list(REFERENCE_POLICIES),
        },
        "target": "mean slowdown >= 10 % below the best heuristic's, p99 queueing delay no worse",
        "traces": {},
    }
    path = Path(a.out)
    for trace in a.traces:
        out["traces"][trace] = run_trace(trace, a, pub, deadline)
        out["load_average_end"] = load_now()
        out["wall_time_s"] = time.time() - t0
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(out, indent=1) + "\n")
        e = out["traces"][trace]
        if e.get("skipped"):
            print(f"[{trace}] skipped: {e['reason']}", flush=True)
            continue
        for sub in ("fit", "test"):
            s = e["summary"][sub]
            line = ", ".join(
                f"{n} {v['mean_slowdown']:.3f} ({v['slowdown_diff_vs_best_pct']:+.1f} %)"
                for n, v in s["policies"].items()
                if n in ("LocalityAware", "FGD", "PPO", "teacher", "insample_teacher")
            )
            print(f"[{trace}] {sub} {s['seeds'][0]}-{s['seeds'][-1]}: {line}", flush=True)
    print(f"wrote {path} ({(time.time() - t0) / 60:.1f} min)")


def continue_searches(
    a: argparse.Namespace, pub: dict[str, Any], deadline: float | None, t0: float
) -> None:
    """``--continue``: for each trace already in ``--out``, a second CEM search of the same size
    (same seed, so the same noise draws, around a new mean) that starts at the first search's
    in-sample teacher. Does more search budget lower the in-sample objective much further?"""
    path = Path(a.out)
    out = json.loads(path.read_text())
    cont = out.setdefault("continued_search", {})
    cont["command"] = command(__spec__.name)
    cont["load_average_start"] = load_now()
    cont["git"] = git_state()
    for trace in a.traces:
        first = out["traces"][trace]
        d = first["insample_teacher"]
        init = DynLinearScorer(
            np.asarray(d["weights"]), d["n_candidates"], d["n_cand_features"], d["interact"]
        )
        e = run_trace(trace, a, pub, deadline, init=init)
        cont[trace] = e
        cont["load_average_end"] = load_now()
        cont["wall_time_s"] = time.time() - t0
        path.write_text(json.dumps(out, indent=1) + "\n")
        if e.get("skipped"):
            print(f"[{trace}] continued: skipped: {e['reason']}", flush=True)
            continue
        for sub in ("fit", "test"):
            s = e["summary"][sub]["policies"]["insample_teacher"]
            print(
                f"[{trace}] continued, {sub}: {s['mean_slowdown']:.3f} "
                f"({s['slowdown_diff_vs_best_pct']:+.1f} %), J {s['objective_J']:.3f}",
                flush=True,
            )


if __name__ == "__main__":
    raise SystemExit(
        run_main(
            main,
            prog="benchmarks.experiments.2026-11-30-dynamic-insample-teacher.insample_teacher",
        )
    )
