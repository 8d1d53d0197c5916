"""The placement policy interface (:class:`Policy`): ``reset``, ``score``, ``choose_gpus``, ``select``.

See :mod:`fleetmind.envs.policies` for the interface's contract.
"""

from __future__ import annotations

import numpy as np

from fleetmind.data.openb import PodTrace
from fleetmind.envs.core import ClusterState, Pod


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
