"""The shared quiet callee rule: a quiet node several slow callers depend on moves above them."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from fleetmind.data.graph import DependencyGraph, GraphEdge, GraphNode
from fleetmind.data.petshop import load_scenario
from fleetmind.rca.base import RankedCause, RCAResult
from fleetmind.rca.petshop_eval import evaluate_scenario
from fleetmind.rca.propagation import PropagationRanker
from fleetmind.rca.shared_callee import promote_shared_callees, shared_quiet_callees

#   web -> a, web -> b, a -> q, b -> q, a -> r, c -> s
EDGES = [("web", "a"), ("web", "b"), ("a", "q"), ("b", "q"), ("a", "r"), ("c", "s")]


def _graph() -> DependencyGraph:
    names = sorted({n for e in EDGES for n in e})
    return DependencyGraph(
        name="g",
        nodes=[GraphNode(n, "service", None, {"service": n}) for n in names],
        edges=[GraphEdge(s, d, "calls") for s, d in EDGES],
    )


def _alert(node: str, metric: str = "latency", alertname: str = "HighLatency") -> dict:
    return {
        "labels": {"alertname": alertname, "service": node, "metric": metric},
        "annotations": {"z_score": "20"},
        "startsAt": "2026-01-01T00:00:00Z",
    }


def _result(order: list[str]) -> RCAResult:
    causes = [
        RankedCause(n, "service", None, 1.0 - 0.1 * i, None, (n,)) for i, n in enumerate(order)
    ]
    return RCAResult(causes=causes, method="m")


def test_a_quiet_callee_of_two_slow_callers_is_found() -> None:
    g = _graph()
    assert shared_quiet_callees(g, [_alert("a"), _alert("b")]) == {"q": ["a", "b"]}
    # one slow caller is not enough (r has one caller; q then has one too)
    assert shared_quiet_callees(g, [_alert("a")]) == {}
    # q alerting itself is no longer quiet: the ranker already sees it
    assert shared_quiet_callees(g, [_alert("a"), _alert("b"), _alert("q", "cpu", "X")]) == {}
    # only latency counts: a CPU alert on a caller is not a slow call
    assert shared_quiet_callees(g, [_alert("a"), _alert("b", "cpu", "HighCpu")]) == {}
    # a caller whose latency alerts in most windows (drift) does not count
    assert shared_quiet_callees(g, [_alert("a"), _alert("b")], prevalent={("b", "latency")}) == {}
    assert shared_quiet_callees(g, [_alert("a")], min_callers=1) == {"r": ["a"]}
    # every caller must be slow: a third caller of q that is not slow clears it
    g3 = DependencyGraph("g3", g.nodes, [*g.edges, GraphEdge("c", "q", "calls")])
    assert shared_quiet_callees(g3, [_alert("a"), _alert("b")]) == {}
    assert shared_quiet_callees(g3, [_alert("a"), _alert("b"), _alert("c")]) == {
        "q": ["a", "b", "c"]  # s has one caller only
    }
    with pytest.raises(ValueError):
        shared_quiet_callees(g, [], min_callers=0)


def test_the_callee_moves_directly_above_its_best_ranked_caller() -> None:
    g = _graph()
    alerts = [_alert("a"), _alert("b"), _alert("web")]
    res = _result(["web", "b", "s", "a", "q", "r"])
    out = promote_shared_callees(res, g, alerts)
    assert out.ranked_nodes() == ["web", "q", "b", "s", "a", "r"]
    moved = out.causes[1]
    assert moved.score == pytest.approx(0.9) and moved.path == ("q", "b")
    assert [c.score for c in out.causes] == sorted((c.score for c in out.causes), reverse=True)
    assert out.extra["shared_callees"] == {"q": ["a", "b"]}
    # a root ranked above the callers keeps its place
    top = promote_shared_callees(_result(["s", "a", "b", "q"]), g, alerts)
    assert top.ranked_nodes() == ["s", "q", "a", "b"]
    # nothing to move: the same object comes back
    assert promote_shared_callees(res, g, [_alert("a")]) is res
    already = _result(["q", "a", "b"])
    assert promote_shared_callees(already, g, alerts) is already


def _write_network_delay(root: Path) -> None:
    """``web`` calls ``a`` and ``b``, both call ``q``; a delay into ``q`` slows ``a`` and ``b``
    (and ``web``) while ``q``'s own latency stays normal."""
    names = ["web", "a", "b", "q"]
    adj = pd.DataFrame(0, index=names, columns=names)
    for s, d in [("web", "a"), ("web", "b"), ("a", "q"), ("b", "q")]:
        adj.loc[s, d] = 1
    root.mkdir(parents=True)
    adj.to_csv(root / "graph.csv")
    rng = np.random.default_rng(3)

    def frame(rows: int, t0: float, bump: dict[str, float]) -> pd.DataFrame:
        cols = pd.MultiIndex.from_tuples([(n, "latency", "p90") for n in names])
        x = 0.1 + 0.002 * rng.standard_normal((rows, len(names)))
        for i, n in enumerate(names):
            x[4:, i] += bump.get(n, 0.0)
        return pd.DataFrame(
            x, index=pd.Index(t0 + 60.0 * np.arange(rows), name="time"), columns=cols
        )

    (root / "noissue").mkdir()
    frame(200, 1e9, {}).to_csv(root / "noissue" / "metrics.csv")
    d = root / "test" / "issue_0"
    d.mkdir(parents=True)
    frame(10, 2e9, {"web": 0.6, "a": 0.5, "b": 0.5}).to_csv(d / "metrics.csv")
    (d / "target.json").write_text(
        json.dumps({"target": {"node": "web", "metric": "latency"}, "root_cause": {"node": "q"}})
    )


def test_the_scenario_evaluation_reports_the_rule_and_its_ablation(tmp_path: Path) -> None:
    _write_network_delay(tmp_path / "s")
    sc = load_scenario(tmp_path / "s")
    res = evaluate_scenario(
        sc,
        alert_methods={"propagation": PropagationRanker()},
        metric_methods={},
        anchored=(),
        shared_callee=("propagation",),
    )
    row = res["per_incident"][0]
    assert row["ranks"]["propagation:no_shared_callee"] > 1  # q is quiet: the ranker misses it
    assert row["ranks"]["propagation"] == 1
    assert row["shared_callees"]["propagation"] == {"q": ["a", "b"]}
    assert res["evidence"]["shared_callee"] == ["propagation"]
