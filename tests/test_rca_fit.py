"""``fleetmind rca fit``: reads only the graph and the normal period, works on any system of the layout.

Small settings throughout (a few hundred synthetic incidents, one or two epochs): these tests check
behaviour (what is read, what is written, that ranks come out and do not depend on node names), not
accuracy; the accuracy on PetShop is a benchmark (``benchmarks/results/rca/petshop_fit_low_traffic.json``).
"""

from __future__ import annotations

import json
import shutil
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from fleetmind.cli import main
from fleetmind.data.metric_roles import metric_alertname, metric_direction
from fleetmind.data.petshop import load_scenario, read_graph_csv
from fleetmind.data.synth_incidents import SynthConfig, SystemModel
from fleetmind.data.synth_system import make_system
from fleetmind.rca.fit_eval import bootstrap_intervals
from fleetmind.rca.fit_model import FittedGATAnalyzer, fit_features, is_fit_artifact
from fleetmind.training.rca_fit import FitArgs, fit, read_system

SLICE = Path(__file__).parent / "data" / "petshop_slice"


class _OpenLog:
    """Records every file the interpreter opens while ``active`` (a ``sys.addaudithook`` hook: it
    sees ``open()``, ``io.open``, ``os.open`` and what pandas opens through them)."""

    def __init__(self) -> None:
        self.active = False
        self.paths: list[str] = []

    def __call__(self, event: str, args: tuple) -> None:
        if self.active and event == "open" and args and isinstance(args[0], (str, bytes, Path)):
            self.paths.append(str(args[0] if not isinstance(args[0], bytes) else args[0].decode()))


_LOG = _OpenLog()
sys.addaudithook(_LOG)


@pytest.fixture()
def small_system(tmp_path: Path) -> tuple[Path, dict]:
    info = make_system(tmp_path / "shop", n_services=24, normal_rows=240, issues=3, seed=3)
    return tmp_path / "shop", info


@pytest.mark.parametrize(
    ("name", "direction", "alertname"),
    [
        ("latency", "up", "HighLatency"),
        ("latency_p90", "up", "HighLatency"),
        ("p99LatencyMs", "up", "HighLatency"),
        ("cpu_usage", "up", "HighSaturation"),
        ("MemoryUtilization", "up", "HighSaturation"),
        ("request_count", "both", "TrafficAnomaly"),
        ("success_rate", "down", "HighErrorRate"),
        ("availability", "down", "HighErrorRate"),
        ("error_count", "up", "HighErrorRate"),
        ("http_5xx_total", "up", "HighErrorRate"),
        ("gizmo_widgets", "both", "Gizmo_widgetsAnomaly"),
    ],
)
def test_metric_names_map_to_directions(name: str, direction: str, alertname: str) -> None:
    assert metric_direction(name) == direction
    assert metric_alertname(name) == alertname


def _every_300_s(path: Path) -> None:
    """Re-time a metrics CSV to PetShop's 5-minute rows (the slice keeps every 8th normal row, 40
    minutes apart, more than ``rca fit`` accepts)."""
    lines = path.read_text().splitlines()
    rows = [i for i, line in enumerate(lines) if line[:1].isdigit()]
    t0 = float(lines[rows[0]].split(",", 1)[0])
    for k, i in enumerate(rows):
        lines[i] = f"{t0 + 300.0 * k!r}," + lines[i].split(",", 1)[1]
    path.write_text("\n".join(lines) + "\n")


def test_fit_reads_only_graph_and_normal_period(tmp_path: Path) -> None:
    scen = tmp_path / "slice"
    shutil.copytree(SLICE, scen)
    for t in scen.rglob("target.json"):  # a label that would be read would crash the parser
        t.write_text("not json {")
    _every_300_s(scen / "noissue" / "metrics.csv")
    _LOG.paths.clear()
    _LOG.active = True
    try:
        res = fit(
            FitArgs(scenario=str(scen), out=str(tmp_path / "m"), incidents=120, epochs=1, seed=1)
        )
    finally:
        _LOG.active = False
    inside = {
        Path(p).resolve() for p in _LOG.paths if str(scen.resolve()) in str(Path(p).resolve())
    }
    assert inside == {(scen / "graph.csv").resolve(), (scen / "noissue" / "metrics.csv").resolve()}
    assert not any("target.json" in p for p in _LOG.paths)
    assert is_fit_artifact(res["out"])
    meta = json.loads((Path(res["out"]) / "config.json").read_text())
    assert meta["fit"]["reads"] == ["graph.csv", "noissue/metrics.csv"]
    assert res["counts"]["train_incidents"] == 120


def test_synthesised_incidents_follow_the_graph() -> None:
    graph, normal = read_system(SLICE)
    system = SystemModel(graph, normal)
    incs = list(system.incidents(SynthConfig(n_incidents=150, seed=2)))
    assert len(incs) == 150
    assert {i.fault for i in incs} >= {"latency", "errors", "stop"}
    # every non-silent latency incident alerts at its root or at a node that (transitively) calls it
    callers = system.callers
    for inc in incs:
        if inc.fault != "latency" or inc.silent:
            continue
        up, todo = {inc.root}, [inc.root]
        while todo:
            for c in callers[todo.pop()]:
                if c not in up:
                    up.add(c)
                    todo.append(c)
        hit = {
            graph.index[a["labels"]["service"]]
            for a in inc.alerts
            if a["labels"]["metric"] == "latency"
        }
        assert hit, inc
    # same seed, same incidents
    again = list(system.incidents(SynthConfig(n_incidents=5, seed=2)))
    assert [i.root for i in again] == [i.root for i in incs[:5]]


def test_fit_then_petshop_on_other_system_shape(
    small_system: tuple[Path, dict], tmp_path: Path
) -> None:
    scen, info = small_system
    assert not (scen / "train").exists()
    model = tmp_path / "model"
    out_fit = tmp_path / "fit.json"
    rc = main(
        [
            "rca",
            "fit",
            "--scenario",
            str(scen),
            "--out",
            str(model),
            "--incidents",
            "250",
            "--epochs",
            "2",
            "--json",
            str(out_fit),
        ]
    )
    assert rc == 0
    fit_json = json.loads(out_fit.read_text())
    assert fit_json["counts"]["nodes"] == 24 and fit_json["timing_s"]["total"] > 0
    out = tmp_path / "eval.json"
    rc = main(
        [
            "rca",
            "petshop",
            "--scenario",
            str(scen),
            "--model",
            str(model),
            "--methods",
            "propagation",
            "gat_fit",
            "--json",
            str(out),
        ]
    )
    assert rc == 0
    res = json.loads(out.read_text())
    assert res["n_incidents"] == 3
    assert set(res["methods"]) == {
        "propagation",
        "gat_fit",
        "gat_fit:unanchored",
        "gat_fit:no_shared_callee",
    }
    ranks = [r["ranks"]["gat_fit"] for r in res["per_incident"]]
    assert all(r is not None for r in ranks)
    # an 8x latency fault that adds up along the call chain: the fitted model puts its root near the top
    assert np.mean([r <= 3 for r in ranks]) >= 2 / 3
    lo, hi = res["intervals"]["gat_fit"]["ac@3"]
    assert 0.0 <= lo <= res["methods"]["gat_fit"]["ac@3"] <= hi <= 1.0


def test_scores_do_not_depend_on_node_names(
    small_system: tuple[Path, dict], tmp_path: Path
) -> None:
    scen, info = small_system
    res = fit(FitArgs(scenario=str(scen), out=str(tmp_path / "a"), incidents=150, epochs=1, seed=4))
    renamed = tmp_path / "renamed"
    make_system(renamed, n_services=24, normal_rows=240, issues=3, seed=3, prefix="zz")
    res2 = fit(
        FitArgs(scenario=str(renamed), out=str(tmp_path / "b"), incidents=150, epochs=1, seed=4)
    )
    assert res["version"] == res2["version"]  # identical weights from differently named systems
    a, b = FittedGATAnalyzer.load(res["out"]), FittedGATAnalyzer.load(res2["out"])
    s1, s2 = load_scenario(scen), load_scenario(renamed)
    inc1 = next(s1.incidents("test"))
    inc2 = next(s2.incidents("test"))
    np.testing.assert_allclose(
        a.scores(s1.graph, inc1["alerts"]), b.scores(s2.graph, inc2["alerts"])
    )


def test_features_shape_and_unknown_alerts() -> None:
    graph = read_graph_csv(SLICE / "graph.csv")
    obs = np.zeros((graph.num_nodes, 5), dtype=bool)
    x = fit_features(graph, [{"labels": {"service": "nope", "metric": "latency"}}], obs)
    assert x.shape[0] == graph.num_nodes and not x[:, 0].any()


def test_bootstrap_intervals_cover_the_point_estimate() -> None:
    rows = [{"ranks": {"m": r}} for r in [1, 1, 2, None, 1, 4, 1, 1]]
    iv = bootstrap_intervals(rows, ["m"], resamples=500, seed=0)
    lo, hi = iv["m"]["ac@1"]
    assert lo < 5 / 8 < hi and iv["_meta"]["n_incidents"] == 8
    assert iv["m"]["ac@5"][1] <= 1.0


def test_vectorised_detector_equals_the_adapters() -> None:
    from fleetmind.data.petshop import detect_alerts

    graph, normal = read_system(SLICE)
    system = SystemModel(graph, normal)
    rng = np.random.default_rng(0)
    times = normal.index.to_numpy(dtype=float)
    n_alerts = 0
    for _ in range(20):
        s = int(rng.integers(0, len(normal) - 6))
        x = normal.to_numpy(dtype=float)[s : s + 6].copy()
        cols = rng.choice(x.shape[1], size=15, replace=False)
        x[2:, cols] *= rng.choice([0.2, 3.0, 30.0], size=15)
        window = normal.iloc[s : s + 6].copy()
        window.loc[:, :] = x
        want, _ = detect_alerts(window, system.baseline, system.config)
        assert system.detect(x, times[s : s + 6]) == want
        n_alerts += len(want)
    assert n_alerts > 20


def test_synthesised_roots_show_their_faults_symptom_under_drift() -> None:
    from fleetmind.data.synth_incidents import SYMPTOM_ROLES

    graph, normal = read_system(SLICE)
    system = SystemModel(graph, normal)
    roles = system.config.roles
    cfg = SynthConfig(n_incidents=120, seed=5, stale_rate=1.0, subtree_drift_rate=1.0)
    incs = list(system.incidents(cfg))
    checked = 0
    for inc in incs:
        want = SYMPTOM_ROLES[inc.fault]
        can = any(c[0] == inc.root_id and roles.role(c[1]) in want for c in system._det_cols)
        if not can:
            continue
        checked += 1
        assert any(
            a["labels"]["service"] == inc.root_id and roles.role(a["labels"]["metric"]) in want
            for a in inc.alerts
        ), (inc.fault, inc.root_id)
    assert checked >= 60
    # stale baselines and subtree drift last the whole window: the pre-onset reference absorbs
    # them, so no alert starts before the reference rows end
    for inc in incs:
        starts = sorted({a["startsAt"] for a in inc.alerts})
        assert len(starts) >= 1 and inc.window_rows >= 5
    # without the pre-onset reference the same drifts raise many more alerts
    plain = SystemModel(graph, normal, replace(system.config, pre_onset=False))
    noisy = list(plain.incidents(cfg))
    assert np.mean([len(i.alerts) for i in noisy]) > 1.5 * np.mean([len(i.alerts) for i in incs])
