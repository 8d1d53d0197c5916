"""Alert episodes around an auto-resolution, a zero ``startsAt``, and a sender clock that differs
from the service's.

1. **A new episode that started before an auto-resolution.** An alert whose resolution never
   comes (``send_resolved: false``, a lost notification) is resolved by FleetMind after
   ``auto_resolve_s``. A new episode of its fingerprint that started before that moment but is
   delivered after it (held by ``group_wait``, a backlog, a Prometheus ``for:``) was stored
   resolved, in the resolved incident: the auto-resolution's time was read as the alert's
   ``endsAt`` by the stale-firing rule.
2. **A zero startsAt.** Alertmanager's API takes ``StartsAt`` 0001-01-01 (Go's zero time) as unset
   and sets it to its ``EndsAt`` when set, else now (prometheus/alertmanager ``api/v2/api.go``, ``postAlertsHandler``:
   ``if alert.StartsAt.IsZero()``); it was stored as year 1 and opened its own incident.

The service's clock is injected: no test sleeps.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from serving_helpers import alert
from test_incident_refire import WINDOW_S, Clock, T, iso
from ui_helpers import STORM_LABELS

from fleetmind.serving.db import NO_START, Database
from fleetmind.serving.defaults.example import build_example_graph
from fleetmind.serving.graphstore import GraphStore
from fleetmind.serving.incidents import IncidentManager
from fleetmind.serving.registry import ModelRegistry
from fleetmind.serving.routers.alerts import alert_row
from fleetmind.serving.schemas import AlertIn

os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")

AUTO_RESOLVE_S = 120.0


@pytest.fixture(scope="module")
def registry() -> ModelRegistry:
    reg = ModelRegistry("baseline:upstream-coverage", "heuristic:builtin-bestfit")
    reg.load()
    return reg


@pytest.fixture()
def clock() -> Clock:
    return Clock()


@pytest.fixture()
def manager(tmp_path: Path, registry: ModelRegistry, clock: Clock) -> Iterator[IncidentManager]:
    db = Database(f"sqlite:///{tmp_path}/i.db")
    db.create_all()
    graphs = GraphStore(build_example_graph(), "t")
    yield IncidentManager(
        db, graphs, registry, clock=clock, window_s=WINDOW_S, auto_resolve_s=AUTO_RESOLVE_S
    )
    db.dispose()


def deliver(m: IncidentManager, clock: Clock, at: float, *alerts: dict[str, Any]) -> None:
    """One webhook received at ``at`` (unix s), then grouping, both on the clock ``at``."""
    clock.t = at
    m.db.store_alerts([alert_row(AlertIn.model_validate(a), at) for a in alerts])
    m.process_pending()


def episodes(m: IncidentManager) -> list[tuple[str, str, int | None]]:
    """``(startsAt, status, incident id)`` of every stored alert, by start."""
    rows = sorted(m.db.list_alerts(), key=lambda a: a["starts_ts"])
    return [(a["starts_at"], a["status"], a["incident_id"]) for a in rows]


def test_a_new_episode_started_before_an_auto_resolution_fires(
    manager: IncidentManager, clock: Clock
) -> None:
    """The hunt's sequence: episode 1 fired 10 min ago and is delivered once; episode 2 starts
    just after that delivery, is held back past the auto-resolution, then delivered firing."""
    first = alert(STORM_LABELS[0], starts=iso(T - 600), fingerprint="nr")
    deliver(manager, clock, T, first)
    clock.t = T + AUTO_RESOLVE_S + 80
    manager.housekeeping(now=clock.t, force=True)
    ((_, status, inc),) = episodes(manager)
    assert status == "resolved" and manager.db.count_incidents("open") == 0
    # the auto-resolved alert ends when it was last known firing, not at the auto-resolution
    (row,) = manager.db.list_alerts()
    assert row["ends_ts"] == pytest.approx(T, abs=1e-3)

    second = alert(STORM_LABELS[0], starts=iso(T + 10), fingerprint="nr")
    deliver(manager, clock, T + AUTO_RESOLVE_S + 200, second)
    assert [s for _, s, _ in episodes(manager)] == ["resolved", "firing"]
    (open_inc,) = manager.db.list_incidents("open")
    assert open_inc["id"] == inc and open_inc["firing_count"] == 1  # reopened (within the window)


def test_an_auto_resolved_alert_with_a_start_ahead_of_the_service_clock_ends_at_its_start(
    manager: IncidentManager, clock: Clock
) -> None:
    """A sender clock ahead of the service's: ``endsAt`` is never before ``startsAt``."""
    ahead = alert(STORM_LABELS[0], starts=iso(T + 60), fingerprint="nr")
    deliver(manager, clock, T, ahead)
    manager.housekeeping(now=T + AUTO_RESOLVE_S + 80, force=True)
    (row,) = manager.db.list_alerts()
    assert row["status"] == "resolved" and row["ends_ts"] == pytest.approx(T + 60, abs=1e-3)


def test_a_zero_starts_at_is_unset(manager: IncidentManager, clock: Clock) -> None:
    """Stored as an alert without ``startsAt`` (received now), grouped at the delivery time."""
    zero = alert(STORM_LABELS[0], starts="0001-01-01T00:00:00Z", fingerprint="nr")
    row = alert_row(AlertIn.model_validate(zero), T)
    assert row["starts_at"] == NO_START and row["starts_ts"] == T
    deliver(manager, clock, T, zero)
    (inc,) = manager.db.list_incidents("open")
    assert inc["first_alert_ts"] == pytest.approx(T, abs=1e-3)
    # with an endsAt, Alertmanager's API starts it there (api/v2 postAlertsHandler), so it never
    # ends before it starts
    ended = {**zero, "status": "resolved", "endsAt": iso(T - 3600), "fingerprint": "nr2"}
    row = alert_row(AlertIn.model_validate(ended), T)
    assert row["starts_at"] == NO_START and row["starts_ts"] == pytest.approx(T - 3600, abs=1e-3)
    assert row["ends_ts"] >= row["starts_ts"]


@pytest.mark.parametrize("ahead_s", [0.0, 660.0])
def test_a_refire_within_the_window_reopens_whatever_the_sender_clock(
    manager: IncidentManager, clock: Clock, ahead_s: float
) -> None:
    """docs/serving/incidents.md (Grouping): a new episode reopens the previous incident when it
    starts at most the window after the incident closed. With the sender's clock 11 min ahead of
    the service's, every re-fire opened a new incident (its ``startsAt`` read on the service's
    clock). Episode 2 starts 2 min after episode 1's resolution was processed."""
    s = ahead_s  # the sender's clock minus the service's, seconds
    first = alert(STORM_LABELS[0], starts=iso(T + s), fingerprint="nr")
    deliver(manager, clock, T, first)
    gone = {**first, "status": "resolved", "endsAt": iso(T + 300 + s)}
    deliver(manager, clock, T + 300, gone)
    assert manager.db.count_incidents("open") == 0
    second = alert(STORM_LABELS[0], starts=iso(T + 420 + s), fingerprint="nr")
    deliver(manager, clock, T + 420, second)
    (inc,) = manager.db.list_incidents(None, limit=10)
    assert inc["status"] == "open" and inc["alert_count"] == 2


def test_a_refire_past_the_window_opens_a_new_incident_with_the_sender_clock_ahead(
    manager: IncidentManager, clock: Clock
) -> None:
    """The shift does not widen the window: a re-fire 20 min after the close is a new incident."""
    s = 660.0
    first = alert(STORM_LABELS[0], starts=iso(T + s), fingerprint="nr")
    deliver(manager, clock, T, first)
    deliver(manager, clock, T + 300, {**first, "status": "resolved", "endsAt": iso(T + 300 + s)})
    second = alert(STORM_LABELS[0], starts=iso(T + 1500 + s), fingerprint="nr")
    deliver(manager, clock, T + 1500, second)
    statuses = sorted(i["status"] for i in manager.db.list_incidents(None, limit=10))
    assert statuses == ["open", "resolved"]
