"""The fleet page says when its telemetry snapshot was collected, and counts holds as decisions on
that snapshot do.

With stale-while-refresh (``FLEETMIND_TELEMETRY_MAX_STALE_S``) the page may show a snapshot up to
``FLEETMIND_TELEMETRY_TTL_S + FLEETMIND_TELEMETRY_MAX_STALE_S`` (35 s) old while a newer one is
read; it showed it as current. A bound pod's hold row is now kept that much past its grace (so a
decision on an older snapshot still counts it); the page ends it by the snapshot rule, so a pod the
snapshot already shows is not counted twice (telemetry plus hold).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")

from fleetmind.serving.app import create_app  # noqa: E402
from fleetmind.serving.scheduler.placement import Option  # noqa: E402
from fleetmind.serving.schemas import JobSpec  # noqa: E402
from fleetmind.serving.settings import Settings  # noqa: E402
from fleetmind.serving.telemetry.base import (  # noqa: E402
    FleetSnapshot,
    GpuState,
    NodeState,
    TelemetrySource,
)
from fleetmind.serving.ui import auth  # noqa: E402
from fleetmind.serving.ui import router as ui_router  # noqa: E402

TOKEN = "fleet-as-of-token"
COLLECTED_TS = 1_700_000_000.0  # 2023-11-14 22:13:20 UTC


class Fixed(TelemetrySource):
    """One node ``n1`` whose GPU 0 runs pod ``ml/a`` (fully used), collected at ``collected_ts``;
    cached for an hour (the page reads this snapshot)."""

    name = "prometheus"

    def __init__(self, collected_ts: float) -> None:
        super().__init__(ttl_s=10**9)
        self.collected_ts = collected_ts

    def collect(self) -> FleetSnapshot:
        gpu = GpuState(0, "A100", mem_total_mib=80000, mem_used_mib=60000, free_milli=0)
        node = NodeState("n1", "local", [gpu, GpuState(1, "A100")], pods=frozenset({"ml/a"}))
        return FleetSnapshot("prometheus", [node], self.collected_ts)


@pytest.fixture
def client(tmp_path: Path) -> Iterator[TestClient]:
    settings = Settings(
        database_url=f"sqlite:///{tmp_path}/fleet.db",
        rca_model="baseline:upstream-coverage",
        placement_model="heuristic:builtin-bestfit",
        incident_worker=False,
        api_token=TOKEN,
    )
    with TestClient(create_app(settings)) as c:
        c.get("/ui/login")
        c.post(
            "/ui/login",
            data={"token": TOKEN, "csrf": c.cookies.get(auth.CSRF_COOKIE), "next": "/ui/fleet"},
            follow_redirects=False,
        )
        yield c


def test_as_of_names_the_collection_time_and_its_age() -> None:
    assert ui_router._as_of(COLLECTED_TS, now=COLLECTED_TS + 33.9) == (
        "as of 22:13:20 UTC (33 s ago)"
    )
    assert ui_router._as_of(COLLECTED_TS, now=COLLECTED_TS - 2) == "as of 22:13:20 UTC (0 s ago)"


def test_the_fleet_page_shows_when_its_snapshot_was_collected(client: TestClient) -> None:
    services = client.app.state.services
    services.telemetry = Fixed(COLLECTED_TS)
    html = client.get("/ui/fleet").text
    assert re.search(r"as of 22:13:20 UTC \(\d+ s ago\)", html)


def test_a_pod_the_snapshot_shows_is_not_counted_twice(client: TestClient) -> None:
    services = client.app.state.services
    res = services.reservations
    job = JobSpec(num_gpu=1, gpu_milli=500)
    res.hold("ml/a", Option("local", "n1", (0,), 0.0), job, uid="u-a")
    res.hold("ml/b", Option("local", "n1", (1,), 0.0), job, uid="u-b")
    assert res.bound("ml/a", "n1", uid="u-a") == "held"
    services.telemetry = Fixed(res.clock())  # lists ml/a on n1: its usage is in the snapshot
    html = client.get("/ui/fleet").text
    # the old page read the holds without the snapshot and added ml/a's hold to its usage
    titles = re.findall(r'title="(GPU [^"]*)"', html)
    assert titles == [
        "GPU 0 A100: 100% allocated, 60000/80000 MiB",  # no "(50% reserved by FleetMind)"
        "GPU 1 A100: 50% allocated (50% reserved by FleetMind)",  # ml/b: still held
    ]
