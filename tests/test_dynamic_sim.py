"""Dynamic mode: runtime model, queue/metrics on hand-built fleets, departures, determinism."""

from __future__ import annotations

import math

import numpy as np
import pytest
from dynamic_helpers import jobs_from_lists, one_gpu_fleet, small_trace, two_cluster_fleet
from hypothesis import given, settings
from hypothesis import strategies as st

from fleetmind.data.errors import ConfigError
from fleetmind.envs.core import PlacementError
from fleetmind.envs.dynamic.evaluate import evaluate_dynamic
from fleetmind.envs.dynamic.jobs import build_jobs, offered_load
from fleetmind.envs.dynamic.model import REFERENCE_LINK_GBPS, gpu_speed, runtime_factor
from fleetmind.envs.dynamic.policies import LocalityAwarePolicy
from fleetmind.envs.dynamic.sim import DynamicSim


class FirstFit:
    """Lowest-index feasible node, the simulator's default GPU choice."""

    name = "FirstFit"

    def select(self, sim: DynamicSim, j: int):
        return int(np.flatnonzero(sim.feasible(j))[0]), None


def test_fifo_metrics_on_one_gpu_by_hand() -> None:
    # A: t=0, 100 s; B: t=10, 50 s; C: t=20, 10 s; one GPU: B waits for A, C for B.
    jobs = jobs_from_lists([0.0, 10.0, 20.0], [100.0, 50.0, 10.0], [1, 1, 1])
    sim = DynamicSim(one_gpu_fleet(), jobs, backfill_depth=0)
    m = sim.run(FirstFit())
    np.testing.assert_allclose(sim.start_s, [0.0, 100.0, 150.0])
    np.testing.assert_allclose(sim.end_s, [100.0, 150.0, 160.0])
    jct = np.array([100.0, 140.0, 140.0])
    assert m["mean_jct_s"] == pytest.approx(jct.mean())
    assert m["mean_slowdown"] == pytest.approx(np.mean(jct / [100.0, 50.0, 10.0]))  # (1+2.8+14)/3
    qd = np.array([0.0, 90.0, 130.0])
    assert m["p99_queue_delay_s"] == pytest.approx(np.percentile(qd, 99))
    assert m["p99_queue_delay_s"] == pytest.approx(90.0 + 0.98 * 40.0)
    # the GPU is busy during the whole arrival window [0, 20]
    assert m["gpu_allocation_ratio"] == pytest.approx(1.0)
    assert m["n_started"] == 3 and m["n_rejected"] == 0


def test_departure_frees_resources_and_next_job_starts_then() -> None:
    jobs = jobs_from_lists([0.0, 1.0], [30.0, 5.0], [1, 1])
    sim = DynamicSim(one_gpu_fleet(), jobs)
    j = sim.next_decision()
    sim.place(j, 0)
    assert sim.state.allocated_gpu_milli == 1000
    assert sim.next_decision() == 1  # starts only once job 0 departs
    assert sim.now == pytest.approx(30.0)
    assert sim.state.allocated_gpu_milli == 0
    sim.place(1, 0)
    assert sim.next_decision() is None
    assert sim.state.allocated_gpu_milli == 0
    np.testing.assert_array_equal(sim.state.cpu_free, sim.state.cpu_cap)
    np.testing.assert_array_equal(sim.state.gpu_idle[0, :1], [1000])


def test_backfill_lets_a_small_job_pass_a_blocked_head() -> None:
    fleet = two_cluster_fleet()
    # job 0 takes 7 of the DGX's 8 GPUs, job 1 (8 GPUs) cannot start, job 2 (1 GPU) can
    jobs = jobs_from_lists([0.0, 1.0, 2.0], [100.0, 10.0, 10.0], [7, 8, 1])
    strict = DynamicSim(fleet, jobs, backfill_depth=0)
    strict.run(FirstFit())
    back = DynamicSim(fleet, jobs, backfill_depth=4)
    back.run(FirstFit())
    assert strict.start_s[2] >= strict.start_s[1]  # FIFO: waits behind the 8-GPU job
    assert back.start_s[2] == pytest.approx(2.0)  # backfilled at arrival
    assert back.start_s[1] == pytest.approx(100.0)


def test_nvlink_set_is_faster_than_sys_set_for_comm_heavy_job() -> None:
    fleet = two_cluster_fleet()
    jobs = jobs_from_lists([0.0], [1000.0], [2], comm=[0.6])
    sim = DynamicSim(fleet, jobs)
    assert sim.next_decision() == 0
    run_nv, _ = sim.runtime(0, 0, [0, 3])  # NV2 pair of the DGX-1 hybrid cube-mesh
    run_sys, _ = sim.runtime(0, 0, [0, 5])  # no NVLink, across the sockets
    bw_nv, bw_sys = fleet.link_gbps[0, 0, 3], fleet.link_gbps[0, 0, 5]
    assert bw_nv > bw_sys
    assert run_nv == pytest.approx(1000.0 * (0.4 + 0.6 * REFERENCE_LINK_GBPS / bw_nv))
    assert run_sys == pytest.approx(1000.0 * (0.4 + 0.6 * REFERENCE_LINK_GBPS / bw_sys))
    assert run_nv < run_sys
    # the simulator's own GPU choice for the job is an NVLink pair
    g = sim.best_gpus(0, 0)
    assert fleet.link_gbps[0, g[0], g[1]] == pytest.approx(
        fleet.link_gbps[0].max(where=np.isfinite(fleet.link_gbps[0]), initial=0)
    )
    # a job without communication does not care
    assert float(runtime_factor(1.0, bw_sys, 2, 0.0)) == pytest.approx(1.0)


def test_gpu_model_speed_scales_runtime() -> None:
    fleet = two_cluster_fleet()
    jobs = jobs_from_lists([0.0], [520.0], [1])
    sim = DynamicSim(fleet, jobs)
    sim.next_decision()
    run_t4, _ = sim.runtime(0, 2, [0])
    assert gpu_speed("T4", "fp16") == pytest.approx(65.0 / 125.0)
    assert run_t4 == pytest.approx(520.0 / (65.0 / 125.0))
    assert sim.runtime(0, 1, [0])[0] == pytest.approx(520.0)


def test_remote_data_adds_wan_transfer_time() -> None:
    fleet = two_cluster_fleet(wan_gbps=2.0, rtt_ms=40.0)
    jobs = jobs_from_lists([0.0], [100.0], [1], data_home=[0], data_gb=[138.0])
    sim = DynamicSim(fleet, jobs)
    sim.next_decision()
    _, local = sim.runtime(0, 1, [0])
    _, remote = sim.runtime(0, 2, [0])
    assert local == 0.0
    assert remote == pytest.approx(0.040 + 138.0 / 2.0)
    sim.place(0, 2, [0])
    assert sim.end_s[0] == pytest.approx(remote + 100.0 / gpu_speed("T4", "fp16"))


def test_invalid_placement_is_rejected() -> None:
    fleet = two_cluster_fleet()
    jobs = jobs_from_lists([0.0, 0.0], [10.0, 10.0], [8, 1])
    sim = DynamicSim(fleet, jobs)
    j = sim.next_decision()
    with pytest.raises(PlacementError):
        sim.place(j, 1)  # the 1-GPU node cannot host 8 GPUs
    with pytest.raises(PlacementError):
        sim.place(j, 0, [0, 1])  # wrong number of GPUs
    sim.place(j, 0)
    with pytest.raises(ValueError, match="not queued"):
        sim.place(j, 0)  # already running
    assert sim.state.allocated_gpu_milli == 8000


def test_build_jobs_load_scaling_and_determinism() -> None:
    fleet = two_cluster_fleet()
    tr = small_trace(200)
    a = build_jobs(tr, fleet, np.random.default_rng(7), target_util=0.7)
    b = build_jobs(tr, fleet, np.random.default_rng(7), target_util=0.7)
    for key in ("arrival_s", "work_s", "comm", "data_home", "data_gb", "ideal_s"):
        np.testing.assert_array_equal(getattr(a, key), getattr(b, key))
    c = build_jobs(tr, fleet, np.random.default_rng(8), target_util=0.7)
    assert not np.array_equal(a.data_home, c.data_home)
    assert a.offered_load == pytest.approx(0.7, rel=1e-3)
    assert offered_load(a.arrival_s, a.work_s, a.gpus, fleet.gpu_capacity) == pytest.approx(
        0.7, rel=1e-3
    )
    assert np.all(np.diff(a.arrival_s) >= 0)
    assert np.all(a.ideal_s <= a.work_s + 1e-9)  # nothing here is faster than the reference V100
    assert np.all((a.comm == 0) | (a.num_gpu >= 2))
    with pytest.raises(ConfigError):
        build_jobs(tr, fleet, np.random.default_rng(0), target_util=0.0)


def test_trace_without_times_gets_poisson_arrivals() -> None:
    from fleetmind.data.openb import trace_from_arrays

    tr = trace_from_arrays([1000] * 50, [1024] * 50, [1] * 50, [1000] * 50)
    jobs = build_jobs(tr, two_cluster_fleet(), np.random.default_rng(0), target_util=0.5)
    assert jobs.synthetic_arrivals
    assert jobs.n_duration_fallback == 50
    assert np.all(np.isfinite(jobs.arrival_s)) and np.all(jobs.work_s >= 1.0)


def test_evaluate_dynamic_deterministic_and_complete() -> None:
    fleet = two_cluster_fleet()
    tr = small_trace(150)
    kw = dict(fleet=fleet, target_util=0.8, seeds=[1, 2])
    r1 = evaluate_dynamic(
        tr, ["BestFit", "FGD", "Random", "TopologyBestEffort", "LocalityAware"], **kw
    )
    r2 = evaluate_dynamic(
        tr, ["BestFit", "FGD", "Random", "TopologyBestEffort", "LocalityAware"], **kw
    )
    for name, entry in r1.items():
        for key in (
            "mean_jct_s",
            "p99_jct_s",
            "mean_slowdown",
            "p99_queue_delay_s",
            "gpu_allocation_ratio",
        ):
            assert entry[key] == r2[name][key]
            assert math.isfinite(entry[key])
            assert len(entry["per_seed"][key]) == 2
        assert entry["mean_slowdown"] >= 1.0 - 1e-9
        assert 0.0 <= entry["gpu_allocation_ratio"] <= 1.0
        assert entry["ms_per_decision"] >= 0
    with pytest.raises(ConfigError):
        evaluate_dynamic(tr, ["NoSuchPolicy"], **kw)


def test_locality_policy_prefers_local_data_when_equal() -> None:
    fleet = two_cluster_fleet()
    # a 1-GPU job whose data lives in cluster b: the T4 node is slower (1/0.52) but local;
    # with a huge dataset the remote V100 nodes lose
    jobs = jobs_from_lists([0.0], [10.0], [1], data_home=[1], data_gb=[500.0])
    sim = DynamicSim(fleet, jobs)
    pol = LocalityAwarePolicy(packer="bestfit", order="speed-first")
    pol.reset(sim)
    j = sim.next_decision()
    node, _ = pol.select(sim, j)
    assert fleet.cluster[node] == 1


class CheckedSim(DynamicSim):
    """Asserts that the incremental "can start" test agrees with a full feasibility check."""

    def _can_start(self, j: int) -> bool:
        fast = super()._can_start(j)
        assert fast == bool(self.state.feasible(self.pod(j)).any())
        return fast


@settings(max_examples=12, deadline=None)
@given(seed=st.integers(0, 10_000), depth=st.sampled_from([0, 2, 8]), util=st.floats(0.3, 1.5))
def test_random_runs_keep_invariants(seed: int, depth: int, util: float) -> None:
    fleet = two_cluster_fleet()
    tr = small_trace(60, seed=seed % 7)
    jobs = build_jobs(tr, fleet, np.random.default_rng(seed), target_util=util)
    sim = CheckedSim(fleet, jobs, backfill_depth=depth)
    rng = np.random.default_rng(seed)
    while (j := sim.next_decision()) is not None:
        st_ = sim.state
        assert (st_.gpu_idle >= 0).all() and (st_.cpu_free >= 0).all() and (st_.mem_free >= 0).all()
        assert j in sim.queue[: depth + 1]
        node = int(rng.choice(np.flatnonzero(sim.feasible(j))))
        sim.place(j, node)
    m = sim.metrics()
    assert m["n_started"] + m["n_rejected"] == len(jobs)
    started = np.isfinite(sim.start_s)
    assert (sim.start_s[started] >= jobs.arrival_s[started] - 1e-9).all()
    np.testing.assert_allclose(
        sim.end_s[started], sim.start_s[started] + sim.run_s[started] + sim.data_s[started]
    )
    assert (sim.run_s[started] >= jobs.ideal_s[started] * (1 - 1e-9)).all()
    assert sim.state.allocated_gpu_milli == 0  # every departure gave its resources back
    np.testing.assert_array_equal(sim.state.cpu_free, sim.state.cpu_cap)


def test_a_stream_too_short_for_its_load_is_warned_once_per_setting(monkeypatch) -> None:
    """A training run draws thousands of streams of one setting; each used to repeat the
    'cannot load' warning (its load differs per stream), burying the progress bars."""
    import warnings

    from fleetmind.envs.dynamic import jobs as jobs_mod

    monkeypatch.setattr(jobs_mod, "_SHORT_STREAMS_WARNED", set())
    fleet, tr = two_cluster_fleet(), small_trace(200)
    with warnings.catch_warnings(record=True) as got:
        warnings.simplefilter("always")
        for seed in range(3):
            build_jobs(tr, fleet, np.random.default_rng(seed), target_util=0.99, n_jobs=3)
        build_jobs(tr, fleet, np.random.default_rng(0), target_util=0.99, n_jobs=4)
        build_jobs(tr, fleet, np.random.default_rng(0), target_util=0.7)  # reaches its load
    said = [str(w.message) for w in got if "cannot load" in str(w.message)]
    assert len(said) == 2 and "3 jobs" in said[0] and "4 jobs" in said[1]
