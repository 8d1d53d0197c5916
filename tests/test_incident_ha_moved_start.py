"""An alert moved to an earlier ``startsAt`` (an Alertmanager HA peer's delivery) widens its
incident's alert span, and grouping uses the widened span.

Upstream reference: Alertmanager merges every alert it receives with the one it holds for the
fingerprint and keeps the earliest start (prometheus/alertmanager ``types/types.go``,
``Alert.Merge``: "Always pick the earliest starting time"), so the same alert is notified first
under a later ``startsAt``, then under the earlier one; the stored alert moves to the earlier one
(``docs/serving/incidents.md``, "Alert lifecycle"). Its incident's ``first_alert_at`` used to stay
on the later start, and an alert that started within the window of the real first alert but not
of the stale one opened a second incident.

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
from fleetmind.serving.routers.alerts import alert_row
from fleetmind.serving.schemas import AlertIn
from tests.incident_helpers import Clock, deliver, iso, load_registry

os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")

T = 1_800_000_000.0  # the HA replica's later activeAt, unix seconds
WINDOW_S = 600.0
SKEW_S = 60.0  # the other replica's activeAt is this much earlier (within HA_START_SKEW_S)


def am_alert(fp: str, name: str, starts: float) -> dict[str, Any]:
    """A firing alert of node c0-h2 as Alertmanager's webhook carries it."""
    labels = {"alertname": name, "cluster": "c0", "node": "c0-h2", "severity": "critical"}
    return {"status": "firing", "labels": labels, "annotations": {}, "startsAt": iso(starts),
            "endsAt": "0001-01-01T00:00:00Z", "fingerprint": fp}  # fmt: skip


@pytest.fixture(scope="module")
def registry() -> ModelRegistry:
    return load_registry()


def test_a_moved_start_widens_the_incident_and_grouping_uses_it(
    migrated_db: Database, registry: ModelRegistry
) -> None:
    clock = Clock(T)
    graphs = GraphStore(build_example_graph(), "t")
    m = IncidentManager(migrated_db, graphs, registry, clock=clock, window_s=WINDOW_S)
    deliver(m, clock, T + 5, am_alert("ha", "NodeNotReady", T))
    (inc,) = m.db.list_incidents("open")
    assert inc["first_alert_ts"] == T
    # the other HA peer: the same alert, the earlier replica's activeAt
    deliver(m, clock, T + 10, am_alert("ha", "NodeNotReady", T - SKEW_S))
    (a,) = m.db.list_alerts()
    assert a["starts_ts"] == T - SKEW_S and a["incident_id"] == inc["id"]
    (inc,) = m.db.list_incidents("open")
    assert inc["first_alert_ts"] == T - SKEW_S
    assert inc["last_alert_ts"] == T  # widened, never narrowed
    assert inc["alert_count"] == 1 and inc["firing_count"] == 1
    # within the window of the moved start (570 s before it), not of the stale one (630 s)
    early = T - SKEW_S - WINDOW_S + 30
    deliver(m, clock, T + 15, am_alert("x", "HostDown", early))
    (one,) = m.db.list_incidents(None)
    assert one["id"] == inc["id"] and one["alert_count"] == 2
    assert one["first_alert_ts"] == early and one["last_alert_ts"] == T
    m.db.dispose()


def test_a_late_firing_copy_of_a_resolved_alert_does_not_stretch_the_span(
    migrated_db: Database, registry: ModelRegistry
) -> None:
    """A firing delivery whose ``startsAt`` lies inside a resolved row's episode is stored resolved
    (the resolved alert, notified late under another start) and pending: it is no alert start, and
    must not move the open incident's last alert time (a later alert joined the incident by it)."""
    clock = Clock(T)
    graphs = GraphStore(build_example_graph(), "t")
    m = IncidentManager(migrated_db, graphs, registry, clock=clock, window_s=WINDOW_S)
    deliver(m, clock, T + 5, am_alert("a", "NodeNotReady", T), am_alert("b", "HostDown", T))
    resolved = {**am_alert("b", "HostDown", T), "status": "resolved", "endsAt": iso(T + 3600)}
    deliver(m, clock, T + 3600, resolved)
    deliver(m, clock, T + 3610, am_alert("b", "HostDown", T + 3000))  # inside [T, T + 3600]
    (inc,) = m.db.list_incidents("open")
    assert (inc["first_alert_ts"], inc["last_alert_ts"]) == (T, T)
    deliver(m, clock, T + 3620, am_alert("c", "GPUXidError", T + 3500))  # 3500 s after the last
    assert len(m.db.list_incidents("open")) == 2
    m.db.dispose()


def test_a_moved_start_resolved_before_grouping_still_widens_the_incident(
    migrated_db: Database, registry: ModelRegistry
) -> None:
    """The HA peer's earlier start and the alert's resolution both arrive before the worker runs
    (a backlog, a restart): the row is resolved when grouped, and its moved start must still move
    the incident's first alert time back."""
    clock = Clock(T)
    graphs = GraphStore(build_example_graph(), "t")
    m = IncidentManager(migrated_db, graphs, registry, clock=clock, window_s=WINDOW_S)
    deliver(m, clock, T + 5, am_alert("ha", "NodeNotReady", T), am_alert("z", "HostDown", T))
    clock.t = T + 10
    moved = am_alert("ha", "NodeNotReady", T - SKEW_S)
    m.db.store_alerts([alert_row(AlertIn.model_validate(moved), T + 10)])
    resolved = {**moved, "status": "resolved", "endsAt": iso(T + 12)}
    deliver(m, clock, T + 12, resolved)
    (inc,) = m.db.list_incidents("open")
    assert inc["first_alert_ts"] == T - SKEW_S
    deliver(m, clock, T + 15, am_alert("x", "GPUXidError", T - SKEW_S - WINDOW_S + 30))
    assert [i["alert_count"] for i in m.db.list_incidents(None)] == [3]
    m.db.dispose()
