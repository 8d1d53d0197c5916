"""``/api/v1/models``: which models serve, and hot reload of the ``champion`` models."""

from __future__ import annotations

from fastapi import APIRouter, Depends

from fleetmind.serving.deps import MetricsDep, RegistryDep, require_scope
from fleetmind.serving.registry import ModelSet
from fleetmind.serving.schemas import ErrorOut, ModelInfo, ModelsOut

router = APIRouter(prefix="/api/v1/models", tags=["models"])


def models_out(models: ModelSet) -> ModelsOut:
    return ModelsOut(
        generation=models.generation,
        rca=ModelInfo(**models.rca.info()),
        placement=ModelInfo(**models.placement.info()),
    )


@router.get(
    "",
    response_model=ModelsOut,
    summary="The served models",
    dependencies=[Depends(require_scope("read"))],
)
def get_models(registry: RegistryDep) -> ModelsOut:
    return models_out(registry.current)


@router.post(
    "/reload",
    response_model=ModelsOut,
    dependencies=[Depends(require_scope("admin"))],
    responses={409: {"model": ErrorOut}},
    summary="Reload the models and swap them in atomically",
)
def reload_models(registry: RegistryDep, metrics: MetricsDep) -> ModelsOut:
    """Load the configured models again (e.g. a new ``champion``); requests in flight finish on the
    old set. 409 (and no change) when a served model fails to load."""
    models = registry.reload()
    metrics.set_models(models)
    return models_out(models)
