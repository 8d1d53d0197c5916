"""``/api/v1/models``: which models serve, and hot reload of the ``champion`` models.

Every worker process and replica serves its own copy of the models; a reload request reaches all
of them through the database (:mod:`fleetmind.serving.registry`), and each answer names the
process that gave it (``pid``).
"""

from __future__ import annotations

import os

from fastapi import APIRouter, Depends
from pydantic import Field

from fleetmind.data.errors import ModelLoadError
from fleetmind.serving.deps import MetricsDep, RegistryDep, require_scope
from fleetmind.serving.registry import ModelRegistry, ModelSet
from fleetmind.serving.schemas import ErrorOut, ModelInfo, ModelsOut

router = APIRouter(prefix="/api/v1/models", tags=["models"])


class ModelsStatusOut(ModelsOut):
    """The models one worker process serves, and where it stands with the service's reloads."""

    pid: int = Field(description="the worker process that answered (each serves its own models)")
    reload_generation: int | None = Field(
        description="the service's reload requests this process has taken up (all workers and "
        "replicas follow them); null before it first read them"
    )
    reload_error: str | None = Field(
        description="why this process kept its models at the latest reload it took up, else null"
    )


class ReloadOut(ModelsStatusOut):
    """The answer of ``POST /api/v1/models/reload``: this process's new models."""

    detail: str = Field(description="what was requested of the other workers and replicas")


def models_out(models: ModelSet, registry: ModelRegistry | None = None) -> ModelsStatusOut:
    return ModelsStatusOut(
        generation=models.generation,
        rca=ModelInfo(**models.rca.info()),
        placement=ModelInfo(**models.placement.info()),
        pid=os.getpid(),
        reload_generation=None if registry is None else registry.reload_generation,
        reload_error=None if registry is None else registry.reload_error,
    )


def _requested(generation: int | None, follow_s: float) -> str:
    if generation is None:
        return (
            "no other worker or replica was asked (no database to reach them, or it could not be "
            "written: see the log)"
        )
    return (
        f"reload generation {generation} requested for every worker and replica on this "
        f"database: each reloads within {follow_s:g} s of its next request (GET /api/v1/models "
        "on each shows its reload_generation and reload_error)"
    )


@router.get(
    "",
    response_model=ModelsStatusOut,
    summary="The served models (of the worker process that answers)",
    dependencies=[Depends(require_scope("read"))],
)
def get_models(registry: RegistryDep) -> ModelsStatusOut:
    return models_out(registry.current, registry)


@router.post(
    "/reload",
    response_model=ReloadOut,
    dependencies=[Depends(require_scope("admin"))],
    responses={409: {"model": ErrorOut}},
    summary="Reload the models of every worker and replica, and swap them in atomically",
)
def reload_models(registry: RegistryDep, metrics: MetricsDep) -> ReloadOut:
    """Load the configured models again (e.g. a new ``champion``) in this process, and request the
    same of every other worker and replica (through the database); requests in flight finish on
    the old set. 409 when a served model fails to load here: this process keeps its set, and the
    request for the others stands (each keeps its set on the same rule)."""
    try:
        generation, models = registry.request_reload()
    except ModelLoadError as err:
        done = _requested(registry.reload_generation if registry.db else None, registry.follow_s)
        raise ModelLoadError(f"{err} (pid {os.getpid()}); {done}") from None
    metrics.set_models(models)
    out = models_out(models, registry)
    return ReloadOut(**out.model_dump(), detail=_requested(generation, registry.follow_s))
