"""The incident page draws the ranker's whole path bold (docs/operators.md: "the ranker's own path
is drawn bold"), also when it is longer than the shortest route to its alerting node or crosses a
``cluster`` node (GAT paths do both), while the rest of the tree stays a shortest-path tree."""

from __future__ import annotations

import re

from fleetmind.data.graph import DependencyGraph, GraphEdge, GraphNode
from fleetmind.serving.ui.svg import propagation_tree, tree_svg


def _node(node_id: str, kind: str) -> GraphNode:
    return GraphNode(node_id, kind, "c", {"cluster": "c"})


def _graph() -> DependencyGraph:
    """Host h1 with a GPU; pod p runs on h1 directly and through pod q and its service s; h1 and h2
    are members of cluster c (h2 reachable from h1 only through c)."""
    nodes = [
        _node("c", "cluster"),
        _node("c/host/h1", "host"),
        _node("c/host/h2", "host"),
        _node("c/gpu/h1/0", "gpu"),
        _node("c/pod/p", "pod"),
        _node("c/pod/q", "pod"),
        _node("c/svc/s", "service"),
    ]
    edges = [
        GraphEdge("c/host/h1", "c", "member_of"),
        GraphEdge("c/host/h2", "c", "member_of"),
        GraphEdge("c/gpu/h1/0", "c/host/h1", "attached_to"),
        GraphEdge("c/pod/p", "c/host/h1", "runs_on"),
        GraphEdge("c/pod/q", "c/host/h1", "runs_on"),
        GraphEdge("c/pod/q", "c/svc/s", "member_of"),
        GraphEdge("c/pod/p", "c/svc/s", "calls"),
    ]
    return DependencyGraph("g", nodes, edges)


def _bold(graph: DependencyGraph, cause: str, alerting: set[str], path: list[str]) -> int:
    depth, edges = propagation_tree(graph, cause, alerting, path)
    kinds = {n.id: n.kind for n in graph.nodes}
    svg = tree_svg(depth, edges, kinds, alerting, highlight=path)
    return len(re.findall(r'stroke-width="2.2"', svg))


def test_a_path_longer_than_the_shortest_route_is_drawn_whole() -> None:
    g = _graph()
    path = ["c/host/h1", "c/pod/q", "c/svc/s", "c/pod/p"]  # p is also one hop from h1
    depth, edges = propagation_tree(g, "c/host/h1", {"c/pod/p", "c/gpu/h1/0"}, path)
    for a, b in zip(path, path[1:], strict=False):
        assert any(e[:2] == (a, b) for e in edges), (a, b)
    assert depth["c/pod/p"] == 3 and depth["c/gpu/h1/0"] == 1  # the rest is still shortest
    assert _bold(g, "c/host/h1", {"c/pod/p"}, path) == len(path) - 1


def test_a_path_through_a_cluster_node_is_drawn_but_the_walk_does_not_cross_it() -> None:
    g = _graph()
    path = ["c/host/h1", "c", "c/host/h2"]
    assert _bold(g, "c/host/h1", {"c/host/h2"}, path) == 2
    # without the path, the cluster node is reached but not crossed, as before
    depth, _ = propagation_tree(g, "c/host/h1", {"c/host/h2"})
    assert "c/host/h2" not in depth


def test_a_hop_the_graph_lacks_ends_the_bold_prefix() -> None:
    g = _graph()
    # the per-incident pod -> GPU edge (rca/incident_graph.py) is not in the served graph
    path = ["c/pod/q", "c/gpu/h1/0"]
    depth, edges = propagation_tree(g, "c/pod/q", {"c/gpu/h1/0"}, path)
    assert depth["c/gpu/h1/0"] == 2  # reached through the host, drawn thin
    assert _bold(g, "c/pod/q", {"c/gpu/h1/0"}, path) == 0
