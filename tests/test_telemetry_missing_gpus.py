"""GPUs that telemetry does not report, time-sliced GPUs and sparse dcgm-exporter output, through
the real Prometheus (Debian's binary) scraping dcgm-exporter-layout texts with the chart's default
scrape (``honorLabels: false``), as ``fleetmind doctor`` and the ``prometheus`` source read them.

Upstream behaviour the fixtures follow:

* dcgm-exporter 4.5.3 and later skip blank values (``isBlankValue`` in
  ``internal/pkg/collector``), and ``DCGM_FI_DEV_XID_ERRORS`` is blank until a GPU has had an XID,
  so a healthy fleet has no such series (NVIDIA/dcgm-exporter issues #700, #646,
  https://github.com/NVIDIA/dcgm-exporter/issues/700); MIG instances export
  ``DCGM_FI_PROF_GR_ENGINE_ACTIVE``, not ``DCGM_FI_DEV_GPU_UTIL`` (tests/data/k8s/dcgm_node_m_mig.prom).
* kubelet's device manager counts every device in ``capacity`` and only healthy ones in
  ``allocatable`` (``GetCapacity`` in ``pkg/kubelet/cm/devicemanager/manager.go``,
  kubernetes/kubernetes); kube-state-metrics exports them as ``kube_node_status_capacity`` /
  ``_allocatable{resource="nvidia_com_gpu",unit="integer"}``.
* Time-slicing (k8s-device-plugin ``sharing.timeSlicing.resources[].replicas``) advertises
  ``replicas`` ``nvidia.com/gpu`` devices per GPU, and GPU feature discovery labels the node
  ``nvidia.com/gpu.replicas`` (https://docs.nvidia.com/datacenter/cloud-native/gpu-operator/latest/
  gpu-sharing.html); kube-state-metrics exports an allowlisted node label as
  ``kube_node_labels{label_nvidia_com_gpu_replicas}``.
* A target Prometheus cannot scrape has ``up == 0``
  (https://prometheus.io/docs/concepts/jobs_instances/#automatically-generated-labels-and-time-series).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
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
from fleetmind.serving.telemetry.prometheus import PrometheusApiSource, build_nodes

DATA = Path(__file__).parent / "data" / "k8s"
H100 = "NVIDIA H100 80GB HBM3"


def _without(text: str, *metrics: str) -> str:
    """``text`` without the samples (and HELP/TYPE lines) of ``metrics``."""
    return "\n".join(ln for ln in text.splitlines() if not any(m in ln for m in metrics)) + "\n"


def _ksm(nodes: dict[str, tuple[int, int]], replicas: dict[str, int], pods: list[str]) -> str:
    """kube-state-metrics text: per node (GPU capacity, GPU allocatable), replicas labels, and the
    ``ml/<pod>@<node>`` workload pods plus one exporter DaemonSet pod per node."""
    lines = ["# TYPE kube_node_status_allocatable gauge"]
    for n, (_, alloc) in nodes.items():
        lines += [
            f'kube_node_status_allocatable{{node="{n}",resource="cpu",unit="core"}} 64',
            f'kube_node_status_allocatable{{node="{n}",resource="memory",unit="byte"}} 5e11',
        ]
        if alloc >= 0:
            lines.append(
                f'kube_node_status_allocatable{{node="{n}",resource="nvidia_com_gpu",'
                f'unit="integer"}} {alloc}'
            )
    lines.append("# TYPE kube_node_status_capacity gauge")
    for n, (cap, _) in nodes.items():
        if cap >= 0:
            lines.append(
                f'kube_node_status_capacity{{node="{n}",resource="nvidia_com_gpu",'
                f'unit="integer"}} {cap}'
            )
    lines.append("# TYPE kube_node_labels gauge")
    for n in nodes:
        extra = f',label_nvidia_com_gpu_replicas="{replicas[n]}"' if n in replicas else ""
        lines.append(f'kube_node_labels{{node="{n}"{extra}}} 1')
    info = [(f"dcgm-exporter-{n[-1] * 5}", "gpu-operator", n, "DaemonSet") for n in nodes]
    info += [(p.split("@")[0], "ml", p.split("@")[1], "Job") for p in pods]
    lines.append("# TYPE kube_pod_info gauge")
    for pod, ns, node, kind in info:
        lines.append(
            f'kube_pod_info{{namespace="{ns}",pod="{pod}",node="{node}",created_by_kind="{kind}"}} 1'
        )
    lines += [
        "# TYPE kube_pod_status_phase gauge",
        "# TYPE kube_pod_container_resource_requests gauge",
    ]
    for pod, ns, node, _ in info:
        lines.append(f'kube_pod_status_phase{{namespace="{ns}",pod="{pod}",phase="Running"}} 1')
        lines.append(
            f'kube_pod_container_resource_requests{{namespace="{ns}",pod="{pod}",container="c",'
            f'node="{node}",resource="cpu",unit="core"}} 1'
        )
    return "\n".join(lines) + "\n"


def _start(tmp: Path, exporter: ExporterServer, jobs: dict[str, str]) -> Prometheus:
    scrape: dict[str, dict[str, Any]] = {
        job: {**DCGM_CHART_SCRAPE, "labels": exporter_target(f"dcgm-exporter-{job[-1] * 5}")}
        for job in jobs
        if job != "ksm"
    }
    return Prometheus(tmp, exporter, jobs, scrape={**scrape, "ksm": KSM_SCRAPE})


@pytest.fixture(scope="module")
def proms(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """``healthy``: no GPU has had an XID (no XID series), a MIG node without GPU_UTIL.
    ``faults``: gpu-a lost GPU 1's series, gpu-b's GPU 1 has only its XID 79 series left, gpu-c's
    exporter is down, gpu-d is time-sliced 4 ways with one pod on GPU 0."""
    if prometheus_binary() is None:
        pytest.skip("Prometheus not installed (Debian package prometheus)")
    two = [{}, {}]
    b = dcgm_text("Hostname", "gpu-b", [{}, {"xid": 79}])
    b_lost = "\n".join(
        ln for ln in b.splitlines() if 'gpu="1"' not in ln or "XID" in ln or ln.startswith("#")
    )
    texts = {
        "/healthy-a": _without(dcgm_text("Hostname", "gpu-a", two), "DCGM_FI_DEV_XID_ERRORS"),
        "/healthy-m": _without((DATA / "dcgm_node_m_mig.prom").read_text(), "XID_ERRORS"),
        "/healthy-ksm": _ksm({"gpu-a": (2, 2), "node-m": (-1, 0)}, {}, []),
        "/a": dcgm_text("Hostname", "gpu-a", [{}]),
        "/b": b_lost + "\n",
        "/d": dcgm_text("Hostname", "gpu-d", [{"pod": "ml/train-0", "used": 20000}, {}]),
        "/ksm": _ksm(
            {"gpu-a": (2, 1), "gpu-b": (2, 1), "gpu-c": (2, 2), "gpu-d": (8, 8)},
            {"gpu-d": 4},
            ["train-0@gpu-d"],
        ),
    }
    exporter = ExporterServer(texts)
    healthy = _start(tmp_path_factory.mktemp("healthy"), exporter,
                     {"dcgm-a": "/healthy-a", "dcgm-m": "/healthy-m", "ksm": "/healthy-ksm"})  # fmt: skip
    faults = _start(tmp_path_factory.mktemp("faults"), exporter,
                    {"dcgm-a": "/a", "dcgm-b": "/b", "dcgm-c": "/c-gone", "dcgm-d": "/d",
                     "ksm": "/ksm"})  # fmt: skip
    try:
        healthy.wait_for('{__name__=~"DCGM_FI_DEV_FB_USED|kube_node_labels"}', 2 + 3 + 2)
        faults.wait_for('{__name__=~"DCGM_FI_DEV_FB_USED|DCGM_FI_DEV_XID_ERRORS"}', 4 + 5)
        faults.wait_for("up == 0", 1)
        faults.wait_for("kube_node_labels", 4)
        yield {"healthy": healthy.url, "faults": faults.url}
    finally:
        healthy.stop()
        faults.stop()
        exporter.close()


def _by(findings: list[Any]) -> dict[str, list[tuple[str, str]]]:
    out: dict[str, list[tuple[str, str]]] = {}
    for f in findings:
        out.setdefault(f.check, []).append((f.level, f.message))
    return out


@pytest.mark.external
def test_no_xid_yet_and_mig_utilisation_are_not_errors(proms: dict[str, str]) -> None:
    """dcgm-exporter >= 4.5.3 on a fleet that never had an XID, with a MIG node: exit 0."""
    findings = diagnose(proms["healthy"])
    assert not has_errors(findings), findings
    metrics = _by(findings)["metrics"]
    assert any(lvl == "info" and "no DCGM_FI_DEV_XID_ERRORS: absent" in m for lvl, m in metrics)
    assert any(lvl == "ok" and "required series are there" in m for lvl, m in metrics)


@pytest.mark.external
def test_missing_gpus_are_unhealthy_placeholders(proms: dict[str, str]) -> None:
    src = PrometheusApiSource(proms["faults"], ttl_s=0.0)
    nodes = {n.name: n for n in src.collect().nodes}
    src.close()
    a = nodes["gpu-a"]  # GPU 1's series vanished; capacity says 2
    assert [(g.index, g.healthy, g.free_milli, g.missing) for g in a.gpus] == [
        (0, True, 1000, False),
        (1, False, 0, True),
    ]
    assert a.gpus[1].model == H100  # the node's other GPUs name the model
    b = nodes["gpu-b"]  # only the XID series of GPU 1 is left: still named
    assert [(g.healthy, g.missing) for g in b.gpus] == [(True, False), (False, False)]
    assert (b.gpus[1].model, b.gpus[1].uuid) == (H100, "GPU-gpu-b-1")
    c = nodes["gpu-c"]  # exporter down: both GPUs shown, nothing free
    assert [(g.index, g.healthy, g.free_milli, g.model) for g in c.gpus] == [
        (0, False, 0, "unknown"),
        (1, False, 0, "unknown"),
    ]


@pytest.mark.external
def test_time_sliced_gpus_keep_their_free_replicas(proms: dict[str, str]) -> None:
    src = PrometheusApiSource(proms["faults"], ttl_s=0.0)
    d = {n.name: n for n in src.collect().nodes}["gpu-d"]
    src.close()
    assert d.gpu_replicas == 4
    assert [(g.index, g.free_milli, g.missing) for g in d.gpus] == [
        (0, 750, False),
        (1, 1000, False),
    ]


@pytest.mark.external
def test_doctor_names_down_targets_and_short_nodes(proms: dict[str, str]) -> None:
    by = _by(diagnose(proms["faults"]))
    assert any(lvl == "warn" and "1 dcgm-exporter target(s) down" in m for lvl, m in by["targets"])
    short = [m for lvl, m in by["nodes"] if lvl == "warn" and "fewer GPUs" in m]
    assert len(short) == 1 and "gpu-a (1 of 2 GPUs)" in short[0] and "gpu-c (0 of 2" in short[0]
    assert "gpu-b" not in short[0] and "gpu-d" not in short[0]
    xid = [m for lvl, m in by["xid"] if lvl == "warn"]
    assert xid == ["1 GPU(s) out for a hardware XID: gpu-b/1 (XID 79)"]  # no placeholder there


def test_pods_sharing_a_time_sliced_gpu_hold_one_replica_each() -> None:
    """Two workload pods on one GPU of a node with 4 replicas: 500 free; without the replicas
    label the GPU is full (one pod holds a whole GPU)."""
    lab = {"gpu": "0", "modelName": "Tesla T4", "node": "gpu-t"}
    dcgm = [
        ("DCGM_FI_DEV_FB_USED", lab, 3000.0),
        ("DCGM_FI_DEV_FB_FREE", {**lab, "exported_pod": "a", "exported_namespace": "ml"}, 12000.0),
        ("DCGM_FI_DEV_FB_FREE", {**lab, "exported_pod": "b", "exported_namespace": "ml"}, 12000.0),
    ]
    labels = {"node": "gpu-t", "label_nvidia_com_gpu_replicas": "4"}
    cap = {"node": "gpu-t", "__name__": "kube_node_status_capacity"}
    ksm = [("node_gpu_replicas", labels, 1.0), ("node_gpus", cap, 4.0)]
    (n,) = build_nodes(dcgm, ksm)
    assert n.gpu_replicas == 4 and [g.free_milli for g in n.gpus] == [500]
    (n,) = build_nodes(dcgm, [])
    assert [g.free_milli for g in n.gpus] == [0]


@pytest.mark.parametrize("capacity", [float("inf"), float("nan"), 1e12, -3.0])
def test_a_bogus_gpu_capacity_is_bounded(capacity: float) -> None:
    """A capacity that is no count (a broken exporter) adds at most MAX_PLACEHOLDERS GPUs and
    never raises (int(inf) would)."""
    from fleetmind.serving.telemetry.prometheus import MAX_PLACEHOLDERS

    cap = {"node": "gpu-x", "__name__": "kube_node_status_capacity"}
    (n,) = build_nodes([], [("node_gpus", cap, capacity)])
    assert len(n.gpus) <= MAX_PLACEHOLDERS and all(not g.healthy for g in n.gpus)
