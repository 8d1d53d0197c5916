"""Shared plumbing of the host-stranding teacher probes in this folder (``placement_strand_probe``,
``placement_scarcity_probe``, ``dynamic_strand_probe``): run episode jobs in processes, turn
per-episode unallocated GPU % into gaps against FGD, and write the JSON with its provenance."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor

import numpy as np

from benchmarks.provenance import load_now, provenance

PACKAGES = ("scipy", "onnxruntime", "stable-baselines3", "sb3-contrib")

Job = tuple
"""``(scorer name, parameter, trace, seed)``: what a probe's job function receives."""


def run_jobs(
    job: Callable[[Job], tuple[str, str, int, float]], jobs: Sequence[Job], workers: int
) -> dict[tuple[str, str, int], float]:
    """``{(scorer, trace, seed): unallocated GPU %}`` of every job, run in ``workers`` processes."""
    with ProcessPoolExecutor(workers) as ex:
        return {(n, t, s): v for n, t, s, v in ex.map(job, jobs)}


def gap_report(
    got: dict[tuple[str, str, int], float],
    names: Sequence[str],
    traces: Sequence[str],
    seeds: Sequence[int],
    base: str | None = None,
) -> dict[str, dict]:
    """Per scorer: the mean over traces of (its mean / FGD's mean - 1) in %, the per-trace gaps,
    and, against ``base`` when given, the paired per-episode difference of gap (points) with its
    standard error and the better/worse/equal episode counts."""
    report: dict[str, dict] = {}
    for n in names:
        per_trace = {
            t: float(
                np.mean([got[(n, t, s)] for s in seeds])
                / np.mean([got[("FGD", t, s)] for s in seeds])
                - 1.0
            )
            * 100.0
            for t in traces
        }
        entry: dict[str, object] = {
            "gap_vs_fgd_pct": round(float(np.mean(list(per_trace.values()))), 2),
            "per_trace_gap_pct": {t: round(v, 2) for t, v in per_trace.items()},
        }
        if base and n not in ("FGD", base):
            d = np.array(
                [
                    (got[(n, t, s)] - got[(base, t, s)]) / got[("FGD", t, s)] * 100.0
                    for t in traces
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
    return report


def whole_episode_env(trace: str):  # noqa: ANN201 - GpuPlacementEnv
    """The fgd-mode env the placement probes score in: one trace, the openb nodes, K = 16, every
    pod placed by the scorer (no FGD prefix), stopped just past the 100 % metric window."""
    from fleetmind.data.openb import load_openb_nodes
    from fleetmind.envs.gpu_placement_env import GpuPlacementEnv

    return GpuPlacementEnv(
        traces=[trace],
        nodes=load_openb_nodes(None),
        n_candidates=16,
        fgd_until_pct=0.0,
        stop_arrived_pct=101.0,
    )


def probe_main(
    argv: list[str] | None,
    *,
    module: str,
    description: str,
    param: str,
    defaults: Sequence[float],
    job: Callable[[Job], tuple[str, str, int, float]],
    teacher: str,
    paired: bool,
) -> dict:
    """The command line of a placement probe: score FGD and the teacher at every ``--<param>s``
    value on ``--traces`` x ``--seeds`` (whole episodes, ``--workers`` processes), write the JSON
    to ``--out`` and print one line per scorer. With ``paired``, each value is also compared
    episode by episode with ``<param>=0``. Returns the JSON written."""
    import argparse
    import json
    import time
    from pathlib import Path

    from fleetmind.cli.sched import parse_seeds

    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("--traces", nargs="+", required=True)
    ap.add_argument("--seeds", nargs="+", required=True)
    ap.add_argument(f"--{param}s", nargs="+", type=float, default=list(defaults))
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--out", required=True)
    a = ap.parse_args(argv)
    seeds = parse_seeds(a.seeds)
    scorers: dict[str, float | None] = {"FGD": None}
    scorers.update({f"{param}={x:g}": x for x in getattr(a, f"{param}s")})
    jobs = [(n, x, t, s) for n, x in scorers.items() for t in a.traces for s in seeds]
    load0, t0 = load_now(), time.perf_counter()
    got = run_jobs(job, jobs, a.workers)
    base = f"{param}=0" if paired and f"{param}=0" in scorers else None
    report = gap_report(got, list(scorers), a.traces, seeds, base)
    out = {
        **provenance(module, argv, load_start=load0, packages=PACKAGES),
        "teacher": teacher,
        "traces": a.traces,
        "seeds": seeds,
        "wall_time_s": round(time.perf_counter() - t0, 1),
        "scorers": report,
        "episodes": {f"{n}|{t}|{s}": v for (n, t, s), v in got.items()},
    }
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(json.dumps(out, indent=1) + "\n")
    for n, e in report.items():
        extra = (
            f"  vs {base} {e['paired_vs_R_points']:+.2f} +- "
            f"{e['paired_vs_R_se'] or float('nan'):.2f}"
            if "paired_vs_R_points" in e
            else ""
        )
        print(f"{n:10s} gap vs FGD {e['gap_vs_fgd_pct']:+.2f} %  {e['per_trace_gap_pct']}{extra}")
    return out
