"""Shared quiet callee: a fault its own metrics do not show, seen by several callers at once.

A network delay injected at one component slows the calls *into* it, so its callers' latency rises
while its own server-side metrics (latency measured inside it, CPU, memory, traffic) stay normal. A
ranker that only puts alerting nodes first cannot name such a root; it names one of the callers. One
fault in a quiet callee explains several alerting callers at once, though, where a caller explains
only itself. The rule here, applied after any ranker:

* a caller counts when it alerts on latency (an alertname of the latency role,
  :func:`fleetmind.data.metric_roles.metric_role`: the detector's ``HighLatency``,
  ``ServiceLatencyHigh``, ...) and that alert is not *prevalent* (a ``(service, metric)`` pair
  alerting in more than half of a system's windows is drift, :mod:`fleetmind.rca.drift`);
* a node that does not alert at all, has at least ``min_callers`` (default 2) callers, and whose
  callers **all** count is a **shared quiet callee** (a delay on the way into a component slows
  every call into it, so every caller shows it); it moves to the rank directly above the
  best-ranked of those callers (several such callees keep their order among themselves). Nothing
  moves otherwise.

The "all callers" condition is what keeps the rule from hurting where roots show their own faults:
a slow root and its slow caller often share a quiet callee, which a looser rule ("two slow
callers") promoted above the root in 9 and 16 of 30 issues of two synthetic systems whose roots'
latency rises (``data/synth_system.py``); with it, none.

Edges ``src -> dst`` mean ``src`` calls (depends on) ``dst``. The rule reads only the alerts, the
graph and the prevalence; it is a hand-set rule, not a learned one. It was designed on a development
system (Train Ticket from Nezha, where 13 of 21 roots are network delays that their own metrics do
not show); see ``docs/research/2026-12-03-rca-shared-callee.md`` for what it changes and where.
"""

from __future__ import annotations

import weakref
from collections import defaultdict
from collections.abc import Collection, Mapping, Sequence
from dataclasses import replace
from typing import Any

from fleetmind.data.graph import DependencyGraph
from fleetmind.data.metric_roles import metric_role
from fleetmind.rca.anchoring import alert_node
from fleetmind.rca.base import RCAResult
from fleetmind.rca.drift import alert_pair

MIN_CALLERS = 2
"""Callers a quiet node needs to be promoted (with one caller, that caller is as likely the root)."""


def shared_quiet_callees(
    graph: DependencyGraph,
    alerts: Sequence[Mapping[str, Any]],
    prevalent: Collection[tuple[str, str]] = (),
    min_callers: int = MIN_CALLERS,
) -> dict[str, list[str]]:
    """Quiet nodes with at least ``min_callers`` callers, every one of them counting (module
    docstring).

    Args:
        graph: the dependency graph (``src`` calls ``dst``).
        alerts: the incident's alerts (Alertmanager v4 dicts; ``service`` label or graph matching).
        prevalent: ``(service, metric)`` pairs (:func:`fleetmind.rca.drift.alert_pair`) that
            alert in most windows of the system (:func:`fleetmind.rca.drift.prevalent_pairs`);
            their latency alerts do not count.
        min_callers: callers needed (all of them counting).

    Returns:
        ``{quiet node: sorted counting callers}``.
    """
    if min_callers < 1:
        raise ValueError(f"min_callers must be >= 1, got {min_callers}")
    # latency alerts first: without min_callers slow nodes nothing can be found, and mapping every
    # alert to its node is most of the cost (the service ranks on every incident update)
    slow: set[str] = set()
    for a in alerts:
        lab = a.get("labels") or {}
        if metric_role(str(lab.get("alertname", ""))) != "latency":
            continue
        node = alert_node(graph, a)
        if node is not None and alert_pair(a) not in prevalent:
            slow.add(node)
    if len(slow) < min_callers:
        return {}
    callers = _callers(graph)
    out: dict[str, list[str]] = {}
    alerting: set[str] | None = None
    for v, cs in callers.items():
        if len(cs) >= min_callers and cs <= slow:
            if alerting is None:
                alerting = {n for a in alerts if (n := alert_node(graph, a)) is not None}
            if v not in alerting:
                out[v] = sorted(cs)
    return out


_CALLERS: weakref.WeakKeyDictionary[DependencyGraph, dict[str, frozenset[str]]] = (
    weakref.WeakKeyDictionary()
)


def _callers(graph: DependencyGraph) -> dict[str, frozenset[str]]:
    """``{node: its callers}``, kept per graph object (graphs are not changed once built)."""
    got = _CALLERS.get(graph)
    if got is None:
        acc: dict[str, set[str]] = defaultdict(set)
        for e in graph.edges:
            acc[e.dst].add(e.src)
        got = _CALLERS[graph] = {v: frozenset(cs) for v, cs in acc.items()}
    return got


def promote_shared_callees(
    result: RCAResult,
    graph: DependencyGraph,
    alerts: Sequence[Mapping[str, Any]],
    prevalent: Collection[tuple[str, str]] = (),
    min_callers: int = MIN_CALLERS,
) -> RCAResult:
    """``result`` with every shared quiet callee moved directly above its best-ranked counting
    caller (module docstring). A moved cause takes that caller's score (the scores stay sorted;
    ties keep the new order) and the path ``[callee, caller]``; ``extra["shared_callees"]``
    records what moved and which callers it explains.
    """
    found = shared_quiet_callees(graph, alerts, prevalent, min_callers)
    if not found or not result.causes:
        return result
    order = [c.node for c in result.causes]
    pos = {n: i for i, n in enumerate(order)}
    moves: dict[str, int] = {}
    for v, cs in found.items():
        ranked = [pos[c] for c in cs if c in pos]
        if v in pos and ranked and min(ranked) < pos[v]:
            moves[v] = min(ranked)
    if not moves:
        return result
    # a moved node sorts just before the caller it goes above; ties keep the ranker's order
    key = {n: (moves.get(n, pos[n]), 0 if n in moves else 1, pos[n]) for n in order}
    causes = []
    for n in sorted(order, key=key.__getitem__):
        c = result.causes[pos[n]]
        if n in moves:
            above = result.causes[moves[n]]
            c = replace(c, score=above.score, path=(n, above.node))
        causes.append(c)
    extra = dict(result.extra)
    extra["shared_callees"] = {v: found[v] for v in moves}
    return replace(result, causes=causes, extra=extra)
