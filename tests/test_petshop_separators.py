"""A ``graph.csv`` or ``metrics.csv`` separated by ``;`` or tabs says the file must be comma-separated.

CSV is comma-separated (RFC 4180, https://www.rfc-editor.org/rfc/rfc4180); spreadsheets in locales
with a decimal comma export ``;`` instead, and ``\\t`` comes from copying a table. Read with commas,
such a file is one column, and the errors were about its shape ("adjacency matrix must be square,
got 4x0", "expected a 3-row header") rather than its separator.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from fleetmind.cli import main
from fleetmind.data.errors import DataError
from fleetmind.data.petshop import read_graph_csv, read_metrics_csv
from fleetmind.data.synth_system import make_system


def _system(tmp_path: Path) -> Path:
    root = tmp_path / "shop"
    make_system(root, n_services=4, normal_rows=40, issues=1, seed=1)
    return root


def _resep(path: Path, sep: str) -> None:
    path.write_text(path.read_text().replace(",", sep))


@pytest.mark.parametrize(("sep", "name"), [(";", "';'"), ("\t", "tabs")])
def test_graph_csv_names_its_separator(tmp_path: Path, sep: str, name: str) -> None:
    graph = _system(tmp_path) / "graph.csv"
    _resep(graph, sep)
    with pytest.raises(DataError) as err:
        read_graph_csv(graph)
    assert f"must be comma-separated (its first line is separated by {name})" in str(err.value)
    assert "square" not in str(err.value)


@pytest.mark.parametrize(("sep", "name"), [(";", "';'"), ("\t", "tabs")])
def test_metrics_csv_names_its_separator(tmp_path: Path, sep: str, name: str) -> None:
    normal = _system(tmp_path) / "noissue" / "metrics.csv"
    _resep(normal, sep)
    with pytest.raises(DataError) as err:
        read_metrics_csv(normal)
    assert f"must be comma-separated (its first line is separated by {name})" in str(err.value)
    assert "3-row header" not in str(err.value)


def test_petshop_stops_with_the_separator_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = _system(tmp_path)
    _resep(root / "graph.csv", ";")
    assert main(["rca", "petshop", "--scenario", str(root), "--methods", "propagation"]) == 2
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("fleetmind: error:")]
    assert len(err) == 1 and "graph.csv: one column read" in err[0]
    assert "comma-separated" in err[0]


def test_a_comma_file_keeps_its_errors(tmp_path: Path) -> None:
    graph = _system(tmp_path) / "graph.csv"
    graph.write_text("\n".join(graph.read_text().splitlines()[:-1]) + "\n")  # a row short
    with pytest.raises(DataError) as err:
        read_graph_csv(graph)
    assert "square" in str(err.value) and "comma-separated" not in str(err.value)
