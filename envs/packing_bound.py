"""A lower bound on the GPU request any placement policy must leave unplaced (fgd mode).

Relax the placement problem until it is a one-dimensional packing problem:

* every GPU of the cluster is a bin of 1000 milli-GPU, whichever node it is on;
* a pod of k whole GPUs becomes k items of 1000 (they need not share a node), and a GPU-sharing
  pod one item of its ``gpu_milli``;
* with ``gpu_models`` (the default of :func:`fgd_run_bound`) a pod stays on the GPU models its
  ``gpu_spec`` allows; node boundaries, CPU, memory and the arrival order are ignored: the packer
  sees every pod in advance and may leave any of them out.

Every placement a real policy reaches is a packing of this relaxed problem, so the most GPU request
the relaxed problem can pack is an upper bound on what any policy (FGD, PPO, an oracle) has
allocated, and ``request - that`` a lower bound on the GPU request that failed.

The relaxed optimum is bounded from above by the configuration linear program (Gilmore & Gomory,
1961): a configuration is a multiset of item sizes that fits one bin, ``x_c >= 0`` says how many
bins use configuration c, at most ``n_gpus`` bins are used and at most ``n_t`` items of size t::

    max  sum_c value_c x_c   s.t.  sum_c x_c <= n_gpus,  sum_c a_tc x_c <= n_t,  x >= 0

(with GPU models, one bin-count row per model, and a configuration of model g holds only item
types allowed on g).

It is solved by column generation: the restricted program runs on SciPy's HiGHS, and a bounded
knapsack over one bin (dynamic programming in steps of the sizes' greatest common divisor) prices the
next configuration. The bound reported is the value of a feasible dual solution (the restricted
program's duals, with the bin price raised by the best remaining reduced cost), so it stays valid
even if the generation were stopped early.

Units: milli-GPU throughout; the public results are also given in % of the cluster's capacity.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy.optimize import linprog

from fleetmind.data.openb import OpenbNodes, PodTrace, load_openb_nodes
from fleetmind.envs.core import ANY_GPU_MODEL, GPU_MILLI
from fleetmind.envs.fgd_mode import DEFAULT_SCALE, build_workload


@dataclass(frozen=True)
class PackingBound:
    """Outcome of :func:`gpu_packing_bound`.

    Attributes:
        request_milli: total GPU request of the pods given.
        max_packable_milli: upper bound on the request any placement can allocate.
        min_failed_milli: ``request_milli - max_packable_milli`` (>= 0): lower bound on the GPU
            request left unplaced.
        capacity_milli: ``n_gpus * 1000``.
        columns, iterations: size of the final restricted program and generation rounds.
    """

    request_milli: int
    max_packable_milli: float
    min_failed_milli: float
    capacity_milli: int
    columns: int
    iterations: int

    @property
    def min_failed_pct(self) -> float:
        """The lower bound in % of the cluster's GPU capacity."""
        return 100.0 * self.min_failed_milli / self.capacity_milli


def _best_configuration(
    sizes: np.ndarray, counts: np.ndarray, profit: np.ndarray, unit: int
) -> tuple[float, np.ndarray]:
    """Bounded knapsack over one bin: the multiset (at most ``counts[t]`` of size ``sizes[t]``,
    total <= 1000) with the largest summed ``profit``. Items with profit <= 0 are never taken.

    Returns:
        (best profit, ``(T,)`` int64 multiplicities).
    """
    cap = GPU_MILLI // unit
    w = (sizes // unit).astype(np.int64)
    best = np.zeros(cap + 1)
    # choice[t, c]: how many of type t the best packing of capacity c over types 0..t takes
    choice = np.zeros((len(sizes), cap + 1), dtype=np.int64)
    for t in range(len(sizes)):
        if profit[t] <= 0:
            continue
        new = best.copy()
        for k in range(1, int(min(counts[t], cap // w[t])) + 1):
            shifted = np.full(cap + 1, -np.inf)
            shifted[k * w[t] :] = best[: cap + 1 - k * w[t]] + k * profit[t]
            better = shifted > new
            new = np.where(better, shifted, new)
            choice[t] = np.where(better, k, choice[t])
        best = new
    # walk back from the full capacity
    a = np.zeros(len(sizes), dtype=np.int64)
    c = cap
    for t in range(len(sizes) - 1, -1, -1):
        k = int(choice[t, c])
        a[t] = k
        c -= k * int(w[t])
    return float(a @ profit), a


def gpu_packing_bound(
    num_gpu: np.ndarray,
    gpu_milli: np.ndarray,
    n_gpus: int,
    *,
    gpu_spec_mask: np.ndarray | None = None,
    model_gpus: dict[int, int] | None = None,
    max_iterations: int = 500,
) -> PackingBound:
    """Lower bound on the unplaceable GPU request of a set of pods (see the module docstring).

    Args:
        num_gpu: ``(P,)`` GPUs per pod (0: CPU-only, ignored).
        gpu_milli: ``(P,)`` per-GPU share in milli-GPU (1000 for whole GPUs).
        n_gpus: GPUs in the cluster (> 0).
        gpu_spec_mask: ``(P,)`` allowed-model bitmask per pod (``ANY_GPU_MODEL``: any model). With
            ``model_gpus`` it keeps every pod on GPUs of its allowed models, which tightens the
            bound on traces whose pods restrict the model. ``None``: every pod may use any GPU.
        model_gpus: GPUs per model id (they must add up to ``n_gpus``). ``None``: one pool.
        max_iterations: column-generation rounds before giving up on optimality (the bound stays
            valid, only looser).

    Raises:
        ValueError: mismatched arrays, no GPUs, a share outside 1..1000 milli, or GPU counts per
            model that do not add up. (A pod whose allowed models have no GPU is never packed: it
            counts as failed.)
    """
    num_gpu = np.asarray(num_gpu, dtype=np.int64)
    gpu_milli = np.asarray(gpu_milli, dtype=np.int64)
    if num_gpu.shape != gpu_milli.shape:
        raise ValueError("num_gpu and gpu_milli must have the same shape")
    if n_gpus <= 0:
        raise ValueError(f"n_gpus must be positive, got {n_gpus}")
    pools, spec = _pools_and_spec(num_gpu, n_gpus, gpu_spec_mask, model_gpus)
    gpu = num_gpu > 0
    milli, k, spec = gpu_milli[gpu], num_gpu[gpu], spec[gpu]
    if ((milli < 1) | (milli > GPU_MILLI)).any():
        raise ValueError("every GPU pod's gpu_milli must be in 1..1000")
    sizes, masks, counts = _item_types(milli, k, spec)
    request = int(sizes @ counts)
    capacity = n_gpus * GPU_MILLI
    if request == 0:
        return PackingBound(0, 0.0, 0.0, capacity, 0, 0)
    pool_ids = sorted(pools)
    pool_gpus = np.array([pools[m] for m in pool_ids], dtype=float)
    allowed = np.array(
        [
            [mask == ANY_GPU_MODEL or (m >= 0 and (mask >> m) & 1 == 1) for m in pool_ids]
            for mask in masks.tolist()
        ],
        dtype=bool,
    )  # (T, pools)
    bound, n_cols, it = _column_generation(
        sizes, counts, allowed, pool_gpus, float(request), max_iterations
    )
    packable = min(bound, float(request), float(capacity))
    return PackingBound(
        request_milli=request,
        max_packable_milli=packable,
        min_failed_milli=max(request - packable, 0.0),
        capacity_milli=capacity,
        columns=n_cols,
        iterations=it,
    )


def _pools_and_spec(
    num_gpu: np.ndarray,
    n_gpus: int,
    gpu_spec_mask: np.ndarray | None,
    model_gpus: dict[int, int] | None,
) -> tuple[dict[int, int], np.ndarray]:
    """``(GPUs per pool, (P,) allowed-model mask per pod)``, checked (see
    :func:`gpu_packing_bound`); without ``model_gpus`` one pool (id -1) that every pod may use."""
    if model_gpus is None:
        return {-1: int(n_gpus)}, np.full(num_gpu.shape, ANY_GPU_MODEL, dtype=np.int64)
    pools = {int(m): int(g) for m, g in model_gpus.items() if g > 0}
    if sum(pools.values()) != n_gpus or any(m < 0 for m in pools):
        raise ValueError(f"model_gpus {model_gpus} do not add up to n_gpus={n_gpus}")
    spec = (
        np.full(num_gpu.shape, ANY_GPU_MODEL, dtype=np.int64)
        if gpu_spec_mask is None
        else np.asarray(gpu_spec_mask, dtype=np.int64)
    )
    if spec.shape != num_gpu.shape:
        raise ValueError("gpu_spec_mask must have one entry per pod")
    return pools, spec


def _item_types(
    milli: np.ndarray, k: np.ndarray, spec: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(sizes, masks, counts)``, ``(T,)`` each: the item types ``(size, allowed mask)`` of the
    GPU pods, sorted, and how many items of each; a k-GPU pod is k items of 1000."""
    items: dict[tuple[int, int], int] = {}
    for m_, k_, s_ in zip(milli.tolist(), k.tolist(), spec.tolist(), strict=True):
        key = (m_, s_)
        items[key] = items.get(key, 0) + (k_ if m_ == GPU_MILLI else 1)
    keys = sorted(items)
    sizes = np.array([key[0] for key in keys], dtype=np.int64)
    masks = np.array([key[1] for key in keys], dtype=np.int64)
    counts = np.array([items[key] for key in keys], dtype=np.int64)
    return sizes, masks, counts


def _column_generation(
    sizes: np.ndarray,
    counts: np.ndarray,
    allowed: np.ndarray,
    pool_gpus: np.ndarray,
    request: float,
    max_iterations: int,
) -> tuple[float, int, int]:
    """``(upper bound on the packable milli-GPU, columns, iterations)`` of the packing LP over
    bin configurations, by column generation (see the module docstring).

    Args:
        sizes, counts: ``(T,)`` item sizes (milli-GPU) and counts.
        allowed: ``(T, pools)`` whether a pool's GPUs may take a type.
        pool_gpus: ``(pools,)`` GPUs per pool.
        request: the total request (milli-GPU), the bound before any round.
        max_iterations: rounds before giving up on optimality (the bound stays valid).
    """
    # a type no pool allows gets no column: it is never packed, so it counts as failed
    unit = math.gcd(GPU_MILLI, *sizes.tolist())
    n_types, n_pools = allowed.shape
    # columns: (pool index, multiplicities); start with one single-size column per allowed pair
    cols: list[tuple[int, np.ndarray]] = [
        (j, np.eye(n_types, dtype=np.int64)[t] * min(counts[t], GPU_MILLI // sizes[t]))
        for t in range(n_types)
        for j in range(n_pools)
        if allowed[t, j]
    ]
    b_ub = np.concatenate([pool_gpus, counts]).astype(float)
    bound = request
    it = 0
    while it < max_iterations:
        it += 1
        a = np.array([c for _, c in cols], dtype=float).T  # (T, C)
        p = np.zeros((n_pools, len(cols)))
        p[[j for j, _ in cols], np.arange(len(cols))] = 1.0
        res = linprog(
            -(sizes @ a), A_ub=np.vstack([p, a]), b_ub=b_ub, bounds=(0, None), method="highs"
        )
        if res.status != 0:
            raise RuntimeError(f"packing LP failed: {res.message}")
        duals = -np.asarray(res.ineqlin.marginals)  # >= 0 for the <= rows of a maximisation
        z, y = np.maximum(duals[:n_pools], 0.0), np.maximum(duals[n_pools:], 0.0)
        new: list[tuple[int, np.ndarray]] = []
        raised = z.copy()
        for j in range(n_pools):
            profit = np.where(allowed[:, j], sizes - y, 0.0)
            best, config = _best_configuration(sizes, counts, profit, unit)
            reduced = best - z[j]
            # raising the pool's price by its best reduced cost makes the dual feasible
            raised[j] = z[j] + max(reduced, 0.0)
            if reduced > 1e-7 * GPU_MILLI and not any(
                jj == j and np.array_equal(config, c) for jj, c in cols
            ):
                new.append((j, config))
        bound = min(bound, float(pool_gpus @ raised + counts @ y))
        if not new:
            break
        cols.extend(new)
    return bound, len(cols), it


def fgd_run_bound(
    trace: PodTrace,
    seed: int,
    nodes: OpenbNodes | None = None,
    *,
    level: int = 100,
    gpu_models: bool = True,
) -> PackingBound:
    """:func:`gpu_packing_bound` of the pods an fgd-mode run (``run_fgd(trace, ..., seed)``, any
    policy) has seen by the time its arrived GPU request reaches ``level`` % of capacity, i.e. the
    pods :func:`fleetmind.envs.failure_causes.run_with_causes` counts failures among.

    Args:
        gpu_models: keep each pod on the GPU models its ``gpu_spec`` allows (a tighter bound, still
            valid for every policy); ``False`` lets every pod use any GPU.
    """
    nodes = nodes if nodes is not None else load_openb_nodes()
    capacity = int(nodes.total_gpus) * GPU_MILLI
    wl = build_workload(trace, len(nodes), capacity, seed, DEFAULT_SCALE)
    arrived = np.cumsum(wl.trace.gpu_request)
    n = int(np.searchsorted(arrived, capacity * level / 100.0, side="right"))
    pods = wl.trace
    if not gpu_models:
        return gpu_packing_bound(pods.num_gpu[:n], pods.gpu_milli[:n], int(nodes.total_gpus))
    per_model: dict[int, int] = {}
    for m, g in zip(nodes.model_id.tolist(), nodes.num_gpu.tolist(), strict=True):
        if g > 0:
            per_model[m] = per_model.get(m, 0) + g
    return gpu_packing_bound(
        pods.num_gpu[:n],
        pods.gpu_milli[:n],
        int(nodes.total_gpus),
        gpu_spec_mask=pods.gpu_spec_mask[:n],
        model_gpus=per_model,
    )
