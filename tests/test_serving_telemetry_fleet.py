"""Fleet-wide telemetry: the real Prometheus (Debian's binary) scrapes recorded dcgm-exporter and
kube-state-metrics texts of a small fleet (MIG, an exporter reporting its pod name as Hostname, a
CPU-only node), and the ``prometheus`` source reads every node through ``/api/v1/query``."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from k8s_helpers import ExporterServer, Prometheus, prometheus_binary

from fleetmind.data.errors import NotAvailableError
from fleetmind.serving.app import create_app
from fleetmind.serving.settings import Settings
from fleetmind.serving.telemetry.base import make_source
from fleetmind.serving.telemetry.prometheus import (
    FLEET_QUERIES,
    KSM_FLEET_QUERY,
    PrometheusApiSource,
    PrometheusSource,
    build_nodes,
    is_exporter_url,
)

DATA = Path(__file__).parent / "data" / "k8s"
TEXTS = {
    "/dcgm-a": "dcgm_node_a.prom",
    "/dcgm-m": "dcgm_node_m_mig.prom",
    "/dcgm-c": "dcgm_node_c_podname.prom",
    "/ksm": "ksm.prom",
}
MIB = 2**20


@pytest.fixture(scope="module")
def prom(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    if prometheus_binary() is None:
        pytest.skip("Prometheus not installed (Debian package prometheus)")
    exporter = ExporterServer({p: (DATA / f).read_text() for p, f in TEXTS.items()})
    p = Prometheus(
        tmp_path_factory.mktemp("prom"),
        exporter,
        {
            "dcgm-a": "/dcgm-a",
            "dcgm-m": "/dcgm-m",
            "dcgm-c": "/dcgm-c",
            "kube-state-metrics": "/ksm",
        },
    )
    try:
        p.wait_for('{__name__=~"DCGM_FI_DEV_FB_USED|kube_pod_info"}', 9 + 4)
        yield p.url
    finally:
        p.stop()
        exporter.close()


@pytest.mark.external
def test_every_node_of_the_fleet_from_prometheus(prom: str) -> None:
    src = PrometheusApiSource(prom, default_cluster="prod")
    snap = src.collect()
    nodes = {n.name: n for n in snap.nodes}
    assert set(nodes) == {"node-a", "node-m", "node-c", "cpu-only-1"}
    assert {n.cluster for n in snap.nodes} == {"prod"}

    a = nodes["node-a"]
    assert [g.free_milli for g in a.gpus] == [1000, 0, 0, 500]  # idle, pod-held, XID 79, half used
    assert not a.gpus[2].healthy and a.gpus[2].xid_errors == 79
    assert a.gpus[1].util_pct == 97 and a.gpus[0].model == "NVIDIA A100-SXM4-80GB"
    assert (a.cpu_milli, a.cpu_milli_free) == (96_000, 96_000 - 24_000)
    assert (a.memory_mib, a.memory_mib_free) == (
        811748818944 // MIB,
        (811748818944 - 128 * 2**30) // MIB,
    )
    assert a.pods == {"ml/llama-train-0"}

    m = nodes["node-m"]  # MIG instances told apart by GPU_I_ID
    assert [g.index for g in m.gpus] == [101, 102, 200]
    assert [g.mig_parent for g in m.gpus] == [0, 0, 1]
    assert m.gpus[0].model == "NVIDIA H100 80GB HBM3 MIG 3g.40gb"
    assert m.gpus[2].model.endswith("MIG 7g.80gb")
    assert [g.util_pct for g in m.gpus] == [0.0, 62.5, 0.0]  # GR engine active x 100
    assert [g.free_milli for g in m.gpus] == [1000, int(1000 * 20192 / 40192), 1000]
    assert m.cpu_milli == 63_500

    c = nodes["node-c"]  # Hostname was the exporter pod's name: kube_pod_info gives the node
    assert "dcgm-exporter-x7k2p" not in nodes
    assert [g.model for g in c.gpus] == ["Tesla T4", "Tesla T4"]
    assert [g.free_milli for g in c.gpus] == [1000, 600]  # 400 milli held by a sharing pod
    assert c.cpu_milli_free == 32_000 - 4_500 - 100  # the Succeeded pod's request does not count
    assert c.pods == {"ml/bert-infer-1", "gpu-operator/dcgm-exporter-x7k2p"}

    cpu = nodes["cpu-only-1"]
    assert cpu.gpus == [] and cpu.cpu_milli == 16_000
    src.close()


@pytest.mark.external
def test_the_joined_kube_state_metrics_query_answers_as_its_parts(prom: str) -> None:
    """The kube-state-metrics series are read in one query (one query sees whole scrapes: TSDB
    isolation, prometheus/prometheus#6841); its tagged answer must equal the four queries'."""
    src = PrometheusApiSource(prom)
    joined = src.query(KSM_FLEET_QUERY)
    names = (
        "kube_node_status_allocatable",
        "node_requests",
        "pod_gpu_requests",
        "kube_pod_info",
        "kube_pod_annotations",
        "phase_running",
        "node_gpus",
    )  # node_gpu_replicas: no time-sliced node in the fixture; pod_phase: no pod not yet running
    parts = [x for n in names for x in src.query(FLEET_QUERIES[n], n)]
    src.close()

    def key(samples: list) -> list:
        return sorted((n, sorted(lab.items()), v) for n, lab, v in samples)

    assert {n for n, _, _ in parts} == set(names)  # every part has an answer in the fixture
    assert key(joined) == key(parts)


@pytest.mark.external
def test_the_service_places_on_the_scraped_fleet(prom: str, tmp_path: Path) -> None:
    settings = Settings(
        database_url=f"sqlite:///{tmp_path}/t.db",
        telemetry="prometheus",
        prometheus_url=prom,
        telemetry_cluster="prod",
        rca_model="baseline:upstream-coverage",
        placement_model="heuristic:builtin-bestfit",
        incident_worker=False,
    )
    with TestClient(create_app(settings)) as client:
        assert isinstance(client.app.state.services.telemetry, PrometheusApiSource)
        fleet = client.get("/api/v1/fleet").json()
        assert fleet["num_nodes"] == 4 and fleet["num_gpus"] == 4 + 3 + 2
        pod = {
            "metadata": {
                "name": "t4-share",
                "namespace": "ml",
                "annotations": {
                    "alibabacloud.com/gpu-milli": "500",
                    "alibabacloud.com/gpu-card-model": "T4",
                },
            },
            "spec": {"containers": [{"resources": {"requests": {"cpu": "2", "memory": "1Gi"}}}]},
        }
        out = client.post(
            "/api/v1/scheduler/filter",
            json={"Pod": pod, "NodeNames": ["node-a", "node-m", "node-c", "cpu-only-1"]},
        ).json()
        assert out["NodeNames"] == ["node-c"]
        assert set(out["FailedAndUnresolvableNodes"]) == {"node-a", "node-m", "cpu-only-1"}


def test_prometheus_down_is_a_clear_503_reason() -> None:
    src = PrometheusApiSource("http://127.0.0.1:9", timeout_s=0.5)
    with pytest.raises(NotAvailableError, match="cannot query Prometheus"):
        src.collect()


def test_mode_follows_the_url() -> None:
    assert is_exporter_url("http://10.0.0.1:9400/metrics")
    assert not is_exporter_url("http://prometheus.monitoring:9090")
    base = {"telemetry": "prometheus", "database_url": "sqlite://"}
    assert isinstance(
        make_source(Settings(**base, prometheus_url="http://h:9400/metrics")), PrometheusSource
    )
    assert isinstance(
        make_source(Settings(**base, prometheus_url="http://h:9090/")), PrometheusApiSource
    )


def test_node_label_wins_and_an_unresolved_exporter_pod_name_is_not_a_node() -> None:
    lab = {
        "gpu": "0",
        "modelName": "A10",
        "Hostname": "dcgm-exporter-ab12c",
        "instance": "10.1.2.3:9400",
    }
    fb = [("DCGM_FI_DEV_FB_USED", lab, 0.0), ("DCGM_FI_DEV_FB_FREE", lab, 100.0)]
    (n,) = build_nodes(fb, [])
    assert n.name == "10.1.2.3"  # no kube_pod_info to resolve it: the scrape address, not the pod
    relabelled = [(name, {**la, "node": "gpu-7"}, v) for name, la, v in fb]
    (n,) = build_nodes(relabelled, [])
    assert n.name == "gpu-7" and n.gpus[0].free_milli == 1000


@pytest.mark.parametrize(
    "body",
    [
        {"status": "success", "data": "x"},
        {"status": "success", "data": {"resultType": "vector", "result": "abc"}},
        {"status": "success", "data": {"resultType": "vector", "result": [1]}},
        {"status": "success", "data": {"resultType": "vector", "result": [{"metric": "x"}]}},
        {"status": "success", "data": {"resultType": "vector", "result": [{"metric": {"a": 1}}]}},
    ],
)
def test_an_answer_of_the_wrong_shape_is_unavailable_not_a_crash(body: dict) -> None:
    """Well-formed JSON that is not an instant-query answer (a proxy's own JSON, an older API)
    is Prometheus being unusable, a 503, never an AttributeError (the API's shape:
    prometheus.io/docs/prometheus/latest/querying/api/#instant-queries)."""
    import httpx

    src = PrometheusApiSource("http://prom.test:9090")
    src._client = httpx.Client(
        transport=httpx.MockTransport(lambda r: httpx.Response(200, json=body))
    )
    try:
        got = src.query("up")
    except NotAvailableError as err:
        assert "prom.test:9090" in str(err)
    else:
        assert got == []  # no sample of a vector in it
    finally:
        src.close()
