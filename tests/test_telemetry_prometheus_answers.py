"""What the ``prometheus`` source does with answers that are not a plain successful vector: an
HTTP status with a body that is not JSON, a redirect, a partial answer with ``warnings``; NaN
readings in cluster health; exporter pods of the same name in two clusters; credentials (a bearer
token file that rotates, a CA bundle).

The API's shape: prometheus.io/docs/prometheus/latest/querying/api/ ("Format overview": JSON with
``status``, ``data``, ``errorType``, ``error`` and ``warnings``; 400 bad_data, 422 execution,
503 timeout). Thanos Query's ``partial_response`` parameter (thanos.io/tip/components/query.md,
"Partial Response"): with it true (the default) a store that fails is left out and named in
``warnings``; false fails the query.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from fleetmind.data.errors import ConfigError, NotAvailableError
from fleetmind.serving.health import HealthModel, fleet_health
from fleetmind.serving.telemetry.base import FleetSnapshot, GpuState, NodeState
from fleetmind.serving.telemetry.prometheus import PrometheusApiSource, build_nodes

VECTOR = {"status": "success", "data": {"resultType": "vector", "result": [
    {"metric": {"__name__": "up", "job": "x"}, "value": [1.0, "1"]}]}}  # fmt: skip


def source(handler: Any, **kw: Any) -> PrometheusApiSource:
    src = PrometheusApiSource("http://prom.test:9090", **kw)
    src._client = httpx.Client(transport=httpx.MockTransport(handler))
    return src


def refused(response: httpx.Response) -> str:
    src = source(lambda r: response)
    try:
        with pytest.raises(NotAvailableError) as err:
            src.query("up")
    finally:
        src.close()
    return str(err.value)


# ---------------------------------------------------------------- HTTP status before the body
@pytest.mark.parametrize(
    ("response", "says"),
    [
        # an auth proxy in front of Prometheus (oauth2-proxy, kube-rbac-proxy) answers in text
        (httpx.Response(401, text="Unauthorized\n"), "HTTP 401 Unauthorized"),
        (httpx.Response(403, text="Forbidden\n"), "HTTP 403 Forbidden"),
        # Prometheus with --web.route-prefix=/prom, asked at /api/v1/query: Go's
        # http.NotFound body, text/plain (seen from the real 2.42 binary)
        (httpx.Response(404, text="404 page not found\n"), "missing Prometheus's route prefix"),
        (
            httpx.Response(502, html="<html><body>502 Bad Gateway</body></html>"),
            "HTTP 502 Bad Gateway",
        ),
        (
            httpx.Response(302, headers={"Location": "http://prom.test:9090/prom/api/v1/query"}),
            "redirected to http://prom.test:9090/prom/api/v1/query",
        ),
        (  # a relative Location, from the query's URL, and the URL to set
            httpx.Response(301, headers={"Location": "/prom/api/v1/query"}),
            "FLEETMIND_PROMETHEUS_URL to http://prom.test:9090/prom",
        ),
        (httpx.Response(200, text="<html>a login page</html>"), "not a JSON object (text/plain)"),
        (
            httpx.Response(
                400,
                json={
                    "status": "error",
                    "errorType": "bad_data",
                    "error": "1:1: parse error: unexpected end of input",
                },
            ),
            "refused the query: 1:1: parse error",
        ),  # fmt: skip
    ],
)
def test_a_status_is_reported_as_such_not_as_malformed_json(
    response: httpx.Response, says: str
) -> None:
    msg = refused(response)
    assert says in msg and "prom.test:9090" in msg
    assert "malformed" not in msg and "\n" not in msg


# ---------------------------------------------------------------- partial answers
def test_every_query_asks_for_no_partial_response() -> None:
    """Thanos then fails a query a store did not answer; Prometheus ignores the parameter (the
    real-binary tests, e.g. tests/test_serving_telemetry_fleet.py, send it on every query)."""
    seen: list[bytes] = []

    def handler(r: httpx.Request) -> httpx.Response:
        seen.append(r.content)
        return httpx.Response(200, json=VECTOR)

    src = source(handler)
    try:
        assert src.query("up")[0][2] == 1.0
    finally:
        src.close()
    assert b"partial_response=false" in seen[0]


def test_a_partial_answer_is_unavailable_not_a_smaller_fleet() -> None:
    """A Thanos store down, with partial responses allowed: series are missing (a node's pod
    requests but not its allocatable CPU: wrong free CPU); the answer names the store."""
    body = {**VECTOR, "warnings": ["receive series from store sidecar-b: connection refused"]}
    msg = refused(httpx.Response(200, json=body))
    assert "partial result" in msg and "sidecar-b" in msg


def test_promql_annotations_are_not_partial_answers() -> None:
    """Prometheus puts notes on the expression in ``warnings`` too (``PromQL info:`` /
    ``PromQL warning:``, prometheus/prometheus util/annotations); no series is missing."""
    body = {**VECTOR, "warnings": ['PromQL info: metric might not be a counter: "x"']}
    src = source(lambda r: httpx.Response(200, json=body))
    try:
        assert len(src.query("up")) == 1
    finally:
        src.close()


# ---------------------------------------------------------------- NaN readings and health
def _cluster(util: float, used: float) -> list[NodeState]:
    gpus = [GpuState(i, "A100", util_pct=10.0, mem_used_mib=1000.0, mem_total_mib=80_000.0)
            for i in range(3)]  # fmt: skip
    gpus.append(GpuState(3, "A100", util_pct=util, mem_used_mib=used, mem_total_mib=80_000.0))
    return [NodeState("n1", "c0", gpus)]


@pytest.mark.parametrize(
    ("util", "used"), [(math.nan, 1000.0), (10.0, math.nan), (math.inf, 1000.0), (10.0, -math.inf)]
)
def test_one_nan_reading_does_not_saturate_the_cluster(util: float, used: float) -> None:
    """A NaN utilisation summed into the cluster made the mean NaN and ``min(1.0, nan)`` is 1.0:
    the cluster looked saturated and was avoided. The reading counts as missing instead, as a
    NaN framebuffer reading does for the free share (telemetry.base.free_milli_from_memory)."""
    snap = FleetSnapshot("prometheus", _cluster(util, used))
    (c,) = fleet_health(HealthModel(), snap).clusters
    (ref,) = fleet_health(HealthModel(), FleetSnapshot("x", _cluster(10.0, 1000.0))).clusters
    assert c.gpu_util == pytest.approx(0.10)
    assert c.vram_pressure == pytest.approx(ref.vram_pressure) == pytest.approx(1000 / 80_000)
    assert c.health is not None and c.health > 0.9


# ---------------------------------------------------------------- exporter pods per cluster
def test_exporter_pods_of_the_same_name_in_two_clusters_keep_their_own_nodes() -> None:
    """dcgm-exporter without hostNetwork reports its pod's name as Hostname; two clusters can each
    run a pod of that name: each cluster's series go to its own pod's node."""
    pod = "dcgm-exporter-x7k2p"
    ksm = [
        ("kube_pod_info", {"cluster": c, "namespace": "gpu-operator", "pod": pod, "node": node,
                           "created_by_kind": "DaemonSet"}, 1.0)
        for c, node in (("east", "east-gpu-1"), ("west", "west-gpu-9"))
    ]  # fmt: skip
    dcgm = [
        (name, {"cluster": c, "gpu": "0", "Hostname": pod, "modelName": "A100"}, v)
        for c in ("east", "west")
        for name, v in (("DCGM_FI_DEV_FB_USED", 0.0), ("DCGM_FI_DEV_FB_FREE", 80_000.0))
    ]
    nodes = {(n.cluster, n.name) for n in build_nodes(dcgm, ksm) if n.gpus}
    assert nodes == {("east", "east-gpu-1"), ("west", "west-gpu-9")}


# ---------------------------------------------------------------- credentials
def test_a_bearer_token_file_is_read_on_every_request(tmp_path: Path) -> None:
    """Kubernetes rotates a projected service-account token in place (about hourly): a token read
    once at start would be refused an hour later."""
    token = tmp_path / "token"
    token.write_text("first-token\n")
    auth: list[str | None] = []

    def handler(r: httpx.Request) -> httpx.Response:
        auth.append(r.headers.get("authorization"))
        return httpx.Response(200, json=VECTOR)

    src = source(handler, bearer_token_file=str(token))
    try:
        src.query("up")
        token.write_text("second-token")
        src.query("up")
        token.unlink()
        with pytest.raises(NotAvailableError, match="BEARER_TOKEN_FILE"):
            src.query("up")
    finally:
        src.close()
    assert auth == ["Bearer first-token", "Bearer second-token"]


def test_basic_auth_in_the_url_is_sent_and_never_shown() -> None:
    seen: list[str | None] = []

    def handler(r: httpx.Request) -> httpx.Response:
        seen.append(r.headers.get("authorization"))
        return httpx.Response(401, text="Unauthorized")

    src = PrometheusApiSource("http://fleet:s3cret@prom.test:9090")
    src._client = httpx.Client(transport=httpx.MockTransport(handler))
    try:
        with pytest.raises(NotAvailableError) as err:
            src.query("up")
    finally:
        src.close()
    assert seen == ["Basic ZmxlZXQ6czNjcmV0"]  # base64("fleet:s3cret")
    assert "s3cret" not in str(err.value) and "HTTP 401" in str(err.value)


@pytest.fixture(scope="module")
def tls_prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    """An https server with a certificate of a private CA, answering like Prometheus."""
    import json
    import ssl
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from test_serving_tls import make_pki

    pki = make_pki(tmp_path_factory.mktemp("pki"))

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            body = json.dumps(VECTOR).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.handle_error = lambda *a: None  # a client refusing the certificate hangs up
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(pki["fleetmind.crt"], pki["fleetmind.key"])
    server.socket = ctx.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"https://127.0.0.1:{server.server_address[1]}", pki["server-ca.crt"]
    finally:
        server.shutdown()
        server.server_close()


def test_a_ca_file_trusts_a_private_ca(
    tls_prometheus: tuple[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    url, ca = tls_prometheus
    monkeypatch.delenv("SSL_CERT_FILE", raising=False)
    monkeypatch.delenv("SSL_CERT_DIR", raising=False)
    plain = PrometheusApiSource(url, timeout_s=5.0)
    with pytest.raises(NotAvailableError, match="CERTIFICATE_VERIFY_FAILED"):
        plain.query("up")
    plain.close()
    trusting = PrometheusApiSource(url, timeout_s=5.0, ca_file=str(ca))
    assert trusting.query("up")[0][2] == 1.0
    trusting.close()
    # httpx honours SSL_CERT_FILE (its trust_env default) when no CA file is given
    monkeypatch.setenv("SSL_CERT_FILE", str(ca))
    from_env = PrometheusApiSource(url, timeout_s=5.0)
    assert from_env.query("up")[0][2] == 1.0
    from_env.close()


def test_a_ca_file_that_is_not_pem_is_a_config_error(tmp_path: Path) -> None:
    bad = tmp_path / "ca.pem"
    bad.write_text("not a certificate")
    with pytest.raises(ConfigError, match="FLEETMIND_PROMETHEUS_CA_FILE"):
        PrometheusApiSource("https://prom.test", ca_file=str(bad))
    with pytest.raises(ConfigError, match="FLEETMIND_PROMETHEUS_CA_FILE"):
        PrometheusApiSource("https://prom.test", ca_file=str(tmp_path / "missing.pem"))
