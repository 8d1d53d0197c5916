"""``FleetMindRootCause`` names the installation it comes from: label ``fleetmind``.

Incident ids start at 1 in every database, and a graph built without ``--cluster`` puts every
node in cluster ``default``, so two single-cluster FleetMinds posting to one Alertmanager sent the
same label set for their first incidents. Alertmanager identifies an alert by its label set (its
fingerprint is a hash of the labels: prometheus/alertmanager ``types.Alert``, ``model.LabelSet
.Fingerprint``), so it kept one alert for both, its ``incident_url`` pointing at one installation,
and one installation's resolution ended the other's alert until its next re-send. The ``fleetmind``
label (``FLEETMIND_PUBLIC_URL``'s ``host[:port]``) keeps them apart. Alerts already firing when an
installation upgrades keep the labels they were sent with, resolution included.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest
import yaml
from alertmanager_helpers import running_alertmanager
from fastapi.testclient import TestClient
from serving_helpers import NOTIFY_AM, notify_settings, wait_for, webhook
from ui_helpers import STORM_LABELS, storm_alerts

from fleetmind.serving.app import create_app
from fleetmind.serving.db import notifications
from fleetmind.serving.notify import INSTALLATION_LABEL, Notifier, installation

T0 = datetime.now(UTC) - timedelta(minutes=5)
ROOT = Path(__file__).resolve().parents[1]
A_URL, B_URL = "https://fleetmind-a.example.org", "http://fleetmind-b.example.org:8080"


class Clock:
    def __init__(self) -> None:
        self.t = 1_000_000.0

    def __call__(self) -> float:
        return self.t


class Posts:
    """An httpx transport that takes every post and keeps the alerts posted to Alertmanager."""

    def __init__(self) -> None:
        self.alerts: list[dict] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        if str(request.url) == NOTIFY_AM + "/api/v2/alerts":
            self.alerts += json.loads(request.content)
        return httpx.Response(200)


@contextlib.contextmanager
def _install(tmp_path: Path, public_url: str, **kw: object) -> Iterator[TestClient]:
    """One FleetMind (its own database) that has taken the storm and ranked it."""
    tmp_path.mkdir(exist_ok=True)
    s = notify_settings(tmp_path, public_url=public_url, notify_webhook_url=None, **kw)
    with TestClient(create_app(s)) as c:
        c.post("/api/v1/alerts", json=webhook(storm_alerts(T0))).raise_for_status()
        c.app.state.services.incidents.process_pending()
        yield c


def _resolve_storm(c: TestClient) -> None:
    """The storm's alerts resolve (not the lone alert: its incident stays open)."""
    done = datetime.now(UTC).isoformat()
    storm = storm_alerts(T0)[: len(STORM_LABELS)]
    resolved = [{**a, "status": "resolved", "endsAt": done} for a in storm]
    c.post("/api/v1/alerts", json=webhook(resolved)).raise_for_status()
    c.app.state.services.incidents.process_pending()


def _notifier(c: TestClient, transport: object = None, clock: object = None) -> Notifier:
    kw = {} if clock is None else {"clock": clock}
    t = None if transport is None else httpx.MockTransport(transport)  # type: ignore[arg-type]
    return Notifier(c.app.state.services.db, c.app.state.services.settings, transport=t, **kw)


def test_the_label_is_the_public_urls_authority() -> None:
    assert installation("https://fleetmind.example.org") == "fleetmind.example.org"
    assert installation("https://FleetMind.Example.org:443/") == "fleetmind.example.org"
    assert installation("http://fleetmind.example.org:8080") == "fleetmind.example.org:8080"
    assert installation("https://fleetmind.example.org:80") == "fleetmind.example.org:80"
    assert installation("http://127.0.0.1:8000") == "127.0.0.1:8000"
    assert installation("http://[::1]:8000") == "[::1]:8000"


def test_two_installations_send_two_label_sets(tmp_path: Path) -> None:
    got = {}
    for name, url in (("a", A_URL), ("b", B_URL)):
        with _install(tmp_path / name, url) as c:
            posts, clock = Posts(), Clock()
            n = _notifier(c, posts, clock)
            n.poll()
            clock.t += 31
            assert n.poll() == 2
            got[name] = {a["labels"]["incident"]: a["labels"] for a in posts.alerts}
    assert set(got["a"]) == set(got["b"]) == {"1", "2"}  # ids start at 1 in both databases
    for inc in ("1", "2"):
        a, b = got["a"][inc], got["b"][inc]
        assert a[INSTALLATION_LABEL] == "fleetmind-a.example.org"
        assert b[INSTALLATION_LABEL] == "fleetmind-b.example.org:8080"
        assert {k: v for k, v in a.items() if k != INSTALLATION_LABEL} == {
            k: v for k, v in b.items() if k != INSTALLATION_LABEL
        }  # all else equal: only the installation label tells them apart


def test_an_alert_firing_before_the_upgrade_keeps_its_labels_to_its_resolution(
    tmp_path: Path,
) -> None:
    """A firing row stored by an earlier release (no ``fleetmind`` label) is re-sent with the
    labels Alertmanager has (a changed label set would be a second alert while the first waited
    out its ``endsAt``), and its resolution ends that very alert."""
    with _install(tmp_path, A_URL) as c:
        posts, clock = Posts(), Clock()
        n = _notifier(c, posts, clock)
        n.poll()
        clock.t += 31
        assert n.poll() == 2
        db = c.app.state.services.db
        with db.write() as conn:
            rows = conn.execute(notifications.select()).mappings().all()
            for row in rows:
                old = {k: v for k, v in row["labels"].items() if k != INSTALLATION_LABEL}
                conn.execute(
                    notifications.update()
                    .where(notifications.c.incident_id == row["incident_id"])
                    .values(labels=old)
                )
        posts.alerts.clear()
        n = _notifier(c, posts, clock)  # the upgraded release starts on the old rows
        clock.t += 61
        assert n.poll() == 2
        assert all(INSTALLATION_LABEL not in a["labels"] for a in posts.alerts)
        firing = {a["labels"]["incident"]: a["labels"] for a in posts.alerts}
        posts.alerts.clear()
        _resolve_storm(c)
        clock.t += 1
        assert n.poll() == 1
        [ended] = posts.alerts
        assert ended["endsAt"] and ended["labels"] == firing[ended["labels"]["incident"]]


def _am_active(am_url: str) -> list[dict]:
    r = httpx.get(
        am_url + "/api/v2/alerts",
        params={"filter": 'alertname="FleetMindRootCause"', "active": "true"},
    )
    r.raise_for_status()
    return [a for a in r.json() if a["status"]["state"] == "active"]


@pytest.mark.external
def test_a_shared_alertmanager_keeps_each_installations_alert(tmp_path: Path) -> None:
    """Two installations, the same incidents and causes, one real Alertmanager (0.25): four
    alerts, and resolving installation A's storm leaves B's alert of it firing."""
    cfg = 'route:\n  receiver: "null"\nreceivers:\n  - name: "null"\n'
    with _real_alertmanager(tmp_path, cfg) as am_url:
        kw = {"notify_alertmanager_url": am_url, "notify_settle_s": 0.0}
        with _install(tmp_path / "a", A_URL, **kw) as a, _install(tmp_path / "b", B_URL, **kw) as b:
            na, nb = _notifier(a), _notifier(b)
            assert na.poll() == 2 and nb.poll() == 2
            alerts = _am_active(am_url)
            assert len({x["fingerprint"] for x in alerts}) == 4
            by = {(x["labels"][INSTALLATION_LABEL], x["labels"]["incident"]): x for x in alerts}
            assert set(by) == {
                (who, inc)
                for who in ("fleetmind-a.example.org", "fleetmind-b.example.org:8080")
                for inc in ("1", "2")
            }
            for (who, inc), x in by.items():  # each links to its own installation
                url = A_URL if who.startswith("fleetmind-a") else B_URL
                assert x["annotations"]["incident_url"] == f"{url}/ui/incidents/{inc}"
            storm = next(i for i in a.get("/api/v1/incidents").json() if i["alert_count"] == 7)
            _resolve_storm(a)
            assert na.poll() == 1  # A's resolution of the storm's root cause
            left = {
                (x["labels"][INSTALLATION_LABEL], x["labels"]["incident"])
                for x in _am_active(am_url)
            }
            gone = ("fleetmind-a.example.org", str(storm["id"]))
            assert gone not in left and ("fleetmind-b.example.org:8080", str(storm["id"])) in left
            assert len(left) == 3


@contextlib.contextmanager
def _real_alertmanager(tmp_path: Path, config: str) -> Iterator[str]:
    """A real Alertmanager on ``config`` (YAML text), no cluster peers; yields its URL once
    ready, stops it after. Skips when absent."""
    cfg = tmp_path / "am.yml"
    cfg.write_text(config)
    with running_alertmanager(cfg, tmp_path / "am-data") as url:
        yield url


def _root_cause_routes(route: dict) -> list[dict]:
    """Every route (depth first) whose matchers pick ``FleetMindRootCause``."""
    mine = [route] if 'alertname="FleetMindRootCause"' in (route.get("matchers") or []) else []
    return mine + [r for child in route.get("routes") or [] for r in _root_cause_routes(child)]


def test_the_shipped_root_cause_routes_group_by_installation() -> None:
    """Alertmanager sends one notification per group, and its PagerDuty notifier's ``dedup_key``
    is the group key's hash (prometheus/alertmanager ``notify/pagerduty/pagerduty.go``): grouped
    by ``alertname`` and ``incident`` only, two installations' incident 1 were one page."""
    shipped = yaml.safe_load((ROOT / "deploy" / "alertmanager.yml").read_text())
    docs = (ROOT / "docs" / "operators.md").read_text()
    example = docs.split("**Alertmanager routes.**", 1)[1].split("```yaml\n", 1)[1]
    documented = yaml.safe_load(example.split("```", 1)[0])
    for cfg in (shipped, documented):
        [route] = _root_cause_routes(cfg["route"])
        assert route["group_by"][:3] == ["alertname", INSTALLATION_LABEL, "incident"]
        # a changed cause or severity is another group: tests/test_alertmanager_receivers.py
        assert route["group_by"][3:] == ["cause_node", "severity"]


@pytest.mark.external
def test_the_shipped_route_pages_each_installations_incident_apart(tmp_path: Path) -> None:
    """The shipped ``deploy/alertmanager.yml`` in a real Alertmanager (0.25): incident 1 of two
    installations makes two groups of the on-call receiver, i.e. two notifications."""
    token = tmp_path / "fleetmind-token"
    token.write_text("t\n")
    shipped = (ROOT / "deploy" / "alertmanager.yml").read_text()
    config = shipped.replace("/etc/alertmanager/fleetmind-token", str(token))
    with _real_alertmanager(tmp_path, config) as am_url:
        now = datetime.now(UTC).isoformat()
        common = {"alertname": "FleetMindRootCause", "incident": "1", "cluster": "default"}
        posted = [
            {"labels": {**common, INSTALLATION_LABEL: who, "cause_node": node}, "startsAt": now}
            for who, node in (("fleetmind-a.example.org", "default/host/n1"),
                              ("fleetmind-b.example.org:8080", "default/host/n7"))
        ]  # fmt: skip
        httpx.post(am_url + "/api/v2/alerts", json=posted).raise_for_status()

        def oncall_groups() -> list[list[str]]:
            r = httpx.get(am_url + "/api/v2/alerts/groups")
            r.raise_for_status()
            groups = [g for g in r.json() if g["receiver"]["name"] == "oncall"]
            got = [sorted(a["labels"][INSTALLATION_LABEL] for a in g["alerts"]) for g in groups]
            return got if sum(map(len, got)) == 2 else []

        groups = wait_for(oncall_groups, timeout=10)
        assert sorted(groups) == [["fleetmind-a.example.org"], ["fleetmind-b.example.org:8080"]]
