"""The served dependency graph, swappable at runtime (``PUT /api/v1/graph``) with cached lookups."""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass, field

from fleetmind.data.graph import DependencyGraph

NEIGHBOURHOOD_CACHE = 4096


@dataclass
class GraphView:
    """One immutable graph version plus lazily built, thread-safe caches."""

    graph: DependencyGraph
    version: int
    _undirected: list[list[int]] | None = None
    _hood: OrderedDict[tuple[str, int], frozenset[str]] = field(default_factory=OrderedDict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def neighbourhood(self, node_id: str, hops: int) -> frozenset[str]:
        """Node ids within ``hops`` undirected hops of ``node_id``.

        ``cluster`` nodes are neither reached from another node nor expanded when they are the
        start (a cluster node's neighbourhood is itself): every member links to its cluster, so
        crossing one would make a whole cluster one neighbourhood, and merely reaching it put the
        cluster node in every member's neighbourhood, so that one cluster-level alert
        (KubeCPUOvercommit) joined every unrelated incident of the cluster into one.
        """
        key = (node_id, hops)
        with self._lock:
            hit = self._hood.get(key)
            if hit is not None:
                return hit
            if self._undirected is None:
                adj: list[list[int]] = [[] for _ in range(self.graph.num_nodes)]
                for s, d in self.graph.edge_index.T.tolist():
                    adj[s].append(d)
                    adj[d].append(s)
                self._undirected = adj
            adj = self._undirected
        g = self.graph
        start = g.index[node_id]
        seen = {start}
        frontier = [start]
        for _ in range(hops):
            nxt = []
            for v in frontier:
                if g.nodes[v].kind == "cluster":
                    continue
                for u in adj[v]:
                    if u not in seen and g.nodes[u].kind != "cluster":
                        seen.add(u)
                        nxt.append(u)
            frontier = nxt
        out = frozenset(g.nodes[i].id for i in seen)
        with self._lock:
            self._hood[key] = out
            if len(self._hood) > NEIGHBOURHOOD_CACHE:
                self._hood.popitem(last=False)
        return out


class GraphStore:
    """Holds the current :class:`GraphView`; :meth:`replace` swaps it atomically."""

    def __init__(self, graph: DependencyGraph, source: str) -> None:
        self.source = source
        self._view = GraphView(graph, 1)

    @property
    def view(self) -> GraphView:
        return self._view

    @property
    def graph(self) -> DependencyGraph:
        return self._view.graph

    def replace(self, graph: DependencyGraph, source: str = "api") -> GraphView:
        self._view = GraphView(graph, self._view.version + 1)
        self.source = source
        return self._view
