"""``/metrics`` with ``fleetmind serve --workers N``: every worker's values, not one worker's.

prometheus-client's multiprocess mode (client_python docs, "Multiprocess Mode"; source
``prometheus_client/multiprocess.py``): with ``PROMETHEUS_MULTIPROC_DIR`` set before the library is
imported, each process writes its values to files there and a ``MultiProcessCollector`` on a fresh
registry merges them: counters summed, gauges by their ``multiprocess_mode`` (``livemax``: the
largest value of the processes not marked dead with ``mark_process_dead``). The variable is read at
import, so each worker here is a separate interpreter, as uvicorn's spawned workers are.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families
from serving_helpers import free_port

from fleetmind.cli import main, serve
from fleetmind.serving.metrics import Metrics
from fleetmind.serving.settings import get_settings

MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"
WORKER = """
import sys
from fleetmind.serving.metrics import Metrics

role, ingested, open_incidents = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
m = Metrics()
m.alerts_ingested.labels("firing").inc(ingested)
m.alerts_grouped.inc(ingested)
m.open_incidents.set(open_incidents)
m.grouping_lag.set(open_incidents)
if role == "follower":  # stays alive until the test closes its stdin
    print("ready", flush=True)
    sys.stdin.read()
elif role == "render":
    sys.stdout.write(m.render()[0].decode())
"""


def _worker(env: dict[str, str], *args: str, **kw: Any) -> Any:
    return subprocess.Popen(
        [sys.executable, "-c", WORKER, *args],
        env=env,
        stdout=subprocess.PIPE,
        stdin=subprocess.PIPE,
        text=True,
        **kw,
    )


def _samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for fam in text_string_to_metric_families(text)
        for s in fam.samples
    }


def test_metrics_merge_every_worker_and_drop_an_exited_workers_gauges(tmp_path: Path) -> None:
    """Three workers: one exited (it was the leader, 7 incidents open then), one alive that does
    not lead (0), the one answering the scrape that leads (1). Counters are the sum of all three
    (an exited worker's counts stay in the total: a counter must not go down); the gauges are the
    live workers' maximum: the exited worker's 7 is gone."""
    env = {**os.environ, MULTIPROC_ENV: str(tmp_path)}
    dead = _worker(env, "exit", "5", "7")
    dead.communicate(timeout=120)
    assert dead.returncode == 0
    follower = _worker(env, "follower", "4", "0")
    try:
        assert follower.stdout is not None and follower.stdout.readline() == "ready\n"
        leader = _worker(env, "render", "3", "1")
        out, _ = leader.communicate(timeout=120)
    finally:
        follower.communicate("", timeout=120)
    assert leader.returncode == 0
    got = _samples(out)
    assert got[("fleetmind_alerts_ingested_total", (("status", "firing"),))] == 12.0
    assert got[("fleetmind_alerts_grouped_total", ())] == 12.0
    assert got[("fleetmind_open_incidents", ())] == 1.0
    assert got[("fleetmind_incident_grouping_lag_seconds", ())] == 1.0
    # the pre-created model-load series, summed over the workers: still 0, each once
    assert got[("fleetmind_model_loads_total", (("kind", "rca"), ("result", "failure")))] == 0.0
    assert not any(("pid", str(dead.pid)) in labels for _, labels in got)


def test_one_process_keeps_its_private_registry(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without the variable (``--workers 1``, the tests) nothing is written to files and the
    rendered text is the private registry's."""
    monkeypatch.delenv(MULTIPROC_ENV, raising=False)
    m = Metrics()
    assert m.multiprocess_dir is None and m.process_registry is m.registry
    m.alerts_grouped.inc(2)
    assert "fleetmind_alerts_grouped_total 2.0" in m.render()[0].decode()


def test_serve_with_workers_points_them_at_an_empty_metrics_dir(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``serve --workers 2`` sets ``PROMETHEUS_MULTIPROC_DIR`` before uvicorn starts the workers
    (client_python: "must be set ... before the application starts", and "wiped between runs"):
    a new directory of this run's own, inside the operator's when one is set, whose other files
    (another instance's, live, or an earlier run's) are left alone and not merged; ``--workers
    1`` sets nothing."""
    import uvicorn

    seen: list[str | None] = []
    stale = tmp_path / "prom"
    stale.mkdir()
    (stale / "counter_123.db").write_bytes(b"old run")

    def fake_run(*args: object, **kw: object) -> None:
        path = os.environ.get(MULTIPROC_ENV)
        seen.append(path)
        if path is not None:
            assert os.listdir(path) == []

    monkeypatch.setattr(uvicorn, "run", fake_run)
    monkeypatch.setattr(serve, "_ignore_sighup", lambda: None)  # the test process keeps SIGHUP's
    for var in ("API", "READ", "INGEST", "SCHEDULE", "ADMIN"):
        monkeypatch.delenv(f"FLEETMIND_{var}_TOKEN", raising=False)
    monkeypatch.setenv("FLEETMIND_DATABASE_URL", f"sqlite:///{tmp_path}/serve.db")
    monkeypatch.delenv(MULTIPROC_ENV, raising=False)
    port = str(free_port())
    try:
        assert main(["serve", "--port", port, "--workers", "1"]) == 0
        assert main(["serve", "--port", port, "--workers", "2"]) == 0
        assert seen[0] is None and seen[1] is not None
        assert MULTIPROC_ENV not in os.environ and not os.path.exists(seen[1])  # removed after
        monkeypatch.setenv(MULTIPROC_ENV, str(stale))
        assert main(["serve", "--port", port, "--workers", "2"]) == 0
        # one worker in an operator's directory, which other instances may share: its own too
        assert main(["serve", "--port", port, "--workers", "1"]) == 0
    finally:
        get_settings.cache_clear()
    # a directory of its own inside the operator's, removed after; the other files untouched
    assert os.path.dirname(seen[2]) == str(stale) and not os.path.exists(seen[2])
    assert os.path.dirname(seen[3]) == str(stale) and seen[3] != seen[2]
    assert os.listdir(stale) == ["counter_123.db"] and os.environ[MULTIPROC_ENV] == str(stale)
