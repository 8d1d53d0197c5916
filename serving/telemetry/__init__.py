"""``fleetmind.serving.telemetry``, the folder ``serving/telemetry/``.

Telemetry plug-ins: where the service learns the live state of the fleet.

``sim`` (the simulator's fleet), ``nvml`` (local GPUs through pynvml) and ``prometheus`` (a
DCGM-exporter ``/metrics`` endpoint) implement :class:`fleetmind.serving.telemetry.base.TelemetrySource`.
"""

from fleetmind.serving.telemetry.base import (
    FleetSnapshot,
    GpuState,
    NodeState,
    TelemetrySource,
    make_source,
)

__all__ = ["FleetSnapshot", "GpuState", "NodeState", "TelemetrySource", "make_source"]
