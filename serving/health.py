"""Per-cluster health and fleet load skew, from live telemetry.

Signals per cluster ``c`` (each in [0, 1] after normalisation; *higher is worse*):

* ``u_c``: mean GPU utilisation of its healthy GPUs / 100;
* ``v_c``: VRAM pressure, framebuffer used / total over its GPUs;
* ``l_c``: P99 inference latency / ``latency_slo_s``, capped at 1. P99 (and P95) come from a
  latency histogram in Prometheus (``FLEETMIND_HEALTH_LATENCY_HISTOGRAM``, default
  ``http_server_request_duration_seconds``, the OpenTelemetry HTTP server metric):
  ``histogram_quantile(0.99, sum by (cluster, le) (max without (prometheus_replica)
  (rate(<h>_bucket[5m]))))``; the request rate is ``sum by (cluster) (max without
  (prometheus_replica) (rate(<h>_count[5m])))``. The ``max without`` keeps one series of each HA
  Prometheus pair (:data:`REPLICA_LABELS`) before the sum, which would otherwise double the
  cluster's rate when Thanos Query answers without deduplication. A histogram stored as a native
  histogram (``scrape_native_histograms: true``, OTLP exponential histograms) has no ``_bucket``
  or ``_count`` series, so each query joins the native form with ``or``
  (``histogram_quantile(0.99, sum by (cluster) (avg without (prometheus_replica)
  (rate(<h>[5m]))))``, ``histogram_count(...)`` for the rate; :func:`latency_queries`), the
  classic side kept only where it has traffic: each cluster answers in the form holding its
  requests.

Health ``H_c = 1 - sum_i w_i s_ic`` over the signals the cluster has (weights renormalised over
them), so 1 is idle and healthy, 0 saturated on every signal. Unhealthy GPUs (XID) count as fully
used and fully loaded: a cluster with many of them looks worse. Cordoned and not-Ready nodes
(``NodeState.schedulable`` false: a node being drained for maintenance or a driver upgrade) are
left out of every signal, their GPUs and placeholders too: they take no new work either way, so a
node whose exporter is gone mid-upgrade does not count as saturated, nor a drained idle one as
spare capacity. So is a node whose GPUs the GPU Operator's MIG manager is reconfiguring
(``NodeState.device_plugin`` :data:`MIG_CHANGE`): it pauses the device plugin and dcgm-exporter
but never cordons the node, and until it is done the node has no GPU to offer nor any reading.
So is a node none of whose GPUs has a DCGM reading (``NodeState.unscraped``: one that just joined,
its dcgm-exporter not yet scraped): its placeholders would count as unhealthy GPUs.

Weights start at ``w0 = (0.4, 0.35, 0.25)`` (utilisation, VRAM, latency) and adapt online with load:
after each refresh ``m_i <- (1 - a) m_i + a mean_c(s_ic)`` (``a = 0.1``, ``m`` starting at 0) and
``w = normalise(w0 * (1 + m))``: a signal that is high across the fleet weighs up to twice its
initial share, so under GPU-bound load utilisation dominates and under latency-bound load latency.

Fleet skew is the mean of the coefficients of variation (population std / mean across clusters) of
request rate, P95 latency and CPU use (requested / allocatable CPU); a metric with fewer than two
clusters reporting it, or a zero mean, is left out; 0 with nothing to compare.

Multi-cluster placement reads the health (``serving/scheduler/placement_router.py``): a job without a
``cluster`` is placed only in clusters whose health is at least ``FLEETMIND_HEALTH_MIN``
(default 0.2) when one of them can hold it; otherwise anywhere.
"""

from __future__ import annotations

import contextlib
import logging
import math
import re
import threading
import weakref
from collections.abc import Iterator, Set
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from fleetmind.serving.telemetry.base import MIG_CHANGE, FleetSnapshot, NodeState

if TYPE_CHECKING:  # deps imports this module: the type only, for the annotations
    from fleetmind.serving.deps import Services

log = logging.getLogger("fleetmind.serving")

SIGNALS = ("gpu_util", "vram_pressure", "latency")
REPLICA_LABELS = "prometheus_replica"
"""The label that tells the two Prometheus servers of an HA pair apart: ``prometheus_replica``, the
external label the Prometheus Operator (kube-prometheus-stack) gives each replica
(``replicaExternalLabelName``'s default). Thanos Query without deduplication, or a federation with
``honor_labels: true``, answers every series once per replica; a ``sum`` over them counts each
request twice, so queries take ``max without (REPLICA_LABELS)`` first, as the telemetry queries'
``max by`` do (:mod:`fleetmind.serving.telemetry.prometheus`). Only this label: a plain
``replica`` label is also a workload's (Ray Serve tags every ``ray.serve`` metric with its
``replica``, ``REPLICA_TAG`` in ``ray/serve/metrics.py``), and dropping it would count two
workload replicas as one. Deduplicate any other replica label (Thanos'
``--query.replica-label``) in Thanos Query itself."""
INITIAL_WEIGHTS = (0.4, 0.35, 0.25)
ADAPT_RATE = 0.1


@dataclass
class ClusterSignals:
    """Raw per-cluster figures (``None`` when unknown). Units: fractions, seconds, requests/s."""

    cluster: str
    gpu_util: float | None = None
    vram_pressure: float | None = None
    p99_latency_s: float | None = None
    p95_latency_s: float | None = None
    request_rate: float | None = None
    cpu_use: float | None = None
    health: float | None = None


@dataclass
class FleetHealth:
    """One refresh: per-cluster signals and health, the weights used, the skew."""

    clusters: list[ClusterSignals]
    weights: dict[str, float]
    skew: float
    skew_parts: dict[str, float] = field(default_factory=dict)

    def by_cluster(self) -> dict[str, ClusterSignals]:
        return {c.cluster: c for c in self.clusters}


def _finite(value: float | None) -> float | None:
    """``value`` as a float, ``None`` when missing, NaN or infinite."""
    if value is None:
        return None
    value = float(value)
    return value if math.isfinite(value) else None


def takes_no_work(node: NodeState) -> bool:
    """Whether ``node`` is left out of cluster health: not schedulable (cordoned, being removed
    by an autoscaler, or not Ready), its device plugin paused by the MIG manager
    (:data:`MIG_CHANGE`), or every GPU of it a placeholder (:attr:`NodeState.unscraped`: a node
    that just joined, before its dcgm-exporter is scraped, is not yet judged; the extender judges
    it as unknown too)."""
    return not node.schedulable or node.device_plugin == MIG_CHANGE or node.unscraped


def snapshot_signals(snapshot: FleetSnapshot) -> dict[str, ClusterSignals]:
    """GPU utilisation, VRAM pressure and CPU use per cluster from a telemetry snapshot.

    A reading that is NaN or infinite counts as missing (a NaN sample, which dcgm-exporter and
    Prometheus pass through, would otherwise make the sum NaN, and ``min(1.0, nan)`` is 1.0: the
    whole cluster saturated), as :func:`~fleetmind.serving.telemetry.base.free_milli_from_memory`
    treats it.

    A node that is not schedulable (cordoned, or its ``Ready`` condition ``False``/``Unknown``),
    whose GPUs the MIG manager is reconfiguring, or none of whose GPUs has a DCGM reading yet
    (:func:`takes_no_work`), counts in no signal:
    its cluster is still listed, with ``None`` where no other node reads.
    """
    acc: dict[str, dict[str, float]] = {}
    for n in snapshot.nodes:
        a = acc.setdefault(n.cluster, dict.fromkeys(
            ("util", "util_n", "used", "total", "cpu_used", "cpu_alloc"), 0.0))  # fmt: skip
        if takes_no_work(n):  # draining, a MIG change, or not yet scraped: no judged work
            continue
        for g in n.gpus:
            total = _finite(g.mem_total_mib)
            if not g.healthy:
                a["util"] += 100.0
                a["util_n"] += 1
                if total:
                    a["used"] += total
                    a["total"] += total
                continue
            util = _finite(g.util_pct)
            if util is not None:
                a["util"] += util
                a["util_n"] += 1
            used = _finite(g.mem_used_mib)
            if total and used is not None:
                a["used"] += used
                a["total"] += total
        if n.cpu_milli:
            a["cpu_used"] += n.cpu_milli - n.cpu_milli_free
            a["cpu_alloc"] += n.cpu_milli
    out = {}
    for c, a in acc.items():
        out[c] = ClusterSignals(
            cluster=c,
            gpu_util=min(1.0, a["util"] / a["util_n"] / 100.0) if a["util_n"] else None,
            vram_pressure=min(1.0, a["used"] / a["total"]) if a["total"] else None,
            cpu_use=a["cpu_used"] / a["cpu_alloc"] if a["cpu_alloc"] else None,
        )
    return out


def _cv(values: list[float]) -> float | None:
    if len(values) < 2:
        return None
    mean = sum(values) / len(values)
    if mean <= 0:
        return None
    var = sum((v - mean) ** 2 for v in values) / len(values)
    return math.sqrt(var) / mean


class HealthModel:
    """Health with online-adapted weights (thread-safe; one per app)."""

    def __init__(self, latency_slo_s: float = 1.0) -> None:
        self.latency_slo_s = latency_slo_s
        self.load = [0.0, 0.0, 0.0]
        self._lock = threading.Lock()
        self.last: FleetHealth | None = None
        self.latency_missing_logged = False  # said once that the histogram answered nothing

    def weights(self) -> dict[str, float]:
        raw = [w0 * (1.0 + m) for w0, m in zip(INITIAL_WEIGHTS, self.load, strict=True)]
        total = sum(raw)
        return {s: r / total for s, r in zip(SIGNALS, raw, strict=True)}

    def stresses(self, c: ClusterSignals) -> dict[str, float]:
        """The normalised signals of a cluster that it has (0..1, higher is worse)."""
        out = {}
        if c.gpu_util is not None:
            out["gpu_util"] = max(0.0, min(1.0, c.gpu_util))
        if c.vram_pressure is not None:
            out["vram_pressure"] = max(0.0, min(1.0, c.vram_pressure))
        if c.p99_latency_s is not None and self.latency_slo_s > 0:
            out["latency"] = max(0.0, min(1.0, c.p99_latency_s / self.latency_slo_s))
        return out

    def update(self, clusters: list[ClusterSignals]) -> FleetHealth:
        """Score ``clusters`` with the current weights, then adapt the weights to this load."""
        with self._lock:
            w = self.weights()
            per = [self.stresses(c) for c in clusters]
            for c, s in zip(clusters, per, strict=True):
                tot = sum(w[k] for k in s)
                c.health = 1.0 - sum(w[k] * v for k, v in s.items()) / tot if tot else None
            for i, name in enumerate(SIGNALS):
                vals = [s[name] for s in per if name in s]
                if vals:
                    mean = sum(vals) / len(vals)
                    self.load[i] = (1 - ADAPT_RATE) * self.load[i] + ADAPT_RATE * mean
            parts = {}
            for name in ("request_rate", "p95_latency_s", "cpu_use"):
                cv = _cv([getattr(c, name) for c in clusters if getattr(c, name) is not None])
                if cv is not None:
                    parts[name] = cv
            skew = sum(parts.values()) / len(parts) if parts else 0.0
            self.last = FleetHealth(clusters, w, skew, parts)
            return self.last


LATENCY_FORMS = ("classic", "native")
"""How a latency histogram can be stored in Prometheus: ``classic`` (``<h>_bucket``/``<h>_count``
series, one per bucket) or ``native`` (one series ``<h>`` of native histogram samples: scraped with
``scrape_native_histograms: true``, Prometheus 3.8 and later, or written as OTLP exponential
histograms). A native histogram has no ``_bucket`` or ``_count`` series, so each form needs its own
expression (:func:`latency_queries` joins the two with ``or``)."""

_UNKNOWN_HISTOGRAM_COUNT = re.compile(
    r"(?:unknown|unsupported) func\w*\W+(?:with name\W+)?histogram_count\b"
)
"""A backend's refusal of ``histogram_count``: Prometheus before 2.40 answers 400 ``unknown
function with name "histogram_count"`` (``promql/parser/generated_parser.y``); VictoriaMetrics,
whose MetricsQL has no such function, answers 422 ``error when executing query=...: unsupported
function "histogram_count"`` (github.com/VictoriaMetrics/metricsql ``parser.go``,
``checkSupportedFunctions``; its functions listed in ``transform.go``)."""

_NO_HISTOGRAM_COUNT: weakref.WeakKeyDictionary[Any, bool] = weakref.WeakKeyDictionary()
"""The sources (a ``query`` callable's object) that refused ``histogram_count``: their later
polls send the classic rate query at once."""


def form_queries(histogram: str, form: str) -> dict[str, str]:
    """PromQL for per-cluster P99, P95 latency (s) and request rate (1/s) from ``histogram``
    stored in ``form`` only (one of :data:`LATENCY_FORMS`); the replicas of an HA Prometheus pair
    (:data:`REPLICA_LABELS`) count once.

    Classic: ``max without`` the replica label over the bucket and count rates. Native:
    ``avg without`` it, as ``max`` ignores native histogram samples while ``sum`` and ``avg``
    combine them (prometheus/prometheus ``docs/querying/operators.md``, aggregation operators);
    the average of a pair's identical histograms is that histogram. ``histogram_quantile`` and
    ``histogram_count`` turn the native samples into plain floats.
    """
    if form == "native":
        native = f"sum by (cluster) (avg without ({REPLICA_LABELS}) (rate({histogram}[5m])))"
        return {
            "p99_latency_s": f"histogram_quantile(0.99, {native})",
            "p95_latency_s": f"histogram_quantile(0.95, {native})",
            "request_rate": f"histogram_count({native})",
        }
    if form != "classic":
        raise ValueError(f"latency form {form!r} is none of {', '.join(LATENCY_FORMS)}")
    one = f"max without ({REPLICA_LABELS})"
    buckets = f"sum by (cluster, le) ({one} (rate({histogram}_bucket[5m])))"
    return {
        "p99_latency_s": f"histogram_quantile(0.99, {buckets})",
        "p95_latency_s": f"histogram_quantile(0.95, {buckets})",
        "request_rate": f"sum by (cluster) ({one} (rate({histogram}_count[5m])))",
    }


def latency_queries(histogram: str) -> dict[str, str]:
    """The three health queries (``{ClusterSignals attribute: PromQL}``): each joins the classic
    form's expression and the native form's (:func:`form_queries`) with ``or``. Both end in one
    sample per ``cluster`` label set, and ``or`` keeps a left sample whatever its value, so the
    classic side is filtered first: a quantile only where it is a number (``>= 0``; an idle classic
    histogram's quantile is NaN), a rate only where it is above 0, with the classic rate once more
    at the end so that an idle classic-only cluster still answers 0. A cluster answers in the form
    that has its traffic, clusters mid-way through a move to native histograms each answer whatever
    the others store, and a poll costs three queries. ``histogram_count`` needs Prometheus 2.40 or
    later (or Thanos, Mimir); a backend that refuses it (an older Prometheus, VictoriaMetrics) gets
    the classic rate query instead (:func:`add_latency`)."""
    classic, native = form_queries(histogram, "classic"), form_queries(histogram, "native")
    out = {k: f"({classic[k]} >= 0) or {native[k]}" for k in ("p99_latency_s", "p95_latency_s")}
    rate = classic["request_rate"]
    out["request_rate"] = f"({rate} > 0) or {native['request_rate']} or {rate}"
    return out


def fleet_health(
    model: HealthModel,
    snapshot: FleetSnapshot,
    query: Any = None,
    histogram: str = "http_server_request_duration_seconds",
    default_cluster: str = "local",
) -> FleetHealth:
    """Signals from ``snapshot`` (and, when ``query`` is given, latency and rate from Prometheus:
    ``query(promql) -> [(name, labels, value)]``), scored by ``model``. When every latency query
    answers with no series (none failing), one warning says so, until one answers again."""
    sig = snapshot_signals(snapshot)
    if query is not None:
        answered, failed = _ask_latency(sig, query, histogram, default_cluster)
        if answered:
            model.latency_missing_logged = False
        elif not failed and not model.latency_missing_logged:  # said once, until one answers
            model.latency_missing_logged = True
            log.warning(
                "health: %s answers as neither a classic (%s_bucket, %s_count) nor a native "
                "histogram; cluster health goes without P99 latency and skew without P95 latency "
                "and request rate (FLEETMIND_HEALTH_LATENCY_HISTOGRAM)",
                histogram, histogram, histogram,
            )  # fmt: skip
    return model.update([sig[c] for c in sorted(sig)])


def add_latency(
    sig: dict[str, ClusterSignals],
    query: Any,
    histogram: str,
    default_cluster: str = "local",
) -> bool:
    """Set P99, P95 latency (s) and request rate (1/s) per cluster in ``sig`` from Prometheus;
    return whether any query answered with a series.

    The three :func:`latency_queries` run concurrently (each bounded by the source's timeout, so a
    slow Prometheus costs one timeout, not three); one that fails is left out (latency is
    optional: no histogram, a Prometheus hiccup). When the backend refuses ``histogram_count``
    (Prometheus before 2.40: 400 ``unknown function``; VictoriaMetrics: 422 ``unsupported
    function``), the classic rate query runs instead, and that source's later polls send it at once
    (three queries a poll).
    """
    return _ask_latency(sig, query, histogram, default_cluster)[0]


def _ask_latency(
    sig: dict[str, ClusterSignals], query: Any, histogram: str, default_cluster: str
) -> tuple[bool, bool]:
    """:func:`add_latency`'s work: whether any query answered with a series, whether one failed."""
    from concurrent.futures import ThreadPoolExecutor

    failed: list[BaseException] = []
    fallback = form_queries(histogram, "classic")
    source = getattr(query, "__self__", query)  # a bound method: its source object

    def ask(item: tuple[str, str]) -> list[Any]:
        attr, promql = item
        try:
            return list(query(promql))
        except Exception as err:
            if not _UNKNOWN_HISTOGRAM_COUNT.search(str(err)):
                failed.append(err)
                return []
        with contextlib.suppress(TypeError):  # not weakly referenceable: asked again next poll
            _NO_HISTOGRAM_COUNT[source] = True
        try:  # a backend without histogram_count: the classic form alone
            return list(query(fallback[attr]))
        except Exception as err:
            failed.append(err)
            return []

    queries = latency_queries(histogram)
    with contextlib.suppress(TypeError):
        if _NO_HISTOGRAM_COUNT.get(source):
            queries["request_rate"] = fallback["request_rate"]
    with ThreadPoolExecutor(len(queries), thread_name_prefix="fleetmind-health") as pool:
        answers = list(pool.map(ask, queries.items()))
    _set_latency(sig, dict(zip(queries, answers, strict=True)), default_cluster)
    return any(answers), bool(failed)


def _set_latency(
    sig: dict[str, ClusterSignals], answers: dict[str, list[Any]], default_cluster: str
) -> None:
    """Set each ``ClusterSignals`` attribute of ``answers`` from its finite samples."""
    for attr, samples in answers.items():
        for _, labels, value in samples:
            if math.isnan(value) or math.isinf(value):
                continue
            c = labels.get("cluster") or default_cluster
            setattr(sig.setdefault(c, ClusterSignals(c)), attr, float(value))


_BUILD_LOCK = threading.RLock()
_COLLECTORS: weakref.WeakKeyDictionary[Any, HealthCollector] = weakref.WeakKeyDictionary()


class HealthCollector:
    """``fleetmind_cluster_health{cluster}`` and ``fleetmind_fleet_skew`` of the latest refresh.

    A custom collector that mirrors :attr:`HealthModel.last` at each scrape: a cluster gone from the
    telemetry, or whose health became unknown, has no series any more (client_python,
    github.com/prometheus/client_python/issues/277: state mirrored from elsewhere is exported by a
    collector, not by children that are never removed). Nothing is exported before the first
    refresh.
    """

    def __init__(self) -> None:
        self.model: HealthModel | None = None

    def collect(self) -> Iterator[Any]:
        """The two gauge families of the latest refresh (none before the first)."""
        from prometheus_client.core import GaugeMetricFamily

        last = self.model.last if self.model is not None else None
        if last is None:
            return
        health = GaugeMetricFamily(
            "fleetmind_cluster_health", "cluster health, 1 idle and healthy .. 0 saturated",
            labels=["cluster"],
        )  # fmt: skip
        for c in last.clusters:
            if c.health is not None:
                health.add_metric([c.cluster], c.health)
        yield health
        yield GaugeMetricFamily(
            "fleetmind_fleet_skew",
            "mean CV of request rate, P95 latency and CPU use across clusters",
            value=last.skew,
        )


class HealthService:
    """The app's health model, refreshed once per telemetry snapshot, exported by a
    :class:`HealthCollector` on ``registry`` (with several workers, each worker's own)."""

    def __init__(self, settings: Any, registry: Any) -> None:
        self.settings = settings
        self.model = HealthModel(settings.health_latency_slo_s)
        self._done: tuple[FleetSnapshot, FleetHealth] | None = None  # the last snapshot scored
        self._refresh = threading.Lock()
        with _BUILD_LOCK:  # one collector per registry (an app restarted keeps its metrics)
            collector = _COLLECTORS.get(registry)
            if collector is None:
                collector = _COLLECTORS[registry] = HealthCollector()
                registry.register(collector)
            collector.model = self.model  # the latest service's model is the one exported
        self.collector = collector

    def current(self, telemetry: Any) -> FleetHealth:
        """Health for the telemetry's current snapshot, computed once per snapshot: callers that
        ask while it is being computed (the latency queries take up to the telemetry timeout)
        wait for that computation and share it."""
        snap = telemetry.snapshot()
        done = self._done
        if done is not None and done[0] is snap:
            return done[1]
        with self._refresh:
            done = self._done
            if done is not None and done[0] is snap:
                return done[1]
            query = getattr(telemetry, "query", None)
            out = fleet_health(
                self.model, snap, query, self.settings.health_latency_histogram,
                self.settings.telemetry_cluster,
            )  # fmt: skip
            self._done = (snap, out)
            return out


def health_service(services: Services) -> HealthService:
    """The app's :class:`HealthService` (built once, on first use, whatever the concurrency)."""
    hs = services.health
    if hs is None:
        with _BUILD_LOCK:
            hs = services.health
            if hs is None:
                hs = services.health = HealthService(
                    services.settings, services.metrics.process_registry
                )
    return hs


def healthy_nodes(
    services: Services, telemetry: Any, snapshot: FleetSnapshot
) -> set[tuple[str, str]] | None:
    """``(cluster, node name)`` of the nodes in clusters at or above ``FLEETMIND_HEALTH_MIN``, the
    placers' ``allowed`` (pairs: a node name may recur in another cluster); None when every
    cluster qualifies (or there is one cluster, or health is unknown): no restriction."""
    clusters = {n.cluster for n in snapshot.nodes}
    if len(clusters) < 2:
        return None
    health = health_service(services).current(telemetry).by_cluster()
    floor = services.settings.health_min
    low = {c for c in clusters if c in health and (health[c].health or 0.0) < floor
           and health[c].health is not None}  # fmt: skip
    if not low:
        return None
    return {(n.cluster, n.name) for n in snapshot.nodes if n.cluster not in low}


# ------------------------------------------------------------------ cluster names: graph, telemetry, alerts
UNMAPPED_REASONS = ("no_cluster", "unknown_cluster", "no_match")
"""Why an alert maps to no graph node (:func:`unmapped_reason`): it has no ``cluster`` label while
the graph holds several clusters; its ``cluster`` is none of the graph's; or its labels match no
node of its cluster."""

UNMAPPED_WINDOW = 100
"""``/readyz`` reads the newest this many stored alerts for :func:`unmapped_alerts_warning`."""

UNMAPPED_MIN_ALERTS = 5
"""Fewer grouped alerts than this among them say too little to warn about."""

_NAMES_SHOWN = 5  # cluster names a warning lists (then "and N more")
_NAME_CHARS = 63  # a Kubernetes label value's limit; a longer value is cut


def telemetry_cluster_alias(graph_names: Set[str], telemetry_names: Set[str]) -> dict[str, str]:
    """Graph cluster -> telemetry cluster, when the graph and the telemetry each hold exactly one
    cluster and their names differ (else empty): they are the same fleet.

    The rule alerts follow too (:meth:`fleetmind.data.graph.DependencyGraph.alert_subject`: a
    missing ``cluster`` is the graph's one cluster). kube-prometheus-stack's series carry no
    ``cluster`` label unless ``prometheus.prometheusSpec.externalLabels`` sets one, so telemetry
    names their cluster ``FLEETMIND_TELEMETRY_CLUSTER`` (default ``local``) while the graph was
    built with ``fleetmind graph build --cluster <name>``.
    """
    if len(graph_names) == 1 and len(telemetry_names) == 1 and graph_names != telemetry_names:
        return {next(iter(graph_names)): next(iter(telemetry_names))}
    return {}


def _names(values: Any) -> str:
    """Up to :data:`_NAMES_SHOWN` sorted names, each cut to :data:`_NAME_CHARS` characters."""
    items = sorted(str(v) for v in values)
    shown = ", ".join(v[:_NAME_CHARS] for v in items[:_NAMES_SHOWN])
    more = len(items) - _NAMES_SHOWN
    return shown + (f" and {more} more" if more > 0 else "") if items else "none"


def cluster_mismatch_warning(graph: Any, snapshot: FleetSnapshot | None) -> str | None:
    """One ``/readyz`` line when the telemetry's cluster names and the graph's share none (and
    :func:`telemetry_cluster_alias` does not pair them), else ``None``: the fleet page then marks
    no GPU or host of an open incident, as it finds the alerting nodes by their cluster."""
    if snapshot is None or not snapshot.nodes:
        return None
    g, t = graph.cluster_names(), {str(n.cluster) for n in snapshot.nodes}
    if not g or g & t or telemetry_cluster_alias(g, t):
        return None
    return (
        f"telemetry: its clusters ({_names(t)}) are none of the graph's ({_names(g)}), so the "
        "fleet page marks no GPU or host of an open incident; set FLEETMIND_TELEMETRY_CLUSTER to "
        "the graph's cluster name (series without a `cluster` label belong to it), or set the "
        "`cluster` external label in Prometheus (docs/serving/cluster.md)"
    )


def unmapped_reason(graph: Any, labels: Any) -> str:
    """Why an alert with ``labels`` maps to no node of ``graph`` (one of :data:`UNMAPPED_REASONS`);
    only meaningful for an alert that maps to none. An empty ``cluster`` value is no label
    (Prometheus, "Data model")."""
    clusters = graph.cluster_names()
    cluster = str(labels.get("cluster") or "")
    if not cluster:
        return "no_cluster" if len(clusters) > 1 else "no_match"
    return "unknown_cluster" if clusters and cluster not in clusters else "no_match"


def unmapped_alerts_warning(
    graph: Any, rows: Any, min_alerts: int = UNMAPPED_MIN_ALERTS
) -> str | None:
    """One ``/readyz`` line when most of the grouped alerts among ``rows`` (stored alerts, as
    :meth:`fleetmind.serving.db.Database.list_alerts` returns them) matched no graph node, else
    ``None``.

    Grouped alerts are those in an incident (``incident_id`` set); heartbeats and ``severity=none``
    helpers never join one. Each unmapped alert opened or joined an incident with no ranked cause.
    The line names the ``cluster`` label values those alerts carried (``(none)`` for none) beside
    the graph's clusters.
    """
    grouped = [r for r in rows if r.get("incident_id") is not None]
    unmapped = [r for r in grouped if not r.get("node")]
    if len(grouped) < min_alerts or 2 * len(unmapped) <= len(grouped):
        return None
    seen = {str((r.get("labels") or {}).get("cluster") or "(none)") for r in unmapped}
    return (
        f"alerts: {len(unmapped)} of the last {len(grouped)} grouped alerts matched no graph node "
        f"(their cluster labels: {_names(seen)}; the graph's clusters: "
        f"{_names(graph.cluster_names())}), so their incidents have no ranked cause; give alerts "
        "the graph's `cluster` label (kube-prometheus-stack: "
        "prometheus.prometheusSpec.externalLabels) or build the graph with those cluster names"
    )
