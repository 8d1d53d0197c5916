"""A Grafana-managed rule firing because its query failed or returned nothing opens no incident.

With "Alert state if execution error / no data" set to ``Alerting`` (Grafana docs, "Configure no
data and error handling" and "No Data and Error states",
https://grafana.com/docs/grafana/latest/alerting/fundamentals/alert-rule-evaluation/nodata-and-error-states/),
the rule's own alert fires with its own alertname and labels and carries the annotation
``grafana_state_reason`` = ``Error`` or ``NoData`` (grafana/grafana
``pkg/services/ngalert/state/compat.go``: ``StateReasonAnnotation`` is set from the state's
reason, ``eval.Error.String()`` / ``eval.NoData.String()``). Such an alert says the data source
is down, not that anything in the fleet is: it is stored like ``DatasourceError`` and
``DatasourceNoData`` (no incident, no root cause), while the same alert without the annotation
opens one, and its resolution still resolves the stored alert.

The bodies are Grafana 11's webhook payload: Alertmanager's webhook message plus ``orgId``,
``title``, ``state``, ``message``, ``truncatedAlerts`` and, per alert, ``values``,
``valueString``, ``silenceURL``, ``dashboardURL``, ``panelURL`` (grafana/alerting
``templates/template_data.go``, ``ExtendedAlert``; ``receivers/webhook/webhook.go``,
``webhookMessage``).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from fleetmind.serving.app import create_app
from fleetmind.serving.settings import Settings

T0 = (datetime.now(UTC) - timedelta(minutes=5)).isoformat().replace("+00:00", "Z")
T1 = (datetime.now(UTC) - timedelta(minutes=1)).isoformat().replace("+00:00", "Z")
LABELS = {"alertname": "GpuHot", "grafana_folder": "GPU", "cluster": "c0", "severity": "critical"}


def grafana_alert(reason: str | None, status: str = "firing", fp: str = "e1c0ffee00000001") -> dict:
    """One alert of Grafana's webhook body; ``reason``: its ``grafana_state_reason``, if any."""
    annotations = {"summary": "GPU hot"}
    if reason is not None:
        annotations["grafana_state_reason"] = reason
        annotations["Error"] = (
            "[sse.dataQueryError] failed to execute query [A]: connection refused"
        )
    return {
        "status": status,
        "labels": dict(LABELS),
        "annotations": annotations,
        "startsAt": T0,
        "endsAt": T1 if status == "resolved" else "0001-01-01T00:00:00Z",
        "generatorURL": "http://grafana:3000/alerting/grafana/abc/view?orgId=1",
        "fingerprint": fp,
        "silenceURL": "http://grafana:3000/alerting/silence/new?alertmanager=grafana",
        "dashboardURL": "",
        "panelURL": "",
        "values": None if reason else {"B": 91.5, "C": 1},
        "valueString": "" if reason else "[ var='B' labels={} value=91.5 ]",
        "orgId": 1,
    }


def grafana_body(*alerts: dict[str, Any]) -> dict[str, Any]:
    """Grafana 11's webhook body around ``alerts`` (of one status)."""
    firing = alerts[0]["status"] == "firing"
    return {
        "receiver": "fleetmind",
        "status": alerts[0]["status"],
        "orgId": 1,
        "alerts": list(alerts),
        "groupLabels": {"alertname": "GpuHot", "grafana_folder": "GPU"},
        "commonLabels": dict(LABELS),
        "commonAnnotations": {},
        "externalURL": "http://grafana:3000/",
        "version": "1",
        "groupKey": '{}/{}:{alertname="GpuHot", grafana_folder="GPU"}',
        "truncatedAlerts": 0,
        "title": f"[{'FIRING' if firing else 'RESOLVED'}:{len(alerts)}] GpuHot GPU",
        "state": "alerting" if firing else "ok",
        "message": "**Firing**\n\nLabels:\n - alertname = GpuHot\n",
    }


@pytest.fixture(params=["sqlite", "postgresql"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """The database: a SQLite file, then an emptied schema of the module's PostgreSQL cluster."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path}/g.db"
    cluster = request.getfixturevalue("pg")
    cluster.psql("DROP SCHEMA public CASCADE; CREATE SCHEMA public")
    return str(cluster.url)


def _settings(url: str) -> Settings:
    return Settings(
        database_url=url,
        rca_model="baseline:upstream-coverage",
        placement_model="heuristic:builtin-bestfit",
        incident_worker=False,
    )


@pytest.mark.parametrize("reason", ["Error", "NoData", "nodata"])
def test_a_rule_alerting_on_error_or_no_data_opens_no_incident(url: str, reason: str) -> None:
    with TestClient(create_app(_settings(url))) as c:
        fps = ("e1c0ffee00000001", "e1c0ffee00000002")  # two: the webhook's batched upsert
        body = grafana_body(*(grafana_alert(reason, fp=fp) for fp in fps))
        r = c.post("/api/v1/alerts", json=body)
        assert r.status_code == 200 and r.json()["rejected_count"] == 0, r.text
        manager = c.app.state.services.incidents
        manager.process_pending()
        assert c.get("/api/v1/incidents?status=all").json() == []
        stored = c.get("/api/v1/alerts").json()
        assert [(a["incident_id"], a["status"]) for a in stored] == [(None, "firing")] * 2
        # Grafana resolves them once the query works again (no reason on a Normal state)
        body = grafana_body(*(grafana_alert(None, "resolved", fp) for fp in fps))
        assert c.post("/api/v1/alerts", json=body).status_code == 200
        manager.process_pending()
        stored = c.get("/api/v1/alerts").json()
        assert [(a["incident_id"], a["status"]) for a in stored] == [(None, "resolved")] * 2
        assert c.get("/api/v1/incidents?status=all").json() == []


def test_the_same_alert_without_the_reason_opens_an_incident(url: str) -> None:
    with TestClient(create_app(_settings(url))) as c:
        assert c.post("/api/v1/alerts", json=grafana_body(grafana_alert(None))).status_code == 200
        manager = c.app.state.services.incidents
        manager.process_pending()
        [incident] = c.get("/api/v1/incidents").json()
        assert incident["status"] == "open"
        [stored] = c.get("/api/v1/alerts").json()
        assert stored["incident_id"] == incident["id"]
        # the rule's query fails later: Grafana's "Normal" error handling resolves the alert with
        # reason Error; the resolution still resolves the alert and its incident
        resolved = grafana_alert("Error", "resolved")
        assert c.post("/api/v1/alerts", json=grafana_body(resolved)).status_code == 200
        manager.process_pending()
        [stored] = c.get("/api/v1/alerts").json()
        assert stored["status"] == "resolved" and stored["incident_id"] == incident["id"]
        [incident] = c.get("/api/v1/incidents?status=all").json()
        assert incident["status"] == "resolved"


def _incidents(c: TestClient) -> list[tuple[int, str]]:
    return [(i["id"], i["status"]) for i in c.get("/api/v1/incidents?status=all").json()]


def _post(c: TestClient, *alerts: dict[str, Any]) -> None:
    r = c.post("/api/v1/alerts", json=grafana_body(*alerts))
    assert r.status_code == 200 and r.json()["rejected_count"] == 0, r.text
    c.app.state.services.incidents.process_pending()


@pytest.mark.parametrize("reason", ["Error", "NoData"])
def test_a_real_firing_after_an_error_firing_opens_an_incident(url: str, reason: str) -> None:
    """Grafana keeps ``StartsAt`` when a rule goes from its Error/NoData state to Alerting on real
    data and drops the reason (grafana/grafana ``pkg/services/ngalert/state/state.go``:
    ``resultAlerting`` only ``Maintain``s a state already Alerting, keeping ``StartsAt``; the
    state manager then resets ``StateReason`` to "" for an Alerting result):
    the same fingerprint and ``startsAt`` now fires on evidence and opens an incident."""
    with TestClient(create_app(_settings(url))) as c:
        _post(c, grafana_alert(reason))
        assert _incidents(c) == []
        _post(c, grafana_alert(None))
        [(inc_id, status)] = _incidents(c)
        assert status == "open"
        [stored] = c.get("/api/v1/alerts").json()
        assert stored["incident_id"] == inc_id and stored["status"] == "firing"
        assert "grafana_state_reason" not in stored["annotations"]
        # Alertmanager-style re-sends of the real firing change nothing more
        _post(c, grafana_alert(None))
        assert _incidents(c) == [(inc_id, "open")]


def test_an_error_firing_resolved_before_grouping_opens_no_incident(url: str) -> None:
    """Both deliveries are stored before the incident worker runs (a backlog, a worker that is
    not the leader): the resolution of an Error firing still opens nothing."""
    with TestClient(create_app(_settings(url))) as c:
        for alert in (grafana_alert("Error"), grafana_alert(None, "resolved")):
            r = c.post("/api/v1/alerts", json=grafana_body(alert))
            assert r.status_code == 200 and r.json()["rejected_count"] == 0, r.text
        c.app.state.services.incidents.process_pending()
        assert _incidents(c) == []
        [stored] = c.get("/api/v1/alerts").json()
        assert (stored["status"], stored["incident_id"]) == ("resolved", None)


def test_an_error_firing_resolved_under_an_earlier_start_opens_no_incident(url: str) -> None:
    """An HA pair of senders: the Error firing stored under a later ``startsAt`` is resolved by the
    resolution of the earlier one (the merge Alertmanager makes, ``types.Alert.Merge``)."""
    with TestClient(create_app(_settings(url))) as c:
        later = grafana_alert("Error")
        t0 = datetime.fromisoformat(T0.replace("Z", "+00:00"))
        later["startsAt"] = (t0 + timedelta(seconds=30)).isoformat().replace("+00:00", "Z")
        _post(c, later)
        _post(c, grafana_alert(None, "resolved"))
        assert _incidents(c) == []
        stored = c.get("/api/v1/alerts").json()
        assert {(a["status"], a["incident_id"]) for a in stored} == {("resolved", None)}


@pytest.mark.parametrize("reason", [" Error ", " nodata", "\tError", "NoData\n", "ERROR"])
def test_the_reason_is_read_alike_when_grouping_and_when_storing(url: str, reason: str) -> None:
    """Whatever the spelling, the firing and its resolution are judged alike: either the firing
    opened the incident the resolution resolves, or neither opens one (never an incident opened
    by the resolution of an alert left out of grouping)."""
    with TestClient(create_app(_settings(url))) as c:
        _post(c, grafana_alert(reason))
        opened = _incidents(c)
        _post(c, grafana_alert(None, "resolved"))
        assert [inc_id for inc_id, _ in _incidents(c)] == [inc_id for inc_id, _ in opened]
        assert all(status == "resolved" for _, status in _incidents(c))
        # spaces around the word are no part of it (both databases' trim())
        assert (opened == []) == (reason.strip(" ").lower() in ("error", "nodata"))
