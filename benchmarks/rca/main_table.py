"""The RCA main table: every method (heuristics, learned baselines, the GAT) on held-out topologies.

For each setting (``NAME=DATA[@MODEL]``): the learned baselines (``name_table``, ``node_gbdt``,
``hop2_gbdt``) fit on all of ``DATA``'s ``train`` split, as the GAT is trained (cached,
``rca/gbdt.py``; ``--max-train`` caps them), the GAT is ``MODEL``
(default: the released ``models/rca``), and every method ranks the incidents of ``--splits``
(topologies that no training incident uses). Each AC@1 / AC@3 / MRR comes with a percentile-bootstrap
95 % interval over incidents (``--boot`` resamples, seeded), overall and split by silent and
non-silent roots (a silent root: no alert maps to the root node).

Run::

    python -m benchmarks.rca.main_table default=/tmp/rcasim/rel_default@models/rca \\
        hard=/tmp/rcasim/rel_hard@models/rca_hard --json benchmarks/results/rca/rca_main_table.json
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

from benchmarks.provenance import load_now, provenance
from fleetmind import argtypes
from fleetmind.cli.runner import run_main
from fleetmind.progress import show_bar

METHODS = (
    "random",
    "most_alerts",
    "earliest_alert",
    "pagerank",
    "deepest",
    "name_table",
    "node_gbdt",
    "hop2_gbdt",
    "gat",
)


def _ac1(part: dict) -> str:
    """A subset's AC@1 with three decimals, ``-`` when the subset is empty (``None``)."""
    return "-" if part["ac@1"] is None else f"{part['ac@1']:.3f}"


def bootstrap(ranks: list, k: int | None, n_boot: int, seed: int) -> list[float]:
    """95 % percentile interval of AC@k (``k``) or MRR (``k=None``) over incidents."""
    r = np.array([np.inf if x is None else x for x in ranks], dtype=float)
    if len(r) == 0:
        return [0.0, 0.0]
    v = (r <= k).astype(float) if k is not None else np.where(np.isfinite(r), 1.0 / r, 0.0)
    idx = np.random.default_rng(seed).integers(0, len(v), size=(n_boot, len(v)))
    m = v[idx].mean(axis=1)
    return [float(np.percentile(m, 2.5)), float(np.percentile(m, 97.5))]


def with_ci(res: dict, n_boot: int, seed: int) -> dict:
    """Add ``ci95`` (AC@1, AC@3, MRR) to every method and to its silent / non-silent parts."""
    silent = res.pop("silent")
    ranks = res.pop("ranks")
    for name, m in res["methods"].items():
        parts = {
            "all": ranks[name],
            "silent": [x for x, s in zip(ranks[name], silent, strict=True) if s],
            "non_silent": [x for x, s in zip(ranks[name], silent, strict=True) if not s],
        }
        for part, rk in parts.items():
            ci = {
                "ac@1": bootstrap(rk, 1, n_boot, seed),
                "ac@3": bootstrap(rk, 3, n_boot, seed),
                "mrr": bootstrap(rk, None, n_boot, seed),
            }
            (m if part == "all" else m["by_root"][part])["ci95"] = ci
    return res


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("settings", nargs="+", help="NAME=DATA[@MODEL]")
    ap.add_argument("--splits", nargs="+", default=["test"])
    ap.add_argument("--methods", nargs="+", default=list(METHODS))
    ap.add_argument(
        "--limit", type=argtypes.positive_int, default=None, help="first N incidents per split"
    )
    ap.add_argument("--boot", type=argtypes.positive_int, default=2000)
    ap.add_argument(
        "--max-train",
        type=argtypes.positive_int,
        default=10**9,
        help="training incidents the learned baselines fit on (default: all of the train split, "
        "as the GAT; GBDTConfig's own default caps them at 2,000)",
    )
    ap.add_argument("--seed", type=argtypes.seed, default=0)
    ap.add_argument("--json", type=argtypes.output_file, required=True)
    ap.add_argument(
        "--merge", action="store_true", help="keep the other settings already in --json"
    )
    a = ap.parse_args(argv)
    load0 = load_now()

    from fleetmind.data.rca_dataset import load_dataset
    from fleetmind.rca.metrics import evaluate_methods, make_analyzers

    out: dict = {}
    for spec in a.settings:
        name, _, rest = spec.partition("=")
        data, _, model = rest.partition("@")
        t0 = time.perf_counter()
        analyzers = make_analyzers(
            a.methods, model=model or None, seed=a.seed, data=data, max_train=a.max_train
        )
        fit_s = time.perf_counter() - t0
        ds = load_dataset(data, a.splits)
        out[name] = {
            "data": data,
            "model": model or "models/rca",
            "data_meta": {k: ds.meta.get(k) for k in ("seed", "sim", "equivalent_command", "caps")},
            "learned_baselines_fit_s": round(fit_s, 1),
            "learned_baselines_fit": {
                n: getattr(an, "fit_info", None)
                for n, an in analyzers.items()
                if n in ("node_gbdt", "hop2_gbdt", "name_table")
            },
            "gat_version": analyzers["gat"].version if "gat" in analyzers else None,
            "splits": {},
        }
        for split in a.splits:
            incs = ds.split(split)[: a.limit] if a.limit else ds.split(split)
            res = evaluate_methods(incs, analyzers, ds.graphs, progress=show_bar(), keep_ranks=True)
            out[name]["splits"][split] = with_ci(res, a.boot, a.seed)
            for mname, m in res["methods"].items():
                ci = m["ci95"]["ac@1"]
                br = m["by_root"]
                print(
                    f"{name:<8}{split:<11}{mname:<15}AC@1 {m['ac@1']:.3f} [{ci[0]:.3f}, {ci[1]:.3f}]"
                    f"  silent {_ac1(br['silent'])}  non-silent {_ac1(br['non_silent'])}"
                )
    prov = provenance(__spec__.name, argv, load_start=load0, packages=("scikit-learn",))
    commands = {name: prov["command"] for name in out}
    if a.merge and Path(a.json).exists():
        old = json.loads(Path(a.json).read_text())
        out = {**old["settings"], **out}
        commands = {**old.get("commands", {}), **commands}
    res = {
        **prov,
        "benchmark": "rca_main_table",
        "commands": commands,
        "bootstrap": {"resamples": a.boot, "seed": a.seed, "interval": "percentile 95 %"},
        "settings": out,
    }
    Path(a.json).parent.mkdir(parents=True, exist_ok=True)
    Path(a.json).write_text(json.dumps(res, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(run_main(main, prog="benchmarks.rca.main_table"))
