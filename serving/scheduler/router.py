"""``/api/v1/scheduler``: the kube-scheduler extender (filter, prioritize) and binding feedback.

See :mod:`fleetmind.serving.scheduler.extender` for the protocol, :mod:`fleetmind.serving.scheduler.reservations` for the holds, and
``docs/serving/cluster.md`` for the ``KubeSchedulerConfiguration``.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Body

from fleetmind.data.errors import DataError
from fleetmind.serving.deps import RegistryDep, Services, ServicesDep, TelemetryDep
from fleetmind.serving.scheduler import extender as ext
from fleetmind.serving.scheduler.placement import Reservations
from fleetmind.serving.scheduler.reservations import DbReservations
from fleetmind.serving.schemas import ErrorOut
from fleetmind.serving.telemetry.base import FleetSnapshot

router = APIRouter(prefix="/api/v1/scheduler", tags=["scheduler"])

_ARGS_DOC = (
    "ExtenderArgs of k8s.io/kube-scheduler/extender/v1 (Go field names: Pod, Nodes, NodeNames)"
)
_BIND_DOC = "ExtenderBindingArgs (PodName, PodNamespace, PodUID, Node)"


def _state(services: Services) -> ext.ExtenderState:
    state = services.extender
    if state is None:
        state = services.extender = ext.ExtenderState(services.settings.scheduler_cluster)
    return state


def _held(services: Services, snapshot: FleetSnapshot) -> Any:
    res: Reservations = services.reservations
    if isinstance(res, DbReservations):
        return lambda req: res.view(snapshot, exclude=req.key)
    return res


def _decide(
    services: Any, registry: Any, telemetry: Any, args: dict[str, Any], path: str
) -> tuple[ext.PodRequest, ext.Decision]:
    """Decide for the pod of ``args`` and count the decision in ``fleetmind_placements_total``
    (``path``: filter or prioritize; ``policy``: the served one, or ``fallback``)."""
    state = _state(services)
    model = registry.current.placement
    placer = state.placer(model.impl, model.fallback_reason)
    snapshot = telemetry.snapshot()
    req, decision = ext.decide(args, snapshot, _held(services, snapshot), placer, state.index)
    policy = model.method if model.fallback_reason is None else "fallback"
    placed = bool(decision.options or decision.passthrough)
    services.metrics.placements.labels(policy, "placed" if placed else "infeasible", path).inc()
    return req, decision


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
    _, objs = ext.candidate_names(args)
    _, decision = _decide(services, registry, telemetry, args, "filter")
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
    """``HostPriorityList``: the policy's choice scores 10, the other feasible nodes 0..9.

    The choice is held (GPUs, CPU, memory) for the Pod until it is seen bound or the hold's TTL
    expires, so that the next pods, on any replica, see that capacity as used.
    """
    req, decision = _decide(services, registry, telemetry, args, "prioritize")
    res = services.reservations
    if decision.options and isinstance(res, DbReservations):
        res.hold(req.key, decision.options[0], req.job(), uid=req.uid)
    return ext.priority_list(decision)


@router.post(
    "/bound",
    responses={422: {"model": ErrorOut}},
    summary="A pod was bound to a node (ends its hold)",
)
def bound(
    services: ServicesDep,
    args: dict[str, Any] = Body(..., description=_BIND_DOC),
) -> dict[str, str]:
    """Tell FleetMind that kube-scheduler bound a pod (``ExtenderBindingArgs``).

    Answers ``{"Error": "", "Outcome": held|moved|unknown}``: ``held`` the hold now waits for
    telemetry to show the pod (``FLEETMIND_RESERVATION_BOUND_GRACE_S`` at most), ``moved`` the pod
    went to another node than FleetMind chose (hold dropped), ``unknown`` no live hold.
    """
    if not isinstance(args, dict):
        raise DataError("the body must be an ExtenderBindingArgs object")
    name = ext.get_ci(args, "PodName")
    node = ext.get_ci(args, "Node")
    ns = ext.get_ci(args, "PodNamespace")
    ns = "default" if ns is None or ns == "" else ns
    if not name or not node:
        raise DataError("ExtenderBindingArgs needs PodName and Node (strings)")
    name = ext.check_name(name, "ExtenderBindingArgs.PodName")
    node = ext.check_name(node, "ExtenderBindingArgs.Node")
    ns = ext.check_name(ns, "ExtenderBindingArgs.PodNamespace", label=True)
    ext.check_uid(ext.get_ci(args, "PodUID"), "ExtenderBindingArgs.PodUID")
    res = services.reservations
    if not isinstance(res, DbReservations):
        return {"Error": "", "Outcome": "unknown"}
    return {"Error": "", "Outcome": res.bound(f"{ns}/{name}", node)}
