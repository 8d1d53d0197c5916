"""``fleetmind_ready`` and ``fleetmind_tls_handshake_failures_total``: the failures that leave no
request behind.

- A pod whose ``/readyz`` answers 503 leaves its Service's endpoints (readiness probe, period 5 s,
  failureThreshold 3: deploy/kubernetes/base/deployment.yaml), so Alertmanager's webhooks and
  kube-scheduler's extender calls never reach it and no request metric moves, while the Prometheus
  Operator still scrapes it (``up`` stays 1). ``/readyz`` therefore exports its verdict, and a
  scrape checks readiness itself where nothing calls ``/readyz`` (Docker's ``HEALTHCHECK`` calls
  ``/healthz``: deploy/container/Dockerfile).
- With ``FLEETMIND_SCHEDULER_CLIENT_CA`` the TLS layer verifies a client certificate (``CERT_OPTIONAL``):
  one from another CA fails the handshake, before any request. The server here is real uvicorn over
  TLS with the options ``fleetmind serve`` gives it, the certificates those of
  tests/test_serving_tls.py (:func:`test_serving_tls.make_pki`).
"""

from __future__ import annotations

import asyncio
import re
import ssl
import threading
import time
from collections.abc import Iterator
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient
from test_serving_tls import make_pki, serve_tls, tls_client

from fleetmind.serving import metrics as metrics_module
from fleetmind.serving.app import create_app
from fleetmind.serving.routers import health as health_router
from fleetmind.serving.settings import Settings

READ = "read-token-for-the-handshake-test"
SCHEDULE = "schedule-token-for-the-handshake-test"


def _settings(tmp_path: Path, **kw: Any) -> Settings:
    base: dict[str, Any] = {
        "database_url": f"sqlite:///{tmp_path}/fm.db",
        "rca_model": "baseline:upstream-coverage",
        "placement_model": "heuristic:builtin-bestfit",
        "incident_worker": False,
    }
    base.update(kw)
    return Settings(**base)


def _sample(text: str, name: str) -> float | None:
    """The value of the label-less sample ``name`` in an exposition text (``None``: absent)."""
    m = re.search(rf"^{re.escape(name)} (\S+)$", text, re.MULTILINE)
    return float(m[1]) if m else None


def _broken_ping() -> None:
    raise ConnectionError("database unreachable")


@pytest.fixture
def client(tmp_path: Path) -> Iterator[TestClient]:
    with TestClient(create_app(_settings(tmp_path))) as c:
        yield c


def test_readyz_exports_its_verdict(client: TestClient, monkeypatch: pytest.MonkeyPatch) -> None:
    assert client.get("/readyz").status_code == 200
    assert _sample(client.get("/metrics").text, "fleetmind_ready") == 1.0
    services = client.app.state.services  # type: ignore[attr-defined]
    monkeypatch.setattr(services.db, "ping", _broken_ping)
    r = client.get("/readyz")
    assert r.status_code == 503 and r.json()["problems"] == ["database: ConnectionError"]
    assert _sample(client.get("/metrics").text, "fleetmind_ready") == 0.0
    monkeypatch.undo()
    assert client.get("/readyz").status_code == 200
    assert _sample(client.get("/metrics").text, "fleetmind_ready") == 1.0


def test_a_scrape_checks_readiness_when_nothing_calls_readyz(
    client: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The compose setup: no /readyz caller, only the scrape."""
    services = client.app.state.services  # type: ignore[attr-defined]
    assert services.metrics.ready_at is None
    assert _sample(client.get("/metrics").text, "fleetmind_ready") == 1.0
    monkeypatch.setattr(services.db, "ping", _broken_ping)
    assert _sample(client.get("/metrics").text, "fleetmind_ready") == 1.0  # verdict still fresh
    services.metrics.ready_at -= 31.0  # READY_STALE_S passed without a /readyz
    r = client.get("/metrics")
    assert r.status_code == 200 and _sample(r.text, "fleetmind_ready") == 0.0


def test_a_hanging_database_is_not_ready_and_the_scrape_still_answers(
    client: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A database that stops answering (a network partition: connecting blocks) must not hang
    ``/metrics``: neither the readiness check nor the scheduler holds count (both query it) may
    hold the scrape past their bound, and a check still hanging is not started again."""
    services = client.app.state.services  # type: ignore[attr-defined]
    text = client.get("/metrics").text
    assert _sample(text, "fleetmind_ready") == 1.0  # a verdict of 1 first: a 0 below is news
    assert _sample(text, "fleetmind_scheduler_holds") == 0.0
    monkeypatch.setattr(health_router, "READY_CHECK_S", 0.2)
    monkeypatch.setattr(metrics_module, "HOLDS_COUNT_S", 0.2, raising=False)
    pings = []
    real_ping, real_connect = services.db.ping, services.db.engine.connect
    monkeypatch.setattr(services.db, "ping", lambda: (pings.append(1), real_ping())[1])
    release = threading.Event()

    def hung_connect(*args: Any, **kwargs: Any) -> Any:
        release.wait(5)  # the hang outlasts every bound below
        return real_connect(*args, **kwargs)

    monkeypatch.setattr(services.db.engine, "connect", hung_connect)
    try:
        for _ in range(2):
            services.metrics.ready_at = None  # no /readyz for READY_STALE_S
            start = time.monotonic()
            r = client.get("/metrics")
            assert time.monotonic() - start < 2.0
            assert r.status_code == 200 and _sample(r.text, "fleetmind_ready") == 0.0
            assert "fleetmind_scheduler_holds" not in r.text  # no sample while it hangs
        assert len(pings) == 1  # the second scrape did not start a check of its own
    finally:
        release.set()
    deadline = time.monotonic() + 5
    while not services.metrics.ready_check[0].done():
        assert time.monotonic() < deadline
        time.sleep(0.01)
    services.metrics.ready_at = None
    text = client.get("/metrics").text  # the database answers again
    assert _sample(text, "fleetmind_ready") == 1.0 and len(pings) == 2
    assert _sample(text, "fleetmind_scheduler_holds") == 0.0


def test_readiness_probes_on_a_hanging_database_do_not_fill_the_pool(
    client: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Kubernetes: the readiness probe calls ``/readyz`` every 5 s (timeoutSeconds 3:
    deploy/kubernetes/base/deployment.yaml) while the database hangs. Each probe gets a 503 within
    the bound, they share one check, and ``/metrics`` still answers after more probes than
    PROBE_POOL has threads."""
    services = client.app.state.services  # type: ignore[attr-defined]
    monkeypatch.setattr(health_router, "READY_CHECK_S", 0.2)
    monkeypatch.setattr(metrics_module, "HOLDS_COUNT_S", 0.2, raising=False)
    pings = []
    real_ping, real_connect = services.db.ping, services.db.engine.connect
    monkeypatch.setattr(services.db, "ping", lambda: (pings.append(1), real_ping())[1])
    release = threading.Event()
    monkeypatch.setattr(
        services.db.engine, "connect", lambda *a, **k: (release.wait(5), real_connect(*a, **k))[1]
    )
    try:
        for _ in range(health_router.PROBE_POOL._max_workers + 2):
            start = time.monotonic()
            r = client.get("/readyz")
            assert time.monotonic() - start < 1.5
            assert r.status_code == 503
            assert r.json()["problems"] == ["database: no answer within 0.2 s"]
        start = time.monotonic()
        r = client.get("/metrics")
        assert time.monotonic() - start < 1.5
        assert r.status_code == 200 and _sample(r.text, "fleetmind_ready") == 0.0
        assert len(pings) == 1
    finally:
        release.set()


def test_concurrent_scrapes_share_the_check_of_a_healthy_database(
    client: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An HA Prometheus pair scrapes at the same moment while the check runs (a database 100 ms
    away): both get its verdict, 1, and one ping is made."""
    services = client.app.state.services  # type: ignore[attr-defined]
    pings = []
    real_ping = services.db.ping

    def slow_ping() -> None:
        pings.append(1)
        time.sleep(0.1)
        real_ping()

    monkeypatch.setattr(services.db, "ping", slow_ping)
    assert services.metrics.ready_at is None

    async def two_scrapes() -> list[float | None]:
        async def one() -> float | None:
            await health_router._refresh_ready(services)
            return float(services.metrics.ready._value.get())

        return list(await asyncio.gather(one(), one()))

    assert asyncio.run(two_scrapes()) == [1.0, 1.0]
    assert len(pings) == 1


def test_a_check_held_past_its_bound_is_not_ready_at_once(
    client: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A check still running more than READY_CHECK_S after it started reads 0 without waiting."""
    services = client.app.state.services  # type: ignore[attr-defined]
    hung: Future[bool] = Future()
    services.metrics.ready_check = (hung, time.monotonic() - health_router.READY_CHECK_S - 0.1)
    start = time.monotonic()
    assert _sample(client.get("/metrics").text, "fleetmind_ready") == 0.0
    assert time.monotonic() - start < 1.0
    hung.set_result(True)


@pytest.fixture(scope="module")
def tls_served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, dict[str, Path]]]:
    d = tmp_path_factory.mktemp("pki")
    pki = make_pki(d)
    settings = _settings(
        d,
        read_token=READ,
        schedule_token=SCHEDULE,
        tls_cert=str(pki["fleetmind.crt"]),
        tls_key=str(pki["fleetmind.key"]),
        scheduler_client_ca=str(pki["scheduler-ca.crt"]),
    )
    with serve_tls(settings) as url:
        yield url, pki


def _failures(url: str, pki: dict[str, Path]) -> float:
    with tls_client(pki, "kube-scheduler") as c:
        value = _sample(c.get(url + "/metrics").text, "fleetmind_tls_handshake_failures_total")
    assert value is not None
    return value


def test_a_certificate_of_another_ca_is_counted(tls_served: Any) -> None:
    url, pki = tls_served
    before = _failures(url, pki)
    with tls_client(pki, "kube-scheduler") as c:  # a good certificate is no failure
        assert c.post(url + "/api/v1/scheduler/filter", json={}).status_code == 422
    assert _failures(url, pki) == before
    for _ in range(3):
        with tls_client(pki, "stranger") as c, pytest.raises(httpx.TransportError):
            c.post(url + "/api/v1/scheduler/filter", json={"Pod": {}, "NodeNames": []})
    deadline = time.monotonic() + 5
    while _failures(url, pki) < before + 3 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _failures(url, pki) == before + 3


def test_a_client_not_trusting_the_server_is_counted(tls_served: Any) -> None:
    url, pki = tls_served
    before = _failures(url, pki)
    ctx = ssl.create_default_context(cafile=str(pki["stranger-ca.crt"]))
    with httpx.Client(verify=ctx, timeout=10.0) as c, pytest.raises(httpx.TransportError):
        c.get(url + "/healthz")
    deadline = time.monotonic() + 5
    while _failures(url, pki) < before + 1 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _failures(url, pki) == before + 1


def test_the_rules_read_the_series_the_service_exports() -> None:
    """``FleetMindNotReady`` and ``FleetMindTLSHandshakeFailures`` read these names, both present
    from the start (a counter born at 1 shows ``rate()`` no increase)."""
    import yaml

    from fleetmind.data.paths import REPO_ROOT
    from fleetmind.serving.metrics import Metrics

    groups = yaml.safe_load((REPO_ROOT / "deploy" / "fleetmind-rules.yml").read_text())["groups"]
    exprs = {r["alert"]: r["expr"] for g in groups for r in g["rules"] if "alert" in r}
    assert exprs["FleetMindNotReady"].strip() == "fleetmind_ready == 0"
    assert "fleetmind_tls_handshake_failures_total[30m]" in exprs["FleetMindTLSHandshakeFailures"]
    metrics = Metrics()
    metrics.set_ready(False)
    text = metrics.render()[0].decode()
    assert _sample(text, "fleetmind_ready") == 0.0
    assert _sample(text, "fleetmind_tls_handshake_failures_total") == 0.0


READY_WORKER = """
import sys
from fleetmind.serving.metrics import Metrics

m = Metrics()
for line in sys.stdin:  # "1"/"0": a verdict; "render": the merged exposition; "asked": nothing
    cmd = line.strip()
    if cmd in ("0", "1"):
        m.set_ready(cmd == "1")
    elif cmd == "render":
        text = m.render()[0].decode()
        values = [ln.split()[1] for ln in text.splitlines() if ln.startswith("fleetmind_ready ")]
        print(values[0] if values else "none", flush=True)
        continue
    print("ok", flush=True)
"""


def test_with_several_workers_the_latest_verdict_is_exported(tmp_path: Path) -> None:
    """Two live workers (``fleetmind serve --workers 2``) share the metrics directory; each
    probe reaches one of them. The exported value is the verdict given last, whichever worker gave
    it; a worker that was never asked does not read as not ready."""
    import os
    import subprocess
    import sys

    env = {**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(tmp_path)}
    workers = [
        subprocess.Popen(
            [sys.executable, "-c", READY_WORKER],
            env=env,
            text=True,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
        )  # fmt: skip
        for _ in range(2)
    ]

    def ask(worker: Any, cmd: str) -> str:
        worker.stdin.write(cmd + "\n")
        worker.stdin.flush()
        return str(worker.stdout.readline().strip())

    try:
        a, b = workers
        assert ask(a, "asked") == "ok" and ask(b, "asked") == "ok"
        assert ask(a, "render") == "none"  # no verdict yet: no sample, not a 0
        assert ask(a, "1") == "ok"
        assert ask(b, "render") == "1.0"  # b never asked: a's verdict stands
        time.sleep(0.01)
        assert ask(b, "0") == "ok"
        assert ask(a, "render") == "0.0"  # b's later 0 is the verdict, whoever answers
        time.sleep(0.01)
        assert ask(a, "1") == "ok"
        assert ask(b, "render") == "1.0"
    finally:
        for w in workers:
            w.communicate("", timeout=60)
