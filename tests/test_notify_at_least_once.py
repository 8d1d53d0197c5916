"""A chat message repeated after a crash between its post and its record carries the same
``fleetmind.dedup_key``, so a receiver can drop the repeat.

Delivery to a plain webhook is at least once (the post comes before the ``notifications`` row says
it was delivered); receivers de-duplicate by an idempotency key, as PagerDuty's Events API v2
``dedup_key`` and Stripe's ``Idempotency-Key`` work: the same key for every retry of one message.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from fleetmind.serving.db import Database
from fleetmind.serving.incidents.store import IncidentStore
from fleetmind.serving.notify import Notifier
from fleetmind.serving.settings import Settings

HOOK = "http://hooks.test/chat"


class Crash(RuntimeError):
    """The process dies between the post and its record."""


class CrashingDb:
    """``db`` whose writes fail once ``armed`` is set (a crash or an outage after a post)."""

    def __init__(self, db: Database) -> None:
        self.db, self.armed = db, False

    def write(self) -> Any:
        if self.armed:
            raise Crash("killed after the post")
        return self.db.write()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.db, name)


def _cause(node: str, score: float) -> dict[str, Any]:
    return {"node": node, "kind": "host", "score": score, "path": [node], "cluster": "c0"} | {
        "fault_type": "host_not_ready"
    }


def test_a_repost_after_a_crash_carries_the_same_dedup_key(tmp_path: Path) -> None:
    db = Database(f"sqlite:///{tmp_path}/n.db")
    db.migrate()
    t = [1_000_000.0]
    with db.write() as conn:
        inc = IncidentStore(db).insert_incident(conn, t[0], t[0])
    db.set_incident_rca(inc, [_cause("c0/host/h1", 0.9)], "gat", None)
    settings = Settings(
        database_url=f"sqlite:///{tmp_path}/n.db",
        incident_worker=False,
        notify_webhook_url=HOOK,
        notify_settle_s=30.0,
    )
    posts: list[dict[str, Any]] = []
    crashing = CrashingDb(db)

    def hook(request: httpx.Request) -> httpx.Response:
        posts.append(json.loads(request.content))
        crashing.armed = True  # the record of this post never happens
        return httpx.Response(200)

    transport = httpx.MockTransport(hook)
    first = Notifier(crashing, settings, clock=lambda: t[0], transport=transport)  # type: ignore[arg-type]
    first.poll()
    t[0] += 31.0
    with pytest.raises(Crash):
        first.poll()  # settled: the message is posted, then the process dies
    assert len(posts) == 1
    crashing.armed = False
    t[0] += 5.0
    again = Notifier(db, settings, clock=lambda: t[0], transport=transport)  # the restart
    again.poll()
    assert len(posts) == 2  # at least once: the post is repeated...
    keys = [p["fleetmind"]["dedup_key"] for p in posts]
    assert keys[0] == keys[1] and keys[0].startswith(f"{inc}-firing-")  # ...with the same key
    t[0] += 5.0
    again.poll()
    assert len(posts) == 2  # recorded now: not sent a third time
    first._client.close()
    again._client.close()
