"""``/api/v1/scheduler``: the kube-scheduler extender (filter, prioritize) and binding feedback.

See :mod:`serving.extender` for the protocol and ``docs/serving.md`` ("Connect to your cluster") for
the ``KubeSchedulerConfiguration`` that calls it.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Body

from fleetmind.serving import extender as ext
from fleetmind.serving.deps import RegistryDep, ServicesDep, TelemetryDep
from fleetmind.serving.schemas import ErrorOut

router = APIRouter(prefix="/api/v1/scheduler", tags=["scheduler"])

_ARGS_DOC = (
    "ExtenderArgs of k8s.io/kube-scheduler/extender/v1 (Go field names: Pod, Nodes, NodeNames)"
)


def _state(services: Any) -> ext.ExtenderState:
    state = services.extender
    if state is None:
        state = services.extender = ext.ExtenderState(services.settings.scheduler_cluster)
    return state


@router.post(
    "/filter",
    responses={422: {"model": ErrorOut}, 503: {"model": ErrorOut}},
    summary="kube-scheduler extender filter",
)
def filter_nodes(
    services: ServicesDep,
    registry: RegistryDep,
    telemetry: TelemetryDep,
    args: dict[str, Any] = Body(..., description=_ARGS_DOC),
) -> dict[str, Any]:
    """Keep the candidate nodes that can hold the Pod; the others go to ``FailedNodes`` (room may
    free up) or ``FailedAndUnresolvableNodes`` (the node could never hold it), with a reason."""
    state = _state(services)
    model = registry.current.placement
    placer = state.placer(model.impl, model.fallback_reason)
    snapshot = telemetry.snapshot()
    _, objs = ext.candidate_names(args)
    held = services.reservations
    _, decision = ext.decide(args, snapshot, held, placer, state.index)
    return ext.filter_result(decision, objs)


@router.post(
    "/prioritize",
    responses={422: {"model": ErrorOut}, 503: {"model": ErrorOut}},
    summary="kube-scheduler extender prioritize",
)
def prioritize(
    services: ServicesDep,
    registry: RegistryDep,
    telemetry: TelemetryDep,
    args: dict[str, Any] = Body(..., description=_ARGS_DOC),
) -> list[dict[str, Any]]:
    """``HostPriorityList``: the policy's choice scores 10, the other feasible nodes 0..9."""
    state = _state(services)
    model = registry.current.placement
    placer = state.placer(model.impl, model.fallback_reason)
    snapshot = telemetry.snapshot()
    _, decision = ext.decide(args, snapshot, services.reservations, placer, state.index)
    return ext.priority_list(decision)
