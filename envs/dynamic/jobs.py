"""Dynamic-mode jobs (:class:`DynJobs`, built by :func:`build_jobs`) from a trace.

A stream of ``n_jobs`` pods taken from the trace in ``creation_time`` order (circularly, from a
random start) with the trace's own inter-arrival gaps (a synthetic Poisson process for traces without
times), compressed by one factor so that the offered GPU load during the arrival window equals
``target_util``; the work of a job (seconds on the reference placement) from ``deletion_time -
scheduled_time`` (``- creation_time`` for a trace without scheduled times); a communication
intensity per multi-GPU job; a data home cluster and a dataset size per job.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass, replace

import numpy as np

from fleetmind.data.errors import ConfigError, DataError
from fleetmind.data.openb import ANY_GPU_MODEL, GPU_MILLI, PodTrace, TraceWarning
from fleetmind.envs.core import MAX_GPUS_PER_NODE, Pod
from fleetmind.envs.dynamic.fleet import DynFleet, best_bottleneck_set
from fleetmind.envs.dynamic.model import (
    COMM_INTENSITY_MAX,
    DATASET_CATALOG_GB,
    DEFAULT_TARGET_UTIL,
    MAX_GAP_S,
    MAX_WORK_S,
    MIN_WORK_S,
    SYNTHETIC_DURATION_MEDIAN_S,
    SYNTHETIC_DURATION_SIGMA,
    runtime_factor,
)
from fleetmind.envs.fgd_mode import canonical_pod_order


# Jobs
@dataclass
class DynJobs:
    """Jobs of one dynamic-mode run (``J`` jobs, sorted by arrival).

    Attributes:
        names: ``(J,)`` pod names.
        arrival_s: ``(J,)`` arrival times (s, first arrival at 0, load-scaled).
        work_s: ``(J,)`` runtime on the reference placement (s).
        cpu_milli, memory_mib, num_gpu, gpu_milli, gpu_spec_mask: ``(J,)`` requests (see
            :class:`fleetmind.envs.core.Pod`).
        comm: ``(J,)`` communication intensity in [0, 1) (0 for jobs of fewer than two GPUs).
        data_home: ``(J,)`` cluster index holding the job's dataset.
        data_gb: ``(J,)`` dataset size (GB).
        ideal_s: ``(J,)`` ideal runtime: the fastest runtime on the empty fleet, data local.
        time_scale: factor applied to trace inter-arrival times (``< 1`` compresses).
        offered_load: offered GPU load over the arrival window (== ``target_util`` up to bisection;
            NaN when every job arrives at one instant: there is no window).
        synthetic_arrivals: True when arrivals came from the synthetic Poisson process.
        n_duration_fallback: jobs whose work came from the fallback (never scheduled, no
            ``deletion_time``, or no times; see :func:`build_jobs`).
    """

    names: np.ndarray
    arrival_s: np.ndarray
    work_s: np.ndarray
    cpu_milli: np.ndarray
    memory_mib: np.ndarray
    num_gpu: np.ndarray
    gpu_milli: np.ndarray
    gpu_spec_mask: np.ndarray
    comm: np.ndarray
    data_home: np.ndarray
    data_gb: np.ndarray
    ideal_s: np.ndarray
    time_scale: float = 1.0
    offered_load: float = float("nan")
    synthetic_arrivals: bool = False
    n_duration_fallback: int = 0

    def __len__(self) -> int:
        return len(self.names)

    def pod(self, j: int) -> Pod:
        """The :class:`fleetmind.envs.core.Pod` request of job ``j``."""
        return Pod(
            int(self.cpu_milli[j]),
            int(self.memory_mib[j]),
            int(self.num_gpu[j]),
            int(self.gpu_milli[j]),
            int(self.gpu_spec_mask[j]),
        )

    @property
    def gpus(self) -> np.ndarray:
        """``(J,)`` GPUs held (``num_gpu * gpu_milli / 1000``)."""
        return self.num_gpu * self.gpu_milli / GPU_MILLI

    def window(self, start: int, n: int) -> DynJobs:
        """Jobs ``start .. start + n - 1`` with arrivals rebased to 0."""
        sl = slice(start, start + n)
        arrays = {
            k: getattr(self, k)[sl]
            for k in (
                "names",
                "arrival_s",
                "work_s",
                "cpu_milli",
                "memory_mib",
                "num_gpu",
                "gpu_milli",
                "gpu_spec_mask",
                "comm",
                "data_home",
                "data_gb",
                "ideal_s",
            )
        }
        arrays["arrival_s"] = arrays["arrival_s"] - arrays["arrival_s"][0]
        return replace(self, **arrays)


def offered_load(
    arrival_s: np.ndarray, work_s: np.ndarray, gpus: np.ndarray, capacity: float
) -> float:
    """Mean GPU demand over the arrival window if every job ran from its arrival, / capacity.

    ``load = sum_j g_j * overlap([a_j, a_j + w_j], [a_0, a_last]) / (capacity * (a_last - a_0))``.
    """
    a0, a1 = float(arrival_s.min()), float(arrival_s.max())
    span = a1 - a0
    if span <= 0:
        return math.inf
    overlap = np.clip(np.minimum(arrival_s + work_s, a1) - arrival_s, 0.0, None)
    return float((gpus * overlap).sum() / (capacity * span))


def _scale_for_load(
    a: np.ndarray, w: np.ndarray, g: np.ndarray, cap: float, target: float
) -> float:
    """Factor ``f`` so that ``offered_load(a * f, ...) == target`` (bisection on log f)."""
    lo, hi = 1e-9, 1e9
    if offered_load(a * hi, w, g, cap) > target:
        return hi
    if offered_load(a * lo, w, g, cap) < target:
        return lo
    for _ in range(80):
        mid = math.sqrt(lo * hi)
        if offered_load(a * mid, w, g, cap) > target:
            lo = mid
        else:
            hi = mid
        if hi / lo < 1 + 1e-9:
            break
    return math.sqrt(lo * hi)


def _node_kinds(fleet: DynFleet) -> list[tuple[int, int, int, int, float, np.ndarray]]:
    """Distinct (cpu, mem, model_id, topo, speed) node kinds with their best bottleneck per k."""
    seen: dict[tuple[int, int, int, int], int] = {}
    kinds: list[tuple[int, int, int, int, float, np.ndarray]] = []
    for n in range(fleet.n_nodes):
        key = (
            int(fleet.cpu_milli[n]),
            int(fleet.memory_mib[n]),
            int(fleet.model_id[n]),
            int(fleet.topo_id[n]),
        )
        if key in seen:
            continue
        seen[key] = n
        g = int(fleet.num_gpu[n])
        best = np.zeros(MAX_GPUS_PER_NODE + 1)
        for k in range(MAX_GPUS_PER_NODE + 1):
            best[k] = best_bottleneck_set(fleet, n, (1 << g) - 1, k)[0] if k <= g else 0.0
        kinds.append((*key, float(fleet.speed[n]), best))
    return kinds


def ideal_runtimes(
    fleet: DynFleet,
    work_s: np.ndarray,
    cpu: np.ndarray,
    mem: np.ndarray,
    num_gpu: np.ndarray,
    gpu_spec_mask: np.ndarray,
    comm: np.ndarray,
) -> np.ndarray:
    """``(J,)`` fastest runtime of each job on the empty fleet (data local); ``inf`` if it fits nowhere."""
    best = np.full(len(work_s), np.inf)
    for kcpu, kmem, mid, _topo, speed, bw in _node_kinds(fleet):
        g = int(np.count_nonzero(bw[1:])) if mid >= 0 else 0  # bw[k] > 0 exactly for 1 <= k <= G
        ok = (cpu <= kcpu) & (mem <= kmem) & (num_gpu <= g)
        model_ok = np.where(
            gpu_spec_mask == ANY_GPU_MODEL, True, (gpu_spec_mask >> max(mid, 0)) & 1 == 1
        )
        ok &= np.where(num_gpu > 0, (mid >= 0) & model_ok, True)
        k = np.minimum(num_gpu, MAX_GPUS_PER_NODE)
        f = np.where(num_gpu > 0, runtime_factor(speed, bw[k], num_gpu, comm), 1.0)
        best = np.where(ok, np.minimum(best, work_s * f), best)
    return best


def _arrival_stream(
    trace: PodTrace, rng: np.random.Generator, n_jobs: int, max_gap_s: float
) -> tuple[np.ndarray, np.ndarray, bool]:
    """Pod indices and unscaled arrival times of an ``n_jobs`` stream (see :func:`build_jobs`)."""
    p = len(trace)
    created = np.asarray(trace.creation_time, dtype=np.float64)
    synthetic = not bool(np.isfinite(created).any())  # partly blank: refused by _check_times
    if synthetic:
        idx = rng.integers(0, p, n_jobs) if n_jobs > p else rng.permutation(p)[:n_jobs]
        raw = np.concatenate([[0.0], np.cumsum(rng.exponential(1.0, n_jobs - 1))])
        return idx, raw, True
    order = np.lexsort((np.arange(p), created))
    gaps = np.diff(created[order])
    median_gap = float(np.median(gaps)) if gaps.size else 1.0
    gaps = np.where(gaps > max_gap_s, median_gap, gaps)
    # circular trace: the gap from the last pod back to the first is the median gap
    gaps = np.append(gaps, median_gap)
    start = int(rng.integers(0, p))
    pos = (start + np.arange(n_jobs)) % p
    idx = order[pos]
    step = gaps[(pos - 1) % p]
    step[0] = 0.0
    return idx, np.cumsum(step), False


def _observed_work(trace: PodTrace) -> tuple[np.ndarray, bool]:
    """``(work, from_lifetime)``: ``(P,)`` observed work in seconds (NaN where unknown) and whether
    it is the pods' lifetime.

    The work is ``deletion_time - scheduled_time``; a trace without any ``scheduled_time`` (no
    such column, or every value blank) has no start of run, and its work is then the lifetime
    ``deletion_time - creation_time`` (an upper bound: it includes the time a pod queued before it
    was scheduled; :func:`_warn_lifetimes` says so), except for the pods whose ``pod_phase`` is
    ``Pending`` (when the trace has that column): they never ran, their lifetime is all queueing,
    and their work is unknown (NaN). In a trace with scheduled times, a pod without one was never
    scheduled: its work is unknown (NaN), not its lifetime. Unknown works are drawn by
    :func:`_trace_work`.
    """
    deleted = np.asarray(trace.deletion_time, dtype=np.float64)
    scheduled = np.asarray(trace.scheduled_time, dtype=np.float64)
    if np.isfinite(scheduled).any():
        return deleted - scheduled, False
    lifetime = deleted - np.asarray(trace.creation_time, dtype=np.float64)
    if trace.pod_phase is not None:
        lifetime[np.asarray(trace.pod_phase) == "Pending"] = np.nan  # never ran
    return lifetime, True


def _trace_work(
    trace: PodTrace, rng: np.random.Generator, max_work_s: float | None
) -> tuple[np.ndarray, np.ndarray]:
    """``(work, fallback)``, ``(P,)`` each: every trace pod's work in seconds on the reference
    placement (see :func:`build_jobs`), and whether it was drawn rather than observed."""
    work_all, _ = _observed_work(trace)
    # a pod deleted in the second it was scheduled ran 0 s (Kubernetes keeps times to the second:
    # apimachinery meta/v1 Time): observed, and floored below like every short run; a negative
    # work never gets here (_check_times)
    observed = np.isfinite(work_all)
    fallback_all = ~observed
    if fallback_all.any():
        k = int(fallback_all.sum())
        if observed.any():
            work_all[fallback_all] = rng.choice(work_all[observed], size=k)
        else:
            work_all[fallback_all] = rng.lognormal(
                math.log(SYNTHETIC_DURATION_MEDIAN_S), SYNTHETIC_DURATION_SIGMA, k
            )
    work_all = np.maximum(work_all, MIN_WORK_S)
    if max_work_s is not None:
        work_all = np.minimum(work_all, float(max_work_s))
    return work_all, fallback_all


TIME_ORDER = (("scheduled_time", "deletion_time"), ("creation_time", "deletion_time"))
"""Pairs of pod times that must not run backwards: a pod is deleted after it was scheduled (its
work would be negative) and after it was created."""


def _check_times(trace: PodTrace) -> None:
    """Refuse a trace whose times cannot be read as a stream: a deletion before the pod's
    scheduling (a negative work) or creation, or a ``creation_time`` blank for some pods only
    (arrivals are the trace's own or, for a trace without any creation time, a Poisson process; a
    mix of both is neither).

    Raises:
        DataError: naming the trace, the first such pod (its name and position) and the count.
    """
    where = trace.source or trace.name
    names = trace.pod_names
    for first, then in TIME_ORDER:
        a = np.asarray(getattr(trace, first), dtype=np.float64)
        b = np.asarray(getattr(trace, then), dtype=np.float64)
        with np.errstate(invalid="ignore"):
            bad = np.isfinite(a) & np.isfinite(b) & (b < a)
        if bad.any():
            i = int(np.argmax(bad))
            raise DataError(
                f"trace {where}: pod {str(names[i])!r} (pod {i + 1} of {len(trace):,}) has "
                f"{then} {float(b[i]):.15g} before {first} {float(a[i]):.15g} "
                f"({int(bad.sum()):,} pod(s) so); a pod is deleted after it is created and "
                "scheduled"
            )
    created = np.isfinite(np.asarray(trace.creation_time, dtype=np.float64))
    if created.any() and not created.all():
        i = int(np.argmin(created))
        raise DataError(
            f"trace {where}: pod {str(names[i])!r} (pod {i + 1} of {len(trace):,}) has no "
            f"creation_time ({int((~created).sum()):,} pod(s) have none); give every pod a "
            "creation_time, or none (arrivals are then a Poisson process)"
        )


def _drawn_from(observed: np.ndarray) -> str:
    """Where :func:`_trace_work` draws the works it does not observe, in words."""
    if np.isfinite(observed).any():
        return "the trace's observed works"
    return (
        f"a log-normal (median {SYNTHETIC_DURATION_MEDIAN_S:g} s; the trace has no observed work)"
    )


def _warn_unfinished(trace: PodTrace) -> None:
    """A :class:`fleetmind.data.openb.TraceWarning` counting the pods scheduled but never deleted:
    their work is unknown and drawn like that of the pods never scheduled."""
    sched = np.isfinite(np.asarray(trace.scheduled_time, dtype=np.float64))
    unfinished = sched & ~np.isfinite(np.asarray(trace.deletion_time, dtype=np.float64))
    if unfinished.any():
        i = int(np.argmax(unfinished))
        warnings.warn(
            f"trace {trace.source or trace.name}: {int(unfinished.sum()):,} scheduled pod(s) have "
            f"no deletion_time (first: {str(trace.pod_names[i])!r}); their work is drawn from "
            f"{_drawn_from(_observed_work(trace)[0])}",
            TraceWarning,
            stacklevel=3,
        )


def _warn_lifetimes(trace: PodTrace) -> None:
    """A :class:`fleetmind.data.openb.TraceWarning` when the works are lifetimes (a trace with
    ``creation_time`` and ``deletion_time`` but no ``scheduled_time``, :func:`_observed_work`):
    how many pods, that it is an upper bound, and where the others' works come from (the
    ``Pending`` pods' among them); also when every pod of such a trace is ``Pending`` (all works
    drawn)."""
    work, from_lifetime = _observed_work(trace)
    known = np.isfinite(work)
    if not from_lifetime:
        return
    phase = trace.pod_phase
    pending = int((np.asarray(phase) == "Pending").sum()) if phase is not None else 0
    never = f" ({pending:,} of them Pending: never ran)" if pending else ""
    if not known.any():
        if pending == len(trace):  # with pods that ran but no lifetime: no times to speak of
            warnings.warn(
                f"trace {trace.source or trace.name}: no scheduled_time and no pod that ran "
                f"({pending:,} Pending pod(s)): every work is drawn from {_drawn_from(work)}",
                TraceWarning,
                stacklevel=3,
            )
        return
    rest = len(trace) - int(known.sum())
    others = f"; the other {rest:,} pod(s){never} draw theirs from them" if rest else ""
    warnings.warn(
        f"trace {trace.source or trace.name}: no scheduled_time; the work of its "
        f"{int(known.sum()):,} pod(s) with a creation_time and a deletion_time is their lifetime "
        "deletion_time - creation_time, an upper bound (it includes time spent queueing before "
        f"the pod was scheduled){others}",
        TraceWarning,
        stacklevel=3,
    )


def _data_homes(
    fleet: DynFleet, rng: np.random.Generator, n: int, catalog_gb: dict[str, float]
) -> tuple[np.ndarray, np.ndarray]:
    """``(data home cluster, dataset GB)``, ``(n,)`` each: a cluster drawn in proportion to its
    GPU capacity, a size drawn uniformly from ``catalog_gb``."""
    cap = np.bincount(fleet.cluster, weights=fleet.num_gpu, minlength=fleet.n_clusters)
    cap = cap if cap.sum() > 0 else np.ones(fleet.n_clusters)
    data_home = rng.choice(fleet.n_clusters, size=n, p=cap / cap.sum())
    catalog = np.array(list(catalog_gb.values()), dtype=np.float64)
    return data_home, catalog[rng.integers(0, catalog.size, n)]


_SHORT_STREAMS_WARNED: set[tuple[int, int, float]] = set()
"""``(n_jobs, GPU capacity, target load)`` settings already warned about in this process."""


def _warn_load(trace: PodTrace, fleet: DynFleet, n: int, target: float, reached: float) -> None:
    """A :class:`fleetmind.data.openb.TraceWarning` (one ``fleetmind: warning:`` line in the CLI)
    when a stream's offered load is undefined (``reached`` NaN: every job arrives at one instant)
    or short of ``target``."""
    if math.isnan(reached):
        warnings.warn(
            f"all pods arrive at one instant; offered load undefined ({n} job(s) of trace "
            f"{trace.source or trace.name}: a stream needs two distinct arrival times)",
            TraceWarning,
            stacklevel=3,
        )
        return
    key = (n, int(fleet.gpu_capacity), target)
    if reached < 0.99 * target and key not in _SHORT_STREAMS_WARNED:
        # once per setting and process: a training run draws thousands of such streams, and a
        # warning per stream (its load differs each time) buried the progress bars
        _SHORT_STREAMS_WARNED.add(key)
        warnings.warn(
            f"offered load {reached:.2f} < target {target:.2f}: {n} jobs cannot load "
            f"{fleet.gpu_capacity} GPUs that much even arriving together; raise n_jobs or use "
            "fewer nodes (said once for this setting)",
            TraceWarning,
            stacklevel=3,
        )


def _checked_trace(
    trace: PodTrace, target_util: float, comm_max: float, n_jobs: int | None
) -> tuple[PodTrace, int]:
    """:func:`build_jobs`'s argument checks (its Raises); returns the trace in
    :func:`fleetmind.envs.fgd_mode.canonical_pod_order` and the stream length."""
    if not target_util > 0:
        raise ConfigError(f"target_util must be > 0, got {target_util}")
    if not 0 <= comm_max < 1:
        raise ConfigError(f"comm_max must be within [0, 1), got {comm_max}")
    p = len(trace)
    if p == 0:
        raise DataError(f"trace {trace.name!r} has no pods")
    n = p if n_jobs is None else int(n_jobs)
    if n < 1:
        raise ConfigError(f"n_jobs must be >= 1, got {n_jobs}")
    _check_times(trace)
    _warn_unfinished(trace)
    _warn_lifetimes(trace)
    canonical = canonical_pod_order(trace.pod_names)
    if not np.array_equal(canonical, np.arange(p)):
        # every draw (works, stream start, creation-time ties) is made in this order, so the
        # stream depends on the pods and not on the CSV's row order
        trace = trace.take(canonical)
    return trace, n


def build_jobs(
    trace: PodTrace,
    fleet: DynFleet,
    rng: np.random.Generator,
    *,
    target_util: float = DEFAULT_TARGET_UTIL,
    n_jobs: int | None = None,
    comm_max: float = COMM_INTENSITY_MAX,
    data_catalog_gb: dict[str, float] | None = None,
    max_work_s: float | None = MAX_WORK_S,
    max_gap_s: float = MAX_GAP_S,
) -> DynJobs:
    """Turn a pod trace into a stream of dynamic-mode jobs (all randomness from ``rng``).

    The trace's pods are first put in :func:`fleetmind.envs.fgd_mode.canonical_pod_order` (by name,
    runs of digits compared as numbers; the row order of the openb CSVs), so that the stream depends
    on the pods and not on the CSV's row order. Arrivals: the pods sorted by ``creation_time``
    (equal times in that name order) form a circular sequence; the stream is
    ``n_jobs`` consecutive pods of it from a random start (wrapping around, so a stream longer than
    the trace replays it), with the trace's own inter-arrival gaps (gaps above ``max_gap_s`` and the
    wrap-around gap become the median gap). Traces without times get a Poisson process (unit-rate
    exponential gaps) over a random permutation (or, for ``n_jobs`` above the trace length, uniform
    draws) of the pods. All gaps are then multiplied by one factor so that :func:`offered_load`
    equals ``target_util`` (if even simultaneous arrival cannot reach it, arrivals collapse to
    time 0 and ``offered_load`` reports what was reached, with a
    :class:`fleetmind.data.openb.TraceWarning` once per setting). A stream whose jobs all arrive at
    one instant (one job, or equal creation times) has no arrival window: ``offered_load`` is NaN,
    with a ``TraceWarning``.

    Work: ``deletion_time - scheduled_time`` (s; 0 s, a pod deleted in the second it was
    scheduled, is a run like any other); a trace without any ``scheduled_time`` (no such column,
    or every value blank) uses the lifetime ``deletion_time - creation_time`` instead, an upper
    bound that includes queueing (a ``TraceWarning`` says so and counts the pods). Pods never
    scheduled (no ``scheduled_time`` in a trace that has some), pods never deleted (a
    ``TraceWarning`` counts those that were scheduled) and traces without times draw it from the
    trace's observed works, else (no work observed) from a log-normal fitted to openb
    ``default``; floored at :data:`MIN_WORK_S` and capped at ``max_work_s``.

    Args:
        trace: a :class:`fleetmind.data.openb.PodTrace` (``data.openb.load_openb_trace``).
        fleet: the fleet (capacity for load scaling, ideal runtimes, data homes).
        rng: the random stream.
        target_util: offered GPU load over the arrival window (fraction of capacity, > 0).
        n_jobs: stream length (default: the trace length).
        comm_max: upper bound of the communication-intensity draw (``[0, 1)``).
        data_catalog_gb: dataset sizes to draw from (default :data:`DATASET_CATALOG_GB`).
        max_work_s: cap on a job's work in seconds (``None``: no cap).
        max_gap_s: longest trace inter-arrival gap kept as is (seconds of trace time).

    Raises:
        ConfigError: bad ``target_util``, ``comm_max`` or ``n_jobs``; DataError: empty trace,
            a ``deletion_time`` before the pod's ``scheduled_time`` or ``creation_time``, or a
            ``creation_time`` blank for some pods but not all.
    """
    trace, n = _checked_trace(trace, target_util, comm_max, n_jobs)
    work_all, fallback_all = _trace_work(trace, rng, max_work_s)
    idx, raw, synthetic = _arrival_stream(trace, rng, n, float(max_gap_s))
    work = work_all[idx]
    num_gpu = trace.num_gpu[idx].astype(np.int64)
    gpu_milli = trace.gpu_milli[idx].astype(np.int64)
    g = num_gpu * gpu_milli / GPU_MILLI
    one_instant = bool(raw.max() == raw.min())  # one job, or gaps of 0 s only: no window
    if one_instant:
        scale = 1.0  # any factor leaves every arrival at 0
    else:
        scale = _scale_for_load(raw, work, g, float(fleet.gpu_capacity), float(target_util))
    arrival = raw * scale
    comm = np.where(num_gpu >= 2, rng.uniform(0.0, comm_max, n), 0.0)
    data_home, data_gb = _data_homes(fleet, rng, n, data_catalog_gb or DATASET_CATALOG_GB)
    cpu = trace.cpu_milli[idx].astype(np.int64)
    mem = trace.memory_mib[idx].astype(np.int64)
    spec = trace.gpu_spec_mask[idx].astype(np.int64)
    ideal = ideal_runtimes(fleet, work, cpu, mem, num_gpu, spec, comm)
    cap = float(fleet.gpu_capacity)
    reached = math.nan if one_instant else offered_load(arrival, work, g, cap)
    _warn_load(trace, fleet, n, float(target_util), reached)
    return DynJobs(
        names=trace.pod_names[idx],
        arrival_s=arrival,
        work_s=work,
        cpu_milli=cpu,
        memory_mib=mem,
        num_gpu=num_gpu,
        gpu_milli=gpu_milli,
        gpu_spec_mask=spec,
        comm=comm,
        data_home=data_home.astype(np.int64),
        data_gb=data_gb,
        ideal_s=ideal,
        time_scale=float(scale),
        offered_load=reached,
        synthetic_arrivals=synthetic,
        n_duration_fallback=int(fallback_all[idx].sum()),
    )


__all__ = [
    "DynJobs",
    "build_jobs",
    "ideal_runtimes",
    "offered_load",
]
