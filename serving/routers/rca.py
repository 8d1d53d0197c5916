"""``POST /api/v1/rca``: synchronous ranking of a given alert set."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from fastapi import APIRouter, Request, Response
from fastapi.exceptions import RequestValidationError
from pydantic import ValidationError

from fleetmind.data.graph import DependencyGraph
from fleetmind.rca.base import RCAResult
from fleetmind.serving.alertmap import node_for_alert
from fleetmind.serving.deps import (
    AUTH_SCOPE_KEY,
    GraphsDep,
    MetricsDep,
    RCABatcherDep,
    RCAPoolDep,
    RegistryDep,
)
from fleetmind.serving.rca_parse import _EPOCH, PlainRequest, plain_alerts, plain_columns
from fleetmind.serving.rca_pool import PoolUnavailable
from fleetmind.serving.registry import LoadedModel
from fleetmind.serving.schemas import (
    AlertIn,
    CauseOut,
    ErrorOut,
    RCARequest,
    RCARequestFast,
    RCAResponse,
    utc,
)

router = APIRouter(prefix="/api/v1/rca", tags=["rca"])

REQUEST_BODY = {
    "required": True,
    "content": {"application/json": {"schema": {"$ref": "#/components/schemas/RCARequest"}}},
}
"""The OpenAPI request body of ``POST /api/v1/rca`` (the handler parses the body itself)."""

JSON = "application/json"
PATH = "/api/v1/rca"
POOL_OUTCOME = "fleetmind.rca_pool_outcome"
"""Scope key: what the ranking processes answered when :class:`FastLane` hands a request on."""


def parse_request(body: bytes) -> RCARequest:
    """Validate the raw JSON body in one pass of pydantic-core (JSON parsing included).

    FastAPI would ``json.loads`` the body and then validate the Python objects, about twice the CPU
    for 200 alerts. Errors are FastAPI's 422 (``RequestValidationError``, locations under ``body``).
    """
    try:
        return RCARequest.model_validate_json(body)
    except ValidationError as err:
        errors = [{**e, "loc": ("body", *e["loc"])} for e in err.errors(include_url=False)]
        raise RequestValidationError(errors) from None


class _UtcOverflow(Exception):
    """A timestamp that ``AlertIn`` rejects (its UTC conversion overflows)."""


def _check_utc(dt: datetime) -> None:
    """Raise :class:`_UtcOverflow` where moving ``dt`` to UTC leaves datetime's range."""
    if dt.tzinfo is not None:
        try:
            dt.astimezone(UTC)
        except OverflowError:
            raise _UtcOverflow from None


def _seconds(dt: datetime | None) -> float | None:
    """Unix seconds of a parsed ``startsAt`` (naive = UTC); ``None`` for none or Alertmanager's
    zero time, as ``rca.features.times.parse_time`` reads the ISO string of the same instant."""
    if dt is None:
        return None
    t = (dt if dt.tzinfo is not None else dt.replace(tzinfo=UTC)).timestamp()
    return None if t < _EPOCH else t


def _iso_end(dt: datetime | None) -> str | None:
    """``endsAt`` as an ISO 8601 string in UTC; ``None`` for none or Alertmanager's zero time
    (``0001-01-01``, "no end yet"), which the analyzers read as no end either way."""
    t = _seconds(dt)
    return None if t is None else datetime.fromtimestamp(t, UTC).isoformat()


def _fast_alerts(items: Sequence[Mapping[str, Any]], epoch_seconds: bool) -> list[dict[str, Any]]:
    """The analyzer's alert dicts from :class:`RCARequestFast` alerts (see :func:`parse_alerts`).

    Raises:
        _UtcOverflow: a timestamp ``AlertIn`` would reject (only years 1 and 9999 can overflow).
    """
    out: list[dict[str, Any]] = []
    for a in items:
        s = a.get("startsAt")
        e = a.get("endsAt")
        # only an offset at the ends of datetime's range can overflow (Alertmanager's "no end",
        # 0001-01-01T00:00:00Z, is UTC and fine)
        if s is not None and (s.year == 1 or s.year == 9999) and s.utcoffset():
            _check_utc(s)
        if e is not None and (e.year == 1 or e.year == 9999) and e.utcoffset():
            _check_utc(e)
        if epoch_seconds:
            t = None
            if s is not None:  # _seconds, inlined
                t = (s if s.tzinfo is not None else s.replace(tzinfo=UTC)).timestamp()
                if t < _EPOCH:
                    t = None
            out.append(
                {
                    "status": a.get("status", "firing"),
                    "labels": a["labels"],
                    "startsAt": t,
                    "endsAt": _seconds(e),
                }
            )
        else:
            out.append(
                {
                    "status": a.get("status", "firing"),
                    "labels": a["labels"],
                    "annotations": a.get("annotations", {}),
                    "startsAt": utc(s).isoformat() if s is not None else None,
                    "endsAt": _iso_end(e),
                    "fingerprint": a.get("fingerprint"),
                }
            )
    return out


def _model_alerts(items: Sequence[AlertIn], epoch_seconds: bool) -> list[dict[str, Any]]:
    """The analyzer's alert dicts from validated :class:`AlertIn` models."""
    if epoch_seconds:
        return [
            {
                "status": m.status,
                "labels": m.labels,
                "startsAt": _seconds(m.startsAt),
                "endsAt": _seconds(m.endsAt),
            }
            for m in items
        ]
    return [
        {
            "status": m.status,
            "labels": m.labels,
            "annotations": m.annotations,
            "startsAt": m.startsAt.isoformat() if m.startsAt else None,
            "endsAt": _iso_end(m.endsAt),
            "fingerprint": m.fingerprint,
        }
        for m in items
    ]


def parse_alerts(
    body: bytes, epoch_seconds: bool
) -> tuple[PlainRequest | RCARequestFast | RCARequest, list[dict[str, Any]]]:
    """Validate the body and build the alerts as the analyzers take them.

    The alerts are Alertmanager v4 objects (``status``, ``labels``, ``startsAt``, ``endsAt``; the
    GAT's time features use ``endsAt`` of resolved alerts, as in training).
    ``epoch_seconds``: ``startsAt`` as unix seconds, for analyzers built on ``rca.features`` (the
    GAT): the value they would parse from the ISO string, without parsing it. Otherwise an ISO 8601
    string in UTC, with ``annotations`` and ``fingerprint``.

    The body is parsed into plain dicts (:class:`RCARequestFast`, about half the CPU of
    :class:`RCARequest` for 200 alerts). Whatever that model rejects, and any timestamp ``AlertIn``
    would reject, goes through :func:`parse_request`: every error is ``RCARequest``'s 422.
    With ``epoch_seconds``, :func:`plain_alerts` is tried first (cheaper still).
    """
    if epoch_seconds:
        plain = plain_alerts(body)
        if plain is not None:
            return plain
    try:
        fast = RCARequestFast.model_validate_json(body)
    except ValidationError:
        pass
    else:
        try:
            return fast, _fast_alerts(fast.alerts, epoch_seconds)
        except _UtcOverflow:
            pass
    req = parse_request(body)
    return req, _model_alerts(req.alerts, epoch_seconds)


def parse_for(
    analyzer: Any, graph: DependencyGraph, body: bytes
) -> tuple[PlainRequest | RCARequestFast | RCARequest, Any]:
    """Validate the body and build the alerts as ``analyzer`` takes them on ``graph`` (the served
    graph; a body with its own ``graph`` is parsed by :func:`parse_alerts`).

    An analyzer with ``accepts_alert_columns`` (the GAT) gets :class:`rca.features.columnar.AlertColumns`
    from :func:`serving.rca_parse.plain_columns` when that parser is sure of the body; otherwise,
    and for other analyzers, :func:`parse_alerts` (the same 422s as :class:`RCARequest`).
    """
    if getattr(analyzer, "accepts_alert_columns", False):
        fast = plain_columns(body, graph)
        if fast is not None:
            return fast
    return parse_alerts(body, bool(getattr(analyzer, "accepts_epoch_seconds", False)))


@router.post(
    "",
    response_model=RCAResponse,
    responses={422: {"model": ErrorOut}},
    summary="Rank root causes of an alert set",
    openapi_extra={"requestBody": REQUEST_BODY},
)
async def rank(
    request: Request,
    registry: RegistryDep,
    graphs: GraphsDep,
    metrics: MetricsDep,
    batcher: RCABatcherDep,
    pool: RCAPoolDep,
) -> Response:
    """Rank root-cause candidates on the served graph (or on ``graph`` when given).

    The ranking runs on the process's RCA thread (:mod:`serving.rca_batcher`), batched with the
    requests that arrive meanwhile; the event loop stays free for other requests. The body is an
    ``RCARequest`` (see the OpenAPI spec); the answer an ``RCAResponse``, serialised here.
    """
    model = registry.current.rca
    body = await request.body()
    outcome = request.scope.get(POOL_OUTCOME)  # FastLane asked the ranking processes already
    if outcome is None and pool is not None:  # a ranking process parses, ranks and answers
        start = time.perf_counter()
        try:
            outcome = await pool.rank(model, graphs.graph, body)
        except PoolUnavailable:  # no process could answer: rank here
            outcome = ("unavailable", None)
        if outcome[0] == "ok":
            metrics.rca_latency.labels(model.method).observe(time.perf_counter() - start)
            return Response(outcome[1], media_type=JSON)
    if outcome is not None and outcome[0] == "error":
        raise outcome[1]
    # no ranking process, or "invalid" (the parse below raises RCARequest's 422): rank here
    graph = graphs.graph  # read once: the alert columns are valid on this graph object only
    req, alerts = parse_for(model.impl, graph, body)
    if req.graph is not None:  # validating a large graph is CPU work: keep it off the event loop
        from starlette.concurrency import run_in_threadpool

        graph = await run_in_threadpool(DependencyGraph.from_json, req.graph.model_dump())
    start = time.perf_counter()
    result = await batcher.rank(model.impl, graph, alerts, req.top_k)
    metrics.rca_latency.labels(model.method).observe(time.perf_counter() - start)
    return Response(response_json(model, graph, alerts, req.top_k, result), media_type=JSON)


def response_json(
    model: LoadedModel,
    graph: DependencyGraph,
    alerts: Sequence[Mapping[str, Any]],
    top_k: int,
    result: RCAResult,
) -> bytes:
    """The ``RCAResponse`` JSON of ``result`` (``alerts`` ranked on ``graph`` by ``model``)."""
    unmapped = result.extra.get("unmapped_alerts") if result.extra else None
    if isinstance(unmapped, int):  # the analyzer mapped the alerts already (the GAT does)
        mapped = len(alerts) - unmapped
    else:
        mapped = sum(1 for a in alerts if node_for_alert(graph, a["labels"]) is not None)
    body = RCAResponse(
        causes=[CauseOut(**c.to_json()) for c in result.causes[:top_k]],
        method=result.method or model.method,
        model_version=result.model_version or model.version,
        graph=graph.name,
        mapped_alerts=mapped,
        fallback_reason=model.fallback_reason,
    )
    return body.model_dump_json().encode()


class FastLane:
    """ASGI middleware: ``POST /api/v1/rca`` straight to the ranking processes.

    With ranking processes (``FLEETMIND_RCA_PROCESSES``), the server process only moves bytes for
    an RCA request: this lane skips FastAPI's routing and dependency resolution for it (~a third
    of the server process's CPU per request) and answers the ranking process's response as is.
    It serves only the plain case: the app started, a ranking pool, no dependency overrides, the
    bearer token right or not required, and an ``ok`` answer. Everything else (a 401, a body the
    processes found invalid, a ranking error, no process alive) goes on to the route with the body
    and the processes' answer (scope key :data:`POOL_OUTCOME`), which answers exactly as before.
    Sits inside the body-size and metrics middlewares, so limits and request metrics apply; the
    request is timed under the route's template.
    """

    def __init__(self, app: Any) -> None:
        self.app = app
        self._route: Any = None

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope["path"] != PATH or scope["method"] != "POST":
            await self.app(scope, receive, send)
            return
        fast = scope.get("app")
        services = getattr(getattr(fast, "state", None), "services", None)
        pool = getattr(services, "rca_pool", None)
        if pool is None or fast.dependency_overrides or not _token_ok(services, scope):
            # (the auth middleware outside this one has already answered 401/403)
            await self.app(scope, receive, send)
            return
        chunks = []
        while True:
            message = await receive()
            if message["type"] != "http.request":  # client gone
                return
            chunks.append(message.get("body", b""))
            if not message.get("more_body", False):
                break
        body = b"".join(chunks)
        model = services.registry.current.rca
        start = time.perf_counter()
        try:
            outcome = await pool.rank(model, services.graphs.graph, body)
        except PoolUnavailable:
            outcome = ("unavailable", None)
        scope["route"] = self._route = self._route or _find_route(fast)
        if outcome[0] != "ok":
            scope[POOL_OUTCOME] = outcome
            await self.app(scope, _replay(body, receive), send)
            return
        services.metrics.rca_latency.labels(model.method).observe(time.perf_counter() - start)
        payload = outcome[1]
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [
                    (b"content-length", str(len(payload)).encode()),
                    (b"content-type", JSON.encode()),
                ],
            }
        )
        await send({"type": "http.response.body", "body": payload})


def _token_ok(services: Any, scope: Any) -> bool:
    """The route's ``read`` scope: no token configured, or the auth middleware granted it."""
    if not services.settings.tokens():
        return True
    return "read" in scope.get(AUTH_SCOPE_KEY, ())


def _find_route(app: Any) -> Any:
    return next((r for r in app.routes if getattr(r, "path", None) == PATH), None)


def _replay(body: bytes, receive: Any) -> Any:
    sent = False

    async def again() -> Any:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return again
