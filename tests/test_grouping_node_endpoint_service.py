"""A Node-endpoint Service (one served by several hosts) is a barrier for incident grouping.

kube-prometheus-stack creates the Prometheus Operator's kubelet Service by default
(``prometheusOperator.kubeletService``: ``kube-system/<release>-kubelet``, whose EndpointSlices
list every node with ``targetRef.kind: Node``); ``fleetmind graph build`` gives it a ``runs_on``
edge to each of those hosts. Crossed, it put every host 2 hops (``INCIDENT_HOPS``) from every
other, so two unrelated host faults of one cluster always became one incident. Reached, an
incident holding an alert on it would take every later host alert of the window.
"""

from __future__ import annotations

import itertools

from kps_helpers import EXT, KSM, NE, kps_graph

from fleetmind.data.graph import DependencyGraph, GraphEdge, GraphNode
from fleetmind.serving.alertmap import node_for_alert
from fleetmind.serving.graphstore import GraphView, barrier_nodes
from fleetmind.serving.incidents.grouper import Grouper

KUBELET = "prod-eu/svc/kube-system/kps-kubelet"


def group(view: GraphView, nodes: list[str | None], hops: int = 2) -> list[int]:
    """Incident id of each alert, grouped in order one second apart (merges followed)."""
    g, ids = Grouper(window_s=600.0, hops=hops), itertools.count(1)
    out: list[int] = []
    for t, node in enumerate(nodes):
        placed = g.assign(float(t), node, "prod-eu", view.neighbourhood, lambda: next(ids))
        out = [placed.incident if i in placed.merged else i for i in out]
        out.append(placed.incident)
    return out


def test_the_kubelet_service_is_a_barrier_and_ordinary_services_are_not() -> None:
    g = kps_graph()
    barriers = {g.nodes[i].id for i in barrier_nodes(g)}
    assert barriers == {"prod-eu", KUBELET}


def test_unrelated_host_faults_of_one_cluster_open_separate_incidents() -> None:
    g = kps_graph()
    view = GraphView(g, 1)
    clock = node_for_alert(
        g,
        {
            "alertname": "NodeClockNotSynchronising",
            **NE,
            "instance": "10.0.1.5:9100",
            "pod": "kps-prometheus-node-exporter-4xk2p",
            "severity": "warning",
            **EXT,
        },
    )
    not_ready = node_for_alert(
        g,
        {
            "alertname": "KubeNodeNotReady",
            **KSM,
            "node": "gpu-a100-1",
            "condition": "Ready",
            "status": "true",
            "severity": "warning",
            **EXT,
        },
    )
    assert (clock, not_ready) == ("prod-eu/host/cp-0", "prod-eu/host/gpu-a100-1")
    assert "prod-eu/host/gpu-a100-1" not in view.neighbourhood(clock, 2)
    assert KUBELET not in view.neighbourhood(clock, 2)
    first, second = group(view, [clock, not_ready])
    assert first != second
    # a host's own cascade still groups: a pod on gpu-a100-1 is one hop from it
    pod = "prod-eu/pod/ml/ranker-7f9c6d5b4-fghij"
    assert group(view, [not_ready, pod]) == [1, 1]


def test_an_alert_on_the_kubelet_service_joins_no_host_incidents_together() -> None:
    g = kps_graph()
    view = GraphView(g, 1)
    target_down = node_for_alert(
        g,
        {
            "alertname": "TargetDown",
            "job": "kubelet",
            "service": "kps-kubelet",
            "namespace": "kube-system",
            "severity": "warning",
            **EXT,
        },
    )
    assert target_down == KUBELET
    assert view.neighbourhood(KUBELET, 2) == {KUBELET}
    hosts = ["prod-eu/host/cp-0", "prod-eu/host/gpu-a100-0", "prod-eu/host/gpu-a100-1"]
    # between host faults, or before them: the hosts stay apart
    assert len(set(group(view, [hosts[0], target_down, hosts[1], hosts[2]]))) == 4
    assert len(set(group(view, [target_down, *hosts]))) == 4
    # it groups with other alerts on the Service itself
    assert group(view, [target_down, target_down]) == [1, 1]


def test_a_node_with_one_host_endpoint_is_crossed_as_before() -> None:
    nodes = [
        GraphNode("c", "cluster", "c", {"cluster": "c"}),
        GraphNode("c/host/a", "host", "c", {"node": "a"}),
        GraphNode("c/host/b", "host", "c", {"node": "b"}),
        GraphNode("c/svc/one", "service", "c", {"service": "one"}),
        GraphNode("c/pod/p", "pod", "c", {"pod": "p"}),
    ]
    edges = [
        GraphEdge("c/host/a", "c", "member_of"),
        GraphEdge("c/host/b", "c", "member_of"),
        GraphEdge("c/svc/one", "c/host/a", "runs_on"),
        GraphEdge("c/pod/p", "c/host/a", "runs_on"),
    ]
    g = DependencyGraph("t", nodes, edges)
    assert {g.nodes[i].id for i in barrier_nodes(g)} == {"c"}
    assert GraphView(g, 1).neighbourhood("c/svc/one", 2) == {"c/svc/one", "c/host/a", "c/pod/p"}
