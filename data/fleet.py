"""The fleet: clusters -> nodes -> GPUs, as numpy arrays for the simulator's hot paths.

A :class:`Fleet` holds ``C`` clusters (each in a region), ``N`` nodes and the node templates they use.
Per-node facts are arrays indexed by node (``node_cluster``, ``node_template``, ``gpu_count``,
``cpu_milli``, ``memory_mib``); GPU-to-GPU topology lives in the shared
:class:`~fleetmind.data.topology.NodeTemplate` objects (``fleet.templates[fleet.node_template[n]]``).
Between clusters, ``wan_latency_ms`` (round trip) and ``wan_bandwidth_gbps`` (GB/s, one direction)
are ``(C, C)`` matrices; the diagonal is 0 ms and ``inf`` GB/s (no WAN inside a cluster).

Region defaults (:data:`REGIONS`, :func:`default_wan`): the round-trip time between two regions is
estimated from the great-circle distance between their metros, at 200 km/ms in fibre with a path
stretch of 1.5 plus 2 ms of equipment delay (``rtt = 2 * 1.5 * d / 200 + 2``). Published inter-region
figures fall in the same ranges (Microsoft, "Azure network round-trip latency statistics": monthly
averages of 5-72 ms within North America, 3-28 ms within Europe, 4-134 ms within Asia, October 2019).
The estimate is a model, not a measurement: give measured pairs in the fleet YAML (``wan:``). WAN bandwidth between clusters defaults to 12.5 GB/s
(100 Gbit/s) within a region and 1.25 GB/s (10 Gbit/s) across regions: assumptions of FleetMind for a
provisioned interconnect, overridable per pair in YAML.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from fleetmind.data.errors import ConfigError
from fleetmind.data.topology import NodeTemplate

MAX_FLEET_NODES = 200_000
"""Most nodes one fleet may hold: the node bound of the RCA graphs (``data/rca_gen/graphs.py``
``MAX_NODES``, the graph JSON's node limit), 3x the largest documented Kubernetes cluster (GKE's
65,000 nodes) and 40x upstream Kubernetes' tested 5,000. A fleet file asking for more is refused
before any node is built."""


@dataclass(frozen=True)
class Cluster:
    """A cluster: a scheduling domain with one network fabric, in one region."""

    name: str
    region: str


@dataclass(frozen=True)
class Region:
    """A metro area hosting clusters; ``lat``/``lon`` in degrees (for the WAN latency estimate)."""

    name: str
    metro: str
    lat: float
    lon: float


REGIONS: dict[str, Region] = {
    r.name: r
    for r in (
        Region("us-east", "Ashburn, Virginia", 39.04, -77.49),
        Region("us-west", "The Dalles, Oregon", 45.60, -121.18),
        Region("eu-west", "Amsterdam", 52.37, 4.90),
        Region("eu-central", "Frankfurt", 50.11, 8.68),
        Region("ap-northeast", "Tokyo", 35.68, 139.69),
        Region("ap-southeast", "Singapore", 1.35, 103.82),
        Region("cn-east", "Hangzhou", 30.27, 120.16),
        Region("cn-north", "Beijing", 39.90, 116.40),
    )
}
"""Built-in regions (metro coordinates). Unknown region names are allowed; they get
:data:`UNKNOWN_REGION_RTT_MS` to every other region unless the YAML gives the pair."""

REGION_ORDER: tuple[str, ...] = (
    "cn-east",
    "cn-north",
    "us-east",
    "us-west",
    "eu-central",
    "eu-west",
    "ap-southeast",
    "ap-northeast",
)
"""Regions handed out, in order, to clusters made by partitioning a fleet (openb is Alibaba's)."""

FIBRE_KM_PER_MS = 200.0
PATH_STRETCH = 1.5
EQUIPMENT_MS = 2.0
SAME_REGION_RTT_MS = 1.0
"""Round trip between two clusters of one region (different buildings of a metro), assumed."""
UNKNOWN_REGION_RTT_MS = 100.0
SAME_REGION_GBPS = 12.5
CROSS_REGION_GBPS = 1.25


def great_circle_km(a: Region, b: Region) -> float:
    """Haversine distance between two regions' metros in km (Earth radius 6371 km)."""
    p1, p2 = math.radians(a.lat), math.radians(b.lat)
    dp, dl = p2 - p1, math.radians(b.lon - a.lon)
    h = math.sin(dp / 2) ** 2 + math.cos(p1) * math.cos(p2) * math.sin(dl / 2) ** 2
    return 2 * 6371.0 * math.asin(min(1.0, math.sqrt(h)))


def region_rtt_ms(a: str, b: str) -> float:
    """Estimated round-trip ms between two regions (see the module docstring).

    Two clusters in one region get :data:`SAME_REGION_RTT_MS`; a region missing from :data:`REGIONS`
    gets :data:`UNKNOWN_REGION_RTT_MS`.
    """
    if a == b:
        return SAME_REGION_RTT_MS
    ra, rb = REGIONS.get(a), REGIONS.get(b)
    if ra is None or rb is None:
        return UNKNOWN_REGION_RTT_MS
    d = great_circle_km(ra, rb)
    return round(2.0 * PATH_STRETCH * d / FIBRE_KM_PER_MS + EQUIPMENT_MS, 1)


def default_wan(clusters: Sequence[Cluster]) -> tuple[np.ndarray, np.ndarray]:
    """``(latency_ms, bandwidth_gbps)``, both ``(C, C)`` float64, from the clusters' regions."""
    c = len(clusters)
    lat = np.zeros((c, c), dtype=np.float64)
    bw = np.full((c, c), np.inf, dtype=np.float64)
    for i in range(c):
        for j in range(c):
            if i == j:
                continue
            ri, rj = clusters[i].region, clusters[j].region
            lat[i, j] = region_rtt_ms(ri, rj)
            bw[i, j] = SAME_REGION_GBPS if ri == rj else CROSS_REGION_GBPS
    return lat, bw


class Fleet:
    """Clusters, nodes and their templates.

    Shapes: ``C`` clusters, ``N`` nodes, ``T`` templates, ``M`` GPU models.

    Attributes:
        name: fleet name.
        clusters: ``C`` :class:`Cluster`.
        templates: ``T`` :class:`~fleetmind.data.topology.NodeTemplate` (distinct, shared by nodes).
        node_names: ``N`` node names (unique).
        node_cluster: ``(N,)`` int64 cluster index of each node.
        node_template: ``(N,)`` int64 index into ``templates``.
        gpu_count: ``(N,)`` int64 GPUs per node (the template's ``n_gpus``).
        cpu_milli: ``(N,)`` int64 CPU capacity in milli-cores.
        memory_mib: ``(N,)`` int64 memory capacity in MiB.
        gpu_model: ``(N,)`` str GPU model per node; ``model_names`` the ``M`` distinct models in
            order of first appearance and ``node_model`` ``(N,)`` int64 indices into it.
        gpu_offset: ``(N + 1,)`` int64: GPUs of node ``n`` are ``gpu_offset[n]:gpu_offset[n + 1]`` in
            a flat fleet-wide GPU numbering.
        wan_latency_ms: ``(C, C)`` float64 round-trip ms between clusters (0 on the diagonal).
        wan_bandwidth_gbps: ``(C, C)`` float64 GB/s between clusters (``inf`` on the diagonal).
        source: where the fleet came from (file path, ``"openb"``, ``"nvml"``).

    All arrays are read-only; build a new fleet to change one.
    """

    def __init__(
        self,
        name: str,
        clusters: Sequence[Cluster],
        templates: Sequence[NodeTemplate],
        node_names: Sequence[str],
        node_cluster: Sequence[int] | np.ndarray,
        node_template: Sequence[int] | np.ndarray,
        cpu_milli: Sequence[int] | np.ndarray,
        memory_mib: Sequence[int] | np.ndarray,
        wan_latency_ms: np.ndarray | None = None,
        wan_bandwidth_gbps: np.ndarray | None = None,
        source: str = "",
    ) -> None:
        self.name = str(name)
        self.clusters: list[Cluster] = list(clusters)
        self.templates: list[NodeTemplate] = list(templates)
        self.node_names: list[str] = [str(n) for n in node_names]
        self.source = source
        n, c, t = len(self.node_names), len(self.clusters), len(self.templates)
        if c == 0:
            raise ConfigError(f"fleet {self.name!r} has no clusters")
        if n > MAX_FLEET_NODES:
            raise ConfigError(f"fleet {self.name!r} has {n:,} nodes; at most {MAX_FLEET_NODES:,}")
        names = [cl.name for cl in self.clusters]
        if len(set(names)) != c:
            raise ConfigError(f"fleet {self.name!r}: duplicate cluster names")
        if len({tp.name for tp in self.templates}) != t:
            raise ConfigError(f"fleet {self.name!r}: duplicate template names")
        if len(set(self.node_names)) != n:
            dup = next(x for x in self.node_names if self.node_names.count(x) > 1)
            raise ConfigError(f"fleet {self.name!r}: duplicate node name {dup!r}")
        self.node_cluster = _ro(np.asarray(node_cluster, dtype=np.int64).reshape(n))
        self.node_template = _ro(np.asarray(node_template, dtype=np.int64).reshape(n))
        self.cpu_milli = _ro(np.asarray(cpu_milli, dtype=np.int64).reshape(n))
        self.memory_mib = _ro(np.asarray(memory_mib, dtype=np.int64).reshape(n))
        if n and (self.node_cluster.min() < 0 or self.node_cluster.max() >= c):
            raise ConfigError(f"fleet {self.name!r}: node_cluster out of range 0..{c - 1}")
        if n and (self.node_template.min() < 0 or self.node_template.max() >= t):
            raise ConfigError(f"fleet {self.name!r}: node_template out of range 0..{t - 1}")
        tmpl_gpus = np.array([tp.n_gpus for tp in self.templates], dtype=np.int64)
        self.gpu_count = _ro(tmpl_gpus[self.node_template] if n else np.zeros(0, np.int64))
        offset = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(self.gpu_count, out=offset[1:])
        self.gpu_offset = _ro(offset)
        self.model_names: list[str] = []
        for tp in self.templates:
            if tp.gpu_model not in self.model_names:
                self.model_names.append(tp.gpu_model)
        tmpl_model = np.array(
            [self.model_names.index(tp.gpu_model) for tp in self.templates], dtype=np.int64
        )
        self.node_model = _ro(tmpl_model[self.node_template] if n else np.zeros(0, np.int64))
        self.gpu_model = _ro(np.array(self.model_names, dtype=str)[self.node_model])
        lat_d, bw_d = default_wan(self.clusters)
        lat = lat_d if wan_latency_ms is None else np.asarray(wan_latency_ms, dtype=np.float64)
        bw = bw_d if wan_bandwidth_gbps is None else np.asarray(wan_bandwidth_gbps, np.float64)
        for key, arr in (("wan_latency_ms", lat), ("wan_bandwidth_gbps", bw)):
            if arr.shape != (c, c):
                raise ConfigError(f"fleet {self.name!r}: {key} must be ({c}, {c}), got {arr.shape}")
            if not np.array_equal(arr, arr.T):
                raise ConfigError(f"fleet {self.name!r}: {key} is not symmetric")
        self.wan_latency_ms = _ro(lat)
        self.wan_bandwidth_gbps = _ro(bw)
        self._node_index = {nm: i for i, nm in enumerate(self.node_names)}
        self._cluster_index = {cl.name: i for i, cl in enumerate(self.clusters)}

    # -- sizes ---------------------------------------------------------------------------------
    @property
    def n_nodes(self) -> int:
        return len(self.node_names)

    @property
    def n_clusters(self) -> int:
        return len(self.clusters)

    @property
    def n_gpus(self) -> int:
        return int(self.gpu_offset[-1])

    # -- look-ups -------------------------------------------------------------------------------
    def node_index(self, node: int | str) -> int:
        """Index of a node given by index or name.

        Raises:
            ConfigError: unknown name or index out of range.
        """
        if isinstance(node, (int, np.integer)):
            if not 0 <= int(node) < self.n_nodes:
                raise ConfigError(f"node index {node} out of range 0..{self.n_nodes - 1}")
            return int(node)
        idx = self._node_index.get(str(node))
        if idx is None:
            raise ConfigError(f"unknown node {node!r} in fleet {self.name!r}")
        return idx

    def cluster_index(self, cluster: int | str) -> int:
        """Index of a cluster given by index or name (raises ConfigError when unknown)."""
        if isinstance(cluster, (int, np.integer)):
            if not 0 <= int(cluster) < self.n_clusters:
                raise ConfigError(f"cluster index {cluster} out of range 0..{self.n_clusters - 1}")
            return int(cluster)
        idx = self._cluster_index.get(str(cluster))
        if idx is None:
            known = ", ".join(self._cluster_index)
            raise ConfigError(f"unknown cluster {cluster!r}; clusters are {known}")
        return idx

    def nodes_in_cluster(self, cluster: int | str) -> np.ndarray:
        """``(n_c,)`` int64 indices of the nodes of ``cluster`` (index or name), ascending."""
        return np.flatnonzero(self.node_cluster == self.cluster_index(cluster))

    def template_of(self, node: int | str) -> NodeTemplate:
        """The template of ``node`` (index or name)."""
        return self.templates[int(self.node_template[self.node_index(node)])]

    def gpu_range(self, node: int | str) -> range:
        """Flat fleet-wide GPU ids of ``node``."""
        i = self.node_index(node)
        return range(int(self.gpu_offset[i]), int(self.gpu_offset[i + 1]))

    # -- summaries ------------------------------------------------------------------------------
    def summary(self) -> dict[str, Any]:
        """JSON-ready summary: sizes, per cluster, per GPU model and per template counts."""
        clusters = []
        for ci, cl in enumerate(self.clusters):
            mask = self.node_cluster == ci
            clusters.append(
                {
                    "name": cl.name,
                    "region": cl.region,
                    "nodes": int(mask.sum()),
                    "gpus": int(self.gpu_count[mask].sum()),
                }
            )
        by_model: dict[str, dict[str, Any]] = {}
        for mi, model in enumerate(self.model_names):
            mask = self.node_model == mi
            sizes, counts = np.unique(self.gpu_count[mask], return_counts=True)
            by_model[model] = {
                "nodes": int(mask.sum()),
                "gpus": int(self.gpu_count[mask].sum()),
                "nodes_by_gpu_count": {
                    str(int(s)): int(k) for s, k in zip(sizes, counts, strict=True)
                },
            }
        by_template = {}
        for ti, tp in enumerate(self.templates):
            mask = self.node_template == ti
            by_template[tp.name] = {
                "nodes": int(mask.sum()),
                "gpus": int(self.gpu_count[mask].sum()),
            }
        return {
            "name": self.name,
            "source": self.source,
            "n_clusters": self.n_clusters,
            "n_nodes": self.n_nodes,
            "n_gpus": self.n_gpus,
            "cpu_milli": int(self.cpu_milli.sum()),
            "memory_mib": int(self.memory_mib.sum()),
            "clusters": clusters,
            "gpu_models": by_model,
            "templates": by_template,
            "wan_latency_ms": _jsonable(self.wan_latency_ms),
            "wan_bandwidth_gbps": _jsonable(self.wan_bandwidth_gbps),
        }

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Fleet):
            return NotImplemented
        return (
            self.name == other.name
            and self.clusters == other.clusters
            and self.templates == other.templates
            and self.node_names == other.node_names
            and all(
                np.array_equal(getattr(self, k), getattr(other, k))
                for k in ("node_cluster", "node_template", "cpu_milli", "memory_mib")
            )
            and np.allclose(self.wan_latency_ms, other.wan_latency_ms)
            and np.array_equal(self.wan_bandwidth_gbps, other.wan_bandwidth_gbps)
        )

    __hash__ = None  # type: ignore[assignment]

    def __setstate__(self, state: dict[str, Any]) -> None:
        for key, val in state.items():
            setattr(self, key, _ro(val) if isinstance(val, np.ndarray) else val)

    def __repr__(self) -> str:
        return (
            f"Fleet({self.name!r}, clusters={self.n_clusters}, nodes={self.n_nodes}, "
            f"gpus={self.n_gpus}, templates={len(self.templates)})"
        )


def _ro(arr: np.ndarray) -> np.ndarray:
    arr = np.ascontiguousarray(arr)
    arr.setflags(write=False)
    return arr


def _jsonable(m: np.ndarray) -> list[list[float | None]]:
    """Matrix as nested lists, ``inf`` as ``None`` (JSON has no infinity)."""
    return [[None if math.isinf(x) else float(x) for x in row] for row in m.tolist()]
