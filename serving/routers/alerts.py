"""``/api/v1/alerts``: the Alertmanager webhook v4 receiver and a read-back listing."""

from __future__ import annotations

import hashlib
import time
from datetime import UTC, datetime
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Query

from serving.deps import DbDep, IncidentsDep, MetricsDep
from serving.schemas import AlertIn, AlertmanagerWebhook, AlertOut, ErrorOut, IngestResponse

router = APIRouter(prefix="/api/v1/alerts", tags=["alerts"])

_UNSET_YEAR = 1  # Alertmanager sends 0001-01-01T00:00:00Z for an unknown endsAt


def fingerprint_of(labels: dict[str, str]) -> str:
    """A stable label-set hash for senders that do not send Alertmanager's ``fingerprint``."""
    h = hashlib.sha256()
    for k in sorted(labels):
        h.update(k.encode())
        h.update(b"\xff")
        h.update(labels[k].encode())
        h.update(b"\xfe")
    return h.hexdigest()[:16]


def alert_row(a: AlertIn, now: float) -> dict[str, Any]:
    """The database row of one inbound alert."""
    starts = a.startsAt or datetime.fromtimestamp(now, UTC)
    ends = a.endsAt if a.endsAt is not None and a.endsAt.year > _UNSET_YEAR else None
    return {
        "fingerprint": a.fingerprint or fingerprint_of(a.labels),
        "starts_at": starts.isoformat(),
        "starts_ts": starts.timestamp(),
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


@router.post(
    "",
    response_model=IngestResponse,
    summary="Alertmanager webhook v4 receiver",
    responses={401: {"model": ErrorOut}, 413: {"model": ErrorOut}, 503: {"model": ErrorOut}},
)
def receive_alerts(
    payload: AlertmanagerWebhook, db: DbDep, incidents: IncidentsDep, metrics: MetricsDep
) -> IngestResponse:
    """Store every alert durably, then answer 200.

    Idempotent on ``(fingerprint, startsAt)``: a re-delivered alert changes nothing; a ``resolved``
    delivery of a stored alert closes it out. Unknown keys are ignored.
    """
    now = time.time()
    rows: dict[tuple[str, str], dict[str, Any]] = {}
    for a in payload.alerts:
        row = alert_row(a, now)
        rows[(row["fingerprint"], row["starts_at"])] = row  # the last delivery of a key wins
    db.store_alerts(list(rows.values()))
    incidents.notify()
    firing = sum(1 for r in rows.values() if r["status"] == "firing")
    resolved = len(rows) - firing
    if firing:
        metrics.alerts_ingested.labels("firing").inc(firing)
    if resolved:
        metrics.alerts_ingested.labels("resolved").inc(resolved)
    return IngestResponse(accepted=len(payload.alerts), firing=firing, resolved=resolved)


def alert_out(row: dict[str, Any]) -> AlertOut:
    ends = row["ends_ts"]
    return AlertOut(
        id=row["id"],
        fingerprint=row["fingerprint"],
        status=row["status"],
        labels=row["labels"],
        annotations=row["annotations"],
        startsAt=row["starts_at"],
        endsAt=datetime.fromtimestamp(ends, UTC).isoformat() if ends is not None else None,
        node=row["node"],
        incident_id=row["incident_id"],
    )


@router.get("", response_model=list[AlertOut], summary="Stored alerts, oldest first")
def list_alerts(
    db: DbDep,
    status: Annotated[Literal["firing", "resolved"] | None, Query()] = None,
    incident_id: Annotated[int | None, Query(ge=0, le=2**62)] = None,
    limit: Annotated[int, Query(ge=1, le=10000)] = 100,
    offset: Annotated[int, Query(ge=0, le=2**62)] = 0,
) -> list[AlertOut]:
    return [alert_out(r) for r in db.list_alerts(status, incident_id, limit, offset)]
