"""Alerts that fire again, and alerts that keep firing, as the incident worker groups them (SQL).

* A rule that resolves and fires again gets a new ``activeAt``, hence a new ``startsAt``
  (Prometheus ``rules/alerting.go``, ``AlertingRule.Eval``): the same fingerprint, a new alert. It
  used to open a new incident; it reopens the incident it resolved from when it starts within
  ``window_s`` of that incident's closing.
* Prometheus keeps an alert's ``startsAt`` for as long as its rule stays active, so an alert
  that has fired for long has an old start. Grouping goes by start times all the same: a host
  NotReady for 20 minutes and its GPUs' XID errors of now are two incidents. Joining them by
  what fires now made every long-firing alert take each later storm within ``hops`` of it
  (both roots of storms with a second fault found 79.2 % -> 43.4 % of the time,
  ``benchmarks/serving/incident_grouping.py``); docs/serving/incidents.md states the limitation.

Times are fixed unix seconds and the manager's clock is set by the test.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from serving_helpers import alert
from sqlalchemy import text
from test_serving_persistence import postgres_url  # noqa: F401  (the PostgreSQL server fixture)
from ui_helpers import STORM_LABELS

from fleetmind.serving.db import Database, metadata
from fleetmind.serving.defaults.example import build_example_graph
from fleetmind.serving.graphstore import GraphStore
from fleetmind.serving.incidents import IncidentManager
from fleetmind.serving.registry import ModelRegistry
from fleetmind.serving.routers.alerts import alert_row
from fleetmind.serving.schemas import AlertIn

T = 1_800_000_000.0  # "now" of the tests, unix seconds
WINDOW_S = 600.0


def iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).isoformat().replace("+00:00", "Z")


class Clock:
    """The manager's wall clock, set by the test."""

    def __init__(self) -> None:
        self.t = T

    def __call__(self) -> float:
        return self.t


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
    yield IncidentManager(db, graphs, registry, clock=clock, window_s=WINDOW_S)
    db.dispose()


@pytest.fixture(params=["sqlite", "postgresql"])
def any_db_manager(
    request: pytest.FixtureRequest, registry: ModelRegistry, clock: Clock
) -> Iterator[IncidentManager]:
    """:func:`manager` on SQLite and on PostgreSQL (the episode lookup is SQL)."""
    if request.param == "sqlite":
        yield request.getfixturevalue("manager")
        return
    db = Database(request.getfixturevalue("postgres_url"))
    metadata.drop_all(db.engine)  # each test starts from empty tables
    with db.engine.begin() as conn:
        conn.execute(text("DROP TABLE IF EXISTS alembic_version"))
    db.create_all()
    graphs = GraphStore(build_example_graph(), "t")
    yield IncidentManager(db, graphs, registry, clock=clock, window_s=WINDOW_S)
    db.dispose()


def deliver(m: IncidentManager, clock: Clock, at: float, *alerts: dict[str, Any]) -> None:
    """One webhook received at ``at`` (unix s), then grouping, both on the clock ``at``."""
    clock.t = at
    m.db.store_alerts([alert_row(AlertIn.model_validate(a), at) for a in alerts])
    m.process_pending()


def incidents(m: IncidentManager) -> list[tuple[int, str, int, int]]:
    """``(id, status, alerts, firing)`` of every incident, ascending ids."""
    rows = m.db.list_incidents(None, limit=100)
    return sorted((i["id"], i["status"], i["alert_count"], i["firing_count"]) for i in rows)


@pytest.mark.parametrize("firing_for_s", [WINDOW_S + 1, 1200.0, 3 * 86400.0])
def test_an_alert_firing_alone_past_the_window_and_its_consequences_are_two_incidents(
    manager: IncidentManager, clock: Clock, firing_for_s: float
) -> None:
    """The documented limitation: the XIDs form a second incident, ranked on its own alerts."""
    notready = alert(STORM_LABELS[0], starts=iso(T - firing_for_s), fingerprint="nr")
    deliver(manager, clock, T - firing_for_s + 5, notready)
    xids = [
        alert(lab, starts=iso(T), fingerprint=f"xid-{i}") for i, lab in enumerate(STORM_LABELS[1:3])
    ]
    # Alertmanager's notification carries the NotReady again (still firing, same startsAt)
    deliver(manager, clock, T + 5, notready, *xids)
    assert incidents(manager) == [(1, "open", 1, 1), (2, "open", 2, 2)]


def test_a_new_episode_of_an_alert_whose_incident_is_still_open_joins_by_start_times(
    manager: IncidentManager, clock: Clock
) -> None:
    """Its previous episode's incident still fires: it joins only within the window of starts."""
    t0 = T - 3600
    storm = [
        alert(lab, starts=iso(t0 + 20 * i), fingerprint=f"storm-{i}")
        for i, lab in enumerate(STORM_LABELS)
    ]
    deliver(manager, clock, t0 + 200, *storm)
    gone = {**storm[1], "status": "resolved", "endsAt": iso(t0 + 600)}
    deliver(manager, clock, t0 + 630, gone)
    last = t0 + 20 * (len(storm) - 1)
    near = alert(STORM_LABELS[1], starts=iso(last + WINDOW_S), fingerprint="storm-1")
    deliver(manager, clock, last + WINDOW_S + 5, near)
    assert incidents(manager) == [(1, "open", 8, 7)]
    gone = {**near, "status": "resolved", "endsAt": iso(last + WINDOW_S + 60)}
    deliver(manager, clock, last + WINDOW_S + 65, gone)
    late = alert(STORM_LABELS[1], starts=iso(last + 2 * WINDOW_S + 1), fingerprint="storm-1")
    deliver(manager, clock, last + 2 * WINDOW_S + 5, late)
    assert incidents(manager) == [(1, "open", 8, 6), (2, "open", 1, 1)]


def _storm_then_resolve(m: IncidentManager, clock: Clock) -> float:
    """The storm fires, then resolves; returns when its incident closed (unix s)."""
    t0 = T - 1800
    storm = [
        alert(lab, starts=iso(t0 + 20 * i), fingerprint=f"storm-{i}")
        for i, lab in enumerate(STORM_LABELS)
    ]
    deliver(m, clock, t0 + 200, *storm)
    ends = t0 + 1200
    done = [{**a, "status": "resolved", "endsAt": iso(ends)} for a in storm]
    deliver(m, clock, ends + 30, *done)
    assert incidents(m) == [(1, "resolved", len(storm), 0)]
    (inc,) = m.db.list_incidents("resolved")
    return float(inc["closed_ts"])


@pytest.mark.parametrize(("gap_s", "reopens"), [(-20.0, True), (WINDOW_S, True), (601.0, False)])
def test_a_new_episode_reopens_the_incident_it_resolved_from_within_the_window(
    any_db_manager: IncidentManager, clock: Clock, gap_s: float, reopens: bool
) -> None:
    manager = any_db_manager
    closed = _storm_then_resolve(manager, clock)
    # -20 s: after the storm's endsAt, before the incident closed (the resolution came 30 s late).
    # KubeNodeNotReady fires again: Prometheus gives it a new activeAt, hence a new startsAt
    again = alert(STORM_LABELS[0], starts=iso(closed + gap_s), fingerprint="storm-0")
    deliver(manager, clock, closed + max(gap_s, 0.0) + 10, again)
    if reopens:
        assert incidents(manager) == [(1, "open", 8, 1)]
    else:
        assert incidents(manager) == [(1, "resolved", 7, 0), (2, "open", 1, 1)]


def test_a_new_episode_that_resolved_before_grouping_reopens_nothing(
    manager: IncidentManager, clock: Clock
) -> None:
    closed = _storm_then_resolve(manager, clock)
    flap = alert(STORM_LABELS[0], starts=iso(closed + 60), fingerprint="storm-0")
    flap = {**flap, "status": "resolved", "endsAt": iso(closed + 90)}
    deliver(manager, clock, closed + 100, flap)
    assert incidents(manager) == [(1, "resolved", 7, 0), (2, "resolved", 1, 0)]


def test_an_older_episodes_incident_closed_later_is_not_reopened(
    any_db_manager: IncidentManager, clock: Clock
) -> None:
    """The previous episode decides, not the episode whose incident closed last. Episode 1 of F
    joins incident 1, kept open long after by L; episode 2 of F opens incident 2, which resolves;
    L resolves, closing incident 1. Episode 3 of F starts more than the window after incident 2
    closed (its previous episode's) and less after incident 1 closed: it reopens neither (it
    reopened incident 1, an older episode's). Prometheus starts each episode anew
    (``rules/alerting.go``: a rule that fires again gets a new ``activeAt``)."""
    manager = any_db_manager
    f_labels, l_labels = STORM_LABELS[1], STORM_LABELS[0]
    t0 = T - 10_000.0

    def f(start: float, ended: float | None = None) -> dict[str, Any]:
        a = alert(f_labels, starts=iso(start), fingerprint="F")
        return a if ended is None else {**a, "status": "resolved", "endsAt": iso(ended)}

    long_l = alert(l_labels, starts=iso(t0), fingerprint="L")
    deliver(manager, clock, t0 + 5, long_l, f(t0 + 10))
    deliver(manager, clock, t0 + 100, f(t0 + 10, t0 + 90))
    deliver(manager, clock, t0 + 2005, f(t0 + 2000))  # more than the window later: incident 2
    deliver(manager, clock, t0 + 2100, f(t0 + 2000, t0 + 2090))  # incident 2 closes
    deliver(manager, clock, t0 + 5000, {**long_l, "status": "resolved", "endsAt": iso(t0 + 4990)})
    assert incidents(manager) == [(1, "resolved", 2, 0), (2, "resolved", 1, 0)]
    deliver(manager, clock, t0 + 5105, f(t0 + 5100))  # 3000 s after incident 2, 100 s after 1
    assert incidents(manager) == [(1, "resolved", 2, 0), (2, "resolved", 1, 0), (3, "open", 1, 1)]
