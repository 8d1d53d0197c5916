"""``Database.ping`` (``/readyz``) on SQLite checks that the database can be written, as
docs/serving/api.md says readiness means: a read-only SQLite file made every write answer 503
while ``/readyz`` said ready (the ping ran ``SELECT 1`` only).

SQLite answers a write on a read-only connection with ``SQLITE_READONLY`` (8, "attempt to write a
readonly database"), and a lock held by another writer with ``SQLITE_BUSY`` (5) once its busy
timeout is spent (https://www.sqlite.org/rescode.html); ``BEGIN IMMEDIATE`` alone succeeds on a
read-only connection (SQLite 3.40), so the ping also rewrites ``PRAGMA user_version`` inside the
rolled-back transaction. A connection opened with ``mode=ro`` (https://www.sqlite.org/uri.html) is
what SQLite gives a process that cannot write the file (a 0444 file, a read-only mount).
That the probe does not wait for another writer's lock is read from the ``busy_timeout`` in force
when it asks for the lock (the statements traced by ``sqlite3.Connection.set_trace_callback``),
not from a clock.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from sqlalchemy import event

from fleetmind.serving import db as db_module
from fleetmind.serving.db import SQLITE_BUSY_TIMEOUT_MS, Database, DatabaseReadOnly


@pytest.fixture
def db_file(tmp_path: Path) -> Path:
    path = tmp_path / "m.db"
    db = Database(f"sqlite:///{path}")
    db.migrate()
    db.dispose()
    return path


def test_a_read_only_sqlite_database_is_not_ready(db_file: Path) -> None:
    ro = Database(f"sqlite:///file:{db_file}?mode=ro&uri=true")
    with pytest.raises(DatabaseReadOnly, match="read-only: attempt to write a readonly database"):
        ro.ping()
    ro.dispose()


def test_a_writable_sqlite_database_is_ready_and_unchanged(db_file: Path) -> None:
    db = Database(f"sqlite:///{db_file}")
    with db.engine.connect() as conn:
        version = conn.exec_driver_sql("PRAGMA user_version").scalar_one()
    db.ping()
    with db.engine.connect() as conn:  # the pooled connection the ping used
        assert conn.exec_driver_sql("PRAGMA user_version").scalar_one() == version
        assert conn.exec_driver_sql("PRAGMA busy_timeout").scalar_one() == SQLITE_BUSY_TIMEOUT_MS
    db.dispose()


def _timeouts_at_lock_requests(statements: list[str]) -> list[int | None]:
    """The ``busy_timeout`` (ms) this connection last set before each ``BEGIN IMMEDIATE``."""
    timeout: int | None = None
    seen: list[int | None] = []
    for stmt in statements:
        text = stmt.strip().upper()
        if text.startswith("PRAGMA BUSY_TIMEOUT="):
            timeout = int(text.split("=", 1)[1])
        elif text.startswith("BEGIN IMMEDIATE"):
            seen.append(timeout)
    return seen


def test_a_lock_held_by_another_writer_is_ready_at_once(
    db_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Under write load the probe neither fails nor waits the busy timeout (30 s; cut here to
    0.2 s, so that a probe that does wait costs little before this test fails)."""
    monkeypatch.setattr(db_module, "SQLITE_BUSY_TIMEOUT_MS", 200)
    db = Database(f"sqlite:///{db_file}")
    statements: list[str] = []

    def trace(dbapi_conn: sqlite3.Connection, _record: object) -> None:
        dbapi_conn.set_trace_callback(statements.append)

    event.listen(db.engine, "connect", trace, insert=True)
    other = sqlite3.connect(db_file, isolation_level=None)
    other.execute("BEGIN IMMEDIATE")
    try:
        db.ping()  # no error: a lock held by another writer counts as writable
    finally:
        other.execute("ROLLBACK")
        other.close()
    # the probe asked for the lock without waiting, then put the connection's timeout back
    assert _timeouts_at_lock_requests(statements) == [0]
    with db.engine.connect() as conn:
        assert conn.exec_driver_sql("PRAGMA busy_timeout").scalar_one() == 200
    db.dispose()
