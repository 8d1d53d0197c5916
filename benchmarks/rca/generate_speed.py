"""Benchmark: time to generate an RCA dataset (target: 10,000 incidents on ~1,000-node graphs <= 2 min, 2 cores).

Run: ``python -m benchmarks.rca.generate_speed [--incidents 10000] [--workers 2]``; writes
``benchmarks/results/rca/rca_generate.json`` with machine info, versions, the command and the figures.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
import time
from pathlib import Path

from benchmarks.provenance import RESULTS, load_now, provenance
from fleetmind import argtypes
from fleetmind.cli.runner import run_main


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--incidents", type=int, default=10_000)
    ap.add_argument("--workers", type=argtypes.positive_int, default=2)
    ap.add_argument(
        "--nodes",
        type=argtypes.positive_int,
        default=1000,
        help="graph node budget (min = 0.8x, max = 1.2x)",
    )
    ap.add_argument(
        "--out", type=argtypes.output_file, default=str(RESULTS / "rca" / "rca_generate.json")
    )
    args = ap.parse_args()

    import numpy as np

    from fleetmind.data.rca_gen.generate import DatasetSpec, generate_dataset
    from fleetmind.data.rca_gen.graphs import GraphGenConfig

    spec = DatasetSpec(
        n_incidents=args.incidents,
        seed=0,
        graphs=GraphGenConfig(min_nodes=int(args.nodes * 0.8), max_nodes=int(args.nodes * 1.2)),
        large_fraction=0.0,
        workers=args.workers,
    )
    load0 = load_now()
    tmp = Path(tempfile.mkdtemp(prefix="bench_rca_"))
    try:
        t0 = time.perf_counter()
        cpu0 = os.times()
        meta = generate_dataset(tmp, spec)
        wall = time.perf_counter() - t0
        cpu1 = os.times()
        size = sum(p.stat().st_size for p in tmp.rglob("*") if p.is_file())
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    nodes = [s["nodes"] for s in meta["graph_stats"].values()]
    result = {
        "benchmark": "rca_generate",
        **provenance(__spec__.name, load_start=load0),
        "n_incidents": sum(meta["counts"].values()),
        "workers": args.workers,
        "n_graphs": len(nodes),
        "graph_nodes_mean": float(np.mean(nodes)),
        "graph_nodes_range": [int(min(nodes)), int(max(nodes))],
        "wall_s": round(wall, 2),
        "incidents_per_s": round(sum(meta["counts"].values()) / wall, 1),
        "parent_cpu_s": round((cpu1.user - cpu0.user) + (cpu1.system - cpu0.system), 2),
        "children_cpu_s": round(
            (cpu1.children_user - cpu0.children_user)
            + (cpu1.children_system - cpu0.children_system),
            2,
        ),
        "dataset_mb": round(size / 2**20, 1),
        "target": "10,000 incidents on ~1,000-node graphs <= 120 s on 2 cores",
        "meets_target": wall <= 120.0 if args.incidents >= 10_000 else None,
    }
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    raise SystemExit(run_main(main, prog="benchmarks.rca.generate_speed"))
