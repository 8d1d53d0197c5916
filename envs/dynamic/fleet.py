"""The dynamic-mode fleet (:class:`DynFleet`) and the best GPU set of a node by bottleneck bandwidth.

The nodes of several clusters concatenated into one :class:`fleetmind.envs.core.ClusterState` (``N`` nodes, up
to 8 GPUs each), plus per node its cluster, GPU relative speed and ``(8, 8)`` GPU-to-GPU bandwidth
(GB/s, from :mod:`fleetmind.data.topology`), and per cluster pair a WAN bandwidth (GB/s) and round-trip time (s).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from fleetmind.data import fleet_io
from fleetmind.data.errors import ConfigError
from fleetmind.data.openb import gpu_model_id
from fleetmind.envs.core import MAX_GPUS_PER_NODE, ClusterState
from fleetmind.envs.dynamic.model import DEFAULT_SPEED_BASIS, REFERENCE_LINK_GBPS, gpu_speed


# Fleet
@dataclass
class DynFleet:
    """A multi-cluster fleet as arrays (``N`` nodes over ``C`` clusters).

    Attributes:
        names: ``(N,)`` node names.
        cluster: ``(N,)`` int cluster index of each node.
        cpu_milli, memory_mib, num_gpu: ``(N,)`` capacities (milli-cores, MiB, GPUs 0..8).
        model: ``(N,)`` GPU model names.
        link_gbps: ``(N, 8, 8)`` GB/s (one direction) between GPU pairs (``inf`` on the diagonal,
            0 on absent slots), from :meth:`fleetmind.data.topology.NodeTemplate.bandwidth_gbps`.
        cluster_names: ``(C,)``; regions: ``(C,)`` region of each cluster.
        wan_gbps: ``(C, C)`` WAN bandwidth, GB/s one direction (``inf`` on the diagonal).
        wan_rtt_s: ``(C, C)`` WAN round-trip time, seconds (0 on the diagonal).
        speed_basis: ``"fp32"`` or ``"fp16"`` (see :func:`gpu_speed`).
        templates: optional ``(N,)`` list of :class:`fleetmind.data.topology.NodeTemplate` (for
            TopologyBestEffort's go-gpuallocator scores); set by :meth:`from_fleet`.
    """

    names: np.ndarray
    cluster: np.ndarray
    cpu_milli: np.ndarray
    memory_mib: np.ndarray
    num_gpu: np.ndarray
    model: np.ndarray
    link_gbps: np.ndarray
    cluster_names: list[str]
    regions: list[str]
    wan_gbps: np.ndarray
    wan_rtt_s: np.ndarray
    speed_basis: str = "fp16"
    templates: list[Any] | None = None
    model_id: np.ndarray = field(init=False)
    speed: np.ndarray = field(init=False)
    topo_id: np.ndarray = field(init=False)
    _topo_bw: list[np.ndarray] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        n = len(self.names)
        self.names = np.asarray(self.names, dtype=str)
        self.cluster = np.asarray(self.cluster, dtype=np.int64)
        self.cpu_milli = np.asarray(self.cpu_milli, dtype=np.int64)
        self.memory_mib = np.asarray(self.memory_mib, dtype=np.int64)
        self.num_gpu = np.asarray(self.num_gpu, dtype=np.int64)
        self.model = np.asarray(self.model, dtype=str)
        self.link_gbps = np.asarray(self.link_gbps, dtype=np.float64)
        self.wan_gbps = np.array(self.wan_gbps, dtype=np.float64)
        self.wan_rtt_s = np.array(self.wan_rtt_s, dtype=np.float64)
        self.cluster_names = [str(c) for c in self.cluster_names]
        self.regions = [str(r) for r in self.regions]
        c = len(self.cluster_names)
        for key, arr, shape in (
            ("cluster", self.cluster, (n,)),
            ("cpu_milli", self.cpu_milli, (n,)),
            ("memory_mib", self.memory_mib, (n,)),
            ("num_gpu", self.num_gpu, (n,)),
            ("model", self.model, (n,)),
            ("link_gbps", self.link_gbps, (n, MAX_GPUS_PER_NODE, MAX_GPUS_PER_NODE)),
            ("wan_gbps", self.wan_gbps, (c, c)),
            ("wan_rtt_s", self.wan_rtt_s, (c, c)),
        ):
            if arr.shape != shape:
                raise ConfigError(f"fleet field {key!r} has shape {arr.shape}, expected {shape}")
        if n == 0 or (self.cluster < 0).any() or (self.cluster >= c).any():
            raise ConfigError("fleet needs >= 1 node and cluster indices within 0..C-1")
        if (self.num_gpu > MAX_GPUS_PER_NODE).any() or (self.num_gpu < 0).any():
            raise ConfigError(f"num_gpu must be within 0..{MAX_GPUS_PER_NODE}")
        np.fill_diagonal(self.wan_gbps, np.inf)
        np.fill_diagonal(self.wan_rtt_s, 0.0)
        if (self.wan_gbps <= 0).any() or (self.wan_rtt_s < 0).any():
            raise ConfigError("WAN bandwidth must be > 0 and round-trip times >= 0")
        self.model_id = np.array(
            [
                gpu_model_id(m) if g > 0 else -1
                for m, g in zip(self.model, self.num_gpu, strict=True)
            ],
            dtype=np.int64,
        )
        self.speed = np.array([gpu_speed(m, self.speed_basis) for m in self.model])
        # distinct GPU-link layouts, for the per-layout best-set caches
        keys: dict[bytes, int] = {}
        topo = np.empty(n, dtype=np.int64)
        self._topo_bw = []
        for i in range(n):
            g = int(self.num_gpu[i])
            key = bytes([g]) + self.link_gbps[i, :g, :g].tobytes()
            if key not in keys:
                keys[key] = len(keys)
                self._topo_bw.append(self.link_gbps[i, :g, :g].copy())
            topo[i] = keys[key]
        self.topo_id = topo

    @property
    def n_nodes(self) -> int:
        return len(self.names)

    @property
    def n_clusters(self) -> int:
        return len(self.cluster_names)

    @property
    def gpu_capacity(self) -> int:
        """Whole GPUs in the fleet."""
        return int(self.num_gpu.sum())

    @property
    def max_link_gbps(self) -> float:
        """Fastest GPU-pair link of the fleet (GB/s)."""
        off = np.isfinite(self.link_gbps)
        return float(self.link_gbps[off].max()) if off.any() else REFERENCE_LINK_GBPS

    def subset(self, nodes: np.ndarray) -> DynFleet:
        """The fleet restricted to ``nodes`` (indices, kept in the given order); clusters unchanged."""
        idx = np.asarray(nodes, dtype=np.int64)
        return DynFleet(
            names=self.names[idx],
            cluster=self.cluster[idx],
            cpu_milli=self.cpu_milli[idx],
            memory_mib=self.memory_mib[idx],
            num_gpu=self.num_gpu[idx],
            model=self.model[idx],
            link_gbps=self.link_gbps[idx],
            cluster_names=self.cluster_names,
            regions=self.regions,
            wan_gbps=self.wan_gbps,
            wan_rtt_s=self.wan_rtt_s,
            speed_basis=self.speed_basis,
            templates=None if self.templates is None else [self.templates[i] for i in idx],
        )

    def sample(self, fraction: float, seed: int = 0) -> DynFleet:
        """A seeded ``fraction`` of the nodes, stratified by (cluster, GPU model, GPU count): each
        stratum keeps ``round(fraction * size)`` nodes, at least one; node order is preserved."""
        if not 0 < fraction <= 1:
            raise ConfigError(f"node fraction must be within (0, 1], got {fraction}")
        if fraction == 1:
            return self
        rng = np.random.default_rng(seed)
        keep: list[np.ndarray] = []
        strata: dict[tuple[int, str, int], list[int]] = {}
        for i in range(self.n_nodes):
            key = (int(self.cluster[i]), str(self.model[i]), int(self.num_gpu[i]))
            strata.setdefault(key, []).append(i)
        for key in sorted(strata):
            members = np.array(strata[key])
            k = max(1, int(round(fraction * members.size)))
            keep.append(rng.choice(members, size=k, replace=False))
        return self.subset(np.sort(np.concatenate(keep)))

    def cluster_state(self, priority: np.ndarray | None = None) -> ClusterState:
        """A fresh :class:`fleetmind.envs.core.ClusterState` over all nodes of the fleet."""
        return ClusterState(
            self.cpu_milli, self.memory_mib, self.num_gpu, self.model_id, priority, self.names
        )

    def topo_bandwidth(self, topo: int) -> np.ndarray:
        """``(G, G)`` GB/s matrix of GPU-link layout ``topo``."""
        return self._topo_bw[topo]

    @classmethod
    def from_fleet(cls, fleet: Any, speed_basis: str = DEFAULT_SPEED_BASIS) -> DynFleet:
        """Convert a :class:`fleetmind.data.fleet.Fleet` to arrays.

        Uses the fleet's node arrays, each node's template (GPU model, ``bandwidth_gbps()``), the
        clusters' regions, ``wan_bandwidth_gbps`` (GB/s) and ``wan_latency_ms`` (round trip).

        Raises:
            ConfigError: a node of more than ``MAX_GPUS_PER_NODE`` (8) GPUs, which the state
                (:class:`fleetmind.envs.core.ClusterState`) cannot hold; the message names it.
        """
        n = int(fleet.n_nodes)
        tmpl = np.asarray(fleet.node_template, dtype=np.int64)
        for k, t in enumerate(fleet.templates):
            users = np.flatnonzero(tmpl == k)
            if int(t.n_gpus) > MAX_GPUS_PER_NODE and users.size:
                node = fleet.node_names[int(users[0])]
                raise ConfigError(
                    f"node {node!r} has {int(t.n_gpus)} GPUs (template {t.name!r}): dynamic mode "
                    f"holds at most {MAX_GPUS_PER_NODE} GPUs per node"
                )
        links = np.zeros((n, MAX_GPUS_PER_NODE, MAX_GPUS_PER_NODE))
        per_t = []
        for t in fleet.templates:
            bw = np.zeros((MAX_GPUS_PER_NODE, MAX_GPUS_PER_NODE))
            g = int(t.n_gpus)
            if g <= MAX_GPUS_PER_NODE:  # a larger template no node uses stays zeros
                bw[:g, :g] = t.bandwidth_gbps()
            per_t.append(bw)
        if n:
            links[:] = np.stack(per_t)[tmpl]
        return cls(
            names=np.asarray(fleet.node_names, dtype=str),
            cluster=np.asarray(fleet.node_cluster),
            cpu_milli=np.asarray(fleet.cpu_milli),
            memory_mib=np.asarray(fleet.memory_mib),
            num_gpu=np.asarray(fleet.gpu_count),
            model=np.asarray(fleet.gpu_model, dtype=str),
            link_gbps=links,
            cluster_names=[c.name for c in fleet.clusters],
            regions=[c.region for c in fleet.clusters],
            wan_gbps=np.asarray(fleet.wan_bandwidth_gbps, dtype=np.float64),
            wan_rtt_s=np.asarray(fleet.wan_latency_ms, dtype=np.float64) / 1000.0,
            speed_basis=speed_basis,
            templates=[fleet.templates[t] for t in tmpl.tolist()],
        )


def load_dynamic_fleet(
    fleet: str | Any = "openb", n_clusters: int = 3, speed_basis: str = DEFAULT_SPEED_BASIS
) -> DynFleet:
    """The dynamic-mode fleet: ``"openb"`` (openb GPU nodes in ``n_clusters`` clusters, via
    :func:`fleetmind.data.fleet_io.load_openb_fleet`), a YAML path (:func:`fleetmind.data.fleet_io.load_fleet_yaml`), a
    :class:`DynFleet` (returned as is) or a :class:`fleetmind.data.fleet.Fleet`.

    Raises:
        DataError / ConfigError: from the fleet loaders; ConfigError for a node of more than 8
            GPUs (:meth:`DynFleet.from_fleet`).
    """
    if isinstance(fleet, DynFleet):
        return fleet
    if isinstance(fleet, str):
        if fleet == "openb":
            f = fleet_io.load_openb_fleet(n_clusters=n_clusters)
        else:
            f = fleet_io.load_fleet_yaml(fleet)
        return DynFleet.from_fleet(f, speed_basis)
    return DynFleet.from_fleet(fleet, speed_basis)


# ---------------------------------------------------------------------------------------------
# Best GPU set by bottleneck bandwidth
# ---------------------------------------------------------------------------------------------
_BEST_SET_CACHE: dict[tuple[int, int, int, int], tuple[float, tuple[int, ...]]] = {}


def best_bottleneck_set(
    fleet: DynFleet, node: int, idle_bits: int, k: int
) -> tuple[float, tuple[int, ...]]:
    """The ``k`` idle GPUs of ``node`` with the highest slowest-pair bandwidth.

    Ties: the higher total pair bandwidth, then the lexicographically smallest tuple. Memoised per
    (fleet, GPU-link layout, idle mask, k).

    Args:
        idle_bits: bitmask of the fully idle GPUs (bit ``i`` = GPU ``i``).

    Returns:
        ``(bottleneck GB/s, gpus)``; ``(inf, gpus)`` for ``k <= 1``; ``(0.0, ())`` if fewer than
        ``k`` GPUs are idle.
    """
    topo = int(fleet.topo_id[node])
    key = (id(fleet), topo, idle_bits, k)
    hit = _BEST_SET_CACHE.get(key)
    if hit is not None:
        return hit
    idle = [i for i in range(MAX_GPUS_PER_NODE) if idle_bits >> i & 1]
    if len(idle) < k:
        out: tuple[float, tuple[int, ...]] = (0.0, ())
    elif k <= 1:
        out = (math.inf, tuple(idle[:k]))
    else:
        bw = fleet.topo_bandwidth(topo)
        best: tuple[float, float] = (-1.0, -1.0)
        best_set: tuple[int, ...] = ()
        for combo in itertools.combinations(idle, k):
            sub = bw[np.ix_(combo, combo)]
            offd = sub[~np.eye(k, dtype=bool)]
            score = (float(offd.min()), float(offd.sum()))
            if score > best:
                best, best_set = score, combo
        out = (best[0], best_set)
    if len(_BEST_SET_CACHE) > 200_000:
        _BEST_SET_CACHE.clear()
    _BEST_SET_CACHE[key] = out
    return out


def bottleneck_gbps(fleet: DynFleet, node: int, gpus: Sequence[int]) -> float:
    """Slowest GB/s among the pairs of ``gpus`` on ``node`` (``inf`` for fewer than two GPUs)."""
    g = np.asarray(gpus, dtype=np.int64)
    if g.size < 2:
        return math.inf
    sub = fleet.link_gbps[node][np.ix_(g, g)]
    return float(sub[~np.eye(g.size, dtype=bool)].min())


__all__ = [
    "DynFleet",
    "best_bottleneck_set",
    "bottleneck_gbps",
    "load_dynamic_fleet",
]
