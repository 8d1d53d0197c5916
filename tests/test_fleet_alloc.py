"""go-gpuallocator compatible scoring and the best-free-set allocator."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from fleetmind.data.errors import ConfigError
from fleetmind.data.gpu_alloc import best_gpu_set, best_gpu_set_bits, pair_score_matrix, set_score
from fleetmind.data.topology import LinkLevel, get_template

# Points straight from go-gpuallocator's calculateGPUPairScore, written independently here.
POINTS = {"SYS": 10, "NODE": 20, "PHB": 30, "PXB": 40, "PIX": 50, "BRD": 60}


@pytest.fixture
def dgx1():
    return get_template("dgx1-v100")


def test_pair_scores_follow_the_go_gpuallocator_points(dgx1):
    m = pair_score_matrix(dgx1)
    for i, j in itertools.combinations(range(8), 2):
        want = POINTS[LinkLevel(int(dgx1.level[i, j])).name] + 100 * int(dgx1.nvlinks[i, j])
        assert m[i, j] == m[j, i] == want
    assert (np.diag(m) == 0).all()
    assert m[2, 3] == 250 and m[0, 5] == 10  # NV2 behind one switch; cross-socket, no NVLink
    assert set_score(dgx1, (0, 1, 2, 3)) == sum(
        m[a, b] for a, b in itertools.combinations(range(4), 2)
    )
    assert set_score(dgx1, (5,)) == 0


@pytest.mark.parametrize("policy", ["greedy", "partition"])
def test_dgx1_pair_is_a_two_nvlink_pair(dgx1, policy):
    pair = best_gpu_set(dgx1, np.ones(8, bool), 2, policy)
    assert pair is not None and dgx1.nvlinks[pair] == 2


@pytest.mark.parametrize("policy", ["greedy", "partition"])
def test_dgx1_four_gpus_is_one_half(dgx1, policy):
    assert best_gpu_set(dgx1, np.ones(8, bool), 4, policy) in {(0, 1, 2, 3), (4, 5, 6, 7)}
    # With GPU 1 taken, the other half is the only fully connected quad.
    free = np.ones(8, bool)
    free[1] = False
    assert best_gpu_set(dgx1, free, 4, policy) == (4, 5, 6, 7)


def test_allocator_respects_used_gpus_and_is_optimal(dgx1):
    rng = np.random.default_rng(0)
    m = pair_score_matrix(dgx1)
    for _ in range(60):
        free = rng.random(8) < 0.6
        k = int(rng.integers(1, 6))
        got = best_gpu_set(dgx1, free, k)
        idle = np.flatnonzero(free)
        if len(idle) < k:
            assert got is None
            continue
        assert got is not None and len(got) == k and all(free[g] for g in got)
        scores = {
            c: sum(m[a, b] for a, b in itertools.combinations(c, 2))
            for c in itertools.combinations(idle, k)
        }
        best = max(scores.values())
        assert set_score(dgx1, got) == best
        assert got == min(c for c, s in scores.items() if s == best)  # ties: lowest indices
        part = best_gpu_set(dgx1, free, k, "partition")
        assert part is not None and all(free[g] for g in part)


def test_bitmask_entry_point_and_edge_cases(dgx1):
    assert best_gpu_set_bits(dgx1, 0b11110000, 2) == best_gpu_set(dgx1, [False] * 4 + [True] * 4, 2)
    assert best_gpu_set(dgx1, np.ones(8, bool), 0) == ()
    assert best_gpu_set(dgx1, np.zeros(8, bool), 1) is None
    with pytest.raises(ConfigError, match="free_mask has shape"):
        best_gpu_set(dgx1, np.ones(4, bool), 2)
    with pytest.raises(ConfigError, match="unknown allocation policy"):
        best_gpu_set(dgx1, np.ones(8, bool), 2, "random")  # type: ignore[arg-type]


def test_pcie_server_prefers_the_shared_switch():
    t = get_template("pcie-8gpu", "T4")
    free = np.ones(8, bool)
    free[0] = False
    assert best_gpu_set(t, free, 2) == (2, 3)  # PIX pair, not 1 with a PXB/SYS peer


def _best_partition_total(scores, items, k):
    """Independent check: best total score over partitions of ``items`` into k-sets, where the
    padding (``None``) stays together in one set, as go-gpuallocator requires."""
    pad = items.count(None)
    if not items:
        return 0
    head, rest = items[0], items[1:]
    best = -1
    for others in itertools.combinations(range(len(rest)), k - 1):
        group = [head, *[rest[i] for i in others]]
        if group.count(None) not in (0, pad):
            continue
        left = [x for i, x in enumerate(rest) if i not in others]
        real = [g for g in group if g is not None]
        s = sum(scores[a, b] for a, b in itertools.combinations(real, 2))
        best = max(best, s + _best_partition_total(scores, left, k))
    return best


def test_partition_policy_keeps_an_optimal_partition(dgx1):
    """The chosen set belongs to a partition of the free GPUs whose total score is maximal."""
    m = pair_score_matrix(dgx1)
    rng = np.random.default_rng(1)
    for _ in range(25):
        free = rng.random(8) < 0.75
        idle = [int(i) for i in np.flatnonzero(free)]
        k = int(rng.integers(2, 5))
        if len(idle) < k:
            continue
        got = best_gpu_set(dgx1, free, k, "partition")
        assert got is not None and set(got) <= set(idle)
        pad = (-len(idle)) % k
        rest = [g for g in idle if g not in got] + [None] * pad
        with_got = set_score(dgx1, got) + _best_partition_total(m, rest, k)
        assert with_got == _best_partition_total(m, idle + [None] * pad, k)
