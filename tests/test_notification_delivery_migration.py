"""Migration ``0006`` (``notifications.delivery``): a database at ``0005`` with a notification
row upgrades in place on SQLite and PostgreSQL, keeps the row (``delivery`` NULL, read as before
the column existed), and the notifier then records a firing message's fate there."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from serving_helpers import PgCluster
from sqlalchemy import select

from fleetmind.serving import migrations
from fleetmind.serving.db import Database, notifications
from fleetmind.serving.notify import delivery_outcome


@pytest.fixture(params=["sqlite", "postgresql"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path}/m.db"
        return
    cluster: PgCluster = request.getfixturevalue("pg")
    cluster.psql("DROP SCHEMA public CASCADE; CREATE SCHEMA public")
    yield cluster.url


def _upgrade_to(db: Database, revision: str) -> None:
    from alembic import command

    with db.engine.connect() as conn:
        command.upgrade(migrations._config(conn), revision)
        conn.commit()


def test_a_0005_notification_row_survives_the_upgrade_and_reads_as_before(url: str) -> None:
    db = Database(url)
    _upgrade_to(db, "0005")
    with db.engine.begin() as conn:
        conn.exec_driver_sql(
            "INSERT INTO notifications (incident_id, state, cause_node, labels, annotations,"
            " starts_at, am_sent_ts, hook_sent, updated_ts) VALUES (7, 'firing', 'c0/host/h1',"
            " '{\"severity\": \"critical\"}', '{}', 'x', 5.0, false, 5.0)"
        )
    assert db.migrate() == "0005"
    with db.engine.connect() as conn:
        assert migrations.current(conn) == migrations.head() >= "0006"
        row = conn.execute(select(notifications)).one()._mapping
    assert row["delivery"] is None and row["am_sent_ts"] == 5.0
    assert delivery_outcome(row) == (True, None, None)  # Alertmanager took it: as before
    assert delivery_outcome({**row, "state": "resolved"}) == (False, None, None)  # unknown
    with db.write() as conn:  # the service writes the new column
        conn.execute(
            notifications.update().values(
                delivery={"webhook": "dropped: 404", "alertmanager": "503"}
            )
        )
    with db.read() as conn:
        row = conn.execute(select(notifications)).one()._mapping
    assert delivery_outcome(row) == (
        False,
        "Alertmanager: 503",
        "the webhook refused it: 404",
    )
    assert db.migrate() == migrations.head()  # idempotent
    db.dispose()
