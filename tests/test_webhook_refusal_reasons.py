"""A chat webhook that refuses a message says why, and one that redirects keeps the messages.

Slack's incoming webhooks answer a failure with a plain-text reason in the body (404
``no_service`` for a revoked URL, 410 ``channel_is_archived``, 400 ``invalid_payload``, 403
``action_prohibited``: https://api.slack.com/changelog/2016-05-17-changes-to-errors-for-incoming-webhooks);
the notifier logged only "(404)". An ingress' http->https redirect (308 with ``Location``) made the
notifier drop every message as "refused (308)"; it now keeps them and says where to point the URL,
as it does for an Alertmanager. A real HTTP server on 127.0.0.1 answers as Slack documents."""

from __future__ import annotations

import gzip
import json
import logging
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest
from prometheus_client import CollectorRegistry
from sqlalchemy import select

from fleetmind.serving.db import Database, notifications
from fleetmind.serving.incidents.store import IncidentStore
from fleetmind.serving.notify import (
    NOT_FOLLOWED,
    REASON_CHARS,
    Notifier,
    answer_reason,
    delivery_outcome,
    mask_path,
    post_attempt,
    post_client,
)
from fleetmind.serving.settings import Settings
from tests.http_helpers import serve

T0 = 1_000_000.0
SECRET_PATH = "/services/T0SECRET/B0SECRET/xoxTOKEN123"
MOVED_TO = "https://chat.example.org/hooks/abc"


class FakeSlack:
    """An incoming webhook on a free port: every POST is answered ``status`` with the plain-text
    ``text`` (``Content-Type: text/html``, as Slack sends it) and, when set, ``location``."""

    def __init__(self) -> None:
        self.status, self.text, self.location = 200, "ok", ""
        self.posts: list[dict] = []
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:
                pass

            def do_POST(self) -> None:  # noqa: N802 (http.server's name)
                length = int(self.headers["Content-Length"])
                fake.posts.append(json.loads(self.rfile.read(length)))
                body = fake.text.encode()
                self.send_response(fake.status)
                self.send_header("Content-Type", "text/html")
                if fake.location:
                    self.send_header("Location", fake.location)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}{SECRET_PATH}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


@pytest.fixture
def slack() -> Iterator[FakeSlack]:
    fake = FakeSlack()
    yield fake
    fake.server.shutdown()
    fake.server.server_close()


def _notifier(tmp_path: Path, url: str, clock: list[float]) -> tuple[Notifier, Database]:
    """A notifier posting to ``url`` only, with one incident whose root cause is ranked."""
    db = Database(f"sqlite:///{tmp_path}/n.db")
    db.migrate()
    with db.write() as conn:
        inc = IncidentStore(db).insert_incident(conn, T0, T0)
    top = {"node": "c0/host/h0", "kind": "host", "score": 0.9, "path": ["c0/host/h0"]}
    db.set_incident_rca(inc, [top], "gat", None)
    s = Settings(
        database_url=str(db.engine.url),
        rca_model="baseline:upstream-coverage",
        placement_model="heuristic:builtin-bestfit",
        incident_worker=False,
        notify_webhook_url=url,
        notify_settle_s=0.0,
    )
    return Notifier(db, s, clock=lambda: clock[0]), db


def _delivery(db: Database) -> dict:
    with db.read() as conn:
        return conn.execute(select(notifications.c.delivery)).scalar_one()


def _lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name.startswith("fleetmind")]


@pytest.mark.parametrize(
    "status,reason", [(404, "no_service"), (410, "channel_is_archived"), (403, "action_prohibited")]
)
def test_a_refusal_names_the_platforms_reason(
    tmp_path: Path,
    slack: FakeSlack,
    caplog: pytest.LogCaptureFixture,
    status: int,
    reason: str,
) -> None:
    slack.status, slack.text = status, reason
    clock = [T0]
    n, db = _notifier(tmp_path, slack.url, clock)
    caplog.set_level(logging.INFO)
    try:
        n.poll()
    finally:
        n.stop()
    lines = _lines(caplog)
    assert any(f"refused the notification for incident 1 ({status} {reason})" in m for m in lines)
    assert any(f"dropped ({status} {reason})" in m for m in lines)
    assert _delivery(db)["webhook"] == f"dropped: {status} {reason}"
    assert len(slack.posts) == 1  # dropped at once: a refusal is final
    assert not [m for m in lines if "T0SECRET" in m or "xoxTOKEN123" in m]


def test_a_redirect_keeps_the_message_and_names_its_target(
    tmp_path: Path, slack: FakeSlack, caplog: pytest.LogCaptureFixture
) -> None:
    slack.status, slack.text, slack.location = 308, "", MOVED_TO
    clock = [T0]
    n, db = _notifier(tmp_path, slack.url, clock)
    caplog.set_level(logging.INFO)
    try:
        n.poll()
        lines = _lines(caplog)
        assert any(
            f"redirects to {MOVED_TO}" in m and "FLEETMIND_NOTIFY_WEBHOOK_URL" in m for m in lines
        ), lines
        assert not [m for m in lines if "dropped" in m]
        assert not _delivery(db)["webhook"].startswith("dropped")
        slack.status, slack.text, slack.location = 200, "ok", ""  # the URL was fixed
        clock[0] += 61
        n.poll()
    finally:
        n.stop()
    assert len(slack.posts) == 2  # the kept message went out once the receiver took it
    assert _delivery(db)["webhook"] == "sent"


def test_a_redirect_to_the_same_path_does_not_log_the_secret(
    tmp_path: Path, slack: FakeSlack, caplog: pytest.LogCaptureFixture
) -> None:
    """An ingress' ssl-redirect keeps the path, which is the chat webhook's credential."""
    slack.status, slack.text = 308, ""
    slack.location = slack.url.replace("http://", "https://")
    clock = [T0]
    n, db = _notifier(tmp_path, slack.url, clock)
    caplog.set_level(logging.INFO)
    try:
        n.poll()
    finally:
        n.stop()
    lines = _lines(caplog)
    target = slack.url.replace("http://", "https://").replace(SECRET_PATH, "<the same path>")
    assert any(f"redirects to {target}" in m for m in lines), lines
    assert not [m for m in lines if "xoxTOKEN123" in m]
    assert not _delivery(db)["webhook"].startswith("dropped")


def test_a_reason_is_one_short_line_without_the_secret_url(
    tmp_path: Path, slack: FakeSlack, caplog: pytest.LogCaptureFixture
) -> None:
    """An answer echoing the URL (a proxy's error page) on several lines: quoted on one line, cut
    to ``REASON_CHARS``, the URL (its credential) replaced."""
    slack.status = 400
    slack.text = f"invalid_payload\nPOST {slack.url} refused\r\nFORGED line\x1b[31m" + "x" * 500
    clock = [T0]
    n, db = _notifier(tmp_path, slack.url, clock)
    caplog.set_level(logging.INFO)
    try:
        n.poll()
    finally:
        n.stop()
    note = _delivery(db)["webhook"]
    assert note.startswith("dropped: 400 invalid_payload POST <url> refused FORGED line?[31mx")
    assert len(note.removeprefix("dropped: 400 ")) == REASON_CHARS
    for m in _lines(caplog) + [note]:
        assert "\n" not in m and "\r" not in m and "\x1b" not in m
        assert "xoxTOKEN123" not in m
    assert answer_reason(f"at {SECRET_PATH}", slack.url) == "at <url>"
    assert answer_reason("", slack.url) == ""


class _Answer(BaseHTTPRequestHandler):
    """Answers every POST with the class' ``status``, ``headers`` and ``body`` (bytes)."""

    protocol_version = "HTTP/1.1"
    status, headers_out, body = 400, {}, b""

    def log_message(self, *args: object) -> None:
        pass

    def do_POST(self) -> None:  # noqa: N802 (http.server's name)
        self.rfile.read(int(self.headers["Content-Length"]))
        self.send_response(self.status)
        for k, v in self.headers_out.items():
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(self.body)))
        self.end_headers()
        self.wfile.write(self.body)


def _answer(status: int, headers: dict, body: bytes) -> str:
    """The outcome :func:`post_attempt` makes of a real server's answer."""
    handler = type("H", (_Answer,), {"status": status, "headers_out": headers, "body": body})
    with serve(handler) as base:
        return post_attempt(post_client(), base + SECRET_PATH, {"text": "x"}, with_reason=True)[1]


def test_a_gzip_compressed_refusal_is_quoted_decoded() -> None:
    """httpx asks for gzip (Accept-Encoding); a server (or a proxy) that compresses its answer."""
    body = gzip.compress(b"invalid_payload")
    headers = {"Content-Type": "text/plain", "Content-Encoding": "gzip"}
    assert _answer(400, headers, body) == "400 invalid_payload"


@pytest.mark.parametrize(
    "status,headers,body,outcome",
    [
        (308, {"Content-Type": "text/plain", "Location": "/x"}, b"Permanent Redirect", "308"),
        (404, {"Content-Type": "text/html"}, b"<html><head><title>404</title></head>", "404"),
        (
            404,
            {"Content-Type": "application/json"},
            b'{"message": "Unknown Webhook"}',
            "404 Unknown Webhook",
        ),
        (400, {"Content-Type": "application/json"}, b'{"code": 50006}', "400"),
        (404, {"Content-Type": "text/html"}, b"no_service", "404 no_service"),
        (404, {"Content-Type": "image/png"}, b"\x89PNG", "404"),
    ],
)
def test_only_a_refusals_text_or_json_reason_is_quoted(
    status: int, headers: dict, body: bytes, outcome: str
) -> None:
    """A redirection or an HTML page is no reason; Discord's webhooks answer JSON with a
    ``message`` (https://discord.com/developers/docs/topics/opcodes-and-status-codes)."""
    assert _answer(status, headers, body) == outcome


@pytest.mark.parametrize(
    "target,configured",
    [
        ("https://chat.example.org/services/T0SECRET/B0SECRET/xoxTOKEN123/", SECRET_PATH),
        ("https://chat.example.org/services/T0SECRET/B0SECRET/xoxTOKEN123", SECRET_PATH + "/"),
        ("https://chat.example.org/services/T0SECRET/B0SECRET/xox%54OKEN123", SECRET_PATH),
        ("https://chat.example.org/v2/xoxTOKEN123", SECRET_PATH),
    ],
)
def test_a_redirect_target_never_shows_a_segment_of_the_secret_path(
    target: str, configured: str
) -> None:
    """An ingress that drops a trailing slash or re-encodes the path (``%54`` is ``T``)."""
    masked = mask_path(target, f"http://127.0.0.1:1{configured}")
    assert "xoxTOKEN123" not in masked and "TOKEN" not in masked, masked
    assert "T0SECRET" not in masked and "B0SECRET" not in masked, masked
    assert masked.startswith("https://chat.example.org")


def test_a_flaky_webhook_that_delivers_counts_no_drop_and_a_refusal_does(
    tmp_path: Path, slack: FakeSlack
) -> None:
    """FleetMindNotificationsFailing counts ``outcome="dropped"``: a 503 retried drops nothing."""
    registry = CollectorRegistry()
    slack.status, slack.text = 503, "busy"
    clock = [T0]
    n, db = _notifier(tmp_path, slack.url, clock)
    n = Notifier(db, n.settings, clock=lambda: clock[0], registry=registry)
    try:
        for i in range(6):
            if i == 3:
                slack.status, slack.text = 200, "ok"
            n.poll()
            clock[0] += 61
    finally:
        n.stop()

    def count(outcome: str) -> float | None:
        return registry.get_sample_value(
            "fleetmind_notifications_total", {"channel": "webhook", "outcome": outcome}
        )

    assert count("failed") >= 2 and count("sent") == 1
    assert count("dropped") == 0
    n._give_up("webhook", 1, "404 no_service")
    assert count("dropped") == 1


def test_an_old_note_of_a_dropped_redirect_still_reads_as_refused() -> None:
    """``dropped: 308`` was written when a redirect was refused and dropped at once."""
    row = {"state": "firing", "delivery": {"webhook": "dropped: 308"}}
    assert delivery_outcome(row) == (False, None, "the webhook refused it: 308")
    row = {"state": "firing", "delivery": {"webhook": "dropped: 308" + NOT_FOLLOWED}}
    assert "failed until FLEETMIND_NOTIFY_GIVE_UP_S" in delivery_outcome(row)[2]


def test_an_overflowing_outbox_counts_a_drop_only_for_the_receiver_still_owed(
    tmp_path: Path, slack: FakeSlack, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Alertmanager down, the webhook up: each change of cause resolves the last message; the
    webhook takes every one, so the resolutions dropped past OUTBOX_MAX owed it nothing."""
    import socket

    from fleetmind.serving import notify

    monkeypatch.setattr(notify, "OUTBOX_MAX", 3)
    with socket.socket() as s:  # a port nothing listens on: Alertmanager down
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    registry, clock = CollectorRegistry(), [T0]
    n, db = _notifier(tmp_path, slack.url, clock)
    settings = n.settings.model_copy(update={"notify_alertmanager_url": f"http://127.0.0.1:{port}"})
    n = Notifier(db, settings, clock=lambda: clock[0], registry=registry)
    try:
        n.poll()
        for i in range(8):
            top = {"node": f"c0/host/h{i + 1}", "kind": "host", "score": 0.9, "path": ["x"]}
            db.set_incident_rca(1, [top], "gat", None)
            clock[0] += 1
            n.poll()
    finally:
        n.stop()

    def count(channel: str, outcome: str) -> float | None:
        return registry.get_sample_value(
            "fleetmind_notifications_total", {"channel": channel, "outcome": outcome}
        )

    assert count("webhook", "failed") == 0 and count("webhook", "sent") >= 9
    assert count("alertmanager", "dropped") >= 1
    assert count("webhook", "dropped") == 0


@pytest.mark.parametrize(
    "target",
    [
        "https://webhooks.example.org/v2/hooks",
        "https://services-gw.example.org/api/v3/x",
    ],
)
def test_a_redirect_targets_host_is_never_masked(target: str) -> None:
    """Only the target's path is compared with the secret path's segments (``webhooks`` and
    ``services`` are 8 characters long), whole segments, raw and percent-decoded."""
    discord = "http://127.0.0.1:1/api/webhooks/123456789012/AbCdEfGhIjKl"
    assert mask_path(target, discord) == target
    assert mask_path(target, f"http://127.0.0.1:1{SECRET_PATH}") == target
    moved = "https://webhooks.example.org/api/webhooks/123456789012/AbCdEf%47hIjKl/"
    assert (
        mask_path(moved, discord) == "https://webhooks.example.org/api/<secret>/<secret>/<secret>/"
    )


@pytest.mark.parametrize(
    "body,outcome",
    [
        (  # https://developers.google.com/workspace/chat/api/reference/rest (google.rpc.Status)
            {"error": {"code": 404, "message": "Requested entity was not found.", "status": "X"}},
            "404 Requested entity was not found.",
        ),
        ({"error": {"code": 404, "status": "NOT_FOUND"}}, "404"),
    ],
)
def test_a_google_chat_error_object_quotes_its_message(body: dict, outcome: str) -> None:
    """Google APIs answer ``{"error": {"code", "message", "status"}}``: its message is the reason."""
    headers = {"Content-Type": "application/json; charset=UTF-8"}
    assert _answer(404, headers, json.dumps(body).encode()) == outcome


def test_a_json_answer_cut_at_the_bytes_read_quotes_its_start() -> None:
    """An answer longer than ANSWER_BYTES is not whole JSON: its text start is quoted."""
    doc = {"error": {"code": 400, "message": "Invalid JSON payload " + "x" * 5000}}
    outcome = _answer(400, {"Content-Type": "application/json"}, json.dumps(doc).encode())
    assert outcome.startswith('400 {"error": {"code": 400, "message": "Invalid JSON payload xx')
    assert len(outcome) == len("400 ") + REASON_CHARS


class _Counted:
    """A ``zlib`` decompressor that adds the bytes it gives out to ``out``."""

    def __init__(self, inner: object, out: list[int]) -> None:
        self.inner, self.out = inner, out

    def decompress(self, data: bytes, max_length: int = 0) -> bytes:
        got = self.inner.decompress(data, max_length)
        self.out.append(len(got))
        return got

    def __getattr__(self, name: str) -> object:
        return getattr(self.inner, name)


@pytest.mark.parametrize("encoding,wbits", [("gzip", 31), ("deflate", 15), ("deflate", -15)])
def test_a_compressed_refusal_is_never_decompressed_past_the_bytes_read(
    monkeypatch: pytest.MonkeyPatch, encoding: str, wbits: int
) -> None:
    """A 30 KiB answer that inflates to 32 MiB: at most ANSWER_BYTES are decompressed (any
    decompressor made while the post runs is counted: httpx's own decoder too)."""
    import zlib

    from fleetmind.serving.notify import ANSWER_BYTES

    pack = zlib.compressobj(9, zlib.DEFLATED, wbits)
    body = pack.compress(b"a" * (32 << 20)) + pack.flush()
    out: list[int] = []
    real = zlib.decompressobj
    monkeypatch.setattr(zlib, "decompressobj", lambda *a, **k: _Counted(real(*a, **k), out))
    outcome = _answer(404, {"Content-Type": "text/plain", "Content-Encoding": encoding}, body)
    assert outcome == "404 " + "a" * REASON_CHARS
    assert 0 < sum(out) <= ANSWER_BYTES, sum(out)


def test_a_refusal_in_an_encoding_not_decoded_gives_the_status_alone() -> None:
    """``compress`` (LZW) is not decoded: its bytes are never quoted as if they were text."""
    headers = {"Content-Type": "text/plain", "Content-Encoding": "compress"}
    assert _answer(404, headers, b"no_service") == "404"


def test_a_token_in_the_redirect_targets_host_is_masked() -> None:
    """A host label equal to the webhook path's last segment (its token), in any case (httpx
    lower-cases the host of a redirection's target), is masked like the path."""
    url = "https://chat.example/hooks/8f3k2j9xQ7mzpb4tnw6yd1rc5e"
    target = "https://8f3k2j9xq7mzpb4tnw6yd1rc5e.chat.example/hooks/new"
    assert mask_path(target, url) == "https://<secret>.chat.example/hooks/new"


class _Chunks(httpx.SyncByteStream):
    """A response body arriving as the given raw chunks (httpx's ``SyncByteStream`` protocol)."""

    def __init__(self, chunks: list[bytes]) -> None:
        self.chunks, self.served = chunks, 0

    def __iter__(self) -> Iterator[bytes]:
        for chunk in self.chunks:
            self.served += len(chunk)
            yield chunk

    def close(self) -> None:
        pass


def _read(encoding: str, chunks: list[bytes]) -> tuple[bytes, int]:
    from fleetmind.serving.notify import _read_answer

    body = _Chunks(chunks)
    response = httpx.Response(404, headers={"Content-Encoding": encoding}, stream=body)
    return _read_answer(response), body.served


def test_raw_deflate_split_across_chunks_decodes_from_its_first_byte() -> None:
    """A raw deflate stream (no zlib header) whose first chunk the zlib-header decoder took
    without complaint: the fallback decodes it again from the start (it lost the first chunk and
    quoted ``o_service``)."""
    import zlib

    pack = zlib.compressobj(9, zlib.DEFLATED, -15)
    body = pack.compress(b"no_service") + pack.flush()
    assert _read("deflate", [body[:1], body[1:]])[0] == b"no_service"


def test_compressed_bytes_that_decode_to_nothing_are_not_read_without_end() -> None:
    """A gzip header whose file name never ends decodes to nothing: reading stops after 16 times
    the bytes quoted, and the reason is the status alone."""
    from fleetmind.serving.notify import ANSWER_BYTES

    header = b"\x1f\x8b\x08\x08\x00\x00\x00\x00\x00\x03"  # FNAME set
    chunks = [header] + [b"n" * 4096] * 200
    got, served = _read("gzip", chunks)
    assert got == b"" and served <= 17 * ANSWER_BYTES + 4096 + len(header)
