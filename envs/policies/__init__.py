"""``fleetmind.envs.policies``, the folder ``envs/policies/``.

Placement heuristics behind one interface: Random, DotProd, GpuClustering, GpuPacking, BestFit,
FGD and TopologyBestEffort.

Scoring, GPU choice and tie-breaking follow the FGD authors' simulator (Weng et al., USENIX ATC'23,
``docs/placement.md`` gives the rules). Every score is computed
vectorised over the nodes of a :class:`fleetmind.envs.core.ClusterState`.

Interface (:class:`Policy`, :mod:`.base`):

* ``policy.reset(state, *, rng=None, trace=None)``: start of a run. ``rng`` drives Random's choices;
  ``trace`` is the original (un-resampled) trace, from which FGD derives its typical pods.
* ``policy.score(state, pod, mask) -> (N,)``: node scores, higher is better; only entries where
  ``mask`` is True mean anything.
* ``policy.select(state, pod, mask=None) -> (node, gpus)``: the decision. ``mask`` defaults to
  ``state.feasible(pod)``; ``node == -1`` (and empty ``gpus``) when no node is feasible. A single
  feasible node is taken without scoring; otherwise the highest score wins and ties go to the node
  with the best random priority (``state.select_node``).

Modules: :mod:`.scores` (the score functions that the PPO candidate features reuse, all ``(N,)``,
meaningful on ``mask``: :func:`~.scores.bestfit_raw`, :func:`~.scores.bestfit_scores`,
:func:`~.scores.dotprod_scores`, :func:`~.scores.gpu_packing_scores`,
:func:`~.scores.gpu_clustering_scores` and their ``*_at`` forms), :mod:`.heuristics` (Random,
DotProd, BestFit, GpuPacking, GpuClustering), :mod:`.fgd` (:class:`FGD`, whose
:meth:`FGD.node_deltas` gives the fragmentation decrease per node and the GPU a sharing pod would
take, and :class:`TypicalPods`), :mod:`.topology` (TopologyBestEffort) and :mod:`.registry`.

``POLICIES`` maps a name to a factory; ``make_policy(name, **kw)`` builds one (names are matched
case-insensitively; ``bestfit``, ``best_fit`` and ``BestFit`` are the same).
"""

from fleetmind.envs.policies.base import Policy
from fleetmind.envs.policies.fgd import FGD, TypicalPods, fgd_score_from_delta
from fleetmind.envs.policies.heuristics import (
    BestFit,
    DotProd,
    GpuClustering,
    GpuPacking,
    RandomPolicy,
)
from fleetmind.envs.policies.registry import (
    POLICIES,
    PUBLISHED_POLICIES,
    canonical_policy_name,
    make_policy,
)
from fleetmind.envs.policies.topology import TopologyBestEffort

__all__ = [
    "FGD",
    "POLICIES",
    "PUBLISHED_POLICIES",
    "BestFit",
    "DotProd",
    "GpuClustering",
    "GpuPacking",
    "Policy",
    "RandomPolicy",
    "TopologyBestEffort",
    "TypicalPods",
    "canonical_policy_name",
    "fgd_score_from_delta",
    "make_policy",
]
