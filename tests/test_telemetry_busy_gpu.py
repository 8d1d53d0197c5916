"""A GPU that uses little memory but is busy is not idle (not fully free).

Upstream behaviour the fixtures follow:

* NVML (https://docs.nvidia.com/deploy/nvml-api/): ``nvmlMemory_t`` is in bytes;
  ``nvmlUtilization_t.gpu`` is the "percent of time over the past sample period during which one
  or more kernels was executing on the GPU"; ``nvmlDeviceGetComputeRunningProcesses`` lists the
  processes with a compute context on the device (``nvmlProcessInfo_t``: ``pid``,
  ``usedGpuMemory`` in bytes), and may fail with ``NVML_ERROR_NOT_SUPPORTED`` or
  ``NVML_ERROR_NO_PERMISSION``. nvidia-ml-py's ``pynvml.py`` returns that list and raises the
  ``NVMLError`` subclass of the return code.
* dcgm-exporter's ``DCGM_FI_DEV_GPU_UTIL`` is the same utilisation, in whole percent;
  ``DCGM_FI_PROF_GR_ENGINE_ACTIVE`` (MIG) a ratio.

A small inference server (3.5 GiB of an H100's 81559 MiB, under the 5 % that counted as idle)
kept the GPU 98 % busy and was reported whole (``free_milli`` 1000), so a whole-GPU job could be
placed on it.
"""

from __future__ import annotations

import math
import types

import pynvml
import pytest

from fleetmind.serving.telemetry.base import (
    IDLE_MEMORY_FRACTION,
    IDLE_UTIL_PCT,
    free_milli_from_memory,
)
from fleetmind.serving.telemetry.nvml import NvmlSource
from fleetmind.serving.telemetry.prometheus import build_nodes, parse_dcgm

MIB = 2**20
TOTAL_MIB = 81559
SMALL_MIB = 3500  # an inference server's weights and CUDA context: 4.3 % of the framebuffer
RESERVED_MIB = 580  # what an idle H100 reads as used (the driver's reservation)
BUSY_FREE = int(1000 * (TOTAL_MIB - SMALL_MIB) / TOTAL_MIB)  # 957: the free framebuffer share


def _nvml(
    monkeypatch: pytest.MonkeyPatch,
    used_mib: int,
    util: int | Exception,
    procs: list[types.SimpleNamespace] | Exception,
) -> None:
    """One H100 through the real nvidia-ml-py module, only the device calls replaced."""

    def raise_or(value: object) -> object:
        if isinstance(value, Exception):
            raise value
        return value

    def mem(h: int, version: object = None) -> types.SimpleNamespace:
        total, used = TOTAL_MIB * MIB, used_mib * MIB
        return types.SimpleNamespace(total=total, used=used, free=total - used)

    for attr, fn in {
        "nvmlInit": lambda: None,
        "nvmlShutdown": lambda: None,
        "nvmlDeviceGetCount": lambda: 1,
        "nvmlDeviceGetHandleByIndex": lambda i: i,
        "nvmlDeviceGetName": lambda h: "NVIDIA H100 80GB HBM3",
        "nvmlDeviceGetUUID": lambda h: "GPU-aaaa0000-0000-0000-0000-000000000000",
        "nvmlDeviceGetMemoryInfo": mem,
        "nvmlDeviceGetUtilizationRates": lambda h: types.SimpleNamespace(
            gpu=raise_or(util), memory=0
        ),
        "nvmlDeviceGetComputeRunningProcesses": lambda h: raise_or(procs),
    }.items():
        monkeypatch.setattr(pynvml, attr, fn)


def _one_gpu(monkeypatch: pytest.MonkeyPatch, *args: object) -> object:
    _nvml(monkeypatch, *args)  # type: ignore[arg-type]
    (gpu,) = NvmlSource(cluster="c0").collect().nodes[0].gpus
    return gpu


def _proc() -> types.SimpleNamespace:
    return types.SimpleNamespace(
        pid=4242, usedGpuMemory=2900 * MIB, gpuInstanceId=0xFFFFFFFF, computeInstanceId=0xFFFFFFFF
    )


def _err(code: int) -> Exception:
    return pynvml.NVMLError(code)


# ---------------------------------------------------------------------------------------- NVML
def test_busy_gpu_with_a_process_is_not_whole(monkeypatch: pytest.MonkeyPatch) -> None:
    """Before: 1000 free (3.5 GiB is under 5 % of the framebuffer)."""
    gpu = _one_gpu(monkeypatch, SMALL_MIB, 98, [_proc()])
    assert gpu.healthy and gpu.util_pct == 98.0
    assert gpu.free_milli == BUSY_FREE


def test_a_process_alone_makes_the_gpu_busy(monkeypatch: pytest.MonkeyPatch) -> None:
    """Between kernels (0 % over the sample) a process still holds the GPU."""
    assert _one_gpu(monkeypatch, SMALL_MIB, 0, [_proc()]).free_milli == BUSY_FREE


def test_utilisation_alone_makes_the_gpu_busy(monkeypatch: pytest.MonkeyPatch) -> None:
    """No process list (another container's processes may be hidden, or the call refused)."""
    for procs in ([], _err(pynvml.NVML_ERROR_NO_PERMISSION), _err(pynvml.NVML_ERROR_NOT_SUPPORTED)):
        assert _one_gpu(monkeypatch, SMALL_MIB, 98, procs).free_milli == BUSY_FREE


def test_an_idle_gpu_is_still_whole(monkeypatch: pytest.MonkeyPatch) -> None:
    assert _one_gpu(monkeypatch, RESERVED_MIB, 0, []).free_milli == 1000
    # neither utilisation nor processes answered: memory alone decides, as before
    not_supported = _err(pynvml.NVML_ERROR_NOT_SUPPORTED)
    gpu = _one_gpu(monkeypatch, RESERVED_MIB, not_supported, not_supported)
    assert gpu.healthy and gpu.util_pct is None and gpu.free_milli == 1000


def test_lost_while_listing_processes_is_unhealthy(monkeypatch: pytest.MonkeyPatch) -> None:
    gpu = _one_gpu(monkeypatch, RESERVED_MIB, 0, _err(pynvml.NVML_ERROR_GPU_IS_LOST))
    assert (gpu.healthy, gpu.free_milli) == (False, 0)


def test_a_module_without_the_process_call(monkeypatch: pytest.MonkeyPatch) -> None:
    """An nvidia-ml-py stand-in without ``nvmlDeviceGetComputeRunningProcesses``: memory and
    utilisation decide."""
    _nvml(monkeypatch, RESERVED_MIB, 0, [])
    monkeypatch.delattr(pynvml, "nvmlDeviceGetComputeRunningProcesses")
    (gpu,) = NvmlSource().collect().nodes[0].gpus
    assert gpu.free_milli == 1000


# ---------------------------------------------------------------------------------------- DCGM
def _dcgm_text(used: int, util: int) -> str:
    """One GPU that no pod holds, as dcgm-exporter 4.x writes it."""
    lab = (
        'gpu="0",UUID="GPU-aaaa0000-0000-0000-0000-000000000000",pci_bus_id="00000000:18:00.0",'
        'device="nvidia0",modelName="NVIDIA H100 80GB HBM3",Hostname="gpu-node-1",'
        'DCGM_FI_DRIVER_VERSION="550.90.07"'
    )
    rows = {
        "DCGM_FI_DEV_GPU_UTIL": ("GPU utilization (in %).", util),
        "DCGM_FI_DEV_FB_FREE": ("Framebuffer memory free (in MiB).", TOTAL_MIB - used),
        "DCGM_FI_DEV_FB_USED": ("Framebuffer memory used (in MiB).", used),
    }
    lines = []
    for f, (help_text, v) in rows.items():
        lines += [f"# HELP {f} {help_text}", f"# TYPE {f} gauge", f"{f}{{{lab}}} {v}"]
    return "\n".join(lines) + "\n"


def test_dcgm_busy_gpu_is_not_whole() -> None:
    """Before: 1000 free."""
    (node,) = parse_dcgm(_dcgm_text(SMALL_MIB, 98))
    assert node.gpus[0].free_milli == BUSY_FREE


def test_dcgm_idle_gpu_is_whole() -> None:
    (node,) = parse_dcgm(_dcgm_text(RESERVED_MIB, 0))
    assert node.gpus[0].free_milli == 1000


def test_dcgm_mig_instance_busy_by_engine_activity() -> None:
    """A MIG instance has no ``DCGM_FI_DEV_GPU_UTIL``; ``GR_ENGINE_ACTIVE`` 0.9 is 90 % busy."""
    lab = {"gpu": "0", "GPU_I_ID": "1", "GPU_I_PROFILE": "3g.40gb", "Hostname": "gpu-node-1",
           "modelName": "NVIDIA H100 80GB HBM3"}  # fmt: skip
    dcgm = [("DCGM_FI_DEV_FB_USED", lab, 1000.0), ("DCGM_FI_DEV_FB_FREE", lab, 39000.0)]
    (node,) = build_nodes([*dcgm, ("DCGM_FI_PROF_GR_ENGINE_ACTIVE", lab, 0.9)], [])
    assert node.gpus[0].free_milli == int(1000 * 39000 / 40000)
    (node,) = build_nodes([*dcgm, ("DCGM_FI_PROF_GR_ENGINE_ACTIVE", lab, 0.0)], [])
    assert node.gpus[0].free_milli == 1000


# ------------------------------------------------------------------------------------ the rule
def test_the_rule() -> None:
    small = SMALL_MIB
    assert small / TOTAL_MIB < IDLE_MEMORY_FRACTION
    assert free_milli_from_memory(small, TOTAL_MIB) == 1000  # utilisation unknown: memory decides
    assert free_milli_from_memory(small, TOTAL_MIB, math.nan) == 1000  # NaN: unknown
    assert free_milli_from_memory(small, TOTAL_MIB, IDLE_UTIL_PCT - 1) == 1000
    assert free_milli_from_memory(small, TOTAL_MIB, IDLE_UTIL_PCT) == BUSY_FREE
    assert free_milli_from_memory(small, TOTAL_MIB, 0.0, busy=True) == BUSY_FREE
    assert free_milli_from_memory(None, TOTAL_MIB, 0.0) == 0
