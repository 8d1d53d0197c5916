"""Bound holds and stale-while-refresh snapshots: a bound pod's GPU must not be handed out again.

``POST /api/v1/scheduler/bound`` used to set the hold's row to end ``bound_grace_s`` (30 s) after
the binding, a clock deadline, while stale-while-refresh lets a decision read a snapshot up to
``FLEETMIND_TELEMETRY_TTL_S + FLEETMIND_TELEMETRY_MAX_STALE_S`` (5 + 30 = 35 s) old. A pod placed
at t, bound at t+2, and the next pod decided at t+33 on the snapshot collected at t (33 s old,
served at once while a background refresh runs): the row was gone, the snapshot did not show the
first pod yet, and its GPU went to the second pod. The row now lives ``snapshot_lag_s`` longer,
and the snapshot rule (a snapshot collected ``bound_grace_s`` after the binding) still ends the
hold on time.

Deterministic: a fake clock for the reservations and the telemetry cache; no timing asserts.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")

from fleetmind.serving.app import create_app  # noqa: E402
from fleetmind.serving.db import Database  # noqa: E402
from fleetmind.serving.scheduler import extender as ext  # noqa: E402
from fleetmind.serving.scheduler.placement import BestFitPlacer, Option  # noqa: E402
from fleetmind.serving.scheduler.reservations import (  # noqa: E402
    DbReservations,
    snapshot_lag_s,
)
from fleetmind.serving.schemas import JobSpec  # noqa: E402
from fleetmind.serving.settings import Settings  # noqa: E402
from fleetmind.serving.telemetry import base  # noqa: E402
from fleetmind.serving.telemetry.base import (  # noqa: E402
    FleetSnapshot,
    GpuState,
    NodeState,
    TelemetrySource,
)

TTL_S, MAX_STALE_S, GRACE_S = 5.0, 30.0, 30.0
LAG_S = TTL_S + MAX_STALE_S
SCRAPE_S = 15.0  # Prometheus shows a bound pod's usage this long after its binding


class Clock:
    """Unix seconds, moved by hand (the reservations' and the telemetry cache's clock)."""

    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


class Cluster(TelemetrySource):
    """One node, one GPU; a pod bound ``SCRAPE_S`` ago or more shows (usage and ``pods``)."""

    name = "fake-prom"

    def __init__(self, clock: Clock) -> None:
        super().__init__(ttl_s=TTL_S, max_stale_s=MAX_STALE_S)
        self.clock = clock
        self.bound_at: dict[str, float] = {}

    def collect(self) -> FleetSnapshot:
        now = self.clock()
        pods = frozenset(p for p, t in self.bound_at.items() if now - t >= SCRAPE_S)
        gpu = GpuState(
            0,
            "A100",
            mem_total_mib=80000,
            mem_used_mib=60000 if pods else 0,
            util_pct=90 if pods else 0,
            free_milli=0 if pods else 1000,
        )
        node = NodeState("n1", "local", [gpu], 64000, 64000, 10**6, 10**6, pods=pods)
        return FleetSnapshot("prometheus", [node], now)


def _pod(name: str) -> dict:
    gpu = {"nvidia.com/gpu": "1"}
    return {
        "Pod": {
            "metadata": {"name": name, "namespace": "ml", "uid": "u-" + name},
            "spec": {"containers": [{"name": "c", "resources": {"requests": gpu, "limits": gpu}}]},
        },
        "NodeNames": ["n1"],
    }


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    c = Clock()
    monkeypatch.setattr(base.time, "time", c)  # the telemetry cache's clock
    return c


def _reservations(tmp_path: Path, clock: Clock, lag_s: float) -> DbReservations:
    db = Database(f"sqlite:///{tmp_path}/holds.db")
    db.migrate()
    return DbReservations(db, 120.0, GRACE_S, cache_s=0, clock=clock, snapshot_lag_s=lag_s)


def _extender_call(
    src: Cluster, res: DbReservations, name: str
) -> tuple[FleetSnapshot, ext.Decision]:
    """What the extender's prioritize does: decide on the (maybe stale) snapshot, then hold."""
    snap = src.snapshot()
    index = ext.NodeIndex("local")
    req, dec = ext.decide(
        _pod(name), snap, lambda r: res.view(snap, exclude=r.key), BestFitPlacer(), index
    )
    if dec.options:
        seen = res.view(snap, exclude=req.key)
        res.hold(req.key, dec.options[0], req.job(), uid=req.uid, snapshot=snap, seen=seen)
    return snap, dec


def _wait_background(src: TelemetrySource) -> None:
    assert src._background.acquire(timeout=5)
    src._background.release()


def test_a_bound_pods_gpu_is_not_given_again_on_a_stale_snapshot(
    tmp_path: Path, clock: Clock
) -> None:
    src = Cluster(clock)
    res = _reservations(tmp_path, clock, LAG_S)
    t0 = clock.now
    _, dec = _extender_call(src, res, "a")
    assert [(o.node, o.gpus) for o in dec.options] == [("n1", (0,))]
    clock.now = t0 + 2
    assert res.bound("ml/a", "n1", uid="u-a") == "held"
    src.bound_at["ml/a"] = clock.now
    clock.now = t0 + 33  # a quiet half minute: the next pod comes 31 s after the binding
    snap, dec = _extender_call(src, res, "b")
    _wait_background(src)
    assert snap.collected_ts == t0  # the stale snapshot, served at once: it does not show pod a
    assert dec.options == []  # the old code placed pod b on GPU 0: double-booked
    assert "not enough free GPUs (held for pods FleetMind placed" in dec.failed["n1"]


def test_the_snapshot_rule_still_ends_a_bound_hold_on_time(tmp_path: Path, clock: Clock) -> None:
    src = Cluster(clock)
    res = _reservations(tmp_path, clock, LAG_S)
    t0 = clock.now
    _extender_call(src, res, "a")
    clock.now = t0 + 2
    res.bound("ml/a", "n1", uid="u-a")
    src.bound_at["ml/a"] = clock.now
    clock.now = t0 + 2 + GRACE_S  # a snapshot collected bound_grace_s after the binding
    fresh = src.collect()
    stale = FleetSnapshot("prometheus", [NodeState("n1", "local")], t0)
    assert res.view(fresh).gpu_used("local", "n1", 0) == 0  # ended by the snapshot, on time
    assert res.view(stale).gpu_used("local", "n1", 0) == 1000  # the stale one still counts it
    (row,) = res.rows()
    assert row["expires_ts"] == pytest.approx(t0 + 2 + GRACE_S + LAG_S, abs=0.01)
    clock.now = t0 + 2 + GRACE_S + LAG_S + 0.01  # no snapshot that old can be in use any more
    assert res.rows() == [] and res.view(stale).gpu_used("local", "n1", 0) == 0


def test_without_a_lag_the_row_ends_with_the_grace_as_before(tmp_path: Path, clock: Clock) -> None:
    """``snapshot_lag_s`` 0 (``sim``): the bound row's deadline is unchanged."""
    res = _reservations(tmp_path, clock, 0.0)
    src = Cluster(clock)
    _extender_call(src, res, "a")
    res.bound("ml/a", "n1", uid="u-a")
    (row,) = res.rows()
    assert row["expires_ts"] == pytest.approx(clock.now + GRACE_S, abs=0.01)


def test_snapshot_lag_follows_the_telemetry_settings(tmp_path: Path) -> None:
    prom = {"database_url": "sqlite://", "telemetry": "prometheus"}
    assert snapshot_lag_s(Settings(**prom)) == LAG_S
    assert snapshot_lag_s(Settings(**prom, telemetry_max_stale_s=0)) == TTL_S
    assert snapshot_lag_s(Settings(**prom, telemetry_ttl_s=0)) == 0.0  # no cache, no stale
    assert snapshot_lag_s(Settings(database_url="sqlite://")) == 0.0  # sim
    # nvml reuses a snapshot for its TTL, so a decision may read one that old
    assert snapshot_lag_s(Settings(database_url="sqlite://", telemetry="nvml")) == TTL_S


def test_the_service_builds_its_reservations_with_the_lag(tmp_path: Path) -> None:
    from fleetmind.serving.app import build_services, close_services

    settings = Settings(
        database_url=f"sqlite:///{tmp_path}/svc.db",
        rca_model="baseline:upstream-coverage",
        placement_model="heuristic:builtin-bestfit",
        incident_worker=False,
        telemetry="prometheus",
        prometheus_url="http://127.0.0.1:18981",  # never queried here
    )
    services = build_services(settings)
    try:
        assert isinstance(services.reservations, DbReservations)
        assert services.reservations.snapshot_lag_s == LAG_S
    finally:
        close_services(services)


class _Showing(TelemetrySource):
    """A fresh snapshot in which pod ``ml/a`` runs on GPU 0 of n1 with 500 milli: 500 left."""

    name = "prometheus"

    def __init__(self, ts: float) -> None:
        super().__init__(ttl_s=10**9)
        self.ts = ts

    def collect(self) -> FleetSnapshot:
        gpu = GpuState(0, "A100", mem_total_mib=80000, mem_used_mib=40000, free_milli=500)
        node = NodeState("n1", "local", [gpu], 64000, 64000, 10**6, 10**6, pods=frozenset({"ml/a"}))
        return FleetSnapshot("prometheus", [node], self.ts)


def test_the_api_reads_holds_against_the_snapshot_as_the_extender_does(tmp_path: Path) -> None:
    """``GET /api/v1/fleet`` and ``POST /api/v1/placements`` without a ``job_id`` read the raw
    holds: a bound pod that the snapshot already shows counted twice (its usage and its hold)
    until the row's deadline, which the lag lengthens (a 409 "0 milli free" in a nearly full
    fleet, where the same request with a ``job_id`` placed)."""
    token = "stale-snapshot-token"
    settings = Settings(
        database_url=f"sqlite:///{tmp_path}/api.db",
        rca_model="baseline:upstream-coverage",
        placement_model="heuristic:builtin-bestfit",
        incident_worker=False,
        api_token=token,
    )
    h = {"Authorization": f"Bearer {token}"}
    with TestClient(create_app(settings)) as c:
        services = c.app.state.services
        res = services.reservations
        res.snapshot_lag_s, res.cache_s = LAG_S, 0
        now = [2_000_000.0]
        res.clock = lambda: now[0]
        res.hold("ml/a", Option("local", "n1", (0,), 0.0), JobSpec(num_gpu=1, gpu_milli=500))
        assert res.bound("ml/a", "n1") == "held"
        now[0] += GRACE_S + 1  # the grace is over and a fresh snapshot lists ml/a
        services.telemetry = _Showing(now[0])
        fleet = c.get("/api/v1/fleet", headers=h).json()
        assert fleet["nodes"][0]["gpus"][0]["free_milli"] == 500
        r = c.post("/api/v1/placements", json={"num_gpu": 1, "gpu_milli": 500}, headers=h)
        assert r.status_code == 200, r.text
