"""Seed ensembles in the GAT-versus-GBDT benchmark (``benchmarks/rca/gat_neighbours.py``): members'
scores are averaged per candidate, ranks count ties in the root's favour, and members that rank
different candidates are refused rather than silently misaligned."""

from __future__ import annotations

import json
from types import SimpleNamespace

import numpy as np
import pytest

from benchmarks.rca.gat_neighbours import _boot, mean_scores, rank_metrics, ranks_of, tie_shares
from fleetmind.errors import ConfigError


def _ds(roots: list[int]) -> tuple[list[dict], SimpleNamespace]:
    """Incidents whose root is node ``roots[i]`` of a graph with node ids ``"0" .. "9"``."""
    graph = SimpleNamespace(index={str(i): i for i in range(10)})
    incs = [{"root_cause": str(r)} for r in roots]
    return incs, SimpleNamespace(graph_of=lambda inc: graph)


def test_mean_of_two_members_can_fix_what_each_gets_wrong() -> None:
    cand = np.array([3, 5, 7])
    a = [(cand, np.array([0.5, 0.45, 0.05]))]  # root 5 second
    b = [(cand, np.array([0.1, 0.2, 0.7]))]  # root 5 second
    incs, ds = _ds([5])
    assert ranks_of(a, incs, ds).tolist() == [1]
    assert ranks_of(b, incs, ds).tolist() == [1]
    mean = mean_scores([a, b])
    np.testing.assert_allclose(mean[0][1], [0.3, 0.325, 0.375])
    assert ranks_of(mean, incs, ds).tolist() == [1]
    c = [(cand, np.array([0.1, 0.6, 0.3]))]
    assert ranks_of(mean_scores([a, b, c]), incs, ds).tolist() == [0]


def test_ties_favour_the_root_and_a_missing_root_is_a_miss() -> None:
    incs, ds = _ds([4, 9])
    scores = [
        (np.array([1, 4, 2]), np.array([0.4, 0.4, 0.2])),
        (np.array([1, 2]), np.array([0.9, 0.1])),
    ]
    r = ranks_of(scores, incs, ds)
    assert r.tolist() == [0, -1]
    assert rank_metrics(r)["ac@1"] == 0.5
    assert rank_metrics(r)["mrr"] == 0.5


def test_ties_shared_count_a_k_way_tie_as_one_kth_of_a_hit() -> None:
    """The second count: a root tied with two others at the top earns 1/3, alone 1, below 0; the
    paired lead under it differs from the favourable count exactly by the GBDT's coin flips."""
    incs, ds = _ds([4, 4, 4, 9])
    gbdt = [
        (np.array([1, 4, 2]), np.array([0.4, 0.4, 0.4])),  # three-way tie at the top
        (np.array([1, 4, 2]), np.array([0.2, 0.5, 0.3])),  # alone at the top
        (np.array([1, 4, 2]), np.array([0.5, 0.4, 0.4])),  # below another
        (np.array([1, 2]), np.array([0.9, 0.1])),  # not a candidate
    ]
    np.testing.assert_allclose(tie_shares(gbdt, incs, ds), [1 / 3, 1, 0, 0])
    gat = [  # log-probabilities without ties: the root first on incidents 0 and 1
        (c, np.log(np.array(p)))
        for c, p in (
            (gbdt[0][0], [0.3, 0.5, 0.2]),
            (gbdt[1][0], [0.2, 0.5, 0.3]),
            (gbdt[2][0], [0.5, 0.3, 0.2]),
            (gbdt[3][0], [0.9, 0.1]),
        )
    ]
    ranks = {"hop2_gbdt": ranks_of(gbdt, incs, ds), "gat_neighbours": ranks_of(gat, incs, ds)}
    shares = {"hop2_gbdt": tie_shares(gbdt, incs, ds), "gat_neighbours": tie_shares(gat, incs, ds)}
    out = _boot(ranks, 50, 0, shares)["gat_neighbours"]
    # favourable count: GAT 2 hits, GBDT 2 (the tie counted whole); shared: GBDT 1/3 + 1
    assert out["minus_hop2_gbdt_ac@1"] == pytest.approx(0.0)
    assert out["minus_hop2_gbdt_ac@1_ties_shared"] == pytest.approx((2 - 4 / 3) / 4)
    assert out["ac@1_ties_shared"] == pytest.approx(0.5)


def test_members_with_different_candidates_are_refused() -> None:
    a = [(np.array([1, 2]), np.array([0.5, 0.5]))]
    b = [(np.array([1, 3]), np.array([0.5, 0.5]))]
    with pytest.raises(ValueError, match="different candidates"):
        mean_scores([a, b])
    with pytest.raises(ValueError):
        mean_scores([a, a + a])  # a member with another number of incidents


def test_an_incumbent_replaces_the_default_and_the_draws_avoid_it() -> None:
    """``--first`` puts a configuration chosen earlier where the shipped default stands, so both
    methods of a same-budget re-tuning start from their incumbent; wrong keys are refused."""
    from argparse import Namespace

    from benchmarks.rca.gat_neighbours import GAT_DEFAULT, GAT_GRID, _configs

    inc = {"hidden": 48, "lr": 3e-3, "dropout": 0.2, "weight_decay": 1e-4}
    a = Namespace(refit_from=None, first=json.dumps(inc), seed=8800)
    got = _configs(a, "tune-gat", "gat_neighbours", GAT_GRID, GAT_DEFAULT, 6)
    assert got[0] == inc and len(got) == 6
    assert all(c != inc for c in got[1:])
    plain = _configs(
        Namespace(refit_from=None, first=None, seed=8800), "", "", GAT_GRID, GAT_DEFAULT, 6
    )
    assert plain[0] == GAT_DEFAULT and plain[0] != inc
    bad = Namespace(refit_from=None, first='{"hidden": 48}', seed=0)
    with pytest.raises(ConfigError, match="exactly the keys"):  # one line under run_main
        _configs(bad, "tune-gat", "gat_neighbours", GAT_GRID, GAT_DEFAULT, 2)
