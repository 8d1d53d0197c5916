"""``fleetmind/MultiClusterPlacement-v0``: dynamic-mode placement on a multi-cluster fleet."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from fleetmind.data.errors import ConfigError, DataError
from fleetmind.data.openb import ANY_GPU_MODEL, GPU_MILLI, PodTrace, load_openb_trace
from fleetmind.envs.candidates import DEFAULT_N_CANDIDATES, OBS_HIGH, OBS_LOW, pod_shape_features
from fleetmind.envs.core import Pod
from fleetmind.envs.dynamic.fleet import DynFleet, best_bottleneck_set, load_dynamic_fleet
from fleetmind.envs.dynamic.jobs import DynJobs, build_jobs, ideal_runtimes
from fleetmind.envs.dynamic.model import DEFAULT_BACKFILL_DEPTH, DEFAULT_TARGET_UTIL, MAX_WORK_S
from fleetmind.envs.dynamic.order import make_order
from fleetmind.envs.dynamic.policies import estimate_completion
from fleetmind.envs.dynamic.sim import DynamicSim
from fleetmind.envs.policies import FGD, fgd_score_from_delta
from fleetmind.envs.policies.scores import bestfit_scores
from fleetmind.errors import RenderModeError

N_CAND_FEATURES = 14
N_QUEUE_FEATURES = 4
"""Extra candidate features of ``queue_features=True`` (appended to the 14, so ``F = 18``)."""
CANDIDATE_SETS = ("default", "locality")
"""Candidate-set variants: ``locality`` adds LocalityAware's top nodes (best FGD score, then
earliest estimated completion) after FGD's, ahead of the earliest-completion block."""
N_GLOBAL_FEATURES = 12

CAND_FEATURE_NAMES = (
    "valid",
    "is_fgd_choice",
    "fgd_delta",
    "fgd_score",
    "bestfit_score",
    "gpu_used_after",
    "cpu_free_after",
    "link_score",
    "gpu_speed",
    "cluster_load",
    "data_local",
    "est_speedup",
    "data_share",
    "priority_rank",
)
QUEUE_FEATURE_NAMES = (
    "head_fit_lost",
    "head_stranded",
    "window_fit_lost",
    "head_room_after",
)
"""Queue-aware candidate features (``queue_features=True``), rows ``k*F + 14..17``."""
GLOBAL_FEATURE_NAMES = (
    "pod_gpu_milli",
    "pod_num_gpu",
    "pod_cpu",
    "pod_mem",
    "is_sharing",
    "is_cpu_only",
    "comm_intensity",
    "dataset_size",
    "allocated",
    "queue_length",
    "waited",
    "n_feasible",
)

MAX_STREAM_DRAWS = 100
"""``draw_stream`` (so ``reset``) draws at most this many job streams in a row: a stream without
any job that fits the fleet (no decision) is replaced by the next draw (``DataError`` after this
many)."""

MAX_HEAD_COPIES = 16
"""``head_room_after`` saturates at this many head requests (feature value 4)."""


def fits_rows(
    pod: Pod,
    cpu_free: np.ndarray,
    mem_free: np.ndarray,
    gpu_idle: np.ndarray,
    model_bit: np.ndarray,
    num_gpu: np.ndarray,
) -> np.ndarray:
    """``(k,)`` bool: ``pod`` fits each of ``k`` node states (the rules of
    :meth:`fleetmind.envs.core.ClusterState.feasible`; ``gpu_idle`` is ``(k, 8)`` milli-GPU with absent
    slots at 0)."""
    ok = (cpu_free >= pod.cpu_milli) & (mem_free >= pod.memory_mib)
    if pod.num_gpu == 0:
        return ok
    if pod.gpu_spec_mask != ANY_GPU_MODEL:
        ok &= (model_bit & pod.gpu_spec_mask) != 0
    else:
        ok &= num_gpu > 0
    if pod.num_gpu == 1:
        return ok & (gpu_idle >= max(pod.gpu_milli, 1)).any(axis=1)
    return ok & ((gpu_idle == GPU_MILLI).sum(axis=1) >= pod.num_gpu)


def fits_window(
    cpu_milli: np.ndarray,
    memory_mib: np.ndarray,
    num_gpu: np.ndarray,
    gpu_milli: np.ndarray,
    gpu_spec_mask: np.ndarray,
    cpu_free: np.ndarray,
    mem_free: np.ndarray,
    gpu_idle: np.ndarray,
    model_bit: np.ndarray,
    n_gpus: np.ndarray,
) -> np.ndarray:
    """``(W, k)`` bool: :func:`fits_rows` for ``W`` requests at once (``(W,)`` request arrays as
    in :class:`fleetmind.envs.dynamic.jobs.DynJobs`; node states as in :func:`fits_rows`)."""
    ok = (cpu_free[None, :] >= cpu_milli[:, None]) & (mem_free[None, :] >= memory_mib[:, None])
    any_model = (gpu_spec_mask == ANY_GPU_MODEL)[:, None]
    model_ok = np.where(
        any_model, (n_gpus > 0)[None, :], (model_bit[None, :] & gpu_spec_mask[:, None]) != 0
    )
    one = (gpu_idle[None, :, :] >= np.maximum(gpu_milli, 1)[:, None, None]).any(axis=2)
    multi = (gpu_idle == GPU_MILLI).sum(axis=1)[None, :] >= num_gpu[:, None]
    ng = num_gpu[:, None]
    gpu_ok = (ng == 0) | (model_ok & np.where(ng == 1, one, multi))
    return ok & gpu_ok


def room_rows(
    pod: Pod,
    cpu_free: np.ndarray,
    mem_free: np.ndarray,
    gpu_idle: np.ndarray,
    model_bit: np.ndarray,
    num_gpu: np.ndarray,
) -> np.ndarray:
    """``(k,)`` free capacity of each node state in units of ``pod``'s request: the minimum over
    CPU, memory and GPU of free / requested, capped at :data:`MAX_HEAD_COPIES`. GPU: idle
    milli-GPU / (``num_gpu`` x ``gpu_milli``) for a one-GPU pod, whole idle GPUs / ``num_gpu``
    for a multi-GPU pod; 0 on a node without GPUs of an allowed model. Fractional on purpose:
    a queue head that fits nowhere has room < 1 everywhere, and a placement lowers it on the
    nodes closest to fitting it."""
    cap = np.full(cpu_free.shape, float(MAX_HEAD_COPIES))
    if pod.cpu_milli > 0:
        cap = np.minimum(cap, np.maximum(cpu_free, 0) / pod.cpu_milli)
    if pod.memory_mib > 0:
        cap = np.minimum(cap, np.maximum(mem_free, 0) / pod.memory_mib)
    if pod.num_gpu == 0:
        return cap
    if pod.gpu_spec_mask != ANY_GPU_MODEL:
        cap = np.where((model_bit & pod.gpu_spec_mask) != 0, cap, 0.0)
    else:
        cap = np.where(num_gpu > 0, cap, 0.0)
    if pod.num_gpu == 1:
        per = np.maximum(gpu_idle, 0).sum(axis=1) / max(pod.gpu_milli, 1)
    else:
        per = (gpu_idle == GPU_MILLI).sum(axis=1) / pod.num_gpu
    return np.minimum(cap, per)


class MultiClusterPlacementEnv(gym.Env[np.ndarray, np.int64]):
    """
        ## Description

        Jobs of an Alibaba openb trace arrive over time at a fleet of several GPU clusters in different
        regions (by default the openb GPU nodes split into 3 clusters, a stratified 10 % sample of them),
        wait in a FIFO queue with bounded backfill, run, and depart (``envs/dynamic/``,
        ``docs/dynamic.md``). Each step places one job that can start now. A job's runtime depends on
        where it runs: the GPU model's relative throughput, the slowest link among its GPUs (for a
        multi-GPU job, weighted by its communication intensity), and the WAN transfer of its dataset when
        the node is outside the dataset's home cluster. The goal is a low mean slowdown (job completion
        time / ideal runtime): place jobs fast now without fragmenting the fleet for later jobs.

        CPU, memory, ``gpu_spec``, GPU-sharing (``gpu_milli`` < 1000) and multi-GPU requests are enforced by
        :class:`fleetmind.envs.core.ClusterState`. The env is work-conserving: every job that fits somewhere is
        placed at once, so there is no "wait" action. This keeps an episode at one step per job, rules out
        an agent that idles the fleet forever, and matches the heuristics it is compared with; holding a
        job back for a better node is left to the queue (jobs that fit nowhere wait).

        ## Action Space

        ``Discrete(K)`` (``K = n_candidates``, default 16): one of ``K`` candidate placements (a cluster,
        node and GPU set) proposed for the current job. Candidates: FGD's top nodes (candidate 0 is FGD's
        own choice), the nodes with the earliest estimated completion (locality and speed aware), BestFit's
        top nodes, then more of FGD's order, de-duplicated. A multi-GPU job gets the node's idle GPU set
        with the fastest slowest link; a sharing job FGD's GPU. ``action_masks()`` gives the ``(K,)`` bool
        mask of the distinct candidates (sb3-contrib ``MaskablePPO``). When fewer than ``K`` nodes are
        feasible, rows ``k..K-1`` repeat the real candidates cyclically (with feature 0 set to 0) and acting
        on one places the candidate it repeats, so every action of ``Discrete(K)`` is a feasible placement
        (random-action checkers and unmasked PPO work); an action outside ``0..K-1`` raises ``ValueError``.

        ## Observation Space

        ``Box(-1, 4, (K*F + G,), float32)``: ``K`` rows of ``F = 14`` candidate features (row-major) then
        ``G = 12`` global features, the convention of ``envs/candidates.py`` (except that missing candidates
    are repeated rows flagged by feature 0 = 0, see Action Space).

        | index | observation | min | max |
        | --- | --- | --- | --- |
        | ``k*F + 0`` | candidate k is distinct (1) or a repeated row (0) | 0 | 1 |
        | ``k*F + 1`` | candidate k is FGD's choice | 0 | 1 |
        | ``k*F + 2`` | tanh(FGD fragmentation decrease / 1000 milli-GPU) | -1 | 1 |
        | ``k*F + 3`` | FGD integer score / 100 | 0 | 1 |
        | ``k*F + 4`` | BestFit normalised score / 100 | 0 | 1 |
        | ``k*F + 5`` | node GPU used fraction after placing | 0 | 1 |
        | ``k*F + 6`` | node free CPU fraction after placing | 0 | 1 |
        | ``k*F + 7`` | link score: slowest link of the GPU set / fleet's fastest link (1 for < 2 GPUs) | 0 | 1 |
        | ``k*F + 8`` | GPU relative speed / fleet's fastest | 0 | 1 |
        | ``k*F + 9`` | allocated GPU fraction of the node's cluster | 0 | 1 |
        | ``k*F + 10`` | data local (node in the dataset's home cluster) | 0 | 1 |
        | ``k*F + 11`` | ideal runtime / estimated (data + run) time here | 0 | 1 |
        | ``k*F + 12`` | data transfer time / estimated (data + run) time here | 0 | 1 |
        | ``k*F + 13`` | node tie-break priority rank / N | 0 | 1 |
        | ``k*F + 14..17`` | only with ``queue_features``: see :meth:`queue_rows` | 0 | 4 |
        | ``K*F + 0..5`` | job per-GPU milli / 1000, GPUs / 8, CPU / 32 cores, memory / 64 GiB, is sharing, is CPU-only | 0 | 4 |
        | ``K*F + 6`` | communication intensity | 0 | 1 |
        | ``K*F + 7`` | log10(1 + dataset GB) / 3 | 0 | 1 |
        | ``K*F + 8`` | fleet allocated GPU fraction | 0 | 1 |
        | ``K*F + 9`` | queued jobs / 100 | 0 | 4 |
        | ``K*F + 10`` | tanh(time waited so far / ideal runtime) | 0 | 1 |
        | ``K*F + 11`` | feasible nodes / N | 0 | 1 |

        ## Rewards

        When job ``j`` starts, its completion time is known (no preemption, deterministic runtime):
        ``JCT_j = waited + data transfer + run``. The step reward is ``-reward_scale * (JCT_j / ideal_j - 1)``
        (``reward_scale`` 0.1 by default), so the undiscounted return of an episode is
        ``-reward_scale * N * (mean slowdown - 1)`` over its ``N`` started jobs: maximising the return is
        minimising the mean slowdown. The waiting part of a job's slowdown is caused by earlier decisions
        (fragmentation, slow placements that hold GPUs longer); the return credits it through the
        discounted sum.

        ## Starting State

        An empty fleet. A stream of ``n_jobs`` jobs is drawn with ``self.np_random``: a random start in
        the circular, time-sorted trace, the trace's inter-arrival gaps scaled to ``target_util``, and
        per job a communication intensity, a data home cluster and a dataset size
        (:func:`fleetmind.envs.dynamic.jobs.build_jobs`). The node tie-break priority is a random permutation.
        A stream in which no job fits the fleet (nothing to decide) is replaced by the next draw, up
        to :data:`MAX_STREAM_DRAWS` draws (then ``DataError`` naming the trace); the draws of a stream
        with a decision are unchanged. :meth:`draw_stream` does both, so evaluation
        (``rl.dynamic_eval.job_stream``) gets the stream ``reset`` plays.

        ## Episode End

        1. Termination: every job of the stream has started (jobs that fit no node of the empty fleet
           are rejected on arrival and never become steps).
        2. Truncation: ``max_steps`` decisions (default ``None``: no limit).

        The last ``info`` holds the episode's metrics (``mean_jct_s``, ``p99_jct_s``, ``mean_slowdown``,
        ``p99_queue_delay_s``, ``gpu_allocation_ratio``...) under ``"metrics"``.

        ## Arguments

        ```python
        import gymnasium as gym
        import fleetmind.envs  # registers the ids
        env = gym.make("fleetmind/MultiClusterPlacement-v0", trace="default", n_jobs=2048)
        ```

        * ``trace``: openb trace name, CSV path or :class:`PodTrace` (default ``"default"``).
        * ``fleet``: ``"openb"`` (openb GPU nodes in ``n_clusters`` clusters), a YAML fleet path, a
          :class:`fleetmind.data.fleet.Fleet` or a :class:`fleetmind.envs.dynamic.fleet.DynFleet` (default ``"openb"``).
        * ``n_clusters``: clusters of the openb fleet (default 3).
        * ``node_fraction``: stratified share of the fleet's nodes kept, within (0, 1] (default 0.1:
          1,213 openb nodes would need tens of thousands of jobs per episode to load them; see
          ``docs/dynamic.md``).
        * ``n_jobs``: jobs per episode (default 2048).
        * ``target_util``: offered GPU load (default 0.8).
        * ``n_candidates``: ``K`` (default 16).
        * ``backfill_depth``: queued jobs behind the head that may start first (default 8).
        * ``reward_scale``: see Rewards (default 0.1).
        * ``max_steps``: truncation (default ``None``).
        * ``speed_basis``: ``"fp16"`` (default) or ``"fp32"`` relative GPU speeds.
        * ``candidate_set``: ``"default"`` (FGD's top K/4, earliest completion K/4, BestFit's top
          K/8, then FGD's order) or ``"locality"`` (the same with LocalityAware's top K/4 inserted
          after FGD's; used by the dynamic-mode agent, ``docs/ppo-dynamic.md``).
        * ``queue_features``: append 4 queue-aware features to each candidate row (``F = 18``;
          :data:`QUEUE_FEATURE_NAMES`, :meth:`queue_rows`): does placing the job here take room
          the queue head or the backfill window needs (default ``False``: ``F = 14``, the
          observation of models trained before the option).
        * ``queue_order``: which startable job of the backfill window starts next
          (:mod:`fleetmind.envs.dynamic.order`): a name (``fifo``, ``sjf``, ``hrrn``, ``small``)
          or a weight vector; ``None`` (default): FIFO with backfill.
    """

    # render_fps: gymnasium's passive checker asks for it once a render mode is declared; ``ansi``
    # returns text on demand, so the figure only tells wrappers that record frames a pace (frames/s)
    metadata = {"render_modes": ["ansi"], "render_fps": 4}

    def __init__(
        self,
        trace: str | PodTrace = "default",
        fleet: str | Any = "openb",
        n_clusters: int = 3,
        node_fraction: float = 0.1,
        n_jobs: int = 2048,
        target_util: float = DEFAULT_TARGET_UTIL,
        n_candidates: int = DEFAULT_N_CANDIDATES,
        backfill_depth: int = DEFAULT_BACKFILL_DEPTH,
        reward_scale: float = 0.1,
        max_steps: int | None = None,
        speed_basis: str = "fp16",
        max_work_s: float | None = MAX_WORK_S,
        render_mode: str | None = None,
        candidate_set: str = "default",
        queue_features: bool = False,
        queue_order: str | Sequence[float] | None = None,
    ) -> None:
        if n_candidates < 1:
            raise ConfigError(f"n_candidates must be >= 1, got {n_candidates}")
        if n_jobs < 1:
            raise ConfigError(f"n_jobs must be >= 1, got {n_jobs}")
        if candidate_set not in CANDIDATE_SETS:
            raise ConfigError(
                f"candidate_set must be one of {CANDIDATE_SETS}, got {candidate_set!r}"
            )
        if not 0 < node_fraction <= 1:  # also refuses NaN
            raise ConfigError(f"node_fraction must be within (0, 1], got {node_fraction!r}")
        self.candidate_set = candidate_set
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise RenderModeError(
                f"render_mode must be one of {self.metadata['render_modes']}, got {render_mode!r}"
            )
        self.trace = trace if isinstance(trace, PodTrace) else load_openb_trace(trace)
        base = load_dynamic_fleet(fleet, n_clusters, speed_basis)
        self.fleet: DynFleet = base.sample(node_fraction) if node_fraction < 1 else base
        self.n_jobs = int(n_jobs)
        self.target_util = float(target_util)
        self.backfill_depth = int(backfill_depth)
        self.reward_scale = float(reward_scale)
        self.max_steps = max_steps
        self.max_work_s = max_work_s
        self.render_mode = render_mode
        self.n_candidates = int(n_candidates)
        self.queue_features = bool(queue_features)
        self.queue_order = make_order(queue_order)
        self.n_cand_features = N_CAND_FEATURES + (N_QUEUE_FEATURES if self.queue_features else 0)
        self.n_global_features = N_GLOBAL_FEATURES
        dim = self.n_candidates * self.n_cand_features + N_GLOBAL_FEATURES
        self.observation_space = spaces.Box(OBS_LOW, OBS_HIGH, (dim,), dtype=np.float32)
        self.action_space = spaces.Discrete(self.n_candidates)
        self._max_link = self.fleet.max_link_gbps
        self._max_speed = float(self.fleet.speed.max()) if self.fleet.n_nodes else 1.0
        self.sim: DynamicSim | None = None
        self.jobs: DynJobs | None = None
        self._fgd = FGD()
        self._job = -1
        self._steps = 0
        self._mask = np.zeros(self.n_candidates, dtype=bool)
        self._nodes = np.full(self.n_candidates, -1, dtype=np.int64)
        self._gpus: list[np.ndarray] = []

    def check_jobs_fit(self) -> None:
        """Refuse a trace of which no pod fits any node of the empty fleet: every stream drawn from
        it would leave the agent nothing to decide (cheap; no stream is drawn).

        Raises:
            DataError: naming the trace and the fleet's size.
        """
        t = self.trace
        n = len(t)
        ideal = ideal_runtimes(
            self.fleet,
            np.ones(n),
            t.cpu_milli,
            t.memory_mib,
            t.num_gpu,
            t.gpu_spec_mask,
            np.zeros(n),
        )
        if not np.isfinite(ideal).any():
            raise DataError(
                f"no job of the trace {t.source or t.name} ({n:,} pods) fits any node of the "
                f"dynamic-mode fleet ({self.fleet.n_nodes:,} nodes), so no stream has a decision"
            )

    def draw_stream(self, rng: np.random.Generator) -> tuple[DynJobs, np.ndarray]:
        """An episode's job stream and node tie-break priority (``(n_nodes,)`` ranks) drawn from
        ``rng``; :meth:`reset` draws them from ``self.np_random``, so ``default_rng(seed)`` gives
        the stream of ``reset(seed=seed)``. A stream of which no job fits the fleet (nothing to
        decide) is replaced by the next draw from ``rng``, up to :data:`MAX_STREAM_DRAWS` draws;
        the first draw is kept when one of its jobs fits.

        Raises:
            DataError: :data:`MAX_STREAM_DRAWS` streams in a row without a job that fits, naming
                the trace.
        """
        for _ in range(MAX_STREAM_DRAWS):
            jobs = build_jobs(
                self.trace,
                self.fleet,
                rng,
                target_util=self.target_util,
                n_jobs=self.n_jobs,
                max_work_s=self.max_work_s,
            )
            priority = np.argsort(rng.permutation(self.fleet.n_nodes))
            if np.isfinite(jobs.ideal_s).any():  # a job that fits the empty fleet: a decision
                return jobs, priority
        raise DataError(
            f"trace {self.trace.source or self.trace.name}: {MAX_STREAM_DRAWS} streams of "
            f"{self.n_jobs} jobs drawn in a row had no job that fits the fleet "
            f"({self.fleet.n_nodes} nodes); raise n_jobs or use a trace with more jobs that fit"
        )

    def new_sim(self, jobs: DynJobs, priority: np.ndarray) -> DynamicSim:
        """A :class:`DynamicSim` of this env's fleet and queue settings on ``jobs``."""
        return DynamicSim(
            self.fleet,
            jobs,
            backfill_depth=self.backfill_depth,
            priority=priority,
            order=self.queue_order,
        )

    # ------------------------------------------------------------------------------- gym API
    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        super().reset(seed=seed)
        # a stream with a job that fits the empty fleet (draw_stream): that job is a decision
        self.jobs, priority = self.draw_stream(self.np_random)
        self.sim = self.new_sim(self.jobs, priority)
        self._fgd.reset(self.sim.state, trace=self.trace)
        self._steps = 0
        self._job = self.sim.next_decision()
        obs = self._observe()
        return obs, self._info()

    def step(
        self, action: int | np.integer
    ) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        if self.sim is None or self._job is None or self._job < 0:
            raise RuntimeError("call reset() before step() (and again after the episode ended)")
        a = int(action)
        if not 0 <= a < self.n_candidates or a != action:
            raise ValueError(f"action {action!r} is not one of 0..{self.n_candidates - 1}")
        sim, j = self.sim, self._job
        sim.place(j, int(self._nodes[a]), self._gpus[a])
        jct = sim.end_s[j] - sim.jobs.arrival_s[j]
        reward = -self.reward_scale * (jct / sim.jobs.ideal_s[j] - 1.0)
        self._steps += 1
        nxt = sim.next_decision()
        terminated = nxt is None
        truncated = (
            (not terminated) and self.max_steps is not None and self._steps >= self.max_steps
        )
        info: dict[str, Any]
        if terminated:
            self._job = -1
            self._mask[:] = False
            obs = np.zeros(self.observation_space.shape, dtype=np.float32)
            info = {"metrics": sim.metrics(), "n_decisions": sim.n_decisions}
        else:
            self._job = nxt
            obs = self._observe()
            info = self._info()
            if truncated:
                info["metrics"] = sim.metrics()
        return obs, float(reward), terminated, truncated, info

    def action_masks(self) -> np.ndarray:
        """``(K,)`` bool: the real candidates of the current decision (for MaskablePPO)."""
        return self._mask.copy()

    def render(self) -> str | None:
        if self.render_mode != "ansi" or self.sim is None:
            return None
        sim = self.sim
        alloc = sim.cluster_alloc / np.maximum(sim.cluster_gpu_cap, 1)
        parts = [f"{c}: {a:.0%}" for c, a in zip(self.fleet.cluster_names, alloc, strict=True)]
        return f"t={sim.now:.0f}s queue={len(sim.queue)} job={self._job} | " + ", ".join(parts)

    # ------------------------------------------------------------------------------- internals
    @property
    def current_job(self) -> int:
        """Index (into ``self.jobs``) of the job being placed, -1 when the episode is over."""
        return -1 if self._job is None else int(self._job)

    def candidates(self) -> tuple[np.ndarray, list[np.ndarray]]:
        """``(K,)`` node per candidate (-1 padding) and the GPU set of each."""
        return self._nodes.copy(), list(self._gpus)

    def attach(self, sim: DynamicSim) -> None:
        """Bind the observation builder to an external simulator (policy adapters).

        Lets an agent trained in this env act inside :meth:`DynamicSim.run` on the very job stream
        the heuristics see (``rl/dynamic_eval.py``). ``sim`` must run on this env's fleet; after
        attaching, :meth:`observe` gives the observation of a queued job and :meth:`candidates`
        / :meth:`action_masks` its candidates. ``reset()`` detaches.

        Raises:
            ConfigError: ``sim`` runs on a different fleet (node count or speeds differ).
        """
        fl = sim.fleet
        if fl is not self.fleet and (
            fl.n_nodes != self.fleet.n_nodes or not np.array_equal(fl.speed, self.fleet.speed)
        ):
            raise ConfigError(
                f"simulator fleet ({fl.n_nodes} nodes) is not the env's ({self.fleet.n_nodes} nodes)"
            )
        self.sim = sim
        self.jobs = sim.jobs
        self._fgd.reset(sim.state, trace=self.trace)
        self._steps = 0
        self._job = -1

    def observe(self, job: int) -> np.ndarray:
        """Observation (and candidates, mask) for placing queued ``job`` of the attached sim now."""
        if self.sim is None:
            raise RuntimeError("attach() a simulator or reset() first")
        self._job = int(job)
        return self._observe()

    def queue_rows(self, j: int, nodes: np.ndarray, gpus: list[np.ndarray]) -> np.ndarray:
        """``(k, 4)`` queue-aware features (:data:`QUEUE_FEATURE_NAMES`) of placing job ``j`` on
        ``nodes[i]`` with ``gpus[i]``, for the attached simulator's state.

        The *head* is the first queued job other than ``j``; the *window* the queued jobs other
        than ``j`` among the first ``1 + backfill_depth`` of the queue (those the scheduler may
        start next). Columns: the head fits the node now and not after the placement (0/1); the
        head fits some node now and none after (0/1); window jobs that fit the node now and not
        after, / 4; the node's free capacity after the placement in units of the head's
        request (:func:`room_rows`), / 4. All zero when no other job is queued.
        """
        sim = self.sim
        st = sim.state
        pod = sim.pod(j)
        k = nodes.size
        out = np.zeros((k, N_QUEUE_FEATURES))
        depth = 1 + sim.backfill_depth
        window = [q for q in sim.queue[: depth + 1] if q != j][:depth]
        if not window or k == 0:
            return out
        cpu_b, mem_b = st.cpu_free[nodes], st.mem_free[nodes]
        idle_b = st.gpu_idle[nodes]
        bits, ngpu = st.model_bit[nodes], st.num_gpu[nodes]
        cpu_a, mem_a = cpu_b - pod.cpu_milli, mem_b - pod.memory_mib
        idle_a = idle_b.copy()
        if pod.num_gpu > 0:
            used = pod.gpu_milli if pod.is_sharing else GPU_MILLI
            for i, g in enumerate(gpus):
                idle_a[i, g] -= used
        w = np.asarray(window)
        jb = sim.jobs
        req = (jb.cpu_milli[w], jb.memory_mib[w], jb.num_gpu[w], jb.gpu_milli[w])
        spec = jb.gpu_spec_mask[w]
        before = fits_window(*req, spec, cpu_b, mem_b, idle_b, bits, ngpu)
        after = fits_window(*req, spec, cpu_a, mem_a, idle_a, bits, ngpu)
        gone = before & ~after  # (W, k)
        head = sim.pod(window[0])
        out[:, 0] = gone[0]
        n_fit = int(np.count_nonzero(st.feasible(head)))
        out[:, 1] = (n_fit > 0) & (n_fit - before[0].astype(np.int64) + after[0] == 0)
        out[:, 2] = gone.sum(axis=0) / 4.0
        out[:, 3] = room_rows(head, cpu_a, mem_a, idle_a, bits, ngpu) / 4.0
        return out

    def _info(self) -> dict[str, Any]:
        return {"job": int(self._job), "time_s": float(self.sim.now), "queue": len(self.sim.queue)}

    def _observe(self) -> np.ndarray:
        sim, j, fl = self.sim, self._job, self.fleet
        st = sim.state
        pod = sim.pod(j)
        jb = sim.jobs
        k_max = self.n_candidates
        mask = sim.feasible(j)
        idx = np.flatnonzero(mask)
        prio = st.priority[idx]
        delta_all, gpu_all = self._fgd.node_deltas(st, pod, mask)
        fgd_int = fgd_score_from_delta(delta_all[idx])
        bf = bestfit_scores(st, pod, mask)[idx]
        est, _ = estimate_completion(sim, j, idx, with_gpus=False)
        fgd_order = np.lexsort((prio, -fgd_int))
        loc_order = np.lexsort((prio, -fgd_int, est))
        bf_order = np.lexsort((prio, -bf))
        q = max(1, k_max // 4)
        blocks = [fgd_order[:q], loc_order[:q], bf_order[: max(1, k_max // 8)], fgd_order]
        if self.candidate_set == "locality":
            # LocalityAware's order: best FGD score first, then earliest estimated completion
            blocks.insert(1, np.lexsort((prio, est, -fgd_int))[:q])
        seq = np.concatenate(blocks)
        _, first = np.unique(seq, return_index=True)
        chosen = seq[np.sort(first)][:k_max]
        k = chosen.size
        nodes = idx[chosen]
        gpus: list[np.ndarray] = []
        link = np.ones(k)
        for i, n in enumerate(nodes.tolist()):
            if pod.num_gpu >= 2:
                bw, g = best_bottleneck_set(fl, n, sim.idle_bits(n), pod.num_gpu)
                gpus.append(np.array(g, dtype=np.int64))
                link[i] = min(bw / self._max_link, 1.0)
            elif pod.is_sharing:
                gpus.append(np.array([gpu_all[n]], dtype=np.int64))
            else:
                gpus.append(st.choose_gpus(pod, n))
        # exact estimates with the chosen GPU sets
        est_k = np.array(
            [sum(sim.runtime(j, int(n), g)) for n, g in zip(nodes.tolist(), gpus, strict=True)]
        )
        data_k = sim.data_time(j, fl.cluster[nodes])
        ngpu = st.num_gpu[nodes]
        cap_gpu = np.maximum(ngpu * GPU_MILLI, 1)
        idle_tot = st.gpu_idle[nodes].sum(axis=1)
        cl = fl.cluster[nodes]
        rows = np.zeros((k_max, self.n_cand_features))
        r = rows[:k]
        r[:, 0] = 1.0
        r[0, 1] = 1.0
        r[:, 2] = np.tanh(delta_all[nodes] / 1000.0)
        r[:, 3] = fgd_int[chosen] / 100.0
        r[:, 4] = bf[chosen] / 100.0
        r[:, 5] = (1.0 - (idle_tot - pod.gpu_request) / cap_gpu) * (ngpu > 0)
        r[:, 6] = (st.cpu_free[nodes] - pod.cpu_milli) / np.maximum(st.cpu_cap[nodes], 1)
        r[:, 7] = link
        r[:, 8] = (fl.speed[nodes] / self._max_speed) if pod.num_gpu > 0 else 1.0
        r[:, 9] = sim.cluster_alloc[cl] / np.maximum(sim.cluster_gpu_cap[cl], 1)
        r[:, 10] = cl == jb.data_home[j]
        r[:, 11] = jb.ideal_s[j] / np.maximum(est_k, 1e-9)
        r[:, 12] = data_k / np.maximum(est_k, 1e-9)
        r[:, 13] = prio[chosen] / st.n_nodes
        if self.queue_features:
            r[:, N_CAND_FEATURES:] = self.queue_rows(j, nodes, gpus)
        cap = st.gpu_capacity_milli
        glob = np.array(
            [
                *pod_shape_features(pod),
                float(jb.comm[j]),
                np.log10(1.0 + jb.data_gb[j]) / 3.0,
                st.allocated_gpu_milli / max(cap, 1),
                len(sim.queue) / 100.0,
                np.tanh((sim.now - jb.arrival_s[j]) / jb.ideal_s[j]),
                idx.size / st.n_nodes,
            ]
        )
        # rows k..K-1 repeat the real candidates cyclically (feature 0 = 0 marks the copies)
        rep = np.arange(k_max) % k
        rows = rows[rep]
        rows[k:, 0] = 0.0
        obs = np.concatenate([rows.reshape(-1), glob])
        np.clip(obs, OBS_LOW, OBS_HIGH, out=obs)
        self._mask = np.zeros(k_max, dtype=bool)
        self._mask[:k] = True
        self._nodes = nodes[rep]
        self._gpus = [gpus[i] for i in rep]
        return obs.astype(np.float32)
