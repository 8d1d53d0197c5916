"""Slow and idle clients against ``fleetmind serve`` (a child process, real sockets): unfinished
headers are dropped within the header timeout, oversized headers get 431 before authentication,
idle sockets beyond the connection limit make room, and ``/healthz`` keeps answering throughout.

A few dozen sockets at most, a 2 s header timeout, under a minute in all.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator

import httpx
import pytest
from serving_helpers import Server, wait_for

TOKEN = "slow-clients-token"
HEADER_TIMEOUT_S = 2.0
LIMIT_CONCURRENCY = 20
MAX_CONNECTIONS = 30
AUTH = {"Authorization": f"Bearer {TOKEN}"}


@pytest.fixture(scope="module")
def url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    tmp = tmp_path_factory.mktemp("slow")
    env = {
        "FLEETMIND_DATABASE_URL": f"sqlite:///{tmp}/slow.db",
        "FLEETMIND_RCA_MODEL": "baseline:upstream-coverage",
        "FLEETMIND_PLACEMENT_MODEL": "heuristic:builtin-bestfit",
        "FLEETMIND_API_TOKEN": TOKEN,
        "FLEETMIND_HEADER_TIMEOUT_S": str(HEADER_TIMEOUT_S),
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


def _port(url: str) -> int:
    return int(url.rsplit(":", 1)[1])


def _connect(url: str, first: bytes = b"") -> socket.socket:
    s = socket.create_connection(("127.0.0.1", _port(url)), timeout=10)
    if first:
        s.sendall(first)
    return s


def _closed_by_server(s: socket.socket, within_s: float) -> bool:
    """Whether the server closes ``s`` within ``within_s`` (reads until EOF or the deadline)."""
    s.settimeout(within_s)
    try:
        while True:
            data = s.recv(65536)
            if not data:
                return True
    except TimeoutError:
        return False
    except ConnectionResetError:
        return True


def _closed_now(s: socket.socket) -> bool:
    return _closed_by_server(s, 0.05)


def test_unfinished_headers_are_dropped_and_healthz_answers(url: str) -> None:
    held = [_connect(url) for _ in range(LIMIT_CONCURRENCY - 1)]  # nothing sent at all
    partial = b"GET /api/v1/alerts HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer "
    held += [_connect(url, partial) for _ in range(5)]  # headers started, never finished
    trickle = _connect(url, b"G")
    try:
        for _ in range(5):
            assert _status(url + "/healthz") == 200
        assert _status(url + "/api/v1/alerts", headers=AUTH) == 200
        t0 = time.monotonic()
        for part in b"ET /healthz HTTP/1.1\r\nX-Slow: 1":  # one byte every 0.25 s
            if _closed_now(trickle) or time.monotonic() - t0 > 3 * HEADER_TIMEOUT_S:
                break
            try:
                trickle.sendall(bytes([part]))
            except OSError:
                break
            time.sleep(0.25)
        # every one of them is closed by the server once the header timeout has passed
        grace = HEADER_TIMEOUT_S + 3.0
        assert _closed_by_server(trickle, grace)
        assert all(_closed_by_server(s, grace) for s in held)
        assert _status(url + "/healthz") == 200
    finally:
        for s in [*held, trickle]:
            s.close()


def test_idle_sockets_beyond_the_limit_make_room(url: str) -> None:
    held = [_connect(url) for _ in range(MAX_CONNECTIONS + 10)]
    try:
        time.sleep(0.2)
        for _ in range(5):
            assert _status(url + "/healthz") == 200
        assert _status(url + "/api/v1/alerts", headers=AUTH) == 200
        closed = sum(_closed_by_server(s, 0.2) for s in held)
        assert closed >= 10  # the oldest idle ones made room
    finally:
        for s in held:
            s.close()


def test_oversized_headers_get_431_before_authentication(url: str) -> None:
    s = _connect(url)
    try:
        head = b"GET /api/v1/alerts HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * (256 * 1024)
        try:
            s.sendall(head)
        except OSError:
            pass  # closed while sending: the answer is read below
        s.settimeout(10)
        answer = b""
        try:
            while chunk := s.recv(65536):
                answer += chunk
        except (ConnectionResetError, TimeoutError):
            pass
        assert answer.startswith(b"HTTP/1.1 431"), answer[:100]
    finally:
        s.close()
    assert _status(url + "/healthz") == 200


def test_requests_in_progress_are_limited_but_probes_are_not(url: str) -> None:
    head = (
        "POST /api/v1/alerts HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        f"Authorization: Bearer {TOKEN}\r\nContent-Length: 100000\r\n\r\n"
    ).encode()
    stalled = [_connect(url, head + b'{"alerts": [') for _ in range(LIMIT_CONCURRENCY)]
    try:
        busy = wait_for(lambda: _status(url + "/api/v1/alerts", headers=AUTH) == 503, 10)
        assert busy, "the 21st request in progress was not refused"
        for probe in ("/healthz", "/readyz", "/metrics"):
            assert _status(url + probe) == 200, probe
    finally:
        for s in stalled:
            s.close()
    assert wait_for(lambda: _status(url + "/api/v1/alerts", headers=AUTH) == 200, 10)
