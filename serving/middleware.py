"""The service's own ASGI middleware, in the order :func:`fleetmind.serving.app.create_app` stacks
them (outermost first): :class:`SecurityHeaders` on every answer, :class:`ConcurrencyLimit` on the
requests in progress, :class:`RCAAdmission` on the RCA queue and deadline, and
:class:`BodyLimitMiddleware` on request body sizes. Each answers its refusals itself, as JSON
``{"detail": ...}``, before any route runs.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Mapping
from typing import Any

from fleetmind.serving.deps import PUBLIC_PATHS
from fleetmind.serving.metrics import Metrics

log = logging.getLogger("fleetmind.serving")

WEBHOOK_PATH = "/api/v1/alerts"
"""The Alertmanager webhook's path (``POST``), which has its own body limit
(``FLEETMIND_MAX_WEBHOOK_BYTES``)."""

SCHEDULER_PATHS = ("/api/v1/scheduler/filter", "/api/v1/scheduler/prioritize")
"""The kube-scheduler extender's filter and prioritize (``POST``), which have their own body limit
(:data:`SCHEDULER_MAX_BYTES`)."""
SCHEDULER_NODES = 5_000
SCHEDULER_NODE_BYTES = 16 * 1024
SCHEDULER_MAX_BYTES = SCHEDULER_NODES * SCHEDULER_NODE_BYTES
"""The extender's default body limit (``FLEETMIND_MAX_SCHEDULER_BYTES``), 81,920,000 bytes (about
78 MiB; the global limit when that is larger): ``ExtenderArgs`` of :data:`SCHEDULER_NODES` candidate nodes of up to
:data:`SCHEDULER_NODE_BYTES` each. With ``nodeCacheCapable: false`` kube-scheduler sends every
candidate's full ``v1.Node``: with labels from GPU feature discovery, conditions and the node's
image list one takes ~15 KB (kubelet reports up to 50 images, ``--node-status-max-images``), so the
16 MiB global limit refused lists of more than ~1,100 nodes with 413, which kube-scheduler reads
as the extender failing (skipped when ``ignorable``, else every pod pending). With
``percentageOfNodesToScore: 100`` (common for bin packing) every feasible node is sent.
``nodeCacheCapable: true`` sends names only (~20 bytes a node)."""


class ConcurrencyLimit:
    """At most ``limit`` HTTP requests in progress in this process; beyond it 503 at once (before
    the token or the body is read). The probes (:data:`fleetmind.serving.deps.PUBLIC_PATHS`) are always
    answered, so a saturated process still reports itself alive.

    Replaces uvicorn's ``limit_concurrency``, which counts open connections: idle sockets, which
    cost nothing here, then crowd out every request (:mod:`fleetmind.serving.http_guard` bounds them).

    Every route that answers ``GET`` also answers ``HEAD`` (``curl -I``, load balancers' health
    checks, link checkers): as ``GET``, without the content (RFC 9110 section 9.3.2), see
    :func:`head_as_get`. RFC 9110 section 9.1 says general-purpose servers MUST support ``GET``
    and ``HEAD``; Starlette's ``Route`` adds ``HEAD`` to ``GET`` routes, FastAPI's ``APIRoute``
    does not (fastapi/fastapi issue 1773), so every API and UI page answered 405 to it. A
    route without ``GET`` answers ``HEAD`` with its own 405 and ``Allow``.
    """

    def __init__(self, app: Any, limit: int) -> None:
        self.app = app
        self.limit = limit
        self.in_flight = 0

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if scope.get("method") == "HEAD":
            scope, send = head_as_get(scope, send)
        if scope.get("path") in PUBLIC_PATHS:
            await self.app(scope, receive, send)
            return
        if self.in_flight >= self.limit:
            await _json_answer(send, 503, "too many requests in progress; retry shortly", 1)
            return
        self.in_flight += 1
        try:
            await self.app(scope, receive, send)
        finally:
            self.in_flight -= 1


def head_as_get(scope: Any, send: Any) -> tuple[Any, Any]:
    """A ``HEAD`` request served as ``GET``: a copy of ``scope`` (the server keeps its own
    ``HEAD``) and a ``send`` that drops the content but keeps the headers, ``Content-Length``
    included (RFC 9110 section 9.3.2: the same header fields as ``GET``, no content)."""

    async def _send(message: Any) -> None:
        if message["type"] == "http.response.body":
            message = {**message, "body": b""}
        await send(message)

    return {**scope, "method": "GET"}, _send


class SecurityHeaders:
    """``X-Content-Type-Options: nosniff`` on every response (a browser never runs a JSON answer
    or an error page as a script or a style), and on ``/ui`` answers without a page's own
    ``Content-Security-Policy`` (redirects, plain errors) one that allows nothing."""

    UI_DEFAULT_CSP = (
        b"default-src 'none'; frame-ancestors 'none'; form-action 'self'; base-uri 'none'"
    )

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        ui = scope.get("path", "").startswith("/ui")

        async def _send(message: Any) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", ()))
                names = {k.lower() for k, _ in headers}
                if b"x-content-type-options" not in names:
                    headers.append((b"x-content-type-options", b"nosniff"))
                if ui and b"content-security-policy" not in names:
                    headers.append((b"content-security-policy", self.UI_DEFAULT_CSP))
                message = {**message, "headers": headers}
            await send(message)

        await self.app(scope, receive, _send)


class RCAAdmission:
    """Bound the RCA work of this process: ``POST /api/v1/rca`` requests admitted at once (queued
    or ranking) and how long each may take.

    Beyond ``max_queue`` a request gets 429 with ``Retry-After`` at once (before its body is read);
    one not answered within ``deadline_s`` gets 503 with ``Retry-After`` (its queued work is
    dropped: the ranking thread and processes skip requests whose client is gone).
    """

    PATH = "/api/v1/rca"

    def __init__(self, app: Any, max_queue: int, deadline_s: float) -> None:
        self.app = app
        self.max_queue = max_queue
        self.deadline_s = deadline_s
        self.in_flight = 0

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope["path"] != self.PATH or scope["method"] != "POST":
            await self.app(scope, receive, send)
            return
        if self.in_flight >= self.max_queue:
            await _json_answer(send, 429, "too many RCA requests queued; retry shortly", 1)
            return
        started = False

        async def _send(message: Any) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        self.in_flight += 1
        try:
            await asyncio.wait_for(self.app(scope, receive, _send), self.deadline_s)
        except TimeoutError:
            if not started:
                retry = max(1, round(self.deadline_s / 10))
                await _json_answer(send, 503, "RCA request timed out in the queue; retry", retry)
        finally:
            self.in_flight -= 1


async def _json_answer(send: Any, code: int, detail: str, retry_after: int | None = None) -> None:
    body = json.dumps({"detail": detail}).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    if retry_after is not None:
        headers.append((b"retry-after", str(retry_after).encode()))
    await send({"type": "http.response.start", "status": code, "headers": headers})
    await send({"type": "http.response.body", "body": body})


class BodyLimitMiddleware:
    """Reject request bodies larger than their limit with 413 (declared or streamed).

    Args:
        app: the ASGI app inside.
        max_bytes: the limit of every request but those of ``route_limits``, bytes.
        route_limits: ``(method, path)`` -> its own limit, bytes (the Alertmanager webhook's).
        metrics: counts each refusal in ``fleetmind_http_bodies_too_large_total`` by ``route``
            (a path of ``route_limits``, or ``other``).
        scheduler_bytes: the limit of the extender's filter and prioritize
            (:data:`SCHEDULER_PATHS`, ``FLEETMIND_MAX_SCHEDULER_BYTES``) unless ``route_limits``
            names them, bytes; ``max_bytes`` when that is larger. Their refusals count as ``other`` (each is logged with its path).

    Each refusal is also logged (a warning, with the size): a sender such as Alertmanager does
    not retry a 4xx, so the alerts of a refused webhook are lost without it being seen here.
    """

    def __init__(
        self,
        app: Any,
        max_bytes: int,
        route_limits: Mapping[tuple[str, str], int] | None = None,
        metrics: Metrics | None = None,
        scheduler_bytes: int = SCHEDULER_MAX_BYTES,
    ) -> None:
        self.app = app
        self.max_bytes = max_bytes
        self.route_limits = dict(route_limits or {})
        self._labelled = {p for _, p in self.route_limits}
        """Paths counted under their own ``route`` label (the others: ``other``)."""
        for path in SCHEDULER_PATHS:
            self.route_limits.setdefault(("POST", path), max(scheduler_bytes, max_bytes))
        self.metrics = metrics
        if metrics is not None:  # at 0 from the start: rate() sees the first refusal
            for route in self._labelled | {"other"}:
                metrics.bodies_too_large.labels(route)

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path = scope.get("path", "")
        # one trailing slash is the same route: FastAPI redirects it (307) and Alertmanager
        # follows, so the webhook configured as ".../alerts/" keeps the webhook's limit and label
        key = (scope.get("method", ""), path[:-1] if len(path) > 1 and path[-1] == "/" else path)
        limit = self.route_limits.get(key, self.max_bytes)
        declared = None
        for k, v in scope.get("headers", ()):
            if k == b"content-length":
                try:
                    declared = int(v)
                except ValueError:
                    declared = -1
        if declared is not None and (declared < 0 or declared > limit):
            await self._refuse(send, key, limit, f"{declared} bytes declared")
            return
        if declared is not None:
            await self.app(scope, receive, send)
            return
        # Chunked body: read it whole (bounded), then replay it.
        chunks: list[bytes] = []
        size = 0
        more = True
        while more:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            body = message.get("body", b"")
            size += len(body)
            if size > limit:
                await self._refuse(send, key, limit, f"more than {limit} bytes streamed")
                return
            chunks.append(body)
            more = message.get("more_body", False)
        sent = False

        async def replay() -> Any:
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": b"".join(chunks), "more_body": False}
            return await receive()

        await self.app(scope, replay, send)

    async def _refuse(self, send: Any, key: tuple[str, str], limit: int, size: str) -> None:
        """Answer 413, count it and log it (``size``: what the request declared or sent)."""
        route = key[1] if key in self.route_limits else "other"
        if self.metrics is not None:
            self.metrics.bodies_too_large.labels(
                route if route in self._labelled else "other"
            ).inc()
        log.warning(
            "413 for %s %r: %s, the limit is %d bytes%s",  # repr: a decoded path may hold newlines
            key[0][:20],
            key[1][:200],
            size,
            limit,
            _REFUSAL_HINT.get(route, ""),
        )
        await _too_large(send, limit)


_SCHEDULER_HINT = (
    "; kube-scheduler reads it as the extender failing (skipped when ignorable, else the pod "
    "stays pending): set nodeCacheCapable: true in its extender config (node names only)"
)
_REFUSAL_HINT = {
    WEBHOOK_PATH: "; its alerts are lost (Alertmanager does not retry a 4xx): lower max_alerts "
    "in the receiver's webhook_config or raise FLEETMIND_MAX_WEBHOOK_BYTES",
    **dict.fromkeys(SCHEDULER_PATHS, _SCHEDULER_HINT),
}
"""What a refused body costs, per route, for the warning."""


async def _too_large(send: Any, limit: int) -> None:
    body = f'{{"detail":"request body larger than {limit} bytes"}}'.encode()
    await send(
        {
            "type": "http.response.start",
            "status": 413,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})
