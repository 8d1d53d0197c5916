"""A dynamic-mode model with a learned queue order on unseen traces: against its clone and the heuristics.

Per trace and seed, one job stream (the model's own setting, ``fleetmind.rl.dynamic_eval``) that
every policy runs on: the model with its queue order (``metadata.json`` ``env_kwargs.queue_order``,
``fleetmind sched train --algo order``), its clone and every heuristic with the simulator's FIFO
queue (as the target is defined), and with ``--ordered NAME ...`` those heuristics again with the
model's order (the comparison at equal freedom: the same order, heuristic placements).

Reported per trace: mean slowdown and mean p99 queueing delay per policy, the best FIFO heuristic,
the model's gap to it and to its clone (``a / b - 1`` of the means), and whether the target holds
(>= 10 % below the best heuristic, p99 no worse); overall the paired gap to the clone over every
(trace, seed) run with a 95 % t-interval, and the traces where the target holds::

    python -m benchmarks.dynamic.order_eval --model DIR --seeds 42-51 \\
        --json benchmarks/results/dynamic/order_unseen11.json
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from benchmarks.placement.ablation import ci95
from benchmarks.provenance import load_now, provenance
from fleetmind import argtypes
from fleetmind.cli.runner import run_main
from fleetmind.cli.sched import parse_seeds
from fleetmind.rl.dynamic_eval import (
    DEFAULT_HEURISTICS,
    actor_fn,
    best_heuristic,
    evaluate_streams,
    load_dynamic_actor,
    model_config,
)
from fleetmind.rl.scaleout import run_tasks

UNSEEN = (
    "cpu050", "gpushare20", "gpushare60", "multigpu30", "gpuspec20",
    "gpuspec10", "gpuspec33", "multigpu40", "gpushare100", "cpu200", "gpuspec05",
)  # fmt: skip
"""The 11 unseen traces of ``docs/ppo-dynamic.md`` (section 3)."""


def trace_result(job: tuple[str, list[int], str, tuple[str, ...], tuple[str, ...]]) -> dict:
    """One trace: ``(trace, seeds, model folder, heuristics, ordered heuristics)`` -> per-policy
    per-seed mean slowdown and p99 queueing delay (a job of :func:`run_tasks`)."""
    trace, seeds, model_ref, heuristics, ordered = job
    model = Path(model_ref)
    cfg = model_config(model)
    clone = actor_fn(load_dynamic_actor(model / "clone.onnx", cfg.n_candidates))
    agent = actor_fn(load_dynamic_actor(model / "policy.onnx", cfg.n_candidates))
    actors = {"clone": clone, "model": agent}
    res = evaluate_streams(trace, seeds, actors, heuristics, cfg, ordered={"model"})
    if ordered:
        ord_res = evaluate_streams(trace, seeds, {}, ordered, cfg)
        res.update({f"{k} + order": v for k, v in ord_res.items()})
    out = {
        p: {k: r["per_seed"][k] for k in ("mean_slowdown", "p99_queue_delay_s", "ms_per_decision")}
        for p, r in res.items()
    }
    print(json.dumps({"trace": trace, "done": sorted(out)}), flush=True)
    return out


def _mean(v: list[float]) -> float:
    return float(np.mean(v))


def summarise(trace: str, per: dict[str, dict[str, list[float]]], heuristics: list[str]) -> dict:
    """The trace's row (module docstring)."""
    means = {p: {k: _mean(v) for k, v in r.items()} for p, r in per.items()}
    best = best_heuristic(
        {h: {"mean_slowdown": means[h]["mean_slowdown"]} for h in heuristics}, heuristics
    )
    m, c, b = means["model"], means["clone"], means[best]
    gap_best = 100 * (m["mean_slowdown"] / b["mean_slowdown"] - 1)
    p99_best = 100 * (m["p99_queue_delay_s"] / b["p99_queue_delay_s"] - 1)
    ratios = np.array(per["model"]["mean_slowdown"]) / np.array(per["clone"]["mean_slowdown"])
    return {
        "trace": trace,
        "means": means,
        "best_heuristic": best,
        "model_vs_best_pct": gap_best,
        "model_vs_best_p99_pct": p99_best,
        "model_vs_clone_pct": 100 * (m["mean_slowdown"] / c["mean_slowdown"] - 1),
        "model_vs_clone_paired_pct": float(100 * (ratios.mean() - 1)),
        "model_vs_clone_p99_pct": 100 * (m["p99_queue_delay_s"] / c["p99_queue_delay_s"] - 1),
        "target_met": bool(gap_best <= -10.0 and p99_best <= 0.0),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", required=True, help="dynamic-mode model folder (queue order)")
    ap.add_argument("--traces", nargs="+", default=list(UNSEEN))
    ap.add_argument("--seeds", nargs="+", default=["42-51"])
    ap.add_argument("--heuristics", nargs="+", default=list(DEFAULT_HEURISTICS))
    ap.add_argument("--ordered", nargs="*", default=[], help="heuristics also run with the order")
    ap.add_argument(
        "--workers", type=argtypes.positive_int, default=1, help="traces run in this many processes"
    )
    ap.add_argument("--json", type=argtypes.output_file, required=True)
    a = ap.parse_args(argv)
    load0 = load_now()
    seeds = parse_seeds(a.seeds)
    cfg = model_config(a.model)
    jobs = [(t, seeds, str(a.model), tuple(a.heuristics), tuple(a.ordered)) for t in a.traces]
    per_trace = dict(zip(a.traces, run_tasks(trace_result, jobs, workers=a.workers), strict=True))
    rows = [summarise(t, per_trace[t], list(a.heuristics)) for t in a.traces]
    paired = [
        100 * (m / c - 1)
        for t in a.traces
        for m, c in zip(
            per_trace[t]["model"]["mean_slowdown"],
            per_trace[t]["clone"]["mean_slowdown"],
            strict=True,
        )
    ]
    p99 = {
        p: _mean([_mean(per_trace[t][p]["p99_queue_delay_s"]) for t in a.traces])
        for p in ("model", "clone")
    }
    out = {
        **provenance(__spec__.name, argv, load_start=load0, packages=("onnxruntime",)),
        "model": str(a.model),
        "setting": cfg.__dict__,
        "seeds": seeds,
        "heuristics": list(a.heuristics),
        "ordered_heuristics": list(a.ordered),
        "target": "mean slowdown >= 10 % below the best FIFO heuristic's, p99 queueing delay no worse",
        "overall": {
            "model_vs_clone_paired_pct": float(np.mean(paired)),
            "ci95_pct": ci95(paired),
            "n_runs": len(paired),
            "mean_p99_queue_delay_s": p99,
            "traces_target_met": sum(r["target_met"] for r in rows),
            "n_traces": len(rows),
            "mean_model_vs_best_pct": _mean([r["model_vs_best_pct"] for r in rows]),
        },
        "traces": rows,
        "runs": per_trace,
    }
    Path(a.json).parent.mkdir(parents=True, exist_ok=True)
    Path(a.json).write_text(json.dumps(out, indent=1) + "\n")
    print(json.dumps(out["overall"], indent=1))
    for r in rows:
        print(
            f"{r['trace']:<12} vs best ({r['best_heuristic']}) {r['model_vs_best_pct']:+6.1f} %"
            f"  p99 {r['model_vs_best_p99_pct']:+6.1f} %  vs clone {r['model_vs_clone_pct']:+6.1f} %"
            f"  {'met' if r['target_met'] else ''}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(run_main(main, prog="benchmarks.dynamic.order_eval"))
