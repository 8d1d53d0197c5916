"""Request bodies that stop arriving, against ``fleetmind serve`` (a child process, real sockets):
each gets ``408 Request Timeout`` once ``FLEETMIND_BODY_TIMEOUT_S`` passes without a body byte,
its connection is closed, and the request slots and connections it held serve others again; a
body that keeps trickling in is never cut, however long it takes in total.

The deadline is a time between two reads, as nginx's ``client_body_timeout``
(https://nginx.org/en/docs/http/ngx_http_core_module.html#client_body_timeout); 408 is RFC 9110
section 15.5.9. uvicorn itself has no body timeout (Kludex/uvicorn issue 157).
"""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import uvicorn
from serving_helpers import Server, free_port, wait_for

from fleetmind.serving.http_guard import STALLED_S, ConnectionLimits, GuardedHttpToolsProtocol

TOKEN = "body-deadline-token-0123"
BODY_TIMEOUT_S = 0.5
LIMIT_CONCURRENCY = 4
MAX_CONNECTIONS = 6
AUTH = {"Authorization": f"Bearer {TOKEN}"}
LOGIN_HEAD = (
    b"POST /ui/login HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-www-form-urlencoded\r\n"
    b"Content-Length: 10000\r\n\r\ncsrf="
)


@pytest.fixture(scope="module")
def url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    tmp = tmp_path_factory.mktemp("body")
    env = {
        "FLEETMIND_DATABASE_URL": f"sqlite:///{tmp}/body.db",
        "FLEETMIND_RCA_MODEL": "baseline:upstream-coverage",
        "FLEETMIND_PLACEMENT_MODEL": "heuristic:builtin-bestfit",
        "FLEETMIND_API_TOKEN": TOKEN,
        "FLEETMIND_BODY_TIMEOUT_S": str(BODY_TIMEOUT_S),
        "FLEETMIND_LIMIT_CONCURRENCY": str(LIMIT_CONCURRENCY),
        "FLEETMIND_MAX_CONNECTIONS": str(MAX_CONNECTIONS),
    }
    server = Server(env, log=tmp / "serve.log", cli=True)
    try:
        server.start(timeout=90)
    except RuntimeError as err:
        pytest.fail(f"fleetmind serve not ready: {err}: " + (tmp / "serve.log").read_text()[-2000:])
    try:
        yield server.url
    finally:
        server.stop()


def _status(url: str, **kw: object) -> int | None:
    try:
        return httpx.get(url, timeout=5, **kw).status_code  # type: ignore[arg-type]
    except httpx.HTTPError:
        return None


def _connect(url: str, first: bytes) -> socket.socket:
    s = socket.create_connection(("127.0.0.1", int(url.rsplit(":", 1)[1])), timeout=10)
    s.sendall(first)
    return s


def _answer(s: socket.socket, within_s: float) -> bytes | None:
    """Everything the server sends until it closes ``s``; ``None``: still open after
    ``within_s``."""
    s.settimeout(within_s)
    got = b""
    try:
        while data := s.recv(65536):
            got += data
    except TimeoutError:
        return None
    except ConnectionResetError:
        pass
    return got


def test_a_stalled_form_body_gets_408_and_is_closed(url: str) -> None:
    s = _connect(url, LOGIN_HEAD)
    try:
        t0 = time.monotonic()
        answer = _answer(s, BODY_TIMEOUT_S + 3)
        assert answer is not None, "a stalled body was never timed out"
        assert answer.startswith(b"HTTP/1.1 408"), answer[:100]
        assert time.monotonic() - t0 >= BODY_TIMEOUT_S * 0.8
    finally:
        s.close()


def test_a_stalled_json_body_on_an_api_route_gets_408(url: str) -> None:
    head = (
        "POST /api/v1/rca HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        f"Authorization: Bearer {TOKEN}\r\nContent-Length: 5000\r\n\r\n"
    ).encode()
    s = _connect(url, head + b'{"alerts": [')
    try:
        answer = _answer(s, BODY_TIMEOUT_S + 3)
        assert answer is not None and answer.startswith(b"HTTP/1.1 408"), answer
    finally:
        s.close()


def test_stalled_bodies_free_the_request_slots(url: str) -> None:
    held = [_connect(url, LOGIN_HEAD) for _ in range(LIMIT_CONCURRENCY + 2)]
    try:
        # within the deadline the slots (and connections) are taken; after it they serve again
        ok = wait_for(lambda: _status(url + "/api/v1/incidents", headers=AUTH) == 200, 4)
        assert ok, "stalled bodies still hold every request slot"
        assert _status(url + "/healthz") == 200
        assert _status(url + "/readyz") == 200
        assert all(_answer(s, 2) is not None for s in held)
    finally:
        for s in held:
            s.close()


def test_a_body_that_keeps_arriving_is_never_cut(url: str) -> None:
    body = b'{"alerts": []}' + b" " * 16  # 30 bytes, one every 0.1 s: 3 s, six deadlines
    head = (
        "POST /api/v1/alerts HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        f"Authorization: Bearer {TOKEN}\r\nContent-Length: {len(body)}\r\n\r\n"
    ).encode()
    s = _connect(url, head)
    try:
        for i in range(len(body)):
            time.sleep(BODY_TIMEOUT_S / 5)
            s.sendall(body[i : i + 1])
        s.settimeout(5)
        answer = s.recv(65536)
        assert answer.startswith(b"HTTP/1.1 200"), answer[:200]
    finally:
        s.close()


class _LongDeadline(GuardedHttpToolsProtocol):
    limits = ConnectionLimits(
        header_timeout_s=10.0, max_header_bytes=32 * 1024, max_connections=4, body_timeout_s=60.0
    )


async def _drain_and_answer(scope, receive, send) -> None:  # type: ignore[no-untyped-def]
    more = scope["type"] == "http"
    while more:
        more = (await receive()).get("more_body", False)
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": b"ok"})


def test_a_full_table_of_stalled_bodies_makes_room_before_the_deadline() -> None:
    """Four connections (the limit) stalled in their bodies, a 60 s body timeout: a new connection
    (a probe) is still served, the longest-stalled body getting its 408 early."""
    port = free_port()
    config = uvicorn.Config(
        _drain_and_answer,
        host="127.0.0.1",
        port=port,
        http=_LongDeadline,
        lifespan="off",
        log_level="warning",
    )
    srv = uvicorn.Server(config)
    thread = threading.Thread(target=srv.run, daemon=True)
    thread.start()
    try:
        assert wait_for(lambda: srv.started, 20), "uvicorn did not start"
        base = f"http://127.0.0.1:{port}"
        held = [_connect(base, LOGIN_HEAD) for _ in range(4)]
        time.sleep(STALLED_S + 0.3)
        with socket.create_connection(("127.0.0.1", port), timeout=5) as probe:
            probe.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            assert _answer(probe, 5).startswith(b"HTTP/1.1 200")
        answers = [_answer(s, 0.5) for s in held]
        cut = [a for a in answers if a is not None]
        assert len(cut) == 1 and cut[0].startswith(b"HTTP/1.1 408"), answers  # the others wait
        for s in held:
            s.close()
    finally:
        srv.should_exit = True
        thread.join(10)


class _ShortDeadline(GuardedHttpToolsProtocol):
    limits = ConnectionLimits(10.0, 32768, 1000, 0.5)


async def _slow_or_drain(scope: Any, receive: Any, send: Any) -> None:
    """``/slow`` streams two chunks 1.5 s apart (after reading its empty body, as the service's
    body-limit middleware does); anything else drains its body and answers ``ok``."""
    if scope["type"] != "http":
        return
    msg = await receive()
    if scope["path"] == "/slow":
        head = [(b"content-type", b"text/plain"), (b"transfer-encoding", b"chunked")]
        await send({"type": "http.response.start", "status": 200, "headers": head})
        await send({"type": "http.response.body", "body": b"part1-", "more_body": True})
        await asyncio.sleep(1.5)
        await send({"type": "http.response.body", "body": b"part2", "more_body": False})
        return
    while msg.get("more_body"):
        msg = await receive()
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": b"ok"})


def test_a_pipelined_body_never_cuts_into_the_answer_before_it() -> None:
    """A request pipelined behind one whose answer is still streaming waits for the server, not
    the client: a 408 for its stalled body went out in the middle of the earlier chunked answer
    (RFC 9112 section 9.3.2: answers go out in the order of the requests)."""
    port = free_port()
    config = uvicorn.Config(
        _slow_or_drain, host="127.0.0.1", port=port, http=_ShortDeadline, lifespan="off"
    )
    srv = uvicorn.Server(config)
    thread = threading.Thread(target=srv.run, daemon=True)
    thread.start()
    try:
        assert wait_for(lambda: srv.started, 20), "uvicorn did not start"
        with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
            s.sendall(
                b"GET /slow HTTP/1.1\r\nHost: x\r\n\r\n"
                b"POST /up HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\nabc"
            )
            got = b""
            deadline = time.monotonic() + 6
            while b"part2" not in got and time.monotonic() < deadline:
                try:
                    chunk = s.recv(65536)
                except TimeoutError:
                    break
                if not chunk:
                    break
                got += chunk
        first = got.split(b"0\r\n\r\n", 1)[0]
        assert b"part1-" in first and b"part2" in first, got  # the chunked answer is whole
        assert b"408" not in first, got
    finally:
        srv.should_exit = True
        thread.join(10)
