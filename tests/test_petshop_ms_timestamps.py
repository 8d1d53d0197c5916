"""Timestamps in milliseconds are refused in every metrics file, whatever the row interval.

Unix time counts seconds (POSIX ``time()``; the PetShop files' ``unix_timestamp`` column), while many
exporters write milliseconds (JavaScript's ``Date.now()``, Java's
``System.currentTimeMillis()``). Read as seconds, 1.7e12 lies in the year 55,000: every alert's ``startsAt`` clamped to
9999-12-31. The reader checked only the row interval, so milliseconds 1 to 300 ms apart (read as 1
to 300 s) passed; and ``rca petshop`` never looked at the normal period's times while ``rca fit``
refused them. Now both commands refuse any time from ``MS_LIKE`` (1e11 s, the year 5138) on, with
the same line.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from fleetmind.cli import main
from fleetmind.data.errors import DataError
from fleetmind.data.petshop import MS_LIKE, check_unix_seconds, load_scenario
from fleetmind.data.synth_system import make_system


def _retime(path: Path, t0: float, step: float) -> None:
    """Rewrite the data rows' times of a metrics CSV as ``t0 + k * step``."""
    lines = path.read_text().splitlines()
    rows = [i for i, line in enumerate(lines) if line[:1].isdigit()]
    for k, i in enumerate(rows):
        lines[i] = f"{t0 + step * k:.0f}," + lines[i].split(",", 1)[1]
    path.write_text("\n".join(lines) + "\n")


def _system(tmp_path: Path) -> Path:
    root = tmp_path / "shop"
    make_system(root, n_services=4, normal_rows=40, issues=1, seed=1)
    return root


def test_milliseconds_a_quarter_second_apart_are_refused_in_a_window(tmp_path: Path) -> None:
    root = _system(tmp_path)
    window = root / "test" / "issue_0" / "metrics.csv"
    _retime(window, 1.7e12, 250.0)  # read as seconds: 250 s apart, inside 1..300 s
    scenario = load_scenario(root)
    with pytest.raises(DataError, match="look like milliseconds: write unix seconds") as err:
        scenario.incident(scenario.issues("test")[0])
    assert str(window) in str(err.value)


def test_petshop_and_fit_refuse_a_millisecond_normal_period_with_the_same_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = _system(tmp_path)
    _retime(root / "noissue" / "metrics.csv", 1.7e12, 60_000.0)
    lines = []
    for argv in (
        ["rca", "petshop", "--scenario", str(root), "--methods", "propagation"],
        ["rca", "fit", "--scenario", str(root), "--out", str(tmp_path / "m")]
        + ["--incidents", "50", "--epochs", "1"],
    ):
        assert main(argv) == 2
        err = capsys.readouterr().err.splitlines()
        lines += [ln for ln in err if ln.startswith("fleetmind: error:")]
    assert len(lines) == 2 and lines[0] == lines[1], lines
    assert "noissue/metrics.csv: rows are 60000 s apart" in lines[0]
    assert "the timestamps look like milliseconds" in lines[0]


def test_check_unix_seconds_bounds() -> None:
    check_unix_seconds([1.7e9, 1.7e9 + 60], "f.csv")  # seconds: fine
    check_unix_seconds([], "f.csv")
    with pytest.raises(DataError, match="after the year 5138"):
        check_unix_seconds([MS_LIKE], "f.csv")  # one row: no interval to name
    with pytest.raises(DataError, match="after the year 5138"):
        check_unix_seconds([1.7e12, 1.7e12 + 5.0], "f.csv")
    assert math.isclose(MS_LIKE, 1e11)
