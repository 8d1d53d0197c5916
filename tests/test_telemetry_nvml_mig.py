"""The ``nvml`` telemetry source on a GPU with MIG enabled, through the real nvidia-ml-py module (its
own exception classes and constants; only the device calls replaced, on the suite's stand-in
devices of ``tests/test_telemetry_nvml_faults.py``).

Upstream behaviour relied on (NVML API reference, https://docs.nvidia.com/deploy/nvml-api/):

* ``nvmlDeviceGetMigMode(device, *currentMode, *pendingMode)``: ``NVML_DEVICE_MIG_ENABLE`` (1) when
  MIG is enabled; ``NVML_ERROR_NOT_SUPPORTED`` on a GPU without MIG.
* ``nvmlDeviceGetUtilizationRates``: "On MIG-enabled GPUs, querying device utilization rates is
  not currently supported" (``NVML_ERROR_NOT_SUPPORTED``).
* ``nvmlDeviceGetComputeRunningProcesses``: "In MIG mode, if device handle is provided, the API
  returns aggregate information, only if the caller has appropriate privileges. Per-instance
  information can be queried by using specific MIG device handles." An unprivileged caller gets
  ``NVML_ERROR_NO_PERMISSION`` on the parent handle.
* ``nvmlDeviceGetMaxMigDeviceCount``, ``nvmlDeviceGetMigDeviceHandleByIndex`` (``NOT_FOUND`` where
  no MIG device is at that index), ``nvmlDeviceGetGpuInstanceId`` of a MIG device handle.
* nvidia-ml-py ``pynvml.py``: ``nvmlDeviceGetMigMode`` returns ``[current, pending]``.
"""

from __future__ import annotations

import types
from typing import Any

import pynvml
import pytest

from fleetmind.serving.telemetry.nvml import NvmlSource
from fleetmind.serving.telemetry.prometheus import parse_dcgm
from tests.test_telemetry_nvml_faults import MIB, _fake_devices

A100 = "NVIDIA A100-SXM4-80GB"
INSTANCE_MIB = 9856  # one 1g.10gb instance's framebuffer
GI_IDS = [7, 8, 9, 10, 11, 12, 13]  # the GPU instance ids of seven 1g.10gb instances


def _mig_gpu(
    monkeypatch: pytest.MonkeyPatch,
    busy: set[int],
    no_procs: frozenset[int] = frozenset(),
    gi_ids: list[int] = GI_IDS,
    mig_gpus: frozenset[int] = frozenset({0}),
    count: int = 1,
) -> None:
    """GPUs ``mig_gpus`` of ``count`` A100s have MIG enabled with one 1g.10gb instance per id in
    ``gi_ids``; each instance has 300 MiB used (a pod's process starting up: under 5 % of the
    instance). Instances at the MIG indices in ``busy`` list a compute process; those in
    ``no_procs`` answer ``NO_PERMISSION`` for their processes. A parent handle answers
    utilisation ``NOT_SUPPORTED`` and processes ``NO_PERMISSION`` (an unprivileged caller)."""
    _fake_devices(monkeypatch, lost=set(), count=count)

    def err(code: int) -> pynvml.NVMLError:
        return pynvml.NVMLError(code)

    def name(h: Any) -> str:
        if isinstance(h, tuple):
            return f"{A100} MIG 1g.10gb"
        return A100

    def uuid(h: Any) -> str:
        if isinstance(h, tuple):
            return f"MIG-{h[0]}-{h[1]}"
        return f"GPU-{h}"

    def mig_mode(h: Any) -> list[int]:
        if h not in mig_gpus:
            raise err(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return [pynvml.NVML_DEVICE_MIG_ENABLE, pynvml.NVML_DEVICE_MIG_ENABLE]

    def handle(h: int, j: int) -> tuple[int, int]:
        if j >= len(gi_ids):
            raise err(pynvml.NVML_ERROR_NOT_FOUND)
        return (h, j)

    def mem(h: Any, version: object = None) -> types.SimpleNamespace:
        if isinstance(h, tuple):
            total, used = INSTANCE_MIB * MIB, 300 * MIB
        elif h in mig_gpus:  # the parent: the instances' sum, as a privileged caller would see
            total, used = 81920 * MIB, len(gi_ids) * 300 * MIB
        else:
            total, used = 81920 * MIB, 500 * MIB
        return types.SimpleNamespace(total=total, used=used, free=total - used)

    def util(h: Any) -> types.SimpleNamespace:
        if isinstance(h, tuple) or h in mig_gpus:
            raise err(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return types.SimpleNamespace(gpu=0, memory=0)

    def procs(h: Any) -> list[Any]:
        if not isinstance(h, tuple):
            if h in mig_gpus:
                raise err(pynvml.NVML_ERROR_NO_PERMISSION)
            return []
        if h[1] in no_procs:
            raise err(pynvml.NVML_ERROR_NO_PERMISSION)
        return [types.SimpleNamespace(pid=4242, usedGpuMemory=300 * MIB)] if h[1] in busy else []

    for attr, fn in {
        "nvmlDeviceGetName": name,
        "nvmlDeviceGetUUID": uuid,
        "nvmlDeviceGetMigMode": mig_mode,
        "nvmlDeviceGetMaxMigDeviceCount": lambda h: 7,
        "nvmlDeviceGetMigDeviceHandleByIndex": handle,
        "nvmlDeviceGetGpuInstanceId": lambda h: gi_ids[h[1]],
        "nvmlDeviceGetMemoryInfo": mem,
        "nvmlDeviceGetUtilizationRates": util,
        "nvmlDeviceGetComputeRunningProcesses": procs,
    }.items():
        monkeypatch.setattr(pynvml, attr, fn)


def test_a_mig_gpu_is_its_instances_not_one_idle_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    """Five of seven instances run a pod's process: those five have nothing free, whatever their
    memory; the whole GPU is never offered (it was: index 0, 1000 free)."""
    _mig_gpu(monkeypatch, busy={0, 1, 2, 3, 4})
    gpus = NvmlSource(node_name="n1").collect().nodes[0].gpus
    assert [g.index for g in gpus] == [100 + gi for gi in GI_IDS]
    assert all(g.mig_parent == 0 and g.healthy for g in gpus)
    assert {g.model for g in gpus} == {f"{A100} MIG 1g.10gb"}
    assert [g.free_milli for g in gpus] == [0, 0, 0, 0, 0, 1000, 1000]
    assert gpus[0].uuid == "MIG-0-0" and gpus[0].mem_total_mib == pytest.approx(INSTANCE_MIB)
    assert gpus[0].util_pct is None


def test_an_instance_whose_processes_cannot_be_read_is_not_free(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _mig_gpu(monkeypatch, busy=set(), no_procs=frozenset({2}))
    gpus = NvmlSource(node_name="n1").collect().nodes[0].gpus
    assert [(g.index, g.free_milli) for g in gpus if g.free_milli < 1000] == [(109, 0)]
    assert all(g.healthy for g in gpus)


def test_mig_enabled_without_instances_has_no_room(monkeypatch: pytest.MonkeyPatch) -> None:
    _mig_gpu(monkeypatch, busy=set(), gi_ids=[])
    (gpu,) = NvmlSource(node_name="n1").collect().nodes[0].gpus
    assert (gpu.index, gpu.healthy, gpu.free_milli, gpu.mig_parent) == (0, True, 0, None)


def test_a_gpu_without_mig_beside_a_mig_gpu_stays_whole(monkeypatch: pytest.MonkeyPatch) -> None:
    _mig_gpu(monkeypatch, busy=set(), count=2)
    gpus = NvmlSource(node_name="n1").collect().nodes[0].gpus
    whole = [g for g in gpus if g.mig_parent is None]
    assert [(g.index, g.model, g.free_milli) for g in whole] == [(1, A100, 1000)]
    assert len(gpus) == 1 + len(GI_IDS)
    # listed by index, as the prometheus source lists them (placers break ties by position)
    assert [g.index for g in gpus] == sorted(g.index for g in gpus)


def test_instances_are_named_as_the_prometheus_source_names_them(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The extender reads the profile from ``"<model> MIG <profile>"`` and MIG instances by
    ``mig_parent``: both sources must name an instance alike (dcgm-exporter labels
    ``GPU_I_ID``/``GPU_I_PROFILE``)."""
    _mig_gpu(monkeypatch, busy=set())
    nvml = NvmlSource(node_name="n1").collect().nodes[0].gpus
    text = "".join(
        f'DCGM_FI_DEV_FB_USED{{gpu="0",UUID="GPU-0",modelName="{A100}",Hostname="n1",'
        f'GPU_I_ID="{gi}",GPU_I_PROFILE="1g.10gb"}} 300\n'
        f'DCGM_FI_DEV_FB_FREE{{gpu="0",UUID="GPU-0",modelName="{A100}",Hostname="n1",'
        f'GPU_I_ID="{gi}",GPU_I_PROFILE="1g.10gb"}} {INSTANCE_MIB - 300}\n'
        for gi in GI_IDS
    )
    (node,) = parse_dcgm(text)
    assert [(g.index, g.model, g.mig_parent) for g in nvml] == [
        (g.index, g.model, g.mig_parent) for g in node.gpus
    ]


def test_a_lost_mig_gpu_is_unhealthy(monkeypatch: pytest.MonkeyPatch) -> None:
    _mig_gpu(monkeypatch, busy=set())

    def count(h: Any) -> int:
        raise pynvml.NVMLError(pynvml.NVML_ERROR_GPU_IS_LOST)

    monkeypatch.setattr(pynvml, "nvmlDeviceGetMaxMigDeviceCount", count)
    (gpu,) = NvmlSource(node_name="n1").collect().nodes[0].gpus
    assert (gpu.index, gpu.healthy, gpu.free_milli) == (0, False, 0)
