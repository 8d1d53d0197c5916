"""Release audit of the fgd-mode model's stages on every openb trace: FGD, teacher, clone, PPO.

Runs, in fgd mode, paired on the same workload seeds, FGD, the teacher (``teacher_strand.json`` /
``teacher.json``), the clone (``clone.onnx``) and the PPO policy (``--ppo``: default
``ppo_policy.onnx`` if the folder keeps one, else ``policy.onnx``) on every ``--traces`` (default:
every ``openb_pod_list_*.csv`` in ``--data``), and writes
``benchmarks/results/placement/placement_release_audit.json``. Per trace: each policy's mean
unallocated GPU % at 100 % arrived (unalloc@100), the paired differences PPO - clone and
clone - FGD (mean and 95 % t-interval over seeds, points of GPU capacity), the relaxed-packing lower
bound of ``fleetmind sched evaluate --causes`` (``envs.packing_bound.fgd_run_bound``) and, for FGD,
clone and PPO, how their failed GPU request at 100 % arrived splits by cause
(``envs.failure_causes``: host / gpu_fragmented / gpu_full) and how much of it lies above the bound.
The teacher's run has no failure diagnosis (it runs in ``GpuPlacementEnv``); it gets the metric only.

    nice -n 5 python -m benchmarks.placement.release_audit --seeds 42-44 --workers 2

Jobs run seed-major (every trace for the first seed, then the next), and the JSON is rewritten
after each seed completes on every trace, so a run cut short still leaves its complete seeds.
A run is the same code as ``fleetmind sched evaluate --policies FGD teacher clone ppo --causes``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path
from typing import Any

import numpy as np
from scipy import stats

from benchmarks.provenance import REPO_ROOT, RESULTS, load_now, provenance
from fleetmind import argtypes
from fleetmind.cli.runner import run_main
from fleetmind.cli.sched import parse_seeds
from fleetmind.errors import DataError

OUT = RESULTS / "placement" / "placement_release_audit.json"
DATA = Path("/work/shared/data/openb/csv")
POLICIES = ("FGD", "teacher", "clone", "ppo")
DIAGNOSED = ("FGD", "clone", "ppo")

_CACHE: dict[str, Any] = {}


def _policy(name: str, model_dir: Path, ppo: Path) -> Any:
    from fleetmind.rl.named_policies import clone_file
    from fleetmind.rl.policy_adapter import load_ppo_policy

    if name == "FGD":
        return "FGD"
    if name not in _CACHE:
        _CACHE[name] = load_ppo_policy(clone_file(model_dir) if name == "clone" else ppo)
    return _CACHE[name]


def _job(job: tuple[str, str, int, str, str]) -> dict[str, Any]:
    """One (trace, policy or 'bound', seed) run; returns plain numbers (unalloc@100 and, where
    diagnosed, the failure breakdown in % of GPU capacity)."""
    from fleetmind.data.openb import load_openb_trace

    trace_path, policy, seed, model, ppo = job
    model_dir, ppo_path = Path(model), Path(ppo)
    trace = _CACHE.get(trace_path) or _CACHE.setdefault(trace_path, load_openb_trace(trace_path))
    if policy == "bound":
        from fleetmind.envs.packing_bound import fgd_run_bound

        return {"lower_bound_pct": float(fgd_run_bound(trace, seed).min_failed_pct)}
    if policy == "teacher":
        from fleetmind.rl.named_policies import run_teacher_fgd, teacher_file

        res = run_teacher_fgd(trace, teacher_file(model_dir), seed)
        return {"unalloc100": float(res.unallocated[100])}
    from fleetmind.envs.failure_causes import run_with_causes

    res, b = run_with_causes(trace, _policy(policy, model_dir, ppo_path), seed)
    return {
        "unalloc100": float(res.unallocated[100]),
        "failed_pct": b.failed_pct,
        "by_cause": b.by_cause,
    }


def _stage_key(model_dir: Path, ppo: Path) -> str:
    """What a cached run depends on besides trace, policy and seed: the SHA-256 (first 16 hex
    digits) of the clone, the PPO policy and the teacher file, joined."""
    from fleetmind.rl.named_policies import clone_file, teacher_file

    files = (clone_file(model_dir), ppo, teacher_file(model_dir))
    return "-".join(hashlib.sha256(f.read_bytes()).hexdigest()[:16] for f in files)


def _paired(a: list[float], b: list[float]) -> dict[str, Any]:
    """Mean of a - b over paired seeds with a 95 % t-interval (points), and seeds where a > b."""
    d = np.asarray(a) - np.asarray(b)
    m = float(d.mean())
    ci = None  # one seed: no interval
    if len(d) > 1:
        half = float(stats.t.ppf(0.975, len(d) - 1) * d.std(ddof=1) / np.sqrt(len(d)))
        ci = [round(m - half, 4), round(m + half, 4)]
    return {
        "mean": round(m, 4),
        "ci95": ci,
        "seeds_worse": int((d > 1e-9).sum()),
        "n": len(d),
    }


def pooled(traces: dict[str, Any]) -> dict[str, Any]:
    """Across the held-out traces of a result's ``traces``: each trace's mean PPO - clone and
    clone - FGD in % of the second policy's mean, their mean and 95 % t-interval over traces (the
    traces as the replicates; with one seed per trace this is the only interval there is)."""
    held = [v for v in traces.values() if v["held_out"]]
    out: dict[str, Any] = {"held_out_traces": len(held)}
    for key, (a, b) in {
        "ppo_vs_clone_pct": ("ppo", "clone"),
        "clone_vs_fgd_pct": ("clone", "FGD"),
    }.items():
        rel = np.array(
            [100.0 * (v["unalloc100"][a]["mean"] / v["unalloc100"][b]["mean"] - 1.0) for v in held]
        )
        if len(rel) == 0:
            continue
        half = (
            float(stats.t.ppf(0.975, len(rel) - 1) * rel.std(ddof=1) / np.sqrt(len(rel)))
            if len(rel) > 1
            else 0.0
        )
        m = float(rel.mean())
        out[key] = {
            "mean": round(m, 3),
            "ci95_over_traces": [round(m - half, 3), round(m + half, 3)],
            "traces_above": int((rel > 0).sum()),
            "traces_below": int((rel < 0).sum()),
        }
    return out


def _summarise(
    names: list[str], seeds: list[int], done: dict[tuple[str, str, int], dict], train: set[str]
) -> dict[str, Any]:
    traces: dict[str, Any] = {}
    for t in names:
        per = {p: [done[(t, p, s)]["unalloc100"] for s in seeds] for p in POLICIES}
        bound = float(np.mean([done[(t, "bound", s)]["lower_bound_pct"] for s in seeds]))
        gap: dict[str, Any] = {}
        for p in DIAGNOSED:
            rows = [done[(t, p, s)] for s in seeds]
            failed = float(np.mean([r["failed_pct"] for r in rows]))
            causes = {
                c: round(float(np.mean([r["by_cause"][c] for r in rows])), 3)
                for c in rows[0]["by_cause"]
            }
            gap[p] = {
                "failed_pct": round(failed, 3),
                "by_cause": causes,
                "above_bound": round(failed - bound, 3),
            }
        short = t.removeprefix("openb_pod_list_")
        traces[short] = {
            "held_out": short not in train,
            "unalloc100": {
                p: {
                    "mean": round(float(np.mean(v)), 4),
                    "per_seed": dict(zip(map(str, seeds), v, strict=True)),
                }
                for p, v in per.items()
            },
            "ppo_minus_clone": _paired(per["ppo"], per["clone"]),
            "clone_minus_fgd": _paired(per["clone"], per["FGD"]),
            "ppo_minus_fgd": _paired(per["ppo"], per["FGD"]),
            "lower_bound_pct": round(bound, 3),
            "failed_request_vs_bound": gap,
        }
    held = {t: v for t, v in traces.items() if v["held_out"]}
    worse = sorted(t for t, v in held.items() if v["ppo_minus_clone"]["mean"] > 0.005)
    clone_above_fgd = sorted(t for t, v in traces.items() if v["clone_minus_fgd"]["mean"] > 0)
    ppo_above_fgd = sorted(t for t, v in traces.items() if v["ppo_minus_fgd"]["mean"] > 0)
    rel = [
        100.0 * v["ppo_minus_clone"]["mean"] / v["unalloc100"]["clone"]["mean"]
        for v in held.values()
    ]
    return {
        "release_rule": (
            "PPO ships only if its mean unalloc@100 is at or below the clone's on every held-out"
            " trace (PPO - clone <= 0 at 0.01-point precision); otherwise the clone ships"
            " (docs/research/2026-12-02-fgd-release-and-packing-gap.md)"
        ),
        "verdict": {
            "held_out_traces": len(held),
            "held_out_traces_ppo_above_clone": worse,
            "release": "ppo" if not worse else "clone",
            "mean_ppo_vs_clone_pct_held_out": round(float(np.mean(rel)), 3) if rel else None,
            "traces_clone_above_fgd": clone_above_fgd,
            "traces_ppo_above_fgd": ppo_above_fgd,
        },
        "pooled_over_held_out_traces": pooled(traces),
        "traces": traces,
    }


def _maybe_write(
    a: argparse.Namespace,
    argv: list[str] | None,
    names: list[str],
    seeds: list[int],
    complete: list[int],
    done: dict[tuple[str, str, int], dict],
    meta: dict[str, Any],
    ppo: Path,
    load0: list[float] | None,
    t0: float,
) -> list[int]:
    """Rewrite the result JSON when another seed has finished on every trace; the seeds complete."""
    model_dir = Path(a.model)
    train = set(meta.get("train_traces", []))
    new = [
        x
        for x in seeds
        if x not in complete and all((t, q, x) in done for t in names for q in (*POLICIES, "bound"))
    ]
    if not new:
        return complete
    complete = sorted(complete + new)
    out = {
        **provenance(__spec__.name, argv, load_start=load0),
        "model": f"{model_dir} ({meta.get('version')})",
        "ppo_policy": str(ppo.relative_to(REPO_ROOT) if ppo.is_relative_to(REPO_ROOT) else ppo),
        "stage_sha256_clone_ppo_teacher": _stage_key(model_dir, ppo),
        "mode": "fgd",
        "metric": "unallocated GPU % of capacity once 100 % of it has arrived (unalloc@100)",
        "train_traces": sorted(train),
        "seeds": complete,
        "seeds_requested": seeds,
        "wall_time_s": round(time.perf_counter() - t0, 1),
        **_summarise(names, complete, done, train),
    }
    Path(a.out).write_text(json.dumps(out, indent=1) + "\n")
    print(json.dumps(out["verdict"]), flush=True)
    return complete


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", default=str(DATA), help="folder of openb_pod_list_*.csv")
    ap.add_argument(
        "--traces", nargs="+", default=None, help="trace names (default: all in --data)"
    )
    ap.add_argument("--seeds", nargs="+", default=["42-51"])
    ap.add_argument("--model", default=str(REPO_ROOT / "models" / "placement"))
    ap.add_argument("--ppo", default=None, help="PPO policy file (default: see the module doc)")
    ap.add_argument("--workers", type=argtypes.positive_int, default=2)
    ap.add_argument("--out", type=argtypes.output_file, default=str(OUT))
    ap.add_argument(
        "--cache",
        default=None,
        help="JSON-lines file of finished runs: read to skip runs already done (same model, seeds"
        " are deterministic), appended as runs finish, so an interrupted audit resumes",
    )
    ap.add_argument(
        "--repool",
        metavar="JSON",
        default=None,
        help="only (re)compute 'pooled_over_held_out_traces' of an earlier output from its per-trace"
        " means, in place; runs nothing",
    )
    a = ap.parse_args(argv)
    if a.repool:
        res = json.loads(Path(a.repool).read_text())
        res["pooled_over_held_out_traces"] = pooled(res["traces"])
        Path(a.repool).write_text(json.dumps(res, indent=1) + "\n")
        print(json.dumps(res["pooled_over_held_out_traces"]))
        return
    data = Path(a.data)
    if not data.is_dir():
        raise DataError(f"--data {data}: not a folder (a folder of openb_pod_list_*.csv)")
    seeds = parse_seeds(a.seeds)
    model_dir = Path(a.model)
    ppo = Path(a.ppo) if a.ppo else model_dir / "ppo_policy.onnx"
    if not ppo.is_file():
        ppo = model_dir / "policy.onnx"
    meta = json.loads((model_dir / "metadata.json").read_text())
    names = (
        [f"openb_pod_list_{t}" for t in a.traces]
        if a.traces
        else sorted(p.stem for p in data.glob("openb_pod_list_*.csv"))
    )
    if not names:
        raise DataError(f"--data {data}: no openb_pod_list_*.csv in this folder")
    jobs = [
        (str(data / f"{t}.csv"), p, s, str(model_dir), str(ppo))
        for s in seeds
        for t in names
        for p in (*POLICIES, "bound")
    ]
    load0 = load_now()
    t0 = time.perf_counter()
    done: dict[tuple[str, str, int], dict] = {}
    cache = Path(a.cache) if a.cache else None
    key = _stage_key(model_dir, ppo)
    if cache and cache.is_file():
        for line in cache.read_text().splitlines():
            row = json.loads(line)
            if row["key"] == key:
                done[(row["trace"], row["policy"], row["seed"])] = row["result"]
    todo = [j for j in jobs if (Path(j[0]).stem, j[1], j[2]) not in done]
    complete = _maybe_write(a, argv, names, seeds, [], done, meta, ppo, load0, t0)
    with ProcessPoolExecutor(max_workers=a.workers) as pool:
        futs = {pool.submit(_job, j): j for j in todo}
        for fut in as_completed(futs):
            path, p, s, _, _ = futs[fut]
            done[(Path(path).stem, p, s)] = r = fut.result()
            if cache:
                row = {"key": key, "trace": Path(path).stem}
                with cache.open("a") as fh:
                    fh.write(json.dumps({**row, "policy": p, "seed": s, "result": r}) + "\n")
            print(f"[{len(done)}/{len(jobs)}] {Path(path).stem} {p} seed {s}", flush=True)
            complete = _maybe_write(a, argv, names, seeds, complete, done, meta, ppo, load0, t0)


if __name__ == "__main__":
    raise SystemExit(run_main(main, prog="benchmarks.placement.release_audit"))
