"""kube-prometheus-stack's always-firing ``Watchdog`` and its ``InfoInhibitor`` through
``deploy/alertmanager.yml``: to FleetMind and to the ``'null'`` receiver, never to on-call.

The chart's ``alertmanager.config`` (prometheus-community/helm-charts
``charts/kube-prometheus-stack/values.yaml``) routes ``alertname = "Watchdog"`` to its ``'null'``
receiver in ``route.routes``. Helm merges user values over chart values map by map but replaces a
list as a whole (helm/helm ``pkg/chartutil/coalesce.go``), so deploy/alertmanager.yml given as
``alertmanager.config`` drops the chart's ``route.routes``: without a route of its own, Watchdog
(firing for as long as the alerting pipeline works) and InfoInhibitor fell to the file's catch-all
and paged on-call (``amtool config routes test`` answered ``fleetmind,oncall``). FleetMind's route
continues, so FleetMind still stores both (it never groups them: FLEETMIND_UNGROUPED_ALERTS).

Routing is checked three ways: a pure-Python walk of the routing tree (prometheus/alertmanager
``dispatch/route.go``, ``Route.Match``: a matching child with ``continue: false`` ends the walk, a
node whose children all miss takes the alert itself), always; the same cases with the real
``amtool config routes test`` when the Debian package ``prometheus-alertmanager`` is installed
(which also keeps the walk honest); and what a real Alertmanager posts to local receivers.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from alertmanager_helpers import SHIPPED, Receiver, running_alertmanager, shipped_config
from serving_helpers import wait_for

# kube-prometheus-stack values.yaml, alertmanager.config (its inhibit_rules left out: they route
# nothing, tests/test_alertmanager_default_inhibit.py covers them)
CHART_CONFIG: dict[str, Any] = {
    "global": {"resolve_timeout": "5m"},
    "route": {
        "group_by": ["namespace"],
        "group_wait": "30s",
        "group_interval": "5m",
        "repeat_interval": "12h",
        "receiver": "null",
        "routes": [{"receiver": "null", "matchers": ['alertname = "Watchdog"']}],
    },
    "receivers": [{"name": "null"}],
    "templates": ["/etc/alertmanager/config/*.tmpl"],
}
# kube-prometheus' rules (kubernetes-mixin / kube-prometheus general.rules): both severity none
WATCHDOG = {"alertname": "Watchdog", "severity": "none", "prometheus": "monitoring/kps"}
INFO_INHIBITOR = {"alertname": "InfoInhibitor", "severity": "none", "namespace": "ml"}
CASES = [
    (WATCHDOG, "fleetmind,null"),
    (INFO_INHIBITOR, "fleetmind,null"),
    # the regex is anchored: a name that merely starts with Watchdog still pages
    ({"alertname": "WatchdogStale", "severity": "critical"}, "fleetmind,oncall"),
    ({"alertname": "KubeNodeNotReady", "cluster": "c0", "severity": "warning"}, "fleetmind,oncall"),
    ({"alertname": "FleetMindRootCause", "incident": "3", "severity": "critical"}, "oncall"),
    ({"alertname": "FleetMindRootCause", "incident": "3", "severity": "warning"}, "team-chat"),
]
_MATCHER = re.compile(r'^\s*([A-Za-z_][A-Za-z0-9_]*)\s*(=~|!~|!=|=)\s*"?(.*?)"?\s*$')


def _matches(matcher: str, labels: dict[str, str]) -> bool:
    """Whether ``labels`` satisfy one matcher string (``name op "value"``; a missing label is "",
    regexes are anchored at both ends as Alertmanager anchors them)."""
    found = _MATCHER.match(matcher)
    assert found, f"matcher this walk does not parse: {matcher!r}"
    name, op, value = found.groups()
    got = labels.get(name, "")
    if op in ("=~", "!~"):
        hit = re.fullmatch(f"(?:{value})", got) is not None
        return hit if op == "=~" else not hit
    return (got == value) if op == "=" else (got != value)


def route_walk(route: dict[str, Any], labels: dict[str, str], parent: str = "") -> list[str]:
    """The receivers an alert with ``labels`` goes to, in order, as Alertmanager's
    ``Route.Match`` finds them (a child without a receiver inherits its parent's)."""
    if not all(_matches(m, labels) for m in route.get("matchers") or []):
        return []
    receiver = route.get("receiver") or parent
    found: list[str] = []
    for child in route.get("routes") or []:
        hit = route_walk(child, labels, receiver)
        found += hit
        if hit and not child.get("continue", False):
            break
    return found or [receiver]


def helm_merged(chart: dict[str, Any], values: dict[str, Any]) -> dict[str, Any]:
    """``values`` over ``chart`` as Helm coalesces them: maps merged key by key, lists and
    scalars replaced whole by the user's."""
    out = dict(chart)
    for key, value in values.items():
        both_maps = isinstance(value, dict) and isinstance(chart.get(key), dict)
        out[key] = helm_merged(chart[key], value) if both_maps else value
    return out


def _amtool(*args: str) -> subprocess.CompletedProcess[str]:
    amtool = shutil.which("amtool")
    if amtool is None:
        pytest.skip("amtool not installed (Debian package prometheus-alertmanager)")
    return subprocess.run([amtool, *args], capture_output=True, text=True)


def _amtool_routes(config: Path, labels: dict[str, str]) -> str:
    pairs = [f"{k}={v}" for k, v in labels.items()]
    out = _amtool("config", "routes", "test", f"--config.file={config}", *pairs)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


def _as_chart_values(tmp_path: Path) -> Path:
    """deploy/alertmanager.yml as kube-prometheus-stack's ``alertmanager.config``, merged over the
    chart's default as Helm merges it; written to ``tmp_path``."""
    merged = helm_merged(CHART_CONFIG, yaml.safe_load(SHIPPED.read_text()))
    path = tmp_path / "merged.yml"
    path.write_text(yaml.safe_dump(merged, sort_keys=False))
    return path


@pytest.mark.parametrize(("labels", "receivers"), CASES, ids=[c[0]["alertname"] for c in CASES])
def test_shipped_routes(labels: dict[str, str], receivers: str) -> None:
    assert ",".join(route_walk(yaml.safe_load(SHIPPED.read_text())["route"], labels)) == receivers


@pytest.mark.parametrize(("labels", "receivers"), CASES, ids=[c[0]["alertname"] for c in CASES])
def test_shipped_routes_with_amtool(labels: dict[str, str], receivers: str) -> None:
    assert _amtool_routes(SHIPPED, labels) == receivers


def test_null_receiver_has_no_integrations() -> None:
    (null,) = [r for r in yaml.safe_load(SHIPPED.read_text())["receivers"] if r["name"] == "null"]
    assert null == {"name": "null"}


def test_as_kube_prometheus_stack_values(tmp_path: Path) -> None:
    """The chart's own Watchdog route is gone after Helm's merge; the file's route does its job."""
    merged = yaml.safe_load(_as_chart_values(tmp_path).read_text())
    assert merged["route"]["routes"] == yaml.safe_load(SHIPPED.read_text())["route"]["routes"]
    assert [r["name"] for r in merged["receivers"]].count("null") == 1
    for labels in (WATCHDOG, INFO_INHIBITOR):
        assert route_walk(merged["route"], labels) == ["fleetmind", "null"]


def test_as_kube_prometheus_stack_values_with_amtool(tmp_path: Path) -> None:
    path = _as_chart_values(tmp_path)
    out = _amtool("check-config", str(path))
    assert out.returncode == 0, out.stdout + out.stderr
    for labels in (WATCHDOG, INFO_INHIBITOR):
        assert _amtool_routes(path, labels) == "fleetmind,null"


def _labels_at(rec: Receiver, path: str) -> list[dict[str, str]]:
    return [a["labels"] for body in rec.at(path) for a in body["alerts"]]


@pytest.mark.external
def test_watchdog_reaches_fleetmind_and_pages_no_one(tmp_path: Path) -> None:
    """A real Alertmanager on the shipped file (fast timings): Watchdog and an ordinary alert
    posted together; FleetMind gets both, on-call only the ordinary one."""
    host = {"alertname": "KubeNodeNotReady", "cluster": "c0", "severity": "warning"}
    with Receiver() as rec:
        config = shipped_config(tmp_path, rec.url, "t", oncall_url=rec.url + "/oncall")
        with running_alertmanager(config, tmp_path / "data", log=tmp_path / "am.log") as url:
            body = [{"labels": WATCHDOG}, {"labels": INFO_INHIBITOR}, {"labels": host}]
            assert httpx.post(url + "/api/v2/alerts", json=body, timeout=5).status_code == 200
            fleetmind = "/api/v1/alerts"
            assert wait_for(lambda: len(_labels_at(rec, fleetmind)) == 3, timeout=20), rec.got
            assert wait_for(lambda: host in _labels_at(rec, "/oncall"), timeout=20), rec.got
            time.sleep(2.5)  # two group_intervals (1 s): anything else for on-call is in by now
    assert _labels_at(rec, "/oncall") == [host]
