"""Propagation paths from attention weights: why the GAT blames a node.

In the message graph of :func:`rca.model.message_graph`, the attention coefficient
:math:`\\alpha_{ij}` of an edge ``j -> i`` says how much node ``i`` listened to ``j``. A fault that
spread from a cause ``c`` to an alerting node ``a`` should show up as a chain of edges
``c -> v1 -> ... -> a`` along which every receiver attended strongly to its sender. We average the
coefficients over heads and layers, give each edge the cost ``-log(alpha) + hop_penalty``, and return,
for each cause, the cheapest path (Dijkstra) to any alerting node: the highest-attention propagation
path. A cause that alerts itself gets the one-node path ``(cause,)``.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from scipy.sparse import csr_matrix
from scipy.sparse.csgraph import dijkstra

HOP_PENALTY = 1e-3
"""Added to every edge cost: keeps costs positive and prefers shorter paths among equals."""


def edge_costs(
    edge_index: np.ndarray, attention: Sequence[np.ndarray], num_nodes: int
) -> csr_matrix:
    """Sparse cost matrix ``C[src, dst] = -log(mean attention) + HOP_PENALTY`` (self loops dropped).

    Args:
        edge_index: ``(2, |E'|)`` message-graph edges (``src -> dst``).
        attention: per layer an ``(|E'|, H)`` (or ``(|E'|,)``) array of attention coefficients.
        num_nodes: ``|V|``.

    Returns:
        ``(|V|, |V|)`` CSR matrix; parallel edges keep their cheapest cost.
    """
    alpha = np.mean([a.reshape(a.shape[0], -1).mean(axis=1) for a in attention], axis=0)
    src, dst = edge_index
    keep = src != dst
    src, dst = src[keep], dst[keep]
    cost = -np.log(np.clip(alpha[keep], 1e-9, 1.0)) + HOP_PENALTY
    key = src.astype(np.int64) * num_nodes + dst
    order = np.argsort(key, kind="stable")
    key, cost = key[order], cost[order]
    first = np.ones(key.size, dtype=bool)
    first[1:] = key[1:] != key[:-1]
    if not first.all():  # parallel edges: the cheapest cost of each group
        starts = np.flatnonzero(first)
        key, cost = key[starts], np.minimum.reduceat(cost, starts)
    # keys are sorted and unique, i.e. row-major order: build the CSR arrays directly (the same
    # matrix the COO constructor would give, without its conversion pass), with the int32 indices
    # scipy's shortest-path routines take
    rows, cols = key // num_nodes, key % num_nodes
    indptr = np.zeros(num_nodes + 1, dtype=np.int32)
    np.cumsum(np.bincount(rows, minlength=num_nodes), out=indptr[1:])
    return csr_matrix((cost, cols.astype(np.int32), indptr), shape=(num_nodes, num_nodes))


def propagation_paths(
    costs: csr_matrix, causes: Sequence[int], alerting: np.ndarray
) -> list[tuple[int, ...]]:
    """Highest-attention path from each cause to its nearest alerting node.

    Args:
        costs: matrix from :func:`edge_costs`.
        causes: node indices to explain.
        alerting: bool ``(|V|,)``, True where a node has alerts.

    Returns:
        One tuple of node indices per cause, starting at the cause and ending at an alerting node;
        ``(cause,)`` when the cause alerts itself or no alerting node is reachable.
    """
    causes = [int(c) for c in causes]
    if not causes:
        return []
    targets = np.flatnonzero(alerting)
    out: list[tuple[int, ...]] = []
    todo = [c for c in causes if not alerting[c]]
    paths: dict[int, tuple[int, ...]] = {}
    if todo and targets.size:
        dist, pred = dijkstra(costs, directed=True, indices=todo, return_predecessors=True)
        for row, c in enumerate(todo):
            d = dist[row, targets]
            best = int(np.argmin(d))
            if not np.isfinite(d[best]):
                continue
            node = int(targets[best])
            path = [node]
            while node != c:
                node = int(pred[row, node])
                if node < 0:  # pragma: no cover - dijkstra guarantees a chain to the source
                    break
                path.append(node)
            paths[c] = tuple(reversed(path))
    for c in causes:
        out.append(paths.get(c, (c,)))
    return out
