"""``FLEETMIND_PUBLIC_URL``: the start of every incident link sent out, and the redirects.

The value is copied into each ``FleetMindRootCause`` alert's ``generatorURL`` and
``incident_url`` and each chat message. Alertmanager validates ``generatorURL`` as a URI
(its OpenAPI ``postableAlert``: ``format: uri``) and answers 422 for the whole post otherwise,
so a stray space or a ConfigMap's trailing newline stopped every notification; ``urlsplit``
silently drops tab, CR and LF (Python docs, ``urllib.parse.urlsplit``: WHATWG URL parsing), so
the old check passed them. Surrounding whitespace is now stripped and the rest refused with one
line, as are a ``user:password@`` (sent in every link), a query or fragment (the link appends
``/ui/incidents/<id>``) and a path prefix (the pages, redirects, form actions and cookie paths
are rooted at ``/``).

Unset, ``fleetmind serve`` derives it from ``--host`` and ``--port`` instead of always naming
``http://127.0.0.1:8000``.

Trailing-slash redirects: Starlette's ``Router.redirect_slashes`` builds the ``Location`` as an
absolute URL from the request's ``Host`` header (``starlette/routing.py``, ``Router.app``:
``URL(scope=redirect_scope)``; ``starlette/datastructures.py``, ``URL.__init__``), so
``Host: evil.example`` got ``location: http://evil.example/api/v1/incidents``. The service now
answers the same 307 with a relative ``Location``.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient
from pydantic import ValidationError
from serving_helpers import notify_settings, serving_settings, webhook
from ui_helpers import storm_alerts

from fleetmind.cli import serve as cli_serve
from fleetmind.data.errors import ConfigError
from fleetmind.serving.app import create_app
from fleetmind.serving.notify import Notifier
from fleetmind.serving.settings import Settings
from fleetmind.serving.ui.auth import secure_cookies

os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")

PUBLIC = "https://fleetmind.example.com"
TOKEN = "tok-public-url-aaaaaaaaaaaa"


@pytest.mark.parametrize(
    "raw",
    [PUBLIC + " ", PUBLIC + "\n", " " + PUBLIC, "\t" + PUBLIC + "/\r\n", PUBLIC + "/"],
)
def test_surrounding_whitespace_is_stripped(raw: str) -> None:
    s = Settings(public_url=raw)
    assert s.public_url == PUBLIC
    assert secure_cookies(s)  # a leading space made the https:// check fail


@pytest.mark.parametrize("raw", [PUBLIC + "//", PUBLIC + "///", "http://10.1.2.3:8080//\n"])
def test_a_path_of_slashes_alone_is_no_path(raw: str) -> None:
    """Not a prefix: refusing it would stop a rolling update for a typo that breaks no link."""
    assert Settings(public_url=raw).public_url == raw.strip().rstrip("/")


@pytest.mark.parametrize(
    ("raw", "words"),
    [
        ("https://fleet mind.example.com", "whitespace or a control character"),
        ("https://fleetmind.example.com/\nui", "whitespace or a control character"),
        ("https://fleetmind.exa\tmple.com", "whitespace or a control character"),
        ("https://fleetmind.example.com\x00", "whitespace or a control character"),
        ("https://ops.example/?tenant=a", "query or fragment"),
        ("https://ops.example?", "query or fragment"),
        ("https://ops.example/#/", "query or fragment"),
        ("https://admin:s3cret@ops.example", "user name or password"),
        ("https://admin@ops.example", "user name or password"),
        ("https://ops.example/fleetmind", "path prefix is not supported"),
        ("https://ops.example/fleetmind/", "path prefix is not supported"),
        ("https://ops.example//fleetmind", "path prefix is not supported"),
        ("https://ops.example/fleetmind//", "path prefix is not supported"),
        # the user part is named first: no other message quotes the value
        ("https://admin:s3 cret@ops.example", "user name or password"),
        ("https://ad min:s3cret@ops.example", "user name or password"),
        ("https://admin:s3cret@ops.example\t/", "user name or password"),
        ("admin:s3cret@ops.example", "user name or password"),
    ],
)
def test_what_would_break_every_link_is_refused(raw: str, words: str) -> None:
    with pytest.raises(ValidationError) as err:
        Settings(public_url=raw)
    assert words in str(err.value)
    assert "s3cret" not in str(err.value)


def test_a_prefix_names_the_way_out() -> None:
    with pytest.raises(ValidationError) as err:
        Settings(public_url="https://ops.example/fleetmind")
    assert "root of its own host name" in str(err.value)


@pytest.mark.parametrize(
    ("raw", "secrets"),
    [
        ("https://admin:s3cret@ops.example\n", ("s3cret", "admin")),
        # safe_uri masks no user part that holds whitespace: these were echoed
        ("https://admin:s3 cret@ops.example", ("s3", "cret", "admin")),
        ("https://ad min:s3cret@ops.example", ("s3cret", "ad min", "ad ")),
        ("https://admin:s3cret@ops .example", ("s3cret", "admin")),
        # no scheme: the @ after a "/" or "?" was not seen as userinfo, and the line quoted it
        ("corp/alice:S3cret@ops.example", ("S3cret", "alice")),
        ("ops?u=alice:S3cret@x", ("S3cret", "alice")),
    ],
)
def test_the_serve_error_is_one_line_without_the_password(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, raw: str, secrets: tuple[str, ...]
) -> None:
    import uvicorn

    started: list[bool] = []
    monkeypatch.setattr(uvicorn, "run", lambda *a, **kw: started.append(True))
    _forget_after(monkeypatch, *cli_serve._ENV_OPTIONS.values(), "FLEETMIND_WORKERS")
    monkeypatch.setenv("FLEETMIND_DATABASE_URL", f"sqlite:///{tmp_path / 'serve.db'}")
    monkeypatch.setenv("FLEETMIND_PUBLIC_URL", raw)
    with pytest.raises(ConfigError) as err:
        cli_serve.run(_args())
    msg = str(err.value)
    assert "FLEETMIND_PUBLIC_URL" in msg and "user name or password" in msg
    assert "\n" not in msg
    for secret in secrets:
        assert secret not in msg
    assert started == []


def test_the_incident_link_is_built_from_the_stripped_value(tmp_path: Path) -> None:
    """A trailing slash and a newline: the old link was ``https://x/\\n/ui/incidents/N``."""
    posted: list[Any] = []

    def record(request: httpx.Request) -> httpx.Response:
        import json

        posted.extend(json.loads(request.content) if "/api/v2/alerts" in str(request.url) else [])
        return httpx.Response(200)

    settings = notify_settings(tmp_path, public_url=PUBLIC + "/\n", notify_webhook_url=None)
    with TestClient(create_app(settings)) as c:
        c.post("/api/v1/alerts", json=webhook(storm_alerts(_t0())))
        c.app.state.services.incidents.process_pending()
        clock = [1_000_000.0]
        n = Notifier(
            c.app.state.services.db,
            c.app.state.services.settings,
            clock=lambda: clock[0],
            transport=httpx.MockTransport(record),
        )
        n.poll()
        clock[0] += 31
        n.poll()
    assert posted
    for a in posted:
        assert a["generatorURL"] == f"{PUBLIC}/ui/incidents/{a['labels']['incident']}"
        assert a["annotations"]["incident_url"] == a["generatorURL"]


def _t0() -> Any:
    from datetime import UTC, datetime, timedelta

    return datetime.now(UTC) - timedelta(minutes=5)


# --- the default follows `fleetmind serve --host/--port` ---------------------------------------


def _forget_after(monkeypatch: pytest.MonkeyPatch, *names: str) -> None:
    """Unset ``names`` now and restore them after the test, also those that were unset and that
    ``cli_serve.run`` then wrote (``FLEETMIND_BIND_HOST`` from ``--host``: its options are written
    to the environment). ``monkeypatch.delenv`` alone records nothing for an unset variable, so
    whatever ``run`` wrote stayed for the tests that came after."""
    for name in names:
        monkeypatch.setenv(name, "")
        monkeypatch.delenv(name)


def _args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers()
    cli_serve.register(sub, "serve", "serve")
    ns = parser.parse_args(["serve", *argv])
    ns.workers = 1
    return ns


@pytest.fixture
def served(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """``fleetmind serve`` with uvicorn replaced: what the app would read as its settings."""
    import signal

    import uvicorn

    from fleetmind.serving.settings import get_settings

    seen: dict[str, Any] = {}

    def fake_run(*a: Any, **kw: Any) -> None:
        get_settings.cache_clear()
        seen["public_url"] = get_settings().public_url  # what create_app's workers read
        seen["port"] = kw["port"]

    monkeypatch.setattr(uvicorn, "run", fake_run)
    monkeypatch.setattr(cli_serve, "_check_port", lambda host, port: None)
    _forget_after(
        monkeypatch,
        *cli_serve._ENV_OPTIONS.values(),
        "FLEETMIND_WORKERS",
        "FLEETMIND_PUBLIC_URL",
        "FLEETMIND_NOTIFY_WEBHOOK_URL",
        "FLEETMIND_NOTIFY_ALERTMANAGER_URL",
        "FLEETMIND_TLS_CERT",
        "FLEETMIND_TLS_KEY",
        "FLEETMIND_TRUSTED_PROXIES",
    )
    monkeypatch.setenv("FLEETMIND_DATABASE_URL", f"sqlite:///{tmp_path / 'serve.db'}")
    monkeypatch.setenv("FLEETMIND_API_TOKEN", TOKEN)  # a non-loopback --host needs a token
    before = signal.getsignal(signal.SIGHUP) if hasattr(signal, "SIGHUP") else None
    yield seen
    if hasattr(signal, "SIGHUP"):
        signal.signal(signal.SIGHUP, before)
    get_settings.cache_clear()


@pytest.mark.parametrize(
    ("argv", "url"),
    [
        (["--port", "19107"], "http://127.0.0.1:19107"),
        (["--host", "10.1.2.3", "--port", "19108"], "http://10.1.2.3:19108"),
        (["--host", "::1", "--port", "19109"], "http://[::1]:19109"),
        (["--host", "0.0.0.0", "--port", "19110"], "http://127.0.0.1:19110"),
        (["--host", "::", "--port", "19111"], "http://127.0.0.1:19111"),
        (["--host", "::0", "--port", "19111"], "http://127.0.0.1:19111"),
        (["--host", "[::]", "--port", "19111"], "http://127.0.0.1:19111"),
        (["--host", "0", "--port", "19111"], "http://127.0.0.1:19111"),
        (["--host", "", "--port", "19111"], "http://127.0.0.1:19111"),
    ],
)
def test_unset_it_follows_the_port_and_address_served_on(
    served: dict[str, Any], argv: list[str], url: str
) -> None:
    assert cli_serve.run(_args(*argv)) == 0
    assert served["public_url"] == url
    assert "FLEETMIND_PUBLIC_URL" not in os.environ  # the caller's environment is left as it was


def test_an_explicit_value_is_kept(served: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FLEETMIND_PUBLIC_URL", PUBLIC)
    assert cli_serve.run(_args("--port", "19112")) == 0
    assert served["public_url"] == PUBLIC
    assert os.environ["FLEETMIND_PUBLIC_URL"] == PUBLIC


def test_a_wildcard_bind_warns_once_only_when_notifying(
    served: dict[str, Any], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("FLEETMIND_NOTIFY_ALERTMANAGER_URL", raising=False)
    assert cli_serve.run(_args("--host", "0.0.0.0", "--port", "19113")) == 0
    assert "FLEETMIND_PUBLIC_URL" not in capsys.readouterr().err
    monkeypatch.setenv("FLEETMIND_NOTIFY_ALERTMANAGER_URL", "http://127.0.0.1:19114")
    assert cli_serve.run(_args("--host", "0.0.0.0", "--port", "19113")) == 0
    warned = [line for line in capsys.readouterr().err.splitlines() if "PUBLIC_URL" in line]
    assert len(warned) == 1 and "http://127.0.0.1:19113" in warned[0]
    assert cli_serve.run(_args("--host", "10.1.2.3", "--port", "19113")) == 0
    assert "FLEETMIND_PUBLIC_URL" not in capsys.readouterr().err
    for spelling in ("::0", "0", "[::]"):  # the wildcard by its parsed address, not its spelling
        assert cli_serve.run(_args("--host", spelling, "--port", "19113")) == 0
        warned = [line for line in capsys.readouterr().err.splitlines() if "PUBLIC_URL" in line]
        assert len(warned) == 1 and "http://127.0.0.1:19113" in warned[0], spelling


def test_the_service_own_tls_makes_the_default_https(
    served: dict[str, Any], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """With ``FLEETMIND_TLS_CERT`` uvicorn serves HTTPS only: an ``http://`` link never loads."""
    from test_serving_tls import make_pki

    (tmp_path / "pki").mkdir()
    pki = make_pki(tmp_path / "pki")
    monkeypatch.setenv("FLEETMIND_TLS_CERT", str(pki["fleetmind.crt"]))
    monkeypatch.setenv("FLEETMIND_TLS_KEY", str(pki["fleetmind.key"]))
    assert cli_serve.run(_args("--host", "10.1.2.3", "--port", "19115")) == 0
    assert served["public_url"] == "https://10.1.2.3:19115"
    assert cli_serve.run(_args("--host", "0.0.0.0", "--port", "19116")) == 0
    assert served["public_url"] == "https://127.0.0.1:19116"


@pytest.mark.parametrize(
    ("host", "wildcard"),
    [
        ("", True),
        (" ", True),
        ("0.0.0.0", True),
        ("0", True),
        ("0.0", True),
        ("0x0", True),
        ("::", True),
        ("::0", True),
        ("0:0::0", True),
        ("[::]", True),
        ("::ffff:0.0.0.0", True),  # an IPv6 socket on it accepts every IPv4 interface
        ("127.0.0.1", False),
        ("::ffff:127.0.0.1", False),
        ("10.1.2.3", False),
        ("1", False),
        ("::1", False),
        ("[::1]", False),
        ("localhost", False),
        ("face", False),
        ("0 x", False),
    ],
)
def test_wildcard_hosts_are_judged_by_address(host: str, wildcard: bool) -> None:
    from fleetmind.serving.settings import default_public_url, is_wildcard_host

    assert is_wildcard_host(host) is wildcard
    assert (default_public_url(host, 8000) == "http://127.0.0.1:8000") is (
        wildcard or host == "127.0.0.1"
    )


def test_default_public_url_brackets_ipv6() -> None:
    from fleetmind.serving.settings import default_public_url

    assert default_public_url("[::1]", 8000) == "http://[::1]:8000"
    assert default_public_url("fe80::1%eth0", 8000) == "http://[fe80::1%25eth0]:8000"
    assert default_public_url("", 8000) == "http://127.0.0.1:8000"
    Settings(public_url=default_public_url("fe80::1%eth0", 8000))  # a valid setting


# --- trailing-slash redirects never echo Host ----------------------------------------------------


@pytest.fixture
def api(tmp_path: Path) -> TestClient:
    with TestClient(create_app(serving_settings(tmp_path, api_token=TOKEN))) as c:
        yield c


@pytest.mark.parametrize(
    ("path", "location"),
    [
        ("/api/v1/incidents/", "/api/v1/incidents"),
        ("/api/v1/incidents/?limit=5", "/api/v1/incidents?limit=5"),
        ("/api/v1/incidents/7/", "/api/v1/incidents/7"),
        # no route of their own: the slash fallback answers them (``/ui`` has its own route)
        ("/healthz/", "/healthz"),
        ("/docs/", "/docs"),
    ],
)
def test_slash_redirects_are_relative_whatever_the_host(
    api: TestClient, path: str, location: str
) -> None:
    for host in ("evil.example", "fleetmind:8000"):
        r = api.get(
            path,
            headers={"Host": host, "Authorization": f"Bearer {TOKEN}"},
            follow_redirects=False,
        )
        assert r.status_code == 307, (path, r.status_code)
        assert r.headers["location"] == location


def test_unknown_paths_stay_404_and_never_redirect_off_site(api: TestClient) -> None:
    auth = {"Authorization": f"Bearer {TOKEN}"}
    for path in ("/nope/", "//evil.example/", "//api/v1/incidents/"):
        r = api.get("http://testserver" + path, headers=auth, follow_redirects=False)
        assert r.status_code == 404, (path, r.headers.get("location"))
    r = api.get("/api/v1/incidents/a%0d%0aX:y/", headers=auth, follow_redirects=False)
    assert r.status_code == 307 and "\n" not in r.headers["location"]


def test_the_webhook_with_a_trailing_slash_still_arrives(api: TestClient) -> None:
    """Alertmanager's ``url: .../api/v1/alerts/`` follows the 307 with its body (Go's net/http
    ``Client.Do`` resolves a relative Location against the request URL)."""
    r = api.post(
        "/api/v1/alerts/",
        json=webhook([]),
        headers={"Authorization": f"Bearer {TOKEN}"},
        follow_redirects=True,
    )
    assert r.status_code == 200
