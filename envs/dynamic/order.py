"""Which startable queued job starts next: the queue order of :class:`.sim.DynamicSim`.

FIFO with backfill (the default, ``order=None``) starts the first job of the backfill window (the
queue head and up to ``backfill_depth`` jobs behind it) that fits some node now. A
:class:`LinearOrder` looks at the same window and starts, among the jobs that fit now, the one with
the lowest priority score ``phi(j) . w``, where ``phi`` has the columns of
:data:`ORDER_FEATURES` (ties go to the earlier queue position). The placement of the chosen job is
still the placement policy's; an order changes only *which* job it is asked to place.

What a score can read is what the simulator's scheduler already knows when the job waits: its
request, its ideal runtime (the dynamic-mode model's known job duration, which the placement
observation also reads: ``docs/dynamic.md``), how long it has waited and where it sits in the queue.

Named orders (:data:`NAMED_ORDERS`): ``fifo`` (``w = (0, 0, 0, 1)``, the default's choice),
``sjf`` (shortest ideal runtime first, ``w = (1, 0, 0, 0)``), ``hrrn`` (highest response ratio
``(wait + ideal) / ideal`` first, ``w = (0, -1, 0, 0)``), ``small`` (smallest GPU request first).
A learned order (``fleetmind sched train --mode dynamic --algo order``, :mod:`fleetmind.rl.order_es`)
is a weight vector found by evolution strategies.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from fleetmind.data.errors import ConfigError
from fleetmind.data.openb import GPU_MILLI

if TYPE_CHECKING:  # the simulator imports this module
    from fleetmind.envs.dynamic.sim import DynamicSim

ORDER_FEATURES: tuple[str, ...] = (
    "log10_ideal_runtime_s",
    "log1p_wait_over_ideal",
    "gpu_request_over_8",
    "queue_position_over_window",
)
"""Columns of :func:`order_features`: ``log10`` of the ideal runtime (s); ``log(1 + waited /
ideal runtime)`` (the log response ratio); GPUs requested (a share counts its fraction) / 8; the
job's position in the queue / the window's length (0 for the head)."""

N_ORDER_FEATURES = len(ORDER_FEATURES)

NAMED_ORDERS: dict[str, tuple[float, ...] | None] = {
    "fifo": None,
    "sjf": (1.0, 0.0, 0.0, 0.0),
    "hrrn": (0.0, -1.0, 0.0, 0.0),
    "small": (0.0, 0.0, 1.0, 0.0),
}
"""Hand-set orders by name (``None``: FIFO with backfill, the simulator's default)."""

FIFO_WEIGHTS: tuple[float, ...] = (0.0, 0.0, 0.0, 1.0)
"""The weights that pick what FIFO with backfill picks (the earliest startable job)."""


def order_features(sim: DynamicSim, jobs: Sequence[int], positions: Sequence[int]) -> np.ndarray:
    """``(len(jobs), N_ORDER_FEATURES)`` float64 rows of :data:`ORDER_FEATURES` for queued
    ``jobs`` at queue ``positions`` (0 = head) of ``sim`` now."""
    jb = sim.jobs
    idx = np.asarray(jobs, dtype=np.int64)
    ideal = np.maximum(jb.ideal_s[idx], 1e-9)
    wait = np.maximum(sim.now - jb.arrival_s[idx], 0.0)
    gpu = np.array([sim.pod(int(j)).gpu_request for j in idx], dtype=np.float64) / GPU_MILLI
    out = np.empty((len(idx), N_ORDER_FEATURES))
    out[:, 0] = np.log10(ideal)
    out[:, 1] = np.log1p(wait / ideal)
    out[:, 2] = gpu / 8.0
    out[:, 3] = np.asarray(positions, dtype=np.float64) / (1 + sim.backfill_depth)
    return out


@dataclass(frozen=True)
class LinearOrder:
    """Start the startable job with the lowest ``order_features . weights`` (ties: the earlier
    position). ``weights``: ``(N_ORDER_FEATURES,)`` finite floats."""

    weights: tuple[float, ...]

    def __post_init__(self) -> None:
        w = tuple(float(x) for x in self.weights)
        if len(w) != N_ORDER_FEATURES or not all(math.isfinite(x) for x in w):
            raise ConfigError(
                f"a queue order needs {N_ORDER_FEATURES} finite weights "
                f"({', '.join(ORDER_FEATURES)}), got {list(self.weights)!r}"
            )
        object.__setattr__(self, "weights", w)

    def pick(self, sim: DynamicSim, jobs: Sequence[int], positions: Sequence[int]) -> int:
        """The job of ``jobs`` (queued, each fits some node now) to start next."""
        if len(jobs) == 1:
            return int(jobs[0])
        score = order_features(sim, jobs, positions) @ np.asarray(self.weights)
        return int(jobs[int(np.argmin(score))])  # argmin keeps the first of equal scores


def make_order(spec: str | Sequence[float] | None) -> LinearOrder | None:
    """A queue order from a name of :data:`NAMED_ORDERS`, a weight sequence, or ``None`` (FIFO).

    Raises:
        ConfigError: an unknown name or a bad weight vector (one line).
    """
    if spec is None:
        return None
    if isinstance(spec, str):
        if spec not in NAMED_ORDERS:
            raise ConfigError(
                f"unknown queue order {spec!r}; choose one of {', '.join(NAMED_ORDERS)} or give "
                f"{N_ORDER_FEATURES} weights"
            )
        w = NAMED_ORDERS[spec]
        return None if w is None else LinearOrder(w)
    return LinearOrder(tuple(spec))
