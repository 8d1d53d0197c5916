"""Speed of the fleet model's hot paths: the GPU-set allocator and the fleet loaders.

Run: ``python -m benchmarks.placement.fleet_speed`` (writes ``benchmarks/results/placement/fleet.json``).

Figures (microseconds per call, median of repeats):

* ``best_gpu_set`` on a DGX-1 V100 with random free masks and k in 1..8: the first call per
  ``(mask, k)`` ("cold": candidate scan over precomputed combinations) and repeated calls ("warm":
  memoised), for the ``greedy`` and ``partition`` policies, and through the integer-bitmask entry point.
* Loading the openb node list (1,213 nodes) and the example YAML fleet.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Sequence

import numpy as np

from benchmarks.provenance import REPO_ROOT, RESULTS, load_now, provenance
from fleetmind import argtypes
from fleetmind.cli.runner import run_main
from fleetmind.data import gpu_alloc
from fleetmind.data.fleet_io import load_fleet_yaml, load_openb_fleet
from fleetmind.data.topology import dgx1_v100


def _median_us(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return float(np.median(times) * 1e6)


def bench_alloc(policy: str, n_queries: int = 2000, seed: int = 0) -> dict[str, float]:
    rng = np.random.default_rng(seed)
    masks = rng.random((n_queries, 8)) < 0.7
    ks = rng.integers(1, 9, size=n_queries)
    tpl = dgx1_v100()  # fresh template: empty caches
    gpu_alloc.best_gpu_set(tpl, masks[0], int(ks[0]), policy)  # build candidates
    # Cold: clear the memo before each call (precomputed candidates stay).
    cold = []
    for m, k in zip(masks[:300], ks[:300], strict=True):
        tpl._cache.pop(("best", policy), None)
        tpl._cache.pop(("bytes", policy), None)
        t = time.perf_counter()
        gpu_alloc.best_gpu_set(tpl, m, int(k), policy)
        cold.append(time.perf_counter() - t)
    tpl._cache.pop(("best", policy), None)
    tpl._cache.pop(("bytes", policy), None)
    t0 = time.perf_counter()
    for m, k in zip(masks, ks, strict=True):
        gpu_alloc.best_gpu_set(tpl, m, int(k), policy)
    first_pass = (time.perf_counter() - t0) / n_queries * 1e6
    distinct = len({(gpu_alloc.mask_to_bits(m), int(k)) for m, k in zip(masks, ks, strict=True)})
    mask_list = list(masks)
    k_list = [int(k) for k in ks]
    bits = [gpu_alloc.mask_to_bits(m) for m in masks]
    warm = warm_bits = float("inf")
    for _ in range(5):  # best of 5 passes: the machine is shared, the minimum is the least noisy
        t0 = time.perf_counter()
        for m, k in zip(mask_list, k_list, strict=True):
            gpu_alloc.best_gpu_set(tpl, m, k, policy)
        warm = min(warm, (time.perf_counter() - t0) / n_queries * 1e6)
        t0 = time.perf_counter()
        for b, k in zip(bits, k_list, strict=True):
            gpu_alloc.best_gpu_set_bits(tpl, b, k, policy)
        warm_bits = min(warm_bits, (time.perf_counter() - t0) / n_queries * 1e6)
    return {
        "queries": n_queries,
        "distinct_mask_k": distinct,
        "first_pass_us_per_call": round(first_pass, 2),
        "cold_median_us": round(float(np.median(cold) * 1e6), 2),
        "cold_p99_us": round(float(np.percentile(cold, 99) * 1e6), 2),
        "warm_best_of_5_us_per_call": round(warm, 3),
        "warm_bits_best_of_5_us_per_call": round(warm_bits, 3),
    }


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(
        prog="python -m benchmarks.placement.fleet_speed",
        description="Time the GPU-set allocator and the fleet loaders; write a result JSON.",
    )
    ap.add_argument(
        "--out",
        type=argtypes.output_path,
        default=RESULTS / "placement" / "fleet.json",
        help="result JSON (default benchmarks/results/placement/fleet.json)",
    )
    args = ap.parse_args(argv)
    load0 = load_now()
    results: dict[str, object] = {
        "alloc_dgx1_v100": {p: bench_alloc(p) for p in ("greedy", "partition")},
    }
    results["load_openb_fleet_ms"] = round(_median_us(load_openb_fleet, 5) / 1000, 2)
    example = REPO_ROOT / "data" / "fleets" / "example_multicluster.yaml"
    results["load_example_yaml_ms"] = round(
        _median_us(lambda: load_fleet_yaml(example), 5) / 1000, 2
    )
    results = {
        **provenance(__spec__.name, argv, load_start=load0, packages=("pyyaml",)),
        **results,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2) + "\n")
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    raise SystemExit(run_main(main, prog="benchmarks.placement.fleet_speed"))
