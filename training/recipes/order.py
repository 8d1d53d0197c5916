"""A learned queue order over the dynamic-mode clone: ``fleetmind sched train --mode dynamic --algo order``.

    fleetmind sched train --mode dynamic --algo order --trace default --iterations 30 --workers 2

Steps (``docs/ppo-dynamic.md``, section "Learned queue order"; the algorithm is
:mod:`fleetmind.rl.order_es` over :func:`fleetmind.rl.es.es_generation`):

1. Loads the clone of ``--init`` (default the released ``models/placement-dynamic``). It keeps
   placing every job; what is learned is which startable job of the backfill window it is asked
   to place next: the weights ``theta`` (``(4,)``) of a
   :class:`fleetmind.envs.dynamic.order.LinearOrder`, started at FIFO's choice.
2. Every generation draws ``--workloads-per-iter`` fresh workloads (variants of a ``--trace`` by
   ``fleetmind sched variants``' generator, kinds cycled; generator seeds :data:`TRAIN_GEN_SEED` +
   ..., stream seeds :data:`TRAIN_STREAM_SEED` + ..., apart from the frozen set, the held-out
   seeds and the other learners' ranges). The clone with FIFO, ``theta`` and ``--pairs``
   antithetic perturbations run on the same workloads; one step (``--optimizer``).
3. Every ``--val-every`` generations ``theta`` runs on the ``--val-streams`` validation workloads
   every dynamic-mode learner is validated on, paired with the clone (FIFO) on the same streams.
   **Checkpoint rule** (the other learners'): the validated generation with the lowest mean
   paired slowdown ratio among those whose mean p99 queueing-delay ratio is <= 1; the clone
   (generation 0) competes.
4. Exports a model folder: ``policy.onnx`` and ``clone.onnx`` are the clone's own network (the
   placements are the clone's), ``metadata.json`` holds the setting with ``queue_order`` = the
   kept ``theta`` (so ``sched evaluate`` and every dynamic-mode evaluator run it with that order),
   ``algo: order`` and the commit and package versions (``provenance``), ``model_card.md``,
   ``train_summary.json``; with ``--release`` to ``models/placement-dynamic/``. MLflow per
   generation: ``order/center_gap_pct``, ``order/pop_gap_pct``, ``order/best_gap_pct``,
   ``order/theta_<feature>``; per validation ``val/gap_pct``, ``val/p99_ratio``.

Episodes run as jobs of :func:`fleetmind.rl.scaleout.run_tasks` (``--workers`` local processes
or Ray tasks with ``--ray-address``), with the same results either way.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import asdict, dataclass, field, replace
from functools import partial
from pathlib import Path
from typing import Any

import mlflow
import numpy as np
from tqdm.auto import tqdm

from fleetmind.data.errors import ConfigError
from fleetmind.envs.dynamic.order import ORDER_FEATURES
from fleetmind.progress import bar_disable
from fleetmind.provenance import artifact_provenance
from fleetmind.rl.dynamic_eval import DYNAMIC_FORMAT, DynEvalConfig, Workload
from fleetmind.rl.es import es_generation, make_optimizer
from fleetmind.rl.export import save_onnx
from fleetmind.rl.order_es import OrderActor, order_episode_job
from fleetmind.rl.scaleout import job_path, run_tasks
from fleetmind.training.recipes.es import check, hyperparams
from fleetmind.training.recipes.es import command_line as es_command_line
from fleetmind.training.recipes.paired import (
    LearnerRun,
    _Validator,
    cli_clone_learner,
    iterate,
    iteration_specs,
    publish_learner,
    validation_episodes,
    validation_workloads,
    variant_file,
    write_learner_card,
)
from fleetmind.training.recipes.settings import DYNAMIC_RELEASE_DIR, OrderArgs, check_release_target
from fleetmind.training.recipes.tracking import tracked_run

__all__ = ["OrderArgs", "command_line", "run"]

TRAIN_GEN_SEED = 36_000_000
"""Variant generator seeds of training workloads: ``TRAIN_GEN_SEED + 100_000 * seed + i``."""
TRAIN_STREAM_SEED = 1_200_000
"""Stream seeds of training workloads: ``TRAIN_STREAM_SEED + 100_000 * seed + i``."""


def run(args: OrderArgs) -> dict[str, Any]:
    """The learned-queue-order recipe (module docstring). Returns the JSON summary."""
    check(args)
    if args.backfill_depth is not None and args.backfill_depth < 0:
        raise ConfigError(f"--backfill-depth must be >= 0, got {args.backfill_depth}")
    if args.release:  # before the training: a pip install's released model is the package's
        check_release_target(DYNAMIC_RELEASE_DIR)
    r = LearnerRun.start(args, "order")
    if args.backfill_depth is not None:  # every side of every comparison runs in this window
        d = int(args.backfill_depth)
        r.base_cfg = replace(r.base_cfg, backfill_depth=d)
        r.train_cfg = replace(r.train_cfg, backfill_depth=d)
        r.val_cfg = replace(r.val_cfg, backfill_depth=d)
    hp = hyperparams(args)
    init = str(job_path(r.init))
    run_jobs = partial(run_tasks, ray_address=args.ray_address, workers=args.workers)
    with tracked_run(args, r.run_name, r.summary):
        mlflow.log_params({f"env/{k}": v for k, v in asdict(r.train_cfg).items()})
        specs, envs, seeds = validation_workloads(args, r.val_cfg, r.var_dir)
        r.val_specs, r.val_seeds = specs, seeds
        val_wl = [
            Workload.of(variant_file(*s, r.var_dir), sd, r.val_cfg)
            for s, sd in zip(specs, seeds, strict=True)
        ]
        n_val = validation_episodes(args)
        n_train = args.iterations * args.workloads_per_iter * (2 + 2 * args.pairs)
        bar = tqdm(
            total=n_train + n_val,
            desc="queue order",
            unit="episode",
            disable=bar_disable(args.progress),
        )
        actor = OrderActor()

        def runner(a: Any) -> list[dict[str, float]]:
            theta = None if a is r.clone else tuple(map(float, a.theta))
            return run_jobs(order_episode_job, [(init, w, theta) for w in val_wl])

        val = _Validator.start(envs, seeds, r.clone, actor, bar, runner=runner)
        val.per_stream = True
        learner = _Learner(args, hp, r.train_cfg, r.var_dir, init, actor, bar, run_jobs)
        done_its = iterate(args, r.t0, learner.generation, lambda it: val.validate(it, actor))
        bar.close()
        actor.load_state_dict(val.best_state)
        _export(r, actor.theta, args)
        wall, best = r.finish(val, done_its, learner.history, asdict(hp), command_line(args))
        r.summary["queue_order"] = dict(zip(ORDER_FEATURES, map(float, actor.theta), strict=True))
        _write_card(r.model_dir, args, r.summary)
        publish_learner(r.model_dir, r.summary, wall, best["gap_pct"], release=args.release)
    return r.summary


@dataclass
class _Learner:
    """The training half of :func:`run`: one ES generation over the order weights per call."""

    args: OrderArgs
    hp: Any
    cfg: DynEvalConfig
    var_dir: Path
    init: str
    actor: OrderActor
    bar: Any
    run_jobs: Any
    history: list[dict[str, Any]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.opt = make_optimizer(self.hp, len(self.actor.theta))
        self.rng = np.random.default_rng([self.args.seed, 3])
        self.spec_rng = np.random.default_rng([self.args.seed, 2])

    def generation(self, it: int) -> None:
        """Generation ``it`` (from 1): draw its workloads, score, step, log the row."""
        off, specs = iteration_specs(self.args, it, TRAIN_GEN_SEED, self.spec_rng)
        wl = [
            Workload.of(variant_file(*s, self.var_dir), TRAIN_STREAM_SEED + off + i, self.cfg)
            for i, s in enumerate(specs)
        ]
        run = partial(self.run_jobs, progress=self.bar.update)
        g = es_generation(
            self.actor.theta, wl, self.init, self.hp, self.opt, self.rng, run, order_episode_job
        )
        self.actor.theta = g.theta
        row = {
            "iteration": it,
            "workloads": [list(s) + [TRAIN_STREAM_SEED + off + i] for i, s in enumerate(specs)],
            "center_gap_pct": g.center_gap_pct,
            "center_p99_ratio": g.center_p99_ratio,
            "pop_gap_pct": g.pop_gap_pct,
            "best_gap_pct": g.best_gap_pct,
            "step_norm": g.step_norm,
            "theta": [float(x) for x in g.theta],
            "clone_slowdown": g.clone_slowdown,
        }
        self.history.append(row)
        metrics = {f"order/{k}": row[k] for k in ("center_gap_pct", "pop_gap_pct", "best_gap_pct")}
        metrics.update(
            {f"order/theta_{n}": float(v) for n, v in zip(ORDER_FEATURES, g.theta, strict=True)}
        )
        mlflow.log_metrics(metrics, step=it)
        self.bar.set_postfix(center=f"{g.center_gap_pct:+.2f}%")


def _export(r: LearnerRun, theta: np.ndarray, args: OrderArgs) -> None:
    """The model folder (module docstring, step 4)."""
    d = r.model_dir
    if (r.init / "clone.onnx").is_file():
        shutil.copy2(r.init / "clone.onnx", d / "clone.onnx")
    else:
        save_onnx(r.clone, d / "clone.onnx")
    shutil.copy2(d / "clone.onnx", d / "policy.onnx")
    if (r.init / "teacher.json").is_file():
        shutil.copy2(r.init / "teacher.json", d / "teacher.json")
    cfg = replace(r.base_cfg, queue_order=tuple(map(float, theta)))
    meta = {
        "format": DYNAMIC_FORMAT,
        "version": r.run_name,
        "mode": "dynamic",
        "env_id": "fleetmind/MultiClusterPlacement-v0",
        "env_kwargs": asdict(cfg),
        "algo": "order",
        "init": str(r.init),
        "train_traces": list(args.traces),
        "teacher": "clone of " + str(r.init),
        "queue_order_features": list(ORDER_FEATURES),
        "provenance": artifact_provenance(("gymnasium",)),  # commit and versions, as RCA's
    }
    (d / "metadata.json").write_text(json.dumps(meta, indent=1) + "\n")


def command_line(a: OrderArgs) -> str:
    """The ``fleetmind sched train`` flags that reproduce ``a``."""
    depth = "" if a.backfill_depth is None else f" --backfill-depth {a.backfill_depth}"
    return es_command_line(a, "order") + depth


def _write_card(model_dir: Path, args: OrderArgs, summary: dict[str, Any]) -> None:
    w = ", ".join(f"{k} {v:+.3f}" for k, v in summary["queue_order"].items())
    write_learner_card(
        model_dir,
        [
            "# fleetmind-placement-dynamic: learned queue order over the dynamic-mode clone",
            "",
            f"The clone in `{args.init or DYNAMIC_RELEASE_DIR}` places every job (its network,"
            " unchanged, is `policy.onnx`);",
            "which startable job of the backfill window it places next is the learned part: the"
            " job with the lowest",
            f"score `phi . theta`, theta = ({w}), found by evolution strategies",
            "(`rl/order_es.py`, `envs/dynamic/order.py`) against the clone with FIFO on the same"
            " fresh workloads.",
        ],
        summary,
        command_line(args),
        args.val_streams,
    )


def cli_train(args: Any) -> int:
    """``fleetmind sched train --algo order`` from the parsed flags."""
    return cli_clone_learner(args, "order", OrderArgs, run)
