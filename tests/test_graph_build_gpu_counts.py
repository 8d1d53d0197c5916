"""``fleetmind graph build``: the GPU nodes of a Kubernetes node are its physical GPUs, the indices
dcgm-exporter's ``gpu`` label takes, under MIG's ``single`` strategy, with a GPU the device plugin
marked unhealthy, and with time-slicing that no label describes; malformed list items are read
without a traceback; the written file is compact JSON."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import pytest

from fleetmind.cli import main
from fleetmind.data.graph import DependencyGraph
from fleetmind.data.graph_build import GraphBuildWarning, build_graph, calls_from_spans

EMPTY: dict = {"items": []}


def _node(name: str, labels: dict, capacity: str | None, allocatable: str | None = None) -> dict:
    status = {}
    if capacity is not None:
        status["capacity"] = {"nvidia.com/gpu": capacity}
    if allocatable or capacity:
        status["allocatable"] = {"nvidia.com/gpu": allocatable or capacity}
    return {"metadata": {"name": name, "labels": labels}, "status": status}


def _build(*nodes: dict) -> tuple[DependencyGraph, list[str]]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", GraphBuildWarning)
        model = build_graph({"items": list(nodes)}, EMPTY, EMPTY)
    messages = [str(w.message) for w in caught if issubclass(w.category, GraphBuildWarning)]
    return DependencyGraph.from_model(model), messages


def _gpus(g: DependencyGraph) -> dict[str, int]:
    out = {n.match["node"]: 0 for n in g.nodes if n.kind == "host"}
    for n in g.nodes:
        if n.kind == "gpu":
            out[n.match["node"]] += 1
    return out


def _mig(product: str, count: str, **more: str) -> dict:
    return {
        "nvidia.com/mig.strategy": "single",
        "nvidia.com/gpu.product": product,
        "nvidia.com/gpu.count": count,
        **more,
    }


def test_mig_single_strategy_counts_physical_gpus() -> None:
    # NVIDIA/k8s-device-plugin docs/gpu-feature-discovery/README.md, "MIG 'single' strategy":
    # nvidia.com/gpu is overloaded to count MIG devices; the example is 8 A100-40GB cut into 7
    # 1g.5gb each, gpu.count 56 and gpu.product A100-SXM4-40GB-MIG-1g.5gb (internal/lm/
    # mig-strategy.go newMigStrategySingleLabeler: the MIG labels override the full-GPU ones).
    # Instances per GPU: GPU Operator assets/state-mig-manager/0400_configmap.yaml
    # (default-mig-parted-config all-<profile>). GKE: cloud.google.com/gke-gpu-partition-size,
    # "1g.5gb ... split into 7 partitions", with time-sharing 3 "up to 21" per GPU.
    a100 = "NVIDIA-A100-SXM4-40GB"
    g, warned = _build(
        _node("mig", _mig(f"{a100}-MIG-1g.5gb", "56", **{"nvidia.com/gpu.memory": "4864"}), "56"),
        _node("mig-3g", _mig("NVIDIA-H100-80GB-HBM3-MIG-3g.40gb", "16"), "16"),
        _node("mig-1g10-40", _mig(f"{a100}-MIG-1g.10gb", "32"), "32"),
        _node("mig-1g10-80", _mig("NVIDIA-A100-SXM4-80GB-MIG-1g.10gb", "56"), "56"),
        _node("mig-me", _mig("NVIDIA-H100-80GB-HBM3-MIG-1g.10gb+me", "8"), "8"),
        _node(
            "mig-shared",
            _mig(f"{a100}-MIG-1g.5gb-SHARED", "56", **{"nvidia.com/gpu.replicas": "2"}),
            "112",
        ),  # fmt: skip
        _node("gke", {"cloud.google.com/gke-gpu-partition-size": "1g.5gb"}, "7"),
        _node(
            "gke-ts",
            {
                "cloud.google.com/gke-gpu-partition-size": "1g.5gb",
                "cloud.google.com/gke-max-shared-clients-per-gpu": "3",
            },
            "21",
        ),  # fmt: skip
    )
    assert warned == []
    assert _gpus(g) == {"mig": 8, "mig-3g": 8, "mig-1g10-40": 8, "mig-1g10-80": 8, "mig-me": 8,
                        "mig-shared": 8, "gke": 1, "gke-ts": 1}  # fmt: skip
    assert g.node("default/host/mig").attrs["gpu_model"] == a100
    assert g.node("default/host/mig-shared").attrs["gpu_model"] == a100
    # dcgm-exporter reports a MIG instance under its physical GPU's index, with GPU_I_ID
    xid = {"alertname": "GpuXidError", "Hostname": "mig", "gpu": "7", "GPU_I_ID": "13"}
    assert g.node_for_alert(xid) == "default/gpu/mig/7"


def test_mig_single_strategy_that_cannot_be_counted_warns_instead_of_phantom_gpus() -> None:
    # A profile not in the GPU Operator's configs, instances that are no whole number of GPUs
    # (a hand-made partition), GFD's -MIG-INVALID (mig-strategy.go newInvalidMigStrategyLabeler):
    # no GPU nodes for that node, one warning naming it; the other nodes are built.
    g, warned = _build(
        _node("odd", _mig("NVIDIA-X-MIG-9g.1gb", "9"), "9"),
        _node("partial", _mig("NVIDIA-A100-SXM4-40GB-MIG-1g.5gb", "24"), "24"),
        _node("invalid", _mig("NVIDIA-A100-SXM4-40GB-MIG-INVALID", "0"), "0"),
        _node("plain", {}, "8"),
    )
    assert _gpus(g) == {"odd": 0, "partial": 0, "invalid": 0, "plain": 8}
    assert len(warned) == 3 and all("\n" not in w for w in warned)
    assert warned[0].startswith("GPU nodes of node 'odd' left out: how many instances of MIG")
    assert "capacity nvidia.com/gpu is 24 MIG instances of profile '1g.5gb'" in warned[1]
    assert "marks its MIG configuration invalid" in warned[2]


def test_gpu_marked_unhealthy_stays_in_the_graph() -> None:
    # kubelet pkg/kubelet/cm/devicemanager/manager.go GetCapacity: capacity = healthy + unhealthy devices,
    # allocatable = healthy only; NVIDIA's device plugin marks a GPU unhealthy on a critical XID
    # (internal/rm/health.go). The faulty GPU must keep its node so its XID alert lands on it.
    labels = {"nvidia.com/gpu.count": "8", "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"}
    g, warned = _build(
        _node("xid", labels, "8", "7"),
        _node("xid-no-gfd", {}, "8", "7"),
        _node("xid-no-capacity", labels, None, "7"),  # a recording without capacity
    )
    assert warned == [] and _gpus(g) == {"xid": 8, "xid-no-gfd": 8, "xid-no-capacity": 8}
    xid = {"alertname": "GpuXidError", "Hostname": "xid", "gpu": "7", "UUID": "GPU-7"}
    assert g.node_for_alert(xid) == "default/gpu/xid/7"


def test_implausible_gpu_count_skips_that_node_only(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # The standalone NVIDIA device plugin chart deploys no GPU feature discovery by default
    # (gfd.enabled: false), so 8 GPUs time-sliced 10 ways advertise nvidia.com/gpu 80 with no
    # replicas label: that node gets no GPU nodes and a warning, the cluster is still built.
    # GKE time-sharing: cloud.google.com/gke-max-shared-clients-per-gpu (allocatable = GPUs x it).
    gke = {"cloud.google.com/gke-gpu-sharing-strategy": "time-sharing",
           "cloud.google.com/gke-max-shared-clients-per-gpu": "10"}  # fmt: skip
    nodes = [_node("ts", {}, "80"), _node("gke-ts", gke, "40"), _node("dgx", {}, "8")]
    g, warned = _build(*nodes)
    assert _gpus(g) == {"ts": 0, "gke-ts": 4, "dgx": 8}
    assert warned == [
        "GPU nodes of node 'ts' left out: capacity nvidia.com/gpu gives 80 GPUs, more than 64 on "
        "one node (time-slicing without GPU feature discovery's labels counts every replica)"
    ]
    rec = tmp_path / "rec"
    rec.mkdir()
    (rec / "nodes.json").write_text(json.dumps({"items": nodes}))
    (rec / "pods.json").write_text(json.dumps(EMPTY))
    (rec / "services.json").write_text(json.dumps(EMPTY))
    out = tmp_path / "g.json"
    assert main(["graph", "build", "--from-dir", str(rec), "--out", str(out)]) == 0
    err = capsys.readouterr().err.splitlines()
    assert err == [f"fleetmind: warning: {warned[0]}"]
    assert _gpus(DependencyGraph.load(out)) == {"ts": 0, "gke-ts": 4, "dgx": 8}


def test_malformed_list_items_are_read_without_a_traceback(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # docs/graph.md: what cannot become a graph stops with one line; a field of the wrong type in
    # a list item (never what the API server sends) is read as absent, as a wrong metadata is.
    nodes = {"items": [
        {"metadata": {"name": "n1", "labels": ["nvidia.com/gpu.count=8"]}, "status": "Ready"},
        {"metadata": {"name": "n2"}, "status": {"capacity": "8", "addresses": 5}},
        _node("n3", {}, "2"),
    ]}  # fmt: skip
    pods = {"items": [
        {"metadata": {"name": "p1", "annotations": ["x"], "labels": ["app=web"],
                      "ownerReferences": 3}, "spec": {"nodeName": "n3"}, "status": "Running"},
        {"metadata": {"name": "p2"}, "spec": "n3"},
        {"metadata": {"name": "p3"}, "spec": {"nodeName": ["n3"]}},
    ]}  # fmt: skip
    services = {"items": [{"metadata": {"name": "web"}, "spec": "x"},
                          {"metadata": {"name": "api"}, "spec": {"selector": {"app": "web"}}}]}  # fmt: skip
    slices = {"items": [{"metadata": {"name": "web-1", "labels": ["x"]}, "endpoints": 4},
                        {"metadata": {"name": "api-1",
                                      "labels": {"kubernetes.io/service-name": "api"}},
                         "endpoints": {"a": 1}}]}  # fmt: skip
    g = DependencyGraph.from_model(build_graph(nodes, pods, services, slices))
    assert _gpus(g) == {"n1": 0, "n2": 0, "n3": 2}
    assert {n.id for n in g.nodes if n.kind == "pod"} == {
        "default/pod/default/p1", "default/pod/default/p2", "default/pod/default/p3"}  # fmt: skip
    # and without EndpointSlices, a pod's labels of the wrong type match no selector
    build_graph(nodes, pods, services)
    spans = {"resourceSpans": ["x", {"resource": "r", "scopeSpans": [{"spans": ["s", {
        "traceId": "t", "spanId": ["a"]}]}]}]}  # fmt: skip
    jaeger = {"data": [3, {"processes": [], "spans": [{"spanID": "b", "processID": ["p"],
                                                       "references": ["r"]}]}]}  # fmt: skip
    assert calls_from_spans(spans, jaeger) == []
    rec = tmp_path / "rec"
    rec.mkdir()
    for k, doc in (("nodes", nodes), ("pods", pods), ("services", services),
                   ("endpointslices", slices)):  # fmt: skip
        (rec / f"{k}.json").write_text(json.dumps(doc))
    out = tmp_path / "g.json"
    assert main(["graph", "build", "--from-dir", str(rec), "--out", str(out)]) == 0
    assert "Traceback" not in capsys.readouterr().err


def test_graph_file_is_compact_json(tmp_path: Path) -> None:
    # The service reads the file (FLEETMIND_GRAPH) or takes it as PUT /api/v1/graph, whose body
    # is bounded by FLEETMIND_MAX_BODY_BYTES: indentation only spends that bound.
    rec = tmp_path / "rec"
    rec.mkdir()
    (rec / "nodes.json").write_text(json.dumps({"items": [_node("h", {}, "2")]}))
    (rec / "pods.json").write_text(json.dumps(EMPTY))
    (rec / "services.json").write_text(json.dumps(EMPTY))
    out = tmp_path / "g.json"
    assert main(["graph", "build", "--from-dir", str(rec), "--out", str(out)]) == 0
    text = out.read_text()
    assert text.endswith("}\n") and text.count("\n") == 1 and ", " not in text
    assert _gpus(DependencyGraph.load(out)) == {"h": 2}
