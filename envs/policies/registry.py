"""The policy registry: names to factories (:data:`POLICIES`) and :func:`make_policy`."""

from __future__ import annotations

from collections.abc import Callable

from fleetmind.data.errors import ConfigError
from fleetmind.envs.policies.base import Policy
from fleetmind.envs.policies.fgd import FGD
from fleetmind.envs.policies.heuristics import (
    BestFit,
    DotProd,
    GpuClustering,
    GpuPacking,
    RandomPolicy,
)
from fleetmind.envs.policies.topology import TopologyBestEffort

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
