"""``fleetmind replay STORM.json``: post a stored alert storm to a running service (see :mod:`fleetmind.training.replay`)."""

from __future__ import annotations

import argparse
import os
import time

from fleetmind import argtypes
from fleetmind.data.errors import ConfigError


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


def _show_incidents(url: str, token: str | None, expected: str | None, wait_s: float) -> None:
    import httpx

    headers = {"Authorization": f"Bearer {token}"} if token else {}
    deadline = time.monotonic() + wait_s
    items: list[dict] = []
    while True:
        try:
            r = httpx.get(url.rstrip("/") + "/api/v1/incidents", headers=headers, timeout=10)
        except httpx.HTTPError:
            return
        if r.status_code in (401, 403):
            print(f"open {url.rstrip('/')}/ui/ to see the incidents (this token cannot read them)")
            return
        items = [i for i in r.json() if i.get("alert_count")] if r.status_code == 200 else []
        if items and all(i.get("causes") for i in items) or time.monotonic() > deadline:
            break
        time.sleep(1.0)
    # the incidents this storm touched last (a storm replayed soon after another may join it)
    for inc in sorted(items, key=lambda i: i.get("last_alert_at") or "", reverse=True)[:3]:
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


def run(args: argparse.Namespace) -> int:
    from fleetmind.training.replay import load_storm, replay

    storm = load_storm(args.storm)
    token = (
        args.token
        or os.environ.get("FLEETMIND_API_TOKEN")
        or os.environ.get("FLEETMIND_INGEST_TOKEN")
    )
    if args.wait < 0:
        raise ConfigError(f"--wait must be >= 0 seconds, got {args.wait}")
    print(f"{storm.get('name') or args.storm}: {storm.get('description', '')}".rstrip(": "))
    replay(storm, args.url, token=token, speed=args.speed)
    if args.wait > 0:
        _show_incidents(args.url, token, storm.get("expected_root"), args.wait)
    return 0
