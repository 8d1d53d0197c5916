"""The statement timeout on PostgreSQL leaves the URL's ``options`` alone.

It was sent as libpq ``options`` in ``connect_args``, which SQLAlchemy lays over the URL's query
(sqlalchemy ``engine/create.py``: ``cparams.update(connect_args)``), so ``?options=-csearch_path%3Dapp``
was dropped without a word; and PgBouncer refuses the startup parameter ``options`` at its
defaults (PgBouncer ``doc/config.md``, ``ignore_startup_parameters``). It is a ``SET`` on each new
connection now (SQLAlchemy PostgreSQL dialect docs, "Setting Alternate Search Paths on Connect").
"""

from __future__ import annotations

from serving_helpers import PgCluster
from sqlalchemy import text

from fleetmind.serving.db import Database, pg_connect_args


def test_no_libpq_options_among_the_connect_args() -> None:
    args = pg_connect_args("postgresql+psycopg://u@h/db?options=-csearch_path%3Dapp", 5.0, 30.0)
    assert "options" not in args


def test_the_urls_search_path_survives_and_the_timeout_applies(pg: PgCluster) -> None:
    pg.psql("DROP SCHEMA IF EXISTS app CASCADE; CREATE SCHEMA app")
    db = Database(pg.url + "?options=-csearch_path%3Dapp", statement_timeout_s=7.0)
    try:
        db.migrate()  # the tables go to the URL's schema
        for _ in range(2):  # a pooled connection again: the pool's rollback keeps the SET
            with db.read() as conn:
                assert conn.execute(text("SHOW search_path")).scalar() == "app"
                assert conn.execute(text("SHOW statement_timeout")).scalar() == "7s"
                conn.rollback()
        assert (
            "alerts"
            in pg.psql(
                "SELECT table_name FROM information_schema.tables WHERE table_schema = 'app'"
            ).split()
        )
    finally:
        db.dispose()


def test_a_zero_timeout_sets_none(pg: PgCluster) -> None:
    db = Database(pg.url, statement_timeout_s=0.0)
    try:
        with db.read() as conn:
            assert conn.execute(text("SHOW statement_timeout")).scalar() == "0"
    finally:
        db.dispose()
