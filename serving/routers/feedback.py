"""``/api/v1/incidents/{id}/feedback``: confirm or correct an incident's root cause (a label).

Posting needs the ``admin`` scope (it changes training data), reading ``read``."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, HTTPException, Path

from fleetmind.serving.deps import DbDep, GraphsDep, require_scope
from fleetmind.serving.feedback import (
    FeedbackIn,
    FeedbackOut,
    IncidentNotFound,
    list_feedback,
    record_feedback,
)
from fleetmind.serving.origin_guard import Utf8JsonRoute
from fleetmind.serving.schemas import MAX_DB_INT, ErrorOut

router = APIRouter(prefix="/api/v1/incidents", tags=["feedback"], route_class=Utf8JsonRoute)
IncidentId = Annotated[int, Path(ge=0, le=MAX_DB_INT)]


@router.post(
    "/{incident_id}/feedback",
    response_model=FeedbackOut,
    status_code=201,
    dependencies=[Depends(require_scope("admin"))],
    responses={404: {"model": ErrorOut}},
    summary="Confirm or correct the root cause of an incident (stored as a training label)",
)
def post_feedback(
    incident_id: IncidentId, body: FeedbackIn, db: DbDep, graphs: GraphsDep
) -> FeedbackOut:
    try:
        row = record_feedback(db, graphs.graph, incident_id, body)
    except IncidentNotFound as err:
        raise HTTPException(404, str(err)) from None
    return FeedbackOut(**row)


@router.get(
    "/{incident_id}/feedback",
    response_model=list[FeedbackOut],
    dependencies=[Depends(require_scope("read"))],
    responses={404: {"model": ErrorOut}},
    summary="Feedback given on an incident, newest first",
)
def get_feedback(incident_id: IncidentId, db: DbDep) -> list[FeedbackOut]:
    """The incident's feedback, newest first; 404 when there is no incident ``incident_id`` (an
    empty list means an incident without feedback)."""
    if db.get_incident(incident_id) is None:
        raise HTTPException(404, f"no incident {incident_id}")
    return [FeedbackOut(**r) for r in list_feedback(db, incident_id)]
