"""``/healthz`` (liveness), ``/readyz`` (readiness) and ``/metrics`` (Prometheus); no token needed.

They are ``async`` and never wait for the worker threads that serve the other routes: a burst of
requests stuck behind a slow Prometheus or database holds every one of those threads (anyio's
default limit is 40), and a probe queued behind them would time out (the Deployment's probes allow
3 s) and get a healthy pod restarted or taken out of its Service. ``/healthz`` runs on the event
loop; the blocking parts of ``/readyz`` and ``/metrics`` (rendering the registry) run in a small
pool of their own, :data:`PROBE_POOL`, and the database ping in a thread of its own.

``/readyz`` also lists ``warnings``: conditions that leave the service ready (it keeps ingesting)
but not doing its job, such as serving the embedded example graph to a real fleet
(:func:`example_graph_warning`), a model on its fallback
(:func:`fleetmind.serving.registry.fallback_warnings`) or a ``FLEETMIND_GRAPH`` file the refresher
could not load (:meth:`fleetmind.serving.graph_refresh.GraphRefresher.warning`), telemetry whose
cluster names are none of the graph's (:func:`fleetmind.serving.health.cluster_mismatch_warning`)
or most of the newest alerts matching no graph node
(:func:`fleetmind.serving.health.unmapped_alerts_warning`); and which graph is
served (``graph``, ``graph_version``, ``graph_source``, ``graph_loaded_at``).

Every ``/readyz`` answer sets ``fleetmind_ready`` (1 ready, 0 not), which the
``FleetMindNotReady`` rule watches: a pod the readiness probe takes out of its Service gets no
webhook and no extender call, so no request metric shows the failure, while Prometheus still
scrapes it. Where nothing called ``/readyz`` for
:data:`fleetmind.serving.metrics.READY_STALE_S` (Docker's healthcheck and a plain Prometheus call
only ``/healthz`` and ``/metrics``), ``/metrics`` runs the same checks before answering, waiting
at most :data:`READY_CHECK_S` after the check started. ``/readyz`` and the scrapes share one
check in flight, and one running longer is not ready (``/readyz`` answers 503 at once), so a
hanging database keeps one thread. A check still running
:data:`fleetmind.serving.metrics.READY_STALE_S` after it started is given up and a new one asks
the database again (at most :data:`ABANDONED_CHECKS_MAX` given up at once). The scheduler holds count that ``/metrics``
reads from the database is bounded the same way
(:data:`fleetmind.serving.metrics.HOLDS_COUNT_S`): a hanging database leaves it out, and the
scrape answers.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import threading
import time
import weakref
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from fastapi import APIRouter, Request, Response
from fastapi.responses import JSONResponse

from fleetmind.data.files import read_json
from fleetmind.data.graph import DependencyGraph
from fleetmind.serving import metrics as _metrics_module
from fleetmind.serving.defaults import DEFAULT_GRAPH
from fleetmind.serving.health import (
    UNMAPPED_WINDOW,
    cluster_mismatch_warning,
    unmapped_alerts_warning,
)
from fleetmind.serving.origin_guard import binds_loopback
from fleetmind.serving.registry import fallback_warnings
from fleetmind.serving.settings import Settings
from fleetmind.serving.telemetry.base import FleetSnapshot

router = APIRouter(tags=["health"])

_SNAPSHOT_READS = threading.Lock()  # held while /readyz has a telemetry read of its own running

PROBE_POOL = ThreadPoolExecutor(4, thread_name_prefix="fleetmind-probe")
"""Threads for the blocking parts of ``/readyz`` and ``/metrics`` only (see the module docstring)."""


READY_CHECK_S = 2.0
"""Seconds after a readiness check (the database ping) started that ``/readyz`` and a ``/metrics``
scrape wait for its verdict (a later caller joining it waits only what is left): under the
Deployment's 3 s probe timeout."""
_SCRAPE_CHECK = threading.Lock()  # held while a caller looks up or starts the readiness check
ABANDONED_CHECKS_MAX = 2
"""Readiness checks given up (still running past :data:`fleetmind.serving.metrics.READY_STALE_S`)
whose threads may stay stuck at once; with that many, callers keep answering not ready and start
no new check until one of them returns."""
_ABANDONED: weakref.WeakKeyDictionary[Any, list[Future[list[str]]]] = weakref.WeakKeyDictionary()
log = logging.getLogger("fleetmind.serving")


async def _in_probe_pool(fn: Any, *args: Any) -> Any:
    return await asyncio.wrap_future(PROBE_POOL.submit(fn, *args))


@functools.cache
def example_graph_name() -> str:
    """The name of the embedded example graph (``serving/defaults/graph.json``)."""
    return str(read_json(DEFAULT_GRAPH, "graph file")["name"])


def is_example_graph(graph: DependencyGraph) -> bool:
    """Whether ``graph`` is the embedded example graph, known by its name: a copy of the file
    (the Kubernetes manifests put one where ``FLEETMIND_GRAPH`` points until the fleet's graph is
    built) counts too."""
    return graph.name == example_graph_name()


def example_graph_warning(settings: Settings, graph: DependencyGraph) -> str | None:
    """One line when ``graph`` is the embedded example while the service serves a real fleet
    (telemetry ``prometheus``, or a token set on a non-loopback listen address, as a deployment
    runs), else ``None``: the demo and the operators' tutorial (simulated telemetry on loopback,
    with or without a token) use the example graph on purpose, and their storms map onto it.

    The example's clusters (c0, c1) are no fleet's: alerts map to no graph node and every incident
    has no ranked cause, while everything else looks healthy. The line names no file (``/readyz``
    answers without a token).
    """
    if not is_example_graph(graph):
        return None
    if settings.telemetry != "prometheus" and (
        not settings.tokens() or binds_loopback(settings.bind_host)
    ):
        return None  # the demo and local trials: the example graph is what they are meant to use
    clusters = sorted(graph.cluster_names())
    return (
        f"graph: serving the embedded example graph '{graph.name}' (clusters "
        f"{', '.join(clusters)}), not your fleet's: alerts map to no graph node and incidents get "
        "no ranked causes; build the fleet's graph with `fleetmind graph build` and point "
        "FLEETMIND_GRAPH at the file (docs/deploy.md)"
    )


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


def _last_snapshot(telemetry: Any) -> FleetSnapshot | None:
    """Telemetry's latest snapshot, whatever its age, never a new one (``/readyz`` must not wait
    for Prometheus); when there is none yet, one is read in a thread of its own for a later call."""
    if telemetry is None:
        return None
    last = getattr(telemetry, "last_snapshot", None)
    snap = last() if callable(last) else None
    if snap is None and _SNAPSHOT_READS.acquire(blocking=False):

        def read() -> None:
            try:
                telemetry.snapshot()
            except Exception:  # reported where telemetry is used (fleet page, placements)
                pass
            finally:
                _SNAPSHOT_READS.release()

        threading.Thread(target=read, name="fleetmind-readyz-telemetry", daemon=True).start()
    return snap if isinstance(snap, FleetSnapshot) else None


def _mapping_warnings(services: Any, graph: DependencyGraph) -> list[str]:
    """Whether alerts and telemetry meet the graph (blocking: reads the newest stored alerts):
    telemetry's cluster names none of the graph's
    (:func:`fleetmind.serving.health.cluster_mismatch_warning`), most recent alerts matching no
    node (:func:`fleetmind.serving.health.unmapped_alerts_warning`). A failure leaves a warning
    out; readiness is :func:`_problems`' job."""
    out = []
    try:
        warning = cluster_mismatch_warning(graph, _last_snapshot(services.telemetry))
        if warning is not None:
            out.append(warning)
    except Exception:
        pass
    try:
        rows = services.db.list_alerts(limit=UNMAPPED_WINDOW, newest=True)
        warning = unmapped_alerts_warning(graph, rows)
        if warning is not None:
            out.append(warning)
    except Exception:
        pass
    return out


def _start_check(services: Any) -> Future[list[str]]:
    """:func:`_problems` in a daemon thread of its own (``fleetmind-ready-check``), not in
    :data:`PROBE_POOL`: a check stuck on a connection that never answers keeps its thread, and the
    pool's threads stay free for ``/metrics``; a daemon thread does not hold up the process's exit."""
    fut: Future[list[str]] = Future()

    def run() -> None:
        try:
            fut.set_result(_problems(services))
        except BaseException as err:  # handed to the callers that wait
            fut.set_exception(err)

    threading.Thread(target=run, name="fleetmind-ready-check", daemon=True).start()
    return fut


def _abandon(metrics: Any, held: tuple[Future[list[str]], float]) -> bool:
    """Give up on ``held``, a check running for over :data:`fleetmind.serving.metrics.READY_STALE_S`
    (its connection never answers: a proxy that accepts and never forwards), so that a new one can
    ask the database again; ``False`` where :data:`ABANDONED_CHECKS_MAX` given-up checks are still
    running (their threads stay stuck: not one more). Call with :data:`_SCRAPE_CHECK` held."""
    stuck = [f for f in _ABANDONED.get(metrics, []) if not f.done()]
    _ABANDONED[metrics] = stuck
    if len(stuck) >= ABANDONED_CHECKS_MAX:
        return False
    stuck.append(held[0])
    log.warning(
        "readiness check: the database check started %.0f s ago has no answer yet; left running "
        "(%d such checks now) and a new check started",
        time.monotonic() - held[1],
        len(stuck),
    )
    return True


def _shared_check(services: Any) -> tuple[Future[list[str]], float]:
    """The readiness check (:func:`_problems`) and its ``time.monotonic()`` start: the one in
    flight, or a new one (:func:`_start_check`). ``/readyz`` and the scrapes share it, so a hanging
    database keeps one thread (not one per probe), and concurrent callers (an HA Prometheus pair)
    get one verdict. A check still running :data:`fleetmind.serving.metrics.READY_STALE_S` after
    its start is given up (:func:`_abandon`) and a new one asks the database again: a connection
    that never returns must not keep the service not ready once new connections work."""
    metrics = services.metrics
    with _SCRAPE_CHECK:
        held = metrics.ready_check
        if held is not None and not held[0].done():
            if time.monotonic() - held[1] <= _metrics_module.READY_STALE_S:
                return held
            if not _abandon(metrics, held):
                return held  # past its bound: not ready, without another stuck thread
        metrics.ready_check = (_start_check(services), time.monotonic())
        return metrics.ready_check


async def _bounded_problems(services: Any) -> list[str]:
    """:func:`_problems` of the shared check, awaited until :data:`READY_CHECK_S` after it started;
    a check still running then (a database that hangs) is a problem of its own."""
    check, started = _shared_check(services)
    left = started + READY_CHECK_S - time.monotonic()
    if left > 0 and not check.done():  # wait() never cancels the check
        await asyncio.wait({asyncio.wrap_future(check)}, timeout=left)
    if not check.done():
        return [f"database: no answer within {READY_CHECK_S:g} s"]
    return check.result()


async def _refresh_ready(services: Any) -> None:
    """Set ``fleetmind_ready`` at a scrape when no ``/readyz`` verdict is recent, from the shared
    check (:func:`_bounded_problems`); a check that fails outright is not ready either."""
    metrics = services.metrics
    if not metrics.ready_is_stale():
        return
    try:
        problems = await _bounded_problems(services)
    except Exception:
        problems = ["readiness check failed"]
    metrics.set_ready(not problems)


@router.get("/readyz", summary="Readiness: database reachable, models and graph loaded")
async def readyz(request: Request) -> Any:
    services = getattr(request.app.state, "services", None)
    problems = ["starting"] if services is None else await _bounded_problems(services)
    if services is not None:
        services.metrics.set_ready(not problems)
    if problems:
        return JSONResponse({"status": "not ready", "problems": problems}, status_code=503)
    view = services.graphs.view
    graph = view.graph
    warning = example_graph_warning(services.settings, graph)
    warnings = [] if warning is None else [warning]
    warnings += fallback_warnings(services.registry.current)  # ready, but not with its models
    warnings += await _in_probe_pool(_mapping_warnings, services, graph)
    refresher = getattr(request.app.state, "graph_refresher", None)
    refused = refresher.warning() if refresher is not None else None
    if refused is not None:  # ready on the graph loaded before; the file needs fixing
        warnings.append(refused)
    info = view.describe(paths=False)  # which graph: version, source ("file"/"api"), loaded_at
    return {
        "status": "ready",
        "graph": graph.name,
        "graph_version": info["version"],
        "graph_source": info["source"],
        "graph_loaded_at": info["loaded_at"],
        "warnings": warnings,
        "telemetry": services.telemetry.name if services.telemetry else "unavailable",
        "incident_worker": "failing" if services.incidents.failing_since else "ok",
    }


@router.get("/metrics", summary="Prometheus metrics", response_class=Response)
async def metrics(request: Request) -> Response:
    services = getattr(request.app.state, "services", None)
    if services is None:
        return Response("service is starting\n", status_code=503, media_type="text/plain")
    await _refresh_ready(services)
    body, ctype = await _in_probe_pool(services.metrics.render)
    return Response(body, media_type=ctype)
