"""What the service's incident grouping costs the GAT, and how ``FLEETMIND_INCIDENT_HOPS`` trades it.

The service ranks *incidents*, not whole storms: its incident worker
(:class:`fleetmind.serving.incidents.IncidentManager`) joins an alert to an open incident when it started
within ``window_s`` of it and lies within ``hops`` undirected graph hops of one of its nodes (cluster
nodes, and infrastructure several clusters depend on, are not crossed). A storm whose cascade spans clusters, or that carries unrelated noise and
a second incident, becomes several incidents, each ranked on its own alerts.

For every simulated storm of a dataset (``fleetmind rca generate``) this stores the storm's alerts
(time order, one batch) in a fresh SQLite database, runs the real ``IncidentManager`` with the
released GAT, and reads back the incidents and their ranked causes. Per ``hops`` it reports:

* ``ac1_all_alerts``: the GAT ranking the whole storm at once (no grouping; the offline figure);
* ``ac1_largest_incident``: the top cause of the incident with the most alerts is the true root;
* ``root_top1_of_some_incident``: the true root is the top cause of one of the storm's incidents;
* ``split_share``: storms that became more than one incident of 3 or more alerts;
* ``incidents_per_storm``: mean number of incidents (any size);
* on storms with a second, independent incident (``--difficulty hard``):
  ``second_root_top1_of_some_incident`` and ``both_roots_top1``.

Run: ``python -m benchmarks.serving.incident_grouping DATA [--splits test val] [--hops 2 3 4]
[--limit N] [--out benchmarks/results/serving/incident_grouping_<name>.json]``.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.provenance import RESULTS, load_now, provenance
from fleetmind import argtypes
from fleetmind.cli.runner import run_main


def storm_incidents(
    storm: dict[str, Any], graph: Any, registry: Any, hops: int, window_s: float, tmp: Path
) -> list[dict[str, Any]]:
    """The open incidents (with causes) the service forms from one storm's alerts."""
    from fleetmind.serving.db import Database
    from fleetmind.serving.graphstore import GraphStore
    from fleetmind.serving.incidents import IncidentManager
    from fleetmind.serving.routers.alerts import alert_row
    from fleetmind.serving.schemas import AlertIn

    path = tmp / f"g{hops}.db"
    for suffix in ("", "-wal", "-shm"):
        Path(str(path) + suffix).unlink(missing_ok=True)
    db = Database(f"sqlite:///{path}", "OFF")
    try:
        db.create_all()
        alerts = sorted(storm["alerts"], key=lambda a: a.get("startsAt") or "")
        now = time.time()
        db.store_alerts([alert_row(AlertIn.model_validate(a), now) for a in alerts])
        manager = IncidentManager(
            db, GraphStore(graph, "bench"), registry, window_s=window_s, hops=hops
        )
        manager.process_pending(limit=len(alerts) + 1)
        return [i for i in db.list_incidents("open", 1000, 0) if i["alert_count"]]
    finally:
        db.dispose()


def evaluate(ds: Any, storms: list[dict[str, Any]], hops: int, window_s: float) -> dict[str, Any]:
    from tqdm import tqdm

    from fleetmind.serving.registry import ModelRegistry

    registry = ModelRegistry()  # the released GAT, as the service serves it by default
    registry.load()
    gat = registry.current.rca.impl
    n = len(storms)
    all1 = big1 = some1 = split = n_inc = 0
    sec = sec1 = both1 = 0
    with tempfile.TemporaryDirectory() as tmp:
        for storm in tqdm(storms, desc=f"hops={hops}", unit="storm"):
            graph = ds.graphs[storm["graph"]]
            truth = storm["root_cause"]
            all1 += gat.find_root_causes(graph, storm["alerts"], 1).causes[0].node == truth
            incs = storm_incidents(storm, graph, registry, hops, window_s, Path(tmp))
            n_inc += len(incs)
            tops = {i["causes"][0]["node"] for i in incs if i.get("causes")}
            if incs:
                largest = max(incs, key=lambda i: i["alert_count"])
                big1 += bool(largest.get("causes")) and largest["causes"][0]["node"] == truth
            some1 += truth in tops
            split += sum(1 for i in incs if i["alert_count"] >= 3) > 1
            second = (storm.get("secondary") or {}).get("root_cause")
            if second:
                sec += 1
                sec1 += second in tops
                both1 += second in tops and truth in tops
    out: dict[str, Any] = {
        "hops": hops,
        "window_s": window_s,
        "storms": n,
        "ac1_all_alerts": round(all1 / n, 4),
        "ac1_largest_incident": round(big1 / n, 4),
        "root_top1_of_some_incident": round(some1 / n, 4),
        "split_share": round(split / n, 4),
        "incidents_per_storm": round(n_inc / n, 3),
    }
    if sec:
        out["storms_with_second_incident"] = sec
        out["second_root_top1_of_some_incident"] = round(sec1 / sec, 4)
        out["both_roots_top1"] = round(both1 / sec, 4)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("data", help="dataset folder written by `fleetmind rca generate`")
    ap.add_argument("--splits", nargs="+", default=["test", "val"])
    ap.add_argument("--hops", nargs="+", type=argtypes.positive_int, default=[2, 3, 4])
    ap.add_argument("--window-s", type=float, default=600.0, help="incident window (default 600)")
    ap.add_argument("--limit", type=argtypes.positive_int, default=None, help="first N storms only")
    ap.add_argument("--out", type=argtypes.output_file, default=None)
    args = ap.parse_args()

    import torch

    from fleetmind.data.rca_dataset import load_dataset

    torch.set_num_threads(1)
    ds = load_dataset(args.data, splits=args.splits)
    storms = [s for split in args.splits for s in ds.splits[split]][: args.limit]
    load0 = load_now()
    start = time.perf_counter()
    results = [evaluate(ds, storms, h, args.window_s) for h in args.hops]
    meta = json.loads((Path(args.data) / "meta.json").read_text())
    name = Path(args.data).name
    out = Path(args.out or RESULTS / "serving" / f"incident_grouping_{name}.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    payload = {
        "benchmark": "incident_grouping",
        **provenance(__spec__.name, load_start=load0),
        "data": {"folder": str(args.data), "splits": args.splits, "generator": meta},
        "wall_s": round(time.perf_counter() - start, 1),
        "results": results,
    }
    out.write_text(json.dumps(payload, indent=2) + "\n")
    for r in results:
        print(json.dumps(r))
    print(f"wrote {out}")


if __name__ == "__main__":
    raise SystemExit(run_main(main, prog="benchmarks.serving.incident_grouping"))
