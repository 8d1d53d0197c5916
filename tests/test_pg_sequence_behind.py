"""A PostgreSQL id sequence behind its table's rows, on a throw-away PostgreSQL.

PostgreSQL's logical replication does not replicate sequence data ("Logical Replication
Restrictions", https://www.postgresql.org/docs/current/logical-replication-restrictions.html):
after a cutover to the subscriber, and after rows were copied with their ids from another
database, ``nextval`` hands out ids already stored. Every insert into that table then fails with
SQLSTATE 23505 on ``<table>_pkey``. The webhook answered 200 with the alert in ``rejected`` (a
"bad value" of the request), so Alertmanager, which retries only a 5xx
(prometheus/alertmanager ``notify/webhook/webhook.go`` via ``notify.RetryError``), dropped it; and
the service started on such a database without a word. Now the webhook answers 503 and stores
nothing until the sequence is repaired, and the start refuses with the ``setval`` to run.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient
from serving_helpers import PgCluster, free_port

from fleetmind.cli import main
from fleetmind.cli import serve as cli_serve
from fleetmind.data.errors import ConfigError
from fleetmind.serving import db as db_module
from fleetmind.serving.app import create_app
from fleetmind.serving.db import Database, is_input_error
from fleetmind.serving.migrations import head
from fleetmind.serving.settings import Settings, get_settings

SETVAL = "SELECT setval(pg_get_serial_sequence('{t}','id'), (SELECT max(id) FROM {t}));"


def webhook(name: str) -> dict[str, Any]:
    """An Alertmanager v4 webhook body of one firing alert named ``name``."""
    return {
        "version": "4",
        "status": "firing",
        "receiver": "fleetmind",
        "alerts": [
            {
                "status": "firing",
                "labels": {"alertname": name, "cluster": "c0", "node": "n1"},
                "annotations": {},
                "startsAt": "2026-12-06T23:00:00Z",
                "endsAt": "0001-01-01T00:00:00Z",
            }
        ],
    }


def set_back(pg: PgCluster, table: str) -> None:
    """Put ``table``'s id sequence back at its start, as a logical-replication subscriber has it."""
    pg.psql(f"SELECT setval(pg_get_serial_sequence('{table}','id'), 1, false)")


@pytest.fixture
def url(pg: PgCluster) -> str:
    pg.psql("DROP SCHEMA public CASCADE; CREATE SCHEMA public")
    db_module._REPORTED_BEHIND.clear()
    return pg.url


@pytest.fixture
def client(url: str) -> Iterator[TestClient]:
    settings = Settings(
        database_url=url,
        rca_model="baseline:upstream-coverage",
        placement_model="heuristic:builtin-bestfit",
        incident_worker=False,
    )
    with TestClient(create_app(settings)) as c:
        yield c


def stored(pg: PgCluster, name: str) -> int:
    return int(pg.psql(f"SELECT count(*) FROM alerts WHERE alertname = '{name}'"))


def test_the_webhook_answers_503_and_stores_nothing_until_the_sequence_is_set(
    client: TestClient, pg: PgCluster, caplog: pytest.LogCaptureFixture
) -> None:
    for name in ("A1", "A2", "A3"):
        assert client.post("/api/v1/alerts", json=webhook(name)).json()["accepted"] == 1
    set_back(pg, "alerts")
    with caplog.at_level(logging.ERROR, logger="fleetmind.serving"):
        for _ in range(2):  # Alertmanager's retry meets the same outage
            r = client.post("/api/v1/alerts", json=webhook("B"))
            assert r.status_code == 503, r.text  # was 200 with rejected_count 1
            assert stored(pg, "B") == 0
    remedy = [rec for rec in caplog.records if SETVAL.format(t="alerts") in rec.getMessage()]
    assert len(remedy) == 1  # once, not per request

    pg.psql(SETVAL.format(t="alerts"))
    r = client.post("/api/v1/alerts", json=webhook("B"))
    assert r.status_code == 200 and r.json()["accepted"] == 1 and r.json()["rejected_count"] == 0
    assert stored(pg, "B") == 1


def test_a_taken_incident_id_is_an_outage_and_a_taken_client_key_is_input(
    client: TestClient, pg: PgCluster
) -> None:
    """The incident worker retries (a transient database error) instead of taking the refused
    incident for a bad value; a duplicate of a key the client chose stays the client's."""
    from sqlalchemy import insert
    from sqlalchemy.exc import IntegrityError

    db: Database = client.app.state.services.db
    pg.psql(
        "INSERT INTO incidents (status, opened_ts, updated_ts, first_alert_ts, last_alert_ts, "
        "alert_count, firing_count, nodes, clusters, causes, needs_ranking) "
        "VALUES ('open', 1, 1, 1, 1, 0, 0, '[]', '[]', '[]', false)"
    )
    set_back(pg, "incidents")
    row = {"status": "open", "opened_ts": 2.0, "updated_ts": 2.0, "first_alert_ts": 2.0}
    row |= {"last_alert_ts": 2.0, "alert_count": 0, "firing_count": 0}
    row |= {"nodes": [], "clusters": [], "causes": []}
    with pytest.raises(IntegrityError) as taken, db.write() as conn:
        conn.execute(insert(db_module.incidents).values(**row))
    assert db_module.behind_sequence(taken.value) == "incidents"
    assert not is_input_error(taken.value)

    pod = {"pod_key": "k8s/default/train-0", "cluster": "k8s", "node": "gpu-a", "gpus": [0]}
    pod |= {"gpu_milli": 1000, "cpu_milli": 0, "memory_mib": 0, "created_ts": 1.0}
    pod |= {"expires_ts": 2.0}
    with db.write() as conn:
        conn.execute(insert(db_module.reservations).values(**pod))
    with pytest.raises(IntegrityError) as dup, db.write() as conn:  # the pod's own name, twice
        conn.execute(insert(db_module.reservations).values(**pod))
    assert db_module.behind_sequence(dup.value) is None
    assert is_input_error(dup.value)


@pytest.mark.parametrize("tables", [["alerts"], ["incidents"], ["alerts", "incidents"]])
def test_the_start_refuses_with_the_setval_to_run(
    url: str, pg: PgCluster, tables: list[str]
) -> None:
    db = Database(url)
    try:
        db.migrate()
        pg.psql(
            "INSERT INTO alerts (fingerprint, starts_at, starts_ts, status, labels, annotations, "
            "received_ts, updated_ts, pending) VALUES ('f', 'x', 1, 'firing', '{}', '{}', 1, 1, "
            "false)"
        )
        pg.psql(
            "INSERT INTO incidents (status, opened_ts, updated_ts, first_alert_ts, "
            "last_alert_ts, alert_count, firing_count, nodes, clusters, causes, needs_ranking) "
            "VALUES ('open', 1, 1, 1, 1, 0, 0, '[]', '[]', '[]', false)"
        )
        db.migrate()  # sequences in step: starts
        db.migrate(apply=False)
        for table in tables:
            set_back(pg, table)
        run = " ".join(SETVAL.format(t=table) for table in tables)
        for apply in (True, False):  # upgrading, and FLEETMIND_MIGRATE_ON_START=false
            with pytest.raises(ConfigError) as err:
                db.migrate(apply=apply)
            message = str(err.value)
            assert "\n" not in message and message.endswith(f"run {run}"), message
            for table in tables:
                assert f"{table} (next id 1, highest stored 1)" in message
        pg.psql(run)
        assert db.migrate() == head()  # starts again
    finally:
        db.dispose()


def test_fleetmind_serve_refuses_in_one_line(
    url: str, pg: PgCluster, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import uvicorn

    started: list[bool] = []
    monkeypatch.setattr(uvicorn, "run", lambda *a, **kw: started.append(True))
    saved = {env: os.environ.get(env) for env in cli_serve._ENV_OPTIONS.values()}
    monkeypatch.setenv("FLEETMIND_RCA_MODEL", "baseline:upstream-coverage")
    monkeypatch.setenv("FLEETMIND_PLACEMENT_MODEL", "heuristic:builtin-bestfit")
    try:
        db = Database(url)
        db.migrate()
        db.dispose()
        pg.psql(
            "INSERT INTO alerts (fingerprint, starts_at, starts_ts, status, labels, annotations, "
            "received_ts, updated_ts, pending) VALUES ('f', 'x', 1, 'firing', '{}', '{}', 1, 1, "
            "false)"
        )
        set_back(pg, "alerts")
        assert main(["serve", "--database-url", url, "--port", str(free_port())]) == 2
    finally:
        for env, value in saved.items():
            if value is None:
                os.environ.pop(env, None)
            else:
                os.environ[env] = value
        get_settings.cache_clear()
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    assert len(err) == 1 and err[0].endswith(SETVAL.format(t="alerts")), err
    assert started == []


def _wait_for(what: Callable[[], bool], timeout_s: float = 20.0) -> None:
    """Poll ``what`` every 0.1 s until it holds; fail after ``timeout_s`` seconds."""
    deadline = time.monotonic() + timeout_s
    while not what():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.1)


def test_the_incident_worker_logs_the_setval_once_and_again_after_the_interval(
    url: str, pg: PgCluster, caplog: pytest.LogCaptureFixture
) -> None:
    """The real worker thread: an incident it cannot insert (the sequence is behind) is retried,
    and the ``setval`` is logged at ERROR once, not once per loop; again when the interval of
    :data:`fleetmind.serving.db.BEHIND_REPORT_EVERY_S` has passed; the repair lets it through."""
    settings = Settings(
        database_url=url,
        rca_model="baseline:upstream-coverage",
        placement_model="heuristic:builtin-bestfit",
        incident_worker=True,
    )
    incidents = lambda: int(pg.psql("SELECT count(*) FROM incidents"))  # noqa: E731
    remedy = lambda: [  # noqa: E731
        r
        for r in caplog.records
        if r.levelno == logging.ERROR and SETVAL.format(t="incidents") in r.getMessage()
    ]
    with (
        caplog.at_level(logging.ERROR, logger="fleetmind.serving"),
        TestClient(create_app(settings)) as c,
    ):
        worker = c.app.state.services.incidents.worker
        assert c.post("/api/v1/alerts", json=webhook("A1")).status_code == 200
        _wait_for(lambda: incidents() == 1)
        pg.psql(  # closed incidents of ids 2..500 copied in: each refused insert takes one id
            "INSERT INTO incidents (id, status, opened_ts, updated_ts, first_alert_ts, "
            "last_alert_ts, alert_count, firing_count, nodes, clusters, causes, needs_ranking) "
            "SELECT g, 'closed', 1, 1, 1, 1, 0, 0, '[]', '[]', '[]', false "
            "FROM generate_series(2, 500) g"
        )
        set_back(pg, "incidents")
        other = webhook("Z")
        other["alerts"][0]["labels"]["cluster"] = "c9"  # a new incident, not A1's
        assert c.post("/api/v1/alerts", json=other).status_code == 200
        _wait_for(lambda: worker._failures._count >= 3)  # three loops refused the insert
        assert "incidents_pkey" in (worker.last_error or "")
        assert len(remedy()) == 1  # was 0: only "incident worker failed; retrying"
        db_module._REPORTED_BEHIND["incidents"] -= db_module.BEHIND_REPORT_EVERY_S + 1
        _wait_for(lambda: len(remedy()) == 2)  # still behind after the interval: a reminder
        pg.psql(SETVAL.format(t="incidents"))
        _wait_for(lambda: incidents() == 501 and worker.last_error is None)
        assert int(pg.psql("SELECT count(*) FROM alerts WHERE pending")) == 0
    assert len(remedy()) == 2
