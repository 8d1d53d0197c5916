"""The incident page's propagation tree on large graphs: it does not cross the nodes incident
grouping does not cross, its walk is bounded (a cut tree says so), and on ordinary graphs it is the
tree of an unbounded walk (a plain reference implementation below)."""

from __future__ import annotations

import random
from collections.abc import Sequence

import pytest

from fleetmind.data.graph import DependencyGraph, GraphEdge, GraphNode
from fleetmind.serving.graphstore import GraphView
from fleetmind.serving.ui.svg import MIN_FONT_PX, SMALL_FONT_PX, propagation_tree, tree_svg

HOSTS = 5_000


def _node(node_id: str, kind: str) -> GraphNode:
    return GraphNode(node_id, kind, "c", {"cluster": "c"})


def hub_graph(hosts: int = HOSTS) -> DependencyGraph:
    """A cluster of ``hosts`` hosts, each with a GPU and a pod on it, and a kubelet Service that
    ``runs_on`` every host (as ``fleetmind graph build`` makes it: a Node-endpoint Service)."""
    nodes = [_node("c", "cluster"), _node("c/svc/kube-system/kubelet", "service")]
    edges = []
    for h in range(hosts):
        host, gpu, pod = f"c/host/n{h}", f"c/gpu/n{h}/0", f"c/pod/ns/p{h}"
        nodes += [_node(host, "host"), _node(gpu, "gpu"), _node(pod, "pod")]
        edges += [
            GraphEdge(host, "c", "member_of"),
            GraphEdge(gpu, host, "attached_to"),
            GraphEdge(pod, host, "runs_on"),
            GraphEdge(pod, gpu, "runs_on"),
            GraphEdge("c/svc/kube-system/kubelet", host, "runs_on"),
        ]
    return DependencyGraph("hub", nodes, edges)


@pytest.fixture(scope="module")
def hub() -> DependencyGraph:
    return hub_graph()


def test_the_tree_does_not_cross_a_service_that_runs_on_every_host(hub: DependencyGraph) -> None:
    """Through the kubelet Service every host is 2 hops from every other, so a walk from one host
    covered the whole graph, and drew an alerting GPU of an unrelated host as reached through it.
    Grouping does not cross such a node (:func:`fleetmind.serving.graphstore.barrier_nodes`); nor
    does the tree now: it is reached, not crossed."""
    far = f"c/gpu/n{HOSTS - 1}/0"
    depth, edges = propagation_tree(hub, "c/host/n3", {"c/gpu/n3/0", far})
    assert depth == {"c/host/n3": 0, "c/gpu/n3/0": 1}
    assert edges == [("c/host/n3", "c/gpu/n3/0", "attached_to")]
    assert far not in GraphView(hub, 1).neighbourhood("c/host/n3", 4)  # grouping agrees
    # the walk stopped once the one reachable alerting node was reached: a handful of nodes
    assert depth.visited <= 10 and not depth.cut
    # an alerting node the walk cannot reach: it covers the host's side of the hub, no more
    depth, _ = propagation_tree(hub, "c/host/n3", {far})
    assert depth == {"c/host/n3": 0} and depth.visited <= 10 and not depth.cut


def test_a_hub_cause_is_walked_from_and_the_walk_is_bounded(hub: DependencyGraph) -> None:
    """A cause that is itself a hub is expanded (as a ``cluster`` cause always was); the walk stops
    at ``max_nodes`` nodes, says so, and the drawing shows a note in readable type."""
    alerting = {"c/gpu/n0/0", f"c/gpu/n{HOSTS - 1}/0"}
    # every host at 1 hop, then the first hosts' GPUs and pods until 6,000 nodes
    depth, edges = propagation_tree(hub, "c/svc/kube-system/kubelet", alerting, max_nodes=6_000)
    assert depth.cut and depth.visited == 6_000
    assert depth == {"c/svc/kube-system/kubelet": 0, "c/host/n0": 1, "c/gpu/n0/0": 2}
    kinds = {n: hub.node(n).kind for n in depth}
    svg = tree_svg(depth, edges, kinds, alerting)
    assert "Cut: the walk stopped after 6,000 nodes" in svg
    assert f'font-size="{SMALL_FONT_PX:g}"' in svg and SMALL_FONT_PX >= MIN_FONT_PX
    # the same walk with room enough reaches the far GPU, and is not cut
    depth, edges = propagation_tree(hub, "c/svc/kube-system/kubelet", alerting)
    assert not depth.cut and f"c/gpu/n{HOSTS - 1}/0" in depth
    assert "Cut:" not in tree_svg(depth, edges, {n: hub.node(n).kind for n in depth}, alerting)


def _old_propagation_tree(
    graph: DependencyGraph,
    cause: str,
    alerting: set[str],
    path: Sequence[str] = (),
    max_depth: int = 4,
    max_targets: int = 12,
) -> tuple[dict[str, int], list[tuple[str, str, str]]]:
    """``propagation_tree`` without its walk's bound and early stop (the reference): a plain
    breadth-first shortest-path tree (neighbours in id order, ``cluster`` nodes reached but not
    crossed), then the ranker's path laid over it (each path node the child of its predecessor,
    a path node the walk did not reach drawn but not walked on), each node one column right of
    its parent."""
    if cause not in graph.index:
        return {}, []
    adj: dict[str, list[tuple[str, str]]] = {}
    for e in graph.edges:
        adj.setdefault(e.src, []).append((e.dst, e.kind))
        adj.setdefault(e.dst, []).append((e.src, e.kind))
    dist = {cause: 0}
    parent: dict[str, tuple[str, str]] = {}
    frontier = [cause]
    while frontier and dist[frontier[0]] < max_depth:
        nxt: list[str] = []
        for u in frontier:
            if graph.node(u).kind == "cluster" and u != cause:
                continue
            for v, kind in sorted(adj.get(u, []), key=lambda t: t[0]):
                if v not in dist:
                    dist[v] = dist[u] + 1
                    parent[v] = (u, kind)
                    nxt.append(v)
        frontier = nxt
    chain = [cause] if path and path[0] == cause else []
    for a, b in zip(path, path[1:], strict=False):
        kinds = [k for v, k in sorted(adj.get(a, []), key=lambda t: t[0]) if v == b]
        if not chain or not kinds or b in chain:
            break
        parent[b] = (a, kinds[0])
        chain.append(b)

    def column(n: str) -> int:
        return 0 if n == cause else column(parent[n][0]) + 1

    depth = {n: column(n) for n in [*dist, *chain]}
    targets = sorted(
        (n for n in alerting if n in depth and n != cause),
        key=lambda n: (dist.get(n, depth[n]), n),
    )
    keep = {cause} | set(path if all(n in depth for n in path) else [])
    for t in targets[:max_targets]:
        n = t
        while n != cause and n not in keep:
            keep.add(n)
            n = parent[n][0]
    for n in list(keep):
        while n != cause and n in parent and parent[n][0] not in keep:
            n = parent[n][0]
            keep.add(n)
    edges = [(parent[n][0], n, parent[n][1]) for n in sorted(keep) if n != cause and n in parent]
    return {n: depth[n] for n in keep}, edges


def _random_graph(rng: random.Random, size: int) -> DependencyGraph:
    """A random graph with no node that ``runs_on`` two hosts (nothing the new rule changes),
    a cluster node, and repeated pairs of nodes with different edge kinds."""
    kinds = ["service", "pod", "host", "gpu", "link", "dns", "config"]
    nodes = [_node("c", "cluster")] + [_node(f"c/n{i:03d}", rng.choice(kinds)) for i in range(size)]
    ids = [n.id for n in nodes[1:]]
    edges = [GraphEdge(i, "c", "member_of") for i in ids if rng.random() < 0.3]
    for _ in range(size * 2):
        a, b = rng.sample(ids, 2)
        edges.append(GraphEdge(a, b, rng.choice(["calls", "depends_on", "attached_to"])))
    return DependencyGraph(f"random{size}", nodes, edges)


def _walk_from(graph: DependencyGraph, rng: random.Random, start: str, hops: int) -> list[str]:
    """A random walk of up to ``hops`` edges from ``start`` (a path the ranker could give)."""
    out = [start]
    for _ in range(hops):
        nxt = [e.dst for e in graph.edges if e.src == out[-1]]
        nxt += [e.src for e in graph.edges if e.dst == out[-1]]
        if not nxt:
            break
        out.append(rng.choice(sorted(nxt)))
    return out


def test_the_tree_is_unchanged_on_ordinary_graphs() -> None:
    """Seeded random graphs, causes, alerting sets and ranker paths: the tree (depths and edges)
    equals the reference's, whether the walk stops early, runs to ``max_depth`` or has alerting
    nodes it cannot reach or that are not in the graph."""
    rng = random.Random(20261206)
    checked = 0
    for size in (8, 20, 60, 150):
        graph = _random_graph(rng, size)
        ids = list(graph.index)
        for _ in range(40):
            cause = rng.choice(ids)
            alerting = set(rng.sample(ids, rng.randint(0, min(20, len(ids)))))
            if rng.random() < 0.2:
                alerting.add("c/not-in-graph")
            path = _walk_from(graph, rng, cause, rng.randint(0, 4)) if rng.random() < 0.7 else []
            for max_depth, max_targets in ((4, 12), (2, 3)):
                got = propagation_tree(graph, cause, alerting, path, max_depth, max_targets)
                want = _old_propagation_tree(graph, cause, alerting, path, max_depth, max_targets)
                assert got == want, (size, cause, sorted(alerting), path)
                assert not got[0].cut
                checked += 1
    assert checked == 4 * 40 * 2
    assert propagation_tree(graph, "c/not-in-graph", set()) == ({}, [])
