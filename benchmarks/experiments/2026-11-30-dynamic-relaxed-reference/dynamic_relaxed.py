"""Relaxed reference schedules for dynamic mode: how much could any placement policy win?

A placement policy of :class:`fleetmind.envs.dynamic.sim.DynamicSim` only decides *where* a job runs; the
simulator decides *when* it may start (FIFO queue, backfill window, work-conserving). Two things
cost a job time because of where it runs: its runtime there (slower GPUs, slow links, remote data)
and the packing (a job waits while enough free capacity exists, but split over nodes). This
module removes both, on the same job stream and with the same queue discipline:

* **Ideal runtimes**: every job runs exactly its ideal runtime ``I = jobs.ideal_s`` (s): the
  fastest runtime over the fleet's node types, best GPU set, data local; no data staging.
* **Pooled resources**: no node boundaries. A job may start when the fleet's total free GPU
  capacity (milli-GPU), CPU (milli-cores) and memory (MiB) cover its request.

Tiers (``tier=``):

* ``"pool"``: one pool for the whole fleet (:data:`TIERS`).
* ``"model"``: also keeps the ``gpu_spec`` pinning. Nodes are grouped by GPU model (plus one group
  for GPU-less nodes, if any). A job may use the groups ``A(j)`` its request allows (every GPU
  group for an unpinned GPU job, the models of its mask for a pinned one, every group for a
  CPU-only job). The running set is admitted when, for every set ``S`` of groups and every
  resource ``r``, the running jobs with ``A(i) ⊆ S`` request at most the capacity of ``S``
  (Hall's condition: exactly when a fractional assignment of each resource to allowed groups
  exists). Every placement on real nodes satisfies it, so the tier is still a relaxation, and it
  needs no choice of model (no placement policy).
* ``"model_size"``: as ``"model"`` with groups per (GPU model, GPUs per node), and a ``k``-GPU job
  may only use groups whose nodes have at least ``k`` GPUs (an 8-GPU job needs an 8-GPU node).
  Still a relaxation; it ignores fragmentation inside and across nodes of a group.

Every tier runs inside :class:`DynamicSim`'s own event loop: arrivals, the FIFO head, the backfill
window (``1 + backfill_depth`` queue positions, rescanned from the head after every start), the
order of events at equal times (departures, then arrivals, then starts), the rejection rule (a
job no node of the empty fleet can host) and the metrics (:meth:`DynamicSim.metrics`) are the
simulator's. :class:`RelaxedSim` subclasses it and overrides only ``_can_start`` (fit test),
``place`` (start), ``_release`` and ``_advance_clock`` (allocation area), so it depends on those
internals; ``tests/test_dynamic_relaxed.py`` checks identical schedules and metrics where both
must agree.

Caveat: FIFO with backfill is not monotone. Pooling and faster jobs usually shorten queues, but
a different start order can make a later job wait longer (Graham-style anomalies), so the relaxed
slowdown is a reference, not a proven lower bound for every policy; measure how often a real
policy beats it (``benchmarks/experiments/2026-11-30-dynamic-relaxed-reference/relaxed_reference.py``: no real run did on 140 protocol
streams, while relaxations beat each other by up to 2.9 %; ``docs/dynamic.md`` section 10).

:class:`IdealRuntimeSim` is the third, intermediate setting: real nodes and a real placement
policy, but every job runs ``I`` with no staging (splits a policy's slowdown into a run-time part
and a packing/queueing part).
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from typing import Any

import numpy as np

from fleetmind.data.errors import ConfigError
from fleetmind.data.openb import ANY_GPU_MODEL, GPU_MILLI
from fleetmind.envs.dynamic.fleet import DynFleet
from fleetmind.envs.dynamic.jobs import DynJobs
from fleetmind.envs.dynamic.model import DEFAULT_BACKFILL_DEPTH, DONE, QUEUED, RUNNING
from fleetmind.envs.dynamic.sim import DynamicSim

TIERS: tuple[str, ...] = ("pool", "model", "model_size")
"""Relaxation tiers, each tighter than the one before: ``pool`` (one fleet-wide pool), ``model``
(pools per GPU model, Hall's condition over model sets), ``model_size`` (pools per (GPU model,
GPUs per node): a ``k``-GPU job may only use nodes with at least ``k`` GPUs)."""

MAX_GROUPS = 16
"""Most node groups (distinct GPU models or (model, GPUs per node), plus GPU-less nodes) a tier
may have: it enumerates ``2^groups`` subsets."""


def _check_inputs(fleet: Any, jobs: Any, backfill_depth: Any) -> None:
    """Raise :class:`ConfigError` for inputs the relaxed simulators cannot run."""
    if not isinstance(fleet, DynFleet):
        raise ConfigError(
            f"fleet must be an envs.dynamic.fleet.DynFleet, got {type(fleet).__name__}"
        )
    if not isinstance(jobs, DynJobs):
        raise ConfigError(f"jobs must be an envs.dynamic.jobs.DynJobs, got {type(jobs).__name__}")
    if len(jobs) == 0:
        raise ConfigError("job stream is empty")
    if isinstance(backfill_depth, bool) or not isinstance(backfill_depth, (int, np.integer)):
        raise ConfigError(f"backfill_depth must be an integer, got {backfill_depth!r}")
    if backfill_depth < 0:
        raise ConfigError(f"backfill_depth must be >= 0, got {backfill_depth}")
    a = np.asarray(jobs.arrival_s, dtype=np.float64)
    if not np.isfinite(a).all() or (np.diff(a) < 0).any():
        raise ConfigError("job arrivals must be finite and sorted (non-decreasing)")
    ideal = np.asarray(jobs.ideal_s, dtype=np.float64)
    if np.isnan(ideal).any() or (ideal <= 0).any():
        raise ConfigError("job ideal runtimes (ideal_s) must be > 0 (inf marks a job no node fits)")


def gpu_demand_milli(jobs: DynJobs) -> np.ndarray:
    """``(J,)`` int64 milli-GPU a job holds while it runs, as ``ClusterState.place`` books it:
    ``gpu_milli`` for a sharing job (1 GPU, ``gpu_milli < 1000``), ``1000 * num_gpu`` otherwise
    (0 for CPU-only jobs)."""
    ng = np.asarray(jobs.num_gpu, dtype=np.int64)
    gm = np.asarray(jobs.gpu_milli, dtype=np.int64)
    sharing = (ng == 1) & (gm < GPU_MILLI)
    return np.where(sharing, gm, ng * GPU_MILLI).astype(np.int64)


class RelaxedSim(DynamicSim):
    """:class:`DynamicSim` with pooled resources and ideal runtimes (see the module docstring).

    Usage::

        sim = RelaxedSim(fleet, jobs, backfill_depth=8, tier="pool")
        m = sim.run()          # DynamicSim.metrics() of the relaxed schedule

    Every job that starts runs ``jobs.ideal_s[j]`` seconds (``run_s``; or ``durations_s[j]``),
    ``data_s = 0``; it holds its GPU milli, CPU milli-cores and MiB from the pool
    (``tier="pool"``) or from the node groups (other tiers) until it ends. ``node_of`` stays
    ``-1``. ``metrics()`` is :meth:`DynamicSim.metrics` unchanged: ``mean_slowdown`` = mean of
    ``(end - arrival) / I``,
    ``p99_queue_delay_s`` = 99th percentile (numpy linear) of ``start - arrival`` (s),
    ``gpu_allocation_ratio`` = time average of pooled allocated milli-GPU / capacity over
    ``[0, last arrival]``.

    Args:
        fleet: the fleet (capacities; ``model_id`` for the ``model`` tier).
        jobs: the job stream (sorted arrivals; ``ideal_s`` > 0, ``inf`` for jobs no node fits:
            rejected on arrival, as in :class:`DynamicSim`).
        backfill_depth: queued jobs behind the head that may start before it (0 = strict FIFO).
        tier: one of :data:`TIERS`.
        durations_s: optional ``(J,)`` seconds each job holds the pool once started, instead of
            ``I`` (e.g. ``run_s + data_s`` of a real policy's run: pooled packing at that
            policy's own runtimes; then it is no longer a relaxation of the runtimes). Slowdowns
            are still ``(end - arrival) / I``.

    Raises:
        ConfigError: unknown tier, negative or non-integer ``backfill_depth``, empty or unsorted
            stream, bad ideal runtimes or durations, more than :data:`MAX_GROUPS` node groups.
    """

    def __init__(
        self,
        fleet: DynFleet,
        jobs: DynJobs,
        backfill_depth: int = DEFAULT_BACKFILL_DEPTH,
        tier: str = "pool",
        durations_s: np.ndarray | None = None,
    ) -> None:
        if tier not in TIERS:
            raise ConfigError(f"unknown relaxation tier {tier!r}; expected one of {list(TIERS)}")
        _check_inputs(fleet, jobs, backfill_depth)
        if durations_s is None:
            self.durations_s = np.asarray(jobs.ideal_s, dtype=np.float64)
        else:
            d = np.asarray(durations_s, dtype=np.float64)
            ok = np.isfinite(jobs.ideal_s)
            if d.shape != (len(jobs),) or not (np.isfinite(d[ok]) & (d[ok] > 0)).all():
                raise ConfigError(
                    f"durations_s must be ({len(jobs)},) seconds, finite and > 0 for every job "
                    "that fits the fleet"
                )
            self.durations_s = d
        self.tier = tier
        # (3, J) request per job: milli-GPU, milli-cores, MiB
        self._demand = np.stack(
            [
                gpu_demand_milli(jobs),
                np.asarray(jobs.cpu_milli, dtype=np.int64),
                np.asarray(jobs.memory_mib, dtype=np.int64),
            ]
        )
        self._needs_gpu = np.asarray(jobs.num_gpu, dtype=np.int64) > 0
        self._setup_groups(fleet, jobs)
        super().__init__(fleet, jobs, backfill_depth=int(backfill_depth), priority=None)

    # ----------------------------------------------------------------- pools
    def _setup_groups(self, fleet: DynFleet, jobs: DynJobs) -> None:
        """Node groups, per-subset capacities ``(3, 2^G)`` and each job's superset list."""
        node_cap = np.stack(
            [
                np.asarray(fleet.num_gpu, dtype=np.int64) * GPU_MILLI,
                np.asarray(fleet.cpu_milli, dtype=np.int64),
                np.asarray(fleet.memory_mib, dtype=np.int64),
            ]
        )
        ng_node = np.asarray(fleet.num_gpu, dtype=np.int64)
        mids = np.where(ng_node > 0, fleet.model_id, -1)
        if self.tier == "pool":
            keys = np.zeros((fleet.n_nodes, 2), dtype=np.int64)  # one group: every node
        elif self.tier == "model":
            keys = np.stack([mids, np.zeros_like(mids)], axis=1)
        else:
            keys = np.stack([mids, ng_node], axis=1)
        uniq, group_of_node = np.unique(keys, axis=0, return_inverse=True)
        group_of_node = np.asarray(group_of_node, dtype=np.int64).reshape(-1)
        g = uniq.shape[0]
        if g > MAX_GROUPS:
            raise ConfigError(
                f"tier {self.tier!r} supports at most {MAX_GROUPS} node groups, the fleet has {g}"
            )
        # per group: GPU model id (-1 GPU-less, -2 the single pool) and GPUs per node (0: any)
        self.group_model = uniq[:, 0] if self.tier != "pool" else np.array([-2], dtype=np.int64)
        self.group_node_gpus = uniq[:, 1]
        n_sub = 1 << g
        group_cap = np.zeros((3, g), dtype=np.int64)
        for r in range(3):
            group_cap[r] = np.bincount(group_of_node, weights=node_cap[r], minlength=g)
        subsets = np.arange(n_sub)
        member = (subsets[:, None] >> np.arange(g)[None, :]) & 1  # (2^G, G)
        self.subset_cap = group_cap @ member.T  # (3, 2^G)
        # allowed groups per job -> indices of the subsets that contain them
        allowed = np.zeros(len(jobs), dtype=np.int64)
        spec = np.asarray(jobs.gpu_spec_mask, dtype=np.int64)
        ng_job = np.asarray(jobs.num_gpu, dtype=np.int64)
        models = self.group_model.tolist()
        sizes = self.group_node_gpus.tolist()
        for j in range(len(jobs)):
            if not self._needs_gpu[j] or self.tier == "pool":
                allowed[j] = n_sub - 1
                continue
            m, k_job = int(spec[j]), int(ng_job[j])
            a = 0
            for k, (mid, size) in enumerate(zip(models, sizes, strict=True)):
                model_ok = mid >= 0 and (m == ANY_GPU_MODEL or (m >> mid) & 1)
                size_ok = self.tier != "model_size" or size >= k_job
                if model_ok and size_ok:
                    a |= 1 << k
            allowed[j] = a
        self._allowed = allowed
        cache: dict[int, np.ndarray] = {}
        self._supersets: list[np.ndarray] = []
        for a in allowed.tolist():
            if a not in cache:
                cache[a] = np.flatnonzero((subsets & a) == a)
            self._supersets.append(cache[a])

    def reset(self) -> None:
        """Empty pools, no job arrived, time 0 (and :meth:`DynamicSim.reset`)."""
        super().reset()
        self.subset_used = np.zeros_like(self.subset_cap)
        self.pool_alloc_gpu_milli = 0

    # ----------------------------------------------------------------- DynamicSim hooks
    def _can_start(self, j: int) -> bool:
        """Whether job ``j``'s request fits the free pooled capacity now (every superset of its
        allowed groups, every resource; a GPU job needs at least 1 free milli-GPU)."""
        sup = self._supersets[j]
        need = self._demand[:, j].copy()
        if self._needs_gpu[j]:
            need[0] = max(int(need[0]), 1)
        free = self.subset_cap[:, sup] - self.subset_used[:, sup]
        return bool((free >= need[:, None]).all())

    def place(self, j: int, node: int = -1, gpus: Sequence[int] | np.ndarray | None = None) -> None:
        """Start queued job ``j`` now on the pool for ``durations_s[j]`` seconds (default
        ``I_j``); ``node`` and ``gpus`` are ignored: the pool has no nodes.

        Raises:
            ValueError: ``j`` is not queued or does not fit the free pooled capacity.
        """
        if self.status[j] != QUEUED:
            raise ValueError(f"job {j} is not queued (status {int(self.status[j])})")
        if not self._can_start(j):
            raise ValueError(f"job {j} does not fit the free pooled capacity")
        self.subset_used[:, self._supersets[j]] += self._demand[:, j][:, None]
        self.pool_alloc_gpu_milli += int(self._demand[0, j])
        run = float(self.durations_s[j])
        self.queue.remove(j)
        self.status[j] = RUNNING
        self.start_s[j] = self.now
        self.run_s[j] = run
        self.data_s[j] = 0.0  # no data staging in the pool
        self.end_s[j] = self.now + run
        heapq.heappush(self._departures, (float(self.end_s[j]), j))
        self.n_decisions += 1

    def _release(self, j: int) -> None:
        self.subset_used[:, self._supersets[j]] -= self._demand[:, j][:, None]
        self.pool_alloc_gpu_milli -= int(self._demand[0, j])
        self.status[j] = DONE

    def _advance_clock(self, t: float) -> None:
        dt = t - self._last_t
        if dt > 0:
            a1 = float(self.jobs.arrival_s[-1])
            lo, hi = max(self._last_t, 0.0), min(t, a1)
            if hi > lo:
                self._alloc_area += self.pool_alloc_gpu_milli * (hi - lo)
        self._last_t = t
        self.now = t

    def run(self, policy: Any = None) -> dict[str, float]:  # type: ignore[override]
        """Run to completion from an empty fleet and return :meth:`metrics`. ``policy`` is
        accepted for :class:`DynamicSim` compatibility and ignored: the pool has no placement
        choice."""
        self.reset()
        while (j := self.next_decision()) is not None:
            self.place(j)
        return self.metrics()


class IdealRuntimeSim(DynamicSim):
    """:class:`DynamicSim` in which every job runs its ideal runtime ``I = jobs.ideal_s[j]`` (s)
    with no data staging, wherever the policy puts it; nodes, GPUs, the queue and the policy's
    decisions are the real ones (the policy still sees the real runtime model through
    :func:`fleetmind.envs.dynamic.policies.estimate_completion`). ``metrics()`` then measures what is left of a
    policy's slowdown once placement no longer changes runtimes: queueing under node packing."""

    def runtime(self, j: int, node: int, gpus: Sequence[int]) -> tuple[float, float]:
        """``(I_j, 0.0)`` seconds (run, data staging)."""
        return float(self.jobs.ideal_s[j]), 0.0


def relaxed_metrics(
    fleet: DynFleet,
    jobs: DynJobs,
    backfill_depth: int = DEFAULT_BACKFILL_DEPTH,
    tier: str = "pool",
    durations_s: np.ndarray | None = None,
) -> dict[str, float]:
    """:meth:`DynamicSim.metrics` of the relaxed schedule of ``jobs`` (see :class:`RelaxedSim`)."""
    sim = RelaxedSim(fleet, jobs, backfill_depth=backfill_depth, tier=tier, durations_s=durations_s)
    return sim.run()
