"""Stale-while-refresh in :meth:`TelemetrySource.snapshot`: with a 5,000-node fleet a Prometheus
server took 2-7 s to answer FleetMind's DCGM query, so the extender call that refreshed telemetry
ran past kube-scheduler's 5 s extender ``httpTimeout`` (``DefaultExtenderTimeout`` in
kubernetes ``pkg/scheduler/apis/config/v1/defaults.go``; ``deploy/kube-scheduler-config.yaml``),
and with ``ignorable: true`` kube-scheduler silently skipped FleetMind. A snapshot past its TTL
but within ``max_stale_s`` more is now served at once while one background refresh runs.

Deterministic: the fake source's ``collect`` blocks on a :class:`threading.Event`, and time is a
patched clock (no sleeps as assertions, no timing asserts).
"""

from __future__ import annotations

import logging
import threading
from typing import Any

import pytest

from fleetmind.data.errors import NotAvailableError
from fleetmind.serving.settings import Settings
from fleetmind.serving.telemetry import base
from fleetmind.serving.telemetry.base import FleetSnapshot, NodeState, TelemetrySource

TTL_S = 5.0
MAX_STALE_S = 30.0


class Clock:
    """``time.time`` for :mod:`fleetmind.serving.telemetry.base`, moved by hand."""

    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


class GatedSource(TelemetrySource):
    """Each :meth:`collect` announces itself (``entered``), then blocks until ``gate`` is set
    (cleared again for the next one) and answers a one-node snapshot stamped with the clock,
    numbered by call (``source`` is ``gated-<n>``), or raises while ``fail``."""

    name = "gated"

    def __init__(self, clock: Clock, ttl_s: float = TTL_S, max_stale_s: float = MAX_STALE_S):
        super().__init__(ttl_s, max_stale_s)
        self.clock = clock
        self.calls = 0
        self.running = 0
        self.max_running = 0
        self.entered = threading.Semaphore(0)
        self.gate = threading.Event()
        self.fail = False
        self._lock = threading.Lock()

    def collect(self) -> FleetSnapshot:
        with self._lock:
            self.calls += 1
            n = self.calls
            self.running += 1
            self.max_running = max(self.max_running, self.running)
        self.entered.release()
        try:
            assert self.gate.wait(10), "the test never let collect finish"
            self.gate.clear()
            if self.fail:
                raise NotAvailableError("cannot query Prometheus at http://prom.test: timed out")
            return FleetSnapshot(f"gated-{n}", [NodeState("n0", "c0")], self.clock())
        finally:
            with self._lock:
                self.running -= 1


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    c = Clock()
    monkeypatch.setattr(base.time, "time", c)
    monkeypatch.setattr(base, "monotonic", c)  # the cache ages snapshots on monotonic()
    return c


def _first(src: GatedSource) -> FleetSnapshot:
    """The first snapshot, read synchronously (the gate opened beforehand)."""
    src.gate.set()
    snap = src.snapshot()
    assert src.entered.acquire(timeout=5)
    return snap


def _in_thread(fn: Any) -> tuple[threading.Thread, list[Any]]:
    out: list[Any] = []

    def run() -> None:
        try:
            out.append(fn())
        except Exception as err:
            out.append(err)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t, out


def _background_done(src: GatedSource) -> None:
    """Wait for the background refresh thread to finish (it releases its flag last)."""
    assert src._background.acquire(timeout=5)
    src._background.release()


def test_a_stale_snapshot_is_served_at_once_while_one_refresh_runs(clock: Clock) -> None:
    src = GatedSource(clock)
    old = _first(src)
    clock.now += TTL_S + 1  # past the TTL, within the stale bound
    # the old code refreshed here, on the caller's thread: this call blocked on the closed gate
    # (run in a thread so that the old code fails the assertion instead of hanging)
    t, got = _in_thread(src.snapshot)
    t.join(5)
    assert got == [old]
    assert src.entered.acquire(timeout=5)  # one background refresh started ...
    for _ in range(20):  # ... and further callers neither wait nor start another
        assert src.snapshot() is old
    assert src.calls == 2 and src.max_running == 1
    src.gate.set()
    _background_done(src)
    new = src.snapshot()
    assert new is not old and new.source == "gated-2" and src.calls == 2


def test_past_the_bound_callers_wait_for_the_refresh(clock: Clock) -> None:
    src = GatedSource(clock)
    _first(src)
    clock.now += TTL_S + MAX_STALE_S + 1
    t, got = _in_thread(src.snapshot)
    assert src.entered.acquire(timeout=5)
    assert got == [] and t.is_alive()  # waiting on the refresh (the gate is closed)
    src.gate.set()
    t.join(5)
    assert got[0].source == "gated-2" and src.calls == 2


def test_callers_past_the_bound_share_a_running_background_refresh(clock: Clock) -> None:
    src = GatedSource(clock)
    old = _first(src)
    clock.now += TTL_S + 1
    assert src.snapshot() is old
    assert src.entered.acquire(timeout=5)  # background refresh under way, gate closed
    clock.now += MAX_STALE_S  # the old snapshot is now past the bound
    t, got = _in_thread(src.snapshot)
    src.gate.set()
    t.join(5)
    assert got[0].source == "gated-2" and src.calls == 2 and src.max_running == 1


def test_a_failed_background_refresh_keeps_the_old_snapshot_until_the_bound(
    clock: Clock, caplog: pytest.LogCaptureFixture
) -> None:
    src = GatedSource(clock)
    old = _first(src)
    src.fail = True
    caplog.set_level(logging.WARNING, logger=base.__name__)
    for i in range(2):  # two failed background refreshes: one warning for the streak
        clock.now += TTL_S + 1
        assert src.snapshot() is old
        assert src.entered.acquire(timeout=5)
        src.gate.set()
        _background_done(src)
        assert src.snapshot() is old  # kept; a new background refresh is started
        assert src.entered.acquire(timeout=5)
        src.gate.set()
        _background_done(src)
        assert src.calls == 3 + 2 * i
    warnings = [r for r in caplog.records if "background refresh failed" in r.getMessage()]
    assert len(warnings) == 1 and "timed out" in warnings[0].getMessage()
    clock.now = old.collected_ts + TTL_S + MAX_STALE_S + 1  # past the bound: wait, and fail
    src.gate.set()
    with pytest.raises(NotAvailableError, match="timed out"):
        src.snapshot()
    src.fail = False
    src.gate.set()
    assert src.snapshot().source == f"gated-{src.calls}"  # a later call refreshes again


def test_zero_max_stale_or_ttl_keeps_the_synchronous_refresh(clock: Clock) -> None:
    for ttl_s, max_stale_s in ((TTL_S, 0.0), (0.0, MAX_STALE_S)):
        src = GatedSource(clock, ttl_s=ttl_s, max_stale_s=max_stale_s)
        old = _first(src)
        clock.now += ttl_s + 1
        src.gate.set()
        new = src.snapshot()  # refreshed on this thread, as before
        assert new is not old and src.calls == 2


def test_prefetch_reads_the_first_snapshot_in_the_background(clock: Clock) -> None:
    src = GatedSource(clock)
    src.prefetch()
    assert src.entered.acquire(timeout=5) and src.last_snapshot() is None
    src.gate.set()
    _background_done(src)
    assert src.last_snapshot() is not None and src.snapshot().source == "gated-1"
    src.prefetch()  # a snapshot exists: nothing
    assert src.calls == 1
    off = GatedSource(clock, max_stale_s=0.0)
    off.prefetch()
    assert off.calls == 0 and off._background.acquire(blocking=False)


def test_make_source_sets_the_bound_for_prometheus_only(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MLFLOW_DISABLE_TELEMETRY", "true")
    prom = base.make_source(
        Settings(
            database_url="sqlite://",
            telemetry="prometheus",
            prometheus_url="http://prom.test:9090",
            telemetry_max_stale_s=12.5,
        )
    )
    try:
        assert prom.max_stale_s == 12.5 and prom.ttl_s == 5.0
    finally:
        prom.close()
    assert Settings(database_url="sqlite://").telemetry_max_stale_s == 30.0
    assert base.make_source(Settings(database_url="sqlite://")).max_stale_s == 0.0  # sim


def test_the_setting_is_bounds_checked() -> None:
    from pydantic import ValidationError

    with pytest.raises(ValidationError):
        Settings(database_url="sqlite://", telemetry_max_stale_s=-1)
    with pytest.raises(ValidationError):
        Settings(database_url="sqlite://", telemetry_max_stale_s=float("inf"))
