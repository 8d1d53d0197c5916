"""A metrics.csv column named as a Prometheus series (``metric{label="value"}``) is read by its name.

Label values are not the metric's name (Prometheus data model: a series is a metric name plus
labels, https://prometheus.io/docs/concepts/data_model/), yet they used to set the role, direction
and latency unit: Spring Boot / Micrometer's ``http_server_requests_seconds{outcome="SUCCESS"}``
(https://docs.spring.io/spring-boot/reference/actuator/metrics.html) and go-grpc-prometheus'
``grpc_server_handling_seconds{grpc_code="OK"}`` were success rates whose rise is no symptom,
``{status="error"}`` made a latency an error metric, and ``{cluster="gke-us-central1"}`` read as
microseconds (``us``) and ``{service="ms-orders"}`` as milliseconds, so ``rca fit`` scaled its
synthetic faults by up to 1e6. Now only the text before the first ``{`` counts.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from fleetmind.data.metric_roles import (
    RoleMap,
    is_count_metric,
    metric_direction,
    metric_name_part,
    metric_role,
    words,
)
from fleetmind.data.petshop import DetectorConfig, detect_window, fit_baseline
from fleetmind.data.synth_incidents import latency_unit_s

SERIES = [
    'http_server_requests_seconds{outcome="SUCCESS"}',
    'grpc_server_handling_seconds{grpc_code="OK"}',
    'http_request_duration_seconds{status="error"}',
    'http_request_duration_seconds{cluster="gke-us-central1"}',
    'http_request_duration_seconds{service="ms-orders"}',
    'http_request_duration_seconds{le="0.5",job="sum-api"}',
]


@pytest.mark.parametrize("series", SERIES)
def test_labels_set_no_role_direction_count_or_unit(series: str) -> None:
    name = series.split("{")[0]
    assert metric_name_part(series) == name
    assert words(series) == words(name)
    assert metric_role(series) == metric_role(name) == "latency"
    assert metric_direction(series) == metric_direction(name) == "up"
    assert is_count_metric(series) is is_count_metric(name) is False
    assert RoleMap().is_count(series) is False
    assert latency_unit_s(series) == latency_unit_s(name) == 1.0


def test_unit_labels_do_not_name_a_unit_for_a_name_without_one() -> None:
    assert latency_unit_s('latency{cluster="gke-us-central1"}') is None
    assert latency_unit_s('latency_ms{pod="api-us-1"}') == 1e-3


def test_a_name_without_labels_is_read_whole() -> None:
    assert metric_name_part("success_rate") == "success_rate"
    assert metric_role('success_rate{service="checkout"}') == "success"
    assert metric_direction('errors_total{outcome="SUCCESS"}') == "up"


def test_rise_of_a_micrometer_latency_series_alerts_as_latency() -> None:
    """A 20x rise of ``http_server_requests_seconds{outcome="SUCCESS"}`` is a latency symptom (it
    was scored as a success rate, for which only a drop counts, so no alert was raised)."""
    metric = 'http_server_requests_seconds{outcome="SUCCESS"}'
    rng = np.random.default_rng(0)
    cols = pd.MultiIndex.from_tuples([("db", metric, "Average")])
    normal = pd.DataFrame(
        0.05 * (1 + 0.05 * rng.standard_normal((60, 1))),
        index=pd.Index(1.7e9 + 60.0 * np.arange(60), name="time"),
        columns=cols,
    )
    w = 0.05 * (1 + 0.05 * rng.standard_normal((8, 1)))
    w[3:] *= 20.0
    window = pd.DataFrame(
        w, index=pd.Index(1.71e9 + 60.0 * np.arange(8), name="time"), columns=cols
    )
    cfg = DetectorConfig()
    alerts, _, _ = detect_window(window, fit_baseline(normal, cfg), cfg)
    assert [(a["labels"]["alertname"], a["labels"]["metric"]) for a in alerts] == [
        ("HighLatency", metric)
    ]


@pytest.mark.parametrize(
    ("name", "role"),
    [
        ('http_requests_total{status="5xx"}', "errors"),
        ('http_requests_total{code=~"5.."}', "errors"),
        ('http_server_requests_seconds_count{outcome="SERVER_ERROR"}', "errors"),
        ('grpc_server_handled_total{grpc_code="Unavailable"}', "errors"),
        ('grpc_server_handled_total{grpc_code="DEADLINE_EXCEEDED"}', "errors"),
        ('http_requests_total{code="200"}', "traffic"),
        ('grpc_server_handled_total{grpc_code="OK"}', "traffic"),
        ('http_request_duration_seconds{status="error"}', "latency"),
        ('grpc_server_handled_total{grpc_code="Canceled"}', "errors"),
        ('http_request_size_bytes_bucket{le="500"}', "traffic"),
        ('http_requests_total{tenant="512"}', "traffic"),
    ],
)
def test_a_label_selecting_failed_requests_makes_a_count_an_error_count(
    name: str, role: str
) -> None:
    """In Prometheus a label, not the name, tells failed requests from all of them
    (``http_requests_total{code=~"5.."}``; go-grpc-prometheus' ``grpc_code`` other than ``OK``,
    grpc/grpc doc/statuscodes.md; Micrometer's ``outcome="SERVER_ERROR"``): such a count is an
    error count; a latency keeps its role whatever its labels say."""
    assert metric_role(name) == role
    assert metric_direction(name) == ("up" if role != "traffic" else "both")
