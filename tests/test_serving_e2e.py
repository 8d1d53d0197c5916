"""End-to-end tests with real processes: uvicorn, kill -9, Prometheus Alertmanager, Prometheus.

Binaries that are absent (Debian packages ``prometheus-alertmanager``, ``prometheus``) skip their
tests with the reason; ``make test`` installs them when run as root with apt-get.
"""

from __future__ import annotations

import contextlib
import shutil
import sqlite3
import subprocess
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest
import yaml
from alertmanager_helpers import running_alertmanager, shipped_config
from serving_helpers import Server, alert, free_port, wait_for, webhook

from fleetmind.data.paths import REPO_ROOT

DEPLOY = REPO_ROOT / "deploy"
BASE_ENV = {
    "FLEETMIND_RCA_MODEL": "baseline:upstream-coverage",
    "FLEETMIND_PLACEMENT_MODEL": "heuristic:builtin-bestfit",
}


def _binary(*names: str) -> str | None:
    for n in names:
        path = shutil.which(n)
        if path:
            return path
    return None


# ----------------------------------------------------------------------------------------- crash
@pytest.mark.slow
def test_kill9_during_ingestion_loses_no_acknowledged_alert(tmp_path: Path) -> None:
    db = tmp_path / "crash.db"
    env = {**BASE_ENV, "FLEETMIND_DATABASE_URL": f"sqlite:///{db}"}
    server = Server(env, log=tmp_path / "server.log").start()
    acked: list[str] = []
    stop = threading.Event()

    def send() -> None:
        with httpx.Client(base_url=server.url, timeout=5.0) as c:
            batch = 0
            while not stop.is_set():
                fps = [f"crash-{batch}-{i}" for i in range(25)]
                body = webhook(
                    [
                        alert(
                            {
                                "alertname": "GpuXid",
                                "cluster": "c0",
                                "node": f"c0-h{i % 4}",
                                "gpu": str(i % 8),
                            },
                            fingerprint=fp,
                        )
                        for i, fp in enumerate(fps)
                    ]
                )
                try:
                    r = c.post("/api/v1/alerts", json=body)
                except httpx.HTTPError:
                    return  # the server is gone
                if r.status_code == 200:
                    acked.extend(fps)
                batch += 1

    t = threading.Thread(target=send)
    t.start()
    wait_for(lambda: len(acked) >= 150, timeout=30)
    server.kill()  # SIGKILL in the middle of the stream
    stop.set()
    t.join(10)
    assert len(acked) >= 150

    # The database file alone already holds every acknowledged alert (before any restart logic).
    with sqlite3.connect(db) as conn:
        stored = {r[0] for r in conn.execute("SELECT fingerprint FROM alerts")}
    missing = set(acked) - stored
    assert not missing, f"{len(missing)} acknowledged alerts lost, e.g. {sorted(missing)[:3]}"

    # After a restart the service serves them and groups the ones left pending.
    with Server(env, log=tmp_path / "server2.log") as again:
        listed = httpx.get(again.url + "/api/v1/alerts", params={"limit": 10000}).json()
        assert set(acked) <= {a["fingerprint"] for a in listed}

        def grouped() -> bool:
            with sqlite3.connect(db) as conn:
                return conn.execute("SELECT count(*) FROM alerts WHERE pending").fetchone()[0] == 0

        assert wait_for(grouped, timeout=30)
        incs = httpx.get(again.url + "/api/v1/incidents").json()
        assert sum(i["alert_count"] for i in incs) == len(stored)


# ----------------------------------------------------------------------------------------- Alertmanager
@pytest.mark.external
@pytest.mark.slow
def test_alertmanager_delivers_into_ranked_incidents(tmp_path: Path) -> None:
    token = "e2e-token-0123456789"
    env = {
        **BASE_ENV,
        "FLEETMIND_DATABASE_URL": f"sqlite:///{tmp_path}/am.db",
        "FLEETMIND_API_TOKEN": token,
    }
    with contextlib.ExitStack() as stack:
        # FleetMind is down when the storm arrives: Alertmanager's retries must deliver it later.
        fm = Server(env, log=tmp_path / "server.log")
        stack.callback(fm.stop)
        cfg = shipped_config(tmp_path, fm.url, token)
        am_url = stack.enter_context(
            running_alertmanager(cfg, tmp_path / "am-data", log=tmp_path / "am.log")
        )
        now = datetime.now(UTC)
        storm = [
            {
                "alertname": "GpuXidError",
                "cluster": "c0",
                "node": "c0-h1",
                "gpu": "3",
                "severity": "critical",
            },
            {"alertname": "HostDown", "cluster": "c0", "node": "c0-h1", "severity": "critical"},
            {
                "alertname": "GpuXidError",
                "cluster": "c0",
                "node": "c0-h1",
                "gpu": "4",
                "severity": "critical",
            },
            {"alertname": "HostDown", "cluster": "c1", "node": "c1-h2", "severity": "critical"},
        ]
        body = [
            {"labels": lab, "annotations": {"summary": "e2e"}, "startsAt": now.isoformat()}
            for lab in storm
        ]
        assert httpx.post(am_url + "/api/v2/alerts", json=body).status_code == 200
        time.sleep(1.5)  # group_wait passes, the first delivery fails (connection refused)
        fm.start()

        def incidents() -> list[dict]:
            incs = httpx.get(
                fm.url + "/api/v1/incidents", headers={"Authorization": f"Bearer {token}"}
            ).json()
            ready = [i for i in incs if i["causes"]]
            return ready if sum(i["alert_count"] for i in ready) == 4 else []

        incs = wait_for(incidents, timeout=60)
        assert incs, "alerts did not arrive through Alertmanager"
        assert sorted(i["alert_count"] for i in incs) == [1, 3]
        big = next(i for i in incs if i["alert_count"] == 3)
        assert big["causes"][0]["path"][0] == big["causes"][0]["node"]
        assert "c0/host/c0-h1" in [c["node"] for c in big["causes"]]

        # resolve the lone alert through Alertmanager: FleetMind closes its incident
        past = (now + timedelta(seconds=1)).isoformat()
        resolve = [{"labels": storm[3], "startsAt": now.isoformat(), "endsAt": past}]
        assert httpx.post(am_url + "/api/v2/alerts", json=resolve).status_code == 200

        def closed() -> list[dict]:
            return httpx.get(
                fm.url + "/api/v1/incidents",
                params={"status": "resolved"},
                headers={"Authorization": f"Bearer {token}"},
            ).json()

        done = wait_for(closed, timeout=30)
        assert len(done) == 1 and done[0]["nodes"] == ["c1/host/c1-h2"]


def test_shipped_alertmanager_config_is_valid() -> None:
    amtool = _binary("amtool")
    if amtool is None:
        pytest.skip("amtool not installed (Debian package prometheus-alertmanager)")
    out = subprocess.run(
        [amtool, "check-config", str(DEPLOY / "alertmanager.yml")], capture_output=True, text=True
    )
    assert out.returncode == 0, out.stdout + out.stderr


# ----------------------------------------------------------------------------------------- Prometheus
def test_rules_pass_promtool_checks_and_unit_tests() -> None:
    promtool = _binary("promtool")
    if promtool is None:
        pytest.skip("promtool not installed (Debian package prometheus)")
    for args in (
        ["check", "rules", str(DEPLOY / "fleetmind-rules.yml")],
        ["test", "rules", str(DEPLOY / "fleetmind-rules.test.yml")],
        ["check", "config", str(DEPLOY / "prometheus.yml")],
    ):
        out = subprocess.run([promtool, *args], capture_output=True, text=True, cwd=DEPLOY)
        assert out.returncode == 0, f"promtool {' '.join(args)}: {out.stdout}{out.stderr}"


@pytest.mark.external
def test_prometheus_loads_the_rules(tmp_path: Path) -> None:
    prom = _binary("prometheus")
    if prom is None:
        pytest.skip("Prometheus not installed (Debian package prometheus)")
    cfg = {
        "global": {"evaluation_interval": "1s"},
        "rule_files": [str(DEPLOY / "fleetmind-rules.yml")],
    }
    (tmp_path / "prometheus.yml").write_text(yaml.safe_dump(cfg))
    port = free_port()
    proc = subprocess.Popen(
        [
            prom,
            f"--config.file={tmp_path / 'prometheus.yml'}",
            f"--storage.tsdb.path={tmp_path / 'tsdb'}",
            f"--web.listen-address=127.0.0.1:{port}",
            "--log.level=warn",
        ],
        stdout=subprocess.DEVNULL,
        stderr=open(tmp_path / "prom.log", "wb"),  # noqa: SIM115
    )
    try:
        url = f"http://127.0.0.1:{port}/api/v1/rules"

        def rules() -> list[str]:
            try:
                groups = httpx.get(url, timeout=1.0).json()["data"]["groups"]
            except (httpx.HTTPError, ValueError, KeyError):
                return []
            return sorted(r["name"] for g in groups for r in g["rules"])

        names = wait_for(rules, timeout=30)
        assert names == sorted(
            [
                "GpuLowUtilisation",
                "fleetmind:gpu_last_xid:info",  # the recording rule GpuXidError reads
                "GpuXidError",
                "GpuPcieReplays",
                "CrossClusterLatencyHigh",
                "PendingPodsOverQueueCapacity",
                "ModelWeightLoadFailures",
                "FleetMindDown",
                "FleetMindAbsent",
                "FleetMindNotReady",
                "FleetMindAlertIngestionFailing",
                "FleetMindExtenderErrors",
                "FleetMindTLSHandshakeFailures",
                "FleetMindExtenderSlow",
                "FleetMindFilterRefusingAll",
                "FleetMindIncidentGroupingLag",
                "FleetMindModelFallback",
                "FleetMindNotificationsFailing",  # outcome="dropped"
                "FleetMindNotificationsFailing",  # outcome="failed"
                "FleetMindWebhookRefused",
            ]
        )
        health = httpx.get(url).json()["data"]["groups"]
        assert all(r["health"] in ("ok", "unknown") for g in health for r in g["rules"])
    finally:
        proc.terminate()
        proc.wait(10)
