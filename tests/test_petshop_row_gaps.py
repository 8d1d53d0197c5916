"""A gap in a window's (or ``rca fit``'s normal period's) rows is warned about, not refused.

The reader checks the median row interval only (1 s to 5 min), so a window with an hour missing in
its middle passed in silence, its rows after the gap read as if they followed on (the detector's
runs of consecutive anomalous rows, the pre-onset reference rows). The layout this follows has rows
at one regular interval (PetShop, Hardt et al., arXiv:2311.04806: 5-minute CloudWatch periods), so an
interval over 10 x the median is named, with the times around it. The normal period of ``rca petshop`` is not checked: only its distribution is used (docs/petshop.md).
"""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest

from fleetmind.cli import main
from fleetmind.data.petshop import ScenarioWarning, gap_warning, load_scenario
from fleetmind.data.synth_system import make_system


def _system(tmp_path: Path) -> Path:
    root = tmp_path / "shop"
    make_system(root, n_services=4, normal_rows=40, issues=1, seed=1)
    return root


def _shift_from(path: Path, row: int, seconds: float) -> None:
    """Move data rows ``row``, ``row + 1``, ... of a metrics CSV ``seconds`` later."""
    lines = path.read_text().splitlines()
    rows = [i for i, line in enumerate(lines) if line[:1].isdigit()]
    for i in rows[row:]:
        t, rest = lines[i].split(",", 1)
        lines[i] = f"{float(t) + seconds!r},{rest}"
    path.write_text("\n".join(lines) + "\n")


def test_gap_warning_names_the_largest_gap() -> None:
    times = [0.0, 60.0, 120.0, 3720.0, 3780.0, 3840.0]
    msg = gap_warning(times, "w.csv")
    assert msg is not None and msg.startswith("w.csv: 1 gap(s) of more than 10 x")
    assert "(60 s)" in msg and "3600 s, lies between rows at 120 and 3720" in msg
    assert gap_warning([0.0, 60.0, 120.0, 600.0], "w.csv") is None  # 8 x: no gap
    assert gap_warning([0.0, 60.0], "w.csv") is None


def test_window_gap_is_warned_and_the_window_still_scored(tmp_path: Path) -> None:
    root = _system(tmp_path)
    window = root / "test" / "issue_0" / "metrics.csv"
    _shift_from(window, 6, 3600.0)
    scenario = load_scenario(root)
    with pytest.warns(ScenarioWarning, match="3660 s, lies between rows") as caught:
        inc = scenario.incident(scenario.issues("test")[0])
    assert str(window) in str(caught[0].message)
    assert inc["window"]["n_points"] == 10


def test_petshop_ignores_a_gap_in_its_normal_period(tmp_path: Path) -> None:
    root = _system(tmp_path)
    _shift_from(root / "noissue" / "metrics.csv", 20, 86400.0)
    with warnings.catch_warnings():
        warnings.simplefilter("error", ScenarioWarning)
        load_scenario(root)


def test_fit_warns_about_a_gap_in_the_normal_period(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = _system(tmp_path)
    normal = root / "noissue" / "metrics.csv"
    _shift_from(normal, 20, 86400.0)
    argv = ["rca", "fit", "--scenario", str(root), "--out", str(tmp_path / "m")]
    assert main([*argv, "--incidents", "50", "--epochs", "1"]) == 0
    warned = [ln for ln in capsys.readouterr().err.splitlines() if "fleetmind: warning:" in ln]
    assert len(warned) == 1 and str(normal) in warned[0] and "86460 s" in warned[0], warned
