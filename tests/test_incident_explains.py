"""What a top cause explains (``manager.explained_nodes``): the incident's alert nodes a fault of
the cause reaches on the dependency graph (docs/graph.md, "Direction": edges point from the
dependent to its dependency; a pod's crash costs its Service capacity)."""

from __future__ import annotations

from fleetmind.data.graph import DependencyGraph, GraphEdge, GraphNode
from fleetmind.serving.incidents.manager import EXPLAINS_MAX, explained_nodes


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
        "c0/svc/a",  # the pod's Service (two hops): kinds other than pods first
        "c0/svc/front",  # its caller (three hops)
        "c0/pod/a-0",  # runs on it (one hop)
    ]


def test_a_gpu_explains_neither_its_link_nor_the_peers_the_link_joins() -> None:
    """A host's NVLink/NVSwitch node is ``attached_to`` each of its GPUs (``--template-links``):
    a broken link hangs them all, but a GPU's fault does not reach its peers through it (a
    double-bit error on GPU 1 must not make a second fault on GPU 0 its symptom)."""
    g = _graph()
    assert "c0/gpu/h1/1" not in explained_nodes(g, "c0/gpu/h1/0", ALL)
    assert "c0/link/h1/nvlink" not in explained_nodes(g, "c0/gpu/h1/0", ALL)
    got = explained_nodes(g, "c0/link/h1/nvlink", ALL)
    assert got[:2] == ["c0/gpu/h1/0", "c0/gpu/h1/1"] and "c0/pod/a-0" in got
    assert "c0/host/h1" not in got  # what the GPUs depend on is no symptom of the link


def _pods_host(n_pods: int) -> DependencyGraph:
    """A host running ``n_pods`` pods of one Service, another Service calling it, and a GPU."""
    nodes = [
        GraphNode("c0", "cluster", "c0"),
        GraphNode("c0/host/h", "host", "c0"),
        GraphNode("c0/gpu/h/0", "gpu", "c0"),
        GraphNode("c0/svc/a", "service", "c0"),
        GraphNode("c0/svc/front", "service", "c0"),
    ]
    edges = [
        GraphEdge("c0/host/h", "c0", "member_of"),
        GraphEdge("c0/svc/front", "c0/svc/a", "calls"),
    ]
    for i in range(n_pods):
        pod = f"c0/pod/a-{i}"
        nodes.append(GraphNode(pod, "pod", "c0"))
        edges += [GraphEdge(pod, "c0/host/h", "runs_on"), GraphEdge(pod, "c0/svc/a", "member_of")]
    edges.append(GraphEdge("c0/gpu/h/0", "c0/host/h", "attached_to"))  # after the pods
    return DependencyGraph("t", nodes, edges)


def test_many_alerting_pods_do_not_hide_the_service_or_the_gpu() -> None:
    """300 alerting pods one hop from the host fill the 256 listed nodes breadth first; the
    Service (two hops), its caller and the GPU (one hop, after the pods in edge order) are
    listed first, and the pods fill the rest."""
    g = _pods_host(300)
    ids = [n.id for n in g.nodes]
    got = explained_nodes(g, "c0/host/h", ids)
    assert len(got) == EXPLAINS_MAX
    assert got[:3] == ["c0/gpu/h/0", "c0/svc/a", "c0/svc/front"]
    assert got[3:] == [f"c0/pod/a-{i}" for i in range(EXPLAINS_MAX - 3)]
    assert explained_nodes(g, "c0/host/h", ids, limit=2) == ["c0/gpu/h/0", "c0/svc/a"]


def test_an_incident_s_pod_to_gpu_edges_are_read_without_a_graph_of_their_own() -> None:
    """The pod-to-GPU edge an alert names (``rca.incident_graph``) is passed as ``extra``: the
    served graph's table is built once and shared by every incident."""
    g = _graph()
    extra = [GraphEdge("c0/pod/a-1", "c0/gpu/h1/1", "runs_on")]
    assert "c0/pod/a-1" not in explained_nodes(g, "c0/gpu/h1/1", ALL)
    assert "c0/pod/a-1" in explained_nodes(g, "c0/gpu/h1/1", ALL, extra=extra)
    assert "c0/pod/a-1" not in explained_nodes(g, "c0/gpu/h1/1", ALL)  # the table is unchanged


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
