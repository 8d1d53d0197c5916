"""``fleetmind serve --workers N`` gives uvicorn's supervisor a worker start-up timeout that fits a
FleetMind worker, and the PostgreSQL incident leader's statements wait only briefly for a lock.

uvicorn's supervisor (``uvicorn/supervisors/multiprocess.py``, uvicorn 0.55) pings each worker and
kills one that does not answer within ``timeout_worker_healthcheck`` (default 5 s); on SIGHUP a
replacement must also finish starting within it, else the restart is aborted. A FleetMind worker
imports torch and loads both models first, so the default killed workers at start-up on a busy host
and made every SIGHUP restart fail.

On PostgreSQL, a table the incident worker reads locked for longer than the leader lease
(``VACUUM FULL incidents``, a migration's ``ALTER TABLE``) made the leader's statements wait the
whole statement timeout, past the lease, so leadership passed from replica to replica. Every
transaction of the worker's thread now waits at most ``lock_timeout`` for a lock (SQLSTATE 55P03,
``lock_not_available``: PostgreSQL, Appendix A "PostgreSQL Error Codes"), fails the loop, and the
next loop checks the lease, which it still holds. That wait is a quarter of the lease (at most
5 s) and the lease is checked before each step that may wait that long (the lag gauge's read of
``alerts`` after a failed loop), so that the lock's session, which the server ends
``idle_session_timeout`` = lease after its last check, never idles past the lease.
"""

from __future__ import annotations

import argparse
import inspect
import os
import threading
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pytest
from serving_helpers import PgCluster, fresh_database, pg_bindir, untimed_connection, wait_for
from sqlalchemy import text
from sqlalchemy.exc import OperationalError

from fleetmind.cli import serve as cli_serve
from fleetmind.data.errors import ConfigError
from fleetmind.serving.db import (
    LOCK_NOT_AVAILABLE,
    PG_LOCK_WAIT_S,
    Database,
    pg_thread_lock_wait,
)
from fleetmind.serving.incidents.manager import IncidentManager
from fleetmind.serving.incidents.store import IncidentStore
from fleetmind.serving.incidents.worker import lock_wait_s

PG_PORT = 19061
LEASE_S = 30.0
"""The leader lease of the worker test: far longer than the lock wait (5 s) on a loaded host."""
SHORT_LEASE_S = 4.0
"""A lease shorter than :data:`fleetmind.serving.db.PG_LOCK_WAIT_S`: a worker waiting 5 s for a
lock lost it at its first failed loop; it now waits a quarter of it (1 s)."""
STATEMENT_TIMEOUT_S = 40.0
"""Longer than the lock wait and the lease: a statement that waits it out (the old behaviour)
fails with a statement timeout (57014), told apart from the lock wait's 55P03."""

os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")


@pytest.fixture(autouse=True)
def _tmp_database(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The CLI opens the database before uvicorn starts: keep it out of the working directory."""
    monkeypatch.setenv("FLEETMIND_DATABASE_URL", f"sqlite:///{tmp_path / 'serve.db'}")
    monkeypatch.delenv("FLEETMIND_WORKER_STARTUP_TIMEOUT_S", raising=False)
    monkeypatch.delenv("FLEETMIND_WORKERS", raising=False)
    for var in ("API", "READ", "INGEST", "SCHEDULE", "ADMIN"):
        monkeypatch.delenv(f"FLEETMIND_{var}_TOKEN", raising=False)


@pytest.fixture(autouse=True)
def _keep_sighup() -> Any:
    """``run`` installs a SIGHUP handler for a single-process server: give the test process its
    own back."""
    import signal

    if not hasattr(signal, "SIGHUP"):
        yield
        return
    before = signal.getsignal(signal.SIGHUP)
    yield
    signal.signal(signal.SIGHUP, before)


def _args(**kw: Any) -> argparse.Namespace:
    """``fleetmind serve`` as the CLI parses it, with ``kw`` set on the namespace."""
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers()
    cli_serve.register(sub, "serve", "serve")
    ns = parser.parse_args(["serve"])
    for k, v in kw.items():
        setattr(ns, k, v)
    return ns


def _uvicorn_has_the_option() -> bool:
    import uvicorn

    return "timeout_worker_healthcheck" in inspect.signature(uvicorn.Config).parameters


def test_workers_get_the_start_up_timeout_not_uvicorns_5_s(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import uvicorn

    if not _uvicorn_has_the_option():
        pytest.skip("this uvicorn has no timeout_worker_healthcheck")
    seen: list[dict[str, Any]] = []
    monkeypatch.setattr(uvicorn, "run", lambda *a, **kw: seen.append(kw))
    assert cli_serve.run(_args(workers=2)) == 0
    assert seen[-1]["workers"] == 2
    assert seen[-1]["timeout_worker_healthcheck"] == 120  # the default
    monkeypatch.setenv("FLEETMIND_WORKER_STARTUP_TIMEOUT_S", "30.5")
    assert cli_serve.run(_args(workers=2)) == 0
    assert seen[-1]["timeout_worker_healthcheck"] == 31  # uvicorn takes whole seconds: rounded up


def test_an_old_uvicorn_without_the_option_gets_nothing_new() -> None:
    class OldConfig:
        def __init__(self, app: object, workers: int | None = None) -> None: ...

    class OldUvicorn:
        Config = OldConfig

    assert cli_serve._supervisor_options(OldUvicorn, 120.0) == {}


@pytest.mark.parametrize("bad", ["4", "3601", "nan", "soon"])
def test_the_start_up_timeout_is_bounded(monkeypatch: pytest.MonkeyPatch, bad: str) -> None:
    import uvicorn

    monkeypatch.setattr(uvicorn, "run", lambda *a, **kw: pytest.fail("uvicorn started"))
    monkeypatch.setenv("FLEETMIND_WORKER_STARTUP_TIMEOUT_S", bad)
    with pytest.raises(ConfigError, match="FLEETMIND_WORKER_STARTUP_TIMEOUT_S"):
        cli_serve.run(_args(workers=2))


# ---------------------------------------------------------------- PostgreSQL: the leader's lock wait
@pytest.fixture(scope="module")
def pg() -> Iterator[PgCluster]:
    bindir = pg_bindir()
    if bindir is None:
        pytest.skip("PostgreSQL binaries not installed (Debian package postgresql)")
    cluster = PgCluster(bindir, port=PG_PORT).start()
    try:
        yield cluster
    finally:
        cluster.close()


@pytest.fixture()
def db(pg: PgCluster) -> Iterator[Database]:
    with fresh_database(pg, STATEMENT_TIMEOUT_S) as d:
        yield d


@pytest.fixture()
def locker(pg: PgCluster) -> Iterator[Any]:
    """A plain psycopg connection with no timeouts: ``VACUUM FULL incidents``, as long as needed."""
    with untimed_connection(pg) as conn:
        yield conn


def _lock_timeout(db: Database) -> str:
    with db.engine.connect() as conn:
        return str(conn.execute(text("SHOW lock_timeout")).scalar())


def test_the_lock_wait_applies_to_the_calling_threads_transactions_only(db: Database) -> None:
    other: list[str] = []
    with pg_thread_lock_wait(db, 0.5):
        assert _lock_timeout(db) == "500ms"
        with db.write() as conn:  # the write transactions too
            assert conn.execute(text("SHOW lock_timeout")).scalar() == "500ms"
        thread = threading.Thread(target=lambda: other.append(_lock_timeout(db)))
        thread.start()
        thread.join()
    assert other == ["0"]  # a request thread keeps the server's (none)
    assert _lock_timeout(db) == "0"  # transaction-scoped: the pooled session keeps nothing


def test_the_lock_wait_is_nothing_on_sqlite(tmp_path) -> None:
    d = Database(f"sqlite:///{tmp_path / 'w.db'}")
    d.migrate()
    try:
        with pg_thread_lock_wait(d, 0.5):
            assert IncidentStore(d).open_incidents() == []
    finally:
        d.dispose()


def test_loading_the_open_incidents_gives_up_on_a_locked_table(db: Database, locker: Any) -> None:
    locker.execute("LOCK TABLE incidents IN ACCESS EXCLUSIVE MODE")  # and keeps it
    with pg_thread_lock_wait(db, 0.5), pytest.raises(OperationalError) as caught:
        IncidentStore(db).open_incidents()
    assert getattr(caught.value.orig, "sqlstate", None) == LOCK_NOT_AVAILABLE


def test_the_leader_keeps_its_lease_while_the_incidents_table_is_locked(
    db: Database, locker: Any
) -> None:
    """The worker takes the lease, fails to take over (the table is locked) within the lock wait
    rather than the statement timeout, keeps the lease, and takes over once the lock is gone."""
    with db.write() as conn:
        IncidentStore(db).insert_incident(conn, 1_000.0, 1_000.0)  # one open incident
    locker.execute("LOCK TABLE incidents IN ACCESS EXCLUSIVE MODE")  # and keeps it
    graphs = SimpleNamespace(view=None, graph=None)  # nothing is pending: never read
    manager = IncidentManager(db, graphs, None, leader_lease_s=LEASE_S)  # type: ignore[arg-type]
    manager.worker.start()  # not manager.start(): its own load_open would wait in this thread
    try:
        assert wait_for(lambda: manager.last_error is not None, timeout=120)
        assert "lock timeout" in (manager.last_error or ""), manager.last_error
        assert manager.leader.held and manager.leader.lost == 0
        assert manager.open_count == 0  # not taken over yet
        locker.rollback()  # the lock is gone
        assert wait_for(lambda: manager.last_error is None and manager.open_count == 1, 60)
        assert manager.leader.held and manager.leader.lost == 0  # the same lease throughout
    finally:
        manager.stop()


def test_rankings_a_failed_ranking_left_undone_stay_due(tmp_path) -> None:
    """A ranking that fails on the database (a lock wait) fails the loop; it and the rankings
    after it were taken off the schedule and lost until the next take-over."""
    import time

    d = Database(f"sqlite:///{tmp_path / 'r.db'}")
    d.migrate()
    try:
        manager = IncidentManager(d, SimpleNamespace(view=None, graph=None), None)  # type: ignore[arg-type]
        ranked: list[int] = []

        def rank(inc_id: int) -> None:
            if inc_id == 2:
                raise OperationalError("SELECT", {}, Exception("lock timeout"))
            ranked.append(inc_id)

        manager._rank = rank  # type: ignore[method-assign]
        manager.schedule.queue([1, 2, 3], time.monotonic())
        with pytest.raises(OperationalError):
            manager.rank_due()
        assert ranked == [1]
        assert manager.schedule.take_due(time.monotonic()) == [3]  # the rest: at the next loop
        assert manager.schedule.take_due(float("inf")) == [2]  # the failed one: after a back-off
    finally:
        d.dispose()


def test_the_grouping_transaction_keeps_the_threads_shorter_lock_wait(db: Database) -> None:
    """``store.grouping`` sets its own lock wait (5 s); inside the worker's shorter bound that
    one wins (before: the 5 s, past a short lease)."""
    with pg_thread_lock_wait(db, 0.5), IncidentStore(db).grouping() as conn:
        assert conn.execute(text("SHOW lock_timeout")).scalar() == "500ms"


def test_the_worker_waits_a_quarter_of_its_lease_at_most_5_s() -> None:
    assert lock_wait_s(SHORT_LEASE_S) == 1.0
    assert lock_wait_s(2.0) == 0.5  # the shortest lease the settings allow
    assert lock_wait_s(10.0) == 2.5  # the default
    assert lock_wait_s(3600.0) == PG_LOCK_WAIT_S


@pytest.mark.parametrize("table", ["alerts", "incidents"])
def test_a_short_lease_is_kept_while_a_table_is_locked_past_it(
    db: Database, locker: Any, table: str
) -> None:
    """``alerts`` locked: every loop fails grouping's read of the pending alerts, then the lag
    gauge reads ``alerts`` again (before: two 5 s lock waits with no check of the lease between,
    and the lock's session ended). ``incidents`` locked: every take-over fails (before: one 5 s
    wait, past a 4 s lease). The lease is never lost however many loops fail."""
    graphs = SimpleNamespace(view=None, graph=None)  # nothing is pending: never read
    manager = IncidentManager(db, graphs, None, leader_lease_s=SHORT_LEASE_S)  # type: ignore[arg-type]
    failed: list[str] = []
    real_pending, real_take_over = manager.process_pending, manager.take_over

    def process_pending(limit: int = 500, defer: bool = False) -> int:
        try:
            return real_pending(limit, defer)
        except Exception as err:
            failed.append(str(err))
            raise

    def take_over() -> None:
        try:
            real_take_over()
        except Exception as err:
            failed.append(str(err))
            raise

    manager.process_pending = process_pending  # type: ignore[method-assign]
    manager.take_over = take_over  # type: ignore[method-assign]
    if table == "alerts":  # the worker leads and has taken over before the table is locked
        manager.worker.start()
        assert wait_for(lambda: manager.leader.held and manager.last_error is None, 60)
    locker.execute(f"LOCK TABLE {table} IN ACCESS EXCLUSIVE MODE")  # and keeps it
    if table == "incidents":
        manager.worker.start()
    try:
        # three failed loops: three times the lease at least, with a wait of one lock each
        assert wait_for(lambda: len(failed) >= 3, timeout=120), failed
        assert all("lock timeout" in f for f in failed), failed
        assert manager.leader.lost == 0  # before: lost at the first failed loop
        assert manager.leader.held
        locker.rollback()  # the lock is gone
        assert wait_for(lambda: manager.last_error is None, 60), manager.last_error
        assert manager.leader.held and manager.leader.lost == 0  # the same lease throughout
    finally:
        manager.stop()
