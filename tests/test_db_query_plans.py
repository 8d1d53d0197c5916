"""The frequent statements of the incident worker and the notifier read an index on SQLite.

``EXPLAIN QUERY PLAN`` (https://www.sqlite.org/eqp.html) of the statements as the code runs them:

* auto-resolve's update of quiet ungrouped alerts (every minute, holding the write lock): it walked
  every grouped alert under ``ix_alerts_pending_updated (pending=?)``, 0.6-1.5 s at 2.4M alerts;
  it reads ``ix_alerts_incident (incident_id=?)``, the few ungrouped rows;
* the notifier's poll (every second): ``SCAN notifications`` read every row ever written; it reads
  the partial index of the owed rows (https://www.sqlite.org/partialindex.html);
* a new incident's id on SQLite (``max(incident_feedback.incident_id)``): a full scan per incident.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sqlalchemy import event, func, select

from fleetmind.serving.db import NOTIFICATION_OWED, Database, incident_feedback, notifications


def plan(db: Database, sql: str, params: Any = ()) -> list[str]:
    with db.read() as conn:
        return [r[-1] for r in conn.exec_driver_sql("EXPLAIN QUERY PLAN " + sql, params).all()]


def compiled(db: Database, stmt: Any) -> tuple[str, tuple[Any, ...]]:
    comp = stmt.compile(dialect=db.engine.dialect)
    params = comp.construct_params()
    return str(comp), tuple(params[k] for k in comp.positiontup or ())


def test_auto_resolve_of_ungrouped_alerts_reads_the_incident_index(tmp_path: Path) -> None:
    db = Database(f"sqlite:///{tmp_path}/p.db")
    db.migrate()
    seen: list[tuple[str, Any]] = []

    @event.listens_for(db.engine, "before_cursor_execute")
    def _record(_conn: Any, _cur: Any, sql: str, params: Any, _ctx: Any, _many: bool) -> None:
        if sql.startswith("UPDATE alerts") and "incident_id IS NULL" in sql:
            seen.append((sql, params))

    db.auto_resolve(1000.0, 2000.0)
    assert len(seen) == 1
    steps = plan(db, *seen[0])
    assert any("USING INDEX ix_alerts_incident (incident_id=?)" in s for s in steps), steps
    assert not any("ix_alerts_pending_updated" in s for s in steps), steps
    db.dispose()


def test_the_notifier_poll_reads_the_owed_rows_index(tmp_path: Path) -> None:
    db = Database(f"sqlite:///{tmp_path}/p.db")
    db.migrate()
    steps = plan(db, *compiled(db, select(notifications).where(NOTIFICATION_OWED)))
    assert steps == ["SCAN notifications USING INDEX ix_notifications_owed"], steps
    db.dispose()


def test_the_highest_feedback_incident_id_reads_an_index(tmp_path: Path) -> None:
    db = Database(f"sqlite:///{tmp_path}/p.db")
    db.migrate()
    steps = plan(db, *compiled(db, select(func.max(incident_feedback.c.incident_id))))
    assert any("INDEX ix_incident_feedback_incident" in s for s in steps), steps
    db.dispose()
