"""Feedback that becomes labels: an engineer confirms or corrects an incident's root cause.

``POST /api/v1/incidents/{id}/feedback`` (and the form on the incident page) stores one row in
``incident_feedback``: the node the engineer names, who and why, what the model said (its top cause
and the rank it gave the named node), and a snapshot of what training needs, the incident's alerts
(Alertmanager v4 objects) and the served graph (stored once per content hash in
``feedback_graphs``), so a label stays usable after the graph is replaced. The latest feedback of an
incident wins; an incident merged into another hands its feedback to that one
(:meth:`fleetmind.serving.incidents.store.IncidentStore.merge`), where the latest of both wins.

:func:`feedback_incidents` turns the table into incidents of the dataset contract
(``{"id", "graph", "alerts", "root_cause", "fault_type"}`` plus graphs), which ``fleetmind rca train
--feedback-db URL`` adds to training and ``fleetmind rca evaluate --feedback-db URL`` scores; both
take a period (``--feedback-since`` / ``--feedback-until``, read by :func:`feedback_time`), so that
feedback given after a training run can be kept aside to test it.

A fault type is a label only where the fault catalog
(:func:`fleetmind.data.rca_gen.faults.plausible_fault_types`) allows it at the node
(:func:`node_fault_types`): an engineer's other value is refused (422), and a node named without
one, or that the model did not type, is a label for the root alone (``fault_type`` null), never
``unknown``, which training would learn as a fault type of its own.
"""

from __future__ import annotations

import hashlib
import json
import logging
import threading
import time
import weakref
from datetime import UTC, datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator
from sqlalchemy import select
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import Connection

from fleetmind.data.errors import ConfigError, DataError, NotAvailableError
from fleetmind.data.graph import DependencyGraph, GraphNode
from fleetmind.data.rca_gen.faults import plausible_fault_types
from fleetmind.redact import safe_uri
from fleetmind.serving.db import (
    Database,
    feedback_graphs,
    incident_feedback,
    incidents,
    shown_url,
)
from fleetmind.serving.incidents import alert_dict
from fleetmind.serving.schemas import NO_NUL

log = logging.getLogger(__name__)

MAX_ALERTS = 1000
"""Alerts kept per feedback snapshot (the newest), as many as the incident worker ranks."""


class FeedbackIn(BaseModel):
    """An engineer's verdict on an incident's root cause."""

    model_config = ConfigDict(extra="forbid")

    root_cause: str = Field(
        min_length=1, max_length=512, pattern=NO_NUL, description="node id of the true root cause"
    )
    by: str = Field(
        min_length=1, max_length=256, pattern=NO_NUL, description="who says so (name or handle)"
    )
    note: str | None = Field(
        None, max_length=4000, pattern=NO_NUL, description="why, for the record"
    )
    fault_type: str | None = Field(
        None,
        max_length=128,
        pattern=NO_NUL,
        description="a fault type of the catalog that the node can have, when known "
        "(default: the fault type of the incident's latest feedback when it names the same node, "
        "else the model's for that node, when it typed it)",
    )

    @field_validator("by")
    @classmethod
    def _not_blank(cls, v: str) -> str:
        """Stored as typed without its outer spaces; a value of spaces alone names nobody."""
        v = v.strip()
        if not v:
            raise ValueError("must not be blank")
        return v


class FeedbackOut(BaseModel):
    id: int
    incident_id: int
    root_cause: str
    fault_type: str | None
    by: str
    note: str | None
    created_at: str
    confirmed: bool = Field(description="the named node is the model's top cause")
    model_top: str | None
    model_rank: int | None = Field(description="the model's rank of the named node (1 = top)")
    method: str | None = Field(
        None, description="the ranking method of the incident when the feedback came"
    )
    model_version: str | None = Field(
        None, description="the version of the model that ranked it then (null: a baseline)"
    )


class IncidentNotFound(LookupError):
    """No such incident."""


def node_fault_types(node: GraphNode) -> list[str]:
    """The fault types (sorted) that the catalog allows at ``node``: its kind, and its role where
    the graph names one (:func:`fleetmind.data.rca_gen.faults.plausible_fault_types`, the rule the
    GAT's fault-type mask follows). Empty for a kind where no fault starts (a cluster)."""
    role = node.attrs.get("role") if isinstance(node.attrs, dict) else None
    return sorted(plausible_fault_types(node.kind, role if isinstance(role, str) else None))


def _engineer_fault(node: GraphNode, given: str | None) -> str | None:
    """The engineer's fault type, checked against the catalog (``None``: none given).

    Raises:
        DataError: a type the catalog does not allow at ``node`` (a 422 naming the allowed ones).
    """
    fault = (given or "").strip()
    if not fault:
        return None
    allowed = node_fault_types(node)
    if fault in allowed:
        return fault
    if not allowed:
        raise DataError(
            f"fault_type {fault!r}: no fault type of the catalog starts at a {node.kind} node "
            f"({node.id}); leave fault_type out"
        )
    raise DataError(
        f"fault_type {fault!r} is not a fault type a {node.kind} node can have ({node.id}); "
        f"one of: {', '.join(allowed)}, or leave it out"
    )


def feedback_time(value: str, flag: str = "--feedback-since") -> float:
    """Unix seconds of ``value``, an ISO 8601 date or date-time (``2026-12-01``,
    ``2026-12-01T09:30:00+01:00``; without a UTC offset: UTC), as ``--feedback-since`` and
    ``--feedback-until`` read it.

    Raises:
        ConfigError: ``value`` is no such date (one line naming ``flag``).
    """
    try:
        when = datetime.fromisoformat(value.strip())
    except ValueError:
        raise ConfigError(
            f"{flag} must be an ISO 8601 date or date-time (e.g. 2026-12-01 or "
            f"2026-12-01T09:30:00Z), got {value!r}"
        ) from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return when.timestamp()


def _graph_digest(graph: DependencyGraph) -> tuple[str, dict[str, Any]]:
    """``(sha256 hex of the graph's canonical JSON, that JSON)``, computed afresh."""
    obj = graph.to_json()
    text = json.dumps(obj, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest(), obj


_DIGESTS: weakref.WeakKeyDictionary[DependencyGraph, str] = weakref.WeakKeyDictionary()
_DIGESTS_LOCK = threading.Lock()


def _cached_digest(graph: DependencyGraph) -> tuple[str, dict[str, Any] | None]:
    """:func:`_graph_digest` once per graph object (a served graph is never changed in place: a
    swap serves a new object): ``(digest, JSON)`` the first time, then ``(digest, None)``.

    Serialising and hashing a 200,000-node graph takes seconds, which every feedback post paid.
    The lock makes posts racing on a new graph compute it once."""
    with _DIGESTS_LOCK:
        digest = _DIGESTS.get(graph)
        if digest is not None:
            return digest, None
        digest, obj = _graph_digest(graph)
        _DIGESTS[graph] = digest
        return digest, obj


def _default_fault(
    db: Database, incident_id: int, target: GraphNode, causes: list[dict[str, Any]]
) -> str | None:
    """The fault type of feedback that names none for ``target``: the type of the incident's
    latest feedback when that names the same node (an "agree" keeps a corrected type), else the
    model's for the node; either only where the catalog allows it at ``target``."""
    c = incident_feedback.c
    with db.read() as conn:
        last = conn.execute(
            select(c.root_cause, c.fault_type)
            .where(c.incident_id == incident_id)
            .order_by(c.id.desc())
            .limit(1)
        ).first()
    allowed = node_fault_types(target)
    if last is not None and last.root_cause == target.id and last.fault_type in allowed:
        return str(last.fault_type)
    fault = next(
        (x["fault_type"] for x in causes if x["node"] == target.id and x.get("fault_type")), None
    )
    return fault if fault in allowed else None


def _refuse_merged(incident_id: int, status: str, merged_into: int | None) -> None:
    """Raise ``DataError`` (a 422 naming the incident to send it to) for a merged incident."""
    if status == "merged" and merged_into is not None:
        raise DataError(
            f"incident {incident_id} was merged into {merged_into}; "
            f"send feedback for incident {merged_into}"
        )


def _refuse_if_merged(conn: Connection, incident_id: int) -> None:
    """In the write transaction that stores feedback, after its insert: raise (rolling it back,
    :func:`_refuse_merged`) when incident ``incident_id`` was merged since it was first read.

    The incident worker may merge it meanwhile (between that read and this transaction: seconds
    on the first feedback after a graph swap, which hashes the graph). On PostgreSQL the row is
    read ``FOR UPDATE``: a merge that updated it first (uncommitted) is waited for and then seen;
    one that comes after waits for this commit, and then moves the new row with the others
    (:meth:`fleetmind.serving.incidents.store.IncidentStore.merge` updates the incident before
    its feedback). On SQLite the insert already holds the database's write lock."""
    row = conn.execute(
        select(incidents.c.status, incidents.c.merged_into)
        .where(incidents.c.id == incident_id)
        .with_for_update()
    ).first()
    if row is not None:
        _refuse_merged(incident_id, row.status, row.merged_into)


def record_feedback(
    db: Database,
    graph: DependencyGraph,
    incident_id: int,
    fb: FeedbackIn,
    channel: str = "api",
) -> dict[str, Any]:
    """Validate and store one feedback row; returns it (as :class:`FeedbackOut` fields).

    Without a ``fault_type`` the row takes :func:`_default_fault`'s. Each stored row is logged
    (INFO: incident, root, fault type, who, ``channel``: ``api`` or ``ui``; not the note).

    Raises:
        IncidentNotFound: no incident ``incident_id``.
        DataError: ``root_cause`` is not a node of the served graph, or ``fault_type`` is not a
            fault type the catalog allows at that node (a 422 naming the allowed ones), or the
            incident was merged into another, before the post or while it was stored
            (:func:`_refuse_if_merged`: nothing is stored; a 422 naming the other).
    """
    inc = db.get_incident(incident_id)
    if inc is None:
        raise IncidentNotFound(f"no incident {incident_id}")
    _refuse_merged(incident_id, inc["status"], inc["merged_into"])
    node = fb.root_cause.strip()
    if node not in graph.index:
        # suggest only nodes the graph still has: it may have changed since the incident
        known = [n for n in inc["nodes"] or [] if n in graph.index][:5]
        hint = (
            f"e.g. one of the incident's nodes: {', '.join(known)}"
            if known
            else "none of the incident's nodes is in it: the graph changed since the incident"
        )
        raise DataError(
            f"root_cause {node!r} is not a node of the served graph {graph.name!r} ({hint})"
        )
    target = graph.node(node)
    fault = _engineer_fault(target, fb.fault_type)
    causes = inc["causes"] or []
    ranks = {c["node"]: i for i, c in enumerate(causes, start=1)}
    if fault is None:  # the latest feedback's type for the node, else the model's
        fault = _default_fault(db, incident_id, target, causes)
    with db.read() as conn:
        alerts = [alert_dict(r) for r in db.incident_alerts(conn, incident_id, MAX_ALERTS)]
    if not alerts:
        raise DataError(f"incident {incident_id} has no alerts to learn from")
    digest, graph_json = _cached_digest(graph)
    now = time.time()
    row = {
        "incident_id": incident_id,
        "root_cause": node,
        "fault_type": fault,
        "by": fb.by.strip(),
        "note": fb.note,
        "created_ts": now,
        "model_top": causes[0]["node"] if causes else None,
        "model_rank": ranks.get(node),
        "method": inc["method"],
        "model_version": inc["model_version"],
        "graph_digest": digest,
        "alerts": alerts,
    }
    with db.write() as conn:
        have = conn.execute(
            select(feedback_graphs.c.digest).where(feedback_graphs.c.digest == digest)
        ).first()
        if have is None:
            # ON CONFLICT DO NOTHING: another replica (or thread) may store the same graph between
            # the check and this insert; its row is the same graph, and the feedback must not fail
            conn.execute(
                _insert(db)(feedback_graphs)
                .values(
                    digest=digest,
                    name=graph.name,
                    graph=graph_json if graph_json is not None else graph.to_json(),
                )
                .on_conflict_do_nothing(index_elements=["digest"])
            )
        row["id"] = int(
            conn.execute(incident_feedback.insert().values(**row)).inserted_primary_key[0]
        )
        _refuse_if_merged(conn, incident_id)  # merged since the check above: roll back
    log.info(
        "feedback %d stored: incident %d, root %r, fault type %r, by %r, via %s",
        row["id"],
        incident_id,
        node,
        fault,
        row["by"],
        channel,
    )
    return feedback_out(row)


def _insert(db: Database) -> Any:
    """The dialect's ``insert`` (SQLite or PostgreSQL), the one with ``on_conflict_do_nothing``."""
    return sqlite.insert if db.is_sqlite else postgresql.insert


def feedback_out(row: dict[str, Any]) -> dict[str, Any]:
    """A stored row as :class:`FeedbackOut` fields (``created_at``: ISO 8601, UTC)."""
    return {
        "id": row["id"],
        "incident_id": row["incident_id"],
        "root_cause": row["root_cause"],
        "fault_type": row["fault_type"],
        "by": row["by"],
        "note": row["note"],
        "created_at": datetime.fromtimestamp(row["created_ts"], UTC).isoformat(),
        "confirmed": row["model_top"] == row["root_cause"],
        "model_top": row["model_top"],
        "model_rank": row["model_rank"],
        "method": row.get("method"),
        "model_version": row.get("model_version"),
    }


def list_feedback(db: Database, incident_id: int) -> list[dict[str, Any]]:
    """An incident's feedback, newest first (without the snapshots)."""
    c = incident_feedback.c
    q = (
        select(
            c.id,
            c.incident_id,
            c.root_cause,
            c.fault_type,
            c.by,
            c.note,
            c.created_ts,
            c.model_top,
            c.model_rank,
            c.method,
            c.model_version,
        )
        .where(c.incident_id == incident_id)
        .order_by(c.id.desc())
    )
    with db.read() as conn:
        return [feedback_out(dict(r._mapping)) for r in conn.execute(q)]


def feedback_incidents(
    url: str, since: float | None = None, until: float | None = None
) -> tuple[list[dict[str, Any]], dict[str, DependencyGraph]]:
    """The labelled incidents of a feedback database, in the dataset contract.

    One incident per incident id (its latest feedback given in the period), id
    ``feedback-<incident id>``, graph ``<graph name>-<digest[:12]>``. ``fault_type`` is the stored
    one where the catalog allows it at the root (:func:`node_fault_types`; the engineer's, else
    the model's for that node), else ``None``: the incident labels the root only. Rows stored
    before fault types were checked (``unknown``, a misspelt name) read as ``None`` too.
    ``feedback`` holds ``{"by", "model_top", "model_rank", "created_at"}``.

    Args:
        url: the service's database URL.
        since: only feedback given at or after this time (unix seconds; ``None``: from the first).
        until: only feedback given before this time (unix seconds; ``None``: up to now). A
            training run with ``until=T`` and an evaluation with ``since=T`` share no label.

    Only reads: a SQLite URL whose file does not exist is refused before connecting (SQLite
    would create an empty database there).

    Raises:
        NotAvailableError: the database cannot be opened (a SQLite file that does not exist
            included) or holds no feedback table.
    """
    from pathlib import Path

    from sqlalchemy import inspect
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import SQLAlchemyError

    try:
        parsed = make_url(url)
    except Exception:  # Database(url) below reports a URL that does not parse
        parsed = None
    if parsed is not None and parsed.get_backend_name() == "sqlite":
        file = parsed.database  # None or ":memory:": in memory; "file:..." with uri=true: a URI
        uri_mode = str(parsed.query.get("uri", "")).lower() in ("true", "1")
        if file and file != ":memory:" and not uri_mode and not Path(file).is_file():
            raise NotAvailableError(
                f"cannot read the feedback database {shown_url(url)!r}: no such file {file}"
            )
    try:
        db = Database(url)
        names = set(inspect(db.engine).get_table_names())
    except (ConfigError, SQLAlchemyError) as err:
        raise NotAvailableError(_unreadable(url, err)) from None
    try:
        if "incident_feedback" not in names:
            raise NotAvailableError(
                f"{shown_url(url)!r} holds no incident_feedback table (is it the service's database?)"
            )
        c = incident_feedback.c
        latest = select(c.incident_id, c.id).order_by(c.incident_id, c.id)
        if since is not None:
            latest = latest.where(c.created_ts >= since)
        if until is not None:
            latest = latest.where(c.created_ts < until)
        with db.read() as conn:
            last: dict[int, int] = {}
            for inc_id, fid in conn.execute(latest):
                last[int(inc_id)] = int(fid)
            rows = []
            ids = sorted(last.values())
            for i in range(0, len(ids), 500):
                q = select(incident_feedback).where(c.id.in_(ids[i : i + 500]))
                rows.extend(dict(r._mapping) for r in conn.execute(q))
            digests = sorted({r["graph_digest"] for r in rows})
            graphs: dict[str, DependencyGraph] = {}
            names_of: dict[str, str] = {}
            for d in digests:
                g = conn.execute(
                    select(feedback_graphs).where(feedback_graphs.c.digest == d)
                ).first()
                if g is None:
                    continue
                name = f"{g.name}-{d[:12]}"
                obj = dict(g.graph)
                obj["name"] = name
                graphs[name] = DependencyGraph.from_json(obj)
                names_of[d] = name
    finally:
        db.dispose()
    return _labelled(rows, graphs, names_of), graphs


def _unreadable(url: str, err: BaseException) -> str:
    """The one-line error for a feedback database ``url`` that cannot be read: the URL with its
    password masked (:func:`~fleetmind.serving.db.shown_url`) and the first line of the driver's
    error (SQLAlchemy appends its "Background on this error" link on a line of its own)."""
    first = (str(err).strip().splitlines() or [type(err).__name__])[0]
    if isinstance(err, ConfigError):  # Database refused the URL: its line says why, unquoted
        return f"cannot read the feedback database: {first}"
    return f"cannot read the feedback database {shown_url(url)!r}: {safe_uri(first)}"


def _labelled(
    rows: list[dict[str, Any]], graphs: dict[str, DependencyGraph], names_of: dict[str, str]
) -> list[dict[str, Any]]:
    """Feedback rows as incidents of the dataset contract (see :func:`feedback_incidents`);
    ``names_of``: graph digest -> graph name in ``graphs``."""
    out = []
    for r in sorted(rows, key=lambda r: r["incident_id"]):
        name = names_of.get(r["graph_digest"])
        if name is None or r["root_cause"] not in graphs[name].index:
            continue
        allowed = node_fault_types(graphs[name].node(r["root_cause"]))
        out.append(
            {
                "id": f"feedback-{r['incident_id']}",
                "graph": name,
                "alerts": r["alerts"],
                "root_cause": r["root_cause"],
                "fault_type": r["fault_type"] if r["fault_type"] in allowed else None,
                "feedback": {
                    "by": r["by"],
                    "model_top": r["model_top"],
                    "model_rank": r["model_rank"],
                    "created_at": datetime.fromtimestamp(r["created_ts"], UTC).isoformat(),
                },
            }
        )
    return out
