"""Explanation paths cross dependency edges in either direction, as docs/graph.md ("Direction") and
docs/gat.md ("Explanations") say: the GAT's message graph holds both directions of every edge
(``rca.model.message_graph``) and the simulator it is trained on spreads faults both ways over
every edge kind (``data/rca_gen/faults/hops.py``)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from fleetmind.data.graph_schema import EDGE_KINDS
from fleetmind.data.rca_gen.faults.hops import HOPS
from fleetmind.rca.explain import attention_paths
from fleetmind.serving.defaults.example import build_example_graph
from fleetmind.serving.registry import ModelRegistry

ROOT = Path(__file__).resolve().parents[1]


def test_every_edge_kind_carries_faults_both_ways_in_the_simulator() -> None:
    """The documented reason paths may cross an edge along it (docs/graph.md lists one example per
    kind); ``hosted_on`` is not drawn by the simulator."""
    seen = {(h.edge, h.direction) for h in HOPS}
    for kind in set(EDGE_KINDS) - {"hosted_on"}:
        assert {(kind, "up"), (kind, "down")} <= seen, kind


def test_path_follows_attention_along_the_edge() -> None:
    # dependency edge 0 -> 1 (0 depends on 1); message graph: forward, reversed, self loops.
    # Node 1 alerts and attends strongly to node 0 over the forward message edge 0 -> 1.
    ei = np.array([[0], [1]])
    mei = np.concatenate([ei, ei[::-1], np.array([[0, 1], [0, 1]])], axis=1)
    att = [np.array([0.9, 0.1, 0.5, 0.5])]
    alerting = np.array([False, True])
    assert attention_paths(mei, att, 2, [0, 1], alerting) == [(0, 1), (1,)]


def test_released_gat_paths_are_graph_edges_either_way() -> None:
    graph = build_example_graph()
    edges = {(e.src, e.dst) for e in graph.edges}
    reg = ModelRegistry(None, "heuristic:builtin-bestfit")  # the released GAT
    reg.load()
    storm = json.loads((ROOT / "examples" / "storm-dns.json").read_text())
    causes = reg.current.rca.impl.find_root_causes(graph, storm["alerts"], 10).causes
    assert causes[0].node == storm["expected_root"] and causes[0].path == (causes[0].node,)
    along = 0
    for c in causes:
        assert c.path[0] == c.node
        for a, b in zip(c.path, c.path[1:], strict=False):
            assert (a, b) in edges or (b, a) in edges
            along += (a, b) in edges
    assert along > 0  # e.g. c1/svc/s0 -> c1/svc/s1, where s0 calls s1 (docs/graph.md)
