"""Does the shared quiet callee rule hurt where it was not designed? Writes JSON with machine,
versions, command and commit.

Usage::

    python -m benchmarks.rca.shared_callee_check [--seeds 13 14 15 16] [--services 40 30 40 30]
        [--sim DIR] [--out benchmarks/results/rca/shared_callee_check.json]

Two kinds of system the rule (:mod:`fleetmind.rca.shared_callee`) was not designed beside:

* **synthetic microservice systems** (``fleetmind.data.synth_system.make_system``; random call
  DAGs, 1-minute rows, 30 issues each, every root's own latency rises): each is fitted with
  ``fleetmind rca fit`` at its defaults and ranked by ``fleetmind rca petshop --methods gat_fit``,
  which reports ``gat_fit`` (with the rule) and ``gat_fit:no_shared_callee`` on the same alerts.
  Seeds 11 and 12 were used while designing the rule's "every caller slow" condition; the default
  seeds here are others.
* **simulated GPU-fleet incidents** (``--sim``: a ``benchmarks.rca.gat_dataset`` folder, e.g. of
  the held-out seed 1): the released GAT's ranking of each ``test.jsonl`` incident with and without
  the rule.

Here no root is hidden from its own metrics, so the rule can only cost: the figures say how often
it fires and how often the root's rank changes.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

from benchmarks.provenance import RESULTS, load_now, provenance
from fleetmind import argtypes
from fleetmind.cli.runner import run_main
from fleetmind.errors import FleetMindError


def synthetic_system(seed: int, services: int, tmp: Path) -> dict[str, Any]:
    """Fit and rank one synthetic system; AC@1 with and without the rule, and what fired."""
    from fleetmind.cli import main as cli
    from fleetmind.data.synth_system import make_system

    scen, model, ev_js = tmp / f"sys{seed}", tmp / f"m{seed}", tmp / f"ev{seed}.json"
    make_system(scen, n_services=services, normal_rows=240, issues=30, seed=seed)
    if cli(["rca", "fit", "--scenario", str(scen), "--out", str(model)]) != 0:
        raise FleetMindError(f"rca fit failed on seed {seed}")
    rc = cli(
        ["rca", "petshop", "--scenario", str(scen), "--model", str(model), "--methods", "gat_fit",
         "--json", str(ev_js)]
    )  # fmt: skip
    if rc != 0:
        raise FleetMindError(f"rca petshop failed on seed {seed}")
    ev = json.loads(ev_js.read_text())
    rows = ev["per_incident"]
    return {
        "seed": seed,
        "services": services,
        "issues": len(rows),
        "ac@1": ev["methods"]["gat_fit"]["ac@1"],
        "ac@1_without_rule": ev["methods"]["gat_fit:no_shared_callee"]["ac@1"],
        "fired": sum(bool(r.get("shared_callees")) for r in rows),
        "root_rank_changed": sum(
            r["ranks"]["gat_fit"] != r["ranks"]["gat_fit:no_shared_callee"] for r in rows
        ),
    }


def simulated(folder: Path) -> dict[str, Any]:
    """The released GAT on a simulated test split, with and without the rule."""
    from tqdm import tqdm

    from fleetmind.data.graph import DependencyGraph
    from fleetmind.rca.gat_analyzer import GATAnalyzer
    from fleetmind.rca.metrics import rank_of
    from fleetmind.rca.shared_callee import promote_shared_callees

    analyzer = GATAnalyzer.load()
    graphs: dict[str, DependencyGraph] = {}
    lines = (folder / "test.jsonl").read_text().splitlines()
    n = with_rule = without = fired = changed = 0
    for line in tqdm(lines, desc="simulated", unit="inc"):
        inc = json.loads(line)
        g = graphs.get(inc["graph"])
        if g is None:
            g = graphs[inc["graph"]] = DependencyGraph.load(
                folder / "graphs" / f"{inc['graph']}.json"
            )
        res = analyzer.find_root_causes(g, inc["alerts"])
        out = promote_shared_callees(res, g, inc["alerts"])
        r0 = rank_of(res.ranked_nodes(), inc["root_cause"])
        r1 = rank_of(out.ranked_nodes(), inc["root_cause"])
        n += 1
        without += r0 == 1
        with_rule += r1 == 1
        fired += out is not res
        changed += r0 != r1
    return {
        "folder": str(folder),
        "model": analyzer.version,
        "incidents": n,
        "ac@1": with_rule / max(1, n),
        "ac@1_without_rule": without / max(1, n),
        "fired": fired,
        "root_rank_changed": changed,
    }


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=argtypes.seed, nargs="+", default=[13, 14, 15, 16])
    ap.add_argument("--services", type=argtypes.positive_int, nargs="+", default=[40, 30, 40, 30])
    ap.add_argument("--sim", type=Path, default=None, help="gat_dataset folder (test.jsonl)")
    ap.add_argument(
        "--out",
        type=argtypes.output_file,
        default=str(RESULTS / "rca" / "shared_callee_check.json"),
    )
    args = ap.parse_args(argv)
    if len(args.services) != len(args.seeds):
        ap.error("--services needs one size per seed")
    load0 = load_now()
    systems = []
    with tempfile.TemporaryDirectory() as tmp:
        for seed, services in zip(args.seeds, args.services, strict=True):
            systems.append(synthetic_system(seed, services, Path(tmp)))
    sim = simulated(args.sim) if args.sim is not None else None
    out = {
        **provenance(__spec__.name, argv, load_start=load0, packages=("torch", "pandas")),
        "synthetic_systems": systems,
        "simulated": sim,
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(out, indent=2) + "\n")
    print(f"wrote {args.out}")
    for s in systems:
        print(
            f"seed {s['seed']}: AC@1 {s['ac@1']:.3f} with the rule, {s['ac@1_without_rule']:.3f} "
            f"without; fired {s['fired']}/{s['issues']}, root rank changed {s['root_rank_changed']}"
        )
    if sim is not None:
        print(
            f"simulated: AC@1 {sim['ac@1']:.3f} with, {sim['ac@1_without_rule']:.3f} without; "
            f"fired {sim['fired']}/{sim['incidents']}, root rank changed {sim['root_rank_changed']}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(run_main(main, prog="benchmarks.rca.shared_callee_check"))
