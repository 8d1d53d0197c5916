"""The incident grouping rules (:class:`fleetmind.serving.incidents.grouper.Grouper`), without SQL.

Graphs here are plain adjacency dicts; their neighbourhoods are breadth-first searches, as the
service's :meth:`fleetmind.serving.graphstore.GraphView.neighbourhood` does on the served graph.
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Callable
from collections.abc import Set as AbstractSet

import pytest

from fleetmind.serving.incidents.grouper import Grouper, OpenIncident

# a - b - c - d - e (a chain), and x alone
CHAIN = {"a": ["b"], "b": ["a", "c"], "c": ["b", "d"], "d": ["c", "e"], "e": ["d"], "x": []}


def hood_of(adj: dict[str, list[str]]) -> Callable[[str, int], AbstractSet[str]]:
    """``(node, hops) -> nodes within hops`` of an undirected adjacency dict."""

    def hood(node: str, hops: int) -> frozenset[str]:
        seen, frontier = {node}, [node]
        for _ in range(hops):
            frontier = [m for v in frontier for m in adj[v] if m not in seen]
            seen.update(frontier)
        return frozenset(seen)

    return hood


class Ids:
    """Incident ids as the database would hand them out (counts the calls)."""

    def __init__(self, start: int = 1) -> None:
        self.next = itertools.count(start)
        self.calls = 0

    def __call__(self) -> int:
        self.calls += 1
        return next(self.next)


def test_alerts_on_one_node_open_one_incident_then_join_it() -> None:
    g, ids = Grouper(window_s=600.0, hops=2), Ids()
    first = g.assign(100.0, "a", "c1", hood_of(CHAIN), ids)
    assert first.opened and first.incident == 1 and first.merged == ()
    again = g.assign(150.0, "a", "c1", hood_of(CHAIN), ids)
    assert not again.opened and again.incident == 1
    assert ids.calls == 1 and g.open_count == 1
    inc = g.get(1)
    assert inc is not None
    assert (inc.first_ts, inc.last_ts, inc.nodes, inc.clusters) == (100.0, 150.0, {"a"}, {"c1"})


@pytest.mark.parametrize(("hops", "joins"), [(1, False), (2, True), (3, True)])
def test_an_alert_joins_over_a_dependency_path_of_at_most_hops(hops: int, joins: bool) -> None:
    g, ids = Grouper(window_s=600.0, hops=hops), Ids()
    g.assign(0.0, "a", None, hood_of(CHAIN), ids)
    placed = g.assign(10.0, "c", None, hood_of(CHAIN), ids)  # a - b - c: two hops
    assert placed.opened is not joins
    assert g.open_count == (1 if joins else 2)


def test_an_unconnected_node_opens_its_own_incident() -> None:
    g, ids = Grouper(window_s=600.0, hops=5), Ids()
    g.assign(0.0, "a", "c1", hood_of(CHAIN), ids)
    placed = g.assign(
        1.0, "x", "c1", hood_of(CHAIN), ids
    )  # same cluster, but a node no path reaches
    assert placed.opened and g.open_count == 2


@pytest.mark.parametrize(
    ("ts", "joins"),
    [(999.0, False), (1000.0, True), (1300.0, True), (2600.0, True), (2601.0, False)],
)
def test_the_window_spans_the_incident_first_to_last_alert_inclusive(
    ts: float, joins: bool
) -> None:
    g, ids = Grouper(window_s=600.0, hops=2), Ids()
    g.assign(1600.0, "a", None, hood_of(CHAIN), ids)
    g.assign(2000.0, "b", None, hood_of(CHAIN), ids)  # the incident spans 1600..2000
    placed = g.assign(ts, "a", None, hood_of(CHAIN), ids)
    assert placed.opened is not joins


def test_a_late_alert_extends_the_window_for_the_next() -> None:
    g, ids = Grouper(window_s=600.0, hops=2), Ids()
    g.assign(0.0, "a", None, hood_of(CHAIN), ids)
    assert not g.assign(500.0, "b", None, hood_of(CHAIN), ids).opened
    # 1,100 s after the first alert, but within 600 s of the incident's latest one
    assert not g.assign(1100.0, "a", None, hood_of(CHAIN), ids).opened
    assert g.assign(1701.0, "a", None, hood_of(CHAIN), ids).opened


def test_alerts_without_a_node_group_by_cluster_label() -> None:
    g, ids = Grouper(window_s=600.0, hops=2), Ids()
    g.assign(0.0, "a", "c1", hood_of(CHAIN), ids)
    assert not g.assign(5.0, None, "c1", hood_of(CHAIN), ids).opened
    assert g.assign(6.0, None, "c2", hood_of(CHAIN), ids).opened
    assert g.assign(7.0, None, None, hood_of(CHAIN), ids).opened  # no node, no cluster: alone
    assert g.open_count == 3


def test_an_alert_between_two_incidents_merges_them_into_the_oldest() -> None:
    g, ids = Grouper(window_s=600.0, hops=2), Ids()
    g.assign(50.0, "a", "c1", hood_of(CHAIN), ids)  # incident 1
    g.assign(10.0, "e", "c2", hood_of(CHAIN), ids)  # incident 2: four hops from a
    placed = g.assign(100.0, "c", "c3", hood_of(CHAIN), ids)  # two hops from both
    assert placed.incident == 1 and placed.merged == (2,) and not placed.opened
    assert not g.is_open(2) and g.open_count == 1
    inc = g.get(1)
    assert inc is not None
    assert inc.nodes == {"a", "c", "e"} and inc.clusters == {"c1", "c2", "c3"}
    assert (inc.first_ts, inc.last_ts) == (10.0, 100.0)


def test_a_merged_incident_takes_no_more_alerts() -> None:
    g, ids = Grouper(window_s=600.0, hops=1), Ids()
    g.assign(0.0, "a", None, hood_of(CHAIN), ids)  # 1
    g.assign(0.0, "c", None, hood_of(CHAIN), ids)  # 2 (two hops from a)
    assert g.assign(1.0, "b", None, hood_of(CHAIN), ids).merged == (2,)
    assert g.assign(2.0, "d", None, hood_of(CHAIN), ids).incident == 1  # via c, now in 1


def test_firing_alerts_reopen_closed_incidents_and_resolved_ones_do_not() -> None:
    g, ids = Grouper(window_s=600.0, hops=2), Ids()
    g.assign(0.0, "a", None, hood_of(CHAIN), ids)
    assert not g.reopens(1, "firing")  # open: nothing to reopen
    g.settle({1: (1, 0)})  # its only alert resolved
    assert not g.is_open(1)
    assert g.reopens(1, "firing") and not g.reopens(1, "resolved")
    g.reopen(OpenIncident(1, 0.0, 0.0, {"a"}, set()), ts=900.0)
    inc = g.get(1)
    assert inc is not None and (inc.first_ts, inc.last_ts) == (0.0, 900.0)
    # the reopened incident's window now reaches 1,500 s
    assert g.assign(1400.0, "b", None, hood_of(CHAIN), ids).incident == 1


def test_settle_resolves_open_incidents_whose_alerts_all_resolved() -> None:
    g, ids = Grouper(window_s=600.0, hops=0), Ids()
    for node in ("a", "c", "e"):
        g.assign(0.0, node, None, hood_of(CHAIN), ids)  # 1, 2, 3
    out = g.settle({3: (2, 1), 1: (2, 0), 2: (0, 0), 9: (4, 0)})
    assert [(s.id, s.state, s.total, s.firing) for s in out] == [
        (1, "resolved", 2, 0),
        (2, "open", 0, 0),  # no alerts counted: nothing says it is over
        (3, "open", 2, 1),
        (9, "closed", 4, 0),  # not open before: only its counts change
    ]
    assert out[0].incident is not None and out[0].incident.nodes == {"a"}
    assert out[3].incident is None
    assert not g.is_open(1) and g.is_open(2) and g.is_open(3)


def test_forget_and_load_replace_the_open_set() -> None:
    g = Grouper(window_s=600.0, hops=2)
    g.load([OpenIncident(4, 0.0, 10.0, {"a"}, {"c1"}), OpenIncident(7, 0.0, 10.0, {"e"}, set())])
    assert g.open_count == 2
    ids = Ids(start=8)
    assert g.assign(20.0, "b", None, hood_of(CHAIN), ids).incident == 4
    g.forget([4])
    assert g.assign(30.0, "b", None, hood_of(CHAIN), ids).incident == 8


def random_graph(rng: random.Random, n: int) -> dict[str, list[str]]:
    adj: dict[str, list[str]] = {f"n{i}": [] for i in range(n)}
    for i in range(1, n):
        for j in rng.sample(range(i), k=min(i, rng.choice([0, 1, 1, 2]))):
            adj[f"n{i}"].append(f"n{j}")
            adj[f"n{j}"].append(f"n{i}")
    return adj


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_batches_group_exactly_as_alert_by_alert(seed: int) -> None:
    """The batch pool (open incidents within the batch's window) changes no decision."""
    rng = random.Random(seed)
    adj = random_graph(rng, 40)
    hood = hood_of(adj)
    nodes = [*adj, None]
    alerts = []
    t = 0.0
    for _ in range(400):
        t += rng.expovariate(1 / 30.0)  # a storm every so often, quiet gaps between
        node = rng.choice(nodes)
        alerts.append((t, node, rng.choice(["c1", "c2", None])))
    plain, batched = Grouper(300.0, 2), Grouper(300.0, 2)
    ids_p, ids_b = Ids(), Ids()
    got_p, got_b = [], []
    for start in range(0, len(alerts), 37):
        chunk = alerts[start : start + 37]
        got_p += [plain.assign(ts, n, c, hood, ids_p) for ts, n, c in chunk]
        with batched.batch([ts for ts, _, _ in chunk]):
            got_b += [batched.assign(ts, n, c, hood, ids_b) for ts, n, c in chunk]
        counts = {a.incident: (1, rng.choice([0, 1])) for a in got_p[-5:]}
        assert plain.settle(counts) == batched.settle(counts)
    assert got_p == got_b
    assert sum(a.opened for a in got_p) == ids_p.calls
    assert any(a.merged for a in got_p) and ids_p.calls > 10  # the rules were exercised
    merged = {m for a in got_p for m in a.merged}
    assert not any(plain.is_open(m) for m in merged)


@pytest.mark.parametrize("ts", [0.0, 600.0, 1200.0])
def test_the_batch_pool_keeps_incidents_at_the_window_edges(ts: float) -> None:
    g, ids = Grouper(window_s=600.0, hops=2), Ids()
    g.load([OpenIncident(1, 600.0, 600.0, {"a"}, set())])
    with g.batch([ts]):
        assert g.assign(ts, "b", None, hood_of(CHAIN), ids).incident == 1
    assert ids.calls == 0


# A rule that fires again after it resolved gets a new ActiveAt, hence a new startsAt
# (prometheus rules/alerting.go, AlertingRule.Eval): a new alert of the same fingerprint.
@pytest.mark.parametrize(
    ("status", "closed_ts", "ts", "reopens"),
    [
        ("resolved", 1000.0, 1000.0, True),
        ("resolved", 1000.0, 900.0, True),  # started before the resolution was grouped
        ("resolved", 1000.0, 1600.0, True),
        ("resolved", 1000.0, 1601.0, False),  # beyond the window: a new incident
        ("merged", 1000.0, 1000.0, False),
        ("open", None, 1000.0, False),  # still open: the time and graph rules decide
    ],
)
def test_a_new_episode_reopens_a_resolved_incident_within_the_window_of_its_closing(
    status: str, closed_ts: float | None, ts: float, reopens: bool
) -> None:
    assert Grouper(window_s=600.0, hops=2).reopens_episode(status, closed_ts, ts) is reopens


def test_an_alert_joins_the_incident_it_is_sent_into_and_merges_what_it_matches() -> None:
    g, ids = Grouper(window_s=600.0, hops=2), Ids()
    g.reopen(OpenIncident(5, 0.0, 0.0, {"x"}, set()), ts=100.0)  # its previous episode's
    assert g.assign(100.0, None, None, hood_of(CHAIN), ids, into=5).incident == 5
    g.assign(100.0, "a", None, hood_of(CHAIN), ids)  # 1
    placed = g.assign(110.0, "x", None, hood_of(CHAIN), ids, into=1)
    assert (placed.incident, placed.merged) == (1, (5,))
    assert ids.calls == 1


def test_a_long_firing_alert_does_not_take_a_later_storm_on_its_node() -> None:
    """Start times decide, whatever still fires: an incident whose alerts all started more than
    ``window_s`` before a new alert does not take it (a long-firing alert, as the simulator's
    noise has, would otherwise swallow every later storm within ``hops``)."""
    g, ids = Grouper(window_s=600.0, hops=2), Ids()
    g.assign(0.0, "a", "c1", hood_of(CHAIN), ids)  # NotReady on a, firing since 0
    g.settle({1: (1, 1)})  # still firing
    assert g.assign(601.0, "b", "c1", hood_of(CHAIN), ids).opened
    assert g.assign(601.0, "a", "c1", hood_of(CHAIN), ids).incident == 2
    assert ids.calls == 2
