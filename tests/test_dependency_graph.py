"""The dependency graph as the models read it: a repeated edge is one dependency."""

from __future__ import annotations

import json
from pathlib import Path

from fleetmind.data.graph import DependencyGraph, GraphNode
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


def test_editing_to_json_output_leaves_the_graph_as_it_was() -> None:
    """``to_json()`` hands out copies of ``match`` and ``attrs`` (nested lists included), as
    ``dataclasses.asdict`` does ("dataclasses, dicts, lists, and tuples are recursed
    into", Python docs): a caller building a variant from it (a test, an API client of
    ``GET /api/v1/graph`` in process) does not change the graph others read."""
    graph = DependencyGraph(
        "g",
        [
            GraphNode("c/host/h", "host", "c", {"cluster": "c", "node": "h"}, {"zone": "a"}),
            GraphNode(
                "c/pod/ns/p",
                "pod",
                "c",
                {"cluster": "c", "namespace": "ns", "pod": "p"},
                {"owner": "ReplicaSet/p-5b8f9c7d6", "claims": ["data-p"], "gpu": {"ids": [0]}},
            ),
        ],
        [],
    )
    before = json.dumps(graph.to_json(), sort_keys=True)
    doc = graph.to_json()
    for n in doc["nodes"]:
        n["match"]["cluster"] = "other"
        n["attrs"].pop("owner", None)
        n["attrs"]["zone"] = "b"
    pod = doc["nodes"][1]["attrs"]
    pod["claims"].append("extra")
    pod["gpu"]["ids"].append(1)
    assert json.dumps(graph.to_json(), sort_keys=True) == before
    assert graph.node("c/pod/ns/p").attrs["claims"] == ["data-p"]
    assert graph.node_for_alert({"cluster": "c", "node": "h"}) == "c/host/h"
