"""What PagerDuty, Opsgenie and Slack get from ``deploy/alertmanager.yml`` when FleetMind's root
cause changes, in a real Alertmanager (0.25).

FleetMind resolves the old ``FleetMindRootCause`` alert and fires the new one when an incident's
root cause or its severity changes (``serving/notify.py``). Alertmanager sends one notification per
group, and its PagerDuty ``dedup_key`` and Opsgenie ``alias`` are the group key's hash
(prometheus/alertmanager ``notify/pagerduty/pagerduty.go``, ``notifyV2``: ``DedupKey:
key.Hash()``; ``notify/opsgenie/opsgenie.go``: ``alias := key.Hash()``). Grouped by incident only,
the new cause's trigger reused the withdrawn cause's ``dedup_key`` (landing in its open PagerDuty
incident, titled with the old cause), and a warning went to the paging receiver. The shipped route
groups by ``cause_node`` and ``severity`` too and sends a warning to the channel receiver.

The receivers are the shipped file's commented PagerDuty, Opsgenie and Slack examples, uncommented
and pointed at a local recorder that answers as the Events API v2 and Opsgenie's Alert API do (202,
https://developer.pagerduty.com/docs/events-api-v2/trigger-events/,
https://docs.opsgenie.com/docs/alert-api; Alertmanager 0.25's Slack notifier takes any 2xx,
``notify/slack/slack.go``). The alerts are built by FleetMind's notifier code. Alertmanager's
defaults, which the examples replace for ``FleetMindRootCause`` only, are upstream
``template/default.tmpl`` (``slack.default.text`` empty, ``slack.default.titlelink`` and
``pagerduty.default.clientURL`` Alertmanager's own URL); Opsgenie makes an alert without
``priority`` P3 (its Alert API, Create Alert).

Needs the Debian package ``prometheus-alertmanager`` (skipped without it).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from alertmanager_helpers import Receiver, running_alertmanager
from serving_helpers import wait_for

from fleetmind.data.paths import REPO_ROOT
from fleetmind.serving import notify

SHIPPED = REPO_ROOT / "deploy" / "alertmanager.yml"
PUBLIC_URL = "https://fleetmind.example.org"
DEFAULT_TMPL = Path("/usr/share/prometheus/alertmanager/default.tmpl")
"""Alertmanager's default templates as Debian's package installs them (upstream
``template/default.tmpl``; the binary embeds the same)."""


def _accepted(path: str) -> bytes:
    """The body PagerDuty's Events API v2 and Opsgenie's Alert API answer an accepted event
    with (HTTP 202)."""
    if path == "/pd":
        return b'{"status":"success","message":"Event processed"}'
    return b'{"result":"Request will be processed","took":0.1,"requestId":"r"}'


class Recorder(Receiver):
    """PagerDuty (``/pd``), Opsgenie (``/og/...``) and webhooks on one local server: every post
    recorded, each answered 202 as the two APIs answer an accepted event."""

    def __init__(self) -> None:
        super().__init__(status=202, reply=_accepted)

    def pagerduty(self) -> list[dict[str, Any]]:
        """The PagerDuty events, in the order they came."""
        return self.at("/pd")


def example_receiver(name: str = "oncall") -> dict[str, Any]:
    """The shipped file's commented example of receiver ``name`` (the paging ``oncall``, the
    channel ``team-chat``), uncommented."""
    text = SHIPPED.read_text().split(f"  - name: {name}\n", 1)[1].split("\n  - name: ", 1)[0]
    block = [ln[6:] for ln in text.splitlines() if ln.startswith("    # ")]
    return yaml.safe_load("\n".join(block))


def slack_example() -> dict[str, Any]:
    """The channel receiver's example Slack integration."""
    (slack,) = example_receiver("team-chat")["slack_configs"]
    return slack


def _config(tmp_path: Path, hook: str) -> Path:
    """deploy/alertmanager.yml with the example PagerDuty and Opsgenie integrations on ``oncall``
    and the example Slack integration (``/slack``) and a webhook (``/chat``) on the channel
    receiver, all posting to ``hook``; the root-cause route's
    group_interval 1 s instead of 1 min and the root's group_wait (the catch-all's) 1 s instead of
    30 s (same semantics, a faster test)."""
    cfg = yaml.safe_load(SHIPPED.read_text())
    receivers = {r["name"]: r for r in cfg["receivers"]}
    (tmp_path / "key").write_text("k")
    paging = example_receiver()
    (pd,) = paging["pagerduty_configs"]
    pd.update(routing_key_file=str(tmp_path / "key"), url=hook + "/pd")
    (og,) = paging["opsgenie_configs"]
    og.update(api_key_file=str(tmp_path / "key"), api_url=hook + "/og/")
    receivers["oncall"].update(paging)
    slack = {k: v for k, v in slack_example().items() if k != "api_url_file"}
    receivers["team-chat"].update(
        webhook_configs=[{"url": hook + "/chat"}],
        slack_configs=[{**slack, "api_url": hook + "/slack"}],
    )
    fm = receivers["fleetmind"]["webhook_configs"][0]
    fm["http_config"]["authorization"]["credentials_file"] = str(tmp_path / "key")
    fm["url"] = hook + "/fleetmind"
    for route in cfg["route"]["routes"]:
        if 'alertname="FleetMindRootCause"' in (route.get("matchers") or []):
            route["group_interval"] = "1s"
    cfg["route"]["group_wait"] = "1s"  # what the catch-all inherits: a faster first notification
    path = tmp_path / "alertmanager.yml"
    path.write_text(yaml.safe_dump(cfg))
    return path


@pytest.fixture
def alertmanager(tmp_path: Path) -> Iterator[tuple[str, Recorder]]:
    """A real Alertmanager on the shipped file (see :func:`_config`); its URL and the recorder."""
    with Recorder() as rec:
        config = _config(tmp_path, rec.url)
        with running_alertmanager(config, tmp_path / "data", log=tmp_path / "am.log") as url:
            yield url, rec


def root_cause(incident: int, node: str, fault: str, severity: str) -> dict[str, Any]:
    """A firing ``notifications`` row of ``serving/notify.py`` (labels and annotations as the
    notifier builds them) for cause ``node`` of ``incident`` in cluster c0."""
    kind = node.split("/")[1]
    inc = {"id": incident, "firing_count": 9, "clusters": ["c0"], "method": "gat"}
    top = {"node": node, "kind": kind, "fault_type": fault, "path": [node], "score": 0.91}
    me = types.SimpleNamespace(settings=types.SimpleNamespace(public_url=PUBLIC_URL))
    labels = {
        "alertname": notify.ALERTNAME,
        notify.INSTALLATION_LABEL: notify.installation(PUBLIC_URL),
        "incident": str(incident),
        "cause_node": node,
        "cause_kind": kind,
        "cluster": "c0",
        "severity": severity,
    }
    return {
        "state": "firing",
        "labels": labels,
        "annotations": notify.Notifier._annotations(me, inc, top, "c0"),
        "starts_at": notify._iso(time.time() - 60),
        "ends_at": None,
    }


def _post(url: str, *rows: dict[str, Any]) -> None:
    body = [notify.Notifier.alertmanager_alert(r) for r in rows]
    r = httpx.post(url + "/api/v2/alerts", json=body, timeout=5)
    assert r.status_code == 200, r.text


def _resolved(row: dict[str, Any], because: str) -> dict[str, Any]:
    """``row`` withdrawn as the notifier withdraws it (``endsAt`` now)."""
    annotations = {**row["annotations"], "resolved_because": because}
    return {
        **row,
        "state": "resolved",
        "ends_at": notify._iso(time.time()),
        "annotations": annotations,
    }


def _event(rec: Recorder, action: str, summary: str) -> dict[str, Any] | None:
    return next(
        (
            e
            for e in rec.pagerduty()
            if e["event_action"] == action and e["payload"]["summary"] == summary
        ),
        None,
    )


@pytest.mark.external
def test_a_changed_cause_opens_its_own_incident_and_closes_the_old(
    alertmanager: tuple[str, Recorder],
) -> None:
    url, rec = alertmanager
    old = root_cause(77, "c0/host/c0-h3", "host_not_ready", "critical")
    new = root_cause(77, "c0/gpu/c0-h1-g2", "gpu_xid_error", "critical")
    said_old, said_new = old["annotations"]["summary"], new["annotations"]["summary"]
    _post(url, old)
    first = wait_for(lambda: _event(rec, "trigger", said_old), timeout=20)
    assert first, rec.pagerduty()
    seen = len(rec.pagerduty())
    _post(url, _resolved(old, notify.SUPERSEDED), new)

    def next_trigger() -> dict[str, Any] | None:
        return next((e for e in rec.pagerduty()[seen:] if e["event_action"] == "trigger"), None)

    second = wait_for(next_trigger, timeout=20)
    assert second, rec.pagerduty()
    # the new cause is its own PagerDuty incident, named after it, paged as critical
    assert second["dedup_key"] != first["dedup_key"]
    assert second["payload"]["summary"] == said_new
    assert said_new == "Root cause of incident 77: c0/gpu/c0-h1-g2 (gpu_xid_error)"
    assert first["payload"]["severity"] == second["payload"]["severity"] == "critical"
    # ... with a link to FleetMind's incident page (the example's links)
    page = {"href": f"{PUBLIC_URL}/ui/incidents/77", "text": "FleetMind incident 77"}
    assert first["links"] == second["links"] == [page]
    # ... and the withdrawn cause's incident is resolved, the new one left open
    assert wait_for(
        lambda: any(
            e["event_action"] == "resolve" and e["dedup_key"] == first["dedup_key"]
            for e in rec.pagerduty()
        ),
        timeout=20,
    ), rec.pagerduty()
    assert not any(
        e["event_action"] == "resolve" and e["dedup_key"] == second["dedup_key"]
        for e in rec.pagerduty()
    )
    # Opsgenie: two alerts (two aliases) with the causes in words; the old one closed
    created = rec.at("/og/v2/alerts")
    assert {b["message"] for b in created} == {said_old, said_new}
    assert [b["priority"] for b in created] == ["P1", "P1"]  # critical: not Opsgenie's P3
    assert len({b["alias"] for b in created}) == 2
    (old_alias,) = [b["alias"] for b in created if b["message"] == said_old]
    assert wait_for(lambda: rec.under(f"/og/v2/alerts/{old_alias}/close"), timeout=20)


@pytest.mark.external
def test_a_warning_pages_no_one_and_its_escalation_pages(
    alertmanager: tuple[str, Recorder],
) -> None:
    """A warning root cause goes to the channel receiver only; the same cause turned critical
    (FleetMind resolves the warning, fires the critical one) pages, a PagerDuty incident of its
    own."""
    url, rec = alertmanager
    warn = root_cause(1042, "c0/pod/payments-7d9f8b6c5-x2k4q", "pod_oom_killed", "warning")
    crit = {**warn, "labels": {**warn["labels"], "severity": "critical"}}
    _post(url, warn)
    chat = wait_for(lambda: rec.at("/chat"), timeout=20)
    assert chat, rec.got
    assert [a["labels"]["severity"] for b in chat for a in b["alerts"]] == ["warning"]
    time.sleep(2)  # two group_intervals of the root-cause route: nothing more is on its way
    assert rec.pagerduty() == [] and rec.under("/og") == []
    _post(url, _resolved(warn, notify.RESEVERED), crit)
    paged = wait_for(lambda: _event(rec, "trigger", crit["annotations"]["summary"]), timeout=20)
    assert paged and paged["payload"]["severity"] == "critical", rec.pagerduty()
    assert all(e["dedup_key"] == paged["dedup_key"] for e in rec.pagerduty())
    assert wait_for(lambda: any(b["status"] == "resolved" for b in rec.at("/chat")), 20)
    # the channel is told the cause now pages, not that it was withdrawn
    (ended,) = wait_for(lambda: _slack(rec, "[RESOLVED] FleetMindRootCause"), timeout=20)
    said = warn["annotations"]["summary"]
    assert (
        ended["text"]
        == ended["fallback"]
        == (f"{said}; escalated: now critical, paged on-call (the incident is open)")
    )


# kube-prometheus-stack's KubePodCrashLooping as Prometheus sends it: the rule's labels and
# annotations (kubernetes-mixin, alerts/apps_alerts.libsonnet; the chart's
# templates/prometheus/rules-1.14/kubernetes-apps.yaml) and kube-state-metrics' target labels.
CRASH_LOOPING = {
    "labels": {
        "alertname": "KubePodCrashLooping",
        "cluster": "c0",
        "container": "trainer",
        "job": "kube-state-metrics",
        "namespace": "ml",
        "pod": "trainer-0",
        "reason": "CrashLoopBackOff",
        "severity": "warning",
    },
    "annotations": {
        "description": 'Pod ml/trainer-0 (trainer) is in waiting state (reason: "CrashLoopBackOff").',
        "runbook_url": "https://runbooks.prometheus-operator.dev/runbooks/kubernetes/kubepodcrashlooping",
        "summary": "Pod is crash looping.",
    },
}


@pytest.mark.external
def test_an_ordinary_alert_keeps_alertmanagers_defaults(
    alertmanager: tuple[str, Recorder],
) -> None:
    """Another alert through the catch-all to the paging receiver, with a ``summary`` and a
    ``severity`` of its own, as every kube-prometheus-stack alert has: the examples' templates
    leave it Alertmanager's default title (``__subject`` of template/default.tmpl: the group
    labels, then the other common labels) and PagerDuty severity (``error``,
    config/notifiers.go ``DefaultPagerdutyConfig``), so its urgency is what it was without them."""
    url, rec = alertmanager
    alert = {**CRASH_LOOPING, "startsAt": notify._iso(time.time() - 60)}
    r = httpx.post(url + "/api/v2/alerts", json=[alert], timeout=5)
    assert r.status_code == 200, r.text
    paged = wait_for(lambda: rec.pagerduty(), timeout=20)
    assert paged, rec.got
    title = "[FIRING:1] KubePodCrashLooping c0 (trainer kube-state-metrics ml trainer-0 CrashLoopBackOff warning)"
    (event,) = paged
    assert event["event_action"] == "trigger"
    assert event["payload"]["summary"] == title
    assert event["payload"]["severity"] == "error"
    # its link is Alertmanager's (as client_url); Opsgenie gets no priority (its default, P3)
    assert event["links"] == [{"href": event["client_url"], "text": event["client"]}]
    assert event["client_url"].endswith("/#/alerts?receiver=oncall")
    created = wait_for(lambda: rec.at("/og/v2/alerts"), 20)
    assert [b["message"] for b in created] == [title]
    assert "priority" not in created[0]


def _slack(rec: Recorder, title: str) -> list[dict[str, Any]]:
    """The Slack attachments posted so far whose title starts with ``title``."""
    posts = [a for b in rec.at("/slack") for a in b["attachments"]]
    return [a for a in posts if a["title"].startswith(title)]


@pytest.mark.external
def test_the_channel_names_the_cause_links_the_incident_and_says_why_it_ended(
    alertmanager: tuple[str, Recorder],
) -> None:
    """The Slack example on the channel receiver: a warning root cause's text is its summary and
    score, its title links FleetMind's incident page; when the cause changes, the withdrawn one's
    resolved message says it was withdrawn and the incident is still open, and the new cause gets
    its own message. ``fallback`` (what phones show) says the same. Alertmanager's defaults were
    an empty text, a link to Alertmanager's alert list and the labels title as fallback
    (``template/default.tmpl``: ``slack.default.text``, ``slack.default.fallback``)."""
    url, rec = alertmanager
    old = root_cause(20, "c0/pod/ml/train-7", "pod_crashloop", "warning")
    new = root_cause(20, "c0/gpu/c0-h1-g3", "gpu_xid_error", "warning")
    said_old, said_new = old["annotations"]["summary"], new["annotations"]["summary"]
    _post(url, old)
    firing = wait_for(lambda: _slack(rec, "[FIRING:1] FleetMindRootCause c0/pod/"), timeout=20)
    assert firing, rec.got
    (message,) = firing
    assert message["text"] == message["fallback"] == f"{said_old}, score 0.9100"
    assert message["title_link"] == f"{PUBLIC_URL}/ui/incidents/20"
    _post(url, _resolved(old, notify.SUPERSEDED), new)
    ended = wait_for(lambda: _slack(rec, "[RESOLVED] FleetMindRootCause c0/pod/"), timeout=20)
    assert ended, rec.got
    assert (
        ended[0]["text"]
        == ended[0]["fallback"]
        == (
            f"{said_old}; withdrawn: the root cause changed, the new one follows (the incident is open)"
        )
    )
    assert ended[0]["title_link"] == f"{PUBLIC_URL}/ui/incidents/20"
    (fresh,) = wait_for(lambda: _slack(rec, "[FIRING:1] FleetMindRootCause c0/gpu/"), timeout=20)
    assert fresh["text"] == fresh["fallback"] == f"{said_new}, score 0.9100"


def _render(tmp_path: Path, text: str, data: dict[str, Any]) -> str:
    """``text`` rendered by ``amtool template render`` with Alertmanager's default templates on
    ``data`` (the template data: a webhook body's fields)."""
    amtool = shutil.which("amtool")
    if amtool is None:
        pytest.skip("amtool not installed (Debian package prometheus-alertmanager)")
    path = tmp_path / "data.json"
    path.write_text(json.dumps(data))
    out = subprocess.run(
        [
            amtool,
            "template",
            "render",
            f"--template.glob={DEFAULT_TMPL}",
            f"--template.data={path}",
            f"--template.text={text}",
        ],
        capture_output=True,
        text=True,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    return out.stdout


def _data(alert: dict[str, Any], status: str = "firing") -> dict[str, Any]:
    """Template data of a one-alert group to ``team-chat`` (``template/template.go``, ``Data``)."""
    return {
        "receiver": "team-chat",
        "status": status,
        "alerts": [{**alert, "status": status}],
        "groupLabels": {"alertname": alert["labels"]["alertname"]},
        "commonLabels": alert["labels"],
        "commonAnnotations": alert["annotations"],
        "externalURL": "http://am.example.org:9093",
    }


def test_slack_example_escapes_the_cause_and_keeps_other_alerts_defaults(tmp_path: Path) -> None:
    """The Slack example's text escapes ``&``, ``<`` and ``>`` in a cause's id as Slack's mrkdwn
    wants (https://api.slack.com/reference/surfaces/formatting#escaping: a raw ``<b>`` would read
    as a link or mention); another alert keeps Alertmanager's defaults: an empty text and
    Alertmanager's URL as the title link."""
    slack = slack_example()
    row = _resolved(
        root_cause(12, "c0/service/<b>&pay", "service_down", "warning"), "incident closed"
    )
    said = row["annotations"]["summary"]
    assert "<b>&" in said
    escaped = said.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    ours = _data(notify.Notifier.alertmanager_alert(row), "resolved")
    for field in ("text", "fallback"):
        assert _render(tmp_path, slack[field], ours) == f"{escaped}; the incident is resolved"
    assert _render(tmp_path, slack["title_link"], ours) == f"{PUBLIC_URL}/ui/incidents/12"
    other = _data(CRASH_LOOPING)
    assert _render(tmp_path, slack["text"], other) == ""
    assert _render(tmp_path, slack["title_link"], other) == (
        "http://am.example.org:9093/#/alerts?receiver=team-chat"
    )
    # fallback's default (slack.default.fallback): the labels title and Alertmanager's link
    assert _render(tmp_path, slack["fallback"], other) == (
        "[FIRING:1] KubePodCrashLooping (c0 trainer kube-state-metrics ml trainer-0 "
        "CrashLoopBackOff warning) | http://am.example.org:9093/#/alerts?receiver=team-chat"
    )


OPEN = " (the incident is open)"
ENDED = {
    notify.CLOSED: "; the incident is resolved",
    notify.SUPERSEDED: "; withdrawn: the root cause changed, the new one follows" + OPEN,
    notify.UNSURE: "; withdrawn: the model is no longer sure, its score fell below the warning "
    "floor" + OPEN,
    notify.RESEVERED: "; escalated: now critical, paged on-call" + OPEN,
    notify.NO_CAUSE: "; withdrawn: the incident has no cause on the current graph" + OPEN,
    notify.CLEARED: "; cleared: its alerts resolved" + OPEN,
}
"""What the Slack example says after a resolved warning root cause's summary, per
``resolved_because`` (every reason of ``serving/notify.py``; the webhook's own wording,
``Notifier.webhook_body``, says the same)."""


@pytest.mark.parametrize("because", sorted(ENDED))
def test_slack_example_words_each_reason_a_cause_ended(tmp_path: Path, because: str) -> None:
    """Each ``resolved_because`` reads as what happened: a closed incident is resolved (not
    withdrawn), a changed severity is an escalation that now pages, a cause under the floor or
    without a graph node is withdrawn while the incident stays open; the resolved message leaves
    out the score it fired with (a withdrawn "score 0.9100" read as current). ``text`` and
    ``fallback`` (phones) say the same."""
    row = _resolved(root_cause(20, "c0/pod/ml/train-7", "pod_crashloop", "warning"), because)
    said = row["annotations"]["summary"]
    ours = _data(notify.Notifier.alertmanager_alert(row), "resolved")
    for field in ("text", "fallback"):
        assert _render(tmp_path, slack_example()[field], ours) == said + ENDED[because]


def test_slack_example_every_reason_is_worded() -> None:
    """Every ``resolved_because`` ``serving/notify.py`` sends has its words (a new reason would
    otherwise read "ended: <reason>")."""
    reasons = {notify.CLOSED, notify.SUPERSEDED, notify.UNSURE, notify.RESEVERED}
    assert set(ENDED) == reasons | {notify.NO_CAUSE, notify.CLEARED}
    text = slack_example()["text"]
    assert all(f'eq .resolved_because "{why}"' in text for why in ENDED)


def test_slack_example_a_critical_turned_warning_and_an_unworded_end(tmp_path: Path) -> None:
    """A critical cause sent again as a warning (the Slack example on a paging receiver) reads as
    such; a resolution without a known reason (Alertmanager's own timeout: none) says "ended"."""
    crit = root_cause(20, "c0/pod/ml/train-7", "pod_crashloop", "critical")
    said = crit["annotations"]["summary"]
    row = _resolved(crit, notify.RESEVERED)
    data = _data(notify.Notifier.alertmanager_alert(row), "resolved")
    text = slack_example()["text"]
    assert _render(tmp_path, text, data) == f"{said}; now a warning, sent to the channel" + OPEN
    bare = {**row, "annotations": crit["annotations"]}
    data = _data(notify.Notifier.alertmanager_alert(bare), "resolved")
    assert _render(tmp_path, text, data) == f"{said}; ended"


def test_shipped_examples_are_valid_configuration(tmp_path: Path) -> None:
    """The uncommented PagerDuty, Opsgenie and Slack examples pass ``amtool check-config``."""
    assert set(example_receiver()) == {"pagerduty_configs", "opsgenie_configs"}
    assert set(example_receiver("team-chat")) == {"slack_configs"}
    amtool = shutil.which("amtool")
    if amtool is None:
        pytest.skip("amtool not installed (Debian package prometheus-alertmanager)")
    out = subprocess.run(
        [amtool, "check-config", str(_config(tmp_path, "http://127.0.0.1:9"))],
        capture_output=True,
        text=True,
    )
    assert out.returncode == 0, out.stdout + out.stderr
