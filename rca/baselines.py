"""Baseline root-cause rankers behind :class:`fleetmind.rca.base.BaseAnalyzer`.

Every baseline maps the incident's alerts onto graph nodes with
:meth:`fleetmind.data.graph.DependencyGraph.node_for_alert`, ignores alerts of severity ``none`` (the
always-firing ``Watchdog``; any operator filters it), and ranks **candidate** nodes; nodes it does not
rank count as "not found" in the metrics (reciprocal rank 0).

| name | ranks | idea |
| --- | --- | --- |
| ``random`` | alerting nodes, shuffled | chance level among alerting nodes |
| ``most_alerts`` | alerting nodes by alert count | "the loudest node is the culprit" |
| ``earliest_alert`` | alerting nodes by first ``startsAt`` | "the first alert is the culprit" |
| ``pagerank`` | alerting nodes + their direct dependencies | MicroRCA-style personalized PageRank |
| ``deepest`` | alerting nodes | deepest alerting dependency (topological) |

Each :class:`RankedCause` gets a ``path``: the node itself when it alerts, else a shortest path over
dependent edges to the nearest alerting node (computed for the best ``path_top`` causes only).

References: MicroRCA (Wu et al., NOMS 2020) ranks anomalous microservices with personalized PageRank
on an attributed graph; PyRCA's ``RandomWalk`` analyzer (Salesforce) walks from anomalous nodes
towards their causes with a backward-edge weight.
"""

from __future__ import annotations

import math
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from fleetmind.data.graph import DependencyGraph
from fleetmind.rca.base import BaseAnalyzer, RankedCause, RCAResult
from fleetmind.rca.features.times import parse_time


# ------------------------------------------------------------------------------------------- helpers
def _ts(value: Any) -> float:
    """An alert's ``startsAt`` in unix seconds as every ranker reads it: an RFC 3339 string
    through :func:`fleetmind.rca.features.times.parse_time`, a number as unix seconds (the
    service passes them, up to the year 9999: a dataset's millisecond values are refused when it
    is read, :func:`fleetmind.data.rca_dataset.validate_incident`); ``inf`` when it has none
    (absent, empty, Alertmanager's zero time, a number that is not finite or before 1970).

    Raises:
        DataError: a string that is no timestamp (see ``parse_time``).
    """
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value) if 0 <= value < 10**15 else math.inf  # (NaN, inf: no time)
    t = parse_time(value)
    return math.inf if t is None else t


class _GraphCache:
    """Per-graph adjacency (dependencies ``down``, dependents ``up``) kept on the graph object."""

    def __init__(self, graph: DependencyGraph) -> None:
        n = graph.num_nodes
        self.down: list[list[int]] = [[] for _ in range(n)]
        self.up: list[list[int]] = [[] for _ in range(n)]
        for s, d in zip(graph.edge_index[0].tolist(), graph.edge_index[1].tolist(), strict=True):
            self.down[s].append(d)
            self.up[d].append(s)
        self.label_cache: dict[tuple, int | None] = {}


def graph_cache(graph: DependencyGraph) -> _GraphCache:
    c = getattr(graph, "_rca_baseline_cache", None)
    if c is None:
        c = _GraphCache(graph)
        graph._rca_baseline_cache = c  # type: ignore[attr-defined]
    return c


def share_graph_cache(base: DependencyGraph, graph: DependencyGraph) -> None:
    """Give ``graph`` (``base``'s nodes, ``base``'s edges then more) the :func:`graph_cache` of
    ``base`` plus its extra edges, sharing ``base``'s label memo and untouched adjacency lists
    (``O(|V|)`` pointers); nothing while ``base`` has none (``graph`` then builds its own)."""
    c = getattr(base, "_rca_baseline_cache", None)
    if c is None or graph.nodes is not base.nodes:
        return
    new = _GraphCache.__new__(_GraphCache)
    new.down, new.up = list(c.down), list(c.up)
    e0 = base.num_edges
    for s, d in zip(
        graph.edge_index[0, e0:].tolist(), graph.edge_index[1, e0:].tolist(), strict=True
    ):
        new.down[s] = [*new.down[s], d]  # new lists: base's are shared, never changed
        new.up[d] = [*new.up[d], s]
    new.label_cache = c.label_cache
    graph._rca_baseline_cache = new  # type: ignore[attr-defined]


def alerts_by_node(
    graph: DependencyGraph,
    alerts: Sequence[dict[str, Any]],
    skip_severity: tuple[str, ...] = ("none",),
) -> dict[int, list[dict[str, Any]]]:
    """Map alerts onto node indices (unmapped alerts and ``skip_severity`` alerts are dropped)."""
    cache = graph_cache(graph)
    out: dict[int, list[dict[str, Any]]] = {}
    for a in alerts:
        labels = a.get("labels") or {}
        if labels.get("severity") in skip_severity:
            continue
        key = tuple(sorted((str(k), str(v)) for k, v in labels.items()))
        if key not in cache.label_cache:
            nid = graph.node_for_alert(labels)
            cache.label_cache[key] = None if nid is None else graph.index[nid]
        i = cache.label_cache[key]
        if i is not None:
            out.setdefault(i, []).append(a)
    return out


def path_to_alert(
    graph: DependencyGraph, start: int, alerting: set[int], max_hops: int = 6
) -> tuple[str, ...]:
    """Shortest path from ``start`` to an alerting node, first over dependents (the way faults
    spread), then over any edge; ``(start,)`` when ``start`` alerts or nothing is reachable."""
    if start in alerting:
        return (graph.nodes[start].id,)
    cache = graph_cache(graph)
    for undirected in (False, True):
        prev = {start: -1}
        q = deque([(start, 0)])
        while q:
            u, d = q.popleft()
            if u in alerting:
                path = []
                while u != -1:
                    path.append(graph.nodes[u].id)
                    u = prev[u]
                return tuple(reversed(path))
            if d >= max_hops:
                continue
            nbrs = cache.up[u] + cache.down[u] if undirected else cache.up[u]
            for v in nbrs:
                if v not in prev:
                    prev[v] = u
                    q.append((v, d + 1))
    return (graph.nodes[start].id,)


def _result(
    graph: DependencyGraph,
    scored: list[tuple[int, float]],
    alerting: set[int],
    method: str,
    top_k: int | None,
    path_top: int,
) -> RCAResult:
    scored.sort(key=lambda x: (-x[1], x[0]))
    if top_k is not None:
        scored = scored[:top_k]
    causes = []
    for r, (i, s) in enumerate(scored):
        n = graph.nodes[i]
        path = path_to_alert(graph, i, alerting) if r < path_top else (n.id,)
        causes.append(RankedCause(n.id, n.kind, n.cluster, float(s), None, path))
    return RCAResult(causes=causes, method=method)


# ------------------------------------------------------------------------------------------- configs
@dataclass
class RandomConfig:
    """Config of :class:`RandomAnalyzer`.

    Attributes:
        seed: seed of the shuffles (each call draws from one generator, so results depend on call order).
        path_top: causes that get a computed path.
    """

    seed: int = 0
    path_top: int = 5


@dataclass
class CountConfig:
    """Config of the alert-count baseline.

    Attributes:
        path_top: causes that get a computed path.
    """

    path_top: int = 5


@dataclass
class EarliestConfig:
    """Config of the first-alert baseline.

    Attributes:
        storm_window_s: only alerts that started within this many seconds before the newest alert
            count (an operator looks at the storm, not at warnings firing since yesterday).
        path_top: causes that get a computed path.
    """

    storm_window_s: float = 1800.0
    path_top: int = 5


@dataclass
class PageRankConfig:
    """Config of :class:`PageRankAnalyzer`.

    Attributes:
        damping: probability of following an edge (1 - restart probability), 0.85 as in PageRank.
        backward_weight: weight of moving from a dependency back to a dependent (PyRCA's random walk
            uses such a backward edge so that the walk does not get stuck at sinks).
        candidate_hops: candidates are alerting nodes plus nodes within this many hops of them.
        iterations: power-iteration steps.
        silent_weight: weight of a step into a node that raised no alert (MicroRCA weights edges by
            how anomalous their ends are; 1.0 ignores anomalies in the transition weights).
        path_top: causes that get a computed path.
    """

    damping: float = 0.85
    backward_weight: float = 0.3
    candidate_hops: int = 1
    iterations: int = 50
    silent_weight: float = 0.3
    path_top: int = 5


@dataclass
class DeepestConfig:
    """Config of :class:`DeepestAlertingAnalyzer`.

    Attributes:
        max_hops: how far along dependency edges to look for a deeper alerting node.
        path_top: causes that get a computed path.
    """

    max_hops: int = 3
    path_top: int = 5


# ------------------------------------------------------------------------------------------- analyzers
class RandomAnalyzer(BaseAnalyzer):
    """Alerting nodes in random order (chance level among alerting nodes)."""

    name: ClassVar[str] = "random"
    config_class: ClassVar[type] = RandomConfig

    def __init__(self, config: RandomConfig | None = None) -> None:
        super().__init__(config)
        self._rng = np.random.default_rng(self.config.seed)

    def find_root_causes(
        self, graph: DependencyGraph, alerts: Sequence[dict[str, Any]], top_k: int | None = None
    ) -> RCAResult:
        by = alerts_by_node(graph, alerts)
        nodes = sorted(by)
        perm = self._rng.permutation(len(nodes))
        scored = [(nodes[int(j)], float(len(nodes) - r)) for r, j in enumerate(perm)]
        return _result(graph, scored, set(by), self.name, top_k, self.config.path_top)


class MostAlertsAnalyzer(BaseAnalyzer):
    """Alerting nodes by number of alerts (ties: earlier first alert wins)."""

    name: ClassVar[str] = "most_alerts"
    config_class: ClassVar[type] = CountConfig

    def find_root_causes(
        self, graph: DependencyGraph, alerts: Sequence[dict[str, Any]], top_k: int | None = None
    ) -> RCAResult:
        by = alerts_by_node(graph, alerts)
        first = {i: min(_ts(a.get("startsAt", "")) for a in al) for i, al in by.items()}
        t0 = min(first.values(), default=0.0)
        scored = [(i, len(al) + 1.0 / (2.0 + max(0.0, first[i] - t0))) for i, al in by.items()]
        return _result(graph, scored, set(by), self.name, top_k, self.config.path_top)


class EarliestAlertAnalyzer(BaseAnalyzer):
    """Alerting nodes by the time of their first alert in the storm window, earliest first (nodes whose
    alerts all started before the window are not ranked)."""

    name: ClassVar[str] = "earliest_alert"
    config_class: ClassVar[type] = CountConfig

    def find_root_causes(
        self, graph: DependencyGraph, alerts: Sequence[dict[str, Any]], top_k: int | None = None
    ) -> RCAResult:
        by = alerts_by_node(graph, alerts)
        first = {i: min(_ts(a.get("startsAt", "")) for a in al) for i, al in by.items()}
        tmax = max(first.values(), default=0.0)
        scored = [(i, tmax - t + 1.0) for i, t in first.items()]
        return _result(graph, scored, set(by), self.name, top_k, self.config.path_top)


class PageRankAnalyzer(BaseAnalyzer):
    """Personalized PageRank over the alerting subgraph, walking from dependents to dependencies.

    The subgraph holds the alerting nodes and every node within ``candidate_hops`` of them (so a silent
    root next to its symptoms is a candidate). A walker follows dependency edges (``src -> dst``, the
    reverse of fault propagation) with weight 1 and goes back to a dependent with ``backward_weight``;
    with probability ``1 - damping`` it restarts at an alerting node chosen in proportion to its alert
    count. Nodes are ranked by the stationary visit probability.
    """

    name: ClassVar[str] = "pagerank"
    config_class: ClassVar[type] = PageRankConfig

    def find_root_causes(
        self, graph: DependencyGraph, alerts: Sequence[dict[str, Any]], top_k: int | None = None
    ) -> RCAResult:
        cfg = self.config
        by = alerts_by_node(graph, alerts)
        if not by:
            return RCAResult(causes=[], method=self.name)
        cache = graph_cache(graph)
        sub = set(by)
        frontier = set(by)
        for _ in range(cfg.candidate_hops):
            nxt = set()
            for u in frontier:
                nxt.update(cache.down[u])
                nxt.update(cache.up[u])
            nxt -= sub
            sub |= nxt
            frontier = nxt
        nodes = sorted(sub)
        pos = {u: k for k, u in enumerate(nodes)}
        m = len(nodes)
        rows, cols, vals = [], [], []
        w = {u: (1.0 if u in by else cfg.silent_weight) for u in nodes}
        for u in nodes:
            for v in cache.down[u]:
                if v in pos:
                    rows.append(pos[u])
                    cols.append(pos[v])
                    vals.append(w[v])
                    rows.append(pos[v])
                    cols.append(pos[u])
                    vals.append(cfg.backward_weight * w[u])
        r = np.array(rows, dtype=np.int64)
        col = np.array(cols, dtype=np.int64)
        val = np.array(vals, dtype=float)
        out = np.bincount(r, weights=val, minlength=m)
        pers = np.zeros(m)
        for u, al in by.items():
            pers[pos[u]] = len(al)
        pers /= pers.sum()
        prob = np.divide(val, out[r], out=np.zeros_like(val), where=out[r] > 0)
        dangling = out == 0
        x = pers.copy()
        for _ in range(
            cfg.iterations
        ):  # sparse power iteration: x <- d (x P + dangling mass) + (1-d) p
            step = np.bincount(col, weights=x[r] * prob, minlength=m)
            x = cfg.damping * (step + x[dangling].sum() * pers) + (1 - cfg.damping) * pers
        scored = [(u, float(x[pos[u]])) for u in nodes]
        return _result(graph, scored, set(by), self.name, top_k, cfg.path_top)


class DeepestAlertingAnalyzer(BaseAnalyzer):
    """The deepest alerting dependency: an alerting node none of whose dependencies (within
    ``max_hops`` along ``src -> dst`` edges) alerts is a candidate; candidates rank by how many
    alerting nodes depend on them (within ``max_hops``), then by their alert count; other alerting
    nodes follow, by the same key."""

    name: ClassVar[str] = "deepest"
    config_class: ClassVar[type] = DeepestConfig

    def find_root_causes(
        self, graph: DependencyGraph, alerts: Sequence[dict[str, Any]], top_k: int | None = None
    ) -> RCAResult:
        cfg = self.config
        by = alerts_by_node(graph, alerts)
        cache = graph_cache(graph)
        alerting = set(by)

        def reach(u: int, adj: list[list[int]]) -> set[int]:
            seen = {u}
            frontier = [u]
            for _ in range(cfg.max_hops):
                nxt = []
                for x in frontier:
                    for y in adj[x]:
                        if y not in seen:
                            seen.add(y)
                            nxt.append(y)
                frontier = nxt
            seen.discard(u)
            return seen

        scored = []
        for u in alerting:
            deeper = reach(u, cache.down) & alerting
            above = len(reach(u, cache.up) & alerting)
            base = 0.0 if deeper else 1000.0
            scored.append((u, base + above + len(by[u]) / 100.0))
        return _result(graph, scored, alerting, self.name, top_k, cfg.path_top)


BASELINES: dict[str, type[BaseAnalyzer]] = {
    cls.name: cls
    for cls in (
        RandomAnalyzer,
        MostAlertsAnalyzer,
        EarliestAlertAnalyzer,
        PageRankAnalyzer,
        DeepestAlertingAnalyzer,
    )
}
"""Baseline analyzers by name."""


def timed_rank(
    analyzer: BaseAnalyzer,
    graph: DependencyGraph,
    alerts: Sequence[dict[str, Any]],
    top_k: int | None = None,
) -> tuple[RCAResult, float]:
    """Run ``find_root_causes`` and return ``(result, milliseconds)``."""
    t = time.perf_counter()
    res = analyzer.find_root_causes(graph, alerts, top_k)
    return res, (time.perf_counter() - t) * 1000.0
