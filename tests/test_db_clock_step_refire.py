"""A resolution stored while the host clock was ahead does not keep the alert resolved.

The clock stepped forward (2 h), a resolution was received and stored with that time; after the
clock was corrected every re-fire of the alert looked older than the resolution and was ignored
until the wall clock passed the bad time. A delivery received more than ``CLOCK_STEP_S`` before
the stored resolution, while that resolution lies more than ``CLOCK_STEP_S`` in the future of the
database's clock, is newer than it (the clock stepped back), as the notifier takes a time in
the future for a backward step (serving/notify.py). A firing notification held up behind the
resolution (an Alertmanager HA peer, ``--cluster.peer-timeout`` 15 s;
prometheus/alertmanager ``cluster/cluster.go``; or a request that waited long for the write lock)
still changes nothing.
"""

from __future__ import annotations

import time

import pytest
from sqlalchemy import text

from fleetmind.serving.db import CLOCK_STEP_S, Database
from fleetmind.serving.routers.alerts import alert_row
from fleetmind.serving.schemas import AlertIn

T = float(int(time.time()) - 1800)  # the rule reads the database's own clock: times near it
LABELS = {"alertname": "GpuXid", "cluster": "c0", "node": "c0-h1", "gpu": "1"}
FIRING_END = "0001-01-01T00:00:00Z"  # what Alertmanager sends for a firing alert


@pytest.fixture
def db(migrated_db: Database) -> Database:
    return migrated_db


def send(db: Database, received: float, status: str, ends_at: str) -> None:
    alert = {
        "labels": LABELS,
        "annotations": {},
        "fingerprint": "fp1",
        "startsAt": "2026-03-29T00:30:00Z",
        "status": status,
        "endsAt": ends_at,
    }
    db.store_alerts([alert_row(AlertIn.model_validate(alert), received)])


def status(db: Database) -> str:
    with db.read() as conn:
        return str(conn.execute(text("SELECT status FROM alerts")).scalar_one())


def test_a_refire_after_the_clock_stepped_back_reopens_the_alert(db: Database) -> None:
    send(db, T + 60, "firing", FIRING_END)
    send(db, T + 7200 + 600, "resolved", "2026-03-29T00:40:00Z")  # the clock 2 h ahead
    assert status(db) == "resolved"
    send(db, T + 1200 + 300, "firing", FIRING_END)  # corrected: the alert fires again
    assert status(db) == "firing"


def test_a_firing_notification_held_up_behind_the_resolution_changes_nothing(
    db: Database,
) -> None:
    send(db, T + 60, "firing", FIRING_END)
    send(db, T + 600, "resolved", "2026-03-29T00:40:00Z")
    send(db, T + 600 - 30, "firing", FIRING_END)  # received 30 s earlier, committed later
    assert status(db) == "resolved"
    send(db, T + 600 - CLOCK_STEP_S + 1, "firing", FIRING_END)  # still inside the bound
    assert status(db) == "resolved"
    # held up longer than the bound (a request that waited for the write lock): the resolution
    # lies in the past of the clock, so this is no clock step either
    send(db, T + 600 - CLOCK_STEP_S - 100, "firing", FIRING_END)
    assert status(db) == "resolved"
