"""envs.failure_causes: why fgd-mode pods fail, and the diagnosis run equals the plain run."""

from __future__ import annotations

import json

import numpy as np
import pytest

from fleetmind.envs.core import ClusterState, Pod
from fleetmind.envs.failure_causes import (
    FAILURE_CAUSES,
    failure_cause,
    pod_kind,
    relax_host,
    run_with_causes,
)
from fleetmind.envs.fgd_mode import run_fgd
from tests.ppo_helpers import load_tiny

T4, V100 = 0, 1  # model ids of the two-node cluster below


def two_nodes() -> ClusterState:
    """Node 0: 2 T4 GPUs, 8 cores; node 1: 2 V100 GPUs, 8 cores (64 GiB each)."""
    return ClusterState(
        cpu_milli=np.array([8000, 8000]),
        memory_mib=np.array([65536, 65536]),
        num_gpu=np.array([2, 2]),
        model_id=np.array([T4, V100]),
    )


def test_failure_causes_read_from_the_state() -> None:
    st = two_nodes()
    # whole GPUs idle on node 0 but its CPU used up; node 1's GPUs are fully used
    st.cpu_free[0] = 500
    st.gpu_idle[1, :2] = 0
    whole = Pod(cpu_milli=1000, memory_mib=1024, num_gpu=1, gpu_milli=1000)
    assert failure_cause(st, whole) == "host"
    st.cpu_free[0] = 8000
    st.mem_free[0] = 512  # memory short instead of CPU: the same cause
    assert failure_cause(st, whole) == "host"

    st = two_nodes()
    st.gpu_idle[:, :2] = 600  # 2,400 milli idle in all, no GPU fully idle
    assert failure_cause(st, whole) == "gpu_fragmented"
    two = Pod(cpu_milli=1000, memory_mib=1024, num_gpu=2, gpu_milli=1000)
    assert failure_cause(st, two) == "gpu_fragmented"
    st.gpu_idle[:, :2] = 200  # 800 milli idle in all, under a whole GPU
    assert failure_cause(st, whole) == "gpu_full"

    # only the V100 node has room, and the pod may use T4 GPUs only
    st = two_nodes()
    st.gpu_idle[0, :2] = 0
    t4_only = Pod(cpu_milli=1000, memory_mib=1024, num_gpu=1, gpu_milli=500, gpu_spec_mask=1 << T4)
    assert failure_cause(st, t4_only) == "gpu_full"
    assert pod_kind(t4_only) == "sharing+spec"

    with pytest.raises(ValueError, match="fits"):
        failure_cause(two_nodes(), whole)
    with pytest.raises(ValueError, match="CPU-only"):
        failure_cause(st, Pod(cpu_milli=99999, memory_mib=1, num_gpu=0, gpu_milli=0))


def test_pod_kinds() -> None:
    assert pod_kind(Pod(1, 1, 0, 0)) == "cpu_only"
    assert pod_kind(Pod(1, 1, 1, 300)) == "sharing"
    assert pod_kind(Pod(1, 1, 1, 1000)) == "one_gpu"
    assert pod_kind(Pod(1, 1, 4, 1000)) == "multi_gpu"


@pytest.mark.parametrize("policy", ["FGD", "BestFit"])
def test_diagnosed_run_equals_plain_run_and_adds_up(tmp_path, policy: str) -> None:
    nodes, trace = load_tiny(tmp_path)
    for seed in (0, 1):
        plain = run_fgd(trace, policy, seed, nodes, levels=(100,))
        res, b = run_with_causes(trace, policy, seed, nodes)
        np.testing.assert_array_equal(res.placed, plain.placed)
        np.testing.assert_array_equal(res.node_of, plain.node_of)
        assert b.unallocated == plain.unallocated[100]
        # recount the failed GPU request up to 100 % arrived from the run itself
        req = res.workload.gpu_request
        window = res.arrived_milli <= res.capacity_milli
        lost = int(req[~res.placed & window].sum())
        assert b.failed_pct == pytest.approx(100 * lost / res.capacity_milli, abs=1e-4)
        assert b.n_failed_gpu == int((~res.placed & window & (req > 0)).sum())
        assert b.failed_pct > 0  # the tiny fleet is oversubscribed at 100 %: the test has teeth
        assert sum(b.by_cause.values()) == pytest.approx(b.failed_pct, abs=1e-3)
        assert sum(b.by_kind.values()) == pytest.approx(b.failed_pct, abs=1e-3)
        assert set(b.by_cause) == set(FAILURE_CAUSES)
        json.dumps(b.to_json())


def test_relax_host_leaves_only_gpu_causes(tmp_path) -> None:
    nodes, trace = load_tiny(tmp_path)
    relaxed = relax_host(trace)
    assert not relaxed.cpu_milli.any() and not relaxed.memory_mib.any()
    np.testing.assert_array_equal(relaxed.gpu_milli, trace.gpu_milli)
    np.testing.assert_array_equal(relaxed.num_gpu, trace.num_gpu)
    assert trace.cpu_milli.any()  # the original is untouched
    _, b = run_with_causes(relaxed, "FGD", 0, nodes)
    assert b.by_cause["host"] == 0.0
    assert b.failed_pct > 0


def test_benchmark_script_on_the_openb_default_trace(shared_data, tmp_path) -> None:
    from benchmarks.placement.failure_causes import main

    out = tmp_path / "causes.json"
    main(
        ["--traces", "default", "--seeds", "42", "--policies", "BestFit", "--relax-host"]
        + ["--workers", "1", "--out", str(out)]
    )
    res = json.loads(out.read_text())
    traced = res["summary"]["as_traced"]["default"]["BestFit"]
    relaxed = res["summary"]["no_host_limits"]["default"]["BestFit"]
    lb = res["lower_bound"]["default"]["min_failed_pct"]
    assert 0 < lb <= relaxed["failed_pct"] and lb <= traced["failed_pct"]
    assert relaxed["by_cause"]["host"] == 0.0
    assert traced["by_cause"]["host"] > 0  # on the real trace, host limits stop pods
    assert len(res["runs"]) == 2 and res["versions"]["numpy"]


def test_benchmark_script_names_a_bad_trace(tmp_path) -> None:
    from benchmarks.placement.failure_causes import main
    from fleetmind.errors import DataError

    with pytest.raises(DataError, match="no-such-trace"):  # one line, status 2 under run_main
        main(["--traces", "no-such-trace", "--out", str(tmp_path / "x.json")])


def test_benchmark_script_bound_only(shared_data, tmp_path) -> None:
    from benchmarks.placement.failure_causes import main

    out = tmp_path / "bound.json"
    main(["--traces", "gpushare60", "--seeds", "42", "43", "--policies", "--out", str(out)])
    res = json.loads(out.read_text())
    assert res["runs"] == []
    per_seed = res["lower_bound"]["gpushare60"]["per_seed"]
    assert set(per_seed) == {"42", "43"} and all(v > 0 for v in per_seed.values())
