"""A metrics cell that is text but not a missing value is an error, not a value silently dropped.

``123ms`` or ``"1,234"`` used to become NaN through ``pd.to_numeric(errors="coerce")``, so a column
written with units vanished from the baseline and the windows without a word. docs/petshop.md: an
empty cell or ``nan`` is missing; anything else must be a number. Which strings count as missing
follows pandas ``read_csv``'s default ``na_values`` (``""``, ``nan``, ``NA``, ``N/A``, ``null``, ...:
https://pandas.pydata.org/docs/reference/api/pandas.read_csv.html), as before.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from fleetmind.cli import main
from fleetmind.data.errors import DataError
from fleetmind.data.petshop import read_metrics_csv
from fleetmind.data.synth_system import make_system


def _system(tmp_path: Path) -> Path:
    root = tmp_path / "shop"
    make_system(root, n_services=4, normal_rows=40, issues=1, seed=1)
    return root


def _set_cell(path: Path, row: int, col: int, value: str) -> None:
    """Write ``value`` into data row ``row`` (0-based), value column ``col`` (0-based)."""
    lines = path.read_text().splitlines()
    rows = [i for i, line in enumerate(lines) if line[:1].isdigit()]
    parts = lines[rows[row]].split(",")
    parts[col + 1] = value
    lines[rows[row]] = ",".join(parts)
    path.write_text("\n".join(lines) + "\n")


@pytest.mark.parametrize("text", ["123ms", '"1,234"', "-", "12 %"])
def test_text_cell_names_file_column_row_and_text(tmp_path: Path, text: str) -> None:
    window = _system(tmp_path) / "test" / "issue_0" / "metrics.csv"
    _set_cell(window, 2, 17, text)
    with pytest.raises(DataError) as err:
        read_metrics_csv(window)
    msg = str(err.value)
    assert str(window) in msg and "data row 3" in msg and "not a number" in msg
    assert text.strip('"') in msg
    assert "/latency_p90/p90" in msg  # column 17: the second latency_p90 column


@pytest.mark.parametrize("text", ["", "nan", "NaN", "NA", "N/A", "null", "  "])
def test_missing_value_strings_stay_missing(tmp_path: Path, text: str) -> None:
    normal = _system(tmp_path) / "noissue" / "metrics.csv"
    _set_cell(normal, 4, 0, text)
    _set_cell(normal, 5, 0, "17.5")
    df = read_metrics_csv(normal, unique_times=True)
    assert np.isnan(df.iat[4, 0]) and df.iat[5, 0] == 17.5


@pytest.mark.parametrize("command", ["petshop", "fit"])
def test_both_commands_stop_with_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], command: str
) -> None:
    root = _system(tmp_path)
    _set_cell(root / "noissue" / "metrics.csv", 0, 16, "0.05s")
    argv = {
        "petshop": ["rca", "petshop", "--scenario", str(root), "--methods", "propagation"],
        "fit": ["rca", "fit", "--scenario", str(root), "--out", str(tmp_path / "m")]
        + ["--incidents", "50", "--epochs", "1"],
    }[command]
    assert main(argv) == 2
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("fleetmind: error:")]
    assert len(err) == 1 and "'0.05s', not a number" in err[0] and "data row 1" in err[0], err
