"""``fleetmind.serving``, the folder ``serving/``.

The FastAPI service: routers, schemas, model registry, telemetry and persistence.

Rooms by job: :mod:`.app` builds the app from the routers and :mod:`.middleware`, with the
services of :mod:`.deps`; :mod:`.rca` is the synchronous RCA path (``POST /api/v1/rca``),
:mod:`.scheduler` GPU placement and the kube-scheduler extender, :mod:`.ui` the ``/ui/`` pages,
:mod:`.routers` the other resources and :mod:`.telemetry` the fleet's live state.
"""

import fleetmind.data  # noqa: F401 - stops with a clear error when a folder shadows fleetmind
