"""A storm that resolves while the incident worker is still grouping it stays one incident (SQL).

The worker groups pending alerts 500 at a time (``IncidentManager.process_pending``'s ``limit``).
When a storm's resolutions arrive before all of it was grouped, the incident of its first batches
resolves as soon as the alerts grouped so far have resolved; each later batch of alerts resolved
before they were grouped used to find no open incident and opened one of its own (a 3,000-alert
storm of one host became 2 to 6 incidents). Such an alert now joins, by the same time and graph
rules, a resolved incident that closed at most the window before its resolution was stored
(:class:`fleetmind.serving.incidents.grouper.Grouper`), read back from the database at every batch,
so the rule holds across worker passes and restarts.

Times are fixed unix seconds and the manager's clock is set by the test.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from serving_helpers import alert
from sqlalchemy import text
from test_incident_refire import WINDOW_S, Clock, T, incidents, iso
from test_serving_persistence import postgres_url  # noqa: F401  (the PostgreSQL server fixture)

from fleetmind.serving.db import Database, metadata
from fleetmind.serving.defaults.example import build_example_graph
from fleetmind.serving.graphstore import GraphStore
from fleetmind.serving.incidents import IncidentManager
from fleetmind.serving.registry import ModelRegistry
from fleetmind.serving.routers.alerts import alert_row
from fleetmind.serving.schemas import AlertIn


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
    yield IncidentManager(
        db, GraphStore(build_example_graph(), "t"), registry, clock=clock, window_s=WINDOW_S
    )
    db.dispose()


@pytest.fixture(params=["sqlite", "postgresql"])
def any_db_manager(
    request: pytest.FixtureRequest, registry: ModelRegistry, clock: Clock
) -> Iterator[IncidentManager]:
    """:func:`manager` on SQLite and on PostgreSQL (the resolved incidents are read in SQL)."""
    if request.param == "sqlite":
        yield request.getfixturevalue("manager")
        return
    db = Database(request.getfixturevalue("postgres_url"))
    metadata.drop_all(db.engine)  # each test starts from empty tables
    with db.engine.begin() as conn:
        conn.execute(text("DROP TABLE IF EXISTS alembic_version"))
    db.create_all()
    yield IncidentManager(
        db, GraphStore(build_example_graph(), "t"), registry, clock=clock, window_s=WINDOW_S
    )
    db.dispose()


BATCH = 500  # the worker's batch (IncidentManager.process_pending's default limit)
N = 3 * BATCH  # alerts of the storm: grouped over several batches
HOST = {"alertname": "PodCrash", "cluster": "c0", "node": "c0-h1", "severity": "warning"}


def storm(status: str, starts: float, ends: float | None = None) -> list[dict[str, Any]]:
    """``N`` alerts of one graph node with one ``startsAt``."""
    out = []
    for i in range(N):
        a = alert({**HOST, "pod": f"p{i:04d}"}, starts=iso(starts), fingerprint=f"f{i:04d}")
        if status == "resolved":
            a = {**a, "status": "resolved", "endsAt": iso(ends if ends is not None else starts)}
        out.append(a)
    return out


def gone(pod: str, starts: float) -> dict[str, Any]:
    """An alert of the host's ``pod`` that started at ``starts`` and resolved 30 s later."""
    a = alert({**HOST, "pod": pod}, starts=iso(starts), fingerprint=pod)
    return {**a, "status": "resolved", "endsAt": iso(starts + 30)}


def store(m: IncidentManager, clock: Clock, at: float, alerts: list[dict[str, Any]]) -> None:
    """One webhook received at ``at`` (unix s), not grouped yet."""
    clock.t = at
    m.db.store_alerts([alert_row(AlertIn.model_validate(a), at) for a in alerts])


def drain(m: IncidentManager) -> int:
    """Group every pending alert, batch by batch; returns how many batches ran."""
    n = 0
    while m.process_pending() > 0:
        n += 1
    return n


def restarted(m: IncidentManager, clock: Clock) -> IncidentManager:
    """A new process on the same database (its grouper rebuilt from it)."""
    graphs = GraphStore(m.graphs.graph, "t")
    fresh = IncidentManager(m.db, graphs, m.registry, clock=clock, window_s=WINDOW_S)
    fresh.load_open()
    return fresh


@pytest.mark.parametrize("restart", [False, True])
def test_a_storm_resolved_while_it_is_grouped_is_one_incident(
    any_db_manager: IncidentManager, clock: Clock, restart: bool
) -> None:
    m = any_db_manager
    t0 = T - 60
    store(m, clock, T, storm("firing", t0))
    assert m.process_pending() == BATCH  # the incident opens with the first batch
    assert incidents(m) == [(1, "open", BATCH, BATCH)]
    store(m, clock, T + 1, storm("resolved", t0, T + 1))  # resolved before the rest is grouped
    clock.t = T + 2
    assert m.process_pending() == BATCH  # the grouped ones resolve: the incident resolves
    assert incidents(m) == [(1, "resolved", BATCH, 0)]
    if restart:
        m = restarted(m, clock)
    clock.t = T + 30
    drain(m)
    assert incidents(m) == [(1, "resolved", N, 0)]
    (inc,) = m.db.list_incidents("resolved")
    assert inc["nodes"] == ["c0/host/c0-h1"]
    assert inc["closed_ts"] == T + 2  # still when it resolved


def test_a_storm_resolved_before_any_of_it_was_grouped_is_one_incident(
    any_db_manager: IncidentManager, clock: Clock
) -> None:
    m = any_db_manager
    t0 = T - 60
    store(m, clock, T, storm("firing", t0))
    store(m, clock, T + 1, storm("resolved", t0, T + 1))
    clock.t = T + 2
    assert drain(m) == N // BATCH
    assert incidents(m) == [(1, "resolved", N, 0)]


def test_a_late_resolution_joins_only_within_the_window(
    manager: IncidentManager, clock: Clock
) -> None:
    """An alert whose resolution was stored more than the window after the incident closed, or
    that started outside the window of the incident's alerts, opens an incident as before."""
    m = manager
    t0 = T - 60
    first = alert({**HOST, "pod": "a"}, starts=iso(t0), fingerprint="a")
    store(m, clock, T, [first])
    m.process_pending()
    store(m, clock, T + 1, [{**first, "status": "resolved", "endsAt": iso(T + 1)}])
    m.process_pending()  # incident 1 closes at T + 1
    too_late = gone("b", t0)
    store(m, clock, T + 1 + WINDOW_S + 1, [too_late])
    m.process_pending()
    too_far = gone("c", t0 + WINDOW_S + 1)
    store(m, clock, T + 2, [too_far])
    m.process_pending()
    assert incidents(m) == [(1, "resolved", 1, 0), (2, "resolved", 1, 0), (3, "resolved", 1, 0)]
    in_time = gone("d", t0)
    store(m, clock, T + 1 + WINDOW_S, [in_time])
    m.process_pending()
    assert incidents(m)[0] == (1, "resolved", 2, 0)


def test_the_recently_closed_lookup_reads_an_index_not_every_resolved_incident(
    tmp_path: Path,
) -> None:
    """The lookup runs in every batch that holds a late resolution: on SQLite it must search
    ``ix_incidents_status_closed`` (migration 0010), not scan the resolved incidents kept."""
    from fleetmind.serving.incidents.store import IncidentStore

    db = Database(f"sqlite:///{tmp_path}/plan.db")
    db.migrate()
    store = IncidentStore(db)
    seen: list[str] = []
    with db.engine.connect() as conn:
        from sqlalchemy import event

        @event.listens_for(conn, "before_cursor_execute")
        def _keep(_c: Any, _cur: Any, stmt: str, params: Any, *_a: Any) -> None:
            if "FROM incidents" in stmt and not stmt.startswith("EXPLAIN"):
                seen.append(stmt)
                seen.append(params)

        assert store.resolved_near(conn, T - WINDOW_S, T + WINDOW_S, T - WINDOW_S) == []
        stmt, params = seen[0], seen[1]
        plan = conn.exec_driver_sql("EXPLAIN QUERY PLAN " + stmt, params).all()
    db.dispose()
    assert any("ix_incidents_status_closed" in str(row[-1]) for row in plan), plan


def test_a_late_resolution_does_not_re_rank_the_incident_that_paged(
    manager: IncidentManager, clock: Clock
) -> None:
    """Resolutions alone never re-rank (the module's rule): the causes stay those ranked while the
    alerts fired, which the ``FleetMindRootCause`` resolution already named."""
    t0 = T - 60
    fired = [
        alert({**HOST, "alertname": "HostDown"}, starts=iso(t0), fingerprint="h"),
        alert({**HOST, "gpu": "3", "alertname": "GpuXid"}, starts=iso(t0 + 5), fingerprint="g3"),
    ]
    store(manager, clock, T, fired)
    manager.process_pending()
    store(manager, clock, T + 5, [{**a, "status": "resolved", "endsAt": iso(T + 5)} for a in fired])
    manager.process_pending()
    before = manager.db.get_incident(1)
    assert before["status"] == "resolved"
    ranked: list[int] = []
    rank = manager._rank
    manager._rank = lambda i: (ranked.append(i), rank(i))  # type: ignore[method-assign]
    late = [
        {
            **alert({**HOST, "gpu": str(g), "alertname": "GpuXid"}, starts=iso(t0 + 10)),
            "fingerprint": f"late{g}",
            "status": "resolved",
            "endsAt": iso(T + 20),
        }
        for g in (5, 6, 7)
    ]
    store(manager, clock, T + 20, late)
    manager.process_pending()
    after = manager.db.get_incident(1)
    assert ranked == []
    assert (after["status"], after["alert_count"], after["firing_count"]) == ("resolved", 5, 0)
    assert (after["causes"], after["rca_ts"]) == (before["causes"], before["rca_ts"])


def test_an_unmapped_alert_is_counted_once_when_its_batch_is_retried(
    tmp_path: Path, registry: ModelRegistry, clock: Clock
) -> None:
    from fleetmind.serving.metrics import Metrics

    db = Database(f"sqlite:///{tmp_path}/u.db")
    db.create_all()
    metrics = Metrics()
    m = IncidentManager(
        db,
        GraphStore(build_example_graph(), "t"),
        registry,
        clock=clock,
        window_s=WINDOW_S,
        metrics=metrics,
    )
    unmapped = {"alertname": "X", "cluster": "nope", "severity": "warning"}
    store(m, clock, T, [alert(unmapped, starts=iso(T - 5), fingerprint="u1")])
    mark = m.store.mark_grouped
    fail = [RuntimeError("database blip")]

    def flaky(conn: Any, done: Any) -> None:
        if fail:
            raise fail.pop()
        mark(conn, done)

    m.store.mark_grouped = flaky  # type: ignore[method-assign]
    with pytest.raises(RuntimeError):
        m.process_pending()  # rolled back: the alert stays pending
    assert m.process_pending() == 1
    assert metrics.alerts_unmapped.labels("unknown_cluster")._value.get() == 1.0
    db.dispose()
