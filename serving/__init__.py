"""FleetMind `serving` package."""

import fleetmind.data  # noqa: F401 - stops with a clear error when a folder shadows fleetmind
