"""Pods that ask for GPUs through Dynamic Resource Allocation (DRA) are not read as CPU-only.

DRA (``resource.k8s.io/v1``) is GA and on by default in Kubernetes 1.34; NVIDIA's DRA driver
serves the device class ``gpu.nvidia.com``. A pod asks for devices with ``spec.resourceClaims``
(``PodResourceClaim{name, resourceClaimName | resourceClaimTemplateName}``) and names them in a
container's ``resources.claims`` (``ResourceClaim{name, request}``); the API server reports the
claim made from a template in ``status.resourceClaimStatuses`` (``PodResourceClaimStatus{name,
resourceClaimName}``). Sources: https://kubernetes.io/docs/concepts/scheduling-eviction/
dynamic-resource-allocation/ and ``staging/src/k8s.io/api/core/v1/types.go`` (kubernetes/kubernetes
v1.34). The device count lives in the ResourceClaimTemplate, which kube-scheduler does not send to
an extender (``ExtenderArgs`` carries the Pod and nodes only).

Before, such a pod read as CPU-only: filter passed a node with no GPU free and prioritize ranked it
first (10 vs 4), and prioritize held capacity for it. Now every node passes, every score is 0,
nothing is held and one warning per pod is logged; a pod that also asks ``nvidia.com/gpu`` keeps
the GPU path. ``fleetmind graph build`` warns that such pods get no GPU edges.
"""

from __future__ import annotations

import copy
import logging
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from fleetmind.data.graph_build import GraphBuildWarning, build_graph, slim_list_items
from fleetmind.serving.app import create_app
from fleetmind.serving.scheduler import extender
from fleetmind.serving.scheduler.extender import pod_request
from fleetmind.serving.settings import Settings
from fleetmind.serving.telemetry.base import GpuState, NodeState
from fleetmind.serving.telemetry.sim import SimSource

NODES = ["gpu-full", "gpu-free", "cpu-1"]

# A pod as the API server returns it for a GPU asked through a ResourceClaimTemplate (the DRA
# docs' example shape: a template per pod, the claim it made named in resourceClaimStatuses).
DRA_POD: dict[str, Any] = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {"name": "train", "namespace": "ml", "uid": "5f1c9d2e-0000-4000-8000-00000000d7a1"},
    "spec": {
        "containers": [
            {
                "name": "main",
                "image": "nvcr.io/nvidia/pytorch:25.01-py3",
                "resources": {
                    "requests": {"cpu": "1", "memory": "1Gi"},
                    "claims": [{"name": "gpu"}],
                },
            }
        ],
        "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "one-h100"}],
    },
    "status": {
        "phase": "Pending",
        "resourceClaimStatuses": [{"name": "gpu", "resourceClaimName": "train-gpu-x7k2p"}],
    },
}


def _plugin_pod(name: str = "plain") -> dict[str, Any]:
    """The same pod asking one GPU of NVIDIA's device plugin instead (no claims)."""
    pod = copy.deepcopy(DRA_POD)
    pod["metadata"].update(name=name, uid=f"{name}-uid")
    del pod["spec"]["resourceClaims"], pod["status"]["resourceClaimStatuses"]
    res = pod["spec"]["containers"][0]["resources"]
    del res["claims"]
    res["limits"] = {"nvidia.com/gpu": "1"}
    return pod


def _node(name: str, free: int) -> NodeState:
    gpus = [
        GpuState(
            i, "NVIDIA H100", util_pct=0 if i < free else 95, free_milli=1000 if i < free else 0
        )
        for i in range(8)
    ]
    return NodeState(name, "local", gpus, 96000, 96000, 500000, 500000)


@pytest.fixture
def client(tmp_path: Path) -> Iterator[TestClient]:
    settings = Settings(
        database_url=f"sqlite:///{tmp_path}/fm.db",
        rca_model="baseline:upstream-coverage",
        placement_model="heuristic:builtin-bestfit",
        incident_worker=False,
    )
    nodes = [
        _node("gpu-full", 0),
        _node("gpu-free", 8),
        NodeState("cpu-1", "local", [], 64000, 64000, 256000, 256000),
    ]
    with TestClient(create_app(settings)) as c:
        c.app.state.services.telemetry = SimSource(nodes)
        yield c


def _call(c: TestClient, verb: str, pod: dict[str, Any], names: list[str]) -> Any:
    r = c.post(f"/api/v1/scheduler/{verb}", json={"Pod": pod, "NodeNames": names})
    assert r.status_code == 200, r.text
    return r.json()


def _holds(c: TestClient, key: str) -> list[dict[str, Any]]:
    return [h for h in c.app.state.services.reservations.rows() if h["pod_key"] == key]


def test_the_pod_request_counts_the_claims() -> None:
    req = pod_request(DRA_POD)
    assert (req.resource_claims, req.num_gpu, req.cpu_milli) == (1, 0, 1000)
    assert pod_request(_plugin_pod()).resource_claims == 0


def test_filter_keeps_every_node_and_holds_nothing(client: TestClient) -> None:
    body = _call(client, "filter", DRA_POD, NODES)
    assert body["NodeNames"] == NODES  # the node with no GPU free included, in the order sent
    assert body["FailedNodes"] == {} and body["FailedAndUnresolvableNodes"] == {}
    # one node passing is where filter holds (kube-scheduler skips prioritize then); a CPU-only
    # reading held the GPU node's CPU and memory for the pod
    body = _call(client, "filter", DRA_POD, ["gpu-full"])
    assert body["NodeNames"] == ["gpu-full"]
    assert _holds(client, "ml/train") == []


def test_prioritize_scores_every_node_alike_and_holds_nothing(client: TestClient) -> None:
    scores = {h["Host"]: h["Score"] for h in _call(client, "prioritize", DRA_POD, NODES)}
    assert scores == dict.fromkeys(NODES, 0)
    assert _holds(client, "ml/train") == []


def test_one_warning_per_pod_not_per_call(
    client: TestClient, caplog: pytest.LogCaptureFixture
) -> None:
    other = copy.deepcopy(DRA_POD)
    other["metadata"].update(name="train-2", uid="train-2-uid")
    with caplog.at_level(logging.WARNING, logger="fleetmind.serving"):
        for _ in range(3):
            for pod in (DRA_POD, other):
                _call(client, "filter", pod, NODES)
                _call(client, "prioritize", pod, NODES)
    said = [r.getMessage() for r in caplog.records if "Dynamic Resource Allocation" in r.message]
    assert len(said) == 2, said
    assert "ml/train " in said[0] and "ml/train-2 " in said[1]
    assert client.app.state.services.extender.index.claim_pods_seen == 2


def test_the_logged_keys_are_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(extender, "MAX_CLAIM_PODS_LOGGED", 2)
    index = extender.NodeIndex()
    for name in ("a", "b", "c", "a"):  # "a" forgotten when "c" came: logged again
        pod = copy.deepcopy(DRA_POD)
        pod["metadata"]["name"] = name
        index.warn_claims(pod_request(pod))
    assert list(index.claim_pods) == ["ml/c", "ml/a"] and index.claim_pods_seen == 4


def test_a_device_plugin_gpu_pod_is_placed_as_before(client: TestClient) -> None:
    body = _call(client, "filter", _plugin_pod(), NODES)
    assert "gpu-full" in body["FailedNodes"] and "gpu-full" not in body["NodeNames"]
    scores = {h["Host"]: h["Score"] for h in _call(client, "prioritize", _plugin_pod(), NODES)}
    assert scores["gpu-free"] == 10 and scores["gpu-full"] == 0
    (hold,) = _holds(client, "ml/plain")
    assert hold["node"] == "gpu-free"


def test_claims_beside_nvidia_gpu_keep_the_gpu_path(client: TestClient) -> None:
    pod = copy.deepcopy(DRA_POD)
    pod["metadata"]["name"] = "both"
    pod["spec"]["containers"][0]["resources"]["limits"] = {"nvidia.com/gpu": "1"}
    assert pod_request(pod).num_gpu == 1
    body = _call(client, "filter", pod, NODES)
    assert "gpu-full" in body["FailedNodes"]
    scores = {h["Host"]: h["Score"] for h in _call(client, "prioritize", pod, NODES)}
    assert scores["gpu-free"] == 10
    assert [h["node"] for h in _holds(client, "ml/both")] == ["gpu-free"]


@pytest.mark.parametrize("claims", ["gpu", {"name": "gpu"}, ["gpu"]])
def test_malformed_resource_claims_are_a_422(client: TestClient, claims: Any) -> None:
    pod = copy.deepcopy(DRA_POD)
    pod["spec"]["resourceClaims"] = claims
    r = client.post("/api/v1/scheduler/filter", json={"Pod": pod, "NodeNames": NODES})
    assert r.status_code == 422, r.text
    assert "resourceClaims" in r.text


# -- graph build --------------------------------------------------------------------------------


def _cluster(pod: dict[str, Any]) -> list[dict[str, Any]]:
    """nodes, pods, services, endpoint slices: one 8-GPU node running ``pod``."""
    node = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": "gpu-a",
            "labels": {"nvidia.com/gpu.count": "8", "nvidia.com/gpu.product": "NVIDIA-H100"},
        },
        "status": {"capacity": {"cpu": "96"}, "allocatable": {"cpu": "96"}},
    }
    pod = copy.deepcopy(pod)
    pod["spec"]["nodeName"] = "gpu-a"
    pod["status"]["phase"] = "Running"
    return [
        {"kind": "NodeList", "items": [node]},
        {"kind": "PodList", "items": [pod]},
        {"kind": "ServiceList", "items": []},
        {"kind": "EndpointSliceList", "items": []},
    ]


def _build(lists: list[dict[str, Any]]) -> tuple[Any, list[str]]:
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        g = build_graph(*lists, cluster="c")
    return g, [str(w.message) for w in seen if issubclass(w.category, GraphBuildWarning)]


def test_graph_build_warns_that_dra_pods_get_no_gpu_edges() -> None:
    g, said = _build(_cluster(DRA_POD))
    assert len(said) == 1 and "1 pod(s)" in said[0] and "'ml/train'" in said[0], said
    assert ("c/pod/ml/train", "c/host/gpu-a", "runs_on") in {
        (e.src, e.dst, e.kind) for e in g.edges
    }
    # as `fleetmind graph build` lists pods from the API: slimmed to the fields the build reads
    slim = _cluster(DRA_POD)
    slim[1]["items"] = slim_list_items("pods", slim[1]["items"])
    assert _build(slim)[1] == said


def test_graph_build_does_not_warn_for_device_plugin_pods() -> None:
    assert _build(_cluster(_plugin_pod()))[1] == []


def test_graph_build_does_not_warn_for_a_gpu_pod_that_also_claims_another_device() -> None:
    """A pod asking every nvidia.com/gpu of its node through the device plugin and an RDMA NIC
    through a claim gets its GPU edges: no warning that they are not drawn."""
    pod = _plugin_pod("both")
    pod["spec"]["containers"][0]["resources"]["limits"] = {"nvidia.com/gpu": "8"}
    pod["spec"]["resourceClaims"] = [{"name": "nic", "resourceClaimTemplateName": "rdma-nic"}]
    lists = _cluster(pod)
    lists[0]["items"][0]["status"] = {
        "capacity": {"cpu": "96", "nvidia.com/gpu": "8"},
        "allocatable": {"cpu": "96", "nvidia.com/gpu": "8"},
    }
    g, said = _build(lists)
    gpus = {e.dst for e in g.edges if e.src == "c/pod/ml/both" and e.dst.startswith("c/gpu/")}
    assert len(gpus) == 8 and said == [], said
