"""PetShop adapter: graph, alerts, ground truth, robustness, and clear errors for malformed folders."""

from __future__ import annotations

import json
import shutil
from datetime import datetime
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from fleetmind.data.errors import DataError
from fleetmind.data.petshop import (
    DetectorConfig,
    detect_alerts,
    fit_baseline,
    load_scenario,
    read_graph_csv,
    read_metrics_csv,
    read_target,
)

SLICE = Path(__file__).parent / "data" / "petshop_slice"


@pytest.fixture(scope="module")
def scenario():
    return load_scenario(SLICE)


def _ts(s: str) -> float:
    return datetime.fromisoformat(s.replace("Z", "+00:00")).timestamp()


def _frame(
    node_values: dict[tuple[str, str, str], list[float]], times: list[float]
) -> pd.DataFrame:
    cols = pd.MultiIndex.from_tuples(list(node_values), names=["node", "metric", "statistic"])
    return pd.DataFrame(
        np.array(list(node_values.values()), dtype=float).T, index=times, columns=cols
    )


def test_graph_matches_adjacency_and_direction(scenario):
    adj = pd.read_csv(SLICE / "graph.csv", index_col=0)
    g = scenario.graph
    assert g.num_nodes == adj.shape[0]
    assert g.num_edges == int((adj.to_numpy() != 0).sum())
    assert {n.kind for n in g.nodes} == {"service"}
    # caller -> callee is "caller depends on callee"
    assert any(
        e.src == "PetSite" and e.dst == "payforadoption_AWS::ECS::Container" for e in g.edges
    )
    assert all(e.kind == "calls" for e in g.edges)
    assert g.node_for_alert({"service": "PetSite", "alertname": "HighLatency"}) == "PetSite"


def test_ground_truth_loaded_for_every_issue(scenario):
    issues = scenario.issues("all")
    assert [i.id for i in issues] == [
        "train/issue_0",
        "test/issue_0",
        "test/issue_1",
        "test/issue_12",
    ]
    assert [i.id for i in scenario.issues("test")] == [
        "test/issue_0",
        "test/issue_1",
        "test/issue_12",
    ]
    for issue in issues:
        raw = json.loads((issue.path / "target.json").read_text())
        inc = scenario.incident(issue)
        assert inc["root_cause"] == raw["root_cause"]["node"]
        assert inc["fault_type"] == raw["target"]["metric"]
        assert inc["root_cause"] in scenario.graph.index


def test_alerts_are_alertmanager_objects_inside_the_window(scenario):
    for inc in scenario.incidents("all"):
        start, end = _ts(inc["window"]["start"]), _ts(inc["window"]["end"])
        for a in inc["alerts"]:
            assert set(a) >= {
                "status",
                "labels",
                "annotations",
                "startsAt",
                "endsAt",
                "fingerprint",
            }
            assert a["labels"]["alertname"] and a["labels"]["severity"] in ("critical", "warning")
            assert scenario.graph.node_for_alert(a["labels"]) == a["labels"]["service"]
            assert start <= _ts(a["startsAt"]) <= end
            assert float(a["annotations"]["z_score"]) > scenario.config.z_threshold


def test_latency_issue_alerts_on_the_injected_service(scenario):
    inc = scenario.incident(next(i for i in scenario.issues("test") if i.name == "issue_1"))
    fired = {(a["labels"]["service"], a["labels"]["metric"]) for a in inc["alerts"]}
    assert ("lambdastatusupdater_AWS::Lambda::Function", "latency") in fired
    assert ("lambdastatusupdater_AWS::Lambda::Function", "availability") not in fired


def test_detection_rule_direction_run_length_and_nans():
    rng = np.random.default_rng(0)
    normal_t = [1000.0 + 300 * i for i in range(100)]
    normal = _frame(
        {
            ("a", "latency", "Average"): list(1.0 + 0.01 * rng.standard_normal(100)),
            ("a", "availability", "Average"): [100.0] * 100,
            ("b", "latency", "Average"): list(1.0 + 0.01 * rng.standard_normal(100)),
            ("c", "latency", "Average"): list(1.0 + 0.01 * rng.standard_normal(100)),
        },
        normal_t,
    )
    base = fit_baseline(normal)
    # issue window months later (timestamps unrelated to the normal period), given unsorted
    t = [9e8 + 300 * i for i in (3, 0, 1, 2, 4)]
    window = _frame(
        {
            ("a", "latency", "Average"): [2.0, 1.0, 1.0, 2.0, 2.0],  # up for 3 points -> alert
            ("a", "availability", "Average"): [100.0, 100.0, 100.0, 100.0, 100.0],
            ("b", "latency", "Average"): [1.0, 1.0, 3.0, 1.0, np.nan],  # single spike -> no alert
            ("c", "latency", "Average"): [0.5, 1.0, 1.0, 0.5, 0.5],  # latency drop is no symptom
            ("d", "latency", "Average"): [9.0, 9.0, 9.0, 9.0, 9.0],  # no normal data -> unscored
        },
        t,
    ).sort_index()
    alerts, unscored = detect_alerts(window, base, DetectorConfig())
    assert [(a["labels"]["service"], a["labels"]["metric"]) for a in alerts] == [("a", "latency")]
    assert _ts(alerts[0]["startsAt"]) == 9e8 + 600  # first point of the run (sorted rows 2, 3, 4)
    assert alerts[0]["endsAt"] == "0001-01-01T00:00:00Z" and alerts[0]["status"] == "firing"
    assert unscored == ["d/latency/Average"]
    # availability drop of a pinned-at-100 metric alerts (MAD = 0 fallback), NaN gaps break runs
    window2 = window.copy()
    window2[("a", "availability", "Average")] = [100.0, 100.0, 95.0, 94.0, np.nan]
    window2[("b", "latency", "Average")] = [3.0, np.nan, 3.0, np.nan, 3.0]
    alerts2, _ = detect_alerts(window2, base, DetectorConfig())
    fired = {(a["labels"]["service"], a["labels"]["metric"]): a for a in alerts2}
    assert ("a", "availability") in fired and fired[("a", "availability")]["status"] == "resolved"
    assert ("b", "latency") not in fired


def test_nan_heavy_window_does_not_crash(scenario, tmp_path):
    src = scenario.issues("test")[0].path
    df = read_metrics_csv(src / "metrics.csv")
    rng = np.random.default_rng(1)
    mask = rng.random(df.shape) < 0.6
    noisy = df.mask(mask)
    noisy[noisy.columns[0]] = np.nan  # an all-NaN column
    alerts, _ = detect_alerts(noisy, scenario.baseline, scenario.config)
    for a in alerts:
        assert np.isfinite(float(a["annotations"]["z_score"]))


def _copy_slice(tmp_path: Path) -> Path:
    dst = tmp_path / "scenario"
    shutil.copytree(SLICE, dst)
    return dst


def test_missing_graph_csv_is_named(tmp_path):
    d = _copy_slice(tmp_path)
    (d / "graph.csv").unlink()
    with pytest.raises(DataError, match="graph.csv"):
        load_scenario(d)


def test_missing_target_json_is_named(tmp_path):
    d = _copy_slice(tmp_path)
    (d / "test" / "issue_1" / "target.json").unlink()
    sc = load_scenario(d)
    with pytest.raises(DataError, match=r"issue_1.*target.json|target.json.*issue_1"):
        list(sc.incidents("test"))


def test_garbage_csv_is_a_data_error(tmp_path):
    d = _copy_slice(tmp_path)
    (d / "noissue" / "metrics.csv").write_bytes(b'\x00\x01garbage,,\n"unterminated\n')
    with pytest.raises(DataError, match="metrics.csv"):
        load_scenario(d)
    bad = tmp_path / "metrics.csv"
    bad.write_text("a,b,c\nx,y,z\nnot-a-time,1,2\n")
    with pytest.raises(DataError, match="metrics.csv"):
        read_metrics_csv(bad)


def test_malformed_graph_and_target(tmp_path):
    g = tmp_path / "graph.csv"
    g.write_text(",a,b\na,0,1\n")
    with pytest.raises(DataError, match="square"):
        read_graph_csv(g)
    g.write_text(",a,b\na,0,x\nb,0,0\n")
    with pytest.raises(DataError, match="not a number"):
        read_graph_csv(g)
    t = tmp_path / "target.json"
    t.write_text("{not json")
    with pytest.raises(DataError, match="not valid JSON"):
        read_target(t)
    t.write_text(json.dumps({"target": {"node": "a"}}))
    with pytest.raises(DataError, match="root_cause"):
        read_target(t)


def test_root_cause_outside_graph_is_named(tmp_path):
    d = _copy_slice(tmp_path)
    p = d / "test" / "issue_0" / "target.json"
    obj = json.loads(p.read_text())
    obj["root_cause"]["node"] = "no-such-service"
    p.write_text(json.dumps(obj))
    sc = load_scenario(d)
    with pytest.raises(DataError, match="no-such-service"):
        sc.incident(next(i for i in sc.issues("test") if i.name == "issue_0"))


def test_unknown_split_and_missing_folder(tmp_path):
    with pytest.raises(DataError, match="not found"):
        load_scenario(tmp_path / "nope")
    sc = load_scenario(SLICE)
    with pytest.raises(DataError, match="split"):
        sc.issues("val")


def test_timestamps_sorted_and_deduplicated(tmp_path):
    p = tmp_path / "metrics.csv"
    p.write_text(
        "microservice,a,a\nmetric,latency,availability\nstatistic,Average,Average\n"
        "unix_timestamp,,\n600,1.0,100\n0,2.0,100\n300,3.0,\n300,4.0,99\n"
    )
    df = read_metrics_csv(p)
    assert list(df.index) == [0.0, 300.0, 600.0]
    assert df[("a", "latency", "Average")].tolist() == [2.0, 3.0, 1.0]
