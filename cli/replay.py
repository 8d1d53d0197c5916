"""``fleetmind replay STORM.json``: post a stored alert storm to a running service (see :mod:`fleetmind.training.replay`)."""

from __future__ import annotations

import argparse
import os
import time
from datetime import UTC, datetime, timedelta
from typing import Any

from fleetmind import argtypes
from fleetmind.data.errors import ConfigError, DataError


def register(subparsers: argparse._SubParsersAction, name: str, help_text: str) -> None:
    p = subparsers.add_parser(
        name,
        help=help_text,
        description=(
            "Post a stored alert storm (examples/*.json) to a running FleetMind service the way "
            "Alertmanager's FleetMind route would: grouped by cluster and alertname, first "
            "notification 10 s after a group's first alert, then every 30 s while it grows. The "
            "storm is re-timed to end now. Then waits for the incidents to be ranked and prints "
            "their top causes and pages."
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
        type=float,
        default=10.0,
        help="time compression: 10 sends ten times faster than Alertmanager would (default 10; 1 = "
        "real time)",
    )
    p.add_argument(
        "--wait",
        type=argtypes.finite_float,
        default=30.0,
        help="seconds to wait for the ranked incidents afterwards (default 30; 0: do not wait)",
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


def _touched(items: list[dict[str, Any]], since: datetime) -> list[dict[str, Any]]:
    """The incidents whose last alert started at ``since`` or later (the replay re-times its
    alerts into ``[since, now]``), newest first; those on no graph node (alerts the graph does
    not name: never ranked) are left out."""
    out = []
    for inc in items:
        try:
            last = datetime.fromisoformat(str(inc.get("last_alert_at")).replace("Z", "+00:00"))
        except ValueError:
            continue
        recent = (last if last.tzinfo else last.replace(tzinfo=UTC)) >= since
        if recent and inc.get("alert_count") and inc.get("nodes"):
            out.append(inc)
    return sorted(out, key=lambda i: i.get("last_alert_at") or "", reverse=True)


def _show_incidents(
    client: Any,
    url: str,
    headers: dict[str, str],
    storm: dict[str, Any],
    since: datetime,
    wait_s: float,
) -> None:
    """Wait (up to ``wait_s``) until the incidents this replay touched are ranked; print them."""
    import httpx

    expected = storm.get("expected_root")
    deadline = time.monotonic() + wait_s
    items: list[dict] = []
    while True:
        try:
            r = client.get("/api/v1/incidents", headers=headers, timeout=10)
        except httpx.HTTPError:
            return
        if r.status_code in (401, 403):
            print(f"open {url.rstrip('/')}/ui/ to see the incidents (this token cannot read them)")
            return
        items = _touched(r.json(), since) if r.status_code == 200 else []
        if items and all(i.get("causes") for i in items) or time.monotonic() > deadline:
            break
        time.sleep(1.0)
    if not items:
        print(f"no incident of this storm yet; see {url.rstrip('/')}/ui/")
    for inc in items[:3]:
        top = (inc.get("causes") or [{}])[0]
        mark = ""
        if expected:
            mark = (
                "  (the storm's root)"
                if top.get("node") == expected
                else f"  (storm's root: {expected})"
            )
        print(
            f"incident #{inc['id']}: {inc['alert_count']} alerts; top cause {top.get('node', 'not ranked yet')}"
            f" {top.get('fault_type') or ''}{mark}"
        )
        print(f"  {url.rstrip('/')}/ui/incidents/{inc['id']}")


def _client(url: str) -> Any:
    """The HTTP client the replay and the reads after it share (tests replace it)."""
    import httpx

    return httpx.Client(base_url=url.rstrip("/"), timeout=30)


def run(args: argparse.Namespace) -> int:
    from fleetmind.data.fetch import check_http_url
    from fleetmind.training.replay import load_storm, replay, storm_span

    check_http_url(args.url, "--url")
    storm = load_storm(args.storm)
    token = (
        args.token
        or os.environ.get("FLEETMIND_API_TOKEN")
        or os.environ.get("FLEETMIND_INGEST_TOKEN")
    )
    if args.wait < 0:
        raise ConfigError(f"--wait must be >= 0 seconds, got {args.wait}")
    print(f"{storm.get('name') or args.storm}: {storm.get('description', '')}".rstrip(": "))
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    # the replay re-times the alerts into [now - span, now]: incidents it touched end there
    since = datetime.now(UTC) - storm_span(storm["alerts"]) - timedelta(seconds=1)
    client = _client(args.url)
    try:
        replay(storm, args.url, token=token, speed=args.speed, client=client)
        why = _unmapped_error(client, storm, headers)
        if why is not None:
            raise DataError(why)
        if args.wait > 0:
            _show_incidents(client, args.url, headers, storm, since, args.wait)
    finally:
        client.close()
    return 0
