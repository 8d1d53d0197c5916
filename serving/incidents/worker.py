"""The incident worker's thread: wake-ups, the leader lease, deferred rankings and the lag gauge.

Replicas on one database elect one worker through :class:`fleetmind.serving.db.LeaderLock` (a file
lock on SQLite, an advisory lock on PostgreSQL). Each loop of :class:`IncidentWorker` (about once a
second, or when woken, or when a deferred ranking is due):

1. confirms the lease (a lost lease drops the queued rankings: the next leader re-reads them;
   the warning says whether the lock's database connection failed or the database answered that
   the lock is gone: :func:`lost_lock_line`);
2. when it does not lead, tries to take the lease, and on success takes over (reloads the open
   incidents and queues the rankings the previous leader left undone; a take-over that fails is
   tried again at the next loop, the lease kept); a process that takes the lease after it asked
   for it before (a follower whose leader went away, or a leader that lost it) logs one INFO line
   with its pid; the first lease a process takes as it starts logs none (every start of a single
   replica would log it);
3. groups pending alerts until none remain, ranking incidents deferred for ``backlog_rank_s`` in
   between so that a long storm starves none;
4. ranks what is due and runs housekeeping;
5. exports the grouping lag, whether or not the loop succeeded.

On PostgreSQL every transaction of the thread waits at most :func:`lock_wait_s` for a lock (a
quarter of the lease, at most :data:`fleetmind.serving.db.PG_LOCK_WAIT_S`:
:func:`fleetmind.serving.db.pg_thread_lock_wait`), and the lease is checked again before each step
that may wait that long (the rankings' housekeeping after a failed ranking, the lag read): a table
locked for longer than the lease fails loops instead of holding one past the lease, and at most
one lock wait plus a 1 s pause lies between two checks of the lease.

A failing loop is logged (its traceback the first time; while it keeps failing the same way,
one line a minute; one line when it works again: :class:`fleetmind.serving.failure_log.FailureLog`),
retried a second later, and shows in :meth:`IncidentWorker.stuck_for`
(the readiness probe) while the alerts stay pending; the next loop that runs without an error,
as leader or as follower, clears it.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Iterable
from typing import TYPE_CHECKING, Protocol

from fleetmind.serving.db import PG_LOCK_WAIT_S, pg_thread_lock_wait, report_behind
from fleetmind.serving.failure_log import FailureLog, first_line

if TYPE_CHECKING:
    from fleetmind.serving.db import Database, LeaderLock
    from fleetmind.serving.metrics import Metrics

log = logging.getLogger("fleetmind.serving")


def lock_wait_s(lease_s: float) -> float:
    """The longest lock wait of the worker's transactions for a leader lease of ``lease_s``
    seconds: a quarter of it, at most :data:`fleetmind.serving.db.PG_LOCK_WAIT_S` (5 s).

    The lock's session ends ``lease_s`` after its last check (``idle_session_timeout``); between
    two checks lies at most one lock wait and a pause of up to 1 s, which this keeps under the
    lease for any lease the settings allow (2 s and up)."""
    return min(PG_LOCK_WAIT_S, lease_s / 4)


_PRUNE_AT = 1024
""":class:`RankSchedule` forgets stale rankings once it holds more than this many (and twice as
many as its last pruning kept): amortised O(1) per ranking."""


class RankSchedule:
    """When each touched incident is re-ranked: now, or deferred to a due time.

    Times are monotonic seconds, passed in.

    Args:
        interval_s: an incident ranked less than this long ago is re-ranked when it has passed.
    """

    def __init__(self, interval_s: float) -> None:
        self.interval_s = interval_s
        self._due: dict[int, float] = {}
        self._last: dict[int, float] = {}
        self._kept = 0  # entries left by the last pruning: the next one waits for twice as many

    def after_batch(
        self, touched: Iterable[int], now: float, defer: bool, backlog: bool
    ) -> list[int]:
        """The incidents of a grouped batch to rank now, ascending; the others are queued.

        Without ``defer`` (a direct call) every touched incident is ranked now. With it (the
        worker), while a ``backlog`` of pending alerts remains they wait until it is grouped, and
        one ranked less than ``interval_s`` ago waits until that interval has passed.
        """
        now_ids = []
        for inc_id in sorted(touched):
            last = self._last.get(inc_id)
            if defer and backlog:
                self._due.setdefault(inc_id, now)
            elif defer and last is not None and now - last < self.interval_s:
                self._due.setdefault(inc_id, last + self.interval_s)
            else:
                self._due.pop(inc_id, None)
                now_ids.append(inc_id)
        return now_ids

    def take_due(self, now: float) -> list[int]:
        """Remove and return the incidents due at ``now``."""
        ids = [i for i, t in self._due.items() if t <= now]
        for inc_id in ids:
            self._due.pop(inc_id, None)
        return ids

    def queue(self, incident_ids: Iterable[int], now: float) -> None:
        """Make ``incident_ids`` due at ``now`` (unless already queued)."""
        for inc_id in incident_ids:
            self._due.setdefault(inc_id, now)

    def ranked(self, incident_id: int, now: float) -> None:
        """Record a ranking of ``incident_id`` at ``now``; forget rankings older than
        ``interval_s``, which no longer defer anything (one entry per incident ever ranked
        otherwise stayed for the life of the process)."""
        self._last[incident_id] = now
        if len(self._last) > _PRUNE_AT and len(self._last) > 2 * self._kept:
            self._last = {i: t for i, t in self._last.items() if now - t < self.interval_s}
            self._kept = len(self._last)

    def drop(self, incident_ids: Iterable[int]) -> None:
        for inc_id in incident_ids:
            self._due.pop(inc_id, None)
            self._last.pop(inc_id, None)

    def clear(self) -> None:
        self._due.clear()

    def wait_s(self, now: float, longest: float = 1.0) -> float:
        """How long the worker may sleep: ``longest``, or until the next ranking is due."""
        if not self._due:
            return longest
        return max(0.01, min(longest, min(self._due.values()) - now))


class GroupingLag:
    """The ``grouping_lag`` gauge: now minus when the oldest ungrouped alert was stored, seconds.

    Args:
        db: the database (its oldest pending alert).
        metrics: the gauge's owner (``None``: nothing is exported).
    """

    def __init__(self, db: Database, metrics: Metrics | None) -> None:
        self.db = db
        self.metrics = metrics
        self._oldest: float | None = None

    def refresh(self) -> None:
        """Read the oldest pending alert and export its age.

        Read at every loop, whether or not a batch succeeded, so a worker that fails every batch
        (or a replica whose leader is stuck) shows a growing lag. When the database cannot be read
        the last oldest value seen keeps ageing.
        """
        try:
            self._oldest = self.db.oldest_pending_ts()
        except Exception:  # the database is down: keep the last value seen (it keeps ageing)
            pass
        if self.metrics is not None:
            oldest = self._oldest
            self.metrics.grouping_lag.set(0.0 if oldest is None else max(0.0, time.time() - oldest))

    def clear(self) -> None:
        """Nothing is pending."""
        if self.metrics is not None:
            self.metrics.grouping_lag.set(0.0)
        self._oldest = None

    def show(self, oldest_ts: float) -> None:
        """A batch was grouped whose oldest alert was stored at ``oldest_ts`` (unix s)."""
        if self.metrics is not None:
            self.metrics.grouping_lag.set(max(0.0, time.time() - oldest_ts))


class WorkerHost(Protocol):
    """The steps the worker runs (:class:`fleetmind.serving.incidents.IncidentManager`), looked
    up at every call."""

    def process_pending(self, limit: int = 500, defer: bool = False) -> int: ...

    def rank_due(self, older_than_s: float = 0.0) -> None: ...

    def housekeeping(self, now: float | None = None, force: bool = False) -> None: ...

    def take_over(self) -> None: ...


def lost_lock_line(error: BaseException | None) -> str:
    """The warning for a leader lock this process (its pid named) lost, saying what it knows of
    why: ``error``, the error of the lock's database connection (an outage: the lock went with
    the connection, and this process takes it again once the database answers unless another
    replica took it first), or ``None`` when the database answered that the lock's session no
    longer holds it (another replica may take it over)."""
    if error is not None:
        return (
            f"lost the leader lock (pid {os.getpid()}): its database connection failed "
            f"({type(error).__name__}: {first_line(error)}); this process takes it again once the "
            "database answers, unless another replica has taken it by then"
        )
    return (
        f"lost the leader lock (pid {os.getpid()}): the database says this process's session no "
        "longer holds it; another replica may take it over"
    )


class IncidentWorker:
    """The background thread that groups alerts while this process holds the leader lease.

    Args:
        host: runs the steps (grouping, ranking, housekeeping, taking over).
        leader: the lease on the database.
        schedule: deferred rankings (its due times set the wake-ups).
        lag: the grouping lag gauge.
        backlog_rank_s: during a backlog, rank incidents deferred this long, seconds.
        db: the database whose statements the thread runs (PostgreSQL: each of its transactions
            waits at most :func:`lock_wait_s` of the lease for a lock, see
            :func:`fleetmind.serving.db.pg_thread_lock_wait`; ``None``: no such bound).
    """

    def __init__(
        self,
        host: WorkerHost,
        leader: LeaderLock,
        schedule: RankSchedule,
        lag: GroupingLag,
        backlog_rank_s: float = 10.0,
        db: Database | None = None,
    ) -> None:
        self.host = host
        self.leader = leader
        self.schedule = schedule
        self.lag = lag
        self.backlog_rank_s = backlog_rank_s
        self.db = db
        self._taking_over = False  # the lease was taken but take_over has not succeeded yet
        self._tried_lead = False  # whether this process asked for the lease before (taken or not)
        self._held_elsewhere = False  # whether another process held it since this one last did
        self.last_error: str | None = None
        self.failing_since: float | None = None  # monotonic time of the first failure in a row
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._failures = FailureLog(log, "incident worker")  # no traceback per loop in an outage

    @property
    def running(self) -> bool:
        return self._thread is not None

    def start(self) -> None:
        """Start the thread (idempotent)."""
        if self._thread is not None:
            return
        self._thread = threading.Thread(target=self._run, name="fleetmind-incidents", daemon=True)
        self._thread.start()
        self._wake.set()

    def stop(self, timeout: float = 5.0) -> None:
        """Stop the thread (waiting up to ``timeout`` seconds) and release the lease."""
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None
        self.leader.release()

    def notify(self) -> None:
        """Wake the thread: new alerts are pending."""
        self._wake.set()

    def stuck_for(self) -> float:
        """Seconds the worker has failed every loop (0 when its last loop succeeded)."""
        return 0.0 if self.failing_since is None else time.monotonic() - self.failing_since

    def _run(self) -> None:
        # A table locked longer than the lease (VACUUM FULL, a migration) fails a loop within the
        # lock wait instead of blocking it past the lease: the lease is checked again and kept.
        if self.db is None:
            self._loop()
            return
        with pg_thread_lock_wait(self.db, lock_wait_s(self.leader.lease_s)):
            self._loop()

    def _loop(self) -> None:
        while not self._stop.is_set():
            self._wake.wait(self.schedule.wait_s(time.monotonic()))
            self._wake.clear()
            try:
                if self._lead():
                    self._work()
            except Exception as err:  # keep the worker alive; the alerts stay pending
                self.last_error = f"{type(err).__name__}: {err}"
                if self.failing_since is None:
                    self.failing_since = time.monotonic()
                report_behind(err)  # a sequence behind its rows: the setval to run, at ERROR
                self._failures.failed(err)
                self._stop.wait(1.0)
            else:  # a loop without error, leading or not (another replica may lead): not failing
                self.last_error = None
                self.failing_since = None
                self._failures.succeeded()
            if self.leader.held:  # the lag read may wait for a lock too: confirm the lease first
                self._confirm()
            self.lag.refresh()

    def _lead(self) -> bool:
        """Whether this process leads now (taking the lease, and over, when it is free)."""
        if self.leader.held:
            self._confirm()
        if not self.leader.held:
            if not self.leader.acquire():  # (a database error raises instead)
                self._tried_lead = self._held_elsewhere = True
                return False  # another process groups alerts; check again in a second
            self._taking_over = True
            if self._tried_lead:  # not a process's first lease at its start: a change to log
                # "back": it lost the lock and no other process held it since (an outage)
                back = self.leader.lost and not self._held_elsewhere
                log.info(
                    "incident worker: this process (pid %d) took the leader lock %s: it groups "
                    "the alerts and sends the notifications now",
                    os.getpid(),
                    "back" if back else "over",
                )
            self._tried_lead, self._held_elsewhere = True, False
        if self._taking_over:  # until it succeeds: a failed one (a lock wait) keeps the lease
            self.host.take_over()
            self._taking_over = False
        return True

    def _confirm(self) -> bool:
        """Whether this process still holds the lease (a query on the lock's session, which also
        keeps that session from ending idle); a lost lease is logged and drops the queued
        rankings (the next leader re-reads them)."""
        if self.leader.check():
            return True
        log.warning("incident worker: %s", lost_lock_line(self.leader.lost_error))
        self.schedule.clear()
        return False

    def _work(self) -> None:
        """Group until nothing is pending, then rank what is due and keep house.

        A ranking that failed on the database (a lock wait, an outage: it is due again later) does
        not hold up housekeeping (auto-resolve, retention), which runs once the lease is confirmed;
        the error then fails the loop."""
        host = self.host
        while not self._stop.is_set() and host.process_pending(defer=True) > 0:
            host.rank_due(older_than_s=self.backlog_rank_s)  # no starvation in a long storm
            if not self._confirm():
                return
        try:
            host.rank_due()
        except Exception:
            if self._confirm():
                host.housekeeping()
            raise
        host.housekeeping()
