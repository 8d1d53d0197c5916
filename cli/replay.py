"""``fleetmind replay STORM.json``: post a stored alert storm to a running service (see :mod:`fleetmind.training.replay`)."""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from fleetmind import argtypes
from fleetmind.data.errors import ConfigError, DataError
from fleetmind.http_client import client as proxied_client
from fleetmind.redact import safe_uri, terminal_safe

DEFAULT_RANK_INTERVAL_S = 2.0
"""The service's default ``FLEETMIND_INCIDENT_RANK_INTERVAL_S``, seconds: during a storm it re-ranks
an incident at most this often (:class:`fleetmind.serving.settings.Settings`)."""

POLL_S = 0.5
"""Seconds between two reads of the incidents while their rankings settle."""

MIN_READ_TIMEOUT_S = 10.0
"""The shortest timeout of one read of the incidents, seconds: each read may take the time left in
``--wait``, but at least this (a small ``--wait`` still gives a slow service this long)."""

MAX_SHOWN = 3
"""The most incidents of the replay printed (newest first)."""

MAX_EXAMINED = MAX_SHOWN * 3
"""The most incidents touched by the replay's time span whose alerts replay reads (newest first)
to find the ones holding its own: each read lists up to :data:`RCA_MAX_ALERTS` alerts, so a
service busy with other storms costs at most this many reads."""

SETTLE_MARGIN_S = 1.0
"""Seconds a ranking must stay unchanged beyond the rank interval before it counts as settled: the
worker's wake-up and the ranking itself take some time after the interval has passed."""


def register(subparsers: argparse._SubParsersAction, name: str, help_text: str) -> None:
    p = subparsers.add_parser(
        name,
        help=help_text,
        description=(
            "Post a stored alert storm (examples/*.json) to a running FleetMind service as an "
            "Alertmanager route grouped by cluster and alertname would: first notification 10 s "
            "after a group's first alert, then every 30 s while it grows (deploy/alertmanager.yml "
            "sends each alert on its own; batching does not change the incidents). The "
            "storm is re-timed to end now. Then waits for the incidents' rankings to settle and "
            "prints their top causes and pages. Exit status 0; 1 when the service rejected some of "
            "the storm's alerts (counted, the first reason quoted); 2 on an error."
        ),
    )
    p.add_argument("storm", help="storm file, e.g. examples/storm-gpu-xid.json")
    p.add_argument(
        "--url",
        default="http://127.0.0.1:8000",
        help="the service (default: http://127.0.0.1:8000)",
    )
    p.add_argument(
        "--token",
        default=None,
        help="bearer token with the ingest scope; to print the ranked causes too, one with read "
        "(default: $FLEETMIND_API_TOKEN, else $FLEETMIND_INGEST_TOKEN, else none)",
    )
    p.add_argument(
        "--speed",
        type=argtypes.finite_float,
        default=10.0,
        help="time compression: 10 sends ten times faster than Alertmanager would (default 10; 1 = "
        "real time); a finite number > 0, large enough that no wait between two notifications "
        "exceeds the system's longest wait (threading.TIMEOUT_MAX, about 292 years)",
    )
    p.add_argument(
        "--wait",
        type=argtypes.finite_float,
        default=30.0,
        help="seconds to wait for the incidents' rankings to settle afterwards (default 30; 0: do "
        "not wait)",
    )
    p.add_argument(
        "--rank-interval",
        type=argtypes.finite_float,
        default=DEFAULT_RANK_INTERVAL_S,
        metavar="S",
        help="the service's FLEETMIND_INCIDENT_RANK_INTERVAL_S: a ranking counts as settled once "
        f"unchanged for this long plus {SETTLE_MARGIN_S:g} s (default {DEFAULT_RANK_INTERVAL_S:g}, "
        "the service's default)",
    )
    p.set_defaults(func=run)


RCA_MAX_ALERTS = 10_000
"""The most alerts ``POST /api/v1/rca`` takes in one request (a larger storm is not checked)."""


def _unmapped_error(client: Any, storm: dict[str, Any], headers: dict[str, str]) -> str | None:
    """Why none of the storm can be ranked on the service's graph, or ``None`` when some alert
    names one of its nodes (or the service cannot tell: no read scope, an older service).

    Asks ``POST /api/v1/rca`` (which stores nothing) how many of the storm's alerts map onto the
    graph it serves: a storm made for another graph opens incidents without nodes, never ranked.
    """
    import httpx

    alerts = storm["alerts"]
    if len(alerts) > RCA_MAX_ALERTS:
        return None
    try:
        r = client.post("/api/v1/rca", json={"alerts": alerts, "top_k": 1}, headers=headers)
        body = r.json() if r.status_code == 200 else {}
    except (httpx.HTTPError, ValueError):
        return None
    if not isinstance(body, dict) or body.get("mapped_alerts") != 0:
        return None
    return (
        f"none of the storm's {len(alerts)} alerts name a node of the service's graph "
        f"{body.get('graph')!r}, so no incident of it can be ranked (the alerts were posted); "
        "replay a storm made for that graph, or serve the storm's graph (fleetmind serve --graph)"
    )


def _at(value: Any) -> datetime | None:
    """An RFC 3339 time of the API as an aware datetime (``None``: missing or unreadable)."""
    try:
        t = datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    except ValueError:
        return None
    return t if t.tzinfo else t.replace(tzinfo=UTC)


def _touched(items: list[dict[str, Any]], since: datetime) -> list[dict[str, Any]]:
    """The incidents whose last alert started at ``since`` or later (the replay re-times its
    alerts into ``[since, now]``), newest first; those on no graph node (alerts the graph does
    not name: never ranked) are left out. Another storm replayed just before may have such an
    incident too: :func:`_show_incidents` leaves out those that hold none of this replay's
    alerts (:func:`_alert_origin`; it reads the alerts of the :data:`MAX_EXAMINED` newest at
    most)."""
    out = []
    for inc in items:
        last = _at(inc.get("last_alert_at"))
        if last is not None and last >= since and inc.get("alert_count") and inc.get("nodes"):
            out.append(inc)
    return sorted(out, key=lambda i: i.get("last_alert_at") or "", reverse=True)


def ranking_state(items: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    """What must stay unchanged for the rankings of ``items`` to count as settled: each incident's
    id, alert count and ranked causes (node and score), in id order."""
    return sorted(
        (
            i.get("id"),
            i.get("alert_count"),
            [(c.get("node"), c.get("score")) for c in i.get("causes") or []],
        )
        for i in items
    )


def wait_settled(
    read: Callable[[], list[dict[str, Any]] | None],
    wait_s: float,
    settle_s: float,
    clock: Callable[[], float] | None = None,
    sleep: Callable[[float], None] | None = None,
) -> tuple[list[dict[str, Any]], bool] | None:
    """Read incidents until their rankings settle, or ``wait_s`` seconds have passed.

    The service ranks an incident when an alert joins it, and during a storm at most once every
    ``FLEETMIND_INCIDENT_RANK_INTERVAL_S``: an incident that was ranked before the last alerts
    joined keeps its earlier ranking until then. So a ranking counts as settled only once every
    incident read is ranked (those on a graph node) and :func:`ranking_state` has stayed the same
    for ``settle_s`` seconds (more than that interval).

    Args:
        read: the incidents to wait for, read afresh; ``None`` stops the wait (the caller said why).
        wait_s: the longest wait, seconds.
        settle_s: how long the rankings must stay unchanged, seconds.
        clock, sleep: monotonic seconds and the waiting function (default: :mod:`time`'s).

    Returns:
        ``(incidents as last read, whether they settled)``, or ``None`` when ``read`` stopped it.
    """
    clock = clock or time.monotonic
    sleep = sleep or time.sleep
    deadline = clock() + wait_s
    seen: list[tuple[Any, ...]] | None = None
    changed_at = clock()
    while True:
        items = read()
        if items is None:
            return None
        now = clock()
        state = ranking_state(items)
        if state != seen:
            seen, changed_at = state, now
        ranked = bool(items) and all(i.get("causes") for i in items if i.get("nodes"))
        if ranked and now - changed_at >= settle_s:
            return items, True
        if now >= deadline:
            return items, False
        sleep(POLL_S)


def _since(storm: dict[str, Any], start: datetime) -> datetime:
    """The earliest ``startsAt`` of a replay started at ``start`` (re-timed to end then, over the
    storm's span), less a second for the service's rounding."""
    from fleetmind.training.replay import storm_span

    return start - storm_span(storm["alerts"]) - timedelta(seconds=1)


def _storm_key(alert: dict[str, Any]) -> tuple[str, Any]:
    """A storm alert's identity: its own fingerprint, else its labels."""
    if alert.get("fingerprint"):
        return ("fingerprint", alert["fingerprint"])
    return ("labels", frozenset((str(k), str(v)) for k, v in alert["labels"].items()))


def _alert_origin(
    client: Any,
    headers: dict[str, str],
    inc: dict[str, Any],
    storm: dict[str, Any],
    start: datetime,
    timeout: float = MIN_READ_TIMEOUT_S,
) -> tuple[int | None, bool]:
    """How many of ``inc``'s alerts are not this replay's: alerts of an earlier storm that the
    replayed ones joined (within ``FLEETMIND_INCIDENT_WINDOW_S``), and whether it may hold any of
    this replay's (``False`` only when the service listed some of its alerts, none of them one of
    the storm's: the incident of another storm replayed just before).

    The replay re-timed the storm so that its last alert starts at its own start, ``start`` or
    later: an alert is this replay's when it is a storm alert (by fingerprint, else by labels)
    shifted by at least ``start`` minus the storm's last ``startsAt``. An earlier replay of the
    same storm shifted it less, and its alerts may well start after this replay's first one. The
    incident may hold this replay's alerts when it lists a storm alert that one of this replay's
    could have been folded onto: the service folds a firing delivery starting less than
    ``HA_START_SKEW_S`` (90 s) after a firing alert of its fingerprint into that alert, keeping
    the earlier ``startsAt`` (:mod:`fleetmind.serving.db`), so a replay of the same storm back to
    back joins the earlier replay's alerts and lists none under its own start. A storm alert
    shifted by ``HA_START_SKEW_S`` or more less than this replay shifted it is an earlier
    replay's that none of this one's joined: its incident (when the two did not group into one)
    holds none of this replay's alerts.

    Args:
        timeout: seconds the read of the incident's alerts may take; ``<= 0``: not read (as when
            the service did not list them).

    Returns:
        ``(count, may hold this replay's alerts)``; the count is ``None`` when the service did not
        list the incident's alerts but its first alert started before this replay's first.
    """
    import httpx

    from fleetmind.serving.db import HA_START_SKEW_S

    alerts = None
    try:
        if timeout > 0:
            r = client.get(
                f"/api/v1/incidents/{inc['id']}",
                params={"alerts_limit": RCA_MAX_ALERTS},
                headers=headers,
                timeout=timeout,
            )
            alerts = r.json().get("alerts") if r.status_code == 200 else None
    except (httpx.HTTPError, ValueError, AttributeError):
        alerts = None
    if not isinstance(alerts, list):
        first = _at(inc.get("first_alert_at"))
        return (None if first is not None and first < _since(storm, start) else 0), True
    origin: dict[tuple[str, Any], list[datetime]] = {}
    for a in storm["alerts"]:
        t = _at(a["startsAt"])  # load_storm checked every startsAt
        if t is not None:
            origin.setdefault(_storm_key(a), []).append(t)
    last = max(t for ts in origin.values() for t in ts)
    min_shift = start - last - timedelta(milliseconds=1)  # the API's times are to the microsecond

    def keys(a: Any) -> list[tuple[str, Any]]:  # a listed alert's identities as a storm alert
        if not isinstance(a, dict) or not isinstance(a.get("labels"), dict):
            return []
        return [("fingerprint", a.get("fingerprint")), _storm_key({"labels": a["labels"]})]

    def ours(a: Any) -> bool:  # a storm alert shifted as far as this replay shifted it
        t = _at(a.get("startsAt")) if isinstance(a, dict) else None
        return t is not None and any(t - o >= min_shift for k in keys(a) for o in origin.get(k, ()))

    # a fold needs new_start - t_old < HA_START_SKEW_S, new_start = o + shift, shift >= min_shift
    fold_shift = min_shift - timedelta(seconds=HA_START_SKEW_S)

    def storm_alert(a: Any) -> bool:  # a storm alert this replay's may have been folded onto
        t = _at(a.get("startsAt")) if isinstance(a, dict) else None
        return t is not None and any(t - o > fold_shift for k in keys(a) for o in origin.get(k, ()))

    mine = sum(map(ours, alerts))
    return max(int(inc.get("alert_count") or 0) - mine, 0), not alerts or any(
        map(storm_alert, alerts)
    )


def _print_incident(
    url: str, inc: dict[str, Any], storm: dict[str, Any], earlier: int | None
) -> None:
    """One incident's top cause and page, and a note when it also holds ``earlier`` alerts not
    this replay's (:func:`_alert_origin`'s count; ``None``: some, how many unknown)."""
    top = (inc.get("causes") or [{}])[0]
    expected = storm.get("expected_root")
    mark = ""
    if expected:
        mark = (
            "  (the storm's root)"
            if top.get("node") == expected
            else f"  (storm's root: {expected})"
        )
    # graph node ids and the storm's root are outside text: control characters print escaped
    print(
        terminal_safe(
            f"incident #{inc['id']}: {inc['alert_count']} alerts; top cause "
            f"{top.get('node', 'not ranked yet')} {top.get('fault_type') or ''}{mark}"
        )
    )
    if earlier != 0:
        if earlier is None:
            held = "earlier alerts"
        else:
            held = f"{earlier} earlier alert" + ("" if earlier == 1 else "s")
        print(
            f"  it also holds {held}, not this replay's, so its top cause may be theirs (replay "
            "into a fresh service, or wait FLEETMIND_INCIDENT_WINDOW_S, default 600 s, after "
            "the last storm)"
        )
    print(f"  {safe_uri(url.rstrip('/'))}/ui/incidents/{inc['id']}")


def _show_incidents(
    client: Any,
    url: str,
    headers: dict[str, str],
    storm: dict[str, Any],
    start: datetime,
    wait_s: float,
    rank_interval_s: float = DEFAULT_RANK_INTERVAL_S,
) -> None:
    """Wait (up to ``wait_s``) until the rankings of the incidents that the replay started at
    ``start`` touched settle (:func:`wait_settled`); print them."""
    import httpx

    base = safe_uri(url.rstrip("/"))  # (only printed: without user:password)
    since = _since(storm, start)  # the incidents it touched end after this
    deadline = time.monotonic() + wait_s
    last: list[list[dict[str, Any]]] = []  # the last read that succeeded

    def read() -> list[dict[str, Any]] | None:
        # a read may take the time left in --wait (a slow service), at least MIN_READ_TIMEOUT_S
        timeout = max(deadline - time.monotonic(), MIN_READ_TIMEOUT_S)
        try:
            r = client.get("/api/v1/incidents", headers=headers, timeout=timeout)
        except httpx.HTTPError as err:
            print(
                f"could not read incidents from {base}/api/v1/incidents: "
                f"{str(err) or type(err).__name__}"
            )
            return None
        if r.status_code in (401, 403):
            print(f"open {base}/ui/ to see the incidents (this token cannot read them)")
            return None
        try:
            items = _touched(r.json(), since) if r.status_code == 200 else []
        except ValueError:
            items = []
        last[:] = [items]
        return items

    settle_s = rank_interval_s + SETTLE_MARGIN_S
    result = wait_settled(read, wait_s, settle_s)
    read_failed = result is None
    if result is None:
        if not last or not last[0]:
            return
        result = (last[0], False)  # a later read failed: as they stood at the last one
    items, settled = result
    shown: list[tuple[dict[str, Any], int | None]] = []
    # the reads of their alerts together take the time left in --wait, at least MIN_READ_TIMEOUT_S;
    # an incident not read once that has run out is taken as when the service did not list them
    reads_until = max(deadline, time.monotonic() + MIN_READ_TIMEOUT_S)
    for inc in items[:MAX_EXAMINED]:
        if len(shown) == MAX_SHOWN:
            break
        timeout = reads_until - time.monotonic()
        earlier, may_hold_ours = _alert_origin(client, headers, inc, storm, start, timeout)
        if not may_hold_ours:
            continue  # none of this replay's alerts: another storm's incident, ended just before
        shown.append((inc, earlier))
    if not shown:
        print(f"no incident of this storm yet; see {base}/ui/")
        return
    if read_failed:
        print(
            f"the rankings had not settled when a read failed; as they stood at the last "
            f"successful read (see {base}/ui/):"
        )
    elif not settled:
        print(
            f"the rankings had not settled after --wait {wait_s:g} s (unchanged for "
            f"{settle_s:g} s: the rank interval {rank_interval_s:g} s and a margin); as they "
            f"stood last (see {base}/ui/, or a longer --wait):"
        )
    for inc, earlier in shown:
        _print_incident(url, inc, storm, earlier)


def _client(url: str) -> Any:
    """The HTTP client the replay and the reads after it share (tests replace it); proxies from
    the environment by Go's rules (:mod:`fleetmind.http_client`)."""
    return proxied_client(base_url=url.rstrip("/"), timeout=30)


def run(args: argparse.Namespace) -> int:
    from fleetmind.data.fetch import check_http_url
    from fleetmind.training.replay import check_token, load_storm, replay

    check_http_url(args.url, "--url")
    token, where = args.token, "--token"
    for name in ("FLEETMIND_API_TOKEN", "FLEETMIND_INGEST_TOKEN"):
        if not token:
            token, where = os.environ.get(name), f"${name}"
    check_token(token or None, where)  # before the storm's first line, never quoting the token
    token = token or None
    storm = load_storm(args.storm)
    if args.wait < 0:
        raise ConfigError(f"--wait must be >= 0 seconds, got {args.wait}")
    if args.rank_interval < 0:
        raise ConfigError(f"--rank-interval must be >= 0 seconds, got {args.rank_interval}")
    if not args.speed > 0:  # before the storm's title, as the two above (replay checks it too)
        raise ConfigError(f"--speed must be positive, got {args.speed:g}")
    title = f"{storm.get('name') or args.storm}: {storm.get('description', '')}".rstrip(": ")
    print(terminal_safe(title))
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    # the replay re-times the alerts to end when it starts: at `start` or a moment later
    start = datetime.now(UTC)
    client = _client(args.url)
    try:
        records = replay(storm, args.url, token=token, speed=args.speed, client=client)
        if not records:  # nothing sent (replay said why): no incident to wait for
            return 0
        why = _unmapped_error(client, storm, headers)
        if why is not None:
            raise DataError(why)
        if args.wait > 0:
            _show_incidents(client, args.url, headers, storm, start, args.wait, args.rank_interval)
    finally:
        client.close()
    # the service answered 200 but left some alerts out (replay said how many and why)
    return 1 if any(r.get("rejected") for r in records) else 0
