"""A replica hung inside one of its PostgreSQL write transactions (SIGSTOP, a paused VM, a vanished
host) neither stalls the others for the whole statement timeout nor holds its locks for ever.

The hung peer is simulated by a connection that takes the same transaction-level advisory lock
(or row lock) as the service and then stays idle inside its transaction. The other side's lock
waits end after :data:`fleetmind.serving.db.PG_LOCK_WAIT_S` (``lock_timeout``, SQLSTATE 55P03:
PostgreSQL, Appendix A "PostgreSQL Error Codes"), and the service's own pool connections carry
``idle_in_transaction_session_timeout``, with which the server ends the peer's session and frees
its locks (PostgreSQL docs, "Client Connection Defaults").
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from serving_helpers import PgCluster, fresh_database, untimed_connection
from sqlalchemy import text
from sqlalchemy.exc import DBAPIError, OperationalError

from fleetmind.serving.db import LOCK_NOT_AVAILABLE, Database, LeaderLock, is_input_error
from fleetmind.serving.incidents.store import GroupingBusy, IncidentStore
from fleetmind.serving.scheduler.placement import Option
from fleetmind.serving.scheduler.reservations import (
    _PG_LOCK_CLASS,
    DbReservations,
    _node_lock_key,
)
from fleetmind.serving.schemas import JobSpec

LONG_STATEMENT_TIMEOUT_S = 120.0
"""The side under test's statement timeout: far longer than any outcome the tests wait for, so
waiting it out (the old behaviour) is told apart from the lock wait ending."""

JOB = JobSpec(job_id="ml/train", num_gpu=1, cpu_milli=1000, memory_mib=1024)


@pytest.fixture()
def db(pg: PgCluster) -> Iterator[Database]:
    with fresh_database(pg, LONG_STATEMENT_TIMEOUT_S) as d:
        yield d


@pytest.fixture()
def raw(pg: PgCluster) -> Iterator[Any]:
    """A plain psycopg connection with no timeouts of its own: the hung peer, for ever."""
    with untimed_connection(pg) as conn:
        yield conn


def _sqlstate(err: BaseException) -> str | None:
    """The SQLSTATE of a driver error wrapped by SQLAlchemy."""
    return getattr(getattr(err, "orig", None), "sqlstate", None)


def test_grouping_does_not_wait_out_a_peer_hung_holding_the_grouping_lock(
    db: Database, raw: Any
) -> None:
    raw.execute("SELECT pg_advisory_xact_lock(%s)", (LeaderLock.GROUP_KEY,))  # and idles
    with pytest.raises(GroupingBusy, match="grouping lock"):
        with IncidentStore(db).grouping():
            pass  # pragma: no cover - the lock is never granted
    raw.rollback()
    with IncidentStore(db).grouping() as conn:  # the peer gone: the next pass runs
        assert conn.execute(text("SELECT 1")).scalar() == 1


def test_a_hold_does_not_wait_out_a_peer_hung_holding_its_nodes_lock(
    db: Database, raw: Any
) -> None:
    key = _node_lock_key("k8s", "gpu-a")
    raw.execute("SELECT pg_advisory_xact_lock(%s, %s)", (_PG_LOCK_CLASS, key))  # and idles
    res = DbReservations(db)
    with pytest.raises(OperationalError) as caught:
        res.hold("ml/train", Option("k8s", "gpu-a", (0,), 0.0), JOB, uid="uid-1")
    assert _sqlstate(caught.value) == LOCK_NOT_AVAILABLE
    assert not is_input_error(caught.value)  # a database error: 503, not 422
    # another node's hold is not blocked by the peer's node lock
    assert res.hold("ml/other", Option("k8s", "gpu-b", (0,), 0.0), JOB, uid="uid-2")
    raw.rollback()
    assert res.hold("ml/train", Option("k8s", "gpu-a", (0,), 0.0), JOB, uid="uid-1")


def test_a_hold_does_not_wait_out_a_peer_hung_holding_a_row_lock(db: Database, raw: Any) -> None:
    """The peer deleted an expired hold (the cleanup every hold runs) and hung before committing."""
    res = DbReservations(db, ttl_s=60.0)
    res.clock = lambda: 1_000.0
    assert res.hold("ml/old", Option("k8s", "gpu-b", (0,), 0.0), JOB, uid="uid-0")
    # row lock, and idles (a pod's hold is stored under <cluster>/<namespace>/<name>)
    raw.execute("DELETE FROM reservations WHERE pod_key = 'k8s/ml/old'")
    res.clock = lambda: 2_000.0  # ml/old has expired: this hold deletes it too
    with pytest.raises(OperationalError) as caught:
        res.hold("ml/train", Option("k8s", "gpu-a", (0,), 0.0), JOB, uid="uid-1")
    assert _sqlstate(caught.value) == LOCK_NOT_AVAILABLE
    raw.rollback()
    assert res.hold("ml/train", Option("k8s", "gpu-a", (0,), 0.0), JOB, uid="uid-1")


@pytest.mark.parametrize("lock", ["grouping", "hold"])
def test_the_server_ends_a_service_session_hung_inside_its_transaction(
    pg: PgCluster, db: Database, lock: str
) -> None:
    """The peer is a connection of the service's own pool (statement timeout 1 s, hence
    ``idle_in_transaction_session_timeout`` 1 s): the server ends its session once it idles in
    its transaction, its lock is freed, and the other replica's work goes through."""
    peer_db = Database(pg.url, statement_timeout_s=1.0)
    try:
        peer = peer_db.engine.connect()
        assert peer.execute(text("SHOW idle_in_transaction_session_timeout")).scalar() == "1s"
        key = _node_lock_key("k8s", "gpu-a")
        if lock == "grouping":
            peer.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": LeaderLock.GROUP_KEY})
        else:
            peer.execute(
                text("SELECT pg_advisory_xact_lock(CAST(:c AS integer), CAST(:k AS integer))"),
                {"c": _PG_LOCK_CLASS, "k": key},
            )
        # ... and hangs. The lock wait (5 s) outlasts the peer's idle timeout (1 s).
        if lock == "grouping":
            with IncidentStore(db).grouping() as conn:
                assert conn.execute(text("SELECT 1")).scalar() == 1
        else:
            res = DbReservations(db)
            assert res.hold("ml/train", Option("k8s", "gpu-a", (0,), 0.0), JOB, uid="uid-1")
            assert [r["pod_key"] for r in res.rows()] == ["ml/train"]
        with pytest.raises(DBAPIError) as ended:  # the peer wakes up: its session was ended
            peer.execute(text("SELECT 1"))
        assert _sqlstate(ended.value) == "25P03"  # idle_in_transaction_session_timeout
        assert not is_input_error(ended.value)
        peer.invalidate()
        peer.close()
    finally:
        peer_db.dispose()


def test_pool_connections_carry_both_timeouts(pg: PgCluster) -> None:
    d = Database(pg.url, statement_timeout_s=7.0)
    try:
        with d.read() as conn:
            assert conn.execute(text("SHOW statement_timeout")).scalar() == "7s"
            assert conn.execute(text("SHOW idle_in_transaction_session_timeout")).scalar() == "7s"
    finally:
        d.dispose()
