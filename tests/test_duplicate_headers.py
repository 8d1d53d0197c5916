"""A repeated ``Host``, ``Origin`` or ``Content-Type``, and an HTTP/1.1 request without ``Host``,
get 400 (``serving/origin_guard.py``).

RFC 9112 section 3.2: "A server MUST respond with a 400 (Bad Request) status code to any HTTP/1.1
request message that lacks a Host header field and to any request message that contains more than
one Host header field line". Starlette's ``Headers.get`` (and FastAPI, and ``json_when_undeclared``)
read the first copy of a header, the guard read the last: ``Host: evil.example.com`` then
``Host: localhost`` passed the DNS-rebinding check, and ``Content-Type: text/plain`` then
``application/json`` on the webhook stored the alert instead of a 415. The requests are built as
ASGI scopes (as uvicorn passes repeated headers: one ``(name, value)`` pair each) and sent through
the whole app.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from serving_helpers import alert, webhook

from fleetmind.serving.app import create_app
from fleetmind.serving.settings import Settings

TOKEN_FIELDS = ("api_token", "read_token", "ingest_token", "schedule_token", "admin_token")


@pytest.fixture
def client(tmp_path: Path) -> Iterator[TestClient]:
    settings = Settings(
        database_url=f"sqlite:///{tmp_path}/dh.db",
        rca_model="baseline:upstream-coverage",
        placement_model="heuristic:builtin-bestfit",
        incident_worker=False,
        bind_host="127.0.0.1",  # explicit: another test's `fleetmind serve` may leave it in the env
        **dict.fromkeys(TOKEN_FIELDS),
    )  # no token, loopback bind: the Host check applies
    with TestClient(create_app(settings)) as c:
        yield c


def _call(
    client: TestClient,
    headers: list[tuple[bytes, bytes]],
    method: str = "GET",
    path: str = "/api/v1/incidents",
    body: bytes = b"",
    http_version: str = "1.1",
) -> tuple[int, Any]:
    """(status, JSON answer or None) of one request sent to the app as uvicorn would."""
    sent: list[dict[str, Any]] = []
    chunks = [{"type": "http.request", "body": body, "more_body": False}]

    async def receive() -> dict[str, Any]:
        return chunks.pop(0) if chunks else {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    if body:
        headers = [*headers, (b"content-length", str(len(body)).encode())]
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": http_version,
        "method": method,
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": headers,
        "client": ("127.0.0.1", 5000),
        "server": ("127.0.0.1", 8000),
        "scheme": "http",
        "app": client.app,
        "state": {},
    }
    asyncio.run(client.app(scope, receive, send))  # type: ignore[arg-type]
    start = next(m for m in sent if m["type"] == "http.response.start")
    data = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    try:
        return start["status"], json.loads(data) if data else None
    except ValueError:
        return start["status"], None


EVIL, LOCAL = (b"host", b"evil.example.com"), (b"host", b"localhost")


def test_one_host_is_served_or_checked(client: TestClient) -> None:
    assert _call(client, [LOCAL])[0] == 200
    assert _call(client, [EVIL])[0] == 403  # the DNS-rebinding check


@pytest.mark.parametrize("hosts", [[EVIL, LOCAL], [LOCAL, EVIL], [LOCAL, LOCAL]])
def test_two_hosts_get_400(client: TestClient, hosts: list[tuple[bytes, bytes]]) -> None:
    status, answer = _call(client, hosts)
    assert status == 400 and "Host" in answer["detail"], answer
    status, _ = _call(client, hosts, path="/healthz")  # the probes too: RFC 9112 says any request
    assert status == 400


def test_an_http11_request_without_host_gets_400_and_http10_is_served(client: TestClient) -> None:
    status, answer = _call(client, [])
    assert status == 400 and "Host" in answer["detail"], answer
    assert _call(client, [], http_version="1.0")[0] == 200  # HTTP/1.0 may omit it
    assert _call(client, [], path="/healthz", http_version="1.0")[0] == 200


def test_two_content_types_get_400_and_store_nothing(client: TestClient) -> None:
    hook = json.dumps(webhook([alert({"alertname": "GPUHot", "node": "node-1"})])).encode()
    for first, second in ((b"text/plain", b"application/json"), (b"application/json",) * 2):
        headers = [LOCAL, (b"content-type", first), (b"content-type", second)]
        status, answer = _call(client, headers, "POST", "/api/v1/alerts", hook)
        assert status == 400 and "Content-Type" in answer["detail"], answer
    assert client.get("/api/v1/alerts").json() == []
    status, _ = _call(
        client, [LOCAL, (b"content-type", b"text/plain")], "POST", "/api/v1/alerts", hook
    )
    assert status == 415  # one declared type: the content-type check as before


def test_two_origins_get_400(client: TestClient) -> None:
    own = (b"origin", b"http://localhost")
    evil = (b"origin", b"http://evil.example")
    hook = json.dumps(webhook([alert({"alertname": "GPUHot", "node": "node-1"})])).encode()
    ctype = (b"content-type", b"application/json")
    for origins in ([evil, own], [own, evil]):
        status, answer = _call(client, [LOCAL, ctype, *origins], "POST", "/api/v1/alerts", hook)
        assert status == 400 and "Origin" in answer["detail"], answer
    assert client.get("/api/v1/alerts").json() == []
    assert _call(client, [LOCAL, ctype, own], "POST", "/api/v1/alerts", hook)[0] == 200


def test_other_repeated_headers_are_served(client: TestClient) -> None:
    """Only the three single-valued headers the checks read; a list-valued one (``Accept``) may
    repeat (RFC 9110 section 5.3)."""
    headers = [LOCAL, (b"accept", b"application/json"), (b"accept", b"*/*"), (b"x-a", b"1")]
    assert _call(client, [*headers, (b"x-a", b"2")])[0] == 200


def test_the_test_client_still_works(client: TestClient) -> None:
    """Starlette's TestClient sends one ``Host: testserver``."""
    assert client.get("/api/v1/incidents").status_code == 200
    r = client.post("/api/v1/alerts", json=webhook([alert({"alertname": "A", "node": "n"})]))
    assert r.status_code == 200, r.text
