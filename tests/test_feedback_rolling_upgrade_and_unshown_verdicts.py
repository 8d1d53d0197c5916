"""Feedback left on merged incidents after revision ``0012`` ran (a rolling upgrade), and refused
forms naming a verdict that a merge brought from another incident.

* During a RollingUpdate (``docs/deploy.md``) replicas of release 0.2.0 keep running once a new
  one has migrated the database to head: a 0.2.0 incident worker merges without moving feedback
  (its ``IncidentStore.merge`` updated the alerts and the incident row only, CHANGELOG
  ``[0.2.0]``), and a 0.2.0 feedback post checks the incident only before its insert, so it can
  store on an incident a new worker merged meanwhile. Revision ``0012`` never runs again; the
  incident worker's housekeeping moves such rows to the end of the ``merged_into`` chain, on
  SQLite and PostgreSQL, a cycle in a bounded number of steps, warned about once and not moved
  again while its rows stay; on a clean database it writes nothing and its one read can use the
  feedback index (``EXPLAIN QUERY PLAN``, https://www.sqlite.org/eqp.html; PostgreSQL ``EXPLAIN``
  with sequential scans disabled, https://www.postgresql.org/docs/current/runtime-config-query.html:
  at default settings PostgreSQL may still scan the small feedback table, milliseconds).
* Feedback ids are global: a merged incident's form carries the newest id its own page showed,
  and a verdict stored on the surviving incident before that page was opened has a higher id. A
  refusal then says the page did not show that verdict, not that it was saved since the page was
  opened (also when an incident with such a verdict was merged into the page's incident, and
  when an older replica stored it on the merged incident after the merge and housekeeping moved
  it): on an incident anything was merged into, a newer verdict is named as one the page did not
  show. Names stay bidi isolates.
"""

from __future__ import annotations

import html
import logging
import time
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import event, text, update
from test_feedback_merge_and_stale import ORIGIN, login, seen_of
from test_feedback_merge_race_and_refusals import (
    FB,
    _feedback,
    _incident,
    app_at,
    bys,
    flash_of,
    two_host_incidents,
)

from fleetmind.serving.db import Database, alerts, incident_feedback, incidents
from fleetmind.serving.incidents.store import MERGED_FEEDBACK, move_merged_feedback


def old_release_merge(db: Database, target: int, other: int) -> None:
    """A 0.2.0 incident worker's merge: alerts and the incident row, the feedback left behind."""
    with db.write() as conn:
        conn.execute(update(alerts).where(alerts.c.incident_id == other).values(incident_id=target))
        conn.execute(
            update(incidents)
            .where(incidents.c.id == other)
            .values(status="merged", merged_into=target, closed_ts=time.time())
        )


def old_release_post(db: Database, fb_id: int, incident_id: int) -> None:
    """A 0.2.0 feedback post whose incident was merged after its check: stored there anyway."""
    with db.write() as conn:
        conn.execute(incident_feedback.insert(), [_feedback(fb_id, incident_id)])


def test_housekeeping_moves_feedback_left_on_merged_incidents_during_a_rolling_upgrade(
    tmp_path: Path, db_url: str
) -> None:
    with app_at(tmp_path, db_url) as c:
        services = c.app.state.services
        db = services.db
        h0, h1 = two_host_incidents(c)
        assert c.post(FB.format(h0), json={"root_cause": "c0/host/c0-h0", "by": "carol"}).is_success
        old_release_merge(db, h1, h0)  # the database is at head: 0012 will not run again
        assert bys(c, h1) == []  # carol's verdict is on the merged incident
        services.incidents.housekeeping(force=True)
        assert bys(c, h0) == [] and bys(c, h1) == ["carol"]
        # a new worker's merge, then an old replica's post that checked before it
        store = services.incidents.store
        with db.write() as conn:
            new = store.insert_incident(conn, time.time(), time.time())
        with db.write() as conn:
            store.merge(conn, h1, new, time.time())
        old_release_post(db, 1000, new)
        services.incidents.housekeeping(force=True)
        assert bys(c, new) == [] and bys(c, h1) == ["by1000", "carol"]


def test_on_a_clean_database_housekeeping_writes_no_feedback(tmp_path: Path, db_url: str) -> None:
    with app_at(tmp_path, db_url) as c:
        services = c.app.state.services
        h0, h1 = two_host_incidents(c)
        assert c.post(FB.format(h1), json={"root_cause": "c0/host/c0-h1", "by": "carol"}).is_success
        with services.db.write() as conn:
            services.incidents.store.merge(conn, h1, h0, time.time())
        statements: list[str] = []

        @event.listens_for(services.db.engine, "before_cursor_execute")
        def _record(_conn: Any, _cur: Any, sql: str, *_rest: Any) -> None:
            statements.append(sql)

        assert services.incidents.store.move_merged_feedback() == (0, True)
        event.remove(services.db.engine, "before_cursor_execute", _record)
        assert [s for s in statements if "incident_feedback" in s] == [MERGED_FEEDBACK.text]
        assert bys(c, h1) == ["carol"]


def test_the_merged_feedback_read_can_use_the_feedback_index(db_url: str) -> None:
    db = Database(db_url)
    db.migrate()
    with db.read() as conn:  # that the index can be used, not that the planner always picks it
        if db.is_sqlite:
            steps = [
                r[-1] for r in conn.exec_driver_sql("EXPLAIN QUERY PLAN " + MERGED_FEEDBACK.text)
            ]
            assert all("INDEX" in s or "PRIMARY KEY" in s for s in steps), steps
            assert any("ix_incident_feedback_incident" in s for s in steps), steps
        else:
            conn.execute(text("SET enable_seqscan = off"))
            steps = [r[0] for r in conn.execute(text("EXPLAIN " + MERGED_FEEDBACK.text))]
            assert not any("Seq Scan" in s for s in steps), steps
    db.dispose()


def test_a_cycle_of_merges_stops_after_bounded_steps(db_url: str) -> None:
    db = Database(db_url)
    db.migrate()
    with db.engine.begin() as conn:  # 1 -> 2 -> 1 (no merge makes one; a hand edit may)
        conn.execute(incidents.insert(), [_incident(1, "merged", 2), _incident(2, "merged", 1)])
        conn.execute(incident_feedback.insert(), [_feedback(10, 1), _feedback(11, 2)])
    with db.engine.begin() as conn:
        assert move_merged_feedback(conn) == (2, False)
    with db.engine.begin() as conn:
        assert conn.execute(MERGED_FEEDBACK).scalar_one() == 2  # still there, nowhere to end
    db.dispose()


def test_housekeeping_warns_of_rows_it_cannot_place(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with app_at(tmp_path, f"sqlite:///{tmp_path}/fb.db") as c:
        services = c.app.state.services
        with services.db.write() as conn:
            conn.execute(
                incidents.insert(), [_incident(901, "merged", 902), _incident(902, "merged", 901)]
            )
            conn.execute(incident_feedback.insert(), [_feedback(910, 901)])
        with caplog.at_level(logging.WARNING, logger="fleetmind.serving"):
            services.incidents.housekeeping(force=True)
        assert any(
            "moved 1 rows" in r.getMessage() and "loops" in r.getMessage() for r in caplog.records
        )


def test_rows_a_cycle_keeps_are_not_moved_again_every_minute(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with app_at(tmp_path, f"sqlite:///{tmp_path}/fb.db") as c:
        services = c.app.state.services
        with services.db.write() as conn:
            conn.execute(
                incidents.insert(), [_incident(901, "merged", 902), _incident(902, "merged", 901)]
            )
            conn.execute(incident_feedback.insert(), [_feedback(910, 901)])
        services.incidents.housekeeping(force=True)  # moved around the cycle once, warned
        updates: list[str] = []

        @event.listens_for(services.db.engine, "before_cursor_execute")
        def _record(_conn: Any, _cur: Any, sql: str, *_rest: Any) -> None:
            if sql.lstrip().upper().startswith("UPDATE INCIDENT_FEEDBACK"):
                updates.append(sql)

        caplog.clear()
        with caplog.at_level(logging.INFO, logger="fleetmind.serving"):
            for _ in range(3):
                services.incidents.housekeeping(force=True)
        assert updates == []  # no write lock held for MERGE_STEPS updates a minute
        assert not [r for r in caplog.records if "moved" in r.getMessage()]
        # a row an older replica leaves on a merged incident meanwhile is still moved
        with services.db.write() as conn:
            conn.execute(
                incidents.insert(),
                [_incident(903, "merged", 904), _incident(904, "resolved", None)],
            )
            conn.execute(incident_feedback.insert(), [_feedback(911, 903)])
        services.incidents.housekeeping(force=True)
        event.remove(services.db.engine, "before_cursor_execute", _record)
        assert bys(c, 904) == ["by911"]
        # the cycle's row gone (retention, a hand fix): housekeeping forgets it
        with services.db.write() as conn:
            conn.execute(incident_feedback.delete().where(incident_feedback.c.incident_id < 903))
        assert services.incidents.store.move_merged_feedback() == (0, True)


def merged_form(c: TestClient, by: str) -> tuple[int, int, str, str]:
    """Incident h1 with ``by``'s verdict, then h0's page opened (no feedback: ``seen`` 0), then
    h0 merged into h1 by the incident worker; returns h0, h1, the sign-in token and h0's seen."""
    services = c.app.state.services
    h0, h1 = two_host_incidents(c)
    assert c.post(FB.format(h1), json={"root_cause": "c0/host/c0-h1", "by": by}).is_success
    csrf = login(c)
    seen = seen_of(c.get(f"/ui/incidents/{h0}").text)
    with services.db.write() as conn:
        services.incidents.store.merge(conn, h1, h0, time.time())
    return h0, h1, csrf, seen


def test_a_merged_incidents_form_does_not_date_an_older_verdict_after_the_page(
    tmp_path: Path, db_url: str
) -> None:
    with app_at(tmp_path, db_url) as c:
        h0, h1, csrf, seen = merged_form(c, "bob")
        form = {"csrf": csrf, "seen": seen, "root_cause": "c0/host/c0-h0", "by": "alice"}
        r = c.post(f"/ui/incidents/{h0}/feedback", data=form, headers=ORIGIN)
        assert r.status_code == 422
        flash = html.unescape(flash_of(r.text))
        assert "was merged into this one" in flash
        assert "since the page was opened" not in flash  # bob's came before it
        assert "The latest verdict on this incident is bob's" in flash
        assert "your page did not show it" in flash
        assert bys(c, h1) == ["bob"]


def test_an_expired_merged_form_with_a_right_to_left_name_keeps_it_isolated(
    tmp_path: Path,
) -> None:
    rtl = "\u202eecila"
    with app_at(tmp_path, f"sqlite:///{tmp_path}/fb.db") as c:
        h0, _h1, _csrf, seen = merged_form(c, rtl)
        form = {"csrf": "expired", "seen": seen, "root_cause": "c0/host/c0-h0", "by": "bob"}
        r = c.post(f"/ui/incidents/{h0}/feedback", data=form, headers=ORIGIN)
        assert r.status_code == 403
        flash = html.unescape(flash_of(r.text))
        assert "since the page was opened" not in flash
        assert f"is \u2068{rtl}\u2069's (c0/host/c0-h1); your page did not show it" in flash


def test_a_verdict_merged_in_from_another_incident_is_not_dated_after_the_page(
    tmp_path: Path,
) -> None:
    with app_at(tmp_path, f"sqlite:///{tmp_path}/fb.db") as c:
        services = c.app.state.services
        h0, h1 = two_host_incidents(c)
        assert c.post(FB.format(h1), json={"root_cause": "c0/host/c0-h1", "by": "carol"}).is_success
        assert c.post(FB.format(h0), json={"root_cause": "c0/host/c0-h0", "by": "bob"}).is_success
        csrf = login(c)
        seen = seen_of(c.get(f"/ui/incidents/{h1}").text)  # carol's: bob's came before the page
        with services.db.write() as conn:
            services.incidents.store.merge(conn, h1, h0, time.time())
        form = {"csrf": csrf, "seen": seen, "root_cause": "c0/host/c0-h1", "by": "alice"}
        r = c.post(f"/ui/incidents/{h1}/feedback", data=form, headers=ORIGIN)
        assert r.status_code == 409
        flash = html.unescape(flash_of(r.text))
        assert "since this page was opened" not in flash
        assert flash.lstrip().startswith("The latest verdict on this incident is bob's")
        # one stored after the merge: its time cannot tell whether it came on this incident or
        # was moved here later (an older replica's post on the merged one), so named as unshown
        assert c.post(FB.format(h1), json={"root_cause": "c0/host/c0-h1", "by": "dave"}).is_success
        r = c.post(f"/ui/incidents/{h1}/feedback", data=form, headers=ORIGIN)
        assert r.status_code == 409
        assert "The latest verdict on this incident is dave's" in html.unescape(flash_of(r.text))
        assert "since this page was opened" not in flash_of(r.text)
        assert bys(c, h1) == ["dave", "bob", "carol"]


def test_a_verdict_moved_here_after_the_page_opened_is_not_dated_after_it(
    tmp_path: Path, db_url: str
) -> None:
    with app_at(tmp_path, db_url) as c:
        services = c.app.state.services
        h0, h1 = two_host_incidents(c)
        with services.db.write() as conn:  # a new worker's merge at M
            services.incidents.store.merge(conn, h1, h0, time.time())
        time.sleep(0.05)
        with services.db.write() as conn:  # an older replica's post on h0, after M
            row = {**_feedback(1000, h0), "created_ts": time.time()}
            conn.execute(incident_feedback.insert(), [row])
        time.sleep(0.05)
        csrf = login(c)
        seen = seen_of(c.get(f"/ui/incidents/{h1}").text)  # opened after it: does not show it
        services.incidents.housekeeping(force=True)  # moved to h1
        assert bys(c, h1) == ["by1000"]
        form = {"csrf": csrf, "seen": seen, "root_cause": "c0/host/c0-h1", "by": "alice"}
        r = c.post(f"/ui/incidents/{h1}/feedback", data=form, headers=ORIGIN)
        assert r.status_code == 409
        flash = html.unescape(flash_of(r.text))
        assert "since this page was opened" not in flash
        assert flash.lstrip().startswith("The latest verdict on this incident is by1000's")
        assert bys(c, h1) == ["by1000"]
