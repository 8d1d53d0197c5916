"""Feedback labels across merges, repeated verdicts and pages opened before a colleague's verdict.

* A merge hands the merged incident's feedback to the incident it joined: shown on its page,
  correctable there, exported once (the latest verdict of both).
* A later verdict naming the same node without a fault type keeps the latest feedback's type.
* The incident page's form carries the newest feedback id it showed; posted after newer feedback,
  nothing is saved and the page shows the newer verdict with what was typed kept.
* Each stored feedback is logged once (INFO), and the API returns the stored ranking method and
  model version.

The alerts are Alertmanager v4 webhook objects (``tests/serving_helpers.py``, after
https://prometheus.io/docs/alerting/latest/configuration/#webhook_config).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from serving_helpers import alert, webhook
from ui_helpers import TRUE_ROOT, storm_alerts

from fleetmind.serving.app import create_app
from fleetmind.serving.feedback import feedback_incidents
from fleetmind.serving.settings import Settings
from fleetmind.serving.ui import auth

TOKEN = "feedback-token"
H = {"Authorization": f"Bearer {TOKEN}"}
ORIGIN = {"Origin": "http://testserver"}
OTHER_FAULT = "thermal_throttling"  # a host fault type of the catalog the baseline never gives


def make_settings(tmp_path: Path) -> Settings:
    return Settings(
        database_url=f"sqlite:///{tmp_path}/fb.db",
        rca_model="baseline:upstream-coverage",
        placement_model="heuristic:builtin-bestfit",
        incident_worker=False,
        api_token=TOKEN,
    )


@pytest.fixture
def client(tmp_path: Path) -> Iterator[TestClient]:
    """The app with the storm of ``ui_helpers`` received and grouped (bearer token set)."""
    with TestClient(create_app(make_settings(tmp_path))) as c:
        c.headers.update(H)
        assert c.post("/api/v1/alerts", json=webhook(storm_alerts())).status_code == 200
        c.app.state.services.incidents.process_pending()
        yield c


def storm_of(c: TestClient) -> dict:
    return next(i for i in c.get("/api/v1/incidents").json() if i["alert_count"] == 7)


def login(c: TestClient) -> str:
    """Sign in; returns the session's CSRF token."""
    c.get("/ui/login")
    c.post(
        "/ui/login",
        data={"token": TOKEN, "csrf": c.cookies.get(auth.CSRF_COOKIE)},
        follow_redirects=False,
    )
    return re.search(r'name="csrf" value="([^"]+)"', c.get("/ui/").text).group(1)


def seen_of(html: str) -> str:
    """The newest feedback id a page showed (the feedback form's hidden ``seen``)."""
    return re.search(
        r'id="feedback-form">\s*<input[^>]*>\s*<input type="hidden" name="seen" '
        r'value="(\d+)"',
        html,
    ).group(1)


def test_a_merged_incidents_feedback_moves_to_the_incident_it_joined(tmp_path: Path) -> None:
    url_db = f"sqlite:///{tmp_path}/fb.db"
    t0 = datetime.now(UTC) - timedelta(minutes=5)

    def at(labels: dict[str, str], fp: str, dt: float) -> dict:
        return alert(labels, starts=(t0 + timedelta(seconds=dt)).isoformat(), fingerprint=fp)

    down = {"alertname": "HostDown", "cluster": "c0", "severity": "critical"}
    with TestClient(create_app(make_settings(tmp_path))) as c:
        c.headers.update(H)
        pending = c.app.state.services.incidents.process_pending
        c.post("/api/v1/alerts", json=webhook([at({**down, "node": "c0-h0"}, "a", 0)]))
        pending()
        c.post("/api/v1/alerts", json=webhook([at({**down, "node": "c0-h1"}, "b", 10)]))
        pending()
        by_node = {i["nodes"][0]: i["id"] for i in c.get("/api/v1/incidents").json()}
        h0, h1 = by_node["c0/host/c0-h0"], by_node["c0/host/c0-h1"]
        fb = "/api/v1/incidents/{}/feedback"
        assert c.post(fb.format(h0), json={"root_cause": "c0/host/c0-h0", "by": "carol"}).is_success
        bob = {"root_cause": "c0/host/c0-h1", "by": "bob", "note": "h1 PSU died"}
        assert c.post(fb.format(h1), json=bob).status_code == 201
        # a service behind both hosts errors: the two incidents join on the graph
        svc = {"alertname": "SvcErrors", "cluster": "c0", "service": "s0", "severity": "warning"}
        c.post("/api/v1/alerts", json=webhook([at(svc, "c", 20)]))
        pending()
        merged = [
            i for i in (h0, h1) if c.get(f"/api/v1/incidents/{i}").json()["status"] == "merged"
        ]
        assert len(merged) == 1
        gone = merged[0]
        live = c.get(f"/api/v1/incidents/{gone}").json()["merged_into"]
        # both verdicts are the surviving incident's, bob's (the latest) first, and on its page
        assert [f["by"] for f in c.get(fb.format(live)).json()] == ["bob", "carol"]
        assert c.get(fb.format(gone)).json() == []
        login(c)
        page = c.get(f"/ui/incidents/{live}").text
        assert "h1 PSU died" in page and "carol" in page
        exported, _ = feedback_incidents(url_db)
        assert [(i["id"], i["root_cause"], i["feedback"]["by"]) for i in exported] == [
            (f"feedback-{live}", "c0/host/c0-h1", "bob")
        ]
        # and it can be corrected there: the correction is the one label
        alice = {"root_cause": "c0/host/c0-h0", "by": "alice"}
        assert c.post(fb.format(live), json=alice).status_code == 201
    exported, _ = feedback_incidents(url_db)
    assert [(i["id"], i["root_cause"], i["feedback"]["by"]) for i in exported] == [
        (f"feedback-{live}", "c0/host/c0-h0", "alice")
    ]


def test_an_agreeing_verdict_keeps_the_corrected_fault_type(
    client: TestClient, tmp_path: Path
) -> None:
    storm = storm_of(client)
    url = f"/api/v1/incidents/{storm['id']}/feedback"
    alice = {"root_cause": TRUE_ROOT, "by": "alice", "fault_type": OTHER_FAULT}
    assert client.post(url, json=alice).json()["fault_type"] == OTHER_FAULT
    agree = {"root_cause": TRUE_ROOT, "by": "bob", "note": "agree with alice"}
    assert client.post(url, json=agree).json()["fault_type"] == OTHER_FAULT
    # the Confirm button of the page sends no fault type either
    csrf = login(client)
    page = f"/ui/incidents/{storm['id']}"
    seen = seen_of(client.get(page).text)
    form = {"csrf": csrf, "seen": seen, "root_cause": TRUE_ROOT, "by": "carol", "note": ""}
    assert client.post(page + "/feedback", data=form, follow_redirects=False).status_code == 303
    assert [f["fault_type"] for f in client.get(url).json()] == [OTHER_FAULT] * 3
    exported, _ = feedback_incidents(f"sqlite:///{tmp_path}/fb.db")
    assert [(i["root_cause"], i["fault_type"]) for i in exported] == [(TRUE_ROOT, OTHER_FAULT)]
    # another node does not take it (the baseline types no cause: none), nor does an explicit type
    other = next(c["node"] for c in storm["causes"] if c["node"].startswith("c0/gpu/"))
    assert client.post(url, json={"root_cause": other, "by": "dan"}).json()["fault_type"] is None
    back = {"root_cause": TRUE_ROOT, "by": "erin", "fault_type": "host_not_ready"}
    assert client.post(url, json=back).json()["fault_type"] == "host_not_ready"


def test_the_form_offers_the_catalogs_fault_types_and_the_history_shows_them(
    client: TestClient,
) -> None:
    storm = storm_of(client)
    csrf = login(client)
    page = f"/ui/incidents/{storm['id']}"
    html = client.get(page).text
    select = re.search(r'<select id="fb-fault" name="fault_type">(.*?)</select>', html, re.S)
    assert select is not None
    assert '<optgroup label="host">' in select.group(1)
    assert f'<option value="{OTHER_FAULT}">' in select.group(1)
    form = {
        "csrf": csrf,
        "seen": seen_of(html),
        "root_cause": TRUE_ROOT,
        "fault_type": OTHER_FAULT,
        "by": "carol",
        "note": "",
    }
    assert client.post(page + "/feedback", data=form, follow_redirects=False).status_code == 303
    got = client.get(f"/api/v1/incidents/{storm['id']}/feedback").json()
    assert [(f["by"], f["fault_type"]) for f in got] == [("carol", OTHER_FAULT)]
    history = re.search(r'id="feedback-history">(.*?)</table>', client.get(page).text, re.S)
    assert "<th>Fault type</th>" in history.group(1) and OTHER_FAULT in history.group(1)
    # a type the node cannot have: refused, the choice kept
    bad = {**form, "seen": seen_of(client.get(page).text), "fault_type": "gpu_xid_error"}
    r = client.post(page + "/feedback", data=bad, headers=ORIGIN)
    assert r.status_code == 422 and "one of: host_not_ready, thermal_throttling" in r.text
    assert '<option value="gpu_xid_error" selected>' in r.text


def test_a_page_opened_before_a_newer_verdict_does_not_overwrite_it(client: TestClient) -> None:
    storm = storm_of(client)
    csrf = login(client)
    page = f"/ui/incidents/{storm['id']}"
    seen = seen_of(client.get(page).text)
    assert seen == "0"  # no feedback yet
    # meanwhile bob corrects it through the API (or another tab)
    third = storm["causes"][2]["node"]
    url = f"/api/v1/incidents/{storm['id']}/feedback"
    bob = {"root_cause": third, "by": "bob", "note": "checked the GPU, XID 79 first"}
    assert client.post(url, json=bob).status_code == 201
    # alice saves the top cause on the page she opened before bob's verdict
    form = {"csrf": csrf, "seen": seen, "root_cause": TRUE_ROOT, "by": "alice", "note": "mine"}
    r = client.post(page + "/feedback", data=form, headers=ORIGIN, follow_redirects=False)
    assert r.status_code == 409
    assert f"bob saved a newer verdict ({third})" in r.text and "nothing was saved" in r.text
    assert 'value="alice"' in r.text and ">mine</textarea>" in r.text  # what she typed, kept
    assert [f["by"] for f in client.get(url).json()] == ["bob"]
    # the page she got shows bob's verdict; saving from it is taken
    form["seen"] = seen_of(r.text)
    assert form["seen"] == str(client.get(url).json()[0]["id"])
    r = client.post(page + "/feedback", data=form, headers=ORIGIN, follow_redirects=False)
    assert r.status_code == 303
    assert [f["by"] for f in client.get(url).json()] == ["alice", "bob"]


def test_stored_feedback_is_logged_and_returns_its_model(
    client: TestClient, caplog: pytest.LogCaptureFixture
) -> None:
    storm = storm_of(client)
    url = f"/api/v1/incidents/{storm['id']}/feedback"
    caplog.set_level(logging.INFO, logger="fleetmind.serving.feedback")
    body = {"root_cause": TRUE_ROOT, "by": "alice", "note": "secret-ish note"}
    out = client.post(url, json=body).json()
    assert out["method"] == storm["method"] and out["method"]
    assert "model_version" in out and out["model_version"] == storm["model_version"]
    assert client.get(url).json()[0]["method"] == storm["method"]
    csrf = login(client)
    page = f"/ui/incidents/{storm['id']}"
    form = {"csrf": csrf, "seen": seen_of(client.get(page).text), "root_cause": TRUE_ROOT}
    client.post(page + "/feedback", data={**form, "by": "bob", "note": ""})
    lines = [r.getMessage() for r in caplog.records if r.name == "fleetmind.serving.feedback"]
    assert len(lines) == 2
    assert f"incident {storm['id']}" in lines[0] and repr(TRUE_ROOT) in lines[0]
    assert "'alice'" in lines[0] and lines[0].endswith("via api")
    assert "'bob'" in lines[1] and lines[1].endswith("via ui")
    assert not any("secret-ish" in line for line in lines)
