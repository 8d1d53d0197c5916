"""Proxies from the environment follow Go's rules in every FleetMind HTTP client
(:mod:`fleetmind.http_client`), as ``fleetmind graph build`` (the Kubernetes client) and Go programs
(Prometheus, kubectl) do: ``golang.org/x/net/http/httpproxy``,
https://pkg.go.dev/golang.org/x/net/http/httpproxy#Config (``NO_PROXY`` entries: host names and
domain suffixes, IP addresses, CIDR networks, each with an optional port, ``*``; ``localhost`` and
loopback addresses never proxied; ``HTTPS_PROXY`` for https, ``HTTP_PROXY`` for http, the upper-case
name first, ``getEnvAny``).

httpx's own reading of the environment ignored CIDR entries, proxied loopback addresses (the
default DCGM URL ``http://127.0.0.1:9400/metrics`` went to the corporate proxy), and an IPv6 CIDR
(``fd00::/8``, routine in dual-stack clusters) made every client raise ``httpx.InvalidURL: Invalid
port: ':'`` when made (encode/httpx#3221): ``fleetmind serve --telemetry prometheus`` stopped at
start with a traceback.

The requests here go through real sockets: a fake proxy on loopback records what reaches it, and
every other connection (``socket.create_connection``, which httpcore's sync backend calls) is sent
to a target server on loopback, so that ``10.96.0.10`` or ``[fd00::10]`` need no network.
"""

from __future__ import annotations

import http.server
import socket
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from fastapi.testclient import TestClient

from fleetmind.cli import main
from fleetmind.http_client import ProxyRules, check_proxies
from fleetmind.http_client import client as proxied_client
from fleetmind.serving.settings import Settings, get_settings

PROXY_ENV = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY", "REQUEST_METHOD")
DUAL_STACK = "localhost,127.0.0.1,10.0.0.0/8,fd00::/8,.svc,example.org:8080"


@pytest.fixture(autouse=True)
def _no_proxy_of_the_machine(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in PROXY_ENV:
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.lower(), raising=False)


class _Recorder(http.server.BaseHTTPRequestHandler):
    """Answers any GET or POST with 200 and its server's name, recording the request target (an
    absolute URL when it reached the proxy) and the Host header."""

    def _answer(self) -> None:
        length = int(self.headers.get("content-length") or 0)
        self.rfile.read(length)
        self.server.seen.append((self.path, self.headers.get("host")))  # type: ignore[attr-defined]
        body = self.server.name.encode()  # type: ignore[attr-defined]
        self.send_response(200)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = _answer

    def log_message(self, *args: Any) -> None:
        pass


def _server(name: str) -> http.server.HTTPServer:
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Recorder)
    srv.seen = []  # type: ignore[attr-defined]
    srv.name = name  # type: ignore[attr-defined]
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv


@pytest.fixture
def network(monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, Any]]:
    """A proxy and a target on loopback; every connection not to the proxy reaches the target,
    its address recorded in ``dialled``."""
    proxy, target = _server("proxy"), _server("direct")
    dialled: list[tuple[str, int]] = []
    real = socket.create_connection
    proxy_addr = ("127.0.0.1", proxy.server_port)

    def connect(address: tuple[str, int], *args: Any, **kwargs: Any) -> socket.socket:
        if tuple(address) == proxy_addr:
            return real(address, *args, **kwargs)
        dialled.append((address[0], address[1]))
        return real(("127.0.0.1", target.server_port), *args, **kwargs)

    monkeypatch.setattr(socket, "create_connection", connect)
    monkeypatch.setenv("HTTP_PROXY", f"http://127.0.0.1:{proxy.server_port}")
    yield {"proxy": proxy, "target": target, "dialled": dialled}
    for srv in (proxy, target):
        srv.shutdown()
        srv.server_close()


def _telemetry() -> Any:
    from fleetmind.serving.telemetry.prometheus import http_client

    return http_client(2.0)


def _notify() -> Any:
    from fleetmind.serving.notify import post_client

    return post_client()


def _fetch() -> Any:
    from fleetmind.data.fetch import _client

    return _client(2.0)


def _replay() -> Any:
    from fleetmind.cli.replay import _client

    return _client("http://127.0.0.1:1")


CLIENTS: dict[str, Callable[[], Any]] = {
    "telemetry": _telemetry,
    "notify": _notify,
    "data-fetch": _fetch,
    "replay": _replay,
}

ROUTES = [
    # (NO_PROXY, URL, the way it must go)
    (DUAL_STACK, "http://127.0.0.1:9400/metrics", "direct"),  # the default DCGM exporter URL
    (DUAL_STACK, "http://127.0.0.2:9400/metrics", "direct"),  # loopback, though not listed
    (DUAL_STACK, "http://[::1]:9400/metrics", "direct"),
    (DUAL_STACK, "http://localhost:9093/api/v2/alerts", "direct"),
    (DUAL_STACK, "http://10.96.0.10:9090/api/v1/query", "direct"),  # IPv4 CIDR
    (DUAL_STACK, "http://[fd00::10]:9090/api/v1/query", "direct"),  # IPv6 CIDR
    (DUAL_STACK, "http://prometheus.monitoring.svc:9090/api/v1/query", "direct"),  # suffix
    (DUAL_STACK, "http://example.org:8080/hook", "direct"),  # the entry's port
    (DUAL_STACK, "http://example.org/hook", "proxy"),  # another port than the entry's
    (DUAL_STACK, "http://192.0.2.7:9090/api/v1/query", "proxy"),
    (DUAL_STACK, "http://[2001:db8::7]:9090/api/v1/query", "proxy"),
    ("10.0.0.0/8,.svc", "http://127.0.0.1:9400/metrics", "direct"),
    ("10.0.0.0/8,.svc", "http://10.96.0.10:9090/api/v1/query", "direct"),
    ("10.0.0.0/8,.svc", "http://[fd00::10]:9090/api/v1/query", "proxy"),
]


@pytest.mark.parametrize("which", sorted(CLIENTS))
@pytest.mark.parametrize(("no_proxy", "url", "way"), ROUTES)
def test_each_request_goes_the_way_go_sends_it(
    network: dict[str, Any],
    monkeypatch: pytest.MonkeyPatch,
    which: str,
    no_proxy: str,
    url: str,
    way: str,
) -> None:
    monkeypatch.setenv("NO_PROXY", no_proxy)
    with CLIENTS[which]() as c:
        r = c.post(url, json={}) if which == "notify" else c.get(url)
    assert (r.status_code, r.text) == (200, way)
    if way == "proxy":
        # (the request target: httpcore leaves an IPv6 host's brackets out of it; Host keeps them)
        assert [host for _path, host in network["proxy"].seen] == [urlsplit(url).netloc]
        assert network["dialled"] == []
    else:
        assert network["proxy"].seen == []
        parts = urlsplit(url)
        assert network["dialled"] == [(parts.hostname, parts.port or 80)]


@pytest.mark.parametrize(
    ("env", "url", "proxy"),
    [
        ({"HTTPS_PROXY": "http://p:1"}, "https://example.com/", "http://p:1"),
        ({"HTTPS_PROXY": "http://p:1"}, "http://example.com/", None),  # https only
        ({"HTTP_PROXY": "p:3128"}, "http://example.com/", "http://p:3128"),  # no scheme: http
        ({"HTTP_PROXY": "http://UP:1", "http_proxy": "http://low:1"}, "http://a/", "http://UP:1"),
        ({"http_proxy": "http://low:1"}, "http://a/", "http://low:1"),
        ({"ALL_PROXY": "http://all:1"}, "https://a/", "http://all:1"),
        ({"ALL_PROXY": "http://all:1", "HTTPS_PROXY": "http://s:1"}, "https://a/", "http://s:1"),
        ({"HTTP_PROXY": "http://p:1", "NO_PROXY": "*"}, "http://a/", None),
        ({"HTTP_PROXY": "http://p:1", "NO_PROXY": "foo.com"}, "http://foo.com/", None),
        ({"HTTP_PROXY": "http://p:1", "NO_PROXY": "foo.com"}, "http://bar.foo.com/", None),
        ({"HTTP_PROXY": "http://p:1", "NO_PROXY": "foo.com"}, "http://barfoo.com/", "http://p:1"),
        ({"HTTP_PROXY": "http://p:1", "NO_PROXY": ".y.com"}, "http://y.com/", "http://p:1"),
        ({"HTTP_PROXY": "http://p:1", "NO_PROXY": ".y.com"}, "http://x.y.com/", None),
        ({"HTTP_PROXY": "http://p:1", "NO_PROXY": "*.y.com"}, "http://x.y.com/", None),
        ({"HTTP_PROXY": "http://p:1", "NO_PROXY": "Foo.COM"}, "http://FOO.com/", None),
        ({"HTTP_PROXY": "http://p:1", "NO_PROXY": "[fd00::1]:80"}, "http://[fd00::1]/", None),
        ({"HTTP_PROXY": "http://p:1", "NO_PROXY": "fd00::1"}, "http://[FD00:0::1]:9/", None),
        (
            {"HTTP_PROXY": "http://p:1", "NO_PROXY": "10.0.0.1:80"},
            "http://10.0.0.1:81/",
            "http://p:1",
        ),
        ({"HTTP_PROXY": "http://p:1", "NO_PROXY": "10.0.0.0/8"}, "http://11.0.0.1/", "http://p:1"),
        ({"HTTP_PROXY": "http://p:1", "NO_PROXY": "10.0.0.0/8"}, "http://[::ffff:10.1.2.3]/", None),
        ({"HTTP_PROXY": "http://p:1", "NO_PROXY": "not/a/cidr, ,"}, "http://a/", "http://p:1"),
        ({"HTTP_PROXY": "http://p:1"}, "http://[::ffff:127.0.0.1]/", None),  # loopback
    ],
)
def test_rules_of_go_httpproxy(env: dict[str, str], url: str, proxy: str | None) -> None:
    assert ProxyRules.from_environment(env).proxy_for(url) == proxy


def test_a_custom_ca_from_ssl_cert_file_is_still_trusted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``trust_env=False`` must not drop the CA bundle ``SSL_CERT_FILE`` names (httpx's
    ``create_ssl_context`` reads it only with ``trust_env``)."""
    import datetime as dt

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "corp-root-ca")])
    now = dt.datetime(2025, 1, 1, tzinfo=dt.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(1)
        .not_valid_before(now)
        .not_valid_after(now + dt.timedelta(days=3650))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    bundle = tmp_path / "corp.pem"
    bundle.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    monkeypatch.setenv("SSL_CERT_FILE", str(bundle))
    monkeypatch.setenv("HTTPS_PROXY", "http://127.0.0.1:1")
    with proxied_client() as c:
        for transport in c._transport.transports:
            cas = transport._pool._ssl_context.get_ca_certs()
            assert [dict(x[0] for x in ca["subject"])["commonName"] for ca in cas] == [
                "corp-root-ca"
            ]


def test_an_ipv6_cidr_in_no_proxy_does_not_stop_the_service(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The lifespan makes the Prometheus client: it raised ``InvalidURL: Invalid port: ':'``."""
    from fleetmind.serving.app import create_app

    monkeypatch.setenv("HTTP_PROXY", "http://127.0.0.1:1")
    monkeypatch.setenv("NO_PROXY", "localhost,127.0.0.1,10.0.0.0/8,fd00::/8,.svc")
    settings = Settings(
        database_url=f"sqlite:///{tmp_path}/t.db",
        rca_model="baseline:upstream-coverage",
        placement_model="heuristic:builtin-bestfit",
        incident_worker=False,
        telemetry="prometheus",
        prometheus_url="http://127.0.0.1:9",
    )
    with TestClient(create_app(settings), raise_server_exceptions=False) as c:
        assert c.get("/healthz").status_code == 200


def test_doctor_with_an_ipv6_cidr_in_no_proxy_reaches_prometheus(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    with socket.socket() as dead:  # a port nobody listens on: refused at once
        dead.bind(("127.0.0.1", 0))
        port = dead.getsockname()[1]
    monkeypatch.setenv("HTTP_PROXY", "http://127.0.0.1:1")
    monkeypatch.setenv("NO_PROXY", "fd00::/8")
    main(["doctor", "--prometheus", f"http://127.0.0.1:{port}"])
    err = capsys.readouterr().err
    assert "Connection refused" in err and "Invalid port" not in err, err


@pytest.mark.parametrize(
    "value", ["http://u:Zm9v/s3cr3tpw@proxy:3128", "ftp://127.0.0.1:21"], ids=["slash", "ftp"]
)
def test_an_unusable_proxy_stops_serve_with_one_line(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    value: str,
) -> None:
    import uvicorn

    monkeypatch.setattr(uvicorn, "run", lambda *a, **k: pytest.fail("uvicorn started"))
    for var in ("API", "READ", "INGEST", "SCHEDULE", "ADMIN"):
        monkeypatch.delenv(f"FLEETMIND_{var}_TOKEN", raising=False)
    db = tmp_path / "serve.db"
    monkeypatch.setenv("FLEETMIND_DATABASE_URL", f"sqlite:///{db}")
    monkeypatch.setenv("HTTP_PROXY", value)
    try:
        assert main(["serve", "--port", "1"]) == 2
    finally:
        get_settings.cache_clear()
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    assert len(err) == 1 and "cannot use the proxy in HTTP_PROXY=" in err[0], err
    assert "s3cr3tpw" not in err[0]
    with pytest.raises(Exception, match="proxy"):
        check_proxies({"HTTPS_PROXY": value})
    assert not db.exists()
