"""Parsimony for lone alerts: a quiet node never outranks the only alerting node it could explain.

When one node of an incident alerts and none of the nodes around it do, there are two kinds of
explanation: the alerting node failed (a local fault, nothing else needed), or a quiet node next to
it failed and its fault showed on exactly that one node and nowhere else. The second asks for more
(a fault that stays silent where it happens and spreads to one dependent only) and explains nothing
the first does not, so it should never rank higher. The GAT cannot learn this from FleetMind's
simulated incidents: every one of them has at least ``min_symptom_nodes`` (2) alerting nodes besides
the root (:class:`fleetmind.data.rca_gen.alerts.AlertSimConfig`) and a fifth have silent roots, so it
has seen quiet dependencies blamed for what their dependents report, never a lone alert. On
origin-only storms (only the root's own alerts) the released model put the root first in 0.91 of
231 validation storms; every miss ranked a quiet neighbour first (the host's ToR switch, the config
agent's global store, a pod's service, a router's callees).

:func:`lone_alert_cap` applies the rule to one incident's candidate subgraph (what the GAT scores):
in each connected group of candidates that holds exactly one alerting node, every quiet candidate's
logit is capped ``margin`` below that node's. Groups with two or more alerting nodes are left
alone, so a quiet common upstream of several symptoms (a dead switch behind unreachable hosts)
keeps whatever score the model gives it. No label is read: only which candidates alert and how they
are joined.
"""

from __future__ import annotations

import math

import numpy as np

LONE_ALERT_MARGIN = math.log(2.0)
"""Logit gap (natural log) by which a quiet candidate stays below the lone alerting node it joins:
at most half as likely (on the validation storms any positive gap gives the same ranking)."""


def lone_alert_cap(
    logits: np.ndarray,
    edge_index: np.ndarray,
    alerting: np.ndarray,
    margin: float = LONE_ALERT_MARGIN,
) -> np.ndarray | None:
    """Cap quiet candidates' logits below the lone alerting node of their connected group.

    Args:
        logits: float ``(m,)`` root-cause logits of the candidate subgraph's nodes.
        edge_index: int ``(2, E)`` dependency edges between candidates (subgraph indices; the
            direction is ignored: a fault may show on either end).
        alerting: bool ``(m,)``, True where at least one alert lands on the candidate.
        margin: logit gap kept below the alerting node (>= 0).

    Returns:
        float64 ``(m,)`` capped logits, or ``None`` when no logit changes (no group with exactly one
        alerting node has a quiet candidate scored above ``lone - margin``).
    """
    from scipy.sparse import coo_matrix
    from scipy.sparse.csgraph import connected_components

    if margin < 0 or not math.isfinite(margin):
        raise ValueError(f"lone-alert margin must be a finite number >= 0, got {margin}")
    z = np.asarray(logits, dtype=np.float64)
    alerting = np.asarray(alerting, dtype=bool)
    m = z.size
    if m < 2 or not alerting.any() or alerting.all():
        return None
    ei = np.asarray(edge_index, dtype=np.int64).reshape(2, -1)
    adj = coo_matrix((np.ones(ei.shape[1]), (ei[0], ei[1])), shape=(m, m))
    n_groups, group = connected_components(adj, directed=False)
    per_group = np.bincount(group[alerting], minlength=n_groups)
    lone = np.flatnonzero(alerting & (per_group[group] == 1))  # the lone alerting node of its group
    if lone.size == 0:
        return None
    ceiling = np.full(n_groups, np.inf)
    ceiling[group[lone]] = z[lone] - margin
    cap = np.where(alerting, np.inf, ceiling[group])
    if not (z > cap).any():
        return None
    return np.minimum(z, cap)
