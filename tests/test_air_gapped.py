"""FleetMind on a machine without internet access, a read-only root and ``HOME=/`` (the image).

* A local Ray (``--ray-address local``) starts with Ray's usage statistics off
  (``RAY_USAGE_STATS_ENABLED=0``: on by default, ``ray/_common/usage/usage_lib.py``,
  ``_usage_stats_enabledness``) and, where ``~`` is read-only, its token outside ``~/.ray``: a Ray
  that turns token authentication on by default (2.60 here) writes ``~/.ray/auth_token`` before
  it starts (``ray/_private/authentication/
  authentication_token_setup.py``, ``generate_and_save_token``), which failed with
  ``OSError: [Errno 30] Read-only file system: '/.ray'`` as a traceback. Ray is replaced by a
  stand-in here: no cluster is started.
* A connection refused by a proxy names the proxy, not only the server asked for (``fleetmind
  doctor --prometheus``, the DCGM scraper, ``data fetch``), and ``data fetch`` names
  ``--base-url MIRROR``. An error status answered to a plain ``http://`` request that went
  through a proxy names the proxy as its possible author (Squid answers a request its rules
  refuse with its own ``403``), without the credentials advice meant for the server's 403.
* The image keeps Matplotlib's configuration folder under ``/tmp`` (``MPLCONFIGDIR``).
"""

from __future__ import annotations

import http.server
import os
import re
import socket
import stat
import sys
import threading
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from fleetmind.data import fetch
from fleetmind.data.errors import ConfigError, NotAvailableError
from fleetmind.data.fetch import fetch_dataset
from fleetmind.data.paths import REPO_ROOT
from fleetmind.http_client import proxied_answer_note, proxy_note, proxy_source
from fleetmind.rl import scaleout
from fleetmind.serving.telemetry.prometheus import (
    PrometheusApiSource,
    PrometheusSource,
    http_problem,
)
from tests.fetch_helpers import toy_manifest

RAY_VARS = (
    "RAY_USAGE_STATS_ENABLED",
    "RAY_AUTH_MODE",
    "RAY_AUTH_TOKEN",
    "RAY_AUTH_TOKEN_PATH",
    "RAY_ADDRESS",
)
PROXY_VARS = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY")


@pytest.fixture
def ray_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """No Ray variable set, and each restored after the test (``local_ray_environment`` and
    the CLI write ``os.environ`` themselves: a set-then-delete records the value to restore)."""
    for name in RAY_VARS:
        monkeypatch.setenv(name, "")
        monkeypatch.delenv(name)


@pytest.fixture
def no_proxy_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in PROXY_VARS:
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.lower(), raising=False)


def _read_only_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """HOME under a regular file: nothing can be made there, even by root (as ``/`` on a
    read-only root file system)."""
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("")
    home = blocker / "home"
    monkeypatch.setenv("HOME", str(home))
    return home


class FakeRay(types.ModuleType):
    """A stand-in ``ray`` module: records the environment ``init`` saw, or raises ``error``."""

    def __init__(self, error: BaseException | None = None) -> None:
        super().__init__("ray")
        self.error = error
        self.seen: dict[str, str] = {}
        self.kwargs: dict[str, Any] = {}

    def is_initialized(self) -> bool:
        return False

    def init(self, **kwargs: Any) -> None:
        self.kwargs = kwargs
        self.seen = dict(os.environ)
        if self.error is not None:
            raise self.error


# ------------------------------------------------------------------------------ a local Ray


def test_usage_statistics_are_off_by_default_and_a_users_choice_is_kept(ray_env: None) -> None:
    env: dict[str, str] = {"HOME": os.environ.get("HOME", "/")}
    scaleout.local_ray_environment(env)
    assert env["RAY_USAGE_STATS_ENABLED"] == "0"
    env = {"RAY_USAGE_STATS_ENABLED": "1"}
    scaleout.local_ray_environment(env)
    assert env["RAY_USAGE_STATS_ENABLED"] == "1"


def test_the_cli_turns_ray_usage_statistics_off(
    ray_env: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    from fleetmind.cli import main

    assert main([]) == 0
    assert os.environ["RAY_USAGE_STATS_ENABLED"] == "0"
    monkeypatch.setenv("RAY_USAGE_STATS_ENABLED", "1")
    assert main([]) == 0
    assert os.environ["RAY_USAGE_STATS_ENABLED"] == "1"


def test_a_read_only_home_gets_a_private_token_outside_it(
    ray_env: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = _read_only_home(tmp_path, monkeypatch)
    env: dict[str, str] = {}
    scaleout.local_ray_environment(env)
    token = Path(env["RAY_AUTH_TOKEN_PATH"])
    assert home not in token.parents
    assert re.fullmatch(r"[0-9a-f]{64}", token.read_text())  # 256 bits, as Ray's own
    assert stat.S_IMODE(token.stat().st_mode) == 0o600
    assert stat.S_IMODE(token.parent.stat().st_mode) == 0o700


@pytest.mark.parametrize(
    "given",
    [{"RAY_AUTH_MODE": "disabled"}, {"RAY_AUTH_TOKEN": "t" * 64}, {"RAY_AUTH_TOKEN_PATH": "/x"}],
)
def test_a_token_or_mode_of_the_users_is_kept(
    ray_env: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, given: dict[str, str]
) -> None:
    _read_only_home(tmp_path, monkeypatch)
    env = dict(given)
    scaleout.local_ray_environment(env)
    assert env == {**given, "RAY_USAGE_STATS_ENABLED": "0"}


def test_a_writable_home_keeps_rays_own_token_file(
    ray_env: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    env: dict[str, str] = {}
    scaleout.local_ray_environment(env)
    assert "RAY_AUTH_TOKEN_PATH" not in env


def test_local_ray_starts_with_them_on_a_read_only_home(
    ray_env: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _read_only_home(tmp_path, monkeypatch)
    fake = FakeRay()
    monkeypatch.setitem(sys.modules, "ray", fake)
    assert scaleout._ray_init("local") is fake
    assert fake.seen["RAY_USAGE_STATS_ENABLED"] == "0"
    assert Path(fake.seen["RAY_AUTH_TOKEN_PATH"]).is_file()
    assert fake.kwargs.get("include_dashboard") is False


def test_ray_failing_on_a_read_only_disk_is_one_line(
    ray_env: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    fake = FakeRay(OSError(30, "Read-only file system", "/tmp/ray"))
    monkeypatch.setitem(sys.modules, "ray", fake)
    with pytest.raises(ConfigError) as err:
        scaleout._ray_init("local")
    msg = str(err.value)
    assert "\n" not in msg
    assert "/tmp/ray" in msg and "Read-only file system" in msg and "~/.ray" in msg


# ------------------------------------------------------------------- a proxy's refusal


def _closed_port() -> int:
    """A loopback port nothing listens on (connections to it are refused)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_proxy_source_names_the_variable() -> None:
    env = {"https_proxy": "http://p:3128", "ALL_PROXY": "http://a:1", "NO_PROXY": ".local"}
    assert proxy_source("https://x.example/", env) == "https_proxy"
    assert proxy_source("http://x.example/", env) == "ALL_PROXY"
    assert proxy_source("http://x.local/", env) == ""
    assert proxy_source("http://127.0.0.1:9090/", env) == ""


def test_proxy_note_only_for_a_connection_through_a_proxy() -> None:
    import httpx

    env = {"HTTP_PROXY": "http://user:secret@proxy.corp:3128"}
    req = httpx.Request("GET", "http://prometheus.monitoring:9090/api/v1/query")
    refused = httpx.ConnectError("[Errno 111] Connection refused", request=req)
    note = proxy_note(refused, "http://unused/", env)
    assert note == (
        " via proxy http://***@proxy.corp:3128 (from HTTP_PROXY; NO_PROXY does not match "
        "prometheus.monitoring:9090)"
    )
    assert "secret" not in note
    assert proxy_note(httpx.ReadTimeout("timed out", request=req), "", env) == ""
    assert proxy_note(refused, "", {**env, "NO_PROXY": "monitoring"}) == ""
    # an error made without its request: the URL given
    assert "x.example" in proxy_note(httpx.ConnectError("refused"), "http://x.example/", env)


def test_doctor_names_the_proxy_that_refused(
    no_proxy_env: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    port = _closed_port()
    monkeypatch.setenv("HTTP_PROXY", f"http://u:pw@127.0.0.1:{port}")
    source = PrometheusApiSource("http://prometheus.monitoring:9090", timeout_s=5)
    with pytest.raises(NotAvailableError) as err:
        source.query("up")
    source.close()
    msg = str(err.value)
    assert msg.startswith("cannot query Prometheus at http://prometheus.monitoring:9090: ")
    assert msg.endswith(
        f" via proxy http://***@127.0.0.1:{port} (from HTTP_PROXY; NO_PROXY does not match "
        "prometheus.monitoring:9090)"
    )
    dcgm = PrometheusSource("http://dcgm.monitoring:9400/metrics", timeout_s=5)
    with pytest.raises(NotAvailableError, match=r"via proxy http://\*\*\*@127\.0\.0\.1"):
        dcgm.collect()
    dcgm.close()


def test_a_direct_refusal_names_no_proxy(
    no_proxy_env: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HTTP_PROXY", "http://127.0.0.1:9")
    source = PrometheusApiSource(f"http://127.0.0.1:{_closed_port()}", timeout_s=5)  # loopback
    with pytest.raises(NotAvailableError) as err:
        source.query("up")
    source.close()
    assert "proxy" not in str(err.value)


def test_data_fetch_names_the_proxy_and_a_mirror(
    no_proxy_env: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    port = _closed_port()
    monkeypatch.setenv("HTTP_PROXY", f"http://127.0.0.1:{port}")
    man = toy_manifest("toy", {"a.csv": b"x\n"})
    man["toy"]["base_url"] = "http://files.example/"
    with pytest.raises(NotAvailableError) as err:
        fetch_dataset("toy", tmp_path, manifest=man, timeout_s=5)
    msg = str(err.value)
    assert msg.startswith("cannot download http://files.example/a.csv: ")
    assert (
        f"via proxy http://127.0.0.1:{port} (from HTTP_PROXY; NO_PROXY does not match "
        "files.example:80); without access to the server, fetch from a mirror"
    ) in msg
    assert msg.endswith("fetch from a mirror: --base-url MIRROR")
    # from a mirror already: the proxy, but no advice to use one
    with pytest.raises(NotAvailableError) as err:
        fetch_dataset("toy", tmp_path, manifest=man, base_url="http://mirror.example/", timeout_s=5)
    assert "via proxy" in str(err.value) and "--base-url" not in str(err.value)


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("http://prometheus.monitoring/api/v1/query", "prometheus.monitoring:80"),
        ("https://files.example/a.csv", "files.example:443"),
        ("http://files.example:8080/a.csv", "files.example:8080"),
        ("http://[fd00::1]:9090/metrics", "[fd00::1]:9090"),
        ("https://[FD00::2]/", "[fd00::2]:443"),
    ],
)
def test_proxy_note_names_the_host_and_port_no_proxy_would_need(url: str, shown: str) -> None:
    """``NO_PROXY`` entries may name ``host:port`` (Go's ``httpproxy``): the note gives the port
    the request used (its scheme's default when the URL names none), so that an entry such as
    ``files.example:8443`` is seen not to match; it named the host alone."""
    import httpx

    env = {"HTTP_PROXY": "http://proxy.corp:3128", "HTTPS_PROXY": "http://proxy.corp:3128"}
    note = proxy_note(httpx.ConnectError("refused", request=httpx.Request("GET", url)), url, env)
    assert note.endswith(f"; NO_PROXY does not match {shown})"), note
    # the note is right about it: that entry sends the request direct
    assert proxy_note(httpx.ConnectError("refused"), url, {**env, "NO_PROXY": shown}) == ""


# ------------------------------------------------- an error status answered by a proxy


def _squid_denied_page() -> bytes:
    """The body of Squid's ``ERR_ACCESS_DENIED`` page (squid-cache/squid
    errors/templates/ERR_ACCESS_DENIED: title "ERROR: The requested URL could not be retrieved",
    "Access Denied."), shortened."""
    return (
        b"<!DOCTYPE html><html><head><title>ERROR: The requested URL could not be retrieved"
        b"</title></head><body><h1>ERROR</h1><h2>The requested URL could not be retrieved</h2>"
        b"<p>Access control configuration prevents your request from being allowed at this "
        b"time.</p><p>Generated by proxy.corp (squid/6.10)</p></body></html>"
    )


@pytest.fixture
def squid_denying() -> Iterator[int]:
    """A stand-in for a Squid proxy whose rules refuse every request, on a free loopback port
    (yielded): a plain-HTTP request (absolute URI) and a ``CONNECT`` get ``403 Forbidden`` with
    Squid's ``X-Squid-Error: ERR_ACCESS_DENIED 0`` and its error page (squid-cache/squid
    src/errorpage.cc, ``ErrorState::BuildHttpReply``)."""

    class Denying(http.server.BaseHTTPRequestHandler):
        def deny(self) -> None:
            body = _squid_denied_page()
            self.send_response(403, "Forbidden")
            self.send_header("Content-Type", "text/html;charset=utf-8")
            self.send_header("X-Squid-Error", "ERR_ACCESS_DENIED 0")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        do_GET = do_POST = do_CONNECT = deny

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Denying)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield int(server.server_address[1])
    finally:
        server.shutdown()
        server.server_close()


def _proxy_said(port: int) -> str:
    return (
        f" through proxy http://127.0.0.1:{port} (from HTTP_PROXY); the answer may be the proxy's"
    )


def test_doctor_names_the_proxy_a_403_may_come_from(
    no_proxy_env: None, squid_denying: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``HTTP_PROXY=... fleetmind doctor --prometheus http://prometheus.monitoring:9090`` behind
    a Squid that refuses the host: the 403 was Prometheus's, with advice to give it credentials."""
    monkeypatch.setenv("HTTP_PROXY", f"http://127.0.0.1:{squid_denying}")
    source = PrometheusApiSource("http://prometheus.monitoring:9090", timeout_s=5)
    with pytest.raises(NotAvailableError) as err:
        source.query("up")
    source.close()
    msg = str(err.value)
    assert msg == (
        "Prometheus at http://prometheus.monitoring:9090 answered HTTP 403 Forbidden (the answer "
        "said: ERROR: The requested URL could not be retrieved)" + _proxy_said(squid_denying)
    )
    assert "credentials" not in msg and "server said" not in msg


def test_the_same_403_direct_is_the_servers(
    no_proxy_env: None, squid_denying: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Asked direct (loopback is never proxied), the same answer is the server's: credentials."""
    monkeypatch.setenv("HTTP_PROXY", "http://127.0.0.1:9")
    source = PrometheusApiSource(f"http://127.0.0.1:{squid_denying}", timeout_s=5)
    with pytest.raises(NotAvailableError) as err:
        source.query("up")
    source.close()
    msg = str(err.value)
    assert "(server said: ERROR: The requested URL" in msg and "it wants credentials" in msg
    assert "proxy" not in msg.replace("aws-sigv4-proxy", "")


def test_an_https_query_refused_by_the_proxy_is_the_proxys(
    no_proxy_env: None, squid_denying: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``https://`` goes through a ``CONNECT`` tunnel: its refusal is the proxy's for sure."""
    monkeypatch.setenv("HTTPS_PROXY", f"http://127.0.0.1:{squid_denying}")
    source = PrometheusApiSource("https://prometheus.monitoring:9090", timeout_s=5)
    with pytest.raises(NotAvailableError) as err:
        source.query("up")
    source.close()
    msg = str(err.value)
    assert msg.endswith(
        f" via proxy http://127.0.0.1:{squid_denying} (from HTTPS_PROXY; NO_PROXY does not match "
        "prometheus.monitoring:9090)"
    )
    assert "credentials" not in msg


def test_the_dcgm_scraper_and_data_fetch_name_the_proxy_too(
    no_proxy_env: None, squid_denying: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HTTP_PROXY", f"http://127.0.0.1:{squid_denying}")
    dcgm = PrometheusSource("http://dcgm.monitoring:9400/metrics", timeout_s=5)
    with pytest.raises(NotAvailableError) as err:
        dcgm.collect()
    dcgm.close()
    assert "403" in str(err.value) and str(err.value).endswith(_proxy_said(squid_denying))
    man = toy_manifest("toy", {"a.csv": b"x\n"})
    man["toy"]["base_url"] = "http://files.example/"
    with pytest.raises(NotAvailableError) as err:
        fetch_dataset("toy", tmp_path, manifest=man, timeout_s=5)
    assert str(err.value) == "http://files.example/a.csv: HTTP 403" + _proxy_said(squid_denying)


@pytest.mark.parametrize(
    ("status", "headers", "says"),
    [
        (502, {}, "answered HTTP 502 Bad Gateway{by}"),
        (404, {}, "answered HTTP 404 for /api/v1/query{by}; if it is Prometheus's, is the URL"),
        (
            302,
            {"location": "http://portal.corp/login"},
            "redirected to http://portal.corp/login (HTTP 302; a query is not followed){by}; "
            "if it is Prometheus's, set FLEETMIND_PROMETHEUS_URL to http://portal.corp/login",
        ),
        (407, {}, "answered HTTP 407 Proxy Authentication Required{by}"),
    ],
)
def test_other_error_statuses_through_a_proxy_name_it(
    no_proxy_env: None,
    monkeypatch: pytest.MonkeyPatch,
    status: int,
    headers: dict[str, str],
    says: str,
) -> None:
    import httpx

    monkeypatch.setenv("http_proxy", "proxy.corp:3128")  # no scheme: an http:// proxy
    url = "http://prometheus.monitoring:9090/api/v1/query"
    resp = httpx.Response(status, headers=headers, request=httpx.Request("POST", url))
    by = " through proxy http://proxy.corp:3128 (from http_proxy); the answer may be the proxy's"
    msg = http_problem(resp, None)
    assert msg is not None and msg.startswith(says.format(by=by)), msg
    # a 2xx is no error: nothing is said of the proxy; nor of one for another host
    assert "proxy" not in (http_problem(httpx.Response(200, request=resp.request), None) or "")
    monkeypatch.setenv("NO_PROXY", ".monitoring")
    assert "proxy.corp" not in (http_problem(resp, None) or "")


def test_proxied_answer_note_only_for_plain_http_through_a_proxy() -> None:
    env = {"HTTP_PROXY": "http://u:pw@proxy.corp:3128", "HTTPS_PROXY": "http://proxy.corp:3128"}
    note = proxied_answer_note("http://h.example/", env)
    assert note == (
        " through proxy http://***@proxy.corp:3128 (from HTTP_PROXY); the answer may be the proxy's"
    )
    assert proxied_answer_note("https://h.example/", env) == ""  # a tunnel: the server's answer
    assert proxied_answer_note("http://127.0.0.1:9090/", env) == ""  # direct
    assert proxied_answer_note("http://h.example/", {}) == ""


def test_a_fetch_timeout_puts_the_timeout_advice_before_the_mirror(
    no_proxy_env: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The message ended "... --base-url MIRROR; raise it with --timeout SECONDS", which read as
    raising the mirror: the limit comes first now."""
    import httpx

    clock = {"t": 0.0}

    def handler(request: httpx.Request) -> httpx.Response:
        clock["t"] += 100.0  # the connection attempt outlived the limit
        raise httpx.ConnectTimeout("timed out", request=request)

    monkeypatch.setenv("HTTP_PROXY", "http://proxy.corp:3128")
    monkeypatch.setattr(fetch, "_now", lambda: clock["t"])
    monkeypatch.setattr(
        fetch, "_client", lambda *a: httpx.Client(transport=httpx.MockTransport(handler))
    )
    man = toy_manifest("toy", {"a.csv": b"x\n"})
    man["toy"]["base_url"] = "http://files.example/"
    with pytest.raises(NotAvailableError) as err:
        fetch_dataset("toy", tmp_path, manifest=man, timeout_s=5)
    assert str(err.value) == (
        "cannot download http://files.example/a.csv: no answer (status line and headers) within "
        "5 s via proxy http://proxy.corp:3128 (from HTTP_PROXY; NO_PROXY does not match "
        "files.example:80); raise the limit with --timeout SECONDS; without access to the "
        "server, fetch from a mirror: --base-url MIRROR"
    )


# ------------------------------------------------------------------------------ the image


def test_the_image_keeps_matplotlibs_configuration_under_tmp() -> None:
    dockerfile = (REPO_ROOT / "deploy" / "container" / "Dockerfile").read_text()
    env_blocks = re.findall(r"^ENV ((?:.*\\\n)*.*)$", dockerfile, re.M)
    values = dict(re.findall(r"(\w+)=(\S+)", " ".join(env_blocks)))
    # matplotlib.get_configdir: MPLCONFIGDIR, else XDG_CONFIG_HOME, else ~/.config (read-only)
    assert values.get("MPLCONFIGDIR", "").startswith("/tmp/"), values
