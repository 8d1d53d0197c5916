"""A replica that does not lead the incident worker recovers its readiness after a database
outage: the loop that failed (taking the lease raised) is followed by loops that run without error
as follower, and those clear ``failing_since``. Before, only a loop that led cleared it, so the
follower's ``/readyz`` answered 503 "incident worker failing" for good.

The lease on PostgreSQL is ``pg_try_advisory_lock`` (PostgreSQL docs, "Advisory Lock Functions"):
it answers false while another session holds the lock, and raises when the server cannot be
reached; the fake lease below answers the same way without a server.
"""

from __future__ import annotations

import threading
from typing import Any

from serving_helpers import wait_for
from sqlalchemy.exc import OperationalError

from fleetmind.serving.incidents.worker import GroupingLag, IncidentWorker, RankSchedule


class FollowerLease:
    """A lease another replica holds: the first ``failures`` attempts raise (the outage)."""

    def __init__(self, failures: int) -> None:
        self.failures = failures
        self.attempts = 0
        self.held = False
        self.lock = threading.Lock()

    def acquire(self) -> bool:
        with self.lock:
            self.attempts += 1
            if self.attempts <= self.failures:
                raise OperationalError("SELECT pg_try_advisory_lock", {}, Exception("refused"))
        return False

    def check(self) -> bool:
        return False

    def release(self) -> None:
        self.held = False


class NoHost:
    """The worker's steps; a follower must never run them."""

    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"a follower ran {name}")


class NoDb:
    def oldest_pending_ts(self) -> float | None:
        return None


def test_a_follower_is_not_failing_once_the_database_is_back() -> None:
    lease = FollowerLease(failures=1)
    worker = IncidentWorker(NoHost(), lease, RankSchedule(2.0), GroupingLag(NoDb(), None))  # type: ignore[arg-type]
    worker.start()
    try:
        # attempt 3 starts after loop 2 (a follower loop without error) finished
        assert wait_for(lambda: lease.attempts >= 3, timeout=30)
        assert worker.failing_since is None and worker.last_error is None
        assert worker.stuck_for() == 0.0
    finally:
        worker.stop()


def test_a_failing_follower_stays_failing() -> None:
    """The other side: while taking the lease keeps failing, the worker shows it."""
    lease = FollowerLease(failures=10**9)
    worker = IncidentWorker(NoHost(), lease, RankSchedule(2.0), GroupingLag(NoDb(), None))  # type: ignore[arg-type]
    worker.start()
    try:
        assert wait_for(lambda: lease.attempts >= 2, timeout=30)
        assert worker.failing_since is not None
        assert worker.last_error is not None and "OperationalError" in worker.last_error
    finally:
        worker.stop()
