"""Rollout placement (Bertsekas' rollout algorithm) over a released model's clone: policy ``rollout``.

At a decision inside the look-ahead window the policy takes the clone's top ``k`` candidates (by
the clone's own logits; the clone's greedy choice first), places the job on each in a copy of the
simulator, finishes the episode greedily with the clone (argmax), and keeps the candidate whose
finished episode scores best on the mode's metric. Outside the window it acts as the clone.

* **fgd mode** (:func:`run_rollout_fgd`): the metric is the unallocated GPU % at 100 % arrived
  (:func:`fleetmind.envs.fgd_mode.unallocated_at`); the window is a band of arrived workload, in % of the
  GPU capacity (the *fill* at the decision). A rollout stops once the arrived workload passes
  101 %: later pods cannot change the metric.
* **dynamic mode** (:class:`DynamicRolloutPolicy`): the metric is the mean slowdown of the run
  (the p99 queueing delay of each finished rollout is logged beside it); the window is a range of
  decision indices (0 = the run's first placement).

The future is either

* ``known``: the run's own future arrivals (the seed's workload). The clone is deterministic, so
  one rollout gives the exact value of an alternative; the result is an upper bound on what a
  one-step learner on top of the clone can reach, and (Bertsekas' cost improvement) never worse
  than the clone itself: the clone's own candidate is always evaluated and a deviation is taken
  only when it scores strictly better. Or
* ``sampled``: what a deployment could do. fgd mode draws the future pods uniformly with
  replacement from the trace (the rule fgd mode itself resamples by); dynamic mode replaces the
  jobs that have not arrived by those of independent streams of the same trace and load
  (``MultiClusterPlacementEnv.draw_stream``) after the current time; jobs that have arrived keep
  their true sizes and runtimes. Each candidate's value is the mean over ``samples`` futures,
  the same futures for every candidate (common random numbers), drawn from generators seeded by
  ``(sample_seed, run seed, decision)`` and never from the run's own generator, so a run is a
  pure function of its seed and the options.

``depth = 2`` looks ahead over two consecutive decisions (the clone's top ``k`` at the first,
each followed by the clone's top ``k`` at the second, then the clone): ``k + k^2`` rollouts per
decision. With a known future the policy keeps the best sequence found so far (its value and
its second step) and deviates from it only on a strict improvement (the *fortified* rollout), so
the cost-improvement guarantee holds for any ``every`` and ``depth``.

Cost: one rollout is one clone episode from the decision on (fgd mode: about 0.2 ms per pod on
one core; dynamic mode about 0.4 ms per job), so a decision costs ``(k - 1)`` (known future,
``depth = 1``) to ``k x samples`` rollouts; ``every`` looks ahead at every n-th decision of the
window only.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field, fields, replace
from typing import Any

import numpy as np

from fleetmind.data.errors import ConfigError, DataError
from fleetmind.data.openb import OpenbNodes, PodTrace, load_openb_nodes, load_openb_trace
from fleetmind.envs.core import ClusterState, Pod, pods_from_trace
from fleetmind.envs.dynamic.jobs import DynJobs
from fleetmind.envs.dynamic.sim import DynamicSim
from fleetmind.envs.fgd_mode import (
    DEFAULT_LEVELS,
    DEFAULT_SCALE,
    FgdResult,
    build_workload,
    unallocated_at,
)
from fleetmind.envs.multicluster_env import MultiClusterPlacementEnv
from fleetmind.rl.policy_adapter import PPOPlacementPolicy

FUTURES = ("known", "sampled")
DEFAULT_FGD_BAND = (50.0, 90.0)
"""fgd mode: look ahead while the arrived workload is in [50, 90) % of the GPU capacity."""
DEFAULT_DYNAMIC_BAND = (0.0, 256.0)
"""dynamic mode: look ahead at decisions 0..255."""
_EPS = 1e-9


@dataclass(frozen=True)
class RolloutConfig:
    """Options of the rollout policy.

    Attributes:
        k: candidates tried per decision (the clone's top ``k`` by its logits), >= 2.
        band: ``(lo, hi)``, the window where it looks ahead: fgd mode, arrived workload in % of GPU
            capacity (``lo <= fill < hi``); dynamic mode, decision indices (``lo <= i < hi``).
            ``None``: the mode's default (:data:`DEFAULT_FGD_BAND`, :data:`DEFAULT_DYNAMIC_BAND`).
        every: look ahead at every ``every``-th decision inside the window (1 = all).
        future: ``"known"`` (the run's real future; an upper bound) or ``"sampled"``.
        samples: sampled futures per decision (``future = "sampled"``).
        depth: consecutive decisions searched (1 or 2).
        sample_seed: seed of the sampled futures' generators (apart from the run's seed).
    """

    k: int = 3
    band: tuple[float, float] | None = None
    every: int = 1
    future: str = "known"
    samples: int = 4
    depth: int = 1
    sample_seed: int = 0

    def __post_init__(self) -> None:
        if self.k < 2:
            raise ConfigError(f"rollout k must be at least 2, got {self.k}")
        if self.every < 1:
            raise ConfigError(f"rollout every must be at least 1, got {self.every}")
        if self.future not in FUTURES:
            raise ConfigError(f"rollout future must be one of {FUTURES}, got {self.future!r}")
        if self.samples < 1:
            raise ConfigError(f"rollout samples must be at least 1, got {self.samples}")
        if self.depth not in (1, 2):
            raise ConfigError(f"rollout depth must be 1 or 2, got {self.depth}")
        if self.band is not None:
            lo, hi = self.band
            if not (np.isfinite(lo) and np.isfinite(hi)) or hi <= lo or lo < 0:
                raise ConfigError(f"rollout band must be 0 <= LO < HI, got {lo} {hi}")

    def window(self, mode: str) -> tuple[float, float]:
        """The look-ahead window of ``mode`` (``"fgd"`` or ``"dynamic"``)."""
        if self.band is not None:
            return float(self.band[0]), float(self.band[1])
        return DEFAULT_FGD_BAND if mode == "fgd" else DEFAULT_DYNAMIC_BAND


@dataclass
class RolloutLog:
    """Where the rollout looked ahead and what it found, one entry per look-ahead decision.

    Attributes:
        index: decision index (fgd mode: the pod's arrival position).
        where: fgd mode, the arrived workload at the decision (% of GPU capacity); dynamic mode,
            simulated time (s).
        gain: metric of the clone's own candidate minus that of the chosen one (>= 0; known
            future: exact; sampled: the estimate). fgd: GPU % points; dynamic: slowdown.
        changed: the decision differs from the clone's.
        rollouts: clone episodes run.
    """

    index: list[int] = field(default_factory=list)
    where: list[float] = field(default_factory=list)
    gain: list[float] = field(default_factory=list)
    changed: list[bool] = field(default_factory=list)
    rollouts: int = 0

    def add(self, index: int, where: float, gain: float, changed: bool) -> None:
        self.index.append(int(index))
        self.where.append(round(float(where), 4))
        self.gain.append(round(float(gain), 6))
        self.changed.append(bool(changed))

    def summary(self) -> dict[str, Any]:
        """``{"lookaheads", "changed", "rollouts", "changed_at": [[index, where, gain]...]}``."""
        ch = [i for i, c in enumerate(self.changed) if c]
        return {
            "lookaheads": len(self.index),
            "changed": len(ch),
            "rollouts": self.rollouts,
            "changed_at": [[self.index[i], self.where[i], self.gain[i]] for i in ch],
        }


def actor_logits(actor: Any, obs: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """``(K,)`` float logits of an exported actor (:class:`fleetmind.rl.export.OnnxActor` or
    :class:`fleetmind.rl.export.PlacementActor`, or any object with ``logits(obs, mask) -> (K,)``) for one
    observation; masked entries very negative."""
    if hasattr(actor, "logits"):
        return np.asarray(actor.logits(obs, mask), dtype=float)
    o = np.atleast_2d(obs).astype(np.float32, copy=False)
    m = np.atleast_2d(mask).astype(bool, copy=False)
    if hasattr(actor, "session"):
        return np.asarray(actor.session.run(["logits"], {"obs": o, "mask": m})[0][0], dtype=float)
    import torch

    with torch.no_grad():
        _, logits = actor(torch.as_tensor(o), torch.as_tensor(m))
    return logits[0].numpy().astype(float)


def top_k(actor: Any, obs: np.ndarray, mask: np.ndarray, k: int) -> list[int]:
    """The actor's greedy candidate, then its next best real candidates by logit: ``<= k``
    candidate indices."""
    greedy = int(actor.predict(obs, mask))
    logits = actor_logits(actor, obs, mask)
    order = np.argsort(-logits, kind="stable")
    rest = [int(a) for a in order if mask[a] and int(a) != greedy]
    return [greedy, *rest[: k - 1]]


# ------------------------------------------------------------------------------------ fgd mode
def _fork(base: PPOPlacementPolicy, state: ClusterState) -> PPOPlacementPolicy:
    """A copy of the clone policy bound to ``state`` (a copy of ``base``'s state), same decisions."""
    p = PPOPlacementPolicy(base.actor, base.builder.n_candidates, base.metadata, base.source)
    p.builder.reset(
        state, typical=base.builder.fgd.typical, penalty_context=base.builder.penalty_context
    )
    p._arrived = base._arrived  # noqa: SLF001 - the arrived workload the clone has seen
    return p


def _choices(
    pol: PPOPlacementPolicy, state: ClusterState, pod: Pod, mask: np.ndarray, k: int
) -> list[tuple[int, np.ndarray]]:
    """The clone's top ``k`` placements ``(node, gpus)`` for ``pod`` (greedy first), updating its
    arrived counter exactly as :meth:`PPOPlacementPolicy.select` does; ``[]`` when none fits."""
    pol._arrived += pod.gpu_request  # noqa: SLF001
    idx = np.flatnonzero(mask)
    if idx.size == 0:
        return []
    if idx.size == 1:
        node = int(idx[0])
        return [(node, pol.builder.fgd_gpus(pod, node))]
    pol._arrived = max(pol._arrived, state.allocated_gpu_milli + pod.gpu_request)  # noqa: SLF001
    cand = pol.candidates(state, pod, mask)
    acts = top_k(pol.actor, cand.obs, cand.mask, k)
    return [(int(cand.nodes[a]), cand.gpus[a]) for a in acts]


@dataclass
class _FgdFuture:
    """Pods after the decision and the arrived-% records of the whole run with them."""

    pods: list[Pod]
    arrived_pct: np.ndarray  # (n_prefix + 1 + len(pods),)


class _FgdRollout:
    def __init__(
        self,
        trace: PodTrace,
        clone: PPOPlacementPolicy,
        seed: int,
        nodes: OpenbNodes,
        config: RolloutConfig,
        progress: Callable[[int], None] | None,
    ) -> None:
        self.cfg = config
        self.trace = trace
        self.seed = int(seed)
        self.state = ClusterState.from_openb(nodes)
        wl = build_workload(trace, len(nodes), self.state.gpu_capacity_milli, seed, DEFAULT_SCALE)
        self.workload = wl.trace
        self.state.set_priority(wl.priority)
        self.clone = clone
        clone.reset(self.state, rng=np.random.default_rng([seed, 1]), trace=trace)
        self.pods = pods_from_trace(wl.trace)
        self.cap = self.state.gpu_capacity_milli
        self.unit = self.cap / 100.0
        self.arrived = np.cumsum(wl.trace.gpu_request)
        self.arrived_pct = np.round(self.arrived / self.unit)
        # records past 101 % arrived do not enter the metric at 100 %
        self.horizon = int(np.searchsorted(self.arrived_pct, 101, side="right"))
        self.progress = progress
        self.log = RolloutLog()

    # value of a finished run: unallocated % at 100 % before the final rounding (monotone in it;
    # the records nearest to 100 % when none lies within 99..101 %)
    def _value(self, arrived_pct: np.ndarray, alloc: np.ndarray) -> float:
        sel = arrived_pct == 100
        if not sel.any():
            sel = np.abs(arrived_pct - 100) <= 1
        if not sel.any():  # a sampled future can jump past 99..101: the records nearest to 100
            dist = np.abs(arrived_pct - 100)
            sel = dist == dist.min()
        return 100.0 - float(np.round(alloc[sel] / self.unit, 2).mean())

    def _futures(self, i: int) -> list[_FgdFuture]:
        prefix = self.arrived_pct[: i + 1]
        if self.cfg.future == "known":
            return [_FgdFuture(self.pods[i + 1 : self.horizon], self.arrived_pct[: self.horizon])]
        tr = self.trace
        out = []
        for s in range(self.cfg.samples):
            rng = np.random.default_rng([self.cfg.sample_seed, self.seed, i, s])
            total = int(self.arrived[i])
            rows: list[int] = []
            while round(total / self.unit) <= 101:
                j = int(rng.integers(len(tr)))
                rows.append(j)
                total += int(tr.gpu_request[j])
            sub = tr.take(np.asarray(rows, dtype=np.int64))
            arr = self.arrived[i] + np.cumsum(sub.gpu_request)
            pct = np.concatenate([prefix, np.round(arr / self.unit)])
            out.append(_FgdFuture(pods_from_trace(sub), pct))
        return out

    def _q(
        self, i: int, node: int, gpus: np.ndarray, futures: list[_FgdFuture]
    ) -> tuple[float, tuple[int, np.ndarray] | None]:
        """Mean value over ``futures`` of placing pod ``i`` on ``node``/``gpus`` then the clone
        (with ``depth = 2``: the best second step, returned for a known future)."""
        vals = []
        second = None
        prefix = self.alloc[:i]
        for fut in futures:
            st = self.state.copy()
            pol = _fork(self.clone, st)
            st.place(self.pods[i], node, gpus)
            head = [st.allocated_gpu_milli]
            v, second_step = self._branch(st, pol, fut, prefix, head)
            vals.append(v)
            second = second_step
        return float(np.mean(vals)), second

    def _branch(
        self,
        st: ClusterState,
        pol: PPOPlacementPolicy,
        fut: _FgdFuture,
        prefix: np.ndarray,
        head: list[int],
    ) -> tuple[float, tuple[int, np.ndarray] | None]:
        pods = fut.pods
        if self.cfg.depth > 1 and pods:
            pod = pods[0]
            mask = st.feasible(pod)
            if np.count_nonzero(mask) >= 2:
                best: tuple[float, tuple[int, np.ndarray] | None] | None = None
                for node, gpus in _choices(pol, st, pod, mask, self.cfg.k):
                    st2 = st.copy()
                    p2 = _fork(pol, st2)
                    st2.place(pod, node, gpus)
                    rec = self._clone_records(st2, p2, pods[1:])
                    alloc = np.concatenate([prefix, head, [st2.allocated_gpu_milli], rec])
                    v = self._value(fut.arrived_pct[: alloc.size], alloc)
                    if best is None or v < best[0] - _EPS:
                        best = (v, (node, gpus))
                return best  # type: ignore[return-value]
        rec = self._clone_records(st, pol, pods)
        alloc = np.concatenate([prefix, head, rec])
        return self._value(fut.arrived_pct[: alloc.size], alloc), None

    def _clone_records(
        self, state: ClusterState, pol: PPOPlacementPolicy, pods: list[Pod]
    ) -> np.ndarray:
        rec = np.empty(len(pods), dtype=np.int64)
        select, place, feasible = pol.select, state.place, state.feasible
        for t, pod in enumerate(pods):
            node, gpus = select(state, pod, feasible(pod))
            if node >= 0:
                place(pod, node, gpus)
            rec[t] = state.allocated_gpu_milli
        self.log.rollouts += 1
        return rec

    def run(self) -> FgdResult:
        cfg = self.cfg
        lo, hi = cfg.window("fgd")
        pods, state, clone = self.pods, self.state, self.clone
        n = len(pods)
        self.alloc = np.zeros(n, dtype=np.int64)
        placed = np.zeros(n, dtype=bool)
        node_of = np.full(n, -1, dtype=np.int64)
        fill = 100.0 * self.arrived / self.cap
        known = cfg.future == "known"
        # known future: the value of the trajectory being followed (the clone, or a committed
        # depth-2 plan) and the plan's pending second step
        incumbent: float | None = None
        plan: tuple[int, tuple[int, np.ndarray]] | None = None
        in_band = 0
        t0, c0 = time.perf_counter(), time.process_time()
        for i, pod in enumerate(pods):
            mask = state.feasible(pod)
            look = False
            if i < self.horizon and lo <= fill[i] < hi and np.count_nonzero(mask) >= 2:
                look = in_band % cfg.every == 0
                in_band += 1
            planned = plan[1] if plan is not None and plan[0] == i else None
            if look:
                choices = _choices(clone, state, pod, mask, cfg.k)
                node, gpus = self._decide(i, choices, planned, incumbent)
                if known:
                    incumbent, plan = self._incumbent, self._plan
            elif planned is not None:
                node, gpus = planned
                _count(clone, state, pod, mask)
            else:
                node, gpus = clone.select(state, pod, mask)
            if plan is not None and plan[0] <= i:
                plan = None
            if node >= 0:
                state.place(pod, node, gpus)
                placed[i] = True
                node_of[i] = node
            self.alloc[i] = state.allocated_gpu_milli
            if self.progress is not None:
                self.progress(1)
        seconds = time.perf_counter() - t0
        return FgdResult(
            trace=self.trace.name,
            policy="rollout",
            seed=self.seed,
            capacity_milli=self.cap,
            unallocated={
                lvl: unallocated_at(self.arrived, self.alloc, self.cap, lvl)
                for lvl in DEFAULT_LEVELS
            },
            arrived_milli=self.arrived,
            allocated_milli=self.alloc.copy(),
            placed=placed,
            seconds=seconds,
            node_of=node_of,
            workload=self.workload,
            extra={"cpu_seconds": time.process_time() - c0},
        )

    def _decide(
        self,
        i: int,
        choices: list[tuple[int, np.ndarray]],
        planned: tuple[int, np.ndarray] | None,
        incumbent: float | None,
    ) -> tuple[int, np.ndarray]:
        """The look-ahead decision for pod ``i``; sets ``_incumbent`` / ``_plan`` (known future)."""
        futures = self._futures(i)
        base_v = incumbent if self.cfg.future == "known" else None
        default = planned if planned is not None else choices[0]
        best_v, best, best_second = base_v, default, None
        v_greedy = None
        for c, (nd, g) in enumerate(choices):
            if base_v is not None and _same((nd, g), default):
                continue  # the followed trajectory: its value is the incumbent
            v, second = self._q(i, nd, g, futures)
            if c == 0:
                v_greedy = v
            if best_v is None or v < best_v - _EPS:
                best_v, best, best_second = v, (nd, g), second
        v_default = base_v if base_v is not None else v_greedy
        changed = not _same(best, choices[0])
        self.log.add(i, 100.0 * self.arrived[i] / self.cap, v_default - best_v, changed)
        self._incumbent = best_v
        self._plan = (i + 1, best_second) if best_second is not None else None
        return best


def _same(a: tuple[int, np.ndarray], b: tuple[int, np.ndarray]) -> bool:
    return int(a[0]) == int(b[0]) and np.array_equal(a[1], b[1])


def _count(pol: PPOPlacementPolicy, state: ClusterState, pod: Pod, mask: np.ndarray) -> None:
    """Advance the clone's arrived counter for a pod placed without asking it (as ``select``)."""
    pol._arrived += pod.gpu_request  # noqa: SLF001
    if np.count_nonzero(mask) >= 2:
        pol._arrived = max(pol._arrived, state.allocated_gpu_milli + pod.gpu_request)  # noqa: SLF001


def run_rollout_fgd(
    trace: PodTrace | str,
    clone: PPOPlacementPolicy,
    seed: int,
    nodes: OpenbNodes | None = None,
    config: RolloutConfig | None = None,
    progress: Callable[[int], None] | None = None,
) -> tuple[FgdResult, RolloutLog]:
    """One fgd-mode run (:func:`fleetmind.envs.fgd_mode.run_fgd`'s workload, node priority and metric) of the
    rollout policy over ``clone`` (a :class:`PPOPlacementPolicy`, e.g. a model folder's
    ``clone.onnx``).

    Args:
        progress: called with 1 after each pod (e.g. ``tqdm.update``).

    Returns:
        the run's :class:`fleetmind.envs.fgd_mode.FgdResult` (policy ``"rollout"``) and its
        :class:`RolloutLog` (``where`` = arrived % of GPU capacity).
    """
    tr = trace if isinstance(trace, PodTrace) else load_openb_trace(trace)
    nodes = nodes if nodes is not None else load_openb_nodes()
    if nodes.total_gpus == 0:
        raise DataError(f"node list {nodes.source} has no GPUs")
    run = _FgdRollout(tr, clone, seed, nodes, config or RolloutConfig(), progress)
    return run.run(), run.log


# -------------------------------------------------------------------------------- dynamic mode
def splice_future(real: DynJobs, sample: DynJobs, m: int, now: float) -> DynJobs:
    """``real``'s first ``m`` jobs (those that have arrived) followed by ``sample``'s jobs
    ``m .. J-1``, whose arrival gaps are kept and start at ``now`` (s). Both streams have ``J``
    jobs; the result has ``J`` jobs sorted by arrival."""
    n = len(real)
    if len(sample) != n:
        raise ValueError(f"sample stream has {len(sample)} jobs, the run {n}")
    base = float(sample.arrival_s[m - 1]) if m > 0 else 0.0
    arrival = np.concatenate([real.arrival_s[:m], now + (sample.arrival_s[m:] - base)])
    cols: dict[str, Any] = {}
    for f in fields(real):
        v = getattr(real, f.name)
        name = f.name
        if isinstance(v, np.ndarray) and v.shape[:1] == (n,):
            cols[name] = np.concatenate([v[:m], getattr(sample, name)[m:]])
    cols["arrival_s"] = arrival
    return replace(real, **cols)


class DynamicRolloutPolicy:
    """The rollout policy in dynamic mode (a :class:`fleetmind.envs.dynamic.sim.DynamicPolicy`).

    Args:
        model: the clone (an object with ``predict(obs, mask)`` and logits:
            :class:`fleetmind.rl.export.OnnxActor` or :class:`fleetmind.rl.export.PlacementActor`).
        make_env: builds a :class:`MultiClusterPlacementEnv` of the clone's setting (the
            observation builder; one per look-ahead level, made once).
        seed: the run's seed (seeds the sampled futures with ``config.sample_seed``).
        config: the options (``band`` in decision indices).
        progress: called with 1 after each decision.

    Attributes:
        log: the :class:`RolloutLog` of the last run (``where`` = simulated time, s).
    """

    name = "rollout"

    def __init__(
        self,
        model: Any,
        make_env: Callable[[], MultiClusterPlacementEnv],
        seed: int,
        config: RolloutConfig | None = None,
        progress: Callable[[int], None] | None = None,
    ) -> None:
        self.model = model
        self.cfg = config or RolloutConfig()
        self.seed = int(seed)
        self.progress = progress
        self.env = make_env()
        self._envs = [make_env(), make_env()]  # rollout levels: the second step, the finish
        self.log = RolloutLog()

    def reset(self, sim: DynamicSim) -> None:
        """Bind to a fresh run (the observation builder, the log, the sampled futures)."""
        self.env.attach(sim)
        self.log = RolloutLog()
        self._incumbent: float | None = None
        self._plan: tuple[int, tuple[int, np.ndarray]] | None = None
        self._in_band = 0
        self._pool: list[DynJobs] = []
        if self.cfg.future == "sampled":
            for s in range(self.cfg.samples):
                rng = np.random.default_rng([self.cfg.sample_seed, self.seed, s])
                self._pool.append(self.env.draw_stream(rng)[0])

    def _choices(
        self, env: MultiClusterPlacementEnv, j: int, k: int
    ) -> list[tuple[int, np.ndarray]]:
        obs = env.observe(j)
        mask = env.action_masks()
        nodes, gpus = env.candidates()
        acts = top_k(self.model, obs, mask, k) if k > 1 else [int(self.model.predict(obs, mask))]
        return [(int(nodes[a]), gpus[a]) for a in acts]

    def _finish(self, sim: DynamicSim) -> float:
        env = self._envs[1]
        env.attach(sim)
        while (j := sim.next_decision()) is not None:
            node, gpus = self._choices(env, j, 1)[0]
            sim.place(j, node, gpus)
        self.log.rollouts += 1
        return float(sim.metrics()["mean_slowdown"])

    def _q(
        self, sim: DynamicSim, j: int, step: tuple[int, np.ndarray]
    ) -> tuple[float, tuple[int, np.ndarray] | None]:
        """Mean slowdown (over the futures) of placing ``j`` by ``step``, then the clone (with
        ``depth = 2``: the best second step, returned for a known future)."""
        vals, second = [], None
        futures: list[DynJobs | None] = list(self._pool) if self._pool else [None]
        for fut in futures:
            s2 = sim.copy()
            if fut is not None:
                s2.replace_future(splice_future(sim.jobs, fut, sim._next_arrival, sim.now))  # noqa: SLF001
            s2.place(j, *step)
            j2 = s2.next_decision() if self.cfg.depth > 1 else None
            if j2 is None:
                vals.append(self._finish(s2))
                continue
            env = self._envs[0]
            env.attach(s2)
            best: tuple[float, tuple[int, np.ndarray]] | None = None
            for st2 in self._choices(env, j2, self.cfg.k):
                s3 = s2.copy()
                s3.place(j2, *st2)
                v = self._finish(s3)
                if best is None or v < best[0] - _EPS:
                    best = (v, st2)
            vals.append(best[0])
            second = (s2.n_decisions, best[1])
        return float(np.mean(vals)), second

    def step_values(
        self, sim: DynamicSim, j: int, steps: list[tuple[int, np.ndarray]]
    ) -> list[float]:
        """The estimated mean slowdown of placing job ``j`` by each ``(node, gpus)`` step and
        then following the clone (the mean over this run's futures; :meth:`reset` first). Used
        by :mod:`fleetmind.rl.distill` to label states the rollout policy did not visit itself."""
        return [self._q(sim, j, step)[0] for step in steps]

    def select(self, sim: DynamicSim, j: int) -> tuple[int, np.ndarray | None]:
        cfg = self.cfg
        lo, hi = cfg.window("dynamic")
        i = sim.n_decisions
        plan = self._plan
        planned = plan[1] if plan is not None and plan[0] == i else None
        if plan is not None and plan[0] <= i:
            self._plan = None
        in_window = lo <= i < hi
        choices = self._choices(self.env, j, cfg.k if in_window else 1)
        look = False
        if in_window and len(choices) >= 2:
            look = self._in_band % cfg.every == 0
            self._in_band += 1
        if look:
            out = self._decide(sim, j, choices, planned)
        else:
            out = planned if planned is not None else choices[0]
        if self.progress is not None:
            self.progress(1)
        return out

    def _decide(
        self,
        sim: DynamicSim,
        j: int,
        choices: list[tuple[int, np.ndarray]],
        planned: tuple[int, np.ndarray] | None,
    ) -> tuple[int, np.ndarray]:
        known = self.cfg.future == "known"
        base_v = self._incumbent if known else None
        default = planned if planned is not None else choices[0]
        best_v, best, best_second = base_v, default, None
        v_greedy = None
        for c, step in enumerate(choices):
            if base_v is not None and _same(step, default):
                continue
            v, second = self._q(sim, j, step)
            if c == 0:
                v_greedy = v
            if best_v is None or v < best_v - _EPS:
                best_v, best, best_second = v, step, second
        v_default = base_v if base_v is not None else v_greedy
        self.log.add(sim.n_decisions, sim.now, v_default - best_v, not _same(best, choices[0]))
        if known:
            self._incumbent = best_v
            self._plan = best_second
        return best


def run_rollout_dynamic(
    make_env: Callable[[], MultiClusterPlacementEnv],
    jobs: DynJobs,
    priority: np.ndarray,
    model: Any,
    seed: int,
    config: RolloutConfig | None = None,
    progress: Callable[[int], None] | None = None,
) -> tuple[dict[str, float], RolloutLog]:
    """One dynamic-mode run of the rollout policy on a job stream (``rl.dynamic_eval.job_stream``):
    the simulator's metrics (:meth:`DynamicSim.metrics` plus ``ms_per_decision``) and the log."""
    pol = DynamicRolloutPolicy(model, make_env, seed, config, progress)
    env = pol.env
    sim = env.new_sim(jobs, priority)
    return sim.run(pol), pol.log
