"""A database that accepts no writes (a PostgreSQL standby after a failover, or
``default_transaction_read_only = on``) is an outage, not bad input: the webhook, ``reserve=true``
placements and the extender's holds answer 503 (Alertmanager retries a 5xx and drops a 2xx or
4xx: ``notify/webhook/webhook.go`` returns ``RetryError`` only for 5xx through
``notify.CheckRetry`` in prometheus/alertmanager) and ``/readyz`` reports not ready.

PostgreSQL refuses a write in a read-only transaction with SQLSTATE 25006
(``read_only_sql_transaction``, class 25 "Invalid Transaction State", PostgreSQL docs Appendix A),
which psycopg raises as ``InternalError`` (``psycopg.errors`` maps class 25) and SQLAlchemy wraps as
``sqlalchemy.exc.InternalError``, a ``StatementError`` like every DBAPI error
(``sqlalchemy/exc.py``). Only classes 22 (data exception) and 23 (integrity constraint violation)
are the client's values.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
import sqlalchemy.exc as sa_exc
from fastapi.testclient import TestClient
from serving_helpers import PgCluster, alert, two_a100_hosts, wait_for, webhook

from fleetmind.serving.app import create_app
from fleetmind.serving.db import is_input_error
from fleetmind.serving.settings import Settings
from fleetmind.serving.telemetry.sim import SimSource


def _settings(url: str) -> Settings:
    return Settings(
        database_url=url,
        rca_model="baseline:upstream-coverage",
        placement_model="heuristic:builtin-bestfit",
        incident_worker=False,
    )


def _wrapped(orig: Exception) -> sa_exc.DBAPIError:
    """``orig`` as SQLAlchemy raises it (the wrapper class chosen from the DBAPI class)."""
    return sa_exc.DBAPIError.instance("INSERT", {}, orig, psycopg.Error)


@pytest.mark.parametrize(
    ("orig", "expected"),
    [
        (psycopg.errors.StringDataRightTruncation("too long"), True),  # 22001
        (psycopg.errors.NumericValueOutOfRange("out of range"), True),  # 22003
        (psycopg.errors.UniqueViolation("duplicate"), True),  # 23505
        (psycopg.errors.ReadOnlySqlTransaction("read-only"), False),  # 25006
        (psycopg.errors.UndefinedTable("no table"), False),  # 42P01: an old schema
        (psycopg.errors.SerializationFailure("retry"), False),  # 40001
        (psycopg.errors.AdminShutdown("shutdown"), False),  # 57P01
        (psycopg.errors.InsufficientPrivilege("denied"), False),  # 42501
        (psycopg.DataError("NUL"), True),  # psycopg's client-side refusal of a NUL, no SQLSTATE
        (psycopg.OperationalError("connection refused"), False),
    ],
)
def test_only_sqlstate_classes_22_and_23_are_the_clients_values(
    orig: Exception, expected: bool
) -> None:
    err = _wrapped(orig)
    assert isinstance(err, sa_exc.StatementError)  # the old rule took every one as input
    assert is_input_error(err) is expected


def test_a_value_sqlalchemy_could_not_send_is_input_but_other_errors_are_not() -> None:
    """A ``StatementError`` that is no DBAPI error was raised converting a parameter."""
    assert is_input_error(sa_exc.StatementError("bind", "INSERT", {}, TypeError("not JSON")))
    assert not is_input_error(sa_exc.StatementError("bind", "INSERT", {}, RuntimeError("x")))
    assert not is_input_error(sa_exc.InvalidRequestError("closed"))


@pytest.fixture
def read_only(pg: PgCluster) -> Iterator[PgCluster]:
    """The cluster with ``default_transaction_read_only = on`` (reloaded: open sessions too),
    reset afterwards."""
    pg.psql("DROP SCHEMA public CASCADE; CREATE SCHEMA public")
    yield pg
    pg.psql("ALTER SYSTEM RESET default_transaction_read_only")
    pg.psql("SELECT pg_reload_conf()")


def _set_read_only(pg: PgCluster) -> None:
    pg.psql("ALTER SYSTEM SET default_transaction_read_only = on")
    pg.psql("SELECT pg_reload_conf()")


def _pod(name: str) -> dict[str, Any]:
    limits = {"cpu": "1", "memory": "1Gi", "nvidia.com/gpu": "1"}
    return {
        "metadata": {"name": name, "namespace": "ml", "uid": f"uid-{name}"},
        "spec": {"containers": [{"name": "main", "resources": {"limits": limits}}]},
    }


def test_a_read_only_database_is_an_outage_everywhere(read_only: PgCluster) -> None:
    pg = read_only
    with TestClient(create_app(_settings(pg.url))) as c:
        c.app.state.services.telemetry = SimSource(two_a100_hosts(used={"gpu-a"}))
        assert c.get("/readyz").status_code == 200
        _set_read_only(pg)
        # SIGHUP reaches the pooled sessions asynchronously: wait (generously) for the probe
        r = wait_for(lambda: (x := c.get("/readyz")).status_code == 503 and x, timeout=30)
        assert r and "database: DatabaseReadOnly" in r.json()["problems"], r

        hook = webhook([alert({"alertname": "GpuXidError", "node": "gpu-a"}, fingerprint="ro1")])
        r = c.post("/api/v1/alerts", json=hook)
        assert r.status_code == 503, r.text  # before: 200, accepted 0, rejected "database"
        assert r.json()["detail"] == "database unavailable; nothing was stored"

        body = {"num_gpu": 1, "gpu_milli": 1000, "reserve": True, "job_id": "j-ro"}
        r = c.post("/api/v1/placements", json=body)
        assert r.status_code == 503, r.text  # before: 422

        args = {"Pod": _pod("p-ro"), "Nodes": None, "NodeNames": ["gpu-a", "gpu-b"]}
        r = c.post("/api/v1/scheduler/filter", json=args)
        assert r.status_code == 503, r.text  # before: 422 (the one node passing is held)

    assert pg.psql("SELECT count(*) FROM alerts") == "0"
    assert pg.psql("SELECT count(*) FROM reservations") == "0"


def test_a_failed_read_does_not_claim_nothing_was_stored(tmp_path: Path) -> None:
    """A GET that finds the database down answers 503 without speaking of storing."""
    with TestClient(create_app(_settings(f"sqlite:///{tmp_path}/r.db"))) as c:
        db = c.app.state.services.db

        def down(*_a: Any, **_k: Any) -> Any:
            raise sa_exc.OperationalError("SELECT", {}, Exception("connection refused"))

        db.list_incidents = down
        r = c.get("/api/v1/incidents")
        assert r.status_code == 503
        assert r.json()["detail"] == "database unavailable; try again"
