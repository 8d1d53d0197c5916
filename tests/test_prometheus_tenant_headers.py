"""Extra headers for the Prometheus a telemetry source queries (``FLEETMIND_PROMETHEUS_HEADERS``),
what a 401/403 says, and what a timeout says.

The fake Mimir models Grafana Mimir's query frontend at its defaults (multi-tenant): a request
without ``X-Scope-OrgID`` gets ``401`` with the text body ``no org id`` (weaveworks/common
``user/grpc.go``/``user/http.go``, ``ErrNoOrgID = errors.New("no org id")``, answered by Mimir's
``pkg/util/middleware`` auth as ``http.Error(w, err.Error(), http.StatusUnauthorized)``; Mimir docs
"About authentication and authorization"); with it, the Prometheus API's instant-query answer
(prometheus.io/docs/prometheus/latest/querying/api/, "Instant queries"). The fake Amazon Managed
Service for Prometheus answers an unsigned request as API Gateway does: ``403`` with
``{"message": "Missing Authentication Token"}`` and ``x-amzn-ErrorType``.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import httpx
import pytest
from pydantic import ValidationError

from fleetmind.cli import main
from fleetmind.data.errors import ConfigError, NotAvailableError
from fleetmind.serving.settings import Settings, parse_prometheus_headers
from fleetmind.serving.telemetry.doctor import diagnose
from fleetmind.serving.telemetry.prometheus import (
    PrometheusApiSource,
    PrometheusSource,
    http_problem,
)
from tests.http_helpers import serve

TENANT = "team-a"
SECRET = "s3cr3t-Key-value"  # a header value that must never be printed
VECTOR = {"status": "success", "data": {"resultType": "vector", "result": [
    {"metric": {"__name__": "up", "job": "mimir"}, "value": [1765000000.0, "1"]}]}}  # fmt: skip
EMPTY = {"status": "success", "data": {"resultType": "vector", "result": []}}


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("HEADERS", "BEARER_TOKEN_FILE", "CA_FILE", "URL"):
        monkeypatch.delenv(f"FLEETMIND_PROMETHEUS_{name}", raising=False)
    monkeypatch.delenv("FLEETMIND_GRAPH", raising=False)
    monkeypatch.delenv("FLEETMIND_TELEMETRY_MAX_AGE_S", raising=False)


class _Mimir(BaseHTTPRequestHandler):
    seen: list[str | None] = []

    def do_POST(self) -> None:
        form = self.rfile.read(int(self.headers.get("content-length") or 0)).decode()
        org = self.headers.get("X-Scope-OrgID")
        type(self).seen.append(org)
        if not self.path.startswith("/prometheus/api/v1/query"):
            return self._send(404, b"404 page not found\n", "text/plain")
        if not org:
            return self._send(401, b"no org id\n", "text/plain; charset=utf-8")
        body = VECTOR if form.startswith("query=up&") else EMPTY
        self._send(200, json.dumps(body).encode(), "application/json")

    def _send(self, code: int, body: bytes, kind: str) -> None:
        self.send_response(code)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def mimir() -> Iterator[str]:
    _Mimir.seen = []
    with serve(_Mimir) as url:
        yield url


def _source(url: str, **kw: Any) -> PrometheusApiSource:
    return PrometheusApiSource(url + "/prometheus", timeout_s=5.0, **kw)


# ---------------------------------------------------------------- Mimir's tenant
def test_mimir_answers_a_query_that_carries_the_tenant_header(mimir: str) -> None:
    src = _source(mimir, headers=parse_prometheus_headers(f"X-Scope-OrgID={TENANT}"))
    try:
        assert src.query("up") == [("up", {"__name__": "up", "job": "mimir"}, 1.0)]
    finally:
        src.close()
    assert _Mimir.seen == [TENANT]


def test_without_the_tenant_the_401_says_what_mimir_said_and_names_the_setting(
    mimir: str,
) -> None:
    src = _source(mimir)
    try:
        with pytest.raises(NotAvailableError) as err:
            src.query("up")
    finally:
        src.close()
    msg = str(err.value)
    assert "HTTP 401" in msg and "(server said: no org id)" in msg
    assert "FLEETMIND_PROMETHEUS_HEADERS=X-Scope-OrgID=" in msg


def test_doctor_sends_the_headers_of_the_environment(
    mimir: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv(
        "FLEETMIND_PROMETHEUS_HEADERS", f"X-Scope-OrgID={TENANT}, X-Api-Key={SECRET}"
    )
    # no DCGM or kube-state-metrics series there: findings with errors (1), not unreachable (2)
    assert main(["doctor", "--prometheus", mimir + "/prometheus", "--timeout", "5"]) == 1
    assert _Mimir.seen and set(_Mimir.seen) == {TENANT}
    out = capsys.readouterr()
    assert SECRET not in out.out + out.err


def test_doctor_without_the_tenant_is_one_line_naming_the_setting(
    mimir: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["doctor", "--prometheus", mimir + "/prometheus", "--timeout", "5"]) == 2
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    assert len(err) == 1 and "no org id" in err[0] and "FLEETMIND_PROMETHEUS_HEADERS" in err[0]


def test_headers_go_with_the_bearer_token_and_with_exporter_scrapes(tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("TOKEN-1\n")
    got: list[httpx.Headers] = []

    def handler(request: httpx.Request) -> httpx.Response:
        got.append(request.headers)
        if request.url.path.endswith("/metrics"):
            return httpx.Response(200, text="")
        return httpx.Response(200, json=VECTOR)

    headers = {"X-Scope-OrgID": TENANT}
    api = PrometheusApiSource("http://prom.test", bearer_token_file=str(token), headers=headers)
    exporter = PrometheusSource("http://gpu-0:9400/metrics", headers=headers)
    for src in (api, exporter):
        src._client = httpx.Client(transport=httpx.MockTransport(handler))
    try:
        api.query("up")
        exporter.collect()
    finally:
        api.close()
        exporter.close()
    assert [h.get("x-scope-orgid") for h in got] == [TENANT, TENANT]
    assert got[0]["authorization"] == "Bearer TOKEN-1"
    assert got[0]["content-type"] == "application/x-www-form-urlencoded"


# ---------------------------------------------------------------- other 401/403 bodies
def test_amazon_managed_prometheus_403_points_at_the_sigv4_proxy() -> None:
    resp = httpx.Response(
        403,
        json={"message": "Missing Authentication Token"},
        headers={"x-amzn-ErrorType": "MissingAuthenticationTokenException"},
    )
    msg = http_problem(resp, resp.json())
    assert msg is not None
    assert "(server said: Missing Authentication Token)" in msg and "aws-sigv4-proxy" in msg


def test_a_401_body_is_shown_short_and_printable_only() -> None:
    resp = httpx.Response(401, text="denied\x1b[31m\r\n" + "x" * 500)
    msg = http_problem(resp, None)
    assert msg is not None
    said = msg.split("(server said: ", 1)[1].split("):", 1)[0]
    assert said.startswith("denied [31m x") and len(said) <= 200 and said.endswith("...")
    assert "\x1b" not in msg and "\n" not in msg
    assert "FLEETMIND_PROMETHEUS_HEADERS" in msg  # among the usual credentials
    empty = http_problem(httpx.Response(403, text=""), None)
    assert empty is not None and "server said" not in empty


# ---------------------------------------------------------------- bad settings
@pytest.mark.parametrize(
    ("value", "says"),
    [
        (f"X-Scope-OrgID: {SECRET}", "pair 1 of 1 is not Name=value"),
        (f"X Api Key={SECRET}", "not an HTTP header name"),
        (f"X-Api-Key={SECRET}\r\nInjected: 1", "visible ASCII"),
        ("X-Scope-OrgID=", "the value is empty"),
        (f"Host={SECRET}", "Host is written by the HTTP client"),
        (f"content-type={SECRET}", "content-type is written by the HTTP client"),
        (f"X-A={SECRET},x-a={SECRET}", "x-a is named twice"),
    ],
)
def test_bad_headers_are_refused_in_one_line_without_the_value(value: str, says: str) -> None:
    with pytest.raises(ValidationError) as err:
        Settings(prometheus_headers=value)
    msg = err.value.errors(include_url=False)[0]["msg"]
    assert says in msg and SECRET not in msg and "\n" not in msg


def test_authorization_beside_another_credential_is_ambiguous(tmp_path: Path) -> None:
    auth = f"Authorization=Basic {SECRET}"
    assert Settings(prometheus_headers=auth).prometheus_header_map() == {
        "Authorization": f"Basic {SECRET}"
    }
    for other in (
        {"prometheus_bearer_token_file": str(tmp_path / "token")},
        {"prometheus_url": "http://user:pw@prom.test:9090"},
    ):
        with pytest.raises(ValidationError) as err:
            Settings(prometheus_headers=auth, **other)
        msg = err.value.errors(include_url=False)[0]["msg"]
        assert "ambiguous" in msg and SECRET not in msg


def test_blank_headers_are_unset() -> None:
    assert Settings(prometheus_headers=" ").prometheus_headers is None
    assert Settings().prometheus_header_map() == {}
    assert parse_prometheus_headers("A=1=2, B = x y ,") == {"A": "1=2", "B": "x y"}


def test_doctor_refuses_bad_headers_in_one_line_without_the_value(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("FLEETMIND_PROMETHEUS_HEADERS", f"X-Api-Key={SECRET}\nX: y")
    with pytest.raises(ConfigError, match="FLEETMIND_PROMETHEUS_HEADERS"):
        diagnose("http://127.0.0.1:9", timeout_s=1)  # refused before any query
    assert main(["doctor", "--prometheus", "http://127.0.0.1:9"]) == 2
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    assert len(err) == 1 and "FLEETMIND_PROMETHEUS_HEADERS" in err[0] and SECRET not in err[0]


# ---------------------------------------------------------------- timeouts
@pytest.fixture
def silent() -> Iterator[str]:
    """Accepts a query and does not answer until the test ends."""
    done = threading.Event()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            done.wait(10)

        def log_message(self, *args: object) -> None:
            pass

    with serve(Handler) as url:
        try:
            yield url
        finally:
            done.set()  # (before the shutdown, which waits for the handler)


def test_a_timeout_says_how_long_and_which_setting(silent: str) -> None:
    src = PrometheusApiSource(silent, timeout_s=0.25)
    try:
        with pytest.raises(NotAvailableError) as err:
            src.query("up")
    finally:
        src.close()
    msg = str(err.value)
    assert "no answer within 0.25 s" in msg
    assert "FLEETMIND_TELEMETRY_TIMEOUT_S" in msg and "--timeout" in msg


def test_the_service_source_gets_the_headers() -> None:
    from fleetmind.serving.telemetry.base import make_source

    settings = Settings(
        telemetry="prometheus",
        prometheus_url="http://prom.test:9090",
        prometheus_headers=f"X-Scope-OrgID={TENANT}",
    )
    src = make_source(settings)
    try:
        assert src.headers == {"X-Scope-OrgID": TENANT}
    finally:
        src.close()


def test_serve_names_bad_headers_without_their_value(monkeypatch: pytest.MonkeyPatch) -> None:
    from fleetmind.cli.serve import _settings_error

    monkeypatch.setenv("FLEETMIND_PROMETHEUS_HEADERS", f"X-Api-Key={SECRET}\nX: y")
    with pytest.raises(ValidationError) as err:
        Settings()
    line = _settings_error(err.value)
    assert "FLEETMIND_PROMETHEUS_HEADERS (value hidden)" in line and SECRET not in line


def test_serve_names_the_authorization_conflict_in_words_its_masking_keeps(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """serve masks anything shaped like URL credentials in a settings error: the conflict's
    message must not be shaped so (it read "the ***@ of FLEETMIND_PROMETHEUS_URL")."""
    from fleetmind.cli.serve import _settings_error

    monkeypatch.setenv("FLEETMIND_PROMETHEUS_HEADERS", "Authorization=Bearer sekrit")
    monkeypatch.setenv("FLEETMIND_PROMETHEUS_URL", "http://u:p@prom.test:9090")
    with pytest.raises(ValidationError) as err:
        Settings()
    line = _settings_error(err.value)
    assert "user name and password in FLEETMIND_PROMETHEUS_URL" in line, line
    assert "***@" not in line and "sekrit" not in line
