"""A ranking that fails does not hold up the other rankings or housekeeping.

A ranking the database refuses at every try (PostgreSQL refuses a NaN score in a ``json``
column: "invalid input syntax for type json", SQLSTATE 22P02, a data exception; PostgreSQL,
Appendix A "PostgreSQL Error Codes") is logged and dropped; requeued due now, it failed every
worker loop before housekeeping, so auto-resolve and retention stopped, later incidents were never
ranked and the worker showed as stuck. A ranking that fails for a passing reason (a lock wait, a
lost connection: ``OperationalError``) is due again after a back-off while the rest are ranked. A
model that ranks a cause with a non-finite score is not stored (JSON has no NaN, RFC 8259 §6).
"""

from __future__ import annotations

import dataclasses
import logging
import math
import os
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from fastapi.testclient import TestClient
from serving_helpers import alert, wait_for, webhook
from sqlalchemy.exc import DataError, InternalError, OperationalError, ProgrammingError

from fleetmind.serving.app import create_app
from fleetmind.serving.db import Database
from fleetmind.serving.incidents import manager as manager_module
from fleetmind.serving.incidents.manager import IncidentManager
from fleetmind.serving.incidents.worker import GroupingLag, IncidentWorker, RankSchedule
from fleetmind.serving.settings import Settings

os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")

NAN_REFUSED = DataError(
    "UPDATE incidents", {}, Exception('invalid input syntax for type json: Token "NaN" is invalid')
)
LOCKED = OperationalError("SELECT", {}, Exception("canceling statement due to lock timeout"))


@pytest.fixture()
def manager(tmp_path: Path) -> Any:
    d = Database(f"sqlite:///{tmp_path / 'rank.db'}")
    d.migrate()
    m = IncidentManager(d, SimpleNamespace(view=None, graph=None), None)  # type: ignore[arg-type]
    try:
        yield m
    finally:
        m.stop()
        d.dispose()


def test_a_refused_ranking_is_dropped_and_the_others_are_ranked(
    manager: IncidentManager, caplog: pytest.LogCaptureFixture
) -> None:
    ranked: list[int] = []

    def rank(inc_id: int) -> None:
        if inc_id == 1:
            raise NAN_REFUSED
        ranked.append(inc_id)

    manager._rank = rank  # type: ignore[method-assign]
    manager.schedule.queue([1, 2, 3], time.monotonic())
    with caplog.at_level(logging.WARNING, logger="fleetmind.serving"):
        manager.rank_due()  # before: raised, with 1, 2 and 3 due again at once
    assert ranked == [2, 3]
    assert manager.schedule.take_due(math.inf) == []  # dropped, not retried every loop
    warned = [r.getMessage() for r in caplog.records if "incident 1" in r.getMessage()]
    assert len(warned) == 1 and "NaN" in warned[0]


def test_a_lock_wait_retries_that_ranking_later_and_leaves_the_rest_due(
    manager: IncidentManager,
) -> None:
    ranked: list[int] = []

    def rank(inc_id: int) -> None:
        if inc_id == 2:
            raise LOCKED
        ranked.append(inc_id)

    manager._rank = rank  # type: ignore[method-assign]
    before = time.monotonic()
    manager.schedule.queue([1, 2, 3], before)
    with pytest.raises(OperationalError):
        manager.rank_due()
    after = time.monotonic()
    assert ranked == [1]
    assert manager.schedule.take_due(after) == [3]  # the rest: at the next loop
    # the failed one backs off (before: due again at once, first in line at every loop)
    assert manager.schedule.take_due(before + manager_module.RANK_RETRY_S - 0.001) == []
    assert manager.schedule.take_due(after + manager_module.RANK_RETRY_S) == [2]


def test_the_worker_keeps_house_and_ranks_the_others_past_a_poison_incident(
    manager: IncidentManager,
) -> None:
    """The scenario with the worker's thread: the incidents left unranked at take-over are a
    poison one and two others."""
    ranked: list[int] = []
    attempts: list[int] = []
    house: list[int] = []

    def rank(inc_id: int) -> None:
        if inc_id == 1:
            attempts.append(inc_id)
            raise NAN_REFUSED
        ranked.append(inc_id)

    real_housekeeping = manager.housekeeping

    def housekeeping(now: float | None = None, force: bool = False) -> None:
        house.append(1)
        real_housekeeping(now, force)

    manager._rank = rank  # type: ignore[method-assign]
    manager.housekeeping = housekeeping  # type: ignore[method-assign]
    manager.take_over = lambda: manager.schedule.queue([1, 2, 3], time.monotonic())  # type: ignore[method-assign]
    manager.worker.start()
    assert wait_for(lambda: len(house) >= 3, timeout=60)  # before: never
    assert sorted(ranked) == [2, 3]  # before: []
    assert attempts == [1]  # before: once a loop
    assert manager.last_error is None and manager.stuck_for() == 0.0


class _Leader:
    held = True
    lease_s = 10.0

    def check(self) -> bool:
        return True

    def acquire(self) -> bool:
        return True

    def release(self) -> None:
        self.held = False


class _Lag(GroupingLag):
    def __init__(self) -> None:
        super().__init__(None, None)  # type: ignore[arg-type]

    def refresh(self) -> None:
        pass


def test_a_failed_ranking_does_not_skip_housekeeping() -> None:
    calls: list[str] = []

    class Host:
        def process_pending(self, limit: int = 500, defer: bool = False) -> int:
            return 0

        def rank_due(self, older_than_s: float = 0.0) -> None:
            calls.append("rank")
            raise LOCKED

        def housekeeping(self, now: float | None = None, force: bool = False) -> None:
            calls.append("housekeeping")

        def take_over(self) -> None:
            pass

    worker = IncidentWorker(Host(), _Leader(), RankSchedule(2.0), _Lag())  # type: ignore[arg-type]
    with pytest.raises(OperationalError):  # the loop still fails, and is logged
        worker._work()
    assert calls == ["rank", "housekeeping"]  # before: ["rank"]


def test_a_non_finite_score_is_not_stored(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    settings = Settings(
        database_url=f"sqlite:///{tmp_path}/nan.db",
        rca_model="baseline:upstream-coverage",
        placement_model="heuristic:builtin-bestfit",
        incident_worker=False,
        api_token="nan-token",
    )
    with TestClient(create_app(settings), headers={"Authorization": "Bearer nan-token"}) as c:
        services = c.app.state.services
        impl = services.registry.current.rca.impl
        real = impl.find_root_causes

        def nan_scores(*a: Any, **kw: Any) -> Any:
            result = real(*a, **kw)
            nan = [dataclasses.replace(cause, score=float("nan")) for cause in result.causes]
            return dataclasses.replace(result, causes=nan)

        monkeypatch.setattr(impl, "find_root_causes", nan_scores)
        labels = {"alertname": "Hot", "cluster": "c0", "node": "c0-h1"}
        assert c.post("/api/v1/alerts", json=webhook([alert(labels)])).is_success
        with caplog.at_level(logging.WARNING, logger="fleetmind.serving"):
            assert services.incidents.process_pending() == 1
        assert any("non-finite score" in r.getMessage() for r in caplog.records)
        listed = c.get("/api/v1/incidents")
        assert listed.status_code == 200
        (inc,) = listed.json()
        assert not inc.get("causes")


class _PgError(Exception):
    """A psycopg error's shape as SQLAlchemy wraps it: the SQLSTATE on ``orig``."""

    def __init__(self, sqlstate: str, text: str) -> None:
        super().__init__(text)
        self.sqlstate = sqlstate


@pytest.mark.parametrize(
    "err",
    [
        InternalError(  # a failover to a standby, default_transaction_read_only
            "UPDATE", {}, _PgError("25006", "cannot execute UPDATE in a read-only transaction")
        ),
        ProgrammingError("SELECT", {}, _PgError("42703", 'column "x" does not exist')),  # DDL
    ],
    ids=["read-only", "migration-under-way"],
)
def test_a_database_failing_for_a_while_is_retried_not_dropped(
    manager: IncidentManager, err: Exception
) -> None:
    """Only a refused value (SQLSTATE classes 22 and 23, as ``is_input_error`` reads them) is
    dropped: a database turned read-only or under DDL is an outage, and the ranking was dropped
    until a new alert came (the page said "Not ranked yet.", no root cause was sent)."""

    def rank(inc_id: int) -> None:
        raise err

    manager._rank = rank  # type: ignore[method-assign]
    before = time.monotonic()
    manager.schedule.queue([1], before)
    with pytest.raises(type(err)):
        manager.rank_due()
    assert manager.rankings_dropped == 0
    assert manager.schedule.take_due(before + manager_module.RANK_RETRY_S + 1) == [1]


def test_a_bug_failing_every_ranking_logs_its_traceback_once(
    manager: IncidentManager, caplog: pytest.LogCaptureFixture
) -> None:
    def rank(inc_id: int) -> None:
        raise AttributeError("a bug")

    manager._rank = rank  # type: ignore[method-assign]
    manager.schedule.queue([1, 2, 3], time.monotonic())
    with caplog.at_level(logging.WARNING, logger="fleetmind.serving"):
        manager.rank_due()
    dropped = [r for r in caplog.records if "is dropped" in r.getMessage()]
    assert len(dropped) == 3 and manager.rankings_dropped == 3
    assert sum(bool(r.exc_info) for r in dropped) == 1
