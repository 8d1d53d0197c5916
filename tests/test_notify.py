"""Root-cause notifications (serving.notify) against recorded HTTP: settling, resending,
resolving, retries with backoff, top-cause changes and restarts."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest
from fastapi.testclient import TestClient
from serving_helpers import NOTIFY_AM, NOTIFY_HOOK, alert, notify_settings, webhook
from ui_helpers import STORM_LABELS, TRUE_ROOT, storm_alerts

from fleetmind.data.graph import DependencyGraph
from fleetmind.serving.app import create_app
from fleetmind.serving.incidents.manager import explained_nodes
from fleetmind.serving.notify import ALERTNAME, Notifier

T0 = datetime.now(UTC) - timedelta(minutes=5)
AM, HOOK = NOTIFY_AM, NOTIFY_HOOK


class Clock:
    def __init__(self) -> None:
        self.t = 1_000_000.0

    def __call__(self) -> float:
        return self.t


class Recorder:
    """An httpx transport that records posts and answers from a script of status codes."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, object]] = []
        self.script: dict[str, list[int]] = {}

    def __call__(self, request: httpx.Request) -> httpx.Response:
        url = str(request.url)
        self.calls.append((url, json.loads(request.content)))
        codes = self.script.get(url)
        return httpx.Response(codes.pop(0) if codes else 200)

    def to(self, url: str) -> list[object]:
        return [body for u, body in self.calls if u == url]


settings = notify_settings


@pytest.fixture
def app(tmp_path: Path) -> Iterator[TestClient]:
    with TestClient(create_app(settings(tmp_path))) as c:
        c.post("/api/v1/alerts", json=webhook(storm_alerts(T0)))
        c.app.state.services.incidents.process_pending()
        yield c


def notifier(c: TestClient, rec: Recorder, clock: Clock, **kw: object) -> Notifier:
    s = c.app.state.services.settings.model_copy(update=kw)
    return Notifier(c.app.state.services.db, s, clock=clock, transport=httpx.MockTransport(rec))


def storm_incident(c: TestClient) -> dict:
    return next(i for i in c.get("/api/v1/incidents").json() if i["alert_count"] == 7)


def test_a_settled_root_cause_goes_to_alertmanager_and_the_webhook(app: TestClient) -> None:
    rec, clock = Recorder(), Clock()
    n = notifier(app, rec, clock)
    assert n.poll() == 0 and rec.calls == []  # just ranked: not settled yet
    clock.t += 29
    assert n.poll() == 0
    clock.t += 2
    assert n.poll() == 4  # two incidents, each to both channels
    inc = storm_incident(app)
    posted = [a for body in rec.to(AM + "/api/v2/alerts") for a in body]
    mine = next(a for a in posted if a["labels"]["incident"] == str(inc["id"]))
    top = inc["causes"][0]
    assert mine["labels"] == {
        "alertname": ALERTNAME,
        "fleetmind": "fleetmind.example.org",  # the installation (FLEETMIND_PUBLIC_URL's host)
        "incident": str(inc["id"]),
        "cause_node": TRUE_ROOT,
        "cause_kind": "host",
        "cluster": "c0",
        "severity": "warning",  # a baseline's score is no probability: never critical
    }
    url = f"https://fleetmind.example.org/ui/incidents/{inc['id']}"
    assert mine["annotations"]["incident_url"] == url == mine["generatorURL"]
    assert mine["annotations"]["path"] == " -> ".join(top["path"])
    assert float(mine["annotations"]["score"]) == pytest.approx(top["score"], abs=1e-4)
    assert "endsAt" not in mine
    hooks = rec.to(HOOK)
    msg = next(h for h in hooks if h["fleetmind"]["incident"] == inc["id"])
    assert TRUE_ROOT in msg["text"] and url in msg["text"]
    assert msg["fleetmind"]["status"] == "firing" and msg["fleetmind"]["path"] == top["path"]

    # nothing more until the resend interval; then only Alertmanager hears it again
    clock.t += 30
    assert n.poll() == 0
    clock.t += 31
    assert n.poll() == 2 and len(rec.to(HOOK)) == 2

    # the wall clock steps back an hour (a VM restored, NTP corrected): the re-sends go on, or
    # Alertmanager's resolve_timeout (5 min) would end the alerts while the clock catches up
    clock.t -= 3600
    assert n.poll() == 2 and len(rec.to(HOOK)) == 2
    clock.t += 61
    assert n.poll() == 2


def test_resolving_the_incident_resolves_the_alert_once(app: TestClient) -> None:
    rec, clock = Recorder(), Clock()
    n = notifier(app, rec, clock)
    n.poll()
    clock.t += 31
    n.poll()
    ended = datetime.now(UTC).isoformat()  # after startsAt, as Alertmanager sends it
    resolved = [
        alert(
            lab, starts=a["startsAt"], status="resolved", fingerprint=a["fingerprint"], endsAt=ended
        )
        for lab, a in zip(STORM_LABELS, storm_alerts(T0), strict=False)
    ]
    app.post("/api/v1/alerts", json=webhook(resolved))
    app.app.state.services.incidents.process_pending()
    [inc] = app.get("/api/v1/incidents?status=resolved").json()
    inc_id = inc["id"]
    rec.calls.clear()
    clock.t += 1
    assert n.poll() == 2
    [am] = rec.to(AM + "/api/v2/alerts")
    assert am[0]["labels"]["incident"] == str(inc_id) and am[0]["endsAt"]
    [hook] = rec.to(HOOK)
    assert hook["fleetmind"]["status"] == "resolved" and "Resolved" in hook["text"]
    assert hook["fleetmind"]["resolved_because"] == "incident closed"
    rec.calls.clear()
    clock.t += 600
    n.poll()
    assert all(a[0]["labels"]["incident"] != str(inc_id) for a in rec.to(AM + "/api/v2/alerts"))
    assert rec.to(HOOK) == []


def test_transient_failures_are_retried_in_later_polls_and_4xx_is_not(app: TestClient) -> None:
    """One attempt per receiver per poll, never a sleeping retry inside one (Prometheus' notifier
    likewise posts each batch once per Alertmanager and leaves the rest to the next evaluation,
    prometheus/notifier/notifier.go ``sendAll``): a 503 or 502 is tried again in a later poll;
    a 400 is a refusal of that message, tried again at the next re-send, not every poll."""
    rec, clock = Recorder(), Clock()
    n = notifier(app, rec, clock, notify_webhook_url=None)
    rec.script[AM + "/api/v2/alerts"] = [503, 502, 200, 400]
    n.poll()
    clock.t += 31
    assert n.poll() == 0  # the first incident: 503; the receiver failed, the second waits
    assert len(rec.to(AM + "/api/v2/alerts")) == 1
    clock.t += 1
    assert n.poll() == 0 and len(rec.to(AM + "/api/v2/alerts")) == 2  # 502
    clock.t += 1
    assert n.poll() == 1  # delivered; the second incident got a 400
    assert len(rec.to(AM + "/api/v2/alerts")) == 4
    clock.t += 5
    n.poll()
    assert len(rec.to(AM + "/api/v2/alerts")) == 4  # the refused one waits for the next re-send
    clock.t += 60
    assert n.poll() == 2


def test_a_restart_neither_repeats_nor_forgets(app: TestClient) -> None:
    rec, clock = Recorder(), Clock()
    n = notifier(app, rec, clock)
    n.poll()
    clock.t += 31
    n.poll()
    first = len(rec.calls)
    again = notifier(app, rec, clock)  # a new process: in-memory state gone, table kept
    clock.t += 10
    again.poll()
    clock.t += 31
    again.poll()
    assert len(rec.calls) == first  # settled again on the same cause: nothing new to say


def _ranked_first(c: TestClient, inc: dict, node: str) -> list[dict]:
    """``inc``'s stored causes with the one on ``node`` moved first, carrying the alert nodes it
    explains as the incident manager stores them (``manager.explained_nodes`` on the served
    graph)."""
    db = c.app.state.services.db
    with db.read() as conn:
        nodes = {str(a["node"]) for a in db.incident_alerts(conn, inc["id"]) if a["node"]}
    causes = [dict(x) for x in db.get_incident(inc["id"])["causes"]]
    (top,) = [x for x in causes if x["node"] == node]
    graph = c.app.state.services.incidents.graphs.graph
    top["explains"] = explained_nodes(graph, node, nodes)
    return [top] + [x for x in causes if x is not top]


def _change_top(app: TestClient, rec: Recorder, clock: Clock, node: str) -> tuple[dict, list]:
    """Settle the storm incident's cause, then rank ``node`` first and let it settle: the
    incident and the labels of the alerts posted first."""
    n = notifier(app, rec, clock)
    n.poll()
    clock.t += 31
    n.poll()
    inc = storm_incident(app)
    causes = _ranked_first(app, inc, node)
    app.app.state.services.db.set_incident_rca(inc["id"], causes, "test", None)
    first = [a["labels"] for body in rec.to(AM + "/api/v2/alerts") for a in body]
    rec.calls.clear()
    n.poll()
    assert rec.calls == []  # the new top has not settled yet
    clock.t += 31
    n.poll()
    return inc, first


def test_a_changed_top_cause_keeps_the_old_alert_while_its_alerts_fire(app: TestClient) -> None:
    """The top cause changes to one that does not explain the first (the shared DNS: the host
    does not depend on it) while the alerts on the first cause's own node still fire: its alert
    keeps firing (same labels) beside the new one, and the chat hears of a further cause, not of
    a withdrawal (``notify.KEPT``)."""
    rec, clock = Recorder(), Clock()
    inc, first = _change_top(app, rec, clock, "global/dns")
    posted = [a for body in rec.to(AM + "/api/v2/alerts") for a in body]
    old = [a for a in posted if a["labels"]["cause_node"] == TRUE_ROOT]
    new = [a for a in posted if a["labels"]["cause_node"] == "global/dns"]
    assert len(old) == 1 and "endsAt" not in old[0]
    assert old[0]["labels"] in first  # the same alert, its severity as it was
    assert len(new) == 1 and "endsAt" not in new[0]
    hooks = [h for h in rec.to(HOOK) if h["fleetmind"]["incident"] == inc["id"]]
    assert [h["fleetmind"]["status"] for h in hooks] == ["firing"]
    assert "A further root cause" in hooks[0]["text"] and "withdrawn" not in hooks[0]["text"]
    # the row now carries the kept cause beside its channels' outcomes: the incident page (linked
    # from every FleetMindRootCause alert) read that list as an outcome and answered 500
    page = app.get(f"/ui/incidents/{inc['id']}")
    assert page.status_code == 200, page.text[-2000:]
    assert "sent as " in page.text


def test_a_new_top_cause_the_old_one_depends_on_withdraws_it(app: TestClient) -> None:
    """The top cause changes to the cluster the host is a member of: the host's alerts still
    fire, but a fault of the cluster explains them, so the host's alert is withdrawn ("root
    cause changed", not "its alerts resolved") and the cluster's is the only one firing."""
    rec, clock = Recorder(), Clock()
    inc, _ = _change_top(app, rec, clock, "c0")
    posted = [a for body in rec.to(AM + "/api/v2/alerts") for a in body]
    mine = [a for a in posted if a["labels"]["incident"] == str(inc["id"])]
    ended = [
        (a["labels"]["cause_node"], a["annotations"].get("resolved_because"))
        for a in mine
        if a.get("endsAt")
    ]
    assert ended == [(TRUE_ROOT, "root cause changed")]
    assert {a["labels"]["cause_node"] for a in mine if not a.get("endsAt")} == {"c0"}
    hooks = [h["text"] for h in rec.to(HOOK) if h["fleetmind"]["incident"] == inc["id"]]
    assert any("withdrawn" in h for h in hooks)
    assert not any("A further root cause" in h for h in hooks)
    rec.calls.clear()  # the next re-send carries the cluster alone
    clock.t += app.app.state.services.settings.notify_resend_s + 1
    notifier(app, rec, clock).poll()
    again = [a for body in rec.to(AM + "/api/v2/alerts") for a in body]
    assert [
        a["labels"]["cause_node"] for a in again if a["labels"]["incident"] == str(inc["id"])
    ] == ["c0"]


def _rank_as_gat(c: TestClient, inc: dict, score: float) -> None:
    """Store ``inc``'s causes as the calibrated GAT's, its top cause scored ``score`` (with the
    fault type the GAT names for a host that went NotReady: the baseline names none)."""
    causes = [dict(x) for x in inc["causes"]]
    causes[0]["score"] = score
    causes[0]["fault_type"] = causes[0].get("fault_type") or "host_not_ready"
    c.app.state.services.db.set_incident_rca(inc["id"], causes, "gat", None)


def _alerts_of(rec: Recorder, inc: dict) -> list[dict]:
    posted = [a for body in rec.to(AM + "/api/v2/alerts") for a in body]
    return [a for a in posted if a["labels"]["incident"] == str(inc["id"])]


def test_severity_comes_from_the_calibrated_score(app: TestClient) -> None:
    inc = storm_incident(app)
    rec, clock = Recorder(), Clock()
    n = notifier(app, rec, clock, notify_critical_score=0.7, notify_warning_score=0.3)
    _rank_as_gat(app, inc, 0.93)
    n.poll()
    clock.t += 31
    n.poll()
    assert [a["labels"]["severity"] for a in _alerts_of(rec, inc)] == ["critical"]
    # the calibrated score drops to 0.5: the critical alert is resolved, a warning replaces it
    rec.calls.clear()
    _rank_as_gat(app, inc, 0.5)
    n.poll()
    clock.t += 31
    n.poll()
    sent = _alerts_of(rec, inc)
    assert [(a["labels"]["severity"], bool(a.get("endsAt"))) for a in sent] == [
        ("critical", True),
        ("warning", False),
    ]
    # below the warning floor: resolved, and nothing new pages anyone
    rec.calls.clear()
    _rank_as_gat(app, inc, 0.012)
    n.poll()
    clock.t += 31
    n.poll()
    sent = _alerts_of(rec, inc)
    assert [(a["labels"]["severity"], bool(a.get("endsAt"))) for a in sent] == [("warning", True)]


def test_a_gat_cause_below_the_warning_floor_is_never_sent(app: TestClient) -> None:
    inc = storm_incident(app)
    _rank_as_gat(app, inc, 0.2)
    rec, clock = Recorder(), Clock()
    n = notifier(app, rec, clock, notify_critical_score=0.7, notify_warning_score=0.3)
    n.poll()
    clock.t += 31
    n.poll()
    assert _alerts_of(rec, inc) == []


def test_alert_label_values_reach_chat_as_text_not_markup(tmp_path: Path) -> None:
    """Whoever can post alerts chooses their ``cluster`` labels, and a cause on a node with no
    cluster (the example graph's ``dns``) names the incident's clusters: in the chat message they
    are literal text. Slack's "Formatting text for app surfaces", *Escaping text*: ``&``, ``<``
    and ``>`` are control characters; ``<!channel>`` pings everyone, ``<url|label>`` is a link."""
    hostile = "<!channel> <https://evil.example/login|Click to acknowledge> `x` *pwn*\nPath: y"
    storm = [
        alert({"alertname": "DNSDown", "service": svc, "cluster": hostile}, T0.isoformat())
        for svc in ("dns", "registry", "config")
    ]
    rec, clock = Recorder(), Clock()
    with TestClient(create_app(settings(tmp_path))) as c:
        c.post("/api/v1/alerts", json=webhook(storm)).raise_for_status()
        c.app.state.services.incidents.process_pending()
        n = notifier(c, rec, clock)
        n.poll()
        clock.t += 31
        assert n.poll() == 2
    (msg,) = rec.to(HOOK)
    text = msg["text"]
    assert "<!channel>" not in text and "<https://evil.example" not in text
    assert "&lt;!channel&gt; &lt;https://evil.example/login|Click to acknowledge&gt;" in text
    assert text.count("\n") == 1 and text.count("`") == 6  # one code span each: node, cluster, path
    assert msg["fleetmind"]["cluster"].startswith("<!channel>")  # the raw value, as JSON data
    (am,) = [a for body in rec.to(AM + "/api/v2/alerts") for a in body]
    assert len(am["labels"]["cluster"]) <= 256


def test_an_incident_over_many_clusters_gets_a_bounded_cluster_label(tmp_path: Path) -> None:
    """Alert labels name the incident's clusters; the notification's ``cluster`` label stays short."""
    storm = [
        alert(
            {"alertname": "DNSDown", "service": "dns", "cluster": f"cluster-{i:04d}"},
            T0.isoformat(),
        )
        for i in range(200)
    ]
    rec, clock = Recorder(), Clock()
    with TestClient(create_app(settings(tmp_path))) as c:
        c.post("/api/v1/alerts", json=webhook(storm)).raise_for_status()
        c.app.state.services.incidents.process_pending()
        n = notifier(c, rec, clock)
        n.poll()
        clock.t += 31
        n.poll()
    labels = [a["labels"] for body in rec.to(AM + "/api/v2/alerts") for a in body]
    assert labels and all(len(lab["cluster"]) <= 256 for lab in labels)
    assert any(lab["cluster"].endswith("…") for lab in labels)


def test_resends_carry_the_incident_as_it_is_now(app: TestClient) -> None:
    """Alertmanager replaces an alert's annotations at each re-send (its identity is the label
    set, prometheus/alertmanager ``types.Alert.Merge``): the description's firing count follows
    the incident while the labels, and so the alert, stay the same."""
    rec, clock = Recorder(), Clock()
    n = notifier(app, rec, clock)
    n.poll()
    clock.t += 31
    n.poll()
    inc = storm_incident(app)

    def mine() -> dict:
        posted = [a for body in rec.to(AM + "/api/v2/alerts") for a in body]
        return [a for a in posted if a["labels"]["incident"] == str(inc["id"])][-1]

    first = mine()
    assert first["annotations"]["description"].startswith(f"{inc['firing_count']} firing alerts")
    more = [
        alert(
            {"alertname": "GpuXidError", "cluster": "c0", "node": "c0-h1", "gpu": str(g)},
            (T0 + timedelta(seconds=200)).isoformat(),
            fingerprint=f"more-{g}",
        )
        for g in (2, 3)
    ]
    app.post("/api/v1/alerts", json=webhook(more)).raise_for_status()
    app.app.state.services.incidents.process_pending()
    grown = storm_incident_by_id(app, inc["id"])
    assert grown["firing_count"] > inc["firing_count"]
    clock.t += 61
    n.poll()
    again = mine()
    assert grown["causes"][0]["node"] == inc["causes"][0]["node"]  # the same settled cause
    assert again["labels"] == first["labels"]
    assert again["annotations"]["description"].startswith(f"{grown['firing_count']} firing alerts")


def storm_incident_by_id(c: TestClient, inc_id: int) -> dict:
    return c.get(f"/api/v1/incidents/{inc_id}").json()


def test_own_root_cause_alerts_coming_back_open_no_incident(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """With Alertmanager's default single route every alert goes to every receiver, FleetMind's
    own FleetMindRootCause included: it came back through the webhook, opened an incident about
    cluster ``c0``, which was ranked and notified in turn. It is stored, never grouped, and the
    service says once how to route it away."""
    ours = {
        "alertname": ALERTNAME,
        "incident": "1",
        "cause_node": TRUE_ROOT,
        "cause_kind": "host",
        "cluster": "c0",
        "severity": "warning",
    }
    back = [
        alert({**ours, "incident": str(i)}, T0.isoformat(), fingerprint=f"own-{i}") for i in (1, 2)
    ]
    with TestClient(create_app(settings(tmp_path))) as c, caplog.at_level("WARNING"):
        assert c.post("/api/v1/alerts", json=webhook(back)).json()["accepted"] == 2
        c.app.state.services.incidents.process_pending()
        c.post("/api/v1/alerts", json=webhook([{**back[0], "status": "resolved",
                                               "endsAt": datetime.now(UTC).isoformat()}]))  # fmt: skip
        c.app.state.services.incidents.process_pending()
        stored = c.get("/api/v1/alerts").json()
        incidents = c.get("/api/v1/incidents").json()
    assert len(stored) == 2 and all(a["incident_id"] is None for a in stored)
    assert incidents == []
    said = [r.getMessage() for r in caplog.records if ALERTNAME in r.getMessage()]
    assert len(said) == 1 and 'alertname!="FleetMindRootCause"' in said[0]


def test_every_alertmanager_of_an_ha_pair_gets_the_alert(app: TestClient) -> None:
    """Alertmanager HA peers gossip silences and the notification log, not alerts; like Prometheus,
    the notifier posts to every instance. One peer down does not stop the page."""
    am2 = "http://am2.test:9093"
    rec, clock = Recorder(), Clock()
    rec.script[am2 + "/api/v2/alerts"] = [503]  # the second peer is down at first
    n = notifier(app, rec, clock, notify_alertmanager_url=f"{AM}, {am2}/", notify_retries=2)
    n.poll()
    clock.t += 31
    n.poll()
    first = [a["labels"]["incident"] for body in rec.to(AM + "/api/v2/alerts") for a in body]
    assert sorted(first) == sorted({i for i in first}) and first  # each incident once, to AM
    assert rec.to(am2 + "/api/v2/alerts")  # tried (and failed) on the second peer
    clock.t += 400  # past the resend interval and the failed peer's back-off
    n.poll()
    again = [a["labels"]["incident"] for body in rec.to(am2 + "/api/v2/alerts") for a in body]
    assert set(first) <= set(again)  # the peer that was down has every alert now


def test_alertmanager_urls_are_checked_one_by_one(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="ftp://am2"):
        settings(tmp_path, notify_alertmanager_url=f"{AM},ftp://am2:9093")


def test_a_refused_chat_message_is_dropped_once_not_retried_forever(
    app: TestClient, caplog: pytest.LogCaptureFixture
) -> None:
    """A revoked Slack URL answers 404 for good: it was POSTed every round, with a warning each,
    for every incident ever notified (retention had deleted some of them). A 4xx other than
    408/425/429 is final: the message is dropped with one error."""
    rec, clock = Recorder(), Clock()
    rec.script[HOOK] = [404] * 100
    n = notifier(app, rec, clock)
    n.poll()
    clock.t += 31
    with caplog.at_level("ERROR"):
        n.poll()
        tries = len(rec.to(HOOK))
        for _ in range(10):
            clock.t += 400
            n.poll()
    assert tries == 2 and len(rec.to(HOOK)) == tries  # once per incident, never again
    dropped = [r for r in caplog.records if "dropped" in r.getMessage()]
    assert len(dropped) == 2 and "404" in dropped[0].getMessage()
    assert len(rec.to(AM + "/api/v2/alerts")) > 2  # Alertmanager still hears the open incidents


def test_a_resolution_alertmanager_never_takes_is_dropped_after_the_give_up_time(
    app: TestClient,
) -> None:
    """Alertmanager down for good: the resolutions of incidents gone from the database were
    retried forever. After ``FLEETMIND_NOTIFY_GIVE_UP_S`` a resolution is dropped (Alertmanager
    ends an alert that is no longer re-sent after its resolve_timeout anyway)."""
    rec, clock = Recorder(), Clock()
    n = notifier(app, rec, clock, notify_give_up_s=600.0)
    n.poll()
    clock.t += 31
    n.poll()
    inc = storm_incident(app)
    rec.script[AM + "/api/v2/alerts"] = [503] * 1000
    done = datetime.now(UTC).isoformat()
    resolved = [{**a, "status": "resolved", "endsAt": done} for a in storm_alerts(T0)]
    app.post("/api/v1/alerts", json=webhook(resolved)).raise_for_status()
    app.app.state.services.incidents.process_pending()
    assert app.get(f"/api/v1/incidents/{inc['id']}").json()["status"] == "resolved"
    for _ in range(5):  # within the give-up time: still trying
        clock.t += 100
        n.poll()
    clock.t += 400  # past it: one last try, then the resolution is dropped
    n.poll()
    before = len(rec.to(AM + "/api/v2/alerts"))
    for _ in range(5):
        clock.t += 400
        n.poll()
    posted = [a for body in rec.to(AM + "/api/v2/alerts")[before:] for a in body]
    assert before > 2 and not [a for a in posted if a["labels"]["incident"] == str(inc["id"])]


def test_heartbeats_are_stored_but_open_no_incident(tmp_path: Path) -> None:
    """kube-prometheus' Watchdog always fires and InfoInhibitor carries ``severity="none"``; with
    the ``cluster`` external label both mapped to the cluster node, opened incidents, and
    InfoInhibitor alone paged a FleetMindRootCause naming the cluster."""
    ext = {"cluster": "c0", "prometheus": "monitoring/kps-prometheus"}
    beats = [
        alert({"alertname": "Watchdog", "severity": "none", **ext}, T0.isoformat()),
        alert(
            {"alertname": "InfoInhibitor", "severity": "none", "namespace": "ml", **ext},
            T0.isoformat(),
        ),  # fmt: skip
        alert({"alertname": "DeadMansSnitch", "severity": "info", **ext}, T0.isoformat()),
    ]
    s = settings(tmp_path, ungrouped_alerts="Watchdog,InfoInhibitor,DeadMansSnitch")
    rec, clock = Recorder(), Clock()
    with TestClient(create_app(s)) as c:
        assert c.post("/api/v1/alerts", json=webhook(beats)).json()["accepted"] == 3
        c.app.state.services.incidents.process_pending()
        n = notifier(c, rec, clock)
        n.poll()
        clock.t += 31
        n.poll()
        stored = c.get("/api/v1/alerts").json()
        incidents = c.get("/api/v1/incidents").json()
    assert len(stored) == 3 and all(a["incident_id"] is None for a in stored)
    assert incidents == [] and rec.calls == []


def test_each_enabled_channels_counters_exist_at_zero(tmp_path: Path) -> None:
    """``rate()`` and ``increase()`` see only increases between scraped samples (Prometheus
    "Functions"), so a series created by its first failure never shows that failure: every
    enabled channel's ``fleetmind_notifications_total`` series is exported at 0 from start, and
    a channel that is off exports none."""
    from prometheus_client.parser import text_string_to_metric_families

    s = settings(tmp_path, notify_alertmanager_url=None)
    with TestClient(create_app(s)) as c:
        text = c.get("/metrics").text
    (family,) = [
        f for f in text_string_to_metric_families(text) if f.name == "fleetmind_notifications"
    ]
    got = {
        (x.labels["channel"], x.labels["outcome"]): x.value
        for x in family.samples
        if x.name.endswith("_total")
    }
    assert got == {
        ("webhook", "sent"): 0.0,
        ("webhook", "failed"): 0.0,
        ("webhook", "dropped"): 0.0,  # what FleetMindNotificationsFailing watches
    }


def _confidence(c: TestClient, inc: dict) -> str:
    """The incident page's confidence line (auth is off in these settings)."""
    html = c.get(f"/ui/incidents/{inc['id']}").text
    return html.split('id="confidence">', 1)[1].split("<", 1)[0]


def _resolve_storm(c: TestClient) -> None:
    """Alertmanager's webhook says the storm's alerts resolved; the incident closes."""
    done = datetime.now(UTC).isoformat()
    resolved = [{**a, "status": "resolved", "endsAt": done} for a in storm_alerts(T0)]
    c.post("/api/v1/alerts", json=webhook(resolved)).raise_for_status()
    c.app.state.services.incidents.process_pending()


def test_a_message_the_webhook_refused_does_not_read_as_sent(app: TestClient) -> None:
    """The webhook answered 404 and the message was dropped, yet the page said "sent as
    critical": dropping set the same flag as delivering. A final 4xx is a refusal (RFC 9110
    §15.5: the client must not repeat it unchanged), so the page says the message was not sent
    and why, and no "Resolved" message follows for a firing one the channel never took."""
    inc = storm_incident(app)
    _rank_as_gat(app, inc, 0.93)
    rec, clock = Recorder(), Clock()
    rec.script[HOOK] = [404] * 100
    n = notifier(app, rec, clock, notify_alertmanager_url=None)
    n.poll()
    clock.t += 31
    n.poll()
    line = _confidence(app, inc)
    assert "sent as critical" not in line.replace("not sent as critical", "")
    assert line.endswith("not sent as critical (the webhook refused it: 404)")
    _resolve_storm(app)
    tried = len(rec.to(HOOK))
    clock.t += 1
    n.poll()
    assert len(rec.to(HOOK)) == tried  # no "Resolved incident N" for a message never received
    assert "not sent as critical (the webhook refused it: 404)" in _confidence(app, inc)


def test_an_undelivered_root_cause_is_not_sent_once_the_incident_resolves(
    app: TestClient,
) -> None:
    """The receiver answered 500 until the incident resolved: the resolved row read as "sent as
    critical" and the webhook got "Resolved incident N (root cause was ...)" for a firing message
    it never had. Only a delivered firing message is "sent"; the webhook's resolution is sent
    only where the firing message went. Alertmanager still gets ``endsAt`` (an alert it does not
    hold is a no-op there)."""
    inc = storm_incident(app)
    _rank_as_gat(app, inc, 0.93)
    rec, clock = Recorder(), Clock()
    rec.script[HOOK] = [500] * 100
    rec.script[AM + "/api/v2/alerts"] = [500] * 100
    n = notifier(app, rec, clock)
    n.poll()
    clock.t += 31
    n.poll()
    line = _confidence(app, inc)
    assert "sending as critical failed (Alertmanager: 500; the webhook: 500); retrying" in line
    _resolve_storm(app)
    rec.script.clear()  # the receivers are back
    rec.calls.clear()
    clock.t += 400
    n.poll()
    assert [h for h in rec.to(HOOK) if h["fleetmind"]["incident"] == inc["id"]] == []
    ends = [a for a in _alerts_of(rec, inc) if a.get("endsAt")]
    assert len(ends) == 1
    line = _confidence(app, inc)
    assert "sent as critical" not in line.replace("not sent as critical", "")
    assert "not sent as critical (the incident closed first" in line


def test_a_delivered_root_cause_stays_sent_after_the_incident_resolves(app: TestClient) -> None:
    """The other side of the two tests above: a firing message the webhook took is still "sent"
    once resolved, and its resolution goes out (Slack-compatible webhook: one message each)."""
    inc = storm_incident(app)
    _rank_as_gat(app, inc, 0.93)
    rec, clock = Recorder(), Clock()
    n = notifier(app, rec, clock, notify_alertmanager_url=None)
    n.poll()
    clock.t += 31
    n.poll()
    assert _confidence(app, inc).endswith(": sent as critical")
    _resolve_storm(app)
    clock.t += 1
    n.poll()
    mine = [
        h["fleetmind"]["status"] for h in rec.to(HOOK) if h["fleetmind"]["incident"] == inc["id"]
    ]
    assert mine == ["firing", "resolved"]
    assert _confidence(app, inc).endswith(": sent as critical")


def test_a_channel_that_did_not_take_the_message_is_named_beside_sent(tmp_path: Path) -> None:
    """Alertmanager took the page, the webhook keeps failing (or the other way round): the page
    says sent, and which channel did not take it, since on-call may rely on that one."""
    from fleetmind.serving.notify import confidence_words, delivery_outcome

    row = {"state": "firing", "delivery": {"alertmanager": "sent", "webhook": "500"}}
    sent, failing, dropped = delivery_outcome(row)
    assert (sent, failing, dropped) == (True, "the webhook: 500", None)
    words = confidence_words(0.99, settings(tmp_path), "gat", sent=sent, failing=failing)
    assert words.endswith("sent as critical (not everywhere: the webhook: 500, retrying)")
    row = {"state": "resolved", "delivery": {"alertmanager": "dropped: 404", "webhook": "sent"}}
    sent, failing, dropped = delivery_outcome(row)
    assert sent and failing is None and dropped == "Alertmanager refused it: 404"


def test_an_incident_ranked_with_no_cause_withdraws_its_alert(app: TestClient) -> None:
    """The graph is replaced by one without cluster c0 and the storm incident is ranked again:
    none of its alerts names a node of the graph, so it is stored with no cause (the manager's
    ``_rank``). The cause already sent is withdrawn once (after the settle time, as a changed
    cause is), not re-sent for a node that left the graph until the incident closes. Alertmanager's
    "Sending alerts" (prometheus.io/docs/alerting/clients): "Clients are expected to continuously
    re-send alerts as long as they are still active"; one no longer active is sent with its
    ``endsAt``."""
    rec, clock = Recorder(), Clock()
    n = notifier(app, rec, clock)
    n.poll()
    clock.t += 31
    n.poll()
    inc = storm_incident(app)
    assert [a["labels"]["cause_node"] for a in _alerts_of(rec, inc)] == [TRUE_ROOT]
    services = app.app.state.services
    graph = services.graphs.graph
    keep = [x for x in graph.nodes if x.cluster != "c0" and x.id != "c0"]
    ids = {x.id for x in keep}
    edges = [e for e in graph.edges if e.src in ids and e.dst in ids]
    services.graphs.replace(DependencyGraph(f"{graph.name}-without-c0", keep, edges))
    again = alert(STORM_LABELS[0], starts=T0.isoformat(), fingerprint="storm-again")
    app.post("/api/v1/alerts", json=webhook([again]))
    services.incidents.process_pending()
    inc = storm_incident_by_id(app, inc["id"])
    assert inc["status"] == "open" and inc["causes"] == []
    rec.calls.clear()
    n.poll()
    assert rec.calls == []  # not settled yet
    for _ in range(3):  # past the settle time, then two re-send intervals
        clock.t += 61
        n.poll()
    sent = _alerts_of(rec, inc)
    assert [(a["labels"]["cause_node"], bool(a.get("endsAt"))) for a in sent] == [(TRUE_ROOT, True)]
    assert sent[0]["annotations"]["resolved_because"] == "no cause on the current graph"
    hooks = [h for h in rec.to(HOOK) if h["fleetmind"]["incident"] == inc["id"]]
    assert [h["fleetmind"]["resolved_because"] for h in hooks] == ["no cause on the current graph"]
    assert "withdrawn" in hooks[0]["text"] and "Resolved" not in hooks[0]["text"]
    # the graph comes back and the incident is ranked again: its cause fires anew, after the
    # withdrawal (an alert that ended is a new one when it fires again)
    services.graphs.replace(graph)
    back = alert(STORM_LABELS[0], starts=T0.isoformat(), fingerprint="storm-back")
    app.post("/api/v1/alerts", json=webhook([back]))
    services.incidents.process_pending()
    assert storm_incident_by_id(app, inc["id"])["causes"][0]["node"] == TRUE_ROOT
    rec.calls.clear()
    for _ in range(2):  # past the settle time
        clock.t += 61
        n.poll()
    again_sent = _alerts_of(rec, inc)
    assert again_sent and all(not a.get("endsAt") for a in again_sent)
    assert {a["labels"]["cause_node"] for a in again_sent} == {TRUE_ROOT}
