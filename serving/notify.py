"""Root causes sent where on-call already looks: Alertmanager and a generic JSON webhook.

A :class:`Notifier` thread (in the process that holds the incident worker's leader lock) reads the
incidents every ``FLEETMIND_NOTIFY_POLL_S``. When an open incident's top cause has stayed the same
for ``FLEETMIND_NOTIFY_SETTLE_S`` (the ranking has *settled*), it

* posts one ``FleetMindRootCause`` alert to ``FLEETMIND_NOTIFY_ALERTMANAGER_URL`` ``/api/v2/alerts``
  (labels ``alertname``, ``incident``, ``cause_node``, ``cause_kind``, ``cluster``, ``severity``;
  annotations ``summary``, ``path``, ``score``, ``fault_type``, ``incident_url``; ``generatorURL``
  links to the incident page), re-posted every ``FLEETMIND_NOTIFY_RESEND_S`` like any alert source
  (Alertmanager ends alerts that are not re-sent within its ``resolve_timeout``), so the user's own
  routes carry it to Slack, PagerDuty or OnCall;
* posts one message to ``FLEETMIND_NOTIFY_WEBHOOK_URL``: Slack-compatible JSON (``text`` in Slack
  mrkdwn) plus the same facts under ``fleetmind``.

The alert's ``severity`` comes from the top cause's calibrated score (:func:`severity_for`):
``critical`` at or above ``FLEETMIND_NOTIFY_CRITICAL_SCORE``, ``warning`` at or above
``FLEETMIND_NOTIFY_WARNING_SCORE``, and no alert below it (the incident page still lists the cause).

When the incident resolves (or is merged into another), the alert is posted again with ``endsAt``
(resolved) and the webhook gets a resolved message. When a settled top cause or its severity changes,
the old alert is resolved and the new one sent; when its score falls below the warning floor, the
alert is resolved. Failed posts are retried ``FLEETMIND_NOTIFY_RETRIES`` times with
exponential backoff (``FLEETMIND_NOTIFY_BACKOFF_S``, doubling; on connection errors, 408, 429 and
5xx, never on other 4xx) and then again on a later poll. What was delivered is stored in the
``notifications`` table, so a restart neither repeats a message nor forgets to resolve an alert;
its ``delivery`` column keeps what became of the firing message on each channel (sent, failing,
dropped: :func:`delivery_outcome`), so the incident page says "sent" only for a delivered one and
the webhook gets a resolved message only for a firing one it took.
"""

from __future__ import annotations

import logging
import math
import threading
import time
import weakref
from collections.abc import Callable, Mapping
from typing import Any

import httpx
from sqlalchemy import select

from fleetmind.serving.db import Database, notifications
from fleetmind.serving.schemas import from_unix
from fleetmind.serving.settings import Settings

log = logging.getLogger("fleetmind.serving.notify")

ALERTNAME = "FleetMindRootCause"
CLOSED, SUPERSEDED, UNSURE = "incident closed", "root cause changed", "score below the floor"
"""Why a FleetMindRootCause alert was resolved (annotation ``resolved_because``, and the webhook's
wording): its incident resolved or was merged; the incident's settled top cause (or its severity)
changed; its score fell below ``FLEETMIND_NOTIFY_WARNING_SCORE``."""
RETRY_STATUS = frozenset({408, 425, 429, 500, 502, 503, 504})
CLUSTER_CHARS = 256
"""Longest ``cluster`` label a notification carries (an incident's clusters come from the
``cluster`` labels of its alerts, which anyone who can post alerts chooses)."""


def mrkdwn(text: str) -> str:
    """``text`` as literal Slack mrkdwn: ``&``, ``<`` and ``>`` escaped, as Slack's "Escaping text"
    rule asks, so that no value from an alert label becomes a ``<!channel>`` ping or a link."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def code_span(text: str) -> str:
    """``text`` as one mrkdwn code span: escaped (:func:`mrkdwn`), backticks and line breaks
    replaced so that it cannot close the span, and no formatting applies inside it."""
    flat = " ".join(str(text).replace("`", "'").split())
    return f"`{mrkdwn(flat)}`"


_COUNTERS: weakref.WeakKeyDictionary[Any, Any] = weakref.WeakKeyDictionary()


CALIBRATED_METHODS = frozenset({"gat"})
"""Ranking methods whose top score is a calibrated probability (``fleetmind rca calibrate``)."""


def severity_for(
    score: Any, settings: Settings, method: str | None = "gat", top: Any = None
) -> str | None:
    """``severity`` of the FleetMindRootCause alert for a top cause's ``score``.

    The GAT's top score is a calibrated probability that the cause is the root (temperature
    scaling, ``fleetmind rca calibrate``), so the thresholds read as "right at least this often":
    ``critical`` from ``FLEETMIND_NOTIFY_CRITICAL_SCORE``, ``warning`` from
    ``FLEETMIND_NOTIFY_WARNING_SCORE``, and ``None`` (no alert) below, or for a score that is not
    a finite number. A method outside :data:`CALIBRATED_METHODS` (a baseline the service fell
    back to, whose scores are not probabilities) is never ``critical``: its causes are sent as
    ``warning``. Neither is a cause (``top``: the cause's JSON) that names no fault its node can
    have (``fault_type`` unknown or absent) or a whole cluster: a page must say what broke, and a
    cluster as root cause is what an alert from a host the graph does not know maps to.
    """
    if method is not None and method not in CALIBRATED_METHODS:
        return "warning"
    vague = top is not None and (
        (top.get("fault_type") or "unknown") == "unknown" or top.get("kind") == "cluster"
    )
    try:
        p = float(score)
    except (TypeError, ValueError):
        return None
    if not p == p or p in (float("inf"), float("-inf")):  # NaN or infinite
        return None
    if p >= settings.notify_critical_score and not vague:
        return "critical"
    if p >= settings.notify_warning_score:
        return "warning"
    return None


def _counter(registry: Any) -> Any:
    """The ``fleetmind_notifications_total`` counter on ``registry`` (created once per registry)."""
    from prometheus_client import Counter

    counter = _COUNTERS.get(registry)
    if counter is None:
        counter = _COUNTERS[registry] = Counter(
            "fleetmind_notifications",
            "root-cause notifications by channel (alertmanager, webhook) and outcome",
            ["channel", "outcome"],
            registry=registry,
        )
    return counter


def _iso(ts: float) -> str:
    return from_unix(ts).isoformat().replace("+00:00", "Z")


def post_with_retry(
    client: httpx.Client,
    url: str,
    body: Any,
    retries: int,
    backoff_s: float,
    stop: threading.Event | None = None,
) -> tuple[bool, str]:
    """POST ``body`` as JSON; retry transient failures with exponential backoff.

    Returns:
        ``(delivered, last outcome)``; the outcome is the HTTP status or the error's class name.
    """
    outcome = ""
    for attempt in range(retries + 1):
        try:
            r = client.post(url, json=body)
            outcome = str(r.status_code)
            if r.status_code < 300:
                return True, outcome
            if is_final(outcome):
                return False, outcome  # a 4xx will not get better by asking again
        except httpx.HTTPError as err:
            outcome = type(err).__name__
        if attempt < retries:
            delay = backoff_s * (2**attempt)
            if stop is not None:
                if stop.wait(delay):
                    break
            else:
                time.sleep(delay)
    return False, outcome


def is_final(outcome: str) -> bool:
    """Whether a failed post's ``outcome`` (:func:`post_with_retry`'s) will not get better by
    asking again: an HTTP status outside :data:`RETRY_STATUS` (a revoked chat URL's 404)."""
    return outcome.isdigit() and int(outcome) not in RETRY_STATUS


def confidence_words(
    score: Any,
    settings: Settings,
    method: str | None,
    top: Any = None,
    sent: bool = False,
    is_open: bool = True,
    failing: str | None = None,
    dropped: str | None = None,
) -> str:
    """How sure the top cause is, in the words the incident page shows beside it, and what the
    notifier does with it.

    The same thresholds as :func:`severity_for`: ``high`` (pages as critical), ``medium``
    (notifies as a warning: ``warning`` goes to a channel, it does not page), ``low`` (not sent);
    a method without calibrated scores says so instead of guessing. ``sent``: a channel took this
    cause at this severity (its ``notifications`` row, :func:`delivery_outcome`); ``failing``:
    why sending it failed so far while it is retried; ``dropped``: why the notifier gave up on it.
    Otherwise the words say what will happen: nothing while no notification URL is set, a page
    once the ranking settles (``FLEETMIND_NOTIFY_SETTLE_S``) while the incident is open.
    """
    if method is not None and method not in CALIBRATED_METHODS:
        return "confidence unknown: this ranker's scores are not probabilities"
    sev = severity_for(score, settings, method, top)
    try:
        # rounded down: 0.6996 is below a 0.7 threshold and must not read "70 %"
        pct = f"{math.floor(100 * float(score) + 1e-9)} %"
    except (TypeError, ValueError, OverflowError):
        return "confidence unknown"
    if sev is None:
        return f"low confidence ({pct}): not sent; treat the list as leads"
    as_sev = "as critical" if sev == "critical" else "as a warning"
    # a warning goes to a channel, it does not page anyone
    verb, verbs = ("page", "pages") if sev == "critical" else ("notify", "notifies")
    notifying = any(u.strip() for u in (settings.notify_alertmanager_url or "").split(","))
    if sent:  # by a channel; one that did not is named (on-call may rely on that one)
        gaps = [f"{failing}, retrying" if failing and is_open else failing, dropped]
        gaps = [g for g in gaps if g]
        outcome = f"sent {as_sev}" + (f" (not everywhere: {'; '.join(gaps)})" if gaps else "")
    elif not (notifying or settings.notify_webhook_url):
        outcome = f"would {verb} {as_sev} (notifications are off)"
    elif failing and is_open:
        outcome = f"sending {as_sev} failed ({failing}); retrying"
    elif dropped:
        outcome = f"not sent {as_sev} ({dropped})"
    elif failing:
        outcome = f"not sent {as_sev} (the incident closed first; sending failed: {failing})"
    elif is_open:
        outcome = f"{verbs} {as_sev} once settled"
    else:
        outcome = f"not sent {as_sev} (the incident closed first)"
    if sev == "critical":
        return f"high confidence ({pct}, calibrated): {outcome}"
    if float(score) >= settings.notify_critical_score:  # capped: see severity_for
        return (
            f"high score ({pct}) but no fault type its node can have, or a whole cluster: "
            f"{outcome}; check the alerts' labels against the graph"
        )
    return f"medium confidence ({pct}): {outcome}; check the next causes too"


CHANNEL_NAMES = {"alertmanager": "Alertmanager", "webhook": "the webhook"}


def delivery_outcome(row: Mapping[str, Any]) -> tuple[bool, str | None, str | None]:
    """What became of a ``notifications`` row's firing message: ``(sent, failing, dropped)``.

    ``sent``: some channel took it (a resolved row keeps this: it is about the firing message, not
    the resolution); ``failing`` names the channels that did not and are still retried, with
    their last outcome (``"the webhook: 500"``), and ``dropped`` those the notifier gave up on and
    why (``"the webhook refused it: 404"``), whether or not another channel took it. A row from before the ``delivery`` column (``NULL``)
    counts as sent while firing if a channel took this state, and as unknown (not sent) resolved.
    """
    delivery = row.get("delivery")
    if delivery is None:
        sent = row["state"] == "firing" and (
            row.get("am_sent_ts") is not None or bool(row.get("hook_sent"))
        )
        return sent, None, None
    failing, dropped = [], []
    for channel, outcome in sorted(delivery.items()):
        name = CHANNEL_NAMES.get(channel, channel)
        if outcome == "sent":
            continue
        if not outcome.startswith("dropped: "):
            failing.append(f"{name}: {outcome}")
        elif is_final(why := outcome.removeprefix("dropped: ")):
            dropped.append(f"{name} refused it: {why}")
        else:
            dropped.append(f"{name} failed until FLEETMIND_NOTIFY_GIVE_UP_S: {why}")
    sent = "sent" in delivery.values()
    return sent, "; ".join(failing) or None, "; ".join(dropped) or None


class Notifier:
    """Sends settled root causes out (see the module docstring).

    Args:
        db: the service database (incidents are read, ``notifications`` written).
        settings: the ``FLEETMIND_NOTIFY_*`` settings and ``public_url``.
        is_leader: whether this process runs the incident worker (only the leader notifies).
        registry: optional Prometheus registry for the ``fleetmind_notifications`` counter.
        clock: seconds since the epoch (tests pass a fake one).
        transport: optional httpx transport (tests).
    """

    def __init__(
        self,
        db: Database,
        settings: Settings,
        is_leader: Callable[[], bool] = lambda: True,
        registry: Any = None,
        clock: Callable[[], float] = time.time,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.db = db
        self.settings = settings
        self.is_leader = is_leader
        self.clock = clock
        # every instance of an Alertmanager HA pair gets every alert: they gossip silences and
        # the notification log, not alerts (Prometheus likewise sends to each instance)
        self.am_urls = [
            base.strip().rstrip("/") + "/api/v2/alerts"
            for base in (settings.notify_alertmanager_url or "").split(",")
            if base.strip()
        ]
        self.am_url = self.am_urls[0] if self.am_urls else None
        self.hook_url = settings.notify_webhook_url
        self._client = httpx.Client(timeout=5.0, transport=transport)
        self._seen: dict[int, tuple[str, float]] = {}  # incident -> (top cause, since)
        self._retry_at: dict[tuple[int, str], float] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.last_error: str | None = None
        self.counter = None if registry is None else _counter(registry)
        if self.counter is not None:  # each enabled channel's series exist at 0 from the start:
            # rate()/increase() see only increases between samples, so a first failure that
            # created its series would be invisible to an alert on it
            for channel in ("alertmanager",) * bool(self.am_urls) + ("webhook",) * bool(
                self.hook_url
            ):
                for outcome in ("sent", "failed"):
                    self.counter.labels(channel, outcome)

    @property
    def enabled(self) -> bool:
        return bool(self.am_urls or self.hook_url)

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> None:
        if self._thread is not None or not self.enabled:
            return
        self._thread = threading.Thread(target=self._run, name="fleetmind-notify", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None
        self._client.close()

    def _run(self) -> None:
        while not self._stop.wait(self.settings.notify_poll_s):
            if not self.is_leader():
                continue
            try:
                self.poll()
                self.last_error = None
            except Exception as err:  # keep notifying; the database may be back next time
                self.last_error = f"{type(err).__name__}: {err}"
                log.exception("notifier failed; retrying")

    # ------------------------------------------------------------------ one round
    def poll(self) -> int:
        """Settle, send and resolve once; returns how many deliveries succeeded."""
        now = self.clock()
        sent = 0
        n = notifications.c
        pending = select(notifications).where(
            (n.state == "firing") | n.am_sent_ts.is_(None) | n.hook_sent.is_(False)
        )
        with self.db.read() as conn:  # rows done with (resolved and delivered) are not read
            rows = {r.incident_id: dict(r._mapping) for r in conn.execute(pending)}
        open_incs = self.db.list_incidents("open", limit=100_000)
        open_ids = set()
        for inc in open_incs:
            open_ids.add(inc["id"])
            causes = inc["causes"] or []
            if not causes:
                continue
            top = causes[0]
            node = top["node"]
            severity = severity_for(top.get("score"), self.settings, inc.get("method"), top)
            seen = self._seen.get(inc["id"])
            if seen is None or seen[0] != (node, severity):
                self._seen[inc["id"]] = ((node, severity), now)
                seen = self._seen[inc["id"]]
            if 0 <= now - seen[1] < self.settings.notify_settle_s:  # (< 0: the clock stepped back)
                continue
            row = rows.get(inc["id"])
            firing = row is not None and row["state"] == "firing"
            if firing and row["cause_node"] == node and row["labels"]["severity"] == severity:
                self._refresh(row, inc, top)  # the next re-send carries today's counts
                continue
            if firing:  # the settled cause or its severity changed, or it fell below the floor
                because = SUPERSEDED if severity is not None else UNSURE
                self._set_resolved(row, now, because)
                sent += self._deliver(row, now, inc)
            if severity is None:  # too unsure to page anyone: the incident page still shows it
                continue
            rows[inc["id"]] = self._set_firing(inc, top, severity, now)
        for inc_id in list(self._seen):
            if inc_id not in open_ids:
                self._seen.pop(inc_id, None)
        for inc_id, row in rows.items():
            if row["state"] == "firing" and inc_id not in open_ids:
                self._set_resolved(row, now, CLOSED)
            sent += self._deliver(row, now)
        return sent

    def _set_firing(
        self, inc: dict[str, Any], top: dict[str, Any], severity: str, now: float
    ) -> dict[str, Any]:
        cluster = top.get("cluster") or ",".join(inc["clusters"] or []) or "unknown"
        if len(cluster) > CLUSTER_CHARS:  # an incident's clusters come from alert labels
            cluster = cluster[: CLUSTER_CHARS - 1] + "…"
        labels = {
            "alertname": ALERTNAME,
            "incident": str(inc["id"]),
            "cause_node": top["node"],
            "cause_kind": top.get("kind") or "unknown",
            "cluster": cluster,
            "severity": severity,
        }
        row = {
            "incident_id": inc["id"],
            "state": "firing",
            "cause_node": top["node"],
            "labels": labels,
            "annotations": self._annotations(inc, top, cluster),
            "starts_at": _iso(now),
            "ends_at": None,
            "am_sent_ts": None,
            "hook_sent": False,
            "delivery": {},  # the firing message's fate per channel (see delivery_outcome)
            "updated_ts": now,
        }
        self._save(row)
        return row

    def _annotations(
        self, inc: dict[str, Any], top: dict[str, Any], cluster: str
    ) -> dict[str, str]:
        """The FleetMindRootCause annotations of incident ``inc`` whose top cause is ``top``."""
        fault = top.get("fault_type") or ""
        return {
            "summary": f"Root cause of incident {inc['id']}: {top['node']}"
            + (f" ({fault})" if fault else ""),
            "description": f"{inc['firing_count']} firing alerts in {cluster}; FleetMind ranks "
            f"{top['node']} first ({inc['method'] or 'rca'}).",
            "path": " -> ".join(top.get("path") or [top["node"]]),
            "score": f"{float(top['score']):.4f}",
            "fault_type": fault,
            "incident_url": f"{self.settings.public_url.rstrip('/')}/ui/incidents/{inc['id']}",
        }

    def _refresh(self, row: dict[str, Any], inc: dict[str, Any], top: dict[str, Any]) -> None:
        """Bring a firing row's annotations (firing count, score, path) up to the incident as it
        is now; Alertmanager replaces an alert's annotations at each re-send, keyed by its labels,
        which stay as they were."""
        fresh = self._annotations(inc, top, row["labels"]["cluster"])
        if fresh == row["annotations"]:
            return
        row["annotations"] = fresh
        with self.db.write() as conn:
            conn.execute(
                notifications.update()
                .where(notifications.c.incident_id == row["incident_id"])
                .where(notifications.c.state == "firing")
                .values(annotations=fresh)
            )

    def _set_resolved(self, row: dict[str, Any], now: float, because: str = CLOSED) -> None:
        """Turn ``row`` into its resolution, to be delivered. The webhook gets no resolved (or
        withdrawn) message for a firing one it never took: "Resolved incident 13" in a channel
        that never heard of incident 13 is noise. Alertmanager still gets the alert with
        ``endsAt``: an alert it does not have is a no-op there, and one instance of an HA pair
        may have taken the firing alert even if the row does not say so."""
        row["annotations"] = {**row["annotations"], "resolved_because": because}
        delivery = row.get("delivery")  # None: a row from before it was stored (send as before)
        hook_unsent = delivery is not None and delivery.get("webhook") != "sent"
        row.update(state="resolved", ends_at=_iso(now), am_sent_ts=None, hook_sent=hook_unsent)
        row["updated_ts"] = now
        self._save(row)

    def _save(self, row: dict[str, Any]) -> None:
        with self.db.write() as conn:
            conn.execute(
                notifications.delete().where(notifications.c.incident_id == row["incident_id"])
            )
            conn.execute(notifications.insert().values(**row))

    # ------------------------------------------------------------------ delivery
    def _deliver(self, row: dict[str, Any], now: float, _inc: dict[str, Any] | None = None) -> int:
        """Send what ``row``'s state still needs; returns the number of successful deliveries."""
        done = 0
        inc_id = row["incident_id"]
        changed = False
        firing = row["state"] == "firing"
        # the firing message's fate is recorded (a row from before the column was added: not)
        track = firing and row.get("delivery") is not None
        if track:
            row["delivery"] = dict(row["delivery"])
        if self.am_url:
            # a send "in the future" means the wall clock stepped back: re-send now, or
            # Alertmanager's resolve_timeout would end the alert while the clock catches up
            due = row["am_sent_ts"] is None or (
                firing and not 0 <= now - row["am_sent_ts"] < self.settings.notify_resend_s
            )
            # one success is a delivery; an instance that missed it gets the next re-send
            ok, am_outcome = self._send_to_alertmanagers(row, inc_id, now) if due else (False, "")
            if track and am_outcome and row["delivery"].get("alertmanager") != "sent":
                row["delivery"]["alertmanager"] = "sent" if ok else am_outcome
                changed = True
            if ok:
                row["am_sent_ts"] = now
                changed = True
                done += 1
            elif due and not firing and self._overdue(row, now):
                row["am_sent_ts"] = now  # the resolution is dropped (Alertmanager's
                changed = True  # resolve_timeout ends an alert no longer re-sent anyway)
                self._give_up("alertmanager", inc_id, "undelivered too long")
        if self.hook_url and not row["hook_sent"]:
            if self._retry_at.get((inc_id, "hook"), 0.0) <= now:
                sent, outcome = self._send(
                    "webhook", self.hook_url, self.webhook_body(row), inc_id, now
                )
                dropped = not sent and (is_final(outcome) or self._overdue(row, now))
                if dropped:
                    self._give_up("webhook", inc_id, outcome)
                if track:
                    note = "sent" if sent else f"dropped: {outcome}" if dropped else outcome
                    row["delivery"]["webhook"] = note
                    changed = True
                if sent or dropped:
                    row["hook_sent"] = True
                    changed = True
                    done += sent
        if changed:
            with self.db.write() as conn:
                conn.execute(
                    notifications.update()
                    .where(notifications.c.incident_id == inc_id)
                    .where(notifications.c.state == row["state"])
                    .values(
                        am_sent_ts=row["am_sent_ts"],
                        hook_sent=row["hook_sent"],
                        delivery=row.get("delivery"),
                    )
                )
        return done

    def _send_to_alertmanagers(
        self, row: dict[str, Any], inc_id: int, now: float
    ) -> tuple[bool, str]:
        """Post ``row``'s alert to every Alertmanager not in back-off; ``(whether any took it,
        an outcome)``: a taker's, else the last failure's, ``""`` when none was tried."""
        body = [self.alertmanager_alert(row)]
        took, last = False, ""
        for i, url in enumerate(self.am_urls):
            key = "am" if i == 0 else f"am{i}"
            if self._retry_at.get((inc_id, key), 0.0) <= now:
                ok, outcome = self._send("alertmanager", url, body, inc_id, now, key)
                if ok or not took:
                    last = outcome
                took = ok or took
        return took, last

    def _send(
        self, channel: str, url: str, body: Any, inc_id: int, now: float, key_name: str = ""
    ) -> tuple[bool, str]:
        """Post ``body`` (with :func:`post_with_retry`); ``(delivered, last outcome)``. A failure
        puts the channel of ``inc_id`` in back-off until a later round."""
        ok, outcome = post_with_retry(
            self._client,
            url,
            body,
            self.settings.notify_retries,
            self.settings.notify_backoff_s,
            self._stop,
        )
        if self.counter is not None:
            self.counter.labels(channel, "sent" if ok else "failed").inc()
        key = (inc_id, key_name or ("am" if channel == "alertmanager" else "hook"))
        if ok:
            self._retry_at.pop(key, None)
        else:
            # after the in-call retries, wait before the next round tries again (capped at 5 min)
            pause = min(
                300.0,
                max(1.0, self.settings.notify_backoff_s) * 2 ** (self.settings.notify_retries + 1),
            )
            self._retry_at[key] = now + pause
            log.warning("%s notification for incident %s failed (%s)", channel, inc_id, outcome)
        return ok, outcome

    def _overdue(self, row: dict[str, Any], now: float) -> bool:
        """Whether ``row``'s message has waited longer than ``FLEETMIND_NOTIFY_GIVE_UP_S`` (since
        its state last changed; a clock stepped back counts as not overdue)."""
        return now - float(row["updated_ts"]) > self.settings.notify_give_up_s

    def _give_up(self, channel: str, inc_id: int, why: str) -> None:
        """Log once that incident ``inc_id``'s message to ``channel`` is dropped, and why."""
        self._retry_at.pop((inc_id, "am" if channel == "alertmanager" else "hook"), None)
        log.error(
            "%s notification for incident %s dropped (%s); later messages are still sent",
            channel,
            inc_id,
            why,
        )

    @staticmethod
    def alertmanager_alert(row: dict[str, Any]) -> dict[str, Any]:
        """The ``POST /api/v2/alerts`` item of a notification row."""
        alert = {
            "labels": row["labels"],
            "annotations": row["annotations"],
            "startsAt": row["starts_at"],
            "generatorURL": row["annotations"]["incident_url"],
        }
        if row["state"] == "resolved" and row["ends_at"]:
            alert["endsAt"] = row["ends_at"]
        return alert

    @staticmethod
    def webhook_body(row: dict[str, Any]) -> dict[str, Any]:
        """Slack-compatible JSON: ``text`` (mrkdwn) for Slack, the same facts under ``fleetmind``."""
        a, lab = row["annotations"], row["labels"]
        resolved = row["state"] == "resolved"
        because = a.get("resolved_because") or CLOSED if resolved else None
        link = f"<{a['incident_url']}|incident {lab['incident']}>"
        node, cluster, path = (code_span(v) for v in (lab["cause_node"], lab["cluster"], a["path"]))
        if because == SUPERSEDED:  # the incident is still open: its root cause changed
            text = (
                f":arrows_counterclockwise: Root cause of {link} changed: {node} "
                "withdrawn, the new one follows"
            )
        elif because == UNSURE:
            text = (
                f":grey_question: Root cause {node} of {link} withdrawn: the "
                "model is no longer sure (score below the warning floor); the incident is open"
            )
        elif resolved:
            text = f":white_check_mark: Resolved {link} (root cause was {node})"
        else:
            text = (
                f":rotating_light: Root cause of {link}: {node}"
                + (f" ({mrkdwn(a['fault_type'])})" if a.get("fault_type") else "")
                + f", score {a['score']}, cluster {cluster}\nPath: {path}"
            )
        return {
            "text": text,
            "fleetmind": {
                "status": row["state"],
                "resolved_because": because,
                "incident": int(lab["incident"]),
                "cause_node": lab["cause_node"],
                "cause_kind": lab["cause_kind"],
                "cluster": lab["cluster"],
                "fault_type": a.get("fault_type") or None,
                "score": float(a["score"]),
                "path": a["path"].split(" -> "),
                "incident_url": a["incident_url"],
                "starts_at": row["starts_at"],
                "ends_at": row["ends_at"],
            },
        }
