"""Tiny hand-made graphs and incidents for the GAT tests (no dependency on the incident generator)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np

from fleetmind.data.graph import DependencyGraph, GraphEdge, GraphNode

T0 = datetime(2026, 1, 1, tzinfo=UTC)
FAULTS = ("gpu_xid", "host_down", "svc_error")


def toy_graph(
    name: str, clusters: int = 1, hosts: int = 2, gpus: int = 2, services: int = 3
) -> DependencyGraph:
    """Services -> pods -> hosts/GPUs, GPUs attached to hosts, hosts member of a cluster."""
    nodes: list[GraphNode] = []
    edges: list[GraphEdge] = []
    for c in range(clusters):
        cl = f"c{c}"
        nodes.append(GraphNode(f"{cl}/cluster", "cluster", cl, {"cluster": cl, "scope": "cluster"}))
        for h in range(hosts):
            hid = f"{cl}/host/h{h}"
            nodes.append(GraphNode(hid, "host", cl, {"cluster": cl, "node": f"h{h}"}))
            edges.append(GraphEdge(hid, f"{cl}/cluster", "member_of"))
            for g in range(gpus):
                gid = f"{hid}/gpu{g}"
                nodes.append(
                    GraphNode(gid, "gpu", cl, {"cluster": cl, "node": f"h{h}", "gpu": str(g)})
                )
                edges.append(GraphEdge(gid, hid, "attached_to"))
        for s in range(services):
            sid = f"{cl}/svc/s{s}"
            nodes.append(GraphNode(sid, "service", cl, {"cluster": cl, "service": f"s{s}"}))
            pid = f"{cl}/pod/s{s}-0"
            h = s % hosts
            nodes.append(GraphNode(pid, "pod", cl, {"cluster": cl, "pod": f"s{s}-0"}))
            edges.append(GraphEdge(pid, sid, "member_of"))
            edges.append(GraphEdge(pid, f"{cl}/host/h{h}", "runs_on"))
            edges.append(GraphEdge(pid, f"{cl}/host/h{h}/gpu{s % gpus}", "runs_on"))
            if s > 0:
                edges.append(GraphEdge(f"{cl}/svc/s{s - 1}", sid, "calls"))
    return DependencyGraph(name, nodes, edges)


def _ts(sec: float) -> str:
    return (T0 + timedelta(seconds=sec)).strftime("%Y-%m-%dT%H:%M:%SZ")


def toy_incident(graph: DependencyGraph, rng: np.random.Generator, i: int) -> dict[str, Any]:
    """A fault at a random host/GPU/service whose dependents (up to 3 hops) alert later and later."""
    cands = [n for n in graph.nodes if n.kind in ("host", "gpu", "service")]
    root = cands[int(rng.integers(len(cands)))]
    fault = {"gpu": "gpu_xid", "host": "host_down", "service": "svc_error"}[root.kind]
    dependents: dict[int, list[int]] = {}
    for s, d in graph.edge_index.T:
        dependents.setdefault(int(d), []).append(int(s))
    hop = {graph.index[root.id]: 0}
    frontier = [graph.index[root.id]]
    for h in range(1, 4):
        nxt = []
        for v in frontier:
            for u in dependents.get(v, []):
                if u not in hop:
                    hop[u] = h
                    nxt.append(u)
        frontier = nxt
    alerts = []
    for v, h in hop.items():
        if rng.random() < (0.9 if h == 0 else 0.7):
            node = graph.nodes[v]
            alerts.append(
                {
                    "status": "firing",
                    "labels": {
                        "alertname": {0: "GPUXidError", 1: "PodCrashLooping"}.get(
                            h, "HighErrorRate"
                        ),
                        "severity": "critical" if h == 0 else "warning",
                        **node.match,
                    },
                    "annotations": {},
                    "startsAt": _ts(30 * h + float(rng.integers(0, 20))),
                    "endsAt": "0001-01-01T00:00:00Z",
                    "fingerprint": f"{i:04d}{v:04d}",
                }
            )
    noise = graph.nodes[int(rng.integers(graph.num_nodes))]
    alerts.append(
        {
            "status": "resolved",
            "labels": {"alertname": "SomethingUnseen", "severity": "info", **noise.match},
            "startsAt": _ts(5),
            "endsAt": _ts(65),
            "fingerprint": f"n{i:04d}",
        }
    )
    return {
        "id": f"inc-{i}",
        "graph": graph.name,
        "alerts": alerts,
        "root_cause": root.id,
        "fault_type": fault,
    }


def toy_dataset(
    path: Any, n_train: int = 60, n_val: int = 20, n_test: int = 20, seed: int = 0
) -> Any:
    """Write a small dataset folder with disjoint train/val/test topologies; returns the path."""
    from fleetmind.data.rca_dataset import write_dataset

    rng = np.random.default_rng(seed)
    graphs = {
        "train": [toy_graph("gt0", 1, 2, 2, 3), toy_graph("gt1", 2, 2, 1, 4)],
        "val": [toy_graph("gv0", 1, 3, 2, 3)],
        "test": [toy_graph("gx0", 3, 2, 2, 3)],
    }
    splits = {}
    k = 0
    for split, n in (("train", n_train), ("val", n_val), ("test", n_test)):
        incs = []
        for _ in range(n):
            g = graphs[split][int(rng.integers(len(graphs[split])))]
            incs.append(toy_incident(g, rng, k))
            k += 1
        splits[split] = incs
    all_graphs = [g for gs in graphs.values() for g in gs]
    return write_dataset(path, splits, all_graphs, {"generator": "tests.gat_helpers"})
