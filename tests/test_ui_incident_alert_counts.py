"""An incident page's alerts past its read limit: the firing ones are still shown, counted and
marked on the graphs.

The page reads a bounded list of alerts (``MAX_PAGE_ALERTS``); it read the newest by id, so an
old alert still firing (the root) behind 2,100 alerts that fired and resolved since (flapping
XIDs) was on no row, no bar and no graph, and the per-name counts were those of the list read.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from test_ui import login, make_settings

from fleetmind.serving.app import create_app
from fleetmind.serving.db import alerts, incidents
from fleetmind.serving.ui import router as ui_router

os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")

FLAPS = ui_router.MAX_PAGE_ALERTS + 100
ROOT = "c1/host/c1-h2"


@pytest.fixture
def client(tmp_path: Path) -> Iterator[TestClient]:
    with TestClient(create_app(make_settings(tmp_path))) as c:
        yield c


def _row(incident_id: int, key: str, **kw: object) -> dict[str, object]:
    return {
        "fingerprint": key,
        "starts_at": f"t-{key}",
        "starts_ts": 1000.0,
        "ends_ts": None,
        "status": "firing",
        "alertname": "GPUFallenOffBus",
        "labels": {},
        "annotations": {},
        "node": ROOT,
        "received_ts": 1.0,
        "updated_ts": 1.0,
        "pending": False,
        "incident_id": incident_id,
        **kw,
    }


def _hidden_firing(c: TestClient) -> int:
    """An incident whose one firing alert is its first, then FLAPS resolved ones (stored directly)."""
    cause = {"node": ROOT, "kind": "host", "score": 0.9, "fault_type": "host_down", "path": [ROOT]}
    with c.app.state.services.db.write() as conn:
        inc = int(
            conn.execute(
                incidents.insert().values(
                    status="open",
                    opened_ts=1.0,
                    updated_ts=1.0,
                    first_alert_ts=1000.0,
                    last_alert_ts=2000.0,
                    alert_count=FLAPS + 1,
                    firing_count=1,
                    nodes=[ROOT],
                    clusters=["c1"],
                    causes=[cause],
                )
            ).inserted_primary_key[0]
        )
        conn.execute(alerts.insert(), [_row(inc, "root")])
        conn.execute(
            alerts.insert(),
            [
                _row(
                    inc,
                    f"flap-{i}",
                    starts_ts=1010.0 + i / 10,
                    ends_ts=1020.0 + i / 10,
                    status="resolved",
                    alertname="GPUXidFlap",
                )
                for i in range(FLAPS)
            ],
        )
    return inc


def test_an_old_firing_alert_is_on_the_page_and_the_counts_cover_every_alert(
    client: TestClient,
) -> None:
    login(client)
    inc = _hidden_firing(client)
    html = client.get(f"/ui/incidents/{inc}").text
    rows = re.findall(r'<tr><td class="muted when">.*?</tr>', html, re.S)
    assert len(rows) == ui_router.TABLE_ALERTS
    assert ">firing<" in rows[0] and "Fallen<wbr>Off<wbr>Bus" in rows[0]  # the firing row first
    assert sum(">firing<" in r for r in rows) == 1
    counts = dict(
        re.findall(r'<td class="name" title="([^"]*)">[^<]*</td><td class="n">(\d+)', html)
    )
    assert counts == {"GPUXidFlap": str(FLAPS), "GPUFallenOffBus": "1"}
    timeline = re.search(r'<svg class="timeline".*?</svg>', html, re.S).group(0)
    assert timeline.count('fill="#dc2626"') == 1  # its bar, red
    graph = re.search(r'<div class="cause top".*?</svg>', html, re.S).group(0)
    assert '<g class="node root alerting">' in graph  # the cause marked as firing
    cut = re.search(r'<p class="muted" id="alerts-cut">(.*?)</p>', html, re.S).group(1)
    assert (
        f"of {FLAPS + 1} alerts" in cut and f"chosen from {ui_router.MAX_PAGE_ALERTS} read" in cut
    )


def test_the_page_reads_at_most_its_limit(client: TestClient) -> None:
    login(client)
    inc = _hidden_firing(client)
    read = ui_router.page_alerts(client.app.state.services.db, inc, limit=5)
    assert [a["status"] for a in read] == ["firing"] + ["resolved"] * 4
    assert [a["fingerprint"] for a in read[1:]] == [f"flap-{FLAPS - 1 - i}" for i in range(4)]
    assert ui_router.alert_counts(client.app.state.services.db, inc) == {
        "GPUXidFlap": (FLAPS, 0),
        "GPUFallenOffBus": (1, 1),
    }
