"""Telemetry and holds caches when the wall clock steps, and FleetMind's clock against
Prometheus's.

1. NTP stepping a host clock back (one that ran 1 h ahead) made a cached snapshot's wall-clock
   age (``time.time() - age_ts``) negative: the snapshot counted as fresh for the whole hour, so
   ``/api/v1/fleet``, placements and the extender decided on GPU state up to an hour old (also at
   ``ttl_s`` 0, documented as "always wait" for a fresh read). Once cached, a snapshot's age now
   counts on :func:`time.monotonic` (from its wall-clock age then), so a step back cannot make
   it look younger, nor a step forward expire a snapshot seconds old (with the source down, that
   failed requests the stale snapshot would have served); the holds view of ``DbReservations``
   is reread when either clock says it is old.
2. The fleet queries' ``time`` was FleetMind's wall clock and the fresh filter keeps series with
   ``time() - timestamp(x) < 120`` (``timestamp()``: the sample's own timestamp,
   https://prometheus.io/docs/prometheus/latest/querying/functions/#timestamp): a FleetMind clock
   130 s ahead of Prometheus's gave an empty fleet, no error and no log. The source now reads
   Prometheus's clock from its answers' HTTP ``Date`` header (Go's net/http sets it on every
   response: ``net/http/server.go``, ``(*chunkWriter).writeHeader``, "If the Date header is not
   set ..."; RFC 9110 section 6.6.1) and evaluates the queries at Prometheus's time.
3. That offset came from whichever of the four concurrent answers was noted last, with the clock
   read after its body: one answer 6 s late made it -5.7 s, a second round of queries and a
   warning. It is now the largest of one collect's answers, each read when its headers arrive.

Deterministic: fake clocks (a namespace standing for the ``time`` module of the code under test)
and an ``httpx.MockTransport`` fake Prometheus; no sleeps.
"""

from __future__ import annotations

import logging
import os
import threading
import time
import types
from email.utils import formatdate
from typing import Any
from urllib.parse import parse_qs

import httpx
import pytest

os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")

from fleetmind.data.errors import NotAvailableError  # noqa: E402
from fleetmind.serving.scheduler import reservations as reservations_mod  # noqa: E402
from fleetmind.serving.telemetry import base, prometheus  # noqa: E402
from fleetmind.serving.telemetry.base import FleetSnapshot, TelemetrySource  # noqa: E402
from fleetmind.serving.telemetry.prometheus import PrometheusApiSource  # noqa: E402

WALL = 1_800_000_000.0
STEP_BACK_S = 3600.0  # NTP corrects a host clock that ran 1 h ahead


class Clocks:
    """A stand-in for the ``time`` module: ``time()`` (wall) and ``monotonic()``, set by hand."""

    def __init__(self) -> None:
        self.wall = WALL + STEP_BACK_S
        self.mono = 1000.0

    def time(self) -> float:
        return self.wall

    def monotonic(self) -> float:
        return self.mono

    def advance(self, seconds: float, step_wall_by: float = 0.0) -> None:
        """``seconds`` pass; the wall clock also jumps by ``step_wall_by``."""
        self.mono += seconds
        self.wall += seconds + step_wall_by


@pytest.fixture
def clocks(monkeypatch: pytest.MonkeyPatch) -> Clocks:
    c = Clocks()
    monkeypatch.setattr(base, "time", types.SimpleNamespace(time=c.time))
    monkeypatch.setattr(base, "monotonic", c.monotonic)
    return c


class Counting(TelemetrySource):
    """Counts its reads; fails while ``failing`` is set."""

    name = "counting"

    def __init__(self, **kw: Any) -> None:
        super().__init__(**kw)
        self.reads = 0
        self.failing = False

    def collect(self) -> FleetSnapshot:
        self.reads += 1
        if self.failing:
            raise NotAvailableError("source down")
        now = base.time.time()
        return FleetSnapshot("counting", [], now, received_ts=now)


@pytest.mark.parametrize("ttl_s", [5.0, 0.0])
def test_a_wall_clock_stepped_back_does_not_keep_the_snapshot_fresh(
    clocks: Clocks, ttl_s: float
) -> None:
    src = Counting(ttl_s=ttl_s)
    first = src.snapshot()
    assert src.reads == 1
    clocks.advance(ttl_s + 0.5, step_wall_by=-STEP_BACK_S)  # by the wall: 1 h in the future
    second = src.snapshot()
    assert src.reads == 2 and second is not first  # the old code: reads 1, `first` for 1 h
    assert second.collected_ts == WALL + ttl_s + 0.5  # dated on the (corrected) wall clock


def test_within_the_ttl_a_step_back_still_serves_the_cache(clocks: Clocks) -> None:
    src = Counting(ttl_s=5.0)
    first = src.snapshot()
    clocks.advance(1.0, step_wall_by=-STEP_BACK_S)
    assert src.snapshot() is first and src.reads == 1


def test_a_step_back_does_not_stretch_the_stale_bound(clocks: Clocks) -> None:
    """Past ``ttl_s + max_stale_s`` by the monotonic clock the caller reads (and waits) itself,
    as without the step; no background thread is started."""
    src = Counting(ttl_s=5.0, max_stale_s=30.0)
    first = src.snapshot()
    clocks.advance(40.0, step_wall_by=-STEP_BACK_S)
    assert src._servable_stale() is None  # the old code: served as fresh for an hour
    second = src.snapshot()
    assert second is not first and src.reads == 2


def test_fresh_snapshot_reads_after_a_step_back(clocks: Clocks) -> None:
    """After a failed read, ``fresh_snapshot`` skips reading for ``ttl_s`` seconds (serving the
    stale snapshot); a read that failed while the wall clock ran 1 h ahead must not skip reads
    for that hour once NTP steps it back."""
    clocks.wall = WALL
    src = Counting(ttl_s=5.0, max_stale_s=10_000.0)
    first = src.snapshot()
    clocks.advance(6.0, step_wall_by=STEP_BACK_S)  # the clock runs 1 h ahead
    src.failing = True
    assert src.fresh_snapshot() is first  # the read failed: the stale snapshot is served
    assert src.reads == 2
    src.failing = False
    clocks.advance(10.0, step_wall_by=-STEP_BACK_S)  # NTP steps it back
    second = src.fresh_snapshot()  # the old code: `first`, and a read left to a background thread
    assert second is not first and src.reads == 3


def test_a_wall_clock_stepped_forward_keeps_the_cached_snapshot(clocks: Clocks) -> None:
    src = Counting(ttl_s=5.0)
    first = src.snapshot()
    clocks.advance(1.0, step_wall_by=STEP_BACK_S)
    assert src.snapshot() is first and src.reads == 1  # 1 s old, whatever the wall clock says


def test_a_snapshot_already_old_when_cached_keeps_that_age(clocks: Clocks) -> None:
    """The monotonic count starts from the snapshot's wall-clock age when it was cached (a source
    that answered 4 s before the read returned): with a 5 s TTL it is fresh for 1 s more."""

    class Late(Counting):
        def collect(self) -> FleetSnapshot:
            snap = super().collect()
            snap.received_ts = base.time.time() - 4.0
            return snap

    src = Late(ttl_s=5.0)
    first = src.snapshot()
    assert src._age_s(first) == 4.0
    clocks.advance(0.5, step_wall_by=-STEP_BACK_S)
    assert src.snapshot() is first
    clocks.advance(1.0, step_wall_by=STEP_BACK_S)
    assert src.snapshot() is not first and src.reads == 2


def test_a_forward_step_while_the_source_is_down_still_serves_the_stale_snapshot(
    clocks: Clocks, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A snapshot 7 s old (TTL 5 s, 30 s stale bound) with the source down: a wall clock stepped
    60 s forward (a VM resumed, NTP catching up) made it count 67 s old, past the bound, so the
    request read itself and got the source's error instead of the stale snapshot."""
    src = Counting(ttl_s=5.0, max_stale_s=30.0)
    monkeypatch.setattr(src, "_refresh_in_background", lambda: None)  # no background reads
    first = src.snapshot()
    src.failing = True
    clocks.advance(6.0)
    assert src.snapshot() is first  # stale, within the bound
    clocks.advance(1.0, step_wall_by=60.0)
    assert src._age_s(first) == 7.0
    assert src.snapshot() is first and src.fresh_snapshot() is first  # the old code raised


def test_a_forward_step_does_not_end_the_window_after_a_failed_read(
    clocks: Clocks, monkeypatch: pytest.MonkeyPatch
) -> None:
    """For ``ttl_s`` after a failed read ``fresh_snapshot`` reads no more; a forward step must not
    end that window early (a down source read once per call)."""
    src = Counting(ttl_s=5.0, max_stale_s=30.0)
    monkeypatch.setattr(src, "_refresh_in_background", lambda: None)  # no background reads
    first = src.snapshot()
    clocks.advance(6.0)
    src.failing = True
    assert src.fresh_snapshot() is first and src.reads == 2  # read, failed: stale served
    clocks.advance(1.0, step_wall_by=60.0)
    assert src.fresh_snapshot() is first and src.reads == 2  # the old code: a third read


# ----------------------------------------------------------------------- the holds view cache
def test_the_holds_view_is_read_again_after_a_step_back(
    migrated_db: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Replica A cached its holds view (0.25 s); its wall clock steps back 1 h. Replica B's hold,
    made 1 s later, must reach A's decisions (the old code served A's empty view for an hour)."""
    from fleetmind.serving.scheduler.placement import Option
    from fleetmind.serving.schemas import JobSpec

    c = Clocks()
    monkeypatch.setattr(reservations_mod, "time", types.SimpleNamespace(monotonic=c.monotonic))
    a = reservations_mod.DbReservations(migrated_db, clock=c.time)
    b = reservations_mod.DbReservations(migrated_db, clock=lambda: WALL + 1.0)
    assert a.gpu_used("c0", "n1", 0) == 0  # cached
    c.advance(1.0, step_wall_by=-STEP_BACK_S)
    assert b.hold("ns/p", Option("c0", "n1", (0,), 0.0), JobSpec(num_gpu=1, gpu_milli=1000))
    assert a.gpu_used("c0", "n1", 0) == 1000
    c.advance(0.1)
    b.release("ns/p")
    assert a.gpu_used("c0", "n1", 0) == 1000  # within cache_s: the cached view


# ----------------------------------------------------------------------- Prometheus's clock
PROM_NOW = 1_800_000_000.0
AHEAD_S = 130.0  # FleetMind's clock ahead of Prometheus's, beyond the 120 s fresh filter
SCRAPED_S = 15.0  # the newest DCGM sample is this old on Prometheus's clock
GPU = {"gpu": "0", "UUID": "GPU-x", "modelName": "H100", "Hostname": "gpu-a"}
DCGM = [("DCGM_FI_DEV_FB_USED", GPU, 600.0), ("DCGM_FI_DEV_FB_FREE", GPU, 80000.0)]


class SkewedPrometheus:
    """Answers as Prometheus at ``PROM_NOW`` would: the DCGM query keeps its series only when
    the query's ``time`` minus the sample's timestamp is under the 120 s of the fresh filter
    (``time() - timestamp(x) < 120``); every answer carries a ``Date`` header of its clock
    (``date=False``: none, as behind a proxy that drops it)."""

    def __init__(self, src: PrometheusApiSource, date: bool = True) -> None:
        self.src = src
        self.date = date
        self.times: list[float] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        form = parse_qs(request.content.decode())
        at = float(form["time"][0])
        self.times.append(at)
        result = []
        if form["query"][0] == self.src.queries["DCGM"] and at - (PROM_NOW - SCRAPED_S) < 120:
            result = [
                {"metric": {"__name__": n, **labels}, "value": [at, repr(v)]}
                for n, labels, v in DCGM
            ]
        body = {"status": "success", "data": {"resultType": "vector", "result": result}}
        headers = {"Date": formatdate(PROM_NOW, usegmt=True)} if self.date else {}
        return httpx.Response(200, json=body, headers=headers)


@pytest.fixture
def skewed(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = types.SimpleNamespace(time=lambda: PROM_NOW + AHEAD_S, monotonic=time.monotonic)
    monkeypatch.setattr(prometheus, "time", fake)


def test_a_fleetmind_clock_ahead_of_prometheus_still_reads_the_fleet(
    skewed: None, caplog: pytest.LogCaptureFixture
) -> None:
    src = PrometheusApiSource("http://prom.test:9090", ttl_s=0.0)
    fake = SkewedPrometheus(src)
    src._client = httpx.Client(transport=httpx.MockTransport(fake))
    try:
        with caplog.at_level(logging.WARNING, logger=prometheus.__name__):
            snap = src.collect()
        assert [n.name for n in snap.nodes] == ["gpu-a"]  # the old code: [] and no log
        assert len(fake.times) == 8  # the first four at FleetMind's time, again at Prometheus's
        assert abs(fake.times[-1] - PROM_NOW) <= 1.0
        assert snap.collected_ts == PROM_NOW + AHEAD_S  # on FleetMind's clock, as holds compare
        (warning,) = [r.getMessage() for r in caplog.records]
        assert "clock 130 s behind FleetMind's" in warning and "Date header" in warning
        again = src.collect()  # the offset is kept: four queries, at Prometheus's time
        assert [n.name for n in again.nodes] == ["gpu-a"] and len(fake.times) == 12
        assert abs(fake.times[-1] - PROM_NOW) <= 1.0
    finally:
        src.close()


def test_clocks_in_step_cost_no_extra_query(monkeypatch: pytest.MonkeyPatch) -> None:
    fake_time = types.SimpleNamespace(time=lambda: PROM_NOW + 0.7, monotonic=time.monotonic)
    monkeypatch.setattr(prometheus, "time", fake_time)
    src = PrometheusApiSource("http://prom.test:9090", ttl_s=0.0)
    fake = SkewedPrometheus(src)
    src._client = httpx.Client(transport=httpx.MockTransport(fake))
    try:
        snap = src.collect()
    finally:
        src.close()
    assert [n.name for n in snap.nodes] == ["gpu-a"]
    assert fake.times == [PROM_NOW + 0.7] * 4  # FleetMind's own instant, one round of queries


def test_without_a_date_header_the_queries_keep_fleetmind_s_clock(skewed: None) -> None:
    src = PrometheusApiSource("http://prom.test:9090", ttl_s=0.0)
    fake = SkewedPrometheus(src, date=False)
    src._client = httpx.Client(transport=httpx.MockTransport(fake))
    try:
        snap = src.collect()
    finally:
        src.close()
    assert fake.times == [PROM_NOW + AHEAD_S] * 4 and snap.nodes == []


# ------------------------------------------------- one collect's Date headers, some answers slow
IN_STEP_S = 0.2  # FleetMind's clock is this far ahead of Prometheus's: within the tolerance
LATE_S = 6.0  # how long one answer takes to arrive after Prometheus stamped its Date


class AnswerClock:
    """FleetMind's wall clock as the code under test reads it: ``PROM_NOW + IN_STEP_S``, plus,
    in a query thread, the ``lag`` the fake Prometheus sets for the answer that thread receives
    (the pool's threads are reused: every answer sets its own)."""

    def __init__(self) -> None:
        self.local = threading.local()

    def time(self) -> float:
        return PROM_NOW + IN_STEP_S + getattr(self.local, "lag", 0.0)


class SlowBody(httpx.SyncByteStream):
    """A body that takes ``LATE_S`` to download (a 5 MB answer on a slow link): the thread's
    clock moves on while it is read, after the headers arrived."""

    def __init__(self, data: bytes, clock: AnswerClock) -> None:
        self.data, self.clock = data, clock

    def __iter__(self) -> Any:
        self.clock.local.lag = LATE_S
        yield self.data


class LatePrometheus:
    """Answers as Prometheus at ``PROM_NOW`` would, its ``Date`` stamped when it writes the
    headers (Go's ``net/http``, ``(*chunkWriter).writeHeader``); ``slow_ksm``: the
    kube-state-metrics answer of the first collect reaches FleetMind ``LATE_S`` after that, and
    only once the three DCGM queries are done (so that it is the last answer noted);
    ``slow_bodies``: every body downloads for ``LATE_S`` after its headers."""

    def __init__(
        self,
        src: PrometheusApiSource,
        clock: AnswerClock,
        *,
        slow_ksm: bool = False,
        slow_bodies: bool = False,
    ) -> None:
        self.src, self.clock = src, clock
        self.slow_ksm, self.slow_bodies = slow_ksm, slow_bodies
        self.times: list[float] = []
        self.dcgm_done = threading.Semaphore(0)
        query = src.query

        def counted(promql: str, name: str | None = None, at: float | None = None) -> Any:
            try:
                return query(promql, name, at)
            finally:
                if promql != src.ksm_query:
                    self.dcgm_done.release()

        src.query = counted  # type: ignore[method-assign]

    def __call__(self, request: httpx.Request) -> httpx.Response:
        form = parse_qs(request.content.decode())
        self.times.append(float(form["time"][0]))
        self.clock.local.lag = 0.0
        headers = {"Date": formatdate(PROM_NOW, usegmt=True), "Content-Type": "application/json"}
        body = b'{"status":"success","data":{"resultType":"vector","result":[]}}'
        if self.slow_ksm and form["query"][0] == self.src.ksm_query:
            self.slow_ksm = False
            for _ in range(3):
                assert self.dcgm_done.acquire(timeout=10.0)
            self.clock.local.lag = LATE_S
        if self.slow_bodies:
            return httpx.Response(200, headers=headers, stream=SlowBody(body, self.clock))
        return httpx.Response(200, headers=headers, content=body)


def _late_source(monkeypatch: pytest.MonkeyPatch, **kw: bool) -> tuple[Any, LatePrometheus]:
    clock = AnswerClock()
    monkeypatch.setattr(prometheus, "time", types.SimpleNamespace(time=clock.time))
    src = PrometheusApiSource("http://prom.test:9090", ttl_s=0.0)
    fake = LatePrometheus(src, clock, **kw)
    src._client = httpx.Client(transport=httpx.MockTransport(fake))
    return src, fake


def test_one_late_answer_does_not_move_the_clock_offset(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Clocks in step; one of the four answers arrives 6 s after its Date and is noted last. The
    old code took the offset from it (-5.7 s), ran the four queries again at that offset with a
    warning, and the next refresh moved it back with a second one."""
    src, fake = _late_source(monkeypatch, slow_ksm=True)
    try:
        with caplog.at_level(logging.WARNING, logger=prometheus.__name__):
            src.collect()
            assert len(fake.times) == 4  # the old code: 8, the last four at PROM_NOW - 5.5
            assert src._date_offset_s == pytest.approx(0.5 - IN_STEP_S)  # the on-time answers'
            src.collect()
        assert fake.times == [PROM_NOW + IN_STEP_S] * 8
        assert src._clock_offset_s == 0.0 and caplog.records == []
    finally:
        src.close()


def test_a_slow_body_download_does_not_count_as_clock_offset(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Every answer's headers arrive at once but its body takes 6 s: the offset is taken when
    the headers arrive (the old code read the clock after the body: -5.7 s, a second round of
    queries and a warning on every first read)."""
    src, fake = _late_source(monkeypatch, slow_bodies=True)
    try:
        with caplog.at_level(logging.WARNING, logger=prometheus.__name__):
            src.collect()
        assert fake.times == [PROM_NOW + IN_STEP_S] * 4 and caplog.records == []
        assert src._date_offset_s == pytest.approx(0.5 - IN_STEP_S)
    finally:
        src.close()
