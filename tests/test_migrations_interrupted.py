"""A schema upgrade interrupted part way (a full disk, a crash) leaves the database at the last
revision it finished, and the next start upgrades it: each revision is one transaction with its
``alembic_version`` update, on SQLite too.

Python's ``sqlite3`` opens no transaction before DDL (CPython ``Lib/test/test_sqlite3/
test_transactions.py``, ``test_ddl_does_not_autostart_transaction``), so without SQLAlchemy's
pysqlite recipe (driver autocommit plus an explicit ``BEGIN``: SQLAlchemy docs, dialects/sqlite,
"Serializable isolation / Savepoints / Transactional DDL") each ``ALTER``/``CREATE`` of a revision
committed alone and the next start failed for good with ``duplicate column name: needs_ranking``
or ``table incident_feedback already exists``. The failure is simulated by making the second DDL
operation of a revision raise the error SQLite gives on a full disk (``SQLITE_FULL``).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path

import alembic.op
import pytest
from serving_helpers import PgCluster
from sqlalchemy import inspect, text
from sqlalchemy.engine import Engine
from sqlalchemy.exc import OperationalError

from fleetmind.serving import migrations
from fleetmind.serving.db import Database

ROW = {
    "fingerprint": "f1",
    "starts_at": "2026-12-01T00:00:00Z",
    "starts_ts": 1000.0,
    "status": "firing",
    "alertname": "GpuXid",
    "labels": '{"alertname": "GpuXid"}',
    "annotations": "{}",
    "received_ts": 1000.0,
    "updated_ts": 1000.0,
}


@pytest.fixture(params=["sqlite", "postgresql"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path}/m.db"
        return
    cluster: PgCluster = request.getfixturevalue("pg")
    cluster.psql("DROP SCHEMA public CASCADE; CREATE SCHEMA public")
    yield cluster.url


def _upgrade_to(engine: Engine, revision: str) -> None:
    """Bring an empty database to ``revision`` (an older release's schema), with one alert."""
    from alembic import command

    with migrations._migration_lock(engine) as conn:
        command.upgrade(migrations._config(conn), revision)
        conn.commit()
    with engine.begin() as conn:
        conn.execute(
            text(
                "INSERT INTO alerts (fingerprint, starts_at, starts_ts, status, alertname, labels, "
                "annotations, received_ts, updated_ts, pending) VALUES (:fingerprint, :starts_at, "
                ":starts_ts, :status, :alertname, :labels, :annotations, :received_ts, "
                ":updated_ts, true)"
            ),
            ROW,
        )


def _disk_full_on_call(monkeypatch: pytest.MonkeyPatch, operation: str, nth: int) -> None:
    """Make the ``nth`` call of ``alembic.op.<operation>`` fail as SQLite does on a full disk."""
    real = getattr(alembic.op, operation)
    calls = []

    def flaky(*args: object, **kwargs: object) -> object:
        calls.append(args)
        if len(calls) == nth:
            raise OperationalError(
                operation, {}, sqlite3.OperationalError("database or disk is full")
            )
        return real(*args, **kwargs)

    monkeypatch.setattr(alembic.op, operation, flaky)


def _columns(engine: Engine, table: str) -> set[str]:
    return {c["name"] for c in inspect(engine).get_columns(table)}


def test_a_revision_failing_after_its_first_ddl_is_rolled_back_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """0002 adds ``incidents.needs_ranking`` then an index: the index failing takes the column
    back with it (it stayed, and every later start failed with "duplicate column name")."""
    db = Database(f"sqlite:///{tmp_path}/m.db")
    _upgrade_to(db.engine, "0001")
    _disk_full_on_call(monkeypatch, "create_index", 1)
    with pytest.raises(migrations.UpgradeFailed) as failed:
        db.migrate()
    assert str(failed.value) == (
        f"schema upgrade from 0001 to {migrations.head()} failed at revision 0002: "
        "database or disk is full"
    )
    with db.engine.connect() as conn:
        assert migrations.current(conn) == "0001"
    assert "needs_ranking" not in _columns(db.engine, "incidents")
    monkeypatch.undo()  # space freed: the next start upgrades
    assert db.migrate() == "0001"
    with db.engine.connect() as conn:
        assert migrations.current(conn) == migrations.head()
    assert "needs_ranking" in _columns(db.engine, "incidents")
    assert db.count_alerts() == 1
    db.dispose()


def test_an_interrupted_upgrade_keeps_the_revisions_before_and_resumes(
    url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """0003 creates three tables: the second failing leaves 0002 (not the first table, which
    failed every later start with "table incident_feedback already exists"); PostgreSQL too."""
    db = Database(url)
    _upgrade_to(db.engine, "0001")
    _disk_full_on_call(monkeypatch, "create_table", 2)
    with pytest.raises(migrations.UpgradeFailed, match="failed at revision 0003: database or disk"):
        db.migrate()
    with db.engine.connect() as conn:
        assert migrations.current(conn) == "0002"  # 0002 finished before 0003 began
    assert not inspect(db.engine).has_table("incident_feedback")
    monkeypatch.undo()
    assert db.migrate() == "0002"
    with db.engine.connect() as conn:
        assert migrations.current(conn) == migrations.head()
    assert inspect(db.engine).has_table("incident_feedback")
    assert db.count_alerts() == 1
    db.dispose()


def test_the_service_engine_keeps_its_own_transactions(tmp_path: Path) -> None:
    """The migration connection's autocommit driver and ``BEGIN`` event stay on it: the service's
    pooled connections come back in pysqlite's default mode, with no listener added."""
    db = Database(f"sqlite:///{tmp_path}/m.db")
    db.migrate()
    with db.engine.connect() as conn:
        assert conn.connection.driver_connection.isolation_level == ""
    assert not db.engine.dispatch.begin
    db.dispose()


def _leave_invalid_index(engine: Engine, name: str) -> None:
    """What an interrupted ``CREATE INDEX CONCURRENTLY`` leaves: the index recorded, marked
    invalid (PostgreSQL docs, ``CREATE INDEX``, "Building Indexes Concurrently": a build that
    fails while scanning the table leaves an invalid index). Here the scan divides by zero."""
    from sqlalchemy.exc import DBAPIError

    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as auto:
        with pytest.raises(DBAPIError, match="division by zero"):
            auto.execute(text(f"CREATE INDEX CONCURRENTLY {name} ON alerts ((id / (id - id)))"))
        assert migrations.index_is_invalid(auto, name)


def _index_columns(engine: Engine, name: str) -> list[str | None]:
    with engine.connect() as conn:
        assert not migrations.index_is_invalid(conn, name)
    return {i["name"]: i["column_names"] for i in inspect(engine).get_indexes("alerts")}[name]


def test_an_interrupted_concurrent_index_build_of_0002_resumes_on_postgresql(
    pg: PgCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On PostgreSQL 0002's column changes commit before its ``CREATE INDEX CONCURRENTLY`` (which
    cannot run in a transaction): the build interrupted, every later start failed with "column
    needs_ranking of relation incidents already exists", and the invalid index it left would have
    been skipped by ``IF NOT EXISTS``. They are skipped, and the index is built again."""
    pg.psql("DROP SCHEMA public CASCADE; CREATE SCHEMA public")
    db = Database(pg.url)
    _upgrade_to(db.engine, "0001")
    _disk_full_on_call(monkeypatch, "create_index", 1)
    with pytest.raises(migrations.UpgradeFailed, match="failed at revision 0002"):
        db.migrate()
    with db.engine.connect() as conn:
        assert migrations.current(conn) == "0001"
    assert "needs_ranking" in _columns(db.engine, "incidents")  # committed before the build
    _leave_invalid_index(db.engine, "ix_alerts_pending_updated")
    monkeypatch.undo()
    assert db.migrate() == "0001"
    with db.engine.connect() as conn:
        assert migrations.current(conn) == migrations.head()
    assert _index_columns(db.engine, "ix_alerts_pending_updated") == ["pending", "updated_ts"]
    assert db.count_alerts() == 1
    db.dispose()


def test_an_interrupted_baseline_index_build_is_built_again_on_postgresql(pg: PgCluster) -> None:
    """A database from before migrations gets ``ix_alerts_incident`` built concurrently before it
    is stamped; an interrupted build left an invalid index that the next start took as built."""
    pg.psql("DROP SCHEMA public CASCADE; CREATE SCHEMA public")
    db = Database(pg.url)
    _upgrade_to(db.engine, "0001")
    with db.engine.begin() as conn:
        conn.execute(text("DROP TABLE alembic_version"))  # as create_all made it before Alembic
        conn.execute(text("DROP INDEX ix_alerts_incident"))  # from before the covering index
    _leave_invalid_index(db.engine, "ix_alerts_incident")
    assert db.migrate() == "create_all"
    assert _index_columns(db.engine, "ix_alerts_incident") == ["incident_id", "id", "status"]
    db.dispose()
