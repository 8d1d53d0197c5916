"""The ``nvml`` telemetry source: the GPUs of this host through pynvml (``nvidia-ml-py``).

A host without the NVML library (no NVIDIA driver) raises :class:`NotAvailableError` at startup with a
message that names the other sources, instead of a traceback.

The one node is named as ``fleetmind graph build --nvml`` and ``fleetmind fleet discover`` name it
(:func:`fleetmind.data.fleet_io.local_node_name`): ``NODE_NAME`` (the Kubernetes Node, from the
downward API ``spec.nodeName``), else the host name, so that the extender finds it under the name
kube-scheduler uses.
"""

from __future__ import annotations

import time
from typing import Any

from fleetmind.data.errors import NotAvailableError
from fleetmind.data.fleet_io import local_node_name
from fleetmind.serving.telemetry.base import (
    FleetSnapshot,
    GpuState,
    NodeState,
    TelemetrySource,
    free_milli_from_memory,
)

_OTHERS = "use FLEETMIND_TELEMETRY=prometheus (a DCGM exporter) or FLEETMIND_TELEMETRY=sim"


class NvmlSource(TelemetrySource):
    """Local GPUs via NVML: utilisation (%), framebuffer used/total (MiB), compute processes,
    XID-free health."""

    name = "nvml"

    def __init__(
        self, cluster: str = "local", ttl_s: float = 5.0, node_name: str | None = None
    ) -> None:
        """``cluster``: the cluster of the one node; ``ttl_s`` (s): how long a snapshot is
        reused; ``node_name``: the node's name (default :func:`local_node_name`: ``NODE_NAME``,
        else the host name)."""
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
        self.host = local_node_name(node_name)

    def collect(self) -> FleetSnapshot:
        """This host's GPUs now.

        A GPU whose queries fail (``NVMLError``, e.g. ``NVMLError_GpuIsLost`` after it fell off
        the bus, XID 79) is reported unhealthy with nothing free, under its index; what it still
        answered (name, UUID) is kept.

        Raises:
            NotAvailableError: NVML cannot list the GPUs (the driver stopped answering).
        """
        nv = self._nvml
        try:
            count = nv.nvmlDeviceGetCount()
        except nv.NVMLError as err:
            raise NotAvailableError(
                f"telemetry source 'nvml': NVML cannot list this host's GPUs ({err}); {_OTHERS}"
            ) from None
        gpus = [self._gpu(i) for i in range(count)]
        node = NodeState(name=self.host, cluster=self.cluster, gpus=gpus)
        return FleetSnapshot("nvml", [node], time.time())

    def _gpu(self, i: int) -> GpuState:
        """GPU ``i``: utilisation (%), framebuffer used/total (MiB); unhealthy when NVML fails.

        Any device query can raise ``NVMLError`` (nvidia-ml-py's ``pynvml.py`` maps every
        ``nvmlReturn_t`` to a subclass, ``NVML_ERROR_GPU_IS_LOST`` to ``NVMLError_GpuIsLost``).
        The free share is :func:`free_milli_from_memory` of the framebuffer, the utilisation and
        whether a compute process runs on the GPU (``nvmlDeviceGetComputeRunningProcesses``, a
        list of process infos: a GPU with one is never idle, however little memory it uses).
        """
        nv = self._nvml
        gpu = GpuState(index=i, model="unknown", healthy=False, free_milli=0)
        try:
            h = nv.nvmlDeviceGetHandleByIndex(i)
            gpu.model = _text(nv.nvmlDeviceGetName(h))
            gpu.uuid = _text(nv.nvmlDeviceGetUUID(h))
            mem = nv.nvmlDeviceGetMemoryInfo(h)
            used, total = mem.used / 2**20, mem.total / 2**20
        except nv.NVMLError:
            return gpu
        try:
            gpu.util_pct = float(nv.nvmlDeviceGetUtilizationRates(h).gpu)
        except nv.NVMLError as err:
            if isinstance(err, getattr(nv, "NVMLError_GpuIsLost", ())):
                return gpu
            # NOT_SUPPORTED on some GPUs (e.g. MIG mode): no reading, GPU still usable
        try:
            busy = _has_compute_process(nv, h)
        except nv.NVMLError:  # the GPU fell off the bus after answering its memory
            return gpu
        gpu.mem_used_mib, gpu.mem_total_mib = used, total
        gpu.healthy = True
        gpu.free_milli = free_milli_from_memory(used, total, gpu.util_pct, busy)
        return gpu

    def close(self) -> None:
        super().close()
        try:
            self._nvml.nvmlShutdown()
        except Exception:  # pragma: no cover - already shut down
            pass


def _has_compute_process(nv: Any, handle: Any) -> bool:
    """Whether NVML lists a compute process on the GPU (``nvmlDeviceGetComputeRunningProcesses``);
    False when it cannot tell (``NVML_ERROR_NOT_SUPPORTED``, ``NO_PERMISSION``, a module without the
    call), so that memory and utilisation alone decide.

    Raises:
        NVMLError: ``NVMLError_GpuIsLost`` (the GPU fell off the bus).
    """
    query = getattr(nv, "nvmlDeviceGetComputeRunningProcesses", None)
    if query is None:
        return False
    try:
        return len(query(handle) or ()) > 0
    except nv.NVMLError as err:
        if isinstance(err, getattr(nv, "NVMLError_GpuIsLost", ())):
            raise
        return False


def _text(value: bytes | str) -> str:
    """An NVML string (bytes in older nvidia-ml-py releases) as ``str``."""
    return value.decode() if isinstance(value, bytes) else str(value)
