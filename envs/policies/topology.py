"""TopologyBestEffort: multi-GPU pods go where their GPU set has the best links."""

from __future__ import annotations

import numpy as np

from fleetmind.data.errors import ConfigError
from fleetmind.data.fleet_io import openb_template_for
from fleetmind.data.gpu_alloc import best_gpu_set_bits, set_score
from fleetmind.data.openb import GPU_MILLI, GPU_MODELS, PodTrace
from fleetmind.envs.core import MAX_GPUS_PER_NODE, ClusterState, Pod
from fleetmind.envs.policies.base import Policy
from fleetmind.envs.policies.scores import bestfit_scores


# --------------------------------------------------------------------------- topology
class TopologyBestEffort(Policy):
    """Topology-aware best effort: multi-GPU pods go where their GPU set has the best links.

    For a pod of k >= 2 whole GPUs, every feasible node proposes its best free k-GPU set under
    NVIDIA go-gpuallocator's pair scores (:func:`fleetmind.data.gpu_alloc.best_gpu_set`, greedy rule); the node
    score is ``1000 * floor(mean pair score of that set) + BestFit score``, so link quality comes first
    (NVLink pairs score 100 per link + the PCIe level, a cross-socket pair 10) and the tightest node
    breaks ties. Other pods (CPU-only, sharing, one GPU) are placed like :class:`~.heuristics.BestFit`. The pod gets
    the proposed set.

    Args:
        templates: one :class:`fleetmind.data.topology.NodeTemplate` per node of the state; ``None`` maps each
            node through :func:`fleetmind.data.fleet_io.openb_template_for` (its GPU model and GPU count) at
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
        self._last_pod: Pod | None = None  # the pod ``_last_sets`` were scored for
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

        if self._templates_given is None:
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
        self._last_pod = pod
        return link * 1000 + fit

    def choose_gpus(self, state: ClusterState, pod: Pod, node: int) -> np.ndarray:
        if pod.num_gpu >= 2:
            # the sets of the last score() only for this very pod and while still all free: a
            # caller may score one request and place the next without scoring (one feasible node)
            gset = self._last_sets.get(node) if pod is self._last_pod else None
            if gset is not None and (
                len(gset) != pod.num_gpu
                or not all(int(state.gpu_idle[node, g]) == GPU_MILLI for g in gset)
            ):
                gset = None
            if gset is None:
                _, sets = self.set_scores(state, pod, np.arange(state.n_nodes) == node)
                gset = sets[node]
            self._last_sets, self._last_pod = {}, None
            return np.asarray(gset, dtype=np.int64)
        return state.choose_gpus(pod, node)
