"""kube-prometheus-stack's default inhibit rules, as
``deploy/alertmanager-kube-prometheus-stack-inhibit.yml`` ships them, in a real Alertmanager.

The chart's ``alertmanager.config`` (prometheus-community/helm-charts
``charts/kube-prometheus-stack/values.yaml``) inhibits ``severity=~"warning|info"`` while a
``severity="critical"`` alert fires with equal ``namespace`` and ``alertname``. FleetMindRootCause
has no ``namespace`` (``serving/notify.py``), and Alertmanager counts a label missing on both as
equal (``inhibit/inhibit.go``: ``equal`` compares label values, absent ones being ""), so the rule
as upstream ships it lets one critical root cause inhibit the warning root cause of every other
incident. The snippet excludes FleetMindRootCause from the targets and still inhibits ordinary
warnings; checked here by what the receivers get (local webhooks), not only by the API's
``inhibitedBy``. Inhibition mutes an alert for every receiver, FleetMind's too, so
``deploy/alertmanager.yml`` on its own ships no inhibit rules: there a critical alert of one host
leaves FleetMind the warning of another host and its resolution.

Needs the Debian package ``prometheus-alertmanager`` (skipped without it); ``FLEETMIND_TEST_PORT``
is the first of 4 consecutive ports to use (else free ones).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from alertmanager_helpers import Receiver, running_alertmanager
from serving_helpers import free_port, wait_for

from fleetmind.data.paths import REPO_ROOT

SHIPPED = REPO_ROOT / "deploy" / "alertmanager.yml"
SNIPPET = REPO_ROOT / "deploy" / "alertmanager-kube-prometheus-stack-inhibit.yml"
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
CRASH = {"alertname": "KubePodCrashLooping", "namespace": "ml", "container": "ranker"}
# node-exporter's alerts carry its target labels: namespace=monitoring on every host
DISK = {
    "alertname": "NodeFilesystemSpaceFillingUp",
    "namespace": "monitoring",
    "job": "node-exporter",
    "mountpoint": "/",
}


def _ports() -> Iterator[int]:
    base = int(os.environ.get("FLEETMIND_TEST_PORT", "0"))
    i = 0
    while True:
        yield base + i if base else free_port()
        i += 1


def _snippet_rules() -> list[dict[str, Any]]:
    doc = yaml.safe_load(SNIPPET.read_text())
    assert set(doc) == {"inhibit_rules"}, "the snippet is the inhibit_rules list only"
    return doc["inhibit_rules"]


def _config(tmp_path: Path, rules: list[dict[str, Any]] | None, hook: str) -> Path:
    """deploy/alertmanager.yml with ``rules`` as its inhibit_rules (None: as shipped), the
    receivers posting to ``hook`` (``/fleetmind``, ``/oncall``, ``/chat``), FleetMind's route
    waiting 1 s instead of 10 s (same semantics, a faster test)."""
    cfg = yaml.safe_load(SHIPPED.read_text())
    if rules is not None:
        cfg["inhibit_rules"] = rules
    (tmp_path / "token").write_text("t")
    receivers = {r["name"]: r for r in cfg["receivers"]}
    fm = receivers["fleetmind"]["webhook_configs"][0]
    fm["http_config"]["authorization"]["credentials_file"] = str(tmp_path / "token")
    fm["url"] = hook + "/fleetmind"
    receivers["oncall"]["webhook_configs"] = [{"url": hook + "/oncall", "send_resolved": True}]
    # warning root causes go to the channel receiver (the root-cause route's severity sub-route)
    receivers["team-chat"]["webhook_configs"] = [{"url": hook + "/chat", "send_resolved": True}]
    (fleetmind_route,) = [r for r in cfg["route"]["routes"] if r["receiver"] == "fleetmind"]
    fleetmind_route.update(group_wait="1s", group_interval="1s")
    path = tmp_path / f"am-{len(list(tmp_path.glob('am-*.yml')))}.yml"
    path.write_text(yaml.safe_dump(cfg))
    return path


class Hook(Receiver):
    """The local webhook receivers (``/fleetmind``, ``/oncall``, ``/chat`` on one server)."""

    def seen(self, path: str, status: str, **labels: str) -> bool:
        """Whether an alert with ``status`` and (at least) ``labels`` was posted to ``path``."""
        return any(
            a["status"] == status and all(a["labels"].get(k) == v for k, v in labels.items())
            for body in self.at(path)
            for a in body["alerts"]
        )


@pytest.fixture
def alertmanager(tmp_path: Path) -> Iterator[Any]:
    ports = _ports()
    with contextlib.ExitStack() as stack:
        hook = stack.enter_context(Hook(next(ports)))
        started = 0

        def start(rules: list[dict[str, Any]] | None) -> tuple[str, Hook]:
            """Alertmanager on deploy/alertmanager.yml with ``rules``; its URL and the webhooks."""
            nonlocal started
            path = _config(tmp_path, rules, hook.url)
            storage = tmp_path / f"data{started}"
            started += 1
            am = running_alertmanager(path, storage, port=next(ports))
            return stack.enter_context(am), hook

        yield start


def _post(url: str, labels: list[dict[str, str]], resolved: bool = False) -> None:
    body: list[dict[str, Any]] = [{"labels": x} for x in labels]
    if resolved:
        ended = (datetime.now(UTC) - timedelta(seconds=1)).isoformat()
        for a in body:
            a["endsAt"] = ended
    r = httpx.post(url + "/api/v2/alerts", json=body, timeout=5)
    assert r.status_code == 200, r.text


def _inhibited(url: str) -> dict[tuple[str, str], bool]:
    """``(alertname, incident or namespace/severity) -> inhibited?`` of the alerts held."""
    out = {}
    for a in httpx.get(url + "/api/v2/alerts", timeout=5).json():
        lab = a["labels"]
        key = lab.get("incident") or f"{lab.get('namespace')}/{lab['severity']}"
        out[(lab["alertname"], key)] = bool(a["status"]["inhibitedBy"])
    return out


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


def _storm(url: str, hook: Hook) -> dict[tuple[str, str], bool]:
    """A critical root cause of incident 1 (prod-eu), then a warning one of incident 7 (prod-us),
    a critical and a warning KubePodCrashLooping in ``ml``; the inhibition states once on-call got
    incident 1's page and FleetMind the critical crash (Alertmanager's inhibitor reads alerts in
    the order they came, so the sources are in before any notification)."""
    _post(url, [root_cause("1", "prod-eu", "critical")])
    _post(
        url,
        [
            root_cause("7", "prod-us", "warning"),
            {**CRASH, "pod": "ranker-a", "severity": "critical"},
            {**CRASH, "pod": "ranker-a", "severity": "warning"},
        ],
    )
    assert wait_for(lambda: hook.seen("/oncall", "firing", incident="1"), 30)
    assert wait_for(lambda: hook.seen("/fleetmind", "firing", **CRASH, severity="critical"), 30)
    return _inhibited(url)


@pytest.mark.external
def test_snippet_leaves_other_incidents_root_causes_alone(alertmanager: Any) -> None:
    url, hook = alertmanager(_snippet_rules())
    states = _storm(url, hook)
    # (a) the warning root cause of another incident still notifies (the channel receiver),
    # while incident 1's is critical
    assert states[("FleetMindRootCause", "7")] is False
    assert wait_for(lambda: hook.seen("/chat", "firing", incident="7"), 30)
    assert states[("FleetMindRootCause", "1")] is False
    # (b) ordinary warnings: inhibited by their critical, as upstream intends, FleetMind's copy too
    assert states[("KubePodCrashLooping", "ml/warning")] is True
    assert states[("KubePodCrashLooping", "ml/critical")] is False
    assert not hook.seen("/fleetmind", "firing", **CRASH, severity="warning")
    assert not hook.seen("/oncall", "firing", **CRASH, severity="warning")


@pytest.mark.external
def test_upstream_rules_alone_inhibit_every_warning_root_cause(alertmanager: Any) -> None:
    """Why the snippet differs from the chart: its rules as they are."""
    url, hook = alertmanager(UPSTREAM_RULES)
    states = _storm(url, hook)
    assert states[("FleetMindRootCause", "7")] is True
    assert states[("KubePodCrashLooping", "ml/warning")] is True


@pytest.mark.external
def test_shipped_config_alone_gives_fleetmind_every_warning_and_its_resolution(
    alertmanager: Any,
) -> None:
    """deploy/alertmanager.yml on its own: a critical disk alert of one host does not hide the
    warning of another host from FleetMind, nor that warning's resolution."""
    assert "inhibit_rules" not in yaml.safe_load(SHIPPED.read_text())
    url, hook = alertmanager(None)
    warn = {**DISK, "instance": "gpu-a100-1:9100", "severity": "warning"}
    crit = {**DISK, "instance": "gpu-a100-0:9100", "severity": "critical"}
    _post(url, [crit])
    assert wait_for(lambda: hook.seen("/fleetmind", "firing", **crit), 30)
    _post(url, [warn])
    assert wait_for(lambda: hook.seen("/fleetmind", "firing", **warn), 30)
    _post(url, [warn], resolved=True)
    assert wait_for(lambda: hook.seen("/fleetmind", "resolved", **warn), 30)


def test_shipped_config_has_no_inhibit_rules() -> None:
    cfg = yaml.safe_load(SHIPPED.read_text())
    assert "inhibit_rules" not in cfg
    rules = _snippet_rules()
    # the chart's four rules, the FleetMindRootCause exclusion added to the two severity rules only
    assert len(rules) == len(UPSTREAM_RULES)
    for ours, theirs in zip(rules, UPSTREAM_RULES, strict=True):
        extra = [m for m in ours["target_matchers"] if m not in theirs["target_matchers"]]
        assert extra == (
            ["alertname != FleetMindRootCause"]
            if "severity" in str(theirs.get("source_matchers"))
            else []
        )
        assert {k: v for k, v in ours.items() if k != "target_matchers"} == {
            k: v for k, v in theirs.items() if k != "target_matchers"
        }


@pytest.mark.parametrize("with_snippet", [False, True], ids=["shipped", "with_snippet"])
def test_amtool_checks_both_files(tmp_path: Path, with_snippet: bool) -> None:
    amtool = shutil.which("amtool")
    if amtool is None:
        pytest.skip("amtool not installed (Debian package prometheus-alertmanager)")
    path = SHIPPED
    if with_snippet:  # the snippet as part of a full configuration, as a user merges it
        path = tmp_path / "alertmanager.yml"
        path.write_text(SHIPPED.read_text() + "\n" + SNIPPET.read_text())
    out = subprocess.run([amtool, "check-config", str(path)], capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr
    if with_snippet:
        assert " - 4 inhibit rules" in out.stdout, out.stdout
    else:
        assert " - 0 inhibit rules" in out.stdout, out.stdout
