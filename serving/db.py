"""Persistence through SQLAlchemy 2 (Core): alerts and incidents.

SQLite is the default (a file in WAL mode; ``PRAGMA synchronous`` from the settings, ``FULL`` by
default so that a committed alert survives a crash or power loss); PostgreSQL is used when the URL says
so (``postgresql+psycopg://user@host:port/db``). Timestamps are stored twice: ``*_at`` as the
normalised ISO-8601 UTC text the alert carried (part of the idempotency key) and ``*_ts`` as float
seconds since the Unix epoch (for windows and ordering).

Tables:

* ``alerts``: one row per Alertmanager alert, unique on ``(fingerprint, starts_at)``; ``pending`` marks
  rows the incident worker has not processed yet (new alerts and status changes), so work survives a
  crash; ``incident_id`` is the incident the alert belongs to.
* ``incidents``: groups of alerts with the latest ranked root causes (JSON) and the analyzer that
  produced them.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from sqlalchemy import (
    JSON,
    Boolean,
    Column,
    Connection,
    Float,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    UniqueConstraint,
    create_engine,
    event,
    func,
    select,
    update,
)
from sqlalchemy.engine import Engine

from fleetmind.data.errors import ConfigError

metadata = MetaData()

alerts = Table(
    "alerts",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("fingerprint", String(128), nullable=False),
    Column("starts_at", String(40), nullable=False),
    Column("starts_ts", Float, nullable=False),
    Column("ends_ts", Float, nullable=True),
    Column("status", String(16), nullable=False),
    Column("alertname", String(256), nullable=True),
    Column("labels", JSON, nullable=False),
    Column("annotations", JSON, nullable=False),
    Column("generator_url", Text, nullable=True),
    Column("node", String(512), nullable=True),
    Column("received_ts", Float, nullable=False),
    Column("updated_ts", Float, nullable=False),
    Column("pending", Boolean, nullable=False, default=True, index=True),
    Column("incident_id", Integer, nullable=True),
    UniqueConstraint("fingerprint", "starts_at", name="uq_alert_fingerprint_starts"),
    # One index for every query by incident: the worker's per-incident counts (total and firing)
    # read it alone (covering), and an incident's newest alerts (ORDER BY id DESC LIMIT) walk it
    # backwards without sorting the whole incident. Databases created before commit 882a113 have
    # ``ix_alerts_incident_id`` instead; ``Database.create_all`` adds this one to them.
    Index("ix_alerts_incident", "incident_id", "id", "status"),
)

incidents = Table(
    "incidents",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("status", String(16), nullable=False, index=True),  # open | resolved | merged
    Column("opened_ts", Float, nullable=False),
    Column("updated_ts", Float, nullable=False),
    Column("closed_ts", Float, nullable=True),
    Column("first_alert_ts", Float, nullable=False),
    Column("last_alert_ts", Float, nullable=False),
    Column("alert_count", Integer, nullable=False, default=0),
    Column("firing_count", Integer, nullable=False, default=0),
    Column("nodes", JSON, nullable=False),
    Column("clusters", JSON, nullable=False),
    Column("causes", JSON, nullable=False),
    Column("method", String(128), nullable=True),
    Column("model_version", String(256), nullable=True),
    Column("rca_ts", Float, nullable=True),
    Column("merged_into", Integer, nullable=True),
)


_SQLITE_UPSERT = (
    "INSERT INTO alerts (fingerprint, starts_at, starts_ts, ends_ts, status, alertname, labels, "
    "annotations, generator_url, node, received_ts, updated_ts, pending, incident_id) "
    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) "
    "ON CONFLICT (fingerprint, starts_at) DO UPDATE SET status = excluded.status, "
    "ends_ts = excluded.ends_ts, annotations = excluded.annotations, "
    "updated_ts = excluded.updated_ts, pending = 1 WHERE alerts.status != excluded.status"
)


class Database:
    """Engine plus the few queries the service needs.

    Writes on SQLite go through one in-process lock (SQLite allows one writer; the lock avoids
    ``database is locked`` retries between threads); other processes wait on ``busy_timeout``.

    Args:
        url: SQLAlchemy database URL.
        sqlite_synchronous: ``PRAGMA synchronous`` for SQLite.
    """

    def __init__(self, url: str, sqlite_synchronous: str = "FULL") -> None:
        self.url = url
        try:
            if url.startswith("sqlite"):
                self.engine: Engine = create_engine(url, connect_args={"check_same_thread": False})
                _sqlite_pragmas(self.engine, sqlite_synchronous)
            else:
                self.engine = create_engine(url, pool_pre_ping=True, pool_size=10, max_overflow=20)
        except Exception as err:  # bad URL, missing driver
            raise ConfigError(f"cannot use database URL {url!r}: {err}") from None
        self.is_sqlite = self.engine.dialect.name == "sqlite"
        self._write_lock = threading.Lock() if self.is_sqlite else None
        self._upsert: Any = None
        # SQLite has one writer and pays an fsync per commit: concurrent webhooks share commits.
        self._group = _GroupCommit(self._store_now) if self.is_sqlite else None

    def create_all(self) -> None:
        """Create the tables when missing (tolerates replicas creating them at the same time).

        Raises:
            ConfigError: the database cannot be reached or written (no server at the URL, a
                SQLite file in a missing folder, wrong credentials), after three tries.
        """
        from sqlalchemy.exc import IntegrityError, OperationalError, ProgrammingError

        for attempt in range(3):
            try:
                metadata.create_all(self.engine)
                for index in alerts.indexes:  # an existing table gets indexes added since
                    index.create(self.engine, checkfirst=True)
                return
            except (OperationalError, ProgrammingError, IntegrityError) as err:
                if attempt == 2:
                    reason = str(getattr(err, "orig", None) or err).strip().splitlines()[0]
                    raise ConfigError(
                        f"cannot open the database at {self.engine.url!r}: {reason}"
                    ) from err
                time.sleep(0.2 * (attempt + 1))  # another process created them meanwhile

    def dispose(self) -> None:
        self.engine.dispose()

    @contextmanager
    def write(self) -> Iterator[Connection]:
        """A write transaction (committed on exit, rolled back on error)."""
        if self._write_lock is None:
            with self.engine.begin() as conn:
                yield conn
            return
        with self._write_lock, self.engine.begin() as conn:
            yield conn

    @contextmanager
    def read(self) -> Iterator[Connection]:
        with self.engine.connect() as conn:
            yield conn

    def ping(self) -> None:
        """Raise when the database cannot be reached."""
        with self.read() as conn:
            conn.execute(select(1)).scalar_one()

    # ------------------------------------------------------------------ alerts
    def store_alerts(self, rows: Sequence[dict[str, Any]]) -> None:
        """Insert alerts; an existing ``(fingerprint, starts_at)`` only changes when its status does.

        Returns after the transaction committed (durable per the SQLite synchronous setting or the
        PostgreSQL commit).
        """
        if not rows:
            return
        if self._group is not None:
            self._group.submit(list(rows))
        else:
            self._store_now(list(rows))

    def _store_now(self, rows: list[dict[str, Any]]) -> None:
        if self.is_sqlite:
            # The DBAPI directly: SQLAlchemy's per-row parameter processing costs about as much as
            # the fsync for a webhook of 50 alerts. Same statement as _build_upsert.
            params = [
                (
                    r["fingerprint"],
                    r["starts_at"],
                    r["starts_ts"],
                    r["ends_ts"],
                    r["status"],
                    r["alertname"],
                    json.dumps(r["labels"]),
                    json.dumps(r["annotations"]),
                    r["generator_url"],
                    r["node"],
                    r["received_ts"],
                    r["updated_ts"],
                    1 if r["pending"] else 0,
                    r["incident_id"],
                )
                for r in rows
            ]
            with self.write() as conn:
                conn.exec_driver_sql(_SQLITE_UPSERT, params)
            return
        stmt = self._upsert
        if stmt is None:
            stmt = self._upsert = self._build_upsert()
        with self.write() as conn:
            conn.execute(stmt, rows)

    def _build_upsert(self) -> Any:
        if self.is_sqlite:
            from sqlalchemy.dialects.sqlite import insert
        else:
            from sqlalchemy.dialects.postgresql import insert
        stmt = insert(alerts)
        ex = stmt.excluded
        return stmt.on_conflict_do_update(
            index_elements=["fingerprint", "starts_at"],
            set_={
                "status": ex.status,
                "ends_ts": ex.ends_ts,
                "annotations": ex.annotations,
                "updated_ts": ex.updated_ts,
                "pending": True,
            },
            where=alerts.c.status != ex.status,
        )

    def count_alerts(self, status: str | None = None) -> int:
        q = select(func.count()).select_from(alerts)
        if status:
            q = q.where(alerts.c.status == status)
        with self.read() as conn:
            return int(conn.execute(q).scalar_one())

    def list_alerts(
        self,
        status: str | None = None,
        incident_id: int | None = None,
        limit: int = 100,
        offset: int = 0,
    ) -> list[dict[str, Any]]:
        q = select(alerts).order_by(alerts.c.id)
        if status:
            q = q.where(alerts.c.status == status)
        if incident_id is not None:
            q = q.where(alerts.c.incident_id == incident_id)
        q = q.limit(limit).offset(offset)
        with self.read() as conn:
            return [dict(r._mapping) for r in conn.execute(q)]

    def pending_alerts(self, limit: int = 5000) -> list[dict[str, Any]]:
        """The oldest ``limit`` pending alerts, with the columns grouping reads (``id``,
        ``updated_ts``, ``status``, ``labels``, ``node``, ``incident_id``, ``starts_ts``): not
        the annotations, whose JSON decoding was a third of reading a backlog."""
        c = alerts.c
        q = (
            select(c.id, c.updated_ts, c.status, c.labels, c.node, c.incident_id, c.starts_ts)
            .where(c.pending.is_(True))
            .order_by(c.id)
            .limit(limit)
        )
        with self.read() as conn:
            return [dict(r._mapping) for r in conn.execute(q)]

    # ------------------------------------------------------------------ incidents
    def list_incidents(
        self, status: str | None = "open", limit: int = 100, offset: int = 0
    ) -> list[dict[str, Any]]:
        q = select(incidents).order_by(incidents.c.id.desc())
        if status:
            q = q.where(incidents.c.status == status)
        q = q.limit(limit).offset(offset)
        with self.read() as conn:
            return [dict(r._mapping) for r in conn.execute(q)]

    def get_incident(self, incident_id: int) -> dict[str, Any] | None:
        with self.read() as conn:
            row = conn.execute(select(incidents).where(incidents.c.id == incident_id)).first()
        return None if row is None else dict(row._mapping)

    def count_incidents(self, status: str = "open") -> int:
        q = select(func.count()).select_from(incidents).where(incidents.c.status == status)
        with self.read() as conn:
            return int(conn.execute(q).scalar_one())

    def incident_alerts(
        self, conn: Connection, incident_id: int, limit: int | None = None
    ) -> list[dict[str, Any]]:
        """The alerts of an incident, oldest first (the newest ``limit`` when given)."""
        q = select(alerts).where(alerts.c.incident_id == incident_id)
        if limit is None:
            return [dict(r._mapping) for r in conn.execute(q.order_by(alerts.c.id))]
        q = q.order_by(alerts.c.id.desc()).limit(limit)
        return [dict(r._mapping) for r in conn.execute(q)][::-1]

    def set_incident_rca(
        self, incident_id: int, causes: list[dict[str, Any]], method: str, version: str | None
    ) -> None:
        with self.write() as conn:
            conn.execute(
                update(incidents)
                .where(incidents.c.id == incident_id)
                .values(causes=causes, method=method, model_version=version, rca_ts=time.time())
            )


def _sqlite_pragmas(engine: Engine, synchronous: str) -> None:
    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn: Any, _record: Any) -> None:  # pragma: no cover - driver callback
        cur = dbapi_conn.cursor()
        cur.execute("PRAGMA journal_mode=WAL")
        cur.execute(f"PRAGMA synchronous={synchronous}")
        cur.execute("PRAGMA busy_timeout=30000")
        cur.close()


class _Item:
    __slots__ = ("rows", "done", "error")

    def __init__(self, rows: list[dict[str, Any]]) -> None:
        self.rows = rows
        self.done = False
        self.error: BaseException | None = None


class _GroupCommit:
    """Group commit (leader/follower): writes that arrive while a commit runs are committed together
    in the next transaction; each caller returns only after the transaction holding its rows
    committed. A failing group is retried one write at a time so that one bad write fails alone.
    """

    def __init__(self, store: Any) -> None:
        self._store = store
        self._cv = threading.Condition()
        self._queue: list[_Item] = []
        self._busy = False

    def submit(self, rows: list[dict[str, Any]]) -> None:
        item = _Item(rows)
        with self._cv:
            self._queue.append(item)
            while not item.done and self._busy:
                self._cv.wait()
            if item.done:
                if item.error is not None:
                    raise item.error
                return
            self._busy = True  # this thread commits the queue (its own rows included)
            batch, self._queue = self._queue, []
        try:
            self._commit(batch)
        finally:
            with self._cv:
                self._busy = False
                self._cv.notify_all()
        if item.error is not None:
            raise item.error

    def _commit(self, batch: list[_Item]) -> None:
        merged: dict[tuple[str, str], dict[str, Any]] = {}
        for it in batch:
            for r in it.rows:
                merged[(r["fingerprint"], r["starts_at"])] = r  # later writes win, as in sequence
        try:
            self._store(list(merged.values()))
        except Exception:
            for it in batch:
                try:
                    self._store(it.rows)
                except Exception as err:
                    it.error = err
        for it in batch:
            it.done = True


class LeaderLock:
    """Which process runs the incident worker: one holder per database, others wait.

    SQLite: an exclusive ``flock`` on ``<database file>.worker.lock`` (every process of this host);
    PostgreSQL: a session advisory lock (``pg_try_advisory_lock``) on a connection held open, so any
    number of replicas can run and exactly one groups alerts; if it dies, another takes over.
    """

    PG_KEY = 0x464C4D44  # "FLMD"

    def __init__(self, db: Database) -> None:
        self.db = db
        self._fd: int | None = None
        self._conn: Connection | None = None
        self.held = False

    def acquire(self) -> bool:
        if self.held:
            return True
        if self.db.is_sqlite:
            path = self.db.engine.url.database
            if not path or path == ":memory:":
                self.held = True
                return True
            import fcntl
            import os

            fd = os.open(path + ".worker.lock", os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                os.close(fd)
                return False
            self._fd = fd
            self.held = True
            return True
        from sqlalchemy import text

        conn = self.db.engine.connect().execution_options(isolation_level="AUTOCOMMIT")
        got = bool(
            conn.execute(text("SELECT pg_try_advisory_lock(:k)"), {"k": self.PG_KEY}).scalar()
        )
        if got:
            self._conn = conn
            self.held = True
        else:
            conn.close()
        return got

    def release(self) -> None:
        if self._fd is not None:
            import os

            os.close(self._fd)  # closing drops the flock
            self._fd = None
        if self._conn is not None:
            try:
                from sqlalchemy import text

                self._conn.execute(text("SELECT pg_advisory_unlock(:k)"), {"k": self.PG_KEY})
                self._conn.invalidate()  # do not return a lock-holding session to the pool
                self._conn.close()
            except Exception:  # pragma: no cover - connection already gone
                pass
            self._conn = None
        self.held = False
