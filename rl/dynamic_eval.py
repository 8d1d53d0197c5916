"""Dynamic-mode evaluation: learned actors and heuristics on the very same job streams.

Protocol (``docs/ppo-dynamic.md``). For a trace and a seed ``s``, one job stream and one node
tie-break priority are drawn from ``numpy.random.default_rng(s)`` exactly as
``fleetmind/MultiClusterPlacement-v0`` draws them on ``reset(seed=s)`` (and as
:func:`fleetmind.envs.dynamic.evaluate.evaluate_dynamic` does): :func:`fleetmind.envs.dynamic.jobs.build_jobs`, then a
permutation. Every policy then runs a fresh :class:`fleetmind.envs.dynamic.sim.DynamicSim` on that stream:

* a heuristic through :func:`fleetmind.envs.dynamic.policies.make_dynamic_policy` (its own node and GPU rule);
* a learned actor ``act(obs, mask) -> candidate`` through :class:`EnvActorPolicy`, which builds the
  env's observation and candidates for each decision (:meth:`MultiClusterPlacementEnv.attach`).

So a PPO agent and FGD are compared on identical arrivals, works, data homes, communication
intensities, node sample and priority; only the placement differs.

Shapes:
    - **obs**: ``(K*F + G,)`` float32 (``F = 14``, ``G = 12``; ``envs/multicluster_env.py``)
    - **mask**: ``(K,)`` bool
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

import numpy as np

from fleetmind.data.errors import ConfigError, DataError, ModelLoadError
from fleetmind.data.files import read_json
from fleetmind.data.openb import PodTrace, load_openb_trace
from fleetmind.envs.dynamic.jobs import DynJobs
from fleetmind.envs.dynamic.order import make_order
from fleetmind.envs.dynamic.policies import make_dynamic_policy
from fleetmind.envs.dynamic.sim import DynamicSim
from fleetmind.envs.multicluster_env import (
    CANDIDATE_SETS,
    N_CAND_FEATURES,
    N_GLOBAL_FEATURES,
    N_QUEUE_FEATURES,
    MultiClusterPlacementEnv,
)

Actor = Callable[[np.ndarray, np.ndarray], int]
"""``act(obs (D,), mask (K,)) -> candidate index``."""

DYNAMIC_FORMAT = "fleetmind-placement-dynamic/1"
"""``metadata.json`` format tag of a released dynamic-mode model."""

DEFAULT_HEURISTICS = (
    "FGD",
    "GpuPacking",
    "BestFit",
    "GpuClustering",
    "DotProd",
    "TopologyBestEffort",
    "LocalityAware",
)
"""Heuristics compared with the agent ("best heuristic" = lowest mean slowdown among them)."""

METRICS = (
    "mean_slowdown",
    "p99_queue_delay_s",
    "mean_jct_s",
    "mean_queue_delay_s",
    "mean_run_slowdown",
    "remote_data_frac",
    "gpu_allocation_ratio",
    "ms_per_decision",
    "p99_jct_s",
    "p99_slowdown",
)
"""Metrics of :meth:`DynamicSim.metrics` averaged over seeds (seconds for ``*_s``, milliseconds
for ``ms_per_decision``, ratios otherwise): those of
:func:`fleetmind.envs.dynamic.evaluate.evaluate_dynamic`, so both CLI paths report the same keys."""


@dataclass(frozen=True)
class DynEvalConfig:
    """The dynamic-mode setting shared by training episodes and evaluation runs.

    The env's defaults: a stratified 10 % node sample of the openb GPU fleet in 3 clusters (133
    nodes, 667 GPUs), 2,048 jobs per stream, offered load 0.8, backfill depth 8, ``K = 16``, and
    the ``locality`` candidate set (LocalityAware's top nodes among the candidates).
    ``queue_features`` adds the 4 queue-aware candidate features (``F = 18``,
    ``envs/multicluster_env.py``); off by default and for models whose metadata lacks it.
    """

    n_clusters: int = 3
    node_fraction: float = 0.1
    n_jobs: int = 2048
    target_util: float = 0.8
    backfill_depth: int = 8
    n_candidates: int = 16
    candidate_set: str = "locality"
    queue_features: bool = False
    queue_order: tuple[float, ...] | None = None
    """weights of the queue order (:mod:`fleetmind.envs.dynamic.order`); ``None``: FIFO with
    backfill (every model trained before the option)"""

    @classmethod
    def from_metadata(cls, env_kwargs: dict[str, Any]) -> DynEvalConfig:
        """The setting recorded in a model's ``metadata.json`` (``env_kwargs``); a key missing
        from an older file takes its default (``queue_features`` False: models trained before
        the option existed see the 14-feature rows).

        Raises:
            ValueError: a value of the wrong type (``"deep"`` for ``backfill_depth``, ``null``
                for ``n_candidates``) or outside the env's range.
        """
        known = {f.name for f in fields(cls)}
        kw = {k: v for k, v in env_kwargs.items() if k in known}
        for name, value in kw.items():
            _check_setting(name, value)
        if kw.get("queue_order") is not None:  # JSON gives a list; the config stays hashable
            kw["queue_order"] = tuple(float(x) for x in kw["queue_order"])
        return cls(**kw)

    def env_kwargs(self, trace: str | PodTrace) -> dict[str, Any]:
        """Keyword arguments of :class:`MultiClusterPlacementEnv` for ``trace``."""
        return {"trace": trace, **asdict(self)}


_MIN_SETTING: dict[str, int] = {
    "n_clusters": 1,
    "n_jobs": 1,
    "backfill_depth": 0,
    "n_candidates": 1,
}
"""Smallest value of each integer setting of :class:`DynEvalConfig` (the env's own checks)."""


def _check_setting(name: str, value: Any) -> None:
    """``ValueError`` unless ``value`` has the type (and range) of ``DynEvalConfig.<name>``.

    JSON gives ``int``/``float``/``str``/``bool``/``list``/``None``; ``bool`` is not a number here.
    """
    number = isinstance(value, int | float) and not isinstance(value, bool)
    if name in _MIN_SETTING:
        if type(value) is not int or value < _MIN_SETTING[name]:
            raise ValueError(f"{name} must be an integer >= {_MIN_SETTING[name]}, got {value!r}")
    elif name == "node_fraction":
        if not number or not 0 < value <= 1:
            raise ValueError(f"node_fraction must be a number in (0, 1], got {value!r}")
    elif name == "target_util":
        if not number or not 0 < value < float("inf"):
            raise ValueError(f"target_util must be a positive number, got {value!r}")
    elif name == "candidate_set":
        if value not in CANDIDATE_SETS:
            raise ValueError(f"candidate_set must be one of {CANDIDATE_SETS}, got {value!r}")
    elif name == "queue_features":
        if not isinstance(value, bool):
            raise ValueError(f"queue_features must be true or false, got {value!r}")
    elif name == "queue_order" and value is not None:
        ok = isinstance(value, list | tuple) and all(
            isinstance(x, int | float) and not isinstance(x, bool) for x in value
        )
        if not ok:
            raise ValueError(f"queue_order must be a list of numbers or null, got {value!r}")


@dataclass(frozen=True)
class Workload:
    """One dynamic-mode workload as a picklable job argument: a trace (an openb name or a CSV
    path, absolute for Ray workers) and a stream seed, in the env setting ``cfg``."""

    trace: str
    stream_seed: int
    cfg: tuple[tuple[str, Any], ...]
    """``DynEvalConfig`` as sorted ``(field, value)`` pairs (hashable, picklable)"""

    @classmethod
    def of(cls, trace: str | Path, stream_seed: int, cfg: DynEvalConfig) -> Workload:
        return cls(str(trace), int(stream_seed), tuple(sorted(asdict(cfg).items())))

    def config(self) -> DynEvalConfig:
        return DynEvalConfig(**dict(self.cfg))

    def make_env(self) -> MultiClusterPlacementEnv:
        """A new env of this workload's trace and setting."""
        return MultiClusterPlacementEnv(**self.config().env_kwargs(load_openb_trace(self.trace)))

    def env(self) -> MultiClusterPlacementEnv:
        """An env of this trace and setting, built once per process (:func:`cached`)."""
        return cached(("env", self.trace, self.cfg), self.make_env)


_CACHE: dict[Any, Any] = {}


def cached(key: Any, make: Callable[[], Any]) -> Any:
    """``make()``, once per process and ``key`` (job functions keep their models and envs)."""
    if key not in _CACHE:
        _CACHE[key] = make()
    return _CACHE[key]


class EnvActorPolicy:
    """A :class:`fleetmind.envs.dynamic.sim.DynamicPolicy` that asks an env-trained actor.

    Each decision builds ``env``'s observation for the job, calls ``act(obs, mask)`` and places
    the job on the chosen candidate's node and GPU set.

    Args:
        act: the actor.
        env: a :class:`MultiClusterPlacementEnv` on the simulator's fleet (same node sample).
        name: report name.
    """

    def __init__(self, act: Actor, env: MultiClusterPlacementEnv, name: str = "PPO") -> None:
        self.act = act
        self.env = env
        self.name = name

    def reset(self, sim: DynamicSim) -> None:
        """Attach the env's observation builder to ``sim``."""
        self.env.attach(sim)

    def select(self, sim: DynamicSim, j: int) -> tuple[int, np.ndarray | None]:
        obs = self.env.observe(j)
        mask = self.env.action_masks()
        a = int(self.act(obs, mask))
        if not (0 <= a < mask.size and mask[a]):
            raise ValueError(f"actor chose candidate {a}, not one of {np.flatnonzero(mask)}")
        nodes, gpus = self.env.candidates()
        return int(nodes[a]), gpus[a]


def job_stream(env: MultiClusterPlacementEnv, seed: int) -> tuple[DynJobs, np.ndarray]:
    """The job stream and node priority ``env.reset(seed=seed)`` would draw: a stream of which no
    job fits the fleet is redrawn as there (:meth:`MultiClusterPlacementEnv.draw_stream`;
    ``DataError`` after :data:`fleetmind.envs.multicluster_env.MAX_STREAM_DRAWS` such draws)."""
    return env.draw_stream(np.random.default_rng(seed))


def run_policy(
    env: MultiClusterPlacementEnv,
    jobs: DynJobs,
    priority: np.ndarray,
    policy: Any,
) -> dict[str, float]:
    """One :class:`DynamicSim` run of ``policy`` (a heuristic or an :class:`EnvActorPolicy`)."""
    sim = env.new_sim(jobs, priority)
    return sim.run(policy)


def evaluate_streams(
    trace: str | PodTrace,
    seeds: Sequence[int],
    actors: dict[str, Actor] | None = None,
    heuristics: Sequence[str] = DEFAULT_HEURISTICS,
    config: DynEvalConfig | None = None,
    progress: Callable[[str], None] | None = None,
    policies: dict[str, Callable[[MultiClusterPlacementEnv, int], Any]] | None = None,
    ordered: Collection[str] | None = None,
) -> dict[str, dict[str, Any]]:
    """Every heuristic and actor on the same job streams, one per seed.

    ``policies`` maps further names to ``make(env, seed) -> DynamicPolicy`` (e.g. the rollout
    policy, :class:`fleetmind.rl.rollout.DynamicRolloutPolicy`), built for each seed and run on its stream.
    ``ordered``: the names that run with ``config``'s queue order; every other policy runs with
    FIFO (a model with a learned order against its clone and the heuristics as published).
    ``None``: every policy runs with ``config``'s order. The job streams do not depend on it.

    Returns:
        ``{policy: {metric: mean over seeds, "n_rejected": jobs rejected on arrival (mean over
        seeds, rounded), "per_seed": {metric: [per seed], "n_started": [jobs started per seed]}}}``
        for the metrics of :data:`METRICS`, as :func:`fleetmind.envs.dynamic.evaluate.evaluate_dynamic`
        aggregates them.
    """
    cfg = config or DynEvalConfig()
    tr = trace if isinstance(trace, PodTrace) else load_openb_trace(trace)
    env = MultiClusterPlacementEnv(**cfg.env_kwargs(tr))
    names = list(heuristics) + list(actors or {}) + list(policies or {})
    rows: dict[str, list[dict[str, float]]] = {n: [] for n in names}
    order = env.queue_order

    def use(name: str) -> MultiClusterPlacementEnv:
        """``env`` with the queue order ``name`` runs with."""
        env.queue_order = order if ordered is None or name in ordered else None
        return env

    for seed in seeds:
        jobs, priority = job_stream(env, int(seed))
        for name in heuristics:
            pol = make_dynamic_policy(name, tr, env.fleet, int(seed))
            rows[name].append(run_policy(use(name), jobs, priority, pol))
            if progress is not None:
                progress(f"{name} seed {seed}")
        for name, act in (actors or {}).items():
            rows[name].append(run_policy(use(name), jobs, priority, EnvActorPolicy(act, env, name)))
            if progress is not None:
                progress(f"{name} seed {seed}")
        for name, make in (policies or {}).items():
            rows[name].append(run_policy(use(name), jobs, priority, make(env, int(seed))))
            if progress is not None:
                progress(f"{name} seed {seed}")
    out: dict[str, dict[str, Any]] = {}
    for name in names:
        r = rows[name]
        entry: dict[str, Any] = {k: float(np.mean([x[k] for x in r])) for k in METRICS}
        entry["n_rejected"] = int(round(float(np.mean([x["n_rejected"] for x in r]))))
        entry["per_seed"] = {k: [float(x[k]) for x in r] for k in (*METRICS, "n_started")}
        out[name] = entry
    return out


def best_heuristic(results: dict[str, dict[str, Any]], heuristics: Sequence[str]) -> str:
    """The heuristic with the lowest mean slowdown in ``results``."""
    present = [h for h in heuristics if h in results]
    if not present:
        raise ConfigError("no heuristic in the results")
    return min(present, key=lambda h: results[h]["mean_slowdown"])


def model_config(ref: str | Path) -> DynEvalConfig:
    """The :class:`DynEvalConfig` a dynamic-mode model was trained in, from the
    ``metadata.json`` next to ``ref`` (a folder or one of its files); the default setting when
    there is no metadata file.

    Raises:
        ModelLoadError: corrupt metadata or not a dynamic-mode model.
    """
    p = Path(ref)
    meta = _read_metadata(p if p.is_dir() else p.parent)
    if meta is None:
        return DynEvalConfig()
    kw = meta.get("env_kwargs", {})
    if not isinstance(kw, dict):
        raise ModelLoadError(f"{p} metadata: env_kwargs is not an object")
    try:
        cfg = DynEvalConfig.from_metadata(kw)
        make_order(cfg.queue_order)  # a wrong weight vector fails here, not mid-evaluation
        return cfg
    except (TypeError, ValueError, ConfigError) as exc:
        raise ModelLoadError(f"{p} metadata: bad env_kwargs: {exc}") from exc


def _read_metadata(folder: Path) -> dict[str, Any] | None:
    meta_file = folder / "metadata.json"
    if not meta_file.is_file():
        return None
    try:  # read_json: a BOM is ignored, a huge integer or bad bytes are one line
        meta = read_json(meta_file, "metadata")
    except DataError as exc:
        raise ModelLoadError(f"corrupt {exc}") from exc
    if not isinstance(meta, dict) or meta.get("mode") != "dynamic":
        raise ModelLoadError(
            f"{meta_file} does not describe a dynamic-mode model (mode "
            f"{meta.get('mode') if isinstance(meta, dict) else None!r})"
        )
    return meta


def load_dynamic_actor(ref: str | Path, n_candidates: int | None = None) -> Any:
    """Load a released dynamic-mode actor (folder with ``policy.pt`` / ``policy.onnx`` and
    ``metadata.json``, or one of those files) and check it fits ``MultiClusterPlacement-v0``.

    The candidate width ``F`` must be 14, or 18 for a model trained with ``queue_features``
    (and, when the folder has a ``metadata.json``, the width its ``queue_features`` implies;
    build the evaluation env with :func:`model_config`).

    Returns:
        an object with ``predict(obs, mask)`` (:class:`fleetmind.rl.export.PlacementActor` or
        :class:`fleetmind.rl.export.OnnxActor`).

    Raises:
        ModelLoadError: missing or corrupt file, or a model made for another env (fgd mode, other
            ``K``/``F``/``G``).
    """
    from fleetmind.rl.export import OnnxActor, load_torch

    p = Path(ref)
    folder = p if p.is_dir() else p.parent
    if not p.exists():
        raise ModelLoadError(f"dynamic placement model not found: {p}")
    meta = _read_metadata(folder)
    if p.is_dir():
        p = folder / "policy.pt" if (folder / "policy.pt").is_file() else folder / "policy.onnx"
    if p.suffix == ".onnx":
        actor = OnnxActor(p)
        k = actor.n_candidates
        dim = int(actor.session.get_inputs()[0].shape[1])
        f, g = 0, 0
        for width in (N_CAND_FEATURES, N_CAND_FEATURES + N_QUEUE_FEATURES):
            if dim - k * width == N_GLOBAL_FEATURES:
                f, g = width, N_GLOBAL_FEATURES
        if f == 0:
            f, g = N_CAND_FEATURES, dim - k * N_CAND_FEATURES
    else:
        actor = load_torch(p)
        c = actor.config
        k, f, g = c["n_candidates"], c["n_cand_features"], c["n_global_features"]
    widths = (N_CAND_FEATURES, N_CAND_FEATURES + N_QUEUE_FEATURES)
    if f not in widths or g != N_GLOBAL_FEATURES:
        raise ModelLoadError(
            f"{p} expects F={f} candidate and G={g} global features; "
            f"MultiClusterPlacement-v0 has F={N_CAND_FEATURES} (or "
            f"{N_CAND_FEATURES + N_QUEUE_FEATURES} with queue_features), G={N_GLOBAL_FEATURES}"
        )
    if meta is not None:
        qf = model_config(folder).queue_features  # checked settings (ModelLoadError if bad)
        want = N_CAND_FEATURES + (N_QUEUE_FEATURES if qf else 0)
        if f != want:
            raise ModelLoadError(
                f"{p} expects F={f} candidate features but its metadata says "
                f"queue_features={qf} (F={want})"
            )
    if n_candidates is not None and k != n_candidates:
        raise ModelLoadError(f"{p} has K={k} candidates, the env uses K={n_candidates}")
    return actor


def actor_fn(model: Any) -> Actor:
    """``act(obs, mask)`` of an object with ``predict(obs, mask)``."""

    def act(obs: np.ndarray, mask: np.ndarray) -> int:
        return int(model.predict(obs, mask))

    return act
