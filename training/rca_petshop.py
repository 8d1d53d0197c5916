"""``fleetmind rca petshop``: the real-data RCA benchmark on a PetShop-format scenario folder.

Example::

    fleetmind rca petshop --scenario petshop/low_traffic --json out.json   # docs/data.md

Prints AC@1/3/5, Avg@5, MRR and ms per incident for every method on the chosen split (default: all
issues) and on each split, and writes the JSON of the ``rca evaluate`` contract (plus ``by_split``,
``by_fault_type``, ``per_incident`` and the published reference figures) to ``--json``.

Stops with a one-line error, before ranking, when ``--methods gat_fit`` is asked for without a model
fitted by ``rca fit``, when that model knows none of the scenario's graph nodes (fewer than half: a
warning), or when an alert-based method would rank without evidence (no baseline, no window alert).
"""

from __future__ import annotations

import argparse
import sys

from fleetmind import argtypes
from fleetmind.data.errors import ConfigError, DataError, ModelLoadError
from fleetmind.data.metric_roles import role_map_source, roles_line
from fleetmind.data.petshop import PetShopScenario, load_scenario
from fleetmind.progress import show_bar
from fleetmind.provenance import load_now, run_provenance
from fleetmind.rca.fit_eval import bootstrap_intervals
from fleetmind.rca.fit_model import FittedGATAnalyzer, fit_artifact_problem, fit_node_overlap
from fleetmind.rca.petshop_baselines import METRIC_BASELINES, ScalerBaselineConfig
from fleetmind.rca.petshop_eval import default_alert_methods, evaluate_scenario
from fleetmind.redact import terminal_safe
from fleetmind.training.io import write_json
from fleetmind.training.rca_fit import rerun_command

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


ALERT_METHODS = frozenset({"propagation", "gat", "gat_fit", "simulated"})
"""Methods that rank from the detector's alerts (the others read the metrics themselves)."""


def _warn(message: str) -> None:
    # the message quotes a scenario's own files (roles.yaml keys, folder names): outside text
    print(f"fleetmind: warning: {terminal_safe(message)}", file=sys.stderr)


def _check_model(args: argparse.Namespace) -> tuple[bool, str | None]:
    """``(fitted, why_not)``: whether ``--model`` is a folder written by ``rca fit``, else why not.

    Raises:
        ConfigError: ``gat_fit`` was named in ``--methods`` and ``--model`` is not such a folder
            (running the other methods without it would read as a complete result).
    """
    problem = fit_artifact_problem(args.model)
    if problem is None:
        return True, None
    if args.methods is not None and "gat_fit" in args.methods:
        if args.model is None:
            raise ConfigError(
                "--methods gat_fit needs --model PATH, a folder written by 'fleetmind rca fit'"
            )
        raise ConfigError(
            f"--model {args.model}: not a model fitted by 'fleetmind rca fit' ({problem})"
        )
    return False, "needs --model PATH, a folder written by 'fleetmind rca fit'"


def _load_fitted(path: str, scenario: PetShopScenario) -> FittedGATAnalyzer:
    """The ``gat_fit`` analyzer of ``path``, checked against the scenario's graph.

    Raises:
        ConfigError: none of the scenario's graph nodes is a node the model was fitted on (a model
            of another system); fewer than half of them only warn on stderr.
    """
    analyzer = FittedGATAnalyzer.load(path)
    nodes = [n.id for n in scenario.graph.nodes]
    level, message = fit_node_overlap(analyzer.meta, nodes, str(scenario.root))
    if level == "none":
        raise ConfigError(f"--model {path}: {message}")
    if level == "few":
        _warn(f"--model {path}: {message}")
    return analyzer


def run(args: argparse.Namespace) -> int:
    """Handler of ``fleetmind rca petshop``; returns the exit status."""
    load0 = load_now()
    wanted = set(args.methods or METHOD_CHOICES)
    fitted, fit_skip = _check_model(args)
    scenario = load_scenario(args.scenario, roles=args.roles)
    unmatched = scenario.unmatched_roles()
    if unmatched:
        where = role_map_source(args.scenario, args.roles)
        _warn(
            f"{where}: entries that name no metric of noissue/metrics.csv (ignored): "
            + ", ".join(unmatched)
        )
    fitted_method = _load_fitted(args.model, scenario) if fitted and "gat_fit" in wanted else None
    if wanted & ALERT_METHODS:
        scenario.check_baseline()
        scenario.check_evidence()
    alert_methods, skipped = default_alert_methods(
        model=None if fitted else args.model,
        seed=args.seed,
        gat="gat" in wanted,
        simulated="simulated" in wanted,
    )
    if args.model and not fitted and "gat" in skipped:
        # a model the user named must load; only the released default may be missing quietly
        raise ModelLoadError(f"--model {args.model}: {skipped['gat']}")
    if fitted_method is not None:
        alert_methods["gat_fit"] = fitted_method
    elif fit_skip is not None:
        skipped["gat_fit"] = fit_skip
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
    res = evaluate_scenario(scenario, "all", alert_methods, metric_methods, progress=show_bar())
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
        }
        | res.get("skipped", {}),
        **{k: v for k, v in res.items() if k not in ("n_incidents", "methods", "skipped")},
        **run_provenance(rerun_command(), load0, ("torch_geometric", "scikit-learn")),
    }
    print(roles_line(scenario.name, res["roles"]))
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
