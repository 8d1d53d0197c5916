"""An alert whose labels name a shared node lands there, not on the host its exporter runs on.

docs/rca-data.md tells users to add an IB or ToR switch as a ``network`` node matched on
``{cluster, component}`` and to relabel the exporter's series with ``component``. The switch's
exporter, though, runs on a host: treydock/infiniband_exporter "must be run on a host that has an
active interface on the InfiniBand fabric" (https://github.com/treydock/infiniband_exporter,
README.md; default port 9315), so its scrape target, and every alert of its series, carries that
host's ``instance`` (``<address>:9315`` as a static target, or the host's name after the common
``instance`` relabelling). Its switch-port series carry ``guid``, ``port`` and ``switch``
(``collectors/switch.go`` there). Before, ``instance`` filled in ``node`` (docs/graph.md), the
host ``{cluster, node}`` and the switch ``{cluster, component}`` matched with two labels each, and
the host won on kind: the switch's outage was ranked as ``host_not_ready`` of the exporter's host.
"""

from __future__ import annotations

from typing import Any

import pytest

from fleetmind.data.graph import DependencyGraph, GraphEdge, GraphNode
from fleetmind.rca.features.mapping import map_alerts

SWITCH = "ib-i4l1s01"
BASE = {
    "alertname": "InfinibandSwitchPortDown",
    "severity": "critical",
    "cluster": "c0",
    "switch": SWITCH,
    "guid": "0x506b4b03005c2740",
    "port": "17",
    "job": "infiniband-exporter",
}
NE_SVC = "kps-prometheus-node-exporter"
NE_POD = "kps-prometheus-node-exporter-7hq9d"
NE_TARGET = {  # node-exporter's ServiceMonitor target labels (tests/test_alertmap_cluster_addresses.py)
    "instance": "10.0.0.12:9100",
    "job": "node-exporter",
    "namespace": "monitoring",
    "pod": NE_POD,
    "service": NE_SVC,
    "container": "node-exporter",
    "endpoint": "http-metrics",
}


def _graph() -> DependencyGraph:
    """Cluster ``c0``: hosts h0-h2 (``10.0.0.1x``) on the IB leaf switch, a Service ``a``."""
    nodes = [GraphNode("c0", "cluster", "c0", {"cluster": "c0"})]
    edges = []
    for i in range(3):
        nodes.append(
            GraphNode(
                f"c0/host/h{i}",
                "host",
                "c0",
                {"cluster": "c0", "node": f"h{i}"},
                {"addresses": [f"10.0.0.1{i}"]},
            )
        )
        edges += [
            GraphEdge(f"c0/host/h{i}", "c0", "member_of"),
            GraphEdge(f"c0/host/h{i}", f"c0/net/{SWITCH}", "depends_on"),
        ]
    ne_pod = {"cluster": "c0", "namespace": "monitoring", "pod": NE_POD}
    nodes += [
        GraphNode(f"c0/net/{SWITCH}", "network", "c0", {"cluster": "c0", "component": SWITCH}),
        GraphNode("c0/svc/a", "service", "c0", {"cluster": "c0", "service": "a"}),
        GraphNode(f"c0/svc/{NE_SVC}", "service", "c0", {"cluster": "c0", "service": NE_SVC}),
        GraphNode(
            f"c0/pod/monitoring/{NE_POD}",
            "pod",
            "c0",
            ne_pod,
            {"owner": f"DaemonSet/{NE_SVC}", "addresses": ["10.0.0.12"]},
        ),
    ]
    edges += [GraphEdge(f"c0/net/{SWITCH}", "c0", "member_of")]
    edges += [GraphEdge("c0/svc/a", "c0", "member_of")]
    edges += [GraphEdge(f"c0/svc/{NE_SVC}", "c0", "member_of")]
    edges += [GraphEdge(f"c0/pod/monitoring/{NE_POD}", "c0/host/h2", "runs_on")]
    edges += [GraphEdge(f"c0/pod/monitoring/{NE_POD}", f"c0/svc/{NE_SVC}", "member_of")]
    return DependencyGraph("fabric", nodes, edges)


def _both(graph: DependencyGraph, labels: dict[str, Any]) -> str | None:
    """The node of ``labels``, checked to be the same on the fast path the models' features use."""
    slow = graph.node_for_alert(labels)
    (idx,) = map_alerts(graph, [{"labels": labels}])
    assert (None if idx is None else graph.nodes[idx].id) == slow
    return slow


@pytest.mark.parametrize(
    "where",
    [
        {"instance": "10.0.0.12:9315"},  # systemd unit on h2, static scrape target
        {"instance": "h2:9315"},  # instance relabelled to the host's name
        {"instance": "h2"},
        {"host": "h2"},  # a journal stream's host label (Loki ruler), no pod label
        {"instance": "ufm.example:9315"},  # exporter outside the cluster's hosts
    ],
)
def test_switch_alert_lands_on_the_switch(where: dict[str, str]) -> None:
    labels = {**BASE, "component": SWITCH, **where}
    assert _both(_graph(), labels) == f"c0/net/{SWITCH}"


def test_switch_series_from_node_exporters_textfile_collector() -> None:
    # the README's "Large fabric considerations": --exporter.runonce writes the switch series for
    # node-exporter's textfile collector, so they come with node-exporter's target labels
    labels = {**BASE, "component": SWITCH, **NE_TARGET}
    assert _both(_graph(), labels) == f"c0/net/{SWITCH}"
    assert _both(_graph(), {**BASE, **NE_TARGET}) == "c0/host/h2"


def test_without_component_the_alert_stays_on_the_exporters_host() -> None:
    # the switch is not named: the exporter's host is all the labels say
    assert _both(_graph(), {**BASE, "instance": "10.0.0.12:9315"}) == "c0/host/h2"
    assert _both(_graph(), {**BASE, "component": "spine-9", "instance": "h2"}) == "c0/host/h2"


def test_a_node_the_alert_names_keeps_its_host() -> None:
    # node-exporter's IB port alert of h1's own HCA, relabelled with the switch it is cabled to
    labels = {**BASE, "component": SWITCH, "node": "h1", "instance": "10.0.0.12:9315"}
    assert _both(_graph(), labels) == "c0/host/h1"
    labels = {**BASE, "component": SWITCH, "kubernetes_node": "h1"}
    assert _both(_graph(), labels) == "c0/host/h1"


def test_a_service_or_the_cluster_does_not_take_the_hosts_alert() -> None:
    # a hostNetwork exporter's Service label and the cluster label match without node too, but
    # only a shared node outranks the host (docs/graph.md: host > service > shared > cluster)
    graph = _graph()
    assert _both(graph, {"alertname": "X", "service": "a", "instance": "h0"}) == "c0/host/h0"
    assert _both(graph, {"alertname": "X", "cluster": "c0", "instance": "h0"}) == "c0/host/h0"


def test_the_released_model_ranks_the_switch_first() -> None:
    from fleetmind.rca.gat_analyzer import GATAnalyzer

    alerts = [
        {
            "status": "firing",
            "labels": {**BASE, "component": SWITCH, "port": port, "instance": "10.0.0.12:9315"},
            "annotations": {},
            "startsAt": f"2026-12-01T09:00:0{i}Z",
            "endsAt": "0001-01-01T00:00:00Z",
            "fingerprint": f"{i:016x}",
        }
        for i, port in enumerate(("17", "18"))
    ]
    (top,) = GATAnalyzer.load().find_root_causes(_graph(), alerts, top_k=1).causes
    assert top.node == f"c0/net/{SWITCH}"  # was c0/host/h2 as host_not_ready


def test_exporter_pod_the_graph_does_not_hold_yet_still_gives_the_switch() -> None:
    # a DaemonSet rollout replaces node-exporter's pod before the graph is rebuilt: the alert's
    # pod is unknown, and the exporter's own Service ({cluster, service}) must not stand in for
    # the switch (it would rank below the host and leave the alert there)
    labels = {**BASE, "component": SWITCH, **NE_TARGET, "pod": "kps-prometheus-node-exporter-x2kfp"}
    assert _both(_graph(), labels) == f"c0/net/{SWITCH}"
    no_switch = {**BASE, **NE_TARGET, "pod": "kps-prometheus-node-exporter-x2kfp"}
    assert _both(_graph(), no_switch) == "c0/host/h2"


def test_a_shared_node_matching_fewer_labels_leaves_the_host_its_alert() -> None:
    # a cluster-less DNS node matched on {component} alone (docs/graph.md's shared infrastructure)
    # is not what a node-exporter alert of h0 labelled component=dns is about: the host's
    # {cluster, node} matches more labels
    graph = _graph()
    nodes = [*graph.nodes, GraphNode("global/dns", "dns", None, {"component": "dns"})]
    graph = DependencyGraph("fabric", nodes, graph.edges)
    labels = {"alertname": "X", "cluster": "c0", "component": "dns", "instance": "h0:9100"}
    assert _both(graph, labels) == "c0/host/h0"
    assert _both(graph, {"alertname": "X", "cluster": "c0", "component": "dns"}) == "global/dns"


@pytest.mark.parametrize("owner", ["ReplicaSet/ibx-5d8f", "StatefulSet/ibx"])
def test_an_exporter_deployment_pod_keeps_its_alerts_unless_fleetmind_node_names_the_switch(
    owner: str,
) -> None:
    # docs/rca-data.md ("A fabric switch"): a hostNetwork Deployment/StatefulSet exporter pod the
    # graph holds matches {cluster, namespace, pod} and keeps the alert; fleetmind_node names the
    # switch outright
    graph = _graph()
    pod = "c0/pod/monitoring/ibx-0"
    nodes = [
        *graph.nodes,
        GraphNode("c0/svc/ibx", "service", "c0", {"cluster": "c0", "service": "ibx"}),
        GraphNode(
            pod,
            "pod",
            "c0",
            {"cluster": "c0", "namespace": "monitoring", "pod": "ibx-0"},
            {"owner": owner, "addresses": ["10.0.0.11"]},
        ),
    ]
    edges = [
        *graph.edges,
        GraphEdge(pod, "c0/host/h1", "runs_on"),
        GraphEdge(pod, "c0/svc/ibx", "member_of"),
        GraphEdge("c0/svc/ibx", "c0", "member_of"),
    ]
    graph = DependencyGraph("fabric", nodes, edges)
    target = {"namespace": "monitoring", "pod": "ibx-0", "service": "ibx", "container": "exporter"}
    labels = {**BASE, "component": SWITCH, "instance": "10.0.0.11:9315", **target}
    assert _both(graph, labels) == pod
    named = {**labels, "fleetmind_node": f"c0/net/{SWITCH}"}
    assert _both(graph, named) == f"c0/net/{SWITCH}"
