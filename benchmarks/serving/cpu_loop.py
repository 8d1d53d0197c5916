"""CPU time per ``POST /api/v1/rca`` request of a ranking process's work, looped in one process.

What a ranking process does for a batch (``serving/rca/pool.py``): parse each body, rank the batch
together (``rank_group``), serialise each answer (``response_json``), here without HTTP or IPC, on
the benchmark's workload (``benchmarks.serving.rca_workload.sim_incidents``: the 999-node benchmark graph, distinct
simulated 200-alert incidents), with the server's malloc and GC settings and warm memos (a
warm-up pass over other incidents). ``time.process_time`` per request, so another job on the
machine inflates it less than wall time; compare code versions by alternating runs.

To rank with another checkout's code (e.g. a ``git worktree`` of an older commit, 0.2.0 or later),
run this module from this checkout's root with the Python environment that has that checkout
installed (``pip install -e``), so the same script measures before and after::

    /tmp/before/.venv/bin/python -m benchmarks.serving.cpu_loop --batch 2 --out before.json
    python -m benchmarks.serving.cpu_loop --batch 2 --out after.json

The outputs of the two versions can be compared with ``--dump`` (pickled response bodies).
"""

from __future__ import annotations

import argparse
import gc
import json
import pickle
import time
from pathlib import Path

from benchmarks.provenance import load_now, provenance
from benchmarks.serving.rca_workload import sim_incidents
from fleetmind import argtypes
from fleetmind.cli.runner import run_main
from fleetmind.errors import ConfigError
from fleetmind.provenance import code_roots


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument(
        "--batch", type=argtypes.positive_int, default=2, help="requests ranked together"
    )
    ap.add_argument(
        "--incidents", type=argtypes.positive_int, default=300, help="distinct incidents timed"
    )
    ap.add_argument(
        "--reps", type=argtypes.positive_int, default=3, help="passes over the incidents"
    )
    ap.add_argument("--out", type=argtypes.output_file, default=None, help="JSON of the figures")
    ap.add_argument(
        "--dump",
        type=argtypes.output_file,
        default=None,
        help="pickle the response bodies of one pass here",
    )
    ap.add_argument(
        "--model",
        default=None,
        help="RCA model folder to rank with (default: the released models/rca)",
    )
    args = ap.parse_args()
    load0 = load_now()
    roots = code_roots()  # where fleetmind and its subpackages come from
    if len(roots) > 1:  # the figures would time neither checkout's code
        raise ConfigError(
            f"fleetmind comes from {roots[0]} but some of its subpackages from "
            f"{', '.join(map(str, roots[1:]))}: run this module from this checkout's root with the "
            "other checkout's own Python environment (pip install -e there)"
        )
    repo = roots[0]
    import torch

    torch.set_num_threads(1)
    from fleetmind.serving.tuning import tune_gc, tune_malloc

    tune_malloc(32)
    from fleetmind.rca.gat_analyzer import GATAnalyzer
    from fleetmind.serving.defaults.example import benchmark_graph
    from fleetmind.serving.rca.batcher import rank_group
    from fleetmind.serving.rca.request import parse_for, response_json
    from fleetmind.serving.registry import LoadedModel

    graph = benchmark_graph()
    bodies = sim_incidents(graph, args.incidents + 24, 200, seed=0)
    warm, bodies = bodies[args.incidents :], bodies[: args.incidents]
    gat = GATAnalyzer.load(args.model)
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
    if args.dump:
        Path(args.dump).write_bytes(pickle.dumps(answers))
    if args.out:
        result = {
            "benchmark": "serving_cpu_loop",
            **provenance(__spec__.name, load_start=load0),
            "repo": str(repo),
            "batch": args.batch,
            "model": gat.version,
            "neighbours": bool(gat.model.config.neighbours),
            "incidents": len(bodies),
            "cpu_ms_per_request_by_pass": passes,
        }
        Path(args.out).write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    raise SystemExit(run_main(main, prog="benchmarks.serving.cpu_loop"))
