"""A SQLite database that loses its write-ahead log, or stops taking writes, under a running
service: webhooks and ``/readyz`` answer 503 (docs/serving/operations.md, "Durability" and
"Database errors: 503 or 422").

* In WAL mode with ``synchronous=FULL`` a commit is durable once it is in ``<file>-wal``; deleting
  that file loses every commit not yet checkpointed ("Deleting a hot journal",
  https://www.sqlite.org/howtocorrupt.html), while the open connections go on writing into the
  unnamed file. The check compared the main file's inode only: webhooks and ``/readyz`` stayed
  200 and the alerts acknowledged before and after the deletion were gone after a restart.
  SQLite deletes the -wal itself only when the last connection closes
  (https://www.sqlite.org/wal.html), and a checkpoint truncates it in place: neither is an alarm.
* A file that turns read-only after start (a mount remounted read-only after an I/O error) fails
  every commit with ``SQLITE_IOERR`` (``chattr +i``: "disk I/O error", extended code 778
  ``SQLITE_IOERR_WRITE``, https://www.sqlite.org/rescode.html) while the readiness probe, which
  rolls its write back, still passed: ``/readyz`` said ready for good.
"""

from __future__ import annotations

import os
import shutil
import sqlite3
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy.exc as sa_exc
from fastapi.testclient import TestClient
from serving_helpers import alert, webhook

from fleetmind.serving import db as db_module
from fleetmind.serving.db import Database, DatabaseReadOnly

os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")

_SQLITE_IOERR_WRITE = 778  # 10 | 3 << 8


@pytest.fixture
def db(tmp_path: Path) -> Iterator[Database]:
    d = Database(f"sqlite:///{tmp_path / 'fm.db'}")
    d.migrate()
    yield d
    d.dispose()


def _write(d: Database) -> None:
    d.request_model_reload(time.time())


def _wal(d: Database) -> Path:
    return Path(str(d._file) + "-wal")


def _ioerr() -> sqlite3.OperationalError:
    """The error SQLite raises for a write the file refuses (``sqlite_errorcode``: Python 3.11)."""
    err = sqlite3.OperationalError("disk I/O error")
    err.sqlite_errorcode = _SQLITE_IOERR_WRITE  # type: ignore[attr-defined]
    err.sqlite_errorname = "SQLITE_IOERR_WRITE"  # type: ignore[attr-defined]
    return err


# ---------------------------------------------------------------- the -wal deleted or replaced


def test_a_deleted_wal_fails_the_next_write_and_readiness(db: Database) -> None:
    _write(db)
    assert _wal(db).exists()
    db.ping()
    _wal(db).unlink()
    with pytest.raises(sa_exc.OperationalError, match="write-ahead log .* was deleted"):
        _write(db)  # before: committed into the unnamed -wal and acknowledged
    with pytest.raises(sa_exc.OperationalError, match="stop the service gracefully"):
        db.ping()  # before: ready


def test_a_replaced_wal_fails_the_next_write(db: Database) -> None:
    _write(db)
    copy = _wal(db).with_name("copy-wal")
    shutil.copyfile(_wal(db), copy)
    os.replace(copy, _wal(db))
    with pytest.raises(sa_exc.OperationalError, match="write-ahead log .* was replaced"):
        _write(db)


def test_the_loss_stays_reported_once_a_new_wal_appears(db: Database) -> None:
    _write(db)
    _wal(db).unlink()
    with pytest.raises(sa_exc.OperationalError):
        db.ping()
    _wal(db).write_bytes(b"")  # a new -wal, as a new connection would make one
    with pytest.raises(sa_exc.OperationalError, match="was deleted"):
        _write(db)


def test_no_alarm_before_the_first_write_nor_after_checkpoints(db: Database) -> None:
    db.ping()  # a fresh database: nothing recorded yet
    db.dispose()  # the last connection closed: SQLite deleted the -wal
    assert not _wal(db).exists()
    db.ping()  # the -wal legitimately absent
    _write(db)
    with db.read() as conn:  # truncates the -wal in place, keeping its inode
        conn.exec_driver_sql("PRAGMA wal_checkpoint(TRUNCATE)")
    assert _wal(db).stat().st_size == 0
    _write(db)
    db.ping()


def test_no_alarm_when_sqlite_deletes_the_wal_at_the_last_close(db: Database) -> None:
    _write(db)
    db.dispose()  # every connection closed: SQLite checkpoints and deletes the -wal
    assert not _wal(db).exists()
    _write(db)  # a new connection makes a new -wal (its inode may differ from the old one's)
    assert _wal(db).exists()
    db.ping()
    _write(db)


def test_a_graceful_stop_keeps_what_the_deleted_wal_held(db: Database) -> None:
    """Why the error says to stop the service gracefully: the last connection to close
    checkpoints the log it still has open (the unnamed file) into the database file
    (sqlite.org/wal.html); a killed process loses it. Upstream behaviour, not the fix."""
    _write(db)
    _write(db)
    _wal(db).unlink()
    with pytest.raises(sa_exc.OperationalError):
        _write(db)
    db.dispose()
    fresh = sqlite3.connect(db._file)
    try:
        assert fresh.execute("SELECT generation FROM model_reloads").fetchone() == (2,)
    finally:
        fresh.close()


def test_another_process_opening_and_closing_raises_no_alarm(db: Database) -> None:
    _write(db)
    other = sqlite3.connect(db._file)
    other.execute("SELECT count(*) FROM alerts").fetchone()
    other.close()  # not the last connection: the -wal stays
    _write(db)
    db.ping()


# ------------------------------------------------------------ writes the file no longer takes


def test_a_failed_commit_makes_readiness_fail_until_a_write_commits(
    db: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    _write(db)
    dialect = db.engine.dialect
    real_commit = dialect.do_commit
    failing = {"on": True}

    def commit(dbapi_conn: Any) -> None:
        if failing["on"]:
            raise _ioerr()
        real_commit(dbapi_conn)

    def probe(_conn: Any) -> None:  # the file still refuses writes
        raise _ioerr()

    monkeypatch.setattr(dialect, "do_commit", commit)
    monkeypatch.setattr(db_module, "_sqlite_write_probe", probe, raising=False)
    with pytest.raises(sa_exc.OperationalError, match="disk I/O error"):
        _write(db)
    with pytest.raises(DatabaseReadOnly, match="accepts no writes: disk I/O error"):
        db.ping()  # before: ready
    with pytest.raises(DatabaseReadOnly):
        db.ping()  # stays so while the file refuses writes
    failing["on"] = False
    with db.write() as conn:  # commits, but changes no row: nothing reached the file
        conn.exec_driver_sql("UPDATE model_reloads SET generation = generation WHERE id = -1")
    with pytest.raises(DatabaseReadOnly):
        db.ping()
    _write(db)  # a webhook commits: ready again
    db.ping()


def test_readiness_returns_when_its_own_probe_commits(
    db: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Not ready takes the webhooks away: the probe's commit is what brings readiness back."""
    _write(db)
    real_commit = db.engine.dialect.do_commit

    def commit(_dbapi_conn: Any) -> None:
        raise _ioerr()

    monkeypatch.setattr(db.engine.dialect, "do_commit", commit)
    with pytest.raises(sa_exc.OperationalError):
        _write(db)
    monkeypatch.setattr(db.engine.dialect, "do_commit", real_commit)
    db.ping()  # the file takes writes again: the probe's commit clears it
    db.ping()


def test_a_bad_value_does_not_touch_readiness(db: Database) -> None:
    from sqlalchemy import text

    _write(db)  # the row with id 1
    with pytest.raises(sa_exc.IntegrityError):
        with db.write() as conn:
            conn.execute(text("INSERT INTO model_reloads (id, generation) VALUES (1, 1)"))
    db.ping()


def _chattr_works(path: Path) -> bool:
    if os.geteuid() != 0 or shutil.which("chattr") is None:
        return False
    probe = path / "chattr-probe"
    probe.write_bytes(b"x")
    ok = subprocess.run(["chattr", "+i", str(probe)], capture_output=True).returncode == 0
    if ok:
        subprocess.run(["chattr", "-i", str(probe)], check=True)
    probe.unlink()
    return ok


def test_a_file_turned_immutable_is_not_ready_until_it_takes_writes(
    tmp_path: Path, db: Database
) -> None:
    """The hunt's case on a real file: ``chattr +i`` stands in for a mount remounted read-only."""
    if not _chattr_works(tmp_path):
        pytest.skip("needs root and a filesystem with chattr +i")
    _write(db)
    files = [str(db._file), str(_wal(db))]
    subprocess.run(["chattr", "+i", *files], check=True)
    try:
        with pytest.raises(sa_exc.OperationalError, match="disk I/O error"):
            _write(db)
        with pytest.raises(DatabaseReadOnly, match="disk I/O error"):
            db.ping()  # before: ready
    finally:
        subprocess.run(["chattr", "-i", *files], check=True)
    db.ping()
    _write(db)


# ------------------------------------------------------------------------- through the service


def _app(url: str) -> Any:
    from fleetmind.serving.app import create_app
    from fleetmind.serving.settings import Settings

    return create_app(
        Settings(
            database_url=url,
            rca_model="baseline:upstream-coverage",
            placement_model="heuristic:builtin-bestfit",
            incident_worker=False,
        )
    )


def test_the_service_answers_503_once_the_wal_is_deleted(tmp_path: Path) -> None:
    with TestClient(_app(f"sqlite:///{tmp_path / 'fm.db'}")) as c:
        db = c.app.state.services.db
        hook = webhook([alert({"alertname": "GpuXidError", "node": "gpu-a"}, fingerprint="w1")])
        assert c.post("/api/v1/alerts", json=hook).status_code == 200
        assert c.get("/readyz").status_code == 200
        _wal(db).unlink()
        hook = webhook([alert({"alertname": "GpuXidError", "node": "gpu-b"}, fingerprint="w2")])
        r = c.post("/api/v1/alerts", json=hook)
        assert r.status_code == 503, r.text  # before: 200
        assert r.json()["detail"] == "database unavailable; nothing was stored"
        r = c.get("/readyz")
        assert r.status_code == 503, r.text  # before: 200
        assert "database: OperationalError" in r.json()["problems"]


def test_the_service_is_not_ready_after_a_failed_commit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with TestClient(_app(f"sqlite:///{tmp_path / 'fm.db'}")) as c:
        db = c.app.state.services.db

        def commit(_dbapi_conn: Any) -> None:
            raise _ioerr()

        def probe(_conn: Any) -> None:
            raise _ioerr()

        monkeypatch.setattr(db.engine.dialect, "do_commit", commit)
        monkeypatch.setattr(db_module, "_sqlite_write_probe", probe, raising=False)
        hook = webhook([alert({"alertname": "GpuXidError", "node": "gpu-a"}, fingerprint="f1")])
        assert c.post("/api/v1/alerts", json=hook).status_code == 503
        r = c.get("/readyz")
        assert r.status_code == 503, r.text  # before: 200
        assert "database: DatabaseReadOnly" in r.json()["problems"]
        monkeypatch.undo()
        assert c.get("/readyz").status_code == 200  # the probe commits again
        assert c.post("/api/v1/alerts", json=hook).status_code == 200


def test_a_write_on_an_overflow_connection_the_pool_closes_still_succeeds(db: Database) -> None:
    """QueuePool closes an overflow connection when it comes back to a full pool: a write that
    read the connection's change count after returning it raised ``sqlite3.ProgrammingError``
    (a 500) for a transaction that had committed. Five readers hold the pool's connections, the
    write gets an overflow one, and the readers return theirs while it commits."""
    import threading

    from sqlalchemy import event

    hold, ready, released = threading.Event(), threading.Barrier(6), threading.Barrier(6)

    def reader() -> None:
        with db.read() as c:
            c.exec_driver_sql("select 1").all()
            ready.wait(timeout=30)
            hold.wait(timeout=30)
        released.wait(timeout=30)

    threads = [threading.Thread(target=reader) for _ in range(5)]
    for t in threads:
        t.start()
    ready.wait(timeout=30)

    def on_commit(_conn: Any) -> None:
        if not hold.is_set():
            hold.set()
            released.wait(timeout=30)  # the readers' connections are back: the pool is full

    event.listen(db.engine, "commit", on_commit)
    now = time.time()
    row = {"key": "k1", "token_digest": "t", "csrf": "c", "created_ts": now,
           "expires_ts": now + 60, "scopes": "read"}  # fmt: skip
    try:
        db.create_ui_session(row)
    finally:
        event.remove(db.engine, "commit", on_commit)
        for t in threads:
            t.join(timeout=30)
    assert db.get_ui_session("k1") is not None


def test_an_in_memory_database_takes_writes() -> None:
    """No file, no write-ahead log: the log check has nothing to look at (an ``assert`` failed on
    every write of a library user's in-memory database)."""
    from fleetmind.serving.db import metadata

    d = Database("sqlite://")
    try:
        metadata.create_all(d.engine)
        _write(d)
    finally:
        d.dispose()
