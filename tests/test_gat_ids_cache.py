"""The GAT's tie-breaking id ranks live with the graph they were built for.

A class-level table keyed by ``id(graph.nodes)`` held a strong reference to every ranked graph's
node list and was cleared only past 64 entries, so ``/api/v1/rca`` with an inline graph, or a
served graph swapped again and again, kept every old graph's nodes alive (an inline 50,000-node
graph: about 46 MiB per request). The ranks are now kept on the graph itself: freed with it,
shared with an incident's derived graph, and the rankings are unchanged.
"""

from __future__ import annotations

import gc
import os
import weakref

import numpy as np

os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")

from fleetmind.data.graph import DependencyGraph  # noqa: E402
from fleetmind.rca.gat_analyzer import GATAnalyzer  # noqa: E402
from fleetmind.serving.defaults.example import build_example_graph  # noqa: E402


def _alerts(graph: DependencyGraph) -> list[dict[str, object]]:
    """One firing alert on the graph's first GPU (its match labels)."""
    gpu = next(n for n in graph.nodes if n.kind == "gpu")
    labels = {"alertname": "GpuXid", **gpu.match}
    return [{"labels": labels, "startsAt": "2026-01-01T00:00:00Z", "status": "firing"}]


def test_ranked_graphs_are_freed_with_their_id_ranks() -> None:
    gat = GATAnalyzer.load()
    refs: list[weakref.ref[object]] = []
    for i in range(5):  # distinct graphs, as inline RCA bodies or graph swaps bring them
        g = build_example_graph(clusters=1, hosts=2 + i, name=f"inline-{i}")
        assert gat.find_root_causes(g, _alerts(g), 3).ranked_nodes()
        refs += [weakref.ref(g), weakref.ref(g.nodes[0]), weakref.ref(gat._node_ids(g))]
        del g
    gc.collect()
    assert [r() for r in refs] == [None] * len(refs)  # no graph, node or rank array kept


def test_id_ranks_are_cached_per_graph_and_unchanged() -> None:
    gat = GATAnalyzer.load()
    g = build_example_graph(clusters=2, hosts=3, name="served")
    ids = gat._node_ids(g)
    assert gat._node_ids(g) is ids  # built once per graph
    expected = np.argsort(np.argsort(np.array([n.id for n in g.nodes]), kind="stable"))
    np.testing.assert_array_equal(ids, expected)
    first = gat.find_root_causes(g, _alerts(g), 5).ranked_nodes()
    assert gat.find_root_causes(g, _alerts(g), 5).ranked_nodes() == first
    other = DependencyGraph(g.name, g.nodes, g.edges)  # a fresh graph, same content
    assert gat.find_root_causes(other, _alerts(other), 5).ranked_nodes() == first
