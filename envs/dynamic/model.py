"""Dynamic mode's model constants (sources in ``docs/dynamic.md``) and its runtime formula.

:func:`runtime_factor`: ``run = work * ((1 - c) / s + c * B_ref / B_min)`` for a job of ``k >= 2``
GPUs (``work / s`` otherwise), with ``s`` the GPU model's relative throughput (:func:`gpu_speed`),
``B_min`` the slowest link among the job's GPUs and ``c`` its communication intensity.
"""

from __future__ import annotations

import numpy as np

from fleetmind.data.errors import ConfigError

# Constants (sources in docs/dynamic.md)
GPU_TFLOPS: dict[str, tuple[float, float]] = {
    "P100": (9.3, 18.7),
    "V100": (15.7, 125.0),
    "V100M16": (15.7, 125.0),
    "V100M32": (15.7, 125.0),
    "T4": (8.1, 65.0),
    "A10": (31.2, 125.0),
    "A100": (19.5, 312.0),
    "H100": (67.0, 989.0),
}
"""Peak (FP32, dense FP16 tensor) TFLOPS per GPU model, from NVIDIA's product datasheets (P100 PCIe,
V100 SXM2, T4, A10, A100 SXM4, H100 SXM5; see docs/dynamic.md)."""

REFERENCE_GPU_MODEL = "V100"
"""Speed 1.0. Trace durations are read as runtimes on this model (openb's anonymised G2/G3 hold 76 %
of the fleet's GPUs and are assumed to be as fast as it)."""

REFERENCE_LINK_GBPS = 25.0
"""Bandwidth (GB/s, one direction) of the reference placement's slowest link: one NVLink 2 link
(V100 architecture whitepaper: 6 links, 300 GB/s bidirectional in total)."""

COMM_INTENSITY_MAX = 0.5
"""Communication intensity ``c`` of a multi-GPU job is drawn from ``Uniform(0, COMM_INTENSITY_MAX)``."""

DATASET_CATALOG_GB: dict[str, float] = {
    "CIFAR-10": 0.163,
    "COCO-2017-train": 18.0,
    "OpenWebText": 38.0,
    "LibriSpeech-960h": 59.3,
    "ImageNet-1k-train": 138.0,
}
"""Dataset sizes (GB) of well-known public training sets (download sizes as published; docs/dynamic.md);
each job draws one uniformly."""

SYNTHETIC_DURATION_MEDIAN_S = 616.0
"""Median of ``deletion_time - scheduled_time`` over the 7,255 scheduled pods of openb ``default``."""

SYNTHETIC_DURATION_SIGMA = 1.977
"""Log-normal sigma matching that median and the p90 (7,764 s): ``ln(7764 / 616) / 1.2816``."""

MIN_WORK_S = 1.0
"""Floor on a job's work (seconds)."""

MAX_WORK_S = 86_400.0
"""Default cap on a job's work: one day (openb ``default``: 1.2 % of the scheduled pods run longer,
up to 145 days; their time beyond one day is 86 % of all GPU-seconds)."""

MAX_GAP_S = 86_400.0
"""Trace inter-arrival gaps above one day are replaced by the median gap (openb ``default``: 16 gaps,
all among the first 26 pods, created over 115 days; the last 34.5 days hold 99.7 % of the pods)."""

DEFAULT_TARGET_UTIL = 0.8
"""Default offered GPU load during the arrival window (fraction of fleet GPU capacity)."""

DEFAULT_BACKFILL_DEPTH = 8
"""Queued jobs behind the head that may start when they fit (0 = strict FIFO)."""

DEFAULT_NODE_FRACTION = 0.25
"""Share of the openb nodes :func:`evaluate_dynamic` keeps (stratified): one pass of an 8,152-pod
trace can load 1,565 GPUs to the target, but not 6,212 (docs/dynamic.md, "Load scaling")."""

DEFAULT_SPEED_BASIS = "fp16"
"""GPU speeds from dense FP16 tensor TFLOPS (mixed-precision training)."""

# job status codes
FUTURE, QUEUED, RUNNING, DONE, REJECTED = 0, 1, 2, 3, 4


def gpu_speed(model: str, basis: str = DEFAULT_SPEED_BASIS) -> float:
    """Relative throughput of ``model`` against :data:`REFERENCE_GPU_MODEL` (1.0 when unknown).

    Args:
        model: GPU model name (``"V100M32"``, ``"T4"``, ...).
        basis: ``"fp32"`` (peak FP32 TFLOPS) or ``"fp16"`` (dense FP16 tensor TFLOPS).
    """
    if basis not in ("fp32", "fp16"):
        raise ConfigError(f"speed basis must be 'fp32' or 'fp16', got {basis!r}")
    i = 0 if basis == "fp32" else 1
    ref = GPU_TFLOPS[REFERENCE_GPU_MODEL][i]
    spec = GPU_TFLOPS.get(model)
    return 1.0 if spec is None else spec[i] / ref


def runtime_factor(
    speed: np.ndarray | float,
    bottleneck_gbps: np.ndarray | float,
    num_gpu: np.ndarray | int,
    comm: np.ndarray | float,
    ref_gbps: float = REFERENCE_LINK_GBPS,
) -> np.ndarray:
    """Runtime per unit of work: ``(1 - c) / s + c * B_ref / B_min`` for ``k >= 2``, else ``1 / s``.

    Args:
        speed: relative GPU throughput ``s`` (> 0).
        bottleneck_gbps: slowest GB/s among the job's GPU pairs ``B_min`` (ignored for ``k < 2``).
        num_gpu: GPUs of the job ``k``.
        comm: communication intensity ``c`` in [0, 1): the share of a step spent communicating on
            the reference placement.
        ref_gbps: ``B_ref``.

    Returns:
        Broadcast float64 array; ``runtime = work * factor``.
    """
    s = np.asarray(speed, dtype=np.float64)
    c = np.asarray(comm, dtype=np.float64)
    b = np.asarray(bottleneck_gbps, dtype=np.float64)
    k = np.asarray(num_gpu)
    with np.errstate(divide="ignore", invalid="ignore"):
        multi = (1.0 - c) / s + c * ref_gbps / b
    return np.where(k >= 2, multi, 1.0 / s)


__all__ = [
    "COMM_INTENSITY_MAX",
    "DATASET_CATALOG_GB",
    "DEFAULT_BACKFILL_DEPTH",
    "DEFAULT_NODE_FRACTION",
    "DEFAULT_SPEED_BASIS",
    "DEFAULT_TARGET_UTIL",
    "GPU_TFLOPS",
    "MAX_WORK_S",
    "REFERENCE_LINK_GBPS",
    "gpu_speed",
    "runtime_factor",
]
