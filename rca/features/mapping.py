"""Alerts to graph nodes (:func:`map_alerts`, :func:`node_index_for_alert`) and the per-graph arrays that do not depend on alerts (cached per graph object)."""

from __future__ import annotations

import functools
import operator
import threading
import weakref
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from fleetmind.data.graph import _KIND_SPECIFICITY, EDGE_KINDS, DependencyGraph
from fleetmind.rca.features.layout import _N_KIND, _N_NBR, KEYWORD_GROUPS

MEMO_BUDGET = 16 * 1024 * 1024
"""Bytes (as :class:`ByteMemo` counts them) a per-graph label-set memo holds before it empties.

A realistic label set costs 0.5-1 KB counted this way (5-10 labels of some 30 characters each:
the simulated incidents of ``benchmarks/serving`` have 255-byte label sets, 3,000 distinct ones
in 40 incidents of 200 alerts), so one memo holds 16,000-35,000 of them, far more than an incident
storm repeats. The four memos of a graph (:class:`_GraphStatic`) and two 4 MB ones per process
(alertname keywords here, ``annotations`` texts in ``serving.rca.parse``) bound a process to about
72 MB per graph whatever label text clients send, where a cap of 100,000 entries let 128 KB label
sets hold ~25 GB."""

MEMO_MAX_ENTRY = 8 * 1024
"""The largest entry (as :class:`ByteMemo` counts it) a label-set memo keeps: a label set of up
to about 40 labels or 7 KB of text. Larger ones are computed again each time (they are rare, and
each would push out thousands of ordinary ones)."""

ENTRY_BYTES = 64
"""What :class:`ByteMemo` counts per entry besides its strings (the dict slot, the value tuple)."""

LABEL_BYTES = 144
"""What :class:`ByteMemo` counts per label besides its text (a tuple of the pair and two string
objects, as measured with ``tracemalloc``: 107-128 bytes per label of a tuple-of-items key)."""


class ByteMemo(dict):
    """A memo (a ``dict``) bounded by bytes rather than entries: thread-safe writes, free reads.

    Each entry is counted as the caller's estimate of its size (string lengths plus
    :data:`ENTRY_BYTES` / :data:`LABEL_BYTES` of object overhead, see :func:`label_set_bytes`);
    :meth:`put` drops an entry over ``max_entry`` and empties the memo before ``nbytes`` would pass
    ``budget`` (clear-on-overflow: a plain ``dict`` lookup stays as fast as before, where an LRU
    would cost a move per hit). Reads (``get``, ``in``) are the ``dict``'s own; writes hold a
    lock so ``nbytes`` stays exact when threads (request handlers, the batcher, the incident
    worker) fill one memo. ``memo[key] = value`` counts the entry by :func:`approx_bytes`.
    """

    __slots__ = ("_lock", "budget", "max_entry", "nbytes")

    def __init__(self, budget: int = MEMO_BUDGET, max_entry: int = MEMO_MAX_ENTRY) -> None:
        super().__init__()
        self.budget = budget
        self.max_entry = max_entry
        self.nbytes = 0
        self._lock = threading.Lock()

    def put(self, key: Any, value: Any, size: int) -> None:
        """Keep ``value`` under ``key``, counted as ``size`` bytes (not kept over ``max_entry``)."""
        if size > self.max_entry:
            return
        with self._lock:
            if self.nbytes + size > self.budget:
                dict.clear(self)
                self.nbytes = 0
            n = len(self)
            dict.setdefault(self, key, value)  # kept as it was if there (another thread's miss)
            if len(self) > n:
                self.nbytes += size

    def __setitem__(self, key: Any, value: Any) -> None:
        self.put(key, value, ENTRY_BYTES + approx_bytes(key) + approx_bytes(value))

    def setdefault(self, key: Any, default: Any = None) -> Any:
        if not dict.__contains__(self, key):
            self[key] = default
        return dict.get(self, key, default)

    def update(self, *args: Any, **kwargs: Any) -> None:
        for k, v in dict(*args, **kwargs).items():
            self[k] = v

    def clear(self) -> None:
        with self._lock:
            dict.clear(self)
            self.nbytes = 0

    def __reduce__(self) -> Any:  # a copy starts empty (a lock does not pickle)
        return (type(self), (self.budget, self.max_entry))


def label_set_bytes(items: Any, per_label: int = LABEL_BYTES) -> int:
    """What :class:`ByteMemo` counts for a label set's ``(key, value)`` pairs: their text and
    ``per_label`` bytes of objects per label, plus :data:`ENTRY_BYTES` (non-string keys or values
    count as their ``str()``)."""
    n = ENTRY_BYTES
    for k, v in items:
        n += per_label + (len(k) if k.__class__ is str else len(str(k)))
        n += len(v) if v.__class__ is str else len(str(v))
    return n


def label_dict_bytes(labels: Mapping[Any, Any], per_label: int = LABEL_BYTES) -> int:
    """:func:`label_set_bytes` of a label mapping (joined in C when keys and values are strings)."""
    try:
        text = len("".join(labels)) + len("".join(labels.values()))
    except TypeError:  # not all strings
        return label_set_bytes(labels.items(), per_label)
    return ENTRY_BYTES + per_label * len(labels) + text


def approx_bytes(obj: Any) -> int:
    """Rough bytes of ``obj`` for :class:`ByteMemo`: string lengths, plus 48 per item of a
    container (tuples, lists, sets, dicts), 32 for anything else."""
    if isinstance(obj, str | bytes):
        return len(obj)
    if isinstance(obj, dict):
        return sum(96 + approx_bytes(k) + approx_bytes(v) for k, v in obj.items())
    if isinstance(obj, tuple | list | set | frozenset):
        return sum(48 + approx_bytes(x) for x in obj)
    return 32


class _GraphStatic:
    """Per-graph arrays that do not depend on alerts (cached).

    With ``like``, the tables of a graph whose node list ``g`` shares and whose edges begin ``g``'s
    (:func:`share_static`): the label-set memos, match tables and degree arrays are ``like``'s, and
    only the rows of the nodes that ``g``'s extra edges touch are ``g``'s own (read the degree
    columns through :meth:`base_rows` and :meth:`inv_deg_rows`).
    """

    def __init__(self, g: DependencyGraph, like: _GraphStatic | None = None) -> None:
        n = g.num_nodes
        src, dst = g.edge_index
        et = g.edge_type
        self.n = n
        self.src, self.dst, self.et = src, dst, et
        # rows of nodes whose degrees differ from _base / _inv_deg (a derived graph's), sorted
        self._rows: np.ndarray | None = None
        self._row_base = self._row_inv = np.zeros(0, dtype=np.float32)
        if like is None:
            deg = np.zeros((len(EDGE_KINDS), 2, n), dtype=np.float32)  # [kind, out/in, node]
            for k in range(len(EDGE_KINDS)):
                m = et == k
                deg[k, 0] = np.bincount(src[m], minlength=n)
                deg[k, 1] = np.bincount(dst[m], minlength=n)
            self.deg = deg
            self._base, self._inv_deg = _degree_rows(deg, g.node_type)
        else:
            e0 = like.src.size
            xs, xd, xe = src[e0:], dst[e0:], et[e0:]
            rows = np.unique(np.concatenate([xs, xd]))
            deg = like.deg[:, :, rows]  # a copy (fancy indexing)
            np.add.at(deg, (xe, 0, np.searchsorted(rows, xs)), 1.0)
            np.add.at(deg, (xe, 1, np.searchsorted(rows, xd)), 1.0)
            self._base, self._inv_deg = like._base, like._inv_deg
            self._rows = rows
            self._row_base, self._row_inv = _degree_rows(deg, g.node_type[rows])
        # memos of label sets (bounded by bytes: clients choose the label text)
        self.alert_cache: ByteMemo = ByteMemo()
        self.label_info: ByteMemo = ByteMemo()
        self.keysets: list[tuple[tuple[str, ...], dict]] | None = None
        self.keyset_getters: list[tuple[int, dict, Any, frozenset[str]]] | None = None
        self.label_json: ByteMemo = ByteMemo()
        self.label_json_dicts: ByteMemo = ByteMemo()
        if like is not None:  # they depend on the nodes only
            for name in _NODE_TABLES:
                setattr(self, name, getattr(like, name))

    def base_rows(self, keep: np.ndarray | None = None) -> np.ndarray:
        """float32 ``(len(keep), F')``: the degree and kind columns of nodes ``keep`` (sorted
        indices; ``None``: all nodes, then not a copy unless this graph has own rows)."""
        if self._rows is None:
            return self._base if keep is None else self._base[keep]
        out = self._base.copy() if keep is None else self._base[keep]
        at, pos = self._own(keep)
        out[at] = self._row_base[pos]
        return out

    def inv_deg_rows(self, keep: np.ndarray | None = None) -> np.ndarray:
        """float32 ``(K, 2, len(keep))``: ``1 / degree`` per edge kind and out/in direction of
        nodes ``keep`` (0 where none; sorted indices, ``None``: all nodes)."""
        if self._rows is None:
            return self._inv_deg if keep is None else self._inv_deg[:, :, keep]
        out = self._inv_deg.copy() if keep is None else self._inv_deg[:, :, keep]
        at, pos = self._own(keep)
        out[:, :, at] = self._row_inv[:, :, pos]
        return out

    def _own(self, keep: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
        """Positions in ``keep`` (or node indices) of this graph's own rows, and their rows."""
        rows = self._rows
        assert rows is not None
        if keep is None:
            return rows, np.arange(rows.size)
        at = np.searchsorted(keep, rows).clip(max=max(keep.size - 1, 0))
        hit = keep[at] == rows if keep.size else np.zeros(rows.size, dtype=bool)
        return at[hit], np.flatnonzero(hit)


def _degree_rows(deg: np.ndarray, node_type: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The degree and kind columns (float32 ``(t, F')``) and ``1 / degree`` (float32 ``(K, 2, t)``)
    of ``t`` nodes of degrees ``deg`` (``[edge kind, out/in, node]``) and kinds ``node_type``."""
    t = deg.shape[2]
    base = np.zeros((t, _N_NBR + _N_KIND + 2), dtype=np.float32)
    for k in range(len(EDGE_KINDS)):
        base[:, 4 * k + 1] = np.log1p(deg[k, 0])
        base[:, 4 * k + 3] = np.log1p(deg[k, 1])
    base[np.arange(t), _N_NBR + node_type] = 1.0
    base[:, _N_NBR + _N_KIND] = np.log1p(deg[:, 1].sum(0))
    base[:, _N_NBR + _N_KIND + 1] = np.log1p(deg[:, 0].sum(0))
    inv = np.where(deg > 0, 1.0 / np.maximum(deg, 1), 0.0).astype(np.float32)
    return base, inv


_NODE_TABLES = (
    "alert_cache",
    "label_info",
    "keysets",
    "keyset_getters",
    "label_json",
    "label_json_dicts",
)
"""The :class:`_GraphStatic` attributes that depend on a graph's nodes only, not its edges."""


_STATIC: weakref.WeakKeyDictionary[DependencyGraph, _GraphStatic] = weakref.WeakKeyDictionary()

_KW_CACHE = ByteMemo(budget=4 * 1024 * 1024, max_entry=1024)
"""Keyword flags of each alertname (:func:`_keywords`); names over ~900 characters are not kept."""


def _static(g: DependencyGraph) -> _GraphStatic:
    st = _STATIC.get(g)
    if st is None or st.n != g.num_nodes:
        st = _GraphStatic(g)
        _STATIC[g] = st
    return st


def share_static(base: DependencyGraph, g: DependencyGraph) -> None:
    """Give ``g``, a graph with ``base``'s nodes (the same list) and more edges, per-graph tables
    that share ``base``'s label-set memos and match tables: only its degree arrays (``O(|V|)``
    floats) are computed, from its own edges. Kept while ``g`` lives (weakly keyed)."""
    if g.nodes is not base.nodes:
        raise ValueError("share_static: the graphs do not share their nodes")
    like = _static(base)
    if like._rows is not None:
        raise ValueError("share_static: base must be a graph of its own, not a derived one")
    _node_tables(like, base)
    _STATIC[g] = _GraphStatic(g, like)


def _keywords(name: str) -> np.ndarray:
    v = _KW_CACHE.get(name)
    if v is None:
        low = name.lower()
        v = np.array(
            [any(w in low for w in words) for words in KEYWORD_GROUPS.values()], dtype=np.float32
        )
        _KW_CACHE.put(name, v, ENTRY_BYTES + 128 + len(name))
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

    Same rules, shared through :meth:`~fleetmind.data.graph.DependencyGraph.resolve_alert`
    (``fleetmind_node`` override, the subject's labels, all match labels equal, most match
    labels, then the more specific kind, then the first node, a workload controller's node, a
    scrape target matched again without its labels), but instead of checking candidate nodes it
    looks the alert's values up once per distinct key set of the graph's ``match`` labels (a
    handful), so an alert costs a few dict lookups whatever the graph size.
    """
    st = st if st is not None else _static(graph)
    return _node_index(graph, st, {str(k): str(v) for k, v in labels.items() if v is not None})


def _node_index(graph: DependencyGraph, st: _GraphStatic, lab: dict[str, str]) -> int | None:
    """:func:`node_index_for_alert` of labels already as ``str -> str`` (none ``None``)."""
    sets = _node_tables(st, graph)
    return graph.resolve_alert(lab, functools.partial(_table_match, sets))


def _node_tables(
    st: _GraphStatic, graph: DependencyGraph
) -> list[tuple[int, dict, Any, frozenset[str]]]:
    """``st.keyset_getters``, built on first use."""
    sets = st.keyset_getters
    if sets is None:  # per key set: its keys and a C-level getter of its values in key order
        sets = st.keyset_getters = [
            (len(keys), table, _values_getter(keys), frozenset(keys))
            for keys, table in _keysets(st, graph)
        ]
    return sets


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
        # a frozenset costs about twice a tuple per item
        cache.put(key, idx, label_dict_bytes(labels, 2 * LABEL_BYTES))
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
