"""An incident cropped to its candidate subgraph, with NumPy alone (no Lightning, no torch).

:func:`crop_incident` computes an incident's alert features on the whole graph and keeps the
subgraph of :func:`fleetmind.rca.features.dense.candidate_mask`; training
(:mod:`fleetmind.rca.lightning_module`) and inference (:mod:`fleetmind.rca.gat_analyzer`) both crop
with it, so ranking a model does not import Lightning.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from fleetmind.data.graph import DependencyGraph
from fleetmind.rca.features.dense import AlertFeatures, alert_features, candidate_mask


@dataclass
class CroppedIncident:
    """An incident's features restricted to its candidate subgraph.

    Attributes:
        features: :class:`fleetmind.rca.features.dense.AlertFeatures` of the whole graph.
        keep: int64 ``(|V'|,)`` indices of the kept nodes in the whole graph (sorted).
        x: float32 ``(|V'|, F)``. edge_index: int64 ``(2, |E'|)`` in subgraph indices.
        edge_type: int64 ``(|E'|,)``.
    """

    features: AlertFeatures
    keep: np.ndarray
    x: np.ndarray
    edge_index: np.ndarray
    edge_type: np.ndarray

    @property
    def alerting(self) -> np.ndarray:
        """bool ``(|V|,)``, True where at least one alert maps onto the node (whole graph)."""
        return self.features.alerting


def crop_incident(
    graph: DependencyGraph, alerts: Sequence[Mapping[str, Any]], crop_hops: int | None
) -> CroppedIncident:
    """Features of the whole graph, then the subgraph of :func:`fleetmind.rca.features.dense.candidate_mask`."""
    f = alert_features(graph, alerts)
    keep_mask = candidate_mask(graph, f, crop_hops)
    ei, et = graph.edge_index, graph.edge_type
    if keep_mask.all():
        return CroppedIncident(f, np.arange(graph.num_nodes), f.x, ei, et)
    new_id = np.cumsum(keep_mask) - 1
    em = keep_mask[ei[0]] & keep_mask[ei[1]]
    return CroppedIncident(f, np.flatnonzero(keep_mask), f.x[keep_mask], new_id[ei[:, em]], et[em])
