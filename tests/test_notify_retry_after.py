"""A receiver that answers 429 or 503 with ``Retry-After`` is not asked again before that time.

Slack's rate limits (api.slack.com/docs/rate-limits): for "HTTP based APIs, including Incoming
Webhooks" Slack answers HTTP 429 "and a Retry-After header containing the number of seconds until
you can retry"; RFC 9110 section 10.2.3 allows delay-seconds or an HTTP-date. The notifier's own
back-off (0.5 s doubling) posted six times inside a 30 s Retry-After."""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Iterator
from email.utils import formatdate
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest

from fleetmind.serving.db import Database
from fleetmind.serving.incidents.store import IncidentStore
from fleetmind.serving.notify import MAX_PAUSE_S, Notifier, retry_after
from fleetmind.serving.settings import Settings

T0 = 1_000_000.0


class Clock:
    def __init__(self) -> None:
        self.t = T0

    def __call__(self) -> float:
        return self.t


class RateLimited(BaseHTTPRequestHandler):
    """Slack's answer to too many posts: 429, ``Retry-After: <seconds>``, body ``rate_limited``."""

    protocol_version = "HTTP/1.1"
    posts: list = []
    wait = "30"

    def log_message(self, *a: object) -> None:
        pass

    def do_POST(self) -> None:
        self.posts.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
        self.send_response(429)
        self.send_header("Retry-After", self.wait)
        self.send_header("Content-Length", "12")
        self.end_headers()
        self.wfile.write(b"rate_limited")


@pytest.fixture
def sink() -> Iterator[tuple[str, type[RateLimited]]]:
    handler = type("H", (RateLimited,), {"posts": []})
    srv = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    yield f"http://127.0.0.1:{srv.server_address[1]}/hook", handler
    srv.shutdown()
    srv.server_close()


@pytest.fixture
def db(tmp_path: Path) -> Iterator[Database]:
    d = Database(f"sqlite:///{tmp_path}/n.db")
    d.migrate()
    yield d
    d.dispose()


def open_incident(db: Database) -> None:
    store = IncidentStore(db)
    with db.write() as conn:
        inc = store.insert_incident(conn, T0, T0)
    top = {"node": "c0/host/h1", "kind": "host", "score": 0.9, "path": ["c0/host/h1"]}
    db.set_incident_rca(inc, [top, {**top, "node": "c0/host/h2", "score": 0.05}], "gat", None)


def test_a_429_retry_after_pauses_the_receiver_that_long(
    db: Database, sink: tuple[str, type[RateLimited]], caplog: pytest.LogCaptureFixture
) -> None:
    url, handler = sink
    open_incident(db)
    clock = Clock()
    s = Settings(
        database_url=str(db.engine.url),
        rca_model="baseline:upstream-coverage",
        placement_model="heuristic:builtin-bestfit",
        incident_worker=False,
        notify_webhook_url=url,
        notify_settle_s=0.0,
        notify_backoff_s=0.5,
        notify_retries=5,
    )
    n = Notifier(db, s, clock=clock)
    try:
        with caplog.at_level(logging.WARNING, logger="fleetmind.serving.notify"):
            n.poll()
            n.poll()
            for _ in range(29):  # one poll a second for the 30 s asked
                clock.t += 1
                n.poll()
        assert len(handler.posts) == 1
        assert "Retry-After" in caplog.text and "not tried again for 30.0 s" in caplog.text
        clock.t += 1.5
        n.poll()
        assert len(handler.posts) == 2
    finally:
        n.stop()


def _response(retry: str, **headers: str) -> httpx.Response:
    return httpx.Response(429, headers={"Retry-After": retry, **headers})


def test_retry_after_takes_seconds_or_an_http_date() -> None:
    assert retry_after(_response("120")) == 120.0
    date = formatdate(T0, usegmt=True)
    later = formatdate(T0 + 90, usegmt=True)
    assert retry_after(_response(later, Date=date)) == 90.0  # against the answer's own Date
    assert retry_after(_response(later), now=T0) == 90.0
    assert retry_after(_response(formatdate(T0 - 5, usegmt=True)), now=T0) == 0.0
    assert retry_after(_response("soon")) is None
    assert retry_after(_response("-3")) is None
    assert retry_after(httpx.Response(429)) is None


def test_a_huge_retry_after_is_capped(db: Database) -> None:
    open_incident(db)
    clock = Clock()
    posts = []

    def handler(request: httpx.Request) -> httpx.Response:
        posts.append(request)
        return httpx.Response(503, headers={"Retry-After": "86400"})

    s = Settings(
        database_url=str(db.engine.url),
        rca_model="baseline:upstream-coverage",
        placement_model="heuristic:builtin-bestfit",
        incident_worker=False,
        notify_webhook_url="http://hooks.test/slack",
        notify_settle_s=0.0,
    )
    n = Notifier(db, s, clock=clock, transport=httpx.MockTransport(handler))
    try:
        n.poll()
        n.poll()
        assert n._down["http://hooks.test/slack"][1] == clock.t + MAX_PAUSE_S
    finally:
        n.stop()


def test_a_retry_after_that_is_no_ascii_number_is_ignored() -> None:
    """``str.isdigit`` takes ``"²"`` (Retry-After byte 0xB2, decoded as latin-1 by httpx), which
    ``float`` refuses: the poll raised instead of backing off."""
    import httpx

    from fleetmind.serving.notify import retry_after

    for raw in (b"\xb2", b"\xd9\xa3", b"1e3", b"-5", b"12345678901234567890"):
        assert retry_after(httpx.Response(429, headers=[(b"retry-after", raw)])) is None, raw
    assert retry_after(httpx.Response(429, headers=[(b"retry-after", b"30")])) == 30.0
