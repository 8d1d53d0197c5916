"""The stages of a released placement model as named policies: ``ppo``, ``clone`` and ``teacher``.

A released model folder (``models/placement/``, ``models/placement-dynamic/``) holds:

* ``policy.onnx`` / ``policy.pt``: the released policy (``ppo``: the warm-start clone after PPO's
  updates, if any ran);
* ``clone.onnx``: the warm-start clone before any PPO update (behaviour cloning of the teacher);
* ``teacher.json`` and, for fgd mode, ``teacher_strand.json``: the scorer the clone imitated
  (``teacher_strand.json`` when present: the linear ``teacher.json`` minus the stranding and
  scarcity penalties; ``rl.teacher.load_teacher``).

``fleetmind sched evaluate --policies ppo clone teacher [--model FOLDER]`` scores all three, so
anyone can see what each stage added. In fgd mode the teacher reads its penalties from
``fleetmind/GpuPlacement-v0`` (they are computed from the episode's resampled workload), so a
teacher run is a greedy episode of that env with no FGD prefix; its metric is the same
window mean as :func:`fleetmind.envs.fgd_mode.run_fgd` (``envs.fgd_mode.unallocated_at``).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np

from fleetmind.data.errors import ModelLoadError
from fleetmind.data.openb import OpenbNodes, PodTrace
from fleetmind.envs.candidates import N_CAND_FEATURES, N_PENALTY_FEATURES
from fleetmind.envs.fgd_mode import DEFAULT_LEVELS, FgdResult, unallocated_at
from fleetmind.envs.gpu_placement_env import GpuPlacementEnv
from fleetmind.rl.dynamic_teacher import DynLinearScorer
from fleetmind.rl.teacher import StrandPenaltyScorer, load_teacher

STAGE_NAMES: tuple[str, ...] = ("ppo", "clone", "teacher", "rollout")
"""Policy names ``fleetmind sched evaluate`` maps to a model folder's stages (``rollout``: the
clone improved by rollouts at run time, :mod:`fleetmind.rl.rollout`)."""


def model_folder(ref: str | Path | None, default: Path) -> Path:
    """The folder of a model reference (a folder or a file in it; ``None``: ``default``)."""
    if ref is None:
        return default
    p = Path(ref)
    return p if p.is_dir() else p.parent


def clone_file(folder: Path) -> Path:
    """``folder/clone.onnx``.

    Raises:
        ModelLoadError: the folder ships no clone.
    """
    f = folder / "clone.onnx"
    if not f.is_file():
        raise ModelLoadError(
            f"{folder} has no clone.onnx (the warm-start clone before PPO); policy 'clone' needs it"
        )
    return f


def teacher_file(folder: Path) -> Path:
    """The teacher of a model folder: ``teacher_strand.json`` if present, else ``teacher.json``.

    Raises:
        ModelLoadError: the folder ships no teacher file.
    """
    for name in ("teacher_strand.json", "teacher.json"):
        if (folder / name).is_file():
            return folder / name
    raise ModelLoadError(f"{folder} has no teacher.json; policy 'teacher' needs it")


def run_teacher_fgd(
    trace: PodTrace | str,
    teacher: str | Path,
    seed: int,
    nodes: OpenbNodes | None = None,
    env: Any = None,
) -> FgdResult:
    """One fgd-mode run of a saved teacher (``rl.teacher.load_teacher``): a greedy episode of
    ``GpuPlacementEnv`` (whole workload, no FGD prefix) on ``trace`` with workload seed ``seed``.

    ``placed`` of the result has the run's number of failed pods as False entries (their positions
    are not tracked); ``node_of`` is empty.

    Without ``env``, the env is built with the features the teacher was searched on: a teacher of
    ``F = 20`` (``N_CAND_FEATURES`` + ``N_PENALTY_FEATURES``, a CEM search of ``fleetmind sched
    train --teacher cem --penalty-features``) gets ``GpuPlacementEnv(penalty_features=True)``, one of
    ``F = 18`` the plain env.

    Raises:
        ModelLoadError: the teacher file is unreadable or wrong, or its ``K`` / ``F`` (candidates,
            features per candidate) are not the env's (its weights would read the wrong features).
    """
    scorer = load_teacher(teacher)
    if env is None:
        env = GpuPlacementEnv(
            traces=[trace],
            nodes=nodes,
            n_candidates=scorer.n_candidates,
            penalty_features=scorer.n_cand_features == N_CAND_FEATURES + N_PENALTY_FEATURES,
        )
    got = (scorer.n_candidates, scorer.n_cand_features)
    want = (int(env.n_candidates), int(env.n_cand_features))
    if got != want:
        raise ModelLoadError(
            f"{teacher}: the teacher scores K={got[0]} candidates of F={got[1]} features; the env"
            f" has K={want[0]}, F={want[1]}"
        )
    if isinstance(scorer, StrandPenaltyScorer):
        scorer.bind(env)
    name = trace.name if isinstance(trace, PodTrace) else str(trace)
    t0 = time.perf_counter()
    obs, info = env.reset(options={"trace": trace, "workload_seed": int(seed)})
    done = "n_decisions" in info
    while not done:
        obs, _, term, trunc, info = env.step(int(scorer(obs, env.action_masks())))
        done = term or trunc
    seconds = time.perf_counter() - t0
    n = int(info["n_pods"])
    arrived = env._arrived_cum[:n].copy()
    alloc = env._allocated[:n].copy()
    placed = np.ones(n, dtype=bool)
    placed[: int(info["n_failed"])] = False
    return FgdResult(
        trace=info.get("trace", name),
        policy="teacher",
        seed=int(seed),
        capacity_milli=int(env.capacity),
        unallocated={
            lvl: unallocated_at(arrived, alloc, env.capacity, lvl) for lvl in DEFAULT_LEVELS
        },
        arrived_milli=arrived,
        allocated_milli=alloc,
        placed=placed,
        seconds=seconds,
        extra={"n_decisions": float(info["n_decisions"])},
    )


def load_dynamic_teacher(folder: Path) -> Any:
    """The dynamic-mode teacher of a model folder (``teacher.json``,
    ``rl.dynamic_teacher.DynLinearScorer``) as ``act(obs, mask) -> int``."""
    f = folder / "teacher.json"
    if not f.is_file():
        raise ModelLoadError(f"{folder} has no teacher.json; policy 'teacher' needs it")
    return DynLinearScorer.load(f)
