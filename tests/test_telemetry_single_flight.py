"""A slow Prometheus must not stall the service: a burst of requests with the snapshot expired runs
one telemetry refresh (not one each), cluster health runs its three latency queries once per
snapshot and concurrently, and ``/healthz``, ``/readyz`` and ``/metrics`` answer while every
worker thread is held by such requests (settings: "/healthz, /readyz and /metrics are always
answered"; the Deployment's probes allow 3 s, ``deploy/kubernetes/base/deployment.yaml``)."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from fleetmind.data.errors import NotAvailableError
from fleetmind.serving.app import create_app
from fleetmind.serving.health import HealthService, latency_queries
from fleetmind.serving.settings import Settings
from fleetmind.serving.telemetry.base import FleetSnapshot, GpuState, NodeState, TelemetrySource

THREADS = 12


class BlockingSource(TelemetrySource):
    """Counts :meth:`collect` calls; each blocks until ``release`` is set, then answers a
    two-cluster fleet (or raises when ``fail``)."""

    name = "blocking"

    def __init__(self, ttl_s: float = 60.0, fail: bool = False) -> None:
        super().__init__(ttl_s)
        self.calls = 0
        self.entered = threading.Event()
        self.release = threading.Event()
        self.fail = fail
        self._count = threading.Lock()

    def collect(self) -> FleetSnapshot:
        with self._count:
            self.calls += 1
        self.entered.set()
        assert self.release.wait(10)
        if self.fail:
            raise NotAvailableError("cannot query Prometheus at http://prom.test: timed out")
        nodes = [
            NodeState(f"{c}-n0", c, [GpuState(0, "A100", util_pct=10.0, mem_used_mib=1000.0,
                                              mem_total_mib=80_000.0)], 64_000, 64_000)
            for c in ("c0", "c1")
        ]  # fmt: skip
        return FleetSnapshot("blocking", nodes, time.time())


def _burst(fn: Any, n: int = THREADS) -> tuple[list[threading.Thread], list[Any]]:
    out: list[Any] = [None] * n

    def run(i: int) -> None:
        try:
            out[i] = fn()
        except Exception as err:
            out[i] = err

    threads = [threading.Thread(target=run, args=(i,), daemon=True) for i in range(n)]
    for t in threads:
        t.start()
    return threads, out


def _let_pile_up(src: BlockingSource) -> None:
    """Hold the refresh until every thread has called collect (the old, unshared refresh) or
    0.3 s have passed (the callers now wait for the one refresh instead)."""
    assert src.entered.wait(5)
    deadline = time.time() + 0.3
    while src.calls < THREADS and time.time() < deadline:
        time.sleep(0.01)
    src.release.set()


def test_concurrent_requests_with_the_cache_expired_run_one_collect() -> None:
    src = BlockingSource()
    threads, got = _burst(src.snapshot)
    _let_pile_up(src)
    for t in threads:
        t.join(5)
    assert src.calls == 1
    assert all(isinstance(s, FleetSnapshot) for s in got) and len({id(s) for s in got}) == 1
    assert src.snapshot() is got[0] and src.calls == 1  # cached for ttl_s


def test_callers_that_waited_for_a_failed_refresh_share_its_error() -> None:
    src = BlockingSource(fail=True)
    threads, got = _burst(src.snapshot)
    _let_pile_up(src)
    for t in threads:
        t.join(5)
    assert src.calls == 1
    assert all(isinstance(e, NotAvailableError) and "timed out" in str(e) for e in got)
    src.fail = False
    assert src.snapshot().source == "blocking" and src.calls == 2  # a later request retries


class LatencyTelemetry:
    """A fixed snapshot and a ``query`` that answers the latency queries only once all three are
    asked at the same time (a barrier): run one after another they time out."""

    def __init__(self) -> None:
        self.snap = FleetSnapshot("fake", [NodeState("n0", "c0", [GpuState(0, "A100")])])
        self.asked: list[str] = []
        self.barrier = threading.Barrier(3, timeout=2.0)
        self._lock = threading.Lock()

    def snapshot(self) -> FleetSnapshot:
        return self.snap

    def query(self, promql: str) -> list:
        with self._lock:
            self.asked.append(promql)
        self.barrier.wait()
        return [("x", {"cluster": "c0"}, 0.25)]


def test_latency_queries_run_once_per_snapshot_and_concurrently() -> None:
    """Three sequential queries cost three Prometheus timeouts while every health request
    waited; concurrent ones cost one, and requests for the same snapshot share them."""
    from prometheus_client import CollectorRegistry

    settings = Settings(database_url="sqlite://")
    hs = HealthService(settings, CollectorRegistry())
    tel = LatencyTelemetry()
    threads, got = _burst(lambda: hs.current(tel), n=6)
    for t in threads:
        t.join(10)
    assert sorted(tel.asked) == sorted(latency_queries(settings.health_latency_histogram).values())
    assert all(h is got[0] for h in got)
    (c0,) = got[0].clusters
    assert c0.p99_latency_s == c0.p95_latency_s == c0.request_rate == 0.25


@pytest.fixture
def client(tmp_path: Path) -> Any:
    settings = Settings(
        database_url=f"sqlite:///{tmp_path}/p.db",
        rca_model="baseline:upstream-coverage",
        placement_model="heuristic:builtin-bestfit",
        incident_worker=False,
    )
    with TestClient(create_app(settings)) as c:
        yield c


def test_probes_answer_while_every_worker_thread_waits_for_telemetry(client: TestClient) -> None:
    """One worker thread (anyio's limit set to 1) held by a fleet request blocked in telemetry:
    the probes must not queue behind it."""
    import anyio.to_thread

    def one_thread() -> None:
        anyio.to_thread.current_default_thread_limiter().total_tokens = 1

    client.portal.call(one_thread)
    src = BlockingSource()
    client.app.state.services.telemetry = src
    fleet, fleet_out = _burst(lambda: client.get("/api/v1/fleet"), n=1)
    try:
        assert src.entered.wait(5)
        probes, answers = _burst(
            lambda: [client.get(p).status_code for p in ("/healthz", "/readyz", "/metrics")], n=1
        )
        probes[0].join(3)
        assert answers[0] == [200, 200, 200]
    finally:
        src.release.set()
        fleet[0].join(10)
    assert fleet_out[0].status_code == 200
