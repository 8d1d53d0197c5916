"""One post to a notification receiver takes ``POST_TIMEOUT_S`` at most in all, however slowly
the receiver answers, and a slow chat webhook does not hold back Alertmanager.

httpx's timeout is one of inactivity, not a deadline ("raise a TimeoutException after 5 seconds
of network inactivity", httpx docs, Timeouts): a receiver sending its answer a byte at a time held
the notifier thread for minutes, so no Alertmanager re-send went out. Real sockets, small
numbers, no timing assertions: the posts must end while the receiver is still trickling."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from fleetmind.serving import notify
from fleetmind.serving.db import Database
from fleetmind.serving.incidents.store import IncidentStore
from fleetmind.serving.notify import Notifier, post_client, post_once
from fleetmind.serving.settings import Settings

T0 = 1_000_000.0


class Trickle:
    """A one-connection-at-a-time HTTP server on 127.0.0.1 (a free port): after reading a
    request it sends ``head`` then ``tail`` one byte every ``every`` s; ``done`` is set when a
    trickle ran to its end (the client never hung up)."""

    def __init__(self, head: bytes, tail: bytes, every: float = 0.05) -> None:
        self.head, self.tail, self.every = head, tail, every
        self.done = threading.Event()
        self.requests: list[bytes] = []
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}/hook"
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with conn:
                data = b""
                while b"\r\n\r\n" not in data:
                    data += conn.recv(65536)
                self.requests.append(data)
                try:
                    conn.sendall(self.head)
                    for b in self.tail:
                        time.sleep(self.every)
                        conn.sendall(bytes([b]))
                except OSError:  # the client hung up: what a deadline does
                    continue
                self.done.set()

    def close(self) -> None:
        self.sock.close()


BODY = b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 60\r\n\r\n"


@pytest.fixture
def short(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(notify, "POST_TIMEOUT_S", 0.3)


@pytest.mark.parametrize(
    "head,tail",
    [
        (BODY, b"o" * 60),  # the body a byte at a time (each read well within httpx's timeout)
        (b"", b"HTTP/1.1 200 OK\r\nX-Padding: " + b"a" * 60),  # the headers a byte at a time
    ],
    ids=["body", "headers"],
)
def test_a_trickling_receiver_times_out_at_the_deadline(
    short: None, head: bytes, tail: bytes
) -> None:
    """Without a deadline the post waited for the whole trickle (3 s here, 120 s in the field)
    and read it as delivered."""
    srv = Trickle(head, tail)
    client = post_client()
    try:
        ok, outcome = post_once(client, srv.url, {"text": "hi"})
        assert not srv.done.is_set()  # ended while the receiver was still sending
        assert (ok, outcome) == (False, "ReadTimeout")
    finally:
        client.close()
        srv.close()


class Sink:
    """An Alertmanager stand-in: records each post's JSON body, answers 200."""

    def __init__(self) -> None:
        self.bodies: list = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.bodies.append(json.loads(request.content))
        return httpx.Response(200)


@pytest.fixture
def db(tmp_path: Path) -> Iterator[Database]:
    d = Database(f"sqlite:///{tmp_path}/n.db")
    d.migrate()
    yield d
    d.dispose()


def open_incidents(db: Database, n: int) -> list[int]:
    store = IncidentStore(db)
    with db.write() as conn:
        ids = [store.insert_incident(conn, T0, T0) for _ in range(n)]
    top = {"node": "c0/host/h1", "kind": "host", "score": 0.9, "path": ["c0/host/h1"]}
    for i in ids:
        db.set_incident_rca(i, [top, {**top, "node": "c0/host/h2", "score": 0.05}], "gat", None)
    return ids


class Routes(httpx.BaseTransport):
    """Alertmanager's URL to :class:`Sink`, everything else to the real network."""

    def __init__(self, am: Sink) -> None:
        self.am = httpx.MockTransport(am)
        self.net = httpx.HTTPTransport()

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        if request.url.host == "am.test":
            return self.am.handle_request(request)
        return self.net.handle_request(request)


def notifier(db: Database, hook_url: str, transport: httpx.BaseTransport) -> Notifier:
    s = Settings(
        database_url=str(db.engine.url),
        rca_model="baseline:upstream-coverage",
        placement_model="heuristic:builtin-bestfit",
        incident_worker=False,
        notify_alertmanager_url="http://am.test:9093",
        notify_webhook_url=hook_url,
        notify_settle_s=0.0,
    )
    n = Notifier(db, s, clock=lambda: T0, transport=transport)
    n._client.close()
    n._client = post_client(transport)  # the deadline also on a transport a test passes in
    return n


def test_a_trickling_webhook_does_not_hold_back_alertmanager(short: None, db: Database) -> None:
    """The notifier's poll ends (Alertmanager served) while the webhook is still trickling its
    answer; the webhook is then in back-off like any receiver that timed out."""
    ids = open_incidents(db, 2)
    am = Sink()
    srv = Trickle(BODY, b"o" * 60)
    n = notifier(db, srv.url, Routes(am))
    try:
        n.poll()  # (settle 0: the first poll sends)
        assert not srv.done.is_set()
        assert sorted(int(a["labels"]["incident"]) for b in am.bodies for a in b) == sorted(ids)
        assert len(srv.requests) == 1  # timed out once: not tried again in the poll
        assert n._down[srv.url][2] == "ReadTimeout"
    finally:
        n.stop()
        srv.close()


def test_a_slow_webhook_gets_a_time_budget_per_poll(
    monkeypatch: pytest.MonkeyPatch, db: Database
) -> None:
    """Each post answered within the deadline but slowly: a poll posted every due message one
    after another (five incidents at just under 5 s each held the poll 25 s). Once a poll spent
    ``WEBHOOK_BUDGET_S`` on the webhook, the rest waits for the next poll, in order."""
    monkeypatch.setattr(notify, "WEBHOOK_BUDGET_S", 0.2)
    ids = open_incidents(db, 3)
    am, hook = Sink(), []

    def slow(request: httpx.Request) -> httpx.Response:
        if request.url.host == "am.test":
            return am(request)
        hook.append(json.loads(request.content)["fleetmind"]["incident"])
        time.sleep(0.4)  # longer than the budget: one post per poll
        return httpx.Response(200)

    n = notifier(db, "http://hooks.test/slack", httpx.MockTransport(slow))
    try:
        n.poll()  # (settle 0: the first poll sends)
        assert len(hook) == 1
        assert len({a["labels"]["incident"] for b in am.bodies for a in b}) == 3
        n.poll()
        n.poll()
        assert sorted(hook) == sorted(ids)  # each once, none lost
    finally:
        n.stop()
