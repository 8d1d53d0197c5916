"""Does the fgd-mode host-stranding penalty help the dynamic-mode teacher too? (2026-11-30)

In fgd mode a penalty on host-stranded GPUs took the teacher 6 points further below FGD
(``docs/ppo.md`` item 15). This probe adds the same penalty to the released dynamic-mode teacher
(``models/placement-dynamic/teacher.json``, a ``DynLinearScorer``) and runs it on dynamic-mode
job streams beside the heuristics:

    score_k = teacher(x_k) - alpha * (stranded_after_k - stranded_before_k) / 1000

with ``stranded = fleetmind.envs.candidates.stranded_gpu_milli`` at the stream's typical CPU and memory per
milli-GPU (its GPU jobs' totals). The env setting is the released dynamic model's. The metric is
each policy's mean slowdown; a row reports the teacher's gap to the best heuristic of the trace.

    python -m benchmarks.experiments.2026-11-30-host-stranding-probes.dynamic_strand_probe \\
        --traces default gpushare40 multigpu20 \\
        --seeds 300-304 --alphas 0 1 2 4 8 --out benchmarks/results/dynamic/dynamic_strand_probe.json
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

from benchmarks.provenance import REPO_ROOT as ROOT
from benchmarks.provenance import load_now, provenance
from fleetmind.cli.runner import run_main
from fleetmind.cli.sched import parse_seeds

MODEL = ROOT / "models" / "placement-dynamic"
PACKAGES = ("scipy", "onnxruntime", "stable-baselines3", "sb3-contrib")


def strand_actor(teacher: object, alpha: float, env: object):  # noqa: ANN201 - Actor
    """``act(obs, mask)``: the teacher's scores minus ``alpha`` x each candidate's change in
    stranded GPUs, read from ``env``'s attached simulator."""
    from fleetmind.envs.candidates import host_demand_per_gpu_milli, stranding_deltas

    cache: dict[int, tuple[float, float]] = {}

    def act(obs: np.ndarray, mask: np.ndarray) -> int:
        s = teacher.scores(obs)
        if alpha:
            if id(env.jobs) not in cache:  # one job stream per run
                cache.clear()
                cache[id(env.jobs)] = host_demand_per_gpu_milli(env.jobs)
            real = np.asarray(mask, dtype=bool)
            nodes, _ = env.candidates()
            d = np.zeros(s.shape)
            d[real] = stranding_deltas(
                env.sim.state, env.sim.pod(env.current_job), nodes[real], *cache[id(env.jobs)]
            )
            s = s - alpha * d
        s = np.where(np.asarray(mask, dtype=bool), s, -np.inf)
        return int(np.argmax(s))

    return act


def main(argv: list[str] | None = None) -> None:
    from fleetmind.data.openb import load_openb_trace
    from fleetmind.envs.dynamic.policies import make_dynamic_policy
    from fleetmind.envs.multicluster_env import MultiClusterPlacementEnv
    from fleetmind.rl.dynamic_eval import (
        DynEvalConfig,
        EnvActorPolicy,
        best_heuristic,
        job_stream,
        run_policy,
    )
    from fleetmind.rl.dynamic_teacher import DynLinearScorer

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--traces", nargs="+", required=True)
    ap.add_argument("--seeds", nargs="+", required=True)
    ap.add_argument("--alphas", nargs="+", type=float, default=[0.0, 1.0, 2.0, 4.0, 8.0])
    ap.add_argument("--heuristics", nargs="+", default=["LocalityAware", "FGD", "BestFit"])
    ap.add_argument("--out", required=True)
    a = ap.parse_args(argv)
    seeds = parse_seeds(a.seeds)
    meta = json.loads((MODEL / "metadata.json").read_text())
    cfg = DynEvalConfig.from_metadata(meta["env_kwargs"])
    teacher = DynLinearScorer.load(MODEL / "teacher.json")
    load0, t0 = load_now(), time.perf_counter()
    per_trace: dict[str, dict] = {}
    for trace in a.traces:
        tr = load_openb_trace(trace)
        env = MultiClusterPlacementEnv(**cfg.env_kwargs(tr))
        names = list(a.heuristics) + [f"alpha={x:g}" for x in a.alphas]
        rows: dict[str, list[float]] = {n: [] for n in names}
        for seed in seeds:
            jobs, priority = job_stream(env, int(seed))
            for h in a.heuristics:
                res = run_policy(
                    env, jobs, priority, make_dynamic_policy(h, tr, env.fleet, int(seed))
                )
                rows[h].append(float(res["mean_slowdown"]))
            for x in a.alphas:
                act = strand_actor(teacher, x, env)
                res = run_policy(env, jobs, priority, EnvActorPolicy(act, env, f"alpha={x:g}"))
                rows[f"alpha={x:g}"].append(float(res["mean_slowdown"]))
        means = {n: float(np.mean(v)) for n, v in rows.items()}
        best = best_heuristic({h: {"mean_slowdown": means[h]} for h in a.heuristics}, a.heuristics)
        per_trace[trace] = {
            "best_heuristic": best,
            "mean_slowdown": {n: round(v, 4) for n, v in means.items()},
            "gap_vs_best_pct": {
                n: round(100.0 * (means[n] / means[best] - 1.0), 2)
                for n in names
                if n.startswith("alpha=")
            },
            "per_seed": rows,
        }
        print(trace, best, per_trace[trace]["gap_vs_best_pct"], flush=True)
    gaps = {
        f"alpha={x:g}": round(
            float(np.mean([v["gap_vs_best_pct"][f"alpha={x:g}"] for v in per_trace.values()])), 2
        )
        for x in a.alphas
    }
    out = {
        **provenance(__spec__.name, argv, load_start=load0, packages=PACKAGES),
        "teacher": str((MODEL / "teacher.json").relative_to(ROOT)),
        "env_kwargs": meta["env_kwargs"],
        "seeds": seeds,
        "wall_time_s": round(time.perf_counter() - t0, 1),
        "mean_gap_vs_best_pct": gaps,
        "traces": per_trace,
    }
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(json.dumps(out, indent=1) + "\n")
    print("mean gap to the best heuristic:", gaps)


if __name__ == "__main__":
    raise SystemExit(
        run_main(
            main,
            prog="benchmarks.experiments.2026-11-30-host-stranding-probes.dynamic_strand_probe",
        )
    )
