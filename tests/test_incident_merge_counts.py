"""A merged incident's counts follow its alerts into the incident it merged into.

An alert that fits several open incidents merges them into the oldest, and the others' alerts
move to it (``docs/serving/incidents.md``, "Grouping"). The merged incidents used to keep their
``alert_count``/``firing_count``: one reported a firing alert forever, its detail listed none, and
sums over every incident counted the moved alerts twice.

Times are fixed unix seconds; the manager's clock is set by the test.
"""

from __future__ import annotations

import os
from typing import Any

import pytest

from fleetmind.serving.db import Database
from fleetmind.serving.defaults.example import build_example_graph
from fleetmind.serving.graphstore import GraphStore
from fleetmind.serving.incidents import IncidentManager
from fleetmind.serving.registry import ModelRegistry
from tests.incident_helpers import Clock, deliver, iso, load_registry

os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")

T = 1_800_000_000.0  # the first alert's start, unix seconds


def am_alert(
    fp: str, labels: dict[str, str], starts: float, ends: float | None = None
) -> dict[str, Any]:
    """An alert as Alertmanager's webhook carries it (resolved at ``ends`` when given)."""
    return {"status": "firing" if ends is None else "resolved", "labels": labels,
            "annotations": {}, "startsAt": iso(starts),
            "endsAt": "0001-01-01T00:00:00Z" if ends is None else iso(ends),
            "fingerprint": fp}  # fmt: skip


def host_down(node: str) -> dict[str, str]:
    return {"alertname": "HostDown", "cluster": "c0", "node": node, "severity": "critical"}


SVC = {"alertname": "SvcErrors", "cluster": "c0", "service": "s0", "severity": "warning"}


@pytest.fixture(scope="module")
def registry() -> ModelRegistry:
    return load_registry()


def test_a_merged_incident_counts_no_alerts(migrated_db: Database, registry: ModelRegistry) -> None:
    clock = Clock(T)
    graphs = GraphStore(build_example_graph(), "t")
    m = IncidentManager(migrated_db, graphs, registry, clock=clock)
    sent = [
        am_alert("a", host_down("c0-h0"), T),
        am_alert("b", host_down("c0-h1"), T + 10),
        am_alert("c", SVC, T + 20),  # its service runs on both hosts: it bridges them
    ]
    for i, a in enumerate(sent):
        deliver(m, clock, T + 30 + i, a)
    merged = m.db.list_incidents("merged")
    assert merged, "the bridging alert merges the two hosts' incidents"
    (live,) = m.db.list_incidents("open")
    assert live["alert_count"] == 3 and live["firing_count"] == 3
    for inc in merged:
        assert (inc["alert_count"], inc["firing_count"]) == (0, 0)
    done = [{**a, "status": "resolved", "endsAt": iso(T + 300)} for a in sent]
    deliver(m, clock, T + 310, *done)
    every = m.db.list_incidents(None)
    assert sum(i["alert_count"] for i in every) == len(m.db.list_alerts()) == 3
    assert sum(i["firing_count"] for i in every) == 0
    m.db.dispose()
