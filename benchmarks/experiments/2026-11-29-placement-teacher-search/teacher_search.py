"""Independent teacher searches and their validation (fgd mode: choosing a teacher).

Sub-commands, so that several searches can run side by side and be compared afterwards on one
validation set that neither searched on:

* ``search``: one cross-entropy search of a linear candidate scorer (``fleetmind.rl.teacher.cem_search``), the
  same search ``fleetmind sched train --teacher cem`` runs, without the cloning and PPO that follow.
  It writes ``<out>/teacher_best.json`` (the best vector scored), ``<out>/teacher_mean.json`` (the
  search distribution's final mean, never scored on the search episodes) and ``<out>/search.json``
  (command, episodes, history, wall time, load averages). After every generation it also
  rewrites ``teacher_best.json`` (best so far), ``teacher_mean.json`` (the distribution mean so
  far) and ``<out>/checkpoint.json`` (generations done, history, wall time), so that a search
  stopped early still leaves its best-so-far vector; the finished search overwrites both teachers
  with the same final values.
* ``head-search``: the same CEM over the released network's logit head (64 weights + bias) with
  its row MLP frozen (``head_search.py`` beside this script), scored on the same kind of episodes. It writes
  ``<out>/head_best.json``, ``<out>/head_mean.json`` (head scorer JSONs), ``checkpoint.json``
  after every generation and ``search.json``; ``--stop-at HH:MM`` (UTC) ends the search after the
  last generation that is expected to finish before then.
* ``validate``: whole greedy episodes of each given scorer (teacher JSON files) and of FGD on
  ``--traces`` x ``--seeds``, in ``--workers`` processes (a scorer is a linear teacher or a head
  scorer JSON). Writes per scorer the unallocated GPU % at
  100 % arrived per episode and the mean relative gap to FGD, the number the choice rule uses.

    python -m benchmarks.experiments.2026-11-29-placement-teacher-search.teacher_search search --traces default gpushare40 \
        multigpu20 --cem-seeds 1000 1001 --seed 10 --out runs/search_s10
    python -m benchmarks.experiments.2026-11-29-placement-teacher-search.teacher_search validate --scorer released=models/placement/teacher.json \
        --scorer s10=runs/search_s10/teacher_best.json --traces cpu037 cpu250 --seeds 43 44 \
        --out benchmarks/results/placement/placement_teacher_validation.json
"""

from __future__ import annotations

import argparse
import json
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np

from benchmarks.provenance import REPO_ROOT as ROOT
from benchmarks.provenance import command, load_now, provenance
from fleetmind.cli.runner import run_main
from fleetmind.errors import ConfigError


def _env(traces: list[str], fgd_until_pct: float):  # noqa: ANN202 - GpuPlacementEnv
    from fleetmind.data.openb import load_openb_nodes
    from fleetmind.envs.gpu_placement_env import GpuPlacementEnv

    return GpuPlacementEnv(
        traces=traces,
        nodes=load_openb_nodes(None),
        n_candidates=16,
        fgd_until_pct=fgd_until_pct,
        stop_arrived_pct=101.0,
    )


def _trace_seed(item: str) -> tuple[str, int]:
    trace, _, seed = item.partition(":")
    if not trace or not seed.isdigit():
        raise ConfigError(f"--episode wants TRACE:SEED, got {item!r}")
    return trace, int(seed)


def cmd_search(a: argparse.Namespace) -> None:
    from fleetmind.rl.teacher import (
        BLOCKS_3,
        BLOCKS_4,
        LinearScorer,
        episode_metric,
        worst_trace_objective,
    )
    from fleetmind.training.recipes.fgd import cem_search_with_bar

    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    blocks = BLOCKS_4 if a.multi_gpu_block else BLOCKS_3
    if a.episode:  # explicit TRACE:SEED pairs instead of the product
        episodes = [_trace_seed(e) for e in a.episode]
    else:
        episodes = [(t, s) for t in a.traces for s in a.cem_seeds]
    env = _env(sorted({t for t, _ in episodes}), a.fgd_until_pct)
    init = LinearScorer.load(a.init) if a.init else None
    worst = a.objective == "worst-trace"
    objective = worst_trace_objective([t for t, _ in episodes]) if worst else None
    load0, t0 = load_now(), time.perf_counter()
    k, f = env.n_candidates, env.n_cand_features

    def checkpoint(best, best_score: float, history: list, mu: np.ndarray) -> None:
        best.save(out / "teacher_best.json")
        LinearScorer(mu, k, f, blocks).save(out / "teacher_mean.json")
        state = {
            "command": command(__spec__.name),
            "generations_done": len(history),
            "generations": a.generations,
            "best_score": best_score,
            "history": history,
            "wall_s": time.perf_counter() - t0,
            "loadavg": load_now(),
        }
        (out / "checkpoint.json").write_text(json.dumps(state, indent=2))

    try:
        res = cem_search_with_bar(
            env,
            episodes,
            generations=a.generations,
            population=a.population,
            n_elite=a.n_elite,
            init_sd=a.init_sd,
            seed=a.seed,
            init=init,
            blocks=blocks,
            objective=objective,
            on_generation=checkpoint,
            desc=f"CEM {'worst-trace ' if worst else ''}search seed {a.seed}",
        )
    except ValueError as err:
        raise ConfigError(str(err)) from None
    wall = time.perf_counter() - t0
    res.best.save(out / "teacher_best.json")
    mean_scorer = LinearScorer(res.final_mean, k, f, blocks)
    mean_scorer.save(out / "teacher_mean.json")
    summary = {
        **provenance(__spec__.name, load_start=load0),
        "objective": "worst-trace: max over traces of the mean over the trace's episodes of "
        "(metric / FGD metric on the same episode - 1); lower is better"
        if worst
        else "mean metric over the episodes",
        "episodes": res.episodes,
        "fgd_score": res.fgd_score,
        "best_score": res.best_score,
        "init_score": res.init_score,
        "history": res.history,
        "wall_s": wall,
    }
    if worst:  # both objectives for FGD, the start, the best vector and the final mean
        assert objective is not None
        named = {"FGD": LinearScorer.fgd(k, f, blocks), "best": res.best, "mean": mean_scorer}
        if init is not None:
            named["init"] = init.with_blocks(blocks)
        per = {
            n: np.array([episode_metric(env, sc, t, w) for t, w in episodes])
            for n, sc in named.items()
        }
        summary["scores_on_search_episodes"] = {
            n: {
                "worst_trace": objective(m, per["FGD"]),
                "mean": float(np.mean(m)),
                "per_episode": m.tolist(),
            }
            for n, m in per.items()
        }
    (out / "search.json").write_text(json.dumps(summary, indent=2))
    print(json.dumps({k: summary[k] for k in ("fgd_score", "best_score", "wall_s")}))


def _val_job(job: tuple[str, str | None, str, int]) -> tuple[str, str, int, float]:
    import torch

    from fleetmind.rl.ppo import greedy_rollout

    from .head_search import load_scorer

    torch.set_num_threads(1)
    name, path, trace, seed = job
    env = _env([trace], 0.0)
    act = (lambda obs, mask: 0) if path is None else load_scorer(path)
    info = greedy_rollout(env, act, trace, seed)
    return name, trace, seed, float(info["unallocated_gpu_pct_at_100"])


def cmd_validate(a: argparse.Namespace) -> None:
    scorers: dict[str, str | None] = {"FGD": None}
    for item in a.scorer:
        name, _, path = item.partition("=")
        if not path or name in scorers:
            raise ConfigError(f"--scorer wants a unique NAME=PATH, got {item!r}")
        scorers[name] = path
    jobs = [(n, p, t, s) for n, p in scorers.items() for t in a.traces for s in a.seeds]
    load0, t0 = load_now(), time.perf_counter()
    with ProcessPoolExecutor(a.workers) as ex:
        rows = list(ex.map(_val_job, jobs))
    got = {(n, t, s): v for n, t, s, v in rows}
    report: dict[str, dict] = {}
    for n, p in scorers.items():
        per = {f"{t}/{s}": got[(n, t, s)] for t in a.traces for s in a.seeds}
        gaps = [
            (
                np.mean([got[(n, t, s)] for s in a.seeds])
                / np.mean([got[("FGD", t, s)] for s in a.seeds])
            )
            - 1.0
            for t in a.traces
        ]
        report[n] = {
            "path": p,
            "per_episode": per,
            "gap_vs_fgd_per_trace_pct": {t: 100 * g for t, g in zip(a.traces, gaps, strict=True)},
            "mean_gap_vs_fgd_pct": 100 * float(np.mean(gaps)),
        }
    doc = {
        "benchmark": "placement_teacher_validation",
        **provenance(__spec__.name, load_start=load0),
        "metric": "unallocated GPU % at 100 % arrived, whole greedy episodes; gap = mean over "
        "traces of (scorer mean / FGD mean - 1)",
        "traces": a.traces,
        "seeds": a.seeds,
        "scorers": report,
        "wall_s": time.perf_counter() - t0,
    }
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(json.dumps(doc, indent=2))
    for n, r in sorted(report.items(), key=lambda kv: kv[1]["mean_gap_vs_fgd_pct"]):
        per = " ".join(f"{t} {g:+.1f}" for t, g in r["gap_vs_fgd_per_trace_pct"].items())
        print(f"{n:>16}: {r['mean_gap_vs_fgd_pct']:+.2f} %   ({per})")


class _StopSearch(Exception):
    """Raised after a generation when the next one would end after ``--stop-at``."""


def _stop_time(stop_at: str | None) -> float | None:
    """``HH:MM`` (UTC, today) as a Unix time; ``None`` stays ``None``."""
    if not stop_at:
        return None
    import datetime as dt

    hh, mm = (int(x) for x in stop_at.split(":"))
    now = dt.datetime.now(dt.UTC)
    return now.replace(hour=hh, minute=mm, second=0, microsecond=0).timestamp()


def cmd_head_search(a: argparse.Namespace) -> None:
    """CEM over the logit head of a released network (``head_search.py`` beside this script); see the module doc."""
    import torch
    from tqdm import tqdm

    from fleetmind.rl.teacher import worst_trace_objective

    from .head_search import (
        HeadScorer,
        head_cem_search,
        mean_gap_objective,
    )

    torch.set_num_threads(1)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    if a.episode:
        episodes = [_trace_seed(e) for e in a.episode]
    else:
        episodes = [(t, s) for t in a.traces for s in a.cem_seeds]
    env = _env(sorted({t for t, _ in episodes}), a.fgd_until_pct)
    start = HeadScorer.from_model_dir(a.model)
    names = [t for t, _ in episodes]
    objective = {
        "mean-gap": mean_gap_objective(names),
        "worst-trace": worst_trace_objective(names),
        "mean": None,
    }[a.objective]
    hdim = start.hidden
    rms = float(np.linalg.norm(start.head[:hdim]) / np.sqrt(hdim))
    print(
        f"released head: |w| {np.linalg.norm(start.head[:hdim]):.4f}, rms(w) {rms:.4f}, "
        f"b {start.head[hdim]:.4f}; init sd {a.init_sd_rel} x rms = {a.init_sd_rel * rms:.4f}, "
        f"sd floor {a.sd_floor_rel * rms:.4f}",
        flush=True,
    )
    stop_t = _stop_time(a.stop_at)
    load0, t0 = load_now(), time.perf_counter()
    state: dict = {"history": [], "gen_times": []}

    def checkpoint(best, best_score: float, history: list, mu: np.ndarray) -> None:
        best.save(out / "head_best.json")
        start.with_head(mu).save(out / "head_mean.json")
        state["history"] = history
        state["gen_times"].append(time.perf_counter() - t0)
        doc = {
            "command": command(__spec__.name),
            "generations_done": len(history),
            "generations": a.generations,
            "best_score": best_score,
            "history": history,
            "wall_s": time.perf_counter() - t0,
            "gen_end_wall_s": state["gen_times"],
            "loadavg": load_now(),
        }
        (out / "checkpoint.json").write_text(json.dumps(doc, indent=2))
        print(f"generation {len(history)}: {json.dumps(history[-1])}", flush=True)
        if stop_t is not None and len(history) < a.generations:
            times = [0.0, *state["gen_times"]]
            last = times[-1] - times[-2]
            if time.time() + last > stop_t:
                raise _StopSearch

    bar = tqdm(total=2 + a.generations * a.population, desc=f"head CEM seed {a.seed}")
    stopped = False
    try:
        res = head_cem_search(
            env,
            start,
            episodes,
            generations=a.generations,
            population=a.population,
            n_elite=a.n_elite,
            init_sd_rel=a.init_sd_rel,
            sd_floor_rel=a.sd_floor_rel,
            seed=a.seed,
            objective=objective,
            progress=bar.update,
            on_generation=checkpoint,
            on_start=lambda f, i: state.update(fgd_metrics=f, init_metrics=i),
        )
    except _StopSearch:
        stopped, res = True, None
    except ValueError as err:
        raise ConfigError(str(err)) from None
    finally:
        bar.close()
    wall = time.perf_counter() - t0
    summary: dict = {
        **provenance(__spec__.name, load_start=load0),
        "model": a.model,
        "objective": a.objective,
        "episodes": [list(e) for e in episodes],
        "stopped_at_deadline": stopped,
        "wall_s": wall,
        "gen_end_wall_s": state["gen_times"],
        "released_head_rms": rms,
    }
    if res is not None:
        res.best.save(out / "head_best.json")
        res.final_mean.save(out / "head_mean.json")
        summary.update(
            fgd_score=res.fgd_score,
            init_score=res.init_score,
            best_score=res.best_score,
            history=res.history,
            init_sd=res.init_sd,
            fgd_metrics=res.fgd_metrics,
            init_metrics=res.init_metrics,
        )
    else:  # stopped: the scores of FGD and the start are still known
        summary["history"] = state["history"]
        if "fgd_metrics" in state:
            fgd_m, init_m = np.array(state["fgd_metrics"]), np.array(state["init_metrics"])
            obj = objective or (lambda m, _f: float(np.mean(m)))
            summary.update(
                fgd_score=obj(fgd_m, fgd_m),
                init_score=obj(init_m, fgd_m),
                best_score=state["history"][-1]["best_so_far"] if state["history"] else None,
                fgd_metrics=state["fgd_metrics"],
                init_metrics=state["init_metrics"],
            )
    (out / "search.json").write_text(json.dumps(summary, indent=2))
    print(
        json.dumps({k: summary.get(k) for k in ("fgd_score", "init_score", "best_score", "wall_s")})
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("search", help="one CEM teacher search")
    s.add_argument("--traces", nargs="+", default=[])
    s.add_argument(
        "--episode", nargs="+", default=[], help="TRACE:SEED pairs (override the product)"
    )
    s.add_argument("--cem-seeds", nargs="+", type=int, default=[1000, 1001])
    s.add_argument("--generations", type=int, default=8)
    s.add_argument("--population", type=int, default=12)
    s.add_argument("--n-elite", type=int, default=4)
    s.add_argument("--init-sd", type=float, default=0.5)
    s.add_argument("--init", default=None, help="start at this scorer JSON instead of FGD")
    s.add_argument("--multi-gpu-block", action="store_true")
    s.add_argument("--fgd-until-pct", type=float, default=80.0)
    s.add_argument("--seed", type=int, default=0)
    s.add_argument(
        "--objective",
        choices=["mean", "worst-trace"],
        default="mean",
        help="mean metric over episodes (default), or the worst trace's mean ratio to FGD",
    )
    s.add_argument("--out", required=True)
    h = sub.add_parser("head-search", help="CEM over a released network's logit head")
    h.add_argument("--model", default=str(ROOT / "models" / "placement"))
    h.add_argument("--traces", nargs="+", default=[])
    h.add_argument("--episode", nargs="+", default=[], help="TRACE:SEED pairs")
    h.add_argument("--cem-seeds", nargs="+", type=int, default=[1000, 1001])
    h.add_argument("--generations", type=int, default=8)
    h.add_argument("--population", type=int, default=12)
    h.add_argument("--n-elite", type=int, default=4)
    h.add_argument("--init-sd-rel", type=float, default=0.5, help="x rms of the released head")
    h.add_argument("--sd-floor-rel", type=float, default=0.05, help="x rms of the released head")
    h.add_argument("--fgd-until-pct", type=float, default=80.0)
    h.add_argument("--seed", type=int, default=0)
    h.add_argument("--objective", choices=["mean-gap", "worst-trace", "mean"], default="mean-gap")
    h.add_argument(
        "--stop-at",
        default=None,
        help="HH:MM UTC: no generation starts that would"
        " end after it (judged by the last generation's time)",
    )
    h.add_argument("--out", required=True)
    v = sub.add_parser("validate", help="whole-episode validation of scorers against FGD")
    v.add_argument(
        "--scorer",
        action="append",
        default=[],
        help="NAME=PATH to a teacher JSON or a head scorer JSON (head_search.py beside this script)",
    )
    v.add_argument("--traces", nargs="+", required=True)
    v.add_argument("--seeds", nargs="+", type=int, default=[43, 44])
    v.add_argument("--workers", type=int, default=2)
    v.add_argument("--out", required=True)
    a = ap.parse_args()
    {"search": cmd_search, "validate": cmd_validate, "head-search": cmd_head_search}[a.cmd](a)


if __name__ == "__main__":
    raise SystemExit(
        run_main(
            main,
            prog="benchmarks.experiments.2026-11-29-placement-teacher-search.teacher_search",
        )
    )
