"""Speed of the fgd-mode simulator: per-decision latency on the full openb fleet and the full
six-policy x 10-seed evaluation on ``default``. Writes ``benchmarks/results/placement/fgd.json``.

Decision latency: a seed-42 ``default`` workload is placed with FGD up to ``--warm`` pods (a realistic,
partly full cluster), then each policy's ``select`` (feasibility mask included) is timed on the next
``--decisions`` pods, placing each pod after timing it. Median and p90 in ms.

Usage::

    python -m benchmarks.placement.fgd_speed                 # decisions only
    python -m benchmarks.placement.fgd_speed --full-eval     # + 6 policies x 10 seeds (2 processes)
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np

from benchmarks.provenance import RESULTS, load_now, provenance
from fleetmind import argtypes
from fleetmind.cli.runner import run_main
from fleetmind.data.openb import load_openb_nodes, load_openb_trace
from fleetmind.envs.core import ClusterState, pods_from_trace
from fleetmind.envs.fgd_mode import build_workload, evaluate_fgd
from fleetmind.envs.policies import PUBLISHED_POLICIES, make_policy
from fleetmind.progress import show_bar

OUT = RESULTS / "placement" / "fgd.json"


def decision_latency(warm: int, decisions: int, policies: list[str]) -> dict:
    trace, nodes = load_openb_trace("default"), load_openb_nodes()
    out = {}
    warm_state = ClusterState.from_openb(nodes)
    wl = build_workload(trace, len(nodes), warm_state.gpu_capacity_milli, seed=42)
    warm_state.set_priority(wl.priority)
    warmer = make_policy("FGD")
    warmer.reset(warm_state, trace=trace)
    pods = pods_from_trace(wl.trace)
    for pod in pods[:warm]:
        node, gpus = warmer.select(warm_state, pod)
        if node >= 0:
            warm_state.place(pod, node, gpus)
    for name in policies:
        state = warm_state.copy()
        pol = make_policy(name)
        pol.reset(state, rng=np.random.default_rng(0), trace=trace)
        times = []
        for pod in pods[warm : warm + decisions]:
            t0 = time.perf_counter()
            node, gpus = pol.select(state, pod, state.feasible(pod))
            times.append(time.perf_counter() - t0)
            if node >= 0:
                state.place(pod, node, gpus)
        ms = np.array(times) * 1000
        out[name] = {
            "median_ms": round(float(np.median(ms)), 4),
            "p90_ms": round(float(np.percentile(ms, 90)), 4),
            "mean_ms": round(float(ms.mean()), 4),
            "decisions": len(ms),
        }
        print(name, out[name], flush=True)
    return {"nodes": len(nodes), "gpus": nodes.total_gpus, "warm_pods": warm, "policies": out}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--warm", type=argtypes.nonnegative_int, default=5000)
    ap.add_argument("--decisions", type=argtypes.positive_int, default=1000)
    ap.add_argument("--full-eval", action="store_true")
    ap.add_argument("--workers", type=argtypes.positive_int, default=2)
    ap.add_argument(
        "--eval-seeds",
        type=argtypes.positive_int,
        default=10,
        help="seeds of the full evaluation (42, 43, ...)",
    )
    ap.add_argument("--out", type=argtypes.output_path, default=OUT)
    args = ap.parse_args()
    load0 = load_now()
    payload: dict = {}
    if args.out.exists():
        old = json.loads(args.out.read_text())
        payload["full_eval_default"] = old.get("full_eval_default")
    payload["decision_latency"] = decision_latency(
        args.warm, args.decisions, [*PUBLISHED_POLICIES, "TopologyBestEffort"]
    )
    if args.full_eval:
        seeds = list(range(42, 42 + args.eval_seeds))
        t0 = time.perf_counter()
        res = evaluate_fgd(
            "default",
            list(PUBLISHED_POLICIES),
            seeds,
            workers=args.workers,
            progress=show_bar(),
        )
        wall = time.perf_counter() - t0
        cpu = sum(m["cpu_seconds_total"] for m in res["policies"].values())
        payload["full_eval_default"] = {
            "policies": len(PUBLISHED_POLICIES),
            "seeds": len(seeds),
            "workers": args.workers,
            "wall_seconds": round(wall, 1),
            "cpu_seconds_all_runs": round(cpu, 1),
            "projected_wall_seconds_10_seeds_idle": round(cpu / len(seeds) * 10 / args.workers, 1),
            "unallocated_gpu_pct_at_100": {
                p: m["unallocated_gpu_pct_at_100"] for p, m in res["policies"].items()
            },
            "run_seconds_per_policy": {p: m["seconds_total"] for p, m in res["policies"].items()},
            "cpu_seconds_per_policy": {
                p: m["cpu_seconds_total"] for p, m in res["policies"].items()
            },
        }
        print("full eval", payload["full_eval_default"], flush=True)
    payload = {**provenance(__spec__.name, load_start=load0), **payload}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(payload, indent=2) + "\n")


if __name__ == "__main__":
    raise SystemExit(run_main(main, prog="benchmarks.placement.fgd_speed"))
