"""The fleet view's open-incident marks when older open incidents hold very many firing alerts.

``/ui/fleet`` read one row per firing alert of every open incident, oldest incident first, and
stopped at 100,000 rows: once older open incidents held 100,000 firing alerts every newer open
incident's GPUs and hosts lost their marks (and each load decoded 100,000 rows). The marks now
come from one row per distinct (incident, alerting node, alert name), aggregated in the database;
past a cap the page says the marks are cut. That cap counts marks made (GPUs and hosts of the
graph), not rows read: an older incident's many alerting pods neither hide a newer incident's
marks nor turn the banner on."""

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


def _alerts(conn: Any, incident_id: int, rows: list[tuple[str, str | None, str]]) -> None:
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


def test_the_cap_counts_kept_rows_only(migrated_db: Any) -> None:
    """An older open incident with 30 distinct alerting pods and alerts without a node, under a
    2-row limit whose ``keep`` takes hosts only: before, the limit counted every row read (and
    took no ``keep``), so the pods filled it; now alerts without a node are never read, the
    limit counts kept rows, and the rows stream in chunks (``chunk=4`` here) in the same order.
    Runs on SQLite and PostgreSQL."""
    db = migrated_db
    with db.write() as conn:
        older = _incident(conn)
        _alerts(
            conn, older, [(f"p-{i}", f"c1/pod/ns/p{i}", "KubePodCrashLooping") for i in range(30)]
        )
        _alerts(conn, older, [(f"n-{i}", None, "Watchdog") for i in range(3)])
        _alerts(conn, older, [("h-1", "c1/host/c1-h3", "KubeNodeNotReady")])
        newer = _incident(conn)
        _alerts(conn, newer, [("h-2", "c0/host/c0-h1", "KubeNodeNotReady")])
        _alerts(conn, newer, [("h-3", "c0/host/c0-h2", "KubeNodeNotReady")])
    every = db.firing_alerts_of_open_incidents()
    assert len(every) == 33 and all(r["node"] for r in every)  # no NULL node
    assert db.firing_alerts_of_open_incidents(chunk=4) == every  # streamed 4 rows at a time
    assert [(r["incident_id"], r["node"], r["alertname"]) for r in every] == [
        k for k in _old_rows(db) if k[1] is not None
    ]

    def hosts(r: dict[str, Any]) -> bool:
        return "/host/" in r["node"]

    rows = db.firing_alerts_of_open_incidents(limit=2, keep=hosts, chunk=4)
    assert [(r["incident_id"], r["node"]) for r in rows] == [
        (older, "c1/host/c1-h3"),
        (newer, "c0/host/c0-h1"),
    ]
    assert len(db.firing_alerts_of_open_incidents(keep=hosts, chunk=4)) == 3
    assert db.firing_alerts_of_open_incidents(limit=0) == []


def _settings(tmp_path: Path) -> Settings:
    return Settings(
        database_url=f"sqlite:///{tmp_path}/fleet.db",
        rca_model="baseline:upstream-coverage",
        placement_model="heuristic:builtin-bestfit",
        incident_worker=False,
        api_token=TOKEN,
    )


def _storm_and_sign_in(c: TestClient) -> None:
    """Post the UI tests' storm (newer incidents: host c0-h1 down with XIDs on its GPUs, and host
    c1-h2 down), group it, and sign in to the UI."""
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
        _storm_and_sign_in(c)
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
    assert 'id="marks-cut"' in html and "make more than 1 marks" in html
    assert re.search(r'<div class="node hot" data-node="c1-h3">', html)  # the oldest, kept
    assert not re.search(r'<div class="node hot" data-node="c1-h2">', html)


def test_an_older_incidents_pod_storm_hides_no_marks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The reviewer's crash-loop storm: an older open incident with more distinct alerting pods
    (none in the graph, so none marked) than the cap, plus alerts without a node and on a pod
    the graph holds, then the UI tests' storm. Before, the cap counted rows read: the pods took
    every row, no host was marked and the banner said marks were cut though none was. Now only
    marks count. The cap is lowered to 40 (the storm makes fewer marks) so the older incident
    needs 41 pods, not 100,001."""
    monkeypatch.setattr(ui_router, "FLEET_MARK_ROWS", 40)
    with TestClient(create_app(_settings(tmp_path))) as c:
        with c.app.state.services.db.write() as conn:
            flood = _incident(conn)
            _alerts(
                conn,
                flood,
                [(f"p-{i}", f"c1/pod/ns/p{i}", "KubePodCrashLooping") for i in range(41)]
                + [(f"n-{i}", None, "Watchdog") for i in range(41)]
                + [("g-pod", "c0/pod/s0-0", "KubePodCrashLooping")],
            )
        _storm_and_sign_in(c)
        html = c.get("/ui/fleet").text
        marks, cut = ui_router._incident_marks(c.app.state.services)
    hot = re.findall(r'<div class="node hot" data-node="([^"]+)">', html)
    assert "c0-h1" in hot and "c1-h2" in hot
    assert 'id="marks-cut"' not in html and not cut
    assert 0 < sum(map(len, marks.values())) <= 40
    assert f"#{flood} " not in html  # the pods make no mark
