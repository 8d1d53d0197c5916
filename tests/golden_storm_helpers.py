"""Shared pieces of the golden-storm tests: the generated 300-node fleet they rank on and alerts
written as Alertmanager sends them."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import numpy as np

from fleetmind.data.graph import DependencyGraph
from fleetmind.data.rca_gen.graphs import GraphGenConfig, generate_graph

T0 = datetime(2026, 12, 1, 10, 0, tzinfo=UTC)
"""The storms' first alert time; each alert starts ``sec`` seconds after it."""


def golden_fleet() -> DependencyGraph:
    """The golden storms' fleet: 300 nodes of the generator, seed 20261201."""
    return generate_graph("golden", np.random.default_rng(20261201), GraphGenConfig(), n_nodes=300)


def storm_alert(
    node_match: dict, name: str, sec: int, severity: str = "critical", **extra: str
) -> dict:
    """One firing alert (Alertmanager's webhook item) on the node ``node_match`` names, starting
    ``sec`` s after :data:`T0`."""
    return {
        "status": "firing",
        "labels": {"alertname": name, "severity": severity, **node_match, **extra},
        "annotations": {},
        "startsAt": (T0 + timedelta(seconds=sec)).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "endsAt": "0001-01-01T00:00:00Z",
    }
