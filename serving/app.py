"""The FleetMind FastAPI application.

``create_app(settings)`` builds the app; the ``lifespan`` opens the database, loads the graph, the
models (registry), the telemetry source and starts the incident worker; routers receive them through
the dependencies of :mod:`fleetmind.serving.deps`. Run it with ``fleetmind serve`` or
``uvicorn fleetmind.serving.app:create_app --factory``.
"""

from __future__ import annotations

import copy
import errno
import json
import logging
import os
import sys
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

from fastapi import Depends, FastAPI, Request
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel
from pydantic.json_schema import models_json_schema
from sqlalchemy.exc import SQLAlchemyError
from uvicorn.config import LOGGING_CONFIG

from fleetmind.data.errors import (
    ConfigError,
    DataError,
    FleetMindError,
    ModelLoadError,
    NotAvailableError,
)
from fleetmind.data.graph import DependencyGraph
from fleetmind.redact import safe_request_target, safe_uri
from fleetmind.serving import migrations
from fleetmind.serving.api_docs import add_api_docs
from fleetmind.serving.db import Database
from fleetmind.serving.defaults import DEFAULT_GRAPH
from fleetmind.serving.deps import (
    SCHEDULER_CERT_SCOPES,
    AuthMiddleware,
    Services,
    declared_scope,
    flat_routes,
    matched_route,
    require_scope,
)
from fleetmind.serving.failure_log import LineThrottle, RequestFailureLog
from fleetmind.serving.graph_refresh import GraphRefresher, Stamp, file_stamp, file_version
from fleetmind.serving.graphstore import GraphStore
from fleetmind.serving.http_guard import CUT_STATUS_KEY
from fleetmind.serving.incidents import IncidentManager
from fleetmind.serving.keepwarm import KeepWarm, KeepWarmMiddleware
from fleetmind.serving.metrics import Metrics, MetricsMiddleware
from fleetmind.serving.middleware import (
    SCHEDULER_PATHS,
    WEBHOOK_PATH,
    BodyLimitMiddleware,
    ConcurrencyLimit,
    RCAAdmission,
    SecurityHeaders,
)
from fleetmind.serving.notify import Notifier
from fleetmind.serving.origin_guard import JSON_BODY_PREFIX, UNSAFE_METHODS, OriginGuard
from fleetmind.serving.rca import router as rca_router
from fleetmind.serving.rca.batcher import RCABatcher
from fleetmind.serving.rca.fast_lane import FastLane
from fleetmind.serving.rca.pool import RankingPool
from fleetmind.serving.registry import ModelRegistry
from fleetmind.serving.routers import (
    alerts,
    feedback,
    fleet,
    graph,
    health,
    incidents,
    models,
)
from fleetmind.serving.routers.health import example_graph_warning
from fleetmind.serving.scheduler import placement_router
from fleetmind.serving.scheduler import router as scheduler_router
from fleetmind.serving.scheduler.extender import get_ci
from fleetmind.serving.scheduler.reservations import DbReservations, snapshot_lag_s
from fleetmind.serving.schemas import AlertmanagerWebhook, ErrorOut, RCARequest
from fleetmind.serving.settings import Settings, get_settings
from fleetmind.serving.telemetry.base import make_source
from fleetmind.serving.tls import CLIENT_CERT_KEY, scheduler_cert
from fleetmind.serving.tuning import set_torch_threads, tune_gc, tune_malloc
from fleetmind.serving.ui import router as ui_router
from fleetmind.serving.validation import json_safe_errors, one_line

log = logging.getLogger("fleetmind.serving")
"""The service's log; under ``fleetmind serve`` its records go to stderr (:func:`uvicorn_log_config`)."""

API_VERSION = "1"


ACCESS_LOGGER = "uvicorn.access"
"""The logger of uvicorn's access lines (``uvicorn.protocols.http.httptools_impl`` and
``h11_impl``: ``access_logger.info('%s - "%s %s HTTP/%s" %d', client, method, path_with_query,
http_version, status)``)."""


class AccessLogRedaction(logging.Filter):
    """Masks secrets in uvicorn's access lines before any handler formats them: the value of each
    password-like query parameter of the request target (``?access_token=...``, RFC 6750 section
    2.3; ``?token=``, ``?api_key=``) shows as ``***`` (:func:`fleetmind.redact.safe_request_target`,
    the rule of :func:`fleetmind.redact.safe_uri`). The record's arguments keep their number and
    types, so uvicorn's ``AccessFormatter`` (which unpacks them) formats it as before."""

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args
        if isinstance(args, tuple):
            record.args = tuple(safe_request_target(a) if isinstance(a, str) else a for a in args)
        elif not args and isinstance(record.msg, str):
            record.msg = safe_uri(record.msg)
        return True


PROBE_PATHS = frozenset({"/healthz", "/readyz", "/metrics"})
"""The paths of the probes and the scrape, whose successful answers ``FLEETMIND_ACCESS_LOG=no-probes``
leaves out of the access log."""

ACCESS_LOG_MODES = ("all", "no-probes", "off")
"""The values of ``FLEETMIND_ACCESS_LOG``."""


class ProbeAccessFilter(logging.Filter):
    """Drops the access lines of successful probes and scrapes (``FLEETMIND_ACCESS_LOG=no-probes``):
    a ``GET`` or ``HEAD`` of :data:`PROBE_PATHS` (any query) answered 2xx or 3xx. At the shipped
    manifests' periods (readiness 5 s, liveness 15 s, scrape 15 s) they were ~28,800 lines a day
    per idle pod; a probe answered 4xx or 5xx (a 503 from ``/readyz``) is still logged. Reads
    uvicorn's access arguments (``client, method, target, http_version, status``,
    :data:`ACCESS_LOGGER`); any other record passes."""

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args
        if not isinstance(args, tuple) or len(args) != 5:
            return True
        _client, method, target, _version, status = args
        if (
            method not in ("GET", "HEAD")
            or not isinstance(status, int)
            or not isinstance(target, str)
        ):
            return True
        return not (target.split("?", 1)[0] in PROBE_PATHS and 200 <= status < 400)


def redact_access_log() -> None:
    """Put :class:`AccessLogRedaction` on the ``uvicorn.access`` logger (once), for a server that
    was not started with :func:`uvicorn_log_config` (plain ``uvicorn --factory``)."""
    logger = logging.getLogger(ACCESS_LOGGER)
    if not any(isinstance(f, AccessLogRedaction) for f in logger.filters):
        logger.addFilter(AccessLogRedaction())


ACCESS_LOG_OFF_NOTE = "fleetmind: stdout closed; access log off"
"""The one line on stderr when the reader of stdout, where the access lines go, went away."""


class StdoutAccessHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """uvicorn's access handler (a :class:`logging.StreamHandler` on stdout) that outlives the
    reader of stdout (``fleetmind serve | tee log`` whose ``tee`` was killed, a log shipper that
    died): the first access line that meets the closed pipe (``BrokenPipeError``; Python ignores
    SIGPIPE) prints :data:`ACCESS_LOG_OFF_NOTE` on stderr, once, and the access log stops; the
    service goes on serving. Without it, logging's ``handleError`` printed a ``--- Logging error
    ---`` block with its traceback (about 100 lines) on stderr for every request.

    Stdout is then pointed at ``os.devnull`` (the recipe of the Python docs' "Note on SIGPIPE",
    :mod:`signal`), so that the access line it still holds does not fail again when Python
    flushes stdout at exit. Any other error of the handler is logging's as before."""

    off = False
    """Whether the access log stopped (the reader of stdout went away)."""

    def emit(self, record: logging.LogRecord) -> None:
        if self.off:
            return
        super().emit(record)

    def handleError(self, record: logging.LogRecord) -> None:  # noqa: N802 - logging's name
        err = sys.exc_info()[1]
        if not isinstance(err, OSError) or err.errno != errno.EPIPE:
            super().handleError(record)
            return
        self.off = True
        try:
            fd = self.stream.fileno()
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, fd)
            os.close(devnull)
            self.stream.flush()  # what the failed write left now goes to os.devnull
        except (AttributeError, OSError, ValueError):  # not a file (a test's capture)
            pass
        try:
            sys.stderr.write(ACCESS_LOG_OFF_NOTE + "\n")
            sys.stderr.flush()
        except (AttributeError, OSError, ValueError):  # no stderr either: nothing to tell
            pass


def uvicorn_log_config(level: str = "info", access_log: str = "no-probes") -> dict[str, Any]:
    """The logging configuration ``fleetmind serve`` hands uvicorn: uvicorn's own, plus the
    ``fleetmind`` loggers on stderr at ``level`` (``--log-level``: ``debug`` .. ``critical``),
    and :class:`AccessLogRedaction` on the access lines, which stay on stdout through
    :class:`StdoutAccessHandler` (a reader of stdout that went away stops them with one line).
    ``access_log`` (``FLEETMIND_ACCESS_LOG``, one of :data:`ACCESS_LOG_MODES`): ``no-probes``
    adds :class:`ProbeAccessFilter`; ``off`` drops every access line (``fleetmind serve`` also
    passes uvicorn ``access_log=False``, which skips formatting them).

    So a failure the service survives (telemetry unavailable, ranking processes or keep-warm not
    started, ...) is one line on stderr, ``WARNING:  fleetmind: telemetry unavailable: ...``,
    beside uvicorn's lines; every worker process applies it at its start.
    """
    config = copy.deepcopy(LOGGING_CONFIG)
    config.setdefault("filters", {})["fleetmind_redact"] = {
        "()": f"{AccessLogRedaction.__module__}.{AccessLogRedaction.__qualname__}"
    }
    access = config["loggers"].setdefault(ACCESS_LOGGER, {})
    access["filters"] = [*access.get("filters", []), "fleetmind_redact"]
    if access_log not in ACCESS_LOG_MODES:
        raise ConfigError(
            f"FLEETMIND_ACCESS_LOG must be one of {', '.join(ACCESS_LOG_MODES)}, got {access_log!r}"
        )
    if access_log == "no-probes":
        config["filters"]["fleetmind_probes"] = {
            "()": f"{ProbeAccessFilter.__module__}.{ProbeAccessFilter.__qualname__}"
        }
        access["filters"].append("fleetmind_probes")
    elif access_log == "off":
        access["handlers"], access["propagate"] = [], False
    # the access lines stay on stdout; a reader of stdout that went away stops them with one line
    config["handlers"]["access"]["class"] = (
        f"{StdoutAccessHandler.__module__}.{StdoutAccessHandler.__qualname__}"
    )
    config["formatters"]["fleetmind"] = {
        **config["formatters"]["default"],
        "fmt": "%(levelprefix)s fleetmind: %(message)s",
    }
    config["handlers"]["fleetmind"] = {**config["handlers"]["default"], "formatter": "fleetmind"}
    config["loggers"]["fleetmind"] = {
        "handlers": ["fleetmind"],
        "level": level.upper(),
        "propagate": False,
    }
    return config


_CHECKED_GRAPH: list[tuple[str, Stamp, DependencyGraph]] = []
"""The graph ``fleetmind serve`` loaded to check it, kept for the app of the same process."""


def load_graph(settings: Settings, keep: bool = False) -> tuple[DependencyGraph, str]:
    """The graph named by ``FLEETMIND_GRAPH``, or the committed example graph.

    ``keep``: hold the graph for the next call of this process, which takes it if the file is
    unchanged (same :func:`~fleetmind.serving.graph_refresh.file_stamp`). ``fleetmind serve``
    checks the graph before the server starts, so that a bad one is a one-line error; with one
    worker the app then starts in the same process and need not parse and validate the file again
    (at 2,000 hosts, 43,500 nodes: seconds of start-up). Held at most once, taken at most once.
    """
    path = settings.graph or str(DEFAULT_GRAPH)
    if _CHECKED_GRAPH:
        kept_path, kept_stamp, kept = _CHECKED_GRAPH.pop()
        if not keep and kept_path == path and kept_stamp == file_stamp(path):
            return kept, path
    stamp = file_stamp(path)  # before the read: a file replaced meanwhile is not taken for it
    graph = DependencyGraph.load(path)
    if keep and stamp is not None:
        _CHECKED_GRAPH.append((path, stamp, graph))
    return graph, path


def build_services(settings: Settings, metrics: Metrics | None = None) -> Services:
    """Open everything the routes need (database, graph, models, telemetry, incident manager)."""
    metrics = metrics or Metrics()
    set_torch_threads(settings.torch_threads)
    tune_malloc(settings.malloc_mmap_threshold_mb)
    db = Database(
        settings.database_url,
        settings.sqlite_synchronous,
        settings.db_connect_timeout_s,
        settings.db_statement_timeout_s,
        refire_margin_s=settings.alert_refire_margin_s,
    )
    before = db.migrate(apply=settings.migrate_on_start)
    log.info("database schema: was %s, now %s", before, migrations.head())
    # the file's version before it is read: the refresher reloads it if it changes meanwhile
    loaded = file_version(settings.graph) if settings.graph else None
    graph, source = load_graph(settings)
    warning = example_graph_warning(settings, graph)
    if warning is not None:  # ready and ingesting all the same; /readyz and doctor repeat it
        log.warning("%s (from %s)", warning, source)
    graphs = GraphStore(graph, source, file_version=loaded)
    registry = ModelRegistry(settings.rca_model, settings.placement_model, metrics.on_model_load)
    metrics.set_models(registry.load())
    registry.follow(db, on_reload=metrics.set_models)  # reloads requested on any worker or replica
    telemetry, telemetry_error = None, None
    try:
        telemetry = make_source(settings, graph)
    except FleetMindError as err:
        telemetry_error = str(err)
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
        auto_resolve_s=settings.incident_auto_resolve_s,
        retention_s=settings.retention_s,
        leader_lease_s=settings.leader_lease_s,
        slo_alerts=settings.slo_alert_names(),
        ungrouped_alerts=settings.ungrouped_alert_names(),
    )
    batcher = RCABatcher(
        settings.rca_max_batch, lambda size, _s: metrics.rca_batch_size.observe(size)
    )
    reservations = DbReservations(
        db,
        settings.reservation_ttl_s,
        settings.reservation_bound_grace_s,
        snapshot_lag_s=snapshot_lag_s(settings),
    )
    services = Services(
        settings,
        db,
        graphs,
        registry,
        manager,
        metrics,
        telemetry,
        telemetry_error,
        rca_batcher=batcher,
        reservations=reservations,
    )
    # fleetmind_scheduler_holds, from the first scrape: the holds the placers count under the last
    # snapshot read (a scrape never reads telemetry)
    metrics.holds_count = lambda: reservations.count(
        scheduler_router.last_snapshot(services.telemetry)
    )
    return services


async def start_rca_pool(settings: Settings, metrics: Metrics) -> RankingPool | None:
    """Start ``settings.rca_processes`` ranking processes (:mod:`fleetmind.serving.rca.pool`).

    ``None`` (RCA ranked in this process, with an error logged) when they cannot start.
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
        log.error("%s; ranking RCA requests in the server process", err)
        return None
    return pool


def start_keep_warm(linger_s: float) -> KeepWarm | None:
    """Start the idle-priority busy loops of ``FLEETMIND_KEEP_WARM_S`` (:mod:`fleetmind.serving.keepwarm`).

    ``None`` (serving without them, with an error logged) when they cannot start.
    """
    keep_warm = KeepWarm(linger_s)
    try:
        keep_warm.start()
    except OSError as err:
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
    # as the CLI does, for ``uvicorn --factory fleetmind.serving.app:create_app``: no usage
    # telemetry from ONNX Runtime (read when the placement model's first session is made)
    os.environ.setdefault("ORT_DISABLE_TELEMETRY", "1")
    redact_access_log()  # as fleetmind serve's log config does, under plain uvicorn too
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
        notifier = Notifier(
            services.db, s, lambda: services.incidents.leader.held, metrics.registry
        )
        if s.incident_worker:
            notifier.start()  # only when a notify URL is set; only the leader sends
        app.state.notifier = notifier
        refresher = None
        if s.graph and s.graph_refresh_s > 0:
            refresher = GraphRefresher(
                services.graphs, s.graph, s.graph_refresh_s, services.graphs.file_version
            )
            refresher.start()
        prefetch = getattr(services.telemetry, "prefetch", None)
        if callable(prefetch):
            prefetch()  # stale-while-refresh: the first extender call need not wait a whole read
        app.state.services = services
        app.state.graph_refresher = refresher
        restore_gc = tune_gc(s.gc_gen0_threshold)
        try:
            yield
        finally:
            restore_gc()
            if refresher is not None:
                refresher.stop()
            if services.rca_pool is not None:
                await services.rca_pool.stop()
            if services.keep_warm is not None:
                services.keep_warm.stop()
            notifier.stop()
            close_services(services)
            app.state.services = None

    app = FastAPI(
        title="FleetMind",
        version=API_VERSION,
        description="Root-cause analysis of alert storms and GPU placement for multi-cluster fleets.",
        lifespan=lifespan,
        docs_url=None,  # /docs and /redoc: pinned scripts and a policy (serving/api_docs.py)
        redoc_url=None,
    )
    _relative_slash_redirects(app)
    add_api_docs(app, app.title)
    # No dependency override for explicit settings: the services carry them (``current_settings``),
    # and any entry in ``dependency_overrides`` makes FastAPI re-inspect every dependency of every
    # request (~1-2 ms each).
    _include_routers(app)
    _install_error_handlers(app)
    _document_models(app, [RCARequest, AlertmanagerWebhook])
    configured = settings or get_settings()
    app.state.settings = configured
    limit = configured.max_body_bytes
    webhook_limit = max(configured.max_webhook_bytes, limit)  # never below the global limit
    app.add_middleware(FastLane)  # innermost: after the body limit and the metrics
    app.add_middleware(
        BodyLimitMiddleware,
        max_bytes=limit,
        route_limits={("POST", WEBHOOK_PATH): webhook_limit},
        metrics=metrics,
        scheduler_bytes=configured.max_scheduler_bytes,
    )
    app.add_middleware(
        RCAAdmission, max_queue=configured.rca_max_queue, deadline_s=configured.rca_deadline_s
    )
    app.add_middleware(OriginGuard)  # cross-site, DNS-rebinding and content-type refusals
    app.add_middleware(AuthMiddleware)  # the token before the body is read
    app.add_middleware(CutBodyStatus)  # inside the metrics: a body cut at its timeout is a 408
    app.add_middleware(MetricsMiddleware, metrics=metrics, route_of=matched_route)
    app.add_middleware(ConcurrencyLimit, limit=configured.limit_concurrency)
    app.add_middleware(SecurityHeaders)  # every answer, 401/413/503 included
    if configured.keep_warm_s > 0:  # off: no per-request step at all
        app.add_middleware(KeepWarmMiddleware)  # outermost: every request counts as activity
    return app


def _relative_slash_redirects(app: FastAPI) -> None:
    """Answer a path that matches a route only with or without its trailing slash as Starlette
    does (307 to the other form: Alertmanager's ``url: .../api/v1/alerts/`` follows it with the
    body), but with a relative ``Location`` (``/api/v1/incidents``).

    Starlette's ``Router.redirect_slashes`` builds an absolute URL from the request's ``Host``
    header (``starlette/routing.py``, ``Router.app``: ``URL(scope=redirect_scope)``), so
    ``Host: evil.example`` got ``location: http://evil.example/...``, and behind a proxy that
    rewrites ``Host`` the redirect named the upstream's internal name. The same check runs here,
    after every route (full and partial matches) failed, and the URL is built the same way without
    a host (``URL`` then escapes ``?``, ``#``, ``\\`` and a leading ``//``)."""
    from starlette.datastructures import URL
    from starlette.responses import RedirectResponse
    from starlette.routing import Match, get_route_path

    router = app.router
    router.redirect_slashes = False
    fallback = router.default

    async def default(scope: Any, receive: Any, send: Any) -> None:
        route_path = get_route_path(scope)
        if scope["type"] == "http" and route_path != "/":
            path = scope["path"]
            other = {**scope, "path": path.rstrip("/") if route_path.endswith("/") else path + "/"}
            if any(route.matches(other)[0] is not Match.NONE for route in router.routes):
                relative = URL(scope={**other, "headers": [], "server": None})
                await RedirectResponse(url=str(relative))(scope, receive, send)
                return
        await fallback(scope, receive, send)

    router.default = default


def _include_routers(app: FastAPI) -> None:
    """Every router of the service, each with the scope its routes need."""
    # read-only for the caller (placements with reserve=true also need 'schedule')
    for r in (incidents, rca_router, placement_router, fleet):
        app.include_router(r.router, dependencies=[Depends(require_scope("read"))])
    # the extender holds capacity: 'schedule' (a token, or kube-scheduler's client certificate)
    app.include_router(scheduler_router.router, dependencies=[Depends(require_scope("schedule"))])
    for r in (alerts, graph, models, feedback):  # scopes per route: ingest/read, read/admin
        app.include_router(r.router)
    app.include_router(health.router)
    app.include_router(ui_router.router)  # its own auth: a session cookie from the login form
    app.include_router(ui_router.root_router)  # "/" -> /ui/, /favicon.ico (public)


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
        _document_422(schema)
        _document_security(app, schema)
        _document_middleware_errors(schema)
        _document_headers(schema)
        app.openapi_schema = schema
        return schema

    app.openapi = openapi  # type: ignore[method-assign]


UNPROCESSABLE = {
    "description": "Unprocessable input: ``detail`` is a message (``ErrorOut``) or the list of "
    "validation errors (``HTTPValidationError``), whichever check refused it",
    "content": {
        "application/json": {
            "schema": {
                "anyOf": [
                    {"$ref": "#/components/schemas/ErrorOut"},
                    {"$ref": "#/components/schemas/HTTPValidationError"},
                ]
            }
        }
    },
}
"""The 422 answer of every operation that takes input: a route's own checks send a message, the
request models send FastAPI's error list, and one route can send either."""


def _document_422(schema: dict[str, Any]) -> None:
    """Give every operation with a body or a 422 answer the :data:`UNPROCESSABLE` 422, and make
    sure both of its schemas are among the components."""
    from fastapi.openapi.utils import (
        validation_error_definition,
        validation_error_response_definition,
    )

    comps = schema.setdefault("components", {}).setdefault("schemas", {})
    comps.setdefault("ErrorOut", ErrorOut.model_json_schema())
    comps.setdefault("ValidationError", copy.deepcopy(validation_error_definition))
    comps.setdefault("HTTPValidationError", copy.deepcopy(validation_error_response_definition))
    for ops in schema.get("paths", {}).values():
        for op in ops.values():
            responses = op.get("responses") if isinstance(op, dict) else None
            if responses is not None and ("requestBody" in op or "422" in responses):
                responses["422"] = copy.deepcopy(UNPROCESSABLE)


BEARER = "bearerAuth"
"""The OpenAPI security scheme: a bearer token (``Authorization: Bearer <token>``, RFC 6750)."""
SECURITY_SCHEME = {
    "type": "http",
    "scheme": "bearer",
    "description": "a FleetMind token (FLEETMIND_READ_TOKEN, _INGEST_TOKEN, _SCHEDULE_TOKEN, "
    "_ADMIN_TOKEN or _API_TOKEN); each route needs one with its scope. With no token set, "
    "authentication is off",
}
MUTUAL_TLS = "mutualTLS"
"""The OpenAPI 3.1 security scheme of kube-scheduler's client certificate."""
MUTUAL_TLS_SCHEME = {
    "type": "mutualTLS",
    "description": "kube-scheduler's client certificate, verified against "
    "FLEETMIND_SCHEDULER_CLIENT_CA (served over HTTPS): grants the schedule scope on "
    "/api/v1/scheduler/* without a token",
}
_ERROR_CONTENT = {"application/json": {"schema": {"$ref": "#/components/schemas/ErrorOut"}}}


def _auth_responses(scope: str) -> dict[str, Any]:
    """The 401 and 403 answers of an operation that needs a token with ``scope``."""
    return {
        "401": {
            "description": "Missing or unknown bearer token (``WWW-Authenticate: Bearer``)",
            "content": copy.deepcopy(_ERROR_CONTENT),
        },
        "403": {
            "description": f"The token lacks the '{scope}' scope",
            "content": copy.deepcopy(_ERROR_CONTENT),
        },
    }


def _cert_opens(path: str, needed: str) -> bool:
    """Whether kube-scheduler's verified client certificate alone reaches an operation on
    ``path`` that needs the scope ``needed``: :class:`AuthMiddleware`'s rule (the routes
    :func:`fleetmind.serving.tls.scheduler_cert` opens, the scopes it grants)."""
    probe = {"type": "http", "path": path, "state": {CLIENT_CERT_KEY: "CN=probe"}}
    return needed in SCHEDULER_CERT_SCOPES and scheduler_cert(probe) is not None


def _document_security(app: FastAPI, schema: dict[str, Any]) -> None:
    """Declare the bearer scheme, required by every operation, and each operation's 401/403
    answers; the routes :class:`AuthMiddleware` serves without a token (its
    :func:`fleetmind.serving.deps.declared_scope` ``"public"``) get ``security: []``, those
    kube-scheduler's client certificate also reaches (:func:`_cert_opens`) the bearer token or
    the :data:`MUTUAL_TLS` scheme."""
    comps = schema.setdefault("components", {})
    schemes = comps.setdefault("securitySchemes", {})
    schemes[BEARER] = dict(SECURITY_SCHEME)
    schemes[MUTUAL_TLS] = dict(MUTUAL_TLS_SCHEME)
    schema["security"] = [{BEARER: []}]
    paths = schema.get("paths", {})
    for route in flat_routes(app):
        path = getattr(route, "path_format", None) or getattr(route, "path", None)
        for method in getattr(route, "methods", None) or ():
            op = paths.get(path, {}).get(method.lower())
            if not isinstance(op, dict):
                continue
            needed = declared_scope(route)
            if needed == "public":
                op["security"] = []
                continue
            if _cert_opens(path, needed):
                op["security"] = [{BEARER: []}, {MUTUAL_TLS: []}]
            responses = op.setdefault("responses", {})
            for code, answer in _auth_responses(needed).items():
                responses.setdefault(code, answer)


RETRY_AFTER = {
    "Retry-After": {
        "description": "whole seconds to wait before sending the request again",
        "required": True,
        "schema": {"type": "integer", "minimum": 1},
    }
}
"""The ``Retry-After`` header of a 429 (RFC 9110 section 10.2.3; always delay-seconds here)."""


def _body_limit_text(path: str) -> str:
    """What a 413 of a body sent to ``path`` means: the limit
    :class:`fleetmind.serving.middleware.BodyLimitMiddleware` applies to it."""
    larger = " or FLEETMIND_MAX_BODY_BYTES where that is larger"
    if path in SCHEDULER_PATHS:
        setting = f"FLEETMIND_MAX_SCHEDULER_BYTES, default 81,920,000 bytes,{larger}"
    elif path == WEBHOOK_PATH:
        setting = f"FLEETMIND_MAX_WEBHOOK_BYTES{larger}"
    else:
        setting = "FLEETMIND_MAX_BODY_BYTES, 16 MiB by default"
    return f"Request body larger than its limit ({setting}), declared or streamed"


def _middleware_errors(path: str, method: str, op: dict[str, Any]) -> dict[str, Any]:
    """The answers middleware and the server's connection guard give an operation before (or
    instead of) its route: 408 and 413 (operations with a body, and every ``POST``, ``PUT``,
    ``PATCH`` and ``DELETE`` under ``/api/v1/``, where a client may send one to an operation that
    reads none, as :class:`fleetmind.serving.http_guard.GuardedHttpToolsProtocol` and
    :class:`fleetmind.serving.middleware.BodyLimitMiddleware` refuse any body), 415 (those
    methods under ``/api/v1/``, as :class:`fleetmind.serving.origin_guard.OriginGuard` refuses
    them), 429 with ``Retry-After`` (operations that need a token:
    :class:`fleetmind.serving.deps.AuthThrottle`, and the RCA queue of
    :class:`fleetmind.serving.middleware.RCAAdmission`)."""
    answers: dict[str, Any] = {}
    json_only = method.upper() in UNSAFE_METHODS and path.startswith(JSON_BODY_PREFIX)
    if "requestBody" in op or json_only:
        timeout = {
            "description": "The request body stopped arriving: no byte for "
            "FLEETMIND_BODY_TIMEOUT_S (20 s by default); the connection is closed"
        }
        if path.startswith("/api/"):
            timeout["content"] = copy.deepcopy(_ERROR_CONTENT)
        answers["408"] = timeout
        answers["413"] = {
            "description": _body_limit_text(path),
            "content": copy.deepcopy(_ERROR_CONTENT),
        }
        if json_only:
            answers["415"] = {
                "description": "A body with a declared Content-Type that is not JSON, or a "
                "Content-Encoding other than identity (no coding is decoded: send the body "
                "uncompressed; the answer carries Accept-Encoding: identity)"
                + ("" if "requestBody" in op else "; this operation reads no body: send none"),
                "headers": {
                    "Accept-Encoding": {
                        "description": "sent with a refused Content-Encoding: identity",
                        "schema": {"type": "string"},
                    }
                },
                "content": copy.deepcopy(_ERROR_CONTENT),
            }
    if op.get("security") != []:
        why = "Too many wrong tokens from this client address (FLEETMIND_AUTH_FAILURE_LIMIT "
        why += "within FLEETMIND_AUTH_FAILURE_WINDOW_S): no token is checked from it for "
        why += "Retry-After seconds"
        if (path, method.upper()) == (RCAAdmission.PATH, "POST"):
            why += "; or FLEETMIND_RCA_MAX_QUEUE RCA requests already queued (Retry-After: 1)"
        answers["429"] = {
            "description": why,
            "headers": copy.deepcopy(RETRY_AFTER),
            "content": copy.deepcopy(_ERROR_CONTENT),
        }
    return answers


def _document_middleware_errors(schema: dict[str, Any]) -> None:
    """Add :func:`_middleware_errors` to every operation (after :func:`_document_security`, whose
    ``security: []`` marks the operations served without a token). Only middleware answers these
    codes, so a route's own entry (the webhook's 413) is replaced: it says which limit applies."""
    for path, ops in schema.get("paths", {}).items():
        for method, op in ops.items():
            if not isinstance(op, dict) or not isinstance(op.get("responses"), dict):
                continue
            op["responses"].update(_middleware_errors(path, method, op))


RESPONSE_HEADERS: dict[tuple[str, str], dict[str, Any]] = {
    ("/api/v1/incidents", "get"): {
        "X-Total-Count": {
            "description": "the incidents of the requested status in all (every page)",
            "schema": {"type": "integer", "minimum": 0},
        }
    },
}
"""Headers a route's 200 answer carries (path, method): for the OpenAPI spec."""


def _document_headers(schema: dict[str, Any]) -> None:
    """Add :data:`RESPONSE_HEADERS` to the 200 answers of their operations."""
    for (path, method), headers in RESPONSE_HEADERS.items():
        op = schema.get("paths", {}).get(path, {}).get(method)
        if isinstance(op, dict):
            ok = op.setdefault("responses", {}).setdefault("200", {"description": "OK"})
            ok.setdefault("headers", {}).update(copy.deepcopy(headers))


class CutBodyStatus:
    """Pure ASGI middleware (inside :class:`fleetmind.serving.metrics.MetricsMiddleware`): a
    request whose body the server cut at ``FLEETMIND_BODY_TIMEOUT_S`` was answered ``408`` by
    :mod:`fleetmind.serving.http_guard` (which marks it in ``scope["state"]``, key
    :data:`fleetmind.serving.http_guard.CUT_STATUS_KEY`), while the app only saw the client
    leave: its answer (499, or none at all) is dropped by uvicorn. So that the metrics record
    the 408 the client got, the app's status becomes the guard's, and an app that answered
    nothing answers it."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        state = scope.get("state") if scope["type"] == "http" else None
        if not isinstance(state, dict):
            await self.app(scope, receive, send)
            return
        started = False

        async def _send(message: Any) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
                cut = state.get(CUT_STATUS_KEY)
                if isinstance(cut, int):
                    message = {**message, "status": cut}
            await send(message)

        await self.app(scope, receive, _send)
        cut = state.get(CUT_STATUS_KEY)
        if not started and isinstance(cut, int):  # uvicorn drops it: the connection is closed
            await send({"type": "http.response.start", "status": cut, "headers": []})
            await send({"type": "http.response.body", "body": b""})


CLIENT_CLOSED = 499
"""The status recorded for a request whose client went away before its body was read (nginx's)."""
BODY_400 = "There was an error parsing the body"
"""FastAPI's ``detail`` when a body it parses is JSON it cannot decode (fastapi/routing.py)."""
UNREADABLE_BODY = (
    "the body is not JSON this route can read: UTF-8 text, integers of at most 4,300 digits"
)
TOO_DEEP_BODY = "the body is not JSON this route can read: arrays or objects nested too deeply"
"""The 422 ``detail`` of a JSON body whose parse ran out of recursion (as the CLI says it)."""


METHOD_ORDER = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS")


def allowed_methods(request: Request) -> str:
    """The ``Allow`` value of a 405 answer: the methods of every route whose path matches the
    request's, with ``HEAD`` wherever ``GET`` is served (RFC 9110 sections 15.5.6 and 9.3.2)."""
    from starlette.routing import Match

    methods: set[str] = set()
    for route in flat_routes(request.app):
        match, _ = route.matches(request.scope)
        if match is not Match.NONE:
            methods.update(getattr(route, "methods", None) or ())
    if "GET" in methods:
        methods.add("HEAD")
    rank = {m: i for i, m in enumerate(METHOD_ORDER)}
    return ", ".join(sorted(methods, key=lambda m: (rank.get(m, len(rank)), m)))


EXTENDER_PREFIX = "/api/v1/scheduler/"
"""Routes whose refusals (a 4xx or 5xx) :class:`ExtenderRefusalLog` logs: kube-scheduler reads
no body of an answer but 200 (``send`` in kubernetes ``pkg/scheduler/extender.go``: "failed %v
with extender at URL %v, code %v"), so the reason would show nowhere."""


def _pod_key(body: bytes) -> str:
    """``namespace/name`` of the pod of an extender body (``ExtenderArgs.Pod.metadata``, or
    ``ExtenderBindingArgs`` ``PodNamespace``/``PodName``), ``"?"`` when it cannot be read; at
    most 253 characters, one line."""
    try:
        args = json.loads(body)
    except (ValueError, RecursionError):
        return "?"
    pod = get_ci(args, "Pod")
    meta = get_ci(pod, "metadata") if isinstance(pod, dict) else None
    if isinstance(meta, dict):
        name, ns = get_ci(meta, "name"), get_ci(meta, "namespace")
    else:
        name, ns = get_ci(args, "PodName"), get_ci(args, "PodNamespace")
    if not isinstance(name, str) or not name:
        return "?"
    key = f"{ns if isinstance(ns, str) and ns else 'default'}/{name}"
    return one_line(key, 253)


class ExtenderRefusalLog:
    """Logs why an extender route (:data:`EXTENDER_PREFIX`) refused a request, at WARNING: one line
    per route, status and error class, then while they go on one line at most every ``every_s``
    seconds, with how many more were refused like it (as
    :class:`~fleetmind.serving.failure_log.RequestFailureLog` throttles database errors), since
    kube-scheduler retries a pending pod every few seconds (``extender refused POST
    /api/v1/scheduler/filter (503) for pod ml/train-0: no GPU telemetry ... (3 more refused like
    it in the last 60 s)``).

    Args:
        logger: where the lines go.
        every_s: least seconds between two lines about one route, status and error class.
        clock: monotonic seconds (tests pass a fake one).
    """

    def __init__(
        self,
        logger: logging.Logger,
        every_s: float = 60.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.logger = logger
        self._throttle = LineThrottle(every_s, clock)  # per route, status and error class

    def refused(self, route: str, code: int, err: BaseException, pod: str) -> None:
        """Log (or count) the refusal ``code`` of ``route`` with ``err`` for pod key ``pod``."""
        if (seen := self._throttle.due((route, code, type(err).__name__))) is None:
            return
        quiet, age = seen
        since = f" ({quiet} more refused like it in the last {age:.0f} s)" if quiet else ""
        reason = one_line(err, 500)  # a pod's values are free text
        self.logger.warning(
            "extender refused POST %s (%d) for pod %s: %s%s", route, code, pod, reason, since
        )


def _install_error_handlers(app: FastAPI) -> None:
    status_of: list[tuple[type[Exception], int]] = [
        (DataError, 422),
        (ConfigError, 422),
        (ModelLoadError, 409),
        (NotAvailableError, 503),
        (FleetMindError, 400),
    ]

    db_failures = RequestFailureLog(log)  # an outage: a few lines a minute, not per request
    app.state.db_failures = db_failures  # AuthMiddleware's session lookup logs through it too

    refusals = ExtenderRefusalLog(log)  # kube-scheduler shows only the status of a refusal

    async def fleetmind_error(request: Request, exc: Exception) -> JSONResponse:
        code = next(c for t, c in status_of if isinstance(exc, t))
        if request.url.path.startswith(EXTENDER_PREFIX):
            try:
                body = await request.body()  # read by the route already: Starlette keeps it
            except Exception:  # noqa: BLE001 - the client went away: no pod key to give
                body = b""
            refusals.refused(request.url.path, code, exc, _pod_key(body))
        return JSONResponse({"detail": str(exc)}, status_code=code)

    async def db_error(request: Request, exc: Exception) -> JSONResponse:
        route = getattr(request.scope.get("route"), "path", None) or "unmatched"
        code, detail = db_failures.answer(exc, request.method, route)  # never the SQL itself
        return JSONResponse({"detail": detail}, status_code=code)

    async def validation_error(_request: Request, exc: Exception) -> JSONResponse:
        errors = json_safe_errors(exc.errors())  # type: ignore[attr-defined]
        return JSONResponse({"detail": errors}, status_code=422)

    async def http_error(request: Request, exc: Exception) -> Response:
        # FastAPI answers 400 "There was an error parsing the body" for a JSON body that is not
        # UTF-8, holds an integer over Python's 4,300 digits or nests too deeply for its parser:
        # input it cannot read, a 422 as on the routes that parse their own bodies
        if getattr(exc, "status_code", None) == 400 and getattr(exc, "detail", None) == BODY_400:
            deep = isinstance(exc.__cause__, RecursionError)
            return JSONResponse({"detail": TOO_DEEP_BODY if deep else UNREADABLE_BODY}, 422)
        if getattr(exc, "status_code", None) == 405:  # Starlette's Allow: only one route's methods
            exc.headers = {**(exc.headers or {}), "Allow": allowed_methods(request)}  # type: ignore[attr-defined]
        return await http_exception_handler(request, exc)  # type: ignore[arg-type]

    from fastapi.exception_handlers import http_exception_handler
    from fastapi.exceptions import RequestValidationError
    from starlette.exceptions import HTTPException as StarletteHTTPException

    async def client_gone(_request: Request, _exc: Exception) -> Response:
        # the client closed the connection mid-body: nothing to answer, nothing stored; nginx's
        # 499 ("client closed request") keeps it out of the 5xx counts, and no traceback is logged
        return Response(status_code=CLIENT_CLOSED)

    from starlette.requests import ClientDisconnect

    app.add_exception_handler(ClientDisconnect, client_gone)
    app.add_exception_handler(StarletteHTTPException, http_error)
    app.add_exception_handler(RequestValidationError, validation_error)
    app.add_exception_handler(FleetMindError, fleetmind_error)
    app.add_exception_handler(SQLAlchemyError, db_error)
