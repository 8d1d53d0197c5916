"""Replay a stored alert storm into a running FleetMind service, as Alertmanager would deliver it.

A storm file (``examples/*.json``) is ``{"name", "description", "expected_root", "alerts": [...]}``
whose alerts are Alertmanager v4 alert objects with absolute ``startsAt`` times (so the same file can
be posted to ``POST /api/v1/rca`` as it is). :func:`plan_notifications` turns the alerts into the webhook
notifications an Alertmanager route grouped by cluster and alertname would send (``group_by:
[cluster, alertname]``, ``group_wait: 10s``, ``group_interval: 30s``, the timings of
``deploy/alertmanager.yml``'s FleetMind route, which itself sends each alert on its own,
``group_by: ['...']``; how deliveries are batched does not change the incidents; the semantics are those of
Alertmanager's route options, ``docs/configuration.md`` of prometheus/alertmanager v0.28): a group's
first notification goes out ``group_wait`` after its first alert, and every ``group_interval`` after
that while new alerts joined it, each notification carrying all the group's alerts so far.

Alerts are told apart by their label set, as Alertmanager's fingerprint (a hash of the labels)
tells them apart: a later entry with the same labels replaces the earlier one in its group from its
``startsAt`` on, merged with it as ``types.Alert.Merge`` merges them while the earlier entry had not
ended (the earlier ``startsAt`` kept; the later end kept while the new copy fires, a resolution's
own end once it resolves; :func:`_join`), so a storm that records an alert's firing and its
resolution as two entries delivers one alert, firing and then resolved, whatever their order.

``endsAt`` is read as Alertmanager reads it, in storm time: an alert is firing in a notification
sent before its ``endsAt`` and goes out with the zero ``endsAt`` (``0001-01-01T00:00:00Z``), as
Alertmanager's ``aggrGroup.flush`` (``dispatch/dispatch.go`` of prometheus/alertmanager) zeroes the
``endsAt`` of every alert not yet resolved; once its ``endsAt`` has passed, the group's next flush
(a ``group_interval`` tick) sends it ``resolved`` with its ``endsAt``, and it leaves the group. An
alert the file marks ``"status": "resolved"`` resolves so at its ``endsAt`` (at its ``startsAt``
when it has none, which then goes out as its ``endsAt``), even one after the storm's last
``startsAt``: the replay then goes on until the flush that sends it resolved. The storm is
re-timed to end now, so only an ``endsAt`` up to the storm's last ``startsAt`` has passed: a
firing alert's later ``endsAt`` lies in the future and the alert stays firing. That is what such an ``endsAt`` means:
Prometheus sends a firing alert with ``EndsAt`` = its ``ValidUntil`` (prometheus/prometheus
``rules/manager.go``, ``SendAlerts``: ``ResolvedAt`` once resolved, else ``ValidUntil``), and
``rules/alerting.go`` (``sendAlerts``) sets ``ValidUntil = ts + 4 * max(interval, resendDelay)``,
a few evaluation intervals ahead; so a storm captured from Alertmanager's ``/api/v2/alerts`` has
an ``endsAt`` after its last ``startsAt`` on every alert still firing, and resolving those would
be wrong (such a capture's ``status`` object, ``{"state": "active", ...}``, reads as firing: that
API lists only alerts not resolved). As Alertmanager's dedup stage (``notify/notify.go``,
``needsUpdate``) does, a flush is sent only when an alert started firing since the group's last
notification, or one of the group's notified alerts resolved: an alert that resolved before it
was ever sent firing is never delivered. A group that emptied starts afresh with its next alert (first flush ``group_wait``
after it); Alertmanager 0.25 deletes an emptied group only in a clean-up pass every 30 s
(``Dispatcher.run``), so it may deliver that alert on the old group's schedule instead, from up to
``group_wait`` earlier to up to ``group_interval - group_wait`` later, with the same content.

:func:`replay` re-times the storm so that its last alert starts now (gaps kept), sends the
notifications in order, ``speed`` times faster than real time, and returns what the service answered.
"""

from __future__ import annotations

import json
import math
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from fleetmind.data.errors import ConfigError, DataError, NotAvailableError
from fleetmind.data.fetch import check_http_url
from fleetmind.http_client import client as proxied_client
from fleetmind.redact import safe_uri, terminal_safe

GROUP_BY: tuple[str, ...] = ("cluster", "alertname")
GROUP_WAIT_S = 10.0
GROUP_INTERVAL_S = 30.0
ZERO_TIME = "0001-01-01T00:00:00Z"
"""Alertmanager's zero time: the ``endsAt`` of an alert not resolved (Go's ``time.Time{}``)."""


@dataclass(frozen=True)
class Notification:
    """One webhook delivery: ``at_s`` seconds after the storm's first alert, its v4 payload."""

    at_s: float
    payload: dict[str, Any]


def _ts(value: Any, where: str, field: str = "startsAt") -> datetime:
    if not isinstance(value, str):
        raise DataError(f"{where}: {field} must be an RFC 3339 time string, got {value!r}")
    try:
        t = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise DataError(f"{where}: {field} {value!r} is not an RFC 3339 time") from None
    return t if t.tzinfo else t.replace(tzinfo=UTC)


def _has_end(alert: dict[str, Any]) -> bool:
    """Whether ``alert`` has an ``endsAt`` to re-time (Alertmanager's zero time ``0001-...`` and
    an empty or null one mean none)."""
    return bool(alert.get("endsAt")) and not str(alert["endsAt"]).startswith("0001")


V2_FIRING_STATES = ("active", "unprocessed", "suppressed")
"""The ``status.state`` values of Alertmanager's ``GET /api/v2/alerts`` (its OpenAPI
``alertStatus``); that list holds only alerts not resolved, so each of them reads as firing. A
``suppressed`` one (silenced or inhibited) is replayed too, though Alertmanager's mute stages did
not deliver it: replay does not apply silences or inhibitions (remove such alerts from the file to
replay only what was delivered)."""


def _read_status(alert: dict[str, Any], where: str) -> None:
    """Check ``alert``'s ``status``: ``firing`` or ``resolved`` (none: firing), or the object of an
    ``/api/v2/alerts`` capture (``{"state": "active", "silencedBy": [], "inhibitedBy": []}``),
    which becomes ``firing`` when its state is one of :data:`V2_FIRING_STATES`."""
    status = alert.get("status", "firing")
    if isinstance(status, dict) and status.get("state") in V2_FIRING_STATES:
        alert["status"] = "firing"
    elif isinstance(status, dict):
        raise DataError(
            f"{where}: status.state must be one of {', '.join(V2_FIRING_STATES)} (an "
            f"/api/v2/alerts capture), got {status.get('state')!r}"
        )
    elif status not in ("firing", "resolved"):
        raise DataError(f"{where}: status must be firing or resolved, got {status!r}")


def load_storm(path: str | Path) -> dict[str, Any]:
    """Read and check a storm file (``{"alerts": [...]}``, or a JSON array of alerts as
    Alertmanager's ``GET /api/v2/alerts`` answers); returns it with ``alerts`` sorted by
    ``startsAt``.

    Raises:
        DataError: unreadable JSON, no ``alerts`` list, an alert without ``labels.alertname`` or with
            a bad ``startsAt`` or ``endsAt`` (an empty one reads as none, the zero time), a label or
            annotation value that is not a string, a ``status`` other than ``firing``,
            ``resolved`` or an ``/api/v2/alerts`` status object (:func:`_read_status`; that API
            lists only alerts not resolved, so such a capture replays as firing), or times too
            far apart to re-time the storm to end now (:func:`retime`).
    """
    p = Path(path)
    try:
        storm = json.loads(p.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise DataError(f"storm file not found: {p}") from None
    except (OSError, UnicodeDecodeError, ValueError) as err:
        raise DataError(f"{p}: not a JSON storm file: {err}") from None
    if isinstance(storm, list):  # as Alertmanager's GET /api/v2/alerts answers: a bare array
        storm = {"alerts": storm}
    alerts = storm.get("alerts") if isinstance(storm, dict) else None
    if not isinstance(alerts, list) or not alerts:
        raise DataError(
            f'{p}: expected {{"alerts": [...]}} (or a JSON array of alerts, as Alertmanager\'s '
            "/api/v2/alerts answers) with at least one alert"
        )
    for i, a in enumerate(alerts):
        where = f"{p}: alert {i}"
        if not isinstance(a, dict) or not isinstance(a.get("labels"), dict):
            raise DataError(f"{where}: expected an object with a labels object")
        if not a["labels"].get("alertname"):
            raise DataError(f"{where}: labels.alertname is missing")
        for field in ("labels", "annotations"):
            values = a.get(field, {})
            if not isinstance(values, dict):
                raise DataError(f"{where}: {field} must be an object of strings")
            for k, v in values.items():
                if not isinstance(v, str):
                    raise DataError(f"{where}: {field}.{k} must be a string, got {v!r}")
        _read_status(a, where)
        _ts(a.get("startsAt"), where)
        if a.get("endsAt") == "":
            a["endsAt"] = ZERO_TIME  # no end, as Alertmanager's zero time says
        if a.get("endsAt") is not None:
            _ts(a["endsAt"], where, "endsAt")
    storm["alerts"] = sorted(alerts, key=lambda a: _ts(a["startsAt"], ""))
    try:
        retime(storm["alerts"], datetime.now(UTC))
    except DataError as err:
        raise DataError(f"{p}: {err}") from None
    return storm


def webhook_payload(group: dict[str, str], alerts: list[dict[str, Any]]) -> dict[str, Any]:
    """An Alertmanager webhook v4 body for one group (``group``: its ``group_by`` label values)."""
    key = ", ".join(f'{k}="{v}"' for k, v in group.items())
    common = {
        k: v
        for k, v in alerts[0].get("labels", {}).items()
        if all(a.get("labels", {}).get(k) == v for a in alerts)
    }
    return {
        "version": "4",
        "groupKey": f'{{}}/{{alertname!="FleetMindRootCause"}}:{{{key}}}',
        "truncatedAlerts": 0,
        "status": "firing"
        if any(a.get("status", "firing") == "firing" for a in alerts)
        else "resolved",
        "receiver": "fleetmind",
        "groupLabels": dict(group),
        "commonLabels": common,
        "commonAnnotations": {},
        "externalURL": "http://alertmanager.example:9093",
        "alerts": alerts,
    }


def _as_sent(alert: dict[str, Any], resolved: bool) -> dict[str, Any]:
    """``alert`` as one flush sends it: ``resolved`` with its own ``endsAt``, else firing with the
    zero ``endsAt`` (Alertmanager's ``aggrGroup.flush`` zeroes the ``endsAt`` of alerts not yet
    resolved, ``dispatch/dispatch.go``)."""
    if resolved:
        return {**alert, "status": "resolved"}
    return {**alert, "status": "firing", "endsAt": ZERO_TIME}


def _label_key(alert: dict[str, Any]) -> tuple[tuple[str, str], ...]:
    """An alert's identity as Alertmanager keys it: its label set (the fingerprint is a hash of it),
    as sorted ``(name, value)`` pairs."""
    return tuple(sorted((str(k), str(v)) for k, v in alert.get("labels", {}).items()))


@dataclass(frozen=True)
class _Entry:
    """One alert of a storm file as a group sees it: it joins at ``start`` and resolves at ``end``
    (seconds after the storm's first alert; ``None``: firing to the storm's end)."""

    start: float
    end: float | None
    key: tuple[tuple[str, str], ...]
    alert: dict[str, Any]


def _entries(
    alerts: list[dict[str, Any]], group_by: tuple[str, ...]
) -> dict[tuple[str, ...], list[_Entry]]:
    """``alerts`` by group, each group's in the order they join (by ``startsAt``; of two with the
    same labels and ``startsAt``, one the file marks resolved after one it does not)."""
    t0 = min(_ts(a["startsAt"], "") for a in alerts)
    horizon = max((_ts(a["startsAt"], "") - t0).total_seconds() for a in alerts)
    groups: dict[tuple[str, ...], list[_Entry]] = {}
    for a in alerts:
        start = (_ts(a["startsAt"], "") - t0).total_seconds()
        end = (_ts(a["endsAt"], "", "endsAt") - t0).total_seconds() if _has_end(a) else None
        if a.get("status") == "resolved":  # resolved at its endsAt, else when it starts
            if end is None:
                a, end = {**a, "endsAt": a["startsAt"]}, start
        elif end is not None and end > horizon:
            end = None  # lies in the future: a firing alert's ValidUntil (module docstring)
        key = tuple(str(a.get("labels", {}).get(k, "")) for k in group_by)
        groups.setdefault(key, []).append(_Entry(start, end, _label_key(a), a))
    for items in groups.values():
        items.sort(key=lambda e: (e.start, e.alert.get("status") == "resolved"))
    return groups


def _join(present: dict[tuple[tuple[str, str], ...], _Entry], new: _Entry) -> None:
    """Add ``new`` to a group's alerts; one with the same labels is replaced, as Alertmanager's
    store replaces it (``provider/mem``), merged with the old one when that had not ended by the new
    one's start, as ``types.Alert.Merge`` (``types/types.go`` of prometheus/alertmanager) merges
    them: the earlier ``startsAt`` is kept; while the new copy is firing the later end wins (a
    future one, ``None``, is later than any; an old one without ``endsAt``, Alertmanager's
    resolve timeout, never wins); a new resolution's end wins unless the old copy was a
    resolution too with a later end. So the result does not depend on the order of the file."""
    old = present.get(new.key)
    if old is None or not (old.end is None or old.end > new.start):
        present[new.key] = new
        return
    if new.alert.get("status") == "resolved":  # o.Resolved(): only a later resolution wins
        ends = (old.end or 0.0, new.end or 0.0)  # both set: resolutions always have an end
        old_wins = old.alert.get("status") == "resolved" and ends[0] > ends[1]
    else:
        later = old.end is None or (new.end is not None and old.end > new.end)
        old_wins = _has_end(old.alert) and later
    alert = {**new.alert, "startsAt": old.alert["startsAt"]}
    if old_wins:
        alert["endsAt"] = old.alert["endsAt"]
    present[new.key] = _Entry(new.start, old.end if old_wins else new.end, new.key, alert)


def _needs_update(
    firing: set[Any], resolved: set[Any], last: tuple[set[Any], set[Any]] | None
) -> bool:
    """Whether Alertmanager's dedup stage sends a flush (``notify/notify.go``,
    ``DedupStage.needsUpdate``, with ``send_resolved``): ``last`` holds the firing and resolved
    alerts of the group's last notification (``None``: none yet)."""
    if last is None:
        return bool(firing)
    if not firing <= last[0]:
        return True
    if not firing:
        return bool(last[0])
    return not resolved <= last[1]


def _plan_group(
    label_values: dict[str, str],
    items: list[_Entry],
    group_wait_s: float,
    group_interval_s: float,
) -> list[Notification]:
    """The notifications of one group (``items`` from :func:`_entries`)."""
    out = []
    nxt = 0  # items[nxt:] have not joined the group yet
    present: dict[tuple[tuple[str, str], ...], _Entry] = {}  # by label set, in joining order
    last: tuple[set[Any], set[Any]] | None = None  # the group's last notification
    tick = items[0].start + group_wait_s
    while nxt < len(items) or present:
        if not present:  # an emptied group: the next alert starts a new one (module docstring)
            tick = max(tick, items[nxt].start + group_wait_s)
        while nxt < len(items) and items[nxt].start <= tick:
            _join(present, items[nxt])
            nxt += 1
        resolved = {k for k, e in present.items() if e.end is not None and e.end <= tick}
        firing = set(present) - resolved
        if _needs_update(firing, resolved, last):
            payload = [_as_sent(e.alert, k in resolved) for k, e in present.items()]
            out.append(Notification(tick, webhook_payload(label_values, payload)))
            last = (firing, resolved)
        for k in resolved:  # flushed: they leave the group
            del present[k]
        # the next flush that can change anything: an alert joins or one resolves
        events = [e.end for e in present.values() if e.end is not None]
        events += [items[nxt].start] if nxt < len(items) and present else []
        if present and not events:
            break  # all firing until the storm's end
        if present:
            tick += max(1, math.ceil((min(events) - tick) / group_interval_s)) * group_interval_s
    return out


def plan_notifications(
    alerts: list[dict[str, Any]],
    group_by: tuple[str, ...] = GROUP_BY,
    group_wait_s: float = GROUP_WAIT_S,
    group_interval_s: float = GROUP_INTERVAL_S,
) -> list[Notification]:
    """The notifications Alertmanager would send for ``alerts``, in time order.

    Each group flushes ``group_wait_s`` after its first alert and then every ``group_interval_s``.
    Alerts are told apart by their label set, as Alertmanager's fingerprint does: a later entry
    with the same labels replaces the earlier one from its ``startsAt`` on. An alert is resolved in
    a flush at or after its ``endsAt`` (a firing one's ``endsAt`` after the last ``startsAt`` is
    ignored: it lies in the future), one the file marks ``"status": "resolved"`` at its ``endsAt``
    (its ``startsAt`` without one), and leaves the group after that flush. A flush is sent only when
    Alertmanager's dedup stage would send it (a new firing alert, a notified alert resolved;
    module docstring).

    Args:
        alerts: v4 alert objects with ``startsAt`` (any order).
        group_by: label names that form a group (a missing label groups as ``""``).
        group_wait_s, group_interval_s: Alertmanager's route options, in seconds.

    Returns:
        Every alert appears in at least one notification, unless it resolved before its group's
        first flush that would have sent it firing, or an entry with the same labels replaced it
        before; a later notification of a group repeats the group's alerts not yet resolved, as
        Alertmanager does. Times are seconds after the first alert.
    """
    if not alerts:
        return []
    out = []
    for key, items in _entries(alerts, group_by).items():
        label_values = dict(zip(group_by, key, strict=True))
        out += _plan_group(label_values, items, group_wait_s, group_interval_s)
    out.sort(key=lambda n: n.at_s)
    return out


def storm_span(alerts: list[dict[str, Any]]) -> timedelta:
    """Time from the first alert's ``startsAt`` to the last one's (``alerts`` as :func:`load_storm`
    checked them)."""
    starts = [_ts(a["startsAt"], "") for a in alerts]
    return max(starts) - min(starts)


def retime(alerts: list[dict[str, Any]], end: datetime) -> list[dict[str, Any]]:
    """Copies of ``alerts`` shifted so that the last one starts at ``end`` (gaps kept).

    Raises:
        DataError: a shifted time falls outside the years 1..9999 (the alerts' times lie that far
            apart).
    """
    first = min(_ts(a["startsAt"], "") for a in alerts)
    last = max(_ts(a["startsAt"], "") for a in alerts)
    shift = end - last
    out = []
    try:
        for a in alerts:
            b = dict(a)
            b["startsAt"] = (_ts(a["startsAt"], "") + shift).isoformat().replace("+00:00", "Z")
            if _has_end(a):
                b["endsAt"] = (_ts(a["endsAt"], "", "endsAt") + shift).isoformat()
                b["endsAt"] = b["endsAt"].replace("+00:00", "Z")
            out.append(b)
    except OverflowError:
        raise DataError(
            f"the alerts' times lie too far apart to replay: re-timed so that the last startsAt "
            f"({last.isoformat()}) becomes {end.isoformat()}, a startsAt (the first: "
            f"{first.isoformat()}) or an endsAt would fall outside the years 1..9999"
        ) from None
    return out


def _rejections(response: Any, alerts: list[dict[str, Any]]) -> tuple[int, dict[str, str]]:
    """What a 200 answer of ``POST /api/v1/alerts`` says it left out of ``alerts`` (its
    ``rejected_count`` and ``rejected`` list, docs/serving/api.md): the count, and for each listed
    alert its identity (fingerprint or labels, and ``startsAt``: a later notification repeats it)
    and a one-line reason."""
    try:
        body = response.json()
    except ValueError:
        return 0, {}
    listed = body.get("rejected") if isinstance(body, dict) else None
    listed = [r for r in listed if isinstance(r, dict)] if isinstance(listed, list) else []
    count = body.get("rejected_count") if isinstance(body, dict) else None
    count = count if isinstance(count, int) and count >= len(listed) else len(listed)
    out: dict[str, str] = {}
    for i, item in enumerate(listed):
        index = item.get("index")
        alert = alerts[index] if isinstance(index, int) and 0 <= index < len(alerts) else {}
        labels = alert.get("labels") if isinstance(alert.get("labels"), dict) else {}
        errors = item.get("errors") if isinstance(item.get("errors"), list) else []
        err = errors[0] if errors and isinstance(errors[0], dict) else {}
        loc = [str(x) for x in err.get("loc") or []][3:]  # without body, alerts, index
        where = ".".join(loc) or "alert"
        reason = f"{labels.get('alertname', '?')}: {where[:80]}: {str(err.get('msg', '?'))[:200]}"
        ident = alert.get("fingerprint") or json.dumps(labels, sort_keys=True)
        out[f"{ident} {alert.get('startsAt')}" if alert else f"unknown {i}"] = reason
    return count, out


def _check_waits(plan: list[Notification], speed: float) -> None:
    """A :class:`ConfigError` when ``speed`` is so small that a wait between two of ``plan``'s
    notifications would exceed :data:`threading.TIMEOUT_MAX` (the longest wait the system allows)."""
    gaps = [b.at_s - a.at_s for a, b in zip([Notification(0.0, {}), *plan], plan, strict=False)]
    longest = max(gaps, default=0.0) / speed
    if longest > threading.TIMEOUT_MAX:
        raise ConfigError(
            f"--speed {speed:g} is too slow for this storm: the longest wait between two "
            f"notifications would be {longest:.3g} s, more than this system can wait "
            f"({threading.TIMEOUT_MAX:.3g} s); give a larger --speed"
        )


def _summary(plan: list[Notification], entries: int, span: timedelta) -> str:
    """The replay's last line: how many alerts ``plan`` sent (told apart by their labels, as
    Alertmanager does), out of how many ``entries`` of the file, over a storm of ``span``."""
    if not plan:
        return (
            "nothing to send: every alert resolved before its first notification "
            "(as Alertmanager would)"
        )
    sent = len({_label_key(a) for n in plan for a in n.payload["alerts"]})
    of = "" if sent == entries else f"{entries} entries in the file; "
    return (
        f"sent {sent} alert{'' if sent == 1 else 's'} ({of}a storm of {span.total_seconds():.0f} "
        f"s) in {len(plan)} notification{'' if len(plan) == 1 else 's'}"
    )


def check_token(token: str | None, where: str = "token") -> None:
    """Refuse a bearer token the service could never hold: the rule of its settings
    (``serving/settings.py``, ``Settings._no_empty_token``: printable ASCII without spaces, not
    empty). ``where`` names where the token came from (``--token``, ``$FLEETMIND_API_TOKEN``);
    the message never quotes the token. ``None``: no token, nothing to check.

    Raises:
        ConfigError: one line naming ``where`` and what is wrong (a trailing newline of a token
            read from a file, a non-ASCII character).
    """
    if token is None:
        return
    if not token.strip():
        raise ConfigError(f"{where} is empty: give a token, or none when the service has no tokens")
    if token != token.strip() or any(ord(c) < 33 or ord(c) > 126 for c in token):
        hint = " (it ends or starts with whitespace: a newline of the file it came from?)"
        hint = hint if token.strip() != token else ""
        raise ConfigError(
            f"{where} is not a valid token: a token is printable ASCII without spaces{hint}"
        )


def _masked(text: str, token: str | None) -> str:
    """``text`` with ``token`` and the credentials of an ``Authorization`` value (an invalid
    header's message quotes it: ``Bearer <token>``) replaced by ``***``, a URL's password too."""
    if token:
        text = text.replace(token, "***")
    return safe_uri(_AUTH_VALUE.sub(r"\1\2***", text))


_AUTH_VALUE = re.compile(r"(?i)\b(Bearer|Basic)(\s+)[^\s'\"]+")
"""A bearer or basic credential in an error message (``fleetmind.cli.kubeconfig.mask_secrets``)."""


def replay(
    storm: dict[str, Any],
    url: str,
    token: str | None = None,
    speed: float = 10.0,
    say: Callable[[str], None] = print,
    sleep: Callable[[float], None] = time.sleep,
    client: Any = None,
) -> list[dict[str, Any]]:
    """Send ``storm``'s notifications to ``url``'s webhook receiver; returns one record per POST.

    Args:
        storm: from :func:`load_storm`.
        url: the service's base URL (``http://127.0.0.1:8000``).
        token: bearer token with the ``ingest`` scope (``None`` when the service runs without tokens).
        speed: time compression (10: ten times faster than Alertmanager would deliver; 1: real time).
        say: progress lines.
        sleep: the waiting function (tests pass a no-op).
        client: an ``httpx.Client`` to send with instead of a new one (tests pass a TestClient).

    Returns:
        ``{"at_s", "status", "alerts", "rejected"}`` per POST: ``rejected`` counts the alerts the
        service left out of it (its ``rejected_count``); when any was, a last ``say`` line counts
        the storm's rejected alerts and quotes the first reason. Empty when every alert resolved
        before its first notification: nothing is sent, and ``say`` says so.

    Raises:
        ConfigError: ``token`` not a valid token (:func:`check_token`); ``speed`` not positive,
            or so small that a wait between two notifications
            would exceed :data:`threading.TIMEOUT_MAX` (the longest wait the system allows).
        NotAvailableError: the service cannot be reached, or refused a notification (the status and
            the start of its answer are in the message).
    """
    import httpx

    if not speed > 0:
        raise ConfigError(f"--speed must be positive, got {speed}")
    check_token(token)
    if client is None:
        check_http_url(url, "--url")
    span = storm_span(storm["alerts"])
    start = datetime.now(UTC)
    # the storm happened over its real span and ends now; deliveries are compressed by `speed`
    alerts = retime(storm["alerts"], start)
    plan = plan_notifications(alerts)
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    _check_waits(plan, speed)
    records = []
    rejected: dict[str, str] = {}  # the alerts the service left out: identity -> the first reason
    unlisted = 0  # rejected alerts the answers counted beyond those they listed (at most 20 each)
    clock = 0.0
    own = client is None
    if own:
        client = proxied_client(base_url=url.rstrip("/"), timeout=30)
    try:
        for n in plan:
            wait = (n.at_s - clock) / speed
            if wait > 0:
                sleep(wait)
            clock = n.at_s
            try:
                r = client.post("/api/v1/alerts", json=n.payload, headers=headers)
            except httpx.HTTPError as err:
                raise NotAvailableError(_masked(f"cannot reach {url}: {err}", token)) from None
            if r.status_code != 200:
                raise NotAvailableError(
                    f"{safe_uri(url)}/api/v1/alerts answered {r.status_code}: {r.text[:200]}"
                    + (" (give an ingest token: --token)" if r.status_code in (401, 403) else "")
                )
            count, listed = _rejections(r, n.payload["alerts"])
            rejected.update((k, v) for k, v in listed.items() if k not in rejected)
            unlisted = max(unlisted, count - len(listed))
            # label values are the storm file's: their control characters print escaped
            group = terminal_safe(
                ", ".join(f"{k}={v}" for k, v in n.payload["groupLabels"].items() if v)
            )
            say(
                f"  t+{n.at_s:5.0f}s  {group}: {len(n.payload['alerts'])} alerts -> {r.status_code}"
                + (f" ({count} rejected)" if count else "")
            )
            records.append(
                {
                    "at_s": n.at_s,
                    "status": r.status_code,
                    "alerts": len(n.payload["alerts"]),
                    "rejected": count,
                }
            )
    finally:
        if own:
            client.close()
    say(_summary(plan, len(storm["alerts"]), span))
    if rejected or unlisted:
        first = terminal_safe(next(iter(rejected.values()), "not listed in the answer"))
        say(
            f"the service rejected {'at least ' if unlisted else ''}"
            f"{len(rejected) + unlisted} of the storm's alerts (not stored); the first: {first}"
        )
    return records
