"""A start on a database already at the newest revision only reads it: the migration connection
(SQLite's write lock, taken by ``BEGIN IMMEDIATE``) is opened only when revisions will run.

Every start began with ``BEGIN IMMEDIATE`` just to read ``alembic_version``, so under steady writes
from the other workers a restarting one queued for the write lock for up to the 30 s busy timeout
and could fail with ``database is locked`` (``fleetmind serve`` migrates twice: the pre-start check
and the app's start-up). SQLite's locking (https://www.sqlite.org/lang_transaction.html: an
``IMMEDIATE`` transaction takes the write lock at once, a deferred one reading takes none and, in
WAL mode, https://www.sqlite.org/wal.html, readers do not block writers nor writers readers).
Another connection holds an open ``BEGIN IMMEDIATE`` transaction, and the busy timeout is cut to
0.3 s so that a start that waits for the lock fails fast instead of after 30 s. That no start even
asks for the lock is read from the statements SQLite ran (``sqlite3.Connection.set_trace_callback``),
not from a clock.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import event

from fleetmind.data.errors import ConfigError
from fleetmind.serving import db as db_module
from fleetmind.serving import migrations
from fleetmind.serving.db import Database


@pytest.fixture
def writer_holding_the_lock(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[Path, sqlite3.Connection]]:
    """A current database and another connection inside a write transaction (uncommitted)."""
    path = tmp_path / "m.db"
    setup = Database(f"sqlite:///{path}")
    setup.migrate()
    setup.dispose()
    monkeypatch.setattr(db_module, "SQLITE_BUSY_TIMEOUT_MS", 300)
    other = sqlite3.connect(path, isolation_level=None, timeout=0.3)
    other.execute("BEGIN IMMEDIATE")
    other.execute("UPDATE model_reloads SET requested_ts = 1 WHERE id = 1")
    try:
        yield path, other
    finally:
        other.execute("ROLLBACK")
        other.close()


def test_a_current_database_starts_while_another_process_holds_the_write_lock(
    writer_holding_the_lock: tuple[Path, sqlite3.Connection],
) -> None:
    """Before: ``cannot open the database ...: database is locked`` once the busy timeout ran out."""
    path, _ = writer_holding_the_lock
    db = Database(f"sqlite:///{path}")
    statements: list[str] = []

    def trace(dbapi_conn: sqlite3.Connection, _record: object) -> None:
        dbapi_conn.set_trace_callback(statements.append)

    event.listen(db.engine, "connect", trace, insert=True)
    assert db.migrate() == migrations.head()
    assert db.migrate() == migrations.head()  # the second migration of ``fleetmind serve``
    assert statements  # the trace saw the starts read the database
    # no wait for the lock either: neither start asked for it
    assert not [s for s in statements if "IMMEDIATE" in s.upper() or "EXCLUSIVE" in s.upper()]
    db.dispose()


def test_a_database_behind_still_upgrades_under_the_write_lock(
    tmp_path: Path, writer_holding_the_lock: tuple[Path, sqlite3.Connection]
) -> None:
    """Revisions to run: the upgrade takes the write lock first and waits for the writer (here,
    with the cut busy timeout, fails with its reason and changes nothing), then runs them."""
    path, other = writer_holding_the_lock
    other.execute("UPDATE alembic_version SET version_num = '0007'")
    other.execute("COMMIT")
    other.execute("BEGIN IMMEDIATE")
    db = Database(f"sqlite:///{path}")
    with pytest.raises(ConfigError, match="database is locked"):
        db.migrate()
    other.execute("ROLLBACK")
    with db.engine.connect() as conn:
        assert migrations.current(conn) == "0007"
    assert db.migrate() == "0007"  # the writer gone: upgraded (0008 finds its column)
    with db.engine.connect() as conn:
        assert migrations.current(conn) == migrations.head()
    other.execute("BEGIN IMMEDIATE")  # the fixture rolls it back
    db.dispose()
