"""Per-node alert features for the GAT ranker: ``(graph, alerts) -> float32 array (|V|, F)``.

Every alert (an Alertmanager v4 alert object) is mapped to a node with
:meth:`data.graph.DependencyGraph.node_for_alert`; alerts that match no node are ignored (and counted in
:attr:`AlertFeatures.unmapped`). The features of node ``v`` (column blocks, in order, see
:data:`FEATURE_NAMES`):

==================  =====  ==============================================================================
block               width  meaning
==================  =====  ==============================================================================
``alert``           1      1 if at least one alert maps onto ``v``
``sev:*``           4      ``log1p`` count of ``v``'s alerts by severity: critical, warning, info, other
``name:*``          |N|+1  ``log1p`` count by alertname over :data:`ALERTNAME_VOCAB`, plus ``other``
``kw:*``            |K|    ``log1p`` count of alerts whose name contains a keyword group
                           (:data:`KEYWORD_GROUPS`; lets unseen alert names, e.g. PetShop's, still say
                           "latency" or "GPU")
``time:*``          9      the incident starts at ``t0``, the first ``startsAt`` within
                           :data:`HORIZON_S` before the latest one (``t_last``); older alerts are
                           ``stale`` (Watchdog, long-running background noise). Columns: first / last
                           ``startsAt`` minus ``t0`` over the span ``t_last - t0`` (clipped to [-1, 1]);
                           their ages ``t_last - startsAt`` (``log1p`` minutes, capped at 10); ``stale``
                           flag; ``earliest`` flag (first recent alert within 1 s of ``t0``); dense rank
                           of the first recent alert among recently alerting nodes in [0, 1]; mean
                           alert duration (``log1p`` minutes, open alerts end at ``t_last``); share of
                           the node's alerts still firing. Nodes without alerts get 1.0 for the relative
                           times and the rank, 0 elsewhere.
``nbr:*``           24     for each edge kind and direction (``out`` = dependencies, ``in`` =
                           dependents): the share of neighbours with a recent (non-stale) alert, and
                           ``log1p`` neighbour count
``kind:*``          12     one-hot node kind (:data:`data.graph.NODE_KINDS`)
``deg:*``           2      ``log1p`` in- and out-degree over all edge kinds
==================  =====  ==============================================================================

Vocabulary changes change :data:`FEATURE_VERSION`; a model stores the version it was trained with and
refuses features of another one. Structural arrays are cached per graph object, so a 1,000-node graph
with 200 alerts takes a few milliseconds (numpy only, no torch).
"""

from __future__ import annotations

import operator
import re
import weakref
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import numpy as np

from fleetmind.data.errors import DataError
from fleetmind.data.graph import (
    _KIND_SPECIFICITY,
    EDGE_KINDS,
    NODE_KINDS,
    OVERRIDE_LABEL,
    DependencyGraph,
)

FEATURE_VERSION = 2
"""Bumped whenever the feature layout or a vocabulary changes."""

SEVERITIES: tuple[str, ...] = ("critical", "warning", "info")
"""Known severities; anything else (``page``, ``none``, missing) counts as ``other``."""

ALERTNAME_VOCAB: tuple[str, ...] = (
    # GPU / DCGM
    "GPUEccDoubleBitError",
    "GPUFallenOffBus",
    "GPUFramebufferHigh",
    "GPUHighTemperature",
    "GPUMetricsAbsent",
    "GPUNVLinkBandwidthLow",
    "GPURowRemapFailure",
    "GPUThermalThrottling",
    "GPUUtilizationLow",
    "GPUXidError",
    "NVLinkDown",
    # node (node-exporter)
    "CPUThrottlingHigh",
    "NodeClockNotSynchronising",
    "NodeFilesystemSpaceFillingUp",
    "NodeHardwareFanFailure",
    "NodeHighInletTemperature",
    "NodeMemoryHighUtilization",
    "NodeNetworkReceiveErrs",
    "TargetDown",
    # Kubernetes
    "ImagePullBackOff",
    "KubeAPIErrorBudgetBurn",
    "KubeClientCertificateExpiration",
    "KubeContainerRestartsHigh",
    "KubeDeploymentReplicasMismatch",
    "KubeDeploymentRolloutStuck",
    "KubeHpaMaxedOut",
    "KubeNodeNotReady",
    "KubeNodeUnreachable",
    "KubePodCrashLooping",
    "KubePodImagePullBackOff",
    "KubePodNotReady",
    "PodReadinessProbeFailing",
    # services and model servers
    "GatewayHTTP5xxHigh",
    "InferenceLatencyHigh",
    "KVCacheEvictionRateHigh",
    "KVCacheUtilizationHigh",
    "ModelServerCUDAOOM",
    "ModelServerEngineDead",
    "ModelServerThroughputLow",
    "ModelWeightLoadError",
    "ModelWeightLoadFailures",
    "RequestQueueBacklog",
    "ServiceConfigReloadFailed",
    "ServiceDNSLookupFailures",
    "ServiceErrorRateHigh",
    "ServiceLatencyHigh",
    "TokenThroughputUnstable",
    "TrainingJobNCCLError",
    "TrainingStepTimeHigh",
    # shared infrastructure and WAN
    "ConfigAgentSyncErrors",
    "ConfigPushValidationFailed",
    "CoreDNSDown",
    "CoreDNSErrorsHigh",
    "CoreDNSForwardErrorsHigh",
    "CoreDNSLatencyHigh",
    "CrossClusterLatencyHigh",
    "CrossClusterProbeFailed",
    "CrossClusterRequestErrors",
    "RegistryMirrorDown",
    "RegistryMirrorUpstreamErrors",
    "SwitchPortsDown",
    # meta
    "Watchdog",
    # generic names (PetShop adapter and common Prometheus rules)
    "HighLatency",
    "HighErrorRate",
    "TrafficAnomaly",
    "HighCPU",
    "HighMemory",
)
"""Alert names with their own count column (the simulator's rule catalog, ``data/rca_gen``, plus generic
names); unseen names go to ``name:other`` and still light up their :data:`KEYWORD_GROUPS`."""

KEYWORD_GROUPS: dict[str, tuple[str, ...]] = {
    "gpu": ("gpu", "xid", "dcgm", "cuda", "ecc"),
    "link": ("nvlink", "pcie", "link", "infiniband", "nccl"),
    "memory": ("memory", "oom", "mem"),
    "latency": ("latency", "slow", "timeout", "duration", "p99", "p95"),
    "error": ("error", "fail", "5xx", "availability", "unavailable", "exception"),
    "down": ("down", "unreachable", "notready", "lost", "absent", "offbus"),
    "restart": ("crash", "restart", "backoff", "killed", "evicted"),
    "disk": ("disk", "storage", "volume", "filesystem", "io"),
    "network": ("network", "packet", "dns", "wan", "connection"),
    "saturation": ("cpu", "load", "throttl", "saturat", "pressure", "queue", "util"),
    "thermal": ("temp", "thermal", "power"),
}
"""Keyword groups matched (case-insensitively, as substrings) against each alert name."""

_NAME_INDEX = {n: i for i, n in enumerate(ALERTNAME_VOCAB)}
_SEV_INDEX = {s: i for i, s in enumerate(SEVERITIES)}
_N_SEV = len(SEVERITIES) + 1
_N_NAME = len(ALERTNAME_VOCAB) + 1
_N_KW = len(KEYWORD_GROUPS)
_N_TIME = 9
_N_NBR = 4 * len(EDGE_KINDS)
_N_KIND = len(NODE_KINDS)

FEATURE_NAMES: tuple[str, ...] = (
    ("alert",)
    + tuple(f"sev:{s}" for s in (*SEVERITIES, "other"))
    + tuple(f"name:{n}" for n in (*ALERTNAME_VOCAB, "other"))
    + tuple(f"kw:{k}" for k in KEYWORD_GROUPS)
    + (
        "time:first_rel",
        "time:last_rel",
        "time:first_age_log_min",
        "time:last_age_log_min",
        "time:stale",
        "time:earliest",
        "time:first_rank",
        "time:duration_log_min",
        "time:firing_share",
    )
    + tuple(f"nbr:{d}:{k}:{w}" for k in EDGE_KINDS for d in ("out", "in") for w in ("share", "deg"))
    + tuple(f"kind:{k}" for k in NODE_KINDS)
    + ("deg:in", "deg:out")
)
"""Column names of the feature matrix, in order."""

NUM_FEATURES = len(FEATURE_NAMES)
"""F, the width of the feature matrix."""

_OFF_SEV = 1
_OFF_NAME = _OFF_SEV + _N_SEV
_OFF_KW = _OFF_NAME + _N_NAME
_OFF_TIME = _OFF_KW + _N_KW
_OFF_NBR = _OFF_TIME + _N_TIME
_OFF_KIND = _OFF_NBR + _N_NBR
_OFF_DEG = _OFF_KIND + _N_KIND
assert _OFF_DEG + 2 == NUM_FEATURES

_ZERO_TIME = datetime(1970, 1, 1).timestamp()  # endsAt "0001-01-01..." (firing) falls below this


_NAN = float("nan")


def _alert_times(a: Mapping[str, Any]) -> tuple[float, float, float]:
    """``(start, end, is_firing)`` of one alert for the time features: unix seconds (``startsAt`` /
    ``endsAt`` as RFC 3339 strings or floats), NaN when absent; the end is NaN too for a firing
    alert whose ``endsAt`` is not after its start (Alertmanager's "no end yet")."""
    s = a.get("startsAt")
    if s is not None and s.__class__ is not float:
        s = parse_time(s)
    e = a.get("endsAt")
    if e is not None and e.__class__ is not float:
        e = parse_time(e)
    status = a.get("status", "firing")
    is_firing = status == "firing" or (status != "resolved" and str(status).lower() != "resolved")
    end = _NAN if (e is None or is_firing and s is not None and e <= s) else e
    return (_NAN if s is None else s), end, (1.0 if is_firing else 0.0)


def _node_timing(
    starts: list[float], ends: list[float], r: np.ndarray, n: int
) -> tuple[float, float, float, np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None:
    """Per-node alert timing for the time features (``None`` when no alert has a start time).

    Args:
        starts, ends: per alert, unix seconds or NaN (:func:`_alert_times`).
        r: ``(A,)`` node index of each alert.
        n: number of nodes.

    Returns:
        ``(t_last, t0, span, duration (A,), first (n,), last (n,), first_recent (n,))``: the latest
        start, the earliest start within ``HORIZON_S`` of it, ``max(t_last - t0, 60)`` (s); each
        alert's duration (missing ends: the latest known time); per node the first and last start
        and the first start within the horizon, relative to ``t0`` (``inf``/``-inf`` where none).
    """
    s_arr = np.asarray(starts, dtype=np.float64)
    known = ~np.isnan(s_arr)
    if not known.any():
        return None
    e_arr = np.asarray(ends, dtype=np.float64)
    t_last = float(np.nanmax(s_arr))
    s_arr = np.where(known, s_arr, t_last)
    recent = s_arr >= t_last - HORIZON_S
    t0 = float(s_arr[recent].min())
    span = max(t_last - t0, 60.0)
    e_arr = np.where(np.isnan(e_arr), max(t_last, float(np.nanmax(e_arr, initial=t_last))), e_arr)
    e_arr = np.maximum(e_arr, s_arr)
    rel = s_arr - t0
    first = np.full(n, np.inf)
    last = np.full(n, -np.inf)
    first_recent = np.full(n, np.inf)
    np.minimum.at(first, r, rel)
    np.maximum.at(last, r, rel)
    np.minimum.at(first_recent, r[recent], rel[recent])
    return t_last, t0, span, e_arr - s_arr, first, last, first_recent


_FRAC_RE = re.compile(r"(\.\d{6})\d+")


_TIME_CACHE: dict[str, float | None] = {}
_TIME_CACHE_MAX = 200_000


def parse_time(value: Any) -> float | None:
    """Parse an RFC 3339 timestamp (Alertmanager style, ``Z`` or offset, up to ns) to unix seconds.

    Returns ``None`` for a missing value or Alertmanager's zero time (``0001-01-01T00:00:00Z``).
    Parsed strings are memoised (alert storms repeat the same evaluation timestamps).

    Raises:
        DataError: for a non-empty value that is not RFC 3339.
    """
    if value is None or value == "":
        return None
    if isinstance(value, int | float):
        return float(value)
    if type(value) is str:
        try:
            return _TIME_CACHE[value]
        except KeyError:
            t = _parse_time_str(value)
            if len(_TIME_CACHE) >= _TIME_CACHE_MAX:
                _TIME_CACHE.clear()
            _TIME_CACHE[value] = t
            return t
    return _parse_time_str(value)


def _parse_time_str(value: Any) -> float | None:
    s = str(value).strip()
    if s.startswith("0001-01-01"):
        return None
    dot = s.find(".")
    # more than 6 fraction digits (Go's nanoseconds): keep microseconds; skipped when the first
    # fraction has no 7th digit and there is no other dot (then the pattern cannot match)
    if dot >= 0 and (s[dot + 7 : dot + 8].isdigit() or s.count(".") > 1):
        s = _FRAC_RE.sub(r"\1", s)
    if s.endswith(("Z", "z")):
        s = s[:-1] + "+00:00"
    try:
        dt = datetime.fromisoformat(s)
    except ValueError:
        raise DataError(f"alert timestamp {value!r} is not RFC 3339") from None
    if dt.tzinfo is None:
        from datetime import UTC

        dt = dt.replace(tzinfo=UTC)
    t = dt.timestamp()
    return None if t < _ZERO_TIME else t


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


class _GraphStatic:
    """Per-graph arrays that do not depend on alerts (cached)."""

    def __init__(self, g: DependencyGraph) -> None:
        n = g.num_nodes
        src, dst = g.edge_index
        et = g.edge_type
        self.n = n
        self.src, self.dst, self.et = src, dst, et
        base = np.zeros((n, _N_NBR + _N_KIND + 2), dtype=np.float32)
        self.deg = np.zeros((len(EDGE_KINDS), 2, n), dtype=np.float32)  # [kind, out/in, node]
        for k in range(len(EDGE_KINDS)):
            m = et == k
            self.deg[k, 0] = np.bincount(src[m], minlength=n)
            self.deg[k, 1] = np.bincount(dst[m], minlength=n)
            base[:, 4 * k + 1] = np.log1p(self.deg[k, 0])
            base[:, 4 * k + 3] = np.log1p(self.deg[k, 1])
        base[np.arange(n), _N_NBR + g.node_type] = 1.0
        base[:, _N_NBR + _N_KIND] = np.log1p(self.deg[:, 1].sum(0))
        base[:, _N_NBR + _N_KIND + 1] = np.log1p(self.deg[:, 0].sum(0))
        self.base = base
        self.inv_deg = np.where(self.deg > 0, 1.0 / np.maximum(self.deg, 1), 0.0).astype(np.float32)
        self.alert_cache: dict[Any, int | None] = {}
        self.label_info: dict[Any, tuple[int | None, int, int, str]] = {}
        self.keysets: list[tuple[tuple[str, ...], dict]] | None = None
        self.keyset_getters: list[tuple[int, dict, Any, frozenset[str]]] | None = None
        self.label_json: dict[bytes, tuple[int | None, int, int, str]] = {}


HORIZON_S = 3600.0
"""Alerts that started more than this many seconds before the latest alert are ``stale``."""

_STATIC: weakref.WeakKeyDictionary[DependencyGraph, _GraphStatic] = weakref.WeakKeyDictionary()
_KW_CACHE: dict[str, np.ndarray] = {}


def _static(g: DependencyGraph) -> _GraphStatic:
    st = _STATIC.get(g)
    if st is None or st.n != g.num_nodes:
        st = _GraphStatic(g)
        _STATIC[g] = st
    return st


def _keywords(name: str) -> np.ndarray:
    v = _KW_CACHE.get(name)
    if v is None:
        low = name.lower()
        v = np.array(
            [any(w in low for w in words) for words in KEYWORD_GROUPS.values()], dtype=np.float32
        )
        if len(_KW_CACHE) < 10_000:
            _KW_CACHE[name] = v
    return v


_Rank = tuple[int, int, int]


def _keysets(st: _GraphStatic, g: DependencyGraph) -> list[tuple[tuple[str, ...], dict]]:
    """Nodes grouped by the key set of their ``match`` labels, larger key sets first.

    Each group maps the tuple of label values (in sorted key order) to the best node with them, as
    ``(number of match labels, kind specificity, -index)``: the rank order of ``node_for_alert``.
    """
    if st.keysets is None:
        groups: dict[tuple[str, ...], dict[tuple[str, ...], _Rank]] = {}
        for i, nd in enumerate(g.nodes):
            if not nd.match:
                continue  # a node without match labels is never matched
            m = {str(k): str(v) for k, v in nd.match.items()}
            keys = tuple(sorted(m))
            values = tuple(m[k] for k in keys)
            rank = (len(nd.match), _KIND_SPECIFICITY.get(nd.kind, 0), -i)
            table = groups.setdefault(keys, {})
            if values not in table or rank > table[values]:
                table[values] = rank
        st.keysets = sorted(groups.items(), key=lambda kv: -len(kv[0]))
    return st.keysets


def node_index_for_alert(
    graph: DependencyGraph, labels: Mapping[str, Any], st: _GraphStatic | None = None
) -> int | None:
    """Fast :meth:`data.graph.DependencyGraph.node_for_alert` returning the node index.

    Same rules (``fleetmind_node`` override, ``instance`` standing in for ``node``, all match labels
    equal, most match labels, then the more specific kind, then the first node), but instead of
    checking candidate nodes it looks the alert's values up once per distinct key set of the
    graph's ``match`` labels (a handful), so an alert costs a few dict lookups whatever the graph size.
    """
    st = st if st is not None else _static(graph)
    return _node_index(graph, st, {str(k): str(v) for k, v in labels.items() if v is not None})


def _node_index(graph: DependencyGraph, st: _GraphStatic, lab: dict[str, str]) -> int | None:
    """:func:`node_index_for_alert` of labels already as ``str -> str`` (none ``None``)."""
    sets = st.keyset_getters
    if sets is None:  # per key set: its keys and a C-level getter of its values in key order
        sets = st.keyset_getters = [
            (len(keys), table, _values_getter(keys), frozenset(keys))
            for keys, table in _keysets(st, graph)
        ]
    direct = lab.get(OVERRIDE_LABEL)
    if direct is not None and direct in graph.index:
        return graph.index[direct]
    if "node" not in lab and "instance" in lab:
        lab = {**lab, "node": lab["instance"].rsplit(":", 1)[0]}
    present = lab.keys()
    best: _Rank | None = None
    for size, table, values_of, keys in sets:
        if best is not None and size < best[0]:
            break  # fewer match labels can no longer win
        if not present >= keys:
            continue
        rank = table.get(values_of(lab))
        if rank is not None and (best is None or rank > best):
            best = rank
    return None if best is None else -best[2]


def _values_getter(keys: tuple[str, ...]) -> Any:
    """``lab -> tuple(lab[k] for k in keys)`` (KeyError when one is missing), without a generator."""
    if len(keys) == 1:
        (key,) = keys
        return lambda lab: (lab[key],)
    return operator.itemgetter(*keys)


_MISS = object()


def map_alerts(graph: DependencyGraph, alerts: Sequence[Mapping[str, Any]]) -> list[int | None]:
    """Return the node index of each alert (``None`` when its labels match no node)."""
    st = _static(graph)
    cache = st.alert_cache
    out: list[int | None] = []
    for a in alerts:
        labels = a.get("labels") or {}
        # the label set itself is the cache key (no sorting); unhashable values fall back to strings
        try:
            key: Any = frozenset(labels.items())
        except TypeError:
            key = tuple(sorted((str(k), str(v)) for k, v in labels.items()))
        hit = cache.get(key, _MISS)
        if hit is not _MISS:
            out.append(hit)
            continue
        idx = node_index_for_alert(graph, labels, st)
        if len(cache) < 100_000:
            cache[key] = idx
        out.append(idx)
    return out


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
    x[:, _OFF_NBR:] = st.base
    idx = map_alerts(graph, alerts) if alerts else []
    rows: list[int] = []
    sev_i: list[int] = []
    name_i: list[int] = []
    name_u: list[int] = []  # index into `names`, the distinct alert names of this incident
    names: dict[str, int] = {}
    starts: list[float] = []
    ends: list[float] = []
    firing: list[float] = []
    unmapped = 0
    sev_get, name_get = _SEV_INDEX.get, _NAME_INDEX.get
    for a, v in zip(alerts, idx, strict=True):
        if v is None:
            unmapped += 1
            continue
        labels = a.get("labels") or {}
        name = str(labels.get("alertname", ""))
        rows.append(v)
        sev_i.append(sev_get(str(labels.get("severity", "")).lower(), _N_SEV - 1))
        name_i.append(name_get(name, _N_NAME - 1))
        u = names.get(name)
        if u is None:
            u = names[name] = len(names)
        name_u.append(u)
        s, e, f = _alert_times(a)
        starts.append(s)
        ends.append(e)
        firing.append(f)
    alerting = np.zeros(n, dtype=bool)
    # no-alert defaults for the time block
    x[:, _OFF_TIME + 0] = 1.0
    x[:, _OFF_TIME + 1] = 1.0
    x[:, _OFF_TIME + 6] = 1.0
    if rows:
        r = np.asarray(rows, dtype=np.int64)
        alerting[r] = True
        x[r, 0] = 1.0
        cnt = np.zeros((n, _N_SEV + _N_NAME), dtype=np.float32)
        np.add.at(cnt, (r, np.asarray(sev_i)), 1.0)
        np.add.at(cnt, (r, _N_SEV + np.asarray(name_i)), 1.0)
        x[:, _OFF_SEV:_OFF_KW] = np.log1p(cnt)
        # keyword counts: alerts per (node, distinct name), times each name's keyword flags (0/1);
        # small integer counts, so the float32 product is exact
        per_name = np.zeros((n, len(names)), dtype=np.float32)
        np.add.at(per_name, (r, np.asarray(name_u)), 1.0)
        kw = per_name @ np.stack([_keywords(nm) for nm in names])
        x[:, _OFF_KW:_OFF_TIME] = np.log1p(kw)
        # ---- timing
        tm = _node_timing(starts, ends, r, n)
        if tm is not None:
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
            recent_alerting = np.isfinite(first_recent)
        else:
            recent_alerting = alerting
        # ---- share of alerting neighbours per edge kind and direction
        af = recent_alerting.astype(np.float32)
        src, dst, et = st.src, st.dst, st.et
        out_cnt = np.zeros((len(EDGE_KINDS), n), dtype=np.float32)
        in_cnt = np.zeros((len(EDGE_KINDS), n), dtype=np.float32)
        lin_out = et * n + src  # node src's dependency dst alerts
        lin_in = et * n + dst  # node dst's dependent src alerts
        out_cnt.reshape(-1)[:] = np.bincount(
            lin_out, weights=af[dst], minlength=len(EDGE_KINDS) * n
        )
        in_cnt.reshape(-1)[:] = np.bincount(lin_in, weights=af[src], minlength=len(EDGE_KINDS) * n)
        cols = _OFF_NBR + 4 * np.arange(len(EDGE_KINDS))
        x[:, cols] = (out_cnt * st.inv_deg[:, 0]).T
        x[:, cols + 2] = (in_cnt * st.inv_deg[:, 1]).T
    if not rows:
        recent_alerting = alerting
    return AlertFeatures(x=x, alerting=alerting, unmapped=unmapped, recent=recent_alerting)


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
    mask = seeds.copy()
    for _ in range(hops):
        new = mask.copy()
        new[dst[mask[src]]] = True
        new[src[mask[dst]]] = True
        mask = new
    return mask


# ------------------------------------------------------------------------------ candidate crop
@dataclass
class IncidentCrop:
    """One incident's features on its candidate subgraph (what the GAT runs on).

    Attributes:
        x: float32 ``(|V'|, F)``: the rows ``keep`` of :func:`alert_features`'s matrix.
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

    def __len__(self) -> int:
        return self.count


_LOG1P_TABLE = np.log1p(np.arange(4096, dtype=np.float32))
"""``log1p`` of the float32 counts 0..4095 (the values :func:`alert_features` takes it of)."""


def _log1p_counts(counts: np.ndarray) -> np.ndarray:
    """float32 ``log1p`` of non-negative integer counts (int64 array), by table when small."""
    if counts.size and int(counts.max()) >= _LOG1P_TABLE.size:
        return np.log1p(counts.astype(np.float32))
    return _LOG1P_TABLE[counts]


def _label_info(graph: DependencyGraph, st: _GraphStatic, labels: Mapping[str, Any]) -> _LabelInfo:
    """``(node index or None, severity column, alertname column, alertname)`` of a label set.

    Memoised per graph on the label set itself (alert storms repeat label sets across incidents).
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
        if len(st.label_info) >= 100_000:
            st.label_info.clear()
        st.label_info[key] = info
    return info


def incident_crop(
    graph: DependencyGraph,
    alerts: Sequence[Mapping[str, Any]] | AlertColumns,
    hops: int | None,
) -> IncidentCrop:
    """Features of one incident on its candidate subgraph, computed for the kept nodes only.

    Gives exactly (bit for bit) the rows of :func:`alert_features` that
    :func:`candidate_mask` keeps, and the edges between them, in the layout of
    ``rca.lightning_module.crop_incident``; faster because the per-node work is done on the kept
    nodes (a few hundred of a 1,000-node graph) and each alert costs one memoised lookup of its label
    set (node, severity and alertname columns together). ``startsAt`` / ``endsAt`` may be RFC 3339
    strings or unix seconds (see :func:`parse_time`).

    Args:
        graph: the dependency graph.
        alerts: Alertmanager v4 alert objects, or their :class:`AlertColumns` on ``graph``
            (:func:`alert_columns`, or the service's parse of a request body).
        hops: candidate radius (:func:`candidate_mask`; ``None`` keeps the whole graph).

    Raises:
        DataError: when a timestamp is malformed.
    """
    cols = alerts if isinstance(alerts, AlertColumns) else alert_columns(graph, alerts)
    return crop_columns(graph, cols, hops)


def alert_columns(graph: DependencyGraph, alerts: Sequence[Mapping[str, Any]]) -> AlertColumns:
    """What :func:`crop_columns` needs of each alert, column-wise (see :class:`AlertColumns`).

    Each alert costs one memoised lookup of its label set (node, severity and alertname columns
    together). ``startsAt`` / ``endsAt`` may be RFC 3339 strings or unix seconds (see
    :func:`parse_time`).

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
) -> AlertColumns:
    """:class:`AlertColumns` of alerts parsed elsewhere (the service parses request bodies).

    Args:
        graph: the graph the infos were computed on.
        infos: per alert, :func:`label_info` of its labels (or a memo of it).
        starts, ends: float64 ``(A,)`` unix seconds of ``startsAt`` / ``endsAt`` as
            :func:`parse_time` reads them, NaN where ``None``.
        firing: bool ``(A,)``, True for ``status == "firing"`` (else ``"resolved"``).

    Gives what :func:`alert_columns` gives for the same alerts as dicts (the same arrays).
    """
    count = len(infos)
    keep = [j for j in range(count) if infos[j][0] is not None]
    mapped = [infos[j] for j in keep]
    s, e, f = starts[keep], ends[keep], firing[keep]
    # a firing alert's end that is not after its start is Alertmanager's "no end yet"
    with np.errstate(invalid="ignore"):
        e = np.where(f & (e <= s), _NAN, e)
    return _columns(graph, mapped, count - len(keep), count, s, e, f.astype(np.float64))


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


def label_json_memo(graph: DependencyGraph) -> dict[bytes, _LabelInfo]:
    """A per-graph memo for callers that key :func:`label_info` by the labels' JSON text.

    Who fills it must store only the :func:`label_info` of what the key decodes to; it is
    cleared with the graph's other caches.
    """
    st = _static(graph)
    if len(st.label_json) >= 100_000:
        st.label_json.clear()
    return st.label_json


def crop_columns(graph: DependencyGraph, cols: AlertColumns, hops: int | None) -> IncidentCrop:
    """:func:`incident_crop` of alerts given as :class:`AlertColumns` on ``graph``."""
    if cols.graph is not graph:
        raise ValueError("AlertColumns were computed on another graph")
    st = _static(graph)
    n = st.n
    unmapped = cols.unmapped
    rows = cols.rows
    sev_i, name_i, name_u = cols.sev, cols.name_col, cols.name_u
    starts, ends, firing = cols.starts, cols.ends, cols.firing
    names = cols.names
    alerting = np.zeros(n, dtype=bool)
    timing: tuple[Any, ...] | None = None
    recent_alerting = alerting
    if rows.size:
        r = rows
        alerting[r] = True
        tm = _node_timing(starts, ends, r, n)  # the same arithmetic as alert_features
        if tm is not None:
            recent_alerting = np.isfinite(tm[6])
            timing = tm
        else:
            recent_alerting = alerting
    seeds = recent_alerting if recent_alerting.any() else alerting
    if hops is None or not seeds.any():
        mask = np.ones(n, dtype=bool)
    else:
        src, dst = st.src, st.dst
        mask = seeds.copy()
        for _ in range(hops):
            new = mask.copy()
            new[dst[mask[src]]] = True
            new[src[mask[dst]]] = True
            mask = new
    keep = np.flatnonzero(mask)
    m = keep.size
    x = np.zeros((m, NUM_FEATURES), dtype=np.float32)
    x[:, _OFF_NBR:] = st.base[keep]
    x[:, _OFF_TIME + 0] = 1.0
    x[:, _OFF_TIME + 1] = 1.0
    x[:, _OFF_TIME + 6] = 1.0
    if rows.size:
        sub = np.full(n, -1, dtype=np.int64)
        sub[keep] = np.arange(m)
        a_idx = np.flatnonzero(alerting & mask)  # alerting kept nodes, sorted
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
                ia * n_cols + np.asarray(sev_i)[in_crop],
                ia * n_cols + _N_SEV + np.asarray(name_i)[in_crop],
            ]
        )
        cnt = np.bincount(lin, minlength=na * n_cols).reshape(na, n_cols)
        x[xa, _OFF_SEV:_OFF_KW] = _log1p_counts(cnt)
        n_names = len(names)
        per_name = np.bincount(
            ia * n_names + np.asarray(name_u)[in_crop], minlength=na * n_names
        ).reshape(na, n_names)
        # keyword counts: alerts per (node, distinct name) times each name's 0/1 keyword flags
        kw = per_name.astype(np.float32) @ np.stack([_keywords(nm) for nm in names])
        x[xa, _OFF_KW:_OFF_TIME] = _log1p_counts(kw.astype(np.int64))
        if timing is not None:
            t_last, t0, span, dur_each, first, last, first_recent = timing
            # per-alert sums in alert order (np.bincount adds sequentially, like np.add.at)
            dur = np.bincount(r, weights=dur_each, minlength=n)[a_idx]
            nal = np.bincount(r, minlength=n).astype(np.float64)[a_idx]
            fire = np.bincount(r, weights=np.asarray(firing), minlength=n)[a_idx]
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
        # share of recently alerting neighbours per edge kind and direction
        af = recent_alerting.astype(np.float32)
        k_e = len(EDGE_KINDS)
        out_cnt = np.bincount(st.et * n + st.src, weights=af[st.dst], minlength=k_e * n)
        in_cnt = np.bincount(st.et * n + st.dst, weights=af[st.src], minlength=k_e * n)
        out_cnt = out_cnt.astype(np.float32).reshape(k_e, n)[:, keep]
        in_cnt = in_cnt.astype(np.float32).reshape(k_e, n)[:, keep]
        cols = _OFF_NBR + 4 * np.arange(k_e)
        x[:, cols] = (out_cnt * st.inv_deg[:, 0][:, keep]).T
        x[:, cols + 2] = (in_cnt * st.inv_deg[:, 1][:, keep]).T
    ei, et = graph.edge_index, graph.edge_type
    if m == n:
        return IncidentCrop(x, keep, ei, et, alerting, unmapped)
    new_id = np.cumsum(mask) - 1
    em = mask[ei[0]] & mask[ei[1]]
    return IncidentCrop(x, keep, new_id[ei[:, em]], et[em], alerting, unmapped)
