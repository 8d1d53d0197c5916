"""``benchmarks.serving.service``: the clients' first burst apart from the rest of a run
(``burst_split``), and the ingestion rate per window (``window_rates``)."""

from __future__ import annotations

from benchmarks.serving.service import burst_split, pct, window_rates


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


def test_window_rates_counts_each_response_in_its_window() -> None:
    # 50 alerts at 1, 2, 4 s; 100 at 6 s; 50 at 12.6 s (the last window is 2.6 s long: kept,
    # divided by its own length)
    done = [(1.0, 50), (2.0, 50), (4.0, 50), (6.0, 100), (12.6, 50)]
    assert window_rates(done, 5.0) == [30.0, 20.0, round(50 / 2.6, 1)]
    # a tail under half a window is dropped: it would read as a spike or a dip
    assert window_rates([(1.0, 50), (5.5, 50)], 5.0) == [10.0]
    # a run shorter than one window: its own rate
    assert window_rates([(0.1, 50), (0.2, 50)], 5.0) == [500.0]
    assert window_rates([], 5.0) == []
