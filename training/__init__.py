"""``fleetmind.training``, the folder ``training/``.

The ``fleetmind`` CLI, training and evaluation runs, MLflow tracking and registry.
"""

import fleetmind.data  # noqa: F401 - stops with a clear error when a folder shadows fleetmind
