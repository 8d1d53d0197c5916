"""``POST /api/v1/models/reload`` reaches every worker process and replica of one database.

With ``fleetmind serve --workers 2`` a reload reached only the worker that got the request: about
half the requests kept the old models. A reload now counts one more generation in the database
(``model_reloads``), which every registry following it reads (at most every ``FOLLOW_S`` s, off the
request path) and takes up by reloading from its own references, with the same rule as a local
reload: a model that would become a fallback keeps the served set.

Upstream reference: uvicorn's ``--workers`` starts separate processes (uvicorn docs, "Deployment":
"Use multiple worker processes"), which share nothing but what they share outside Python, here the
database.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from serving_helpers import wait_for

from fleetmind.serving.app import create_app
from fleetmind.serving.registry import ModelRegistry
from fleetmind.serving.settings import Settings

RELOAD = "/api/v1/models/reload"


def _settings(url: str) -> Settings:
    return Settings(
        database_url=url,
        rca_model="baseline:upstream-coverage",
        placement_model="heuristic:builtin-bestfit",
        incident_worker=False,
    )


def _follow(c: TestClient, interval_s: float = 3600.0) -> ModelRegistry:
    """The registry of ``c``, following its database (``build_services`` does it too)."""
    s = c.app.state.services
    s.registry.follow(s.db, on_reload=s.metrics.set_models, interval_s=interval_s)
    return s.registry


@pytest.fixture
def workers(tmp_path: Path) -> Iterator[tuple[TestClient, TestClient]]:
    """Two workers (own apps, engines and registries) on one SQLite file."""
    url = f"sqlite:///{tmp_path}/w.db"
    with ExitStack() as stack:
        a, b = (stack.enter_context(TestClient(create_app(_settings(url)))) for _ in range(2))
        yield a, b


def _failing(registry: ModelRegistry, monkeypatch: pytest.MonkeyPatch) -> None:
    """The next loads of ``registry``'s placement model fall back (a champion that cannot load)."""
    served = registry.current.placement
    broken = replace(served, fallback_reason="PPO model not loaded: test")
    monkeypatch.setattr(registry, "_load_placement", lambda *_pinned: broken)


def test_a_reload_on_one_worker_reaches_the_other(workers: Any) -> None:
    a, b = workers
    ra, rb = _follow(a), _follow(b)
    assert rb.sync() is None  # nothing requested yet
    r = a.post(RELOAD)
    assert r.status_code == 200, r.text
    out = r.json()
    assert out["generation"] == 2 and out["reload_generation"] == 1
    assert out["pid"] == os.getpid() and "every worker and replica" in out["detail"]
    assert rb.current.generation == 1  # B has not looked yet
    assert rb.sync() is not None and rb.current.generation == 2
    assert rb.sync() is None  # taken up once
    got = b.get("/api/v1/models").json()
    assert (got["generation"], got["reload_generation"], got["reload_error"]) == (2, 1, None)
    assert ra.current.generation == 2  # A reloaded once, not again from its own request


def test_a_worker_looks_in_the_background_when_a_request_reads_its_models(workers: Any) -> None:
    a, b = workers
    _follow(a)
    rb = _follow(b, interval_s=0.0)
    assert a.post(RELOAD).status_code == 200
    assert wait_for(lambda: b.get("/api/v1/models").json()["generation"] == 2, timeout=5)
    assert rb.reload_generation == 1


def test_each_worker_keeps_its_models_when_they_would_fall_back(
    workers: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The 409 rule, per worker: A's champion cannot load (409, A keeps its set, B is still
    asked); then B's cannot (B keeps its set and says why, A's reload answers 200)."""
    a, b = workers
    ra, rb = _follow(a), _follow(b)
    with monkeypatch.context() as m:
        _failing(ra, m)
        r = a.post(RELOAD)
        assert r.status_code == 409, r.text
        detail = r.json()["detail"]
        assert "reload kept the served models" in detail and "every worker and replica" in detail
        assert ra.current.generation == 1 and ra.reload_error is not None
    assert rb.sync() is not None and rb.current.generation == 2
    _failing(rb, monkeypatch)
    assert a.post(RELOAD).status_code == 200
    assert rb.sync() is None and rb.current.generation == 2
    got = b.get("/api/v1/models").json()
    assert got["reload_generation"] == 2 and "PPO model not loaded" in got["reload_error"]
    assert got["placement"]["fallback_reason"] is None  # still the served model


def test_a_worker_started_after_a_request_does_not_reload_again(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/w.db"
    with TestClient(create_app(_settings(url))) as a:
        _follow(a)
        assert a.post(RELOAD).status_code == 200
        with TestClient(create_app(_settings(url))) as late:
            rl = _follow(late)
            assert rl.sync() is None and rl.current.generation == 1
            assert rl.reload_generation == 1


def test_the_service_follows_its_database(workers: Any) -> None:
    a, _ = workers
    s = a.app.state.services
    assert s.registry.db is s.db


def test_a_reload_while_the_database_is_down_still_reloads_this_worker(
    workers: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Reloading needed no database before reloads were shared through it: an outage must leave
    this worker's reload working and say the others were not asked."""
    a, _ = workers
    ra = _follow(a)
    before = ra.current.generation

    def down(_now: float, _pins: object = None) -> int:
        raise OSError("connection refused")

    monkeypatch.setattr(ra.db, "request_model_reload", down)
    r = a.post(RELOAD)
    assert r.status_code == 200, r.text
    assert ra.current.generation == before + 1
    assert "could not be written" in r.json()["detail"]
