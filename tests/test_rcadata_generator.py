"""RCA data generator: seeded graphs, the fault catalog, and the alert simulator's knobs."""

from __future__ import annotations

import hashlib
import json
from datetime import datetime

import numpy as np
import pytest

from fleetmind.data.errors import ConfigError
from fleetmind.data.graph import NODE_KINDS
from fleetmind.data.rca_gen.alerts import ZERO_TIME, AlertSimConfig, IncidentSimulator
from fleetmind.data.rca_gen.faults import EFFECT_ALERTS, FAULT_TYPES, HOPS, fault_prior
from fleetmind.data.rca_gen.generate import DatasetSpec, generate_dataset
from fleetmind.data.rca_gen.graphs import GraphGenConfig, generate_graph

T0 = 1_767_225_600.0  # 2026-01-01T00:00:00Z


@pytest.fixture(scope="module")
def graph():
    return generate_graph("t0", 3, n_nodes=400, n_clusters=3)


def _sim_many(graph, n, seed=0, **knobs):
    sim = IncidentSimulator(graph, AlertSimConfig(**knobs))
    rng = np.random.default_rng(seed)
    return [sim.simulate(rng, f"i{k}", t_start=T0 + 7200 * k) for k in range(n)]


def test_graph_is_deterministic_by_seed() -> None:
    a = generate_graph("x", 11, n_nodes=400)
    b = generate_graph("x", 11, n_nodes=400)
    c = generate_graph("x", 12, n_nodes=400)
    assert a.to_json() == b.to_json()
    assert a.to_json() != c.to_json()


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_graph_shape_and_contract(seed: int) -> None:
    cfg = GraphGenConfig(min_nodes=200, max_nodes=1200)
    g = generate_graph(f"s{seed}", seed, cfg)
    kinds = {n.kind for n in g.nodes}
    assert {
        "service",
        "pod",
        "host",
        "gpu",
        "link",
        "cluster",
        "registry",
        "dns",
        "config",
        "storage",
    } <= kinds
    assert kinds <= set(NODE_KINDS)
    n_clusters = sum(n.kind == "cluster" for n in g.nodes)
    assert cfg.min_clusters <= n_clusters <= cfg.max_clusters
    assert 150 <= g.num_nodes <= 1500
    # every node's match labels map back onto the node itself
    for n in g.nodes:
        assert n.match, n.id
        assert g.node_for_alert(n.match) == n.id
    # global infra is shared: clusters depend on it
    assert any(e.dst.startswith("global/") and e.kind == "depends_on" for e in g.edges)


def test_node_budget_is_respected_roughly() -> None:
    sizes = [generate_graph(f"b{i}", i, n_nodes=1000).num_nodes for i in range(4)]
    assert all(700 <= s <= 1300 for s in sizes), sizes


def test_catalog_is_complete_and_consistent() -> None:
    assert len(FAULT_TYPES) >= 12
    assert abs(sum(fault_prior().values()) - 1) < 1e-9
    effects_with_alerts = {e for e, _k in EFFECT_ALERTS}
    reached = {h.new_effect for h in HOPS} | {o[2] for f in FAULT_TYPES.values() for o in f.origins}
    # every effect that can occur raises some alert somewhere
    assert reached <= effects_with_alerts, reached - effects_with_alerts
    for f in FAULT_TYPES.values():
        assert len(f.origins) == len(f.origin_weights)


@pytest.mark.parametrize("fault", sorted(FAULT_TYPES))
def test_every_fault_type_yields_alerts_on_graph_nodes(graph, fault: str) -> None:
    sim = IncidentSimulator(
        graph, AlertSimConfig(noise_min=0, noise_per_node=0.0, second_incident_rate=0.0)
    )
    rng = np.random.default_rng(5)
    for k in range(3):
        inc = sim.simulate(rng, f"{fault}-{k}", t_start=T0, fault=fault, silent=False)
        assert inc["fault_type"] == fault
        root = graph.node(inc["root_cause"])
        assert root.kind in {o[0] for o in FAULT_TYPES[fault].origins}
        nodes = [
            graph.node_for_alert(a["labels"])
            for a in inc["alerts"]
            if a["labels"]["severity"] != "none"
        ]
        assert nodes and None not in nodes
        assert inc["root_cause"] in nodes  # not silent: the root raises something
        assert len(set(nodes) - {inc["root_cause"]}) >= 1  # and it spread


def test_incidents_are_deterministic_by_seed(graph) -> None:
    a = _sim_many(graph, 5, seed=3)
    b = _sim_many(graph, 5, seed=3)
    c = _sim_many(graph, 5, seed=4)
    assert json.dumps(a) == json.dumps(b)
    assert json.dumps(a) != json.dumps(c)


def test_silent_root_share_is_near_the_requested_rate(graph) -> None:
    for rate in (0.0, 0.35):
        incs = _sim_many(graph, 150, seed=1, silent_root_rate=rate)
        share = np.mean([i["silent_root"] for i in incs])
        assert abs(share - rate) < 0.1, (rate, share)
        for inc in incs:
            roots = [
                a for a in inc["alerts"] if graph.node_for_alert(a["labels"]) == inc["root_cause"]
            ]
            if inc["silent_root"]:
                assert (
                    not roots
                    or inc.get("secondary")
                    or all(a["labels"]["alertname"] in _noise_names() for a in roots)
                )


def _noise_names() -> set[str]:
    from fleetmind.data.rca_gen.faults import NOISE_RULES

    return {r.alertname for rules in NOISE_RULES.values() for r in rules}


def test_noise_knob_adds_background_alerts(graph) -> None:
    quiet = _sim_many(graph, 40, seed=2, noise_per_node=0.0, noise_min=0, second_incident_rate=0.0)
    loud = _sim_many(graph, 40, seed=2, noise_per_node=0.03, noise_min=0, second_incident_rate=0.0)
    mean_q = np.mean([len(i["alerts"]) for i in quiet])
    mean_l = np.mean([len(i["alerts"]) for i in loud])
    assert mean_l > mean_q + 0.5 * 0.03 * graph.num_nodes


def test_second_incident_knob(graph) -> None:
    none = _sim_many(graph, 30, seed=4, second_incident_rate=0.0)
    many = _sim_many(graph, 30, seed=4, second_incident_rate=1.0)
    assert all(i["secondary"] is None for i in none)
    assert sum(i["secondary"] is not None for i in many) >= 25
    for i in many:
        if i["secondary"]:
            assert i["secondary"]["root_cause"] in graph.index


def test_for_durations_make_alerts_late(graph) -> None:
    def delay(incs):
        out = []
        for i in incs:
            onset = datetime.fromisoformat(i["window"]["start"].replace("Z", "+00:00")).timestamp()
            out += [
                datetime.fromisoformat(a["startsAt"].replace("Z", "+00:00")).timestamp() - onset
                for a in i["alerts"]
                if graph.node_for_alert(a["labels"]) == i["root_cause"]
            ]
        return np.median(out)

    knobs = {
        "noise_per_node": 0.0,
        "noise_min": 0,
        "second_incident_rate": 0.0,
        "silent_root_rate": 0.0,
    }
    slow = delay(_sim_many(graph, 30, seed=6, for_scale=1.0, **knobs))
    fast = delay(_sim_many(graph, 30, seed=6, for_scale=0.0, **knobs))
    assert slow > fast + 30


def test_root_is_often_not_the_earliest_alert(graph) -> None:
    incs = _sim_many(graph, 60, seed=7)
    first_is_root = 0
    for i in incs:
        live = [a for a in i["alerts"] if a["labels"]["severity"] != "none"]
        first = min(live, key=lambda a: a["startsAt"])
        first_is_root += graph.node_for_alert(first["labels"]) == i["root_cause"]
    assert first_is_root < 30


def test_bad_knobs_are_config_errors() -> None:
    with pytest.raises(ConfigError, match="silent_root_rate"):
        AlertSimConfig(silent_root_rate=0.9).check()
    with pytest.raises(ConfigError, match="noise_per_node"):
        AlertSimConfig(noise_per_node=-1).check()
    with pytest.raises(ConfigError, match="difficulty"):
        AlertSimConfig.preset("impossible")
    assert AlertSimConfig.preset("hard").silent_root_rate > AlertSimConfig().silent_root_rate


def test_firing_alerts_have_zero_end_time(graph) -> None:
    for inc in _sim_many(graph, 10, seed=8):
        for a in inc["alerts"]:
            assert (a["status"] == "firing") == (a["endsAt"] == ZERO_TIME)


SEEDED_DATASET_SHA256 = "d0015b2e1caede3fbc2fe3c07786bc43a977a87760fe08a3080d1a0a3640af37"
"""Graphs and incidents of ``DatasetSpec(n_incidents=40, seed=3, workers=1)``, as of 2026-12-02.

Moving code between modules must not change a byte; a deliberate change of the catalog, the
simulator or the graph generator updates this value and says so in CHANGELOG.md.
"""


def test_seeded_dataset_bytes_are_pinned(tmp_path) -> None:
    generate_dataset(tmp_path, DatasetSpec(n_incidents=40, seed=3, workers=1))
    digest = hashlib.sha256()
    for path in sorted(tmp_path.rglob("*")):
        if path.is_file() and path.name != "meta.json":  # meta.json names the Python version
            digest.update(path.relative_to(tmp_path).as_posix().encode())
            digest.update(path.read_bytes())
    assert digest.hexdigest() == SEEDED_DATASET_SHA256
