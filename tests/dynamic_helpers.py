"""Tiny hand-built fleets, traces and job lists for the dynamic-mode tests."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from fleetmind.data.fleet import Cluster, Fleet
from fleetmind.data.openb import ANY_GPU_MODEL, PodTrace, trace_from_arrays
from fleetmind.data.topology import dgx1_v100, pcie_server
from fleetmind.envs.dynamic.fleet import DynFleet
from fleetmind.envs.dynamic.jobs import DynJobs


def two_cluster_fleet(wan_gbps: float = 1.25, rtt_ms: float = 30.0) -> DynFleet:
    """Cluster ``a`` (region cn-east): one DGX-1 V100 and one 1-GPU V100 PCIe server; cluster ``b``
    (us-east): one 4-GPU T4 PCIe server. WAN ``wan_gbps`` GB/s and ``rtt_ms`` between them."""
    templates = [dgx1_v100(), pcie_server(1, "V100"), pcie_server(4, "T4")]
    fleet = Fleet(
        "tiny",
        [Cluster("a", "cn-east"), Cluster("b", "us-east")],
        templates,
        ["dgx", "v100-1", "t4-4"],
        [0, 0, 1],
        [0, 1, 2],
        [64_000, 16_000, 32_000],
        [512_000, 64_000, 128_000],
        wan_latency_ms=np.array([[0.0, rtt_ms], [rtt_ms, 0.0]]),
        wan_bandwidth_gbps=np.array([[np.inf, wan_gbps], [wan_gbps, np.inf]]),
    )
    return DynFleet.from_fleet(fleet, speed_basis="fp16")


def one_gpu_fleet() -> DynFleet:
    """One cluster, one node with one V100 (speed 1.0)."""
    fleet = Fleet(
        "one",
        [Cluster("solo", "cn-east")],
        [pcie_server(1, "V100")],
        ["n0"],
        [0],
        [0],
        [8_000],
        [32_000],
    )
    return DynFleet.from_fleet(fleet, speed_basis="fp16")


def jobs_from_lists(
    arrival: list[float],
    work: list[float],
    num_gpu: list[int],
    *,
    gpu_milli: list[int] | None = None,
    cpu: list[int] | None = None,
    comm: list[float] | None = None,
    data_home: list[int] | None = None,
    data_gb: list[float] | None = None,
    ideal: list[float] | None = None,
) -> DynJobs:
    """A :class:`DynJobs` given field by field (ideal defaults to the work)."""
    n = len(arrival)
    ng = np.asarray(num_gpu, dtype=np.int64)
    return DynJobs(
        names=np.array([f"job-{i}" for i in range(n)]),
        arrival_s=np.asarray(arrival, dtype=float),
        work_s=np.asarray(work, dtype=float),
        cpu_milli=np.asarray(cpu or [1000] * n, dtype=np.int64),
        memory_mib=np.full(n, 1024, dtype=np.int64),
        num_gpu=ng,
        gpu_milli=np.asarray(gpu_milli or [1000 if g else 0 for g in num_gpu], dtype=np.int64),
        gpu_spec_mask=np.full(n, ANY_GPU_MODEL, dtype=np.int64),
        comm=np.asarray(comm or [0.0] * n, dtype=float),
        data_home=np.asarray(data_home or [0] * n, dtype=np.int64),
        data_gb=np.asarray(data_gb or [0.0] * n, dtype=float),
        ideal_s=np.asarray(ideal or work, dtype=float),
    )


def small_trace(n: int = 120, seed: int = 0) -> PodTrace:
    """A random trace with times: sharing, 1-, 2- and 4-GPU and CPU-only pods."""
    rng = np.random.default_rng(seed)
    kind = rng.choice(5, size=n, p=[0.35, 0.35, 0.1, 0.1, 0.1])
    num_gpu = np.array([1, 1, 2, 4, 0])[kind]
    gpu_milli = np.where(kind == 0, rng.choice([250, 500], size=n), 1000)
    cpu = rng.choice([1000, 2000, 4000], size=n)
    mem = rng.choice([1024, 4096], size=n)
    created = np.sort(rng.uniform(0, 10_000, n)).round()
    sched = created + rng.integers(0, 5, n)
    deleted = sched + rng.integers(60, 3_000, n)
    tr = trace_from_arrays(
        cpu, mem, num_gpu, gpu_milli, name="tiny", creation_time=created, deletion_time=deleted
    )
    return replace(tr, scheduled_time=sched.astype(float))


def small_env_kwargs(**overrides: object) -> dict[str, object]:
    """Keyword arguments of a small ``MultiClusterPlacementEnv`` on :func:`small_trace` and
    :func:`two_cluster_fleet` (every node, 60 jobs, target utilisation 0.9, ``K = 4``)."""
    kw: dict[str, object] = dict(
        trace=small_trace(120),
        fleet=two_cluster_fleet(),
        node_fraction=1.0,
        n_jobs=60,
        target_util=0.9,
        n_candidates=4,
    )
    kw.update(overrides)
    return kw


class RecordingBar:
    """A stand-in for ``tqdm`` that records its total and what was counted (the calls the training
    recipes make); every bar made is appended to :attr:`made`."""

    made: list[RecordingBar] = []

    def __init__(self, total: int | None = None, **_: object) -> None:
        self.total, self.n = total, 0
        RecordingBar.made.append(self)

    def update(self, n: int = 1) -> None:
        self.n += n

    def set_postfix(self, **_: object) -> None:
        """Postfix text is not recorded."""

    def close(self) -> None:
        """Nothing to release."""
