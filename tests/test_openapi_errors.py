"""The refusals middleware and the connection guard give before any route runs are in the
published spec and answered as it says: ``/openapi.json`` lists 408, 413 and 415 on every operation
with a request body and on every unsafe method under ``/api/v1/`` (a body sent to
``POST /api/v1/models/reload`` is refused as well), and 429 with ``Retry-After`` on every operation
that needs a token; a request with neither ``Content-Length`` nor ``Transfer-Encoding`` has no body
(RFC 9112 section 6.3), so its ``Content-Encoding`` is not refused; a body with
a ``Content-Encoding`` other than ``identity`` gets 415 (RFC 9110 sections 8.4.1 and 15.5.16, with
``Accept-Encoding``), where a gzip body was parsed as JSON text (a 422 quoting the compressed bytes)
and a plain body labelled ``br`` was taken; the guard's 408 and 431 under ``/api/`` are JSON
``{"detail": ...}`` as every other API refusal, plain text elsewhere, and so is uvicorn's 400 for
a request its parser rejects.

Alertmanager and kube-scheduler send no ``Content-Encoding``: Alertmanager's webhook notifier
posts the JSON as is (prometheus/alertmanager ``notify/webhook/webhook.go`` through
``notify/util.go`` ``PostJSON``, which sets only ``Content-Type: application/json``), and so does
kube-scheduler's extender client (kubernetes ``pkg/scheduler/extender.go``, ``HTTPExtender.send``:
``json.Marshal``, ``http.NewRequest``, ``Content-Type: application/json``); Go's ``net/http``
never compresses a request body (its ``Transport`` asks for gzip answers only).
"""

from __future__ import annotations

import gzip
import json
import os
import re
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import uvicorn
from fastapi.testclient import TestClient
from serving_helpers import free_port, wait_for

from fleetmind.serving.app import create_app
from fleetmind.serving.deps import route_scope
from fleetmind.serving.http_guard import ConnectionLimits, GuardedHttpToolsProtocol
from fleetmind.serving.origin_guard import has_body
from fleetmind.serving.schemas import ErrorOut
from fleetmind.serving.settings import Settings

os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")

TOKEN = "errors-token-0123456789"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
LIMIT = 2048  # bytes: every body limit of the app under test
METHODS = ("get", "head", "post", "put", "patch", "delete")
RCA_BODY = {"alerts": [{"labels": {"alertname": "KubePodCrashLooping", "namespace": "ml"}}]}


def _app(tmp_path: Path, **kw: Any) -> Any:
    base: dict[str, Any] = {
        "database_url": f"sqlite:///{tmp_path}/errors.db",
        "rca_model": "baseline:upstream-coverage",
        "placement_model": "heuristic:builtin-bestfit",
        "incident_worker": False,
        "api_token": TOKEN,
        "max_body_bytes": LIMIT,
        "max_webhook_bytes": LIMIT,
        "max_scheduler_bytes": LIMIT,
    }
    base.update(kw)
    return create_app(Settings(**base))


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Any, TestClient, dict]]:
    app = _app(tmp_path_factory.mktemp("errors"))
    with TestClient(app) as client:
        spec = client.get("/openapi.json", headers=AUTH).json()
        yield app, client, spec


def _operations(spec: dict[str, Any]) -> list[tuple[str, str, dict[str, Any]]]:
    return [
        (method, path, op)
        for path, ops in spec["paths"].items()
        for method, op in ops.items()
        if method in METHODS
    ]


def _body_operations(spec: dict[str, Any]) -> list[tuple[str, str]]:
    return [(m, p) for m, p, op in _operations(spec) if "requestBody" in op]


def _concrete(path: str) -> str:
    return re.sub(r"\{[^}]+\}", "1", path)


def _error_schema(spec: dict[str, Any]) -> dict[str, Any]:
    return {**spec["components"]["schemas"]["ErrorOut"], "components": spec["components"]}


def test_every_body_operation_documents_408_413_415(served: tuple[Any, TestClient, dict]) -> None:
    _, _, spec = served
    bodies = _body_operations(spec)
    assert len(bodies) >= 8, bodies  # rca, placements, extender x3, webhook, graph, feedback
    for method, path in bodies:
        responses = spec["paths"][path][method]["responses"]
        for code in ("408", "413", "415"):
            assert code in responses, f"{method.upper()} {path} lacks {code}"
            ref = responses[code]["content"]["application/json"]["schema"]
            assert ref == {"$ref": "#/components/schemas/ErrorOut"}, (method, path, code)
        assert "Content-Encoding" in responses["415"]["description"]
        assert "Accept-Encoding" in responses["415"]["headers"]

    # each 413 names the limit BodyLimitMiddleware applies to that route
    def limit_of(path: str) -> str:
        return spec["paths"][path]["post"]["responses"]["413"]["description"]

    assert "FLEETMIND_MAX_WEBHOOK_BYTES" in limit_of("/api/v1/alerts")
    assert "FLEETMIND_MAX_SCHEDULER_BYTES" in limit_of("/api/v1/scheduler/filter")
    assert "FLEETMIND_MAX_BODY_BYTES" in limit_of("/api/v1/rca")


def test_429_with_retry_after_exactly_where_a_token_is_checked(
    served: tuple[Any, TestClient, dict],
) -> None:
    app, _, spec = served
    for method, path, op in _operations(spec):
        scope = {"type": "http", "path": _concrete(path), "method": method.upper()}
        public = route_scope(app, scope) == "public"
        responses = op["responses"]
        if public:  # AuthMiddleware never throttles the probes
            assert "429" not in responses, f"{method.upper()} {path}"
            continue
        answer = responses.get("429")
        assert answer is not None, f"{method.upper()} {path} lacks 429"
        header = answer["headers"]["Retry-After"]
        assert header["required"] is True and header["schema"]["type"] == "integer"
    rca = spec["paths"]["/api/v1/rca"]["post"]["responses"]["429"]["description"]
    assert "FLEETMIND_RCA_MAX_QUEUE" in rca  # the RCA queue's own 429


def test_an_oversized_body_gets_the_documented_413(served: tuple[Any, TestClient, dict]) -> None:
    _, client, spec = served
    big = json.dumps({"pad": "x" * (LIMIT + 10)})
    for method, path in _body_operations(spec):
        r = client.request(
            method.upper(),
            _concrete(path),
            content=big,
            headers={**AUTH, "Content-Type": "application/json"},
        )
        assert r.status_code == 413, (method, path, r.status_code, r.text[:200])
        jsonschema.validate(r.json(), _error_schema(spec))


@pytest.mark.parametrize("coding", ["gzip", "br", " GZIP ", "identity, deflate", "x-gzip"])
def test_a_coded_body_gets_415_on_every_body_route(
    served: tuple[Any, TestClient, dict], coding: str
) -> None:
    _, client, spec = served
    raw = json.dumps(RCA_BODY).encode()
    body = gzip.compress(raw, mtime=0) if "gzip" in coding.lower() else raw
    for method, path in _body_operations(spec):
        headers = {**AUTH, "Content-Type": "application/json", "Content-Encoding": coding}
        r = client.request(method.upper(), _concrete(path), content=body, headers=headers)
        assert r.status_code == 415, (method, path, coding, r.status_code, r.text[:200])
        jsonschema.validate(r.json(), _error_schema(spec))
        assert "Content-Encoding" in r.json()["detail"]
        assert "\\u001f" not in r.text and "\x1f" not in r.text  # no gzip bytes echoed
        assert r.headers["accept-encoding"] == "identity"


@pytest.mark.parametrize("coding", [None, "identity", " Identity ", ""])
def test_an_uncoded_body_is_served(
    served: tuple[Any, TestClient, dict], coding: str | None
) -> None:
    _, client, _ = served
    headers = {**AUTH, "Content-Type": "application/json"}
    if coding is not None:
        headers["Content-Encoding"] = coding
    r = client.post("/api/v1/rca", content=json.dumps(RCA_BODY), headers=headers)
    assert r.status_code == 200, r.text[:300]


def test_wrong_tokens_get_the_documented_429(tmp_path: Path) -> None:
    app = _app(tmp_path, auth_failure_limit=2, auth_failure_window_s=60.0)
    with TestClient(app, client=("203.0.113.5", 4000)) as client:  # RFC 5737 address
        spec = client.get("/openapi.json", headers=AUTH).json()
        wrong = {"Authorization": "Bearer not-the-token-0123456789"}
        assert [client.get("/api/v1/alerts", headers=wrong).status_code for _ in range(2)] == [
            401,
            401,
        ]
        r = client.post("/api/v1/rca", json=RCA_BODY, headers=AUTH)
        assert r.status_code == 429 and int(r.headers["retry-after"]) >= 1
        jsonschema.validate(r.json(), _error_schema(spec))


# ---------------------------------------------------------------- the connection guard's answers
class _Guard(GuardedHttpToolsProtocol):
    limits = ConnectionLimits(10.0, 4096, 1000, 0.3)  # 4 KiB heads, 0.3 s body timeout


async def _drain(scope: Any, receive: Any, send: Any) -> None:
    more = scope["type"] == "http"
    while more:
        message = await receive()
        if message["type"] == "http.disconnect":
            return
        more = message.get("more_body", False)
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": b"ok"})


@pytest.fixture(scope="module")
def guard_port() -> Iterator[int]:
    port = free_port()
    config = uvicorn.Config(
        _drain, host="127.0.0.1", port=port, http=_Guard, lifespan="off", log_level="warning"
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        assert wait_for(lambda: server.started, 20), "uvicorn did not start"
        yield port
    finally:
        server.should_exit = True
        thread.join(10)


def _exchange(port: int, data: bytes, within_s: float = 5.0) -> tuple[int, dict[str, str], bytes]:
    """Send ``data``, read until the server closes; (status, headers, body)."""
    with socket.create_connection(("127.0.0.1", port), timeout=within_s) as s:
        s.sendall(data)
        got = b""
        deadline = time.monotonic() + within_s
        while time.monotonic() < deadline:
            try:
                chunk = s.recv(65536)
            except (TimeoutError, ConnectionResetError):
                break
            if not chunk:
                break
            got += chunk
    head, _, body = got.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = dict(line.split(": ", 1) for line in lines[1:] if ": " in line)
    return int(lines[0].split()[1]), {k.lower(): v for k, v in headers.items()}, body


def _stalled(path: str) -> bytes:
    return (
        f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        'Content-Length: 500\r\n\r\n{"alerts": ['
    ).encode()


def test_a_stalled_api_body_gets_a_json_408(guard_port: int) -> None:
    status, headers, body = _exchange(guard_port, _stalled("/api/v1/rca"))
    assert status == 408
    assert "date" in headers and headers.get("server") == "uvicorn", headers  # RFC 9110 6.6.1
    assert headers["content-type"] == "application/json"
    assert int(headers["content-length"]) == len(body)
    ErrorOut.model_validate_json(body)
    assert "no request body byte" in json.loads(body)["detail"]


def test_a_stalled_form_body_keeps_its_plain_408(guard_port: int) -> None:
    status, headers, body = _exchange(guard_port, _stalled("/ui/login"))
    assert status == 408 and headers["content-type"].startswith("text/plain")
    assert body.startswith(b"no request body byte")


@pytest.mark.parametrize(("path", "is_json"), [("/api/v1/alerts", True), ("/healthz", False)])
def test_431_is_json_under_the_api_only(guard_port: int, path: str, is_json: bool) -> None:
    head = f"GET {path} HTTP/1.1\r\nHost: x\r\nX-Pad: {'p' * 5000}\r\n\r\n".encode()
    status, headers, body = _exchange(guard_port, head)
    assert status == 431
    assert "date" in headers and headers.get("server") == "uvicorn", headers  # RFC 9110 6.6.1
    if is_json:
        assert headers["content-type"] == "application/json"
        assert "larger than 4096 bytes" in ErrorOut.model_validate_json(body).detail
    else:
        assert headers["content-type"].startswith("text/plain")


# ------------------------------------------- operations that read no body, and bodies of none
def test_every_unsafe_api_v1_operation_documents_408_413_415(
    served: tuple[Any, TestClient, dict],
) -> None:
    """OriginGuard, BodyLimitMiddleware and the guard's body timeout apply to a body sent to any
    POST/PUT/PATCH/DELETE under /api/v1/, whether or not its route reads one."""
    _, _, spec = served
    unsafe = [
        (m, p, op)
        for m, p, op in _operations(spec)
        if m in ("post", "put", "patch", "delete") and p.startswith("/api/v1/")
    ]
    assert ("post", "/api/v1/models/reload") in [(m, p) for m, p, _ in unsafe]
    for method, path, op in unsafe:
        for code in ("408", "413", "415"):
            assert code in op["responses"], f"{method.upper()} {path} lacks {code}"
    reload_415 = spec["paths"]["/api/v1/models/reload"]["post"]["responses"]["415"]
    assert "reads no body" in reload_415["description"]


def _without_length(client: TestClient, path: str, headers: dict[str, str]) -> Any:
    """POST ``path`` with no Content-Length and no Transfer-Encoding (as ``curl -X POST`` sends
    it): httpx adds ``Content-Length: 0`` to a POST without content, so it is taken out."""
    request = client.build_request("POST", path, headers=headers)
    del request.headers["content-length"]
    assert "transfer-encoding" not in request.headers
    return client.send(request)


@pytest.mark.parametrize(
    "extra",
    [{"Content-Encoding": "gzip"}, {"Content-Type": "text/plain"}, {"Content-Encoding": "br"}],
)
def test_a_post_without_a_body_is_not_refused_for_its_labels(
    served: tuple[Any, TestClient, dict], extra: dict[str, str]
) -> None:
    """RFC 9112 section 6.3: a request with neither Content-Length nor Transfer-Encoding has no
    body, so there is nothing whose type or coding could be refused (was 415)."""
    _, client, _ = served
    r = _without_length(client, "/api/v1/models/reload", {**AUTH, **extra})
    assert r.status_code == 200, (extra, r.status_code, r.text[:200])


def test_a_body_sent_to_reload_gets_the_documented_415(
    served: tuple[Any, TestClient, dict],
) -> None:
    _, client, spec = served
    for headers in ({"Content-Type": "text/plain"}, {"Content-Encoding": "gzip"}):
        r = client.post("/api/v1/models/reload", content=b"x", headers={**AUTH, **headers})
        assert r.status_code == 415, (headers, r.status_code, r.text[:200])
        jsonschema.validate(r.json(), _error_schema(spec))


@pytest.mark.parametrize(
    ("headers", "version", "expected"),
    [
        ({}, "1.1", False),
        ({b"content-length": "0"}, "1.1", False),
        ({b"content-length": " 00 "}, "1.0", False),
        ({b"content-length": "3"}, "1.1", True),
        ({b"content-length": "10"}, "1.1", True),
        ({b"transfer-encoding": "chunked"}, "1.1", True),
        ({}, "2", True),  # HTTP/2 frames a body without either field
    ],
)
def test_has_body_follows_rfc_9112(headers: dict[bytes, str], version: str, expected: bool) -> None:
    assert has_body(headers, {"http_version": version}) is expected


# ------------------------------------------------------------- uvicorn's 400 for a bad request
BAD_HEADS = {
    "space in a header name": "Host: x\r\nBad Name: 1\r\n\r\n",
    "two Content-Length values": "Host: x\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab",
}
"""Heads llhttp (httptools, uvicorn's parser) rejects after the request line: uvicorn answers
``400 Invalid HTTP request received.`` (uvicorn ``protocols/http/httptools_impl.py``,
``data_received``)."""


@pytest.mark.parametrize("bad", sorted(BAD_HEADS))
@pytest.mark.parametrize(("path", "is_json"), [("/api/v1/alerts", True), ("/ui/fleet", False)])
def test_an_unparsable_request_gets_a_json_400_under_the_api_only(
    guard_port: int, bad: str, path: str, is_json: bool
) -> None:
    data = f"POST {path} HTTP/1.1\r\n{BAD_HEADS[bad]}".encode()
    status, headers, body = _exchange(guard_port, data)
    assert status == 400
    assert int(headers["content-length"]) == len(body)
    # uvicorn's own 400 carries its default headers; a server with a clock sends Date on every
    # answer (RFC 9110 section 6.6.1)
    assert "date" in headers and headers.get("server") == "uvicorn", headers
    if is_json:
        assert headers["content-type"] == "application/json"
        assert ErrorOut.model_validate_json(body).detail == "Invalid HTTP request received."
    else:
        assert headers["content-type"].startswith("text/plain")
        assert body == b"Invalid HTTP request received."


def test_a_bad_request_after_an_api_one_does_not_borrow_its_target(guard_port: int) -> None:
    """A keep-alive connection: the 400 for a bad request line after a request under /api/ is
    plain text, as the target of the bad request was never read."""
    ok = b"GET /api/v1/alerts HTTP/1.1\r\nHost: x\r\n\r\n"
    with socket.create_connection(("127.0.0.1", guard_port), timeout=5.0) as s:
        s.sendall(ok)
        first = s.recv(65536)
        assert first.startswith(b"HTTP/1.1 200"), first
        s.sendall(b"G@T /api/v1/alerts HTTP/1.1\r\nHost: x\r\n\r\n")
        got = b""
        while chunk := s.recv(65536):
            got += chunk
    assert got.startswith(b"HTTP/1.1 400"), got
    assert b"content-type: text/plain" in got.lower()
