"""How fast the incident worker groups a backlog of pending alerts (no HTTP, no ingestion).

The service stores webhooks first and groups them afterwards (``fleetmind.serving.incidents``); under a
sustained alert storm the question is whether grouping keeps up. This stores ``--alerts`` pending
alerts shaped like ``benchmarks.serving.service``'s ingestion (50-alert webhooks over the 80 hosts of the
benchmark graph, GPU XID alerts; every 7th webhook resolves a fifth of its alerts; start times
spread over an hour, so the incidents grow to thousands of alerts each) in a fresh SQLite
database, then runs the worker's loop (``process_pending`` with deferred ranking, then the due
rankings) until nothing is pending, on the released GAT. It reports the wall and CPU time, alerts
per second, and a SHA-256 of the resulting incidents (ids, status, counts, nodes, clusters, alert
times, top causes), so two code versions can be checked to form the same incidents::

    python -m benchmarks.serving.incident_worker --alerts 400000 --out benchmarks/results/serving/incident_worker.json

To time another checkout's ``serving/`` (e.g. a ``git worktree`` of an older commit, 0.2.0 or
later), run this module from this checkout's root with the Python environment that has the other
checkout installed (``pip install -e``): ``/tmp/before/.venv/bin/python -m
benchmarks.serving.incident_worker ...``. The JSON records where ``fleetmind.serving`` came from.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

from benchmarks.provenance import load_now, provenance
from benchmarks.serving.ingest_alerts import ingest_alert
from fleetmind import argtypes
from fleetmind.cli.runner import run_main


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument(
        "--alerts", type=argtypes.positive_int, default=100_000, help="pending alerts to group"
    )
    ap.add_argument(
        "--open-incidents",
        type=argtypes.nonnegative_int,
        default=0,
        help="open incidents before the backlog: one alert each, an hour apart, ending an hour "
        "before the backlog starts (a long-running service whose alerts never resolved)",
    )
    ap.add_argument("--out", type=argtypes.output_file, default=None, help="JSON of the figures")
    args = ap.parse_args()
    if args.alerts < 50:
        ap.error("--alerts must be at least 50 (one webhook)")
    import fleetmind.serving
    from fleetmind.serving.db import Database
    from fleetmind.serving.defaults.example import benchmark_graph
    from fleetmind.serving.graphstore import GraphStore
    from fleetmind.serving.incidents import IncidentManager
    from fleetmind.serving.registry import ModelRegistry
    from fleetmind.serving.routers.alerts import alert_row
    from fleetmind.serving.schemas import AlertIn

    load_start = load_now()
    tmp = Path(tempfile.mkdtemp(prefix="fleetmind-worker-"))
    db = Database(f"sqlite:///{tmp / 'worker.db'}", "OFF")
    db.create_all()
    received = 1_800_000_000.0
    rows = []
    for b in range(args.alerts // 50):
        for i in range(50):
            status = "resolved" if (b % 7 == 3 and i % 5 == 0) else "firing"
            starts = f"2026-01-01T00:{(b // 100) % 60:02d}:00Z"
            a = ingest_alert(b, i, f"ing-{b}-{i}", status, starts)
            rows.append(alert_row(AlertIn.model_validate(a), received))
    registry = ModelRegistry()
    registry.load()
    manager = IncidentManager(db, GraphStore(benchmark_graph(), "bench"), registry)
    if args.open_incidents:  # grouped and ranked before the timing
        first = datetime(2026, 1, 1, tzinfo=UTC) - timedelta(hours=args.open_incidents + 1)
        old = []
        for k in range(args.open_incidents):
            starts = (first + timedelta(hours=k)).strftime("%Y-%m-%dT%H:%M:%SZ")
            a = ingest_alert(k, k % 50, f"old-{k}", "firing", starts)
            old.append(alert_row(AlertIn.model_validate(a), received))
        db.store_alerts(old)
        while manager.process_pending(limit=5000):
            pass
        manager.rank_due()
    open_before = manager.open_count
    for s in range(0, len(rows), 5000):
        db.store_alerts(rows[s : s + 5000])
    wall, cpu = time.perf_counter(), time.process_time()
    grouped = 0
    while True:  # what the worker thread does while a backlog remains (IncidentWorker._work)
        n = manager.process_pending(defer=True)
        if n == 0:
            break
        grouped += n
        manager.rank_due(older_than_s=manager.config.backlog_rank_s)
    manager.rank_due()
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    keep = ("id", "status", "alert_count", "firing_count", "nodes", "clusters")
    keep += ("first_alert_ts", "last_alert_ts", "merged_into")
    incs = [
        {k: i[k] for k in keep} | {"causes": [c["node"] for c in i["causes"]]}
        for i in db.list_incidents(None, limit=1_000_000)
    ]
    digest = hashlib.sha256(json.dumps(incs, sort_keys=True).encode()).hexdigest()
    result = {
        "benchmark": "incident worker: grouping a backlog of pending alerts",
        **provenance(__spec__.name, load_start=load_start, packages=("sqlalchemy",)),
        "serving_imported_from": str(Path(fleetmind.serving.__file__).parent),
        "alerts": len(rows),
        "open_incidents_before": open_before,
        "grouped": grouped,
        "wall_s": round(wall, 2),
        "cpu_s": round(cpu, 2),
        "alerts_per_s": round(grouped / wall, 1),
        "incidents": len(incs),
        "open_incidents": sum(i["status"] == "open" for i in incs),
        "incidents_sha256": digest,
    }
    print(
        f"grouped {grouped} alerts into {len(incs)} incidents in {wall:.1f} s "
        f"({cpu:.1f} s CPU): {grouped / wall:,.0f} alerts/s; incidents sha256 {digest[:12]}"
    )
    db.dispose()
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
        print(f"wrote {args.out}")


if __name__ == "__main__":
    raise SystemExit(run_main(main, prog="benchmarks.serving.incident_worker"))
