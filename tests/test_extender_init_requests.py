"""GPUs asked by init containers (sidecars included) count in telemetry.

kube-scheduler charges a pod its effective request (``PodRequests`` in kubernetes/kubernetes
``staging/src/k8s.io/component-helpers/resource/helpers.go``: the larger of containers plus
sidecars and of each regular init container plus the sidecars before it), and the kubelet's
devicemanager (``Allocate`` in ``pkg/kubelet/cm/devicemanager/manager.go``) allocates an init
container's devices at admission and keeps them the pod's until it ends. kube-state-metrics reports
those requests as ``kube_pod_init_container_resource_requests`` (``internal/store/pod.go`` of
kubernetes/kube-state-metrics), one series per init container, and marks sidecars with
``kube_pod_init_container_info{restart_policy="Always"}`` (kubernetes/kube-state-metrics#2240), so
FleetMind counts the larger of containers plus sidecars and of each regular init container plus the
sidecars (every sidecar: their order is not exported).
Before, only ``kube_pod_container_resource_requests`` was read: a GPU asked only by an init
container read free for the pod's whole life, and while the init container ran its busy GPU counted
on top of the extender's hold (the pod was never in ``gpu_pods``). Then the requests were summed
(init 1 + app 1 read 2 devices, the kubelet gives 1), and a pod dcgm-exporter names on a GPU got
none of its init containers' or sidecars' other devices counted.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from serving_helpers import serving_settings

os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")

from fleetmind.serving.app import create_app  # noqa: E402
from fleetmind.serving.telemetry.base import FleetSnapshot, TelemetrySource  # noqa: E402
from fleetmind.serving.telemetry.prometheus import (  # noqa: E402
    KSM_PLACED,
    Sample,
    build_nodes,
    fleet_queries,
    pod_gpu_devices,
)

NODE = "gpu-a"
POD = {"namespace": "ml", "pod": "prep", "uid": "u-prep"}


def _dcgm(
    busy: frozenset[int] = frozenset(), n: int = 2, named: frozenset[int] = frozenset()
) -> list[Sample]:
    """dcgm-exporter naming no pod (``-k`` off, or podresources not listing a running init), or
    naming ``ml/prep`` on the GPUs ``named`` (busy), as the chart's ``honorLabels: false`` scrape
    writes it."""
    out: list[Sample] = []
    for g in range(n):
        lab = {"gpu": str(g), "UUID": f"GPU-{g}", "modelName": "NVIDIA A100-SXM4-80GB",
               "Hostname": NODE}  # fmt: skip
        if g in named:
            lab |= {"exported_pod": "prep", "exported_namespace": "ml",
                    "exported_container": "main"}  # fmt: skip
        b = g in busy or g in named
        out += [
            ("DCGM_FI_DEV_GPU_UTIL", lab, 90.0 if b else 0.0),
            ("DCGM_FI_DEV_FB_USED", lab, 40_000.0 if b else 0.0),
            ("DCGM_FI_DEV_FB_FREE", lab, 41_000.0 if b else 81_000.0),
        ]
    return out


def _ksm(
    phase: str,
    init: dict[str, float],
    app_gpus: float = 0.0,
    sidecars: frozenset[str] = frozenset(),
    n: int = 2,
) -> list[Sample]:
    """Node ``gpu-a`` (``n`` GPUs) and pod ``ml/prep`` bound there: a CPU-only or ``app_gpus``
    container ``main`` and init containers ``{name: nvidia.com/gpu}``, those in ``sidecars`` with
    ``restartPolicy: Always`` (``kube_pod_init_container_info``'s ``restart_policy``, empty for a
    regular one: Prometheus then stores no label)."""
    out: list[Sample] = [
        ("kube_node_status_allocatable", {"node": NODE, "resource": "cpu"}, 96.0),
        ("kube_node_status_allocatable", {"node": NODE, "resource": "memory"}, 2.0**40),
        ("node_gpus", {"__name__": "kube_node_status_allocatable", "node": NODE}, float(n)),
        ("kube_pod_info", {**POD, "node": NODE, "created_by_kind": "Job"}, 1.0),
        ("kube_pod_status_phase", {**POD, "phase": phase}, 1.0),
        ("kube_pod_container_resource_requests",
         {**POD, "container": "main", "node": NODE, "resource": "cpu", "unit": "core"}, 1.0),
    ]  # fmt: skip
    if app_gpus:
        out.append(("kube_pod_container_resource_requests",
                    {**POD, "container": "main", "node": NODE, "resource": "nvidia_com_gpu",
                     "unit": "integer"}, app_gpus))  # fmt: skip
    for name, n in init.items():
        out.append(("kube_pod_init_container_resource_requests",
                    {**POD, "container": name, "node": NODE, "resource": "nvidia_com_gpu",
                     "unit": "integer"}, n))  # fmt: skip
        # an init container's CPU is not read (only its GPUs)
        out.append(("kube_pod_init_container_resource_requests",
                    {**POD, "container": name, "node": NODE, "resource": "cpu",
                     "unit": "core"}, 4.0))  # fmt: skip
        policy = {"restart_policy": "Always"} if name in sidecars else {}
        out.append(("kube_pod_init_container_info",
                    {**POD, "container": name, "image": "x", **policy}, 1.0))  # fmt: skip
    return out


def test_a_gpu_asked_only_by_an_init_container_is_the_pods() -> None:
    """A Running pod whose init container asked ``nvidia.com/gpu: 1``: the kubelet keeps the device
    the pod's, and kube-scheduler counts it. Before: both GPUs read free, ``gpu_pods`` empty."""
    (node,) = build_nodes(_dcgm(), _ksm("Running", {"warmup": 1.0}))
    assert [g.free_milli for g in node.gpus] == [0, 1000]
    assert node.gpu_pods == frozenset({"ml/prep"})
    assert node.cpu_milli_free == 96_000 - 1_000  # the init container's 4 cores are not read


def test_a_sidecar_and_an_app_container_are_added() -> None:
    """A sidecar (``restartPolicy: Always``) with 1 GPU beside an app container with 1: the
    kubelet gives the pod 2 devices (a sidecar's are not reused). Before: 1 was marked."""
    ksm = _ksm("Running", {"sidecar": 1.0}, app_gpus=1.0, sidecars=frozenset({"sidecar"}))
    (node,) = build_nodes(_dcgm(), ksm)
    assert [g.free_milli for g in node.gpus] == [0, 0]
    assert node.gpu_pods == frozenset({"ml/prep"})


@pytest.mark.parametrize(
    ("init", "app", "sidecars", "devices"),
    [
        ({"warmup": 1.0}, 1.0, (), 1),  # the app container reuses the init container's device
        ({"w1": 1.0, "w2": 2.0}, 0.0, (), 2),  # one regular init container runs at a time
        ({"warmup": 2.0}, 1.0, (), 2),
        ({"warmup": 1.0, "proxy": 1.0}, 1.0, ("proxy",), 2),  # every sidecar beside each init
        ({"proxy": 1.0}, 1.0, (), 1),  # no restart_policy series: read as a regular one
    ],
    ids=["init-app", "two-inits", "init-2-app-1", "init-sidecar-app", "sidecar-unknown"],
)
def test_a_pod_holds_kube_schedulers_count(
    init: dict[str, float], app: float, sidecars: tuple[str, ...], devices: int
) -> None:
    """kube-scheduler's ``PodRequests``: max(containers + sidecars, each regular init + sidecars).
    Before: the sum (init 1 + app 1 read 2 devices, two inits 1 and 2 read 3)."""
    ksm = _ksm("Running", init, app_gpus=app, sidecars=frozenset(sidecars), n=4)
    (node,) = build_nodes(_dcgm(n=4), ksm)
    assert [g.free_milli for g in node.gpus] == [0] * devices + [1000] * (4 - devices)
    assert node.gpu_pods == frozenset({"ml/prep"})


def test_pod_gpu_devices() -> None:
    assert pod_gpu_devices(1.0, [1.0], 0.0) == 1.0
    assert pod_gpu_devices(0.0, [1.0, 2.0], 0.0) == 2.0
    assert pod_gpu_devices(1.0, [1.0], 1.0) == 2.0
    assert pod_gpu_devices(2.0, [], 1.0) == 3.0
    assert pod_gpu_devices(0.0, [], 0.0) == 0.0


@pytest.mark.parametrize(
    ("init", "app", "sidecars", "free"),
    [
        ({"warmup": 2.0}, 1.0, (), [0, 0, 1000, 1000]),  # init 2, app 1 named on GPU 0: 1 more
        # a sidecar's own device, on a kubelet before 1.29 (whose List leaves sidecars out)
        ({"proxy": 1.0}, 1.0, ("proxy",), [0, 0, 1000, 1000]),
        ({"warmup": 1.0}, 1.0, (), [0, 1000, 1000, 1000]),  # reused: nothing more
        ({}, 1.0, (), [0, 1000, 1000, 1000]),
    ],
    ids=["init-2", "sidecar-before-k8s-1.29", "init-1", "app-only"],
)
def test_a_named_pods_other_devices_are_taken(
    init: dict[str, float], app: float, sidecars: tuple[str, ...], free: list[int]
) -> None:
    """dcgm-exporter (the chart names pods) names ``ml/prep`` on GPU 0 only: the kubelet's
    PodResources ``List`` reports its app containers' devices and, since Kubernetes 1.29, its
    sidecars' (``List`` in kubernetes/kubernetes ``pkg/kubelet/apis/podresources/server_v1.go``
    skips only init containers that are not restartable), never a regular init container's; a
    kubelet before 1.29 leaves sidecars out too. The devices it holds beyond the named ones are
    marked on idle GPUs. Before: a pod DCGM named anywhere had none of them counted (3 GPUs read
    free for ``init-2``)."""
    ksm = _ksm("Running", init, app_gpus=app, sidecars=frozenset(sidecars), n=4)
    (node,) = build_nodes(_dcgm(n=4, named=frozenset({0})), ksm)
    assert [g.free_milli for g in node.gpus] == free
    assert node.gpu_pods == frozenset({"ml/prep"})


def test_a_finished_pods_init_request_holds_nothing() -> None:
    (node,) = build_nodes(_dcgm(), _ksm("Succeeded", {"warmup": 1.0}))
    assert [g.free_milli for g in node.gpus] == [1000, 1000]
    assert node.gpu_pods == frozenset()


def test_the_fleet_query_reads_each_init_container() -> None:
    """The containers' requests are summed per pod; the init containers' come one per container
    (a sum cannot give the larger of each), with the sidecars among them."""
    queries = fleet_queries()
    assert "init_container" not in queries["pod_gpu_requests"]
    q = queries["pod_init_gpu_requests"]
    assert q.startswith("max by (cluster, node, namespace, pod, container) (")
    assert "kube_pod_init_container_resource_requests{" in q and "unless on" in q
    assert q.count('resource="nvidia_com_gpu"') >= 2  # both placement branches
    q = queries["pod_sidecars"]
    assert 'kube_pod_init_container_info{restart_policy="Always"}' in q
    assert "and on (cluster, namespace, pod, container)" in q  # only the sidecars asking GPUs
    assert "kube_pod_init_container_resource_requests" in KSM_PLACED  # placed by node as the rest
    q = queries["pod_init_reported"]  # pods not yet running asking init GPUs, with info series
    assert q.startswith("count by (cluster, namespace, pod) (")
    assert "kube_pod_init_container_info" in q and "restart_policy" not in q
    assert 'phase=~"Pending|Unknown"' in q and "kube_pod_init_container_resource_requests" in q


def test_a_sidecar_named_by_dcgm_takes_nothing_more() -> None:
    """On Kubernetes 1.29 and later the kubelet's PodResources ``List`` includes sidecars
    (restartable init containers), so dcgm-exporter names ``ml/prep`` on its sidecar's GPU too:
    the pod's 2 devices are both named and no other GPU is marked."""
    ksm = _ksm("Running", {"proxy": 1.0}, app_gpus=1.0, sidecars=frozenset({"proxy"}), n=4)
    (node,) = build_nodes(_dcgm(n=4, named=frozenset({0, 1})), ksm)
    assert [g.free_milli for g in node.gpus] == [0, 0, 1000, 1000]
    assert node.gpu_pods == frozenset({"ml/prep"})


def _no_init_info(ksm: list[Sample]) -> list[Sample]:
    """``ksm`` before the kubelet reported the init containers' statuses: kube-state-metrics
    exports ``kube_pod_init_container_info`` only for those (``internal/store/pod.go`` ranges over
    ``Status.InitContainerStatuses``), so no such series yet."""
    return [s for s in ksm if s[0] != "kube_pod_init_container_info"]


@pytest.mark.parametrize("phase", ["Pending", "Unknown"])
def test_an_unstarted_pod_whose_sidecars_are_unknown_is_read_with_an_upper_bound(
    tmp_path: Path, phase: str
) -> None:
    """A pod not yet running, app 1 GPU + sidecar 1 GPU, and no ``kube_pod_init_container_info``
    yet: the sidecar cannot be told from a regular init container (which would make 1 device, where
    the kubelet gives 2), so every init container is read as a sidecar: 2 devices marked, the pod
    in ``gpu_pods``, its hold ended, and 2 GPUs taken on the node, as the pod holds (not 4: nothing
    counted twice). Before the upper bound: 1 GPU counted (read as a regular init container, hold
    ended), then none marked (pod skipped, only the hold counted)."""
    from fleetmind.serving.db import Database
    from fleetmind.serving.scheduler.placement import Option
    from fleetmind.serving.scheduler.reservations import DbReservations
    from fleetmind.serving.schemas import JobSpec

    ksm = _no_init_info(_ksm(phase, {"proxy": 1.0}, app_gpus=1.0, n=4))
    ksm.append(("kube_pod_status_phase", {"namespace": "ml", "pod": "other", "phase": "Running"},
                1.0))  # fmt: skip
    nodes = build_nodes(_dcgm(n=4), ksm)
    (node,) = nodes
    assert [g.free_milli for g in node.gpus] == [0, 0, 1000, 1000]
    assert node.gpu_pods == frozenset({"ml/prep"}) and node.pending_pods == frozenset({"ml/prep"})
    db = Database(f"sqlite:///{tmp_path}/h.db")
    db.migrate()
    res = DbReservations(db, cache_s=0)
    job = JobSpec(num_gpu=2, gpu_milli=1000, cpu_milli=0, memory_mib=0)
    res.hold("ml/prep", Option("local", NODE, (2, 3), 1.0), job, uid="u-prep")
    view = res.view(FleetSnapshot("prometheus", nodes, time.time()))
    taken = [
        g.index
        for g in node.gpus
        if g.free_milli < 1000 or view.gpu_used("local", NODE, g.index) >= 1000
    ]
    assert taken == [0, 1]


@pytest.mark.parametrize("phase", ["Pending", "Unknown"])
def test_an_unstarted_pod_without_a_hold_counts_its_gpus_before_init_statuses(
    phase: str,
) -> None:
    """A pod placed without FleetMind (another scheduler, or the extender skipped as ignorable):
    app 4 GPUs + a regular init container asking 1 (a GPU check), bound, not yet running, and no
    ``kube_pod_init_container_info`` yet (the kubelet has not written ``initContainerStatuses``, or
    the series is never collected: an allowlist or relabelling drops it). It is read with the upper
    bound, app + every init container as a sidecar: 5 GPUs taken, at least the kubelet's 4
    (kube-scheduler's ``PodRequests``: max(4, 1) for a regular init container). Before: not read
    at all, all 8 GPUs free."""
    ksm = _no_init_info(_ksm(phase, {"gpu-check": 1.0}, app_gpus=4.0, n=8))
    (node,) = build_nodes(_dcgm(n=8), ksm)
    free = [g.free_milli for g in node.gpus]
    assert free.count(0) >= 4
    assert free == [0] * 5 + [1000] * 3
    assert node.gpu_pods == frozenset({"ml/prep"})
    # once the kubelet reports the init container (a regular one), the kubelet's count: 4
    (node,) = build_nodes(_dcgm(n=8), _ksm(phase, {"gpu-check": 1.0}, app_gpus=4.0, n=8))
    assert [g.free_milli for g in node.gpus] == [0] * 4 + [1000] * 4


def test_a_pod_whose_init_statuses_are_reported_is_read() -> None:
    """Once the kubelet reported the init containers (``kube_pod_init_container_info``, a regular
    one here), a Pending pod's devices are marked as before, and so are those of a running pod
    without the series (a kube-state-metrics before kubernetes/kube-state-metrics#2240: read as
    regular init containers)."""
    (node,) = build_nodes(_dcgm(n=4), _ksm("Pending", {"warmup": 2.0}, app_gpus=1.0, n=4))
    assert [g.free_milli for g in node.gpus] == [0, 0, 1000, 1000]
    assert node.gpu_pods == frozenset({"ml/prep"})
    ksm = _no_init_info(_ksm("Running", {"proxy": 1.0}, app_gpus=1.0, n=4))
    (node,) = build_nodes(_dcgm(n=4), ksm)
    assert [g.free_milli for g in node.gpus] == [0, 1000, 1000, 1000]
    assert node.gpu_pods == frozenset({"ml/prep"})


class _Src(TelemetrySource):
    name = "prometheus"

    def __init__(self) -> None:
        super().__init__(ttl_s=0.0)
        self.busy: frozenset[int] = frozenset()
        self.listed = False

    def collect(self) -> FleetSnapshot:
        ksm = _ksm("Pending", {"warmup": 1.0}) if self.listed else _ksm("Pending", {})[:3]
        return FleetSnapshot("prometheus", build_nodes(_dcgm(self.busy), ksm), time.time())


def _pod(name: str, init_gpu: str | None = None, gpu: str | None = None) -> dict[str, Any]:
    limits: dict[str, str] = {"cpu": "1"}
    if gpu:
        limits["nvidia.com/gpu"] = gpu
    spec: dict[str, Any] = {"containers": [{"name": "main", "resources": {"limits": limits}}]}
    if init_gpu:
        spec["initContainers"] = [
            {"name": "warmup", "resources": {"limits": {"nvidia.com/gpu": init_gpu}}}
        ]
    return {"metadata": {"name": name, "namespace": "ml", "uid": f"u-{name}"}, "spec": spec}


@pytest.fixture()
def client(tmp_path: Path) -> Any:
    settings = serving_settings(tmp_path)
    with TestClient(create_app(settings)) as c:
        yield c


def test_an_init_containers_busy_gpu_ends_the_hold(client: TestClient) -> None:
    """``prep`` asks its GPU in an init container; the extender holds GPU h, the kubelet gives the
    init container the other one, which reads busy while the pod is Pending. The pod's request is
    now read, so its GPU use counts as placed and the hold ends: one GPU stays free, as
    kube-scheduler counts (2 allocatable, 1 requested). Before, the hold stayed and the busy GPU
    counted too, and a 1-GPU pod failed the node."""
    src = _Src()
    client.app.state.services.telemetry = src
    r = client.post("/api/v1/scheduler/filter", json={"Pod": _pod("prep", init_gpu="1"),
                                                      "NodeNames": [NODE]})  # fmt: skip
    assert r.json()["NodeNames"] == [NODE]
    ((key, _),) = client.app.state.services.reservations.view().gpu_items()
    held = key[2]
    src.listed, src.busy = True, frozenset({1 - held})
    (node,) = src.collect().nodes
    assert node.gpu_pods == frozenset({"ml/prep"}) and node.pending_pods == frozenset({"ml/prep"})
    r = client.post("/api/v1/scheduler/filter", json={"Pod": _pod("infer", gpu="1"),
                                                      "NodeNames": [NODE]})  # fmt: skip
    assert r.status_code == 200
    assert r.json()["NodeNames"] == [NODE], r.json()
