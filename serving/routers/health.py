"""``/healthz`` (liveness), ``/readyz`` (readiness) and ``/metrics`` (Prometheus); no token needed.

They are ``async`` and never wait for the worker threads that serve the other routes: a burst of
requests stuck behind a slow Prometheus or database holds every one of those threads (anyio's
default limit is 40), and a probe queued behind them would time out (the Deployment's probes allow
3 s) and get a healthy pod restarted or taken out of its Service. ``/healthz`` runs on the event
loop; the blocking parts of ``/readyz`` (the database ping) and ``/metrics`` (rendering the
registry) run in a small pool of their own, :data:`PROBE_POOL`.
"""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from fastapi import APIRouter, Request, Response
from fastapi.responses import JSONResponse

router = APIRouter(tags=["health"])

PROBE_POOL = ThreadPoolExecutor(4, thread_name_prefix="fleetmind-probe")
"""Threads for the blocking parts of ``/readyz`` and ``/metrics`` only (see the module docstring)."""


async def _in_probe_pool(fn: Any, *args: Any) -> Any:
    return await asyncio.wrap_future(PROBE_POOL.submit(fn, *args))


@router.get("/healthz", summary="Liveness")
async def healthz() -> dict[str, str]:
    return {"status": "ok"}


def _problems(services: Any) -> list[str]:
    """What keeps the service from being ready (blocking: pings the database)."""
    problems = []
    try:
        services.db.ping()
    except Exception as err:
        problems.append(f"database: {type(err).__name__}")
    if not services.registry.loaded:
        problems.append("models not loaded")
    if services.incidents.stuck_for() > services.settings.worker_stuck_s:
        problems.append("incident worker failing")  # details in the log, not here
    return problems


@router.get("/readyz", summary="Readiness: database reachable, models and graph loaded")
async def readyz(request: Request) -> Any:
    services = getattr(request.app.state, "services", None)
    problems = ["starting"] if services is None else await _in_probe_pool(_problems, services)
    if problems:
        return JSONResponse({"status": "not ready", "problems": problems}, status_code=503)
    return {
        "status": "ready",
        "graph": services.graphs.graph.name,
        "telemetry": services.telemetry.name if services.telemetry else "unavailable",
        "incident_worker": "failing" if services.incidents.failing_since else "ok",
    }


@router.get("/metrics", summary="Prometheus metrics", response_class=Response)
async def metrics(request: Request) -> Response:
    services = getattr(request.app.state, "services", None)
    if services is None:
        return Response("service is starting\n", status_code=503, media_type="text/plain")
    body, ctype = await _in_probe_pool(services.metrics.render)
    return Response(body, media_type=ctype)
