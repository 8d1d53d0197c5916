"""PostgreSQL databases not in UTF8, and two writers storing the same feedback graph at once.

* Encoding: psycopg takes the server's encoding as the client encoding unless told otherwise
  (psycopg docs, "Adaptation", "Strings adaptation"), so on a ``LATIN1`` database a value outside
  Latin-1 failed in Python as a bare ``UnicodeEncodeError`` (a 500, a wedged incident worker), and
  on a ``SQL_ASCII`` database psycopg returned bytes (psycopg/psycopg#561), failing SQLAlchemy's
  server version check on the first connection (a traceback at start). The connections now ask for
  ``client_encoding=utf8`` and start-up refuses a database whose server encoding is not UTF8.
* Feedback: ``record_feedback`` checked ``feedback_graphs`` for the graph's digest, then inserted
  it; two replicas storing feedback for the same new graph both missed and the second hit the
  primary key (a 422, the verdict lost). The insert is ``ON CONFLICT (digest) DO NOTHING`` now.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from serving_helpers import PgCluster, alert, webhook
from sqlalchemy import false, func, select
from ui_helpers import TRUE_ROOT, storm_alerts

from fleetmind.data.errors import ConfigError
from fleetmind.serving import feedback
from fleetmind.serving.app import create_app
from fleetmind.serving.db import Database, feedback_graphs, pg_connect_args
from fleetmind.serving.settings import Settings

os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")

TOKEN = "race-token"
H = {"Authorization": f"Bearer {TOKEN}"}


def _other_db(pg: PgCluster, name: str, encoding: str) -> str:
    """A new database ``name`` in ``encoding`` on the cluster; its URL."""
    pg.psql(f'DROP DATABASE IF EXISTS "{name}"')
    pg.psql(
        f"CREATE DATABASE \"{name}\" ENCODING '{encoding}' LC_COLLATE 'C' LC_CTYPE 'C' "
        "TEMPLATE template0"
    )
    return pg.url.rsplit("/", 1)[0] + f"/{name}"


# ------------------------------------------------------------------ encoding


def test_connections_ask_for_utf8() -> None:
    assert pg_connect_args("postgresql+psycopg://u@h/db", 5.0, 30.0)["client_encoding"] == "utf8"


@pytest.mark.parametrize("encoding", ["LATIN1", "SQL_ASCII"])
def test_start_refuses_a_database_not_in_utf8_with_one_line(pg: PgCluster, encoding: str) -> None:
    """LATIN1 was accepted (and failed on the first non-Latin-1 label); SQL_ASCII died with a
    ``TypeError`` traceback inside SQLAlchemy's first connection."""
    url = _other_db(pg, f"fm_{encoding.lower()}", encoding)
    for apply in (True, False):  # FLEETMIND_MIGRATE_ON_START true and false
        db = Database(url)
        try:
            with pytest.raises(ConfigError) as err:
                db.migrate(apply=apply)
        finally:
            db.dispose()
        msg = str(err.value)
        assert "\n" not in msg
        assert f"server encoding {encoding}" in msg
        assert "ENCODING 'UTF8' TEMPLATE template0" in msg
    # nothing was created in the refused database
    db = Database(url)
    try:
        with db.read() as conn:
            tables = conn.exec_driver_sql(
                "SELECT count(*) FROM information_schema.tables WHERE table_schema = 'public'"
            ).scalar_one()
        assert tables == 0
    finally:
        db.dispose()


def test_a_utf8_database_still_starts(pg: PgCluster) -> None:
    url = _other_db(pg, "fm_utf8", "UTF8")
    db = Database(url)
    try:
        db.migrate()
        with db.read() as conn:
            assert conn.exec_driver_sql("SHOW client_encoding").scalar_one() == "UTF8"
    finally:
        db.dispose()


# ------------------------------------------------------------------ feedback race


@pytest.fixture(params=["sqlite", "postgresql"])
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path}/fb.db"
        return
    cluster: PgCluster = request.getfixturevalue("pg")
    yield _other_db(cluster, "fm_feedback_race", "UTF8")


def _settings(url: str) -> Settings:
    return Settings(
        database_url=url,
        rca_model="baseline:upstream-coverage",
        placement_model="heuristic:builtin-bestfit",
        incident_worker=False,
        api_token=TOKEN,
    )


def test_feedback_survives_another_writer_storing_the_same_graph_first(
    database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The race made deterministic: the graph's row is committed by "the other replica" and this
    request's check for it misses (as when the other commits between the check and the insert)."""

    with TestClient(create_app(_settings(database_url)), headers=H) as c:
        services = c.app.state.services
        assert c.post("/api/v1/alerts", json=webhook(storm_alerts())).status_code == 200
        services.incidents.process_pending()
        inc = next(i for i in c.get("/api/v1/incidents").json() if i["alert_count"] == 7)
        digest, graph_json = feedback._graph_digest(services.graphs.graph)
        with services.db.write() as conn:  # the other replica's insert, committed
            conn.execute(
                feedback_graphs.insert().values(
                    digest=digest, name=services.graphs.graph.name, graph=graph_json
                )
            )
        real = feedback.select

        def check_misses(*cols: Any) -> Any:
            stmt = real(*cols)
            if len(cols) == 1 and cols[0] is feedback_graphs.c.digest:
                stmt = stmt.where(false())  # the check ran before the other replica committed
            return stmt

        monkeypatch.setattr(feedback, "select", check_misses)
        url = f"/api/v1/incidents/{inc['id']}/feedback"
        r = c.post(url, json={"root_cause": TRUE_ROOT, "by": "alice"})
        assert r.status_code == 201, r.text
        monkeypatch.undo()
        assert [f["by"] for f in c.get(url).json()] == ["alice"]
        with services.db.read() as conn:
            n = conn.execute(
                select(func.count()).where(feedback_graphs.c.digest == digest)
            ).scalar_one()
        assert n == 1


# ------------------------------------------------------------------ a value the database refuses


def test_the_worker_sets_aside_an_alert_whose_grouping_the_database_refuses(
    database_url: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A batch whose write the database refused (SQLSTATE class 22, as ``LATIN1`` refusing a
    node id) failed at every pass forever, and every later alert waited behind it."""
    from sqlalchemy.exc import DataError

    alerts_in = [
        alert({"alertname": f"Refused{k}", "cluster": "c0", "node": "c0-h1"}) for k in range(3)
    ]
    with TestClient(create_app(_settings(database_url)), headers=H) as c:
        services = c.app.state.services
        assert c.post("/api/v1/alerts", json=webhook(alerts_in)).status_code == 200
        ids = {a["labels"]["alertname"]: a["id"] for a in c.get("/api/v1/alerts").json()}
        bad = ids["Refused1"]
        store = services.incidents.store
        real = store.mark_grouped

        def refuse(conn: Any, done: list[dict[str, Any]]) -> int:
            if any(d["_id"] == bad and d["_inc"] is not None for d in done):
                raise DataError("UPDATE alerts", {}, Exception("character has no equivalent"))
            return real(conn, done)

        monkeypatch.setattr(store, "mark_grouped", refuse)
        with caplog.at_level("WARNING", logger="fleetmind.serving"):
            assert services.incidents.process_pending() == 2  # Refused0, then Refused1 set aside
            assert services.incidents.process_pending() == 1  # Refused2, a full batch again
            assert services.incidents.process_pending() == 0
        assert services.incidents.set_aside == 1
        warned = [r.getMessage() for r in caplog.records if "not grouped" in r.getMessage()]
        assert len(warned) == 1 and "Refused1" in warned[0] and "no equivalent" in warned[0]
        got = {a["labels"]["alertname"]: a for a in c.get("/api/v1/alerts").json()}
        assert got["Refused1"]["incident_id"] is None
        assert got["Refused0"]["incident_id"] is not None
        assert got["Refused2"]["incident_id"] is not None
