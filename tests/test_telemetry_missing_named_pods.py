"""A pod DCGM names on some of its GPUs, on a node that lost a GPU's series.

dcgm-exporter names a pod on each GPU it holds (the kubelet's PodResources ``List``); a GPU whose
series are gone (fallen off the bus, stale) gets an unhealthy placeholder that reads taken. A pod's
devices beyond those it is named on are marked on other GPUs, but a missing GPU still in
allocatable (the device plugin took out only ``capacity - allocatable``) is where such a device most
likely is: its series would have named the pod. Before, a 2-GPU pod named on GPU 0 of a node whose
GPU 1 had no series had its other device marked on GPU 2 as well: GPU 1 counted twice (1 GPU read
free of the 2 idle ones).
"""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")

from fleetmind.serving.telemetry.prometheus import Sample, build_nodes  # noqa: E402

NODE = "gpu-a"
POD = {"namespace": "ml", "pod": "train", "uid": "u1"}


def _dcgm(gpus: tuple[int, ...], named: frozenset[int]) -> list[Sample]:
    out: list[Sample] = []
    for g in gpus:
        lab = {"gpu": str(g), "UUID": f"GPU-{g}", "modelName": "NVIDIA A100-SXM4-80GB",
               "Hostname": NODE}  # fmt: skip
        if g in named:
            lab |= {"exported_pod": "train", "exported_namespace": "ml",
                    "exported_container": "main"}  # fmt: skip
        b = g in named
        out += [
            ("DCGM_FI_DEV_GPU_UTIL", lab, 90.0 if b else 0.0),
            ("DCGM_FI_DEV_FB_USED", lab, 40_000.0 if b else 0.0),
            ("DCGM_FI_DEV_FB_FREE", lab, 41_000.0 if b else 81_000.0),
        ]
    return out


def _ksm(capacity: float, allocatable: float, gpus: float = 2.0) -> list[Sample]:
    return [
        ("kube_node_status_allocatable", {"node": NODE, "resource": "cpu"}, 96.0),
        ("kube_node_status_allocatable", {"node": NODE, "resource": "memory"}, 2.0**40),
        ("node_gpus", {"__name__": "kube_node_status_capacity", "node": NODE}, capacity),
        ("node_gpus", {"__name__": "kube_node_status_allocatable", "node": NODE}, allocatable),
        ("kube_pod_info", {**POD, "node": NODE, "created_by_kind": "Job"}, 1.0),
        ("kube_pod_status_phase", {**POD, "phase": "Running"}, 1.0),
        ("kube_pod_container_resource_requests",
         {**POD, "container": "main", "node": NODE, "resource": "nvidia_com_gpu"}, gpus),
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("allocatable", "free"),
    [
        # GPU 1 still allocatable: the pod's other device is taken to be there
        (4.0, [0, 0, 1000, 1000]),
        # GPU 1 out of allocatable (failed): not the pod's, its other device marked on GPU 2
        (3.0, [0, 0, 0, 1000]),
    ],
    ids=["missing-allocatable", "missing-dropped"],
)
def test_a_missing_gpu_in_allocatable_takes_a_named_pods_other_device(
    allocatable: float, free: list[int]
) -> None:
    (node,) = build_nodes(_dcgm((0, 2, 3), frozenset({0})), _ksm(4.0, allocatable))
    assert [(g.index, g.missing) for g in node.gpus] == [(0, False), (1, True), (2, False),
                                                         (3, False)]  # fmt: skip
    assert [g.free_milli for g in node.gpus] == free
    assert node.gpu_pods == frozenset({"ml/train"})


def test_a_pod_named_nowhere_is_still_marked_on_reported_gpus() -> None:
    """A pod DCGM names on no GPU (its mapping off) gives no hint that a missing GPU is its: its
    devices are marked on reported GPUs, as before."""
    (node,) = build_nodes(_dcgm((0, 2, 3), frozenset()), _ksm(4.0, 4.0, gpus=1.0))
    assert [g.free_milli for g in node.gpus] == [0, 0, 1000, 1000]
    assert node.gpu_pods == frozenset({"ml/train"})


def test_one_placeholder_absorbs_one_device_only() -> None:
    """A 3-GPU pod named on GPU 0 with one GPU missing: the placeholder takes one device, the
    other is marked on an idle GPU."""
    (node,) = build_nodes(_dcgm((0, 2, 3), frozenset({0})), _ksm(4.0, 4.0, gpus=3.0))
    assert [g.free_milli for g in node.gpus] == [0, 0, 0, 1000]
