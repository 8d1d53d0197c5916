"""``/healthz`` (liveness), ``/readyz`` (readiness) and ``/metrics`` (Prometheus); no token needed."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request, Response
from fastapi.responses import JSONResponse

router = APIRouter(tags=["health"])


@router.get("/healthz", summary="Liveness")
async def healthz() -> dict[str, str]:
    return {"status": "ok"}


@router.get("/readyz", summary="Readiness: database reachable, models and graph loaded")
def readyz(request: Request) -> Any:
    services = getattr(request.app.state, "services", None)
    problems = []
    if services is None:
        problems.append("starting")
    else:
        try:
            services.db.ping()
        except Exception as err:
            problems.append(f"database: {type(err).__name__}")
        if not services.registry.loaded:
            problems.append("models not loaded")
        if services.incidents.stuck_for() > services.settings.worker_stuck_s:
            problems.append("incident worker failing")  # details in the log, not here
    if problems:
        return JSONResponse({"status": "not ready", "problems": problems}, status_code=503)
    return {
        "status": "ready",
        "graph": services.graphs.graph.name,
        "telemetry": services.telemetry.name if services.telemetry else "unavailable",
        "incident_worker": "failing" if services.incidents.failing_since else "ok",
    }


@router.get("/metrics", summary="Prometheus metrics", response_class=Response)
def metrics(request: Request) -> Response:
    services = getattr(request.app.state, "services", None)
    if services is None:
        return Response("service is starting\n", status_code=503, media_type="text/plain")
    body, ctype = services.metrics.render()
    return Response(body, media_type=ctype)
