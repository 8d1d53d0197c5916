"""Root-cause notifications when receivers fail, on a fake clock and recorded HTTP: one attempt per
receiver per poll (no sleeping retries), resolutions kept until every receiver took them (an HA
peer that missed one, a cause changed while the chat was down), and a severity that does not
flap with a score hovering around its threshold."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest
from sqlalchemy import select

from fleetmind.serving.db import Database, incidents, notifications
from fleetmind.serving.incidents.store import IncidentStore
from fleetmind.serving.notify import OUTBOX, Notifier, held_severity
from fleetmind.serving.settings import Settings

AM, AM2 = "http://am.test:9093", "http://am2.test:9093"
HOOK = "http://hooks.test/slack"
ALERTS, ALERTS2 = AM + "/api/v2/alerts", AM2 + "/api/v2/alerts"
T0 = 1_000_000.0


class Clock:
    def __init__(self) -> None:
        self.t = T0

    def __call__(self) -> float:
        return self.t


class Receivers:
    """An httpx transport: records each post, answers 200 unless the URL is down (then the
    URL's failure: a status, or a timeout that takes ``timeout_s`` of the fake clock)."""

    def __init__(self, clock: Clock, timeout_s: float = 5.0) -> None:
        self.clock, self.timeout_s = clock, timeout_s
        self.calls: list[tuple[str, bool, object]] = []
        self.down: dict[str, int | str] = {}
        self.once: dict[str, list[int]] = {}

    def __call__(self, request: httpx.Request) -> httpx.Response:
        url = str(request.url)
        body = json.loads(request.content)
        failure = self.down.get(url)
        if failure is None and self.once.get(url):
            failure = self.once[url].pop(0)
        self.calls.append((url, failure is None, body))
        if failure == "timeout":
            self.clock.t += self.timeout_s
            raise httpx.ConnectTimeout("timed out", request=request)
        return httpx.Response(200 if failure is None else int(failure))

    def tried(self, url: str) -> int:
        return sum(1 for u, _, _ in self.calls if u == url)

    def took(self, url: str) -> list:
        return [b for u, ok, b in self.calls if u == url and ok]

    def alerts(self, url: str, inc: int) -> list[tuple[str, str, bool]]:
        """``(cause_node, severity, has endsAt)`` of incident ``inc``'s alerts ``url`` took."""
        return [
            (a["labels"]["cause_node"], a["labels"]["severity"], "endsAt" in a)
            for b in self.took(url)
            for a in b
            if a["labels"]["incident"] == str(inc)
        ]

    def chat(self, inc: int) -> list[dict]:
        return [b for b in self.took(HOOK) if b["fleetmind"]["incident"] == inc]


def cause(node: str, score: float) -> dict:
    return {
        "node": node,
        "kind": "host",
        "score": score,
        "path": [node],
        "cluster": "c0",
        "fault_type": "host_not_ready",
    }


@pytest.fixture
def db(tmp_path: Path) -> Iterator[Database]:
    d = Database(f"sqlite:///{tmp_path}/n.db")
    d.migrate()
    yield d
    d.dispose()


def open_incidents(db: Database, n: int, node: str = "c0/host/h1", score: float = 0.9) -> list:
    store = IncidentStore(db)
    with db.write() as conn:
        ids = [store.insert_incident(conn, T0, T0) for _ in range(n)]
    for i in ids:
        db.set_incident_rca(i, [cause(node, score), cause("c0/host/h2", 0.05)], "gat", None)
    return ids


def close(db: Database, inc: int) -> None:
    with db.write() as conn:
        conn.execute(
            incidents.update().where(incidents.c.id == inc).values(status="resolved", closed_ts=T0)
        )


def make(
    db: Database, rec_for: Callable[[Clock], Receivers], **kw: object
) -> tuple[Notifier, Receivers, Clock]:
    base: dict = {
        "database_url": str(db.engine.url),
        "rca_model": "baseline:upstream-coverage",
        "placement_model": "heuristic:builtin-bestfit",
        "incident_worker": False,
        "notify_alertmanager_url": AM,
        "notify_webhook_url": HOOK,
        "notify_settle_s": 30.0,
        "notify_resend_s": 60.0,
        "notify_backoff_s": 0.0,
        "notify_retries": 2,
    }
    base.update(kw)
    clock = Clock()
    rec = rec_for(clock)
    n = Notifier(db, Settings(**base), clock=clock, transport=httpx.MockTransport(rec))
    return n, rec, clock


def settle(n: Notifier, clock: Clock) -> None:
    n.poll()
    clock.t += 31
    n.poll()


# ------------------------------------------------------------------ one attempt per poll
def test_a_hung_alertmanager_costs_one_timeout_per_poll_not_one_per_incident(
    db: Database,
) -> None:
    """An HA peer that accepts connections and never answers: each post waited the 5 s timeout
    and was retried ``FLEETMIND_NOTIFY_RETRIES`` times, for every incident, so 20 incidents held
    the poll for minutes and the healthy peer's re-sends came later than Alertmanager's
    ``resolve_timeout`` (5 min; api/v2/api.go ``postAlertsHandler`` sets ``EndsAt = now +
    resolveTimeout`` on an alert posted without one), which then resolved the page. Like
    Prometheus' notifier (notifier/notifier.go ``sendAll``: one post per Alertmanager, the next
    evaluation re-sends), a receiver that failed is not tried again in the poll."""
    ids = open_incidents(db, 20)
    n, rec, clock = make(db, Receivers, notify_alertmanager_url=f"{AM},{AM2}")
    rec.down[ALERTS] = "timeout"
    n.poll()
    clock.t += 31
    start = clock.t
    n.poll()
    assert rec.tried(ALERTS) == 1  # one timeout for the poll, the other incidents skip it
    assert clock.t - start == 5.0
    assert sorted(int(b[0]["labels"]["incident"]) for b in rec.took(ALERTS2)) == sorted(ids)
    assert len(rec.took(HOOK)) == 20


def test_a_failed_receiver_backs_off_from_the_clock_after_the_attempt(db: Database) -> None:
    """The pause after a failure ran from the poll's start, so after a poll of timeouts it had
    passed before the next poll began and every incident tried the dead receiver again. It runs
    from when the attempt failed: ``FLEETMIND_NOTIFY_BACKOFF_S``, doubling with each failure in a
    row, at most ``FLEETMIND_NOTIFY_RETRIES`` times."""
    open_incidents(db, 3)
    n, rec, clock = make(
        db, Receivers, notify_backoff_s=2.0, notify_retries=1, notify_webhook_url=None
    )
    rec.down[ALERTS] = "timeout"
    n.poll()
    clock.t += 31
    n.poll()  # fails at +5 s: not tried before +7 s
    assert rec.tried(ALERTS) == 1
    clock.t += 1
    n.poll()
    assert rec.tried(ALERTS) == 1
    clock.t += 1.5
    n.poll()  # +2.5 s after the failure: tried (and fails again: 4 s now)
    assert rec.tried(ALERTS) == 2
    clock.t += 3
    n.poll()
    assert rec.tried(ALERTS) == 2
    del rec.down[ALERTS]
    clock.t += 1.5
    assert n.poll() == 3 and rec.tried(ALERTS) == 5  # back: every incident in one poll


# ------------------------------------------------------------------ undelivered resolutions
def test_a_withdrawal_the_chat_missed_is_sent_before_the_new_cause(db: Database) -> None:
    """The settled cause changed while the receivers answered 503: the row of the withdrawn
    cause, with its undelivered resolution, was replaced by the new cause's, so the channel never
    heard the first cause was withdrawn, and Alertmanager held the old alert until its
    ``resolve_timeout``. Resolutions are kept until delivered (or ``FLEETMIND_NOTIFY_GIVE_UP_S``)
    and the chat gets them in order, as Slack readers expect a thread to read."""
    [inc] = open_incidents(db, 1, "c0/host/h1")
    n, rec, clock = make(db, Receivers)
    settle(n, clock)
    rec.down.update({HOOK: 503, ALERTS: 503})
    db.set_incident_rca(inc, [cause("c0/host/h2", 0.9), cause("c0/host/h1", 0.1)], "gat", None)
    settle(n, clock)
    for _ in range(10):  # ten minutes down, well within the give-up hour
        clock.t += 61
        n.poll()
    rec.down.clear()
    clock.t += 61
    n.poll()
    chat = [(m["fleetmind"]["status"], m["fleetmind"]["cause_node"]) for m in rec.chat(inc)]
    assert chat == [
        ("firing", "c0/host/h1"),
        ("resolved", "c0/host/h1"),
        ("firing", "c0/host/h2"),
    ]
    assert rec.chat(inc)[1]["fleetmind"]["resolved_because"] == "root cause changed"
    assert rec.alerts(ALERTS, inc) == [
        ("c0/host/h1", "critical", False),
        ("c0/host/h1", "critical", True),  # in the same post, before the new alert
        ("c0/host/h2", "critical", False),
    ]
    with db.read() as conn:
        row = conn.execute(select(notifications)).one()._mapping
    assert OUTBOX not in (row["delivery"] or {})  # nothing owed any more
    clock.t += 61
    n.poll()
    assert len(rec.chat(inc)) == 3


def test_a_refused_withdrawal_does_not_hold_back_the_next_message(db: Database) -> None:
    """A message the webhook refuses for good (a 4xx other than 408/425/429) is dropped, and the
    messages after it still go, in order."""
    [inc] = open_incidents(db, 1, "c0/host/h1")
    n, rec, clock = make(db, Receivers, notify_alertmanager_url=None)
    settle(n, clock)
    rec.once[HOOK] = [400]
    db.set_incident_rca(inc, [cause("c0/host/h2", 0.9), cause("c0/host/h1", 0.1)], "gat", None)
    settle(n, clock)
    chat = [(m["fleetmind"]["status"], m["fleetmind"]["cause_node"]) for m in rec.chat(inc)]
    assert chat == [("firing", "c0/host/h1"), ("firing", "c0/host/h2")]


def test_the_resolutions_kept_for_an_incident_are_bounded(
    db: Database, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A cause changing every settle time while the receivers are down adds one resolution each
    time: the oldest beyond ``OUTBOX_MAX`` are dropped, with an error, and the rest go in order."""
    import fleetmind.serving.notify as notify

    monkeypatch.setattr(notify, "OUTBOX_MAX", 2)
    [inc] = open_incidents(db, 1, "c0/host/h1")
    n, rec, clock = make(db, Receivers)
    settle(n, clock)
    rec.down.update({HOOK: 503, ALERTS: 503})
    with caplog.at_level("ERROR"):
        for node in ("c0/host/h2", "c0/host/h3", "c0/host/h4"):
            db.set_incident_rca(inc, [cause(node, 0.9)], "gat", None)
            settle(n, clock)
    assert len([r for r in caplog.records if "too many undelivered" in r.getMessage()]) == 1
    rec.down.clear()
    clock.t += 61
    n.poll()
    assert rec.alerts(ALERTS, inc) == [
        ("c0/host/h1", "critical", False),
        ("c0/host/h2", "critical", True),  # h1's resolution, the oldest, was dropped
        ("c0/host/h3", "critical", True),
        ("c0/host/h4", "critical", False),
    ]
    # the chat took only h1's firing message: its withdrawal was the one due there, and dropped
    chat = [(m["fleetmind"]["status"], m["fleetmind"]["cause_node"]) for m in rec.chat(inc)]
    assert chat == [("firing", "c0/host/h1"), ("firing", "c0/host/h4")]


def test_an_ha_peer_that_missed_the_resolution_gets_it_later(db: Database) -> None:
    """The second Alertmanager of an HA pair answered 503 when the incident resolved: the first
    took ``endsAt``, the row was marked delivered, and the second kept the page firing. Each
    instance is tracked until it takes the resolution, as Prometheus keeps sending a resolved
    alert to every Alertmanager for 15 minutes (rules/alerting.go ``resolvedRetention``)."""
    [inc] = open_incidents(db, 1)
    n, rec, clock = make(db, Receivers, notify_alertmanager_url=f"{AM},{AM2}")
    settle(n, clock)
    rec.down[ALERTS2] = 503
    close(db, inc)
    clock.t += 1
    n.poll()
    assert rec.alerts(ALERTS, inc)[-1][2] and not rec.alerts(ALERTS2, inc)[-1][2]
    clock.t += 60
    del rec.down[ALERTS2]
    for _ in range(3):
        clock.t += 30
        n.poll()
    assert [e for _, _, e in rec.alerts(ALERTS2, inc)] == [False, True]
    assert [e for _, _, e in rec.alerts(ALERTS, inc)] == [False, True]  # not sent twice
    assert len(rec.chat(inc)) == 2  # firing, resolved: once each


def test_a_resolution_one_peer_never_takes_is_dropped_after_the_give_up_time(
    db: Database, caplog: pytest.LogCaptureFixture
) -> None:
    """``FLEETMIND_NOTIFY_GIVE_UP_S`` still bounds it: after it the resolution is dropped for the
    peer that never answered, with one error (its ``resolve_timeout`` ends the alert anyway)."""
    [inc] = open_incidents(db, 1)
    n, rec, clock = make(
        db, Receivers, notify_alertmanager_url=f"{AM},{AM2}", notify_give_up_s=600.0
    )
    settle(n, clock)
    rec.down[ALERTS2] = 503
    close(db, inc)
    with caplog.at_level("ERROR"):
        for _ in range(8):
            clock.t += 100
            n.poll()
    tried = rec.tried(ALERTS2)
    clock.t += 100
    n.poll()
    assert rec.tried(ALERTS2) == tried
    assert len([r for r in caplog.records if "dropped" in r.getMessage()]) == 1


def test_a_resolution_stored_before_resolutions_were_kept_is_still_delivered(
    db: Database,
) -> None:
    """A resolved row written by an earlier release (its resolution undelivered, no list of owed
    resolutions) is sent as before: Alertmanager gets ``endsAt``, the webhook its message."""
    [inc] = open_incidents(db, 1)
    close(db, inc)
    labels = {
        "alertname": "FleetMindRootCause",
        "incident": str(inc),
        "cause_node": "c0/host/h1",
        "cause_kind": "host",
        "cluster": "c0",
        "severity": "critical",
    }
    annotations = {
        "incident_url": f"http://x/ui/incidents/{inc}",
        "path": "c0/host/h1",
        "score": "0.9000",
        "fault_type": "",
        "resolved_because": "incident closed",
    }
    with db.write() as conn:
        conn.execute(
            notifications.insert().values(
                incident_id=inc,
                state="resolved",
                cause_node="c0/host/h1",
                labels=labels,
                annotations=annotations,
                starts_at="1970-01-12T13:46:40Z",
                ends_at="1970-01-12T13:50:00Z",
                am_sent_ts=None,
                hook_sent=False,
                delivery=None,
                updated_ts=T0,
            )
        )
    n, rec, clock = make(db, Receivers)
    clock.t += 1
    assert n.poll() == 2
    assert rec.alerts(ALERTS, inc) == [("c0/host/h1", "critical", True)]
    assert [m["fleetmind"]["status"] for m in rec.chat(inc)] == ["resolved"]
    clock.t += 61
    assert n.poll() == 0
    with db.read() as conn:
        row = conn.execute(select(notifications)).one()._mapping
    assert row["am_sent_ts"] is not None and row["hook_sent"] and row["delivery"] is None


# ------------------------------------------------------------------ severity
def test_a_score_hovering_around_the_critical_threshold_pages_once(db: Database) -> None:
    """A calibrated score going 0.71, 0.69, 0.72, 0.68... as a storm grows paged again at each
    crossing, each time saying "Root cause ... changed: X withdrawn" about the same node. With
    hysteresis (as Prometheus' ``keep_firing_for`` keeps a rule firing through a brief dip,
    rules/alerting.go), a severity is lowered only once the score is
    ``FLEETMIND_NOTIFY_SEVERITY_MARGIN`` below its threshold; raising it is immediate."""
    [inc] = open_incidents(db, 1, score=0.71)
    n, rec, clock = make(db, Receivers)
    for score in (0.71, 0.69, 0.72, 0.68, 0.71, 0.69, 0.66):
        db.set_incident_rca(inc, [cause("c0/host/h1", score)], "gat", None)
        for _ in range(4):
            clock.t += 10
            n.poll()
    assert {a for a in rec.alerts(ALERTS, inc)} == {("c0/host/h1", "critical", False)}
    assert len(rec.chat(inc)) == 1


def test_a_change_of_severity_alone_is_said_as_such(db: Database) -> None:
    """Alertmanager: the old-severity alert is resolved (``severity`` is one of its labels, so
    the new one is another alert) and says why; the chat gets one message naming the change,
    not "root cause changed ... withdrawn" about the same node."""
    [inc] = open_incidents(db, 1, score=0.9)
    n, rec, clock = make(db, Receivers)
    settle(n, clock)
    db.set_incident_rca(inc, [cause("c0/host/h1", 0.6)], "gat", None)
    settle(n, clock)
    sent = [a for b in rec.took(ALERTS) for a in b]
    assert rec.alerts(ALERTS, inc) == [
        ("c0/host/h1", "critical", False),
        ("c0/host/h1", "critical", True),
        ("c0/host/h1", "warning", False),
    ]
    assert sent[1]["annotations"]["resolved_because"] == "severity changed"
    chat = rec.chat(inc)
    assert [m["fleetmind"]["status"] for m in chat] == ["firing", "firing"]
    assert "now warning (was critical)" in chat[1]["text"]
    assert "changed" not in chat[1]["text"] and "withdrawn" not in chat[1]["text"]
    # raised again at once (no margin upwards)
    db.set_incident_rca(inc, [cause("c0/host/h1", 0.7)], "gat", None)
    settle(n, clock)
    assert rec.alerts(ALERTS, inc)[-1] == ("c0/host/h1", "critical", False)
    assert "now critical (was warning)" in rec.chat(inc)[-1]["text"]


@pytest.mark.parametrize(
    ("score", "previous", "method", "expected"),
    [
        (0.69, "critical", "gat", "critical"),  # within the margin: held
        (0.65, "critical", "gat", "critical"),  # at the margin: held
        (0.64, "critical", "gat", "warning"),  # past it: lowered
        (0.26, "critical", "gat", "warning"),  # far past critical, held as a warning
        (0.2, "critical", "gat", None),
        (0.71, "warning", "gat", "critical"),  # raised at once
        (0.27, "warning", "gat", "warning"),
        (0.24, "warning", "gat", None),
        (0.69, None, "gat", "warning"),  # nothing to hold
        (0.69, "critical", "baseline", "warning"),  # no calibrated score: nothing to hold
        (float("nan"), "critical", "gat", None),
    ],
)
def test_held_severity(score: float, previous: str | None, method: str, expected: str) -> None:
    s = Settings(notify_critical_score=0.7, notify_warning_score=0.3)
    top = cause("c0/host/h1", score)
    assert held_severity(score, previous, s, method, top) == expected


# ------------------------------------------------------------------ what Alertmanager keeps
def am_state(bodies: list, state: dict | None = None) -> dict:
    """``labels -> "firing" | "resolved"`` after an Alertmanager stored ``bodies`` in order.

    Alertmanager keys an alert by its label set and stores a request's alerts one after another
    (provider/mem/mem.go ``Put``): a resolution (``endsAt`` in the past) ends the stored alert,
    and an alert that starts after that end replaces it, firing. The last alert of a label set
    wins, which is all these tests need."""
    state = {} if state is None else state
    for body in bodies:
        for a in body:
            key = tuple(sorted(a["labels"].items()))
            state[key] = "resolved" if "endsAt" in a else "firing"
    return state


def firing_on(state: dict, node: str) -> list[str]:
    return [v for k, v in state.items() if dict(k)["cause_node"] == node]


def test_an_ha_peer_back_after_a_cause_flap_keeps_the_live_alert_firing(db: Database) -> None:
    """A -> B -> A while the second Alertmanager was unreachable: the first took the re-fired
    A, so A was not due when the second came back, and it got only what it was owed, A's old
    resolution and B's. A's resolution has the live alert's labels: Alertmanager ended the live
    alert until the next re-send, the resolve/re-fire flap the kept resolutions were to prevent.
    The firing alert now follows a resolution of its labels, in the same post, and the second
    instance ends with A firing whether it kept its alerts (a partition) or restarted empty."""
    n, rec, clock = make(
        db, Receivers, notify_alertmanager_url=f"{AM},{AM2}", notify_webhook_url=None
    )
    [inc] = open_incidents(db, 1, node="c0/host/h1", score=0.9)
    settle(n, clock)  # A fires on both
    rec.down[ALERTS2] = 503
    for node in ("c0/host/h3", "c0/host/h1"):  # A -> B -> A
        db.set_incident_rca(inc, [cause(node, 0.9), cause("c0/host/h2", 0.05)], "gat", None)
        clock.t += 1
        n.poll()
        clock.t += 31
        n.poll()
    clock.t += 5
    n.poll()
    del rec.down[ALERTS2]
    clock.t += 2
    before, before1 = len(rec.took(ALERTS2)), len(rec.took(ALERTS))
    n.poll()
    after = rec.took(ALERTS2)[before:]
    assert [[(a["labels"]["cause_node"], "endsAt" in a) for a in b] for b in after] == [
        [("c0/host/h1", True), ("c0/host/h3", True), ("c0/host/h1", False)]
    ]
    assert firing_on(am_state(rec.took(ALERTS2)), "c0/host/h1") == ["firing"]  # kept its state
    assert firing_on(am_state(after), "c0/host/h1") == ["firing"]  # restarted empty
    assert firing_on(am_state(after), "c0/host/h3") == ["resolved"]
    assert len(rec.took(ALERTS)) == before1  # the first instance's re-sends keep their time
    clock.t += 52
    n.poll()  # 59 s after the first instance took the re-fired A: not due yet
    assert len(rec.took(ALERTS)) == before1
    clock.t += 1
    n.poll()  # due 60 s after that, for both
    assert len(rec.took(ALERTS)) == before1 + 1 and len(rec.took(ALERTS2)) == before + 2


class Validating(Receivers):
    """Alertmanager's answer to alerts that end before they start (types/types.go
    ``Alert.Validate``: "start time must be before end time"): api/v2/api.go
    ``postAlertsHandler`` stores the valid alerts of the request and answers 400 naming the
    invalid ones. ``stored[url]``: the alerts each URL stored, in order."""

    def __init__(self, clock: Clock, timeout_s: float = 5.0) -> None:
        super().__init__(clock, timeout_s)
        self.stored: dict[str, list] = {}

    def __call__(self, request: httpx.Request) -> httpx.Response:
        url = str(request.url)
        if url == HOOK or url in self.down:
            return super().__call__(request)
        body = json.loads(request.content)
        valid = [a for a in body if not _ends_before_start(a)]
        self.stored.setdefault(url, []).extend(valid)
        ok = len(valid) == len(body)
        self.calls.append((url, ok, body))
        return httpx.Response(200 if ok else 400)


def _ends_before_start(alert: dict) -> bool:
    from datetime import datetime

    if "endsAt" not in alert:
        return False
    return datetime.fromisoformat(alert["endsAt"]) < datetime.fromisoformat(alert["startsAt"])


def test_a_resolution_after_the_clock_stepped_back_is_valid(db: Database) -> None:
    """The wall clock stepped back between firing and resolution: the resolution ended before
    it started, which Alertmanager refuses. It ends when it is resolved and starts no later."""
    [inc] = open_incidents(db, 1)
    n, rec, clock = make(db, Validating, notify_webhook_url=None)
    settle(n, clock)
    clock.t -= 600  # NTP stepped a clock that ran ahead back
    close(db, inc)
    n.poll()
    resolution = rec.took(ALERTS)[-1][-1]
    assert "endsAt" in resolution and not _ends_before_start(resolution)
    assert resolution["endsAt"] == resolution["startsAt"]
    assert rec.alerts(ALERTS, inc)[-1] == ("c0/host/h1", "critical", True)


def test_one_invalid_alert_does_not_hold_back_the_others_of_its_post(
    db: Database, caplog: pytest.LogCaptureFixture
) -> None:
    """An owed resolution Alertmanager refuses (one stored before resolutions were kept valid)
    went in each post with the new cause's alert, so every post was answered 400 and the new
    cause never counted as delivered. After a final refusal of several alerts each is posted
    alone: the valid ones are taken, the one refused on its own is dropped with an error."""
    [inc] = open_incidents(db, 1, "c0/host/h1")
    n, rec, clock = make(db, Validating, notify_webhook_url=None)
    settle(n, clock)
    rec.down[ALERTS] = 503
    for node in ("c0/host/h3", "c0/host/h2"):  # two withdrawals owed
        db.set_incident_rca(inc, [cause(node, 0.9), cause("c0/host/h1", 0.1)], "gat", None)
        settle(n, clock)
    with db.read() as conn:
        row = conn.execute(select(notifications)).one()._mapping
    delivery = dict(row["delivery"])
    bad = delivery[OUTBOX][0]["alert"]
    delivery[OUTBOX][0]["alert"] = {**bad, "endsAt": "1970-01-01T00:00:00Z"}  # before it started
    with db.write() as conn:
        conn.execute(notifications.update().values(delivery=delivery))
    del rec.down[ALERTS]
    clock.t += 1
    with caplog.at_level("ERROR"):
        n.poll()
    assert rec.took(ALERTS)[-2:] == [[delivery[OUTBOX][1]["alert"]], [rec.calls[-1][2][0]]]
    assert rec.alerts(ALERTS, inc)[-2:] == [
        ("c0/host/h3", "critical", True),
        ("c0/host/h2", "critical", False),
    ]
    assert len([r for r in caplog.records if "refused it: 400" in r.getMessage()]) == 1
    with db.read() as conn:
        row = conn.execute(select(notifications)).one()._mapping
    assert OUTBOX not in row["delivery"] and row["delivery"]["alertmanager"] == "sent"
    tried = rec.tried(ALERTS)
    clock.t += 61
    n.poll()  # the re-send: the new cause alone, nothing held back
    assert rec.tried(ALERTS) == tried + 1 and rec.calls[-1][1]
