"""CMA-ES search of a linear placement teacher (fgd mode), with episodes run as local or Ray jobs.

The same job as ``rl.teacher.cem_search`` (a ``LinearScorer`` over the candidate features of
``fleetmind/GpuPlacement-v0``, scored by its mean unallocated GPU % at 100 % arrived over fixed
``(trace, workload seed)`` episodes, the FGD-choice weight fixed at its start value so the rest is
relative to it), but the sampling and update are the maintained ``cma`` package's CMA-ES
(Hansen's reference implementation) instead of a hand-written cross-entropy loop, and the
population's episodes are independent jobs for :func:`fleetmind.rl.scaleout.run_tasks` (``ray_address``:
Ray tasks). ``rl.teacher.cem_search`` stays for reproducing the released teachers, which it
found.

The result is deterministic given ``seed``: CMA-ES draws from its own seeded generator, and each
episode's metric is a pure function of (weights, trace, workload seed), whichever executor ran it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from fleetmind.data.errors import ConfigError
from fleetmind.envs.candidates import N_CAND_FEATURES
from fleetmind.rl.scaleout import run_tasks, teacher_metrics_job

FGD_CHOICE = 1
"""Index of the "candidate is FGD's choice" feature in a candidate row (``envs/candidates.py``)."""

BLOCKS = ("all", "sharing", "cpu_only")
"""Feature blocks of the searched scorer (``rl.teacher.BLOCKS_3``)."""

UNDEFINED_METRIC = (
    "cannot search a teacher on these episodes: {what} is not a number, because the metric "
    "(unallocated GPU % at 100 % arrived) is undefined for a trace or node list this small: no pod "
    "arrives within a point of 100 % of the nodes' GPU capacity; the search needs a trace that "
    "reaches 100 % of --nodes' GPUs in steps under a point (more nodes, or a longer --trace)"
)
"""The refusal of :func:`cmaes_search` when the metric is NaN (``envs.fgd_mode.unallocated_at``)."""


@dataclass
class SearchResult:
    """Outcome of :func:`cmaes_search`.

    Attributes:
        weights: ``(len(blocks) * F,)`` best weights found (FGD's when nothing beat it).
        best_score: its mean metric over the episodes (unallocated GPU %, lower is better).
        fgd_score: FGD's (the scorer that always takes candidate 0) on the same episodes.
        init_score: the start vector's, when one was given.
        history: per generation ``{"generation", "best", "mean", "sigma"}``.
        episodes: the ``(trace, workload seed)`` pairs.
    """

    weights: np.ndarray
    best_score: float
    fgd_score: float
    init_score: float | None
    history: list[dict[str, float]] = field(default_factory=list)
    episodes: list[tuple[str, int]] = field(default_factory=list)

    def scorer_dict(self, n_candidates: int, blocks: Sequence[str] = BLOCKS) -> dict[str, Any]:
        """The ``fleetmind-linear-scorer/1`` JSON of the best weights (``rl.teacher.LinearScorer``)."""
        return {
            "format": "fleetmind-linear-scorer/1",
            "n_candidates": int(n_candidates),
            "n_cand_features": N_CAND_FEATURES,
            "blocks": list(blocks),
            "weights": [float(x) for x in self.weights],
        }


def fgd_weights(blocks: Sequence[str] = BLOCKS) -> np.ndarray:
    """Weights of the scorer that always picks FGD's candidate."""
    w = np.zeros(len(tuple(blocks)) * N_CAND_FEATURES)
    w[FGD_CHOICE] = 1.0
    return w


def check_search_settings(env_config: dict[str, Any], init_sd: float) -> None:
    """ConfigError unless ``init_sd`` (CMA-ES's ``sigma0``) is a finite number > 0 and the
    episodes' FGD prefix leaves the scorer a decision: ``0 <= fgd_until_pct < stop_arrived_pct``."""
    if not (math.isfinite(init_sd) and init_sd > 0):
        raise ConfigError(
            f"--init-sd must be a finite number > 0 (CMA-ES's step size), got {init_sd}"
        )
    until = float(env_config.get("fgd_until_pct", 0.0))
    stop = env_config.get("stop_arrived_pct")
    if not until >= 0 or (stop is not None and not until < float(stop)):
        where = "" if stop is None else f" and below the level episodes stop at ({float(stop):g} %)"
        raise ConfigError(f"--fgd-until-pct must be >= 0{where}, got {until:g}")


def cmaes_search(
    env_config: dict[str, Any],
    episodes: Sequence[tuple[str, int]],
    generations: int = 8,
    population: int = 14,
    init_sd: float = 0.5,
    seed: int = 0,
    init: np.ndarray | None = None,
    ray_address: str | None = None,
    workers: int = 1,
    progress: Callable[[int], None] | None = None,
) -> SearchResult:
    """CMA-ES over linear-scorer weights; every vector is scored on every episode.

    Args:
        env_config: keyword arguments of ``GpuPlacementEnv`` (e.g. ``traces``, ``fgd_until_pct``,
            ``stop_arrived_pct``, ``n_candidates``; ``nodes`` as a CSV path or omitted), plus
            ``blocks``.
        episodes: ``(trace, workload seed)`` pairs.
        generations, population: CMA-ES iterations and population size (``popsize``).
        init_sd: initial step size (``sigma0``) in weight units (the FGD flag's weight is 1).
        seed: CMA-ES seed (``cma`` option ``seed``; ``seed + 1`` since 0 means "random" there).
        init: start weights (default FGD's); scored too, so the result never loses to it on the
            episodes.
        ray_address, workers: executor of the episode jobs (:func:`fleetmind.rl.scaleout.run_tasks`).
        progress: called with 1 after each episode job.

    Raises:
        ConfigError: no episodes, a population below 2, an initial step size that is not a finite
            number > 0, an FGD prefix (``fgd_until_pct``) outside ``[0, stop_arrived_pct)``, or
            start weights of the wrong shape; also (after the episodes of FGD's vector, before
            any result is returned) when FGD's score or every score of a generation is NaN: the
            metric is undefined for a trace or node list this small (:data:`UNDEFINED_METRIC`).
    """
    import cma

    if not episodes:
        raise ConfigError("the teacher search needs at least one (trace, workload seed) episode")
    if population < 2 or generations < 1:
        raise ConfigError("the teacher search needs --population >= 2 and --generations >= 1")
    check_search_settings(env_config, init_sd)
    blocks = tuple(env_config.get("blocks", BLOCKS))
    cfg = {**env_config, "blocks": blocks}
    eps = [(str(t), int(w)) for t, w in episodes]
    fgd = fgd_weights(blocks)
    x0 = fgd.copy() if init is None else np.asarray(init, dtype=np.float64).reshape(-1)
    if x0.shape != fgd.shape:
        raise ConfigError(f"start weights must have shape {fgd.shape}, got {x0.shape}")

    def scores(vectors: list[np.ndarray]) -> list[float]:
        jobs = [(cfg, [float(v) for v in x], t, w) for x in vectors for t, w in eps]
        m = run_tasks(
            teacher_metrics_job, jobs, ray_address=ray_address, workers=workers, progress=progress
        )
        per = np.asarray(m, dtype=np.float64).reshape(len(vectors), len(eps))
        return [float(v) for v in per.mean(axis=1)]

    start = [fgd] if init is None else [fgd, x0]
    first = scores(start)
    fgd_score = first[0]
    if not math.isfinite(fgd_score):
        raise ConfigError(UNDEFINED_METRIC.format(what="FGD's baseline score"))
    init_score = first[1] if init is not None else None
    best_w, best = (x0, first[1]) if init is not None and first[1] < fgd_score else (fgd, fgd_score)
    es = cma.CMAEvolutionStrategy(
        x0,
        init_sd,
        {
            "seed": int(seed) + 1,
            "popsize": int(population),
            "fixed_variables": {FGD_CHOICE: float(x0[FGD_CHOICE])},
            "verbose": -9,
            "maxiter": int(generations),
        },
    )
    history: list[dict[str, float]] = []
    for g in range(int(generations)):
        xs = [np.asarray(x, dtype=np.float64) for x in es.ask()]
        f = scores(xs)
        if not any(math.isfinite(v) for v in f):
            raise ConfigError(UNDEFINED_METRIC.format(what=f"every score of generation {g}"))
        es.tell(xs, f)
        i = int(np.argmin(f))
        if f[i] < best:
            best, best_w = f[i], xs[i].copy()
        history.append(
            {"generation": g, "best": float(f[i]), "mean": float(np.mean(f)), "sigma": es.sigma}
        )
    return SearchResult(best_w, float(best), float(fgd_score), init_score, history, eps)
