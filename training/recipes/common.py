"""Settings and steps shared by the placement training recipes (fgd-mode and dynamic-mode PPO)."""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import mlflow
import numpy as np
import torch

from fleetmind.data.errors import ConfigError
from fleetmind.rl.ppo import PPOHyperparams


@dataclass
class PPOArgs:
    """Settings shared by the placement training recipes (``fleetmind sched train`` flags).

    Each recipe has its own subclass: :class:`fleetmind.training.recipes.fgd.FgdArgs` and
    :class:`fleetmind.training.recipes.dynamic.DynamicArgs`.
    """

    mode: ClassVar[str] = ""
    """the recipe's simulation mode (``--mode``)"""

    traces: list[str] = field(default_factory=lambda: ["default"])
    """training traces (openb names or CSV paths); one drawn per episode"""
    timesteps: int = 100_000
    """PPO environment steps (decisions) after the warm start"""
    seed: int = 0
    """seed of weights, envs and workloads"""
    n_envs: int = 2
    """parallel envs (SubprocVecEnv when > 1)"""
    n_candidates: int = 16
    """K, candidate placements per decision"""
    bc_episodes: int = 2
    """teacher episodes for the imitation warm start (0: none)"""
    bc_epochs: int = 30
    """maximum epochs of behaviour cloning (stops at cross-entropy ``bc_target_ce``)"""
    bc_target_ce: float = 0.2
    """behaviour cloning stops once the epoch's cross-entropy is below this"""
    bc_value_coef: float = 0.5
    """weight of the critic's return regression in the cloning loss. The critic pools the actor's
    row embeddings, so with large returns (dynamic mode: value MSE ~1,000) this term's gradient
    swamps the actor's; 0 clones the actor alone (the critic then starts untrained)"""
    teacher: str = "fgd"
    """warm-start teacher: ``fgd`` (candidate 0), ``cem`` (search a linear scorer first, see
    :mod:`fleetmind.rl.teacher`) or the path of a saved scorer JSON (``rl.teacher.load_teacher``: a linear
    scorer, or a linear scorer with a host-stranding penalty)"""
    cem_generations: int = 8
    """teacher=cem: CEM generations"""
    cem_population: int = 14
    """teacher=cem: weight vectors scored per generation"""
    cem_seeds: list[int] = field(default_factory=lambda: [1000])
    """teacher=cem: workload seeds of the search episodes (one episode per training trace and
    seed; when that makes a single episode, the same trace with the next seed is added)"""
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
    eval_seeds: list[int] = field(default_factory=lambda: [42])
    """workload seeds of the periodic evaluation"""
    eval_freq: int = 20_000
    """evaluate every this many PPO steps"""
    max_minutes: float | None = None
    """stop PPO after this much wall time (minutes; None: run all timesteps)"""
    out: str = "runs/ppo"
    """folder for checkpoints and the artifact (``<out>/<run name>/``)"""
    release: bool = False
    """also copy the artifact to the recipe's released model folder (``models/placement/``,
    ``models/placement-dynamic/``)"""
    tracking_uri: str | None = None
    """MLflow tracking URI (default: MLFLOW_TRACKING_URI or sqlite:///mlflow.db)"""
    experiment: str = "fleetmind-placement"
    """MLflow experiment name"""
    threads: int = 1
    """torch threads"""
    progress: bool = True
    """progress bars"""


def check_loss_weights(bc_value_coef: float, vf_coef: float) -> None:
    """``--bc-value-coef`` and ``--vf-coef`` must be finite numbers >= 0 (ConfigError otherwise)."""
    for flag, v in (("--bc-value-coef", bc_value_coef), ("--vf-coef", vf_coef)):
        if not (np.isfinite(v) and v >= 0):
            raise ConfigError(f"{flag} must be a finite number >= 0, got {v}")


def seed_everything(seed: int, threads: int) -> None:
    """Seed Python, NumPy and torch; fix torch threads."""
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


def hyperparams(args: PPOArgs) -> PPOHyperparams:
    """The ``rl.ppo.PPOHyperparams`` of ``args``."""
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


def log_cem_search(res: Any, run_dir: Path) -> None:
    """Log a CEM search (``rl.teacher.CEMResult`` or ``rl.dynamic_teacher.DynCEMResult``: per
    generation ``best``/``elite_mean``/``sd_mean``, then FGD's and the teacher's scores) to the
    active MLflow run, and save the teacher as ``<run>/model/teacher.json``."""
    for h in res.history:
        mlflow.log_metrics(
            {"cem/best": h["best"], "cem/elite_mean": h["elite_mean"], "cem/sd_mean": h["sd_mean"]},
            step=int(h["generation"]),
        )
    mlflow.log_metrics({"cem/fgd": res.fgd_score, "cem/teacher": res.best_score})
    res.best.save(run_dir / "model" / "teacher.json")
