"""``fleetmind.training``, the folder ``training/``.

Training and evaluation runs, MLflow tracking and registry (the ``fleetmind`` command that starts
them is :mod:`fleetmind.cli`).
"""

import fleetmind.data  # noqa: F401 - stops with a clear error when a folder shadows fleetmind
