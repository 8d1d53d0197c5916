"""The SQL of the incident worker: reading pending alerts, storing what grouping decided.

Everything here runs on a :class:`fleetmind.serving.db.Database`; the decisions themselves come from
:class:`fleetmind.serving.incidents.grouper.Grouper`. Grouping runs in one write transaction per
batch (:meth:`IncidentStore.grouping`); on PostgreSQL that transaction first takes the advisory
transaction lock :data:`fleetmind.serving.db.LeaderLock.GROUP_KEY`, so two processes that both
believe they lead (for the second before one notices it lost the lease) never group the same alert
twice.
"""

from __future__ import annotations

import contextlib
from collections.abc import Collection, Iterable, Iterator, Mapping
from typing import Any

from sqlalchemy import Boolean, and_, bindparam, case, func, insert, or_, select, text, update
from sqlalchemy.engine import Connection
from sqlalchemy.exc import OperationalError

from fleetmind.serving.db import (
    LOCK_NOT_AVAILABLE,
    Database,
    LeaderLock,
    alerts,
    incident_feedback,
    incidents,
    notifications,
    pg_lock_wait,
    pg_lock_wait_s,
)
from fleetmind.serving.incidents.grouper import ClosedIncident, OpenIncident, Settled
from fleetmind.serving.schemas import iso_utc

# The count refresh (IncidentStore.write_counts): built once, so each batch only binds parameters
# (building an update per incident cost more than the SQL itself).
_COUNTS = (
    select(
        alerts.c.incident_id,
        func.count(),
        func.sum(case((alerts.c.status == "firing", 1), else_=0)),
    )
    .where(alerts.c.incident_id.in_(bindparam("ids", expanding=True)))
    .group_by(alerts.c.incident_id)
)
_SET_COUNTS = (
    update(incidents)
    .where(incidents.c.id == bindparam("_id"))
    .values(
        alert_count=bindparam("_n"),
        firing_count=bindparam("_f"),
        updated_ts=bindparam("_now"),
        # durable: a crash before the ranking leaves it due. Only new evidence (an alert grouped
        # for the first time, or one firing again) makes it due; a resolution alone keeps the
        # ranking made while the alerts fired, and a due ranking stays due.
        needs_ranking=or_(incidents.c.needs_ranking, bindparam("_rank", type_=Boolean)),
    )
)
_SET_OPEN = _SET_COUNTS.values(
    nodes=bindparam("_nodes", type_=incidents.c.nodes.type),
    clusters=bindparam("_clusters", type_=incidents.c.clusters.type),
    first_alert_ts=bindparam("_first"),
    last_alert_ts=bindparam("_last"),
)
_SET_RESOLVED = _SET_OPEN.values(status="resolved", closed_ts=bindparam("_now"))
_SET_GROUPED = (
    update(alerts)
    .where(and_(alerts.c.id == bindparam("_id"), alerts.c.updated_ts == bindparam("_upd")))
    .values(incident_id=bindparam("_inc"), node=bindparam("_node"), pending=False)
)


class GroupingBusy(Exception):
    """Another session held the grouping lock (:data:`fleetmind.serving.db.LeaderLock.GROUP_KEY`)
    for the whole :data:`~fleetmind.serving.db.PG_LOCK_WAIT_S`: the batch is not grouped this
    pass (the worker logs it and tries again a second later)."""


def alert_dict(row: dict[str, Any]) -> dict[str, Any]:
    """A stored alert row as an Alertmanager v4 alert object (what analyzers take)."""
    return {
        "status": row["status"],
        "labels": row["labels"],
        "annotations": row["annotations"],
        "startsAt": row["starts_at"]
        if row["starts_at"] != "unknown"
        else _iso_seconds(row["starts_ts"]),
        "endsAt": _iso_seconds(row.get("ends_ts")),
        "fingerprint": row["fingerprint"],
    }


def _iso_seconds(t: float | None) -> str | None:
    """Stored unix seconds as an ISO 8601 string in UTC (``None`` stays ``None``)."""
    return iso_utc(t)  # clamped: rows stored before timestamps were bounded still read


MERGE_STEPS = 100
"""Steps along a ``merged_into`` chain (merges can chain; a cycle stops there), as
:meth:`IncidentStore.follow_merges` and :func:`move_merged_feedback` follow one."""

MERGED_FEEDBACK = text(
    "SELECT count(*) FROM incident_feedback f JOIN incidents i ON i.id = f.incident_id"
    " WHERE i.status = 'merged' AND i.merged_into IS NOT NULL"
)
"""How many feedback rows lie on merged incidents (``0`` on a clean database): one read of the
feedback table, each row's incident by primary key (milliseconds at 100,000 incidents and 20,000
feedback rows; PostgreSQL at default settings scans the feedback table, its index being usable)."""

MOVE_ONE_STEP = text(
    "UPDATE incident_feedback SET incident_id = ("
    " SELECT i.merged_into FROM incidents i WHERE i.id = incident_feedback.incident_id)"
    " WHERE incident_id IN ("
    " SELECT id FROM incidents WHERE status = 'merged' AND merged_into IS NOT NULL)"
)
"""One step: each feedback row of a merged incident to the incident it was merged into."""


def move_merged_feedback(conn: Connection) -> tuple[int, bool]:
    """Move the feedback stored on merged incidents to the end of each one's ``merged_into``
    chain (ids and times kept, so the latest of the incidents merged together is the survivor's
    label), in ``conn``'s transaction; idempotent. Returns ``(rows, settled)``: how many rows lay
    on merged incidents, and whether none is left on one (``False``: a chain longer than
    :data:`MERGE_STEPS` or a cycle, where the rows stop after that many steps).

    The one implementation of Alembic revision ``0012`` (feedback of incidents merged by releases
    that did not move it) and of the incident worker's housekeeping
    (:meth:`IncidentStore.move_merged_feedback`: during a rolling upgrade a replica of such a
    release keeps merging, and keeps storing feedback on incidents merged meanwhile, after that
    revision ran). Plain SQL of the tables as revision ``0012`` has them."""
    rows = int(conn.execute(MERGED_FEEDBACK).scalar_one())
    if not rows:
        return 0, True
    for _ in range(MERGE_STEPS):
        if not conn.execute(MOVE_ONE_STEP).rowcount:
            return rows, True
    return rows, not conn.execute(MERGED_FEEDBACK).scalar_one()


class IncidentStore:
    """Reads and writes of incidents and alerts for grouping and ranking.

    Args:
        db: the service database.
    """

    def __init__(self, db: Database) -> None:
        self.db = db
        self._unsettled: int | None = None
        """Rows :meth:`move_merged_feedback` last left on merged incidents (a ``merged_into``
        cycle or a chain too long): while the count stays, it does not move them again."""

    # ------------------------------------------------------------------ reads
    def open_incidents(self) -> list[OpenIncident]:
        """Every open incident, as grouping sees it."""
        return [_as_grouped(row) for row in self.db.list_incidents("open", limit=1_000_000)]

    def rank_input(self, incident_id: int, max_alerts: int) -> tuple[Any, list[dict[str, Any]]]:
        """``(state, alerts)``: the incident's ``updated_ts`` when read and its newest
        ``max_alerts`` alerts, oldest first, in one read transaction."""
        with self.db.read() as conn:
            state = conn.execute(
                select(incidents.c.updated_ts).where(incidents.c.id == incident_id)
            ).scalar()
            rows = self.db.incident_alerts(conn, incident_id, max_alerts)
        return state, rows

    # ------------------------------------------------------------------ the grouping transaction
    @contextlib.contextmanager
    def grouping(self) -> Iterator[Connection]:
        """A write transaction for one batch, fenced against other replicas (see the module).

        On PostgreSQL every lock wait of the transaction (the grouping lock, and the row locks
        of the alerts and incidents it changes) lasts at most
        :data:`~fleetmind.serving.db.PG_LOCK_WAIT_S` seconds: a peer hung inside its own
        transaction (its session is ended by ``idle_in_transaction_session_timeout``) makes this
        pass fail (:class:`GroupingBusy` for the grouping lock), not wait the whole statement
        timeout, so the worker goes back to checking its lease and tries again a second later.

        Raises:
            GroupingBusy: another session held the grouping lock for the whole wait.
        """
        with self.db.write() as conn:
            if not self.db.is_sqlite:
                pg_lock_wait(conn)
                try:
                    conn.execute(select(func.pg_advisory_xact_lock(LeaderLock.GROUP_KEY))).all()
                except OperationalError as err:
                    if getattr(err.orig, "sqlstate", None) != LOCK_NOT_AVAILABLE:
                        raise
                    raise GroupingBusy(
                        f"another session held the grouping lock for over {pg_lock_wait_s():g} s "
                        "(a replica hung inside a grouping transaction?): this pass is skipped"
                    ) from None
            yield conn

    def pending(self, conn: Connection, limit: int) -> list[dict[str, Any]]:
        """The oldest ``limit`` pending alerts (:meth:`fleetmind.serving.db.Database.pending_alerts`)."""
        return self.db.pending_alerts(limit, conn)

    def insert_incident(self, conn: Connection, ts: float, now: float) -> int:
        """Store a new empty open incident whose alerts start at ``ts``; returns its id.

        Ids are never handed out twice. PostgreSQL's sequence sees to it; SQLite gives a new row
        the largest id plus one, so after retention deleted the newest incidents their ids would
        come back, and their feedback labels, notifications and the links on-call was paged with
        would name an unrelated incident. On SQLite the id is chosen past every id those name.
        Each ``max`` reads an index (``incident_feedback``: ``ix_incident_feedback_incident``,
        ``notifications``: its primary key), and retention keeps the notification row of the
        highest incident id (:meth:`fleetmind.serving.db.Database.purge`), so the notified ids
        stay behind the next one.
        """
        explicit: dict[str, int] = {}
        if self.db.is_sqlite:  # one writer at a time: no other insert can take the id
            used = max(
                conn.execute(select(func.max(incidents.c.id))).scalar() or 0,
                conn.execute(select(func.max(incident_feedback.c.incident_id))).scalar() or 0,
                conn.execute(select(func.max(notifications.c.incident_id))).scalar() or 0,
            )
            explicit["id"] = int(used) + 1
        inc_id = conn.execute(
            insert(incidents).values(
                **explicit,
                status="open",
                opened_ts=now,
                updated_ts=now,
                first_alert_ts=ts,
                last_alert_ts=ts,
                alert_count=0,
                firing_count=0,
                nodes=[],
                clusters=[],
                causes=[],
            )
        ).inserted_primary_key[0]
        return int(inc_id)

    def merge(self, conn: Connection, target: int, other: int, now: float) -> None:
        """Move ``other``'s alerts and feedback to ``target`` and mark ``other`` ``merged`` into it.

        The feedback rows keep their ids and times, so the latest feedback of the two incidents is
        ``target``'s label (:func:`fleetmind.serving.feedback.feedback_incidents`), shown and
        correctable on its page; left on ``other`` it was invisible, could not be corrected
        (feedback on a merged incident is refused) and exported as a training incident of its own.

        ``other``'s row is updated before its feedback is moved: on PostgreSQL a feedback post
        stores its row and then locks this one (``FOR UPDATE``,
        :func:`fleetmind.serving.feedback.record_feedback`), so either the post sees the merge and
        rolls back, or the merge waits for the post's commit and moves its row too.
        """
        conn.execute(update(alerts).where(alerts.c.incident_id == other).values(incident_id=target))
        conn.execute(
            update(incidents)
            .where(incidents.c.id == other)
            .values(status="merged", merged_into=target, closed_ts=now, updated_ts=now)
        )
        conn.execute(
            update(incident_feedback)
            .where(incident_feedback.c.incident_id == other)
            .values(incident_id=target)
        )

    def follow_merges(self, conn: Connection, incident_id: int) -> int:
        """The incident ``incident_id`` was merged into, following ``merged_into`` chains."""
        for _ in range(MERGE_STEPS):
            row = conn.execute(
                select(incidents.c.status, incidents.c.merged_into).where(
                    incidents.c.id == incident_id
                )
            ).first()
            if row is None or row.status != "merged" or row.merged_into is None:
                return incident_id
            incident_id = row.merged_into
        return incident_id

    def move_merged_feedback(self) -> tuple[int, bool]:
        """Housekeeping: :func:`move_merged_feedback` in a write transaction, only when a read
        finds feedback on a merged incident (on a clean database one read of the feedback table,
        no write lock). Returns what that function returns (``(0, True)``: nothing to move).

        Rows that a pass left on merged incidents (a hand-edited ``merged_into`` cycle or a
        chain longer than :data:`MERGE_STEPS`) are not moved again while the read finds the same
        count: ``(0, False)``, no write (each pass would take the write lock for
        :data:`MERGE_STEPS` updates, seconds, and move them around the cycle again)."""
        with self.db.read() as conn:
            found = int(conn.execute(MERGED_FEEDBACK).scalar_one())
        if not found:
            self._unsettled = None
            return 0, True
        if found == self._unsettled:
            return 0, False
        with self.db.write() as conn:
            rows, settled = move_merged_feedback(conn)
            left = 0 if settled else int(conn.execute(MERGED_FEEDBACK).scalar_one())
        self._unsettled = left or None
        return rows, settled

    def reopen(self, conn: Connection, incident_id: int) -> OpenIncident | None:
        """Mark a stored incident open again; returns it as stored (``None``: no such incident)."""
        inc = conn.execute(select(incidents).where(incidents.c.id == incident_id)).first()
        if inc is None:
            return None
        conn.execute(
            update(incidents)
            .where(incidents.c.id == incident_id)
            .values(status="open", closed_ts=None)
        )
        return _as_grouped(inc._mapping)

    def previous_episodes(
        self, conn: Connection, alert_ids: Collection[int], window_s: float
    ) -> dict[int, tuple[int, str, float | None]]:
        """``{alert id: (incident id, status, closed_ts)}``: the incident of the latest earlier
        episode of each alert's fingerprint (its alert that started last before it, grouped).

        The latest earlier episode is picked first; its incident is returned only when still open
        (there is nothing to reopen) or closed at most ``window_s`` seconds before the alert
        started (the ones :meth:`fleetmind.serving.incidents.grouper.Grouper.reopens_episode` can
        take). An older episode's incident is never returned, even one that closed later: a new
        episode reopens its previous episode's incident or none. Reads the fingerprint's rows
        through the ``(fingerprint, starts_at)`` unique index, one query per 500 alerts.

        ``closed_ts`` is on the sender's clock of the new episode, which is compared with its
        ``startsAt``: the incident closed on the service's clock, shifted by how far that
        ``startsAt`` is ahead of the episode's first delivery (``updated_ts``, the service's
        clock), if it is. A sender clock ahead of the service's (by more than the window) made
        every re-fire open a new incident; an episode that started before it was delivered
        (``group_wait``, a Prometheus ``for:``) is not shifted.
        """
        new, prev, older = alerts.alias("new"), alerts.alias("prev"), alerts.alias("older")
        ahead = case(  # how far the new episode's startsAt is ahead of its first delivery, s
            (new.c.starts_ts > new.c.updated_ts, new.c.starts_ts - new.c.updated_ts), else_=0.0
        )
        latest = (  # per new alert: the start of its fingerprint's latest earlier grouped episode
            select(
                new.c.id.label("alert_id"),
                new.c.fingerprint,
                new.c.starts_ts,
                ahead.label("ahead_s"),
                func.max(older.c.starts_ts).label("prev_ts"),
            )
            .select_from(
                new.join(
                    older,
                    and_(
                        older.c.fingerprint == new.c.fingerprint,
                        older.c.starts_ts < new.c.starts_ts,
                        older.c.incident_id.is_not(None),
                    ),
                )
            )
            .where(new.c.id.in_(bindparam("ids", expanding=True)))
            .group_by(new.c.id, new.c.fingerprint, new.c.starts_ts, new.c.updated_ts)
            .subquery("latest")
        )
        q = (
            select(latest.c.alert_id, prev.c.id, incidents.c.id, incidents.c.status)
            .add_columns(incidents.c.closed_ts + latest.c.ahead_s)
            .select_from(
                latest.join(
                    prev,
                    and_(
                        prev.c.fingerprint == latest.c.fingerprint,
                        prev.c.starts_ts == latest.c.prev_ts,
                    ),
                ).join(incidents, incidents.c.id == prev.c.incident_id)
            )
            .where(
                or_(
                    incidents.c.closed_ts.is_(None),
                    incidents.c.closed_ts + latest.c.ahead_s
                    >= latest.c.starts_ts - float(window_s),
                )
            )
        )
        ids = sorted(int(i) for i in alert_ids)
        latest: dict[int, tuple[int, tuple[int, str, float | None]]] = {}
        for i in range(0, len(ids), 500):  # bound the IN list (SQLite's variable limit)
            for a_id, p_id, inc_id, status, closed in conn.execute(q, {"ids": ids[i : i + 500]}):
                # two rows of one start time (``starts_at`` written two ways): the last stored
                if a_id not in latest or int(p_id) > latest[a_id][0]:
                    latest[int(a_id)] = (int(p_id), (int(inc_id), str(status), closed))
        return {a_id: found for a_id, (_, found) in latest.items()}

    def resolved_near(
        self, conn: Connection, lo: float, hi: float, closed_since: float
    ) -> list[ClosedIncident]:
        """The ``resolved`` incidents whose alert span meets ``lo``..``hi`` and that closed at or
        after ``closed_since`` (unix seconds): those alerts resolved before they were grouped
        may join (:meth:`fleetmind.serving.incidents.grouper.Grouper.assign`)."""
        c = incidents.c
        q = select(c.id, c.first_alert_ts, c.last_alert_ts, c.nodes, c.clusters, c.closed_ts).where(
            c.status == "resolved",
            c.first_alert_ts <= hi,
            c.last_alert_ts >= lo,
            c.closed_ts >= closed_since,
        )
        return [
            ClosedIncident(_as_grouped(r._mapping), float(r.closed_ts)) for r in conn.execute(q)
        ]

    def mark_grouped(self, conn: Connection, done: list[dict[str, Any]]) -> int:
        """Store each alert's incident and node and clear its ``pending`` flag; returns how many
        alerts were updated (the driver's count: exact for one alert).

        ``done`` holds one ``{"_id", "_upd", "_inc", "_node"}`` per alert (its id, the
        ``updated_ts`` it was read with, its incident id and node): an alert whose status changed
        since it was read keeps ``pending`` and is grouped again.
        """
        return int(conn.execute(_SET_GROUPED, done).rowcount)

    def counts(self, conn: Connection, incident_ids: Iterable[int]) -> dict[int, tuple[int, int]]:
        """``{incident id: (alerts, firing alerts)}``.

        The counts are exact (``COUNT`` over the incidents' alerts, read from the covering index
        ``ix_alerts_incident`` in one grouped query), so every way an alert can move (a new
        alert, a status change, a merge) is counted without bookkeeping.
        """
        ids = sorted(int(i) for i in incident_ids)
        counts = dict.fromkeys(ids, (0, 0))
        for i in range(0, len(ids), 500):  # bound the IN list (SQLite's variable limit)
            for inc_id, total, firing in conn.execute(_COUNTS, {"ids": ids[i : i + 500]}):
                counts[int(inc_id)] = (int(total), int(firing or 0))
        return counts

    def write_counts(
        self,
        conn: Connection,
        settled: list[Settled],
        now: float,
        evidence: Collection[int] | None = None,
    ) -> None:
        """Store the counts (and, for open and resolved incidents, nodes, clusters and alert
        times) of ``settled``, marking those in ``evidence`` (default: all) due for ranking.

        The updates go out as three prepared statements with one parameter set per incident
        (SQLAlchemy builds and compiles each once), not a statement built per incident.
        """
        params: dict[str, list[dict[str, Any]]] = {"closed": [], "open": [], "resolved": []}
        for s in settled:
            values: dict[str, Any] = {
                "_id": s.id,
                "_n": s.total,
                "_f": s.firing,
                "_now": now,
                "_rank": evidence is None or s.id in evidence,
            }
            if s.incident is not None:
                o = s.incident
                values.update(
                    _nodes=sorted(o.nodes),
                    _clusters=sorted(o.clusters),
                    _first=o.first_ts,
                    _last=o.last_ts,
                )
            # a resolved incident late resolutions joined: its span and nodes, not its status
            late = s.state == "closed" and s.incident is not None
            params["open" if late else s.state].append(values)
        for stmt, rows in (
            (_SET_COUNTS, params["closed"]),
            (_SET_OPEN, params["open"]),
            (_SET_RESOLVED, params["resolved"]),
        ):
            if rows:
                conn.execute(stmt, rows)


def _as_grouped(row: Mapping[str, Any]) -> OpenIncident:
    """A stored incident (its ``incidents`` row) as grouping sees it."""
    return OpenIncident(
        int(row["id"]),
        row["first_alert_ts"],
        row["last_alert_ts"],
        set(row["nodes"] or []),
        set(row["clusters"] or []),
    )
