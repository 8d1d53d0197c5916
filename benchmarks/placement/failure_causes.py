"""Where the unallocated GPUs go in fgd mode: failed GPU request by cause and pod kind.

For every trace x policy x seed, runs fgd mode as ``fleetmind sched evaluate`` does and sorts the
GPU request of the pods that failed before 100 % arrived by what stopped them
(``fleetmind.envs.failure_causes``: host CPU/memory used up beside GPUs with room, GPU room split over
GPUs and nodes, or no GPU room left). With ``--relax-host`` every run is repeated on the same trace
with all CPU and memory requests dropped, so only the GPUs constrain placement.

    python -m benchmarks.placement.failure_causes --traces default cpu050 gpushare20 \\
        gpushare60 multigpu30 gpuspec20 --seeds 42-46 --policies ppo FGD BestFit --relax-host \\
        --workers 2

Writes ``benchmarks/results/placement/placement_failure_causes.json`` (means over seeds and every run), with
the command, machine and package versions. ``ppo`` is the released model (or ``--model``). Every
trace also gets ``fleetmind.envs.packing_bound``'s lower bound on the GPU request any policy leaves unplaced;
``--policies`` with no name computes only that, for all 21 traces in under a minute.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np

from benchmarks.provenance import REPO_ROOT, RESULTS, load_now, provenance
from fleetmind import argtypes
from fleetmind.cli.runner import run_main
from fleetmind.cli.sched import parse_seeds
from fleetmind.data.openb import load_openb_trace
from fleetmind.envs.failure_causes import (
    FAILURE_CAUSES,
    FailureBreakdown,
    relax_host,
    run_with_causes,
    summarise_breakdowns,
)
from fleetmind.envs.packing_bound import fgd_run_bound

OUT = RESULTS / "placement" / "placement_failure_causes.json"
PACKAGES = ("onnxruntime", "stable-baselines3", "sb3-contrib")

_PPO: dict[str, object] = {}


def _job(job: tuple[str, str, int, str | None, bool]) -> dict:
    trace_name, policy, seed, model, relaxed = job
    trace = load_openb_trace(trace_name)
    if relaxed:
        trace = relax_host(trace)
    pol: object = policy
    if policy == "ppo":
        from fleetmind.rl.policy_adapter import load_ppo_policy

        pol = _PPO.get(str(model))
        if pol is None:
            pol = _PPO[str(model)] = load_ppo_policy(model)
    _, b = run_with_causes(trace, pol, seed)
    out = b.to_json()
    out.update(trace=trace_name, policy=policy, relaxed=relaxed)
    return out


def summarise(rows: list[dict]) -> dict:
    """Means over seeds of the metric, the failed request and its split (all in % of capacity)."""
    fields = {f.name for f in dataclasses.fields(FailureBreakdown)}
    return summarise_breakdowns([FailureBreakdown(**{k: r[k] for k in fields}) for r in rows])


def model_label(model: str | None) -> str:
    """``folder (run name)`` of the PPO model, from its ``metadata.json`` when it has one."""
    folder = Path(model) if model else REPO_ROOT / "models" / "placement"
    try:
        version = json.loads((folder / "metadata.json").read_text()).get("version")
    except (OSError, ValueError):
        version = None
    shown = folder.relative_to(REPO_ROOT) if folder.is_relative_to(REPO_ROOT) else folder
    return f"{shown} ({version})" if version else str(shown)


def positive_int(text: str) -> int:
    v = int(text)
    if v < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {v}")
    return v


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--traces", nargs="+", required=True)
    ap.add_argument("--seeds", nargs="+", default=["42-46"])
    ap.add_argument(
        "--policies",
        nargs="*",
        default=["ppo", "FGD", "BestFit"],
        help="policies to run (none: compute only the lower bound, in seconds)",
    )
    ap.add_argument("--model", default=None, help="PPO model folder (default: models/placement)")
    ap.add_argument(
        "--relax-host", action="store_true", help="also run every job with no CPU/memory requests"
    )
    ap.add_argument("--workers", type=positive_int, default=2)
    ap.add_argument("--out", type=argtypes.output_file, default=str(OUT))
    a = ap.parse_args(argv)
    seeds = parse_seeds(a.seeds)
    for t in a.traces:  # fail fast, before any worker starts, on a trace name that does not load
        load_openb_trace(t)  # a DataError: one line, status 2 (run_main)
    variants = (False, True) if a.relax_host else (False,)
    jobs = [
        (t, p, s, a.model, r) for r in variants for t in a.traces for p in a.policies for s in seeds
    ]
    load0 = load_now()
    t0 = time.perf_counter()
    rows: list[dict] = []
    with ProcessPoolExecutor(max_workers=a.workers) as pool:
        for i, row in enumerate(pool.map(_job, jobs)):
            rows.append(row)
            c = row["by_cause"]
            print(
                f"[{i + 1}/{len(jobs)}] {row['trace']}{' (no host limits)' if row['relaxed'] else ''}"
                f" {row['policy']} seed {row['seed']}: unallocated {row['unallocated']:.2f}, "
                + ", ".join(f"{k} {c[k]:.2f}" for k in FAILURE_CAUSES),
                flush=True,
            )
    # the relaxed-packing bounds depend on the pods only (the same with and without host limits)
    bounds, loose = {}, {}
    for t in a.traces:
        trace = load_openb_trace(t)
        for sd in seeds:
            bounds[(t, sd)] = round(fgd_run_bound(trace, sd).min_failed_pct, 4)
            loose[(t, sd)] = round(fgd_run_bound(trace, sd, gpu_models=False).min_failed_pct, 4)
    wall = time.perf_counter() - t0
    summary: dict[str, dict] = {}
    for r in variants:
        key = "no_host_limits" if r else "as_traced"
        summary[key] = {
            t: {
                p: summarise(
                    [x for x in rows if x["trace"] == t and x["policy"] == p and x["relaxed"] == r]
                )
                for p in a.policies
            }
            for t in a.traces
        }
    lower_bound = {}
    for t in a.traces:
        lb = round(float(np.mean([bounds[(t, sd)] for sd in seeds])), 3)
        entry: dict[str, object] = {
            "min_failed_pct": lb,
            "per_seed": {str(sd): bounds[(t, sd)] for sd in seeds},
            "min_failed_pct_any_model": round(float(np.mean([loose[(t, sd)] for sd in seeds])), 3),
        }
        fgd = summary["as_traced"][t].get("FGD")
        if fgd is not None:
            f = fgd["unallocated_gpu_pct_at_100"]
            entry["best_possible_vs_fgd_pct"] = round(100.0 * (lb - f) / f, 1)
            f_free = summary.get("no_host_limits", {}).get(t, {}).get("FGD")
            for p, s in summary["as_traced"][t].items():
                if p == "FGD":
                    continue
                gain = f - s["unallocated_gpu_pct_at_100"]
                if f > lb:
                    s["share_of_fgd_excess_over_bound_removed"] = round(gain / (f - lb), 3)
                if f_free is not None and f > f_free["unallocated_gpu_pct_at_100"]:
                    host_loss = f - f_free["unallocated_gpu_pct_at_100"]
                    s["share_of_fgd_host_loss_removed"] = round(gain / host_loss, 3)
        lower_bound[t] = entry
    out = {
        **provenance(__spec__.name, argv, load_start=load0, packages=PACKAGES),
        "model": model_label(a.model),
        "seeds": seeds,
        "level_pct": 100,
        "units": "every figure is GPU milli in % of the cluster's GPU capacity",
        "wall_time_s": round(wall, 1),
        "lower_bound": lower_bound,
        "lower_bound_note": "fleetmind.envs.packing_bound: configuration-LP bound of the relaxed problem"
        " (every GPU a bin of 1000 milli kept to the GPU models a pod's gpu_spec allows; no nodes,"
        " CPU, memory or arrival order); no policy can leave less GPU request unplaced by 100 %"
        " arrived. min_failed_pct_any_model also lets every pod use any GPU model",
        "summary": summary,
        "runs": rows,
    }
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(json.dumps(out, indent=1) + "\n")
    for key, per_trace in summary.items():
        print(f"\n{key}: mean over seeds, % of GPU capacity")
        for t, pols in per_trace.items():
            print(f"  {t:12s} lower bound {lower_bound[t]['min_failed_pct']:.2f}")
            for p, s in pols.items():
                c = s["by_cause"]
                print(
                    f"  {t:12s} {p:8s} unallocated {s['unallocated_gpu_pct_at_100']:.2f}  "
                    + "  ".join(f"{k} {c[k]:.2f}" for k in FAILURE_CAUSES)
                )


if __name__ == "__main__":
    raise SystemExit(run_main(main, prog="benchmarks.placement.failure_causes"))
