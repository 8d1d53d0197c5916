"""Cross-site requests, DNS rebinding and non-JSON bodies (``serving/origin_guard.py``).

With no token set a page the operator visits could post alerts, reload models or hold GPUs
with a ``no-cors`` ``text/plain`` ``fetch``, and a rebound name could read the API. Browsers send
``Origin`` on every POST (WHATWG Fetch, "append a request Origin header"); Alertmanager posts
``application/json`` (prometheus/alertmanager ``notify/util.go`` ``PostJSON``) and so does
kube-scheduler's extender client (kubernetes ``pkg/scheduler/framework/plugins/...extender.go``
``send``). The Host rule follows Jupyter's ``allow_remote_access=False`` / Vite's ``allowedHosts``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from serving_helpers import alert, webhook

from fleetmind.serving.app import create_app
from fleetmind.serving.origin_guard import (
    binds_loopback,
    host_allowed,
    is_json_media_type,
    same_origin,
    split_host,
)
from fleetmind.serving.settings import Settings


def _settings(tmp_path: Path, **kw: Any) -> Settings:
    base: dict[str, Any] = {
        "database_url": f"sqlite:///{tmp_path}/xs.db",
        "rca_model": "baseline:upstream-coverage",
        "placement_model": "heuristic:builtin-bestfit",
        "incident_worker": False,
    }
    base.update(kw)
    return Settings(**base)


@pytest.fixture
def client(tmp_path: Path) -> Any:
    app = create_app(_settings(tmp_path, public_url="https://fm.example.org"))
    with TestClient(app) as c:
        yield c


def _hook() -> bytes:
    return json.dumps(webhook([alert({"alertname": "GPUHot", "node": "node-1"})])).encode()


def test_cross_site_text_plain_webhook_is_refused(client: TestClient) -> None:
    evil = {"Origin": "http://evil.example", "Content-Type": "text/plain"}
    r = client.post("/api/v1/alerts", content=_hook(), headers=evil)
    assert r.status_code == 403 and "Origin" in r.json()["detail"]
    assert client.get("/api/v1/alerts").json() == []
    r = client.post("/api/v1/models/reload", headers={"Origin": "null"})
    assert r.status_code == 403
    r = client.post("/api/v1/scheduler/prioritize", content=b"{}", headers=evil)
    assert r.status_code == 403


def test_same_origin_and_originless_posts_pass(client: TestClient) -> None:
    ok = {"Content-Type": "application/json"}
    assert client.post("/api/v1/alerts", content=_hook(), headers=ok).status_code == 200
    own = {**ok, "Origin": "http://testserver"}
    assert client.post("/api/v1/alerts", content=_hook(), headers=own).status_code == 200
    public = {**ok, "Origin": "https://fm.example.org"}
    assert client.post("/api/v1/alerts", content=_hook(), headers=public).status_code == 200


@pytest.mark.parametrize(
    "path",
    ["/api/v1/alerts", "/api/v1/scheduler/filter", "/api/v1/scheduler/prioritize", "/api/v1/rca"],
)
@pytest.mark.parametrize(
    "ctype", ["text/plain", "application/x-www-form-urlencoded", "multipart/form-data"]
)
def test_non_json_content_type_gets_415(client: TestClient, path: str, ctype: str) -> None:
    r = client.post(path, content=b"{}", headers={"Content-Type": ctype})
    assert r.status_code == 415, r.text
    assert "application/json" in r.json()["detail"]


def test_json_content_types_and_no_header_pass_the_guard(client: TestClient) -> None:
    for headers in (
        {"Content-Type": "application/json; charset=utf-8"},
        {"Content-Type": "application/vnd.example+json"},
        {},
    ):
        r = client.post("/api/v1/alerts", content=_hook(), headers=headers)
        assert r.status_code == 200, (headers, r.text)


def test_rebound_host_refused_without_token(client: TestClient) -> None:
    r = client.get("/api/v1/alerts", headers={"Host": "rebind.evil.example:8000"})
    assert r.status_code == 403 and "DNS-rebinding" in r.json()["detail"]
    assert client.get("/healthz", headers={"Host": "fleetmind.ns.svc:8000"}).status_code == 200
    for host in ("127.0.0.1:8000", "localhost:8000", "[::1]:8000", "10.1.2.3", "fm.example.org"):
        assert client.get("/api/v1/alerts", headers={"Host": host}).status_code == 200, host


def test_host_check_follows_the_listen_address(tmp_path: Path) -> None:
    """A rebinding turns the operator's own browser against a service listening on loopback; a
    service started with --insecure on a network address is reached by Alertmanager at its
    Service name, which must not be refused (it already answers whoever reaches it)."""
    rebound = {"Host": "rebind.evil.example:8000"}
    with TestClient(create_app(_settings(tmp_path))) as local:  # FLEETMIND_BIND_HOST 127.0.0.1
        assert local.get("/api/v1/alerts", headers=rebound).status_code == 403
    network = create_app(_settings(tmp_path, bind_host="0.0.0.0"))
    with TestClient(network) as in_cluster:
        r = in_cluster.post(
            "/api/v1/alerts",
            content=_hook(),
            headers={"Host": "fleetmind.fleetmind.svc:8000", "Content-Type": "application/json"},
        )
        assert r.status_code == 200, r.text
    assert binds_loopback("127.0.0.1") and binds_loopback("[::1]") and binds_loopback("localhost")
    assert binds_loopback("::ffff:127.0.0.1")  # IPv4-mapped: not is_loopback on Python 3.11
    assert not binds_loopback("0.0.0.0") and not binds_loopback("::") and not binds_loopback("h")


def test_x_forwarded_for_does_not_lift_the_host_check(tmp_path: Path) -> None:
    """uvicorn's defaults (proxy_headers on, forwarded_allow_ips 127.0.0.1) rewrite the client
    address from ``X-Forwarded-For`` on a connection from 127.0.0.1, a header a rebinding page can
    set on its own (same-origin) fetch: the check must not depend on the client address."""
    import threading

    import httpx
    import uvicorn
    from serving_helpers import free_port, wait_for

    port = free_port()
    app = create_app(_settings(tmp_path))
    srv = uvicorn.Server(
        uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="on")
    )
    thread = threading.Thread(target=srv.run, daemon=True)
    thread.start()
    try:
        assert wait_for(lambda: srv.started, 20), "uvicorn did not start"
        spoofed = {"Host": "rebind.evil.example", "X-Forwarded-For": "8.8.8.8"}
        r = httpx.get(f"http://127.0.0.1:{port}/api/v1/alerts", headers=spoofed, timeout=10)
        assert r.status_code == 403, r.text
    finally:
        srv.should_exit = True
        thread.join(10)


def test_any_host_with_a_token(tmp_path: Path) -> None:
    app = create_app(_settings(tmp_path, api_token="a-long-enough-token-1234"))
    with TestClient(app) as c:
        r = c.get(
            "/api/v1/alerts",
            headers={"Host": "fm.corp.example", "Authorization": "Bearer a-long-enough-token-1234"},
        )
        assert r.status_code == 200


def test_rules() -> None:
    assert is_json_media_type("Application/JSON ; charset=utf-8")
    assert is_json_media_type("application/merge-patch+json")
    assert is_json_media_type("x/json") and not is_json_media_type("json")
    assert not is_json_media_type("text/plain") and not is_json_media_type("text/jsonx")
    assert split_host("[::1]:8000") == ("::1", 8000)
    assert split_host("LocalHost.") == ("localhost", None)
    assert host_allowed("app.localhost", None) and host_allowed("10.0.0.1", None)
    assert not host_allowed("127.0.0.1.nip.io", None)
    assert same_origin("http://fm:8000", "fm:8000", "http://127.0.0.1:8000")
    assert same_origin("https://fm.example", "fm.example", "http://127.0.0.1:8000")
    assert not same_origin("http://fm:8001", "fm:8000", "http://127.0.0.1:8000")
    assert not same_origin("null", "fm:8000", "http://127.0.0.1:8000")
