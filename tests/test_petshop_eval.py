"""PetShop evaluation: metric computation, the propagation ranker, the metric baselines, the CLI."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from fleetmind.data.errors import NotAvailableError
from fleetmind.data.graph import DependencyGraph, GraphEdge, GraphNode
from fleetmind.data.petshop import load_scenario, read_metrics_csv, read_target
from fleetmind.rca.petshop_baselines import (
    BaroBaseline,
    NSigmaBaseline,
    ScalerBaselineConfig,
    TraversalBaseline,
    rcaeval_frame,
)
from fleetmind.rca.petshop_eval import evaluate_scenario, rank_of, summarize
from fleetmind.rca.propagation import PropagationRanker

SLICE = Path(__file__).parent / "data" / "petshop_slice"


def _chain() -> DependencyGraph:
    names = ["front", "mid", "db", "cache"]
    nodes = [GraphNode(n, "service", None, {"service": n}) for n in names]
    edges = [
        GraphEdge("front", "mid", "calls"),
        GraphEdge("mid", "db", "calls"),
        GraphEdge("mid", "cache", "calls"),
    ]
    return DependencyGraph("chain", nodes, edges)


def _alert(node: str, z: float, delta: float, start: str, metric: str = "latency") -> dict:
    return {
        "labels": {
            "alertname": "HighLatency",
            "service": node,
            "metric": metric,
            "severity": "warning",
        },
        "annotations": {"z_score": str(z), "delta": str(delta)},
        "startsAt": start,
    }


def test_summarize_hand_computed():
    m = summarize([1, 2, None, 4, 6], [1.0, 3.0, 2.0, 2.0, 2.0])
    assert m["ac@1"] == pytest.approx(1 / 5)
    assert m["ac@3"] == pytest.approx(2 / 5)
    assert m["ac@5"] == pytest.approx(3 / 5)
    assert m["avg@5"] == pytest.approx((1 + 2 + 2 + 3 + 3) / 25)
    assert m["mrr"] == pytest.approx((1 + 1 / 2 + 1 / 4 + 1 / 6) / 5)
    assert m["ms_per_incident"] == pytest.approx(2.0)
    assert rank_of(["a", "b"], "b") == 2 and rank_of(["a"], "z") is None


def test_propagation_picks_the_deepest_explaining_alert():
    g = _chain()
    alerts = [
        _alert("front", 30, 0.50, "2024-01-01T00:05:00Z"),
        _alert("mid", 40, 0.48, "2024-01-01T00:05:00Z"),
        _alert("db", 50, 0.45, "2024-01-01T00:00:00Z"),
    ]
    res = PropagationRanker().find_root_causes(g, alerts)
    assert res.ranked_nodes()[0] == "db"
    assert res.causes[0].path == ("db", "mid", "front")
    assert res.ranked_nodes()[-1] in (
        "cache",
    )  # the silent node with no alerting dependent is last


def test_propagation_explain_away_needs_magnitude_and_order():
    g = _chain()
    # db changes far less than mid: it cannot explain mid; mid is the cause
    small = [
        _alert("front", 30, 0.50, "2024-01-01T00:05:00Z"),
        _alert("mid", 40, 0.48, "2024-01-01T00:05:00Z"),
        _alert("db", 8, 0.002, "2024-01-01T00:00:00Z"),
    ]
    assert PropagationRanker().find_root_causes(g, small).ranked_nodes()[0] == "mid"
    # db starts long after mid: a later alert cannot be the cause
    late = [
        _alert("front", 30, 0.50, "2024-01-01T00:05:00Z"),
        _alert("mid", 40, 0.48, "2024-01-01T00:05:00Z"),
        _alert("db", 50, 0.45, "2024-01-01T01:00:00Z"),
    ]
    assert PropagationRanker().find_root_causes(g, late).ranked_nodes()[0] == "mid"


def test_traversal_returns_anomalous_roots_only():
    sc = load_scenario(SLICE)
    issue = next(i for i in sc.issues("test") if i.name == "issue_1")
    window = read_metrics_csv(issue.path / "metrics.csv")
    target = read_target(issue.path / "target.json")["target"]
    res = TraversalBaseline().rank_metrics(sc.graph, sc.normal, window, target)
    nodes = res.ranked_nodes()
    assert len(nodes) <= res.extra["n_anomalous"]
    scores = [c.score for c in res.causes]
    assert scores == sorted(scores, reverse=True)
    # every returned root has no anomalous callee among the returned nodes
    for e in sc.graph.edges:
        assert not (e.src in nodes and e.dst in nodes)
    with pytest.raises(NotAvailableError, match="rank_metrics"):
        TraversalBaseline().find_root_causes(sc.graph, [])


def test_builtin_baro_and_nsigma_follow_their_formulas():
    rng = np.random.default_rng(0)
    cols = pd.MultiIndex.from_tuples([("x", "latency", "Average"), ("y", "latency", "Average")])
    normal = pd.DataFrame(rng.standard_normal((50, 2)), columns=cols, index=np.arange(50) * 300.0)
    window = pd.DataFrame(
        [[0.1, 0.3], [0.2, 9.0], [0.0, 0.2]], columns=cols, index=1e6 + np.arange(3) * 300.0
    )
    data, inject, names = rcaeval_frame(normal, window)
    assert (
        inject == 1e6 and data["time"].is_monotonic_increasing and names["y_latency_Average"] == "y"
    )
    g = DependencyGraph("g", [GraphNode("x", "service"), GraphNode("y", "service")], [])
    for cls in (BaroBaseline, NSigmaBaseline):
        res = cls(ScalerBaselineConfig(backend="builtin")).rank_metrics(
            g, normal, window, {"node": "x"}
        )
        assert res.ranked_nodes() == ["y", "x"] and res.extra["backend"] == "builtin"


def test_evaluate_scenario_shape_and_consistency():
    sc = load_scenario(SLICE)
    res = evaluate_scenario(
        sc,
        "all",
        alert_methods={"propagation": PropagationRanker()},
        metric_methods={"petshop_traversal": TraversalBaseline()},
    )
    assert res["n_incidents"] == 4
    assert set(res["by_split"]) == {"train", "test", "all"}
    for name, m in res["methods"].items():
        assert set(m) >= {"ac@1", "ac@3", "ac@5", "avg@5", "mrr", "ms_per_incident"}
        ranks = [row["ranks"][name] for row in res["per_incident"]]
        assert m == pytest.approx({**summarize(ranks), "ms_per_incident": m["ms_per_incident"]})
    assert res["by_split"]["test"]["n_incidents"] == 3


def test_cli_writes_evaluate_shaped_json(tmp_path, capsys):
    from fleetmind.cli import main

    out = tmp_path / "r.json"
    rc = main(
        [
            "rca",
            "petshop",
            "--scenario",
            str(SLICE),
            "--split",
            "test",
            "--methods",
            "propagation",
            "petshop_traversal",
            "--backend",
            "builtin",
            "--json",
            str(out),
        ]
    )
    assert rc == 0
    res = json.loads(out.read_text())
    assert res["n_incidents"] == 3 and res["split"] == "test"
    assert set(res["methods"]) == {"propagation", "petshop_traversal"}
    assert (
        main(
            [
                "rca",
                "petshop",
                "--scenario",
                str(SLICE),
                "--methods",
                "propagation",
                "--json",
                str(out),
            ]
        )
        == 0
    )
    assert set(json.loads(out.read_text())["methods"]) == {"propagation"}
    assert "petshop_slice / test: 3 issues" in capsys.readouterr().out
    assert main(["rca", "petshop", "--scenario", str(tmp_path / "missing")]) == 2
    assert "fleetmind: error:" in capsys.readouterr().err
