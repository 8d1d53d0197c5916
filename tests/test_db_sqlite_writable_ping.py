"""``Database.ping`` (``/readyz``) on SQLite checks that the database can be written, as
docs/serving/api.md says readiness means: a read-only SQLite file made every write answer 503
while ``/readyz`` said ready (the ping ran ``SELECT 1`` only).

SQLite answers a write on a read-only connection with ``SQLITE_READONLY`` (8, "attempt to write a
readonly database"), and a lock held by another writer with ``SQLITE_BUSY`` (5) once its busy
timeout is spent (https://www.sqlite.org/rescode.html); ``BEGIN IMMEDIATE`` alone succeeds on a
read-only connection (SQLite 3.40), so the ping also rewrites ``PRAGMA user_version`` inside the
rolled-back transaction. A connection opened with ``mode=ro`` (https://www.sqlite.org/uri.html) is
what SQLite gives a process that cannot write the file (a 0444 file, a read-only mount).
"""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

import pytest

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


def test_a_lock_held_by_another_writer_is_ready_at_once(db_file: Path) -> None:
    """Under write load the probe neither fails nor waits the 30 s busy timeout."""
    db = Database(f"sqlite:///{db_file}")
    other = sqlite3.connect(db_file, isolation_level=None)
    other.execute("BEGIN IMMEDIATE")
    try:
        t0 = time.monotonic()
        db.ping()
        assert time.monotonic() - t0 < 1.0
    finally:
        other.execute("ROLLBACK")
        other.close()
    db.dispose()
