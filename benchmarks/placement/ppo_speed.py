"""Speed of the PPO placement agent. Writes ``benchmarks/results/placement/ppo.json``.

Figures:

* ``actor_ms``: the exported actor alone (ONNX via onnxruntime, and the plain torch module), median
  and p90 ms per decision (batch 1) on real observations of ``fleetmind/GpuPlacement-v0``.
* ``decision_ms``: a whole decision of :class:`fleetmind.rl.policy_adapter.PPOPlacementPolicy` as the
  evaluation and the service run it: candidate set + features + actor, on the full openb fleet.
* ``env_steps_per_s``: ``fleetmind/GpuPlacement-v0`` steps per second (wall clock) including
  candidate features (seed-42 ``default`` workload, action 0, from the first decision, ``--steps``
  steps); ``env_steps_per_cpu_s`` is the same loop per CPU-second of this process (less sensitive
  to other jobs on the machine, though not immune: they share caches and cores).

The policy is the released one in ``models/placement/`` when present, otherwise a freshly initialised
network of the same shape (speed does not depend on the weights). Record the load average: on a
shared machine every figure scales with it.

Usage::

    python -m benchmarks.placement.ppo_speed [--steps 2000] [--decisions 300]
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import numpy as np

from benchmarks.provenance import RESULTS, load_now, provenance
from fleetmind import argtypes
from fleetmind.cli.runner import run_main

OUT = RESULTS / "placement" / "ppo.json"
PACKAGES = ("onnxruntime", "stable-baselines3", "sb3-contrib", "gymnasium")


def stats(ms: list[float]) -> dict:
    a = np.asarray(ms)
    return {
        "median": round(float(np.median(a)), 4),
        "p90": round(float(np.percentile(a, 90)), 4),
        "n": len(a),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=argtypes.positive_int, default=2000, help="env steps to time")
    ap.add_argument(
        "--decisions",
        type=argtypes.positive_int,
        default=300,
        help="actor / adapter decisions to time",
    )
    ap.add_argument("--out", type=argtypes.output_file, default=str(OUT))
    a = ap.parse_args()

    import torch

    from fleetmind.envs.gpu_placement_env import GpuPlacementEnv
    from fleetmind.rl.export import OnnxActor, PlacementActor, save_onnx
    from fleetmind.rl.policy_adapter import RELEASED_DIR, PPOPlacementPolicy, load_ppo_policy

    torch.set_num_threads(1)
    load0 = load_now()
    env = GpuPlacementEnv("default")
    k = env.n_candidates
    if (RELEASED_DIR / "policy.onnx").is_file():
        source = str(RELEASED_DIR)
        onnx = OnnxActor(RELEASED_DIR / "policy.onnx")
        torch_actor = load_ppo_policy(RELEASED_DIR, backend="torch").actor
    else:
        source = "untrained network (no released model)"
        torch_actor = PlacementActor(k, env.n_cand_features, env.n_global_features).eval()
        tmp = Path("/tmp") / f"bench_ppo_{os.getpid()}.onnx"
        save_onnx(torch_actor, tmp)
        onnx = OnnxActor(tmp)

    # env steps/s including candidate features
    obs, _ = env.reset(options={"workload_seed": 42})
    samples: list[tuple[np.ndarray, np.ndarray]] = []
    load_env = load_now()
    t0 = time.perf_counter()
    c0 = time.process_time()
    n = 0
    while n < a.steps:
        mask = env.action_masks()
        if len(samples) < a.decisions:
            samples.append((obs, mask))
        obs, _, term, trunc, _ = env.step(0)
        n += 1
        if term or trunc:
            obs, _ = env.reset(options={"workload_seed": 43})
    env_sps = n / (time.perf_counter() - t0)
    env_cpu_sps = n / (time.process_time() - c0)

    actor_ms: dict[str, dict] = {}
    for name, actor in (("onnx", onnx), ("torch", torch_actor)):
        actor.predict(*samples[0])
        ms = []
        for o, m in samples:
            t = time.perf_counter()
            actor.predict(o, m)
            ms.append(1000 * (time.perf_counter() - t))
        actor_ms[name] = stats(ms)

    # full decisions through the policy adapter on a fresh seed-42 run
    from fleetmind.data.openb import load_openb_nodes, load_openb_trace
    from fleetmind.envs.core import ClusterState, pods_from_trace
    from fleetmind.envs.fgd_mode import build_workload

    trace, nodes = load_openb_trace("default"), load_openb_nodes()
    pol = (
        load_ppo_policy(RELEASED_DIR)
        if (RELEASED_DIR / "policy.onnx").is_file()
        else PPOPlacementPolicy(onnx, k)
    )
    state = ClusterState.from_openb(nodes)
    wl = build_workload(trace, len(nodes), state.gpu_capacity_milli, seed=42)
    state.set_priority(wl.priority)
    pol.reset(state, trace=trace)
    dec_ms = []
    for pod in pods_from_trace(wl.trace)[: a.decisions]:
        t = time.perf_counter()
        mask = state.feasible(pod)
        node, gpus = pol.select(state, pod, mask)
        dec_ms.append(1000 * (time.perf_counter() - t))
        if node >= 0:
            state.place(pod, node, gpus)

    result = {
        **provenance(__spec__.name, load_start=load0, packages=PACKAGES),
        "model": source,
        "n_candidates": k,
        "obs_dim": int(samples[0][0].size),
        "actor_ms": actor_ms,
        "decision_ms": stats(dec_ms),
        "env_steps_per_s": round(env_sps, 1),
        "env_steps_per_cpu_s": round(env_cpu_sps, 1),
        "env_steps_timed": n,
        "load_average_at_env_timing": load_env,
        "targets": {"actor_median_ms": 1.0, "env_steps_per_s": 1000},
    }
    out = Path(a.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    raise SystemExit(run_main(main, prog="benchmarks.placement.ppo_speed"))
