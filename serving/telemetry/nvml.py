"""The ``nvml`` telemetry source: the GPUs of this host through pynvml (``nvidia-ml-py``).

A host without the NVML library (no NVIDIA driver) raises :class:`NotAvailableError` at startup with a
message that names the other sources, instead of a traceback.
"""

from __future__ import annotations

import socket
import time
from typing import Any

from fleetmind.data.errors import NotAvailableError
from fleetmind.serving.telemetry.base import (
    FleetSnapshot,
    GpuState,
    NodeState,
    TelemetrySource,
    free_milli_from_memory,
)

_OTHERS = "use FLEETMIND_TELEMETRY=prometheus (a DCGM exporter) or FLEETMIND_TELEMETRY=sim"


class NvmlSource(TelemetrySource):
    """Local GPUs via NVML: utilisation (%), framebuffer used/total (MiB), XID-free health."""

    name = "nvml"

    def __init__(self, cluster: str = "local", ttl_s: float = 5.0) -> None:
        super().__init__(ttl_s)
        try:
            import pynvml
        except ImportError:
            raise NotAvailableError(
                f"telemetry source 'nvml' needs the nvidia-ml-py package; {_OTHERS}"
            ) from None
        try:
            pynvml.nvmlInit()
        except pynvml.NVMLError as err:
            raise NotAvailableError(
                f"telemetry source 'nvml': NVML is not available on this host ({err}); {_OTHERS}"
            ) from None
        self._nvml: Any = pynvml
        self.cluster = cluster
        self.host = socket.gethostname()

    def collect(self) -> FleetSnapshot:
        nv = self._nvml
        gpus = []
        for i in range(nv.nvmlDeviceGetCount()):
            h = nv.nvmlDeviceGetHandleByIndex(i)
            name = nv.nvmlDeviceGetName(h)
            name = name.decode() if isinstance(name, bytes) else str(name)
            uuid = nv.nvmlDeviceGetUUID(h)
            uuid = uuid.decode() if isinstance(uuid, bytes) else str(uuid)
            mem = nv.nvmlDeviceGetMemoryInfo(h)
            try:
                util = float(nv.nvmlDeviceGetUtilizationRates(h).gpu)
            except nv.NVMLError:
                util = None
            used, total = mem.used / 2**20, mem.total / 2**20
            gpus.append(
                GpuState(
                    index=i,
                    model=name,
                    uuid=uuid,
                    util_pct=util,
                    mem_used_mib=used,
                    mem_total_mib=total,
                    xid_errors=None,
                    free_milli=free_milli_from_memory(used, total),
                )
            )
        node = NodeState(name=self.host, cluster=self.cluster, gpus=gpus)
        return FleetSnapshot("nvml", [node], time.time())

    def close(self) -> None:
        try:
            self._nvml.nvmlShutdown()
        except Exception:  # pragma: no cover - already shut down
            pass
