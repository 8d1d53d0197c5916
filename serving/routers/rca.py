"""``POST /api/v1/rca``: synchronous ranking of a given alert set."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from fastapi import APIRouter, Request, Response
from fastapi.exceptions import RequestValidationError
from pydantic import ValidationError

from data.graph import DependencyGraph
from serving.alertmap import node_for_alert
from serving.deps import GraphsDep, MetricsDep, RCABatcherDep, RegistryDep
from serving.schemas import CauseOut, ErrorOut, RCARequest, RCARequestFast, RCAResponse, utc

router = APIRouter(prefix="/api/v1/rca", tags=["rca"])

REQUEST_BODY = {
    "required": True,
    "content": {"application/json": {"schema": {"$ref": "#/components/schemas/RCARequest"}}},
}
"""The OpenAPI request body of ``POST /api/v1/rca`` (the handler parses the body itself)."""

_EPOCH = datetime(1970, 1, 1).timestamp()
"""Timestamps below this are "no time" for the analyzers (``rca.features.parse_time``)."""


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


def _utc_overflows(dt: datetime | None) -> bool:
    """True where ``AlertIn``'s UTC conversion fails (an offset pushes the instant out of range)."""
    if dt is None or dt.tzinfo is None or 1 < dt.year < 9999:
        return False
    try:
        dt.astimezone(UTC)
    except OverflowError:
        return True
    return False


def parse_fast(body: bytes) -> RCARequestFast | RCARequest:
    """Parse the body into plain alert dicts (:class:`RCARequestFast`), about 2x cheaper.

    A body that the fast model rejects, or whose timestamps ``AlertIn`` would reject, goes through
    :func:`parse_request`, so every error is exactly ``RCARequest``'s 422.
    """
    try:
        req = RCARequestFast.model_validate_json(body)
    except ValidationError:
        return parse_request(body)
    for a in req.alerts:
        if _utc_overflows(a.get("startsAt")) or _utc_overflows(a.get("endsAt")):
            return parse_request(body)
    return req


def _seconds(dt: datetime | None) -> float | None:
    """Unix seconds of a parsed ``startsAt`` (naive = UTC); ``None`` for none or Alertmanager's
    zero time, as ``rca.features.parse_time`` reads the ISO string of the same instant."""
    if dt is None:
        return None
    t = (dt if dt.tzinfo is not None else dt.replace(tzinfo=UTC)).timestamp()
    return None if t < _EPOCH else t


def analyzer_alerts(req: RCARequestFast | RCARequest, epoch_seconds: bool) -> list[dict[str, Any]]:
    """The alerts as the analyzers take them (Alertmanager v4 objects, ``endsAt`` left out).

    ``epoch_seconds``: ``startsAt`` as unix seconds (analyzers built on ``rca.features``, the GAT:
    the same values they would parse from the ISO string, without parsing it); otherwise an ISO 8601
    string in UTC with ``annotations`` and ``fingerprint``, as before.
    """
    out: list[dict[str, Any]] = []
    if isinstance(req, RCARequestFast):
        items: Sequence[Mapping[str, Any]] = req.alerts
        if epoch_seconds:
            for a in items:
                out.append(
                    {
                        "status": a.get("status", "firing"),
                        "labels": a["labels"],
                        "startsAt": _seconds(a.get("startsAt")),
                    }
                )
            return out
        for a in items:
            dt = a.get("startsAt")
            out.append(
                {
                    "status": a.get("status", "firing"),
                    "labels": a["labels"],
                    "annotations": a.get("annotations", {}),
                    "startsAt": utc(dt).isoformat() if dt else None,
                    "fingerprint": a.get("fingerprint"),
                }
            )
        return out
    for m in req.alerts:
        if epoch_seconds:
            out.append({"status": m.status, "labels": m.labels, "startsAt": _seconds(m.startsAt)})
        else:
            out.append(
                {
                    "status": m.status,
                    "labels": m.labels,
                    "annotations": m.annotations,
                    "startsAt": m.startsAt.isoformat() if m.startsAt else None,
                    "fingerprint": m.fingerprint,
                }
            )
    return out


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
) -> Response:
    """Rank root-cause candidates on the served graph (or on ``graph`` when given).

    The ranking runs on the process's RCA thread (:mod:`serving.rca_batcher`), batched with the
    requests that arrive meanwhile; the event loop stays free for other requests. The body is an
    ``RCARequest`` (see the OpenAPI spec); the answer an ``RCAResponse``, serialised here.
    """
    req = parse_fast(await request.body())
    if req.graph is not None:  # validating a large graph is CPU work: keep it off the event loop
        from starlette.concurrency import run_in_threadpool

        graph = await run_in_threadpool(DependencyGraph.from_json, req.graph.model_dump())
    else:
        graph = graphs.graph
    model = registry.current.rca
    alerts = analyzer_alerts(req, bool(getattr(model.impl, "accepts_epoch_seconds", False)))
    start = time.perf_counter()
    result = await batcher.rank(model.impl, graph, alerts, req.top_k)
    metrics.rca_latency.labels(model.method).observe(time.perf_counter() - start)
    unmapped = result.extra.get("unmapped_alerts") if result.extra else None
    if isinstance(unmapped, int):  # the analyzer mapped the alerts already (the GAT does)
        mapped = len(alerts) - unmapped
    else:
        mapped = sum(1 for a in alerts if node_for_alert(graph, a["labels"]) is not None)
    body = RCAResponse(
        causes=[CauseOut(**c.to_json()) for c in result.causes[: req.top_k]],
        method=result.method or model.method,
        model_version=result.model_version or model.version,
        graph=graph.name,
        mapped_alerts=mapped,
        fallback_reason=model.fallback_reason,
    )
    return Response(body.model_dump_json().encode(), media_type="application/json")
