"""The learned baselines read FleetMind's own GPU alert names as their vocabulary names.

``rca evaluate`` runs ``name_table``, ``node_gbdt`` and ``hop2_gbdt`` (:mod:`fleetmind.rca.gbdt`)
next to the GAT. The GAT's features count ``GpuXidError`` and ``GpuLowUtilisation`` (the names
``deploy/fleetmind-rules.yml`` gives its alerts) in the columns of the simulator's ``GPUXidError``
and ``GPUUtilizationLow`` (:data:`fleetmind.rca.features.layout.ALERTNAME_ALIASES`); the
baselines' tokens must read them the same way, or on feedback data holding the shipped names they
see an unknown token where the GAT sees a known one, and the comparison is not fair.
"""

from __future__ import annotations

import copy

import numpy as np
import pytest

from fleetmind.data.rca_gen.alerts import AlertSimConfig, IncidentSimulator
from fleetmind.data.rca_gen.graphs import generate_graph
from fleetmind.rca.features.layout import ALERTNAME_ALIASES
from fleetmind.rca.gbdt import GBDTAnalyzer, GBDTConfig, NameTableAnalyzer, alert_token

T0 = 1_767_225_600.0
VOCAB_OF = {v: a for a, v in ALERTNAME_ALIASES.items()}  # vocabulary name -> shipped name


def test_token_of_a_shipped_name_is_its_vocabulary_name() -> None:
    xid = {"labels": {"alertname": "GpuXidError", "xid": "74", "gpu": "0"}}
    assert alert_token(xid) == "GPUXidError:74"
    assert alert_token({"labels": {"alertname": "GpuLowUtilisation"}}) == "GPUUtilizationLow"
    assert alert_token({"labels": {"alertname": "KubePodCrashLooping"}}) == "KubePodCrashLooping"


def _shipped(incident: dict) -> dict:
    """``incident`` with each vocabulary name of an alias renamed to FleetMind's shipped name."""
    out = copy.deepcopy(incident)
    for a in out["alerts"]:
        lab = a["labels"]
        lab["alertname"] = VOCAB_OF.get(lab["alertname"], lab["alertname"])
    return out


@pytest.fixture(scope="module")
def data() -> tuple[dict, list[dict], list[dict]]:
    g = generate_graph("tr", 11, n_nodes=300, n_clusters=1)
    sim = IncidentSimulator(g, AlertSimConfig())
    rng = np.random.default_rng(0)
    incs = [sim.simulate(rng, f"i{k}", t_start=T0 + 7200 * k) for k in range(160)]
    return {g.name: g}, incs[:120], incs[120:]


@pytest.mark.parametrize(
    "make",
    [
        lambda: NameTableAnalyzer(GBDTConfig(max_train=10**6)),
        lambda: GBDTAnalyzer(GBDTConfig(hops=0, max_iter=20, seed=0)),
    ],
    ids=["name_table", "node_gbdt"],
)
def test_baselines_score_shipped_names_as_vocabulary_names(data, make) -> None:
    graphs, train, test = data
    renamed = [t for t in test if _shipped(t)["alerts"] != t["alerts"]]
    assert len(renamed) >= 10  # the held-out incidents do hold the names
    an = make()
    an.train(train, graphs)
    for inc in renamed:
        g = graphs[inc["graph"]]
        c0, p0, _ = an.scores(g, inc["alerts"])
        c1, p1, _ = an.scores(g, _shipped(inc)["alerts"])
        assert np.array_equal(c0, c1)
        assert np.array_equal(p0, p1), inc["id"] if "id" in inc else inc["root_cause"]
