"""Candidate placements and their features: the observation of the learned placement agent.

Each decision proposes up to ``K`` candidate placements (a node plus the GPUs the pod would use there)
and describes each with the same ``F`` features, plus ``G`` features of the pod and the cluster. The
observation is flat: ``K`` rows of ``F`` features (row-major, row ``k`` = candidate ``k``) followed by the
``G`` globals; padding rows are all zero and masked out. Every env of this project that a learned
placement agent acts in (``fleetmind/GpuPlacement-v0``, ``fleetmind/MultiClusterPlacement-v0``) uses
this convention and exposes ``n_candidates``, ``n_cand_features``, ``n_global_features`` and
``action_masks() -> (K,) bool``.

Candidate set (deterministic: a pure function of the cluster state, the pod and the arrived workload):
the top ``n_fgd`` nodes in FGD's order (integer FGD score, ties by node priority, i.e. FGD's own choice
first), then the top nodes of BestFit, GpuPacking, GpuClustering and DotProd (each with its own
tie-breaking by priority), then the next nodes in FGD order until ``K`` distinct nodes are listed or the
feasible nodes run out. The GPUs used on a node are FGD's choice there (a sharing pod's best-scoring GPU;
the lowest-index fully idle GPUs for whole-GPU pods), so FGD's decision is always candidate 0 and the
agent can always reproduce FGD exactly.

Candidate features (``F = 18``), all scaled to roughly [-1, 1]:

| idx | feature | scale |
| --- | --- | --- |
| 0 | valid (1 real candidate, 0 padding) | - |
| 1 | is FGD's choice | - |
| 2 | FGD fragmentation decrease ``F_now - F_after`` | ``tanh(delta / 1000 milli-GPU)`` |
| 3 | FGD integer score | / 100 |
| 4 | rank in FGD order among feasible nodes | / (n_feasible - 1) |
| 5 | is BestFit's choice | - |
| 6 | BestFit normalised score | / 100 |
| 7 | GpuPacking score | / 100 |
| 8 | GpuClustering score | / 100 |
| 9 | node tie-break priority rank (lower wins ties) | / N |
| 10 | node GPU used fraction before placing | 0..1 |
| 11 | node GPU used fraction after placing | 0..1 |
| 12 | node free CPU fraction after placing | 0..1 |
| 13 | node free memory fraction after placing | 0..1 |
| 14 | node GPU count | / 8 |
| 15 | node fragmentation ``F_n`` now | / 8000 milli-GPU |
| 16 | idle milli left on the chosen GPU (sharing pods; 0 otherwise) | / 1000 |
| 17 | fully idle GPUs on the node after placing | / 8 |

Optional penalty features (``CandidateBuilder(penalty_features=True)``, ``F = 20``): the two
signals the released teacher subtracts by hand (``rl.teacher.StrandPenaltyScorer``), as candidate
features so that a network can learn their weight from the reward instead of from a teacher:

| idx | feature | scale |
| --- | --- | --- |
| 18 | change in host-stranded GPUs on the node if the pod goes there (:func:`stranding_deltas` at the
workload's typical CPU and memory per milli-GPU) | GPUs / 8 |
| 19 | for a GPU pod without a ``gpu_spec``: its GPUs x the restricted pods' demand / capacity of the
node's GPU model (:func:`restricted_model_scarcity`); 0 otherwise | / 4 |

The workload statistics behind both (:class:`PenaltyContext`) come from the trace given to
:meth:`CandidateBuilder.reset` (or are given explicitly, e.g. saved with a model for the service).

Global features (``G = 10``): pod per-GPU milli / 1000, pod GPU count / 8, pod CPU / 32000 milli,
pod memory / 65536 MiB, is sharing, is CPU-only, arrived GPU request / (1.3 x capacity), allocated GPU /
capacity, feasible nodes / N, cluster fragmentation ``sum_n F_n`` / capacity.

Topology/link features: the openb node list has no GPU interconnect data, so fgd mode has none; the
dynamic-mode env adds its own.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from fleetmind.data.openb import ANY_GPU_MODEL, GPU_MILLI, PodTrace
from fleetmind.envs.core import MAX_GPUS_PER_NODE, ClusterState, NodeStats, Pod
from fleetmind.envs.policies import FGD, TypicalPods, fgd_score_from_delta
from fleetmind.envs.policies.scores import (
    bestfit_raw_at,
    dotprod_scores_at,
    gpu_clustering_scores_at,
    gpu_packing_scores_at,
    heuristic_scores_one,
    minmax_normalise,
)

N_CAND_FEATURES = 18
N_PENALTY_FEATURES = 2
"""Candidate features appended by ``penalty_features=True`` (columns 18 and 19)."""
STRAND_FEATURE_SCALE = 8.0
"""Column 18 is the stranding delta in GPUs divided by this."""
SCARCITY_FEATURE_SCALE = 4.0
"""Column 19 is the model-scarcity penalty divided by this."""
N_GLOBAL_FEATURES = 10
DEFAULT_N_CANDIDATES = 16
OBS_LOW, OBS_HIGH = -1.0, 4.0
"""Observation bounds (features are clipped to them)."""

CAND_FEATURE_NAMES = (
    "valid",
    "is_fgd_choice",
    "fgd_delta",
    "fgd_score",
    "fgd_rank",
    "is_bestfit_choice",
    "bestfit_score",
    "packing_score",
    "clustering_score",
    "priority_rank",
    "gpu_used_before",
    "gpu_used_after",
    "cpu_free_after",
    "mem_free_after",
    "num_gpu",
    "node_frag",
    "chosen_gpu_left",
    "full_idle_after",
)
PENALTY_FEATURE_NAMES = ("host_stranding_delta", "model_scarcity")
GLOBAL_FEATURE_NAMES = (
    "pod_gpu_milli",
    "pod_num_gpu",
    "pod_cpu",
    "pod_mem",
    "is_sharing",
    "is_cpu_only",
    "arrived",
    "allocated",
    "n_feasible",
    "cluster_frag",
)


def pod_shape_features(pod: Pod) -> tuple[float, float, float, float, float, float]:
    """The 6 pod-shape globals shared by every placement env's observation: per-GPU milli / 1000,
    GPU count / 8, CPU / 32,000 milli, memory / 65,536 MiB, is sharing, is CPU-only."""
    return (
        pod.gpu_milli / GPU_MILLI,
        pod.num_gpu / MAX_GPUS_PER_NODE,
        pod.cpu_milli / 32000.0,
        pod.memory_mib / 65536.0,
        float(pod.is_sharing),
        float(pod.num_gpu == 0),
    )


def host_demand_per_gpu_milli(pods: PodTrace | Any) -> tuple[float, float]:
    """``(mCPU, MiB)`` the GPU pods ask for per milli-GPU they request (totals over the GPU pods;
    ``(0, 0)`` without GPU pods): the typical host demand beside one milli-GPU. ``pods`` is a
    :class:`PodTrace` or anything with its ``(P,)`` arrays ``cpu_milli``, ``memory_mib``,
    ``num_gpu`` and ``gpu_milli`` (e.g. a dynamic-mode job stream)."""
    req = pods.num_gpu * pods.gpu_milli
    sel = req > 0
    total = float(req[sel].sum())
    if total == 0:
        return 0.0, 0.0
    return float(pods.cpu_milli[sel].sum() / total), float(pods.memory_mib[sel].sum() / total)


def stranded_gpu_milli(
    idle_milli: np.ndarray,
    cpu_free: np.ndarray,
    mem_free: np.ndarray,
    cpu_per_milli: float,
    mem_per_milli: float,
) -> np.ndarray:
    """Idle GPU milli of each node that its free CPU and memory cannot serve at the typical host
    demand per milli-GPU: ``max(0, idle - min(cpu_free / cpu_per_milli, mem_free / mem_per_milli))``.

    All arguments broadcast (``(S,)`` arrays of node states); a zero demand never strands. This is
    the host-induced loss that ``envs.failure_causes`` finds behind most failed GPU requests.
    """
    big = np.float64(1e18)
    cpu = np.maximum(np.asarray(cpu_free, dtype=np.float64), 0.0)
    mem = np.maximum(np.asarray(mem_free, dtype=np.float64), 0.0)
    by_cpu = cpu / cpu_per_milli if cpu_per_milli > 0 else np.full_like(cpu, big)
    by_mem = mem / mem_per_milli if mem_per_milli > 0 else np.full_like(mem, big)
    return np.maximum(np.asarray(idle_milli, dtype=np.float64) - np.minimum(by_cpu, by_mem), 0.0)


def stranding_deltas(
    state: ClusterState, pod: Pod, nodes: np.ndarray, cpu_per_milli: float, mem_per_milli: float
) -> np.ndarray:
    """``(S,)`` float64: GPUs (1000 milli) left stranded by host resources on each of ``nodes`` if
    ``pod`` went there, minus those stranded there now (:func:`stranded_gpu_milli` at the given
    typical demand per milli-GPU)."""
    idle = state.gpu_idle.take(nodes, axis=0).sum(axis=1)
    cpu, mem = state.cpu_free.take(nodes), state.mem_free.take(nodes)
    before = stranded_gpu_milli(idle, cpu, mem, cpu_per_milli, mem_per_milli)
    after = stranded_gpu_milli(
        idle - pod.gpu_request,
        cpu - pod.cpu_milli,
        mem - pod.memory_mib,
        cpu_per_milli,
        mem_per_milli,
    )
    return (after - before) / 1000.0


def restricted_model_scarcity(trace: PodTrace, state: ClusterState) -> np.ndarray:
    """``(M,)`` per GPU model id: the GPU request of the trace's model-restricted pods, each
    spread over its allowed models in proportion to their capacity in ``state``, divided by the
    model's capacity (both in milli-GPU). 0 for models without GPUs or without restricted demand;
    ``M`` = the largest model id in ``state`` + 1. Above 1, restricted pods alone ask for more than
    the model has."""
    n_models = int(state.model_id.max()) + 1 if state.n_nodes else 0
    cap = np.zeros(max(n_models, 0))
    present = state.model_id >= 0
    np.add.at(cap, state.model_id[present], state.num_gpu[present] * GPU_MILLI)
    demand = np.zeros_like(cap)
    req = trace.gpu_request
    restricted = (req > 0) & (trace.gpu_spec_mask != ANY_GPU_MODEL)
    if n_models == 0 or not restricted.any():
        return demand
    bits = np.arange(n_models)
    masks, inverse = np.unique(trace.gpu_spec_mask[restricted], return_inverse=True)
    totals = np.bincount(inverse, weights=req[restricted].astype(np.float64))
    for mask, total in zip(masks.tolist(), totals.tolist(), strict=True):
        share = cap * (((mask >> bits) & 1).astype(bool))
        if share.sum() > 0:
            demand += total * share / share.sum()
    return np.divide(demand, cap, out=np.zeros_like(cap), where=cap > 0)


@dataclass(frozen=True)
class PenaltyContext:
    """Workload statistics behind the penalty features.

    Attributes:
        cpu_per_milli: typical mCPU a GPU pod asks for per milli-GPU (:func:`host_demand_per_gpu_milli`).
        mem_per_milli: typical MiB per milli-GPU.
        scarcity: ``(M,)`` per GPU model id, restricted demand / capacity
            (:func:`restricted_model_scarcity`).
    """

    cpu_per_milli: float
    mem_per_milli: float
    scarcity: np.ndarray

    @classmethod
    def from_trace(
        cls, trace: PodTrace, state: ClusterState, workload_scale: float = 1.3
    ) -> PenaltyContext:
        """The context of ``trace``'s pods on ``state``'s nodes, for a workload whose GPU request
        totals ``workload_scale`` x the cluster's GPU capacity (fgd mode resamples every trace to
        1.3x): the scarcity is rescaled from the trace's own total to that one, so it does not
        depend on how many pods the trace file happens to hold."""
        cpu, mem = host_demand_per_gpu_milli(trace)
        scarcity = restricted_model_scarcity(trace, state)
        total = float(trace.gpu_request.sum())
        if total > 0:
            scarcity = scarcity * (workload_scale * state.gpu_capacity_milli / total)
        return cls(cpu, mem, scarcity)

    def to_json(self) -> dict[str, Any]:
        """A JSON-able dict (stored in a model's ``metadata.json`` for the service)."""
        return {
            "cpu_per_milli": self.cpu_per_milli,
            "mem_per_milli": self.mem_per_milli,
            "scarcity": [float(x) for x in self.scarcity],
        }

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> PenaltyContext:
        """Inverse of :meth:`to_json`; ``ValueError`` on a malformed dict."""
        try:
            sc = np.asarray(d["scarcity"], dtype=np.float64).reshape(-1)
            ctx = cls(float(d["cpu_per_milli"]), float(d["mem_per_milli"]), sc)
        except (KeyError, TypeError, ValueError) as e:
            raise ValueError(f"malformed penalty context: {e}") from e
        if not (
            np.isfinite(sc).all() and np.isfinite([ctx.cpu_per_milli, ctx.mem_per_milli]).all()
        ):
            raise ValueError("malformed penalty context: non-finite values")
        return ctx


def model_scarcity_penalties(
    state: ClusterState, pod: Pod, nodes: np.ndarray, scarcity: np.ndarray
) -> np.ndarray:
    """``(S,)`` float64: for a GPU pod without a ``gpu_spec``, its request in GPUs times the
    scarcity of each of ``nodes``' GPU model; 0 for other pods and for models outside
    ``scarcity``."""
    out = np.zeros(len(nodes))
    if pod.num_gpu == 0 or pod.gpu_spec_mask != ANY_GPU_MODEL or not scarcity.any():
        return out
    models = state.model_id.take(nodes)
    known = (models >= 0) & (models < scarcity.size)
    out[known] = scarcity.take(models[known])
    return out * (pod.gpu_request / 1000.0)


@dataclass
class Candidates:
    """One decision's candidates.

    Attributes:
        obs: ``(K*F + G,)`` float32 observation.
        mask: ``(K,)`` bool, real candidates.
        nodes: ``(K,)`` int64 node index per candidate (-1 for padding).
        gpus: list of ``K`` int64 arrays, the GPUs each candidate uses (empty for padding/CPU-only).
    """

    obs: np.ndarray
    mask: np.ndarray
    nodes: np.ndarray
    gpus: list[np.ndarray]


_KEY_MAX = np.iinfo(np.int64).max
_STATIC_COLS = [9, 14]
"""Candidate feature columns that depend only on the node (priority rank / N, GPUs / 8)."""


def _top(order_scores: np.ndarray, priority: np.ndarray, k: int) -> np.ndarray:
    """Positions of the ``k`` best entries: highest score, ties to the lowest priority rank.

    The reference definition of the candidate order (ties between equal priorities go to the
    lower position); :meth:`CandidateBuilder.build` gets the same positions from one integer key
    per node (:func:`_top_keys`).
    """
    if order_scores.size <= k:
        return np.lexsort((priority, -order_scores))
    # cheap pre-selection: everything scoring at least the k-th best score
    kth = np.partition(order_scores, order_scores.size - k)[order_scores.size - k]
    pos = np.flatnonzero(order_scores >= kth)
    return pos[np.lexsort((priority[pos], -order_scores[pos]))][:k]


def _top_keys(key: np.ndarray, k: int) -> list[int]:
    """Positions of the ``k`` smallest entries of ``key`` (distinct integers), smallest first.
    ``key`` is overwritten (pass a temporary).

    With ``key = -score * N + rank`` (``rank`` a permutation of ``0..N-1`` that orders the nodes by
    priority, then index) this is :func:`_top` of ``score``: highest score first, ties by priority.
    """
    if k <= 0:
        return []
    if key.size <= k:
        return key.argsort().tolist()
    if k <= 4:  # a few argmin passes beat a partition on ~1,000 entries
        out = []
        for _ in range(k):
            i = int(key.argmin())
            out.append(i)
            key[i] = _KEY_MAX
        return out
    part = np.argpartition(key, k - 1)[:k]
    return part[key.take(part).argsort()].tolist()


class _ShapeCache:
    """Per-node values for one pod shape (CPU, GPUs, milli per GPU, ``gpu_spec``), each ``(N,)``,
    valid while the node's ``state.version`` equals ``ver`` (FGD's part) or ``hver`` (the other
    heuristics' part). Keys are ``-score * N + priority rank``."""

    __slots__ = (
        "delta",
        "gpu",
        "score",
        "fkey",
        "ver",
        "bf_raw",
        "pk",
        "cl",
        "pkey",
        "ckey",
        "dkey",
        "hver",
    )

    def __init__(self, n: int) -> None:
        self.delta = np.zeros(n)  # FGD fragmentation decrease, milli-GPU
        self.gpu = np.full(n, -1, dtype=np.int64)  # FGD's GPU (sharing) / first GPU (whole)
        self.score = np.zeros(n, dtype=np.int64)  # FGD integer score
        self.fkey = np.zeros(n, dtype=np.int64)
        self.ver = np.full(n, -1, dtype=np.int64)
        self.bf_raw = np.zeros(n, dtype=np.int64)  # BestFit before normalisation
        self.pk = np.zeros(n, dtype=np.int64)  # GpuPacking (0 for CPU-only pods)
        self.cl = np.zeros(n, dtype=np.int64)  # GpuClustering (0 for CPU-only pods)
        self.pkey = np.zeros(n, dtype=np.int64)
        self.ckey = np.zeros(n, dtype=np.int64)
        self.dkey = np.zeros(n, dtype=np.int64)  # DotProd
        self.hver = np.full(n, -1, dtype=np.int64)


class CandidateBuilder:
    """Builds :class:`Candidates` for a pod on a :class:`ClusterState` (see the module docstring).

    The work per decision is a few dozen numpy calls on the feasible nodes: FGD's deltas and
    integer scores come from a cache per pod shape that recomputes only nodes whose
    ``state.version`` changed, per-node idle GPU totals and fragmentation come from FGD's own
    version-keyed cache, the heuristic scores are computed on the feasible nodes only, and every
    ordering uses one integer key ``-score * N + priority rank`` (one sort gives FGD's top nodes
    and each candidate's rank).

    Args:
        n_candidates: ``K``.
        n_fgd: how many of FGD's top nodes to list first.
        n_bestfit, n_packing, n_clustering, n_dotprod: top nodes of each heuristic to add.
    """

    def __init__(
        self,
        n_candidates: int = DEFAULT_N_CANDIDATES,
        n_fgd: int = 6,
        n_bestfit: int = 3,
        n_packing: int = 2,
        n_clustering: int = 2,
        n_dotprod: int = 1,
        penalty_features: bool = False,
    ) -> None:
        if n_candidates < 1:
            raise ValueError("n_candidates must be >= 1")
        self.n_candidates = n_candidates
        self.quota = (n_fgd, n_bestfit, n_packing, n_clustering, n_dotprod)
        self.fgd = FGD()
        self.state: ClusterState | None = None
        self.stats = NodeStats()
        self._cache: dict[tuple[int, int, int, int], _ShapeCache] = {}  # by pod shape
        self._prio_src: np.ndarray | None = None
        self._prio_rank = np.zeros(0, dtype=np.int64)
        self._prio_is_perm = True
        self._arange_k = np.arange(n_candidates)
        self._pad_nodes = np.full(n_candidates, -1, dtype=np.int64)
        self.penalty_features = bool(penalty_features)
        self.n_cand_features = N_CAND_FEATURES + (N_PENALTY_FEATURES if penalty_features else 0)
        self.obs_dim = n_candidates * self.n_cand_features + N_GLOBAL_FEATURES
        self.penalty_context: PenaltyContext | None = None

    def reset(
        self,
        state: ClusterState,
        trace: PodTrace | None = None,
        typical: TypicalPods | None = None,
        penalty_context: PenaltyContext | None = None,
    ) -> None:
        """Bind to ``state``; FGD's typical pods come from ``trace`` (the original, un-resampled
        trace) or are given as ``typical`` (e.g. saved with a model, for the live service). With
        ``penalty_features``, the penalty statistics are ``penalty_context`` or, without it, those of
        ``trace``."""
        if trace is None and typical is None:
            raise ValueError("CandidateBuilder.reset needs a trace or typical pods")
        if self.penalty_features:
            if penalty_context is None and trace is None:
                raise ValueError(
                    "CandidateBuilder(penalty_features=True).reset needs a trace or a penalty context"
                )
            self.penalty_context = penalty_context or PenaltyContext.from_trace(trace, state)
        self.state = state
        self.fgd = FGD(typical=typical) if trace is None else FGD()
        self.fgd.reset(state, trace=trace)
        self.stats = NodeStats()
        self._cache.clear()
        self._prio_src = None

    def _priority_rank(self) -> tuple[np.ndarray, bool]:
        """``(N,)`` distinct ranks ordering the nodes by (priority, index), and whether the
        priority itself is a permutation of ``0..N-1`` (then the rank is the priority)."""
        st = self.state
        p = st.priority
        if p is not self._prio_src:  # set_priority() installs a new array
            n = st.n_nodes
            rank = np.empty(n, dtype=np.int64)
            rank[np.argsort(p, kind="stable")] = np.arange(n)
            self._prio_is_perm = bool(np.array_equal(rank, p))
            self._prio_rank = rank
            self._prio_src = p
            self._cache.clear()  # its sort keys hold the old ranks
            # per-node features that depend only on the node and its priority
            self._static = np.stack([p / n, st.num_gpu / MAX_GPUS_PER_NODE], axis=1)
            self._cpu_cap1 = np.maximum(st.cpu_cap, 1)
            self._mem_cap1 = np.maximum(st.mem_cap, 1)
        return self._prio_rank, self._prio_is_perm

    def _entry(self, pod: Pod, mask: np.ndarray, heuristics: bool = False) -> _ShapeCache:
        """The cache of ``pod``'s shape, with FGD's part (and the heuristics' part when asked)
        up to date on the nodes of ``mask``."""
        st = self.state
        prank, _ = self._priority_rank()  # first: a new priority clears the cache
        key = (pod.cpu_milli, pod.num_gpu, pod.gpu_milli, pod.gpu_spec_mask)
        e = self._cache.get(key)
        if e is None:
            if len(self._cache) >= 512:
                self._cache.clear()
            e = self._cache[key] = _ShapeCache(st.n_nodes)
        stale = ((e.ver != st.version) & mask).nonzero()[0]
        if stale.size:
            d, g = self.fgd.node_deltas_at(st, pod, stale)
            score = fgd_score_from_delta(d)
            e.delta[stale] = d
            e.gpu[stale] = g
            e.score[stale] = score
            e.fkey[stale] = score * -st.n_nodes + prank.take(stale)
            e.ver[stale] = st.version.take(stale)
        if heuristics:
            stale = ((e.hver != st.version) & mask).nonzero()[0]
            if stale.size:
                self._update_heuristics(e, pod, stale, prank)
        return e

    def _update_heuristics(
        self, e: _ShapeCache, pod: Pod, stale: np.ndarray, prank: np.ndarray
    ) -> None:
        st, stats = self.state, self.stats  # stats are current (build updates them first)
        n = st.n_nodes
        if stale.size <= 4:  # plain Python beats ~60 numpy calls on a handful of nodes
            for node in stale.tolist():
                bf, dp, pk, cl = heuristic_scores_one(st, pod, node, stats)
                pr = int(prank[node])
                e.bf_raw[node] = bf
                e.dkey[node] = dp * -n + pr
                e.pk[node] = pk
                e.cl[node] = cl
                e.pkey[node] = pk * -n + pr
                e.ckey[node] = cl * -n + pr
            e.hver[stale] = st.version.take(stale)
            return
        pr = prank.take(stale)
        e.bf_raw[stale] = bestfit_raw_at(st, pod, stale, stats)
        e.dkey[stale] = dotprod_scores_at(st, pod, stale, stats) * -n + pr
        if pod.num_gpu > 0:
            pk = gpu_packing_scores_at(st, pod, stale, stats)
            cl = gpu_clustering_scores_at(st, pod, stale, stats)
            e.pk[stale] = pk
            e.cl[stale] = cl
            e.pkey[stale] = pk * -n + pr
            e.ckey[stale] = cl * -n + pr
        e.hver[stale] = st.version.take(stale)

    def fgd_deltas(self, pod: Pod, mask: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`fleetmind.envs.policies.FGD.node_deltas`, cached per pod shape and node version.

        A node's delta depends only on that node's state and the pod's CPU, GPU request and
        ``gpu_spec``, so entries stay valid until the node changes (``state.version``); each decision
        recomputes only the feasible nodes that changed since the same pod shape was last seen.
        """
        e = self._entry(pod, mask)
        return e.delta, e.gpu

    def cluster_fragmentation(self) -> float:
        """``sum_n F_n`` in milli-GPU (FGD's node fragmentation w.r.t. the typical pods)."""
        return self.fgd.fragmentation_sum(self.state)

    def fgd_gpus(self, pod: Pod, node: int) -> np.ndarray:
        """The GPUs FGD would give ``pod`` on ``node`` (used for single-feasible-node pods)."""
        return self.fgd._gpus_unscored(self.state, pod, node)  # noqa: SLF001

    def fgd_choice(self, pod: Pod, mask: np.ndarray) -> tuple[int, np.ndarray]:
        """FGD's decision ``(node, gpus)`` among ``mask`` (>= 1 feasible), from the cached deltas."""
        st = self.state
        idx = mask.nonzero()[0]
        if idx.size == 1:
            node = int(idx[0])
            return node, self.fgd_gpus(pod, node)
        e = self._entry(pod, mask)
        s = e.score.take(idx)
        best = idx[s == s.max()]
        node = int(best[0]) if best.size == 1 else int(best[np.argmin(st.priority[best])])
        if pod.is_sharing:
            return node, np.array([e.gpu[node]], dtype=np.int64)
        return node, st.choose_gpus(pod, node)

    def _pick(
        self, pod: Pod, e: _ShapeCache, idx: np.ndarray, order: np.ndarray, prank: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, list[int]]:
        """``(chosen, bf, bf_top)``: the candidates as positions into the feasible nodes ``idx``
        (each heuristic's quota of its top nodes, then FGD's next ones; FGD's first), BestFit's
        normalised scores over ``idx``, and BestFit's top positions.

        Every order is by one distinct integer key, -score * N + priority rank (ascending);
        ``order`` is FGD's.
        """
        q_fgd, q_bf, q_pk, q_cl, q_dp = self.quota
        picks = order[:q_fgd].tolist()
        raw = e.bf_raw.take(idx)
        bf = minmax_normalise(raw, raw)  # BestFit normalises over the feasible nodes
        bf_top = _top_keys(bf * -self.state.n_nodes + prank.take(idx), max(q_bf, 1))
        picks += bf_top[:q_bf]
        if pod.num_gpu > 0:
            picks += _top_keys(e.pkey.take(idx), q_pk)
            picks += _top_keys(e.ckey.take(idx), q_cl)
        if q_dp:
            picks += _top_keys(e.dkey.take(idx), q_dp)
        picks += order[q_fgd : q_fgd + self.n_candidates].tolist()
        chosen = np.array(list(dict.fromkeys(picks))[: self.n_candidates], dtype=np.int64)
        return chosen, bf, bf_top

    def _fgd_rank(
        self,
        e: _ShapeCache,
        idx: np.ndarray,
        fkey: np.ndarray,
        order: np.ndarray,
        chosen: np.ndarray,
        prio_is_perm: bool,
    ) -> np.ndarray:
        """Rank of each candidate in FGD's full order over ``idx`` (higher score first, ties by
        priority)."""
        if prio_is_perm:
            return fkey.take(order).searchsorted(fkey.take(chosen))
        # repeated priorities: equal (score, priority) do not count as ahead
        prio = self.state.priority.take(idx)
        fgd_int = e.score.take(idx)
        sc, pc = fgd_int[chosen, None], prio[chosen, None]
        return ((fgd_int[None, :] > sc) | ((fgd_int[None, :] == sc) & (prio[None, :] < pc))).sum(1)

    def build(self, pod: Pod, mask: np.ndarray, arrived_milli: int) -> Candidates:
        """Candidates and observation for ``pod`` among the feasible nodes ``mask`` (>= 1 True)."""
        st = self.state
        fgd = self.fgd
        k_max = self.n_candidates
        n_nodes = st.n_nodes
        idx = mask.nonzero()[0]  # feasible nodes; "positions" below index into idx
        n_feas = idx.size

        stats = self.stats
        stats.update(st)
        e = self._entry(pod, mask, heuristics=True)
        fgd._refresh(st)  # noqa: SLF001 - F_n of every node, for the features
        prank, prio_is_perm = self._priority_rank()

        fkey = e.fkey.take(idx)  # FGD: higher integer score first, ties by priority
        order = fkey.argsort()
        chosen, bf, bf_top = self._pick(pod, e, idx, order, prank)
        k = chosen.size
        nodes = idx.take(chosen)
        rank = self._fgd_rank(e, idx, fkey, order, chosen, prio_is_perm)

        # per-candidate node state after placing
        ngpu = st.num_gpu.take(nodes)
        cap_gpu = np.maximum(ngpu * GPU_MILLI, 1)
        idle_c = stats.idle_total.take(nodes)
        full = stats.full_idle.take(nodes)
        n_f = self.n_cand_features
        obs = np.zeros(self.obs_dim)
        rows = obs[: k_max * n_f].reshape(k_max, n_f)  # a view
        r = rows[:k]
        if pod.num_gpu == 0:
            gpus = [np.zeros(0, dtype=np.int64)] * k
            full_after = full
        elif pod.is_sharing:
            g = e.gpu.take(nodes)
            gpus = list(g.reshape(k, 1))
            on_g = st.gpu_idle[nodes, g]
            r[:, 16] = (on_g - pod.gpu_milli) / GPU_MILLI  # idle left on the chosen GPU
            full_after = full - (on_g == GPU_MILLI)
        else:  # the lowest-index fully idle GPUs (state.choose_gpus)
            busy = st.gpu_idle.take(nodes, axis=0) != GPU_MILLI
            gpus = list(np.argsort(busy, axis=1, kind="stable")[:, : pod.num_gpu])
            full_after = full - pod.num_gpu
        has_gpu = ngpu > 0

        r[:, 0] = 1.0
        r[0, 1] = 1.0
        r[:, 2] = np.tanh(e.delta.take(nodes) / 1000.0)
        r[:, 3] = e.score.take(nodes) / 100.0
        r[:, 4] = rank / max(n_feas - 1, 1)
        r[:, 5] = chosen == bf_top[0]
        r[:, 6] = bf.take(chosen) / 100.0
        r[:, 7] = e.pk.take(nodes) / 100.0
        r[:, 8] = e.cl.take(nodes) / 100.0
        r[:, _STATIC_COLS] = self._static.take(nodes, axis=0)  # priority / N, GPUs / 8
        r[:, 10] = (1.0 - idle_c / cap_gpu) * has_gpu
        r[:, 11] = (1.0 - (idle_c - pod.gpu_request) / cap_gpu) * has_gpu
        r[:, 12] = (st.cpu_free.take(nodes) - pod.cpu_milli) / self._cpu_cap1.take(nodes)
        r[:, 13] = (st.mem_free.take(nodes) - pod.memory_mib) / self._mem_cap1.take(nodes)
        r[:, 15] = fgd._F.take(nodes) / fgd._total / 8000.0  # noqa: SLF001 - refreshed above
        r[:, 17] = full_after / MAX_GPUS_PER_NODE
        if self.penalty_features:
            ctx = self.penalty_context
            r[:, 18] = (
                stranding_deltas(st, pod, nodes, ctx.cpu_per_milli, ctx.mem_per_milli)
                / STRAND_FEATURE_SCALE
            )
            r[:, 19] = (
                model_scarcity_penalties(st, pod, nodes, ctx.scarcity) / SCARCITY_FEATURE_SCALE
            )

        cap = st.gpu_capacity_milli
        obs[k_max * n_f :] = (
            *pod_shape_features(pod),
            arrived_milli / (1.3 * cap),
            st.allocated_gpu_milli / cap,
            n_feas / n_nodes,
            fgd._F_sum / fgd._total / cap,  # noqa: SLF001 - sum F_n, refreshed above
        )
        np.minimum(np.maximum(obs, OBS_LOW, out=obs), OBS_HIGH, out=obs)  # = np.clip
        out_nodes = np.concatenate((nodes, self._pad_nodes[: k_max - k]))
        gpus += [np.zeros(0, dtype=np.int64)] * (k_max - k)
        return Candidates(obs.astype(np.float32), self._arange_k < k, out_nodes, gpus)
