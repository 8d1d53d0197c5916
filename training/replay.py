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
:func:`replay` re-times the storm so that its last alert starts now (gaps kept), sends the
notifications in order, ``speed`` times faster than real time, and returns what the service answered.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from fleetmind.data.errors import ConfigError, DataError, NotAvailableError
from fleetmind.data.fetch import check_http_url

GROUP_BY: tuple[str, ...] = ("cluster", "alertname")
GROUP_WAIT_S = 10.0
GROUP_INTERVAL_S = 30.0


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


def load_storm(path: str | Path) -> dict[str, Any]:
    """Read and check a storm file; returns it with ``alerts`` sorted by ``startsAt``.

    Raises:
        DataError: unreadable JSON, no ``alerts`` list, an alert without ``labels.alertname`` or with
            a bad ``startsAt`` or ``endsAt``, or times too far apart to re-time the storm to end now
            (:func:`retime`).
    """
    p = Path(path)
    try:
        storm = json.loads(p.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise DataError(f"storm file not found: {p}") from None
    except (OSError, UnicodeDecodeError, ValueError) as err:
        raise DataError(f"{p}: not a JSON storm file: {err}") from None
    alerts = storm.get("alerts") if isinstance(storm, dict) else None
    if not isinstance(alerts, list) or not alerts:
        raise DataError(f'{p}: expected {{"alerts": [...]}} with at least one alert')
    for i, a in enumerate(alerts):
        where = f"{p}: alert {i}"
        if not isinstance(a, dict) or not isinstance(a.get("labels"), dict):
            raise DataError(f"{where}: expected an object with a labels object")
        if not a["labels"].get("alertname"):
            raise DataError(f"{where}: labels.alertname is missing")
        _ts(a.get("startsAt"), where)
        if a.get("endsAt") is not None and a.get("endsAt") != "":
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


def plan_notifications(
    alerts: list[dict[str, Any]],
    group_by: tuple[str, ...] = GROUP_BY,
    group_wait_s: float = GROUP_WAIT_S,
    group_interval_s: float = GROUP_INTERVAL_S,
) -> list[Notification]:
    """The notifications Alertmanager would send for ``alerts``, in time order.

    Args:
        alerts: v4 alert objects with ``startsAt`` (any order).
        group_by: label names that form a group (a missing label groups as ``""``).
        group_wait_s, group_interval_s: Alertmanager's route options, in seconds.

    Returns:
        Every alert appears in at least one notification; a later notification of a group repeats
        the group's earlier alerts, as Alertmanager does. Times are seconds after the first alert.
    """
    if not alerts:
        return []
    t0 = min(_ts(a["startsAt"], "") for a in alerts)
    groups: dict[tuple[str, ...], list[tuple[float, dict[str, Any]]]] = {}
    for a in alerts:
        key = tuple(str(a.get("labels", {}).get(k, "")) for k in group_by)
        groups.setdefault(key, []).append(((_ts(a["startsAt"], "") - t0).total_seconds(), a))
    out = []
    for key, items in groups.items():
        items.sort(key=lambda x: x[0])
        label_values = dict(zip(group_by, key, strict=True))
        send = items[0][0] + group_wait_s
        sent = 0
        while sent < len(items):
            ready = [a for t, a in items if t <= send]
            if len(ready) > sent:
                out.append(Notification(send, webhook_payload(label_values, ready)))
                sent = len(ready)
            send += group_interval_s
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

    Raises:
        ConfigError: ``speed`` not positive.
        NotAvailableError: the service cannot be reached, or refused a notification (the status and
            the start of its answer are in the message).
    """
    import httpx

    if not speed > 0:
        raise ConfigError(f"--speed must be positive, got {speed}")
    if client is None:
        check_http_url(url, "--url")
    span = storm_span(storm["alerts"])
    start = datetime.now(UTC)
    # the storm happened over its real span and ends now; deliveries are compressed by `speed`
    alerts = retime(storm["alerts"], start)
    plan = plan_notifications(alerts)
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    records = []
    clock = 0.0
    own = client is None
    if own:
        client = httpx.Client(base_url=url.rstrip("/"), timeout=30)
    try:
        for n in plan:
            wait = (n.at_s - clock) / speed
            if wait > 0:
                sleep(wait)
            clock = n.at_s
            try:
                r = client.post("/api/v1/alerts", json=n.payload, headers=headers)
            except httpx.HTTPError as err:
                raise NotAvailableError(f"cannot reach {url}: {err}") from None
            if r.status_code != 200:
                raise NotAvailableError(
                    f"{url}/api/v1/alerts answered {r.status_code}: {r.text[:200]}"
                    + (" (give an ingest token: --token)" if r.status_code in (401, 403) else "")
                )
            group = ", ".join(f"{k}={v}" for k, v in n.payload["groupLabels"].items() if v)
            say(
                f"  t+{n.at_s:5.0f}s  {group}: {len(n.payload['alerts'])} alerts -> {r.status_code}"
            )
            records.append(
                {"at_s": n.at_s, "status": r.status_code, "alerts": len(n.payload["alerts"])}
            )
    finally:
        if own:
            client.close()
    say(
        f"sent {len(storm['alerts'])} alerts (a storm of {span.total_seconds():.0f} s) in "
        f"{len(plan)} notifications"
    )
    return records
