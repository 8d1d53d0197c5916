"""How much can any placement policy win in dynamic mode? A relaxed reference.

Per trace and seed, on the job stream of the evaluation protocol (``fleetmind.rl.dynamic_eval``: 10 %
stratified node sample, 133 nodes, 2,048 jobs, offered load 0.8, backfill depth 8), this runs

* the relaxed reference (``RelaxedSim`` of ``dynamic_relaxed.py`` beside this script: ideal runtimes, pooled resources)
  in its three tiers ``pool`` < ``model`` < ``model_size`` (tighter to the right);
* the best heuristic of the trace on real nodes (``DynamicSim``) and with ideal runtimes on real
  nodes (``IdealRuntimeSim``), to split its slowdown into a run-time part and a packing part;
* for traces without published figures (the training traces), all seven heuristics and the
  released PPO agent; for the 11 unseen traces, every heuristic's and PPO's per-seed figures are
  read from ``benchmarks/results/dynamic/ppo_dynamic_eval*.json`` after checking that the recomputed best
  heuristic (every seed) and PPO (seed 42) reproduce them exactly (same streams).

Writes ``benchmarks/results/dynamic/dynamic_relaxed_reference.json`` (machine, versions, command, load
averages, every figure; rewritten after each trace).

    nice -n 19 python -m benchmarks.experiments.2026-11-30-dynamic-relaxed-reference.relaxed_reference
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.provenance import RESULTS, load_now, provenance
from fleetmind.cli.runner import run_main
from fleetmind.cli.sched import parse_seeds
from fleetmind.data.openb import load_openb_trace
from fleetmind.envs.dynamic.policies import make_dynamic_policy
from fleetmind.envs.dynamic.sim import DynamicSim
from fleetmind.envs.multicluster_env import MultiClusterPlacementEnv
from fleetmind.rl.dynamic_eval import (
    DEFAULT_HEURISTICS,
    DynEvalConfig,
    EnvActorPolicy,
    actor_fn,
    job_stream,
    load_dynamic_actor,
)

from .dynamic_relaxed import (
    TIERS,
    IdealRuntimeSim,
    RelaxedSim,
)

OUT = RESULTS / "dynamic" / "dynamic_relaxed_reference.json"
PUBLISHED = (
    RESULTS / "dynamic" / "ppo_dynamic_eval.json",
    RESULTS / "dynamic" / "ppo_dynamic_eval_more_traces.json",
)
UNSEEN = (
    "cpu050 gpushare20 gpushare60 multigpu30 gpuspec20 gpuspec10 gpuspec33 multigpu40 "
    "gpushare100 cpu200 gpuspec05"
).split()
TRAINING = ("default", "gpushare40", "multigpu20")
KEYS = ("mean_slowdown", "p99_queue_delay_s")


def parts(sim: DynamicSim) -> dict[str, float]:
    """Mean slowdown split per job: ``1 + queue/I + (run - I)/I + staging/I`` (means over the
    started jobs; the sum is ``mean_slowdown``)."""
    jb = sim.jobs
    ok = np.isfinite(sim.start_s)
    ideal = jb.ideal_s[ok]
    return {
        "queue": float(np.mean((sim.start_s[ok] - jb.arrival_s[ok]) / ideal)),
        "run_excess": float(np.mean((sim.run_s[ok] - ideal) / ideal)),
        "staging": float(np.mean(sim.data_s[ok] / ideal)),
    }


def run_sim(sim: DynamicSim, policy: Any) -> dict[str, Any]:
    m = sim.run(policy) if policy is not None else sim.run()
    out = {k: float(m[k]) for k in (*KEYS, "mean_run_slowdown", "gpu_allocation_ratio")}
    out["parts"] = parts(sim)
    return out


def published() -> dict[str, dict[str, Any]]:
    """Per trace: ``{policy: per_seed dict}``, seeds and file, from the published eval JSONs."""
    out: dict[str, dict[str, Any]] = {}
    for path in PUBLISHED:
        if not path.is_file():
            continue
        d = json.loads(path.read_text())
        for trace, entry in d["per_trace"].items():
            out[trace] = {
                "seeds": d["seeds"],
                "file": str(path.relative_to(RESULTS.parents[1])),
                "policies": {p: v["per_seed"] for p, v in entry["policies"].items()},
            }
    return out


def best_of(per_policy: dict[str, dict[str, list[float]]]) -> str:
    return min(DEFAULT_HEURISTICS, key=lambda h: float(np.mean(per_policy[h]["mean_slowdown"])))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--traces", nargs="+", default=[*UNSEEN, *TRAINING])
    ap.add_argument("--seeds", nargs="+", default=["42-51"])
    ap.add_argument("--out", default=str(OUT))
    ap.add_argument(
        "--recompute", action="store_true", help="run every heuristic even where published"
    )
    a = ap.parse_args()
    from fleetmind.data.paths import MODELS_DIR

    seeds = parse_seeds(a.seeds)
    model_dir = MODELS_DIR / "placement-dynamic"
    meta = json.loads((model_dir / "metadata.json").read_text())
    cfg = DynEvalConfig.from_metadata(meta["env_kwargs"])
    act = actor_fn(load_dynamic_actor(model_dir / "policy.onnx", cfg.n_candidates))
    pub = {} if a.recompute else published()
    t0 = time.perf_counter()
    out: dict[str, Any] = {
        "benchmark": "dynamic_relaxed_reference",
        "issue": 6,
        **provenance(__spec__.name, load_start=load_now(), packages=("onnxruntime", "gymnasium")),
        "config": meta["env_kwargs"],
        "model": str(model_dir.relative_to(RESULTS.parents[1])),
        "model_version": meta.get("version"),
        "seeds": seeds,
        "heuristics": list(DEFAULT_HEURISTICS),
        "tiers": list(TIERS),
        "definitions": {
            "relaxed": "RelaxedSim: same stream, FIFO + backfill 8 loop and metrics as DynamicSim; "
            "every job runs its ideal runtime I (no staging); resources pooled per tier",
            "headroom": "1 - relaxed mean slowdown / best heuristic mean slowdown "
            "(means over seeds)",
            "anomaly": "a (trace, seed) where a real policy's mean slowdown is below the "
            "relaxed one",
            "parts": "per job (start-arrival)/I, (run-I)/I, staging/I, averaged; "
            "1 + sum = slowdown",
            "per_stream_best": "mean over seeds of the lowest mean slowdown among the measured "
            "heuristics (or all measured policies: + PPO, + teacher where published) on each "
            "stream: an oracle selection, achievable only with hindsight",
        },
        "per_trace": {},
    }
    for trace in a.traces:
        t1 = time.perf_counter()
        tr = load_openb_trace(trace)
        env = MultiClusterPlacementEnv(**cfg.env_kwargs(tr))
        src = pub.get(trace)
        if src is not None and src["seeds"][: len(seeds)] != seeds:
            src = None
        per_policy: dict[str, dict[str, list[float]]]
        checks: list[dict[str, Any]] = []
        if src is not None:
            per_policy = {
                p: {k: v[k][: len(seeds)] for k in KEYS} for p, v in src["policies"].items()
            }
            source = src["file"]
        else:
            per_policy = {p: {k: [] for k in KEYS} for p in [*DEFAULT_HEURISTICS, "PPO"]}
            source = "recomputed"
        streams = [job_stream(env, s) for s in seeds]
        if src is None:
            for s, (jobs, pri) in zip(seeds, streams, strict=True):
                for h in DEFAULT_HEURISTICS:
                    sim = DynamicSim(env.fleet, jobs, env.backfill_depth, priority=pri)
                    m = sim.run(make_dynamic_policy(h, tr, env.fleet, s))
                    for k in KEYS:
                        per_policy[h][k].append(float(m[k]))
                sim = DynamicSim(env.fleet, jobs, env.backfill_depth, priority=pri)
                m = sim.run(EnvActorPolicy(act, env, "PPO"))
                for k in KEYS:
                    per_policy["PPO"][k].append(float(m[k]))
                print(f"{trace} seed {s}: heuristics and PPO", flush=True)
        best = best_of(per_policy)
        rows: list[dict[str, Any]] = []
        for i, (s, (jobs, pri)) in enumerate(zip(seeds, streams, strict=True)):
            row: dict[str, Any] = {"seed": s}
            sim = DynamicSim(env.fleet, jobs, env.backfill_depth, priority=pri)
            row["best"] = run_sim(sim, make_dynamic_policy(best, tr, env.fleet, s))
            # pooled packing at the best heuristic's own runtimes (run + staging)
            own = RelaxedSim(
                env.fleet,
                jobs,
                env.backfill_depth,
                "model_size",
                durations_s=sim.run_s + sim.data_s,
            )
            row["pooled_best_runtimes"] = run_sim(own, None)
            if src is not None:
                for k in KEYS:
                    checks.append(
                        {
                            "policy": best,
                            "seed": s,
                            "metric": k,
                            "published": per_policy[best][k][i],
                            "recomputed": row["best"][k],
                        }
                    )
                if i == 0:
                    m = DynamicSim(env.fleet, jobs, env.backfill_depth, priority=pri).run(
                        EnvActorPolicy(act, env, "PPO")
                    )
                    for k in KEYS:
                        checks.append(
                            {
                                "policy": "PPO",
                                "seed": s,
                                "metric": k,
                                "published": per_policy["PPO"][k][i],
                                "recomputed": float(m[k]),
                            }
                        )
            ideal = IdealRuntimeSim(env.fleet, jobs, env.backfill_depth, priority=pri)
            row["best_ideal_runtime"] = run_sim(ideal, make_dynamic_policy(best, tr, env.fleet, s))
            for tier in TIERS:
                row[tier] = run_sim(RelaxedSim(env.fleet, jobs, env.backfill_depth, tier), None)
            # anomalies: real policies below the relaxed reference on this stream
            row["anomalies"] = {
                tier: {
                    p: per_policy[p]["mean_slowdown"][i]
                    for p in per_policy
                    if per_policy[p]["mean_slowdown"][i] < row[tier]["mean_slowdown"]
                }
                for tier in TIERS
            }
            row["p99_anomalies"] = {
                tier: [
                    p
                    for p in per_policy
                    if per_policy[p]["p99_queue_delay_s"][i] < row[tier]["p99_queue_delay_s"]
                ]
                for tier in TIERS
            }
            rows.append(row)
            print(
                f"{trace} seed {s}: {best} {row['best']['mean_slowdown']:.3f} "
                f"ideal-run {row['best_ideal_runtime']['mean_slowdown']:.3f} "
                + " ".join(f"{t} {row[t]['mean_slowdown']:.3f}" for t in TIERS),
                flush=True,
            )
        out["per_trace"][trace] = summarize(trace, best, per_policy, rows, checks, source)
        out["per_trace"][trace]["wall_s"] = time.perf_counter() - t1
        out["wall_time_s"] = time.perf_counter() - t0
        out["load_average_end"] = load_now()
        out["summary"] = [v["summary"] for v in out["per_trace"].values()]
        out["overall"] = overall(out["summary"])
        Path(a.out).parent.mkdir(parents=True, exist_ok=True)
        Path(a.out).write_text(json.dumps(out, indent=1) + "\n")
        print(json.dumps(out["per_trace"][trace]["summary"]), flush=True)
    print(f"wrote {a.out}")


def overall(summary: list[dict[str, Any]]) -> dict[str, Any]:
    """Across traces: where the target is out of reach even for the reference, headroom range,
    anomaly totals."""
    tight = "model_size"
    head = [r["headroom_pct"][tight] for r in summary]
    closest = min(summary, key=lambda r: r["closest_real_over_relaxed"]["ratio"])
    return {
        "traces": len(summary),
        "traces_target_ruled_out": [r["trace"] for r in summary if r["target_ruled_out"]],
        "headroom_pct_min": min(head),
        "headroom_pct_max": max(head),
        "runs": sum(r["anomalies"][tight]["runs"] for r in summary),
        "runs_real_policy_below_relaxed": {
            t: sum(r["anomalies"][t]["runs_any_policy_below"] for r in summary) for t in TIERS
        },
        "runs_ideal_runtime_best_below_relaxed": {
            t: sum(r["anomalies"][t]["ideal_runtime_best_below"] for r in summary) for t in TIERS
        },
        "tier_order_violations": sum(len(r["tier_order_violations"]) for r in summary),
        "closest_real_over_relaxed": {
            "trace": closest["trace"],
            **closest["closest_real_over_relaxed"],
        },
    }


def summarize(
    trace: str,
    best: str,
    per_policy: dict[str, dict[str, list[float]]],
    rows: list[dict[str, Any]],
    checks: list[dict[str, Any]],
    source: str,
) -> dict[str, Any]:
    """Means over seeds, headroom per tier, decomposition of the best heuristic's slowdown,
    anomaly counts and the stream check."""

    def mean(key: str, metric: str) -> float:
        return float(np.mean([r[key][metric] for r in rows]))

    def part(key: str, name: str) -> float:
        return float(np.mean([r[key]["parts"][name] for r in rows]))

    best_sd = float(np.mean(per_policy[best]["mean_slowdown"]))
    ppo_sd = float(np.mean(per_policy["PPO"]["mean_slowdown"]))
    relaxed = {t: mean(t, "mean_slowdown") for t in TIERS}
    ideal_sd = mean("best_ideal_runtime", "mean_slowdown")
    pooled_own = mean("pooled_best_runtimes", "mean_slowdown")
    best_re = mean("best", "mean_slowdown")
    n_runs = len(rows)
    anomalies: dict[str, Any] = {}
    for t in TIERS:
        by_policy = {p: sum(p in r["anomalies"][t] for r in rows) for p in per_policy}
        gaps = [
            1.0 - v / r[t]["mean_slowdown"]
            for r in rows
            for v in r["anomalies"][t].values()  # relative amount below the reference
        ]
        anomalies[t] = {
            "runs_any_policy_below": sum(bool(r["anomalies"][t]) for r in rows),
            "runs": n_runs,
            "policy_runs_below": sum(by_policy.values()),
            "by_policy": {p: c for p, c in by_policy.items() if c},
            "max_relative_below": max(gaps) if gaps else 0.0,
            "runs_any_policy_below_p99_queue": sum(bool(r["p99_anomalies"][t]) for r in rows),
            "ideal_runtime_best_below": sum(
                r["best_ideal_runtime"]["mean_slowdown"] < r[t]["mean_slowdown"] for r in rows
            ),
            "ideal_runtime_best_max_relative_below": max(
                [0.0]
                + [
                    1.0 - r["best_ideal_runtime"]["mean_slowdown"] / r[t]["mean_slowdown"]
                    for r in rows
                ]
            ),
        }
    closest = min(
        (per_policy[p]["mean_slowdown"][i] / r["model_size"]["mean_slowdown"], p, r["seed"])
        for i, r in enumerate(rows)
        for p in per_policy
    )
    order = [(TIERS[k], TIERS[k + 1]) for k in range(len(TIERS) - 1)]
    tier_order_violations = [
        {
            "seed": r["seed"],
            "looser": lo,
            "tighter": hi,
            "relative": 1 - r[hi]["mean_slowdown"] / r[lo]["mean_slowdown"],
        }
        for r in rows
        for lo, hi in order
        if r[hi]["mean_slowdown"] < r[lo]["mean_slowdown"]
    ]
    # per-stream selection (an oracle that picks the best measured policy for each stream)
    oracle_h = float(
        np.mean(np.min([per_policy[h]["mean_slowdown"] for h in DEFAULT_HEURISTICS], axis=0))
    )
    oracle_all = float(np.mean(np.min([v["mean_slowdown"] for v in per_policy.values()], axis=0)))
    max_diff = max((abs(c["published"] - c["recomputed"]) for c in checks), default=0.0)
    tight = "model_size"
    summary = {
        "trace": trace,
        "best_heuristic": best,
        "best_mean_slowdown": best_sd,
        "best_p99_queue_delay_s": float(np.mean(per_policy[best]["p99_queue_delay_s"])),
        "ppo_mean_slowdown": ppo_sd,
        "ppo_p99_queue_delay_s": float(np.mean(per_policy["PPO"]["p99_queue_delay_s"])),
        "ppo_diff_pct": 100.0 * (ppo_sd / best_sd - 1.0),
        "relaxed_mean_slowdown": relaxed,
        "relaxed_p99_queue_delay_s": {t: mean(t, "p99_queue_delay_s") for t in TIERS},
        "headroom_pct": {t: 100.0 * (1.0 - relaxed[t] / best_sd) for t in TIERS},
        "target_slowdown": 0.9 * best_sd,
        "target_ruled_out": bool(relaxed[tight] > 0.9 * best_sd),
        "best_ideal_runtime_mean_slowdown": ideal_sd,
        "best_ideal_runtime_p99_queue_delay_s": mean("best_ideal_runtime", "p99_queue_delay_s"),
        "pooled_best_runtimes_mean_slowdown": pooled_own,
        "split_of_best_minus_relaxed": {
            "runtime_first": {
                "run_time_part": best_re - ideal_sd,
                "packing_part": ideal_sd - relaxed[tight],
            },
            "packing_first": {
                "packing_part": best_re - pooled_own,
                "run_time_part": pooled_own - relaxed[tight],
            },
            "model_size_constraint_part": relaxed[tight] - relaxed["pool"],
            "note": "runtime_first: best - best with ideal runtimes on real nodes, then that - "
            "model_size relaxed; packing_first: best - model_size pool at the best's own "
            "runtimes, then that - model_size relaxed; model_size - pool relaxed: model pinning "
            "and node size",
        },
        "best_parts": {n: part("best", n) for n in ("queue", "run_excess", "staging")},
        "relaxed_pool_parts_queue": part("pool", "queue"),
        "anomalies": anomalies,
        "source": source,
        "stream_check_max_abs_diff": max_diff,
        "stream_checks": len(checks),
        "closest_real_over_relaxed": {
            "ratio": closest[0],
            "policy": closest[1],
            "seed": closest[2],
            "tier": tight,
        },
        "per_stream_best_heuristic_mean_slowdown": oracle_h,
        "per_stream_best_heuristic_vs_best_pct": 100.0 * (oracle_h / best_sd - 1.0),
        "per_stream_best_policy_mean_slowdown": oracle_all,
        "per_stream_best_policy_vs_best_pct": 100.0 * (oracle_all / best_sd - 1.0),
        "policies_measured": list(per_policy),
        "ppo_share_of_headroom_pct": 100.0 * (best_sd - ppo_sd) / (best_sd - relaxed[tight]),
        "tier_order_violations": tier_order_violations,
    }
    return {
        "summary": summary,
        "per_policy_per_seed": per_policy,
        "per_seed": rows,
        "stream_checks": checks,
    }


if __name__ == "__main__":
    raise SystemExit(
        run_main(
            main,
            prog="benchmarks.experiments.2026-11-30-dynamic-relaxed-reference.relaxed_reference",
        )
    )
