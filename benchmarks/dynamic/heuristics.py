"""Dynamic-mode figures and speed: every policy on openb ``default`` (3 clusters), several seeds.

Runs :func:`fleetmind.envs.dynamic.evaluate.evaluate_dynamic` and writes ``benchmarks/results/dynamic/dynamic.json`` with
the per-policy metrics (means and per-seed values), the setup (fleet, jobs, offered load), the wall
time of each run, the machine and package versions, and the command.

Usage::

    python -m benchmarks.dynamic.heuristics                       # defaults below
    python -m benchmarks.dynamic.heuristics --target-util 0.6 --seeds 42 43 44 \\
        --out benchmarks/results/dynamic/dynamic_u60.json
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np

from benchmarks.provenance import RESULTS, load_now, provenance
from fleetmind import argtypes
from fleetmind.cli.runner import run_main
from fleetmind.cli.sched import json_safe
from fleetmind.data.openb import load_openb_trace
from fleetmind.envs.dynamic.evaluate import dynamic_setup, evaluate_dynamic
from fleetmind.envs.dynamic.fleet import load_dynamic_fleet
from fleetmind.envs.dynamic.jobs import build_jobs
from fleetmind.envs.dynamic.model import (
    DEFAULT_BACKFILL_DEPTH,
    DEFAULT_NODE_FRACTION,
    DEFAULT_SPEED_BASIS,
    DEFAULT_TARGET_UTIL,
    MAX_WORK_S,
)

OUT = RESULTS / "dynamic" / "dynamic.json"


def env_speed(steps: int) -> dict:
    """Steps per second of the default env with uniformly random valid actions (resets included)."""
    from fleetmind.envs.multicluster_env import MultiClusterPlacementEnv

    t0 = time.perf_counter()
    env = MultiClusterPlacementEnv()
    make_s = time.perf_counter() - t0
    rng = np.random.default_rng(0)
    env.reset(seed=0)
    t0 = time.perf_counter()
    for _ in range(steps):
        a = int(rng.choice(np.flatnonzero(env.action_masks())))
        _, _, term, trunc, _ = env.step(a)
        if term or trunc:
            env.reset()
    dt = time.perf_counter() - t0
    return {"steps": steps, "steps_per_s": round(steps / dt, 1), "make_s": round(make_s, 2)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trace", default="default")
    ap.add_argument("--policies", nargs="*", default=None)
    ap.add_argument("--seeds", nargs="*", type=argtypes.seed, default=[42, 43, 44])
    ap.add_argument("--target-util", type=float, default=DEFAULT_TARGET_UTIL)
    ap.add_argument("--node-fraction", type=float, default=DEFAULT_NODE_FRACTION)
    ap.add_argument("--clusters", type=argtypes.positive_int, default=3)
    ap.add_argument("--n-jobs", type=argtypes.positive_int, default=None)
    ap.add_argument(
        "--backfill-depth", type=argtypes.nonnegative_int, default=DEFAULT_BACKFILL_DEPTH
    )
    ap.add_argument("--speed-basis", default=DEFAULT_SPEED_BASIS)
    ap.add_argument("--out", type=argtypes.output_path, default=OUT)
    ap.add_argument(
        "--env-steps",
        type=argtypes.nonnegative_int,
        default=0,
        help="also time this many steps of fleetmind/MultiClusterPlacement-v0 (default env)",
    )
    args = ap.parse_args()
    load0 = load_now()

    trace = load_openb_trace(args.trace)
    fleet = load_dynamic_fleet("openb", args.clusters, args.speed_basis)
    if args.node_fraction < 1:
        fleet = fleet.sample(args.node_fraction)
    jobs = build_jobs(
        trace,
        fleet,
        np.random.default_rng(args.seeds[0]),
        target_util=args.target_util,
        n_jobs=args.n_jobs,
    )
    t0 = time.perf_counter()
    stamps: list[tuple[str, float]] = []

    def progress(msg: str) -> None:
        stamps.append((msg, time.perf_counter()))
        print(f"{time.perf_counter() - t0:7.1f}s  {msg}", flush=True)

    result = evaluate_dynamic(
        trace,
        args.policies,
        args.seeds,
        fleet=fleet,
        node_fraction=1.0,
        target_util=args.target_util,
        n_jobs=args.n_jobs,
        backfill_depth=args.backfill_depth,
        speed_basis=args.speed_basis,
        progress=progress,
    )
    total = time.perf_counter() - t0
    run_s = {}
    prev = t0
    for msg, t in stamps:
        run_s[msg] = round(t - prev, 3)
        prev = t
    payload = {
        **provenance(__spec__.name, load_start=load0, packages=("gymnasium",)),
        "trace": args.trace,
        "mode": "dynamic",
        "seeds": args.seeds,
        "setup": dynamic_setup(
            fleet,
            jobs,
            target_util=args.target_util,
            node_fraction=args.node_fraction,
            backfill_depth=args.backfill_depth,
            speed_basis=args.speed_basis,
            max_work_s=MAX_WORK_S,
        ),
        "policies": result,
        "env_speed": env_speed(args.env_steps) if args.env_steps else None,
        "wall_s_total": round(total, 2),
        "wall_s_per_run": run_s,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    # strict JSON: a value that is not defined (the offered load of a stream arriving at one
    # instant) is null, never a bare NaN or Infinity that JSON parsers refuse
    args.out.write_text(json.dumps(json_safe(payload), indent=2, allow_nan=False) + "\n")
    print(f"wrote {args.out}")
    keys = (
        "mean_jct_s",
        "p99_jct_s",
        "mean_slowdown",
        "p99_queue_delay_s",
        "gpu_allocation_ratio",
        "ms_per_decision",
    )
    print("policy".ljust(16) + "".join(k.ljust(22) for k in keys))
    for name, m in result.items():
        print(name.ljust(16) + "".join(f"{m[k]:<22.4g}" for k in keys))


if __name__ == "__main__":
    raise SystemExit(run_main(main, prog="benchmarks.dynamic.heuristics"))
