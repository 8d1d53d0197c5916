"""A node's free CPU and memory as kube-scheduler counts a pod's requests, and the extender's CPU
and memory check behind kube-scheduler.

kube-scheduler charges a pod ``PodRequests`` (``staging/src/k8s.io/component-helpers/resource/
helpers.go`` of kubernetes/kubernetes): app containers plus sidecars (init containers with
``restartPolicy: Always``), pod-level ``spec.resources`` where set, ``spec.overhead``; it exports
that per pod as ``kube_pod_resource_request{namespace, pod, node, scheduler, priority, resource,
unit}`` at ``/metrics/resources`` (``pkg/scheduler/metrics/resources/resources.go``; units
``cores`` and ``bytes``; no series for a zero request or a finished pod). kube-state-metrics
exports per container ``kube_pod_container_resource_requests`` and
``kube_pod_init_container_resource_requests``, and ``kube_pod_init_container_info`` with
``restart_policy="Always"`` for a sidecar (kubernetes/kube-state-metrics
``docs/metrics/workload/pod-metrics.md``, #2240), but nothing of pod-level ``spec.resources``
(kubernetes/kube-state-metrics#3107, #3027).

Before: a native sidecar's CPU was not counted (8 cores, app 1 + sidecar 6: 7000 m free where
kube-scheduler has 1000), a pod sized by pod-level ``spec.resources`` counted nothing, and a pod
whose in-place resize is infeasible (kube-state-metrics reads the 128-core spec on a 96-core node,
the kubelet keeps the 4 cores allocated) left -32000 m free: the extender failed the node
(``FailedNodes``, so kube-scheduler may preempt there for nothing) for a 4-core pod kube-scheduler
had already fitted.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest
from k8s_helpers import (
    ExporterServer,
    Prometheus,
    dcgm_text,
    ksm_phases,
    ksm_pod_info,
    ksm_request,
    prometheus_binary,
)

from fleetmind.envs.policies import make_policy
from fleetmind.serving.scheduler import extender
from fleetmind.serving.scheduler.extender import NodeIndex, decide, pod_request
from fleetmind.serving.scheduler.placement import (
    BestFitPlacer,
    Option,
    PeerPolicyPlacer,
    Reservations,
)
from fleetmind.serving.schemas import JobSpec
from fleetmind.serving.telemetry.base import FleetSnapshot, GpuState, NodeState
from fleetmind.serving.telemetry.prometheus import PrometheusApiSource, build_nodes

os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")

GIB = 2**30


def _alloc(node: str, cores: float, mem_gib: float) -> list[tuple[str, dict[str, str], float]]:
    return [
        ("kube_node_status_allocatable", {"node": node, "resource": "cpu"}, cores),
        ("kube_node_status_allocatable", {"node": node, "resource": "memory"}, mem_gib * GIB),
    ]


def _pod(node: str, pod: str, phase: str = "Running") -> list[tuple[str, dict[str, str], float]]:
    return [
        ("kube_pod_info", {"namespace": "ml", "pod": pod, "uid": f"u-{pod}", "node": node}, 1.0),
        ("kube_pod_status_phase", {"namespace": "ml", "pod": pod, "phase": phase}, 1.0),
    ]


def _req(init: bool, node: str, pod: str, container: str, resource: str,
         value: float) -> tuple[str, dict[str, str], float]:  # fmt: skip
    metric = "kube_pod_init_container_resource_requests" if init else (
        "kube_pod_container_resource_requests")  # fmt: skip
    lab = {"namespace": "ml", "pod": pod, "container": container, "node": node,
           "resource": resource}  # fmt: skip
    return (metric, lab, value)


def _info(pod: str, container: str, sidecar: bool) -> tuple[str, dict[str, str], float]:
    lab = {"namespace": "ml", "pod": pod, "container": container,
           "restart_policy": "Always" if sidecar else ""}  # fmt: skip
    return ("kube_pod_init_container_info", lab, 1.0)


def _sched(node: str, pod: str, resource: str, value: float,
           scheduler: str = "default-scheduler") -> tuple[str, dict[str, str], float]:  # fmt: skip
    """kube-scheduler's ``kube_pod_resource_request`` (resources.go's label set)."""
    unit = {"cpu": "cores", "memory": "bytes"}[resource]
    lab = {"namespace": "ml", "pod": pod, "node": node, "scheduler": scheduler, "priority": "0",
           "resource": resource, "unit": unit}  # fmt: skip
    return ("kube_pod_resource_request", lab, value)


def _free(ksm: list[tuple[str, dict[str, str], float]]) -> tuple[int, int]:
    (node,) = build_nodes([], ksm)
    return node.cpu_milli_free, node.memory_mib_free


# ---------------------------------------------------------------- native sidecars
def test_a_native_sidecars_cpu_and_memory_are_counted() -> None:
    ksm = [*_alloc("a", 8, 32), *_pod("a", "sc"),
           _req(False, "a", "sc", "app", "cpu", 1.0), _req(False, "a", "sc", "app", "memory", 2 * GIB),
           _req(True, "a", "sc", "proxy", "cpu", 6.0), _req(True, "a", "sc", "proxy", "memory", 20 * GIB),
           _info("sc", "proxy", sidecar=True)]  # fmt: skip
    assert _free(ksm) == (1000, 10 * 1024)  # kube-scheduler: 8 - (1 + 6), 32 - (2 + 20)


def test_a_regular_init_container_and_a_finished_pods_sidecar_are_not_added() -> None:
    ksm = [*_alloc("a", 8, 32), *_pod("a", "job"), *_pod("a", "done", "Succeeded"),
           _req(False, "a", "job", "app", "cpu", 2.0),
           _req(True, "a", "job", "migrate", "cpu", 1.0), _info("job", "migrate", sidecar=False),
           _req(False, "a", "done", "app", "cpu", 1.0),
           _req(True, "a", "done", "proxy", "cpu", 4.0), _info("done", "proxy", sidecar=True)]  # fmt: skip
    assert _free(ksm)[0] == 6000


# ---------------------------------------------------------------- pod-level resources
def test_kube_schedulers_request_sizes_a_pod_with_pod_level_resources() -> None:
    """``spec.resources.requests`` cpu 6, memory 24Gi and no container requests: no
    kube-state-metrics series at all; kube-scheduler's replicas (two) each export the pod."""
    ksm = [*_alloc("a", 8, 32), *_pod("a", "pl"),
           _sched("a", "pl", "cpu", 6.0), _sched("a", "pl", "memory", 24 * GIB),
           _sched("a", "pl", "cpu", 6.0), _sched("a", "pl", "memory", 24 * GIB)]  # fmt: skip
    assert _free(ksm) == (2000, 8 * 1024)


def test_kube_schedulers_request_replaces_the_pods_container_sum() -> None:
    """Pod-level requests above the containers' (cpu 6 over a 1-core container), and a sidecar
    kube-scheduler already counts: the pod is counted once, as kube-scheduler counts it."""
    ksm = [*_alloc("a", 8, 32), *_pod("a", "pl"), *_pod("a", "plain"),
           _req(False, "a", "pl", "app", "cpu", 1.0), _req(True, "a", "pl", "proxy", "cpu", 1.0),
           _info("pl", "proxy", sidecar=True), _sched("a", "pl", "cpu", 6.0),
           _req(False, "a", "plain", "app", "cpu", 1.0)]  # fmt: skip
    assert _free(ksm)[0] == 1000  # 8 - 6 - 1


def test_kube_schedulers_request_on_another_node_is_not_used() -> None:
    """A pod kube-scheduler places elsewhere than ``kube_pod_info`` (not yet scheduled there: its
    ``node`` is empty; or a stale series) keeps kube-state-metrics' requests."""
    ksm = [*_alloc("a", 8, 32), *_pod("a", "p"), _req(False, "a", "p", "app", "cpu", 2.0),
           _sched("b", "p", "cpu", 5.0), _sched("", "q", "cpu", 5.0)]  # fmt: skip
    assert _free(ksm)[0] == 6000


def test_requests_listed_above_the_allocatable_leave_none_free() -> None:
    """An infeasible resize: kube-state-metrics reads the spec (128 cores on 96)."""
    ksm = [*_alloc("g1", 96, 512), *_pod("g1", "db"), _req(False, "g1", "db", "pg", "cpu", 128.0)]
    assert _free(ksm) == (0, 512 * 1024)


# ---------------------------------------------------------------- through a real Prometheus
def _ksm_text() -> str:
    lines = ["# TYPE kube_node_status_allocatable gauge",
             'kube_node_status_allocatable{node="n1",resource="cpu",unit="core"} 64',
             f'kube_node_status_allocatable{{node="n1",resource="memory",unit="byte"}} {256 * GIB}',
             'kube_node_status_allocatable{node="n1",resource="nvidia_com_gpu",unit="integer"} 8',
             "# TYPE kube_pod_info gauge"]  # fmt: skip
    pods = {"sc": "Running", "pl": "Running", "plain": "Running", "done": "Succeeded"}
    lines += [ksm_pod_info("ml", pod, "n1") for pod in pods]
    lines.append("# TYPE kube_pod_status_phase gauge")
    for pod, phase in pods.items():
        lines += ksm_phases("ml", pod, phase)
    lines.append("# TYPE kube_pod_container_resource_requests gauge")
    lines += [ksm_request(False, "ml", "sc", "app", "n1", "cpu", 1),
              ksm_request(False, "ml", "pl", "app", "n1", "cpu", 1),
              ksm_request(False, "ml", "plain", "app", "n1", "cpu", 2),
              ksm_request(False, "ml", "plain", "app", "n1", "memory", 4 * GIB),
              ksm_request(False, "ml", "done", "app", "n1", "cpu", 16)]  # fmt: skip
    lines.append("# TYPE kube_pod_init_container_resource_requests gauge")
    lines += [ksm_request(True, "ml", "sc", "proxy", "n1", "cpu", 6),
              ksm_request(True, "ml", "sc", "proxy", "n1", "memory", 8 * GIB),
              ksm_request(True, "ml", "sc", "migrate", "n1", "cpu", 3)]  # fmt: skip
    lines.append("# TYPE kube_pod_init_container_info gauge")
    for container, policy in (("proxy", "Always"), ("migrate", "")):
        lines.append(
            f'kube_pod_init_container_info{{namespace="ml",pod="sc",uid="u-sc",'
            f'container="{container}",image_spec="x:1",image="x:1",image_id="x@sha256:1",'
            f'container_id="containerd://sc-{container}",restart_policy="{policy}"}} 1'
        )
    return "\n".join(lines) + "\n"


# kube-scheduler's /metrics/resources: pod ``pl`` has spec.resources.requests cpu 10, memory 32Gi
SCHEDULER_TEXT = (
    "# HELP kube_pod_resource_request [STABLE] Resources requested by workloads on the cluster, "
    "broken down by pod.\n# TYPE kube_pod_resource_request gauge\n"
    'kube_pod_resource_request{namespace="ml",node="n1",pod="pl",priority="0",resource="cpu",'
    'scheduler="default-scheduler",unit="cores"} 10\n'
    'kube_pod_resource_request{namespace="ml",node="n1",pod="pl",priority="0",resource="memory",'
    f'scheduler="default-scheduler",unit="bytes"}} {32 * GIB}\n'
)
SCHEDULER_TARGET = {"namespace": "kube-system", "pod": "kube-scheduler-cp-1",
                    "container": "kube-scheduler", "service": "kube-scheduler",
                    "endpoint": "http-metrics"}  # fmt: skip
"""A ServiceMonitor endpoint's target labels (prometheus-operator ``generateServiceMonitorConfig``)
for kube-scheduler, scraped with ``honor_labels: false``: its ``namespace`` and ``pod`` labels
become ``exported_namespace`` and ``exported_pod``."""


@pytest.fixture(scope="module")
def prom(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    if prometheus_binary() is None:
        pytest.skip("Prometheus not installed (Debian package prometheus)")
    tmp = tmp_path_factory.mktemp("pod-requests")
    texts = {"/dcgm": dcgm_text("Hostname", "n1", [{}] * 8), "/ksm": _ksm_text(),
             "/sched": SCHEDULER_TEXT}  # fmt: skip
    exporter = ExporterServer(texts)
    scrape: dict[str, dict[str, Any]] = {
        "dcgm": {"honor_labels": False, "labels": {"namespace": "gpu-operator", "pod": "dcgm-1"}},
        "sched": {"honor_labels": False, "labels": SCHEDULER_TARGET},
    }
    p = Prometheus(tmp, exporter, {"dcgm": "/dcgm", "ksm": "/ksm", "sched": "/sched"}, scrape)
    try:
        p.wait_for('{__name__=~"DCGM_FI_DEV_FB_USED|kube_pod_info|kube_pod_resource_request"}', 14)
        yield p.url
    finally:
        p.stop()
        exporter.close()


@pytest.mark.external
def test_the_fleet_query_counts_sidecars_and_kube_schedulers_requests(prom: str) -> None:
    src = PrometheusApiSource(prom, ttl_s=0.0)
    try:
        (node,) = src.collect().nodes
    finally:
        src.close()
    # sc: app 1 + sidecar 6 (the regular init container 3 not added); pl: kube-scheduler's 10
    # (not its container's 1); plain 2; done finished
    assert node.cpu_milli_free == 64000 - 7000 - 10000 - 2000
    assert node.memory_mib_free == (256 - 8 - 32 - 4) * 1024


# ---------------------------------------------------------------- the extender behind kube-scheduler
def _gpu_node(name: str, cpu_free: int) -> NodeState:
    return NodeState(name, "local", [GpuState(i, "NVIDIA H100") for i in range(8)],
                     cpu_milli=96000, cpu_milli_free=cpu_free, memory_mib=512 * 1024,
                     memory_mib_free=512 * 1024)  # fmt: skip


def _pod4() -> dict[str, Any]:
    limits = {"nvidia.com/gpu": "1", "cpu": "4", "memory": "16Gi"}
    return {"metadata": {"name": "train", "namespace": "ml", "uid": "u9"},
            "spec": {"containers": [{"name": "m", "resources": {"limits": limits}}]}}  # fmt: skip


PLACERS = {
    "bestfit": BestFitPlacer,
    "policy": lambda: PeerPolicyPlacer(make_policy("BestFit"), "heuristic:BestFit"),
}


@pytest.mark.parametrize("placer", PLACERS)
def test_a_node_telemetry_overcounts_passes_the_filter(placer: str) -> None:
    """The infeasible resize's node (0 free as telemetry reads it) passes for a 4-core pod that
    kube-scheduler sent it for."""
    snap = FleetSnapshot("prometheus", [_gpu_node("g1", 0)])
    _, d = decide({"Pod": _pod4(), "NodeNames": ["g1"]}, snap, Reservations(), PLACERS[placer](),
                  NodeIndex())  # fmt: skip
    assert not d.failed and not d.unresolvable
    assert [o.node for o in d.options] == ["g1"]


@pytest.mark.parametrize("placer", PLACERS)
def test_fleetminds_own_hold_still_fails_the_node(placer: str) -> None:
    """A hold of FleetMind's (a reservation kube-scheduler does not know) on that node still
    counts: the node fails, resolvable."""
    snap = FleetSnapshot("prometheus", [_gpu_node("g1", 0)])
    res = Reservations()
    res.book(Option("local", "g1", (), 0.0), JobSpec(num_gpu=0, gpu_milli=0, cpu_milli=2000))
    _, d = decide({"Pod": _pod4(), "NodeNames": ["g1"]}, snap, res, PLACERS[placer](),
                  NodeIndex())  # fmt: skip
    assert d.options == [] and not d.unresolvable
    assert d.failed == {"g1": "FleetMind: CPU held for pods FleetMind placed, not yet seen bound"}


def test_nodes_with_room_are_left_as_telemetry_reads_them() -> None:
    snap = FleetSnapshot("prometheus", [_gpu_node("g1", 50000), _gpu_node("g2", 8000)])
    req = pod_request(_pod4())
    same, cands = extender.kube_scheduler_fit(snap, req, list(snap.nodes))
    assert same is snap and cands == snap.nodes
    # none free and some but too little (1000 m) alike: raised to the request (NodeResourcesFit,
    # kubernetes pkg/scheduler/framework/plugins/noderesources/fit.go, passed both); a node with
    # more room than the request keeps telemetry's amount
    low = FleetSnapshot(
        "prometheus", [_gpu_node("g1", 0), _gpu_node("g2", 1000), _gpu_node("g3", 9000)]
    )
    raised, cands = extender.kube_scheduler_fit(low, req, list(low.nodes))
    assert [n.cpu_milli_free for n in raised.nodes] == [4000, 4000, 9000]
    assert cands[2] is low.nodes[2] and low.nodes[0].cpu_milli_free == 0
