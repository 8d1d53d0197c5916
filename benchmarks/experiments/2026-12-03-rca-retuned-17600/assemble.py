"""Gather the four seed-0 trials per learner of the 17,600-incident re-tuning (fitted in separate
work folders) into one record per learner, choose by validation AC@1 (ties: MRR) as
``benchmarks.rca.gat_neighbours`` does, and lay out one work folder per training seed for its
``evaluate`` phase (the chosen fits linked, not copied; cached test scores of the same fits reused).

Run (after the fits of ``docs/research/2026-12-03-rca-retuned-17600.md``)::

    python -m benchmarks.experiments.2026-12-03-rca-retuned-17600.assemble --out /tmp/W18/eval \
        --gat /tmp/w/W17_0/tune-gat.json --gat /tmp/thinb0/train.json:0.1 \
        --gat /tmp/W18/gat_d1/tune-gat.json --gat /tmp/W18/gat_d2/tune-gat.json \
        --gbdt /tmp/w/W17_0 --gbdt /tmp/W18/gbdt_thin --gbdt /tmp/W18/gbdt_d1 --gbdt /tmp/W18/gbdt_d2 \
        --gbdt /tmp/W18/gbdt_d3 --seed-work 1=/tmp/w/W17_1 --seed-work 2=/tmp/w/W17_2 \
        --gbdt-failed '{"max_iter":150,"learning_rate":0.2,"max_leaf_nodes":15,"neg_rate":1.0}=...'

With the fifth trials (``--gat W18/gat_e25/tune-gat.json --gbdt W18/gbdt_l300``, out
``W18/evalL``, seeds from ``W18/L_1``, ``W18/L_2``) it lays out the longer-trained pair.

A ``train.json`` of ``fleetmind rca train`` (``PATH:SHARE``) stands for a GAT trial fitted outside
the benchmark; its configuration is the incumbent's (it was fitted with the release recipe).
"""

from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path
from typing import Any

from benchmarks.provenance import load_now, provenance
from fleetmind.cli.runner import run_main

INCUMBENT_GAT = {"hidden": 48, "lr": 0.003, "dropout": 0.2, "weight_decay": 0.0001}


def _gat_trials(spec: str) -> list[dict[str, Any]]:
    path, _, share = spec.partition(":")
    rec = json.loads(Path(path).read_text())
    if "gat_neighbours" in rec:
        return [{**t, "source": path} for t in rec["gat_neighbours"]["trials"]]
    m = rec["metrics"]["val"]
    return [
        {
            "config": INCUMBENT_GAT,
            "thin_share": float(share),
            "val": {k: m[k] for k in ("n", "ac@1", "ac@3", "mrr")},
            "epochs": rec["epochs"],
            "artifact": rec["artifact"],
            "wall_s": round(rec["fit_seconds"] + rec["feature_seconds"], 1),
            "source": path,
        }
    ]


def _best(trials: list[dict[str, Any]]) -> dict[str, Any]:
    return max(trials, key=lambda t: (t["val"]["ac@1"], t["val"]["mrr"]))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument(
        "--gat", action="append", required=True, help="tune-gat.json or train.json:SHARE"
    )
    ap.add_argument("--gbdt", action="append", required=True, help="tune-gbdt work folder")
    ap.add_argument("--seed-work", action="append", default=[], help="SEED=WORK of the chosen pair")
    ap.add_argument(
        "--gbdt-failed",
        action="append",
        default=[],
        help="CONFIG_JSON=REASON of a GBDT trial that did not finish (kept in the record)",
    )
    a = ap.parse_args(argv)
    prov = provenance(__spec__.name, argv, load_start=load_now())
    out = Path(a.out)
    gat = [t for s in a.gat for t in _gat_trials(s)]
    gbdt = []
    for w in a.gbdt:
        for t in json.loads((Path(w) / "tune-gbdt.json").read_text())["hop2_gbdt"]["trials"]:
            gbdt.append({**t, "source": str(Path(w) / "hop2_gbdt.joblib")})
    bg, bb = _best(gat), _best(gbdt)
    for spec in a.gbdt_failed:
        cfg, _, why = spec.partition("=")
        gbdt.append({"config": json.loads(cfg), "failed": why})
    s0 = out / "S0"
    s0.mkdir(parents=True, exist_ok=True)
    rec_gat = {"trials": gat, "chosen": bg["config"], "chosen_val": bg["val"]}
    rec_gat |= {"thin_share": bg.get("thin_share", 0.0), "artifact": bg["artifact"]}
    rec_gat["epochs"] = bg["epochs"]  # the fifth trial differs from the first only in epochs
    rec_gbdt = {"trials": gbdt, "chosen": bb["config"], "chosen_val": bb["val"]}
    rec_gbdt["thin_share"] = bb.get("thin_share", 0.0)
    (s0 / "tune-gat.json").write_text(
        json.dumps({**prov, "gat_neighbours": rec_gat}, indent=2) + "\n"
    )
    (s0 / "tune-gbdt.json").write_text(json.dumps({**prov, "hop2_gbdt": rec_gbdt}, indent=2) + "\n")
    link = s0 / "hop2_gbdt.joblib"
    link.unlink(missing_ok=True)
    link.symlink_to(bb["source"])
    # reuse the test scores cached beside the chosen fits when both come from one work folder
    src = Path(bb["source"]).parent
    if str(Path(bg["artifact"])).startswith(str(src) + "/"):
        for f in src.glob("scores-*.joblib"):
            shutil.copy2(f, s0 / f.name)
    print("GAT chosen:", bg["config"], bg.get("thin_share", 0.0), bg["val"]["ac@1"], bg["source"])
    print("GBDT chosen:", bb["config"], bb.get("thin_share", 0.0), bb["val"]["ac@1"], bb["source"])
    for spec in a.seed_work:
        seed, _, work = spec.partition("=")
        dst = out / f"S{seed}"
        if dst.is_symlink() or dst.exists():
            dst.unlink()
        dst.symlink_to(work)
    return 0


if __name__ == "__main__":
    raise SystemExit(
        run_main(main, prog="benchmarks.experiments.2026-12-03-rca-retuned-17600.assemble")
    )
