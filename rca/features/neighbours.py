"""Inputs that let the GAT compare neighbours: per-edge comparisons of caller and callee, the
propagation ranker's verdict per node, and the label values alerts carry (XID codes, link kinds).

Used only by models whose :class:`fleetmind.rca.model.GATConfig` has ``neighbours=True``; a model
without the switch (every model trained before 2026-12-02, the released ``models/rca`` among them)
never calls this module and sees exactly the feature matrix of :mod:`fleetmind.rca.features.dense`.

Given one incident's candidate crop (:class:`fleetmind.rca.features.columnar.IncidentCrop`, rows
``x`` of the base features, ``F`` = :data:`fleetmind.rca.features.layout.NUM_FEATURES`) and its alerts,
:func:`neighbour_inputs` returns

* ``node (|V'|, NUM_NODE_EXTRA)`` float32, appended to ``x`` (columns :data:`NODE_EXTRA_NAMES`):

  ==================  =====  ===================================================================
  block               width  meaning
  ==================  =====  ===================================================================
  ``prop:*``          5      the propagation ranker (:class:`fleetmind.rca.propagation.PropagationRanker`,
                             default settings) on the whole graph: tier flags ``root`` (an alert
                             nothing explains), ``explained`` (alerts, all explained by a
                             dependency's), ``silent`` (no alert); ``log1p`` of the score within the
                             tier (blast-radius strength, or alerting dependents of a silent node);
                             ``1 / (1 + rank)`` of the node in the ranker's order
  ``xid:*``           |X|+1  ``log1p`` count of the node's alerts by ``xid`` label over
                             :data:`XID_VOCAB`, plus ``other`` (an ``xid`` outside it)
  ``link:*``          2      ``log1p`` count of alerts whose ``link`` label names an NVLink
                             (``nvl...``) or a PCIe switch (``pcie...``)
  ==================  =====  ===================================================================

* ``edge (|E'|, NUM_EDGE_FEATURES)`` float32, one row per dependency edge of the crop
  (``caller -> callee``, i.e. dependent -> dependency, the order of ``edge_index``), columns
  :data:`EDGE_FEATURE_NAMES`:

  ``both_alert``  1 when caller and callee both have an alert;
  ``same_role``   Jaccard overlap of the keyword roles (``kw:*`` groups: latency, error, GPU, down, ...)
                  of the two nodes' alerts; the alert-side stand-in for "the same metric role is
                  anomalous at both ends" (0 when neither alerts);
  ``onset_diff``  caller's first alert minus callee's, as a share of the incident span
                  (``time:first_rel`` difference, in [-2, 2]; positive: the callee started first, as a
                  cause precedes its symptom); 0 unless both alert;
  ``callee_first`` 1 when both alert and the callee's first alert is strictly earlier;
  ``z_ratio``     ``log1p(s_callee) - log1p(s_caller)`` of the severity-weighted alert strength
                  ``s = 2 critical + warning + 0.5 (info + other)`` (the simulated alerts carry no
                  z-score; a callee that alerts harder than its caller is the likelier cause).

The same edge row is used for both message directions; the relation embedding tells them apart.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from fleetmind.data.graph import DependencyGraph
from fleetmind.rca.features.columnar import AlertColumns, _label_info
from fleetmind.rca.features.layout import _OFF_KW, _OFF_SEV, _OFF_TIME
from fleetmind.rca.features.mapping import _static, node_index_for_alert
from fleetmind.rca.propagation import (
    PropagationConfig,
    PropagationRanker,
    _Alert,
    alert_item,
    node_order,
)

XID_VOCAB: tuple[str, ...] = (
    "13",
    "31",
    "43",
    "45",
    "48",
    "61",
    "62",
    "63",
    "64",
    "68",
    "69",
    "74",
    "79",
    "92",
    "94",
    "95",
    "119",
    "120",
)
"""XID codes with their own column: the ones NVIDIA's XID catalog lists as common in data-centre
fleets (graphics engine exception 13, MMU 31, stopped processing 43/45, ECC 48/63/64/94/95, NVLink 74,
fallen off the bus 79, GSP 119/120, ...). Others count as ``xid:other``."""

NODE_EXTRA_NAMES: tuple[str, ...] = (
    ("prop:root", "prop:explained", "prop:silent", "prop:score_log", "prop:inv_rank")
    + tuple(f"xid:{x}" for x in (*XID_VOCAB, "other"))
    + ("link:nvlink", "link:pcie")
)
"""Columns appended to the base feature matrix of a ``neighbours`` model, in order."""

NUM_NODE_EXTRA = len(NODE_EXTRA_NAMES)

EDGE_FEATURE_NAMES: tuple[str, ...] = (
    "edge:both_alert",
    "edge:same_role",
    "edge:onset_diff",
    "edge:callee_first",
    "edge:z_ratio",
)
"""Columns of the per-edge (caller -> callee) input of a ``neighbours`` model, in order."""

NUM_EDGE_FEATURES = len(EDGE_FEATURE_NAMES)

_XID_INDEX = {x: i for i, x in enumerate(XID_VOCAB)}
_OFF_XID = 5
_OFF_LINK = _OFF_XID + len(XID_VOCAB) + 1
_SEV_WEIGHTS = np.array([2.0, 1.0, 0.5, 0.5], dtype=np.float32)  # critical, warning, info, other


def edge_features(x: np.ndarray, edge_index: np.ndarray) -> np.ndarray:
    """Per-edge caller/callee comparisons from the base feature rows (see the module docstring).

    Args:
        x: float32 ``(|V'|, F)`` base features of the crop.
        edge_index: int64 ``(2, |E'|)`` dependency edges ``caller -> callee`` in crop indices.

    Returns:
        float32 ``(|E'|, NUM_EDGE_FEATURES)``.
    """
    u, w = edge_index[0], edge_index[1]
    out = np.zeros((u.size, NUM_EDGE_FEATURES), dtype=np.float32)
    if u.size == 0:
        return out
    alert = x[:, 0] > 0
    both = alert[u] & alert[w]
    roles = x[:, _OFF_KW:_OFF_TIME] > 0
    inter = (roles[u] & roles[w]).sum(1)
    union = (roles[u] | roles[w]).sum(1)
    first = x[:, _OFF_TIME + 0]
    diff = np.where(both, first[u] - first[w], 0.0)
    counts = np.expm1(x[:, _OFF_SEV : _OFF_SEV + 4].astype(np.float64))
    strength = np.log1p(counts @ _SEV_WEIGHTS.astype(np.float64))
    out[:, 0] = both
    out[:, 1] = np.where(union > 0, inter / np.maximum(union, 1), 0.0)
    out[:, 2] = diff
    out[:, 3] = both & (first[w] < first[u])
    out[:, 4] = strength[w] - strength[u]
    return out


Alerts = Sequence[Mapping[str, Any]] | AlertColumns
"""Alert dicts, or :class:`~fleetmind.rca.features.columnar.AlertColumns` that carry their ``labels``."""


def propagation_columns(graph: DependencyGraph, alerts: Alerts) -> np.ndarray:
    """The ``prop:*`` block for every node of ``graph``: float32 ``(|V|, 5)``.

    The propagation ranker's tiers, scores and order (:class:`fleetmind.rca.propagation.PropagationRanker`
    at its defaults, the same numbers its ``find_root_causes`` gives), computed without building a
    ranked cause per node: each alert is mapped once (vectorised label mapping, memoised per graph),
    and the order is one ``lexsort``. ``startsAt`` may be RFC 3339 or unix seconds (the service passes
    seconds). From :class:`~fleetmind.rca.features.columnar.AlertColumns` (the service's parse) it
    reads the labels and start times the columns keep; they carry no annotations, so every alert's
    strength comes from its severity, as for the service's alert dicts.
    """
    n = graph.num_nodes
    ranker = PropagationRanker(PropagationConfig(explain_top=0))
    items = (
        _column_items(_labelled(alerts), ranker.config)
        if isinstance(alerts, AlertColumns)
        else _mapped_items(graph, alerts, ranker.config)
    )
    scores, _, _ = ranker.score_items(graph, items)
    out = np.zeros((n, 5), dtype=np.float32)
    root = scores >= 2.0e6
    explained = ~root & (scores >= 1.0e6)
    s = scores - np.where(root, 2.0e6, np.where(explained, 1.0e6, 0.0))
    out[:, 0] = root
    out[:, 1] = explained
    out[:, 2] = ~(root | explained)
    out[:, 3] = np.log1p(np.maximum(s, 0.0))
    rank = np.empty(n, dtype=np.float64)
    rank[node_order(scores)] = np.arange(n, dtype=np.float64)
    out[:, 4] = 1.0 / (1.0 + rank)
    return out


def _mapped_items(
    graph: DependencyGraph, alerts: Sequence[Mapping[str, Any]], cfg: PropagationConfig
) -> list[_Alert]:
    """The ranker's mapped alerts (what its ``_alerts`` builds: grouped by node in first-seen order,
    ``severity="none"`` and unmapped alerts dropped), with one label-set lookup per alert."""
    st = _static(graph)
    memo = st.label_info
    by_node: dict[int, list[_Alert]] = {}
    for a in alerts:
        labels = a.get("labels") or {}
        if labels.get("severity") == "none":
            continue
        try:  # the label-set memo the feature columns fill (the same mapping rules)
            info = memo.get(tuple(labels.items()))
        except TypeError:
            info = None
        v = (info if info is not None else _label_info(graph, st, labels))[0]
        if v is None:
            continue
        by_node.setdefault(v, []).append(alert_item(v, a, cfg))
    return [it for group in by_node.values() for it in group]


def _labelled(cols: AlertColumns) -> AlertColumns:
    if cols.labels is None:
        raise TypeError(
            "a neighbours GAT reads alert label values: pass the alert dicts, or AlertColumns "
            "built with their labels (serving.rca.parse.plain_columns(..., labels=True))"
        )
    return cols


def _column_items(cols: AlertColumns, cfg: PropagationConfig) -> list[_Alert]:
    """:func:`_mapped_items` of alerts given as columns with labels (no annotations).

    What :func:`~fleetmind.rca.propagation.alert_item` reads from such an alert, built directly: on
    the service's hot path a dict per alert for ``alert_item`` cost about 5 % of a request.
    """
    by_node: dict[int, list[_Alert]] = {}
    labels = cols.labels or []
    for v, lab, t in zip(cols.rows.tolist(), labels, cols.starts.tolist(), strict=True):
        sev = lab.get("severity")
        if sev == "none":
            continue
        by_node.setdefault(v, []).append(
            _Alert(
                node=v,
                metric=lab.get("metric"),
                start=0.0 if t != t else t,  # NaN: no start, as _parse_time reads a missing one
                z=2.0 * cfg.z_ref if sev == "critical" else cfg.z_ref,
                delta=None,
            )
        )
    return [it for group in by_node.values() for it in group]


def label_columns(graph: DependencyGraph, alerts: Alerts) -> np.ndarray:
    """The ``xid:*`` and ``link:*`` blocks for every node of ``graph``: float32 ``(|V|, |X| + 3)``."""

    n = graph.num_nodes
    width = len(XID_VOCAB) + 3
    cnt = np.zeros((n, width), dtype=np.float32)
    st = _static(graph)
    if isinstance(alerts, AlertColumns):
        pairs: Any = zip(_labelled(alerts).labels or [], alerts.rows.tolist(), strict=True)
    else:
        pairs = ((a.get("labels") or {}, -1) for a in alerts)
    for labels, row in pairs:
        xid = labels.get("xid")
        link = labels.get("link")
        if xid is None and link is None:
            continue
        v = row if row >= 0 else node_index_for_alert(graph, labels, st)
        if v is None:
            continue
        if xid is not None:
            cnt[v, _XID_INDEX.get(str(xid), len(XID_VOCAB))] += 1.0
        if link is not None:
            s = str(link).lower()
            if s.startswith("nvl"):
                cnt[v, len(XID_VOCAB) + 1] += 1.0
            elif s.startswith("pcie"):
                cnt[v, len(XID_VOCAB) + 2] += 1.0
    return np.log1p(cnt)


def neighbour_inputs(
    graph: DependencyGraph,
    alerts: Alerts,
    x: np.ndarray,
    keep: np.ndarray,
    edge_index: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """Node and edge inputs of a ``neighbours`` model for one incident's crop.

    Args:
        graph: the whole dependency graph.
        alerts: the incident's Alertmanager alert objects (dicts: the label values are read), or
            their :class:`~fleetmind.rca.features.columnar.AlertColumns` with ``labels``.
        x: float32 ``(|V'|, F)`` base features of the kept nodes.
        keep: int64 ``(|V'|,)`` whole-graph indices of the kept nodes.
        edge_index: int64 ``(2, |E'|)`` crop edges in crop indices.

    Returns:
        ``(node (|V'|, NUM_NODE_EXTRA), edge (|E'|, NUM_EDGE_FEATURES))``, float32.
    """
    node = np.concatenate(
        [propagation_columns(graph, alerts)[keep], label_columns(graph, alerts)[keep]], axis=1
    )
    return np.ascontiguousarray(node, dtype=np.float32), edge_features(x, edge_index)
