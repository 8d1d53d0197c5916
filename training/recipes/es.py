"""Evolution strategies with common random numbers over the dynamic-mode clone:
``fleetmind sched train --mode dynamic --algo es``.

    fleetmind sched train --mode dynamic --algo es --trace default \
        --iterations 100 --workloads-per-iter 4 --pairs 8 --sigma 0.15 --workers 2

Steps (``docs/ppo-dynamic.md``, section "Evolution strategies"; the algorithm is
:mod:`fleetmind.rl.es`):

1. Loads the clone of ``--init`` (default the released ``models/placement-dynamic``): the learner
   is that clone with a residual on its logit head (``theta``, 64 values, zero at the start), so
   the export and its inference cost are the clone's.
2. Every generation draws ``--workloads-per-iter`` fresh workloads: variants of a ``--trace`` by
   ``fleetmind sched variants``' generator (kinds cycled, level uniform over the published
   range; generator seeds :data:`TRAIN_GEN_SEED` + ...) and stream seeds
   (:data:`TRAIN_STREAM_SEED` + ...), apart from the frozen evaluation set, the held-out seeds
   42-51, the other learners' training ranges and the validation ranges. The clone, ``theta``
   and ``--pairs`` antithetic perturbations are scored on the same workloads; one step
   (``--optimizer``).
3. Every ``--val-every`` generations ``theta`` runs greedily on ``--val-streams`` validation
   workloads (paired PPO's, so every dynamic-mode learner is validated on the same streams),
   paired with the clone on the same streams. **Checkpoint rule:** keep the validated generation
   with the lowest mean paired slowdown ratio to the clone among those whose mean p99
   queueing-delay ratio is <= 1; the clone (generation 0) competes.
4. Exports the model folder as the other learners do (``policy.pt``/``.onnx`` kept,
   ``final.onnx`` last, the clone, ``metadata.json`` with ``algo: es``, ``model_card.md``,
   ``train_summary.json``); with ``--release`` to ``models/placement-dynamic/``. MLflow per
   generation: ``es/center_gap_pct`` (``theta`` vs the clone on the generation's workloads),
   ``es/pop_gap_pct``, ``es/best_gap_pct``, ``es/theta_norm``, ``es/step_norm``; per validation
   ``val/gap_pct``, ``val/p99_ratio``, ``val/kl_clone`` (KL(clone || learner) on the clone's
   states of the first validation stream).

Episodes run as jobs of :func:`fleetmind.rl.scaleout.run_tasks`: ``--workers`` local processes, or
Ray tasks with ``--ray-address``; the results are the same either way.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import mlflow
import numpy as np

from fleetmind.data.errors import ConfigError
from fleetmind.rl.distill import kl_to_clone
from fleetmind.rl.dynamic_eval import DynEvalConfig
from fleetmind.rl.es import (
    OPTIMIZERS,
    EsHyperparams,
    Workload,
    es_generation,
    head_weights,
    make_optimizer,
    with_residual,
)
from fleetmind.rl.paired import run_episode, trainable_copy
from fleetmind.rl.scaleout import job_path, run_tasks
from fleetmind.training.recipes.paired import (
    LearnerRun,
    check_learner,
    cli_clone_learner,
    export_learner,
    iterate,
    iteration_specs,
    learner_flags_tail,
    publish_learner,
    variant_file,
    write_learner_card,
)
from fleetmind.training.recipes.paired import _Validator as PairedValidator
from fleetmind.training.recipes.settings import DYNAMIC_RELEASE_DIR, EsArgs, check_release_target
from fleetmind.training.recipes.tracking import tracked_run

__all__ = ["EsArgs", "command_line", "run"]

TRAIN_GEN_SEED = 34_000_000
"""Variant generator seeds of training workloads: ``TRAIN_GEN_SEED + 100_000 * seed + i``."""
TRAIN_STREAM_SEED = 1_000_000
"""Stream seeds of training workloads: ``TRAIN_STREAM_SEED + 100_000 * seed + i``."""


def hyperparams(a: EsArgs) -> EsHyperparams:
    """The algorithm's settings from the recipe's."""
    return EsHyperparams(
        pairs=a.pairs,
        sigma=a.sigma,
        learning_rate=a.learning_rate,
        optimizer=a.optimizer,
        l2=a.l2,
    )


def check(a: EsArgs) -> None:
    """:class:`ConfigError` naming the first bad setting."""
    check_learner(
        a,
        {
            "--iterations": (a.iterations, 0),
            "--workloads-per-iter": (a.workloads_per_iter, 1),
            "--pairs": (a.pairs, 1),
            "--workers": (a.workers, 1),
        },
        {"--lr": a.learning_rate, "--l2": a.l2},
    )
    if not (np.isfinite(a.sigma) and a.sigma > 0):
        raise ConfigError(f"--sigma must be a finite number > 0, got {a.sigma}")
    if a.optimizer not in OPTIMIZERS:
        raise ConfigError(
            f"--optimizer must be one of {', '.join(OPTIMIZERS)}, got {a.optimizer!r}"
        )


def _runner(a: EsArgs, bar: Any | None = None) -> Any:
    """``run(fn, items)`` over :func:`run_tasks` with the run's workers or Ray cluster."""
    return partial(
        run_tasks,
        ray_address=a.ray_address,
        workers=a.workers,
        progress=(bar.update if bar is not None else None),
    )


def run(args: EsArgs) -> dict[str, Any]:
    """The ES recipe (module docstring). Returns the JSON summary."""
    check(args)
    if args.release:  # before the training: a pip install's released model is the package's
        check_release_target(DYNAMIC_RELEASE_DIR)
    r = LearnerRun.start(args, "es")
    hp = hyperparams(args)
    with tracked_run(args, r.run_name, r.summary):
        actor = trainable_copy(r.clone)
        n_train = args.iterations * args.workloads_per_iter * (2 + 2 * args.pairs)
        bar, val = r.validator(args, n_train, "ES", actor, _Validator)
        learner = _Learner(
            args, hp, r.train_cfg, r.var_dir, str(job_path(r.init)), r.clone, actor, r.t0, bar
        )
        anchor = run_episode(val.envs[0], val.seeds[0], r.clone)  # states for the KL column
        done_its = learner.learn(val, anchor)
        bar.close()

        export_learner(
            actor, r.clone, val.best_state, r.model_dir, r.init, r.run_name, r.base_cfg, "es",
            list(args.traces),
        )  # fmt: skip
        wall, best = r.finish(val, done_its, learner.history, asdict(hp), command_line(args))
        _write_card(r.model_dir, args, r.summary)
        publish_learner(r.model_dir, r.summary, wall, best["gap_pct"], release=args.release)
    return r.summary


@dataclass
class _Learner:
    """The training half of :func:`run`: one ES generation per call on fresh workloads."""

    args: EsArgs
    hp: EsHyperparams
    cfg: DynEvalConfig
    var_dir: Path
    init: str
    """the model folder as the jobs see it (absolute)"""
    clone: Any
    actor: Any
    """the clone with ``theta`` on its head (what validation and the export see)"""
    t0: float
    bar: Any
    theta: np.ndarray = field(default_factory=lambda: np.zeros(0))
    opt: Any = None
    history: list[dict[str, Any]] = field(default_factory=list)

    def __post_init__(self) -> None:
        dim = int(self.clone.scorer.logit_head.weight.numel())
        self.theta = np.zeros(dim)
        self.opt = make_optimizer(self.hp, dim)
        self.rng = np.random.default_rng([self.args.seed, 3])
        self.spec_rng = np.random.default_rng([self.args.seed, 2])
        self.w0 = head_weights(self.clone)

    def learn(self, val: _Validator, anchor: Any) -> int:
        """:func:`fleetmind.training.recipes.paired.iterate` over the generations, validating
        ``theta`` and its KL to the clone on ``anchor``'s states."""

        def validate(it: int) -> None:
            val.validate(it, self.actor)
            kl = kl_to_clone(self.actor, self.clone, anchor.obs, anchor.masks)["kl_clone"]
            val.rows[-1]["kl_clone"] = kl
            mlflow.log_metrics({"val/kl_clone": kl}, step=it)

        return iterate(self.args, self.t0, self.generation, validate)

    def generation(self, it: int) -> None:
        """Generation ``it`` (from 1): draw its workloads, score, step, log the row."""
        off, specs = iteration_specs(self.args, it, TRAIN_GEN_SEED, self.spec_rng)
        wl = [
            Workload.of(variant_file(*s, self.var_dir), TRAIN_STREAM_SEED + off + i, self.cfg)
            for i, s in enumerate(specs)
        ]
        g = es_generation(
            self.theta, wl, self.init, self.hp, self.opt, self.rng, run=_runner(self.args, self.bar)
        )
        self.theta = g.theta
        with_residual(self.actor, self.w0, self.theta)
        row = {
            "iteration": it,
            "workloads": [list(s) + [TRAIN_STREAM_SEED + off + i] for i, s in enumerate(specs)],
            "center_gap_pct": g.center_gap_pct,
            "center_p99_ratio": g.center_p99_ratio,
            "pop_gap_pct": g.pop_gap_pct,
            "best_gap_pct": g.best_gap_pct,
            "step_norm": g.step_norm,
            "theta_norm": float(np.linalg.norm(self.theta)),
            "clone_slowdown": g.clone_slowdown,
            "wall_s": round(time.perf_counter() - self.t0, 1),
        }
        self.history.append(row)
        mlflow.log_metrics(
            {
                f"es/{k}": row[k]
                for k in (
                    "center_gap_pct",
                    "pop_gap_pct",
                    "best_gap_pct",
                    "theta_norm",
                    "step_norm",
                )
            },
            step=it,
        )
        self.bar.set_postfix(center=f"{g.center_gap_pct:+.2f}%", theta=f"{row['theta_norm']:.3f}")


@dataclass
class _Validator(PairedValidator):
    """Paired PPO's validation and checkpoint rule, with per-stream ratios in each row."""

    per_stream = True


def command_line(a: EsArgs, algo: str = "es") -> str:
    """The ``fleetmind sched train`` flags that reproduce ``a`` (``algo``: ``es``, or ``order`` for
    :class:`~fleetmind.training.recipes.settings.OrderArgs`, which has the same fields)."""
    return (
        f"--mode dynamic --algo {algo}"
        + "".join(f" --trace {t}" for t in a.traces)
        + (f" --init {a.init}" if a.init else "")
        + f" --iterations {a.iterations} --workloads-per-iter {a.workloads_per_iter}"
        + f" --pairs {a.pairs} --sigma {a.sigma:g} --lr {a.learning_rate:g}"
        + f" --optimizer {a.optimizer} --l2 {a.l2:g}"
        + learner_flags_tail(a)
    )


def _write_card(model_dir: Path, args: EsArgs, summary: dict[str, Any]) -> None:
    write_learner_card(
        model_dir,
        [
            "# fleetmind-placement-dynamic: ES placement agent for dynamic mode",
            "",
            "The candidate scorer of `docs/ppo-dynamic.md` (same network and export as the PPO"
            " agent):",
            f"the clone in `{args.init or DYNAMIC_RELEASE_DIR}` with a residual on its logit head,"
            " found by",
            "evolution strategies (`rl/es.py`): antithetic perturbations scored against the clone"
            " on the",
            "same fresh workloads (common random numbers), per-workload centred ranks, one step"
            " per generation.",
        ],
        summary,
        command_line(args),
        args.val_streams,
    )


def cli_train(args: Any) -> int:
    """``fleetmind sched train --algo es`` from the parsed flags
    (:func:`fleetmind.training.recipes.paired.cli_clone_learner` over :class:`EsArgs`)."""
    return cli_clone_learner(args, "es", EsArgs, run)
