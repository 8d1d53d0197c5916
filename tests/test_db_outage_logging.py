"""A database outage does not flood the log: one traceback, then a line a minute, then one line
when it is back.

The pattern follows Prometheus' own rate-limited error logging of a failing remote target and
Python's logging cookbook advice against logging the same exception on every retry: the first
failure of a run carries its traceback (``logging.Logger.error(..., exc_info=err)``), repeats of
the same exception class are counted and summarised at most every ``every_s`` seconds.
"""

from __future__ import annotations

import logging
from typing import Any

import pytest
from sqlalchemy.exc import OperationalError

from fleetmind.serving.failure_log import FailureLog
from fleetmind.serving.incidents.worker import GroupingLag, IncidentWorker, RankSchedule
from fleetmind.serving.notify import Notifier
from fleetmind.serving.settings import Settings

DB_DOWN = OperationalError("SELECT 1", {}, Exception("connection refused\nsecond line"))


class FakeClock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def _records(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name.startswith("fleetmind")]


def test_failure_log_one_traceback_then_a_line_a_minute_then_recovered(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = FakeClock()
    flog = FailureLog(logging.getLogger("fleetmind.test"), "notifier", every_s=60.0, clock=clock)
    caplog.set_level(logging.INFO)
    for _ in range(130):  # 130 s of a failing loop, once a second
        flog.failed(DB_DOWN)
        clock.t += 1.0
    recs = _records(caplog)
    assert len(recs) == 3  # the traceback at 0 s, one line at 60 s and one at 120 s
    assert recs[0].exc_info is not None
    assert all(r.exc_info is None for r in recs[1:])
    assert "60 failures" in recs[1].getMessage()
    assert "\n" not in recs[1].getMessage()
    flog.failed(ValueError("another kind"))  # a new kind of failure: its traceback once
    assert _records(caplog)[-1].exc_info is not None
    caplog.clear()
    flog.succeeded()
    flog.succeeded()  # only the first success after the failures says so
    recs = _records(caplog)
    assert len(recs) == 1
    assert "database is reachable again after 130.0 s" in recs[0].getMessage()
    caplog.clear()
    flog.failed(DB_DOWN)  # a new outage: its traceback again
    assert _records(caplog)[-1].exc_info is not None


class _Stop:
    """A stop event that lets ``n`` loops run and never sleeps."""

    def __init__(self, n: int) -> None:
        self.n = n

    def is_set(self) -> bool:
        return self.n <= 0

    def wait(self, timeout: float | None = None) -> bool:
        self.n -= 1
        return self.n < 0

    def set(self) -> None:
        self.n = 0

    def clear(self) -> None: ...


def test_notifier_loop_logs_an_outage_once(caplog: pytest.LogCaptureFixture) -> None:
    settings = Settings(notify_webhook_url="http://hook.invalid/x")
    n = Notifier(db=None, settings=settings)  # type: ignore[arg-type]
    calls = {"n": 0}

    def poll() -> int:
        calls["n"] += 1
        if calls["n"] <= 30:  # 30 polls during the outage, then it is back
            raise DB_DOWN
        return 0

    n.poll = poll  # type: ignore[method-assign]
    n._stop = _Stop(32)  # type: ignore[assignment]
    caplog.set_level(logging.INFO)
    n._run()
    recs = _records(caplog)
    assert calls["n"] == 32
    assert len(recs) == 2, [r.getMessage() for r in recs]
    assert recs[0].exc_info is not None
    assert "reachable again" in recs[1].getMessage()
    n._client.close()


class _Host:
    def __init__(self, failures: int) -> None:
        self.failures = failures

    def process_pending(self, limit: int = 500, defer: bool = False) -> int:
        if self.failures > 0:
            self.failures -= 1
            raise DB_DOWN
        return 0

    def rank_due(self, older_than_s: float = 0.0) -> None: ...

    def housekeeping(self, now: float | None = None, force: bool = False) -> None: ...

    def take_over(self) -> None: ...


class _Leader:
    held = True

    def check(self) -> bool:
        return True

    def acquire(self) -> bool:
        return True

    def release(self) -> None: ...


class _Lag(GroupingLag):
    def __init__(self) -> None: ...

    def refresh(self) -> None: ...


def test_incident_worker_logs_an_outage_once(caplog: pytest.LogCaptureFixture) -> None:
    worker = IncidentWorker(_Host(20), _Leader(), RankSchedule(1.0), _Lag())  # type: ignore[arg-type]
    stop: Any = _Stop(0)
    loops = {"n": 0}

    def is_set() -> bool:  # 25 loops: 20 failing, then 5 that work
        loops["n"] += 1
        return loops["n"] > 25

    stop.is_set = is_set
    worker._stop = stop
    worker._wake = _Stop(10**6)  # type: ignore[assignment]
    caplog.set_level(logging.INFO)
    worker._run()
    recs = _records(caplog)
    assert len(recs) == 2, [r.getMessage() for r in recs]
    assert recs[0].exc_info is not None
    assert "database is reachable again" in recs[1].getMessage()
    assert worker.failing_since is None
