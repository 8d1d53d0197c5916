"""Train the PPO placement agent, tracked in MLflow (CleanRL-style script).

    fleetmind sched train --trace default [--trace cpu050 ...] --mode fgd [--timesteps N] [--seed S]
                          [--n-envs E] [--out runs/ppo] [--release] [--json P]

What a run does:

1. Seeds everything (Python, NumPy, torch, env and action-space seeds).
2. Imitation warm start: rolls out a teacher on the training traces and clones it into the
   candidate scorer (actor cross-entropy + critic regression on the teacher's discounted returns;
   see :mod:`rl.ppo`). The teacher is FGD (candidate 0 of every observation; ``--teacher fgd``), a
   linear candidate scorer searched first by the cross-entropy method (``--teacher cem``; see
   :mod:`rl.teacher`), or a saved scorer JSON.
3. MaskablePPO on ``SubprocVecEnv`` envs (``fleetmind/GpuPlacement-v0``; episodes start after an FGD
   prefix up to ``fgd_until_pct`` of capacity and stop at ``stop_arrived_pct``, from a pool of
   workload seeds), with SB3 callbacks: MLflow logging (``train/*`` episode metrics, ``losses/*``),
   periodic greedy evaluation against FGD and BestFit (``eval/*``) that keeps the best policy
   (the cloned one included), and checkpoints.
4. Exports the best policy (``policy.onnx``, ``policy.pt``, ``metadata.json``, ``ppo.zip``,
   ``model_card.md``) to ``<out>/<run name>/model`` (and to ``models/placement/`` with ``--release``),
   logs it to MLflow as a pyfunc model, registers ``fleetmind-placement`` and moves the ``champion``
   alias to the new version when its evaluation beats the current champion's.

Tracking URI: ``MLFLOW_TRACKING_URI`` or the embedded ``sqlite:///mlflow.db``.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import mlflow.pyfunc
import numpy as np

from fleetmind.data.errors import ConfigError

REGISTERED_MODEL = "fleetmind-placement"
CHAMPION = "champion"
DEFAULT_TRACKING_URI = "sqlite:///mlflow.db"


@dataclass
class Args:
    """Settings of one training run (``fleetmind sched train`` flags)."""

    traces: list[str] = field(default_factory=lambda: ["default"])
    """training traces (openb names or CSV paths); one drawn per episode"""
    nodes: str | None = None
    """node list CSV or openb name (default: the openb GPU nodes)"""
    mode: str = "fgd"
    """simulation mode: ``fgd`` (this module) or ``dynamic`` (:mod:`training.sched_train_dynamic`)"""
    timesteps: int = 100_000
    """PPO environment steps (decisions) after the warm start"""
    seed: int = 0
    """seed of weights, envs and workloads"""
    n_envs: int = 2
    """parallel envs (SubprocVecEnv when > 1)"""
    n_candidates: int = 16
    """K, candidate placements per decision"""
    fgd_until_pct: float = 80.0
    """training episodes: FGD places pods until this % of capacity has arrived"""
    stop_arrived_pct: float = 101.0
    """training episodes end when arrivals pass this % of capacity (the metric is read at 100)"""
    workload_seeds: list[int] = field(default_factory=lambda: [1000, 1001])
    """pool of training workload seeds (disjoint from the evaluation seeds 42-51)"""
    bc_episodes: int = 2
    """teacher episodes for the imitation warm start (0: none)"""
    bc_epochs: int = 30
    """maximum epochs of behaviour cloning (stops at cross-entropy ``bc_target_ce``)"""
    bc_fgd_until_pct: float = 0.0
    """teacher demonstrations: FGD prefix (default 0, whole episodes, so that the clone also sees the
    early, lightly loaded states that the PPO episodes skip but evaluation does not)"""
    bc_target_ce: float = 0.2
    """behaviour cloning stops once the epoch's cross-entropy is below this"""
    bc_value_coef: float = 0.5
    """weight of the critic's return regression in the cloning loss. The critic pools the actor's
    row embeddings, so with large returns (dynamic mode: value MSE ~1,000) this term's gradient
    swamps the actor's; 0 clones the actor alone (the critic then starts untrained)"""
    teacher: str = "fgd"
    """warm-start teacher: ``fgd`` (candidate 0), ``cem`` (search a linear scorer first, see
    :mod:`rl.teacher`) or the path of a saved scorer JSON (``rl.teacher.load_teacher``: a linear
    scorer, or a linear scorer with a host-stranding penalty)"""
    cem_generations: int = 8
    """teacher=cem: CEM generations"""
    cem_population: int = 14
    """teacher=cem: weight vectors scored per generation"""
    cem_seeds: list[int] = field(default_factory=lambda: [1000])
    """teacher=cem: workload seeds of the search episodes (one episode per training trace and
    seed; when that makes a single episode, the same trace with the next seed is added)"""
    cem_init: str | None = None
    """teacher=cem: start the search at this saved scorer JSON (default: at FGD)"""
    cem_init_sd: float = 0.5
    """teacher=cem: initial standard deviation of the search distribution"""
    cem_multi_gpu_block: bool = False
    """teacher=cem: add the ``x * is_multi_gpu`` feature block (``rl.teacher.BLOCKS_4``)"""
    cem_trace_seeds: dict[str, list[int]] = field(default_factory=dict)
    """dynamic mode, teacher=cem: search seeds per trace, replacing ``cem_seeds`` for that trace"""
    cem_worst_weight: float = 0.0
    """dynamic mode, teacher=cem: weight of the worst per-trace slowdown ratio in the objective"""
    cem_nonneg: list[str] = field(default_factory=list)
    """dynamic mode, teacher=cem: candidate features whose effective weight is kept >= 0"""
    cem_max_minutes: float | None = None
    """dynamic mode, teacher=cem: end the search after the generation in which this many minutes
    passed (None: no limit)"""
    learning_rate: float = 1e-4
    """PPO Adam step size"""
    n_steps: int = 512
    """rollout steps per env per update"""
    batch_size: int = 128
    """PPO minibatch"""
    clip_range: float = 0.15
    """PPO clip"""
    target_kl: float = 0.02
    """PPO early stop on approximate KL"""
    gamma: float = 0.995
    """discount"""
    ent_coef: float = 0.001
    """entropy bonus"""
    vf_coef: float = 0.5
    """PPO value-loss weight. The critic pools the actor's row embeddings, so with large returns
    (dynamic mode) a big weight lets the value loss dominate the shared trunk's clipped gradient"""
    hidden: int = 64
    """hidden width (tanh)"""
    eval_traces: list[str] = field(default_factory=lambda: ["default"])
    """traces of the periodic evaluation"""
    eval_seeds: list[int] = field(default_factory=lambda: [42])
    """workload seeds of the periodic evaluation"""
    eval_fgd_until_pct: float = 80.0
    """periodic evaluation: FGD prefix (0 = the agent places everything; slower)"""
    eval_freq: int = 20_000
    """evaluate every this many PPO steps"""
    max_minutes: float | None = None
    """stop PPO after this much wall time (minutes; None: run all timesteps)"""
    out: str = "runs/ppo"
    """folder for checkpoints and the artifact (``<out>/<run name>/``)"""
    release: bool = False
    """also copy the artifact to models/placement/ (the released model)"""
    register: bool = True
    """register the model in MLflow and maybe move the champion alias"""
    tracking_uri: str | None = None
    """MLflow tracking URI (default: MLFLOW_TRACKING_URI or sqlite:///mlflow.db)"""
    experiment: str = "fleetmind-placement"
    """MLflow experiment name"""
    threads: int = 1
    """torch threads"""
    progress: bool = True
    """progress bars"""
    dyn_jobs: int = 2048
    """dynamic mode: jobs per episode of fleetmind/MultiClusterPlacement-v0 (2,048, the env's and
    the released dynamic model's setting)"""
    queue_features: bool = False
    """dynamic mode: the 4 queue-aware candidate features (env option ``queue_features``)"""


def tracking_uri(explicit: str | None = None) -> str:
    """Explicit URI, else ``MLFLOW_TRACKING_URI``, else the embedded SQLite store."""
    return explicit or os.environ.get("MLFLOW_TRACKING_URI") or DEFAULT_TRACKING_URI


class PlacementPyfunc(mlflow.pyfunc.PythonModel):
    """MLflow pyfunc wrapper of the exported actor.

    ``predict`` takes rows ``{"obs": [K*F+G floats], "mask": [K bools]}`` (list or DataFrame) and
    returns the greedy candidate index per row.
    """

    # The rows are free-form JSON dicts (docstring above), which MLflow's type-hint validation cannot
    # describe; without this MLflow warns at import, on every CLI run, that predict() has no hints.
    _skip_type_hint_validation = True

    def load_context(self, context: Any) -> None:
        from fleetmind.rl.export import OnnxActor

        self.actor = OnnxActor(Path(context.artifacts["placement"]) / "policy.onnx")

    def predict(self, context, model_input, params=None):  # noqa: ANN001, ANN201 - MLflow infers schemas from hints
        rows = model_input.to_dict("records") if hasattr(model_input, "to_dict") else model_input
        obs = np.asarray([r["obs"] for r in rows], dtype=np.float32)
        mask = np.asarray([r["mask"] for r in rows], dtype=bool)
        return self.actor.predict(obs, mask).tolist()


def pip_requirements() -> list[str]:
    """Explicit requirements of the logged model."""
    from importlib.metadata import version

    out = []
    for pkg in ("numpy", "onnxruntime", "mlflow"):
        try:
            out.append(f"{pkg}=={version(pkg)}")
        except Exception:  # pragma: no cover
            out.append(pkg)
    return out


def promote_if_better(client: Any, version: str, score: float) -> tuple[bool, str | None]:
    """Tag ``version`` with ``eval_unalloc`` (lower is better); move ``champion`` if it wins."""
    from mlflow.exceptions import MlflowException

    client.set_model_version_tag(REGISTERED_MODEL, version, "eval_unalloc", f"{score:.6f}")
    try:
        champ = client.get_model_version_by_alias(REGISTERED_MODEL, CHAMPION)
    except MlflowException:
        champ = None
    prev = None if champ is None else str(champ.version)
    best = float("inf")
    if champ is not None:
        try:
            best = float(champ.tags.get("eval_unalloc", "inf"))
        except ValueError:
            best = float("inf")
    if champ is None or score < best:
        client.set_registered_model_alias(REGISTERED_MODEL, CHAMPION, version)
        return True, prev
    return False, prev


def check_loss_weights(bc_value_coef: float, vf_coef: float) -> None:
    """``--bc-value-coef`` and ``--vf-coef`` must be finite numbers >= 0 (ConfigError otherwise)."""
    for flag, v in (("--bc-value-coef", bc_value_coef), ("--vf-coef", vf_coef)):
        if not (np.isfinite(v) and v >= 0):
            raise ConfigError(f"{flag} must be a finite number >= 0, got {v}")


def seed_everything(seed: int, threads: int) -> None:
    """Seed Python, NumPy and torch; fix torch threads."""
    import torch

    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    torch.set_num_threads(max(1, threads))


def write_model_card(folder: Path, card: dict[str, Any]) -> Path:
    """``model_card.md`` for an exported placement model."""
    teacher = str(card.get("teacher", "fgd"))
    kinds = {
        "fgd": "FGD's choice, candidate 0",
        "cem": "a linear candidate scorer found by a cross-entropy search, see `rl/teacher.py`",
    }
    kind = kinds.get(teacher)
    if kind is None:
        fmt = card.get("teacher_format")
        kind = (
            "a linear candidate scorer minus penalties read from the env (host-stranded GPUs,"
            " GPU-model scarcity), `rl.teacher.StrandPenaltyScorer`"
            if fmt == "fleetmind-strand-scorer/1"
            else "a saved linear candidate scorer, see `rl/teacher.py`"
        )
    lines = [
        "# fleetmind-placement: PPO GPU placement agent",
        "",
        "Permutation-equivariant candidate scorer (shared MLP over K candidate rows) trained with",
        f"sb3-contrib MaskablePPO after an imitation warm start (teacher: {teacher}, {kind}), in",
        "`fleetmind/GpuPlacement-v0` (fgd mode, openb GPU nodes). Inputs: `obs (B, K*F+G) float32`,",
        "`mask (B, K) bool`; output: the index of the chosen candidate (see `docs/ppo.md` and",
        "`envs/candidates.py`).",
        "",
        "| field | value |",
        "| --- | --- |",
    ]
    for k, v in card.items():
        if isinstance(v, dict | list):
            v = json.dumps(v)
        lines.append(f"| {k} | {v} |")
    lines += [
        "",
        "Regenerate: `fleetmind sched train " + card.get("command", "") + "`.",
        "",
        "Data: Alibaba cluster-trace-gpu-v2023 (openb), research use; Weng et al., USENIX ATC'23.",
    ]
    path = folder / "model_card.md"
    path.write_text("\n".join(lines) + "\n")
    return path


def _hyperparams(args: Args) -> Any:
    """The ``rl.ppo.PPOHyperparams`` of ``args`` (shared by the fgd and dynamic training runs)."""
    from fleetmind.rl.ppo import PPOHyperparams

    return PPOHyperparams(
        learning_rate=args.learning_rate,
        n_steps=args.n_steps,
        batch_size=args.batch_size,
        clip_range=args.clip_range,
        target_kl=args.target_kl,
        gamma=args.gamma,
        ent_coef=args.ent_coef,
        vf_coef=args.vf_coef,
        hidden=args.hidden,
    )


def _run_dirs(args: Args, env_id: str) -> tuple[str, Path, Path]:
    """CleanRL-style run name ``<env>__ppo__<seed>__<time>``, its folder and checkpoint folder."""
    run_name = f"{env_id}__ppo__{args.seed}__{int(time.time())}"
    run_dir = Path(args.out) / run_name
    ckpt_dir = run_dir / "checkpoints"
    ckpt_dir.mkdir(parents=True, exist_ok=True)
    return run_name, run_dir, ckpt_dir


def cem_search_with_bar(
    env: Any,
    episodes: list[tuple[str, int]],
    *,
    init: Any = None,
    desc: str = "CEM teacher search",
    show: bool = True,
    **search_kwargs: Any,
) -> Any:
    """:func:`rl.teacher.cem_search` with a tqdm bar counted in episodes (one tick per scored
    episode: ``(generations x population + 1 [+ 1 with init]) x len(episodes)`` in all).
    ``search_kwargs`` go to ``cem_search`` (generations, population, n_elite, init_sd, seed,
    blocks). Returns its ``CEMResult``."""
    from tqdm import tqdm

    from fleetmind.rl.teacher import cem_search

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


def log_cem_search(res: Any, run_dir: Path) -> None:
    """Log a CEM search (``rl.teacher.CEMResult`` or ``rl.dynamic_teacher.DynCEMResult``: per
    generation ``best``/``elite_mean``/``sd_mean``, then FGD's and the teacher's scores) to the
    active MLflow run, and save the teacher as ``<run>/model/teacher.json``."""
    import mlflow

    for h in res.history:
        mlflow.log_metrics(
            {"cem/best": h["best"], "cem/elite_mean": h["elite_mean"], "cem/sd_mean": h["sd_mean"]},
            step=int(h["generation"]),
        )
    mlflow.log_metrics({"cem/fgd": res.fgd_score, "cem/teacher": res.best_score})
    res.best.save(run_dir / "model" / "teacher.json")


def _make_teacher(
    args: Args, env_kwargs: dict[str, Any], run_dir: Path, summary: dict[str, Any]
) -> Any:
    """The warm-start teacher: ``None`` for FGD (candidate 0), else a :class:`rl.teacher.LinearScorer`
    or :class:`rl.teacher.StrandPenaltyScorer` loaded from ``args.teacher``, or a linear scorer
    searched by CEM (logged to MLflow). Either way it is saved as ``<run>/model/teacher.json``."""

    from fleetmind.envs.candidates import N_CAND_FEATURES
    from fleetmind.envs.gpu_placement_env import GpuPlacementEnv
    from fleetmind.rl.teacher import (
        BLOCKS_3,
        BLOCKS_4,
        LinearScorer,
        StrandPenaltyScorer,
        load_teacher,
    )

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
        return scorer
    if args.cem_generations < 1 or args.cem_population < 2:
        raise ConfigError("--cem-generations must be >= 1 and --cem-population >= 2")
    if not args.cem_init_sd > 0:
        raise ConfigError(f"--cem-init-sd must be > 0, got {args.cem_init_sd}")
    blocks = BLOCKS_4 if args.cem_multi_gpu_block else BLOCKS_3
    init = None
    if args.cem_init is not None:
        init = LinearScorer.load(args.cem_init)
        if (init.n_candidates, init.n_cand_features) != (args.n_candidates, N_CAND_FEATURES):
            raise ConfigError(
                f"--cem-init {args.cem_init} has K={init.n_candidates},"
                f" F={init.n_cand_features}; the run uses K={args.n_candidates},"
                f" F={N_CAND_FEATURES}"
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


def run(args: Args) -> dict[str, Any]:
    """Warm start, train, evaluate, export, log and register; returns the JSON summary."""
    os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
    import mlflow
    from stable_baselines3.common.callbacks import BaseCallback, CallbackList
    from tqdm import tqdm

    from fleetmind.data.openb import load_openb_trace
    from fleetmind.envs.fgd_mode import run_fgd
    from fleetmind.envs.gpu_placement_env import GpuPlacementEnv
    from fleetmind.envs.policies import TypicalPods
    from fleetmind.rl.export import actor_from_model, export_policy
    from fleetmind.rl.policy import count_parameters
    from fleetmind.rl.policy_adapter import typical_to_json
    from fleetmind.rl.ppo import (
        behaviour_clone,
        collect_teacher,
        evaluate_greedy,
        make_model,
        make_vec_env,
    )

    # every trace read before anything is written (MLflow run, run folder): a typo is one line
    for t in dict.fromkeys([*args.traces, *args.eval_traces]):
        load_openb_trace(t)
    if args.mode == "dynamic":
        if args.cem_init is not None or args.cem_multi_gpu_block:
            # the dynamic recipe has its own scorer (rl.dynamic_teacher); refuse rather than ignore
            raise ConfigError("--cem-init and --cem-multi-gpu-block are fgd-mode options")
        return run_dynamic(args)
    if args.mode != "fgd":
        raise ConfigError(f"--mode {args.mode}: use fgd or dynamic")
    if args.timesteps < 0 or args.n_envs < 1:
        raise ConfigError("--timesteps must be >= 0 and --n-envs >= 1")
    check_loss_weights(args.bc_value_coef, args.vf_coef)
    seed_everything(args.seed, args.threads)
    t_start = time.perf_counter()

    from fleetmind.data.openb import load_openb_nodes

    nodes = load_openb_nodes(args.nodes)
    env_kwargs = {
        "traces": list(args.traces),
        "nodes": nodes,
        "n_candidates": args.n_candidates,
        "fgd_until_pct": args.fgd_until_pct,
        "stop_arrived_pct": args.stop_arrived_pct,
        "workload_seeds": list(args.workload_seeds),
    }
    hp = _hyperparams(args)
    run_name, run_dir, ckpt_dir = _run_dirs(args, "GpuPlacement-v0")

    uri = tracking_uri(args.tracking_uri)
    mlflow.set_tracking_uri(uri)
    mlflow.set_experiment(args.experiment)
    summary: dict[str, Any] = {"run_name": run_name, "tracking_uri": uri}

    eval_env = GpuPlacementEnv(
        traces=list(args.eval_traces),
        nodes=nodes,
        n_candidates=args.n_candidates,
        fgd_until_pct=args.eval_fgd_until_pct,
    )

    def evaluate(act: Any) -> dict[str, dict[int, float]]:
        return evaluate_greedy(eval_env, act, args.eval_traces, args.eval_seeds)

    with mlflow.start_run(run_name=run_name) as mlrun:
        summary["run_id"] = mlrun.info.run_id
        mlflow.log_params(
            {
                k: json.dumps(v) if isinstance(v, (list, dict)) else v
                for k, v in asdict(args).items()
            }
        )

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

        class MlflowCallback(BaseCallback):
            """Episode metrics and PPO losses to MLflow; periodic evaluation and checkpoints."""

            def __init__(self) -> None:
                super().__init__()
                self._next_eval = args.eval_freq

            def _on_step(self) -> bool:
                for info in self.locals.get("infos", []):
                    ep = info.get("episode")
                    if ep is None:
                        continue
                    metrics = {
                        "train/episode_return": float(ep["r"]),
                        "train/episode_length": float(ep["l"]),
                    }
                    for k in ("unallocated_gpu_pct_at_100", "n_failed"):
                        if k in info and np.isfinite(info[k]):
                            metrics[f"train/{k}"] = float(info[k])
                    mlflow.log_metrics(metrics, step=self.num_timesteps)
                if self.num_timesteps >= self._next_eval:
                    self._next_eval += args.eval_freq
                    do_eval(self.num_timesteps)
                    model.save(ckpt_dir / f"step_{self.num_timesteps}.zip")
                if (
                    args.max_minutes is not None
                    and time.perf_counter() - t_ppo > 60 * args.max_minutes
                ):
                    return False
                return True

            def _on_rollout_end(self) -> None:
                vals = {
                    f"losses/{k.split('/')[-1]}": float(v)
                    for k, v in self.model.logger.name_to_value.items()
                    if k.startswith("train/")
                }
                if vals:
                    mlflow.log_metrics(vals, step=self.num_timesteps)

        do_eval(0)  # the cloned policy is a candidate for "best" too
        t_ppo = time.perf_counter()
        if args.timesteps > 0:
            model.learn(
                total_timesteps=args.timesteps,
                callback=CallbackList([MlflowCallback()]),
                progress_bar=args.progress,
            )
            do_eval(model.num_timesteps)
        ppo_seconds = time.perf_counter() - t_ppo
        venv.close()

        # ------------------------------------------------------------------ export best
        from fleetmind.rl.export import load_sb3_model

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
            info = mlflow.pyfunc.log_model(
                name="model",
                python_model=PlacementPyfunc(),
                artifacts={"placement": str(model_dir)},
                pip_requirements=pip_requirements(),
                registered_model_name=REGISTERED_MODEL,
            )
            version = str(info.registered_model_version)
            promoted, prev = promote_if_better(mlflow.MlflowClient(), version, state["best"])
            summary["registry"] = {
                "model_uri": info.model_uri,
                "registered_model": REGISTERED_MODEL,
                "version": version,
                "champion": promoted,
                "previous_champion": prev,
            }
    if args.release:
        from fleetmind.rl.policy_adapter import RELEASED_DIR

        RELEASED_DIR.mkdir(parents=True, exist_ok=True)
        for f in model_dir.iterdir():
            shutil.copy2(f, RELEASED_DIR / f.name)
        summary["released"] = str(RELEASED_DIR)
    return summary


def run_dynamic(args: Args) -> dict[str, Any]:
    """Dynamic mode (``fleetmind/MultiClusterPlacement-v0``): see :mod:`training.sched_train_dynamic`."""
    from fleetmind.training.sched_train_dynamic import run_dynamic as run_dynamic_recipe

    return run_dynamic_recipe(args)
