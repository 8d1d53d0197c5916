"""The batched RCA path of the service gives exactly what the plain analyzer gives.

* ``GATAnalyzer.find_root_causes_many`` (one batched GAT forward) against ``find_root_causes`` per
  incident, with the released GAT on simulated incidents: same ranking, bit-identical scores, same
  fault types and paths.
* ``serving.rca.batcher.RCABatcher``: concurrent requests are batched, each gets its own result, a bad
  request fails alone.
* ``POST /api/v1/rca`` with the GAT under concurrent requests answers what ``find_root_causes`` says.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from fastapi.testclient import TestClient

from fleetmind.data.errors import DataError
from fleetmind.data.graph import DependencyGraph
from fleetmind.data.rca_gen.alerts import AlertSimConfig, IncidentSimulator
from fleetmind.rca.base import BaseAnalyzer, RankedCause, RCAResult
from fleetmind.rca.gat_analyzer import RELEASED_DIR, GATAnalyzer
from fleetmind.serving.app import create_app
from fleetmind.serving.defaults.example import build_example_graph
from fleetmind.serving.rca.batcher import RCABatcher
from fleetmind.serving.settings import Settings

needs_gat = pytest.mark.skipif(
    not (RELEASED_DIR / "model.pt").is_file(), reason="no released GAT artifact in models/rca"
)


@pytest.fixture(scope="module")
def graph() -> DependencyGraph:
    return build_example_graph(clusters=2, hosts=4, gpus=8, services=4, pods=2, name="batch-test")


@pytest.fixture(scope="module")
def gat() -> GATAnalyzer:
    return GATAnalyzer.load(None)


def incidents(graph: DependencyGraph, n: int, seed: int) -> list[list[dict[str, Any]]]:
    """``n`` simulated incidents with background noise (tens to ~100 alerts each)."""
    sim = IncidentSimulator(graph, AlertSimConfig(noise_per_node=0.2))
    rng = np.random.default_rng(seed)
    return [sim.simulate(rng, f"inc-{i}")["alerts"] for i in range(n)]


@needs_gat
def test_batched_gat_equals_plain_find_root_causes(
    graph: DependencyGraph, gat: GATAnalyzer
) -> None:
    other = build_example_graph(clusters=1, hosts=2, gpus=4, services=3, pods=1, name="other")
    items: list[tuple[DependencyGraph, Sequence[Mapping[str, Any]], int | None]] = [
        (graph, a, k)
        for a, k in zip(incidents(graph, 6, seed=3), (5, 10, 1, None, 3, 20), strict=True)
    ]
    # another graph in the same batch, a storm with alerts that match no node, an empty graph
    items.insert(2, (other, incidents(other, 1, seed=4)[0], 5))
    stray = {"status": "firing", "labels": {"alertname": "X", "cluster": "nowhere"}}
    items.append((graph, [*items[0][1], stray], 5))
    items.append((DependencyGraph("empty", [], []), [stray], 5))
    got = gat.find_root_causes_many(items)
    assert len(got) == len(items)
    for (g, alerts, k), res in zip(items, got, strict=True):
        ref = gat.find_root_causes(g, alerts, k)
        assert res.causes == ref.causes  # nodes, exact float scores, fault types, paths
        assert res.extra == ref.extra
        assert (res.method, res.model_version) == (ref.method, ref.model_version)
    assert got[-2].extra["unmapped_alerts"] == got[0].extra["unmapped_alerts"] + 1
    assert any(len(c.path) > 1 for r in got for c in r.causes)  # paths were really explained


class SlowRecorder(BaseAnalyzer):
    """Ranks alerting nodes by alert count; records batch sizes; fails on an alert named 'bad'."""

    name = "recorder"

    def __init__(self, delay_s: float = 0.02) -> None:
        super().__init__()
        self.delay_s = delay_s
        self.batches: list[int] = []
        self.threads: set[str] = set()
        self.gate: threading.Event | None = None  # when set: the first call waits for it

    def find_root_causes(self, graph, alerts, top_k=None):  # noqa: ANN001, ANN201
        self.threads.add(threading.current_thread().name)
        gate, self.gate = self.gate, None
        if gate is not None:
            gate.wait(10)
        time.sleep(self.delay_s)
        if any(a["labels"].get("alertname") == "bad" for a in alerts):
            raise DataError("alert 0: bad alert")
        node = graph.nodes[len(alerts) % graph.num_nodes]
        cause = RankedCause(node.id, node.kind, node.cluster, float(len(alerts)), None, (node.id,))
        return RCAResult([cause], method="recorder")

    def find_root_causes_many(self, items):  # noqa: ANN001, ANN201
        self.batches.append(len(items))
        return [self.find_root_causes(g, a, k) for g, a, k in items]


def test_batcher_batches_concurrent_requests_and_isolates_errors(graph: DependencyGraph) -> None:
    an = SlowRecorder()
    an.gate = threading.Event()
    batcher = RCABatcher(max_batch=8)

    async def run() -> list[Any]:
        # the first request occupies the thread (held until the others are queued, so the test
        # does not depend on timing); the next ones queue and go as batches
        first = asyncio.ensure_future(batcher.rank(an, graph, [{"labels": {}}], 1))
        while not an.threads:
            await asyncio.sleep(0.001)
        reqs = [[{"labels": {"alertname": "ok"}}] * (i + 1) for i in range(12)]
        reqs[5] = [{"labels": {"alertname": "bad"}}]
        rest = asyncio.gather(
            *[batcher.rank(an, graph, r, 1) for r in reqs], return_exceptions=True
        )
        while batcher._queue.qsize() < len(reqs):
            await asyncio.sleep(0.001)
        gate.set()
        return [await first, *(await rest)]

    gate = an.gate

    try:
        out = asyncio.run(run())
    finally:
        batcher.stop()
    assert isinstance(out[6], DataError)
    for i, res in enumerate(out[1:]):
        if i != 5:
            assert res.causes[0].score == i + 1  # each request got its own result
    assert an.batches == [8, 4]  # 12 queued behind the first: a full batch, then the rest
    assert an.threads == {"fleetmind-rca"}


@needs_gat
def test_rca_endpoint_under_concurrency_answers_like_find_root_causes(
    graph: DependencyGraph, gat: GATAnalyzer, tmp_path: Path
) -> None:
    path = tmp_path / "graph.json"
    graph.save(path)
    settings = Settings(
        database_url=f"sqlite:///{tmp_path}/fm.db",
        graph=str(path),
        placement_model="heuristic:builtin-bestfit",
        incident_worker=False,
    )
    storms = incidents(graph, 8, seed=11)
    with TestClient(create_app(settings)) as client:
        assert client.get("/api/v1/models").json()["rca"]["method"] == "gat"
        served = client.app.state.services.graphs.graph
        answers: dict[int, Any] = {}

        def post(i: int) -> None:
            r = client.post("/api/v1/rca", json={"alerts": storms[i], "top_k": 5})
            answers[i] = (r.status_code, r.json())

        threads = [threading.Thread(target=post, args=(i,)) for i in range(len(storms))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        sizes = client.get("/metrics").text
    assert "fleetmind_rca_batch_size_count" in sizes
    for i, alerts in enumerate(storms):
        status, body = answers[i]
        assert status == 200, body
        # the handler passes the alerts on as the analyzer's dicts (times normalised to UTC,
        # endsAt of resolved alerts included): the same ranking as the simulator's own alerts
        ref = gat.find_root_causes(served, [_as_served(a) for a in alerts], 5)
        raw = gat.find_root_causes(served, alerts, 5)
        assert [(c.node, c.score, c.path) for c in raw.causes] == [
            (c.node, c.score, c.path) for c in ref.causes
        ]
        assert [c["node"] for c in body["causes"]] == [c.node for c in ref.causes]
        assert [c["score"] for c in body["causes"]] == [c.score for c in ref.causes]
        assert [tuple(c["path"]) for c in body["causes"]] == [c.path for c in ref.causes]
        assert [c["fault_type"] for c in body["causes"]] == [c.fault_type for c in ref.causes]
        assert body["mapped_alerts"] == len(alerts) - ref.extra["unmapped_alerts"]


def _as_served(a: Mapping[str, Any]) -> dict[str, Any]:
    from fleetmind.serving.schemas import AlertIn

    m = AlertIn.model_validate(a)
    return {
        "status": m.status,
        "labels": m.labels,
        "annotations": m.annotations,
        "startsAt": m.startsAt.isoformat() if m.startsAt else None,
        "endsAt": m.endsAt.isoformat() if m.endsAt and m.endsAt.year > 1 else None,
        "fingerprint": m.fingerprint,
    }


def test_rca_body_errors_are_422_with_body_locations(tmp_path: Path) -> None:
    settings = Settings(
        database_url=f"sqlite:///{tmp_path}/fm.db",
        rca_model="baseline:upstream-coverage",
        placement_model="heuristic:builtin-bestfit",
        incident_worker=False,
    )
    with TestClient(create_app(settings)) as client:
        spec = client.get("/openapi.json").json()
        body = spec["paths"]["/api/v1/rca"]["post"]["requestBody"]
        ref = body["content"]["application/json"]["schema"]["$ref"].rsplit("/", 1)[1]
        assert set(spec["components"]["schemas"][ref]["properties"]) == {"alerts", "graph", "top_k"}
        cases = {
            b"{not json": ("body",),
            b'{"alerts": []}': ("body", "alerts"),
            b'{"alerts": [{"labels": {"a": "x\\u0000"}}]}': ("body", "alerts", 0, "labels", "a"),
            b'{"alerts": [{"labels": {}}], "top_k": 0}': ("body", "top_k"),
        }
        for raw, loc in cases.items():
            r = client.post(
                "/api/v1/rca", content=raw, headers={"content-type": "application/json"}
            )
            assert r.status_code == 422, (raw, r.text)
            assert tuple(r.json()["detail"][0]["loc"][: len(loc)]) == loc, r.json()
        ok = client.post("/api/v1/rca", json={"alerts": [{"labels": {"cluster": "c0"}}]})
        assert ok.status_code == 200 and ok.json()["mapped_alerts"] == 1


def test_gc_tuned_while_serving_and_restored(tmp_path: Path) -> None:
    import gc

    before = gc.get_threshold()
    settings = Settings(
        database_url=f"sqlite:///{tmp_path}/fm.db",
        rca_model="baseline:upstream-coverage",
        placement_model="heuristic:builtin-bestfit",
        incident_worker=False,
        gc_gen0_threshold=12_345,
    )
    with TestClient(create_app(settings)) as client:
        assert client.get("/healthz").status_code == 200
        assert gc.get_threshold()[0] == 12_345 and gc.get_freeze_count() > 0
    assert gc.get_threshold() == before


def test_incident_alerts_keep_their_end_time() -> None:
    from fleetmind.rca.features.times import parse_time
    from fleetmind.serving.incidents import alert_dict

    row = {
        "status": "resolved",
        "labels": {"alertname": "GpuXidError"},
        "annotations": {},
        "starts_at": "2026-11-29T10:00:00+00:00",
        "ends_ts": 1795950000.5,
        "fingerprint": "f1",
    }
    a = alert_dict(row)
    assert parse_time(a["endsAt"]) == 1795950000.5  # what the GAT's time features read
    assert alert_dict({**row, "status": "firing", "ends_ts": None})["endsAt"] is None
