"""Dependencies injected into the routers (FastAPI ``Depends``), and the services they hand out.

Everything the routes use is built once in the app's lifespan and kept in :class:`Services` on
``app.state.services``; each accessor below is a dependency that tests can replace through
``app.dependency_overrides``. The accessors are ``async def`` although they never wait: FastAPI runs
a plain ``def`` dependency in its thread pool, a thread hand-off per dependency and request (about
25 per RCA request before), which cost more than the accessors themselves.
"""

from __future__ import annotations

import hmac
import inspect
import threading
from dataclasses import dataclass, field
from typing import Annotated

from fastapi import Depends, HTTPException, Request, status

from fleetmind.data.errors import NotAvailableError
from fleetmind.serving.db import Database
from fleetmind.serving.graphstore import GraphStore
from fleetmind.serving.incidents import IncidentManager
from fleetmind.serving.keepwarm import KeepWarm
from fleetmind.serving.metrics import Metrics
from fleetmind.serving.placement import Reservations
from fleetmind.serving.rca_batcher import RCABatcher
from fleetmind.serving.rca_pool import RankingPool
from fleetmind.serving.registry import ModelRegistry
from fleetmind.serving.settings import Settings, get_settings
from fleetmind.serving.telemetry.base import TelemetrySource


@dataclass
class Services:
    """The long-lived objects of one app instance."""

    settings: Settings
    db: Database
    graphs: GraphStore
    registry: ModelRegistry
    incidents: IncidentManager
    metrics: Metrics
    telemetry: TelemetrySource | None
    telemetry_error: str | None = None
    reservations: Reservations = field(default_factory=Reservations)
    place_lock: threading.Lock = field(default_factory=threading.Lock)
    rca_batcher: RCABatcher = field(default_factory=RCABatcher)
    rca_pool: RankingPool | None = None
    keep_warm: KeepWarm | None = None


async def get_services(request: Request) -> Services:
    services = getattr(request.app.state, "services", None)
    if services is None:
        raise HTTPException(status.HTTP_503_SERVICE_UNAVAILABLE, "service is starting")
    return services


ServicesDep = Annotated[Services, Depends(get_services)]


async def get_db(services: ServicesDep) -> Database:
    return services.db


async def get_registry(services: ServicesDep) -> ModelRegistry:
    return services.registry


async def get_graphs(services: ServicesDep) -> GraphStore:
    return services.graphs


async def get_incidents(services: ServicesDep) -> IncidentManager:
    return services.incidents


async def get_metrics(services: ServicesDep) -> Metrics:
    return services.metrics


async def get_reservations(services: ServicesDep) -> Reservations:
    return services.reservations


async def get_rca_batcher(services: ServicesDep) -> RCABatcher:
    return services.rca_batcher


async def get_rca_pool(services: ServicesDep) -> RankingPool | None:
    return services.rca_pool


async def get_telemetry(services: ServicesDep) -> TelemetrySource:
    if services.telemetry is None:
        raise NotAvailableError(services.telemetry_error or "no telemetry source configured")
    return services.telemetry


async def current_settings(request: Request) -> Settings:
    """The settings in force: ``app.dependency_overrides[get_settings]`` when set, else the app's.

    Resolved here rather than declared as ``Depends(get_settings)``: FastAPI re-inspects the
    signature of an overridden dependency on every request (``get_dependant``, ~1 ms), and runs the
    plain ``get_settings`` in its thread pool.
    """
    override = request.app.dependency_overrides.get(get_settings)
    if override is not None:
        value = override()
        return await value if inspect.isawaitable(value) else value
    services = getattr(request.app.state, "services", None)
    return services.settings if services is not None else get_settings()


async def require_token(request: Request) -> None:
    """When ``FLEETMIND_API_TOKEN`` is set, demand ``Authorization: Bearer <token>`` (401 otherwise)."""
    token = (await current_settings(request)).api_token
    if not token:
        return
    header = request.headers.get("authorization", "")
    scheme, _, given = header.partition(" ")
    if scheme.lower() != "bearer" or not hmac.compare_digest(
        given.strip().encode(), token.encode()
    ):
        raise HTTPException(
            status.HTTP_401_UNAUTHORIZED,
            "missing or wrong bearer token (send 'Authorization: Bearer <FLEETMIND_API_TOKEN>')",
            headers={"WWW-Authenticate": "Bearer"},
        )


DbDep = Annotated[Database, Depends(get_db)]
RegistryDep = Annotated[ModelRegistry, Depends(get_registry)]
GraphsDep = Annotated[GraphStore, Depends(get_graphs)]
IncidentsDep = Annotated[IncidentManager, Depends(get_incidents)]
MetricsDep = Annotated[Metrics, Depends(get_metrics)]
TelemetryDep = Annotated[TelemetrySource, Depends(get_telemetry)]
ReservationsDep = Annotated[Reservations, Depends(get_reservations)]
RCABatcherDep = Annotated[RCABatcher, Depends(get_rca_batcher)]
RCAPoolDep = Annotated[RankingPool | None, Depends(get_rca_pool)]
