"""Headroom over the released clone, measured with the ``rollout`` policy (``rl.rollout``), per mode.

On fresh variants made by ``fleetmind sched variants`` (``data.openb_variants.generate_variant``),
never the frozen evaluation set (``benchmarks/placement/frozen_set.yaml``: the script refuses its
generator seeds and its evaluation seeds, and the pre-set held-out seeds 42-51), it runs for each
(variant, workload seed):

* the clone alone (fgd mode: ``models/placement/clone.onnx``; dynamic mode:
  ``models/placement-dynamic/clone.onnx`` in the model's own setting);
* the rollout policy with the future known (exact values: the ceiling of one-step changes);
* the rollout policy with sampled futures (what a deployment could run), on the first seed;
* optionally (``--depth2``) a two-step look-ahead on the first variant and seed.

and records the metric (fgd: unallocated GPU % at 100 % arrived; dynamic: mean slowdown and p99
queueing delay), the relative gain over the clone, and where the decisions that changed lay (fgd:
arrived % of GPU capacity; dynamic: decision index), binned. The 2026-12-01 note
(``docs/research/2026-12-01-placement-headroom.md``) was made with

    nice -n 10 python -m benchmarks.placement.headroom --mode fgd --seeds 5101 \\
        --every-known 32 --every-sampled 96 --depth2 --every-depth2 192 \\
        --json benchmarks/results/placement/placement_headroom_fgd.json
    nice -n 10 python -m benchmarks.placement.headroom --mode dynamic --depth2 \\
        --json benchmarks/results/dynamic/placement_headroom_dynamic.json
    nice -n 10 python -m benchmarks.placement.headroom --mode fgd --variants multigpu:30:20261242 \\
        --seeds 5101 --fgd-band 20 50 --every-known 32 --no-sampled \\
        --json benchmarks/results/placement/placement_headroom_fgd_early.json

(the two side by side on the shared 2-core machine; fgd mode with one workload seed and sparser
look-aheads than the defaults, to fit the CPU budget).
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.placement.frozen_set import load_manifest
from benchmarks.provenance import REPO_ROOT, load_now, provenance
from fleetmind import argtypes
from fleetmind.cli.runner import run_main
from fleetmind.cli.sched import parse_seeds
from fleetmind.data.openb import load_openb_nodes, load_openb_trace
from fleetmind.data.openb_variants import generate_variant, write_variant
from fleetmind.envs.fgd_mode import run_fgd
from fleetmind.envs.multicluster_env import MultiClusterPlacementEnv
from fleetmind.errors import ConfigError
from fleetmind.rl.dynamic_eval import (
    EnvActorPolicy,
    actor_fn,
    job_stream,
    load_dynamic_actor,
    model_config,
    run_policy,
)
from fleetmind.rl.named_policies import clone_file
from fleetmind.rl.policy_adapter import load_ppo_policy
from fleetmind.rl.rollout import RolloutConfig, RolloutLog, run_rollout_dynamic, run_rollout_fgd

VARIANTS = ["multigpu:30:20261242", "gpuspec:20:20261243"]
"""Default fresh variants, ``KIND:LEVEL:GENERATOR_SEED`` (seeds unused elsewhere)."""
HELDOUT_SEEDS = set(range(42, 52))
FGD_BIN = 5.0  # % of GPU capacity
DYN_BIN = 64  # decisions


def variant_path(spec: str, out_dir: Path) -> tuple[str, Path]:
    """Generate the variant ``KIND:LEVEL:SEED`` into ``out_dir``; its name and CSV path."""
    kind, level, seed = spec.split(":")
    name = f"fresh-{kind}{float(level):g}-s{seed}"
    path = out_dir / f"{name}.csv"
    write_variant(path, generate_variant(kind, float(level), int(seed)))
    return name, path


def check_fresh(specs: list[str], seeds: list[int]) -> None:
    """Refuse the frozen set's generator and evaluation seeds and the held-out seeds."""
    man = load_manifest()
    frozen_gen = {int(t["seed"]) for t in man["traces"]}
    frozen_eval = set(man["eval_seeds"]) | HELDOUT_SEEDS
    for spec in specs:
        if int(spec.split(":")[2]) in frozen_gen:
            raise ConfigError(f"{spec}: generator seed of the frozen evaluation set")
    bad = sorted(set(seeds) & frozen_eval)
    if bad:
        raise ConfigError(f"workload seeds {bad} belong to the frozen or held-out evaluation")


def binned(log: RolloutLog, key: str, width: float) -> dict[str, dict[str, float]]:
    """Look-aheads, changed decisions and summed gain per bin of ``key`` ('where' or 'index')."""
    vals = np.asarray(getattr(log, key), dtype=float)
    out: dict[str, dict[str, float]] = {}
    for b in sorted(set((vals // width).astype(int).tolist())):
        sel = (vals // width).astype(int) == b
        gains = np.asarray(log.gain)[sel]
        ch = np.asarray(log.changed)[sel]
        out[f"{b * width:g}-{(b + 1) * width:g}"] = {
            "lookaheads": int(sel.sum()),
            "changed": int(ch.sum()),
            "gain_changed": round(float(gains[ch].sum()), 6),
        }
    return out


def rel(clone: float, other: float) -> float:
    """Relative change in % (negative = lower = better)."""
    return round(100.0 * (other - clone) / clone, 3) if clone else float("nan")


_CONFIG_FLAGS = {
    "fgd": ("fgd_band", "every_known", "every_sampled", "depth2_fgd_band", "every_depth2"),
    "dynamic": (
        "dyn_band",
        "every_known_dyn",
        "every_sampled_dyn",
        "depth2_dyn_band",
        "every_depth2_dyn",
    ),
}
"""Per mode, the flags behind its band, strides and depth-2 band (in :func:`_configs`' order)."""


def _configs(args: argparse.Namespace, mode: str) -> dict[str, RolloutConfig]:
    """The three rollout settings a mode is measured with (known, sampled, known at depth 2)."""
    band, every_known, every_sampled, depth2_band, every_depth2 = (
        getattr(args, f) for f in _CONFIG_FLAGS[mode]
    )
    return {
        "known": RolloutConfig(k=args.k, band=tuple(band), every=every_known),
        "sampled": RolloutConfig(
            k=args.k, band=tuple(band), every=every_sampled, future="sampled", samples=args.samples
        ),
        "known_depth2": RolloutConfig(
            k=args.k, band=tuple(depth2_band), every=every_depth2, depth=2
        ),
    }


def run_fgd_mode(
    args: argparse.Namespace, variants: list[tuple[str, Path]]
) -> tuple[list[dict], dict[str, dict]]:
    nodes = load_openb_nodes()
    clone = load_ppo_policy(clone_file(REPO_ROOT / "models" / "placement"))
    cfgs = _configs(args, "fgd")
    rows = []
    for vi, (name, path) in enumerate(variants):
        trace = load_openb_trace(path)
        for si, seed in enumerate(args.seeds):
            t0 = time.process_time()
            base = run_fgd(trace, clone, seed, nodes).unallocated[100]
            row: dict[str, Any] = {"trace": name, "seed": seed, "clone": base, "runs": {}}
            todo = ["known"] + (["sampled"] if si == 0 and not args.no_sampled else [])
            todo += ["known_depth2"] if args.depth2 and vi == 0 and si == 0 else []
            for label in todo:
                c0 = time.process_time()
                res, log = run_rollout_fgd(trace, clone, seed, nodes, cfgs[label])
                v = res.unallocated[100]
                row["runs"][label] = {
                    "unallocated_gpu_pct_at_100": v,
                    "gain_points": round(base - v, 4),
                    "relative_pct": rel(base, v),
                    "cpu_s": round(time.process_time() - c0, 1),
                    **log.summary(),
                    "by_fill": binned(log, "where", FGD_BIN),
                }
                print(f"fgd {name} seed {seed} {label}: clone {base} -> {v}", flush=True)
            row["cpu_s"] = round(time.process_time() - t0, 1)
            rows.append(row)
    return rows, {k: {**asdict(c)} for k, c in cfgs.items()}


def run_dynamic_mode(
    args: argparse.Namespace, variants: list[tuple[str, Path]]
) -> tuple[list[dict], dict[str, dict]]:
    ref = REPO_ROOT / "models" / "placement-dynamic"
    mcfg = model_config(ref)
    model = load_dynamic_actor(clone_file(ref), n_candidates=mcfg.n_candidates)
    cfgs = _configs(args, "dynamic")
    rows = []
    for vi, (name, path) in enumerate(variants):
        trace = load_openb_trace(path)

        def make_env(trace: Any = trace) -> MultiClusterPlacementEnv:
            return MultiClusterPlacementEnv(**mcfg.env_kwargs(trace))

        env = make_env()
        for si, seed in enumerate(args.seeds):
            t0 = time.process_time()
            jobs, prio = job_stream(env, seed)
            base = run_policy(env, jobs, prio, EnvActorPolicy(actor_fn(model), env, "clone"))
            row: dict[str, Any] = {
                "trace": name,
                "seed": seed,
                "clone": {k: base[k] for k in ("mean_slowdown", "p99_queue_delay_s")},
                "runs": {},
            }
            todo = ["known"] + (["sampled"] if si == 0 and not args.no_sampled else [])
            todo += ["known_depth2"] if args.depth2 and vi == 0 and si == 0 else []
            for label in todo:
                c0 = time.process_time()
                res, log = run_rollout_dynamic(make_env, jobs, prio, model, seed, cfgs[label])
                row["runs"][label] = {
                    "mean_slowdown": res["mean_slowdown"],
                    "p99_queue_delay_s": res["p99_queue_delay_s"],
                    "relative_pct": rel(base["mean_slowdown"], res["mean_slowdown"]),
                    "p99_queue_delay_relative_pct": rel(
                        base["p99_queue_delay_s"], res["p99_queue_delay_s"]
                    ),
                    "cpu_s": round(time.process_time() - c0, 1),
                    **log.summary(),
                    "by_decision": binned(log, "index", DYN_BIN),
                }
                print(
                    f"dynamic {name} seed {seed} {label}: clone {base['mean_slowdown']:.4f} -> "
                    f"{res['mean_slowdown']:.4f}",
                    flush=True,
                )
            row["cpu_s"] = round(time.process_time() - t0, 1)
            rows.append(row)
    return rows, {k: {**asdict(c)} for k, c in cfgs.items()}


def summarise(rows: list[dict]) -> dict[str, Any]:
    """Mean relative change (%) per run label over the rows that have it."""
    out: dict[str, Any] = {}
    labels = sorted({k for r in rows for k in r["runs"]})
    for label in labels:
        vals = [r["runs"][label]["relative_pct"] for r in rows if label in r["runs"]]
        out[label] = {"mean_relative_pct": round(float(np.mean(vals)), 3), "n": len(vals)}
        p99 = [
            r["runs"][label]["p99_queue_delay_relative_pct"]
            for r in rows
            if label in r["runs"] and "p99_queue_delay_relative_pct" in r["runs"][label]
        ]
        if p99:
            out[label]["mean_p99_queue_delay_relative_pct"] = round(float(np.mean(p99)), 3)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mode", choices=["fgd", "dynamic"], required=True)
    ap.add_argument("--variants", nargs="+", default=VARIANTS, help="KIND:LEVEL:SEED ...")
    ap.add_argument("--seeds", nargs="+", default=["5101-5102"], help="workload seeds")
    ap.add_argument("--k", type=argtypes.positive_int, default=3)
    ap.add_argument("--samples", type=argtypes.positive_int, default=2)
    ap.add_argument("--fgd-band", nargs=2, type=float, default=[50.0, 95.0])
    ap.add_argument("--every-known", type=argtypes.positive_int, default=24)
    ap.add_argument("--every-sampled", type=argtypes.positive_int, default=64)
    ap.add_argument("--dyn-band", nargs=2, type=float, default=[0.0, 512.0])
    ap.add_argument("--every-known-dyn", type=argtypes.positive_int, default=8)
    ap.add_argument("--every-sampled-dyn", type=argtypes.positive_int, default=16)
    ap.add_argument("--depth2", action="store_true", help="also a depth-2 run (first row)")
    ap.add_argument("--no-sampled", action="store_true", help="skip the sampled-future runs")
    ap.add_argument("--depth2-fgd-band", nargs=2, type=float, default=[60.0, 80.0])
    ap.add_argument("--every-depth2", type=argtypes.positive_int, default=96)
    ap.add_argument("--depth2-dyn-band", nargs=2, type=float, default=[0.0, 128.0])
    ap.add_argument("--every-depth2-dyn", type=argtypes.positive_int, default=16)
    ap.add_argument("--out-dir", default="runs/headroom", help="where the variants are written")
    ap.add_argument("--json", type=argtypes.output_file, required=True)
    args = ap.parse_args(argv)
    args.seeds = parse_seeds(args.seeds)
    check_fresh(args.variants, args.seeds)
    load0 = load_now()
    out_dir = Path(args.out_dir)
    variants = [variant_path(v, out_dir) for v in args.variants]
    c0 = time.process_time()
    run = run_fgd_mode if args.mode == "fgd" else run_dynamic_mode
    rows, cfgs = run(args, variants)
    out = {
        **provenance(__spec__.name, argv, load_start=load0),
        "mode": args.mode,
        "variants": {n: str(p) for n, p in variants},
        "variant_specs": args.variants,
        "seeds": args.seeds,
        "configs": cfgs,
        "rows": rows,
        "summary": summarise(rows),
        "cpu_s_total": round(time.process_time() - c0, 1),
    }
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps(out, indent=1) + "\n")
    print(json.dumps(out["summary"]))
    return 0


if __name__ == "__main__":
    raise SystemExit(run_main(main, prog="benchmarks.placement.headroom"))
