"""Symptom anchoring: weight root-cause candidates by an anomalous dependency path to the symptom.

An incident usually announces itself through one user-facing symptom: the front end's latency, an SLO
alert. A root cause of that symptom is something the symptomatic component depends on, directly or
through components that are themselves anomalous (the fault travels up the call chain). So a
candidate is **joined** to the symptom when a dependency path ``symptom -> ... -> candidate`` exists
whose nodes before the candidate all alert; the symptom node itself is joined. Dependency edges are
the graph's edges (``src`` depends on ``dst``) plus two kinds read backwards (:func:`dependencies`):
a ``member_of`` group other than a cluster depends on its members (a Service on its pods), and
the GPUs an NVLink / PCIe ``link`` is ``attached_to`` depend on that link (docs/graph.md,
"Direction"). :func:`anchor_result` keeps the scores of joined candidates
and multiplies the others' by ``weight`` (for probability-like scores; log-scale scores such as
logits get ``+ log(weight)``), then re-sorts. It never raises a score.

The symptom comes from the incident: a scenario's target (PetShop's ``target.json`` names the alerting
front end), or, in the service, the alert whose ``alertname`` is one of the ``FLEETMIND_SLO_ALERTS``
setting, else the highest-severity alert (:func:`symptom_node`).
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Collection, Mapping, Sequence
from dataclasses import replace
from typing import Any

from fleetmind.data.graph import DependencyGraph, cached_for_edges
from fleetmind.rca.base import RCAResult

DEFAULT_WEIGHT = 0.1
"""Weight of a candidate no anomalous path joins to the symptom (one value for every system)."""

SEVERITY_ORDER: dict[str, int] = {"critical": 3, "error": 2, "page": 3, "warning": 1, "info": 0}


def alert_node(graph: DependencyGraph, alert: Mapping[str, Any]) -> str | None:
    """The graph node an alert lands on (its ``service`` label, else the graph's alert matching)."""
    lab = alert.get("labels") or {}
    svc = lab.get("service")
    if svc is not None and str(svc) in graph.index:
        return str(svc)
    return graph.node_for_alert(lab)


def symptom_node(
    graph: DependencyGraph,
    alerts: Sequence[Mapping[str, Any]],
    slo_alerts: Collection[str] = (),
) -> str | None:
    """The node of an incident's user-facing symptom, or ``None`` when no alert maps to a node.

    The first alert (in the given order) whose ``alertname`` is in ``slo_alerts`` wins; without one,
    the highest-severity alert (``critical`` > ``warning`` > ``info``; ties by the larger
    ``z_score`` annotation, then the earlier ``startsAt``).
    """
    mapped = [(a, alert_node(graph, a)) for a in alerts]
    mapped = [(a, n) for a, n in mapped if n is not None]
    if not mapped:
        return None
    for a, n in mapped:
        if str((a.get("labels") or {}).get("alertname", "")) in slo_alerts:
            return n

    def key(item: tuple[Mapping[str, Any], str]) -> tuple[int, float, str]:
        a = item[0]
        sev = SEVERITY_ORDER.get(str((a.get("labels") or {}).get("severity", "")).lower(), 0)
        try:
            z = float((a.get("annotations") or {}).get("z_score", 0.0))
        except (TypeError, ValueError):
            z = 0.0
        return (-sev, -(z if math.isfinite(z) else 0.0), str(a.get("startsAt", "")))

    return min(mapped, key=key)[1]


def named_symptom(
    graph: DependencyGraph,
    alerts: Sequence[Mapping[str, Any]],
    slo_alerts: Collection[str],
) -> str | None:
    """The node of the first alert whose ``alertname`` is in ``slo_alerts``; ``None`` when no alert
    of the incident is named there (the service then leaves the ranking as the model gave it).

    The service anchors only on a symptom the operator named: on FleetMind's simulated GPU-fleet
    storms (1,005 held-out incidents, released GAT, 2026-12-02), anchoring on the highest-severity
    alert instead lowered AC@1 from 0.926 to 0.917 (AC@3 0.984 -> 0.985), because a silent node on
    the path from a severe downstream alert to the root cuts the root off (measured before
    :func:`dependencies` read ``member_of`` and a link's ``attached_to`` backwards).
    """
    for a in alerts:
        if str((a.get("labels") or {}).get("alertname", "")) in slo_alerts:
            node = alert_node(graph, a)
            if node is not None:
                return node
    return None


_DEPS_KEY = "anchor_dependencies"
"""Key of :func:`dependencies`' entry in the graph's own cache dict (``graph._derived``)."""


def dependencies(graph: DependencyGraph) -> dict[str, list[str]]:
    """What each node depends on: ``dst`` of its edges, plus the edges read backwards where the
    dependency points at its dependent.

    * ``member_of`` into a group that is not a cluster (pod -> Service): the Service depends on
      its pods too, since a pod's crash or GPU error costs its Service capacity. Without it a
      Service symptom never reaches its pods, their GPUs or hosts. A ``cluster`` node is not read
      so: an alert on the cluster itself (``KubeAPIDown{cluster=...}``) would join every member
      of the cluster, and anchoring would keep nothing apart.
    * ``attached_to`` from a ``link`` node (NVLink pair / PCIe switch -> each GPU it joins): a
      broken link hangs the GPUs it joins. A GPU's ``attached_to`` its host keeps one direction.

    ``calls`` and ``depends_on`` keep theirs: they already point from the dependent to the
    dependency. The PetShop and Train Ticket graphs hold ``calls`` edges only, so their anchoring
    is unchanged. Cached in the graph's ``_derived`` dict for its edge list (an incident's graph
    with extra edges, :mod:`fleetmind.rca.incident_graph`, shares that dict and has its own list,
    so it gets its own entry); the caller must not change the lists.
    """

    def build() -> dict[str, list[str]]:
        deps: dict[str, list[str]] = {}
        for e in graph.edges:
            deps.setdefault(e.src, []).append(e.dst)
            dst_kind = graph.node(e.dst).kind
            if (e.kind == "member_of" and dst_kind != "cluster") or (
                e.kind == "attached_to" and graph.node(e.src).kind == "link"
            ):
                deps.setdefault(e.dst, []).append(e.src)
        return deps

    return cached_for_edges(graph, _DEPS_KEY, build)


def joined_to_symptom(graph: DependencyGraph, anomalous: Collection[str], symptom: str) -> set[str]:
    """Nodes joined to ``symptom`` by a dependency path through anomalous nodes.

    Args:
        graph: edges ``src -> dst`` mean ``src`` depends on ``dst``; ``member_of`` edges into a
            group other than a cluster and a link's ``attached_to`` edges are also read
            ``dst -> src`` (:func:`dependencies`).
        anomalous: nodes that alert.
        symptom: the symptom's node (joined whether or not it alerts).

    Returns:
        The symptom and every node reachable from it along dependency edges where each node on the
        way, before the last, is the symptom or anomalous.
    """
    if symptom not in graph.index:
        return set()
    deps = dependencies(graph)
    joined = {symptom}
    todo = deque([symptom])
    while todo:
        v = todo.popleft()
        if v != symptom and v not in anomalous:
            continue  # a quiet node ends the path: it is joined but passes nothing on
        for u in deps.get(v, ()):
            if u not in joined:
                joined.add(u)
                todo.append(u)
    return joined


def anchor_result(
    result: RCAResult,
    graph: DependencyGraph,
    alerts: Sequence[Mapping[str, Any]],
    symptom: str | None,
    weight: float = DEFAULT_WEIGHT,
) -> RCAResult:
    """``result`` with candidates not joined to the symptom weighted by ``weight`` and re-sorted.

    Scores all >= 0 are multiplied by ``weight``; otherwise (log-scale scores) ``log(weight)`` is
    added. Without a symptom, or a symptom outside the graph, ``result`` is returned unchanged.
    ``extra["anchor"]`` records the symptom and how many candidates were joined.
    """
    if symptom is None or symptom not in graph.index or not result.causes:
        return result
    if not 0.0 < weight <= 1.0:
        raise ValueError(f"anchor weight must be in (0, 1], got {weight}")
    anomalous = {n for a in alerts if (n := alert_node(graph, a)) is not None}
    joined = joined_to_symptom(graph, anomalous, symptom)
    log_scale = any(c.score < 0 for c in result.causes)
    causes = []
    for c in result.causes:
        if c.node in joined:
            causes.append(c)
        elif log_scale:
            causes.append(replace(c, score=c.score + math.log(weight)))
        else:
            causes.append(replace(c, score=c.score * weight))
    order = sorted(range(len(causes)), key=lambda i: (-causes[i].score, i))
    extra = dict(result.extra)
    extra["anchor"] = {
        "symptom": symptom,
        "joined": sum(c.node in joined for c in result.causes),
        "weight": weight,
    }
    return replace(result, causes=[causes[i] for i in order], extra=extra)
