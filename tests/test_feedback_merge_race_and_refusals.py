"""Feedback posted while its incident is merged, feedback of incidents merged before revision
``0012``, and the incident page's refusals naming a colleague's newer verdict.

* A post whose incident is merged after the post first read it (the incident worker merging in
  between: seconds on the first post after a graph swap) is refused (422), never left on the
  merged incident, on SQLite and PostgreSQL; on PostgreSQL also with the two transactions
  overlapping, in either order (a merge waiting for the post moves its row).
* Migration ``0012`` moves feedback stored on merged incidents to the end of their
  ``merged_into`` chain (ids kept), on SQLite and PostgreSQL.
* A form refused for an expired token (403) or a merged incident (422) names feedback newer than
  the page showed (the page comes back with the newest id, so the refusal that follows would not);
  a ``seen`` of non-ASCII digits (``"²"``, which ``str.isdigit`` accepts) is no 500; the stale-page
  message isolates a name with a right-to-left override (U+2068 ... U+2069).

The alerts are Alertmanager v4 webhook objects (``tests/serving_helpers.py``, after
https://prometheus.io/docs/alerting/latest/configuration/#webhook_config).
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from serving_helpers import PgCluster, alert, webhook
from sqlalchemy import select, text
from test_feedback_merge_and_stale import (
    ORIGIN,
    H,
    login,
    make_settings,
    seen_of,
    storm_of,
)
from ui_helpers import TRUE_ROOT, storm_alerts

import fleetmind.serving.feedback as feedback_mod
from fleetmind.serving import migrations
from fleetmind.serving.app import create_app
from fleetmind.serving.db import Database, incident_feedback, incidents

FB = "/api/v1/incidents/{}/feedback"
DOWN = {"alertname": "HostDown", "cluster": "c0", "severity": "critical"}


@pytest.fixture
def client(tmp_path: Path) -> Iterator[TestClient]:
    """The app with the storm of ``ui_helpers`` received and grouped (bearer token set)."""
    with app_at(tmp_path, f"sqlite:///{tmp_path}/fb.db") as c:
        assert c.post("/api/v1/alerts", json=webhook(storm_alerts())).status_code == 200
        c.app.state.services.incidents.process_pending()
        yield c


@pytest.fixture
def pg_url(pg: PgCluster) -> str:
    pg.psql("DROP SCHEMA public CASCADE; CREATE SCHEMA public")
    return pg.url


def two_host_incidents(c: TestClient) -> tuple[int, int]:
    """Two incidents, one per host down (10 s apart); returns their ids (c0-h0's, c0-h1's)."""
    t0 = datetime.now(UTC) - timedelta(minutes=5)
    for node, fp, dt in (("c0-h0", "a", 0), ("c0-h1", "b", 10)):
        starts = (t0 + timedelta(seconds=dt)).isoformat()
        c.post(
            "/api/v1/alerts",
            json=webhook([alert({**DOWN, "node": node}, starts=starts, fingerprint=fp)]),
        )
        c.app.state.services.incidents.process_pending()
    ids = {i["nodes"][0]: i["id"] for i in c.get("/api/v1/incidents").json()}
    return ids["c0/host/c0-h0"], ids["c0/host/c0-h1"]


def app_at(tmp_path: Path, db_url: str) -> TestClient:
    settings = make_settings(tmp_path).model_copy(update={"database_url": db_url})
    c = TestClient(create_app(settings))
    c.headers.update(H)
    return c


def bys(c: TestClient, inc: int) -> list[str]:
    return [f["by"] for f in c.get(FB.format(inc)).json()]


def test_a_post_overlapping_a_merge_is_refused_not_left_on_the_merged_incident(
    tmp_path: Path, db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    with app_at(tmp_path, db_url) as c:
        services = c.app.state.services
        h0, h1 = two_host_incidents(c)
        hash_graph = feedback_mod._cached_digest

        def merging(graph: Any) -> Any:  # the worker merges h0 into h1 while the post hashes
            with services.db.write() as conn:
                services.incidents.store.merge(conn, h1, h0, time.time())
            return hash_graph(graph)

        monkeypatch.setattr(feedback_mod, "_cached_digest", merging)
        r = c.post(FB.format(h0), json={"root_cause": "c0/host/c0-h0", "by": "carol"})
        monkeypatch.setattr(feedback_mod, "_cached_digest", hash_graph)
        assert r.status_code == 422, r.text
        assert f"send feedback for incident {h1}" in r.json()["detail"]
        assert bys(c, h0) == [] and bys(c, h1) == []
        assert feedback_mod.feedback_incidents(db_url)[0] == []  # no label of a merged incident
        assert c.post(FB.format(h1), json={"root_cause": "c0/host/c0-h0", "by": "carol"}).is_success


def waiting_on_a_lock(db: Database, done: threading.Event, within_s: float = 20.0) -> bool:
    """Whether a PostgreSQL backend waits on a lock before ``done`` is set (polled)."""
    q = text("SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'")
    end = time.monotonic() + within_s
    while time.monotonic() < end and not done.is_set():
        with db.engine.connect() as conn:
            if conn.execute(q).scalar_one():
                return True
        time.sleep(0.02)
    return False


def test_on_postgresql_a_post_waits_for_an_uncommitted_merge_and_is_refused(
    tmp_path: Path, pg_url: str
) -> None:
    with app_at(tmp_path, pg_url) as c:
        services = c.app.state.services
        h0, h1 = two_host_incidents(c)
        merged, release = threading.Event(), threading.Event()

        def merge() -> None:  # the incident worker's transaction, held open
            with services.db.write() as conn:
                services.incidents.store.merge(conn, h1, h0, time.time())
                merged.set()
                release.wait(30)

        merger = threading.Thread(target=merge)
        merger.start()
        assert merged.wait(10)
        answer: dict[str, Any] = {}
        posted = threading.Event()

        def post() -> None:
            answer["r"] = c.post(FB.format(h0), json={"root_cause": "c0/host/c0-h0", "by": "eve"})
            posted.set()

        poster = threading.Thread(target=post)
        poster.start()
        waited = waiting_on_a_lock(services.db, posted)
        release.set()
        merger.join(30)
        poster.join(30)
        assert answer["r"].status_code == 422, answer["r"].text
        assert waited  # it waited for the merge's row lock
        assert bys(c, h0) == [] and bys(c, h1) == []


def test_on_postgresql_a_merge_waiting_for_a_post_moves_its_row(
    tmp_path: Path, pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    with app_at(tmp_path, pg_url) as c:
        services = c.app.state.services
        h0, h1 = two_host_incidents(c)
        locked, release = threading.Event(), threading.Event()
        check = feedback_mod._refuse_if_merged

        def holding(conn: Any, incident_id: int) -> None:  # the post holds its row lock
            check(conn, incident_id)
            locked.set()
            release.wait(30)

        monkeypatch.setattr(feedback_mod, "_refuse_if_merged", holding)
        answer: dict[str, Any] = {}
        poster = threading.Thread(
            target=lambda: answer.setdefault(
                "r", c.post(FB.format(h0), json={"root_cause": "c0/host/c0-h0", "by": "eve"})
            )
        )
        poster.start()
        assert locked.wait(20)
        merge_done = threading.Event()

        def merge() -> None:
            with services.db.write() as conn:
                services.incidents.store.merge(conn, h1, h0, time.time())
            merge_done.set()

        merger = threading.Thread(target=merge)
        merger.start()
        assert waiting_on_a_lock(services.db, merge_done)  # the merge waits for the post
        release.set()
        poster.join(30)
        merger.join(30)
        assert answer["r"].status_code == 201, answer["r"].text
        # the merge's feedback move ran after the post's commit: the row went with the rest
        assert bys(c, h0) == [] and bys(c, h1) == ["eve"]


def _upgrade_to(db: Database, revision: str) -> None:
    from alembic import command

    with db.engine.connect() as conn:
        command.upgrade(migrations._config(conn), revision)
        conn.commit()


def _incident(inc_id: int, status: str, merged_into: int | None) -> dict[str, Any]:
    return dict(
        id=inc_id,
        status=status,
        opened_ts=1.0,
        updated_ts=1.0,
        first_alert_ts=1.0,
        last_alert_ts=1.0,
        alert_count=1,
        firing_count=0,
        nodes=[],
        clusters=[],
        causes=[],
        merged_into=merged_into,
    )


def _feedback(fb_id: int, inc_id: int) -> dict[str, Any]:
    return dict(
        id=fb_id,
        incident_id=inc_id,
        root_cause="c0/host/c0-h1",
        by=f"by{fb_id}",
        created_ts=float(fb_id),
        graph_digest="d",
        alerts=[],
    )


def test_revision_0012_moves_feedback_of_merged_incidents_to_the_end_of_the_chain(
    db_url: str,
) -> None:
    db = Database(db_url)
    _upgrade_to(db, "0011")
    with db.engine.begin() as conn:  # 1 -> 2 -> 3 merged before the upgrade; 4 open; 5 -> gone
        conn.execute(
            incidents.insert(),
            [
                _incident(1, "merged", 2),
                _incident(2, "merged", 3),
                _incident(3, "open", None),
                _incident(4, "resolved", None),
                _incident(5, "merged", 99),
            ],
        )
        conn.execute(
            incident_feedback.insert(),
            [_feedback(10, 1), _feedback(11, 2), _feedback(12, 3), _feedback(13, 4)]
            + [_feedback(14, 5)],
        )
        if not db.is_sqlite:  # explicit ids: move the sequences past them (check_sequences)
            for table in ("incidents", "incident_feedback"):
                conn.execute(text(f"SELECT setval(pg_get_serial_sequence('{table}', 'id'), 100)"))
    assert db.migrate() == "0011"
    with db.read() as conn:
        assert migrations.current(conn) == migrations.head() >= "0012"
        c = incident_feedback.c
        rows = dict(conn.execute(select(c.id, c.incident_id).order_by(c.id)).all())
    # to the end of the chain, ids kept; one merged into a deleted incident goes to that id
    assert rows == {10: 3, 11: 3, 12: 3, 13: 4, 14: 99}
    assert db.migrate() == migrations.head()  # idempotent
    db.dispose()


def flash_of(html: str) -> str:
    return re.search(r'id="flash"[^>]*>(.*?)</div>', html, re.S).group(1)


def test_an_expired_form_names_a_verdict_saved_since_the_page(client: TestClient) -> None:
    storm = storm_of(client)
    inc, page = storm["id"], f"/ui/incidents/{storm['id']}"
    login(client)
    seen = seen_of(client.get(page).text)
    third = storm["causes"][2]["node"]
    assert client.post(FB.format(inc), json={"root_cause": third, "by": "bob"}).is_success
    form = {"csrf": "expired-token", "seen": seen, "root_cause": TRUE_ROOT, "by": "alice"}
    r = client.post(page + "/feedback", data=form, headers=ORIGIN, follow_redirects=False)
    assert r.status_code == 403
    flash = flash_of(r.text)
    assert "expired" in flash and "bob also saved a newer verdict" in flash and third in flash
    assert seen_of(r.text) != seen  # the page is current: a post from it saves
    form = {**form, "csrf": re.search(r'name="csrf" value="([^"]+)"', r.text).group(1)}
    form["seen"] = seen_of(r.text)
    r = client.post(page + "/feedback", data=form, headers=ORIGIN, follow_redirects=False)
    assert r.status_code == 303
    assert bys(client, inc) == ["alice", "bob"]


def test_a_merged_incidents_form_names_a_verdict_saved_since_the_page(tmp_path: Path) -> None:
    with app_at(tmp_path, f"sqlite:///{tmp_path}/fb.db") as c:
        services = c.app.state.services
        h0, h1 = two_host_incidents(c)
        csrf = login(c)
        seen = seen_of(c.get(f"/ui/incidents/{h0}").text)
        with services.db.write() as conn:
            services.incidents.store.merge(conn, h1, h0, time.time())
        assert c.post(FB.format(h1), json={"root_cause": "c0/host/c0-h1", "by": "bob"}).is_success
        form = {"csrf": csrf, "seen": seen, "root_cause": "c0/host/c0-h0", "by": "alice"}
        r = c.post(f"/ui/incidents/{h0}/feedback", data=form, headers=ORIGIN)
        assert r.status_code == 422
        flash = flash_of(r.text)
        assert "was merged into this one" in flash and "bob also saved a newer verdict" in flash
        assert bys(c, h1) == ["bob"]


@pytest.mark.parametrize("seen", ["²", "①"])
def test_a_seen_of_non_ascii_digits_is_no_server_error(client: TestClient, seen: str) -> None:
    inc = storm_of(client)["id"]
    csrf = login(client)
    assert client.post(FB.format(inc), json={"root_cause": TRUE_ROOT, "by": "bob"}).is_success
    client.raise_server_exceptions = False
    form = {"csrf": csrf, "seen": seen, "root_cause": TRUE_ROOT, "by": "alice"}
    r = client.post(
        f"/ui/incidents/{inc}/feedback", data=form, headers=ORIGIN, follow_redirects=False
    )
    assert r.status_code == 303  # read as a form without the check, as an old page's
    assert bys(client, inc) == ["alice", "bob"]


def test_the_stale_page_message_isolates_a_right_to_left_name(client: TestClient) -> None:
    inc = storm_of(client)["id"]
    csrf = login(client)
    rtl = "\u202eecila"
    assert client.post(FB.format(inc), json={"root_cause": TRUE_ROOT, "by": rtl}).is_success
    form = {"csrf": csrf, "seen": "0", "root_cause": TRUE_ROOT, "by": "bob"}
    r = client.post(f"/ui/incidents/{inc}/feedback", data=form, headers=ORIGIN)
    assert r.status_code == 409
    flash = flash_of(r.text)
    # the override ends with its isolate: "saved a newer verdict" is not reversed with it
    assert flash.lstrip().startswith(f"\u2068{rtl}\u2069 saved a newer verdict")
