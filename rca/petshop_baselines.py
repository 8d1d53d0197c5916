"""Metric-level baselines for PetShop-format scenarios: the dataset's traversal baseline, BARO, NSigma.

These methods read raw metric tables rather than alerts, so they implement
:meth:`MetricAnalyzer.rank_metrics` (the adapter) next to the alert interface of
:class:`~fleetmind.rca.base.BaseAnalyzer`; :meth:`MetricAnalyzer.find_root_causes` refuses with a clear message.

* :class:`TraversalBaseline`: the graph-traversal baseline of the PetShop paper (Hardt et al. 2023,
  arXiv:2311.04806, Sec. 5; its repository's ``baseline_anomaly_traversal``), re-implemented from its
  description: per node, a median-deviation anomaly scorer ``|x - median| / MAD`` (unscaled MAD) is fitted
  on the normal period for the target's metric and statistic (nodes with fewer than 10 normal values get
  none; a node whose normal values are constant scores ``|x - mean|`` with threshold 0); the window row
  analysed is the third one, or the first later row where the target is anomalous; nodes scoring above
  the threshold 5 are anomalous; on the *reversed* call graph (callee -> caller, the causal direction),
  the anomalous nodes without an anomalous parent are the root-cause candidates, kept only when a path
  of anomalous nodes leads from them to the target, and scored by the largest sum of anomaly scores
  along such a path. Nodes it does not return are unranked (a miss at every k).
* :class:`BaroBaseline` / :class:`NSigmaBaseline`: RCAEval's metric-only BARO (Pham et al., FSE 2024:
  robust scaling of each metric by the normal period's median and inter-quartile range, rank by the
  largest scaled value in the anomalous period) and NSigma (the same with mean and standard deviation).
  They run through the ``RCAEval`` package (optional extra ``rcaeval``) when it is installed, else
  through a built-in implementation of the same formulas; ``backend`` records which. Input per issue:
  every ``node_metric_statistic`` column; the normal period re-timed to end one step before the issue
  window; the whole window as the anomalous period; NaNs filled forward, then backward, then with 0
  (RCAEval's convention). A node ranks at its best column.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import pandas as pd

from fleetmind.data.errors import NotAvailableError
from fleetmind.data.graph import DependencyGraph
from fleetmind.rca.base import BaseAnalyzer, RankedCause, RCAResult


class MetricAnalyzer(BaseAnalyzer):
    """A baseline that ranks from metric tables (normal period + issue window) instead of alerts."""

    def find_root_causes(
        self, graph: DependencyGraph, alerts: Sequence[dict[str, Any]], top_k: int | None = None
    ) -> RCAResult:
        raise NotAvailableError(
            f"{self.name} ranks raw metrics, not alerts: call rank_metrics(graph, normal, window, target)"
        )

    def rank_metrics(
        self,
        graph: DependencyGraph,
        normal: pd.DataFrame,
        window: pd.DataFrame,
        target: dict[str, Any],
        top_k: int | None = None,
    ) -> RCAResult:
        """Rank root causes of one issue.

        Args:
            graph: the call graph (node ids = the metric tables' node names).
            normal: normal-period metrics, shape ``(T_n, C)``, 3-level columns (node, metric, statistic).
            window: issue-window metrics, shape ``(T_w, C')``, same column levels.
            target: ``target.json``'s ``target`` (``node``, ``metric``, ``agg``, ``timestamp``).
            top_k: keep the best ``top_k`` causes (all returned ones when ``None``).
        """
        raise NotImplementedError

    def _result(
        self,
        graph: DependencyGraph,
        ranked: list[tuple[str, float]],
        top_k: int | None,
        **extra: Any,
    ) -> RCAResult:
        causes = []
        for node_id, score in ranked[:top_k] if top_k is not None else ranked:
            node = graph.node(node_id)
            causes.append(
                RankedCause(node.id, node.kind, node.cluster, float(score), None, (node.id,))
            )
        return RCAResult(causes=causes, method=self.name, extra=dict(extra))


# ---------------------------------------------------------------------------- traversal
@dataclass
class TraversalConfig:
    """Settings of :class:`TraversalBaseline` (the published values are the defaults).

    Attributes:
        threshold: anomaly-score threshold (5).
        min_normal_points: normal values a node needs to get a scorer (10).
        row_to_analyze: window row analysed first (2 = the third row).
        search_for_anomaly: move to the first later row where the target is anomalous.
    """

    threshold: float = 5.0
    min_normal_points: int = 10
    row_to_analyze: int = 2
    search_for_anomaly: bool = True


def _column_matrix(df: pd.DataFrame, metric: str, stat: str) -> pd.DataFrame:
    cols = [c for c in df.columns if c[1] == metric and c[2] == stat]
    out = df[cols].copy()
    out.columns = [c[0] for c in cols]
    return out


class TraversalBaseline(MetricAnalyzer):
    """The PetShop repository's anomaly-traversal baseline, re-implemented (see module docstring)."""

    name: ClassVar[str] = "petshop_traversal"
    config_class: ClassVar[type] = TraversalConfig

    def rank_metrics(
        self,
        graph: DependencyGraph,
        normal: pd.DataFrame,
        window: pd.DataFrame,
        target: dict[str, Any],
        top_k: int | None = None,
    ) -> RCAResult:
        cfg: TraversalConfig = self.config
        metric, stat = str(target.get("metric")), str(target.get("agg") or "Average")
        tnode = str(target["node"])
        train = _column_matrix(normal, metric, stat)
        data = _column_matrix(window, metric, stat)
        # 1. one scorer per node on the normal period
        scorers: dict[str, tuple[str, float, float, float]] = {}
        for node in train.columns:
            x = train[node].to_numpy(dtype=float)
            x = x[~np.isnan(x)]
            if x.size < cfg.min_normal_points:
                continue
            if np.std(x) == 0:
                scorers[node] = ("mean", float(np.mean(x)), 1.0, 0.0)
            else:
                med = float(np.median(x))
                mad = float(np.median(np.abs(x - med)))
                scorers[node] = ("median", med, mad, cfg.threshold)
        # 2. scores and decisions per window row
        scores: dict[str, np.ndarray] = {}
        flags: dict[str, np.ndarray] = {}
        for node in data.columns:
            x = data[node].to_numpy(dtype=float)
            s = np.zeros(x.shape[0])
            f = np.zeros(x.shape[0], dtype=bool)
            if node in scorers:
                kind, center, div, thr = scorers[node]
                with np.errstate(divide="ignore", invalid="ignore"):
                    raw = np.abs(x - center) / div if kind == "median" else np.abs(x - center)
                raw[np.isnan(raw)] = 0.0
                s, f = raw, raw > thr
            scores[node], flags[node] = s, f
        column = f"{tnode}/{metric}/{stat}"
        if tnode not in flags or data.shape[0] == 0:
            return self._result(
                graph,
                [],
                top_k,
                reason=f"target not scored: the window has no column {column}",
                ran=False,
            )
        if tnode not in scorers:
            return self._result(
                graph, [], top_k,
                reason=f"target not scored: {column} has fewer than {cfg.min_normal_points} "
                "normal values",
                ran=False,
            )  # fmt: skip
        row = min(cfg.row_to_analyze, data.shape[0] - 1)
        if cfg.search_for_anomaly:
            for i in range(row, data.shape[0]):
                if flags[tnode][i]:
                    row = i
                    break
        if not flags[tnode][row]:
            return self._result(graph, [], top_k, reason="target not anomalous")
        anomalous = {n: float(scores[n][row]) for n in data.columns if flags[n][row]}
        anomalous = {n: v for n, v in anomalous.items() if n in graph.index}
        # 3. reversed call graph: parent of v = a callee of v; roots = anomalous without anomalous parent
        callees: dict[str, list[str]] = {n.id: [] for n in graph.nodes}
        callers: dict[str, list[str]] = {n.id: [] for n in graph.nodes}
        for e in graph.edges:
            callees[e.src].append(e.dst)
            callers[e.dst].append(e.src)
        roots = [n for n in anomalous if not any(c in anomalous for c in callees[n])]
        # 4. keep roots with an all-anomalous path to the target; score = best path's score sum
        ranked: list[tuple[str, float]] = []
        for r in roots:
            best = self._best_path_score(r, tnode, callers, anomalous)
            if best is not None:
                ranked.append((r, best))
        ranked.sort(key=lambda t: (-t[1], t[0]))
        return self._result(graph, ranked, top_k, row=row, n_anomalous=len(anomalous))

    @staticmethod
    def _best_path_score(
        root: str, target: str, callers: dict[str, list[str]], anomalous: dict[str, float]
    ) -> float | None:
        """Largest sum of scores over simple paths root -> target (causal direction) of anomalous nodes."""
        best: float | None = None
        stack: list[tuple[str, list[str]]] = [(root, [root])]
        while stack:
            node, path = stack.pop()
            if node == target:
                total = float(sum(anomalous[n] for n in path))
                best = total if best is None or total > best else best
                continue
            for nxt in callers.get(node, ()):
                if nxt in anomalous and nxt not in path:
                    stack.append((nxt, path + [nxt]))
        return best


# ---------------------------------------------------------------------------- BARO / NSigma
@dataclass
class ScalerBaselineConfig:
    """Settings of :class:`BaroBaseline` / :class:`NSigmaBaseline`.

    Attributes:
        backend: ``auto`` (RCAEval when installed, else built-in), ``rcaeval`` or ``builtin``.
        dataset: the ``dataset`` name passed to RCAEval (any name other than RCAEval's special cases
            makes its preprocessing drop the time column and constant columns).
    """

    backend: str = "auto"
    dataset: str = "petshop"


_RCAEVAL_CACHE: dict[str, Any] = {}


def load_rcaeval_functions() -> tuple[Any, Any]:
    """Import ``baro`` and ``nsigma`` from ``RCAEval.e2e``.

    On Python 3.11, RCAEval 1.8's ``RCAEval.e2e`` imports ``causallearn`` unconditionally (its
    dependency-tolerant import path is only taken on 3.10/3.12/3.14); when that import fails we retry
    with that tolerant path switched on, which skips the methods whose dependencies are missing.

    Raises:
        NotAvailableError: RCAEval is not installed (``pip install 'fleetmind[rcaeval]'``).
    """
    if "fns" in _RCAEVAL_CACHE:
        return _RCAEVAL_CACHE["fns"]
    try:
        utility = importlib.import_module("RCAEval.utility")
    except ImportError:
        raise NotAvailableError(
            "RCAEval is not installed; pip install 'fleetmind[rcaeval]' or use backend='builtin'"
        ) from None
    try:
        e2e = importlib.import_module("RCAEval.e2e")
    except ImportError:
        original = utility.is_py310
        utility.is_py310 = lambda: True
        try:
            for mod in [m for m in sys.modules if m.startswith("RCAEval.e2e")]:
                del sys.modules[mod]
            e2e = importlib.import_module("RCAEval.e2e")
        except ImportError as err:
            raise NotAvailableError(f"RCAEval.e2e cannot be imported: {err}") from None
        finally:
            utility.is_py310 = original
    _RCAEVAL_CACHE["fns"] = (e2e.baro, e2e.nsigma)
    return _RCAEVAL_CACHE["fns"]


def rcaeval_frame(normal: pd.DataFrame, window: pd.DataFrame) -> tuple[pd.DataFrame, float, dict]:
    """Build RCAEval's input: one table with a ``time`` column, normal period re-timed before the window.

    Returns:
        ``(data, inject_time, column_to_node)``: ``data`` rows = normal then window, columns
        ``time`` + ``node_metric_statistic`` for columns present in both periods; NaNs filled
        forward, backward, then 0, within each period.
    """
    cols = [c for c in window.columns if c in normal.columns]
    names = {"_".join(c): c[0] for c in cols}
    wt = window.index.to_numpy(dtype=float)
    step = float(np.median(np.diff(wt))) if len(wt) > 1 else 300.0
    n_rows = normal.shape[0]
    nt = wt[0] - step * np.arange(n_rows, 0, -1)

    def part(df: pd.DataFrame, times: np.ndarray) -> pd.DataFrame:
        out = df[cols].copy()
        out.columns = list(names)
        out = out.ffill().bfill().fillna(0.0)
        out.insert(0, "time", times)
        return out.reset_index(drop=True)

    data = pd.concat([part(normal, nt), part(window, wt)], ignore_index=True)
    return data, float(wt[0]), names


def _builtin_rank(data: pd.DataFrame, inject_time: float, robust: bool) -> list[str]:
    normal = data[data["time"] < inject_time].drop(columns=["time"])
    anomal = data[data["time"] >= inject_time].drop(columns=["time"])
    # as RCAEval's preprocessing: drop columns constant within either period
    keep = [
        c
        for c in normal.columns
        if (normal[c] != normal[c].iloc[0]).any() and (anomal[c] != anomal[c].iloc[0]).any()
    ]
    scored = []
    for c in keep:
        a = normal[c].to_numpy(dtype=float)
        b = anomal[c].to_numpy(dtype=float)
        if robust:  # sklearn RobustScaler: median, IQR (25-75); a zero IQR scales by 1
            center = float(np.median(a))
            q1, q3 = np.percentile(a, [25, 75])
            div = float(q3 - q1) or 1.0
        else:  # sklearn StandardScaler: mean, population std; a zero std scales by 1
            center = float(np.mean(a))
            div = float(np.std(a)) or 1.0
        scored.append((c, float(np.max((b - center) / div))))
    scored.sort(key=lambda t: t[1], reverse=True)
    return [c for c, _ in scored]


class _ScalerBaseline(MetricAnalyzer):
    config_class: ClassVar[type] = ScalerBaselineConfig
    _robust: ClassVar[bool] = True
    _fn_index: ClassVar[int] = 0

    def prepare(self) -> str:
        """Resolve the backend once (imports RCAEval when used, outside any timing); returns it."""
        cfg: ScalerBaselineConfig = self.config
        backend = cfg.backend
        if backend == "auto":
            try:
                load_rcaeval_functions()
                backend = "rcaeval"
            except NotAvailableError:
                backend = "builtin"
        elif backend == "rcaeval":
            load_rcaeval_functions()
        return backend

    def rank_metrics(
        self,
        graph: DependencyGraph,
        normal: pd.DataFrame,
        window: pd.DataFrame,
        target: dict[str, Any],
        top_k: int | None = None,
    ) -> RCAResult:
        cfg: ScalerBaselineConfig = self.config
        data, inject, names = rcaeval_frame(normal, window)
        backend = self.prepare()
        if backend == "rcaeval":
            fn = load_rcaeval_functions()[self._fn_index]
            ranks = list(fn(data, inject_time=inject, dataset=cfg.dataset)["ranks"])
        elif backend == "builtin":
            ranks = _builtin_rank(data, inject, self._robust)
        else:
            raise NotAvailableError(f"unknown backend {backend!r}; use auto, rcaeval or builtin")
        ranked: list[tuple[str, float]] = []
        seen: set[str] = set()
        for i, col in enumerate(ranks):
            node = names.get(col)
            if node is None or node in seen or node not in graph.index:
                continue
            seen.add(node)
            ranked.append((node, -float(i)))
        return self._result(graph, ranked, top_k, backend=backend)


class BaroBaseline(_ScalerBaseline):
    """RCAEval's BARO (median / inter-quartile-range scaling); see module docstring."""

    name: ClassVar[str] = "baro"
    _robust = True
    _fn_index = 0


class NSigmaBaseline(_ScalerBaseline):
    """RCAEval's NSigma (mean / standard-deviation scaling); see module docstring."""

    name: ClassVar[str] = "nsigma"
    _robust = False
    _fn_index = 1


METRIC_BASELINES: dict[str, type[MetricAnalyzer]] = {
    "petshop_traversal": TraversalBaseline,
    "baro": BaroBaseline,
    "nsigma": NSigmaBaseline,
}
"""The metric-level baselines by name."""
