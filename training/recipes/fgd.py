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
   ``model_card.md``) to ``<out>/<run name>/model`` (and to ``models/placement/`` with ``--release``,
   removing the earlier release's model files that this run does not write),
   logs it to MLflow as a pyfunc model, registers ``fleetmind-placement`` and moves the ``champion``
   alias to the new version when its evaluation beats the current champion's
   (:mod:`fleetmind.training.recipes.tracking`).
"""

from __future__ import annotations

import json
import shlex
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields
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
from fleetmind.folders import RELEASE_MODEL_FILES, write_folder_whole
from fleetmind.progress import bar_disable
from fleetmind.rl.callbacks import MlflowEvalCallback
from fleetmind.rl.export import actor_from_model, export_policy, load_sb3_model, save_onnx
from fleetmind.rl.policy import count_parameters
from fleetmind.rl.policy_adapter import RELEASED_DIR
from fleetmind.rl.ppo import (
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
from fleetmind.training.progress import timestep_bar
from fleetmind.training.recipes.common import (
    TrainingRun,
    check_fgd_prefixes,
    check_loss_weights,
    check_run_limits,
    clone_teacher,
    hyperparams,
    log_cem_search,
    seed_everything,
    write_model_card,
)
from fleetmind.training.recipes.flags import TRAIN_FLAGS
from fleetmind.training.recipes.settings import FgdArgs, check_release_target
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
    bar = tqdm(total=n_vectors * len(episodes), desc=desc, unit="ep", disable=bar_disable(show))
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
        # F = 18, or the run's own width: the teacher.json of a --penalty-features CEM run
        if scorer.n_cand_features not in (N_CAND_FEATURES, _n_features(args)):
            raise ConfigError(
                f"teacher {args.teacher} has F={scorer.n_cand_features} candidate features,"
                f" GpuPlacement-v0 has F={N_CAND_FEATURES}"
                + (
                    f" (F={_n_features(args)} with --penalty-features)"
                    if args.penalty_features
                    else ""
                )
            )
        # the release carries its teacher: a strand teacher as teacher_strand.json, with its linear
        # base as teacher.json (the layout of models/placement/ since 2026-11-30)
        if isinstance(scorer, StrandPenaltyScorer):
            scorer.save(run_dir / "model" / "teacher_strand.json")
            scorer.base.save(run_dir / "model" / "teacher.json")
        else:
            scorer.save(run_dir / "model" / "teacher.json")
        # saved at its own F; an F = 18 one is widened to see the penalty columns as weight 0
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


@dataclass
class _Run(TrainingRun):
    """One fgd-mode training run in progress (:class:`TrainingRun`), with its evaluation env."""

    nodes: Any = None
    eval_env: Any = None
    """the evaluation env (:class:`GpuPlacementEnv` on the evaluation traces)"""
    refs: dict[str, float] = field(default_factory=dict)
    """mean unallocated GPU % at 100 % of FGD, BestFit and the teacher (evaluation episodes)"""
    teacher: Any = None

    def evaluate(self, act: Any) -> float:
        """Mean unallocated GPU % at 100 % of ``act`` over the evaluation traces and seeds."""
        a = self.args
        res = evaluate_greedy(self.eval_env, act, a.eval_traces, a.eval_seeds)
        return float(np.mean([v for per in res.values() for v in per.values()]))

    def evaluate_policy(self, step: int) -> float:
        """Evaluate the policy being trained; keep it as ``best.zip`` when it is the best yet."""
        val = self.evaluate(actor_from_model(self.model).predict)
        mlflow.log_metric("eval/ppo_unalloc100", val, step=step)
        mlflow.log_metric("eval/gap_vs_fgd", val - self.refs["FGD"], step=step)
        self.state["history"].append({"step": step, "unalloc100": val})
        if val < self.state["best"]:
            self.state["best"], self.state["best_step"] = val, step
            self.model.save(self.ckpt_dir / "best.zip")
        return val


def _check(args: FgdArgs) -> None:
    """Every trace read and every setting checked before anything is written (MLflow run, run
    folder): a typo is one line."""
    for t in dict.fromkeys([*args.traces, *args.eval_traces]):
        load_openb_trace(t)
    if args.timesteps < 0 or args.n_envs < 1:
        raise ConfigError("--timesteps must be >= 0 and --n-envs >= 1")
    check_run_limits(args)
    check_fgd_prefixes(args)
    check_loss_weights(args.bc_value_coef, args.vf_coef)


def _start(args: FgdArgs, t_start: float) -> _Run:
    """The run's folders, training env settings and evaluation env; first, one training env
    reset per training trace (``DataError`` when none of its workload seeds gives a decision)."""
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
    # a training trace none of whose workload seeds gives the agent a decision: one line here,
    # before the run folder and the MLflow run (in a SubprocVecEnv worker it was a pipe error)
    check_env = GpuPlacementEnv(**env_kwargs)
    for t in dict.fromkeys(args.traces):
        check_env.reset(seed=args.seed, options={"trace": t})
    run_name, run_dir, ckpt_dir = run_dirs(args, "GpuPlacement-v0")
    eval_env = GpuPlacementEnv(
        traces=list(args.eval_traces),
        nodes=nodes,
        n_candidates=args.n_candidates,
        fgd_until_pct=args.eval_fgd_until_pct,
        penalty_features=args.penalty_features,
    )
    summary: dict[str, Any] = {"run_name": run_name}
    return _Run(
        args=args,
        name=run_name,
        dir=run_dir,
        ckpt_dir=ckpt_dir,
        env_kwargs=env_kwargs,
        hp=hp,
        summary=summary,
        t_start=t_start,
        nodes=nodes,
        eval_env=eval_env,
    )


def _references(r: _Run) -> None:
    """FGD's and BestFit's results on the evaluation episodes, logged at step 0."""
    a = r.args
    # FGD = always candidate 0: identical to envs.fgd_mode.run_fgd(trace, "FGD", seed)
    r.refs["FGD"] = r.evaluate(lambda obs, mask: 0)
    r.refs["BestFit"] = float(
        np.mean(
            [
                run_fgd(t, "BestFit", s, r.nodes).unallocated[100]
                for t in a.eval_traces
                for s in a.eval_seeds
            ]
        )
    )
    for pol, val in r.refs.items():
        mlflow.log_metric(f"eval/{pol.lower()}_unalloc100", val, step=0)
    r.summary["eval_reference"] = r.refs


def _warm_start(r: _Run) -> None:
    """The model, cloned from the teacher's demonstrations; saved as ``clone.onnx`` (policy name
    ``clone``), with the teacher's own evaluation among the references."""
    a = r.args
    r.venv = make_vec_env(a.n_envs, a.seed, r.env_kwargs)
    r.model = make_model(r.venv, r.hp, a.seed)
    mlflow.log_param("n_parameters", count_parameters(r.model.policy))
    r.teacher = teacher = _make_teacher(a, r.env_kwargs, r.dir, r.summary)
    if a.bc_episodes > 0:
        teach_env = GpuPlacementEnv(
            **{
                **r.env_kwargs,
                "workload_seeds": list(a.workload_seeds),
                "fgd_until_pct": a.bc_fgd_until_pct,
            }
        )
        if hasattr(teacher, "bind"):  # reads the env's state (StrandPenaltyScorer)
            teacher.bind(teach_env)
        bar = tqdm(desc=f"{a.teacher} demonstrations", unit="step", disable=bar_disable(a.progress))
        data = collect_teacher(
            teach_env, a.bc_episodes, a.seed, r.hp.gamma, teacher=teacher, progress=bar.update
        )
        bar.close()
        r.summary["bc"] = clone_teacher(r.model, data, a)
    save_onnx(actor_from_model(r.model), r.dir / "model" / "clone.onnx")
    if teacher is not None:
        if hasattr(teacher, "bind"):
            teacher.bind(r.eval_env)
        r.refs["teacher"] = r.evaluate(teacher)
        mlflow.log_metric("eval/teacher_unalloc100", r.refs["teacher"], step=0)


def _learn(r: _Run) -> None:
    """MaskablePPO from the clone, evaluated every ``eval_freq`` steps (the clone and the last
    policy too); the last policy is saved as ``final.onnx`` whichever one is kept as best."""
    a = r.args
    r.evaluate_policy(0)  # the cloned policy is a candidate for "best" too
    t_ppo = time.perf_counter()
    if a.timesteps > 0:

        def periodic(step: int) -> float | None:
            # SB3 updates the policy once more after its last rollout: an evaluation inside that
            # rollout would score the policy before the update, under the final step; the final
            # evaluation below scores the policy training ends with, once
            return r.evaluate_policy(step) if step < a.timesteps else None

        options = {"max_minutes": a.max_minutes, "checkpoint_dir": r.ckpt_dir, "log_losses": True}
        callback = MlflowEvalCallback(periodic, a.eval_freq, episode_metrics, **options)
        # SB3's own bar (progress_bar=True) draws on stdout, where `sched train` prints its JSON
        bar = timestep_bar(a.progress)
        r.model.learn(total_timesteps=a.timesteps, callback=[callback, bar])
        # stopped by --max-minutes right after an evaluation: no update since, the same policy
        if r.state["history"][-1]["step"] != r.model.num_timesteps:
            r.evaluate_policy(r.model.num_timesteps)
        save_onnx(actor_from_model(r.model), r.dir / "model" / "final.onnx")
    r.ppo_seconds = time.perf_counter() - t_ppo
    r.venv.close()


def _export(r: _Run) -> Path:
    """The best policy exported to ``<run>/model`` with its metadata and card, logged to MLflow;
    returns that folder."""
    best = load_sb3_model(r.ckpt_dir / "best.zip")
    model_dir = r.dir / "model"
    paths = export_policy(best, model_dir)
    best.save(model_dir / "ppo.zip")
    wall = time.perf_counter() - r.t_start
    (model_dir / "metadata.json").write_text(json.dumps(_metadata(r), indent=1) + "\n")
    write_model_card(model_dir, _card(r, best, wall))
    mlflow.log_metrics({"final/wall_time_s": wall, "final/eval_unalloc100": r.state["best"]})
    mlflow.log_artifacts(str(model_dir), artifact_path="placement")
    r.summary.update(
        metrics={
            "eval_unalloc100": r.state["best"],
            "eval_clone_unalloc100": _clone_score(r),
            **{f"{k}_unalloc100": v for k, v in r.refs.items()},
        },
        best_step=r.state["best_step"],
        history=r.state["history"],
        timesteps=int(r.model.num_timesteps),
        wall_time_s=round(wall, 1),
        artifact=str(model_dir),
        files={k: str(v) for k, v in paths.items()},
    )
    return model_dir


def _metadata(r: _Run) -> dict[str, Any]:
    """``metadata.json`` of the exported model (what the policy adapter and the service read)."""
    a, eval_env = r.args, r.eval_env
    typical = TypicalPods.from_trace(eval_env._trace(0))  # noqa: SLF001
    meta = {
        "format": "fleetmind-placement/1",
        "version": r.name,
        "n_candidates": a.n_candidates,
        "mode": a.mode,
        "train_traces": list(a.traces),
        "typical_pods": typical_to_json(typical),
        "typical_pods_trace": eval_env._trace(0).name,  # noqa: SLF001
    }
    if a.penalty_features:
        # the adapter rebuilds the features from the evaluated trace; the service, which has
        # no trace, uses the statistics of the typical-pods trace stored here
        meta["builder"] = {"penalty_features": True}
        meta["penalty_context"] = PenaltyContext.from_trace(
            eval_env._trace(0),  # noqa: SLF001
            eval_env.state,
        ).to_json()
    return meta


_COMMAND_ALWAYS = frozenset(
    {
        "traces",
        "timesteps",
        "seed",
        "n_envs",
        "eval_freq",
        "eval_fgd_until_pct",
        "eval_traces",
        "eval_seeds",
        "teacher",
        "bc_episodes",
        "bc_target_ce",
        "bc_fgd_until_pct",
        "fgd_until_pct",
    }
)
"""Settings the model card's command names even at their defaults (the cross-entropy search's
size and seeds too, with ``--teacher cem``); every other flag appears when it differs from its
default."""
_COMMAND_CEM = frozenset({"cem_generations", "cem_population", "cem_seeds"})
_COMMAND_NEVER = frozenset({"out", "release", "register"})
"""Where the run went and what it did with the model afterwards, not what it learned."""


def _flag_value(value: Any) -> str:
    """A flag's value as typed (a float shortest, ``1e-05``, ``0.5``), quoted for a POSIX shell."""
    if isinstance(value, float):
        short = f"{value:g}"
        value = short if float(short) == value else repr(value)
    return shlex.quote(str(value))


def _command(args: FgdArgs) -> str:
    """The ``sched train`` flags of the run, as its model card records them: every
    :data:`~fleetmind.training.recipes.flags.TRAIN_FLAGS` setting that differs from its default
    (plus :data:`_COMMAND_ALWAYS`), values quoted for a POSIX shell, so that the card's
    "Regenerate" line reruns the same training."""
    defaults = FgdArgs()
    have = {f.name for f in fields(FgdArgs)}
    out: list[str] = []
    for spec in TRAIN_FLAGS:
        name = spec.field
        if name not in have or name in _COMMAND_NEVER:
            continue
        value = getattr(args, name)
        shown = name in _COMMAND_ALWAYS or (name in _COMMAND_CEM and args.teacher == "cem")
        if value is None or value is False or (not shown and value == getattr(defaults, name)):
            continue
        if value is True:
            out.append(spec.flag)
        elif spec.argparse.get("action") == "append":  # one value per use of the flag
            out += [f"{spec.flag} {_flag_value(v)}" for v in value]
        elif isinstance(value, list):
            out.append(" ".join([spec.flag, *map(_flag_value, value)]))
        else:
            out.append(f"{spec.flag} {_flag_value(value)}")
        if name == "traces":
            out.append(f"--mode {args.mode}")
    return " ".join(out)


def _clone_score(r: _Run) -> float:
    """The clone's validation score (step 0 of the run's evaluations), unallocated GPU %."""
    return float(next(h["unalloc100"] for h in r.state["history"] if h["step"] == 0))


def _card(r: _Run, best: Any, wall: float) -> dict[str, Any]:
    """The model card's fields."""
    args, summary, refs, teacher = r.args, r.summary, r.refs, r.teacher
    return {
        "run": r.name,
        "command": _command(args),
        "train_traces": args.traces,
        "teacher": args.teacher,
        "teacher_format": (
            teacher.to_dict()["format"] if teacher is not None and args.teacher != "cem" else "-"
        ),
        "teacher_search (mean unalloc % on its episodes: FGD -> teacher)": (
            f"{summary['cem']['fgd']:.3f} -> {summary['cem']['teacher']:.3f}"
            if "cem" in summary
            else "-"
        ),
        "ppo_timesteps": int(r.model.num_timesteps),
        "bc_samples": summary.get("bc", {}).get("samples", 0),
        "wall_time_s": round(wall, 1),
        "ppo_wall_time_s": round(r.ppo_seconds, 1),
        "parameters": count_parameters(best.policy),
        "best_step": r.state["best_step"],
        "eval_traces": args.eval_traces,
        "eval_seeds": args.eval_seeds,
        "eval_fgd_prefix_pct": args.eval_fgd_until_pct,
        "eval_ppo_unalloc100": round(r.state["best"], 4),
        "eval_clone_unalloc100 (step 0)": round(_clone_score(r), 4),
        "eval_fgd_unalloc100 (full FGD run)": round(refs["FGD"], 4),
        "eval_bestfit_unalloc100": round(refs["BestFit"], 4),
        "eval_teacher_unalloc100": round(refs["teacher"], 4) if "teacher" in refs else "-",
        "hyperparameters": asdict(r.hp),
    }


def run(args: FgdArgs) -> dict[str, Any]:
    """Warm start, learn, export, register (and release); returns the JSON summary."""
    _check(args)
    if args.release:  # before the training: a pip install's released model is the package's
        check_release_target(RELEASED_DIR)
    seed_everything(args.seed, args.threads)
    r = _start(args, t_start=time.perf_counter())
    with tracked_run(args, r.name, r.summary):
        _references(r)
        _warm_start(r)
        _learn(r)
        model_dir = _export(r)
        if args.register:
            r.summary["registry"] = log_placement_pyfunc(model_dir, r.state["best"])
    if args.release:
        _release(model_dir, r.summary)
    return r.summary


def _release(model_dir: Path, summary: dict[str, Any]) -> None:
    """Write the exported model's files to ``models/placement/`` all at once
    (:func:`fleetmind.folders.write_folder_whole`: a failed write leaves the earlier release as it
    was). The earlier release's model files (:data:`fleetmind.folders.RELEASE_MODEL_FILES`) this
    run does not write are removed: its ``teacher_strand.json`` or ``ppo_policy.onnx`` would be
    read as this model's (``sched evaluate --policies teacher``); every other entry stays."""
    write_folder_whole(
        RELEASED_DIR, {f.name: f for f in sorted(model_dir.iterdir())}, remove=RELEASE_MODEL_FILES
    )
    summary["released"] = str(RELEASED_DIR.resolve())
