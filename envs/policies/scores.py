"""Score functions of the placement heuristics, vectorised over the nodes of a :class:`fleetmind.envs.core.ClusterState`.

Scoring follows the FGD authors' simulator (Weng et al., USENIX ATC'23; ``docs/placement.md``
gives the rules). The PPO candidate features reuse these functions.
"""

from __future__ import annotations

import math

import numpy as np

from fleetmind.data.openb import GPU_MILLI
from fleetmind.envs.core import ClusterState, NodeStats, Pod, rows_all

CPU_NORM = 128_000
"""CPU normaliser of BestFit and DotProd (milli-cores of the largest openb node)."""

GPU_NORM = 8_000
"""GPU normaliser of BestFit, DotProd and GpuClustering (milli-GPU of an 8-GPU node)."""


# --------------------------------------------------------------------------- score functions
# Each score has a mask-based public form, ``(N,)`` over all nodes, and an index-based ``*_at``
# form that computes only the rows ``idx`` (the feasible nodes): ``f_at(state, pod, idx)`` equals
# ``f(state, pod, mask)[idx]`` for ``idx = np.flatnonzero(mask)``. Both share one formula helper,
# so they agree bit for bit; ``stats`` (a :class:`fleetmind.envs.core.NodeStats` updated to ``state``)
# supplies per-node totals kept by version instead of recomputing them.
def _bestfit_raw(cpu_free: np.ndarray, idle_total: np.ndarray, pod: Pod) -> np.ndarray:
    cpu_left = (cpu_free - pod.cpu_milli) / CPU_NORM
    gpu_left = (idle_total - pod.gpu_request) / GPU_NORM
    return np.floor(100.0 * (1.0 - (0.5 * cpu_left + 0.5 * gpu_left))).astype(np.int64)


def minmax_normalise(raw: np.ndarray, sel: np.ndarray) -> np.ndarray:
    """``raw`` (int64) min-max normalised to integers 0..100 over the values ``sel`` (zeros when
    ``sel`` is empty or constant), as BestFit normalises its raw scores over the feasible nodes."""
    if sel.size == 0:
        return np.zeros_like(raw)
    lo, hi = int(sel.min()), int(sel.max())
    if hi == lo:
        return np.zeros_like(raw)
    return (raw - lo) * 100 // (hi - lo)


def _dotprod(cpu_free: np.ndarray, idle_total: np.ndarray, pod: Pod) -> np.ndarray:
    dot = (cpu_free / CPU_NORM) * (pod.cpu_milli / CPU_NORM) + (idle_total / GPU_NORM) * (
        pod.gpu_request / GPU_NORM
    )
    return np.floor(100.0 * (1.0 - dot / 2.0)).astype(np.int64)


def _packing(idle: np.ndarray, present: np.ndarray, num_gpu: np.ndarray, pod: Pod) -> np.ndarray:
    if pod.num_gpu == 0:
        return np.zeros(num_gpu.size, dtype=np.int64)
    all_idle = rows_all((idle == GPU_MILLI) | ~present) & (num_gpu > 0)
    tight = None
    if pod.is_sharing:
        fit = (idle >= max(pod.gpu_milli, 1)) & present
        tight = np.where(fit, idle, GPU_MILLI + 1).min(axis=1)
    return _packing_from(all_idle, tight, num_gpu, pod)


def _packing_from(
    all_idle: np.ndarray, tight: np.ndarray | None, num_gpu: np.ndarray, pod: Pod
) -> np.ndarray:
    """GpuPacking from each node's "all GPUs idle" flag and, for a sharing pod, ``tight``: the
    least idle milli among the GPUs that fit it."""
    if pod.is_sharing:
        s1 = np.maximum(100 - (tight * 100 // GPU_MILLI) // 10, 50)
        score = np.where(tight == GPU_MILLI, 49, s1)
    else:
        # whole GPUs: the used GPUs are fully idle ones -> case (2)
        score = np.full(num_gpu.size, max(50 - pod.num_gpu, 33), dtype=np.int64)
    return np.where(all_idle, 33 - num_gpu, score).astype(np.int64)


def _clustering(
    idle_total: np.ndarray, has_this: np.ndarray, n_classes: np.ndarray, pod: Pod
) -> np.ndarray:
    base = 25 * (GPU_NORM - idle_total) // GPU_NORM
    bonus = np.where(
        has_this,
        np.where(n_classes == 1, 75, 50),
        np.where(n_classes == 0, 25, 0),
    )
    return (base + bonus).astype(np.int64)


def bestfit_raw(state: ClusterState, pod: Pod, mask: np.ndarray) -> np.ndarray:
    """``(N,)`` int64: BestFit's raw score ``floor(100 (1 - [0.5 cpu_left/128000 + 0.5 gpu_left/8000]))``."""
    return _bestfit_raw(state.cpu_free, state.gpu_idle_total(), pod)


def bestfit_scores(state: ClusterState, pod: Pod, mask: np.ndarray) -> np.ndarray:
    """``(N,)`` int64: BestFit raw scores min-max normalised to 0..100 over ``mask`` (integers)."""
    raw = bestfit_raw(state, pod, mask)
    return minmax_normalise(raw, raw[mask])


def _idle_total_at(state: ClusterState, idx: np.ndarray, stats: NodeStats | None) -> np.ndarray:
    if stats is None:
        return state.gpu_idle.take(idx, axis=0).sum(axis=1)
    return stats.idle_total.take(idx)


def bestfit_raw_at(
    state: ClusterState, pod: Pod, idx: np.ndarray, stats: NodeStats | None = None
) -> np.ndarray:
    """``(S,)`` int64: :func:`bestfit_raw` on the nodes ``idx``."""
    return _bestfit_raw(state.cpu_free.take(idx), _idle_total_at(state, idx, stats), pod)


def bestfit_scores_at(
    state: ClusterState, pod: Pod, idx: np.ndarray, stats: NodeStats | None = None
) -> np.ndarray:
    """``(S,)`` int64: :func:`bestfit_scores` on the nodes ``idx`` (normalised over ``idx``)."""
    raw = _bestfit_raw(state.cpu_free.take(idx), _idle_total_at(state, idx, stats), pod)
    return minmax_normalise(raw, raw)


def dotprod_scores(state: ClusterState, pod: Pod, mask: np.ndarray) -> np.ndarray:
    """``(N,)`` int64: ``floor(100 (1 - dot/2))`` with dot of normalised free resources and request."""
    return _dotprod(state.cpu_free, state.gpu_idle_total(), pod)


def dotprod_scores_at(
    state: ClusterState, pod: Pod, idx: np.ndarray, stats: NodeStats | None = None
) -> np.ndarray:
    """``(S,)`` int64: :func:`dotprod_scores` on the nodes ``idx``."""
    return _dotprod(state.cpu_free.take(idx), _idle_total_at(state, idx, stats), pod)


def gpu_packing_scores(state: ClusterState, pod: Pod, mask: np.ndarray) -> np.ndarray:
    """``(N,)`` int64 GpuPacking scores (0 everywhere for CPU-only pods).

    (3) node fully idle: ``33 - num_gpu``; else over the GPUs the pod would use (fitting GPUs by
    increasing idle): (2) any fully idle: ``max(50 - #fully idle used, 33)``; (1) otherwise
    ``max(100 - floor(sum(floor(idle*100/1000)) / 10), 50)``.
    """
    return _packing(state.gpu_idle, state.gpu_present, state.num_gpu, pod)


def gpu_packing_scores_at(
    state: ClusterState, pod: Pod, idx: np.ndarray, stats: NodeStats | None = None
) -> np.ndarray:
    """``(S,)`` int64: :func:`gpu_packing_scores` on the nodes ``idx``."""
    if pod.num_gpu == 0:
        return np.zeros(idx.size, dtype=np.int64)
    num_gpu = state.num_gpu.take(idx)
    if stats is None:
        return _packing(
            state.gpu_idle.take(idx, axis=0), state.gpu_present.take(idx, axis=0), num_gpu, pod
        )
    # absent GPU slots hold 0 idle (ClusterState invariant): "every present GPU fully idle" is
    # "as many fully idle GPUs as GPUs", and no absent slot fits a pod
    all_idle = (stats.full_idle.take(idx) == num_gpu) & (num_gpu > 0)
    tight = None
    if pod.is_sharing:
        idle_t = stats.idle_t.take(idx, axis=1)  # (8, S)
        tight = np.where(idle_t >= max(pod.gpu_milli, 1), idle_t, GPU_MILLI + 1).min(axis=0)
    return _packing_from(all_idle, tight, num_gpu, pod)


def gpu_clustering_scores(state: ClusterState, pod: Pod, mask: np.ndarray) -> np.ndarray:
    """``(N,)`` int64 GpuClustering scores (0 everywhere for CPU-only pods).

    ``base = floor(25 (8000 - idle_total) / 8000)``; +75 if the node holds only this pod's class,
    +50 this class and others, +25 no GPU pod, +0 only other classes.
    """
    cls = pod.pod_class
    if cls < 0:
        return np.zeros(state.n_nodes, dtype=np.int64)
    cc = state.class_count
    return _clustering(state.gpu_idle_total(), cc[:, cls] > 0, (cc > 0).sum(axis=1), pod)


def gpu_clustering_scores_at(
    state: ClusterState, pod: Pod, idx: np.ndarray, stats: NodeStats | None = None
) -> np.ndarray:
    """``(S,)`` int64: :func:`gpu_clustering_scores` on the nodes ``idx``."""
    cls = pod.pod_class
    if cls < 0:
        return np.zeros(idx.size, dtype=np.int64)
    has_this = state.class_count[:, cls].take(idx) > 0
    if stats is None:
        n_classes = (state.class_count.take(idx, axis=0) > 0).sum(axis=1)
    else:
        n_classes = stats.n_classes.take(idx)
    return _clustering(_idle_total_at(state, idx, stats), has_this, n_classes, pod)


def heuristic_scores_one(
    state: ClusterState, pod: Pod, node: int, stats: NodeStats
) -> tuple[int, int, int, int]:
    """BestFit raw, DotProd, GpuPacking and GpuClustering scores of one node, in plain Python.

    The scalar twin of :func:`bestfit_raw_at`, :func:`dotprod_scores_at`,
    :func:`gpu_packing_scores_at` and :func:`gpu_clustering_scores_at` (``stats`` updated to
    ``state``), for the one or two nodes a decision has to refresh, where numpy's per-call cost
    dominates. Every step is the same IEEE double or integer operation as the vectorised form
    (integer operands convert exactly), so the results are equal (``tests/test_fgd_policies.py``).
    """
    cpu = int(state.cpu_free[node])
    tot = int(stats.idle_total[node])
    req = pod.gpu_request
    bf = math.floor(
        100.0 * (1.0 - (0.5 * ((cpu - pod.cpu_milli) / CPU_NORM) + 0.5 * ((tot - req) / GPU_NORM)))
    )
    dot = (cpu / CPU_NORM) * (pod.cpu_milli / CPU_NORM) + (tot / GPU_NORM) * (req / GPU_NORM)
    dp = math.floor(100.0 * (1.0 - dot / 2.0))
    cls = pod.pod_class
    if cls < 0:
        return bf, dp, 0, 0
    ng = int(state.num_gpu[node])
    if pod.is_sharing:
        need = max(pod.gpu_milli, 1)
        tight = min((v for v in state.gpu_idle[node].tolist() if v >= need), default=GPU_MILLI + 1)
        pk = 49 if tight == GPU_MILLI else max(100 - (tight * 100 // GPU_MILLI) // 10, 50)
    else:
        pk = max(50 - pod.num_gpu, 33)
    if ng > 0 and int(stats.full_idle[node]) == ng:
        pk = 33 - ng
    n_cls = int(stats.n_classes[node])
    if state.class_count[node, cls] > 0:
        bonus = 75 if n_cls == 1 else 50
    else:
        bonus = 25 if n_cls == 0 else 0
    cl = 25 * (GPU_NORM - tot) // GPU_NORM + bonus
    return bf, dp, pk, cl
