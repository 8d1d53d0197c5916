"""Process tuning of the service: GC thresholds, glibc malloc, torch threads.

Applied by the server (:func:`fleetmind.serving.app.build_services`, its lifespan) and by each RCA worker
process of :mod:`fleetmind.serving.rca.pool` as it starts, so both rank under the same settings.
"""

from __future__ import annotations

import gc
import sys
from collections.abc import Callable


def tune_gc(gen0_threshold: int | None) -> Callable[[], None]:
    """Make Python's cyclic GC cheaper while serving; returns a function that undoes it.

    The objects alive after startup (models, torch_geometric, pydantic and FastAPI internals: about
    half a million) are frozen out of collections, and generation 0 is collected every
    ``gen0_threshold`` allocations instead of 700: a 200-alert RCA request allocates thousands of
    objects, which cost ~2-3 ms of collections per request at the default threshold.
    """
    if gen0_threshold is None:
        return lambda: None
    old = gc.get_threshold()
    gc.freeze()  # no full collection first: it costs ~0.5 s, and startup garbage is small
    gc.set_threshold(gen0_threshold, *old[1:])

    def restore() -> None:
        gc.set_threshold(*old)
        gc.unfreeze()

    return restore


def tune_malloc(mmap_threshold_mb: int | None) -> bool:
    """Keep glibc malloc from mapping and unmapping memory for every request; True when applied.

    A 200-alert RCA request allocates tensors of a few hundred KiB, above glibc's initial mmap
    threshold (128 KiB): each came from a fresh ``mmap`` and went back with ``munmap``, ~350 page
    faults (~1 ms of system CPU) per request. Here allocations below ``mmap_threshold_mb`` come from
    the heap, and freed heap memory up to twice that stays mapped for reuse (``mallopt``
    ``M_MMAP_THRESHOLD``, ``M_TRIM_THRESHOLD``, ``M_TOP_PAD``). ``0``/``None`` or not glibc (musl,
    macOS): nothing done.
    """
    if not mmap_threshold_mb or not sys.platform.startswith("linux"):
        return False
    import ctypes

    try:
        libc = ctypes.CDLL(None)
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    size = mmap_threshold_mb * 1024 * 1024
    m_trim_threshold, m_top_pad, m_mmap_threshold = -1, -2, -3
    return bool(
        mallopt(m_mmap_threshold, size)
        and mallopt(m_trim_threshold, 2 * size)
        and mallopt(m_top_pad, size)
    )


def set_torch_threads(n: int | None) -> None:
    """Pin torch's intra-op threads for this process (``None``: leave torch's default).

    Each process ranks on one thread at a time (:mod:`fleetmind.serving.rca.batcher`), so one torch thread per
    process and one process per core (``--workers``) use the cores without oversubscribing them; the
    GAT analyzer also asks for one thread per call, and a process-wide 1 keeps concurrent callers
    (the RCA batcher, the incident worker) from restoring a larger value under each other.
    """
    if n is None:
        return
    import torch

    torch.set_num_threads(n)
