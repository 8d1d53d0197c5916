"""Cluster health and fleet skew on recorded telemetry (exporter texts and Prometheus answers):
the figures by hand, the weights' online adaptation, the service's /fleet, /metrics and the
multi-cluster placement that avoids an unhealthy cluster."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families

from fleetmind.serving.app import create_app
from fleetmind.serving.health import INITIAL_WEIGHTS, HealthModel, fleet_health, latency_queries
from fleetmind.serving.settings import Settings
from fleetmind.serving.telemetry.base import FleetSnapshot, GpuState, NodeState
from fleetmind.serving.telemetry.prometheus import build_nodes
from fleetmind.serving.telemetry.sim import SimSource

DATA = Path(__file__).parent / "data" / "k8s"
WHERE = {"node-a": "east", "node-m": "west", "node-c": "west", "cpu-only-1": "east"}


def _samples(name: str) -> list:
    text = (DATA / name).read_text()
    return [
        (s.name, s.labels, float(s.value))
        for f in text_string_to_metric_families(text)
        for s in f.samples
    ]


def recorded_snapshot() -> FleetSnapshot:
    dcgm = (
        _samples("dcgm_node_a.prom")
        + _samples("dcgm_node_m_mig.prom")
        + _samples("dcgm_node_c_podname.prom")
    )
    ksm = _samples("ksm.prom")
    nodes = build_nodes(dcgm, ksm)
    for n in nodes:
        n.cluster = WHERE[n.name]
    return FleetSnapshot("prometheus", nodes, 1764583200.0)


def recorded_query(promql: str) -> list:
    answers = json.loads((DATA / "latency_queries.json").read_text())
    name = next(
        k for k, q in latency_queries("http_server_request_duration_seconds").items() if q == promql
    )
    return [(name, r["metric"], float(r["value"][1])) for r in answers[name]["data"]["result"]]


def test_health_and_skew_by_hand() -> None:
    model = HealthModel(latency_slo_s=1.0)
    out = fleet_health(model, recorded_snapshot(), recorded_query).by_cluster()
    east, west = out["east"], out["west"]
    # east = node-a: utilisation 0, 97, (XID: counts 100), 12; framebuffer used/total
    assert east.gpu_util == pytest.approx((0 + 97 + 100 + 12) / 4 / 100)
    used_a = 1 + 70000 + 81050 + 40525  # the XID GPU counts as full
    total_a = 81050 + 81050 + 81050 + 81050
    assert east.vram_pressure == pytest.approx(used_a / total_a)
    # west = node-m (MIG: 0, 62.5, 0 % from GR engine) + node-c (T4s: 0, 35 %)
    assert west.gpu_util == pytest.approx((0 + 62.5 + 0 + 0 + 35) / 5 / 100)
    assert west.vram_pressure == pytest.approx(
        (12 + 20000 + 3 + 0 + 6000) / (40192 + 40192 + 81003 + 15109 + 15109)
    )
    assert (east.p99_latency_s, west.p99_latency_s) == (0.42, 1.8)
    w = dict(zip(("u", "v", "l"), INITIAL_WEIGHTS, strict=True))
    assert east.health == pytest.approx(
        1 - (w["u"] * east.gpu_util + w["v"] * east.vram_pressure + w["l"] * 0.42)
    )
    assert west.health == pytest.approx(
        1 - (w["u"] * west.gpu_util + w["v"] * west.vram_pressure + w["l"] * 1.0)
    )
    # CPU use: requested / allocatable (the Succeeded pod does not count; cpu-only-1 has none)
    assert east.cpu_use == pytest.approx(24_000 / (96_000 + 16_000))
    assert west.cpu_use == pytest.approx(4_600 / (63_500 + 32_000))

    def cv(a: float, b: float) -> float:
        m = (a + b) / 2
        return math.sqrt(((a - m) ** 2 + (b - m) ** 2) / 2) / m

    expect = (cv(120.5, 40.25) + cv(0.21, 0.63) + cv(east.cpu_use, west.cpu_use)) / 3
    assert model.last is not None and model.last.skew == pytest.approx(expect)


def test_weights_start_as_documented_and_follow_the_load() -> None:
    model = HealthModel()
    assert list(model.weights().values()) == pytest.approx(list(INITIAL_WEIGHTS))
    gpu_bound = FleetSnapshot("sim", [NodeState("n", "c", [GpuState(0, "A100", util_pct=95.0,
                              mem_used_mib=10.0, mem_total_mib=100.0)])])  # fmt: skip
    for _ in range(30):
        h = fleet_health(model, gpu_bound)
    w = model.weights()
    assert w["gpu_util"] > INITIAL_WEIGHTS[0] and w["vram_pressure"] < INITIAL_WEIGHTS[1]
    assert sum(w.values()) == pytest.approx(1.0)
    # without latency the health uses the other two signals, renormalised
    (c,) = h.clusters
    hw = h.weights
    share = hw["gpu_util"] + hw["vram_pressure"]
    assert c.health == pytest.approx(
        1 - (hw["gpu_util"] * 0.95 + hw["vram_pressure"] * 0.1) / share
    )
    assert h.skew == 0.0  # one cluster: nothing to compare


def _fleet(loaded: str) -> list[NodeState]:
    nodes = []
    for cl in ("c0", "c1"):
        busy = cl == loaded
        gpus = [GpuState(i, "A100", util_pct=99.0 if busy else 5.0, mem_total_mib=80_000.0,
                         mem_used_mib=78_000.0 if busy else 1_000.0, free_milli=1000 if i == 0 else 0)
                for i in range(2)]  # fmt: skip
        nodes.append(NodeState(f"{cl}-h0", cl, gpus, 64_000, 64_000, 512_000, 512_000))
    return nodes


def test_service_reports_health_and_placement_avoids_an_unhealthy_cluster(tmp_path: Path) -> None:
    settings = Settings(
        database_url=f"sqlite:///{tmp_path}/h.db",
        rca_model="baseline:upstream-coverage",
        placement_model="heuristic:builtin-bestfit",
        incident_worker=False,
    )
    with TestClient(create_app(settings)) as c:
        s = c.app.state.services
        for loaded in ("c0", "c1"):
            s.telemetry = SimSource(_fleet(loaded))
            fleet = c.get("/api/v1/fleet").json()
            health = {x["cluster"]: x["health"] for x in fleet["clusters"]}
            assert health[loaded] < 0.2 < health[({"c0", "c1"} - {loaded}).pop()]
            assert set(fleet["health_weights"]) == {"gpu_util", "vram_pressure", "latency"}
            r = c.post("/api/v1/placements", json={"num_gpu": 1})
            assert r.status_code == 200 and r.json()["cluster"] != loaded
        # the unhealthy cluster still takes a job that fits nowhere else
        r = c.post("/api/v1/placements", json={"num_gpu": 1, "reserve": True})
        assert r.json()["cluster"] == "c0"
        r = c.post("/api/v1/placements", json={"num_gpu": 1})
        assert r.status_code == 200 and r.json()["cluster"] == "c1"
        metrics = c.get("/metrics").text
        assert (
            'fleetmind_cluster_health{cluster="c1"}' in metrics
            and "fleetmind_fleet_skew" in metrics
        )
