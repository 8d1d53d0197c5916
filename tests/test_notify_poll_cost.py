"""The notifier's cost follows what changed, not how many incidents are open.

Alertmanager's ``POST /api/v2/alerts`` takes a list of postable alerts
(prometheus/alertmanager ``api/v2/openapi.yaml``: operation ``postAlerts``, body
``postableAlerts``, an array), as Prometheus' own notifier sends its alerts in batches
(prometheus/notifier/notifier.go): re-sends of many open incidents go in a few posts. A steady poll reads only the incidents that
changed (their ranking or their alerts) and the rows that owe a message.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import event, select

from fleetmind.serving import notify
from fleetmind.serving.db import Database, notifications
from fleetmind.serving.incidents.store import IncidentStore
from fleetmind.serving.notify import Notifier
from fleetmind.serving.settings import Settings

AM = "http://am.test:9093"
ALERTS = AM + "/api/v2/alerts"
T0 = 1_000_000.0


def cause(node: str, score: float = 0.9) -> dict[str, Any]:
    return {"node": node, "kind": "host", "score": score, "path": [node], "cluster": "c0"} | {
        "fault_type": "host_not_ready"
    }


@pytest.fixture
def db(tmp_path: Path) -> Iterator[Database]:
    d = Database(f"sqlite:///{tmp_path}/n.db")
    d.migrate()
    yield d
    d.dispose()


def open_incidents(db: Database, n: int) -> list[int]:
    with db.write() as conn:
        ids = [IncidentStore(db).insert_incident(conn, T0, T0) for _ in range(n)]
    for i in ids:
        db.set_incident_rca(i, [cause("c0/host/h1")], "gat", None)
    return ids


class Posts:
    """An httpx transport recording each post's alerts; answers 400 to a post that holds an
    alert of an incident in ``invalid`` (Alertmanager refuses a request with any invalid alert)."""

    def __init__(self) -> None:
        self.bodies: list[list[dict[str, Any]]] = []
        self.invalid: set[str] = set()

    def __call__(self, request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        self.bodies.append(body)
        bad = any(a["labels"]["incident"] in self.invalid for a in body)
        return httpx.Response(400 if bad else 200)


def make(db: Database, posts: Posts) -> tuple[Notifier, list[float]]:
    settings = Settings(
        database_url=str(db.engine.url),
        incident_worker=False,
        notify_alertmanager_url=AM,
        notify_settle_s=30.0,
        notify_resend_s=60.0,
    )
    t = [T0]
    return Notifier(db, settings, clock=lambda: t[0], transport=httpx.MockTransport(posts)), t


def settled(db: Database, n: Notifier, t: list[float]) -> None:
    n.poll()
    t[0] += 31.0
    n.poll()


def test_resends_of_many_incidents_go_in_batches(
    db: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(notify, "BATCH", 4, raising=False)
    ids = open_incidents(db, 10)
    posts = Posts()
    n, t = make(db, posts)
    settled(db, n, t)
    assert len(posts.bodies) == 10  # a first post is the incident's own
    posts.bodies.clear()
    t[0] += 60.0
    assert n.poll() == 10
    assert [len(b) for b in posts.bodies] == [4, 4, 2]  # the re-sends: 3 posts, not 10
    sent = sorted(int(a["labels"]["incident"]) for b in posts.bodies for a in b)
    assert sent == sorted(ids)
    posts.bodies.clear()
    t[0] += 30.0
    assert n.poll() == 0 and posts.bodies == []  # not due again before 60 s


def test_a_refused_batch_is_posted_again_alert_by_alert(
    db: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(notify, "BATCH", 4, raising=False)
    ids = open_incidents(db, 6)
    posts = Posts()
    n, t = make(db, posts)
    settled(db, n, t)
    posts.bodies.clear()
    posts.invalid = {str(ids[1])}
    t[0] += 60.0
    assert n.poll() == 5  # every alert but the invalid one is taken
    singles = [b for b in posts.bodies if len(b) == 1]
    assert len(singles) == 4  # the refused batch of 4, again one by one; the batch of 2 is taken
    posts.bodies.clear()
    t[0] += 1.0
    n.poll()
    assert posts.bodies == []  # the refused one waits for the next re-send


def test_a_steady_poll_reads_no_unchanged_incident_whole(db: Database) -> None:
    ids = open_incidents(db, 5)
    posts = Posts()
    n, t = make(db, posts)
    settled(db, n, t)
    whole: list[str] = []

    def spy(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        if "incidents.causes" in statement or "notifications.annotations" in statement:
            whole.append(statement)

    event.listen(db.engine, "before_cursor_execute", spy)
    try:
        t[0] += 1.0
        n.poll()
        assert whole == []  # nothing changed, nothing owed: ids and change marks only
        db.set_incident_rca(ids[0], [cause("c0/host/h9")], "gat", None)  # a new top cause
        t[0] += 1.0
        n.poll()
        assert whole  # the changed incident is read whole
    finally:
        event.remove(db.engine, "before_cursor_execute", spy)
    posts.bodies.clear()
    t[0] += 31.0  # settled on the new cause: the old alert ends, the new one fires
    n.poll()
    alerts = [(a["labels"]["cause_node"], "endsAt" in a) for b in posts.bodies for a in b]
    assert alerts == [("c0/host/h1", True), ("c0/host/h9", False)]


def test_more_open_incidents_than_a_page_withdraw_nothing(
    db: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Open incidents beyond any page size (the notifier once read 100,000 at most, so the oldest
    ones' causes were withdrawn as "incident closed" while still open): here a page of 2."""
    real = Database.list_incidents

    def paged(self: Database, status: str | None = "open", limit: int = 100, **kw: Any) -> Any:
        return real(self, status, min(limit, 2), **kw)

    monkeypatch.setattr(Database, "list_incidents", paged)
    open_incidents(db, 5)
    posts = Posts()
    n, t = make(db, posts)
    settled(db, n, t)
    for _ in range(3):
        t[0] += 1.0
        n.poll()
    with db.read() as conn:
        states = [r.state for r in conn.execute(select(notifications.c.state))]
    assert states == ["firing"] * 5
    assert not any("endsAt" in a for b in posts.bodies for a in b)
