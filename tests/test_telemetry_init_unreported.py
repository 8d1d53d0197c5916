"""Pods not yet running whose init containers ask GPUs, through the real Prometheus.

kube-state-metrics exports ``kube_pod_init_container_info`` only for the init containers whose
status the kubelet reported (``internal/store/pod.go`` ranges over
``Status.InitContainerStatuses``), with ``restart_policy`` "Always" for a sidecar
(kubernetes/kube-state-metrics#2240). Until then a sidecar cannot be told from a regular init
container, so such a pod is read with an upper bound, every init container as a sidecar: ``prep``
(app 1 + sidecar 1: the kubelet gives 2 devices) reads 2, and ``check`` (app 1 + a regular init
container 1: the kubelet gives 1) reads 2 too, never fewer than the kubelet's count, so the
extender's hold can end without a GPU read free; ``ready``, whose init container the kubelet
reported, is read as usual. Before: ``prep`` and ``check`` were not read at all (no device marked,
out of ``gpu_pods``: a pod without a hold counted no GPU).
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
from k8s_helpers import (
    DCGM_CHART_SCRAPE,
    ExporterServer,
    Prometheus,
    dcgm_text,
    exporter_target,
    prometheus_binary,
)

from fleetmind.serving.telemetry.prometheus import PrometheusApiSource, _read_ksm

os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")

GI = 2**30
PHASES = ("Pending", "Running", "Succeeded", "Failed", "Unknown")
# pod -> (phase, app GPUs, {init container: (GPUs, sidecar)}, init statuses reported)
PODS: dict[str, tuple[str, int, dict[str, tuple[int, bool]], bool]] = {
    "prep": ("Pending", 1, {"proxy": (1, True)}, False),  # 2 devices; sidecar not known yet
    "ready": ("Pending", 1, {"warm": (2, False)}, True),  # 2 devices, reported
    "busy": ("Running", 1, {}, False),  # 1 device, no init container
    "check": ("Pending", 1, {"gpu-check": (1, False)}, False),  # 1 device; upper bound 2
}


def _ksm_text() -> str:
    lines = ["# TYPE kube_node_status_allocatable gauge"]
    lines += [
        'kube_node_status_allocatable{node="n1",resource="cpu",unit="core"} 64',
        f'kube_node_status_allocatable{{node="n1",resource="memory",unit="byte"}} {512 * GI}',
        'kube_node_status_allocatable{node="n1",resource="nvidia_com_gpu",unit="integer"} 8',
        "# TYPE kube_pod_info gauge",
    ]
    for pod in PODS:
        lines.append(
            f'kube_pod_info{{namespace="ml",pod="{pod}",uid="u-{pod}",host_ip="10.0.0.1",'
            'pod_ip="10.1.0.5",node="n1",created_by_kind="Job",created_by_name="x",'
            'priority_class="",host_network="false"} 1'
        )
    lines.append("# TYPE kube_pod_status_phase gauge")
    for pod, (phase, _, _, _) in PODS.items():
        lines += [
            f'kube_pod_status_phase{{namespace="ml",pod="{pod}",uid="u-{pod}",phase="{p}"}} '
            f"{int(p == phase)}"
            for p in PHASES
        ]
    lines.append("# TYPE kube_pod_container_resource_requests gauge")
    for pod, (_, app, _, _) in PODS.items():
        own = f'namespace="ml",pod="{pod}",uid="u-{pod}",container="main",node="n1"'
        lines.append(
            f'kube_pod_container_resource_requests{{{own},resource="nvidia_com_gpu",'
            f'unit="integer"}} {app}'
        )
    lines.append("# TYPE kube_pod_init_container_resource_requests gauge")
    for pod, (_, _, inits, _) in PODS.items():
        for c, (gpus, _) in inits.items():
            own = f'namespace="ml",pod="{pod}",uid="u-{pod}",container="{c}",node="n1"'
            lines.append(
                f'kube_pod_init_container_resource_requests{{{own},resource="nvidia_com_gpu",'
                f'unit="integer"}} {gpus}'
            )
    lines.append("# TYPE kube_pod_init_container_info gauge")
    for pod, (_, _, inits, reported) in PODS.items():
        for c, (_, sidecar) in inits.items() if reported else ():
            lines.append(
                f'kube_pod_init_container_info{{namespace="ml",pod="{pod}",uid="u-{pod}",'
                f'container="{c}",image_spec="x:1",image="x:1",image_id="x@sha256:1",'
                f'container_id="containerd://{pod}-{c}",'
                f'restart_policy="{"Always" if sidecar else ""}"}} 1'
            )
    return "\n".join(lines) + "\n"


@pytest.fixture(scope="module")
def prom(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    if prometheus_binary() is None:
        pytest.skip("Prometheus not installed (Debian package prometheus)")
    exporter = ExporterServer({"/dcgm": dcgm_text("Hostname", "n1", [{}] * 8), "/ksm": _ksm_text()})
    scrape = {
        "dcgm": {**DCGM_CHART_SCRAPE, "labels": exporter_target("dcgm-exporter-n1x7k")},
        "ksm": {"honor_labels": True, "labels": {}},
    }
    p = Prometheus(
        tmp_path_factory.mktemp("ksm-init-unreported"),
        exporter,
        {"dcgm": "/dcgm", "ksm": "/ksm"},
        scrape,
    )
    try:
        p.wait_for('{__name__=~"DCGM_FI_DEV_FB_USED|kube_pod_info"}', 8 + len(PODS))
        yield p.url
    finally:
        p.stop()
        exporter.close()


@pytest.mark.external
def test_an_unstarted_pod_without_init_statuses_is_read_with_an_upper_bound(prom: str) -> None:
    src = PrometheusApiSource(prom, ttl_s=0.0)
    try:
        view = _read_ksm(src.query(src.ksm_query), "local")
        (node,) = src.collect().nodes
    finally:
        src.close()
    # prep 2 + ready 2 + busy 1 + check 2 (its upper bound: app 1 + init 1)
    assert [g.free_milli for g in node.gpus] == [0] * 7 + [1000]
    assert node.gpu_pods == {"ml/prep", "ml/ready", "ml/busy", "ml/check"}
    assert node.pending_pods == {"ml/prep", "ml/ready", "ml/check"}
    assert view.init_reported == {("local", "ml", "ready")}
    assert view.init_unknown == {("local", "n1", "ml", "prep"), ("local", "n1", "ml", "check")}
