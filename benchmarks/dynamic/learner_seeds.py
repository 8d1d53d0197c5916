"""A dynamic-mode learner over several training seeds, against its clone on the frozen set.

Reads the frozen-set outputs of :mod:`benchmarks.dynamic.distill_eval` (one per training seed, each
with ``model`` and ``clone`` rows on the same runs) and reports, per learner:

* each training seed's paired gap ``model / clone - 1`` (%) with its 95 % t-interval over the runs;
* the learner's gap: on every frozen run (trace, evaluation seed) the gap averaged over its
  training seeds, then the mean and 95 % t-interval over the runs (the runs are the paired unit;
  the seeds are averaged inside each run, so the interval is about the workloads, and the
  seed-to-seed spread is reported beside it as the standard deviation of the seeds' gaps);
* mean p99 queueing delay of the models and of the clone on the same runs.

Usage::

    python -m benchmarks.dynamic.learner_seeds \\
        --learner es=benchmarks/results/dynamic/es_frozen.json,.../es_seed1_frozen.json \\
        --json benchmarks/results/dynamic/learner_seeds.json
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.placement.ablation import ci95
from benchmarks.provenance import load_now, provenance
from fleetmind import argtypes
from fleetmind.cli.runner import run_main


def run_gaps(result: dict[str, Any]) -> dict[tuple[str, int], dict[str, float]]:
    """``{(trace, evaluation seed): {"gap_pct", "model_p99", "clone_p99"}}`` of one frozen-set
    output; runs without both a ``model`` and a ``clone`` row are skipped."""
    if not isinstance(result.get("runs"), list):
        raise ValueError("not a distill_eval output (no per-run rows)")
    out = {}
    for r in result["runs"]:
        if "model" in r and "clone" in r:
            out[(r["trace"], int(r["seed"]))] = {
                "gap_pct": 100.0 * (r["model"]["mean_slowdown"] / r["clone"]["mean_slowdown"] - 1),
                "model_p99": float(r["model"]["p99_queue_delay_s"]),
                "clone_p99": float(r["clone"]["p99_queue_delay_s"]),
            }
    return out


def learner_summary(results: list[dict[str, Any]]) -> dict[str, Any]:
    """The summary of one learner's training seeds (one frozen-set output each), on the runs all
    of them share. Raises ``ValueError`` when they share none."""
    per_seed = [run_gaps(r) for r in results]
    common = sorted(set.intersection(*(set(g) for g in per_seed)))
    if not common:
        raise ValueError("the frozen-set outputs share no run with model and clone rows")
    seed_gaps = [[g[k]["gap_pct"] for k in common] for g in per_seed]
    averaged = np.mean(np.asarray(seed_gaps), axis=0).tolist()
    seed_means = [float(np.mean(s)) for s in seed_gaps]
    return {
        "n_seeds": len(results),
        "n_runs": len(common),
        "per_seed": [
            {"model": r.get("model"), "gap_pct": m, "ci95_pct": ci95(s)}
            for r, m, s in zip(results, seed_means, seed_gaps, strict=True)
        ],
        "gap_pct": float(np.mean(averaged)),
        "ci95_pct": ci95(averaged),
        "seed_sd_pct": float(np.std(seed_means, ddof=1)) if len(seed_means) > 1 else None,
        "model_p99_queue_delay_s": float(
            np.mean([g[k]["model_p99"] for g in per_seed for k in common])
        ),
        "clone_p99_queue_delay_s": float(np.mean([per_seed[0][k]["clone_p99"] for k in common])),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--learner",
        action="append",
        required=True,
        help="NAME=FILE[,FILE...]: one frozen-set output of distill_eval per training seed",
    )
    ap.add_argument("--json", type=argtypes.output_file, default=None, help="result file")
    a = ap.parse_args(argv)
    load0 = load_now()
    learners: dict[str, Any] = {}
    for spec in a.learner:
        name, _, files = spec.partition("=")
        if not name or not files:
            ap.error(f"--learner {spec!r}: expected NAME=FILE[,FILE...]")
        paths = [Path(f) for f in files.split(",")]
        missing = [str(p) for p in paths if not p.is_file()]
        if missing:
            ap.error(f"--learner {name}: no such file: {', '.join(missing)}")
        try:
            summary = learner_summary([json.loads(p.read_text()) for p in paths])
        except (ValueError, KeyError, TypeError) as e:
            ap.error(f"--learner {name}: {e}")
        learners[name] = {"files": [str(p) for p in paths], **summary}
        s = learners[name]
        print(
            f"{name}: {s['n_seeds']} seeds, {s['n_runs']} runs, gap {s['gap_pct']:+.2f} % "
            f"{s['ci95_pct']}, per seed {[round(x['gap_pct'], 2) for x in s['per_seed']]}"
        )
    res = {**provenance(__spec__.name, argv, load_start=load0), "learners": learners}
    if a.json:
        Path(a.json).parent.mkdir(parents=True, exist_ok=True)
        Path(a.json).write_text(json.dumps(res, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(run_main(main, prog="benchmarks.dynamic.learner_seeds"))
