"""dcgm-exporter scraped the way a real fleet scrapes it, by the real Prometheus (Debian's binary).

Two scrape styles (see ``serving/telemetry/prometheus.py``, "Scrape styles"):

* the chart's default, ``honorLabels: false`` (NVIDIA/dcgm-exporter ``deployment/values.yaml`` and
  ``deployment/templates/service-monitor.yaml``): Prometheus gives every series the exporter pod's
  own ``pod``/``namespace``/``container`` target labels (prometheus-operator's ServiceMonitor
  relabelling) and renames the workload's to ``exported_pod``/``exported_namespace``/...;
* ``honor_labels: true``: the workload keeps ``pod``; an idle GPU's series still gets the exporter's
  ``pod`` from the target.

The exposition texts follow dcgm-exporter's label layout (``gpu``, ``UUID``, ``device``,
``modelName``, ``Hostname``, or ``hostname`` in its newest code; ``pod``/``namespace``/``container``
of the Kubernetes mapping only on a GPU a pod holds; ``DCGM_EXP_XID_ERRORS_COUNT`` with an ``xid``
label, ``internal/pkg/collector/xid_collector.go``).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from k8s_helpers import (
    DCGM_CHART_SCRAPE,
    KSM,
    KSM_SCRAPE,
    ExporterServer,
    Prometheus,
    dcgm_text,
    exporter_target,
    prometheus_binary,
)

from fleetmind.serving.telemetry.prometheus import (
    HARDWARE_XIDS,
    PrometheusApiSource,
    build_nodes,
    is_hardware_xid,
    workload_pod,
)

# node gpu-a: 8 GPUs, a pod holds GPUs 0 and 1 (the reproduction: 6 free)
NODE_A = [{"pod": "ml/train-0", "used": 70000}, {"pod": "ml/train-0", "used": 70000}] + [{}] * 6
# node gpu-b: GPU 0 fell off the bus (XID 79), GPU 1's last XID is an application's (43)
NODE_B = [{"xid": 79}, {"xid": 43}]


@pytest.fixture(scope="module", params=[False, True], ids=["chart-default", "honor-labels"])
def scraped(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Any]:
    if prometheus_binary() is None:
        pytest.skip("Prometheus not installed (Debian package prometheus)")
    exporter = ExporterServer({
        "/dcgm-a": dcgm_text("Hostname", "gpu-a", NODE_A),
        "/dcgm-b": dcgm_text("hostname", "gpu-b", NODE_B),  # dcgm-exporter's newest label name
        "/ksm": KSM,
    })  # fmt: skip
    honor = {"honor_labels": True} if request.param else DCGM_CHART_SCRAPE
    prom = Prometheus(
        tmp_path_factory.mktemp("prom"),
        exporter,
        {"dcgm-a": "/dcgm-a", "dcgm-b": "/dcgm-b", "kube-state-metrics": "/ksm"},
        scrape={
            # an exporter pod name not shaped like the chart's: the DaemonSet kind tells
            "dcgm-a": {**honor, "labels": exporter_target("dcgm-exporter-a1b2c")},
            "dcgm-b": {**honor, "labels": exporter_target("nvidia-dcgm-exp-d3e4f")},
            "kube-state-metrics": KSM_SCRAPE,
        },
    )
    try:
        prom.wait_for('{__name__=~"DCGM_FI_DEV_FB_FREE|kube_pod_info"}', 10 + 3)
        yield request.param, prom, exporter
    finally:
        prom.stop()
        exporter.close()


def _nodes(url: str) -> dict[str, Any]:
    src = PrometheusApiSource(url, default_cluster="prod")
    try:
        return {n.name: n for n in src.collect().nodes}
    finally:
        src.close()


@pytest.mark.external
def test_the_scrape_style_is_what_the_test_claims(scraped: Any) -> None:
    honor, prom, _ = scraped
    held = 'DCGM_FI_DEV_FB_USED{gpu="0",Hostname="gpu-a"}'
    assert prom.count(held) == 1
    if honor:
        assert prom.count(held.replace("}", ',pod="train-0"}')) == 1
    else:  # the chart's default: the workload moved to exported_pod, pod is the exporter's
        assert (
            prom.count(held.replace("}", ',exported_pod="train-0",pod="dcgm-exporter-a1b2c"}')) == 1
        )
    idle = 'DCGM_FI_DEV_FB_USED{gpu="5",Hostname="gpu-a",pod="dcgm-exporter-a1b2c"}'
    assert prom.count(idle) == 1  # in both styles an idle GPU carries the exporter's own pod


@pytest.mark.external
def test_free_gpus_are_counted_right_in_both_scrape_styles(scraped: Any) -> None:
    _, prom, _ = scraped
    a = _nodes(prom.url)["gpu-a"]
    assert [g.free_milli for g in a.gpus] == [0, 0] + [1000] * 6
    assert a.cpu_milli == 96_000 and "ml/train-0" in a.pods


@pytest.mark.external
def test_a_six_gpu_pod_passes_the_extender_filter(scraped: Any, tmp_path: Any) -> None:
    """The reproduction: a 6-GPU pod on a node with 2 of 8 GPUs in use was refused with
    "0 GPU(s) ... free"; a 7-GPU pod is still refused, for the GPUs DCGM shows in use (the
    reason is one fixed phrase per cause, so that kube-scheduler can count it across nodes)."""
    from fastapi.testclient import TestClient

    from fleetmind.serving.app import create_app
    from fleetmind.serving.settings import Settings

    _, prom, _ = scraped
    settings = Settings(
        database_url=f"sqlite:///{tmp_path}/ext.db",
        telemetry="prometheus",
        prometheus_url=prom.url,
        telemetry_ttl_s=0.0,
        rca_model="baseline:upstream-coverage",
        placement_model="heuristic:builtin-bestfit",
        incident_worker=False,
    )

    def args(n: int) -> dict[str, Any]:
        limits = {"nvidia.com/gpu": str(n)}
        pod = {"metadata": {"name": f"train-{n}", "namespace": "ml"},
               "spec": {"containers": [{"name": "main", "resources": {"limits": limits}}]}}  # fmt: skip
        return {"Pod": pod, "NodeNames": ["gpu-a", "gpu-b"]}

    with TestClient(create_app(settings)) as client:
        # the 7-GPU pod first: filter holds the lone node a pod passes (kube-scheduler skips
        # prioritize then), so after the 6-GPU pod gpu-a would show its GPUs held
        out = client.post("/api/v1/scheduler/filter", json=args(7)).json()
        assert out["NodeNames"] == [], out
        assert out["FailedNodes"]["gpu-a"] == "FleetMind: not enough free GPUs (in use per DCGM)"
        out = client.post("/api/v1/scheduler/filter", json=args(6)).json()
        assert out["NodeNames"] == ["gpu-a"], out


@pytest.mark.external
def test_a_hardware_xid_takes_exactly_its_gpu_out(scraped: Any) -> None:
    _, prom, _ = scraped
    b = _nodes(prom.url)["gpu-b"]  # found through the lower-case 'hostname' label
    assert [(g.index, g.healthy, g.xid_errors) for g in b.gpus] == [
        (0, False, 79.0),
        (1, True, 43.0),
    ]
    assert [g.free_milli for g in b.gpus] == [0, 1000]


@pytest.mark.external
def test_the_windowed_xid_count_is_preferred_and_clears(scraped: Any) -> None:
    _, prom, exporter = scraped
    try:
        # the window still holds XID 79 on GPU 0 and an application XID on GPU 1
        exporter.texts["/dcgm-b"] = dcgm_text("hostname", "gpu-b", NODE_B, [(0, 79, 2), (1, 43, 5)])
        prom.wait_for('DCGM_EXP_XID_ERRORS_COUNT{xid="79"} > 0', 1)
        assert [g.healthy for g in _nodes(prom.url)["gpu-b"].gpus] == [False, True]
        # the GPU was reset: the window is empty again, the last-XID gauge still says 79
        exporter.texts["/dcgm-b"] = dcgm_text("hostname", "gpu-b", NODE_B, [(0, 79, 0), (1, 43, 0)])
        prom.wait_for('DCGM_EXP_XID_ERRORS_COUNT{xid="79"} == 0', 1)
        assert [g.healthy for g in _nodes(prom.url)["gpu-b"].gpus] == [True, True]
    finally:
        exporter.texts["/dcgm-b"] = dcgm_text("hostname", "gpu-b", NODE_B)
        prom.wait_for("DCGM_EXP_XID_ERRORS_COUNT", 0)


def test_hardware_and_application_xids() -> None:
    for xid in (48, 63, 64, 74, 79, 92, 94, 95):
        assert xid in HARDWARE_XIDS and is_hardware_xid(float(xid))
    for xid in (0, 13, 31, 43, 45, 68, 109):
        assert not is_hardware_xid(float(xid))
    assert not is_hardware_xid(None) and not is_hardware_xid(float("nan"))


def test_the_exporter_own_pod_is_never_a_workload() -> None:
    assert workload_pod({"pod": "dcgm-exporter-x7k2p", "namespace": "gpu-operator"}) == ""
    assert workload_pod({"pod": "exp-1", "namespace": "m"}, {"exp-1"}) == ""
    assert (
        workload_pod({"pod": "exp-1", "exported_pod": "job", "exported_namespace": "ml"})
        == "ml/job"
    )
    assert workload_pod({"pod": "job", "namespace": "ml"}) == "ml/job"
    # a relabelled 'node' label names the node whatever Hostname says
    lab = {
        "node": "gpu-z",
        "Hostname": "dcgm-exporter-x7k2p",
        "gpu": "0",
        "pod": "dcgm-exporter-x7k2p",
    }
    (node,) = build_nodes(
        [("DCGM_FI_DEV_FB_USED", lab, 0.0), ("DCGM_FI_DEV_FB_FREE", lab, 80000.0)], []
    )
    assert node.name == "gpu-z" and node.gpus[0].free_milli == 1000


@pytest.mark.external
def test_kube_state_metrics_scraped_twice_counts_requests_once(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """Two kube-state-metrics targets at once (a rolling update, two replicas for availability,
    two scrape jobs) give every request series twice: summed as they came, a node's free CPU and
    memory fell by the requests again and the extender turned pods away from nodes with room.
    Requests are now deduplicated per container before the sum, as the kubernetes-mixin
    recording rules do (``max by (namespace, pod, container)``)."""
    if prometheus_binary() is None:
        pytest.skip("Prometheus not installed (Debian package prometheus)")
    cpu_cores, request_cores = 96, 8
    ksm = KSM + (
        "# HELP kube_pod_container_resource_requests requests\n"
        "# TYPE kube_pod_container_resource_requests gauge\n"
        'kube_pod_container_resource_requests{namespace="ml",pod="train-0",container="main",'
        f'node="gpu-a",resource="cpu",unit="core"}} {request_cores}\n'
    )
    assert f'node="gpu-a",resource="cpu",unit="core"}} {cpu_cores}' in ksm
    exporter = ExporterServer({"/dcgm-a": dcgm_text("Hostname", "gpu-a", NODE_A), "/ksm": ksm})
    prom = Prometheus(
        tmp_path_factory.mktemp("prom2"),
        exporter,
        {"dcgm-a": "/dcgm-a", "kube-state-metrics": "/ksm", "kube-state-metrics-new": "/ksm"},
        scrape={
            "dcgm-a": {"honor_labels": True},
            "kube-state-metrics": KSM_SCRAPE,
            "kube-state-metrics-new": KSM_SCRAPE,
        },
    )
    try:
        prom.wait_for("kube_pod_container_resource_requests", 2)  # both targets scraped
        prom.wait_for("DCGM_FI_DEV_FB_FREE", len(NODE_A))
        node = _nodes(prom.url)["gpu-a"]
        assert node.cpu_milli == cpu_cores * 1000
        assert node.cpu_milli_free == (cpu_cores - request_cores) * 1000
    finally:
        prom.stop()
        exporter.close()
