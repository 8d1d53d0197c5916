"""Distillation of rollout-improved decisions (DAgger) over the dynamic-mode clone:
``fleetmind sched train --mode dynamic --algo distill``.

    fleetmind sched train --mode dynamic --algo distill --trace default \
        --iterations 8 --workloads-per-iter 4 --window 0 64 --every 4 --max-minutes 40

Steps (``docs/ppo-dynamic.md``, section "Distillation"; the algorithm is :mod:`fleetmind.rl.distill`):

1. Loads the clone of ``--init`` (default the released ``models/placement-dynamic``) twice: the
   frozen anchor and the learner (the same network, so the export and its inference cost do not
   change). The improver rolls out the clone's ONNX file (``--base clone``) or the current learner.
2. Every iteration draws ``--workloads-per-iter`` fresh workloads: variants of a ``--trace`` made
   by ``fleetmind sched variants``' generator (kinds cycled, level uniform over the published
   range; generator seeds :data:`TRAIN_GEN_SEED` + ...) and a stream seed
   (:data:`TRAIN_STREAM_SEED` + ...). Neither range meets the frozen evaluation set
   (``benchmarks/placement/frozen_set.yaml``: generator seeds 20261201-20261208, stream seeds
   7301-7310), the pre-set held-out seeds 42-51, paired PPO's training ranges or the validation
   ranges.
3. The learner runs each workload greedily; the improver labels the decisions of ``--window``
   (every ``--every``-th); the labels join the aggregate and the learner is fitted on it
   (:func:`fleetmind.rl.distill.fit`).
4. Every ``--val-every`` iterations the greedy learner runs on ``--val-streams`` validation
   workloads, paired with the greedy clone on the same streams (paired PPO's validation ranges,
   so the two learners are validated on the same streams). **Checkpoint rule:** keep the
   validated iteration with the lowest mean paired slowdown ratio to the clone among those whose
   mean p99 queueing-delay ratio to the clone is <= 1; the clone itself (iteration 0, ratio 1)
   competes, so a run that finds nothing exports the clone.
5. Exports ``policy.pt``/``policy.onnx`` (kept), ``final.onnx`` (last), ``clone.onnx``/``clone.pt``,
   the init's ``teacher.json``, ``metadata.json`` (``algo: distill``), ``model_card.md``,
   ``train_summary.json`` and ``dataset.npz`` (the aggregate's labelled states) to
   ``<out>/<run>/model``; with ``--release`` to ``models/placement-dynamic/``. The folder loads
   anywhere a dynamic-mode model does: ``fleetmind sched evaluate --mode dynamic --policies ppo
   clone --model DIR``. MLflow, per iteration: ``distill/labels``, ``distill/changed_frac``
   (labels differing from the base's greedy action), ``distill/ce``, ``distill/agree_label``,
   ``distill/kl_clone`` (KL(clone || learner) on the anchor states), ``distill/agree_clone``,
   ``distill/train_slowdown`` (the learner's own episodes); per validation ``val/gap_pct``,
   ``val/p99_ratio``, ``val/kl_clone``.

Labelling runs in this process, or with ``--workers N`` / ``--ray-address`` as one
:func:`fleetmind.rl.distill.label_job` per workload through :func:`fleetmind.rl.scaleout.run_tasks`
(local processes or Ray tasks; the learner's weights, 15,000 values, travel with each job); the
labels are the same either way.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import mlflow
import numpy as np
import torch

from fleetmind.data.errors import ConfigError
from fleetmind.envs.multicluster_env import MultiClusterPlacementEnv
from fleetmind.rl.distill import (
    BASES,
    Aggregate,
    DistillHyperparams,
    IterationResult,
    distill_iteration,
    fit,
    kl_to_clone,
    label_job,
)
from fleetmind.rl.dynamic_eval import DynEvalConfig, Workload
from fleetmind.rl.export import OnnxActor
from fleetmind.rl.paired import trainable_copy
from fleetmind.rl.rollout import FUTURES
from fleetmind.rl.scaleout import job_path, run_tasks
from fleetmind.training.recipes.paired import (
    LearnerRun,
    check_learner,
    cli_clone_learner,
    export_learner,
    iterate,
    iteration_specs,
    learner_flags_tail,
    make_workload,
    publish_learner,
    variant_file,
    write_learner_card,
)
from fleetmind.training.recipes.paired import _Validator as PairedValidator
from fleetmind.training.recipes.settings import (
    DYNAMIC_RELEASE_DIR,
    DistillArgs,
    check_release_target,
)
from fleetmind.training.recipes.tracking import tracked_run

__all__ = ["DistillArgs", "command_line", "run"]

TRAIN_GEN_SEED = 33_000_000
"""Variant generator seeds of training workloads: ``TRAIN_GEN_SEED + 100_000 * seed + i``."""
TRAIN_STREAM_SEED = 800_000
"""Stream seeds of training workloads: ``TRAIN_STREAM_SEED + 100_000 * seed + i``."""
SAMPLE_SEED = 900_000
"""Seeds of the improver's sampled futures: ``SAMPLE_SEED + 100_000 * seed + i``."""


def hyperparams(a: DistillArgs) -> DistillHyperparams:
    """The algorithm's settings from the recipe's."""
    return DistillHyperparams(
        window=(int(a.window[0]), int(a.window[1])),
        every=a.every,
        k=a.k,
        samples=a.samples,
        future=a.future,
        base=a.base,
        margin=a.margin,
        anchor_per_workload=a.anchor_per_workload,
        learning_rate=a.learning_rate,
        anchor_coef=a.anchor_coef,
        steps=a.fit_steps,
        batch_size=a.batch_size,
        restart=a.restart,
    )


def check(a: DistillArgs) -> None:
    """:class:`ConfigError` naming the first bad setting."""
    if len(a.window) != 2 or not (0 <= a.window[0] < a.window[1]):
        raise ConfigError(f"--window takes LO HI with 0 <= LO < HI, got {a.window}")
    check_learner(
        a,
        {
            "--iterations": (a.iterations, 0),
            "--workloads-per-iter": (a.workloads_per_iter, 1),
            "--every": (a.every, 1),
            "--k": (a.k, 2),
            "--samples": (a.samples, 1),
            "--anchor-per-workload": (a.anchor_per_workload, 1),
            "--fit-steps": (a.fit_steps, 0),
            "--workers": (a.workers, 1),
            "--batch-size": (a.batch_size, 1),
        },
        {"--lr": a.learning_rate, "--anchor-coef": a.anchor_coef, "--margin": a.margin},
    )
    if a.future not in FUTURES:
        raise ConfigError(f"--future must be one of {', '.join(FUTURES)}, got {a.future!r}")
    if a.base not in BASES:
        raise ConfigError(f"--base must be one of {', '.join(BASES)}, got {a.base!r}")


def run(args: DistillArgs) -> dict[str, Any]:
    """The distillation recipe (module docstring). Returns the JSON summary."""
    check(args)
    if args.release:  # before the training: a pip install's released model is the package's
        check_release_target(DYNAMIC_RELEASE_DIR)
    r = LearnerRun.start(args, "distill")
    hp = hyperparams(args)
    learner = _Learner(
        args,
        hp,
        r.train_cfg,
        r.var_dir,
        r.clone,
        actor=trainable_copy(r.clone),
        base=_improver_base(hp, r.init, r.clone),
        gen=torch.Generator().manual_seed(args.seed),
        spec_rng=np.random.default_rng([args.seed, 2]),
        t0=r.t0,
        init=str(job_path(r.init)),
    )

    with tracked_run(args, r.run_name, r.summary):
        n_train = args.iterations * args.workloads_per_iter
        bar, val = r.validator(args, n_train, "distill", learner.actor, _Validator)
        done_its = learner.learn(val, bar)
        bar.close()

        _export(learner, val.best_state, r.model_dir, r.init, r.run_name, r.base_cfg)
        hyper = {**asdict(hp), "window": list(hp.window)}
        wall, best = r.finish(val, done_its, learner.history, hyper, command_line(args))
        _publish(r.model_dir, args, r.summary, wall, best["gap_pct"])
    return r.summary


def _improver_base(hp: DistillHyperparams, init: Path, clone: Any) -> Any:
    """The policy the improver rolls out: with ``--base clone`` the init's ``clone.onnx`` (fast)
    or, without one, the clone network; ``None`` (the learner itself) with ``--base learner``."""
    if hp.base != "clone":
        return None
    return OnnxActor(init / "clone.onnx") if (init / "clone.onnx").is_file() else clone


@dataclass
class _Learner:
    """The training half of :func:`run`: one DAgger iteration per call on fresh workloads, the
    labels gathered in :attr:`data`."""

    args: DistillArgs
    hp: DistillHyperparams
    cfg: DynEvalConfig
    var_dir: Path
    clone: Any
    actor: Any
    base: Any
    gen: torch.Generator
    spec_rng: np.random.Generator
    t0: float
    """``time.perf_counter()`` at the run's start (``--max-minutes``, the rows' ``wall_s``)"""
    init: str = ""
    """the start model folder as label jobs see it (absolute)"""
    data: Aggregate = field(default_factory=Aggregate)
    history: list[dict[str, Any]] = field(default_factory=list)

    def learn(self, val: _Validator, bar: Any) -> int:
        """:func:`fleetmind.training.recipes.paired.iterate` over this learner's iterations,
        validating the actor and its KL to the clone."""

        def validate(it: int) -> None:
            val.validate(it, self.actor)
            val.anchor_kl(it, self.actor, self.clone, self.data)

        return iterate(self.args, self.t0, lambda it: self.iteration(it, bar), validate)

    def iteration(self, it: int, bar: Any) -> None:
        """Iteration ``it`` (from 1): draw its workloads, label them, fit, log the row."""
        args = self.args
        off, specs = iteration_specs(args, it, TRAIN_GEN_SEED, self.spec_rng)
        wl = [self._workload(s, TRAIN_STREAM_SEED + off + i) for i, s in enumerate(specs)]
        if args.workers > 1 or args.ray_address:
            res = self._iteration_as_jobs(specs, off, bar)
        else:
            res = distill_iteration(
                wl,
                self.actor,
                self.clone,
                self.data,
                self.hp,
                self.gen,
                sample_seed=SAMPLE_SEED + off,
                base=self.base,
                progress=bar.update,
            )
        row = {
            "iteration": it,
            "workloads": [list(s) + [TRAIN_STREAM_SEED + off + i] for i, s in enumerate(specs)],
            "new_labels": sum(len(lab.labels) for lab in res.labels),
            "new_changed": sum(int((lab.labels != lab.greedy).sum()) for lab in res.labels),
            "train_slowdown": [lab.metrics["mean_slowdown"] for lab in res.labels],
            "rollouts": sum(lab.rollouts for lab in res.labels),
            **{k: float(v) for k, v in res.fit.items()},
            "wall_s": round(time.perf_counter() - self.t0, 1),
        }
        self.history.append(row)
        fit = res.fit
        mlflow.log_metrics(
            {
                "distill/labels": fit["n_labels"],
                "distill/changed_frac": fit["n_changed"] / max(fit["n_labels"], 1),
                "distill/ce": fit["ce"],
                "distill/agree_label": fit["agree_label"],
                "distill/kl_clone": fit["kl_clone"],
                "distill/agree_clone": fit["agree_clone"],
                "distill/train_slowdown": float(np.mean(row["train_slowdown"])),
            },
            step=it,
        )
        bar.set_postfix(kl=f"{fit['kl_clone']:.4f}", labels=int(fit["n_labels"]))

    def _iteration_as_jobs(
        self, specs: list[tuple[str, str, float, int]], off: int, bar: Any
    ) -> IterationResult:
        """The iteration's labelling as :func:`fleetmind.rl.distill.label_job` jobs (``--workers``
        processes or Ray tasks; the same labels as in this process), then the fit here."""
        state = {k: v.detach().numpy().copy() for k, v in self.actor.state_dict().items()}
        jobs = [
            (
                self.init,
                state,
                Workload.of(variant_file(*s, self.var_dir), TRAIN_STREAM_SEED + off + i, self.cfg),
                self.hp,
                SAMPLE_SEED + off + i,
            )
            for i, s in enumerate(specs)
        ]
        labels = run_tasks(
            label_job,
            jobs,
            ray_address=self.args.ray_address,
            workers=self.args.workers,
            progress=bar.update,
        )
        for lab in labels:
            self.data.add(lab)
        return IterationResult(labels, fit(self.actor, self.clone, self.data, self.hp, self.gen))

    def _workload(
        self, spec: tuple[str, str, float, int], stream_seed: int
    ) -> tuple[MultiClusterPlacementEnv, int, Callable[[], MultiClusterPlacementEnv]]:
        """``(env, stream seed, make_env)`` of one training workload; ``make_env`` builds a
        fresh env on the same variant (the improver's rollouts)."""
        env = make_workload(*spec, self.cfg, self.var_dir)

        def make_env(tr: Any = env.trace) -> MultiClusterPlacementEnv:
            return MultiClusterPlacementEnv(**self.cfg.env_kwargs(tr))

        return env, stream_seed, make_env


@dataclass
class _Validator(PairedValidator):
    """Paired PPO's validation (greedy learner against the greedy clone on fixed streams, best
    weights kept by the same rule); each row also has the per-stream slowdown ratios and the
    learner's KL to the clone on the anchor states."""

    per_stream: ClassVar[bool] = True

    def anchor_kl(self, it: int, actor: Any, clone: Any, data: Aggregate) -> None:
        """Add KL(clone || actor) on the aggregate's anchor states to the last row (``kl_clone``,
        nats per state) and log it."""
        arr = data.arrays()
        kl = kl_to_clone(actor, clone, arr["anchor_obs"], arr["anchor_masks"])["kl_clone"]
        self.rows[-1]["kl_clone"] = kl
        mlflow.log_metrics({"val/kl_clone": kl}, step=it)


def _export(
    learner: _Learner,
    best_state: dict[str, Any],
    model_dir: Path,
    init: Path,
    run_name: str,
    base_cfg: DynEvalConfig,
) -> None:
    """Write the model folder: ``final.onnx`` (last weights), ``policy.pt``/``.onnx`` (best
    weights, loaded into the learner's actor), the clone, the init's teacher,
    ``dataset.npz`` (the aggregate) and ``metadata.json``."""
    export_learner(
        learner.actor, learner.clone, best_state, model_dir, init, run_name, base_cfg, "distill",
        list(learner.args.traces),
    )  # fmt: skip
    _save_dataset(learner.data, model_dir / "dataset.npz")


def _save_dataset(data: Aggregate, path: Path) -> None:
    """The aggregate's labelled states (``obs``, ``masks``, ``labels``, the base's ``greedy``
    actions, the improver's ``gain`` and the decision ``index``), compressed; nothing when it
    is empty."""
    if not data.parts:
        return
    arr = data.arrays()
    np.savez_compressed(
        path,
        obs=arr["obs"],
        masks=arr["masks"],
        labels=arr["labels"],
        greedy=np.concatenate([p.greedy for p in data.parts]),
        gain=np.concatenate([p.gain for p in data.parts]),
        index=np.concatenate([p.index for p in data.parts]),
    )


def _publish(
    model_dir: Path, args: DistillArgs, summary: dict[str, Any], wall: float, gap_pct: float
) -> None:
    """Write the model card and ``train_summary.json``, log them to MLflow, copy the folder
    (less ``dataset.npz``) to the released model's with ``--release``."""
    _write_card(model_dir, args, summary)
    publish_learner(
        model_dir, summary, wall, gap_pct, release=args.release, keep_out=frozenset({"dataset.npz"})
    )


def command_line(a: DistillArgs) -> str:
    """The ``fleetmind sched train`` flags that reproduce ``a``."""
    return (
        "--mode dynamic --algo distill"
        + "".join(f" --trace {t}" for t in a.traces)
        + (f" --init {a.init}" if a.init else "")
        + f" --iterations {a.iterations} --workloads-per-iter {a.workloads_per_iter}"
        + f" --window {a.window[0]} {a.window[1]} --every {a.every} --k {a.k}"
        + f" --samples {a.samples} --future {a.future} --base {a.base} --margin {a.margin:g}"
        + f" --anchor-per-workload {a.anchor_per_workload} --lr {a.learning_rate:g}"
        + f" --anchor-coef {a.anchor_coef:g} --fit-steps {a.fit_steps}"
        + f" --batch-size {a.batch_size}"
        + ("" if a.restart else " --no-restart")
        + learner_flags_tail(a)
    )


def _write_card(model_dir: Path, args: DistillArgs, summary: dict[str, Any]) -> None:
    write_learner_card(
        model_dir,
        [
            "# fleetmind-placement-dynamic: distilled placement agent for dynamic mode",
            "",
            "The candidate scorer of `docs/ppo-dynamic.md` (same network and export as the PPO"
            " agent),",
            f"started from the clone in `{args.init or DYNAMIC_RELEASE_DIR}` and fitted by"
            " distillation",
            "(`rl/distill.py`): the rollout policy with sampled futures labels the learner's early",
            "decisions on fresh workloads (DAgger), cross-entropy on those labels plus a KL anchor"
            " to",
            "the clone on every visited state.",
        ],
        summary,
        command_line(args),
        args.val_streams,
    )


def cli_train(args: Any) -> int:
    """``fleetmind sched train --algo distill`` from the parsed flags
    (:func:`fleetmind.training.recipes.paired.cli_clone_learner` over :class:`DistillArgs`)."""
    return cli_clone_learner(args, "distill", DistillArgs, run)
