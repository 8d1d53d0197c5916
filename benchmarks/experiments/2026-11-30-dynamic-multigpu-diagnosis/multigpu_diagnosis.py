"""Why do some dynamic-mode training runs fail on the multi-GPU traces? (2026-11-30)

Runs learned actors, their linear teachers and heuristics on the same job streams
(``fleetmind.rl.dynamic_eval`` protocol: 10 % node sample, 2,048 jobs, load 0.8) and keeps per-job and
per-decision records, then breaks the slowdown down:

* by job class (cpu-only, GPU-sharing, 1, 2, 4, 8 GPUs): mean slowdown, queueing and run part,
  share of the total excess slowdown;
* over time (the arrival window): GPU allocation, whole 8-GPU nodes fully idle, time the queue
  head is a multi-GPU job that cannot start, and the part of it where enough whole idle GPUs
  exist in the fleet but on different nodes (``fragmented``);
* per decision: does a GPU job of at most one GPU take a fully idle 8-GPU node ("breaks" it)
  while a feasible node with GPUs already in use existed; does the choice equal FGD's /
  LocalityAware's node; data locality and GPU speed of the choice.

Optional counterfactual (``--guard``): the actor with a mask guard that, for jobs of at most one
GPU, removes candidates that are fully idle 8-GPU nodes whenever another candidate remains.

Usage::

    OMP_NUM_THREADS=1 nice -n 19 python -m \
        benchmarks.experiments.2026-11-30-dynamic-multigpu-diagnosis.multigpu_diagnosis \
        --traces multigpu30 --seeds 42 43 44 45 --model released=models/placement-dynamic \
        --model seed2=<path> --model qf=<path> --guard \
        --out benchmarks/results/dynamic/ppo_dynamic_multigpu_diagnosis.json
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.provenance import RESULTS, load_now, provenance
from fleetmind.cli.runner import run_main
from fleetmind.data.openb import load_openb_trace
from fleetmind.envs.core import ANY_GPU_MODEL, GPU_MILLI
from fleetmind.envs.dynamic.policies import LocalityAwarePolicy, make_dynamic_policy
from fleetmind.envs.dynamic.sim import DynamicSim
from fleetmind.envs.multicluster_env import MultiClusterPlacementEnv
from fleetmind.rl.dynamic_eval import (
    EnvActorPolicy,
    actor_fn,
    job_stream,
    load_dynamic_actor,
    model_config,
)
from fleetmind.rl.dynamic_teacher import DynLinearScorer

CLASSES = ("cpu", "share", "1", "2", "4", "8")


def job_class(jobs: Any) -> np.ndarray:
    ng, gm = jobs.num_gpu, jobs.gpu_milli
    return np.where(ng == 0, "cpu", np.where((ng == 1) & (gm < GPU_MILLI), "share", ng.astype(str)))


class InstrSim(DynamicSim):
    """DynamicSim that integrates fleet/queue statistics over the arrival window."""

    def reset(self) -> None:
        super().reset()
        self.acc = {
            "t": 0.0,
            "whole8_idle": 0.0,
            "partial8": 0.0,
            "idle_gpus": 0.0,
            "head_multi_blocked": 0.0,
            "head_multi_fragmented": 0.0,
            "head_multi_fragmented_idle_gpus": 0.0,
            "head8_blocked": 0.0,
            "head8_fragmented": 0.0,
            "queue_nonempty": 0.0,
        }
        self._is8 = self.state.num_gpu == 8

    def _advance_clock(self, t: float) -> None:
        lo = max(self._last_t, 0.0)
        hi = min(t, float(self.jobs.arrival_s[-1]))
        if hi > lo:
            dt = hi - lo
            st = self.state
            idle_whole = st.gpu_idle == GPU_MILLI  # (N, 8) bool (padded GPUs are not idle)
            n_idle = (idle_whole & (np.arange(idle_whole.shape[1]) < st.num_gpu[:, None])).sum(1)
            a = self.acc
            a["t"] += dt
            a["whole8_idle"] += dt * float(np.sum(self._is8 & (n_idle == 8)))
            a["partial8"] += dt * float(np.sum(self._is8 & (n_idle > 0) & (n_idle < 8)))
            a["idle_gpus"] += dt * float(n_idle.sum())
            if self.queue:
                a["queue_nonempty"] += dt
                h = self.queue[0]
                pod = self._pods[h]
                if pod.num_gpu >= 2:
                    allowed = st.num_gpu > 0
                    if pod.gpu_spec_mask != ANY_GPU_MODEL:
                        allowed = allowed & ((st.model_bit & pod.gpu_spec_mask) != 0)
                    free = int(n_idle[allowed].sum())
                    a["head_multi_blocked"] += dt
                    if pod.num_gpu == 8:
                        a["head8_blocked"] += dt
                    if free >= pod.num_gpu:
                        a["head_multi_fragmented"] += dt
                        a["head_multi_fragmented_idle_gpus"] += dt * free
                        if pod.num_gpu == 8:
                            a["head8_fragmented"] += dt
        super()._advance_clock(t)


class Recorder:
    """Wraps a policy; records, per decision, what the choice does to whole 8-GPU nodes."""

    def __init__(self, inner: Any, trace: Any) -> None:
        self.inner = inner
        self.name = getattr(inner, "name", "policy")
        self.la = LocalityAwarePolicy(trace=trace)
        self.rows: list[tuple] = []

    def reset(self, sim: DynamicSim) -> None:
        if hasattr(self.inner, "reset"):
            self.inner.reset(sim)
        self.la.reset(sim)

    def select(self, sim: DynamicSim, j: int) -> tuple[int, np.ndarray | None]:
        st = sim.state
        pod = sim.pod(j)
        la_node, _ = self.la.select(sim, j)
        node, gpus = self.inner.select(sim, j)
        feas = np.flatnonzero(sim.feasible(j))
        n_idle = (st.gpu_idle == GPU_MILLI).sum(1)
        full = (n_idle >= st.num_gpu) & (st.num_gpu == 8)
        breaks = bool(pod.num_gpu == 1 and full[node])
        alt = bool(np.any(~full[feas] & (st.num_gpu[feas] > 0))) if pod.num_gpu == 1 else False
        self.rows.append(
            (
                j,
                int(pod.num_gpu),
                int(pod.gpu_milli),
                int(node),
                breaks,
                alt,
                int(node) == int(la_node),
                int(sim.fleet.cluster[node]) == int(sim.jobs.data_home[j]),
                float(sim.fleet.speed[node]),
                int(st.num_gpu[node]),
                float(sim.now),
                int(n_idle[node]),
                int(n_idle[feas][(st.num_gpu[feas] == 8)].min())
                if np.any(st.num_gpu[feas] == 8)
                else -1,
            )
        )
        return node, gpus


class GuardedActor(EnvActorPolicy):
    """Actor whose mask drops fully idle 8-GPU nodes for jobs of <= 1 GPU (if any other remains).

    ``mode="always"``: on every such decision; ``mode="queued"``: only while a job of >= 2 GPUs
    is among the first ``1 + backfill_depth`` queued jobs (the scheduler's window);
    ``mode="consolidate"``: on every such decision, but only when a partly used 8-GPU node
    remains among the candidates (other node types stay allowed only if one does too).
    """

    def __init__(self, act: Any, env: Any, name: str, mode: str = "always") -> None:
        super().__init__(act, env, name)
        self.mode = mode

    def _active(self, sim: DynamicSim, j: int) -> bool:
        if self.mode == "always":
            return True
        win = sim.queue[: 1 + sim.backfill_depth]
        return any(q != j and sim.jobs.num_gpu[q] >= 2 for q in win)

    def select(self, sim: DynamicSim, j: int) -> tuple[int, np.ndarray | None]:
        obs = self.env.observe(j)
        mask = self.env.action_masks().copy()
        pod = sim.pod(j)
        nodes, gpus = self.env.candidates()
        if pod.num_gpu == 1 and self._active(sim, j):
            st = sim.state
            n_idle = (st.gpu_idle[nodes] == GPU_MILLI).sum(1)
            full = (st.num_gpu[nodes] == 8) & (n_idle >= 8)
            keep = mask & ~full
            if self.mode == "consolidate":
                partial8 = (st.num_gpu[nodes] == 8) & ~full
                if (keep & partial8).any():
                    mask = keep
            elif keep.any():
                mask = keep
        a = int(self.act(obs, mask))
        return int(nodes[a]), gpus[a]


def teacher_actor(path: Path):
    sc = DynLinearScorer.load(path)

    def act(obs: np.ndarray, mask: np.ndarray) -> int:
        s = sc.scores(obs)
        s = np.where(mask, s, -np.inf)
        return int(np.argmax(s))

    return act


def summarise(sim: InstrSim, rec: Recorder) -> dict[str, Any]:
    jb = sim.jobs
    started = np.isfinite(sim.start_s)
    cls = job_class(jb)
    sd = (sim.end_s - jb.arrival_s) / jb.ideal_s
    qd = (sim.start_s - jb.arrival_s) / jb.ideal_s
    rd = (sim.run_s + sim.data_s) / jb.ideal_s
    n = int(started.sum())
    out: dict[str, Any] = {"metrics": sim.metrics(), "by_class": {}}
    excess_tot = float(np.sum(sd[started] - 1.0))
    for c in CLASSES:
        m = started & (cls == c)
        if not m.any():
            continue
        out["by_class"][c] = {
            "n": int(m.sum()),
            "mean_slowdown": float(sd[m].mean()),
            "mean_queue_over_ideal": float(qd[m].mean()),
            "mean_run_over_ideal": float(rd[m].mean()),
            "mean_queue_s": float((sim.start_s - jb.arrival_s)[m].mean()),
            "excess_share": float(np.sum(sd[m] - 1.0) / excess_tot),
            "contrib_to_mean_slowdown": float(np.sum(sd[m] - 1.0) / n),
        }
    a = sim.acc
    T = max(a["t"], 1e-9)
    out["time"] = {
        "whole8_idle_nodes_avg": a["whole8_idle"] / T,
        "idle_gpus_avg": a["idle_gpus"] / T,
        "partial8_nodes_avg": a["partial8"] / T,
        "queue_nonempty_frac": a["queue_nonempty"] / T,
        "head_multi_blocked_frac": a["head_multi_blocked"] / T,
        "head_multi_fragmented_frac": a["head_multi_fragmented"] / T,
        "head8_blocked_frac": a["head8_blocked"] / T,
        "head8_fragmented_frac": a["head8_fragmented"] / T,
        "idle_gpus_while_fragmented": a["head_multi_fragmented_idle_gpus"]
        / max(a["head_multi_fragmented"], 1e-9),
    }
    r = rec.rows
    ng = np.array([x[1] for x in r])
    gm = np.array([x[2] for x in r])
    brk = np.array([x[4] for x in r])
    alt = np.array([x[5] for x in r])
    la = np.array([x[6] for x in r])
    loc = np.array([x[7] for x in r])
    spd = np.array([x[8] for x in r])
    ngn = np.array([x[9] for x in r])
    idle_ch = np.array([x[11] for x in r])
    tight8 = np.array([x[12] for x in r])
    one = ng == 1
    on8 = one & (ngn == 8)
    multi = ng >= 2
    out["decisions"] = {
        "n": len(r),
        "le1gpu_n": int(one.sum()),
        "le1gpu_breaks_whole8": int(brk.sum()),
        "le1gpu_breaks_whole8_avoidable": int((brk & alt).sum()),
        "le1gpu_breaks_frac": float(brk[one].mean()) if one.any() else float("nan"),
        "le1gpu_on_8gpu_node_frac": float((ngn[one] == 8).mean()) if one.any() else float("nan"),
        "share_le1gpu_same_as_LA": float(la[one].mean()) if one.any() else float("nan"),
        "gpu24_on_8gpu_node_frac": float((ngn[(ng == 2) | (ng == 4)] == 8).mean())
        if np.any((ng == 2) | (ng == 4))
        else float("nan"),
        "gpu24_breaks_whole8": int(np.sum(((ng == 2) | (ng == 4)) & (idle_ch == 8) & (ngn == 8))),
        "multi_same_as_LA": float(la[multi].mean()) if multi.any() else float("nan"),
        "all_same_as_LA": float(la.mean()),
        "le1gpu_data_local": float(loc[one].mean()) if one.any() else float("nan"),
        "multi_data_local": float(loc[multi].mean()) if multi.any() else float("nan"),
        "le1gpu_mean_speed": float(spd[one].mean()) if one.any() else float("nan"),
        "le1gpu_on8_chosen_idle_gpus": float(idle_ch[on8].mean()) if on8.any() else float("nan"),
        "le1gpu_on8_tightest_idle_gpus": float(tight8[on8].mean()) if on8.any() else float("nan"),
        "le1gpu_on8_not_tightest_frac": float((idle_ch[on8] > tight8[on8]).mean())
        if on8.any()
        else float("nan"),
        "sharing_frac_of_le1gpu": float((gm[one] < GPU_MILLI).mean()) if one.any() else 0.0,
    }
    return out


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--traces", nargs="+", default=["multigpu30"])
    ap.add_argument("--seeds", nargs="+", type=int, default=[42, 43, 44, 45])
    ap.add_argument("--model", action="append", default=[], help="label=model folder")
    ap.add_argument(
        "--teacher",
        action="append",
        default=[],
        help="label=teacher.json: a linear scorer run on its own (its F picks queue_features)",
    )
    ap.add_argument("--heuristics", nargs="*", default=["LocalityAware", "FGD"])
    ap.add_argument("--no-teachers", action="store_true")
    ap.add_argument("--guard", action="store_true", help="also run each actor with the guard")
    ap.add_argument(
        "--guard-consolidate",
        action="store_true",
        help="also run each actor with the guard active only when a partly used 8-GPU node "
        "is a candidate",
    )
    ap.add_argument(
        "--guard-queued",
        action="store_true",
        help="also run each actor with the guard active only while a multi-GPU job is queued",
    )
    ap.add_argument(
        "--out", default=str(RESULTS / "dynamic" / "ppo_dynamic_multigpu_diagnosis.json")
    )
    args = ap.parse_args()

    t_start = time.time()
    models = {}
    for spec in args.model:
        lab, path = spec.split("=", 1)
        p = Path(path)
        cfg = model_config(p)
        models[lab] = (p, cfg, actor_fn(load_dynamic_actor(p, cfg.n_candidates)))

    teachers = {}
    for spec in args.teacher:
        lab, path = spec.split("=", 1)
        sc = DynLinearScorer.load(path)
        teachers[lab] = (Path(path), sc.n_cand_features > 14)

    result: dict[str, Any] = {
        **provenance(__spec__.name, load_start=load_now()),
        "models": {k: str(v[0]) for k, v in models.items()},
        "teachers": {k: str(v[0]) for k, v in teachers.items()},
        "seeds": args.seeds,
        "runs": {},
    }
    for trace in args.traces:
        tr = load_openb_trace(trace)
        envs: dict[bool, MultiClusterPlacementEnv] = {}
        for _lab, (_, cfg, _) in models.items():
            envs.setdefault(cfg.queue_features, MultiClusterPlacementEnv(**cfg.env_kwargs(tr)))
        from fleetmind.rl.dynamic_eval import DynEvalConfig

        for _, qf in teachers.values():
            cfg = DynEvalConfig(queue_features=qf)
            envs.setdefault(qf, MultiClusterPlacementEnv(**cfg.env_kwargs(tr)))
        base = next(iter(envs.values())) if envs else None
        if base is None:
            base = MultiClusterPlacementEnv(**DynEvalConfig().env_kwargs(tr))
        result["runs"][trace] = {}
        for seed in args.seeds:
            jobs, prio = job_stream(base, seed)
            for e in envs.values():  # same stream in every env (the option only adds features)
                j2, p2 = job_stream(e, seed)
                assert np.array_equal(j2.arrival_s, jobs.arrival_s) and np.array_equal(p2, prio)
            pols: list[tuple[str, Any]] = []
            for h in args.heuristics:
                pols.append((h, make_dynamic_policy(h, tr, base.fleet, seed)))
            for lab, (p, cfg, act) in models.items():
                env = envs[cfg.queue_features]
                pols.append((lab, EnvActorPolicy(act, env, lab)))
                if args.guard:
                    pols.append((lab + "+guard", GuardedActor(act, env, lab + "+guard")))
                if args.guard_consolidate:
                    g = GuardedActor(act, env, lab + "+guardc", mode="consolidate")
                    pols.append((lab + "+guardc", g))
                if args.guard_queued:
                    g = GuardedActor(act, env, lab + "+guardq", mode="queued")
                    pols.append((lab + "+guardq", g))
                if not args.no_teachers and (p / "teacher.json").is_file():
                    pols.append(
                        (lab + ":teacher", EnvActorPolicy(teacher_actor(p / "teacher.json"), env))
                    )
            for lab, (tp, qf) in teachers.items():
                pols.append((lab, EnvActorPolicy(teacher_actor(tp), envs[qf], lab)))
            for name, pol in pols:
                t0 = time.time()
                sim = InstrSim(base.fleet, jobs, backfill_depth=base.backfill_depth, priority=prio)
                rec = Recorder(pol, tr)
                sim.run(rec)
                s = summarise(sim, rec)
                s["wall_s"] = time.time() - t0
                result["runs"][trace].setdefault(name, {})[str(seed)] = s
                print(
                    f"{trace} seed {seed} {name:22s} slowdown {s['metrics']['mean_slowdown']:.3f} "
                    f"8gpu {s['by_class'].get('8', {}).get('mean_slowdown', float('nan')):.2f} "
                    f"breaks {s['decisions']['le1gpu_breaks_whole8']} "
                    f"whole8 {s['time']['whole8_idle_nodes_avg']:.1f} "
                    f"frag {s['time']['head_multi_fragmented_frac']:.3f} ({s['wall_s']:.1f}s)",
                    flush=True,
                )
    result["loadavg_end"] = load_now()
    result["wall_s"] = time.time() - t_start
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=1))
    print("wrote", args.out)


if __name__ == "__main__":
    raise SystemExit(
        run_main(
            main,
            prog="benchmarks.experiments.2026-11-30-dynamic-multigpu-diagnosis.multigpu_diagnosis",
        )
    )
