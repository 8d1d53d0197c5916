"""Cluster latency and request rate from a latency histogram stored as a native histogram.

Prometheus stores a histogram as a native histogram when it scrapes it with
``scrape_native_histograms: true`` (Prometheus 3.8 and later) or receives it as an OTLP exponential
histogram; such a histogram has no ``<h>_bucket`` or ``<h>_count`` series, only ``<h>`` whose
samples are histograms. The classic queries then answered nothing and P99, P95 and the request rate
vanished without a word. The fake Prometheus below serves ``/api/v1/query`` as upstream documents
it (prometheus/prometheus ``docs/querying/api.md``, "Native histograms": a vector sample of a native
histogram carries ``"histogram": [<time>, {"count", "sum", "buckets"}]`` instead of ``"value"``;
``histogram_quantile`` and ``histogram_count`` return plain floats) and aggregates as upstream does
(``docs/querying/operators.md``: ``sum`` and ``avg`` combine native histograms, ``max`` and ``min``
ignore them).
"""

from __future__ import annotations

import json
import logging
import re
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlparse

import pytest

from fleetmind.serving.health import HealthModel, add_latency, fleet_health, latency_queries
from fleetmind.serving.telemetry.base import FleetSnapshot
from fleetmind.serving.telemetry.prometheus import PrometheusApiSource

HIST = "http_server_request_duration_seconds"
# per cluster: P99 (s), P95 (s), requests/s; each cluster is scraped by an HA pair (two replicas)
CLUSTERS = {"c0": (0.8, 0.5, 12.0), "c1": (0.2, 0.1, 3.0)}
RATE = re.escape(f"rate({HIST}[5m])")


def _native_sample(cluster: str, at: float) -> dict[str, Any]:
    """One native histogram sample as ``/api/v1/query`` returns it (``docs/querying/api.md``)."""
    count = CLUSTERS[cluster][2]
    histogram = {
        "count": str(count),
        "sum": str(count * 0.3),
        "buckets": [[0, "0.25", "0.5", str(count / 2)], [0, "0.5", "1", str(count / 2)]],
    }
    return {"metric": {"cluster": cluster}, "histogram": [at, histogram]}


def _answer(promql: str, stored: str) -> list[dict[str, Any]]:
    """The vector a Prometheus holding ``HIST`` in the ``stored`` form returns for ``promql``."""
    now = time.time()
    classic = f"{HIST}_bucket" in promql or f"{HIST}_count" in promql
    if classic != (stored == "classic"):
        return []  # the other form's series do not exist
    if re.search(rf"(max|min) without \(prometheus_replica\) \({RATE}\)", promql):
        return []  # max/min ignore native histogram samples
    fn = re.match(r"(histogram_quantile\((0\.\d+)|histogram_count|sum)", promql)
    if fn is None:  # a bare native rate: histogram samples, no "value"
        return [_native_sample(c, now) for c in CLUSTERS]
    if fn.group(1) == "histogram_count" or fn.group(1) == "sum":
        col = 2
    else:
        col = {"0.99": 0, "0.95": 1}[fn.group(2)]
    return [{"metric": {"cluster": c}, "value": [now, str(v[col])]} for c, v in CLUSTERS.items()]


class FakePrometheus:
    """``/api/v1/query`` over HTTP for a histogram stored in ``stored`` (classic or native)."""

    def __init__(self, stored: str) -> None:
        self.stored = stored
        self.asked: list[str] = []
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def _reply(self, form: dict[str, list[str]]) -> None:
                promql = form["query"][0]
                fake.asked.append(promql)
                result = _answer(promql, fake.stored)
                body = json.dumps(
                    {"status": "success", "data": {"resultType": "vector", "result": result}}
                ).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self) -> None:
                self._reply(parse_qs(urlparse(self.path).query))

            def do_POST(self) -> None:
                n = int(self.headers.get("Content-Length") or 0)
                self._reply(parse_qs(self.rfile.read(n).decode()))

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_port}"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def prom(request: pytest.FixtureRequest) -> Iterator[tuple[FakePrometheus, PrometheusApiSource]]:
    fake = FakePrometheus(request.param)
    src = PrometheusApiSource(fake.url, timeout_s=5)
    try:
        yield fake, src
    finally:
        src.close()
        fake.close()


def _refresh(model: HealthModel, src: PrometheusApiSource) -> Any:
    return fleet_health(model, FleetSnapshot("prometheus", [], time.time()), src.query)


@pytest.mark.parametrize("prom", ["native"], indirect=True)
def test_native_histogram_gives_latency_and_rate(prom: Any) -> None:
    fake, src = prom
    model = HealthModel(1.0)
    health = _refresh(model, src)
    got = {c.cluster: (c.p99_latency_s, c.p95_latency_s, c.request_rate) for c in health.clusters}
    assert got == CLUSTERS
    assert health.latency_form == model.latency_form == "native"
    assert health.skew > 0  # request rate and P95 differ across the clusters
    # the classic three first (nothing), then the native three
    assert sorted(fake.asked[:3]) == sorted(latency_queries(HIST).values())
    assert sorted(fake.asked[3:]) == sorted(latency_queries(HIST, "native").values())
    # the next refresh asks the form that answered first: three queries per poll again
    fake.asked.clear()
    assert _refresh(model, src).latency_form == "native"
    assert sorted(fake.asked) == sorted(latency_queries(HIST, "native").values())


@pytest.mark.parametrize("prom", ["classic"], indirect=True)
def test_classic_histogram_keeps_three_queries(prom: Any) -> None:
    fake, src = prom
    model = HealthModel(1.0)
    for _ in range(2):
        fake.asked.clear()
        health = _refresh(model, src)
        assert sorted(fake.asked) == sorted(latency_queries(HIST).values())
        assert health.latency_form == "classic"
        assert health.by_cluster()["c0"].p99_latency_s == 0.8


@pytest.mark.parametrize("prom", ["native"], indirect=True)
def test_a_histogram_that_turns_classic_is_found_again(prom: Any) -> None:
    fake, src = prom
    model = HealthModel(1.0)
    assert _refresh(model, src).latency_form == "native"
    fake.stored = "classic"
    assert _refresh(model, src).by_cluster()["c1"].request_rate == 3.0
    assert model.latency_form == "classic"


@pytest.mark.parametrize("prom", ["native"], indirect=True)
def test_bare_native_samples_are_skipped_not_misread(prom: Any) -> None:
    """A query that returns native histogram samples ("histogram", no "value") yields no float."""
    _, src = prom
    assert src.query(f"rate({HIST}[5m])") == []


def test_neither_form_is_said_once_and_failures_ask_no_more() -> None:
    asked: list[str] = []

    def empty(promql: str) -> list[Any]:
        asked.append(promql)
        return []

    def down(promql: str) -> list[Any]:
        asked.append(promql)
        raise TimeoutError("slow Prometheus")

    model = HealthModel(1.0)
    snap = FleetSnapshot("prometheus", [], time.time())
    logger = logging.getLogger("fleetmind.serving")
    records: list[logging.LogRecord] = []
    handler = logging.Handler()
    handler.emit = records.append  # type: ignore[method-assign]
    logger.addHandler(handler)
    try:
        for _ in range(2):
            assert fleet_health(model, snap, empty, HIST).latency_form is None
        assert len(asked) == 12  # both forms, each refresh
        said = [r.getMessage() for r in records if "neither a classic" in r.getMessage()]
        assert len(said) == 1 and f"{HIST}_bucket" in said[0]
    finally:
        logger.removeHandler(handler)
    asked.clear()
    assert add_latency({}, down, HIST) is None
    assert len(asked) == 3  # a failing Prometheus costs one form's timeout, not two
