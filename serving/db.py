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
* ``incident_feedback`` and ``feedback_graphs``: root causes engineers confirmed or corrected, with
  the alerts and graph they were given on (:mod:`fleetmind.serving.feedback`).
* ``notifications``: which root causes went to Alertmanager and the webhook (:mod:`fleetmind.serving.notify`).
* ``ui_sessions``: signed-in browsers of ``/ui`` (:mod:`fleetmind.serving.ui.auth`), keyed by a hash of
  the session cookie.
* ``model_reloads``: one row, the service's model reload generation (``POST /api/v1/models/reload``
  on any worker or replica), which every process follows (:mod:`fleetmind.serving.registry`).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any
from urllib.parse import unquote

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
    case,
    create_engine,
    event,
    false,
    func,
    literal_column,
    select,
    update,
)
from sqlalchemy.engine import URL, Engine, make_url
from sqlalchemy.exc import ArgumentError

from fleetmind.data.errors import ConfigError
from fleetmind.redact import safe_uri
from fleetmind.serving import migrations
from fleetmind.serving.settings import database_url_problem

log = logging.getLogger("fleetmind.serving")

metadata = MetaData()

alerts = Table(
    "alerts",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("fingerprint", Text, nullable=False),
    Column("starts_at", String(40), nullable=False),
    Column("starts_ts", Float, nullable=False),
    Column("ends_ts", Float, nullable=True),
    Column("status", String(16), nullable=False),
    Column("alertname", Text, nullable=True),
    Column("labels", JSON, nullable=False),
    Column("annotations", JSON, nullable=False),
    Column("generator_url", Text, nullable=True),
    Column("node", Text, nullable=True),
    Column("received_ts", Float, nullable=False),  # the latest delivery (re-sends included)
    Column("updated_ts", Float, nullable=False),
    Column("pending", Boolean, nullable=False, default=True, index=True),
    Column("incident_id", Integer, nullable=True),
    UniqueConstraint("fingerprint", "starts_at", name="uq_alert_fingerprint_starts"),
    # One index for every query by incident: the worker's per-incident counts (total and firing)
    # read it alone (covering), and an incident's newest alerts (ORDER BY id DESC LIMIT) walk it
    # backwards without sorting the whole incident. Databases created before 2026-11 have
    # ``ix_alerts_incident_id`` instead; the migrations replace it (serving.migrations).
    Index("ix_alerts_incident", "incident_id", "id", "status"),
    # the oldest ungrouped alert (grouping lag) and retention
    Index("ix_alerts_pending_updated", "pending", "updated_ts"),
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
    # set with every change of the incident, cleared when a ranking of that state is stored
    Column("needs_ranking", Boolean, nullable=False, default=False, server_default=false()),
    # the resolved incidents that closed recently, which an alert resolved before it was grouped
    # may join (serving.incidents.store.resolved_near), without reading every one kept
    # (migration 0010)
    Index("ix_incidents_status_closed", "status", "closed_ts"),
)

# Capacity held for pods by the scheduler extender and reserve=true placements, shared by replicas
# (serving/scheduler/reservations.py; migration 0004).
reservations = Table(
    "reservations",
    metadata,
    # <cluster>/<namespace>/<name> for pods (reservations.stored_key; rows of 0.2.0 and earlier:
    # <namespace>/<name>), placement:<job id> for reserve=true placements
    Column("pod_key", String(320), primary_key=True),
    Column("pod_uid", String(128), nullable=True),
    Column("cluster", String(256), nullable=False),
    Column("node", String(256), nullable=False),
    Column("gpus", JSON, nullable=False),
    Column("gpu_milli", Integer, nullable=False),
    Column("cpu_milli", Integer, nullable=False),
    Column("memory_mib", Integer, nullable=False),
    Column("created_ts", Float, nullable=False),
    Column("expires_ts", Float, nullable=False),  # a few hundred live rows: no index
    Column("bound_ts", Float, nullable=True),
    # the held pod's spec.priority, recorded only for pods whose whole request kube-scheduler
    # counts (NULL: none; such a hold is never left out for a preemptor; migration 0011)
    Column("pod_priority", Integer, nullable=True),
)


# Operator tables (revision 0003): feedback labels (serving.feedback) and root-cause notifications
# (serving.notify).
incident_feedback = Table(
    "incident_feedback",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("incident_id", Integer, nullable=False),
    Column("root_cause", Text, nullable=False),
    Column("fault_type", String(128), nullable=True),
    Column("by", String(256), nullable=False),
    Column("note", Text, nullable=True),
    Column("created_ts", Float, nullable=False),
    Column("model_top", Text, nullable=True),  # the model's top cause when the feedback came
    Column("model_rank", Integer, nullable=True),  # its rank of root_cause (1 = top; null: absent)
    Column("method", String(128), nullable=True),
    Column("model_version", String(256), nullable=True),
    Column("graph_digest", String(64), nullable=False),
    Column("alerts", JSON, nullable=False),
    # an incident's feedback, and the highest incident id named (a new SQLite incident's id is
    # chosen past it: serving.incidents.store) without reading every row (migration 0009)
    Index("ix_incident_feedback_incident", "incident_id"),
)

feedback_graphs = Table(
    "feedback_graphs",
    metadata,
    Column("digest", String(64), primary_key=True),
    Column("name", String(256), nullable=False),
    Column("graph", JSON, nullable=False),
)

notifications = Table(
    "notifications",
    metadata,
    Column("incident_id", Integer, primary_key=True, autoincrement=False),
    Column("state", String(16), nullable=False),  # firing | resolved
    Column("cause_node", Text, nullable=False),
    Column("labels", JSON, nullable=False),
    Column("annotations", JSON, nullable=False),
    Column("starts_at", String(40), nullable=False),
    Column("ends_at", String(40), nullable=True),
    Column("am_sent_ts", Float, nullable=True),  # last delivery to Alertmanager of this state
    Column("hook_sent", Boolean, nullable=False, default=False),  # webhook got this state
    # the firing message's fate per channel, kept when the row resolves (migration 0006)
    Column("delivery", JSON, nullable=True),
    Column("updated_ts", Float, nullable=False),
)

NOTIFICATION_OWED = (
    (notifications.c.state == "firing")
    | notifications.c.am_sent_ts.is_(None)
    | notifications.c.hook_sent.is_(False)
)
"""The ``notifications`` rows the notifier still has work on (a firing cause, a resolution not
delivered everywhere), which its every-second poll reads (:mod:`fleetmind.serving.notify`); the
others are done with, and :meth:`Database.purge` deletes them once their incident is gone."""

# Only the owed rows (migration 0009): the poll reads this partial index, not every row kept.
Index(
    "ix_notifications_owed",
    notifications.c.incident_id,
    sqlite_where=NOTIFICATION_OWED,
    postgresql_where=NOTIFICATION_OWED,
)

# Browser sessions of /ui (serving.ui.auth; migration 0005): a row per login, deleted at logout.
ui_sessions = Table(
    "ui_sessions",
    metadata,
    Column("key", String(64), primary_key=True),  # SHA-256 (hex) of the session cookie
    Column("token_digest", String(64), nullable=False),  # which token logged in (its digest)
    Column("scopes", String(64), nullable=False),  # "admin-read", sorted, '-'-joined
    Column("csrf", String(64), nullable=False),  # the CSRF token of this session's forms
    Column("created_ts", Float, nullable=False),
    Column("expires_ts", Float, nullable=False),
)

# The model reload generation every worker and replica follows (serving.registry; migration 0007):
# one row (id 1), written by POST /api/v1/models/reload.
model_reloads = Table(
    "model_reloads",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=False),
    Column("generation", Integer, nullable=False),  # +1 per reload request
    Column("requested_ts", Float, nullable=False),  # Unix s of the latest request
    # the registry URIs the requesting process resolved, for the others to load (migration 0008):
    # {"generation": the generation they belong to, kind: {"ref": configured reference,
    # "pinned": "models:/<name>/<version>"}}; null: none (request_model_reload)
    Column("pins", JSON, nullable=True),
)

PURGE_CHUNK_ROWS = 5_000
"""Rows :meth:`Database.purge` deletes per transaction: each holds the write lock (SQLite: the
whole database's) for milliseconds, so the webhook and the other workers' extender calls go on
between them (one transaction for 370,000 alerts held it 3 s)."""


INPUT_SQLSTATE_CLASSES = ("22", "23")
"""SQLSTATE classes of a database refusing a value: 22 (data exception: too long, out of range,
invalid text) and 23 (integrity constraint violation). PostgreSQL, Appendix A "PostgreSQL Error
Codes"; psycopg raises ``DataError`` and ``IntegrityError`` for them (``psycopg.errors``)."""

SERIAL_TABLES = tuple(t.name for t in metadata.sorted_tables if t.autoincrement_column is not None)
"""The tables whose ``id`` the database generates (a PostgreSQL sequence, ``serial``): ``alerts``,
``incident_feedback`` and ``incidents``. A unique violation of their primary key (``<table>_pkey``)
is never the client's: the sequence is behind the rows (:func:`behind_sequence`)."""

BEHIND_REPORT_EVERY_S = 600.0
"""Least seconds between two ERROR lines of :func:`report_behind` about one table: one line when
its inserts start failing, a reminder while they go on, and a new line when the table falls behind
again after a repair (at most this long after the previous line)."""

_REPORTED_BEHIND: dict[str, float] = {}  # table -> time.monotonic() of its last setval line
_REPORTED_LOCK = threading.Lock()  # the webhook's threads and the incident worker report


def setval_statement(table: str) -> str:
    """The statement that moves ``table``'s id sequence past its rows (PostgreSQL)."""
    return f"SELECT setval(pg_get_serial_sequence('{table}','id'), (SELECT max(id) FROM {table}));"


def behind_sequence(exc: BaseException) -> str | None:
    """The table (of :data:`SERIAL_TABLES`) when ``exc`` is PostgreSQL refusing a new row because
    the id its sequence gave is taken (SQLSTATE 23505 on ``<table>_pkey``), else ``None``.

    PostgreSQL's logical replication does not replicate sequence data (PostgreSQL docs, "Logical
    Replication Restrictions"), and rows copied with explicit ids (from SQLite, another database)
    leave the sequence where it was: every insert then fails until the sequence is set past the
    rows. That is an outage of the server, not a bad value of the request: Alertmanager must
    retry (503), not lose the alert (200 with it rejected)."""
    from sqlalchemy.exc import DBAPIError

    orig = getattr(exc, "orig", None) if isinstance(exc, DBAPIError) else None
    if getattr(orig, "sqlstate", None) != "23505":
        return None
    constraint = getattr(getattr(orig, "diag", None), "constraint_name", None)
    return next((t for t in SERIAL_TABLES if constraint == f"{t}_pkey"), None)


def report_behind(exc: BaseException) -> bool:
    """Whether ``exc`` is a duplicate generated id (:func:`behind_sequence`, an outage); if so,
    log the ``setval`` that repairs it at ERROR, at most once per table every
    :data:`BEHIND_REPORT_EVERY_S` seconds. Every path that writes such a table calls it with its
    failures: the webhook and the API (through :func:`is_input_error`), the incident worker."""
    table = behind_sequence(exc)
    if table is None:
        return False
    now = time.monotonic()
    with _REPORTED_LOCK:
        last = _REPORTED_BEHIND.get(table)
        due = last is None or not 0 <= now - last < BEHIND_REPORT_EVERY_S
        if due:
            _REPORTED_BEHIND[table] = now
    if due:
        log.error("%s", sequence_behind_message([(table, None, None)]))
    return True


def is_input_error(exc: BaseException) -> bool:
    """Whether a SQLAlchemy error is the database refusing a value (a string longer than its
    column, a NUL, a number out of range, a broken constraint: SQLSTATE classes 22 and 23), or a
    value that could not even be sent (a parameter SQLAlchemy could not convert), as opposed to the
    database being unreachable, read-only or failing (every other error: an outage, 503).

    A duplicate generated id (:func:`behind_sequence`) is an outage too, logged at ERROR with the
    statement that repairs it (:func:`report_behind`).

    ``sqlalchemy.exc.StatementError`` alone says nothing: every DBAPI error (``OperationalError``,
    ``InternalError`` such as a read-only transaction, ``ProgrammingError``) subclasses it.
    """
    from sqlalchemy.exc import DataError, DBAPIError, IntegrityError, StatementError

    if isinstance(exc, DBAPIError):
        if report_behind(exc):
            return False
        state = getattr(exc.orig, "sqlstate", None)  # psycopg; None for client-side errors
        if isinstance(state, str) and len(state) == 5:
            return state[:2] in INPUT_SQLSTATE_CLASSES
        return isinstance(exc, DataError | IntegrityError)  # sqlite3, psycopg client-side
    if isinstance(exc, StatementError):  # raised before the database saw the statement
        return isinstance(exc.orig, ValueError | TypeError)  # UnicodeError is a ValueError
    return False


def sequence_behind_message(behind: Sequence[tuple[str, int | None, int | None]]) -> str:
    """One line: the tables whose id sequence is behind their rows, and the statements to run.

    Args:
        behind: ``(table, next id the sequence gives, highest id stored)`` per table (the ids
            ``None`` where unknown: a refused insert).
    """
    names = ", ".join(
        f"{t} (next id {n}, highest stored {m})" if n is not None else t for t, n, m in behind
    )
    plural = "s" if len(behind) > 1 else ""
    return (
        f"the PostgreSQL id sequence of table{plural} {names} is behind the table's rows, so new "
        "rows are refused (a logical-replication cutover or rows copied from another database "
        "leave sequences behind): run " + " ".join(setval_statement(t) for t, _, _ in behind)
    )


def check_sequences(engine: Engine) -> None:
    """Raise ``ConfigError`` (one line naming each ``setval`` to run, :func:`setval_statement`)
    when the id sequence of a :data:`SERIAL_TABLES` table on PostgreSQL would hand out an id
    already stored; nothing on SQLite (its next id is the largest plus one).

    Not repaired here: a database whose sequences are behind is not the one this service wrote
    (a logical-replication subscriber, possibly still receiving rows; a copy; a partial restore),
    which its operator should know of; and a ``setval`` computed from ``max(id)`` races with a
    replica inserting meanwhile (it can move the sequence back onto an id just taken) unless the
    table is locked. A sequence this process cannot read (no ``SELECT`` on it) is not checked.
    """
    from sqlalchemy import text
    from sqlalchemy.exc import DBAPIError

    if engine.dialect.name != "postgresql":
        return
    behind: list[tuple[str, int | None, int | None]] = []
    with engine.connect() as conn:
        for table in SERIAL_TABLES:
            seq = conn.execute(
                text("SELECT pg_get_serial_sequence(:t, 'id')"), {"t": table}
            ).scalar()
            if seq is None:
                continue
            try:  # the name is the server's own, quoted as needed
                last, called = conn.execute(text(f"SELECT last_value, is_called FROM {seq}")).one()
            except DBAPIError:
                conn.rollback()
                continue
            max_id = conn.execute(text(f"SELECT max(id) FROM {table}")).scalar()
            next_id = int(last) + 1 if called else int(last)
            if max_id is not None and next_id <= int(max_id):
                behind.append((table, next_id, int(max_id)))
    if behind:
        raise ConfigError(sequence_behind_message(behind))


class DatabaseReadOnly(Exception):
    """The database accepts no writes (a standby, ``default_transaction_read_only``, a SQLite
    file whose last write failed): not ready."""


def _file_gone(reason: str) -> Exception:
    """The ``sqlalchemy.exc.OperationalError`` raised for a SQLite file or write-ahead log
    deleted or replaced under the service (a 503 where database errors are handled)."""
    from sqlalchemy.exc import OperationalError

    return OperationalError("check the SQLite file", None, Exception(reason))


REFIRE_MARGIN_S = 15.0
"""Default of :class:`Database`'s ``refire_margin_s`` (``FLEETMIND_ALERT_REFIRE_MARGIN_S``)."""

CLOCK_STEP_S = 300.0
"""A firing delivery of a resolved alert received this long (s) *before* the stored resolution
was, on the service's clock, while that resolution lies this far in the future of the database's
clock, is newer than it: the clock stepped back since (see :data:`_UPSERT_RULE`)."""

NO_START = "unknown"
"""``starts_at`` of an alert sent without ``startsAt``: its key is its fingerprint alone, so every
retry of it is the same row (its ``starts_ts`` is when it was first received, or its ``endsAt``
when that is earlier, as Alertmanager's API starts such an alert)."""


def _db_now(is_sqlite: bool) -> Any:
    """The database's clock when the statement runs (unix s): not the delivery's ``received_ts``,
    which a request waiting for the write lock has taken long before (:data:`CLOCK_STEP_S`)."""
    if is_sqlite:
        return literal_column("CAST(strftime('%s', 'now') AS REAL)")
    return literal_column("EXTRACT(EPOCH FROM clock_timestamp())")


def _sqlite_changes(margin_s: float) -> str:
    """The status-change condition of :data:`_UPSERT_RULE` on SQLite (``alerts``: the stored
    row, ``excluded``: the delivery)."""
    return (
        f"(({_data_source_state_sql(True)} AND {_evidence_firing_sql(True)}) OR "
        "(alerts.status != excluded.status "
        "AND NOT (alerts.status = 'resolved' AND excluded.status = 'firing' "
        "AND NOT ((excluded.ends_ts IS NOT NULL AND alerts.ends_ts IS NOT NULL "
        "AND excluded.ends_ts > alerts.ends_ts) "
        f"OR excluded.received_ts > alerts.updated_ts + {float(margin_s)!r} "
        f"OR (excluded.received_ts < alerts.updated_ts - {CLOCK_STEP_S!r} "
        f"AND alerts.updated_ts > CAST(strftime('%s', 'now') AS REAL) + {CLOCK_STEP_S!r})))))"
    )


def _sqlite_upsert(margin_s: float) -> str:
    """The webhook's upsert on SQLite (the same rule as :meth:`Database._build_upsert`)."""
    changes = _sqlite_changes(margin_s)
    return (
        "INSERT INTO alerts (fingerprint, starts_at, starts_ts, ends_ts, status, alertname, labels, "
        "annotations, generator_url, node, received_ts, updated_ts, pending, incident_id) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) "
        "ON CONFLICT (fingerprint, starts_at) DO UPDATE SET received_ts = excluded.received_ts, "
        + ", ".join(
            f"{col} = CASE WHEN {changes} THEN {new} ELSE alerts.{col} END"
            for col, new in (
                ("status", "excluded.status"),
                ("ends_ts", "excluded.ends_ts"),
                ("annotations", "excluded.annotations"),
                ("updated_ts", "excluded.updated_ts"),
                (
                    "pending",
                    f"CASE WHEN {_data_source_state_sql(True)} "
                    "AND excluded.status = 'resolved' THEN 0 ELSE 1 END",
                ),
            )
        )
    )


def _state_reason_sql(is_sqlite: bool, row: str) -> str:
    """SQL of the ``grafana_state_reason`` annotation of ``row`` (``alerts``: the stored alert,
    ``excluded``: the delivery) as it is compared: trimmed of spaces and lower-cased, the rule of
    :func:`fleetmind.serving.incidents.manager.is_data_source_state`; NULL when absent."""
    if is_sqlite:
        return f"lower(trim(json_extract({row}.annotations, '$.grafana_state_reason')))"
    return f"lower(trim({row}.annotations ->> 'grafana_state_reason'))"


def _data_source_state_sql(is_sqlite: bool, row: str = "alerts") -> str:
    """SQL condition: the stored alert (``row``: ``alerts`` or an alias of it) fires in no incident because Grafana fired it
    on a failed or empty query (``grafana_state_reason`` ``Error``/``NoData``,
    :data:`fleetmind.serving.incidents.manager.DATA_SOURCE_REASONS`), which the incident worker
    leaves out of grouping, whether or not it has run since. Its resolution, whose annotations no
    longer say so, is stored without making it ``pending``, so that it is never grouped as an
    alert that resolved before it was grouped; a delivery of it firing on data
    (:func:`_evidence_firing_sql`) makes it ``pending`` with the delivery's annotations.

    Plain SQL for the upsert (both databases) and :data:`_RESOLVE_EARLIER`; literal values, not
    ``IN`` with parameters (an expanding parameter, which the webhook's executemany refuses)."""
    return (
        f"({row}.status = 'firing' AND {row}.incident_id IS NULL "
        f"AND {_state_reason_sql(is_sqlite, row)} IN ('error', 'nodata'))"
    )


def _evidence_firing_sql(is_sqlite: bool) -> str:
    """SQL condition: the delivery (``excluded``) fires without an ``Error``/``NoData``
    ``grafana_state_reason``. Grafana keeps an alert's ``StartsAt`` when its rule goes from firing
    on a failed query to firing on data, and clears the reason (grafana/grafana
    ``pkg/services/ngalert/state/state.go``: ``resultAlerting`` only ``Maintain``s an Alerting
    state; the state's ``StateReason`` is reset to "" for an Alerting result): the same row,
    whose status does not change, now fires on evidence."""
    reason = _state_reason_sql(is_sqlite, "excluded")
    return f"(excluded.status = 'firing' AND coalesce({reason}, '') NOT IN ('error', 'nodata'))"


_UPSERT_RULE = """How a delivery changes a stored alert (both databases; :func:`_sqlite_upsert`,
:meth:`Database._build_upsert`).

Every delivery sets ``received_ts`` (the latest delivery: Alertmanager re-sends a firing alert
every ``repeat_interval``, which is how auto-resolve knows it still fires). Otherwise a stored alert
changes only when its status does (then ``updated_ts`` is when that delivery was received, and the
row is ``pending`` again for the incident worker), or when an alert stored as firing on a failed or
empty query (:func:`_data_source_state_sql`) is delivered firing on data
(:func:`_evidence_firing_sql`): it takes that delivery's annotations and is grouped. The
resolution of such an alert changes it without making it ``pending``.

A ``firing`` delivery of a ``resolved`` alert (same fingerprint and ``startsAt``) reopens it when
it is newer than the resolution, by either sign:

* it is received more than ``refire_margin_s`` after the resolution was (the stored
  ``updated_ts``), on the service's own clock. Alertmanager's webhook carries no other sign: it
  clears ``endsAt`` of every alert not yet resolved when it flushes a group (prometheus/alertmanager
  ``dispatch/dispatch.go``, ``aggrGroup.flush``: "Ensure that alerts don't resolve as time move
  forwards"), so a firing alert always comes with ``endsAt`` 0001-01-01. And the same
  ``startsAt`` does fire again: Prometheus keeps an alert's ``activeAt`` while its rule stays
  active, so when its sends stop for longer than the ``endsAt`` it gave (a restart, a partition),
  Alertmanager resolves the alert and later reports it firing with the same ``startsAt``;
* its ``endsAt`` (a sender that renews it at each evaluation) lies after the stored resolution
  time;
* it is received more than :data:`CLOCK_STEP_S` *before* the resolution was, and the
  resolution lies more than :data:`CLOCK_STEP_S` in the future of the database's clock when the
  write runs: the host clock stepped back since the resolution was stored (it was ahead then),
  and every later delivery would otherwise look older than the resolution until the clock passed
  the bad time again (a re-fire ignored for as long as the clock was wrong). The notifier takes a
  timestamp in the future as the same sign (:mod:`fleetmind.serving.notify`). Both conditions
  are needed: a firing notification held up behind the resolution (a request that waited for
  the write lock, however long) has an old ``received_ts`` but finds the resolution in the past
  of the clock, and changes nothing.

A stale firing notification (computed before the resolution, delivered after it: the second peer
of an Alertmanager HA pair sends what it flushed ``--cluster.peer-timeout``, 15 s, later; two
webhook requests committing out of order) arrives within the margin and changes nothing. A
genuine re-fire that arrives within it is taken at Alertmanager's next re-send of the alert."""

HA_START_SKEW_S = 90.0
"""How much later than a firing alert of its fingerprint a firing delivery may start and still be
that alert (:data:`_ONTO_EARLIER`), in seconds: Prometheus HA replicas evaluate a rule each on its
own schedule, so their ``activeAt`` differ by at most one evaluation interval
(``evaluation_interval``: 1 m by default, 30 s in kube-prometheus-stack), and 90 s covers that
with room. A later start is another episode of the fingerprint: with ``send_resolved: false`` the
earlier one is never resolved, and must not swallow the episodes after it (nor be moved onto a late
delivery of it, :data:`_MOVE_START`). The window is kept short because a folded episode is lost: a
re-fire inside it whose earlier episode's resolve arrives late (out of order) is resolved with
it until Alertmanager sends it again."""

_COVER = (
    "FROM alerts r WHERE r.fingerprint = :fingerprint AND r.status = 'resolved' "
    f"AND r.starts_at <> :starts_at AND r.starts_at <> '{NO_START}' "
    "AND r.starts_ts <= :starts_ts AND r.ends_ts >= :starts_ts"
)
"""The resolved rows of a firing delivery's fingerprint whose ``[startsAt, endsAt]`` holds its
``startsAt`` (:data:`_STALE_FIRING`)."""
_COVERED = f"EXISTS (SELECT 1 {_COVER})"

_MOVE_START = (
    "UPDATE alerts SET starts_at = :starts_at, starts_ts = :starts_ts, received_ts = :received_ts, "
    "updated_ts = :updated_ts, pending = TRUE "
    "WHERE id = (SELECT a.id FROM alerts a WHERE a.fingerprint = :fingerprint "
    f"AND a.status = 'firing' AND a.starts_at <> '{NO_START}' AND a.starts_ts > :starts_ts "
    f"AND a.starts_ts <= :starts_ts + {HA_START_SKEW_S!r} "
    "ORDER BY a.starts_ts, a.id LIMIT 1) "
    "AND NOT EXISTS (SELECT 1 FROM alerts b WHERE b.fingerprint = :fingerprint "
    f"AND b.starts_at = :starts_at) AND NOT {_COVERED}"
)
"""A firing delivery moves the unresolved row of its fingerprint that starts later, by at most
:data:`HA_START_SKEW_S`, to its own, earlier ``startsAt`` (keeping the row's incident), instead of
a second row for the same alert. The moved row is ``pending`` again (``updated_ts``: this
delivery), so the incident worker widens its incident's alert span (``first_alert_ts``) to the
earlier start and groups later alerts by that span.

One alert reaches the webhook with two ``startsAt``: Alertmanager merges every alert it receives
with the one it holds for the fingerprint and keeps the earliest ``StartsAt`` (prometheus/alertmanager
``types.Alert.Merge``: "Always pick the earliest starting time"), so when Prometheus HA replicas
with different ``activeAt`` send the same alert, Alertmanager notifies it first with the later
replica's ``startsAt``, then with the earlier one's, and resolves it with that one only. When a row
with the earlier ``startsAt`` already exists, nothing moves (the unique key): the later row is
resolved with the alert (:data:`_RESOLVE_EARLIER`). Rows without ``startsAt`` are left alone.
The other order (the earlier ``startsAt`` stored first) is :data:`_ONTO_EARLIER`."""

_ONTO_EARLIER = """A firing delivery whose ``startsAt`` is later than that of a firing (unresolved) row of its
fingerprint, by less than :data:`HA_START_SKEW_S`, is a delivery of that row, stored as its
re-send (``received_ts``), not as a second row (:meth:`Database._onto_earlier_starts`).

The same alert sent to two Alertmanager HA peers under two ``startsAt`` (Prometheus replicas with
different ``activeAt``) is one alert: every peer merges what it receives and keeps the earliest
``StartsAt`` (prometheus/alertmanager ``types.Alert.Merge``: "Always pick the earliest starting
time"), so a peer that notifies the later ``startsAt`` after the earlier one was stored is behind,
not a new alert. The earliest stored firing row takes it. Left alone: a delivery whose own
``(fingerprint, startsAt)`` row exists (it updates that row), one whose ``startsAt`` a resolved row
covers (:data:`_STALE_FIRING`), and resolved rows: a fingerprint firing under a later ``startsAt``
after its previous alert resolved is a new alert."""

_RESOLVE_EARLIER = (
    "UPDATE alerts SET status = 'resolved', ends_ts = :ends_ts, updated_ts = :updated_ts, "
    "received_ts = :received_ts, pending = CASE WHEN {data_source_state} THEN FALSE ELSE TRUE END "
    "WHERE fingerprint = :fingerprint AND status = 'firing' AND starts_at <> :starts_at "
    f"AND starts_at <> '{NO_START}' AND starts_ts <= :resolved_until"
)
"""A resolved delivery also resolves every firing row of its fingerprint that started by its
``endsAt`` (the same alert under a ``startsAt`` Alertmanager has since merged to an earlier one,
see :data:`_MOVE_START`). A row that started after the resolution is a later episode and stays.
A row fired on a failed or empty query and left out of grouping (``{data_source_state}``,
:func:`_data_source_state_sql`, filled in per database) is not made ``pending``, as in the
upsert."""

_QUIET_RESOLUTION = (
    "UPDATE alerts SET pending = FALSE WHERE fingerprint = :fingerprint "
    "AND starts_at = :starts_at AND status = 'resolved' AND incident_id IS NULL AND pending "
    "AND EXISTS (SELECT 1 FROM alerts b WHERE b.fingerprint = :fingerprint "
    f"AND b.starts_at <> :starts_at AND b.starts_at <> '{NO_START}' "
    "AND b.starts_ts <= :resolved_until AND {data_source_state})"
)
"""Run before :data:`_RESOLVE_EARLIER`: a resolved delivery's own row, in no incident, is not
``pending`` when the firing row :data:`_RESOLVE_EARLIER` resolves with it is one fired on a failed
or empty query (``{data_source_state}``: :func:`_data_source_state_sql` of the row ``b``, filled in
per database). Both are the same alert (Alertmanager merged its ``StartsAt`` to the earliest,
:data:`_MOVE_START`), left out of grouping, whose resolution would otherwise open an incident of
its own as an alert resolved before it was grouped."""

_STALE_FIRING = (
    "UPDATE alerts SET status = 'resolved', "
    f"ends_ts = (SELECT r.ends_ts {_COVER} ORDER BY r.ends_ts DESC, r.id LIMIT 1), "
    "incident_id = COALESCE(alerts.incident_id, "
    f"(SELECT r.incident_id {_COVER} ORDER BY r.ends_ts DESC, r.id LIMIT 1)), pending = TRUE "
    f"WHERE fingerprint = :fingerprint AND starts_at = :starts_at AND status = 'firing' AND {_COVERED}"
)
"""A firing delivery whose ``startsAt`` lies within ``[startsAt, endsAt]`` of a resolved row of
its fingerprint is stored resolved, with that row's ``endsAt``: the resolved alert notified late
under another ``startsAt`` (an HA peer's notification from before Alertmanager merged the alert to
its earliest ``StartsAt``, ``types.Alert.Merge``), which :data:`_RESOLVE_EARLIER` would have
resolved had it been stored before the resolution. It joins that row's incident, which stays
resolved. The rule mirrors that one (a row started by the resolution's ``endsAt`` is the resolved
alert); a ``startsAt`` after the stored ``endsAt`` is a new episode and fires. The alert firing again keeps its ``startsAt`` (Alertmanager merges
overlapping alerts to the earliest one, and Prometheus keeps ``activeAt``): that is the same row,
reopened by :data:`_UPSERT_RULE`'s re-fire margin; and :data:`_MOVE_START` does not move a later
episode onto a ``startsAt`` such a row covers."""


_OWN_ROW_OR_COVERED = (
    "SELECT EXISTS (SELECT 1 FROM alerts b WHERE b.fingerprint = :fingerprint "
    f"AND b.starts_at = :starts_at) OR {_COVERED}"
)
"""Whether a firing delivery has a row of its own, or a resolved row covers its ``startsAt``: then
:data:`_ONTO_EARLIER` leaves it to the upsert and :data:`_STALE_FIRING`."""

_LAST_KNOWN_FIRING = case(
    (alerts.c.received_ts > alerts.c.starts_ts, alerts.c.received_ts), else_=alerts.c.starts_ts
)
"""The ``endsAt`` (unix s) :meth:`Database.auto_resolve` gives a firing alert whose resolution
never came: its latest delivery (``received_ts``), when it was last known firing, not the time of
the auto-resolution. :data:`_COVER` reads ``[startsAt, endsAt]`` as the span the alert fired, so an
``endsAt`` of the auto-resolution would store a new episode of the fingerprint that started in
between (held by ``group_wait``, a backlog, a Prometheus ``for:``) and arrives after it as
resolved, in the resolved incident, until Alertmanager re-sends it (``repeat_interval``). Never
before ``startsAt`` (a sender clock ahead of the service's): the span is then empty."""


class Database:
    """Engine plus the few queries the service needs.

    Writes on SQLite go through one in-process lock (SQLite allows one writer; the lock avoids
    ``database is locked`` retries between threads); other processes wait on ``busy_timeout``.

    Args:
        url: SQLAlchemy database URL.
        sqlite_synchronous: ``PRAGMA synchronous`` for SQLite.
        refire_margin_s: a firing delivery of a resolved alert reopens it when received more than
            this long after the resolution (``FLEETMIND_ALERT_REFIRE_MARGIN_S``; see
            :data:`_UPSERT_RULE`).
    """

    def __init__(
        self,
        url: str,
        sqlite_synchronous: str = "FULL",
        connect_timeout_s: float = 5.0,
        statement_timeout_s: float = 30.0,
        refire_margin_s: float = REFIRE_MARGIN_S,
    ) -> None:
        url = normalise_url(url)
        problem = database_url_problem(url)
        if problem is not None:  # before anything connects: the driver's error would quote it
            raise ConfigError(
                f"cannot use database URL (not quoted, as it holds a password): {problem}"
            )
        self.url = url
        if not 0 <= refire_margin_s < float("inf"):
            raise ConfigError(f"refire margin must be a finite number >= 0, not {refire_margin_s}")
        self.refire_margin_s = float(refire_margin_s)
        self._sqlite_upsert = _sqlite_upsert(self.refire_margin_s)
        try:
            if url.startswith("sqlite"):
                self.engine: Engine = create_engine(url, connect_args={"check_same_thread": False})
                _sqlite_pragmas(self.engine, sqlite_synchronous)
                event.listen(self.engine, "connect", self._conn_opened)
                event.listen(self.engine, "close", self._conn_closed)
                event.listen(self.engine, "close_detached", self._conn_closed)
            else:
                self.engine = create_engine(
                    url,
                    pool_pre_ping=True,
                    pool_size=10,
                    max_overflow=20,
                    pool_timeout=connect_timeout_s,
                    connect_args=pg_connect_args(url, connect_timeout_s, statement_timeout_s),
                )
                _pg_statement_timeout(self.engine, statement_timeout_s)
        except Exception as err:  # bad URL, missing driver
            raise ConfigError(_bad_url(url, err)) from None
        self.is_sqlite = self.engine.dialect.name == "sqlite"
        # the file itself, also for a URI-form URL (sqlite:///file:/srv/fm.db?uri=true)
        self._file = migrations.sqlite_path(self.engine.url) if self.is_sqlite else None
        self._file_id: tuple[int, int] | None = None  # (device, inode) of the file in use
        # the write-ahead log SQLite keeps next to the file's real path (it resolves symlinks)
        self._wal = os.path.realpath(self._file) + "-wal" if self._file is not None else None
        if self._file is not None and _sqlite_may_create(self.engine.url):
            event.listen(self.engine, "do_connect", self._create_private)
        self._wal_id: tuple[int, int] | None = None  # (device, inode) at the last commit
        self._wal_lost: str | None = None  # why the -wal in use was lost (sticky: restart)
        self._open_conns = 0  # SQLite connections of this engine now open
        self._conns_lock = threading.Lock()
        self._write_failure: str | None = None  # the last write's error, until one commits
        self._write_lock = threading.Lock() if self.is_sqlite else None
        self._upsert: Any = None
        # SQLite has one writer and pays an fsync per commit: concurrent webhooks share commits.
        self._group = _GroupCommit(self._store_now) if self.is_sqlite else None

    def migrate(self, apply: bool = True) -> str:
        """Bring the schema to this release's newest Alembic revision (:mod:`fleetmind.serving.migrations`).

        Args:
            apply: ``False``: change nothing, and refuse (``ConfigError``) unless the database is
                already at the newest revision (``FLEETMIND_MIGRATE_ON_START=false``).

        Returns:
            the revision the database was at (``"none"`` when empty, ``"create_all"`` when made by
            a release before migrations).

        Raises:
            ConfigError: the database cannot be reached or written (no server at the URL, a
                SQLite file in a missing folder, wrong credentials), is a PostgreSQL database not
                in ``UTF8`` (:func:`check_server_encoding`), has an id sequence behind its
                table's rows (:func:`check_sequences`), is at a revision this release
                does not know, or is behind while ``apply`` is false;
                :class:`~fleetmind.serving.migrations.UpgradeFailed` (a ``ConfigError``, "schema
                upgrade from X to Y failed at revision R: ...") when a revision failed: it was
                rolled back whole, the ones before it are kept, and the next start runs it again.
        """
        from sqlalchemy.exc import SQLAlchemyError

        self.refuse_in_memory()
        try:
            if not self.is_sqlite:
                with self.engine.connect() as conn:
                    check_server_encoding(conn, self.engine.url)
            if not apply:
                rev = migrations.check(self.engine)
                if rev != migrations.head():
                    raise ConfigError(
                        f"the database schema is at revision {rev or 'none'} and this release "
                        f"needs {migrations.head()}; FLEETMIND_MIGRATE_ON_START is false: start "
                        "one process with it true (the default) to upgrade, then restart the others"
                    )
                check_sequences(self.engine)
                return rev
            before = migrations.upgrade(self.engine)
            if not self.is_sqlite and before != migrations.head():
                # the upgrade ran on a pooled connection with statement_timeout 0 (an index build
                # may take long): drop it, so no request runs without the timeout
                self.engine.dispose()
            check_sequences(self.engine)
            self.check_file()  # the file exists now: remember which one it is
            return before
        except (SQLAlchemyError, OSError) as err:  # OSError: the SQLite lock file next to it
            raise ConfigError(open_error(self.engine.url, err)) from err

    def _create_private(self, *_args: Any) -> None:
        """Before SQLite opens the database file (``do_connect``), create it readable and
        writable by its owner alone (0600), whatever the umask, when it does not exist yet: it
        holds alerts, incidents, UI sessions and what the notifier still owes. SQLite gives the
        ``-wal`` and ``-shm`` beside it the same mode (``findCreateFileMode`` in ``os_unix.c``).
        An existing file keeps its mode. Only where SQLite itself would create the file
        (:func:`_sqlite_may_create`: not ``mode=rw`` or ``mode=ro``), and at the path a symlink
        points to (SQLite opens that; ``O_EXCL`` on a dangling symlink fails)."""
        if self._file is None:
            return
        path = os.path.realpath(self._file)
        try:
            os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
        except OSError:
            pass  # it exists (the usual case), or its folder does not (SQLite then says so)

    def refuse_in_memory(self) -> None:
        """Raise ``ConfigError`` for an in-memory SQLite URL (``sqlite://``, ``sqlite:///:memory:``).

        SQLAlchemy gives such a database one connection per thread (``SingletonThreadPool``), and
        each connection is a database of its own: the schema made at start-up was in none of the
        request threads' databases, so the service said it was ready and answered 503 to everything.
        """
        if not self.is_sqlite:
            return
        url = self.engine.url
        if (
            self._file is None
            or url.query.get("mode") == "memory"
            or "mode=memory" in (url.database or "")
        ):
            raise ConfigError(
                f"an in-memory SQLite database ({unquote(url.render_as_string(hide_password=True))}) is "
                "private to each connection and the service uses many: set "
                "FLEETMIND_DATABASE_URL to a file, e.g. sqlite:///fleetmind.db"
            )

    def create_all(self) -> None:
        """Create or upgrade the schema (:meth:`migrate`); kept for callers of release 0.2.0."""
        self.migrate()

    def dispose(self) -> None:
        self.engine.dispose()

    def check_file(self) -> None:
        """Raise ``sqlalchemy.exc.OperationalError`` when the SQLite file in use, or its
        write-ahead log (``<file>-wal``), was deleted or replaced (a 503, not a 200: the open
        connections would go on writing into a file that no longer has a name, lost at the next
        start). Nothing for PostgreSQL or an in-memory one."""
        if self._file is None:
            return
        try:
            st = os.stat(self._file)
        except FileNotFoundError:
            st = None
        if st is not None and self._file_id is None:
            self._file_id = (st.st_dev, st.st_ino)  # the file this process opened
            return
        if st is None or (st.st_dev, st.st_ino) != self._file_id:
            if self._file_id is None:
                return  # not created yet: the first connection creates it
            what = "deleted" if st is None else "replaced"
            raise _file_gone(
                f"the database file {self._file} was {what} while the service ran; "
                "restart the service"
            )
        self._check_wal()

    # The -wal check. In WAL mode with synchronous=FULL a commit is durable once it is in the
    # -wal: deleting it (or a hot journal) loses the commits not yet checkpointed
    # (sqlite.org/howtocorrupt.html, "Deleting a hot journal"), and the open connections go on
    # writing into the unnamed file while a new connection would make a new, empty one. SQLite
    # itself deletes the -wal only when the last connection to the database closes
    # (sqlite.org/wal.html), after checkpointing it whole; a checkpoint (TRUNCATE, or
    # journal_size_limit) truncates or rewrites it in place, keeping its inode. So: the -wal's
    # (device, inode) is recorded after each commit of :meth:`write` (the commit went into that
    # file), forgotten whenever this engine has no connection open (SQLite may then have deleted
    # it, legitimately, and the next connection makes a new one), and a -wal that is gone or
    # another file while this engine kept a connection open is lost, for good (sticky: restart).
    # Before the first commit nothing is recorded, so a fresh database raises nothing.

    def _conn_opened(self, *_args: Any) -> None:
        with self._conns_lock:
            self._open_conns += 1

    def _conn_closed(self, *_args: Any) -> None:
        with self._conns_lock:
            self._open_conns = max(0, self._open_conns - 1)
            if self._open_conns == 0:
                self._wal_id = None  # the last one: SQLite may delete the -wal, legitimately

    def _wal_stat(self) -> tuple[int, int] | None:
        assert self._wal is not None
        try:
            st = os.stat(self._wal)
        except FileNotFoundError:
            return None
        return (st.st_dev, st.st_ino)

    def _wal_gone(self, now: tuple[int, int] | None) -> Exception:
        """Mark the -wal lost (from now on every check raises) and return the error to raise."""
        what = "deleted" if now is None else "replaced"
        self._wal_lost = (
            f"the database's write-ahead log {self._wal} was {what} while the service ran; "
            "stop the service gracefully and start it again (the last connection to close "
            "copies the commits it still holds into the database file; a killed process "
            "loses them)"
        )
        return _file_gone(self._wal_lost)

    def _check_wal(self) -> None:
        if self._wal_lost is not None:
            raise _file_gone(self._wal_lost)
        recorded = self._wal_id
        if recorded is None:
            return
        now = self._wal_stat()
        if now == recorded:
            return
        with self._conns_lock:
            if self._wal_id != recorded or self._open_conns == 0:
                return  # forgotten meanwhile: every connection closed, SQLite may have deleted it
            raise self._wal_gone(now)

    def _committed(self, wrote: bool) -> None:
        """After a commit of :meth:`write`: the -wal it went into is the one to keep (or it was
        already gone: the commit is in an unnamed file, raise); a commit that changed rows
        reached the file, so the file takes writes again (one that changed nothing wrote
        nothing: it proves nothing)."""
        if wrote:
            self._write_failure = None
        if self._wal is None:  # an in-memory database: no file, no log
            return
        with self._conns_lock:
            if self._open_conns == 0:
                self._wal_id = None
                return
            now = self._wal_stat()
            if self._wal_id is not None and now != self._wal_id:
                raise self._wal_gone(now)
            self._wal_id = now

    def _write_failed(self, err: BaseException) -> None:
        """Remember a write SQLite could not store for :meth:`ping`: the file, its folder or
        mount read-only, an I/O error (a mount remounted read-only after one), a full disk."""
        orig = getattr(err, "orig", err)
        code = getattr(orig, "sqlite_errorcode", 0) & 0xFF
        if code in _SQLITE_WRITE_FAILURES:
            self._write_failure = str(orig) or type(orig).__name__

    @contextmanager
    def write(self) -> Iterator[Connection]:
        """A write transaction (committed on exit, rolled back on error).

        On SQLite a commit that fails for the file (``SQLITE_IOERR``, ``SQLITE_FULL``,
        ``SQLITE_READONLY``, ``SQLITE_CANTOPEN``) makes :meth:`ping` raise
        :class:`DatabaseReadOnly` until a write that changes rows commits again."""
        if self._write_lock is None:
            with self.engine.begin() as conn:
                yield conn
            return
        from sqlalchemy.exc import DBAPIError

        self.check_file()
        with self._write_lock:
            try:
                with self.engine.begin() as conn:
                    dbapi_conn = conn.connection.driver_connection
                    changes = dbapi_conn.total_changes
                    yield conn
                    # read while the connection is still ours: once returned, the pool may close
                    # it (an overflow connection back to a full pool); the commit below changes
                    # no count
                    wrote = dbapi_conn.total_changes != changes
            except DBAPIError as err:
                self._write_failed(err)
                raise
            self._committed(wrote)

    @contextmanager
    def read(self) -> Iterator[Connection]:
        with self.engine.connect() as conn:
            yield conn

    def ping(self) -> None:
        """Raise when the database cannot be reached (or its SQLite file or write-ahead log is
        gone), or when it accepts no writes (:class:`DatabaseReadOnly`), where every webhook
        would answer 503: on PostgreSQL a standby after a failover or
        ``default_transaction_read_only``; on SQLite a file, folder or mount that is read-only
        (:func:`_sqlite_write_check`), or one whose last write failed (an I/O error, a full disk:
        :meth:`write`), until a write commits again (this ping tries one while no other write
        runs: :func:`_sqlite_write_probe`)."""
        with self.read() as conn:
            if self.is_sqlite:
                _sqlite_write_check(conn.connection.driver_connection)
            elif conn.exec_driver_sql("SHOW transaction_read_only").scalar_one() == "on":
                raise DatabaseReadOnly("the database is read-only")
        self.check_file()
        if self._write_failure is not None:
            self._retry_write()

    def _retry_write(self) -> None:
        """While the last write failed: commit a write that changes nothing (see
        :func:`_sqlite_write_probe`) when no other write of this process runs, and become ready
        when it commits; else raise :class:`DatabaseReadOnly`."""
        import sqlite3

        assert self._write_lock is not None
        if self._write_lock.acquire(blocking=False):  # else a write runs: it decides
            try:
                with self.read() as conn:
                    _sqlite_write_probe(conn.connection.driver_connection)
                self._write_failure = None
                return
            except sqlite3.Error as err:
                self._write_failed(err)
            finally:
                self._write_lock.release()
        failure = self._write_failure
        if failure is not None:
            raise DatabaseReadOnly(f"the SQLite database accepts no writes: {failure}")

    # ------------------------------------------------------------------ alerts
    def store_alerts(self, rows: Sequence[dict[str, Any]]) -> None:
        """Store webhook rows, in order: insert new alerts, change stored ones by the rules of
        :data:`_UPSERT_RULE` (status changes, stale firing deliveries), :data:`_MOVE_START` and
        :data:`_ONTO_EARLIER` (one alert notified under two ``startsAt``) and
        :data:`_RESOLVE_EARLIER`.

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
        """Store ``rows`` in one transaction, with the effect of storing them one after another.

        The statements run set-wise (one ``executemany`` each) over rounds of rows whose
        fingerprints differ (the n-th delivery of each fingerprint in the n-th round: one round for
        a webhook, whose alerts Alertmanager keys by fingerprint), since each rule reads the other
        rows of a fingerprint."""
        with self.write() as conn:
            self._lock_fingerprints(conn, rows)
            for part in _rounds(rows):
                self._store_round(conn, part)

    def _lock_fingerprints(self, conn: Connection, rows: Sequence[dict[str, Any]]) -> None:
        """PostgreSQL: take a transaction advisory lock per lock slot of the fingerprints of
        ``rows`` (two-key ``pg_advisory_xact_lock``, released at commit or rollback; at most
        :data:`ALERT_LOCK_SLOTS`), in ascending order so two webhooks never wait on each other in
        a cycle. Under READ COMMITTED the rules that read the
        other rows of a fingerprint (:data:`_MOVE_START`'s ``NOT EXISTS``, :data:`_STALE_FIRING`,
        :data:`_RESOLVE_EARLIER`) do not see a row another transaction has inserted and not
        committed: the same alert sent to two replicas at once under two ``startsAt`` was stored
        twice. With the lock the second transaction waits, and its statements (each with a fresh
        snapshot) see the first one's rows. SQLite has one writer at a time already.

        Slots, not one lock per fingerprint: every advisory lock takes an entry of PostgreSQL's
        shared lock table, sized ``max_locks_per_transaction`` (64) x ``max_connections``, and a
        10,000-alert webhook took 10,000 of them: two such webhooks at once failed with "out of
        shared memory" (503, retried into the same failure). Two fingerprints in one slot only
        wait for each other."""
        if self.is_sqlite:
            return
        from sqlalchemy import text

        keys = sorted({_fingerprint_lock_slot(r["fingerprint"]) for r in rows})
        conn.execute(
            text("SELECT pg_advisory_xact_lock(:c, :k)"),
            [{"c": ALERT_LOCK_CLASS, "k": k} for k in keys],
        )

    def _store_round(self, conn: Connection, rows: list[dict[str, Any]]) -> None:
        """:data:`_MOVE_START` and :data:`_ONTO_EARLIER` for the firing rows, the upsert,
        :data:`_STALE_FIRING` for the firing rows and :data:`_QUIET_RESOLUTION` then
        :data:`_RESOLVE_EARLIER` for the resolved ones; ``rows`` have distinct fingerprints."""
        firing = [r for r in rows if r["status"] == "firing" and r["starts_at"] != NO_START]
        resolved = [
            {**r, "resolved_until": r["ends_ts"] if r["ends_ts"] is not None else r["received_ts"]}
            for r in rows
            if r["status"] == "resolved" and r["starts_at"] != NO_START
        ]
        if firing:
            # a write first: on SQLite it takes the database's write lock, so the read of
            # _onto_earlier_starts sees every committed row and no other process adds one before
            # this transaction commits (PostgreSQL: the fingerprints' advisory locks)
            if self.is_sqlite:
                conn.exec_driver_sql(_MOVE_START, firing)
            else:
                from sqlalchemy import text

                conn.execute(text(_MOVE_START), firing)
            rows = self._onto_earlier_starts(conn, rows)
            firing = [r for r in rows if r["status"] == "firing" and r["starts_at"] != NO_START]
        if self.is_sqlite:
            # The DBAPI directly: SQLAlchemy's per-row parameter processing costs about as much as
            # the fsync for a webhook of 50 alerts. Same statements as on PostgreSQL.
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
            conn.exec_driver_sql(self._sqlite_upsert, params)
            if firing:
                conn.exec_driver_sql(_STALE_FIRING, firing)
            if resolved:
                ds_b = _data_source_state_sql(True, "b")
                conn.exec_driver_sql(_QUIET_RESOLUTION.format(data_source_state=ds_b), resolved)
                conn.exec_driver_sql(
                    _RESOLVE_EARLIER.format(data_source_state=_data_source_state_sql(True)),
                    resolved,
                )
            return
        from sqlalchemy import text

        stmt = self._upsert
        if stmt is None:
            stmt = self._upsert = self._build_upsert()
        conn.execute(stmt, rows)
        if firing:
            conn.execute(text(_STALE_FIRING), firing)
        if resolved:
            ds_b = _data_source_state_sql(False, "b")
            conn.execute(text(_QUIET_RESOLUTION.format(data_source_state=ds_b)), resolved)
            ds = _data_source_state_sql(False)
            conn.execute(text(_RESOLVE_EARLIER.format(data_source_state=ds)), resolved)

    def _onto_earlier_starts(
        self, conn: Connection, rows: list[dict[str, Any]]
    ) -> list[dict[str, Any]]:
        """``rows`` with each firing delivery of :data:`_ONTO_EARLIER` given the ``startsAt`` of
        the earliest firing row of its fingerprint that started less than
        :data:`HA_START_SKEW_S` before it (``rows``: distinct fingerprints).

        One read of the firing rows of the round's fingerprints; a delivery that would move is
        checked once more (its own row, a covering resolved row), which is rare."""
        from sqlalchemy import text

        later = {
            r["fingerprint"]: r
            for r in rows
            if r["status"] == "firing" and r["starts_at"] != NO_START
        }
        stored: dict[str, list[tuple[float, str]]] = {}
        fps = list(later)
        for i in range(0, len(fps), 500):
            q = select(alerts.c.fingerprint, alerts.c.starts_ts, alerts.c.starts_at).where(
                alerts.c.fingerprint.in_(fps[i : i + 500]),
                alerts.c.status == "firing",
                alerts.c.starts_at != NO_START,
            )
            for fp, ts, at in conn.execute(q):
                stored.setdefault(fp, []).append((ts, at))
        moved: dict[str, dict[str, Any]] = {}
        for fp, r in later.items():
            start = r["starts_ts"]
            found = min(
                (x for x in stored.get(fp, ()) if start - HA_START_SKEW_S <= x[0] < start),
                default=None,
            )
            if found is None or found[1] == r["starts_at"]:
                continue
            params = {"fingerprint": fp, "starts_at": r["starts_at"], "starts_ts": r["starts_ts"]}
            if conn.execute(text(_OWN_ROW_OR_COVERED), params).scalar():
                continue
            moved[fp] = {**r, "starts_at": found[1], "starts_ts": found[0]}
        if not moved:
            return rows
        return [
            moved.get(r["fingerprint"], r) if r is later.get(r["fingerprint"]) else r for r in rows
        ]

    def _build_upsert(self) -> Any:
        """The upsert of :data:`_UPSERT_RULE` as a SQLAlchemy statement (PostgreSQL)."""
        if self.is_sqlite:
            from sqlalchemy.dialects.sqlite import insert
        else:
            from sqlalchemy.dialects.postgresql import insert
        stmt = insert(alerts)
        ex = stmt.excluded
        newer = (
            ex.ends_ts.is_not(None)
            & alerts.c.ends_ts.is_not(None)
            & (ex.ends_ts > alerts.c.ends_ts)
        ) | (
            (ex.received_ts > alerts.c.updated_ts + literal_column(repr(self.refire_margin_s)))
            | (
                (ex.received_ts < alerts.c.updated_ts - literal_column(repr(CLOCK_STEP_S)))
                & (
                    alerts.c.updated_ts
                    > _db_now(self.is_sqlite) + literal_column(repr(CLOCK_STEP_S))
                )
            )
        )
        data_source = literal_column(_data_source_state_sql(self.is_sqlite), Boolean)
        evidence = literal_column(_evidence_firing_sql(self.is_sqlite), Boolean)
        changes = (data_source & evidence) | (
            (alerts.c.status != ex.status)
            & ~((alerts.c.status == "resolved") & (ex.status == "firing") & ~newer)
        )
        return stmt.on_conflict_do_update(
            index_elements=["fingerprint", "starts_at"],
            set_={
                "received_ts": ex.received_ts,
                "status": case((changes, ex.status), else_=alerts.c.status),
                "ends_ts": case((changes, ex.ends_ts), else_=alerts.c.ends_ts),
                "annotations": case((changes, ex.annotations), else_=alerts.c.annotations),
                "updated_ts": case((changes, ex.updated_ts), else_=alerts.c.updated_ts),
                "pending": case(
                    (changes & data_source & (ex.status == "resolved"), False),
                    (changes, True),
                    else_=alerts.c.pending,
                ),
            },
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
        newest: bool = False,
    ) -> list[dict[str, Any]]:
        """Stored alerts in the order they were first stored (``newest``: newest first)."""
        q = select(alerts).order_by(alerts.c.id.desc() if newest else alerts.c.id)
        if status:
            q = q.where(alerts.c.status == status)
        if incident_id is not None:
            q = q.where(alerts.c.incident_id == incident_id)
        q = q.limit(limit).offset(offset)
        with self.read() as conn:
            return [dict(r._mapping) for r in conn.execute(q)]

    def firing_alerts_of_open_incidents(
        self,
        limit: int | None = None,
        keep: Callable[[dict[str, Any]], bool] | None = None,
        chunk: int = 5000,
    ) -> list[dict[str, Any]]:
        """What the fleet view marks: one row (``incident_id``, ``node``, ``alertname``) per
        distinct (incident, alerting node, alert name) among the firing alerts of every open
        incident that name a node, by incident id then the id of the first such alert; only the
        rows ``keep`` accepts (all when ``None``), at most ``limit`` of them (all when ``None``).

        Aggregated in the database (one query, whatever the number of incidents), so the rows
        grow with the distinct alerting nodes and alert names of each open incident, not its
        alerts: an older incident's 100,000 firing alerts on one host are one row. The grouped
        rows are streamed ``chunk`` at a time (a server-side cursor on PostgreSQL) and the
        limit counts kept rows only, so rows the caller drops (an older incident's 100,000
        alerting pods, where the fleet view marks GPUs and hosts) hide no newer incident's
        rows, and memory holds one chunk plus the kept rows."""
        c = alerts.c
        open_ids = select(incidents.c.id).where(incidents.c.status == "open")
        q = (
            select(c.incident_id, c.node, c.alertname)
            .where(c.status == "firing", c.node.is_not(None), c.incident_id.in_(open_ids))
            .group_by(c.incident_id, c.node, c.alertname)
            .order_by(c.incident_id, func.min(c.id))
        )
        out: list[dict[str, Any]] = []
        if limit is not None and limit <= 0:
            return out
        with self.read() as conn:
            result = conn.execution_options(yield_per=max(1, chunk)).execute(q)
            try:
                for part in result.partitions():
                    for r in part:
                        row = {"incident_id": r[0], "node": r[1], "alertname": r[2]}
                        if keep is not None and not keep(row):
                            continue
                        out.append(row)
                        if limit is not None and len(out) >= limit:
                            return out
            finally:
                result.close()
        return out

    def pending_alerts(
        self, limit: int = 5000, conn: Connection | None = None
    ) -> list[dict[str, Any]]:
        """The oldest ``limit`` pending alerts, with the columns grouping reads (``id``,
        ``updated_ts``, ``status``, ``labels``, ``node``, ``incident_id``, ``starts_ts``) and
        ``state_reason``, Grafana's ``grafana_state_reason`` annotation (``None`` when absent),
        read by the database: not the annotations, whose JSON decoding was a third of reading a
        backlog. Read on ``conn`` when given (the grouping transaction)."""
        c = alerts.c
        reason = c.annotations["grafana_state_reason"].as_string().label("state_reason")
        q = (
            select(
                c.id, c.updated_ts, c.status, c.labels, c.node, c.incident_id, c.starts_ts, reason
            )
            .where(c.pending.is_(True))
            .order_by(c.id)
            .limit(limit)
        )
        if conn is not None:
            return [dict(r._mapping) for r in conn.execute(q)]
        with self.read() as own:
            return [dict(r._mapping) for r in own.execute(q)]

    def oldest_pending_ts(self) -> float | None:
        """When the oldest ungrouped alert (or status change) was stored, unix seconds; ``None``
        when nothing is pending (reads ``ix_alerts_pending_updated``)."""
        q = select(func.min(alerts.c.updated_ts)).where(alerts.c.pending.is_(True))
        with self.read() as conn:
            value = conn.execute(q).scalar()
        return None if value is None else float(value)

    def incidents_needing_ranking(self) -> list[int]:
        """Open incidents whose latest state has no stored ranking (deferred before a crash)."""
        q = select(incidents.c.id).where(
            incidents.c.needs_ranking.is_(True), incidents.c.status == "open"
        )
        with self.read() as conn:
            return [int(r[0]) for r in conn.execute(q)]

    def auto_resolve(self, quiet_before: float, now: float) -> list[int]:
        """Resolve open incidents unchanged since ``quiet_before`` (unix s) none of whose firing
        alerts was delivered since (Alertmanager re-sends firing alerts every
        ``repeat_interval``): their firing alerts get status ``resolved``, ``endsAt`` = their
        last delivery (:data:`_LAST_KNOWN_FIRING`) and ``updated_ts`` = ``now``; returns the
        incident ids.

        Firing alerts in no incident (grouped already, ``pending`` false: the never-grouped
        heartbeats, inhibitor helpers and severity ``none`` alerts) not delivered since
        ``quiet_before`` are resolved the same way (:meth:`_resolve_quiet_ungrouped`), so that
        :meth:`purge` deletes them after the retention period."""
        still_sent = (
            select(alerts.c.id)
            .where(
                alerts.c.incident_id == incidents.c.id,
                alerts.c.status == "firing",
                alerts.c.received_ts >= quiet_before,
            )
            .exists()
        )
        with self.write() as conn:
            ids = [
                int(r[0])
                for r in conn.execute(
                    select(incidents.c.id).where(
                        incidents.c.status == "open",
                        incidents.c.updated_ts < quiet_before,
                        ~still_sent,
                    )
                )
            ]
            for i in range(0, len(ids), 500):
                chunk = ids[i : i + 500]
                conn.execute(
                    update(alerts)
                    .where(alerts.c.incident_id.in_(chunk), alerts.c.status == "firing")
                    .values(status="resolved", ends_ts=_LAST_KNOWN_FIRING, updated_ts=now)
                )
                conn.execute(
                    update(incidents)
                    .where(incidents.c.id.in_(chunk))
                    .values(
                        status="resolved",
                        closed_ts=now,
                        updated_ts=now,
                        firing_count=0,
                        needs_ranking=False,
                    )
                )
            self._resolve_quiet_ungrouped(conn, quiet_before, now)
        return ids

    @staticmethod
    def _resolve_quiet_ungrouped(conn: Connection, quiet_before: float, now: float) -> int:
        """Resolve the firing alerts in no incident not delivered since ``quiet_before`` (unix s),
        ``endsAt`` = their last delivery (:data:`_LAST_KNOWN_FIRING`); returns how many.

        With ``send_resolved: false`` (or a lost resolved notification) such an alert never hears
        its end: each episode of an InfoInhibitor stayed a firing row forever, listed as firing and
        kept from retention. An alert that still fires is re-sent every ``repeat_interval``
        (a Watchdog always is), which keeps ``received_ts`` recent. Pending rows are left to the
        incident worker, which has not grouped them yet. The row stays not pending: the worker
        would not group it anyway."""
        c = alerts.c
        return conn.execute(
            update(alerts)
            .where(
                c.incident_id.is_(None),
                # IS NOT TRUE, not = FALSE (the same for this NOT NULL column): SQLite's planner
                # then walks ix_alerts_incident's few ungrouped rows, not every grouped alert
                # under ix_alerts_pending_updated (277 ms holding the write lock at 2.4M alerts)
                c.pending.is_not(True),
                c.status == "firing",
                c.received_ts < quiet_before,
            )
            .values(status="resolved", ends_ts=_LAST_KNOWN_FIRING, updated_ts=now)
        ).rowcount

    def purge(self, before: float, chunk: int = PURGE_CHUNK_ROWS) -> tuple[int, int]:
        """Delete incidents closed (resolved or merged) before ``before`` (unix s) with their
        grouped alerts (an alert re-fired into one and not yet grouped keeps it: grouping reopens
        it), resolved alerts last changed (resolved) before it in any incident or none
        (:meth:`_purge_resolved_alerts`), and the notification rows of deleted incidents that owe
        nothing (:meth:`_purge_notifications`); returns ``(incidents, alerts)`` deleted.

        Deletes at most ``chunk`` rows per transaction (:data:`PURGE_CHUNK_ROWS`), each statement
        choosing its rows again: an incident is deleted once it has no alerts left, so one that an
        alert joined meanwhile waits for the next purge.
        """
        from sqlalchemy import delete, exists

        closed = select(incidents.c.id).where(
            incidents.c.status.in_(("resolved", "merged")), incidents.c.closed_ts < before
        )
        a = alerts.c
        n_alerts = self._purge_chunks(
            # not a pending row: the webhook stored a re-fired alert of the closed incident that
            # the worker has not grouped yet (grouping reopens the incident)
            # ... and again on the DELETE itself: PostgreSQL (read committed) re-checks only the
            # outer WHERE of a row a webhook re-fired while this statement waited on its lock
            delete(alerts).where(
                a.id.in_(
                    select(a.id)
                    .where(a.incident_id.in_(closed), a.pending.is_not(True))
                    .limit(chunk)
                ),
                a.pending.is_not(True),
            ),
            chunk,
        )
        n_alerts += self._purge_resolved_alerts(before, chunk)
        n_incidents = self._purge_chunks(
            delete(incidents).where(
                incidents.c.id.in_(
                    closed.where(~exists().where(a.incident_id == incidents.c.id)).limit(chunk)
                )
            ),
            chunk,
        )
        self._purge_notifications(chunk)
        return n_incidents, n_alerts

    def _purge_chunks(self, stmt: Any, chunk: int) -> int:
        """Run the ``DELETE`` ``stmt`` (which deletes at most ``chunk`` rows), one transaction
        each time, until it deletes fewer; returns the rows deleted."""
        total = 0
        while True:
            with self.write() as conn:
                n = conn.execute(stmt).rowcount
            total += n
            if n < chunk:
                return total

    def _purge_resolved_alerts(self, before: float, chunk: int) -> int:
        """Delete the resolved alerts (grouped already: not ``pending``) resolved before
        ``before`` (unix s; their ``updated_ts``) that are in no incident, or are an earlier
        episode of an alert (same fingerprint) their incident holds again later; count the alerts
        of the incidents they left again (``alert_count``; the firing count is unchanged);
        returns how many.

        A flapping alert keeps no episode past the retention period but its latest: one
        fingerprint firing a minute every five reopens its incident each time, and that incident
        held every episode (8,640 rows a month) for as long as it flapped. Every other alert of an
        open or recently closed incident stays, however long ago it resolved: the incident's
        page, its re-ranking and the feedback that copies its alerts into a training label read
        them. The incident row stays. The rows are chosen by ``ix_alerts_pending_updated``; the
        ``DELETE`` checks them again, so a row a webhook reopened meanwhile stays."""
        from sqlalchemy import delete, exists, or_

        a = alerts.c
        later = alerts.alias("later")
        superseded = exists().where(
            later.c.incident_id == a.incident_id,
            later.c.fingerprint == a.fingerprint,
            later.c.id > a.id,
        )
        cond = (
            a.pending.is_(False),
            a.status == "resolved",
            a.updated_ts < before,
            or_(a.incident_id.is_(None), superseded),
        )
        total = 0
        while True:
            with self.write() as conn:
                rows = conn.execute(select(a.id, a.incident_id).where(*cond).limit(chunk)).all()
                for i in range(0, len(rows), 500):
                    ids = [r[0] for r in rows[i : i + 500]]
                    total += conn.execute(delete(alerts).where(a.id.in_(ids), *cond)).rowcount
                touched = sorted({r[1] for r in rows if r[1] is not None})
                count = (
                    select(func.count())
                    .select_from(alerts)
                    .where(a.incident_id == incidents.c.id)
                    .scalar_subquery()
                )
                for i in range(0, len(touched), 500):
                    conn.execute(
                        update(incidents)
                        .where(incidents.c.id.in_(touched[i : i + 500]))
                        .values(alert_count=count)
                    )
            if len(rows) < chunk:
                return total

    def _purge_notifications(self, chunk: int) -> int:
        """Delete the ``notifications`` rows of deleted incidents that owe nothing: resolved,
        delivered to Alertmanager and the webhook, no resolution left in their outbox (the
        notifier sets ``am_sent_ts`` of a resolved row only once its outbox is empty:
        :mod:`fleetmind.serving.notify`); returns how many. A row still owed a delivery stays
        until the notifier has delivered it (or given up).

        The row of the highest incident id stays whatever it is: on SQLite a new incident's id is
        chosen past every id the notifications name
        (:meth:`fleetmind.serving.incidents.store.IncidentStore.insert_incident`), so the ids of
        incidents on-call was paged about are never handed out again."""
        from sqlalchemy import delete, exists

        n = notifications.c
        newest = notifications.alias("newest")
        done = (
            select(n.incident_id)
            .where(
                n.state == "resolved",
                n.am_sent_ts.is_not(None),
                n.hook_sent.is_(True),
                ~exists().where(incidents.c.id == n.incident_id),
                n.incident_id < select(func.max(newest.c.incident_id)).scalar_subquery(),
            )
            .limit(chunk)
        )
        return self._purge_chunks(delete(notifications).where(n.incident_id.in_(done)), chunk)

    # ------------------------------------------------------------------ incidents
    def list_incidents(
        self,
        status: str | None = "open",
        limit: int = 100,
        offset: int = 0,
        before: int | None = None,
    ) -> list[dict[str, Any]]:
        """Incidents, newest (highest id) first; ``before``: only ids below it (a page after
        the one that ended there, stable while new incidents open)."""
        q = select(incidents).order_by(incidents.c.id.desc())
        if status:
            q = q.where(incidents.c.status == status)
        if before is not None:
            q = q.where(incidents.c.id < before)
        q = q.limit(limit).offset(offset)
        with self.read() as conn:
            return [dict(r._mapping) for r in conn.execute(q)]

    def get_incident(self, incident_id: int) -> dict[str, Any] | None:
        with self.read() as conn:
            row = conn.execute(select(incidents).where(incidents.c.id == incident_id)).first()
        return None if row is None else dict(row._mapping)

    def count_incidents(self, status: str | None = "open") -> int:
        """Incidents of ``status`` (``None``: all)."""
        q = select(func.count()).select_from(incidents)
        if status is not None:
            q = q.where(incidents.c.status == status)
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
        self,
        incident_id: int,
        causes: list[dict[str, Any]],
        method: str,
        version: str | None,
        ranked_state: float | None = None,
    ) -> None:
        """Store an incident's ranked causes; ``needs_ranking`` is cleared when the incident is
        still in the state that was ranked (its ``updated_ts`` = ``ranked_state``), so a change
        made while the ranking ran keeps it due."""
        from sqlalchemy import and_ as _and
        from sqlalchemy import case as _case

        still = (
            incidents.c.needs_ranking
            if ranked_state is None
            else _case(
                (_and(incidents.c.updated_ts == ranked_state), false()),
                else_=incidents.c.needs_ranking,
            )
        )
        with self.write() as conn:
            conn.execute(
                update(incidents)
                .where(incidents.c.id == incident_id)
                .values(
                    causes=causes,
                    method=method,
                    model_version=version,
                    rca_ts=time.time(),
                    needs_ranking=still,
                )
            )

    # ------------------------------------------------------------------ browser sessions
    def create_ui_session(self, row: dict[str, Any]) -> None:
        """Store a new session (``ui_sessions`` columns) and delete the expired ones."""
        from sqlalchemy import delete, insert

        with self.write() as conn:
            conn.execute(delete(ui_sessions).where(ui_sessions.c.expires_ts < row["created_ts"]))
            conn.execute(insert(ui_sessions).values(**row))

    def get_ui_session(self, key: str) -> dict[str, Any] | None:
        """The session row of ``key`` (the cookie's hash), or ``None``."""
        with self.read() as conn:
            row = conn.execute(select(ui_sessions).where(ui_sessions.c.key == key)).first()
        return None if row is None else dict(row._mapping)

    def delete_ui_session(self, key: str) -> None:
        from sqlalchemy import delete

        with self.write() as conn:
            conn.execute(delete(ui_sessions).where(ui_sessions.c.key == key))

    # ------------------------------------------------------------------ model reloads
    def request_model_reload(self, now: float, pins: dict[str, Any] | None = None) -> int:
        """Count one more model reload request for every worker and replica (``model_reloads``).

        The pins are stored with the generation they belong to (key ``"generation"``, in the same
        transaction): a process of a release before pins (revision 0008) counts a request by
        updating the generation alone, and the pins of an earlier request left in the row must not
        be loaded for it (:meth:`model_reload_record` drops them).

        Args:
            now: the request's time (Unix s).
            pins: the registry versions the requesting process loaded, which the others load in
                turn (:mod:`fleetmind.serving.registry`); ``None``: none.

        Returns:
            the service's reload generation after this request (1 for the first).
        """
        if self.is_sqlite:
            from sqlalchemy.dialects.sqlite import insert
        else:
            from sqlalchemy.dialects.postgresql import insert
        stmt = insert(model_reloads).values(id=1, generation=1, requested_ts=now, pins=None)
        stmt = stmt.on_conflict_do_update(
            index_elements=["id"],
            set_={
                "generation": model_reloads.c.generation + 1,
                "requested_ts": stmt.excluded.requested_ts,
                "pins": None,
            },
        ).returning(model_reloads.c.generation)
        with self.write() as conn:  # the row stays locked until the pins are written
            generation = int(conn.execute(stmt).scalar_one())
            if pins:
                conn.execute(
                    update(model_reloads)
                    .where(model_reloads.c.id == 1)
                    .values(pins={**pins, "generation": generation})
                )
            return generation

    def model_reload_state(self) -> tuple[int, float]:
        """``(generation, requested_ts)`` of the service's model reloads; ``(0, 0.0)`` before the
        first request."""
        with self.read() as conn:
            row = conn.execute(
                select(model_reloads.c.generation, model_reloads.c.requested_ts).where(
                    model_reloads.c.id == 1
                )
            ).first()
        return (0, 0.0) if row is None else (int(row[0]), float(row[1]))

    def model_reload_record(self) -> tuple[int, float, dict[str, Any]]:
        """``(generation, requested_ts, pins)`` of the service's model reloads, read together;
        ``(0, 0.0, {})`` before the first request, ``pins`` ``{kind: {"ref", "pinned"}}``, ``{}``
        when the latest request recorded none: pins stored for another generation (left by a
        request of an earlier one, which a release before revision 0008 then counted without
        touching them) or with none (see :meth:`request_model_reload`)."""
        c = model_reloads.c
        with self.read() as conn:
            row = conn.execute(
                select(c.generation, c.requested_ts, c.pins).where(c.id == 1)
            ).first()
        if row is None:
            return 0, 0.0, {}
        generation, pins = int(row[0]), row[2]
        if not isinstance(pins, dict) or pins.get("generation") != generation:
            pins = {}
        return generation, float(row[1]), {k: v for k, v in pins.items() if k != "generation"}


ALERT_LOCK_CLASS = 0x464D414C
"""First key of the two-key advisory locks the webhook's store transaction takes per fingerprint
(``"FMAL"``; apart from the reservations' per-node class and the one-key leader locks)."""


ALERT_LOCK_SLOTS = 32
"""How many advisory locks the alert store may take (:meth:`Database._lock_fingerprints`): half of
PostgreSQL's default ``max_locks_per_transaction``, so a webhook of any size takes at most 32
entries of the shared lock table."""


def _fingerprint_lock_slot(fingerprint: str) -> int:
    """The lock slot of a fingerprint, ``0 <= slot <`` :data:`ALERT_LOCK_SLOTS` (a stable hash:
    every replica maps a fingerprint to the same slot)."""
    digest = hashlib.blake2b(fingerprint.encode("utf-8", "surrogatepass"), digest_size=4).digest()
    return int.from_bytes(digest, "big") % ALERT_LOCK_SLOTS


def _rounds(rows: Sequence[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """``rows`` in rounds of distinct fingerprints, each fingerprint's rows in their order (the
    n-th row of a fingerprint in round n)."""
    seen: dict[str, int] = {}
    out: list[list[dict[str, Any]]] = []
    for r in rows:
        n = seen.get(r["fingerprint"], 0)
        seen[r["fingerprint"]] = n + 1
        if n == len(out):
            out.append([])
        out[n].append(r)
    return out


def pg_connect_args(
    url: str, connect_timeout_s: float, statement_timeout_s: float
) -> dict[str, Any]:
    """libpq options of the service's PostgreSQL connections.

    A connect timeout, and TCP keepalives plus ``tcp_user_timeout`` so that a dead server or
    network is noticed in about 10 s, not after the kernel's two hours. The statement timeout is
    not among them (:func:`_pg_statement_timeout`): libpq's ``options`` here would replace the
    URL's own (``?options=-csearch_path%3Dapp``: SQLAlchemy lays ``connect_args`` over the URL's
    query), and PgBouncer refuses a connection that sends ``options`` ("unsupported startup
    parameter", its ``ignore_startup_parameters``). ``url`` and ``statement_timeout_s`` are kept
    for callers of earlier releases.

    None of these bounds a server that is alive at the TCP level but never answers (processes
    stopped with SIGSTOP, a proxy that acknowledges and does not forward): ``statement_timeout``
    is enforced by the server, and the kernel keeps acknowledging, so the request waits until
    the connection recovers or is reset (``docs/serving/operations.md``, "Known limitation").

    ``client_encoding`` is always ``utf8``: psycopg otherwise takes the database's own encoding,
    so that a value outside it (``GPU\u706b`` on a ``LATIN1`` database) failed in Python as a bare
    ``UnicodeEncodeError`` instead of the server's refusal, and on a ``SQL_ASCII`` database it
    returned bytes, failing SQLAlchemy's first connection (psycopg/psycopg#561). PgBouncer passes
    ``client_encoding`` on (one of its tracked parameters). :meth:`Database.migrate` refuses a
    database not in ``UTF8`` anyway (:func:`check_server_encoding`).
    """
    args: dict[str, Any] = {
        "client_encoding": "utf8",
        "connect_timeout": max(1, round(connect_timeout_s)),
        "keepalives": 1,
        "keepalives_idle": 5,
        "keepalives_interval": 2,
        "keepalives_count": 3,
        "tcp_user_timeout": 10_000,
    }
    return args


def check_server_encoding(conn: Connection, url: Any) -> None:
    """Raise ``ConfigError`` (one line, how to make a UTF8 database) unless the PostgreSQL
    database of ``conn`` has the server encoding ``UTF8`` (``url``: named in the message).

    Node ids, alert labels, graph names and feedback signatures are arbitrary Unicode. A database
    in another encoding cannot hold them: ``LATIN1`` refuses ``gpu-\u65e5`` (SQLSTATE 22P05) only
    when such a value first arrives, so a webhook, a feedback or the incident worker failed at run
    time; ``SQL_ASCII`` stores bytes unchecked, so sorting, ``LIKE`` and lengths work on bytes. A
    clear error at start is better than data refused later.
    """
    enc = str(conn.exec_driver_sql("SHOW server_encoding").scalar_one())
    if enc.upper() in ("UTF8", "UNICODE"):  # UNICODE: the alias PostgreSQL accepts for it
        return
    name = getattr(url, "database", None) or "fleetmind"
    raise ConfigError(
        safe_uri(
            f"the PostgreSQL database at {url!r} has server encoding {enc} and FleetMind "
            f"needs UTF8 (node ids and labels are any Unicode): create it with CREATE DATABASE "
            f"\"{name}\" ENCODING 'UTF8' TEMPLATE template0 (or initdb -E UTF8) and point "
            "FLEETMIND_DATABASE_URL at it"
        )
    )


def _pg_statement_timeout(engine: Engine, statement_timeout_s: float) -> None:
    """``SET statement_timeout`` and ``SET idle_in_transaction_session_timeout``
    (``statement_timeout_s`` seconds each; 0: neither) on every new connection of ``engine``: a
    statement the server runs for too long fails (503, retried by Alertmanager), and a session
    left idle inside a transaction for that long is ended by the server.

    The second bounds a peer that stops inside one of its write transactions (SIGSTOP, a paused
    VM, a vanished host whose kernel still answers nothing): its backend stays "idle in
    transaction" holding its transaction-level advisory locks (the grouping lock, a node's hold
    lock) and row locks, which nothing else ever releases. The same value as the statement
    timeout, because a healthy transaction of the service spends far less than that between two
    statements (the longest gap: the grouping transaction mapping a batch of up to 500 alerts
    in Python, well under a second even on a starved machine), so it ends only stuck sessions.
    PostgreSQL before 9.6 has no such setting: the statement timeout is then set alone.

    A ``SET`` after the connection is made, in autocommit so that the pool's rollback does not
    undo it (SQLAlchemy's "Setting Alternate Search Paths on Connect", PostgreSQL dialect docs),
    rather than libpq ``options``: that reaches the server through a pooler (PgBouncer in session
    mode) and leaves the URL's own ``options`` alone.
    """
    if statement_timeout_s <= 0:
        return
    ms = round(statement_timeout_s * 1000)

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn: Any, _record: Any) -> None:
        autocommit = dbapi_conn.autocommit
        dbapi_conn.autocommit = True
        try:
            cur = dbapi_conn.cursor()  # psycopg and psycopg2 alike
            cur.execute(f"SET statement_timeout = {ms}")
            try:  # PostgreSQL 9.6 and later (autocommit: a refusal leaves the session usable)
                cur.execute(f"SET idle_in_transaction_session_timeout = {ms}")
            except dbapi_conn.ProgrammingError:  # undefined parameter: an older server
                pass
            cur.close()
        finally:
            dbapi_conn.autocommit = autocommit


PG_LOCK_WAIT_S = 5.0
"""How long a PostgreSQL lock wait of the grouping transaction or of a placement hold may last
(``lock_timeout``, s) before it fails (SQLSTATE 55P03): a few times the longest healthy hold of
those locks (milliseconds for a hold, about a second for a grouping batch on a starved
machine), and well under the leader lease (10 s), so a worker blocked by a hung peer goes back
to checking its lease instead of waiting the whole statement timeout."""


LOCK_NOT_AVAILABLE = "55P03"
"""SQLSTATE of a lock wait ended by ``lock_timeout`` (PostgreSQL, Appendix A "PostgreSQL Error
Codes": ``lock_not_available``); not an input error (:func:`is_input_error`): a 503."""


def pg_lock_wait(conn: Connection, seconds: float = PG_LOCK_WAIT_S) -> None:
    """``SET LOCAL lock_timeout`` to ``seconds`` for the rest of ``conn``'s transaction
    (PostgreSQL only; transaction-scoped, so it holds through PgBouncer in any pool mode)."""
    from sqlalchemy import text

    conn.execute(
        text("SELECT set_config('lock_timeout', :v, true)"),
        {"v": f"{max(1, round(pg_lock_wait_s(seconds) * 1000))}ms"},
    )


def pg_lock_wait_s(seconds: float = PG_LOCK_WAIT_S) -> float:
    """The lock wait :func:`pg_lock_wait` sets, s: ``seconds``, or the calling thread's shorter
    bound inside :func:`pg_thread_lock_wait` (the incident worker's, derived from its lease)."""
    ms = getattr(_THREAD_LOCK_WAIT, "ms", None)
    return seconds if ms is None else min(seconds, ms / 1000)


_THREAD_LOCK_WAIT = threading.local()
"""``ms``: the ``lock_timeout`` (ms) of every transaction the thread begins inside
:func:`pg_thread_lock_wait` (absent or ``None``: the server's)."""
_LOCK_WAIT_ENGINES = threading.Lock()


def _begin_with_lock_wait(conn: Connection) -> None:
    """SQLAlchemy ``begin`` event: ``SET LOCAL lock_timeout`` for a thread inside
    :func:`pg_thread_lock_wait` (not on an autocommit connection: no transaction to scope it to)."""
    ms = getattr(_THREAD_LOCK_WAIT, "ms", None)
    if ms is None or conn.get_execution_options().get("isolation_level") == "AUTOCOMMIT":
        return
    cur = conn.connection.dbapi_connection.cursor()  # the driver opens the transaction here
    try:
        cur.execute(f"SET LOCAL lock_timeout = {int(ms)}")
    finally:
        cur.close()


@contextmanager
def pg_thread_lock_wait(db: Database, seconds: float = PG_LOCK_WAIT_S) -> Iterator[None]:
    """Within the block, every transaction the calling thread begins on ``db`` waits at most
    ``seconds`` for any lock (``lock_timeout``, as :func:`pg_lock_wait`; SQLSTATE 55P03 past it).

    For the incident worker's thread: a table locked for longer than the leader lease
    (``VACUUM FULL incidents``, a migration's ``ALTER TABLE``) made its statements wait the whole
    statement timeout (30 s), past the lease (10 s), so leadership passed from replica to replica;
    now the loop fails within ``seconds`` and goes back to checking its lease. The worker passes
    a quarter of its lease, at most :data:`PG_LOCK_WAIT_S`
    (:func:`fleetmind.serving.incidents.worker.lock_wait_s`): one lock wait plus its 1 s pause
    then stays well under the lease between two checks. :func:`pg_lock_wait` inside the block
    (the grouping transaction) never waits longer than ``seconds`` either. Other threads (the
    requests) are not affected; nothing on SQLite."""
    if db.is_sqlite:
        yield
        return
    with _LOCK_WAIT_ENGINES:
        if not event.contains(db.engine, "begin", _begin_with_lock_wait):
            event.listen(db.engine, "begin", _begin_with_lock_wait)
    before = getattr(_THREAD_LOCK_WAIT, "ms", None)
    _THREAD_LOCK_WAIT.ms = max(1, round(seconds * 1000))
    try:
        yield
    finally:
        _THREAD_LOCK_WAIT.ms = before


SQLITE_BUSY_TIMEOUT_MS = 30_000
"""``PRAGMA busy_timeout`` of every SQLite connection: how long a write waits for another
process's write lock (ms)."""
_SQLITE_BUSY, _SQLITE_LOCKED, _SQLITE_READONLY = 5, 6, 8
"""SQLite's primary result codes (https://www.sqlite.org/rescode.html); an extended code carries
its primary one in the low 8 bits (``SQLITE_READONLY_DIRECTORY`` is 1544 = 8 | 6 << 8)."""
_SQLITE_IOERR, _SQLITE_FULL, _SQLITE_CANTOPEN = 10, 13, 14  # the same page of rescode.html
_SQLITE_WRITE_FAILURES = frozenset(
    {_SQLITE_READONLY, _SQLITE_IOERR, _SQLITE_FULL, _SQLITE_CANTOPEN}
)
"""Primary codes of a write the file could not take (not a lock, not a bad value): not ready."""


def _sqlite_write_check(dbapi_conn: Any) -> None:
    """Raise :class:`DatabaseReadOnly` when SQLite will not let this connection write: ``BEGIN
    IMMEDIATE`` takes the write lock, ``PRAGMA user_version`` is set to the value it has (a change
    to the header page in the cache, which a read-only connection refuses: ``BEGIN IMMEDIATE``
    alone succeeds on one), and the transaction is rolled back, so nothing reaches the file.

    Another writer holding the lock (``SQLITE_BUSY``, ``SQLITE_LOCKED``) proves nothing either
    way, and counts as writable: the probe does not wait for it (``busy_timeout`` 0 meanwhile),
    so readiness neither flaps nor stalls under write load. Only ``SQLITE_READONLY`` (and its
    extended codes: a read-only file, folder or mount, ``mode=ro``) is read-only; any other error
    is raised as it is. ``sqlite3.Error.sqlite_errorcode``: Python 3.11.
    """
    import sqlite3

    dbapi_conn.execute("PRAGMA busy_timeout=0")
    try:
        dbapi_conn.execute("BEGIN IMMEDIATE")
        try:
            version = int(dbapi_conn.execute("PRAGMA user_version").fetchone()[0])
            dbapi_conn.execute(f"PRAGMA user_version={version}")
        finally:
            dbapi_conn.execute("ROLLBACK")
    except sqlite3.Error as err:
        code = getattr(err, "sqlite_errorcode", 0) & 0xFF
        if code == _SQLITE_READONLY:
            raise DatabaseReadOnly(f"the SQLite database is read-only: {err}") from None
        if code not in (_SQLITE_BUSY, _SQLITE_LOCKED):
            raise
    finally:
        dbapi_conn.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")


def _sqlite_write_probe(dbapi_conn: Any) -> None:
    """Commit a write that changes nothing: ``PRAGMA user_version`` set to the value it has marks
    the header page dirty, so the commit appends it to the write-ahead log and syncs it (what
    :func:`_sqlite_write_check` leaves out): it fails as a webhook's commit would on a file that
    turned read-only, a full disk or an I/O error. ``SQLITE_BUSY`` (another process writing)
    raises too: the caller stays not ready until the next try."""
    dbapi_conn.execute("PRAGMA busy_timeout=0")
    try:
        dbapi_conn.execute("BEGIN IMMEDIATE")
        try:
            version = int(dbapi_conn.execute("PRAGMA user_version").fetchone()[0])
            dbapi_conn.execute(f"PRAGMA user_version={version}")
            dbapi_conn.execute("COMMIT")
        finally:
            if dbapi_conn.in_transaction:
                dbapi_conn.execute("ROLLBACK")
    finally:
        dbapi_conn.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")


def _sqlite_may_create(url: URL) -> bool:
    """Whether SQLite creates the file of ``url`` when it is missing: unless a URI-form URL
    (``uri=true``) sets ``mode`` to other than ``rwc``, in the URI's own query
    (``sqlite:///file:/srv/fm.db%3Fmode%3Drw?uri=true``) or in the URL's, which SQLAlchemy
    appends to it (``sqlite:///file:/srv/fm.db?mode=rw&uri=true``); ``mode=rw`` opens an
    existing file only, ``mode=ro`` reads it (https://www.sqlite.org/uri.html). Parsed as
    :func:`fleetmind.serving.migrations.sqlite_path` parses the URI."""
    if str(url.query.get("uri", "")).lower() not in ("true", "1"):
        return True
    name = url.database or ""
    query = name.partition("?")[2].partition("#")[0] if name[:5].lower() == "file:" else ""
    modes = [
        unquote(v)
        for k, _, v in (kv.partition("=") for kv in query.split("&"))
        if unquote(k) == "mode"
    ]
    given = url.query.get("mode", ())
    modes += [given] if isinstance(given, str) else list(given)
    return all(m == "rwc" for m in modes)


def normalise_url(url: str) -> str:
    """``url`` with a ``postgres://`` scheme (any case) written ``postgresql+psycopg://``.

    Managed PostgreSQL services (Heroku, Render, Fly.io, Supabase) hand out ``postgres://`` URLs,
    which libpq and psql accept; SQLAlchemy has no dialect of that name ("Can't load plugin:
    sqlalchemy.dialects:postgres"). Every other URL is returned as given."""
    scheme, sep, rest = url.partition("://")
    if sep and scheme.strip().lower() == "postgres":
        return "postgresql+psycopg://" + rest
    return url


def shown_url(url: str) -> str:
    """Database URL ``url`` fit for a message, a log line or JSON: its password masked
    (SQLAlchemy's ``render_as_string(hide_password=True)``, which masks a password holding a
    space too, where :func:`fleetmind.redact.safe_uri` stops at it: ``fm:***@db``; then
    ``safe_uri`` over the query for a ``?password=``), or ``<database URL>`` for one SQLAlchemy cannot parse or whose password
    holds an unencoded ``@`` (:func:`~fleetmind.serving.settings.database_url_problem`)."""
    if database_url_problem(url) is not None:
        return "<database URL>"
    try:
        shown = make_url(normalise_url(url)).render_as_string(hide_password=True)
    except Exception:  # not a URL SQLAlchemy can parse: say nothing about it
        return "<database URL>"
    base, mark, query = shown.partition("?")  # the user name stays readable (fm:***@db)
    return base + (safe_uri(mark + query) if mark else "")


def open_error(url: URL, err: BaseException) -> str:
    """The one line for a database at ``url`` that could not be opened: ``cannot open the
    database at <url>: <the first line of the driver's reason>``. The URL is masked alone
    (:func:`fleetmind.redact.safe_uri` over the sentence took its ``:`` into a masked
    ``?password=`` value), the reason on its own, and a parsed host holding an ``@`` (a password
    cut at its first ``@``: :func:`~fleetmind.serving.settings.database_url_problem`) is shown
    as ``***@`` and the part after its last ``@``, wherever the reason quotes it."""
    lines = str(getattr(err, "orig", None) or err).strip().splitlines()
    reason = lines[0] if lines else type(err).__name__
    host = url.host or ""
    if "@" in host:
        reason = reason.replace(host, "***@" + host.rpartition("@")[2])
    return f"cannot open the database at {safe_uri(repr(url))}: {safe_uri(reason)}"


def _bad_url(url: str, err: Exception) -> str:
    """The one-line error for a database URL SQLAlchemy cannot use (``err``): the URL quoted with
    its secrets masked (:func:`fleetmind.redact.safe_uri`), unless it does not parse as a URL and
    holds an ``@`` or ``=``: a libpq keyword/value string (``host=db password=...``) or a URL
    without its scheme (``fm:pass word@db/fm``) may carry a password in a form that no mask can
    be sure of, so it is described, not quoted."""
    try:
        make_url(url)
    except (ArgumentError, ValueError):
        if "@" in url or "=" in url:
            return (
                "cannot use database URL (not quoted, as it may hold a password): it is not of "
                "the form dialect+driver://user:password@host:port/database, e.g. "
                "postgresql+psycopg://fm:PASSWORD@db:5432/fleetmind (a libpq "
                "'host=... password=...' string is not one)"
            )
    return safe_uri(f"cannot use database URL {url!r}: {err}")


def _sqlite_pragmas(engine: Engine, synchronous: str) -> None:
    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn: Any, _record: Any) -> None:  # pragma: no cover - driver callback
        cur = dbapi_conn.cursor()
        cur.execute("PRAGMA journal_mode=WAL")
        cur.execute(f"PRAGMA synchronous={synchronous}")
        cur.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")
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
        try:  # in arrival order: the store keeps the order per fingerprint
            self._store([r for it in batch for r in it.rows])
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

    On PostgreSQL the holder calls :meth:`check` at every loop of its worker (about once a second):
    a query on the lock's own connection confirms that the session still holds the lock, and any
    failure (the connection dropped by a proxy, an idle timeout, a server restart, the backend
    terminated) drops leadership at once. The lock's session also sets
    ``idle_session_timeout = lease_s``: if the holder stops checking (a hung or vanished host), the
    server ends its session and frees the lock within ``lease_s`` seconds, whatever TCP does. A
    holder whose check runs late can overlap with the next one for a moment; grouping itself is
    fenced by :data:`GROUP_KEY` (see :meth:`fleetmind.serving.incidents.store.IncidentStore.grouping`), so
    no alert is grouped twice even then.
    """

    PG_KEY = 0x464C4D44  # "FLMD"
    GROUP_KEY = 0x464C4D47  # "FLMG": a transaction lock every grouping transaction takes

    def __init__(self, db: Database, lease_s: float = 10.0) -> None:
        self.db = db
        self.lease_s = lease_s
        self._fd: int | None = None
        self._conn: Connection | None = None
        self.held = False
        self.lost = 0  # times leadership was dropped after a failed check
        # why the last lost lock was lost: the error of its connection's query, or None when the
        # query answered that the session no longer holds it
        self.lost_error: Exception | None = None

    def check(self) -> bool:
        """Whether this process still holds the lock; drops leadership when it does not, noting
        why in :attr:`lost_error` (the error of the lock's connection, or ``None`` when the
        database answered that its session no longer holds the lock)."""
        if not self.held:
            return False
        if self._conn is None:
            return True  # SQLite: the flock lives as long as the descriptor
        from sqlalchemy import text

        error: Exception | None = None
        try:
            still = bool(
                self._conn.execute(
                    text(
                        "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted "
                        "AND pid = pg_backend_pid() AND objid = :k"
                    ),
                    {"k": self.PG_KEY},
                ).scalar()
            )
        except Exception as err:  # the connection is gone: so is the lock
            still, error = False, err
        if not still:
            self.lost, self.lost_error = self.lost + 1, error
            self.release()
        return still

    def acquire(self) -> bool:
        if self.held:
            return True
        if self.db.is_sqlite:
            path = migrations.sqlite_path(self.db.engine.url)
            if path is None:  # in memory: one process, nothing to share
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
        try:
            lease_ms = max(1000, round(self.lease_s * 1000))
            conn.execute(text(f"SET idle_session_timeout = {lease_ms}"))
            conn.execute(text("SET tcp_keepalives_idle = 5"))
            conn.execute(text("SET tcp_keepalives_interval = 2"))
            conn.execute(text("SET tcp_keepalives_count = 3"))
        except Exception:  # PostgreSQL before 14 has no idle_session_timeout: keepalives only
            conn.invalidate()
            conn.close()
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
            from sqlalchemy import text

            try:
                self._conn.execute(text("SELECT pg_advisory_unlock(:k)"), {"k": self.PG_KEY})
            except Exception:  # the connection is already gone, and the lock with it
                pass
            try:
                self._conn.invalidate()  # never return a lock-holding session to the pool
                self._conn.close()
            except Exception:  # pragma: no cover - closing a dead connection
                pass
            self._conn = None
        self.held = False
