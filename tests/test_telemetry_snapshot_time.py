"""When a telemetry snapshot is dated (``FleetSnapshot.collected_ts``) and when it was received
(``received_ts``). (What a failed background refresh logs about the snapshot it leaves:
``tests/test_telemetry_background_failure_log.py``.)

``collected_ts`` drives the bound-pod grace (``snapshot.collected_ts >= bound_ts + grace`` in
``serving/scheduler/reservations.py``) and the "as of" times. The
``prometheus`` server mode stamped it after all four queries had been answered and the nodes built,
2-16 s after Prometheus evaluated them at 1,000-5,000 nodes (measured against Prometheus 2.42's
query log), so the documented 30 s grace ended holds on data evaluated 18 s after the binding. Now
every query of one snapshot carries one explicit evaluation instant, the instant-query ``time``
parameter ("time=<rfc3339 | unix_timestamp>: Evaluation timestamp. Optional.",
https://prometheus.io/docs/prometheus/latest/querying/api/#instant-queries), taken before the
queries are sent, and that instant is ``collected_ts``. The cache's TTL and stale bounds count
from ``received_ts``, when the answers arrived: counted from the evaluation instant, a read slower
than the TTL returned a snapshot already expired, and with ``FLEETMIND_TELEMETRY_MAX_STALE_S=0``
every request refreshed again. The snapshot's queries also send ``nocache=1``: VictoriaMetrics'
vmselect otherwise replaces a ``time`` within ``-search.latencyOffset`` (30 s) of its now by now
minus that offset ("Adjust start time only if `nocache` arg isn't set",
``app/vmselect/prometheus/prometheus.go``); Prometheus ignores form parameters it does not know.

Deterministic: the fake Prometheus is an ``httpx.MockTransport`` whose "slowness" moves a patched
clock. No sleeps, no timing asserts.
"""

from __future__ import annotations

import os
import threading
from urllib.parse import parse_qs

import httpx
import pytest

os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")

from fleetmind.serving.telemetry import base, prometheus  # noqa: E402
from fleetmind.serving.telemetry.base import FleetSnapshot  # noqa: E402
from fleetmind.serving.telemetry.prometheus import (  # noqa: E402
    PrometheusApiSource,
    PrometheusSource,
)

START = 1_800_000_000.25
SLOW_S = 7.0  # how long the fake Prometheus "takes" to answer (on the patched clock)
EMPTY = {"status": "success", "data": {"resultType": "vector", "result": []}}


class Clock:
    """``time.time``, moved by hand (and by the fake servers' answers)."""

    def __init__(self) -> None:
        self.now = START

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    c = Clock()
    # both modules use the one ``time`` module: patching it through either patches both
    monkeypatch.setattr(prometheus.time, "time", c)
    monkeypatch.setattr(base.time, "time", c)
    monkeypatch.setattr(base, "monotonic", c)  # the cache ages snapshots on monotonic()
    return c


class SlowPrometheus:
    """Answers every instant query with an empty vector ``SLOW_S`` seconds (of ``clock``) after
    it was sent, recording each query's form (``query``, ``time``, ...)."""

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self.forms: list[dict[str, list[str]]] = []
        self.replied_at: list[float] = []
        self._lock = threading.Lock()

    def __call__(self, request: httpx.Request) -> httpx.Response:
        with self._lock:
            self.forms.append(parse_qs(request.content.decode()))
            self.clock.now = max(self.clock.now, START + SLOW_S)
            self.replied_at.append(self.clock.now)
        return httpx.Response(200, json=EMPTY)


def test_a_snapshot_is_dated_by_the_instant_its_queries_evaluate(clock: Clock) -> None:
    fake = SlowPrometheus(clock)
    src = PrometheusApiSource("http://prom.test:9090", ttl_s=5.0)
    src._client = httpx.Client(transport=httpx.MockTransport(fake))
    try:
        snap = src.collect()
    finally:
        src.close()
    assert len(fake.forms) == 4  # three DCGM queries and the kube-state-metrics one
    sent = {f["time"][0] for f in fake.forms if "time" in f}
    assert len(sent) == 1 and all("time" in f for f in fake.forms)  # one instant for all four
    (at,) = sent
    assert float(at) == START  # taken before the queries were sent
    assert snap.collected_ts == float(at)  # the old code: the time after the last answer
    assert snap.collected_ts < min(fake.replied_at)
    assert clock() - snap.collected_ts == SLOW_S  # served, it is as old as its data
    assert snap.received_ts == START + SLOW_S  # when the answers arrived: the cache's clock
    assert all(f["nocache"] == ["1"] for f in fake.forms)  # VictoriaMetrics: evaluate at `time`


def test_a_read_slower_than_the_ttl_still_serves_the_next_requests(clock: Clock) -> None:
    """TTL 5 s, stale-while-refresh off, queries answering in 7 s: requests 1, 2 and 3 s after a
    refresh share it (counted from its evaluation instant, it had expired on arrival: 592fdb8
    refreshed, and made the caller wait, on every request)."""
    fake = SlowPrometheus(clock)
    src = PrometheusApiSource("http://prom.test:9090", ttl_s=5.0)
    src.max_stale_s = 0.0
    src._client = httpx.Client(transport=httpx.MockTransport(fake))
    try:
        first = src.snapshot()
        for _ in range(3):
            clock.now += 1.0
            assert src.snapshot() is first
        assert len(fake.forms) == 4  # one refresh: three DCGM queries and the kube-state one
        clock.now = first.received_ts + 5.0 + 0.001  # one TTL after the answers arrived
        assert src.snapshot() is not first
        assert len(fake.forms) == 8
    finally:
        src.close()


def test_a_snapshot_read_through_the_cache_keeps_the_evaluation_time(clock: Clock) -> None:
    """What the bound-pod grace compares: ``snapshot()`` (the path requests take)."""
    fake = SlowPrometheus(clock)
    src = PrometheusApiSource("http://prom.test:9090", ttl_s=60.0)
    src._client = httpx.Client(transport=httpx.MockTransport(fake))
    try:
        snap = src.snapshot()
    finally:
        src.close()
    assert snap.collected_ts == START == float(fake.forms[0]["time"][0])


def test_a_single_query_without_an_instant_sends_no_time(clock: Clock) -> None:
    """Other queries (``fleetmind telemetry doctor``, cluster health) read Prometheus's now."""
    fake = SlowPrometheus(clock)
    src = PrometheusApiSource("http://prom.test:9090")
    src._client = httpx.Client(transport=httpx.MockTransport(fake))
    try:
        assert src.query("up") == []
        assert src.query("up", at=START + 0.1234) == []
    finally:
        src.close()
    assert "time" not in fake.forms[0] and "nocache" not in fake.forms[0]
    assert fake.forms[1]["time"] == ["1800000000.373"]  # to the millisecond
    assert fake.forms[1]["nocache"] == ["1"]


def test_an_exporter_snapshot_is_dated_before_the_scrape(clock: Clock) -> None:
    """The single-exporter mode (a ``/metrics`` URL): the time the scrape was sent, not the time
    its text had been parsed."""
    text = (
        "# TYPE DCGM_FI_DEV_FB_USED gauge\n"
        'DCGM_FI_DEV_FB_USED{gpu="0",modelName="NVIDIA H100 80GB HBM3",Hostname="n0"} 600\n'
    )

    def slow(request: httpx.Request) -> httpx.Response:
        clock.now = START + SLOW_S
        return httpx.Response(200, text=text)

    src = PrometheusSource("http://n0.test:9400/metrics")
    src._client = httpx.Client(transport=httpx.MockTransport(slow))
    try:
        snap = src.collect()
    finally:
        src.close()
    assert [n.name for n in snap.nodes] == ["n0"]
    assert snap.collected_ts == START  # the old code: START + SLOW_S
    assert snap.received_ts == START + SLOW_S


def test_a_snapshot_without_a_received_time_is_received_when_collected() -> None:
    """Sources that read at once (sim, nvml) give one time: the cache counts from it."""
    snap = FleetSnapshot("sim", [], 123.5)
    assert snap.received_ts == 123.5 == snap.age_ts
