"""The served dependency graph, swappable at runtime (``PUT /api/v1/graph``) with cached lookups.

Each swap makes a new :class:`GraphView` that says which graph is served: its ``version`` (1 at
start, +1 per swap), ``source`` (the file's path, or ``"api"`` for ``PUT /api/v1/graph``) and
``loaded_at`` (Unix seconds); ``GET /api/v1/graph`` and ``/readyz`` show them.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from fleetmind.data.graph import DependencyGraph

NEIGHBOURHOOD_CACHE = 4096

API_SOURCE = "api"
"""The ``source`` of a graph uploaded with ``PUT /api/v1/graph``."""


@dataclass(frozen=True)
class FileVersion:
    """One version of a graph file, as it was read.

    Attributes:
        stamp: ``(inode, size in bytes, mtime in ns, ctime in ns)``: tells a file written again
            (or swapped in with ``mv``) from an untouched one without reading it.
        sha256: hex digest of the file's bytes: tells changed content from the same bytes written
            again.
    """

    stamp: tuple[int, int, int, int]
    sha256: str


@dataclass
class GraphView:
    """One immutable graph version plus lazily built, thread-safe caches.

    Attributes:
        graph: the served graph.
        version: 1 for the graph loaded at start, +1 per swap (this process's count).
        source: the file it was read from, or :data:`API_SOURCE`.
        loaded_at: when it was swapped in, Unix seconds.
    """

    graph: DependencyGraph
    version: int
    source: str = API_SOURCE
    loaded_at: float = 0.0
    _undirected: list[list[int]] | None = None
    _barriers: frozenset[int] = frozenset()
    _shared: frozenset[int] = frozenset()
    _hood: OrderedDict[tuple[str, int], frozenset[str]] = field(default_factory=OrderedDict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def describe(self, paths: bool = True) -> dict[str, Any]:
        """``version``, ``source`` and ``loaded_at`` (ISO 8601, UTC) of this graph, as the API
        shows them; without ``paths`` (``/readyz``, which needs no token) a file is ``"file"``."""
        source = self.source if paths or self.source == API_SOURCE else "file"
        loaded_at = datetime.fromtimestamp(self.loaded_at, UTC).isoformat()
        return {"version": self.version, "source": source, "loaded_at": loaded_at}

    def neighbourhood(self, node_id: str, hops: int) -> frozenset[str]:
        """Node ids within ``hops`` undirected hops of ``node_id``.

        ``cluster`` nodes are neither reached from another node nor expanded when they are the
        start (a cluster node's neighbourhood is itself): every member links to its cluster, so
        crossing one would make a whole cluster one neighbourhood, and merely reaching it put the
        cluster node in every member's neighbourhood, so that one cluster-level alert
        (KubeCPUOvercommit) joined every unrelated incident of the cluster into one.

        A node served by several hosts (``runs_on`` edges to two or more hosts: a Node-endpoint
        Service such as the Prometheus Operator's kubelet Service, ``kube-system/<fullname>-kubelet``,
        whose endpoints are every node) is a barrier in the same way: crossed, it would put every
        host within 2 hops of every other; reached, an incident holding an alert on it
        (``TargetDown{job="kubelet"}``) would take every later host alert of the window, joining
        unrelated hosts through it. Its alerts group with other alerts on it.

        A cluster-less node that nodes of two or more clusters ``depends_on`` (shared
        infrastructure: a global DNS, config store or model registry; :func:`shared_nodes`) is
        reached but not crossed: it can end a path, never lie inside one. Crossed, it put every
        service of every cluster within 2 hops of every other, so unrelated faults in different
        clusters became one incident. Reached, an alert on it (CoreDNS down on ``global/dns``)
        still groups with the alerts of the services that depend on it; started from, it is
        expanded as any node, up to the next shared node (the relation stays symmetric).
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
                self._barriers = barrier_nodes(self.graph)
                self._shared = shared_nodes(self.graph)
            adj, barriers, shared = self._undirected, self._barriers, self._shared
        g = self.graph
        start = g.index[node_id]
        seen = {start}
        frontier = [start]
        for _ in range(hops):
            nxt = []
            for v in frontier:
                if v in barriers or (v in shared and v != start):
                    continue
                for u in adj[v]:
                    if u not in seen and u not in barriers:
                        seen.add(u)
                        nxt.append(u)
            frontier = nxt
        out = frozenset(g.nodes[i].id for i in seen)
        with self._lock:
            self._hood[key] = out
            if len(self._hood) > NEIGHBOURHOOD_CACHE:
                self._hood.popitem(last=False)
        return out


def barrier_nodes(graph: DependencyGraph) -> frozenset[int]:
    """Indices of the nodes :meth:`GraphView.neighbourhood` neither reaches nor crosses: ``cluster``
    nodes, and nodes with ``runs_on`` edges to two or more hosts (Node-endpoint Services: the
    kubelet's Service of ``fleetmind graph build``, which ``runs_on`` every node it lists)."""
    hosts_of: dict[int, set[int]] = {}
    for e in graph.edges:
        if e.kind != "runs_on":
            continue
        s, d = graph.index[e.src], graph.index[e.dst]
        if graph.nodes[d].kind == "host" and graph.nodes[s].kind != "host":
            hosts_of.setdefault(s, set()).add(d)
    hubs = {i for i, hosts in hosts_of.items() if len(hosts) >= 2}
    return frozenset(hubs | {i for i, n in enumerate(graph.nodes) if n.kind == "cluster"})


def shared_nodes(graph: DependencyGraph) -> frozenset[int]:
    """Indices of the nodes :meth:`GraphView.neighbourhood` reaches but does not cross: nodes (not
    ``cluster`` nodes themselves) with ``depends_on`` edges from nodes of two or more clusters
    other than their own (shared infrastructure such as the example graph's ``global/dns``,
    ``global/config`` and ``global/registry``, of no cluster, which every service of every cluster
    depends on; or a registry that a management cluster hosts for the others). A node that only
    its own cluster and one other depend on is crossed as any other."""
    clusters_of: dict[int, set[str]] = {}
    for e in graph.edges:
        if e.kind != "depends_on":
            continue
        src, d = graph.nodes[graph.index[e.src]], graph.index[e.dst]
        dst = graph.nodes[d]
        if src.cluster and src.cluster != dst.cluster and dst.kind != "cluster":
            clusters_of.setdefault(d, set()).add(src.cluster)
    return frozenset(i for i, clusters in clusters_of.items() if len(clusters) >= 2)


class GraphStore:
    """Holds the current :class:`GraphView`; :meth:`replace` swaps it atomically, and
    :meth:`replace_if` only while a given version is still served (compare-and-swap).

    Args:
        graph: the graph served at start.
        source: where it came from (a file's path, or :data:`API_SOURCE`).
        file_version: the version of the file ``graph`` was read from, taken before it was read
            (the refresher then reloads a file changed while the service started), if known.
        clock: Unix seconds, for ``loaded_at`` (tests pass a fixed one).
    """

    def __init__(
        self,
        graph: DependencyGraph,
        source: str,
        file_version: FileVersion | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._clock = clock
        self.file_version = file_version
        self._lock = threading.Lock()  # one swap at a time: versions are unique, CAS is atomic
        self._view = GraphView(graph, 1, source, clock())

    @property
    def view(self) -> GraphView:
        return self._view

    @property
    def graph(self) -> DependencyGraph:
        return self._view.graph

    @property
    def source(self) -> str:
        """Where the served graph came from: a file's path, or :data:`API_SOURCE`."""
        return self._view.source

    def replace(self, graph: DependencyGraph, source: str = API_SOURCE) -> GraphView:
        """Serve ``graph`` from now on (a new :class:`GraphView`, ``version`` + 1)."""
        with self._lock:
            self._view = GraphView(graph, self._view.version + 1, source, self._clock())
            return self._view

    def replace_if(self, graph: DependencyGraph, source: str, version: int) -> GraphView | None:
        """Serve ``graph`` only if the served graph is still ``version`` (its
        :attr:`GraphView.version`); ``None``, serving what is served, when another swap came first.

        The refresher notes the version before it loads a changed file (seconds for a large
        graph), so an upload (``PUT /api/v1/graph``) swapped in meanwhile is not replaced by the
        older file content.
        """
        with self._lock:
            if self._view.version != version:
                return None
            self._view = GraphView(graph, version + 1, source, self._clock())
            return self._view
