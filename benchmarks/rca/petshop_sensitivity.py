"""Sensitivity of the PetShop result to every detector and ranker setting (one at a time).

Runs the FleetMind propagation ranker on every issue of a PetShop scenario folder with the default
settings, then with each setting of :class:`fleetmind.data.petshop.DetectorConfig` and
:class:`fleetmind.rca.propagation.PropagationConfig` moved away from its default (one at a time), and writes
AC@1 / AC@3 / AC@5 / MRR per variant plus machine info to ``benchmarks/results/rca/petshop_sensitivity.json``.
The defaults were fixed before this sweep; the sweep shows how much the headline figure depends on them.

Usage::

    python -m benchmarks.rca.petshop_sensitivity [--scenario FOLDER] [--out PATH]

The default scenario is ``petshop/low_traffic`` in the dataset folder (``FLEETMIND_SHARED_DATA``,
``docs/data.md``).
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import asdict, replace
from pathlib import Path

from benchmarks.provenance import RESULTS, load_now, provenance
from fleetmind import argtypes
from fleetmind.cli.runner import run_main
from fleetmind.data.paths import shared_data_dir
from fleetmind.data.petshop import (
    DetectorConfig,
    detect_alerts,
    fit_baseline,
    load_scenario,
    read_metrics_csv,
    read_target,
)
from fleetmind.rca.metrics import rank_of, summarize
from fleetmind.rca.propagation import PropagationConfig, PropagationRanker

DETECTOR_GRID = {
    "z_threshold": [3.0, 4.0, 6.0, 8.0],
    "min_consecutive": [1, 3],
    "min_normal_points": [10, 20, 50],
    "rel_scale_floor": [0.0001, 0.01],
}
RANKER_GRID = {
    "magnitude_ratio": [0.0, 0.25, 0.75, 1.0],
    "time_tolerance_s": [0.0, 600.0, 1e9],
    "max_hops": [1, 3],
    "require_same_metric": [False],
}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--scenario", default=None, help="scenario folder (default: shared petshop/low_traffic)"
    )
    ap.add_argument(
        "--out",
        type=argtypes.output_file,
        default=str(RESULTS / "rca" / "petshop_sensitivity.json"),
    )
    args = ap.parse_args(argv)
    load0 = load_now()
    folder = (
        Path(args.scenario)
        if args.scenario
        else shared_data_dir("petshop") / "petshop" / "low_traffic"
    )
    sc = load_scenario(folder)
    issues = sc.issues("all")
    windows = [
        (
            read_metrics_csv(i.path / "metrics.csv"),
            read_target(i.path / "target.json")["root_cause"],
            i.split,
        )
        for i in issues
    ]

    def run(dc: DetectorConfig, pc: PropagationConfig) -> dict:
        base = fit_baseline(sc.normal, dc)
        ranks, ms, test_ranks = [], [], []
        for window, root, split in windows:
            t0 = time.perf_counter()
            alerts, _ = detect_alerts(window, base, dc)
            r = rank_of(
                PropagationRanker(pc).find_root_causes(sc.graph, alerts).ranked_nodes(), root
            )
            ms.append((time.perf_counter() - t0) * 1e3)
            ranks.append(r)
            if split == "test":
                test_ranks.append(r)
        out = summarize(ranks, ms)
        out["test_ac@1"] = summarize(test_ranks)["ac@1"]
        return out

    variants = [
        {
            "name": "default",
            "setting": None,
            "value": None,
            **run(DetectorConfig(), PropagationConfig()),
        }
    ]
    for key, values in DETECTOR_GRID.items():
        for v in values:
            variants.append(
                {
                    "name": f"detector.{key}",
                    "setting": key,
                    "value": v,
                    **run(replace(DetectorConfig(), **{key: v}), PropagationConfig()),
                }
            )
    for key, values in RANKER_GRID.items():
        for v in values:
            variants.append(
                {
                    "name": f"ranker.{key}",
                    "setting": key,
                    "value": v,
                    **run(DetectorConfig(), replace(PropagationConfig(), **{key: v})),
                }
            )
    payload = {
        "scenario": str(folder),
        "n_incidents": len(windows),
        "defaults": {"detector": asdict(DetectorConfig()), "ranker": asdict(PropagationConfig())},
        "variants": variants,
        **provenance(__spec__.name, argv, load_start=load0, packages=("pandas",)),
    }
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(payload, indent=2) + "\n")
    for v in variants:
        print(
            f"{v['name']:<28}{str(v['value']):>10}  AC@1 {v['ac@1']:.3f}  AC@3 {v['ac@3']:.3f}  MRR {v['mrr']:.3f}"
        )
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(run_main(main, prog="benchmarks.rca.petshop_sensitivity"))
