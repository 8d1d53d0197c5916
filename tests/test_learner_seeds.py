"""Training seeds of a dynamic-mode learner summarised against the clone
(``benchmarks/dynamic/learner_seeds.py``): gaps are paired per frozen run, averaged over the seeds
inside each run, and only runs every seed has are used."""

from __future__ import annotations

import pytest

from benchmarks.dynamic.learner_seeds import learner_summary


def _result(model: str, slowdowns: dict[tuple[str, int], tuple[float, float]]) -> dict:
    return {
        "model": model,
        "runs": [
            {
                "trace": t,
                "seed": s,
                "model": {"mean_slowdown": m, "p99_queue_delay_s": 100.0},
                "clone": {"mean_slowdown": c, "p99_queue_delay_s": 120.0},
            }
            for (t, s), (m, c) in slowdowns.items()
        ],
    }


def test_seeds_are_averaged_inside_each_shared_run() -> None:
    a = _result("s0", {("x", 1): (0.9, 1.0), ("x", 2): (2.2, 2.0), ("y", 1): (5.0, 1.0)})
    b = _result("s1", {("x", 1): (1.1, 1.0), ("x", 2): (1.8, 2.0)})
    s = learner_summary([a, b])
    assert s["n_seeds"] == 2 and s["n_runs"] == 2  # ("y", 1) is only in one seed's output
    assert [round(p["gap_pct"], 6) for p in s["per_seed"]] == [0.0, 0.0]
    assert s["gap_pct"] == pytest.approx(0.0)
    assert s["seed_sd_pct"] == pytest.approx(0.0)
    c = _result("s2", {("x", 1): (0.8, 1.0), ("x", 2): (1.6, 2.0)})
    s = learner_summary([a, b, c])
    assert s["gap_pct"] == pytest.approx(-20.0 / 3)
    assert s["per_seed"][2]["gap_pct"] == pytest.approx(-20.0)
    assert s["model_p99_queue_delay_s"] == 100.0 and s["clone_p99_queue_delay_s"] == 120.0


def test_outputs_without_shared_runs_or_rows_are_refused() -> None:
    a = _result("s0", {("x", 1): (1.0, 1.0)})
    b = _result("s1", {("x", 2): (1.0, 1.0)})
    with pytest.raises(ValueError, match="share no run"):
        learner_summary([a, b])
    with pytest.raises(ValueError, match="no per-run rows"):
        learner_summary([{"overall": {}}])
