"""``rca petshop`` and ``rca fit`` on a user's own scenario folder: input that would give a silent
wrong result (AC@1 over no evidence, a model of another system, a graph with ``-1`` cells, a role
map typo, millisecond timestamps) or lose data (``--out`` over another folder) stops with one line.

Small hand-made scenarios (three services ``a -> b -> c``, one latency metric, one issue rooted at
``c``); the few fits are tiny. Each test fails without the check it names.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from fleetmind.cli import main
from fleetmind.data.errors import ConfigError, DataError
from fleetmind.data.graph import DependencyGraph, GraphNode
from fleetmind.data.petshop import _iso, read_graph_csv
from fleetmind.data.synth_system import make_system
from fleetmind.rca.fit_model import NUM_FIT_FEATURES, save_fit_artifact
from fleetmind.training.rca_fit import check_out_dir

NODES = ("a", "b", "c")


def _csv(df: pd.DataFrame, path: Path, sep: str = ",") -> None:
    """Write a PetShop metrics CSV (three header rows, unix-seconds index) with ``sep`` between
    header cells (``", "`` reproduces a hand-edited header)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    header = [
        sep.join([name] + [str(c[k]) for c in df.columns])
        for k, name in enumerate(("microservice", "metric", "statistic"))
    ]
    rows = [",".join([repr(float(t))] + [repr(float(v)) for v in r]) for t, r in df.iterrows()]
    path.write_text("\n".join([*header, "unix_timestamp", *rows]) + "\n")


def _frame(nodes: tuple[str, ...], values: np.ndarray, t0: float, step: float) -> pd.DataFrame:
    """``values`` ``(T, len(nodes))`` of metric ``latency`` (statistic ``Average``) per node."""
    cols = pd.MultiIndex.from_tuples([(n, "latency", "Average") for n in nodes])
    return pd.DataFrame(values, index=t0 + step * np.arange(len(values)), columns=cols)


def _scenario(
    root: Path,
    *,
    normal_rows: int = 60,
    normal_nodes: tuple[str, ...] = NODES,
    window_nodes: tuple[str, ...] = NODES,
    sep: str = ",",
    flat_window: bool = False,
    graph: list[list[int]] | None = None,
) -> Path:
    """Three services ``a -> b -> c``; one test issue whose latency rises at ``c`` (and, added up,
    at ``b`` and ``a``) from its fourth row on."""
    rng = np.random.default_rng(0)
    adj = graph if graph is not None else [[0, 1, 0], [0, 0, 1], [0, 0, 0]]
    root.mkdir(parents=True)
    lines = [sep.join(["", *NODES])] + [
        sep.join([n] + [str(v) for v in row]) for n, row in zip(NODES, adj, strict=True)
    ]
    (root / "graph.csv").write_text("\n".join(lines) + "\n")
    normal = 1.0 + 0.01 * rng.standard_normal((normal_rows, 3))
    _csv(_frame(normal_nodes, normal, 1.0e9, 60.0), root / "noissue" / "metrics.csv", sep)
    window = 1.0 + 0.01 * rng.standard_normal((8, 3))
    if not flat_window:
        window[3:] += [[3.0, 4.0, 5.0]]
    issue = root / "test" / "issue_0"
    _csv(_frame(window_nodes, window, 1.1e9, 60.0), issue / "metrics.csv", sep)
    target = {"node": "a", "metric": "latency", "agg": "Average", "timestamp": 0}
    (issue / "target.json").write_text(json.dumps({"target": target, "root_cause": {"node": "c"}}))
    return root


def _petshop(scen: Path, *extra: str, json_out: Path | None = None) -> int:
    argv = ["rca", "petshop", "--scenario", str(scen), "--methods", "propagation", *extra]
    return main(argv + (["--json", str(json_out)] if json_out else []))


def _error(capsys: pytest.CaptureFixture[str]) -> str:
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("fleetmind: error:")]
    assert len(err) == 1, err
    return err[0]


# ---------------------------------------------------------------------------- rca petshop: evidence
def test_header_names_with_spaces_match_the_graph(tmp_path: Path) -> None:
    """``a, b, c`` headers (graph.csv and metrics.csv) read as ``a``, ``b``, ``c``: the issue is scored."""
    scen = _scenario(tmp_path / "s", sep=", ")
    out = tmp_path / "r.json"
    assert _petshop(scen, json_out=out) == 0
    res = json.loads(out.read_text())
    row = res["per_incident"][0]
    assert row["n_alerts"] > 0 and row["ranks"]["propagation"] == 1
    assert res["methods"]["propagation"]["ac@1"] == 1.0


@pytest.mark.parametrize(
    ("kwargs", "words"),
    [
        ({"normal_rows": 20}, "no metric column has a baseline: one needs at least 30"),
        ({"normal_nodes": ("A", "B", "C")}, "node names with a baseline is a graph.csv node"),
        ({"window_nodes": ("A", "B", "C")}, "none of its 3 node names is a graph.csv node"),
        ({"window_nodes": ("x", "y", "z")}, "none of its 3 node names is a graph.csv node"),
        ({"flat_window": True}, "none of the 1 issue windows raised an alert"),
    ],
)
def test_petshop_stops_when_no_window_gives_evidence(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], kwargs: dict, words: str
) -> None:
    """Without evidence every issue had 0 alerts and AC@1 0.000 (alphabetical ranking) with status 0."""
    scen = _scenario(tmp_path / "s", **kwargs)
    out = tmp_path / "r.json"
    assert _petshop(scen, json_out=out) == 2
    assert words in _error(capsys)
    assert not out.exists()


def test_petshop_stops_when_window_columns_match_no_baseline(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    scen = _scenario(tmp_path / "s")
    win = scen / "test" / "issue_0" / "metrics.csv"
    lines = win.read_text().splitlines()
    lines[1] = lines[1].replace("latency", "LATENCY")
    win.write_text("\n".join(lines) + "\n")
    assert _petshop(scen) == 2
    line = _error(capsys)
    assert "no column of this issue window has a normal-period baseline" in line
    assert "'a/LATENCY/Average'" in line


# ---------------------------------------------------------------------------- rca petshop: --model
def _fit_artifact(path: Path, nodes: list[str]) -> Path:
    """A fitted-model folder for a graph of ``nodes`` (untrained weights: only the format counts)."""
    from fleetmind.rca.model import GATConfig, GATRanker

    cfg = GATConfig(
        in_dim=NUM_FIT_FEATURES, hidden=8, heads=1, layers=2, fault_types=[], crop_hops=None
    )
    g = DependencyGraph("other", [GraphNode(id=n, kind="service") for n in nodes], [])
    obs = np.ones((len(nodes), 5), dtype=bool)
    return save_fit_artifact(GATRanker(cfg), path, g, obs, {"roles": {}})


def test_gat_fit_without_a_fitted_model_is_an_error_before_any_work(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """gat_fit used to be dropped silently (status 0, ``"skipped": {}``)."""
    gat = tmp_path / "gat"
    gat.mkdir()
    (gat / "config.json").write_text(json.dumps({"format": "fleetmind-rca-gat"}))
    missing = str(tmp_path / "no-scenario")  # the --model check comes before reading anything
    argv = ["rca", "petshop", "--scenario", missing, "--methods", "propagation", "gat_fit"]
    assert main([*argv, "--model", str(gat)]) == 2
    line = _error(capsys)
    assert f"--model {gat}: not a model fitted by 'fleetmind rca fit'" in line
    assert "fleetmind-rca-gat" in line
    assert main([*argv, "--model", str(tmp_path / "nope")]) == 2
    assert "no such file or folder" in _error(capsys)
    assert main(argv) == 2
    assert "--methods gat_fit needs --model PATH" in _error(capsys)


def test_model_of_another_system_is_refused_or_warned(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    scen = _scenario(tmp_path / "s")
    other = _fit_artifact(tmp_path / "other", ["x", "y", "z", "w"])
    assert _petshop(scen, "gat_fit", "--model", str(other)) == 2
    assert "whose 4 nodes include none of the 3 graph nodes" in _error(capsys)
    partial = _fit_artifact(tmp_path / "partial", ["a", "y", "z", "w"])
    out = tmp_path / "r.json"
    assert _petshop(scen, "gat_fit", "--model", str(partial), json_out=out) == 0
    err = capsys.readouterr().err
    assert "fleetmind: warning:" in err and "only 1 of the 3 graph nodes" in err
    assert "gat_fit" in json.loads(out.read_text())["methods"]
    known = _fit_artifact(tmp_path / "known", ["a", "b", "c"])
    assert _petshop(scen, "gat_fit", "--model", str(known)) == 0
    assert "warning" not in capsys.readouterr().err


# ---------------------------------------------------------------------------- graph.csv cells
@pytest.mark.parametrize("cell", ["-1", "2", "0.5"])
def test_graph_cells_other_than_0_and_1_are_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], cell: str
) -> None:
    """``-1`` for "no edge" made every such cell an edge (an almost complete graph)."""
    scen = _scenario(tmp_path / "s", graph=[[0, 1, 0], [0, 0, 1], [0, 0, 0]])
    text = (scen / "graph.csv").read_text().replace("c,0,0,0", f"c,{cell},0,0")
    (scen / "graph.csv").write_text(text)
    with pytest.raises(DataError, match=r"\(row 'c', column 'a'\) is .*must be 1 .* or 0"):
        read_graph_csv(scen / "graph.csv")
    assert _petshop(scen) == 2
    assert "graph.csv: cell (row 'c', column 'a')" in _error(capsys)


# ---------------------------------------------------------------------------- role map typos
def test_role_map_entries_that_match_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A typo such as ``latancy: latency`` used to be ignored without a word."""
    scen = _scenario(tmp_path / "s")
    (scen / "roles.yaml").write_text("latency: latency\nlatancy: latency\n")
    assert _petshop(scen) == 0
    err = capsys.readouterr().err
    assert "fleetmind: warning:" in err and "roles.yaml" in err and "latancy" in err
    (scen / "roles.yaml").write_text("latancy: latency\n")
    assert _petshop(scen) == 2
    assert "none of its entries (latancy) names a metric" in _error(capsys)
    fit = ["rca", "fit", "--scenario", str(scen), "--out", str(tmp_path / "m")]
    assert main([*fit, "--incidents", "50", "--epochs", "1"]) == 2
    assert "none of its entries (latancy) names a metric" in _error(capsys)
    assert not (tmp_path / "m").exists()


# ---------------------------------------------------------------------------- rca fit: normal period
def _retime(path: Path, step: float, t0: float = 1.7e9) -> None:
    """Rewrite a metrics CSV's timestamps as ``t0 + step * row``."""
    lines = path.read_text().splitlines()
    body = [i for i, ln in enumerate(lines) if ln[:1].isdigit()]
    for k, i in enumerate(body):
        lines[i] = repr(t0 + step * k) + "," + lines[i].split(",", 1)[1]
    path.write_text("\n".join(lines) + "\n")


@pytest.mark.parametrize(
    ("t0", "step", "words"),
    [
        (1.7e12, 60_000.0, "rows are 60000 s apart; the reader takes 1 s to 300 s (5 min); "
         "the timestamps look like milliseconds"),
        (1.7e9, 0.5, "rows are 0.5 s apart; the reader takes 1 s to 300 s (5 min)"),
        (1.7e9, 3600.0, "rows are 3600 s apart; the reader takes 1 s to 300 s (5 min)"),
    ],
)  # fmt: skip
def test_fit_checks_the_normal_periods_row_interval(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], t0: float, step: float, words: str
) -> None:
    """Millisecond timestamps crashed with a traceback (year 55048); 0.5 s or 1 h rows were fitted."""
    scen = tmp_path / "s"
    make_system(scen, n_services=6, normal_rows=60, issues=1, seed=1)
    _retime(scen / "noissue" / "metrics.csv", step, t0)
    out = tmp_path / "m"
    argv = ["rca", "fit", "--scenario", str(scen), "--out", str(out), "--incidents", "50"]
    assert main([*argv, "--epochs", "1"]) == 2
    line = _error(capsys)
    assert words in line and "noissue/metrics.csv" in line
    assert ("milliseconds" in line) == (t0 > 1e11)
    assert not out.exists()


def test_iso_never_raises() -> None:
    assert _iso(1.7e9) == "2023-11-14T22:13:20Z"
    assert _iso(1.7e12 * 1000) == "9999-12-31T23:59:59Z"
    assert _iso(-1e20) == "0001-01-01T00:00:00Z"
    assert _iso(math.inf) == "9999-12-31T23:59:59Z" and _iso(math.nan) == "0001-01-01T00:00:00Z"


# ---------------------------------------------------------------------------- rca fit: --out, --json
def test_fit_refuses_to_overwrite_a_folder_that_is_not_a_fit(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A copy of the released GAT (or any folder) given as --out used to be overwritten."""
    scen = tmp_path / "s"
    make_system(scen, n_services=6, normal_rows=60, issues=1, seed=1)
    gat = tmp_path / "gat"
    gat.mkdir()
    (gat / "config.json").write_text('{"format": "fleetmind-rca-gat"}\n')
    (gat / "model.pt").write_bytes(b"weights")
    fit = ["rca", "fit", "--scenario", str(scen), "--incidents", "50", "--epochs", "1"]
    assert main([*fit, "--out", str(gat)]) == 2
    assert "a non-empty folder that is not a model written by 'fleetmind rca fit'" in _error(capsys)
    assert (gat / "model.pt").read_bytes() == b"weights"
    afile = tmp_path / "afile"
    afile.write_text("keep")
    cases = [
        (["--out", str(afile)], "a file is there; --out names a model folder"),
        (["--out", str(afile / "m")], "is a file, where a folder is needed"),
        (["--out", str(tmp_path / "m"), "--json", str(gat)], "a folder is there; --json names a file"),
        (["--out", str(tmp_path / "m"), "--json", str(afile / "r.json")], "is a file, where a folder"),
    ]  # fmt: skip
    for extra, words in cases:
        assert main([*fit, *extra]) == 2
        assert words in _error(capsys)
    assert afile.read_text() == "keep" and not (tmp_path / "m").exists()  # checked before training
    (gat / "model.pt").unlink()
    (gat / "config.json").write_text('{"format": "fleetmind-rca-fit"}\n')
    check_out_dir(gat)  # an earlier fit's folder is replaced
    check_out_dir(tmp_path / "new" / "deeper")
    empty = tmp_path / "empty"
    empty.mkdir()
    check_out_dir(empty)
    with pytest.raises(ConfigError, match="not a model written by"):
        check_out_dir(scen)
