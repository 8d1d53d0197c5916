"""Retention deletes what nobody reads any more, and nothing still owed.

* ``notifications`` rows of deleted incidents were kept forever (97,000 orphans after 1,000 days
  of 100 incidents a day at 30-day retention), and the notifier's poll read them every second.
  Rows that owe nothing (resolved, delivered to Alertmanager and the webhook, outbox empty: the
  notifier sets ``am_sent_ts`` of a resolved row only then, serving/notify.py ``_deliver``) go with
  their incident; rows still owed a delivery stay, and so does the row of the highest incident id,
  which keeps SQLite from handing that id out again (serving/incidents/store.py).
* An incident that reopens every few minutes (one flapping fingerprint) was never closed long
  enough to be deleted, and kept every episode's alert; resolved alerts resolved before the
  retention period go whatever their incident, which keeps its row and a true ``alert_count``.
"""

from __future__ import annotations

import pytest
from sqlalchemy import insert, select, text

from fleetmind.serving.db import Database, alerts, incidents, notifications
from fleetmind.serving.incidents.store import IncidentStore

DAY = 86_400.0
NOW = 100 * DAY
BEFORE = NOW - 30 * DAY  # the retention limit


@pytest.fixture
def db(migrated_db: Database) -> Database:
    return migrated_db


def incident(conn, inc_id: int, status: str, closed: float | None) -> None:  # noqa: ANN001
    conn.execute(
        insert(incidents).values(
            id=inc_id,
            status=status,
            opened_ts=0.0,
            updated_ts=closed or NOW,
            closed_ts=closed,
            first_alert_ts=0.0,
            last_alert_ts=0.0,
            alert_count=0,
            firing_count=0,
            nodes=[],
            clusters=[],
            causes=[],
        )
    )


def alert(  # noqa: ANN201
    conn,  # noqa: ANN001
    n: int,
    inc_id: int | None,
    status: str,
    updated: float,
    fingerprint: str | None = None,
):
    conn.execute(
        insert(alerts).values(
            fingerprint=fingerprint or f"fp{n}",
            starts_at=f"2026-01-01T00:00:{n:02d}Z",
            starts_ts=0.0,
            ends_ts=updated if status == "resolved" else None,
            status=status,
            labels={},
            annotations={},
            received_ts=updated,
            updated_ts=updated,
            pending=False,
            incident_id=inc_id,
        )
    )


def notification(conn, inc_id: int, state: str, am_sent: float | None, hook: bool) -> None:  # noqa: ANN001
    conn.execute(
        insert(notifications).values(
            incident_id=inc_id,
            state=state,
            cause_node="n",
            labels={},
            annotations={},
            starts_at="2026-01-01T00:00:00Z",
            am_sent_ts=am_sent,
            hook_sent=hook,
            delivery={},
            updated_ts=0.0,
        )
    )


def test_purge_deletes_the_notifications_of_deleted_incidents_that_owe_nothing(
    db: Database,
) -> None:
    old = BEFORE - DAY
    with db.write() as conn:
        for i in range(1, 8):
            incident(conn, i, "resolved", old)
        incident(conn, 8, "resolved", NOW)  # closed within the retention period: kept
        notification(conn, 1, "resolved", old, True)  # done with: deleted
        notification(conn, 2, "resolved", old, True)  # done with: deleted
        notification(conn, 3, "resolved", None, True)  # a resolution owed to Alertmanager
        notification(conn, 4, "resolved", old, False)  # owed to the webhook
        notification(conn, 5, "firing", old, True)  # its resolution is still to be sent
        notification(conn, 7, "resolved", old, True)  # done with: deleted
        notification(conn, 8, "resolved", old, True)  # its incident is kept
    db.purge(BEFORE)
    with db.read() as conn:
        left = sorted(r[0] for r in conn.execute(select(notifications.c.incident_id)))
        kept = sorted(r[0] for r in conn.execute(select(incidents.c.id)))
    assert kept == [8]
    assert left == [3, 4, 5, 8]
    with db.write() as conn:  # every delivery done now
        conn.execute(
            notifications.update().values(state="resolved", am_sent_ts=old, hook_sent=True)
        )
    db.purge(BEFORE)
    with db.read() as conn:
        left = sorted(r[0] for r in conn.execute(select(notifications.c.incident_id)))
    assert left == [8]


def test_a_new_incident_id_stays_past_every_notified_one(db: Database) -> None:
    old = BEFORE - DAY
    with db.write() as conn:
        for i in (1, 2, 3):
            incident(conn, i, "resolved", old)
            notification(conn, i, "resolved", old, True)
        if not db.is_sqlite:  # as the service's inserts would have left it
            conn.execute(text("SELECT setval(pg_get_serial_sequence('incidents', 'id'), 3)"))
    db.purge(BEFORE)
    with db.read() as conn:  # the newest stays, whatever it is
        assert [r[0] for r in conn.execute(select(notifications.c.incident_id))] == [3]
    with db.write() as conn:
        new_id = IncidentStore(db).insert_incident(conn, NOW, NOW)
    assert new_id > 3


def test_a_flapping_alert_keeps_only_its_latest_old_episode(db: Database) -> None:
    """One fingerprint firing a minute every five reopens its incident each time: its earlier
    episodes go once resolved before the retention period, but every other alert of the open
    incident stays however long ago it resolved (the page, the re-ranking and feedback read
    them), and so does the flapping alert's latest episode."""
    with db.write() as conn:
        incident(conn, 1, "open", None)  # reopened every few minutes: never closed for long
        for n in range(10):
            alert(conn, n, 1, "resolved", BEFORE - DAY + n, fingerprint="flap")  # old episodes
        alert(conn, 10, 1, "resolved", NOW - DAY, fingerprint="flap")  # its latest episode
        alert(conn, 11, 1, "firing", BEFORE - DAY)  # still firing since long ago
        alert(conn, 13, 1, "resolved", BEFORE - DAY)  # a symptom resolved long ago: evidence
        alert(conn, 12, None, "resolved", BEFORE - DAY)  # in no incident, as before
        conn.execute(incidents.update().values(alert_count=13, firing_count=1))
    n_incidents, n_alerts = db.purge(BEFORE)
    assert (n_incidents, n_alerts) == (0, 11)
    inc = db.get_incident(1)
    assert inc is not None and inc["status"] == "open"
    rows = db.list_alerts(incident_id=1)
    assert sorted((r["fingerprint"], r["starts_at"][-3:]) for r in rows) == [
        ("flap", "10Z"),
        ("fp11", "11Z"),
        ("fp13", "13Z"),
    ]
    assert (inc["alert_count"], inc["firing_count"]) == (len(rows), 1)
