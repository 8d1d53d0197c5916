"""``fleetmind.rl``, the folder ``rl/``.

The PPO placement agent: policy network, masking, teachers, evaluation and export.
"""

import fleetmind.data  # noqa: F401 - stops with a clear error when a folder shadows fleetmind
