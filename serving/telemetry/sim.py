"""The ``sim`` telemetry source: a simulated fleet with perfect knowledge and no load.

The fleet comes from the served dependency graph when it describes hosts and GPUs (``gpu`` nodes
``attached_to`` a ``host``; the GPU model from the node's ``attrs["model"]``, ``"unknown"``
without one), so RCA and placement talk about the same machines; otherwise from a built-in
two-cluster fleet (2 x 4 nodes x 8 A100s). A GPU's framebuffer is its ``attrs["memory_mib"]``
(``fleetmind graph build`` copies GPU feature discovery's ``nvidia.com/gpu.memory``), else
:func:`gpu_memory_mib` of its model.
"""

from __future__ import annotations

import math
import re
import time
from typing import TYPE_CHECKING, Any

from fleetmind.data.fleet_io import VENDOR_PREFIXES
from fleetmind.data.topology import GPU_SPECS
from fleetmind.serving.telemetry.base import FleetSnapshot, GpuState, NodeState, TelemetrySource

if TYPE_CHECKING:
    from fleetmind.data.graph import DependencyGraph

DEFAULT_CPU_MILLI = 96_000
DEFAULT_MEMORY_MIB = 1_048_576
DEFAULT_GPU_MEMORY_MIB = {"A100": 81_920, "H100": 81_920, "V100": 32_768, "T4": 15_360}
"""Framebuffer (MiB) of the short model names, as NVML reports it (a T4's 15 GiB)."""
FALLBACK_GPU_MEMORY_MIB = 81_920
"""Framebuffer (MiB) of a GPU whose model tells none (no model, or one :func:`gpu_memory_mib` does
not know): a placeholder, so that the idle simulated fleet still reads 0 VRAM pressure."""
UNKNOWN_MODEL = "unknown"
"""The model of a graph GPU without ``attrs["model"]`` (a Node without GPU feature discovery's
labels)."""


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


def gpu_memory_mib(model: str) -> float:
    """Framebuffer (MiB) of a GPU of ``model``, in any spelling a graph carries it.

    A short name of :data:`DEFAULT_GPU_MEMORY_MIB` (``T4``); else the size the name gives
    (``NVIDIA-A100-SXM4-40GB``, GPU feature discovery's ``nvidia.com/gpu.product``, or DCGM's
    ``NVIDIA H100 80GB HBM3``: 40 and 80 GiB; not for a Grace superchip, ``GH200``, ``GB200``,
    whose size is the CPU's memory: ``NVIDIA-GH200-480GB`` names the CPU's 480 GB of LPDDR5X, not
    the GPU's 96 GB of HBM3, and their spec-table memory is 0, unknown, so they get the
    placeholder); else
    the model its first word names once the vendor
    words (``NVIDIA``, ``Tesla``) are dropped, as
    :func:`~fleetmind.data.fleet_io.gpu_model_from_nvml` reads it (``Tesla-T4`` is a ``T4``,
    ``NVIDIA-A10G`` an ``A10`` of :data:`~fleetmind.data.topology.GPU_SPECS`); else
    :data:`FALLBACK_GPU_MEMORY_MIB`.
    """
    if model in DEFAULT_GPU_MEMORY_MIB:
        return float(DEFAULT_GPU_MEMORY_MIB[model])
    words = [w for w in re.split(r"[-_\s]+", model.strip()) if w]
    vendors = {v.upper() for v in VENDOR_PREFIXES}
    while words and words[0].upper() in vendors:
        words = words[1:]
    if not words:
        return float(FALLBACK_GPU_MEMORY_MIB)
    first = words[0].upper()
    # A Grace superchip's name (GH200, GB200, GB300) gives the size of the module, not of its GPU:
    # NVIDIA's GH200 Grace Hopper Superchip datasheet pairs 480GB of the Grace CPU's LPDDR5X with
    # the Hopper GPU's 96GB HBM3, and NVML (GFD's nvidia.com/gpu.memory) reports only the latter,
    # so "NVIDIA-GH200-480GB" is not a 480 GiB GPU; such a name's size word is ignored.
    superchip = re.fullmatch(r"G[HB]\d{2,3}", first) is not None
    for w in [] if superchip else words[1:]:
        if m := re.fullmatch(r"(\d{1,4})GB", w.upper()):
            if int(m.group(1)) > 0:
                return float(int(m.group(1)) * 1024)
    sizes = {k: v / 1024 for k, v in DEFAULT_GPU_MEMORY_MIB.items()}
    sizes |= {k: s.memory_gib for k, s in GPU_SPECS.items() if s.memory_gib > 0 and k not in sizes}
    known = [
        k for k in sizes if first.startswith(k.upper()) and not first[len(k) : len(k) + 1].isdigit()
    ]
    if not known:
        return float(FALLBACK_GPU_MEMORY_MIB)
    return float(sizes[max(known, key=len)] * 1024)


def _memory_attr(value: Any) -> float | None:
    """A graph GPU's ``attrs["memory_mib"]`` as a positive finite number of MiB, else None."""
    if isinstance(value, bool):
        return None
    try:
        mib = float(value)
    except (TypeError, ValueError):
        return None
    return mib if math.isfinite(mib) and mib > 0 else None


def _node(
    name: str, cluster: str, models: list[str], memory_mib: list[float | None] | None = None
) -> NodeState:
    memory = memory_mib or [None] * len(models)
    gpus = [
        GpuState(
            index=i,
            model=m,
            uuid=None,
            util_pct=0.0,
            mem_used_mib=0.0,
            mem_total_mib=mib if mib is not None else gpu_memory_mib(m),
            xid_errors=0.0,
            free_milli=1000,
        )
        for i, (m, mib) in enumerate(zip(models, memory, strict=True))
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
        attrs = [graph.node(g).attrs for g in gids]
        models = [str(a.get("model") or UNKNOWN_MODEL) for a in attrs]
        memory = [_memory_attr(a.get("memory_mib")) for a in attrs]
        name = host.match.get("node") or hid
        out.append(_node(name, host.cluster or "default", models, memory))
    return out
