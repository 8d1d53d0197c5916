"""The ``nvml`` telemetry source: the GPUs of this host through pynvml (``nvidia-ml-py``).

A host without the NVML library (no NVIDIA driver) raises :class:`NotAvailableError` at startup with a
message that names the other sources, instead of a traceback.

The one node is named as ``fleetmind graph build --nvml`` and ``fleetmind fleet discover`` name it
(:func:`fleetmind.data.fleet_io.local_node_name`): ``NODE_NAME`` (the Kubernetes Node, from the
downward API ``spec.nodeName``), else the host name, so that the extender finds it under the name
kube-scheduler uses.

A GPU with MIG enabled is reported as its MIG instances, as the ``prometheus`` source reports
dcgm-exporter's (``index = 100 * (gpu + 1) + GPU instance id``, ``mig_parent``, model
``"<model> MIG <profile>"``), each read through its MIG device handle; never as one whole idle GPU,
nor is a GPU whose MIG mode is pending enabled (no instance until its reset).
A GPU that answers ``NVMLError_NotSupported`` for its framebuffer (unified memory, e.g. the GB10)
stays healthy, judged by its utilisation and compute processes.
"""

from __future__ import annotations

import time
from typing import Any

from fleetmind.data.errors import NotAvailableError
from fleetmind.data.fleet_io import local_node_name
from fleetmind.serving.telemetry.base import (
    IDLE_UTIL_PCT,
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
        answered (name, UUID) is kept. A GPU with MIG enabled is one entry per MIG instance
        (:meth:`_mig_instances`).

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
        # by index, as the prometheus source lists them (MIG instances 100 * (gpu + 1) + GI after
        # the whole GPUs): placers break ties by position
        gpus = sorted((g for i in range(count) for g in self._gpus(i)), key=lambda g: g.index)
        node = NodeState(name=self.host, cluster=self.cluster, gpus=gpus)
        return FleetSnapshot("nvml", [node], time.time())

    def _gpus(self, i: int) -> list[GpuState]:
        """GPU ``i``: one :class:`GpuState`, or one per MIG instance when MIG is enabled.

        Any device query can raise ``NVMLError`` (nvidia-ml-py's ``pynvml.py`` maps every
        ``nvmlReturn_t`` to a subclass, ``NVML_ERROR_GPU_IS_LOST`` to ``NVMLError_GpuIsLost``): a
        GPU whose name, UUID or MIG mode cannot be read is unhealthy with nothing free, under its
        index. A GPU with MIG enabled (``nvmlDeviceGetMigMode`` current or pending mode
        ``NVML_DEVICE_MIG_ENABLE``) is its MIG instances (:meth:`_mig_instances`): NVML's answers
        for the whole GPU say nothing of them (utilisation ``NOT_SUPPORTED``; compute processes
        only for a privileged caller).
        """
        nv = self._nvml
        gpu = GpuState(index=i, model="unknown", healthy=False, free_milli=0)
        try:
            h = nv.nvmlDeviceGetHandleByIndex(i)
            gpu.model = _text(nv.nvmlDeviceGetName(h))
            gpu.uuid = _text(nv.nvmlDeviceGetUUID(h))
            mig = _mig_enabled(nv, h)
        except nv.NVMLError:
            return [gpu]
        if mig:
            return self._mig_instances(i, h, gpu)
        return [self._read(h, gpu)]

    def _read(self, h: Any, gpu: GpuState, mig: bool = False) -> GpuState:
        """Fill ``gpu`` from device (or MIG device) handle ``h``: framebuffer used/total (MiB),
        utilisation (%), compute processes, and the free share (:func:`_free_milli`).

        ``gpu`` stays unhealthy with nothing free when NVML fails (``NVMLError_GpuIsLost``; on the
        framebuffer query any error but ``NVMLError_NotSupported``, which unified-memory GPUs such as
        the GB10 answer: memory unknown, the GPU judged by utilisation and processes). ``mig``: a
        MIG instance, whose utilisation NVML does not report: one with a compute process (the pod the
        device plugin gave it to), or whose processes cannot be read, has nothing free, as the
        ``prometheus`` source gives nothing of an instance a pod holds.
        """
        nv = self._nvml
        used: float | None = None
        total: float | None = None
        try:
            mem = nv.nvmlDeviceGetMemoryInfo(h)
            used, total = mem.used / 2**20, mem.total / 2**20
        except nv.NVMLError as err:
            if not isinstance(err, getattr(nv, "NVMLError_NotSupported", ())):
                return gpu
        try:
            gpu.util_pct = float(nv.nvmlDeviceGetUtilizationRates(h).gpu)
        except nv.NVMLError as err:
            if isinstance(err, getattr(nv, "NVMLError_GpuIsLost", ())):
                return gpu
            # NOT_SUPPORTED on some GPUs (MIG instances, unified memory): no reading, still usable
        try:
            busy = _compute_processes(nv, h)
        except nv.NVMLError:  # the GPU fell off the bus after answering its memory
            return gpu
        gpu.mem_used_mib, gpu.mem_total_mib = used, total
        gpu.healthy = True
        if mig and busy is not False:
            gpu.free_milli = 0  # the device plugin gives an instance whole, to one pod
        else:
            gpu.free_milli = _free_milli(used, total, gpu.util_pct, busy)
        return gpu

    def _mig_instances(self, i: int, h: Any, parent: GpuState) -> list[GpuState]:
        """The MIG instances of GPU ``i`` (handle ``h``), as the ``prometheus`` source reports
        dcgm-exporter's: ``index = 100 * (i + 1) + GPU instance id``, ``mig_parent = i``, model
        ``"<parent model> MIG <profile>"``, memory, processes and UUID from the MIG device handle
        (NVML docs, ``nvmlDeviceGetComputeRunningProcesses``: "In MIG mode, if device handle is
        provided, the API returns aggregate information, only if the caller has appropriate
        privileges. Per-instance information can be queried by using specific MIG device
        handles"). Handles come from ``nvmlDeviceGetMigDeviceHandleByIndex`` for indices below
        ``nvmlDeviceGetMaxMigDeviceCount``; an index without a MIG device (``NOT_FOUND``) is
        skipped, and so is an instance whose handle or GPU instance id cannot be read (it is not
        offered); compute instances of one GPU instance are one GPU, free only if each is. A GPU
        whose instances cannot be listed, or with MIG enabled and no instance, is reported as
        ``parent``, healthy with nothing free (nothing can run on the whole GPU). Raises nothing:
        ``NVMLError_GpuIsLost`` returns ``parent`` unhealthy.
        """
        nv = self._nvml
        lost = getattr(nv, "NVMLError_GpuIsLost", ())
        out: list[GpuState] = []
        calls = (
            "nvmlDeviceGetMaxMigDeviceCount",
            "nvmlDeviceGetMigDeviceHandleByIndex",
            "nvmlDeviceGetGpuInstanceId",
        )
        try:
            # a module without the MIG calls lists no instance (the whole GPU then has no room)
            slots = int(nv.nvmlDeviceGetMaxMigDeviceCount(h)) if _has(nv, *calls) else 0
            for j in range(slots):
                try:
                    mh = nv.nvmlDeviceGetMigDeviceHandleByIndex(h, j)
                    gi = int(nv.nvmlDeviceGetGpuInstanceId(mh))
                except nv.NVMLError as err:
                    if isinstance(err, lost):
                        raise
                    continue
                inst = GpuState(
                    index=100 * (i + 1) + gi,
                    model=f"{parent.model} MIG {_mig_profile(nv, mh, gi)}",
                    healthy=False,
                    free_milli=0,
                    mig_parent=i,
                )
                try:
                    inst.uuid = _text(nv.nvmlDeviceGetUUID(mh))
                except nv.NVMLError as err:
                    if isinstance(err, lost):
                        raise
                inst = self._read(mh, inst, mig=True)
                same = next((g for g in out if g.index == inst.index), None)
                if same is None:
                    out.append(inst)
                else:  # another compute instance of the same GPU instance: free only if both are
                    same.free_milli = min(same.free_milli, inst.free_milli)
                    same.healthy = same.healthy and inst.healthy
        except nv.NVMLError as err:
            if isinstance(err, lost):
                return [parent]
            out = []
        if not out:
            parent.healthy, parent.free_milli = True, 0
            return [parent]
        return sorted(out, key=lambda g: g.index)

    def close(self) -> None:
        super().close()
        try:
            self._nvml.nvmlShutdown()
        except Exception:  # pragma: no cover - already shut down
            pass


def _mig_enabled(nv: Any, handle: Any) -> bool:
    """Whether MIG is enabled on the GPU, now or once it is reset (``nvmlDeviceGetMigMode``:
    ``[current, pending]``, ``NVML_DEVICE_MIG_ENABLE`` = 1). A GPU whose pending mode is enabled
    (``nvidia-smi -mig 1`` before the GPU reset, as the GPU Operator's MIG manager leaves it while
    it reconfigures the node) has no instance yet and becomes MIG at the reset: it is no whole GPU
    to offer either (:meth:`NvmlSource._mig_instances` reports it healthy with nothing free).
    False for a GPU without MIG (``NVML_ERROR_NOT_SUPPORTED``), a module or driver without the
    call, or any other answer but a lost GPU.

    Raises:
        NVMLError: ``NVMLError_GpuIsLost`` (the GPU fell off the bus).
    """
    query = getattr(nv, "nvmlDeviceGetMigMode", None)
    if query is None:
        return False
    try:
        modes = list(query(handle))
    except nv.NVMLError as err:
        if isinstance(err, getattr(nv, "NVMLError_GpuIsLost", ())):
            raise
        return False
    return getattr(nv, "NVML_DEVICE_MIG_ENABLE", 1) in modes[:2]


def _has(nv: Any, *names: str) -> bool:
    """Whether the pynvml module ``nv`` has every call in ``names``."""
    return all(callable(getattr(nv, n, None)) for n in names)


def _mig_profile(nv: Any, mig_handle: Any, gi: int) -> str:
    """The MIG profile (``1g.10gb``) of a MIG device: the part after ``MIG `` of its NVML name
    (``nvmlDeviceGetName`` of a MIG device handle, e.g. ``NVIDIA A100-SXM4-80GB MIG 1g.10gb``);
    the GPU instance id ``gi`` when the name has none, as the ``prometheus`` source names an
    instance without ``GPU_I_PROFILE``."""
    try:
        name = _text(nv.nvmlDeviceGetName(mig_handle))
    except nv.NVMLError:
        return str(gi)
    head, sep, tail = f" {name}".rpartition(" MIG ")
    return tail.strip() if sep and tail.strip() else str(gi)


def _compute_processes(nv: Any, handle: Any) -> bool | None:
    """Whether NVML lists a compute process on the GPU (``nvmlDeviceGetComputeRunningProcesses``);
    None when it cannot tell (``NVML_ERROR_NOT_SUPPORTED``, ``NO_PERMISSION``, a module without the
    call).

    Raises:
        NVMLError: ``NVMLError_GpuIsLost`` (the GPU fell off the bus).
    """
    query = getattr(nv, "nvmlDeviceGetComputeRunningProcesses", None)
    if query is None:
        return None
    try:
        return len(query(handle) or ()) > 0
    except nv.NVMLError as err:
        if isinstance(err, getattr(nv, "NVMLError_GpuIsLost", ())):
            raise
        return None


def _free_milli(
    used_mib: float | None, total_mib: float | None, util_pct: float | None, busy: bool | None
) -> int:
    """Free share (milli-GPU) from framebuffer used/total (MiB), utilisation (%) and whether a
    compute process runs (``None``: unknown): :func:`free_milli_from_memory` where the framebuffer
    is known. Where it is not (``NVMLError_NotSupported``: unified memory), 1000 when NVML shows
    the GPU idle (utilisation under :data:`IDLE_UTIL_PCT` where read, no compute process where
    listed, and at least one of the two read), else 0."""
    if used_mib is not None and total_mib is not None:
        return free_milli_from_memory(used_mib, total_mib, util_pct, bool(busy))
    if util_pct is None and busy is None:
        return 0
    quiet = util_pct is None or util_pct < IDLE_UTIL_PCT
    return 1000 if quiet and not busy else 0


def _text(value: bytes | str) -> str:
    """An NVML string (bytes in older nvidia-ml-py releases) as ``str``."""
    return value.decode() if isinstance(value, bytes) else str(value)
