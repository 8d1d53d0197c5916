"""A dynamic-mode model against its own clone, paired on the same job streams (the frozen set).

For each frozen trace (``benchmarks/placement/frozen_set.yaml``, regenerated into
``runs/frozen_set`` with hashes checked) and evaluation seed, the model's ``policy.onnx`` and its
folder's ``clone.onnx`` run on the same stream in the model's own setting
(:func:`fleetmind.rl.dynamic_eval.evaluate_streams`). Reported: per trace and overall, the mean slowdown of
each, the paired gap (model / clone - 1, %) with a 95 % t-interval over the paired runs, and the
mean p99 queueing delay of each. Used for the release rule of
``docs/research/2026-12-01-paired-ppo.md``:

    nice -n 10 python -m benchmarks.dynamic.paired_eval --model runs/paired/RUN/model \\
        --json benchmarks/results/dynamic/paired_ppo_frozen.json [--traces frozen-gpuspec25 ...] \\
        [--seeds 7301-7310]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from benchmarks.placement.ablation import ci95, repo_relative
from benchmarks.placement.frozen_set import load_manifest, write_all
from benchmarks.provenance import REPO_ROOT, load_now, provenance
from fleetmind import argtypes
from fleetmind.cli.runner import run_main
from fleetmind.cli.sched import parse_seeds
from fleetmind.rl.dynamic_eval import actor_fn, evaluate_streams, load_dynamic_actor, model_config


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", required=True, help="dynamic-mode model folder with clone.onnx")
    ap.add_argument("--traces", nargs="+", default=None, help="frozen trace names (default: all)")
    ap.add_argument("--seeds", nargs="+", default=None, help="evaluation seeds (default: frozen)")
    ap.add_argument("--json", type=argtypes.output_file, required=True, help="output JSON")
    a = ap.parse_args(argv)
    load0 = load_now()
    man = load_manifest()
    paths = write_all(REPO_ROOT / "runs" / "frozen_set", man)
    names = a.traces or list(paths)
    seeds = parse_seeds(a.seeds) if a.seeds else [int(s) for s in man["eval_seeds"]]
    model = Path(a.model)
    cfg = model_config(model)
    actors = {
        "clone": actor_fn(load_dynamic_actor(model / "clone.onnx", cfg.n_candidates)),
        "model": actor_fn(load_dynamic_actor(model / "policy.onnx", cfg.n_candidates)),
    }
    per_trace: dict[str, dict] = {}
    ratios: list[float] = []
    p99 = {"clone": [], "model": []}
    for name in names:
        res = evaluate_streams(str(paths[name]), seeds, actors, heuristics=(), config=cfg)
        c = np.array(res["clone"]["per_seed"]["mean_slowdown"])
        m = np.array(res["model"]["per_seed"]["mean_slowdown"])
        r = m / c
        ratios += r.tolist()
        for k in p99:
            p99[k] += res[k]["per_seed"]["p99_queue_delay_s"]
        per_trace[name] = {
            "clone_mean_slowdown": float(c.mean()),
            "model_mean_slowdown": float(m.mean()),
            "gap_pct": float(100 * (r.mean() - 1)),
            "clone_p99_queue_delay_s": res["clone"]["p99_queue_delay_s"],
            "model_p99_queue_delay_s": res["model"]["p99_queue_delay_s"],
        }
        print(name, json.dumps(per_trace[name]), flush=True)
    ci = ci95([100 * (x - 1) for x in ratios])
    out = {
        **provenance(__spec__.name, argv, load_start=load0, packages=("onnxruntime",)),
        "model": str(repo_relative(str(model))),
        "setting": cfg.__dict__,
        "seeds": seeds,
        "traces": per_trace,
        "overall": {
            "n_runs": len(ratios),
            "gap_pct": float(100 * (np.mean(ratios) - 1)),
            "ci95_pct": ci,
            "clone_p99_queue_delay_s": float(np.mean(p99["clone"])),
            "model_p99_queue_delay_s": float(np.mean(p99["model"])),
        },
    }
    Path(a.json).parent.mkdir(parents=True, exist_ok=True)
    Path(a.json).write_text(json.dumps(out, indent=1) + "\n")
    print(json.dumps(out["overall"]))
    return 0


if __name__ == "__main__":
    raise SystemExit(run_main(main, prog="benchmarks.dynamic.paired_eval"))
