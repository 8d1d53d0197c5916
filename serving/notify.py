"""Root causes sent where on-call already looks: Alertmanager and a generic JSON webhook.

A :class:`Notifier` thread (in the process that holds the incident worker's leader lock) reads the
incidents every ``FLEETMIND_NOTIFY_POLL_S``. When an open incident's top cause has stayed the same
for ``FLEETMIND_NOTIFY_SETTLE_S`` (the ranking has *settled*), it

* posts one ``FleetMindRootCause`` alert to ``FLEETMIND_NOTIFY_ALERTMANAGER_URL`` ``/api/v2/alerts``
  (labels ``alertname``, ``fleetmind`` (the installation: :func:`installation`), ``incident``,
  ``cause_node``, ``cause_kind``, ``cluster``, ``severity``;
  annotations ``summary``, ``path``, ``score`` (four decimals, rounded down like the incident
  page: 0.69996 is "0.6999", below a 0.7 threshold), ``fault_type``, ``incident_url``;
  ``generatorURL`` links to the incident page), re-posted every ``FLEETMIND_NOTIFY_RESEND_S`` like any alert source
  (Alertmanager ends alerts that are not re-sent within its ``resolve_timeout``; the re-sends of
  all incidents go together, up to :data:`BATCH` alerts a post), so the user's own routes carry it
  to Slack, PagerDuty or OnCall;
* posts one message to ``FLEETMIND_NOTIFY_WEBHOOK_URL``: Slack-compatible JSON (``text`` in Slack
  mrkdwn) plus the same facts under ``fleetmind`` (its ``score`` the unrounded float).

The alert's ``severity`` comes from the top cause's calibrated score (:func:`severity_for`):
``critical`` at or above ``FLEETMIND_NOTIFY_CRITICAL_SCORE``, ``warning`` at or above
``FLEETMIND_NOTIFY_WARNING_SCORE``, and no alert below it (the incident page still lists the cause).

When the incident resolves (or is merged into another), the alert is posted again with ``endsAt``
(resolved) and the webhook gets a resolved message. When a settled top cause changes, the new one
is sent, and the old alert keeps firing beside it while an alert of the incident on its own node
still fires and the new cause does not explain it (:data:`KEPT`; resolved, :data:`CLEARED`, once
those have all resolved), else it is resolved (:data:`SUPERSEDED`); when its severity changes, the old alert is resolved (its
``severity`` label is part of its identity) and the new one sent, and the webhook gets one message
saying so; when its score falls below the warning floor, the alert is resolved. The severity has
hysteresis (:func:`held_severity`): it is lowered only once the score is
``FLEETMIND_NOTIFY_SEVERITY_MARGIN`` below the threshold it crossed.

Nothing sleeps in a poll: each post is tried once; a receiver that fails (connection error,
timeout, 407, 408, 425, 429, any 5xx) is not tried again in that poll, for any incident, and then waits
``FLEETMIND_NOTIFY_BACKOFF_S``, doubling with each failure in a row (at most
``FLEETMIND_NOTIFY_RETRIES`` times), or what a 429's or 503's ``Retry-After`` asks when longer.
An Alertmanager that answers that the receiver is wrong (a redirection, 401, 403, 404, 405, 407,
410, 421, 426: :data:`RECEIVER_STATUS`, e.g. an ingress' ssl-redirect, an auth proxy or a wrong
route prefix) fails the same way, its
alerts kept owed; the posts one refuses for their alerts (400, 413, 422...) take
:data:`REFUSAL_BUDGET_S` of a poll at most, the rest waiting for the next poll.
One post takes :data:`POST_TIMEOUT_S` at most in all, however slowly the receiver answers, and
the webhook's posts of a poll come after Alertmanager's and stop after
:data:`WEBHOOK_BUDGET_S` (the rest waits, in order, for the next poll). What was delivered is stored in the ``notifications`` table,
so a restart forgets to resolve no alert and re-sends nothing recorded as delivered (at least
once: a crash between a post and its record repeats it; the webhook's :func:`dedup_key` lets a
receiver drop the repeat, Alertmanager de-duplicates by labels); its ``delivery`` column
keeps what became of the firing message on each channel (sent, failing, dropped:
:func:`delivery_outcome`), so the incident page says "sent" only for a delivered one and the
webhook gets a resolved message only for a firing one it took, and the resolutions not yet
delivered everywhere (:data:`OUTBOX`: each Alertmanager of an HA pair until it takes it, the
webhook's in order before the next firing message), until ``FLEETMIND_NOTIFY_GIVE_UP_S``.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import re
import threading
import time
import weakref
import zlib
from collections.abc import Callable, Mapping
from datetime import datetime
from email.utils import parsedate_to_datetime
from typing import Any
from urllib.parse import quote, unquote, urlsplit

import httpcore
import httpx
from sqlalchemy import Text, bindparam, cast, select

from fleetmind.http_client import Deadline, hold_to
from fleetmind.http_client import client as proxied_client
from fleetmind.redact import can_cut, safe_uri, terminal_safe, without_password
from fleetmind.serving.db import Database, incidents, notifications
from fleetmind.serving.db import alerts as alert_rows
from fleetmind.serving.failure_log import FailureLog
from fleetmind.serving.schemas import from_unix
from fleetmind.serving.settings import Settings
from fleetmind.serving.ui.svg import isolate

log = logging.getLogger("fleetmind.serving.notify")

ALERTNAME = "FleetMindRootCause"
CLOSED, SUPERSEDED, UNSURE = "incident closed", "root cause changed", "score below the floor"
RESEVERED, NO_CAUSE = "severity changed", "no cause on the current graph"
CLEARED = "its alerts resolved"
"""Why a FleetMindRootCause alert was resolved (annotation ``resolved_because``, and the webhook's
wording): its incident resolved or was merged; the incident's settled top cause changed to another
node while this cause had no firing alert of its own (none mapped to its node) in the incident, or
the new top cause explains it (:func:`explained_by`: a fault of the new cause reaches its node,
so it was a symptom); its score
fell below ``FLEETMIND_NOTIFY_WARNING_SCORE``; the same cause is sent again at another severity
(the ``severity`` label is part of the alert's identity, so the old one must end); the incident,
still open, was ranked with no cause at all (none of its alerts names a node of the graph served
now, e.g. its cluster left the graph); every alert of the incident on the cause's own node
resolved while the incident stays open (:data:`KEPT`)."""
KEPT = "kept"
"""Key of a firing row's ``delivery`` JSON: the earlier causes of the incident still sent beside
the top one, oldest first, each ``{"labels", "annotations", "starts_at", "hook": <whether the
webhook took its firing message>}``. A sent cause stays firing (its labels, severity included, as
they were) while an alert of the incident on its own node (the node itself, not the nodes under
it: a GPU under a host is a cause of its own) still fires and the top cause does not explain it
(:func:`explained_by`; a top cause below the warning floor pages no one and explains nothing
here): a second, unrelated fault that joins an incident takes the top of the
model's single-root ranking, and the first fault still wants its page, while a symptom paged
before its root was seen (a pod crashing on the GPU that fails) is withdrawn (:data:`SUPERSEDED`)
when the root takes the top. It is re-sent with the top cause's alert and resolved once its own
alerts have all resolved (:data:`CLEARED`) or once a later top cause explains it
(:data:`SUPERSEDED`)."""
_EXPLAINS = "explains"
"""Key of a stored top cause listing the incident's alert nodes it explains, written by the
incident manager (:data:`fleetmind.serving.incidents.manager.EXPLAINS`, not imported: the
manager imports this module)."""


def explained_by(cause: Mapping[str, Any]) -> set[str]:
    """The incident alert nodes stored top cause ``cause`` explains (a fault of it reaches them,
    :data:`fleetmind.serving.incidents.manager.EXPLAINS`). A cause ranked before that list was
    stored has none, and explains nothing here: an earlier cause whose own alerts fire then stays
    paged beside it (a second page, resolved with its alerts) rather than being withdrawn while
    it may be a second fault. The next ranking (any new alert) stores the list."""
    nodes = cause.get(_EXPLAINS)
    return {str(n) for n in nodes} if isinstance(nodes, list) else set()


OUTBOX = "resolutions"
"""Key of a ``notifications`` row's ``delivery`` JSON: the row's resolutions (and withdrawals of
earlier causes) not yet delivered everywhere, oldest first, each ``{"alert": <the Alertmanager
item with endsAt>, "alertmanager": [the /api/v2/alerts URLs that have not taken it], "webhook":
<the chat message, or null when none is due>, "due_ts": <when it was due, Unix s>}``, and
``"refused_by"``: the URLs that refused it on its own (:meth:`Notifier._am_outcome`), once one
did. The URLs are stored without their password (:func:`fleetmind.redact.without_password`:
``http://tenant1@am:9093/api/v2/alerts``, the user name kept, so two tenants of one Alertmanager
stay two): no password in the database, and one rotated keeps what is owed."""
OUTBOX_MAX = 100
"""Most undelivered resolutions kept per incident (the oldest is dropped, with an error logged)."""
EXACT_SCORE = "fleetmind_exact_score"
"""Key of a ``notifications`` row's annotations holding the top score unrounded (``repr`` of the
float) for the webhook's JSON; it is not sent to Alertmanager, whose ``score`` annotation is the
score rounded down (:func:`score_annotation`)."""
PATH_IDS = "fleetmind_path"
"""Key of a ``notifications`` row's annotations holding the top cause's path as a JSON list of
node ids, for the webhook's ``fleetmind.path``; it is not sent to Alertmanager, whose ``path``
annotation is text (the ids joined with :data:`PATH_SEP`), ambiguous when an id contains the
separator. Stored only then (when splitting the text would not give the ids back), so that a
release that does not know the key (a rollback, an older replica during a rolling update) sends
it to Alertmanager for those rare paths only. Rows without it split that text."""
PATH_SEP = " -> "
"""Separator of the node ids in the ``path`` annotation (text, for people)."""
HIDDEN_ANNOTATIONS = frozenset({EXACT_SCORE, PATH_IDS})
"""Annotations kept in the ``notifications`` row for the webhook only, never sent to
Alertmanager."""
SEVERITY_WAS = "severity_was"
"""Key of a firing row's ``delivery`` JSON: the severity the webhook last got for the same cause,
when this row re-sends it at another one (its message says "now critical (was warning)")."""
RETRY_STATUS = frozenset({407, 408, 425, 429, 500, 502, 503, 504})
"""Statuses of a failure that may pass, retried with back-off; so is every status of 500 or more
(:func:`is_final`: a Cloudflare-fronted chat's 520-524 or 530 while its origin is down, a 501 or
505 from a proxy), as Alertmanager retries every 5xx (prometheus/alertmanager notify/util.go
``Retrier.Check``). 407 Proxy Authentication Required is a proxy's answer, not the receiver's."""
REDIRECT_STATUS = frozenset({301, 302, 303, 307, 308})
"""Redirections (RFC 9110 section 15.4): the target is elsewhere (``Location``), e.g. an ingress'
ssl-redirect from ``http://`` to ``https://``. The notifier does not follow them (a client that
does turns the POST of a 301, 302 or 303 into a GET without the alerts, section 15.4.2): its
Alertmanager URL is to be set to the target."""
RECEIVER_STATUS = REDIRECT_STATUS | frozenset({401, 403, 404, 405, 407, 410, 421, 426})
"""Answers of an Alertmanager that say the receiver is wrong, not the alerts posted (RFC 9110
sections 15.4 and 15.5): a redirection (:data:`REDIRECT_STATUS`, logged with its target), 401
Unauthorized and 407 Proxy Authentication Required (credentials an auth proxy in front of it
wants; 407 is not final but retried, :data:`RETRY_STATUS`, and its warning still says so), 403
Forbidden, 404 Not Found and 410 Gone (no such resource at this URL:
Alertmanager started with ``--web.route-prefix=/am`` answers 404 on ``/api/v2/alerts``, its router
serving only under the prefix, cmd/alertmanager/main.go ``router.WithPrefix``), 405 Method Not
Allowed (a URL that takes no POST), 421 Misdirected Request (a server that does not serve this
URL), 426 Upgrade Required (another protocol, e.g. TLS, expected). Every alert would get the same
answer, so such an answer is taken as a failure of that Alertmanager (not tried again in the
poll, back-off, the alerts kept owed), never as a refusal of each message: that cost one post per
incident per poll (at most :data:`POST_TIMEOUT_S` each) and held back the other HA peer's re-sends
past its ``resolve_timeout``. The webhook keeps reading the final ones (all but 407 and the
redirections) as a refusal: a revoked chat URL's 404 drops its message."""
BATCH = 500
"""Most alerts in one post to an Alertmanager, and most rows read in one query by id."""
MAX_PAUSE_S = 300.0
"""Longest back-off of a failing receiver (s), whatever ``FLEETMIND_NOTIFY_BACKOFF_S`` and
``FLEETMIND_NOTIFY_RETRIES`` say."""
POST_TIMEOUT_S = 5.0
"""Longest one post to a receiver may take in all (s): connecting, sending, the answer's headers
and the first :data:`ANSWER_BYTES` of its body, however slowly a receiver trickles them (httpx's
own timeouts bound each read, not their sum)."""
ANSWER_BYTES = 4096
"""Most bytes of a receiver's answer read (its status and headers, and the start of a chat's
refusal: :data:`REASON_CHARS`)."""
REASON_CHARS = 200
"""Most characters of a chat's refusal quoted in the log and the delivery note: Slack's incoming
webhooks answer a failure with a plain-text reason (404 ``no_service``, 410
``channel_is_archived``, 400 ``invalid_payload``, 403 ``action_prohibited``:
api.slack.com/changelog/2016-05-17-changes-to-errors-for-incoming-webhooks)."""
WEBHOOK_BUDGET_S = 5.0
"""Time (s) a poll spends posting to the webhook: once spent, its remaining messages wait, in
order, for the next poll, so a chat that answers slowly (each post just within
:data:`POST_TIMEOUT_S`) holds back the next Alertmanager re-sends by this plus one post at most."""
REFUSAL_BUDGET_S = 5.0
"""Time (s) a poll spends on the posts one Alertmanager refuses for their alerts (400, 413, 422...:
each refused first post or resolution, and each alert of a refused batch posted alone, taken or
refused): once spent, that Alertmanager's remaining posts of the poll wait for the next
(:data:`DEFERRED`; a firing alert so deferred stays due at the next poll, for every instance), so a
peer that refuses every alert, or takes them only alone, each slowly, holds back the other peer's re-sends by this plus three posts at
most: the one that overran it, and when that was a refused batch, its first alert alone and the
firing alert of that incident (a firing alert is one post). A refused batch is
taken apart by incident, each alert posted alone, in order: once the budget is spent, the
incident's remaining resolutions wait (kept owed, posted before its firing alert at a later poll)
and only its firing alert, the last, still goes, so that a resolution taken never leaves the
firing alert with its labels behind (it would end the live alert there until the next re-send);
the first incident's first alert always goes, so that a slowly refused batch still gets taken
apart; an incident whose turn comes after the budget is spent waits whole. The messages refused
are held or dropped as before (one refused on its own is tried after the others owed:
:meth:`Notifier._am_outcome`); those not tried are kept."""
DEFERRED = "deferred: it refused other alerts this poll"
"""Outcome of an Alertmanager post not tried because :data:`REFUSAL_BUDGET_S` was spent (not
final: the message is tried at the next poll, or at the next re-send when it is a firing alert
the other HA peer took)."""
RETRY_AFTER_STATUS = frozenset({429, 503})
"""Answers whose ``Retry-After`` header (RFC 9110 section 10.2.3) the back-off honours."""
CLUSTER_CHARS = 256
"""Longest ``cluster`` label a notification carries (an incident's clusters come from the
``cluster`` labels of its alerts, which anyone who can post alerts chooses)."""

INSTALLATION_LABEL = "fleetmind"
"""The label that names the FleetMind installation an alert comes from (:func:`installation`):
incident ids start at 1 in every database and a single-cluster graph's cluster is ``default``,
so without it two installations posting to one Alertmanager send the same label set, which
Alertmanager keeps as one alert (its fingerprint is the hash of the labels)."""

_DEFAULT_PORTS = {"http": 80, "https": 443}


def installation(public_url: str) -> str:
    """The :data:`INSTALLATION_LABEL` value of the service reached at ``public_url``
    (``FLEETMIND_PUBLIC_URL``, an origin): its authority, ``host[:port]``, the host lowercased
    and the scheme's default port (80, 443) left out, so that ``https://FM.example.org:443/`` and
    ``https://fm.example.org`` name one installation."""
    parts = urlsplit(public_url.strip())
    host = (parts.hostname or "").lower()
    if ":" in host:  # an IPv6 literal (RFC 3986 section 3.2.2)
        host = f"[{host}]"
    try:
        port = parts.port
    except ValueError:  # (the settings refuse such a URL; never a traceback here)
        port = None
    if not host:
        return parts.netloc.lower() or public_url.strip()
    return host if port in (None, _DEFAULT_PORTS.get(parts.scheme.lower())) else f"{host}:{port}"


def mrkdwn(text: str) -> str:
    """``text`` as literal Slack mrkdwn: ``&``, ``<`` and ``>`` escaped, as Slack's "Escaping text"
    rule asks, so that no value from an alert label becomes a ``<!channel>`` ping or a link; a
    backtick as ``'``, so that no value opens or closes a code span (FleetMind's own spans are
    :func:`code_span`'s)."""
    return text.replace("`", "'").replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def code_span(text: str) -> str:
    """``text`` as one mrkdwn code span: escaped (:func:`mrkdwn`), backticks and line breaks
    replaced so that it cannot close the span, and no formatting applies inside it; a bidi
    isolate (:func:`~fleetmind.serving.ui.svg.isolate`: U+2068 ... U+2069) when it holds a
    character that reorders text, so that a U+202E in a label value reverses none of the
    message around it."""
    flat = isolate(" ".join(str(text).replace("`", "'").split()))
    return f"`{mrkdwn(flat)}`"


_COUNTERS: weakref.WeakKeyDictionary[Any, Any] = weakref.WeakKeyDictionary()


CALIBRATED_METHODS = frozenset({"gat"})
"""Ranking methods whose top score is a calibrated probability (``fleetmind rca calibrate``)."""

UNCALIBRATED_PROBABILITY_METHODS = frozenset({"gat_fit"})
"""Ranking methods whose scores are probabilities in form (a softmax over the graph's nodes) that
no temperature was fitted to (``fleetmind rca fit``); the notifier sends their causes as warnings."""


def severity_for(
    score: Any, settings: Settings, method: str | None = "gat", top: Any = None
) -> str | None:
    """``severity`` of the FleetMindRootCause alert for a top cause's ``score``.

    The GAT's top score is a probability that the cause is the root, its temperature fitted on
    simulated incidents (``fleetmind rca calibrate``; ``calibration.fitted_on`` of the model's
    ``config.json``), so the thresholds read as "right at least this often" on such incidents
    only, no promise on a real system (docs/operators.md: on PetShop and Train Ticket 2 of 13
    critical pages named the root):
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


def score_annotation(score: Any) -> str:
    """A score to four decimals, rounded down as the incident page rounds (0.69996 is below a 0.7
    threshold: "0.6999", not "0.7000")."""
    return f"{math.floor(10_000 * float(score) + 1e-9) / 10_000:.4f}"


SEVERITY_RANK = {None: 0, "warning": 1, "critical": 2}
"""Severities in order: no alert, ``warning``, ``critical``."""


def held_severity(
    score: Any,
    previous: str | None,
    settings: Settings,
    method: str | None = "gat",
    top: Any = None,
) -> str | None:
    """:func:`severity_for`, with hysteresis against ``previous`` (the severity the same cause
    has or is settling at): a higher severity is taken at once, a lower one only when the score
    has fallen ``FLEETMIND_NOTIFY_SEVERITY_MARGIN`` below the threshold it crossed. A score
    hovering around ``FLEETMIND_NOTIFY_CRITICAL_SCORE`` (0.71, 0.69, 0.72...) pages once, not at
    every crossing. A drop that is no matter of the score (a method without calibrated scores, a
    cause that names no fault type) is taken at once: adding the margin does not undo it.
    """
    now = severity_for(score, settings, method, top)
    if previous is None or SEVERITY_RANK[now] >= SEVERITY_RANK.get(previous, 0):
        return now
    try:
        lifted = float(score) + settings.notify_severity_margin
    except (TypeError, ValueError):
        return now
    held = severity_for(lifted, settings, method, top)
    if SEVERITY_RANK[held] >= SEVERITY_RANK.get(previous, 0):
        return previous
    return held if SEVERITY_RANK[held] > SEVERITY_RANK[now] else now


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


def _receiver(channel: str, url: str) -> str:
    """How the log names a receiver: the webhook (a Slack URL is a secret), or an Alertmanager by
    its host and port."""
    if channel != "alertmanager":
        return "the webhook"
    u = httpx.URL(url)
    return f"Alertmanager {u.host}:{u.port}" if u.port else f"Alertmanager {u.host}"


def _iso(ts: float) -> str:
    return from_unix(ts).isoformat().replace("+00:00", "Z")


def _unix(iso: Any) -> float | None:
    """Unix seconds of a stored :func:`_iso` time (``None`` when it is not one)."""
    try:
        when = datetime.fromisoformat(str(iso))
    except ValueError:
        return None
    return when.timestamp() if when.tzinfo is not None else None


def _path_ids(annotations: Mapping[str, Any]) -> list[str]:
    """The node ids of a notification row's path: the :data:`PATH_IDS` list, or for a row without
    it (its text splits back into its ids, or it was stored before the key existed), the ``path``
    annotation split on :data:`PATH_SEP` (ambiguous only in such older rows)."""
    stored = annotations.get(PATH_IDS)
    if stored:
        try:
            ids = json.loads(stored)
        except (TypeError, ValueError):
            ids = None
        if isinstance(ids, list) and ids and all(isinstance(i, str) for i in ids):
            return ids
    return str(annotations["path"]).split(PATH_SEP)


def dedup_key(row: Mapping[str, Any], because: str | None = None) -> str:
    """The webhook message's idempotency key (``fleetmind.dedup_key``): the same for every post of
    one message, a new one for each other message.

    A chat message is recorded as delivered after its post (the ``notifications`` row), so a crash
    or a database outage between the two posts it again: delivery is at least once, and a receiver
    that keeps the keys it has seen drops the repeat. The key is a digest of what makes the message
    (incident, firing or resolved, cause, severity, when that firing began and ended, why it
    ended), all stored in the row: ``<incident>-<state>-<16 hex digits>``.
    """
    lab = row["labels"]
    parts = [lab["incident"], row["state"], lab["cause_node"], lab.get("severity")]
    parts += [row["starts_at"], row.get("ends_at"), because]
    digest = hashlib.sha256(json.dumps(parts).encode()).hexdigest()[:16]
    return f"{lab['incident']}-{row['state']}-{digest}"


_DEADLINE = Deadline()  # .at: time.monotonic() by which the post in flight (this thread's) must end


def post_client(transport: httpx.BaseTransport | None = None) -> httpx.Client:
    """The notifier's HTTP client: :data:`POST_TIMEOUT_S` on each step, and :func:`post_once`'s
    deadline on the whole post for the transports that reach the network (those of httpx, the
    proxies from the environment included, taken by Go's rules: :mod:`fleetmind.http_client`; a
    test's ``transport`` is used as it is).

    Raises:
        ConfigError: a proxy variable names a proxy httpx cannot use (one line).
    """
    client = proxied_client(timeout=POST_TIMEOUT_S, transport=transport)
    wrapped = hold_to(client, _DEADLINE)
    if transport is None and not wrapped:  # httpx/httpcore moved their internals
        log.warning(
            "notifications: httpx %s keeps no connection pool where this release looks for it: "
            "a receiver that trickles its answer's headers may hold a post past %.0f s",
            httpx.__version__,
            POST_TIMEOUT_S,
        )
    return client


def retry_after(response: httpx.Response, now: float | None = None) -> float | None:
    """Seconds a ``response``'s ``Retry-After`` header asks to wait (RFC 9110 section 10.2.3:
    delay-seconds, or an HTTP-date, taken relative to the response's ``Date`` when it has one,
    else to ``now``, Unix s, default the wall clock); ``None`` when it has none or it is invalid.
    """
    value = (response.headers.get("retry-after") or "").strip()
    if re.fullmatch(r"[0-9]{1,12}", value):  # ASCII digits only: str.isdigit() takes "²"
        return float(value)
    try:
        when = parsedate_to_datetime(value).timestamp()
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
    try:
        base = parsedate_to_datetime(response.headers.get("date") or "").timestamp()
    except (TypeError, ValueError, IndexError, OverflowError):
        base = time.time() if now is None else now
    return max(0.0, when - base)


_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
"""Control characters (C0, DEL, C1), replaced in text a log line quotes from a receiver (the
bidirectional and zero-width ones left are shown escaped: :func:`fleetmind.redact.terminal_safe`)."""


_ESCAPE = re.compile(r"\\(?:x[0-9a-f]{2}|u[0-9a-f]{4}|U[0-9a-f]{8}|[rnt])")
"""An escape :func:`fleetmind.redact.terminal_safe` writes (``\\u202e``, ``\\U000e0041``)."""


def shown_cut(text: str, limit: int) -> str:
    """``text`` shown escaped (:func:`fleetmind.redact.terminal_safe`) and cut to at most
    ``limit`` characters of what is shown, never inside an escape: a bidirectional or zero-width
    control is 6 characters shown, a tag character 10, so cutting before escaping let 200
    characters of an answer become 2,000 of a log line."""
    shown = terminal_safe(text[:limit])  # each character shows as one or more: enough to cut
    if len(shown) <= limit:
        return shown
    end = limit
    for m in _ESCAPE.finditer(shown, max(0, limit - 10), limit + 10):
        if m.start() < limit < m.end():
            end = m.start()
    return shown[:end]


def redirect_target(response: httpx.Response) -> str | None:
    """Where a redirection (:data:`REDIRECT_STATUS`) points, fit for a log: its ``Location``
    resolved against the URL posted, without credentials, query, fragment or path parameters
    (``;jsessionid=...``: a token may be there), its path still percent-encoded (``%0A`` stays
    ``%0A``, never a line break that forges a log line) and any control character left as
    ``?``; at most 300 characters. ``None`` when it has none or it is no URL."""
    location = (response.headers.get("location") or "").strip()
    if not location:
        return None
    try:
        u = response.request.url.join(location).copy_with(userinfo=b"", query=None, fragment=None)
        u = u.copy_with(raw_path=re.sub(rb";[^/]*", b"", u.raw_path))
        return shown_cut(_CONTROL.sub("?", str(u)), 300)
    except (httpx.InvalidURL, RuntimeError, ValueError, TypeError):
        return None


def answer_reason(text: str, url: str) -> str:
    """The start of a receiver's refusal ``text`` fit for a log and a delivery note: at most
    :data:`REASON_CHARS` characters of it on one line (runs of spaces and line breaks as one space,
    other control characters as ``?``, bidirectional and zero-width controls shown escaped as
    :func:`fleetmind.redact.terminal_safe` does: ``\\u202e``, so none reorders or hides what a
    terminal or the incident page shows), and the URL posted (a secret: a chat webhook's URL is its
    credential), or its path, as ``<url>`` wherever the answer echoes it; ``""`` for an empty
    answer."""
    secret = urlsplit(url)
    for part in sorted({url, secret.path if len(secret.path) > 1 else ""}, key=len, reverse=True):
        if part:
            text = text.replace(part, "<url>")
    return shown_cut(_CONTROL.sub("?", " ".join(text.split())), REASON_CHARS).strip()


def error_reason(err: BaseException, url: str) -> str:
    """Why a post raised ``err`` (an ``httpx`` or ``httpcore`` error), fit for a log and a delivery
    note: the first line of its text (``[SSL: CERTIFICATE_VERIFY_FAILED] certificate verify
    failed: self-signed certificate``, ``[Errno -2] Name or service not known``, ``[Errno 111]
    Connection refused``) with the password of any URL in it masked
    (:func:`fleetmind.redact.safe_uri`) and the rest as :func:`answer_reason` writes a receiver's
    answer (``url``, the URL posted, as ``<url>``; control characters replaced or escaped; at most
    :data:`REASON_CHARS` characters). ``""`` for a timeout (its text says only "timed out", as its
    class name does) and for an error with no text; a header this side could not send
    (``LocalProtocolError``: its text quotes the header, ``Authorization`` included) is named
    only."""
    if isinstance(err, httpx.TimeoutException | httpcore.TimeoutException):
        return ""
    if isinstance(err, httpx.LocalProtocolError | httpcore.LocalProtocolError):
        return "an invalid header value"
    first = next((line for line in str(err).splitlines() if line.strip()), "")
    return answer_reason(safe_uri(first.replace(url, "<url>")), url)


def error_outcome(err: BaseException, url: str) -> str:
    """The outcome of a post that raised ``err``: its class name (``ConnectError``,
    ``ReadTimeout``), followed by the reason :func:`error_reason` gives when it gives one
    (``"ConnectError: [Errno 111] Connection refused"``). :func:`status_of` reads no status in
    it, so it is never final (:func:`is_final`): the receiver is retried."""
    why = error_reason(err, url)
    return f"{type(err).__name__}: {why}" if why else type(err).__name__


_MARKUP = re.compile(r"<[A-Za-z!/?]")
"""The start of an HTML or XML tag: an answer holding one is a page, not a reason."""


def answer_text(response: httpx.Response, body: bytes) -> str:
    """The reason a refusal's ``body`` (its first bytes, decoded) gives, by its Content-Type:
    JSON: its ``message``, ``error`` or ``detail`` field when a string (Discord's
    ``{"message": "Unknown Webhook"}``) or an object's ``message`` string (Google Chat's
    ``{"error": {"code": 404, "message": "...", "status": "NOT_FOUND"}}``), else ``""``; JSON
    cut short (an answer longer than :data:`ANSWER_BYTES`) or not JSON: its text without markup;
    plain text, or text without markup under another text type (Slack answers ``no_service`` as
    ``text/html``): the text; an HTML page or any other type: ``""``."""
    kind = (response.headers.get("content-type") or "").split(";")[0].strip().lower()
    text = body.decode(response.encoding or "utf-8", "replace")
    if kind == "application/json" or kind.endswith("+json"):
        try:
            doc = json.loads(text)
        except ValueError:
            return "" if _MARKUP.search(text) else text
        for key in ("message", "error", "detail") if isinstance(doc, dict) else ():
            field = doc.get(key)
            field = field.get("message") if isinstance(field, dict) else field
            if isinstance(field, str):
                return field
        return ""
    if kind == "text/plain" or (
        (not kind or kind.startswith("text/")) and not _MARKUP.search(text)
    ):
        return text
    return ""


def mask_path(target: str, url: str) -> str:
    """``target`` (a redirection's, :func:`redirect_target`) with the path of ``url`` (a chat
    webhook's: its credential) as ``<the same path>`` and, wherever it still appears in the
    target's path, each segment of that path 8 or more characters long as ``<secret>``, compared
    percent-decoded too (an ingress that drops a trailing slash or changes the encoding); the
    target's scheme and host are kept as they are (a host named ``webhooks.example.org``), but a
    host label equal to the path's last segment (the token of a Slack, Discord or Mattermost URL),
    compared case-insensitively, is ``<secret>`` too."""
    path = urlsplit(url).path
    parts = urlsplit(target)
    host = f"{parts.scheme}://{parts.netloc}" if parts.netloc else ""
    host = host if target.startswith(host) else ""
    rest = target[len(host) :]
    token = unquote(path.rstrip("/").rsplit("/", 1)[-1]).lower()
    if len(token) >= 8 and token in host.lower():
        host = ".".join("<secret>" if lab.lower() == token else lab for lab in host.split("."))
        host = re.sub(re.escape(token), "<secret>", host, flags=re.IGNORECASE)
    if len(path) > 1:
        rest = rest.replace(path, "<the same path>")
    secrets = {unquote(seg) for seg in path.split("/") if len(unquote(seg)) >= 8}
    if not secrets:
        return host + rest

    def masked(m: re.Match[str]) -> str:
        seg = m.group(0)
        return "<secret>" if seg in secrets or unquote(seg) in secrets else seg

    out = re.sub(r"[^/<>?#]+", masked, rest)
    for s in secrets:  # (anything left: a segment split otherwise)
        out = out.replace(s, "<secret>").replace(quote(s, safe=""), "<secret>")
    return host + out


def status_of(outcome: str) -> int | None:
    """The HTTP status an ``outcome`` starts with (``"404 no_service"`` -> 404), else ``None``
    (an error's class name)."""
    head = outcome.split(" ", 1)[0]
    return int(head) if head.isdigit() else None


_DECODED = {"gzip": 47, "x-gzip": 47, "deflate": 47}
"""The ``Content-Encoding`` of an answer :func:`_read_answer` decodes, and its ``zlib`` wbits
(47: a gzip or zlib header, told apart by zlib)."""


def _read_answer(response: httpx.Response) -> bytes:
    """The first :data:`ANSWER_BYTES` bytes (at most) of ``response``'s body, decoded when it is
    gzip or deflate compressed (a compressed refusal is quoted as text), never decompressing more
    than that (a small answer that inflates to gigabytes costs no memory); ``b""`` for another
    encoding (its reason is not quoted: the status alone)."""
    codings = [
        c.strip().lower()
        for c in (response.headers.get("content-encoding") or "").split(",")
        if c.strip().lower() not in ("", "identity")
    ]
    if len(codings) > 1 or (codings and codings[0] not in _DECODED):
        return b""
    inflate = zlib.decompressobj(_DECODED[codings[0]]) if codings else None
    got, head, read, raw_deflate = b"", b"", 0, False
    for chunk in response.iter_raw():
        read += len(chunk)
        if not got:
            head += chunk  # (a raw deflate stream is decoded again from its first byte)
        try:
            got += chunk if inflate is None else inflate.decompress(chunk, ANSWER_BYTES - len(got))
        except zlib.error:
            if got or codings != ["deflate"] or raw_deflate:
                break  # (a broken stream: what it decoded so far)
            inflate, raw_deflate = zlib.decompressobj(-zlib.MAX_WBITS), True  # (no zlib header)
            try:
                got = inflate.decompress(head, ANSWER_BYTES)
            except zlib.error:
                break
        if len(got) >= ANSWER_BYTES or (inflate is not None and inflate.eof):
            break
        if read > 16 * ANSWER_BYTES and not got:
            break  # (compressed bytes that decode to nothing: the status alone)
        _DEADLINE.left(None, httpx.ReadTimeout)
    return got[:ANSWER_BYTES]


def post_attempt(
    client: httpx.Client, url: str, body: Any, with_reason: bool = False
) -> tuple[bool, str, float | None, str | None]:
    """POST ``body`` as JSON, once, within :data:`POST_TIMEOUT_S` in all (read at the call).

    Returns:
        ``(delivered, outcome, retry_after_s, redirect)``; the outcome is the HTTP status or the
        error's class name and reason (:func:`error_outcome`: ``ConnectError: [Errno 111]
        Connection refused``; ``ReadTimeout`` when the deadline passed while the answer came);
        with ``with_reason``, a status of 400 or more is followed by the start of the reason
        its body gives (:func:`answer_text`, :func:`answer_reason`: ``"404 no_service"``) when
        it gives one (never a redirection's, nor an HTML page);
        ``retry_after_s``: the wait a 429 or 503 asked for (:func:`retry_after`), else ``None``;
        ``redirect``: where a redirection points (:func:`redirect_target`), else ``None``.
    """
    _DEADLINE.at = time.monotonic() + POST_TIMEOUT_S
    try:
        with client.stream("POST", url, json=body) as r:
            # (a few bytes: a chat answers "ok"; a test transport's answer is read already)
            got = b"" if r.is_stream_consumed else _read_answer(r)
            if not got and r.is_stream_consumed:
                try:
                    got = r.content  # (a test transport's answer, read already)
                except httpx.ResponseNotRead:
                    got = b""
    except httpx.HTTPError as err:
        return False, error_outcome(err, url), None, None
    except httpcore.TimeoutException as err:  # (raised by the deadline outside httpx's mapping)
        return False, error_outcome(err, url), None, None
    finally:
        _DEADLINE.at = None
    wait = retry_after(r) if r.status_code in RETRY_AFTER_STATUS else None
    moved = redirect_target(r) if r.status_code in REDIRECT_STATUS else None
    outcome = str(r.status_code)
    if with_reason and r.status_code >= 400:  # (a redirection's page says nothing of use)
        why = answer_reason(answer_text(r, got[:ANSWER_BYTES]), url)
        outcome = f"{outcome} {why}" if why else outcome
    return r.status_code < 300, outcome, wait, moved


def post_once(client: httpx.Client, url: str, body: Any) -> tuple[bool, str]:
    """POST ``body`` as JSON, once (the notifier retries in later polls, never by sleeping),
    within :data:`POST_TIMEOUT_S` in all (:func:`post_attempt`).

    Returns:
        ``(delivered, outcome)``; the outcome is the HTTP status or the error's class name and
        reason (:func:`error_outcome`).
    """
    ok, outcome, _, _ = post_attempt(client, url, body)
    return ok, outcome


def _log_failure(
    name: str,
    outcome: str,
    failures: int,
    pause: float,
    asked: float | None,
    moved: str | None,
    setting: str = "FLEETMIND_NOTIFY_ALERTMANAGER_URL",
) -> None:
    """The warning for a receiver ``name`` put in back-off for ``pause`` s after ``outcome``
    (``failures`` in a row; ``asked``: a ``Retry-After``'s wait, s; ``moved``: where a
    redirection points, :func:`redirect_target`; ``setting``: the one that holds its URL)."""
    if status_of(outcome) in REDIRECT_STATUS:
        log.warning(
            "%s answered %s: it redirects to %s, which the notifier does not follow; set its URL "
            "in %s to that (%d in a row): not tried again for %.1f s; the messages are kept",
            name,
            outcome,
            moved or "no Location given",
            setting,
            failures,
            pause,
        )
    elif setting.endswith("_ALERTMANAGER_URL") and status_of(outcome) in RECEIVER_STATUS:
        # (once per poll at most, not per incident; 407 too, though it is retried: RETRY_STATUS)
        log.warning(
            "%s answered %s, which says its URL, credentials or proxy are wrong, not the "
            "alerts (%d in a row): not tried again for %.1f s; the alerts are kept",
            name,
            outcome,
            failures,
            pause,
        )
    else:
        log.warning(
            "%s failed (%s, %d in a row): not tried again for %.1f s%s",
            name,
            outcome,
            failures,
            pause,
            "" if asked is None else f" (it asked to wait {asked:g} s: Retry-After)",
        )


GOOGLE_CHAT_HOST = "chat.googleapis.com"
"""Host of Google Chat's incoming webhooks: sent ``{"text": ...}`` only (Google's API refuses an
unknown field such as ``fleetmind``: 400 ``Invalid JSON payload received. Unknown name``)."""
GOOGLE_CHAT_MAX_BYTES = 32_000
"""Google Chat's limit on a message's size, bytes (developers.google.com/workspace/chat/limits)."""
GOOGLE_CHAT_MAX_CHARS = 4096
"""Google Chat's limit on a message's ``text``, characters: a longer one is refused with 400
"Message is longer than 4096 characters" (reported in mr-karan/calert#11 and
cloudflare/GHC-Errbot#10); counted here as UTF-16 code units, which is never fewer than code
points, so an emoji counts twice."""
TEAMS_WORKFLOW_HOSTS = (".logic.azure.com", ".powerplatform.com", ".powerautomate.com")
"""Host suffixes of Microsoft Teams "Workflows" webhooks (Power Automate, Logic Apps): sent an
Adaptive Card (:func:`teams_body`), which the "Post to a channel when a webhook request is
received" template posts; a Slack-shaped body is accepted (202) and shows nothing."""
TRUNCATED = "\n... (cut to fit the chat's size limit)"
"""Ends a message text cut to fit :data:`GOOGLE_CHAT_MAX_BYTES` or :data:`GOOGLE_CHAT_MAX_CHARS`."""
_EMOJI = {
    ":rotating_light:": "\U0001f6a8",
    ":white_check_mark:": "\u2705",
    ":arrows_counterclockwise:": "\U0001f504",
    ":grey_question:": "\u2754",
}
"""Slack emoji codes in :meth:`Notifier.webhook_body`'s text, as characters for chats that show
the codes literally (Teams' Adaptive Cards; Google Chat, mr-karan/calert#76)."""
_SPAN = re.compile(r"`([^`]*)`|<([^<>|\s]+)\|([^<>]*)>")
"""A mrkdwn code span (:func:`code_span`) or link ``<url|text>`` in the webhook text."""


def chat_platform(url: str) -> str:
    """Which body the webhook at ``url`` takes, by its host: ``"google_chat"``, ``"teams"``
    (a Workflows URL, :data:`TEAMS_WORKFLOW_HOSTS`) or ``"slack"`` (any other host: Slack,
    Mattermost, Discord's ``/slack`` endpoint)."""
    host = (urlsplit(url).hostname or "").lower().rstrip(".")
    if host == GOOGLE_CHAT_HOST:
        return "google_chat"
    if any(host.endswith(s) or host == s[1:] for s in TEAMS_WORKFLOW_HOSTS):
        return "teams"
    return "slack"


def _utf16_len(text: str) -> int:
    """Length of ``text`` in UTF-16 code units (an astral character such as an emoji: 2)."""
    return len(text.encode("utf-16-le")) // 2


_ENTITY = re.compile(r"&(?:amp|lt|gt);")
"""An escape :func:`mrkdwn` writes; a cut never splits one (``&g`` would be shown as it is)."""


def _cut_before_entity(text: str, cut: int) -> int:
    """``cut``, or where the escape (:data:`_ENTITY`) that ``cut`` falls inside starts."""
    amp = text.rfind("&", max(0, cut - 4), cut)
    m = _ENTITY.match(text, amp) if amp >= 0 else None
    return amp if m and m.end() > cut else cut


def _fit_text(text: str, max_bytes: int, max_chars: int) -> str:
    """``text`` whole when its UTF-8 encoding has at most ``max_bytes`` bytes and it has at most
    ``max_chars`` UTF-16 code units, else cut and ended with :data:`TRUNCATED`, within both
    limits in all. The cut never splits a character as shown (:func:`~fleetmind.redact.can_cut`:
    an emoji ZWJ sequence, a letter and its accent) nor an escape (``&gt;``); a cut inside a code
    span (:data:`_SPAN`, as :func:`code_span` writes them) closes it with a backtick, so the
    marker is never shown as code and a long ``Path:`` keeps what fits; a cut inside a link
    moves before it."""
    if len(text.encode()) <= max_bytes and _utf16_len(text) <= max_chars:
        return text
    room = max_bytes - len(TRUNCATED.encode()) - 1  # (1 byte, 1 code unit: a closing backtick)
    chars = max_chars - _utf16_len(TRUNCATED) - 1
    head = text.encode()[:room].decode(errors="ignore")[:chars]
    over = _utf16_len(head) - chars
    while over > 0:  # (each character dropped takes 1 or 2 code units)
        over -= _utf16_len(head[-1])
        head = head[:-1]
    cut = len(head)  # (head is a start of text)
    while cut > 0 and not can_cut(text, cut := _cut_before_entity(text, cut)):
        cut -= 1
    for m in _SPAN.finditer(text):
        if m.start() >= cut:
            break
        if cut < m.end():  # inside a code span or a link
            if m.group(1) is not None and cut > m.start() + 1:
                return text[:cut] + "`" + TRUNCATED
            return text[: m.start()].rstrip() + TRUNCATED
    return text[:cut] + TRUNCATED


def _unmrkdwn(text: str) -> str:
    """Plain text of mrkdwn ``text``: its escapes (:func:`mrkdwn`) undone, emoji codes as
    characters."""
    for code, char in _EMOJI.items():
        text = text.replace(code, char)
    return text.replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&")


def _text_runs(line: str) -> tuple[list[dict[str, Any]], str | None]:
    """One line of the webhook's mrkdwn text as Adaptive Card ``TextRun`` elements, whose text is
    never read as Markdown (adaptivecards.io/explorer/TextRun.html), so that no alert-label value
    becomes a link or bold text in Teams; code spans in ``fontType: Monospace``, a link
    ``<url|text>`` as a run that opens ``url`` (``selectAction``). Returns the runs and the last
    link's URL (``None`` without one)."""
    runs: list[dict[str, Any]] = []
    url, at = None, 0
    for m in _SPAN.finditer(line):
        if m.start() > at:
            runs.append({"type": "TextRun", "text": _unmrkdwn(line[at : m.start()])})
        if m.group(2) is not None:
            url = m.group(2)
            link = {"type": "Action.OpenUrl", "url": url}
            runs.append({"type": "TextRun", "text": _unmrkdwn(m.group(3)), "selectAction": link})
        else:
            runs.append({"type": "TextRun", "text": _unmrkdwn(m.group(1)), "fontType": "Monospace"})
        at = m.end()
    if at < len(line):
        runs.append({"type": "TextRun", "text": _unmrkdwn(line[at:])})
    return runs, url


def teams_body(body: dict[str, Any]) -> dict[str, Any]:
    """The message a Teams Workflows webhook posts for ``body`` (:meth:`Notifier.webhook_body`'s):
    the envelope Microsoft documents for webhooks (``type: message``, one
    ``application/vnd.microsoft.card.adaptive`` attachment) with the Adaptive Card: one
    ``RichTextBlock`` of plain ``TextRun`` elements per line of the Slack ``text`` (the same
    facts; Teams' TextBlock Markdown has no code spans, so a label value there could render as a
    link or bold text) and an ``Action.OpenUrl`` to the incident page. ``body``'s own keys
    (``text``, ``fleetmind`` with its ``dedup_key``) are kept beside them for a Logic App that
    reads the JSON itself: the Teams template reads ``attachments`` only, and a Request trigger
    does not check the body against its schema unless its "Schema Validation" setting is on
    (learn.microsoft.com/azure/connectors/connectors-native-reqres)."""
    blocks, url = [], None
    for line in str(body.get("text", "")).split("\n"):
        runs, link = _text_runs(line)
        url = link or url
        blocks.append({"type": "RichTextBlock", "inlines": runs})
    card: dict[str, Any] = {
        "$schema": "http://adaptivecards.io/schemas/adaptive-card.json",
        "type": "AdaptiveCard",
        "version": "1.4",
        "body": blocks,
    }
    if url is not None:
        card["actions"] = [{"type": "Action.OpenUrl", "title": "Open the incident", "url": url}]
    attachment = {
        "contentType": "application/vnd.microsoft.card.adaptive",
        "contentUrl": None,
        "content": card,
    }
    return {**body, "type": "message", "attachments": [attachment]}


def chat_body(url: str, body: dict[str, Any]) -> dict[str, Any]:
    """The JSON to post to the chat webhook ``url`` for ``body`` (:meth:`Notifier.webhook_body`'s,
    as stored): ``body`` itself for Slack-compatible chats (:func:`chat_platform`); Google Chat
    gets ``{"text": ...}`` only, its emoji codes as characters, cut to
    :data:`GOOGLE_CHAT_MAX_BYTES` and :data:`GOOGLE_CHAT_MAX_CHARS` (it renders ``<url|text>``
    links and code spans); a Teams Workflows webhook gets an Adaptive Card beside ``body``'s keys
    (:func:`teams_body`)."""
    platform = chat_platform(url)
    if platform == "google_chat":
        text = str(body.get("text", ""))
        for code, char in _EMOJI.items():
            text = text.replace(code, char)
        return {"text": _fit_text(text, GOOGLE_CHAT_MAX_BYTES - 64, GOOGLE_CHAT_MAX_CHARS)}
    if platform == "teams":
        return teams_body(body)
    return body


NOT_FOLLOWED = " (a redirection, not followed)"
"""Ends the note of a chat message dropped after ``FLEETMIND_NOTIFY_GIVE_UP_S`` of redirections:
a note ``dropped: 308`` alone is from before redirections were retried (refused then)."""
RETRIED = " (retried until given up)"
"""Ends the note of a chat message dropped after ``FLEETMIND_NOTIFY_GIVE_UP_S`` of a status once
taken as a refusal and now retried (407, a 5xx outside 500, 502, 503 and 504: :func:`was_final`):
a note ``dropped: 522`` alone is from before those were retried (refused then)."""
OLD_RETRY_STATUS = frozenset({408, 425, 429, 500, 502, 503, 504})
"""The statuses retried before 407 and every 5xx were (:data:`RETRY_STATUS`): any other status in
an older delivery note was a refusal."""


def was_final(outcome: str) -> bool:
    """Whether a failed post's ``outcome`` was taken as a refusal before 407 and every 5xx were
    retried (:data:`OLD_RETRY_STATUS`), whether or not it is now (:func:`is_final`)."""
    status = status_of(outcome)
    return status is not None and status not in OLD_RETRY_STATUS


def drop_note(outcome: str) -> str:
    """The delivery note of a chat message given up on after ``outcome``: ``dropped: <outcome>``,
    ended with :data:`NOT_FOLLOWED` for a redirection, or :data:`RETRIED` for a status that
    older notes recorded as a refusal but that is now retried, so that each note is read as
    written (:func:`delivery_outcome`)."""
    if status_of(outcome) in REDIRECT_STATUS:
        return f"dropped: {outcome}{NOT_FOLLOWED}"
    if was_final(outcome) and not is_final(outcome):
        return f"dropped: {outcome}{RETRIED}"
    return f"dropped: {outcome}"


def is_final(outcome: str) -> bool:
    """Whether a failed post's ``outcome`` (:func:`post_once`'s) will not get better by
    asking again: an HTTP status below 500 outside :data:`RETRY_STATUS` (a revoked chat URL's
    404); every 5xx may pass (a Cloudflare 52x while the chat's origin is down)."""
    status = status_of(outcome)
    return status is not None and status < 500 and status not in RETRY_STATUS


def refuses_message(outcome: str) -> bool:
    """Whether a chat webhook's ``outcome`` refuses the message for good (it is dropped):
    :func:`is_final` and no redirection (:data:`REDIRECT_STATUS`: the URL is to be set to its
    target; the messages are kept meanwhile, as for an Alertmanager)."""
    return is_final(outcome) and status_of(outcome) not in REDIRECT_STATUS


def refuses_alerts(outcome: str) -> bool:
    """Whether an Alertmanager's ``outcome`` refuses the alerts posted (400, 413, 422...), not
    the receiver itself: :func:`is_final` and outside :data:`RECEIVER_STATUS`."""
    return is_final(outcome) and status_of(outcome) not in RECEIVER_STATUS


def _outcome(
    sev: str,
    settings: Settings,
    sent: bool,
    is_open: bool,
    failing: str | None,
    dropped: str | None,
) -> str:
    """What the notifier did (or will do) with a cause at severity ``sev`` (see
    :func:`confidence_words`)."""
    as_sev = "as critical" if sev == "critical" else "as a warning"
    # a warning goes to a channel, it does not page anyone
    verb, verbs = ("page", "pages") if sev == "critical" else ("notify", "notifies")
    notifying = any(u.strip() for u in (settings.notify_alertmanager_url or "").split(","))
    if sent:  # by a channel; one that did not is named (on-call may rely on that one)
        gaps = [f"{failing}, retrying" if failing and is_open else failing, dropped]
        gaps = [g for g in gaps if g]
        return f"sent {as_sev}" + (f" (not everywhere: {'; '.join(gaps)})" if gaps else "")
    if not (notifying or settings.notify_webhook_url):
        return f"would {verb} {as_sev} (notifications are off)"
    if failing and is_open:
        return f"sending {as_sev} failed ({failing}); retrying"
    if dropped:
        return f"not sent {as_sev} ({dropped})"
    if failing:
        return f"not sent {as_sev} (the incident closed first; sending failed: {failing})"
    if is_open:
        return f"{verbs} {as_sev} once settled"
    return f"not sent {as_sev} (the incident closed first)"


def confidence_words(
    score: Any,
    settings: Settings,
    method: str | None,
    top: Any = None,
    sent: bool = False,
    is_open: bool = True,
    failing: str | None = None,
    dropped: str | None = None,
    held: str | None = None,
    calibrated: bool | None = True,
) -> str:
    """How sure the top cause is, in the words the incident page shows beside it, and what the
    notifier does with it.

    The same thresholds as :func:`severity_for`: ``high`` (pages as critical), ``medium``
    (notifies as a warning: ``warning`` goes to a channel, it does not page), ``low`` (not sent);
    a method without calibrated scores says "confidence unknown" instead of guessing, and what
    the notifier does (it sends such causes as warnings). ``sent``: a channel took this
    cause at this severity (its ``notifications`` row, :func:`delivery_outcome`); ``failing``:
    why sending it failed so far while it is retried; ``dropped``: why the notifier gave up on it.
    ``held``: the severity the cause fires at now (its ``notifications`` row), which
    :func:`held_severity` keeps while the score stays within the margin below its threshold.
    ``calibrated``: whether the model that ranked it has a fitted temperature
    (``LoadedModel.calibrated``): ``False`` says "uncalibrated", ``None`` (not known) says
    neither. Otherwise the words say what will happen: nothing while no notification URL is set,
    a page once the ranking settles (``FLEETMIND_NOTIFY_SETTLE_S``) while the incident is open.
    """
    if method is not None and method not in CALIBRATED_METHODS:
        outcome = _outcome("warning", settings, sent, is_open, failing, dropped)
        if method in UNCALIBRATED_PROBABILITY_METHODS:
            return f"confidence unknown (uncalibrated scores): {outcome}"
        return f"confidence unknown (this ranker's scores are not probabilities): {outcome}"
    sev = held_severity(score, held, settings, method, top)
    try:
        # rounded down: 0.6996 is below a 0.7 threshold and must not read "70 %"
        pct = f"{math.floor(100 * float(score) + 1e-9)} %"
    except (TypeError, ValueError, OverflowError):
        return "confidence unknown"
    if sev is None:
        return f"low confidence ({pct}): not sent; treat the list as leads"
    outcome = _outcome(sev, settings, sent, is_open, failing, dropped)
    calib = {True: ", calibrated on simulated incidents", False: ", uncalibrated"}.get(
        calibrated, ""
    )
    if sev == "critical" and float(score) < settings.notify_critical_score:
        return (
            f"critical held ({pct}{calib}; within FLEETMIND_NOTIFY_SEVERITY_MARGIN below "
            f"the critical score): {outcome}"
        )
    if sev == "critical":
        return f"high confidence ({pct}{calib}): {outcome}"
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
    for channel, name in sorted(CHANNEL_NAMES.items()):
        # only the channels' outcomes: the other keys (OUTBOX, KEPT, SEVERITY_WAS, or one a newer
        # release adds) are what the notifier still has to send, not a fate
        outcome = delivery.get(channel)
        if not isinstance(outcome, str):
            continue
        if outcome == "sent":
            continue
        if not outcome.startswith("dropped: "):
            failing.append(f"{name}: {outcome}")
        elif was_final(why := outcome.removeprefix("dropped: ")) and not why.endswith(
            (NOT_FOLLOWED, RETRIED)
        ):
            dropped.append(f"{name} refused it: {why}")
        else:
            dropped.append(f"{name} failed until FLEETMIND_NOTIFY_GIVE_UP_S: {why}")
    sent = any(delivery.get(channel) == "sent" for channel in CHANNEL_NAMES)
    return sent, "; ".join(failing) or None, "; ".join(dropped) or None


_RECORD = (
    notifications.update()
    .where(notifications.c.incident_id == bindparam("_id"))
    .where(notifications.c.state == bindparam("_state"))
    .values(
        am_sent_ts=bindparam("_am"),
        hook_sent=bindparam("_hook"),
        delivery=bindparam("_delivery", type_=notifications.c.delivery.type),
    )
)
"""What became of a row's messages (one statement for many rows)."""


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
        # the notification log, not alerts (Prometheus likewise sends to each instance).
        # Each is known by its URL without its password, the user name kept (what the outbox
        # stores: no password in the database, a rotated one keeps the resolutions owed, and
        # tenants of one Alertmanager stay apart; settings refuse two URLs with one key);
        # _post adds the password back.
        self._am_post = {
            without_password(url): url
            for url in (
                base.strip().rstrip("/") + "/api/v2/alerts"
                for base in (settings.notify_alertmanager_url or "").split(",")
                if base.strip()
            )
        }
        self.am_urls = list(self._am_post)
        self.hook_url = settings.notify_webhook_url
        self._client = post_client(transport)
        self._hook_until = math.inf  # time.monotonic() after which a poll posts no more chat
        # incident -> ((top cause, severity), since); (None, None): ranked with no cause
        self._seen: dict[int, tuple[tuple[str | None, str | None], float]] = {}
        # open incidents done with as they are (settled, sent) -> their change marks then
        # (:meth:`_open_marks`): not read again until these change, or at the next sweep
        self._stable: dict[int, tuple[Any, ...]] = {}
        self._swept_ts = -math.inf  # when every open incident was last read whole
        # a receiver that failed (connection error, timeout, 408/425/429/5xx): URL -> (failures
        # in a row, not tried again before this clock time, the last outcome)
        self._down: dict[str, tuple[int, float, str]] = {}
        self._down_now: set[str] = set()  # receivers that failed in this poll: not tried again
        # Alertmanager URL -> seconds this poll spent on its posts it refused (REFUSAL_BUDGET_S)
        self._refusing_s: dict[str, float] = {}
        # one message a working Alertmanager refused (a final 4xx): (incident, URL) -> (not tried
        # again before this clock time, the outcome)
        self._refused: dict[tuple[int, str], tuple[float, str]] = {}
        self._held_now: set[tuple[int, str]] = set()  # (incident, URL) held so in this poll
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.last_error: str | None = None
        self._failures = FailureLog(log, "notifier")
        self.counter = None if registry is None else _counter(registry)
        if self.counter is not None:  # each enabled channel's series exist at 0 from the start:
            # rate()/increase() see only increases between samples, so a first failure that
            # created its series would be invisible to an alert on it
            for channel in ("alertmanager",) * bool(self.am_urls) + ("webhook",) * bool(
                self.hook_url
            ):
                for outcome in ("sent", "failed", "dropped"):
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
            if not self.is_leader():  # another process notifies: read all afresh when back
                self._stable.clear()
                self._failures.forget()  # its failures are not this process's to recover from
                continue
            try:
                self.poll()
                self.last_error = None
                self._failures.succeeded()
            except Exception as err:  # keep notifying; the database may be back next time
                self.last_error = f"{type(err).__name__}: {err}"
                self._failures.failed(err)

    # ------------------------------------------------------------------ one poll
    def poll(self) -> int:
        """Settle, send and resolve once; returns how many messages were delivered.

        Nothing here sleeps: each post is tried once, and a receiver (an Alertmanager URL, the
        webhook) that fails is not tried again in this poll, for any incident, nor before its
        back-off has passed (:meth:`_post`), so one that is down, hangs, trickles its answer or
        answers that the receiver is wrong (:data:`RECEIVER_STATUS`) costs at most one attempt
        (:data:`POST_TIMEOUT_S`) per poll, and the others still get their re-sends in time; the
        posts an Alertmanager refuses for their alerts stop after :data:`REFUSAL_BUDGET_S`, the
        webhook's posts after :data:`WEBHOOK_BUDGET_S`.

        What a poll reads grows with what changed, not with the open incidents: every open
        incident's id and change marks (a few numbers each, all of them: none is taken for
        closed), the whole of an incident only when it changed since it was last followed or is
        still settling (and of each, every ``FLEETMIND_NOTIFY_RESEND_S``), and the whole of a
        ``notifications`` row only when something is due about it.
        """
        now = self.clock()
        self._down_now, self._refusing_s, self._held_now = set(), {}, set()
        marks = self._open_marks()
        sweep = not 0 <= now - self._swept_ts < self.settings.notify_resend_s
        if sweep:  # (a change the marks miss, e.g. a row edited by hand, waits this long at most)
            self._stable.clear()
            self._swept_ts = now
        for inc_id in [i for i in self._stable if i not in marks]:
            self._stable.pop(inc_id, None)
        for inc_id in [i for i in self._seen if i not in marks]:
            self._seen.pop(inc_id, None)
        changed = sorted(i for i, mark in marks.items() if self._stable.get(i) != mark)
        rows = self._pending_rows(set(changed), marks, now)
        for inc in self._incidents(changed):
            if inc["status"] != "open":  # closed since the marks were read: the next poll sees it
                continue
            if self._settle(inc, rows, now):
                self._stable[inc["id"]] = marks[inc["id"]]
            else:  # settling: followed again at each poll until it has settled
                self._stable.pop(inc["id"], None)
        for inc_id, row in rows.items():
            if row["state"] == "firing" and inc_id not in marks:
                self._set_resolved(row, now, CLOSED)
        return self._deliver_all(list(rows.values()), now)

    def _open_marks(self) -> dict[int, tuple[Any, ...]]:
        """Every open incident's id -> what changes with any change the notifier follows (its
        alerts, its ranking): ``updated_ts``, ``rca_ts`` and ``firing_count``."""
        c = incidents.c
        q = select(c.id, c.updated_ts, c.rca_ts, c.firing_count).where(c.status == "open")
        with self.db.read() as conn:
            return {int(r[0]): tuple(r[1:]) for r in conn.execute(q)}

    def _incidents(self, ids: list[int]) -> list[dict[str, Any]]:
        """The incidents ``ids`` as stored (read in chunks of :data:`BATCH`)."""
        out: list[dict[str, Any]] = []
        with self.db.read() as conn:
            for i in range(0, len(ids), BATCH):
                q = select(incidents).where(incidents.c.id.in_(ids[i : i + BATCH]))
                out.extend(dict(r._mapping) for r in conn.execute(q))
        return sorted(out, key=lambda inc: -inc["id"])  # newest first, as before

    def _pending_rows(
        self, changed: set[int], marks: Mapping[int, Any], now: float
    ) -> dict[int, dict[str, Any]]:
        """The ``notifications`` rows this poll may act on, whole: those of the ``changed``
        incidents, those that owe a message (a resolution, an undelivered firing one, a re-send
        that is due) and the firing ones whose incident is no longer open (in ``marks``).

        Rows done with (resolved and delivered) are not read; the firing rows of incidents that
        did not change and owe nothing now are read only in part."""
        n = notifications.c
        pending = (n.state == "firing") | n.am_sent_ts.is_(None) | n.hook_sent.is_(False)
        # (the JSON's text, not the JSON: decoding thousands of them each poll costs the most)
        carries = cast(n.delivery, Text).like(f'%"{OUTBOX}"%')
        light = select(n.incident_id, n.state, n.am_sent_ts, n.hook_sent, carries).where(pending)
        with self.db.read() as conn:
            wanted = sorted(
                int(r.incident_id)
                for r in conn.execute(light)
                if r.incident_id in changed
                or r.state != "firing"
                or r.incident_id not in marks
                or self._owes(r.am_sent_ts, bool(r.hook_sent), bool(r[4]), now)
            )
            rows: dict[int, dict[str, Any]] = {}
            for i in range(0, len(wanted), BATCH):
                q = select(notifications).where(n.incident_id.in_(wanted[i : i + BATCH]))
                rows.update({r.incident_id: dict(r._mapping) for r in conn.execute(q)})
        return {i: rows[i] for i in sorted(rows)}

    def _owes(self, am_sent_ts: float | None, hook_sent: bool, carries: bool, now: float) -> bool:
        """Whether a firing row (its ``am_sent_ts``, ``hook_sent``, whether its ``delivery``
        carries resolutions) has something to send now: those resolutions, its first post, or its
        re-send (Unix s ``now``)."""
        if carries:
            return True
        if self.hook_url and not hook_sent:
            return True
        return bool(self.am_urls) and (
            am_sent_ts is None or not 0 <= now - am_sent_ts < self.settings.notify_resend_s
        )

    def _settle(self, inc: dict[str, Any], rows: dict[int, dict[str, Any]], now: float) -> bool:
        """Follow open incident ``inc``'s top cause; once it has settled at a severity, make
        ``rows`` (incident id -> its ``notifications`` row) say what is to be sent about it: the
        firing row refreshed, or resolved and replaced by the new cause's. Returns whether it is
        done with the incident as it is (``False`` while a cause or its absence is settling)."""
        causes = inc["causes"] or []
        row = rows.get(inc["id"])
        firing = row is not None and row["state"] == "firing"
        if not causes:  # ranked on a graph none of its alerts maps to: nothing to stand by
            if not firing:
                return True
            if not self._settled(inc["id"], (None, None), now):
                return False
            self._set_resolved(row, now, NO_CAUSE)
            return True
        top = causes[0]
        node = top["node"]
        previous = self._previous(inc["id"], node, row)
        severity = held_severity(top.get("score"), previous, self.settings, inc.get("method"), top)
        if not self._settled(inc["id"], (node, severity), now):
            return False
        if not firing:
            if severity is not None:
                outbox = [] if row is None else self._outbox(row)
                rows[inc["id"]] = self._set_firing(inc, top, severity, now, outbox)
            return True
        assert row is not None
        kept = list((row.get("delivery") or {}).get(KEPT) or [])
        live, named = (
            self._alert_nodes(inc["id"]) if kept or row["cause_node"] != node else (set(), set())
        )
        # nodes of earlier causes still firing on their own; a top too unsure to page (below
        # the warning floor) supersedes nothing, whatever it explains: the sent cause stays
        own = live - explained_by(top) if severity is not None else live
        ended = [  # kept causes to resolve: their alerts resolved, or the top cause explains them
            (k, SUPERSEDED if k["labels"]["cause_node"] in live else CLEARED)
            for k in kept
            if k["labels"]["cause_node"] not in own
        ]
        kept = [k for k in kept if k["labels"]["cause_node"] in own]
        if row["cause_node"] == node and row["labels"].get("severity") == severity:
            if ended:
                self._set_kept(row, kept, ended, now)
            self._refresh(row, inc, top)  # the next re-send carries today's counts
            return True
        if row["cause_node"] != node and row["cause_node"] in own:
            if severity is None:  # the new top is too unsure to page: the sent one stays alone
                if ended:
                    self._set_kept(row, kept, ended, now)
                return True
            # a further cause: the one sent keeps firing beside it (see KEPT)
            kept.append(self._kept_entry(row))
            self._set_kept(row, [], ended, now)
            rows[inc["id"]] = self._set_firing(
                inc, top, severity, now, self._outbox(row), None, kept
            )
            return True
        # the settled cause or its severity changed, or it fell below the floor
        same = row["cause_node"] == node
        because = UNSURE if severity is None else RESEVERED if same else SUPERSEDED
        if not same and row["cause_node"] in named - live:
            because = CLEARED  # its own alerts resolved (a re-ranking named the next fault)
        was = (
            row["labels"].get("severity") if because == RESEVERED and self._hook_took(row) else None
        )
        self._set_kept(row, [], ended, now, save=False)
        self._set_resolved(row, now, because)
        if severity is None:  # too unsure to page anyone: the incident page still shows it
            if kept:  # a cause still firing on its own alerts takes the row (see KEPT)
                rows[inc["id"]] = self._promote(row, kept, now)
            return True
        rows[inc["id"]] = self._set_firing(inc, top, severity, now, self._outbox(row), was, kept)
        return True

    def _alert_nodes(self, inc_id: int) -> tuple[set[str], set[str]]:
        """``(nodes with a firing alert, nodes with any alert)`` of incident ``inc_id``: the graph
        nodes its alerts were mapped to when grouped."""
        a = alert_rows.c
        q = (
            select(a.node, a.status)
            .where(a.incident_id == inc_id, a.node.is_not(None))
            .group_by(a.node, a.status)
        )
        with self.db.read() as conn:
            found = [(str(r[0]), r[1]) for r in conn.execute(q)]
        return {n for n, status in found if status == "firing"}, {n for n, _ in found}

    def _kept_entry(self, row: dict[str, Any]) -> dict[str, Any]:
        """A firing row as an entry of :data:`KEPT` (its alert as sent)."""
        return {
            "labels": dict(row["labels"]),
            "annotations": dict(row["annotations"]),
            "starts_at": row["starts_at"],
            "hook": self._hook_took(row) and bool(self.hook_url),
        }

    def _set_kept(
        self,
        row: dict[str, Any],
        kept: list[dict[str, Any]],
        ended: list[tuple[dict[str, Any], str]],
        now: float,
        save: bool = True,
    ) -> None:
        """Make firing ``row`` carry ``kept`` (:data:`KEPT`) and owe the resolutions of the kept
        causes ``ended``, each ``(entry, why)``: :data:`CLEARED` (every alert on its own node
        resolved) or :data:`SUPERSEDED` (the top cause explains it), then store it."""
        outbox = self._outbox(row)
        outbox += [self._resolution(k, now, because) for k, because in ended]
        delivery = dict(row.get("delivery") or {})
        delivery.pop(KEPT, None)
        if kept:
            delivery[KEPT] = kept
        if outbox:
            delivery[OUTBOX] = outbox
        row["delivery"] = delivery if delivery or row.get("delivery") is not None else None
        if save:
            self._save(row)

    def _resolution(self, entry: dict[str, Any], now: float, because: str) -> dict[str, Any]:
        """The outbox entry (:data:`OUTBOX`) resolving kept cause ``entry`` for ``because``."""
        gone = self._kept_row(entry, now, because)
        return {
            "alert": self.alertmanager_alert(gone),
            "alertmanager": list(self.am_urls),
            "webhook": self.webhook_body(gone) if entry.get("hook") and self.hook_url else None,
            "due_ts": now,
        }

    @staticmethod
    def _kept_row(entry: dict[str, Any], now: float, because: str | None = None) -> dict[str, Any]:
        """Kept cause ``entry`` (:data:`KEPT`) as a ``notifications`` row: firing, or resolved
        at ``now`` (Unix s) for ``because``."""
        annotations = dict(entry["annotations"])
        if because is not None:
            annotations["resolved_because"] = because
        return {
            "incident_id": int(entry["labels"]["incident"]),
            "state": "firing" if because is None else "resolved",
            "cause_node": entry["labels"]["cause_node"],
            "labels": entry["labels"],
            "annotations": annotations,
            "starts_at": entry["starts_at"],
            "ends_at": None if because is None else max(_iso(now), entry["starts_at"]),
            "delivery": None,
        }

    def _promote(
        self, row: dict[str, Any], kept: list[dict[str, Any]], now: float
    ) -> dict[str, Any]:
        """Store (and return) the firing row of the first of ``kept`` (its alert as sent, the
        others still kept) after ``row`` resolved: a sent cause whose own alerts still fire."""
        first, rest = kept[0], kept[1:]
        delivery: dict[str, Any] = {"webhook": "sent"} if first.get("hook") else {}
        outbox = self._outbox(row)
        if outbox:
            delivery[OUTBOX] = outbox
        if rest:
            delivery[KEPT] = rest
        new = {
            **self._kept_row(first, now),
            "am_sent_ts": None,
            "hook_sent": bool(first.get("hook")) or not self.hook_url,
            "delivery": delivery,
            "updated_ts": now,
        }
        self._save(new)
        return new

    def _settled(self, inc_id: int, state: tuple[str | None, str | None], now: float) -> bool:
        """Whether incident ``inc_id`` has had ``state`` (its top cause's node and severity, both
        ``None`` when it has no cause) for ``FLEETMIND_NOTIFY_SETTLE_S`` seconds up to ``now``
        (Unix s); a new state starts the wait again."""
        seen = self._seen.get(inc_id)
        if seen is None or seen[0] != state:
            seen = self._seen[inc_id] = (state, now)
        return not 0 <= now - seen[1] < self.settings.notify_settle_s  # (< 0: clock stepped back)

    def _previous(self, inc_id: int, node: str, row: dict[str, Any] | None) -> str | None:
        """The severity cause ``node`` of incident ``inc_id`` has now, for the hysteresis of
        :func:`held_severity`: its firing row's, else the one it is settling at, else none."""
        if row is not None and row["state"] == "firing" and row["cause_node"] == node:
            return row["labels"].get("severity")
        if row is not None and row["state"] == "firing":  # a kept cause: the severity it was sent
            for k in (row.get("delivery") or {}).get(KEPT) or []:
                if k["labels"]["cause_node"] == node:
                    return k["labels"].get("severity")
        seen = self._seen.get(inc_id)
        return seen[0][1] if seen is not None and seen[0][0] == node else None

    def _set_firing(
        self,
        inc: dict[str, Any],
        top: dict[str, Any],
        severity: str,
        now: float,
        outbox: list[dict[str, Any]] | None = None,
        severity_was: str | None = None,
        kept: list[dict[str, Any]] | None = None,
    ) -> dict[str, Any]:
        """Store (and return) the firing row of incident ``inc``'s settled cause ``top``, which
        carries ``outbox``: the resolutions still owed, sent before it (see :data:`OUTBOX`), and
        ``kept``: the earlier causes sent beside it (:data:`KEPT`; one on ``top``'s node keeps
        its start, and its alert ends first when ``severity`` differs)."""
        kept, outbox, starts, took = list(kept or []), list(outbox or []), _iso(now), False
        for k in [k for k in kept if k["labels"]["cause_node"] == top["node"]]:
            kept.remove(k)
            if k["labels"].get("severity") != severity:
                outbox.append(self._resolution(dict(k, hook=False), now, RESEVERED))
            else:  # the same alert, firing on: Alertmanager keeps its start, the chat had it
                starts, took = k["starts_at"], bool(k.get("hook"))
        cluster = top.get("cluster") or ",".join(inc["clusters"] or []) or "unknown"
        if len(cluster) > CLUSTER_CHARS:  # an incident's clusters come from alert labels
            cluster = cluster[: CLUSTER_CHARS - 1] + "…"
        labels = {
            "alertname": ALERTNAME,
            INSTALLATION_LABEL: installation(self.settings.public_url),
            "incident": str(inc["id"]),
            "cause_node": top["node"],
            "cause_kind": top.get("kind") or "unknown",
            "cluster": cluster,
            "severity": severity,
        }
        delivery: dict[str, Any] = {}  # the firing message's fate per channel (delivery_outcome)
        if outbox:
            delivery[OUTBOX] = outbox
        if severity_was:
            delivery[SEVERITY_WAS] = severity_was
        if kept:
            delivery[KEPT] = kept
        if took:
            delivery["webhook"] = "sent"
        row = {
            "incident_id": inc["id"],
            "state": "firing",
            "cause_node": top["node"],
            "labels": labels,
            "annotations": self._annotations(inc, top, cluster),
            "starts_at": starts,
            "ends_at": None,
            "am_sent_ts": None,
            "hook_sent": took,
            "delivery": delivery,
            "updated_ts": now,
        }
        self._save(row)
        return row

    def _annotations(
        self, inc: dict[str, Any], top: dict[str, Any], cluster: str
    ) -> dict[str, str]:
        """The FleetMindRootCause annotations of incident ``inc`` whose top cause is ``top``. The
        outside values in their text (node ids, cluster) are bidi isolates
        (:func:`~fleetmind.serving.ui.svg.isolate`), so that a U+202E in one reverses none of
        FleetMind's words; the ``path`` ids then round-trip through :data:`PATH_IDS`."""
        fault = top.get("fault_type") or ""
        path = [str(n) for n in (top.get("path") or [top["node"]])]
        text = PATH_SEP.join(isolate(n) for n in path)
        node = isolate(str(top["node"]))
        out = {
            "summary": f"Root cause of incident {inc['id']}: {node}"
            + (f" ({isolate(fault)})" if fault else ""),
            "description": f"{inc['firing_count']} firing alerts in {isolate(cluster)}; FleetMind "
            f"ranks {node} first ({inc['method'] or 'rca'}).",
            "path": text,
            "score": score_annotation(top["score"]),
            EXACT_SCORE: repr(float(top["score"])),
            "fault_type": fault,
            "incident_url": f"{self.settings.public_url.rstrip('/')}/ui/incidents/{inc['id']}",
        }
        if text.split(PATH_SEP) != path:  # only when the text is ambiguous (see PATH_IDS)
            out[PATH_IDS] = json.dumps(path)
        return out

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

    @staticmethod
    def _hook_took(row: dict[str, Any]) -> bool:
        """Whether the webhook took ``row``'s firing message (a row from before ``delivery`` was
        stored: whether it was marked sent)."""
        delivery = row.get("delivery")
        return bool(row["hook_sent"]) if delivery is None else delivery.get("webhook") == "sent"

    def _set_resolved(self, row: dict[str, Any], now: float, because: str = CLOSED) -> None:
        """Turn ``row`` into its resolution and add that to the resolutions it owes (kept until
        every receiver took it or ``FLEETMIND_NOTIFY_GIVE_UP_S`` passed, whatever follows).

        Every Alertmanager gets the alert with ``endsAt``, each until it takes it: an alert it
        does not have is a no-op there, and an HA peer that missed the resolution would hold the
        alert until its ``resolve_timeout``. The webhook gets a resolved (or withdrawn) message
        only for a firing one it took: "Resolved incident 13" in a channel that never heard of
        incident 13 is noise; and none for a change of severity alone, which the next firing
        message words as such."""
        took = self._hook_took(row) and because != RESEVERED and bool(self.hook_url)
        outbox = self._outbox(row)
        for k in (row.get("delivery") or {}).get(KEPT) or []:  # the causes sent beside it end too
            outbox.append(self._resolution(k, now, because))
        row["annotations"] = {**row["annotations"], "resolved_because": because}
        row.update(state="resolved", ends_at=_iso(now), updated_ts=now)
        started = _unix(row["starts_at"])
        if started is not None and started > now:  # the wall clock stepped back since it fired:
            # Alertmanager refuses an alert that ends before it starts (types.Alert.Validate,
            # "start time must be before end time"); it ended now, it started no later
            row["starts_at"] = row["ends_at"]
        entry = {
            "alert": self.alertmanager_alert(row),
            "alertmanager": list(self.am_urls),
            "webhook": self.webhook_body(row) if took else None,
            "due_ts": now,
        }
        if entry["alertmanager"] or entry["webhook"] is not None:
            outbox.append(entry)
        if len(outbox) > OUTBOX_MAX:  # the oldest go: a cause changing while receivers are down
            for old in outbox[: len(outbox) - OUTBOX_MAX]:  # (dropped: only what each still owed)
                owed = ["alertmanager"] if old["alertmanager"] else []
                owed += ["webhook"] if old["webhook"] is not None else []
                if owed:
                    self._give_up(" and ".join(owed), row["incident_id"], "too many undelivered")
            del outbox[: len(outbox) - OUTBOX_MAX]
        delivery = {
            k: v for k, v in (row.get("delivery") or {}).items() if k not in (SEVERITY_WAS, KEPT)
        }
        if outbox:
            delivery[OUTBOX] = outbox
        else:
            delivery.pop(OUTBOX, None)
        keep_null = row.get("delivery") is None and not outbox  # a row from before the column
        row.update(delivery=None if keep_null else delivery, hook_sent=True)
        row["am_sent_ts"] = None if outbox else now  # (nothing owed: done with)
        self._save(row)

    def _outbox(self, row: dict[str, Any]) -> list[dict[str, Any]]:
        """A copy of the resolutions ``row`` still owes (:data:`OUTBOX`); for a resolved row
        stored before they were kept there, its own resolution if it was undelivered."""
        delivery = row.get("delivery") or {}
        if OUTBOX in delivery:
            return [dict(e, alertmanager=list(e["alertmanager"])) for e in delivery[OUTBOX]]
        if row["state"] != "resolved" or (row["am_sent_ts"] is not None and row["hook_sent"]):
            return []
        hook = not row["hook_sent"] and bool(self.hook_url)
        return [
            {
                "alert": self.alertmanager_alert(row),
                "alertmanager": list(self.am_urls) if row["am_sent_ts"] is None else [],
                "webhook": self.webhook_body(row) if hook else None,
                "due_ts": float(row["updated_ts"]),
            }
        ]

    def _save(self, row: dict[str, Any]) -> None:
        with self.db.write() as conn:
            conn.execute(
                notifications.delete().where(notifications.c.incident_id == row["incident_id"])
            )
            conn.execute(notifications.insert().values(**row))

    # ------------------------------------------------------------------ delivery
    def _deliver_all(self, rows: list[dict[str, Any]], now: float) -> int:
        """Send what ``rows`` still owe: each row's resolutions, oldest first, then its firing
        message (to each Alertmanager in a few posts for all rows together, :meth:`_post_batch`;
        to the webhook one message at a time); store what became of them. Returns the number of
        messages delivered."""
        before = [(r["am_sent_ts"], r["hook_sent"], r.get("delivery")) for r in rows]
        outboxes = [self._outbox(r) for r in rows]
        for row, outbox in zip(rows, outboxes, strict=True):
            if row.get("delivery") is not None or outbox:  # (a copy: ``before`` keeps the stored)
                row["delivery"] = dict(row.get("delivery") or {})
        done = self._deliver_alertmanager(rows, outboxes, now)
        self._hook_until = time.monotonic() + WEBHOOK_BUDGET_S  # (Alertmanager's went first)
        changed = []
        for row, outbox, was in zip(rows, outboxes, before, strict=True):
            chat = self._deliver_webhook(row, outbox, now)
            done += chat
            if self._delivered(row, outbox, was, now):
                changed.append(row)
            # a chat message is recorded at once: a crash repeats no more than the one in flight
            if chat or row["hook_sent"] != was[1]:
                self._record(changed)
                changed = []
        for i in range(0, len(changed), BATCH):  # the rest: one commit per batch
            self._record(changed[i : i + BATCH])
        return done

    def _record(self, rows: list[dict[str, Any]]) -> None:
        """Store what became of ``rows``' messages (``am_sent_ts``, ``hook_sent``, ``delivery``),
        in one transaction."""
        if not rows:
            return
        with self.db.write() as conn:
            conn.execute(
                _RECORD,
                [
                    {
                        "_id": row["incident_id"],
                        "_state": row["state"],
                        "_am": row["am_sent_ts"],
                        "_hook": row["hook_sent"],
                        "_delivery": row.get("delivery"),
                    }
                    for row in rows
                ],
            )

    def _delivered(
        self, row: dict[str, Any], outbox: list[dict[str, Any]], before: tuple[Any, ...], now: float
    ) -> bool:
        """Put into ``row`` what is left of ``outbox`` after the posts (a row whose resolutions all
        went out or were dropped is done with); whether the row changed from ``before``
        (``am_sent_ts``, ``hook_sent``, ``delivery`` as read)."""
        outbox[:] = [e for e in outbox if e["alertmanager"] or e["webhook"] is not None]
        if row["delivery"] is not None:
            row["delivery"].pop(OUTBOX, None)
            if outbox:
                row["delivery"][OUTBOX] = outbox
            elif before[2] is None and not row["delivery"]:
                row["delivery"] = None
        if row["state"] == "resolved" and not outbox:  # every resolution went out or was dropped
            row["am_sent_ts"] = now if row["am_sent_ts"] is None else row["am_sent_ts"]
            row["hook_sent"] = True
            for key in [k for k in self._refused if k[0] == row["incident_id"]]:
                self._refused.pop(key, None)
        return (row["am_sent_ts"], row["hook_sent"], row.get("delivery")) != before

    def _deliver_alertmanager(
        self, rows: list[dict[str, Any]], outboxes: list[list[dict[str, Any]]], now: float
    ) -> int:
        """Post to each Alertmanager the resolutions it has not taken (each instance of an HA pair
        is tracked on its own) and the firing alerts that are due, of all ``rows`` (``outboxes``:
        their resolutions) together (:meth:`_post_batch`); returns how many of these messages
        some instance took.

        A firing alert also follows, due or not, the resolutions an instance is owed for its
        incident. One may have its labels: a cause that was withdrawn and came back while this
        instance missed both. Alertmanager keys an alert by its labels and stores a request's
        alerts in order (provider/mem ``Put``), so the stale resolution alone would end the live
        alert there until the next re-send; followed by it, the alert stays firing, on an
        instance that kept its alerts and on one that restarted empty. Any other (one left owed
        when :data:`REFUSAL_BUDGET_S` ran out) gets it too, so that one the instance refuses is
        refused on its own while the firing alert is taken, and dropped (:meth:`_am_outcome`),
        never held with the incident's re-sends to that instance. Each row's alerts stay
        together and in this order within one post.
        """
        plans = [
            self._am_plan(row, outbox, now) for row, outbox in zip(rows, outboxes, strict=True)
        ]
        results: list[dict[str, list[tuple[bool, str]]]] = [{} for _ in rows]
        for url in self.am_urls:
            ks = [k for k, (_, plan) in enumerate(plans) if plan.get(url)]
            entries = []
            for k in ks:
                outbox, items = outboxes[k], plans[k][1][url]
                body = [self._am_item(rows[k], outbox, i, now) for i in items]
                firing = [i for i in items if i > -3]  # (the kept causes go with it)
                resend = firing == [-1] and rows[k]["am_sent_ts"] is not None
                entries.append((rows[k]["incident_id"], body, resend))
            for k, res in zip(ks, self._post_batch(url, entries), strict=True):
                results[k][url] = res
        return sum(
            self._am_outcome(row, outbox, plan, res, now)
            for row, outbox, plan, res in zip(rows, outboxes, plans, results, strict=True)
        )

    def _am_item(
        self, row: dict[str, Any], outbox: list[dict[str, Any]], i: int, now: float
    ) -> dict[str, Any]:
        """Item ``i`` of a plan (:meth:`_am_plan`) as posted: a resolution owed (``i >= 0``),
        the firing alert (-1, -2) or kept cause ``-3 - i`` (:data:`KEPT`)."""
        if i >= 0:
            return dict(outbox[i]["alert"])
        if i > -3:
            return self.alertmanager_alert(row)
        return self.alertmanager_alert(self._kept_row(row["delivery"][KEPT][-3 - i], now))

    def _am_plan(
        self, row: dict[str, Any], outbox: list[dict[str, Any]], now: float
    ) -> tuple[bool, dict[str, list[int]]]:
        """``(due, plan)``: whether ``row``'s firing alert is due (its first post or its re-send),
        and what each Alertmanager URL gets of it: indices into ``outbox``, then the kept causes
        (:data:`KEPT`, ``-3 - j`` for the j-th), then -1 (the firing alert, due) or -2 (the firing
        alert, not due, after the resolutions owed). A resolution
        that URL refused on its own comes after the others owed, so that they are tried first
        (with the refusal budget spent, only an entry's first resolution is posted alone)."""
        for e in outbox:  # an instance no longer configured cannot take it any more (a URL
            # stored with its user:password, before the password was left out, still matches)
            e["alertmanager"] = [
                u for u in map(without_password, e["alertmanager"]) if u in self.am_urls
            ]
            if "refused_by" in e:
                e["refused_by"] = [without_password(u) for u in e["refused_by"]]
        firing = row["state"] == "firing"
        # a send "in the future" means the wall clock stepped back: re-send now, or
        # Alertmanager's resolve_timeout would end the alert while the clock catches up
        due = firing and (
            row["am_sent_ts"] is None
            or not 0 <= now - row["am_sent_ts"] < self.settings.notify_resend_s
        )
        plan = {}
        for url in self.am_urls:
            owed = [i for i, e in enumerate(outbox) if url in e["alertmanager"]]
            owed.sort(key=lambda i: url in outbox[i].get("refused_by", ()))  # (stable)
            items = owed + [-1 if due else -2] * (due or (firing and bool(owed)))
            if items and items[-1] < 0:  # the kept causes (KEPT) go with the firing alert
                kept = len((row.get("delivery") or {}).get(KEPT) or []) if firing else 0
                items[-1:-1] = [-3 - j for j in range(kept)]
            if items:
                plan[url] = items
        return due, plan

    def _am_outcome(
        self,
        row: dict[str, Any],
        outbox: list[dict[str, Any]],
        plan: tuple[bool, dict[str, list[int]]],
        results: dict[str, list[tuple[bool, str]]],
        now: float,
    ) -> int:
        """Take into ``row`` and ``outbox`` what each Alertmanager did with its ``plan``
        (:meth:`_am_plan`): ``results``, URL -> ``(delivered, outcome)`` of each item; returns
        how many of the row's messages some instance took.

        A resolution an instance refuses on its own is dropped when that instance takes another
        alert of the incident in the same post; else it is kept, marked (``refused_by``) and
        tried after the others owed (so that it does not hold them back), and an instance that
        refuses every alert loses none before ``FLEETMIND_NOTIFY_GIVE_UP_S`` (an instance that
        refused everything for a while marked valid ones too: a mark alone drops nothing)."""
        inc_id, (due, urls) = row["incident_id"], plan
        taken: set[int] = set()  # indices into outbox; -1, -2: the firing alert (see _am_plan)
        last = ""  # the firing alert's outcome: a taker's, else the last failure's
        for url, items in urls.items():
            res = results[url]
            some_took, still_refused = any(ok for ok, _ in res), False
            for i, (ok, outcome) in zip(items, res, strict=True):
                if ok:
                    taken.add(i)
                    if i >= 0:
                        outbox[i]["alertmanager"].remove(url)
                elif i >= 0 and some_took and refuses_alerts(outcome):  # refused on its own
                    # (a mark alone drops nothing: an instance that refused every alert for a
                    # while marked valid ones too; marked ones are tried after the others)
                    outbox[i]["alertmanager"].remove(url)
                    self._give_up(
                        "alertmanager",
                        inc_id,
                        f"{_receiver('alertmanager', url)} refused it: {outcome}",
                    )
                else:
                    still_refused = True
                    marks = outbox[i].get("refused_by", []) if i >= 0 else [url]
                    tried = (inc_id, url) not in self._held_now
                    if tried and refuses_alerts(outcome) and url not in marks:  # (a new list)
                        outbox[i]["refused_by"] = [*marks, url]
            if some_took and not still_refused:  # the one it refused was dropped: no hold
                self._refused.pop((inc_id, url), None)
            if due and (res[-1][0] or -1 not in taken):
                last = res[-1][1]
        # one instance took it; one that missed it gets the next re-send, unless it was only
        # deferred (REFUSAL_BUDGET_S spent this poll): then it stays due, at the next poll, for
        # every instance (a repeat is idempotent there), so a slow instance that takes alerts
        # only alone catches up a few a poll instead of missing all but the first few re-sends
        deferred = any(
            res and res[-1] == (False, DEFERRED) and items and items[-1] == -1
            for items, res in ((urls[u], results[u]) for u in urls)
        )
        if -1 in taken and not deferred:
            row["am_sent_ts"] = now
        delivery = row.get("delivery")
        if due and delivery is not None and last and delivery.get("alertmanager") != "sent":
            delivery["alertmanager"] = "sent" if -1 in taken else last
        for e in outbox:  # (Alertmanager's resolve_timeout ends an alert no longer re-sent)
            if e["alertmanager"] and self._overdue(e["due_ts"], now):
                e["alertmanager"] = []
                self._give_up("alertmanager", inc_id, "undelivered too long")
        return len(taken)

    def _post_batch(
        self, url: str, entries: list[tuple[int, list[Any], bool]]
    ) -> list[list[tuple[bool, str]]]:
        """POST the alerts of ``entries`` (incident id, its alerts, whether they are only the
        re-send of its firing alert) to one Alertmanager; the ``(delivered, outcome)`` of each
        alert of each entry.

        Re-sends go together, up to :data:`BATCH` a post: POST /api/v2/alerts takes a list of
        alerts (Alertmanager's api/v2 ``postAlerts``), so thousands of open incidents' re-sends
        cost a few posts, not one each. Any other entry (a first post, resolutions) is posted on
        its own, its alerts in order. An incident
        refused less than ``FLEETMIND_NOTIFY_RESEND_S`` ago (:meth:`_refusal`) is left out.
        Alertmanager answers 400 when any alert of a request is invalid, while it stores the valid
        ones (api/v2 ``postAlertsHandler``), and its message does not say which in a form to rely
        on: after a final refusal of several alerts each is posted alone, once, so that one bad
        alert does not hold back the others. Posts it refuses so take :data:`REFUSAL_BUDGET_S` of a
        poll at most; an answer that says the receiver is wrong (:data:`RECEIVER_STATUS`) is no
        refusal of the alerts: nothing more is posted there in the poll (:meth:`_post`).
        """
        out: list[list[tuple[bool, str]]] = [[] for _ in entries]
        chunk: list[int] = []
        for k, (inc_id, body, resend) in enumerate(entries):
            why = self._refusal(inc_id, url)
            if why is not None:
                self._held_now.add((inc_id, url))  # (not refused again: not tried)
                out[k] = [(False, why)] * len(body)
            elif not resend:  # a first post or a resolution: its own post, as it comes
                self._post_chunk(url, [entries[k]], [out[k]])
            else:
                chunk.append(k)
            if len(chunk) == BATCH or (chunk and k == len(entries) - 1):
                self._post_chunk(url, [entries[j] for j in chunk], [out[j] for j in chunk])
                chunk = []
        return out

    def _post_chunk(
        self,
        url: str,
        entries: list[tuple[int, list[Any], bool]],
        out: list[list[tuple[bool, str]]],
    ) -> None:
        """One post of :meth:`_post_batch`: fill ``out`` (one list per entry) with the outcome
        of each alert.

        A refused post of several alerts is taken apart, each alert posted alone, in order, by
        entry. Once :data:`REFUSAL_BUDGET_S` is spent, an entry's remaining resolutions are
        :data:`DEFERRED` (kept owed) and only its firing alert (the last, if any) is still
        posted, so that a resolution is never taken while the firing alert with its labels that
        follows it waits (an HA peer would end the live alert until the next re-send), and an
        entry of up to :data:`OUTBOX_MAX` resolutions costs the budget and three posts at most,
        not one post per alert: each post alone counts against the budget (:meth:`_post`), taken
        or refused, and a firing alert deferred stays due (:meth:`_am_outcome`), so an instance
        with a body limit catches up a few alerts a poll. The first entry's first alert goes whatever the budget
        (progress); an entry whose turn comes with the budget spent is deferred whole."""
        ids = {inc_id for inc_id, _, _ in entries}
        body = [a for _, alerts, _ in entries for a in alerts]
        one = next(iter(ids)) if len(ids) == 1 else None
        ok, outcome = self._post("alertmanager", url, body, one, hold=False)
        if ok:
            for inc_id in ids:
                self._refused.pop((inc_id, url), None)
        alone = not ok and len(body) > 1 and refuses_alerts(outcome)
        for k, ((inc_id, alerts, _), res) in enumerate(zip(entries, out, strict=True)):
            if not alone:
                res[:] = [(ok, outcome)] * len(alerts)
            elif k and self._refusals_spent(url):  # the whole entry waits for the next poll
                res[:] = [(False, DEFERRED)] * len(alerts)
            else:  # (the first entry's first alert whatever the budget: progress)
                res[:] = []
                for a in alerts:
                    if res and "endsAt" in a and self._refusals_spent(url):
                        res.append((False, DEFERRED))  # a resolution: owed, before the firing
                    else:
                        res.append(
                            self._post("alertmanager", url, [a], inc_id, hold=False, budget=False)
                        )

    def _deliver_webhook(
        self, row: dict[str, Any], outbox: list[dict[str, Any]], now: float
    ) -> int:
        """Post the webhook's messages in order: the resolutions and withdrawals first, then the
        firing message; while the receiver fails the rest waits for a later poll. Returns how
        many were delivered. Once this poll spent :data:`WEBHOOK_BUDGET_S` on the webhook, the
        rest waits for the next poll, in order, as behind a failure."""
        if not self.hook_url:
            for e in outbox:  # the webhook was turned off: nothing will take these
                e["webhook"] = None
            return 0
        inc_id, done = row["incident_id"], 0
        for e in outbox:
            if e["webhook"] is None:
                continue
            if time.monotonic() >= self._hook_until:
                return done
            ok, outcome = self._post(
                "webhook", self.hook_url, chat_body(self.hook_url, e["webhook"]), inc_id
            )
            if ok:
                e["webhook"], done = None, done + 1
            elif refuses_message(outcome) or self._overdue(e["due_ts"], now):
                e["webhook"] = None
                self._give_up("webhook", inc_id, outcome)
            else:
                return done  # the receiver fails: what follows waits, in order
        if row["state"] != "firing" or row["hook_sent"]:
            return done
        if time.monotonic() >= self._hook_until:
            return done
        sent, outcome = self._post(
            "webhook", self.hook_url, chat_body(self.hook_url, self.webhook_body(row)), inc_id
        )
        dropped = not sent and (refuses_message(outcome) or self._overdue(row["updated_ts"], now))
        if dropped:
            self._give_up("webhook", inc_id, outcome)
        if row.get("delivery") is not None:
            note = "sent" if sent else drop_note(outcome) if dropped else outcome
            row["delivery"]["webhook"] = note
        if sent or dropped:
            row["hook_sent"] = True
        return done + sent

    def _post(
        self,
        channel: str,
        url: str,
        body: Any,
        inc_id: int | None,
        hold: bool = True,
        budget: bool = True,
    ) -> tuple[bool, str]:
        """POST ``body`` to ``url`` once (:func:`post_once`); ``(delivered, outcome)``.
        ``inc_id``: the incident the body is about (``None``: alerts of several incidents, whose
        refusal the caller takes apart).

        Not tried, and ``(False, the last outcome)``, when that receiver failed earlier in this
        poll or is waiting out its back-off, or (Alertmanager, unless ``hold`` is false) refused
        this incident's message less than ``FLEETMIND_NOTIFY_RESEND_S`` ago (:meth:`_refusal`).
        Not tried either, and ``(False, DEFERRED)``, when an Alertmanager already refused posts
        for :data:`REFUSAL_BUDGET_S` of this poll (unless ``budget`` is false: the alerts of a
        refused batch posted alone, whose budget :meth:`_post_chunk` checks itself, and whose
        time counts against it, taken or refused).
        A failure that may pass (connection error,
        timeout, 407/408/425/429, any 5xx), or an Alertmanager's answer that the receiver is wrong
        (:data:`RECEIVER_STATUS`: its URL, credentials or proxy, which no message changes), puts
        the receiver in back-off for every incident: from the
        clock as it is after the attempt (a timeout takes its seconds), ``BACKOFF_S`` doubling
        with each failure in a row, at most ``RETRIES`` times, or as long as a 429 or 503 asked
        in its ``Retry-After`` when that is longer (and never over 300 s: :data:`MAX_PAUSE_S`).
        """
        now = self.clock()
        failures, retry_at, last = self._down.get(url, (0, 0.0, ""))
        # (a wait longer than any back-off: the wall clock stepped back; try now)
        if url in self._down_now or (failures and 0 < retry_at - now <= MAX_PAUSE_S):
            return False, last
        why = self._refusal(inc_id, url) if hold else None
        if why is not None:
            return False, why
        am = channel == "alertmanager"
        if am and budget and self._refusals_spent(url):
            return False, DEFERRED
        started = time.monotonic()
        target = self._am_post.get(url, url) if am else url  # (with its user:password)
        ok, outcome, asked, moved = post_attempt(self._client, target, body, with_reason=not am)
        if self.counter is not None:
            self.counter.labels(channel, "sent" if ok else "failed").inc()
        now, name = self.clock(), _receiver(channel, url)
        refused = not ok and (refuses_alerts(outcome) if am else refuses_message(outcome))
        # taking a refused batch apart, every post counts, taken or refused (an incident may owe
        # up to OUTBOX_MAX resolutions, a re-send batch holds hundreds of firing alerts): the
        # poll stays short; a firing re-send deferred so stays due (_am_outcome)
        if am and (refused or not budget):
            self._refusing_s[url] = self._refusing_s.get(url, 0.0) + time.monotonic() - started
        if (ok or refused) and self._down.pop(url, None) is not None:
            log.info("%s answers again", name)
        if ok and inc_id is not None:
            self._refused.pop((inc_id, url), None)
        elif ok:
            pass
        elif refused and inc_id is None:  # several incidents': each is posted alone
            log.warning("%s refused a post of %d alerts (%s)", name, len(body), outcome)
        elif refused:  # the receiver works and refuses this message
            if am:  # (a refused chat message is dropped by the caller)
                self._refused[(inc_id, url)] = (now + self.settings.notify_resend_s, outcome)
            log.warning("%s refused the notification for incident %s (%s)", name, inc_id, outcome)
        else:
            failures += 1
            backoff = self.settings.notify_backoff_s * 2 ** (
                min(failures, self.settings.notify_retries + 1) - 1
            )
            pause = min(MAX_PAUSE_S, max(backoff, asked or 0.0))
            self._down[url] = (failures, now + pause, outcome)
            self._down_now.add(url)
            setting = "ALERTMANAGER" if am else "WEBHOOK"
            if moved and not am:  # (a chat URL's path is its secret)
                moved = mask_path(moved, url)
            _log_failure(
                name, outcome, failures, pause, asked, moved, f"FLEETMIND_NOTIFY_{setting}_URL"
            )
        return ok, outcome

    def _refusals_spent(self, url: str) -> bool:
        """Whether Alertmanager ``url`` refused posts for :data:`REFUSAL_BUDGET_S` of this
        poll."""
        return self._refusing_s.get(url, -1.0) >= REFUSAL_BUDGET_S

    def _refusal(self, inc_id: int, url: str) -> str | None:
        """The outcome with which Alertmanager ``url`` refused incident ``inc_id``'s message less
        than ``FLEETMIND_NOTIFY_RESEND_S`` ago (it is not asked again before), else ``None``."""
        refused_until, why = self._refused.get((inc_id, url), (0.0, ""))
        if 0 < refused_until - self.clock() <= self.settings.notify_resend_s:
            return why
        return None

    def _overdue(self, since: float, now: float) -> bool:
        """Whether a message due since ``since`` has waited longer than
        ``FLEETMIND_NOTIFY_GIVE_UP_S`` (a clock stepped back counts as not overdue)."""
        return now - float(since) > self.settings.notify_give_up_s

    def _give_up(self, channel: str, inc_id: int, why: str) -> None:
        """Log once that incident ``inc_id``'s message to ``channel`` is dropped, and why, and
        count it (``outcome="dropped"`` of each channel named: FleetMindNotificationsFailing)."""
        if self.counter is not None:
            on = {"alertmanager": bool(self.am_urls), "webhook": bool(self.hook_url)}
            for name in channel.split(" and "):
                if on.get(name):
                    self.counter.labels(name, "dropped").inc()
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
            "annotations": {
                k: v for k, v in row["annotations"].items() if k not in HIDDEN_ANNOTATIONS
            },
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
        node, cluster = (code_span(v) for v in (lab["cause_node"], lab["cluster"]))
        path = code_span(PATH_SEP.join(isolate(n) for n in _path_ids(a)))
        if because == SUPERSEDED:  # the incident is still open: its root cause changed
            text = (
                f":arrows_counterclockwise: Root cause of {link} changed: {node} "
                "withdrawn, the new one follows"
            )
        elif because == RESEVERED:  # (the webhook is not sent these: the next message says it)
            text = (
                f":arrows_counterclockwise: Severity of root cause {node} of {link} changed "
                f"(was {mrkdwn(lab.get('severity') or 'unknown')}); the update follows"
            )
        elif because == UNSURE:
            text = (
                f":grey_question: Root cause {node} of {link} withdrawn: the "
                "model is no longer sure (score below the warning floor); the incident is open"
            )
        elif because == NO_CAUSE:
            text = (
                f":grey_question: Root cause {node} of {link} withdrawn: the incident has no "
                "cause on the current graph (its alerts name none of its nodes); the incident is "
                "open"
            )
        elif because == CLEARED:
            text = (
                f":white_check_mark: Root cause {node} of {link} cleared: its alerts resolved; "
                "the incident is open"
            )
        elif resolved:
            text = f":white_check_mark: Resolved {link} (root cause was {node})"
        else:  # a change of severity alone is said here (the old alert's end is not)
            was = (row.get("delivery") or {}).get(SEVERITY_WAS)
            kept = (row.get("delivery") or {}).get(KEPT) or []
            also = ", ".join(code_span(k["labels"]["cause_node"]) for k in kept)
            text = (
                f":rotating_light: {'A further root cause' if kept else 'Root cause'} of "
                f"{link}: {node}"
                + (f" ({mrkdwn(isolate(a['fault_type']))})" if a.get("fault_type") else "")
                + (f", now {mrkdwn(lab['severity'])} (was {mrkdwn(was)})" if was else "")
                + f", score {a['score']}, cluster {cluster}\nPath: {path}"
                + (f"\nStill a cause (its alerts fire): {also}" if kept else "")
            )
        return {
            "text": text,
            "fleetmind": {
                "dedup_key": dedup_key(row, because),
                "status": row["state"],
                "resolved_because": because,
                "incident": int(lab["incident"]),
                "cause_node": lab["cause_node"],
                "cause_kind": lab["cause_kind"],
                "cluster": lab["cluster"],
                "fault_type": a.get("fault_type") or None,
                "score": float(a.get(EXACT_SCORE) or a["score"]),  # older rows: the annotation
                "path": _path_ids(a),
                "incident_url": a["incident_url"],
                "starts_at": row["starts_at"],
                "ends_at": row["ends_at"],
            },
        }
