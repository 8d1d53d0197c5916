"""Feedback that becomes labels: an engineer confirms or corrects an incident's root cause.

``POST /api/v1/incidents/{id}/feedback`` (and the form on the incident page) stores one row in
``incident_feedback``: the node the engineer names, who and why, what the model said (its top cause
and the rank it gave the named node), and a snapshot of what training needs, the incident's alerts
(Alertmanager v4 objects) and the served graph (stored once per content hash in
``feedback_graphs``), so a label stays usable after the graph is replaced. The latest feedback of an
incident wins.

:func:`feedback_incidents` turns the table into incidents of the dataset contract
(``{"id", "graph", "alerts", "root_cause", "fault_type"}`` plus graphs), which ``fleetmind rca train
--feedback-db URL`` adds to training and ``fleetmind rca evaluate --feedback-db URL`` scores.
"""

from __future__ import annotations

import hashlib
import json
import time
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator
from sqlalchemy import select

from fleetmind.data.errors import ConfigError, DataError, NotAvailableError
from fleetmind.data.graph import DependencyGraph
from fleetmind.serving.db import Database, feedback_graphs, incident_feedback
from fleetmind.serving.incidents import alert_dict
from fleetmind.serving.schemas import NO_NUL

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
        description="fault type, when known (default: the model's)",
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


class IncidentNotFound(LookupError):
    """No such incident."""


def _graph_digest(graph: DependencyGraph) -> tuple[str, dict[str, Any]]:
    obj = graph.to_json()
    text = json.dumps(obj, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest(), obj


def record_feedback(
    db: Database, graph: DependencyGraph, incident_id: int, fb: FeedbackIn
) -> dict[str, Any]:
    """Validate and store one feedback row; returns it (as :class:`FeedbackOut` fields).

    Raises:
        IncidentNotFound: no incident ``incident_id``.
        DataError: ``root_cause`` is not a node of the served graph (a 422).
    """
    inc = db.get_incident(incident_id)
    if inc is None:
        raise IncidentNotFound(f"no incident {incident_id}")
    if inc["status"] == "merged" and inc["merged_into"] is not None:
        raise DataError(
            f"incident {incident_id} was merged into {inc['merged_into']}; "
            f"send feedback for incident {inc['merged_into']}"
        )
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
    causes = inc["causes"] or []
    ranks = {c["node"]: i for i, c in enumerate(causes, start=1)}
    fault = fb.fault_type or next(
        (c.get("fault_type") for c in causes if c["node"] == node and c.get("fault_type")), None
    )
    with db.read() as conn:
        alerts = [alert_dict(r) for r in db.incident_alerts(conn, incident_id, MAX_ALERTS)]
    if not alerts:
        raise DataError(f"incident {incident_id} has no alerts to learn from")
    digest, graph_json = _graph_digest(graph)
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
            conn.execute(
                feedback_graphs.insert().values(digest=digest, name=graph.name, graph=graph_json)
            )
        row["id"] = int(
            conn.execute(incident_feedback.insert().values(**row)).inserted_primary_key[0]
        )
    return feedback_out(row)


def feedback_out(row: dict[str, Any]) -> dict[str, Any]:
    from datetime import UTC, datetime

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
        )
        .where(c.incident_id == incident_id)
        .order_by(c.id.desc())
    )
    with db.read() as conn:
        return [feedback_out(dict(r._mapping)) for r in conn.execute(q)]


def feedback_incidents(
    url: str, default_fault: str = "unknown"
) -> tuple[list[dict[str, Any]], dict[str, DependencyGraph]]:
    """The labelled incidents of a feedback database, in the dataset contract.

    One incident per incident id (its latest feedback), id ``feedback-<incident id>``, graph
    ``<graph name>-<digest[:12]>``. ``fault_type`` is the engineer's, else the model's for that
    node, else ``default_fault``.

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
                f"cannot read the feedback database {url!r}: no such file {file}"
            )
    try:
        db = Database(url)
        names = set(inspect(db.engine).get_table_names())
    except (ConfigError, SQLAlchemyError) as err:
        raise NotAvailableError(f"cannot read the feedback database {url!r}: {err}") from None
    try:
        if "incident_feedback" not in names:
            raise NotAvailableError(
                f"{url!r} holds no incident_feedback table (is it the service's database?)"
            )
        c = incident_feedback.c
        latest = select(c.incident_id, c.id).order_by(c.incident_id, c.id)
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
    out = []
    for r in sorted(rows, key=lambda r: r["incident_id"]):
        name = names_of.get(r["graph_digest"])
        if name is None or r["root_cause"] not in graphs[name].index:
            continue
        out.append(
            {
                "id": f"feedback-{r['incident_id']}",
                "graph": name,
                "alerts": r["alerts"],
                "root_cause": r["root_cause"],
                "fault_type": r["fault_type"] or default_fault,
                "feedback": {
                    "by": r["by"],
                    "model_top": r["model_top"],
                    "model_rank": r["model_rank"],
                },
            }
        )
    return out, graphs
