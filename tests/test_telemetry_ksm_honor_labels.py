"""kube-state-metrics scraped with ``honor_labels: false`` reads the same fleet as with ``true``.

Upstream behaviour the fixtures follow:

* Prometheus, scraping with ``honor_labels: false`` (its default), keeps a scraped label that the
  target also sets as ``exported_<name>`` and sets the target's value in its place
  (``honor_labels`` in Prometheus' ``docs/configuration/configuration.md``). kube-state-metrics'
  ServiceMonitor without ``honorLabels: true`` therefore turns the pod a series describes into
  ``exported_pod``/``exported_namespace``/``exported_container``, and ``pod``/``namespace``/
  ``container`` become the kube-state-metrics pod's own (bitnami/charts#7690, the bitnami
  kube-prometheus chart's default before bitnami/charts#7747; prometheus-community/helm-charts#1368).
* prometheus-operator gives a ServiceMonitor endpoint the target labels ``namespace``, ``pod``,
  ``container``, ``service``, ``endpoint`` (``pkg/prometheus/promcfg.go``,
  ``generateServiceMonitorConfig``); a plain ``kubernetes_sd`` job such as the
  ``kubernetes-service-endpoints`` job of prometheus-community's ``prometheus`` chart also sets
  ``node`` from ``__meta_kubernetes_pod_node_name`` (then kube-state-metrics' ``node`` becomes
  ``exported_node``).
* kube-state-metrics 2.x label layout: ``kube_pod_info{namespace, pod, uid, host_ip, pod_ip, node,
  created_by_kind, created_by_name, priority_class, host_network}``,
  ``kube_pod_container_resource_requests{namespace, pod, uid, container, node, resource, unit}``,
  ``kube_pod_status_phase{namespace, pod, uid, phase}`` (one series per phase, 1 for the current),
  ``kube_pod_annotations{namespace, pod, uid, annotation_*}``, ``kube_node_*{node, ...}``.

* Prometheus renames only a non-empty label (``mutateSampleLabels`` in ``scrape/scrape.go``): for a
  pod not yet scheduled kube-state-metrics exports ``node=""``, so with a target that sets
  ``node`` the series keeps the target's ``node`` and has no ``exported_node``.

Before, with ``honor_labels: false``: one finished pod anywhere matched every series of the
finished-pods filter (all carried the kube-state-metrics pod's ``namespace``/``pod``), so every
node looked empty; requests collapsed to the largest container per node; the GPU held by
``ml/train-0`` read as free from its framebuffer. Then, with a target setting ``node``, the Pending
``ml/pending-big`` read as running on the kube-state-metrics pod's node: its requests used up n2,
and its uid there ended the extender's hold for it on n1 at the next snapshot.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from k8s_helpers import (
    dcgm_text,
    exporter_target,
    ksm_allocatable,
    ksm_init_info,
    ksm_phases,
    ksm_pod_info,
    ksm_prometheus,
    ksm_request,
)

from fleetmind.serving.db import Database
from fleetmind.serving.scheduler.placement import Option
from fleetmind.serving.scheduler.reservations import DbReservations
from fleetmind.serving.schemas import JobSpec
from fleetmind.serving.telemetry.base import NodeState
from fleetmind.serving.telemetry.prometheus import (
    PrometheusApiSource,
    Sample,
    _read_ksm,
    build_nodes,
)

os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")

GI = 2**30
KSM_NODE = "n2"  # the node kube-state-metrics itself runs on
KSM_POD = "kube-state-metrics-7d9f6c5b8-x2x9q"
SERVICE_MONITOR = {"namespace": "monitoring", "pod": KSM_POD, "container": "kube-state-metrics",
                   "service": "kube-state-metrics", "endpoint": "http"}  # fmt: skip
"""kube-state-metrics' target labels from a ServiceMonitor (prometheus-operator)."""
SERVICE_ENDPOINTS = {**SERVICE_MONITOR, "node": KSM_NODE}
"""... and from a ``kubernetes_sd`` job that also relabels ``__meta_kubernetes_pod_node_name``."""
PENDING = "pending-big"
# pod -> (namespace, node, created_by_kind, phase, {container: (cpu cores, memory bytes)})
PODS = {
    "dcgm-exporter-n1x7k": ("gpu-operator", "n1", "DaemonSet", "Running",
                            {"exporter": (0.5, 512 * 2**20)}),
    "dcgm-exporter-n2q4m": ("gpu-operator", "n2", "DaemonSet", "Running",
                            {"exporter": (0.5, 512 * 2**20)}),
    KSM_POD: ("monitoring", KSM_NODE, "ReplicaSet", "Running",
              {"kube-state-metrics": (0.1, 256 * 2**20)}),
    "train-0": ("ml", "n1", "Job", "Running", {"main": (8, 64 * GI), "log": (1, 1 * GI)}),
    "share-0": ("ml", "n2", "ReplicaSet", "Running", {"main": (2, 8 * GI)}),
    "done-1": ("ml", "n2", "Job", "Succeeded", {"main": (4, 16 * GI)}),  # finished: left out
    PENDING: ("ml", "", "Job", "Pending", {"main": (40, 200 * GI)}),  # not scheduled: no node
}  # fmt: skip
GPU_COUNT = {"n1": 2, "n2": 3}  # n2's third GPU reports nothing: a placeholder


def ksm_text() -> str:
    """kube-state-metrics' exposition of the 2-node fleet (its own labels only)."""
    lines = ["# TYPE kube_node_status_allocatable gauge"]
    for node, gpus in GPU_COUNT.items():
        lines += ksm_allocatable(node, gpus)
    lines.append("# TYPE kube_node_status_capacity gauge")
    for node, gpus in GPU_COUNT.items():
        lines.append(
            f'kube_node_status_capacity{{node="{node}",resource="nvidia_com_gpu",'
            f'unit="integer"}} {gpus}'
        )
    lines += [
        "# TYPE kube_node_labels gauge",
        'kube_node_labels{node="n1",label_kubernetes_io_hostname="n1",'
        'label_nvidia_com_gpu_replicas="2"} 1',
        'kube_node_labels{node="n2",label_kubernetes_io_hostname="n2"} 1',
        "# TYPE kube_pod_info gauge",
    ]
    lines += [ksm_pod_info(ns, pod, node, kind) for pod, (ns, node, kind, _, _) in PODS.items()]
    lines.append("# TYPE kube_pod_container_resource_requests gauge")
    for pod, (ns, node, _, _, containers) in PODS.items():
        for c, (cpu, mem) in containers.items():
            lines.append(ksm_request(False, ns, pod, c, node, "cpu", cpu))
            lines.append(ksm_request(False, ns, pod, c, node, "memory", mem))
    lines.append("# TYPE kube_pod_status_phase gauge")
    for pod, (ns, _, _, phase, _) in PODS.items():
        lines += ksm_phases(ns, pod, phase)
    lines += [
        "# TYPE kube_pod_annotations gauge",
        'kube_pod_annotations{namespace="ml",pod="share-0",uid="u-share-0",'
        'annotation_alibabacloud_com_gpu_milli="300",annotation_alibabacloud_com_gpu_index="1"} 1',
    ]
    return "\n".join(lines) + "\n"


def dcgm(node: str) -> str:
    """The node's dcgm-exporter (hostNetwork: ``Hostname`` is the node); ml/train-0 holds n1's
    GPU 0; ml/share-0 uses part of n2's GPU 1."""
    gpus = [{"pod": "ml/train-0", "used": 40000}, {}] if node == "n1" else [{}, {"used": 20000}]
    return dcgm_text("Hostname", node, gpus)


def _summary(nodes: list[NodeState]) -> dict[str, tuple]:
    """Per node: CPU and memory (total and free, millicores and MiB), GPUs (index, free milli,
    healthy, placeholder), pods, pod uids and time-slicing replicas."""
    return {
        n.name: (
            n.cpu_milli, n.cpu_milli_free, n.memory_mib, n.memory_mib_free,
            [(g.index, g.free_milli, g.healthy, g.missing) for g in n.gpus],
            sorted(n.pods), sorted(n.pod_uids), n.gpu_replicas,
        )
        for n in sorted(nodes, key=lambda n: n.name)
    }  # fmt: skip


MIB = 512 * 1024  # each node's allocatable memory, MiB
EXPECTED = {
    "n1": (64000, 64000 - 500 - 8000 - 1000, MIB, MIB - 512 - 64 * 1024 - 1024,
           [(0, 500, True, False), (1, 1000, True, False)],
           ["gpu-operator/dcgm-exporter-n1x7k", "ml/train-0"],
           ["u-dcgm-exporter-n1x7k", "u-train-0"], 2),
    "n2": (64000, 64000 - 500 - 100 - 2000, MIB, MIB - 512 - 256 - 8 * 1024,
           [(0, 1000, True, False), (1, 700, True, False), (2, 0, False, True)],
           ["gpu-operator/dcgm-exporter-n2q4m", "ml/share-0", f"monitoring/{KSM_POD}"],
           ["u-dcgm-exporter-n2q4m", f"u-{KSM_POD}", "u-share-0"], 1),
}  # fmt: skip
"""The fleet worked out by hand from :data:`PODS` (see :func:`_summary`): requests of every
container summed, ``ml/done-1`` (finished) left out, ``ml/train-0`` holding one of n1 GPU 0's two
time-slicing replicas, ``ml/share-0``'s 300 milli on n2 GPU 1, n2's third GPU a placeholder."""


# ----------------------------------------------------------------------- samples as stored
def _samples(text: str, target: dict[str, str], honor_labels: bool) -> list[Sample]:
    """``text`` as Prometheus stores it after a scrape with ``target`` labels: with
    ``honor_labels: false`` a non-empty label the target also sets is kept as
    ``exported_<name>`` and the target's value takes its place; with ``honor_labels: true`` the
    target's value is set only where the series has no such label, an empty one included
    (``mutateSampleLabels`` in Prometheus' ``scrape/scrape.go``; empty labels are then dropped)."""
    from prometheus_client.parser import text_string_to_metric_families

    out: list[Sample] = []
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            lab = {k: v for k, v in s.labels.items() if v}
            for k, v in target.items():
                if k in s.labels and honor_labels:
                    continue
                if k in lab:
                    lab[f"exported_{k}"] = lab[k]
                lab[k] = v
            out.append((s.name, lab, float(s.value)))
    return out


def _fleet(target: dict[str, str], honor_labels: bool) -> list[NodeState]:
    """The fleet from raw series (the finished-pods filter done by :func:`build_nodes`)."""
    dcgm_samples: list[Sample] = []
    for node, pod in (("n1", "dcgm-exporter-n1x7k"), ("n2", "dcgm-exporter-n2q4m")):
        dcgm_samples += _samples(dcgm(node), exporter_target(pod), honor_labels=False)
    ksm = [
        s
        for s in _samples(ksm_text(), target, honor_labels)
        if s[0] in ("kube_node_status_allocatable", "kube_pod_container_resource_requests",
                    "kube_pod_info", "kube_pod_annotations", "kube_pod_status_phase")
        and s[1].get("resource", "cpu") in ("cpu", "memory")
    ]  # fmt: skip
    return build_nodes(dcgm_samples, ksm)


def test_the_scrape_moves_the_workload_to_exported_labels() -> None:
    """The fixture's honor_labels false shape: every pod series carries the kube-state-metrics
    pod's ``pod``/``namespace``/``container``/``node``."""
    series = _samples(ksm_text(), SERVICE_ENDPOINTS, honor_labels=False)
    info = [lab for name, lab, _ in series if name == "kube_pod_info"]
    assert {lab["pod"] for lab in info} == {KSM_POD}
    assert {lab["node"] for lab in info} == {KSM_NODE}
    assert {lab["exported_pod"] for lab in info} == set(PODS)
    assert {lab.get("exported_node") for lab in info} == {"n1", "n2", None}
    # the pod not yet scheduled keeps the target's node: nothing tells it apart but exported_node
    pending = [lab for lab in info if lab["exported_pod"] == PENDING]
    assert pending == [{**pending[0], "node": KSM_NODE}] and "exported_node" not in pending[0]


@pytest.mark.parametrize("target", [SERVICE_MONITOR, SERVICE_ENDPOINTS], ids=["sm", "sd"])
def test_raw_series_read_as_with_honor_labels(target: dict[str, str]) -> None:
    """Raw kube-state-metrics series (``build_nodes``): pods, uids and requests read from
    ``exported_*`` where Prometheus put kube-state-metrics' own labels."""
    honored = _summary(_fleet(target, honor_labels=True))
    assert _summary(_fleet(target, honor_labels=False)) == honored
    assert honored["n1"][1] == 54500 and honored["n2"][5] == sorted(
        {"gpu-operator/dcgm-exporter-n2q4m", f"monitoring/{KSM_POD}", "ml/share-0"}
    )


# ---------------------------------------------------------------- through the real Prometheus
@pytest.fixture(
    scope="module",
    params=[("honor_labels true", None), ("ServiceMonitor, honor_labels false", SERVICE_MONITOR),
            ("kubernetes_sd with node, honor_labels false", SERVICE_ENDPOINTS)],
    ids=["honor-true", "servicemonitor", "service-endpoints"],
)  # fmt: skip
def prom(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    _, target = request.param
    exporters = {"dcgm-n1": ("dcgm-exporter-n1x7k", dcgm("n1")),
                 "dcgm-n2": ("dcgm-exporter-n2q4m", dcgm("n2"))}  # fmt: skip
    tmp = tmp_path_factory.mktemp("ksm-honor")
    with ksm_prometheus(tmp, exporters, ksm_text(), target, 4 + len(PODS)) as url:
        yield url


@pytest.mark.external
def test_the_server_mode_reads_the_same_fleet(prom: str) -> None:
    """Every scrape style of kube-state-metrics gives the fleet of :data:`EXPECTED`."""
    src = PrometheusApiSource(prom, ttl_s=0.0)
    try:
        nodes = src.collect().nodes
    finally:
        src.close()
    assert _summary(nodes) == EXPECTED


@pytest.mark.external
def test_a_pending_pod_keeps_its_hold(prom: str, tmp_path: Path) -> None:
    """The extender held n1 for the Pending ``ml/pending-big``; the next snapshot lists it on no
    node (not on the kube-state-metrics pod's), so the hold stays."""
    src = PrometheusApiSource(prom, ttl_s=0.0)
    try:
        snapshot = src.collect()
    finally:
        src.close()
    assert not any(
        f"ml/{PENDING}" in n.pods or f"u-{PENDING}" in n.pod_uids for n in snapshot.nodes
    )
    db = Database(f"sqlite:///{tmp_path}/holds.db")
    db.migrate()
    res = DbReservations(db, cache_s=0)
    job = JobSpec(num_gpu=1, gpu_milli=1000, cpu_milli=40000, memory_mib=0)
    res.hold(f"ml/{PENDING}", Option("local", "n1", (1,), 1.0), job, uid=f"u-{PENDING}")
    view = res.view(snapshot)
    assert view.gpu_used("local", "n1", 1) == 1000 and view.cpu_used("local", "n1") == 40000


# ------------------------------------------------ init containers, through the real Prometheus
# kube-state-metrics' init-container series (``internal/store/pod.go``):
# ``kube_pod_init_container_resource_requests{namespace, pod, uid, container, node, resource,
# unit}``, one per init container and resource, and ``kube_pod_init_container_info{namespace, pod,
# uid, container, image_spec, image, image_id, container_id, restart_policy}`` for an init container
# whose status the kubelet reported, ``restart_policy`` "Always" for a sidecar and empty for a
# regular one (kubernetes/kube-state-metrics#2240). kube-scheduler's ``PodRequests``
# (kubernetes/kubernetes ``staging/src/k8s.io/component-helpers/resource/helpers.go``) charges a
# pod max(containers + sidecars, each regular init container + the sidecars before it).
# pod -> (node, phase, app container's GPUs, {init container: (GPUs, sidecar)})
INIT_PODS: dict[str, tuple[str, str, int, dict[str, tuple[int, bool]]]] = {
    "init-app": ("n1", "Running", 1, {"warm": (1, False)}),  # 1: the app reuses the device
    "init-only": ("n1", "Running", 0, {"warm": (1, False)}),  # 1
    "sidecar": ("n1", "Running", 1, {"proxy": (1, True)}),  # 2: a sidecar's is not reused
    "named": ("n1", "Running", 1, {"warm": (3, False)}),  # 3; DCGM names it on n1 GPU 0 only
    "two-inits": ("n2", "Running", 0, {"w1": (1, False), "w2": (2, False)}),  # 2
    "done": ("n2", "Succeeded", 0, {"warm": (1, False)}),  # finished: holds nothing
    "unscheduled": ("", "Pending", 0, {"warm": (4, False)}),  # on no node (not on n2)
    "mesh": ("n2", "Running", 0, {"istio-proxy": (0, True)}),  # a sidecar asking no GPU
}
INIT_GPUS = {"n1": 8, "n2": 4}


def init_ksm_text() -> str:
    """kube-state-metrics' exposition of :data:`INIT_PODS` on nodes n1 (8 GPUs) and n2 (4)."""
    lines = ["# TYPE kube_node_status_allocatable gauge"]
    for node, gpus in INIT_GPUS.items():
        lines += ksm_allocatable(node, gpus)
    lines.append("# TYPE kube_pod_info gauge")
    lines += [ksm_pod_info("ml", pod, node) for pod, (node, _, _, _) in INIT_PODS.items()]
    lines.append("# TYPE kube_pod_status_phase gauge")
    for pod, (_, phase, _, _) in INIT_PODS.items():
        lines += ksm_phases("ml", pod, phase)
    lines.append("# TYPE kube_pod_container_resource_requests gauge")
    for pod, (node, _, app, _) in INIT_PODS.items():
        lines.append(ksm_request(False, "ml", pod, "main", node, "cpu", 1))
        if app:
            lines.append(ksm_request(False, "ml", pod, "main", node, "nvidia_com_gpu", app))
    lines.append("# TYPE kube_pod_init_container_resource_requests gauge")
    for pod, (node, _, _, inits) in INIT_PODS.items():
        for c, (gpus, _) in inits.items():
            lines.append(ksm_request(True, "ml", pod, c, node, "cpu", 1))
            if gpus:
                lines.append(ksm_request(True, "ml", pod, c, node, "nvidia_com_gpu", gpus))
    lines.append("# TYPE kube_pod_init_container_info gauge")
    for pod, (_, _, _, inits) in INIT_PODS.items():
        lines += [ksm_init_info(pod, c, sidecar) for c, (_, sidecar) in inits.items()]
    return "\n".join(lines) + "\n"


@pytest.fixture(
    scope="module",
    params=[None, SERVICE_MONITOR, SERVICE_ENDPOINTS],
    ids=["honor-true", "servicemonitor", "service-endpoints"],
)
def init_prom(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    n1 = dcgm_text("Hostname", "n1", [{"pod": "ml/named", "used": 40000}] + [{}] * 7)
    n2 = dcgm_text("Hostname", "n2", [{}] * 4)
    exporters = {"dcgm-n1": ("dcgm-exporter-n1x7k", n1), "dcgm-n2": ("dcgm-exporter-n2q4m", n2)}
    tmp = tmp_path_factory.mktemp("ksm-init")
    series = 12 + len(INIT_PODS)
    with ksm_prometheus(tmp, exporters, init_ksm_text(), request.param, series) as url:
        yield url


@pytest.mark.external
def test_init_containers_read_through_prometheus(init_prom: str) -> None:
    """The joined query's answer gives each pod kube-scheduler's count (finished and unscheduled
    pods none), only the sidecars asking GPUs come back, and the devices DCGM does not name are
    marked: ``named`` (3 devices, named on n1 GPU 0) takes 2 more. Before: the sum (``init-app``
    2, ``two-inits`` 3) and nothing for ``named``: n1 read 2 GPUs free, n2 1."""
    src = PrometheusApiSource(init_prom, ttl_s=0.0)
    try:
        view = _read_ksm(src.query(src.ksm_query), "local")
        sidecars = src.query(src.queries["pod_sidecars"], "pod_sidecars")
        nodes = {n.name: n for n in src.collect().nodes}
    finally:
        src.close()
    assert dict(view.gpu_requests) == {
        ("local", "n1", "ml", "init-app"): 1.0,
        ("local", "n1", "ml", "init-only"): 1.0,
        ("local", "n1", "ml", "sidecar"): 2.0,
        ("local", "n1", "ml", "named"): 3.0,
        ("local", "n2", "ml", "two-inits"): 2.0,
    }
    assert [(lab["pod"], lab["container"]) for _, lab, _ in sidecars] == [("sidecar", "proxy")]
    assert [g.free_milli for g in nodes["n1"].gpus] == [0] * 7 + [1000]  # 1 + 1 + 2 + (3 - 1)
    assert [g.free_milli for g in nodes["n2"].gpus] == [0, 0, 1000, 1000]
    assert nodes["n1"].gpu_pods == {
        f"ml/{p}" for p in ("init-app", "init-only", "sidecar", "named")
    }
    assert nodes["n2"].gpu_pods == {"ml/two-inits"} and "ml/unscheduled" not in nodes["n2"].pods
