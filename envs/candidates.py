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

Global features (``G = 10``): pod per-GPU milli / 1000, pod GPU count / 8, pod CPU / 32000 milli,
pod memory / 65536 MiB, is sharing, is CPU-only, arrived GPU request / (1.3 x capacity), allocated GPU /
capacity, feasible nodes / N, cluster fragmentation ``sum_n F_n`` / capacity.

Topology/link features: the openb node list has no GPU interconnect data, so fgd mode has none; the
dynamic-mode env adds its own.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from data.openb import GPU_MILLI, PodTrace
from envs.core import MAX_GPUS_PER_NODE, ClusterState, NodeStats, Pod
from envs.policies import (
    FGD,
    TypicalPods,
    bestfit_scores_at,
    dotprod_scores_at,
    fgd_score_from_delta,
    gpu_clustering_scores_at,
    gpu_packing_scores_at,
)

N_CAND_FEATURES = 18
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

    With ``key = -score * N + rank`` (``rank`` a permutation of ``0..N-1`` that orders the nodes by
    priority, then index) this is :func:`_top` of ``score``: highest score first, ties by priority.
    """
    if k <= 0:
        return []
    if k == 1:
        return [int(key.argmin())]
    if key.size <= k:
        return key.argsort().tolist()
    part = np.argpartition(key, k - 1)[:k]
    return part[key.take(part).argsort()].tolist()


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
    ) -> None:
        if n_candidates < 1:
            raise ValueError("n_candidates must be >= 1")
        self.n_candidates = n_candidates
        self.quota = (n_fgd, n_bestfit, n_packing, n_clustering, n_dotprod)
        self.fgd = FGD()
        self.state: ClusterState | None = None
        self.stats = NodeStats()
        # pod shape -> (delta, gpu, integer FGD score, node version when computed), all (N,)
        self._cache: dict[
            tuple[int, int, int, int], tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]
        ] = {}
        self._prio_src: np.ndarray | None = None
        self._prio_rank = np.zeros(0, dtype=np.int64)
        self._prio_is_perm = True
        self.obs_dim = n_candidates * N_CAND_FEATURES + N_GLOBAL_FEATURES

    def reset(
        self,
        state: ClusterState,
        trace: PodTrace | None = None,
        typical: TypicalPods | None = None,
    ) -> None:
        """Bind to ``state``; FGD's typical pods come from ``trace`` (the original, un-resampled
        trace) or are given as ``typical`` (e.g. saved with a model, for the live service)."""
        if trace is None and typical is None:
            raise ValueError("CandidateBuilder.reset needs a trace or typical pods")
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
        return self._prio_rank, self._prio_is_perm

    def _fgd_entry(
        self, pod: Pod, mask: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """The cache entry of ``pod``'s shape, up to date on ``mask`` (see :meth:`fgd_deltas`)."""
        st = self.state
        key = (pod.cpu_milli, pod.num_gpu, pod.gpu_milli, pod.gpu_spec_mask)
        entry = self._cache.get(key)
        if entry is None:
            if len(self._cache) >= 512:
                self._cache.clear()
            n = st.n_nodes
            entry = (
                np.zeros(n),
                np.full(n, -1, dtype=np.int64),
                np.zeros(n, dtype=np.int64),
                np.full(n, -1, dtype=np.int64),
            )
            self._cache[key] = entry
        delta, gpu, score, ver = entry
        stale = ((ver != st.version) & mask).nonzero()[0]
        if stale.size:
            d, g = self.fgd.node_deltas_at(st, pod, stale)
            delta[stale] = d
            gpu[stale] = g
            score[stale] = fgd_score_from_delta(d)
            ver[stale] = st.version.take(stale)
        return entry

    def fgd_deltas(self, pod: Pod, mask: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`envs.policies.FGD.node_deltas`, cached per pod shape and node version.

        A node's delta depends only on that node's state and the pod's CPU, GPU request and
        ``gpu_spec``, so entries stay valid until the node changes (``state.version``); each decision
        recomputes only the feasible nodes that changed since the same pod shape was last seen.
        """
        delta, gpu, _, _ = self._fgd_entry(pod, mask)
        return delta, gpu

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
        _, gpu, score, _ = self._fgd_entry(pod, mask)
        s = score.take(idx)
        best = idx[s == s.max()]
        node = int(best[0]) if best.size == 1 else int(best[np.argmin(st.priority[best])])
        if pod.is_sharing:
            return node, np.array([gpu[node]], dtype=np.int64)
        return node, st.choose_gpus(pod, node)

    def build(self, pod: Pod, mask: np.ndarray, arrived_milli: int) -> Candidates:
        """Candidates and observation for ``pod`` among the feasible nodes ``mask`` (>= 1 True)."""
        st = self.state
        fgd = self.fgd
        k_max = self.n_candidates
        n_nodes = st.n_nodes
        q_fgd, q_bf, q_pk, q_cl, q_dp = self.quota
        idx = mask.nonzero()[0]  # feasible nodes; "positions" below index into idx
        n_feas = idx.size

        delta_all, gpu_all, score_all, _ = self._fgd_entry(pod, mask)
        fgd._refresh(st)  # noqa: SLF001 - F_n of every node, for the features
        stats = self.stats
        stats.update(st)
        idle_tot = stats.idle_total.take(idx)
        prank, prio_is_perm = self._priority_rank()
        pr = prank.take(idx)

        # FGD order: higher integer score first, ties by priority; keys are distinct integers
        fgd_int = score_all.take(idx)
        fkey = fgd_int * -n_nodes + pr
        order = fkey.argsort()
        picks = order[:q_fgd].tolist()
        bf = bestfit_scores_at(st, pod, idx, stats)
        bf_top = _top_keys(bf * -n_nodes + pr, max(q_bf, 1))
        picks += bf_top[:q_bf]
        if pod.num_gpu > 0:
            pk = gpu_packing_scores_at(st, pod, idx, stats)
            cl = gpu_clustering_scores_at(st, pod, idx, stats)
            picks += _top_keys(pk * -n_nodes + pr, q_pk)
            picks += _top_keys(cl * -n_nodes + pr, q_cl)
        else:
            pk = np.zeros(n_feas, dtype=np.int64)
            cl = pk
        if q_dp:
            picks += _top_keys(dotprod_scores_at(st, pod, idx, stats) * -n_nodes + pr, q_dp)
        picks += order[q_fgd : q_fgd + k_max].tolist()
        chosen = np.array(list(dict.fromkeys(picks))[:k_max], dtype=np.int64)  # FGD's first
        k = chosen.size
        nodes = idx.take(chosen)

        # rank of each candidate in FGD's full order (higher score first, ties by priority)
        if prio_is_perm:
            rank = fkey.take(order).searchsorted(fkey.take(chosen))
        else:  # repeated priorities: equal (score, priority) do not count as ahead
            prio = st.priority.take(idx)
            sc, pc = fgd_int[chosen, None], prio[chosen, None]
            rank = (
                (fgd_int[None, :] > sc) | ((fgd_int[None, :] == sc) & (prio[None, :] < pc))
            ).sum(1)

        # per-candidate node state after placing
        idle = st.gpu_idle.take(nodes, axis=0)  # (k, 8)
        ngpu = st.num_gpu.take(nodes)
        cap_gpu = np.maximum(ngpu * GPU_MILLI, 1)
        idle_c = idle_tot.take(chosen)
        full = stats.full_idle.take(nodes)
        left = np.zeros(k)
        if pod.num_gpu == 0:
            gpus = [np.zeros(0, dtype=np.int64)] * k
            full_after = full
        elif pod.is_sharing:
            g = gpu_all.take(nodes)
            gpus = [np.array([x], dtype=np.int64) for x in g.tolist()]
            on_g = idle[np.arange(k), g]
            left = on_g - pod.gpu_milli
            full_after = full - (on_g == GPU_MILLI)
        else:  # the lowest-index fully idle GPUs (state.choose_gpus)
            first = np.argsort(idle != GPU_MILLI, axis=1, kind="stable")[:, : pod.num_gpu]
            gpus = list(first.astype(np.int64))
            full_after = full - pod.num_gpu
        used_before = 1.0 - idle_c / cap_gpu
        used_after = 1.0 - (idle_c - pod.gpu_request) / cap_gpu
        has_gpu = ngpu > 0

        rows = np.zeros((k_max, N_CAND_FEATURES), dtype=np.float64)
        r = rows[:k]
        r[:, 0] = 1.0
        r[0, 1] = 1.0
        r[:, 2] = np.tanh(delta_all.take(nodes) / 1000.0)
        r[:, 3] = fgd_int.take(chosen) / 100.0
        r[:, 4] = rank / max(n_feas - 1, 1)
        r[:, 5] = chosen == bf_top[0]
        r[:, 6] = bf.take(chosen) / 100.0
        r[:, 7] = pk.take(chosen) / 100.0
        r[:, 8] = cl.take(chosen) / 100.0
        r[:, 9] = st.priority.take(nodes) / n_nodes
        r[:, 10] = used_before * has_gpu
        r[:, 11] = used_after * has_gpu
        r[:, 12] = (st.cpu_free.take(nodes) - pod.cpu_milli) / np.maximum(st.cpu_cap.take(nodes), 1)
        r[:, 13] = (st.mem_free.take(nodes) - pod.memory_mib) / np.maximum(
            st.mem_cap.take(nodes), 1
        )
        r[:, 14] = ngpu / MAX_GPUS_PER_NODE
        r[:, 15] = fgd._F.take(nodes) / fgd._total / 8000.0  # noqa: SLF001 - refreshed above
        r[:, 16] = left / GPU_MILLI
        r[:, 17] = full_after / MAX_GPUS_PER_NODE

        cap = st.gpu_capacity_milli
        glob = np.array(
            [
                pod.gpu_milli / GPU_MILLI,
                pod.num_gpu / MAX_GPUS_PER_NODE,
                pod.cpu_milli / 32000.0,
                pod.memory_mib / 65536.0,
                float(pod.is_sharing),
                float(pod.num_gpu == 0),
                arrived_milli / (1.3 * cap),
                st.allocated_gpu_milli / cap,
                n_feas / n_nodes,
                fgd._F_sum / fgd._total / cap,  # noqa: SLF001 - sum F_n, refreshed above
            ]
        )
        obs = np.concatenate([rows.reshape(-1), glob])
        obs.clip(OBS_LOW, OBS_HIGH, out=obs)
        out_mask = np.zeros(k_max, dtype=bool)
        out_mask[:k] = True
        out_nodes = np.full(k_max, -1, dtype=np.int64)
        out_nodes[:k] = nodes
        gpus += [np.zeros(0, dtype=np.int64)] * (k_max - k)
        return Candidates(obs.astype(np.float32), out_mask, out_nodes, gpus)
