"""dcgm-exporter reading a remote DCGM host engine names every node after the engine: FleetMind must
not merge the nodes, and ``fleetmind doctor`` says why.

Upstream behaviour the fixtures follow:

* With ``DCGM_REMOTE_HOSTENGINE_INFO`` (``--remote-hostengine-info``; the GPU Operator's standalone
  DCGM sets ``nvidia-dcgm:5555``) dcgm-exporter's ``Hostname`` is the host part of that address,
  not the node (``GetHostname`` / ``parseRemoteHostname`` in NVIDIA/dcgm-exporter
  ``internal/pkg/hostname/hostname.go``), so the exporter of every node reports
  ``Hostname="nvidia-dcgm"``.
* The chart's ServiceMonitor scrapes each exporter pod as its own target (``instance`` = the pod's
  address) with ``honorLabels: false``: ``pod``/``namespace`` are the exporter's own pod
  (prometheus-operator ``generateServiceMonitorConfig``), which ``kube_pod_info`` places on its node.
* A rollout of the exporter DaemonSet scrapes an old and a new pod of one node for a while: two
  targets, the same GPUs (``UUID``), one node.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from k8s_helpers import (
    DCGM_CHART_SCRAPE,
    KSM_SCRAPE,
    ExporterServer,
    Prometheus,
    dcgm_text,
    exporter_target,
    prometheus_binary,
)

from fleetmind.serving.telemetry.doctor import diagnose, has_errors
from fleetmind.serving.telemetry.prometheus import PrometheusApiSource, Sample, build_nodes

ENGINE = "nvidia-dcgm"
NODES = {"gpu-node-1": ("10.0.0.11", "nvidia-dcgm-exporter-4xk2p"),
         "gpu-node-2": ("10.0.0.12", "nvidia-dcgm-exporter-9zq7m")}  # fmt: skip


def _dcgm(node: str, ip: str, pod: str, busy: int) -> list[Sample]:
    """Four GPUs of ``node`` as its exporter's target reports them (``Hostname`` the engine's),
    the first ``busy`` held by workload pods."""
    out: list[Sample] = []
    for g in range(4):
        lab = {"gpu": str(g), "UUID": f"GPU-{node}-{g}", "Hostname": ENGINE,
               "modelName": "NVIDIA H100 80GB HBM3", "instance": f"{ip}:9400", "pod": pod,
               "namespace": "gpu-operator", "job": "nvidia-dcgm-exporter"}  # fmt: skip
        used = 40000 if g < busy else 580
        if g < busy:
            lab |= {"exported_pod": f"train-{g}", "exported_namespace": "ml"}
        out += [("DCGM_FI_DEV_FB_USED", lab, used), ("DCGM_FI_DEV_FB_FREE", lab, 81559 - used)]
    return out


def _ksm(pods: dict[str, str]) -> list[Sample]:
    """kube-state-metrics: each node's CPU and 4 GPUs, the workload pods ``ml/train-0``/``-1``
    running on gpu-node-1 (a pod DCGM names that kube-state-metrics does not list holds no GPU);
    ``pods`` (exporter pod -> node)."""
    out: list[Sample] = []
    for node in NODES:
        out += [("kube_node_status_allocatable", {"node": node, "resource": "cpu"}, 96.0),
                ("node_gpus", {"__name__": "kube_node_status_capacity", "node": node}, 4.0)]  # fmt: skip
    for g in range(2):
        lab = {
            "namespace": "ml",
            "pod": f"train-{g}",
            "node": "gpu-node-1",
            "created_by_kind": "Job",
        }
        out.append(("kube_pod_info", lab, 1.0))
    for pod, node in pods.items():
        lab = {
            "namespace": "gpu-operator",
            "pod": pod,
            "node": node,
            "created_by_kind": "DaemonSet",
        }
        out.append(("kube_pod_info", lab, 1.0))
    return out


def _summary(nodes: list[Any]) -> dict[str, tuple[int, int, int]]:
    """``name -> (GPUs, free GPUs, placeholders)``."""
    return {
        n.name: (len(n.gpus), sum(g.free_milli > 0 for g in n.gpus), sum(g.missing for g in n.gpus))
        for n in nodes
    }


def test_each_exporter_s_gpus_go_to_its_pod_s_node() -> None:
    dcgm = _dcgm("gpu-node-1", *NODES["gpu-node-1"], busy=2)
    dcgm += _dcgm("gpu-node-2", *NODES["gpu-node-2"], busy=0)
    nodes = build_nodes(dcgm, _ksm({pod: node for node, (_, pod) in NODES.items()}))
    # before: one node 'nvidia-dcgm' holding 4 merged GPUs, and both real nodes all placeholders
    assert _summary(nodes) == {"gpu-node-1": (4, 2, 0), "gpu-node-2": (4, 4, 0)}
    assert all(n.cpu_milli == 96000 for n in nodes)
    assert {g.uuid for n in nodes for g in n.gpus} == {
        f"GPU-{n}-{g}" for n in NODES for g in range(4)
    }


def test_without_kube_pod_info_the_targets_stay_apart_by_address() -> None:
    dcgm = _dcgm("gpu-node-1", *NODES["gpu-node-1"], busy=1)
    dcgm += _dcgm("gpu-node-2", *NODES["gpu-node-2"], busy=0)
    assert _summary(build_nodes(dcgm, [])) == {"10.0.0.11": (4, 3, 0), "10.0.0.12": (4, 4, 0)}


def test_an_exporter_rollout_is_one_node() -> None:
    """Old and new exporter pod of gpu-node-1, both scraped: the same GPUs, so the name stands."""
    old = _dcgm("gpu-node-1", "10.0.0.21", "dcgm-exporter-aaaaa", busy=1)
    new = _dcgm("gpu-node-1", "10.0.0.22", "dcgm-exporter-bbbbb", busy=1)
    for _, lab, _ in old + new:
        lab["Hostname"] = "gpu-node-1"
    placed = _ksm({"dcgm-exporter-aaaaa": "gpu-node-1", "dcgm-exporter-bbbbb": "gpu-node-1"})
    for ksm in (placed, placed[:-1], []):  # the old pod still listed, gone, no kube_pod_info
        got = _summary(build_nodes(old + new, ksm))
        assert got["gpu-node-1"] == (4, 3, 0)
        assert not any(name.startswith("10.") for name in got)


# ---------------------------------------------------------------- the real Prometheus and doctor
def _exporter_text(node: str) -> str:
    """``dcgm_text`` of ``node`` with the engine's ``Hostname`` and the node's own UUIDs."""
    gpus = [{"pod": "ml/train-0", "used": 40000}, {}] if node == "gpu-node-1" else [{}, {}]
    text = dcgm_text("Hostname", ENGINE, gpus)
    return text.replace(f'UUID="GPU-{ENGINE}-', f'UUID="GPU-{node}-')


def _ksm_text() -> str:
    lines = ["# TYPE kube_node_status_allocatable gauge"]
    for node in NODES:
        lines += [
            f'kube_node_status_allocatable{{node="{node}",resource="cpu",unit="core"}} 96',
            f'kube_node_status_allocatable{{node="{node}",resource="memory",unit="byte"}} 5e11',
        ]
    lines.append("# TYPE kube_pod_info gauge")
    lines.append(
        'kube_pod_info{namespace="ml",pod="train-0",node="gpu-node-1",created_by_kind="Job"} 1'
    )
    for node, (_, pod) in NODES.items():
        lines.append(f'kube_pod_info{{namespace="gpu-operator",pod="{pod}",node="{node}",'
                     'created_by_kind="DaemonSet"} 1')  # fmt: skip
    lines += [
        "# TYPE kube_pod_status_phase gauge",
        "# TYPE kube_pod_container_resource_requests gauge",
    ]
    for node, (_, pod) in NODES.items():
        lines.append(
            f'kube_pod_status_phase{{namespace="gpu-operator",pod="{pod}",phase="Running"}} 1'
        )
        lines.append(f'kube_pod_container_resource_requests{{namespace="gpu-operator",pod="{pod}",'
                     f'container="c",node="{node}",resource="cpu",unit="core"}} 1')  # fmt: skip
    return "\n".join(lines) + "\n"


@pytest.fixture(scope="module")
def prom(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """Two exporter targets (each with its pod address as ``instance``) and kube-state-metrics."""
    if prometheus_binary() is None:
        pytest.skip("Prometheus not installed (Debian package prometheus)")
    texts = {f"/{node}": _exporter_text(node) for node in NODES} | {"/ksm": _ksm_text()}
    exporter = ExporterServer(texts)
    scrape: dict[str, dict[str, Any]] = {
        f"dcgm-{node}": {
            **DCGM_CHART_SCRAPE,
            "labels": {**exporter_target(pod), "instance": f"{ip}:9400"},
        }  # fmt: skip
        for node, (ip, pod) in NODES.items()
    }
    jobs = {f"dcgm-{node}": f"/{node}" for node in NODES} | {"ksm": "/ksm"}
    p = Prometheus(
        tmp_path_factory.mktemp("remote-he"), exporter, jobs, {**scrape, "ksm": KSM_SCRAPE}
    )
    try:
        p.wait_for('{__name__=~"DCGM_FI_DEV_FB_USED|kube_pod_info"}', 4 + 3)
        yield p.url
    finally:
        p.stop()
        exporter.close()


@pytest.mark.external
def test_the_service_and_the_doctor_on_a_remote_host_engine(prom: str) -> None:
    src = PrometheusApiSource(prom, ttl_s=0.0)
    nodes = src.collect().nodes
    src.close()
    assert _summary(nodes) == {"gpu-node-1": (2, 1, 0), "gpu-node-2": (2, 2, 0)}
    findings = diagnose(prom)
    layout = [(f.level, f.message) for f in findings if f.check == "layout"]
    shared = [m for lvl, m in layout if lvl == "error"]
    assert len(shared) == 1 and has_errors(findings), layout
    assert "Hostname 'nvidia-dcgm' is on the GPUs of 2 scrape targets" in shared[0]
    assert "remote DCGM host engine" in shared[0] and "__meta_kubernetes_pod_node_name" in shared[0]
    assert not any("named by the 'Hostname' label" in m for _, m in layout)
