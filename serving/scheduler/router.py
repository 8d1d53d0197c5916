"""``/api/v1/scheduler``: the kube-scheduler extender (filter, prioritize) and binding feedback.

See :mod:`fleetmind.serving.scheduler.extender` for the protocol, :mod:`fleetmind.serving.scheduler.reservations` for the holds, and
``docs/serving/cluster.md`` for the ``KubeSchedulerConfiguration``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fastapi import APIRouter, Depends, Query, Request

from fleetmind.data.errors import DataError, FleetMindError, NotAvailableError
from fleetmind.serving.deps import RegistryDep, Services, ServicesDep, TelemetryDep
from fleetmind.serving.scheduler import extender as ext
from fleetmind.serving.scheduler.placement import Option, Reservations
from fleetmind.serving.scheduler.reservations import DbReservations
from fleetmind.serving.schemas import ErrorOut
from fleetmind.serving.telemetry.base import FleetSnapshot

router = APIRouter(prefix="/api/v1/scheduler", tags=["scheduler"])

_ARGS_DOC = (
    "ExtenderArgs of k8s.io/kube-scheduler/extender/v1 (Go field names: Pod, Nodes, NodeNames)"
)
_BIND_DOC = "ExtenderBindingArgs (PodName, PodNamespace, PodUID, Node)"


def _body(doc: str) -> dict[str, Any]:
    """The OpenAPI request body of an extender route (the route parses the body itself)."""
    schema = {"type": "object", "description": doc}
    return {"requestBody": {"required": True, "content": {"application/json": {"schema": schema}}}}


async def go_json(request: Request) -> dict[str, Any]:
    """The body as kube-scheduler's Go ``encoding/json`` writes it: UTF-8 JSON without lone
    surrogates, ``NaN`` or infinities (Go's encoder emits none of them). Python's ``json`` took
    both: an echoed lone surrogate made the answer unserialisable (a 500) and ``NaN`` came back
    as ``null``.

    Raises:
        DataError: anything else (a 422 naming what the parser refused).
    """
    import pydantic_core

    body = await request.body()
    try:
        args = pydantic_core.from_json(body, allow_inf_nan=False)
    except ValueError as err:
        raise DataError(f"the body is not JSON as kube-scheduler sends it ({err})") from None
    if not isinstance(args, dict):
        raise DataError("the body must be a JSON object (ExtenderArgs or ExtenderBindingArgs)")
    return args


def _state(services: Services) -> ext.ExtenderState:
    state = services.extender
    if state is None:
        state = services.extender = ext.ExtenderState(services.settings.scheduler_cluster)
    return state


_HOLD_TRIES = 5
"""Decisions per call at most while other replicas keep taking the chosen capacity first."""


_INT32 = 2**31
"""``spec.priority`` is an ``int32`` (``k8s.io/api/core/v1`` ``PodSpec.Priority``)."""


def _preemptor(args: dict[str, Any]) -> tuple[str | None, int]:
    """The pod's ``status.nominatedNodeName`` when it is among the candidate nodes (``None``
    otherwise), and its ``spec.priority`` (0 when absent or null: the Kubernetes default).

    kube-scheduler sets ``nominatedNodeName`` once its ``DefaultPreemption`` evicted pods of
    lower priority on that node for this pod, and tries it there again once they are gone (their
    graceful termination); with ``NominatedNodeNameForExpectation`` (KEP-5278) it may also be set
    without any eviction (``Pod`` of ``k8s.io/kube-scheduler/extender/v1`` ``ExtenderArgs`` is
    the whole ``v1.Pod``).

    Raises:
        DataError: ``spec.priority`` that is no int32, or ``status.nominatedNodeName`` that is no
            string (a 422).
    """
    pod = ext.get_ci(args, "Pod")
    if not isinstance(pod, dict):
        return None, 0  # ext.decide says what is wrong with it
    spec, status = ext.get_ci(pod, "spec"), ext.get_ci(pod, "status")
    prio = ext.get_ci(spec, "priority") if isinstance(spec, dict) else None
    if prio is None:
        prio = 0
    if isinstance(prio, bool) or not isinstance(prio, int) or not -_INT32 <= prio < _INT32:
        raise DataError("Pod.spec.priority must be an int32")
    node = ext.get_ci(status, "nominatedNodeName") if isinstance(status, dict) else None
    if node is None or node == "":
        return None, prio
    if not isinstance(node, str):
        raise DataError("Pod.status.nominatedNodeName must be a string")
    names, _ = ext.candidate_names(args)
    return (node if node in names else None), prio


def last_snapshot(telemetry: Any) -> FleetSnapshot | None:
    """``telemetry``'s last snapshot read, whatever its age (``None`` without one or without a
    source): never a telemetry read, for what must not wait on one (``/bound``, a scrape)."""
    last = getattr(telemetry, "last_snapshot", None)
    return last() if callable(last) else None


def _snapshot(telemetry: Any, nominated: str | None) -> FleetSnapshot:
    """The snapshot to decide on: for a pod nominated to a candidate node, one no older than the
    telemetry TTL where it can be had (:meth:`TelemetrySource.fresh_snapshot`: joins the refresh
    under way, or reads, at most one read; the stale one within its bound when that read fails or
    one failed within the TTL), since a stale one may still show the pods preemption evicted
    there, fail the node and make kube-scheduler preempt again on another node; for every other
    pod the cached one, stale-while-refresh included (no wait)."""
    fresh = getattr(telemetry, "fresh_snapshot", None)
    if nominated is not None and callable(fresh):
        return fresh()
    return telemetry.snapshot()


def _counted(req: ext.PodRequest) -> bool:
    """Whether kube-scheduler's ``NodeResourcesFit`` counts all of what FleetMind holds for the
    pod (CPU, memory, ``nvidia.com/gpu`` or ``nvidia.com/mig-<profile>`` devices, a time-slicing
    replica being one device) for bound and assumed pods: not a GPU share of the
    ``alibabacloud.com/gpu-milli`` annotations, which only FleetMind counts. Only such a pod's
    hold records its priority, and only such a preemptor leaves out lower-priority holds
    (:func:`fleetmind.serving.scheduler.reservations._outranked`)."""
    return req.num_gpu == 0 or req.device_gpus or req.mig


def _held(
    services: Services, snapshot: FleetSnapshot, outranks: tuple[str, int] | None = None
) -> tuple[Any, list[Reservations]]:
    """What :func:`ext.decide` reads as held capacity, and the list that keeps the view it read
    (database holds: the pod's own hold left out, so a retried pod does not block itself, and
    with ``outranks``, a nominated node and the pod's priority, for a pod kube-scheduler counts
    (:func:`_counted`), the holds on that node of such pods of lower priority:
    :meth:`DbReservations.view`)."""
    res: Reservations = services.reservations
    seen: list[Reservations] = []
    if not isinstance(res, DbReservations):
        return res, seen

    def view(req: ext.PodRequest) -> Reservations:
        mine = outranks if _counted(req) else None
        seen.append(res.view(snapshot, exclude=req.key, outranks=mine))
        return seen[-1]

    return view, seen


def _for_filter(decision: ext.Decision) -> Option | None:
    """What filter holds: the node, when it is the only one that passes.

    kube-scheduler skips prioritize (so the extenders' prioritize too) when one node is left after
    filtering ("When only one node after predicate, just use it.", ``schedulePod`` in
    ``pkg/scheduler/schedule_one.go``), so this is the pod's node if it is scheduled at all, and
    without a hold here nothing would hold it. With two or more nodes passing, nothing is held:
    prioritize follows and holds the node it scores 10, and holding the best option here would cost
    a database write per filter call and book capacity on a node kube-scheduler may not pick
    (later extenders, the score plugins) for the TTL. A later extender's filter that leaves one of
    several nodes FleetMind passed is not seen here; that pod goes unheld, as before.
    """
    if len(decision.options) == 1 and not decision.passthrough:
        return decision.options[0]
    return None


def _for_prioritize(decision: ext.Decision) -> Option | None:
    """What prioritize holds: the policy's choice (the node it scores 10)."""
    return decision.options[0] if decision.options else None


def _decide(
    services: Any,
    registry: Any,
    telemetry: Any,
    args: dict[str, Any],
    path: str,
    to_hold: Callable[[ext.Decision], Option | None],
) -> tuple[ext.PodRequest, ext.Decision]:
    """Decide for the pod of ``args`` with the served placement policy (the registry's, a fallback
    heuristic included: the one ``GET /api/v1/models`` and ``POST /api/v1/placements`` name), hold
    ``to_hold(decision)`` (database holds), and count the decision in
    ``fleetmind_placements_total`` (``path``: filter or prioritize; ``policy``: that policy's name,
    e.g. ``ppo`` or ``heuristic:BestFit``; ``result``: :func:`_outcome`).

    Deciding and holding happen under ``services.place_lock`` (shared with ``reserve=true``
    placements), so the calls of one process never decide on the same free capacity; the hold
    re-checks the node inside its transaction for other replicas, and a refused hold (capacity
    taken meanwhile) means deciding again on a fresh view.

    The snapshot may be up to ``FLEETMIND_TELEMETRY_MAX_STALE_S`` past its TTL (served while a
    background refresh runs, so this call does not wait for Prometheus). Holds made after it was
    collected still count: a hold ends by the snapshot in use (it lists the pod, or was collected
    ``bound_grace_s`` after the binding), and a bound hold's row is kept ``bound_grace_s`` plus
    that snapshot age (:attr:`DbReservations.snapshot_lag_s`), so a stale snapshot ends no bound
    hold sooner than a fresh one would. The TTL of a hold never seen bound
    (``FLEETMIND_RESERVATION_TTL_S``) is a clock deadline: a pod bound without ``/bound``, or a
    ``reserve=true`` job, that does not show in a snapshot collected by the TTL minus that age (85 s
    after its hold by default) can have its capacity handed out once more.

    A pod kube-scheduler nominated to one of the candidate nodes after preempting there
    (:func:`_preemptor`) is decided on a snapshot no older than the TTL (:func:`_snapshot`), and
    the holds of pods of lower priority on that node do not count for it.
    """
    state = _state(services)
    model = registry.current.placement
    placer = model.impl
    nominated, priority = _preemptor(args)
    snapshot = _snapshot(telemetry, nominated)
    outranks = (nominated, priority) if nominated is not None else None
    res = services.reservations
    with services.place_lock:
        for _ in range(_HOLD_TRIES):
            held, seen = _held(services, snapshot, outranks)
            req, decision = ext.decide(args, snapshot, held, placer, state.index)
            option = to_hold(decision) if isinstance(res, DbReservations) else None
            if option is None or res.hold(
                req.key,
                option,
                req.job(replicas=decision.replicas.get(option.node, 1)),
                uid=req.uid,
                snapshot=snapshot,
                seen=seen[0],
                priority=priority if _counted(req) else None,
                nominated=nominated if _counted(req) else None,
            ):
                break
        else:
            raise NotAvailableError(
                f"the capacity chosen for pod {req.key} was taken by other decisions "
                f"{_HOLD_TRIES} times in a row; retry"
            )
    services.metrics.placements.labels(model.method, _outcome(req, decision), path).inc()
    return req, decision


def _outcome(req: ext.PodRequest, decision: ext.Decision) -> str:
    """The ``result`` label of ``fleetmind_placements_total`` for an extender decision:
    ``infeasible`` (no node kept), ``cpu_only`` (a pod asking no GPU, kept on some node),
    ``passthrough`` (devices FleetMind does not model, DRA claims or other vendors' accelerators:
    kube-scheduler places it) or ``placed`` (a GPU pod kept on some node), so that ``placed``
    counts GPU pods only."""
    if not (decision.options or decision.passthrough):
        return "infeasible"
    if decision.cpu_only:
        return "cpu_only"
    return "placed" if req.num_gpu else "passthrough"


@router.post(
    "/filter",
    responses={
        503: {
            "model": ErrorOut,
            "description": "a GPU pod, and telemetry has no GPU or none of the candidate nodes "
            "(kube-scheduler skips an ignorable extender); or holds kept being taken",
        }
    },
    summary="kube-scheduler extender filter",
    openapi_extra=_body(_ARGS_DOC),
)
def filter_nodes(
    services: ServicesDep,
    registry: RegistryDep,
    telemetry: TelemetryDep,
    args: dict[str, Any] = Depends(go_json),
) -> dict[str, Any]:
    """Keep the candidate nodes that can hold the Pod; the others go to ``FailedNodes`` (room may
    free up) or ``FailedAndUnresolvableNodes`` (the node could never hold it), with a reason.

    When exactly one node passes, it is held for the Pod as prioritize would hold it:
    kube-scheduler does not call prioritize then (see :func:`_for_filter`).
    """
    _, objs = ext.candidate_names(args)
    _, decision = _decide(services, registry, telemetry, args, "filter", _for_filter)
    return ext.filter_result(decision, objs)


@router.post(
    "/prioritize",
    responses={503: {"model": ErrorOut}},
    summary="kube-scheduler extender prioritize",
    openapi_extra=_body(_ARGS_DOC),
)
def prioritize(
    services: ServicesDep,
    registry: RegistryDep,
    telemetry: TelemetryDep,
    args: dict[str, Any] = Depends(go_json),
) -> list[dict[str, Any]]:
    """``HostPriorityList``: the policy's choice scores 10, the other feasible nodes 0..4
    (:meth:`fleetmind.serving.scheduler.extender.Decision.scores`).

    The choice is held (GPUs, CPU, memory) for the Pod until it is seen bound or the hold's TTL
    expires, so that the next pods, on any replica, see that capacity as used; the hold replaces
    one the Pod's filter made.
    """
    _, decision = _decide(services, registry, telemetry, args, "prioritize", _for_prioritize)
    return ext.priority_list(decision)


@router.post(
    "/bound",
    summary="A pod was bound to a node (ends its hold)",
    openapi_extra=_body(_BIND_DOC),
)
def bound(
    services: ServicesDep,
    args: dict[str, Any] = Depends(go_json),
) -> dict[str, str]:
    """Tell FleetMind that kube-scheduler bound a pod (``ExtenderBindingArgs``).

    Answers ``{"Error": "", "Outcome": held|moved|unknown}``: ``held`` the hold now waits for
    telemetry to show the pod (``FLEETMIND_RESERVATION_BOUND_GRACE_S`` at most), ``moved`` the pod
    went to another node than FleetMind chose (hold dropped), ``unknown`` no live hold (or only one
    recorded for another ``PodUID``: an earlier pod of that name, deleted and recreated). Only the
    hold in ``Node``'s cluster (``FLEETMIND_SCHEDULER_CLUSTER``, or the cluster with a node of that
    name in the last telemetry snapshot read; no read is made) is the pod's: a same-named pod's
    hold in another cluster is left alone. Where neither tells the cluster, the hold with the
    pod's ``PodUID``, else the one on ``Node``, else holds of that name all in one cluster that
    the snapshot does not show without ``Node``, is the pod's; any other is left to telemetry and
    its TTL (``unknown``).
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
    uid = ext.check_uid(ext.get_ci(args, "PodUID"), "ExtenderBindingArgs.PodUID")
    res = services.reservations
    if not isinstance(res, DbReservations):
        return {"Error": "", "Outcome": "unknown"}
    # the last snapshot read, whatever its age: /bound never waits on (nor starts) a telemetry
    # read, and none configured or read yet still answers (the hold found by uid or node)
    snap = last_snapshot(services.telemetry)
    state = _state(services)
    cluster = state.cluster_of(node, snap)
    ruled_out = state.clusters_without(node, snap) if cluster is None else frozenset()
    outcome = res.bound(f"{ns}/{name}", node, uid=uid, cluster=cluster, ruled_out=ruled_out)
    return {"Error": "", "Outcome": outcome}


MAX_HOLDS_LISTED = 1000
"""Most holds ``GET /api/v1/scheduler/holds`` lists in one answer."""


@router.get("/holds", summary="Capacity FleetMind holds for pods it placed, not yet seen bound")
def holds(
    services: ServicesDep,
    limit: int = Query(100, ge=1, le=MAX_HOLDS_LISTED, description="most holds listed"),
) -> dict[str, Any]:
    """The live holds, the soonest to expire first: what the extender's reasons "held for pods
    FleetMind placed, not yet seen bound" refer to. ``{"total": <live holds>, "holds": [{pod, uid,
    cluster, node, gpus, gpu_milli, cpu_milli, memory_mib, bound, expires_at, seconds_left}]}``
    (:meth:`fleetmind.serving.scheduler.reservations.DbReservations.listing`); at most ``limit``
    listed. The holds are those the placers count under the telemetry snapshot a decision would
    use now (a hold whose pod the snapshot shows, or whose bound grace passed, is gone); without
    telemetry (or when it cannot be read and none was), every hold not expired. Without database
    holds (an in-process test setup) none are listed."""
    res = services.reservations
    if not isinstance(res, DbReservations):
        return {"total": 0, "holds": []}
    snap = last_snapshot(services.telemetry)
    if services.telemetry is not None:
        try:
            snap = services.telemetry.snapshot()
        except FleetMindError:
            pass  # the last one read, if any
    listed, total = res.listing(limit, snap)
    return {"total": total, "holds": listed}
