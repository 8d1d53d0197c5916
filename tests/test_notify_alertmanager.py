"""The root cause through a real Prometheus Alertmanager, configured by deploy/alertmanager.yml.

The storm goes to Alertmanager, which routes every alert both to FleetMind (``continue: true``)
and to the on-call receiver (a local webhook here); FleetMind ranks, posts ``FleetMindRootCause`` to
Alertmanager's ``/api/v2/alerts``, whose API then lists it with the incident, cause node and cluster
labels, and on-call gets it. Resolving the storm resolves the incident, and FleetMind resolves the
alert: it leaves Alertmanager's active alerts and on-call gets the resolved notification.
"""

from __future__ import annotations

import contextlib
import shutil
import subprocess
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest
from alertmanager_helpers import (
    Receiver,
    alertmanager_binary,
    running_alertmanager,
    shipped_config,
)
from serving_helpers import Server, free_port, wait_for
from ui_helpers import STORM_LABELS, TRUE_ROOT

TOKEN = "notify-e2e-token"


@pytest.fixture
def capture() -> Iterator[Receiver]:
    with Receiver() as c:
        yield c


def _am_alerts(am_url: str) -> list[dict]:
    r = httpx.get(am_url + "/api/v2/alerts", params={"filter": 'alertname="FleetMindRootCause"'})
    return r.json() if r.status_code == 200 else []


@pytest.mark.external
def test_root_cause_reaches_alertmanager_and_resolves(tmp_path: Path, capture: Receiver) -> None:
    alertmanager_binary()  # skips before FleetMind starts when it is absent
    am_port = free_port()
    am_url = f"http://127.0.0.1:{am_port}"
    env = {
        "FLEETMIND_DATABASE_URL": f"sqlite:///{tmp_path}/n.db",
        "FLEETMIND_API_TOKEN": TOKEN,
        "FLEETMIND_RCA_MODEL": "baseline:upstream-coverage",
        "FLEETMIND_PLACEMENT_MODEL": "heuristic:builtin-bestfit",
        "FLEETMIND_PUBLIC_URL": "https://fleetmind.example.org",
        "FLEETMIND_NOTIFY_ALERTMANAGER_URL": am_url,
        "FLEETMIND_NOTIFY_WEBHOOK_URL": capture.url + "/slack",
        "FLEETMIND_NOTIFY_SETTLE_S": "1",
        "FLEETMIND_NOTIFY_POLL_S": "0.2",
        "FLEETMIND_NOTIFY_BACKOFF_S": "0.1",
        "FLEETMIND_INCIDENT_RANK_INTERVAL_S": "0",
    }
    with contextlib.ExitStack() as stack:
        fm = Server(env, log=tmp_path / "server.log").start(timeout=120)  # slow on a busy host
        stack.callback(fm.stop)
        cfg = shipped_config(tmp_path, fm.url, TOKEN, oncall_url=capture.url + "/oncall")
        stack.enter_context(
            running_alertmanager(cfg, tmp_path / "am-data", port=am_port, log=tmp_path / "am.log")
        )

        t0 = datetime.now(UTC) - timedelta(minutes=2)
        starts = [(t0 + timedelta(seconds=10 * i)).isoformat() for i in range(len(STORM_LABELS))]
        storm = [
            {"labels": lab, "annotations": {"summary": "storm"}, "startsAt": s}
            for lab, s in zip(STORM_LABELS, starts, strict=True)
        ]
        assert httpx.post(am_url + "/api/v2/alerts", json=storm).status_code == 200

        ours = wait_for(lambda: _am_alerts(am_url), timeout=45)
        assert ours, "no FleetMindRootCause alert reached Alertmanager"
        auth = {"Authorization": f"Bearer {TOKEN}"}
        [inc] = httpx.get(fm.url + "/api/v1/incidents", headers=auth).json()
        [root] = ours
        assert root["labels"]["incident"] == str(inc["id"])
        assert root["labels"]["cause_node"] == TRUE_ROOT
        assert root["labels"]["cluster"] == "c0"
        assert root["annotations"]["incident_url"].endswith(f"/ui/incidents/{inc['id']}")
        assert root["status"]["state"] == "active"

        # continue: true: on-call got the storm itself and, separately, the root cause
        def oncall_names() -> set[str]:
            return {a["labels"]["alertname"] for b in capture.at("/oncall") for a in b["alerts"]}

        assert wait_for(lambda: {"KubeNodeNotReady", "FleetMindRootCause"} <= oncall_names(), 20)
        assert len(capture.at("/slack")) == 1
        # FleetMind did not get its own alert back
        stored = httpx.get(fm.url + "/api/v1/alerts", headers=auth, params={"limit": 100}).json()
        assert {a["labels"]["alertname"] for a in stored} == {
            lab["alertname"] for lab in STORM_LABELS
        }

        # the storm resolves -> the incident resolves -> FleetMind resolves its alert
        past = datetime.now(UTC).isoformat()
        done = [dict(a, endsAt=past) for a in storm]
        assert httpx.post(am_url + "/api/v2/alerts", json=done).status_code == 200
        assert wait_for(lambda: not _am_alerts(am_url), timeout=45), "root-cause alert still active"

        def resolved_sent() -> bool:
            return any(
                a["labels"]["alertname"] == "FleetMindRootCause" and a["status"] == "resolved"
                for b in capture.at("/oncall")
                for a in b["alerts"]
            )

        assert wait_for(resolved_sent, timeout=20), "on-call never heard that it resolved"
        hooks = capture.at("/slack")
        assert [h["fleetmind"]["status"] for h in hooks] == ["firing", "resolved"]


@pytest.mark.parametrize(
    ("labels", "receivers"),
    [
        (["alertname=HostDown", "cluster=c0"], "fleetmind,oncall"),
        (["alertname=FleetMindRootCause", "incident=3"], "oncall"),
    ],
)
def test_shipped_routes_keep_existing_receivers(labels: list[str], receivers: str) -> None:
    amtool = shutil.which("amtool")
    if amtool is None:
        pytest.skip("amtool not installed (Debian package prometheus-alertmanager)")
    cfg = Path(__file__).parents[1] / "deploy" / "alertmanager.yml"
    out = subprocess.run(
        [amtool, "config", "routes", "test", f"--config.file={cfg}", *labels],
        capture_output=True,
        text=True,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == receivers
