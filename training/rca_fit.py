"""``fleetmind rca fit``: a GAT for one real system from its call graph and normal-period metrics only.

Example::

    fleetmind rca fit --scenario petshop/low_traffic --out models/fit/low_traffic
    fleetmind rca petshop --scenario petshop/low_traffic --model models/fit/low_traffic

What it reads, and nothing else: ``DIR/graph.csv`` (the call graph) and ``DIR/noissue/metrics.csv`` (the
normal period). It never lists or opens ``train/``, ``test/``, any issue window or any ``target.json``
(``tests/test_rca_fit.py`` fails if it does). It synthesises labelled incidents on that graph
(:mod:`fleetmind.data.synth_incidents`: faults injected into normal-period windows, alerts from the adapter's
detector), trains :class:`fleetmind.rca.model.GATRanker` on per-node alert features (:mod:`fleetmind.rca.fit_model`) with the
listwise loss, keeps the epoch with the best AC@1 on a second, independently seeded set of synthetic
incidents, and writes the model folder ``--out``.

Defaults are one set of settings for every system (no per-system tuning): 4,000 training and 666
validation incidents, 3 GATv2 layers of 64 channels, 20 epochs of Adam (lr 3e-3, batch 64 graphs).

Before any training, ``--out`` (:func:`check_out_dir`: new, empty, or an earlier fit's folder) and
``--json`` (:func:`check_json_path`) are checked, and the normal period must have at least 30 rows
(:func:`check_normal_rows`), 1 s to 5 min apart (:func:`fleetmind.data.petshop.check_row_interval`).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import platform
import shlex
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from fleetmind import argtypes
from fleetmind.argtypes import check_creatable, check_writable_file
from fleetmind.data.errors import ConfigError, DataError
from fleetmind.data.graph import DependencyGraph
from fleetmind.data.metric_roles import (
    RoleMap,
    check_role_map,
    role_map_source,
    roles_line,
    scenario_role_map,
)
from fleetmind.data.petshop import (
    DetectorConfig,
    check_row_interval,
    fit_baseline,
    gap_warning,
    mark_no_baseline,
    match_nodes,
    metrics_without_baseline,
    no_baseline_warning,
    read_graph_csv,
    read_metrics_csv,
)
from fleetmind.data.synth_incidents import SynthConfig, SynthIncident, SystemModel
from fleetmind.progress import bar_disable
from fleetmind.rca.base import torch_threads
from fleetmind.rca.fit_model import (
    NUM_FIT_FEATURES,
    fit_artifact_problem,
    fit_features,
    load_fit_model,
    model_inputs,
    save_fit_artifact,
)
from fleetmind.redact import safe_uri, terminal_safe
from fleetmind.training.io import write_json

if TYPE_CHECKING:
    import torch


@dataclass
class FitArgs:
    """Settings of :func:`fit` (CLI flags of the same names).

    Attributes:
        scenario: scenario folder (``graph.csv`` + ``noissue/metrics.csv``).
        out: output model folder.
        incidents: synthetic training incidents (validation gets a sixth as many, another seed).
        epochs: training epochs (the best on synthetic validation AC@1 is kept).
        batch: graphs per step.
        lr: Adam learning rate.
        hidden / layers / heads: network size (:class:`fleetmind.rca.model.GATConfig`).
        seed: seed of synthesis, initialisation and shuffling.
        threads: torch intra-op threads (``None``: torch's default; 1, the default, is the fastest
            for these small graphs on a shared machine).
        roles: a role-map override file (default ``DIR/roles.yaml`` when present; else roles are
            detected from metric names).
    """

    scenario: str
    out: str
    incidents: int = 4000
    epochs: int = 20
    batch: int = 64
    lr: float = 3e-3
    hidden: int = 64
    layers: int = 3
    heads: int = 4
    seed: int = 0
    threads: int | None = 1
    roles: str | None = None


def read_system(scenario: str | Path) -> tuple[Any, Any]:
    """The graph and metric files ``rca fit`` reads: ``(graph, normal metrics)`` of a scenario folder
    (the role map, :func:`fleetmind.data.metric_roles.scenario_role_map`, is the only other file).

    Raises:
        DataError: folder, ``graph.csv`` or ``noissue/metrics.csv`` missing or malformed (an
            ``inf`` value, a repeated timestamp: :func:`fleetmind.data.petshop.read_metrics_csv`).
    """

    root = Path(scenario)
    if not root.is_dir():
        raise DataError(f"scenario folder not found: {root}")
    graph = read_graph_csv(root / "graph.csv", name=root.name)
    normal = read_metrics_csv(root / "noissue" / "metrics.csv", unique_times=True)
    return graph, normal


def check_normal_rows(normal: Any, path: str | Path, config: DetectorConfig) -> None:
    """Check that the normal period has at least ``config.min_normal_points`` rows (30 by default):
    a metric needs that many values for a baseline, so a shorter period gives the synthesiser no
    node to inject faults into.

    Raises:
        DataError: naming the file, its row count and the minimum.
    """
    need = config.min_normal_points
    if len(normal) < need:
        raise DataError(
            f"{path}: the normal period has {len(normal)} rows; rca fit needs at least {need} "
            "(a metric's baseline needs that many values)"
        )


def check_out_dir(out: str | Path) -> None:
    """Check that ``out`` can hold the fitted model without overwriting anything else: a new or
    empty folder, or a model folder an earlier ``rca fit`` wrote (replaced), in a writable place.

    Raises:
        ConfigError: ``out`` is a file, a non-empty folder that is not a fitted model (e.g. the
            released GAT in ``models/rca``), or not writable.
    """
    p = Path(out)
    if p.exists():
        if not p.is_dir():
            raise ConfigError(f"--out {p}: a file is there; --out names a model folder")
        problem = fit_artifact_problem(p)
        if problem is not None and any(p.iterdir()):
            raise ConfigError(
                f"--out {p}: a non-empty folder that is not a model written by 'fleetmind rca fit' "
                f"({problem}); name a new or empty folder"
            )
        problem = argtypes.write_problem(p, os.W_OK | os.X_OK)
        if problem:
            raise ConfigError(f"--out {p}: cannot write in it ({problem})")
        return
    check_creatable(p, "--out")


def check_json_path(path: str | Path | None) -> None:
    """Check that the summary file ``path`` (``--json``; ``None``: none is written) can be written.

    Raises:
        ConfigError: ``path`` is a folder, or its folder cannot be created or written.
    """
    check_writable_file(path, "--json")


def _features(system: Any, incs: list[Any]) -> tuple[np.ndarray, np.ndarray]:

    x = np.stack(
        [fit_features(system.graph, i.alerts, system.observed, system.config.roles) for i in incs]
    )
    y = np.array([i.root for i in incs], dtype=np.int64)
    return x, y


def _checked_system(args: FitArgs) -> tuple[DependencyGraph, Any, RoleMap]:
    """The scenario's graph, normal period and role map, checked (:func:`fit` says how); what
    is read but suspect is warned about on stderr: metrics none of whose columns has a baseline
    (:func:`fleetmind.data.petshop.no_baseline_warning`; none at all is an error), role-map entries
    that name no metric, gaps in
    the normal period's rows (:func:`fleetmind.data.petshop.gap_warning`: synthetic windows are
    cut from consecutive rows), and node names that are not graph nodes (their columns are left
    out; :meth:`fleetmind.data.petshop.NodeMatch.warning`)."""
    graph, normal = read_system(args.scenario)
    normal_csv = Path(args.scenario) / "noissue" / "metrics.csv"
    check_normal_rows(normal, normal_csv, DetectorConfig())
    times = normal.index.to_numpy(dtype=float)
    check_row_interval(times, normal_csv)
    roles = scenario_role_map(args.scenario, args.roles)
    where = role_map_source(args.scenario, args.roles) or "role map"
    unmatched = check_role_map(roles, normal.columns.get_level_values(1), where)
    cfg = DetectorConfig(roles=roles)
    baseline = fit_baseline(normal, cfg)
    if len(baseline.median) == 0:
        most = int(normal.notna().sum().max()) if normal.shape[1] else 0
        raise DataError(
            f"{normal_csv}: no metric column has a baseline: one needs at least "
            f"{cfg.min_normal_points} non-NaN values and the most any column has is {most} (of "
            f"{len(normal)} rows)"
        )
    notes = [
        no_baseline_warning(
            normal_csv, metrics_without_baseline(normal, baseline), cfg.min_normal_points
        ),
        f"{where}: entries that name no metric of noissue/metrics.csv (ignored): "
        + ", ".join(unmatched)
        if unmatched
        else None,
        gap_warning(times, normal_csv),
        match_nodes(normal.columns.get_level_values(0), graph).warning(normal_csv),
    ]
    for message in notes:
        if message is not None:  # quotes the scenario's roles.yaml keys and names: outside text
            print(f"fleetmind: warning: {terminal_safe(message)}", file=sys.stderr)
    return graph, normal, roles


def fit(args: FitArgs, progress: bool = False) -> dict[str, Any]:
    """Synthesise incidents, train, keep the best epoch, write the model folder.

    ``args.out`` is checked first (:func:`check_out_dir`), and the normal period's rows must be 1 s
    to 5 min apart (:func:`fleetmind.data.petshop.check_row_interval`, as for issue windows) and at
    least ``min_normal_points`` (30) (:func:`check_normal_rows`); role-map entries that name no
    metric of the normal period, gaps of more than 10 x the median row interval and node names
    that are not graph nodes are warned about on stderr (:func:`_checked_system`).

    Raises:
        DataError: unreadable or malformed inputs, a normal period of fewer than 30 rows or whose
            rows are too close or too far apart (or in milliseconds), a normal period none of
            whose columns has 30 non-NaN values (no baseline), or a role map none of whose
            entries names a metric.
        ConfigError: ``args.out`` cannot be written or would overwrite something else, or
            ``args.threads`` is below 1.

    Returns:
        ``{"out", "version", "metrics": {"val_ac1", "val_ac3", "val_mrr", "best_epoch"}, "counts",
        "timing_s": {"synthesis", "training", "total"}, "settings", "roles", "not_in_graph"}``
        (``not_in_graph``: :meth:`fleetmind.data.petshop.NodeMatch.to_dict` of the normal period,
        also in the model's ``config.json`` under ``fit``).
    """
    t_start = time.perf_counter()
    check_out_dir(args.out)
    if args.threads is not None and args.threads < 1:
        raise ConfigError(f"--threads must be a positive integer, got {args.threads}")
    # the process gets its own thread count back on return (fit is also a library call)
    with torch_threads(args.threads) if args.threads else contextlib.nullcontext():
        return _fit(args, progress, t_start)


def _fit(args: FitArgs, progress: bool, t_start: float) -> dict[str, Any]:
    """:func:`fit` after its checks; ``t_start``: its ``time.perf_counter()`` at the start (s)."""
    graph, normal, roles = _checked_system(args)
    system = SystemModel(graph, normal, DetectorConfig(roles=roles))
    train, val = _synthesise(system, args, progress)
    xtr, ytr = _features(system, train)
    xva, yva = _features(system, val)
    t_synth = time.perf_counter() - t_start

    model, history, best_epoch, best = _train(args, graph, (xtr, ytr), (xva, yva), progress)
    t_total = time.perf_counter() - t_start
    meta = {
        "fit": {
            "reads": ["graph.csv", "noissue/metrics.csv"]
            + (["role map"] if roles.overrides else []),
            "roles": mark_no_baseline(
                roles.report(normal.columns.get_level_values(1)),
                metrics_without_baseline(normal, system.baseline),
            ),
            "not_in_graph": system.nodes.to_dict(),
            "settings": asdict(args) | {"out": None, "scenario": None},
            "synthetic_incidents": {"train": len(train), "val": len(val)},
            "best_epoch": best_epoch,
            "val": best,
        }
    }
    meta["roles"] = roles.to_dict()
    out = save_fit_artifact(model, args.out, graph, system.observed, meta)

    _, saved = load_fit_model(out)
    return {
        "out": str(out),
        "version": saved["version"],
        "run_id": None,
        "metrics": {
            "val_ac1": best["ac1"],
            "val_ac3": best["ac3"],
            "val_mrr": best["mrr"],
            "best_epoch": best_epoch,
        },
        "counts": {
            "nodes": graph.num_nodes,
            "edges": int(graph.num_edges),
            "normal_rows": int(len(normal)),
            "train_incidents": len(train),
            "val_incidents": len(val),
        },
        "timing_s": {
            "synthesis": t_synth,
            "training": t_total - t_synth,
            "total": t_total,
        },
        "history": history,
        "settings": asdict(args),
        "roles": meta["fit"]["roles"],
        "not_in_graph": meta["fit"]["not_in_graph"],
    }


def _synthesise(
    system: SystemModel, args: FitArgs, progress: bool
) -> tuple[list[SynthIncident], list[SynthIncident]]:
    """The training incidents (``args.incidents``, seed ``args.seed``) and the validation incidents
    (a sixth as many, at least 200, from an independent seed) on ``system``."""
    n_val = max(200, args.incidents // 6)
    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(
            total=args.incidents + n_val,
            desc="synthesise",
            unit="inc",
            disable=bar_disable(),  # on a terminal only: `rca fit > log 2>&1` keeps its epoch lines
        )
    upd = bar.update if bar is not None else None
    train = list(system.incidents(SynthConfig(n_incidents=args.incidents, seed=args.seed), upd))
    val = list(system.incidents(SynthConfig(n_incidents=n_val, seed=args.seed + 10_007), upd))
    if bar is not None:
        bar.close()
    return train, val


@dataclass
class _GraphBatch:
    """Batches of one graph: ``b`` copies of its edges, offset by ``n`` nodes per copy.

    Attributes:
        edge_index: ``(2, E)`` long, the graph's edges (:func:`fleetmind.rca.fit_model.model_inputs`).
        edge_type: ``(E,)`` long, their kinds.
        n: nodes per graph.
    """

    edge_index: torch.Tensor
    edge_type: torch.Tensor
    n: int

    def inputs(self, b: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(edge_index (2, b*E), edge_type (b*E,), batch (b*n,))`` of ``b`` copies."""
        import torch

        ei, et, n = self.edge_index, self.edge_type, self.n
        off = (torch.arange(b) * n).repeat_interleave(ei.size(1))
        return (
            ei.repeat(1, b) + off.unsqueeze(0),
            et.repeat(b),
            torch.arange(b).repeat_interleave(n),
        )

    def roots(self, y: np.ndarray) -> torch.Tensor:
        """Root node indices ``y`` ``(b,)`` of ``b`` graphs as indices into the batch ``(b,)``."""
        import torch

        return torch.from_numpy(y) + torch.arange(len(y)) * self.n


def _evaluate(model: Any, g: _GraphBatch, x: np.ndarray, y: np.ndarray) -> dict[str, float]:
    """AC@1, AC@3 and MRR of ``model`` on incidents ``x`` ``(N, n, F)`` with roots ``y`` ``(N,)``."""
    import torch

    from fleetmind.rca.model import root_ranks

    model.eval()
    ranks = []
    with torch.no_grad():
        for k in range(0, len(y), 256):
            xb = torch.from_numpy(x[k : k + 256])
            b = xb.size(0)
            bei, bet, bb = g.inputs(b)
            logits, _, _ = model(xb.reshape(b * g.n, -1), bei, bet, bb)
            ranks.append(root_ranks(logits, bb, g.roots(y[k : k + 256])))
    r = torch.cat(ranks).double()
    return {
        "ac1": float((r < 1).double().mean()),
        "ac3": float((r < 3).double().mean()),
        "mrr": float((1.0 / (r + 1)).mean()),
    }


def _train_epoch(
    model: Any, opt: Any, g: _GraphBatch, x: np.ndarray, y: np.ndarray, perm: np.ndarray, batch: int
) -> float:
    """One epoch of listwise-loss steps over incidents ``x`` ``(N, n, F)`` / roots ``y`` in the
    order ``perm``, ``batch`` graphs a step; returns the mean training loss per incident."""
    import torch

    from fleetmind.rca.model import listwise_loss

    model.train()
    total = 0.0
    for k in range(0, len(perm), batch):
        idx = perm[k : k + batch]
        b = len(idx)
        bei, bet, bb = g.inputs(b)
        xb = torch.from_numpy(x[idx]).reshape(b * g.n, -1)
        logits, _, _ = model(xb, bei, bet, bb)
        loss = listwise_loss(logits, bb, g.roots(y[idx]))
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 5.0)
        opt.step()
        total += float(loss.detach()) * b
    return total / len(y)


def _train(
    args: FitArgs,
    graph: DependencyGraph,
    train: tuple[np.ndarray, np.ndarray],
    val: tuple[np.ndarray, np.ndarray],
    progress: bool,
) -> tuple[Any, list[dict[str, Any]], int, dict[str, float]]:
    """Train a :class:`fleetmind.rca.model.GATRanker` on ``train`` ``(x, y)`` for ``args.epochs``
    epochs (AdamW, cosine schedule) and keep the epoch with the best AC@1 (MRR breaks ties) on
    ``val``. Returns ``(model in eval mode, per-epoch history, best epoch, its val metrics)``."""
    import torch

    from fleetmind.rca.model import GATConfig, GATRanker

    torch.manual_seed(args.seed)
    cfg = GATConfig(
        in_dim=NUM_FIT_FEATURES,
        hidden=args.hidden,
        heads=args.heads,
        layers=args.layers,
        dropout=0.1,
        fault_types=[],
        crop_hops=None,
    )
    model = GATRanker(cfg)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=1e-4)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=max(1, args.epochs))
    g = _GraphBatch(*model_inputs(graph), n=graph.num_nodes)
    rng = np.random.default_rng(args.seed)
    best: tuple[float, int, dict[str, Any], dict[str, float]] | None = None
    history = []
    for epoch in range(args.epochs):
        perm = rng.permutation(len(train[1]))
        loss = _train_epoch(model, opt, g, *train, perm, args.batch)
        sched.step()
        m = _evaluate(model, g, *val)
        history.append({"epoch": epoch, "train_loss": loss, **m})
        if progress:
            print(
                f"epoch {epoch:>3}  loss {loss:.4f}  val AC@1 {m['ac1']:.3f}  AC@3 {m['ac3']:.3f}",
                flush=True,
            )
        key = m["ac1"] + 1e-3 * m["mrr"]
        if best is None or key > best[0]:
            best = (key, epoch, {k: v.clone() for k, v in model.state_dict().items()}, m)
    assert best is not None
    model.load_state_dict(best[2])
    model.eval()
    return model, history, best[1], best[3]


def _threads(text: str) -> int:
    """``argparse`` type of ``--threads``: a positive integer (torch refuses 0 and below).

    Raises:
        argparse.ArgumentTypeError: not an integer, or below 1.
    """
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {value}")
    return value


def add_arguments(p: argparse.ArgumentParser) -> None:
    """Add the ``rca fit`` options to ``p``."""
    d = FitArgs(scenario="", out="")
    p.add_argument(
        "--scenario",
        required=True,
        help="scenario folder; only graph.csv and noissue/metrics.csv are read",
    )
    p.add_argument(
        "--out",
        required=True,
        help="model folder to write: new, empty, or one an earlier `rca fit` wrote (replaced)",
    )
    p.add_argument(
        "--incidents",
        type=int,
        default=d.incidents,
        help=f"synthetic training incidents (default {d.incidents})",
    )
    p.add_argument("--epochs", type=int, default=d.epochs, help=f"epochs (default {d.epochs})")
    p.add_argument("--seed", type=argtypes.seed, default=d.seed, help="seed (default 0)")
    p.add_argument(
        "--threads", type=_threads, default=d.threads, help="torch threads, >= 1 (default 1)"
    )
    p.add_argument(
        "--roles",
        default=None,
        help="role-map override file (YAML 'metric: role'; default DIR/roles.yaml when present)",
    )
    p.add_argument("--json", default=None, help="write the fit summary JSON here")


def rerun_command(argv: list[str] | None = None) -> str:
    """The ``fleetmind`` command line that reruns this one (``argv``: its arguments after the
    program name, default ``sys.argv[1:]``), quoted for a POSIX shell (``shlex.join``: a scenario
    folder with a space reruns as it is), a URL's password masked (:func:`fleetmind.redact.safe_uri`,
    as ``rca evaluate`` records its command)."""
    args = sys.argv[1:] if argv is None else argv
    return shlex.join(["fleetmind", *(safe_uri(str(a)) for a in args)])


def run(args: argparse.Namespace) -> int:
    """Handler of ``fleetmind rca fit``; returns the exit status."""

    if args.incidents < 50 or args.epochs < 1:
        raise DataError("--incidents must be >= 50 and --epochs >= 1")
    check_out_dir(args.out)
    check_json_path(args.json)
    fa = FitArgs(
        scenario=args.scenario,
        out=args.out,
        incidents=args.incidents,
        epochs=args.epochs,
        seed=args.seed,
        threads=args.threads,
        roles=args.roles,
    )
    res = fit(fa, progress=True)
    m = res["metrics"]
    print(roles_line(Path(args.scenario).resolve().name, res["roles"]))
    print(
        f"wrote {res['out']} ({res['version']}): synthetic val AC@1 {m['val_ac1']:.3f} "
        f"AC@3 {m['val_ac3']:.3f} (epoch {m['best_epoch']}), {res['timing_s']['total']:.0f} s"
    )
    res["command"] = rerun_command()
    res["machine"] = {"platform": platform.platform(), "python": platform.python_version()}
    write_json(args.json, res)
    return 0
