"""The alert mapping and the propagation ranker's blast radii, made to scale with alerts, give the
straightforward algorithms' results exactly (no timing is asserted here).

An incident of 10,000 alerts took 7.6 s in the GAT path (2026-12-06): ``_best_match`` checked
every node sharing any label with an alert (``cluster=`` names the whole cluster), and the
propagation ranker searched the explanation graph once per alert. The mapping now looks nodes up
by their set of ``match`` keys, and alerts with the same successors share one search. The
references below are the earlier code; the blast radii must match it in iteration order too, since
a node's score is a float sum over that set.
"""

from __future__ import annotations

import random
from collections import deque
from collections.abc import Mapping

import numpy as np
import pytest

from fleetmind.data.graph import _KIND_SPECIFICITY, DependencyGraph, GraphEdge, GraphNode
from fleetmind.rca import propagation
from fleetmind.rca.propagation import PropagationRanker, _Alert, _closure

KINDS = ("link", "gpu", "pod", "host", "service", "storage", "cluster")
KEYS = ("cluster", "namespace", "pod", "node", "service", "gpu")


def _reference_best_match(graph: DependencyGraph, labels: Mapping[str, str]) -> int | None:
    """``_best_match`` as written before 2026-12-06."""
    idx: dict[tuple[str, str], list[int]] = {}
    for i, n in enumerate(graph.nodes):
        for kv in n.match.items():
            idx.setdefault((str(kv[0]), str(kv[1])), []).append(i)
    candidates: set[int] = set()
    for kv in labels.items():
        candidates.update(idx.get(kv, ()))
    best: tuple[int, int, int] | None = None
    for i in candidates:
        m = graph.nodes[i].match
        if all(labels.get(k) == str(v) for k, v in m.items()):
            key = (len(m), _KIND_SPECIFICITY.get(graph.nodes[i].kind, 0), -i)
            if best is None or key > best:
                best = key
    return None if best is None else -best[2]


def _random_graph(rng: random.Random, n: int) -> DependencyGraph:
    nodes = []
    for i in range(n):
        keys = rng.sample(KEYS, rng.randint(0, 3))  # some with no match at all
        match = {k: f"v{rng.randint(0, 2)}" for k in keys}
        if keys and rng.random() < 0.2:
            match[keys[0]] = rng.randint(0, 2)  # a non-string value, read as its text
        nodes.append(GraphNode(f"n{i}", rng.choice(KINDS), None, match))
    return DependencyGraph("r", nodes, [])


@pytest.mark.parametrize("seed", range(20))
def test_best_match_equals_the_reference(seed: int) -> None:
    rng = random.Random(seed)
    g = _random_graph(rng, rng.randint(1, 60))
    for _ in range(200):
        keys = rng.sample(KEYS, rng.randint(0, len(KEYS)))
        labels = {k: f"v{rng.randint(0, 2)}" if rng.random() < 0.9 else "0" for k in keys}
        if rng.random() < 0.2:
            labels["extra"] = "x"
        assert g._best_match(labels) == _reference_best_match(g, labels), labels
    assert g._best_match({}) is None


def _reference_closure(start: int, edges: list[list[int]], memo: object = None) -> set[int]:
    """``_closure`` as written before 2026-12-06 (one search per call)."""
    if not edges[start]:
        return {start}
    seen = {start}
    q = deque([start])
    while q:
        u = q.popleft()
        for w in edges[u]:
            if w not in seen:
                seen.add(w)
                q.append(w)
    return seen


def _random_edges(rng: random.Random, n: int) -> list[list[int]]:
    """A directed graph with cycles and groups of vertices with the same successor lists."""
    edges: list[list[int]] = []
    for _ in range(n):
        if edges and rng.random() < 0.5:
            edges.append(list(rng.choice(edges)))  # a copy of an earlier vertex's successors
        else:
            edges.append(rng.sample(range(n), rng.randint(0, min(n, 6))))
    return edges


@pytest.mark.parametrize("seed", range(30))
def test_closure_equals_the_reference_in_iteration_order(seed: int) -> None:
    rng = random.Random(seed)
    n = rng.choice([5, 40, 300])
    edges = _random_edges(rng, n)
    memo: dict[tuple[int, ...], list[int]] = {}
    for start in rng.sample(range(n), n):
        want = list(_reference_closure(start, edges))
        assert list(_closure(start, edges, memo)) == want
        assert list(_closure(start, edges)) == want


def test_copies_of_an_alert_share_one_search(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = []
    search = propagation._search_order
    monkeypatch.setattr(propagation, "_search_order", lambda s, e: calls.append(1) or search(s, e))
    edges = [[3, 4], [3, 4], [3, 4], [4], []]
    memo: dict[tuple[int, ...], list[int]] = {}
    assert [_closure(i, edges, memo) for i in range(5)] == [
        {0, 3, 4},
        {1, 3, 4},
        {2, 3, 4},
        {3, 4},
        {4},
    ]
    assert len(calls) == 2  # [3, 4] once, [4] once


def _storm(rng: np.random.Generator, graph: DependencyGraph, n: int) -> list[_Alert]:
    """``n`` alerts on random nodes, in copies (same node, metric and delta, other starts)."""
    base = [
        _Alert(
            node=int(rng.integers(graph.num_nodes)),
            metric=str(rng.choice(["latency", "errors"])),
            start=float(rng.uniform(0, 600)),
            z=float(rng.uniform(1, 30)),
            delta=None if rng.random() < 0.3 else float(rng.normal(0, 5)),
        )
        for _ in range(max(1, n // 8))
    ]
    items = []
    for _ in range(n):
        b = base[int(rng.integers(len(base)))]
        start = b.start + float(rng.uniform(-60, 60))
        items.append(_Alert(b.node, b.metric, start, b.z * float(rng.uniform(0.5, 2)), b.delta))
    items.sort(key=lambda a: a.node)  # grouped by node, as PropagationRanker._alerts builds them
    return items


@pytest.mark.parametrize("seed", range(6))
def test_score_items_equals_the_reference_bit_for_bit(
    seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    rng = np.random.default_rng(seed)
    n = 30
    nodes = [GraphNode(f"n{i}", "service", None, {"service": f"s{i}"}) for i in range(n)]
    pairs = {(int(a), int(b)) for a, b in rng.integers(0, n, size=(70, 2)) if a != b}
    graph = DependencyGraph("s", nodes, [GraphEdge(f"n{a}", f"n{b}", "calls") for a, b in pairs])
    items = _storm(rng, graph, 400)
    ranker = PropagationRanker()
    scores, best, blast = ranker.score_items(graph, items)
    monkeypatch.setattr(propagation, "_closure", _reference_closure)
    scores_ref, best_ref, blast_ref = ranker.score_items(graph, items)
    assert scores.tobytes() == scores_ref.tobytes()
    assert best == best_ref
    assert {i: list(s) for i, s in blast.items()} == {i: list(s) for i, s in blast_ref.items()}
