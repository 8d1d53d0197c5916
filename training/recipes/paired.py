"""Paired, critic-free PPO over the dynamic-mode clone: ``fleetmind sched train --algo paired``.

    fleetmind sched train --mode dynamic --algo paired --trace default \
        --init models/placement-dynamic --iterations 40 --group-size 6 --workloads-per-iter 2 \
        --val-streams 30 --val-every 5 --max-minutes 30

Steps (see ``docs/ppo-dynamic.md``, section "Paired PPO"; the algorithm is :mod:`fleetmind.rl.paired`):

1. Loads the clone of ``--init`` (a dynamic-mode model folder, default the released one) twice:
   a frozen reference and the learner. The env setting is the model's own (``metadata.json``);
   training episodes may be shorter (``--dyn-jobs``), validation uses the model's setting.
2. Every iteration draws ``--workloads-per-iter`` fresh workloads: a variant of a ``--trace``
   made by ``fleetmind sched variants``' generator (kinds cycled over cpu, gpushare, gpuspec,
   multigpu; level uniform over the published range of the kind, a multigpu one at least the
   source's own share; generator seed
   :data:`TRAIN_GEN_SEED` + ...) and a stream seed (:data:`TRAIN_STREAM_SEED` + ...). Neither
   range meets the validation ranges (for any ``--seed``: seeds >= 1 skip
   :data:`PAIRED_SEED_SHIFT` blocks), the frozen evaluation set (generator seeds
   20261201-20261208, stream seeds 7301-7310), the pre-set held-out seeds 42-51 or the headroom
   benchmark's variants.
3. On each workload the greedy clone runs once and the learner samples ``--group-size`` episodes
   on the same stream; one :func:`fleetmind.rl.paired.ppo_update` follows (gamma 1, group-relative
   advantages, KL to the clone, no value loss).
4. Every ``--val-every`` iterations the greedy learner and the greedy clone run on
   ``--val-streams`` validation workloads (own generator and stream seed ranges, the same for
   every training seed). The checkpoint kept is the one with the lowest mean paired slowdown
   ratio to the clone among those whose mean p99 queueing-delay ratio is <= 1; the clone itself
   (ratio 1) competes.
5. Exports ``policy.pt``/``policy.onnx`` (the kept checkpoint), ``final.onnx`` (the last),
   ``clone.onnx``/``clone.pt``, the init's ``teacher.json``, ``metadata.json``, ``model_card.md``
   and ``train_summary.json`` to ``<out>/<run>/model``; with ``--release`` to
   ``models/placement-dynamic/``. MLflow: per iteration ``paired/sample_gap_pct`` (sampled
   episodes vs clone, same workloads), ``paired/kl_clone``, ``paired/clip_frac``; per validation
   ``val/gap_pct`` and ``val/p99_ratio``.
"""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from functools import partial
from pathlib import Path
from typing import Any, ClassVar

import mlflow
import numpy as np
import torch
from tqdm import tqdm

from fleetmind.data.errors import ConfigError
from fleetmind.data.openb import load_openb_trace
from fleetmind.data.openb_variants import (
    PUBLISHED_LEVELS,
    VARIANT_KINDS,
    generate_variant,
    lowest_multigpu_level,
    write_variant,
)
from fleetmind.envs.multicluster_env import MultiClusterPlacementEnv
from fleetmind.folders import RELEASE_MODEL_FILES, write_folder_whole
from fleetmind.progress import bar_disable
from fleetmind.provenance import artifact_provenance
from fleetmind.rl.dynamic_eval import DYNAMIC_FORMAT, DynEvalConfig, Workload, model_config
from fleetmind.rl.export import save_onnx, save_torch
from fleetmind.rl.paired import (
    BASELINES,
    PairedHyperparams,
    greedy_metrics,
    greedy_metrics_job,
    load_clone,
    paired_iteration,
    paired_iteration_as_jobs,
    trainable_copy,
)
from fleetmind.rl.scaleout import job_path, run_tasks
from fleetmind.training.io import write_json
from fleetmind.training.recipes.common import check_max_minutes, seed_everything
from fleetmind.training.recipes.flags import recipe_group_kwargs
from fleetmind.training.recipes.settings import (
    DYNAMIC_RELEASE_DIR,
    DistillArgs,
    EsArgs,
    PairedArgs,
    check_release_target,
)
from fleetmind.training.recipes.tracking import tracked_run

SEED_BLOCK = 100_000
"""Workloads one training seed (and the validation set) may number: the width of a seed's range."""
TRAIN_GEN_SEED = 31_000_000
"""Variant generator seeds of training workloads: ``TRAIN_GEN_SEED + seed_offset(seed) + i``."""
TRAIN_STREAM_SEED = 600_000
"""Stream seeds of training workloads: ``TRAIN_STREAM_SEED + seed_offset(seed) + i``."""
VAL_GEN_SEED = 32_000_000
"""Variant generator seeds of validation workloads: ``VAL_GEN_SEED + i``."""
VAL_STREAM_SEED = 700_000
"""Stream seeds of validation workloads: ``VAL_STREAM_SEED + i``."""
PAIRED_SEED_SHIFT = 10
"""Blocks that paired PPO's training seeds >= 1 skip (:func:`seed_offset`): with a plain
``100_000 * seed`` ``--seed 1`` trained on the validation stream seeds and ``--seed 10`` on the
validation generator seeds (both used until 2026-12-06); seed 0's ranges are unchanged."""
LEVEL_RANGE = {k: (min(v), max(v)) for k, v in PUBLISHED_LEVELS.items()}
"""Level range of each variant kind (the published levels' span, %)."""


def _hyperparams(args: PairedArgs) -> PairedHyperparams:
    """The update's hyperparameters (:mod:`fleetmind.rl.paired`) from the run's settings."""
    return PairedHyperparams(
        group_size=args.group_size,
        learning_rate=args.learning_rate,
        clip_range=args.clip_range,
        kl_coef=args.kl_coef,
        n_epochs=args.n_epochs,
        batch_size=args.batch_size,
        baseline=args.baseline,
    )


def _check(args: PairedArgs) -> None:
    """:class:`ConfigError` naming the first bad setting."""
    check_learner(
        args,
        {
            "--iterations": (args.iterations, 0),
            "--workloads-per-iter": (args.workloads_per_iter, 1),
            "--group-size": (args.group_size, 2),
        },
        {"--lr": args.learning_rate, "--kl-coef": args.kl_coef},
    )
    if args.baseline not in BASELINES:
        raise ConfigError(f"--baseline must be one of {', '.join(BASELINES)}")
    if args.seed < 0:
        raise ConfigError(f"--seed must be >= 0, got {args.seed}")
    if args.iterations * args.workloads_per_iter > SEED_BLOCK:
        raise ConfigError(
            f"--iterations x --workloads-per-iter must be <= {SEED_BLOCK:,} (one seed's range of "
            f"workload seeds), got {args.iterations * args.workloads_per_iter:,}"
        )
    if args.val_streams > SEED_BLOCK:
        raise ConfigError(f"--val-streams must be <= {SEED_BLOCK:,}, got {args.val_streams:,}")


def check_learner(
    args: PairedArgs | DistillArgs | EsArgs,
    ints: dict[str, tuple[int, int]],
    rates: dict[str, float],
) -> None:
    """:class:`ConfigError` naming the first bad setting of a dynamic-mode learner.

    Args:
        args: the run's settings (their validation and job-count fields are checked here too).
        ints: ``flag -> (value, smallest allowed)``.
        rates: ``flag -> value`` that must be a finite number >= 0.
    """
    ints = {
        **ints,
        "--val-streams": (args.val_streams, 1),
        "--val-every": (args.val_every, 1),
    }
    for flag, (v, lo) in ints.items():
        if v < lo:
            raise ConfigError(f"{flag} must be >= {lo}, got {v}")
    check_max_minutes(args.max_minutes)
    for flag, v in (("--dyn-jobs", args.dyn_jobs), ("--val-jobs", args.val_jobs)):
        if v is not None and v < 1:
            raise ConfigError(f"{flag} must be >= 1, got {v}")
    for flag, x in rates.items():
        if not (np.isfinite(x) and x >= 0):
            raise ConfigError(f"{flag} must be a finite number >= 0, got {x}")
    bad = [k for k in args.kinds if k not in VARIANT_KINDS]
    if bad or not args.kinds:
        raise ConfigError(f"variant kinds must be among {', '.join(VARIANT_KINDS)}, got {bad}")


def variant_file(source: str, kind: str, level: float, gen_seed: int, folder: Path) -> Path:
    """The CSV of a fresh variant (``fleetmind sched variants``' generator) of ``source`` in
    ``folder``, written on first use; an absolute path."""
    path = (folder / f"{Path(str(source)).stem}-{kind}{level:.1f}-s{gen_seed}.csv").resolve()
    if not path.is_file():
        write_variant(path, generate_variant(kind, level, gen_seed, source=source))
    return path


def make_workload(
    source: str, kind: str, level: float, gen_seed: int, cfg: DynEvalConfig, folder: Path
) -> MultiClusterPlacementEnv:
    """An env on a fresh variant (:func:`variant_file`) of ``source``."""
    path = variant_file(source, kind, level, gen_seed, folder)
    return MultiClusterPlacementEnv(**cfg.env_kwargs(load_openb_trace(path)))


def workload_specs(
    traces: list[str],
    kinds: list[str],
    n: int,
    gen_base: int,
    rng: np.random.Generator,
    offset: int = 0,
) -> list[tuple[str, str, float, int]]:
    """``n`` workload specs ``(source, kind, level, generator seed)``: workload ``i`` has kind
    ``kinds[(offset + i) % len(kinds)]``, a level drawn uniformly over :data:`LEVEL_RANGE`
    (rounded to 0.5), source ``traces[(offset + i) // len(kinds) % len(traces)]`` and generator
    seed ``gen_base + i``. A ``multigpu`` level is at least the source's own multi-GPU share
    (:func:`fleetmind.data.openb_variants.lowest_multigpu_level`: copies only raise it, so a draw
    below it, e.g. 20-40 for ``multigpu40`` at 40.24 %, gives the source's pods unchanged); the
    draw is made all the same, so the levels of other workloads do not move."""
    out = []
    floor: dict[str, float] = {}  # source -> its lowest multigpu level, read once per call
    for i in range(n):
        j = offset + i
        kind = kinds[j % len(kinds)]
        lo, hi = LEVEL_RANGE[kind]
        level = round(float(rng.uniform(lo, hi)) * 2) / 2
        source = str(traces[(j // len(kinds)) % len(traces)])
        if kind == "multigpu":
            if source not in floor:
                floor[source] = lowest_multigpu_level(source)
            level = max(level, floor[source])
        out.append((source, kind, level, gen_base + i))
    return out


def _ratio_ci(ratios: np.ndarray, seed: int = 0, n_boot: int = 2000) -> tuple[float, float]:
    """95 % percentile-bootstrap interval of the mean of ``ratios`` - 1, in %."""
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, len(ratios), (n_boot, len(ratios)))
    means = ratios[idx].mean(axis=1)
    return float(100 * (np.percentile(means, 2.5) - 1)), float(
        100 * (np.percentile(means, 97.5) - 1)
    )


def run(args: PairedArgs) -> dict[str, Any]:
    """The paired-PPO recipe (module docstring). Returns the JSON summary."""
    _check(args)
    if args.release:  # before the training: a pip install's released model is the package's
        check_release_target(DYNAMIC_RELEASE_DIR)
    r = LearnerRun.start(args, "paired")
    hp = _hyperparams(args)
    actor = trainable_copy(r.clone)
    learner = _Learner(
        args,
        hp,
        r.train_cfg,
        r.var_dir,
        actor,
        r.clone,
        torch.optim.Adam(actor.parameters(), lr=hp.learning_rate),
        rng=np.random.default_rng([args.seed, 1]),
        gen=torch.Generator().manual_seed(args.seed),
        spec_rng=np.random.default_rng([args.seed, 2]),
    )

    with tracked_run(args, r.run_name, r.summary):
        n_train_eps = args.iterations * args.workloads_per_iter * (hp.group_size + 1)
        bar, val = r.validator(args, n_train_eps, "paired PPO", actor)
        done_its = learner.learn(val, bar, r.t0)
        bar.close()

        _export(actor, r.clone, val.best_state, r.model_dir, args, r.run_name, r.base_cfg)
        wall, best_val = r.finish(val, done_its, learner.history, asdict(hp), command_line(args))
        _publish(r.model_dir, args, r.summary, wall, best_val["gap_pct"])
    return r.summary


@dataclass
class LearnerRun:
    """What a dynamic-mode learner's run over a model's clone sets up and reports: the start
    model, the env settings, the run's folders and its JSON summary (:meth:`start`,
    :meth:`validator`, :meth:`finish`)."""

    algo: str
    init: Path
    """the start model folder (``--init``, default the released one)"""
    clone: Any
    base_cfg: DynEvalConfig
    """the start model's own env setting (validation and export)"""
    train_cfg: DynEvalConfig
    val_cfg: DynEvalConfig
    run_name: str
    model_dir: Path
    var_dir: Path
    """where the fresh variants' CSVs go"""
    summary: dict[str, Any]
    t0: float
    """``time.perf_counter()`` at the start (``--max-minutes``)"""
    val_specs: list[tuple[str, str, float, int]] = field(default_factory=list)
    val_seeds: list[int] = field(default_factory=list)

    @classmethod
    def start(cls, args: PairedArgs | DistillArgs | EsArgs, algo: str) -> LearnerRun:
        """Check the traces (a typo is one line, before anything is written), load the clone,
        seed everything and make the run's folder."""
        for t in dict.fromkeys(args.traces):
            load_openb_trace(t)
        init = Path(args.init) if args.init else DYNAMIC_RELEASE_DIR
        clone = load_clone(init)
        base_cfg = model_config(init)
        seed_everything(args.seed, args.threads)
        run_name = f"MultiClusterPlacement-v0__{algo}__{args.seed}__{int(time.time())}"
        model_dir = Path(args.out) / run_name / "model"
        model_dir.mkdir(parents=True, exist_ok=True)
        return cls(
            algo,
            init,
            clone,
            base_cfg,
            replace(base_cfg, n_jobs=int(args.dyn_jobs or base_cfg.n_jobs)),
            replace(base_cfg, n_jobs=int(args.val_jobs or base_cfg.n_jobs)),
            run_name,
            model_dir,
            Path(args.out) / "variants",
            {"run_name": run_name, "mode": "dynamic", "algo": algo},
            time.perf_counter(),
        )

    def validator(
        self,
        args: PairedArgs | DistillArgs | EsArgs,
        n_train: int,
        desc: str,
        actor: Any,
        cls: type[_Validator] | None = None,
    ) -> tuple[Any, _Validator]:
        """Inside the MLflow run: log the env, build the validation workloads, a progress bar of
        ``n_train`` training episodes plus the validations, and the validator (``cls``, default
        :class:`_Validator`) with the clone's runs done."""
        mlflow.log_params({f"env/{k}": v for k, v in asdict(self.train_cfg).items()})
        specs, envs, seeds = validation_workloads(args, self.val_cfg, self.var_dir)
        self.val_specs, self.val_seeds = specs, seeds
        n_val = validation_episodes(args)
        bar = tqdm(
            total=n_train + n_val, desc=desc, unit="episode", disable=bar_disable(args.progress)
        )
        runner = validation_runner(args, self.clone, specs, seeds, self.val_cfg, self.var_dir)
        val = (cls or _Validator).start(envs, seeds, self.clone, actor, bar, runner=runner)
        return bar, val

    def finish(
        self,
        val: _Validator,
        iterations: int,
        history: list[dict[str, Any]],
        hyperparameters: dict[str, Any],
        command: str,
    ) -> tuple[float, dict[str, Any]]:
        """Fill the summary after training; returns ``(wall time s, the kept validation row)``."""
        wall = time.perf_counter() - self.t0
        best = next(v for v in val.rows if v["iteration"] == val.best_iteration)
        pairs = zip(self.val_specs, self.val_seeds, strict=True)
        self.summary.update(
            iterations=iterations,
            best_iteration=val.best_iteration,
            validation=val.rows,
            validation_best=best,
            history=history,
            hyperparameters=hyperparameters,
            train_env=asdict(self.train_cfg),
            val_env=asdict(self.val_cfg),
            val_workloads=[list(s) + [sd] for s, sd in pairs],
            wall_time_s=round(wall, 1),
            artifact=str(self.model_dir),
            command=command,
            metrics={
                f"{self.algo}_val_gap_pct": best["gap_pct"],
                "ci_pct": best["ci_pct"],
            },
        )
        return wall, best


def iterate(
    args: PairedArgs | DistillArgs | EsArgs,
    t0: float,
    step: Callable[[int], None],
    validate: Callable[[int], None],
) -> int:
    """``step(it)`` for iterations 1 to ``--iterations``, or until ``--max-minutes`` have passed
    since ``t0`` (``time.perf_counter()``); ``validate(it)`` after every ``--val-every``-th, the
    last and the one that runs out of time. Returns the number run."""
    done_its = 0
    for it in range(1, args.iterations + 1):
        step(it)
        done_its = it
        out_of_time = (
            args.max_minutes is not None and time.perf_counter() - t0 > 60 * args.max_minutes
        )
        if it % args.val_every == 0 or it == args.iterations or out_of_time:
            validate(it)
        if out_of_time:
            break
    return done_its


def validation_episodes(args: PairedArgs | DistillArgs | EsArgs) -> int:
    """Validation episodes of a run that goes the whole ``--iterations`` (the progress bar's
    share): ``--val-streams`` for the clone at the start, then as many after each validated
    iteration of :func:`iterate` (every ``--val-every``-th and the last: ``ceil(iterations /
    val_every)`` of them)."""
    validated = -(-args.iterations // args.val_every)  # ceil
    return args.val_streams * (1 + validated)


def seed_offset(seed: int, shift: int = 0) -> int:
    """First workload number of training seed ``seed``: ``SEED_BLOCK * seed``, plus ``SEED_BLOCK *
    shift`` for seeds >= 1 (seed 0 stays at 0)."""
    return SEED_BLOCK * (seed + (shift if seed > 0 else 0))


def iteration_specs(
    args: PairedArgs | DistillArgs | EsArgs,
    it: int,
    gen_seed: int,
    spec_rng: np.random.Generator,
    shift: int = 0,
) -> tuple[int, list[tuple[str, str, float, int]]]:
    """``(offset, specs)`` of iteration ``it``'s fresh training workloads: ``offset`` =
    ``seed_offset(seed, shift) + (it - 1) * workloads_per_iter`` numbers the workloads of the run
    (paired PPO passes :data:`PAIRED_SEED_SHIFT`; the other learners 0), ``specs`` are ``(source,
    kind, level, generator seed)`` drawn with generator seeds from ``gen_seed + offset``."""
    off = seed_offset(args.seed, shift) + (it - 1) * args.workloads_per_iter
    specs = workload_specs(
        list(args.traces),
        list(args.kinds),
        args.workloads_per_iter,
        gen_seed + off,
        spec_rng,
        offset=off,
    )
    return off, specs


def validation_runner(
    args: PairedArgs | DistillArgs | EsArgs,
    clone: Any,
    specs: list[tuple[str, str, float, int]],
    seeds: list[int],
    cfg: DynEvalConfig,
    var_dir: Path,
) -> Callable[[Any], list[dict[str, float]]] | None:
    """With ``--workers`` > 1 or ``--ray-address``: ``runner(actor)`` giving the actor's greedy
    metrics on the validation workloads as :func:`fleetmind.rl.paired.greedy_metrics_job` jobs
    (the clone's own weights when ``actor`` is ``clone``); else None (validate in this process)."""
    if args.workers <= 1 and not args.ray_address:
        return None
    init = str(job_path(args.init or DYNAMIC_RELEASE_DIR))
    wl = [
        Workload.of(variant_file(*s, var_dir), sd, cfg) for s, sd in zip(specs, seeds, strict=True)
    ]
    run = partial(run_tasks, ray_address=args.ray_address, workers=args.workers)

    def runner(actor: Any) -> list[dict[str, float]]:
        state = None
        if actor is not clone:
            state = {k: v.detach().numpy().copy() for k, v in actor.state_dict().items()}
        return run(greedy_metrics_job, [(init, state, w, None) for w in wl])

    return runner


def validation_workloads(
    args: PairedArgs | DistillArgs | EsArgs, cfg: DynEvalConfig, var_dir: Path
) -> tuple[list[tuple[str, str, float, int]], list[MultiClusterPlacementEnv], list[int]]:
    """The ``--val-streams`` validation workloads (the same for every training seed and for both
    dynamic-mode learners): their specs ``(source, kind, level, generator seed)``, envs and stream
    seeds."""
    specs = workload_specs(
        list(args.traces),
        list(args.kinds),
        args.val_streams,
        VAL_GEN_SEED,
        np.random.default_rng(VAL_GEN_SEED),
    )
    envs = [make_workload(*s, cfg, var_dir) for s in specs]
    return specs, envs, [VAL_STREAM_SEED + i for i in range(args.val_streams)]


@dataclass
class _Learner:
    """The training half of :func:`run`: one paired iteration per call on fresh workloads."""

    args: PairedArgs
    hp: PairedHyperparams
    cfg: DynEvalConfig
    var_dir: Path
    actor: Any
    clone: Any
    opt: torch.optim.Optimizer
    rng: np.random.Generator
    gen: torch.Generator
    spec_rng: np.random.Generator
    history: list[dict[str, Any]] = field(default_factory=list)

    def learn(self, val: _Validator, bar: Any, t0: float) -> int:
        """:func:`iterate` over this learner's iterations, validating the actor."""
        return iterate(
            self.args,
            t0,
            lambda it: self.iteration(it, bar),
            lambda it: val.validate(it, self.actor),
        )

    def iteration(self, it: int, bar: Any) -> None:
        """Iteration ``it`` (from 1): draw its workloads, update the actor, log the row."""
        base, specs = iteration_specs(
            self.args, it, TRAIN_GEN_SEED, self.spec_rng, shift=PAIRED_SEED_SHIFT
        )
        a = self.args
        if a.workers > 1 or a.ray_address:  # every episode a job: processes or Ray tasks
            jobs_wl = [
                Workload.of(variant_file(*s, self.var_dir), TRAIN_STREAM_SEED + base + i, self.cfg)
                for i, s in enumerate(specs)
            ]
            run = partial(
                run_tasks, ray_address=a.ray_address, workers=a.workers, progress=bar.update
            )
            res = paired_iteration_as_jobs(
                jobs_wl, str(job_path(a.init)), self.actor, self.clone, self.opt, self.hp,
                self.rng, self.gen, run,
            )  # fmt: skip
        else:
            envs = [make_workload(*s, self.cfg, self.var_dir) for s in specs]
            wl = [(e, TRAIN_STREAM_SEED + base + i) for i, e in enumerate(envs)]
            res = paired_iteration(
                wl, self.actor, self.clone, self.opt, self.hp, self.rng, self.gen,
                progress=bar.update,
            )  # fmt: skip
        row = {
            "iteration": it,
            "sample_gap_pct": res.sample_gap_pct,
            **{k: float(v) for k, v in res.update.items()},
        }
        self.history.append(row)
        mlflow.log_metrics(
            {
                "paired/sample_gap_pct": row["sample_gap_pct"],
                "paired/kl_clone": row["kl_clone"],
                "paired/clip_frac": row["clip_frac"],
                "paired/approx_kl": row["approx_kl"],
            },
            step=it,
        )
        bar.set_postfix(gap=f"{row['sample_gap_pct']:+.2f}%", kl=f"{row['kl_clone']:.4f}")


def _greedy_runs(
    envs: list[Any],
    seeds: list[int],
    actor: Any,
    runner: Callable[[Any], list[dict[str, float]]] | None,
) -> list[dict[str, float]]:
    """``actor``'s greedy metrics on each validation stream: by ``runner`` (jobs) when given,
    else in this process."""
    if runner is not None:
        return runner(actor)
    return [greedy_metrics(e, s, actor) for e, s in zip(envs, seeds, strict=True)]


@dataclass
class _Validator:
    """Greedy runs of the actor on fixed validation streams, against its clone's on the same
    streams; keeps the weights of the best iteration (lowest mean slowdown ratio with a p99
    queueing delay no worse than the clone's). With :attr:`per_stream`, each row also lists the
    per-stream slowdown ratios."""

    per_stream: ClassVar[bool] = False
    envs: list[Any]
    seeds: list[int]
    clone_ms: np.ndarray
    clone_p99: np.ndarray
    bar: Any
    best_state: dict[str, Any]
    best_ratio: float = 1.0
    best_iteration: int = 0
    rows: list[dict[str, Any]] = field(
        default_factory=lambda: [
            {"iteration": 0, "gap_pct": 0.0, "ci_pct": [0.0, 0.0], "p99_ratio": 1.0}
        ]
    )
    runner: Callable[[Any], list[dict[str, float]]] | None = None
    """``runner(actor)``: the actor's greedy metrics on every validation stream, in order (e.g.
    as parallel jobs); default: :func:`greedy_metrics` in this process"""

    @classmethod
    def start(
        cls,
        envs: list[Any],
        seeds: list[int],
        clone: Any,
        actor: Any,
        bar: Any,
        runner: Callable[[Any], list[dict[str, float]]] | None = None,
    ) -> _Validator:
        """Run the clone on the validation streams; the actor as it starts is the best so far."""
        clone_val = _greedy_runs(envs, seeds, clone, runner)
        bar.update(len(envs))
        val = cls(
            envs,
            seeds,
            np.array([m["mean_slowdown"] for m in clone_val]),
            np.array([m["p99_queue_delay_s"] for m in clone_val]),
            bar,
            {k: v.clone() for k, v in actor.state_dict().items()},
            runner=runner,
        )
        if cls.per_stream:
            val.rows[0]["per_stream_ratio"] = [1.0] * len(envs)
        return val

    def validate(self, it: int, actor: Any) -> None:
        """Validate the actor after iteration ``it``: log the row, keep its weights if best."""
        ms = _greedy_runs(self.envs, self.seeds, actor, self.runner)
        self.bar.update(len(self.envs))
        r = np.array([m["mean_slowdown"] for m in ms]) / self.clone_ms
        p99_l = np.array([m["p99_queue_delay_s"] for m in ms])
        p99 = float(p99_l.mean() / max(float(self.clone_p99.mean()), 1e-9))
        lo, hi = _ratio_ci(r, seed=it)
        row = {
            "iteration": it,
            "gap_pct": float(100 * (r.mean() - 1)),
            "ci_pct": [lo, hi],
            "p99_ratio": p99,
        }
        if self.per_stream:
            row["per_stream_ratio"] = [round(float(x), 6) for x in r]
        self.rows.append(row)
        mlflow.log_metrics({"val/gap_pct": row["gap_pct"], "val/p99_ratio": p99}, step=it)
        if r.mean() < self.best_ratio and p99 <= 1.0:
            self.best_ratio = float(r.mean())
            self.best_iteration = it
            self.best_state = {k: v.clone() for k, v in actor.state_dict().items()}


def _export(
    actor: Any,
    clone: Any,
    best_state: dict[str, Any],
    model_dir: Path,
    args: PairedArgs,
    run_name: str,
    base_cfg: DynEvalConfig,
) -> None:
    """Write the model folder (:func:`export_learner`)."""
    export_learner(
        actor, clone, best_state, model_dir, Path(args.init), run_name, base_cfg, "paired",
        list(args.traces),
    )  # fmt: skip


def export_learner(
    actor: Any,
    clone: Any,
    best_state: dict[str, Any],
    model_dir: Path,
    init: Path,
    run_name: str,
    base_cfg: DynEvalConfig,
    algo: str,
    traces: list[str],
) -> None:
    """Write a dynamic-mode learner's model folder: ``final.onnx`` (last weights),
    ``policy.pt``/``.onnx`` (best weights, loaded into ``actor``), the clone, the start model
    ``init``'s teacher and ``metadata.json`` (``algo``, the training ``traces``, the commit and
    package versions under ``provenance``)."""
    save_onnx(actor, model_dir / "final.onnx")
    actor.load_state_dict(best_state)
    save_torch(actor, model_dir / "policy.pt")
    save_onnx(actor, model_dir / "policy.onnx")
    save_torch(clone, model_dir / "clone.pt")
    if (init / "clone.onnx").is_file():
        shutil.copy2(init / "clone.onnx", model_dir / "clone.onnx")
    else:
        save_onnx(clone, model_dir / "clone.onnx")
    if (init / "teacher.json").is_file():
        shutil.copy2(init / "teacher.json", model_dir / "teacher.json")
    meta = {
        "format": DYNAMIC_FORMAT,
        "version": run_name,
        "mode": "dynamic",
        "env_id": "fleetmind/MultiClusterPlacement-v0",
        "env_kwargs": asdict(base_cfg),
        "algo": algo,
        "init": str(init),
        "train_traces": traces,
        "teacher": "clone of " + str(init),
        "provenance": artifact_provenance(("gymnasium",)),  # commit and versions, as RCA's
    }
    (model_dir / "metadata.json").write_text(json.dumps(meta, indent=1) + "\n")


def _publish(
    model_dir: Path, args: PairedArgs, summary: dict[str, Any], wall: float, gap_pct: float
) -> None:
    """Write the model card and ``train_summary.json``, log them to MLflow, copy the folder to
    the released model's with ``--release``."""
    _write_card(model_dir, args, summary)
    publish_learner(model_dir, summary, wall, gap_pct, release=args.release)


def publish_learner(
    model_dir: Path,
    summary: dict[str, Any],
    wall: float,
    gap_pct: float,
    release: bool,
    keep_out: frozenset[str] = frozenset(),
) -> None:
    """A dynamic-mode learner's last step: ``train_summary.json``, the final metrics and the model
    folder in MLflow, and with ``release`` the folder's files (less ``keep_out``) written to the
    released model's folder all at once (:func:`fleetmind.folders.write_folder_whole`: a failed
    write leaves the earlier release as it was; the earlier release's model files it does not
    write, :data:`fleetmind.folders.RELEASE_MODEL_FILES`, are removed, every other entry stays;
    ``summary["released"]`` names it)."""
    (model_dir / "train_summary.json").write_text(json.dumps(summary, indent=1, default=str) + "\n")
    mlflow.log_metrics({"final/wall_time_s": wall, "final/val_gap_pct": gap_pct})
    mlflow.log_artifacts(str(model_dir), artifact_path="placement-dynamic")
    if release:
        check_release_target(DYNAMIC_RELEASE_DIR)  # run() refused it already; a backstop
        files = sorted(f for f in model_dir.iterdir() if f.is_file() and f.name not in keep_out)
        write_folder_whole(
            DYNAMIC_RELEASE_DIR, {f.name: f for f in files}, remove=RELEASE_MODEL_FILES
        )
        summary["released"] = str(DYNAMIC_RELEASE_DIR.resolve())


def command_line(args: PairedArgs) -> str:
    """The ``fleetmind sched train`` flags that reproduce ``args``."""
    return (
        "--mode dynamic --algo paired"
        + "".join(f" --trace {t}" for t in args.traces)
        + f" --init {args.init} --iterations {args.iterations}"
        + f" --workloads-per-iter {args.workloads_per_iter} --group-size {args.group_size}"
        + f" --lr {args.learning_rate:g} --kl-coef {args.kl_coef:g} --baseline {args.baseline}"
        + learner_flags_tail(args)
    )


def learner_flags_tail(a: PairedArgs | DistillArgs | EsArgs) -> str:
    """The flags every dynamic-mode learner shares, as its ``command_line`` ends: training
    episode length, validation, time limit, workers and seed."""
    return (
        (f" --dyn-jobs {a.dyn_jobs}" if a.dyn_jobs else "")
        + f" --val-streams {a.val_streams} --val-every {a.val_every}"
        + (f" --max-minutes {a.max_minutes:g}" if a.max_minutes else "")
        + (f" --workers {a.workers}" if a.workers > 1 else "")
        + (f" --ray-address {a.ray_address}" if a.ray_address else "")
        + f" --seed {a.seed}"
    )


TRAIN_LINE_KEYS = ("run_id", "metrics", "artifact")
"""The keys of the one JSON line ``fleetmind sched train`` prints for a run (:func:`train_line`);
the kept checkpoint's step or iteration (``best_step``/``best_iteration``, with ``kept`` and step
0's own validation row, ``clone_validation``, or ``initial_validation`` for a PPO run that cloned
nothing) follow when the recipe records them, and ``released`` when the run was released."""


def train_line(summary: dict[str, Any]) -> str:
    """The JSON line ``fleetmind sched train`` prints for one run of any recipe: the run id, the
    metrics and the artifact folder; for a run that kept a checkpoint, its step or iteration,
    ``kept`` and step 0's validation row beside the kept score; with ``--release`` the released
    folder (``released``). ``kept`` is ``"trained"`` for a later checkpoint, ``"clone"`` for step
    or iteration 0 of a run that started as a behaviour clone (no update beat it on validation,
    or none was run), ``"initial"`` for step 0 of a PPO run that cloned nothing (``--bc-episodes
    0``: its summary has no ``bc`` samples), the untrained initial policy; step 0's row is then
    ``initial_validation`` instead of ``clone_validation``."""
    line = {k: summary.get(k) for k in TRAIN_LINE_KEYS}
    # a PPO run (best_step) cloned iff it recorded demonstrations; the paired learners start as one
    cloned = "best_step" not in summary or bool((summary.get("bc") or {}).get("samples"))
    for key in ("best_step", "best_iteration"):
        if key in summary:
            line[key] = summary[key]
            at_start = "clone" if cloned else "initial"
            line["kept"] = at_start if summary[key] == 0 else "trained"
    start = next(
        (h for h in summary.get("history") or [] if isinstance(h, dict) and h.get("step") == 0),
        None,
    ) or next(
        (
            v
            for v in summary.get("validation") or []
            if isinstance(v, dict) and v.get("iteration") == 0
        ),
        None,
    )
    if start is not None and "kept" in line:
        line["clone_validation" if cloned else "initial_validation"] = {
            k: v
            for k, v in start.items()
            if k not in ("step", "iteration") and isinstance(v, int | float | str)
        }
    if "released" in summary:
        line["released"] = summary["released"]
    return json.dumps(line, default=str)


def cli_clone_learner(args: Any, algo: str, cls: type, run_fn: Callable[[Any], dict]) -> int:
    """``fleetmind sched train --algo ALGO`` for a learner over a model's clone whose flags come
    from :func:`fleetmind.training.recipes.flags.add_recipe_group` (``cls``'s fields; shared flags
    count only when given): refuse the PPO recipes' options, run, print the id line, write
    ``--json``."""
    if args.mode != "dynamic":
        raise ConfigError(f"--algo {algo} is a dynamic-mode recipe (add --mode dynamic)")
    if args.teacher != "fgd" or args.queue_features or args.reward != "shaped":
        raise ConfigError(
            f"--algo {algo} starts from a model's clone (--init); --teacher, --queue-features and"
            " --reward belong to --algo ppo"
        )
    if args.seeds:
        raise ConfigError(f"--seeds is not available with --algo {algo}; run one --seed at a time")
    summary = run_fn(cls(**recipe_group_kwargs(args, cls)))
    print(train_line(summary))
    write_json(args.json, summary)
    return 0


def _write_card(model_dir: Path, args: PairedArgs, summary: dict[str, Any]) -> None:
    write_learner_card(
        model_dir,
        [
            "# fleetmind-placement-dynamic: paired-PPO placement agent for dynamic mode",
            "",
            "The candidate scorer of `docs/ppo-dynamic.md` (same network and export as the PPO"
            " agent),",
            f"started from the clone in `{args.init}` and trained with paired, critic-free PPO",
            "(`rl/paired.py`): on each fresh workload the greedy clone once and G sampled episodes"
            " of",
            "the learner on the same job stream, group-relative advantages, a KL penalty to the"
            " clone.",
        ],
        summary,
        command_line(args),
        args.val_streams,
    )


def write_learner_card(
    model_dir: Path, intro: list[str], summary: dict[str, Any], command: str, val_streams: int
) -> None:
    """``model_dir/model_card.md`` of a dynamic-mode learner: ``intro`` (title and a paragraph),
    then the run's table (command, iterations, kept checkpoint, paired validation gap) and the
    ``Data:`` line of its traces (:func:`~fleetmind.training.recipes.common.learner_data_line`)."""
    from fleetmind.training.recipes.common import learner_data_line

    b = summary["validation_best"]
    lines = [
        *intro,
        "",
        "| field | value |",
        "| --- | --- |",
        f"| run | {summary['run_name']} |",
        f"| command | `fleetmind sched train {command}` |",
        f"| iterations run | {summary['iterations']} |",
        f"| kept checkpoint (iteration) | {summary['best_iteration']} |",
        f"| validation: mean slowdown vs clone, {val_streams} paired fresh streams | "
        f"{b['gap_pct']:+.2f} % [{b['ci_pct'][0]:+.2f}, {b['ci_pct'][1]:+.2f}] |",
        f"| validation: mean p99 queueing-delay ratio to the clone | {b['p99_ratio']:.3f} |",
        f"| wall time (s) | {summary['wall_time_s']} |",
        "",
        learner_data_line(model_dir),
    ]
    (model_dir / "model_card.md").write_text("\n".join(lines) + "\n")
