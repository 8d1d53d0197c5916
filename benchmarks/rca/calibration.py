"""Calibration of the GAT's top score and plausibility of its fault types, on simulated incidents.

For a model and a dataset folder this reports, per split:

* the top score's expected calibration error with the temperature stored in the artifact (what the
  service uses) and uncalibrated (``T = 1``), with the reliability bins;
* how many of the top-3 causes scored >= 0.05 carry a fault type that the catalog does not allow at
  their node kind and role, with the fault-type mask (the default) and without it;
* the fault-type accuracy of correctly ranked top causes, with and without the mask;
* origin-only storms: each incident with only the alerts that land on its root (roots that alert),
  and how often the root is then ranked first.

Run after ``fleetmind rca calibrate --write`` (which fits the temperature on ``val``)::

    python -m benchmarks.rca.gat_dataset --out /tmp/rcasim/rel_default --incidents 6700 \\
        --train-per-graph 1 --val 300
    python -m benchmarks.rca.calibration --data /tmp/rcasim/rel_default \\
        --json benchmarks/results/rca/rca_calibration_default.json
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from benchmarks.provenance import load_now, provenance
from fleetmind import argtypes
from fleetmind.cli.runner import run_main


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", required=True)
    ap.add_argument("--model", default=None, help="artifact folder (default: models/rca)")
    ap.add_argument("--splits", nargs="+", default=["val", "test", "test_large"])
    ap.add_argument(
        "--limit", type=argtypes.positive_int, default=None, help="first N incidents of each split"
    )
    ap.add_argument("--json", type=argtypes.output_file, required=True)
    a = ap.parse_args(argv)
    load0 = load_now()

    from tqdm import tqdm

    from fleetmind.data.rca_dataset import load_dataset
    from fleetmind.data.rca_gen.faults import plausible_fault_types
    from fleetmind.rca.calibration import reliability, top1
    from fleetmind.rca.gat_analyzer import UNKNOWN_FAULT, GATAnalyzer

    ds = load_dataset(a.data, a.splits)
    masked = GATAnalyzer.load(a.model)
    plain = GATAnalyzer.load(a.model, mask_fault_types=False)
    out: dict[str, dict] = {}
    for split in a.splits:
        incs = ds.split(split)[: a.limit]
        items = [(ds.graph_of(i), i["alerts"]) for i in incs]
        logits = masked.crop_logits_many(items)
        targets = []
        for inc, (keep, _) in zip(incs, logits, strict=True):
            hit = np.flatnonzero(keep == ds.graph_of(inc).index[str(inc["root_cause"])])
            targets.append(int(hit[0]) if hit.size else -1)
        zs = [z for _, z in logits]
        rel = {
            "calibrated": reliability(*top1(zs, targets, masked.temperature)).to_dict(),
            "uncalibrated": reliability(*top1(zs, targets, 1.0)).to_dict(),
        }
        # implausible, typed (not unknown), right type of a correct top 1, typed unknown
        counts = {"masked": [0, 0, 0, 0], "unmasked": [0, 0, 0, 0]}
        for inc, (g, alerts) in tqdm(
            list(zip(incs, items, strict=True)), desc=f"fault types {split}", unit="inc"
        ):
            for name, gat in (("masked", masked), ("unmasked", plain)):
                causes = gat.find_root_causes(g, alerts, top_k=3).causes
                for c in causes:
                    if c.score < 0.05 or c.fault_type is None:
                        continue
                    if c.fault_type == UNKNOWN_FAULT:
                        counts[name][3] += 1
                        continue
                    counts[name][1] += 1
                    role = g.node(c.node).attrs.get("role")
                    if c.fault_type not in plausible_fault_types(c.kind, role):
                        counts[name][0] += 1
                if causes and causes[0].node == inc["root_cause"]:
                    counts[name][2] += int(causes[0].fault_type == inc["fault_type"])
        # origin-only storms: only the alerts that land on the root itself (non-silent roots)
        origin_hits = origin_n = 0
        for inc, (g, alerts) in zip(incs, items, strict=True):
            own = [a for a in alerts if g.node_for_alert(a["labels"]) == inc["root_cause"]]
            if not own:
                continue
            origin_n += 1
            top = masked.find_root_causes(g, own, top_k=1).causes
            origin_hits += int(bool(top) and top[0].node == inc["root_cause"])
        n_right = int(sum(1 for i, t in zip(incs, targets, strict=True) if t >= 0))
        out[split] = {
            "n": len(incs),
            "temperature": masked.temperature,
            "reliability": rel,
            "fault_types": {
                name: {
                    "top3_typed_scored_ge_0.05": c[1],
                    "implausible": c[0],
                    "right_type_of_correct_top1": c[2],
                    "unknown": c[3],
                }
                for name, c in counts.items()
            },
            "roots_among_candidates": n_right,
            "origin_only": {
                "n": origin_n,
                "ac@1": round(origin_hits / origin_n, 4) if origin_n else None,
            },
        }
    res = {
        **provenance(__spec__.name, argv, load_start=load0),
        "benchmark": "rca_calibration",
        "data": Path(a.data).name,
        "data_meta": {k: ds.meta.get(k) for k in ("seed", "equivalent_command")},
        "model": masked.version,
        "splits": out,
    }
    Path(a.json).parent.mkdir(parents=True, exist_ok=True)
    Path(a.json).write_text(json.dumps(res, indent=2) + "\n")
    for split, r in out.items():
        fm, fu = r["fault_types"]["masked"], r["fault_types"]["unmasked"]
        print(
            f"{split}: ECE {r['reliability']['uncalibrated']['ece']:.4f} -> "
            f"{r['reliability']['calibrated']['ece']:.4f} (T={r['temperature']:.3f}); implausible "
            f"top-3 types {fu['implausible']}/{fu['top3_typed_scored_ge_0.05']} unmasked, "
            f"{fm['implausible']}/{fm['top3_typed_scored_ge_0.05']} masked ({fm['unknown']} "
            f"unknown); right type of a correct top 1: {fu['right_type_of_correct_top1']} -> "
            f"{fm['right_type_of_correct_top1']}; origin-only AC@1 {r['origin_only']['ac@1']} "
            f"({r['origin_only']['n']} storms)"
        )
    print(f"wrote {a.json}")
    return 0


if __name__ == "__main__":
    raise SystemExit(run_main(main, prog="benchmarks.rca.calibration"))
