"""Dynamic simulation mode: a multi-cluster fleet, jobs that arrive, queue, run and depart.

The model and every constant are documented, with sources, in ``docs/dynamic.md``. In short:

* **Fleet** (:class:`DynFleet`): the nodes of several clusters concatenated into one
  :class:`envs.core.ClusterState` (``N`` nodes, up to 8 GPUs each), plus per node its cluster, GPU
  relative speed and ``(8, 8)`` GPU-to-GPU bandwidth (GB/s, from :mod:`data.topology`), and per
  cluster pair a WAN bandwidth (GB/s) and round-trip time (s).
* **Jobs** (:class:`DynJobs`, built by :func:`build_jobs`): a stream of ``n_jobs`` pods taken from
  the trace in ``creation_time`` order (circularly, from a random start) with the trace's own
  inter-arrival gaps (a synthetic Poisson process for traces without times), compressed by one
  factor so that the offered GPU load during the arrival window equals ``target_util``; the work of
  a job (seconds on the reference placement) from ``deletion_time - scheduled_time``; a
  communication intensity per multi-GPU job; a data home cluster and a dataset size per job.
* **Runtime model** (:func:`runtime_factor`): ``run = work * ((1 - c) / s + c * B_ref / B_min)`` for a
  job of ``k >= 2`` GPUs (``work / s`` otherwise), with ``s`` the GPU model's relative throughput,
  ``B_min`` the slowest link among the job's GPUs and ``c`` its communication intensity; remote data
  adds ``RTT + size_GB / WAN_GB/s`` before the run.
* **Scheduling** (:class:`DynamicSim`): event driven; a FIFO queue with a bounded backfill window (the
  head first, then up to ``backfill_depth`` later jobs that fit now, no reservations); a job that no
  node of the empty fleet could host is rejected on arrival.
* **Metrics** (:meth:`DynamicSim.metrics`): mean and p99 JCT, mean slowdown (JCT / ideal runtime),
  p99 queueing delay, GPU allocation ratio (time average over the arrival window).

Policies implement :class:`DynamicPolicy` (``select(sim, j) -> (node, gpus)``); the single-cluster node
scorers of :mod:`envs.policies` are applied to the whole fleet through :class:`NodeScorerPolicy`.
"""

from __future__ import annotations

import heapq
import itertools
import math
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

import numpy as np

from fleetmind.data.errors import ConfigError, DataError
from fleetmind.data.openb import ANY_GPU_MODEL, GPU_MILLI, PodTrace, gpu_model_id
from fleetmind.envs.core import MAX_GPUS_PER_NODE, ClusterState, Pod

# ---------------------------------------------------------------------------------------------
# Constants (sources in docs/dynamic.md)
# ---------------------------------------------------------------------------------------------

GPU_TFLOPS: dict[str, tuple[float, float]] = {
    "P100": (9.3, 18.7),
    "V100": (15.7, 125.0),
    "V100M16": (15.7, 125.0),
    "V100M32": (15.7, 125.0),
    "T4": (8.1, 65.0),
    "A10": (31.2, 125.0),
    "A100": (19.5, 312.0),
    "H100": (67.0, 989.0),
}
"""Peak (FP32, dense FP16 tensor) TFLOPS per GPU model, from NVIDIA's product datasheets (P100 PCIe,
V100 SXM2, T4, A10, A100 SXM4, H100 SXM5; see docs/dynamic.md)."""

REFERENCE_GPU_MODEL = "V100"
"""Speed 1.0. Trace durations are read as runtimes on this model (openb's anonymised G2/G3 hold 76 %
of the fleet's GPUs and are assumed to be as fast as it)."""

REFERENCE_LINK_GBPS = 25.0
"""Bandwidth (GB/s, one direction) of the reference placement's slowest link: one NVLink 2 link
(V100 architecture whitepaper: 6 links, 300 GB/s bidirectional in total)."""

COMM_INTENSITY_MAX = 0.5
"""Communication intensity ``c`` of a multi-GPU job is drawn from ``Uniform(0, COMM_INTENSITY_MAX)``."""

DATASET_CATALOG_GB: dict[str, float] = {
    "CIFAR-10": 0.163,
    "COCO-2017-train": 18.0,
    "OpenWebText": 38.0,
    "LibriSpeech-960h": 59.3,
    "ImageNet-1k-train": 138.0,
}
"""Dataset sizes (GB) of well-known public training sets (download sizes as published; docs/dynamic.md);
each job draws one uniformly."""

SYNTHETIC_DURATION_MEDIAN_S = 616.0
"""Median of ``deletion_time - scheduled_time`` over the 7,255 scheduled pods of openb ``default``."""

SYNTHETIC_DURATION_SIGMA = 1.977
"""Log-normal sigma matching that median and the p90 (7,764 s): ``ln(7764 / 616) / 1.2816``."""

MIN_WORK_S = 1.0
"""Floor on a job's work (seconds)."""

MAX_WORK_S = 86_400.0
"""Default cap on a job's work: one day (openb ``default``: 1.2 % of the scheduled pods run longer,
up to 145 days; their time beyond one day is 86 % of all GPU-seconds)."""

MAX_GAP_S = 86_400.0
"""Trace inter-arrival gaps above one day are replaced by the median gap (openb ``default``: 16 gaps,
all among the first 26 pods, created over 115 days; the last 34.5 days hold 99.7 % of the pods)."""

DEFAULT_TARGET_UTIL = 0.8
"""Default offered GPU load during the arrival window (fraction of fleet GPU capacity)."""

DEFAULT_BACKFILL_DEPTH = 8
"""Queued jobs behind the head that may start when they fit (0 = strict FIFO)."""

DEFAULT_NODE_FRACTION = 0.25
"""Share of the openb nodes :func:`evaluate_dynamic` keeps (stratified): one pass of an 8,152-pod
trace can load 1,565 GPUs to the target, but not 6,212 (docs/dynamic.md, "Load scaling")."""

DEFAULT_SPEED_BASIS = "fp16"
"""GPU speeds from dense FP16 tensor TFLOPS (mixed-precision training)."""

# job status codes
FUTURE, QUEUED, RUNNING, DONE, REJECTED = 0, 1, 2, 3, 4


def gpu_speed(model: str, basis: str = DEFAULT_SPEED_BASIS) -> float:
    """Relative throughput of ``model`` against :data:`REFERENCE_GPU_MODEL` (1.0 when unknown).

    Args:
        model: GPU model name (``"V100M32"``, ``"T4"``, ...).
        basis: ``"fp32"`` (peak FP32 TFLOPS) or ``"fp16"`` (dense FP16 tensor TFLOPS).
    """
    if basis not in ("fp32", "fp16"):
        raise ConfigError(f"speed basis must be 'fp32' or 'fp16', got {basis!r}")
    i = 0 if basis == "fp32" else 1
    ref = GPU_TFLOPS[REFERENCE_GPU_MODEL][i]
    spec = GPU_TFLOPS.get(model)
    return 1.0 if spec is None else spec[i] / ref


def runtime_factor(
    speed: np.ndarray | float,
    bottleneck_gbps: np.ndarray | float,
    num_gpu: np.ndarray | int,
    comm: np.ndarray | float,
    ref_gbps: float = REFERENCE_LINK_GBPS,
) -> np.ndarray:
    """Runtime per unit of work: ``(1 - c) / s + c * B_ref / B_min`` for ``k >= 2``, else ``1 / s``.

    Args:
        speed: relative GPU throughput ``s`` (> 0).
        bottleneck_gbps: slowest GB/s among the job's GPU pairs ``B_min`` (ignored for ``k < 2``).
        num_gpu: GPUs of the job ``k``.
        comm: communication intensity ``c`` in [0, 1): the share of a step spent communicating on
            the reference placement.
        ref_gbps: ``B_ref``.

    Returns:
        Broadcast float64 array; ``runtime = work * factor``.
    """
    s = np.asarray(speed, dtype=np.float64)
    c = np.asarray(comm, dtype=np.float64)
    b = np.asarray(bottleneck_gbps, dtype=np.float64)
    k = np.asarray(num_gpu)
    with np.errstate(divide="ignore", invalid="ignore"):
        multi = (1.0 - c) / s + c * ref_gbps / b
    return np.where(k >= 2, multi, 1.0 / s)


# ---------------------------------------------------------------------------------------------
# Fleet
# ---------------------------------------------------------------------------------------------


@dataclass
class DynFleet:
    """A multi-cluster fleet as arrays (``N`` nodes over ``C`` clusters).

    Attributes:
        names: ``(N,)`` node names.
        cluster: ``(N,)`` int cluster index of each node.
        cpu_milli, memory_mib, num_gpu: ``(N,)`` capacities (milli-cores, MiB, GPUs 0..8).
        model: ``(N,)`` GPU model names.
        link_gbps: ``(N, 8, 8)`` GB/s (one direction) between GPU pairs (``inf`` on the diagonal,
            0 on absent slots), from :meth:`data.topology.NodeTemplate.bandwidth_gbps`.
        cluster_names: ``(C,)``; regions: ``(C,)`` region of each cluster.
        wan_gbps: ``(C, C)`` WAN bandwidth, GB/s one direction (``inf`` on the diagonal).
        wan_rtt_s: ``(C, C)`` WAN round-trip time, seconds (0 on the diagonal).
        speed_basis: ``"fp32"`` or ``"fp16"`` (see :func:`gpu_speed`).
        templates: optional ``(N,)`` list of :class:`data.topology.NodeTemplate` (for
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
        """A fresh :class:`envs.core.ClusterState` over all nodes of the fleet."""
        return ClusterState(
            self.cpu_milli, self.memory_mib, self.num_gpu, self.model_id, priority, self.names
        )

    def topo_bandwidth(self, topo: int) -> np.ndarray:
        """``(G, G)`` GB/s matrix of GPU-link layout ``topo``."""
        return self._topo_bw[topo]

    @classmethod
    def from_fleet(cls, fleet: Any, speed_basis: str = DEFAULT_SPEED_BASIS) -> DynFleet:
        """Convert a :class:`data.fleet.Fleet` to arrays.

        Uses the fleet's node arrays, each node's template (GPU model, ``bandwidth_gbps()``), the
        clusters' regions, ``wan_bandwidth_gbps`` (GB/s) and ``wan_latency_ms`` (round trip).
        """
        n = int(fleet.n_nodes)
        links = np.zeros((n, MAX_GPUS_PER_NODE, MAX_GPUS_PER_NODE))
        per_t = []
        for t in fleet.templates:
            bw = np.zeros((MAX_GPUS_PER_NODE, MAX_GPUS_PER_NODE))
            g = int(t.n_gpus)
            bw[:g, :g] = t.bandwidth_gbps()
            per_t.append(bw)
        tmpl = np.asarray(fleet.node_template, dtype=np.int64)
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
    :func:`data.fleet_io.load_openb_fleet`), a YAML path (:func:`data.fleet_io.load_fleet_yaml`), a
    :class:`DynFleet` (returned as is) or a :class:`data.fleet.Fleet`.

    Raises:
        DataError / ConfigError: from the fleet loaders.
    """
    if isinstance(fleet, DynFleet):
        return fleet
    if isinstance(fleet, str):
        from fleetmind.data import fleet_io

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


# ---------------------------------------------------------------------------------------------
# Jobs
# ---------------------------------------------------------------------------------------------


@dataclass
class DynJobs:
    """Jobs of one dynamic-mode run (``J`` jobs, sorted by arrival).

    Attributes:
        names: ``(J,)`` pod names.
        arrival_s: ``(J,)`` arrival times (s, first arrival at 0, load-scaled).
        work_s: ``(J,)`` runtime on the reference placement (s).
        cpu_milli, memory_mib, num_gpu, gpu_milli, gpu_spec_mask: ``(J,)`` requests (see
            :class:`envs.core.Pod`).
        comm: ``(J,)`` communication intensity in [0, 1) (0 for jobs of fewer than two GPUs).
        data_home: ``(J,)`` cluster index holding the job's dataset.
        data_gb: ``(J,)`` dataset size (GB).
        ideal_s: ``(J,)`` ideal runtime: the fastest runtime on the empty fleet, data local.
        time_scale: factor applied to trace inter-arrival times (``< 1`` compresses).
        offered_load: offered GPU load over the arrival window (== ``target_util`` up to bisection).
        synthetic_arrivals: True when arrivals came from the synthetic Poisson process.
        n_duration_fallback: jobs whose work came from the fallback (no ``scheduled_time``).
    """

    names: np.ndarray
    arrival_s: np.ndarray
    work_s: np.ndarray
    cpu_milli: np.ndarray
    memory_mib: np.ndarray
    num_gpu: np.ndarray
    gpu_milli: np.ndarray
    gpu_spec_mask: np.ndarray
    comm: np.ndarray
    data_home: np.ndarray
    data_gb: np.ndarray
    ideal_s: np.ndarray
    time_scale: float = 1.0
    offered_load: float = float("nan")
    synthetic_arrivals: bool = False
    n_duration_fallback: int = 0

    def __len__(self) -> int:
        return len(self.names)

    def pod(self, j: int) -> Pod:
        """The :class:`envs.core.Pod` request of job ``j``."""
        return Pod(
            int(self.cpu_milli[j]),
            int(self.memory_mib[j]),
            int(self.num_gpu[j]),
            int(self.gpu_milli[j]),
            int(self.gpu_spec_mask[j]),
        )

    @property
    def gpus(self) -> np.ndarray:
        """``(J,)`` GPUs held (``num_gpu * gpu_milli / 1000``)."""
        return self.num_gpu * self.gpu_milli / GPU_MILLI

    def window(self, start: int, n: int) -> DynJobs:
        """Jobs ``start .. start + n - 1`` with arrivals rebased to 0."""
        sl = slice(start, start + n)
        arrays = {
            k: getattr(self, k)[sl]
            for k in (
                "names",
                "arrival_s",
                "work_s",
                "cpu_milli",
                "memory_mib",
                "num_gpu",
                "gpu_milli",
                "gpu_spec_mask",
                "comm",
                "data_home",
                "data_gb",
                "ideal_s",
            )
        }
        arrays["arrival_s"] = arrays["arrival_s"] - arrays["arrival_s"][0]
        return replace(self, **arrays)


def offered_load(
    arrival_s: np.ndarray, work_s: np.ndarray, gpus: np.ndarray, capacity: float
) -> float:
    """Mean GPU demand over the arrival window if every job ran from its arrival, / capacity.

    ``load = sum_j g_j * overlap([a_j, a_j + w_j], [a_0, a_last]) / (capacity * (a_last - a_0))``.
    """
    a0, a1 = float(arrival_s.min()), float(arrival_s.max())
    span = a1 - a0
    if span <= 0:
        return math.inf
    overlap = np.clip(np.minimum(arrival_s + work_s, a1) - arrival_s, 0.0, None)
    return float((gpus * overlap).sum() / (capacity * span))


def _scale_for_load(
    a: np.ndarray, w: np.ndarray, g: np.ndarray, cap: float, target: float
) -> float:
    """Factor ``f`` so that ``offered_load(a * f, ...) == target`` (bisection on log f)."""
    lo, hi = 1e-9, 1e9
    if offered_load(a * hi, w, g, cap) > target:
        return hi
    if offered_load(a * lo, w, g, cap) < target:
        return lo
    for _ in range(80):
        mid = math.sqrt(lo * hi)
        if offered_load(a * mid, w, g, cap) > target:
            lo = mid
        else:
            hi = mid
        if hi / lo < 1 + 1e-9:
            break
    return math.sqrt(lo * hi)


def _node_kinds(fleet: DynFleet) -> list[tuple[int, int, int, int, float, np.ndarray]]:
    """Distinct (cpu, mem, model_id, topo, speed) node kinds with their best bottleneck per k."""
    seen: dict[tuple[int, int, int, int], int] = {}
    kinds: list[tuple[int, int, int, int, float, np.ndarray]] = []
    for n in range(fleet.n_nodes):
        key = (
            int(fleet.cpu_milli[n]),
            int(fleet.memory_mib[n]),
            int(fleet.model_id[n]),
            int(fleet.topo_id[n]),
        )
        if key in seen:
            continue
        seen[key] = n
        g = int(fleet.num_gpu[n])
        best = np.zeros(MAX_GPUS_PER_NODE + 1)
        for k in range(MAX_GPUS_PER_NODE + 1):
            best[k] = best_bottleneck_set(fleet, n, (1 << g) - 1, k)[0] if k <= g else 0.0
        kinds.append((*key, float(fleet.speed[n]), best))
    return kinds


def ideal_runtimes(
    fleet: DynFleet,
    work_s: np.ndarray,
    cpu: np.ndarray,
    mem: np.ndarray,
    num_gpu: np.ndarray,
    gpu_spec_mask: np.ndarray,
    comm: np.ndarray,
) -> np.ndarray:
    """``(J,)`` fastest runtime of each job on the empty fleet (data local); ``inf`` if it fits nowhere."""
    best = np.full(len(work_s), np.inf)
    for kcpu, kmem, mid, _topo, speed, bw in _node_kinds(fleet):
        g = int(np.count_nonzero(bw[1:])) if mid >= 0 else 0  # bw[k] > 0 exactly for 1 <= k <= G
        ok = (cpu <= kcpu) & (mem <= kmem) & (num_gpu <= g)
        model_ok = np.where(
            gpu_spec_mask == ANY_GPU_MODEL, True, (gpu_spec_mask >> max(mid, 0)) & 1 == 1
        )
        ok &= np.where(num_gpu > 0, (mid >= 0) & model_ok, True)
        k = np.minimum(num_gpu, MAX_GPUS_PER_NODE)
        f = np.where(num_gpu > 0, runtime_factor(speed, bw[k], num_gpu, comm), 1.0)
        best = np.where(ok, np.minimum(best, work_s * f), best)
    return best


def _arrival_stream(
    trace: PodTrace, rng: np.random.Generator, n_jobs: int, max_gap_s: float
) -> tuple[np.ndarray, np.ndarray, bool]:
    """Pod indices and unscaled arrival times of an ``n_jobs`` stream (see :func:`build_jobs`)."""
    p = len(trace)
    created = np.asarray(trace.creation_time, dtype=np.float64)
    synthetic = not bool(np.isfinite(created).all())
    if synthetic:
        idx = rng.integers(0, p, n_jobs) if n_jobs > p else rng.permutation(p)[:n_jobs]
        raw = np.concatenate([[0.0], np.cumsum(rng.exponential(1.0, n_jobs - 1))])
        return idx, raw, True
    order = np.lexsort((np.arange(p), created))
    gaps = np.diff(created[order])
    median_gap = float(np.median(gaps)) if gaps.size else 1.0
    gaps = np.where(gaps > max_gap_s, median_gap, gaps)
    # circular trace: the gap from the last pod back to the first is the median gap
    gaps = np.append(gaps, median_gap)
    start = int(rng.integers(0, p))
    pos = (start + np.arange(n_jobs)) % p
    idx = order[pos]
    step = gaps[(pos - 1) % p]
    step[0] = 0.0
    return idx, np.cumsum(step), False


def build_jobs(
    trace: PodTrace,
    fleet: DynFleet,
    rng: np.random.Generator,
    *,
    target_util: float = DEFAULT_TARGET_UTIL,
    n_jobs: int | None = None,
    comm_max: float = COMM_INTENSITY_MAX,
    data_catalog_gb: dict[str, float] | None = None,
    max_work_s: float | None = MAX_WORK_S,
    max_gap_s: float = MAX_GAP_S,
) -> DynJobs:
    """Turn a pod trace into a stream of dynamic-mode jobs (all randomness from ``rng``).

    Arrivals: the trace's pods sorted by ``creation_time`` form a circular sequence; the stream is
    ``n_jobs`` consecutive pods of it from a random start (wrapping around, so a stream longer than
    the trace replays it), with the trace's own inter-arrival gaps (gaps above ``max_gap_s`` and the
    wrap-around gap become the median gap). Traces without times get a Poisson process (unit-rate
    exponential gaps) over a random permutation (or, for ``n_jobs`` above the trace length, uniform
    draws) of the pods. All gaps are then multiplied by one factor so that :func:`offered_load`
    equals ``target_util`` (if even simultaneous arrival cannot reach it, arrivals collapse to
    time 0 and ``offered_load`` reports what was reached).

    Work: ``deletion_time - scheduled_time`` (s); pods never scheduled (no ``scheduled_time``) and
    traces without times draw it from the trace's observed works, else from a log-normal fitted to
    openb ``default``; floored at :data:`MIN_WORK_S` and capped at ``max_work_s``.

    Args:
        trace: a :class:`data.openb.PodTrace` (``data.openb.load_openb_trace``).
        fleet: the fleet (capacity for load scaling, ideal runtimes, data homes).
        rng: the random stream.
        target_util: offered GPU load over the arrival window (fraction of capacity, > 0).
        n_jobs: stream length (default: the trace length).
        comm_max: upper bound of the communication-intensity draw (``[0, 1)``).
        data_catalog_gb: dataset sizes to draw from (default :data:`DATASET_CATALOG_GB`).
        max_work_s: cap on a job's work in seconds (``None``: no cap).
        max_gap_s: longest trace inter-arrival gap kept as is (seconds of trace time).

    Raises:
        ConfigError: bad ``target_util``, ``comm_max`` or ``n_jobs``; DataError: empty trace.
    """
    if not target_util > 0:
        raise ConfigError(f"target_util must be > 0, got {target_util}")
    if not 0 <= comm_max < 1:
        raise ConfigError(f"comm_max must be within [0, 1), got {comm_max}")
    p = len(trace)
    if p == 0:
        raise DataError(f"trace {trace.name!r} has no pods")
    n = p if n_jobs is None else int(n_jobs)
    if n < 1:
        raise ConfigError(f"n_jobs must be >= 1, got {n_jobs}")
    # work (s) on the reference placement, per pod of the trace
    work_all = np.asarray(trace.deletion_time - trace.scheduled_time, dtype=np.float64)
    observed = np.isfinite(work_all) & (work_all > 0)
    fallback_all = ~observed
    if fallback_all.any():
        k = int(fallback_all.sum())
        if observed.any():
            work_all[fallback_all] = rng.choice(work_all[observed], size=k)
        else:
            work_all[fallback_all] = rng.lognormal(
                math.log(SYNTHETIC_DURATION_MEDIAN_S), SYNTHETIC_DURATION_SIGMA, k
            )
    work_all = np.maximum(work_all, MIN_WORK_S)
    if max_work_s is not None:
        work_all = np.minimum(work_all, float(max_work_s))
    idx, raw, synthetic = _arrival_stream(trace, rng, n, float(max_gap_s))
    work = work_all[idx]
    num_gpu = trace.num_gpu[idx].astype(np.int64)
    gpu_milli = trace.gpu_milli[idx].astype(np.int64)
    g = num_gpu * gpu_milli / GPU_MILLI
    scale = _scale_for_load(raw, work, g, float(fleet.gpu_capacity), float(target_util))
    arrival = raw * scale
    comm = np.where(num_gpu >= 2, rng.uniform(0.0, comm_max, n), 0.0)
    # data home: a cluster drawn in proportion to its GPU capacity
    cap = np.bincount(fleet.cluster, weights=fleet.num_gpu, minlength=fleet.n_clusters)
    cap = cap if cap.sum() > 0 else np.ones(fleet.n_clusters)
    data_home = rng.choice(fleet.n_clusters, size=n, p=cap / cap.sum())
    catalog = np.array(list((data_catalog_gb or DATASET_CATALOG_GB).values()), dtype=np.float64)
    data_gb = catalog[rng.integers(0, catalog.size, n)]
    cpu = trace.cpu_milli[idx].astype(np.int64)
    mem = trace.memory_mib[idx].astype(np.int64)
    spec = trace.gpu_spec_mask[idx].astype(np.int64)
    ideal = ideal_runtimes(fleet, work, cpu, mem, num_gpu, spec, comm)
    reached = offered_load(arrival, work, g, float(fleet.gpu_capacity))
    if reached < 0.99 * target_util:
        warnings.warn(
            f"offered load {reached:.2f} < target {target_util:.2f}: {n} jobs cannot load "
            f"{fleet.gpu_capacity} GPUs that much even arriving together; raise n_jobs or use "
            "fewer nodes",
            stacklevel=2,
        )
    return DynJobs(
        names=trace.pod_names[idx],
        arrival_s=arrival,
        work_s=work,
        cpu_milli=cpu,
        memory_mib=mem,
        num_gpu=num_gpu,
        gpu_milli=gpu_milli,
        gpu_spec_mask=spec,
        comm=comm,
        data_home=data_home.astype(np.int64),
        data_gb=data_gb,
        ideal_s=ideal,
        time_scale=float(scale),
        offered_load=reached,
        synthetic_arrivals=synthetic,
        n_duration_fallback=int(fallback_all[idx].sum()),
    )


# ---------------------------------------------------------------------------------------------
# Simulator
# ---------------------------------------------------------------------------------------------


class DynamicSim:
    """Event-driven simulator of one dynamic-mode run.

    Usage::

        sim = DynamicSim(fleet, jobs)
        while (j := sim.next_decision()) is not None:
            node, gpus = policy.select(sim, j)
            sim.place(j, node, gpus)
        sim.metrics()

    :meth:`next_decision` advances simulated time until some queued job can start: events at the
    same time are handled departures first, then arrivals; then the queue is scanned from its head,
    at most ``1 + backfill_depth`` jobs deep (a job that no node can host now is skipped, later
    jobs may start before it: backfilling without reservations). A job that fits on no node of the
    empty fleet is rejected on arrival.

    Args:
        fleet: the :class:`DynFleet`.
        jobs: the :class:`DynJobs` (sorted by arrival).
        backfill_depth: jobs behind the queue head that may start before it (0 = strict FIFO).
        priority: ``(N,)`` tie-break ranks for the node scorers (lower wins); ``None`` = index order.
    """

    def __init__(
        self,
        fleet: DynFleet,
        jobs: DynJobs,
        backfill_depth: int = DEFAULT_BACKFILL_DEPTH,
        priority: np.ndarray | None = None,
    ) -> None:
        if backfill_depth < 0:
            raise ConfigError(f"backfill_depth must be >= 0, got {backfill_depth}")
        self.fleet = fleet
        self.jobs = jobs
        self.backfill_depth = int(backfill_depth)
        self.state = fleet.cluster_state(priority)
        self._pods = [jobs.pod(j) for j in range(len(jobs))]
        # per-cluster GPU capacity (milli) for load features
        self.cluster_gpu_cap = (
            np.bincount(fleet.cluster, weights=fleet.num_gpu, minlength=fleet.n_clusters)
            * GPU_MILLI
        )
        self.reset()

    # ----------------------------------------------------------------- state
    def reset(self) -> None:
        """Empty fleet, no job arrived, time 0."""
        self.state.reset()
        j = len(self.jobs)
        self.now = 0.0
        self.status = np.zeros(j, dtype=np.int8)
        self.start_s = np.full(j, np.nan)
        self.end_s = np.full(j, np.nan)
        self.run_s = np.full(j, np.nan)
        self.data_s = np.zeros(j)
        self.node_of = np.full(j, -1, dtype=np.int64)
        self.gpus_of: list[np.ndarray | None] = [None] * j
        self.queue: list[int] = []
        self._departures: list[tuple[float, int]] = []
        self._next_arrival = 0
        self._released_nodes: list[int] = []
        self._checked_upto = [-1] * j
        self.cluster_alloc = np.zeros(self.fleet.n_clusters)
        self._alloc_area = 0.0
        self._last_t = 0.0
        self.n_decisions = 0
        self._ever_fit = np.isfinite(self.jobs.ideal_s)  # fits some node of the empty fleet

    @property
    def n_running(self) -> int:
        return len(self._departures)

    def pod(self, j: int) -> Pod:
        return self._pods[j]

    def feasible(self, j: int) -> np.ndarray:
        """``(N,)`` bool: nodes that can host job ``j`` now."""
        return self.state.feasible(self._pods[j])

    # ----------------------------------------------------------------- runtime model
    def data_time(self, j: int, cluster: np.ndarray | int) -> np.ndarray:
        """Seconds to fetch job ``j``'s dataset into ``cluster`` (0 when local)."""
        h = int(self.jobs.data_home[j])
        c = np.asarray(cluster)
        t = self.fleet.wan_rtt_s[h, c] + self.jobs.data_gb[j] / self.fleet.wan_gbps[h, c]
        return np.where(c == h, 0.0, t)

    def runtime(self, j: int, node: int, gpus: Sequence[int]) -> tuple[float, float]:
        """``(run_s, data_s)`` of job ``j`` on ``node`` with ``gpus``."""
        jb, fl = self.jobs, self.fleet
        k = int(jb.num_gpu[j])
        speed = float(fl.speed[node]) if k > 0 else 1.0
        if k >= 2:  # scalar form of runtime_factor
            c = float(jb.comm[j])
            f = (1.0 - c) / speed + c * REFERENCE_LINK_GBPS / bottleneck_gbps(fl, node, gpus)
        else:
            f = 1.0 / speed
        run = float(jb.work_s[j]) * f
        h, cl = int(jb.data_home[j]), int(fl.cluster[node])
        data = 0.0 if h == cl else float(fl.wan_rtt_s[h, cl] + jb.data_gb[j] / fl.wan_gbps[h, cl])
        return run, data

    def best_gpus(self, j: int, node: int) -> np.ndarray:
        """GPUs for job ``j`` on ``node``: the best-bottleneck idle set for ``k >= 2``, else
        :meth:`envs.core.ClusterState.choose_gpus` (tightest fit)."""
        pod = self._pods[j]
        if pod.num_gpu >= 2:
            bits = self.idle_bits(node)
            return np.array(
                best_bottleneck_set(self.fleet, node, bits, pod.num_gpu)[1], dtype=np.int64
            )
        return self.state.choose_gpus(pod, node)

    def idle_bits(self, node: int) -> int:
        idle = self.state.gpu_idle[node] == GPU_MILLI
        return int(np.dot(idle, 1 << np.arange(MAX_GPUS_PER_NODE)))

    # ----------------------------------------------------------------- events
    def _advance_clock(self, t: float) -> None:
        dt = t - self._last_t
        if dt > 0:
            a0, a1 = 0.0, float(self.jobs.arrival_s[-1]) if len(self.jobs) else 0.0
            lo, hi = max(self._last_t, a0), min(t, a1)
            if hi > lo:
                self._alloc_area += self.state.allocated_gpu_milli * (hi - lo)
        self._last_t = t
        self.now = t

    def _release(self, j: int) -> None:
        node = int(self.node_of[j])
        self.state.release(self._pods[j], node, self.gpus_of[j])
        self.cluster_alloc[self.fleet.cluster[node]] -= self._pods[j].gpu_request
        self.status[j] = DONE
        self._released_nodes.append(node)

    def _fits_node(self, j: int, n: int) -> bool:
        """Scalar feasibility of job ``j`` on node ``n`` (same rules as ``ClusterState.feasible``)."""
        pod, st = self._pods[j], self.state
        if st.cpu_free[n] < pod.cpu_milli or st.mem_free[n] < pod.memory_mib:
            return False
        if pod.num_gpu == 0:
            return True
        if st.num_gpu[n] == 0:
            return False
        if pod.gpu_spec_mask != ANY_GPU_MODEL and not (st.model_bit[n] & pod.gpu_spec_mask):
            return False
        idle = st.gpu_idle[n]
        if pod.num_gpu == 1:
            return bool(idle.max() >= max(pod.gpu_milli, 1))
        return int(np.count_nonzero(idle == GPU_MILLI)) >= pod.num_gpu

    def _can_start(self, j: int) -> bool:
        """Whether job ``j`` fits some node now.

        Placements only take resources away, so a job found infeasible stays infeasible until a
        node is released, and then only that node can have become feasible: after the first full
        check, only the nodes released since the job's last check are tested.
        """
        upto = self._checked_upto[j]
        now = len(self._released_nodes)
        if upto == now:
            return False
        if upto < 0:
            ok = bool(self.state.feasible(self._pods[j]).any())
        else:
            ok = any(self._fits_node(j, n) for n in set(self._released_nodes[upto:now]))
        if not ok:
            self._checked_upto[j] = now
        return ok

    def _scan_queue(self) -> int | None:
        depth = 1 + self.backfill_depth
        for pos, j in enumerate(self.queue):
            if pos >= depth:
                break
            if self._can_start(j):
                return j
        return None

    def next_decision(self) -> int | None:
        """Advance to the next job that can start now and return its index; ``None`` when all done.

        Jobs still queued when nothing is running and nothing will arrive stay unplaced (cannot
        happen for jobs that fit the empty fleet).
        """
        jb = self.jobs
        while True:
            j = self._scan_queue()
            if j is not None:
                return j
            t_arr = jb.arrival_s[self._next_arrival] if self._next_arrival < len(jb) else math.inf
            t_dep = self._departures[0][0] if self._departures else math.inf
            t = min(t_arr, t_dep)
            if not math.isfinite(t):
                return None
            self._advance_clock(t)
            while self._departures and self._departures[0][0] <= t:
                _, d = heapq.heappop(self._departures)
                self._release(d)
            while self._next_arrival < len(jb) and jb.arrival_s[self._next_arrival] <= t:
                a = self._next_arrival
                self._next_arrival += 1
                if self._ever_fit[a]:
                    self.status[a] = QUEUED
                    self.queue.append(a)
                else:
                    self.status[a] = REJECTED

    def place(self, j: int, node: int, gpus: Sequence[int] | np.ndarray | None = None) -> None:
        """Start queued job ``j`` now on ``node`` with ``gpus`` (``None``: :meth:`best_gpus`).

        Raises:
            ValueError: ``j`` is not queued; envs.core.PlacementError: the node cannot host it.
        """
        if self.status[j] != QUEUED:
            raise ValueError(f"job {j} is not queued (status {int(self.status[j])})")
        if gpus is None:
            gpus = self.best_gpus(j, node)
        g = self.state.place(self._pods[j], int(node), gpus)
        run, data = self.runtime(j, int(node), g)
        self.queue.remove(j)
        self.status[j] = RUNNING
        self.node_of[j] = int(node)
        self.gpus_of[j] = g
        self.start_s[j] = self.now
        self.run_s[j] = run
        self.data_s[j] = data
        self.end_s[j] = self.now + data + run
        self.cluster_alloc[self.fleet.cluster[int(node)]] += self._pods[j].gpu_request
        heapq.heappush(self._departures, (float(self.end_s[j]), j))
        self.n_decisions += 1

    def run(self, policy: DynamicPolicy) -> dict[str, float]:
        """Run to completion with ``policy``; returns :meth:`metrics` plus ``policy_s``."""
        if hasattr(policy, "reset"):
            policy.reset(self)
        spent = 0.0
        while (j := self.next_decision()) is not None:
            t0 = time.perf_counter()
            node, gpus = policy.select(self, j)
            spent += time.perf_counter() - t0
            self.place(j, node, gpus)
        out = self.metrics()
        out["policy_s"] = spent
        out["ms_per_decision"] = 1000.0 * spent / max(self.n_decisions, 1)
        return out

    # ----------------------------------------------------------------- metrics
    def metrics(self) -> dict[str, float]:
        """Metrics over the jobs that completed (or started: their end time is known).

        ``jct = end - arrival``; ``slowdown = jct / ideal``; ``queue_delay = start - arrival``;
        ``gpu_allocation_ratio`` = time average of allocated GPU milli / capacity over the arrival
        window ``[0, last arrival]``.
        """
        jb = self.jobs
        started = np.isfinite(self.start_s)
        jct = self.end_s[started] - jb.arrival_s[started]
        qd = self.start_s[started] - jb.arrival_s[started]
        sd = jct / jb.ideal_s[started]
        span = float(jb.arrival_s[-1]) if len(jb) else 0.0
        cap = float(self.state.gpu_capacity_milli)
        alloc = self._alloc_area / (cap * span) if span > 0 and cap > 0 else float("nan")
        remote = self.data_s[started] > 0

        def pct(x: np.ndarray, q: float) -> float:
            return float(np.percentile(x, q)) if x.size else float("nan")

        def mean(x: np.ndarray) -> float:
            return float(x.mean()) if x.size else float("nan")

        return {
            "mean_jct_s": mean(jct),
            "p99_jct_s": pct(jct, 99),
            "mean_slowdown": mean(sd),
            "p99_slowdown": pct(sd, 99),
            "mean_queue_delay_s": mean(qd),
            "p99_queue_delay_s": pct(qd, 99),
            "gpu_allocation_ratio": alloc,
            "mean_run_slowdown": mean(self.run_s[started] / jb.ideal_s[started]),
            "remote_data_frac": mean(remote.astype(float)),
            "n_jobs": int(len(jb)),
            "n_started": int(started.sum()),
            "n_rejected": int((self.status == REJECTED).sum()),
            "n_unplaced": int((self.status == QUEUED).sum() + (self.status == FUTURE).sum()),
            "makespan_s": float(np.nanmax(self.end_s)) if started.any() else 0.0,
        }


# ---------------------------------------------------------------------------------------------
# Policies
# ---------------------------------------------------------------------------------------------


def estimate_completion(
    sim: DynamicSim, j: int, nodes: np.ndarray, with_gpus: bool = True
) -> tuple[np.ndarray, list[np.ndarray | None]]:
    """Estimated seconds from now to completion of job ``j`` on each of ``nodes`` if started now.

    ``data transfer (0 when local) + work * runtime_factor`` with the node's best-bottleneck idle GPU
    set for multi-GPU jobs (``with_gpus=False``: the node's best set when all its GPUs were idle,
    cheaper, an optimistic estimate).

    Returns:
        ``(len(nodes),)`` seconds and the GPU set assumed per node (``None`` for jobs of < 2 GPUs,
        and for ``with_gpus=False``).
    """
    jb = sim.jobs
    fleet = sim.fleet
    nodes = np.asarray(nodes, dtype=np.int64)
    k = int(jb.num_gpu[j])
    speed = fleet.speed[nodes] if k > 0 else np.ones(nodes.size)
    gpus: list[np.ndarray | None] = [None] * nodes.size
    if k >= 2 and with_gpus:
        sets = [best_bottleneck_set(fleet, int(n), sim.idle_bits(int(n)), k) for n in nodes]
        bw = np.array([s[0] for s in sets], dtype=np.float64)
        gpus = [np.array(s[1], dtype=np.int64) for s in sets]
    elif k >= 2:
        bw = np.array(
            [
                best_bottleneck_set(fleet, int(n), (1 << int(fleet.num_gpu[n])) - 1, k)[0]
                for n in nodes
            ],
            dtype=np.float64,
        )
    else:
        bw = np.full(nodes.size, np.inf)
    run = jb.work_s[j] * runtime_factor(speed, bw, k, jb.comm[j])
    data = sim.data_time(j, fleet.cluster[nodes])
    return run + data, gpus


class DynamicPolicy(Protocol):
    """A dynamic-mode placement policy."""

    name: str

    def select(self, sim: DynamicSim, j: int) -> tuple[int, np.ndarray | None]:
        """Node and GPUs (``None``: the simulator's :meth:`DynamicSim.best_gpus`) for queued job ``j``."""
        ...


class NodeScorerPolicy:
    """Applies a single-cluster policy of :mod:`envs.policies` to the whole multi-cluster fleet.

    The fleet's nodes form one :class:`envs.core.ClusterState`, so the policy scores every feasible
    node of every cluster exactly as it would in one big cluster: it ignores clusters, WAN, data
    location, GPU speed and (except TopologyBestEffort's GPU choice) link speeds. Its node and GPU
    choice are used as given. Ties go to the seeded node priority of the simulator's state.

    Args:
        policy: an :class:`envs.policies.Policy` (``reset(state, rng=, trace=)``,
            ``select(state, pod) -> (node, gpus)``).
        trace: the original trace (FGD's typical pods).
        seed: seed of the policy's own random stream (Random's choices).
        name: report name (default: the policy's ``name``).
    """

    def __init__(
        self, policy: Any, trace: PodTrace | None, seed: int, name: str | None = None
    ) -> None:
        self.policy = policy
        self.trace = trace
        self.seed = seed
        self.name = name or getattr(policy, "name", type(policy).__name__)

    def reset(self, sim: DynamicSim) -> None:
        """Bind to ``sim``'s state (called by :meth:`DynamicSim.run`)."""
        if hasattr(self.policy, "reset"):
            self.policy.reset(sim.state, rng=np.random.default_rng(self.seed), trace=self.trace)

    def select(self, sim: DynamicSim, j: int) -> tuple[int, np.ndarray | None]:
        out = self.policy.select(sim.state, sim.pod(j))
        node, gpus = (out[0], out[1]) if isinstance(out, tuple) else (out, None)
        if gpus is None:
            gpus = sim.state.choose_gpus(sim.pod(j), int(node))
        return int(node), np.asarray(gpus, dtype=np.int64)


class LocalityAwarePolicy:
    """FleetMind's locality- and topology-aware baseline: FGD's packing, then earliest completion.

    For every feasible node, the job's time to completion if started there now is estimated
    (:func:`estimate_completion`: data transfer, 0 when the node's cluster is the dataset's home,
    plus runtime with the node's best-bottleneck GPU set).

    * ``order="fit-first"`` (default): keep the nodes with the best FGD score (fragmentation
      decrease over the trace's typical pods, :class:`envs.policies.FGD`), then those within
      ``1 + rel_tol`` of the smallest estimate among them; ties go to the state's node priority.
    * ``order="speed-first"``: keep the nodes within ``1 + rel_tol`` of the smallest estimate, then
      the best FGD score among them; ties by priority.

    A k-GPU job gets the node's best-bottleneck idle set, a sharing job the packer's GPU.

    Args:
        rel_tol: relative slack on the estimate (0.05 = within 5 % counts as equal).
        packer: ``"fgd"`` or ``"bestfit"`` (the fit score).
        trace: the original trace (FGD's typical pods); without it the packer is BestFit.
        order: ``"fit-first"`` or ``"speed-first"``.
    """

    name = "LocalityAware"

    def __init__(
        self,
        rel_tol: float = 0.05,
        packer: str = "fgd",
        trace: PodTrace | None = None,
        order: str = "fit-first",
    ) -> None:
        from fleetmind.envs import policies as pol

        if packer not in ("fgd", "bestfit"):
            raise ConfigError(f"packer must be 'fgd' or 'bestfit', got {packer!r}")
        if packer == "fgd" and trace is None:
            packer = "bestfit"
        if order not in ("fit-first", "speed-first"):
            raise ConfigError(f"order must be 'fit-first' or 'speed-first', got {order!r}")
        self.order = order
        self.rel_tol = rel_tol
        self.packer = packer
        self.trace = trace
        self._inner = pol.FGD() if packer == "fgd" else pol.BestFit()

    def reset(self, sim: DynamicSim) -> None:
        """Bind the packer to ``sim``'s state (called by :meth:`DynamicSim.run`)."""
        self._inner.reset(sim.state, trace=self.trace)

    def estimates(
        self, sim: DynamicSim, j: int, nodes: np.ndarray
    ) -> tuple[np.ndarray, list[np.ndarray | None]]:
        """See :func:`estimate_completion`."""
        return estimate_completion(sim, j, nodes)

    def select(self, sim: DynamicSim, j: int) -> tuple[int, np.ndarray | None]:
        mask = sim.feasible(j)
        nodes = np.flatnonzero(mask)
        pod = sim.pod(j)
        est, gpus = self.estimates(sim, j, nodes)
        if self.order == "fit-first":
            scores = self._inner.score(sim.state, pod, mask)[nodes]
            best = scores == scores.max()
            ratio = est / est[best].min()
            cand = best & (ratio <= 1 + self.rel_tol)
        else:
            cand = est <= est.min() * (1 + self.rel_tol)
            sub = np.zeros_like(mask)
            sub[nodes[cand]] = True
            scores = self._inner.score(sim.state, pod, sub)[nodes]
            cand &= scores == scores[cand].max()
        idx = np.flatnonzero(cand)
        i = int(idx[np.argmin(sim.state.priority[nodes[idx]])])
        node = int(nodes[i])
        g = gpus[i]
        if g is None:
            g = self._inner.choose_gpus(sim.state, pod, node)
        return node, g


HEURISTIC_NAMES = (
    "Random",
    "DotProd",
    "GpuClustering",
    "GpuPacking",
    "BestFit",
    "FGD",
    "TopologyBestEffort",
)
"""Names of the :mod:`envs.policies` heuristics evaluated in dynamic mode."""

OWN_POLICIES: dict[str, Callable[..., DynamicPolicy]] = {"LocalityAware": LocalityAwarePolicy}
"""Dynamic-mode policies defined here."""


def available_policies() -> list[str]:
    """Policy names :func:`make_policy` accepts (the heuristics that exist, then ours)."""
    from fleetmind.envs import policies as pol

    return [n for n in HEURISTIC_NAMES if n in pol.POLICIES] + list(OWN_POLICIES)


def make_policy(name: str, trace: PodTrace | None, fleet: DynFleet, seed: int) -> DynamicPolicy:
    """A dynamic-mode policy by name: a heuristic of :mod:`envs.policies` (via
    :class:`NodeScorerPolicy`) or one of :data:`OWN_POLICIES`.

    Raises:
        ConfigError: unknown policy name.
    """
    own = {k.lower(): v for k, v in OWN_POLICIES.items()}
    if name.replace("_", "").replace("-", "").lower() in own:
        return own[name.replace("_", "").replace("-", "").lower()](trace=trace)
    from fleetmind.envs import policies as pol

    try:
        canonical = pol.canonical_policy_name(name)
    except ConfigError:
        raise ConfigError(
            f"unknown policy {name!r}; known: {', '.join(available_policies())}"
        ) from None
    import inspect

    factory = pol.POLICIES[canonical]
    params = inspect.signature(factory).parameters
    kw: dict[str, Any] = {}
    if "seed" in params:
        kw["seed"] = seed
    if "templates" in params and fleet.templates is not None:
        kw["templates"] = [
            t if int(g) > 0 else None for t, g in zip(fleet.templates, fleet.num_gpu, strict=True)
        ]
    return NodeScorerPolicy(factory(**kw), trace, seed, canonical)


# ---------------------------------------------------------------------------------------------
# Evaluation
# ---------------------------------------------------------------------------------------------

METRIC_KEYS = (
    "mean_jct_s",
    "p99_jct_s",
    "mean_slowdown",
    "p99_queue_delay_s",
    "gpu_allocation_ratio",
    "ms_per_decision",
)


def evaluate_dynamic(
    trace: str | PodTrace,
    policies: Sequence[str] | None = None,
    seeds: Sequence[int] = (42, 43, 44),
    *,
    fleet: str | DynFleet | Any = "openb",
    n_clusters: int = 3,
    node_fraction: float = DEFAULT_NODE_FRACTION,
    target_util: float = DEFAULT_TARGET_UTIL,
    n_jobs: int | None = None,
    backfill_depth: int = DEFAULT_BACKFILL_DEPTH,
    max_work_s: float | None = MAX_WORK_S,
    speed_basis: str = DEFAULT_SPEED_BASIS,
    progress: Callable[[str], None] | None = None,
) -> dict[str, dict[str, Any]]:
    """Every policy on the same dynamic-mode jobs, per seed.

    For each seed the jobs are built once (:func:`build_jobs` with ``numpy.random.default_rng(seed)``)
    and the node tie-break priority is a permutation from the same stream; every policy sees the
    same jobs and priority, and its own random stream (Random's choices) is seeded with the seed.

    Args:
        trace: openb trace name or path, or a :class:`data.openb.PodTrace`.
        policies: names (default: :func:`available_policies`).
        seeds: seeds.
        fleet: ``"openb"`` (openb GPU nodes in ``n_clusters`` clusters), a YAML path, a
            :class:`DynFleet` or a :class:`data.fleet.Fleet`.
        n_clusters: clusters of the openb fleet.
        node_fraction: stratified share of the fleet's nodes kept (:meth:`DynFleet.sample`, seed 0;
            1.0 keeps all).
        target_util: offered GPU load (see :func:`build_jobs`).
        n_jobs: jobs per run (default: the trace length).
        backfill_depth: see :class:`DynamicSim`.
        max_work_s: cap on a job's work (s).
        speed_basis: ``"fp16"`` or ``"fp32"`` GPU speeds.
        progress: optional callback called with ``"<policy> seed <s>"`` after each run.

    Returns:
        ``{policy: {"mean_jct_s", "p99_jct_s", "mean_slowdown", "p99_queue_delay_s",
        "gpu_allocation_ratio", "ms_per_decision", "p99_slowdown", "mean_queue_delay_s",
        "remote_data_frac", "mean_run_slowdown" (means over seeds), "n_rejected", "per_seed":
        {metric: [one value per seed]}}}``.

    Raises:
        ConfigError: unknown policy or bad option; DataError: unreadable trace or fleet.
    """
    from fleetmind.data.openb import load_openb_trace

    tr = trace if isinstance(trace, PodTrace) else load_openb_trace(trace)
    names = list(policies) if policies else available_policies()
    fl = load_dynamic_fleet(fleet, n_clusters, speed_basis)
    if node_fraction < 1:
        fl = fl.sample(node_fraction)
    for name in names:  # fail early on a bad name
        make_policy(name, tr, fl, 0)
    per_seed: dict[str, list[dict[str, float]]] = {n: [] for n in names}
    for seed in seeds:
        rng = np.random.default_rng(seed)
        jobs = build_jobs(
            tr, fl, rng, target_util=target_util, n_jobs=n_jobs, max_work_s=max_work_s
        )
        priority = np.argsort(rng.permutation(fl.n_nodes))
        for name in names:
            policy = make_policy(name, tr, fl, seed)
            sim = DynamicSim(fl, jobs, backfill_depth=backfill_depth, priority=priority)
            m = sim.run(policy)
            m["time_scale"] = jobs.time_scale
            m["offered_load"] = jobs.offered_load
            per_seed[name].append(m)
            if progress is not None:
                progress(f"{name} seed {seed}")
    extra = ("p99_slowdown", "mean_queue_delay_s", "remote_data_frac", "mean_run_slowdown")
    results: dict[str, dict[str, Any]] = {}
    for name in names:
        rows = per_seed[name]
        entry: dict[str, Any] = {
            k: float(np.mean([r[k] for r in rows])) for k in (*METRIC_KEYS, *extra)
        }
        entry["n_rejected"] = int(round(float(np.mean([r["n_rejected"] for r in rows]))))
        entry["per_seed"] = {
            k: [float(r[k]) for r in rows]
            for k in (*METRIC_KEYS, *extra, "n_started", "offered_load")
        }
        results[name] = entry
    return results


def dynamic_setup(fleet: DynFleet, jobs: DynJobs, **kw: Any) -> dict[str, Any]:
    """A JSON-able description of a dynamic-mode run's fleet and job stream (for reports)."""
    return {
        "nodes": fleet.n_nodes,
        "gpus": fleet.gpu_capacity,
        "clusters": [
            {"name": c, "region": r, "gpus": int(fleet.num_gpu[fleet.cluster == i].sum())}
            for i, (c, r) in enumerate(zip(fleet.cluster_names, fleet.regions, strict=True))
        ],
        "jobs": len(jobs),
        "offered_load": jobs.offered_load,
        "time_scale": jobs.time_scale,
        "arrival_span_s": float(jobs.arrival_s[-1]) if len(jobs) else 0.0,
        **kw,
    }


__all__ = [
    "COMM_INTENSITY_MAX",
    "DATASET_CATALOG_GB",
    "DEFAULT_BACKFILL_DEPTH",
    "DEFAULT_NODE_FRACTION",
    "DEFAULT_SPEED_BASIS",
    "DEFAULT_TARGET_UTIL",
    "GPU_TFLOPS",
    "HEURISTIC_NAMES",
    "MAX_WORK_S",
    "REFERENCE_LINK_GBPS",
    "DynFleet",
    "DynJobs",
    "DynamicPolicy",
    "DynamicSim",
    "LocalityAwarePolicy",
    "NodeScorerPolicy",
    "available_policies",
    "best_bottleneck_set",
    "bottleneck_gbps",
    "build_jobs",
    "dynamic_setup",
    "estimate_completion",
    "evaluate_dynamic",
    "gpu_speed",
    "ideal_runtimes",
    "load_dynamic_fleet",
    "make_policy",
    "offered_load",
    "runtime_factor",
]
