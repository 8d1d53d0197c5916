"""``fleetmind rca ...``: root-cause analysis commands.

One small ``_add_<cmd>`` function per sub-command so that owners edit only their own block:
``generate`` / ``evaluate``, ``train`` (the GAT), ``petshop``.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shlex
import sys
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import TextIO

from fleetmind import argtypes
from fleetmind.cli.common import (
    DATASET_FILES,
    SCENARIO_FILES,
    add_group,
    model_input,
    refuse_input_as_output,
)
from fleetmind.data.errors import ConfigError
from fleetmind.progress import bar_disable
from fleetmind.provenance import graphs_sha256, load_now, run_provenance
from fleetmind.redact import safe_uri, terminal_safe
from fleetmind.training.io import write_json


def register(subparsers: argparse._SubParsersAction, name: str, help_text: str) -> None:
    _, sub = add_group(subparsers, name, help_text)
    _add_generate(sub)
    _add_train(sub)
    _add_evaluate(sub)
    _add_petshop(sub)
    _add_fit(sub)
    _add_calibrate(sub)


# ---------------------------------------------------------------------------------------- generate
_KNOB_FLAGS: tuple[tuple[str, type, str], ...] = (
    (
        "--silent-root-rate",
        float,
        "share of incidents whose root raises no alert (default 0.2, hard 0.35)",
    ),
    ("--noise-per-node", float, "background alerts per graph node (default 0.006, hard 0.015)"),
    ("--noise-min", int, "fewest background alerts per incident (default 2, hard 5)"),
    ("--flap-fraction", float, "share of background alerts that flap (default 0.3)"),
    (
        "--second-incident-rate",
        float,
        "chance of an unrelated older incident in the window (default 0.1, hard 0.3)",
    ),
    ("--storm-copies", int, "extra per-route copies of a hub alert, at most (default 4, hard 8)"),
    ("--storm-pod-prob", float, "chance each pod of a hub repeats its alert (default 0.3)"),
    ("--jitter-s", float, "timestamp jitter std in seconds (default 5, hard 20)"),
    ("--scrape-interval-s", float, "Prometheus scrape interval (default 30)"),
    ("--eval-interval-s", float, "rule evaluation interval (default 30)"),
    ("--for-scale", float, "multiplier on every rule's for: duration (default 1)"),
    ("--window-s", float, "incident window after the fault onset (default 1800)"),
    ("--resolve-prob", float, "chance a symptom alert resolved within the window (default 0.1)"),
)
"""The alert simulator's knobs as flags: ``(flag, type, help)``; each defaults to the preset's value."""


def _add_generate(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "generate",
        help="simulate incidents (Alertmanager v4 alerts + ground truth) on generated multi-cluster fleets",
        description="Write a dataset folder: {train,val,test,test_large}.jsonl + graphs/<graph>.json + meta.json. "
        "Splits never share a topology; test_large uses graphs with more clusters than any training graph.",
    )
    p.add_argument(
        "--out",
        required=True,
        help="output folder: new, empty, or an earlier dataset (its split files are replaced); "
        "a folder holding other files is refused",
    )
    p.add_argument(
        "--incidents",
        type=int,
        default=1000,
        help="incidents in train+val+test, split 70/15/15 (default 1000); test_large adds --large-fraction of this",
    )
    p.add_argument("--seed", type=argtypes.seed, default=0, help="master seed (default 0)")
    p.add_argument(
        "--difficulty",
        choices=["default", "hard"],
        default="default",
        help="knob preset (default: default)",
    )
    p.add_argument(
        "--graphs",
        type=int,
        default=None,
        help="training topologies (val/test get a fifth each; default scales with --incidents)",
    )
    p.add_argument(
        "--min-nodes", type=int, default=None, help="smallest graph node budget (default 200)"
    )
    p.add_argument(
        "--max-nodes", type=int, default=None, help="largest graph node budget (default 3000)"
    )
    p.add_argument(
        "--min-clusters", type=int, default=None, help="fewest clusters per graph (default 2)"
    )
    p.add_argument(
        "--max-clusters",
        type=int,
        default=None,
        help="most clusters; test_large uses exactly this many, the other splits fewer (default 6)",
    )
    p.add_argument(
        "--large-fraction",
        type=float,
        default=0.1,
        help="test_large incidents as a share of --incidents; 0 disables (default 0.1)",
    )
    p.add_argument(
        "--workers", type=int, default=None, help="worker processes (default min(2, cpus))"
    )
    k = p.add_argument_group("alert simulator knobs (override the --difficulty preset)")
    for flag, kind, help_text in _KNOB_FLAGS:
        k.add_argument(flag, type=kind, default=None, help=help_text)
    p.set_defaults(func=_generate)


_KNOBS = (
    "silent_root_rate",
    "noise_per_node",
    "noise_min",
    "flap_fraction",
    "second_incident_rate",
    "storm_copies",
    "storm_pod_prob",
    "jitter_s",
    "scrape_interval_s",
    "eval_interval_s",
    "for_scale",
    "window_s",
    "resolve_prob",
)


def _generate(args: argparse.Namespace) -> int:
    argtypes.refuse_stdout(args.out, "--out", no_json=True)  # "-": one line, not a folder ./-
    from dataclasses import replace

    from tqdm import tqdm

    from fleetmind.data.rca_gen.alerts import AlertSimConfig
    from fleetmind.data.rca_gen.generate import DatasetSpec, _jobs, generate_dataset
    from fleetmind.data.rca_gen.graphs import GraphGenConfig

    sim = AlertSimConfig.preset(args.difficulty, **{k: getattr(args, k) for k in _KNOBS})
    gc = GraphGenConfig()
    gc = replace(
        gc,
        **{
            k: v
            for k, v in {
                "min_nodes": args.min_nodes,
                "max_nodes": args.max_nodes,
                "min_clusters": args.min_clusters,
                "max_clusters": args.max_clusters,
            }.items()
            if v is not None
        },
    )
    n_graphs = None
    if args.graphs is not None:
        n_eval = max(1, args.graphs // 5)
        n_graphs = (args.graphs, n_eval, n_eval)
    spec = DatasetSpec(
        n_incidents=args.incidents,
        seed=args.seed,
        sim=sim,
        graphs=gc,
        n_graphs=n_graphs,
        large_fraction=args.large_fraction,
        workers=args.workers,
    )
    spec.check()
    total = sum(n for _, _, n in _jobs(spec))
    with tqdm(total=total, desc="rca generate", unit="inc", disable=bar_disable()) as bar:
        meta = generate_dataset(args.out, spec, progress=bar.update)
    counts = meta["counts"]
    n_graphs_total = sum(len(v) for v in meta["split_graphs"].values())
    print(
        f"wrote {args.out}: {sum(counts.values())} incidents on {n_graphs_total} topologies, "
        f"in {len(counts)} splits:"
    )
    for split, n in counts.items():
        what = {
            "train": "training",
            "val": "validation (model selection)",
            "test": "test, on topologies unseen in training",
            "test_large": f"extra test on larger fleets (--large-fraction {args.large_fraction:g})",
        }.get(split, "")
        print(f"  {split + '.jsonl':<18}{n:>6}  {what}")
    return 0


# ---------------------------------------------------------------------------------------- train
def _add_train(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "train",
        help="train the GAT root-cause ranker (Lightning), log to MLflow, register fleetmind-rca",
        description="Train the GAT on a dataset folder; MLflow tracking (MLFLOW_TRACKING_URI or "
        "sqlite:///mlflow.db), registers fleetmind-rca and moves @champion when val AC@1 improves on the same validation set.",
    )
    p.set_defaults(func=_train)
    from fleetmind.training.rca_train import add_arguments

    add_arguments(p)


def _train(args: argparse.Namespace) -> int:
    from fleetmind.training.rca_train import cli
    from fleetmind.training.tracking import tracking_uri

    refuse_input_as_output(
        args.json,
        "--json",
        [
            ("--data", args.data, DATASET_FILES),
            ("--feedback-db", args.feedback_db, ()),
            ("--tracking-uri", tracking_uri(args.tracking_uri), ()),
        ],
    )
    # before any work (docs/layout.md): not after the fit, the MLflow run and the registration
    argtypes.check_writable_file(args.json, "--json")
    if args.release is not None:
        check_model_folder(args.release, "--release")
        refuse_output_in_folder(args.json, "--json", args.release, "--release")
    return cli(args)


def check_model_folder(folder: str | os.PathLike[str], flag: str) -> None:
    """Check, before any work, that the model folder ``folder`` (given as ``flag``) can be
    written: a folder this process may write in, or a path that can be created.

    Raises:
        ConfigError: one line naming ``flag``, the path and what blocks it.
    """
    p = Path(folder)
    if p.exists():
        if not p.is_dir():
            raise ConfigError(f"{flag} {p}: a file is there; {flag} names a model folder")
        problem = argtypes.write_problem(p, os.W_OK | os.X_OK)
        if problem:
            raise ConfigError(f"{flag} {p}: cannot write in it ({problem})")
        return
    argtypes.check_creatable(p, flag)


def refuse_output_in_folder(
    out: str | os.PathLike[str] | None,
    flag: str,
    folder: str | os.PathLike[str] | None,
    folder_flag: str,
) -> None:
    """Refuse, before any work, an output file ``out`` (given as ``flag``) that lies in the model
    folder ``folder`` (``folder_flag``) the same command writes: writing it would replace a file
    of the model (``--json D/config.json``) or the folder itself. Paths are compared resolved
    (symbolic links, ``..``), and a file already there also by identity (a hard link to one of the
    folder's files). Nothing when either is ``None``, nor for ``--json -`` (stdout).

    Raises:
        ConfigError: one line naming both options and the paths.
    """
    if out is None or folder is None or (flag == "--json" and argtypes.is_stdout(out)):
        return  # --json -: stdout, not the file ./-
    where = os.path.realpath(folder)
    real = os.path.realpath(out)
    inside = os.path.commonpath([where, real]) == where
    if not inside and os.path.isfile(out) and os.path.isdir(folder):
        st = os.stat(out)
        with contextlib.suppress(OSError):
            inside = any(os.path.samestat(st, e.stat()) for e in os.scandir(folder) if e.is_file())
    if inside:
        raise ConfigError(
            f"{flag} {out} is in the model folder {folder_flag} {folder}, which this command "
            "writes; choose a path outside it"
        )


# ---------------------------------------------------------------------------------------- evaluate
def _add_evaluate(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "evaluate",
        help="rank root causes with every method on a dataset split; AC@1/3/5, Avg@5, MRR",
        description="Evaluate baselines (and registered methods such as the GAT) on the incidents of one split.",
    )
    p.add_argument("--data", default=None, help="dataset folder (fleetmind rca generate --out)")
    p.add_argument(
        "--split", default="test", help="split to evaluate (default test; e.g. test_large)"
    )
    p.add_argument(
        "--feedback-db",
        default=None,
        metavar="URL",
        help="evaluate on the incidents engineers confirmed or corrected in the service's "
        "database (instead of --data)",
    )
    p.add_argument(
        "--feedback-since",
        default=None,
        metavar="WHEN",
        help="with --feedback-db: only feedback given at or after WHEN (ISO 8601 date or "
        "date-time, UTC without an offset), e.g. the --feedback-until of the training run, so "
        "that the incidents test the model rather than its training",
    )
    p.add_argument(
        "--feedback-until",
        default=None,
        metavar="WHEN",
        help="with --feedback-db: only feedback given before WHEN",
    )
    p.add_argument(
        "--methods",
        nargs="+",
        default=None,
        help="methods to run (default: every registered method, incl. the learned baselines "
        "name_table, node_gbdt and hop2_gbdt, fitted on --data's train split and cached in "
        "DATA/.fleetmind_cache)",
    )
    p.add_argument(
        "--model",
        default=None,
        help="model REF for learned methods (local path or models:/name@alias)",
    )
    p.add_argument("--limit", type=int, default=None, help="evaluate only the first N incidents")
    p.add_argument(
        "--seed", type=argtypes.seed, default=0, help="seed of randomised methods (default 0)"
    )
    p.add_argument("--json", default=None, help="write the results JSON here")
    p.set_defaults(func=_evaluate)


def _evaluate(args: argparse.Namespace) -> int:
    from fleetmind.data.errors import ConfigError, DataError
    from fleetmind.data.rca_dataset import load_dataset
    from fleetmind.rca.metrics import evaluate_methods, make_analyzers
    from fleetmind.training.rca_feedback import feedback_period

    load_start = _load_now()
    period = feedback_period(args)  # refused without --feedback-db, or not a date
    refuse_input_as_output(
        args.json,
        "--json",
        [
            ("--data", args.data, DATASET_FILES),
            ("--feedback-db", args.feedback_db, ()),
            model_input(args.model, _released_gat()),
        ],
    )
    argtypes.check_writable_file(args.json, "--json")  # before minutes of evaluation
    if args.feedback_db:
        from fleetmind.serving.feedback import feedback_incidents

        if args.data:
            raise ConfigError("give --data or --feedback-db, not both")
        incidents, graphs = feedback_incidents(args.feedback_db, *period)
        args.split = "feedback"
    elif args.data:
        ds = load_dataset(args.data, [args.split])  # only this split: the others may be huge
        incidents, graphs = ds.split(args.split), ds.graphs
    else:
        raise ConfigError("--data DIR or --feedback-db URL is required")
    if args.limit is not None:
        if args.limit < 1:
            raise ConfigError(f"--limit must be >= 1, got {args.limit}")
        incidents = incidents[: args.limit]
    if not incidents:  # AC@1 0.000 over nothing would read as a model that fails
        source = "the feedback database" if args.feedback_db else f"dataset {args.data}"
        if any(t is not None for t in period):
            source += " in the period asked for (--feedback-since / --feedback-until)"
        raise DataError(f"split {args.split!r} of {source} has no incidents to evaluate")
    analyzers = make_analyzers(
        args.methods, model=args.model, seed=args.seed, data=args.data or None
    )
    from fleetmind.progress import show_bar

    inputs = _evaluate_inputs(args, analyzers)  # hashed before the runs: the bytes they read
    res = evaluate_methods(incidents, analyzers, graphs, progress=show_bar())
    if args.feedback_db:
        from fleetmind.training.rca_feedback import safe_url

        res["data"] = safe_url(args.feedback_db)
        res["feedback"] = {
            "since": getattr(args, "feedback_since", None),
            "until": getattr(args, "feedback_until", None),
            "used_by_training": _used_by_training(incidents, analyzers),
        }
    else:
        res["data"] = str(args.data)
    res["split"] = args.split
    res.update(inputs)
    # the file before the screen: a reader that stops early (| head) does not cost the file
    if args.json is not None:
        write_json(args.json, {**_evaluate_provenance(args, load_start), **res})
    print(
        f"{args.split}: {res['n_incidents']} incidents, {res['n_silent_root']} with a silent root"
    )
    for name, used in res.get("feedback", {}).get("used_by_training", {}).items():
        how = (
            "for those this measures the training fit, not a test" if used["n"] else "a test of it"
        )
        print(
            f"  ({used['n']} of them used by training run {used['run']} of the {name} model: {how})"
        )
    print(
        f"{'method':<14}{'AC@1':>8}{'AC@3':>8}{'AC@5':>8}{'Avg@5':>8}{'MRR':>8}{'ms/inc':>9}"
        f"{'AC@1 silent':>13}{'non-silent':>12}"
    )
    for name, m in res["methods"].items():
        br = m["by_root"]
        print(
            f"{name:<14}{m['ac@1']:>8.3f}{m['ac@3']:>8.3f}{m['ac@5']:>8.3f}{m['avg@5']:>8.3f}{m['mrr']:>8.3f}{m['ms_per_incident']:>9.2f}"
            f"{_cell(br['silent']['ac@1'], 13)}{_cell(br['non_silent']['ac@1'], 12)}"
        )
    return 0


def _evaluate_inputs(args: argparse.Namespace, analyzers: dict) -> dict:
    """The inputs ``rca evaluate --json`` records after the metrics, each file as given, with its
    absolute path and SHA-256 (:func:`fleetmind.provenance.input_file`), so that a result says
    which bytes it scored when ``--data`` is a relative path or a folder regenerated since:
    ``data_abs`` and ``split_file`` (the ``--data`` folder, absolute, and its ``<split>.jsonl``),
    ``graphs_sha256`` (:func:`fleetmind.provenance.graphs_sha256` of its ``graphs/``: the topologies every method
    ranks on, which the records only name) and ``train_file`` (its ``train.jsonl``, which the
    learned baselines of :data:`fleetmind.rca.metrics.DATA_TRAINED` fit on; null when none
    runs), all null with ``--feedback-db``; and ``model``: for the GAT (``gat``) when it runs,
    its ``model.pt`` (``given``: ``--model`` or the released folder; an MLflow URI has no local
    file: ``path`` and ``sha256`` null, ``given`` with any password masked, ``version`` the
    registry version it loaded), else null."""
    from fleetmind.provenance import input_file
    from fleetmind.rca.metrics import DATA_TRAINED

    out: dict = {"data_abs": None, "split_file": None, "graphs_sha256": None, "train_file": None}
    out["model"] = None
    if args.data and not args.feedback_db:
        root = Path(args.data)
        out["data_abs"] = str(root.resolve())
        split = root / f"{args.split}.jsonl"
        out["split_file"] = input_file(str(split), split)
        out["graphs_sha256"] = graphs_sha256(root)
        train = root / "train.jsonl"
        if any(name in DATA_TRAINED for name in analyzers) and train.is_file():
            out["train_file"] = input_file(str(train), train)
    gat = analyzers.get("gat")
    if gat is not None:
        from fleetmind.data.mlflow_store import is_mlflow_uri
        from fleetmind.rca.gat_analyzer import _resolve_ref  # the folder the loader read

        given = str(args.model) if args.model else _released_gat()
        if is_mlflow_uri(given):
            entry = {"given": safe_uri(given), "path": None, "sha256": None, "version": gat.version}
        else:
            entry = input_file(given, _resolve_ref(args.model) / "model.pt")
        out["model"] = {"gat": entry}
    return out


def _used_by_training(incidents: list[dict], analyzers: dict) -> dict[str, dict]:
    """Per method whose model records the feedback its training used (``rca train
    --feedback-db`` writes it to the artifact's ``config.json``, ``data.feedback``): the run, the
    database it read (password masked) and how many of ``incidents`` it trained on, by id
    (``feedback-<incident id>``: ids of another database would match too)."""
    ids = {str(inc["id"]) for inc in incidents}
    out = {}
    for name, an in analyzers.items():
        meta = getattr(an, "meta", None)
        data = meta.get("data") if isinstance(meta, dict) else None
        fb = data.get("feedback") if isinstance(data, dict) else None
        if not isinstance(fb, dict) or not isinstance(fb.get("incidents"), list):
            continue
        used = sorted(ids & {str(i) for i in fb["incidents"]})
        run = fb.get("run") or fb.get("run_id") or "?"
        out[name] = {
            "run": run,
            "run_id": fb.get("run_id"),
            "db": fb.get("db"),
            "n": len(used),
            "incidents": used,
        }
    return out


_load_now = load_now


def _evaluate_command(args: argparse.Namespace) -> str:
    """The ``fleetmind rca evaluate`` line that reruns ``args``, quoted for a POSIX shell
    (``shlex.join``), a database URL's password masked."""
    out = ["fleetmind", "rca", "evaluate"]
    if args.feedback_db:
        from fleetmind.serving.db import shown_url

        out += ["--feedback-db", shown_url(args.feedback_db)]
        for flag, value in (
            ("--feedback-since", getattr(args, "feedback_since", None)),
            ("--feedback-until", getattr(args, "feedback_until", None)),
        ):
            if value is not None:
                out += [flag, value]
    else:
        out += ["--data", str(args.data), "--split", args.split]
    if args.methods:
        out += ["--methods", *args.methods]
    if args.model:
        out += ["--model", safe_uri(args.model)]
    if args.limit is not None:
        out += ["--limit", str(args.limit)]
    out += ["--seed", str(args.seed), "--json", str(args.json)]
    return shlex.join(out)


def _evaluate_provenance(args: argparse.Namespace, load_start: list[float] | None) -> dict:
    """The provenance keys a benchmark result starts with
    (:func:`fleetmind.provenance.run_provenance`; versions of PyG and scikit-learn besides)."""
    return run_provenance(_evaluate_command(args), load_start, ("torch_geometric", "scikit-learn"))


def _cell(value: float | None, width: int) -> str:
    """A metric right-aligned in ``width`` columns, three decimals; ``-`` when it is undefined
    (``None``: a subset without incidents)."""
    return f"{'-' if value is None else format(value, '.3f'):>{width}}"


# ---------------------------------------------------------------------------------------- petshop
def _add_petshop(sub: argparse._SubParsersAction) -> None:
    from fleetmind.training.rca_petshop import add_arguments

    p = sub.add_parser(
        "petshop",
        help="real-data benchmark on a PetShop scenario folder (GAT, propagation ranker, traversal, BARO, NSigma)",
        description="Metrics -> alerts -> ranked root causes on every issue of a PetShop-format scenario folder.",
    )
    add_arguments(p)
    p.set_defaults(func=_cmd_petshop)


def _cmd_petshop(args: argparse.Namespace) -> int:
    from fleetmind.training.rca_petshop import run

    refuse_input_as_output(
        args.json,
        "--json",
        [
            ("--scenario", args.scenario, SCENARIO_FILES),
            ("--roles", args.roles, ()),
            model_input(getattr(args, "model", None), _released_gat()),
        ],
    )
    argtypes.check_writable_file(args.json, "--json")  # before the scenario's work
    with _scenario_warnings():
        return run(args)


@contextlib.contextmanager
def _scenario_warnings() -> Iterator[None]:
    """Print each :class:`fleetmind.data.petshop.ScenarioWarning` once, as it is raised, as one
    ``fleetmind: warning:`` line on stderr (the same window is read more than once); other
    warnings show as Python shows them."""
    from tqdm import tqdm

    from fleetmind.data.petshop import ScenarioWarning

    seen: set[str] = set()
    show = warnings.showwarning

    def _show(
        message: Warning | str,
        category: type[Warning],
        filename: str,
        lineno: int,
        file: TextIO | None = None,
        line: str | None = None,
    ) -> None:
        if not issubclass(category, ScenarioWarning):
            show(message, category, filename, lineno, file, line)
            return
        text = terminal_safe(" ".join(str(message).split()))  # scenario folder and node names
        if text not in seen:
            seen.add(text)
            tqdm.write(f"fleetmind: warning: {text}", file=sys.stderr)  # above a progress bar

    with warnings.catch_warnings():
        warnings.simplefilter("always", ScenarioWarning)
        warnings.showwarning = _show
        yield


# ---------------------------------------------------------------------------------------- fit
def _add_fit(sub: argparse._SubParsersAction) -> None:
    from fleetmind.training.rca_fit import add_arguments

    p = sub.add_parser(
        "fit",
        help="train a GAT for one real system from its call graph and normal-period metrics (no labels)",
        description="Reads only DIR/graph.csv and DIR/noissue/metrics.csv: synthesises incidents on the "
        "graph by injecting faults into normal windows, alerts them with the PetShop detector, trains.",
    )
    add_arguments(p)
    p.set_defaults(func=_cmd_fit)


def _cmd_fit(args: argparse.Namespace) -> int:
    from fleetmind.training.rca_fit import run

    refuse_input_as_output(
        args.json,
        "--json",
        [("--scenario", args.scenario, SCENARIO_FILES), ("--roles", args.roles, ())],
    )
    refuse_output_in_folder(args.json, "--json", args.out, "--out")
    return run(args)


# ---------------------------------------------------------------------------------------- calibrate
def _add_calibrate(sub: argparse._SubParsersAction) -> None:
    from fleetmind.training.rca_calibrate import add_arguments

    p = sub.add_parser(
        "calibrate",
        help="fit the GAT's score temperature on a validation split; report calibration error",
        description="Temperature scaling (one parameter, ranking unchanged) fitted on --split by the "
        "true root's log-likelihood; reports the top score's expected calibration error before and "
        "after; --write stores it in the artifact's config.json.",
    )
    add_arguments(p)
    p.set_defaults(func=_cmd_calibrate)


def _cmd_calibrate(args: argparse.Namespace) -> int:
    from fleetmind.training.rca_calibrate import run

    refuse_input_as_output(
        args.json,
        "--json",
        [("--data", args.data, DATASET_FILES), model_input(args.model, _released_gat())],
    )
    argtypes.check_writable_file(args.json, "--json")
    return run(args)


def _released_gat() -> str:
    """The folder of the released GAT (``fleetmind.rca.gat_analyzer.RELEASED_DIR``), which the
    commands read when ``--model`` is not given."""
    from fleetmind.rca import gat_analyzer

    return str(gat_analyzer.RELEASED_DIR)
