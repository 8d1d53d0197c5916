"""The incident worker's set-aside of an alert whose grouping the database refused.

When a one-alert batch fails with a data exception (SQLSTATE class 22), the manager sets that
alert aside so later alerts are not held up behind it. It must set aside exactly the row the
failed batch read, and keep the incident and node that row already had: an alert grouped before
and pending again after a status change stays in its incident.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from serving_helpers import alert, webhook
from sqlalchemy.exc import DataError

from fleetmind.serving.app import create_app
from fleetmind.serving.settings import Settings

os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")

TOKEN = "set-aside-token"
H = {"Authorization": f"Bearer {TOKEN}"}


def _client(tmp_path: Path) -> TestClient:
    settings = Settings(
        database_url=f"sqlite:///{tmp_path}/aside.db",
        rca_model="baseline:upstream-coverage",
        placement_model="heuristic:builtin-bestfit",
        incident_worker=False,
        api_token=TOKEN,
    )
    return TestClient(create_app(settings), headers=H)


def _alerts(c: TestClient) -> dict[str, dict[str, Any]]:
    return {a["labels"]["alertname"]: a for a in c.get("/api/v1/alerts").json()}


def test_a_refused_status_change_keeps_the_alert_in_its_incident(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    labels = {"alertname": "Hot", "cluster": "c0", "node": "c0-h1"}
    with _client(tmp_path) as c:
        manager = c.app.state.services.incidents
        assert c.post("/api/v1/alerts", json=webhook([alert(labels, fingerprint="f1")])).is_success
        assert manager.process_pending() == 1
        inc = _alerts(c)["Hot"]["incident_id"]
        assert inc is not None
        resolved = alert(labels, status="resolved", fingerprint="f1")
        assert c.post("/api/v1/alerts", json=webhook([resolved], status="resolved")).is_success
        store, real, refused = manager.store, manager.store.mark_grouped, []

        def refuse_twice(conn: Any, done: list[dict[str, Any]]) -> int:
            if len(refused) < 2:  # the status change's grouping: in its batch, then alone
                refused.append(done)
                raise DataError("UPDATE alerts", {}, Exception("value too long"))
            return real(conn, done)

        monkeypatch.setattr(store, "mark_grouped", refuse_twice)
        assert manager.process_pending() == 1
        assert manager.set_aside == 1
        got = _alerts(c)["Hot"]
        assert got["incident_id"] == inc  # before: None, the incident's count naming a lost alert
        assert got["status"] == "resolved"


def test_the_alert_set_aside_is_the_one_refused_not_one_pending_since(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    old = {"alertname": "Old", "cluster": "c0", "node": "c0-h1"}
    with _client(tmp_path) as c:
        manager = c.app.state.services.incidents
        assert c.post("/api/v1/alerts", json=webhook([alert(old, fingerprint="old")])).is_success
        assert manager.process_pending() == 1
        bad = alert({"alertname": "Bad", "cluster": "c0", "node": "c0-h2"}, fingerprint="bad")
        assert c.post("/api/v1/alerts", json=webhook([bad])).is_success
        bad_id = _alerts(c)["Bad"]["id"]
        store, real = manager.store, manager.store.mark_grouped

        def refuse_bad(conn: Any, done: list[dict[str, Any]]) -> int:
            if any(d["_id"] == bad_id and d["_inc"] is not None for d in done):
                raise DataError("UPDATE alerts", {}, Exception("refused"))
            return real(conn, done)

        real_aside = manager._set_aside

        def old_resolves_first(err: Exception) -> int:
            # between the refused batch of one and the set-aside, the older alert resolves and
            # is pending again (ingestion does not take the grouping lock)
            resolved = alert(old, status="resolved", fingerprint="old")
            assert c.post("/api/v1/alerts", json=webhook([resolved], status="resolved")).is_success
            return real_aside(err)

        monkeypatch.setattr(store, "mark_grouped", refuse_bad)
        monkeypatch.setattr(manager, "_set_aside", old_resolves_first)
        manager.process_pending()
        monkeypatch.setattr(manager, "_set_aside", real_aside)
        while manager.process_pending():
            pass
        got = _alerts(c)
        assert got["Bad"]["incident_id"] is None  # set aside
        assert got["Old"]["incident_id"] is not None  # before: Old was set aside instead
        assert got["Old"]["status"] == "resolved"
        with c.app.state.services.db.read() as conn:
            pending = conn.exec_driver_sql("SELECT count(*) FROM alerts WHERE pending").scalar()
        assert pending == 0


def test_a_refused_alert_that_changed_before_its_set_aside_is_not_counted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The refused alert itself resolves between the failed batch and the set-aside: the
    set-aside's UPDATE (fenced on the ``updated_ts`` read) matches no row, so nothing is set
    aside, counted or logged; the alert stays pending and is grouped with its new status."""
    bad = {"alertname": "Bad", "cluster": "c0", "node": "c0-h2"}
    with _client(tmp_path) as c:
        manager = c.app.state.services.incidents
        assert c.post("/api/v1/alerts", json=webhook([alert(bad, fingerprint="bad")])).is_success
        store, real, calls = manager.store, manager.store.mark_grouped, []

        def refuse_first_two(conn: Any, done: list[dict[str, Any]]) -> int:
            calls.append(done)
            if len(calls) <= 2:  # the batch, then the batch of one
                raise DataError("UPDATE alerts", {}, Exception("refused"))
            return real(conn, done)

        real_aside = manager._set_aside

        def resolves_first(err: Exception) -> int:
            resolved = alert(bad, status="resolved", fingerprint="bad")
            assert c.post("/api/v1/alerts", json=webhook([resolved], status="resolved")).is_success
            return real_aside(err)

        monkeypatch.setattr(store, "mark_grouped", refuse_first_two)
        monkeypatch.setattr(manager, "_set_aside", resolves_first)
        with caplog.at_level(logging.WARNING, logger="fleetmind.serving"):
            assert manager.process_pending() == 0  # before: 1, though nothing was set aside
        assert manager.set_aside == 0  # before: 1
        assert not [r for r in caplog.records if "not grouped" in r.getMessage()]  # before: one
        with c.app.state.services.db.read() as conn:
            pending = conn.exec_driver_sql("SELECT count(*) FROM alerts WHERE pending").scalar()
        assert pending == 1  # grouped again, with its new status
        monkeypatch.setattr(manager, "_set_aside", real_aside)
        assert manager.process_pending() == 1
        assert _alerts(c)["Bad"]["status"] == "resolved"
