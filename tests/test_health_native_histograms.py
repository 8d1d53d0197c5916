"""Cluster latency and request rate from a latency histogram stored as a native histogram.

Prometheus stores a histogram as a native histogram when it scrapes it with
``scrape_native_histograms: true`` (Prometheus 3.8 and later) or receives it as an OTLP exponential
histogram; such a histogram has no ``<h>_bucket`` or ``<h>_count`` series, only ``<h>`` whose
samples are histograms. The classic queries then answered nothing and P99, P95 and the request rate
vanished without a word. Each health query now joins the classic and the native expression with
``or``, so every cluster answers in the form its own Prometheus stores.

The fake Prometheus below serves ``/api/v1/query`` as upstream documents it
(prometheus/prometheus ``docs/querying/api.md``, "Native histograms": a vector sample of a native
histogram carries ``"histogram": [<time>, {"count", "sum", "buckets"}]`` instead of ``"value"``;
``histogram_quantile`` and ``histogram_count`` return plain floats), aggregates as upstream does
(``docs/querying/operators.md``: ``sum`` and ``avg`` combine native histograms, ``max`` and ``min``
ignore them; ``vector1 or vector2`` keeps the elements of ``vector1`` and those of ``vector2``
whose label sets ``vector1`` lacks), and, set to, refuses ``histogram_count`` as a Prometheus
before 2.40 does (HTTP 400 ``bad_data``, ``invalid parameter "query": ... parse error: unknown
function with name "histogram_count"``: ``web/api/v1/api.go`` ``invalidParamError`` and the
parser's ``unknown function with name %q`` in ``promql/parser/generated_parser.y``).
"""

from __future__ import annotations

import json
import logging
import re
import shutil
import subprocess
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

import pytest
import yaml

from fleetmind.serving.health import (
    HealthModel,
    add_latency,
    fleet_health,
    form_queries,
    latency_queries,
)
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


def _answer_one(promql: str, stored: dict[str, str | None]) -> list[dict[str, Any]]:
    """The vector of one expression (no ``or``) over clusters storing ``HIST`` as ``stored``."""
    now = time.time()
    form = "classic" if f"{HIST}_bucket" in promql or f"{HIST}_count" in promql else "native"
    here = [c for c, f in stored.items() if f == form]  # the other form's series do not exist
    if form == "native" and re.search(
        rf"(max|min) without \(prometheus_replica\) \({RATE}\)", promql
    ):
        return []  # max/min ignore native histogram samples
    fn = re.match(r"(histogram_quantile\((0\.\d+)|histogram_count|sum)", promql)
    if fn is None:  # a bare native rate: histogram samples, no "value"
        return [_native_sample(c, now) for c in here]
    if fn.group(1) == "histogram_count" or fn.group(1) == "sum":
        col = 2
    else:
        col = {"0.99": 0, "0.95": 1}[fn.group(2)]
    return [{"metric": {"cluster": c}, "value": [now, str(CLUSTERS[c][col])]} for c in here]


def _answer(promql: str, stored: dict[str, str | None]) -> list[dict[str, Any]]:
    """``a or b``: the elements of ``a``, then those of ``b`` whose label set ``a`` lacks."""
    out: list[dict[str, Any]] = []
    for part in promql.split(" or "):
        seen = [r["metric"] for r in out]
        out += [r for r in _answer_one(part, stored) if r["metric"] not in seen]
    return out


class FakePrometheus:
    """``/api/v1/query`` over HTTP for clusters storing ``HIST`` as ``stored[cluster]``
    (``"classic"``, ``"native"`` or ``None``: no histogram)."""

    def __init__(self, stored: dict[str, str | None]) -> None:
        self.stored = stored
        self.asked: list[str] = []
        self.refuse_histogram_count = False  # a Prometheus before 2.40
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def _reply(self, form: dict[str, list[str]]) -> None:
                promql = form["query"][0]
                fake.asked.append(promql)
                code, body = (
                    200,
                    {
                        "status": "success",
                        "data": {"resultType": "vector", "result": _answer(promql, fake.stored)},
                    },
                )
                if fake.refuse_histogram_count and "histogram_count(" in promql:
                    col = promql.index("histogram_count(") + 1
                    code, body = 400, {
                        "status": "error", "errorType": "bad_data",
                        "error": f'invalid parameter "query": 1:{col}: parse error: unknown '
                        'function with name "histogram_count"',
                    }  # fmt: skip
                raw = json.dumps(body).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

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
    fake = FakePrometheus(dict(request.param))
    src = PrometheusApiSource(fake.url, timeout_s=5)
    try:
        yield fake, src
    finally:
        src.close()
        fake.close()


NATIVE = {"c0": "native", "c1": "native"}
CLASSIC = {"c0": "classic", "c1": "classic"}
MIXED = {"c0": "classic", "c1": "native"}  # a fleet moving to native histograms, one at a time


def _refresh(model: HealthModel, src: PrometheusApiSource) -> dict[str, Any]:
    health = fleet_health(model, FleetSnapshot("prometheus", [], time.time()), src.query)
    return {c.cluster: (c.p99_latency_s, c.p95_latency_s, c.request_rate) for c in health.clusters}


@pytest.mark.parametrize("prom", [NATIVE, CLASSIC, MIXED], indirect=True)
def test_every_cluster_answers_in_its_form_with_three_queries(prom: Any) -> None:
    fake, src = prom
    model = HealthModel(1.0)
    for _ in range(2):
        fake.asked.clear()
        assert _refresh(model, src) == CLUSTERS
        assert sorted(fake.asked) == sorted(latency_queries(HIST).values())
    assert model.last is not None and model.last.skew > 0  # rate and P95 differ across clusters


@pytest.mark.parametrize("prom", [MIXED], indirect=True)
def test_a_cluster_keeps_its_latency_whatever_the_others_answered(prom: Any) -> None:
    """The classic cluster's store drops out and comes back: the native cluster answers at every
    poll, and the classic one again as soon as its series are back (no form remembered)."""
    fake, src = prom
    model = HealthModel(1.0)
    for c0 in ("classic", None, "classic", None, "classic"):
        fake.stored["c0"] = c0
        got = _refresh(model, src)
        assert got["c1"] == CLUSTERS["c1"]
        assert ("c0" in got) == (c0 is not None)


@pytest.mark.parametrize("prom", [MIXED], indirect=True)
def test_a_prometheus_without_histogram_count_gets_the_classic_rate(prom: Any) -> None:
    fake, src = prom
    fake.refuse_histogram_count = True
    sig: dict[str, Any] = {}
    assert add_latency(sig, src.query, HIST) is True
    assert sig["c0"].request_rate == 12.0
    assert (sig["c1"].p99_latency_s, sig["c1"].request_rate) == (0.2, None)
    assert fake.asked.count(form_queries(HIST, "classic")["request_rate"]) == 1
    assert len(fake.asked) == 4  # the refused one answers at once: no timeout spent


@pytest.mark.parametrize("prom", [NATIVE], indirect=True)
def test_bare_native_samples_are_skipped_not_misread(prom: Any) -> None:
    """A query that returns native histogram samples ("histogram", no "value") yields no float."""
    _, src = prom
    assert src.query(f"rate({HIST}[5m])") == []


def _warnings(run: Any) -> list[str]:
    logger = logging.getLogger("fleetmind.serving")
    records: list[logging.LogRecord] = []
    handler = logging.Handler()
    handler.emit = records.append  # type: ignore[method-assign]
    logger.addHandler(handler)
    try:
        run()
    finally:
        logger.removeHandler(handler)
    return [r.getMessage() for r in records if "neither a classic" in r.getMessage()]


def test_no_histogram_is_said_once_with_three_queries_per_poll() -> None:
    asked: list[str] = []

    def empty(promql: str) -> list[Any]:
        asked.append(promql)
        return []

    model = HealthModel(1.0)
    snap = FleetSnapshot("prometheus", [], time.time())
    said = _warnings(lambda: [fleet_health(model, snap, empty, HIST) for _ in range(3)])
    assert len(said) == 1 and f"{HIST}_bucket" in said[0]
    assert len(asked) == 9  # three per poll
    assert add_latency({}, empty, HIST) is False


def test_a_failing_prometheus_is_trouble_not_a_missing_histogram() -> None:
    asked: list[str] = []

    def down(promql: str) -> list[Any]:
        asked.append(promql)
        raise TimeoutError("slow Prometheus")

    model = HealthModel(1.0)
    snap = FleetSnapshot("prometheus", [], time.time())
    assert _warnings(lambda: fleet_health(model, snap, down, HIST)) == []
    assert len(asked) == 3  # one timeout's worth, no second try


def _promtool_case(tmp: Path) -> Path:
    """A rule file recording the health queries and the classic-only ones they replace, and a
    ``promtool test rules`` file whose classic series (an HA pair for ``a``, one Prometheus for
    ``b``) must give both the same samples."""
    new, old = latency_queries(HIST), form_queries(HIST, "classic")
    rules = [r for k in new for r in ({"record": f"new:{k}", "expr": new[k]},
                                      {"record": f"old:{k}", "expr": old[k]})]  # fmt: skip
    (tmp / "rules.yml").write_text(yaml.safe_dump({"groups": [{"name": "h", "rules": rules}]}))
    series = []
    for cluster, replicas, per_min in (("a", ("0", "1"), (3, 7, 9)), ("b", ("",), (1, 4, 10))):
        for rep in replicas:
            labels = f'cluster="{cluster}"' + (f',prometheus_replica="{rep}"' if rep else "")
            for le, n in zip(("0.1", "0.5", "+Inf"), per_min, strict=True):
                series.append({"series": f'{HIST}_bucket{{{labels},le="{le}"}}',
                               "values": f"0+{n}x20"})  # fmt: skip
            series.append({"series": f"{HIST}_count{{{labels}}}", "values": f"0+{per_min[2]}x20"})
    same = [{"labels": f'{{cluster="{c}"}}', "value": 0} for c in ("a", "b")]
    checks = [{"expr": f"new:{k} - old:{k}", "eval_time": "10m", "exp_samples": same} for k in new]
    checks.append({"expr": "round(new:request_rate * 600)", "eval_time": "10m", "exp_samples": [
        {"labels": '{cluster="a"}', "value": 90},  # requests per 10 minutes: 9 a minute
        {"labels": '{cluster="b"}', "value": 100},
    ]})  # fmt: skip
    test = {"rule_files": ["rules.yml"], "evaluation_interval": "1m",
            "tests": [{"interval": "1m", "input_series": series, "promql_expr_test": checks}]}  # fmt: skip
    (tmp / "test.yml").write_text(yaml.safe_dump(test))
    return tmp / "test.yml"


@pytest.mark.skipif(shutil.which("promtool") is None, reason="needs promtool")
def test_promtool_parses_the_queries_and_classic_answers_are_unchanged(tmp_path: Path) -> None:
    """Prometheus's own engine (promtool, 2.42 on Debian) parses the ``or`` queries, accepts
    ``histogram_count`` over a store with only classic series, and gives the classic-only
    queries' samples, value for value, with an HA pair counted once."""
    test = _promtool_case(tmp_path)
    out = subprocess.run(["promtool", "test", "rules", str(test)], capture_output=True,
                         text=True, timeout=60, cwd=tmp_path)  # fmt: skip
    assert out.returncode == 0, out.stdout + out.stderr
