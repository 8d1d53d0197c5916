"""Token scopes: every route of the app (walked from its route table, so routes added later are
covered) answers 401 without a token and 403 with a token of the wrong scope; the token is checked
before the body is read; empty tokens are an error; ``fleetmind serve`` refuses to listen beyond
loopback without a token."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from pydantic import ValidationError
from serving_helpers import alert, free_port, webhook

from fleetmind.serving.app import create_app
from fleetmind.serving.deps import DOC_PATHS, PUBLIC_PATHS, flat_routes
from fleetmind.serving.settings import Settings, get_settings

TOKENS = {"read": "r-token", "ingest": "i-token", "schedule": "s-token", "admin": "a-token"}
ALL = "all-token"


def make_settings(tmp_path: Path, **kw: Any) -> Settings:
    base: dict[str, Any] = {
        "database_url": f"sqlite:///{tmp_path}/auth.db",
        "rca_model": "baseline:upstream-coverage",
        "placement_model": "heuristic:builtin-bestfit",
        "incident_worker": False,
        "read_token": TOKENS["read"],
        "ingest_token": TOKENS["ingest"],
        "schedule_token": TOKENS["schedule"],
        "admin_token": TOKENS["admin"],
        "api_token": ALL,
    }
    base.update(kw)
    return Settings(**base)


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def _operations(app: Any) -> list[tuple[str, str]]:
    """(method, concrete path) of every route in the app's route table."""
    ops = []
    for route in flat_routes(app):
        path = getattr(route, "path", None)
        if path is None:
            continue
        concrete = re.sub(r"\{[^}]+\}", "1", path)
        for method in sorted(getattr(route, "methods", None) or {"GET"}):
            ops.append((method, concrete))
    return ops


def test_every_route_needs_a_token_of_its_scope(tmp_path: Path) -> None:
    app = create_app(make_settings(tmp_path))
    ops = _operations(app)
    assert ("POST", "/api/v1/alerts") in ops and ("GET", "/openapi.json") in ops
    assert ("GET", "/docs") in ops
    with TestClient(app) as c:
        for method, path in ops:
            if path in PUBLIC_PATHS:
                assert c.request(method, path).status_code not in (401, 403), path
                continue
            if (method, path) == ("GET", "/favicon.ico"):  # a browser asks for it unprompted
                assert c.get(path).status_code == 200
                continue
            if path in ("/", "/ui") or path.startswith("/ui/"):
                # browser pages: a session cookie from the login form, not a bearer header; without
                # one they send the browser to the login form (or refuse a POST's missing CSRF)
                r = c.request(method, path, follow_redirects=False)
                if (method, path) == ("GET", "/ui/login"):
                    assert r.status_code == 200
                else:
                    assert r.status_code in (303, 307, 403), f"{method} {path} -> {r.status_code}"
                    assert r.status_code == 403 or "/ui" in r.headers["location"]
                continue
            r = c.request(method, path)
            assert r.status_code == 401, f"{method} {path} without a token -> {r.status_code}"
            assert r.headers.get("www-authenticate") == "Bearer"
            wrong = c.request(method, path, headers=bearer("not-a-token"))
            assert wrong.status_code == 401, f"{method} {path} unknown token -> {wrong.status_code}"
            codes = {
                s: c.request(method, path, headers=bearer(t)).status_code for s, t in TOKENS.items()
            }
            denied = [s for s, code in codes.items() if code == 403]
            allowed = [s for s, code in codes.items() if code not in (401, 403)]
            assert denied, f"{method} {path}: no scope is refused ({codes})"
            if path in DOC_PATHS:  # the API docs: admin reads them too, as it reads the pages
                assert sorted(allowed) == ["admin", "read"], f"{method} {path}: ({codes})"
            else:
                assert len(allowed) == 1, f"{method} {path}: one scope should pass ({codes})"
            full = c.request(method, path, headers=bearer(ALL)).status_code
            assert full not in (401, 403), f"{method} {path} with the all-scope token -> {full}"


def test_scopes_of_the_named_routes(tmp_path: Path) -> None:
    with TestClient(create_app(make_settings(tmp_path))) as c:
        body = webhook([alert({"alertname": "GpuXid", "cluster": "c0", "node": "c0-h1"})])
        r = c.post("/api/v1/alerts", json=body, headers=bearer(TOKENS["ingest"]))
        assert r.status_code == 200 and r.json()["accepted"] == 1
        # the webhook token reads nothing and changes nothing else
        assert c.get("/api/v1/alerts", headers=bearer(TOKENS["ingest"])).status_code == 403
        assert c.post("/api/v1/models/reload", headers=bearer(TOKENS["ingest"])).status_code == 403
        assert c.get("/openapi.json", headers=bearer(TOKENS["ingest"])).status_code == 403
        assert c.get("/openapi.json", headers=bearer(TOKENS["read"])).status_code == 200
        assert c.get("/api/v1/alerts", headers=bearer(TOKENS["read"])).status_code == 200
        assert (
            c.post("/api/v1/alerts", json=body, headers=bearer(TOKENS["read"])).status_code == 403
        )
        graph = c.get("/api/v1/graph", headers=bearer(TOKENS["read"])).json()
        assert c.put("/api/v1/graph", json=graph, headers=bearer(TOKENS["read"])).status_code == 403
        assert (
            c.put("/api/v1/graph", json=graph, headers=bearer(TOKENS["admin"])).status_code == 200
        )
        assert c.post("/api/v1/models/reload", headers=bearer(TOKENS["admin"])).status_code == 200
        for public in ("/healthz", "/readyz", "/metrics"):
            assert c.get(public).status_code == 200


def test_token_is_checked_before_the_body_is_read(tmp_path: Path) -> None:
    """Without a token the webhook answers 401 without receiving a single body message (a client
    cannot make the service buffer or parse a body it is not allowed to send)."""
    app = create_app(make_settings(tmp_path))
    received: list[Any] = []
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        received.append(1)
        return {"type": "http.request", "body": b"x" * 1024, "more_body": True}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    for headers in ([(b"transfer-encoding", b"chunked")], [(b"content-length", b"1000000")]):
        scope = {
            "type": "http",
            "asgi": {"version": "3.0"},
            "http_version": "1.1",
            "method": "POST",
            "path": "/api/v1/alerts",
            "raw_path": b"/api/v1/alerts",
            "query_string": b"",
            "root_path": "",
            "headers": [(b"content-type", b"application/json"), *headers],
            "client": ("127.0.0.1", 1),
            "server": ("127.0.0.1", 80),
            "scheme": "http",
        }
        sent.clear()
        asyncio.run(app(scope, receive, send))
        assert sent[0]["status"] == 401
    assert received == []


@pytest.mark.parametrize(
    "field", ["api_token", "read_token", "ingest_token", "schedule_token", "admin_token"]
)
def test_empty_token_is_an_error_not_auth_off(tmp_path: Path, field: str) -> None:
    with pytest.raises(ValidationError, match="empty token"):
        make_settings(tmp_path, **{field: ""})
    with pytest.raises(ValidationError, match="empty token"):
        make_settings(tmp_path, **{field: "   "})


def test_serve_refuses_public_bind_without_token(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from fleetmind.cli import main
    from fleetmind.cli.serve import is_loopback

    for var in ("API", "READ", "INGEST", "SCHEDULE", "ADMIN"):
        monkeypatch.delenv(f"FLEETMIND_{var}_TOKEN", raising=False)
    monkeypatch.setenv("FLEETMIND_DATABASE_URL", f"sqlite:///{tmp_path}/x.db")
    for host in ("0.0.0.0", "::", "10.1.2.3", "fleetmind.example"):
        assert main(["serve", "--host", host]) == 2
        err = capsys.readouterr().err
        assert "without a token" in err and "--insecure" in err and err.count("\n") == 1
    monkeypatch.setenv("FLEETMIND_API_TOKEN", "")
    assert main(["serve"]) == 2
    assert "empty token" in capsys.readouterr().err
    assert is_loopback("127.0.0.1") and is_loopback("::1") and is_loopback("localhost")
    assert not is_loopback("0.0.0.0")
    get_settings.cache_clear()


def test_serve_passes_connection_limits_to_uvicorn(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """``fleetmind serve`` runs uvicorn with the guarded protocol (header timeout and size limit,
    connection limit) and a short keep-alive, so idle or stalled connections cannot pile up without
    bound; requests in progress are limited in the app (``FLEETMIND_LIMIT_CONCURRENCY``)."""
    import uvicorn

    from fleetmind.cli import main
    from fleetmind.serving.http_guard import GuardedHttpToolsProtocol

    seen: dict[str, Any] = {}
    monkeypatch.setattr(uvicorn, "run", lambda *a, **kw: seen.update(kw))
    monkeypatch.setenv("FLEETMIND_DATABASE_URL", f"sqlite:///{tmp_path}/x.db")
    monkeypatch.setenv("FLEETMIND_LIMIT_CONCURRENCY", "77")
    monkeypatch.setenv("FLEETMIND_API_TOKEN", "a-long-enough-test-token")
    port = str(free_port())  # serve checks its port is free first: not 8000, which may be taken
    assert main(["serve", "--host", "0.0.0.0", "--port", port]) == 0  # a token is set: allowed
    assert seen["http"] is GuardedHttpToolsProtocol and seen["timeout_keep_alive"] == 5
    assert seen["limit_concurrency"] is None  # uvicorn's counts idle connections
    get_settings.cache_clear()  # nothing cached from this test's environment
