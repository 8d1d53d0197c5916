"""``POST /api/v1/placements``: where a job should run, on the live fleet state."""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Callable

from fastapi import APIRouter, HTTPException, Request

from fleetmind.data.errors import NotAvailableError
from fleetmind.serving.deps import MetricsDep, RegistryDep, ServicesDep, TelemetryDep, has_scope
from fleetmind.serving.health import healthy_nodes
from fleetmind.serving.origin_guard import Utf8JsonRoute
from fleetmind.serving.scheduler.placement import Option, Reservations, why_no_fit
from fleetmind.serving.scheduler.reservations import DbReservations, job_key
from fleetmind.serving.schemas import ErrorOut, JobSpec, PlacementOption, PlacementOut
from fleetmind.serving.telemetry.base import FleetSnapshot, NodeState

router = APIRouter(prefix="/api/v1/placements", tags=["placements"], route_class=Utf8JsonRoute)

HOLD_TRIES = 5
"""Decisions per ``reserve=true`` request at most while other workers or replicas keep taking the
chosen capacity first (as the extender's ``_HOLD_TRIES``)."""


def place_and_hold(
    res: Reservations,
    job: JobSpec,
    snapshot: FleetSnapshot,
    place: Callable[[Reservations], list[Option]],
) -> list[Option]:
    """Decide ``job``'s placement with ``place`` and hold its first option (``reserve=true``).

    Database holds are checked as the extender's are (:func:`fleetmind.serving.scheduler.router._decide`):
    the decision reads a fresh view of the holds (the job's own hold left out), and
    :meth:`DbReservations.hold` re-reads the chosen node inside its write transaction; when another
    worker or replica held capacity there since that view and the option no longer fits, nothing
    is held and the job is placed again on a new view. ``Services.place_lock`` serialises this
    within one process only; without the re-check, ``--workers 2`` booked one node twice.

    Returns:
        the options (empty: nothing can hold the job; nothing held).

    Raises:
        NotAvailableError: the chosen capacity was taken :data:`HOLD_TRIES` times in a row (503).
    """
    if not isinstance(res, DbReservations):
        options = place(res)
        if options:
            res.book(options[0], job)
        return options
    key = job_key(job.job_id or uuid.uuid4().hex)
    for _ in range(HOLD_TRIES):
        seen = res.view(snapshot, exclude=key)
        options = place(seen)
        if not options or res.hold(key, options[0], job, snapshot=snapshot, seen=seen):
            return options
    raise NotAvailableError(
        f"the capacity chosen for the job was taken by other placements {HOLD_TRIES} times in a "
        "row; retry"
    )


SHOWN_NODES = 5
"""Nodes a 409 answer names at most when it says which were left out as cordoned or not Ready."""


def schedulable_part(snapshot: FleetSnapshot) -> tuple[FleetSnapshot, list[NodeState]]:
    """``snapshot`` without the nodes new work may not go to (cordoned, or ``Ready`` False or
    Unknown: ``NodeState.schedulable``), and those nodes. kube-scheduler would not bind a pod to
    them (a cordoned node) or the pod would not start (a node not Ready), so a placement there is
    no placement. Sources that cannot tell (no kube-state-metrics) leave every node in.

    The answer for the last snapshot is kept, so one snapshot always gives the same node list: the
    placer keeps its model of the fleet per node list (``id(snapshot.nodes)``), and a new list on
    every request rebuilt it each time (at 5,000 nodes, ~1 ms a placement became 55-100 ms).
    """
    global _LAST_PART
    last = _LAST_PART
    if last is not None and last[0] is snapshot and last[1] is snapshot.nodes:
        return last[2], last[3]
    out = [n for n in snapshot.nodes if not n.schedulable]
    kept = [n for n in snapshot.nodes if n.schedulable] if out else None
    answer = (dataclasses.replace(snapshot, nodes=kept), out) if out else (snapshot, [])
    _LAST_PART = (snapshot, snapshot.nodes, *answer)  # one tuple: read whole by other threads
    return answer


_LAST_PART: tuple[FleetSnapshot, list[NodeState], FleetSnapshot, list[NodeState]] | None = None
"""The last (snapshot, its node list, answer...) of :func:`schedulable_part`; it holds the snapshot
so that its ``id`` is not reused while kept."""


def left_out_text(excluded: list[NodeState], job: JobSpec, candidates: int) -> str:
    """What the 409 answer says of the ``excluded`` nodes (cordoned or not Ready) in ``job``'s
    cluster, where ``candidates`` nodes there were left (0: every node was excluded); ``""`` when
    none was excluded there."""
    mine = [n for n in excluded if job.cluster is None or n.cluster == job.cluster]
    if not mine:
        return ""
    shown = ", ".join(f"{n.name} ({n.unschedulable_reason})" for n in mine[:SHOWN_NODES])
    if len(mine) > SHOWN_NODES:
        shown += f" and {len(mine) - SHOWN_NODES} more"
    if candidates == 0:
        return f"every node is cordoned, not Ready or being removed ({len(mine)}: {shown})"
    return f"{len(mine)} node(s) cordoned, not Ready or being removed were left out: {shown}"


@router.post(
    "",
    response_model=PlacementOut,
    responses={403: {"model": ErrorOut}, 409: {"model": ErrorOut}, 503: {"model": ErrorOut}},
    summary="Place a job on the fleet",
)
def place(
    request: Request,
    job: JobSpec,
    registry: RegistryDep,
    telemetry: TelemetryDep,
    services: ServicesDep,
    metrics: MetricsDep,
) -> PlacementOut:
    """Choose a cluster, node and GPUs for ``job`` with the served policy (PPO, or the best heuristic).

    ``reserve=true`` books the GPUs so that the following placements see them as used; it holds
    capacity, so it needs the ``schedule`` scope (403 with a read-only token). 409 when no node can
    hold the job; 503 when other workers or replicas kept taking the chosen capacity first
    (:func:`place_and_hold`). Cordoned and not-Ready nodes are never chosen
    (:func:`schedulable_part`); the 409 answer names them.
    """
    if job.reserve and not has_scope(request, "schedule"):
        raise HTTPException(403, "reserve=true holds capacity: it needs the 'schedule' scope")
    if job.num_gpu > 1 and job.gpu_milli < 1000:
        raise HTTPException(422, "a multi-GPU job takes whole GPUs: gpu_milli must be 1000")
    model = registry.current.placement
    snapshot = telemetry.snapshot()
    usable, excluded = schedulable_part(snapshot)
    k = 1 + job.alternatives
    allowed = healthy_nodes(services, telemetry, snapshot) if job.cluster is None else None

    def held() -> Reservations:
        # A job that names itself does not see its own hold: a retried reserve=true gets the
        # same GPUs back (the new hold replaces the old), not the next free ones.
        # Holds are read against the snapshot in use (a hold whose pod it already shows ends),
        # as the extender reads them: else a bound pod counted twice, its usage and its hold.
        res = services.reservations
        if isinstance(res, DbReservations):
            return res.view(snapshot, exclude=job_key(job.job_id) if job.job_id else None)
        return res

    def place(res: Reservations) -> list[Option]:
        # healthy clusters first (serving/health.py); anywhere when none of them can hold the job;
        # never a cordoned or not-Ready node (holds are still read against the whole snapshot)
        if not usable.nodes:
            return []
        opts = model.impl.place(usable, job, res, k, allowed=allowed)
        return opts or (model.impl.place(usable, job, res, k) if allowed else [])

    if job.reserve:
        with services.place_lock:
            options = place_and_hold(services.reservations, job, snapshot, place)
    else:
        options = place(held())
    if not options:
        metrics.placements.labels(model.method, "infeasible", "placements").inc()
        where = f" in cluster {job.cluster!r}" if job.cluster else ""
        candidates = sum(job.cluster is None or n.cluster == job.cluster for n in usable.nodes)
        left_out = left_out_text(excluded, job, candidates)
        why = left_out if left_out and not candidates else why_no_fit(usable, job, held())
        raise HTTPException(
            409,
            f"no node{where} can hold the job ({job.num_gpu} GPU x {job.gpu_milli} milli, "
            f"model {job.gpu_model or 'any'}, {job.cpu_milli} mCPU, {job.memory_mib} MiB): "
            + why
            + (f"; {left_out}" if left_out and candidates else ""),
        )
    metrics.placements.labels(model.method, "placed", "placements").inc()
    best = options[0]
    return PlacementOut(
        cluster=best.cluster,
        node=best.node,
        gpus=list(best.gpus),
        policy=model.method,
        model_version=model.version,
        fallback_reason=model.fallback_reason,
        score=best.score,
        alternatives=[
            PlacementOption(cluster=o.cluster, node=o.node, gpus=list(o.gpus), score=o.score)
            for o in options[1:]
        ],
        reserved=job.reserve,
    )
