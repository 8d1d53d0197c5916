"""Prometheus metrics of the service (prometheus-client), on a per-app registry.

| metric | type | labels |
| --- | --- | --- |
| ``fleetmind_http_request_duration_seconds`` | histogram | ``method``, ``route`` (template), ``status`` |
| ``fleetmind_alerts_ingested_total`` | counter | ``status`` (firing, resolved) |
| ``fleetmind_alerts_truncated_total`` | counter | - (alerts Alertmanager reported left out, ``truncatedAlerts``) |
| ``fleetmind_alerts_rejected_total`` | counter | - (invalid alerts left out of an otherwise stored webhook) |
| ``fleetmind_open_incidents`` | gauge | - |
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
"""

from __future__ import annotations

import time
from typing import Any

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)

LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0)
MODEL_KINDS = ("rca", "placement")
"""The ``kind`` label of the model metrics (:class:`fleetmind.serving.registry.ModelRegistry`'s)."""
LOAD_RESULTS = ("success", "failure")
"""The ``result`` label of ``fleetmind_model_loads_total``."""


class Metrics:
    """The service's collectors, registered on their own :class:`CollectorRegistry`."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.request_latency = Histogram(
            "fleetmind_http_request_duration_seconds",
            "HTTP request latency by route template",
            ["method", "route", "status"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.alerts_ingested = Counter(
            "fleetmind_alerts_ingested", "alerts durably stored", ["status"], registry=r
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
        self.open_incidents = Gauge("fleetmind_open_incidents", "incidents now open", registry=r)
        self.alerts_grouped = Counter(
            "fleetmind_alerts_grouped", "pending alerts grouped into incidents", registry=r
        )
        self.grouping_lag = Gauge(
            "fleetmind_incident_grouping_lag_seconds",
            "seconds since the oldest ungrouped alert (or status change) was stored, read at every "
            "loop of the incident worker whether or not it succeeds (0 when none is pending)",
            registry=r,
        )
        self.model_info = Gauge(
            "fleetmind_model_info",
            "served models (value 1)",
            ["kind", "method", "version", "fallback"],
            registry=r,
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

    def on_model_load(self, kind: str, ok: bool) -> None:
        self.model_loads.labels(kind, "success" if ok else "failure").inc()

    def set_models(self, models: Any) -> None:
        """Expose the served model set (a :class:`fleetmind.serving.registry.ModelSet`)."""
        self.model_info.clear()
        for m in (models.rca, models.placement):
            self.model_info.labels(
                m.kind, m.method, m.version or "", "true" if m.fallback_reason else "false"
            ).set(1)

    def render(self) -> tuple[bytes, str]:
        return generate_latest(self.registry), CONTENT_TYPE_LATEST


HTTP_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})
"""Methods kept as the ``method`` label; any other verb is counted as ``other``."""


class MetricsMiddleware:
    """Pure ASGI middleware timing every HTTP request by route template."""

    def __init__(self, app: Any, metrics: Metrics) -> None:
        self.app = app
        self.metrics = metrics

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
            template = getattr(route, "path", None) or "unmatched"
            method = scope.get("method", "")
            if method not in HTTP_METHODS:  # a client-chosen verb must not create series
                method = "other"
            self.metrics.request_latency.labels(method, template, str(status["code"])).observe(
                time.perf_counter() - start
            )
