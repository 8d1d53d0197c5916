"""``FLEETMIND_RCA_PROCESSES``: RCA requests ranked in separate processes, request by request.

One app with two ranking processes (started once for the module; each process imports torch, a few
seconds) answers:

* exactly the bytes the server process itself would answer (same model object, pickled over),
  from processes with the configured niceness;
* requests spread over both processes, also from one client at a time;
* a model swap (reload, or a different model installed) and a graph ``PUT`` reach the processes:
  concurrent requests during reloads all succeed, later answers come from the new objects, and
  objects the server dropped are forgotten;
* bad bodies: the same 422 as in-process; a graph in the body: ranked on it;
* a killed ranking process: its requests are answered anyway and another process is started;
* each result a process sends becomes a typed answer (:class:`Ranked`, :class:`Invalid`,
  :class:`Failed` with the error as the server raises it, also for an error that does not pickle).
"""

from __future__ import annotations

import gc
import json
import os
import signal
import threading
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from fastapi.testclient import TestClient
from serving_helpers import app_on_graph

from fleetmind.data.graph import DependencyGraph
from fleetmind.data.rca_gen.alerts import AlertSimConfig, IncidentSimulator
from fleetmind.rca.gat_analyzer import RELEASED_DIR
from fleetmind.serving.app import create_app
from fleetmind.serving.defaults.example import build_example_graph
from fleetmind.serving.rca.pool import Failed, Invalid, Ranked, _answer, _dump_error
from fleetmind.serving.rca.request import parse_alerts, response_json
from fleetmind.serving.registry import ModelSet, make_rca_baseline
from fleetmind.serving.settings import Settings
from tests.serving_helpers import serve_logging, wait_for

pytestmark = pytest.mark.skipif(
    not (RELEASED_DIR / "model.pt").is_file(), reason="no released GAT artifact in models/rca"
)


@pytest.fixture(scope="module")
def graph() -> DependencyGraph:
    return build_example_graph(clusters=2, hosts=4, gpus=8, services=4, pods=2, name="pool-test")


@pytest.fixture(scope="module")
def client(graph: DependencyGraph, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    tmp = tmp_path_factory.mktemp("pool")
    with app_on_graph(tmp, graph, rca_processes=2, rca_process_nice=3) as c:
        yield c


def storms(graph: DependencyGraph, n: int, seed: int) -> list[bytes]:
    sim = IncidentSimulator(graph, AlertSimConfig(noise_per_node=0.2))
    rng = np.random.default_rng(seed)
    return [
        json.dumps({"alerts": sim.simulate(rng, f"p{i}")["alerts"], "top_k": 5}).encode()
        for i in range(n)
    ]


def in_process(client: Any, body: bytes, graph: DependencyGraph | None = None) -> bytes:
    """What the server process answers for ``body`` when it ranks itself."""
    services = client.app.state.services
    model = services.registry.current.rca
    graph = graph or services.graphs.graph
    req, alerts = parse_alerts(body, bool(getattr(model.impl, "accepts_epoch_seconds", False)))
    result = model.impl.find_root_causes(graph, alerts, req.top_k)
    return response_json(model, graph, alerts, req.top_k, result)


def post(client: Any, body: bytes) -> Any:
    return client.post("/api/v1/rca", content=body, headers={"content-type": "application/json"})


def concurrently(client: Any, bodies: list[bytes]) -> list[Any]:
    out: list[Any] = [None] * len(bodies)

    def run(i: int) -> None:
        out[i] = post(client, bodies[i])

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(bodies))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return out


def test_processes_answer_what_the_server_would_and_share_the_work(
    client: Any, graph: DependencyGraph
) -> None:
    pool = client.app.state.services.rca_pool
    assert pool is not None and len(pool.pids) == 2
    assert all(pid != os.getpid() for pid in pool.pids)
    base = os.getpriority(os.PRIO_PROCESS, 0)
    assert wait_for(lambda: all(os.getpriority(os.PRIO_PROCESS, p) == base + 3 for p in pool.pids))
    bodies = storms(graph, 10, seed=5)
    before = pool.served()
    one_by_one = [post(client, b) for b in bodies[:4]]  # a lone client
    after_lone = pool.served()
    assert all(a - b == 2 for a, b in zip(after_lone, before, strict=True))
    answers = [*one_by_one, *concurrently(client, bodies[4:])]
    for body, r in zip(bodies, answers, strict=True):
        assert r.status_code == 200, r.text
        assert r.content == in_process(client, body)  # the same bytes: ranking and scores
    assert any(len(c["path"]) > 1 for r in answers for c in r.json()["causes"])
    assert all(n > 2 for n in pool.served())
    metrics = client.get("/metrics").text
    count = _sample(metrics, "fleetmind_rca_batch_size_count")
    assert count > 0  # batches ranked in the processes, none above the process batch limit
    limit = Settings.model_fields["rca_process_max_batch"].default  # the fixture's (4)
    assert _sample(metrics, f'fleetmind_rca_batch_size_bucket{{le="{float(limit)}"}}') == count


def _sample(metrics: str, name: str) -> float:
    return next(float(line.split()[-1]) for line in metrics.splitlines() if line.startswith(name))


def test_reload_and_swaps_reach_the_processes(client: Any, graph: DependencyGraph) -> None:
    services = client.app.state.services
    pool = services.rca_pool
    bodies = storms(graph, 6, seed=6)
    failures: list[Any] = []
    done: list[int] = []
    stop = threading.Event()

    def load() -> None:
        i = 0
        while not stop.is_set():
            r = post(client, bodies[i % len(bodies)])
            if r.status_code != 200:
                failures.append(r.text)
            done.append(1)
            i += 1

    workers = [threading.Thread(target=load) for _ in range(3)]
    for t in workers:
        t.start()
    generations = []
    for _ in range(3):
        n = len(done)
        assert wait_for(lambda n=n: len(done) >= n + 2)  # requests around every reload
        r = client.post("/api/v1/models/reload")
        assert r.status_code == 200, r.text
        generations.append(r.json()["generation"])
    stop.set()
    for t in workers:
        t.join()
    assert failures == []
    assert generations == sorted(generations) and len(set(generations)) == 3
    # the reloaded model answers, and the replaced ones are forgotten once dropped
    assert post(client, bodies[0]).content == in_process(client, bodies[0])
    gc.collect()
    assert wait_for(lambda: pool.objects == 2)  # the served model and graph only

    # a different model object installed: the processes rank with it
    registry = services.registry
    old = registry.current
    try:
        cov = make_rca_baseline("upstream-coverage")
        rca = replace(old.rca, impl=cov, method=cov.name, version=None)
        registry.set_current(ModelSet(rca, old.placement, old.generation + 1))
        r = post(client, bodies[1])
        assert r.status_code == 200 and r.json()["method"] == "upstream-coverage"
        assert r.content == in_process(client, bodies[1])
    finally:
        registry.set_current(old)

    # a new served graph (PUT): answers on it
    other = build_example_graph(clusters=1, hosts=3, gpus=4, services=3, pods=2, name="put-graph")
    served = services.graphs.graph
    assert client.put("/api/v1/graph", json=other.to_json()).status_code == 200
    try:
        body = storms(other, 1, seed=7)[0]
        r = post(client, body)
        assert r.status_code == 200 and r.json()["graph"] == "put-graph"
        assert r.content == in_process(client, body)
    finally:
        assert client.put("/api/v1/graph", json=served.to_json()).status_code == 200


def test_bad_bodies_and_inline_graphs_through_the_processes(
    client: Any, graph: DependencyGraph
) -> None:
    bad = [b"{not json", b'{"alerts": []}', b'{"alerts": [{"labels": {}}], "top_k": 0}']
    for raw in bad:
        r = post(client, raw)
        assert r.status_code == 422, r.text
        assert r.json()["detail"][0]["loc"][0] == "body"
    small = build_example_graph(clusters=1, hosts=2, gpus=2, services=2, pods=1, name="inline")
    alerts = json.loads(storms(small, 1, seed=8)[0])["alerts"]
    body = json.dumps({"alerts": alerts, "graph": small.to_json(), "top_k": 3}).encode()
    r = post(client, body)
    assert r.status_code == 200 and r.json()["graph"] == "inline"
    assert r.content == in_process(client, body, DependencyGraph.from_json(small.to_json()))
    broken = small.to_json()
    broken["edges"].append({"src": "nope", "dst": broken["nodes"][0]["id"], "kind": "runs_on"})
    r = post(client, json.dumps({"alerts": alerts, "graph": broken}).encode())
    assert r.status_code == 422 and "nope" in r.text


def test_a_killed_process_is_replaced_and_its_requests_answered(
    client: Any, graph: DependencyGraph
) -> None:
    pool = client.app.state.services.rca_pool
    victim = pool.pids[0]
    os.kill(victim, signal.SIGKILL)
    bodies = storms(graph, 4, seed=9)
    for r in concurrently(client, bodies):
        assert r.status_code == 200, r.text
    assert wait_for(lambda: len(pool.pids) == 2 and victim not in pool.pids, timeout=60)
    assert pool.restarts >= 1
    for body, r in zip(bodies, concurrently(client, bodies), strict=True):
        assert r.status_code == 200 and r.content == in_process(client, body)


def test_fast_lane_answers_ok_requests_and_leaves_the_rest_to_the_route(
    client: Any, graph: DependencyGraph, monkeypatch: pytest.MonkeyPatch
) -> None:
    import fastapi.routing

    calls: list[int] = []
    solve = fastapi.routing.solve_dependencies

    async def counting(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        return await solve(*args, **kwargs)

    monkeypatch.setattr(fastapi.routing, "solve_dependencies", counting)
    body = storms(graph, 1, seed=10)[0]
    r = post(client, body)
    assert r.status_code == 200 and calls == []  # answered by the lane, not by the route
    assert r.headers["content-type"] == "application/json"
    assert int(r.headers["content-length"]) == len(r.content)
    assert 'route="/api/v1/rca"' in client.get("/metrics").text
    post(client, b'{"alerts": []}')
    assert calls  # the 422 comes from the route
    services = client.app.state.services
    settings = services.settings
    services.settings = settings.model_copy(update={"api_token": "s3cret"})
    try:
        assert post(client, body).status_code == 401
        wrong = {"content-type": "application/json", "authorization": "Bearer nope"}
        assert client.post("/api/v1/rca", content=body, headers=wrong).status_code == 401
        calls.clear()
        right = {**wrong, "authorization": "Bearer s3cret"}
        r = client.post("/api/v1/rca", content=body, headers=right)
        assert r.status_code == 200 and calls == [] and r.content == in_process(client, body)
    finally:
        services.settings = settings


def test_processes_that_cannot_start_leave_ranking_in_the_server(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import asyncio

    from fleetmind.serving.rca.pool import RankingPool

    pool = RankingPool(1, {"nice": "not a number"}, start_timeout_s=60)
    with pytest.raises(RuntimeError, match="did not start"):
        asyncio.run(pool.start())  # the process dies before it is ready

    async def fail(self: Any) -> None:
        raise RuntimeError("RCA ranking processes did not start: test")

    monkeypatch.setattr(RankingPool, "start", fail)
    settings = Settings(
        database_url=f"sqlite:///{tmp_path}/fm.db",
        rca_model="baseline:upstream-coverage",
        placement_model="heuristic:builtin-bestfit",
        incident_worker=False,
        rca_processes=2,
    )
    capsys.readouterr()
    with serve_logging(), TestClient(create_app(settings)) as c:
        assert c.app.state.services.rca_pool is None
        err = capsys.readouterr().err  # as `fleetmind serve` logs it: once, on stderr
        assert err.count("ranking RCA requests in the server process") == 1
        assert "ERROR:    fleetmind: RCA ranking processes did not start: test;" in err
        r = c.post("/api/v1/rca", json={"alerts": [{"labels": {"cluster": "c0"}}]})
        assert r.status_code == 200 and r.json()["method"] == "upstream-coverage"


def test_a_batch_waits_for_every_request_the_server_has_rung_for() -> None:
    import socket
    import time

    from fleetmind.serving.rca.pool import _frame, _Inbox

    data, data_peer = socket.socketpair()
    bell, bell_peer = socket.socketpair()
    bell_peer.setblocking(False)
    body = b"x" * 150_000  # more than one body per default socket buffer
    frames = [_frame(("rca", j, 0, 1, body)) for j in range(5)]

    def server() -> None:  # rings for all five, then sends the bodies slowly
        bell.sendall(b"\x01" * 5)
        for f in frames:
            data.sendall(f)
            time.sleep(0.02)

    t = threading.Thread(target=server)
    t.start()
    time.sleep(0.05)  # the bells are in before the first body is complete
    got = _Inbox(data_peer, bell_peer).take()
    t.join()
    assert [m[1] for m in got] == [0, 1, 2, 3, 4]
    # without bells a take returns what has arrived
    data.sendall(frames[0])
    assert len(_Inbox(data_peer).take()) == 1
    for s in (data, data_peer, bell, bell_peer):
        s.close()


def test_result_entries_become_typed_answers() -> None:
    assert _answer("ok", b'{"ranked": []}') == Ranked(b'{"ranked": []}')
    assert _answer("invalid", None) == Invalid()
    failed = _answer("error", _dump_error(ValueError("top_k out of range")))
    assert isinstance(failed, Failed) and type(failed.error) is ValueError
    assert str(failed.error) == "top_k out of range"

    class Local(Exception):  # a local class does not pickle: sent as a RuntimeError naming it
        pass

    failed = _answer("error", _dump_error(Local("no pickle")))
    assert isinstance(failed, Failed) and type(failed.error) is RuntimeError
    assert str(failed.error) == "Local: no pickle"
    failed = _answer("error", b"not a pickle")  # an answer that does not unpickle: still an error
    assert isinstance(failed, Failed) and "could not be read" in str(failed.error)
