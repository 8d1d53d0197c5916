"""``/api/v1/incidents``: alerts grouped in time and on the graph, with their ranked root causes."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, HTTPException, Path, Query, Response

from fleetmind.serving.deps import DbDep
from fleetmind.serving.routers.alerts import alert_out
from fleetmind.serving.schemas import (
    MAX_DB_INT,
    CauseOut,
    ErrorOut,
    IncidentDetail,
    IncidentOut,
    iso_utc,
)

router = APIRouter(prefix="/api/v1/incidents", tags=["incidents"])


_iso = iso_utc  # clamped: a row stored before timestamps were bounded still reads


def incident_out(row: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": row["id"],
        "status": row["status"],
        "opened_at": _iso(row["opened_ts"]),
        "updated_at": _iso(row["updated_ts"]),
        "closed_at": _iso(row["closed_ts"]),
        "first_alert_at": _iso(row["first_alert_ts"]),
        "last_alert_at": _iso(row["last_alert_ts"]),
        "alert_count": row["alert_count"],
        "firing_count": row["firing_count"],
        "nodes": row["nodes"] or [],
        "clusters": row["clusters"] or [],
        "causes": [CauseOut(**c) for c in row["causes"] or []],
        "method": row["method"],
        "model_version": row["model_version"],
        "merged_into": row["merged_into"],
    }


@router.get("", response_model=list[IncidentOut], summary="Incidents, newest first")
def list_incidents(
    db: DbDep,
    response: Response,
    status: Annotated[Literal["open", "resolved", "merged", "all"], Query()] = "open",
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    offset: Annotated[int, Query(ge=0, le=MAX_DB_INT)] = 0,
    before: Annotated[
        int | None,
        Query(ge=1, le=MAX_DB_INT, description="only ids below this (the last id of a page)"),
    ] = None,
) -> list[IncidentOut]:
    """Newest (highest id) first. Page with ``before`` = the last id of the previous page: unlike
    ``offset``, it neither repeats nor skips an incident when new ones open between pages.
    ``X-Total-Count``: the incidents of ``status`` in all."""
    wanted = None if status == "all" else status
    rows = db.list_incidents(wanted, limit, offset, before=before)
    response.headers["X-Total-Count"] = str(db.count_incidents(wanted))
    return [IncidentOut(**incident_out(r)) for r in rows]


@router.get(
    "/{incident_id}",
    response_model=IncidentDetail,
    responses={404: {"model": ErrorOut}},
    summary="One incident with its alerts and ranked causes",
)
def get_incident(
    incident_id: Annotated[int, Path(ge=0, le=MAX_DB_INT)],
    db: DbDep,
    alerts_limit: Annotated[int, Query(ge=0, le=10000)] = 1000,
) -> IncidentDetail:
    row = db.get_incident(incident_id)
    if row is None:
        raise HTTPException(404, f"no incident {incident_id}")
    # the newest alerts_limit (what ranking reads), oldest first
    newest = db.list_alerts(incident_id=incident_id, limit=max(1, alerts_limit), newest=True)
    alerts = newest[:alerts_limit][::-1]
    return IncidentDetail(**incident_out(row), alerts=[alert_out(a) for a in alerts])
