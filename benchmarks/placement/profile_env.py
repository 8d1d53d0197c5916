"""cProfile of the placement env step, both modes, written as JSON.

Runs ``--steps`` decisions of ``fleetmind/GpuPlacement-v0`` (trace ``default``, workload seed 42,
FGD prefix 80 % as in training, candidate 0 = FGD's choice as the actor) and of
``MultiClusterPlacement-v0`` (``default``, seed 0, candidate 0), each under ``cProfile``, and writes
steps per second and the top functions by own time to ``benchmarks/results/placement/placement_env_profile.json``.

    python -m benchmarks.placement.profile_env [--steps 3000]
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import pstats
import time
from pathlib import Path
from typing import Any

from benchmarks.provenance import REPO_ROOT as REPO
from benchmarks.provenance import load_now, provenance
from fleetmind import argtypes
from fleetmind.cli.runner import run_main


def _profile(env: Any, steps: int, reset_kw: dict[str, Any]) -> dict[str, Any]:
    env.reset(**reset_kw)
    prof = cProfile.Profile()
    n = 0
    t0 = time.perf_counter()
    prof.enable()
    while n < steps:
        mask = env.action_masks()
        _, _, term, trunc, _ = env.step(int(mask.argmax()))
        n += 1
        if term or trunc:
            env.reset(**reset_kw)
    prof.disable()
    wall = time.perf_counter() - t0
    st = pstats.Stats(prof, stream=io.StringIO())
    rows = []
    for (file, line, fn), (_, ncalls, tottime, cumtime, _) in st.stats.items():  # type: ignore[attr-defined]
        rows.append(
            {
                "function": f"{Path(file).name}:{line}({fn})",
                "calls": int(ncalls),
                "tottime_s": round(tottime, 4),
                "cumtime_s": round(cumtime, 4),
            }
        )
    rows.sort(key=lambda r: -r["tottime_s"])
    return {
        "steps": n,
        "wall_s_profiled": round(wall, 3),
        "ms_per_step_profiled": round(1000 * wall / max(n, 1), 3),
        "top_by_own_time": rows[:20],
    }


def main() -> None:
    load0 = load_now()
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=argtypes.positive_int, default=3000)
    ap.add_argument(
        "--json",
        type=argtypes.output_file,
        default=str(REPO / "benchmarks/results/placement/placement_env_profile.json"),
    )
    a = ap.parse_args()
    from fleetmind.envs.gpu_placement_env import GpuPlacementEnv
    from fleetmind.envs.multicluster_env import MultiClusterPlacementEnv

    out: dict[str, Any] = {
        **provenance(__spec__.name, load_start=load0, packages=("ray", "cma", "onnxruntime"))
    }
    for reward in ("shaped", "metric"):
        env = GpuPlacementEnv(traces=["default"], fgd_until_pct=80.0, reward=reward)
        out[f"fgd_mode_reward_{reward}"] = _profile(
            env, a.steps, {"options": {"workload_seed": 42}}
        )
    dyn = MultiClusterPlacementEnv(trace="default")
    out["dynamic_mode"] = _profile(dyn, a.steps, {"seed": 0})
    Path(a.json).write_text(json.dumps(out, indent=1) + "\n")
    for k in ("fgd_mode_reward_shaped", "fgd_mode_reward_metric", "dynamic_mode"):
        v = out[k]
        print(k, v["ms_per_step_profiled"], "ms/step;", v["top_by_own_time"][0]["function"])


if __name__ == "__main__":
    raise SystemExit(run_main(main, prog="benchmarks.placement.profile_env"))
