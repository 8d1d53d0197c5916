"""Where the unallocated GPUs of an fgd-mode run go: why each failed pod found no node.

In fgd mode nothing departs, so the unallocated GPU % at 100 % arrived is (up to the metric's
window rounding) the GPU request of the pods that failed before the arrived GPU request reached the
cluster's capacity. This module sorts that lost request by what stopped each pod, read from the
cluster state at the moment it failed:

* ``host``: some node of an allowed GPU model had GPU room for the pod (a GPU with enough idle
  milli for a sharing or 1-GPU pod, enough fully idle GPUs for a multi-GPU pod), but none of those
  nodes also had the CPU and memory it asks for. The GPUs were there; the host resources beside
  them were used up.
* ``gpu_fragmented``: no allowed node had GPU room for the pod, although the idle GPU milli summed
  over the allowed nodes covered its request. The room was there, split over GPUs and nodes.
* ``gpu_full``: the allowed nodes together had less idle GPU milli than the pod asks for.

and by pod kind: ``sharing`` (one GPU, under 1000 milli), ``one_gpu``, ``multi_gpu``, each with a
``+spec`` suffix when the pod restricts the GPU model. CPU-only pods ask for no GPU, so they add
nothing to the metric; their failures are only counted.

:func:`relax_host` drops every pod's CPU and memory request, so a run of the relaxed trace shows what
the same policy leaves unallocated when only the GPUs constrain placement (the ``host`` share, and
the way host limits steer earlier placements, both disappear).

This is a diagnosis, not a bound: a cause is read from one state; another policy's earlier choices
would have led elsewhere.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import numpy as np

from fleetmind.data.openb import OpenbNodes, PodTrace
from fleetmind.envs.core import ANY_GPU_MODEL, GPU_MILLI, ClusterState, Pod
from fleetmind.envs.fgd_mode import FgdResult, run_fgd
from fleetmind.envs.policies import Policy

FAILURE_CAUSES = ("host", "gpu_fragmented", "gpu_full")
POD_KINDS = ("sharing", "one_gpu", "multi_gpu")


def failure_cause(state: ClusterState, pod: Pod) -> str:
    """Why ``pod`` (a GPU pod with no feasible node in ``state``) could not be placed.

    Returns:
        One of :data:`FAILURE_CAUSES` (see the module docstring).

    Raises:
        ValueError: the pod asks for no GPU, or some node can host it.
    """
    if pod.num_gpu == 0:
        raise ValueError("a CPU-only pod has no GPU failure cause")
    if pod.gpu_spec_mask != ANY_GPU_MODEL:
        allowed = (state.model_bit & pod.gpu_spec_mask) != 0
    else:
        allowed = state.num_gpu > 0
    if pod.num_gpu == 1:
        gpu_room = (state.gpu_idle >= max(pod.gpu_milli, 1)).any(axis=1)
    else:
        gpu_room = (state.gpu_idle == GPU_MILLI).sum(axis=1) >= pod.num_gpu
    host_room = (state.cpu_free >= pod.cpu_milli) & (state.mem_free >= pod.memory_mib)
    if (allowed & gpu_room & host_room).any():
        raise ValueError("the pod fits on some node: it did not fail")
    if (allowed & gpu_room).any():
        return "host"
    if int(state.gpu_idle[allowed].sum()) >= pod.gpu_request:
        return "gpu_fragmented"
    return "gpu_full"


def pod_kind(pod: Pod) -> str:
    """``sharing``, ``one_gpu`` or ``multi_gpu`` (``+spec`` when the GPU model is restricted);
    ``cpu_only`` for a pod without GPUs."""
    if pod.num_gpu == 0:
        return "cpu_only"
    kind = "sharing" if pod.is_sharing else ("one_gpu" if pod.num_gpu == 1 else "multi_gpu")
    return kind + "+spec" if pod.gpu_spec_mask != ANY_GPU_MODEL else kind


@dataclass
class FailureBreakdown:
    """The failed GPU request of one run up to an arrived level, sorted by cause and pod kind.

    Attributes:
        unallocated: the run's unallocated GPU % at ``level`` (the fgd-mode metric).
        failed_pct: GPU request of the GPU pods that failed while the arrived request was at or
            under ``level`` % of capacity, in % of capacity. It equals ``unallocated`` up to the
            metric's window rounding (a few hundredths of a point).
        by_cause, by_kind: ``failed_pct`` split by :data:`FAILURE_CAUSES` and by :func:`pod_kind`,
            in % of capacity (keys with nothing are left out of ``by_kind``).
        n_failed_gpu, n_failed_cpu_only: failed pods in that window.
    """

    trace: str
    policy: str
    seed: int
    level: int
    unallocated: float
    failed_pct: float
    by_cause: dict[str, float] = field(default_factory=dict)
    by_kind: dict[str, float] = field(default_factory=dict)
    n_failed_gpu: int = 0
    n_failed_cpu_only: int = 0

    def to_json(self) -> dict:
        return dataclasses.asdict(self)


def relax_host(trace: PodTrace) -> PodTrace:
    """The same trace with every pod's CPU and memory request set to 0 (GPU requests unchanged)."""
    return dataclasses.replace(
        trace,
        name=f"{trace.name}+nohost",
        cpu_milli=np.zeros_like(trace.cpu_milli),
        memory_mib=np.zeros_like(trace.memory_mib),
    )


def run_with_causes(
    trace: PodTrace,
    policy: Policy | str,
    seed: int,
    nodes: OpenbNodes | None = None,
    *,
    level: int = 100,
) -> tuple[FgdResult, FailureBreakdown]:
    """Run fgd mode like :func:`fleetmind.envs.fgd_mode.run_fgd` and sort its failures by cause.

    Args:
        trace: the pod trace (e.g. ``load_openb_trace("default")`` or :func:`relax_host` of it).
        policy: a policy object or name, as for ``run_fgd``.
        seed: the run's seed (workload, node priority, the policy's randomness).
        nodes: the node list (default: the openb GPU nodes).
        level: the arrived level (%) the failures are counted up to.

    Returns:
        The ``run_fgd`` result (identical to a run without the diagnosis) and the breakdown.
    """
    seen: list[tuple[int, str, str, int]] = []

    def on_fail(i: int, pod: Pod, state: ClusterState) -> None:
        if pod.num_gpu == 0:
            seen.append((i, "", "cpu_only", 0))
        else:
            seen.append((i, failure_cause(state, pod), pod_kind(pod), pod.gpu_request))

    res = run_fgd(trace, policy, seed, nodes, levels=(level,), on_fail=on_fail)
    limit = res.capacity_milli * level / 100.0
    by_cause = dict.fromkeys(FAILURE_CAUSES, 0)
    by_kind: dict[str, int] = {}
    n_gpu = n_cpu = 0
    for i, cause, kind, req in seen:
        if res.arrived_milli[i] > limit:
            continue
        if kind == "cpu_only":
            n_cpu += 1
            continue
        n_gpu += 1
        by_cause[cause] += req
        by_kind[kind] = by_kind.get(kind, 0) + req

    def pct(milli: int) -> float:
        return round(100.0 * milli / res.capacity_milli, 4)

    breakdown = FailureBreakdown(
        trace=res.trace,
        policy=res.policy,
        seed=seed,
        level=level,
        unallocated=res.unallocated[level],
        failed_pct=pct(sum(by_cause.values())),
        by_cause={k: pct(v) for k, v in by_cause.items()},
        by_kind={k: pct(v) for k, v in sorted(by_kind.items())},
        n_failed_gpu=n_gpu,
        n_failed_cpu_only=n_cpu,
    )
    return res, breakdown


def summarise_breakdowns(breakdowns: list[FailureBreakdown]) -> dict:
    """Means over runs (e.g. one policy's seeds) of the metric, the failed request and its split,
    all in % of GPU capacity; ``seeds`` lists the runs' seeds."""
    if not breakdowns:
        raise ValueError("no failure breakdowns to summarise")
    kinds = sorted({k for b in breakdowns for k in b.by_kind})

    def mean(values: list[float]) -> float:
        return round(float(np.mean(values)), 3)

    return {
        "unallocated_gpu_pct_at_100": mean([b.unallocated for b in breakdowns]),
        "failed_pct": mean([b.failed_pct for b in breakdowns]),
        "by_cause": {c: mean([b.by_cause.get(c, 0.0) for b in breakdowns]) for c in FAILURE_CAUSES},
        "by_kind": {k: mean([b.by_kind.get(k, 0.0) for b in breakdowns]) for k in kinds},
        "n_failed_gpu": round(float(np.mean([b.n_failed_gpu for b in breakdowns])), 1),
        "seeds": [b.seed for b in breakdowns],
    }
