"""Dynamic-mode teacher: a linear candidate scorer searched by the cross-entropy method.

The fgd-mode recipe (``rl/teacher.py``, ``docs/ppo.md``) carried over to
``fleetmind/MultiClusterPlacement-v0``: a gradient-free search over a few dozen weights, every
weight vector scored directly by the issue's metric (mean slowdown, with p99 queueing delay as a
guard) on a handful of training job streams, then cloned into the MaskablePPO candidate scorer.

Scorer. For an observation (``K`` rows of ``F`` candidate features, ``F = 14``, or 18 with the
env's ``queue_features``, then ``G = 12`` globals; the scorer stores its ``F``, so a
``teacher.json`` of either width loads and scores observations of that width),
row ``x_k`` gets the score

    s_k = w . [x_k, x_k * g_i1, x_k * g_i2, ...]          (w: ((1 + len(interact)) F,))

where ``g_i`` are the globals listed in ``interact`` (default: ``is_sharing``, the fleet's allocated
GPU fraction and the queue length), so the scorer can weigh, say, data locality differently on an
idle and on a loaded fleet. The valid row with the highest score wins (ties to the lowest index).
With ``w = e_1`` (the ``is_fgd_choice`` feature) it is FGD's node choice.

Objective (lower is better), per training stream ``e`` with the figures of the better of FGD and
LocalityAware on that stream (lower mean slowdown; ``ref``) as the unit:

    J = mean_e [ slowdown_e / slowdown_ref,e ]  +  guard * mean_e [ max(0, p99q_e / p99q_ref,e - 1) ]

Normalising per stream keeps a bursty stream (slowdown 6) from outweighing a calm one (slowdown
1.5); taking the better heuristic per stream aims at the issue's "best heuristic"; the guard term
penalises policies that buy mean slowdown with a longer queueing tail.

Search start: FGD (``w = e_1``) or :meth:`DynLinearScorer.locality`, a linear stand-in for
LocalityAware (the stronger heuristic on the 10 % node sample).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import numpy as np

from data.errors import ModelLoadError
from data.openb import PodTrace, load_openb_trace
from envs.dynamic_mode import DynJobs
from envs.multicluster_env import (
    CAND_FEATURE_NAMES,
    GLOBAL_FEATURE_NAMES,
    N_GLOBAL_FEATURES,
    MultiClusterPlacementEnv,
)
from rl.teacher import CandidateScorer, cem_loop

FGD_CHOICE_FEATURE = 1
"""Index of ``is_fgd_choice`` among the candidate features."""
DEFAULT_INTERACT = (
    GLOBAL_FEATURE_NAMES.index("is_sharing"),
    GLOBAL_FEATURE_NAMES.index("allocated"),
    GLOBAL_FEATURE_NAMES.index("queue_length"),
)
"""Globals multiplied with the candidate rows (indices into ``GLOBAL_FEATURE_NAMES``)."""
SCORER_FORMAT = "fleetmind-dynamic-linear-scorer/1"
REFERENCE_POLICIES = ("FGD", "LocalityAware")
"""Heuristics whose per-stream best is the objective's unit (the strongest two in dynamic mode)."""


class DynLinearScorer(CandidateScorer):
    """Greedy linear scorer over the candidate rows of ``MultiClusterPlacement-v0``.

    Args:
        weights: ``((1 + len(interact)) * F,)`` weights.
        n_candidates: ``K``.
        n_cand_features: ``F``.
        interact: global-feature indices whose products with the rows are scored too.

    ``scorer(obs, mask)`` with ``obs (K*F + G,)`` and ``mask (K,)`` returns the chosen candidate.
    """

    def __init__(
        self,
        weights: np.ndarray,
        n_candidates: int,
        n_cand_features: int,
        interact: Sequence[int] = DEFAULT_INTERACT,
    ) -> None:
        self.interact = tuple(int(i) for i in interact)
        w = np.asarray(weights, dtype=np.float64).reshape(-1)
        n = (1 + len(self.interact)) * n_cand_features
        if w.shape != (n,):
            raise ValueError(f"weights must have shape ({n},), got {w.shape}")
        self.weights = w
        self.n_candidates = int(n_candidates)
        self.n_cand_features = int(n_cand_features)

    @classmethod
    def fgd(
        cls, n_candidates: int, n_cand_features: int, interact: Sequence[int] = DEFAULT_INTERACT
    ) -> DynLinearScorer:
        """The scorer that always picks FGD's candidate."""
        w = np.zeros((1 + len(tuple(interact))) * n_cand_features)
        w[FGD_CHOICE_FEATURE] = 1.0
        return cls(w, n_candidates, n_cand_features, interact)

    @classmethod
    def locality(
        cls, n_candidates: int, n_cand_features: int, interact: Sequence[int] = DEFAULT_INTERACT
    ) -> DynLinearScorer:
        """A linear stand-in for ``LocalityAware``: the best FGD integer score first (weight 10 on
        ``fgd_score``, whose steps are 0.01), then the estimated speedup (weight 1; within one FGD
        score tier it decides), then the node priority (weight -0.01)."""
        w = np.zeros((1 + len(tuple(interact))) * n_cand_features)
        w[CAND_FEATURE_NAMES.index("fgd_score")] = 10.0
        w[CAND_FEATURE_NAMES.index("est_speedup")] = 1.0
        w[CAND_FEATURE_NAMES.index("priority_rank")] = -0.01
        return cls(w, n_candidates, n_cand_features, interact)

    def features(self, obs: np.ndarray) -> np.ndarray:
        """``(K, (1 + len(interact)) F)`` scorer inputs of one observation."""
        k, f = self.n_candidates, self.n_cand_features
        if obs.shape[-1] != k * f + N_GLOBAL_FEATURES:
            raise ValueError(
                f"observation width {obs.shape[-1]} is not K*F+G = {k}*{f}+{N_GLOBAL_FEATURES}"
                " (a scorer for another candidate width, e.g. with/without queue_features)"
            )
        rows = np.asarray(obs[: k * f], dtype=np.float64).reshape(k, f)
        glob = obs[k * f :]
        return np.concatenate([rows] + [rows * float(glob[i]) for i in self.interact], axis=1)

    def scores(self, obs: np.ndarray) -> np.ndarray:
        """``(K,)`` scores before masking."""
        return self.features(obs) @ self.weights

    def to_dict(self) -> dict[str, Any]:
        return {
            "format": SCORER_FORMAT,
            "n_candidates": self.n_candidates,
            "n_cand_features": self.n_cand_features,
            "interact": list(self.interact),
            "weights": [float(x) for x in self.weights],
        }

    @classmethod
    def load(cls, path: str | Path) -> DynLinearScorer:
        """Read a scorer written by :meth:`save`; :class:`ModelLoadError` names what is wrong."""
        p = Path(path)
        try:
            d = json.loads(p.read_text())
            if d.get("format") != SCORER_FORMAT:
                raise ValueError(f"format tag {d.get('format')!r}, expected {SCORER_FORMAT!r}")
            return cls(
                np.asarray(d["weights"]),
                int(d["n_candidates"]),
                int(d["n_cand_features"]),
                tuple(d["interact"]),
            )
        except FileNotFoundError as e:
            raise ModelLoadError(f"dynamic scorer file {p} does not exist") from e
        except (ValueError, KeyError, TypeError, AttributeError) as e:
            raise ModelLoadError(f"{p} is not a fleetmind dynamic linear scorer: {e}") from e


@dataclass
class StreamSet:
    """Prebuilt training job streams: one env per trace and the ``(env, jobs, priority)`` per
    ``(trace, seed)`` episode, plus the reference metrics on each (the objective's unit): those of
    the reference heuristic (:data:`REFERENCE_POLICIES`) with the lowest mean slowdown on that
    stream, and FGD's."""

    envs: dict[str, MultiClusterPlacementEnv]
    episodes: list[tuple[str, int, DynJobs, np.ndarray]]
    ref: list[dict[str, float]] = field(default_factory=list)
    fgd: list[dict[str, float]] = field(default_factory=list)

    @classmethod
    def build(
        cls,
        traces: Sequence[str | PodTrace],
        seeds: Sequence[int],
        env_kwargs: dict[str, Any],
        envs: dict[str, MultiClusterPlacementEnv] | None = None,
    ) -> StreamSet:
        """Build ``len(traces) * len(seeds)`` streams (``env_kwargs``: env options except trace;
        ``envs``: already built envs by trace name, reused and extended)."""
        from envs.dynamic_mode import make_policy
        from rl.dynamic_eval import job_stream, run_policy

        envs = {} if envs is None else envs
        eps: list[tuple[str, int, DynJobs, np.ndarray]] = []
        fgd: list[dict[str, float]] = []
        ref: list[dict[str, float]] = []
        for t in traces:
            name = t.name if isinstance(t, PodTrace) else str(t)
            if name not in envs:
                tr = t if isinstance(t, PodTrace) else load_openb_trace(t)
                envs[name] = MultiClusterPlacementEnv(trace=tr, **env_kwargs)
            env = envs[name]
            tr = env.trace
            for s in seeds:
                jobs, prio = job_stream(env, int(s))
                eps.append((name, int(s), jobs, prio))
                ms = {
                    h: run_policy(env, jobs, prio, make_policy(h, tr, env.fleet, int(s)))
                    for h in REFERENCE_POLICIES
                }
                fgd.append(ms["FGD"])
                ref.append(min(ms.values(), key=lambda m: m["mean_slowdown"]))
        return cls(envs, eps, ref, fgd)

    def run(self, act: Callable[[np.ndarray, np.ndarray], int]) -> list[dict[str, float]]:
        """Metrics of ``act`` on every stream."""
        from rl.dynamic_eval import EnvActorPolicy, run_policy

        out = []
        for name, _, jobs, prio in self.episodes:
            env = self.envs[name]
            out.append(run_policy(env, jobs, prio, EnvActorPolicy(act, env)))
        return out

    def objective(self, metrics: list[dict[str, float]], guard: float = 0.5) -> float:
        """``J`` of the module docstring (1.0 for the per-stream best reference heuristic)."""
        sd = [
            m["mean_slowdown"] / f["mean_slowdown"] for m, f in zip(metrics, self.ref, strict=True)
        ]
        tail = [
            max(0.0, m["p99_queue_delay_s"] / max(f["p99_queue_delay_s"], 1.0) - 1.0)
            for m, f in zip(metrics, self.ref, strict=True)
        ]
        return float(np.mean(sd) + guard * np.mean(tail))


@dataclass
class DynCEMResult:
    """Outcome of :func:`cem_search_dynamic` (``best_score``/``fgd_score``: objective ``J``)."""

    best: DynLinearScorer
    best_score: float
    fgd_score: float
    history: list[dict[str, float]] = field(default_factory=list)
    episodes: list[tuple[str, int]] = field(default_factory=list)


def cem_search_dynamic(
    streams: StreamSet,
    n_candidates: int,
    n_cand_features: int,
    generations: int = 8,
    population: int = 12,
    n_elite: int = 4,
    init_sd: float = 0.5,
    sd_floor: float = 0.05,
    guard: float = 0.5,
    seed: int = 0,
    interact: Sequence[int] = DEFAULT_INTERACT,
    init: DynLinearScorer | None = None,
    progress: Callable[[int], None] | None = None,
) -> DynCEMResult:
    """Cross-entropy search (Rubinstein 1999; Szita & Lorincz 2006) of a :class:`DynLinearScorer`.

    Starts at ``init`` (default: the better of FGD, ``w = e_1``, and
    :meth:`DynLinearScorer.locality` on the streams) and keeps its largest weight fixed (the scale
    of the rest is relative to it). Each generation samples
    ``population`` vectors from a diagonal Gaussian, scores each by :meth:`StreamSet.objective` on
    all streams, and refits mean and standard deviation to the ``n_elite`` best (plus
    ``sd_floor``). The best vector seen is returned: never worse than its start on the search
    streams.
    """
    if not streams.episodes:
        raise ValueError("cem_search_dynamic needs at least one training stream")
    if not 1 <= n_elite <= population:
        raise ValueError(f"n_elite must be in [1, population], got {n_elite}")
    interact = init.interact if init is not None else tuple(interact)

    def score(s: DynLinearScorer) -> float:
        return streams.objective(streams.run(s), guard)

    fgd = DynLinearScorer.fgd(n_candidates, n_cand_features, interact)
    fgd_score = score(fgd)
    if init is None:
        loc = DynLinearScorer.locality(n_candidates, n_cand_features, interact)
        loc_score = score(loc)
        start, start_score = (loc, loc_score) if loc_score < fgd_score else (fgd, fgd_score)
    else:
        start, start_score = init, score(init)
    best, best_score = start, start_score
    if progress is not None:
        progress(1)
    rng = np.random.default_rng(seed)
    mu = start.weights.copy()
    sd = np.full(mu.shape, init_sd)
    anchor = int(np.argmax(np.abs(mu)))  # fixes the scale: the rest is relative to it
    sd[anchor] = 0.0
    best, best_score, history, _ = cem_loop(
        mu,
        sd,
        anchor,
        lambda w: DynLinearScorer(w, n_candidates, n_cand_features, interact),
        score,
        best,
        best_score,
        generations=generations,
        population=population,
        n_elite=n_elite,
        sd_floor=sd_floor,
        rng=rng,
        progress=progress,
    )
    eps = [(name, s) for name, s, _, _ in streams.episodes]
    return DynCEMResult(cast(DynLinearScorer, best), best_score, fgd_score, history, eps)
