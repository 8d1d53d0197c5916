"""dcgm-exporter output that is not one reading per GPU: a MIG GPU exported both whole and per
instance, and DCGM's blank values.

Upstream behaviour the fixtures follow:

* ``dcgm-exporter -d a`` watches GPUs and their MIG instances together (``handleGPUOptions`` in
  NVIDIA/dcgm-exporter ``internal/pkg/devicemonitoring/device_monitoring.go``); the parent's samples
  and its instances' (the same ``gpu`` and ``UUID``, plus ``GPU_I_ID`` and ``GPU_I_PROFILE``) are
  rendered side by side (``TestRenderAllowsParentGPUAndMIGInstanceSamples`` in
  ``internal/pkg/render/render_metrics_test.go``).
* A field DCGM cannot read holds a blank value, ``DCGM_INT64_BLANK`` (``0x7ffffffffffffff0``) or
  ``DCGM_FP64_BLANK`` (``2**47``) plus 0-15 (``dcgm_structs.h`` in NVIDIA/DCGM), which
  dcgm-exporter releases before 4.5.3 export as the value (the README's quickstart shows
  ``DCGM_FI_DEV_MEMORY_TEMP ... 9223372036854775794``).
"""

from __future__ import annotations

from fleetmind.serving.health import snapshot_signals
from fleetmind.serving.telemetry.base import FleetSnapshot
from fleetmind.serving.telemetry.prometheus import is_dcgm_blank, parse_dcgm

H100 = "NVIDIA H100 80GB HBM3"
INT64_NOT_SUPPORTED = 9223372036854775794  # DCGM_INT64_BLANK + 2
FP64_BLANK = 140737488355328.0


def _series(
    values: dict[str, float], gpu: int, gi: int | None = None, extra: str = ""
) -> list[str]:
    lab = f'gpu="{gpu}",UUID="GPU-{gpu}",device="nvidia{gpu}",modelName="{H100}",Hostname="n1"'
    if gi is not None:
        lab += f',GPU_I_PROFILE="1g.10gb",GPU_I_ID="{gi}"'
    return [f"{name}{{{lab}{extra}}} {v!r}" for name, v in values.items()]


def _text(lines: list[str]) -> str:
    return "\n".join(lines) + "\n"


def test_a_mig_gpu_exported_whole_and_per_instance_counts_its_instances_only() -> None:
    parent = {"DCGM_FI_DEV_FB_USED": 9078, "DCGM_FI_DEV_FB_FREE": 72481,
              "DCGM_FI_DEV_GPU_UTIL": 0, "DCGM_FI_DEV_XID_ERRORS": 0}  # fmt: skip
    lines = _series(parent, 0)
    for gi in (7, 8, 9):
        used = 9000 if gi == 9 else 13
        lines += _series({"DCGM_FI_DEV_FB_USED": used, "DCGM_FI_DEV_FB_FREE": 9984 - used,
                          "DCGM_FI_PROF_GR_ENGINE_ACTIVE": 0.0}, 0, gi)  # fmt: skip
    lines += _series({"DCGM_FI_DEV_FB_USED": 580, "DCGM_FI_DEV_FB_FREE": 80979}, 1)
    (node,) = parse_dcgm(_text(lines))
    assert [g.index for g in node.gpus] == [1, 107, 108, 109]  # no physical GPU 0 beside them
    assert [g.mig_parent for g in node.gpus] == [None, 0, 0, 0]
    assert [g.free_milli for g in node.gpus] == [1000, 1000, 1000, 98]


def test_a_hardware_xid_on_the_whole_gpu_takes_its_instances_out() -> None:
    lines = _series({"DCGM_FI_DEV_FB_USED": 9078, "DCGM_FI_DEV_FB_FREE": 72481,
                     "DCGM_FI_DEV_XID_ERRORS": 79}, 0)  # fmt: skip
    for gi in (7, 8):
        lines += _series({"DCGM_FI_DEV_FB_USED": 13, "DCGM_FI_DEV_FB_FREE": 9971}, 0, gi)
    (node,) = parse_dcgm(_text(lines))
    assert [(g.index, g.healthy, g.free_milli) for g in node.gpus] == [
        (107, False, 0),
        (108, False, 0),
    ]


def test_blank_and_out_of_range_readings_are_no_reading() -> None:
    mem = {"DCGM_FI_DEV_FB_USED": 580, "DCGM_FI_DEV_FB_FREE": 80979}
    lines = _series({**mem, "DCGM_FI_DEV_GPU_UTIL": INT64_NOT_SUPPORTED}, 0)
    lines += _series({**mem, "DCGM_FI_DEV_GPU_UTIL": 97}, 1)
    lines += _series({**mem, "DCGM_FI_PROF_GR_ENGINE_ACTIVE": FP64_BLANK + 2}, 2)
    lines += _series({**mem, "DCGM_FI_DEV_GPU_UTIL": 250.0}, 3)  # no utilisation is over 100 %
    lines += _series({"DCGM_FI_DEV_FB_USED": INT64_NOT_SUPPORTED, "DCGM_FI_DEV_FB_FREE": 80979,
                      "DCGM_FI_DEV_XID_ERRORS": INT64_NOT_SUPPORTED}, 4)  # fmt: skip
    (node,) = parse_dcgm(_text(lines))
    assert [g.util_pct for g in node.gpus] == [None, 97.0, None, None, None]
    last = node.gpus[4]
    assert (last.mem_used_mib, last.mem_total_mib, last.xid_errors) == (None, None, None)
    assert last.healthy and last.free_milli == 0  # unknown memory: nothing offered
    # cluster health sees one reading (97 %), not a utilisation of 9.2e18 % capped at saturated
    sig = snapshot_signals(FleetSnapshot("prometheus", [node], 0.0))["local"]
    assert sig.gpu_util == 0.97


def test_blank_values_are_the_dcgm_sentinels_only() -> None:
    assert is_dcgm_blank(float(INT64_NOT_SUPPORTED)) and is_dcgm_blank(FP64_BLANK + 3)
    assert is_dcgm_blank(float(0x7FFFFFF0 + 1))  # DCGM_INT32_NOT_FOUND
    assert not any(is_dcgm_blank(v) for v in (0.0, 100.0, 81559.0, FP64_BLANK - 1, 2.0**40))
