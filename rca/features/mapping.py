"""Alerts to graph nodes (:func:`map_alerts`, :func:`node_index_for_alert`) and the per-graph arrays that do not depend on alerts (cached per graph object)."""

from __future__ import annotations

import operator
import weakref
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from fleetmind.data.graph import (
    _KIND_SPECIFICITY,
    EDGE_KINDS,
    OVERRIDE_LABEL,
    TARGET_LABELS,
    DependencyGraph,
)
from fleetmind.rca.features.layout import _N_KIND, _N_NBR, KEYWORD_GROUPS


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
        self.label_json_dicts: dict[bytes, dict[str, str]] = {}


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
    """Fast :meth:`fleetmind.data.graph.DependencyGraph.node_for_alert` returning the node index.

    Same rules (``fleetmind_node`` override, the subject's labels, all match labels equal, most
    match labels, then the more specific kind, then the first node, a scrape target matched
    again without its labels), but instead of
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
    lab = graph.alert_subject(lab)
    best = _table_match(sets, lab)
    if best is not None and graph.is_scrape_target(best, lab):
        other = _table_match(sets, {k: v for k, v in lab.items() if k not in TARGET_LABELS})
        best = other if other is not None else best
    return best


def _table_match(
    sets: list[tuple[int, dict, Any, frozenset[str]]], lab: Mapping[str, str]
) -> int | None:
    """The best node index for subject labels ``lab`` by the key-set tables (``None``: no match)."""
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


def expand_hops(src: np.ndarray, dst: np.ndarray, seeds: np.ndarray, hops: int) -> np.ndarray:
    """``(N,)`` bool: ``seeds`` grown by ``hops`` steps along the edges ``src[i] -> dst[i]`` in
    either direction (undirected hops)."""
    mask = seeds.copy()
    for _ in range(hops):
        new = mask.copy()
        new[dst[mask[src]]] = True
        new[src[mask[dst]]] = True
        mask = new
    return mask
