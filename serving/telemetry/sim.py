"""The ``sim`` telemetry source: a simulated fleet with perfect knowledge and no load.

The fleet comes from the served dependency graph when it describes hosts and GPUs (``gpu`` nodes
``attached_to`` a ``host``; the GPU model from the node's ``attrs["model"]``), so RCA and placement talk
about the same machines; otherwise from a built-in two-cluster fleet (2 x 4 nodes x 8 GPUs).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from fleetmind.serving.telemetry.base import FleetSnapshot, GpuState, NodeState, TelemetrySource

if TYPE_CHECKING:
    from fleetmind.data.graph import DependencyGraph

DEFAULT_CPU_MILLI = 96_000
DEFAULT_MEMORY_MIB = 1_048_576
DEFAULT_GPU_MEMORY_MIB = {"A100": 81_920, "H100": 81_920, "V100": 32_768, "T4": 15_360}


class SimSource(TelemetrySource):
    """Simulated telemetry over a fixed node list; every GPU starts idle and healthy."""

    name = "sim"

    def __init__(self, nodes: list[NodeState], ttl_s: float = 0.0) -> None:
        super().__init__(ttl_s)
        self._nodes = nodes

    @classmethod
    def from_graph(cls, graph: DependencyGraph | None, ttl_s: float = 0.0) -> SimSource:
        nodes = _nodes_from_graph(graph) if graph is not None else []
        return cls(nodes or builtin_nodes(), ttl_s=ttl_s)

    def collect(self) -> FleetSnapshot:
        # The node list is never mutated (reservations live beside it), so no copy is needed.
        return FleetSnapshot("sim", self._nodes, time.time())


def builtin_nodes(clusters: int = 2, nodes_per_cluster: int = 4, gpus: int = 8) -> list[NodeState]:
    """A small fleet: ``clusters`` x ``nodes_per_cluster`` hosts with ``gpus`` A100s each."""
    out = []
    for c in range(clusters):
        for h in range(nodes_per_cluster):
            out.append(_node(f"c{c}-h{h}", f"c{c}", ["A100"] * gpus))
    return out


def _node(name: str, cluster: str, models: list[str]) -> NodeState:
    gpus = [
        GpuState(
            index=i,
            model=m,
            uuid=None,
            util_pct=0.0,
            mem_used_mib=0.0,
            mem_total_mib=float(DEFAULT_GPU_MEMORY_MIB.get(m, 81_920)),
            xid_errors=0.0,
            free_milli=1000,
        )
        for i, m in enumerate(models)
    ]
    return NodeState(
        name=name,
        cluster=cluster,
        gpus=gpus,
        cpu_milli=DEFAULT_CPU_MILLI,
        cpu_milli_free=DEFAULT_CPU_MILLI,
        memory_mib=DEFAULT_MEMORY_MIB,
        memory_mib_free=DEFAULT_MEMORY_MIB,
    )


def _nodes_from_graph(graph: DependencyGraph) -> list[NodeState]:
    hosts = {n.id: n for n in graph.nodes if n.kind == "host"}
    gpus_of: dict[str, list[str]] = {h: [] for h in hosts}
    for e in graph.edges:
        if e.kind in ("attached_to", "hosted_on") and e.dst in hosts:
            src = graph.node(e.src)
            if src.kind == "gpu":
                gpus_of[e.dst].append(src.id)
    out = []
    for hid, host in hosts.items():
        gids = sorted(gpus_of[hid])
        if not gids:
            continue
        models = [str(graph.node(g).attrs.get("model", "A100")) for g in gids]
        name = host.match.get("node") or hid
        out.append(_node(name, host.cluster or "default", models))
    return out
