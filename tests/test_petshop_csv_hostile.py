"""metrics.csv and graph.csv files that pandas' type inference used to misread, named as errors or read
as written.

* A column named twice: ``pd.read_csv`` renames the second ``Average`` to ``Average.1``
  (https://pandas.pydata.org/docs/reference/api/pandas.read_csv.html, duplicate names are mangled),
  so it was accepted although docs/petshop.md lists "a column named twice" as an error.
* A 2-row header (node, metric): the first data row was read as the statistic row and lost.
* An empty timestamp cell was reported as ``timestamp np.float64(nan) is not a unix time``.
* graph.csv node names ``01`` or ``NA`` (pandas' number parsing and default NA strings) were read
  as ``1`` / NaN in the row labels but as text in the header: "a row or a column but not both".
"""

from __future__ import annotations

from pathlib import Path

import pytest

from fleetmind.data.errors import DataError
from fleetmind.data.petshop import read_graph_csv, read_metrics_csv

HEAD = (
    "microservice,a,a,b\nmetric,lat,cpu,lat\nstatistic,Average,Average,Average\nunix_timestamp,,,\n"
)
DATA = "1700000000,1,2,3\n1700000060,1,2,3\n1700000120,1,2,4\n"


def _write(tmp_path: Path, text: str, name: str = "metrics.csv") -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


def test_well_formed_file_reads_as_before(tmp_path: Path) -> None:
    df = read_metrics_csv(_write(tmp_path, HEAD + DATA), unique_times=True)
    assert list(df.columns) == [
        ("a", "lat", "Average"),
        ("a", "cpu", "Average"),
        ("b", "lat", "Average"),
    ]
    assert df.index.tolist() == [1700000000.0, 1700000060.0, 1700000120.0]


def test_exact_duplicate_column_is_an_error_naming_it(tmp_path: Path) -> None:
    head = HEAD.replace("metric,lat,cpu,lat", "metric,lat,lat,lat")
    with pytest.raises(DataError, match=r"column 'a/lat/Average' appears more than once") as err:
        read_metrics_csv(_write(tmp_path, head + DATA))
    assert "\n" not in str(err.value)


def test_a_statistic_really_named_with_dot_one_is_not_a_duplicate(tmp_path: Path) -> None:
    head = HEAD.replace("metric,lat,cpu,lat", "metric,lat,lat,lat").replace(
        "Average,Average,Average", "Average,Average.1,Average"
    )
    df = read_metrics_csv(_write(tmp_path, head + DATA))
    assert ("a", "lat", "Average.1") in df.columns


def test_two_row_header_is_refused(tmp_path: Path) -> None:
    text = "microservice,a,a,b\nmetric,lat,cpu,lat\n" + DATA
    with pytest.raises(
        DataError, match=r"expected a 3-row header \(node, metric, statistic\)"
    ) as e:
        read_metrics_csv(_write(tmp_path, text))
    assert "\n" not in str(e.value)


def test_two_row_header_with_a_missing_first_value_is_refused(tmp_path: Path) -> None:
    text = "microservice,a,a,b\nmetric,lat,cpu,lat\n1699999940,0.5,,NA\n" + DATA
    with pytest.raises(DataError, match="3-row header"):
        read_metrics_csv(_write(tmp_path, text))


def test_numeric_statistic_names_under_a_statistic_label_are_a_header(tmp_path: Path) -> None:
    head = HEAD.replace("Average,Average,Average", "50,90,99")
    df = read_metrics_csv(_write(tmp_path, head + DATA))
    assert list(df.columns.get_level_values(2)) == ["50", "90", "99"]
    assert len(df) == 3


@pytest.mark.parametrize("cell", ["", "nan"])
def test_empty_timestamp_names_its_data_row(tmp_path: Path, cell: str) -> None:
    text = HEAD + f"1700000000,1,2,3\n{cell},1,2,3\n1700000120,1,2,4\n"
    with pytest.raises(DataError, match="data row 2 has an empty or missing timestamp") as err:
        read_metrics_csv(_write(tmp_path, text))
    assert "np.float64" not in str(err.value)


def test_text_timestamp_names_its_data_row(tmp_path: Path) -> None:
    text = HEAD + "1700000000,1,2,3\nabc,1,2,3\n1700000120,1,2,4\n"
    with pytest.raises(DataError, match="data row 2: timestamp 'abc' is not a unix time"):
        read_metrics_csv(_write(tmp_path, text))


@pytest.mark.parametrize(
    "names", [("01", "02", "03"), ("NA", "null", "None"), ("N/A", "frontend", "nan")]
)
def test_graph_node_names_are_read_as_written(tmp_path: Path, names: tuple[str, ...]) -> None:
    a, b, c = names
    text = f"microservice,{a},{b},{c}\n{a},0,1,0\n{b},0,0,1\n{c},0,0,0\n"
    g = read_graph_csv(_write(tmp_path, text, "graph.csv"))
    assert [n.id for n in g.nodes] == [a, b, c]
    assert [(e.src, e.dst) for e in g.edges] == [(a, b), (b, c)]


@pytest.mark.parametrize("cell", ["", "NA", "x"])
def test_graph_cell_that_is_not_a_number_is_still_an_error(tmp_path: Path, cell: str) -> None:
    text = f"microservice,a,b\na,0,{cell}\nb,0,0\n"
    with pytest.raises(DataError, match=r"cell \('a', 'b'\) is not a number"):
        read_graph_csv(_write(tmp_path, text, "graph.csv"))


def test_graph_column_named_twice_is_named(tmp_path: Path) -> None:
    text = "microservice,a,a\na,0,1\nb,0,0\n"
    with pytest.raises(DataError, match="node 'a' names more than one column"):
        read_graph_csv(_write(tmp_path, text, "graph.csv"))


def test_numeric_statistics_under_an_unnamed_level_are_a_header(tmp_path: Path) -> None:
    """``DataFrame.to_csv()`` writes an empty first cell for an unnamed column level: a header of
    numeric statistics (a Prometheus summary's quantiles 0.5, 0.99) is still a 3-row header."""
    import pandas as pd

    from fleetmind.data.petshop import read_metrics_csv

    cols = pd.MultiIndex.from_tuples([("a", "latency", "0.5"), ("a", "latency", "0.99")])
    frame = pd.DataFrame([[1.0, 2.0]] * 6, columns=cols, index=range(0, 360, 60))
    path = tmp_path / "metrics.csv"
    frame.to_csv(path)
    assert path.read_text().splitlines()[2].startswith(",")
    read = read_metrics_csv(path)
    assert len(read) == 6
    assert sorted(read.columns.get_level_values(2)) == ["0.5", "0.99"]
