"""An openb CPU-only pod annotated for the GPU-sharing scheduler (``alibabacloud.com/gpu-count``
``"0"``, ``alibabacloud.com/gpu-milli`` ``"0"``) is a CPU-only pod to the extender, as it is to
``POST /api/v1/placements`` and to the FGD authors' simulator: hkust-adsl/kubernetes-scheduler-
simulator ``pkg/simulator/plugin/open_gpu_share.go`` ``Filter`` returns Success when
``GetGpuMilliFromPodAnnotation(pod) <= 0`` ("Pass if the pod does not require GPU resources"), and
``pkg/type/open-gpu-share/utils/pod.go`` ``GetGpuAffinityFromPodAnnotation`` calls gpu-count 0
``NoGpuTag`` (an affinity tag for scoring). It used to fail every node ("gpu-milli must be
1..1000 ..."). ``gpu-count`` ``"0"`` with a share of 1..1000 is refused: the simulator's Filter
goes on to ``AllocateGpuId`` (``pkg/type/open-gpu-share/cache/gpunodeinfo.go``), which finds no
GPU for a count <= 0, so the pod fails every node there too.

The CPU-only reading must not hide a GPU request: ``nvidia.com/gpu: 2`` (or a MIG resource) beside
``gpu-count`` or ``gpu-milli`` ``"0"`` passed as CPU-only while the device plugin gives the pod its
GPUs, and ``gpu-count`` ``"0"`` beside ``gpu-milli`` ``"5000"`` passed too; both are refused
(``PodUnsupported``: every node unresolvable). ``gpu-count`` ``"2"`` with ``gpu-milli`` ``"0"`` and
no device-plugin request stays CPU-only, as the simulator's Filter (gpu-milli only) passes it."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient

from fleetmind.serving.app import create_app
from fleetmind.serving.scheduler.extender import PodUnsupported, pod_request
from fleetmind.serving.settings import Settings
from fleetmind.serving.telemetry.base import GpuState, NodeState
from fleetmind.serving.telemetry.sim import SimSource

NODES = ["gpu-1", "cpu-1", "cpu-2"]


def _pod(
    name: str, count: str | None, milli: str | None, limits: dict[str, str] | None = None
) -> dict[str, Any]:
    ann = {
        k: v
        for k, v in (("alibabacloud.com/gpu-count", count), ("alibabacloud.com/gpu-milli", milli))
        if v is not None
    }
    return {
        "metadata": {"name": name, "namespace": "ml", "uid": f"{name}-uid", "annotations": ann},
        "spec": {
            "containers": [
                {
                    "name": "c",
                    "resources": {
                        "requests": {"cpu": "6", "memory": "12Gi"},
                        "limits": dict(limits or {}),
                    },
                }
            ]
        },
    }


@pytest.mark.parametrize(
    "count, milli", [("0", "0"), ("1", "0"), ("2", "0"), (None, "0"), ("0", None)]
)
def test_a_zero_gpu_annotation_reads_as_a_cpu_only_pod(count: str | None, milli: str) -> None:
    req = pod_request(_pod("p", count, milli))
    assert (req.num_gpu, req.gpu_milli, req.device_gpus) == (0, 0, False)
    assert (req.cpu_milli, req.memory_mib) == (6000, 12288)


@pytest.mark.parametrize(
    "count, milli, words",
    [
        ("1", "1500", "1..1000"),
        ("-1", "0", ">= 0"),
        ("1", "-5", "1..1000"),
        ("2", "500", "whole"),
        ("0", "1500", "1..1000"),  # above 1000 is refused before "count 0: no GPU" is read
        ("0", "5000", "1..1000"),
        ("0", "-5", "1..1000"),
        # a share on no GPU: the simulator's Filter goes on to AllocateGpuId
        # (open-gpu-share/cache/gpunodeinfo.go), which finds no GPU for a count <= 0
        ("0", "1000", "a GPU share on no GPU"),
        ("0", "500", "a GPU share on no GPU"),
    ],
)
def test_gpu_requests_outside_the_rules_are_still_refused(
    count: str, milli: str, words: str
) -> None:
    with pytest.raises(PodUnsupported) as err:
        pod_request(_pod("p", count, milli))
    assert words in str(err.value) and "\n" not in str(err.value)


# the reviewer's table: each row passed as CPU-only, though the kubelet gives the pod its GPUs
CONFLICTS = [
    ("0", None, {"nvidia.com/gpu": "2"}, "gpu-count 0), nvidia.com/gpu asks 2"),
    (None, "0", {"nvidia.com/gpu": "2"}, "gpu-milli 0), nvidia.com/gpu asks 2"),
    ("2", "0", {"nvidia.com/gpu": "2"}, "gpu-milli 0), nvidia.com/gpu asks 2"),
    ("0", "0", {"nvidia.com/gpu": "1"}, "gpu-count 0), nvidia.com/gpu asks 1"),
    ("0", "5000", {"nvidia.com/gpu": "2"}, "must be 1..1000"),
    ("0", "0", {"nvidia.com/mig-1g.10gb": "1"}, "gpu-count 0), nvidia.com/mig-1g.10gb asks 1"),
]

# annotations that ask for GPUs, but not the ones the device plugin gives (the kubelet hands the
# pod whole nvidia.com/gpu GPUs whatever FleetMind counts): a share of one, another count
DISAGREEMENTS = [
    (None, "500", {"nvidia.com/gpu": "2"}, "1 GPU(s) of 500 milli, nvidia.com/gpu asks 2"),
    ("1", "500", {"nvidia.com/gpu": "1"}, "1 GPU(s) of 500 milli, nvidia.com/gpu asks 1"),
    ("2", "1000", {"nvidia.com/gpu": "1"}, "2 GPU(s) of 1000 milli, nvidia.com/gpu asks 1"),
]


@pytest.mark.parametrize("count, milli, limits, words", DISAGREEMENTS)
def test_annotations_that_disagree_with_the_device_plugin_request_are_refused(
    count: str | None, milli: str | None, limits: dict[str, str], words: str
) -> None:
    with pytest.raises(PodUnsupported) as err:
        pod_request(_pod("p", count, milli, limits))
    assert str(err.value).startswith("conflicting GPU requests: annotations say " + words)


def test_annotations_that_agree_with_the_device_plugin_request_are_read() -> None:
    req = pod_request(_pod("p", "2", "1000", {"nvidia.com/gpu": "2"}))
    assert (req.num_gpu, req.gpu_milli) == (2, 1000)


@pytest.mark.parametrize("count, milli, limits, words", CONFLICTS)
def test_annotations_saying_no_gpu_beside_a_gpu_resource_are_refused(
    count: str | None, milli: str | None, limits: dict[str, str], words: str
) -> None:
    with pytest.raises(PodUnsupported) as err:
        pod_request(_pod("p", count, milli, limits))
    text = str(err.value)
    assert words in text and "\n" not in text, text
    if "asks" in text:
        assert text.startswith(
            "conflicting GPU requests: annotations say no GPU (alibabacloud.com/"
        )


def test_a_zero_gpu_device_plugin_request_stays_cpu_only() -> None:
    req = pod_request(_pod("p", "0", "0", {"nvidia.com/gpu": "0"}))
    assert (req.num_gpu, req.gpu_milli, req.device_gpus) == (0, 0, False)


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    d = tmp_path_factory.mktemp("cpu-only")
    settings = Settings(
        database_url=f"sqlite:///{d}/ext.db",
        rca_model="baseline:upstream-coverage",
        placement_model="heuristic:builtin-bestfit",
        incident_worker=False,
    )
    gpus = [GpuState(i, "NVIDIA H100", mem_total_mib=80000.0, mem_used_mib=0.0) for i in range(8)]
    nodes = [
        NodeState("gpu-1", "local", gpus, 96000, 96000, 500000, 500000),
        NodeState("cpu-1", "local", [], 64000, 64000, 256000, 256000),
        NodeState("cpu-2", "local", [], 64000, 64000, 256000, 256000),
    ]
    with TestClient(create_app(settings)) as c_:
        c_.app.state.services.telemetry = SimSource(nodes)
        yield c_


@pytest.mark.parametrize("name, count, milli", [("z00", "0", "0"), ("z10", "1", "0")])
def test_the_extender_passes_and_scores_it_as_a_cpu_only_pod(
    client: TestClient, name: str, count: str, milli: str
) -> None:
    args = {"Pod": _pod(name, count, milli), "NodeNames": NODES}
    r = client.post("/api/v1/scheduler/filter", json=args)
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["FailedAndUnresolvableNodes"] == {} and body["FailedNodes"] == {}
    assert sorted(body["NodeNames"]) == sorted(NODES)
    r = client.post("/api/v1/scheduler/prioritize", json=args)
    assert r.status_code == 200, r.text
    scores = {h["Host"]: h["Score"] for h in r.json()}
    # as any CPU-only pod: a CPU node is the choice (10), the other 4..3, the GPU node 2..0
    assert sorted([scores["cpu-1"], scores["cpu-2"]]) == [4, 10] and scores["gpu-1"] < 3
    (hold,) = [
        h for h in client.app.state.services.reservations.rows() if h["pod_key"] == f"ml/{name}"
    ]
    assert scores[hold["node"]] == 10 and hold["node"].startswith("cpu-")


def test_the_extender_fails_a_conflicting_pod_on_every_node_as_unresolvable(
    client: TestClient,
) -> None:
    pod = _pod("conflict", "0", None, {"nvidia.com/gpu": "2"})
    r = client.post("/api/v1/scheduler/filter", json={"Pod": pod, "NodeNames": NODES})
    assert r.status_code == 200, r.text
    body = r.json()
    assert not body["NodeNames"] and body["FailedNodes"] == {}
    assert sorted(body["FailedAndUnresolvableNodes"]) == sorted(NODES)
    assert all(
        "conflicting GPU requests" in why for why in body["FailedAndUnresolvableNodes"].values()
    )
