"""Prometheus metrics of the service (prometheus-client), on a per-app registry.

| metric | type | labels |
| --- | --- | --- |
| ``fleetmind_http_request_duration_seconds`` | histogram | ``method``, ``route`` (template), ``status`` |
| ``fleetmind_alerts_ingested_total`` | counter | ``status`` (firing, resolved) |
| ``fleetmind_alerts_truncated_total`` | counter | - (alerts Alertmanager reported left out, ``truncatedAlerts``) |
| ``fleetmind_alerts_rejected_total`` | counter | - (invalid alerts left out of an otherwise stored webhook) |
| ``fleetmind_alerts_unmapped_total`` | counter | ``reason`` (no_cluster, unknown_cluster, no_match: alerts grouped that matched no graph node, :func:`fleetmind.serving.health.unmapped_reason`) |
| ``fleetmind_http_bodies_too_large_total`` | counter | ``route`` (``/api/v1/alerts``, ``other``: requests refused with 413 for their body size) |
| ``fleetmind_open_incidents`` | gauge | - (exported by the process that leads the incident worker; 0 in the others) |
| ``fleetmind_alerts_grouped_total`` | counter | - (pending alerts the incident worker has grouped) |
| ``fleetmind_incident_grouping_lag_seconds`` | gauge | - (age of the oldest ungrouped alert, read at every worker loop; 0 when none is pending) |
| ``fleetmind_model_info`` | gauge (1) | ``kind``, ``method``, ``version``, ``fallback`` |
| ``fleetmind_model_loads_total`` | counter | ``kind``, ``result`` (success, failure) |
| ``fleetmind_rca_duration_seconds`` | histogram | ``method`` |
| ``fleetmind_placements_total`` | counter | ``policy``, ``result`` (placed, infeasible), ``path`` (placements, filter, prioritize: the placement route or the kube-scheduler extender's) |

``fleetmind_model_loads_total`` is the series the ``ModelWeightLoadFailures`` rule in
``deploy/fleetmind-rules.yml`` watches, and ``fleetmind_incident_grouping_lag_seconds`` the
``FleetMindIncidentGroupingLag`` rule's. Its four series (:data:`MODEL_KINDS` x
:data:`LOAD_RESULTS`) exist at 0 from the start: a series born at 1 on its first failure shows
``rate()`` no increase, so the rule would never see it (Prometheus, "Instrumentation: Avoid
missing metrics").

**Several worker processes** (``fleetmind serve --workers N``): the CLI points
``PROMETHEUS_MULTIPROC_DIR`` at an empty directory before uvicorn starts the workers
(:func:`prepare_multiprocess_dir`), so prometheus-client keeps every value in a per-process file
there, and ``/metrics`` answers the files of all workers merged (client_python, "Multiprocess
Mode"): counters and histograms summed (an exited worker's counts stay in the total), the gauges
the maximum over live workers (``livemax``). Workers that exited are found at every scrape and
their gauge files dropped (:func:`mark_dead_workers`; uvicorn's supervisor has no hook to call
``mark_process_dead``). A run killed outright leaves its directory; the next start removes it
when that is safe to judge (:func:`sweep_stale_multiprocess_dirs`). Collectors that read objects
of their own process (``fleetmind_cluster_health``, ``fleetmind_fleet_skew``) live on
:attr:`Metrics.process_registry` and are answered by the worker that serves the scrape. Without the variable (one process, the
default, and the tests) everything is on one private registry.
"""

from __future__ import annotations

import os
import re
import shutil
import stat
import tempfile
import time
from collections.abc import Callable, Mapping
from typing import Any

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)
from prometheus_client.multiprocess import MultiProcessCollector, mark_process_dead

from fleetmind.serving.health import UNMAPPED_REASONS, unmapped_reason

LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0)
MODEL_KINDS = ("rca", "placement")
"""The ``kind`` label of the model metrics (:class:`fleetmind.serving.registry.ModelRegistry`'s)."""
LOAD_RESULTS = ("success", "failure")
"""The ``result`` label of ``fleetmind_model_loads_total``."""
MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"
"""prometheus-client's multiprocess switch, read when it is imported: set before workers start."""
_LIVE_GAUGE_FILE = re.compile(r"gauge_live[a-z]+_(\d+)\.db")


DIR_PREFIX = "fleetmind-metrics-"
"""How the name of every directory :func:`prepare_multiprocess_dir` makes begins."""
_OWNED_DIR = re.compile(re.escape(DIR_PREFIX) + r"([0-9a-f]{16})-(\d+)-[^/]+")
SWEEP_MIN_AGE_S = 60.0
"""Seconds since a directory last changed before :func:`sweep_stale_multiprocess_dirs` may remove
it."""


def host_tag() -> str | None:
    """16 hex digits naming this boot of this host and this process's PID namespace (a digest of
    ``/proc/sys/kernel/random/boot_id`` and the ``/proc/self/ns/pid`` link), or ``None`` where
    they cannot be read (not Linux, no ``/proc``, or a ``/proc`` of another PID namespace). Two
    processes running at the same time with the same tag see the same process IDs. The kernel
    reuses a freed namespace's number (a container restarted, its new init again PID 1, gets the
    same tag): a tag recorded by a process that is gone then names a namespace that is gone, whose
    process IDs are all gone; another container running now has a number of its own."""
    import hashlib

    try:
        with open("/proc/sys/kernel/random/boot_id", encoding="ascii") as f:
            boot_id = f.read().strip()
        namespace = os.readlink("/proc/self/ns/pid")
        if int(os.readlink("/proc/self")) != os.getpid():  # /proc of another PID namespace
            return None
    except (OSError, ValueError):
        return None
    if not boot_id:
        return None
    return hashlib.sha256(f"{boot_id}\0{namespace}".encode()).hexdigest()[:16]


def _stale(path: str, tag: str, now: float, min_age_s: float) -> bool:
    """Whether ``path`` is a directory of :func:`prepare_multiprocess_dir` made under ``tag``, owned
    by this user, unchanged for ``min_age_s`` seconds, whose creating process and every process
    with a live gauge file in it are gone.

    This process's own ID counts as gone: the sweep runs before this process makes its directory,
    so a directory naming this ID was made by an earlier process that had it (a restarted
    container's PID 1, in a namespace whose number the kernel reused); only the directory this
    process uses now (:data:`MULTIPROC_ENV`) is never stale."""
    m = _OWNED_DIR.fullmatch(os.path.basename(path))
    if m is None or m.group(1) != tag or _in_use(path):
        return False
    try:
        st = os.lstat(path)
        if not stat.S_ISDIR(st.st_mode) or now - st.st_mtime < min_age_s:
            return False
        if hasattr(os, "getuid") and st.st_uid != os.getuid():
            return False
        pids = {int(m.group(2))}
        for name in os.listdir(path):
            live = _LIVE_GAUGE_FILE.fullmatch(name)
            if live:
                pids.add(int(live.group(1)))
    except OSError:
        return False
    return not any(pid != os.getpid() and _alive(pid) for pid in pids)


def _in_use(path: str) -> bool:
    """Whether ``path`` is the directory :data:`MULTIPROC_ENV` points this process at."""
    current = os.environ.get(MULTIPROC_ENV)
    return bool(current) and os.path.realpath(current) == os.path.realpath(path)


def sweep_stale_multiprocess_dirs(
    parent: str, min_age_s: float = SWEEP_MIN_AGE_S, now: float | None = None
) -> list[str]:
    """Remove the directories of :func:`prepare_multiprocess_dir` in ``parent`` that runs ended
    without their cleanup left behind (a SIGKILL, the OOM killer); returns the paths removed.

    Best effort, and only what is safe to judge: a directory whose name carries this host's
    :func:`host_tag` (same boot; this PID namespace, or a dead one whose number it reuses, whose
    process IDs are then all gone),
    owned by this user, unchanged for ``min_age_s`` seconds (``now``: the time, seconds since the
    epoch; default the clock), whose creating process and every process named by a live gauge file
    (``gauge_live*_<pid>.db``) are gone (this process's own ID included: see :func:`_stale`). A
    directory another running container, another host or boot made (shared volume), or one of an
    older release (no tag), is left alone; with no tag here nothing is swept.
    """
    tag = host_tag()
    if tag is None:
        return []
    now = time.time() if now is None else now
    try:
        names = os.listdir(parent)
    except OSError:
        return []
    removed = []
    for name in sorted(names):
        path = os.path.join(parent, name)
        if name.startswith(DIR_PREFIX) and _stale(path, tag, now, min_age_s):
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path)
    return removed


def prepare_multiprocess_dir() -> tuple[str, str | None]:
    """Point :data:`MULTIPROC_ENV` at a new, empty directory for the workers about to start.

    A directory of this run's own: inside the one the operator set (which may be shared with
    other instances, whose live files must not be removed or merged into this one's), else in
    the system's temporary directory. Its name carries :func:`host_tag` and this process's ID, so
    that a later start can tell it was left by a run that is gone: the directories such runs left
    there are removed first (:func:`sweep_stale_multiprocess_dirs`). Returns the directory and the
    variable's value before (:func:`cleanup_multiprocess_dir` removes the one and restores the
    other).
    """
    given = os.environ.get(MULTIPROC_ENV) or None
    if given:
        os.makedirs(given, exist_ok=True)
    sweep_stale_multiprocess_dirs(given or tempfile.gettempdir())
    tag = host_tag()
    prefix = f"{DIR_PREFIX}{tag}-{os.getpid()}-" if tag else DIR_PREFIX
    path = tempfile.mkdtemp(prefix=prefix, dir=given)
    os.environ[MULTIPROC_ENV] = path
    return path, given


def cleanup_multiprocess_dir(path: str, previous: str | None) -> None:
    """Undo :func:`prepare_multiprocess_dir` once the workers are gone."""
    shutil.rmtree(path, ignore_errors=True)
    if previous is None:
        os.environ.pop(MULTIPROC_ENV, None)
    else:
        os.environ[MULTIPROC_ENV] = previous


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, another user's
        return True
    return True


def mark_dead_workers(path: str) -> list[int]:
    """``mark_process_dead`` for every process with ``live*`` gauge files in ``path`` that is gone.

    Their gauges then leave the merged values (client_python: "live" modes count only processes
    not marked dead); counters and histograms keep their files (the totals do not drop). Returns
    the pids marked.
    """
    dead = set()
    for name in os.listdir(path):
        m = _LIVE_GAUGE_FILE.fullmatch(name)
        if m and int(m.group(1)) != os.getpid() and not _alive(int(m.group(1))):
            dead.add(int(m.group(1)))
    for pid in sorted(dead):
        mark_process_dead(pid, path)
    return sorted(dead)


class Metrics:
    """The service's collectors, registered on their own :class:`CollectorRegistry`.

    With :data:`MULTIPROC_ENV` set, the counters, histograms and gauges write their values to that
    directory and :meth:`render` merges every worker's; :attr:`process_registry` holds what only
    this process can answer. Without it, :attr:`process_registry` is :attr:`registry`.
    """

    def __init__(self) -> None:
        self.multiprocess_dir = os.environ.get(MULTIPROC_ENV) or None
        self.registry = CollectorRegistry()
        self.process_registry = CollectorRegistry() if self.multiprocess_dir else self.registry
        self._model_labels: list[tuple[str, str, str, str]] = []
        r = self.registry
        self.request_latency = Histogram(
            "fleetmind_http_request_duration_seconds",
            "HTTP request latency by route template",
            ["method", "route", "status"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.alerts_ingested = Counter(
            "fleetmind_alerts_ingested",
            "alerts durably stored, once per delivery (an Alertmanager HA replica's or a retry's"
            " repeat of a stored alert counts again; status as delivered)",
            ["status"],
            registry=r,
        )
        self.alerts_truncated = Counter(
            "fleetmind_alerts_truncated",
            "alerts Alertmanager left out of its notifications (truncatedAlerts)",
            registry=r,
        )
        self.alerts_rejected = Counter(
            "fleetmind_alerts_rejected",
            "invalid alerts left out of a webhook whose other alerts were stored",
            registry=r,
        )
        self.alerts_unmapped = Counter(
            "fleetmind_alerts_unmapped",
            "alerts grouped that matched no graph node, so their incident has no ranked cause "
            "(reason: no_cluster, unknown_cluster, no_match)",
            ["reason"],
            registry=r,
        )
        for reason in UNMAPPED_REASONS:  # at 0 from the start, as fleetmind_model_loads_total
            self.alerts_unmapped.labels(reason)
        self.bodies_too_large = Counter(
            "fleetmind_http_bodies_too_large",
            "requests refused with 413 for their body size (route: the webhook's path, or other)",
            ["route"],
            registry=r,
        )
        # gauges: the largest value of the live workers (only the leader exports open incidents;
        # the lag is read from the shared database by every worker; model_info is 1 or 0)
        self.open_incidents = Gauge(
            "fleetmind_open_incidents",
            "incidents now open",
            registry=r,
            multiprocess_mode="livemax",
        )
        self.alerts_grouped = Counter(
            "fleetmind_alerts_grouped", "pending alerts grouped into incidents", registry=r
        )
        self.grouping_lag = Gauge(
            "fleetmind_incident_grouping_lag_seconds",
            "seconds since the oldest ungrouped alert (or status change) was stored, read at every "
            "loop of the incident worker whether or not it succeeds (0 when none is pending)",
            registry=r,
            multiprocess_mode="livemax",
        )
        self.model_info = Gauge(
            "fleetmind_model_info",
            "served models (value 1)",
            ["kind", "method", "version", "fallback"],
            registry=r,
            multiprocess_mode="livemax",
        )
        self.model_loads = Counter(
            "fleetmind_model_loads", "model load attempts", ["kind", "result"], registry=r
        )
        for kind in MODEL_KINDS:  # at 0 before any load: rate() needs the 0 to see a failure
            for result in LOAD_RESULTS:
                self.model_loads.labels(kind, result)
        self.rca_latency = Histogram(
            "fleetmind_rca_duration_seconds",
            "time to rank one alert set",
            ["method"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.rca_batch_size = Histogram(
            "fleetmind_rca_batch_size",
            "synchronous RCA requests ranked together in one batch",
            buckets=(1, 2, 4, 8, 16, 32, 64),
            registry=r,
        )
        self.placements = Counter(
            "fleetmind_placements", "placement decisions", ["policy", "result", "path"], registry=r
        )

    def count_unmapped(self, graph: Any, labels: Mapping[str, Any]) -> str:
        """Count one alert (its ``labels``) that matched no node of ``graph`` (a
        :class:`fleetmind.data.graph.DependencyGraph`) in ``fleetmind_alerts_unmapped_total``;
        returns the reason (:func:`fleetmind.serving.health.unmapped_reason`). Called where an
        alert is grouped (the incident manager), once per alert."""
        reason = unmapped_reason(graph, labels)
        self.alerts_unmapped.labels(reason).inc()
        return reason

    def on_model_load(self, kind: str, ok: bool) -> None:
        self.model_loads.labels(kind, "success" if ok else "failure").inc()

    def set_models(self, models: Any) -> None:
        """Expose the served model set (a :class:`fleetmind.serving.registry.ModelSet`).

        In multiprocess mode a series cannot be removed from the worker's file (client_python:
        ``clear`` is not implemented there): the models this worker no longer serves read 0.
        """
        labels = [
            (m.kind, m.method, m.version or "", "true" if m.fallback_reason else "false")
            for m in (models.rca, models.placement)
        ]
        if self.multiprocess_dir:
            for old in self._model_labels:
                if old not in labels:
                    self.model_info.labels(*old).set(0)
        else:
            self.model_info.clear()
        self._model_labels = labels
        for values in labels:
            self.model_info.labels(*values).set(1)

    def render(self) -> tuple[bytes, str]:
        """The exposition text of ``/metrics`` and its content type."""
        if not self.multiprocess_dir:
            return generate_latest(self.registry), CONTENT_TYPE_LATEST
        mark_dead_workers(self.multiprocess_dir)
        merged = CollectorRegistry()
        MultiProcessCollector(merged, self.multiprocess_dir)
        body = generate_latest(merged) + generate_latest(self.process_registry)
        return body, CONTENT_TYPE_LATEST


HTTP_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})
"""Methods kept as the ``method`` label; any other verb is counted as ``other``."""


class MetricsMiddleware:
    """Pure ASGI middleware timing every HTTP request by route template."""

    def __init__(
        self, app: Any, metrics: Metrics, route_of: Callable[[Any, Any], Any] | None = None
    ) -> None:
        """``route_of(app, scope)``: the route of a request that routing never reached (refused
        by a middleware before it: 401, 403, 413, 415, ...); ``None``: such requests count as
        ``unmatched``."""
        self.app = app
        self.metrics = metrics
        self.route_of = route_of

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        status = {"code": 500}

        async def _send(message: Any) -> None:
            if message["type"] == "http.response.start":
                status["code"] = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, _send)
        finally:
            route = scope.get("route")
            if route is None and self.route_of is not None:
                route = self.route_of(scope.get("app"), scope)
            template = getattr(route, "path", None) or "unmatched"
            method = scope.get("method", "")
            if method not in HTTP_METHODS:  # a client-chosen verb must not create series
                method = "other"
            self.metrics.request_latency.labels(method, template, str(status["code"])).observe(
                time.perf_counter() - start
            )
