"""The serving fast path: an incident's alerts column-wise (:class:`AlertColumns`) and its features on the candidate subgraph only (:func:`incident_crop`, :func:`crop_columns`).

Gives exactly (bit for bit) the rows of :func:`fleetmind.rca.features.dense.alert_features` that
:func:`fleetmind.rca.features.dense.candidate_mask` keeps, computed for the kept nodes only.
"""

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
from fleetmind.rca.features.mapping import (
    ENTRY_BYTES,
    LABEL_BYTES,
    ByteMemo,
    _GraphStatic,
    _keywords,
    _node_index,
    _static,
    expand_hops,
    label_dict_bytes,
    node_index_for_alert,
)
from fleetmind.rca.features.times import _NAN, _alert_times, _node_timing


# ------------------------------------------------------------------------------ candidate crop
@dataclass
class IncidentCrop:
    """One incident's features on its candidate subgraph (what the GAT runs on).

    Attributes:
        x: float32 ``(|V'|, F)``: the rows ``keep`` of :func:`~fleetmind.rca.features.dense.alert_features`'s matrix.
        keep: int64 ``(|V'|,)`` indices of the kept nodes in the whole graph (sorted).
        edge_index: int64 ``(2, |E'|)`` dependency edges between kept nodes, in subgraph indices.
        edge_type: int64 ``(|E'|,)`` their kinds.
        alerting: bool ``(|V|,)``, True where at least one alert maps onto the node.
        unmapped: number of alerts that matched no node.
    """

    x: np.ndarray
    keep: np.ndarray
    edge_index: np.ndarray
    edge_type: np.ndarray
    alerting: np.ndarray
    unmapped: int


_LabelInfo = tuple[int | None, int, int, str]


@dataclass(eq=False)
class AlertColumns:
    """An incident's alerts as :func:`crop_columns` reads them: the mapped alerts, column-wise.

    Built by :func:`alert_columns` from alert dicts, or by :func:`columns_from_parsed` from a
    request body parsed elsewhere (the service skips the dicts). Valid on ``graph`` only.

    Attributes:
        graph: the graph whose node indices ``rows`` are.
        rows: int64 ``(A,)`` node index of each mapped alert, in alert order.
        sev: int64 ``(A,)`` severity column (``sev:*`` block offset).
        name_col: int64 ``(A,)`` alertname column (``name:*`` block offset).
        name_u: int64 ``(A,)`` index of each alert's name in ``names``.
        names: the distinct alertnames, in order of first appearance.
        starts: float64 ``(A,)`` ``startsAt`` in unix seconds, NaN where absent.
        ends: float64 ``(A,)`` ``endsAt``, NaN where absent (and for a firing alert whose end is
            not after its start).
        firing: float64 ``(A,)``, 1.0 for a firing alert, 0.0 for a resolved one.
        unmapped: alerts that matched no node.
        count: all alerts, mapped or not (``len()``).
        labels: the label set of each mapped alert, in ``rows`` order, for models that read label
            values (a ``neighbours`` GAT); ``None`` unless the builder was asked for them. No
            annotations: the service's parse drops them, as its alert dicts do.
    """

    graph: DependencyGraph
    rows: np.ndarray
    sev: np.ndarray
    name_col: np.ndarray
    name_u: np.ndarray
    names: list[str]
    starts: np.ndarray
    ends: np.ndarray
    firing: np.ndarray
    unmapped: int
    count: int
    labels: list[Mapping[str, str]] | None = None

    def __len__(self) -> int:
        return self.count


_LOG1P_TABLE = np.log1p(np.arange(4096, dtype=np.float32))
"""``log1p`` of the float32 counts 0..4095 (the values :func:`~fleetmind.rca.features.dense.alert_features` takes it of)."""


def _log1p_counts(counts: np.ndarray) -> np.ndarray:
    """float32 ``log1p`` of non-negative integer counts (int64 array), by table when small."""
    if counts.size and int(counts.max()) >= _LOG1P_TABLE.size:
        return np.log1p(counts.astype(np.float32))
    return _LOG1P_TABLE[counts]


def _label_info(graph: DependencyGraph, st: _GraphStatic, labels: Mapping[str, Any]) -> _LabelInfo:
    """``(node index or None, severity column, alertname column, alertname)`` of a label set.

    Memoised per graph on the label set itself (alert storms repeat label sets across incidents),
    in a memo bounded by bytes (:class:`~fleetmind.rca.features.mapping.ByteMemo`; a label set of
    more than a few KB is not kept).
    """
    # the items in their order are the key (cheaper than a frozenset; the same labels in another
    # order are just another entry); unhashable values fall back to strings, as in map_alerts
    key: Any = tuple(labels.items())
    try:
        info = st.label_info.get(key)
    except TypeError:
        key = ("str", *sorted((str(k), str(v)) for k, v in labels.items()))
        info = st.label_info.get(key)
    if info is None:
        name = str(labels.get("alertname", ""))
        info = (
            node_index_for_alert(graph, labels, st),
            _SEV_INDEX.get(str(labels.get("severity", "")).lower(), _N_SEV - 1),
            _NAME_INDEX.get(name, _N_NAME - 1),
            name,
        )
        st.label_info.put(key, info, label_dict_bytes(labels))
    return info


def incident_crop(
    graph: DependencyGraph,
    alerts: Sequence[Mapping[str, Any]] | AlertColumns,
    hops: int | None,
) -> IncidentCrop:
    """Features of one incident on its candidate subgraph, computed for the kept nodes only.

    Gives exactly (bit for bit) the rows of :func:`~fleetmind.rca.features.dense.alert_features` that
    :func:`~fleetmind.rca.features.dense.candidate_mask` keeps, and the edges between them, in the layout of
    ``rca.lightning_module.crop_incident``; faster because the per-node work is done on the kept
    nodes (a few hundred of a 1,000-node graph) and each alert costs one memoised lookup of its label
    set (node, severity and alertname columns together). ``startsAt`` / ``endsAt`` may be RFC 3339
    strings or unix seconds (see :func:`~fleetmind.rca.features.times.parse_time`).

    Args:
        graph: the dependency graph.
        alerts: Alertmanager v4 alert objects, or their :class:`AlertColumns` on ``graph``
            (:func:`alert_columns`, or the service's parse of a request body).
        hops: candidate radius (:func:`~fleetmind.rca.features.dense.candidate_mask`; ``None`` keeps the whole graph).

    Raises:
        DataError: when a timestamp is malformed.
    """
    cols = alerts if isinstance(alerts, AlertColumns) else alert_columns(graph, alerts)
    return crop_columns(graph, cols, hops)


def alert_columns(graph: DependencyGraph, alerts: Sequence[Mapping[str, Any]]) -> AlertColumns:
    """What :func:`crop_columns` needs of each alert, column-wise (see :class:`AlertColumns`).

    Each alert costs one memoised lookup of its label set (node, severity and alertname columns
    together). ``startsAt`` / ``endsAt`` may be RFC 3339 strings or unix seconds (see
    :func:`~fleetmind.rca.features.times.parse_time`).

    Raises:
        DataError: when a timestamp is malformed.
    """
    st = _static(graph)
    infos: list[_LabelInfo] = []
    starts: list[float] = []
    ends: list[float] = []
    firing: list[float] = []
    unmapped = 0
    memo = st.label_info
    for a in alerts:
        labels = a.get("labels") or {}
        try:
            info = memo.get(tuple(labels.items()))
        except TypeError:
            info = None
        if info is None:
            info = _label_info(graph, st, labels)
        if info[0] is None:
            unmapped += 1
            continue
        infos.append(info)
        # _alert_times, inlined for the common alert (unix-second floats, a plain status)
        s = a.get("startsAt")
        e = a.get("endsAt")
        status = a.get("status", "firing")
        if (
            (s is None or s.__class__ is float)
            and (e is None or e.__class__ is float)
            and (status == "firing" or status == "resolved")
        ):
            if status == "firing":
                starts.append(_NAN if s is None else s)
                ends.append(_NAN if e is None or s is not None and e <= s else e)
                firing.append(1.0)
            else:
                starts.append(_NAN if s is None else s)
                ends.append(_NAN if e is None else e)
                firing.append(0.0)
        else:
            s, e, f = _alert_times(a)
            starts.append(s)
            ends.append(e)
            firing.append(f)
    return _columns(graph, infos, unmapped, len(alerts), starts, ends, firing)


def _columns(
    graph: DependencyGraph,
    infos: Sequence[_LabelInfo],
    unmapped: int,
    count: int,
    starts: Any,
    ends: Any,
    firing: Any,
) -> AlertColumns:
    """:class:`AlertColumns` of the mapped alerts' label infos and times (lists or arrays)."""
    names: dict[str, int] = {}
    if infos:
        rows, sev_i, name_i, alert_names = zip(*infos, strict=True)
        name_u = [names.setdefault(nm, len(names)) for nm in alert_names]
    else:
        rows = sev_i = name_i = ()
        name_u = []
    return AlertColumns(
        graph=graph,
        rows=np.asarray(rows, dtype=np.int64),
        sev=np.asarray(sev_i, dtype=np.int64),
        name_col=np.asarray(name_i, dtype=np.int64),
        name_u=np.asarray(name_u, dtype=np.int64),
        names=list(names),
        starts=np.asarray(starts, dtype=np.float64),
        ends=np.asarray(ends, dtype=np.float64),
        firing=np.asarray(firing, dtype=np.float64),
        unmapped=unmapped,
        count=count,
    )


def columns_from_parsed(
    graph: DependencyGraph,
    infos: Sequence[_LabelInfo],
    starts: np.ndarray,
    ends: np.ndarray,
    firing: np.ndarray,
    labels: Sequence[Mapping[str, str]] | None = None,
) -> AlertColumns:
    """:class:`AlertColumns` of alerts parsed elsewhere (the service parses request bodies).

    Args:
        graph: the graph the infos were computed on.
        infos: per alert, :func:`label_info` of its labels (or a memo of it).
        starts, ends: float64 ``(A,)`` unix seconds of ``startsAt`` / ``endsAt`` as
            :func:`~fleetmind.rca.features.times.parse_time` reads them, NaN where ``None``.
        firing: bool ``(A,)``, True for ``status == "firing"`` (else ``"resolved"``).
        labels: per alert, its label set (kept for the mapped alerts as :attr:`AlertColumns.labels`).

    Gives what :func:`alert_columns` gives for the same alerts as dicts (the same arrays).
    """
    count = len(infos)
    keep = [j for j in range(count) if infos[j][0] is not None]
    mapped = [infos[j] for j in keep]
    s, e, f = starts[keep], ends[keep], firing[keep]
    # a firing alert's end that is not after its start is Alertmanager's "no end yet"
    with np.errstate(invalid="ignore"):
        e = np.where(f & (e <= s), _NAN, e)
    cols = _columns(graph, mapped, count - len(keep), count, s, e, f.astype(np.float64))
    if labels is not None:
        cols.labels = [labels[j] for j in keep]
    return cols


def label_info(graph: DependencyGraph, labels: Mapping[str, Any]) -> _LabelInfo:
    """``(node index or None, severity column, alertname column, alertname)`` of a label set
    (memoised per graph)."""
    return _label_info(graph, _static(graph), labels)


def label_info_str(graph: DependencyGraph, labels: dict[str, str]) -> _LabelInfo:
    """:func:`label_info` of labels that are ``str -> str`` already (decoded JSON), not memoised
    (the caller memoises, see :func:`label_json_memo`)."""
    name = labels.get("alertname", "")
    return (
        _node_index(graph, _static(graph), labels),
        _SEV_INDEX.get(labels.get("severity", "").lower(), _N_SEV - 1),
        _NAME_INDEX.get(name, _N_NAME - 1),
        name,
    )


def label_json_memo(graph: DependencyGraph) -> ByteMemo:
    """A per-graph memo for callers that key :func:`label_info` by the labels' JSON text.

    Who fills it must store only the :func:`label_info` of what the key decodes to, through
    :func:`put_label_json` (which counts its bytes); it is bounded by bytes
    (:class:`~fleetmind.rca.features.mapping.ByteMemo`) and cleared with the graph's other caches.
    """
    return _static(graph).label_json


def put_label_json(memo: ByteMemo, key: bytes, info: _LabelInfo) -> None:
    """Keep ``info`` (the :func:`label_info` of the JSON text ``key``) in :func:`label_json_memo`."""
    memo.put(key, info, ENTRY_BYTES + 96 + len(key) + len(info[3]))


def label_dict_memo(graph: DependencyGraph) -> ByteMemo:
    """A per-graph memo of label sets keyed by their JSON text (what the text decodes to; see
    :func:`label_json_memo`), for parsers that keep the label values; filled through
    :func:`put_label_dict`."""
    return _static(graph).label_json_dicts


def put_label_dict(memo: ByteMemo, key: bytes, labels: dict[str, str]) -> None:
    """Keep ``labels`` (what the JSON text ``key`` decodes to) in :func:`label_dict_memo`; the
    decoded strings count as long as the text."""
    memo.put(key, labels, ENTRY_BYTES + 2 * len(key) + LABEL_BYTES * len(labels))


def crop_columns(graph: DependencyGraph, cols: AlertColumns, hops: int | None) -> IncidentCrop:
    """:func:`incident_crop` of alerts given as :class:`AlertColumns` on ``graph``."""
    if cols.graph is not graph:
        raise ValueError("AlertColumns were computed on another graph")
    st = _static(graph)
    n = st.n
    unmapped = cols.unmapped
    rows = cols.rows
    alerting = np.zeros(n, dtype=bool)
    timing: tuple[Any, ...] | None = None
    recent_alerting = alerting
    if rows.size:
        alerting[rows] = True
        tm = _node_timing(cols.starts, cols.ends, rows, n)  # the same arithmetic as alert_features
        if tm is not None:
            recent_alerting = np.isfinite(tm[6])
            timing = tm
        else:
            recent_alerting = alerting
    seeds = recent_alerting if recent_alerting.any() else alerting
    mask = _hop_mask(st, seeds, hops)
    keep = np.flatnonzero(mask)
    m = keep.size
    x = np.zeros((m, NUM_FEATURES), dtype=np.float32)
    x[:, _OFF_NBR:] = st.base_rows(keep)
    x[:, _OFF_TIME + 0] = 1.0
    x[:, _OFF_TIME + 1] = 1.0
    x[:, _OFF_TIME + 6] = 1.0
    if rows.size:
        sub = np.full(n, -1, dtype=np.int64)
        sub[keep] = np.arange(m)
        a_idx = np.flatnonzero(alerting & mask)  # alerting kept nodes, sorted
        _fill_alert_counts(x, cols, sub, a_idx, n)
        if timing is not None:
            _fill_alert_timing(x, cols, timing, sub, a_idx, recent_alerting, mask)
        _fill_neighbour_shares(x, st, recent_alerting, keep)
    ei, et = graph.edge_index, graph.edge_type
    if m == n:
        return IncidentCrop(x, keep, ei, et, alerting, unmapped)
    new_id = np.cumsum(mask) - 1
    em = mask[ei[0]] & mask[ei[1]]
    return IncidentCrop(x, keep, new_id[ei[:, em]], et[em], alerting, unmapped)


def _hop_mask(st: _GraphStatic, seeds: np.ndarray, hops: int | None) -> np.ndarray:
    """``(N,)`` bool: the nodes within ``hops`` edges (either direction) of a seed; all nodes when
    ``hops`` is None or there is no seed."""
    if hops is None or not seeds.any():
        return np.ones(st.n, dtype=bool)
    src, dst = st.src, st.dst
    return expand_hops(src, dst, seeds, hops)


def _fill_alert_counts(
    x: np.ndarray, cols: AlertColumns, sub: np.ndarray, a_idx: np.ndarray, n: int
) -> None:
    """Set the alert flag, severity / alertname counts and keyword counts of the crop's alerting
    rows. ``sub``: ``(N,)`` row in ``x`` of each node (-1: cropped away); ``a_idx``: alerting kept
    nodes, sorted."""
    r = cols.rows
    xa = sub[a_idx]  # their rows in x
    na = a_idx.size
    pos = np.full(n, -1, dtype=np.int64)
    pos[a_idx] = np.arange(na)
    ia = pos[r]  # each alert's alerting-kept node (-1: outside the crop)
    in_crop = ia >= 0
    ia = ia[in_crop]
    x[xa, 0] = 1.0
    # alert counts per (node, column): small integers, log1p by table
    n_cols = _N_SEV + _N_NAME
    lin = np.concatenate(
        [
            ia * n_cols + np.asarray(cols.sev)[in_crop],
            ia * n_cols + _N_SEV + np.asarray(cols.name_col)[in_crop],
        ]
    )
    cnt = np.bincount(lin, minlength=na * n_cols).reshape(na, n_cols)
    x[xa, _OFF_SEV:_OFF_KW] = _log1p_counts(cnt)
    names = cols.names
    n_names = len(names)
    per_name = np.bincount(
        ia * n_names + np.asarray(cols.name_u)[in_crop], minlength=na * n_names
    ).reshape(na, n_names)
    # keyword counts: alerts per (node, distinct name) times each name's 0/1 keyword flags
    kw = per_name.astype(np.float32) @ np.stack([_keywords(nm) for nm in names])
    x[xa, _OFF_KW:_OFF_TIME] = _log1p_counts(kw.astype(np.int64))


def _fill_alert_timing(
    x: np.ndarray,
    cols: AlertColumns,
    timing: tuple[Any, ...],
    sub: np.ndarray,
    a_idx: np.ndarray,
    recent_alerting: np.ndarray,
    mask: np.ndarray,
) -> None:
    """Set the time block of the crop's alerting rows from ``_node_timing``'s result (the same
    arithmetic as :func:`fleetmind.rca.features.dense.alert_features`)."""
    r = cols.rows
    n = mask.size
    xa = sub[a_idx]
    t_last, t0, span, dur_each, first, last, first_recent = timing
    # per-alert sums in alert order (np.bincount adds sequentially, like np.add.at)
    dur = np.bincount(r, weights=dur_each, minlength=n)[a_idx]
    nal = np.bincount(r, minlength=n).astype(np.float64)[a_idx]
    fire = np.bincount(r, weights=np.asarray(cols.firing), minlength=n)[a_idx]
    fa, la = first[a_idx], last[a_idx]
    x[xa, _OFF_TIME + 0] = np.clip(fa / span, -1.0, 1.0)
    x[xa, _OFF_TIME + 1] = np.clip(la / span, -1.0, 1.0)
    x[xa, _OFF_TIME + 2] = np.minimum(np.log1p((t_last - t0 - fa) / 60.0), 10.0)
    x[xa, _OFF_TIME + 3] = np.minimum(np.log1p((t_last - t0 - la) / 60.0), 10.0)
    x[xa, _OFF_TIME + 4] = (fa < 0.0).astype(np.float32)
    rec_idx = np.flatnonzero(recent_alerting)
    fr = first_recent[rec_idx]
    rec_in = mask[rec_idx]
    xr = sub[rec_idx[rec_in]]
    x[xr, _OFF_TIME + 5] = (fr[rec_in] <= 1.0).astype(np.float32)
    if len(rec_idx) > 1:  # dense rank over all recently alerting nodes, ties share a rank
        uniq, inv = np.unique(fr, return_inverse=True)
        x[xr, _OFF_TIME + 6] = (inv / max(len(uniq) - 1, 1))[rec_in]
    else:
        x[xr, _OFF_TIME + 6] = 0.0
    x[xa, _OFF_TIME + 7] = np.log1p(dur / nal / 60.0)
    x[xa, _OFF_TIME + 8] = fire / nal


def _fill_neighbour_shares(
    x: np.ndarray, st: _GraphStatic, recent_alerting: np.ndarray, keep: np.ndarray
) -> None:
    """Set the share of recently alerting neighbours per edge kind and direction of every row."""
    n = st.n
    af = recent_alerting.astype(np.float32)
    k_e = len(EDGE_KINDS)
    out_cnt = np.bincount(st.et * n + st.src, weights=af[st.dst], minlength=k_e * n)
    in_cnt = np.bincount(st.et * n + st.dst, weights=af[st.src], minlength=k_e * n)
    out_cnt = out_cnt.astype(np.float32).reshape(k_e, n)[:, keep]
    in_cnt = in_cnt.astype(np.float32).reshape(k_e, n)[:, keep]
    cols = _OFF_NBR + 4 * np.arange(k_e)
    inv_deg = st.inv_deg_rows(keep)
    x[:, cols] = (out_cnt * inv_deg[:, 0]).T
    x[:, cols + 2] = (in_cnt * inv_deg[:, 1]).T
