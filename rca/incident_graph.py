"""The graph one incident is ranked on: the served graph plus the pod-to-GPU edges its alerts name.

A pod that holds a GPU ``runs_on`` it, but ``fleetmind graph build`` only knows which GPU a pod holds
from an explicit annotation (Alibaba's GPU-sharing ``alibabacloud.com/gpu-index``): with NVIDIA's
device plugin (``nvidia.com/gpu`` limits) the kubelet picks the devices and no API object records
which. dcgm-exporter does: with its Kubernetes pod mapping each GPU series carries the pod holding
the GPU (``exported_pod``/``exported_namespace`` under kube-prometheus-stack's default
``honorLabels: false``, ``pod``/``namespace`` with ``honor_labels: true``; NVIDIA dcgm-exporter
``pkg/cmd/app.go`` ``--kubernetes``, ``internal/pkg/transformation/kubernetes.go``). Without the
edge, an XID storm's GPU is joined to the crashing pod only through the host, and the pod's Service
outranks it.

:func:`incident_graph` adds, for one incident's ranking only, the edge ``pod -runs_on-> GPU`` for
each alert that maps onto a GPU and names the workload pod holding it, when:

* the pod is a node of the graph (same cluster, namespace and name) and ``runs_on`` the GPU's host
  (the GPU is ``attached_to`` it): a pod elsewhere cannot hold the GPU;
* the pod label is the workload's: ``exported_pod`` when present; else ``pod`` unless it names the
  exporter (a dcgm-exporter pod name, ``^(nvidia-)?dcgm-exporter-<5>``, the pod a ``Hostname`` /
  ``hostname`` label names, or a DaemonSet's pod);
* the graph has no such edge yet.

The served graph is never changed: the derived graph is a :class:`DependencyGraph` with the extra
edges appended that shares the served graph's nodes, indices and per-graph caches (:func:`with_edges`:
nothing keyed by node is rebuilt), cached per served graph and edge set (dropped with it) so that an
incident re-ranked every few seconds does not rebuild its edge arrays. Alert dicts and the service's
:class:`~fleetmind.rca.features.columnar.AlertColumns` (with their ``labels``) give the same edges.
"""

from __future__ import annotations

import dataclasses
import threading
import weakref
from collections import OrderedDict
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from fleetmind.data.graph import DCGM_EXPORTER_POD, EDGE_KINDS, DependencyGraph, GraphEdge
from fleetmind.rca.baselines import share_graph_cache
from fleetmind.rca.features.columnar import AlertColumns
from fleetmind.rca.features.mapping import share_static

_CACHE_SIZE = 16
"""Derived graphs kept per served graph (distinct pod-to-GPU edge sets, LRU): each holds its edge
list and arrays only (:func:`with_edges`, under 1 MB for 15,000 edges)."""


class _Index:
    """Per-graph tables of :func:`incident_graph`: pods by ``(cluster, namespace, pod)``, each
    pod's ``runs_on`` targets, each GPU's host, and the derived graphs built so far."""

    def __init__(self, g: DependencyGraph) -> None:
        self.pods: dict[tuple[str | None, str, str], int] = {}
        for i, n in enumerate(g.nodes):
            if n.kind == "pod" and "pod" in n.match and "namespace" in n.match:
                key = (n.match.get("cluster"), str(n.match["namespace"]), str(n.match["pod"]))
                self.pods.setdefault(key, i)
        self.runs_on: dict[int, set[int]] = {}
        self.gpu_host: dict[int, int] = {}
        kinds = [n.kind for n in g.nodes]
        for e in g.edges:
            s, d = g.index[e.src], g.index[e.dst]
            if e.kind == "runs_on" and kinds[s] == "pod":
                self.runs_on.setdefault(s, set()).add(d)
            elif e.kind == "attached_to" and kinds[s] == "gpu" and kinds[d] == "host":
                self.gpu_host.setdefault(s, d)
        self.derived: OrderedDict[tuple[tuple[int, int], ...], DependencyGraph] = OrderedDict()
        self.lock = threading.Lock()


_INDEX: weakref.WeakKeyDictionary[DependencyGraph, _Index] = weakref.WeakKeyDictionary()
_INDEX_LOCK = threading.Lock()


def _index(g: DependencyGraph) -> _Index:
    with _INDEX_LOCK:
        ix = _INDEX.get(g)
        if ix is None:
            ix = _INDEX[g] = _Index(g)
        return ix


def _maybe_gpu_pod(labels: Mapping[str, Any]) -> bool:
    """Cheap filter: a label set that can name a GPU and a pod at once."""
    return "gpu" in labels and ("exported_pod" in labels or "pod" in labels)


def _workload_pod(
    graph: DependencyGraph, labels: dict[str, str]
) -> tuple[str | None, str, str] | None:
    """``(cluster, namespace, pod)`` of the workload pod a GPU alert names, or ``None``."""
    if labels.get("exported_pod"):
        pass  # the exporter's own pod/namespace were renamed: exported_* is the workload
    else:
        pod = labels.get("pod", "")
        if (
            not pod
            or DCGM_EXPORTER_POD.match(pod)
            or pod in (labels.get("Hostname"), labels.get("hostname"))
        ):
            return None
    subject = graph.alert_subject(
        labels
    )  # exported_* over pod/namespace, the sole cluster filled in
    pod, ns = subject.get("pod"), subject.get("namespace")
    if not pod or not ns:
        return None
    return subject.get("cluster"), ns, pod


def gpu_pod_edges(
    graph: DependencyGraph, mapped: Iterable[tuple[int | None, Mapping[str, Any]]]
) -> list[tuple[int, int]]:
    """The ``(pod, GPU)`` node-index pairs to join by ``runs_on`` for alerts given as
    ``(node index they map onto or None, labels)``, sorted, without repeats (see the module
    docstring for the rules)."""
    ix: _Index | None = None
    out: set[tuple[int, int]] = set()
    for node, raw in mapped:
        if node is None or graph.nodes[node].kind != "gpu" or not _maybe_gpu_pod(raw):
            continue
        labels = {str(k): str(v) for k, v in raw.items() if v is not None}
        key = _workload_pod(graph, labels)
        if key is None:
            continue
        if ix is None:
            ix = _index(graph)
        pod = ix.pods.get(key)
        if pod is None and key[0] is not None:
            pod = ix.pods.get((None, key[1], key[2]))
        if pod is None:
            continue
        owner = graph.nodes[pod].attrs.get("owner")
        if isinstance(owner, str) and owner.startswith("DaemonSet/"):
            continue  # an exporter (or other per-node agent) pod, not the GPU's holder
        targets = ix.runs_on.get(pod, set())
        host = ix.gpu_host.get(node)
        if host is None or host not in targets or node in targets:
            continue
        out.add((pod, node))
    return sorted(out)


def _derive(graph: DependencyGraph, edges: list[tuple[int, int]]) -> DependencyGraph:
    ix = _index(graph)
    key = tuple(edges)
    with ix.lock:
        g = ix.derived.get(key)
        if g is not None:
            ix.derived.move_to_end(key)
            return g
    g = with_edges(graph, edges)
    with ix.lock:
        ix.derived[key] = g
        while len(ix.derived) > _CACHE_SIZE:
            ix.derived.popitem(last=False)
    return g


def with_edges(graph: DependencyGraph, edges: Sequence[tuple[int, int]]) -> DependencyGraph:
    """``graph`` plus the edges ``pod -runs_on-> GPU`` of ``edges`` (node index pairs; repeats and
    edges ``graph`` has are left out), without copying ``graph``.

    The new graph shares ``graph``'s node list, id index, node arrays and alert-mapping caches
    (which read ``member_of`` and pod-to-host edges only), the feature code's label-set memos,
    match tables and degree arrays (:func:`fleetmind.rca.features.mapping.share_static`: only the
    degree rows of the nodes the new edges touch are its own) and a baseline's cached adjacency
    (:func:`fleetmind.rca.baselines.share_graph_cache`). It holds its edge list and edge arrays
    (``O(|E|)`` words). Equal, edge for edge and index for index, to ``DependencyGraph(graph.name,
    graph.nodes, [*graph.edges, *new edges])``; ``graph`` is untouched.

    Raises:
        ValueError: when a pair is not a pod and a GPU of ``graph``.
    """
    nodes, n = graph.nodes, graph.num_nodes
    for p, q in edges:
        ok = 0 <= p < n and 0 <= q < n and nodes[p].kind == "pod" and nodes[q].kind == "gpu"
        if not ok:
            raise ValueError(f"with_edges: ({p}, {q}) is not a (pod, GPU) pair of the graph")
    runs_on = _index(graph).runs_on
    edges = [(p, q) for p, q in dict.fromkeys(edges) if q not in runs_on.get(p, ())]
    if not edges:
        return graph
    if graph._label_index is None:  # built once on the served graph, shared by every derived one
        graph._best_match({})
    g = DependencyGraph.__new__(DependencyGraph)
    # what depends on the nodes only; the alert mapping's caches read member_of and pod-to-host
    # edges, never pod-to-GPU ones (other attributes, analyzers' edge caches, are not copied)
    for name in _SHARED_ATTRS:
        setattr(g, name, getattr(graph, name))
    extra = [GraphEdge(graph.nodes[p].id, graph.nodes[q].id, "runs_on") for p, q in edges]
    g.edges = [*graph.edges, *extra]
    pairs = np.asarray(edges, dtype=np.int64).reshape(-1, 2).T
    g.edge_index = np.concatenate([graph.edge_index, pairs], axis=1)
    g.edge_type = np.concatenate(
        [graph.edge_type, np.full(len(extra), EDGE_KINDS.index("runs_on"), dtype=np.int64)]
    )
    share_static(graph, g)
    share_graph_cache(graph, g)
    return g


_SHARED_ATTRS = ("name", "nodes", "index", "node_type", "_label_index", "_derived")
"""The :class:`DependencyGraph` attributes a derived graph shares with its served graph."""


def incident_graph(graph: DependencyGraph, alerts: Any) -> tuple[DependencyGraph, Any]:
    """The graph to rank one incident's ``alerts`` on, and the alerts valid on it.

    ``alerts``: Alertmanager v4 alert dicts (``labels``), or
    :class:`~fleetmind.rca.features.columnar.AlertColumns` on ``graph`` (those without ``labels``
    cannot name a pod and are ranked on ``graph``). Returns ``(graph, alerts)`` unchanged when no
    alert adds an edge; otherwise a derived graph with the ``pod -runs_on-> GPU`` edges of
    :func:`gpu_pod_edges` (same nodes and indices, ``graph`` untouched) and the alerts on it
    (columns rebound to it). Costs a key lookup per alert that carries ``gpu`` and a pod label.
    """
    if isinstance(alerts, AlertColumns):
        if alerts.graph is not graph or alerts.labels is None:
            return graph, alerts
        rows = alerts.rows.tolist()
        pairs: Sequence[tuple[int | None, Mapping[str, Any]]] = [
            (r, lab) for r, lab in zip(rows, alerts.labels, strict=True) if _maybe_gpu_pod(lab)
        ]
    else:
        pairs = []
        for a in alerts:
            lab = a.get("labels") if isinstance(a, Mapping) else None
            if isinstance(lab, Mapping) and _maybe_gpu_pod(lab):
                nid = graph.node_for_alert(lab)
                pairs.append((None if nid is None else graph.index[nid], lab))
    if not pairs:
        return graph, alerts
    edges = gpu_pod_edges(graph, pairs)
    if not edges:
        return graph, alerts
    derived = _derive(graph, edges)
    if isinstance(alerts, AlertColumns):
        return derived, dataclasses.replace(alerts, graph=derived)
    return derived, alerts
