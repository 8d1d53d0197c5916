"""Dense per-node alert features of the whole graph (:func:`alert_features`) and the candidate mask (:func:`candidate_mask`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from fleetmind.data.graph import (
    EDGE_KINDS,
    DependencyGraph,
)
from fleetmind.rca.features.layout import (
    _N_NAME,
    _N_SEV,
    _NAME_INDEX,
    _OFF_KW,
    _OFF_NBR,
    _OFF_SEV,
    _OFF_TIME,
    _SEV_INDEX,
    NUM_FEATURES,
)
from fleetmind.rca.features.mapping import _GraphStatic, _keywords, _static, expand_hops, map_alerts
from fleetmind.rca.features.times import _alert_times, _node_timing


@dataclass
class AlertFeatures:
    """Result of :func:`alert_features`.

    Attributes:
        x: float32 array ``(|V|, F)``.
        alerting: bool array ``(|V|,)``, True where at least one alert maps onto the node.
        unmapped: number of alerts that matched no node.
        recent: bool array ``(|V|,)``, True where a node has a recent (non-stale) alert.
    """

    x: np.ndarray
    alerting: np.ndarray
    unmapped: int
    recent: np.ndarray | None = None


def alert_features(graph: DependencyGraph, alerts: Sequence[Mapping[str, Any]]) -> AlertFeatures:
    """Compute the per-node feature matrix of one incident.

    Args:
        graph: the dependency graph.
        alerts: Alertmanager v4 alert objects; ``labels`` map them onto nodes, ``startsAt``/``endsAt``
            (RFC 3339) time them, ``status`` is ``firing`` or ``resolved``.

    Returns:
        :class:`AlertFeatures` with ``x`` of shape ``(|V|, F)``, ``F =`` :data:`NUM_FEATURES`.

    Raises:
        DataError: when a timestamp is malformed or an alert is not a mapping.
    """
    st = _static(graph)
    n = st.n
    x = np.zeros((n, NUM_FEATURES), dtype=np.float32)
    x[:, _OFF_NBR:] = st.base_rows()
    idx = map_alerts(graph, alerts) if alerts else []
    mapped = _MappedAlerts.read(alerts, idx)
    alerting = np.zeros(n, dtype=bool)
    # no-alert defaults for the time block
    x[:, _OFF_TIME + 0] = 1.0
    x[:, _OFF_TIME + 1] = 1.0
    x[:, _OFF_TIME + 6] = 1.0
    recent_alerting = alerting
    if mapped.rows:
        r = np.asarray(mapped.rows, dtype=np.int64)
        alerting[r] = True
        x[r, 0] = 1.0
        cnt = np.zeros((n, _N_SEV + _N_NAME), dtype=np.float32)
        np.add.at(cnt, (r, np.asarray(mapped.sev)), 1.0)
        np.add.at(cnt, (r, _N_SEV + np.asarray(mapped.name_col)), 1.0)
        x[:, _OFF_SEV:_OFF_KW] = np.log1p(cnt)
        # keyword counts: alerts per (node, distinct name), times each name's keyword flags (0/1);
        # small integer counts, so the float32 product is exact
        per_name = np.zeros((n, len(mapped.names)), dtype=np.float32)
        np.add.at(per_name, (r, np.asarray(mapped.name_u)), 1.0)
        kw = per_name @ np.stack([_keywords(nm) for nm in mapped.names])
        x[:, _OFF_KW:_OFF_TIME] = np.log1p(kw)
        tm = _node_timing(mapped.starts, mapped.ends, r, n)
        if tm is not None:
            _fill_timing(x, tm, r, mapped.firing, alerting)
            recent_alerting = np.isfinite(tm[6])
        _fill_neighbour_shares(x, st, recent_alerting)
    return AlertFeatures(x=x, alerting=alerting, unmapped=mapped.unmapped, recent=recent_alerting)


@dataclass
class _MappedAlerts:
    """The alerts of an incident that map onto a node, one entry per alert in each list."""

    rows: list[int]
    """Node index of each alert."""
    sev: list[int]
    """Severity column of each alert."""
    name_col: list[int]
    """Alertname column of each alert (the last column: a name outside the vocabulary)."""
    name_u: list[int]
    """Index into :attr:`names` of each alert's name."""
    names: dict[str, int]
    """The distinct alert names of this incident, in order of first appearance."""
    starts: list[float]
    ends: list[float]
    firing: list[float]
    unmapped: int
    """Alerts that matched no node."""

    @classmethod
    def read(cls, alerts: Sequence[Mapping[str, Any]], idx: Sequence[int | None]) -> _MappedAlerts:
        """Read ``alerts`` given each one's node index (None: unmapped)."""
        out = cls([], [], [], [], {}, [], [], [], 0)
        names = out.names
        sev_get, name_get = _SEV_INDEX.get, _NAME_INDEX.get
        for a, v in zip(alerts, idx, strict=True):
            if v is None:
                out.unmapped += 1
                continue
            labels = a.get("labels") or {}
            name = str(labels.get("alertname", ""))
            out.rows.append(v)
            out.sev.append(sev_get(str(labels.get("severity", "")).lower(), _N_SEV - 1))
            out.name_col.append(name_get(name, _N_NAME - 1))
            u = names.get(name)
            if u is None:
                u = names[name] = len(names)
            out.name_u.append(u)
            s, e, f = _alert_times(a)
            out.starts.append(s)
            out.ends.append(e)
            out.firing.append(f)
        return out


def _fill_timing(
    x: np.ndarray,
    tm: tuple[Any, ...],
    r: np.ndarray,
    firing: list[float],
    alerting: np.ndarray,
) -> None:
    """Set the time block of the alerting nodes' rows from ``_node_timing``'s result ``tm``."""
    n = alerting.size
    t_last, t0, span, dur_per_alert, first, last, first_recent = tm
    dur = np.zeros(n)
    np.add.at(dur, r, dur_per_alert)
    nal = np.bincount(r, minlength=n).astype(np.float64)
    fire = np.bincount(r, weights=np.asarray(firing), minlength=n)
    a_idx = np.flatnonzero(alerting)
    fa, la = first[a_idx], last[a_idx]
    x[a_idx, _OFF_TIME + 0] = np.clip(fa / span, -1.0, 1.0)
    x[a_idx, _OFF_TIME + 1] = np.clip(la / span, -1.0, 1.0)
    x[a_idx, _OFF_TIME + 2] = np.minimum(np.log1p((t_last - t0 - fa) / 60.0), 10.0)
    x[a_idx, _OFF_TIME + 3] = np.minimum(np.log1p((t_last - t0 - la) / 60.0), 10.0)
    x[a_idx, _OFF_TIME + 4] = (fa < 0.0).astype(np.float32)
    rec_idx = np.flatnonzero(np.isfinite(first_recent))
    fr = first_recent[rec_idx]
    x[rec_idx, _OFF_TIME + 5] = (fr <= 1.0).astype(np.float32)
    if len(rec_idx) > 1:
        # dense rank of the first recent alert time, ties share a rank
        uniq, inv = np.unique(fr, return_inverse=True)
        x[rec_idx, _OFF_TIME + 6] = inv / max(len(uniq) - 1, 1)
    else:
        x[rec_idx, _OFF_TIME + 6] = 0.0
    x[a_idx, _OFF_TIME + 7] = np.log1p(dur[a_idx] / nal[a_idx] / 60.0)
    x[a_idx, _OFF_TIME + 8] = fire[a_idx] / nal[a_idx]


def _fill_neighbour_shares(x: np.ndarray, st: _GraphStatic, recent_alerting: np.ndarray) -> None:
    """Set the share of recently alerting neighbours per edge kind and direction of every row."""
    n = st.n
    af = recent_alerting.astype(np.float32)
    src, dst, et = st.src, st.dst, st.et
    out_cnt = np.zeros((len(EDGE_KINDS), n), dtype=np.float32)
    in_cnt = np.zeros((len(EDGE_KINDS), n), dtype=np.float32)
    lin_out = et * n + src  # node src's dependency dst alerts
    lin_in = et * n + dst  # node dst's dependent src alerts
    out_cnt.reshape(-1)[:] = np.bincount(lin_out, weights=af[dst], minlength=len(EDGE_KINDS) * n)
    in_cnt.reshape(-1)[:] = np.bincount(lin_in, weights=af[src], minlength=len(EDGE_KINDS) * n)
    cols = _OFF_NBR + 4 * np.arange(len(EDGE_KINDS))
    inv_deg = st.inv_deg_rows()
    x[:, cols] = (out_cnt * inv_deg[:, 0]).T
    x[:, cols + 2] = (in_cnt * inv_deg[:, 1]).T


def candidate_mask(graph: DependencyGraph, feats: AlertFeatures, hops: int | None) -> np.ndarray:
    """Root-cause candidates: nodes within ``hops`` undirected hops of a node with a recent alert.

    A root either alerts itself or has alerting dependents next to it, so a small radius keeps the
    root while cutting the graph the GAT runs on by an order of magnitude. Falls back to nodes with any
    alert, and to the whole graph when nothing alerts or ``hops`` is ``None``.

    Returns:
        bool ``(|V|,)``.
    """
    n = graph.num_nodes
    if hops is None:
        return np.ones(n, dtype=bool)
    seeds = feats.recent if feats.recent is not None and feats.recent.any() else feats.alerting
    if not seeds.any():
        return np.ones(n, dtype=bool)
    src, dst = graph.edge_index
    return expand_hops(src, dst, seeds, hops)
