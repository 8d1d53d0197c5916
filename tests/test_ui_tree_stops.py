"""The incident page's walk stops at the last alerting node it needs, also when the ranker's path
crosses a ``cluster`` node, and keeps the part of a path the graph still has.

A walk that ran on to its node limit put "Cut: alerting nodes farther from the cause may be
missing" on a page whose every alerting node was drawn (a DNS service called by many pods; a path
through a cluster node to a node the walk never expands)."""

from __future__ import annotations

from fleetmind.data.graph import DependencyGraph, GraphEdge, GraphNode
from fleetmind.serving.ui.svg import propagation_tree


def _node(node_id: str, kind: str) -> GraphNode:
    return GraphNode(node_id, kind, "c", {"cluster": "c"})


def test_the_walk_stops_at_the_last_alerting_node_of_a_hub() -> None:
    pods = [f"c/pod/a{i}" for i in range(2)] + [f"c/pod/z{i:02d}" for i in range(30)]
    graph = DependencyGraph(
        "hub",
        [_node("c/svc/dns", "service"), *(_node(p, "pod") for p in pods)],
        [GraphEdge(p, "c/svc/dns", "calls") for p in pods],
    )
    alerting = {"c/pod/a0", "c/pod/a1"}
    for path in ([], ["c/svc/dns", "c/pod/a0"]):
        depth, _ = propagation_tree(graph, "c/svc/dns", alerting, path, max_nodes=10)
        assert not depth.cut, path
        assert alerting <= set(depth)


def test_a_path_through_a_cluster_node_does_not_make_the_walk_run_on() -> None:
    nodes = [_node("c", "cluster"), _node("c/host/h1", "host"), _node("c/host/h2", "host")]
    nodes += [_node("c/svc/s", "service")]
    nodes += [_node(f"c/pod/p{i}", "pod") for i in range(3)]
    nodes += [_node(f"c/pod/q{i:02d}", "pod") for i in range(30)]
    edges = [GraphEdge("c/host/h1", "c", "member_of"), GraphEdge("c/host/h2", "c", "member_of")]
    edges += [GraphEdge(f"c/pod/p{i}", "c/host/h1", "runs_on") for i in range(3)]
    edges += [GraphEdge(f"c/pod/p{i}", "c/svc/s", "member_of") for i in range(3)]
    edges += [GraphEdge(f"c/pod/q{i:02d}", "c/svc/s", "member_of") for i in range(30)]
    graph = DependencyGraph("barrier", nodes, edges)
    path = ["c/host/h1", "c", "c/host/h2"]
    depth, tree_edges = propagation_tree(graph, "c/host/h1", {"c/pod/p0"}, path, max_nodes=10)
    assert not depth.cut
    assert depth.visited <= 10
    assert {"c/pod/p0", "c", "c/host/h2"} <= set(depth)
    assert ("c", "c/host/h2", "member_of") in tree_edges


def test_the_part_of_a_path_the_graph_still_has_is_kept() -> None:
    names = ["c/host/h1", "c/svc/q", "c/svc/s", "c/pod/alert"]
    graph = DependencyGraph(
        "partial",
        [_node(names[0], "host"), *(_node(n, "service") for n in names[1:3])]
        + [_node(names[3], "pod")],
        [
            GraphEdge("c/svc/q", "c/host/h1", "runs_on"),
            GraphEdge("c/svc/s", "c/svc/q", "calls"),
            GraphEdge("c/pod/alert", "c/host/h1", "runs_on"),
        ],
    )
    path = ["c/host/h1", "c/svc/q", "c/svc/s", "c/pod/gone"]  # the last node left the graph
    depth, tree_edges = propagation_tree(graph, "c/host/h1", {"c/pod/alert"}, path)
    assert {"c/svc/q", "c/svc/s"} <= set(depth)
    assert ("c/svc/q", "c/svc/s", "calls") in tree_edges


def test_the_walk_does_not_cross_infrastructure_two_clusters_depend_on() -> None:
    """A global DNS every service of two clusters depends on: reached, not crossed (incident
    grouping's rule, ``shared_nodes``), so the tree of a c0 service does not reach c1's alerting
    service through it; a walk from the shared node itself expands it."""
    nodes = [GraphNode("global/dns", "service", None, {"service": "dns"})]
    nodes += [GraphNode(f"{c}/svc/s0", "service", c, {"cluster": c}) for c in ("c0", "c1")]
    edges = [GraphEdge(f"{c}/svc/s0", "global/dns", "depends_on") for c in ("c0", "c1")]
    graph = DependencyGraph("shared", nodes, edges)
    depth, _ = propagation_tree(graph, "c0/svc/s0", {"c1/svc/s0"})
    assert "c1/svc/s0" not in depth
    depth, _ = propagation_tree(graph, "global/dns", {"c0/svc/s0", "c1/svc/s0"})
    assert {"c0/svc/s0", "c1/svc/s0"} <= set(depth)
