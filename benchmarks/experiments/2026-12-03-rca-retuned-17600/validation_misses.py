"""Where the longer-trained GAT and ``hop2_gbdt`` still miss, on validation only (304 incidents
of ``$R/sim0e``), and how large a paired lead is possible there at all.

For each fit of the longer-trained pair (three seeds per learner, the work folders laid out by
``assemble.py``) it ranks the validation incidents, then reports per incident which fits miss,
whether a GBDT hit came from a tie at the top (counted in the root's favour by the decision rule),
and groups the misses by fault type and by silent roots. The **ceiling** is the paired lead the GAT
would have if it found every root that at least one of the six fits finds, with the GBDT as it is:
``(GBDT misses - incidents every fit misses) / n``, with ties at the top counted in the root's
favour (the decision rule's count) and, beside it, shared (a ``k``-way tie worth ``1/k``). No test
set is read.

Run (after the fits of ``docs/research/2026-12-03-rca-retuned-17600.md``)::

    python -m benchmarks.experiments.2026-12-03-rca-retuned-17600.validation_misses \
        --data $R/sim0e --work /tmp/W18/evalL/S0 --work /tmp/W18/L_1 --work /tmp/W18/L_2 \
        --json benchmarks/results/rca/validation_misses_17600.json
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from pathlib import Path
from typing import Any

import joblib
import numpy as np

from benchmarks.provenance import load_now, provenance
from benchmarks.rca.gat_neighbours import _fitted, gat_scores, gbdt_scores, ranks_of, tie_shares
from fleetmind.cli.runner import run_main


def _score_all(works: list[Path], incs: list[dict], ds: Any) -> dict[str, dict[str, np.ndarray]]:
    """``{learner: {"ranks": (seeds, n), "shares": (seeds, n)}}`` over the work folders."""
    out: dict[str, dict[str, list[np.ndarray]]] = defaultdict(lambda: defaultdict(list))
    for w in works:
        for name, (kind, an) in _fitted(w).items():
            cache = w / f"scores-{name}-val-diagnosis.joblib"
            if cache.is_file():
                sc = joblib.load(cache)
            else:
                sc = (gbdt_scores if kind == "gbdt" else gat_scores)(an, incs, ds)
                joblib.dump(sc, cache)
            out[name]["ranks"].append(ranks_of(sc, incs, ds))
            out[name]["shares"].append(tie_shares(sc, incs, ds))
    return {n: {k: np.stack(v) for k, v in d.items()} for n, d in out.items()}


def summarise(
    per: dict[str, dict[str, np.ndarray]], incs: list[dict], gat: str, gbdt: str
) -> dict[str, Any]:
    """Miss counts (seed means), tie credit, misses by group, and the validation ceiling."""
    n = len(incs)
    g_miss = (per[gat]["ranks"] != 0).mean(axis=0)  # (n,) share of GAT seeds that miss
    b_miss = (per[gbdt]["ranks"] != 0).mean(axis=0)
    every = (per[gat]["ranks"] != 0).all(axis=0) & (per[gbdt]["ranks"] != 0).all(axis=0)
    b_tie_credit = ((per[gbdt]["ranks"] == 0) & (per[gbdt]["shares"] < 1.0)).mean(axis=0)
    groups: dict[str, dict[str, float]] = defaultdict(lambda: {"gat": 0.0, "gbdt": 0.0})
    for j, inc in enumerate(incs):
        for key in (f"fault_type={inc['fault_type']}", f"silent_root={bool(inc['silent_root'])}"):
            groups[key]["gat"] += float(g_miss[j])
            groups[key]["gbdt"] += float(b_miss[j])
    return {
        "n": n,
        "ac@1_per_seed": {m: (per[m]["ranks"] == 0).mean(axis=1).round(4).tolist() for m in per},
        "misses_seed_mean": {"gat": float(g_miss.sum()), "gbdt": float(b_miss.sum())},
        "missed_by_every_fit": int(every.sum()),
        "gbdt_hits_from_ties_seed_mean": float(b_tie_credit.sum()),
        "lead_points_seed_mean": round(100.0 * float(b_miss.sum() - g_miss.sum()) / n, 2),
        "ceiling_lead_points": round(100.0 * float(b_miss.sum() - every.sum()) / n, 2),
        # the same with tied top scores broken at random (a k-way tie at the top is worth 1/k)
        "gbdt_misses_ties_shared_seed_mean": round(float(n - per[gbdt]["shares"].mean(0).sum()), 2),
        "gat_misses_ties_shared_seed_mean": round(float(n - per[gat]["shares"].mean(0).sum()), 2),
        "ceiling_lead_points_ties_shared": round(
            100.0 * float(n - per[gbdt]["shares"].mean(0).sum() - every.sum()) / n, 2
        ),
        "by_group": {k: {m: round(v, 2) for m, v in d.items()} for k, d in sorted(groups.items())},
        "incidents_missed": [
            {
                "id": inc["id"],
                "fault_type": inc["fault_type"],
                "silent_root": bool(inc["silent_root"]),
                "gat_miss_share": round(float(g_miss[j]), 3),
                "gbdt_miss_share": round(float(b_miss[j]), 3),
                "gbdt_tie_hit_share": round(float(b_tie_credit[j]), 3),
            }
            for j, inc in enumerate(incs)
            if g_miss[j] > 0 or b_miss[j] > 0
        ],
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", required=True, help="dataset folder with a val split")
    ap.add_argument("--work", action="append", required=True, help="one work folder per seed")
    ap.add_argument("--json", required=True, help="result file")
    a = ap.parse_args(argv)
    from fleetmind.data.rca_dataset import load_dataset

    prov = provenance(__spec__.name, argv, load_start=load_now())
    ds = load_dataset(a.data, ["val"])
    incs = ds.split("val")
    per = _score_all([Path(w) for w in a.work], incs, ds)
    rec = {**prov, "split": "val", **summarise(per, incs, "gat_neighbours", "hop2_gbdt")}
    Path(a.json).write_text(json.dumps(rec, indent=2) + "\n")
    print(json.dumps({k: v for k, v in rec.items() if k not in ("incidents_missed", "by_group")}))
    return 0


if __name__ == "__main__":
    raise SystemExit(
        run_main(main, prog="benchmarks.experiments.2026-12-03-rca-retuned-17600.validation_misses")
    )
