"""fgd mode: workload construction, the window-mean metric, determinism, gpu_spec, and a quick
fidelity check against the published BestFit results on ``default``."""

from __future__ import annotations

import numpy as np
import pytest

from fleetmind.data.openb import gpu_model_id, nodes_from_arrays, trace_from_arrays
from fleetmind.envs.fgd_mode import build_workload, run_fgd, unallocated_at


def test_metric_window_mean_by_hand() -> None:
    cap = 2000
    arrived = np.array(
        [500, 1000, 1990, 2000, 2010, 2600]
    )  # 25, 50, 100 (x3: 99.5, 100, 100.5), 130
    allocated = np.array([500, 1000, 1400, 1500, 1500, 1500])  # 25, 50, 70, 75, 75, 75 %
    # arrived % rounds half to even: 99.5 -> 100, 100.5 -> 100; mean(70, 75, 75) = 73.33
    assert unallocated_at(arrived, allocated, cap, 100) == pytest.approx(26.67)
    assert unallocated_at(arrived, allocated, cap, 130) == pytest.approx(25.0)
    # no record at 49 % -> window 48..50 holds the record at 50 %
    assert unallocated_at(arrived, allocated, cap, 49) == pytest.approx(50.0)
    assert np.isnan(unallocated_at(arrived, allocated, cap, 80))


def test_tiny_fleet_end_to_end_by_hand() -> None:
    # one node, 2 GPUs, 1000 CPU; trace: one whole-GPU pod with 600 CPU.
    nodes = nodes_from_arrays([1000], [1000], [2], ["T4"])
    trace = trace_from_arrays([600], [10], [1], [1000])
    # target 1.3 x 2000 = 2600: one copy is appended (2000), the next draw would pass the target.
    res = run_fgd(trace, "BestFit", 42, nodes)
    assert res.n_pods == 2 and res.placed.tolist() == [True, False]  # second pod lacks CPU
    assert res.arrived_milli.tolist() == [1000, 2000]
    assert res.allocated_milli.tolist() == [1000, 1000]
    assert res.unallocated[100] == pytest.approx(50.0)
    nodes2 = nodes_from_arrays([2000], [1000], [2], ["T4"])
    assert run_fgd(trace, "FGD", 42, nodes2).unallocated[100] == pytest.approx(0.0)


def _small_trace(n: int = 60, seed: int = 0):
    rng = np.random.default_rng(seed)
    k = rng.choice([0, 1, 1, 1, 2], size=n)
    g = np.where(k == 1, rng.choice([200, 500, 1000], size=n), 1000)
    spec = rng.choice(["", "", "T4", "P100"], size=n)
    return trace_from_arrays(
        rng.choice([1000, 4000], size=n), rng.choice([1024, 8192], size=n), k, g, spec
    )


def _small_nodes():
    return nodes_from_arrays(
        [32000] * 6, [65536] * 6, [1, 2, 4, 8, 2, 4], ["T4", "P100", "T4", "P100", "V100M16", "T4"]
    )


def test_workload_resample_and_trim_rules() -> None:
    tr = _small_trace()
    cap = int(tr.gpu_request.sum())  # the trace is 1/1.3 of the target: copies get appended
    wl = build_workload(tr, 6, cap, seed=3)
    req = wl.trace.gpu_request
    assert wl.n_original == len(tr) < len(wl.trace)
    # stop rule: the first rejected draw's per-GPU milli would pass the target
    assert req.sum() + 1000 > 1.3 * cap
    assert sorted(wl.trace.pod_names[: len(tr)].tolist()) == sorted(tr.pod_names.tolist())
    assert req.sum() <= 1.3 * cap
    assert sorted(wl.priority.tolist()) == list(range(6))
    big = build_workload(tr, 6, 1000, seed=3)  # trace far above 1.3 x 1000: trimmed
    assert big.trace.gpu_request.sum() <= 1300 and len(big.trace) < len(tr)


@pytest.mark.parametrize("policy", ["Random", "FGD", "GpuClustering"])
def test_determinism_by_seed(policy: str) -> None:
    tr, nodes = _small_trace(), _small_nodes()
    a, b = run_fgd(tr, policy, 7, nodes), run_fgd(tr, policy, 7, nodes)
    assert a.node_of.tolist() == b.node_of.tolist()
    assert a.allocated_milli.tolist() == b.allocated_milli.tolist()
    c = run_fgd(tr, policy, 8, nodes)
    assert a.workload.pod_names.tolist() != c.workload.pod_names.tolist()


@pytest.mark.parametrize("policy", ["Random", "DotProd", "GpuPacking", "BestFit", "FGD"])
def test_gpu_spec_is_respected(policy: str) -> None:
    tr, nodes = _small_trace(seed=1), _small_nodes()
    res = run_fgd(tr, policy, 5, nodes)
    wl = res.workload
    checked = 0
    for i in np.flatnonzero(res.placed):
        spec = wl.gpu_spec[i]
        if spec and wl.num_gpu[i] > 0:
            assert nodes.model[res.node_of[i]] in spec.split("|")
            assert (wl.gpu_spec_mask[i] >> gpu_model_id(nodes.model[res.node_of[i]])) & 1
            checked += 1
    assert checked > 0


@pytest.mark.slow
def test_bestfit_default_trace_close_to_published(shared_data) -> None:
    """Quick fidelity check: BestFit, 2 seeds, within 0.5 + 3 standard errors of the published mean."""
    from fleetmind.data.openb import load_fgd_published, load_openb_nodes, load_openb_trace

    pub = load_fgd_published()[("default", "BestFit")]
    seeds = [42, 43]
    tr, nodes = load_openb_trace("default"), load_openb_nodes()
    ours = np.mean([run_fgd(tr, "BestFit", s, nodes).unallocated[100] for s in seeds])
    vals = np.array([v[0] for v in pub.values()])
    band = 0.5 + 3 * vals.std(ddof=1) / np.sqrt(len(seeds))
    assert abs(ours - vals.mean()) <= band
