"""FleetMind's Alertmanager route sends each alert on its own, so ``max_alerts`` never truncates.

Alertmanager's webhook sends only the first ``max_alerts`` alerts of a group
(prometheus/alertmanager ``notify/webhook/webhook.go``, ``truncateAlerts``, applied before the
message is built; the group's alerts are sorted by labels, not by status), and after a successful
flush deletes every resolved alert of the group, the ones left out included
(``dispatch/dispatch.go``, ``aggrGroup.flush``: ``DeleteIfNotModified(resolvedSlice)``). The
left-out alerts' resolutions thus never reach FleetMind, and their incident stays open until the
auto-resolve (24 h). With ``group_by: ['...']`` (Alertmanager's "group by all labels": one alert
per group) no notification reaches the cap; the shipped ``deploy/alertmanager.yml`` must keep it
on FleetMind's route, and the webhook's WARNING line on ``truncatedAlerts`` says what is lost.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from fastapi.testclient import TestClient

from fleetmind.serving.app import create_app
from fleetmind.serving.settings import Settings

DEPLOY = Path(__file__).resolve().parents[1] / "deploy"


def _fleetmind_routes(route: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """Every route (depth first) whose receiver is ``fleetmind``."""
    if route.get("receiver") == "fleetmind":
        yield route
    for child in route.get("routes") or []:
        yield from _fleetmind_routes(child)


def test_the_shipped_fleetmind_route_groups_one_alert_per_group() -> None:
    cfg = yaml.safe_load((DEPLOY / "alertmanager.yml").read_text())
    routes = list(_fleetmind_routes(cfg["route"]))
    assert routes, "deploy/alertmanager.yml has no route to the fleetmind receiver"
    for route in routes:
        assert route.get("group_by") == ["..."], route
    # the cap stays as a backstop for a route grouped coarser (a body over the limit gets a 413)
    (hook,) = next(r for r in cfg["receivers"] if r["name"] == "fleetmind")["webhook_configs"]
    assert hook["send_resolved"] is True
    assert 0 < hook["max_alerts"] <= 10_000


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    tmp: Path = tmp_path_factory.mktemp("truncation")
    settings = Settings(
        database_url=f"sqlite:///{tmp}/t.db",
        rca_model="baseline:upstream-coverage",
        placement_model="heuristic:builtin-bestfit",
        incident_worker=False,
    )
    with TestClient(create_app(settings)) as c:
        yield c


def test_the_truncation_warning_says_the_resolutions_are_lost(
    client: TestClient, caplog: pytest.LogCaptureFixture
) -> None:
    body = {"truncatedAlerts": 7, "alerts": [{"labels": {"alertname": "Truncated", "node": "n"}}]}
    with caplog.at_level(logging.WARNING, logger="fleetmind.serving"):
        r = client.post("/api/v1/alerts", json=body)
    assert r.status_code == 200 and r.json()["truncated"] == 7
    (said,) = [m.getMessage() for m in caplog.records if "truncatedAlerts" in m.getMessage()]
    assert "left out 7 alerts" in said
    assert "resolutions will not arrive" in said
    assert "group_by: ['...']" in said
