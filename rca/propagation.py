"""Alert-propagation ranker: explain alerts away along dependencies, rank what is left unexplained.

A scenario-agnostic FleetMind analyzer that needs only a dependency graph and Alertmanager alerts. It
follows the reasoning an SRE applies to an alert storm:

1. **Explanation edges.** An alert ``a`` on node ``v`` is *explained by* an alert ``b`` on node ``w``
   when ``w`` is a dependency of ``v`` (an edge path ``v -> ... -> w`` of at most ``max_hops`` edges
   whose intermediate nodes raise no alert, since unobserved components pass faults on silently),
   ``b`` started no later than ``a`` plus ``time_tolerance_s`` (causes precede symptoms), the two
   alerts concern compatible metrics (the same ``metric`` label, when both carry one), and, when both
   carry a ``delta`` annotation (change of the metric against its normal level), ``b``'s change is at
   least ``magnitude_ratio`` times ``a``'s (a callee that adds 5 ms cannot explain 500 ms at the
   caller; latency adds up along a call chain, and error rates dilute towards callers, so a real
   cause's change is not much smaller than its symptom's).
2. **Root alerts** are the alerts nothing explains (alerts in a sink strongly connected component of
   the explanation graph; mutual explanations count as roots together).
3. **Score.** Each root alert ``r`` collects the alerts it explains transitively (its *blast radius*
   ``B(r)``); with alert strength ``s(a) = 1 + log(z(a) / z_ref)`` (``z`` from the ``z_score``
   annotation, else from severity) a node's score is ``max_r [ s(r) + sum_{a in B(r)} s(a) ]``.
   Nodes with a root alert rank first, then nodes that alert but are explained (ordered the same way
   over their own blast radius), then silent nodes by how many alerting nodes depend on them directly
   (a silent node all of whose dependents alert may be an unobserved cause).

The path reported for a cause runs from the cause to the alerting dependent farthest up its blast
radius, along dependency edges reversed (the direction faults travel).
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from fleetmind.data.graph import DependencyGraph
from fleetmind.rca.base import BaseAnalyzer, RankedCause, RCAResult
from fleetmind.rca.baselines import alerts_by_node, graph_cache
from fleetmind.rca.features.times import parse_time


@dataclass
class PropagationConfig:
    """Settings of :class:`PropagationRanker` (one set for every scenario).

    Attributes:
        max_hops: longest dependency path (edges) along which an alert can explain another when the
            intermediate nodes are silent.
        time_tolerance_s: a cause's alert may start at most this many seconds after its symptom's.
        magnitude_ratio: a cause's metric change must be at least this fraction of the symptom's
            (only when both alerts carry a ``delta`` annotation).
        z_ref: z-score that counts as strength 1 (the detection threshold).
        require_same_metric: explanations need equal ``metric`` labels when both alerts have one.
        explain_top: causes (best first) that get a propagation path; the rest get ``(node,)``.
    """

    max_hops: int = 2
    time_tolerance_s: float = 300.0
    magnitude_ratio: float = 0.5
    z_ref: float = 5.0
    require_same_metric: bool = True
    explain_top: int = 10


@dataclass
class _Alert:
    node: int
    metric: str | None
    start: float
    z: float
    delta: float | None


def _float(x: Any) -> float | None:
    try:
        v = float(x)
    except (TypeError, ValueError):
        return None
    return v if math.isfinite(v) else None


def _parse_time(s: Any) -> float:
    """Unix seconds from an RFC 3339 string (:func:`fleetmind.rca.features.times.parse_time`) or
    a number of unix seconds (the service passes them, up to the year 9999: a dataset's
    millisecond values are refused when it is read); 0.0 when absent, not finite or before 1970.

    Raises:
        DataError: a string that is no timestamp (see ``parse_time``).
    """
    if isinstance(s, int | float) and not isinstance(s, bool):
        # before 1970 is no time, as for a string (parse_time)
        return float(s) if 0 <= s < 10**15 else 0.0  # (an int too large for a float: no time)
    t = parse_time(s)
    return 0.0 if t is None else t


def alert_item(node: int, alert: Mapping[str, Any], cfg: PropagationConfig) -> _Alert:
    """One alert mapped onto ``node`` as the ranker reads it: metric label, start (unix seconds),
    strength ``z`` (the ``z_score`` annotation, else from severity) and ``delta`` annotation."""
    labels = alert.get("labels") or {}
    ann = alert.get("annotations") or {}
    z = _float(ann.get("z_score"))
    if z is None:
        z = 2.0 * cfg.z_ref if labels.get("severity") == "critical" else cfg.z_ref
    return _Alert(
        node=node,
        metric=labels.get("metric"),
        start=_parse_time(alert.get("startsAt")),
        z=max(z, 1e-9),
        delta=_float(ann.get("delta")),
    )


def _closure(
    start: int, edges: list[list[int]], memo: dict[tuple[int, ...], list[int]] | None = None
) -> set[int]:
    """Indices reachable from ``start`` over ``edges`` (``start`` included).

    The set is built in breadth-first order from ``start`` (its iteration order, and so the float
    sums over it, depend on that order). ``memo`` (successor list -> breadth-first order of what
    it reaches) shares the search between vertices with the same successors, as the copies of one
    alert in a storm have: their closures differ only by the start, which the search from the
    successors adds (and expands, reaching nothing new) at most once, so dropping it from that
    order gives the search from the start.
    """
    succ = edges[start]
    if not succ:  # most alerts of a storm explain nothing and are explained by nothing
        return {start}
    key = tuple(succ)
    order = None if memo is None else memo.get(key)
    if order is None:
        order = _search_order(succ, edges)
        if memo is not None:
            memo[key] = order
    seen = {start}
    seen.update(order)  # insertion in order, as the search adds them; ``start`` is there already
    return seen


def _search_order(succ: list[int], edges: list[list[int]]) -> list[int]:
    """The vertices reachable from the vertices ``succ`` over ``edges``, in breadth-first order
    (``succ`` first, in their order, each vertex once)."""
    seen: set[int] = set()
    order: list[int] = []
    for w in succ:
        if w not in seen:
            seen.add(w)
            order.append(w)
    q = deque(order)
    while q:
        u = q.popleft()
        for w in edges[u]:
            if w not in seen:
                seen.add(w)
                order.append(w)
                q.append(w)
    return order


def _sink_members(edges: list[list[int]]) -> list[bool]:
    """Per vertex of the directed graph ``edges`` (adjacency lists): whether it lies in a sink
    strongly connected component, i.e. every vertex it reaches reaches it back."""
    n = len(edges)
    if n == 0:
        return []
    src = [u for u, ws in enumerate(edges) for _ in ws]
    if not src:
        return [True] * n
    from scipy.sparse import csr_matrix
    from scipy.sparse.csgraph import connected_components

    dst = [w for ws in edges for w in ws]
    adj = csr_matrix((np.ones(len(src), dtype=np.int8), (src, dst)), shape=(n, n))
    _, comp = connected_components(adj, directed=True, connection="strong")
    s, d = np.asarray(src), np.asarray(dst)
    leaves = np.ones(int(comp.max()) + 1, dtype=bool)
    leaves[comp[s][comp[s] != comp[d]]] = False  # a component with an edge out is no sink
    return leaves[comp].tolist()


def node_order(scores: np.ndarray) -> np.ndarray:
    """Node indices best first: by score descending, ties by index (int64 ``(|V|,)``)."""
    return np.lexsort((np.arange(scores.size), -scores))


class PropagationRanker(BaseAnalyzer):
    """Rank root causes by explaining alerts away along the dependency graph (see module docstring)."""

    name: ClassVar[str] = "propagation"
    config_class: ClassVar[type] = PropagationConfig

    def _alerts(self, graph: DependencyGraph, alerts: Sequence[dict[str, Any]]) -> list[_Alert]:
        """Parse alerts mapped onto nodes (the label -> node mapping is cached on the graph)."""
        cfg: PropagationConfig = self.config
        return [
            alert_item(node, a, cfg)
            for node, mapped in alerts_by_node(graph, alerts).items()
            for a in mapped
        ]

    def find_root_causes(
        self, graph: DependencyGraph, alerts: Sequence[dict[str, Any]], top_k: int | None = None
    ) -> RCAResult:
        cfg: PropagationConfig = self.config
        items = self._alerts(graph, alerts)
        scores, best_alert, blast = self.score_items(graph, items)
        order = node_order(scores)
        if top_k is not None:
            order = order[:top_k]
        dependents = graph_cache(graph).up
        causes = []
        for pos, v in enumerate(order.tolist()):
            path: tuple[str, ...] = (graph.nodes[v].id,)
            if v in best_alert and pos < cfg.explain_top:
                path = self._path(graph, v, blast[best_alert[v]], items, dependents)
            node = graph.nodes[v]
            causes.append(
                RankedCause(
                    node=node.id,
                    kind=node.kind,
                    cluster=node.cluster,
                    score=float(scores[v]),
                    fault_type=items[best_alert[v]].metric if v in best_alert else None,
                    path=path,
                )
            )
        return RCAResult(causes=causes, method=self.name)

    def score_items(
        self, graph: DependencyGraph, items: list[_Alert]
    ) -> tuple[np.ndarray, dict[int, int], dict[int, set[int]]]:
        """Every node's score from alerts already mapped onto nodes (steps 1-3 of the module docstring).

        Args:
            graph: the dependency graph.
            items: the mapped alerts, grouped by node in first-seen order (as :meth:`_alerts` builds them).

        Returns:
            ``(scores, best_alert, blast)``: float64 ``(|V|,)`` scores (``2e6 +`` blast score for a node
            with a root alert, ``1e6 +`` for an alerting node whose alerts are all explained, else the
            number of alerting dependents), ``{node: index of its best alert}`` and each alert's blast
            radius (alert indices; for the alerts a node's score was taken from, best alerts among them).
        """
        cfg: PropagationConfig = self.config
        cache = graph_cache(graph)
        deps = cache.down
        alerting = {a.node for a in items}
        by_node: dict[int, list[int]] = {}
        for i, a in enumerate(items):
            by_node.setdefault(a.node, []).append(i)

        # dependencies reachable within max_hops through silent intermediates
        reach: dict[int, set[int]] = {}
        for v in alerting:
            seen, frontier = set(), [v]
            for _ in range(cfg.max_hops):
                nxt = []
                for u in frontier:
                    for w in deps[u]:
                        if w not in seen and w != v:
                            seen.add(w)
                            if w not in alerting:
                                nxt.append(w)
                frontier = nxt
            reach[v] = seen & alerting

        # explanation edges between alerts
        explains_me: list[list[int]] = [[] for _ in items]  # a -> alerts that explain a
        explained_by_me: list[list[int]] = [[] for _ in items]
        for i, a in enumerate(items):
            for w in reach.get(a.node, ()):
                for j in by_node[w]:
                    b = items[j]
                    if b.start > a.start + cfg.time_tolerance_s:
                        continue
                    if cfg.require_same_metric and a.metric and b.metric and a.metric != b.metric:
                        continue
                    if a.delta is not None and b.delta is not None:
                        if abs(b.delta) < cfg.magnitude_ratio * abs(a.delta):
                            continue
                    explains_me[i].append(j)
                    explained_by_me[j].append(i)

        strength = [1.0 + max(0.0, math.log(a.z / cfg.z_ref)) for a in items]
        is_root = _sink_members(explains_me)
        blast: dict[int, set[int]] = {}  # computed for the alerts a node's score is taken from
        searched: dict[tuple[int, ...], list[int]] = {}  # _closure's memo

        def alert_score(i: int) -> float:
            if i not in blast:
                blast[i] = _closure(i, explained_by_me, searched)
            return sum(strength[j] for j in blast[i])

        # silent nodes: how many alerting nodes depend on them directly (edges counted)
        mask = np.zeros(graph.num_nodes, dtype=bool)
        mask[list(alerting)] = True
        src, dst = graph.edge_index  # src depends on dst, as in cache.up
        scores = np.bincount(dst[mask[src]], minlength=graph.num_nodes).astype(np.float64)
        best_alert: dict[int, int] = {}
        for v, idx in by_node.items():
            roots = [i for i in idx if is_root[i]]
            pool = roots or idx
            pool_scores = [alert_score(i) for i in pool]
            k = max(range(len(pool)), key=pool_scores.__getitem__)
            best_alert[v] = pool[k]
            tier = 2.0e6 if roots else 1.0e6
            scores[v] = tier + pool_scores[k]
        return scores, best_alert, blast

    @staticmethod
    def _path(
        graph: DependencyGraph,
        v: int,
        blast: set[int],
        items: list[_Alert],
        dependents: list[list[int]],
    ) -> tuple[str, ...]:
        """Breadth-first from ``v`` over dependents; end at the farthest alerting node in ``blast``."""
        targets = {items[i].node for i in blast}
        parent = {v: -1}
        q = deque([v])
        last = v
        while q:
            u = q.popleft()
            if u in targets:
                last = u
            for w in dependents[u]:
                if w not in parent:
                    parent[w] = u
                    q.append(w)
        path = []
        while last != -1:
            path.append(graph.nodes[last].id)
            last = parent[last]
        return tuple(reversed(path))
