"""A readiness check or holds count whose database connection never returns is given up after
``READY_STALE_S`` and the database is asked again.

A proxy or load balancer that accepts a connection and never forwards it (docs/serving/operations.md,
"Known limitation") leaves a ``connect`` blocked with no deadline on the client's side. The
connections in flight at the stall stay stuck; new ones work once the proxy forwards again. Here
``engine.connect`` blocks for its first calls and works for later ones (SQLAlchemy's
``Engine.connect``, which ``Database.ping`` and the holds count use). ``READY_STALE_S`` is made short
so that no test sleeps 30 s.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from fleetmind.serving import metrics as metrics_module
from fleetmind.serving.app import create_app
from fleetmind.serving.routers import health as health_router
from fleetmind.serving.settings import Settings

STALE_S = 0.6  # stands for READY_STALE_S (30 s)


def _sample(text: str, name: str) -> float | None:
    m = re.search(rf"^{re.escape(name)} (\S+)$", text, re.MULTILINE)
    return float(m[1]) if m else None


@pytest.fixture
def client(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[TestClient]:
    settings = Settings(
        database_url=f"sqlite:///{tmp_path}/fm.db",
        rca_model="baseline:upstream-coverage",
        placement_model="heuristic:builtin-bestfit",
        incident_worker=False,
    )
    with TestClient(create_app(settings)) as c:
        monkeypatch.setattr(health_router, "READY_CHECK_S", 0.2)
        monkeypatch.setattr(metrics_module, "HOLDS_COUNT_S", 0.2)
        monkeypatch.setattr(metrics_module, "READY_STALE_S", STALE_S)
        yield c


def _stall(services: Any, monkeypatch: pytest.MonkeyPatch, stuck: int) -> threading.Event:
    """Make the first ``stuck`` connects block until the returned event is set; later ones work."""
    gate = threading.Event()
    real_connect = services.db.engine.connect
    calls = [0]
    lock = threading.Lock()

    def connect(*args: Any, **kwargs: Any) -> Any:
        with lock:
            calls[0] += 1
            mine = calls[0]
        if mine <= stuck:
            gate.wait(30)
        return real_connect(*args, **kwargs)

    monkeypatch.setattr(services.db.engine, "connect", connect)
    return gate


def _alive(name: str) -> int:
    return sum(t.name == name and t.is_alive() for t in threading.enumerate())


def test_readiness_comes_back_once_new_connections_work(
    client: TestClient, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    services = client.app.state.services  # type: ignore[attr-defined]
    assert _sample(client.get("/metrics").text, "fleetmind_scheduler_holds") == 0.0
    gate = _stall(services, monkeypatch, stuck=2)  # the check's and the count's connections
    try:
        services.metrics.ready_at = None
        text = client.get("/metrics").text
        assert _sample(text, "fleetmind_ready") == 0.0
        assert "fleetmind_scheduler_holds " not in text
        r = client.get("/readyz")
        assert r.status_code == 503
        assert r.json()["problems"] == ["database: no answer within 0.2 s"]
        time.sleep(STALE_S + 0.1)  # the stuck connections stay stuck; new ones work
        caplog.set_level(logging.WARNING, logger="fleetmind.serving")
        r = client.get("/readyz")
        assert r.status_code == 200, r.text
        services.metrics.ready_at = None
        text = client.get("/metrics").text
        assert _sample(text, "fleetmind_ready") == 1.0
        assert _sample(text, "fleetmind_scheduler_holds") == 0.0
        lines = [rec.getMessage() for rec in caplog.records]
        assert sum("readiness check" in line and "no answer yet" in line for line in lines) == 1
        assert sum("holds count" in line and "no answer yet" in line for line in lines) == 1
    finally:
        gate.set()


def test_stuck_checks_are_capped_and_not_ready_meanwhile(
    client: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    services = client.app.state.services  # type: ignore[attr-defined]
    client.get("/metrics")
    gate = _stall(services, monkeypatch, stuck=1000)  # the database never answers
    checks = health_router.ABANDONED_CHECKS_MAX + 1  # the given-up ones and the current one
    try:
        for _ in range(5):
            r = client.get("/readyz")
            assert r.status_code == 503
            services.metrics.ready_at = None
            text = client.get("/metrics").text
            assert _sample(text, "fleetmind_ready") == 0.0
            assert "fleetmind_scheduler_holds " not in text
            assert _alive("fleetmind-ready-check") <= checks
            assert _alive("fleetmind-holds-count") <= checks
            time.sleep(STALE_S + 0.1)
        assert _alive("fleetmind-ready-check") == checks
        assert _alive("fleetmind-holds-count") == checks
    finally:
        gate.set()
    deadline = time.monotonic() + 5
    while _alive("fleetmind-ready-check") or _alive("fleetmind-holds-count"):
        assert time.monotonic() < deadline
        time.sleep(0.02)
    assert client.get("/readyz").status_code == 200
