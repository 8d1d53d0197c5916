"""A GPU alert naming the pod that holds the GPU joins them for that incident's ranking.

dcgm-exporter with its Kubernetes pod mapping labels each GPU series with the pod holding the GPU
(NVIDIA dcgm-exporter ``internal/pkg/transformation/kubernetes.go``; under kube-prometheus-stack's
default ``honorLabels: false`` as ``exported_pod``/``exported_namespace``/``exported_container``,
its own pod staying ``pod``). A pod using NVIDIA's device plugin (``nvidia.com/gpu``) has no API
object saying which GPU it holds, so a built graph joins it to its host only. The canonical XID
storm (dcgm-exporter's XID 79 on GPU 3 of ``gpu-a100-1`` naming ``llama-train-1``, kube-state-
metrics' ``KubePodCrashLooping`` of that pod and ``KubeStatefulSetReplicasMismatch`` of its
StatefulSet) ranked the pod's Service first (0.60) and the GPU third (0.006). The incident is now
ranked on the graph plus ``pod -runs_on-> GPU``: the GPU first. Without the pod labels, or with
only the exporter's own pod, nothing changes, and the served graph is never modified.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from serving_helpers import app_on_graph

from fleetmind.data.graph import DependencyGraph
from fleetmind.data.graph_build import build_graph
from fleetmind.rca.baselines import (
    PageRankAnalyzer,
    PageRankConfig,
)
from fleetmind.rca.features.columnar import alert_columns
from fleetmind.rca.incident_graph import gpu_pod_edges, incident_graph
from fleetmind.serving.rca.batcher import rank_group

DATA = Path(__file__).parent / "data" / "k8s"
C = "prod-eu"
GPU = f"{C}/gpu/gpu-a100-1/3"
POD = f"{C}/pod/ml/llama-train-1"
EXT = {"prometheus": "monitoring/kps-prometheus"}
KSM = {
    "job": "kube-state-metrics", "instance": "10.244.0.107:8080", "container": "kube-state-metrics",
    "endpoint": "http", "service": "kps-kube-state-metrics",
    "pod": "kps-kube-state-metrics-6d5f8b7c9-abcde", "namespace": "monitoring",
}  # fmt: skip
DCGM = {  # dcgm-exporter's labels as the GPU Operator's ServiceMonitor scrapes them
    "job": "nvidia-dcgm-exporter", "instance": "10.244.0.106:9400",
    "container": "nvidia-dcgm-exporter", "endpoint": "gpu-metrics",
    "service": "nvidia-dcgm-exporter", "namespace": "gpu-operator",
    "pod": "nvidia-dcgm-exporter-q7w4n", "gpu": "3", "UUID": "GPU-gpu-a100-1-3",
    "device": "nvidia3", "modelName": "NVIDIA A100-SXM4-80GB",
    "DCGM_FI_DRIVER_VERSION": "550.54.15", "Hostname": "nvidia-dcgm-exporter-q7w4n",
    "pci_bus_id": "00000000:0A:00.0",
}  # fmt: skip
WORKLOAD = {
    "exported_pod": "llama-train-1",
    "exported_namespace": "ml",
    "exported_container": "llama",
}


def _storm(gpu_labels: dict[str, str]) -> list[dict[str, Any]]:
    labs = [
        {"alertname": "GpuXidError", **gpu_labels, "xid": "79", "severity": "critical"},
        {"alertname": "KubePodCrashLooping", **KSM, "namespace": "ml", "pod": "llama-train-1",
         "container": "llama", "reason": "CrashLoopBackOff", "uid": "u-1", "severity": "warning"},
        {"alertname": "KubeStatefulSetReplicasMismatch", **KSM, "namespace": "ml",
         "statefulset": "llama-train", "severity": "warning"},
    ]  # fmt: skip
    starts = ["2026-03-01T10:00:00Z", "2026-03-01T10:00:30Z", "2026-03-01T10:00:40Z"]
    return [
        {"status": "firing", "labels": {**lab, **EXT}, "startsAt": t}
        for lab, t in zip(labs, starts, strict=True)
    ]


STORM = _storm({**DCGM, **WORKLOAD})
NO_POD = _storm(DCGM)  # no workload on the GPU: the exporter's own pod only


@pytest.fixture(scope="module")
def graph() -> DependencyGraph:
    k = json.loads((DATA / "kps_cluster.json").read_text())
    model = build_graph(k["nodes"], k["pods"], k["services"], k["endpointslices"], cluster=C)
    return DependencyGraph.from_model(model)


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory, graph: DependencyGraph) -> Any:
    with app_on_graph(tmp_path_factory.mktemp("xid"), graph) as c:
        yield c


def _causes(client: TestClient, alerts: list[dict[str, Any]]) -> list[str]:
    body = json.dumps({"alerts": alerts, "top_k": 5}).encode()
    r = client.post("/api/v1/rca", content=body, headers={"content-type": "application/json"})
    assert r.status_code == 200, r.text
    out = r.json()
    assert out["mapped_alerts"] == 3
    return [c["node"] for c in out["causes"]]


def test_built_graph_has_no_pod_gpu_edge(graph: DependencyGraph) -> None:
    """The premise: the device plugin's pod is joined to its host only."""
    assert all(not (e.src == POD and e.dst == GPU) for e in graph.edges)
    assert graph.node_for_alert(STORM[0]["labels"]) == GPU


def test_xid_storm_ranks_the_gpu_first(client: TestClient) -> None:
    assert _causes(client, STORM)[0] == GPU


def test_without_workload_labels_nothing_changes(
    client: TestClient, graph: DependencyGraph
) -> None:
    assert incident_graph(graph, NO_POD)[0] is graph
    causes = _causes(client, NO_POD)
    assert causes[0] != GPU  # the ranking of the graph as built


def test_served_graph_untouched_and_derived_cached(graph: DependencyGraph) -> None:
    n_edges = graph.num_edges
    g1, _ = incident_graph(graph, STORM)
    g2, _ = incident_graph(graph, STORM)
    assert graph.num_edges == n_edges and g1 is g2 and g1 is not graph
    assert g1.num_edges == n_edges + 1 and g1.index == graph.index
    assert [(e.src, e.dst, e.kind) for e in g1.edges[n_edges:]] == [(POD, GPU, "runs_on")]


def test_columns_and_dicts_give_the_same_graph(graph: DependencyGraph) -> None:
    cols = alert_columns(graph, STORM)
    assert cols.labels is None  # without labels the columns cannot name the pod
    assert incident_graph(graph, cols)[0] is graph
    from fleetmind.serving.rca.parse import plain_columns

    body = json.dumps({"alerts": STORM}).encode()
    parsed = plain_columns(body, graph, True)
    assert parsed is not None
    g_cols, cols2 = incident_graph(graph, parsed[1])
    g_dicts, _ = incident_graph(graph, STORM)
    assert g_cols is g_dicts and cols2.graph is g_cols


@pytest.mark.parametrize(
    "gpu_labels",
    [
        # honor_labels: true keeps the workload's pod/namespace; the exporter's are gone
        {**{k: v for k, v in DCGM.items() if k not in ("pod", "namespace")}, "pod": "llama-train-1",
         "namespace": "ml"},
    ],
    ids=["honor_labels"],
)  # fmt: skip
def test_pod_label_of_the_workload(graph: DependencyGraph, gpu_labels: dict[str, str]) -> None:
    alerts = _storm(gpu_labels)
    g, _ = incident_graph(graph, alerts)
    assert any(e.src == POD and e.dst == GPU and e.kind == "runs_on" for e in g.edges)


def test_no_edge_to_a_pod_on_another_host(graph: DependencyGraph) -> None:
    """``exported_pod`` naming a pod that runs elsewhere cannot hold this GPU."""
    other = {
        **DCGM,
        "gpu": "3",
        "exported_pod": "ranker-7f9c6d5b4-abcde",
        "exported_namespace": "ml",
    }
    node = graph.index[GPU]
    assert gpu_pod_edges(graph, [(node, other)]) == []
    # and the exporter's own pod (a DaemonSet's) is never the holder
    assert gpu_pod_edges(graph, [(node, DCGM)]) == []


def test_baseline_ranker_gets_the_edge(graph: DependencyGraph) -> None:
    """The service's ranking (rank_group, used in process and by the ranking processes) hands
    every analyzer the incident's graph, a baseline as much as the GAT."""
    ppr = PageRankAnalyzer(PageRankConfig())
    (res, err), (res_plain, _) = rank_group(ppr, [(graph, STORM, 5), (graph, NO_POD, 5)])
    assert err is None and res is not None and res_plain is not None
    before = ppr.find_root_causes(graph, STORM, 5).ranked_nodes()
    assert res.ranked_nodes() != before  # the edge changed the baseline's ranking
    assert res_plain.ranked_nodes() == ppr.find_root_causes(graph, NO_POD, 5).ranked_nodes()


def test_incident_path_ranks_the_gpu_first(tmp_path: Path, graph: DependencyGraph) -> None:
    """The incident worker's ranking (Alertmanager webhook -> incident) gets the edge too."""
    from fleetmind.serving.db import Database
    from fleetmind.serving.graphstore import GraphStore
    from fleetmind.serving.incidents import IncidentManager
    from fleetmind.serving.registry import ModelRegistry
    from fleetmind.serving.routers.alerts import alert_row
    from fleetmind.serving.schemas import AlertIn

    reg = ModelRegistry(None, "heuristic:builtin-bestfit")  # the released GAT
    reg.load()
    db = Database(f"sqlite:///{tmp_path}/i.db")
    db.create_all()
    try:
        manager = IncidentManager(db, GraphStore(graph, "t"), reg, window_s=600.0)
        rows = [
            alert_row(AlertIn.model_validate({**a, "fingerprint": f"x{i}"}), 1000.0)
            for i, a in enumerate(STORM)
        ]
        db.store_alerts(rows)
        manager.process_pending()
        (inc,) = db.list_incidents("open")
        assert inc["causes"][0]["node"] == GPU
        assert graph.num_edges == len({(e.src, e.dst, e.kind) for e in graph.edges})
        assert all(not (e.src == POD and e.dst == GPU) for e in graph.edges)
    finally:
        db.dispose()


# --- the derived graph shares the served graph's caches (no copy per pod-to-GPU edge set) -------


def _full_copy(graph: DependencyGraph, edges: list[tuple[int, int]]) -> DependencyGraph:
    """The derived graph built the plain way: a new graph with the edges appended."""
    from fleetmind.data.graph import GraphEdge

    extra = [GraphEdge(graph.nodes[p].id, graph.nodes[q].id, "runs_on") for p, q in edges]
    return DependencyGraph(graph.name, graph.nodes, [*graph.edges, *extra])


def _other_edges(graph: DependencyGraph) -> list[tuple[int, int]]:
    """Some pod -> GPU pairs of the graph other than the storm's (pods on the GPU's host)."""
    kind = {n.id: n.kind for n in graph.nodes}
    pods_on: dict[str, list[str]] = {}
    for e in graph.edges:
        if e.kind == "runs_on" and kind[e.src] == "pod" and kind[e.dst] == "host":
            pods_on.setdefault(e.dst, []).append(e.src)
    out = {
        (graph.index[p], graph.index[e.src])
        for e in graph.edges
        if e.kind == "attached_to" and kind[e.src] == "gpu"
        for p in pods_on.get(e.dst, ())
    }
    out.discard((graph.index[POD], graph.index[GPU]))
    return sorted(out)[:3]


def test_derived_graph_equals_a_full_copy(graph: DependencyGraph) -> None:
    """The shared-cache graph has exactly the edges, arrays and features of a full copy, and the
    GAT and baselines rank the storm on it as on the copy (dense and cropped features)."""
    from fleetmind.rca.features.columnar import incident_crop
    from fleetmind.rca.features.dense import alert_features
    from fleetmind.rca.gat_analyzer import GATAnalyzer
    from fleetmind.rca.incident_graph import with_edges

    edges = gpu_pod_edges(graph, [(graph.index[GPU], {**DCGM, **WORKLOAD})]) + _other_edges(graph)
    edges = sorted(set(edges))
    assert len(edges) >= 2
    from fleetmind.rca.baselines import graph_cache

    graph_cache(graph)  # a baseline's cache of the served graph, extended by the derived one
    plain = _full_copy(graph, edges)
    shared = with_edges(graph, edges)
    assert [(e.src, e.dst, e.kind) for e in shared.edges] == [
        (e.src, e.dst, e.kind) for e in plain.edges
    ]
    assert (shared.edge_index == plain.edge_index).all()
    assert (shared.edge_type == plain.edge_type).all()
    for alerts in (STORM, NO_POD, STORM[1:]):
        fa, fb = alert_features(shared, alerts), alert_features(plain, alerts)
        assert (fa.x == fb.x).all()
        for hops in (1, 2, None):
            ca, cb = incident_crop(shared, alerts, hops), incident_crop(plain, alerts, hops)
            assert (ca.x == cb.x).all() and (ca.keep == cb.keep).all()
            assert (ca.edge_index == cb.edge_index).all()
    gat = GATAnalyzer.load()
    for an in (gat, PageRankAnalyzer(PageRankConfig())):
        ra, rb = an.find_root_causes(shared, STORM, 5), an.find_root_causes(plain, STORM, 5)
        assert ra.ranked_nodes() == rb.ranked_nodes()
        assert [c.score for c in ra.causes] == [c.score for c in rb.causes]
    assert gat.find_root_causes(shared, STORM, 5).ranked_nodes()[0] == GPU
    # the served graph's own features are untouched by the derived one's
    assert (
        alert_features(graph, STORM).x
        == alert_features(DependencyGraph(graph.name, graph.nodes, graph.edges), STORM).x
    ).all()


def _fresh_graph() -> DependencyGraph:
    k = json.loads((DATA / "kps_cluster.json").read_text())
    model = build_graph(k["nodes"], k["pods"], k["services"], k["endpointslices"], cluster=C)
    return DependencyGraph.from_model(model)


def test_derived_ranking_builds_no_per_graph_cache(monkeypatch: pytest.MonkeyPatch) -> None:
    """A new pod-to-GPU edge set builds no graph and no per-node tables: the derived graph uses
    the served graph's label-set memos, match tables, mapping caches, GAT id ranks and baseline
    label memo, and holds only its edges and the degree rows of the nodes they touch."""
    from fleetmind.rca.baselines import graph_cache
    from fleetmind.rca.features.mapping import _static
    from fleetmind.rca.gat_analyzer import GATAnalyzer

    graph = _fresh_graph()
    gat = GATAnalyzer.load()
    ppr = PageRankAnalyzer(PageRankConfig())
    for an in (gat, ppr):
        an.find_root_causes(graph, NO_POD, 5)  # the served graph's caches, warm
    built: list[Any] = []
    real_init = DependencyGraph.__init__

    def counting_init(self: DependencyGraph, *args: Any, **kwargs: Any) -> None:
        built.append(self)
        real_init(self, *args, **kwargs)

    monkeypatch.setattr(DependencyGraph, "__init__", counting_init)
    ids_before = gat._node_ids(graph)
    base = _static(graph)
    g_storm, _ = incident_graph(graph, STORM)
    assert g_storm is not graph
    assert gat.find_root_causes(g_storm, STORM, 5).ranked_nodes()[0] == GPU
    ppr.find_root_causes(g_storm, STORM, 5)
    assert built == []  # no DependencyGraph built for the incident
    st = _static(g_storm)
    assert st.label_info is base.label_info and st.keyset_getters is base.keyset_getters
    assert g_storm.nodes is graph.nodes and g_storm._derived is graph._derived
    assert graph_cache(g_storm).label_cache is graph_cache(graph).label_cache
    assert gat._node_ids(g_storm) is ids_before  # the served graph's id ranks, reused

    from fleetmind.rca.incident_graph import with_edges

    for edges in ([e] for e in _other_edges(graph)):  # more distinct edge sets
        g = with_edges(graph, edges)
        st = _static(g)
        assert g.nodes is graph.nodes and g.index is graph.index
        assert st.label_info is base.label_info and st._base is base._base
        assert st._rows is not None and st._rows.size == 2  # the pod's and the GPU's rows only
        gat.find_root_causes(g, STORM, 5)
    assert built == []
    assert gat._node_ids(g) is ids_before


def test_derived_graphs_do_not_outlive_the_served_graph() -> None:
    """Derived graphs are kept per served graph: a replaced served graph takes them with it."""
    import gc
    import weakref

    served = _fresh_graph()
    derived, _ = incident_graph(served, STORM)
    assert derived is not served
    from fleetmind.rca.gat_analyzer import GATAnalyzer

    GATAnalyzer.load().find_root_causes(derived, STORM, 5)
    refs = [weakref.ref(served), weakref.ref(derived)]
    del served, derived
    gc.collect()
    assert [r() for r in refs] == [None, None]


def test_with_edges_checks_its_pairs(graph: DependencyGraph) -> None:
    """Only (pod, GPU) pairs are accepted; repeats and edges the graph has add nothing."""
    from fleetmind.rca.incident_graph import with_edges

    pod, gpu = graph.index[POD], graph.index[GPU]
    with pytest.raises(ValueError, match="not a \\(pod, GPU\\) pair"):
        with_edges(graph, [(gpu, pod)])
    with pytest.raises(ValueError, match="not a \\(pod, GPU\\) pair"):
        with_edges(graph, [(pod, graph.num_nodes)])
    g = with_edges(graph, [(pod, gpu), (pod, gpu)])
    assert g.num_edges == graph.num_edges + 1
    assert with_edges(g, []) is g and with_edges(graph, []) is graph
