"""Cluster state core: feasibility is never violated (property-based), place/release round-trips."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fleetmind.data.openb import (
    ANY_GPU_MODEL,
    gpu_model_id,
    gpu_spec_mask,
    nodes_from_arrays,
    trace_from_arrays,
)
from fleetmind.envs.core import ClusterState, NodeStats, PlacementError, Pod
from fleetmind.envs.policies import FGD, POLICIES, make_policy
from fleetmind.envs.policies.scores import (
    bestfit_raw,
    bestfit_raw_at,
    bestfit_scores,
    bestfit_scores_at,
    dotprod_scores,
    dotprod_scores_at,
    gpu_clustering_scores,
    gpu_clustering_scores_at,
    gpu_packing_scores,
    gpu_packing_scores_at,
    heuristic_scores_one,
)

MODELS = ["T4", "P100", "V100M16"]


def _brute_feasible(state: ClusterState, pod: Pod, n: int) -> bool:
    if state.cpu_free[n] < pod.cpu_milli or state.mem_free[n] < pod.memory_mib:
        return False
    if pod.num_gpu == 0:
        return True
    if state.num_gpu[n] == 0:
        return False
    if pod.gpu_spec_mask != ANY_GPU_MODEL and not (pod.gpu_spec_mask >> int(state.model_id[n])) & 1:
        return False
    idle = [int(state.gpu_idle[n, i]) for i in range(int(state.num_gpu[n]))]
    if pod.num_gpu == 1 and pod.gpu_milli < 1000:
        return any(v >= pod.gpu_milli for v in idle)
    return sum(v == 1000 for v in idle) >= pod.num_gpu


fleets = st.lists(
    st.tuples(
        st.sampled_from([4000, 8000, 16000, 32000]),
        st.sampled_from([8192, 16384, 65536]),
        st.integers(1, 8),
        st.sampled_from(MODELS),
    ),
    min_size=1,
    max_size=5,
)
pods = st.lists(
    st.tuples(
        st.sampled_from([0, 500, 1000, 2000, 6000]),
        st.sampled_from([0, 1024, 4096, 16384]),
        st.sampled_from([0, 1, 1, 1, 2, 4, 8]),
        st.sampled_from([100, 250, 500, 700, 1000]),
        st.sampled_from(["", "", "T4", "P100|V100M16", "A10"]),
    ),
    min_size=1,
    max_size=40,
)


def _pod(row: tuple[int, int, int, int, str]) -> Pod:
    c, m, k, g, spec = row
    if k > 1:
        g = 1000
    return Pod(c, m, k, g if k else 0, gpu_spec_mask(spec) if k else ANY_GPU_MODEL)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(fleet=fleets, rows=pods, policy=st.sampled_from(sorted(POLICIES)), seed=st.integers(0, 5))
def test_placements_never_violate_feasibility(fleet, rows, policy, seed) -> None:
    nodes = nodes_from_arrays(*[list(x) for x in zip(*fleet, strict=True)])
    state = ClusterState.from_openb(
        nodes, priority=np.random.default_rng(seed).permutation(len(nodes))
    )
    trace = trace_from_arrays(*[list(x) for x in zip(*rows, strict=True)])
    pol = make_policy(policy)
    pol.reset(state, rng=np.random.default_rng(seed), trace=trace)
    placed = []
    for row in rows:
        pod = _pod(row)
        mask = state.feasible(pod)
        assert mask.tolist() == [_brute_feasible(state, pod, n) for n in range(state.n_nodes)]
        node, gpus = pol.select(state, pod, mask)
        if node < 0:
            assert not mask.any()
            continue
        assert mask[node]
        if pod.num_gpu:
            assert len(gpus) == pod.num_gpu and len(set(gpus.tolist())) == pod.num_gpu
            assert all(0 <= g < state.num_gpu[node] for g in gpus)
            if pod.gpu_spec_mask != ANY_GPU_MODEL:
                assert (pod.gpu_spec_mask >> int(state.model_id[node])) & 1
        state.place(pod, node, gpus)
        placed.append((pod, node, gpus))
        assert (state.cpu_free >= 0).all() and (state.mem_free >= 0).all()
        assert ((state.gpu_idle >= 0) & (state.gpu_idle <= 1000)).all()
        assert (state.gpu_idle[~state.gpu_present] == 0).all()
        assert state.allocated_gpu_milli == int(
            (np.where(state.gpu_present, 1000, 0) - state.gpu_idle).sum()
        )
    for pod, node, gpus in reversed(placed):
        state.release(pod, node, gpus)
    assert (state.cpu_free == state.cpu_cap).all() and (state.mem_free == state.mem_cap).all()
    assert state.allocated_gpu_milli == 0 and (state.class_count == 0).all()


def _tiny() -> ClusterState:
    nodes = nodes_from_arrays([8000, 8000], [16384, 16384], [2, 4], ["T4", "P100"])
    return ClusterState.from_openb(nodes)


def test_feasibility_rules_by_hand() -> None:
    s = _tiny()
    assert s.feasible(Pod(9000, 0, 0, 0)).tolist() == [False, False]  # CPU
    assert s.feasible(Pod(100, 20000, 0, 0)).tolist() == [False, False]  # memory
    assert s.feasible(Pod(100, 0, 3, 1000)).tolist() == [False, True]  # 3 whole GPUs
    assert s.feasible(Pod(100, 0, 1, 500, gpu_spec_mask("T4"))).tolist() == [True, False]
    s.place(Pod(100, 0, 1, 700), 0, [0])
    s.place(Pod(100, 0, 1, 1000), 0, [1])
    assert s.feasible(Pod(100, 0, 1, 300)).tolist() == [True, True]
    assert s.feasible(Pod(100, 0, 1, 400)).tolist() == [False, True]
    assert s.gpu_idle[0].tolist()[:2] == [300, 0]


def test_place_rejects_infeasible_and_release_rejects_unknown() -> None:
    s = _tiny()
    s.place(Pod(100, 0, 1, 500), 0, [0])
    with pytest.raises(PlacementError, match="lack idle"):
        s.place(Pod(100, 0, 1, 600), 0, [0])
    with pytest.raises(PlacementError, match="not allowed"):
        s.place(Pod(100, 0, 1, 500, 1 << gpu_model_id("P100")), 0, [1])
    with pytest.raises(PlacementError):
        s.release(Pod(100, 0, 2, 1000), 1, [0, 1])


def test_gpu_choice_rules() -> None:
    s = _tiny()
    s.place(Pod(0, 0, 1, 200), 1, [0])  # idle 800
    s.place(Pod(0, 0, 1, 600), 1, [2])  # idle 400
    pod = Pod(0, 0, 1, 300)
    assert s.choose_gpus(pod, 1, "tightest").tolist() == [2]
    assert s.choose_gpus(pod, 1, "first").tolist() == [0]
    assert s.choose_gpus(Pod(0, 0, 2, 1000), 1).tolist() == [1, 3]


def test_select_node_ties_go_to_priority() -> None:
    nodes = nodes_from_arrays([1] * 4, [1] * 4, [1] * 4, ["T4"] * 4)
    s = ClusterState.from_openb(nodes, priority=np.array([3, 1, 0, 2]))
    scores = np.array([5, 7, 7, 7])
    assert s.select_node(scores, np.array([True, True, True, True])) == 2
    assert s.select_node(scores, np.array([True, True, False, True])) == 1
    assert s.select_node(scores, np.zeros(4, dtype=bool)) == -1


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(fleet=fleets, rows=pods, seed=st.integers(0, 5))
def test_fast_paths_equal_the_reference_formulas(fleet, rows, seed) -> None:
    """NodeStats feasibility, the index-based and the scalar heuristic scores equal the mask-based
    public functions bit for bit, while pods are placed and released."""
    nodes = nodes_from_arrays(*[list(x) for x in zip(*fleet, strict=True)])
    state = ClusterState.from_openb(
        nodes, priority=np.random.default_rng(seed).permutation(len(nodes))
    )
    stats = NodeStats()
    rng = np.random.default_rng(seed)
    trace = trace_from_arrays(*[list(x) for x in zip(*rows, strict=True)])
    fgd = FGD()
    fgd.reset(state, trace=trace)
    placed = []
    for row in rows:
        pod = _pod(row)
        mask = state.feasible(pod)
        assert stats.feasible(state, pod).tolist() == mask.tolist()
        # FGD: one-node plain-Python paths (refresh, deltas) equal the vectorised ones
        fresh = FGD(typical=fgd.typical)
        fresh.reset(state)
        assert fgd.fragmentation_sum(state) == fresh.fragmentation_sum(state)
        assert fgd._F.tolist() == fresh._F.tolist()  # noqa: SLF001
        fit = np.flatnonzero(mask)
        if fit.size >= 2:
            d_all, g_all = fresh.node_deltas(state, pod, mask)  # vectorised over >= 2 nodes
            for n in fit.tolist():
                d1, g1 = fgd.node_deltas_at(state, pod, np.array([n]))
                assert (d1[0], g1[0]) == (d_all[n], g_all[n])
        every = np.ones(state.n_nodes, dtype=bool)
        ref = (
            bestfit_raw(state, pod, every),
            dotprod_scores(state, pod, every),
            gpu_packing_scores(state, pod, every),
            gpu_clustering_scores(state, pod, every),
        )
        idx = np.arange(state.n_nodes)
        for s in (None, stats):
            assert bestfit_raw_at(state, pod, idx, s).tolist() == ref[0].tolist()
            assert dotprod_scores_at(state, pod, idx, s).tolist() == ref[1].tolist()
            assert gpu_packing_scores_at(state, pod, idx, s).tolist() == ref[2].tolist()
            assert gpu_clustering_scores_at(state, pod, idx, s).tolist() == ref[3].tolist()
        for n in range(state.n_nodes):
            got = heuristic_scores_one(state, pod, n, stats)
            assert got == tuple(int(r[n]) for r in ref)
        if mask.any():
            fi = np.flatnonzero(mask)
            assert bestfit_scores_at(state, pod, fi, stats).tolist() == (
                bestfit_scores(state, pod, mask)[fi].tolist()
            )
            node = int(rng.choice(fi))
            placed.append((pod, node, state.place(pod, node)))
        if placed and rng.random() < 0.3:
            state.release(*placed.pop(int(rng.integers(len(placed)))))
