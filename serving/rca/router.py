"""``POST /api/v1/rca``: synchronous ranking of a given alert set."""

from __future__ import annotations

import time

from fastapi import APIRouter, Request, Response
from starlette.concurrency import run_in_threadpool

from fleetmind.data.graph import DependencyGraph
from fleetmind.serving.deps import GraphsDep, MetricsDep, RCABatcherDep, RCAPoolDep, RegistryDep
from fleetmind.serving.metrics import Metrics
from fleetmind.serving.rca.pool import (
    Failed,
    PoolOutcome,
    PoolUnavailable,
    Ranked,
    RankingPool,
    Unavailable,
)
from fleetmind.serving.rca.request import parse_for, response_json
from fleetmind.serving.registry import LoadedModel
from fleetmind.serving.schemas import (
    RCAResponse,
)

router = APIRouter(prefix="/api/v1/rca", tags=["rca"])

REQUEST_BODY = {
    "required": True,
    "content": {"application/json": {"schema": {"$ref": "#/components/schemas/RCARequest"}}},
}
"""The OpenAPI request body of ``POST /api/v1/rca`` (the handler parses the body itself)."""

JSON = "application/json"
INLINE_PARSE_BYTES = 256 * 1024
"""Bodies up to this size (bytes) are parsed on the event loop (well under a millisecond per KiB);
larger ones, which take seconds near the 16 MiB body limit, in a worker thread."""
PATH = "/api/v1/rca"
POOL_OUTCOME = "fleetmind.rca_pool_outcome"
"""Scope key: what the ranking processes answered when
:class:`fleetmind.serving.rca.fast_lane.FastLane` hands a request on."""


@router.post(
    "",
    response_model=RCAResponse,
    summary="Rank root causes of an alert set",
    openapi_extra={"requestBody": REQUEST_BODY},
)
async def rank(
    request: Request,
    registry: RegistryDep,
    graphs: GraphsDep,
    metrics: MetricsDep,
    batcher: RCABatcherDep,
    pool: RCAPoolDep,
) -> Response:
    """Rank root-cause candidates on the served graph (or on ``graph`` when given).

    The ranking runs on the process's RCA thread (:mod:`fleetmind.serving.rca.batcher`), batched with the
    requests that arrive meanwhile; the event loop stays free for other requests. The body is an
    ``RCARequest`` (see the OpenAPI spec); the answer an ``RCAResponse``, serialised here.
    """
    model = registry.current.rca
    body = await request.body()
    outcome = request.scope.get(POOL_OUTCOME)  # FastLane asked the ranking processes already
    if outcome is None and pool is not None:  # a ranking process parses, ranks and answers
        outcome = await rank_in_processes(pool, model, graphs.graph, body, metrics)
        if isinstance(outcome, Ranked):
            return Response(outcome.body, media_type=JSON)
    if isinstance(outcome, Failed):
        raise outcome.error
    # no ranking process, none could answer (Unavailable), or Invalid (the parse below raises
    # RCARequest's 422): rank here
    graph = graphs.graph  # read once: the alert columns are valid on this graph object only
    if len(body) > INLINE_PARSE_BYTES:  # a large body (a graph, thousands of alerts) takes
        # seconds to validate: in a worker thread the event loop answers probes and webhooks
        # meanwhile (the parser lets go of the GIL between objects)
        req, alerts = await run_in_threadpool(parse_for, model.impl, graph, body)
    else:
        req, alerts = parse_for(model.impl, graph, body)
    if req.graph is not None:  # validating a large graph is CPU work: keep it off the event loop
        graph = await run_in_threadpool(DependencyGraph.from_model, req.graph)
    start = time.perf_counter()
    result = await batcher.rank(model.impl, graph, alerts, req.top_k)
    metrics.rca_latency.labels(model.method).observe(time.perf_counter() - start)
    return Response(response_json(model, graph, alerts, req.top_k, result), media_type=JSON)


async def rank_in_processes(
    pool: RankingPool, model: LoadedModel, graph: DependencyGraph, body: bytes, metrics: Metrics
) -> PoolOutcome:
    """Have the ranking processes answer the RCA request ``body`` (its raw bytes) on ``model`` and
    ``graph``, as the route and its fast lane both do.

    A :class:`Ranked` answer is timed into ``rca_latency`` under the model's method (seconds, from
    the hand-over to the answer); :class:`Unavailable` when no process could take the request.
    """
    start = time.perf_counter()
    try:
        outcome = await pool.rank(model, graph, body)
    except PoolUnavailable:  # no process could answer: the caller ranks in-process
        return Unavailable()
    if isinstance(outcome, Ranked):
        metrics.rca_latency.labels(model.method).observe(time.perf_counter() - start)
    return outcome
