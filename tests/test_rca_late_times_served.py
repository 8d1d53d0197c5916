"""A valid ``POST /api/v1/rca`` whose alerts start after the year 5138 is ranked, as before.

The schema accepts instants up to ``serving.schemas.LATEST`` (9999-12-31T23:59:59Z) and the
service hands the released neighbour GAT unix seconds of them (``serving.rca.request``), which
reach the propagation features (``rca.features.neighbours``). From the year 5138 on those are at
least 1e11 s: refused as "milliseconds" at ranking time, such a request got a 422 and no ranking.
"""

from __future__ import annotations

import os
from datetime import UTC, datetime
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from fleetmind.rca.gat_analyzer import RELEASED_DIR, GATAnalyzer
from fleetmind.serving.defaults.example import build_example_graph

os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")


def _gpu_alerts(start: object) -> list[dict[str, object]]:
    graph = build_example_graph(clusters=1, hosts=2, gpus=2, services=2, pods=1, name="late")
    gpus = [n for n in graph.nodes if n.kind == "gpu" and n.match][:3]
    return [
        {"status": "firing", "labels": {"alertname": "GpuXidError", **n.match}, "startsAt": start}
        for n in gpus
    ]


def test_the_released_model_ranks_seconds_of_the_year_9998() -> None:
    graph = build_example_graph(clusters=1, hosts=2, gpus=2, services=2, pods=1, name="late")
    late = datetime(9998, 12, 31, 23, 59, 59, tzinfo=UTC).timestamp()
    now = datetime(2026, 12, 6, tzinfo=UTC).timestamp()
    analyzer = GATAnalyzer.load(RELEASED_DIR)
    got = analyzer.find_root_causes(graph, _gpu_alerts(late)).causes
    want = analyzer.find_root_causes(graph, _gpu_alerts(now)).causes
    assert got and [c.node for c in got] == [c.node for c in want]


@pytest.mark.parametrize("start", ["9998-12-31T23:59:59Z", "5200-01-01 00:00:00Z"])
def test_the_service_answers_200_for_a_late_start(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, start: str
) -> None:
    from fleetmind.serving.app import create_app
    from fleetmind.serving.settings import get_settings

    monkeypatch.setenv("FLEETMIND_DATABASE_URL", f"sqlite:///{tmp_path / 'late.db'}")
    get_settings.cache_clear()
    try:
        with TestClient(create_app()) as client:
            graph = client.get("/api/v1/graph").json()
            gpus = [n for n in graph["nodes"] if n.get("kind") == "gpu" and n.get("match")][:3]
            alerts = [
                {"status": "firing", "labels": {"alertname": "GpuXidError", **n["match"]},
                 "startsAt": start}
                for n in gpus
            ]  # fmt: skip
            answer = client.post("/api/v1/rca", json={"alerts": alerts})
            assert answer.status_code == 200, answer.text
            assert answer.json()["causes"]
    finally:
        get_settings.cache_clear()
