"""uvicorn's access lines do not quote a token sent in the query string.

RFC 6750 section 2.3 defines ``access_token`` as a URI query parameter for bearer tokens, and
clients send ``?token=`` too; the service refuses both (401) but uvicorn logged the request target
verbatim: uvicorn ``protocols/http/httptools_impl.py`` and ``h11_impl.py`` log
``access_logger.info('%s - "%s %s HTTP/%s" %d', client, method, get_path_with_query_string(scope),
http_version, status)``, the path and query as one argument. docs/serving/security.md ("Secrets
in messages") promises that no log line quotes a secret. The servers here are real uvicorn servers
(both HTTP implementations) with the logging ``fleetmind serve`` sets up.
"""

from __future__ import annotations

import logging
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import uvicorn
from serving_helpers import serve_logging

from fleetmind.redact import safe_request_target
from fleetmind.serving.app import ACCESS_LOGGER, AccessLogRedaction, create_app
from fleetmind.serving.settings import Settings

SECRET = "read-tok-BBBBBBBBBBBBBBBBBB"
PORTS = {"httptools": 18230, "h11": 18231}


async def _unauthorised(scope: Any, receive: Any, send: Any) -> None:
    """A tiny ASGI app: 401 to every request, as the service answers a token in the query."""
    assert scope["type"] == "http"
    await send({"type": "http.response.start", "status": 401, "headers": []})
    await send({"type": "http.response.body", "body": b""})


@pytest.fixture
def server(request: pytest.FixtureRequest) -> Iterator[int]:
    http = request.param
    port = PORTS[http]
    # log_config=None: the logging stays the one serve_logging set up (fleetmind serve's)
    config = uvicorn.Config(
        _unauthorised, host="127.0.0.1", port=port, http=http, lifespan="off", log_config=None
    )
    srv = uvicorn.Server(config)
    thread = threading.Thread(target=srv.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not srv.started and time.monotonic() < deadline:
        time.sleep(0.02)
    assert srv.started, "uvicorn did not start"
    try:
        yield port
    finally:
        srv.should_exit = True
        thread.join(10)


def _get(port: int, target: str) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(f"GET {target} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n".encode())
        answer = b""
        while chunk := s.recv(65536):
            answer += chunk
    return answer


@pytest.mark.parametrize("server", ["httptools", "h11"], indirect=True)
def test_access_lines_mask_query_tokens(server: int, capsys: pytest.CaptureFixture[str]) -> None:
    targets = [
        f"/api/v1/incidents?access_token={SECRET}&limit=5",
        f"/api/v1/incidents?token={SECRET}",
        f"/api/v1/incidents?x=1&api_key={SECRET}'x",  # a quote does not end the value
        f"/api/v1/incidents?access%5Ftoken={SECRET}",  # nor does percent-encoding hide the name
    ]
    with serve_logging("info"):
        for target in targets:
            # uvicorn writes the access line before the answer: it is there once this returns
            assert _get(server, target).startswith(b"HTTP/1.1 401")
    out = capsys.readouterr().out  # uvicorn's access handler writes to stdout
    assert SECRET not in out, out
    assert '"GET /api/v1/incidents?access_token=***&limit=5 HTTP/1.1" 401' in out, out
    assert '"GET /api/v1/incidents?token=*** HTTP/1.1" 401' in out
    assert '"GET /api/v1/incidents?x=1&api_key=*** HTTP/1.1" 401' in out
    assert '"GET /api/v1/incidents?access%5Ftoken=*** HTTP/1.1" 401' in out


def test_the_app_masks_them_under_plain_uvicorn(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``uvicorn --factory fleetmind.serving.app:create_app`` uses uvicorn's own log config:
    :func:`create_app` puts the filter on the access logger itself, once."""
    logger = logging.getLogger(ACCESS_LOGGER)
    monkeypatch.setattr(logger, "filters", [])
    settings = Settings(database_url=f"sqlite:///{tmp_path}/al.db", incident_worker=False)
    create_app(settings)
    create_app(settings)
    assert sum(isinstance(f, AccessLogRedaction) for f in logger.filters) == 1
    record = logger.makeRecord(
        ACCESS_LOGGER,
        logging.INFO,
        __file__,
        1,
        '%s - "%s %s HTTP/%s" %d',
        ("127.0.0.1:5000", "GET", f"/ui?access_token={SECRET}", "1.1", 401),
        None,
    )
    assert logger.filter(record)
    assert record.args == ("127.0.0.1:5000", "GET", "/ui?access_token=***", "1.1", 401)


@pytest.mark.parametrize(
    ("target", "shown"),
    [
        ("/x?keyword=a&monkey=b&author=c", "/x?keyword=a&monkey=b&author=c"),  # not secrets
        ("/x?token=a;b&y=2", "/x?token=***&y=2"),
        ("/x?a=1;sig=abc;b=2", "/x?a=1;sig=***"),
        ("/x?password=", "/x?password="),  # nothing to hide
        ("/x;token=abc", "/x;token=***"),
        ("/x", "/x"),
    ],
)
def test_safe_request_target(target: str, shown: str) -> None:
    assert safe_request_target(target) == shown
