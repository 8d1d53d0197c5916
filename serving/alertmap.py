"""Fast alert -> node mapping with exactly the rules of :meth:`DependencyGraph.node_for_alert`.

``node_for_alert`` scans every node sharing any label with the alert (with a ``cluster`` label that is
the whole cluster); here nodes are grouped by the set of keys in their ``match`` labels, so one alert
costs one dict lookup per distinct key set (a handful), whatever the graph size.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Mapping
from typing import Any

from data.graph import _KIND_SPECIFICITY, OVERRIDE_LABEL, DependencyGraph

_Index = list[tuple[tuple[str, ...], dict[tuple[str, ...], tuple[int, int, int]]]]
_cache: weakref.WeakKeyDictionary[DependencyGraph, _Index] = weakref.WeakKeyDictionary()
_lock = threading.Lock()


def _index(graph: DependencyGraph) -> _Index:
    idx = _cache.get(graph)
    if idx is not None:
        return idx
    groups: dict[tuple[str, ...], dict[tuple[str, ...], tuple[int, int, int]]] = {}
    for i, n in enumerate(graph.nodes):
        if not n.match:
            continue  # a node without match labels is never matched (as in node_for_alert)
        keys = tuple(sorted(str(k) for k in n.match))
        values = tuple(str(n.match[k]) for k in keys)
        rank = (len(keys), _KIND_SPECIFICITY.get(n.kind, 0), -i)
        table = groups.setdefault(keys, {})
        if values not in table or rank > table[values]:
            table[values] = rank
    # larger key sets first: they win on the first criterion
    idx = sorted(groups.items(), key=lambda kv: -len(kv[0]))
    with _lock:
        _cache[graph] = idx
    return idx


def node_for_alert(graph: DependencyGraph, labels: Mapping[str, Any]) -> str | None:
    """Same result as ``graph.node_for_alert(labels)``, in O(number of distinct match key sets)."""
    lab = {str(k): str(v) for k, v in labels.items() if v is not None}
    direct = lab.get(OVERRIDE_LABEL)
    if direct is not None and direct in graph.index:
        return direct
    if "node" not in lab and "instance" in lab:
        lab["node"] = lab["instance"].rsplit(":", 1)[0]
    best: tuple[int, int, int] | None = None
    for keys, table in _index(graph):
        if best is not None and len(keys) < best[0]:
            break
        try:
            values = tuple(lab[k] for k in keys)
        except KeyError:
            continue
        rank = table.get(values)
        if rank is not None and (best is None or rank > best):
            best = rank
    return None if best is None else graph.nodes[-best[2]].id
