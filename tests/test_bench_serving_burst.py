"""``benchmarks/bench_serving.burst_split``: the clients' first burst apart from the rest of a run."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
from bench_serving import burst_split, pct  # noqa: E402


def test_first_request_of_each_client_is_the_burst() -> None:
    # (start s, latency ms, client), in finishing order: client 1's first request finishes last
    samples = [
        (0.001, 30.0, 0),
        (0.031, 12.0, 0),
        (0.043, 11.0, 0),
        (0.002, 95.0, 1),
        (0.097, 10.0, 1),
        (0.003, 40.0, 2),
    ]
    out = burst_split(samples)
    assert out["first_burst_n"] == 3
    assert out["first_burst_max_ms"] == 95.0
    # the p99 of the three later requests (12, 11, 10 ms) ignores the 95 ms first request
    assert out["p99_after_first_burst_ms"] == pct([12.0, 11.0, 10.0], 99) == 12.0


def test_samples_out_of_start_order_and_no_later_requests() -> None:
    # a later request listed before the first one of the same client is still "later"
    out = burst_split([(0.050, 70.0, 0), (0.004, 20.0, 0)])
    assert out == {"first_burst_n": 1, "first_burst_max_ms": 20.0, "p99_after_first_burst_ms": 70.0}
    # one request per client: no later requests, so no p99 for them
    assert burst_split([(0.001, 5.0, 0), (0.002, 6.0, 1)]) == {
        "first_burst_n": 2,
        "first_burst_max_ms": 6.0,
    }
    assert burst_split([]) == {"first_burst_n": 0}
