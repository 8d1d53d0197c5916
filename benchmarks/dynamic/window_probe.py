"""How much the backfill window and the queue order are worth, with the released clone placing every job.

On fresh variants of ``default`` (``fleetmind sched variants``' generator, kinds cycled, levels
uniform over each kind's published range; generator seeds from ``--gen-seed``, stream seeds from
``--stream-seed``, ranges no learner or evaluation uses), the clone of ``--model`` places every
job in the model's setting except the backfill window (``--depths``) and the queue order: FIFO with
backfill, hand-set shortest-job-first, and the model's own order (``metadata.json``
``env_kwargs.queue_order``; absent for a FIFO model). Per (depth, order): per-workload mean slowdown
and p99 queueing delay, the mean paired gap ``100 x log(slowdown / FIFO's in the first depth)``
and the p99 ratio to it. A design probe, not an evaluation: ``docs/research/2026-12-03-queue-window.md``::

    python -m benchmarks.dynamic.window_probe --workloads 12 --depths 8 32 64 256 \\
        --json benchmarks/results/dynamic/window_probe.json
"""

from __future__ import annotations

import argparse
import json
from dataclasses import replace
from pathlib import Path

import numpy as np

from benchmarks.provenance import load_now, provenance
from fleetmind import argtypes
from fleetmind.cli.runner import run_main
from fleetmind.data.openb_variants import VARIANT_KINDS
from fleetmind.envs.dynamic.order import NAMED_ORDERS
from fleetmind.rl.dynamic_eval import Workload, model_config
from fleetmind.rl.order_es import order_episode_job
from fleetmind.rl.scaleout import run_tasks
from fleetmind.training.recipes.paired import variant_file, workload_specs


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="models/placement-dynamic", help="dynamic-mode model folder")
    ap.add_argument("--workloads", type=argtypes.positive_int, default=12)
    ap.add_argument("--depths", type=argtypes.nonnegative_int, nargs="+", default=[8, 32, 64, 256])
    ap.add_argument("--gen-seed", type=argtypes.seed, default=35_200_000)
    ap.add_argument("--stream-seed", type=argtypes.seed, default=900_200)
    ap.add_argument("--workers", type=argtypes.positive_int, default=2)
    ap.add_argument("--variants", default="runs/window-probe", help="where variant CSVs go")
    ap.add_argument("--json", type=argtypes.output_file, required=True)
    a = ap.parse_args(argv)
    load0 = load_now()
    model = Path(a.model).resolve()
    base = model_config(model)
    orders = {"fifo": None, "sjf": NAMED_ORDERS["sjf"]}
    if base.queue_order is not None:
        orders["model"] = tuple(base.queue_order)
    rng = np.random.default_rng(a.gen_seed)
    specs = workload_specs(["default"], list(VARIANT_KINDS), a.workloads, a.gen_seed, rng)
    folder = Path(a.variants)
    folder.mkdir(parents=True, exist_ok=True)
    rows: dict[str, dict[str, list[float]]] = {}
    for depth in a.depths:
        cfg = replace(base, backfill_depth=depth, queue_order=None)
        wl = [
            Workload.of(variant_file(*s, folder), a.stream_seed + i, cfg)
            for i, s in enumerate(specs)
        ]
        for name, theta in orders.items():
            res = run_tasks(
                order_episode_job, [(str(model), w, theta) for w in wl], workers=a.workers
            )
            rows[f"{name}@{depth}"] = {
                "mean_slowdown": [r["mean_slowdown"] for r in res],
                "p99_queue_delay_s": [r["p99_queue_delay_s"] for r in res],
            }
            print(f"depth {depth} {name}: done", flush=True)
    ref = rows[f"fifo@{a.depths[0]}"]
    ref_sd, ref_p99 = np.array(ref["mean_slowdown"]), np.mean(ref["p99_queue_delay_s"])
    summary = {}
    for k, r in rows.items():
        gap = 100 * np.log(np.array(r["mean_slowdown"]) / ref_sd)
        summary[k] = {
            "gap_pct": float(gap.mean()),
            "gap_sd_pct": float(gap.std(ddof=1)) if len(gap) > 1 else 0.0,
            "per_workload_gap_pct": [float(x) for x in gap],
            "p99_ratio": float(np.mean(r["p99_queue_delay_s"]) / ref_p99),
        }
        print(f"{k:<12} gap {gap.mean():+7.2f} %  p99 ratio {summary[k]['p99_ratio']:.3f}")
    out = {
        **provenance(__spec__.name, argv, load_start=load0, packages=("onnxruntime",)),
        "model": str(a.model),
        "setting": {**base.__dict__, "backfill_depth": "varied", "queue_order": "varied"},
        "orders": {k: (None if v is None else list(v)) for k, v in orders.items()},
        "specs": [list(s) for s in specs],
        "stream_seeds": [a.stream_seed + i for i in range(len(specs))],
        "reference": f"fifo@{a.depths[0]}",
        "summary": summary,
        "runs": rows,
    }
    Path(a.json).parent.mkdir(parents=True, exist_ok=True)
    Path(a.json).write_text(json.dumps(out, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(run_main(main, prog="benchmarks.dynamic.window_probe"))
