"""Ablation of the dynamic-mode placement recipe: what each stage adds, on the frozen evaluation set.

Every policy runs on the same job streams (one per trace and evaluation seed,
``rl.dynamic_eval.evaluate_streams``) in the default dynamic setting (3 clusters, 133 nodes,
2,048 jobs, offered load 0.8). Rows:

| row | policy |
| --- | --- |
| each heuristic of ``--heuristics`` | the heuristic |
| ``LABEL: teacher`` | ``teacher.json`` of each ``--recipe`` folder (one per training seed) |
| ``LABEL: clone at step 0`` | its ``clone.onnx`` (the warm start, before any PPO update) |
| ``LABEL: + PPO`` | its ``policy.onnx`` (the checkpoint the run's validation kept) |
| ``LABEL: + PPO, last`` | its ``final.onnx`` (the last policy), when every folder has one |
| ``--scratch LABEL`` | ``policy.onnx`` (and ``final.onnx``) of runs without a warm start |

Per trace, the best heuristic is the one with the lowest mean slowdown over the evaluation seeds.
A model meets the target on a trace when its mean slowdown is at least 10 % below the best
heuristic's and its mean p99 queue delay is no worse (the target set on 2026-12-01). Rows with
one policy per training seed report the mean gap over seeds, a 95 % t-interval over seeds, the
count of traces met per seed and for the **median training seed** (by mean gap over traces).

    python -m benchmarks.dynamic.ablation --recipe release runs/dyn/seed0/... runs/dyn/seed1/... \
        --scratch "PPO from scratch" runs/dyn_scratch/seed0/... --workers 2 [--ray-address auto]

``--set frozen`` (default) regenerates the frozen traces (``benchmarks/placement/frozen_set.py``,
hashes checked) into ``runs/frozen_set`` and uses their ten evaluation seeds.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

from benchmarks.placement.ablation import ci95, repo_relative
from benchmarks.placement.frozen_set import load_manifest, write_all
from benchmarks.provenance import REPO_ROOT as REPO
from benchmarks.provenance import load_now, provenance
from fleetmind import argtypes
from fleetmind.cli.runner import run_main
from fleetmind.cli.sched import parse_seeds
from fleetmind.errors import ConfigError
from fleetmind.rl.dynamic_eval import (
    DEFAULT_HEURISTICS,
    DynEvalConfig,
    actor_fn,
    evaluate_streams,
    load_dynamic_actor,
    model_config,
)
from fleetmind.rl.dynamic_teacher import DynLinearScorer
from fleetmind.rl.scaleout import run_tasks

TARGET_GAP_PCT = -10.0
"""A trace is met when the model's mean slowdown is at least 10 % below the best heuristic's."""


def _actor(kind: str, path: str) -> object:
    if kind == "teacher":
        return DynLinearScorer.load(path)
    return actor_fn(load_dynamic_actor(path))


def trace_job(job: tuple[str, list[int], list[str], list[tuple[str, str]]]) -> dict:
    """One trace: every heuristic and every ``(kind, path)`` actor on the same streams."""
    trace, seeds, heuristics, actors = job
    acts = {f"{k}:{p}": _actor(k, p) for k, p in actors}
    return evaluate_streams(trace, seeds, acts, heuristics, DynEvalConfig())


def markdown(out: dict) -> str:
    """The docs table of an ablation JSON (``--table-from``)."""
    n = len(out["traces"])
    lines = [
        "| row | training seeds | mean slowdown gap to the best heuristic (mean over traces) |"
        " 95 % interval over training seeds | traces met, per training seed | traces met,"
        " median seed |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for row, r in out["rows"].items():
        ci = r["gap_pct_ci95"]
        ci_s = f"[{ci[0]:+.2f}, {ci[1]:+.2f}] %" if ci else "n/a (one policy)"
        met = ", ".join(str(x) for x in r["traces_met_per_seed"])
        lines.append(
            f"| {row} | {len(r['policies']) if r['trained'] else '-'} | "
            f"{r['gap_pct_mean']:+.2f} % | {ci_s} | {met} of {n} | {r['traces_met_median_seed']}"
            f" of {n} |"
        )
    return "\n".join(lines)


def main() -> None:
    load0 = load_now()
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--eval-seeds", nargs="+", default=None, help="default: the frozen set's")
    ap.add_argument("--traces", nargs="+", default=None, help="a subset of the frozen traces")
    ap.add_argument("--heuristics", nargs="+", default=list(DEFAULT_HEURISTICS))
    ap.add_argument("--recipe", nargs="+", action="append", default=[], metavar="LABEL DIR")
    ap.add_argument("--scratch", nargs="+", action="append", default=[], metavar="LABEL DIR")
    ap.add_argument("--workers", type=argtypes.positive_int, default=1)
    ap.add_argument("--ray-address", default=None)
    ap.add_argument("--json", type=argtypes.output_file, default=None)
    ap.add_argument("--table-from", default=None, help="print the markdown table of this JSON")
    a = ap.parse_args()
    if a.table_from:
        print(markdown(json.loads(Path(a.table_from).read_text())))
        return
    for opt, specs in (("--recipe", a.recipe), ("--scratch", a.scratch)):
        if any(len(spec) < 2 for spec in specs):  # before the frozen set is written
            raise ConfigError(f"{opt} needs a label and at least one model folder")
    t0 = time.time()
    m = load_manifest()
    # the seeds and trace names are checked before the frozen set is regenerated
    seeds = parse_seeds(a.eval_seeds) if a.eval_seeds else list(m["eval_seeds"])
    known = [e["name"] for e in m["traces"]]
    unknown = [t for t in a.traces or () if t not in known]
    if unknown:
        raise ConfigError(
            f"--traces: {', '.join(unknown)} not in the frozen set (its traces: {', '.join(known)})"
        )
    paths = write_all(REPO / "runs" / "frozen_set", m)
    traces = {n: str(p) for n, p in paths.items()}
    if a.traces:
        traces = {n: traces[n] for n in a.traces}

    rows: dict[str, list[tuple[str, str]]] = {}
    trained: set[str] = set()
    pairs: dict[str, tuple[str, str]] = {}
    for spec in a.recipe:
        if len(spec) < 2:
            raise ConfigError("--recipe needs a label and at least one model folder")
        label, folders = spec[0], [repo_relative(f) for f in spec[1:]]
        rows[f"{label}: teacher"] = [("teacher", str(f / "teacher.json")) for f in folders]
        rows[f"{label}: clone at step 0"] = [("policy", str(f / "clone.onnx")) for f in folders]
        rows[f"{label}: + PPO"] = [("policy", str(f / "policy.onnx")) for f in folders]
        pairs[label] = (f"{label}: clone at step 0", f"{label}: + PPO")
        if all((f / "final.onnx").is_file() for f in folders):
            rows[f"{label}: + PPO, last"] = [("policy", str(f / "final.onnx")) for f in folders]
            pairs[f"{label}, last"] = (f"{label}: clone at step 0", f"{label}: + PPO, last")
    for spec in a.scratch:
        if len(spec) < 2:
            raise ConfigError("--scratch needs a label and at least one model folder")
        folders = [repo_relative(f) for f in spec[1:]]
        rows[spec[0]] = [("policy", str(f / "policy.onnx")) for f in folders]
        if all((f / "final.onnx").is_file() for f in folders):
            rows[f"{spec[0]}, last"] = [("policy", str(f / "final.onnx")) for f in folders]
    trained = set(rows)
    for spec_rows in rows.values():  # every model must be of the default setting
        for kind, p in spec_rows:
            if kind == "policy" and model_config(Path(p).parent) != DynEvalConfig():
                raise ConfigError(f"{p} was trained in another dynamic setting")
    for h in a.heuristics:
        rows = {h: [("heuristic", h)], **rows}
    actors = list(dict.fromkeys(x for ps in rows.values() for x in ps if x[0] != "heuristic"))
    jobs = [(traces[t], seeds, list(a.heuristics), actors) for t in traces]
    done = [0]

    def tick(n: int) -> None:
        done[0] += n
        print(f"{done[0]}/{len(jobs)} traces, {time.time() - t0:.0f} s", flush=True)

    res = dict(
        zip(
            traces,
            run_tasks(trace_job, jobs, ray_address=a.ray_address, workers=a.workers, progress=tick),
            strict=True,
        )
    )

    def key(x: tuple[str, str]) -> str:
        return x[1] if x[0] == "heuristic" else f"{x[0]}:{x[1]}"

    best = {t: min(a.heuristics, key=lambda h: res[t][h]["mean_slowdown"]) for t in traces}
    table = {}
    for row, ps in rows.items():
        per_model = []
        for x in ps:
            per_trace = {}
            for t in traces:
                r, b = res[t][key(x)], res[t][best[t]]
                gap = 100 * (r["mean_slowdown"] - b["mean_slowdown"]) / b["mean_slowdown"]
                per_trace[t] = {
                    "mean_slowdown": round(r["mean_slowdown"], 4),
                    "p99_queue_delay_s": round(r["p99_queue_delay_s"], 2),
                    "gap_pct": round(gap, 3),
                    "met": bool(
                        gap <= TARGET_GAP_PCT and r["p99_queue_delay_s"] <= b["p99_queue_delay_s"]
                    ),
                }
            per_model.append(
                {
                    "gap_pct": float(np.mean([v["gap_pct"] for v in per_trace.values()])),
                    "met": int(sum(v["met"] for v in per_trace.values())),
                    "per_trace": per_trace,
                }
            )
        gaps = [x["gap_pct"] for x in per_model]
        median_i = int(np.argsort(gaps)[(len(gaps) - 1) // 2])  # the lower median for even n
        table[row] = {
            "policies": [x[1] for x in ps],
            "trained": row in trained,
            "gap_pct_per_seed": [round(g, 3) for g in gaps],
            "gap_pct_mean": round(float(np.mean(gaps)), 3),
            "gap_pct_ci95": ci95(gaps),
            "traces_met_per_seed": [x["met"] for x in per_model],
            "traces_met_median_seed": per_model[median_i]["met"],
            "per_model": per_model,
        }
    ppo_vs_clone = {}
    for label, (crow, prow) in pairs.items():
        paired = []
        for c, p in zip(rows[crow], rows[prow], strict=True):
            d = [
                100
                * (
                    np.asarray(res[t][key(p)]["per_seed"]["mean_slowdown"])
                    / np.asarray(res[t][key(c)]["per_seed"]["mean_slowdown"])
                    - 1
                )
                for t in traces
            ]
            paired.append(float(np.mean(np.concatenate(d))))
        ppo_vs_clone[label] = {
            "per_training_seed": [round(x, 3) for x in paired],
            "mean": round(float(np.mean(paired)), 3),
            "ci95": ci95(paired),
        }
    out = {
        **provenance(__spec__.name, load_start=load0, packages=("ray", "onnxruntime")),
        "set": "frozen",
        "traces": traces,
        "eval_seeds": seeds,
        "heuristics": a.heuristics,
        "best_heuristic": best,
        "target": "mean slowdown <= best heuristic - 10 % and p99 queue delay no worse, per trace",
        "rows": table,
        "ppo_vs_clone_slowdown_pct": ppo_vs_clone,
        "wall_time_s": round(time.time() - t0, 1),
        "per_trace_results": {
            t: {k: {m: v for m, v in r.items() if m != "per_seed"} for k, r in res[t].items()}
            for t in traces
        },
    }
    path = Path(
        a.json
        or REPO / "benchmarks" / "results" / "dynamic" / "placement_dynamic_ablation_frozen.json"
    )
    path.write_text(json.dumps(out, indent=1) + "\n")
    print("ppo vs clone:", ppo_vs_clone)
    print(markdown(out))


if __name__ == "__main__":
    raise SystemExit(run_main(main, prog="benchmarks.dynamic.ablation"))
