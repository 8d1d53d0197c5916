"""Roles and symptom directions of metric names real exporters write.

Names from the exporters' own documentation: AWS CloudWatch (ALB ``UnHealthyHostCount``, RDS
``FreeableMemory``, EC2 ``CPUCreditBalance``), OpenTelemetry HTTP/RPC semantic conventions
(``http.server.response.body.size``, ``rpc.server.response.size``), Istio standard metrics
(``istio_response_bytes``, ``istio_request_duration_milliseconds``), Prometheus node_exporter
(``node_load1``), go-grpc-prometheus (``grpc_server_handled_total``) and Envoy cluster statistics
(``upstream_rq_total``). Before the negation, headroom, size and trailing-digit rules, the first two
groups read with the opposite direction (a rise of unhealthy hosts read as a success metric whose
drop is the symptom), so the detector never alerted on the fault.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from fleetmind.data.metric_roles import (
    metric_direction,
    metric_role,
    model_role,
    roles_line,
    words,
)
from fleetmind.data.petshop import DetectorConfig, detect_window, fit_baseline


@pytest.mark.parametrize(
    ("name", "role", "direction"),
    [
        ("UnHealthyHostCount", "errors", "up"),
        ("non_2xx_responses", "errors", "up"),
        ("not_ok", "errors", "up"),
        ("unhealthy_targets", "errors", "up"),
        ("HealthyHostCount", "success", "down"),
        ("FreeableMemory", "saturation", "down"),
        ("CPUCreditBalance", "saturation", "down"),
        ("BurstBalance", "other", "down"),
        ("http_server_response_body_size", "traffic", "both"),
        ("istio_response_bytes_sum", "traffic", "both"),
        ("rpc_server_response_size", "traffic", "both"),
        ("node_load1", "saturation", "up"),
        ("node_load5", "saturation", "up"),
        ("grpc_server_handled_total", "traffic", "both"),
        ("envoy_cluster_upstream_rq_total", "traffic", "both"),
    ],
)
def test_exporter_names_get_the_symptom_direction(name: str, role: str, direction: str) -> None:
    assert (metric_role(name), metric_direction(name)) == (role, direction)


@pytest.mark.parametrize(
    ("name", "role"),
    [
        # latency names keep their role: a size word does not override a proper latency word
        ("TargetResponseTime", "latency"),
        ("http_response_time_ms", "latency"),
        ("istio_request_duration_milliseconds", "latency"),
        ("http_server_request_duration_seconds_bucket", "latency"),
        ("envoy_cluster_upstream_rq_time", "latency"),
        ("envoy_cluster_upstream_rq_5xx", "errors"),
        ("ReadLatency", "latency"),
        ("p90", "latency"),
        ("http_5xx", "errors"),
        ("ok_ratio", "success"),
        ("up", "success"),
        ("request_size_bytes", "traffic"),
        # the development systems' names (PetShop, Train Ticket)
        ("availability", "success"),
        ("latency", "latency"),
        ("requests", "traffic"),
        ("cpu", "saturation"),
        ("memory", "saturation"),
    ],
)
def test_names_that_were_right_stay_right(name: str, role: str) -> None:
    assert metric_role(name) == role


def test_words_drop_trailing_digits_but_keep_percentiles_and_status_classes() -> None:
    assert words("node_load15") == ["node", "load"]
    assert words("cpu0_usage") == ["cpu", "usage"]
    assert words("latency_p90") == ["latency", "p90"]
    assert words("p999") == ["p999"]
    assert words("HTTPCode_Target_5XX_Count") == ["http", "code", "target", "5xx", "count"]
    assert words("http_2xx") == ["http", "2xx"]


def test_model_role_folds_negated_success_into_errors() -> None:
    assert model_role("UnHealthyHostCount") == "errors"


def _frames(
    metric: str, level: float, factor: float, seed: int = 0
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """A 60-row normal period and an 8-row window of one column ``("db", metric, "Average")``
    around ``level`` (5 % noise); the window is multiplied by ``factor`` from row 3 on."""
    rng = np.random.default_rng(seed)
    cols = pd.MultiIndex.from_tuples([("db", metric, "Average")])
    normal = pd.DataFrame(
        level * (1 + 0.05 * rng.standard_normal((60, 1))),
        index=pd.Index(1.7e9 + 60.0 * np.arange(60), name="time"),
        columns=cols,
    )
    w = level * (1 + 0.05 * rng.standard_normal((8, 1)))
    w[3:] *= factor
    window = pd.DataFrame(
        w, index=pd.Index(1.71e9 + 60.0 * np.arange(8), name="time"), columns=cols
    )
    return normal, window


@pytest.mark.parametrize(
    ("metric", "factor"),
    [("UnHealthyHostCount", 5.0), ("non_2xx_responses", 5.0), ("FreeableMemory", 0.1)],
)
def test_detector_alerts_on_the_fault_of_an_exporter_metric(metric: str, factor: float) -> None:
    cfg = DetectorConfig()
    normal, window = _frames(metric, 100.0, factor)
    alerts, unscored, _ = detect_window(window, fit_baseline(normal, cfg), cfg)
    assert unscored == []
    assert [a["labels"]["metric"] for a in alerts] == [metric]


def test_roles_line_marks_overrides() -> None:
    roles = {
        "latency": {"role": "latency", "source": "name"},
        "ok_ratio": {"role": "success", "source": "override"},
    }
    assert roles_line("shop", roles) == (
        "shop: metric roles latency=latency, ok_ratio=success*  (* = role map override)"
    )


def test_load_balancing_and_response_time_names_keep_their_roles() -> None:
    """``balance`` after ``load`` is load balancing, not headroom; ``time`` keeps a response name
    a latency even with a size word."""
    from fleetmind.data.metric_roles import _headroom, metric_role

    assert metric_role("load_balance_latency_ms") == "latency"
    assert not _headroom("load_balance_latency_ms")
    assert metric_role("load_balance_errors") == "errors"
    assert _headroom("CPUCreditBalance")
    assert metric_role("response_time_bytes") == "latency"
    assert metric_role("http_server_response_body_size") == "traffic"
