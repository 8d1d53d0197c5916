"""Whole RCA datasets: topologies per split (never shared), incidents per topology, written to a folder.

Splits: ``train`` / ``val`` / ``test`` share the incident budget 70/15/15 and use disjoint sets of
topologies with ``min_clusters .. max_clusters - 1`` clusters. ``test_large`` (on by default) holds
extra incidents on topologies with exactly ``max_clusters`` clusters (more than any training graph)
and node budgets in the upper half of the range: the generalization report reads it.

Seeding: graph ``i`` of split ``s`` is generated from ``(seed, split index, i)`` and its incidents from
``(seed, split index, i, 1)``, so the dataset is a pure function of ``(seed, n_incidents, knobs)``
however many worker processes run.
"""

from __future__ import annotations

import json
import math
import os
import platform
import signal
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np

from fleetmind.children import die_with_parent
from fleetmind.data.errors import ConfigError
from fleetmind.data.graph import DependencyGraph
from fleetmind.data.rca_dataset import DatasetWriter
from fleetmind.data.rca_gen.alerts import AlertSimConfig, IncidentSimulator
from fleetmind.data.rca_gen.graphs import GraphGenConfig, generate_graph

SPLIT_IDS = {"train": 0, "val": 1, "test": 2, "test_large": 3}


MAX_INCIDENTS = 10_000_000
"""The most incidents one dataset holds: at about 18 KB of JSON Lines per incident (2,200 at the
default settings, 2026-12-04) that is some 180 GB; the released GAT trained on 17,600. A larger
count is a typo."""


@dataclass
class DatasetSpec:
    """What :func:`generate_dataset` builds.

    Attributes:
        n_incidents: incidents in train + val + test (split 70/15/15).
        seed: master seed.
        sim: alert simulator knobs.
        graphs: graph generator knobs (train/val/test use up to ``max_clusters - 1`` clusters).
        n_graphs: topologies per split ``(train, val, test)``; default scales with ``n_incidents``
            (about 150 incidents per training topology, 6..60 training topologies).
        large_fraction: ``test_large`` incidents as a share of ``n_incidents`` (0 disables the split).
        n_large_graphs: topologies of ``test_large``.
        workers: worker processes (default: ``min(2, cpu count)``).
    """

    n_incidents: int = 1000
    seed: int = 0
    sim: AlertSimConfig = field(default_factory=AlertSimConfig)
    graphs: GraphGenConfig = field(default_factory=GraphGenConfig)
    n_graphs: tuple[int, int, int] | None = None
    large_fraction: float = 0.1
    n_large_graphs: int = 4
    workers: int | None = None

    def graph_counts(self) -> tuple[int, int, int]:
        if self.n_graphs is not None:
            return self.n_graphs
        n_train = int(np.clip(self.n_incidents // 150, 6, 60))
        n_eval = max(2, n_train // 5)
        return n_train, n_eval, n_eval

    def check(self) -> None:
        if not 3 <= self.n_incidents <= MAX_INCIDENTS:
            raise ConfigError(
                f"--incidents must lie in [3, {MAX_INCIDENTS:,}] (got {self.n_incidents})"
            )
        if self.seed < 0:  # NumPy's generators take no negative seed
            raise ConfigError(f"--seed must be >= 0 (got {self.seed})")
        if self.n_graphs is not None and min(self.n_graphs) < 1:
            raise ConfigError(f"--graphs must be >= 1 (got {self.n_graphs[0]})")
        if self.workers is not None and self.workers < 1:
            raise ConfigError(f"--workers must be >= 1 (got {self.workers})")
        if not 0 <= self.large_fraction <= 1:
            raise ConfigError(f"large_fraction must be in [0, 1] (got {self.large_fraction})")
        if self.graphs.max_clusters < 3 and self.large_fraction > 0:
            raise ConfigError(
                "test_large needs max_clusters >= 3 (training graphs use up to max_clusters - 1)"
            )
        self.graphs.check()
        self.sim.check()


def _jobs(spec: DatasetSpec) -> list[tuple[str, int, int]]:
    """(split, graph index, incidents on that graph) for every topology."""
    counts = spec.graph_counts()
    n = spec.n_incidents
    per_split = {
        "train": n - 2 * int(round(0.15 * n)),
        "val": int(round(0.15 * n)),
        "test": int(round(0.15 * n)),
    }
    n_graphs = dict(zip(("train", "val", "test"), counts, strict=True))
    if spec.large_fraction > 0:
        per_split["test_large"] = max(1, int(round(spec.large_fraction * n)))
        n_graphs["test_large"] = spec.n_large_graphs
    jobs = []
    for split, total in per_split.items():
        g = max(1, min(n_graphs[split], total)) if total > 0 else 0
        for i in range(g):
            jobs.append((split, i, total // g + (1 if i < total % g else 0)))
    return jobs


def _graph_for(spec: DatasetSpec, split: str, i: int):  # noqa: ANN202 - DependencyGraph
    rng = np.random.default_rng([spec.seed, SPLIT_IDS[split], i])
    gc = spec.graphs
    if split == "test_large":
        cfg = replace(gc, min_clusters=gc.max_clusters)
        lo = math.log(max(gc.min_nodes, (gc.min_nodes + gc.max_nodes) // 2))
        n_nodes = int(round(math.exp(rng.uniform(lo, math.log(gc.max_nodes)))))
        return generate_graph(f"{split}-g{i:03d}", rng, cfg, n_nodes=n_nodes)
    cfg = replace(
        gc,
        max_clusters=max(
            gc.min_clusters, gc.max_clusters - 1 if spec.large_fraction > 0 else gc.max_clusters
        ),
    )
    return generate_graph(f"{split}-g{i:03d}", rng, cfg)


def _run_job(args: tuple[DatasetSpec, str, int, int]) -> tuple[str, dict[str, Any], list[str]]:
    spec, split, i, n_inc = args
    g = _graph_for(spec, split, i)
    sim = IncidentSimulator(g, spec.sim)
    rng = np.random.default_rng([spec.seed, SPLIT_IDS[split], i, 1])
    t_base = datetime.fromisoformat(spec.sim.start_time.replace("Z", "+00:00")).timestamp()
    lines = []
    for k in range(n_inc):
        inc = sim.simulate(
            rng, f"{g.name}-i{k:05d}", t_start=t_base + k * 7200.0 + rng.uniform(0, 3600)
        )
        lines.append(json.dumps(inc, separators=(",", ":")))
    return split, g.to_json(), lines


def generate_dataset(
    out: str | Path, spec: DatasetSpec, progress: Callable[[int], None] | None = None
) -> dict[str, Any]:
    """Generate a dataset folder (see :mod:`fleetmind.data.rca_dataset`) and return its ``meta.json`` dict.

    Args:
        out: the folder (created; old ``*.jsonl`` in it are removed).
        spec: what to build.
        progress: called with the number of incidents just finished (e.g. ``tqdm.update``).
    """
    spec.check()
    jobs = _jobs(spec)
    workers = spec.workers or min(2, os.cpu_count() or 1)
    args = [(spec, split, i, n) for split, i, n in jobs]
    graphs_by_split: dict[str, list[str]] = {}
    stats: dict[str, list[int]] = {}
    with DatasetWriter(out) as w:
        for split in dict.fromkeys(s for s, _, _ in jobs):
            w.open_split(split)
        if workers > 1 and len(args) > 1:
            import multiprocessing as mp

            ctx = mp.get_context("fork") if hasattr(os, "fork") else mp.get_context()
            with ctx.Pool(workers, initializer=_quiet_worker, initargs=(os.getpid(),)) as pool:
                results = pool.imap(_run_job, args, chunksize=1)
                _consume(results, w, graphs_by_split, stats, progress)
        else:
            _consume(map(_run_job, args), w, graphs_by_split, stats, progress)
        meta = {
            "generator": "fleetmind.data.rca_gen",
            "seed": spec.seed,
            "n_incidents": spec.n_incidents,
            "sim": spec.sim.to_json(),
            "graphs": asdict(spec.graphs),
            "large_fraction": spec.large_fraction,
            "split_graphs": graphs_by_split,
            "graph_stats": {
                k: {"nodes": v[0], "edges": v[1], "clusters": v[2]} for k, v in stats.items()
            },
            "counts": w.counts,
            "python": platform.python_version(),
        }
        w.set_meta(meta)
    return meta


def _quiet_worker(parent_pid: int) -> None:
    """Pool initializer: Ctrl-C (SIGINT to the whole process group) is the parent's to handle, and
    SIGTERM (the parent ending the pool, or the parent's end: :func:`die_with_parent`) ends a worker
    quietly: no traceback from every worker."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    die_with_parent(parent_pid)


def _consume(results, w: DatasetWriter, graphs_by_split: dict, stats: dict, progress) -> None:  # noqa: ANN001

    for split, gjson, lines in results:
        g = DependencyGraph.from_json(gjson)
        w.add_graph(g)
        graphs_by_split.setdefault(split, []).append(g.name)
        stats[g.name] = [g.num_nodes, g.num_edges, sum(1 for n in g.nodes if n.kind == "cluster")]
        w.open_split(split)
        fh = w._files[split]
        for line in lines:
            fh.write(line + "\n")
        w.counts[split] += len(lines)
        if progress is not None:
            progress(len(lines))
