"""``fleetmind.envs``, the folder ``envs/``.

The placement simulator, its gymnasium environments and the heuristic policies.
"""

from gymnasium.envs.registration import register, registry

import fleetmind.data  # noqa: F401 - stops with a clear error when a folder shadows fleetmind

if "fleetmind/GpuPlacement-v0" not in registry:
    register(
        id="fleetmind/GpuPlacement-v0",
        entry_point="fleetmind.envs.gpu_placement_env:GpuPlacementEnv",
    )

if "fleetmind/MultiClusterPlacement-v0" not in registry:
    register(
        id="fleetmind/MultiClusterPlacement-v0",
        entry_point="fleetmind.envs.multicluster_env:MultiClusterPlacementEnv",
    )
