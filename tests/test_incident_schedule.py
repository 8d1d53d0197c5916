"""When the incident worker ranks (:class:`fleetmind.serving.incidents.worker.RankSchedule`), no thread.

Times are monotonic seconds passed in, so the debounce is checked without sleeping.
"""

from __future__ import annotations

import pytest

from fleetmind.serving.incidents import IncidentConfig
from fleetmind.serving.incidents.worker import RankSchedule


def test_direct_calls_rank_every_touched_incident_now() -> None:
    s = RankSchedule(interval_s=2.0)
    s.ranked(1, 100.0)
    assert s.after_batch({3, 1, 2}, 100.5, defer=False, backlog=True) == [1, 2, 3]
    assert s.wait_s(100.5) == 1.0  # nothing queued


def test_a_backlog_defers_rankings_until_it_is_grouped() -> None:
    s = RankSchedule(interval_s=2.0)
    assert s.after_batch({1, 2}, 10.0, defer=True, backlog=True) == []
    assert s.after_batch({2}, 11.0, defer=True, backlog=True) == []  # stays due since 10.0
    assert s.take_due(9.9) == []
    assert sorted(s.take_due(10.0)) == [1, 2]
    assert s.take_due(100.0) == []  # taken once


def test_an_incident_ranked_recently_waits_for_the_interval() -> None:
    s = RankSchedule(interval_s=2.0)
    s.ranked(1, 10.0)
    assert s.after_batch({1, 2}, 11.0, defer=True, backlog=False) == [2]
    assert s.wait_s(11.0) == pytest.approx(1.0)  # due at 12.0
    assert s.wait_s(11.5) == pytest.approx(0.5)
    assert s.take_due(11.9) == [] and s.take_due(12.0) == [1]
    s.ranked(1, 12.0)
    assert s.after_batch({1}, 14.0, defer=True, backlog=False) == [1]  # the interval has passed


def test_queued_rankings_can_be_dropped_or_cleared() -> None:
    s = RankSchedule(interval_s=2.0)
    s.queue([1, 2, 3], 5.0)
    s.queue([1], 9.0)  # already queued: keeps its earlier due time
    s.drop([2])
    assert s.wait_s(0.0) == 1.0 and s.wait_s(4.995) == pytest.approx(0.01)
    assert sorted(s.take_due(5.0)) == [1, 3]
    s.queue([4], 5.0)
    s.clear()
    assert s.take_due(1e9) == []


def test_config_overrides_apply_by_name_and_unknown_names_fail() -> None:
    from fleetmind.serving.db import Database
    from fleetmind.serving.defaults.example import build_example_graph
    from fleetmind.serving.graphstore import GraphStore
    from fleetmind.serving.incidents import IncidentManager

    db = Database("sqlite://")
    graphs = GraphStore(build_example_graph(), "t")
    m = IncidentManager(db, graphs, None, IncidentConfig(hops=3, top_k=7), window_s=60.0)  # type: ignore[arg-type]
    assert (m.config.hops, m.config.top_k, m.config.window_s) == (3, 7, 60.0)
    assert (m.grouper.hops, m.grouper.window_s) == (3, 60.0)
    m.hops = 1
    assert m.grouper.hops == 1 and m.config.hops == 1
    with pytest.raises(TypeError):
        IncidentManager(db, graphs, None, hop=3)  # type: ignore[arg-type]
    db.dispose()


def test_rankings_older_than_the_interval_are_forgotten() -> None:
    """One entry per incident ever ranked stayed for the life of the process (3,000 incidents
    resolved and purged left 3,000); only rankings that can still defer one are kept."""
    s = RankSchedule(interval_s=5.0)
    for i in range(20_000):  # an incident ranked every 10 ms: at most 500 within the interval
        s.ranked(i, i * 0.01)
    assert len(s._last) <= 2 * 1024 + 500
    now = 20_000 * 0.01
    recent = 19_999  # ranked 10 ms ago: a new alert for it still waits for the interval
    assert s.after_batch([recent], now, defer=True, backlog=False) == []
    assert s.after_batch([5], now, defer=True, backlog=False) == [5]  # long ago: ranked now
    s.drop([recent])
    assert recent not in s._last
