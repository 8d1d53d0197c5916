"""``fleetmind/GpuPlacement-v0``: fgd-mode GPU placement as a gymnasium env with candidate actions."""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from fleetmind.data.errors import ConfigError, DataError
from fleetmind.data.openb import (
    ANY_GPU_MODEL,
    OpenbNodes,
    PodTrace,
    load_openb_nodes,
    load_openb_trace,
)
from fleetmind.envs.candidates import (
    DEFAULT_N_CANDIDATES,
    N_GLOBAL_FEATURES,
    OBS_HIGH,
    OBS_LOW,
    CandidateBuilder,
    Candidates,
    host_demand_per_gpu_milli,
    restricted_model_scarcity,
    stranding_deltas,
)
from fleetmind.envs.core import ClusterState, pods_from_trace
from fleetmind.envs.fgd_mode import DEFAULT_SCALE, build_workload, unallocated_at
from fleetmind.errors import RenderModeError

MAX_WORKLOAD_DRAWS = 100
"""``reset`` tries at most this many distinct workload seeds for one episode: a drawn workload
without any decision for the agent is replaced by the next draw (``DataError`` after this many)."""


def _trace_digest(trace: PodTrace) -> str:
    """A digest of what a trace asks for (its name, requests, constraints and times)."""
    h = hashlib.blake2b(trace.name.encode(), digest_size=16)
    for arr in (
        trace.cpu_milli,
        trace.memory_mib,
        trace.num_gpu,
        trace.gpu_milli,
        trace.gpu_spec_mask,
        trace.creation_time,
        trace.deletion_time,
    ):
        h.update(np.ascontiguousarray(arr).tobytes())
    return h.hexdigest()


def _seed_list(seeds: object) -> list[int] | None:
    """``workload_seeds`` as a list of ints >= 0, ``None`` when unset or empty.

    Any sequence or 1-D array of integer values (``[1, 2]``, ``np.arange(3)``, a 1-D torch
    tensor, ``(1.0, 2.0)``) is accepted; a string, a scalar, an array (numpy, torch, ...) with
    other than one axis, a nested sequence, a bool or a fractional value is a one-line
    ``ConfigError``.
    """
    if seeds is None:
        return None
    if (
        isinstance(seeds, str | bytes)
        or not hasattr(seeds, "__iter__")
        # any array (numpy, torch, ...) with other than one axis: a 0-d one cannot be iterated
        or (hasattr(seeds, "ndim") and np.ndim(seeds) != 1)
    ):
        raise ConfigError(
            f"workload_seeds must be a sequence of integers >= 0, got {_short_repr(seeds)}"
        )
    items = [_scalar(x) for x in seeds]  # type: ignore[attr-defined]
    for i, x in enumerate(items):  # only the first bad value: the list may be long
        if isinstance(x, str | bytes) or np.ndim(x) != 0 or not _is_integral(x) or x < 0:
            raise ConfigError(
                f"workload_seeds must be integers >= 0, got {_short_repr(x)} at index {i}"
            )
    return [int(x) for x in items] or None


def _scalar(x: object) -> object:
    """A numpy scalar or a 0-d array (numpy, torch) as its Python value, anything else as is."""
    if isinstance(x, np.generic) or (getattr(x, "ndim", None) == 0 and hasattr(x, "item")):
        return x.item()  # type: ignore[attr-defined]
    return x


def _short_repr(x: object, limit: int = 80) -> str:
    """``repr(x)`` on one line (whitespace runs joined by one space), cut to ``limit`` characters
    (a long array or string stays out of messages)."""
    text = " ".join(repr(x).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _is_integral(x: object) -> bool:
    """Whether ``x`` is an integer value (``3``, ``np.int64(3)``, ``3.0``), not a bool."""
    if isinstance(x, bool):
        return False
    try:
        return float(x).is_integer()  # type: ignore[arg-type]
    except (TypeError, ValueError, OverflowError):
        return False


class GpuPlacementEnv(gym.Env[np.ndarray, np.int64]):
    """
    ## Description

    Places the pods of an Alibaba openb trace one at a time on the 1,213 GPU nodes of the openb node
    list, in the setup of the FGD paper (Weng et al., USENIX ATC'23; ``envs/fgd_mode.py``): the
    trace is shuffled by a workload seed and resampled to 1.3x the cluster's GPU capacity, nodes get a
    seeded tie-break priority, and nothing departs. CPU, memory, ``gpu_spec``, GPU-sharing
    (``gpu_milli`` < 1000) and multi-GPU requests are enforced by :class:`fleetmind.envs.core.ClusterState`.
    The goal is to keep the unallocated GPU % at 100 % arrived workload low, i.e. to avoid
    fragmentation that leaves later pods without a feasible node.

    Only real choices are steps: a pod with no feasible node fails (recorded, as in the paper), and a
    pod with exactly one feasible node is placed there (as every heuristic does); both happen inside
    ``reset``/``step`` without asking the agent.

    ## Action Space

    ``Discrete(K)`` (``K = n_candidates``, default 16): the index of one of the candidate placements
    proposed for the current pod (a node and the GPUs there; see ``envs/candidates.py``). Candidate 0
    is always FGD's choice. ``action_masks()`` returns the ``(K,)`` bool mask of real candidates (for
    sb3-contrib's ``MaskablePPO``). When fewer than ``K`` nodes are feasible, the real candidates are
    rows ``0..k-1``; a masked action ``a >= k`` places candidate ``a % k`` (:meth:`real_action`, the
    rule of ``MultiClusterPlacement-v0``), so every element of ``Discrete(K)`` is a valid ``step()``
    input (gymnasium's and SB3's env checkers step with ``action_space.sample()``). The mask and the
    observation do not change: a masked policy never sees the difference. An action outside
    ``0..K-1`` raises ``ValueError``.

    ## Observation Space

    ``Box(-1, 4, (K*F + G,), float32)``: ``K`` rows of ``F = 18`` (``F = 20`` with
    ``penalty_features``: columns 18-19, see ``envs/candidates.py``) candidate features (row-major) then
    ``G = 10`` global features, all pre-scaled to about [-1, 1] (the normalisation lives in the env so
    that the exported policy and the service see exactly what training saw).

    | index | observation | min | max |
    | --- | --- | --- | --- |
    | ``k*F + 0`` | candidate k valid | 0 | 1 |
    | ``k*F + 1`` | candidate k is FGD's choice | 0 | 1 |
    | ``k*F + 2`` | tanh(FGD fragmentation decrease / 1000 milli-GPU) | -1 | 1 |
    | ``k*F + 3`` | FGD integer score / 100 | 0 | 1 |
    | ``k*F + 4`` | rank in FGD's order / (feasible nodes - 1) | 0 | 1 |
    | ``k*F + 5`` | candidate k is BestFit's choice | 0 | 1 |
    | ``k*F + 6..8`` | BestFit, GpuPacking, GpuClustering scores / 100 | 0 | 1 |
    | ``k*F + 9`` | node tie-break priority rank / N | 0 | 1 |
    | ``k*F + 10..11`` | node GPU used fraction before / after | 0 | 1 |
    | ``k*F + 12..13`` | node free CPU / memory fraction after | 0 | 1 |
    | ``k*F + 14`` | node GPUs / 8 | 0 | 1 |
    | ``k*F + 15`` | node fragmentation F_n / 8000 milli-GPU | 0 | 1 |
    | ``k*F + 16`` | idle milli left on the chosen GPU / 1000 (sharing pods) | 0 | 1 |
    | ``k*F + 17`` | fully idle GPUs after / 8 | 0 | 1 |
    | ``K*F + 0..5`` | pod per-GPU milli / 1000, GPUs / 8, CPU / 32 cores, memory / 64 GiB, is sharing, is CPU-only | 0 | 4 |
    | ``K*F + 6..9`` | arrived / (1.3 capacity), allocated / capacity, feasible nodes / N, cluster fragmentation / capacity | 0 | 1 |

    Padding rows (fewer than K feasible nodes) are all zero.

    ## Rewards

    ``r_t = 100 * (A_{t+1} - A_t) / C  -  shaping * 100 * (Phi_{t+1} - Phi_t) / C`` where ``A`` is the
    allocated GPU milli (including pods placed automatically between two decisions), ``C`` the GPU
    capacity in milli and ``Phi = sum_n F_n`` FGD's cluster fragmentation (milli-GPU, over the
    typical pods of the trace). The first term sums to the allocated GPU % at the end of the episode,
    i.e. 100 minus the unallocated GPU %; the second is potential-based shaping (Ng et al., 1999), which
    telescopes to ``-shaping * (Phi_T - Phi_0)`` and so does not change which policy is optimal in the
    undiscounted return while giving each step an immediate signal.

    With ``reward="metric"`` the reward is instead the evaluation metric's per-step
    decomposition: the metric is ``U = 100 - mean_{i in W} a_i`` over the window ``W`` of pod
    records whose arrived % rounds to 100 (the records within 99-101 % when none does; ``a_i`` the
    allocated GPU % after pod ``i``, rounded to 2 decimals, as in ``envs.fgd_mode.unallocated_at``).
    The arrival sequence is fixed at reset, so ``W`` is known then, and step ``t`` earns
    ``r_t = sum_{i in W finalised during step t} a_i / |W|`` (pods placed automatically before the
    next decision, or before the first one, included), with ``-100`` added on the last step. So
    ``sum_t r_t = -U`` exactly, up to the metric's rounding of the mean to 2 decimals (|error| <=
    0.005; ``tests/test_ppo_metric_reward.py``), whenever the episode covers the window (no
    ``stop_arrived_pct`` below 101). No shaping term is added in this mode.

    ## Starting State

    An empty cluster; the workload (order, resampled copies, node priority) is built from a workload
    seed drawn from ``self.np_random`` or given as ``options["workload_seed"]``; with several traces,
    one is drawn per episode (or ``options["trace"]``).
    A drawn workload that leaves the agent no decision (every pod fails, fits one node only, or
    arrives during the FGD prefix or after ``stop_arrived_pct``) is replaced by the next draw from
    ``self.np_random``, up to :data:`MAX_WORKLOAD_DRAWS` distinct seeds or every seed of
    ``workload_seeds`` (then ``DataError`` naming the trace and the prefix); the draws of a workload with a decision are unchanged. A workload seed
    given in ``options`` is kept even without a decision: the episode is then over at reset
    (zero observation, the final ``info``).

    ## Episode End

    1. Termination: every pod of the workload (up to 130 % arrived) has been processed.
    2. Truncation: the arrived GPU request passes ``stop_arrived_pct`` % of capacity (when set).

    The final ``info`` holds ``unallocated_gpu_pct_at_100`` and ``..._at_130`` (the paper's window-mean
    metric, NaN when the level was not reached), ``n_pods``, ``n_failed`` and ``n_decisions``.

    ## Arguments

    ```python
    import gymnasium as gym
    import fleetmind.envs  # registers the ids
    env = gym.make("fleetmind/GpuPlacement-v0", traces=["default", "cpu050"])
    ```

    * ``traces``: an openb trace name, a CSV path, a :class:`PodTrace`, or a list of them
      (default ``"default"``).
    * ``nodes``: the node list (default: the openb GPU nodes).
    * ``n_candidates``: ``K`` (default 16).
    * ``scale``: workload size relative to capacity (default 1.3; finite, > 0).
    * ``stop_arrived_pct``: truncate once arrivals pass this % of capacity (default ``None``: run the
      whole workload; training may use e.g. 102 since the metric is read at 100 %).
    * ``shaping``: weight of the fragmentation shaping term (default 1.0; ``reward="shaped"`` only).
    * ``reward``: ``"shaped"`` (default, above) or ``"metric"`` (the metric's decomposition).
    * ``fgd_until_pct``: pods arriving before this % of capacity are placed by FGD without asking
      the agent (default 0: the agent decides everything). Training uses it to spend its steps where
      fragmentation decides the outcome (near saturation); evaluation keeps 0.
    * ``cache_prefix``: keep the cluster state reached by that FGD prefix per (trace, workload seed)
      so that a repeated workload skips it (default True).
    * ``workload_seeds``: draw each episode's workload seed from this sequence (a list, tuple or
      1-D numpy array) of integers >= 0 (default: any seed); anything else is a ``ConfigError``.
    * ``penalty_features``: append the two penalty features to every candidate row (``F = 20``:
      the change in host-stranded GPUs and the model-scarcity penalty that the released teacher
      subtracts by hand; ``envs.candidates``). Their workload statistics come from the episode's
      trace as given, scaled to the 1.3x workload (``PenaltyContext.from_trace``), exactly as the
      exported policy computes them.
    """

    metadata = {"render_modes": []}

    def __init__(
        self,
        traces: str | PodTrace | list[str | PodTrace] = "default",
        nodes: OpenbNodes | None = None,
        n_candidates: int = DEFAULT_N_CANDIDATES,
        scale: float = DEFAULT_SCALE,
        stop_arrived_pct: float | None = None,
        shaping: float = 1.0,
        reward: str = "shaped",
        fgd_until_pct: float = 0.0,
        cache_prefix: bool = True,
        workload_seeds: Sequence[int] | np.ndarray | None = None,
        penalty_features: bool = False,
        render_mode: str | None = None,
    ) -> None:
        super().__init__()
        if render_mode is not None:
            raise RenderModeError(f"render_mode {render_mode!r} is not supported (no render modes)")
        items = traces if isinstance(traces, list | tuple) else [traces]
        if not items:
            raise ConfigError("GpuPlacementEnv needs at least one trace")
        self._trace_items = list(items)
        self._trace_cache: dict[int, PodTrace] = {}
        self.nodes = nodes if nodes is not None else load_openb_nodes()
        self.scale = float(scale)
        self.stop_arrived_pct = stop_arrived_pct
        self.shaping = float(shaping)
        if reward not in ("shaped", "metric"):
            raise ConfigError(f"reward must be 'shaped' or 'metric', got {reward!r}")
        self.reward_mode = reward
        if not (math.isfinite(self.scale) and self.scale > 0):
            raise ConfigError(f"scale must be a finite number > 0, got {scale!r}")
        if not math.isfinite(self.shaping):
            raise ConfigError(f"shaping must be a finite number, got {shaping!r}")
        self.fgd_until_pct = float(fgd_until_pct)
        self.cache_prefix = bool(cache_prefix)
        self.workload_seeds = _seed_list(workload_seeds)
        # keyed on the trace's content: two traces may share a name (a variant written as
        # openb_pod_list_default.csv beside the real one), and would share a prefix
        self._snapshots: dict[tuple[str, int, float], tuple] = {}
        self.n_candidates = int(n_candidates)
        self.penalty_features = bool(penalty_features)
        self.builder = CandidateBuilder(self.n_candidates, penalty_features=self.penalty_features)
        self.n_cand_features = self.builder.n_cand_features
        self.n_global_features = N_GLOBAL_FEATURES
        self.state = ClusterState.from_openb(self.nodes)
        self.capacity = self.state.gpu_capacity_milli
        dim = self.builder.obs_dim
        self.observation_space = spaces.Box(OBS_LOW, OBS_HIGH, shape=(dim,), dtype=np.float32)
        self.action_space = spaces.Discrete(self.n_candidates)
        self._cand: Candidates | None = None
        self._t = 0
        self._n = 0

    # ------------------------------------------------------------------ helpers
    def trace_names(self) -> list[str]:
        return [self._trace(i).name for i in range(len(self._trace_items))]

    def _trace(self, i: int) -> PodTrace:
        if i not in self._trace_cache:
            item = self._trace_items[i]
            self._trace_cache[i] = item if isinstance(item, PodTrace) else load_openb_trace(item)
        return self._trace_cache[i]

    def _pick_trace(self, options: dict[str, Any]) -> PodTrace:
        want = options.get("trace")
        if want is None:
            return self._trace(int(self.np_random.integers(len(self._trace_items))))
        if isinstance(want, PodTrace):
            return want
        for i, item in enumerate(self._trace_items):
            if item == want or self._trace(i).name == want:
                return self._trace(i)
        return load_openb_trace(want)

    def _advance(self) -> bool:
        """Process pods until one needs a decision (True) or the episode ends (False)."""
        st = self.state
        pods = self._pods
        while self._t < self._n:
            t = self._t
            if self._stop_milli is not None and self._arrived_cum[t] > self._stop_milli:
                self._truncated = True
                return False
            pod = pods[t]
            mask = self.builder.stats.feasible(st, pod)  # = st.feasible(pod), from cached stats
            n_feas = int(np.count_nonzero(mask))
            if n_feas == 0:
                self._n_failed += 1
            elif n_feas == 1 or self._arrived_cum[t] < self._fgd_until_milli:
                st.place(pod, *self.builder.fgd_choice(pod, mask))
            else:
                self._cand = self.builder.build(pod, mask, int(self._arrived_cum[t]))
                return True
            self._allocated[t] = st.allocated_gpu_milli
            self._t += 1
        return False

    # ------------------------------------------------------------------ gym API
    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        super().reset(seed=seed)
        options = options or {}
        trace = self._pick_trace(options)
        wseed = options.get("workload_seed")
        drawn = wseed is None
        if drawn:
            wseed = self._draw_workload_seed()
        self._start(trace, int(wseed))
        tried = {int(wseed)}
        pool = set(self.workload_seeds or ())
        # a drawn workload that ends before any decision is redrawn: gymnasium has no way to
        # return an episode that is already over, and a vector env steps right after reset
        while self._done and drawn:
            if len(tried) >= MAX_WORKLOAD_DRAWS or (pool and pool <= tried):
                stop = self.stop_arrived_pct
                which = (
                    f"none of the workload seeds {', '.join(map(str, sorted(pool)))} gives the agent a"
                    if pool and pool <= tried
                    else f"{len(tried)} workloads drawn in a row gave the agent no"
                )
                raise DataError(
                    f"trace {trace.name}: {which} decision (each pod failed, "
                    f"fitted one node only, or arrived during the FGD prefix of "
                    f"{self.fgd_until_pct:g} % of GPU capacity"
                    + ("" if stop is None else f" or after the stop at {stop:g} %")
                    + "); lower fgd_until_pct (--fgd-until-pct), use other workload seeds or a trace"
                    " with more placeable pods"
                )
            wseed = self._draw_workload_seed()
            if wseed not in tried:
                self._start(trace, wseed)
            tried.add(wseed)
        self._phi = self.builder.cluster_fragmentation()
        self._window_w = self._metric_window()
        self._credited = 0
        info = {"trace": trace.name, "workload_seed": self._workload_seed}
        if self._done:  # a given workload seed without any decision
            info.update(self._final_info())
            return np.zeros(self.observation_space.shape, dtype=np.float32), info
        return self._cand.obs, info

    def _draw_workload_seed(self) -> int:
        """The next workload seed from ``self.np_random`` (from ``workload_seeds`` when set)."""
        if self.workload_seeds:
            return self.workload_seeds[int(self.np_random.integers(len(self.workload_seeds)))]
        return int(self.np_random.integers(2**31 - 1))

    def _start(self, trace: PodTrace, wseed: int) -> None:
        """Build the workload of ``(trace, wseed)`` on an empty cluster and advance to its first
        decision (``self._done`` when there is none)."""
        wl = build_workload(trace, self.state.n_nodes, self.capacity, int(wseed), self.scale)
        self.state.set_priority(wl.priority)
        self.state.reset()
        self.builder.reset(self.state, trace)
        self._trace_name = trace.name
        self._workload_seed = int(wseed)
        self._pods = pods_from_trace(wl.trace)
        self._host_demand = host_demand_per_gpu_milli(wl.trace)
        self._scarcity = restricted_model_scarcity(wl.trace, self.state)
        self._n = len(self._pods)
        self._arrived_cum = np.cumsum(wl.trace.gpu_request)
        self._allocated = np.zeros(self._n, dtype=np.int64)
        stop = self.stop_arrived_pct
        self._stop_milli = None if stop is None else stop / 100.0 * self.capacity
        self._fgd_until_milli = self.fgd_until_pct / 100.0 * self.capacity
        self._t = 0
        self._n_failed = 0
        self._n_decisions = 0
        self._truncated = False
        snap_key = (_trace_digest(trace), int(wseed), self.fgd_until_pct)
        snap = self._snapshots.get(snap_key) if self.fgd_until_pct > 0 else None
        if snap is not None:
            self.state = snap[0].copy()
            self.builder.reset(self.state, trace)
            self._t, self._n_failed = snap[1], snap[2]
            self._allocated[: self._t] = snap[3]
        self._done = not self._advance()
        if snap is None and self.fgd_until_pct > 0 and self.cache_prefix:
            self._snapshots[snap_key] = (
                self.state.copy(),
                self._t,
                self._n_failed,
                self._allocated[: self._t].copy(),
            )

    def _metric_window(self) -> np.ndarray:
        """``(P,)`` float64 weight of each pod record in the 100 % metric window (1/|W| or 0)."""
        arrived = self._arrived_cum
        if self._stop_milli is not None:
            arrived = np.where(arrived <= self._stop_milli, arrived, -(10**18))
        arrived_pct = np.round(arrived / (self.capacity / 100.0))
        sel = arrived_pct == 100
        if not sel.any():
            sel = np.abs(arrived_pct - 100) <= 1
        w = np.zeros(arrived.shape, dtype=np.float64)
        if sel.any():
            w[sel] = 1.0 / float(sel.sum())
        return w

    def _metric_reward(self, done: bool) -> float:
        """Credit the records finalised since the last call (see the class docstring)."""
        lo, hi = self._credited, self._t
        self._credited = hi
        alloc_pct = np.round(self._allocated[lo:hi] / (self.capacity / 100.0), 2)
        r = float(np.dot(self._window_w[lo:hi], alloc_pct))
        if done and self._window_w.any():
            r -= 100.0
        return r

    def host_stranding_deltas(self) -> np.ndarray:
        """``(K,)`` float64: how many GPUs (1000 milli) the pending pod would leave stranded by host
        resources on each candidate's node, minus those stranded there now
        (:func:`fleetmind.envs.candidates.stranded_gpu_milli` at the episode workload's typical CPU and
        memory per milli-GPU). Padding rows are 0. Not part of the observation: teachers read it
        (``rl.teacher.StrandPenaltyScorer``).

        Raises:
            RuntimeError: no decision is pending (before reset or after the episode ended).
        """
        if getattr(self, "_done", True):
            raise RuntimeError("no pending decision: call reset() first")
        cand = self._cand
        out = np.zeros(self.n_candidates)
        out[cand.mask] = stranding_deltas(
            self.state, self._pods[self._t], cand.nodes[cand.mask], *self._host_demand
        )
        return out

    def model_scarcity_penalties(self) -> np.ndarray:
        """``(K,)`` float64: for a pending GPU pod without a ``gpu_spec``, its request in GPUs
        times the scarcity of each candidate node's GPU model
        (:func:`fleetmind.envs.candidates.restricted_model_scarcity` of the episode's workload); 0 for
        model-restricted and CPU-only pods, padding rows, and workloads without restricted pods.
        Not part of the observation: teachers read it (``rl.teacher.StrandPenaltyScorer``).

        Raises:
            RuntimeError: no decision is pending.
        """
        if getattr(self, "_done", True):
            raise RuntimeError("no pending decision: call reset() first")
        pod, cand = self._pods[self._t], self._cand
        out = np.zeros(self.n_candidates)
        if pod.num_gpu == 0 or pod.gpu_spec_mask != ANY_GPU_MODEL or not self._scarcity.any():
            return out
        real = cand.mask
        models = self.state.model_id.take(cand.nodes[real])
        out[real] = self._scarcity.take(np.maximum(models, 0)) * (models >= 0)
        return out * (pod.gpu_request / 1000.0)

    def action_masks(self) -> np.ndarray:
        """``(K,)`` bool: which actions are real candidates now."""
        if self._cand is None or self._done:
            return np.ones(self.n_candidates, dtype=bool)
        return self._cand.mask.copy()

    def real_action(self, action: int) -> int:
        """The candidate that action ``action`` (``0..K-1``) places on: itself when real, else
        the real candidate it repeats cyclically (``action % k`` for ``k`` real candidates, which
        are rows ``0..k-1``), the rule of ``MultiClusterPlacement-v0``'s padding rows."""
        mask = self._cand.mask
        if mask[action]:
            return int(action)
        real = np.flatnonzero(mask)
        return int(real[action % real.size])

    def candidate(self, action: int) -> tuple[int, np.ndarray]:
        """``(node, gpus)`` of candidate ``action`` for the current pod."""
        return int(self._cand.nodes[action]), self._cand.gpus[action]

    def step(self, action: int) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        if self._cand is None or self._done:
            raise RuntimeError("call reset() before step() (and again after the episode ended)")
        try:
            a = int(action)
        except (TypeError, ValueError):
            raise ValueError(f"action {action!r} is not an integer") from None
        if a != action or not 0 <= a < self.n_candidates:
            raise ValueError(f"action {action!r} is not one of 0..{self.n_candidates - 1}")
        a = self.real_action(a)
        st = self.state
        alloc0 = st.allocated_gpu_milli
        node, gpus = self.candidate(a)
        st.place(self._pods[self._t], node, gpus)
        self._allocated[self._t] = st.allocated_gpu_milli
        self._t += 1
        self._n_decisions += 1
        more = self._advance()
        if self.reward_mode == "metric":
            reward = self._metric_reward(done=not more)
        else:
            phi = self.builder.cluster_fragmentation()
            reward = (
                100.0 * (st.allocated_gpu_milli - alloc0) / self.capacity
                - self.shaping * 100.0 * (phi - self._phi) / self.capacity
            )
            self._phi = phi
        info: dict[str, Any] = {}
        if more:
            return self._cand.obs, float(reward), False, False, info
        self._done = True
        info.update(self._final_info())
        obs = np.zeros(self.observation_space.shape, dtype=np.float32)
        return obs, float(reward), not self._truncated, self._truncated, info

    def _final_info(self) -> dict[str, Any]:
        done = self._t
        arrived = self._arrived_cum[:done]
        alloc = self._allocated[:done]
        return {
            "trace": self._trace_name,
            "workload_seed": self._workload_seed,
            "unallocated_gpu_pct_at_100": unallocated_at(arrived, alloc, self.capacity, 100),
            "unallocated_gpu_pct_at_130": unallocated_at(arrived, alloc, self.capacity, 130),
            "n_pods": int(done),
            "n_failed": int(self._n_failed),
            "n_decisions": int(self._n_decisions),
        }
