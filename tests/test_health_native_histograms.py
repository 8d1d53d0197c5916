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


def _answer_one(
    promql: str, stored: dict[str, str | None], idle: set[str] = frozenset()
) -> list[dict[str, Any]]:
    """The vector of one expression (no ``or``) over clusters storing ``HIST`` as ``stored``, and
    with classic series that saw no request in the window in ``idle`` (their rate is 0, their
    quantile NaN: ``histogram_quantile`` of all-zero buckets, ``docs/querying/functions.md``)."""
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
    out = [{"metric": {"cluster": c}, "value": [now, str(CLUSTERS[c][col])]} for c in here]
    if form == "classic":  # JSON renders NaN as the string "NaN" (docs/querying/api.md)
        out += [{"metric": {"cluster": c}, "value": [now, "NaN" if col < 2 else "0"]}
                for c in sorted(idle) if c not in here]  # fmt: skip
    return out


def _answer(
    promql: str, stored: dict[str, str | None], idle: set[str] = frozenset()
) -> list[dict[str, Any]]:
    """``a or b``: the elements of ``a``, then those of ``b`` whose label set ``a`` lacks; a part
    ``(x >= 0)`` or ``(x > 0)`` keeps the samples of ``x`` for which the comparison holds (NaN
    compares false: ``docs/querying/operators.md``, comparison binary operators)."""
    out: list[dict[str, Any]] = []
    for part in promql.split(" or "):
        seen = [r["metric"] for r in out]
        cmp = re.fullmatch(r"\((.*) (>=|>) 0\)", part)
        got = _answer_one(cmp.group(1) if cmp else part, stored, idle)
        if cmp:
            keep = (lambda v: v >= 0) if cmp.group(2) == ">=" else (lambda v: v > 0)
            got = [r for r in got if keep(float(r["value"][1]))]
        out += [r for r in got if r["metric"] not in seen]
    return out


def _refusal(style: str, promql: str) -> tuple[int, dict[str, Any]]:
    """How a backend without ``histogram_count`` refuses ``promql``: ``prometheus`` (before 2.40:
    400 ``bad_data``, ``web/api/v1/api.go`` ``invalidParamError``, ``promql/parser``'s ``unknown
    function with name %q``) or ``victoriametrics`` (422, ``app/vmselect/prometheus``'s ``error
    when executing query=%q for (time=..., step=...): %s`` around github.com/VictoriaMetrics/metricsql
    ``parser.go`` ``checkSupportedFunctions``' ``unsupported function %q``)."""
    if style == "victoriametrics":
        return 422, {
            "status": "error", "errorType": "422",
            "error": f"error when executing query={json.dumps(promql)} for "
            '(time=1765000000000, step=300000): unsupported function "histogram_count"',
        }  # fmt: skip
    col = promql.index("histogram_count(") + 1
    return 400, {
        "status": "error", "errorType": "bad_data",
        "error": f'invalid parameter "query": 1:{col}: parse error: unknown '
        'function with name "histogram_count"',
    }  # fmt: skip


class FakePrometheus:
    """``/api/v1/query`` over HTTP for clusters storing ``HIST`` as ``stored[cluster]``
    (``"classic"``, ``"native"`` or ``None``: no histogram)."""

    def __init__(self, stored: dict[str, str | None]) -> None:
        self.stored = stored
        self.asked: list[str] = []
        self.refuse_histogram_count = ""  # "prometheus" (before 2.40) or "victoriametrics"
        self.idle: set[str] = set()  # clusters with classic series but no request in the window
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def _reply(self, form: dict[str, list[str]]) -> None:
                promql = form["query"][0]
                fake.asked.append(promql)
                result = _answer(promql, fake.stored, fake.idle)
                code, body = 200, {"status": "success",
                                   "data": {"resultType": "vector", "result": result}}  # fmt: skip
                if fake.refuse_histogram_count and "histogram_count(" in promql:
                    code, body = _refusal(fake.refuse_histogram_count, promql)
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


@pytest.mark.parametrize("backend", ["prometheus", "victoriametrics"])
@pytest.mark.parametrize("prom", [MIXED], indirect=True)
def test_a_backend_without_histogram_count_gets_the_classic_rate(prom: Any, backend: str) -> None:
    """An older Prometheus (400 ``unknown function``) and VictoriaMetrics (422 ``unsupported
    function``) both refuse ``histogram_count``: the classic rate answers instead, and the next
    polls of that source send it at once (three queries, not four)."""
    fake, src = prom
    fake.refuse_histogram_count = backend
    classic_rate = form_queries(HIST, "classic")["request_rate"]
    for poll in range(3):
        fake.asked.clear()
        sig: dict[str, Any] = {}
        assert add_latency(sig, src.query, HIST) is True
        assert sig["c0"].request_rate == 12.0
        assert (sig["c1"].p99_latency_s, sig["c1"].request_rate) == (0.2, None)
        assert fake.asked.count(classic_rate) == 1
        assert len(fake.asked) == (4 if poll == 0 else 3)  # the refusal answers at once
        assert not any("histogram_count(" in q for q in fake.asked[:3] if poll)


@pytest.mark.parametrize("prom", [{"c0": "native", "c1": "classic", "c2": None}], indirect=True)
def test_an_idle_classic_histogram_hides_no_native_answer(prom: Any) -> None:
    """``or`` keeps its left sample even when it is NaN (the quantile of a classic histogram with
    no request in the window) or 0 (its rate): c0 has idle classic series beside its native one
    and answers with the native values; c2 has idle classic series only and still reports a rate
    of 0 with no latency, as before."""
    fake, src = prom
    fake.idle = {"c0", "c2"}
    got = _refresh(HealthModel(1.0), src)
    assert got == {**CLUSTERS, "c2": (None, None, 0.0)}


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
    ``b``, and ``c`` with no request in the window) must give both the same samples: ``c``'s rate
    is 0 in both, and its quantile, NaN in the classic-only query (dropped when read), is absent."""
    new, old = latency_queries(HIST), form_queries(HIST, "classic")
    rules = [r for k in new for r in ({"record": f"new:{k}", "expr": new[k]},
                                      {"record": f"old:{k}", "expr": old[k]})]  # fmt: skip
    (tmp / "rules.yml").write_text(yaml.safe_dump({"groups": [{"name": "h", "rules": rules}]}))
    series = []
    for cluster, replicas, per_min, grow in (
        ("a", ("0", "1"), (3, 7, 9), True), ("b", ("",), (1, 4, 10), True),
        ("c", ("",), (2, 5, 6), False),
    ):  # fmt: skip
        for rep in replicas:
            labels = f'cluster="{cluster}"' + (f',prometheus_replica="{rep}"' if rep else "")
            for le, n in zip(("0.1", "0.5", "+Inf", "count"), (*per_min, per_min[2]), strict=True):
                values = f"0+{n}x20" if grow else f"{n}x20"
                name = f'{HIST}_bucket{{{labels},le="{le}"}}' if le != "count" else (
                    f"{HIST}_count{{{labels}}}")  # fmt: skip
                series.append({"series": name, "values": values})
    busy = [{"labels": f'{{cluster="{c}"}}', "value": 0} for c in ("a", "b")]
    checks = [{"expr": f"new:{k} - old:{k}", "eval_time": "10m",
               "exp_samples": busy if k != "request_rate" else [
                   *busy, {"labels": '{cluster="c"}', "value": 0}]} for k in new]  # fmt: skip
    checks.append({"expr": "round(new:request_rate * 600)", "eval_time": "10m", "exp_samples": [
        {"labels": '{cluster="a"}', "value": 90},  # requests per 10 minutes: 9 a minute
        {"labels": '{cluster="b"}', "value": 100},
        {"labels": '{cluster="c"}', "value": 0},  # idle: still answers 0
    ]})  # fmt: skip
    for k in ("p99_latency_s", "p95_latency_s"):  # idle: NaN before, absent now
        checks.append({"expr": f'count(old:{k}{{cluster="c"}} != old:{k}{{cluster="c"}})',
                       "eval_time": "10m", "exp_samples": [{"labels": "{}", "value": 1}]})  # fmt: skip
        checks.append({"expr": f'absent(new:{k}{{cluster="c"}})', "eval_time": "10m",
                       "exp_samples": [{"labels": '{cluster="c"}', "value": 1}]})  # fmt: skip
    test = {"rule_files": ["rules.yml"], "evaluation_interval": "1m",
            "tests": [{"interval": "1m", "input_series": series, "promql_expr_test": checks}]}  # fmt: skip
    (tmp / "test.yml").write_text(yaml.safe_dump(test))
    return tmp / "test.yml"


@pytest.mark.skipif(shutil.which("promtool") is None, reason="needs promtool")
def test_promtool_parses_the_queries_and_classic_answers_are_unchanged(tmp_path: Path) -> None:
    """Prometheus's own engine (promtool, 2.42 on Debian) parses the ``or`` queries, accepts
    ``histogram_count`` over a store with only classic series, and gives the classic-only
    queries' samples, value for value, with an HA pair counted once; an idle cluster keeps its
    rate of 0 and, as before once read, no quantile (the classic NaN is filtered out)."""
    test = _promtool_case(tmp_path)
    out = subprocess.run(["promtool", "test", "rules", str(test)], capture_output=True,
                         text=True, timeout=60, cwd=tmp_path)  # fmt: skip
    assert out.returncode == 0, out.stdout + out.stderr
