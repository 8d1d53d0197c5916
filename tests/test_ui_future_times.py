"""The incident page's "first alert ..." phrase for a first alert ahead of the service's clock.

``age`` gives ``in 5m`` for a time ahead of the service's clock (a sender whose clock runs ahead),
and the page appended ``ago`` to it: "first alert in 6m ago". The ``ago`` filter phrases both
ways: ``12m ago`` for a past time, ``in 6m`` for a future one.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from serving_helpers import webhook
from test_ui import TOKEN, login, make_settings

from fleetmind.serving.app import create_app
from fleetmind.serving.ui import router as ui_router

os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")

AUTH = {"Authorization": f"Bearer {TOKEN}"}


@pytest.fixture
def client(tmp_path: Path) -> Iterator[TestClient]:
    with TestClient(create_app(make_settings(tmp_path))) as c:
        login(c)
        yield c


def _first_alert_phrase(c: TestClient, starts_at: datetime, fingerprint: str) -> str:
    """Post one alert starting at ``starts_at`` and return the page's "first alert ..." phrase."""
    alert = {
        "status": "firing",
        "labels": {"alertname": "GPUXidError", "cluster": "c1", "node": "c1-h3", "gpu": "2"},
        "annotations": {},
        "startsAt": starts_at.strftime("%Y-%m-%dT%H:%M:%SZ"),
        "endsAt": "0001-01-01T00:00:00Z",
        "fingerprint": fingerprint,
    }
    assert c.post("/api/v1/alerts", json=webhook([alert]), headers=AUTH).status_code == 200
    c.app.state.services.incidents.process_pending()
    listed = c.get("/api/v1/alerts", params={"limit": 100}, headers=AUTH).json()
    inc = next(a["incident_id"] for a in listed if a["fingerprint"] == fingerprint)
    html = c.get(f"/ui/incidents/{inc}").text
    return re.search(r"first alert ([^·]*?)\s*·", html).group(1)


def test_a_first_alert_ahead_of_the_clock_reads_in_not_in_ago(client: TestClient) -> None:
    ahead = datetime.now(UTC) + timedelta(minutes=6, seconds=30)
    phrase = _first_alert_phrase(client, ahead, "ff000000000000a1")
    assert re.fullmatch(r"in [56]m", phrase), phrase
    assert "ago" not in phrase


def test_a_past_first_alert_still_reads_ago(client: TestClient) -> None:
    past = datetime.now(UTC) - timedelta(hours=2, minutes=10)
    phrase = _first_alert_phrase(client, past, "ff000000000000b2")
    assert re.fullmatch(r"2h (9|10)m ago", phrase), phrase


def test_the_ago_filter_phrases_past_future_and_missing_times() -> None:
    assert ui_router.ago(1000.0, now=1000.0 + 720) == "12m ago"
    assert ui_router.ago(1000.0, now=1000.0 - 300) == "in 5m"
    assert ui_router.ago(1000.0, now=1000.0 - 20) == "0s ago"  # under a minute ahead: now
    assert ui_router.ago(None, now=1000.0) == "-"
