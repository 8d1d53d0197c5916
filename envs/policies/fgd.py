"""Fragmentation Gradient Descent (FGD, Weng et al., USENIX ATC'23) and its typical pods."""

from __future__ import annotations

import bisect
from dataclasses import dataclass

import numpy as np

from fleetmind.data.errors import ConfigError
from fleetmind.data.openb import ANY_GPU_MODEL, GPU_MILLI, PodTrace
from fleetmind.envs.core import MAX_GPUS_PER_NODE, ClusterState, Pod
from fleetmind.envs.policies.base import Policy


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


def typical_to_json(typical: TypicalPods) -> dict[str, list]:
    """JSON-able form of FGD's typical pods (saved in ``metadata.json``)."""
    return {
        "cpu_milli": typical.cpu_milli.tolist(),
        "gpu_milli": typical.gpu_milli.tolist(),
        "num_gpu": typical.num_gpu.tolist(),
        "gpu_spec_mask": typical.gpu_spec_mask.tolist(),
        "count": typical.count.tolist(),
        "gpu_spec": typical.gpu_spec.tolist(),
    }


def typical_from_json(d: dict[str, list]) -> TypicalPods:
    """Inverse of :func:`typical_to_json`."""
    i64 = {k: np.asarray(d[k], dtype=np.int64) for k in ("cpu_milli", "gpu_milli", "num_gpu")}
    return TypicalPods(
        gpu_spec_mask=np.asarray(d["gpu_spec_mask"], dtype=np.int64),
        count=np.asarray(d["count"], dtype=np.int64),
        gpu_spec=np.asarray(d["gpu_spec"], dtype=str),
        **i64,
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
