"""The fgd-mode PPO training recipe, tracked in MLflow (CleanRL-style script).

    fleetmind sched train --trace default [--trace cpu050 ...] --mode fgd [--timesteps N] [--seed S]
                          [--n-envs E] [--out runs/ppo] [--release] [--json P]

What a run does:

1. Seeds everything (Python, NumPy, torch, env and action-space seeds).
2. Imitation warm start: rolls out a teacher on the training traces and clones it into the
   candidate scorer (actor cross-entropy + critic regression on the teacher's discounted returns;
   see :mod:`fleetmind.rl.ppo`). The teacher is FGD (candidate 0 of every observation; ``--teacher fgd``), a
   linear candidate scorer searched first by the cross-entropy method (``--teacher cem``; see
   :mod:`fleetmind.rl.teacher`), or a saved scorer JSON.
3. MaskablePPO on ``SubprocVecEnv`` envs (``fleetmind/GpuPlacement-v0``; episodes start after an FGD
   prefix up to ``fgd_until_pct`` of capacity and stop at ``stop_arrived_pct``, from a pool of
   workload seeds), with SB3 callbacks: MLflow logging (``train/*`` episode metrics, ``losses/*``),
   periodic greedy evaluation against FGD and BestFit (``eval/*``) that keeps the best policy
   (the cloned one included), and checkpoints.
4. Exports the best policy (``policy.onnx``, ``policy.pt``, ``metadata.json``, ``ppo.zip``,
   ``model_card.md``) to ``<out>/<run name>/model`` (and to ``models/placement/`` with ``--release``),
   logs it to MLflow as a pyfunc model, registers ``fleetmind-placement`` and moves the ``champion``
   alias to the new version when its evaluation beats the current champion's
   (:mod:`fleetmind.training.recipes.tracking`).
"""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Mapping
from dataclasses import asdict
from pathlib import Path
from typing import Any

import mlflow
import numpy as np
from tqdm import tqdm

from fleetmind.data.errors import ConfigError
from fleetmind.data.openb import load_openb_nodes, load_openb_trace
from fleetmind.envs.candidates import N_CAND_FEATURES, N_PENALTY_FEATURES, PenaltyContext
from fleetmind.envs.fgd_mode import run_fgd
from fleetmind.envs.gpu_placement_env import GpuPlacementEnv
from fleetmind.envs.policies import TypicalPods
from fleetmind.envs.policies.fgd import typical_to_json
from fleetmind.rl.callbacks import MlflowEvalCallback
from fleetmind.rl.export import actor_from_model, export_policy, load_sb3_model, save_onnx
from fleetmind.rl.policy import count_parameters
from fleetmind.rl.policy_adapter import RELEASED_DIR
from fleetmind.rl.ppo import (
    behaviour_clone,
    collect_teacher,
    evaluate_greedy,
    make_model,
    make_vec_env,
)
from fleetmind.rl.teacher import (
    BLOCKS_3,
    BLOCKS_4,
    LinearScorer,
    StrandPenaltyScorer,
    cem_search,
    load_teacher,
)
from fleetmind.training.recipes.common import (
    check_loss_weights,
    hyperparams,
    log_cem_search,
    seed_everything,
    write_model_card,
)
from fleetmind.training.recipes.settings import FgdArgs
from fleetmind.training.recipes.tracking import log_placement_pyfunc, run_dirs, tracked_run


def cem_search_with_bar(
    env: Any,
    episodes: list[tuple[str, int]],
    *,
    init: Any = None,
    desc: str = "CEM teacher search",
    show: bool = True,
    **search_kwargs: Any,
) -> Any:
    """:func:`fleetmind.rl.teacher.cem_search` with a tqdm bar counted in episodes (one tick per scored
    episode: ``(generations x population + 1 [+ 1 with init]) x len(episodes)`` in all).
    ``search_kwargs`` go to ``cem_search`` (generations, population, n_elite, init_sd, seed,
    blocks). Returns its ``CEMResult``."""
    n_vectors = search_kwargs["generations"] * search_kwargs["population"] + 1 + (init is not None)
    bar = tqdm(total=n_vectors * len(episodes), desc=desc, unit="ep", disable=not show)
    try:
        return cem_search(
            env,
            episodes,
            progress=lambda n: bar.update(n * len(episodes)),
            init=init,
            **search_kwargs,
        )
    finally:
        bar.close()


def _make_teacher(
    args: FgdArgs, env_kwargs: dict[str, Any], run_dir: Path, summary: dict[str, Any]
) -> Any:
    """The warm-start teacher: ``None`` for FGD (candidate 0), else a :class:`fleetmind.rl.teacher.LinearScorer`
    or :class:`fleetmind.rl.teacher.StrandPenaltyScorer` loaded from ``args.teacher``, or a linear scorer
    searched by CEM (logged to MLflow). Either way it is saved as ``<run>/model/teacher.json``."""

    if args.teacher == "fgd":
        return None
    if args.teacher != "cem":
        scorer = load_teacher(args.teacher)
        if scorer.n_candidates != args.n_candidates:
            raise ConfigError(
                f"teacher {args.teacher} has K={scorer.n_candidates}, the run uses K={args.n_candidates}"
            )
        if scorer.n_cand_features != N_CAND_FEATURES:
            raise ConfigError(
                f"teacher {args.teacher} has F={scorer.n_cand_features} candidate features,"
                f" GpuPlacement-v0 has F={N_CAND_FEATURES}"
            )
        # the release carries its teacher: a strand teacher as teacher_strand.json, with its linear
        # base as teacher.json (the layout of models/placement/ since 2026-11-30)
        if isinstance(scorer, StrandPenaltyScorer):
            scorer.save(run_dir / "model" / "teacher_strand.json")
            scorer.base.save(run_dir / "model" / "teacher.json")
        else:
            scorer.save(run_dir / "model" / "teacher.json")
        # saved at F = 18 (it reads nothing else); widened to see the penalty columns as weight 0
        return scorer.widen(_n_features(args)) if args.penalty_features else scorer
    if args.cem_generations < 1 or args.cem_population < 2:
        raise ConfigError("--cem-generations must be >= 1 and --cem-population >= 2")
    if not args.cem_init_sd > 0:
        raise ConfigError(f"--cem-init-sd must be > 0, got {args.cem_init_sd}")
    blocks = BLOCKS_4 if args.cem_multi_gpu_block else BLOCKS_3
    init = None
    if args.cem_init is not None:
        init = LinearScorer.load(args.cem_init)
        if args.penalty_features and init.n_cand_features == N_CAND_FEATURES:
            init = init.widen(_n_features(args))
        if (init.n_candidates, init.n_cand_features) != (args.n_candidates, _n_features(args)):
            raise ConfigError(
                f"--cem-init {args.cem_init} has K={init.n_candidates},"
                f" F={init.n_cand_features}; the run uses K={args.n_candidates},"
                f" F={_n_features(args)}"
            )
        if init.blocks != blocks[: len(init.blocks)]:
            raise ConfigError(
                f"--cem-init {args.cem_init} has blocks {list(init.blocks)}; the search uses"
                f" {list(blocks)} (add --cem-multi-gpu-block)"
            )
    env = GpuPlacementEnv(**{**env_kwargs, "workload_seeds": None})
    episodes = [(t, s) for t in env.trace_names() for s in args.cem_seeds]
    if len(episodes) == 1:  # one trace and one seed would overfit one episode
        episodes.append((episodes[0][0], args.cem_seeds[0] + 1))
    res = cem_search_with_bar(
        env,
        episodes,
        generations=args.cem_generations,
        population=args.cem_population,
        n_elite=max(1, min(4, args.cem_population // 3)),  # 4 of the default 14
        init_sd=args.cem_init_sd,
        seed=args.seed,
        init=init,
        blocks=blocks,
        desc="CEM teacher search",
        show=args.progress,
    )
    log_cem_search(res, run_dir)
    summary["cem"] = {
        "fgd": res.fgd_score,
        "init": args.cem_init,
        "init_score": res.init_score,
        "blocks": list(blocks),
        "teacher": res.best_score,
        "episodes": res.episodes,
        "history": res.history,
    }
    return res.best


def episode_metrics(info: Mapping[str, Any]) -> dict[str, float]:
    """MLflow metrics of one finished training episode (a ``VecMonitor`` info dict)."""
    ep = info["episode"]
    metrics = {"train/episode_return": float(ep["r"]), "train/episode_length": float(ep["l"])}
    for k in ("unallocated_gpu_pct_at_100", "n_failed"):
        if k in info and np.isfinite(info[k]):
            metrics[f"train/{k}"] = float(info[k])
    return metrics


def _n_features(args: FgdArgs) -> int:
    return N_CAND_FEATURES + (N_PENALTY_FEATURES if args.penalty_features else 0)


def run(args: FgdArgs) -> dict[str, Any]:
    """Warm start, train, evaluate, export, log and register; returns the JSON summary."""
    # every trace read before anything is written (MLflow run, run folder): a typo is one line
    for t in dict.fromkeys([*args.traces, *args.eval_traces]):
        load_openb_trace(t)
    if args.timesteps < 0 or args.n_envs < 1:
        raise ConfigError("--timesteps must be >= 0 and --n-envs >= 1")
    check_loss_weights(args.bc_value_coef, args.vf_coef)
    seed_everything(args.seed, args.threads)
    t_start = time.perf_counter()

    nodes = load_openb_nodes(args.nodes)
    env_kwargs = {
        "traces": list(args.traces),
        "nodes": nodes,
        "n_candidates": args.n_candidates,
        "fgd_until_pct": args.fgd_until_pct,
        "stop_arrived_pct": args.stop_arrived_pct,
        "workload_seeds": list(args.workload_seeds),
        "reward": args.reward,
        "penalty_features": args.penalty_features,
    }
    hp = hyperparams(args)
    run_name, run_dir, ckpt_dir = run_dirs(args, "GpuPlacement-v0")
    summary: dict[str, Any] = {"run_name": run_name}

    eval_env = GpuPlacementEnv(
        traces=list(args.eval_traces),
        nodes=nodes,
        n_candidates=args.n_candidates,
        fgd_until_pct=args.eval_fgd_until_pct,
        penalty_features=args.penalty_features,
    )

    def evaluate(act: Any) -> dict[str, dict[int, float]]:
        return evaluate_greedy(eval_env, act, args.eval_traces, args.eval_seeds)

    with tracked_run(args, run_name, summary):
        # ------------------------------------------------------------------ references
        refs: dict[str, float] = {}
        # FGD = always candidate 0: identical to envs.fgd_mode.run_fgd(trace, "FGD", seed)
        fgd_res = evaluate(lambda obs, mask: 0)
        refs["FGD"] = float(np.mean([v for per in fgd_res.values() for v in per.values()]))
        refs["BestFit"] = float(
            np.mean(
                [
                    run_fgd(t, "BestFit", s, nodes).unallocated[100]
                    for t in args.eval_traces
                    for s in args.eval_seeds
                ]
            )
        )
        for pol, val in refs.items():
            mlflow.log_metric(f"eval/{pol.lower()}_unalloc100", val, step=0)
        summary["eval_reference"] = refs

        # ------------------------------------------------------------------ model + warm start
        venv = make_vec_env(args.n_envs, args.seed, env_kwargs)
        model = make_model(venv, hp, args.seed)
        mlflow.log_param("n_parameters", count_parameters(model.policy))
        teacher = _make_teacher(args, env_kwargs, run_dir, summary)
        if args.bc_episodes > 0:
            teach_env = GpuPlacementEnv(
                **{
                    **env_kwargs,
                    "workload_seeds": list(args.workload_seeds),
                    "fgd_until_pct": args.bc_fgd_until_pct,
                }
            )
            if hasattr(teacher, "bind"):  # reads the env's state (StrandPenaltyScorer)
                teacher.bind(teach_env)
            bar = tqdm(
                desc=f"{args.teacher} demonstrations", unit="step", disable=not args.progress
            )
            data = collect_teacher(
                teach_env,
                args.bc_episodes,
                args.seed,
                hp.gamma,
                teacher=teacher,
                progress=bar.update,
            )
            bar.close()
            bc = behaviour_clone(
                model.policy,
                data,
                epochs=args.bc_epochs,
                seed=args.seed,
                target_ce=args.bc_target_ce,
                value_coef=args.bc_value_coef,
            )
            mlflow.log_metrics(bc, step=0)
            summary["bc"] = {**bc, "samples": int(len(data.actions))}
        # the warm start before any PPO update ships as clone.onnx (policy name "clone")
        save_onnx(actor_from_model(model), run_dir / "model" / "clone.onnx")
        if teacher is not None:
            if hasattr(teacher, "bind"):
                teacher.bind(eval_env)
            t_res = evaluate(teacher)
            t_val = float(np.mean([v for per in t_res.values() for v in per.values()]))
            mlflow.log_metric("eval/teacher_unalloc100", t_val, step=0)
            refs["teacher"] = t_val

        # ------------------------------------------------------------------ callbacks
        state: dict[str, Any] = {"best": float("inf"), "best_step": -1, "history": []}

        def do_eval(step: int) -> float:
            actor = actor_from_model(model)
            res = evaluate(actor.predict)
            val = float(np.mean([v for per in res.values() for v in per.values()]))
            mlflow.log_metric("eval/ppo_unalloc100", val, step=step)
            mlflow.log_metric("eval/gap_vs_fgd", val - refs["FGD"], step=step)
            state["history"].append({"step": step, "unalloc100": val})
            if val < state["best"]:
                state["best"], state["best_step"] = val, step
                model.save(ckpt_dir / "best.zip")
            return val

        do_eval(0)  # the cloned policy is a candidate for "best" too
        t_ppo = time.perf_counter()
        if args.timesteps > 0:
            model.learn(
                total_timesteps=args.timesteps,
                callback=MlflowEvalCallback(
                    do_eval,
                    args.eval_freq,
                    episode_metrics,
                    max_minutes=args.max_minutes,
                    checkpoint_dir=ckpt_dir,
                    log_losses=True,
                ),
                progress_bar=args.progress,
            )
            do_eval(model.num_timesteps)
            # the last policy too, whichever checkpoint the evaluation keeps (policy name: a path)
            save_onnx(actor_from_model(model), run_dir / "model" / "final.onnx")
        ppo_seconds = time.perf_counter() - t_ppo
        venv.close()

        # ------------------------------------------------------------------ export best
        best = load_sb3_model(ckpt_dir / "best.zip")
        model_dir = run_dir / "model"
        paths = export_policy(best, model_dir)
        best.save(model_dir / "ppo.zip")
        wall = time.perf_counter() - t_start
        typical = TypicalPods.from_trace(eval_env._trace(0))  # noqa: SLF001
        meta = {
            "format": "fleetmind-placement/1",
            "version": run_name,
            "n_candidates": args.n_candidates,
            "mode": args.mode,
            "train_traces": list(args.traces),
            "typical_pods": typical_to_json(typical),
            "typical_pods_trace": eval_env._trace(0).name,  # noqa: SLF001
        }
        if args.penalty_features:
            # the adapter rebuilds the features from the evaluated trace; the service, which has
            # no trace, uses the statistics of the typical-pods trace stored here
            meta["builder"] = {"penalty_features": True}
            meta["penalty_context"] = PenaltyContext.from_trace(
                eval_env._trace(0),  # noqa: SLF001
                eval_env.state,
            ).to_json()
        (model_dir / "metadata.json").write_text(json.dumps(meta, indent=1) + "\n")
        card = {
            "run": run_name,
            "command": " ".join(
                [f"--trace {t}" for t in args.traces]
                + [
                    f"--mode {args.mode} --timesteps {args.timesteps} --seed {args.seed} --n-envs {args.n_envs}"
                    f" --eval-freq {args.eval_freq} --eval-fgd-until-pct {args.eval_fgd_until_pct:g}"
                    + "".join(f" --eval-trace {t}" for t in args.eval_traces)
                    + f" --eval-seeds {' '.join(map(str, args.eval_seeds))}"
                    f" --teacher {args.teacher} --bc-episodes {args.bc_episodes}"
                    f" --bc-target-ce {args.bc_target_ce:g} --bc-fgd-until-pct {args.bc_fgd_until_pct:g}"
                    + (
                        f" --bc-value-coef {args.bc_value_coef:g}"
                        if args.bc_value_coef != 0.5
                        else ""
                    )
                    + (f" --vf-coef {args.vf_coef:g}" if args.vf_coef != 0.5 else "")
                    + f" --fgd-until-pct {args.fgd_until_pct:g}"
                    + (f" --reward {args.reward}" if args.reward != "shaped" else "")
                    + (" --penalty-features" if args.penalty_features else "")
                    + (
                        f" --cem-generations {args.cem_generations} --cem-population"
                        f" {args.cem_population} --cem-seeds {' '.join(map(str, args.cem_seeds))}"
                        if args.teacher == "cem"
                        else ""
                    )
                    + (f" --max-minutes {args.max_minutes:g}" if args.max_minutes else "")
                ]
            ),
            "train_traces": args.traces,
            "teacher": args.teacher,
            "teacher_format": (
                teacher.to_dict()["format"]
                if teacher is not None and args.teacher != "cem"
                else "-"
            ),
            "teacher_search (mean unalloc % on its episodes: FGD -> teacher)": (
                f"{summary['cem']['fgd']:.3f} -> {summary['cem']['teacher']:.3f}"
                if "cem" in summary
                else "-"
            ),
            "ppo_timesteps": int(model.num_timesteps),
            "bc_samples": summary.get("bc", {}).get("samples", 0),
            "wall_time_s": round(wall, 1),
            "ppo_wall_time_s": round(ppo_seconds, 1),
            "parameters": count_parameters(best.policy),
            "best_step": state["best_step"],
            "eval_traces": args.eval_traces,
            "eval_seeds": args.eval_seeds,
            "eval_fgd_prefix_pct": args.eval_fgd_until_pct,
            "eval_ppo_unalloc100": round(state["best"], 4),
            "eval_fgd_unalloc100 (full FGD run)": round(refs["FGD"], 4),
            "eval_bestfit_unalloc100": round(refs["BestFit"], 4),
            "eval_teacher_unalloc100": round(refs["teacher"], 4) if "teacher" in refs else "-",
            "hyperparameters": asdict(hp),
        }
        write_model_card(model_dir, card)
        mlflow.log_metrics({"final/wall_time_s": wall, "final/eval_unalloc100": state["best"]})
        mlflow.log_artifacts(str(model_dir), artifact_path="placement")
        summary.update(
            metrics={
                "eval_unalloc100": state["best"],
                **{f"{k}_unalloc100": v for k, v in refs.items()},
            },
            best_step=state["best_step"],
            history=state["history"],
            timesteps=int(model.num_timesteps),
            wall_time_s=round(wall, 1),
            artifact=str(model_dir),
            files={k: str(v) for k, v in paths.items()},
        )
        if args.register:
            summary["registry"] = log_placement_pyfunc(model_dir, state["best"])
    if args.release:
        RELEASED_DIR.mkdir(parents=True, exist_ok=True)
        for f in model_dir.iterdir():
            shutil.copy2(f, RELEASED_DIR / f.name)
        summary["released"] = str(RELEASED_DIR)
    return summary
