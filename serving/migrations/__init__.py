"""``fleetmind.serving.migrations``, the folder ``serving/migrations/``.

Schema migrations of the service database (Alembic), run by the service at start.

The schema lives in revisions under ``versions/`` (``0001`` is the schema ``MetaData.create_all``
made in the builds before Alembic; release 0.2.0 already ships ``0001`` to ``0004``, so its
databases are at ``0004``); :func:`upgrade` brings a database to the newest revision (``head``):

* an empty database gets every revision in order;
* a database created by ``create_all`` before Alembic (tables, no ``alembic_version``) gets the
  indexes ``0001`` declares that it lacks, is stamped ``0001``, then upgraded;
* on PostgreSQL, a schema without FleetMind's tables is not created while another schema of the
  database holds them (a URL's ``search_path`` that release 0.2.0 ignored): the upgrade is
  refused with a :class:`~fleetmind.data.errors.ConfigError` naming the schema, and nothing is
  changed;
* a database at a revision this release does not know (written by a newer release) is refused with
  a :class:`~fleetmind.data.errors.ConfigError` that names the command rolling it back, and
  nothing is changed.

:func:`downgrade` takes a database back to an older revision (``fleetmind db downgrade --to REV``,
run with the release that wrote the newer schema): each revision's ``downgrade()`` in turn, newest
first, under the same lock, each in its own transaction. :data:`DOWNGRADE_DROPS` says what undoing
each revision drops.

A database already at ``head`` is only read (no lock is taken: a restart under write load does not
wait for SQLite's write lock). Replicas starting together serialise on a lock (a PostgreSQL
advisory lock, or a file lock next to the SQLite file), so exactly one runs each revision.

Each revision is one transaction with its ``alembic_version`` update, on SQLite too: an upgrade
interrupted part way (a full disk, a crash, a killed process) leaves the database at the last
revision it finished, and the next start runs the rest. (Python's ``sqlite3`` opens no
transaction before DDL, so each ``CREATE``/``ALTER`` used to commit alone, and a half-applied
revision failed every later start with ``duplicate column name``.) A failed upgrade raises
:class:`UpgradeFailed`, which names the revision.

The exception: revisions that add an index to an existing table build it with ``CREATE INDEX
CONCURRENTLY`` on PostgreSQL (writes to the table continue), which runs outside a transaction, so
what the revision did before it commits first, and a build interrupted part way leaves an invalid
index. Such a revision, run again, skips what it finds done and drops the invalid index
(:func:`drop_invalid_index`) before building it.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import unquote

from sqlalchemy import event, inspect, text
from sqlalchemy.engine import URL, Connection, Engine
from sqlalchemy.exc import SQLAlchemyError

from fleetmind.data.errors import ConfigError

HERE = Path(__file__).resolve().parent
BASELINE = "0001"
"""The revision of the schema ``create_all`` made before migrations (the builds before Alembic,
which came before release 0.2.0)."""

ROLLBACK_DOC = "docs/serving/operations.md#rolling-back"
"""Where the rollback procedure is written down (named by the refusals)."""

DOWNGRADE_DROPS: dict[str, str] = {
    "0001": "every table (alerts and incidents): the database is empty",
    "0002": "incidents.needs_ranking and the index ix_alerts_pending_updated",
    "0003": "the tables incident_feedback, feedback_graphs and notifications (feedback labels, "
    "which root causes were sent)",
    "0004": "the table reservations (the scheduler's holds)",
    "0005": "the table ui_sessions (every browser is signed out)",
    "0006": "notifications.delivery (what became of each firing message per channel)",
    "0007": "the table model_reloads (the reload generation)",
    "0008": "model_reloads.pins",
    "0009": "the indexes ix_notifications_owed and ix_incident_feedback_incident",
    "0010": "the index ix_incidents_status_closed",
    "0011": "reservations.pod_priority",
    "0012": "nothing: the feedback it moved stays on the incident it moved to",
}
"""What undoing each revision (its ``downgrade()``) drops, with the data it holds."""

_PG_MIGRATE_KEY = 0x464C4D4D  # "FLMM": not the incident worker's key
_PG_LOCK_POLL_S = 0.2
"""How often a process waiting to migrate PostgreSQL tries the migration lock again, seconds."""


def _config(conn: Connection | None = None) -> Any:
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", str(HERE))
    cfg.attributes["connection"] = conn
    return cfg


def head() -> str:
    """The newest revision this release knows."""
    from alembic.script import ScriptDirectory

    return str(ScriptDirectory.from_config(_config()).get_current_head())


def known_revisions() -> set[str]:
    from alembic.script import ScriptDirectory

    return {s.revision for s in ScriptDirectory.from_config(_config()).walk_revisions()}


def revisions() -> list[str]:
    """This release's revisions, oldest first (``0001`` ... :func:`head`)."""
    from alembic.script import ScriptDirectory

    walked = ScriptDirectory.from_config(_config()).walk_revisions()
    return [str(s.revision) for s in reversed(list(walked))]


def current(conn: Connection) -> str | None:
    """The revision the database is at (``None``: never migrated)."""
    from alembic.runtime.migration import MigrationContext

    return MigrationContext.configure(conn).get_current_revision()


def sqlite_path(url: URL) -> str | None:
    """The filesystem path of a SQLite database URL, or ``None`` when the database is in memory
    (or temporary), or the URL is not SQLite's.

    ``sqlite:///path`` names the file itself. With ``uri=true`` (SQLAlchemy pysqlite's URI form,
    ``sqlite:///file:/srv/fm.db?mode=rwc&uri=true``) the database part is a SQLite URI: the
    ``file:`` scheme, an empty or ``localhost`` authority, the URI's own query and fragment
    are dropped and the path is percent-decoded (https://www.sqlite.org/uri.html); ``mode=memory``
    (in the URI or in the URL's query, which SQLAlchemy appends to the URI), ``:memory:`` and an
    empty path are in memory. A ``uri=true`` name not starting with ``file:`` is a plain file name
    (SQLite's rule). Lock files beside the database and the file-identity check use this path:
    the raw string (``file:/srv/fm.db``) is no file.
    """
    if url.get_backend_name() != "sqlite":
        return None
    name = url.database or ""
    uri = str(url.query.get("uri", "")).lower() in ("true", "1")
    if uri and name[:5].lower() == "file:":
        rest = name[5:]
        rest, _, query = rest.partition("?")
        query = query.partition("#")[0]
        rest = rest.partition("#")[0]
        if rest.startswith("//"):  # file://host/path: only an empty or localhost host is allowed
            host, slash, tail = rest[2:].partition("/")
            rest = slash + tail if host in ("", "localhost") else rest
        params = [kv.partition("=") for kv in query.split("&") if kv]
        if any(unquote(k) == "mode" and unquote(v) == "memory" for k, _, v in params):
            return None
        name = unquote(rest)
    if uri and str(url.query.get("mode", "")) == "memory":
        return None
    if not name or name == ":memory:":
        return None
    return name


@contextlib.contextmanager
def _migration_lock(engine: Engine) -> Iterator[Connection]:
    """A connection holding the migration lock (one migrating process per database)."""
    if engine.dialect.name == "postgresql":
        with engine.connect() as conn:
            conn.execute(text("SET statement_timeout = 0"))  # an index build may take long
            conn.commit()
            # Polled, with no transaction open between tries: a process blocked in
            # pg_advisory_lock holds a snapshot, and the holder's CREATE INDEX CONCURRENTLY waits
            # for every older snapshot to end: two replicas upgrading at once deadlocked.
            while not conn.execute(
                text("SELECT pg_try_advisory_lock(:k)"), {"k": _PG_MIGRATE_KEY}
            ).scalar():
                conn.commit()
                time.sleep(_PG_LOCK_POLL_S)
            conn.commit()
            try:
                yield conn
            finally:
                with contextlib.suppress(Exception):
                    conn.rollback()
                    conn.execute(text("SELECT pg_advisory_unlock(:k)"), {"k": _PG_MIGRATE_KEY})
                    conn.commit()
                # statement_timeout 0 above: never hand this session back to the pool, where a
                # request would run without the service's timeout (also when no revision ran)
                with contextlib.suppress(Exception):
                    conn.invalidate()
        return
    path = sqlite_path(engine.url)
    fd = None
    if path is not None:
        import fcntl

        fd = os.open(path + ".migrate.lock", os.O_RDWR | os.O_CREAT, 0o644)
        fcntl.flock(fd, fcntl.LOCK_EX)
    try:
        with _transactional_ddl(engine).connect() as conn:
            yield conn
    finally:
        if fd is not None:
            os.close(fd)  # drops the flock


def _transactional_ddl(engine: Engine) -> Engine:
    """``engine`` for the migration connection: on SQLite (pysqlite) one whose transactions are
    real for DDL too, else ``engine`` itself.

    Python's ``sqlite3`` begins a transaction only before ``INSERT``/``UPDATE``/``DELETE``/
    ``REPLACE``, never before DDL (CPython ``test_sqlite3``: ``test_ddl_does_not_autostart_transaction``),
    so each ``CREATE TABLE`` or ``ALTER TABLE`` of a revision committed alone. This is SQLAlchemy's
    documented pysqlite recipe ("Serializable isolation / Savepoints / Transactional DDL", SQLAlchemy
    docs, dialects/sqlite): the driver in autocommit mode (``isolation_level=None``) and ``BEGIN``
    emitted by a ``begin`` event. ``IMMEDIATE`` takes the write lock at once (waiting the busy
    timeout for another writer) rather than failing at the first write of a read transaction;
    so :func:`upgrade` opens it only when revisions will run, not for a database already current.
    The options engine shares ``engine``'s pool; the pool resets the isolation level when the
    connection is returned, and the event is local to the options engine.
    """
    if engine.dialect.name != "sqlite" or engine.dialect.driver != "pysqlite":
        return engine
    ddl = engine.execution_options(isolation_level="AUTOCOMMIT")

    @event.listens_for(ddl, "begin")
    def _begin(conn: Connection) -> None:  # pragma: no cover - SQLAlchemy callback
        conn.exec_driver_sql("BEGIN IMMEDIATE")

    return ddl


def state(engine: Engine) -> tuple[str | None, bool]:
    """``(revision, has_tables)``: the database's revision and whether it holds the alerts table."""
    with engine.connect() as conn:
        names = set(inspect(conn).get_table_names())
        return (current(conn) if "alembic_version" in names else None), "alerts" in names


def check(engine: Engine) -> str | None:
    """The database's revision; raises when it is newer than this release knows."""
    rev, _ = state(engine)
    if rev is not None and rev not in known_revisions():
        raise ConfigError(
            f"the database schema is at revision {rev}, which this release does not know (its "
            f"newest is {head()}): it was written by a newer FleetMind; to roll back, run "
            f"`fleetmind db downgrade --to {head()}` with that newer release first "
            f"({ROLLBACK_DOC})"
        )
    return rev


class UpgradeFailed(ConfigError):
    """A schema upgrade stopped at a revision (a full disk, a lock timeout, a read-only file).

    The revisions before it are kept (each is a transaction of its own) and the failed one is
    rolled back, so the next start runs it again.

    Args:
        before: the revision the database was at (``"none"``, ``"create_all"`` or a revision).
        target: the revision the upgrade was bringing it to (:func:`head`).
        revision: the revision that failed (the one after the last the database holds).
        cause: the database's error, one line.
    """

    def __init__(self, before: str, target: str, revision: str, cause: str) -> None:
        self.before, self.target, self.revision, self.cause = before, target, revision, cause
        super().__init__(
            f"schema upgrade from {before} to {target} failed at revision {revision}: {cause}"
        )


def _cause(err: BaseException) -> str:
    """The first line of the database's own message for ``err``."""
    lines = str(getattr(err, "orig", None) or err).strip().splitlines()
    return lines[0] if lines else type(err).__name__


def _next_revision(rev: str | None) -> str:
    """The revision an upgrade runs after ``rev`` (``None``: the database holds none)."""
    from alembic.script import ScriptDirectory

    script = ScriptDirectory.from_config(_config())
    for s in script.walk_revisions():
        if s.down_revision == rev:
            return str(s.revision)
    return rev or BASELINE


def _failed_revision(engine: Engine) -> str:
    """The revision an upgrade that just failed was running: the one after the last committed."""
    try:
        rev, _ = state(engine)
    except SQLAlchemyError:  # pragma: no cover - the database went away as well
        return "unknown"
    return _next_revision(rev)


def upgrade(engine: Engine) -> str:
    """Bring the database to :func:`head`; returns the revision it was at (``"none"``: empty).

    The revision is read first on a plain connection (on SQLite a read, which waits for no
    writer): a database already at :func:`head` is left at once, without the migration lock or
    SQLite's write lock. Only when revisions will run are the lock and the write lock taken (and the
    revision read again under them: another process may have upgraded meanwhile).

    Raises:
        ConfigError: the database is at a revision this release does not know.
        UpgradeFailed: a revision failed (it is rolled back; the ones before it are kept).
        sqlalchemy.exc.SQLAlchemyError: the database cannot be reached or read.
    """
    from alembic import command

    rev = check(engine)  # a plain read: no write lock, no migration lock
    if rev == head():
        return rev  # current: a restart under write load does not queue for the write lock
    before: str | None = None
    try:
        with _migration_lock(engine) as conn:
            names = set(inspect(conn).get_table_names())
            rev = current(conn) if "alembic_version" in names else None
            conn.commit()  # Alembic begins and commits its own transactions
            before = rev or "none"
            if rev is None and "alerts" not in names:
                _refuse_tables_elsewhere(conn)
            if rev is None and "alerts" in names:
                before = "create_all"
                _adopt_baseline(conn)
                command.stamp(_config(conn), BASELINE)
                conn.commit()
            command.upgrade(_config(conn), "head")
            conn.commit()
    except SQLAlchemyError as err:
        if before is None:
            raise  # not reached or not read: no upgrade was attempted
        raise UpgradeFailed(before, head(), _failed_revision(engine), _cause(err)) from err
    return before


class DowngradeFailed(ConfigError):
    """A schema downgrade stopped while undoing a revision (a lock timeout, a full disk).

    The revisions undone before it stay undone (each is a transaction of its own) and the failed
    one is rolled back: the database is at ``revision``, whose schema is whole.

    Args:
        before: the revision the database was at.
        target: the revision the downgrade was taking it to.
        revision: the revision it failed to undo (the one the database is at now).
        cause: the database's error, one line.
    """

    def __init__(self, before: str, target: str, revision: str, cause: str) -> None:
        self.before, self.target, self.revision, self.cause = before, target, revision, cause
        super().__init__(
            f"schema downgrade from {before} to {target} failed undoing revision {revision} (the "
            f"database is at {revision}): {cause}"
        )


def downgrade_refusal(rev: str | None, target: str, order: list[str]) -> str | None:
    """Why the database at ``rev`` cannot be taken down to ``target`` (``None``: it can)."""
    if rev is None:
        return (
            "the database holds no schema revision (empty, or made by a build before "
            "migrations): there is nothing to downgrade"
        )
    if order.index(target) > order.index(rev):
        return (
            f"revision {target} is above the database's revision {rev}: a downgrade only goes "
            "down (`fleetmind db upgrade` goes up)"
        )
    return None


def downgrade(engine: Engine, target: str) -> str:
    """Take the database down to revision ``target`` (each ``downgrade()`` from the database's
    revision down to ``target``'s successor, newest first); returns the revision it was at.

    A database already at ``target`` is left as it is. The revision is read again under the
    migration lock (:func:`upgrade`'s), which a start of the service waits for. What each undone
    revision drops is lost (:data:`DOWNGRADE_DROPS`).

    Raises:
        ConfigError: ``target`` is not a revision of this release, the database is at a revision
            this release does not know, holds no revision, or is below ``target``.
        DowngradeFailed: undoing a revision failed (it is rolled back; the ones undone stay undone).
        sqlalchemy.exc.SQLAlchemyError: the database cannot be reached or read.
    """
    from alembic import command

    order = revisions()
    if target not in order:
        raise ConfigError(
            f"unknown revision {target!r}: this release knows {order[0]} to {order[-1]}"
        )
    rev = check(engine)
    refusal = downgrade_refusal(rev, target, order)
    if refusal is not None:
        raise ConfigError(refusal)
    if rev == target:
        return target
    before: str | None = None
    try:
        with _migration_lock(engine) as conn:
            names = set(inspect(conn).get_table_names())
            rev = current(conn) if "alembic_version" in names else None
            conn.commit()
            if rev is not None and rev not in order:  # a newer release upgraded it meanwhile
                raise ConfigError(f"the database moved to revision {rev} meanwhile: run it again")
            refusal = downgrade_refusal(rev, target, order)
            if refusal is not None:
                raise ConfigError(refusal)
            before = rev
            command.downgrade(_config(conn), target)
            conn.commit()
    except SQLAlchemyError as err:
        if before is None:
            raise
        try:
            now = state(engine)[0] or "none"
        except SQLAlchemyError:  # pragma: no cover - the database went away as well
            now = "unknown"
        raise DowngradeFailed(before, target, now, _cause(err)) from err
    return str(before)


def _refuse_tables_elsewhere(conn: Connection) -> None:
    """Raise ``ConfigError`` when PostgreSQL holds FleetMind's tables in a schema other than the
    one an empty schema would be created in (``current_schema()``, the first existing schema of
    the ``search_path``).

    Release 0.2.0 replaced the URL's libpq ``options`` with its own, so a URL with
    ``?options=-csearch_path%3Dapp`` wrote its tables to ``public``; later releases honour the
    ``search_path``, and found ``app`` empty: a new empty schema there would hide every incident,
    alert, feedback and owed notification without a word. Two FleetMind schemas in one database
    are not a supported layout either: the migration and incident-worker advisory locks are per
    database, so their workers would share one election. A schema counts when it holds
    ``incidents`` and an ``alerts`` table with FleetMind's columns ``fingerprint``, ``starts_ts``
    and ``pending`` (another application's ``alerts`` is not mistaken for ours; the catalogs list
    them whatever the role's privileges).
    Nothing is done on SQLite (one schema per file).
    """
    if conn.dialect.name != "postgresql":
        return
    here = conn.execute(text("SELECT current_schema()")).scalar()
    rows = conn.execute(
        text(
            "SELECT n.nspname FROM pg_catalog.pg_class c "
            "JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace "
            "JOIN pg_catalog.pg_attribute a ON a.attrelid = c.oid AND NOT a.attisdropped "
            "WHERE c.relkind IN ('r', 'p') AND n.nspname NOT IN ('pg_catalog', 'information_schema') "
            "AND n.nspname IS DISTINCT FROM current_schema() AND ("
            "(c.relname = 'alerts' AND a.attname IN ('fingerprint', 'starts_ts', 'pending')) "
            "OR (c.relname = 'incidents' AND a.attname = 'id')) "
            "GROUP BY n.nspname HAVING count(DISTINCT c.relname || '.' || a.attname) = 4 "
            "ORDER BY n.nspname"
        )
    ).all()
    conn.commit()
    if not rows:
        return
    found = ", ".join(str(r[0]) for r in rows)
    target = (
        f"the search_path schema {here}"
        if here
        else "no existing schema of the search_path ("
        + str(conn.execute(text("SHOW search_path")).scalar())
        + ")"
    )
    raise ConfigError(
        f"FleetMind tables found in schema {found}, not in {target}: nothing was created; move "
        f"them (ALTER TABLE {rows[0][0]}.<table> SET SCHEMA {here or '<schema>'}, for every "
        "table, alembic_version included) or drop the URL's search_path option "
        "(options=-csearch_path=...)"
    )


def _adopt_baseline(conn: Connection) -> None:
    """Give a pre-migration database the indexes of the baseline it may lack.

    Databases created before 2026-11 have ``ix_alerts_incident_id`` instead of the covering
    ``ix_alerts_incident``: it is built (concurrently on PostgreSQL); the old one is left.
    """
    have = {i["name"] for i in inspect(conn).get_indexes("alerts")}
    if "ix_alerts_incident" in have and not index_is_invalid(conn, "ix_alerts_incident"):
        return
    conn.commit()
    pg = conn.dialect.name == "postgresql"
    ddl = (
        "CREATE INDEX {}IF NOT EXISTS ix_alerts_incident ON alerts (incident_id, id, status)"
    ).format("CONCURRENTLY " if pg else "")
    if pg:  # CONCURRENTLY runs outside a transaction: its own autocommit connection
        with conn.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as auto:
            auto.execute(text("SET statement_timeout = 0"))
            drop_invalid_index(auto, "ix_alerts_incident")  # an earlier build interrupted
            auto.execute(text(ddl))
    else:
        conn.execute(text(ddl))
        conn.commit()


def index_is_invalid(conn: Connection, name: str) -> bool:
    """Whether PostgreSQL holds index ``name`` (in the search path) marked invalid; ``False`` when
    it holds none, and on SQLite.

    ``CREATE INDEX CONCURRENTLY`` records the index in a transaction of its own before building
    it; a build that stops part way (the process killed, a cancel, a lost connection, a failed
    build) leaves it invalid: not used by queries, yet updated by every write, and
    ``CREATE INDEX ... IF NOT EXISTS`` skips it (PostgreSQL docs, ``CREATE INDEX``, "Building
    Indexes Concurrently": drop it and build it again).
    """
    if conn.dialect.name != "postgresql":
        return False
    row = conn.execute(
        text("SELECT indisvalid FROM pg_index WHERE indexrelid = to_regclass(:name)"),
        {"name": name},
    ).first()
    return row is not None and not row[0]


def drop_invalid_index(conn: Connection, name: str) -> bool:
    """Drop index ``name`` when it is invalid (:func:`index_is_invalid`), so that the ``CREATE
    INDEX CONCURRENTLY IF NOT EXISTS`` after it builds it again; returns whether it did.

    ``conn`` is in autocommit (``DROP INDEX CONCURRENTLY`` runs outside a transaction), and its
    process holds the migration lock: no other is building the index meanwhile (a build in
    progress is invalid too). ``name`` is one of the revisions' own index names, not user input.
    """
    if not index_is_invalid(conn, name):
        return False
    conn.execute(text(f'DROP INDEX CONCURRENTLY IF EXISTS "{name}"'))
    return True
