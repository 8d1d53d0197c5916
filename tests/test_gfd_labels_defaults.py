"""GPU feature discovery's labels where the graph builder and the ``sim`` telemetry source used to
fall back to defaults.

* Under the device plugin's MIG ``mixed`` strategy ``nvidia.com/gpu`` counts only the GPUs not in
  MIG mode (times their time-slicing replicas), MIG instances being ``nvidia.com/mig-<profile>``
  (NVIDIA, "MIG Support in Kubernetes"; k8s-device-plugin ``internal/lm/mig-strategy.go``), so a
  pod asking for all of ``nvidia.com/gpu`` does not hold the node's MIG GPUs. A node is mixed
  only where some ``nvidia.com/mig-<profile>`` quantity is positive: GPU feature discovery writes
  ``nvidia.com/mig.strategy=<strategy>`` on every GPU node whenever the strategy is not ``none``
  (k8s-device-plugin ``internal/lm/strategy.go``, ``internal/lm/mig-strategy.go``), and the kubelet
  keeps a resource the device plugin stopped advertising at ``"0"`` (kubernetes
  ``pkg/kubelet/nodestatus/setters.go``).
* ``nvidia.com/gpu.memory`` is one GPU's framebuffer in MiB (k8s-device-plugin
  ``internal/lm/resource.go``); under the MIG ``single`` strategy it is a MIG instance's
  (``mig-strategy.go`` labels the instances as ``nvidia.com/gpu``), so it is not the GPU's there.
* GPU feature discovery spells the product ``Tesla-T4``, ``NVIDIA-A100-SXM4-40GB`` (spaces turned
  to hyphens); the sim source read memory only by short names (``T4``), so every such card was
  80 GiB, and a GPU without a model was an ``A100``. A Grace superchip's product names the
  CPU's memory (``NVIDIA-GH200-480GB``: 480 GB of the CPU's LPDDR5X, not the GPU's 96 GB of
  HBM3, NVIDIA GH200 Grace Hopper Superchip datasheet), not the GPU's.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any

import pytest

from fleetmind.data.graph import DependencyGraph
from fleetmind.data.graph_build import build_graph
from fleetmind.serving.telemetry.sim import (
    FALLBACK_GPU_MEMORY_MIB,
    UNKNOWN_MODEL,
    SimSource,
    builtin_nodes,
    gpu_memory_mib,
)

DEFAULTS = Path(__file__).resolve().parents[1] / "serving" / "defaults" / "graph.json"


def _node(name: str, labels: dict[str, str], capacity: dict[str, str]) -> dict[str, Any]:
    return {"metadata": {"name": name, "labels": labels},
            "status": {"capacity": capacity, "allocatable": capacity}}  # fmt: skip


def _pod(node: str, gpus: str) -> dict[str, Any]:
    return {"metadata": {"name": "p", "namespace": "default"},
            "spec": {"nodeName": node,
                     "containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": gpus}}}]},
            "status": {"phase": "Running"}}  # fmt: skip


def _graph(nodes: list[dict[str, Any]], pods: list[dict[str, Any]] | None = None) -> Any:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return build_graph({"items": nodes}, {"items": pods or []}, {"items": []})


def _pod_gpus(nodes: list[dict[str, Any]], gpus: str) -> set[str]:
    g = _graph(nodes, [_pod("n1", gpus)])
    return {e.dst for e in g.edges if e.src == "default/pod/default/p" and "/gpu/" in e.dst}


MIXED_TS = {  # 4 GPUs MIG-disabled and time-sliced 2 ways, 4 split into two 3g.40gb each
    "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB-SHARED",
    "nvidia.com/gpu.count": "8",
    "nvidia.com/gpu.replicas": "2",
    "nvidia.com/mig.strategy": "mixed",
    "nvidia.com/mig-3g.40gb.count": "8",
}


@pytest.mark.parametrize(
    ("labels", "capacity"),
    [
        (MIXED_TS, {"nvidia.com/gpu": "8", "nvidia.com/mig-3g.40gb": "8"}),
        # no MIG resource readable: 8 devices of 2 replicas are 4 GPUs' worth, not the 8 labelled
        (MIXED_TS, {"nvidia.com/gpu": "8"}),
        # no GPU feature discovery: a MIG resource beside nvidia.com/gpu marks the mixed strategy
        ({}, {"nvidia.com/gpu": "8", "nvidia.com/mig-3g.40gb": "4"}),
    ],
)
def test_a_pod_of_every_device_on_a_mixed_node_holds_no_mig_gpu(
    labels: dict[str, str], capacity: dict[str, str]
) -> None:
    assert _pod_gpus([_node("n1", labels, capacity)], capacity["nvidia.com/gpu"]) == set()


H100_MIXED_CLUSTER = {  # a plain 8 x H100 node of a cluster whose MIG strategy is mixed
    "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
    "nvidia.com/gpu.count": "8",
    "nvidia.com/gpu.replicas": "1",
    "nvidia.com/mig.strategy": "mixed",
    "nvidia.com/mig.capable": "true",
}


@pytest.mark.parametrize(
    ("labels", "capacity", "devices"),
    [
        # GFD labels every GPU node of a mixed cluster mixed, MIG instances or not
        (H100_MIXED_CLUSTER, {"nvidia.com/gpu": "8"}, "8"),
        # time-sliced 2 ways in a mixed cluster, no MIG GPU: 16 devices are the 8 GPUs
        ({**H100_MIXED_CLUSTER, "nvidia.com/gpu.replicas": "2",
          "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3-SHARED"}, {"nvidia.com/gpu": "16"}, "16"),
        # MIG profiles the plugin advertised before the node left the mixed strategy, kept at "0"
        ({"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB", "nvidia.com/gpu.count": "8",
          "nvidia.com/mig.strategy": "single"},
         {"nvidia.com/gpu": "8", "nvidia.com/mig-1g.10gb": "0", "nvidia.com/mig-3g.40gb": "0"}, "8"),
        ({}, {"nvidia.com/gpu": "8", "nvidia.com/mig-1g.10gb": "0"}, "8"),  # no GFD at all
    ],
)  # fmt: skip
def test_a_node_without_mig_instances_in_a_mixed_cluster_gives_every_gpu(
    labels: dict[str, str], capacity: dict[str, str], devices: str
) -> None:
    assert _pod_gpus([_node("n1", labels, capacity)], devices) == {
        f"default/gpu/n1/{i}" for i in range(8)
    }


def test_a_time_sliced_node_counts_its_replicas_before_its_gpus() -> None:
    # capacity 8 = 4 GPUs x 2 replicas on a node labelled with 8 GPUs: 8 devices are not every GPU
    labels = {"nvidia.com/gpu.count": "8", "nvidia.com/gpu.replicas": "2"}
    assert _pod_gpus([_node("n1", labels, {"nvidia.com/gpu": "8"})], "8") == set()


@pytest.mark.parametrize(
    ("labels", "devices"),
    [
        ({"nvidia.com/gpu.count": "8"}, "8"),
        ({"nvidia.com/gpu.count": "8", "nvidia.com/gpu.replicas": "2"}, "16"),
        ({"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-40GB-MIG-1g.5gb",
          "nvidia.com/gpu.count": "56", "nvidia.com/mig.strategy": "single"}, "56"),
    ],
)  # fmt: skip
def test_a_whole_node_still_gives_every_gpu(labels: dict[str, str], devices: str) -> None:
    gpus = _pod_gpus([_node("n1", labels, {"nvidia.com/gpu": devices})], devices)
    assert gpus == {f"default/gpu/n1/{i}" for i in range(8)}


def _gpu_attrs(labels: dict[str, str], devices: str = "2") -> dict[str, Any]:
    g = _graph([_node("n1", labels, {"nvidia.com/gpu": devices})])
    return next(n.attrs for n in g.nodes if n.id == "default/gpu/n1/0")


def test_the_gpu_memory_label_is_carried_in_mib() -> None:
    attrs = _gpu_attrs({"nvidia.com/gpu.product": "Tesla-T4", "nvidia.com/gpu.memory": "15360"})
    assert attrs == {"model": "Tesla-T4", "memory_mib": 15360}


@pytest.mark.parametrize(
    ("labels", "devices"),
    [
        ({"nvidia.com/gpu.product": "Tesla-T4"}, "2"),  # no label: the attrs of before
        ({"nvidia.com/gpu.product": "Tesla-T4", "nvidia.com/gpu.memory": "0"}, "2"),
        # single strategy: the label is a 1g.5gb instance's 4864 MiB, not the GPU's
        ({"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-40GB-MIG-1g.5gb",
          "nvidia.com/gpu.count": "14", "nvidia.com/gpu.memory": "4864"}, "14"),
    ],
)  # fmt: skip
def test_no_gpu_memory_attr_without_a_whole_gpus_label(
    labels: dict[str, str], devices: str
) -> None:
    assert "memory_mib" not in _gpu_attrs(labels, devices)


def _sim(nodes: list[dict[str, Any]]) -> dict[str, list[tuple[str, float | None]]]:
    dg = DependencyGraph.from_json(json.loads(_graph(nodes).model_dump_json()))
    snap = SimSource.from_graph(dg).collect()
    return {n.name: [(g.model, g.mem_total_mib) for g in n.gpus] for n in snap.nodes}


def test_sim_reads_gfd_memory_and_product_strings() -> None:
    def gfd(name: str, product: str, memory: str | None = None) -> dict[str, Any]:
        labels = {"nvidia.com/gpu.product": product, "nvidia.com/gpu.count": "1"}
        if memory:
            labels["nvidia.com/gpu.memory"] = memory
        return _node(name, labels, {"nvidia.com/gpu": "1"})

    fleet = _sim([
        gfd("l4", "NVIDIA-L4", "23034"),  # the label, not the spec table's 24 GB
        gfd("t4", "Tesla-T4"),  # no label: the product string, normalised
        gfd("a100-40", "NVIDIA-A100-SXM4-40GB"),
        gfd("a10g", "NVIDIA-A10G"),
        _node("bare", {}, {"nvidia.com/gpu": "1"}),  # no GPU feature discovery at all
    ])  # fmt: skip
    assert fleet == {
        "l4": [("NVIDIA-L4", 23034.0)],
        "t4": [("Tesla-T4", 15360.0)],
        "a100-40": [("NVIDIA-A100-SXM4-40GB", 40960.0)],
        "a10g": [("NVIDIA-A10G", 24576.0)],
        "bare": [(UNKNOWN_MODEL, float(FALLBACK_GPU_MEMORY_MIB))],
    }


@pytest.mark.parametrize(
    ("model", "mib"),
    [
        ("A100", 81920), ("H100", 81920), ("V100", 32768), ("T4", 15360),  # the short names
        ("Tesla-T4", 15360), ("NVIDIA-A100-SXM4-40GB", 40960), ("Tesla V100-SXM2-16GB", 16384),
        ("NVIDIA H100 80GB HBM3", 81920), ("NVIDIA-A10G", 24576), ("NVIDIA L40S", 49152),
        ("V100M16", 16384),
        # Grace superchips: the size in the name is the CPU's LPDDR5X, not
        # the GPU's 96 GB of HBM3 (NVIDIA GH200 datasheet); no table knows them: the placeholder
        ("NVIDIA-GH200-480GB", FALLBACK_GPU_MEMORY_MIB), ("NVIDIA GH200 480GB", FALLBACK_GPU_MEMORY_MIB),
        ("NVIDIA-GB200", FALLBACK_GPU_MEMORY_MIB),
        ("A1000", FALLBACK_GPU_MEMORY_MIB), ("NVIDIA-L4", 24576),  # L4 datasheet: 24 GB
        (UNKNOWN_MODEL, FALLBACK_GPU_MEMORY_MIB), ("", FALLBACK_GPU_MEMORY_MIB),
    ],
)  # fmt: skip
def test_gpu_memory_mib(model: str, mib: int) -> None:
    assert gpu_memory_mib(model) == float(mib)


def test_the_served_default_graph_and_builtin_fleet_are_unchanged() -> None:
    dg = DependencyGraph.from_json(json.loads(DEFAULTS.read_text()))
    gpus = [g for n in SimSource.from_graph(dg).collect().nodes for g in n.gpus]
    assert gpus and {(g.model, g.mem_total_mib) for g in gpus} <= {
        ("A100", 81920.0),
        ("H100", 81920.0),
    }
    assert {(g.model, g.mem_total_mib) for n in builtin_nodes() for g in n.gpus} == {
        ("A100", 81920.0)
    }
