"""The dependency graph as the models read it: a repeated edge is one dependency."""

from __future__ import annotations

import json
from pathlib import Path

from fleetmind.data.graph import DependencyGraph
from fleetmind.serving.defaults.example import build_example_graph
from fleetmind.serving.registry import ModelRegistry

ROOT = Path(__file__).resolve().parents[1]


def test_repeated_edges_count_once() -> None:
    """A graph JSON with every edge written twice (a hand-merged file, two exports concatenated)
    ranks like the graph itself: kept twice, each edge counted twice in degrees and messages,
    and the released GAT's ranking of an example storm changed."""
    graph = build_example_graph()
    doc = graph.to_json()
    doubled = DependencyGraph.from_json({**doc, "edges": doc["edges"] + doc["edges"]})
    assert doubled.num_edges == graph.num_edges
    assert doubled.edge_index.tolist() == graph.edge_index.tolist()  # first occurrences, in order

    reg = ModelRegistry(None, "heuristic:builtin-bestfit")  # the released GAT
    reg.load()
    gat = reg.current.rca.impl
    storm = json.loads((ROOT / "examples" / "storm-host-down.json").read_text())["alerts"]
    want = gat.find_root_causes(graph, storm, 5)
    got = gat.find_root_causes(doubled, storm, 5)
    assert [c.node for c in got.causes] == [c.node for c in want.causes]
    assert [round(c.score, 6) for c in got.causes] == [round(c.score, 6) for c in want.causes]
