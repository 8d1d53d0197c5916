"""Grafana's alerts about alerting itself open no incident by default.

* Grafana-managed alerting raises ``DatasourceError`` when a rule's query fails and
  ``DatasourceNoData`` when it returns nothing, by default (Grafana docs, "No Data and Error
  states", https://grafana.com/docs/grafana-cloud/alerting-and-irm/alerting/fundamentals/alert-rule-evaluation/state-and-health/).
  They keep the rule's labels, so ``cluster="c0"`` mapped one onto the cluster node, which was
  ranked as the root cause and paged as ``FleetMindRootCause``: a Prometheus outage paged as a
  cluster fault.
* A contact point's Test button sends ``alertname=TestAlert, instance=Grafana`` with a start and
  no end, and never a resolve (grafana/alerting ``notify/receivers.go``, ``newTestAlert``).

Both are in ``FLEETMIND_UNGROUPED_ALERTS``'s default now: stored, listed with no incident, and
resolved by the auto-resolve of alerts in no incident once no longer delivered (so retention
deletes them).
"""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

from fastapi.testclient import TestClient

from fleetmind.serving.app import create_app
from fleetmind.serving.incidents.manager import IncidentConfig
from fleetmind.serving.settings import Settings

T0 = (datetime.now(UTC) - timedelta(minutes=5)).isoformat().replace("+00:00", "Z")

# As Grafana 11 posts them to a webhook contact point (its extra keys: orgId, title, state, ...).
DATASOURCE_ERRORS = {
    "receiver": "fleetmind",
    "status": "firing",
    "orgId": 1,
    "alerts": [
        {
            "status": "firing",
            "labels": {
                "alertname": name,
                "cluster": "c0",
                "datasource_uid": "P1809F7CD0C75ACF3",
                "grafana_folder": "GPU",
                "ref_id": "A",
                "rulename": rule,
                "severity": "critical",
            },
            "annotations": {"Error": "dial tcp: connection refused"},
            "startsAt": T0,
            "endsAt": "0001-01-01T00:00:00Z",
            "generatorURL": "http://grafana:3000/alerting/grafana/abc/view?orgId=1",
            "fingerprint": fp,
            "silenceURL": "",
            "dashboardURL": "",
            "panelURL": "",
            "values": None,
            "valueString": "",
        }
        for name, rule, fp in (
            ("DatasourceError", "GPU XID errors", "a1b2c3d4e5f60718"),
            ("DatasourceNoData", "GPU memory temp", "a1b2c3d4e5f60719"),
        )
    ],
    "groupLabels": {"grafana_folder": "GPU", "alertname": "DatasourceError"},
    "commonLabels": {"cluster": "c0"},
    "commonAnnotations": {},
    "externalURL": "http://grafana:3000/",
    "version": "1",
    "groupKey": '{}/{}:{alertname="DatasourceError", grafana_folder="GPU"}',
    "truncatedAlerts": 0,
    "title": "[FIRING:2] DatasourceError GPU",
    "state": "alerting",
    "message": "...",
}
TEST_ALERT = {
    "receiver": "fleetmind",
    "status": "firing",
    "orgId": 1,
    "alerts": [
        {
            "status": "firing",
            "labels": {"alertname": "TestAlert", "instance": "Grafana"},
            "annotations": {"summary": "Notification test"},
            "startsAt": T0,
            "endsAt": "0001-01-01T00:00:00Z",
            "generatorURL": "",
            "fingerprint": "57c6d9296de2ad39",
        }
    ],
    "groupLabels": {"alertname": "TestAlert", "instance": "Grafana"},
    "commonLabels": {"alertname": "TestAlert", "instance": "Grafana"},
    "commonAnnotations": {"summary": "Notification test"},
    "externalURL": "http://localhost:3000/",
    "version": "1",
    "groupKey": "test-57c6d9296de2ad39-1700000000",
    "truncatedAlerts": 0,
}


def test_the_default_leaves_grafanas_own_alerts_ungrouped() -> None:
    names = {"Watchdog", "InfoInhibitor", "DatasourceError", "DatasourceNoData", "TestAlert"}
    assert Settings(database_url="sqlite://").ungrouped_alert_names() == names
    assert IncidentConfig().ungrouped_alerts == names  # the manager's own default agrees


def test_grafana_datasource_errors_and_test_alerts_open_no_incident(tmp_path: Path) -> None:
    s = Settings(
        database_url=f"sqlite:///{tmp_path}/g.db",
        rca_model="baseline:upstream-coverage",
        placement_model="heuristic:builtin-bestfit",
        incident_worker=False,
    )
    with TestClient(create_app(s)) as c:
        for body in (DATASOURCE_ERRORS, TEST_ALERT, TEST_ALERT):  # the Test button, twice
            r = c.post("/api/v1/alerts", json=body)
            assert r.status_code == 200 and r.json()["rejected_count"] == 0, r.text
        services = c.app.state.services
        services.incidents.process_pending()
        stored = c.get("/api/v1/alerts").json()
        assert c.get("/api/v1/incidents").json() == []
        assert len(stored) == 3 and all(a["incident_id"] is None for a in stored)
        assert {a["status"] for a in stored} == {"firing"}
        # never resolved by Grafana: auto-resolved once not delivered for the auto-resolve period
        now = time.time() + s.incident_auto_resolve_s + 1
        services.db.auto_resolve(now - s.incident_auto_resolve_s, now)
        assert {a["status"] for a in c.get("/api/v1/alerts").json()} == {"resolved"}
