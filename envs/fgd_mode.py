"""fgd mode: the evaluation setup of the FGD paper (Weng et al., USENIX ATC'23), reproduced.

One run = one trace x one policy x one seed (details in ``docs/placement.md`` and in the FGD
authors' simulator, ``hkust-adsl/kubernetes-scheduler-simulator``):

1. Sort the trace's pods by name and shuffle them with the seed.
2. Resize to ``scale`` (1.3) x cluster GPU capacity. Below target: draw pods uniformly with replacement
   from the original trace (indexed in :func:`canonical_pod_order`, so the draws do not depend on the
   CSV's row order) and append them; stop at the first draw whose per-GPU ``gpu_milli`` would take
   the running total past the target (the total grows by the full request ``num_gpu * gpu_milli``).
   Above target: remove uniformly random pods until the total is at most the target.
3. Node priority for tie-breaking: a seeded random permutation of the name-sorted nodes.
4. Place the pods one at a time; nothing departs; a pod with no feasible node fails (arrives, allocates
   nothing, is not retried).

Metric: after every pod record arrived GPU milli (requests of all pods so far, failed ones included) and
allocated GPU milli. arrived % = round-half-even(arrived / capacity x 100) as an integer, allocated % =
round(allocated / capacity x 100, 2); the value at level X is the mean allocated % over the records whose
arrived % equals X (window X-1..X+1 if none), rounded to 2 decimals; unallocated GPU % at X = 100 - value.

All randomness comes from ``numpy.random.default_rng(seed)`` (workload and node priority) and
``default_rng([seed, 1])`` (the policy's own choices, e.g. Random), so a run is a pure function of
(trace, policy, seed, nodes).
"""

from __future__ import annotations

import hashlib
import math
import os
import re
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from fleetmind.children import die_with_parent
from fleetmind.data.errors import DataError, NotAvailableError
from fleetmind.data.openb import OpenbNodes, PodTrace, load_openb_nodes, load_openb_trace
from fleetmind.envs.core import ClusterState, Pod, pods_from_trace
from fleetmind.envs.policies import Policy, canonical_policy_name, make_policy
from fleetmind.progress import progress_disable

DEFAULT_SCALE = 1.3
DEFAULT_LEVELS = (100, 130)


@dataclass(frozen=True)
class FgdWorkload:
    """The arrival sequence and node priority of one run.

    Attributes:
        trace: the pods in arrival order (originals shuffled, then resampled copies).
        n_original: how many of them are the trace's own pods (the rest are resampled copies).
        priority: ``(N,)`` tie-break rank of each name-sorted node (lower wins).
    """

    trace: PodTrace
    n_original: int
    priority: np.ndarray


@dataclass
class FgdResult:
    """Outcome of :func:`run_fgd`.

    Attributes:
        unallocated: level (e.g. 100, 130) -> unallocated GPU % at that arrived level.
        arrived_milli, allocated_milli: ``(P,)`` int64 records after each pod.
        placed: ``(P,)`` bool, pod got a node.
        node_of: ``(P,)`` int64, the node index each pod went to (-1: failed).
        seconds: wall time of the placement loop; ms_per_decision: mean ms per pod.
        extra: ``{"cpu_seconds": process CPU time of the loop}`` (robust to a busy machine).
    """

    trace: str
    policy: str
    seed: int
    capacity_milli: int
    unallocated: dict[int, float]
    arrived_milli: np.ndarray
    allocated_milli: np.ndarray
    placed: np.ndarray
    seconds: float
    node_of: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    workload: PodTrace | None = None
    extra: dict[str, float] = field(default_factory=dict)

    @property
    def n_pods(self) -> int:
        return len(self.placed)

    @property
    def n_failed(self) -> int:
        return int((~self.placed).sum())

    @property
    def ms_per_decision(self) -> float:
        return 1000.0 * self.seconds / max(self.n_pods, 1)

    def summary(self) -> dict[str, float | int | str]:
        """Flat JSON-able summary (``unallocated_gpu_pct_at_<X>`` for each level)."""
        out: dict[str, float | int | str] = {
            "trace": self.trace,
            "policy": self.policy,
            "seed": self.seed,
        }
        for lvl, v in self.unallocated.items():
            out[f"unallocated_gpu_pct_at_{lvl}"] = v
        out.update(
            n_pods=self.n_pods,
            n_failed=self.n_failed,
            ms_per_decision=round(self.ms_per_decision, 4),
            seconds=round(self.seconds, 3),
        )
        return out


def check_gpu_demand(trace: PodTrace) -> None:
    """Refuse a trace that requests no GPU: fgd mode measures unallocated GPU % as GPU requests
    arrive, so such a trace has no arrived level to report (and nothing to resample up to).

    Raises:
        DataError: every pod is CPU-only (``num_gpu`` or ``gpu_milli`` 0), or the trace is empty.
    """
    if len(trace) == 0 or not bool((np.asarray(trace.gpu_request) > 0).any()):
        raise DataError(
            f"trace {trace.name} ({len(trace):,} pods) requests no GPU (every pod has num_gpu 0 or"
            " gpu_milli 0): fgd mode measures unallocated GPU % as GPU requests arrive, so it needs"
            " at least one GPU pod"
        )


MAX_RESAMPLE_FACTOR = 100
"""Resampling gives up (``DataError``) after this many times the draws the trace's mean GPU
request needs to reach the target, plus :data:`MAX_RESAMPLE_SLACK` (never reached by a trace with
GPU demand in practice; a guard against an endless loop)."""
MAX_RESAMPLE_SLACK = 100_000

MAX_WORKLOAD_PODS = 2_000_000
"""Most pods one fgd-mode workload may hold after resampling (``DataError`` beyond). The openb
traces need 7,500 to 17,000 pods on the openb node list (``gpushare100``, 485 milli per pod on
average, the most); this bound is over 100 times that, room for fleets of about a million GPUs
at openb's mean request, while a trace of tiny GPU shares (``gpu_milli`` 1 needs about 8 million
draws on the openb node list) is refused at once instead of filling memory (gigabytes) for
minutes."""


_NUMBER_RUN = re.compile(r"(\d+)")
_CANONICAL_ORDERS: dict[bytes, np.ndarray] = {}
"""Cache of :func:`canonical_pod_order` by the digest of the names (a reset builds a workload)."""


def _natural_key(name: str) -> tuple[tuple[str | int, ...], str]:
    parts = _NUMBER_RUN.split(name)
    return tuple(int(p) if i % 2 else p for i, p in enumerate(parts)), name


def canonical_pod_order(names: np.ndarray) -> np.ndarray:
    """``(P,)`` int64: the pods' positions sorted by name in natural order (runs of digits compare
    as numbers: ``openb-pod-999`` before ``openb-pod-1000``; equal names keep their file order).

    The order every draw from a trace is made in, so that a workload depends on the pods and not
    on the CSV's row order; it is the row order of every openb CSV (``openb_pod_list_cpu300.csv``,
    with names past ``openb-pod-9999``, included), so their workloads are those of file order.
    """
    arr = np.asarray(names).astype(str)
    digest = hashlib.blake2b(arr.tobytes(), digest_size=16).digest() + str(arr.dtype).encode()
    got = _CANONICAL_ORDERS.get(digest)
    if got is None:
        names_list = arr.tolist()
        got = np.array(
            sorted(range(len(names_list)), key=lambda i: _natural_key(names_list[i])),
            dtype=np.int64,
        )
        got.setflags(write=False)  # shared by every caller through the cache
        if len(_CANONICAL_ORDERS) >= 64:
            _CANONICAL_ORDERS.clear()
        _CANONICAL_ORDERS[digest] = got
    return got


def _too_many_pods(trace: PodTrace, target: float, mean_req: float) -> DataError:
    """The one-line error of a workload that would pass :data:`MAX_WORKLOAD_PODS` pods."""
    return DataError(
        f"trace {trace.source or trace.name}: its mean GPU request is {mean_req:,.2f} milli per"
        f" pod, so reaching {target:,.0f} GPU milli would take about"
        f" {target / max(mean_req, 1e-9):,.0f} pods; fgd mode builds at most"
        f" {MAX_WORKLOAD_PODS:,} (use pods that ask for more GPU, or fewer nodes)"
    )


def _resample(
    trace: PodTrace, rng: np.random.Generator, total: int, target: float, pool: np.ndarray
) -> list[int]:
    """Step 2 below target: pods drawn with replacement (positions into ``pool``, the trace in
    :func:`canonical_pod_order`) until a draw would pass ``target``."""
    req = trace.gpu_request
    gm = trace.gpu_milli
    n = len(pool)
    n_original = len(trace)
    mean_req = float(np.mean(req))
    cap = MAX_RESAMPLE_SLACK + int(MAX_RESAMPLE_FACTOR * (target - total) / max(mean_req, 1e-9))
    if n_original + (target - total) / max(mean_req, 1e-9) > MAX_WORKLOAD_PODS:
        raise _too_many_pods(trace, target, mean_req)
    extra: list[int] = []
    while True:
        for j in pool[rng.integers(n, size=1024)].tolist():
            if total + gm[j] > target:
                return extra
            if n_original + len(extra) >= MAX_WORKLOAD_PODS:
                raise _too_many_pods(trace, target, mean_req)
            if len(extra) >= cap:
                raise DataError(
                    f"trace {trace.name}: resampling to {target:,.0f} GPU milli gave up after"
                    f" {len(extra):,} draws (too little GPU demand per pod)"
                )
            extra.append(j)
            total += int(req[j])


def build_workload(
    trace: PodTrace, n_nodes: int, gpu_capacity_milli: int, seed: int, scale: float = DEFAULT_SCALE
) -> FgdWorkload:
    """Arrival order and node priority of one run (steps 1-3 of the module docstring).

    Raises:
        DataError: the trace requests no GPU (:func:`check_gpu_demand`), or reaching the target
            would take more than :data:`MAX_WORKLOAD_PODS` pods.
    """
    check_gpu_demand(trace)
    rng = np.random.default_rng(seed)
    order = np.argsort(trace.pod_names, kind="stable")
    order = order[rng.permutation(len(order))]
    req = trace.gpu_request
    target = scale * gpu_capacity_milli
    total = int(req[order].sum())
    n_original = len(order)
    if total < target:
        extra = _resample(trace, rng, total, target, canonical_pod_order(trace.pod_names))
        order = np.concatenate([order, np.asarray(extra, dtype=np.int64)])
    elif total > target:
        removal = rng.permutation(len(order))
        removed_total = total - np.cumsum(req[order[removal]])
        n_remove = int(np.argmax(removed_total <= target)) + 1
        keep = np.ones(len(order), dtype=bool)
        keep[removal[:n_remove]] = False
        order = order[keep]
        n_original = len(order)
    priority = np.empty(n_nodes, dtype=np.int64)
    priority[rng.permutation(n_nodes)] = np.arange(n_nodes)
    return FgdWorkload(trace=trace.take(order), n_original=n_original, priority=priority)


def unallocated_at(
    arrived_milli: np.ndarray, allocated_milli: np.ndarray, capacity_milli: int, level: int
) -> float:
    """Unallocated GPU % at arrived level ``level`` (window-mean rule; NaN if no record is near)."""
    unit = capacity_milli / 100.0
    arrived_pct = np.round(np.asarray(arrived_milli) / unit)
    alloc_pct = np.round(np.asarray(allocated_milli) / unit, 2)
    sel = arrived_pct == level
    if not sel.any():
        sel = np.abs(arrived_pct - level) <= 1
    if not sel.any():
        return float("nan")
    return round(100.0 - round(float(alloc_pct[sel].mean()), 2), 2)


def run_fgd(
    trace: PodTrace | str,
    policy: Policy | str,
    seed: int,
    nodes: OpenbNodes | None = None,
    *,
    scale: float = DEFAULT_SCALE,
    levels: tuple[int, ...] = DEFAULT_LEVELS,
    on_fail: Callable[[int, Pod, ClusterState], None] | None = None,
) -> FgdResult:
    """One fgd-mode run: build the workload, place every pod with ``policy``, measure.

    Args:
        trace: a :class:`PodTrace` or an openb trace name / CSV path.
        policy: a :class:`Policy` or a policy name (see :data:`fleetmind.envs.policies.POLICIES`).
        seed: drives the shuffle, resampling, node priority and the policy's randomness.
        nodes: the node list (default: the openb GPU nodes).
        scale: workload size relative to GPU capacity.
        levels: arrived levels (%) at which to report unallocated GPU %.
        on_fail: called as ``on_fail(i, pod, state)`` when pod ``i`` (arrival order) finds no
            node, with the state it failed in (read-only use; see ``envs.failure_causes``).
    """
    tr = trace if isinstance(trace, PodTrace) else load_openb_trace(trace)
    pol = policy if isinstance(policy, Policy) else make_policy(policy)
    nodes = nodes if nodes is not None else load_openb_nodes()
    if nodes.total_gpus == 0:
        raise DataError(f"node list {nodes.source} has no GPUs")
    state = ClusterState.from_openb(nodes)
    wl = build_workload(tr, len(nodes), state.gpu_capacity_milli, seed, scale)
    state.set_priority(wl.priority)
    pol.reset(state, rng=np.random.default_rng([seed, 1]), trace=tr)
    pods = pods_from_trace(wl.trace)
    n = len(pods)
    arrived = np.cumsum(wl.trace.gpu_request)
    allocated = np.zeros(n, dtype=np.int64)
    placed = np.zeros(n, dtype=bool)
    node_of = np.full(n, -1, dtype=np.int64)
    feasible = state.feasible
    select = pol.select
    place = state.place
    t0 = time.perf_counter()
    c0 = time.process_time()
    for i, pod in enumerate(pods):
        node, gpus = select(state, pod, feasible(pod))
        if node >= 0:
            place(pod, node, gpus)
            placed[i] = True
            node_of[i] = node
        elif on_fail is not None:
            on_fail(i, pod, state)
        allocated[i] = state.allocated_gpu_milli
    seconds = time.perf_counter() - t0
    cpu_seconds = time.process_time() - c0
    cap = state.gpu_capacity_milli
    return FgdResult(
        trace=tr.name,
        policy=getattr(pol, "name", type(pol).__name__),
        seed=seed,
        capacity_milli=cap,
        unallocated={lvl: unallocated_at(arrived, allocated, cap, lvl) for lvl in levels},
        arrived_milli=arrived,
        allocated_milli=allocated,
        placed=placed,
        seconds=seconds,
        node_of=node_of,
        workload=wl.trace,
        extra={"cpu_seconds": cpu_seconds},
    )


def _run_job(job: tuple[PodTrace, str, int, OpenbNodes | None, tuple[int, ...]]) -> FgdResult:
    trace, policy, seed, nodes, levels = job
    res = run_fgd(trace, policy, seed, nodes, levels=levels)
    # drop the per-pod arrays before sending the result back to the parent process
    res.arrived_milli = res.arrived_milli[:0]
    res.allocated_milli = res.allocated_milli[:0]
    res.node_of = res.node_of[:0]
    res.workload = None
    return res


def aggregate_results(results: list[FgdResult], levels: tuple[int, ...] = DEFAULT_LEVELS) -> dict:
    """Mean, std (ddof=1) and per-seed values of a policy's runs, as in the CLI JSON (%).

    A level no run defines (NaN: no pod record near it, on a node list of a few nodes) has a NaN
    mean and a NaN std, one seed or several (``null`` both in the CLI JSON); with one seed and a
    defined mean the std is 0.0."""
    out: dict = {}
    for lvl in levels:
        vals = np.array([r.unallocated[lvl] for r in results], dtype=float)
        key = f"unallocated_gpu_pct_at_{lvl}"
        mean = float(vals.mean())
        out[key] = round(mean, 4)
        if len(vals) > 1:
            out[f"{key}_std"] = round(float(vals.std(ddof=1)), 4)
        else:  # no spread in one run, unless the value itself is not defined
            out[f"{key}_std"] = 0.0 if math.isfinite(mean) else math.nan
    out["per_seed"] = {
        str(r.seed): {f"unallocated_gpu_pct_at_{lvl}": r.unallocated[lvl] for lvl in levels}
        for r in results
    }
    out["n_pods_mean"] = float(np.mean([r.n_pods for r in results]))
    out["n_failed_mean"] = float(np.mean([r.n_failed for r in results]))
    out["ms_per_decision"] = round(float(np.mean([r.ms_per_decision for r in results])), 4)
    out["seconds_total"] = round(float(sum(r.seconds for r in results)), 3)
    out["cpu_seconds_total"] = round(
        float(sum(r.extra.get("cpu_seconds", 0.0) for r in results)), 3
    )
    return out


def evaluate_fgd(
    trace: PodTrace | str,
    policies: list[str] | dict[str, Policy],
    seeds: list[int],
    *,
    nodes: OpenbNodes | None = None,
    workers: int = 1,
    levels: tuple[int, ...] = DEFAULT_LEVELS,
    progress: bool = False,
) -> dict:
    """Run every policy on every seed in fgd mode and aggregate.

    Args:
        trace: a :class:`PodTrace` or an openb trace name / CSV path.
        policies: policy names (built with :func:`make_policy`; may run in ``workers`` processes) or
            ``{name: Policy}`` objects (run in this process; the object is reset for every seed).
        seeds: the seeds (42-51 in the paper); a seed given twice runs once.
        workers: processes for named policies (1 = in this process).
        progress: show a tqdm bar over runs on stderr (wherever stderr goes; ``TQDM_DISABLE``
            turns it off).

    Returns:
        ``{"trace", "mode": "fgd", "seeds", "policies": {name: aggregate_results(...)}}``.
    """
    from tqdm import tqdm

    tr = trace if isinstance(trace, PodTrace) else load_openb_trace(trace)
    check_gpu_demand(tr)  # before any run (and before worker processes start)
    nodes = nodes if nodes is not None else load_openb_nodes()
    seeds = list(dict.fromkeys(seeds))  # a seed given twice runs once (and weighs once)
    if isinstance(policies, dict):
        named: list[str] = []
        objects = dict(policies)
    else:
        named = list(dict.fromkeys(policies))  # a name given twice runs once
        objects = {}
    names = named + list(objects)
    runs: dict[str, list[FgdResult]] = {n: [] for n in names}
    bar = tqdm(
        total=len(names) * len(seeds),
        desc=f"fgd {tr.name}",
        unit="run",
        disable=progress_disable(progress),
    )
    jobs = [(tr, p, s, nodes, tuple(levels)) for p in named for s in seeds]
    if workers > 1 and len(jobs) > 1:
        import multiprocessing as mp
        from concurrent.futures import ProcessPoolExecutor

        ctx = mp.get_context("fork") if "fork" in mp.get_all_start_methods() else None
        pool = ProcessPoolExecutor(
            max_workers=workers,
            mp_context=ctx,
            initializer=die_with_parent,  # workers end with this process, however it ends
            initargs=(os.getpid(), signal.SIGKILL),
        )
        try:
            for (_, p, _, _, _), res in zip(jobs, pool.map(_run_job, jobs), strict=True):
                runs[p].append(res)
                bar.update(1)
        except BaseException:
            # Ctrl-C or a failed run: stop the workers now instead of waiting for their runs
            for proc in list((getattr(pool, "_processes", None) or {}).values()):
                proc.terminate()
            # no cancel_futures: the pool's manager thread fails the pending futures itself once
            # it sees the workers gone, and one it finds cancelled raised InvalidStateError there
            pool.shutdown(wait=False)
            raise
        pool.shutdown()
    else:
        for job in jobs:
            runs[job[1]].append(_run_job(job))
            bar.update(1)
    for name, pol in objects.items():
        for s in seeds:
            runs[name].append(run_fgd(tr, pol, s, nodes, levels=tuple(levels)))
            bar.update(1)
    bar.close()
    return {
        "trace": tr.name,
        "mode": "fgd",
        "seeds": list(seeds),
        "policies": {n: aggregate_results(runs[n], tuple(levels)) for n in names},
    }


def evaluate_policies(
    trace: PodTrace | str,
    policies: list[str | Policy],
    seeds: list[int] | tuple[int, ...] = tuple(range(42, 52)),
    *,
    nodes: OpenbNodes | None = None,
    workers: int = 1,
    levels: tuple[int, ...] = DEFAULT_LEVELS,
    progress: bool = False,
) -> dict:
    """:func:`evaluate_fgd` for a mixed list of policy names and :class:`Policy` objects, in order.

    ``envs`` may not import ``rl``, so the name ``"ppo"`` raises :class:`NotAvailableError` here;
    load the agent with ``rl.policy_adapter.load_ppo_policy(ref)`` and pass the object instead
    (``fleetmind sched evaluate --policies ppo`` does that).
    """

    tr = trace if isinstance(trace, PodTrace) else load_openb_trace(trace)
    names: list[str] = []
    objects: dict[str, Policy] = {}
    order: list[str] = []
    for p in policies:
        if isinstance(p, Policy):
            key = getattr(p, "name", type(p).__name__)
            objects[key] = p
            order.append(key)
        elif str(p).lower() == "ppo":
            raise NotAvailableError(
                "policy 'ppo' is not built in envs; load it with rl.policy_adapter.load_ppo_policy(ref) and "
                "pass the object (or use `fleetmind sched evaluate --policies ppo`)"
            )
        else:
            key = canonical_policy_name(str(p))
            names.append(key)
            order.append(key)
    res = evaluate_fgd(
        tr, names, list(seeds), nodes=nodes, workers=workers, levels=levels, progress=progress
    )
    if objects:
        extra = evaluate_fgd(
            tr, objects, list(seeds), nodes=nodes, levels=levels, progress=progress
        )
        res["policies"].update(extra["policies"])
    res["policies"] = {k: res["policies"][k] for k in order}
    return res
