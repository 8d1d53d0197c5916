"""Library entry points: what they do with empty evidence and arguments out of range.

* ``GATAnalyzer.find_root_causes`` / ``find_root_causes_many`` give no causes when no alert maps
  onto a graph node (as the service answers such an incident, ``docs/gat.md``), keeping
  ``extra["unmapped_alerts"]``;
* ``generate_graph`` refuses an ``n_nodes`` outside ``[MIN_NODES, MAX_NODES]`` and an
  ``n_clusters`` outside ``[1, len(REGIONS)]`` (0 used to mean "draw it", a negative count or
  one above the regions failed with numpy's message);
* the placement envs and ``load_openb_fleet`` refuse out-of-range arguments at construction with
  a one-line ``ConfigError`` (not numpy's error at ``reset``).
"""

from __future__ import annotations

import os

import numpy as np
import pytest

os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")

from fleetmind.data.errors import ConfigError  # noqa: E402
from fleetmind.data.rca_gen.alerts import AlertSimConfig, IncidentSimulator  # noqa: E402
from fleetmind.data.rca_gen.graphs import (  # noqa: E402
    MAX_NODES,
    MIN_NODES,
    REGIONS,
    GraphGenConfig,
    generate_graph,
)

FOREIGN = {
    "status": "firing",
    "labels": {"alertname": "KubeNodeNotReady", "cluster": "elsewhere", "node": "x"},
    "annotations": {},
    "startsAt": "2025-12-16T00:00:00Z",
}


@pytest.fixture(scope="module")
def gat():  # noqa: ANN201 - GATAnalyzer
    from fleetmind.rca.gat_analyzer import GATAnalyzer

    return GATAnalyzer.load(None)


@pytest.fixture(scope="module")
def incident():  # noqa: ANN201 - (DependencyGraph, incident dict)
    rng = np.random.default_rng(20261206)
    graph = generate_graph("lib-inputs", rng, GraphGenConfig(), n_nodes=120)
    return graph, IncidentSimulator(graph, AlertSimConfig()).simulate(rng, "inc-0")


@pytest.mark.parametrize(("alerts", "unmapped"), [([], 0), ([FOREIGN], 1), ([FOREIGN, FOREIGN], 2)])
def test_gat_no_mapped_alert_gives_no_causes(gat, incident, alerts, unmapped) -> None:  # noqa: ANN001
    graph, _ = incident
    res = gat.find_root_causes(graph, alerts, top_k=3)
    assert res.causes == []
    assert res.extra["unmapped_alerts"] == unmapped
    assert res.method == "gat"


def test_gat_many_matches_single_with_unmapped_items(gat, incident) -> None:  # noqa: ANN001
    graph, inc = incident
    items = [
        (graph, [], 3),
        (graph, inc["alerts"], 3),
        (graph, [FOREIGN], None),
        (graph, [*inc["alerts"], FOREIGN], 5),
    ]
    many = gat.find_root_causes_many(items)
    single = [gat.find_root_causes(g, a, top_k=k) for g, a, k in items]
    assert len(many) == len(items)
    for m, s in zip(many, single, strict=True):
        assert [(c.node, c.score, c.fault_type, c.path) for c in m.causes] == [
            (c.node, c.score, c.fault_type, c.path) for c in s.causes
        ]
        assert m.extra["unmapped_alerts"] == s.extra["unmapped_alerts"]
    assert many[0].causes == [] and many[2].causes == []
    # an incident with mapped alerts is still ranked (plus one unmapped alert, counted)
    assert len(many[1].causes) == 3 and len(many[3].causes) == 5
    assert many[3].extra["unmapped_alerts"] == 1
    assert [c.node for c in many[1].causes] == [c.node for c in many[3].causes][:3]


@pytest.mark.parametrize(
    "kw",
    [
        {"n_nodes": 0},
        {"n_nodes": -3},
        {"n_nodes": MIN_NODES - 1},
        {"n_nodes": MAX_NODES + 1},
        {"n_nodes": 300.0},
        {"n_nodes": True},
        {"n_clusters": 0},
        {"n_clusters": -1},
        {"n_clusters": len(REGIONS) + 1},
        {"n_clusters": 2.0},
    ],
)
def test_generate_graph_refuses_out_of_range_arguments(kw: dict) -> None:
    args = {"n_nodes": 300, **kw}
    with pytest.raises(ConfigError) as err:
        generate_graph("x", 0, GraphGenConfig(), **args)
    msg = str(err.value)
    assert "\n" not in msg and next(iter(kw)) in msg


def test_generate_graph_accepts_range_edges() -> None:
    g = generate_graph("x", 0, GraphGenConfig(), n_nodes=MIN_NODES, n_clusters=1)
    assert len({n.cluster for n in g.nodes if n.cluster}) == 1
    g = generate_graph("x", 0, GraphGenConfig(), n_nodes=400, n_clusters=len(REGIONS))
    assert len({n.cluster for n in g.nodes if n.cluster}) == len(REGIONS)
    # np.integer counts as an int (a budget drawn with numpy)
    a = generate_graph("x", 5, GraphGenConfig(), n_nodes=np.int64(300), n_clusters=np.int64(2))
    b = generate_graph("x", 5, GraphGenConfig(), n_nodes=300, n_clusters=2)
    assert a.to_json() == b.to_json()


G = "fleetmind/GpuPlacement-v0"
M = "fleetmind/MultiClusterPlacement-v0"


@pytest.mark.parametrize(
    ("env_id", "kw", "word"),
    [
        (G, {"scale": 0.0}, "scale"),
        (G, {"scale": -1.0}, "scale"),
        (G, {"scale": float("nan")}, "scale"),
        (G, {"scale": float("inf")}, "scale"),
        (G, {"shaping": float("nan")}, "shaping"),
        (G, {"shaping": float("-inf")}, "shaping"),
        (G, {"workload_seeds": [3, -1]}, "workload_seeds"),
        (G, {"workload_seeds": [1.5, 2]}, "workload_seeds"),  # int() made it 1
        (G, {"workload_seeds": ["a"]}, "workload_seeds"),
        (M, {"node_fraction": 0.0}, "node_fraction"),
        (M, {"node_fraction": -0.5}, "node_fraction"),
        (M, {"node_fraction": 2.0}, "node_fraction"),
        (M, {"node_fraction": float("nan")}, "node_fraction"),
    ],
)
def test_env_constructor_refuses_bad_arguments(env_id: str, kw: dict, word: str) -> None:
    import gymnasium as gym

    import fleetmind.envs  # noqa: F401 - registers the ids

    extra = {"n_jobs": 100} if env_id == M else {"traces": "default"}
    with pytest.raises(ConfigError) as err:
        gym.make(env_id, **extra, **kw)
    msg = str(err.value)
    assert "\n" not in msg and word in msg


@pytest.mark.parametrize("seed", [-1, -7, 1.5, True])
def test_load_openb_fleet_refuses_bad_seed(seed: object) -> None:
    from fleetmind.data.fleet_io import load_openb_fleet

    with pytest.raises(ConfigError, match="seed must be an integer >= 0"):
        load_openb_fleet(n_clusters=3, seed=seed)  # type: ignore[arg-type]


@pytest.mark.parametrize("seed", [-1, 1.5, True, "3"])
def test_generate_graph_refuses_a_bad_seed(seed: object) -> None:
    """numpy's ``default_rng(-1)`` raised a bare ``ValueError`` from deep inside; 1.5 and "3"
    a ``TypeError``."""
    with pytest.raises(ConfigError, match="seed must be an integer >= 0"):
        generate_graph("x", seed, GraphGenConfig(), n_nodes=300)  # type: ignore[arg-type]


@pytest.mark.parametrize("nodes", ["10", "200001"])
def test_gat_speed_refuses_a_budget_the_generator_refuses(
    nodes: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--nodes`` is checked by argparse, before the model is loaded (it used to pass 1 to
    200,000+ and fail in the generator after the load)."""
    from benchmarks.rca import gat_speed

    with pytest.raises(SystemExit) as err:
        gat_speed.main(["--nodes", nodes])
    assert err.value.code == 2
    assert "--nodes: must be 50-200000" in capsys.readouterr().err
