"""Origin-only storms and full incidents with and without the GAT's lone-alert rule.

An origin-only storm is a simulated incident cut down to the alerts that land on its root (roots
that alert; the shape an on-call engineer sees when one component fails and nothing around it
notices). For each split this ranks, with the same artifact:

* ``gat``: as the service does (:mod:`fleetmind.rca.parsimony`'s rule on, the default);
* ``gat:no_lone_rule``: the model's ranking alone (``lone_alert_margin=None``);

on the origin-only storms, on root-plus-neighbour storms (the root's alerts and those of one
alerting neighbour: two alerting nodes, so the rule does not apply) and on the full incidents, with AC@1 / AC@3 / MRR, 95 % percentile
bootstrap intervals over incidents (``--boot`` resamples, seeded; the same draws for both, so the
paired difference has an interval too), per root kind for the storms, and how many full incidents
change their first cause.

Run (the data set of ``benchmarks/rca/calibration.py``)::

    python -m benchmarks.rca.origin_only --data /tmp/rcasim/rel_default --splits test \\
        --json benchmarks/results/rca/origin_only_test.json
"""

from __future__ import annotations

import argparse
import json
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.provenance import load_now, provenance
from fleetmind import argtypes
from fleetmind.cli.runner import run_main

VARIANTS = ("gat", "gat:no_lone_rule")


def origin_only(ds: Any, incs: list[dict]) -> list[dict]:
    """Each incident with only the alerts that land on its root; incidents whose root is silent
    are dropped."""
    out = []
    for inc in incs:
        g = ds.graph_of(inc)
        own = [a for a in inc["alerts"] if g.node_for_alert(a["labels"]) == inc["root_cause"]]
        if own:
            out.append({**inc, "alerts": own})
    return out


def root_plus_neighbour(ds: Any, incs: list[dict]) -> list[dict]:
    """Each incident with the alerts of its root and of one alerting neighbour of the root (the
    first to start): the sparsest storm the lone-alert rule leaves to the model."""
    out = []
    for inc in incs:
        g = ds.graph_of(inc)
        root = str(inc["root_cause"])
        near = {e.dst for e in g.edges if e.src == root} | {e.src for e in g.edges if e.dst == root}
        on = [(g.node_for_alert(a["labels"]), a) for a in inc["alerts"]]
        own = [a for n, a in on if n == root]
        other = sorted((str(a.get("startsAt", "")), n) for n, a in on if n in near)
        if own and other:
            first = other[0][1]
            out.append({**inc, "alerts": own + [a for n, a in on if n == first]})
    return out


def ranks_and_tops(gat: Any, ds: Any, incs: list[dict]) -> tuple[np.ndarray, list[str]]:
    """1-based rank of each incident's root (inf when unranked) and each first cause."""
    ranks, tops = [], []
    for inc in incs:
        res = gat.find_root_causes(ds.graph_of(inc), inc["alerts"], top_k=None)
        nodes = [c.node for c in res.causes]
        root = str(inc["root_cause"])
        ranks.append(nodes.index(root) + 1 if root in nodes else np.inf)
        tops.append(nodes[0] if nodes else "")
    return np.array(ranks, dtype=float), tops


def summary(ranks: dict[str, np.ndarray], n_boot: int, seed: int) -> dict[str, Any]:
    """AC@1 / AC@3 / MRR with intervals per variant, and the paired AC@1 difference (rule - none)."""
    n = len(next(iter(ranks.values())))
    idx = np.random.default_rng(seed).integers(0, max(n, 1), size=(n_boot, n))

    def stat(v: np.ndarray) -> dict[str, Any]:
        if n == 0:
            return {"value": None, "ci95": None}
        m = v[idx].mean(axis=1)
        return {
            "value": round(float(v.mean()), 4),
            "ci95": [round(float(np.percentile(m, q)), 4) for q in (2.5, 97.5)],
        }

    out: dict[str, Any] = {"n": n}
    for name, r in ranks.items():
        out[name] = {
            "ac@1": stat((r <= 1).astype(float)),
            "ac@3": stat((r <= 3).astype(float)),
            "mrr": stat(np.where(np.isfinite(r), 1.0 / r, 0.0)),
        }
    a, b = (ranks[v] for v in VARIANTS)
    out["ac@1_difference"] = stat((a <= 1).astype(float) - (b <= 1).astype(float))
    return out


def by_kind(ds: Any, incs: list[dict], ranks: dict[str, np.ndarray]) -> dict[str, Any]:
    """Origin-only AC@1 of each variant per root node kind."""
    kinds = [ds.graph_of(i).node(str(i["root_cause"])).kind for i in incs]
    out: dict[str, Any] = {}
    for k in sorted(set(kinds)):
        sel = np.array([x == k for x in kinds])
        out[k] = {"n": int(sel.sum())} | {
            v: round(float((ranks[v][sel] <= 1).mean()), 4) for v in VARIANTS
        }
    return out


def run_split(gats: dict[str, Any], ds: Any, split: str, a: argparse.Namespace) -> dict[str, Any]:
    """Both variants on one split's full incidents and origin-only storms."""
    full = ds.split(split)[: a.limit]
    parts = (
        ("full", full),
        ("origin_only", origin_only(ds, full)),
        ("root_plus_neighbour", root_plus_neighbour(ds, full)),
    )
    res: dict[str, Any] = {}
    for part, incs in parts:
        ranks, tops = {}, {}
        for v in VARIANTS:
            ranks[v], tops[v] = ranks_and_tops(gats[v], ds, incs)
        res[part] = summary(ranks, a.boot, a.seed)
        moved = [i for i, (x, y) in enumerate(zip(*tops.values(), strict=True)) if x != y]
        res[part]["first_cause_changed"] = {
            "n": len(moved),
            "gained": int(sum(ranks["gat"][i] == 1 for i in moved)),
            "lost": int(sum(ranks["gat:no_lone_rule"][i] == 1 for i in moved)),
        }
        if part == "origin_only":
            res[part]["by_root_kind"] = by_kind(ds, incs, ranks)
            res[part]["alerts_per_storm"] = dict(
                sorted(Counter(min(len(i["alerts"]), 5) for i in incs).items())
            )
    return res


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", required=True)
    ap.add_argument("--model", default=None, help="artifact folder (default: models/rca)")
    ap.add_argument("--splits", nargs="+", default=["test"])
    ap.add_argument(
        "--limit", type=argtypes.positive_int, default=None, help="first N incidents of each split"
    )
    ap.add_argument("--boot", type=argtypes.positive_int, default=2000)
    ap.add_argument("--seed", type=argtypes.seed, default=0)
    ap.add_argument("--json", type=argtypes.output_file, required=True)
    a = ap.parse_args(argv)
    load0 = load_now()

    from fleetmind.data.rca_dataset import load_dataset
    from fleetmind.rca.gat_analyzer import GATAnalyzer

    ds = load_dataset(a.data, a.splits)
    gats = {
        "gat": GATAnalyzer.load(a.model),
        "gat:no_lone_rule": GATAnalyzer.load(a.model, lone_alert_margin=None),
    }
    out = {split: run_split(gats, ds, split, a) for split in a.splits}
    res = {
        **provenance(__spec__.name, argv, load_start=load0),
        "benchmark": "rca_origin_only",
        "data": Path(a.data).name,
        "data_meta": {k: ds.meta.get(k) for k in ("seed", "equivalent_command")},
        "model": gats["gat"].version,
        "lone_alert_margin": gats["gat"].config.lone_alert_margin,
        "bootstrap": {"resamples": a.boot, "seed": a.seed, "interval": "percentile 95 %"},
        "splits": out,
    }
    Path(a.json).parent.mkdir(parents=True, exist_ok=True)
    Path(a.json).write_text(json.dumps(res, indent=2) + "\n")
    for split, r in out.items():
        for part in ("full", "origin_only", "root_plus_neighbour"):
            p = r[part]
            print(
                f"{split} {part} ({p['n']}): "
                + "; ".join(
                    f"{v} AC@1 {p[v]['ac@1']['value']} {p[v]['ac@1']['ci95']} "
                    f"AC@3 {p[v]['ac@3']['value']}"
                    for v in VARIANTS
                )
                + f"; first cause changed {p['first_cause_changed']}"
            )
    print(f"wrote {a.json}")
    return 0


if __name__ == "__main__":
    raise SystemExit(run_main(main, prog="benchmarks.rca.origin_only"))
