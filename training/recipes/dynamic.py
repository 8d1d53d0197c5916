"""The dynamic-mode PPO training recipe: ``fleetmind sched train --mode dynamic``.

    fleetmind sched train --mode dynamic --trace default --trace gpushare40 --trace multigpu20 \
        --teacher cem --cem-seeds 1000 1001 --eval-seeds 1100 1101 --timesteps 20000 --n-envs 1

Steps (see ``docs/ppo-dynamic.md``):

1. Seeds everything; every env is ``fleetmind/MultiClusterPlacement-v0`` with the protocol's setting
   (:class:`fleetmind.rl.dynamic_eval.DynEvalConfig`: 10 % node sample, ``--dyn-jobs`` jobs, load 0.8).
2. Teacher: FGD (candidate 0, ``--teacher fgd``), a linear candidate scorer searched by the
   cross-entropy method on the training traces x ``--cem-seeds`` streams (``--teacher cem``,
   :mod:`fleetmind.rl.dynamic_teacher`), or a saved scorer JSON.
3. Imitation warm start: ``--bc-episodes`` teacher episodes per training trace (workload seeds
   ``seed + 2000 + i``) cloned into the MaskablePPO candidate scorer (:func:`fleetmind.rl.ppo.behaviour_clone`).
4. MaskablePPO fine-tuning (``--timesteps``, ``--max-minutes``) on ``--n-envs`` envs, in
   parallel processes (``SubprocVecEnv``, fork) when more than one (:func:`make_dyn_vec_env`) (each episode draws one training trace), with a periodic greedy validation on the
   training traces x ``--eval-seeds`` (objective ``J`` of :mod:`fleetmind.rl.dynamic_teacher`: mean slowdown
   relative to the better of FGD and LocalityAware per stream, plus the p99-queueing guard; the
   summary's ``metrics`` give that ``reference`` and FGD's own ``J``). The best policy (the clone
   included) is kept.
5. Exports the best policy (``policy.pt``, ``policy.onnx``, ``ppo.zip``, ``teacher.json``, with
   ``--teacher cem`` the search's final mean ``teacher_mean.json``, ``metadata.json`` with the
   commit and package versions under ``provenance``, ``model_card.md``) to ``<out>/<run>/model``
   and with ``--release`` to ``models/placement-dynamic/``. Logged to MLflow; not registered (the ``fleetmind-placement``
   champion is the fgd-mode model).

Multi-GPU search options (opt-in, :class:`DynSearchOptions`; ``docs/ppo-dynamic.md`` section 2
item 8): ``--cem-trace-seeds TRACE=SEEDS`` (more search streams on one trace),
``--cem-worst-weight`` (per-trace worst case in the objective), ``--cem-nonneg FEATURE``
(effective weight kept >= 0) and ``--cem-max-minutes`` (search time cap). They are stored in
``metadata.json`` under ``teacher_search`` only when one is set, so a default run writes the same
metadata as before.
"""

from __future__ import annotations

import json
import tempfile
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import gymnasium as gym
import mlflow
import numpy as np
from stable_baselines3.common.vec_env import DummyVecEnv, VecMonitor
from tqdm import tqdm

from fleetmind.data.errors import (
    ConfigError,
    FleetMindError,
)
from fleetmind.data.openb import load_openb_trace
from fleetmind.data.paths import MODELS_DIR
from fleetmind.envs.multicluster_env import (
    N_CAND_FEATURES,
    N_QUEUE_FEATURES,
    MultiClusterPlacementEnv,
)
from fleetmind.folders import RELEASE_MODEL_FILES, write_folder_whole
from fleetmind.progress import bar_disable
from fleetmind.provenance import artifact_provenance
from fleetmind.rl.callbacks import MlflowEvalCallback
from fleetmind.rl.dynamic_eval import DYNAMIC_FORMAT, DynEvalConfig
from fleetmind.rl.dynamic_teacher import (
    DEFAULT_INTERACT,
    REFERENCE_POLICIES,
    DynLinearScorer,
    StreamSet,
    cem_search_dynamic,
    nonneg_indices,
)
from fleetmind.rl.export import actor_from_model, export_policy, load_sb3_model, save_onnx
from fleetmind.rl.policy import count_parameters
from fleetmind.rl.ppo import TeacherData, collect_teacher, make_model
from fleetmind.rl.vec_workers import subproc_vec_env, worker_exit
from fleetmind.training.progress import timestep_bar
from fleetmind.training.recipes.common import (
    TrainingRun,
    check_loss_weights,
    check_run_limits,
    clone_teacher,
    hyperparams,
    log_cem_search,
    seed_everything,
    write_model_card,
)
from fleetmind.training.recipes.settings import DynamicArgs, check_release_target
from fleetmind.training.recipes.tracking import run_dirs, tracked_run

RELEASE_DIR = MODELS_DIR / "placement-dynamic"
"""Folder of the released dynamic-mode model."""


def make_dyn_vec_env(traces: list[str], env_kwargs: dict[str, Any], n_envs: int, seed: int) -> Any:
    """``VecMonitor`` over ``n_envs`` :class:`MultiTraceDynEnv` (env ``i`` seeded ``seed + i``):
    a ``SubprocVecEnv`` (one process per env, ``fork``) when ``n_envs`` > 1, else a
    ``DummyVecEnv``. The rollouts are the same either way; only where they run differs. A
    FleetMind error (``ConfigError``, ``DataError``...) in a worker process is raised in this
    process as the same error, with the worker's message (no pipe-error traceback)."""
    err_dir = tempfile.TemporaryDirectory(prefix="fleetmind-workers-") if n_envs > 1 else None

    def make_env(rank: int) -> Any:
        where = None if err_dir is None else err_dir.name

        def _make() -> Any:
            try:
                env = MultiTraceDynEnv(list(traces), error_dir=where, rank=rank, **env_kwargs)
                env.reset(seed=seed + rank)
            except FleetMindError as err:
                worker_exit(where, rank, err)
            env.action_space.seed(seed + rank)
            return env

        return _make

    fns = [make_env(i) for i in range(n_envs)]
    inner = DummyVecEnv(fns) if err_dir is None else subproc_vec_env(fns, err_dir)
    return VecMonitor(inner)


class MultiTraceDynEnv(gym.Env[np.ndarray, np.int64]):
    """``MultiClusterPlacement-v0`` over several traces: each ``reset`` draws one trace.

    Same spaces, ``action_masks()`` and ``n_candidates``/``n_cand_features``/``n_global_features``
    as :class:`fleetmind.envs.multicluster_env.MultiClusterPlacementEnv`, one of which (per trace) it drives;
    the trace and the episode's seed come from ``self.np_random``. With ``error_dir`` (a
    ``SubprocVecEnv`` worker, :func:`make_dyn_vec_env`), a FleetMind error in ``reset``/``step`` is
    left there for the parent (file ``worker-<rank>.txt``) and ends the process.
    """

    metadata = {"render_modes": []}

    def __init__(
        self,
        traces: list[str],
        error_dir: str | None = None,
        rank: int = 0,
        **env_kwargs: Any,
    ) -> None:
        if not traces:
            raise ConfigError("dynamic training needs at least one --trace")
        self._error_dir, self._rank = error_dir, int(rank)
        self.envs = [MultiClusterPlacementEnv(trace=t, **env_kwargs) for t in traces]
        e0 = self.envs[0]
        self.observation_space = e0.observation_space
        self.action_space = e0.action_space
        self.n_candidates = e0.n_candidates
        self.n_cand_features = e0.n_cand_features
        self.n_global_features = e0.n_global_features
        self._cur = e0

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        super().reset(seed=seed)
        self._cur = self.envs[int(self.np_random.integers(len(self.envs)))]
        try:
            return self._cur.reset(seed=int(self.np_random.integers(2**31 - 1)))
        except FleetMindError as err:
            worker_exit(self._error_dir, self._rank, err)
            raise

    def step(
        self, action: int | np.integer
    ) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        try:
            return self._cur.step(action)
        except FleetMindError as err:
            worker_exit(self._error_dir, self._rank, err)
            raise

    def action_masks(self) -> np.ndarray:
        """``(K,)`` bool mask of the current decision."""
        return self._cur.action_masks()


@dataclass
class DynSearchOptions:
    """Multi-GPU options of the CEM teacher search (all default = the released recipe)."""

    trace_seeds: dict[str, list[int]] = field(default_factory=dict)
    """per training trace, CEM workload seeds replacing ``--cem-seeds`` for that trace"""
    worst_weight: float = 0.0
    """weight of the per-trace worst case in the objective (``J4`` of :mod:`fleetmind.rl.dynamic_teacher`)"""
    nonneg: list[str] = field(default_factory=list)
    """candidate features whose effective teacher weight is kept >= 0 for every job"""
    max_minutes: float | None = None
    """end the search after the generation during which this much wall time passed"""

    def is_default(self) -> bool:
        return self == DynSearchOptions()

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any] | None) -> DynSearchOptions:
        """Inverse of :meth:`to_dict`; ``None`` (a metadata file without ``teacher_search``, e.g.
        the released model's) means the defaults."""
        if not d:
            return cls()
        return cls(
            trace_seeds={str(k): [int(x) for x in v] for k, v in d["trace_seeds"].items()},
            worst_weight=float(d["worst_weight"]),
            nonneg=[str(x) for x in d["nonneg"]],
            max_minutes=None if d["max_minutes"] is None else float(d["max_minutes"]),
        )

    def seeds_for(self, trace: str, cem_seeds: list[int]) -> list[int]:
        """The CEM seeds of one training trace."""
        return list(self.trace_seeds.get(str(trace), cem_seeds))

    def flags(self) -> str:
        """The CLI flags that reproduce these options ('' for the defaults)."""
        out = ""
        for t, ss in self.trace_seeds.items():
            out += f" --cem-trace-seeds {t}={','.join(map(str, ss))}"
        if self.worst_weight:
            out += f" --cem-worst-weight {self.worst_weight:g}"
        if self.nonneg:
            out += " --cem-nonneg " + " ".join(self.nonneg)
        if self.max_minutes is not None:
            out += f" --cem-max-minutes {self.max_minutes:g}"
        return out


def search_options(args: Any) -> DynSearchOptions:
    """The run's :class:`DynSearchOptions` from ``args`` (attributes ``cem_trace_seeds``,
    ``cem_worst_weight``, ``cem_nonneg``, ``cem_max_minutes``; missing ones = defaults), checked:
    :class:`ConfigError` names a bad value."""
    traces = [str(t) for t in args.traces]
    ts = {
        str(k): [int(x) for x in v]
        for k, v in (getattr(args, "cem_trace_seeds", None) or {}).items()
    }
    for t, ss in ts.items():
        if t not in traces:
            raise ConfigError(
                f"--cem-trace-seeds {t}=...: {t} is not a --trace ({', '.join(traces)})"
            )
        if not ss:
            raise ConfigError(f"--cem-trace-seeds {t}=...: no seeds")
    worst = float(getattr(args, "cem_worst_weight", 0.0) or 0.0)
    if not worst >= 0.0:
        raise ConfigError(f"--cem-worst-weight must be >= 0, got {worst}")
    nonneg = [str(f) for f in (getattr(args, "cem_nonneg", None) or [])]
    try:
        nonneg_indices(nonneg, _n_cand_features(args), DEFAULT_INTERACT)
    except ValueError as e:
        raise ConfigError(f"--cem-nonneg: {e}") from None
    mm = getattr(args, "cem_max_minutes", None)
    if mm is not None and not float(mm) > 0:
        raise ConfigError(f"--cem-max-minutes must be > 0, got {mm}")
    opts = DynSearchOptions(ts, worst, nonneg, None if mm is None else float(mm))
    if args.teacher != "cem" and not opts.is_default():
        raise ConfigError(
            "--cem-trace-seeds/--cem-worst-weight/--cem-nonneg/--cem-max-minutes need --teacher cem"
        )
    return opts


def build_search_streams(
    traces: list[str],
    cem_seeds: list[int],
    opts: DynSearchOptions,
    env_kwargs: dict[str, Any],
    envs: dict[str, Any],
) -> Any:
    """The CEM streams: every training trace x its seeds (:meth:`DynSearchOptions.seeds_for`),
    trace by trace; without ``trace_seeds`` exactly the released recipe's set."""
    if not opts.trace_seeds:
        return StreamSet.build(traces, cem_seeds, env_kwargs, envs)
    out = None
    for t in traces:
        part = StreamSet.build([t], opts.seeds_for(t, cem_seeds), env_kwargs, envs)
        out = part if out is None else out.extend(part)
    return out


def _env_kwargs(args: Any) -> dict[str, Any]:
    if args.dyn_jobs < 1:
        raise ConfigError(f"--dyn-jobs must be >= 1, got {args.dyn_jobs}")
    cfg = DynEvalConfig(
        n_jobs=int(args.dyn_jobs),
        n_candidates=int(args.n_candidates),
        queue_features=bool(getattr(args, "queue_features", False)),
    )
    return asdict(cfg)


def _n_cand_features(args: Any) -> int:
    """``F`` of the run's env: 14, or 18 with ``--queue-features``."""
    return N_CAND_FEATURES + (N_QUEUE_FEATURES if getattr(args, "queue_features", False) else 0)


def _teacher(
    args: Any, streams: Any, run_dir: Path, summary: dict[str, Any], progress: bool
) -> Any:
    """``None`` (FGD), a loaded or a CEM-searched :class:`fleetmind.rl.dynamic_teacher.DynLinearScorer`."""
    n_feat = _n_cand_features(args)
    if args.teacher == "fgd":
        return None
    if args.teacher != "cem":
        scorer = DynLinearScorer.load(args.teacher)
        if scorer.n_candidates != args.n_candidates or scorer.n_cand_features != n_feat:
            raise ConfigError(
                f"teacher {args.teacher} has K={scorer.n_candidates}, F={scorer.n_cand_features};"
                f" the run uses K={args.n_candidates}, F={n_feat}"
            )
        scorer.save(run_dir / "model" / "teacher.json")
        return scorer
    if args.cem_generations < 1 or args.cem_population < 2:
        raise ConfigError("--cem-generations must be >= 1 and --cem-population >= 2")
    opts = search_options(args)
    total = args.cem_generations * args.cem_population + 1
    bar = tqdm(total=total, desc="CEM teacher search", unit="vec", disable=bar_disable(progress))
    res = cem_search_dynamic(
        streams,
        args.n_candidates,
        n_feat,
        generations=args.cem_generations,
        population=args.cem_population,
        n_elite=max(1, min(4, args.cem_population // 3)),
        seed=args.seed,
        progress=bar.update,
        worst=opts.worst_weight,
        nonneg=opts.nonneg,
        max_minutes=opts.max_minutes,
    )
    bar.close()
    log_cem_search(res, run_dir)
    if res.mean is not None:  # the final search mean, beside the best vector (never cloned here)
        res.mean.save(run_dir / "model" / "teacher_mean.json")
    summary["cem"] = {
        "objective_fgd": res.fgd_score,
        "objective_teacher": res.best_score,
        "episodes": res.episodes,
        "history": res.history,
    }
    if not opts.is_default():
        summary["cem"]["options"] = opts.to_dict()
        summary["cem"]["stopped_early"] = res.stopped_early
        summary["cem"]["teacher_trace_ratios"] = streams.trace_ratios(streams.run(res.best))
    return res.best


def _collect(envs: dict[str, Any], args: Any, teacher: Any, gamma: float, bar: Any) -> Any:
    """Teacher demonstrations: ``bc_episodes`` whole episodes per training trace (``envs``: one
    env per trace name)."""
    parts = []
    for i, t in enumerate(args.traces):
        env = envs[str(t)]
        parts.append(
            collect_teacher(
                env,
                args.bc_episodes,
                args.seed + 2000 + 100 * i,
                gamma,
                teacher=teacher,
                progress=bar.update,
            )
        )
    return TeacherData(
        np.concatenate([p.obs for p in parts]),
        np.concatenate([p.masks for p in parts]),
        np.concatenate([p.actions for p in parts]),
        np.concatenate([p.returns for p in parts]),
    )


def episode_metrics(info: Mapping[str, Any]) -> dict[str, float]:
    """MLflow metrics of one finished training episode (none without the env's ``metrics``)."""
    if "metrics" not in info:
        return {}
    return {
        "train/episode_return": float(info["episode"]["r"]),
        "train/mean_slowdown": float(info["metrics"]["mean_slowdown"]),
    }


@dataclass
class _Run(TrainingRun):
    """One dynamic-mode training run in progress (:class:`TrainingRun`), with its validation
    streams; ``state`` also keeps the best validation's ``best_metrics``."""

    opts: Any = None
    """the teacher search's options (:class:`DynSearchOptions`)"""
    envs: dict[str, Any] = field(default_factory=dict)
    val: Any = None
    """validation streams: training traces x eval seeds"""
    ref: dict[str, Any] = field(default_factory=dict)
    """the objective's unit on the validation streams: per stream the better of
    :data:`fleetmind.rl.dynamic_teacher.REFERENCE_POLICIES` (``objective`` 1.0 by definition)"""
    fgd: dict[str, float] = field(default_factory=dict)
    """FGD alone on the validation streams (its ``objective`` is >= 1 when LocalityAware beats it)"""

    def evaluate(self, act: Any) -> dict[str, float]:
        """``act`` on the validation streams: objective, mean slowdown and p99 queue delay."""
        ms = self.val.run(act)
        return {
            "objective": self.val.objective(ms),
            "mean_slowdown": float(np.mean([m["mean_slowdown"] for m in ms])),
            "p99_queue_delay_s": float(np.mean([m["p99_queue_delay_s"] for m in ms])),
        }

    def evaluate_policy(self, step: int) -> None:
        """Validate the policy being trained; keep it as ``best.zip`` when it is the best yet."""
        m = self.evaluate(actor_from_model(self.model).predict)
        mlflow.log_metrics({f"eval/ppo_{k}": v for k, v in m.items()}, step=step)
        self.state["history"].append({"step": step, **m})
        if m["objective"] < self.state["best"]:
            self.state.update(best=m["objective"], best_step=step, best_metrics=m)
            self.model.save(self.ckpt_dir / "best.zip")


def _check(args: DynamicArgs) -> DynSearchOptions:
    """Every trace read and every setting checked before anything is written (MLflow run, run
    folder): a typo is one line. Returns the teacher search's options."""
    for t in dict.fromkeys(args.traces):
        load_openb_trace(t)
    if args.timesteps < 0 or args.n_envs < 1:
        raise ConfigError("--timesteps must be >= 0 and --n-envs >= 1")
    check_run_limits(args)
    if args.teacher == "cem" and (args.cem_generations < 1 or args.cem_population < 2):
        raise ConfigError("--cem-generations must be >= 1 and --cem-population >= 2")
    if args.teacher not in ("fgd", "cem"):
        DynLinearScorer.load(args.teacher)  # fail fast (ModelLoadError) before any simulation
    opts = search_options(args)  # fail fast (ConfigError) too
    check_loss_weights(args.bc_value_coef, args.vf_coef)
    return opts


REFERENCE_LABEL = (
    f"per stream the better of {' and '.join(REFERENCE_POLICIES)} (lower mean slowdown)"
)
"""What the validation objective's unit (``J`` = 1.0) is, as the summary's ``reference`` says."""


def _means(ms: list[dict[str, float]]) -> dict[str, float]:
    """Mean slowdown and mean p99 queueing delay (s) over the metrics of several streams."""
    return {
        "mean_slowdown": float(np.mean([m["mean_slowdown"] for m in ms])),
        "p99_queue_delay_s": float(np.mean([m["p99_queue_delay_s"] for m in ms])),
    }


def _references(r: _Run) -> None:
    """Log the env settings (and a non-default search); build the validation streams, the
    objective's unit on them (the reference) and FGD's own result."""
    a = r.args
    mlflow.log_params({f"env/{k}": v for k, v in r.env_kwargs.items()})
    if not r.opts.is_default():
        mlflow.log_params({f"search/{k}": json.dumps(v) for k, v in r.opts.to_dict().items()})
    # validation streams (training traces x eval seeds) and CEM streams (x cem seeds)
    r.val = StreamSet.build(a.traces, a.eval_seeds, r.env_kwargs, r.envs)
    r.ref = {"policy": REFERENCE_LABEL, "objective": 1.0, **_means(r.val.ref)}
    r.fgd = {"objective": r.val.objective(r.val.fgd), **_means(r.val.fgd)}
    mlflow.log_metrics(
        {
            "eval/fgd_mean_slowdown": r.fgd["mean_slowdown"],
            "eval/fgd_objective": r.fgd["objective"],
            "eval/reference_mean_slowdown": r.ref["mean_slowdown"],
        },
        step=0,
    )


def _warm_start(r: _Run) -> None:
    """The teacher (searched or loaded), then the model cloned from its demonstrations; saved as
    ``clone.onnx`` (policy name ``clone``)."""
    a, progress = r.args, bool(r.args.progress)
    teacher = None
    if a.teacher != "fgd":
        streams = (
            build_search_streams(list(a.traces), list(a.cem_seeds), r.opts, r.env_kwargs, r.envs)
            if a.teacher == "cem"
            else None
        )
        teacher = _teacher(a, streams, r.dir, r.summary, progress)
    if teacher is not None:
        r.summary["teacher_eval"] = r.evaluate(teacher)
        mlflow.log_metrics(
            {f"eval/teacher_{k}": v for k, v in r.summary["teacher_eval"].items()}, step=0
        )
    r.venv = make_dyn_vec_env(list(a.traces), r.env_kwargs, a.n_envs, a.seed)
    r.venv.seed(a.seed)
    r.model = make_model(r.venv, r.hp, a.seed)
    mlflow.log_param("n_parameters", count_parameters(r.model.policy))
    if a.bc_episodes > 0:
        bar = tqdm(desc="teacher demonstrations", unit="step", disable=bar_disable(progress))
        data = _collect(r.envs, a, teacher, r.hp.gamma, bar)
        bar.close()
        r.summary["bc"] = clone_teacher(r.model, data, a)
    save_onnx(actor_from_model(r.model), r.dir / "model" / "clone.onnx")


def _learn(r: _Run) -> None:
    """MaskablePPO from the clone, validated every ``eval_freq`` steps (the clone and the last
    policy too); the last policy is saved as ``final.onnx`` whichever one is kept as best."""
    a = r.args
    r.evaluate_policy(0)  # the cloned policy competes for "best" too
    t_ppo = time.perf_counter()
    if a.timesteps > 0:
        callback = MlflowEvalCallback(
            r.evaluate_policy, a.eval_freq, episode_metrics, max_minutes=a.max_minutes
        )
        # SB3's own bar (progress_bar=True) draws on stdout, where `sched train` prints its JSON
        r.model.learn(a.timesteps, callback=[callback, timestep_bar(bool(a.progress))])
        if r.state["history"][-1]["step"] != r.model.num_timesteps:
            r.evaluate_policy(r.model.num_timesteps)
        save_onnx(actor_from_model(r.model), r.dir / "model" / "final.onnx")
    r.ppo_seconds = time.perf_counter() - t_ppo
    r.venv.close()


def _command(args: DynamicArgs, env_kwargs: dict[str, Any], opts: DynSearchOptions) -> str:
    """The ``sched train`` flags of the run, as its model card records them."""
    return (
        "--mode dynamic"
        + "".join(f" --trace {t}" for t in args.traces)
        + f" --dyn-jobs {args.dyn_jobs} --teacher {args.teacher}"
        + (" --queue-features" if env_kwargs.get("queue_features") else "")
        + (
            f" --cem-generations {args.cem_generations} --cem-population {args.cem_population}"
            f" --cem-seeds {' '.join(map(str, args.cem_seeds))}" + opts.flags()
            if args.teacher == "cem"
            else ""
        )
        + f" --bc-episodes {args.bc_episodes} --bc-target-ce {args.bc_target_ce:g}"
        + (f" --bc-value-coef {args.bc_value_coef:g}" if args.bc_value_coef != 0.5 else "")
        + (f" --vf-coef {args.vf_coef:g}" if args.vf_coef != 0.5 else "")
        + f" --timesteps {args.timesteps} --n-envs {args.n_envs} --seed {args.seed}"
        + f" --eval-seeds {' '.join(map(str, args.eval_seeds))} --eval-freq {args.eval_freq}"
        + (f" --max-minutes {args.max_minutes:g}" if args.max_minutes else "")
    )


def _export(r: _Run) -> Path:
    """The best policy exported to ``<run>/model`` with its metadata and card, logged to MLflow;
    returns that folder."""
    a, summary = r.args, r.summary
    best_model = load_sb3_model(r.ckpt_dir / "best.zip")
    model_dir = r.dir / "model"
    export_policy(best_model, model_dir)
    best_model.save(model_dir / "ppo.zip")
    wall = time.perf_counter() - r.t_start
    meta = {
        "format": DYNAMIC_FORMAT,
        "version": r.name,
        "mode": "dynamic",
        "env_id": "fleetmind/MultiClusterPlacement-v0",
        "env_kwargs": r.env_kwargs,
        "train_traces": list(a.traces),
        "teacher": a.teacher,
    }
    if not r.opts.is_default():
        meta["teacher_search"] = r.opts.to_dict()
    meta["provenance"] = artifact_provenance(("gymnasium",))  # commit and versions, as RCA's
    (model_dir / "metadata.json").write_text(json.dumps(meta, indent=1) + "\n")
    card = {
        "run": r.name,
        "env": "fleetmind/MultiClusterPlacement-v0 (dynamic mode)",
        "env_kwargs": r.env_kwargs,
        "command": _command(a, r.env_kwargs, r.opts),
        "train_traces": list(a.traces),
        "teacher": a.teacher,
        "teacher_search (objective J on its streams: FGD -> teacher)": (
            f"{summary['cem']['objective_fgd']:.4f} -> {summary['cem']['objective_teacher']:.4f}"
            if "cem" in summary
            else "-"
        ),
        "bc_samples": summary.get("bc", {}).get("samples", 0),
        "ppo_timesteps": int(r.model.num_timesteps),
        "best_step": r.state["best_step"],
        "validation (train traces x eval seeds)": r.state.get("best_metrics", {}),
        _step0_label(a.bc_episodes > 0): _step0_metrics(r.state["history"]),
        "validation_fgd_mean_slowdown": round(r.fgd["mean_slowdown"], 4),
        "validation_fgd_objective": round(r.fgd["objective"], 4),
        "wall_time_s": round(wall, 1),
        "ppo_wall_time_s": round(r.ppo_seconds, 1),
        "parameters": count_parameters(best_model.policy),
        "hyperparameters": asdict(r.hp),
    }
    write_model_card(model_dir, card)
    _retitle_card(model_dir / "model_card.md")
    mlflow.log_metrics({"final/wall_time_s": wall, "final/eval_objective": r.state["best"]})
    mlflow.log_artifacts(str(model_dir), artifact_path="placement-dynamic")
    summary.update(
        metrics={"ppo": r.state.get("best_metrics", {}), "reference": r.ref, "fgd": r.fgd},
        best_step=r.state["best_step"],
        history=r.state["history"],
        timesteps=int(r.model.num_timesteps),
        wall_time_s=round(wall, 1),
        artifact=str(model_dir),
    )
    return model_dir


def _step0_label(cloned: bool) -> str:
    """The card's field for step 0's validation: the clone's, or with ``--bc-episodes 0`` the
    untrained initial policy's."""
    return "validation_clone (step 0)" if cloned else "validation_initial (step 0, nothing cloned)"


def _step0_metrics(history: list[dict[str, Any]]) -> dict[str, float]:
    """Step 0's validation metrics (objective, mean slowdown, p99 queue delay in s) from the
    run's evaluation history; empty when step 0 was not evaluated."""
    row = next((h for h in history if h.get("step") == 0), {})
    return {k: v for k, v in row.items() if k != "step"}


def _release(model_dir: Path, summary: dict[str, Any]) -> None:
    """Write the exported model's files and the run summary (``train_summary.json``) to
    ``models/placement-dynamic/`` all at once (:func:`fleetmind.folders.write_folder_whole`: a
    failed write leaves the earlier release as it was; its model files this run does not write,
    :data:`fleetmind.folders.RELEASE_MODEL_FILES`, are removed: its teacher would be scored as this
    model's; every other entry stays)."""
    files: dict[str, Path | str] = {f.name: f for f in sorted(model_dir.iterdir()) if f.is_file()}
    files["train_summary.json"] = json.dumps(summary, indent=1, default=str) + "\n"
    write_folder_whole(RELEASE_DIR, files, remove=RELEASE_MODEL_FILES)
    summary["released"] = str(RELEASE_DIR.resolve())


def run(args: DynamicArgs) -> dict[str, Any]:
    """The dynamic-mode recipe (module docstring): warm start, learn, export (and release; the
    dynamic model is logged to MLflow, not registered). Returns the JSON summary."""
    opts = _check(args)
    if args.release:  # before the training: a pip install's released model is the package's
        check_release_target(RELEASE_DIR)
    seed_everything(args.seed, args.threads)
    t_start = time.perf_counter()
    env_kwargs, hp = _env_kwargs(args), hyperparams(args)  # --dyn-jobs checked before any write
    for t in dict.fromkeys(args.traces):  # a trace no stream of which has a decision: one line
        MultiClusterPlacementEnv(trace=t, **env_kwargs).check_jobs_fit()
    run_name, run_dir, ckpt_dir = run_dirs(args, "MultiClusterPlacement-v0")
    (run_dir / "model").mkdir(parents=True, exist_ok=True)
    summary: dict[str, Any] = {"run_name": run_name, "mode": "dynamic"}
    r = _Run(args, run_name, run_dir, ckpt_dir, env_kwargs, hp, summary, t_start, opts=opts)
    with tracked_run(args, run_name, summary):
        _references(r)
        _warm_start(r)
        _learn(r)
        model_dir = _export(r)
        if args.release:
            _release(model_dir, summary)
    return summary


def _retitle_card(path: Path) -> None:
    """The shared card writer describes fgd mode; point its header at dynamic mode."""
    text = path.read_text()
    text = (
        text.replace(
            "# fleetmind-placement: PPO GPU placement agent",
            "# fleetmind-placement-dynamic: PPO placement agent for dynamic mode",
        )
        .replace(
            "# fleetmind-placement: GPU placement agent, ",  # the clone or the initial policy kept
            "# fleetmind-placement-dynamic: placement agent for dynamic mode, ",
        )
        .replace(
            "`fleetmind/GpuPlacement-v0` (fgd mode, openb GPU nodes)",
            "`fleetmind/MultiClusterPlacement-v0` (dynamic mode, see `docs/ppo-dynamic.md`)",
        )
        .replace("`rl/teacher.py`", "`rl/dynamic_teacher.py`")
        .replace(
            "(see `docs/ppo.md` and\n`envs/candidates.py`)",
            "(see `docs/ppo-dynamic.md` and\n`envs/multicluster_env.py`)",
        )
    )
    path.write_text(text)
