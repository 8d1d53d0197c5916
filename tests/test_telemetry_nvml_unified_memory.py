"""The ``nvml`` telemetry source on a GPU that answers ``NVML_ERROR_NOT_SUPPORTED`` for its
framebuffer (unified memory, e.g. the GB10 of DGX Spark, where ``nvidia-smi`` shows
``Memory-Usage: Not Supported``), through the real nvidia-ml-py module on the suite's stand-in
devices (``tests/test_telemetry_nvml_faults.py``).

Upstream behaviour relied on: NVML API reference (https://docs.nvidia.com/deploy/nvml-api/),
``nvmlDeviceGetMemoryInfo`` returns ``NVML_ERROR_NOT_SUPPORTED`` where the device does not support
the query (a property of the GPU, not a fault), ``NVML_ERROR_GPU_IS_LOST`` "if the target GPU has
fallen off the bus or is otherwise inaccessible"; nvidia-ml-py ``pynvml.py`` raises the subclass
registered for the code (``NVMLError_NotSupported``, ``NVMLError_GpuIsLost``).
"""

from __future__ import annotations

import types
from typing import Any

import pynvml
import pytest

from fleetmind.serving.telemetry.nvml import NvmlSource
from tests.test_telemetry_nvml_faults import _fake_devices


def _unified(
    monkeypatch: pytest.MonkeyPatch,
    code: int = pynvml.NVML_ERROR_NOT_SUPPORTED,
    util: int | None = 0,
    procs: int | None = 0,
) -> None:
    """One GPU whose memory query raises ``code``; utilisation ``util`` % (``None``:
    ``NOT_SUPPORTED``); ``procs`` compute processes (``None``: ``NOT_SUPPORTED``)."""
    _fake_devices(monkeypatch, lost=set(), count=1)

    def mem(h: Any, version: object = None) -> None:
        raise pynvml.NVMLError(code)

    def rates(h: Any) -> types.SimpleNamespace:
        if util is None:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return types.SimpleNamespace(gpu=util, memory=0)

    def running(h: Any) -> list[Any]:
        if procs is None:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return [types.SimpleNamespace(pid=100 + k, usedGpuMemory=None) for k in range(procs)]

    monkeypatch.setattr(pynvml, "nvmlDeviceGetMemoryInfo", mem)
    monkeypatch.setattr(pynvml, "nvmlDeviceGetUtilizationRates", rates)
    monkeypatch.setattr(pynvml, "nvmlDeviceGetComputeRunningProcesses", running)


def _gpu(monkeypatch: pytest.MonkeyPatch, **kw: Any) -> Any:
    _unified(monkeypatch, **kw)
    (gpu,) = NvmlSource(node_name="n1").collect().nodes[0].gpus
    return gpu


def test_unsupported_memory_keeps_an_idle_gpu_whole(monkeypatch: pytest.MonkeyPatch) -> None:
    """It was unhealthy with nothing free, as if it had fallen off the bus."""
    gpu = _gpu(monkeypatch)
    assert (gpu.healthy, gpu.free_milli) == (True, 1000)
    assert gpu.mem_used_mib is None and gpu.mem_total_mib is None and gpu.util_pct == 0.0


def test_unsupported_memory_with_a_process_is_busy(monkeypatch: pytest.MonkeyPatch) -> None:
    gpu = _gpu(monkeypatch, procs=1)
    assert (gpu.healthy, gpu.free_milli) == (True, 0)


def test_unsupported_memory_under_load_is_busy(monkeypatch: pytest.MonkeyPatch) -> None:
    gpu = _gpu(monkeypatch, util=90, procs=None)
    assert (gpu.healthy, gpu.free_milli) == (True, 0)


def test_unsupported_memory_judged_by_processes_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    assert _gpu(monkeypatch, util=None, procs=0).free_milli == 1000


def test_nothing_readable_is_not_free(monkeypatch: pytest.MonkeyPatch) -> None:
    gpu = _gpu(monkeypatch, util=None, procs=None)
    assert (gpu.healthy, gpu.free_milli) == (True, 0)


@pytest.mark.parametrize("code", [pynvml.NVML_ERROR_GPU_IS_LOST, pynvml.NVML_ERROR_UNKNOWN])
def test_other_memory_errors_stay_unhealthy(monkeypatch: pytest.MonkeyPatch, code: int) -> None:
    gpu = _gpu(monkeypatch, code=code)
    assert (gpu.healthy, gpu.free_milli) == (False, 0)
