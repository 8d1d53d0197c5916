"""``/api/v1/alerts``: the Alertmanager webhook v4 receiver and a read-back listing."""

from __future__ import annotations

import hashlib
import json
import logging
import time
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, Query, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.exceptions import RequestValidationError
from pydantic import ValidationError

from fleetmind.serving.db import NO_START, is_input_error
from fleetmind.serving.deps import DbDep, IncidentsDep, MetricsDep, require_scope
from fleetmind.serving.schemas import (
    MAX_DB_INT,
    TEXT_LIMIT,
    AlertIn,
    AlertmanagerWebhook,
    AlertOut,
    ErrorOut,
    IngestResponse,
    RejectedAlert,
    from_unix,
)
from fleetmind.serving.validation import MAX_ERRORS, json_safe_error, one_line

router = APIRouter(prefix="/api/v1/alerts", tags=["alerts"])
log = logging.getLogger("fleetmind.serving")

_UNSET_YEAR = 1  # Alertmanager sends 0001-01-01T00:00:00Z for an unknown endsAt (or startsAt)


def fingerprint_of(labels: dict[str, str]) -> str:
    """A stable label-set hash for senders that do not send Alertmanager's ``fingerprint``.

    Every label is hashed as received, an empty value included: the hash is the stored alert's key,
    so it must not change across releases (a resolve computed otherwise than its firing would
    leave the firing alert open). Alertmanager sends its own fingerprint, computed after it
    removed empty labels (``removeEmptyLabels`` in prometheus/alertmanager ``api/v2/api.go``).
    """
    h = hashlib.sha256()
    for k in sorted(labels):
        h.update(k.encode())
        h.update(b"\xff")
        h.update(labels[k].encode())
        h.update(b"\xfe")
    return h.hexdigest()[:16]


def alert_row(a: AlertIn, now: float) -> dict[str, Any]:
    """The database row of one inbound alert."""
    ends = a.endsAt if a.endsAt is not None and a.endsAt.year > _UNSET_YEAR else None
    # a zero startsAt is unset too, as Alertmanager's API takes it (api/v2 ``postAlertsHandler``:
    # ``StartsAt.IsZero()`` -> its ``EndsAt`` when that is set, else now)
    starts = a.startsAt if a.startsAt is not None and a.startsAt.year > _UNSET_YEAR else None
    if starts is not None:
        starts_ts = starts.timestamp()
    else:
        starts_ts = now if ends is None else min(now, ends.timestamp())
    return {
        "fingerprint": a.fingerprint or fingerprint_of(a.labels),
        "starts_at": starts.isoformat() if starts is not None else NO_START,
        "starts_ts": starts_ts,
        "ends_ts": ends.timestamp() if ends is not None else None,
        "status": a.status,
        "alertname": a.labels.get("alertname"),
        "labels": a.labels,
        "annotations": a.annotations,
        "generator_url": a.generatorURL,
        "node": None,
        "received_ts": now,
        "updated_ts": now,
        "pending": True,
        "incident_id": None,
    }


WEBHOOK_BODY = {
    "required": True,
    "content": {
        "application/json": {"schema": {"$ref": "#/components/schemas/AlertmanagerWebhook"}}
    },
}
"""The OpenAPI request body of ``POST /api/v1/alerts`` (the handler parses the body itself)."""

MAX_LISTED_REJECTIONS = 20


def clip_text(value: str) -> str:
    """``value`` cut to :data:`fleetmind.serving.schemas.TEXT_LIMIT` characters, ending in a note of
    its length and a hash of the whole (so two long values that differ late stay different)."""
    if len(value) <= TEXT_LIMIT:
        return value
    digest = hashlib.blake2b(value.encode("utf-8", "surrogatepass"), digest_size=8).hexdigest()
    tail = f"... [clipped from {len(value)} characters, blake2b {digest}]"
    return value[: TEXT_LIMIT - len(tail)] + tail


def _clip_long_text(doc: Any) -> int:
    """Clip, in place, the over-long strings of a webhook document's alerts where rules and
    templates put text (label values, annotations, ``generatorURL``); returns how many were
    clipped. Prometheus puts no limit on these, and Alertmanager does not retry a 4xx: rejected,
    the alert would be lost. The envelope's text needs no clipping: a field of it that does not
    validate reads as ``None`` (:data:`fleetmind.serving.schemas.UNREAD_ENVELOPE`)."""
    if not isinstance(doc, dict):
        return 0
    clipped = 0

    def clip_in(obj: Any, keys: Any) -> None:
        nonlocal clipped
        if not isinstance(obj, dict):
            return
        for k in list(keys if keys is not None else obj):
            v = obj.get(k)
            if isinstance(v, str) and len(v) > TEXT_LIMIT:
                obj[k] = clip_text(v)
                clipped += 1

    items = doc.get("alerts")
    for a in items if isinstance(items, list) else ():
        if isinstance(a, dict):
            clip_in(a.get("labels"), None)
            clip_in(a.get("annotations"), None)
            clip_in(a, ("generatorURL",))
    return clipped


def _brief(e: dict[str, Any]) -> dict[str, Any]:
    """One pydantic error with FastAPI's ``body`` location prefix (its 422 format): type, location
    and message only, JSON-safe (:mod:`fleetmind.serving.validation`). The input can be bytes that are not
    UTF-8, a lone surrogate or a dict key that JSON cannot carry (a 500, which Alertmanager retries
    forever), or megabytes long."""
    return json_safe_error({"type": e["type"], "loc": ("body", *e["loc"]), "msg": e["msg"]})


def _body_errors(errors: list[Any]) -> list[dict[str, Any]]:
    return [_brief(e) for e in errors[:MAX_ERRORS]]


def _where(loc: Any) -> str:
    """A ``loc`` of :func:`_brief` without its ``body`` prefix, as ``alerts.3.labels.alertname``."""
    parts = list(loc)
    if parts[:1] == ["body"]:
        parts = parts[1:]
    return one_line(".".join(str(p) for p in parts)) or "body"


def log_refused(body: bytes, errors: list[dict[str, Any]]) -> None:
    """Say in one WARNING line why a whole webhook was refused (422, nothing stored): how many
    alerts it held (Alertmanager does not retry a 4xx: they are lost) and its first error. The
    refusal is counted in ``fleetmind_http_request_duration_seconds`` (``route="/api/v1/alerts"``,
    ``status="422"``)."""
    try:
        items = json.loads(body).get("alerts")
        held = f"{len(items)} alerts lost" if isinstance(items, list) else "no alerts list"
    except RecursionError:
        held = "JSON nested too deeply"
    except (ValueError, AttributeError):
        held = "not a JSON object"
    first = errors[0] if errors else {"loc": ("body",), "msg": "invalid"}
    log.warning(
        "webhook refused (422, nothing stored: %s); %d errors, first %s: %s",
        held,
        len(errors),
        _where(first.get("loc", ())),
        one_line(first.get("msg", "")),
    )


def parse_webhook(body: bytes) -> tuple[list[AlertIn], list[RejectedAlert]]:
    """:func:`parse_indexed` without the positions and the envelope's ``truncatedAlerts``."""
    valid, _, rejected, _ = parse_indexed(body)
    return valid, rejected


_QUIET = {"quiet": True}
"""Validation context of a second reading of the same webhook: its warnings were logged once."""


def _truncated_of(doc: dict[str, Any]) -> int:
    """The envelope's ``truncatedAlerts`` as the all-valid path reads it: validated JSON-mode by
    :class:`AlertmanagerWebhook` itself, so ``"5"`` and ``5.0`` count 5 on both paths and a value
    that is not a count reads as 0 on both (Alertmanager sends an integer: ``TruncatedAlerts
    uint64`` of ``Message`` in prometheus/alertmanager ``notify/webhook/webhook.go``). Quiet: the
    first reading of the webhook logged a bad value already."""
    envelope = {"alerts": [], "truncatedAlerts": doc.get("truncatedAlerts")}
    hook = AlertmanagerWebhook.model_validate_json(json.dumps(envelope), context=_QUIET)
    return hook.truncatedAlerts or 0


def parse_indexed(
    body: bytes, context: dict[str, Any] | None = None
) -> tuple[list[AlertIn], list[int], list[RejectedAlert], int]:
    """The valid alerts of a webhook body, and the invalid ones left out.

    A body that validates as :class:`AlertmanagerWebhook` gives all its alerts (one pydantic-core
    pass). When only some alerts are invalid, those are left out and the others are returned, so one
    bad alert does not cost the rest: Alertmanager does not retry a 4xx answer, so a 422 for the
    whole webhook would drop the whole group notification.

    Args:
        context: pydantic's validation context (``{"quiet": True}``: a second reading, whose
            warnings the first one logged).

    Returns:
        the valid alerts, their positions in the body's ``alerts``, the rejected ones, and the
        envelope's ``truncatedAlerts`` (0 when absent or not a count of alerts).

    Raises:
        RequestValidationError: the body is not JSON (or not UTF-8), the envelope is invalid (no
            ``alerts`` list), or no alert of it is valid; FastAPI's 422.
    """
    try:
        hook = AlertmanagerWebhook.model_validate_json(body, context=context)
        return hook.alerts, list(range(len(hook.alerts))), [], hook.truncatedAlerts or 0
    except ValidationError as err:
        errors = err.errors(include_url=False)
    if any(e["type"] == "string_too_long" for e in errors):
        try:
            doc = json.loads(body)
        except ValueError:
            doc = None
        n = _clip_long_text(doc)
        if n:  # once: what is left too long (a label name) is rejected below
            log.info("webhook: clipped %d values longer than %d characters", n, TEXT_LIMIT)
            return parse_indexed(json.dumps(doc).encode(), context=_QUIET)
    by_alert: dict[int, list[dict[str, Any]]] = {}
    for e in errors:
        loc = e["loc"]
        if len(loc) >= 2 and loc[0] == "alerts" and type(loc[1]) is int:
            by_alert.setdefault(loc[1], []).append(e)
        else:  # the envelope itself: nothing can be trusted
            raise RequestValidationError(_body_errors(errors))
    try:  # pydantic parsed the JSON and found an alerts list: only some alerts failed
        doc = json.loads(body)
        items = doc["alerts"]
        truncated = _truncated_of(doc)
    except (ValueError, KeyError, TypeError, AttributeError):  # json and pydantic disagree
        raise RequestValidationError(_body_errors(errors)) from None
    valid = []
    positions = []
    for i, a in enumerate(items):
        if i in by_alert:
            continue
        try:
            valid.append(AlertIn.model_validate(a))
            positions.append(i)
        except ValidationError as err:  # a value JSON-mode validation took and Python mode not
            by_alert[i] = [{**e, "loc": ("alerts", i, *e["loc"])} for e in err.errors()]
    if not valid:
        raise RequestValidationError(_body_errors(errors))
    rejected = [
        RejectedAlert(
            index=i,
            # type, location and message only: the input may be large, and a validator's
            # context can hold an exception object that JSON cannot carry
            errors=[_brief(e) for e in errs[:MAX_ERRORS]],
        )
        for i, errs in sorted(by_alert.items())
    ]
    return valid, positions, rejected, truncated


def store_or_reject(
    db: Any, rows: list[dict[str, Any]], positions: list[int]
) -> tuple[list[dict[str, Any]], list[RejectedAlert]]:
    """Store ``rows``; when the database refuses the batch for its data (not for being down), store
    them one by one and reject only the ones it refuses, so one bad value never costs the rest of
    an Alertmanager group (which a 5xx would: Alertmanager retries the same group until it gives
    up). ``positions``: each row's index in the webhook. Returns the stored rows and the rejected.

    Raises:
        sqlalchemy.exc.SQLAlchemyError: any error that is not about the data
            (:func:`fleetmind.serving.db.is_input_error`: unreachable, timed out, read-only, a
            failing server); nothing is acknowledged (the route answers 503, which Alertmanager
            retries).
    """
    from sqlalchemy.exc import SQLAlchemyError

    try:
        db.store_alerts(rows)
        return rows, []
    except SQLAlchemyError as err:
        if not is_input_error(err):
            raise
    stored, rejected = [], []
    for row, pos in zip(rows, positions, strict=True):
        try:
            db.store_alerts([row])
            stored.append(row)
        except SQLAlchemyError as err:
            if not is_input_error(err):
                raise
            reason = type(getattr(err, "orig", None) or err).__name__
            rejected.append(
                RejectedAlert(
                    index=pos,
                    errors=[{"type": "database", "loc": ("body", "alerts", pos), "msg": reason}],
                )
            )
    return stored, rejected


@router.post(
    "",
    response_model=IngestResponse,
    summary="Alertmanager webhook v4 receiver",
    dependencies=[Depends(require_scope("ingest"))],
    responses={
        401: {"model": ErrorOut},
        403: {"model": ErrorOut},
        413: {"model": ErrorOut},
        503: {"model": ErrorOut},
    },
    openapi_extra={"requestBody": WEBHOOK_BODY},
)
async def receive_alerts(
    request: Request, db: DbDep, incidents: IncidentsDep, metrics: MetricsDep
) -> IngestResponse:
    """Store every valid alert durably, then answer 200.

    Idempotent on ``(fingerprint, startsAt)``: a re-delivered alert changes nothing; a ``resolved``
    delivery of a stored alert closes it out. Unknown keys are ignored. Invalid alerts of an
    otherwise valid webhook are left out and listed under ``rejected`` (the valid ones are stored);
    a webhook with no valid alert, or an envelope without a valid ``alerts`` list or
    ``truncatedAlerts``, gets 422, nothing is stored, and a WARNING line says why
    (:func:`log_refused`).
    """
    body = await request.body()

    def parse_and_store() -> tuple[int, list[RejectedAlert], list[dict[str, Any]], int]:
        try:
            valid, positions, rejected, truncated = parse_indexed(body)
        except RequestValidationError as err:
            log_refused(body, list(err.errors()))
            raise
        now = time.time()
        rows: dict[tuple[str, str], tuple[dict[str, Any], int]] = {}
        for a, pos in zip(valid, positions, strict=True):
            row = alert_row(a, now)
            rows[(row["fingerprint"], row["starts_at"])] = (row, pos)  # the last delivery wins
        stored, refused = store_or_reject(
            db, [r for r, _ in rows.values()], [p for _, p in rows.values()]
        )
        if refused:
            rejected = sorted(rejected + refused, key=lambda r: r.index)
        return len(valid) - len(refused), rejected, stored, truncated

    # one worker-thread hop, as for a plain `def` route: parsing and the blocking commit
    accepted, rejected, stored, truncated = await run_in_threadpool(parse_and_store)
    incidents.notify()
    if truncated:
        metrics.alerts_truncated.inc(truncated)
        log.warning(
            "webhook: Alertmanager left out %d alerts (truncatedAlerts, its max_alerts): their "
            "resolutions will not arrive either, so their incidents stay open until "
            "FLEETMIND_INCIDENT_AUTO_RESOLVE_S; set group_by: ['...'] on FleetMind's route, as "
            "deploy/alertmanager.yml does",
            truncated,
        )
    firing = sum(1 for r in stored if r["status"] == "firing")
    resolved = len(stored) - firing
    if firing:
        metrics.alerts_ingested.labels("firing").inc(firing)
    if resolved:
        metrics.alerts_ingested.labels("resolved").inc(resolved)
    if rejected:
        metrics.alerts_rejected.inc(len(rejected))
        first = rejected[0].errors[0]
        log.warning(
            "webhook: stored %d alerts, left out %d invalid ones (first: alert %d, %s: %s)",
            accepted,
            len(rejected),
            rejected[0].index,
            one_line(".".join(str(p) for p in first["loc"][3:])) or "alert",
            one_line(first.get("msg", "")),
        )
    return IngestResponse(
        accepted=accepted,
        firing=firing,
        resolved=resolved,
        rejected=rejected[:MAX_LISTED_REJECTIONS],
        rejected_count=len(rejected),
        truncated=truncated,
    )


def _iso(ts: float) -> str:
    return from_unix(ts).isoformat()  # clamped: rows from before timestamps were bounded


def alert_out(row: dict[str, Any]) -> AlertOut:
    ends = row["ends_ts"]
    return AlertOut(
        id=row["id"],
        fingerprint=row["fingerprint"],
        status=row["status"],
        labels=row["labels"],
        annotations=row["annotations"],
        startsAt=row["starts_at"] if row["starts_at"] != NO_START else _iso(row["starts_ts"]),
        endsAt=_iso(ends) if ends is not None else None,
        node=row["node"],
        incident_id=row["incident_id"],
    )


@router.get(
    "",
    response_model=list[AlertOut],
    summary="Stored alerts, oldest first",
    dependencies=[Depends(require_scope("read"))],
)
def list_alerts(
    db: DbDep,
    status: Annotated[Literal["firing", "resolved"] | None, Query()] = None,
    incident_id: Annotated[int | None, Query(ge=0, le=MAX_DB_INT)] = None,
    limit: Annotated[int, Query(ge=1, le=10000)] = 100,
    offset: Annotated[int, Query(ge=0, le=MAX_DB_INT)] = 0,
) -> list[AlertOut]:
    return [alert_out(r) for r in db.list_alerts(status, incident_id, limit, offset)]
