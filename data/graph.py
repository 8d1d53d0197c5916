"""The dependency graph of the data contract (DESIGN.md) and the alert -> node mapping.

On disk a graph is JSON::

    {"name": "g0007",
     "nodes": [{"id": "c0/host/h12", "kind": "host", "cluster": "c0",
                "match": {"cluster": "c0", "node": "h12"}, "attrs": {...}}, ...],
     "edges": [{"src": "c0/pod/gateway-1", "dst": "c0/host/h12", "kind": "runs_on"}, ...]}

* ``kind`` of a node is one of :data:`NODE_KINDS`; of an edge one of :data:`EDGE_KINDS`.
* **Edges point from the dependent to its dependency** (``src`` needs ``dst``): a service ``calls`` the
  service it sends requests to, a pod ``runs_on`` its host and GPUs, a GPU is ``attached_to`` its host, a
  link is ``attached_to`` the two GPUs it joins, anything ``member_of`` its service/cluster,
  ``depends_on`` shared infrastructure. Faults therefore mostly travel against edge direction.
* ``match`` holds the alert labels that identify the node (see :meth:`DependencyGraph.node_for_alert`).

This module is plain Python + numpy (no torch), so datasets are readable without the ML stack.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from fleetmind.data.errors import DataError
from fleetmind.data.files import read_json
from fleetmind.data.graph_schema import EDGE_KINDS, NODE_KINDS, GraphModel, validation_message

# More specific kinds win when an alert's labels match several nodes equally well.
_KIND_SPECIFICITY = {k: i for i, k in enumerate(reversed(NODE_KINDS))}
_KIND_SPECIFICITY.update({"link": 100, "gpu": 90, "pod": 80, "host": 70, "service": 60})

OVERRIDE_LABEL = "fleetmind_node"
"""An alert label whose value is a node id maps the alert to that node directly."""


@dataclass
class GraphNode:
    """One typed node: ``id`` (unique), ``kind`` (in NODE_KINDS), ``cluster`` (or None for global)."""

    id: str
    kind: str
    cluster: str | None = None
    match: dict[str, str] = field(default_factory=dict)
    attrs: dict[str, Any] = field(default_factory=dict)


@dataclass
class GraphEdge:
    """One typed edge ``src -> dst`` meaning "src depends on dst"."""

    src: str
    dst: str
    kind: str


class DependencyGraph:
    """A typed dependency graph with integer indices for array code.

    Attributes:
        name: the topology name (datasets refer to graphs by it).
        nodes: list of :class:`GraphNode`; ``index[node_id]`` is its row in every array.
        edges: list of :class:`GraphEdge`.
        edge_index: int64 array, shape ``(2, |E|)``, rows ``(src_idx, dst_idx)``.
        edge_type: int64 array, shape ``(|E|,)``, index into :data:`EDGE_KINDS`.
        node_type: int64 array, shape ``(|V|,)``, index into :data:`NODE_KINDS`.
    """

    def __init__(self, name: str, nodes: Iterable[GraphNode], edges: Iterable[GraphEdge]) -> None:
        self.name = name
        self.nodes: list[GraphNode] = list(nodes)
        self.edges: list[GraphEdge] = list(edges)
        self.index: dict[str, int] = {}
        for i, n in enumerate(self.nodes):
            if n.kind not in NODE_KINDS:
                raise DataError(f"graph {name!r}: node {n.id!r} has unknown kind {n.kind!r}")
            if n.id in self.index:
                raise DataError(f"graph {name!r}: duplicate node id {n.id!r}")
            self.index[n.id] = i
        src, dst, etype = [], [], []
        for e in self.edges:
            if e.kind not in EDGE_KINDS:
                raise DataError(
                    f"graph {name!r}: edge {e.src}->{e.dst} has unknown kind {e.kind!r}"
                )
            for end in (e.src, e.dst):
                if end not in self.index:
                    raise DataError(
                        f"graph {name!r}: edge {e.src}->{e.dst} names unknown node {end!r}"
                    )
            src.append(self.index[e.src])
            dst.append(self.index[e.dst])
            etype.append(EDGE_KINDS.index(e.kind))
        self.edge_index = np.array([src, dst], dtype=np.int64).reshape(2, -1)
        self.edge_type = np.array(etype, dtype=np.int64)
        self.node_type = np.array([NODE_KINDS.index(n.kind) for n in self.nodes], dtype=np.int64)
        self._label_index: dict[tuple[str, str], list[int]] | None = None

    # ------------------------------------------------------------------ basics
    @property
    def num_nodes(self) -> int:
        return len(self.nodes)

    @property
    def num_edges(self) -> int:
        return len(self.edges)

    def node(self, node_id: str) -> GraphNode:
        """Return the node with id ``node_id``; raises DataError naming it when unknown."""
        try:
            return self.nodes[self.index[node_id]]
        except KeyError:
            raise DataError(f"graph {self.name!r} has no node {node_id!r}") from None

    def __repr__(self) -> str:
        return f"DependencyGraph({self.name!r}, |V|={self.num_nodes}, |E|={self.num_edges})"

    # ------------------------------------------------------------------ alert mapping
    def node_for_alert(self, labels: Mapping[str, Any]) -> str | None:
        """Map an alert's labels onto a node id, or ``None`` when nothing matches.

        Rules: a ``fleetmind_node`` label naming a node wins. Otherwise ``instance`` (``host:port``) stands
        in for a missing ``node`` label, and the node whose ``match`` labels are all present in the alert
        with equal values, with the most match labels, wins; ties go to the more specific kind
        (link > gpu > pod > host > service > others).
        """
        labels = {str(k): str(v) for k, v in labels.items() if v is not None}
        direct = labels.get(OVERRIDE_LABEL)
        if direct is not None and direct in self.index:
            return direct
        if "node" not in labels and "instance" in labels:
            labels["node"] = labels["instance"].rsplit(":", 1)[0]
        if self._label_index is None:
            idx: dict[tuple[str, str], list[int]] = {}
            for i, n in enumerate(self.nodes):
                for kv in n.match.items():
                    idx.setdefault((str(kv[0]), str(kv[1])), []).append(i)
            self._label_index = idx
        candidates: set[int] = set()
        for kv in labels.items():
            candidates.update(self._label_index.get(kv, ()))
        best: tuple[int, int, int] | None = None
        for i in candidates:
            m = self.nodes[i].match
            if all(labels.get(k) == str(v) for k, v in m.items()):
                key = (len(m), _KIND_SPECIFICITY.get(self.nodes[i].kind, 0), -i)
                if best is None or key > best:
                    best = key
        return None if best is None else self.nodes[-best[2]].id

    # ------------------------------------------------------------------ JSON
    def to_json(self) -> dict[str, Any]:
        """Return the JSON-able dict of the data contract."""
        return {
            "name": self.name,
            "nodes": [
                {
                    "id": n.id,
                    "kind": n.kind,
                    "cluster": n.cluster,
                    "match": n.match,
                    "attrs": n.attrs,
                }
                for n in self.nodes
            ],
            "edges": [{"src": e.src, "dst": e.dst, "kind": e.kind} for e in self.edges],
        }

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> DependencyGraph:
        """Build a graph from the JSON dict; raises DataError naming the first bad entry.

        The structure is checked by :class:`fleetmind.data.graph_schema.GraphModel` (the one model behind
        ``docs/graph.schema.json``), ids and edge ends by the constructor.
        """
        from pydantic import ValidationError

        if not isinstance(obj, Mapping):
            raise DataError("graph JSON must be an object with 'name', 'nodes' and 'edges'")
        try:
            model = GraphModel.model_validate(dict(obj))
        except ValidationError as err:
            raise DataError(f"malformed graph JSON: {validation_message(err)}") from None
        return cls.from_model(model)

    @classmethod
    def from_model(cls, model: Any) -> DependencyGraph:
        """Build a graph from a validated :class:`fleetmind.data.graph_schema.GraphModel`."""
        nodes = [
            GraphNode(
                id=n.id, kind=n.kind, cluster=n.cluster, match=dict(n.match), attrs=dict(n.attrs)
            )
            for n in model.nodes
        ]
        edges = [GraphEdge(e.src, e.dst, e.kind) for e in model.edges]
        return cls(model.name, nodes, edges)

    def save(self, path: str | Path) -> None:
        """Write the graph JSON to ``path``."""
        Path(path).write_text(json.dumps(self.to_json(), separators=(",", ":")))

    @classmethod
    def load(cls, path: str | Path) -> DependencyGraph:
        """Read a graph JSON file; raises DataError for a missing or malformed file."""
        return cls.from_json(read_json(path, "graph file"))
