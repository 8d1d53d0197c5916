"""A pod that finished (or was deleted) no longer holds the GPU dcgm-exporter still names it on.

Upstream behaviour the fixtures follow:

* The kubelet's podresources ``List()`` keeps reporting the devices of pods in a terminal phase
  (kubernetes/kubernetes#119423; the e2e test of kubernetes/kubernetes#119402 checks exactly
  that), and dcgm-exporter maps GPUs to pods through it, so a ``Succeeded`` or ``Failed`` pod's
  ``pod``/``namespace``/``container`` labels stay on its GPU (NVIDIA/dcgm-exporter#140, the same
  symptom) until the pod is deleted; a Job's pods stay ``Succeeded`` until its TTL.
* dcgm-exporter 4.x exposition: ``gpu``, ``UUID``, ``pci_bus_id``, ``device``, ``modelName``,
  ``Hostname``, ``DCGM_FI_DRIVER_VERSION`` labels, plus ``container``/``namespace``/``pod`` on a
  GPU a pod holds. The chart's ServiceMonitor scrapes it with ``honorLabels: false``
  (NVIDIA/dcgm-exporter ``deployment/values.yaml``): Prometheus renames those to
  ``exported_container``/``exported_namespace``/``exported_pod`` and sets the exporter pod's own.
* kube-state-metrics lists a pod (``kube_pod_info``) until it is deleted, finished ones included,
  and exports ``kube_pod_status_phase`` once per phase (1 for the current one, 0 for the others).

Without kube-state-metrics (one exporter's ``/metrics``) DCGM's word stands: a named pod holds.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from k8s_helpers import (
    DCGM_CHART_SCRAPE,
    KSM_SCRAPE,
    ExporterServer,
    Prometheus,
    exporter_target,
    prometheus_binary,
)

from fleetmind.serving.telemetry.prometheus import (
    PrometheusApiSource,
    Sample,
    build_nodes,
    parse_dcgm,
)

NODE = "gpu-node-1"
EXPORTER_POD = "dcgm-exporter-1733400000-x7k2p"  # the chart's DaemonSet, named after its release
# GPU -> (pod dcgm-exporter names on it, its phase in kube-state-metrics or None: deleted,
#         framebuffer used MiB, utilisation %)
GPUS = {
    0: ("train-1", "Succeeded", 3, 0),  # a finished Job pod, its GPU idle
    1: ("serve-0", "Running", 61000, 87),  # a running pod: it holds the GPU
    2: ("eval-2", "Failed", 3, 0),  # a failed pod, its GPU idle
    3: ("gone-3", None, 3, 0),  # deleted: kube-state-metrics no longer lists it
}
PHASES = ("Pending", "Running", "Succeeded", "Failed", "Unknown")


def dcgm_text() -> str:
    """The node's exporter text as dcgm-exporter 4.x writes it."""
    fields = {
        "DCGM_FI_DEV_GPU_UTIL": "GPU utilization (in %).",
        "DCGM_FI_DEV_FB_FREE": "Framebuffer memory free (in MiB).",
        "DCGM_FI_DEV_FB_USED": "Framebuffer memory used (in MiB).",
        "DCGM_FI_DEV_XID_ERRORS": "Value of the last XID error encountered.",
    }
    lines: list[str] = []
    for f, help_text in fields.items():
        lines += [f"# HELP {f} {help_text}", f"# TYPE {f} gauge"]
        for g, (pod, _, used, util) in GPUS.items():
            lab = (
                f'gpu="{g}",UUID="GPU-aaaa0000-0000-0000-0000-00000000000{g}",'
                f'pci_bus_id="00000000:{0x18 + g:02X}:00.0",device="nvidia{g}",'
                f'modelName="NVIDIA H100 80GB HBM3",Hostname="{NODE}",'
                f'DCGM_FI_DRIVER_VERSION="550.90.07",container="main",namespace="ml",pod="{pod}"'
            )
            value = {
                "DCGM_FI_DEV_GPU_UTIL": util,
                "DCGM_FI_DEV_FB_FREE": 80977 - used,
                "DCGM_FI_DEV_FB_USED": used,
                "DCGM_FI_DEV_XID_ERRORS": 0,
            }[f]
            lines.append(f"{f}{{{lab}}} {value}")
    return "\n".join(lines) + "\n"


def ksm_text() -> str:
    """kube-state-metrics: the node, the exporter's DaemonSet pod, and the pods not deleted."""
    pods = [("gpu-operator", EXPORTER_POD, "DaemonSet", "Running")]
    pods += [("ml", pod, "Job", phase) for pod, phase, _, _ in GPUS.values() if phase]
    lines = [
        "# TYPE kube_node_status_allocatable gauge",
        f'kube_node_status_allocatable{{node="{NODE}",resource="cpu",unit="core"}} 64',
        f'kube_node_status_allocatable{{node="{NODE}",resource="memory",unit="byte"}} 5e+11',
        "# TYPE kube_pod_info gauge",
    ]
    for ns, pod, kind, _ in pods:
        lines.append(
            f'kube_pod_info{{namespace="{ns}",pod="{pod}",uid="u-{pod}",host_ip="10.0.0.1",'
            f'pod_ip="10.1.0.5",node="{NODE}",created_by_kind="{kind}",created_by_name="x",'
            'priority_class="",host_network="false"} 1'
        )
    lines.append("# TYPE kube_pod_status_phase gauge")
    for ns, pod, _, phase in pods:
        for p in PHASES:
            lines.append(
                f'kube_pod_status_phase{{namespace="{ns}",pod="{pod}",uid="u-{pod}",'
                f'phase="{p}"}} {int(p == phase)}'
            )
    return "\n".join(lines) + "\n"


def _samples(text: str, target: dict[str, str], honor_labels: bool) -> list[Sample]:
    """``text`` as Prometheus stores it after a scrape with ``target`` labels: with
    ``honor_labels: false`` a label the target also sets is kept as ``exported_<name>``."""
    from prometheus_client.parser import text_string_to_metric_families

    out: list[Sample] = []
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            lab = dict(s.labels)
            for k, v in target.items():
                if k in lab and honor_labels:
                    continue
                if k in lab:
                    lab[f"exported_{k}"] = lab[k]
                lab[k] = v
            out.append((s.name, lab, float(s.value)))
    return out


def _dcgm() -> list[Sample]:
    target = {**exporter_target(EXPORTER_POD), "instance": "10.1.0.9:9400", "job": "dcgm"}
    return _samples(dcgm_text(), target, honor_labels=False)


def _ksm() -> list[Sample]:
    target = {"instance": "10.1.0.3:8080", "job": "kube-state-metrics", "pod": "ksm-abcde"}
    return _samples(ksm_text(), target, honor_labels=True)


def _free(nodes: list) -> dict[int, int]:  # noqa: ANN001
    (node,) = nodes
    return {g.index: g.free_milli for g in node.gpus}


def test_the_scrape_names_every_pod_on_its_gpu() -> None:
    held = {lab["gpu"]: lab["exported_pod"] for _, lab, _ in _dcgm()}
    assert held == {"0": "train-1", "1": "serve-0", "2": "eval-2", "3": "gone-3"}


def test_finished_and_deleted_pods_hold_no_gpu() -> None:
    """Before: GPUs 0, 2 and 3 stayed at 0 free while the node's pods left the finished out."""
    (node,) = build_nodes(_dcgm(), _ksm())
    assert _free([node]) == {0: 1000, 1: 0, 2: 1000, 3: 1000}
    assert node.pods == {f"gpu-operator/{EXPORTER_POD}", "ml/serve-0"}


def test_as_the_server_mode_query_answers() -> None:
    """The server mode's ``kube_pod_info`` query leaves finished pods out (``unless ...
    kube_pod_status_phase{phase=~"Succeeded|Failed"} == 1``) and reads no phase series."""
    finished = {"train-1", "eval-2"}
    ksm = [
        s
        for s in _ksm()
        if s[0] == "kube_node_status_allocatable"
        or (s[0] == "kube_pod_info" and s[1]["pod"] not in finished)
    ]
    assert _free(build_nodes(_dcgm(), ksm)) == {0: 1000, 1: 0, 2: 1000, 3: 1000}


def test_a_finished_pod_s_busy_gpu_keeps_its_memory_rule() -> None:
    """Left to the framebuffer: a GPU still 75 % full is not whole, whoever held it."""
    dcgm = [
        (n, lab, 61000.0 if n == "DCGM_FI_DEV_FB_USED" and lab["gpu"] == "0" else v)
        for n, lab, v in _dcgm()
    ]
    dcgm = [
        (n, lab, 80977.0 - 61000.0 if n == "DCGM_FI_DEV_FB_FREE" and lab["gpu"] == "0" else v)
        for n, lab, v in dcgm
    ]
    assert _free(build_nodes(dcgm, _ksm()))[0] == int(1000 * (80977 - 61000) / 80977)


def test_other_clusters_pods_do_not_count() -> None:
    """``ml/train-1`` running in cluster b does not hold cluster a's GPU its finished namesake held."""
    dcgm = [(n, {**lab, "cluster": "a"}, v) for n, lab, v in _dcgm()]
    ksm = [(n, {**lab, "cluster": "a"}, v) for n, lab, v in _ksm()]
    ksm.append(("kube_pod_info", {"cluster": "b", "namespace": "ml", "pod": "serve-0",
                                  "node": "gpu-node-9"}, 1.0))  # fmt: skip
    ksm = [s for s in ksm if not (s[0] == "kube_pod_info" and s[1].get("pod") == "serve-0"
                                  and s[1]["cluster"] == "a")]  # fmt: skip
    nodes = [n for n in build_nodes(dcgm, ksm) if n.cluster == "a"]
    assert _free(nodes)[1] == int(1000 * (80977 - 61000) / 80977)  # serve-0 is b's, not a's


def test_without_kube_state_metrics_the_exporter_is_trusted() -> None:
    """One exporter's ``/metrics`` (no kube-state-metrics): every named pod holds its GPU."""
    assert _free(parse_dcgm(dcgm_text())) == {0: 0, 1: 0, 2: 0, 3: 0}
    ksm = [s for s in _ksm() if s[0] == "kube_node_status_allocatable"]  # no pod series at all
    assert _free(build_nodes(_dcgm(), ksm)) == {0: 0, 1: 0, 2: 0, 3: 0}


# ---------------------------------------------------------------- through the real Prometheus
@pytest.fixture(scope="module")
def prom(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    if prometheus_binary() is None:
        pytest.skip("Prometheus not installed (Debian package prometheus)")
    exporter = ExporterServer({"/dcgm": dcgm_text(), "/ksm": ksm_text()})
    scrape = {
        "dcgm": {**DCGM_CHART_SCRAPE, "labels": exporter_target(EXPORTER_POD)},
        "ksm": KSM_SCRAPE,
    }
    p = Prometheus(
        tmp_path_factory.mktemp("finished"), exporter, {"dcgm": "/dcgm", "ksm": "/ksm"}, scrape
    )
    try:
        p.wait_for('{__name__=~"DCGM_FI_DEV_FB_USED|kube_pod_info"}', 4 + 4)
        yield p.url
    finally:
        p.stop()
        exporter.close()


@pytest.mark.external
def test_the_server_mode_frees_a_finished_job_s_gpu(prom: str) -> None:
    src = PrometheusApiSource(prom, ttl_s=0.0)
    try:
        (node,) = src.collect().nodes
    finally:
        src.close()
    assert node.name == NODE
    assert _free([node]) == {0: 1000, 1: 0, 2: 1000, 3: 1000}
    assert node.pods == {f"gpu-operator/{EXPORTER_POD}", "ml/serve-0"}
