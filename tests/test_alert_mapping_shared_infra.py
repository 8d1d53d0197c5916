"""Alerts about cluster-less shared infrastructure keep their node when they carry ``cluster``.

docs/graph.md ("How an alert finds its node") tells multi-cluster users to give every Prometheus the
cluster's name as the ``cluster`` external label, which Prometheus adds to every alert it sends
(https://prometheus.io/docs/prometheus/latest/configuration/configuration/#configuration-file,
``external_labels``: "labels to add to any time series or alerts when communicating with external
systems"). A DNS, registry or config alert then carries ``cluster`` too, and matches both the shared
node and the cluster node with one label each: the cluster is the least specific node and must lose.
"""

from __future__ import annotations

import pytest

from fleetmind.data.graph import _KIND_SPECIFICITY, DependencyGraph, GraphEdge, GraphNode
from fleetmind.data.graph_schema import NODE_KINDS
from fleetmind.rca.features.mapping import map_alerts
from fleetmind.serving.defaults.example import build_example_graph
from fleetmind.serving.registry import ModelRegistry

SHARED_KINDS = ("registry", "dns", "config", "storage", "network", "infra")


def test_every_kind_has_a_specificity_and_the_cluster_ranks_last() -> None:
    assert set(_KIND_SPECIFICITY) == set(NODE_KINDS)
    assert min(_KIND_SPECIFICITY, key=_KIND_SPECIFICITY.__getitem__) == "cluster"
    # docs/graph.md step 3: link > gpu > pod > host > service > shared infrastructure > cluster
    order = ["link", "gpu", "pod", "host", "service", *SHARED_KINDS, "cluster"]
    ranks = [_KIND_SPECIFICITY[k] for k in order]
    assert ranks == sorted(ranks, reverse=True)


@pytest.mark.parametrize("service", ["dns", "registry", "config"])
@pytest.mark.parametrize("cluster", ["c0", "c1"])
def test_example_graph_shared_alert_with_cluster_label(service: str, cluster: str) -> None:
    graph = build_example_graph()
    labels = {"alertname": "X", "service": service, "cluster": cluster}
    assert graph.node_for_alert(labels) == f"global/{service}"
    # the fast path the models' features use agrees
    (idx,) = map_alerts(graph, [{"labels": labels}])
    assert idx is not None and graph.nodes[idx].id == f"global/{service}"
    # an alert about the cluster alone still lands on the cluster
    assert graph.node_for_alert({"alertname": "Y", "cluster": cluster}) == cluster


@pytest.mark.parametrize("kind", SHARED_KINDS)
def test_every_shared_kind_outranks_the_cluster(kind: str) -> None:
    nodes = [
        GraphNode("c0", "cluster", "c0", {"cluster": "c0"}),
        GraphNode(f"global/{kind}", kind, None, {"component": kind}),
        GraphNode("c0/svc/a", "service", "c0", {"cluster": "c0", "service": "a"}),
    ]
    edges = [
        GraphEdge("c0/svc/a", f"global/{kind}", "depends_on"),
        GraphEdge("c0/svc/a", "c0", "member_of"),
    ]
    graph = DependencyGraph("shared", nodes, edges)
    labels = {"alertname": "Down", "component": kind, "cluster": "c0"}
    assert graph.node_for_alert(labels) == f"global/{kind}"
    (idx,) = map_alerts(graph, [{"labels": labels}])
    assert idx == graph.index[f"global/{kind}"]


def test_released_gat_ranks_a_lone_config_alert_on_the_config_store() -> None:
    """One ``ConfigPushValidationFailed`` from a cluster's Prometheus: the config store is the
    cause (with its fault type), not the cluster with fault type ``unknown``."""
    graph = build_example_graph()
    reg = ModelRegistry(None, "heuristic:builtin-bestfit")  # the released GAT
    reg.load()
    alert = {
        "status": "firing",
        "labels": {
            "alertname": "ConfigPushValidationFailed",
            "severity": "critical",
            "service": "config",
            "cluster": "c0",
        },
        "startsAt": "2026-01-01T00:00:00Z",
    }
    top = reg.current.rca.impl.find_root_causes(graph, [alert], 3).causes[0]
    assert top.node == "global/config"
    assert top.fault_type != "unknown"
