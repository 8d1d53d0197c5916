"""How stored alerts follow Alertmanager's webhook when an alert fires again or changes its
``startsAt``, on SQLite and on a real PostgreSQL, with notifications shaped as Alertmanager 0.25
sends them (``notify/webhook/webhook.go``'s ``Message``; captured from a live 0.25 by the repro
kit behind these tests).

1. **An alert resolved and firing again with the same startsAt.** Alertmanager clears ``endsAt``
   of every alert not yet resolved when it flushes a group (``dispatch/dispatch.go``,
   ``aggrGroup.flush``: "Ensure that alerts don't resolve as time move forwards"), so a firing
   alert always arrives with ``endsAt`` 0001-01-01; and Prometheus keeps an alert's ``activeAt``
   when it resumes sending after a gap longer than the ``endsAt`` it gave, so Alertmanager
   resolves the alert and later notifies it firing with the same ``startsAt``. The stored alert
   stayed resolved (the rule wanted a later ``endsAt``) and so did its incident. A firing delivery
   received within ``FLEETMIND_ALERT_REFIRE_MARGIN_S`` of the resolution (an HA peer's late
   notification) still changes nothing.
2. **One alert under two startsAt.** Alertmanager merges what it receives for a fingerprint and
   keeps the earliest ``StartsAt`` (``types.Alert.Merge``: "Always pick the earliest starting
   time"): with two Prometheus HA replicas whose ``activeAt`` differ, it notifies the alert first
   with the later ``startsAt``, then with the earlier one, and resolves it with that one only. The
   row of the later ``startsAt`` was never resolved, and its incident stayed open (and paged) until
   auto-resolve, 24 h later.

The service's clock is injected (the webhook route's ``time``): no test sleeps.
"""

from __future__ import annotations

import importlib
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from serving_helpers import PgCluster, wait_for

from fleetmind.serving.app import create_app
from fleetmind.serving.db import Database
from fleetmind.serving.routers.alerts import alert_row
from fleetmind.serving.schemas import AlertIn
from fleetmind.serving.settings import Settings

alerts_route = importlib.import_module("fleetmind.serving.routers.alerts")

# the labels of the repro kit's GpuXidError (Prometheus' dcgm-exporter rule)
XID = {"alertname": "GpuXidError", "cluster": "c1", "node": "c1-h1", "gpu": "2", "xid": "79",
       "Hostname": "c1-h1", "instance": "10.0.1.7:9400", "job": "dcgm-exporter",
       "severity": "critical"}  # fmt: skip
FP = "5d3f0c6a9b1e2f47"  # Alertmanager's fingerprint of XID (any stable value will do here)
T0 = 1796402600.211471  # replica B's activeAt (2026-12-04T16:43:20.211471Z)
UNSET = "0001-01-01T00:00:00Z"  # Alertmanager's endsAt of a firing alert in a notification


def iso(ts: float, nanos: bool = False) -> str:
    """A time as Alertmanager writes it: Go's RFC 3339 with microseconds (a startsAt Prometheus
    sent) or nanoseconds (an endsAt Alertmanager set when it resolved the alert)."""
    text = datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")
    return (text + "015Z") if nanos else text + "Z"


def am_alert(
    starts: float, ends: float | None = None, labels: dict[str, str] = XID, fp: str = FP
) -> dict[str, Any]:
    """One alert of an Alertmanager 0.25 notification: ``resolved`` with ``endsAt`` when ``ends``
    is given, else ``firing`` with the zero ``endsAt``."""
    return {
        "status": "firing" if ends is None else "resolved",
        "labels": dict(labels),
        "annotations": {"summary": "xid"},
        "startsAt": iso(starts),
        "endsAt": UNSET if ends is None else iso(ends, nanos=True),
        "generatorURL": "http://prometheus:9090/graph?g0.expr=DCGM_FI_DEV_XID_ERRORS&g0.tab=1",
        "fingerprint": fp,
    }


def notification(*alerts: dict[str, Any]) -> dict[str, Any]:
    """The webhook body Alertmanager 0.25 posts for one group (a route grouped by cluster and
    alertname; deploy/alertmanager.yml's FleetMind route sends each alert on its own)."""
    common = dict(alerts[0]["labels"])
    for a in alerts[1:]:
        common = {k: v for k, v in common.items() if a["labels"].get(k) == v}
    return {
        "receiver": "fleetmind",
        "status": "firing" if any(a["status"] == "firing" for a in alerts) else "resolved",
        "alerts": list(alerts),
        "groupLabels": {"alertname": common["alertname"], "cluster": common["cluster"]},
        "commonLabels": common,
        "commonAnnotations": {"summary": "xid"},
        "externalURL": "http://alertmanager:9093",
        "version": "4",
        "groupKey": '{}/{alertname!="FleetMindRootCause"}:{alertname="GpuXidError", cluster="c1"}',
        "truncatedAlerts": 0,
    }


class Clock:
    """The service's clock as the webhook route reads it (``time.time()``), set by the test."""

    def __init__(self, now: float) -> None:
        self.now = now

    def time(self) -> float:
        return self.now

    def __getattr__(self, name: str) -> Any:  # anything else the route may read
        return getattr(time, name)


@pytest.fixture(params=["sqlite", "postgresql"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path}/lifecycle.db"
    cluster: PgCluster = request.getfixturevalue("pg")
    cluster.psql("DROP SCHEMA public CASCADE; CREATE SCHEMA public")
    return cluster.url


class Service:
    """The app on ``url`` with the incident worker driven by the test and an injected clock."""

    def __init__(self, client: TestClient, clock: Clock) -> None:
        self.client = client
        self.clock = clock
        self.services = client.app.state.services

    def post(self, at: float, *alerts: dict[str, Any]) -> None:
        self.clock.now = at
        r = self.client.post("/api/v1/alerts", json=notification(*alerts))
        assert r.status_code == 200 and r.json()["accepted"] == len(alerts), r.text

    def group(self) -> int:
        return self.services.incidents.process_pending()

    def alerts(self) -> list[dict[str, Any]]:
        r = self.client.get("/api/v1/alerts")
        assert r.status_code == 200
        return r.json()

    def incidents(self, status: str | None = None) -> list[dict[str, Any]]:
        return self.services.db.list_incidents(status)


@pytest.fixture
def service(url: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[Service]:
    clock = Clock(T0 + 30)
    monkeypatch.setattr(alerts_route, "time", clock)
    settings = Settings(
        database_url=url,
        rca_model="baseline:upstream-coverage",
        placement_model="heuristic:builtin-bestfit",
        incident_worker=False,
    )
    with TestClient(create_app(settings)) as c:
        yield Service(c, clock)


# ----------------------------------------------------------------------------- 1: fires again
def test_an_alert_firing_again_with_the_same_starts_at_reopens_it_and_its_incident(
    service: Service,
) -> None:
    """Prometheus stops sending (a restart) for longer than its endsAt margin: Alertmanager
    resolves the alert at that endsAt; Prometheus comes back with the same activeAt and
    Alertmanager notifies the alert firing again, same startsAt, endsAt 0001-01-01. Before: the
    alert and its incident stayed resolved."""
    s = service
    s.post(T0 + 30, am_alert(T0))
    assert s.group() == 1
    (inc,) = s.incidents("open")
    s.post(T0 + 300, am_alert(T0, ends=T0 + 290))  # resolved by Alertmanager
    s.group()
    assert [i["id"] for i in s.incidents("resolved")] == [inc["id"]]
    s.post(T0 + 600, am_alert(T0))  # firing again, one group_interval or more later
    (a,) = s.alerts()
    assert a["status"] == "firing" and a["endsAt"] is None
    assert s.group() == 1  # pending again: the worker reopens the incident
    (again,) = s.incidents("open")
    assert again["id"] == inc["id"] and again["firing_count"] == 1
    s.post(T0 + 900, am_alert(T0, ends=T0 + 890))  # and it resolves as the first time
    s.group()
    assert s.alerts()[0]["status"] == "resolved" and s.incidents("open") == []


def test_a_late_firing_notification_within_the_margin_does_not_reopen(service: Service) -> None:
    """The second peer of an Alertmanager HA pair sends what it flushed before the resolution
    ``--cluster.peer-timeout`` (15 s) later, after the first peer's resolved notification: within
    the margin, it changes nothing (nothing is pending, the incident stays resolved)."""
    s = service
    s.post(T0 + 30, am_alert(T0))
    s.group()
    s.post(T0 + 300, am_alert(T0, ends=T0 + 299))
    s.group()
    s.post(T0 + 312, am_alert(T0))  # the peer's stale notification, 12 s after
    (a,) = s.alerts()
    assert a["status"] == "resolved" and a["endsAt"].startswith(iso(T0 + 299)[:19])
    assert s.group() == 0
    assert s.incidents("open") == [] and len(s.incidents("resolved")) == 1


def rows(now: float, *alerts: dict[str, Any]) -> list[dict[str, Any]]:
    return [alert_row(AlertIn.model_validate(a), now) for a in alerts]


@pytest.fixture
def db(url: str) -> Iterator[Database]:
    d = Database(url)
    d.migrate()
    yield d
    d.dispose()


def test_the_refire_margin_is_measured_from_when_the_resolution_was_received(url: str) -> None:
    """The margin (``refire_margin_s``) counts from the resolution's arrival, not from the last
    delivery: stale firing deliveries inside it do not push it out. It is the setting's default."""
    from fleetmind.serving.db import REFIRE_MARGIN_S

    assert Settings.model_fields["alert_refire_margin_s"].default == REFIRE_MARGIN_S
    db = Database(url, refire_margin_s=60.0)
    db.migrate()
    try:
        db.store_alerts(rows(1000.0, am_alert(T0)))
        db.store_alerts(rows(2000.0, am_alert(T0, ends=T0 + 1990)))
        for at in (2030.0, 2059.0):  # within 60 s of the resolution
            db.store_alerts(rows(at, am_alert(T0)))
            (a,) = db.list_alerts()
            assert a["status"] == "resolved" and a["received_ts"] == at
        db.store_alerts(rows(2061.0, am_alert(T0)))
        (a,) = db.list_alerts()
        assert a["status"] == "firing" and a["pending"] and a["updated_ts"] == 2061.0
        assert a["ends_ts"] is None
    finally:
        db.dispose()


def test_a_resolution_and_a_stale_firing_committed_together_stay_resolved(tmp_path: Path) -> None:
    """SQLite commits concurrent webhooks together (group commit). A resolution and an HA peer's
    late firing notification of the same alert in one commit used to be merged by key, the later
    one alone stored: the resolution was lost. They are now applied in order."""
    from fleetmind.serving.db import _Item

    db = Database(f"sqlite:///{tmp_path}/g.db")
    db.migrate()
    try:
        db.store_alerts(rows(1000.0, am_alert(T0)))
        assert db._group is not None
        resolved, stale = rows(2000.0, am_alert(T0, ends=T0 + 1990)), rows(2001.0, am_alert(T0))
        items = [_Item(resolved), _Item(stale)]  # two webhook requests, in arrival order
        db._group._commit(items)
        (a,) = db.list_alerts()
        assert a["status"] == "resolved" and all(i.done and i.error is None for i in items)
    finally:
        db.dispose()


# ----------------------------------------------------------------------------- 2: two startsAt
def test_an_alert_merged_to_an_earlier_starts_at_is_one_alert_resolved_with_it(
    service: Service,
) -> None:
    """Two Prometheus replicas, replica B's activeAt 20 s before replica A's: Alertmanager notifies
    the alert with A's startsAt (T0+20), merges B's in keeping the earliest (T0), notifies it again
    at repeat_interval with T0, and resolves it with T0 only. Before: two rows, the first never
    resolved, its incident open until auto-resolve (24 h)."""
    s = service
    s.post(T0 + 30, am_alert(T0 + 20))
    assert s.group() == 1
    (inc,) = s.incidents("open")
    s.post(T0 + 90, am_alert(T0))  # the repeat after Alertmanager merged B's alert in
    (a,) = s.alerts()
    assert a["startsAt"].startswith(iso(T0)[:26]) and a["incident_id"] == inc["id"]
    assert a["status"] == "firing"
    s.group()
    (inc,) = s.incidents("open")
    assert inc["alert_count"] == 1 and inc["firing_count"] == 1
    s.post(T0 + 400, am_alert(T0, ends=T0 + 395))
    s.group()
    assert [a["status"] for a in s.alerts()] == ["resolved"]
    assert s.incidents("open") == [] and [i["id"] for i in s.incidents("resolved")] == [inc["id"]]


def test_rows_an_earlier_start_cannot_take_over_are_resolved_with_the_alert(
    service: Service, monkeypatch: pytest.MonkeyPatch
) -> None:
    """When a row with the earlier startsAt already exists (rows stored before a later startsAt
    was taken as a delivery of the earlier row, ``_ONTO_EARLIER``), the later row cannot move to it
    (the unique key): re-sends change nothing and fail nothing, and the resolution of the earlier
    startsAt resolves both."""
    s = service
    s.post(T0 + 30, am_alert(T0))
    with monkeypatch.context() as m:  # stored as releases before _ONTO_EARLIER stored it
        m.setattr(Database, "_onto_earlier_starts", lambda _self, _conn, rows: rows)
        s.post(T0 + 45, am_alert(T0 + 20))  # a peer's notification from before its merge
    s.group()
    s.post(T0 + 90, am_alert(T0))  # the repeat: T0 exists, T0+20 cannot move onto it
    assert sorted(a["startsAt"][:19] for a in s.alerts()) == [iso(T0)[:19], iso(T0 + 20)[:19]]
    s.post(T0 + 400, am_alert(T0, ends=T0 + 395))
    s.group()
    assert [a["status"] for a in s.alerts()] == ["resolved", "resolved"]
    assert s.incidents("open") == []


def test_three_replicas_give_one_row_at_the_earliest_start(db: Database) -> None:
    db.store_alerts(rows(1000.0, am_alert(T0 + 20)))
    db.store_alerts(rows(1030.0, am_alert(T0 + 10)))
    db.store_alerts(rows(1060.0, am_alert(T0)))
    (a,) = db.list_alerts()
    assert a["starts_ts"] == pytest.approx(T0) and a["received_ts"] == 1060.0
    assert a["status"] == "firing"


def test_a_new_episode_of_a_fingerprint_is_a_new_alert(db: Database) -> None:
    """A fingerprint resolved, then firing later with a new, later startsAt, is a new alert: the
    resolved one is not moved, and a late copy of the first resolution does not resolve the new
    one (it started after that resolution)."""
    db.store_alerts(rows(1000.0, am_alert(T0)))
    db.store_alerts(rows(1300.0, am_alert(T0, ends=T0 + 290)))
    db.store_alerts(rows(2000.0, am_alert(T0 + 1000)))  # fires anew
    db.store_alerts(rows(2010.0, am_alert(T0, ends=T0 + 290)))  # the peer's resolution, late
    old, new = db.list_alerts()
    assert (old["status"], old["starts_ts"]) == ("resolved", pytest.approx(T0))
    assert (new["status"], new["starts_ts"]) == ("firing", pytest.approx(T0 + 1000))
    db.store_alerts(rows(3000.0, am_alert(T0 + 1000, ends=T0 + 1990)))
    assert [a["status"] for a in db.list_alerts()] == ["resolved", "resolved"]


def test_only_the_resolved_fingerprint_is_touched(db: Database) -> None:
    """Rows of other fingerprints, and alerts without startsAt (keyed on the fingerprint alone),
    are left alone by the resolution of another startsAt."""
    other = am_alert(T0 + 20, labels={**XID, "gpu": "3"}, fp="other")
    db.store_alerts(rows(1000.0, am_alert(T0 + 20), other))
    db.store_alerts(rows(1000.0, {k: v for k, v in am_alert(T0).items() if k != "startsAt"}))
    db.store_alerts(rows(1100.0, am_alert(T0 - 5, ends=T0 + 90)))  # resolves fp's T0+20 too
    by = {(a["fingerprint"], a["starts_at"]): a["status"] for a in db.list_alerts()}
    assert by[("other", iso(T0 + 20).replace("Z", "+00:00"))] == "firing"
    assert by[(FP, "unknown")] == "firing"
    assert by[(FP, iso(T0 + 20).replace("Z", "+00:00"))] == "resolved"


def test_the_service_passes_its_refire_margin_to_the_database(tmp_path: Path) -> None:
    """``FLEETMIND_ALERT_REFIRE_MARGIN_S`` reaches the database the routes write through."""
    from fleetmind.serving.app import create_app
    from fleetmind.serving.settings import Settings

    s = Settings(
        database_url=f"sqlite:///{tmp_path}/m.db",
        rca_model="baseline:upstream-coverage",
        placement_model="heuristic:builtin-bestfit",
        incident_worker=False,
        alert_refire_margin_s=7.5,
    )
    with TestClient(create_app(s)) as c:
        assert c.app.state.services.db.refire_margin_s == 7.5


# ----------------------------------------------------------------------------- 3: late, later start
def test_a_late_firing_under_a_later_starts_at_does_not_reopen_a_resolved_alert(
    service: Service,
) -> None:
    """Alertmanager keeps the earliest ``StartsAt`` of an alert (``types.Alert.Merge``: "Always
    pick the earliest starting time"), so after it resolved the alert under T0, a firing
    notification under T0+20 (an HA peer's from before it merged replica B's alert in) is the same,
    resolved alert. Before: a second row was stored firing and the incident reopened until
    auto-resolve (24 h). A startsAt after the resolution's endsAt is a new episode and fires."""
    s = service
    s.post(T0 + 30, am_alert(T0))
    s.group()
    (inc,) = s.incidents("open")
    s.post(T0 + 700, am_alert(T0, ends=T0 + 600))
    s.group()
    assert s.incidents("open") == []
    s.post(T0 + 720, am_alert(T0 + 20))  # the peer's stale notification
    assert [a["status"] for a in s.alerts()] == ["resolved", "resolved"]
    assert {a["endsAt"][:19] for a in s.alerts()} == {iso(T0 + 600)[:19]}
    s.group()
    assert s.incidents("open") == [] and [i["id"] for i in s.incidents("resolved")] == [inc["id"]]
    s.post(T0 + 760, am_alert(T0 + 20))  # again, past the re-fire margin: still the same alert
    assert [a["status"] for a in s.alerts()] == ["resolved", "resolved"]
    s.post(T0 + 1000, am_alert(T0 + 900))  # started after the endsAt: a new episode
    assert [a["status"] for a in s.alerts()] == ["resolved", "resolved", "firing"]
    s.group()
    assert len(s.incidents("open")) == 1


def test_a_stale_start_does_not_move_a_new_episode_into_a_resolved_one(db: Database) -> None:
    """:data:`fleetmind.serving.db._MOVE_START` moves a firing row to an earlier startsAt; not
    into the span of a resolved row (that notification is stale): the new episode keeps firing."""
    db.store_alerts(rows(1000.0, am_alert(T0)))
    db.store_alerts(rows(1600.0, am_alert(T0, ends=T0 + 600)))
    db.store_alerts(rows(2000.0, am_alert(T0 + 900)))  # a new episode
    db.store_alerts(rows(2010.0, am_alert(T0 + 20)))  # stale, inside the first episode
    first, stale, new = sorted(db.list_alerts(), key=lambda a: a["starts_ts"])
    assert (first["status"], stale["status"], new["status"]) == ("resolved", "resolved", "firing")
    assert stale["starts_ts"] == pytest.approx(T0 + 20)
    assert stale["ends_ts"] == pytest.approx(T0 + 600)
    assert new["starts_ts"] == pytest.approx(T0 + 900)


# ----------------------------------------------------------------------------- 4: two replicas
def test_one_alert_sent_to_two_replicas_at_once_is_one_row_on_postgresql(pg: PgCluster) -> None:
    """Two replicas store the same alert under two startsAt in overlapping transactions. Under
    READ COMMITTED a statement sees only rows committed before it began (PostgreSQL docs,
    "Transaction Isolation", 13.2.1), so the second replica's ``_MOVE_START`` did not see the
    first's uncommitted row and inserted a second one. The store transaction now takes a
    transaction advisory lock per fingerprint (``pg_advisory_xact_lock``, "Advisory Lock
    Functions"): the second waits for the first to commit, then moves its row."""
    import threading

    pg.psql("DROP SCHEMA public CASCADE; CREATE SCHEMA public")
    first, second = Database(pg.url), Database(pg.url)
    first.migrate()
    go, reached, errors = threading.Event(), threading.Event(), []
    store_round = first._store_round

    def paused(conn: Any, part: list[dict[str, Any]]) -> None:  # replica 1, before its commit
        store_round(conn, part)
        reached.set()
        go.wait(60)

    first._store_round = paused  # type: ignore[method-assign]

    def run(db: Database, at: float, starts: float) -> None:
        try:
            db.store_alerts(rows(at, am_alert(starts)))
        except Exception as err:  # reported below
            errors.append(err)

    a = threading.Thread(target=run, args=(first, 1000.0, T0 + 20))
    b = threading.Thread(target=run, args=(second, 1000.5, T0))
    blocked = "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted"
    try:
        a.start()
        assert reached.wait(30)  # replica 1 stored its row, not committed yet
        b.start()
        # replica 2 either finishes (it did not wait: the old race) or waits on the lock
        assert wait_for(lambda: not b.is_alive() or pg.psql(blocked) != "0", timeout=30)
    finally:
        go.set()
        a.join(60)
        b.join(60)
        first.dispose()
        second.dispose()
    assert not errors, errors
    assert pg.psql("SELECT count(*) FROM alerts") == "1"
    assert float(pg.psql("SELECT starts_ts FROM alerts")) == pytest.approx(T0)


def test_a_large_webhook_takes_a_bounded_number_of_locks(pg: PgCluster) -> None:
    """Every advisory lock takes an entry of PostgreSQL's shared lock table, which holds
    ``max_locks_per_transaction`` (64) x ``max_connections`` entries (PostgreSQL docs, "Lock
    Management"); one lock per fingerprint made a 10,000-alert webhook take 10,000, and two such
    webhooks at once failed with "out of shared memory". The store locks fingerprint slots."""
    from sqlalchemy import text

    from fleetmind.serving.db import ALERT_LOCK_SLOTS

    pg.psql("DROP SCHEMA public CASCADE; CREATE SCHEMA public")
    d = Database(pg.url)
    d.migrate()
    many = rows(1000.0, *(am_alert(T0, fp=f"{i:016x}") for i in range(2000)))
    held = "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid()"
    try:
        with d.write() as conn:
            d._lock_fingerprints(conn, many)
            n = conn.execute(text(held)).scalar_one()
        assert 1 <= n <= ALERT_LOCK_SLOTS <= 64
        d.store_alerts(many)
        with d.read() as conn:
            assert conn.execute(text("SELECT count(*) FROM alerts")).scalar_one() == 2000
    finally:
        d.dispose()
