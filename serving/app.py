"""The FleetMind FastAPI application.

``create_app(settings)`` builds the app; the ``lifespan`` opens the database, loads the graph, the
models (registry), the telemetry source and starts the incident worker; routers receive them through
the dependencies of :mod:`serving.deps`. Run it with ``fleetmind serve`` or
``uvicorn fleetmind.serving.app:create_app --factory``.
"""

from __future__ import annotations

import gc
import logging
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel
from pydantic.json_schema import models_json_schema
from sqlalchemy.exc import SQLAlchemyError

from fleetmind.data.errors import (
    ConfigError,
    DataError,
    FleetMindError,
    ModelLoadError,
    NotAvailableError,
)
from fleetmind.data.graph import DependencyGraph
from fleetmind.serving.db import Database
from fleetmind.serving.defaults import DEFAULT_GRAPH
from fleetmind.serving.deps import Services
from fleetmind.serving.graphstore import GraphStore
from fleetmind.serving.incidents import IncidentManager
from fleetmind.serving.keepwarm import KeepWarm, KeepWarmMiddleware
from fleetmind.serving.metrics import Metrics, MetricsMiddleware
from fleetmind.serving.rca_batcher import RCABatcher
from fleetmind.serving.rca_pool import RankingPool
from fleetmind.serving.registry import ModelRegistry
from fleetmind.serving.routers import (
    alerts,
    fleet,
    graph,
    health,
    incidents,
    models,
    placements,
    rca,
)
from fleetmind.serving.schemas import AlertmanagerWebhook, RCARequest
from fleetmind.serving.settings import Settings, get_settings
from fleetmind.serving.telemetry.base import make_source

log = logging.getLogger("fleetmind.serving")

API_VERSION = "1"


def load_graph(settings: Settings) -> tuple[DependencyGraph, str]:
    """The graph named by ``FLEETMIND_GRAPH``, or the committed example graph."""
    path = settings.graph or str(DEFAULT_GRAPH)
    return DependencyGraph.load(path), path


def tune_gc(gen0_threshold: int | None) -> Callable[[], None]:
    """Make Python's cyclic GC cheaper while serving; returns a function that undoes it.

    The objects alive after startup (models, torch_geometric, pydantic and FastAPI internals: about
    half a million) are frozen out of collections, and generation 0 is collected every
    ``gen0_threshold`` allocations instead of 700: a 200-alert RCA request allocates thousands of
    objects, which cost ~2-3 ms of collections per request at the default threshold.
    """
    if gen0_threshold is None:
        return lambda: None
    old = gc.get_threshold()
    gc.freeze()  # no full collection first: it costs ~0.5 s, and startup garbage is small
    gc.set_threshold(gen0_threshold, *old[1:])

    def restore() -> None:
        gc.set_threshold(*old)
        gc.unfreeze()

    return restore


def tune_malloc(mmap_threshold_mb: int | None) -> bool:
    """Keep glibc malloc from mapping and unmapping memory for every request; True when applied.

    A 200-alert RCA request allocates tensors of a few hundred KiB, above glibc's initial mmap
    threshold (128 KiB): each came from a fresh ``mmap`` and went back with ``munmap``, ~350 page
    faults (~1 ms of system CPU) per request. Here allocations below ``mmap_threshold_mb`` come from
    the heap, and freed heap memory up to twice that stays mapped for reuse (``mallopt``
    ``M_MMAP_THRESHOLD``, ``M_TRIM_THRESHOLD``, ``M_TOP_PAD``). ``0``/``None`` or not glibc (musl,
    macOS): nothing done.
    """
    if not mmap_threshold_mb or not sys.platform.startswith("linux"):
        return False
    import ctypes

    try:
        libc = ctypes.CDLL(None)
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    size = mmap_threshold_mb * 1024 * 1024
    m_trim_threshold, m_top_pad, m_mmap_threshold = -1, -2, -3
    return bool(
        mallopt(m_mmap_threshold, size)
        and mallopt(m_trim_threshold, 2 * size)
        and mallopt(m_top_pad, size)
    )


def set_torch_threads(n: int | None) -> None:
    """Pin torch's intra-op threads for this process (``None``: leave torch's default).

    Each process ranks on one thread at a time (:mod:`serving.rca_batcher`), so one torch thread per
    process and one process per core (``--workers``) use the cores without oversubscribing them; the
    GAT analyzer also asks for one thread per call, and a process-wide 1 keeps concurrent callers
    (the RCA batcher, the incident worker) from restoring a larger value under each other.
    """
    if n is None:
        return
    import torch

    torch.set_num_threads(n)


def build_services(settings: Settings, metrics: Metrics | None = None) -> Services:
    """Open everything the routes need (database, graph, models, telemetry, incident manager)."""
    metrics = metrics or Metrics()
    set_torch_threads(settings.torch_threads)
    tune_malloc(settings.malloc_mmap_threshold_mb)
    db = Database(settings.database_url, settings.sqlite_synchronous)
    db.create_all()
    graph, source = load_graph(settings)
    graphs = GraphStore(graph, source)
    registry = ModelRegistry(settings.rca_model, settings.placement_model, metrics.on_model_load)
    metrics.set_models(registry.load())
    telemetry, telemetry_error = None, None
    try:
        telemetry = make_source(settings, graph)
    except FleetMindError as err:
        telemetry_error = str(err)
        print(f"fleetmind: telemetry unavailable: {err}", file=sys.stderr)
        log.warning("telemetry unavailable: %s", err)
    manager = IncidentManager(
        db,
        graphs,
        registry,
        window_s=settings.incident_window_s,
        hops=settings.incident_hops,
        top_k=settings.rca_top_k,
        metrics=metrics,
        rank_interval_s=settings.incident_rank_interval_s,
    )
    batcher = RCABatcher(
        settings.rca_max_batch, lambda size, _s: metrics.rca_batch_size.observe(size)
    )
    return Services(
        settings,
        db,
        graphs,
        registry,
        manager,
        metrics,
        telemetry,
        telemetry_error,
        rca_batcher=batcher,
    )


async def start_rca_pool(settings: Settings, metrics: Metrics) -> RankingPool | None:
    """Start ``settings.rca_processes`` ranking processes (:mod:`serving.rca_pool`).

    ``None`` (RCA ranked in this process, with a message on stderr) when they cannot start.
    """
    pool = RankingPool(
        settings.rca_processes,
        {
            "torch_threads": settings.torch_threads,
            "gc_gen0_threshold": settings.gc_gen0_threshold,
            "malloc_mmap_threshold_mb": settings.malloc_mmap_threshold_mb,
            "max_batch": settings.rca_process_max_batch,
            "nice": settings.rca_process_nice,
        },
        on_batch=metrics.rca_batch_size.observe,
    )
    try:
        await pool.start()
    except RuntimeError as err:
        print(f"fleetmind: {err}; ranking RCA requests in the server process", file=sys.stderr)
        log.error("%s; ranking RCA requests in the server process", err)
        return None
    return pool


def start_keep_warm(linger_s: float) -> KeepWarm | None:
    """Start the idle-priority busy loops of ``FLEETMIND_KEEP_WARM_S`` (:mod:`serving.keepwarm`).

    ``None`` (serving without them, with a message on stderr) when they cannot start.
    """
    keep_warm = KeepWarm(linger_s)
    try:
        keep_warm.start()
    except OSError as err:
        print(f"fleetmind: keep-warm not started: {err}", file=sys.stderr)
        log.error("keep-warm not started: %s", err)
        return None
    return keep_warm


def close_services(services: Services) -> None:
    services.rca_batcher.stop()
    services.incidents.stop()
    if services.telemetry is not None:
        services.telemetry.close()
    services.db.dispose()


def create_app(settings: Settings | None = None) -> FastAPI:
    """Build the FleetMind app.

    Args:
        settings: explicit settings (tests); ``None`` reads ``FLEETMIND_*`` via :func:`get_settings`.
    """
    metrics = Metrics()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        s = settings or get_settings()
        services = build_services(s, metrics)
        if s.incident_worker:
            services.incidents.start()
        else:
            services.incidents.load_open()
        if s.rca_processes > 0:
            services.rca_pool = await start_rca_pool(s, metrics)
        if s.keep_warm_s > 0:
            services.keep_warm = start_keep_warm(s.keep_warm_s)
        app.state.services = services
        restore_gc = tune_gc(s.gc_gen0_threshold)
        try:
            yield
        finally:
            restore_gc()
            if services.rca_pool is not None:
                await services.rca_pool.stop()
            if services.keep_warm is not None:
                services.keep_warm.stop()
            close_services(services)
            app.state.services = None

    app = FastAPI(
        title="FleetMind",
        version=API_VERSION,
        description="Root-cause analysis of alert storms and GPU placement for multi-cluster fleets.",
        lifespan=lifespan,
    )
    # No dependency override for explicit settings: the services carry them (``current_settings``),
    # and any entry in ``dependency_overrides`` makes FastAPI re-inspect every dependency of every
    # request (~1-2 ms each).
    for r in (alerts, incidents, rca, placements, fleet, graph, models):
        from fastapi import Depends

        from fleetmind.serving.deps import require_token

        app.include_router(r.router, dependencies=[Depends(require_token)])
    app.include_router(health.router)
    _install_error_handlers(app)
    _document_models(app, [RCARequest, AlertmanagerWebhook])
    configured = settings or get_settings()
    limit = configured.max_body_bytes
    app.add_middleware(rca.FastLane)  # innermost: after the body limit and the metrics
    app.add_middleware(BodyLimitMiddleware, max_bytes=limit)
    app.add_middleware(MetricsMiddleware, metrics=metrics)
    if configured.keep_warm_s > 0:  # off: no per-request step at all
        app.add_middleware(KeepWarmMiddleware)  # outermost: every request counts as activity
    return app


def _document_models(app: FastAPI, models: list[type[BaseModel]]) -> None:
    """Add ``models`` (and the models they use) to the OpenAPI components.

    For request bodies a route parses itself (``openapi_extra`` refers to them by name).
    """
    base = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema:
            return app.openapi_schema
        schema = base()
        _, defs = models_json_schema(
            [(m, "validation") for m in models], ref_template="#/components/schemas/{model}"
        )
        comps = schema.setdefault("components", {}).setdefault("schemas", {})
        for name, sub in defs.get("$defs", {}).items():
            comps.setdefault(name, sub)
        app.openapi_schema = schema
        return schema

    app.openapi = openapi  # type: ignore[method-assign]


def _install_error_handlers(app: FastAPI) -> None:
    status_of: list[tuple[type[Exception], int]] = [
        (DataError, 422),
        (ConfigError, 422),
        (ModelLoadError, 409),
        (NotAvailableError, 503),
        (FleetMindError, 400),
    ]

    async def fleetmind_error(_request: Request, exc: Exception) -> JSONResponse:
        code = next(c for t, c in status_of if isinstance(exc, t))
        return JSONResponse({"detail": str(exc)}, status_code=code)

    async def db_error(_request: Request, exc: Exception) -> JSONResponse:
        log.error("database error: %s", exc)
        return JSONResponse({"detail": "database unavailable; nothing was stored"}, status_code=503)

    app.add_exception_handler(FleetMindError, fleetmind_error)
    app.add_exception_handler(SQLAlchemyError, db_error)


class BodyLimitMiddleware:
    """Reject request bodies larger than ``max_bytes`` with 413 (declared or streamed)."""

    def __init__(self, app: Any, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = None
        for k, v in scope.get("headers", ()):
            if k == b"content-length":
                try:
                    declared = int(v)
                except ValueError:
                    declared = -1
        if declared is not None and (declared < 0 or declared > self.max_bytes):
            await _too_large(send, self.max_bytes)
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
            if size > self.max_bytes:
                await _too_large(send, self.max_bytes)
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
