"""An Alertmanager HA peer that refuses posts must not stall the notifier, on a fake clock and
recorded HTTP (the transport of ``test_notify_failing_receivers``).

An answer that says the receiver is wrong (401 behind an auth proxy, 404 for a wrong route
prefix: RFC 9110 sections 15.5.2 and 15.5.5) was read as a refusal of each message: every first
post, every resolution and every alert of a refused re-send batch was posted to that peer on its
own, each up to 5 s, before the other peer got anything; with enough open incidents the healthy
peer's re-sends came later than its ``resolve_timeout`` (5 min) and it resolved them. Such an
answer now fails the receiver (one post per poll, back-off, the alerts kept owed), and the posts
a peer refuses for their alerts (400) take ``REFUSAL_BUDGET_S`` of a poll at most.
"""

from __future__ import annotations

import contextlib
import json
from pathlib import Path
from types import SimpleNamespace

import httpx
import pytest
from alertmanager_helpers import running_alertmanager
from prometheus_client import CollectorRegistry
from sqlalchemy import select
from test_notify_failing_receivers import (
    ALERTS,
    ALERTS2,
    AM,
    AM2,
    Clock,
    Receivers,
    Validating,
    am_state,
    cause,
    close,
    db,  # noqa: F401  (the database fixture)
    firing_on,
    make,
    open_incidents,
    settle,
)

from fleetmind.serving import notify
from fleetmind.serving.db import Database, notifications
from fleetmind.serving.notify import OUTBOX, Notifier, delivery_outcome, redirect_target
from fleetmind.serving.settings import Settings


class SlowReceivers(Receivers):
    """Each answer of a down URL takes ``answer_s`` of the fake clock (a peer that answers its
    404 after seconds, as the fake peer of the finding did after 1 to 4.7 s)."""

    answer_s = 1.0

    def __call__(self, request):  # type: ignore[no-untyped-def]
        if str(request.url) in self.down:
            self.clock.t += self.answer_s
        return super().__call__(request)


def incidents_in(rec: Receivers, url: str, resolved: bool) -> list[int]:
    """The incidents of the alerts ``url`` took, firing or resolved."""
    return sorted(
        int(a["labels"]["incident"])
        for b in rec.took(url)
        for a in b
        if ("endsAt" in a) == resolved
    )


@pytest.mark.parametrize("status", [404, 401, 403])
def test_a_peer_answering_that_the_receiver_is_wrong_costs_one_post_per_poll(
    db: Database,  # noqa: F811
    status: int,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """30 incidents, the first peer answering ``status`` after 1 s of the fake clock: the old
    notifier posted to it once per incident (30 posts, 30 s) before the healthy peer got its
    first post; now once per poll, the healthy peer gets every incident in that poll, and once
    the peer answers 200 again it gets every resolution owed at the next poll and every firing
    alert at the next re-send (the other peer took them: as after any failure of one peer)."""
    ids = open_incidents(db, 30)
    n, rec, clock = make(
        db, SlowReceivers, notify_alertmanager_url=f"{AM},{AM2}", notify_webhook_url=None
    )
    rec.down[ALERTS] = status
    n.poll()
    clock.t += 31
    start = clock.t
    with caplog.at_level("WARNING"):
        n.poll()  # the first posts
    assert rec.tried(ALERTS) == 1
    assert clock.t - start == 1.0  # one refused post, not one per incident
    assert incidents_in(rec, ALERTS2, resolved=False) == ids
    warned = [r.getMessage() for r in caplog.records]
    assert len([m for m in warned if f"answered {status}" in m]) == 1
    assert not [m for m in warned if "refused the notification" in m]

    for inc in ids[:10]:  # ten incidents resolve while the peer still refuses
        close(db, inc)
    clock.t += 1
    n.poll()
    assert rec.tried(ALERTS) == 2  # one more post for the poll
    assert incidents_in(rec, ALERTS2, resolved=True) == ids[:10]

    del rec.down[ALERTS]  # fixed (the proxy's credentials, the route prefix)
    clock.t += 1
    n.poll()
    assert incidents_in(rec, ALERTS, resolved=True) == ids[:10]  # the resolutions, kept
    clock.t += 60
    n.poll()
    assert incidents_in(rec, ALERTS, resolved=False) == ids[10:]  # the firing ones, re-sent
    with db.read() as conn:
        rows = [r._mapping for r in conn.execute(select(notifications))]
    assert all(OUTBOX not in (r["delivery"] or {}) for r in rows)
    assert all(delivery_outcome(r)[1] is None for r in rows if r["state"] == "firing")


def test_a_peer_refusing_every_alert_gets_a_time_budget_per_poll(
    db: Database,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A peer that answers 400 to every post (a proxy's "plain HTTP request sent to HTTPS port"):
    each refusal is of the message, held until the next re-send interval as before, but once the
    poll spent ``REFUSAL_BUDGET_S`` on them (0 here: one refused post) the peer's other posts
    wait for the next poll (a single Alertmanager here: with an HA peer that took them they
    wait for the next re-send)."""
    monkeypatch.setattr(notify, "REFUSAL_BUDGET_S", 0.0, raising=False)
    ids = open_incidents(db, 5)
    n, rec, clock = make(db, Receivers, notify_webhook_url=None)
    rec.down[ALERTS] = 400
    settle(n, clock)
    assert rec.tried(ALERTS) == 1
    for k in range(2, 6):  # one incident a poll: each refused once, then held, none lost
        clock.t += 1
        n.poll()
        assert rec.tried(ALERTS) == k
    tried = sorted(int(b[0]["labels"]["incident"]) for u, _, b in rec.calls if u == ALERTS)
    assert tried == ids
    clock.t += 1
    n.poll()
    assert rec.tried(ALERTS) == 5  # each refused message waits for the re-send interval


def test_a_refused_batch_is_still_split_within_the_budget(
    db: Database,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Re-sends refused as a batch (400) are posted alone within the budget: with none left after
    the batch's refusal, one alert alone still goes each poll (else a batch refused slowly would
    never be split, and its valid alerts never re-sent), the rest at the next polls."""
    monkeypatch.setattr(notify, "REFUSAL_BUDGET_S", 0.0, raising=False)
    ids = open_incidents(db, 4)
    n, rec, clock = make(db, Receivers, notify_webhook_url=None)
    settle(n, clock)
    rec.down[ALERTS] = 400
    before = len(rec.calls)
    clock.t += 61  # the re-sends: one batch
    n.poll()
    assert [len(b) for _, _, b in rec.calls[before:]] == [4, 1]  # the batch, then one alone
    del rec.down[ALERTS]
    clock.t += 1
    n.poll()  # the three deferred go in one batch; the refused one waits for the next interval
    assert [int(a["labels"]["incident"]) for a in rec.calls[-1][2]] == ids[1:]
    assert rec.calls[-1][1]


def test_a_refused_post_split_with_no_budget_left_keeps_the_live_alert_firing(
    db: Database,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A -> B -> A while the second peer was down: it is owed A's and B's resolutions and the
    firing A after them, in one post. B's resolution is invalid, so the post is refused (400) and
    each alert posted alone; with the budget spent (0 here) the budget was checked per alert: A's
    resolution went, the firing A waited for the next re-send (60 s), and for that time the peer
    held the live root cause as resolved. Once the budget is spent an incident's resolutions now
    wait and its firing alert, the last, still goes, so the peer ends with A firing at once; B's
    deferred resolution comes again at the next poll, followed by the firing A, is refused on its
    own while A is taken, and is dropped."""
    monkeypatch.setattr(notify, "REFUSAL_BUDGET_S", 0.0, raising=False)
    n, rec, clock = make(
        db, Validating, notify_alertmanager_url=f"{AM},{AM2}", notify_webhook_url=None
    )
    [inc] = open_incidents(db, 1, node="c0/host/h1", score=0.9)
    settle(n, clock)  # A fires on both
    rec.down[ALERTS2] = 503
    for node in ("c0/host/h3", "c0/host/h1"):  # A -> B -> A, the second peer down
        db.set_incident_rca(inc, [cause(node, 0.9), cause("c0/host/h2", 0.05)], "gat", None)
        clock.t += 1
        n.poll()
        clock.t += 31
        n.poll()
    clock.t += 5
    n.poll()
    with db.read() as conn:
        delivery = dict(conn.execute(select(notifications)).one()._mapping["delivery"])
    owed = delivery[OUTBOX]
    [k] = [k for k, e in enumerate(owed) if e["alert"]["labels"]["cause_node"] == "c0/host/h3"]
    owed[k]["alert"] = {**owed[k]["alert"], "endsAt": "1970-01-01T00:00:00Z"}  # invalid
    with db.write() as conn:
        conn.execute(notifications.update().values(delivery=delivery))
    del rec.down[ALERTS2]
    clock.t += 2
    caplog.set_level("ERROR")
    n.poll()
    # what the peer holds: the alerts of every post it took, and (Alertmanager stores the valid
    # alerts of a post it answers 400, api/v2 postAlertsHandler) those it stored
    assert firing_on(am_state(rec.took(ALERTS2)), "c0/host/h1") == ["firing"]
    assert firing_on(am_state([rec.stored[ALERTS2]]), "c0/host/h1") == ["firing"]
    for k in range(50):  # the next 50 s of polls: A stays firing there
        clock.t += 1
        n.poll()
        assert firing_on(am_state(rec.took(ALERTS2)), "c0/host/h1") == ["firing"]
        assert firing_on(am_state([rec.stored[ALERTS2]]), "c0/host/h1") == ["firing"]
        if k == 0:  # B's resolution, refused on its own, dropped at the next poll
            assert len([r for r in caplog.records if "refused it: 400" in r.getMessage()]) == 1
    assert len([r for r in caplog.records if "refused it: 400" in r.getMessage()]) == 1
    with db.read() as conn:
        assert OUTBOX not in conn.execute(select(notifications)).one()._mapping["delivery"]


class Redirecting(Receivers):
    """A down URL answers its status with a ``Location`` that holds credentials and a token (an
    ingress' ssl-redirect to https, RFC 9110 section 15.4)."""

    def __call__(self, request):  # type: ignore[no-untyped-def]
        answer = super().__call__(request)
        if str(request.url) in self.down:
            where = "https://admin:s3cret@am.test/api/v2/alerts?token=t0k3n#frag"
            return httpx.Response(answer.status_code, headers={"Location": where})
        return answer


@pytest.mark.parametrize("status", [301, 302, 303, 307, 308])
def test_a_peer_that_redirects_costs_one_post_per_poll(
    db: Database,  # noqa: F811
    status: int,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A redirection is final and was read as a refusal of each alert: every incident posted to
    that peer on its own each poll. Every alert gets the same answer (the notifier does not follow
    redirects), so it now fails the receiver: one post per poll, the other peer gets every
    incident, and the warning names the target without its credentials or query."""
    ids = open_incidents(db, 10)
    n, rec, clock = make(
        db, Redirecting, notify_alertmanager_url=f"{AM},{AM2}", notify_webhook_url=None
    )
    rec.down[ALERTS] = status
    n.poll()
    clock.t += 31
    with caplog.at_level("WARNING"):
        n.poll()  # the first posts
    assert rec.tried(ALERTS) == 1
    assert incidents_in(rec, ALERTS2, resolved=False) == ids
    warned = [r.getMessage() for r in caplog.records]
    [line] = [m for m in warned if f"answered {status}" in m]
    assert "redirects to https://am.test/api/v2/alerts," in line
    assert "s3cret" not in line and "t0k3n" not in line and "frag" not in line
    assert not [m for m in warned if "refused" in m]
    clock.t += 60
    n.poll()  # the re-sends: one post to the redirecting peer, all of them to the other
    assert rec.tried(ALERTS) == 2
    assert incidents_in(rec, ALERTS2, resolved=False) == sorted(ids * 2)
    del rec.down[ALERTS]  # its URL set to where it redirects
    clock.t += 60
    n.poll()
    assert incidents_in(rec, ALERTS, resolved=False) == ids  # every alert, kept owed


def test_a_redirect_target_is_logged_without_secrets() -> None:
    """``redirect_target`` resolves a relative ``Location`` against the URL posted (RFC 9110
    section 10.2.2) and drops credentials, query and fragment."""
    request = httpx.Request("POST", ALERTS)
    relative = httpx.Response(308, headers={"Location": "/am/api/v2/alerts?x=1"}, request=request)
    assert redirect_target(relative) == "http://am.test:9093/am/api/v2/alerts"
    assert redirect_target(httpx.Response(301, request=request)) is None


@pytest.mark.external
def test_a_real_alertmanager_under_a_route_prefix_costs_one_post_per_poll(
    tmp_path: Path,
    db: Database,  # noqa: F811
) -> None:
    """Two real Alertmanagers, one started with ``--web.route-prefix=/am`` and configured without
    it: that one answers 404 on ``/api/v2/alerts`` (its router serves only under the prefix,
    cmd/alertmanager/main.go ``router.WithPrefix``). Ten new root causes cost it one post, and
    the other instance lists all ten after that one poll."""
    cfg = tmp_path / "am.yml"
    cfg.write_text("route:\n  receiver: none\nreceivers:\n  - name: none\n")
    with contextlib.ExitStack() as stack:
        urls = [
            stack.enter_context(running_alertmanager(cfg, tmp_path / f"am{k}", route_prefix=prefix))
            for k, prefix in enumerate(("/am", "/"))
        ]
        bad, good = urls
        assert httpx.post(bad + "/api/v2/alerts", json=[]).status_code == 404  # upstream
        ids = open_incidents(db, 10)
        registry = CollectorRegistry()
        settings = Settings(
            database_url=str(db.engine.url),
            rca_model="baseline:upstream-coverage",
            placement_model="heuristic:builtin-bestfit",
            incident_worker=False,
            notify_alertmanager_url=f"{bad},{good}",
            notify_settle_s=0.0,
        )
        n = Notifier(db, settings, registry=registry)
        stack.callback(n.stop)
        n.poll()
        count = notify._counter(registry)
        assert count.labels("alertmanager", "failed")._value.get() == 1
        listed = httpx.get(
            good + "/api/v2/alerts", params={"filter": 'alertname="FleetMindRootCause"'}
        ).json()
        assert sorted(int(a["labels"]["incident"]) for a in listed) == ids


class TooLarge(Receivers):
    """The first peer's proxy refuses a post of more than one alert (413 Content Too Large, RFC
    9110 section 15.5.14: a body-size limit) while ``limit`` is set, and takes single alerts."""

    limit = True

    def __call__(self, request):  # type: ignore[no-untyped-def]
        url = str(request.url)
        body = json.loads(request.content)
        if url == ALERTS and self.limit and len(body) > 1:
            self.calls.append((url, False, body))
            return httpx.Response(413)
        return super().__call__(request)


def _owe_while_down(
    db: Database,  # noqa: F811
    n: Notifier,
    rec: Receivers,
    clock: Clock,
    inc: int,
    last: int,
) -> list[str]:
    """The first peer down (503) while the cause of ``inc`` goes h1, h3..h<last-1>, h1 (A..A),
    each settled: it is owed a resolution for every change. Returns the causes in order."""
    rec.down[ALERTS] = 503
    nodes = ["c0/host/h1", *[f"c0/host/h{k}" for k in range(3, last)], "c0/host/h1"]
    for node in nodes:
        db.set_incident_rca(inc, [cause(node, 0.9), cause("c0/host/h2", 0.05)], "gat", None)
        clock.t += 1
        n.poll()
        clock.t += 31
        n.poll()
    return nodes


def _monotonic_is(monkeypatch: pytest.MonkeyPatch, clock: Clock) -> None:
    """The notifier's ``time.monotonic`` (its post and budget timing) reads the fake clock."""
    monkeypatch.setattr(
        notify, "time", SimpleNamespace(monotonic=lambda: clock.t, time=notify.time.time)
    )


def test_one_incident_of_many_resolutions_costs_a_bounded_number_of_posts_per_poll(
    db: Database,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A cause that changed 40 times while the first peer was down owes it 40 resolutions and the
    firing alert after them, in one post, which it refuses (413). Each alert was posted alone, all
    of the incident's whatever ``REFUSAL_BUDGET_S``: up to 101 posts in one poll (at 4.7 s a
    refusal, minutes before the other peer got anything). Now, with the budget spent (0 here),
    the incident's first alert goes, then only its firing alert (the resolutions wait, kept
    owed): at most three posts a poll, the other peer gets its posts in the same poll, the
    first peer holds the live alert firing after every poll, and it gets every resolution."""
    monkeypatch.setattr(notify, "REFUSAL_BUDGET_S", 0.0, raising=False)
    n, rec, clock = make(
        db, TooLarge, notify_alertmanager_url=f"{AM},{AM2}", notify_webhook_url=None
    )
    [inc] = open_incidents(db, 1, node="c0/host/h0", score=0.9)
    settle(n, clock)
    nodes = _owe_while_down(db, n, rec, clock, inc, last=41)  # A..A
    with db.read() as conn:
        owed = conn.execute(select(notifications)).one()._mapping["delivery"][OUTBOX]
    assert len(owed) == 40 and owed[1]["alert"]["labels"]["cause_node"] == "c0/host/h1"
    others = open_incidents(db, 2, node="c0/host/x1", score=0.9)
    n.poll()  # (they settle for 30 s)
    del rec.down[ALERTS]  # back, behind its size limit
    before = len(rec.calls)
    clock.t += 61  # A's re-send is due, the other incidents settled
    n.poll()
    calls = rec.calls[before:]
    assert [len(b) for u, _, b in calls if u == ALERTS] == [41, 1, 1]  # not 1 + 41
    alone = [[(a["labels"]["cause_node"], "endsAt" in a) for a in b] for u, _, b in calls][1:3]
    assert alone == [[("c0/host/h0", True)], [("c0/host/h1", False)]]  # the rest waits
    to_peer = [int(a["labels"]["incident"]) for u, ok, b in calls if u == ALERTS2 and ok for a in b]
    assert sorted(to_peer) == [inc, *others]  # the other peer, in the same poll
    assert firing_on(am_state(rec.took(ALERTS)), "c0/host/h1") == ["firing"]
    before = len(rec.calls)
    clock.t += 1
    n.poll()  # A's old resolution, deferred, comes again before A firing, in order
    # (the other peer gets again what the first deferred: due again at each poll until taken)
    posts = [
        [(a["labels"]["cause_node"], "endsAt" in a) for a in b]
        for u, _, b in rec.calls[before:]
        if u == ALERTS
    ]
    assert [len(b) for b in posts] == [40, 1, 1]
    assert posts[0][0] == posts[1][0] == ("c0/host/h1", True)
    assert posts[0][-1] == posts[2][0] == ("c0/host/h1", False)
    assert firing_on(am_state(rec.took(ALERTS)), "c0/host/h1") == ["firing"]
    polls = 0
    while True:
        before = len(rec.calls)
        clock.t += 1
        n.poll()
        polls += 1
        assert len([u for u, _, _ in rec.calls[before:] if u == ALERTS]) <= 3
        assert firing_on(am_state(rec.took(ALERTS)), "c0/host/h1") == ["firing"]
        with db.read() as conn:
            rows = [r._mapping for r in conn.execute(select(notifications))]
        if all(OUTBOX not in (r["delivery"] or {}) for r in rows) or polls == 200:
            break
    assert polls < 200
    ended = {a["labels"]["cause_node"] for b in rec.took(ALERTS) for a in b if "endsAt" in a}
    assert ended == {"c0/host/h0", *nodes}  # every resolution, none given up
    rec.limit = False  # (a batch of re-sends refused goes one alert a poll with no budget)
    clock.t += 60
    n.poll()
    state = am_state(rec.took(ALERTS))
    assert firing_on(state, "c0/host/h1") == ["firing"]
    assert sorted(int(dict(k)["incident"]) for k, v in state.items() if v == "firing") == [
        inc,
        *others,
    ]


FORGED = "https://am.test/x%0A2026-12-06 06:00:00 ERROR forged%1b[31m;jsessionid=S3SS10N/y"


class ForgingRedirect(Receivers):
    """The first peer redirects to a ``Location`` whose path, percent-decoded, holds a line break,
    a forged log line, an escape sequence and a session token (``;jsessionid=``)."""

    def __call__(self, request):  # type: ignore[no-untyped-def]
        answer = super().__call__(request)
        if str(request.url) in self.down:
            return httpx.Response(answer.status_code, headers={"Location": FORGED})
        return answer


def test_a_redirect_target_keeps_its_percent_encoding_in_the_log(
    db: Database,  # noqa: F811
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The target was logged from the percent-decoded path (httpx ``URL.path``): ``%0A`` wrote a
    line break and a second, forged log line, ``%1b`` an escape sequence, and path parameters
    (``;jsessionid=...``, a session token) were kept. It is now logged percent-encoded as sent
    (RFC 3986 section 2.1), without path parameters, on one line."""
    request = httpx.Request("POST", ALERTS)
    target = redirect_target(httpx.Response(302, headers={"Location": FORGED}, request=request))
    assert target == "https://am.test/x%0A2026-12-06%2006:00:00%20ERROR%20forged%1b[31m/y"
    c1 = httpx.Response(302, headers=[(b"Location", b"/a\xc2\x85b\xc2\x9bc")], request=request)
    assert redirect_target(c1) == "http://am.test:9093/a%C2%85b%C2%9Bc"  # (C1 controls, UTF-8)
    n, rec, clock = make(
        db, ForgingRedirect, notify_alertmanager_url=f"{AM},{AM2}", notify_webhook_url=None
    )
    open_incidents(db, 1)
    rec.down[ALERTS] = 302
    with caplog.at_level("WARNING"):
        settle(n, clock)
    [line] = [r.getMessage() for r in caplog.records if "answered 302" in r.getMessage()]
    assert f"redirects to {target}," in line
    assert not any(ch in line for ch in "\n\r\x1b\x85\x9b") and "S3SS10N" not in line


def _owe_three_resolutions(
    db: Database,  # noqa: F811
    **kw: object,
) -> tuple[Notifier, Receivers, Clock, int]:
    """A closed incident whose second peer was down through A -> B -> C -> closed: it owes that
    peer the three resolutions (A's, B's, C's), no firing alert after them."""
    n, rec, clock = make(db, Validating, notify_alertmanager_url=f"{AM},{AM2}", **kw)
    [inc] = open_incidents(db, 1, node="c0/host/h1")
    settle(n, clock)
    rec.down[ALERTS2] = 503
    for node in ["c0/host/h3", "c0/host/h4"]:
        db.set_incident_rca(inc, [cause(node, 0.9), cause("c0/host/h2", 0.05)], "gat", None)
        clock.t += 1
        n.poll()
        clock.t += 31
        n.poll()
    close(db, inc)
    clock.t += 1
    n.poll()
    return n, rec, clock, inc


def _owed(database: Database) -> list[tuple[str, list[str]]]:
    """The resolutions still owed: ``(cause_node, the URLs that have not taken it)``."""
    with database.read() as conn:
        delivery = conn.execute(select(notifications)).one()._mapping["delivery"] or {}
    return [
        (e["alert"]["labels"]["cause_node"], e["alertmanager"]) for e in delivery.get(OUTBOX, [])
    ]


def test_a_closed_incidents_first_resolution_refused_alone_does_not_hold_the_others(
    db: Database,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The second peer, back, is owed A's, B's and C's resolutions; A's is invalid there
    (Alertmanager answers 400 to a post with an invalid alert, api/v2 ``postAlertsHandler``).
    With the budget spent (0 here) the post is refused, A's posted alone is refused too and
    B's and C's wait; nothing taken, A's was kept and came first again at each re-send interval:
    B and C never went until ``FLEETMIND_NOTIFY_GIVE_UP_S`` (1 h). A resolution refused on its own
    now comes after the others owed, so they go; it stays owed (nothing shows it invalid rather
    than the peer refusing everything) until the give-up time."""
    monkeypatch.setattr(notify, "REFUSAL_BUDGET_S", 0.0, raising=False)
    n, rec, clock, _ = _owe_three_resolutions(db, notify_webhook_url=None)
    with db.write() as conn:
        delivery = dict(conn.execute(select(notifications)).one()._mapping["delivery"])
        assert [e["alert"]["labels"]["cause_node"] for e in delivery[OUTBOX]] == [
            "c0/host/h1",
            "c0/host/h3",
            "c0/host/h4",
        ]
        delivery[OUTBOX][0]["alert"]["startsAt"] = "2099-01-01T00:00:00+00:00"  # invalid
        conn.execute(notifications.update().values(delivery=delivery))
    del rec.down[ALERTS2]
    caplog.set_level("ERROR")
    clock.t += 1
    n.poll()  # refused, A's alone refused too: held for the re-send interval, nothing dropped
    assert _owed(db) == [(node, [ALERTS2]) for node in ["c0/host/h1", "c0/host/h3", "c0/host/h4"]]
    for _ in range(62):  # the re-send interval, then a couple of polls
        clock.t += 1
        n.poll()
    took = [a["labels"]["cause_node"] for b in rec.took(ALERTS2) for a in b if "endsAt" in a]
    assert sorted(took) == ["c0/host/h3", "c0/host/h4"]
    assert _owed(db) == [("c0/host/h1", [ALERTS2])]
    assert not [r for r in caplog.records if "dropped" in r.getMessage()]


def test_a_peer_refusing_every_alert_loses_no_resolution_before_the_give_up_time(
    db: Database,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A second peer that answers 400 to every post (a proxy's "plain HTTP request sent to HTTPS
    port") takes none of the three resolutions owed: each refused alone in turn is kept (only a
    peer that takes another alert of the incident shows that one was invalid), until
    ``FLEETMIND_NOTIFY_GIVE_UP_S`` (10 min here) drops them all."""
    monkeypatch.setattr(notify, "REFUSAL_BUDGET_S", 0.0, raising=False)
    n, rec, clock, _ = _owe_three_resolutions(db, notify_webhook_url=None, notify_give_up_s=600.0)
    rec.down[ALERTS2] = 400
    caplog.set_level("ERROR")
    for _ in range(500):
        clock.t += 1
        n.poll()
        assert [urls for _, urls in _owed(db)] == [[ALERTS2]] * 3
    assert rec.tried(ALERTS2) > 10  # (tried at each re-send interval, each refused in turn)
    assert not [r for r in caplog.records if "dropped" in r.getMessage()]
    for _ in range(120):
        clock.t += 1
        n.poll()
    assert _owed(db) == []
    dropped = [r.getMessage() for r in caplog.records if "dropped" in r.getMessage()]
    assert len(dropped) == 3 and all("undelivered too long" in m for m in dropped)


class SlowTooLarge(TooLarge):
    """:class:`TooLarge`, each post to the first peer taking ``post_s`` of the fake clock (read as
    ``time.monotonic`` too), taken or refused: a slow proxy in front of it."""

    post_s = 0.4

    def __call__(self, request):  # type: ignore[no-untyped-def]
        if str(request.url) == ALERTS:
            self.clock.t += self.post_s
        return super().__call__(request)


def test_taking_a_refused_batch_apart_counts_the_posts_taken_against_the_budget(
    db: Database,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """40 resolutions and the firing alert owed to the first peer, whose proxy answers 413 to a
    post of more than one alert and takes single alerts, each post taking 0.4 s. Only refused
    posts counted against ``REFUSAL_BUDGET_S`` (1 s here): the alerts taken alone cost nothing,
    so all 41 went in one poll (with the real 5 s budget and 4.7 s a post, over 3 minutes before
    the other peer got anything). Every post of the take-apart now counts: at most the budget's
    posts and three more a poll, and the peer still gets every resolution, in a few polls."""
    monkeypatch.setattr(notify, "REFUSAL_BUDGET_S", 1.0, raising=False)
    n, rec, clock = make(
        db, SlowTooLarge, notify_alertmanager_url=f"{AM},{AM2}", notify_webhook_url=None
    )
    _monotonic_is(monkeypatch, clock)
    [inc] = open_incidents(db, 1, node="c0/host/h0", score=0.9)
    settle(n, clock)
    nodes = _owe_while_down(db, n, rec, clock, inc, last=41)  # A..A
    assert len(_owed(db)) == 40
    del rec.down[ALERTS]
    clock.t += 61
    polls = 0
    while polls < 60:
        before = len(rec.calls)
        n.poll()
        polls += 1
        assert len([u for u, _, _ in rec.calls[before:] if u == ALERTS]) <= 1.0 / 0.4 + 3
        assert firing_on(am_state(rec.took(ALERTS)), "c0/host/h1") == ["firing"]
        if not _owed(db):
            break
        clock.t += 1
    assert polls < 40
    ended = {a["labels"]["cause_node"] for b in rec.took(ALERTS) for a in b if "endsAt" in a}
    assert ended == {"c0/host/h0", *nodes}


def test_valid_resolutions_marked_while_a_peer_refused_everything_are_not_dropped(
    db: Database,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The first peer owes eleven resolutions; its proxy answers 400 to every post for two
    minutes (maintenance), which marks valid resolutions as refused on their own; then it takes
    single alerts and answers 413 to larger posts, with the refusal budget running out. A mark
    alone dropped the marked ones as soon as the peer took another alert of the incident, though
    they were valid: every one must arrive."""
    monkeypatch.setattr(notify, "REFUSAL_BUDGET_S", 1.0, raising=False)
    n, rec, clock = make(
        db, SlowTooLarge, notify_alertmanager_url=f"{AM},{AM2}", notify_webhook_url=None
    )
    _monotonic_is(monkeypatch, clock)
    [inc] = open_incidents(db, 1, node="c0/host/h0", score=0.9)
    settle(n, clock)
    nodes = _owe_while_down(db, n, rec, clock, inc, last=12)  # A..A
    rec.down[ALERTS] = 400  # a maintenance proxy refuses every post
    rec.limit = False
    for _ in range(130):
        clock.t += 1
        n.poll()
    del rec.down[ALERTS]
    rec.limit = True  # a body-size proxy: 413 to posts of several alerts
    caplog.set_level("ERROR")
    clock.t += 61
    for _ in range(40):
        n.poll()
        clock.t += 1
        if not _owed(db):
            break
    ended = {a["labels"]["cause_node"] for b in rec.took(ALERTS) for a in b if "endsAt" in a}
    assert ended == {"c0/host/h0", *nodes}
    assert not [r for r in caplog.records if "dropped" in r.getMessage()]


def test_resends_to_a_body_limited_slow_peer_reach_every_incident(
    db: Database,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Twenty open incidents' re-sends go to the first peer in one post, which it refuses (413
    for several alerts, each post 1 s); taken apart, the firing alerts it takes must not spend
    the refusal budget, or the same first few incidents would be re-sent every time and the rest
    never (the peer would end them after its ``resolve_timeout``)."""

    class Slow(TooLarge):
        def __call__(self, request):  # type: ignore[no-untyped-def]
            if str(request.url) == ALERTS:
                self.clock.t += 1.0
            return super().__call__(request)

    n, rec, clock = make(db, Slow, notify_alertmanager_url=f"{AM},{AM2}", notify_webhook_url=None)
    _monotonic_is(monkeypatch, clock)
    incs = open_incidents(db, 20)
    settle(n, clock)
    start = len(rec.calls)
    for _ in range(400):
        clock.t += 1
        n.poll()
    got = {
        a["labels"]["incident"] for u, ok, b in rec.calls[start:] if u == ALERTS and ok for a in b
    }
    assert len(got) == len(incs)


def test_a_slow_body_limited_peer_does_not_delay_the_other_peer(
    db: Database,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A hundred open incidents; the first peer answers 413 to posts of several alerts and takes
    single alerts, each post taking 1 s. Taken apart without a bound, a re-send round cost it one
    post per incident (about 100 s) before the other peer got its re-sends; within the refusal
    budget, the other peer's post comes within the budget and three posts of the poll's start,
    every re-send reaches the other peer within ``RESEND_S`` and a few seconds, and the first
    peer catches up on what it deferred at the next polls."""

    class Slow(TooLarge):
        post_s = 0.0

        def __call__(self, request):  # type: ignore[no-untyped-def]
            if str(request.url) == ALERTS:
                self.clock.t += self.post_s
            self.times = [*getattr(self, "times", []), (str(request.url), self.clock.t)]
            return super().__call__(request)

    n, rec, clock = make(db, Slow, notify_alertmanager_url=f"{AM},{AM2}", notify_webhook_url=None)
    _monotonic_is(monkeypatch, clock)
    open_incidents(db, 100)
    settle(n, clock)
    rec.post_s = 1.0
    for _ in range(4):
        clock.t += 61
        start, k = clock.t, len(rec.times)
        n.poll()
        first = next(t for u, t in rec.times[k:] if u == ALERTS2)
        assert first - start <= notify.REFUSAL_BUDGET_S + 3.0
    got: dict[str, int] = {}
    for _ in range(120):  # a couple of re-send intervals of one-second polls
        clock.t += 1
        n.poll()
    for u, ok, b in rec.calls:
        if u == ALERTS and ok:
            for a in b:
                got[a["labels"]["incident"]] = got.get(a["labels"]["incident"], 0) + 1
    assert len(got) == 100
