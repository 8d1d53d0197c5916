"""Connection limits uvicorn lacks: header and body read timeouts, a header size limit, and idle
sockets that cannot crowd out requests.

uvicorn (0.54) has neither a header timeout, a body timeout nor a header size limit with its default parser
(httptools): ``timeout_keep_alive`` only runs between requests and is cancelled by any byte
received, so a client that opens a connection and trickles (or never sends) its headers holds it
forever; a request whose body stops arriving waits in ``receive()`` forever, holding a request
slot (``FLEETMIND_LIMIT_CONCURRENCY``) and a connection; and the parser takes headers of any size (a 64 MB header was read before
authentication). Upstream tracks a request-start timeout as an open enhancement
(Kludex/uvicorn issue 157, ``--timeout-request-start``, ~10 s). Its ``limit_concurrency`` counts
open connections, idle ones included: with a limit of 20, 19 idle sockets made ``/healthz`` 503.

Why a protocol subclass here rather than a proxy or another server: the service must be safe as
``fleetmind serve`` starts it, with or without nginx in front; gunicorn and hypercorn would change
the process model the tests and docs rely on (workers, lifespan, TLS options). The subclass adds
four checks to uvicorn's httptools protocol and changes nothing else:

* **header timeout** (``FLEETMIND_HEADER_TIMEOUT_S``, 10 s): a connection whose request headers are
  not complete within this time of its opening, or of its previous response, is closed (as nginx's
  ``client_header_timeout``; Go's ``ReadHeaderTimeout``).
* **body timeout** (``FLEETMIND_BODY_TIMEOUT_S``, 20 s): a request whose body receives no byte for
  this long gets ``408 Request Timeout`` (RFC 9110 section 15.5.9) when no response has started,
  and its connection is closed either way; the route's ``receive()`` then returns
  ``http.disconnect``. It covers every route, whoever reads the body (FastAPI, a middleware,
  :func:`fleetmind.serving.deps.read_bounded`). It is a time *between two reads*, as nginx's
  ``client_body_timeout`` (60 s), not a total: a large upload over a slow link that keeps
  sending is never cut. Time the server itself holds the body back does not count: while
  reading is paused for flow control (the app has not taken the buffered body yet) or the client
  waits for ``100 Continue``. 20 s (Apache's ``mod_reqtimeout`` default for bodies) clears a
  connection table full of stalled bodies before a Kubernetes probe at its defaults (3 failures
  10 s apart) restarts the pod.
* **header size limit** (``FLEETMIND_MAX_HEADER_BYTES``, 32 KiB, nginx's default of 4 x 8 KiB):
  request line and headers larger than this get ``431 Request Header Fields Too Large`` (RFC 6585
  section 5; RFC 9110 section 15.5 leaves the limit to the server) and the connection is closed,
  before the app (and authentication) sees anything. The head is measured exactly, CRLFCRLF
  included, whatever the read boundaries: a head that is still unfinished at the end of a read
  counts every byte of it so far, and one that completes within a read (the whole head in one
  write, say) is measured up to its end in that read (:meth:`GuardedHttpToolsProtocol._head_size`),
  checked in ``on_headers_complete`` before uvicorn builds the request. Each request of a
  keep-alive or pipelined connection is measured on its own, and a 431 for a pipelined request
  goes out after the answers owed to the requests before it.
* **connections** (``FLEETMIND_MAX_CONNECTIONS``, 1,000: under the usual 1,024 open-file limit):
  beyond it, the oldest connection that has no request in progress (waiting for headers, or idle
  between keep-alive requests) is closed to make room; failing that, the one whose request body
  has been stalled longest (no byte for :data:`STALLED_S` or more) gets its ``408`` early; only
  when every connection is busy otherwise is the new one refused with ``503``. So connections
  stalled in a body cannot starve the probes even within the body timeout. Requests in progress are bounded separately by
  :class:`fleetmind.serving.middleware.ConcurrencyLimit` (``FLEETMIND_LIMIT_CONCURRENCY``), which exempts the probes.

The guard writes its 408 and 431 itself: under ``/api/`` as JSON ``{"detail": ...}``, the shape
of every other API refusal (``ErrorOut``), elsewhere (``/ui``, the probes) as plain text; the 503
of a refused connection, which comes before any request is read, is plain text. uvicorn's own
``400 Invalid HTTP request received.`` (a request its parser rejects: a header name with a space,
two different ``Content-Length`` values, a bad request line) is written the same way
(:meth:`GuardedHttpToolsProtocol.send_400_response`): llhttp hands over the request target before
it parses the headers, so a 400 for a bad header knows its target; one rejected within the
target (or before it) is JSON only if what was read of the target is under ``/api/``.

:func:`server_options` gives the ``uvicorn.run`` keyword arguments that install all of this.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterable
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
from uvicorn.protocols.utils import get_client_addr, get_path_with_query_string

from fleetmind.serving.settings import Settings, get_settings

STALLED_S = 1.0
"""A request body that received no byte for this long (seconds; or the body timeout, when
shorter) may be cut with its ``408`` to make room for a new connection (see the module
docstring): a client that is sending is never cut."""


LOGGED_TARGET_CHARS = 200
"""The longest request target an access line of a 431 quotes (characters; the rest is cut)."""

CUT_STATUS_KEY = "fleetmind.cut_status"
"""Key in a request's ``scope["state"]`` (shared by every copy of the scope) where the guard
records the status it answered itself (408) before the route's ``receive()`` sees the
disconnect, so that :func:`fleetmind.serving.app.create_app`'s handler of the disconnect records
it in the metrics instead of 499."""


@dataclass(frozen=True)
class ConnectionLimits:
    """``header_timeout_s``: seconds; ``max_header_bytes``: bytes of request line plus headers;
    ``max_connections``: open connections per server process; ``body_timeout_s``: seconds
    without a body byte (between two reads) before a request gets 408."""

    header_timeout_s: float
    max_header_bytes: int
    max_connections: int
    body_timeout_s: float = 20.0

    @classmethod
    def of(cls, settings: Settings) -> ConnectionLimits:
        return cls(
            settings.header_timeout_s,
            settings.max_header_bytes,
            settings.max_connections,
            settings.body_timeout_s,
        )


@lru_cache(maxsize=1)
def _limits() -> ConnectionLimits:
    # read in the server process (uvicorn's workers re-import this module): FLEETMIND_* variables
    return ConnectionLimits.of(get_settings())


JSON_PREFIX = b"/api/"
"""Request targets whose refusals the guard answers as JSON ``{"detail": ...}`` (the API's
``ErrorOut``, as every other refusal under it); elsewhere (``/ui``, the probes) and where no
target was read, plain text."""


def _plain_answer(
    transport: asyncio.Transport,
    status: bytes,
    text: bytes,
    target: bytes = b"",
    extra: Iterable[tuple[bytes, bytes]] = (),
) -> None:
    """Write ``status`` with ``text`` and close: as JSON ``{"detail": text}`` when ``target`` (the
    request target, as far as it was read) is under :data:`JSON_PREFIX`, else as plain text.
    ``extra``: header (name, value) pairs written first, such as uvicorn's ``date`` and
    ``server`` (``ServerState.default_headers``: every answer from a server with a clock carries
    ``Date``, RFC 9110 section 6.6.1)."""
    if target.startswith(JSON_PREFIX):
        text = json.dumps({"detail": text.decode("utf-8", "replace")}).encode()
        ctype = b"application/json"
    else:
        ctype = b"text/plain; charset=utf-8"
    head = b"".join(b"\r\n" + name + b": " + value for name, value in extra)
    transport.write(
        b"HTTP/1.1 "
        + status
        + head
        + b"\r\ncontent-type: "
        + ctype
        + b"\r\ncontent-length: "
        + str(len(text)).encode()
        + b"\r\nconnection: close\r\n\r\n"
        + text
    )
    transport.close()


class GuardedHttpToolsProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol with the header timeout, the header size limit and the
    connection limit of :class:`ConnectionLimits` (see the module docstring)."""

    limits: ConnectionLimits | None = None
    """Set on a subclass (tests); ``None``: from the ``FLEETMIND_*`` settings."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._limits = self.limits or _limits()
        self._header_timer: asyncio.TimerHandle | None = None
        self._body_timer: asyncio.TimerHandle | None = None  # armed while a body is unfinished
        self._body_moved = 0.0  # loop time of the body's last progress (or of its headers)
        self._awaiting_headers = True  # no request in progress (for the timer and idle())
        self._opened = 0.0
        # head measurement (see _head_size): positions are offsets into the read being parsed
        self._data = b""  # the read being parsed
        self._tail = b""  # the last 3 bytes of the read before: a CRLFCRLF may straddle two
        self._pos = 0  # where the next message can begin in _data (a lower bound if not exact)
        self._pos_exact = True
        self._in_head = False  # a message began and its headers are not complete
        self._head_start = 0  # where it began in _data (< 0: in earlier reads)
        self._start_exact = True
        self._header_bytes = 0  # bytes of an unfinished head in the reads before this one
        self._parsed_head = 0  # request target plus header names and values, from the callbacks
        self._chunked_body = False  # in a body with transfer-coding: its framing is not counted
        self._refused = False  # answered 431: the rest of the read is ignored

    # ------------------------------------------------------------------ asyncio.Protocol
    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._opened = self.loop.time()
        self._arm_header_timer()
        if len(self.connections) > self._limits.max_connections:
            self._make_room()

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel_header_timer()
        self._cancel_body_timer()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self._refused:
            return
        self._data, self._pos, self._pos_exact = data, 0, not self._chunked_body
        if self._in_head:  # a head begun in the reads before continues at offset 0
            self._head_start, self._start_exact = -self._header_bytes, True
        super().data_received(data)
        if self._in_head and not self._refused and not self.transport.is_closing():
            # headers still unfinished at the end of the read: all of it from the head's start
            self._header_bytes = len(data) - self._head_start
            if self._header_bytes > self._limits.max_header_bytes:
                self._refuse()
        self._tail = data[-3:]

    def send_400_response(self, msg: str) -> None:
        """uvicorn's answer to a request its parser rejects (``msg``: ``Invalid HTTP request
        received.``), through :func:`_plain_answer`: JSON under ``/api/``. The target is as far
        as it was read: ``on_message_begin`` clears it for each request, llhttp hands it over whole
        before any header, and an error inside it leaves the part of the reads before."""
        if not self._refused:
            target = getattr(self, "url", b"")  # uvicorn sets it in on_message_begin
            _plain_answer(
                self.transport,
                b"400 Bad Request",
                msg.encode("ascii", "replace"),
                target,
                self._default_headers(),
            )

    def _default_headers(self) -> list[tuple[bytes, bytes]]:
        """uvicorn's headers for every answer (``date``, ``server``, as configured), which
        :func:`_plain_answer` writes too; none when the server state has none."""
        state = getattr(self, "server_state", None)
        return list(getattr(state, "default_headers", ()) or ())

    # ------------------------------------------------------------------ parser callbacks
    def on_message_begin(self) -> None:
        if self._refused:
            return
        super().on_message_begin()
        self._awaiting_headers = self._in_head = True
        self._parsed_head = 0
        # llhttp skips empty lines before a request line; its head starts after them
        start = self._pos
        while start < len(self._data) and self._data[start] in b"\r\n":
            start += 1
        self._head_start, self._start_exact = start, self._pos_exact

    def on_url(self, url: bytes) -> None:
        if not self._refused:
            self._parsed_head += len(url)
            super().on_url(url)

    def on_header(self, name: bytes, value: bytes) -> None:
        if not self._refused:
            self._parsed_head += len(name) + len(value) + 4  # ": " and CRLF
            super().on_header(name, value)

    def on_headers_complete(self) -> None:
        if self._refused:
            return
        self._in_head = False
        if self._head_size() > self._limits.max_header_bytes:
            self._refuse()  # before uvicorn builds the request: the app never sees it
            return
        self._awaiting_headers = False
        self._header_bytes = 0
        self._cancel_header_timer()
        self._chunked_body = any(name == b"transfer-encoding" for name, _ in self.headers)
        self._pos_exact = self._pos_exact and not self._chunked_body
        super().on_headers_complete()
        if self._chunked_body or any(
            name == b"content-length" and value.strip() not in (b"", b"0")
            for name, value in self.headers
        ):  # a body to wait for (not an upgrade's stream); on_message_complete cancels it
            self._arm_body_timer()

    def on_body(self, body: bytes) -> None:
        if not self._refused:
            self._pos += len(body)  # contiguous unless chunked (then _pos_exact is False)
            self._arm_body_timer()
            super().on_body(body)

    def on_message_complete(self) -> None:
        if not self._refused:
            self._chunked_body = False
            self._cancel_body_timer()
            super().on_message_complete()

    def on_response_complete(self) -> None:
        pipelined = bool(self.pipeline)  # the next request's headers were read already
        super().on_response_complete()
        if self._refused:
            if not pipelined and not self.transport.is_closing():
                self._answer_431()
            return
        if not pipelined and not self.transport.is_closing():
            self._awaiting_headers = True
            self._arm_header_timer()

    # ------------------------------------------------------------------ header size
    def _head_size(self) -> int:
        """Bytes of the request line and headers that just completed, CRLFCRLF included.

        llhttp (as httptools runs it) takes CRLF line ends only and no obs-fold, so a head ends at
        the first empty line after its start: found in the reads, exact whatever their boundaries.
        Where the start is not known exactly (a request pipelined after a chunked body in the
        same read), the parser's own pieces are counted instead: method, target, version, header
        names and values, and the separators as senders write them (one space after each colon;
        llhttp hands over no other whitespace).
        """
        start = self._head_start
        if self._start_exact:
            keep = min(-start, len(self._tail)) if start < 0 else 0
            buf = self._tail[len(self._tail) - keep :] + self._data if keep else self._data
            end = buf.find(b"\r\n\r\n", max(start, 0))
            if end >= 0:
                self._pos = end + 4 - keep
                return self._pos - start
        self._pos_exact = False
        version = b"HTTP/" + self.parser.get_http_version().encode()
        size = len(self.parser.get_method()) + self._parsed_head + len(version) + 6
        self._pos = start + size  # still a lower bound
        return size

    def _refuse(self) -> None:
        """Answer 431 and close; after the responses still owed, when requests were pipelined
        before this one (answers go out in request order, RFC 9112 section 9.3.2)."""
        self._refused = True
        self._cancel_header_timer()
        if self.pipeline or (self.cycle is not None and not self.cycle.response_complete):
            self.flow.pause_reading()  # answered from on_response_complete
            return
        self._answer_431()

    def _answer_431(self) -> None:
        self._log_access(431, None)
        _plain_answer(
            self.transport,
            b"431 Request Header Fields Too Large",
            b"request headers larger than %d bytes" % self._limits.max_header_bytes,
            self.url,
            self._default_headers(),
        )

    def _log_access(self, status: int, scope: dict[str, Any] | None) -> None:
        """uvicorn's access line (``uvicorn.access``, its format and filters, the redaction
        included) for an answer the guard writes itself, which uvicorn never logs: a 408 of
        ``scope``'s request, or a 431 (``scope`` ``None``: the request was never built; its
        method and target as far as they were read, the target cut at
        :data:`LOGGED_TARGET_CHARS`)."""
        if not self.access_log:  # FLEETMIND_ACCESS_LOG=off (uvicorn's access_log=False)
            return
        if scope is not None:
            client = get_client_addr(scope)
            method, target = scope["method"], get_path_with_query_string(scope)
            version = scope["http_version"]
        else:
            client = f"{self.client[0]}:{self.client[1]}" if self.client else ""
            try:
                method = self.parser.get_method().decode("ascii", "replace") or "-"
                version = self.parser.get_http_version()
            except Exception:  # noqa: BLE001 - httptools: no request line parsed yet
                method, version = "-", "1.1"
            target = self.url.decode("latin-1") or "-"
            if len(target) > LOGGED_TARGET_CHARS:
                target = target[:LOGGED_TARGET_CHARS] + "..."
        self.access_logger.info('%s - "%s %s HTTP/%s" %d', client, method, target, version, status)

    # ------------------------------------------------------------------ limits
    def idle(self) -> bool:
        """No request in progress: waiting for (the rest of) a request's headers."""
        return self._awaiting_headers and (self.cycle is None or self.cycle.response_complete)

    def _arm_header_timer(self) -> None:
        self._cancel_header_timer()
        self._header_timer = self.loop.call_later(
            self._limits.header_timeout_s, self._header_timeout
        )

    def _cancel_header_timer(self) -> None:
        if self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None

    def _header_timeout(self) -> None:
        self._header_timer = None
        if self.idle() and not self.transport.is_closing():
            self.transport.close()

    def _arm_body_timer(self) -> None:
        self._cancel_body_timer()
        self._body_moved = self.loop.time()
        self._body_timer = self.loop.call_later(self._limits.body_timeout_s, self._body_timeout)

    def _body_stalled_s(self) -> float:
        """Seconds the request body has waited for the client (0: not waiting for one)."""
        if self._body_timer is None or self._held_back() or self.transport.is_closing():
            return 0.0
        return self.loop.time() - self._body_moved

    def _cancel_body_timer(self) -> None:
        if self._body_timer is not None:
            self._body_timer.cancel()
            self._body_timer = None

    def _body_timeout(self) -> None:
        """No body byte for ``body_timeout_s``: 408 (unless a response started) and close; the
        wait does not count while the server holds the body back (see the module docstring)."""
        self._body_timer = None
        if self.transport.is_closing():
            return
        if self._held_back():
            self._arm_body_timer()
            return
        self._cut_body(b"no request body byte for %g seconds" % self._limits.body_timeout_s)

    def _held_back(self) -> bool:
        """Whether the server, not the client, holds the body back: reading paused for flow
        control, a client waiting for ``100 Continue``, or a pipelined request queued behind one
        whose answer is still owed (its ``receive()`` resumes reading, so the queued body's bytes
        may stop without the client being slow; a 408 then would go out in the middle of the
        earlier answer)."""
        cycle = self.cycle
        return bool(
            self.flow.read_paused
            or (cycle is not None and cycle.waiting_for_100_continue)
            or self.pipeline
        )

    def _cut_body(self, text: bytes) -> None:
        """Answer 408 with ``text`` (unless a response started) and close: the body stopped
        arriving."""
        self._cancel_body_timer()
        cycle = self.cycle
        if cycle is not None and not cycle.response_started:
            cycle.disconnected = True  # the app's own answer, if any, is dropped
            state = cycle.scope.get("state")
            if isinstance(state, dict):  # the app's metrics record the 408, not a client gone
                state[CUT_STATUS_KEY] = 408
            self._log_access(408, cycle.scope)  # type: ignore[arg-type]
            path = cycle.scope.get("path", "")
            _plain_answer(
                self.transport,
                b"408 Request Timeout",
                text,
                path.encode("utf-8"),
                self._default_headers(),
            )
        else:
            self.transport.close()

    def _make_room(self) -> None:
        """Over the connection limit: close the oldest idle connection, else refuse this one."""
        idle = [
            c
            for c in self.connections
            if c is not self and isinstance(c, GuardedHttpToolsProtocol) and c.idle()
        ]
        if idle:
            oldest = min(idle, key=lambda c: c._opened)
            oldest._cancel_header_timer()
            oldest.transport.close()
            return
        least = min(STALLED_S, self._limits.body_timeout_s)
        stalled = [
            (c._body_stalled_s(), c)
            for c in self.connections
            if c is not self and isinstance(c, GuardedHttpToolsProtocol)
        ]
        longest = max(stalled, key=lambda sc: sc[0], default=(0.0, None))
        if longest[1] is not None and longest[0] >= least:
            longest[1]._cut_body(b"request body stalled; closed to make room for a new connection")
            return
        self._cancel_header_timer()
        _plain_answer(
            self.transport,
            b"503 Service Unavailable",
            b"too many connections",
            extra=self._default_headers(),
        )


def server_options(settings: Settings) -> dict[str, Any]:
    """``uvicorn.run``/``uvicorn.Config`` keyword arguments for the connection limits.

    ``limit_concurrency`` is left to :class:`fleetmind.serving.middleware.ConcurrencyLimit` (uvicorn's own counts
    idle connections); ``timeout_keep_alive`` closes a connection idle 5 s after a response.
    ``timeout_graceful_shutdown`` (``FLEETMIND_GRACEFUL_SHUTDOWN_S``, seconds) bounds the wait for
    requests in flight after SIGTERM or SIGINT: uvicorn waits for every connection to close without
    limit otherwise, and one client sending a body a byte at a time (each byte within
    ``body_timeout_s``) kept the server from ever exiting, until SIGKILL skipped the app's shutdown
    (notifier, database). When the time is up uvicorn cancels the requests left and runs the app's
    shutdown. Each ``--workers`` process gets it with the rest of the config.
    """
    return {
        "http": GuardedHttpToolsProtocol,
        "limit_concurrency": None,
        "timeout_keep_alive": 5,
        "h11_max_incomplete_event_size": settings.max_header_bytes,  # should h11 ever be used
        "timeout_graceful_shutdown": settings.graceful_shutdown_s,
    }
