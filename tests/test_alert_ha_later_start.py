"""One alert delivered by two Alertmanager HA peers under two ``startsAt`` is one row, in either
order, sequentially and from two replicas at once; a fingerprint firing again after it resolved is
still a new alert.

Upstream reference: Alertmanager merges every alert it receives with the one it holds for the
fingerprint and keeps the earliest start (prometheus/alertmanager ``types/types.go``,
``Alert.Merge``: "Always pick the earliest starting time"), so a peer that notifies the later
``startsAt`` is behind, not reporting another alert (``docs/serving/incidents.md``).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from serving_helpers import PgCluster
from test_alert_lifecycle import T0, am_alert, rows

from fleetmind.serving.db import Database


@pytest.fixture(params=["sqlite", "postgresql"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path}/ha.db"
    cluster: PgCluster = request.getfixturevalue("pg")
    cluster.psql("DROP SCHEMA public CASCADE; CREATE SCHEMA public")
    return cluster.url


@pytest.fixture
def db(url: str) -> Iterator[Database]:
    d = Database(url)
    d.migrate()
    yield d
    d.dispose()


def test_a_later_start_after_the_earlier_one_is_a_resend_of_it(db: Database) -> None:
    """Peer 1 notified T0 (merged), peer 2 still holds T0+20 and notifies it afterwards: before,
    a second firing row (and a second alert in the incident, firing until auto-resolve)."""
    db.store_alerts(rows(1000.0, am_alert(T0)))
    db.store_alerts(rows(1010.0, am_alert(T0 + 20)))
    (a,) = db.list_alerts()
    assert a["starts_ts"] == pytest.approx(T0) and a["status"] == "firing"
    assert a["received_ts"] == 1010.0  # counts as a delivery of the alert (auto-resolve)
    db.store_alerts(rows(1400.0, am_alert(T0, ends=T0 + 390)))
    (a,) = db.list_alerts()
    assert a["status"] == "resolved"


def test_a_new_firing_after_the_resolution_is_a_new_alert(db: Database) -> None:
    """Resolved rows are left alone: the fingerprint firing again under a later startsAt (after
    the resolution's endsAt) is a new alert, and a later peer start of that new alert joins it."""
    db.store_alerts(rows(1000.0, am_alert(T0)))
    db.store_alerts(rows(1100.0, am_alert(T0, ends=T0 + 90)))
    db.store_alerts(rows(1300.0, am_alert(T0 + 200)))
    db.store_alerts(rows(1310.0, am_alert(T0 + 230)))  # the other peer's start of the new alert
    old, new = sorted(db.list_alerts(), key=lambda a: a["starts_ts"])
    assert (old["status"], old["starts_ts"]) == ("resolved", pytest.approx(T0))
    assert (new["status"], new["starts_ts"]) == ("firing", pytest.approx(T0 + 200))
    assert new["received_ts"] == 1310.0


def test_the_earliest_of_several_firing_rows_takes_the_delivery(db: Database) -> None:
    """Three replicas' starts, the earliest first: one row at the earliest start."""
    for at, start in ((1000.0, T0), (1010.0, T0 + 20), (1020.0, T0 + 10)):
        db.store_alerts(rows(at, am_alert(start)))
    (a,) = db.list_alerts()
    assert a["starts_ts"] == pytest.approx(T0) and a["received_ts"] == 1020.0


@pytest.mark.parametrize("first_start", [T0, T0 + 20], ids=["earlier-first", "later-first"])
def test_two_replicas_storing_both_starts_at_once_keep_one_row(
    url: str, first_start: float
) -> None:
    """Replica 1 stores one start and holds its transaction open; replica 2 stores the other
    meanwhile (it waits for the write lock: SQLite's database lock, PostgreSQL's fingerprint
    advisory lock) and then takes replica 1's row into account: one row at the earliest start."""
    other = T0 + 20 if first_start == T0 else T0
    first, second = Database(url), Database(url)
    first.migrate()
    reached, go, errors = threading.Event(), threading.Event(), []
    store_round = first._store_round

    def paused(conn: Any, part: list[dict[str, Any]]) -> None:
        store_round(conn, part)
        reached.set()
        go.wait(30)

    first._store_round = paused  # type: ignore[method-assign]

    def run(db: Database, at: float, start: float) -> None:
        try:
            db.store_alerts(rows(at, am_alert(start)))
        except Exception as err:  # reported below
            errors.append(err)

    a = threading.Thread(target=run, args=(first, 1000.0, first_start))
    b = threading.Thread(target=run, args=(second, 1000.5, other))
    try:
        a.start()
        assert reached.wait(30)
        b.start()
        b.join(0.3)  # it must wait for replica 1's commit
        assert b.is_alive()
    finally:
        go.set()
        a.join(30)
        b.join(30)
    try:
        assert not errors, errors
        (row,) = second.list_alerts()
        assert row["starts_ts"] == pytest.approx(T0) and row["status"] == "firing"
    finally:
        first.dispose()
        second.dispose()


def test_an_episode_long_after_an_unresolved_one_is_a_new_alert(db: Database) -> None:
    """With ``send_resolved: false`` an episode is never resolved: the fingerprint firing again an
    hour later is a new alert, not a re-send of the old one (``HA_START_SKEW_S``)."""
    from fleetmind.serving.db import HA_START_SKEW_S

    db.store_alerts(rows(1000.0, am_alert(T0)))
    db.store_alerts(rows(5000.0, am_alert(T0 + 3600)))
    db.store_alerts(rows(5010.0, am_alert(T0 + HA_START_SKEW_S - 1)))  # within the skew: T0's
    old, new = sorted(db.list_alerts(), key=lambda a: a["starts_ts"])
    assert old["starts_ts"] == pytest.approx(T0) and old["received_ts"] == 5010.0
    assert new["starts_ts"] == pytest.approx(T0 + 3600) and new["status"] == "firing"


def test_a_re_fire_two_minutes_later_survives_a_late_resolve_of_the_first(db: Database) -> None:
    """Out of order: the first episode (T0) fires, the rule fires again as a new episode two
    minutes later (longer than HA replicas' start skew, one evaluation interval), and the first
    episode's resolve arrives only then. The second episode stays firing."""
    db.store_alerts(rows(1000.0, am_alert(T0)))
    db.store_alerts(rows(1130.0, am_alert(T0 + 120)))
    db.store_alerts(rows(1140.0, am_alert(T0, ends=T0 + 60)))
    old, new = sorted(db.list_alerts(), key=lambda a: a["starts_ts"])
    assert (old["status"], new["status"]) == ("resolved", "firing")
    assert new["starts_ts"] == pytest.approx(T0 + 120)
