"""The service against a determined attacker, one finding at a time (SQLite, tokens per scope).

Each test reproduces one way hostile input used to get a 5xx, unbounded work before
authentication, or a session that would not end; the property-based suite
(``tests/test_serving_fuzz.py``) searches for more of the same.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from serving_helpers import alert, webhook

from fleetmind.serving.app import create_app
from fleetmind.serving.settings import Settings
from fleetmind.serving.ui import auth

ADMIN, READ, INGEST = "hostile-admin-token", "hostile-read-token", "hostile-ingest-token"
A = {"Authorization": f"Bearer {ADMIN}"}
AJ = {**A, "content-type": "application/json"}
R = {"Authorization": f"Bearer {READ}"}
IN = {"Authorization": f"Bearer {INGEST}"}
LAST_SECOND = "9999-12-31T23:59:59.999999Z"
"""Rounds to the year 10000 as float seconds: what storage could not read back."""
UI_PAGES = ("/ui/", "/ui/?show=recent", "/ui/fleet", "/ui/incidents/1")


def make_settings(tmp_path: Path, **kw: Any) -> Settings:
    base: dict[str, Any] = {
        "database_url": f"sqlite:///{tmp_path}/hostile.db",
        "sqlite_synchronous": "NORMAL",
        "rca_model": "baseline:upstream-coverage",
        "placement_model": "heuristic:builtin-bestfit",
        "incident_worker": False,
        "api_token": ADMIN,
        "read_token": READ,
        "ingest_token": INGEST,
    }
    base.update(kw)
    return Settings(**base)


@pytest.fixture
def client(tmp_path: Path) -> Iterator[TestClient]:
    with TestClient(create_app(make_settings(tmp_path))) as c:
        yield c


def login(c: TestClient, token: str = ADMIN) -> Any:
    c.get("/ui/login")
    return c.post(
        "/ui/login",
        data={"token": token, "csrf": c.cookies.get(auth.CSRF_COOKIE), "next": "/ui/"},
        follow_redirects=False,
    )


def page_csrf(c: TestClient, path: str = "/ui/") -> str:
    html = c.get(path).text
    marker = 'name="csrf" value="'
    start = html.index(marker) + len(marker)
    return html[start : html.index('"', start)]


def assert_views_answer(c: TestClient) -> None:
    for status in ("open", "resolved", "merged", "all"):
        assert c.get(f"/api/v1/incidents?status={status}", headers=R).status_code == 200
    assert c.get("/api/v1/alerts", headers=R).status_code == 200
    ids = [i["id"] for i in c.get("/api/v1/incidents?status=all", headers=R).json()]
    for i in ids:
        assert c.get(f"/api/v1/incidents/{i}", headers=R).status_code == 200
    for path in UI_PAGES:
        assert c.get(path).status_code in (200, 404), path


# ------------------------------------------------------------------------------ timestamps
def test_a_timestamp_storage_cannot_read_back_is_refused(client: TestClient) -> None:
    bad = alert({"alertname": "Y10K", "cluster": "c0", "node": "c0-h1"}, starts=LAST_SECOND)
    r = client.post("/api/v1/alerts", json=webhook([bad]), headers=IN)
    assert r.status_code == 422 and "startsAt" in r.text
    good = alert({"alertname": "Ok", "cluster": "c0", "node": "c0-h1"})
    late_end = alert({"alertname": "Z", "cluster": "c0"}, endsAt=LAST_SECOND)
    r = client.post("/api/v1/alerts", json=webhook([bad, good, late_end]), headers=IN)
    assert r.status_code == 200
    assert r.json()["accepted"] == 1 and [x["index"] for x in r.json()["rejected"]] == [0, 2]
    client.app.state.services.incidents.process_pending()
    login(client)
    assert_views_answer(client)


def test_views_survive_rows_stored_before_timestamps_were_bounded(client: TestClient) -> None:
    """A database written by an earlier release can hold such a row: every view still answers."""
    from fleetmind.serving.routers.alerts import alert_row
    from fleetmind.serving.schemas import AlertIn

    db = client.app.state.services.db
    row = alert_row(AlertIn(labels={"alertname": "Old", "cluster": "c0", "node": "c0-h1"}), 0.0)
    row.update(starts_at="9999-12-31T23:59:59.999999+00:00", starts_ts=253402300800.0)
    row.update(ends_ts=1e300, received_ts=time.time(), updated_ts=time.time())
    db.store_alerts([row])
    client.app.state.services.incidents.process_pending()
    login(client)
    assert_views_answer(client)
    assert client.get("/ui/incidents/1").status_code == 200


def test_starts_after_ends_is_refused_as_alertmanager_does(client: TestClient) -> None:
    """Alertmanager refuses such an alert itself (prometheus/common ``model/alert.go``,
    ``Alert.Validate``: "start time must be before end time")."""
    backwards = alert(
        {"alertname": "Back", "cluster": "c0"},
        starts="2026-01-02T00:00:00Z",
        status="resolved",
        endsAt="2026-01-01T00:00:00Z",
    )
    r = client.post("/api/v1/alerts", json=webhook([backwards]), headers=IN)
    assert r.status_code == 422 and "endsAt" in r.text


def test_an_out_of_range_truncated_alerts_reads_as_0(client: TestClient) -> None:
    """FleetMind only echoes and counts ``truncatedAlerts``: a 4,000-digit one (past the database's
    integer) reads as 0 and the webhook's alerts are stored (Alertmanager does not resend a 4xx)."""
    body = json.dumps(webhook([alert({"alertname": "T", "cluster": "c0"})]))
    body = body.replace('"truncatedAlerts": 0', '"truncatedAlerts": ' + "9" * 4000)
    r = client.post("/api/v1/alerts", content=body, headers={**IN, "content-type": "x/json"})
    assert r.status_code == 200 and r.json()["truncated"] == 0, r.text
    stored = client.get("/api/v1/alerts", headers=R).json()
    assert [a["labels"]["alertname"] for a in stored] == ["T"]


def test_long_text_from_rules_is_clipped_not_lost(client: TestClient) -> None:
    """Prometheus and Alertmanager put no limit on label values, annotations or the generator URL
    (a long PromQL expression), and Alertmanager does not retry a 4xx: a rejected alert would be
    gone. Values past the stored limit are clipped, with their length and a hash of the whole."""
    from fleetmind.serving.schemas import TEXT_LIMIT

    long = "x" * (TEXT_LIMIT + 900)
    a = alert(
        {"alertname": "Long", "cluster": "c0", "query": long},
        annotations={"description": "d" * 20_000, "summary": "short"},
        generatorURL="http://prometheus:9090/graph?g0.expr=" + "q" * 9000,
    )
    b = alert({"alertname": "Long", "cluster": "c0", "query": long[:-1] + "y"})  # differs late
    hook = webhook([a, b], commonAnnotations={"description": "d" * 20_000}, groupKey="k" * 9000)
    r = client.post("/api/v1/alerts", json=hook, headers=IN)
    assert r.status_code == 200, r.text
    assert r.json()["accepted"] == 2 and r.json()["rejected_count"] == 0
    stored = sorted(client.get("/api/v1/alerts", headers=R).json(), key=lambda x: x["id"])
    assert len(stored) == 2
    first = stored[0]
    assert len(first["labels"]["query"]) == TEXT_LIMIT
    assert (
        first["labels"]["query"].startswith("x" * 1000)
        and "9092 characters" in first["labels"]["query"]
    )
    assert stored[1]["labels"]["query"] != first["labels"]["query"]  # the hash keeps them apart
    assert len(first["annotations"]["description"]) == TEXT_LIMIT
    assert first["annotations"]["summary"] == "short"
    # a label name past its limit is still refused (names identify; no rule writes such names)
    bad = alert({"alertname": "Name", "cluster": "c0", "n" * 300: "v"})
    r = client.post("/api/v1/alerts", json=webhook([bad, alert({"alertname": "Ok"})]), headers=IN)
    assert r.status_code == 200 and r.json()["rejected_count"] == 1


# ------------------------------------------------------------------------------ 422 bodies
HOSTILE_VALUES = ("NaN", "Infinity", "-Infinity", '"\\ud800"', '"\\udfff x"', "1" + "0" * 4000)


@pytest.mark.parametrize("value", HOSTILE_VALUES)
def test_error_bodies_are_json_and_short_whatever_came_in(client: TestClient, value: str) -> None:
    cases = [
        ("POST", "/api/v1/placements", '{"num_gpu": %s}'),
        ("POST", "/api/v1/rca", '{"alerts": [{"labels": {"a": "b"}}], "top_k": %s}'),
        ("POST", "/api/v1/incidents/1/feedback", '{"root_cause": "x", "by": %s}'),
        ("PUT", "/api/v1/graph", '{"name": %s, "nodes": [], "edges": []}'),
        ("POST", "/api/v1/alerts", '{"alerts": [{"labels": {"a": "b"}, "startsAt": %s}]}'),
    ]
    for method, path, template in cases:
        r = client.request(method, path, content=template % value, headers=AJ)
        assert r.status_code == 422, (path, value, r.status_code, r.text[:200])
        json.loads(r.text)
        assert len(r.content) < 4096, (path, len(r.content))


def test_a_large_invalid_body_is_not_echoed_back(client: TestClient) -> None:
    big = json.dumps({"num_gpu": "x" * 2_000_000})
    r = client.post("/api/v1/placements", content=big, headers=AJ)
    assert r.status_code == 422 and len(r.content) < 4096


def test_graph_attrs_json_cannot_carry_are_refused(client: TestClient) -> None:
    graph = client.get("/api/v1/graph", headers=R).json()
    first = json.dumps({**graph["nodes"][0], "attrs": {"k": "@"}})
    rest = json.dumps(graph["nodes"][1:])[1:]
    for bad in ('"\\ud800"', "NaN", "Infinity"):
        nodes = "[" + first.replace('"@"', bad) + ", " + rest
        body = f'{{"name": "g", "nodes": {nodes}, "edges": {json.dumps(graph["edges"])}}}'
        r = client.put("/api/v1/graph", content=body, headers=AJ)
        assert r.status_code == 422, (bad, r.status_code, r.text[:200])
    r = client.get("/api/v1/graph", headers=R)
    assert r.status_code == 200 and r.json()["name"] == graph["name"]


def test_feedback_signed_with_blanks_is_refused(client: TestClient) -> None:
    client.post(
        "/api/v1/alerts", json=webhook([alert({"alertname": "F", "cluster": "c0"})]), headers=IN
    )
    client.app.state.services.incidents.process_pending()
    r = client.post(
        "/api/v1/incidents/1/feedback", json={"root_cause": "c0/host/c0-h1", "by": "   "}, headers=A
    )
    assert r.status_code == 422


def test_database_errors_from_input_are_422_and_outages_503(tmp_path: Path) -> None:
    from fastapi import APIRouter
    from sqlalchemy.exc import DataError, IntegrityError, OperationalError

    app = create_app(make_settings(tmp_path, api_token=None, read_token=None, ingest_token=None))
    raised = {
        "data": DataError("INSERT", {}, Exception("value too long for type character varying")),
        "integrity": IntegrityError("INSERT", {}, Exception("duplicate key")),
        "down": OperationalError("SELECT 1", {}, Exception("connection refused")),
    }
    extra = APIRouter()
    for name, err in raised.items():
        extra.add_api_route(f"/boom/{name}", _raiser(err), methods=["GET"])
    app.include_router(extra)
    with TestClient(app) as c:
        assert c.get("/boom/data").status_code == 422
        assert c.get("/boom/integrity").status_code == 422
        r = c.get("/boom/down")
        assert r.status_code == 503 and "unavailable" in r.json()["detail"]


def test_a_deleted_sqlite_file_is_503_not_silent_loss(tmp_path: Path) -> None:
    """Deleting the SQLite file under a running service (a cleanup job, a volume swapped) left
    its connections writing into a file without a name: webhooks got 200 and /readyz said ready,
    and every alert acknowledged since was gone at the next start. Now both answer 503, so
    Alertmanager keeps retrying and the orchestrator restarts the service."""
    import os

    with TestClient(create_app(make_settings(tmp_path))) as c:
        hook = webhook([alert({"alertname": "Before", "cluster": "c0"})])
        assert c.post("/api/v1/alerts", json=hook, headers=IN).status_code == 200
        assert c.get("/readyz").status_code == 200
        for suffix in ("", "-wal", "-shm"):
            if os.path.exists(f"{tmp_path}/hostile.db{suffix}"):
                os.remove(f"{tmp_path}/hostile.db{suffix}")
        hook = webhook([alert({"alertname": "After", "cluster": "c0"})])
        r = c.post("/api/v1/alerts", json=hook, headers=IN)
        assert r.status_code == 503, r.text
        r = c.get("/readyz")
        assert r.status_code == 503 and "database" in r.text


def _raiser(err: Exception) -> Any:
    def route() -> None:
        raise err

    return route


# ------------------------------------------------------------------------------ before the token
def _post_login_streaming(app: Any, declared: bool, total: int = 4 << 20) -> tuple[int, int]:
    """POST ``total`` bytes to ``/ui/login`` straight through the ASGI app, 4 KiB a message;
    returns the status and how many bytes the app asked for."""
    chunk = b"a" * 4096
    fed = 0
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        nonlocal fed
        fed += len(chunk)
        return {"type": "http.request", "body": chunk, "more_body": fed < total}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    headers = [(b"content-type", b"application/x-www-form-urlencoded"), (b"host", b"x")]
    if declared:
        headers.append((b"content-length", str(total).encode()))
    scope = {
        "type": "http",
        "http_version": "1.1",
        "method": "POST",
        "path": "/ui/login",
        "raw_path": b"/ui/login",
        "query_string": b"",
        "headers": headers,
        "scheme": "http",
        "server": ("127.0.0.1", 80),
        "client": ("127.0.0.1", 5000),
        "root_path": "",
        "app": app,
        "state": {},
    }
    asyncio.run(app(scope, receive, send))
    return sent[0]["status"], fed


def test_public_routes_read_a_few_kib_at_most(client: TestClient) -> None:
    """``/ui/login`` (public: the token comes in its body) stops reading at the limit, declared
    length or not."""
    from fleetmind.serving.deps import PUBLIC_BODY_BYTES

    for declared in (True, False):
        status, fed = _post_login_streaming(client.app, declared)
        assert status == 413, declared
        assert fed <= PUBLIC_BODY_BYTES + 4096, (declared, fed)


@pytest.mark.parametrize(
    "form,headers",
    [
        ({"token": "tökén", "csrf": "*"}, {}),  # csrf replaced by the cookie below
        ({"token": ADMIN, "csrf": "çsrf-välüe-with-ümlauts-xx"}, {}),
        ({"token": ADMIN, "csrf": "*"}, {"Origin": "http://["}),
        ({"token": ADMIN, "csrf": "*"}, {"Origin": "null"}),
    ],
)
def test_login_form_never_fails_on_odd_values(
    client: TestClient, form: dict[str, str], headers: dict[str, str]
) -> None:
    client.get("/ui/login")
    if form["csrf"] == "*":
        form = {**form, "csrf": client.cookies.get(auth.CSRF_COOKIE)}
    r = client.post("/ui/login", data=form, headers=headers, follow_redirects=False)
    assert r.status_code in (401, 403), r.status_code
    assert auth.SESSION_COOKIE not in r.headers.get("set-cookie", "")


def test_a_non_ascii_csrf_cookie_is_not_a_500(client: TestClient) -> None:
    cookie = ("fm_csrf=" + "ü" * 30).encode()
    r = client.post(
        "/ui/login",
        data={"token": ADMIN, "csrf": "ü" * 30},
        headers=[(b"cookie", cookie)],
        follow_redirects=False,
    )
    assert r.status_code == 403


# ------------------------------------------------------------------------------ sessions
def test_logout_revokes_every_copy_of_the_cookie(client: TestClient) -> None:
    assert login(client).status_code == 303
    copy = client.cookies.get(auth.SESSION_COOKIE)
    r = client.post("/ui/logout", data={"csrf": page_csrf(client)}, follow_redirects=False)
    assert r.status_code == 303
    client.cookies.delete(auth.SESSION_COOKIE)
    client.cookies.set(auth.SESSION_COOKIE, copy)
    assert client.get("/ui/", follow_redirects=False).status_code == 303


def test_token_rotation_revokes_its_sessions(client: TestClient) -> None:
    assert login(client, READ).status_code == 303
    assert client.get("/ui/", follow_redirects=False).status_code == 200
    services = client.app.state.services
    services.settings = services.settings.model_copy(update={"read_token": "rotated-read-token"})
    assert client.get("/ui/", follow_redirects=False).status_code == 303


def test_a_cookie_cannot_claim_its_own_expiry(client: TestClient) -> None:
    assert login(client).status_code == 303
    value = client.cookies.get(auth.SESSION_COOKIE)
    assert "inf" not in value.split(".")
    for forged in ("v1.inf.admin-ingest-read.x", "v1.1e400.read.x", value + "x"):
        client.cookies.delete(auth.SESSION_COOKIE)
        client.cookies.set(auth.SESSION_COOKIE, forged)
        assert client.get("/ui/", follow_redirects=False).status_code == 303
    row = client.app.state.services.db.get_ui_session(auth.session_key(value))
    assert row is not None and row["expires_ts"] - time.time() <= 12 * 3600 + 5


def test_an_expired_session_is_refused(client: TestClient) -> None:
    assert login(client).status_code == 303
    from sqlalchemy import update

    from fleetmind.serving.db import ui_sessions

    with client.app.state.services.db.write() as conn:
        conn.execute(update(ui_sessions).values(expires_ts=time.time() - 1))
    assert client.get("/ui/", follow_redirects=False).status_code == 303


def test_csrf_is_tied_to_the_session(client: TestClient, tmp_path: Path) -> None:
    assert login(client).status_code == 303
    with TestClient(client.app) as other:
        assert login(other).status_code == 303
        theirs = page_csrf(other)
        # the other browser's own valid token, planted as this browser's CSRF cookie
        client.cookies.delete(auth.CSRF_COOKIE)
        client.cookies.set(auth.CSRF_COOKIE, theirs)
        r = client.post("/ui/logout", data={"csrf": theirs}, follow_redirects=False)
        assert r.status_code == 403
        assert client.get("/ui/", follow_redirects=False).status_code == 200


def test_origin_null_is_refused_on_state_changing_forms(client: TestClient) -> None:
    assert login(client).status_code == 303
    token = page_csrf(client)
    r = client.post(
        "/ui/logout", data={"csrf": token}, headers={"Origin": "null"}, follow_redirects=False
    )
    assert r.status_code == 403
    assert client.get("/ui/", follow_redirects=False).status_code == 200


def test_pages_carry_csp_and_nosniff(client: TestClient) -> None:
    r = client.get("/ui/login")
    csp = r.headers["content-security-policy"]
    for directive in ("default-src 'none'", "frame-ancestors 'none'", "form-action 'self'"):
        assert directive in csp
    assert r.headers["x-content-type-options"] == "nosniff"
    assert client.get("/healthz").headers["x-content-type-options"] == "nosniff"
    assert client.get("/api/v1/alerts", headers=R).headers["x-content-type-options"] == "nosniff"
    login(client)
    client.post(
        "/api/v1/alerts", json=webhook([alert({"alertname": "C", "cluster": "c0"})]), headers=IN
    )
    client.app.state.services.incidents.process_pending()
    page = client.get("/ui/incidents/1")
    nonce = page.headers["content-security-policy"].split("'nonce-")[1].split("'")[0]
    assert f'<script nonce="{nonce}">' in page.text


def test_the_ui_api_link_works_with_the_session(client: TestClient) -> None:
    login(client)
    html = client.get("/ui/").text
    assert 'href="/docs"' in html
    assert client.get("/docs").status_code == 200
    assert client.get("/openapi.json").status_code == 200
    client.cookies.delete(auth.SESSION_COOKIE)
    assert client.get("/openapi.json").status_code == 401


@pytest.mark.parametrize("model", ["baseline:upstream-coverage", None])
def test_rca_refuses_the_timestamps_the_webhook_refuses(tmp_path: Path, model: str | None) -> None:
    """Every parse path of ``POST /api/v1/rca`` (the GAT's column and dict parsers, the generic
    one) answers what ``AlertIn`` says."""
    labels = {"alertname": "X", "cluster": "c0", "node": "c0-h1"}
    cases = [
        {"labels": labels, "startsAt": LAST_SECOND},
        {"labels": labels, "startsAt": "2026-01-01T00:00:00Z", "endsAt": LAST_SECOND},
        {"labels": labels, "startsAt": "2026-01-02T00:00:00Z", "endsAt": "2026-01-01T00:00:00Z"},
        {"labels": labels, "startsAt": "2026-01-02T00:00:00Z", "endsAt": "1969-01-01T00:00:00Z"},
    ]
    ok = {"labels": labels, "startsAt": "9999-12-31T23:59:59Z", "endsAt": "0001-01-01T00:00:00Z"}
    with TestClient(create_app(make_settings(tmp_path, rca_model=model))) as c:
        for a in cases:
            r = c.post("/api/v1/rca", json={"alerts": [a, ok]}, headers=R)
            assert r.status_code == 422, (a, r.status_code)
        assert c.post("/api/v1/rca", json={"alerts": [ok]}, headers=R).status_code == 200


@pytest.mark.parametrize("model", ["baseline:upstream-coverage", None])
@pytest.mark.parametrize("rca_processes", [0, 2])
def test_a_graph_without_nodes_is_refused_and_rca_keeps_the_served_graph(
    tmp_path: Path, model: str | None, rca_processes: int
) -> None:
    """A graph without nodes is refused, served (``PUT /api/v1/graph``) or inline in ``POST
    /api/v1/rca``: it would map no alert and rank no cause. Served, it was accepted up to
    2026-12-04 and re-ranked every open incident to no cause; ranking on it was a 500 with the
    released GAT (``model=None``) before 2026-12-03 (the long fuzz run at the service's defaults
    found it). ``tests/test_serving_rca_batch.py`` still ranks on an empty graph built in code."""
    settings = make_settings(tmp_path, rca_model=model, rca_processes=rca_processes)
    with TestClient(create_app(settings)) as c:
        r = c.put("/api/v1/graph", json={"nodes": [], "edges": []}, headers=A)
        assert r.status_code == 422 and "has no nodes" in r.json()["detail"]
        alerts = [{"labels": {}}, {"labels": {"alertname": "GPUXidError", "node": "h0"}}]
        inline = {"alerts": alerts, "graph": {"nodes": [], "edges": []}}
        assert c.post("/api/v1/rca", json=inline, headers=R).status_code == 422
        r = c.post("/api/v1/rca", json={"alerts": alerts}, headers=R)
        assert r.status_code == 200, r.text  # on the graph still served


def test_prometheus_credentials_never_reach_clients(tmp_path: Path) -> None:
    """A Prometheus URL may carry basic-auth ``user:password@``; the 503s and the fleet page's
    banner that quote it go to read-scope clients (OWASP Top 10 A01, CWE-209)."""
    settings = make_settings(
        tmp_path,
        telemetry="prometheus",
        prometheus_url="http://promuser:S3cret%40Pw@127.0.0.1:9",
        telemetry_timeout_s=0.5,
    )
    with TestClient(create_app(settings)) as c:
        fleet = c.get("/api/v1/fleet", headers=R)
        place = c.post("/api/v1/placements", headers=R, json={"num_gpu": 1})
        login(c, READ)
        page = c.get("/ui/fleet")
    assert fleet.status_code == 503 and "127.0.0.1:9" in fleet.json()["detail"]
    for text in (fleet.text, place.text, page.text):
        assert "S3cret" not in text and "promuser" not in text
    assert place.status_code == 503


def test_a_large_rca_body_is_parsed_off_the_event_loop(
    client: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Validating a 16 MiB body (a graph of 130,000 nodes) takes seconds; on the event loop it held
    back every probe and webhook meanwhile, and back-to-back requests from a read token tripped the
    shipped liveness probe (3 s). FastAPI, "Concurrency and async / await": blocking work in an
    ``async def`` route blocks the loop."""
    from fleetmind.serving.rca import router as rca_router

    real, on_loop = rca_router.parse_for, []

    def spy(*args: Any) -> Any:
        try:
            asyncio.get_running_loop()
            on_loop.append(True)
        except RuntimeError:
            on_loop.append(False)
        return real(*args)

    monkeypatch.setattr(rca_router, "parse_for", spy)
    one = [alert({"alertname": "KubeNodeNotReady", "node": "c0-h0"})]
    big = [  # ~500 KiB: 2,000 alerts with a summary each
        alert({"alertname": "KubeNodeNotReady", "node": "c0-h0", "n": str(i)},
              annotations={"summary": "x" * 200})
        for i in range(2000)
    ]  # fmt: skip
    for alerts in (one, big):
        assert client.post("/api/v1/rca", headers=R, json={"alerts": alerts}).status_code == 200
    assert on_loop == [True, False]  # small bodies stay inline: no thread hop on the hot path


def _fits_422(spec: dict[str, Any], body: Any) -> bool:
    """Whether ``body`` is one of the 422 schemas the spec names: ``ErrorOut`` (``detail`` a
    string) or ``HTTPValidationError`` (``detail`` a list of ``ValidationError`` objects)."""
    comps = spec["components"]["schemas"]
    if set(comps["ErrorOut"]["required"]) <= set(body) and isinstance(body["detail"], str):
        return True
    required = set(comps["ValidationError"]["required"])
    detail = body.get("detail")
    return isinstance(detail, list) and all(required <= set(e) for e in detail)


def test_every_422_matches_the_published_schema(client: TestClient) -> None:
    """Clients generated from ``/openapi.json`` decode 422s by its schema: routes' own checks send
    a message, request models a list, and bodies FastAPI cannot decode (not UTF-8, an integer over
    4,300 digits) were a 400 no route declared."""
    spec = client.get("/openapi.json", headers=A).json()
    for path, ops in spec["paths"].items():
        for method, op in ops.items():
            if "requestBody" in op or "422" in op["responses"]:
                schema = op["responses"]["422"]["content"]["application/json"]["schema"]
                refs = {s["$ref"].rsplit("/", 1)[1] for s in schema["anyOf"]}
                assert refs == {"ErrorOut", "HTTPValidationError"}, (method, path)
    not_utf8, huge_int = b'{"num_gpu": "\xff"}', b'{"num_gpu": 1' + b"1" * 5000 + b"}"
    answers = [
        client.post("/api/v1/alerts", headers=AJ),  # no body: the model's list
        client.post("/api/v1/placements", headers=AJ, json={"num_gpu": 2, "gpu_milli": 500}),
        client.post("/api/v1/placements", headers=AJ, content=not_utf8),
        client.post("/api/v1/placements", headers=AJ, content=huge_int),
        client.post("/api/v1/incidents/1/feedback", headers=AJ, content=not_utf8),
        client.put("/api/v1/graph", headers=AJ, content=b"\xff"),
    ]
    for r in answers:
        assert r.status_code == 422 and _fits_422(spec, r.json()), (r.request.url, r.text)
