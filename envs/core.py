"""Vectorised numpy cluster state for GPU placement: feasibility, placement, release.

One :class:`ClusterState` holds a fleet of N nodes with up to 8 GPUs each. All quantities are
integers: CPU in milli-cores, memory in MiB, GPU in milli-GPU (one GPU = 1000).

API (stable; other modules build on it):

* ``Pod(cpu_milli, memory_mib, num_gpu, gpu_milli, gpu_spec_mask=ANY_GPU_MODEL)``: a request
  (a NamedTuple). ``num_gpu == 0``: CPU-only. ``num_gpu == 1 and gpu_milli < 1000``: GPU-sharing
  pod (one GPU with ``gpu_milli`` idle). Otherwise ``num_gpu`` whole GPUs. ``pod_from_trace(trace, i)``
  builds one from a :class:`fleetmind.data.openb.PodTrace` row. ``pod.pod_class``: -1 CPU-only, 0 sharing,
  k for a k-GPU pod (used by GpuClustering).
* ``ClusterState(cpu_milli, memory_mib, num_gpu, model_id, priority=None, names=None)`` or
  ``ClusterState.from_openb(nodes, priority=None)``. Arrays (read them, do not write them):

  ================  ==========  =================================================================
  attribute         shape       meaning
  ================  ==========  =================================================================
  ``cpu_cap``       (N,)        CPU capacity, milli-cores
  ``mem_cap``       (N,)        memory capacity, MiB
  ``num_gpu``       (N,)        GPUs per node (0..8)
  ``model_id``      (N,)        GPU model id into ``data.openb.GPU_MODELS`` (-1: no GPU)
  ``model_bit``     (N,)        ``1 << model_id`` (0 for GPU-less nodes)
  ``gpu_present``   (N, 8)      bool, GPU slot exists
  ``priority``      (N,)        tie-break rank, a permutation of 0..N-1; LOWER rank wins ties
  ``cpu_free``      (N,)        free CPU, milli-cores
  ``mem_free``      (N,)        free memory, MiB
  ``gpu_idle``      (N, 8)      idle milli-GPU per GPU (0 on absent slots)
  ``class_count``   (N, 9)      GPU pods on the node per class (0 = sharing, k = k-GPU)
  ``version``       (N,)        incremented whenever a node changes or on reset (for caches)
  ================  ==========  =================================================================

* ``state.feasible(pod) -> (N,) bool``: CPU, memory, GPU model (``gpu_spec``), and GPUs (a sharing
  pod needs one GPU with ``>= gpu_milli`` idle; a k-GPU pod k fully idle GPUs; CPU-only nothing).
* ``state.fitting_gpus(pod, node) -> (8,) bool``: GPUs of ``node`` that can take (a share of) the pod.
* ``state.choose_gpus(pod, node, rule="tightest") -> (k,) int``: the GPU choice inside a node.
  ``"tightest"``: a sharing pod goes to the fitting GPU with the least idle milli (lowest index on
  ties); ``"first"``: the lowest-index fitting GPU. A k-GPU pod always takes the k lowest-index fully
  idle GPUs. CPU-only pods get an empty array.
* ``state.place(pod, node, gpus)`` / ``state.release(pod, node, gpus)``: allocate / give back.
  Invalid requests raise :class:`PlacementError`.
* ``state.select_node(scores, mask) -> int``: highest score among ``mask``, ties to the lowest
  ``priority`` rank; -1 when the mask is empty.
* ``state.n_changes`` (int): counts ``place``, ``release`` and ``reset`` calls, so a cache can
  tell in O(1) that nothing changed since it last looked (``version`` says which nodes did).
* ``state.allocated_gpu_milli`` (int, maintained), ``state.gpu_capacity_milli``,
  ``state.gpu_idle_total() -> (N,)``, ``state.full_idle_count() -> (N,)``, ``state.copy()``,
  ``state.reset()`` (empty cluster, same priority).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from fleetmind.data.errors import FleetMindError
from fleetmind.data.openb import ANY_GPU_MODEL, GPU_MILLI, OpenbNodes, PodTrace

MAX_GPUS_PER_NODE = 8
N_POD_CLASSES = MAX_GPUS_PER_NODE + 1
_BIG = np.int64(1 << 40)


def rows_any(b: np.ndarray) -> np.ndarray:
    """``(n,)`` bool: ``b.any(axis=1)`` for a C-contiguous ``(n, 8)`` bool array.

    The 8 bools of a row are read as one uint64, which is several times faster than numpy's
    row-wise reduction over such a short axis.
    """
    return b.view(np.uint64).reshape(-1) != 0


_ALL_TRUE = np.uint64(0x0101010101010101)


def rows_all(b: np.ndarray) -> np.ndarray:
    """``(n,)`` bool: ``b.all(axis=1)`` for a C-contiguous ``(n, 8)`` bool array."""
    return b.view(np.uint64).reshape(-1) == _ALL_TRUE


def rows_count(b: np.ndarray) -> np.ndarray:
    """``(n,)`` uint8: ``b.sum(axis=1)`` for a C-contiguous ``(n, 8)`` bool array (cast before
    arithmetic that can go negative)."""
    return np.bitwise_count(b.view(np.uint64).reshape(-1))


class PlacementError(FleetMindError):
    """A placement or release that the node cannot honour (infeasible node, wrong GPUs)."""


class Pod(NamedTuple):
    """One placement request (integers: milli-cores, MiB, GPUs, milli-GPU per GPU, model bitmask)."""

    cpu_milli: int
    memory_mib: int
    num_gpu: int
    gpu_milli: int
    gpu_spec_mask: int = ANY_GPU_MODEL

    @property
    def is_cpu_only(self) -> bool:
        return self.num_gpu == 0

    @property
    def is_sharing(self) -> bool:
        return self.num_gpu == 1 and self.gpu_milli < GPU_MILLI

    @property
    def gpu_request(self) -> int:
        """Total GPU request, milli-GPU."""
        return self.num_gpu * self.gpu_milli

    @property
    def pod_class(self) -> int:
        """-1 CPU-only, 0 GPU-sharing, k for a pod of k whole GPUs."""
        if self.num_gpu == 0:
            return -1
        if self.is_sharing:
            return 0
        return self.num_gpu


def pod_from_trace(trace: PodTrace, i: int) -> Pod:
    """The :class:`Pod` for row ``i`` of ``trace``."""
    return Pod(
        int(trace.cpu_milli[i]),
        int(trace.memory_mib[i]),
        int(trace.num_gpu[i]),
        int(trace.gpu_milli[i]),
        int(trace.gpu_spec_mask[i]),
    )


def pods_from_trace(trace: PodTrace) -> list[Pod]:
    """All pods of ``trace`` as :class:`Pod` tuples, in trace order."""
    cols = zip(
        trace.cpu_milli.tolist(),
        trace.memory_mib.tolist(),
        trace.num_gpu.tolist(),
        trace.gpu_milli.tolist(),
        trace.gpu_spec_mask.tolist(),
        strict=True,
    )
    return [Pod(*c) for c in cols]


class ClusterState:
    """Free resources of a fleet of GPU nodes (see the module docstring for the attributes).

    Args:
        cpu_milli: ``(N,)`` CPU capacity per node, milli-cores.
        memory_mib: ``(N,)`` memory capacity per node, MiB.
        num_gpu: ``(N,)`` GPUs per node, 0..8.
        model_id: ``(N,)`` GPU model id per node (-1 for GPU-less nodes).
        priority: ``(N,)`` tie-break ranks (a permutation of 0..N-1, lower wins);
            ``None`` = node index order.
        names: optional ``(N,)`` node names.
    """

    def __init__(
        self,
        cpu_milli: np.ndarray,
        memory_mib: np.ndarray,
        num_gpu: np.ndarray,
        model_id: np.ndarray,
        priority: np.ndarray | None = None,
        names: np.ndarray | None = None,
    ) -> None:
        self.cpu_cap = np.asarray(cpu_milli, dtype=np.int64).copy()
        self.mem_cap = np.asarray(memory_mib, dtype=np.int64).copy()
        self.num_gpu = np.asarray(num_gpu, dtype=np.int64).copy()
        self.model_id = np.asarray(model_id, dtype=np.int64).copy()
        n = len(self.cpu_cap)
        if not (len(self.mem_cap) == len(self.num_gpu) == len(self.model_id) == n):
            raise ValueError("cpu_milli, memory_mib, num_gpu and model_id must have equal length")
        if (self.num_gpu < 0).any() or (self.num_gpu > MAX_GPUS_PER_NODE).any():
            raise ValueError(f"num_gpu must be within 0..{MAX_GPUS_PER_NODE}")
        self.n_nodes = n
        self.model_bit = np.where(
            self.model_id >= 0, np.left_shift(np.int64(1), np.maximum(self.model_id, 0)), 0
        ).astype(np.int64)
        self.gpu_present = np.arange(MAX_GPUS_PER_NODE)[None, :] < self.num_gpu[:, None]
        self.names = (
            np.asarray(names, dtype=str)
            if names is not None
            else np.array([f"node-{i}" for i in range(n)])
        )
        if priority is None:
            priority = np.arange(n)
        self.priority = np.asarray(priority, dtype=np.int64).copy()
        if len(self.priority) != n:
            raise ValueError("priority must have one entry per node")
        self.gpu_capacity_milli = int(self.num_gpu.sum()) * GPU_MILLI
        self.reset()

    @classmethod
    def from_openb(cls, nodes: OpenbNodes, priority: np.ndarray | None = None) -> ClusterState:
        """A state for an openb node list (see :func:`fleetmind.data.openb.load_openb_nodes`)."""
        return cls(
            nodes.cpu_milli, nodes.memory_mib, nodes.num_gpu, nodes.model_id, priority, nodes.names
        )

    # ----------------------------------------------------------------- bookkeeping
    def reset(self) -> None:
        """Empty the cluster (every resource free); the priority is kept."""
        self.cpu_free = self.cpu_cap.copy()
        self.mem_free = self.mem_cap.copy()
        self.gpu_idle = np.where(self.gpu_present, GPU_MILLI, 0).astype(np.int64)
        self.class_count = np.zeros((self.n_nodes, N_POD_CLASSES), dtype=np.int64)
        # versions keep counting across resets, so a (node, version) pair never names two
        # different node states of this object (caches keyed by version stay valid)
        old = getattr(self, "version", None)
        self.version = np.zeros(self.n_nodes, dtype=np.int64) if old is None else old + 1
        self.allocated_gpu_milli = 0
        self.n_changes = getattr(self, "n_changes", 0) + 1

    def copy(self) -> ClusterState:
        """An independent copy (same capacities and priority, same usage)."""
        new = object.__new__(ClusterState)
        for k, v in self.__dict__.items():
            new.__dict__[k] = v.copy() if isinstance(v, np.ndarray) else v
        return new

    def set_priority(self, priority: np.ndarray) -> None:
        """Replace the tie-break ranks (``(N,)``, lower wins)."""
        p = np.asarray(priority, dtype=np.int64)
        if p.shape != (self.n_nodes,):
            raise ValueError("priority must have one entry per node")
        self.priority = p.copy()

    def gpu_idle_total(self) -> np.ndarray:
        """``(N,)`` idle milli-GPU summed over each node's GPUs."""
        return self.gpu_idle.sum(axis=1)

    def full_idle_count(self) -> np.ndarray:
        """``(N,)`` number of fully idle GPUs per node."""
        return rows_count(self.gpu_idle == GPU_MILLI).astype(np.int64)

    # ----------------------------------------------------------------- feasibility
    def feasible(self, pod: Pod) -> np.ndarray:
        """``(N,)`` bool: nodes that can host ``pod`` now."""
        ok = (self.cpu_free >= pod.cpu_milli) & (self.mem_free >= pod.memory_mib)
        if pod.num_gpu == 0:
            return ok
        if pod.gpu_spec_mask != ANY_GPU_MODEL:
            ok &= (self.model_bit & pod.gpu_spec_mask) != 0
        else:
            ok &= self.num_gpu > 0
        if pod.num_gpu == 1:
            # sharing or one whole GPU: one GPU with enough idle (absent slots hold 0 idle)
            ok &= rows_any(self.gpu_idle >= max(pod.gpu_milli, 1))
        else:
            ok &= rows_count(self.gpu_idle == GPU_MILLI) >= pod.num_gpu
        return ok

    def fitting_gpus(self, pod: Pod, node: int) -> np.ndarray:
        """``(8,)`` bool: GPUs of ``node`` that can take the pod (or its share)."""
        idle = self.gpu_idle[node]
        if pod.num_gpu == 0:
            return np.zeros(MAX_GPUS_PER_NODE, dtype=bool)
        if pod.is_sharing:
            return (idle >= max(pod.gpu_milli, 1)) & self.gpu_present[node]
        return idle == GPU_MILLI

    def choose_gpus(self, pod: Pod, node: int, rule: str = "tightest") -> np.ndarray:
        """The GPUs a pod gets on ``node`` (see the module docstring for the rules).

        Returns:
            ``(num_gpu,)`` int64 GPU indices; empty for CPU-only pods.
        """
        if pod.num_gpu == 0:
            return np.zeros(0, dtype=np.int64)
        fit = self.fitting_gpus(pod, node)
        if pod.is_sharing:
            if rule == "tightest":
                idle = np.where(fit, self.gpu_idle[node], _BIG)
                return np.array([int(np.argmin(idle))], dtype=np.int64)
            if rule == "first":
                return np.flatnonzero(fit)[:1].astype(np.int64)
            raise ValueError(f"unknown GPU choice rule {rule!r}")
        return np.flatnonzero(fit)[: pod.num_gpu].astype(np.int64)

    def select_node(self, scores: np.ndarray, mask: np.ndarray) -> int:
        """Index of the highest score among ``mask``; ties go to the lowest priority rank; -1 if none."""
        idx = np.flatnonzero(mask)
        if idx.size == 0:
            return -1
        s = scores[idx]
        best = idx[s == s.max()]
        if best.size == 1:
            return int(best[0])
        return int(best[np.argmin(self.priority[best])])

    # ----------------------------------------------------------------- mutation
    def place(self, pod: Pod, node: int, gpus: np.ndarray | list[int] | None = None) -> np.ndarray:
        """Allocate ``pod`` on ``node`` using ``gpus`` (``None``: :meth:`choose_gpus` ``"tightest"``).

        Returns:
            The GPU indices used.

        Raises:
            PlacementError: the node lacks CPU, memory, the right GPU model, or the given GPUs
                cannot take the pod.
        """
        node = int(node)
        if not 0 <= node < self.n_nodes:
            raise PlacementError(f"node index {node} out of range 0..{self.n_nodes - 1}")
        if self.cpu_free[node] < pod.cpu_milli or self.mem_free[node] < pod.memory_mib:
            raise PlacementError(f"node {self.names[node]} lacks CPU or memory for {pod}")
        if pod.num_gpu > 0:
            if pod.gpu_spec_mask != ANY_GPU_MODEL and not (
                self.model_bit[node] & pod.gpu_spec_mask
            ):
                raise PlacementError(
                    f"node {self.names[node]} GPU model is not allowed by the pod's gpu_spec"
                )
            if gpus is None:
                gpus = self.choose_gpus(pod, node)
            g = np.asarray(gpus, dtype=np.int64).reshape(-1)
            gl = g.tolist()  # checks on Python ints: a placement touches at most 8 GPUs
            if len(gl) != pod.num_gpu or len(set(gl)) != len(gl):
                raise PlacementError(f"pod needs {pod.num_gpu} distinct GPUs, got {gl}")
            n_gpu = int(self.num_gpu[node])
            if any(x < 0 or x >= n_gpu for x in gl):
                raise PlacementError(f"GPU index out of range on node {self.names[node]}: {gl}")
            need = pod.gpu_milli if pod.is_sharing else GPU_MILLI
            row = self.gpu_idle[node]
            idle = row.tolist()
            if any(idle[x] < max(need, 1) for x in gl):
                raise PlacementError(f"GPUs {gl} of node {self.names[node]} lack idle capacity")
            used = pod.gpu_milli if pod.is_sharing else GPU_MILLI
            for x in gl:
                row[x] = idle[x] - used
            self.allocated_gpu_milli += used * len(gl)
            self.class_count[node, pod.pod_class] += 1
        else:
            g = np.zeros(0, dtype=np.int64)
        self.cpu_free[node] -= pod.cpu_milli
        self.mem_free[node] -= pod.memory_mib
        self.version[node] += 1
        self.n_changes += 1
        return g

    def release(self, pod: Pod, node: int, gpus: np.ndarray | list[int]) -> None:
        """Give back what :meth:`place` allocated for ``pod`` on ``node`` with ``gpus``.

        Raises:
            PlacementError: the release would exceed a capacity (it was never placed there).
        """
        node = int(node)
        g = np.asarray(gpus, dtype=np.int64).reshape(-1)
        if g.size != pod.num_gpu:
            raise PlacementError(f"pod held {pod.num_gpu} GPUs, release names {g.tolist()}")
        if self.cpu_free[node] + pod.cpu_milli > self.cpu_cap[node] or (
            self.mem_free[node] + pod.memory_mib > self.mem_cap[node]
        ):
            raise PlacementError(
                f"release on node {self.names[node]} exceeds its CPU or memory capacity"
            )
        if pod.num_gpu > 0:
            used = pod.gpu_milli if pod.is_sharing else GPU_MILLI
            if (self.gpu_idle[node, g] + used > GPU_MILLI).any() or self.class_count[
                node, pod.pod_class
            ] <= 0:
                raise PlacementError(
                    f"release on node {self.names[node]} exceeds GPU capacity {g.tolist()}"
                )
            self.gpu_idle[node, g] += used
            self.allocated_gpu_milli -= used * g.size
            self.class_count[node, pod.pod_class] -= 1
        self.cpu_free[node] += pod.cpu_milli
        self.mem_free[node] += pod.memory_mib
        self.version[node] += 1
        self.n_changes += 1


class NodeStats:
    """Per-node quantities derived from a :class:`ClusterState`, recomputed by :meth:`update` only
    for the nodes whose ``state.version`` changed (for per-decision feature code).

    Attributes (read them, do not write them; current after :meth:`update`):
        idle_total: ``(N,)`` int64 idle milli-GPU per node (``state.gpu_idle_total()``).
        max_idle: ``(N,)`` int64 idle milli-GPU of the node's most idle GPU (0 without GPUs).
        full_idle: ``(N,)`` int64 fully idle GPUs per node (``state.full_idle_count()``).
        idle_t: ``(8, N)`` int64 ``state.gpu_idle`` transposed and C-contiguous: a reduction over
            each node's GPUs runs along axis 0, several times faster in numpy than along the short
            axis 1 of ``gpu_idle``.
        n_classes: ``(N,)`` int64 number of pod classes with a pod on the node
            (``(state.class_count > 0).sum(axis=1)``).
    """

    def __init__(self) -> None:
        self.state: ClusterState | None = None
        self._seen = -1

    def update(self, state: ClusterState) -> None:
        """Bring the statistics up to date with ``state`` (binding to it if it is a new one)."""
        if state is not self.state:
            n = state.n_nodes
            self.state = state
            self.idle_total = np.zeros(n, dtype=np.int64)
            self.max_idle = np.zeros(n, dtype=np.int64)
            self.full_idle = np.zeros(n, dtype=np.int64)
            self.idle_t = np.zeros((MAX_GPUS_PER_NODE, n), dtype=np.int64)
            self.n_classes = np.zeros(n, dtype=np.int64)
            self._ver = np.full(n, -1, dtype=np.int64)
            self._spec_ok: dict[int, np.ndarray] = {}
            self._has_gpu = state.num_gpu > 0
        elif state.n_changes == self._seen:
            return
        self._seen = state.n_changes
        stale = (self._ver != state.version).nonzero()[0]
        if stale.size == 0:
            return
        idle = state.gpu_idle.take(stale, axis=0)  # (S, 8)
        self.idle_total[stale] = idle.sum(axis=1)
        self.max_idle[stale] = idle.max(axis=1)
        self.full_idle[stale] = rows_count(idle == GPU_MILLI)
        self.idle_t[:, stale] = idle.T
        self.n_classes[stale] = (state.class_count.take(stale, axis=0) > 0).sum(axis=1)
        self._ver[stale] = state.version.take(stale)

    def feasible(self, state: ClusterState, pod: Pod) -> np.ndarray:
        """``state.feasible(pod)``, the same ``(N,)`` bool, from the statistics (updated here):
        a node has a GPU with ``>= m`` idle iff its most idle GPU has."""
        self.update(state)
        ok = (state.cpu_free >= pod.cpu_milli) & (state.mem_free >= pod.memory_mib)
        if pod.num_gpu == 0:
            return ok
        if pod.gpu_spec_mask != ANY_GPU_MODEL:
            spec = self._spec_ok.get(pod.gpu_spec_mask)
            if spec is None:
                spec = self._spec_ok[pod.gpu_spec_mask] = (state.model_bit & pod.gpu_spec_mask) != 0
            ok &= spec
        else:
            ok &= self._has_gpu
        if pod.num_gpu == 1:
            ok &= self.max_idle >= max(pod.gpu_milli, 1)
        else:
            ok &= self.full_idle >= pod.num_gpu
        return ok
