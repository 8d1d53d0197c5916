"""Held-out evaluation of the placement agent against FGD and BestFit (the fgd-mode targets).

Runs ``ppo`` (the released model, or ``--model``), ``FGD`` and ``BestFit`` in fgd mode on every
``--trace`` for every seed, in ``--workers`` processes (one run per job), and writes
``benchmarks/results/placement/ppo_eval.json``: per trace and policy the mean/std/per-seed unallocated GPU % at
100 % (and 130 %) arrived, PPO - FGD in points and in % of FGD, and over the held-out traces (those
not in the model's ``train_traces``) the two targets: PPO <= FGD on every trace, and the mean
relative gap (target: at least 10 % below FGD). ``--model`` is a model folder or one policy file
(``.onnx``/``.pt``, read with its folder's ``metadata.json``), as ``fleetmind sched evaluate --model``
takes; ``policy_file`` in the JSON names the file evaluated and its SHA-256.

    python -m benchmarks.placement.ppo_heldout --traces cpu050 gpushare20 gpushare60 multigpu30 \
        gpuspec20 --seeds 42-51 --workers 2

The FGD and BestFit runs are the same code as ``fleetmind sched evaluate``; a PPO run is
``run_fgd(trace, load_ppo_policy(model), seed)``, as ``fleetmind sched evaluate --policies ppo`` does.
"""

from __future__ import annotations

import argparse
import json
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np

from benchmarks.provenance import REPO_ROOT, RESULTS, load_now, provenance
from fleetmind import argtypes
from fleetmind.cli.runner import run_main
from fleetmind.cli.sched import parse_seeds
from fleetmind.envs.fgd_mode import aggregate_results, run_fgd
from fleetmind.errors import ConfigError
from fleetmind.provenance import input_file

OUT = RESULTS / "placement" / "ppo_eval.json"
POLICIES = ("ppo", "FGD", "BestFit")

_PPO: dict[str, object] = {}


def _job(job: tuple[str, str, int, str | None]):  # noqa: ANN202 - FgdResult
    trace, policy, seed, model = job
    if policy == "ppo":
        from fleetmind.rl.policy_adapter import load_ppo_policy

        pol = _PPO.get(str(model))
        if pol is None:
            pol = _PPO[str(model)] = load_ppo_policy(model)
        res = run_fgd(trace, pol, seed)
        res.policy = "ppo"
    else:
        res = run_fgd(trace, policy, seed)
    res.workload = None  # keep the pickled result small
    return res


def _model_files(model: str | None) -> tuple[Path, Path, dict]:
    """``(model path, policy file, metadata)`` of ``--model``: a model folder (default
    ``models/placement``), whose ``policy.onnx`` is evaluated where it exists, else its
    ``policy.pt`` (as ``load_ppo_policy`` picks), or a policy file (``.onnx``/``.pt``, as
    ``fleetmind sched evaluate --model`` takes), read with its folder's ``metadata.json``."""
    path = Path(model) if model else REPO_ROOT / "models" / "placement"
    if path.is_dir():
        model_dir = path
        policy = path / "policy.onnx"
        if not policy.is_file():
            policy = path / "policy.pt"
    elif path.is_file():
        model_dir, policy = path.parent, path
    else:
        raise ConfigError(f"placement model not found: {path}")
    meta_file = model_dir / "metadata.json"
    if not meta_file.is_file():
        raise ConfigError(f"{model_dir} has no metadata.json (the model's train_traces)")
    if not policy.is_file():
        raise ConfigError(f"{model_dir} has no policy.onnx or policy.pt")
    return path, policy, json.loads(meta_file.read_text())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--traces", nargs="+", required=True)
    ap.add_argument("--seeds", nargs="+", default=["42-51"])
    ap.add_argument(
        "--model",
        default=None,
        help="PPO model folder, or a policy .onnx/.pt file in one (default: models/placement)",
    )
    ap.add_argument("--workers", type=argtypes.positive_int, default=2)
    ap.add_argument("--out", type=argtypes.output_file, default=str(OUT))
    ap.add_argument(
        "--heuristics-from",
        default=None,
        help="take FGD's and BestFit's results from this earlier output of the script (same"
        " traces and seeds) instead of rerunning them: they are deterministic by seed",
    )
    a = ap.parse_args()
    seeds = parse_seeds(a.seeds)
    model_path, policy_file, meta = _model_files(a.model)
    train_traces = set(meta.get("train_traces", []))
    reused: dict[str, dict] = {}
    if a.heuristics_from:
        prev = json.loads(Path(a.heuristics_from).read_text())
        if sorted(prev["seeds"]) != sorted(seeds):
            raise ConfigError(f"{a.heuristics_from} has seeds {prev['seeds']}, this run {seeds}")
        missing = [t for t in a.traces if t not in prev["traces"]]
        if missing:
            raise ConfigError(f"{a.heuristics_from} has no results for {missing}")
        reused = {t: prev["traces"][t]["policies"] for t in a.traces}
    run_policies = ("ppo",) if reused else POLICIES
    jobs = [(t, p, s, a.model) for t in a.traces for p in run_policies for s in seeds]
    load0 = load_now()
    t0 = time.perf_counter()
    results: dict[tuple[str, str], list] = {}
    with ProcessPoolExecutor(max_workers=a.workers) as pool:
        for i, res in enumerate(pool.map(_job, jobs)):
            t, p, _, _ = jobs[i]
            results.setdefault((t, p), []).append(res)
            print(
                f"[{i + 1}/{len(jobs)}] {t} {p} seed {res.seed}: {res.unallocated[100]:.2f}",
                flush=True,
            )
    wall = time.perf_counter() - t0
    traces: dict[str, dict] = {}
    gaps = []
    all_le = True
    for t in a.traces:
        pols = {p: aggregate_results(results[(t, p)]) for p in run_policies}
        pols.update({p: reused[t][p] for p in POLICIES if p not in pols})
        name = results[(t, "ppo")][0].trace
        ppo_m = pols["ppo"]["unallocated_gpu_pct_at_100"]
        fgd_m = pols["FGD"]["unallocated_gpu_pct_at_100"]
        held_out = name.removeprefix("openb_pod_list_") not in train_traces and name not in (
            train_traces
        )
        rel = 100.0 * (ppo_m - fgd_m) / fgd_m
        per_seed_le = [
            pols["ppo"]["per_seed"][str(s)]["unallocated_gpu_pct_at_100"]
            <= pols["FGD"]["per_seed"][str(s)]["unallocated_gpu_pct_at_100"]
            for s in seeds
        ]
        traces[name] = {
            "held_out": held_out,
            "policies": pols,
            "ppo_minus_fgd": round(ppo_m - fgd_m, 4),
            "ppo_vs_fgd_pct": round(rel, 2),
            "ppo_minus_bestfit": round(ppo_m - pols["BestFit"]["unallocated_gpu_pct_at_100"], 4),
            "seeds_ppo_at_or_below_fgd": int(sum(per_seed_le)),
        }
        if held_out:
            gaps.append(rel)
            all_le &= ppo_m <= fgd_m
    out = {
        **provenance(__spec__.name, load_start=load0),
        "model": f"{model_path} ({meta.get('version')})",
        "policy_file": input_file(a.model or policy_file, policy_file),
        "heuristics_from": a.heuristics_from,
        "train_traces": sorted(train_traces),
        "seeds": seeds,
        "wall_time_s": round(wall, 1),
        "targets": {
            "held_out_traces": len(gaps),
            "ppo_at_or_below_fgd_on_every_held_out_trace": bool(all_le) if gaps else None,
            "mean_ppo_vs_fgd_pct": round(float(np.mean(gaps)), 2) if gaps else None,
            "target_mean_ppo_vs_fgd_pct": -10.0,
        },
        "traces": traces,
    }
    Path(a.out).write_text(json.dumps(out, indent=1) + "\n")
    print(json.dumps(out["targets"], indent=1))
    for name, v in traces.items():
        print(
            f"{name:32s} ppo {v['policies']['ppo']['unallocated_gpu_pct_at_100']:.2f} "
            f"FGD {v['policies']['FGD']['unallocated_gpu_pct_at_100']:.2f} "
            f"BestFit {v['policies']['BestFit']['unallocated_gpu_pct_at_100']:.2f} "
            f"({v['ppo_vs_fgd_pct']:+.1f} % vs FGD){'' if v['held_out'] else ' [train]'}"
        )


if __name__ == "__main__":
    raise SystemExit(run_main(main, prog="benchmarks.placement.ppo_heldout"))
