"""Alert -> node mapping for the service, with exactly the rules of
:meth:`DependencyGraph.node_for_alert`.

The fast lookup (nodes grouped by the key set of their ``match`` labels, so one alert costs one dict
lookup per distinct key set, whatever the graph size) lives in :func:`fleetmind.rca.features.mapping.node_index_for_alert`
and is cached per graph there; the service needs node ids, so this module only converts.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from fleetmind.data.graph import DependencyGraph
from fleetmind.rca.features.mapping import node_index_for_alert


def node_for_alert(graph: DependencyGraph, labels: Mapping[str, Any]) -> str | None:
    """Same result as ``graph.node_for_alert(labels)``: the matched node's id, or ``None``."""
    i = node_index_for_alert(graph, labels)
    return None if i is None else graph.nodes[i].id
