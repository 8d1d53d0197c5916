"""What a top cause explains (``manager.explained_nodes``): the incident's alert nodes a fault of
the cause reaches on the dependency graph (docs/graph.md, "Direction": edges point from the
dependent to its dependency; a pod's crash costs its Service capacity)."""

from __future__ import annotations

from fleetmind.data.graph import DependencyGraph, GraphEdge, GraphNode
from fleetmind.serving.incidents.manager import explained_nodes


def _graph() -> DependencyGraph:
    nodes = [
        GraphNode("c0", "cluster", "c0"),
        GraphNode("c0/host/h1", "host", "c0"),
        GraphNode("c0/host/h2", "host", "c0"),
        GraphNode("c0/gpu/h1/0", "gpu", "c0"),
        GraphNode("c0/gpu/h1/1", "gpu", "c0"),
        GraphNode("c0/link/h1/nvlink", "link", "c0"),
        GraphNode("c0/pod/a-0", "pod", "c0"),
        GraphNode("c0/pod/a-1", "pod", "c0"),
        GraphNode("c0/svc/a", "service", "c0"),
        GraphNode("c0/svc/front", "service", "c0"),
    ]
    edges = [
        GraphEdge("c0/host/h1", "c0", "member_of"),
        GraphEdge("c0/host/h2", "c0", "member_of"),
        GraphEdge("c0/gpu/h1/0", "c0/host/h1", "attached_to"),
        GraphEdge("c0/gpu/h1/1", "c0/host/h1", "attached_to"),
        GraphEdge("c0/link/h1/nvlink", "c0/gpu/h1/0", "attached_to"),
        GraphEdge("c0/link/h1/nvlink", "c0/gpu/h1/1", "attached_to"),
        GraphEdge("c0/pod/a-0", "c0/gpu/h1/0", "runs_on"),
        GraphEdge("c0/pod/a-0", "c0/host/h1", "runs_on"),
        GraphEdge("c0/pod/a-1", "c0/host/h2", "runs_on"),
        GraphEdge("c0/pod/a-0", "c0/svc/a", "member_of"),
        GraphEdge("c0/pod/a-1", "c0/svc/a", "member_of"),
        GraphEdge("c0/svc/front", "c0/svc/a", "calls"),
    ]
    return DependencyGraph("t", nodes, edges)


ALL = [n.id for n in _graph().nodes]


def test_a_fault_reaches_its_dependents_nearest_first() -> None:
    g = _graph()
    assert explained_nodes(g, "c0/gpu/h1/0", ALL) == [
        "c0/link/h1/nvlink",  # attached to it (one hop, in edge order)
        "c0/pod/a-0",  # runs on it
        "c0/gpu/h1/1",  # the link's other GPU (two hops)
        "c0/svc/a",  # the pod's Service
        "c0/svc/front",  # its caller (three hops)
    ]


def test_a_sibling_pod_another_host_and_what_it_depends_on_are_not_explained() -> None:
    g = _graph()
    got = explained_nodes(g, "c0/host/h1", ALL)
    assert "c0/pod/a-0" in got and "c0/svc/front" in got
    assert "c0/pod/a-1" not in got  # a pod of the same Service on another host
    assert "c0/host/h2" not in got and "c0" not in got and "c0/host/h1" not in got
    assert explained_nodes(g, "c0/pod/a-1", ALL) == ["c0/svc/a", "c0/svc/front"]
    assert "c0/host/h2" in explained_nodes(g, "c0", ALL)  # a cluster's members depend on it


def test_only_alert_nodes_are_listed_and_at_most_the_limit() -> None:
    g = _graph()
    assert explained_nodes(g, "c0/host/h1", ["c0/svc/front", "c0/host/h2"]) == ["c0/svc/front"]
    assert explained_nodes(g, "c0/host/h1", ALL, limit=2) == ["c0/gpu/h1/0", "c0/gpu/h1/1"]
    assert explained_nodes(g, "not/a/node", ALL) == []
