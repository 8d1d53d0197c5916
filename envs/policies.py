"""Placement heuristics behind one interface: Random, DotProd, GpuClustering, GpuPacking, BestFit,
FGD and TopologyBestEffort.

Scoring, GPU choice and tie-breaking follow the FGD authors' simulator
(``hkust-adsl/kubernetes-scheduler-simulator``, Weng et al., USENIX ATC'23; ``docs/placement.md``). Every score is computed
vectorised over the nodes of a :class:`envs.core.ClusterState`.

Interface (:class:`Policy`):

* ``policy.reset(state, *, rng=None, trace=None)``: start of a run. ``rng`` drives Random's choices;
  ``trace`` is the original (un-resampled) trace, from which FGD derives its typical pods.
* ``policy.score(state, pod, mask) -> (N,)``: node scores, higher is better; only entries where
  ``mask`` is True mean anything.
* ``policy.select(state, pod, mask=None) -> (node, gpus)``: the decision. ``mask`` defaults to
  ``state.feasible(pod)``; ``node == -1`` (and empty ``gpus``) when no node is feasible. A single
  feasible node is taken without scoring; otherwise the highest score wins and ties go to the node
  with the best random priority (``state.select_node``).

Score functions that the PPO candidate features reuse (all ``(N,)``, meaningful on ``mask``):
:func:`bestfit_raw`, :func:`bestfit_scores`, :func:`dotprod_scores`, :func:`gpu_packing_scores`,
:func:`gpu_clustering_scores`, and :meth:`FGD.node_deltas` (fragmentation decrease per node and the
GPU a sharing pod would take).

``POLICIES`` maps a name to a factory; ``make_policy(name, **kw)`` builds one (names are matched
case-insensitively; ``bestfit``, ``best_fit`` and ``BestFit`` are the same).
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from fleetmind.data.errors import ConfigError
from fleetmind.data.openb import ANY_GPU_MODEL, GPU_MILLI, PodTrace
from fleetmind.envs.core import MAX_GPUS_PER_NODE, ClusterState, NodeStats, Pod, rows_all

CPU_NORM = 128_000
"""CPU normaliser of BestFit and DotProd (milli-cores of the largest openb node)."""
GPU_NORM = 8_000
"""GPU normaliser of BestFit, DotProd and GpuClustering (milli-GPU of an 8-GPU node)."""


class Policy:
    """Base class: subclasses implement :meth:`score` and may override :meth:`choose_gpus`."""

    name: str = "policy"
    gpu_rule: str = "tightest"

    def __init__(self, seed: int | None = None) -> None:
        self.rng = np.random.default_rng(seed)

    def reset(
        self,
        state: ClusterState,
        *,
        rng: np.random.Generator | None = None,
        trace: PodTrace | None = None,
    ) -> None:
        """Prepare for a run on ``state`` (``rng``: randomness; ``trace``: the original trace)."""
        if rng is not None:
            self.rng = rng

    def score(self, state: ClusterState, pod: Pod, mask: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    def choose_gpus(self, state: ClusterState, pod: Pod, node: int) -> np.ndarray:
        """GPU indices on ``node`` (default: ``state.choose_gpus`` with :attr:`gpu_rule`)."""
        return state.choose_gpus(pod, node, self.gpu_rule)

    def select(
        self, state: ClusterState, pod: Pod, mask: np.ndarray | None = None
    ) -> tuple[int, np.ndarray]:
        """Decide where ``pod`` goes: ``(node, gpus)``, or ``(-1, [])`` when nothing is feasible."""
        if mask is None:
            mask = state.feasible(pod)
        idx = np.flatnonzero(mask)
        if idx.size == 0:
            return -1, np.zeros(0, dtype=np.int64)
        if idx.size == 1:
            node = int(idx[0])
            return node, self._gpus_unscored(state, pod, node)
        scores = self.score(state, pod, mask)
        node = state.select_node(scores, mask)
        return node, self.choose_gpus(state, pod, node)

    def _gpus_unscored(self, state: ClusterState, pod: Pod, node: int) -> np.ndarray:
        return self.choose_gpus(state, pod, node)

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


# --------------------------------------------------------------------------- score functions
# Each score has a mask-based public form, ``(N,)`` over all nodes, and an index-based ``*_at``
# form that computes only the rows ``idx`` (the feasible nodes): ``f_at(state, pod, idx)`` equals
# ``f(state, pod, mask)[idx]`` for ``idx = np.flatnonzero(mask)``. Both share one formula helper,
# so they agree bit for bit; ``stats`` (a :class:`envs.core.NodeStats` updated to ``state``)
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


# --------------------------------------------------------------------------- simple policies
class RandomPolicy(Policy):
    """A uniformly random feasible node; a sharing pod goes to a uniformly random fitting GPU."""

    name = "Random"

    def score(self, state: ClusterState, pod: Pod, mask: np.ndarray) -> np.ndarray:
        return self.rng.random(state.n_nodes)

    def select(
        self, state: ClusterState, pod: Pod, mask: np.ndarray | None = None
    ) -> tuple[int, np.ndarray]:
        if mask is None:
            mask = state.feasible(pod)
        idx = np.flatnonzero(mask)
        if idx.size == 0:
            return -1, np.zeros(0, dtype=np.int64)
        node = int(idx[self.rng.integers(idx.size)])
        return node, self.choose_gpus(state, pod, node)

    def choose_gpus(self, state: ClusterState, pod: Pod, node: int) -> np.ndarray:
        if pod.is_sharing:
            fit = np.flatnonzero(state.fitting_gpus(pod, node))
            return np.array([fit[self.rng.integers(fit.size)]], dtype=np.int64)
        return state.choose_gpus(pod, node)


class DotProd(Policy):
    """Dot product of normalised free resources and request, lower is better (Kubernetes-style)."""

    name = "DotProd"

    def score(self, state: ClusterState, pod: Pod, mask: np.ndarray) -> np.ndarray:
        return dotprod_scores(state, pod, mask)


class BestFit(Policy):
    """Tightest node: least CPU and GPU left after placing, min-max normalised."""

    name = "BestFit"

    def score(self, state: ClusterState, pod: Pod, mask: np.ndarray) -> np.ndarray:
        return bestfit_scores(state, pod, mask)


class GpuPacking(Policy):
    """Prefer partly used GPUs, then partly used nodes, then idle nodes (smaller first)."""

    name = "GpuPacking"

    def score(self, state: ClusterState, pod: Pod, mask: np.ndarray) -> np.ndarray:
        return gpu_packing_scores(state, pod, mask)


class GpuClustering(Policy):
    """Keep pods of one class (sharing, 1-, 2-, 4-, 8-GPU) together on nodes."""

    name = "GpuClustering"

    def score(self, state: ClusterState, pod: Pod, mask: np.ndarray) -> np.ndarray:
        return gpu_clustering_scores(state, pod, mask)


# --------------------------------------------------------------------------- FGD
@dataclass(frozen=True)
class TypicalPods:
    """The typical pod distribution of a trace (FGD's target workload).

    Attributes:
        cpu_milli, gpu_milli, num_gpu, gpu_spec_mask: ``(M,)`` int64 per typical pod
            (``gpu_milli`` per GPU; CPU-only pods have ``num_gpu == 0``).
        count: ``(M,)`` int64 pods of the trace with that key.
        gpu_spec: ``(M,)`` str raw spec strings.
    """

    cpu_milli: np.ndarray
    gpu_milli: np.ndarray
    num_gpu: np.ndarray
    gpu_spec_mask: np.ndarray
    count: np.ndarray
    gpu_spec: np.ndarray

    @property
    def prob(self) -> np.ndarray:
        """``(M,)`` float64 renormalised frequencies p_m."""
        return self.count / self.count.sum()

    def __len__(self) -> int:
        return len(self.count)

    @classmethod
    def from_trace(cls, trace: PodTrace, coverage: float = 0.95) -> TypicalPods:
        """Keys ``(cpu, per-GPU milli, num_gpu, gpu_spec)`` by count (desc; ties by key desc) until
        their cumulative count reaches ``coverage`` of the pods. CPU-only pods are included."""
        counts: dict[tuple[int, int, int, str], int] = {}
        masks: dict[str, int] = {}
        for c, g, k, s, m in zip(
            trace.cpu_milli.tolist(),
            trace.gpu_milli.tolist(),
            trace.num_gpu.tolist(),
            trace.gpu_spec.tolist(),
            trace.gpu_spec_mask.tolist(),
            strict=True,
        ):
            key = (c, g, k, s if k > 0 else "")
            counts[key] = counts.get(key, 0) + 1
            masks[key[3]] = m if k > 0 else ANY_GPU_MODEL
        items = sorted(counts.items(), key=lambda kv: (kv[1], kv[0]), reverse=True)
        total = len(trace)
        chosen = []
        acc = 0
        for key, cnt in items:
            chosen.append((key, cnt))
            acc += cnt
            if acc >= coverage * total:
                break
        return cls(
            cpu_milli=np.array([k[0] for k, _ in chosen], dtype=np.int64),
            gpu_milli=np.array([k[1] for k, _ in chosen], dtype=np.int64),
            num_gpu=np.array([k[2] for k, _ in chosen], dtype=np.int64),
            gpu_spec_mask=np.array([masks[k[3]] for k, _ in chosen], dtype=np.int64),
            count=np.array([c for _, c in chosen], dtype=np.int64),
            gpu_spec=np.array([k[3] for k, _ in chosen], dtype=str),
        )


def fgd_score_from_delta(delta: np.ndarray) -> np.ndarray:
    """FGD's integer node score ``floor(100 * sigmoid(delta / 1000))`` (delta in milli-GPU)."""
    x = np.asarray(delta, dtype=np.float64) / 1000.0
    if x.ndim:
        np.minimum(np.maximum(x, -700.0, out=x), 700.0, out=x)  # np.clip, without its wrapper
    else:
        x = np.clip(x, -700.0, 700.0)
    return np.floor(100.0 / (1.0 + np.exp(-x))).astype(np.int64)


class FGD(Policy):
    """Fragmentation Gradient Descent: pick the node whose fragmentation grows the least.

    Node fragmentation ``F_n = sum_m p_m frag_n(m)`` over the typical pods m (see
    :class:`TypicalPods`); ``frag_n(m)`` is the idle GPU milli of GPUs too small for m when m fits on
    n (model, enough fitting GPUs, CPU), else all idle GPU milli of n (always for CPU-only m).
    Score ``floor(100 sigmoid((F_now - F_after) / 1000))``. Sums are done in exact integers
    (``count_m * frag``), so an unchanged fragment gives delta 0 and score 50 exactly.

    Per-node statistics (idle below each typical threshold, GPUs at or above it, F_n) are cached and
    refreshed only for nodes whose ``state.version`` changed, so one decision costs O(N M).

    Args:
        typical: the typical pods; ``None``: taken from the ``trace`` given to :meth:`reset`.
        coverage: share of pods the typical set covers (0.95 in the paper).
    """

    name = "FGD"

    def __init__(
        self, typical: TypicalPods | None = None, coverage: float = 0.95, seed: int | None = None
    ) -> None:
        super().__init__(seed)
        self.coverage = coverage
        self._typical_given = typical
        self.typical: TypicalPods | None = None
        self._state: ClusterState | None = None
        self._last_gpu: np.ndarray | None = None
        if typical is not None:
            self._set_typical(typical)

    def _set_typical(self, typical: TypicalPods) -> None:
        self.typical = typical
        gpu_m = typical.num_gpu > 0
        self._g_idx = np.flatnonzero(gpu_m)
        self._thresholds, tix = np.unique(typical.gpu_milli[gpu_m], return_inverse=True)
        self._tix = tix.astype(np.int64)  # (Mg,) threshold index per GPU typical pod
        self._g_cpu = typical.cpu_milli[gpu_m]
        self._g_k = typical.num_gpu[gpu_m]
        self._g_mask = typical.gpu_spec_mask[gpu_m]
        self._g_count = typical.count[gpu_m].astype(np.float64)
        self._total = int(typical.count.sum())
        # plain-Python copies for the one-node paths (_refresh_one, _deltas_one)
        self._thr_list = self._thresholds.tolist()
        self._typ_list = list(
            zip(
                self._tix.tolist(),
                self._g_k.tolist(),
                self._g_cpu.tolist(),
                typical.count[gpu_m].tolist(),
                strict=True,
            )
        )
        self._state = None

    def reset(
        self,
        state: ClusterState,
        *,
        rng: np.random.Generator | None = None,
        trace: PodTrace | None = None,
    ) -> None:
        super().reset(state, rng=rng, trace=trace)
        if self._typical_given is None and trace is not None:
            self._set_typical(TypicalPods.from_trace(trace, self.coverage))
        self._bind(state)

    # -- cache -----------------------------------------------------------------------------
    def _bind(self, state: ClusterState) -> None:
        if self.typical is None:
            raise ConfigError(
                "FGD needs its typical pods: pass typical= or reset(state, trace=...)"
            )
        self._state = state
        n = state.n_nodes
        self._spec_ok = (state.model_bit[:, None] & self._g_mask[None, :]) != 0  # (N, Mg)
        # float64 holds these integers exactly (all sums stay far below 2**53), so the BLAS
        # matrix-vector product in _frag_int is exact whatever its summation order.
        self._below = np.zeros((n, len(self._thresholds)), dtype=np.float64)
        self._cnt = np.zeros((n, len(self._thresholds)), dtype=np.int64)
        self._L = np.zeros(n, dtype=np.float64)
        self._F = np.zeros(n, dtype=np.float64)
        self._F_sum = 0.0
        self._ver = np.full(n, -1, dtype=np.int64)
        self._seen = -1  # state.n_changes when last refreshed
        self._refresh(state)

    def _refresh(self, state: ClusterState) -> None:
        """Bring the per-node statistics up to date with ``state`` (only nodes whose version
        changed are recomputed)."""
        if self._state is not state:
            self._bind(state)
            return
        if state.n_changes == self._seen:
            return
        self._seen = state.n_changes
        stale = (self._ver != state.version).nonzero()[0]
        if stale.size == 0:
            return
        if stale.size <= 2:  # the usual case after one placement: plain Python is cheaper
            for node in stale.tolist():
                self._refresh_one(state, node)
            return
        idle = state.gpu_idle.take(stale, axis=0)  # (S, 8)
        t = self._thresholds[None, None, :]
        below_m = idle[:, :, None] < t
        below = (idle[:, :, None] * below_m).sum(axis=1).astype(np.float64)
        cnt = (~below_m).sum(axis=1)  # absent slots hold 0 idle < every threshold
        tot = idle.sum(axis=1)
        f_new = self._frag_int(below, cnt, tot.astype(np.float64), state.cpu_free[stale], stale)
        self._below[stale] = below
        self._cnt[stale] = cnt
        self._L[stale] = tot
        # F_n are exact integers in float64, so this running sum equals F.sum() exactly
        self._F_sum += float(f_new.sum()) - float(self._F.take(stale).sum())
        self._F[stale] = f_new
        self._ver[stale] = state.version[stale]

    # -- one-node paths: the same integer arithmetic as the vectorised code, in plain Python -----
    def _node_stats_one(self, idle: list[int]) -> tuple[list[int], list[int]]:
        """``below`` (idle milli of GPUs under each threshold) and ``cnt`` (GPUs at or above it)
        of one node with per-GPU idle ``idle``; thresholds ascending, so ``v < t_j`` iff
        ``j >= bisect_right(thresholds, v)``."""
        thr = self._thr_list
        n_t = len(thr)
        add_v = [0] * (n_t + 1)
        add_c = [0] * (n_t + 1)
        for v in idle:
            p = bisect.bisect_right(thr, v)
            add_v[p] += v
            add_c[p] += 1
        below, cnt = [0] * n_t, [0] * n_t
        acc_v = acc_c = 0
        for j in range(n_t):
            acc_v += add_v[j]
            acc_c += add_c[j]
            below[j] = acc_v  # sum of v with bisect position <= j, i.e. v < t_j
            cnt[j] = len(idle) - acc_c
        return below, cnt

    def _frag_one(
        self, below: list[int], cnt: list[int], total_idle: int, cpu: int, spec: list[bool]
    ) -> int:
        """:meth:`_frag_int` for one node state, as an exact Python integer."""
        gain = 0
        for (ti, k, c, count), ok in zip(self._typ_list, spec, strict=True):
            if ok and cnt[ti] >= k and cpu >= c:
                gain += (total_idle - below[ti]) * count
        return total_idle * self._total - gain

    def _refresh_one(self, state: ClusterState, node: int) -> None:
        idle = state.gpu_idle[node].tolist()
        below, cnt = self._node_stats_one(idle)
        tot = sum(idle)
        f_new = self._frag_one(
            below, cnt, tot, int(state.cpu_free[node]), self._spec_ok[node].tolist()
        )
        self._below[node] = below
        self._cnt[node] = cnt
        self._L[node] = tot
        self._F_sum += float(f_new) - float(self._F[node])
        self._F[node] = f_new
        self._ver[node] = state.version[node]

    def _deltas_one(
        self, state: ClusterState, pod: Pod, node: int
    ) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`node_deltas_at` for the single node ``node`` (its statistics are current)."""
        below = [int(x) for x in self._below[node].tolist()]
        cnt = self._cnt[node].tolist()
        tot = int(self._L[node])
        f_now = int(self._F[node])
        cpu = int(state.cpu_free[node]) - pod.cpu_milli
        spec = self._spec_ok[node].tolist()
        if pod.num_gpu == 0:
            d, gpu = f_now - self._frag_one(below, cnt, tot, cpu, spec), -1
        elif not pod.is_sharing:
            k = pod.num_gpu
            after = self._frag_one(below, [c - k for c in cnt], tot - k * GPU_MILLI, cpu, spec)
            idle = state.gpu_idle[node].tolist()
            d, gpu = f_now - after, (idle.index(GPU_MILLI) if GPU_MILLI in idle else 0)
        else:
            g = pod.gpu_milli
            need = max(g, 1)
            n_gpu = int(state.num_gpu[node])
            thr = self._thr_list
            ds: list[int] = []
            cols: list[int] = []
            seen: set[int] = set()
            for i, v in enumerate(state.gpu_idle[node].tolist()[:n_gpu]):
                if v < need or v in seen:  # one candidate per distinct idle value (lowest index)
                    continue
                seen.add(v)
                v2 = v - g
                b = [
                    x - (v if v < t else 0) + (v2 if v2 < t else 0)
                    for x, t in zip(below, thr, strict=True)
                ]
                c = [x - (v >= t) + (v2 >= t) for x, t in zip(cnt, thr, strict=True)]
                ds.append(f_now - self._frag_one(b, c, tot - g, cpu, spec))
                cols.append(i)
            j = 0
            if len(ds) > 1:  # best integer score, the first GPU on ties (as _sharing_deltas)
                j = int(fgd_score_from_delta(np.array(ds, dtype=np.float64) / self._total).argmax())
            d, gpu = ds[j], cols[j]
        return np.array([d], dtype=np.float64) / self._total, np.array([gpu], dtype=np.int64)

    def fragmentation_sum(self, state: ClusterState) -> float:
        """Cluster fragmentation ``sum_n F_n`` in milli-GPU (kept up to date incrementally)."""
        self._refresh(state)
        return self._F_sum / self._total

    def _frag_int(
        self,
        below: np.ndarray,
        cnt: np.ndarray,
        total_idle: np.ndarray,
        cpu: np.ndarray,
        nodes: np.ndarray,
    ) -> np.ndarray:
        """``(S,)`` float64 holding the exact integer ``sum_m count_m * frag(m)`` for S node states.

        Shapes: ``below``, ``cnt`` (S, T); ``total_idle``, ``cpu``, ``nodes`` (S,).
        """
        tix = self._tix
        b = below.take(tix, axis=1)  # (S, Mg)
        fits = (
            (cnt.take(tix, axis=1) >= self._g_k)
            & (cpu[:, None] >= self._g_cpu)
            & self._spec_ok.take(nodes, axis=0)
        )
        gain = np.where(fits, total_idle[:, None] - b, 0.0) @ self._g_count
        return total_idle * self._total - gain

    # -- scoring ---------------------------------------------------------------------------
    def node_deltas(
        self, state: ClusterState, pod: Pod, mask: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """Fragmentation decrease per node and the GPU a sharing pod would use.

        Returns:
            ``delta`` ``(N,)`` float64 ``F_now - F_after`` in milli-GPU (0 outside ``mask``), and
            ``gpu`` ``(N,)`` int64: the chosen GPU for a sharing pod (best integer score, lowest index
            on ties), the first of the k lowest-index idle GPUs for a whole-GPU pod, -1 otherwise.
        """
        n = state.n_nodes
        delta = np.zeros(n, dtype=np.float64)
        gpu = np.full(n, -1, dtype=np.int64)
        idx = np.flatnonzero(mask)
        if idx.size == 0:
            self._refresh(state)
            return delta, gpu
        delta[idx], gpu[idx] = self.node_deltas_at(state, pod, idx)
        return delta, gpu

    def node_deltas_at(
        self, state: ClusterState, pod: Pod, idx: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`node_deltas` on the nodes ``idx`` only (``(S,)`` int64, non-empty): returns
        ``delta`` and ``gpu``, both ``(S,)``, equal to ``node_deltas(...)[i][idx]``."""
        self._refresh(state)
        if idx.size == 1:
            return self._deltas_one(state, pod, int(idx[0]))
        cpu_after = state.cpu_free.take(idx) - pod.cpu_milli
        below, cnt, tot = self._below.take(idx, axis=0), self._cnt.take(idx, axis=0), self._L[idx]
        if pod.num_gpu == 0:
            after = self._frag_int(below, cnt, tot, cpu_after, idx)
            delta_int = self._F.take(idx) - after
            gpu = np.full(idx.size, -1, dtype=np.int64)
        elif not pod.is_sharing:
            k = pod.num_gpu
            after = self._frag_int(below, cnt - k, tot - k * GPU_MILLI, cpu_after, idx)
            delta_int = self._F.take(idx) - after
            gpu = np.argmax(state.gpu_idle.take(idx, axis=0) == GPU_MILLI, axis=1)
        else:
            delta_int, gpu = self._sharing_deltas(state, pod, idx, cpu_after)
        return delta_int / self._total, gpu

    def _sharing_deltas(
        self, state: ClusterState, pod: Pod, idx: np.ndarray, cpu_after: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        g = pod.gpu_milli
        idle = state.gpu_idle.take(idx, axis=0)  # (F, 8)
        fit = (idle >= max(g, 1)) & state.gpu_present.take(idx, axis=0)
        # one candidate per distinct idle value per node (lowest index): identical outcomes
        same = (idle[:, :, None] == idle[:, None, :]) & fit[:, :, None] & _EARLIER[None]
        cand = fit & ~same.any(axis=1)
        rows, cols = np.nonzero(cand)  # row-major: grouped by node, GPU index ascending
        v = idle[rows, cols]
        v2 = v - g
        t = self._thresholds[None, :]
        nodes = idx.take(rows)
        below = (
            self._below.take(nodes, axis=0)
            - np.where(v[:, None] < t, v[:, None], 0)
            + np.where(v2[:, None] < t, v2[:, None], 0)
        )
        cnt = self._cnt.take(nodes, axis=0) - (v[:, None] >= t) + (v2[:, None] >= t)
        after = self._frag_int(below, cnt, self._L.take(nodes) - g, cpu_after.take(rows), nodes)
        d = self._F.take(nodes) - after
        if idx.size == rows.size:  # one candidate GPU per node: nothing to choose
            return d, cols
        sc = fgd_score_from_delta(d / self._total)
        if idx.size == 1:  # the first best-scoring GPU (argmax takes the first maximum)
            j = int(sc.argmax())
            return d[j : j + 1], cols[j : j + 1]
        new_node = np.empty(rows.size, dtype=bool)
        new_node[0] = True
        np.not_equal(rows[1:], rows[:-1], out=new_node[1:])
        starts = new_node.nonzero()[0]
        best = np.maximum.reduceat(sc, starts)
        is_best = sc == np.repeat(best, np.diff(np.append(starts, rows.size)))
        # first best candidate of each node (candidates are in GPU-index order within a node)
        pos = np.where(is_best, np.arange(rows.size), rows.size)
        pick = np.minimum.reduceat(pos, starts)  # one candidate per feasible node, in node order
        return d[pick], cols[pick]

    def score(self, state: ClusterState, pod: Pod, mask: np.ndarray) -> np.ndarray:
        delta, gpu = self.node_deltas(state, pod, mask)
        self._last_gpu = gpu
        return fgd_score_from_delta(delta)

    def choose_gpus(self, state: ClusterState, pod: Pod, node: int) -> np.ndarray:
        if pod.is_sharing and self._last_gpu is not None and self._last_gpu[node] >= 0:
            g = np.array([self._last_gpu[node]], dtype=np.int64)
            self._last_gpu = None
            return g
        return state.choose_gpus(pod, node)

    def _gpus_unscored(self, state: ClusterState, pod: Pod, node: int) -> np.ndarray:
        if pod.is_sharing:
            mask = np.zeros(state.n_nodes, dtype=bool)
            mask[node] = True
            _, gpu = self.node_deltas(state, pod, mask)
            return np.array([gpu[node]], dtype=np.int64)
        return state.choose_gpus(pod, node)


_EARLIER = np.triu(np.ones((MAX_GPUS_PER_NODE, MAX_GPUS_PER_NODE), dtype=bool), k=1)
"""``[i, j]`` True when i < j: GPU j duplicates an earlier fitting GPU i with the same idle milli."""


# --------------------------------------------------------------------------- topology
class TopologyBestEffort(Policy):
    """Topology-aware best effort: multi-GPU pods go where their GPU set has the best links.

    For a pod of k >= 2 whole GPUs, every feasible node proposes its best free k-GPU set under
    NVIDIA go-gpuallocator's pair scores (:func:`data.gpu_alloc.best_gpu_set`, greedy rule); the node
    score is ``1000 * floor(mean pair score of that set) + BestFit score``, so link quality comes first
    (NVLink pairs score 100 per link + the PCIe level, a cross-socket pair 10) and the tightest node
    breaks ties. Other pods (CPU-only, sharing, one GPU) are placed like :class:`BestFit`. The pod gets
    the proposed set.

    Args:
        templates: one :class:`data.topology.NodeTemplate` per node of the state; ``None`` maps each
            node through :func:`data.fleet_io.openb_template_for` (its GPU model and GPU count) at
            :meth:`reset`.
        allocation: ``"greedy"`` or ``"partition"`` (go-gpuallocator's best-effort partition rule).
    """

    name = "TopologyBestEffort"

    def __init__(
        self, templates: list | None = None, allocation: str = "greedy", seed: int | None = None
    ) -> None:
        super().__init__(seed)
        self._templates_given = templates
        self.templates: list | None = templates
        self.allocation = allocation
        self._last_sets: dict[int, tuple[int, ...]] = {}
        self._state: ClusterState | None = None

    def reset(
        self,
        state: ClusterState,
        *,
        rng: np.random.Generator | None = None,
        trace: PodTrace | None = None,
    ) -> None:
        super().reset(state, rng=rng, trace=trace)
        self._bind(state)

    def _bind(self, state: ClusterState) -> None:
        from fleetmind.data.openb import GPU_MODELS

        if self._templates_given is None:
            from fleetmind.data.fleet_io import openb_template_for

            self.templates = [
                openb_template_for(GPU_MODELS[int(m)], int(g)) if g > 0 else None
                for m, g in zip(state.model_id.tolist(), state.num_gpu.tolist(), strict=True)
            ]
        elif len(self._templates_given) != state.n_nodes:
            raise ConfigError(
                f"TopologyBestEffort got {len(self._templates_given)} templates for {state.n_nodes} nodes"
            )
        self._state = state

    def set_scores(
        self, state: ClusterState, pod: Pod, mask: np.ndarray
    ) -> tuple[np.ndarray, dict[int, tuple[int, ...]]]:
        """``(N,)`` int64 mean go-gpuallocator pair score of each feasible node's best k-set, and the sets."""
        from fleetmind.data.gpu_alloc import best_gpu_set_bits, set_score

        if self._state is not state:
            self._bind(state)
        k = pod.num_gpu
        out = np.zeros(state.n_nodes, dtype=np.int64)
        sets: dict[int, tuple[int, ...]] = {}
        free_bits = ((state.gpu_idle == GPU_MILLI) * (1 << np.arange(MAX_GPUS_PER_NODE))).sum(
            axis=1
        )
        pairs = k * (k - 1) // 2
        assert self.templates is not None
        for n in np.flatnonzero(mask).tolist():
            tmpl = self.templates[n]
            gset = best_gpu_set_bits(tmpl, int(free_bits[n]), k, self.allocation)
            if gset is None:
                continue
            sets[n] = gset
            out[n] = set_score(tmpl, gset) // pairs
        return out, sets

    def score(self, state: ClusterState, pod: Pod, mask: np.ndarray) -> np.ndarray:
        fit = bestfit_scores(state, pod, mask)
        if pod.num_gpu < 2:
            return fit
        link, self._last_sets = self.set_scores(state, pod, mask)
        return link * 1000 + fit

    def choose_gpus(self, state: ClusterState, pod: Pod, node: int) -> np.ndarray:
        if pod.num_gpu >= 2:
            gset = self._last_sets.get(node)
            if gset is None:
                _, sets = self.set_scores(state, pod, np.arange(state.n_nodes) == node)
                gset = sets[node]
            self._last_sets = {}
            return np.asarray(gset, dtype=np.int64)
        return state.choose_gpus(pod, node)


# --------------------------------------------------------------------------- registry
POLICIES: dict[str, Callable[..., Policy]] = {
    "Random": RandomPolicy,
    "DotProd": DotProd,
    "GpuClustering": GpuClustering,
    "GpuPacking": GpuPacking,
    "BestFit": BestFit,
    "FGD": FGD,
    "TopologyBestEffort": TopologyBestEffort,
}
"""Policy name -> factory (keyword arguments go to the constructor)."""

PUBLISHED_POLICIES: tuple[str, ...] = (
    "Random",
    "DotProd",
    "GpuClustering",
    "GpuPacking",
    "BestFit",
    "FGD",
)
"""The six policies with published FGD results, in the paper's order."""


def canonical_policy_name(name: str) -> str:
    """The :data:`POLICIES` key matching ``name`` (case-, ``_`` and ``-``-insensitive)."""
    norm = name.replace("_", "").replace("-", "").lower()
    for key in POLICIES:
        if key.lower() == norm:
            return key
    raise ConfigError(f"unknown policy {name!r}; known: {', '.join(POLICIES)}")


def make_policy(name: str, **kw: object) -> Policy:
    """Build the policy called ``name`` (see :data:`POLICIES`)."""
    return POLICIES[canonical_policy_name(name)](**kw)
