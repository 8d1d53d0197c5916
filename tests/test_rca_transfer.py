"""Evidence that transfers across real systems: role-map overrides, pre-onset scoring, drift
down-weighting, symptom anchoring and root-clustered bootstrap intervals.

Small hand-made scenarios throughout: each case is built so that the rule under test decides the
outcome (without the rule, the assertion fails).
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from fleetmind.cli import main
from fleetmind.data.errors import DataError
from fleetmind.data.graph import DependencyGraph, GraphEdge, GraphNode
from fleetmind.data.metric_roles import RoleMap, load_role_map
from fleetmind.data.petshop import DetectorConfig, detect_alerts, fit_baseline, load_scenario
from fleetmind.rca.anchoring import anchor_result, joined_to_symptom, named_symptom, symptom_node
from fleetmind.rca.base import RankedCause, RCAResult
from fleetmind.rca.drift import alert_prevalence, downweight_alerts
from fleetmind.rca.fit_eval import bootstrap_intervals
from fleetmind.serving.settings import Settings


def _frame(values: dict[tuple[str, str, str], list[float]], times: list[float]) -> pd.DataFrame:
    cols = pd.MultiIndex.from_tuples(list(values), names=["node", "metric", "statistic"])
    arr = np.array(list(values.values()), dtype=float).T
    return pd.DataFrame(arr, index=pd.Index(times, name="time"), columns=cols)


def _normal(n: int = 100, seed: int = 0, cols: tuple[str, ...] = ("a", "b")) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    return _frame(
        {(c, "latency", "Average"): list(1.0 + 0.01 * rng.standard_normal(n)) for c in cols},
        [1000.0 + 60 * i for i in range(n)],
    )


def _fired(alerts: list[dict]) -> set[tuple[str, str]]:
    return {(a["labels"]["service"], a["labels"]["metric"]) for a in alerts}


# ---------------------------------------------------------------------------- role map
def _write_scenario(
    root: Path, metric: str, window_values: list[float], step: float = 60.0
) -> Path:
    """Two services, ``a`` calls ``b``; one metric per service; one test issue rooted at ``b``."""
    rng = np.random.default_rng(1)
    root.mkdir(parents=True)
    pd.DataFrame([[0, 1], [0, 0]], index=["a", "b"], columns=["a", "b"]).to_csv(root / "graph.csv")
    normal = _frame(
        {(n, metric, "Average"): list(50.0 + 0.5 * rng.standard_normal(120)) for n in "ab"},
        [1e9 + step * i for i in range(120)],
    )
    (root / "noissue").mkdir()
    normal.to_csv(root / "noissue" / "metrics.csv")
    t = [2e9 + step * i for i in range(len(window_values))]
    win = _frame(
        {("a", metric, "Average"): [50.0] * len(t), ("b", metric, "Average"): window_values}, t
    )
    d = root / "test" / "issue_0"
    d.mkdir(parents=True)
    win.to_csv(d / "metrics.csv")
    (d / "target.json").write_text(
        json.dumps({"target": {"node": "a", "metric": metric}, "root_cause": {"node": "b"}})
    )
    return root


def test_role_map_override_decides_the_direction(tmp_path: Path) -> None:
    # "gizmo" is not a known word: role other, both directions alert. A drop of it alerts by name;
    # declared a CPU metric, only rises are symptoms and the drop raises nothing.
    drop = [50.0, 50.0, 20.0, 20.0, 20.0, 20.0]
    scen = _write_scenario(tmp_path / "s", "gizmo", drop)
    by_name = load_scenario(scen)
    assert ("b", "gizmo") in _fired(next(by_name.incidents())["alerts"])
    assert by_name.roles() == {"gizmo": {"role": "other", "source": "name"}}
    (scen / "roles.yaml").write_text("gizmo: cpu\n")
    overridden = load_scenario(scen)
    assert next(overridden.incidents())["alerts"] == []
    assert overridden.roles() == {"gizmo": {"role": "saturation", "source": "override"}}
    # an explicit file wins over the folder's roles.yaml
    other = tmp_path / "success.yaml"
    other.write_text("gizmo: success\n")
    explicit = load_scenario(scen, roles=other)
    alerts = next(explicit.incidents())["alerts"]
    assert (
        _fired(alerts) == {("b", "gizmo")} and alerts[0]["labels"]["alertname"] == "HighErrorRate"
    )


def test_role_map_rejects_unknown_roles(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    bad = tmp_path / "roles.yaml"
    bad.write_text("gizmo: temperature\n")
    with pytest.raises(DataError, match="unknown role 'temperature'"):
        load_role_map(bad)
    bad.write_text("- just\n- a list\n")
    with pytest.raises(DataError, match="mapping"):
        load_role_map(bad)
    with pytest.raises(ValueError):
        RoleMap({"x": "speed"})
    scen = _write_scenario(tmp_path / "s", "latency", [50.0] * 6)
    rc = main(
        ["rca", "petshop", "--scenario", str(scen), "--roles", str(bad), "--methods", "propagation"]
    )
    assert rc == 2
    assert "fleetmind: error:" in capsys.readouterr().err


@pytest.mark.parametrize("step", [1.0, 60.0, 300.0])
def test_reader_takes_row_intervals_from_one_second_to_five_minutes(
    tmp_path: Path, step: float
) -> None:
    scen = _write_scenario(tmp_path / "s", "latency", [50.0, 50.0, 90.0, 90.0, 90.0], step=step)
    inc = next(load_scenario(scen).incidents())
    assert inc["window"]["step_s"] == step and ("b", "latency") in _fired(inc["alerts"])


@pytest.mark.parametrize(
    ("values", "step", "problem"),
    [([50.0, 90.0, 90.0, 90.0], 60.0, "at least 5"), ([50.0] * 6, 600.0, "1 s to 300 s")],
)
def test_reader_rejects_short_windows_and_coarse_rows(
    tmp_path: Path, values: list[float], step: float, problem: str
) -> None:
    scen = _write_scenario(tmp_path / "s", "latency", values, step=step)
    with pytest.raises(DataError, match=problem):
        next(load_scenario(scen).incidents())


# ---------------------------------------------------------------------------- pre-onset scoring
def test_drift_since_the_normal_period_raises_no_alert_but_a_fault_on_top_does() -> None:
    base = fit_baseline(_normal())
    t = [9e8 + 60 * i for i in range(8)]
    window = _frame(
        {
            ("a", "latency", "Average"): [1.5] * 8,  # drifted by 50 scales since the normal period
            ("b", "latency", "Average"): [1.5, 1.5, 1.5, 2.5, 2.5, 2.5, 2.5, 2.5],  # drift + fault
        },
        t,
    )
    alerts, _ = detect_alerts(window, base, DetectorConfig())
    assert _fired(alerts) == {("b", "latency")}
    ann = alerts[0]["annotations"]
    # the change is measured from the pre-onset level, not from the stale normal median
    assert float(ann["baseline"]) == pytest.approx(1.5) and float(ann["delta"]) == pytest.approx(
        1.0
    )
    assert float(ann["normal_median"]) == pytest.approx(1.0, abs=0.01)
    # against the normal period only, the drift alerts too, from the first row
    old, _ = detect_alerts(window, base, DetectorConfig(pre_onset=False))
    assert _fired(old) == {("a", "latency"), ("b", "latency")}
    assert min(a["startsAt"] for a in old) < alerts[0]["startsAt"]


def test_pre_onset_scoring_needs_both_references() -> None:
    # a fault whose window sits at the normal level before the onset keeps its z-score; a column
    # that is below normal before and back at normal after moved 30 scales toward the pre-onset
    # reference but not against the normal period: no alert
    base = fit_baseline(_normal())
    t = [9e8 + 60 * i for i in range(6)]
    window = _frame(
        {
            ("a", "latency", "Average"): [1.0, 1.0, 2.0, 2.0, 2.0, 2.0],
            ("b", "latency", "Average"): [0.7, 0.7, 1.0, 1.0, 1.0, 1.0],
        },
        t,
    )
    alerts, _ = detect_alerts(window, base)
    old, _ = detect_alerts(window, base, DetectorConfig(pre_onset=False))
    assert _fired(alerts) == {("a", "latency")}
    assert alerts[0]["annotations"]["z_score"] == old[0]["annotations"]["z_score"]


# ---------------------------------------------------------------------------- drift down-weighting
def _alert(service: str, metric: str = "latency", z: float = 40.0) -> dict:
    return {"labels": {"service": service, "metric": metric}, "annotations": {"z_score": str(z)}}


def test_pairs_alerting_in_most_windows_are_down_weighted() -> None:
    windows = [[_alert("db", z=40.0), _alert(f"svc{i}")] for i in range(9)] + [[_alert("web")]]
    prev = alert_prevalence(windows)
    assert prev[("db", "latency")] == pytest.approx(0.9) and prev[("web", "latency")] == 0.1
    out = downweight_alerts(windows[0], prev, len(windows))
    by = {a["labels"]["service"]: a for a in out}
    # share 0.9 -> weight 0.2: z 40 -> 8 (kept, scaled); the once-seen service is untouched
    assert float(by["db"]["annotations"]["z_score"]) == pytest.approx(8.0)
    assert by["db"]["annotations"]["prevalence"] == "0.9"
    assert by["svc0"]["annotations"] == {"z_score": "40.0"}
    # a weak prevalent alert falls to the threshold and is dropped
    weak = downweight_alerts([_alert("db", z=20.0)], prev, len(windows))
    assert weak == []
    # the inputs are not modified; too few windows change nothing
    assert windows[0][0]["annotations"] == {"z_score": "40.0"}
    few = alert_prevalence(windows[:5])
    assert downweight_alerts(windows[0], few, 5) == windows[0]


# ---------------------------------------------------------------------------- anchoring
def _graph() -> DependencyGraph:
    # web depends on api and cache; api on db; batch (unrelated to web) on db2
    nodes = [
        GraphNode(n, "service", None, {"service": n})
        for n in ("web", "api", "db", "cache", "batch", "db2")
    ]
    edges = [
        GraphEdge("web", "api", "calls"),
        GraphEdge("web", "cache", "calls"),
        GraphEdge("api", "db", "calls"),
        GraphEdge("batch", "db2", "calls"),
    ]
    return DependencyGraph("shop", nodes, edges)


def test_join_needs_an_anomalous_path() -> None:
    g = _graph()
    assert joined_to_symptom(g, {"api"}, "web") == {"web", "api", "cache", "db"}
    # api quiet: the path to db is broken; db is no longer joined
    assert joined_to_symptom(g, set(), "web") == {"web", "api", "cache"}
    assert joined_to_symptom(g, {"api"}, "nowhere") == set()


def test_anchoring_reorders_unjoined_candidates() -> None:
    g = _graph()
    alerts = [_alert("web"), _alert("api"), _alert("db2", z=90.0)]
    res = RCAResult(
        causes=[
            RankedCause("db2", "service", None, 0.5, None, ("db2",)),
            RankedCause("db", "service", None, 0.3, None, ("db",)),
            RankedCause("api", "service", None, 0.1, None, ("api",)),
        ],
        method="m",
    )
    out = anchor_result(res, g, alerts, "web")
    assert out.ranked_nodes() == ["db", "api", "db2"]
    assert out.causes[2].score == pytest.approx(0.05) and out.extra["anchor"]["joined"] == 2
    # log-scale scores (logits) get log(weight) added instead
    logits = replace(res, causes=[replace(c, score=c.score - 1.0) for c in res.causes])
    lo = anchor_result(logits, g, alerts, "web")
    assert lo.causes[-1].node == "db2" and lo.causes[-1].score == pytest.approx(-0.5 + np.log(0.1))
    # no symptom: unchanged
    assert anchor_result(res, g, alerts, None) is res


def test_symptom_is_the_slo_alert_else_the_most_severe() -> None:
    g = _graph()
    alerts = [
        {"labels": {"service": "db", "alertname": "HighLatency", "severity": "critical"}},
        {"labels": {"service": "web", "alertname": "CheckoutSLOBurn", "severity": "warning"}},
        {"labels": {"service": "cache", "alertname": "HighLatency", "severity": "warning"}},
    ]
    assert symptom_node(g, alerts, {"CheckoutSLOBurn"}) == "web"
    assert symptom_node(g, alerts) == "db"
    assert symptom_node(g, [{"labels": {"service": "elsewhere"}}]) is None


def test_the_service_anchors_only_on_a_named_slo_alert() -> None:
    """The incident worker's symptom (:func:`named_symptom`) is an alert named in
    ``FLEETMIND_SLO_ALERTS``; without one the ranking stays the model's (no severity fallback)."""
    g = _graph()
    alerts = [
        {"labels": {"service": "db", "alertname": "HighLatency", "severity": "critical"}},
        {"labels": {"service": "elsewhere", "alertname": "CheckoutSLOBurn"}},
        {"labels": {"service": "web", "alertname": "CheckoutSLOBurn", "severity": "warning"}},
    ]
    assert named_symptom(g, alerts, {"CheckoutSLOBurn"}) == "web"  # the first one on the graph
    assert named_symptom(g, alerts, frozenset()) is None
    assert named_symptom(g, alerts[:1], {"CheckoutSLOBurn"}) is None


def test_slo_alerts_setting_parses_names() -> None:
    s = Settings(slo_alerts=" CheckoutSLOBurn, ApiAvailability ,,")
    assert s.slo_alert_names() == frozenset({"CheckoutSLOBurn", "ApiAvailability"})
    assert Settings().slo_alert_names() == frozenset()


# ---------------------------------------------------------------------------- clustered intervals
def test_bootstrap_clusters_by_root() -> None:
    # 8 hits all on one root, 8 misses spread over 8 roots: resampling incidents treats the hits as
    # 8 independent draws; resampling roots sees one, so its interval is much wider
    rows = [{"root_cause": "x", "ranks": {"m": 1}} for _ in range(8)]
    rows += [{"root_cause": f"r{i}", "ranks": {"m": 9}} for i in range(8)]
    clustered = bootstrap_intervals(rows, ["m"], resamples=2000, seed=0)
    plain = bootstrap_intervals(rows, ["m"], resamples=2000, seed=0, cluster_key=None)
    assert clustered["_meta"]["n_clusters"] == 9 and plain["_meta"]["clustered_by"] is None
    width = lambda iv: iv["m"]["ac@1"][1] - iv["m"]["ac@1"][0]  # noqa: E731
    assert width(clustered) > 1.3 * width(plain)
    assert clustered["m"]["ac@1"][0] == 0.0  # a resample without root x has no hit at all
