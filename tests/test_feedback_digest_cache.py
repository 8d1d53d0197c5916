"""A feedback post hashes the served graph once per graph, not once per post: serialising and
hashing a 200,000-node graph took seconds, which every ``POST /api/v1/incidents/{id}/feedback``
paid. The digest is the one the uncached computation gives, and a swapped-in graph (a new object,
even with the same content) is hashed again."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from serving_helpers import webhook
from sqlalchemy import delete, select
from ui_helpers import TRUE_ROOT, storm_alerts

from fleetmind.data.graph import DependencyGraph
from fleetmind.serving import feedback
from fleetmind.serving.app import create_app
from fleetmind.serving.db import feedback_graphs, incident_feedback
from fleetmind.serving.settings import Settings

TOKEN = "digest-token"
H = {"Authorization": f"Bearer {TOKEN}"}


@pytest.fixture
def client(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[TestClient]:
    monkeypatch.setenv("MLFLOW_DISABLE_TELEMETRY", "true")
    settings = Settings(
        database_url=f"sqlite:///{tmp_path}/fb.db",
        rca_model="baseline:upstream-coverage",
        placement_model="heuristic:builtin-bestfit",
        incident_worker=False,
        api_token=TOKEN,
    )
    with TestClient(create_app(settings), headers=H) as c:
        assert c.post("/api/v1/alerts", json=webhook(storm_alerts())).status_code == 200
        c.app.state.services.incidents.process_pending()
        yield c


@pytest.fixture
def digest_calls(monkeypatch: pytest.MonkeyPatch) -> list[DependencyGraph]:
    """The graphs :func:`feedback._graph_digest` (the serialise-and-hash) is computed for."""
    calls: list[DependencyGraph] = []
    real = feedback._graph_digest

    def counting(graph: DependencyGraph) -> tuple[str, dict[str, Any]]:
        calls.append(graph)
        return real(graph)

    monkeypatch.setattr(feedback, "_graph_digest", counting)
    return calls


def _post(c: TestClient, by: str) -> None:
    storm = next(i for i in c.get("/api/v1/incidents").json() if i["alert_count"] == 7)
    r = c.post(
        f"/api/v1/incidents/{storm['id']}/feedback", json={"root_cause": TRUE_ROOT, "by": by}
    )
    assert r.status_code == 201, r.text


def _stored(c: TestClient) -> tuple[list[str], dict[str, Any]]:
    """The feedback rows' graph digests (oldest first) and the stored graphs by digest."""
    db = c.app.state.services.db
    with db.read() as conn:
        rows = conn.execute(
            select(incident_feedback.c.graph_digest).order_by(incident_feedback.c.id)
        )
        graphs = conn.execute(select(feedback_graphs.c.digest, feedback_graphs.c.graph))
        return [r[0] for r in rows], {r[0]: r[1] for r in graphs}


def _uncached(graph: DependencyGraph) -> tuple[str, dict[str, Any]]:
    """The digest as every post computed it before (sha256 of the canonical JSON), and the JSON."""
    obj = graph.to_json()
    text = json.dumps(obj, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest(), obj


def test_two_posts_on_one_graph_hash_it_once(
    client: TestClient, digest_calls: list[DependencyGraph]
) -> None:
    graph = client.app.state.services.graphs.graph
    _post(client, "alice")
    _post(client, "bob")
    assert digest_calls == [graph]
    digest, obj = _uncached(graph)
    digests, graphs = _stored(client)
    assert digests == [digest, digest]
    assert graphs == {digest: obj}


def test_a_swapped_graph_is_hashed_again(
    client: TestClient, digest_calls: list[DependencyGraph]
) -> None:
    """A swap serves a new graph object: hashed once more (here with the same content, so the
    same digest), then cached for it in turn."""
    services = client.app.state.services
    first = services.graphs.graph
    _post(client, "alice")
    second = DependencyGraph.from_json(first.to_json())
    services.graphs.replace(second)
    _post(client, "bob")
    _post(client, "carol")
    assert digest_calls == [first, second]
    digest, obj = _uncached(second)
    assert _stored(client) == ([digest] * 3, {digest: obj})


def test_the_graph_is_stored_again_when_its_row_is_gone(
    client: TestClient, digest_calls: list[DependencyGraph]
) -> None:
    """With the digest cached, the graph's JSON is built afresh when its row must be written."""
    graph = client.app.state.services.graphs.graph
    _post(client, "alice")
    with client.app.state.services.db.write() as conn:
        conn.execute(delete(feedback_graphs))
    _post(client, "bob")
    assert digest_calls == [graph]
    digest, obj = _uncached(graph)
    assert _stored(client) == ([digest, digest], {digest: obj})
