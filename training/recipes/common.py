"""Settings and steps shared by the placement training recipes (fgd-mode and dynamic-mode PPO)."""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import mlflow
import numpy as np
import torch

from fleetmind.data.errors import ConfigError, DataError
from fleetmind.data.openb import trace_file
from fleetmind.data.openb_synthetic import MARKER, SYNTHETIC_LABEL
from fleetmind.data.paths import shared_data_dir
from fleetmind.rl.ppo import PPOHyperparams, TeacherData, behaviour_clone
from fleetmind.training.recipes.settings import PPOArgs


def check_loss_weights(bc_value_coef: float, vf_coef: float) -> None:
    """``--bc-value-coef`` and ``--vf-coef`` must be finite numbers >= 0 (ConfigError otherwise)."""
    for flag, v in (("--bc-value-coef", bc_value_coef), ("--vf-coef", vf_coef)):
        if not (np.isfinite(v) and v >= 0):
            raise ConfigError(f"{flag} must be a finite number >= 0, got {v}")


def check_run_limits(args: Any) -> None:
    """The PPO recipes' shared settings: ``--eval-freq`` >= 1 (evaluations are every so many
    steps: 0 or less would evaluate and checkpoint at every step), ``--bc-episodes`` >= 0 (0: no
    warm start) and :func:`check_max_minutes`; ConfigError otherwise."""
    if args.eval_freq < 1:
        raise ConfigError(
            f"--eval-freq must be >= 1 (PPO steps between evaluations), got {args.eval_freq}"
        )
    if args.bc_episodes < 0:
        raise ConfigError(f"--bc-episodes must be >= 0 (0: no warm start), got {args.bc_episodes}")
    check_max_minutes(args.max_minutes)


def check_max_minutes(value: float | None, flag: str = "--max-minutes") -> None:
    """A wall-time cap must be a number > 0; omit the flag (None) for no cap."""
    if value is not None and not value > 0:
        raise ConfigError(f"{flag} must be > 0 minutes (omit it for no time limit), got {value}")


def check_fgd_prefixes(args: Any) -> None:
    """fgd mode's FGD prefixes: ``0 <= --fgd-until-pct < stop_arrived_pct`` (a training episode
    must leave the agent a decision before it stops), and ``--eval-fgd-until-pct`` and
    ``--bc-fgd-until-pct`` in [0, 100] (% of GPU capacity); ConfigError otherwise."""
    stop = args.stop_arrived_pct
    if not 0 <= args.fgd_until_pct < stop:
        raise ConfigError(
            f"--fgd-until-pct must be >= 0 and below the level training episodes stop at ({stop:g} %"
            f" of GPU capacity), got {args.fgd_until_pct:g}"
        )
    for flag, v in (
        ("--eval-fgd-until-pct", args.eval_fgd_until_pct),
        ("--bc-fgd-until-pct", args.bc_fgd_until_pct),
    ):
        if not 0 <= v <= 100:
            raise ConfigError(f"{flag} must be in [0, 100] (% of GPU capacity), got {v:g}")


@dataclass
class TrainingRun:
    """A placement training run in progress: what both recipes keep from step to step (each
    recipe's subclass adds its evaluation setup)."""

    args: Any
    """the recipe's settings"""
    name: str
    """the run name (``<env>__ppo__<seed>__<time>``)"""
    dir: Path
    """the run folder (the model is exported to ``<dir>/model``)"""
    ckpt_dir: Path
    env_kwargs: dict[str, Any]
    """the training env's keyword arguments"""
    hp: PPOHyperparams
    summary: dict[str, Any]
    """the JSON summary the recipe returns, filled in as the run goes"""
    t_start: float
    """``time.perf_counter()`` at the start (wall time of the whole run)"""
    state: dict[str, Any] = field(
        default_factory=lambda: {"best": float("inf"), "best_step": -1, "history": []}
    )
    """the best evaluated policy so far (``best`` score, lower is better, and ``best_step``) and
    every evaluation (``history``)"""
    model: Any = None
    """the MaskablePPO model being trained"""
    venv: Any = None
    """its vectorised training envs"""
    ppo_seconds: float = 0.0
    """wall time of the PPO step"""


def clone_teacher(model: Any, data: TeacherData, args: PPOArgs) -> dict[str, Any]:
    """Behaviour-clone the teacher's demonstrations ``data`` into ``model.policy`` (the run's
    epochs, target cross-entropy and value weight), log the cloning metrics at step 0 and return
    the run summary's ``bc`` entry (those metrics and the number of samples)."""
    bc = behaviour_clone(
        model.policy,
        data,
        epochs=args.bc_epochs,
        seed=args.seed,
        target_ce=args.bc_target_ce,
        value_coef=args.bc_value_coef,
    )
    mlflow.log_metrics(bc, step=0)
    return {**bc, "samples": int(len(data.actions))}


def seed_everything(seed: int, threads: int) -> None:
    """Seed Python, NumPy and torch; fix torch threads."""
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    torch.set_num_threads(max(1, threads))


OPENB_DATA = "Alibaba cluster-trace-gpu-v2023 (openb), research use; Weng et al., USENIX ATC'23"


def _trace_kind(trace: str) -> str:
    """``openb`` when ``trace`` (a name or a path) resolves to a file of the real openb csv folder,
    ``synthetic`` when it resolves to the synthetic fallback's (the folder beside its ``SYNTHETIC.md``
    marker), else ``own``; never raises (a trace that does not resolve, or no data folder at all,
    counts as the user's own)."""
    try:
        parent = trace_file(trace).resolve().parent
    except (DataError, OSError, ValueError):
        return "own"
    try:
        if parent == (shared_data_dir("openb") / "openb" / "csv").resolve():
            return "openb"
    except (DataError, OSError):
        pass
    return "synthetic" if (parent.parent / MARKER).is_file() else "own"


def data_line(traces: Any) -> str:
    """A model card's ``Data:`` line for the training and evaluation ``traces`` (names or paths):
    the openb attribution for the traces that resolve to the openb data (:func:`_trace_kind`), the
    synthetic trace's label for the synthetic fallback, the files as given for the user's own (a
    user's own CSVs are not Alibaba's)."""
    named = list(dict.fromkeys(str(t) for t in traces or []))
    kinds = {t: _trace_kind(t) for t in named}
    own = [t for t in named if kinds[t] == "own"]
    parts = [f"the user's trace file(s) {', '.join(own)}"] if own else []
    if "synthetic" in kinds.values():
        parts.append(f"the {SYNTHETIC_LABEL}")
    if "openb" in kinds.values():
        parts.append(OPENB_DATA if not parts else f"the openb traces beside them: {OPENB_DATA}")
    return f"Data: {'; '.join(parts) or OPENB_DATA}."


def _data_line(card: dict[str, Any]) -> str:
    """:func:`data_line` of the card's ``train_traces`` and ``eval_traces``."""
    return data_line([t for key in ("train_traces", "eval_traces") for t in card.get(key) or []])


def learner_data_line(model_dir: Path) -> str:
    """:func:`data_line` of the ``train_traces`` in ``model_dir/metadata.json`` (a dynamic-mode
    learner's folder, written before its card; its validation workloads are variants of the same
    traces); no traces there: the openb attribution, as before."""
    try:
        meta = json.loads((model_dir / "metadata.json").read_text())
    except (OSError, ValueError):
        meta = {}
    traces = meta.get("train_traces") if isinstance(meta, dict) else None
    return data_line(traces if isinstance(traces, list) else [])


def cloned(card: dict[str, Any]) -> bool:
    """Whether the run's policy started as a behaviour clone of its teacher: ``bc_samples`` > 0
    when the card records it, else ``--bc-episodes`` > 0 in its ``command`` (no record: cloned,
    the default)."""
    if "bc_samples" in card:
        return int(card.get("bc_samples") or 0) > 0
    words = str(card.get("command", "")).split()
    for flag, value in zip(words, words[1:], strict=False):
        if flag == "--bc-episodes":
            return value.lstrip("-").isdigit() and int(value) > 0
    return True


def kept_policy(card: dict[str, Any]) -> str | None:
    """What the checkpoint a PPO run kept is: ``"trained"`` (a PPO checkpoint, ``best_step`` > 0),
    ``"clone"`` (step 0, the behaviour clone: no PPO checkpoint scored better on validation, or
    no PPO steps were run), ``"initial"`` (step 0 of a run that cloned nothing, ``--bc-episodes
    0``: the untrained, randomly initialised policy); None when the card records no
    ``best_step``."""
    step = card.get("best_step")
    if step is None:
        return None
    if int(step) != 0:
        return "trained"
    return "clone" if cloned(card) else "initial"


def kept_clone(card: dict[str, Any]) -> bool:
    """Whether the checkpoint a PPO run kept is its step 0 (:func:`kept_policy` ``"clone"`` or
    ``"initial"``): no PPO checkpoint scored better on validation, or no PPO steps were run."""
    return kept_policy(card) in ("clone", "initial")


def _card_head(card: dict[str, Any], teacher: str, kind: str) -> list[str]:
    """The title and the first paragraph's opening of :func:`write_model_card`: what the kept
    policy is (:func:`kept_policy`) and how it was made."""
    kept = kept_policy(card)
    ran = int(card.get("ppo_timesteps", 0) or 0)
    scorer = "Permutation-equivariant candidate scorer (shared MLP over K candidate rows)"
    if kept not in ("clone", "initial"):
        warm = (
            f"after an imitation warm start (teacher: {teacher}, {kind}),"
            if cloned(card)
            else "from its random initialisation (no imitation warm start, `--bc-episodes 0`),"
        )
        return [
            "# fleetmind-placement: PPO GPU placement agent",
            "",
            f"{scorer} trained with",
            f"sb3-contrib MaskablePPO {warm}",
        ]
    ppo = (
        f"the sb3-contrib MaskablePPO run that followed ({ran:,} steps) did not improve on it on"
        " validation (best_step 0)"
        if ran
        else "no PPO steps were run (`--timesteps 0`)"
    )
    why = "PPO did not improve on it" if ran else "no PPO steps were run"
    if kept == "clone":
        return [
            f"# fleetmind-placement: GPU placement agent, the behaviour clone ({why})",
            "",
            f"{scorer} cloned from",
            f"a teacher's choices (teacher: {teacher}, {kind}); {ppo}, so the kept",
            "policy is the clone itself,",
        ]
    return [
        "# fleetmind-placement: GPU placement agent, the untrained initial policy (no behaviour"
        f" cloning; {why})",
        "",
        f"{scorer} at its random",
        f"initialisation: nothing was cloned (`--bc-episodes 0`) and {ppo}, so the kept",
        "policy is the untrained initial policy (step 0),",
    ]


def write_model_card(folder: Path, card: dict[str, Any]) -> Path:
    """``model_card.md`` for an exported placement model. When the kept checkpoint is step 0
    (:func:`kept_policy`: the clone, or with ``--bc-episodes 0`` the untrained initial policy)
    the title and first paragraph say so instead of crediting PPO, and say when no PPO steps
    were run."""
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
    head = _card_head(card, teacher, kind)
    lines = [
        *head,
        "in `fleetmind/GpuPlacement-v0` (fgd mode, openb GPU nodes). Inputs: `obs (B, K*F+G) float32`,",
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
        "Regenerate: `fleetmind sched train " + card.get("command", "") + "` (the same"
        " settings; PPO's updates are not bit-reproducible, so a rerun's PPO checkpoints, and"
        ' the step it keeps, can differ from this model\'s: see `docs/ppo.md`, "Training").',
        "",
        _data_line(card),
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
