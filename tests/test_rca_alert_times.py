"""Every ranker reads an alert's ``startsAt`` alike: RFC 3339 or unix seconds; datasets in milliseconds are refused.

Before 2026-12-06 a number was read three ways: the count and time baselines (and the GBDT
baselines' age features) called ``.replace`` on it and took it for "no time", the GAT's time
features took any number as unix seconds (milliseconds landed in the year 57,000), and the
propagation ranker took it as seconds too. One dataset written with unix seconds or milliseconds
instead of RFC 3339 then scored differently per method, without a word. Now every
ranker takes a number as unix seconds and a string through
:func:`fleetmind.rca.features.times.parse_time`, and a dataset is refused when it is read where
it carries what ``fleetmind.data.petshop.check_unix_seconds`` refuses in metrics files: numbers
from ``MS_LIKE`` (1e11 s, the year 5138) on.
"""

from __future__ import annotations

import math
from datetime import UTC, datetime
from typing import Any

import numpy as np
import pytest

from fleetmind.data import petshop
from fleetmind.data.errors import DataError
from fleetmind.data.graph import DependencyGraph, GraphEdge, GraphNode
from fleetmind.rca.baselines import EarliestAlertAnalyzer, MostAlertsAnalyzer
from fleetmind.rca.features.times import MS_LIKE, parse_time
from fleetmind.rca.gbdt import _Featurizer
from fleetmind.rca.propagation import PropagationConfig, PropagationRanker, alert_item

T0 = 1_767_225_600.0  # 2026-01-01T00:00:00Z


def _iso(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def _graph() -> DependencyGraph:
    """``web -> api -> db`` (each depends on the next)."""
    nodes = [GraphNode(f"svc/{s}", "service", "c0", {"service": s}) for s in ("web", "api", "db")]
    edges = [
        GraphEdge("svc/web", "svc/api", "calls"),
        GraphEdge("svc/api", "svc/db", "calls"),
    ]
    return DependencyGraph("g", nodes, edges)


def _alerts(time: Any) -> list[dict[str, Any]]:
    """Alerts on db (first), api and web (twice), ``time(seconds after T0)`` as their start."""
    spec = [("db", 0.0), ("api", 40.5), ("web", 90.25), ("web", 95.0)]
    return [
        {
            "status": "firing",
            "labels": {"alertname": "HighLatency", "severity": "warning", "service": s},
            "annotations": {},
            "startsAt": time(T0 + dt),
        }
        for s, dt in spec
    ]


def test_parse_time_refuses_milliseconds_and_non_finite_numbers() -> None:
    assert MS_LIKE == petshop.MS_LIKE  # the metrics reader's threshold
    assert parse_time(T0) == T0
    assert parse_time(int(T0)) == T0
    assert parse_time(_iso(T0 + 0.5)) == T0 + 0.5
    for ms in (T0 * 1000, int(T0 * 1000), -T0 * 1000):
        with pytest.raises(DataError, match="looks like milliseconds"):
            parse_time(ms)
    for bad in (math.nan, math.inf, -math.inf, 10**400):
        with pytest.raises(DataError, match="not a finite number"):
            parse_time(bad)
    with pytest.raises(DataError, match="not RFC 3339"):
        parse_time(True)  # a JSON boolean is no time
    # before 1970 is "no time", for numbers as for strings
    assert parse_time(-1.5) is None and parse_time("1969-12-31T23:59:59Z") is None


def test_every_ranker_reads_unix_seconds_as_rfc3339() -> None:
    g = _graph()
    iso, secs = _alerts(_iso), _alerts(lambda t: t)
    for analyzer in (EarliestAlertAnalyzer(), MostAlertsAnalyzer(), PropagationRanker()):
        a = analyzer.find_root_causes(g, iso).causes
        b = analyzer.find_root_causes(g, secs).causes
        assert [(c.node, c.score) for c in a] == [(c.node, c.score) for c in b], analyzer.name
    # earliest_alert ranks db first from the times alone (it read numbers as "no time": a tie)
    assert EarliestAlertAnalyzer().find_root_causes(g, secs).causes[0].node == "svc/db"
    feats = _Featurizer({}, hops=2)
    _, x_iso, _ = feats(g, iso)
    _, x_secs, _ = feats(g, secs)
    assert np.array_equal(np.asarray(x_iso), np.asarray(x_secs))  # age/lead columns included
    assert (np.asarray(x_secs) > 0.0).any()


def test_every_ranker_refuses_a_string_that_is_no_time() -> None:
    g = _graph()
    alerts = _alerts(_iso)
    alerts[0]["startsAt"] = "yesterday"
    for analyzer in (EarliestAlertAnalyzer(), MostAlertsAnalyzer(), PropagationRanker()):
        with pytest.raises(DataError, match="alert timestamp"):
            analyzer.find_root_causes(g, alerts)
    with pytest.raises(DataError, match="alert timestamp"):
        _Featurizer({}, hops=2)(g, alerts)
    with pytest.raises(DataError, match="alert timestamp"):
        alert_item(0, alerts[0], PropagationConfig())


def test_the_rankers_take_the_services_seconds_up_to_the_year_9999() -> None:
    """The service hands the rankers unix seconds of instants it has checked, up to the year 9999
    (``serving.schemas.LATEST``): 2.5e11 s is no millisecond value there, and refusing it turned
    a valid ``/api/v1/rca`` request into a 422. Milliseconds are refused where a dataset is read
    (``validate_incident``), not at ranking time."""
    late = datetime(9998, 12, 31, tzinfo=UTC).timestamp()
    assert late > MS_LIKE
    g = _graph()
    iso = _alerts(lambda t: _iso(t - T0 + late))
    secs = _alerts(lambda t: t - T0 + late)
    for analyzer in (EarliestAlertAnalyzer(), MostAlertsAnalyzer(), PropagationRanker()):
        a = analyzer.find_root_causes(g, iso).causes
        b = analyzer.find_root_causes(g, secs).causes
        assert [c.node for c in a] == [c.node for c in b], analyzer.name
    assert alert_item(0, secs[0], PropagationConfig()).start == late
    # a number that is no time reads as none, as a string before 1970 does: not finite, or
    # before 1970
    for none in (math.nan, math.inf, -5, -5.0):
        secs[0]["startsAt"] = none
        assert alert_item(0, secs[0], PropagationConfig()).start == 0.0
    iso[0]["startsAt"] = "1969-12-31T23:59:55Z"
    assert alert_item(0, iso[0], PropagationConfig()).start == 0.0


def test_the_gat_time_features_read_integer_seconds_as_float_seconds() -> None:
    """The GAT's own time features took a float as seconds unchecked but sent an int through the
    dataset check: 253339228800 (the year 9998) was refused, 253339228800.0 ranked. Both are
    seconds now (MLflow's pyfunc passes JSON numbers as they come)."""
    from fleetmind.rca.features.times import _alert_times

    late = datetime(9998, 12, 31, tzinfo=UTC).timestamp()
    for start in (int(late), int(T0)):
        a = {"status": "firing", "startsAt": start, "endsAt": start + 60}
        b = {"status": "firing", "startsAt": float(start), "endsAt": float(start + 60)}
        assert _alert_times(a) == _alert_times(b)
        assert _alert_times(a)[0] == float(start)


def test_a_missing_start_is_still_no_time() -> None:
    """Absent, null, empty and Alertmanager's zero time read alike: ``inf`` for the baselines,
    0.0 for the propagation ranker, as an absent one before."""
    g = _graph()
    seen = []
    for missing in (None, "", "0001-01-01T00:00:00Z", "absent"):
        alerts = _alerts(_iso)
        if missing == "absent":
            del alerts[0]["startsAt"]
        else:
            alerts[0]["startsAt"] = missing
        assert alert_item(0, alerts[0], PropagationConfig()).start == 0.0
        causes = EarliestAlertAnalyzer().find_root_causes(g, alerts).causes
        seen.append([(c.node, repr(c.score)) for c in causes])
    assert seen[1:] == seen[:-1]


def test_integers_before_1970_or_past_any_date_read_alike() -> None:
    """An integer before 1970 is no time for every ranker (the GAT took it as a time); one too
    large for a float is no time for the rankers and refused by the GAT's reader, never an
    ``OverflowError``."""
    from fleetmind.rca.baselines import _ts
    from fleetmind.rca.features.times import _alert_times

    assert math.isnan(_alert_times({"startsAt": -5})[0])
    assert alert_item(0, {"startsAt": -5}, PropagationConfig()).start == 0.0
    assert _ts(-5) == math.inf
    huge = 10**400
    assert alert_item(0, {"startsAt": huge}, PropagationConfig()).start == 0.0
    assert _ts(huge) == math.inf
    with pytest.raises(DataError):
        _alert_times({"startsAt": huge})
