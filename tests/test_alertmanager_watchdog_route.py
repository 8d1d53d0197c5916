"""kube-prometheus-stack's always-firing ``Watchdog`` and its ``InfoInhibitor`` through
``deploy/alertmanager.yml``: to FleetMind and to the ``'null'`` receiver, never to on-call.

The chart's ``alertmanager.config`` (prometheus-community/helm-charts
``charts/kube-prometheus-stack/values.yaml``) routes ``alertname = "Watchdog"`` to its ``'null'``
receiver in ``route.routes``. Helm merges user values over chart values map by map but replaces a
list as a whole (helm/helm ``pkg/chartutil/coalesce.go``), so deploy/alertmanager.yml given as
``alertmanager.config`` drops the chart's ``route.routes``: without a route of its own, Watchdog
(firing for as long as the alerting pipeline works) fell to the file's catch-all and paged on-call
(``amtool config routes test`` answered ``fleetmind,oncall``). InfoInhibitor did not: the chart's
default ``inhibit_rules``, which Helm keeps, inhibit it while any other alert fires (a rule with
only ``target_matchers``), and Watchdog always does; it reached on-call only with
``inhibit_rules: []`` or outside the chart. FleetMind's route continues, so FleetMind gets Watchdog
(and InfoInhibitor when not inhibited) and never groups them (FLEETMIND_UNGROUPED_ALERTS). The
file's ``'null'`` route sits below the place it keeps for the user's existing routes, so a
dead-man's-switch route for Watchdog put there still takes it.

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
from test_alertmanager_default_inhibit import UPSTREAM_RULES

# kube-prometheus-stack's alertmanager.config as its values.yaml ships it
# (prometheus-community/helm-charts charts/kube-prometheus-stack/values.yaml; the inhibit rules are
# also deploy/alertmanager-kube-prometheus-stack-inhibit.yml's, less its FleetMindRootCause target
# matchers). The file sets no inhibit_rules, so Helm keeps these.
CHART_CONFIG: dict[str, Any] = {
    "global": {"resolve_timeout": "5m"},
    "inhibit_rules": UPSTREAM_RULES,  # the chart's four, pinned in that test
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
    assert merged["inhibit_rules"] == CHART_CONFIG["inhibit_rules"]  # Helm keeps the chart's
    for labels in (WATCHDOG, INFO_INHIBITOR):
        assert route_walk(merged["route"], labels) == ["fleetmind", "null"]


def test_as_kube_prometheus_stack_values_with_amtool(tmp_path: Path) -> None:
    path = _as_chart_values(tmp_path)
    out = _amtool("check-config", str(path))
    assert out.returncode == 0, out.stdout + out.stderr
    for labels in (WATCHDOG, INFO_INHIBITOR):
        assert _amtool_routes(path, labels) == "fleetmind,null"


# A user's existing routes, as the file's route 3 says to keep them: a dead-man's switch for
# Watchdog (a ping URL; kube-prometheus' Watchdog rule, prometheus-operator/kube-prometheus
# jsonnet/kube-prometheus/components/mixin/alerts/general.libsonnet, asks for one: "integrations
# ... that send a notification when this alert is not firing") and a team's route.
USER_ROUTES = [
    {"receiver": "deadmansswitch", "matchers": ['alertname="Watchdog"'], "repeat_interval": "1m"},
    {"receiver": "db-team", "matchers": ['team="db"']},
]
USER_RECEIVERS = [
    {"name": "deadmansswitch", "webhook_configs": [{"url": "http://hc-ping.example/uuid"}]},
    {"name": "db-team"},
]
USER_CASES = [
    (WATCHDOG, "fleetmind,deadmansswitch"),
    (INFO_INHIBITOR, "fleetmind,null"),
    ({"alertname": "PostgresDown", "team": "db", "severity": "critical"}, "fleetmind,db-team"),
    ({"alertname": "KubeNodeNotReady", "cluster": "c0", "severity": "warning"}, "fleetmind,oncall"),
    ({"alertname": "FleetMindRootCause", "incident": "3", "severity": "critical"}, "oncall"),
]


def _placeholder_index() -> int:
    """Where deploy/alertmanager.yml keeps the user's existing routes: the index in
    ``route.routes`` that its "Your existing routes stay here" comment stands at (the number of
    ``route.routes`` items, 4-space ``- `` lines, above that comment)."""
    lines = SHIPPED.read_text().splitlines()
    (at,) = [i for i, line in enumerate(lines) if "Your existing routes stay here" in line]
    return sum(1 for line in lines[:at] if line.startswith("    - "))


def _with_user_routes(tmp_path: Path) -> Path:
    """deploy/alertmanager.yml with USER_ROUTES inserted where its comment says to keep them and
    USER_RECEIVERS added; written to ``tmp_path``."""
    cfg = yaml.safe_load(SHIPPED.read_text())
    at = _placeholder_index()
    cfg["route"]["routes"][at:at] = USER_ROUTES
    cfg["receivers"] += USER_RECEIVERS
    path = tmp_path / "with-user-routes.yml"
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    return path


def test_placeholder_is_above_the_null_route() -> None:
    routes = yaml.safe_load(SHIPPED.read_text())["route"]["routes"]
    at = _placeholder_index()
    assert [r["receiver"] for r in routes[at:]] == ["null", "oncall"]


@pytest.mark.parametrize(("labels", "receivers"), USER_CASES, ids=[c[1] for c in USER_CASES])
def test_user_routes_at_placeholder_win(
    tmp_path: Path, labels: dict[str, str], receivers: str
) -> None:
    """A dead-man's switch kept where the file says still gets Watchdog (not the 'null' route)."""
    cfg = yaml.safe_load(_with_user_routes(tmp_path).read_text())
    assert ",".join(route_walk(cfg["route"], labels)) == receivers


@pytest.mark.parametrize(("labels", "receivers"), USER_CASES, ids=[c[1] for c in USER_CASES])
def test_user_routes_at_placeholder_win_with_amtool(
    tmp_path: Path, labels: dict[str, str], receivers: str
) -> None:
    path = _with_user_routes(tmp_path)
    out = _amtool("check-config", str(path))
    assert out.returncode == 0, out.stdout + out.stderr
    assert _amtool_routes(path, labels) == receivers


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


def _alerts(url: str) -> dict[str, dict[str, Any]]:
    """Alertmanager's alerts by alertname (``GET /api/v2/alerts``: status, receivers)."""
    got = httpx.get(url + "/api/v2/alerts", timeout=5).json()
    return {a["labels"]["alertname"]: a for a in got}


def _state(url: str, alertname: str) -> str:
    """``active``, ``suppressed`` or ``unprocessed`` (Alertmanager's API), "" when not held."""
    return _alerts(url).get(alertname, {}).get("status", {}).get("state", "")


@pytest.mark.external
def test_chart_inhibits_info_inhibitor_while_watchdog_fires(tmp_path: Path) -> None:
    """A real Alertmanager on the file as the chart's alertmanager.config (the chart's inhibit
    rules kept, fast timings): while Watchdog fires, InfoInhibitor is suppressed and reaches no
    one, FleetMind included; Watchdog goes to FleetMind and 'null', never on-call."""
    with Receiver() as rec:
        fast = yaml.safe_load(
            shipped_config(tmp_path, rec.url, "t", rec.url + "/oncall").read_text()
        )
        config = tmp_path / "chart.yml"
        config.write_text(yaml.safe_dump(helm_merged(CHART_CONFIG, fast), sort_keys=False))
        with running_alertmanager(config, tmp_path / "data", log=tmp_path / "am.log") as url:
            post = httpx.post(url + "/api/v2/alerts", json=[{"labels": WATCHDOG}], timeout=5)
            assert post.status_code == 200
            fleetmind = "/api/v1/alerts"
            assert wait_for(lambda: WATCHDOG in _labels_at(rec, fleetmind), timeout=20), rec.got
            post = httpx.post(url + "/api/v2/alerts", json=[{"labels": INFO_INHIBITOR}], timeout=5)
            assert post.status_code == 200
            inhibited = wait_for(lambda: _state(url, "InfoInhibitor") == "suppressed", timeout=20)
            assert inhibited, _alerts(url)
            time.sleep(2.5)  # two group_intervals (1 s): a notification would be in by now
            alerts = _alerts(url)
    watchdog, info = alerts["Watchdog"], alerts["InfoInhibitor"]
    assert watchdog["status"]["state"] == "active"
    assert [r["name"] for r in watchdog["receivers"]] == ["fleetmind", "null"]
    assert info["status"]["inhibitedBy"] == [watchdog["fingerprint"]]
    assert _labels_at(rec, fleetmind) == [WATCHDOG]
    assert _labels_at(rec, "/oncall") == []
