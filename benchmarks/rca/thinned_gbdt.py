"""Fit ``hop2_gbdt`` (or ``node_gbdt``) on a training split plus thinned copies of it.

The learned baseline beside the GAT trained with ``fleetmind rca train --thin-share S``: the same
training incidents and the same thinned copies (:func:`fleetmind.rca.thinning.thinned_copies`, drawn
with the same seed), so a partial-storm gain can be told apart from the data that gave it. Writes
the fitted analyzer (joblib) and a JSON record; score it with :mod:`benchmarks.rca.thinned_storms`
(``NAME=FILE.joblib``).

Run::

    python -m benchmarks.rca.thinned_gbdt --data /tmp/rcasim/sim0e --thin-share 0.1 --seed 0 \\
        --out /tmp/thin_gbdt/hop2_gbdt_thin10.joblib --json /tmp/thin_gbdt/fit.json
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import joblib

from benchmarks.provenance import load_now, provenance


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", required=True)
    ap.add_argument("--thin-share", type=float, default=0.1)
    ap.add_argument("--seed", type=int, default=0, help="thinning draw and GBDT seed")
    ap.add_argument("--hops", type=int, default=2, help="2: hop2_gbdt, 0: node_gbdt")
    ap.add_argument("--out", required=True, help="fitted analyzer (joblib)")
    ap.add_argument("--json", required=True)
    a = ap.parse_args(argv)
    load0 = load_now()

    from fleetmind.data.rca_dataset import load_dataset
    from fleetmind.rca.gbdt import GBDTAnalyzer, GBDTConfig
    from fleetmind.rca.thinning import thinned_copies

    ds = load_dataset(a.data, ["train"])
    train = list(ds.split("train"))
    thinned = thinned_copies(train, ds.graphs, a.thin_share, a.seed)
    name = "hop2_gbdt" if a.hops == 2 else "node_gbdt"
    an = GBDTAnalyzer(GBDTConfig(hops=a.hops, seed=a.seed, max_train=10**9), name=name)
    t0 = time.perf_counter()
    an.train(train + thinned, ds.graphs)
    wall = time.perf_counter() - t0
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    joblib.dump(an, a.out)
    res = {
        **provenance(__spec__.name, argv, load_start=load0),
        "benchmark": "rca_thinned_gbdt",
        "data": Path(a.data).name,
        "name": name,
        "config": an.config.__dict__,
        "n_train": len(train),
        "n_thinned": len(thinned),
        "fit_s": round(wall, 1),
        "out": str(a.out),
    }
    Path(a.json).parent.mkdir(parents=True, exist_ok=True)
    Path(a.json).write_text(json.dumps(res, indent=2) + "\n")
    print(f"{name}: {len(train)} incidents + {len(thinned)} thinned, fit {wall:.0f} s -> {a.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
