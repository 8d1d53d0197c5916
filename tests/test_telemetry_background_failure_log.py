"""What a failed background telemetry read logs (stale-while-refresh,
:meth:`TelemetrySource._refresh_now`).

The warning said "the last snapshot is served until it is 35 s old" also when there was no
snapshot (the start-up read, :meth:`TelemetrySource.prefetch`, failed: requests then read telemetry
themselves), and it was logged at shutdown when :meth:`close` closed the HTTP client under a
running background read ("Bad file descriptor"). Deterministic: the fake source's ``collect``
blocks on an event; no timing asserts.
"""

from __future__ import annotations

import logging
import os
import threading

import pytest

os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")

from fleetmind.data.errors import NotAvailableError  # noqa: E402
from fleetmind.serving.telemetry import base  # noqa: E402
from fleetmind.serving.telemetry.base import FleetSnapshot, NodeState, TelemetrySource  # noqa: E402

TTL_S, MAX_STALE_S = 5.0, 30.0


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


class Gated(TelemetrySource):
    """``collect`` announces itself, waits for ``gate``, moves the clock by ``takes`` seconds (a
    slow read), then fails (``fail``) or answers."""

    name = "gated"

    def __init__(self, clock: Clock) -> None:
        super().__init__(TTL_S, MAX_STALE_S)
        self.clock = clock
        self.entered = threading.Semaphore(0)
        self.gate = threading.Event()
        self.fail = True
        self.calls = 0
        self.takes = 0.0

    def collect(self) -> FleetSnapshot:
        self.calls += 1
        self.entered.release()
        assert self.gate.wait(10), "the test never let collect finish"
        self.gate.clear()
        self.clock.now += self.takes
        if self.fail:
            raise NotAvailableError("cannot query Prometheus at http://prom.test: timed out")
        return FleetSnapshot("gated", [NodeState("n0", "c0")], self.clock())


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    c = Clock()
    monkeypatch.setattr(base.time, "time", c)
    monkeypatch.setattr(base, "monotonic", c)  # the cache ages snapshots on monotonic()
    return c


def _done(src: TelemetrySource) -> None:
    assert src._background.acquire(timeout=5)
    src._background.release()


def _warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.name == base.__name__ and r.levelno >= logging.WARNING
    ]


def test_a_failed_start_up_read_does_not_claim_a_snapshot_is_served(
    clock: Clock, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger=base.__name__)
    src = Gated(clock)
    src.prefetch()
    assert src.entered.acquire(timeout=5)
    src.gate.set()
    _done(src)
    (msg,) = _warnings(caplog)
    assert "timed out" in msg and "no snapshot yet" in msg
    assert "served until" not in msg  # the old wording: there was nothing to serve


def test_a_failed_refresh_with_a_snapshot_says_how_long_it_is_served(
    clock: Clock, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger=base.__name__)
    src = Gated(clock)
    src.fail = False
    src.gate.set()
    old = src.snapshot()
    src.fail = True
    clock.now += TTL_S + 2
    assert src.snapshot() is old  # served stale; a background refresh starts
    src.gate.set()
    _done(src)
    (msg,) = _warnings(caplog)
    assert "the last snapshot (7 s old) is served until it is 35 s old" in msg


def test_close_during_a_background_read_logs_no_failure(
    clock: Clock, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger=base.__name__)
    src = Gated(clock)
    src.prefetch()
    assert src.entered.acquire(timeout=5)  # the read runs
    src.close()  # shutdown: the client goes, the read fails ("Bad file descriptor")
    src.gate.set()
    _done(src)
    assert _warnings(caplog) == []  # the old code warned here
    src.prefetch()  # closed: no new background read
    assert src.calls == 1 and src._background.acquire(blocking=False)


def test_the_sources_close_marks_them_closed() -> None:
    """The subclasses' ``close`` call the base one (which sets the flag) before closing their
    clients."""
    from fleetmind.serving.telemetry.prometheus import PrometheusApiSource, PrometheusSource

    for src in (
        PrometheusApiSource("http://127.0.0.1:18983", ttl_s=TTL_S),
        PrometheusSource("http://127.0.0.1:18984/metrics", ttl_s=TTL_S),
    ):
        assert not src._closed
        src.close()
        assert src._closed


def test_the_nvml_sources_close_marks_it_closed() -> None:
    from fleetmind.serving.telemetry.nvml import NvmlSource

    class FakeNvml:
        shut = 0

        def nvmlShutdown(self) -> None:  # noqa: N802 - pynvml's name
            self.shut += 1

    src = NvmlSource.__new__(NvmlSource)  # no NVML library here: only close() is exercised
    src._nvml = FakeNvml()
    src.close()
    assert src._closed and src._nvml.shut == 1


def _failed_background_warning(clock: Clock, caplog: pytest.LogCaptureFixture, takes: float) -> str:
    """The warning of a background refresh started on a snapshot ``TTL_S + 2`` s old that fails
    after ``takes`` seconds."""
    caplog.set_level(logging.DEBUG, logger=base.__name__)
    src = Gated(clock)
    src.fail = False
    src.gate.set()
    old = src.snapshot()
    src.fail, src.takes = True, takes
    clock.now += TTL_S + 2
    assert src.snapshot() is old  # served stale; one background refresh starts
    assert src.entered.acquire(timeout=5)
    src.gate.set()
    _done(src)
    (msg,) = _warnings(caplog)
    return msg


def test_a_failure_within_the_bound_says_until_when_the_snapshot_is_served(
    clock: Clock, caplog: pytest.LogCaptureFixture
) -> None:
    msg = _failed_background_warning(clock, caplog, takes=3.0)
    assert "timed out" in msg
    assert "the last snapshot (10 s old) is served until it is 35 s old" in msg
    assert "expired" not in msg


def test_a_failure_past_the_bound_says_the_snapshot_has_expired(
    clock: Clock, caplog: pytest.LogCaptureFixture
) -> None:
    """The read ran into its timeout: the snapshot (7 s old when it started, 47 s when it failed)
    is past TTL + MAX_STALE (35 s), so it is no longer served; the old warning still said it was
    "served until it is 35 s old"."""
    msg = _failed_background_warning(clock, caplog, takes=40.0)
    assert "timed out" in msg
    assert "the last snapshot (47 s old) has expired" in msg
    assert "requests now wait for a fresh read" in msg
    assert "served until" not in msg
