"""Cluster-less shared infrastructure is reached by incident grouping but not crossed.

In the example graph (``serving/defaults/graph.json``) every service of both clusters
``depends_on`` ``global/dns``, ``global/config`` and ``global/registry``. Crossed, those nodes put
every service within 2 hops (``INCIDENT_HOPS``) of every other, so a GPU XID storm in ``c0`` and a
host going down in ``c1`` three minutes later became one incident, ranked on both storms' alerts:
the released GAT scored the ``c1`` host 0.049 and it was never notified. Reached, an alert on the
shared node itself (CoreDNS down on ``global/dns``) still groups with the services that depend on
it, so the example DNS storm stays one incident whose top cause is ``global/dns``.
"""

from __future__ import annotations

import itertools
import json
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from fleetmind.data.graph import DependencyGraph, GraphEdge, GraphNode
from fleetmind.serving.alertmap import node_for_alert
from fleetmind.serving.db import Database
from fleetmind.serving.defaults.example import build_example_graph
from fleetmind.serving.graphstore import GraphStore, GraphView, barrier_nodes, shared_nodes
from fleetmind.serving.incidents import IncidentManager
from fleetmind.serving.incidents.grouper import Grouper
from fleetmind.serving.registry import ModelRegistry
from fleetmind.serving.routers.alerts import alert_row
from fleetmind.serving.schemas import AlertIn

ROOT = Path(__file__).resolve().parents[1]
SHARED = {"global/dns", "global/config", "global/registry"}


def _storm(name: str) -> dict[str, Any]:
    return json.loads((ROOT / "examples" / name).read_text())


def _shifted(alerts: list[dict[str, Any]], seconds: float) -> list[dict[str, Any]]:
    out = []
    for a in alerts:
        t = datetime.fromisoformat(a["startsAt"].replace("Z", "+00:00")) + timedelta(
            seconds=seconds
        )
        out.append({**a, "startsAt": t.isoformat().replace("+00:00", "Z")})
    return out


def _host_down_in_c1() -> list[dict[str, Any]]:
    """examples/storm-host-down.json moved to cluster ``c1`` (host ``c1-h2``, same pods and
    services) and started 3 min after the XID storm; without its ``ServiceLatencyHigh`` on ``s1``,
    which reaches ``c0`` over a real dependency (see the last test)."""
    out = []
    for a in _storm("storm-host-down.json")["alerts"]:
        labels = {k: v.replace("c0", "c1") for k, v in a["labels"].items()}
        if (labels["alertname"], labels.get("service")) != ("ServiceLatencyHigh", "s1"):
            out.append({**a, "labels": labels})
    return _shifted(out, 180.0)


def _rows(alerts: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [alert_row(AlertIn.model_validate(a), 1000.0) for a in alerts]


def _group(view: GraphView, alerts: list[dict[str, Any]]) -> list[int]:
    """Incident id of each alert, grouped in the given order (merges followed)."""
    grouper, ids = Grouper(window_s=600.0, hops=2), itertools.count(1)
    out: list[int] = []
    for t, a in enumerate(alerts):
        node = node_for_alert(view.graph, a["labels"])
        cluster = a["labels"].get("cluster")
        placed = grouper.assign(float(t), node, cluster, view.neighbourhood, lambda: next(ids))
        out = [placed.incident if i in placed.merged else i for i in out]
        out.append(placed.incident)
    return out


@pytest.fixture(scope="module")
def registry() -> ModelRegistry:
    reg = ModelRegistry(None, "heuristic:builtin-bestfit")  # the released GAT
    reg.load()
    return reg


@pytest.fixture()
def manager(tmp_path: Path, registry: ModelRegistry) -> IncidentManager:
    db = Database(f"sqlite:///{tmp_path}/i.db")
    db.create_all()
    return IncidentManager(db, GraphStore(build_example_graph(), "t"), registry, window_s=600.0)


def test_the_example_graph_shared_nodes_are_reached_not_crossed() -> None:
    g = build_example_graph()
    assert {g.nodes[i].id for i in shared_nodes(g)} == SHARED
    assert not {g.nodes[i].id for i in barrier_nodes(g)} & SHARED
    view = GraphView(g, 1)
    hood = view.neighbourhood("c1/svc/s3", 2)
    assert SHARED <= hood  # reached
    assert not any(n.startswith("c0/") for n in hood)  # not crossed
    services = {n.id for n in g.nodes if n.kind == "service"}
    assert services <= view.neighbourhood("global/dns", 1)  # a start is expanded


def test_unrelated_faults_in_two_clusters_open_two_incidents(manager: IncidentManager) -> None:
    xid = _storm("storm-gpu-xid.json")
    manager.db.store_alerts(_rows(xid["alerts"]))
    manager.process_pending()
    manager.db.store_alerts(_rows(_host_down_in_c1()))
    manager.process_pending()
    incidents = manager.db.list_incidents("open")
    tops = sorted((i["alert_count"], i["causes"][0]["node"]) for i in incidents)
    assert tops == [(6, "c0/gpu/c0-h1/1"), (6, "c1/host/c1-h2")]


def test_the_dns_storm_stays_one_incident_blamed_on_dns(manager: IncidentManager) -> None:
    dns = _storm("storm-dns.json")
    manager.db.store_alerts(_rows(dns["alerts"]))
    manager.process_pending()
    (inc,) = manager.db.list_incidents("open")
    assert inc["alert_count"] == len(dns["alerts"])
    assert inc["causes"][0]["node"] == dns["expected_root"] == "global/dns"
    # services' alerts first, CoreDNS's last: still one incident (the relation is symmetric)
    view = GraphView(build_example_graph(), 1)
    assert set(_group(view, dns["alerts"][::-1])) == {1}


def test_a_real_cross_cluster_call_is_still_crossed() -> None:
    # c0/svc/s0 and c1/svc/s0 call each other, and c1/svc/s0 calls c1/svc/s1
    view = GraphView(build_example_graph(), 1)
    hood = view.neighbourhood("c1/svc/s1", 2)
    assert {n for n in hood if n.startswith("c0/")} == {"c0/svc/s0"}


def test_a_cluster_less_node_of_one_cluster_is_crossed_as_before() -> None:
    nodes = [
        GraphNode("c", "cluster", "c", {"cluster": "c"}),
        GraphNode("d", "cluster", "d", {"cluster": "d"}),
        GraphNode("c/svc/a", "service", "c", {"service": "a"}),
        GraphNode("c/svc/b", "service", "c", {"service": "b"}),
        GraphNode("d/svc/e", "service", "d", {"service": "e"}),
        GraphNode("mirror", "registry", None, {"service": "mirror"}),
        GraphNode("dns", "dns", None, {"service": "dns"}),
    ]
    edges = [
        GraphEdge("c/svc/a", "mirror", "depends_on"),
        GraphEdge("c/svc/b", "mirror", "depends_on"),
        GraphEdge("mirror", "dns", "depends_on"),  # a cluster-less dependent counts for no cluster
        GraphEdge("c/svc/a", "dns", "depends_on"),
        GraphEdge("d/svc/e", "dns", "depends_on"),
    ]
    g = DependencyGraph("t", nodes, edges)
    assert {g.nodes[i].id for i in shared_nodes(g)} == {"dns"}
    view = GraphView(g, 1)
    # mirror is crossed (b reaches a through it); dns is reached, not crossed (e stays out)
    assert view.neighbourhood("c/svc/b", 3) == {"c/svc/b", "mirror", "c/svc/a", "dns"}
    assert view.neighbourhood("d/svc/e", 3) == {"d/svc/e", "dns"}
    assert view.neighbourhood("dns", 1) == {"dns", "c/svc/a", "d/svc/e", "mirror"}


@pytest.mark.parametrize("home", ["global", "mgmt"])
def test_shared_infrastructure_in_a_cluster_of_its_own_is_not_crossed(home: str) -> None:
    """The example graph's shared services written with a cluster of their own (``global``, or a
    management cluster that hosts them for the others): services of c0 and c1 depend on them, so
    they are reached, not crossed, as when their ``cluster`` is null."""
    g = build_example_graph()
    for n in g.nodes:
        if n.id in SHARED:
            n.cluster = home
    g = DependencyGraph(g.name, g.nodes, g.edges)
    assert {g.nodes[i].id for i in shared_nodes(g)} == SHARED
    hood = GraphView(g, 1).neighbourhood("c1/svc/s3", 2)
    assert SHARED <= hood
    assert not any(n.startswith("c0/") for n in hood)


def test_a_node_its_own_cluster_and_one_other_depend_on_is_crossed() -> None:
    nodes = [
        GraphNode("c/svc/a", "service", "c", {"service": "a"}),
        GraphNode("c/svc/reg", "service", "c", {"service": "reg"}),
        GraphNode("d/svc/e", "service", "d", {"service": "e"}),
    ]
    edges = [
        GraphEdge("c/svc/a", "c/svc/reg", "depends_on"),
        GraphEdge("d/svc/e", "c/svc/reg", "depends_on"),
    ]
    g = DependencyGraph("t", nodes, edges)
    assert shared_nodes(g) == frozenset()
    assert GraphView(g, 1).neighbourhood("d/svc/e", 2) == {"d/svc/e", "c/svc/reg", "c/svc/a"}
