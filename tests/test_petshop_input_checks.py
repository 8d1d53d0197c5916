"""Normal periods ``rca fit`` and ``rca petshop`` cannot use honestly are refused, in one line.

* fewer rows than the baseline's ``min_normal_points`` (30, ``DetectorConfig``; docs/petshop.md):
  the error names the row count and the minimum, not a node-name mismatch;
* ``inf``/``-inf`` values (docs/petshop.md "Robustness": NaN is missing, an infinite value is an
  error naming file, column and row), in the normal period and in issue windows;
* a timestamp on two rows of the normal period (the baseline is fitted on the rows' distribution,
  so dropping one silently changes the model; windows keep their documented de-duplication).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from fleetmind import cli
from fleetmind.data.errors import DataError
from fleetmind.data.petshop import DetectorConfig, load_scenario, read_metrics_csv
from fleetmind.data.synth_incidents import SystemModel
from fleetmind.data.synth_system import make_system
from fleetmind.training.rca_fit import read_system

NEED = DetectorConfig().min_normal_points


def _error_line(capsys: pytest.CaptureFixture[str]) -> str:
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    assert len(err) == 1 and "Traceback" not in err[0], err
    return err[0]


def _rows(path: Path) -> tuple[list[str], list[int]]:
    """The file's lines and the indices of its data rows (the lines that start with a digit)."""
    lines = path.read_text().splitlines()
    return lines, [i for i, line in enumerate(lines) if line[:1].isdigit()]


def _set_cell(path: Path, row: int, col: int, value: str) -> None:
    """Write ``value`` into data row ``row`` (0-based), value column ``col`` (0-based)."""
    lines, rows = _rows(path)
    parts = lines[rows[row]].split(",")
    parts[col + 1] = value
    lines[rows[row]] = ",".join(parts)
    path.write_text("\n".join(lines) + "\n")


def _fit(scen: Path, out: Path) -> int:
    return cli.main(
        ["rca", "fit", "--scenario", str(scen), "--out", str(out), "--incidents", "50"]
        + ["--epochs", "1", "--seed", "1"]
    )


def test_fit_names_a_short_normal_period(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    make_system(tmp_path / "shop", n_services=8, normal_rows=NEED - 1, issues=1, seed=5)
    assert _fit(tmp_path / "shop", tmp_path / "m") == 2
    line = _error_line(capsys)
    assert f"has {NEED - 1} rows" in line and f"at least {NEED}" in line
    assert "noissue/metrics.csv" in line
    assert "node names" not in line  # the names match: that is not the reason
    assert not (tmp_path / "m").exists()


def test_synthesiser_needs_min_normal_points_rows(tmp_path: Path) -> None:
    make_system(tmp_path / "short", n_services=8, normal_rows=NEED - 1, issues=1, seed=5)
    make_system(tmp_path / "enough", n_services=8, normal_rows=NEED, issues=1, seed=5)
    graph, normal = read_system(tmp_path / "short")
    with pytest.raises(DataError, match=f"has {NEED - 1} rows; at least {NEED}"):
        SystemModel(graph, normal)
    graph, normal = read_system(tmp_path / "enough")
    assert SystemModel(graph, normal).candidates.size > 0


@pytest.mark.parametrize("value", ["inf", "-inf", "1e999"])
def test_fit_refuses_infinite_normal_values(
    value: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    info = make_system(tmp_path / "shop", n_services=8, normal_rows=60, issues=1, seed=5)
    _set_cell(tmp_path / "shop" / "noissue" / "metrics.csv", 6, 2, value)
    assert _fit(tmp_path / "shop", tmp_path / "m") == 2
    line = _error_line(capsys)
    # the third column is the third service's cpu_usage (make_system's column order)
    assert "noissue/metrics.csv" in line and f"{info['names'][2]}/cpu_usage" in line
    assert "data row 7 (time 1700000360)" in line and "finite" in line
    assert not (tmp_path / "m").exists()


def test_infinite_window_value_names_the_window(tmp_path: Path) -> None:
    make_system(tmp_path / "shop", n_services=8, normal_rows=60, issues=1, seed=5)
    window = tmp_path / "shop" / "test" / "issue_0" / "metrics.csv"
    _set_cell(window, 4, 0, "-inf")
    scenario = load_scenario(tmp_path / "shop")
    with pytest.raises(DataError, match=r"issue_0/metrics.csv: column .*, data row 5 .* is -inf"):
        scenario.incident(scenario.issues("test")[0])


def test_nan_stays_a_missing_value(tmp_path: Path) -> None:
    make_system(tmp_path / "shop", n_services=8, normal_rows=60, issues=1, seed=5)
    path = tmp_path / "shop" / "noissue" / "metrics.csv"
    _set_cell(path, 3, 1, "nan")
    _set_cell(path, 4, 1, "")
    df = read_metrics_csv(path, unique_times=True)
    assert int(df.iloc[:, 1].isna().sum()) == 2


def test_repeated_normal_timestamp_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    make_system(tmp_path / "shop", n_services=8, normal_rows=60, issues=1, seed=5)
    path = tmp_path / "shop" / "noissue" / "metrics.csv"
    lines, rows = _rows(path)
    first = lines[rows[0]].split(",", 1)[0]
    lines[rows[1]] = first + "," + lines[rows[1]].split(",", 1)[1]
    path.write_text("\n".join(lines) + "\n")
    assert _fit(tmp_path / "shop", tmp_path / "m") == 2
    line = _error_line(capsys)
    assert "noissue/metrics.csv" in line and f"timestamp {float(first):.15g}" in line
    with pytest.raises(DataError, match="more than one row"):  # rca petshop's reader too
        load_scenario(tmp_path / "shop")


def test_repeated_window_timestamp_is_still_dropped(tmp_path: Path) -> None:
    """Windows keep the documented de-duplication (docs/petshop.md "Robustness")."""
    make_system(tmp_path / "shop", n_services=8, normal_rows=60, issues=1, seed=5)
    window = tmp_path / "shop" / "test" / "issue_0" / "metrics.csv"
    lines, rows = _rows(window)
    lines[rows[1]] = lines[rows[0]].split(",", 1)[0] + "," + lines[rows[1]].split(",", 1)[1]
    window.write_text("\n".join(lines) + "\n")
    assert len(read_metrics_csv(window)) == len(rows) - 1
