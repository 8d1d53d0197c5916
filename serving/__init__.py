"""``fleetmind.serving``, the folder ``serving/``.

The FastAPI service: routers, schemas, model registry, telemetry and persistence.
"""

import fleetmind.data  # noqa: F401 - stops with a clear error when a folder shadows fleetmind
