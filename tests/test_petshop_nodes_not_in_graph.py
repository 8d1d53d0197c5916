"""Metric node names that are not ``graph.csv`` nodes are named, not dropped in silence.

A column whose node is no graph node can reach no node of the ranking: ``rca fit``'s synthesiser
skipped it (``continue``) and ``rca petshop`` raised alerts for a service outside the graph, both
without a word, so ``DB`` beside a graph's ``db`` (names match exactly, case included, as
``docs/petshop.md`` says) silently lost a node's metrics. Now both commands warn on stderr, naming the
names and the graph node of the same name up to case, and say how many graph nodes have no metrics;
``rca fit`` records them in the model's ``config.json`` and summary, each incident in its window.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import pytest

from fleetmind.cli import main
from fleetmind.data.petshop import ScenarioWarning, load_scenario, match_nodes
from fleetmind.data.synth_incidents import SystemModel
from fleetmind.data.synth_system import make_system
from fleetmind.training.rca_fit import read_system


def _system(tmp_path: Path) -> tuple[Path, list[str]]:
    root = tmp_path / "shop"
    info = make_system(root, n_services=4, normal_rows=40, issues=1, seed=1)
    return root, list(info["names"])  # type: ignore[arg-type]


def _rename(path: Path, old: str, new: str) -> None:
    """Rename node ``old`` to ``new`` in the first header row of a metrics CSV."""
    lines = path.read_text().splitlines()
    lines[0] = ",".join(new if c == old else c for c in lines[0].split(","))
    path.write_text("\n".join(lines) + "\n")


def test_window_names_not_in_graph_are_warned_and_recorded(tmp_path: Path) -> None:
    root, names = _system(tmp_path)
    _rename(root / "test" / "issue_0" / "metrics.csv", names[1], names[1].upper())
    scenario = load_scenario(root)
    with pytest.warns(ScenarioWarning) as caught:
        inc = scenario.incident(scenario.issues("test")[0])
    msg = str(caught[0].message)
    assert f"{names[1].upper()!r} (graph.csv has {names[1]!r})" in msg
    assert "1 of the 4 graph nodes have no metrics" in msg
    assert inc["window"]["not_in_graph"] == {
        "count": 1,
        "names": [names[1].upper()],
        "case_matches": {names[1].upper(): names[1]},
        "graph_nodes_without_metrics": 1,
    }


def test_matching_names_give_no_warning(tmp_path: Path) -> None:
    root, _ = _system(tmp_path)
    with warnings.catch_warnings():
        warnings.simplefilter("error", ScenarioWarning)
        scenario = load_scenario(root)
        inc = scenario.incident(scenario.issues("test")[0])
    assert inc["window"]["not_in_graph"]["count"] == 0


def test_fit_warns_and_records_normal_names_not_in_graph(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root, names = _system(tmp_path)
    _rename(root / "noissue" / "metrics.csv", names[3], "ghost")
    out = tmp_path / "m"
    argv = ["rca", "fit", "--scenario", str(root), "--out", str(out), "--incidents", "50"]
    assert main([*argv, "--epochs", "1", "--json", str(tmp_path / "fit.json")]) == 0
    warned = [ln for ln in capsys.readouterr().err.splitlines() if "fleetmind: warning:" in ln]
    assert len(warned) == 1 and "'ghost'" in warned[0] and "noissue/metrics.csv" in warned[0]
    assert "1 of the 4 graph nodes have no metrics" in warned[0]
    record = {"count": 1, "names": ["ghost"], "case_matches": {}, "graph_nodes_without_metrics": 1}
    assert json.loads((out / "config.json").read_text())["fit"]["not_in_graph"] == record
    assert json.loads((tmp_path / "fit.json").read_text())["not_in_graph"] == record


def test_synthesiser_keeps_the_match(tmp_path: Path) -> None:
    root, names = _system(tmp_path)
    _rename(root / "noissue" / "metrics.csv", names[0], names[0].upper())
    graph, normal = read_system(root)
    model = SystemModel(graph, normal)
    assert model.nodes.not_in_graph == (names[0].upper(),)
    assert model.nodes.case_matches == {names[0].upper(): names[0]}
    assert model.nodes.without_metrics == (names[0],)
    assert not any(i == graph.index[names[0]] for i, _ in model.groups)


def test_petshop_prints_each_window_warning_once(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root, names = _system(tmp_path)
    _rename(root / "test" / "issue_0" / "metrics.csv", names[1], names[1].upper())
    argv = ["rca", "petshop", "--scenario", str(root), "--methods", "propagation"]
    assert main([*argv, "--split", "test"]) == 0  # reads the window three times
    err = capsys.readouterr().err.replace("\r", "\n").splitlines()
    warned = [ln for ln in err if ln.startswith("fleetmind: warning:")]
    assert len(warned) == 1 and "issue_0/metrics.csv" in warned[0], warned
    assert f"(graph.csv has {names[1]!r})" in warned[0]


def test_match_nodes_lists_graph_nodes_without_metrics(tmp_path: Path) -> None:
    root, names = _system(tmp_path)
    scenario = load_scenario(root)
    m = match_nodes(names[:2], scenario.graph)
    assert m.not_in_graph == () and m.warning("x") is None
    assert m.without_metrics == tuple(sorted(names[2:])) and m.n_graph == 4


def test_petshop_json_records_each_issue_s_names_not_in_graph(tmp_path: Path) -> None:
    root, names = _system(tmp_path)
    _rename(root / "test" / "issue_0" / "metrics.csv", names[1], names[1].upper())
    argv = ["rca", "petshop", "--scenario", str(root), "--methods", "propagation"]
    assert main([*argv, "--split", "test", "--json", str(tmp_path / "p.json")]) == 0
    rows = json.loads((tmp_path / "p.json").read_text())["per_incident"]
    assert [r["not_in_graph"]["names"] for r in rows] == [[names[1].upper()]]


def test_evaluate_on_a_petshop_scenario_points_to_rca_petshop(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``rca evaluate --data`` on a PetShop-layout folder said only "has no split 'test' (has:
    no *.jsonl split files)"."""
    root, _ = _system(tmp_path)
    assert main(["rca", "evaluate", "--data", str(root)]) == 2
    err = capsys.readouterr().err
    assert "PetShop layout" in err and f"fleetmind rca petshop --scenario {root}" in err
