"""The PetShop reader: which statistic is scored, jittered 1 s rows, a metrics.csv that is not UTF-8."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from fleetmind.data.errors import DataError
from fleetmind.data.petshop import (
    DetectorConfig,
    check_row_interval,
    detect_window,
    fit_baseline,
    read_metrics_csv,
)


def _frame(cols: list[tuple[str, str, str]], rows: int, t0: float, seed: int) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    level = np.array([0.2 if c[1] == "latency" else 100.0 for c in cols])
    x = level * (1 + 0.05 * rng.standard_normal((rows, len(cols))))
    return pd.DataFrame(
        x,
        index=pd.Index(t0 + 60.0 * np.arange(rows), name="time"),
        columns=pd.MultiIndex.from_tuples(cols),
    )


def test_the_statistic_with_a_baseline_is_scored() -> None:
    """The window has ``latency`` as ``Average`` and ``p90``, the normal period only ``p90``: the
    detector scores ``p90`` (before, it chose ``Average``, found no baseline and scored nothing)."""
    cfg = DetectorConfig()
    normal = _frame([("db", "latency", "p90"), ("db", "requests", "Sum")], 60, 1.7e9, 0)
    cols = [("db", "latency", "Average"), ("db", "latency", "p90"), ("db", "requests", "Sum")]
    window = _frame(cols, 8, 1.71e9, 1)
    window.iloc[3:, :2] *= 5.0  # the fault: latency rises
    alerts, unscored, _ = detect_window(window, fit_baseline(normal, cfg), cfg)
    assert unscored == []
    assert [(a["labels"]["metric"], a["labels"]["statistic"]) for a in alerts] == [
        ("latency", "p90")
    ]


def test_the_preferred_statistic_still_wins_when_it_has_a_baseline() -> None:
    cfg = DetectorConfig()
    cols = [("db", "latency", "Average"), ("db", "latency", "p90")]
    normal = _frame(cols, 60, 1.7e9, 0)
    window = _frame(cols, 8, 1.71e9, 1)
    window.iloc[3:, :] *= 5.0
    alerts, _, _ = detect_window(window, fit_baseline(normal, cfg), cfg)
    assert [a["labels"]["statistic"] for a in alerts] == ["Average"]


def test_a_statistic_without_any_baseline_is_reported_unscored() -> None:
    cfg = DetectorConfig()
    normal = _frame([("db", "requests", "Sum")], 60, 1.7e9, 0)
    window = _frame([("db", "latency", "Average"), ("db", "requests", "Sum")], 8, 1.71e9, 1)
    _, unscored, _ = detect_window(window, fit_baseline(normal, cfg), cfg)
    assert unscored == ["db/latency/Average"]


@pytest.mark.parametrize("step", [0.999, 0.995, 1.0, 300.0, 302.0])
def test_row_intervals_within_one_percent_of_the_bounds_pass(step: float) -> None:
    """1 s scrapes whose timestamps carry a few ms of jitter have a median interval just under 1 s."""
    times = 1.7e9 + step * np.arange(10)
    assert check_row_interval(times, "m.csv") == pytest.approx(step)


@pytest.mark.parametrize("step", [0.98, 0.5, 304.0, 600.0])
def test_row_intervals_beyond_the_slack_are_refused(step: float) -> None:
    with pytest.raises(DataError, match="the reader takes 1 s to 300 s"):
        check_row_interval(1.7e9 + step * np.arange(10), "m.csv")


def test_jittered_one_second_rows_are_read(tmp_path: Path) -> None:
    times = 1.7e9 + 0.999 * np.arange(12)  # a median interval of 0.999 s
    lines = ["microservice,db", "metric,latency", "statistic,Average", "unix_timestamp,"]
    lines += [f"{t:.3f},0.2" for t in times]
    p = tmp_path / "metrics.csv"
    p.write_text("\n".join(lines) + "\n")
    df = read_metrics_csv(p)
    assert check_row_interval(df.index.to_numpy(dtype=float), p) == pytest.approx(0.999)


def test_latin1_metrics_csv_is_named_as_not_utf8(tmp_path: Path) -> None:
    p = tmp_path / "metrics.csv"
    text = "microservice,db\nmetric,latency_µs\nstatistic,Average\nunix_timestamp,\n1700000000,1\n"
    p.write_bytes(text.encode("latin-1"))
    with pytest.raises(DataError, match=r"is not UTF-8 text \(byte 0xb5 at offset \d+\)"):
        read_metrics_csv(p)
