"""The simple placement heuristics: Random, DotProd, BestFit, GpuPacking and GpuClustering."""

from __future__ import annotations

import numpy as np

from fleetmind.envs.core import ClusterState, Pod
from fleetmind.envs.policies.base import Policy
from fleetmind.envs.policies.scores import (
    bestfit_scores,
    dotprod_scores,
    gpu_clustering_scores,
    gpu_packing_scores,
)


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
