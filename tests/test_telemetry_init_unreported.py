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
    dcgm_text,
    ksm_allocatable,
    ksm_init_info,
    ksm_phases,
    ksm_pod_info,
    ksm_prometheus,
    ksm_request,
)

from fleetmind.serving.telemetry.prometheus import PrometheusApiSource, _read_ksm

os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")

# pod -> (phase, app GPUs, {init container: (GPUs, sidecar)}, init statuses reported)
PODS: dict[str, tuple[str, int, dict[str, tuple[int, bool]], bool]] = {
    "prep": ("Pending", 1, {"proxy": (1, True)}, False),  # 2 devices; sidecar not known yet
    "ready": ("Pending", 1, {"warm": (2, False)}, True),  # 2 devices, reported
    "busy": ("Running", 1, {}, False),  # 1 device, no init container
    "check": ("Pending", 1, {"gpu-check": (1, False)}, False),  # 1 device; upper bound 2
}


def _ksm_text() -> str:
    lines = ["# TYPE kube_node_status_allocatable gauge", *ksm_allocatable("n1", 8)]
    lines.append("# TYPE kube_pod_info gauge")
    lines += [ksm_pod_info("ml", pod, "n1") for pod in PODS]
    lines.append("# TYPE kube_pod_status_phase gauge")
    for pod, (phase, _, _, _) in PODS.items():
        lines += ksm_phases("ml", pod, phase)
    lines.append("# TYPE kube_pod_container_resource_requests gauge")
    for pod, (_, app, _, _) in PODS.items():
        lines.append(ksm_request(False, "ml", pod, "main", "n1", "nvidia_com_gpu", app))
    lines.append("# TYPE kube_pod_init_container_resource_requests gauge")
    for pod, (_, _, inits, _) in PODS.items():
        for c, (gpus, _) in inits.items():
            lines.append(ksm_request(True, "ml", pod, c, "n1", "nvidia_com_gpu", gpus))
    lines.append("# TYPE kube_pod_init_container_info gauge")
    for pod, (_, _, inits, reported) in PODS.items():
        lines += [ksm_init_info(pod, c, sidecar) for c, (_, sidecar) in inits.items() if reported]
    return "\n".join(lines) + "\n"


@pytest.fixture(scope="module")
def prom(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    exporters = {"dcgm": ("dcgm-exporter-n1x7k", dcgm_text("Hostname", "n1", [{}] * 8))}
    tmp = tmp_path_factory.mktemp("ksm-init-unreported")
    with ksm_prometheus(tmp, exporters, _ksm_text(), None, 8 + len(PODS)) as url:
        yield url


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
