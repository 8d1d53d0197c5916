"""HTTP semantics of the API: the feedback of an unknown incident is a 404, every ``/api/v1``
body with a declared type other than JSON gets 415, and every ``GET`` route answers ``HEAD``.

``curl -d`` sends ``Content-Type: application/x-www-form-urlencoded`` unless told otherwise
(curl manual, ``-d, --data``): FastAPI then skipped JSON parsing and answered 422 "Input should
be a valid dictionary" on the routes with a body model. HEAD is GET without the content
(RFC 9110 section 9.3.2); ``curl -I``, load balancers' health checks and link checkers send it,
and RFC 9110 section 9.1 makes it mandatory wherever ``GET`` is served. FastAPI's ``APIRoute`` does
not add it as Starlette's ``Route`` does (fastapi/fastapi issue 1773).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from serving_helpers import webhook
from test_webhook_body_limit import make_settings
from ui_helpers import TRUE_ROOT, storm_alerts

from fleetmind.serving.app import create_app

TOKEN = "http-semantics-token-0123"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
NOT_JSON_TYPES = ("application/x-www-form-urlencoded", "text/plain", "application/octet-stream")


@pytest.fixture
def client(tmp_path: Path) -> Iterator[TestClient]:
    with TestClient(create_app(make_settings(tmp_path, api_token=TOKEN))) as c:
        assert c.post("/api/v1/alerts", json=webhook(storm_alerts()), headers=AUTH).is_success
        c.app.state.services.incidents.process_pending()
        yield c


def test_feedback_of_an_unknown_incident_is_404(client: TestClient) -> None:
    r = client.get("/api/v1/incidents/999999/feedback", headers=AUTH)
    assert r.status_code == 404 and "no incident 999999" in r.json()["detail"]
    assert client.get("/api/v1/incidents/1/feedback", headers=AUTH).json() == []


def _post(client: TestClient, method: str, path: str, doc: object, ctype: str) -> object:
    headers = {**AUTH, "Content-Type": ctype}
    return client.request(method, path, content=json.dumps(doc).encode(), headers=headers)


def test_api_bodies_need_json_or_no_content_type(client: TestClient) -> None:
    """One rule on every route with a body: a declared type other than JSON is a 415 that says
    what to send (RFC 9110 section 15.5.16), not FastAPI's 422 "Input should be a valid
    dictionary"; JSON, or no ``Content-Type`` at all, is read as JSON."""
    feedback = {"root_cause": TRUE_ROOT, "by": "alice"}
    for ctype in NOT_JSON_TYPES:
        for method, path, doc in (
            ("POST", "/api/v1/placements", {"num_gpu": 1}),
            ("POST", "/api/v1/incidents/1/feedback", feedback),
            ("PUT", "/api/v1/graph", {}),
        ):
            r = _post(client, method, path, doc, ctype)
            assert r.status_code == 415, (ctype, path, r.text[:300])
            assert "application/json" in r.json()["detail"]
    for json_type in ("application/json", "text/json", "application/json; charset=utf-8"):
        r = _post(client, "POST", "/api/v1/placements", {"num_gpu": 1}, json_type)
        assert r.status_code == 200, (json_type, r.text[:300])
    r = client.post(
        "/api/v1/incidents/1/feedback", content=json.dumps(feedback).encode(), headers=AUTH
    )  # no Content-Type: read as JSON
    assert r.status_code == 201, r.text[:300]


def test_the_probes_and_metrics_answer_head(client: TestClient) -> None:
    for path in ("/healthz", "/readyz", "/metrics"):
        r = client.head(path)
        assert r.status_code == 200, (path, r.status_code)
        assert r.content == b""
    got = client.get("/healthz")
    assert client.head("/healthz").headers["content-length"] == got.headers["content-length"]


def test_every_get_route_answers_head_as_get_without_content(client: TestClient) -> None:
    assert client.post("/api/v1/alerts", json=webhook(storm_alerts()), headers=AUTH).is_success
    paths = ("/api/v1/incidents", "/api/v1/incidents/1", "/api/v1/fleet", "/ui/login", "/")
    for path in paths:
        got = client.get(path, headers=AUTH, follow_redirects=False)
        head = client.head(path, headers=AUTH, follow_redirects=False)
        assert head.status_code == got.status_code, (path, head.status_code, got.status_code)
        assert head.content == b"", path
        assert head.headers.get("content-type") == got.headers.get("content-type"), path
    assert client.head("/api/v1/incidents").status_code == 401  # the token is still asked for
    assert client.head("/api/v1/incidents/999999", headers=AUTH).status_code == 404
    assert client.get("/api/v1/placements", headers=AUTH).status_code == 405
    refused = client.head("/api/v1/placements", headers=AUTH)  # a route without GET keeps its 405
    assert refused.status_code == 405
    assert "POST" in refused.headers["allow"]
