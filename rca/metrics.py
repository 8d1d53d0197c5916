"""Ranking metrics (as in RCAEval) and the evaluation loop used by ``fleetmind rca evaluate``.

Definitions (RCAEval, Pham et al., WWW'25 resource track; ``RCAEval/e2e`` evaluator): for incidents
``i = 1..N`` with true root ``r_i`` and ranked list ``R_i``,

* ``AC@k = (1/N) * sum_i [r_i in R_i[:k]]`` (top-k accuracy),
* ``Avg@k = (1/k) * sum_{j=1..k} AC@j`` (rewards higher ranks inside the top k),
* ``MRR = (1/N) * sum_i 1 / rank_i`` with ``rank_i`` the 1-based position of ``r_i`` in ``R_i`` and
  ``1 / rank_i = 0`` when ``r_i`` is not ranked at all.

Plug-in methods: :func:`register_method` adds a factory ``(model, seed) -> BaseAnalyzer`` under a
name; methods listed in :data:`PLUGINS` (``"gat"``) are imported lazily from their module on first
use, so the GAT joins ``rca evaluate`` by providing ``rca.gat_analyzer.make_analyzer(model, seed)``.
"""

from __future__ import annotations

import importlib
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from fleetmind.data.errors import ConfigError, NotAvailableError
from fleetmind.data.graph import DependencyGraph
from fleetmind.progress import progress_disable
from fleetmind.rca.base import BaseAnalyzer
from fleetmind.rca.baselines import BASELINES, RandomConfig, alerts_by_node
from fleetmind.rca.gbdt import make_learned

K_VALUES: tuple[int, ...] = (1, 3, 5)


def rank_of(ranked: Sequence[str], root: str) -> int | None:
    """1-based position of ``root`` in ``ranked`` or ``None`` when absent."""
    try:
        return list(ranked).index(root) + 1
    except ValueError:
        return None


def ac_at_k(ranks: Sequence[int | None], k: int) -> float:
    """Share of incidents whose root is in the top ``k`` (``ranks``: 1-based rank or None)."""
    if not ranks:
        return 0.0
    return float(np.mean([r is not None and r <= k for r in ranks]))


def avg_at_k(ranks: Sequence[int | None], k: int = 5) -> float:
    """``(1/k) * sum_{j=1..k} AC@j``."""
    return float(np.mean([ac_at_k(ranks, j) for j in range(1, k + 1)]))


def mrr(ranks: Sequence[int | None]) -> float:
    """Mean reciprocal rank; an unranked root contributes 0."""
    if not ranks:
        return 0.0
    return float(np.mean([0.0 if r is None else 1.0 / r for r in ranks]))


def summarize(
    ranks: Sequence[int | None], ms: Sequence[float] | None = None
) -> dict[str, float | None]:
    """The metric dict of one method: ``ac@1, ac@3, ac@5, avg@5, mrr, ms_per_incident``.

    Over no incidents (an empty subset: no silent root, say) every value is ``None``, ``null`` in
    JSON: undefined, where 0.0 would read as a method that misses every root.
    """
    if not ranks:
        return dict.fromkeys([*(f"ac@{k}" for k in K_VALUES), "avg@5", "mrr", "ms_per_incident"])
    out: dict[str, float | None] = {f"ac@{k}": ac_at_k(ranks, k) for k in K_VALUES}
    out["avg@5"] = avg_at_k(ranks, 5)
    out["mrr"] = mrr(ranks)
    out["ms_per_incident"] = float(np.mean(ms)) if ms else 0.0
    return out


# ------------------------------------------------------------------------------------------ registry
Factory = Callable[[str | None, int], BaseAnalyzer]
_FACTORIES: dict[str, Factory] = {}
_BASELINES_READY = False

PLUGINS: dict[str, str] = {"gat": "fleetmind.rca.gat_analyzer:make_analyzer"}
"""Lazily imported methods: name -> ``module:function`` with signature ``(model, seed) -> BaseAnalyzer``."""

DATA_TRAINED: tuple[str, ...] = ("name_table", "node_gbdt", "hop2_gbdt")
"""Learned baselines (:mod:`fleetmind.rca.gbdt`) fitted on the train split of the dataset being evaluated
(``make_analyzers(data=DIR)``); listed by default only when a dataset folder is given."""


def register_method(name: str, factory: Factory) -> None:
    """Make ``name`` available to :func:`make_analyzers` (and ``rca evaluate --methods``).

    Args:
        name: method name in results JSON.
        factory: ``factory(model_ref_or_None, seed) -> BaseAnalyzer``.
    """
    _FACTORIES[name] = factory


def _register_baselines() -> None:
    global _BASELINES_READY
    if _BASELINES_READY:
        return
    _BASELINES_READY = True

    for name, cls in BASELINES.items():
        if name == "random":
            _FACTORIES.setdefault(name, lambda model, seed, cls=cls: cls(RandomConfig(seed=seed)))
        else:
            _FACTORIES.setdefault(name, lambda model, seed, cls=cls: cls())


def available_methods(with_data: bool = False) -> list[str]:
    """Registered baselines and methods, then plug-ins (which may fail to import), then (only with
    ``with_data``) the learned baselines that train on a dataset's train split."""
    _register_baselines()
    out = list(_FACTORIES) + [p for p in PLUGINS if p not in _FACTORIES]
    return out + [d for d in DATA_TRAINED if d not in out] if with_data else out


def _plugin(name: str) -> Factory:
    mod, _, fn = PLUGINS[name].partition(":")
    try:
        return getattr(importlib.import_module(mod), fn)
    except (ImportError, AttributeError) as err:
        raise NotAvailableError(f"method {name!r} is not available ({mod}.{fn}: {err})") from None


def make_analyzers(
    names: Iterable[str] | None = None,
    model: str | None = None,
    seed: int = 0,
    data: str | None = None,
    max_train: int | None = None,
) -> dict[str, BaseAnalyzer]:
    """Build analyzers by name (default: every baseline plus plug-ins that load).

    Args:
        names: method names; ``None``: every registered method.
        model: model reference for the learned plug-ins (path or MLflow URI); ``None``: the
            released artifact. A plug-in is skipped silently when it cannot load only if neither
            ``names`` nor ``model`` was given: a model that was asked for and does not load is an
            error, not a missing row.
        seed: seed of randomised methods (and of the learned baselines' fit).
        data: dataset folder whose ``train`` split fits the learned baselines of
            :data:`DATA_TRAINED` (cached, see :mod:`fleetmind.rca.gbdt`); ``None``: they are not listed by
            default and asking for one is an error.
        max_train: at most this many ``train`` incidents for those learned baselines (``None``:
            their default, :class:`fleetmind.rca.gbdt.GBDTConfig`'s ``max_train``).

    Raises:
        ConfigError: an unknown method name, a ``model`` with ``names`` that hold no learned
            method (the model would be ignored), or a learned baseline without ``data``.
        NotAvailableError: a requested plug-in or model cannot be loaded (e.g. no released GAT).
    """
    _register_baselines()
    explicit = names is not None or model is not None
    if model is not None and names is not None:
        names = list(names)
        if not any(n in PLUGINS for n in names):
            raise ConfigError(
                f"a model ({model}) was given, but none of the methods {', '.join(names)} is a "
                f"learned one that uses it (learned: {', '.join(sorted(PLUGINS)) or 'none'})"
            )
    out: dict[str, BaseAnalyzer] = {}
    for name in names if names is not None else available_methods(with_data=data is not None):
        if name in DATA_TRAINED and name not in _FACTORIES:
            if data is None:
                raise ConfigError(
                    f"method {name!r} trains on a dataset's train split: give the dataset folder "
                    "(rca evaluate --data DIR)"
                )
            out[name] = make_learned(name, data, seed, max_train)
        elif name in _FACTORIES:
            out[name] = _FACTORIES[name](model, seed)
        elif name in PLUGINS:
            try:
                out[name] = _plugin(name)(model, seed)
            except Exception as err:  # a plug-in that cannot load is skipped unless asked for
                if explicit:
                    if isinstance(err, NotAvailableError | ConfigError):
                        raise
                    raise NotAvailableError(f"method {name!r} could not be loaded: {err}") from None
        else:
            raise ConfigError(
                f"unknown method {name!r} (available: "
                f"{', '.join(available_methods(with_data=True))}; "
                f"{', '.join(DATA_TRAINED)} need the dataset folder)"
            )
    return out


# ------------------------------------------------------------------------------------------ evaluation
def _prime(graph: DependencyGraph, alerts: Sequence[Mapping[str, Any]]) -> None:
    """Fill the per-graph adjacency and alert-label caches so no method pays for them in its timing."""

    alerts_by_node(graph, alerts)  # type: ignore[arg-type]


def is_silent_root(graph: DependencyGraph, alerts: Sequence[Mapping[str, Any]], root: str) -> bool:
    """Whether no alert (other than ``severity: none``) maps to the root node ``root``."""
    i = graph.index.get(root)
    return i is None or i not in alerts_by_node(graph, alerts)  # type: ignore[arg-type]


def evaluate_methods(
    incidents: Sequence[Mapping[str, Any]],
    analyzers: Mapping[str, BaseAnalyzer],
    graphs: Mapping[str, DependencyGraph],
    progress: bool = False,
    keep_ranks: bool = False,
) -> dict[str, Any]:
    """Rank every incident with every analyzer and score the rankings.

    Args:
        incidents: incident dicts of the dataset contract (``graph``, ``alerts``, ``root_cause``).
        analyzers: name -> analyzer.
        graphs: graph name -> graph (``RCADataset.graphs``).
        progress: show a tqdm bar on stderr (wherever stderr goes; ``TQDM_DISABLE`` turns it
            off).
        keep_ranks: also return ``"ranks": {name: [rank or None per incident]}`` and
            ``"silent": [bool per incident]`` (for bootstrap intervals).

    Returns:
        ``{"n_incidents", "n_silent_root", "methods": {name: {"ac@1","ac@3","ac@5","avg@5","mrr",
        "ms_per_incident", "by_root": {"silent": {"n", "ac@1", ...}, "non_silent": {...}}}},
        "by_fault_type": {name: {fault_type: {"n", "ac@1"}}}}``; the metrics of an empty part
        (``n`` 0) are ``None`` (:func:`summarize`). ``by_fault_type`` leaves out untyped
        incidents (``fault_type`` null or absent: feedback that named no fault type); they count
        in ``methods``. A **silent root** is a root node
        that no alert of the incident maps to (``Watchdog``-style ``severity: none`` alerts do not
        count), whatever the generator's ``silent_root`` field says.
    """
    ranks: dict[str, list[int | None]] = {n: [] for n in analyzers}
    silent: list[bool] = []
    times: dict[str, list[float]] = {n: [] for n in analyzers}
    by_fault: dict[str, dict[str, list[int | None]]] = {n: {} for n in analyzers}
    it: Iterable[Mapping[str, Any]] = incidents
    if progress:
        from tqdm import tqdm

        it = tqdm(incidents, desc="rca evaluate", unit="inc", disable=progress_disable(True))
    for inc in it:
        g = graphs[inc["graph"]]
        _prime(g, inc["alerts"])
        fault = None if inc.get("fault_type") is None else str(inc["fault_type"])
        silent.append(is_silent_root(g, inc["alerts"], inc["root_cause"]))
        for name, an in analyzers.items():
            t = time.perf_counter()
            res = an.find_root_causes(g, inc["alerts"], None)
            times[name].append((time.perf_counter() - t) * 1000.0)
            r = rank_of(res.ranked_nodes(), inc["root_cause"])
            ranks[name].append(r)
            if fault is not None:
                by_fault[name].setdefault(fault, []).append(r)
    methods = {}
    for n in analyzers:
        m: dict[str, Any] = summarize(ranks[n], times[n])
        m["by_root"] = {}
        for part, want in (("silent", True), ("non_silent", False)):
            r = [x for x, s in zip(ranks[n], silent, strict=True) if s == want]
            m["by_root"][part] = {
                "n": len(r),
                **{k: v for k, v in summarize(r).items() if k != "ms_per_incident"},
            }
        methods[n] = m
    out: dict[str, Any] = {
        "n_incidents": len(incidents),
        "n_silent_root": int(sum(silent)),
        "methods": methods,
        "by_fault_type": {
            n: {ft: {"n": len(r), "ac@1": ac_at_k(r, 1)} for ft, r in sorted(d.items())}
            for n, d in by_fault.items()
        },
    }
    if keep_ranks:
        out["ranks"] = ranks
        out["silent"] = silent
    return out
