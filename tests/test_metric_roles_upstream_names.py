"""Metric names as AWS CloudWatch and Prometheus exporters write them get the role the docs table says.

Before, ``HTTPCode_Target_5XX_Count`` was traffic (``5XX`` split into ``5`` and ``xx``),
``5XXError``/``4XXError``/``CPUUtilization`` other, every ``*_cpu_*_seconds_total`` a latency (the
unit word ``seconds`` matched before ``cpu``), ``http_request_duration_seconds_count`` a latency (it
counts requests), ``error_budget_remaining`` an error that alerts when it rises, and
``node_memory_MemAvailable_bytes`` a success rate. The released systems' metric names keep their
roles and directions exactly (the last tests), so their figures do not move.

Sources of the names: AWS ALB metrics (``HTTPCode_Target_5XX_Count``, ``TargetResponseTime``,
``RequestCount``: https://docs.aws.amazon.com/elasticloadbalancing/latest/application/load-balancer-cloudwatch-metrics.html),
API Gateway (``4XXError``, ``5XXError``, ``Latency``: https://docs.aws.amazon.com/apigateway/latest/developerguide/api-gateway-metrics-and-dimensions.html),
EC2 (``CPUUtilization``: https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/viewing_metrics_with_cloudwatch.html),
node_exporter (``node_memory_MemAvailable_bytes``, ``node_filesystem_avail_bytes``), cAdvisor
(``container_cpu_usage_seconds_total``, ``container_cpu_cfs_throttled_seconds_total``), the Prometheus
client libraries' process collector (``process_cpu_seconds_total``, ``process_start_time_seconds``)
and histograms' ``_count`` series (https://prometheus.io/docs/concepts/metric_types/#histogram).
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from fleetmind.data.graph import DependencyGraph, GraphNode
from fleetmind.data.metric_roles import RoleMap, metric_direction, metric_role, words
from fleetmind.data.petshop import DetectorConfig
from fleetmind.data.synth_incidents import SystemModel

SLICE = Path(__file__).parent / "data" / "petshop_slice"


@pytest.mark.parametrize(
    ("name", "role", "direction"),
    [
        ("HTTPCode_Target_5XX_Count", "errors", "up"),
        ("HTTPCode_ELB_4XX_Count", "errors", "up"),
        ("5XXError", "errors", "up"),
        ("4XXError", "errors", "up"),
        ("HTTP_5XX", "errors", "up"),
        ("CPUUtilization", "saturation", "up"),
        ("TargetResponseTime", "latency", "up"),
        ("RequestCount", "traffic", "both"),
        ("error_budget_remaining", "success", "down"),
        ("node_memory_MemAvailable_bytes", "saturation", "down"),
        ("node_filesystem_avail_bytes", "saturation", "down"),
        ("container_cpu_usage_seconds_total", "saturation", "up"),
        ("container_cpu_cfs_throttled_seconds_total", "saturation", "up"),
        ("process_cpu_seconds_total", "saturation", "up"),
        ("cpu_throttled_seconds", "saturation", "up"),
        ("http_request_duration_seconds_count", "traffic", "both"),
        ("http_request_duration_seconds_sum", "latency", "up"),
        ("process_start_time_seconds", "other", "both"),
        ("request_time", "latency", "up"),
    ],
)
def test_upstream_names(name: str, role: str, direction: str) -> None:
    assert (metric_role(name), metric_direction(name)) == (role, direction)


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("HTTPCode_Target_5XX_Count", ["http", "code", "target", "5xx", "count"]),
        ("5XXError", ["5xx", "error"]),
        ("CPUUtilization", ["cpu", "utilization"]),
        ("MemAvailable", ["mem", "available"]),
        ("p90LatencyMs", ["p90", "latency", "ms"]),
        ("S3Requests", ["s3", "requests"]),
    ],
)
def test_camel_case_words(name: str, expected: list[str]) -> None:
    assert words(name) == expected


def test_an_override_still_decides_alone() -> None:
    roles = RoleMap({"node_memory_MemAvailable_bytes": "memory", "free_slots": "latency"})
    assert roles.direction("node_memory_MemAvailable_bytes") == "up"
    assert roles.direction("free_slots") == "up"
    assert RoleMap().direction("node_memory_MemAvailable_bytes") == "down"


def test_synthesised_saturation_lowers_a_headroom_metric() -> None:
    """A saturation fault raises ``cpu_usage`` and lowers ``MemAvailable`` (its symptom is a drop,
    so a rise would never alert)."""
    cols = pd.MultiIndex.from_tuples(
        [("a", m, "Average") for m in ("cpu_usage", "node_memory_MemAvailable_bytes")]
    )
    rng = np.random.default_rng(0)
    normal = pd.DataFrame(
        [[50.0, 4000.0]] * 40 + rng.normal(0, 1, (40, 2)),
        index=1.7e9 + 60.0 * np.arange(40),
        columns=cols,
    )
    graph = DependencyGraph(
        "g", [GraphNode(id="a", kind="service", cluster=None, match={"service": "a"})], []
    )
    model = SystemModel(graph, normal)
    x = model.values[:6].copy()
    before = x.copy()
    model._inject(rng, x, {(0, "saturation"): ("sat", 1.0)}, {0: 2}, skip=None)
    assert (x[3:, 0] > before[3:, 0] + 40).all()  # cpu up by about its level
    assert (x[3:, 1] < 0.6 * before[3:, 1]).all()  # available memory halved
    assert (x[:2] == before[:2]).all()


# ---------------------------------------------------------------------------- released systems
RELEASED = {
    # metric: (metric_role, metric_direction, DetectorConfig direction, alertname, is_count),
    # as recorded before the vocabulary changed
    "availability": ("success", "down", "down", "HighErrorRate", False),
    "cpu": ("saturation", "up", "up", "HighCPU", False),
    "latency": ("latency", "up", "up", "HighLatency", False),
    "memory": ("saturation", "up", "up", "HighMemory", False),
    "requests": ("traffic", "both", "both", "TrafficAnomaly", True),
}


def _metric_names(folder: Path) -> set[str]:
    names: set[str] = set()
    for path in folder.rglob("metrics.csv"):
        with path.open() as f:
            f.readline()
            names |= {c.strip() for c in f.readline().rstrip("\n").split(",")[1:]}
    return names


def _check(names: set[str]) -> None:
    cfg = DetectorConfig()
    assert names and names <= set(RELEASED), sorted(names - set(RELEASED))
    for n in sorted(names):
        got = (metric_role(n), metric_direction(n), cfg.direction(n), cfg.alertname(n))
        assert (*got, cfg.is_count(n)) == RELEASED[n], n


def test_roles_of_the_test_slice_are_unchanged() -> None:
    _check(_metric_names(SLICE))


def test_roles_of_the_shared_systems_are_unchanged(shared_data: os.PathLike[str]) -> None:
    """Every metric name of PetShop (every scenario present) and Train Ticket (``nezha_tt``)."""
    root = Path(shared_data)
    folders = [p for p in (root / "petshop", root / "nezha_tt") if p.is_dir()]
    if not folders:
        pytest.skip(f"no petshop/ or nezha_tt/ under {root}")
    _check(set().union(*(_metric_names(p) for p in folders)))
