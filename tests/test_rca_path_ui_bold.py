"""The incident page draws the ranker's whole path bold (docs/operators.md: "the ranker's own path
is drawn bold"), also when it is longer than the shortest route to its alerting node or crosses a
``cluster`` node (GAT paths do both), while the rest of the tree stays a shortest-path tree."""

from __future__ import annotations

import re

from fleetmind.data.graph import DependencyGraph, GraphEdge, GraphNode
from fleetmind.serving.ui.svg import propagation_tree, tree_svg


def _build(
    name: str, nodes: list[tuple[str, str]], edges: list[tuple[str, str, str]]
) -> DependencyGraph:
    """A graph of cluster ``c``: ``nodes`` as ``(id, kind)``, ``edges`` as ``(src, dst, kind)``."""
    return DependencyGraph(
        name,
        [GraphNode(node_id, kind, "c", {"cluster": "c"}) for node_id, kind in nodes],
        [GraphEdge(*e) for e in edges],
    )


def _graph() -> DependencyGraph:
    """Host h1 with a GPU; pod p runs on h1 directly and through pod q and its service s; h1 and h2
    are members of cluster c (h2 reachable from h1 only through c)."""
    nodes = [
        ("c", "cluster"),
        ("c/host/h1", "host"),
        ("c/host/h2", "host"),
        ("c/gpu/h1/0", "gpu"),
        ("c/pod/p", "pod"),
        ("c/pod/q", "pod"),
        ("c/svc/s", "service"),
    ]
    edges = [
        ("c/host/h1", "c", "member_of"),
        ("c/host/h2", "c", "member_of"),
        ("c/gpu/h1/0", "c/host/h1", "attached_to"),
        ("c/pod/p", "c/host/h1", "runs_on"),
        ("c/pod/q", "c/host/h1", "runs_on"),
        ("c/pod/q", "c/svc/s", "member_of"),
        ("c/pod/p", "c/svc/s", "calls"),
    ]
    return _build("g", nodes, edges)


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


def _detour_graph() -> DependencyGraph:
    """Host h1 with pod p on it (1 hop) and service t that only p calls (2 hops from h1); a long
    detour h1 - q - s - r - u - p reaches p again at hop 5."""
    nodes = [
        ("c/host/h1", "host"),
        ("c/pod/p", "pod"),
        ("c/pod/q", "pod"),
        ("c/svc/s", "service"),
        ("c/svc/r", "service"),
        ("c/pod/u", "pod"),
        ("c/svc/t", "service"),
    ]
    edges = [
        ("c/pod/p", "c/host/h1", "runs_on"),
        ("c/pod/q", "c/host/h1", "runs_on"),
        ("c/pod/q", "c/svc/s", "member_of"),
        ("c/svc/s", "c/svc/r", "calls"),
        ("c/svc/r", "c/pod/u", "calls"),
        ("c/pod/u", "c/pod/p", "calls"),
        ("c/pod/p", "c/svc/t", "calls"),
    ]
    return _build("detour", nodes, edges)


def test_a_node_behind_a_path_node_is_reached_at_its_true_distance() -> None:
    """The path reaches p at hop 5 (past the 4-hop walk), but p is 1 hop from the cause: the walk
    goes on from p at its true distance, so the alerting t (2 hops away) is in the tree, drawn
    under p, one column right of it (it was dropped, with no cut note)."""
    g = _detour_graph()
    alerting = {"c/pod/p", "c/svc/t"}
    path = ["c/host/h1", "c/pod/q", "c/svc/s", "c/svc/r", "c/pod/u", "c/pod/p"]
    depth, edges = propagation_tree(g, "c/host/h1", alerting, path)
    assert "c/svc/t" in depth
    assert ("c/pod/p", "c/svc/t", "calls") in edges
    assert depth["c/pod/p"] == 5 and depth["c/svc/t"] == 6  # columns follow the drawn edges
    for parent, child, _ in edges:
        assert depth[child] == depth[parent] + 1
    assert _bold(g, "c/host/h1", alerting, path) == len(path) - 1
    kinds = {n.id: n.kind for n in g.nodes}
    svg = tree_svg(depth, edges, kinds, alerting, highlight=path)
    assert "svc/t" in svg and "Cut:" not in svg


def test_the_walk_does_not_go_on_past_a_cluster_node_on_the_path() -> None:
    """A path through the ``cluster`` node reaches h2 and is drawn, but the walk does not go on
    from h2 (grouping does not cross the cluster node): h2's pod, alerting, is not in the tree,
    as without the path (docs/operators.md: "the walk itself still does not cross one")."""
    hosts = [f"c/host/h{i}" for i in (1, 2, 3)]
    nodes = [("c", "cluster")] + [(h, "host") for h in hosts]
    nodes += [(f"c/pod/p{i}", "pod") for i in (1, 2, 3)]
    edges = [(h, "c", "member_of") for h in hosts]
    edges += [(f"c/pod/p{i}", f"c/host/h{i}", "runs_on") for i in (1, 2, 3)]
    g = _build("clustered", nodes, edges)
    alerting = {"c/host/h2", "c/pod/p2", "c/pod/p3"}
    path = ["c/host/h1", "c", "c/host/h2"]
    depth, edges_ = propagation_tree(g, "c/host/h1", alerting, path)
    assert dict(depth) == {"c/host/h1": 0, "c": 1, "c/host/h2": 2}
    assert {(a, b) for a, b, _ in edges_} == {("c/host/h1", "c"), ("c", "c/host/h2")}
    assert dict(propagation_tree(g, "c/host/h1", alerting)[0]) == {"c/host/h1": 0}
