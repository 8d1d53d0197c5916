"""``POST /api/v1/placements``: where a job should run, on the live fleet state."""

from __future__ import annotations

from fastapi import APIRouter, HTTPException, Request

from fleetmind.serving.deps import MetricsDep, RegistryDep, ServicesDep, TelemetryDep, has_scope
from fleetmind.serving.health import healthy_nodes
from fleetmind.serving.scheduler.placement import Reservations, why_no_fit
from fleetmind.serving.scheduler.reservations import DbReservations, job_key
from fleetmind.serving.schemas import ErrorOut, JobSpec, PlacementOption, PlacementOut

router = APIRouter(prefix="/api/v1/placements", tags=["placements"])


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
    hold the job.
    """
    if job.reserve and not has_scope(request, "schedule"):
        raise HTTPException(403, "reserve=true holds capacity: it needs the 'schedule' scope")
    if job.num_gpu > 1 and job.gpu_milli < 1000:
        raise HTTPException(422, "a multi-GPU job takes whole GPUs: gpu_milli must be 1000")
    model = registry.current.placement
    snapshot = telemetry.snapshot()
    k = 1 + job.alternatives
    allowed = healthy_nodes(services, telemetry, snapshot) if job.cluster is None else None

    def held() -> Reservations:
        # A job that names itself does not see its own hold: a retried reserve=true gets the
        # same GPUs back (the new hold replaces the old), not the next free ones.
        res = services.reservations
        if job.job_id and isinstance(res, DbReservations):
            return res.view(snapshot, exclude=job_key(job.job_id))
        return res

    def place() -> list:
        # healthy clusters first (serving/health.py); anywhere when none of them can hold the job
        res = held()
        opts = model.impl.place(snapshot, job, res, k, allowed=allowed)
        return opts or (model.impl.place(snapshot, job, res, k) if allowed else [])

    if job.reserve:
        with services.place_lock:
            options = place()
            if options:
                services.reservations.book(options[0], job)
    else:
        options = place()
    if not options:
        metrics.placements.labels(model.method, "infeasible", "placements").inc()
        where = f" in cluster {job.cluster!r}" if job.cluster else ""
        raise HTTPException(
            409,
            f"no node{where} can hold the job ({job.num_gpu} GPU x {job.gpu_milli} milli, "
            f"model {job.gpu_model or 'any'}, {job.cpu_milli} mCPU, {job.memory_mib} MiB): "
            + why_no_fit(snapshot, job, held()),
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
