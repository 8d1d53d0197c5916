"""``fleetmind serve`` behind a TLS-terminating reverse proxy, and the /ui forms' origin check.

An ingress controller terminates TLS and forwards plain HTTP from its own pod address, saying
what the browser used in ``X-Forwarded-Proto`` (ingress-nginx sets it, with ``X-Forwarded-For``,
on every proxied request). uvicorn believes those headers only from ``forwarded_allow_ips``
(``--forwarded-allow-ips``; default ``$FORWARDED_ALLOW_IPS`` or 127.0.0.1 and ::1:
``uvicorn/config.py``, ``uvicorn/middleware/proxy_headers.py``, uvicorn 0.55), so from the
ingress's address the request stayed ``http``: the session cookies lost ``Secure`` and the
trailing-slash redirects pointed at ``http://``. ``FLEETMIND_TRUSTED_PROXIES`` now names the
proxies; a client it does not name still cannot spoof the scheme or its address.

The /ui forms compared ``Origin`` with ``Host`` as plain strings, so ``Host: x:443`` or a
differently-cased host refused a sign-in from ``https://x`` that the API's check accepts: origins
compare host case-insensitively with a scheme's default port the same as none (RFC 9110 section
4.2.3, RFC 6454 section 5). Both now use :func:`fleetmind.serving.origins.same_origin`.
"""

from __future__ import annotations

import argparse
import os
import threading
from pathlib import Path
from typing import Any

import httpx
import pytest
from serving_helpers import Server, wait_for
from starlette.requests import Request

from fleetmind.cli import serve as cli_serve
from fleetmind.data.errors import ConfigError
from fleetmind.serving.origin_guard import same_origin
from fleetmind.serving.settings import Settings
from fleetmind.serving.ui import auth

os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")

PORT = 18221
"""The ``fleetmind serve`` child's port (this test's range is 18220-18239)."""
DEFAULT_PORT = 18222
"""The in-process uvicorn of the default-trust test."""
TOKEN = "behind-proxy-token-0123456789"
PROXY = "127.0.0.5"
"""The ingress's address as the service sees it: a loopback address other than uvicorn's default
trusted 127.0.0.1, so that trust comes from the setting alone."""
STRANGER = "127.0.0.6"
"""A client the setting does not name (another pod, in a cluster)."""
BEARER = {"Authorization": f"Bearer {TOKEN}"}
FORWARDED = {"X-Forwarded-Proto": "https", "X-Forwarded-For": "203.0.113.7"}


@pytest.fixture(autouse=True)
def _clean_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # serve.run writes its options to the environment (FLEETMIND_BIND_HOST...): undone afterwards
    names = ("FLEETMIND_TRUSTED_PROXIES", "FORWARDED_ALLOW_IPS", "FLEETMIND_WORKERS")
    # (set first: delenv records nothing to undo for an unset variable, so run's writes stayed)
    for var in (*names, *cli_serve._ENV_OPTIONS.values()):
        monkeypatch.setenv(var, "")
        monkeypatch.delenv(var)
    for var in ("API", "READ", "INGEST", "SCHEDULE", "ADMIN"):
        monkeypatch.delenv(f"FLEETMIND_{var}_TOKEN", raising=False)
    monkeypatch.setenv("FLEETMIND_DATABASE_URL", f"sqlite:///{tmp_path / 'serve.db'}")


@pytest.fixture(autouse=True)
def _keep_sighup() -> Any:
    """``run`` installs a SIGHUP handler for a single-process server: give the test its own back."""
    import signal

    if not hasattr(signal, "SIGHUP"):
        yield
        return
    before = signal.getsignal(signal.SIGHUP)
    yield
    signal.signal(signal.SIGHUP, before)


def _args(**kw: Any) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers()
    cli_serve.register(sub, "serve", "serve")
    ns = parser.parse_args(["serve"])
    for k, v in kw.items():
        setattr(ns, k, v)
    return ns


def _client(source: str) -> httpx.Client:
    """A client whose connections come from ``source`` (a loopback address)."""
    return httpx.Client(transport=httpx.HTTPTransport(local_address=source), timeout=20)


def _csrf_cookie(r: httpx.Response) -> str:
    cookies = [v for k, v in r.headers.multi_items() if k.lower() == "set-cookie"]
    found = [c for c in cookies if c.startswith(auth.CSRF_COOKIE + "=")]
    assert found, cookies
    return found[0]


# ------------------------------------------------------------------ the setting and its plumbing
@pytest.mark.parametrize("workers", [1, 2])
def test_serve_hands_the_trusted_proxies_to_uvicorn(
    monkeypatch: pytest.MonkeyPatch, workers: int
) -> None:
    """``uvicorn.run`` gets them for one process and for ``--workers N`` alike: uvicorn's
    supervisor starts every worker from the same ``Config``, which wraps each worker's app in
    ``ProxyHeadersMiddleware(trusted_hosts=forwarded_allow_ips)`` (``uvicorn/config.py``,
    ``Config.load``)."""
    import uvicorn

    seen: list[dict[str, Any]] = []
    monkeypatch.setattr(uvicorn, "run", lambda *a, **kw: seen.append(kw))
    monkeypatch.setenv("FLEETMIND_TRUSTED_PROXIES", " 10.0.0.0/8, fd00::/8 ")
    assert cli_serve.run(_args(workers=workers)) == 0
    assert seen[-1]["workers"] == workers
    assert seen[-1]["forwarded_allow_ips"] == "10.0.0.0/8,::ffff:10.0.0.0/104,fd00::/8"
    monkeypatch.setenv("FLEETMIND_TRUSTED_PROXIES", "*")
    assert cli_serve.run(_args(workers=workers)) == 0
    assert seen[-1]["forwarded_allow_ips"] == "*"
    monkeypatch.delenv("FLEETMIND_TRUSTED_PROXIES")
    assert cli_serve.run(_args(workers=workers)) == 0
    assert seen[-1]["forwarded_allow_ips"] is None  # uvicorn's default: loopback only


def test_an_ipv4_proxy_on_a_dual_stack_socket_is_trusted(monkeypatch: pytest.MonkeyPatch) -> None:
    """``--host ::`` with ``--workers`` above 1: uvicorn binds the socket itself (``Config.bind_socket``)
    without ``IPV6_V6ONLY``, so on Linux an IPv4 ingress pod connects as ``::ffff:10.244.7.5``,
    which uvicorn's ``_TrustedHosts`` does not find in ``IPv4Network('10.244.7.0/24')``
    (``uvicorn/middleware/proxy_headers.py``): an IPv4 entry must match its mapped form too."""
    from uvicorn.middleware.proxy_headers import _TrustedHosts

    monkeypatch.setenv("FLEETMIND_TRUSTED_PROXIES", "10.244.7.0/24,10.0.0.5")
    trusted = _TrustedHosts(Settings().forwarded_allow_ips() or "")
    for addr in ("10.244.7.5", "::ffff:10.244.7.5", "10.0.0.5", "::ffff:10.0.0.5"):
        assert addr in trusted, addr
    for addr in ("10.244.8.5", "::ffff:10.244.8.5", "10.0.0.6", "::ffff:10.0.0.6", "::1"):
        assert addr not in trusted, addr


@pytest.mark.parametrize(
    "bad",
    [
        "10.0.0.1/8",  # host bits set: uvicorn kept it as a literal that matches nothing
        "10.0.0.0/33",
        "ingress-nginx",  # a name: uvicorn compares the client's address, never a name
        "*,10.0.0.0/8",  # '*' counts only alone
    ],
)
def test_a_bad_value_stops_serve_with_one_line(monkeypatch: pytest.MonkeyPatch, bad: str) -> None:
    import uvicorn

    monkeypatch.setattr(uvicorn, "run", lambda *a, **kw: pytest.fail("uvicorn started"))
    monkeypatch.setenv("FLEETMIND_TRUSTED_PROXIES", bad)
    with pytest.raises(ConfigError, match="FLEETMIND_TRUSTED_PROXIES") as err:
        cli_serve.run(_args())
    assert "\n" not in str(err.value)


# ------------------------------------------------------------------------ a real server, end to end
def test_a_trusted_proxy_makes_cookies_secure_and_redirects_https(tmp_path: Path) -> None:
    """``fleetmind serve`` with ``FLEETMIND_TRUSTED_PROXIES`` naming the proxy: its requests are
    https (``Secure`` cookies; trailing-slash redirects are relative, so they keep the scheme the
    browser used); the same headers from another client are ignored (no spoofing). The public URL stays ``http://``, so only the request's scheme can
    make the cookie ``Secure``."""
    env = {
        "FLEETMIND_DATABASE_URL": f"sqlite:///{tmp_path / 'proxy.db'}",
        "FLEETMIND_API_TOKEN": TOKEN,
        "FLEETMIND_RCA_MODEL": "baseline:upstream-coverage",
        "FLEETMIND_PLACEMENT_MODEL": "heuristic:builtin-bestfit",
        "FLEETMIND_INCIDENT_WORKER": "false",
        "FLEETMIND_PUBLIC_URL": f"http://127.0.0.1:{PORT}",
        "FLEETMIND_TRUSTED_PROXIES": f"{PROXY}/32",
    }
    base = f"http://127.0.0.1:{PORT}"
    server = Server(env, port=PORT, cli=True, log=tmp_path / "serve.log").start(timeout=120)
    try:
        with _client(PROXY) as proxy, _client(STRANGER) as stranger:
            r = proxy.get(base + "/ui/login", headers=FORWARDED)
            assert r.status_code == 200
            assert "secure" in _csrf_cookie(r).lower()
            r = proxy.get(base + "/api/v1/incidents/", headers={**FORWARDED, **BEARER})
            assert r.status_code == 307  # relative: it keeps whatever scheme and host were used
            assert r.headers["location"] == "/api/v1/incidents", r.headers["location"]

            r = stranger.get(base + "/ui/login", headers=FORWARDED)
            assert r.status_code == 200
            assert "secure" not in _csrf_cookie(r).lower()
            r = stranger.get(base + "/api/v1/incidents/", headers={**FORWARDED, **BEARER})
            assert r.status_code == 307
            assert r.headers["location"] == "/api/v1/incidents", r.headers["location"]
    finally:
        server.stop()


def test_by_default_no_proxy_but_loopback_is_believed(tmp_path: Path) -> None:
    """Unset, uvicorn's own default stands (127.0.0.1 and ::1): a client elsewhere cannot make
    its request look https."""
    import uvicorn

    from fleetmind.serving.app import create_app

    settings = Settings(
        database_url=f"sqlite:///{tmp_path / 'default.db'}",
        api_token=TOKEN,
        rca_model="baseline:upstream-coverage",
        placement_model="heuristic:builtin-bestfit",
        incident_worker=False,
    )
    assert settings.forwarded_allow_ips() is None
    config = uvicorn.Config(
        create_app(settings),
        host="127.0.0.1",
        port=DEFAULT_PORT,
        log_level="warning",
        forwarded_allow_ips=settings.forwarded_allow_ips(),
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        assert wait_for(lambda: server.started, 60), "uvicorn did not start"
        with _client(STRANGER) as stranger:
            r = stranger.get(f"http://127.0.0.1:{DEFAULT_PORT}/ui/login", headers=FORWARDED)
            assert r.status_code == 200
            assert "secure" not in _csrf_cookie(r).lower()
    finally:
        server.should_exit = True
        thread.join(20)


# ----------------------------------------------------------------------- the /ui origin check
def _request(host: str, origin: str | None) -> Request:
    headers = [(b"host", host.encode())]
    if origin is not None:
        headers.append((b"origin", origin.encode()))
    scope = {"type": "http", "method": "POST", "path": "/ui/login", "headers": headers}
    return Request(scope)


@pytest.mark.parametrize(
    ("host", "origin"),
    [
        ("fleetmind.example", "https://fleetmind.example"),
        ("fleetmind.example:443", "https://fleetmind.example"),  # the default port, written out
        ("FleetMind.example", "https://fleetmind.example"),  # host names are case-insensitive
        ("fleetmind.example:80", "http://fleetmind.example"),
        ("fleetmind.example", "https://FLEETMIND.example:443"),
        ("fleetmind.example:8443", "https://fleetmind.example:8443"),
    ],
)
def test_the_forms_accept_the_same_origins_as_the_api(host: str, origin: str) -> None:
    assert same_origin(origin, host, "http://127.0.0.1:8000")  # the API's check
    assert auth.origin_refusal(_request(host, origin), "http://127.0.0.1:8000") is None


@pytest.mark.parametrize(
    ("host", "origin"),
    [
        ("fleetmind.example", "https://evil.example"),
        ("fleetmind.example:443", "https://evil.example"),
        ("fleetmind.example:8443", "https://fleetmind.example"),  # another port
        ("fleetmind.example", "https://fleetmind.example:8443"),
        ("fleetmind.example", "null"),
    ],
)
def test_the_forms_still_refuse_other_origins(host: str, origin: str) -> None:
    why = auth.origin_refusal(_request(host, origin), "http://127.0.0.1:8000")
    assert why is not None and "FLEETMIND_PUBLIC_URL" in why and host in why
