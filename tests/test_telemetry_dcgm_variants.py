"""dcgm-exporter deployments that differ from the defaults FleetMind was first written against.

* A counters CSV (``-f``) without ``DCGM_FI_DEV_FB_FREE``. NVIDIA/dcgm-exporter's
  ``etc/default-counters.csv`` ("# Memory usage") exports ``DCGM_FI_DEV_FB_FREE`` and
  ``DCGM_FI_DEV_FB_USED``; a custom CSV may keep ``DCGM_FI_DEV_GPU_UTIL``, ``DCGM_FI_DEV_FB_USED``
  and ``DCGM_FI_DEV_XID_ERRORS`` only. Every GPU of such a node read as taken (free 0) and no pod
  was matched to its GPU, since pod labels came from the ``FB_FREE`` query alone.
* ``hostNetwork``. The dcgm-exporter chart's ``hostNetwork`` value (``deployment/values.yaml``,
  rendered as the pod's ``hostNetwork`` in ``deployment/templates/daemonset.yaml``) puts the
  exporter in the node's network namespace, where ``Hostname`` is the OS host name
  (``internal/pkg/hostname/hostname.go``: ``os.Hostname()`` unless ``NODE_NAME`` is set). Where
  the kubelet runs with ``--hostname-override`` (EKS: node ``ip-10-0-1-5.ec2.internal``, OS host
  ``ip-10-0-1-5``) that name is no Kubernetes node: a phantom node got the free GPUs and the real
  node unhealthy placeholders.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterator

import pytest
from k8s_helpers import (
    DCGM_CHART_SCRAPE,
    KSM_SCRAPE,
    ExporterServer,
    Prometheus,
    dcgm_text,
    exporter_target,
)
from k8s_helpers import prometheus_binary as _prometheus_binary

from fleetmind.serving.telemetry import prometheus as prom_mod
from fleetmind.serving.telemetry.base import FleetSnapshot, NodeState
from fleetmind.serving.telemetry.doctor import _unknown_memory, diagnose
from fleetmind.serving.telemetry.prometheus import (
    PrometheusApiSource,
    Sample,
    build_nodes,
    parse_dcgm,
)

os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")

EKS_NODE = "ip-10-0-1-5.ec2.internal"  # Kubernetes node name (EC2 private DNS name)
EKS_HOST = "ip-10-0-1-5"  # the OS host name the exporter on hostNetwork reports
GPUS = [{"pod": "ml/train-0", "used": 70000}, {}, {}, {}]  # GPU 0 held, 1-3 idle


def _without(text: str, *fields: str) -> str:
    """``text`` with every line of ``fields`` (their samples and HELP/TYPE lines) left out: the
    exposition of an exporter whose counters CSV does not list them."""
    kept = [ln for ln in text.splitlines() if not any(f in ln for f in fields)]
    return "\n".join(kept) + "\n"


def _states(node: NodeState) -> list[tuple[int, int, float | None]]:
    return [(g.index, g.free_milli, g.mem_total_mib) for g in node.gpus]


# ------------------------------------------------------------------ no DCGM_FI_DEV_FB_FREE
def test_no_fb_free_idle_gpus_are_free_and_the_held_one_is_not() -> None:
    """Before: ``[(0, 0, None), (1, 0, None), (2, 0, None), (3, 0, None)]``: nothing free."""
    text = _without(dcgm_text("Hostname", "gpu-a", GPUS), "DCGM_FI_DEV_FB_FREE")
    (n,) = parse_dcgm(text, "prod", "gpu-a")
    assert _states(n) == [(0, 0, None), (1, 1000, None), (2, 1000, None), (3, 1000, None)]
    assert n.gpu_pods == {"ml/train-0"}


def test_no_fb_free_busy_gpu_without_pod_is_not_free() -> None:
    """Utilisation alone decides a GPU no pod holds: 30 % (>= IDLE_UTIL_PCT) is taken, and no
    utilisation at all (memory and utilisation both unknown) is not guessed free."""
    lab = {"gpu": "0", "UUID": "GPU-x-0", "modelName": "NVIDIA H100 80GB HBM3", "Hostname": "x"}
    busy = [("DCGM_FI_DEV_FB_USED", lab, 2000.0), ("DCGM_FI_DEV_GPU_UTIL", lab, 30.0)]
    (n,) = build_nodes(busy, [], "prod")
    assert _states(n) == [(0, 0, None)]
    (n,) = build_nodes(busy[:1], [], "prod")
    assert _states(n) == [(0, 0, None)]


def test_fb_total_gives_the_size_when_fb_free_is_absent() -> None:
    """``DCGM_FI_DEV_FB_TOTAL`` (DCGM field 250, MiB) stands in for used + free: free is read from
    memory as with the default CSV (70 of 80 GiB used: 141 milli free)."""
    lab = {"gpu": "0", "UUID": "GPU-x-0", "modelName": "NVIDIA H100 80GB HBM3", "Hostname": "x"}
    samples = [("DCGM_FI_DEV_FB_USED", lab, 70000.0), ("DCGM_FI_DEV_FB_TOTAL", lab, 81559.0),
               ("DCGM_FI_DEV_GPU_UTIL", lab, 0.0)]  # fmt: skip
    (n,) = build_nodes(samples, [], "prod")
    assert _states(n) == [(0, int(1000 * (81559 - 70000) / 81559), 81559.0)]


def test_no_fb_free_warns_once_per_node(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(prom_mod, "_WARNED_MEMORY", set(), raising=False)  # none logged yet
    text = _without(dcgm_text("Hostname", "gpu-a", GPUS), "DCGM_FI_DEV_FB_FREE")
    full = dcgm_text("Hostname", "gpu-b", GPUS)
    with caplog.at_level(logging.WARNING, logger=prom_mod.__name__):
        for _ in range(3):  # three refreshes
            parse_dcgm(text + full, "prod", "gpu-a")
    said = [r.getMessage() for r in caplog.records if "FB_FREE" in r.getMessage()]
    assert len(said) == 1 and "prod/gpu-a" in said[0], said


def test_doctor_names_the_nodes_without_fb_free() -> None:
    text = _without(dcgm_text("Hostname", "gpu-a", GPUS), "DCGM_FI_DEV_FB_FREE")
    nodes = parse_dcgm(text + dcgm_text("Hostname", "gpu-b", GPUS), "prod", "gpu-a")
    (f,) = _unknown_memory(FleetSnapshot("prometheus", nodes, 0.0))
    assert f.level == "warn" and "prod/gpu-a" in f.message and "gpu-b" not in f.message


# ------------------------------------------------------------------ hostNetwork Hostname
def _eks_ksm(with_nodes: bool = True) -> list[Sample]:
    """The fleet query's kube-state-metrics answers: node ``EKS_NODE`` (4 GPUs) and the exporter
    pod, a DaemonSet pod placed on it (``with_nodes`` False: no node series at all)."""
    pod = {"namespace": "gpu-operator", "pod": "nvidia-dcgm-exporter-k2x9p", "node": EKS_NODE,
           "created_by_kind": "DaemonSet", "uid": "u-exp"}  # fmt: skip
    out: list[Sample] = [("kube_pod_info", pod, 1.0)]
    if with_nodes:
        out += [
            ("kube_node_status_allocatable", {"node": EKS_NODE, "resource": "cpu"}, 96.0),
            ("kube_node_status_allocatable", {"node": EKS_NODE, "resource": "memory"}, 1e12),
            ("node_gpus", {"__name__": "kube_node_status_capacity", "node": EKS_NODE}, 4.0),
            ("node_gpus", {"__name__": "kube_node_status_allocatable", "node": EKS_NODE}, 4.0),
        ]
    return out


def _host_network_dcgm(host: str = EKS_HOST) -> list[Sample]:
    """The DCGM entries' answers for 4 idle GPUs of an exporter on hostNetwork (target
    ``10.0.1.5:9400``, its own pod in ``pod`` as the chart's ``honorLabels: false`` scrape
    gives it, on the FB_FREE entry's samples that keep pod labels)."""
    out: list[Sample] = []
    for g in range(4):
        lab = {"gpu": str(g), "UUID": f"GPU-{g}", "modelName": "NVIDIA H100 80GB HBM3",
               "Hostname": host, "instance": "10.0.1.5:9400"}  # fmt: skip
        out += [("DCGM_FI_DEV_FB_USED", lab, 500.0), ("DCGM_FI_DEV_GPU_UTIL", lab, 0.0),
                ("DCGM_FI_DEV_FB_FREE", {**lab, "namespace": "gpu-operator",
                                         "pod": "nvidia-dcgm-exporter-k2x9p"}, 81059.0)]  # fmt: skip
    return out


def test_host_network_hostname_goes_to_the_exporter_pods_node() -> None:
    """Before: a node ``ip-10-0-1-5`` with 4 free GPUs and no CPU, and ``EKS_NODE`` with 4
    unhealthy placeholders."""
    nodes = build_nodes(_host_network_dcgm(), _eks_ksm(), "prod")
    assert [n.name for n in nodes] == [EKS_NODE]
    (n,) = nodes
    assert n.cpu_milli == 96000
    assert [(g.index, g.healthy, g.free_milli, g.missing) for g in n.gpus] == [
        (i, True, 1000, False) for i in range(4)
    ]


def test_host_network_hostname_is_kept_without_kube_state_metrics_nodes() -> None:
    """No node series to check the name against: the Hostname stays the node."""
    nodes = build_nodes(_host_network_dcgm(), _eks_ksm(with_nodes=False), "prod")
    assert [n.name for n in nodes] == [EKS_HOST]


def test_a_hostname_that_is_a_known_node_is_kept() -> None:
    """A Hostname kube-state-metrics names stays, whatever node the target's pod is on."""
    ksm = _eks_ksm() + [
        ("kube_node_status_allocatable", {"node": "gpu-z", "resource": "cpu"}, 8.0),
    ]
    names = sorted(n.name for n in build_nodes(_host_network_dcgm("gpu-z"), ksm, "prod"))
    assert names == sorted([EKS_NODE, "gpu-z"])
    assert next(n for n in build_nodes(_host_network_dcgm("gpu-z"), ksm) if n.name == "gpu-z").gpus


# ------------------------------------------------------------------ a real Prometheus
def _ksm_text(node: str) -> str:
    """kube-state-metrics' exposition: ``node`` (4 GPUs), the exporter pod and ``ml/train-0``."""
    return f"""# TYPE kube_node_status_allocatable gauge
kube_node_status_allocatable{{node="{node}",resource="cpu",unit="core"}} 96
kube_node_status_allocatable{{node="{node}",resource="memory",unit="byte"}} 1.099511627776e+12
kube_node_status_allocatable{{node="{node}",resource="nvidia_com_gpu",unit="integer"}} 4
# TYPE kube_node_status_capacity gauge
kube_node_status_capacity{{node="{node}",resource="nvidia_com_gpu",unit="integer"}} 4
# TYPE kube_pod_info gauge
kube_pod_info{{namespace="ml",pod="train-0",node="{node}",created_by_kind="Job",uid="u1"}} 1
kube_pod_info{{namespace="gpu-operator",pod="dcgm-exporter-a1b2c",node="{node}",created_by_kind="DaemonSet",uid="u2"}} 1
# TYPE kube_pod_status_phase gauge
kube_pod_status_phase{{namespace="ml",pod="train-0",phase="Running",uid="u1"}} 1
# TYPE kube_pod_container_resource_requests gauge
kube_pod_container_resource_requests{{namespace="ml",pod="train-0",container="main",node="{node}",resource="nvidia_com_gpu",unit="integer",uid="u1"}} 1
"""


@pytest.fixture
def prometheus_of(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Callable[[str, str], str]]:
    """Start a real Prometheus scraping one dcgm-exporter text (the chart's ``honorLabels:
    false``, its pod ``dcgm-exporter-a1b2c``) and kube-state-metrics' text; yields a starter."""
    if _prometheus_binary() is None:
        pytest.skip("Prometheus not installed (Debian package prometheus)")
    started: list[tuple[Prometheus, ExporterServer]] = []

    def start(dcgm: str, ksm: str) -> str:
        exp = ExporterServer({"/dcgm": dcgm, "/ksm": ksm})
        p = Prometheus(tmp_path_factory.mktemp("dcgm_variants"), exp,
                       {"dcgm": "/dcgm", "kube-state-metrics": "/ksm"},
                       scrape={"dcgm": {**DCGM_CHART_SCRAPE,
                                        "labels": exporter_target("dcgm-exporter-a1b2c")},
                               "kube-state-metrics": KSM_SCRAPE})  # fmt: skip
        started.append((p, exp))
        p.wait_for('{__name__=~"DCGM_FI_DEV_FB_USED|kube_pod_info"}', 4 + 2)
        return p.url

    yield start
    for p, exp in started:
        p.stop()
        exp.close()


@pytest.mark.external
def test_real_prometheus_custom_csv_without_fb_free(
    prometheus_of: Callable[[str, str], str],
) -> None:
    """The served query reads the workload pod (``exported_pod``) from FB_USED: GPU 0 is
    ``ml/train-0``'s though it reads 0 % (loading data), the others free; the doctor names the
    node. Before: all 4 taken; with FB_FREE's labels alone, the pod (unnamed) was given idle
    GPU 0 and its own GPU 2 looked free."""
    held_2 = [{}, {}, {"pod": "ml/train-0", "used": 70000}, {}]
    text = _without(dcgm_text("Hostname", "gpu-a", held_2), "DCGM_FI_DEV_FB_FREE")
    text = "\n".join(  # GPU 0's pod is not computing right now: only its pod label says it is held
        ln.rsplit(" ", 1)[0] + " 0" if ln.startswith("DCGM_FI_DEV_GPU_UTIL{") else ln
        for ln in text.splitlines()
    )
    url = prometheus_of(text, _ksm_text("gpu-a"))
    src = PrometheusApiSource(url, default_cluster="prod")
    try:
        (n,) = src.collect().nodes
    finally:
        src.close()
    assert _states(n) == [(0, 1000, None), (1, 1000, None), (2, 0, None), (3, 1000, None)]
    assert n.gpu_pods == {"ml/train-0"}
    nodes = [f for f in diagnose(url, timeout_s=5, cluster="prod") if f.check == "nodes"]
    assert any("FB_FREE" in f.message and "prod/gpu-a" in f.message for f in nodes), nodes


@pytest.mark.external
def test_real_prometheus_host_network_hostname(prometheus_of: Callable[[str, str], str]) -> None:
    """Hostname ``ip-10-0-1-5`` on node ``ip-10-0-1-5.ec2.internal``: one node, 3 of 4 free."""
    url = prometheus_of(dcgm_text("Hostname", EKS_HOST, GPUS), _ksm_text(EKS_NODE))
    src = PrometheusApiSource(url, default_cluster="prod")
    try:
        nodes = src.collect().nodes
    finally:
        src.close()
    assert [(n.name, n.cpu_milli) for n in nodes] == [(EKS_NODE, 96000)]
    assert [(g.free_milli, g.healthy) for g in nodes[0].gpus] == [(0, True)] + [(1000, True)] * 3


# ------------------------------------------------------------------ blank FB_FREE, no Hostname
DCGM_BLANK = 9223372036854775794
"""DCGM's blank int64 (``DCGM_INT64_BLANK``, ``dcgm_structs.h`` of NVIDIA/DCGM): a field the GPU
cannot report; dcgm-exporter exports it as the sample's value."""


def _blank_fb_free(text: str) -> str:
    """``text`` with every ``DCGM_FI_DEV_FB_FREE`` sample at DCGM's blank value."""
    return "\n".join(
        ln.rsplit(" ", 1)[0] + f" {DCGM_BLANK}" if ln.startswith("DCGM_FI_DEV_FB_FREE{") else ln
        for ln in text.splitlines()
    )


@pytest.mark.parametrize("blank", [True, False], ids=["blank-fb-free", "no-fb-free"])
def test_doctor_and_service_agree_on_unknown_memory(
    blank: bool, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An exported FB_FREE at DCGM's blank value is a GPU that cannot report, not a counters CSV
    without FB_FREE: neither the service's log nor the doctor asks to add the field, and the idle
    GPUs have nothing free. Before: the doctor said "export DCGM_FI_DEV_FB_USED but not
    DCGM_FI_DEV_FB_FREE ... Add DCGM_FI_DEV_FB_FREE" for the blank one too, the log did not."""
    monkeypatch.setattr(prom_mod, "_WARNED_MEMORY", set(), raising=False)
    text = dcgm_text("Hostname", "gpu-a", GPUS)
    text = _blank_fb_free(text) if blank else _without(text, "DCGM_FI_DEV_FB_FREE")
    with caplog.at_level(logging.WARNING, logger=prom_mod.__name__):
        nodes = parse_dcgm(text, "prod", "gpu-a")
    logged = [r.getMessage() for r in caplog.records if "FB_FREE" in r.getMessage()]
    found = _unknown_memory(FleetSnapshot("prometheus", nodes, 0.0))
    (n,) = nodes
    assert [g.memory_unknown for g in n.gpus] == [not blank] * 4
    assert len(found) == len(logged) == (0 if blank else 1), (found, logged)
    assert [g.free_milli for g in n.gpus] == ([0] * 4 if blank else [0, 1000, 1000, 1000])


def test_blank_fb_free_with_fb_total_leaves_nothing_free() -> None:
    """A blank FB_FREE beside an exported FB_TOTAL: the framebuffer is not read, so nothing is free
    (docs/serving/cluster.md: a blank framebuffer leaves the GPU with nothing free). Before:
    ``(1000, 81559.0)``, the GPU fully free on a total alone."""
    lab = {"gpu": "0", "UUID": "GPU-x-0", "modelName": "NVIDIA H100 80GB HBM3", "Hostname": "x"}
    samples = [("DCGM_FI_DEV_FB_USED", lab, 500.0), ("DCGM_FI_DEV_FB_FREE", lab, float(DCGM_BLANK)),
               ("DCGM_FI_DEV_FB_TOTAL", lab, 81559.0), ("DCGM_FI_DEV_GPU_UTIL", lab, 0.0)]  # fmt: skip
    (n,) = build_nodes(samples, [], "prod")
    assert _states(n) == [(0, 0, None)]
    assert not n.gpus[0].memory_unknown


def _no_hostname(samples: list[Sample]) -> list[Sample]:
    """``samples`` as dcgm-exporter ``--no-hostname`` (``-n``) exports them: no ``Hostname``."""
    return [
        (name, {k: v for k, v in lab.items() if k != "Hostname"}, v) for name, lab, v in samples
    ]


def test_no_hostname_goes_to_the_exporter_pods_node_else_the_address() -> None:
    """dcgm-exporter ``-n``: the target's exporter pod's node where ``kube_pod_info`` places it,
    else (no such pod) the scrape target's address, as docs/serving/cluster.md says."""
    dcgm = _no_hostname(_host_network_dcgm())
    assert [n.name for n in build_nodes(dcgm, _eks_ksm(), "prod")] == [EKS_NODE]
    unplaced = [s for s in _eks_ksm() if s[0] != "kube_pod_info"]
    read = {n.name for n in build_nodes(dcgm, unplaced, "prod") for g in n.gpus if not g.missing}
    assert read == {"10.0.1.5"}  # the node's 4 GPUs stay placeholders: not read


@pytest.mark.external
def test_real_prometheus_no_hostname_doctor_says_so(
    prometheus_of: Callable[[str, str], str],
) -> None:
    """dcgm-exporter ``-n`` on node ``gpu-a``: the service places the GPUs on the exporter pod's
    node, and the doctor's layout check says the series carry no Hostname rather than calling a
    Hostname no node. Before: "'Hostname' is no node: an exporter pod's name ..." alone."""
    text = dcgm_text("Hostname", "gpu-a", GPUS).replace(',Hostname="gpu-a"', "")
    assert "Hostname" not in text
    url = prometheus_of(text, _ksm_text("gpu-a"))
    src = PrometheusApiSource(url, default_cluster="prod")
    try:
        assert [n.name for n in src.collect().nodes] == ["gpu-a"]
    finally:
        src.close()
    layout = [f.message for f in diagnose(url, timeout_s=5, cluster="prod") if f.check == "layout"]
    named = [m for m in layout if "kube_pod_info" in m and "GPU nodes named" in m]
    assert len(named) == 1, layout
    assert "4 series, 4 with no Hostname at all: dcgm-exporter -n)" in named[0], named
