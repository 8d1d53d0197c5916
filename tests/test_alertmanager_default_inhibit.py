"""kube-prometheus-stack's default inhibit rules, as ``deploy/alertmanager.yml`` ships them, leave
FleetMind's root-cause alerts of other incidents alone, in a real Alertmanager.

The chart's ``alertmanager.config`` (prometheus-community/helm-charts
``charts/kube-prometheus-stack/values.yaml``) inhibits ``severity=~"warning|info"`` while a
``severity="critical"`` alert fires with equal ``namespace`` and ``alertname``. FleetMindRootCause
has no ``namespace`` (``serving/notify.py``), and Alertmanager counts a label missing on both as
equal (``inhibit/inhibit.go``: ``equal`` compares label values, absent ones being ""), so the rule
as upstream ships it lets one critical root cause inhibit the warning root cause of every other
incident. The shipped rules exclude FleetMindRootCause from the targets and still inhibit ordinary
warnings. Needs the Debian package ``prometheus-alertmanager`` (skipped without it);
``FLEETMIND_TEST_PORT`` picks the port (else a free one).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from serving_helpers import free_port, wait_for

from fleetmind.data.paths import REPO_ROOT

SHIPPED = REPO_ROOT / "deploy" / "alertmanager.yml"
UPSTREAM_RULES = [  # kube-prometheus-stack values.yaml, alertmanager.config.inhibit_rules
    {
        "source_matchers": ["severity = critical"],
        "target_matchers": ["severity =~ warning|info"],
        "equal": ["namespace", "alertname"],
    },
    {
        "source_matchers": ["severity = warning"],
        "target_matchers": ["severity = info"],
        "equal": ["namespace", "alertname"],
    },
    {
        "source_matchers": ["alertname = InfoInhibitor"],
        "target_matchers": ["severity = info"],
        "equal": ["namespace"],
    },
    {"target_matchers": ["alertname = InfoInhibitor"]},
]


def root_cause(incident: str, cluster: str, severity: str) -> dict[str, str]:
    """A FleetMindRootCause alert's labels, as serving/notify.py builds them."""
    return {
        "alertname": "FleetMindRootCause",
        "incident": incident,
        "cause_node": f"{cluster}/host/gpu-a100-{incident}",
        "cause_kind": "host",
        "cluster": cluster,
        "severity": severity,
    }


CRASH = {"alertname": "KubePodCrashLooping", "namespace": "ml", "container": "ranker"}


@pytest.fixture
def alertmanager(tmp_path: Path) -> Iterator[Any]:
    binary = shutil.which("prometheus-alertmanager") or shutil.which("alertmanager")
    if binary is None:
        pytest.skip(
            "Prometheus Alertmanager not installed (Debian package prometheus-alertmanager)"
        )
    procs: list[subprocess.Popen[bytes]] = []

    def start(rules: list[dict[str, Any]] | None) -> str:
        """Start Alertmanager on the shipped config (``rules``: other inhibit rules); its URL."""
        cfg = yaml.safe_load(SHIPPED.read_text())
        if rules is not None:
            cfg["inhibit_rules"] = rules
        (tmp_path / "token").write_text("t")
        hook = {r["name"]: r for r in cfg["receivers"]}["fleetmind"]["webhook_configs"][0]
        hook["http_config"]["authorization"]["credentials_file"] = str(tmp_path / "token")
        hook["url"] = "http://127.0.0.1:9/api/v1/alerts"  # never listens: deliveries are moot
        path = tmp_path / f"am{len(procs)}.yml"
        path.write_text(yaml.safe_dump(cfg))
        port = int(os.environ.get("FLEETMIND_TEST_PORT", "0")) or free_port()
        procs.append(
            subprocess.Popen(
                [
                    binary,
                    f"--config.file={path}",
                    f"--storage.path={tmp_path / f'data{len(procs)}'}",
                    f"--web.listen-address=127.0.0.1:{port}",
                    "--cluster.listen-address=",
                    "--log.level=warn",
                ],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
        )
        url = f"http://127.0.0.1:{port}"
        assert wait_for(lambda: _ready(url), timeout=30), "Alertmanager did not start"
        return url

    yield start
    for p in procs:
        p.terminate()
        p.wait(timeout=10)


def _ready(url: str) -> bool:
    try:
        return httpx.get(url + "/-/ready", timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


def _post(url: str, labels: list[dict[str, str]]) -> None:
    r = httpx.post(url + "/api/v2/alerts", json=[{"labels": x} for x in labels], timeout=5)
    assert r.status_code == 200, r.text


def _states(url: str) -> dict[tuple[str, str], list[str]]:
    """``(alertname, incident or namespace/severity) -> inhibitedBy`` of the alerts Alertmanager
    holds."""
    out = {}
    for a in httpx.get(url + "/api/v2/alerts", timeout=5).json():
        lab = a["labels"]
        key = lab.get("incident") or f"{lab.get('namespace')}/{lab['severity']}"
        out[(lab["alertname"], key)] = a["status"]["inhibitedBy"]
    return out


def _storm(url: str) -> dict[tuple[str, str], list[str]]:
    """A critical root cause of incident 1 (prod-eu), then a warning one of incident 7 (prod-us),
    a critical and a warning KubePodCrashLooping in ``ml``; the states once the ordinary warning's
    inhibition is seen (Alertmanager's inhibitor reads alerts in the order they came)."""
    _post(url, [root_cause("1", "prod-eu", "critical")])
    _post(
        url,
        [
            root_cause("7", "prod-us", "warning"),
            {**CRASH, "pod": "ranker-a", "severity": "critical"},
            {**CRASH, "pod": "ranker-a", "severity": "warning"},
        ],
    )
    assert wait_for(lambda: bool(_states(url).get(("KubePodCrashLooping", "ml/warning"))), 30)
    return _states(url)


@pytest.mark.external
def test_shipped_rules_leave_other_incidents_root_causes_alone(alertmanager: Any) -> None:
    states = _storm(alertmanager(None))
    assert states[("FleetMindRootCause", "7")] == []
    assert states[("FleetMindRootCause", "1")] == []
    assert states[("KubePodCrashLooping", "ml/warning")]  # ordinary warnings: as upstream
    assert states[("KubePodCrashLooping", "ml/critical")] == []


@pytest.mark.external
def test_upstream_rules_alone_inhibit_every_warning_root_cause(alertmanager: Any) -> None:
    """Why the shipped rules differ: the chart's rules as they are."""
    states = _storm(alertmanager(UPSTREAM_RULES))
    assert states[("FleetMindRootCause", "7")]
    assert states[("KubePodCrashLooping", "ml/warning")]
