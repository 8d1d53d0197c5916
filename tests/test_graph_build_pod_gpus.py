"""``fleetmind graph build`` joins a pod that holds every GPU of its node to each of them.

With NVIDIA's device plugin a pod asks for ``nvidia.com/gpu`` devices and the kubelet picks which;
no API object records the choice, so a partial request names no GPU (only the Alibaba GPU-sharing
annotation ``alibabacloud.com/gpu-index`` does). A pod whose effective ``nvidia.com/gpu`` request
(limits, else requests; app containers and sidecars summed, the larger of that and the largest
init container: Kubernetes docs "Init Containers") equals its node's devices, on a node advertising
one device per physical GPU, holds them all: it ``runs_on`` every GPU. A node with time-slicing
replicas (``nvidia.com/gpu.replicas``) or MIG instances advertises more devices than GPUs and gets
no such edges.

The cluster is ``tests/data/k8s/kps_cluster.json`` (``llama-train-1`` asks for 4 of 8 GPUs).
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from fleetmind.data.graph_build import build_graph

DATA = Path(__file__).parent / "data" / "k8s"
C = "prod-eu"
POD = f"{C}/pod/ml/llama-train-1"
GPUS = {f"{C}/gpu/gpu-a100-1/{i}" for i in range(8)}


def _cluster() -> dict[str, Any]:
    return json.loads((DATA / "kps_cluster.json").read_text())


def _pod(k: dict[str, Any], name: str) -> dict[str, Any]:
    return next(p for p in k["pods"]["items"] if p["metadata"]["name"] == name)


def _gpu_edges(k: dict[str, Any]) -> set[str]:
    g = build_graph(k["nodes"], k["pods"], k["services"], k["endpointslices"], cluster=C)
    return {e.dst for e in g.edges if e.src == POD and e.kind == "runs_on" and "/gpu/" in e.dst}


def _limits(n: str) -> dict[str, Any]:
    return {"resources": {"limits": {"nvidia.com/gpu": n}}}


def test_a_partial_request_names_no_gpu() -> None:
    assert _gpu_edges(_cluster()) == set()


@pytest.mark.parametrize(
    "spec",
    [
        {"containers": [{"name": "llama", **_limits("8")}]},
        {"containers": [{"name": "a", **_limits("4")}, {"name": "b", **_limits("4")}]},
        {"containers": [{"name": "a", "resources": {"requests": {"nvidia.com/gpu": 8}}}]},
        {"initContainers": [{"name": "warm", **_limits("8")}],
         "containers": [{"name": "llama", **_limits("2")}]},
        {"initContainers": [{"name": "side", "restartPolicy": "Always", **_limits("4")}],
         "containers": [{"name": "llama", **_limits("4")}]},
    ],
    ids=["one_container", "two_containers", "requests", "init_container", "sidecar"],
)  # fmt: skip
def test_a_whole_node_request_runs_on_every_gpu(spec: dict[str, Any]) -> None:
    k = _cluster()
    p = _pod(k, "llama-train-1")
    p["spec"] = {**{s: v for s, v in p["spec"].items() if s not in ("containers", "initContainers")},
                 **copy.deepcopy(spec)}  # fmt: skip
    assert _gpu_edges(k) == GPUS


def test_time_slicing_counts_devices() -> None:
    """Time-slicing: 8 GPUs x 2 replicas = 16 devices. 8 devices may be any replicas of any GPUs;
    all 16 are every GPU."""
    k = _cluster()
    node = next(n for n in k["nodes"]["items"] if n["metadata"]["name"] == "gpu-a100-1")
    node["metadata"]["labels"]["nvidia.com/gpu.replicas"] = "2"
    for field in ("capacity", "allocatable"):
        node["status"][field]["nvidia.com/gpu"] = "16"
    limits = _pod(k, "llama-train-1")["spec"]["containers"][0]["resources"]["limits"]
    limits["nvidia.com/gpu"] = "8"
    assert _gpu_edges(k) == set()
    limits["nvidia.com/gpu"] = "16"
    assert _gpu_edges(k) == GPUS


def test_an_unhealthy_gpu_leaves_the_choice_open() -> None:
    """Capacity 8, allocatable 7 (the device plugin marked a GPU unhealthy after an XID): a pod of
    7 devices may hold any 7; one of 8 holds them all."""
    k = _cluster()
    node = next(n for n in k["nodes"]["items"] if n["metadata"]["name"] == "gpu-a100-1")
    node["status"]["allocatable"]["nvidia.com/gpu"] = "7"
    limits = _pod(k, "llama-train-1")["spec"]["containers"][0]["resources"]["limits"]
    limits["nvidia.com/gpu"] = "7"
    assert _gpu_edges(k) == set()
    limits["nvidia.com/gpu"] = "8"
    assert _gpu_edges(k) == GPUS
