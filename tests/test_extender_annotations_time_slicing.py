"""GPU-sharing annotations that agree with ``nvidia.com/gpu`` on a time-sliced node.

A pod asking ``nvidia.com/gpu: 1`` with ``alibabacloud.com/gpu-count: "1"`` (and optionally
``gpu-milli: "1000"``) is accepted as the same count of whole GPUs; the kubelet gives it the device
plugin's devices whatever the annotations say, so on a node of ``nvidia.com/gpu.replicas`` 4 it
takes one replica (250 milli), as the pod without annotations does. Before, the annotations made
it want a whole GPU (1000 milli) and a node whose every GPU had one replica taken was refused.
"""

from __future__ import annotations

import os
from typing import Any

import pytest

os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")

from fleetmind.serving.scheduler.extender import (  # noqa: E402
    NodeIndex,
    decide,
    pod_request,
    replicas_for,
)
from fleetmind.serving.scheduler.placement import BestFitPlacer, Reservations  # noqa: E402
from fleetmind.serving.telemetry.base import FleetSnapshot, GpuState, NodeState  # noqa: E402

COUNT, MILLI = "alibabacloud.com/gpu-count", "alibabacloud.com/gpu-milli"


def _node() -> NodeState:
    """8 GPUs, each with one of 4 replicas taken (750 milli free)."""
    gpus = [GpuState(index=j, model="NVIDIA A100", free_milli=750) for j in range(8)]
    return NodeState("ts-1", "local", gpus, 96_000, 96_000, 500_000, 500_000, gpu_replicas=4)


def _pod(ann: dict[str, str]) -> dict[str, Any]:
    return {
        "metadata": {"name": "p", "namespace": "ml", "uid": "u1", "annotations": ann},
        "spec": {"containers": [{"name": "a", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]},
    }


@pytest.mark.parametrize("ann", [{}, {COUNT: "1"}, {COUNT: "1", MILLI: "1000"}, {MILLI: "1000"}])
def test_agreeing_annotations_take_one_replica(ann: dict[str, str]) -> None:
    req = pod_request(_pod(ann))
    assert req.device_gpus and req.num_gpu == 1
    assert replicas_for(_node(), req) == 4 and req.need(4) == 250
    snap = FleetSnapshot(source="test", nodes=[_node()])
    _, d = decide({"Pod": _pod(ann), "NodeNames": ["ts-1"]}, snap, Reservations(),
                  BestFitPlacer(), NodeIndex())  # fmt: skip
    assert [o.node for o in d.options] == ["ts-1"], (d.failed, d.unresolvable)


def test_annotations_alone_still_size_the_pod() -> None:
    """Without ``nvidia.com/gpu`` the annotations size the pod (a share of whole GPUs, no
    device-plugin replicas)."""
    pod = _pod({COUNT: "1", MILLI: "1000"})
    pod["spec"]["containers"][0]["resources"] = {}
    req = pod_request(pod)
    assert not req.device_gpus and req.num_gpu == 1 and req.gpu_milli == 1000
    assert replicas_for(_node(), req) == 1
