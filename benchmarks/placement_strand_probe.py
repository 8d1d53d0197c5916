"""Does a host-stranding signal help the released teacher? (issue 6, fgd mode, session 12 probe)

``benchmarks/placement_failure_causes.py`` found that FGD, BestFit and the agent tie once CPU and
memory requests are dropped, so the agent's gain over FGD is in how it handles the host resources
beside the GPUs. This probe adds one hand-made signal to the released linear teacher R
(``models/placement/teacher.json``) and scores whole episodes:

    score_k = R(x_k) - alpha * (stranded_after_k - stranded_before_k) / 1000

``stranded`` of a node is the idle GPU milli its free CPU and memory cannot serve at the workload's
typical host demand per GPU: ``max(0, idle - min(cpu_free / c, mem_free / m))``, where ``c`` and
``m`` are the GPU pods' total CPU and memory divided by their total GPU request (per milli-GPU) in
the episode's workload (``envs.candidates.stranded_gpu_milli``,
``GpuPlacementEnv.host_stranding_deltas``). The signal is computed from the environment's state,
outside the observation, so the released network cannot see it: this tests the teacher
(``rl.teacher.StrandPenaltyScorer``), not a model. The choice and confirmation runs used the
script's own first copy of this computation; the library version reproduces them exactly.

    .venv/bin/python benchmarks/placement_strand_probe.py --traces gpushare100 multigpu40 cpu037 \\
        cpu250 --seeds 80-83 --alphas 0 0.5 1 2 4 --workers 2 --out ...

``alpha = 0`` is R itself. Writes per-episode unallocated GPU % (FGD included as the reference),
each scorer's mean gap to FGD, and its paired difference to R with a standard error.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from training.cli_sched import parse_seeds  # noqa: E402

TEACHER = ROOT / "models" / "placement" / "teacher.json"


def _job(job: tuple[str, float | None, str, int]) -> tuple[str, str, int, float]:
    from data.openb import load_openb_nodes
    from envs.gpu_placement_env import GpuPlacementEnv
    from rl.ppo import greedy_rollout
    from rl.teacher import LinearScorer, StrandPenaltyScorer

    name, alpha, trace, seed = job
    env = GpuPlacementEnv(
        traces=[trace],
        nodes=load_openb_nodes(None),
        n_candidates=16,
        fgd_until_pct=0.0,
        stop_arrived_pct=101.0,
    )
    if alpha is None:
        act = lambda obs, mask: 0  # noqa: E731 - candidate 0 is FGD's choice
    else:
        act = StrandPenaltyScorer(LinearScorer.load(TEACHER), alpha).bind(env)
    info = greedy_rollout(env, act, trace, seed)
    return name, trace, seed, float(info["unallocated_gpu_pct_at_100"])


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--traces", nargs="+", required=True)
    ap.add_argument("--seeds", nargs="+", required=True)
    ap.add_argument("--alphas", nargs="+", type=float, default=[0.0, 0.5, 1.0, 2.0, 4.0])
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--out", required=True)
    a = ap.parse_args(argv)
    seeds = parse_seeds(a.seeds)
    scorers: dict[str, float | None] = {"FGD": None}
    scorers.update({f"alpha={x:g}": x for x in a.alphas})
    jobs = [(n, x, t, s) for n, x in scorers.items() for t in a.traces for s in seeds]
    load0, t0 = [round(x, 2) for x in os.getloadavg()], time.perf_counter()
    with ProcessPoolExecutor(a.workers) as ex:
        rows = list(ex.map(_job, jobs))
    got = {(n, t, s): v for n, t, s, v in rows}
    report: dict[str, dict] = {}
    base = "alpha=0" if "alpha=0" in scorers else None
    for n in scorers:
        per_trace = {
            t: float(
                np.mean([got[(n, t, s)] for s in seeds])
                / np.mean([got[("FGD", t, s)] for s in seeds])
                - 1.0
            )
            * 100.0
            for t in a.traces
        }
        entry: dict[str, object] = {
            "gap_vs_fgd_pct": round(float(np.mean(list(per_trace.values()))), 2),
            "per_trace_gap_pct": {t: round(v, 2) for t, v in per_trace.items()},
        }
        if base and n not in ("FGD", base):
            # paired per-episode difference of gap (points of % vs FGD) against R
            d = np.array(
                [
                    (got[(n, t, s)] - got[(base, t, s)]) / got[("FGD", t, s)] * 100.0
                    for t in a.traces
                    for s in seeds
                ]
            )
            entry["paired_vs_R_points"] = round(float(d.mean()), 3)
            entry["paired_vs_R_se"] = (
                round(float(d.std(ddof=1) / np.sqrt(d.size)), 3) if d.size > 1 else None
            )
            entry["better_worse_equal_vs_R"] = [
                int((d < 0).sum()),
                int((d > 0).sum()),
                int((d == 0).sum()),
            ]
        report[n] = entry
    out = {
        "command": "python benchmarks/placement_strand_probe.py "
        + " ".join(argv if argv is not None else sys.argv[1:]),
        "teacher": str(TEACHER.relative_to(ROOT)),
        "traces": a.traces,
        "seeds": seeds,
        "machine": {
            "platform": platform.platform(),
            "cpu_count": os.cpu_count(),
            "loadavg_start": load0,
            "loadavg_end": [round(x, 2) for x in os.getloadavg()],
        },
        "wall_time_s": round(time.perf_counter() - t0, 1),
        "scorers": report,
        "episodes": {f"{n}|{t}|{s}": v for (n, t, s), v in got.items()},
    }
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(json.dumps(out, indent=1) + "\n")
    for n, e in report.items():
        extra = (
            f"  vs R {e['paired_vs_R_points']:+.2f} +- {e['paired_vs_R_se'] or float('nan'):.2f}"
            if "paired_vs_R_points" in e
            else ""
        )
        print(f"{n:10s} gap vs FGD {e['gap_vs_fgd_pct']:+.2f} %{extra}")


if __name__ == "__main__":
    main()
