"""A dynamic-mode learner's model against its clone and the rollout policy, paired on the frozen set.

For each frozen trace (``benchmarks/placement/frozen_set.yaml``, regenerated into
``runs/frozen_set`` with hashes checked) and evaluation seed, the chosen policies run on the same
job stream in the model's own setting (:func:`fleetmind.rl.dynamic_eval.evaluate_streams`):

* ``model``: the folder's ``policy.onnx``; ``clone``: the folder's ``clone.onnx``;
* ``rollout``: the rollout policy over the clone (:class:`fleetmind.rl.rollout.DynamicRolloutPolicy`,
  sampled futures; by default the distillation recipe's improver settings: k 3, 2 futures,
  decisions 0-63, every 4th). It costs about ``16 x 6`` clone episodes per run, so it usually
  runs on a subset of the seeds (``--seeds``).

Reported per trace and overall: each policy's mean slowdown and mean p99 queueing delay, and the
paired gaps ``a / b - 1`` (%) with a 95 % t-interval over the paired runs, for every pair of the
policies run. ``--merge`` adds the per-run rows of an earlier output (e.g. the rollout subset)
so that pairs across the two files are computed on their common runs; ``--workers`` runs the
traces in parallel processes. Used for the release rules of the distillation and ES notes
(``docs/research/2026-12-02-placement-distillation.md``, ``...-placement-es.md``):

    nice -n 5 python -m benchmarks.dynamic.distill_eval --model DIR --policies model clone \\
        --json benchmarks/results/dynamic/distill_frozen.json
    nice -n 5 python -m benchmarks.dynamic.distill_eval --model DIR --policies rollout clone \\
        --seeds 7301 --json benchmarks/results/dynamic/distill_rollout_frozen.json
"""

from __future__ import annotations

import argparse
import itertools
import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.placement.ablation import ci95, repo_relative
from benchmarks.placement.frozen_set import load_manifest, write_all
from benchmarks.provenance import REPO_ROOT, load_now, provenance
from fleetmind import argtypes
from fleetmind.cli.runner import run_main
from fleetmind.cli.sched import parse_seeds
from fleetmind.envs.dynamic.order import NAMED_ORDERS
from fleetmind.envs.multicluster_env import MultiClusterPlacementEnv
from fleetmind.errors import ConfigError
from fleetmind.rl.dynamic_eval import actor_fn, evaluate_streams, load_dynamic_actor, model_config
from fleetmind.rl.rollout import DynamicRolloutPolicy, RolloutConfig
from fleetmind.rl.scaleout import run_tasks

POLICIES = ("model", "clone", "rollout")


def pair_stats(runs: list[dict[str, Any]], a: str, b: str) -> dict[str, Any] | None:
    """Paired gap of ``a`` over ``b`` on the runs that have both: ``{"n_runs", "gap_pct",
    "ci95_pct", "<a>_p99_queue_delay_s", "<b>_p99_queue_delay_s"}``; None when no run has both."""
    both = [r for r in runs if a in r and b in r]
    if not both:
        return None
    gaps = [100 * (r[a]["mean_slowdown"] / r[b]["mean_slowdown"] - 1) for r in both]
    return {
        "n_runs": len(both),
        "gap_pct": float(np.mean(gaps)),
        "ci95_pct": ci95(gaps),
        f"{a}_mean_slowdown": float(np.mean([r[a]["mean_slowdown"] for r in both])),
        f"{b}_mean_slowdown": float(np.mean([r[b]["mean_slowdown"] for r in both])),
        f"{a}_p99_queue_delay_s": float(np.mean([r[a]["p99_queue_delay_s"] for r in both])),
        f"{b}_p99_queue_delay_s": float(np.mean([r[b]["p99_queue_delay_s"] for r in both])),
    }


def trace_runs(
    job: tuple[str, str, list[int], tuple[str, ...], str, RolloutConfig, str | None],
) -> list[dict[str, Any]]:
    """The runs of one frozen trace: ``(trace CSV, name, seeds, policies, model folder, rollout
    settings, queue order of the model and rollout policies or None for the model's own)`` -> one
    row per seed with each policy's mean slowdown and p99 queueing delay (a
    job of :func:`fleetmind.rl.scaleout.run_tasks`, so traces can run in parallel)."""
    path, name, seeds, policies, model_ref, rcfg, order = job
    model = Path(model_ref)
    cfg = model_config(model)
    if order is not None:
        cfg = replace(cfg, queue_order=None if order == "fifo" else NAMED_ORDERS[order])
    actors = {}
    if "clone" in policies:
        actors["clone"] = actor_fn(load_dynamic_actor(model / "clone.onnx", cfg.n_candidates))
    if "model" in policies:
        actors["model"] = actor_fn(load_dynamic_actor(model / "policy.onnx", cfg.n_candidates))
    extra = {}
    if "rollout" in policies:
        base = load_dynamic_actor(model / "clone.onnx", cfg.n_candidates)

        def make(env: MultiClusterPlacementEnv, seed: int) -> DynamicRolloutPolicy:
            def new_env() -> MultiClusterPlacementEnv:
                return MultiClusterPlacementEnv(**cfg.env_kwargs(env.trace))

            return DynamicRolloutPolicy(base, new_env, seed, rcfg)

        extra["rollout"] = make
    # the clone runs FIFO whatever order the model runs with
    res = evaluate_streams(
        path, seeds, actors, heuristics=(), config=cfg, policies=extra, ordered={"model", "rollout"}
    )
    rows = []
    for i, s in enumerate(seeds):
        row: dict[str, Any] = {"trace": name, "seed": int(s)}
        for pol, r in res.items():
            row[pol] = {
                "mean_slowdown": r["per_seed"]["mean_slowdown"][i],
                "p99_queue_delay_s": r["per_seed"]["p99_queue_delay_s"][i],
            }
        rows.append(row)
        print(json.dumps(row), flush=True)
    return rows


def read_merge(path: str) -> dict[tuple[str, int], dict[str, Any]]:
    """The runs of an earlier output JSON (``--merge``), by ``(trace, seed)``; read before any
    simulation, so a bad file fails at once (one line, :class:`ConfigError`).

    Raises:
        ConfigError: the file cannot be read, is not JSON, or is not an object with a ``runs``
            list of objects that each have a ``trace`` (text) and a ``seed`` (integer).
    """
    try:
        doc = json.loads(Path(path).read_text())
    except OSError as err:
        raise ConfigError(f"--merge {path}: cannot read it: {err.strerror or err}") from None
    except (ValueError, UnicodeDecodeError) as err:
        raise ConfigError(f"--merge {path}: not JSON: {err}") from None
    runs = doc.get("runs") if isinstance(doc, dict) else None
    if not isinstance(runs, list):
        raise ConfigError(f"--merge {path}: not an output of this script (no 'runs' list)")
    earlier: dict[tuple[str, int], dict[str, Any]] = {}
    for i, r in enumerate(runs):
        if not (
            isinstance(r, dict)
            and isinstance(r.get("trace"), str)
            and isinstance(r.get("seed"), int)
            and not isinstance(r.get("seed"), bool)
        ):
            raise ConfigError(f"--merge {path}: runs[{i}] is not an object with a trace and a seed")
        earlier[(r["trace"], r["seed"])] = r
    return earlier


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", required=True, help="dynamic-mode model folder with clone.onnx")
    ap.add_argument("--policies", nargs="+", choices=POLICIES, default=["model", "clone"])
    ap.add_argument("--traces", nargs="+", default=None, help="frozen trace names (default: all)")
    ap.add_argument("--seeds", nargs="+", default=None, help="evaluation seeds (default: frozen)")
    ap.add_argument("--rollout-k", type=argtypes.positive_int, default=3)
    ap.add_argument("--rollout-window", nargs=2, type=float, default=[0.0, 64.0])
    ap.add_argument("--rollout-every", type=argtypes.positive_int, default=4)
    ap.add_argument("--rollout-samples", type=argtypes.positive_int, default=2)
    ap.add_argument("--rollout-seed", type=argtypes.seed, default=0, help="sampled futures' seed")
    ap.add_argument(
        "--queue-order",
        choices=list(NAMED_ORDERS),
        default=None,
        help="run the model (and rollout) policies with this named queue order instead of the"
        " model's own (envs/dynamic/order.py; the clone always runs FIFO)",
    )
    ap.add_argument("--merge", default=None, help="an earlier output JSON whose runs to pair with")
    ap.add_argument(
        "--workers", type=argtypes.positive_int, default=1, help="traces run in this many processes"
    )
    ap.add_argument("--json", type=argtypes.output_file, required=True, help="output JSON")
    a = ap.parse_args(argv)
    earlier = read_merge(a.merge) if a.merge else {}
    load0 = load_now()
    man = load_manifest()
    paths = write_all(REPO_ROOT / "runs" / "frozen_set", man)
    names = a.traces or list(paths)
    seeds = parse_seeds(a.seeds) if a.seeds else [int(s) for s in man["eval_seeds"]]
    model = Path(a.model)
    cfg = model_config(model)
    rcfg = RolloutConfig(
        k=a.rollout_k,
        band=(a.rollout_window[0], a.rollout_window[1]),
        every=a.rollout_every,
        future="sampled",
        samples=a.rollout_samples,
        sample_seed=a.rollout_seed,
    )
    jobs = [
        (str(paths[n]), n, seeds, tuple(a.policies), str(model), rcfg, a.queue_order) for n in names
    ]
    runs: list[dict[str, Any]] = []
    for rows in run_tasks(trace_runs, jobs, workers=a.workers):
        runs.extend(rows)
    if earlier:
        for r in runs:
            for pol, v in earlier.get((r["trace"], r["seed"]), {}).items():
                if pol in POLICIES and pol not in r:
                    r[pol] = v
    present = [p for p in POLICIES if any(p in r for r in runs)]
    pairs = {f"{x}_vs_{y}": pair_stats(runs, x, y) for x, y in itertools.combinations(present, 2)}
    per_trace = {
        n: {
            f"{x}_vs_{y}": pair_stats([r for r in runs if r["trace"] == n], x, y)
            for x, y in itertools.combinations(present, 2)
        }
        for n in names
    }
    out = {
        **provenance(__spec__.name, argv, load_start=load0, packages=("onnxruntime", "torch")),
        "model": str(repo_relative(str(model))),
        "setting": cfg.__dict__,
        "queue_order": a.queue_order,
        "policies": list(a.policies),
        "rollout_config": {**rcfg.__dict__, "band": list(rcfg.window("dynamic"))},
        "seeds": seeds,
        "merged_from": a.merge,
        "overall": pairs,
        "traces": per_trace,
        "runs": runs,
    }
    Path(a.json).parent.mkdir(parents=True, exist_ok=True)
    Path(a.json).write_text(json.dumps(out, indent=1) + "\n")
    print(json.dumps(out["overall"], indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(run_main(main, prog="benchmarks.dynamic.distill_eval"))
