"""CPU time per ``POST /api/v1/rca`` request of a ranking process's work, looped in one process.

What a ranking process does for a batch (``serving/rca_pool.py``): parse each body, rank the batch
together (``rank_group``), serialise each answer (``response_json``), here without HTTP or IPC, on
the benchmark's workload (``rca_workload.sim_incidents``: the 999-node benchmark graph, distinct
simulated 200-alert incidents), with the server's malloc and GC settings and warm memos (a
warm-up pass over other incidents). ``time.process_time`` per request, so another job on the
machine inflates it less than wall time; compare code versions by alternating runs.

``--repo`` ranks with another checkout's code (e.g. a ``git worktree`` of an older commit), so
the same script measures before and after::

    python benchmarks/serving_cpu_loop.py --repo /tmp/before --batch 2 --out before.json
    python benchmarks/serving_cpu_loop.py --batch 2 --out after.json

The outputs of the two versions can be compared with ``--dump`` (pickled response bodies).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import pickle
import platform
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parents[1]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repo", default=str(HERE), help="checkout whose serving/ and rca/ rank")
    ap.add_argument("--batch", type=int, default=2, help="requests ranked together")
    ap.add_argument("--incidents", type=int, default=300, help="distinct incidents timed")
    ap.add_argument("--reps", type=int, default=3, help="passes over the incidents")
    ap.add_argument("--out", default=None, help="JSON of the figures")
    ap.add_argument("--dump", default=None, help="pickle the response bodies of one pass here")
    args = ap.parse_args()
    repo = Path(args.repo).resolve()
    sys.path.insert(0, str(repo))  # every project module below comes from this checkout
    import torch
    from rca_workload import sim_incidents  # benchmarks/, next to this script; no side effects

    torch.set_num_threads(1)
    from fleetmind.serving.app import tune_gc, tune_malloc

    tune_malloc(32)
    from fleetmind.rca.gat_analyzer import GATAnalyzer
    from fleetmind.serving.defaults.example import benchmark_graph
    from fleetmind.serving.rca_batcher import rank_group
    from fleetmind.serving.registry import LoadedModel
    from fleetmind.serving.routers.rca import response_json

    try:
        from fleetmind.serving.routers.rca import parse_for
    except ImportError:  # code before session 9: dict alerts
        from fleetmind.serving.routers.rca import parse_alerts

        def parse_for(analyzer: Any, graph: Any, body: bytes) -> Any:
            return parse_alerts(body, True)

    graph = benchmark_graph()
    bodies = sim_incidents(graph, args.incidents + 24, 200, seed=0)
    warm, bodies = bodies[args.incidents :], bodies[: args.incidents]
    gat = GATAnalyzer.load(None)
    model = LoadedModel("rca", gat, "gat", gat.version, None, None, 0.0)

    def run(batch_bodies: list[bytes]) -> list[bytes]:
        out = []
        for i in range(0, len(batch_bodies), args.batch):
            parsed = [parse_for(gat, graph, b) for b in batch_bodies[i : i + args.batch]]
            ranked = rank_group(gat, [(graph, a, req.top_k) for req, a in parsed])
            for (req, a), (result, err) in zip(parsed, ranked, strict=True):
                if err is not None:
                    raise err
                out.append(response_json(model, graph, a, req.top_k, result))
        return out

    run(warm)
    gc.collect()
    tune_gc(100_000)
    passes = []
    for _ in range(args.reps):
        t = time.process_time()
        answers = run(bodies)
        passes.append(round((time.process_time() - t) / len(bodies) * 1000, 3))
    print(f"{repo}: CPU ms per request, batch {args.batch}: {passes}")
    assert all(
        Path(m.__file__).resolve().is_relative_to(repo)
        for name, m in sys.modules.items()
        if name.split(".")[0] in ("serving", "rca", "data") and getattr(m, "__file__", None)
    ), "a project module came from another checkout"
    if args.dump:
        Path(args.dump).write_bytes(pickle.dumps(answers))
    if args.out:
        head = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=repo, capture_output=True, text=True
        ).stdout.strip()
        result = {
            "benchmark": "serving_cpu_loop",
            "command": " ".join([Path(sys.executable).name, *sys.argv]),
            "repo": str(repo),
            "commit": head or None,
            "batch": args.batch,
            "incidents": len(bodies),
            "cpu_ms_per_request_by_pass": passes,
            "machine": {
                "platform": platform.platform(),
                "cpu_count": os.cpu_count(),
                "loadavg": [round(x, 2) for x in os.getloadavg()],
            },
        }
        Path(args.out).write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
