"""Dynamic-mode evaluation: every policy on the same job streams, per seed (:func:`evaluate_dynamic`)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from fleetmind.data.openb import PodTrace, load_openb_trace
from fleetmind.envs.dynamic.fleet import DynFleet, load_dynamic_fleet
from fleetmind.envs.dynamic.jobs import DynJobs, build_jobs
from fleetmind.envs.dynamic.model import (
    DEFAULT_BACKFILL_DEPTH,
    DEFAULT_NODE_FRACTION,
    DEFAULT_SPEED_BASIS,
    DEFAULT_TARGET_UTIL,
    MAX_WORK_S,
)
from fleetmind.envs.dynamic.policies import available_policies, make_dynamic_policy
from fleetmind.envs.dynamic.sim import DynamicSim

# Evaluation
METRIC_KEYS = (
    "mean_jct_s",
    "p99_jct_s",
    "mean_slowdown",
    "p99_queue_delay_s",
    "gpu_allocation_ratio",
    "ms_per_decision",
)


def evaluate_dynamic(
    trace: str | PodTrace,
    policies: Sequence[str] | None = None,
    seeds: Sequence[int] = (42, 43, 44),
    *,
    fleet: str | DynFleet | Any = "openb",
    n_clusters: int = 3,
    node_fraction: float = DEFAULT_NODE_FRACTION,
    target_util: float = DEFAULT_TARGET_UTIL,
    n_jobs: int | None = None,
    backfill_depth: int = DEFAULT_BACKFILL_DEPTH,
    max_work_s: float | None = MAX_WORK_S,
    speed_basis: str = DEFAULT_SPEED_BASIS,
    progress: Callable[[str], None] | None = None,
) -> dict[str, dict[str, Any]]:
    """Every policy on the same dynamic-mode jobs, per seed.

    For each seed the jobs are built once (:func:`build_jobs` with ``numpy.random.default_rng(seed)``)
    and the node tie-break priority is a permutation from the same stream; every policy sees the
    same jobs and priority, and its own random stream (Random's choices) is seeded with the seed.

    Args:
        trace: openb trace name or path, or a :class:`fleetmind.data.openb.PodTrace`.
        policies: names (default: :func:`available_policies`).
        seeds: seeds.
        fleet: ``"openb"`` (openb GPU nodes in ``n_clusters`` clusters), a YAML path, a
            :class:`DynFleet` or a :class:`fleetmind.data.fleet.Fleet`.
        n_clusters: clusters of the openb fleet.
        node_fraction: stratified share of the fleet's nodes kept (:meth:`DynFleet.sample`, seed 0;
            1.0 keeps all).
        target_util: offered GPU load (see :func:`build_jobs`).
        n_jobs: jobs per run (default: the trace length).
        backfill_depth: see :class:`DynamicSim`.
        max_work_s: cap on a job's work (s).
        speed_basis: ``"fp16"`` or ``"fp32"`` GPU speeds.
        progress: optional callback called with ``"<policy> seed <s>"`` after each run.

    Returns:
        ``{policy: {"mean_jct_s", "p99_jct_s", "mean_slowdown", "p99_queue_delay_s",
        "gpu_allocation_ratio", "ms_per_decision", "p99_slowdown", "mean_queue_delay_s",
        "remote_data_frac", "mean_run_slowdown" (means over seeds), "n_rejected", "per_seed":
        {metric: [one value per seed]}}}``.

    Raises:
        ConfigError: unknown policy or bad option; DataError: unreadable trace or fleet.
    """

    tr = trace if isinstance(trace, PodTrace) else load_openb_trace(trace)
    names = list(policies) if policies else available_policies()
    fl = load_dynamic_fleet(fleet, n_clusters, speed_basis)
    if node_fraction < 1:
        fl = fl.sample(node_fraction)
    for name in names:  # fail early on a bad name
        make_dynamic_policy(name, tr, fl, 0)
    per_seed: dict[str, list[dict[str, float]]] = {n: [] for n in names}
    for seed in seeds:
        rng = np.random.default_rng(seed)
        # a stream short of target_util warns (TraceWarning: one line in the CLI)
        jobs = build_jobs(
            tr, fl, rng, target_util=target_util, n_jobs=n_jobs, max_work_s=max_work_s
        )
        priority = np.argsort(rng.permutation(fl.n_nodes))
        for name in names:
            policy = make_dynamic_policy(name, tr, fl, seed)
            sim = DynamicSim(fl, jobs, backfill_depth=backfill_depth, priority=priority)
            m = sim.run(policy)
            m["time_scale"] = jobs.time_scale
            m["offered_load"] = jobs.offered_load
            per_seed[name].append(m)
            if progress is not None:
                progress(f"{name} seed {seed}")
    extra = ("p99_slowdown", "mean_queue_delay_s", "remote_data_frac", "mean_run_slowdown")
    results: dict[str, dict[str, Any]] = {}
    for name in names:
        rows = per_seed[name]
        entry: dict[str, Any] = {
            k: float(np.mean([r[k] for r in rows])) for k in (*METRIC_KEYS, *extra)
        }
        entry["n_rejected"] = int(round(float(np.mean([r["n_rejected"] for r in rows]))))
        entry["per_seed"] = {
            k: [float(r[k]) for r in rows]
            for k in (*METRIC_KEYS, *extra, "n_started", "offered_load")
        }
        results[name] = entry
    return results


def dynamic_setup(fleet: DynFleet, jobs: DynJobs, **kw: Any) -> dict[str, Any]:
    """A JSON-able description of a dynamic-mode run's fleet and job stream (for reports)."""
    return {
        "nodes": fleet.n_nodes,
        "gpus": fleet.gpu_capacity,
        "clusters": [
            {"name": c, "region": r, "gpus": int(fleet.num_gpu[fleet.cluster == i].sum())}
            for i, (c, r) in enumerate(zip(fleet.cluster_names, fleet.regions, strict=True))
        ],
        "jobs": len(jobs),
        "offered_load": jobs.offered_load,
        "time_scale": jobs.time_scale,
        "arrival_span_s": float(jobs.arrival_s[-1]) if len(jobs) else 0.0,
        **kw,
    }


__all__ = [
    "dynamic_setup",
    "evaluate_dynamic",
]
