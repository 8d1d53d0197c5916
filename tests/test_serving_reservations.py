"""Reservations in the database: two service instances on one SQLite file share extender holds,
which end when the pod is seen bound (``/bound`` or telemetry) or their TTL expires."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from serving_helpers import two_a100_hosts
from test_serving_persistence import postgres_url  # noqa: F401 (fixture)

from fleetmind.serving.app import create_app
from fleetmind.serving.scheduler.reservations import DbReservations, reservations_table
from fleetmind.serving.settings import Settings
from fleetmind.serving.telemetry.sim import SimSource

TTL = 120.0
GRACE = 30.0


def _pod(name: str) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": "ml", "uid": f"uid-{name}"},
        "spec": {
            "containers": [
                {
                    "name": "main",
                    "resources": {"limits": {"nvidia.com/gpu": "1", "cpu": "2", "memory": "4Gi"}},
                }
            ]
        },
    }


def _args(name: str) -> dict[str, Any]:
    return {"Pod": _pod(name), "NodeNames": ["gpu-a", "gpu-b"]}


class Clock:
    def __init__(self) -> None:
        self.t = 1_800_000_000.0

    def __call__(self) -> float:
        return self.t


@contextmanager
def _replicas(url: str) -> Iterator[tuple[TestClient, TestClient, Clock]]:
    """Two replicas (separate apps and engines) on one database, with one fake clock."""
    settings = Settings(
        database_url=url,
        rca_model="baseline:upstream-coverage",
        placement_model="heuristic:builtin-bestfit",
        incident_worker=False,
        reservation_ttl_s=TTL,
        reservation_bound_grace_s=GRACE,
    )
    clock = Clock()
    with TestClient(create_app(settings)) as a, TestClient(create_app(settings)) as b:
        for c in (a, b):
            s = c.app.state.services
            s.telemetry = SimSource(two_a100_hosts())
            assert isinstance(s.reservations, DbReservations)
            s.reservations.clock = clock
        assert a.app.state.services.db is not b.app.state.services.db
        with a.app.state.services.db.write() as conn:
            conn.execute(reservations_table.delete())
        yield a, b, clock


@pytest.fixture
def pair(tmp_path: Path) -> Iterator[tuple[TestClient, TestClient, Clock]]:
    with _replicas(f"sqlite:///{tmp_path}/shared.db") as p:
        yield p


def _chosen(c: TestClient, name: str) -> str:
    r = c.post("/api/v1/scheduler/prioritize", json=_args(name))
    assert r.status_code == 200, r.text
    (top,) = [h["Host"] for h in r.json() if h["Score"] == 10]
    return top


def _passed(c: TestClient, name: str) -> dict[str, Any]:
    r = c.post("/api/v1/scheduler/filter", json=_args(name))
    assert r.status_code == 200, r.text
    return r.json()


def test_a_hold_on_one_replica_is_seen_by_the_other(pair: Any) -> None:
    _check_shared_holds(*pair)


def test_replicas_share_holds_on_postgresql(request: pytest.FixtureRequest) -> None:
    with _replicas(request.getfixturevalue("postgres_url")) as p:
        _check_shared_holds(*p)


def _check_shared_holds(a: TestClient, b: TestClient, _clock: Clock) -> None:
    first = _chosen(a, "job-1")
    other = ({"gpu-a", "gpu-b"} - {first}).pop()
    out = _passed(b, "job-2")
    assert out["NodeNames"] == [other]
    assert "held for pods FleetMind placed" in out["FailedNodes"][first]
    # job-2's filter passed one node, so it held it (kube-scheduler skips prioritize then); the
    # held pod itself, retried on the other replica, is not blocked by its own hold
    assert _passed(b, "job-1")["NodeNames"] == [first]
    second = _chosen(b, "job-2")
    assert second == other
    # both GPUs are held now: a third pod fits nowhere, on either replica
    assert _passed(a, "job-3")["NodeNames"] == []
    held = a.app.state.services.reservations.rows()
    assert {(r["pod_key"], r["node"]) for r in held} == {("ml/job-1", first), ("ml/job-2", other)}


def test_holds_expire_after_the_ttl(pair: Any) -> None:
    a, b, clock = pair
    first = _chosen(a, "job-1")
    clock.t += TTL - 1
    assert first not in _passed(b, "job-2")["NodeNames"]
    clock.t += 2
    assert set(_passed(b, "job-2")["NodeNames"]) == {"gpu-a", "gpu-b"}
    # job-1's hold expired; job-2's filter held the only node it passed at TTL - 1
    assert [r["pod_key"] for r in b.app.state.services.reservations.rows()] == ["ml/job-2"]
    _chosen(b, "job-2")  # a write deletes the expired row
    keys = [r["pod_key"] for r in a.app.state.services.reservations.rows()]
    assert keys == ["ml/job-2"]


def test_bound_pods_are_released_when_telemetry_shows_them(pair: Any) -> None:
    a, b, clock = pair
    first = _chosen(a, "job-1")
    r = b.post(
        "/api/v1/scheduler/bound",
        json={"PodName": "job-1", "PodNamespace": "ml", "PodUID": "uid-job-1", "Node": first},
    )
    assert r.status_code == 200 and r.json() == {"Error": "", "Outcome": "held"}
    # bound, but telemetry does not show it yet: still held
    assert first not in _passed(a, "job-2")["NodeNames"]
    # the next scrape shows the pod (and its GPU in use) on that node: the hold ends there
    a.app.state.services.telemetry = SimSource(
        two_a100_hosts({first: frozenset({"ml/job-1"})}, {first})
    )
    out = _passed(a, "job-2")
    assert first in out["FailedNodes"]  # its GPU is in use per telemetry
    res = a.app.state.services.reservations
    assert res.release("ml/job-2")  # its filter held the only node that passed
    assert [r["pod_key"] for r in res.rows()] == ["ml/job-1"]  # the row waits for its grace
    assert res.view(a.app.state.services.telemetry.snapshot()).gpu_items() == []
    assert res.view(None).gpu_items() == [(("k8s", first, 0), 1000)]
    # without telemetry showing it, the hold lasts the grace period only
    _chosen(a, "job-5")
    b.post(
        "/api/v1/scheduler/bound",
        json={
            "PodName": "job-5",
            "PodNamespace": "ml",
            "Node": "gpu-b" if first == "gpu-a" else "gpu-a",
        },
    )
    assert len(b.app.state.services.reservations.rows()) == 2  # job-1 and job-5, in grace
    clock.t += GRACE + 1
    assert b.app.state.services.reservations.rows() == []


def test_binding_elsewhere_drops_the_hold(pair: Any) -> None:
    a, b, _ = pair
    first = _chosen(a, "job-1")
    other = ({"gpu-a", "gpu-b"} - {first}).pop()
    r = b.post(
        "/api/v1/scheduler/bound", json={"PodName": "job-1", "PodNamespace": "ml", "Node": other}
    )
    assert r.json()["Outcome"] == "moved"
    assert a.app.state.services.reservations.rows() == []
    r = b.post("/api/v1/scheduler/bound", json={"PodName": "nobody", "Node": other})
    assert r.json()["Outcome"] == "unknown"


def test_reserved_placements_are_shared_and_expire(pair: Any) -> None:
    a, b, clock = pair
    r = a.post("/api/v1/placements", json={"job_id": "train-7", "num_gpu": 1, "reserve": True})
    assert r.status_code == 200, r.text
    node = r.json()["node"]
    free = {n["name"]: n["gpus"][0]["free_milli"] for n in b.get("/api/v1/fleet").json()["nodes"]}
    assert free[node] == 0 and sum(free.values()) == 1000
    clock.t += TTL + 1
    b.app.state.services.reservations._cached = None  # the fleet view is cached for 0.25 s
    free = {n["name"]: n["gpus"][0]["free_milli"] for n in b.get("/api/v1/fleet").json()["nodes"]}
    assert free == {"gpu-a": 1000, "gpu-b": 1000}


def test_a_retried_reservation_keeps_its_gpus(pair: Any) -> None:
    """A client that retries ``reserve=true`` with the same ``job_id`` (a timeout, a redeploy) gets
    the same GPUs back and still holds one set: its own hold does not count against it."""
    a, b, _ = pair
    job = {"job_id": "train-8", "num_gpu": 1, "reserve": True}
    first = a.post("/api/v1/placements", json=job).json()
    again = b.post("/api/v1/placements", json=job).json()  # the other replica, same database
    assert (again["node"], again["gpus"]) == (first["node"], first["gpus"])
    rows = a.app.state.services.reservations.rows()
    assert [(r["pod_key"], r["node"]) for r in rows] == [("placement:train-8", first["node"])]
    other = a.post("/api/v1/placements", json={**job, "job_id": "train-9"}).json()
    assert other["node"] != first["node"]  # the one GPU left
    assert a.post("/api/v1/placements", json={**job, "job_id": "train-10"}).status_code == 409


@pytest.mark.parametrize(
    "body",
    [
        {},
        {"PodName": "x"},
        {"PodName": 3, "Node": "gpu-a"},
        {"PodName": "x", "Node": "gpu-a", "PodNamespace": []},
    ],
)
def test_bad_binding_args_get_422(pair: Any, body: dict[str, Any]) -> None:
    a, _, _ = pair
    r = a.post("/api/v1/scheduler/bound", json=copy.deepcopy(body))
    assert r.status_code == 422 and r.json()["detail"]
