"""``truncatedAlerts`` of an Alertmanager webhook is read alike whether or not an alert of it is
invalid: the partial path (some alerts rejected) coerces the value as the all-valid path does, a
value that is not a count reads as 0 on both (FleetMind only echoes and counts it: no reason to
lose the webhook's alerts, which Alertmanager does not resend after a 4xx) with one WARNING line,
and ``fleetmind_alerts_truncated_total`` grows by the same amount.

Alertmanager itself sends an integer (``TruncatedAlerts uint64`` of ``Message`` in
prometheus/alertmanager ``notify/webhook/webhook.go``); other senders may not.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from fleetmind.serving.app import create_app
from fleetmind.serving.settings import Settings

GOOD = '{"labels": {"alertname": "Truncated", "node": "n%d"}}'
BAD = '{"labels": {"alertname": 1}}'  # a label value that is not a string


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    tmp: Path = tmp_path_factory.mktemp("truncated")
    settings = Settings(
        database_url=f"sqlite:///{tmp}/t.db",
        rca_model="baseline:upstream-coverage",
        placement_model="heuristic:builtin-bestfit",
        incident_worker=False,
    )
    with TestClient(create_app(settings)) as c:
        yield c


def _counted(c: TestClient) -> float:
    m = re.search(r"^fleetmind_alerts_truncated_total (\S+)$", c.get("/metrics").text, re.M)
    return float(m.group(1)) if m else 0.0


def _post(c: TestClient, truncated: str, alerts: list[str]) -> tuple[int, int | None, float]:
    """Status, the answer's ``truncated``, and how much the metric grew."""
    before = _counted(c)
    body = '{"truncatedAlerts": ' + truncated + ', "alerts": [' + ", ".join(alerts) + "]}"
    r = c.post("/api/v1/alerts", content=body, headers={"Content-Type": "application/json"})
    return r.status_code, r.json().get("truncated"), _counted(c) - before


@pytest.mark.parametrize(("raw", "count"), [("5", 5), ('"5"', 5), ("5.0", 5), ("null", 0)])
def test_partial_webhook_counts_truncated_alerts_like_a_valid_one(
    client: TestClient, raw: str, count: int
) -> None:
    valid = _post(client, raw, [GOOD % 1])
    partial = _post(client, raw, [GOOD % 2, BAD])
    assert valid == (200, count, count)
    assert partial == (200, count, count)


@pytest.mark.parametrize("raw", ['"five"', "-1", "1.5", "[5]", "99999999999999999999"])
def test_a_bad_truncated_alerts_reads_as_0_on_both_paths(
    client: TestClient, raw: str, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="fleetmind.serving"):
        valid = _post(client, raw, [GOOD % 3])
        assert [r.getMessage() for r in caplog.records if "truncatedAlerts" in r.getMessage()]
        caplog.clear()
        partial = _post(client, raw, [GOOD % 4, BAD])
    assert valid == partial == (200, 0, 0)
    said = [r.getMessage() for r in caplog.records if "truncatedAlerts" in r.getMessage()]
    assert len(said) == 1 and "read as 0" in said[0], said  # once, though read twice
