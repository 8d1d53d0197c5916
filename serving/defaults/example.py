"""A deterministic example dependency graph for the service defaults, tests and benchmarks.

Per cluster ``c<i>``: a ``cluster`` node; ``hosts`` hosts with ``gpus`` GPUs each and one NVLink
``link`` node attached to a host's GPUs; ``services`` services calling each other in a chain
(``s0 -> s1 -> ...``) with ``pods`` pods each running on a host and one of its GPUs. Global shared
infrastructure (``dns``, ``registry``, ``config``) that every service depends on; service ``s0`` of
each cluster also calls ``s0`` of the next cluster (cross-cluster traffic).

Alert labels that match: ``{cluster, node}`` (host), ``{cluster, node, gpu}`` (GPU),
``{cluster, node, link}`` (NVLink), ``{cluster, service}``, ``{cluster, pod}``, ``{service: dns}``...
"""

from __future__ import annotations

from fleetmind.data.graph import DependencyGraph, GraphEdge, GraphNode


def build_example_graph(
    clusters: int = 2,
    hosts: int = 4,
    gpus: int = 8,
    services: int = 4,
    pods: int = 2,
    name: str = "fleetmind-example",
) -> DependencyGraph:
    """Build the example graph; |V| = 3 + C * (1 + H * (G + 2) + S * (1 + P))."""
    nodes: list[GraphNode] = []
    edges: list[GraphEdge] = []
    infra = []
    for kind in ("dns", "registry", "config"):
        nid = f"global/{kind}"
        nodes.append(GraphNode(nid, kind, None, {"service": kind}, {}))
        infra.append(nid)
    for c in range(clusters):
        cl = f"c{c}"
        nodes.append(GraphNode(cl, "cluster", cl, {"cluster": cl}, {"region": f"region-{c}"}))
        host_ids, gpu_ids = [], []
        for h in range(hosts):
            hn = f"{cl}-h{h}"
            hid = f"{cl}/host/{hn}"
            nodes.append(GraphNode(hid, "host", cl, {"cluster": cl, "node": hn}, {}))
            edges.append(GraphEdge(hid, cl, "member_of"))
            host_ids.append(hid)
            lid = f"{cl}/link/{hn}/nvlink"
            nodes.append(
                GraphNode(lid, "link", cl, {"cluster": cl, "node": hn, "link": "nvlink"}, {})
            )
            for g in range(gpus):
                gid = f"{cl}/gpu/{hn}/{g}"
                model = "H100" if c % 2 else "A100"
                nodes.append(
                    GraphNode(
                        gid, "gpu", cl, {"cluster": cl, "node": hn, "gpu": str(g)}, {"model": model}
                    )
                )
                edges.append(GraphEdge(gid, hid, "attached_to"))
                edges.append(GraphEdge(lid, gid, "attached_to"))
                gpu_ids.append(gid)
        svc_ids = []
        for s in range(services):
            sid = f"{cl}/svc/s{s}"
            nodes.append(GraphNode(sid, "service", cl, {"cluster": cl, "service": f"s{s}"}, {}))
            edges.append(GraphEdge(sid, cl, "member_of"))
            for i in infra:
                edges.append(GraphEdge(sid, i, "depends_on"))
            svc_ids.append(sid)
            for p in range(pods):
                pn = f"s{s}-{p}"
                pid = f"{cl}/pod/{pn}"
                nodes.append(GraphNode(pid, "pod", cl, {"cluster": cl, "pod": pn}, {}))
                k = (s * pods + p) % max(1, len(host_ids))
                edges.append(GraphEdge(pid, sid, "member_of"))
                edges.append(GraphEdge(pid, host_ids[k], "runs_on"))
                edges.append(GraphEdge(pid, gpu_ids[(k * gpus + p) % len(gpu_ids)], "runs_on"))
        for a, b in zip(svc_ids, svc_ids[1:], strict=False):
            edges.append(GraphEdge(a, b, "calls"))
    if clusters > 1:
        for c in range(clusters):
            edges.append(GraphEdge(f"c{c}/svc/s0", f"c{(c + 1) % clusters}/svc/s0", "calls"))
    return DependencyGraph(name, nodes, edges)


def benchmark_graph() -> DependencyGraph:
    """A ~1,000-node graph (4 clusters x 20 hosts x 8 GPUs, 12 services x 3 pods): |V| = 999."""
    return build_example_graph(clusters=4, hosts=20, gpus=8, services=12, pods=3, name="bench-1k")


if __name__ == "__main__":  # pragma: no cover - regenerates the committed default
    from fleetmind.serving.defaults import DEFAULT_GRAPH

    build_example_graph().save(DEFAULT_GRAPH)
    print(f"wrote {DEFAULT_GRAPH}")
