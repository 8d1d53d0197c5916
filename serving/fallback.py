"""Built-in fallbacks that keep the service answering when no model and no peer baseline is present.

:class:`UpstreamCoverageAnalyzer` ranks the dependencies of alerting nodes: a fault travels against
edge direction (a dependency's fault makes its dependents alert), so every node reachable from an
alerting node along edges within ``max_depth`` hops is a candidate, scored
``sum over alerting nodes a reaching c of alerts(a) * decay ** dist(a, c)``. The path of a cause is
the cause alone when the cause raises alerts of its own (the :class:`~fleetmind.rca.base.RankedCause`
contract); otherwise it runs from the cause back to the alerting node that contributed the most.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from fleetmind.data.graph import DependencyGraph
from fleetmind.rca.base import BaseAnalyzer, RankedCause, RCAResult
from fleetmind.serving.alertmap import node_for_alert


@dataclass
class UpstreamCoverageConfig:
    """Config of :class:`UpstreamCoverageAnalyzer`.

    Attributes:
        max_depth: how many dependency hops a candidate may lie from an alerting node.
        decay: weight per hop, in (0, 1].
    """

    max_depth: int = 3
    decay: float = 0.6


class UpstreamCoverageAnalyzer(BaseAnalyzer):
    """Rank nodes by how many alerts their dependents raise, discounted per hop."""

    name: ClassVar[str] = "upstream-coverage"
    config_class: ClassVar[type] = UpstreamCoverageConfig

    def __init__(self, config: UpstreamCoverageConfig | None = None) -> None:
        super().__init__(config)
        # the graph itself, not its id(): a new graph may get a freed graph's address
        self._adj_cache: tuple[DependencyGraph, list[list[int]]] | None = None

    def _adjacency(self, graph: DependencyGraph) -> list[list[int]]:
        """Out-neighbours of each node index, cached for the last graph (the served one)."""
        cached = self._adj_cache
        if cached is not None and cached[0] is graph:
            return cached[1]
        out: list[list[int]] = [[] for _ in range(graph.num_nodes)]
        for s, d in graph.edge_index.T.tolist():
            out[s].append(d)
        self._adj_cache = (graph, out)
        return out

    def find_root_causes(
        self, graph: DependencyGraph, alerts: Sequence[dict[str, Any]], top_k: int | None = None
    ) -> RCAResult:
        counts: Counter[int] = Counter()
        for a in alerts:
            nid = node_for_alert(graph, a.get("labels") or {})
            if nid is not None:
                counts[graph.index[nid]] += 1
        adj = self._adjacency(graph)
        cfg = self.config
        score: dict[int, float] = {}
        best: dict[int, tuple[float, int]] = {}  # candidate -> (best contribution, source)
        parents: dict[int, dict[int, int]] = {}
        for src, n_alerts in counts.items():
            # BFS along dependency edges; the parent map rebuilds paths for the winners only.
            parent = {src: -1}
            frontier = [src]
            for depth in range(cfg.max_depth + 1):
                w = n_alerts * cfg.decay**depth
                for v in frontier:
                    score[v] = score.get(v, 0.0) + w
                    b = best.get(v)
                    if b is None or b[0] < w:
                        best[v] = (w, src)
                if depth == cfg.max_depth:
                    break
                nxt = []
                for v in frontier:
                    for d in adj[v]:
                        if d not in parent:
                            parent[d] = v
                            nxt.append(d)
                frontier = nxt
            parents[src] = parent
        order = sorted(score, key=lambda i: (-score[i], i))
        if top_k is not None:
            order = order[:top_k]
        causes = []
        for i in order:
            n = graph.nodes[i]
            if counts[i]:
                # an alerting cause explains its own alerts: path is [node] alone (RankedCause.path)
                path = [n.id]
            else:
                parent = parents[best[i][1]]
                path, u = [], i
                while u != -1:
                    path.append(graph.nodes[u].id)
                    u = parent[u]
            causes.append(RankedCause(n.id, n.kind, n.cluster, float(score[i]), None, tuple(path)))
        return RCAResult(causes=causes, method=self.name)
