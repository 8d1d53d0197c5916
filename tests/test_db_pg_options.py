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


def test_no_pooled_connection_keeps_the_migration_locks_zero_timeout(pg: PgCluster) -> None:
    """The migration lock's session sets ``statement_timeout = 0`` (an index build may take
    long). A replica that waited for the lock while another upgraded found the schema current,
    ran no revision, and handed that session back to the pool: a request then ran with no
    timeout."""
    import threading

    from alembic import command
    from sqlalchemy import create_engine

    from fleetmind.serving import migrations

    pg.psql("DROP DATABASE IF EXISTS waiting")
    pg.psql("CREATE DATABASE waiting")
    url = pg.url.rsplit("/", 1)[0] + "/waiting"
    other = create_engine(url)  # the replica that upgrades
    holder = other.connect()
    holder.execute(text("SELECT pg_advisory_lock(:k)"), {"k": migrations._PG_MIGRATE_KEY})
    holder.commit()
    db = Database(url, statement_timeout_s=7.0)
    waiting = threading.Thread(target=db.migrate)
    try:
        waiting.start()  # polls for the lock the other replica holds
        with other.connect() as conn:
            command.upgrade(migrations._config(conn), "head")
            conn.commit()
        holder.execute(text("SELECT pg_advisory_unlock(:k)"), {"k": migrations._PG_MIGRATE_KEY})
        holder.commit()
        waiting.join(60)
        assert not waiting.is_alive()
        for _ in range(3):  # whichever connection the pool hands out
            with db.read() as conn:
                assert conn.execute(text("SHOW statement_timeout")).scalar() == "7s"
    finally:
        holder.close()
        other.dispose()
        db.dispose()
