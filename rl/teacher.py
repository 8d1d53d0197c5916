"""Linear candidate scorers searched by the cross-entropy method: the teacher of the warm start.

Why this exists. Cloning FGD (candidate 0) gives PPO a policy that equals FGD, and PPO on two CPU
cores then moves it by almost nothing (KL about 1e-5 per update, see ``docs/ppo.md``): the only
signal that a deviation from FGD pays off is a rare fragmentation-avoiding choice whose effect
shows hundreds of pods later. A gradient-free search over a few dozen weights is far cheaper per
unit of improvement: every candidate weight vector is scored by the very metric of the issue
(unallocated GPU % at 100 % arrival) on a handful of training episodes. The best vector found is a
*teacher*: the candidate scorer network is cloned from it, and MaskablePPO fine-tunes from there.

Scorer. For an observation of the placement envs (``K`` rows of ``F`` candidate features, then ``G``
globals; see :mod:`fleetmind.envs.candidates`), each row ``x_k`` gets the score

    s_k = w . [x_k, x_k * is_sharing, x_k * is_cpu_only]          (w: (3F,))

and the scorer picks the valid row with the highest score (ties to the lowest index). ``is_sharing``
and ``is_cpu_only`` are global features 4 and 5, so the scorer can weigh features differently for
GPU-sharing, whole-GPU and CPU-only pods. With ``w = e_1`` (the ``is_fgd_choice`` feature) it is FGD.
An optional fourth block, ``x_k * is_multi_gpu`` (the pod asks for 2 or more whole GPUs; global 1 is
``num_gpu / 8``), lets multi-GPU pods be weighed apart from 1-GPU pods (``blocks=BLOCKS_4``).

Search (:func:`cem_search`). The cross-entropy method (Rubinstein 1999; as used for policy search by
Szita & Lorincz 2006): sample ``population`` vectors from a diagonal Gaussian, score each on the same
episodes, refit mean and standard deviation to the ``n_elite`` best, add a small noise floor, repeat.
The search starts at FGD (mean ``e_1``), so its best vector is never worse than FGD on the search
episodes.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import numpy as np

from fleetmind.data.errors import ModelLoadError

SHARING_GLOBAL = 4
"""Index of ``is_sharing`` among the global features (``envs.candidates.GLOBAL_FEATURE_NAMES``)."""
CPU_ONLY_GLOBAL = 5
"""Index of ``is_cpu_only`` among the global features."""
FGD_CHOICE_FEATURE = 1
"""Index of ``is_fgd_choice`` among the candidate features."""
NUM_GPU_GLOBAL = 1
"""Index of ``pod_num_gpu`` (GPU count / 8) among the global features."""
BLOCKS_3 = ("all", "sharing", "cpu_only")
"""The scorer's feature blocks before the multi-GPU block existed (the released teacher's)."""
BLOCKS_4 = (*BLOCKS_3, "multi_gpu")
"""The three blocks plus ``x * is_multi_gpu``."""


def _block_gates(glob: np.ndarray, blocks: Sequence[str]) -> list[float]:
    """Multiplier of each block for one observation's globals ``glob (G,)``."""
    gates = {
        "all": 1.0,
        "sharing": float(glob[SHARING_GLOBAL]),
        "cpu_only": float(glob[CPU_ONLY_GLOBAL]),
        "multi_gpu": float(glob[NUM_GPU_GLOBAL] * 8.0 >= 1.5),
    }
    return [gates[b] for b in blocks]


class TeacherScorer:
    """Shared by the linear scorers of both placement modes: greedy choice over the valid rows and
    JSON files. Subclasses define ``scores(obs) -> (K,)`` and ``to_dict()``."""

    def scores(self, obs: np.ndarray) -> np.ndarray:  # pragma: no cover - abstract
        raise NotImplementedError

    def to_dict(self) -> dict[str, Any]:  # pragma: no cover - abstract
        raise NotImplementedError

    def __call__(self, obs: np.ndarray, mask: np.ndarray) -> int:
        s = self.scores(obs)
        s[~np.asarray(mask, dtype=bool)] = -np.inf
        return int(np.argmax(s))

    def save(self, path: str | Path) -> Path:
        """Write the scorer as JSON."""
        p = Path(path)
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(json.dumps(self.to_dict(), indent=1) + "\n")
        return p


class LinearScorer(TeacherScorer):
    """Greedy linear scorer over candidate rows (see the module docstring).

    Args:
        weights: ``(B*F,)`` weights, block after block.
        n_candidates: ``K``.
        n_cand_features: ``F``.
        blocks: the ``B`` feature blocks, a subset of ``BLOCKS_4`` in that order (default
            ``BLOCKS_3``).

    Calling it as ``scorer(obs, mask)`` with ``obs (K*F + G,)`` and ``mask (K,)`` bool returns the
    chosen action (an ``int`` in ``[0, K)``, always a masked-in one).
    """

    def __init__(
        self,
        weights: np.ndarray,
        n_candidates: int,
        n_cand_features: int,
        blocks: Sequence[str] = BLOCKS_3,
    ) -> None:
        blocks = tuple(blocks)
        if blocks not in (BLOCKS_3, BLOCKS_4):
            raise ValueError(f"blocks must be {BLOCKS_3} or {BLOCKS_4}, got {blocks}")
        for name, v in (("n_candidates", n_candidates), ("n_cand_features", n_cand_features)):
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
                raise ValueError(f"{name} must be an integer >= 1, got {v!r}")
        w = np.asarray(weights, dtype=np.float64).reshape(-1)
        n = len(blocks) * n_cand_features
        if w.shape != (n,):
            raise ValueError(f"weights must have shape ({len(blocks)}F,) = ({n},), got {w.shape}")
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
        self.blocks = blocks

    @classmethod
    def fgd(
        cls, n_candidates: int, n_cand_features: int, blocks: Sequence[str] = BLOCKS_3
    ) -> LinearScorer:
        """The scorer that always picks FGD's candidate."""
        w = np.zeros(len(tuple(blocks)) * n_cand_features)
        w[FGD_CHOICE_FEATURE] = 1.0
        return cls(w, n_candidates, n_cand_features, blocks)

    def with_blocks(self, blocks: Sequence[str]) -> LinearScorer:
        """The same scorer over more blocks (the new blocks' weights are 0, so it scores the same)."""
        blocks = tuple(blocks)
        if blocks[: len(self.blocks)] != self.blocks:
            raise ValueError(f"cannot extend blocks {self.blocks} to {blocks}")
        w = np.zeros(len(blocks) * self.n_cand_features)
        w[: self.weights.size] = self.weights
        return LinearScorer(w, self.n_candidates, self.n_cand_features, blocks)

    def widen(self, n_cand_features: int) -> LinearScorer:
        """The same scorer over observations with more features per row (appended after the
        current ``F``, e.g. the penalty features of ``GpuPlacementEnv(penalty_features=True)``):
        the new features get weight 0 in every block, so it chooses exactly as before."""
        f_old, f_new = self.n_cand_features, int(n_cand_features)
        if f_new < f_old:
            raise ValueError(f"cannot narrow a scorer from F={f_old} to F={f_new}")
        w = np.zeros((len(self.blocks), f_new))
        w[:, :f_old] = self.weights.reshape(len(self.blocks), f_old)
        return LinearScorer(w.reshape(-1), self.n_candidates, f_new, self.blocks)

    def features(self, obs: np.ndarray) -> np.ndarray:
        """``(K, B*F)`` scorer inputs of one observation."""
        k, f = self.n_candidates, self.n_cand_features
        rows = np.asarray(obs[: k * f], dtype=np.float64).reshape(k, f)
        gates = _block_gates(obs[k * f :], self.blocks)
        return np.concatenate([rows * g for g in gates], axis=1)

    def scores(self, obs: np.ndarray) -> np.ndarray:
        """``(K,)`` scores (before masking)."""
        return self.features(obs) @ self.weights

    def to_dict(self) -> dict[str, Any]:
        return {
            "format": "fleetmind-linear-scorer/1",
            "n_candidates": self.n_candidates,
            "n_cand_features": self.n_cand_features,
            "blocks": list(self.blocks),
            "weights": [float(x) for x in self.weights],
        }

    @classmethod
    def _from_dict(cls, d: dict[str, Any]) -> LinearScorer:
        """The scorer of a ``fleetmind-linear-scorer/1`` object (its tag already checked).

        Raises:
            ValueError, KeyError, TypeError: a field is missing or wrong (``n_candidates`` and
                ``n_cand_features`` must be JSON integers >= 1, the weights finite numbers).
        """
        blocks = tuple(d.get("blocks", BLOCKS_3))  # files written before blocks existed
        counts = [d["n_candidates"], d["n_cand_features"]]
        for name, v in zip(("n_candidates", "n_cand_features"), counts, strict=True):
            if isinstance(v, float) and v.is_integer():  # 16.0: the same count
                v = int(v)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"{name!r} must be an integer >= 1, got {v!r}")
        weights = np.asarray(d["weights"], dtype=np.float64)
        return cls(weights, int(counts[0]), int(counts[1]), blocks)

    @classmethod
    def load(cls, path: str | Path) -> LinearScorer:
        """Read a scorer written by :meth:`save`; :class:`ModelLoadError` names what is wrong."""
        p = Path(path)
        try:
            d = json.loads(p.read_text())
            if not isinstance(d, dict):
                raise ModelLoadError(
                    f"{p} is not a fleetmind linear scorer: expected a JSON object"
                )
            if d.get("format") != "fleetmind-linear-scorer/1":
                raise ValueError(f"format tag {d.get('format')!r}")
            return cls._from_dict(d)
        except FileNotFoundError as e:
            raise ModelLoadError(f"linear scorer file {p} does not exist") from e
        except (ValueError, KeyError, TypeError, AttributeError) as e:
            raise ModelLoadError(f"{p} is not a fleetmind linear scorer: {e}") from e


class StrandPenaltyScorer(TeacherScorer):
    """A linear scorer minus a penalty on host-stranded GPUs (the released teacher's form), and
    optionally one on GPU models that model-restricted pods need.

    ``score_k = base(x_k) - alpha * host_stranding_deltas()[k] - beta *
    model_scarcity_penalties()[k]``. The first signal is the change, in GPUs, of the idle GPU
    capacity on candidate k's node that its free CPU and memory could no longer serve at the
    workload's typical host demand; the second is, for a pod without a model restriction, its
    request in GPUs times the restricted pods' demand / capacity of the node's GPU model (both in
    ``envs.gpu_placement_env.GpuPlacementEnv``). They are read from the environment, not from the
    observation, so the scorer must be bound to the env whose observations it is given
    (:meth:`bind`). A cloned network sees only the observation and learns the penalties' effect
    from the teacher's choices.

    Args:
        base: the linear scorer to extend.
        alpha: penalty per stranded GPU (>= 0).
        beta: weight of the model-scarcity penalty (>= 0). With both 0 it scores exactly as
            ``base``.
    """

    FORMAT = "fleetmind-strand-scorer/1"

    def __init__(self, base: LinearScorer, alpha: float, beta: float = 0.0) -> None:
        for name, v in (("alpha", alpha), ("beta", beta)):
            if not np.isfinite(v) or v < 0:
                raise ValueError(f"{name} must be a finite number >= 0, got {v}")
        self.base = base
        self.alpha = float(alpha)
        self.beta = float(beta)
        self.n_candidates = base.n_candidates
        self.n_cand_features = base.n_cand_features
        self._env: Any = None

    def bind(self, env: Any) -> StrandPenaltyScorer:
        """Read the stranding signal from ``env`` (a ``GpuPlacementEnv`` or a wrapper of one)."""
        inner = getattr(env, "unwrapped", env)
        for needed in ("host_stranding_deltas", "model_scarcity_penalties"):
            if not hasattr(inner, needed):
                raise TypeError(f"{type(inner).__name__} has no {needed}()")
        self._env = inner
        return self

    def scores(self, obs: np.ndarray) -> np.ndarray:
        s = self.base.scores(obs)
        if self.alpha == 0 and self.beta == 0:
            return s
        if self._env is None:
            raise RuntimeError("StrandPenaltyScorer is not bound to an env: call bind(env) first")
        if self.alpha:
            s = s - self.alpha * self._env.host_stranding_deltas()
        if self.beta:
            s = s - self.beta * self._env.model_scarcity_penalties()
        return s

    def widen(self, n_cand_features: int) -> StrandPenaltyScorer:
        """The same scorer over wider observations (:meth:`LinearScorer.widen`); unbound."""
        return StrandPenaltyScorer(self.base.widen(n_cand_features), self.alpha, self.beta)

    def to_dict(self) -> dict[str, Any]:
        d = {"format": self.FORMAT, "alpha": self.alpha, "base": self.base.to_dict()}
        if self.beta:
            d["beta"] = self.beta  # files without it (the first strand teacher) read as 0
        return d

    @classmethod
    def load(cls, path: str | Path) -> StrandPenaltyScorer:
        """Read a scorer written by :meth:`save`; :class:`ModelLoadError` names what is wrong."""
        p = Path(path)
        try:
            d = json.loads(p.read_text())
            if not isinstance(d, dict):
                raise ModelLoadError(
                    f"{p} is not a fleetmind strand scorer: expected a JSON object"
                )
            if d.get("format") != cls.FORMAT:
                raise ValueError(f"format tag {d.get('format')!r}")
            base = d["base"]
            if not isinstance(base, dict):
                raise ValueError("'base' is not a JSON object")
            if base.get("format") != "fleetmind-linear-scorer/1":
                raise ValueError(f"base format tag {base.get('format')!r}")
            lin = LinearScorer._from_dict(base)
            return cls(lin, float(d["alpha"]), float(d.get("beta", 0.0)))
        except FileNotFoundError as e:
            raise ModelLoadError(f"strand scorer file {p} does not exist") from e
        except (ValueError, KeyError, TypeError, AttributeError) as e:
            raise ModelLoadError(f"{p} is not a fleetmind strand scorer: {e}") from e


def load_teacher(path: str | Path) -> LinearScorer | StrandPenaltyScorer:
    """A saved fgd-mode teacher of either kind, by its ``format`` tag."""
    p = Path(path)
    try:
        d = json.loads(p.read_text())
    except FileNotFoundError as e:
        raise ModelLoadError(f"teacher file {p} does not exist") from e
    except ValueError as e:
        raise ModelLoadError(f"{p} is not a JSON teacher file: {e}") from e
    if not isinstance(d, dict):
        raise ModelLoadError(f"{p} is not a fleetmind teacher file: expected a JSON object")
    fmt = d.get("format")
    if fmt == StrandPenaltyScorer.FORMAT:
        return StrandPenaltyScorer.load(p)
    return LinearScorer.load(p)


def episode_metric(
    env: Any,
    act: Callable[[np.ndarray, np.ndarray], int],
    trace: str,
    workload_seed: int,
    key: str = "unallocated_gpu_pct_at_100",
) -> float:
    """``info[key]`` of one greedy episode of ``act`` (:func:`fleetmind.rl.ppo.greedy_rollout`)."""
    from fleetmind.rl.ppo import greedy_rollout

    return float(greedy_rollout(env, act, trace, int(workload_seed))[key])


@dataclass
class CEMResult:
    """Outcome of :func:`cem_search`.

    Attributes:
        best: the best scorer found (FGD if nothing beat it).
        best_score: its mean metric over the search episodes (lower is better).
        fgd_score: FGD's mean metric over the same episodes.
        history: per generation ``{"generation", "best", "elite_mean", "sd_mean"}``.
        episodes: the ``(trace, workload seed)`` pairs scored.
        init_score: the starting scorer's mean metric (``None`` when the search started at FGD).
        final_mean: ``(W,)`` mean of the search distribution after the last refit (the average of
            the last elite). It was not scored on the search episodes; being an average of several
            good vectors, it is less tuned to those episodes' noise than ``best``.
    """

    best: LinearScorer
    best_score: float
    fgd_score: float
    history: list[dict[str, float]] = field(default_factory=list)
    episodes: list[tuple[str, int]] = field(default_factory=list)
    init_score: float | None = None
    final_mean: np.ndarray | None = None


GenerationCallback = Callable[[Any, float, list[dict[str, float]], np.ndarray], None]
"""``(best, best_score, history, mu)`` after a generation of :func:`cem_loop`: the best scorer so
far, its score, the history so far (one entry per finished generation) and the ``(W,)``
distribution mean after that generation's refit."""


def _scored_start(
    init: LinearScorer,
    blocks: tuple[str, ...],
    k: int,
    f: int,
    score: Callable[[LinearScorer], float],
    progress: Callable[[int], None] | None,
) -> tuple[LinearScorer, float]:
    """``init`` extended to ``blocks``, checked against the env's ``K`` and ``F``, and its score."""
    start = init.with_blocks(blocks)
    if (start.n_candidates, start.n_cand_features) != (k, f):
        raise ValueError(
            f"init scorer has K={start.n_candidates}, F={start.n_cand_features};"
            f" the env has K={k}, F={f}"
        )
    init_score = score(start)
    if progress is not None:
        progress(1)
    return start, init_score


def cem_search(
    env: Any,
    episodes: Sequence[tuple[str, int]],
    generations: int = 8,
    population: int = 14,
    n_elite: int = 4,
    init_sd: float = 0.5,
    sd_floor: float = 0.05,
    seed: int = 0,
    progress: Callable[[int], None] | None = None,
    init: LinearScorer | None = None,
    blocks: Sequence[str] = BLOCKS_3,
    objective: Callable[[np.ndarray, np.ndarray], float] | None = None,
    on_generation: GenerationCallback | None = None,
) -> CEMResult:
    """Cross-entropy search of a :class:`LinearScorer` on ``env`` (see the module docstring).

    Args:
        env: a placement env (unwrapped) with ``n_candidates``, ``n_cand_features`` and
            ``reset(options={"trace", "workload_seed"})``; usually ``GpuPlacement-v0`` with an FGD
            prefix (``fgd_until_pct``) so that episodes cover only the decisive tail.
        episodes: the ``(trace, workload seed)`` pairs every vector is scored on (mean metric).
        generations, population, n_elite: CEM sizes.
        init_sd, sd_floor: initial standard deviation and the noise added after each refit.
        seed: sampling seed.
        progress: called with 1 after each scored vector.
        init: where the search starts (default FGD). A scorer with fewer blocks is extended with
            zero weights. It is scored too, so the best vector is never worse than it on the
            search episodes.
        blocks: the scorer's feature blocks (``BLOCKS_3`` or ``BLOCKS_4``).
        objective: ``(metrics (E,), fgd_metrics (E,)) -> score`` (lower is better) of a vector
            from its per-episode metrics and FGD's on the same episodes; ``None``: the mean metric.
            Every score in the result (``best_score``, ``fgd_score``, ``init_score``, history) is
            in its units. See :func:`worst_trace_objective`.
        on_generation: called after every generation (see :func:`cem_loop`), e.g. to save the
            best-so-far vector so that a stopped search still leaves it; ``None``: nothing.
    """
    if not episodes:
        raise ValueError("cem_search needs at least one (trace, workload seed) episode")
    if not 1 <= n_elite <= population:
        raise ValueError(f"n_elite must be in [1, population], got {n_elite}")
    k, f = env.n_candidates, env.n_cand_features
    blocks = tuple(blocks)
    fgd = LinearScorer.fgd(k, f, blocks)

    def metrics(s: LinearScorer) -> np.ndarray:
        return np.array([episode_metric(env, s, t, w) for t, w in episodes])

    fgd_metrics = metrics(fgd)
    objective = objective or (lambda m, _fgd: float(np.mean(m)))

    def score(s: LinearScorer) -> float:
        return objective(metrics(s), fgd_metrics)

    fgd_score = objective(fgd_metrics, fgd_metrics)
    if progress is not None:
        progress(1)
    best, best_score = fgd, fgd_score
    if init is not None:
        start, init_score = _scored_start(init, blocks, k, f, score, progress)
        if init_score < best_score:
            best, best_score = start, init_score
    else:
        start, init_score = fgd, None
    rng = np.random.default_rng(seed)
    mu = start.weights.copy()
    sd = np.full(mu.shape, init_sd)
    sd[FGD_CHOICE_FEATURE] = 0.0  # the scale of the FGD flag is fixed; the rest is relative to it
    best, best_score, history, final_mean = cem_loop(
        mu,
        sd,
        FGD_CHOICE_FEATURE,
        lambda w: LinearScorer(w, k, f, blocks),
        score,
        best,
        best_score,
        generations=generations,
        population=population,
        n_elite=n_elite,
        sd_floor=sd_floor,
        rng=rng,
        progress=progress,
        on_generation=on_generation,
    )
    episodes_out = [(t, int(w)) for t, w in episodes]
    return CEMResult(
        cast(LinearScorer, best),
        best_score,
        fgd_score,
        history,
        episodes_out,
        init_score,
        final_mean,
    )


def worst_trace_objective(traces: Sequence[str]) -> Callable[[np.ndarray, np.ndarray], float]:
    """:func:`cem_search` objective that scores a vector by its worst trace.

    Per trace, the mean over that trace's episodes of ``metric / fgd_metric - 1`` (FGD on the same
    episode); the score is the largest of these (lower is better; FGD scores 0). A search on it
    cannot buy gains on some trace families with losses on others.

    Args:
        traces: ``(E,)`` the trace of each search episode, in the order of ``episodes``.

    Raises:
        ValueError: (when called) if FGD's metric is 0 on some episode (the ratio is undefined).
    """
    names = np.asarray(list(traces))
    groups = [names == t for t in dict.fromkeys(names.tolist())]

    def objective(m: np.ndarray, fgd_m: np.ndarray) -> float:
        if fgd_m.size != names.size or m.size != names.size:
            raise ValueError(f"worst_trace_objective: expected {names.size} episode metrics")
        if np.any(fgd_m <= 0):
            raise ValueError("worst_trace_objective: FGD's metric is 0 on some search episode")
        rel = m / fgd_m - 1.0
        return float(max(rel[g].mean() for g in groups))

    return objective


def cem_loop(
    mu: np.ndarray,
    sd: np.ndarray,
    fixed: int,
    make: Callable[[np.ndarray], TeacherScorer],
    score: Callable[[Any], float],
    best: TeacherScorer,
    best_score: float,
    *,
    generations: int,
    population: int,
    n_elite: int,
    sd_floor: float,
    rng: np.random.Generator,
    progress: Callable[[int], None] | None = None,
    on_generation: GenerationCallback | None = None,
) -> tuple[TeacherScorer, float, list[dict[str, float]], np.ndarray]:
    """The generations of a cross-entropy search (shared by both placement modes' teachers).

    Args:
        mu, sd: ``(W,)`` mean and standard deviation of the search distribution (``sd[fixed]``
            already 0).
        fixed: index of the weight whose scale stays fixed (its spread is reset to 0 after every
            refit).
        make: builds a scorer from a ``(W,)`` weight vector; ``score`` scores it (lower is better).
        best, best_score: the best scorer so far and its score (the starting point's).
        generations, population, n_elite, sd_floor: CEM sizes and the noise added after a refit.
        rng: the sampling generator.
        progress: called with 1 after each scored vector.
        on_generation: called after each generation with ``(best, best_score, history, mu)``
            (a copy of the history so far); ``None``: nothing.

    Returns:
        ``(best, best_score, history, mu)``; history per generation ``{"generation", "best",
        "elite_mean", "best_so_far", "sd_mean"}``; ``mu`` the ``(W,)`` distribution mean after the
        last refit.
    """
    history: list[dict[str, float]] = []
    for gen in range(generations):
        pop = [mu + sd * rng.standard_normal(mu.shape) for _ in range(population)]
        scored = []
        for w in pop:
            scored.append(score(make(w)))
            if progress is not None:
                progress(1)
        order = np.argsort(scored, kind="stable")
        elite = np.asarray([pop[i] for i in order[:n_elite]])
        mu = elite.mean(axis=0)
        sd = elite.std(axis=0) + sd_floor
        sd[fixed] = 0.0
        if scored[order[0]] < best_score:
            best, best_score = make(pop[order[0]]), float(scored[order[0]])
        history.append(
            {
                "generation": float(gen),
                "best": float(scored[order[0]]),
                "elite_mean": float(np.mean([scored[i] for i in order[:n_elite]])),
                "best_so_far": float(best_score),
                "sd_mean": float(sd.mean()),
            }
        )
        if on_generation is not None:
            on_generation(best, best_score, list(history), mu.copy())
    return best, best_score, history, mu
