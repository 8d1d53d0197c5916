"""The host-stranding probes' ``gap_report`` (``benchmarks/experiments/2026-11-30-host-stranding-probes``):
gaps to FGD and paired differences, by hand."""

from __future__ import annotations

import importlib

import pytest

# an experiment folder's name starts with its date, so it is imported by name, not by an import statement
gap_report = importlib.import_module(
    "benchmarks.experiments.2026-11-30-host-stranding-probes.probe_common"
).gap_report


def test_gap_report_by_hand() -> None:
    got = {
        ("FGD", "a", 1): 10.0, ("FGD", "a", 2): 10.0, ("FGD", "b", 1): 4.0, ("FGD", "b", 2): 4.0,
        ("R", "a", 1): 9.0, ("R", "a", 2): 9.0, ("R", "b", 1): 4.0, ("R", "b", 2): 4.0,
        ("X", "a", 1): 8.0, ("X", "a", 2): 9.0, ("X", "b", 1): 3.0, ("X", "b", 2): 4.0,
    }  # fmt: skip
    rep = gap_report(got, ["FGD", "R", "X"], ["a", "b"], [1, 2], base="R")
    assert rep["FGD"]["gap_vs_fgd_pct"] == 0.0
    assert rep["R"]["per_trace_gap_pct"] == {"a": -10.0, "b": 0.0}
    assert rep["R"]["gap_vs_fgd_pct"] == -5.0 and "paired_vs_R_points" not in rep["R"]
    # X - R per episode, in points of FGD: a1 -10, a2 0, b1 -25, b2 0
    assert rep["X"]["paired_vs_R_points"] == pytest.approx(-8.75)
    assert rep["X"]["better_worse_equal_vs_R"] == [2, 0, 2]
    assert rep["X"]["paired_vs_R_se"] == pytest.approx(5.907, abs=1e-3)
    assert "paired_vs_R_points" not in gap_report(got, ["X"], ["a"], [1, 2])["X"]
