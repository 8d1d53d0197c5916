"""Dynamic-mode evaluation of the released PPO agent against every heuristic.

Protocol (``docs/ppo-dynamic.md``): per trace and seed, one job stream (``fleetmind.rl.dynamic_eval``:
10 % stratified node sample of the openb GPU fleet in 3 clusters, 2,048 jobs, offered load 0.8,
backfill 8) that every policy runs on. Writes ``benchmarks/results/dynamic/ppo_dynamic_eval.json``: machine,
load averages, package versions, the command, per trace and policy the mean and per-seed metrics,
the best heuristic (lowest mean slowdown) and PPO's relative gaps to it.

    python -m benchmarks.dynamic.ppo_eval --traces cpu050 gpushare20 gpushare60 \
        multigpu30 gpuspec20 --seeds 42-51

``--also NAME=MODEL_DIR`` (repeatable) runs more models on the same streams (the heuristics run
once); their rows are under ``models`` in the JSON, next to the main model's (``PPO``) top-level
rows. Every row also has the slowdown difference to LocalityAware on the same streams.

A model with a learned queue order (``metadata.json`` ``env_kwargs.queue_order``, ``fleetmind sched
train --algo order``) runs with its order; the heuristics run with the simulator's FIFO queue (as
published, and as the target is defined) unless ``--heuristics-order model`` gives them the
model's order too (the comparison at equal freedom).

``--ensemble DIR [DIR ...]`` makes the main model an ensemble of those model folders (2026-11-30,
an experiment, not a release format): per decision each member's masked candidate logits go
through a softmax over the candidates, the probabilities are averaged, and the most probable
candidate is placed (:class:`EnsembleActor`).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

from benchmarks.provenance import RESULTS, load_now, provenance
from fleetmind import argtypes
from fleetmind.cli.runner import run_main
from fleetmind.cli.sched import parse_seeds
from fleetmind.rl.dynamic_eval import (
    DEFAULT_HEURISTICS,
    DynEvalConfig,
    actor_fn,
    best_heuristic,
    evaluate_streams,
    load_dynamic_actor,
)

OUT = RESULTS / "dynamic" / "ppo_dynamic_eval.json"
PACKAGES = ("onnxruntime", "stable-baselines3", "sb3-contrib")


class EnsembleActor:
    """Several dynamic-mode actors (``policy.onnx``) voting by their mean candidate probability.

    Shapes: ``predict(obs (D,), mask (K,))`` -> the chosen candidate index; each member's masked
    logits ``(1, K)`` (the export's ``logits`` output) go through a softmax over the ``K``
    candidates (float64) before the mean.
    """

    def __init__(self, folders: list[Path], n_candidates: int | None) -> None:
        self.members = [load_dynamic_actor(f / "policy.onnx", n_candidates) for f in folders]

    def predict(self, obs: np.ndarray, mask: np.ndarray) -> int:
        o = np.atleast_2d(obs).astype(np.float32, copy=False)
        m = np.atleast_2d(mask).astype(bool, copy=False)
        total = np.zeros(m.shape[1])
        for a in self.members:
            logits = a.session.run(["logits"], {"obs": o, "mask": m})[0][0].astype(np.float64)
            e = np.exp(logits - logits.max())
            total += e / e.sum()
        return int(np.argmax(total))


def pct(a: float, b: float) -> float:
    """``100 (a - b) / b``: negative = a below b."""
    return 100.0 * (a - b) / b


def summary_row(trace: str, res: dict, name: str, best: str) -> dict:
    """Relative figures of actor ``name`` on one trace (``res``: ``evaluate_streams`` output)."""
    ppo, bh = res[name], res[best]
    row = {
        "trace": trace,
        "best_heuristic": best,
        "ppo_mean_slowdown": ppo["mean_slowdown"],
        "best_mean_slowdown": bh["mean_slowdown"],
        "slowdown_diff_pct": pct(ppo["mean_slowdown"], bh["mean_slowdown"]),
        "ppo_p99_queue_delay_s": ppo["p99_queue_delay_s"],
        "best_p99_queue_delay_s": bh["p99_queue_delay_s"],
        "p99_queue_diff_pct": pct(ppo["p99_queue_delay_s"], bh["p99_queue_delay_s"]),
        "fgd_mean_slowdown": res["FGD"]["mean_slowdown"],
        "slowdown_diff_vs_fgd_pct": pct(ppo["mean_slowdown"], res["FGD"]["mean_slowdown"]),
        "ppo_seeds_below_best": int(
            np.sum(
                np.array(ppo["per_seed"]["mean_slowdown"])
                < np.array(bh["per_seed"]["mean_slowdown"])
            )
        ),
    }
    if "LocalityAware" in res:
        row["locality_mean_slowdown"] = res["LocalityAware"]["mean_slowdown"]
        row["slowdown_diff_vs_locality_pct"] = pct(
            ppo["mean_slowdown"], res["LocalityAware"]["mean_slowdown"]
        )
    row["target_met"] = bool(row["slowdown_diff_pct"] <= -10.0 and row["p99_queue_diff_pct"] <= 0.0)
    return row


def aggregate(rows: list[dict]) -> dict:
    """Mean and median of the per-trace slowdown differences, traces where the target is met."""
    d = [r["slowdown_diff_pct"] for r in rows]
    return {
        "mean_slowdown_diff_pct": float(np.mean(d)),
        "median_slowdown_diff_pct": float(np.median(d)),
        "traces_target_met": int(sum(r["target_met"] for r in rows)),
        "traces_p99_worse": int(sum(r["p99_queue_diff_pct"] > 0 for r in rows)),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--traces", nargs="+", required=True)
    ap.add_argument("--seeds", nargs="+", default=["42-51"])
    ap.add_argument("--model", default=None, help="model folder (default models/placement-dynamic)")
    ap.add_argument("--teacher", default=None, help="also evaluate this teacher JSON")
    ap.add_argument(
        "--heuristics",
        nargs="+",
        default=list(DEFAULT_HEURISTICS),
        help="heuristics to run (default: all seven; the best heuristic is the best of these)",
    )
    ap.add_argument(
        "--also",
        action="append",
        default=[],
        metavar="NAME=MODEL_DIR",
        help="also evaluate this model on the same streams (repeatable)",
    )
    ap.add_argument(
        "--ensemble",
        nargs="+",
        default=None,
        metavar="MODEL_DIR",
        help="make the main model the ensemble of these model folders (mean candidate "
        "probability; --model is then ignored and the first folder gives the env setting)",
    )
    ap.add_argument(
        "--heuristics-order",
        choices=["fifo", "model"],
        default="fifo",
        help="queue order the heuristics run with: the simulator's FIFO (default) or the model's",
    )
    ap.add_argument("--out", type=argtypes.output_file, default=str(OUT))
    a = ap.parse_args()
    from fleetmind.data.paths import MODELS_DIR
    from fleetmind.rl.dynamic_teacher import DynLinearScorer

    seeds = parse_seeds(a.seeds)
    heuristics = tuple(a.heuristics)
    if "FGD" not in heuristics:
        ap.error("--heuristics must include FGD (the rows report the gap to FGD)")
    model_dir = Path(a.model) if a.model else MODELS_DIR / "placement-dynamic"
    if a.ensemble:
        model_dir = Path(a.ensemble[0])
    meta = json.loads((model_dir / "metadata.json").read_text())
    cfg = DynEvalConfig.from_metadata(meta["env_kwargs"])
    if a.ensemble:
        for f in a.ensemble[1:]:
            m2 = json.loads((Path(f) / "metadata.json").read_text())
            if DynEvalConfig.from_metadata(m2["env_kwargs"]) != cfg:
                ap.error(f"--ensemble {f}: its env setting differs from {a.ensemble[0]}'s")
        actor = EnsembleActor([Path(f) for f in a.ensemble], cfg.n_candidates)
    else:
        actor = load_dynamic_actor(model_dir / "policy.onnx", cfg.n_candidates)
    actors = {"PPO": actor_fn(actor)}
    if a.teacher:
        actors["teacher"] = DynLinearScorer.load(a.teacher)
    also: dict[str, str] = {}
    for item in a.also:
        name, sep, path = item.partition("=")
        if not sep or name in ("PPO", "teacher") or name in also:
            ap.error(f"--also {item!r}: expected a new NAME=MODEL_DIR")
        m2 = json.loads((Path(path) / "metadata.json").read_text())
        if DynEvalConfig.from_metadata(m2["env_kwargs"]) != cfg:
            ap.error(f"--also {name}: its env setting differs from the main model's")
        actors[name] = actor_fn(load_dynamic_actor(Path(path) / "policy.onnx", cfg.n_candidates))
        also[name] = path
    extra_rows: dict[str, list[dict]] = {n: [] for n in also}
    teacher_rows: list[dict] = []
    t0 = time.perf_counter()
    load_start = load_now()
    per_trace: dict[str, dict] = {}
    summary_rows = []
    for trace in a.traces:
        t1 = time.perf_counter()
        ordered = set(actors) if a.heuristics_order == "fifo" else None  # heuristics FIFO
        res = evaluate_streams(trace, seeds, actors, heuristics, cfg, ordered=ordered)
        best = best_heuristic(res, heuristics)
        row = summary_row(trace, res, "PPO", best)
        summary_rows.append(row)
        if a.teacher:
            teacher_rows.append(summary_row(trace, res, "teacher", best))
            print(json.dumps({"model": "teacher", **teacher_rows[-1]}), flush=True)
        for n in also:
            extra_rows[n].append(summary_row(trace, res, n, best))
            print(json.dumps({"model": n, **extra_rows[n][-1]}), flush=True)
        per_trace[trace] = {"policies": res, "summary": row, "wall_s": time.perf_counter() - t1}
        print(json.dumps(row), flush=True)
    out = {
        **provenance(__spec__.name, load_start=load_start, packages=PACKAGES),
        "model": str(model_dir),
        "ensemble": a.ensemble,
        "model_version": meta.get("version"),
        "train_traces": meta.get("train_traces"),
        "config": meta["env_kwargs"],
        "seeds": seeds,
        "heuristics": list(heuristics),
        "heuristics_queue_order": None if a.heuristics_order == "fifo" else cfg.queue_order,
        "target": "PPO mean slowdown >= 10 % below the best heuristic's, p99 queueing delay no worse",
        "summary": summary_rows,
        **aggregate(summary_rows),
        "models": {
            n: {"model": also[n], "summary": extra_rows[n], **aggregate(extra_rows[n])}
            for n in also
        },
        # the --teacher JSON's rows, read like the main model's (null without --teacher)
        "teacher": {"path": a.teacher, "summary": teacher_rows, **aggregate(teacher_rows)}
        if a.teacher
        else None,
        "per_trace": per_trace,
        "wall_time_s": time.perf_counter() - t0,
    }
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(json.dumps(out, indent=1) + "\n")
    print(f"wrote {a.out}")


if __name__ == "__main__":
    raise SystemExit(run_main(main, prog="benchmarks.dynamic.ppo_eval"))
