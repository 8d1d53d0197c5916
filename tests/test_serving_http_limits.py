"""The header size limit of :mod:`fleetmind.serving.http_guard` against a real uvicorn server (the
guarded httptools protocol in a thread, raw sockets): the request line plus headers are measured
exactly whatever the read boundaries, each request of a keep-alive or pipelined connection on its
own, and an oversized one gets 431 (RFC 6585 section 5) before the app sees it.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

import pytest
import uvicorn
from serving_helpers import free_port

from fleetmind.serving.http_guard import ConnectionLimits, GuardedHttpToolsProtocol

LIMIT = 32 * 1024


@dataclass
class _App:
    """A tiny ASGI app that records the paths it was asked for and answers 200."""

    paths: list[str] = field(default_factory=list)

    async def __call__(self, scope, receive, send) -> None:  # type: ignore[no-untyped-def]
        assert scope["type"] == "http"
        self.paths.append(scope["path"])
        more = True
        while more:
            more = (await receive()).get("more_body", False)
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})


class _Limited(GuardedHttpToolsProtocol):
    limits = ConnectionLimits(header_timeout_s=10.0, max_header_bytes=LIMIT, max_connections=100)


@pytest.fixture(scope="module")
def server() -> Iterator[tuple[int, _App]]:
    app = _App()
    port = free_port()
    config = uvicorn.Config(
        app, host="127.0.0.1", port=port, http=_Limited, lifespan="off", log_level="warning"
    )
    srv = uvicorn.Server(config)
    thread = threading.Thread(target=srv.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not srv.started and time.monotonic() < deadline:
        time.sleep(0.02)
    assert srv.started, "uvicorn did not start"
    yield port, app
    srv.should_exit = True
    thread.join(10)


def _head(size: int, path: str = "/h", close: bool = True) -> bytes:
    """A GET whose request line plus headers (final CRLFCRLF included) are ``size`` bytes."""
    start = f"GET {path} HTTP/1.1\r\nHost: x\r\n".encode()
    end = b"Connection: close\r\n\r\n" if close else b"\r\n"
    pad = size - len(start) - len(end) - len(b"X-Big: \r\n")
    head = start + b"X-Big: " + b"a" * pad + b"\r\n" + end
    assert len(head) == size
    return head


def _exchange(port: int, *parts: bytes) -> bytes:
    """Send ``parts`` one write each (a short pause between them) and read until the server
    closes the connection."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        for i, part in enumerate(parts):
            if i:
                time.sleep(0.15)  # its own read on the server
            try:
                s.sendall(part)
            except OSError:
                break  # closed while sending: the answer is read below
        answer = b""
        try:
            while chunk := s.recv(65536):
                answer += chunk
        except (ConnectionResetError, TimeoutError):
            pass
    return answer


def _statuses(answer: bytes) -> list[int]:
    return [int(line[9:12]) for line in answer.split(b"\r\n") if line.startswith(b"HTTP/1.1 ")]


@pytest.mark.parametrize("size", [LIMIT + 1, 33_000, 60_000, 120_000])
def test_oversized_head_in_one_write_gets_431(server: tuple[int, _App], size: int) -> None:
    port, app = server
    path = f"/one-{size}"
    assert _statuses(_exchange(port, _head(size, path))) == [431]
    assert path not in app.paths


@pytest.mark.parametrize("cut", [20, 33_000, LIMIT - 1, LIMIT + 1, -3, -2, -1])
def test_oversized_head_split_anywhere_gets_431(server: tuple[int, _App], cut: int) -> None:
    port, app = server
    path = f"/split-{cut}"
    head = _head(LIMIT + 1, path)
    assert _statuses(_exchange(port, head[:cut], head[cut:])) == [431]
    assert path not in app.paths


@pytest.mark.parametrize("cut", [0, 20, LIMIT // 2, -3, -2, -1])
def test_head_of_exactly_the_limit_is_served(server: tuple[int, _App], cut: int) -> None:
    port, app = server
    path = f"/exact-{cut}"
    head = _head(LIMIT, path)
    parts = (head[:cut], head[cut:]) if cut else (head,)
    assert _statuses(_exchange(port, *parts)) == [200]
    assert path in app.paths


def test_pipelined_requests_are_measured_each_on_its_own(server: tuple[int, _App]) -> None:
    port, app = server
    first, second = _head(LIMIT - 100, "/pipe-1", close=False), _head(LIMIT - 100, "/pipe-2")
    assert _statuses(_exchange(port, first + second)) == [200, 200]  # 64 KiB in one write
    big = _head(LIMIT + 1, "/pipe-big")
    assert _statuses(_exchange(port, first + big)) == [200, 431]  # in request order
    assert "/pipe-big" not in app.paths


def test_keep_alive_requests_are_measured_each_on_its_own(server: tuple[int, _App]) -> None:
    port, _ = server
    first, second = _head(LIMIT - 100, "/ka-1", close=False), _head(LIMIT - 100, "/ka-2")
    assert _statuses(_exchange(port, first, second)) == [200, 200]
    cut = len(first) + 10  # the second head begins in the first read
    both = first + second
    assert _statuses(_exchange(port, both[:cut], both[cut:])) == [200, 200]


def test_head_after_a_body_in_the_same_read_is_measured_from_its_start(
    server: tuple[int, _App],
) -> None:
    port, app = server
    body = b"b" * 40_000  # larger than the limit: only the head after it may count
    post = b"POST /body HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % len(body) + body
    assert _statuses(_exchange(port, post + _head(LIMIT, "/after-body"))) == [200, 200]
    assert _statuses(_exchange(port, post + _head(LIMIT + 1, "/after-body-big"))) == [200, 431]
    chunked = b"POST /chunked HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
    chunked += b"%x\r\n" % len(body) + body + b"\r\n0\r\n\r\n"
    assert _statuses(_exchange(port, chunked + _head(LIMIT, "/after-chunked"))) == [200, 200]
    big = _head(LIMIT + 1, "/after-chunked-big")
    assert _statuses(_exchange(port, chunked + big)) == [200, 431]
    assert "/after-body-big" not in app.paths and "/after-chunked-big" not in app.paths
