"""``POST /api/v1/rca``: synchronous ranking of a given alert set."""

from __future__ import annotations

import threading
import time

from fastapi import APIRouter

from data.graph import DependencyGraph
from serving.alertmap import node_for_alert
from serving.deps import GraphsDep, MetricsDep, RegistryDep
from serving.schemas import CauseOut, ErrorOut, RCARequest, RCAResponse

router = APIRouter(prefix="/api/v1/rca", tags=["rca"])
_RANK_LOCK = threading.Lock()


@router.post(
    "",
    response_model=RCAResponse,
    responses={422: {"model": ErrorOut}},
    summary="Rank root causes of an alert set",
)
def rank(
    req: RCARequest, registry: RegistryDep, graphs: GraphsDep, metrics: MetricsDep
) -> RCAResponse:
    """Rank root-cause candidates on the served graph (or on ``graph`` when given)."""
    graph = (
        DependencyGraph.from_json(req.graph.model_dump()) if req.graph is not None else graphs.graph
    )
    model = registry.current.rca
    alerts = []
    for a in req.alerts:
        d = {
            "status": a.status,
            "labels": a.labels,
            "annotations": a.annotations,
            "startsAt": a.startsAt.isoformat() if a.startsAt else None,
            "fingerprint": a.fingerprint,
        }
        alerts.append(d)
    start = time.perf_counter()
    # One ranking at a time per process: the analyzers are CPU-bound Python (GIL), so parallel
    # threads only add switching; serialising keeps throughput flat under concurrency.
    with _RANK_LOCK:
        result = model.impl.find_root_causes(graph, alerts, req.top_k)
    metrics.rca_latency.labels(model.method).observe(time.perf_counter() - start)
    mapped = sum(1 for a in alerts if node_for_alert(graph, a["labels"]) is not None)
    return RCAResponse(
        causes=[CauseOut(**c.to_json()) for c in result.causes[: req.top_k]],
        method=result.method or model.method,
        model_version=result.model_version or model.version,
        graph=graph.name,
        mapped_alerts=mapped,
        fallback_reason=model.fallback_reason,
    )
