"""``reserve=true`` placements on two workers (or replicas) of one database never book a GPU twice.

``Services.place_lock`` serialises deciding and holding within one process only; with
``fleetmind serve --workers 2`` each worker decided on the holds it read and booked its choice
unchecked, so 12 concurrent whole-node requests on an 8-node fleet were all accepted. The hold
now re-reads the chosen node inside its write transaction and the placement decides again when
capacity was taken meanwhile, as the extender does (``tests/test_scheduler_holds.py``).

Upstream reference: SQLite allows one writer at a time and a write statement takes the database's
write lock for the rest of its transaction (sqlite.org/lockingv3.html, "RESERVED" lock), so the
re-read inside :meth:`DbReservations.hold` sees every committed hold.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from serving_helpers import two_a100_hosts

from fleetmind.serving.app import create_app
from fleetmind.serving.scheduler import placement_router
from fleetmind.serving.scheduler.reservations import DbReservations, reservations_table
from fleetmind.serving.settings import Settings
from fleetmind.serving.telemetry.sim import SimSource

PLACE = "/api/v1/placements"


@contextmanager
def _workers(url: str, used: set[str] = frozenset()) -> Iterator[tuple[TestClient, TestClient]]:
    """Two workers (own apps, engines and ``DbReservations``) on one SQLite file."""
    settings = Settings(
        database_url=url,
        rca_model="baseline:upstream-coverage",
        placement_model="heuristic:builtin-bestfit",
        incident_worker=False,
    )
    with ExitStack() as stack:
        a, b = (stack.enter_context(TestClient(create_app(settings))) for _ in range(2))
        for c in (a, b):
            c.app.state.services.telemetry = SimSource(two_a100_hosts(used=used))
            assert isinstance(c.app.state.services.reservations, DbReservations)
        assert a.app.state.services.reservations is not b.app.state.services.reservations
        with a.app.state.services.db.write() as conn:
            conn.execute(reservations_table.delete())
        yield a, b


def _job(job_id: str) -> dict[str, Any]:
    return {"job_id": job_id, "num_gpu": 1, "reserve": True}


def _overtaken(a: TestClient, b: TestClient, times: int = 1) -> list[Any]:
    """Make worker B place a job of its own while worker A is between deciding and holding (the
    first ``times`` holds of A); B's answers come back in the list."""
    res = a.app.state.services.reservations
    real = res.hold
    answers: list[Any] = []

    def hold(*args: Any, **kw: Any) -> bool:
        if len(answers) < times:
            answers.append(b.post(PLACE, json=_job(f"b-{len(answers)}")))
        return real(*args, **kw)

    res.hold = hold  # type: ignore[method-assign]
    return answers


def _held_nodes(c: TestClient) -> list[str]:
    return sorted(r["node"] for r in c.app.state.services.reservations.rows())


def test_a_placement_overtaken_by_another_worker_is_made_again(tmp_path: Path) -> None:
    with _workers(f"sqlite:///{tmp_path}/w.db") as (a, b):
        answers = _overtaken(a, b)
        r = a.post(PLACE, json=_job("a-0"))
        assert r.status_code == 200, r.text
        (other,) = answers
        assert other.status_code == 200, other.text
        assert r.json()["node"] != other.json()["node"]
        assert _held_nodes(a) == ["gpu-a", "gpu-b"]


def test_the_last_node_goes_to_one_worker_and_the_other_gets_409(tmp_path: Path) -> None:
    """Only gpu-b is free: B takes it while A is between deciding and holding; A decides again,
    finds nothing, and answers 409 (before: both held gpu-b)."""
    with _workers(f"sqlite:///{tmp_path}/w.db", used={"gpu-a"}) as (a, b):
        answers = _overtaken(a, b)
        r = a.post(PLACE, json=_job("a-0"))
        assert answers[0].status_code == 200 and answers[0].json()["node"] == "gpu-b"
        assert r.status_code == 409, r.text
        assert "not enough free GPU" in r.json()["detail"]
        rows = a.app.state.services.reservations.rows()
        assert [(x["pod_key"], x["node"]) for x in rows] == [("placement:b-0", "gpu-b")]


def test_a_placement_overtaken_every_time_gets_503(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Capacity taken before every hold: a bounded number of decisions, then 503 with a reason."""
    monkeypatch.setattr(placement_router, "HOLD_TRIES", 2)
    with _workers(f"sqlite:///{tmp_path}/w.db") as (a, b):
        res = a.app.state.services.reservations
        real = res.hold
        other = b.app.state.services.reservations

        def hold(key: str, option: Any, job: Any, **kw: Any) -> bool:
            other.hold(f"placement:thief-{option.node}", option, job)  # B takes it first
            return real(key, option, job, **kw)

        res.hold = hold  # type: ignore[method-assign]
        r = a.post(PLACE, json=_job("a-0"))
        assert r.status_code == 503, r.text
        assert "taken by other placements 2 times" in r.json()["detail"]
        assert "placement:a-0" not in {x["pod_key"] for x in res.rows()}
