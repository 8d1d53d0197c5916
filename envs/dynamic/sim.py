"""The event-driven dynamic-mode simulator (:class:`DynamicSim`).

A FIFO queue with a bounded backfill window (the head first, then up to ``backfill_depth`` later
jobs that fit now, no reservations); a job that no node of the empty fleet could host is rejected on
arrival. Metrics (:meth:`DynamicSim.metrics`): mean and p99 JCT, mean slowdown (JCT / ideal
runtime), p99 queueing delay, GPU allocation ratio (time average over the arrival window).
"""

from __future__ import annotations

import heapq
import math
import time
from collections.abc import Sequence
from typing import Protocol

import numpy as np

from fleetmind.data.errors import ConfigError
from fleetmind.data.openb import ANY_GPU_MODEL, GPU_MILLI
from fleetmind.envs.core import MAX_GPUS_PER_NODE, Pod
from fleetmind.envs.dynamic.fleet import DynFleet, best_bottleneck_set, bottleneck_gbps
from fleetmind.envs.dynamic.jobs import DynJobs
from fleetmind.envs.dynamic.model import (
    DEFAULT_BACKFILL_DEPTH,
    DONE,
    FUTURE,
    QUEUED,
    REFERENCE_LINK_GBPS,
    REJECTED,
    RUNNING,
)
from fleetmind.envs.dynamic.order import LinearOrder


# Simulator
class DynamicSim:
    """Event-driven simulator of one dynamic-mode run.

    Usage::

        sim = DynamicSim(fleet, jobs)
        while (j := sim.next_decision()) is not None:
            node, gpus = policy.select(sim, j)
            sim.place(j, node, gpus)
        sim.metrics()

    :meth:`next_decision` advances simulated time until some queued job can start: events at the
    same time are handled departures first, then arrivals; then the queue is scanned from its head,
    at most ``1 + backfill_depth`` jobs deep (a job that no node can host now is skipped, later
    jobs may start before it: backfilling without reservations). With an ``order``, every job of
    that window that fits now is a candidate and the order picks one. A job that fits on no node of the
    empty fleet is rejected on arrival.

    Args:
        fleet: the :class:`DynFleet`.
        jobs: the :class:`DynJobs` (sorted by arrival).
        backfill_depth: jobs behind the queue head that may start before it (0 = strict FIFO).
        priority: ``(N,)`` tie-break ranks for the node scorers (lower wins); ``None`` = index order.
        order: which startable job of the backfill window starts next
            (:class:`fleetmind.envs.dynamic.order.LinearOrder`); ``None``: the first one (FIFO).
    """

    def __init__(
        self,
        fleet: DynFleet,
        jobs: DynJobs,
        backfill_depth: int = DEFAULT_BACKFILL_DEPTH,
        priority: np.ndarray | None = None,
        order: LinearOrder | None = None,
    ) -> None:
        if backfill_depth < 0:
            raise ConfigError(f"backfill_depth must be >= 0, got {backfill_depth}")
        self.fleet = fleet
        self.jobs = jobs
        self.backfill_depth = int(backfill_depth)
        self.order = order
        self.state = fleet.cluster_state(priority)
        self._pods = [jobs.pod(j) for j in range(len(jobs))]
        # per-cluster GPU capacity (milli) for load features
        self.cluster_gpu_cap = (
            np.bincount(fleet.cluster, weights=fleet.num_gpu, minlength=fleet.n_clusters)
            * GPU_MILLI
        )
        self.reset()

    # ----------------------------------------------------------------- state
    def reset(self) -> None:
        """Empty fleet, no job arrived, time 0."""
        self.state.reset()
        j = len(self.jobs)
        self.now = 0.0
        self.status = np.zeros(j, dtype=np.int8)
        self.start_s = np.full(j, np.nan)
        self.end_s = np.full(j, np.nan)
        self.run_s = np.full(j, np.nan)
        self.data_s = np.zeros(j)
        self.node_of = np.full(j, -1, dtype=np.int64)
        self.gpus_of: list[np.ndarray | None] = [None] * j
        self.queue: list[int] = []
        self._departures: list[tuple[float, int]] = []
        self._next_arrival = 0
        self._released_nodes: list[int] = []
        self._checked_upto = [-1] * j
        self.cluster_alloc = np.zeros(self.fleet.n_clusters)
        self._alloc_area = 0.0
        self._last_t = 0.0
        self.n_decisions = 0
        self._ever_fit = np.isfinite(self.jobs.ideal_s)  # fits some node of the empty fleet

    def copy(self) -> DynamicSim:
        """An independent copy of the run so far (for lookahead: rollouts from this state).

        The fleet, the job stream and the pods are shared (read-only); the cluster state, the
        per-job records, the queue and the event heap are copied, so the two runs can diverge.
        """
        new = object.__new__(DynamicSim)
        new.__dict__.update(self.__dict__)
        new.state = self.state.copy()
        for name in ("status", "start_s", "end_s", "run_s", "data_s", "node_of", "cluster_alloc"):
            setattr(new, name, getattr(self, name).copy())
        for name in ("gpus_of", "queue", "_departures", "_released_nodes", "_checked_upto"):
            setattr(new, name, list(getattr(self, name)))
        return new

    def replace_future(self, jobs: DynJobs) -> None:
        """Swap the jobs that have not arrived yet for those of ``jobs`` (same length ``J``).

        Jobs ``0 .. m-1`` (``m`` = arrivals handled so far) must be this run's own; the rest are
        taken from ``jobs``, whose arrival times must not precede :attr:`now`. Used to roll a
        copy of the run out against a sampled future instead of the real one.

        Raises:
            ValueError: ``jobs`` has another length or a future arrival before :attr:`now`.
        """
        m = self._next_arrival
        if len(jobs) != len(self.jobs):
            raise ValueError(f"replacement stream has {len(jobs)} jobs, the run {len(self.jobs)}")
        if m < len(jobs) and float(jobs.arrival_s[m]) < self.now:
            raise ValueError("a replacement job arrives before the simulator's current time")
        self.jobs = jobs
        self._pods = self._pods[:m] + [jobs.pod(j) for j in range(m, len(jobs))]
        self._ever_fit = np.isfinite(jobs.ideal_s)

    @property
    def n_running(self) -> int:
        return len(self._departures)

    def pod(self, j: int) -> Pod:
        return self._pods[j]

    def feasible(self, j: int) -> np.ndarray:
        """``(N,)`` bool: nodes that can host job ``j`` now."""
        return self.state.feasible(self._pods[j])

    # ----------------------------------------------------------------- runtime model
    def data_time(self, j: int, cluster: np.ndarray | int) -> np.ndarray:
        """Seconds to fetch job ``j``'s dataset into ``cluster`` (0 when local)."""
        h = int(self.jobs.data_home[j])
        c = np.asarray(cluster)
        t = self.fleet.wan_rtt_s[h, c] + self.jobs.data_gb[j] / self.fleet.wan_gbps[h, c]
        return np.where(c == h, 0.0, t)

    def runtime(self, j: int, node: int, gpus: Sequence[int]) -> tuple[float, float]:
        """``(run_s, data_s)`` of job ``j`` on ``node`` with ``gpus``."""
        jb, fl = self.jobs, self.fleet
        k = int(jb.num_gpu[j])
        speed = float(fl.speed[node]) if k > 0 else 1.0
        if k >= 2:  # scalar form of runtime_factor
            c = float(jb.comm[j])
            f = (1.0 - c) / speed + c * REFERENCE_LINK_GBPS / bottleneck_gbps(fl, node, gpus)
        else:
            f = 1.0 / speed
        run = float(jb.work_s[j]) * f
        h, cl = int(jb.data_home[j]), int(fl.cluster[node])
        data = 0.0 if h == cl else float(fl.wan_rtt_s[h, cl] + jb.data_gb[j] / fl.wan_gbps[h, cl])
        return run, data

    def best_gpus(self, j: int, node: int) -> np.ndarray:
        """GPUs for job ``j`` on ``node``: the best-bottleneck idle set for ``k >= 2``, else
        :meth:`fleetmind.envs.core.ClusterState.choose_gpus` (tightest fit)."""
        pod = self._pods[j]
        if pod.num_gpu >= 2:
            bits = self.idle_bits(node)
            return np.array(
                best_bottleneck_set(self.fleet, node, bits, pod.num_gpu)[1], dtype=np.int64
            )
        return self.state.choose_gpus(pod, node)

    def idle_bits(self, node: int) -> int:
        idle = self.state.gpu_idle[node] == GPU_MILLI
        return int(np.dot(idle, 1 << np.arange(MAX_GPUS_PER_NODE)))

    # ----------------------------------------------------------------- events
    def _advance_clock(self, t: float) -> None:
        dt = t - self._last_t
        if dt > 0:
            a0, a1 = 0.0, float(self.jobs.arrival_s[-1]) if len(self.jobs) else 0.0
            lo, hi = max(self._last_t, a0), min(t, a1)
            if hi > lo:
                self._alloc_area += self.state.allocated_gpu_milli * (hi - lo)
        self._last_t = t
        self.now = t

    def _release(self, j: int) -> None:
        node = int(self.node_of[j])
        self.state.release(self._pods[j], node, self.gpus_of[j])
        self.cluster_alloc[self.fleet.cluster[node]] -= self._pods[j].gpu_request
        self.status[j] = DONE
        self._released_nodes.append(node)

    def _fits_node(self, j: int, n: int) -> bool:
        """Scalar feasibility of job ``j`` on node ``n`` (same rules as ``ClusterState.feasible``)."""
        pod, st = self._pods[j], self.state
        if st.cpu_free[n] < pod.cpu_milli or st.mem_free[n] < pod.memory_mib:
            return False
        if pod.num_gpu == 0:
            return True
        if st.num_gpu[n] == 0:
            return False
        if pod.gpu_spec_mask != ANY_GPU_MODEL and not (st.model_bit[n] & pod.gpu_spec_mask):
            return False
        idle = st.gpu_idle[n]
        if pod.num_gpu == 1:
            return bool(idle.max() >= max(pod.gpu_milli, 1))
        return int(np.count_nonzero(idle == GPU_MILLI)) >= pod.num_gpu

    def _can_start(self, j: int) -> bool:
        """Whether job ``j`` fits some node now.

        Placements only take resources away, so a job found infeasible stays infeasible until a
        node is released, and then only that node can have become feasible: after the first full
        check, only the nodes released since the job's last check are tested.
        """
        upto = self._checked_upto[j]
        now = len(self._released_nodes)
        if upto == now:
            return False
        if upto < 0:
            ok = bool(self.state.feasible(self._pods[j]).any())
        else:
            ok = any(self._fits_node(j, n) for n in set(self._released_nodes[upto:now]))
        if not ok:
            self._checked_upto[j] = now
        return ok

    def _scan_queue(self) -> int | None:
        depth = 1 + self.backfill_depth
        if self.order is not None:
            window = self.queue[:depth]
            pos = [p for p, j in enumerate(window) if self._can_start(j)]
            if not pos:
                return None
            return self.order.pick(self, [window[p] for p in pos], pos)
        for pos, j in enumerate(self.queue):
            if pos >= depth:
                break
            if self._can_start(j):
                return j
        return None

    def next_decision(self) -> int | None:
        """Advance to the next job that can start now and return its index; ``None`` when all done.

        Jobs still queued when nothing is running and nothing will arrive stay unplaced (cannot
        happen for jobs that fit the empty fleet).
        """
        jb = self.jobs
        while True:
            j = self._scan_queue()
            if j is not None:
                return j
            t_arr = jb.arrival_s[self._next_arrival] if self._next_arrival < len(jb) else math.inf
            t_dep = self._departures[0][0] if self._departures else math.inf
            t = min(t_arr, t_dep)
            if not math.isfinite(t):
                return None
            self._advance_clock(t)
            while self._departures and self._departures[0][0] <= t:
                _, d = heapq.heappop(self._departures)
                self._release(d)
            while self._next_arrival < len(jb) and jb.arrival_s[self._next_arrival] <= t:
                a = self._next_arrival
                self._next_arrival += 1
                if self._ever_fit[a]:
                    self.status[a] = QUEUED
                    self.queue.append(a)
                else:
                    self.status[a] = REJECTED

    def place(self, j: int, node: int, gpus: Sequence[int] | np.ndarray | None = None) -> None:
        """Start queued job ``j`` now on ``node`` with ``gpus`` (``None``: :meth:`best_gpus`).

        Raises:
            ValueError: ``j`` is not queued; envs.core.PlacementError: the node cannot host it.
        """
        if self.status[j] != QUEUED:
            raise ValueError(f"job {j} is not queued (status {int(self.status[j])})")
        if gpus is None:
            gpus = self.best_gpus(j, node)
        g = self.state.place(self._pods[j], int(node), gpus)
        run, data = self.runtime(j, int(node), g)
        self.queue.remove(j)
        self.status[j] = RUNNING
        self.node_of[j] = int(node)
        self.gpus_of[j] = g
        self.start_s[j] = self.now
        self.run_s[j] = run
        self.data_s[j] = data
        self.end_s[j] = self.now + data + run
        self.cluster_alloc[self.fleet.cluster[int(node)]] += self._pods[j].gpu_request
        heapq.heappush(self._departures, (float(self.end_s[j]), j))
        self.n_decisions += 1

    def run(self, policy: DynamicPolicy) -> dict[str, float]:
        """Run to completion with ``policy``; returns :meth:`metrics` plus ``policy_s``."""
        if hasattr(policy, "reset"):
            policy.reset(self)
        spent = 0.0
        while (j := self.next_decision()) is not None:
            t0 = time.perf_counter()
            node, gpus = policy.select(self, j)
            spent += time.perf_counter() - t0
            self.place(j, node, gpus)
        out = self.metrics()
        out["policy_s"] = spent
        out["ms_per_decision"] = 1000.0 * spent / max(self.n_decisions, 1)
        return out

    # ----------------------------------------------------------------- metrics
    def metrics(self) -> dict[str, float]:
        """Metrics over the jobs that completed (or started: their end time is known).

        ``jct = end - arrival``; ``slowdown = jct / ideal``; ``queue_delay = start - arrival``;
        ``gpu_allocation_ratio`` = time average of allocated GPU milli / capacity over the arrival
        window ``[0, last arrival]``.
        """
        jb = self.jobs
        started = np.isfinite(self.start_s)
        jct = self.end_s[started] - jb.arrival_s[started]
        qd = self.start_s[started] - jb.arrival_s[started]
        sd = jct / jb.ideal_s[started]
        span = float(jb.arrival_s[-1]) if len(jb) else 0.0
        cap = float(self.state.gpu_capacity_milli)
        alloc = self._alloc_area / (cap * span) if span > 0 and cap > 0 else float("nan")
        remote = self.data_s[started] > 0

        def pct(x: np.ndarray, q: float) -> float:
            return float(np.percentile(x, q)) if x.size else float("nan")

        def mean(x: np.ndarray) -> float:
            return float(x.mean()) if x.size else float("nan")

        return {
            "mean_jct_s": mean(jct),
            "p99_jct_s": pct(jct, 99),
            "mean_slowdown": mean(sd),
            "p99_slowdown": pct(sd, 99),
            "mean_queue_delay_s": mean(qd),
            "p99_queue_delay_s": pct(qd, 99),
            "gpu_allocation_ratio": alloc,
            "mean_run_slowdown": mean(self.run_s[started] / jb.ideal_s[started]),
            "remote_data_frac": mean(remote.astype(float)),
            "n_jobs": int(len(jb)),
            "n_started": int(started.sum()),
            "n_rejected": int((self.status == REJECTED).sum()),
            "n_unplaced": int((self.status == QUEUED).sum() + (self.status == FUTURE).sum()),
            "makespan_s": float(np.nanmax(self.end_s)) if started.any() else 0.0,
        }


class DynamicPolicy(Protocol):
    """A dynamic-mode placement policy."""

    name: str

    def select(self, sim: DynamicSim, j: int) -> tuple[int, np.ndarray | None]:
        """Node and GPUs (``None``: the simulator's :meth:`DynamicSim.best_gpus`) for queued job ``j``."""
        ...


__all__ = [
    "DynamicPolicy",
    "DynamicSim",
]
