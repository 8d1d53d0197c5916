"""Per-graph caches of the fallback ranker and the fitted GAT hold the graph, not its ``id()``.

CPython's ``id()`` is the object's address, and "two objects with non-overlapping lifetimes may
have the same id() value" (the Python docs, ``id``): after a graph swap frees the old graph, the
next graph built can get its address, and a cache keyed by ``id(graph)`` handed it the old
graph's adjacency (the upstream-coverage fallback ranked the old dependencies) or edge tensors
(the fitted GAT). The caches keep the graph object and compare with ``is``, as
``rca/gat_analyzer.py``'s node-id cache does. The reuse is simulated deterministically by making
``id`` return one value for every graph.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from fleetmind.data.graph import DependencyGraph
from fleetmind.rca import fit_model
from fleetmind.serving import fallback
from fleetmind.serving.fallback import UpstreamCoverageAnalyzer

ALERTS = [{"labels": {"service": "n0"}, "status": "firing"}]


def _graph(dst: int) -> DependencyGraph:
    """Four services; n0 calls n<dst>."""
    return DependencyGraph.from_json(
        {
            "name": "t",
            "nodes": [
                {"id": f"n{i}", "kind": "service", "cluster": "c", "match": {"service": f"n{i}"}}
                for i in range(4)
            ],
            "edges": [{"src": "n0", "dst": f"n{dst}", "kind": "calls"}],
        }
    )


def _same_address(monkeypatch: pytest.MonkeyPatch, module: Any) -> None:
    """Every object has one address: what a freed graph's reused address does to ``id()``."""
    monkeypatch.setattr(module, "id", lambda _obj: 140_000_000, raising=False)


def test_fallback_adjacency_follows_the_graph_not_its_address(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _same_address(monkeypatch, fallback)
    ranker = UpstreamCoverageAnalyzer()
    first = [c.node for c in ranker.find_root_causes(_graph(1), ALERTS, 3).causes]
    second = [c.node for c in ranker.find_root_causes(_graph(2), ALERTS, 3).causes]
    assert first == ["n0", "n1"] and second == ["n0", "n2"]


def test_fitted_gat_inputs_follow_the_graph_not_its_address(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    torch = pytest.importorskip("torch")
    _same_address(monkeypatch, fit_model)
    seen: list[list[list[int]]] = []

    def model(x: Any, edge_index: Any, _edge_type: Any) -> tuple[Any, None, None]:
        seen.append(edge_index.tolist())
        return torch.zeros(x.shape[0]), None, None

    gat = fit_model.FittedGATAnalyzer(model, {"version": "t"})
    g1, g2 = _graph(1), _graph(2)
    gat.scores(g1, ALERTS)
    gat.scores(g2, ALERTS)
    assert seen == [np.asarray(g1.edge_index).tolist(), np.asarray(g2.edge_index).tolist()]
    assert seen[0] != seen[1]
