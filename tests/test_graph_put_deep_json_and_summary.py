"""``PUT /api/v1/graph``: what its OpenAPI summary claims, and how it refuses a too-deep body.

- The summary said "(in this process; new alerts group on it)", but with ``--workers N`` or
  replicas an upload reaches one process, and incidents are grouped only by the process holding
  the incident worker's leader lease, on its own graph. It now says so.
- A JSON body nested thousands deep makes the parser raise ``RecursionError``, which FastAPI turns
  into 400 "There was an error parsing the body" (fastapi/routing.py); the service answers every
  such body with 422, and now names the nesting, as the CLI does for files
  (``fleetmind.data.files``: "arrays or objects nested too deeply") instead of the UTF-8 and
  integer-digits reasons.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from fleetmind.serving.app import TOO_DEEP_BODY, UNREADABLE_BODY, create_app
from fleetmind.serving.settings import Settings

ADMIN = "graph-put-admin-token"
A = {"Authorization": f"Bearer {ADMIN}", "Content-Type": "application/json"}


@pytest.fixture
def client(tmp_path: Path) -> Iterator[TestClient]:
    settings = Settings(
        database_url=f"sqlite:///{tmp_path}/d.db",
        rca_model="baseline:upstream-coverage",
        placement_model="heuristic:builtin-bestfit",
        incident_worker=False,
        api_token=ADMIN,
    )
    with TestClient(create_app(settings)) as c:
        yield c


def test_a_too_deep_body_is_a_422_naming_the_nesting(client: TestClient) -> None:
    deep = b'{"name": "g", "nodes": ' + b"[" * 2000 + b"]" * 2000 + b', "edges": []}'
    for r in (
        client.put("/api/v1/graph", headers=A, content=deep),
        client.post("/api/v1/placements", headers=A, content=b"[" * 2000 + b"]" * 2000),
    ):
        assert r.status_code == 422, r.text
        assert r.json() == {"detail": TOO_DEEP_BODY}
        assert "nested too deeply" in TOO_DEEP_BODY
    huge_int = b'{"num_gpu": 1' + b"1" * 5000 + b"}"  # the other unreadable bodies: unchanged
    r = client.post("/api/v1/placements", headers=A, content=huge_int)
    assert r.status_code == 422 and r.json() == {"detail": UNREADABLE_BODY}


def test_the_put_summary_names_the_answering_process_and_the_leader(client: TestClient) -> None:
    spec = client.get("/openapi.json", headers=A).json()
    summary = spec["paths"]["/api/v1/graph"]["put"]["summary"]
    assert summary == (
        "Replace the graph served by the process that answered (one worker or replica; "
        "incidents group on the leader's graph)"
    )
