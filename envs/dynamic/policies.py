"""Dynamic-mode placement policies (:class:`DynamicPolicy`: ``select(sim, j) -> (node, gpus)``).

The single-cluster node scorers of :mod:`fleetmind.envs.policies` are applied to the whole fleet through
:class:`NodeScorerPolicy`; :class:`LocalityAwarePolicy` is FleetMind's own baseline.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from fleetmind.data.errors import ConfigError
from fleetmind.data.openb import PodTrace
from fleetmind.envs import policies as pol
from fleetmind.envs.dynamic.fleet import DynFleet, best_bottleneck_set
from fleetmind.envs.dynamic.model import runtime_factor
from fleetmind.envs.dynamic.sim import DynamicPolicy, DynamicSim


# Policies
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


class NodeScorerPolicy:
    """Applies a single-cluster policy of :mod:`fleetmind.envs.policies` to the whole multi-cluster fleet.

    The fleet's nodes form one :class:`fleetmind.envs.core.ClusterState`, so the policy scores every feasible
    node of every cluster exactly as it would in one big cluster: it ignores clusters, WAN, data
    location, GPU speed and (except TopologyBestEffort's GPU choice) link speeds. Its node and GPU
    choice are used as given. Ties go to the seeded node priority of the simulator's state.

    Args:
        policy: an :class:`fleetmind.envs.policies.Policy` (``reset(state, rng=, trace=)``,
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
      decrease over the trace's typical pods, :class:`fleetmind.envs.policies.FGD`), then those within
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
"""Names of the :mod:`fleetmind.envs.policies` heuristics evaluated in dynamic mode."""

OWN_POLICIES: dict[str, Callable[..., DynamicPolicy]] = {"LocalityAware": LocalityAwarePolicy}
"""Dynamic-mode policies defined here."""


def available_policies() -> list[str]:
    """Policy names :func:`make_dynamic_policy` accepts (the heuristics that exist, then ours)."""

    return [n for n in HEURISTIC_NAMES if n in pol.POLICIES] + list(OWN_POLICIES)


def make_dynamic_policy(
    name: str, trace: PodTrace | None, fleet: DynFleet, seed: int
) -> DynamicPolicy:
    """A dynamic-mode policy by name: a heuristic of :mod:`fleetmind.envs.policies` (via
    :class:`NodeScorerPolicy`) or one of :data:`OWN_POLICIES`.

    Raises:
        ConfigError: unknown policy name.
    """
    own = {k.lower(): v for k, v in OWN_POLICIES.items()}
    if name.replace("_", "").replace("-", "").lower() in own:
        return own[name.replace("_", "").replace("-", "").lower()](trace=trace)

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


__all__ = [
    "HEURISTIC_NAMES",
    "LocalityAwarePolicy",
    "NodeScorerPolicy",
    "available_policies",
    "estimate_completion",
    "make_dynamic_policy",
]
