"""An in-memory SQLite URL is refused at start-up, and the retention purge deletes in short
transactions.

Upstream references: SQLAlchemy gives ``:memory:`` SQLite databases a ``SingletonThreadPool``, one
connection per thread, and every connection to ``:memory:`` opens a database of its own
(docs.sqlalchemy.org, "Threading/Pooling Behavior" of the pysqlite dialect; sqlite.org/inmemorydb.html).
SQLite has one writer at a time (sqlite.org/lockingv3.html), so one long purge transaction blocked
every other writer, other workers included, for its whole length.
"""

from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import func, insert, select

from fleetmind.data.errors import ConfigError
from fleetmind.serving.app import create_app
from fleetmind.serving.db import Database, alerts, incidents
from fleetmind.serving.settings import Settings


@pytest.mark.parametrize("url", ["sqlite://", "sqlite:///:memory:"])
def test_an_in_memory_database_is_refused_with_a_file_to_use(url: str) -> None:
    db = Database(url)
    with pytest.raises(ConfigError) as err:
        db.migrate()
    db.dispose()
    msg = str(err.value)
    assert "\n" not in msg and "in-memory" in msg and "sqlite:///fleetmind.db" in msg


def test_the_service_does_not_start_on_an_in_memory_database() -> None:
    """Before: it started, said ready, and answered 503 to every request."""
    settings = Settings(
        database_url="sqlite://",
        rca_model="baseline:upstream-coverage",
        placement_model="heuristic:builtin-bestfit",
        incident_worker=False,
    )
    with pytest.raises(ConfigError, match="FLEETMIND_DATABASE_URL to a file"):
        with TestClient(create_app(settings)):
            pass


def _alert(i: int, incident: int | None, status: str = "resolved") -> dict[str, Any]:
    return {
        "fingerprint": f"fp{i}", "starts_at": f"s{i}", "starts_ts": 1.0, "ends_ts": 2.0,
        "status": status, "labels": {}, "annotations": {}, "received_ts": 2.0,
        "updated_ts": 2.0, "pending": False, "incident_id": incident,
    }  # fmt: skip


def _incident(i: int, status: str, closed: float | None) -> dict[str, Any]:
    return {
        "id": i, "status": status, "opened_ts": 1.0, "updated_ts": 2.0, "closed_ts": closed,
        "first_alert_ts": 1.0, "last_alert_ts": 2.0, "nodes": [], "clusters": [], "causes": [],
    }  # fmt: skip


def test_purge_deletes_in_chunks_of_short_transactions(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = Database(f"sqlite:///{tmp_path}/p.db")
    db.migrate()
    with db.write() as conn:
        conn.execute(
            insert(incidents),
            [_incident(1, "resolved", 5.0), _incident(2, "merged", 5.0),
             _incident(3, "open", None), _incident(4, "resolved", 50.0)],
        )  # fmt: skip
        rows = [_alert(i, 1 + i % 4) for i in range(40)]  # 10 per incident
        rows += [_alert(100 + i, None) for i in range(7)]  # resolved, in no incident
        rows += [_alert(200, None, "firing")]
        conn.execute(insert(alerts), rows)
    real = db.write
    deleted: list[int] = []

    @contextmanager
    def write() -> Any:
        with real() as conn:
            before = conn.execute(select(func.count()).select_from(alerts)).scalar_one()
            yield conn
            after = conn.execute(select(func.count()).select_from(alerts)).scalar_one()
        deleted.append(before - after)

    monkeypatch.setattr(db, "write", write)
    assert db.purge(before=10.0, chunk=3) == (2, 27)
    assert max(deleted) <= 3 and len(deleted) > 9  # many short transactions, none over the chunk
    with db.read() as conn:
        left = {r.id for r in conn.execute(select(incidents.c.id))}
        n = conn.execute(select(func.count()).select_from(alerts)).scalar_one()
    assert left == {3, 4} and n == 21  # the open and the recent incident's 20, and the firing one
    db.dispose()
