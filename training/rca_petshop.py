"""``fleetmind rca petshop``: the real-data RCA benchmark on a PetShop-format scenario folder.

Example::

    fleetmind rca petshop --scenario petshop/low_traffic --json out.json   # docs/data.md

Prints AC@1/3/5, Avg@5, MRR and ms per incident for every method on the chosen split (default: all
issues) and on each split, and writes the JSON of the ``rca evaluate`` contract (plus ``by_split``,
``by_fault_type``, ``per_incident`` and the published reference figures) to ``--json``.
"""

from __future__ import annotations

import argparse
import platform
import sys

from fleetmind import argtypes
from fleetmind.data.errors import DataError, ModelLoadError
from fleetmind.data.petshop import load_scenario
from fleetmind.rca.fit_eval import bootstrap_intervals
from fleetmind.rca.fit_model import FittedGATAnalyzer, is_fit_artifact
from fleetmind.rca.petshop_baselines import METRIC_BASELINES, ScalerBaselineConfig
from fleetmind.rca.petshop_eval import default_alert_methods, evaluate_scenario
from fleetmind.training.io import write_json

METHOD_CHOICES = (
    "propagation",
    "gat",
    "gat_fit",
    "petshop_traversal",
    "baro",
    "nsigma",
    "simulated",
)


def add_arguments(p: argparse.ArgumentParser) -> None:
    """Add the ``rca petshop`` options to ``p``."""
    p.add_argument(
        "--scenario",
        required=True,
        help="PetShop scenario folder (holds graph.csv, noissue/, train/, test/)",
    )
    p.add_argument(
        "--model",
        default=None,
        help="GAT model REF (local artifact, models:/name@alias; default: the released artifact); "
        "a folder written by `fleetmind rca fit` is reported as method gat_fit, next to the "
        "released zero-shot GAT",
    )
    p.add_argument(
        "--split",
        choices=["test", "train", "all"],
        default="all",
        help="issues summarized at the top level (default all; every split is also reported under by_split)",
    )
    p.add_argument(
        "--methods",
        nargs="+",
        choices=METHOD_CHOICES,
        default=None,
        help="methods to run (default: all available; 'simulated' = the simulated-data baselines)",
    )
    p.add_argument(
        "--backend",
        choices=["auto", "rcaeval", "builtin"],
        default="auto",
        help="BARO/NSigma implementation (default auto: RCAEval when installed)",
    )
    p.add_argument(
        "--roles",
        default=None,
        help="role-map override file (YAML 'metric: role'; default DIR/roles.yaml when present)",
    )
    p.add_argument(
        "--seed", type=argtypes.seed, default=0, help="seed of randomised baselines (default 0)"
    )
    p.add_argument("--json", default=None, help="write the results JSON here")


def run(args: argparse.Namespace) -> int:
    """Handler of ``fleetmind rca petshop``; returns the exit status."""
    wanted = set(args.methods or METHOD_CHOICES)
    scenario = load_scenario(args.scenario, roles=args.roles)
    fitted = is_fit_artifact(args.model)
    alert_methods, skipped = default_alert_methods(
        model=None if fitted else args.model,
        seed=args.seed,
        gat="gat" in wanted,
        simulated="simulated" in wanted,
    )
    if args.model and not fitted and "gat" in skipped:
        # a model the user named must load; only the released default may be missing quietly
        raise ModelLoadError(f"--model {args.model}: {skipped['gat']}")
    if fitted and "gat_fit" in wanted:
        alert_methods["gat_fit"] = FittedGATAnalyzer.load(args.model)
    core = {"propagation", "gat", "gat_fit"}
    alert_methods = {
        n: m
        for n, m in alert_methods.items()
        if n in wanted or (n not in core and "simulated" in wanted)
    }
    metric_methods = {}
    for name, cls in METRIC_BASELINES.items():
        if name in wanted:
            cfg = ScalerBaselineConfig(backend=args.backend) if name in ("baro", "nsigma") else None
            metric_methods[name] = cls(cfg)
    if not scenario.issues("all"):
        raise DataError(f"{args.scenario}: no issue folders under train/ or test/")
    if args.split != "all" and not scenario.issues(args.split):
        raise DataError(f"{args.scenario}: no {args.split} issues")
    res = evaluate_scenario(scenario, "all", alert_methods, metric_methods, progress=True)
    top = res["by_split"].get(args.split, res) if args.split != "all" else res
    rows = [r for r in res["per_incident"] if args.split in ("all", r["split"])]
    intervals = bootstrap_intervals(rows, list(top["methods"]), seed=args.seed)
    payload = {
        "n_incidents": top["n_incidents"],
        "methods": top["methods"],
        "intervals": intervals,
        "scenario": str(args.scenario),
        "split": args.split,
        "skipped": {
            k: v
            for k, v in skipped.items()
            if k in wanted or (k == "simulated_baselines" and "simulated" in wanted)
        },
        **{k: v for k, v in res.items() if k not in ("n_incidents", "methods")},
        "command": "fleetmind " + " ".join(sys.argv[1:]),
        "machine": {"platform": platform.platform(), "python": platform.python_version()},
    }
    roles = res["roles"]
    print(
        f"{scenario.name}: metric roles "
        + ", ".join(
            f"{m}={r['role']}" + ("*" if r["source"] == "override" else "")
            for m, r in roles.items()
        )
        + "  (* = role map override)"
    )
    for split, block in [(args.split, top)] + [
        (s, b) for s, b in res["by_split"].items() if s != args.split
    ]:
        print(f"{scenario.name} / {split}: {block['n_incidents']} issues")
        print(
            f"  {'method':<26}{'AC@1':>7}{'AC@3':>7}{'AC@5':>7}{'Avg@5':>7}{'MRR':>7}{'ms/inc':>9}"
        )
        for name, m in block["methods"].items():
            print(
                f"  {name:<26}{m['ac@1']:>7.3f}{m['ac@3']:>7.3f}{m['ac@5']:>7.3f}{m['avg@5']:>7.3f}{m['mrr']:>7.3f}{m['ms_per_incident']:>9.2f}"
            )
    print(
        f"  bootstrap 95 % intervals ({args.split}, {intervals['_meta']['resamples']} resamples, "
        f"clustered by root: {intervals['_meta']['n_clusters']} roots):"
    )
    for name, iv in intervals.items():
        if name != "_meta":
            print(
                f"  {name:<26}AC@1 [{iv['ac@1'][0]:.3f}, {iv['ac@1'][1]:.3f}]  AC@3 [{iv['ac@3'][0]:.3f}, {iv['ac@3'][1]:.3f}]"
            )
    for name, why in payload["skipped"].items():
        print(f"  skipped {name}: {why}")
    write_json(args.json, payload)
    return 0
