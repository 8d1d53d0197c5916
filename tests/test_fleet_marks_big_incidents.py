"""The fleet view's open-incident marks when older open incidents hold very many firing alerts.

``/ui/fleet`` read one row per firing alert of every open incident, oldest incident first, and
stopped at 100,000 rows: once older open incidents held 100,000 firing alerts every newer open
incident's GPUs and hosts lost their marks (and each load decoded 100,000 rows). The marks now
come from one row per distinct (incident, alerting node, alert name), aggregated in the database;
past a cap on those rows the page says the marks are cut."""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")

import pytest  # noqa: E402
from fastapi.testclient import TestClient  # noqa: E402
from serving_helpers import webhook  # noqa: E402
from ui_helpers import storm_alerts  # noqa: E402

from fleetmind.serving.app import create_app  # noqa: E402
from fleetmind.serving.db import alerts, incidents  # noqa: E402
from fleetmind.serving.settings import Settings  # noqa: E402
from fleetmind.serving.ui import auth  # noqa: E402
from fleetmind.serving.ui import router as ui_router  # noqa: E402

TOKEN = "fleet-marks-token"


def _incident(conn: Any, status: str = "open") -> int:
    row = {
        "status": status, "opened_ts": 1.0, "updated_ts": 1.0, "first_alert_ts": 1.0,
        "last_alert_ts": 1.0, "alert_count": 1, "firing_count": 1, "nodes": ["c1/host/c1-h3"],
        "clusters": ["c1"], "causes": [],
    }  # fmt: skip
    return int(conn.execute(incidents.insert().values(**row)).inserted_primary_key[0])


def _alerts(conn: Any, incident_id: int, rows: list[tuple[str, str, str]]) -> None:
    """Grouped alerts of ``incident_id``: (fingerprint, node, alertname), firing unless the
    fingerprint starts with ``resolved``."""
    conn.execute(
        alerts.insert(),
        [
            {
                "fingerprint": key,
                "starts_at": f"t-{key}",
                "starts_ts": 1.0,
                "status": "resolved" if key.startswith("resolved") else "firing",
                "alertname": name,
                "labels": {},
                "annotations": {},
                "node": node,
                "received_ts": 1.0,
                "updated_ts": 1.0,
                "pending": False,
                "incident_id": incident_id,
            }  # fmt: skip
            for key, node, name in rows
        ],
    )


def _old_rows(db: Any) -> list[tuple[int, str, str]]:
    """The marks' rows as the per-alert read gave them (every firing alert of an open incident,
    by incident id then alert id), each (incident, node, alertname) kept at its first place."""
    seen: list[tuple[int, str, str]] = []
    with db.read() as conn:
        open_ids = {r.id for r in conn.execute(incidents.select()) if r.status == "open"}
        for r in conn.execute(alerts.select().order_by(alerts.c.incident_id, alerts.c.id)):
            key = (r.incident_id, r.node, r.alertname)
            if r.status == "firing" and r.incident_id in open_ids and key not in seen:
                seen.append(key)
    return seen


def test_an_older_incidents_many_alerts_hide_no_newer_incident(migrated_db: Any) -> None:
    """200 firing alerts of an older open incident on one host under a 5-row limit: the old read
    returned 5 rows, all of the older incident, and the newer incident had no row. Now one row per
    distinct (incident, node, alertname), in the old first-appearance order; resolved alerts and
    closed incidents give none. Runs on SQLite and PostgreSQL."""
    db = migrated_db
    with db.write() as conn:
        older = _incident(conn)
        _alerts(conn, older, [(f"a-{i}", "c1/host/c1-h3", "KubeNodeNotReady") for i in range(200)])
        _alerts(conn, older, [("a-gpu", "c1/gpu/c1-h3/0", "GpuXidError")])
        closed = _incident(conn, status="resolved")
        _alerts(conn, closed, [("c-0", "c0/host/c0-h2", "HostDown")])
        newer = _incident(conn)
        _alerts(
            conn,
            newer,
            [
                ("b-1", "c0/host/c0-h1", "KubeNodeNotReady"),
                ("b-2", "c0/gpu/c0-h1/1", "GpuXidError"),
                ("b-3", "c0/host/c0-h1", "KubeNodeNotReady"),
                ("resolved-b", "c1/host/c1-h2", "HostDown"),
            ],
        )
    rows = [
        (r["incident_id"], r["node"], r["alertname"])
        for r in db.firing_alerts_of_open_incidents(limit=5)
    ]
    assert rows == [
        (older, "c1/host/c1-h3", "KubeNodeNotReady"),
        (older, "c1/gpu/c1-h3/0", "GpuXidError"),
        (newer, "c0/host/c0-h1", "KubeNodeNotReady"),
        (newer, "c0/gpu/c0-h1/1", "GpuXidError"),
    ]
    assert rows == _old_rows(db)  # what the marks were made of on small inputs
    assert len(db.firing_alerts_of_open_incidents(limit=3)) == 3  # the cap is on distinct rows


def _settings(tmp_path: Path) -> Settings:
    return Settings(
        database_url=f"sqlite:///{tmp_path}/fleet.db",
        rca_model="baseline:upstream-coverage",
        placement_model="heuristic:builtin-bestfit",
        incident_worker=False,
        api_token=TOKEN,
    )


@pytest.fixture
def flooded(tmp_path: Path) -> Iterator[TestClient]:
    """An open incident (id 1) with 100,001 firing alerts on host c1-h3, then the UI tests'
    storm (newer incidents: host c0-h1 down with XIDs on its GPUs, and host c1-h2 down)."""
    with TestClient(create_app(_settings(tmp_path))) as c:
        with c.app.state.services.db.write() as conn:
            flood = _incident(conn)
            _alerts(
                conn,
                flood,
                [(f"flood-{i}", "c1/host/c1-h3", "KubeNodeNotReady") for i in range(100_001)],
            )
        r = c.post(
            "/api/v1/alerts",
            json=webhook(storm_alerts()),
            headers={"Authorization": f"Bearer {TOKEN}"},
        )
        assert r.status_code == 200
        c.app.state.services.incidents.process_pending()
        c.get("/ui/login")
        r = c.post(
            "/ui/login",
            data={"token": TOKEN, "csrf": c.cookies.get(auth.CSRF_COOKIE), "next": "/ui/fleet"},
            follow_redirects=False,
        )
        assert r.status_code == 303
        yield c


def test_the_fleet_marks_newer_incidents_behind_100k_older_alerts(flooded: TestClient) -> None:
    """The hunter's repro: 100,001 firing alerts of the oldest open incident took every row of
    the page's read, and the storm's hosts c0-h1 and c1-h2 lost their marks."""
    html = flooded.get("/ui/fleet").text
    for host in ("c0-h1", "c1-h2", "c1-h3"):
        assert re.search(rf'<div class="node hot" data-node="{host}">', html), host
    c0h1 = re.search(r'data-node="c0-h1">(.*?)</div>\s*</div>', html, re.S)
    assert c0h1 and "GpuXidError" in c0h1.group(1) and "KubeNodeNotReady" in c0h1.group(1)
    assert "#1 KubeNodeNotReady" in html  # the flood's own mark, once
    assert 'id="marks-cut"' not in html


def test_the_page_says_when_the_marks_are_cut(
    flooded: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Past ``FLEET_MARK_ROWS`` distinct rows the newest incidents are not marked, and the page
    says so (before, the marks were dropped without a word)."""
    monkeypatch.setattr(ui_router, "FLEET_MARK_ROWS", 1)
    html = flooded.get("/ui/fleet").text
    assert 'id="marks-cut"' in html and "more than 1 distinct" in html
    assert re.search(r'<div class="node hot" data-node="c1-h3">', html)  # the oldest, kept
    assert not re.search(r'<div class="node hot" data-node="c1-h2">', html)
