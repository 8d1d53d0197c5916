"""Accelerators of other vendors (AMD, Intel Gaudi, Google TPU, Intel GPU, AWS Neuron).

FleetMind models NVIDIA GPUs only. Before, a node whose only accelerators were another vendor's
looked like a CPU node (GPU nodes were "nodes whose telemetry lists GPUs"), so a CPU-only pod could
score 10 on a Gaudi node; and a pod asking for ``amd.com/gpu`` was read as CPU-only and ranked by
CPU and memory with a 10-vs-4 lead. Now telemetry marks nodes with such devices allocatable
(``NodeState.other_devices``) and CPU-only pods prefer real CPU nodes; a pod asking for such devices
(and no NVIDIA GPU) passes every node with score 0 and no hold, as a pod with DRA claims.

Upstream shapes modelled here:

* ``ExtenderArgs{Pod, Nodes, NodeNames}`` and ``HostPriority{Host, Score}`` of
  ``k8s.io/kube-scheduler/extender/v1`` (``staging/src/k8s.io/kube-scheduler/extender/v1/
  types.go``, kubernetes/kubernetes): Go field names, no JSON tags; ``Nodes`` (a ``v1.NodeList``)
  when ``nodeCacheCapable: false``, else ``NodeNames``.
* ``v1.Node.status.allocatable`` of extended resources as the device plugins advertise them:
  ``amd.com/gpu`` (ROCm/k8s-device-plugin), ``habana.ai/gaudi``
  (HabanaAI/habanalabs-k8s-device-plugin), ``google.com/tpu`` (GKE TPU nodes),
  ``gpu.intel.com/i915`` (intel/intel-device-plugins-for-kubernetes).
* kube-state-metrics' ``kube_node_status_allocatable{node, resource, unit}``, the resource name
  through ``SanitizeLabelName`` (``amd.com/gpu`` -> ``amd_com_gpu``, unit ``integer``;
  ``internal/store/node.go`` of kubernetes/kube-state-metrics).
"""

from __future__ import annotations

import copy
import logging
import re
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pynvml
import pytest
from fastapi.testclient import TestClient
from k8s_helpers import dcgm_text, ksm_pod_info, ksm_prometheus

from fleetmind.data.graph_build import OTHER_DEVICE_PATTERN, is_other_device
from fleetmind.serving.app import create_app
from fleetmind.serving.scheduler.extender import pod_request
from fleetmind.serving.scheduler.placement import Option, cpu_nodes_first
from fleetmind.serving.settings import Settings
from fleetmind.serving.telemetry.base import (
    GpuState,
    NodeState,
)
from fleetmind.serving.telemetry.nvml import NvmlSource
from fleetmind.serving.telemetry.prometheus import (
    PrometheusApiSource,
    build_nodes,
    fleet_queries,
)
from fleetmind.serving.telemetry.sim import SimSource, builtin_nodes

# nodes as the prometheus source builds them: kube-state-metrics CPU/memory on every node, DCGM GPUs
# on the NVIDIA node only; names so that the accelerator nodes sort first
GAUDI, AMD, NV, CPU = "a-gaudi-0", "b-mi300x-0", "c-h100-0", "z-system-0"
OTHER = {AMD: frozenset({"amd_com_gpu"}), GAUDI: frozenset({"habana_ai_gaudi"})}
ALLOCATABLE = {AMD: {"amd.com/gpu": "8"}, GAUDI: {"habana.ai/gaudi": "8"}, NV: {}, CPU: {}}


def _nodes(other: bool) -> list[NodeState]:
    """The four nodes, each with the same room; ``other``: the AMD and Gaudi nodes carry their
    devices (as the prometheus source with kube-state-metrics marks them)."""
    gpus = [GpuState(i, "NVIDIA H100 80GB HBM3", mem_total_mib=81559.0) for i in range(8)]
    out = []
    for name in (GAUDI, AMD, NV, CPU):
        node = NodeState(name, "c", gpus if name == NV else [], 96000, 96000, 500000, 500000)
        if other:
            node.other_devices = OTHER.get(name, frozenset())
        out.append(node)
    return out


def _pod(name: str, limits: dict[str, str], requests: dict[str, str] | None = None) -> dict:
    """A ``v1.Pod`` with one container; extended resources in ``limits`` only (the API server
    defaults their requests to the limits)."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "ml", "uid": f"{name}-uid"},
        "spec": {
            "containers": [
                {
                    "name": "main",
                    "image": "busybox",
                    "resources": {
                        "requests": requests or {"cpu": "2", "memory": "4Gi"},
                        "limits": limits,
                    },
                }
            ]
        },
    }


def _node_obj(name: str) -> dict[str, Any]:
    """A ``v1.Node`` as kube-scheduler sends it with ``nodeCacheCapable: false``."""
    alloc = {"cpu": "96", "memory": "500Gi", "pods": "110", **ALLOCATABLE[name]}
    if name == NV:
        alloc["nvidia.com/gpu"] = "8"
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
        "status": {"capacity": dict(alloc), "allocatable": alloc},
    }


@pytest.fixture
def app(tmp_path: Path) -> Iterator[TestClient]:
    settings = Settings(
        database_url=f"sqlite:///{tmp_path}/fm.db",
        rca_model="baseline:upstream-coverage",
        placement_model="heuristic:builtin-bestfit",
        incident_worker=False,
    )
    with TestClient(create_app(settings)) as c:
        yield c


def _call(c: TestClient, verb: str, args: dict[str, Any]) -> Any:
    r = c.post(f"/api/v1/scheduler/{verb}", json=args)
    assert r.status_code == 200, r.text
    return r.json()


def _scores(c: TestClient, args: dict[str, Any]) -> dict[str, int]:
    return {h["Host"]: h["Score"] for h in _call(c, "prioritize", args)}


def _holds(c: TestClient) -> dict[str, str]:
    return {h["pod_key"]: h["node"] for h in c.app.state.services.reservations.rows()}


@pytest.mark.parametrize(
    "name",
    [
        "amd.com/gpu",
        "amd_com_gpu",
        "amd.com/cpx_nps4",
        "amd.com/spx_nps1",
        "amd.com/dpx_nps2",
        "amd.com/gpu_vf",
        "amd.com/gpu_pf",
        "habana.ai/gaudi",
        "google.com/tpu",
        "gpu.intel.com/i915",
        "gpu.intel.com/xe",
        "aws.amazon.com/neuron",
        "aws.amazon.com/neuroncore",
    ],
)
def test_other_vendors_devices_are_recognised(name: str) -> None:
    assert is_other_device(name)
    # the same pattern in PromQL (RE2, anchored): kube-state-metrics' name matches it whole
    assert re.fullmatch(OTHER_DEVICE_PATTERN, re.sub(r"[^a-zA-Z0-9_]", "_", name))


@pytest.mark.parametrize(
    "name",
    [
        "nvidia.com/gpu",
        "nvidia.com/mig-1g.10gb",
        "nvidia_com_gpu",
        "cpu",
        "memory",
        "pods",
        "ephemeral-storage",
        "hugepages-2Mi",
        "intel.com/intel_sriov_netdevice",  # an SR-IOV NIC, not an accelerator
        "amd.com/nic",  # AMD network operator's AI NIC PF (ROCm/network-operator), not a GPU
        "amd.com/vnic",  # ... and its VF
        "amd_com_vnic",
        "amd.com/gpu-extra",
        "google.com/tpu-extra",
    ],
)
def test_other_resources_are_not(name: str) -> None:
    assert not is_other_device(name)


def test_cpu_nodes_first_puts_other_vendors_nodes_with_gpu_nodes() -> None:
    options = [Option("c", n, (), 0.0) for n in (GAUDI, AMD, NV, CPU)]
    ordered = [o.node for o in cpu_nodes_first(options, _nodes(other=True))]
    assert ordered == [CPU, GAUDI, AMD, NV]


def test_a_cpu_pod_prefers_the_cpu_node_over_amd_and_gaudi_nodes(app: TestClient) -> None:
    app.app.state.services.telemetry = SimSource(_nodes(other=True))
    args = {"Pod": _pod("web", {}), "NodeNames": [GAUDI, AMD, NV, CPU]}
    scores = _scores(app, args)
    assert scores[CPU] == 10
    assert max(scores[n] for n in (GAUDI, AMD, NV)) <= 2
    assert _holds(app) == {"ml/web": CPU}


def test_node_objects_mark_accelerator_nodes_without_kube_state_metrics(app: TestClient) -> None:
    """``nodeCacheCapable: false``: the Nodes' ``status.allocatable`` show the devices even where
    telemetry does not (no kube-state-metrics series of them)."""
    app.app.state.services.telemetry = SimSource(_nodes(other=False))
    items = [_node_obj(n) for n in (GAUDI, AMD, NV, CPU)]
    args = {"Pod": _pod("web", {}), "Nodes": {"kind": "NodeList", "items": items}}
    passed = _call(app, "filter", args)["Nodes"]["items"]
    assert [n["metadata"]["name"] for n in passed] == [GAUDI, AMD, NV, CPU]
    scores = _scores(app, args)
    assert scores[CPU] == 10
    assert max(scores[n] for n in (GAUDI, AMD, NV)) <= 2


def test_a_resource_of_zero_is_no_accelerator_node(app: TestClient) -> None:
    """A device plugin gone from the node: the kubelet sets the resource's capacity to 0 and
    keeps the name (``MachineInfo`` in ``pkg/kubelet/nodestatus/setters.go`` of
    kubernetes/kubernetes, "Set capacity for removed resource to 0 on device removal"), and
    allocatable with it: a CPU node again."""
    app.app.state.services.telemetry = SimSource(_nodes(other=False))
    gone = _node_obj(GAUDI)
    gone["status"]["capacity"]["habana.ai/gaudi"] = "0"
    gone["status"]["allocatable"]["habana.ai/gaudi"] = "0"
    items = [gone, _node_obj(NV)]
    scores = _scores(app, {"Pod": _pod("web", {}), "Nodes": {"kind": "NodeList", "items": items}})
    assert scores[GAUDI] == 10 and scores[NV] == 2  # the GPU node: 2..0


def test_unhealthy_devices_out_of_allocatable_still_mark_the_node(app: TestClient) -> None:
    """All 8 Gaudis unhealthy: the device plugin reports them ``Unhealthy`` and the kubelet takes
    them out of allocatable only (capacity 8, allocatable 0: ``GetCapacity`` in
    ``pkg/kubelet/cm/devicemanager/manager.go`` of kubernetes/kubernetes counts healthy plus
    unhealthy devices as capacity, healthy ones as allocatable). The node is still no CPU node:
    the CPU pod keeps its 10 on the real CPU node (before, the Gaudi node read as a CPU node and
    tied it)."""
    app.app.state.services.telemetry = SimSource(_nodes(other=False))
    sick = _node_obj(GAUDI)
    sick["status"]["allocatable"]["habana.ai/gaudi"] = "0"
    items = [sick, _node_obj(NV), _node_obj(CPU)]
    scores = _scores(app, {"Pod": _pod("web", {}), "Nodes": {"kind": "NodeList", "items": items}})
    assert scores[CPU] == 10 and scores[GAUDI] <= 2 and scores[NV] <= 2
    assert _holds(app) == {"ml/web": CPU}


def test_a_cpu_pod_asking_an_amd_nic_keeps_its_ranking(app: TestClient) -> None:
    """``amd.com/vnic`` is an AI NIC's virtual function (ROCm/network-operator's device plugin),
    not an accelerator: the pod is ranked by CPU and memory (before: passed through, all 0)."""
    app.app.state.services.telemetry = SimSource(
        [
            NodeState("cpu-1", "c", [], 64000, 64000, 256000, 256000),
            NodeState("cpu-2", "c", [], 64000, 8000, 256000, 16000),
        ]
    )
    pod = _pod("nf", {"amd.com/vnic": "1"}, {"cpu": "4", "memory": "8Gi", "amd.com/vnic": "1"})
    assert pod_request(pod).other_devices == ()
    scores = _scores(app, {"Pod": pod, "NodeNames": ["cpu-1", "cpu-2"]})
    assert scores["cpu-1"] == 10 and scores["cpu-2"] < 10
    assert _holds(app) == {"ml/nf": "cpu-1"}


@pytest.mark.parametrize(
    "resource", ["amd.com/gpu", "habana.ai/gaudi", "google.com/tpu", "gpu.intel.com/i915"]
)
def test_a_pod_asking_other_devices_is_left_to_kube_scheduler(
    app: TestClient, resource: str, caplog: pytest.LogCaptureFixture
) -> None:
    # two MI300X-like nodes, one nearly full (CPU/memory): before, the full one scored 10
    app.app.state.services.telemetry = SimSource(
        [
            NodeState("mi300x-a", "c", [], 192000, 20000, 2000000, 200000),
            NodeState("mi300x-b", "c", [], 192000, 180000, 2000000, 1900000),
        ]
    )
    pod = _pod("train", {resource: "1"}, {"cpu": "8", "memory": "64Gi"})
    assert pod_request(pod).other_devices == (resource,)
    names = ["mi300x-a", "mi300x-b"]
    with caplog.at_level(logging.WARNING, logger="fleetmind.serving"):
        result = _call(app, "filter", {"Pod": pod, "NodeNames": names})
        scores = _scores(app, {"Pod": pod, "NodeNames": names})
        _scores(app, {"Pod": pod, "NodeNames": names[::-1]})
    assert result["NodeNames"] == names
    assert result["FailedNodes"] == {} and result["FailedAndUnresolvableNodes"] == {}
    assert scores == {"mi300x-a": 0, "mi300x-b": 0}
    assert _holds(app) == {}
    lines = [r.getMessage() for r in caplog.records if "does not model" in r.getMessage()]
    assert len(lines) == 1 and resource in lines[0] and "ml/train" in lines[0]


def test_other_devices_beside_an_nvidia_gpu_keep_the_gpu_path(app: TestClient) -> None:
    app.app.state.services.telemetry = SimSource(_nodes(other=True))
    pod = _pod("mixed", {"nvidia.com/gpu": "1", "amd.com/gpu": "1"})
    scores = _scores(app, {"Pod": pod, "NodeNames": [AMD, NV]})
    assert scores[NV] == 10
    assert _holds(app) == {"ml/mixed": NV}


def test_zero_other_devices_is_a_cpu_pod() -> None:
    pod = _pod("web", {"amd.com/gpu": "0"})
    assert pod_request(pod).other_devices == ()
    init = copy.deepcopy(_pod("prep", {}))
    init["spec"]["initContainers"] = [
        {"name": "warm", "resources": {"limits": {"google.com/tpu": "4"}}}
    ]
    assert pod_request(init).other_devices == ("google.com/tpu",)


def test_a_malformed_device_quantity_is_a_422(app: TestClient) -> None:
    app.app.state.services.telemetry = SimSource(_nodes(other=True))
    args = {"Pod": _pod("bad", {"amd.com/gpu": "lots"}), "NodeNames": [AMD]}
    r = app.post("/api/v1/scheduler/filter", json=args)
    assert r.status_code == 422
    assert "amd.com/gpu" in r.json()["detail"] and "lots" in r.json()["detail"]


# ------------------------------------------------------------------ telemetry sources
def _ksm_allocatable(node: str, extra: dict[str, float]) -> list[tuple[str, dict, float]]:
    out = [
        ("kube_node_status_allocatable", {"node": node, "resource": "cpu", "unit": "core"}, 96.0),
        ("kube_node_status_allocatable", {"node": node, "resource": "memory"}, 5e11),
    ]
    for res, v in extra.items():
        lab = {"node": node, "resource": res, "unit": "integer"}
        out.append(("kube_node_status_allocatable", lab, v))
    return out


def test_build_nodes_marks_other_devices_from_allocatable() -> None:
    ksm = (
        _ksm_allocatable("amd-1", {"amd_com_gpu": 8})
        + _ksm_allocatable("gaudi-1", {"habana_ai_gaudi": 8})
        + _ksm_allocatable("tpu-1", {"google_com_tpu": 4})
        + _ksm_allocatable("arc-1", {"gpu_intel_com_i915": 0})  # plugin gone: 0
        + _ksm_allocatable("nv-1", {"nvidia_com_gpu": 8})
        + _ksm_allocatable("nic-1", {"intel_com_intel_sriov_netdevice": 4})
        + _ksm_allocatable("cpu-1", {})
    )
    nodes = {n.name: n for n in build_nodes([], ksm)}
    assert nodes["amd-1"].other_devices == {"amd_com_gpu"}
    assert nodes["gaudi-1"].other_devices == {"habana_ai_gaudi"}
    assert nodes["tpu-1"].other_devices == {"google_com_tpu"}
    for name in ("arc-1", "nv-1", "nic-1", "cpu-1"):
        assert nodes[name].other_devices == frozenset(), name
    # nv-1: placeholders for the 8 GPUs allocatable that DCGM does not report
    accel = [n for n in sorted(nodes) if nodes[n].accelerator_node]
    assert accel == ["amd-1", "gaudi-1", "nv-1", "tpu-1"]


@pytest.mark.parametrize("capacity_first", [True, False])
def test_build_nodes_reads_the_capacity_of_other_devices(capacity_first: bool) -> None:
    """kube-state-metrics exports ``kube_node_status_capacity`` beside ``_allocatable``, same
    labels (``internal/store/node.go``): 8 unhealthy Gaudis read capacity 8, allocatable 0."""
    cap = [
        ("kube_node_status_capacity", {"node": n, "resource": r, "unit": "integer"}, 8.0)
        for n, r in (("gaudi-sick", "habana_ai_gaudi"), ("cpu-1", "cpu"))
    ]
    alloc = _ksm_allocatable("gaudi-sick", {"habana_ai_gaudi": 0}) + _ksm_allocatable("cpu-1", {})
    nodes = {n.name: n for n in build_nodes([], cap + alloc if capacity_first else alloc + cap)}
    assert nodes["gaudi-sick"].other_devices == {"habana_ai_gaudi"}
    assert nodes["gaudi-sick"].accelerator_node
    assert nodes["cpu-1"].other_devices == frozenset() and not nodes["cpu-1"].accelerator_node
    assert nodes["cpu-1"].cpu_milli == 96000  # CPU is allocatable's, not capacity's


def test_the_server_query_asks_for_other_devices() -> None:
    query = fleet_queries()["kube_node_status_allocatable"]
    assert f'resource=~"cpu|memory|{OTHER_DEVICE_PATTERN}"' in query
    assert f'kube_node_status_capacity{{resource=~"{OTHER_DEVICE_PATTERN}"}}' in query


def test_sim_and_nvml_sources_report_no_other_devices(monkeypatch: pytest.MonkeyPatch) -> None:
    assert all(n.other_devices == frozenset() for n in builtin_nodes())
    mem = types.SimpleNamespace(total=81559 * 2**20, used=580 * 2**20, free=80979 * 2**20)
    for attr, fn in {
        "nvmlInit": lambda: None,
        "nvmlShutdown": lambda: None,
        "nvmlDeviceGetCount": lambda: 1,
        "nvmlDeviceGetHandleByIndex": lambda i: i,
        "nvmlDeviceGetName": lambda h: "NVIDIA H100 80GB HBM3",
        "nvmlDeviceGetUUID": lambda h: "GPU-00000000-aaaa-bbbb-cccc-dddddddddddd",
        "nvmlDeviceGetMemoryInfo": lambda h, version=None: mem,
        "nvmlDeviceGetUtilizationRates": lambda h: types.SimpleNamespace(gpu=0, memory=0),
    }.items():
        monkeypatch.setattr(pynvml, attr, fn)
    (node,) = NvmlSource(cluster="c0").collect().nodes
    assert node.other_devices == frozenset() and node.accelerator_node


def _ksm_text(sick: bool = False) -> str:
    """kube-state-metrics text of the four nodes (and the dcgm-exporter pod on the NVIDIA one);
    ``sick``: the Gaudi node's 8 devices unhealthy (capacity 8, allocatable 0)."""
    lines = ["# TYPE kube_node_status_capacity gauge"]
    for node, (res, n) in {AMD: ("amd_com_gpu", 8), GAUDI: ("habana_ai_gaudi", 8)}.items():
        lines.append(
            f'kube_node_status_capacity{{node="{node}",resource="{res}",unit="integer"}} {n}'
        )
    lines.append("# TYPE kube_node_status_allocatable gauge")
    extra = {AMD: ("amd_com_gpu", 8), GAUDI: ("habana_ai_gaudi", 0 if sick else 8)}
    extra[NV] = ("nvidia_com_gpu", 1)
    for node in (GAUDI, AMD, NV, CPU):
        lines += [
            f'kube_node_status_allocatable{{node="{node}",resource="cpu",unit="core"}} 96',
            f'kube_node_status_allocatable{{node="{node}",resource="memory",unit="byte"}} 5e11',
        ]
        if node in extra:
            res, n = extra[node]
            lines.append(
                f'kube_node_status_allocatable{{node="{node}",resource="{res}",unit="integer"}} {n}'
            )
    lines += ["# TYPE kube_pod_info gauge", ksm_pod_info("gpu-operator", "dcgm-x", NV, "DaemonSet")]
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize("sick", [False, True])
def test_a_real_prometheus_marks_the_nodes_and_the_cpu_pod_avoids_them(
    app: TestClient, tmp_path: Path, sick: bool
) -> None:
    """``sick``: the Gaudi node's devices all unhealthy, out of allocatable (0) but not of
    capacity (8): still an accelerator node (the query's capacity; before, a CPU node)."""
    dcgm = {"dcgm": ("dcgm-x", dcgm_text("Hostname", NV, [{}]))}
    with ksm_prometheus(tmp_path, dcgm, _ksm_text(sick), None, 1 + 1) as url:
        source = PrometheusApiSource(url, default_cluster="c", ttl_s=0.0)
        try:
            nodes = {n.name: n for n in source.collect().nodes}
            assert {n: nodes[n].other_devices for n in OTHER} == OTHER
            assert nodes[NV].other_devices == frozenset() and len(nodes[NV].gpus) == 1
            assert nodes[CPU].other_devices == frozenset() and not nodes[CPU].accelerator_node
            app.app.state.services.telemetry = source
            scores = _scores(app, {"Pod": _pod("web", {}), "NodeNames": [GAUDI, AMD, NV, CPU]})
        finally:
            source.close()
    assert scores[CPU] == 10
    assert max(scores[n] for n in (GAUDI, AMD, NV)) <= 2
