"""Thinned storms: training copies of incidents that keep only a few of their alerting nodes.

On-call often sends part of a storm: the alerts on the faulty component and one or two beside it.
The simulator (:mod:`fleetmind.data.rca_gen`) never writes such an incident: every incident has at
least two alerting nodes besides its root, so a GAT trained on it alone has not seen a storm of the
root and one neighbour: the releases trained that way ranked the root first in 0.81-0.84 of such
storms against 0.97 of full ones (2026-12-03, ``docs/research/2026-12-03-rca-thinned-storms.md``;
trained with thinned copies, 0.98). A thinned copy
keeps every alert on the root and the alerts of ``k`` other alerting nodes drawn at random
(``k`` uniform in ``0..max_others``, at least one when the root itself is silent); alerts that map to
no graph node are dropped. It is domain randomisation over how much of a storm arrives, not a value
fitted on any split: the copies are drawn from the training split only.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from fleetmind.data.graph import DependencyGraph


def thin_incident(
    incident: Mapping[str, Any],
    graph: DependencyGraph,
    rng: np.random.Generator,
    max_others: int = 3,
) -> dict[str, Any] | None:
    """One thinned copy of ``incident`` (same root, graph and fault type; fewer alerts).

    Args:
        incident: a dataset incident (``graph``, ``alerts``, ``root_cause``, ``fault_type``, ...).
        graph: its dependency graph (alerts map to nodes by :meth:`DependencyGraph.node_for_alert`).
        rng: draws ``k`` and which other alerting nodes stay.
        max_others: most alerting nodes kept besides the root.

    Returns:
        The copy (a new dict, the alerts in their original order), or ``None`` when nothing would
        remain (a silent root and no other alerting node).
    """
    root = str(incident["root_cause"])
    on = [(graph.node_for_alert(a.get("labels", {})), a) for a in incident["alerts"]]
    others = sorted({n for n, _ in on if n is not None and n != root})
    has_own = any(n == root for n, _ in on)
    hi = min(max_others, len(others))
    k = int(rng.integers(0, hi + 1)) if hi else 0
    if not has_own:
        k = max(k, 1)
    if k > len(others):  # a silent root and no other alerting node: nothing would remain
        return None
    kept = {root, *(others[i] for i in rng.choice(len(others), size=k, replace=False))}
    return {**incident, "alerts": [a for n, a in on if n in kept]}


def thinned_copies(
    incidents: Sequence[Mapping[str, Any]],
    graphs: Mapping[str, DependencyGraph],
    share: float,
    seed: int,
    max_others: int = 3,
) -> list[dict[str, Any]]:
    """Thinned copies of a seeded ``share`` of ``incidents`` (``round(share * n)`` drawn without
    replacement; those with nothing left are skipped), in the incidents' order."""
    if not 0.0 <= share <= 1.0:
        raise ValueError(f"thin share must lie in [0, 1], got {share}")
    n = int(round(share * len(incidents)))
    if n == 0:
        return []
    rng = np.random.default_rng(seed)
    picked = np.sort(rng.choice(len(incidents), size=n, replace=False))
    out = []
    for i in picked:
        inc = incidents[int(i)]
        copy = thin_incident(inc, graphs[inc["graph"]], rng, max_others)
        if copy is not None:
            out.append(copy)
    return out
