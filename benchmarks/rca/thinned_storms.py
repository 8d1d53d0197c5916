"""Partial storms with and without thinned-storm training, paired by seed, on one split.

Each ``NAME=MODEL`` artifact is scored as :mod:`benchmarks.rca.origin_only` scores the release: full
incidents, the root's alerts only, and the root plus one alerting neighbour, each with and without
the lone-alert rule. Models trained with ``fleetmind rca train --thin-share S`` sit beside fits of
the same seed without it (``docs/research/2026-12-03-rca-thinned-storms.md``). Decisions use the
``val`` split only. A ``NAME=FILE.joblib`` is a fitted learned baseline (``hop2_gbdt``, e.g. from
``benchmarks.rca.gat_neighbours tune-gbdt --thin-share S``); it has no lone-alert rule, so its two
variants are one.

Run::

    python -m benchmarks.rca.thinned_storms --data /tmp/rcasim/sim0e --split val \\
        plain0=models/rca thin25_0=/tmp/thin0/runs/.../model \\
        --json benchmarks/results/rca/thinned_storms_val.json
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import joblib

from benchmarks.provenance import load_now, provenance
from benchmarks.rca.origin_only import run_split
from fleetmind import argtypes
from fleetmind.cli.runner import run_main


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("models", nargs="+", help="NAME=ARTIFACT_FOLDER")
    ap.add_argument("--data", required=True)
    ap.add_argument("--split", default="val")
    ap.add_argument(
        "--limit", type=argtypes.positive_int, default=None, help="first N incidents of the split"
    )
    ap.add_argument("--boot", type=argtypes.positive_int, default=2000)
    ap.add_argument("--seed", type=argtypes.seed, default=0)
    ap.add_argument("--json", type=argtypes.output_file, required=True)
    a = ap.parse_args(argv)
    load0 = load_now()

    from fleetmind.data.rca_dataset import load_dataset
    from fleetmind.rca.gat_analyzer import GATAnalyzer

    ds = load_dataset(a.data, [a.split])
    out, versions = {}, {}
    for spec in a.models:
        name, sep, path = spec.partition("=")
        if not sep or not name or not path:
            ap.error(f"expected NAME=ARTIFACT_FOLDER, got {spec!r}")
        if path.endswith(".joblib"):
            an = joblib.load(path)
            gats = {"gat": an, "gat:no_lone_rule": an}
            versions[name] = f"{an.name} ({Path(path).name})"
        else:
            gats = {
                "gat": GATAnalyzer.load(path),
                "gat:no_lone_rule": GATAnalyzer.load(path, lone_alert_margin=None),
            }
            versions[name] = gats["gat"].version
        out[name] = run_split(gats, ds, a.split, a)
        for part in ("full", "root_plus_neighbour", "origin_only"):
            p = out[name][part]
            print(
                f"{name} {part} ({p['n']}): AC@1 {p['gat']['ac@1']['value']}, "
                f"without the lone-alert rule {p['gat:no_lone_rule']['ac@1']['value']}"
            )
    res = {
        **provenance(__spec__.name, argv, load_start=load0),
        "benchmark": "rca_thinned_storms",
        "data": Path(a.data).name,
        "split": a.split,
        "models": versions,
        "bootstrap": {"resamples": a.boot, "seed": a.seed, "interval": "percentile 95 %"},
        "results": out,
    }
    Path(a.json).parent.mkdir(parents=True, exist_ok=True)
    Path(a.json).write_text(json.dumps(res, indent=2) + "\n")
    print(f"wrote {a.json}")
    return 0


if __name__ == "__main__":
    raise SystemExit(run_main(main, prog="benchmarks.rca.thinned_storms"))
