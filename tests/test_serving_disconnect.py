"""A client that goes away in the middle of its request body, against a real uvicorn server.

Starlette raises ``ClientDisconnect`` from ``Request.body()``/``stream()`` when the ASGI server
reports ``http.disconnect`` before the body is complete. Four routes read their bodies themselves
and let it escape: uvicorn logged "Exception in ASGI application" with a ~78-line traceback per
disconnect and ``/metrics`` counted a 500 (which can page the service's own 5xx alert). The
request is now recorded as nginx's 499 "client closed request", with nothing logged.
"""

from __future__ import annotations

import logging
import re
import socket
import threading
import time
from collections.abc import Iterator

import httpx
import pytest
import uvicorn
from serving_helpers import free_port

from fleetmind.serving.app import create_app
from fleetmind.serving.http_guard import server_options
from fleetmind.serving.settings import Settings

ROUTES = [
    ("POST", "/api/v1/alerts", "application/json"),
    ("POST", "/api/v1/rca", "application/json"),
    ("POST", "/api/v1/scheduler/filter", "application/json"),
    ("POST", "/ui/login", "application/x-www-form-urlencoded"),
]


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[int]:
    d = tmp_path_factory.mktemp("disconnect")
    settings = Settings(
        database_url=f"sqlite:///{d}/d.db",
        rca_model="baseline:upstream-coverage",
        placement_model="heuristic:builtin-bestfit",
        incident_worker=False,
    )
    port = free_port()
    config = uvicorn.Config(create_app(settings), host="127.0.0.1", port=port,
                            log_level="warning", **server_options(settings))  # fmt: skip
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 60
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.05)
    assert server.started, "uvicorn did not start"
    yield port
    server.should_exit = True
    thread.join(10)


def _statuses(port: int, route: str) -> dict[str, float]:
    text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=10).text
    pattern = (
        r'fleetmind_http_request_duration_seconds_count\{method="POST",route="'
        + re.escape(route)
        + r'",status="(\d+)"\} (\S+)'
    )
    return {m.group(1): float(m.group(2)) for m in re.finditer(pattern, text)}


@pytest.mark.parametrize(("method", "path", "ctype"), ROUTES)
def test_a_client_gone_mid_body_is_499_without_a_traceback(
    served: int, method: str, path: str, ctype: str, caplog: pytest.LogCaptureFixture
) -> None:
    head = f"{method} {path} HTTP/1.1\r\nHost: x\r\ncontent-type: {ctype}\r\n"
    with caplog.at_level(logging.ERROR):
        with socket.create_connection(("127.0.0.1", served), timeout=10) as s:
            s.sendall(
                head.encode() + b"content-length: 100000\r\n\r\n" + b'{"alerts": [' + b" " * 2000
            )
            time.sleep(0.1)
        deadline = time.monotonic() + 20
        while _statuses(served, path).get("499", 0) < 1 and time.monotonic() < deadline:
            time.sleep(0.05)
    seen = _statuses(served, path)
    assert seen.get("499", 0) >= 1 and "500" not in seen, seen
    assert not [r for r in caplog.records if "Exception in ASGI application" in r.getMessage()]
