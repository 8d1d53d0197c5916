"""``GET /api/v1/fleet``: the current fleet snapshot from telemetry (minus service reservations)."""

from __future__ import annotations

from datetime import UTC, datetime

from fastapi import APIRouter

from fleetmind.serving.deps import ReservationsDep, ServicesDep, TelemetryDep
from fleetmind.serving.health import health_service
from fleetmind.serving.scheduler.reservations import DbReservations
from fleetmind.serving.schemas import ClusterHealthOut, ErrorOut, FleetOut, GpuOut, NodeOut

router = APIRouter(prefix="/api/v1/fleet", tags=["fleet"])


@router.get("", response_model=FleetOut, responses={503: {"model": ErrorOut}})
def fleet(
    telemetry: TelemetryDep, reservations: ReservationsDep, services: ServicesDep
) -> FleetOut:
    snap = telemetry.snapshot()
    if isinstance(reservations, DbReservations):  # a hold whose pod the snapshot shows has ended
        reservations = reservations.view(snap)
    health = health_service(services).current(telemetry)
    nodes = []
    for n in snap.nodes:
        gpus = [
            GpuOut(
                index=g.index,
                uuid=g.uuid,
                model=g.model,
                util_pct=g.util_pct,
                mem_used_mib=g.mem_used_mib,
                mem_total_mib=g.mem_total_mib,
                xid_errors=g.xid_errors,
                free_milli=max(0, g.free_milli - reservations.gpu_used(n.cluster, n.name, g.index)),
                healthy=g.healthy,
                unallocatable=g.unallocatable,
            )
            for g in n.gpus
        ]
        nodes.append(
            NodeOut(
                name=n.name,
                cluster=n.cluster,
                cpu_milli=n.cpu_milli,
                cpu_milli_free=max(0, n.cpu_milli_free - reservations.cpu_used(n.cluster, n.name)),
                memory_mib=n.memory_mib,
                memory_mib_free=max(
                    0, n.memory_mib_free - reservations.mem_used(n.cluster, n.name)
                ),
                gpus=gpus,
                schedulable=n.schedulable,
                cordoned=n.cordoned,
                draining=n.draining,
                not_ready=n.not_ready,
            )
        )
    return FleetOut(
        source=snap.source,
        collected_at=datetime.fromtimestamp(snap.collected_ts, UTC).isoformat(),
        num_nodes=len(nodes),
        num_gpus=snap.num_gpus,
        nodes=nodes,
        clusters=[
            ClusterHealthOut(
                cluster=c.cluster,
                health=c.health,
                gpu_util=c.gpu_util,
                vram_pressure=c.vram_pressure,
                p99_latency_s=c.p99_latency_s,
                p95_latency_s=c.p95_latency_s,
                request_rate=c.request_rate,
                cpu_use=c.cpu_use,
            )
            for c in health.clusters
        ],
        fleet_skew=health.skew,
        health_weights=health.weights,
    )
