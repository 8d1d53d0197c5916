"""Policy scores on hand-built cases (values computed by hand from the published formulas)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from fleetmind.data.errors import ConfigError
from fleetmind.data.openb import nodes_from_arrays, trace_from_arrays
from fleetmind.envs.core import ClusterState, Pod
from fleetmind.envs.policies import FGD, BestFit, TypicalPods, fgd_score_from_delta, make_policy
from fleetmind.envs.policies.scores import (
    bestfit_raw,
    dotprod_scores,
    gpu_clustering_scores,
    gpu_packing_scores,
)

ALL = np.ones(2, dtype=bool)


def _two_nodes(cpu=(64000, 64000), gpus=(2, 2)) -> ClusterState:
    return ClusterState.from_openb(
        nodes_from_arrays(list(cpu), [262144, 262144], list(gpus), ["T4", "T4"])
    )


def test_bestfit_prefers_the_tightest_node() -> None:
    s = _two_nodes()
    s.place(Pod(32000, 0, 1, 1000), 1, [0])  # node 1: 32000 CPU and one GPU left
    pod = Pod(4000, 0, 1, 500)
    raw = bestfit_raw(s, pod, ALL)
    # node 0: floor(100 (1 - (0.5*60000/128000 + 0.5*1500/8000))) = floor(67.1875) = 67
    # node 1: floor(100 (1 - (0.5*28000/128000 + 0.5*500/8000)))  = floor(85.9375) = 85
    assert raw.tolist() == [67, 85]
    node, gpus = BestFit().select(s, pod, ALL)
    assert node == 1 and gpus.tolist() == [1]


def test_dotprod_hand_values() -> None:
    s = _two_nodes()
    pod = Pod(64000, 0, 2, 1000)
    # dot = (64000/128000)^2 + (2000/8000)^2 = 0.25 + 0.0625; floor(100 (1 - 0.3125/2)) = 84
    assert dotprod_scores(s, pod, ALL).tolist() == [84, 84]


def test_gpu_packing_cases() -> None:
    s = _two_nodes(gpus=(2, 4))
    assert gpu_packing_scores(s, Pod(0, 0, 1, 500), ALL).tolist() == [
        31,
        29,
    ]  # both idle: 33 - #GPUs
    s.place(Pod(0, 0, 1, 450), 0, [0])  # node 0 GPU0 idle 550
    # fitting GPU with least idle is 550 -> 100 - floor(55 / 10) = 95
    assert gpu_packing_scores(s, Pod(0, 0, 1, 500), ALL).tolist() == [95, 29]
    # 600 does not fit GPU0; uses idle GPU1 -> case (2): max(50 - 1, 33) = 49
    assert gpu_packing_scores(s, Pod(0, 0, 1, 600), ALL).tolist() == [49, 29]
    assert gpu_packing_scores(s, Pod(1000, 0, 0, 0), ALL).tolist() == [0, 0]


def test_gpu_clustering_classes() -> None:
    s = _two_nodes(gpus=(8, 8))
    s.place(Pod(0, 0, 1, 500), 0, [0])  # node 0 holds a sharing pod
    base0 = 25 * (8000 - 7500) // 8000  # 1
    assert gpu_clustering_scores(s, Pod(0, 0, 1, 200), ALL).tolist() == [base0 + 75, 25]
    assert gpu_clustering_scores(s, Pod(0, 0, 2, 1000), ALL).tolist() == [base0, 25]
    s.place(Pod(0, 0, 2, 1000), 0, [1, 2])
    base0 = 25 * (8000 - 5500) // 8000
    assert gpu_clustering_scores(s, Pod(0, 0, 1, 200), ALL).tolist()[0] == base0 + 50


def test_fgd_sigmoid_score() -> None:
    assert fgd_score_from_delta(np.array([0.0])).tolist() == [50]
    assert fgd_score_from_delta(np.array([500.0])).tolist() == [
        math.floor(100 / (1 + math.exp(-0.5)))
    ]
    assert fgd_score_from_delta(np.array([-1e9, 1e9])).tolist() == [0, 100]


def test_fgd_prefers_the_node_it_fragments_less() -> None:
    # typical workload: whole-GPU pods. Node 0 has one idle GPU, node 1 a half-used GPU.
    nodes = nodes_from_arrays([64000, 64000], [262144, 262144], [1, 1], ["T4", "T4"])
    s = ClusterState.from_openb(nodes)
    s.place(Pod(0, 0, 1, 500), 1, [0])
    typical = TypicalPods.from_trace(trace_from_arrays([1000], [0], [1], [1000]))
    fgd = FGD(typical)
    fgd.reset(s)
    pod = Pod(1000, 0, 1, 500)
    delta, gpu = fgd.node_deltas(s, pod, ALL)
    # node 0: F 0 -> 500 (its GPU no longer fits a whole pod); node 1: F 500 -> 0
    assert delta.tolist() == [-500.0, 500.0] and gpu.tolist() == [0, 0]
    assert fgd.score(s, pod, ALL).tolist() == [37, 62]
    assert fgd.select(s, pod, ALL)[0] == 1


def test_fgd_unchanged_fragment_scores_50_and_cache_follows_state() -> None:
    s = _two_nodes()
    typical = TypicalPods.from_trace(trace_from_arrays([1000, 2000], [0, 0], [1, 0], [1000, 0]))
    fgd = FGD(typical)
    fgd.reset(s)
    # a small CPU-only pod leaves every typical pod fitting: delta 0 -> score 50
    assert fgd.score(s, Pod(1000, 0, 0, 0), ALL).tolist() == [50, 50]
    s.place(Pod(63500, 0, 0, 0), 0)  # now no typical GPU pod fits node 0 (CPU): F = all idle
    fresh = FGD(typical)
    fresh.reset(s)
    pod = Pod(0, 0, 1, 300)
    assert fgd.node_deltas(s, pod, ALL)[0].tolist() == fresh.node_deltas(s, pod, ALL)[0].tolist()


def test_fgd_sharing_pod_gpu_choice_is_best_gpu() -> None:
    nodes = nodes_from_arrays([64000], [262144], [3], ["T4"])
    s = ClusterState.from_openb(nodes)
    s.place(Pod(0, 0, 1, 500), 0, [1])  # GPU1 idle 500
    typical = TypicalPods.from_trace(trace_from_arrays([1000], [0], [1], [500]))
    fgd = FGD(typical)
    fgd.reset(s)
    # a 500 pod on GPU0 leaves 500 (still fits); on GPU1 leaves 0: both delta 0, lowest index wins
    _, gpu = fgd.node_deltas(s, Pod(0, 0, 1, 500), np.ones(1, dtype=bool))
    assert gpu.tolist() == [0]
    # a 600 pod on GPU1 does not fit; on GPU0 leaves 400 (< 500, fragment grows), GPU2 same -> GPU0
    _, gpu = fgd.node_deltas(s, Pod(0, 0, 1, 600), np.ones(1, dtype=bool))
    assert gpu.tolist() == [0]


def test_typical_pods_coverage_and_order() -> None:
    tr = trace_from_arrays([1, 1, 1, 2, 2, 3, 4, 5, 6, 7], [0] * 10, [1] * 10, [100] * 10)
    t = TypicalPods.from_trace(tr, coverage=0.5)
    assert t.cpu_milli.tolist() == [1, 2]  # counts 3, 2 reach 50 %
    t2 = TypicalPods.from_trace(tr, coverage=0.6)
    assert t2.cpu_milli.tolist() == [1, 2, 7]  # equal counts: larger key first
    assert abs(t2.prob.sum() - 1) < 1e-12


def test_make_policy_names() -> None:
    assert make_policy("best_fit").name == "BestFit"
    assert make_policy("gpu-packing").name == "GpuPacking"
    with pytest.raises(ConfigError, match="unknown policy"):
        make_policy("nope")


def test_topology_best_effort_prefers_nvlink_sets() -> None:
    from fleetmind.data.fleet_io import openb_template_for
    from fleetmind.data.gpu_alloc import best_gpu_set, set_score

    nodes = nodes_from_arrays([96000, 96000], [262144, 262144], [8, 8], ["G2", "V100M16"])
    s = ClusterState.from_openb(nodes)
    s.place(Pod(60000, 0, 1, 1000), 0, [7])  # node 0 (PCIe) is tighter: BestFit alone would pick it
    pol = make_policy("TopologyBestEffort")
    pol.reset(s)
    pod = Pod(1000, 0, 2, 1000)
    node, gpus = pol.select(s, pod, s.feasible(pod))
    tmpl = openb_template_for("V100M16", 8)
    assert node == 1
    assert tuple(gpus.tolist()) == best_gpu_set(tmpl, np.ones(8, dtype=bool), 2)
    assert set_score(tmpl, gpus) > set_score(openb_template_for("G2", 8), [0, 1])
    assert make_policy("BestFit").select(s, pod, s.feasible(pod))[0] == 0


@pytest.mark.parametrize("milli", [200, 300, 500, 700, 1000])
def test_fgd_one_node_deltas_equal_the_vectorised_ones(milli) -> None:
    """The plain-Python path for a single node (exact fits, duplicates, whole GPUs) agrees with
    the vectorised path over several nodes, and with a sharing pod that exactly fills a GPU."""
    nodes = nodes_from_arrays([64000] * 3, [262144] * 3, [4, 4, 2], ["T4", "T4", "T4"])
    s = ClusterState.from_openb(nodes)
    for node, gpu, m in [(0, 0, 500), (0, 1, 700), (1, 0, 500), (1, 1, 500), (2, 0, 800)]:
        s.place(Pod(1000, 0, 1, m), node, [gpu])  # idle: [500, 300, 1000, 1000], [500, 500, ...]
    tr = trace_from_arrays([1000, 1000, 2000, 4000], [0] * 4, [1, 1, 2, 0], [500, 300, 1000, 0])
    fgd = FGD()
    fgd.reset(s, trace=tr)
    every = np.ones(3, dtype=bool)
    for pod in (Pod(1000, 0, 1, milli), Pod(2000, 0, 2, 1000), Pod(4000, 0, 0, 0)):
        mask = s.feasible(pod) & every
        d_all, g_all = fgd.node_deltas(s, pod, mask)
        for n in np.flatnonzero(mask).tolist():
            d1, g1 = fgd.node_deltas_at(s, pod, np.array([n]))
            assert (d1[0], g1[0]) == (d_all[n], g_all[n])
