"""Feedback that becomes labels: the API, the incident-page form, durable storage, and
``fleetmind rca train/evaluate --feedback-db`` (a small model ranks differently with it)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from serving_helpers import alert, webhook
from ui_helpers import TRUE_ROOT, storm_alerts

from fleetmind.cli import main
from fleetmind.serving.app import create_app
from fleetmind.serving.feedback import feedback_incidents
from fleetmind.serving.settings import Settings
from fleetmind.serving.ui import auth

TOKEN = "feedback-token"
H = {"Authorization": f"Bearer {TOKEN}"}


def make_settings(tmp_path: Path, **kw: object) -> Settings:
    base = {
        "database_url": f"sqlite:///{tmp_path}/fb.db",
        "rca_model": "baseline:upstream-coverage",
        "placement_model": "heuristic:builtin-bestfit",
        "incident_worker": False,
        "api_token": TOKEN,
    }
    base.update(kw)
    return Settings(**base)


@pytest.fixture
def client(tmp_path: Path) -> Iterator[TestClient]:
    with TestClient(create_app(make_settings(tmp_path))) as c:
        assert c.post("/api/v1/alerts", json=webhook(storm_alerts()), headers=H).status_code == 200
        c.app.state.services.incidents.process_pending()
        yield c


def incidents(c: TestClient) -> tuple[dict, dict]:
    incs = c.get("/api/v1/incidents", headers=H).json()
    storm = next(i for i in incs if i["alert_count"] == 7)
    lone = next(i for i in incs if i["alert_count"] == 1)
    return storm, lone


def test_confirm_and_correct_through_the_api(client: TestClient) -> None:
    storm, _ = incidents(client)
    url = f"/api/v1/incidents/{storm['id']}/feedback"
    r = client.post(url, json={"root_cause": TRUE_ROOT, "by": "alice", "note": "host rebooted"})
    assert r.status_code == 201, r.text
    ok = r.json()
    assert ok["confirmed"] and ok["model_rank"] == 1 and ok["model_top"] == TRUE_ROOT
    third = storm["causes"][2]["node"]
    r = client.post(url, json={"root_cause": third, "by": "bob"}, headers=H)
    assert r.status_code == 201
    assert not r.json()["confirmed"] and r.json()["model_rank"] == 3
    listed = client.get(url, headers=H).json()
    assert [f["by"] for f in listed] == ["bob", "alice"]
    assert listed[1]["note"] == "host rebooted"


@pytest.fixture(autouse=True)
def _bearer(request: pytest.FixtureRequest) -> None:
    """Every API call of this module's ``client`` carries the token unless a test says not."""
    if "client" in request.fixturenames:
        c = request.getfixturevalue("client")
        c.headers.update(H)


def test_posting_feedback_needs_the_admin_scope(tmp_path: Path) -> None:
    scoped = {"read_token": "r-tok", "admin_token": "a-tok"}
    with TestClient(create_app(make_settings(tmp_path, **scoped))) as c:
        c.post("/api/v1/alerts", json=webhook(storm_alerts()), headers=H)
        c.app.state.services.incidents.process_pending()
        storm, _ = incidents(c)
        url = f"/api/v1/incidents/{storm['id']}/feedback"
        body = {"root_cause": TRUE_ROOT, "by": "a"}
        read, admin = {"Authorization": "Bearer r-tok"}, {"Authorization": "Bearer a-tok"}
        assert c.post(url, json=body, headers=read).status_code == 403
        assert c.post(url, json=body, headers=admin).status_code == 201
        assert len(c.get(url, headers=read).json()) == 1


def test_bad_feedback_gets_a_clear_4xx(client: TestClient) -> None:
    storm, _ = incidents(client)
    url = f"/api/v1/incidents/{storm['id']}/feedback"
    r = client.post(url, json={"root_cause": "c9/host/nowhere", "by": "alice"})
    assert r.status_code == 422 and "c9/host/nowhere" in r.json()["detail"]
    r = client.post("/api/v1/incidents/999/feedback", json={"root_cause": TRUE_ROOT, "by": "a"})
    assert r.status_code == 404
    for body in (
        {"root_cause": TRUE_ROOT, "by": ""},
        {"root_cause": TRUE_ROOT},
        {"root_cause": TRUE_ROOT, "by": "a", "extra": 1},
        {"root_cause": "", "by": "a"},
    ):
        assert client.post(url, json=body).status_code == 422
    assert (
        client.post(url, content=b"{", headers={"content-type": "application/json"}).status_code
        == 422
    )
    client.headers.pop("Authorization")
    assert client.post(url, json={"root_cause": TRUE_ROOT, "by": "a"}).status_code == 401
    client.headers.update(H)
    assert client.get(url).json() == []


def test_feedback_survives_a_restart(tmp_path: Path) -> None:
    with TestClient(create_app(make_settings(tmp_path))) as c:
        c.post("/api/v1/alerts", json=webhook(storm_alerts()), headers=H)
        c.app.state.services.incidents.process_pending()
        storm, _ = incidents(c)
        r = c.post(
            f"/api/v1/incidents/{storm['id']}/feedback",
            json={"root_cause": TRUE_ROOT, "by": "alice"},
            headers=H,
        )
        assert r.status_code == 201
    with TestClient(create_app(make_settings(tmp_path))) as again:
        listed = again.get(f"/api/v1/incidents/{storm['id']}/feedback", headers=H).json()
        assert [(f["root_cause"], f["by"]) for f in listed] == [(TRUE_ROOT, "alice")]


def _login(c: TestClient) -> str:
    """Sign in; returns the session's CSRF token (the one its pages' forms carry)."""
    c.get("/ui/login")
    csrf = c.cookies.get(auth.CSRF_COOKIE)
    c.post("/ui/login", data={"token": TOKEN, "csrf": csrf}, follow_redirects=False)
    html = c.get("/ui/").text
    return re.search(r'name="csrf" value="([^"]+)"', html).group(1)


def test_the_incident_page_form_stores_feedback(client: TestClient) -> None:
    storm, _ = incidents(client)
    csrf = _login(client)
    page = f"/ui/incidents/{storm['id']}"
    html = client.get(page).text
    assert 'id="feedback-form"' in html and html.count('class="confirm"') == len(storm["causes"])
    form = {"csrf": csrf, "root_cause": TRUE_ROOT, "by": "carol", "note": "confirmed on call"}
    r = client.post(page + "/feedback", data=form, follow_redirects=False)
    assert r.status_code == 303 and r.headers["location"] == page + "?feedback=saved"
    html = client.get(r.headers["location"]).text
    assert "stored as a training label" in html and "carol" in html and "confirmed" in html
    # unknown node: the page again, with the reason; no CSRF token: refused
    r = client.post(page + "/feedback", data={**form, "root_cause": "nope"})
    assert r.status_code == 422 and "is not a node of the served graph" in r.text
    assert "e.g. one of the incident&#39;s nodes: " in r.text  # nodes the graph has
    # the graph changed since the incident: no suggestion of nodes it no longer has
    from fleetmind.data.errors import DataError
    from fleetmind.data.graph import DependencyGraph, GraphNode
    from fleetmind.serving.feedback import FeedbackIn, record_feedback

    other = DependencyGraph("other", [GraphNode("x/host/h0", "host", "x")], [])
    with pytest.raises(DataError, match="the graph changed since the incident"):
        record_feedback(
            client.app.state.services.db,
            other,
            storm["id"],
            FeedbackIn(root_cause=TRUE_ROOT, by="c"),
        )
    r = client.post(page + "/feedback", data={**form, "by": ""})
    assert r.status_code == 422 and "Enter your name" in r.text
    assert client.post(page + "/feedback", data={**form, "csrf": "x" * 30}).status_code == 403
    # a login without the admin scope sees no form and cannot post
    services = client.app.state.services
    read_only, _ = auth.start_session(services.db, services.settings, TOKEN, frozenset({"read"}))
    client.cookies.delete(auth.SESSION_COOKIE)
    client.cookies.set(auth.SESSION_COOKIE, read_only)
    assert 'id="feedback-form"' not in client.get(page).text
    assert client.post(page + "/feedback", data=form).status_code == 403
    assert len(client.get(f"/api/v1/incidents/{storm['id']}/feedback").json()) == 1


def test_evaluate_reports_accuracy_on_the_feedback(tmp_path: Path) -> None:
    # the service ranks with the released GAT, and so does the offline evaluation
    with TestClient(create_app(make_settings(tmp_path, rca_model=None))) as client:
        client.headers.update(H)
        client.post("/api/v1/alerts", json=webhook(storm_alerts()))
        client.app.state.services.incidents.process_pending()
        _evaluate_case(client, tmp_path)


def _evaluate_case(client: TestClient, tmp_path: Path) -> None:
    storm, lone = incidents(client)
    third = storm["causes"][2]["node"]
    for inc, node in ((storm, TRUE_ROOT), (storm, third), (lone, lone["causes"][0]["node"])):
        r = client.post(
            f"/api/v1/incidents/{inc['id']}/feedback", json={"root_cause": node, "by": "a"}
        )
        assert r.status_code == 201
    url = client.app.state.services.settings.database_url
    labelled, graphs = feedback_incidents(url)
    assert {i["id"]: i["root_cause"] for i in labelled} == {
        f"feedback-{storm['id']}": third,  # the latest feedback wins
        f"feedback-{lone['id']}": lone["causes"][0]["node"],
    }
    assert all(
        i["graph"] in graphs and len(i["alerts"]) == i_n
        for i, i_n in zip(labelled, (7, 1), strict=True)
    )
    out = tmp_path / "eval.json"
    code = main(
        [
            "rca",
            "evaluate",
            "--feedback-db",
            url,
            "--methods",
            "gat",
            "--json",
            str(out),
        ]
    )
    assert code == 0
    res = json.loads(out.read_text())
    m = res["methods"]["gat"]
    assert res["n_incidents"] == 2 and res["split"] == "feedback"
    assert m["ac@1"] == pytest.approx(0.5)  # the lone incident confirmed, the storm corrected
    assert m["mrr"] == pytest.approx((1 + 1 / 3) / 2)
    assert main(["rca", "evaluate", "--feedback-db", f"sqlite:///{tmp_path}/none.db"]) == 2
    assert main(["rca", "evaluate"]) == 2


def host_storms() -> list[dict]:
    """Eight incidents, an hour apart: a host not ready and one of its GPUs with XID errors."""
    t0 = datetime(2026, 11, 30, tzinfo=UTC)
    hosts = [(c, f"{c}-h{i}") for c in ("c0", "c1") for i in range(4)]
    body = []
    for k, (cl, h) in enumerate(hosts):
        start = t0 + timedelta(hours=k)
        body.append(
            alert(
                {"alertname": "NodeNotReady", "cluster": cl, "node": h},
                starts=start.isoformat(),
                fingerprint=f"n{k}",
            )
        )
        body.append(
            alert(
                {"alertname": "GpuXidError", "cluster": cl, "node": h, "gpu": "2"},
                starts=(start + timedelta(seconds=30)).isoformat(),
                fingerprint=f"x{k}",
            )
        )
    return body


def _labelled_host_storms(tmp_path: Path) -> str:
    """The incidents of :func:`host_storms`, each labelled by an engineer with its host; the
    service database URL."""
    settings = make_settings(tmp_path, database_url=f"sqlite:///{tmp_path}/svc.db")
    body = host_storms()
    with TestClient(create_app(settings)) as c:
        c.post("/api/v1/alerts", json=webhook(body), headers=H)
        c.app.state.services.incidents.process_pending()
        incs = c.get("/api/v1/incidents", headers=H).json()
        assert len(incs) == 8
        for inc in incs:
            host = next(n for n in inc["nodes"] if "/host/" in n)
            r = c.post(
                f"/api/v1/incidents/{inc['id']}/feedback",
                json={"root_cause": host, "by": "oncall"},
                headers=H,
            )
            assert r.status_code == 201
    return settings.database_url


def test_feedback_changes_a_small_models_ranking(tmp_path: Path) -> None:
    data = tmp_path / "ds"
    gen = ["rca", "generate", "--out", str(data), "--incidents", "80", "--seed", "0"]
    gen += ["--graphs", "4", "--min-nodes", "60", "--max-nodes", "120", "--min-clusters", "2"]
    gen += ["--max-clusters", "2", "--large-fraction", "0", "--workers", "1"]
    assert main(gen) == 0
    url = _labelled_host_storms(tmp_path)
    common = [
        "rca",
        "train",
        "--data",
        str(data),
        "--epochs",
        "4",
        "--hidden",
        "16",
        "--heads",
        "2",
    ]
    common += ["--layers", "2", "--seed", "0", "--patience", "100", "--no-register"]
    common += ["--tracking-uri", f"sqlite:///{tmp_path}/mlflow.db", "--out", str(tmp_path / "runs")]
    scores = {}
    for name, extra in (
        ("without", []),
        ("with", ["--feedback-db", url, "--feedback-weight", "10"]),
    ):
        out = tmp_path / f"train-{name}.json"
        assert main([*common, *extra, "--json", str(out)]) == 0
        artifact = json.loads(out.read_text())["artifact"]
        ev = tmp_path / f"eval-{name}.json"
        assert (
            main(
                [
                    "rca",
                    "evaluate",
                    "--feedback-db",
                    url,
                    "--methods",
                    "gat",
                    "--model",
                    artifact,
                    "--json",
                    str(ev),
                ]
            )
            == 0
        )
        scores[name] = json.loads(ev.read_text())["methods"]["gat"]
        if name == "with":
            assert json.loads(out.read_text())["feedback"]["n_feedback"] == 8
    print(f"feedback incidents, GAT without/with feedback: {scores}")
    # the labels moved the engineer's root cause up on the incidents they label
    assert scores["with"]["mrr"] > scores["without"]["mrr"] + 0.3, scores
    assert scores["with"]["ac@1"] > scores["without"]["ac@1"], scores
