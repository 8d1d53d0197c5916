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

Multi-GPU search options (opt-in, ``docs/ppo-dynamic.md`` section 2; all off by default, and then the
search is the released recipe's, draw for draw):

* ``worst`` adds a per-trace worst case to the objective,

      J4 = J + worst * max_t [ mean_{e in t} slowdown_e / slowdown_ref,e ]

  (``t``: the training traces; the mean runs over that trace's streams), so a weight vector that
  is much worse than the heuristics on one trace is not averaged away by the others.
* ``nonneg`` (candidate feature names, e.g. ``gpu_used_after``) keeps the effective weight of
  each named feature >= 0 for every job: every scored vector is projected first (:func:`project_nonneg`).
* ``max_minutes`` stops the search after the generation during which that much time passed.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import numpy as np

from fleetmind.data.errors import ModelLoadError
from fleetmind.data.openb import PodTrace, load_openb_trace
from fleetmind.envs.dynamic.jobs import DynJobs
from fleetmind.envs.dynamic.policies import make_dynamic_policy
from fleetmind.envs.multicluster_env import (
    CAND_FEATURE_NAMES,
    GLOBAL_FEATURE_NAMES,
    N_CAND_FEATURES,
    N_GLOBAL_FEATURES,
    N_QUEUE_FEATURES,
    QUEUE_FEATURE_NAMES,
    MultiClusterPlacementEnv,
)
from fleetmind.rl.dynamic_eval import EnvActorPolicy, job_stream, run_policy
from fleetmind.rl.teacher import TeacherScorer, cem_loop

SHARING_GLOBAL = GLOBAL_FEATURE_NAMES.index("is_sharing")

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


class DynLinearScorer(TeacherScorer):
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
        for name, v in (("n_candidates", n_candidates), ("n_cand_features", n_cand_features)):
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
                raise ValueError(f"{name} must be an integer >= 1, got {v!r}")
        for i in interact:
            if (
                isinstance(i, bool)
                or not isinstance(i, (int, np.integer))
                or not 0 <= i < N_GLOBAL_FEATURES
            ):
                raise ValueError(
                    f"interact must list global-feature indices in [0, {N_GLOBAL_FEATURES}),"
                    f" got {i!r}"
                )
        self.interact = tuple(int(i) for i in interact)
        w = np.asarray(weights, dtype=np.float64).reshape(-1)
        n = (1 + len(self.interact)) * n_cand_features
        if w.shape != (n,):
            raise ValueError(f"weights must have shape ({n},), got {w.shape}")
        if not np.isfinite(w).all():
            bad = int(np.flatnonzero(~np.isfinite(w))[0])
            hint = (
                " (a JSON number beyond about 1.8e308 reads as infinity)"
                if np.isinf(w[bad])
                else ""
            )
            raise ValueError(f"weights must be finite numbers; weight {bad} is {w[bad]}{hint}")
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

    def check_env(
        self, n_candidates: int, queue_features: bool, source: str | Path
    ) -> DynLinearScorer:
        """This scorer, when it reads the observation of an env with ``n_candidates`` candidates
        (``queue_features``: ``F = 18``, else 14); ``source`` names the file in the error.

        Raises:
            ModelLoadError: its ``K`` or ``F`` differ (its weights would read the wrong features,
                or every decision would fail on the observation's width).
        """
        f = N_CAND_FEATURES + (N_QUEUE_FEATURES if queue_features else 0)  # the env's F
        if (self.n_candidates, self.n_cand_features) != (int(n_candidates), f):
            raise ModelLoadError(
                f"{source}: the teacher scores K={self.n_candidates} candidates of"
                f" F={self.n_cand_features} features; the model's env has K={n_candidates}, F={f}"
            )
        return self

    def to_dict(self) -> dict[str, Any]:
        return {
            "format": SCORER_FORMAT,
            "n_candidates": self.n_candidates,
            "n_cand_features": self.n_cand_features,
            "interact": list(self.interact),
            "weights": [float(x) for x in self.weights],
        }

    @classmethod
    def _from_dict(cls, d: dict[str, Any]) -> DynLinearScorer:
        """The scorer of a ``fleetmind-dynamic-linear-scorer/1`` object (its tag already checked).

        Raises:
            ValueError, KeyError, TypeError: a field is missing or wrong (``n_candidates`` and
                ``n_cand_features`` must be JSON integers >= 1, ``interact`` a list of JSON
                integers in ``[0, G)``, the weights finite numbers).
        """
        counts = [d["n_candidates"], d["n_cand_features"]]
        for name, v in zip(("n_candidates", "n_cand_features"), counts, strict=True):
            if isinstance(v, float) and v.is_integer():  # 16.0: the same count
                v = int(v)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"{name!r} must be an integer >= 1, got {v!r}")
        interact = d["interact"]
        if not isinstance(interact, list):
            raise ValueError(f"'interact' must be a list of integers, got {interact!r}")
        weights = np.asarray(d["weights"], dtype=np.float64)
        return cls(weights, int(counts[0]), int(counts[1]), tuple(interact))

    @classmethod
    def load(cls, path: str | Path) -> DynLinearScorer:
        """Read a scorer written by :meth:`save`; :class:`ModelLoadError` names what is wrong."""
        p = Path(path)
        try:
            d = json.loads(p.read_text())
            if not isinstance(d, dict):
                raise ModelLoadError(
                    f"{p} is not a fleetmind dynamic linear scorer: expected a JSON object"
                )
            if d.get("format") != SCORER_FORMAT:
                raise ValueError(f"format tag {d.get('format')!r}, expected {SCORER_FORMAT!r}")
            return cls._from_dict(d)
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
                    h: run_policy(env, jobs, prio, make_dynamic_policy(h, tr, env.fleet, int(s)))
                    for h in REFERENCE_POLICIES
                }
                fgd.append(ms["FGD"])
                ref.append(min(ms.values(), key=lambda m: m["mean_slowdown"]))
        return cls(envs, eps, ref, fgd)

    def run(self, act: Callable[[np.ndarray, np.ndarray], int]) -> list[dict[str, float]]:
        """Metrics of ``act`` on every stream."""

        out = []
        for name, _, jobs, prio in self.episodes:
            env = self.envs[name]
            out.append(run_policy(env, jobs, prio, EnvActorPolicy(act, env)))
        return out

    def objective(
        self, metrics: list[dict[str, float]], guard: float = 0.5, worst: float = 0.0
    ) -> float:
        """``J`` of the module docstring (1.0 for the per-stream best reference heuristic), plus
        ``worst`` times the largest per-trace mean slowdown ratio (:meth:`trace_ratios`) when
        ``worst > 0`` (``J4``)."""
        sd = [
            m["mean_slowdown"] / f["mean_slowdown"] for m, f in zip(metrics, self.ref, strict=True)
        ]
        tail = [
            max(0.0, m["p99_queue_delay_s"] / max(f["p99_queue_delay_s"], 1.0) - 1.0)
            for m, f in zip(metrics, self.ref, strict=True)
        ]
        j = float(np.mean(sd) + guard * np.mean(tail))
        if worst > 0.0:
            j += worst * max(self.trace_ratios(metrics).values())
        return j

    def trace_ratios(self, metrics: list[dict[str, float]]) -> dict[str, float]:
        """Per training trace, the mean over its streams of ``slowdown / slowdown_ref``."""
        by: dict[str, list[float]] = {}
        for (name, _, _, _), m, f in zip(self.episodes, metrics, self.ref, strict=True):
            by.setdefault(name, []).append(m["mean_slowdown"] / f["mean_slowdown"])
        return {k: float(np.mean(v)) for k, v in by.items()}

    def extend(self, other: StreamSet) -> StreamSet:
        """This set's streams followed by ``other``'s (envs merged)."""
        return StreamSet(
            {**self.envs, **other.envs},
            self.episodes + other.episodes,
            self.ref + other.ref,
            self.fgd + other.fgd,
        )


def nonneg_indices(
    features: Sequence[str], n_cand_features: int, interact: Sequence[int]
) -> list[tuple[int, int | None]]:
    """Weight indices that :func:`project_nonneg` clamps, as ``(index, base_index)`` pairs:
    ``base_index`` is ``None`` for a weight kept >= 0 and the feature's base weight for the
    ``is_sharing`` interaction (kept >= minus the base weight). ``features``: names from
    ``CAND_FEATURE_NAMES`` (or the queue features); unknown names raise :class:`ValueError`."""

    names = list(CAND_FEATURE_NAMES) + list(QUEUE_FEATURE_NAMES)
    out: list[tuple[int, int | None]] = []
    for f in features:
        if f not in names or names.index(f) >= n_cand_features:
            raise ValueError(
                f"unknown candidate feature {f!r}; known: {', '.join(names[:n_cand_features])}"
            )
        fi = names.index(f)
        out.append((fi, None))
        for j, g in enumerate(interact):
            idx = (1 + j) * n_cand_features + fi
            out.append((idx, fi) if int(g) == SHARING_GLOBAL else (idx, None))
    return out


def project_nonneg(
    w: np.ndarray, features: Sequence[str], n_cand_features: int, interact: Sequence[int]
) -> np.ndarray:
    """A copy of ``w`` whose effective weight of each named feature is >= 0 for every job.

    The effective weight of feature ``f`` for a job is ``w_f + sum_g w_(g,f) * g`` over the
    interaction globals ``g``. Every global of ``MultiClusterPlacement-v0`` is >= 0 and
    ``is_sharing`` is 0 or 1, so it suffices that the base weight and every interaction weight
    other than ``is_sharing``'s are >= 0 (clamped to 0 otherwise) and that the ``is_sharing``
    weight is >= minus the (clamped) base weight. Other weights are left as they are.
    """
    out = np.array(w, dtype=np.float64, copy=True)
    idx = nonneg_indices(features, n_cand_features, interact)
    for i, base in idx:
        if base is None:
            out[i] = max(out[i], 0.0)
    for i, base in idx:
        if base is not None:
            out[i] = max(out[i], -out[base])
    return out


def effective_weight(scorer: DynLinearScorer, feature: str, glob: np.ndarray) -> float:
    """The effective weight of candidate feature ``feature`` under the globals ``glob (G,)``."""
    fi = list(CAND_FEATURE_NAMES).index(feature)
    f = scorer.n_cand_features
    w = scorer.weights
    return float(
        w[fi] + sum(w[(1 + j) * f + fi] * float(glob[g]) for j, g in enumerate(scorer.interact))
    )


class _StopSearch(Exception):
    """Raised after a generation to end a search at its time limit."""


@dataclass
class DynCEMResult:
    """Outcome of :func:`cem_search_dynamic` (``best_score``/``fgd_score``: objective ``J``)."""

    best: DynLinearScorer
    best_score: float
    fgd_score: float
    history: list[dict[str, float]] = field(default_factory=list)
    episodes: list[tuple[str, int]] = field(default_factory=list)
    stopped_early: bool = False
    """the search ended at ``max_minutes`` before its last generation"""
    mean: DynLinearScorer | None = None
    """the search distribution's mean after its last generation (projected like every scored
    vector); never scored by the search itself, so free of the best vector's selection on noisy
    scores"""


def _cem_loop_until(
    max_minutes: float | None, *args: Any, generations: int, **kwargs: Any
) -> tuple[Any, float, list[dict[str, float]], np.ndarray, bool]:
    """:func:`fleetmind.rl.teacher.cem_loop` (same arguments) ended after the generation during
    which ``max_minutes`` of wall time passed (``None``: never).

    Returns:
        ``(best, best_score, history, mean after the last generation, stopped early)``.
    """
    t0 = time.monotonic()
    state: dict[str, Any] = {}

    def on_generation(b: Any, bs: float, hist: list[dict[str, float]], mu_now: np.ndarray) -> None:
        state.update(best=b, best_score=bs, history=hist, mu=mu_now.copy())
        if max_minutes is not None and time.monotonic() - t0 >= 60.0 * max_minutes:
            if len(hist) < generations:
                raise _StopSearch

    try:
        best, best_score, history, mu_end = cem_loop(
            *args,
            generations=generations,
            on_generation=on_generation if max_minutes is not None else None,
            **kwargs,
        )
    except _StopSearch:
        return state["best"], state["best_score"], state["history"], state["mu"], True
    return best, best_score, history, mu_end, False


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
    worst: float = 0.0,
    nonneg: Sequence[str] = (),
    max_minutes: float | None = None,
) -> DynCEMResult:
    """Cross-entropy search (Rubinstein 1999; Szita & Lorincz 2006) of a :class:`DynLinearScorer`.

    Starts at ``init`` (default: the better of FGD, ``w = e_1``, and
    :meth:`DynLinearScorer.locality` on the streams) and keeps its largest weight fixed (the scale
    of the rest is relative to it). Each generation samples
    ``population`` vectors from a diagonal Gaussian, scores each by :meth:`StreamSet.objective` on
    all streams, and refits mean and standard deviation to the ``n_elite`` best (plus
    ``sd_floor``). The best vector seen is returned: never worse than its start on the search
    streams.

    Multi-GPU search options (module docstring; defaults leave the search unchanged): ``worst`` weighs the
    per-trace worst case into the objective (``J4``); ``nonneg`` names candidate features whose
    effective weight is kept >= 0: every vector (the start included) is projected by
    :func:`project_nonneg` before it is scored, and the returned scorer is a projected one;
    ``max_minutes`` ends the search after the generation during which that much wall time passed
    (``stopped_early``).
    """
    if not streams.episodes:
        raise ValueError("cem_search_dynamic needs at least one training stream")
    if not 1 <= n_elite <= population:
        raise ValueError(f"n_elite must be in [1, population], got {n_elite}")
    if worst < 0.0:
        raise ValueError(f"worst must be >= 0, got {worst}")
    interact = init.interact if init is not None else tuple(interact)
    nonneg = tuple(nonneg)
    if nonneg:
        nonneg_indices(nonneg, n_cand_features, interact)  # unknown names fail before any run

    def make(w: np.ndarray) -> DynLinearScorer:
        if nonneg:
            w = project_nonneg(w, nonneg, n_cand_features, interact)
        return DynLinearScorer(w, n_candidates, n_cand_features, interact)

    def score(s: DynLinearScorer) -> float:
        return streams.objective(streams.run(s), guard, worst)

    fgd = DynLinearScorer.fgd(n_candidates, n_cand_features, interact)
    fgd_score = score(fgd)
    if init is None:
        loc = make(DynLinearScorer.locality(n_candidates, n_cand_features, interact).weights)
        loc_score = score(loc)
        start, start_score = (loc, loc_score) if loc_score < fgd_score else (fgd, fgd_score)
    else:
        init = make(init.weights) if nonneg else init
        start, start_score = init, score(init)
    best, best_score = start, start_score
    if progress is not None:
        progress(1)
    rng = np.random.default_rng(seed)
    mu = start.weights.copy()
    sd = np.full(mu.shape, init_sd)
    anchor = int(np.argmax(np.abs(mu)))  # fixes the scale: the rest is relative to it
    sd[anchor] = 0.0
    best, best_score, history, mu_end, stopped = _cem_loop_until(
        max_minutes,
        mu,
        sd,
        anchor,
        make,
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
    return DynCEMResult(
        cast(DynLinearScorer, best),
        best_score,
        fgd_score,
        history,
        eps,
        stopped_early=stopped,
        mean=make(np.asarray(mu_end, dtype=float)),
    )
