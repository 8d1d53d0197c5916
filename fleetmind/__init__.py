"""FleetMind: root-cause analysis and learned GPU placement for fleets of GPU clusters.

The library's parts live in subpackages: :mod:`fleetmind.data` (fleets, graphs, traces, datasets),
:mod:`fleetmind.rca` (rankers and metrics), :mod:`fleetmind.envs` (placement simulators, gymnasium
envs and heuristics), :mod:`fleetmind.rl` (the placement agent), :mod:`fleetmind.training`
(training and evaluation runs), :mod:`fleetmind.serving` (the FastAPI service),
:mod:`fleetmind.models` (the released models) and :mod:`fleetmind.cli` (the ``fleetmind``
command). In a source checkout they are the top-level folders of the same names (``rca/`` is
``fleetmind.rca``), mapped under this namespace by ``package-dir`` in ``pyproject.toml``;
``docs/layout.md`` lists every package with its folder.

The names below are the small public API. They load on first use, so ``import fleetmind`` stays
cheap (no torch until a model is asked for)::

    >>> import fleetmind
    >>> ranker = fleetmind.GATAnalyzer.load(None)  # the released GAT  # doctest: +SKIP
    >>> app = fleetmind.create_app()                          # doctest: +SKIP
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.2.0"

_API: dict[str, str] = {
    # root-cause analysis
    "GATAnalyzer": "fleetmind.rca.gat_analyzer",
    "RCAResult": "fleetmind.rca.base",
    "RankedCause": "fleetmind.rca.base",
    "DependencyGraph": "fleetmind.data.graph",
    # placement
    "GpuPlacementEnv": "fleetmind.envs.gpu_placement_env",
    "MultiClusterPlacementEnv": "fleetmind.envs.multicluster_env",
    "make_policy": "fleetmind.envs.policies",
    "load_ppo_policy": "fleetmind.rl.policy_adapter",
    # service
    "create_app": "fleetmind.serving.app",
}

__all__ = [
    "DependencyGraph",
    "GATAnalyzer",
    "GpuPlacementEnv",
    "MultiClusterPlacementEnv",
    "RCAResult",
    "RankedCause",
    "__version__",
    "create_app",
    "load_ppo_policy",
    "make_policy",
]

if TYPE_CHECKING:  # pragma: no cover - for type checkers and IDEs only
    from fleetmind.data.graph import DependencyGraph
    from fleetmind.envs.gpu_placement_env import GpuPlacementEnv
    from fleetmind.envs.multicluster_env import MultiClusterPlacementEnv
    from fleetmind.envs.policies import make_policy
    from fleetmind.rca.base import RankedCause, RCAResult
    from fleetmind.rca.gat_analyzer import GATAnalyzer
    from fleetmind.rl.policy_adapter import load_ppo_policy
    from fleetmind.serving.app import create_app


def __getattr__(name: str) -> Any:
    """Import a public name on first use (PEP 562)."""
    module = _API.get(name)
    if module is None:
        raise AttributeError(f"module 'fleetmind' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
