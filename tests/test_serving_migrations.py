"""Schema migrations (Alembic): a database created by ``create_all`` in a build before Alembic
(no ``alembic_version``; release 0.2.0's databases are already at ``0004``) upgrades in place on SQLite and PostgreSQL, keeps its rows and ends with
exactly the schema the code declares; an unknown (newer) revision and a behind database with
``migrate_on_start`` off are refused with a clear message."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from serving_helpers import PgCluster, alert
from sqlalchemy import (
    JSON,
    Boolean,
    Column,
    Float,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    UniqueConstraint,
    event,
    inspect,
    text,
)

from fleetmind.data.errors import ConfigError
from fleetmind.serving import migrations
from fleetmind.serving.db import Database, metadata
from fleetmind.serving.routers.alerts import alert_row
from fleetmind.serving.schemas import AlertIn


def release_metadata() -> MetaData:
    """The tables exactly as the builds before Alembic declared them (``serving/db.py`` then), the
    schema of revision ``0001``."""
    md = MetaData()
    Table(
        "alerts",
        md,
        Column("id", Integer, primary_key=True, autoincrement=True),
        Column("fingerprint", String(128), nullable=False),
        Column("starts_at", String(40), nullable=False),
        Column("starts_ts", Float, nullable=False),
        Column("ends_ts", Float, nullable=True),
        Column("status", String(16), nullable=False),
        Column("alertname", String(256), nullable=True),
        Column("labels", JSON, nullable=False),
        Column("annotations", JSON, nullable=False),
        Column("generator_url", Text, nullable=True),
        Column("node", String(512), nullable=True),
        Column("received_ts", Float, nullable=False),
        Column("updated_ts", Float, nullable=False),
        Column("pending", Boolean, nullable=False, default=True, index=True),
        Column("incident_id", Integer, nullable=True),
        UniqueConstraint("fingerprint", "starts_at", name="uq_alert_fingerprint_starts"),
        Index("ix_alerts_incident", "incident_id", "id", "status"),
    )
    Table(
        "incidents",
        md,
        Column("id", Integer, primary_key=True, autoincrement=True),
        Column("status", String(16), nullable=False, index=True),
        Column("opened_ts", Float, nullable=False),
        Column("updated_ts", Float, nullable=False),
        Column("closed_ts", Float, nullable=True),
        Column("first_alert_ts", Float, nullable=False),
        Column("last_alert_ts", Float, nullable=False),
        Column("alert_count", Integer, nullable=False, default=0),
        Column("firing_count", Integer, nullable=False, default=0),
        Column("nodes", JSON, nullable=False),
        Column("clusters", JSON, nullable=False),
        Column("causes", JSON, nullable=False),
        Column("method", String(128), nullable=True),
        Column("model_version", String(256), nullable=True),
        Column("rca_ts", Float, nullable=True),
        Column("merged_into", Integer, nullable=True),
    )
    return md


@pytest.fixture(params=["sqlite", "postgresql"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path}/m.db"
        return
    cluster: PgCluster = request.getfixturevalue("pg")
    cluster.psql("DROP SCHEMA public CASCADE; CREATE SCHEMA public")
    yield cluster.url


def schema_diff(db: Database) -> list[object]:
    """What Alembic's autogenerate finds between the database and ``serving.db.metadata``."""
    from alembic.autogenerate import compare_metadata
    from alembic.runtime.migration import MigrationContext

    with db.engine.connect() as conn:
        ctx = MigrationContext.configure(conn, opts={"compare_type": not db.is_sqlite})
        return list(compare_metadata(ctx, metadata))


def _row(fp: str) -> dict:
    a = alert({"alertname": "GpuXid", "cluster": "c0", "node": "c0-h1"}, fingerprint=fp)
    return alert_row(AlertIn.model_validate(a), 1000.0)


def test_upgrade_from_a_release_create_all_database(url: str) -> None:
    db = Database(url)
    release_metadata().create_all(db.engine)
    with db.engine.begin() as conn:  # rows written by the release
        r = _row("before")
        r["labels"] = '{"alertname": "GpuXid"}'
        r["annotations"] = "{}"
        conn.execute(
            text(
                "INSERT INTO alerts (fingerprint, starts_at, starts_ts, status, alertname, labels,"
                " annotations, received_ts, updated_ts, pending) VALUES (:fingerprint, "
                ":starts_at, :starts_ts, :status, :alertname, :labels, :annotations, "
                ":received_ts, :updated_ts, true)"
            ),
            r,
        )
    assert db.migrate() == "create_all"
    with db.engine.connect() as conn:
        assert migrations.current(conn) == migrations.head()
    assert schema_diff(db) == []
    assert db.count_alerts() == 1
    db.store_alerts([_row("after")])  # the service writes on the upgraded schema
    assert db.count_alerts() == 2
    assert db.migrate() == migrations.head()  # idempotent: nothing left to do
    db.dispose()


def test_empty_database_gets_the_declared_schema(url: str) -> None:
    db = Database(url)
    assert db.migrate() == "none"
    assert schema_diff(db) == []
    names = set(inspect(db.engine).get_table_names())
    assert {"alerts", "incidents", "alembic_version"} <= names
    db.dispose()


def test_refusals_are_clear(url: str) -> None:
    db = Database(url)
    with pytest.raises(ConfigError, match="FLEETMIND_MIGRATE_ON_START"):
        db.migrate(apply=False)  # empty, and not allowed to create the schema
    db.migrate()
    assert db.migrate(apply=False) == migrations.head()
    with db.engine.begin() as conn:
        conn.execute(text("UPDATE alembic_version SET version_num = 'ffff'"))
    with pytest.raises(ConfigError, match="newer FleetMind"):
        db.migrate()
    with pytest.raises(ConfigError, match="newer FleetMind"):
        db.migrate(apply=False)
    db.dispose()


def test_indexes_on_existing_postgresql_tables_are_built_concurrently(pg: PgCluster) -> None:
    """Every ``CREATE INDEX`` that an upgrade of a release database runs on PostgreSQL is
    ``CONCURRENTLY`` (a plain build blocks the webhook's inserts for the whole build)."""
    pg.psql("DROP SCHEMA public CASCADE; CREATE SCHEMA public")
    db = Database(pg.url)
    old = release_metadata()
    old.create_all(db.engine)
    with db.engine.begin() as conn:  # a release database from before the covering index
        conn.execute(text("DROP INDEX ix_alerts_incident"))
        conn.execute(text("CREATE INDEX ix_alerts_incident_id ON alerts (incident_id)"))
    statements: list[str] = []

    @event.listens_for(db.engine, "before_cursor_execute")
    def _seen(_c: object, _cur: object, stmt: str, *_a: object) -> None:
        statements.append(stmt)

    db.migrate()
    built = [s for s in statements if "CREATE INDEX" in s.upper()]
    assert built, "the upgrade built no index"
    assert all("CONCURRENTLY" in s.upper() for s in built), built
    names = {i["name"]: i["column_names"] for i in inspect(db.engine).get_indexes("alerts")}
    assert names["ix_alerts_incident"] == ["incident_id", "id", "status"]
    assert "ix_alerts_incident_id" in names  # left for the operator to drop
    assert names["ix_alerts_pending_updated"] == ["pending", "updated_ts"]
    db.dispose()


def test_replicas_upgrading_postgresql_at_once_all_start(pg: PgCluster) -> None:
    """Replicas of a rollout start together on a release database. A replica waiting for the
    migration lock in ``pg_advisory_lock`` held a snapshot that the migrating one's
    ``CREATE INDEX CONCURRENTLY`` waited for: PostgreSQL ended one of them with "deadlock
    detected" (the replica exited 2). Each now waits with no transaction open."""
    import subprocess
    import sys

    pg.psql("DROP SCHEMA public CASCADE; CREATE SCHEMA public")
    db = Database(pg.url)
    release_metadata().create_all(db.engine)
    with db.engine.begin() as conn:  # a release database from before the covering index
        conn.execute(text("DROP INDEX ix_alerts_incident"))
    db.dispose()
    code = "import sys; from fleetmind.serving.db import Database; Database(sys.argv[1]).migrate()"
    procs = [
        subprocess.Popen([sys.executable, "-c", code, pg.url], stderr=subprocess.PIPE, text=True)
        for _ in range(3)
    ]
    errs = [(p.wait(timeout=120), p.stderr.read() if p.stderr else "") for p in procs]
    assert all(rc == 0 for rc, _ in errs), errs
    db = Database(pg.url)
    names = {i["name"] for i in inspect(db.engine).get_indexes("alerts")}
    assert {"ix_alerts_incident", "ix_alerts_pending_updated"} <= names
    db.dispose()
