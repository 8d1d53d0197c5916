"""GAT inference speed on one CPU core: latency per incident on a 1,000-node graph, batched throughput.

    python -m benchmarks.rca.gat_speed [--model REF] [--incidents 60] [--out benchmarks/results/rca/gat_speed.json]

Incidents come from the simulator (``data/rca_gen``) on one generated topology of about 1,000 nodes,
plus an alert-storm variant (every incident padded to 200 alerts with extra copies of its own alerts
on other nodes). Timed with ``torch.set_num_threads(1)``:

* ``find_root_causes_ms``: the full analyzer call (features, candidate subgraph, GAT forward with
  attention, top-5 causes with fault types and propagation paths), median / p90 over incidents;
* ``features_ms``: the feature matrix alone;
* ``batched_incidents_per_s``: :meth:`GATAnalyzer.score_many` (PyG batches of 64 incidents, features
  included), incidents per second.

Each figure is also given in process CPU time (``*_cpu_*``): on a shared machine whose load average
exceeds its core count, wall time mostly measures waiting for a core.

The JSON holds the machine (platform, CPU count, load average: the machine may be shared), package
versions, the command and the figures. No assertion is made on the figures.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

from benchmarks.provenance import RESULTS, load_now, provenance
from fleetmind import argtypes
from fleetmind.cli.runner import run_main


def _incidents(n: int, n_nodes: int, seed: int) -> tuple[object, list[list[dict]]]:
    from fleetmind.data.rca_gen.alerts import AlertSimConfig, IncidentSimulator
    from fleetmind.data.rca_gen.graphs import GraphGenConfig, generate_graph

    rng = np.random.default_rng(seed)
    g = generate_graph("bench-g1000", rng, GraphGenConfig(), n_nodes=n_nodes)
    sim = IncidentSimulator(g, AlertSimConfig.preset("default"))
    incs = [
        sim.simulate(rng, f"bench-{k}", t_start=1.77e9 + 7200.0 * k)["alerts"] for k in range(n)
    ]
    return g, incs


def _storm(graph, alerts: list[dict], size: int, rng: np.random.Generator) -> list[dict]:
    """Pad an incident to ``size`` alerts: copies of its alerts moved onto random nodes."""
    out = list(alerts)
    nodes = graph.nodes
    while len(out) < size:
        a = dict(alerts[int(rng.integers(len(alerts)))])
        node = nodes[int(rng.integers(len(nodes)))]
        a["labels"] = {**a["labels"], **node.match}
        a["fingerprint"] = f"storm{len(out)}"
        out.append(a)
    return out


def _timed(fn, reps: int) -> list[float]:
    ts = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        ts.append((time.perf_counter() - t) * 1000.0)
    return ts


def _cpu_timed(fn) -> float:
    """CPU time of this process in ms (less sensitive than wall time to a shared, overloaded box)."""
    t = time.process_time()
    fn()
    return (time.process_time() - t) * 1000.0


def _node_budget(text: str) -> int:
    """``--nodes``: a node budget :func:`fleetmind.data.rca_gen.graphs.generate_graph` takes
    (``MIN_NODES`` to ``MAX_NODES``), checked before the model is loaded."""
    from fleetmind.data.rca_gen.graphs import MAX_NODES, MIN_NODES

    value = argtypes.positive_int(text)
    if not MIN_NODES <= value <= MAX_NODES:
        raise argparse.ArgumentTypeError(f"must be {MIN_NODES}-{MAX_NODES}, got {value}")
    return value


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default=None, help="model REF (default: released models/rca)")
    ap.add_argument("--incidents", type=argtypes.positive_int, default=60)
    ap.add_argument("--nodes", type=_node_budget, default=1000)
    ap.add_argument("--seed", type=argtypes.seed, default=0)
    ap.add_argument(
        "--out", type=argtypes.output_file, default=str(RESULTS / "rca" / "gat_speed.json")
    )
    a = ap.parse_args(argv)

    import torch

    from fleetmind.rca.features.dense import alert_features
    from fleetmind.rca.gat_analyzer import GATAnalyzer

    load0 = load_now()
    torch.set_num_threads(1)
    gat = GATAnalyzer.load(a.model)
    g, incs = _incidents(a.incidents, a.nodes, a.seed)
    rng = np.random.default_rng(a.seed + 1)
    storms = [_storm(g, al, 200, rng) for al in incs[: max(10, a.incidents // 3)]]
    for al in incs[:3]:  # warm-up (caches, allocator)
        gat.find_root_causes(g, al, top_k=5)
        gat.score_many([(g, al)])

    res: dict[str, object] = {}
    for name, sets in (("simulated", incs), ("storm200", storms)):
        rca_ms = [_timed(lambda al=al: gat.find_root_causes(g, al, top_k=5), 1)[0] for al in sets]
        cpu_ms = [_cpu_timed(lambda al=al: gat.find_root_causes(g, al, top_k=5)) for al in sets]
        feat_ms = [_timed(lambda al=al: alert_features(g, al), 1)[0] for al in sets]
        items = [(g, al) for al in sets]
        reps = max(1, 256 // len(items))
        t = time.perf_counter()
        c = time.process_time()
        for _ in range(reps):
            gat.score_many(items, batch_size=64)
        per_s = reps * len(items) / (time.perf_counter() - t)
        per_cpu_s = reps * len(items) / (time.process_time() - c)
        res[name] = {
            "n_incidents": len(sets),
            "alerts_per_incident_mean": float(np.mean([len(al) for al in sets])),
            "find_root_causes_ms_median": float(np.median(rca_ms)),
            "find_root_causes_ms_p90": float(np.percentile(rca_ms, 90)),
            "find_root_causes_cpu_ms_median": float(np.median(cpu_ms)),
            "features_ms_median": float(np.median(feat_ms)),
            "batched_incidents_per_s": float(per_s),
            "batched_incidents_per_cpu_s": float(per_cpu_s),
        }
    payload = {
        "benchmark": "gat inference speed",
        **provenance(__spec__.name, argv, load_start=load0, packages=("torch-geometric", "scipy")),
        "model_version": gat.version,
        "graph": {"nodes": g.num_nodes, "edges": g.num_edges},
        "threads": torch.get_num_threads(),
        "targets": {"find_root_causes_ms_median": 20.0, "batched_incidents_per_s": 200.0},
        "results": res,
    }
    out = Path(a.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(payload, indent=2) + "\n")
    print(json.dumps(res, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(run_main(main, prog="benchmarks.rca.gat_speed"))
