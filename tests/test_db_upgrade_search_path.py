"""An upgrade on PostgreSQL whose URL names a ``search_path`` that holds no FleetMind tables while
another schema of the database does.

Release 0.2.0 sent its statement timeout as libpq ``options`` in ``connect_args``, which SQLAlchemy
lays over the URL's query (sqlalchemy ``engine/create.py``: ``cparams.update(connect_args)``), so a
URL with ``?options=-csearch_path%3Dapp`` wrote its tables to ``public``. Later releases keep the
URL's ``options`` (``test_db_pg_options.py``), found ``app`` empty, and created a new empty schema
there: every incident, alert and feedback was gone from the service, without a warning. The
upgrade now refuses, naming the schema, and creates nothing.
"""

from __future__ import annotations

import pytest
from alembic import command
from serving_helpers import PgCluster
from sqlalchemy import create_engine, text

from fleetmind.data.errors import ConfigError
from fleetmind.serving import migrations
from fleetmind.serving.db import Database


def _fresh(pg: PgCluster, name: str) -> str:
    pg.psql(f"DROP DATABASE IF EXISTS {name}")
    pg.psql(f"CREATE DATABASE {name}")
    return pg.url.rsplit("/", 1)[0] + "/" + name


def _as_release_020(url: str) -> None:
    """Tables in ``public`` at revision 0004 (what release 0.2.0 ships), holding one alert."""
    engine = create_engine(url)
    with engine.connect() as conn:
        command.upgrade(migrations._config(conn), "0004")
        conn.commit()
        conn.execute(
            text(
                "INSERT INTO alerts (fingerprint, starts_at, starts_ts, status, labels, "
                "annotations, received_ts, updated_ts, pending) VALUES "
                "('f1', '2026-12-01T00:00:00Z', 0, 'firing', '{}', '{}', 0, 0, true)"
            )
        )
        conn.commit()
    engine.dispose()


def _tables(url: str, schema: str) -> list[str]:
    engine = create_engine(url)
    with engine.connect() as conn:
        names = conn.execute(
            text("SELECT table_name FROM information_schema.tables WHERE table_schema = :s"),
            {"s": schema},
        ).scalars()
        out = sorted(names)
    engine.dispose()
    return out


def _create_schema(url: str, name: str) -> None:
    engine = create_engine(url)
    with engine.connect() as conn:
        conn.execute(text(f"CREATE SCHEMA {name}"))
        conn.commit()
    engine.dispose()


def test_tables_in_another_schema_are_not_replaced_by_an_empty_one(pg: PgCluster) -> None:
    url = _fresh(pg, "sp_refuse")
    _as_release_020(url)
    _create_schema(url, "app")
    db = Database(url + "?options=-csearch_path%3Dapp")
    try:
        with pytest.raises(
            ConfigError,
            match=r"^FleetMind tables found in schema public, not in the search_path schema app: "
            r"nothing was created; move them \(ALTER TABLE public\.<table> SET SCHEMA app",
        ):
            db.migrate()  # was: "upgraded from none", an empty schema in app
    finally:
        db.dispose()
    assert _tables(url, "app") == []
    assert "alerts" in _tables(url, "public")


def test_tables_moved_as_the_error_says_are_upgraded_with_their_rows(pg: PgCluster) -> None:
    url = _fresh(pg, "sp_moved")
    _as_release_020(url)
    engine = create_engine(url)
    with engine.connect() as conn:
        conn.execute(text("CREATE SCHEMA app"))
        for name in conn.execute(
            text("SELECT tablename FROM pg_tables WHERE schemaname = 'public'")
        ).scalars():
            conn.execute(text(f'ALTER TABLE public."{name}" SET SCHEMA app'))
        conn.commit()
    engine.dispose()
    db = Database(url + "?options=-csearch_path%3Dapp")
    try:
        assert db.migrate() == "0004"
        assert db.count_alerts() == 1
    finally:
        db.dispose()


def test_an_empty_database_with_a_search_path_is_created_there(pg: PgCluster) -> None:
    url = _fresh(pg, "sp_empty")
    _create_schema(url, "app")
    db = Database(url + "?options=-csearch_path%3Dapp")
    try:
        assert db.migrate() == "none"
    finally:
        db.dispose()
    assert "alerts" in _tables(url, "app")
    assert _tables(url, "public") == []


def test_another_applications_alerts_table_does_not_block_a_new_schema(pg: PgCluster) -> None:
    url = _fresh(pg, "sp_other_app")
    engine = create_engine(url)
    with engine.connect() as conn:  # a shared database: some other tool's tables in public
        conn.execute(text("CREATE TABLE public.alerts (id serial PRIMARY KEY, body text)"))
        conn.execute(text("CREATE TABLE public.incidents (id serial PRIMARY KEY, title text)"))
        conn.commit()
    engine.dispose()
    _create_schema(url, "app")
    db = Database(url + "?options=-csearch_path%3Dapp")
    try:
        assert db.migrate() == "none"
    finally:
        db.dispose()
    assert "alerts" in _tables(url, "app")
