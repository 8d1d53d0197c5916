"""The ``nvml`` telemetry source with GPU faults and idle GPUs, through the real nvidia-ml-py module
(a declared dependency): its own exception classes, only the device calls replaced.

Upstream behaviour relied on:

* nvidia-ml-py ``pynvml.py`` (https://pypi.org/project/nvidia-ml-py/): ``NVMLError(value)``
  returns the subclass registered for the return code (``NVMLError.__new__`` with
  ``_valClassMapping``), so ``NVMLError(NVML_ERROR_GPU_IS_LOST)`` is an ``NVMLError_GpuIsLost``;
  every ``nvmlDevice*`` call raises it once the GPU fell off the bus (XID 79).
* ``nvmlMemory_t.used`` is "Sum of Reserved and Allocated device memory"
  (https://docs.nvidia.com/deploy/nvml-api/structnvmlMemory__t.html): an idle GPU reports the
  driver's reserved memory as used (about 580 MiB on an H100 80GB, 81559 MiB total).
"""

from __future__ import annotations

import types
from pathlib import Path

import pynvml
import pytest
from fastapi.testclient import TestClient

from fleetmind.data.errors import NotAvailableError
from fleetmind.serving.app import create_app
from fleetmind.serving.settings import Settings
from fleetmind.serving.telemetry.nvml import NvmlSource

MIB = 2**20
H100_TOTAL_MIB = 81559
IDLE_RESERVED_MIB = 580


def _fake_devices(monkeypatch: pytest.MonkeyPatch, lost: set[int], count: int = 2) -> None:
    """Two idle H100s; GPUs in ``lost`` raise ``NVMLError_GpuIsLost`` from every device call."""

    def check(h: int) -> None:
        if h in lost:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_GPU_IS_LOST)

    def name(h: int) -> str:
        check(h)
        return "NVIDIA H100 80GB HBM3"

    def uuid(h: int) -> str:
        check(h)
        return f"GPU-0000000{h}-aaaa-bbbb-cccc-dddddddddddd"

    def mem(h: int, version: object = None) -> types.SimpleNamespace:
        check(h)
        total, used = H100_TOTAL_MIB * MIB, IDLE_RESERVED_MIB * MIB
        return types.SimpleNamespace(total=total, used=used, free=total - used)

    def util(h: int) -> types.SimpleNamespace:
        check(h)
        return types.SimpleNamespace(gpu=0, memory=0)

    for attr, fn in {
        "nvmlInit": lambda: None,
        "nvmlShutdown": lambda: None,
        "nvmlDeviceGetCount": lambda: count,
        "nvmlDeviceGetHandleByIndex": lambda i: i,
        "nvmlDeviceGetName": name,
        "nvmlDeviceGetUUID": uuid,
        "nvmlDeviceGetMemoryInfo": mem,
        "nvmlDeviceGetUtilizationRates": util,
    }.items():
        monkeypatch.setattr(pynvml, attr, fn)


def test_the_fake_raises_the_real_class(monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_devices(monkeypatch, lost={1})
    with pytest.raises(pynvml.NVMLError_GpuIsLost):
        pynvml.nvmlDeviceGetName(1)


def test_a_lost_gpu_is_unhealthy_not_an_error(monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_devices(monkeypatch, lost={1})
    (node,) = NvmlSource(cluster="c0").collect().nodes
    ok, lost = node.gpus
    assert ok.healthy and ok.uuid and ok.model == "NVIDIA H100 80GB HBM3"
    assert (lost.index, lost.healthy, lost.free_milli) == (1, False, 0)
    assert lost.model == "unknown" and lost.uuid is None and lost.mem_total_mib is None


def test_lost_during_utilisation_is_unhealthy(monkeypatch: pytest.MonkeyPatch) -> None:
    """The GPU answers its name and memory, then falls off the bus before utilisation is read."""
    _fake_devices(monkeypatch, lost=set())

    def util(h: int) -> None:
        raise pynvml.NVMLError(pynvml.NVML_ERROR_GPU_IS_LOST)

    monkeypatch.setattr(pynvml, "nvmlDeviceGetUtilizationRates", util)
    gpus = NvmlSource().collect().nodes[0].gpus
    assert [(g.healthy, g.free_milli) for g in gpus] == [(False, 0), (False, 0)]
    assert gpus[0].model == "NVIDIA H100 80GB HBM3"  # what it answered before is kept


def test_unsupported_utilisation_keeps_the_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_devices(monkeypatch, lost=set())

    def util(h: int) -> None:
        raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)

    monkeypatch.setattr(pynvml, "nvmlDeviceGetUtilizationRates", util)
    gpus = NvmlSource().collect().nodes[0].gpus
    assert all(g.healthy and g.util_pct is None and g.free_milli == 1000 for g in gpus)


def test_nvml_failing_to_count_is_not_available(monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_devices(monkeypatch, lost=set())
    src = NvmlSource()

    def count() -> int:
        raise pynvml.NVMLError(pynvml.NVML_ERROR_GPU_IS_LOST)

    monkeypatch.setattr(pynvml, "nvmlDeviceGetCount", count)
    with pytest.raises(NotAvailableError, match="cannot list"):
        src.collect()


def test_idle_gpu_is_fully_free(monkeypatch: pytest.MonkeyPatch) -> None:
    """580 MiB reserved of 81559 MiB used: the GPU is idle, 1000 free (was 992)."""
    _fake_devices(monkeypatch, lost=set())
    gpus = NvmlSource().collect().nodes[0].gpus
    assert [g.free_milli for g in gpus] == [1000, 1000]
    assert gpus[0].mem_used_mib == pytest.approx(IDLE_RESERVED_MIB)


def test_service_with_a_lost_gpu(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The fleet, placement and UI pages answer (they were 500s); a whole GPU goes to GPU 0."""
    _fake_devices(monkeypatch, lost={1})
    settings = Settings(
        database_url=f"sqlite:///{tmp_path}/t.db",
        telemetry="nvml",
        rca_model="baseline:upstream-coverage",
        placement_model="heuristic:builtin-bestfit",
        incident_worker=False,
    )
    with TestClient(create_app(settings), raise_server_exceptions=False) as c:
        fleet = c.get("/api/v1/fleet")
        assert fleet.status_code == 200
        gpus = fleet.json()["nodes"][0]["gpus"]
        assert [(g["index"], g["healthy"]) for g in gpus] == [(0, True), (1, False)]
        whole = c.post("/api/v1/placements", json={"num_gpu": 1})
        assert whole.status_code == 200 and whole.json()["gpus"] == [0]
        assert c.post("/api/v1/placements", json={"num_gpu": 2}).status_code == 409
        assert c.get("/ui/fleet").status_code == 200
