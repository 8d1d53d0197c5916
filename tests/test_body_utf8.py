"""JSON bodies are UTF-8 on every route (RFC 8259 section 8.1: "JSON text exchanged between
systems that are not part of a closed ecosystem MUST be encoded using UTF-8"; implementations
"MUST NOT add a byte order mark").

``POST /api/v1/alerts`` and ``/api/v1/rca`` parse their bodies with pydantic-core, which reads
UTF-8 only; the routes with a FastAPI body model (placements, feedback, the graph) went through
Starlette's ``Request.json``, ``json.loads`` on bytes, which guesses UTF-16 and UTF-32 from the
first bytes (CPython ``json.detect_encoding``) and drops a UTF-8 BOM: they stored or acted on
bodies the others refused. Now all of them answer 422 ``json_invalid`` (``serving/origin_guard.py``,
``utf8_json``).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from serving_helpers import webhook
from ui_helpers import TRUE_ROOT, storm_alerts

from fleetmind.serving.app import create_app
from fleetmind.serving.origin_guard import Utf8JsonRoute, utf8_json
from fleetmind.serving.settings import Settings

JSON = {"Content-Type": "application/json"}
ENCODINGS = ["utf-16", "utf-16-le", "utf-16-be", "utf-32", "utf-32-le", "utf-8-sig"]
"""What ``json.loads`` on bytes took: ``utf-16`` and ``utf-32`` with a BOM (as
``iconv -t utf-16`` writes them), without one, and UTF-8 with a BOM."""


def _settings(tmp_path: Path) -> Settings:
    return Settings(
        database_url=f"sqlite:///{tmp_path}/u8.db",
        rca_model="baseline:upstream-coverage",
        placement_model="heuristic:builtin-bestfit",
        incident_worker=False,
    )


@pytest.fixture
def client(tmp_path: Path) -> Iterator[TestClient]:
    with TestClient(create_app(_settings(tmp_path))) as c:
        r = c.post("/api/v1/alerts", json=webhook(storm_alerts()))
        assert r.status_code == 200, r.text
        c.app.state.services.incidents.process_pending()  # type: ignore[attr-defined]
        yield c


def _refused(r: Any) -> None:
    assert r.status_code == 422, r.text
    errors = r.json()["detail"]
    assert isinstance(errors, list) and errors[0]["type"] == "json_invalid", errors


@pytest.mark.parametrize("encoding", ENCODINGS)
def test_placements_take_utf8_only(client: TestClient, encoding: str) -> None:
    job = {"num_gpu": 1}
    _refused(
        client.post("/api/v1/placements", content=json.dumps(job).encode(encoding), headers=JSON)
    )
    r = client.post("/api/v1/placements", content=json.dumps(job).encode(), headers=JSON)
    assert r.status_code == 200, r.text


@pytest.mark.parametrize("encoding", ENCODINGS)
def test_a_graph_upload_takes_utf8_only(client: TestClient, encoding: str) -> None:
    graph = client.get("/api/v1/graph").json()
    served = graph["name"]
    graph["name"] = "uploaded"
    _refused(client.put("/api/v1/graph", content=json.dumps(graph).encode(encoding), headers=JSON))
    assert client.get("/api/v1/graph").json()["name"] == served  # not replaced
    r = client.put("/api/v1/graph", content=json.dumps(graph).encode(), headers=JSON)
    assert r.status_code == 200, r.text
    assert client.get("/api/v1/graph").json()["name"] == "uploaded"


@pytest.mark.parametrize("encoding", ENCODINGS)
def test_feedback_takes_utf8_only(client: TestClient, encoding: str) -> None:
    incident = max(client.get("/api/v1/incidents").json(), key=lambda i: i["alert_count"])
    url = f"/api/v1/incidents/{incident['id']}/feedback"
    body = {"root_cause": TRUE_ROOT, "by": "alice"}
    _refused(client.post(url, content=json.dumps(body).encode(encoding), headers=JSON))
    assert client.get(url).json() == []  # nothing stored
    assert client.post(url, content=json.dumps(body).encode(), headers=JSON).status_code == 201


@pytest.mark.parametrize("encoding", ENCODINGS)
def test_alerts_and_rca_answer_the_same(client: TestClient, encoding: str) -> None:
    """The routes that already read UTF-8 only (pydantic-core): the answer the others now give."""
    body = json.dumps(webhook(storm_alerts())).encode(encoding)
    _refused(client.post("/api/v1/alerts", content=body, headers=JSON))
    _refused(client.post("/api/v1/rca", content=body, headers=JSON))


def test_bytes_that_are_not_utf8_name_the_offset(client: TestClient) -> None:
    """Latin-1, and a surrogate encoded in three bytes (CESU-8, which ``json.loads`` on bytes let
    through with ``surrogatepass``)."""
    for raw, offset in (
        (b'{"num_gpu": 1, "job_id": "caf\xe9"}', 29),
        (b'{"job_id": "\xed\xa0\x80"}', 12),
    ):
        r = client.post("/api/v1/placements", content=raw, headers=JSON)
        _refused(r)
        error = r.json()["detail"][0]
        assert error["loc"] == ["body", offset]
        assert "not UTF-8" in error["ctx"]["error"] and f"offset {offset}" in error["ctx"]["error"]


def test_utf8_json_refuses_what_json_loads_guessed() -> None:
    doc = {"a": "é€😀"}
    assert utf8_json(json.dumps(doc, ensure_ascii=False).encode()) == doc
    for encoding in ENCODINGS:
        raw = json.dumps(doc, ensure_ascii=False).encode(encoding)
        assert json.loads(raw) == doc  # what Starlette's Request.json accepted
        with pytest.raises(json.JSONDecodeError):
            utf8_json(raw)


def _api_routes(routes: list[Any]) -> Iterator[Any]:
    for route in routes:
        inner = getattr(route, "original_router", None)  # FastAPI's included router
        if inner is not None:
            yield from _api_routes(inner.routes)
        else:
            yield route


def test_every_route_with_a_body_model_reads_utf8(tmp_path: Path) -> None:
    """A route added later with a FastAPI body model, on a router without ``Utf8JsonRoute``,
    would take UTF-16 again."""
    app = create_app(_settings(tmp_path))
    with_body = {
        (route.path, method): type(route)
        for route in _api_routes(app.router.routes)
        if getattr(route, "body_field", None) is not None
        for method in route.methods
    }
    assert {
        ("/api/v1/placements", "POST"),
        ("/api/v1/graph", "PUT"),
        ("/api/v1/incidents/{incident_id}/feedback", "POST"),
    } <= set(with_body)
    assert all(issubclass(cls, Utf8JsonRoute) for cls in with_body.values()), with_body
