"""Symptom anchoring on a Service symptom (``FLEETMIND_SLO_ALERTS`` naming a service alert).

A Service depends on its member pods, but the fleet graph points ``pod -member_of-> service``
(docs/graph.md, "Direction": a pod's crash or GPU error costs its Service capacity over
``member_of``; a broken NVLink hangs the GPUs it joins over ``attached_to``). Anchoring must read
those edges backwards, or a Service SLO alert cuts the hardware root off and weights it down.
The storms follow tests/test_rca_golden_storms.py (dcgm-exporter's ``GPUXidError``,
kube-prometheus' ``KubePodNotReady``) on the same seeded generated fleet.
"""

from __future__ import annotations

import pytest

from fleetmind.data.graph import DependencyGraph, GraphEdge, GraphNode
from fleetmind.rca.anchoring import anchor_result, dependencies, joined_to_symptom, named_symptom
from fleetmind.rca.gat_analyzer import GATAnalyzer
from tests.golden_storm_helpers import golden_fleet, storm_alert

SLO = frozenset({"ServiceLatencyHigh"})


@pytest.fixture(scope="module")
def fleet() -> DependencyGraph:
    return golden_fleet()


@pytest.fixture(scope="module")
def gat() -> GATAnalyzer:
    return GATAnalyzer.load(None)


_alert = storm_alert


def _out(g: DependencyGraph, src: str, kind: str) -> list[str]:
    return [e.dst for e in g.edges if e.src == src and e.kind == kind]


def _gpu_pod_service(g: DependencyGraph) -> tuple[str, str, str]:
    """The first GPU with a pod on it that is a member of a Service."""
    for e in g.edges:
        if e.kind == "runs_on" and g.node(e.dst).kind == "gpu" and g.node(e.src).kind == "pod":
            svcs = [s for s in _out(g, e.src, "member_of") if g.node(s).kind == "service"]
            if svcs:
                return e.dst, e.src, svcs[0]
    raise AssertionError("no GPU pod with a Service in the fleet")


def test_a_service_slo_alert_keeps_the_gpu_root_first(
    fleet: DependencyGraph, gat: GATAnalyzer
) -> None:
    """XID 79 on a GPU, its pod NotReady, the pod's Service latency alert named as the SLO."""
    gpu, pod, svc = _gpu_pod_service(fleet)
    alerts = [
        _alert(fleet.node(gpu).match, "GPUXidError", 0, xid="79"),
        _alert(fleet.node(pod).match, "KubePodNotReady", 20, "warning"),
        _alert(fleet.node(svc).match, "ServiceLatencyHigh", 60, "warning"),
    ]
    assert [fleet.node_for_alert(a["labels"]) for a in alerts] == [gpu, pod, svc]
    res = gat.find_root_causes(fleet, alerts, top_k=5)
    assert res.causes[0].node == gpu, [(c.node, round(c.score, 3)) for c in res.causes]
    symptom = named_symptom(fleet, alerts, SLO)
    assert symptom == svc
    out = anchor_result(res, fleet, alerts, symptom)
    assert out.causes[0].node == gpu
    assert out.causes[0].score == res.causes[0].score  # not weighted down
    assert {pod, gpu} <= joined_to_symptom(fleet, {gpu, pod, svc}, svc)


def test_a_quiet_pod_still_ends_the_path(fleet: DependencyGraph) -> None:
    """Reading member_of backwards joins the Service's pods, but a pod that does not alert passes
    nothing on: its GPU stays unjoined."""
    gpu, pod, svc = _gpu_pod_service(fleet)
    joined = joined_to_symptom(fleet, {svc}, svc)
    assert pod in joined and gpu not in joined


def _tiny() -> DependencyGraph:
    nodes = [
        GraphNode("c", "cluster", "c", {"cluster": "c"}),
        GraphNode("c/host/h", "host", "c", {"cluster": "c", "node": "h"}),
        GraphNode("c/host/h/gpu0", "gpu", "c", {"cluster": "c", "node": "h", "gpu": "0"}),
        GraphNode("c/host/h/gpu1", "gpu", "c", {"cluster": "c", "node": "h", "gpu": "1"}),
        GraphNode("c/host/h/nvl-0-1", "link", "c", {"cluster": "c", "node": "h", "link": "0-1"}),
        GraphNode("c/svc/s", "service", "c", {"cluster": "c", "service": "s"}),
        GraphNode("c/pod/s-0", "pod", "c", {"cluster": "c", "namespace": "d", "pod": "s-0"}),
    ]
    edges = [
        GraphEdge("c/host/h/gpu0", "c/host/h", "attached_to"),
        GraphEdge("c/host/h/gpu1", "c/host/h", "attached_to"),
        GraphEdge("c/host/h/nvl-0-1", "c/host/h/gpu0", "attached_to"),
        GraphEdge("c/host/h/nvl-0-1", "c/host/h/gpu1", "attached_to"),
        GraphEdge("c/pod/s-0", "c/svc/s", "member_of"),
        GraphEdge("c/pod/s-0", "c/host/h/gpu0", "runs_on"),
        GraphEdge("c/svc/s", "c", "member_of"),
    ]
    return DependencyGraph("tiny", nodes, edges)


def test_a_degraded_nvlink_under_a_service_symptom_is_joined() -> None:
    """NVLink down -> XID 74 on its GPU -> the pod on it slows -> the Service's latency SLO."""
    g = _tiny()
    anomalous = {"c/host/h/nvl-0-1", "c/host/h/gpu0", "c/pod/s-0", "c/svc/s"}
    joined = joined_to_symptom(g, anomalous, "c/svc/s")
    assert {"c/pod/s-0", "c/host/h/gpu0", "c/host/h/nvl-0-1", "c/host/h"} <= joined
    # a GPU's attached_to its host keeps one direction: a host symptom does not join its GPUs
    assert joined_to_symptom(g, {"c/host/h"}, "c/host/h") == {"c/host/h"}


def _forward_only(g: DependencyGraph, anomalous: set[str], symptom: str) -> set[str]:
    """Joined nodes as anchoring found them with edges read ``src -> dst`` only (before
    ``member_of`` and a link's ``attached_to`` were read backwards)."""
    deps: dict[str, list[str]] = {}
    for e in g.edges:
        deps.setdefault(e.src, []).append(e.dst)
    joined, todo = {symptom}, [symptom]
    while todo:
        v = todo.pop()
        if v != symptom and v not in anomalous:
            continue
        for u in deps.get(v, ()):
            if u not in joined:
                joined.add(u)
                todo.append(u)
    return joined


def test_a_cluster_symptom_does_not_join_the_whole_cluster(fleet: DependencyGraph) -> None:
    """kube-prometheus' ``KubeAPIDown`` carries only ``cluster``: it maps to the cluster node.
    Reading ``member_of`` backwards into a cluster joined every host, Service and pod in it (so
    anchoring kept everything apart from nothing); a cluster is not read so."""
    cluster = next(n for n in fleet.nodes if n.kind == "cluster")
    labels = {"alertname": "KubeAPIDown", "cluster": cluster.match["cluster"]}
    assert fleet.node_for_alert(labels) == cluster.id
    anomalous = {n.id for n in fleet.nodes}  # the worst case: every node alerts
    joined = joined_to_symptom(fleet, anomalous, cluster.id)
    assert joined <= _forward_only(fleet, anomalous, cluster.id), len(joined)
    # the Service case still reaches its pods' GPUs
    gpu, pod, svc = _gpu_pod_service(fleet)
    assert {pod, gpu} <= joined_to_symptom(fleet, {gpu, pod, svc}, svc)


def test_dependencies_are_cached_per_edge_list() -> None:
    """Cached in the graph's ``_derived`` dict; an incident's graph that shares that dict but has
    an extra edge (:mod:`fleetmind.rca.incident_graph`) gets its own answer."""
    import copy

    g = _tiny()
    first = dependencies(g)
    assert dependencies(g) is first
    g2 = copy.copy(g)
    g2.edges = [*g.edges, GraphEdge("c/pod/s-0", "c/host/h/gpu1", "runs_on")]
    assert g2._derived is g._derived
    assert "c/host/h/gpu1" in dependencies(g2)["c/pod/s-0"]
    assert "c/host/h/gpu1" not in dependencies(g)["c/pod/s-0"]
    assert "c/svc/s" not in dependencies(g).get("c", [])  # a cluster is not read backwards
