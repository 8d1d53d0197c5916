"""Metric roles of service-mesh, proxy, gRPC and Prometheus 3 UTF-8 series names.

The names are those the real components export:

* Linkerd proxy ``response_total`` ("a counter of the number of responses", label
  ``classification="success"|"failure"``): https://linkerd.io/2/reference/proxy-metrics/;
* HAProxy's built-in exporter ``haproxy_backend_http_responses_total{code="5xx"}``:
  https://www.haproxy.com/documentation/haproxy-configuration-manual/latest/#prometheus-exporter
  (``addons/promex`` in haproxy/haproxy);
* Prometheus 3 UTF-8 names ``{"http.server.request.duration","http.request.method"="GET"}``:
  https://prometheus.io/docs/guides/utf8/ (names and labels from the OpenTelemetry HTTP semantic
  conventions, https://opentelemetry.io/docs/specs/semconv/http/http-metrics/);
* gRPC status labels: Istio ``grpc_response_status`` (https://istio.io/latest/docs/reference/config/metrics/),
  OpenTelemetry ``rpc.grpc.status_code`` (numeric) and ``rpc.response.status_code`` (code name),
  ``error.type`` (set only when the operation failed;
  https://opentelemetry.io/docs/specs/semconv/rpc/rpc-metrics/,
  https://opentelemetry.io/docs/specs/semconv/attributes-registry/error/); code numbers from
  grpc/grpc ``doc/statuscodes.md`` (0 OK, 14 UNAVAILABLE, 16 UNAUTHENTICATED).
"""

from __future__ import annotations

import signal
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from fleetmind.data.errors import DataError
from fleetmind.data.metric_roles import (
    is_count_metric,
    metric_direction,
    metric_name_part,
    metric_role,
)
from fleetmind.data.petshop import DetectorConfig, detect_alerts, fit_baseline, read_graph_csv
from fleetmind.data.synth_incidents import SynthConfig, SystemModel


@pytest.mark.parametrize(
    ("name", "role"),
    [
        ("response_total", "traffic"),
        ('response_total{classification="success"}', "traffic"),
        ('response_total{classification="failure"}', "errors"),
        ('route_response_total{classification="failure",status_code="503"}', "errors"),
        ("haproxy_backend_http_responses_total", "traffic"),
        ('haproxy_backend_http_responses_total{code="5xx"}', "errors"),
        ('haproxy_frontend_http_responses_total{code="2xx"}', "traffic"),
        ("response_latency_ms", "latency"),  # Linkerd's latency histogram stays a latency
        ("response_time_total", "latency"),  # a proper latency word keeps a total a latency
        ("non_2xx_responses", "errors"),
    ],
)
def test_response_counters_are_traffic_and_failures_are_errors(name: str, role: str) -> None:
    """Old code: ``response_total`` was a latency (so a Linkerd failure spike alerted as
    HighLatency) and ``haproxy_*_responses_total{code="5xx"}`` was role other."""
    assert metric_role(name) == role


@pytest.mark.parametrize(
    ("name", "part"),
    [
        (
            '{"http.server.request.duration","http.request.method"="GET"}',
            "http.server.request.duration",
        ),
        (
            '{"http.request.method"="GET", "http.server.request.duration"}',
            "http.server.request.duration",
        ),
        ('{"http.server.request.duration"}', "http.server.request.duration"),
        ('{__name__="http.server.request.duration"}', "http.server.request.duration"),
        ('{"http.request.method"="GET"}', ""),  # a label value is never the name
        ('http_requests_total{code="500"}', "http_requests_total"),
        ("latency", "latency"),
    ],
)
def test_utf8_name_inside_the_braces(name: str, part: str) -> None:
    """Old code took the text before ``{``: an empty name, role other."""
    assert metric_name_part(name) == part


@pytest.mark.parametrize(
    ("name", "role", "count"),
    [
        ('{"http.server.request.duration"}', "latency", False),
        ('{"http.server.request.duration_count"}', "traffic", True),
        (
            '{"http.server.request.duration_count","http.response.status_code"="500"}',
            "errors",
            True,
        ),
        ('{"http.server.active_requests"}', "traffic", True),
        ('{"rpc.server.duration","rpc.grpc.status_code"="14"}', "latency", False),
    ],
)
def test_dotted_otel_names_read_as_their_underscore_forms(
    name: str, role: str, count: bool
) -> None:
    assert metric_role(name) == role
    assert is_count_metric(name) is count
    plain = metric_name_part(name).replace(".", "_")
    assert metric_role(plain) == metric_role(metric_name_part(name))


@pytest.mark.parametrize(
    ("name", "role"),
    [
        ('istio_requests_total{grpc_response_status="14"}', "errors"),
        ('istio_requests_total{grpc_response_status="16"}', "errors"),
        ('istio_requests_total{grpc_response_status="0"}', "traffic"),
        ('istio_requests_total{grpc_response_status="17"}', "traffic"),  # no such code
        ('rpc_server_duration_milliseconds_count{rpc_grpc_status_code="14"}', "errors"),
        ('rpc_server_duration_milliseconds_count{rpc_grpc_status_code="0"}', "traffic"),
        (
            'rpc_server_call_duration_seconds_count{rpc_response_status_code="UNAVAILABLE"}',
            "errors",
        ),
        ('rpc_server_call_duration_seconds_count{rpc_response_status_code="OK"}', "traffic"),
        (
            '{"rpc.server.call.duration_count","rpc.response.status_code"="DEADLINE_EXCEEDED"}',
            "errors",
        ),
        ('grpc_server_handled_total{grpc_code="Unavailable"}', "errors"),
        ('grpc_server_handled_total{grpc_code="OK"}', "traffic"),
        ('grpc_server_handled_total{grpc_method="14"}', "traffic"),  # not a status label
        (
            'http_server_request_duration_seconds_count{error_type="java.net.SocketTimeoutException"}',
            "errors",
        ),
        ('http_server_request_duration_seconds_count{error_type=""}', "traffic"),
        ('http_server_request_duration_seconds_count{le="14"}', "traffic"),
    ],
)
def test_grpc_and_otel_failure_labels(name: str, role: str) -> None:
    """Old code read every numeric gRPC code, every ``rpc_response_status_code`` name and any
    ``error_type`` as all requests (traffic)."""
    assert metric_role(name) == role
    assert metric_direction(name) == ("up" if role == "errors" else "both")


@pytest.mark.parametrize(
    "name",
    [
        'nginx_ingress_controller_requests{status="500"}',
        'http_requests_total{status="500"}',
        'response_total{classification="failure"}',
        'istio_requests_total{grpc_response_status="14"}',
    ],
)
def test_a_failure_label_keeps_a_count_a_count(name: str) -> None:
    """Old code: ``nginx_ingress_controller_requests{status="500"}`` lost the count floor (its
    label made it ``errors``, and only ``traffic`` or a count word made a count) while
    ``http_requests_total{status="500"}`` kept it."""
    assert metric_role(name) == "errors"
    assert is_count_metric(name) is True
    assert DetectorConfig().is_count(name) is True


def test_one_error_per_minute_on_a_quiet_series_does_not_alert() -> None:
    """A 500 a minute where the normal period saw about one in 20 minutes is Poisson noise, not an
    outage: with the count floor its z-score is 1. Old code: z = 11.97, HighErrorRate."""
    rng = np.random.default_rng(0)
    metric = 'nginx_ingress_controller_requests{status="500"}'
    col = ("db", metric, "Sum")
    t0 = 1_700_000_000.0
    normal = pd.DataFrame(
        {col: rng.poisson(0.05, 200).astype(float)},
        index=pd.Index(t0 + 60.0 * np.arange(200), name="unix_timestamp"),
    )
    normal.columns = pd.MultiIndex.from_tuples([col])
    cfg = DetectorConfig(pre_onset=False)
    base = fit_baseline(normal, cfg)
    assert float(base.scale[col]) == pytest.approx(1.0)
    window = pd.DataFrame(
        {col: np.ones(10)}, index=pd.Index(t0 + 60.0 * (300 + np.arange(10)), name="unix_timestamp")
    )
    window.columns = pd.MultiIndex.from_tuples([col])
    alerts, _ = detect_alerts(window, base, cfg)
    assert alerts == []


def _only_unknown_names(tmp: Path) -> SystemModel:
    p = tmp / "graph.csv"
    p.write_text("microservice,front,cart,db\nfront,0,1,0\ncart,0,0,1\ndb,0,0,0\n")
    graph = read_graph_csv(p, "shop")
    rng = np.random.default_rng(0)
    cols = [
        (n, m, "Average") for n in ("front", "cart", "db") for m in ("go_goroutines", "foo_bar")
    ]
    normal = pd.DataFrame(100.0 * (1 + 0.05 * rng.standard_normal((60, len(cols)))))
    normal.columns = pd.MultiIndex.from_tuples(cols)
    normal.index = pd.Index(1.7e9 + 60.0 * np.arange(60), name="unix_timestamp")
    return SystemModel(graph, normal)


def test_all_other_stops_before_drawing_incidents(tmp_path: Path) -> None:
    """Every scored metric is role other: ``rca fit`` stops at once with one line, whatever alerts
    noise would raise. Old code inferred it from the alert yield: a window whose noise alerted
    (stood in for by an ``incident`` that always returns one) was trained on."""
    system = _only_unknown_names(tmp_path)
    drawn: list[int] = []

    def fake_incident(rng: np.random.Generator, cfg: SynthConfig) -> object:
        drawn.append(1)
        return object()  # noise raised alerts

    system.incident = fake_incident  # type: ignore[method-assign]
    with pytest.raises(DataError) as err:
        next(iter(system.incidents(SynthConfig(n_incidents=50, seed=0))))
    msg = str(err.value)
    assert drawn == []
    assert "\n" not in msg
    assert "every scored metric has role other" in msg and "roles.yaml" in msg
    assert "go_goroutines" in msg and "no injected fault can raise an alert" in msg


@pytest.mark.parametrize(
    ("name", "role", "count"),
    [
        ("latency", "latency", False),
        ("requests", "traffic", True),
        ("availability", "success", False),
        ("cpu", "saturation", False),
        ("memory", "saturation", False),
    ],
)
def test_shipped_scenario_metric_names_keep_their_roles(name: str, role: str, count: bool) -> None:
    """The metric names of the shipped PetShop and Nezha (TrainTicket) scenarios keep the role and
    count treatment their published figures were made with."""
    assert metric_role(name) == role
    assert is_count_metric(name) is count


# ---------------------------------------------------------------- latency totals with a unit word
@pytest.mark.parametrize(
    "name",
    [
        # nginx-module-vts exporter (vozlt/nginx-module-vts, README "Prometheus"): seconds spent
        "nginx_vts_server_request_seconds_total",
        "nginx_vts_upstream_response_seconds_total",
        # pgbouncer_exporter (prometheus-community/pgbouncer_exporter, collector.go)
        "pgbouncer_stats_server_in_transaction_seconds_total",
        # node_exporter schedstat collector (prometheus/node_exporter, collector/schedstat_linux.go)
        "node_schedstat_waiting_seconds_total",
        "response_ms_total",
        "totalResponseMs",
    ],
)
def test_a_total_of_seconds_or_ms_stays_a_latency(name: str) -> None:
    """Only a ``response`` counter without a unit word counts responses (Linkerd
    ``response_total``). The Linkerd rule had no check for ``response`` and treated ``seconds``
    and ``ms`` as no latency words, so all of these became traffic with direction both: a
    latency rise no longer read as HighLatency."""
    assert metric_role(name) == "latency"
    assert metric_direction(name) == "up"
    assert metric_role("response_total") == "traffic"  # the Linkerd counter itself


# ---------------------------------------------------------------- status numbers that are no ASCII
@pytest.mark.parametrize(
    "value",
    ["\u00b2", "\u0661\u0664", "1" * 5000, "014"],
    ids=["superscript-two", "arabic-indic-14", "5000-digits", "three-digits"],
)
def test_a_status_value_that_is_no_code_number_is_no_error_and_no_traceback(value: str) -> None:
    """``str.isdigit`` is true for ``²`` and for 5,000 digits, and ``int`` then raised
    (``ValueError``: not a decimal digit / over Python's 4,300-digit limit): a column header
    crashed the scenario reader. Only one or two ASCII digits are a gRPC code number."""
    name = f'istio_requests_total{{grpc_response_status="{value}"}}'
    assert metric_role(name) == "traffic"
    assert metric_direction(name) == "both"


@pytest.mark.parametrize(("value", "role"), [("14", "errors"), ("01", "errors"), ("0", "traffic")])
def test_ascii_code_numbers_still_read(value: str, role: str) -> None:
    assert metric_role(f'istio_requests_total{{grpc_response_status="{value}"}}') == role


# ---------------------------------------------------------------- CoreDNS response codes
@pytest.mark.parametrize(
    ("name", "role"),
    [
        ('coredns_dns_responses_total{rcode="SERVFAIL",server="dns://:53",zone="."}', "errors"),
        ('coredns_forward_responses_total{rcode="SERVFAIL",to="10.0.0.10:53"}', "errors"),
        ('coredns_dns_responses_total{rcode="NOERROR",server="dns://:53",zone="."}', "traffic"),
        ('coredns_dns_responses_total{rcode="NXDOMAIN",server="dns://:53",zone="."}', "traffic"),
        ('coredns_dns_responses_total{rcode="REFUSED",server="dns://:53",zone="."}', "traffic"),
        ('coredns_dns_responses_total{rcode!="SERVFAIL"}', "traffic"),
        ('coredns_dns_https_responses_total{server="https://:443",status="500"}', "errors"),
    ],
)
def test_coredns_servfail_is_an_error_count(name: str, role: str) -> None:
    """CoreDNS exports ``coredns_dns_responses_total{server, zone, view, rcode, plugin}`` and the
    forward plugin ``coredns_forward_responses_total{to, rcode}``
    (https://github.com/coredns/coredns/blob/master/plugin/metrics/README.md,
    ``plugin/forward/README.md``); the coredns-mixin's ``CoreDNSErrorsHigh`` alerts on
    ``rcode="SERVFAIL"``. Old code: a SERVFAIL burst was traffic, direction both."""
    assert metric_role(name) == role
    assert metric_direction(name) == ("up" if role == "errors" else "both")
    assert is_count_metric(name) is True


# ---------------------------------------------------------------- gRPC keys that hold no status
@pytest.mark.parametrize(
    ("name", "role"),
    [
        ('grpc_server_handled_total{grpc_method="Internal"}', "traffic"),
        ('grpc_server_handled_total{grpc_service="Unavailable"}', "traffic"),
        ('grpc_server_handled_total{grpc_service_code="3"}', "traffic"),
        ('grpc_server_handled_total{grpc_type="unary",grpc_code="Internal"}', "errors"),
        ('grpc_server_handled_total{grpc_code="3"}', "errors"),
        # gRFC A66 (github.com/grpc/proposal, A66-otel-stats.md): the grpc.status attribute
        ('grpc_client_attempt_duration_seconds_count{grpc_status="UNAVAILABLE"}', "errors"),
        ('{"grpc.client.attempt.duration_count","grpc.status"="UNAVAILABLE"}', "errors"),
        ('{"grpc.client.attempt.duration_count","grpc.method"="Internal"}', "traffic"),
    ],
)
def test_only_grpc_status_keys_name_failures(name: str, role: str) -> None:
    """A code name or number counts only under a gRPC status key (``grpc_code``,
    ``grpc_status``, ``grpc_response_status``, ``rpc_grpc_status_code``,
    ``rpc_response_status_code``). Old code read any key holding ``grpc`` (a method named
    ``Internal``) or ``grpc`` with ``code`` (``grpc_service_code="3"``) as a failed call."""
    assert metric_role(name) == role


# ---------------------------------------------------------------- pathological label blocks
@contextmanager
def _hang_guard(seconds: int = 20) -> Iterator[None]:
    """Raise if the block runs past ``seconds``: a hang guard, not a timing figure (the linear
    parse takes milliseconds on these inputs; the quadratic one took minutes)."""

    def hung(signum: int, frame: object) -> None:
        raise TimeoutError(f"label parsing did not finish in {seconds} s")

    old = signal.signal(signal.SIGALRM, hung)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


@pytest.mark.parametrize(
    ("name", "part"),
    [
        ('{"' + '\\"' * 10_000, ""),  # 20 KB: an unclosed quoted name made of escaped quotes
        ('{a="' + '\\"' * 10_000, ""),  # 20 KB: an unclosed label value
        ('{"http.server.request.duration",a="' + '\\"' * 10_000, "http.server.request.duration"),
        (
            '{a="' + '\\"' * 10_000 + '","http.server.request.duration"}',
            "http.server.request.duration",
        ),
        ('{__name__="requests_total",b="' + "\\x" * 10_000, "requests_total"),
    ],
)
def test_a_20kb_unclosed_label_block_names_what_precedes_it(name: str, part: str) -> None:
    with _hang_guard():
        assert metric_name_part(name) == part


@pytest.mark.parametrize(
    ("name", "part", "role"),
    [
        ('{"' + '\\"' * 100_000, "", "other"),
        (
            '{"http.server.active_requests",a="' + '\\"' * 100_000,
            "http.server.active_requests",
            "traffic",
        ),
        ("requests{" + "a" * 200_000, "requests", "traffic"),
        ('requests{code="500",' + "a." * 100_000, "requests", "errors"),
        ('requests{code="200",' + '"' * 200_000, "requests", "traffic"),
    ],
    ids=[
        "escaped-quotes",
        "name-then-unclosed-value",
        "long-bare-key",
        "error-then-long-key",
        "quotes",
    ],
)
def test_a_200kb_label_block_is_read_in_linear_time(name: str, part: str, role: str) -> None:
    """Old code ran ``findall`` over the label block, which restarted a scan to the end at every
    quote of an unclosed string (quadratic: seconds for 20 KB, minutes for 200 KB) and at every
    letter of a long key with no ``=`` (the failure-label reader). Now one left-to-right pass."""
    with _hang_guard():
        assert metric_name_part(name) == part
        assert metric_role(name) == role


@pytest.mark.parametrize(
    "name",
    [
        # kubernetes-csi/csi-lib-utils metrics/metrics.go: csi_sidecar_operations_seconds with
        # labels driver_name, method_name, grpc_status_code (status.Code(err).String())
        'csi_sidecar_operations_seconds_count{driver_name="ebs.csi.aws.com",'
        'method_name="/csi.v1.Controller/CreateVolume",grpc_status_code="DeadlineExceeded"}',
        # kubernetes pkg/volume/util/metrics.go: kubelet csi_operations_seconds
        'csi_operations_seconds_count{driver_name="pd.csi.storage.gke.io",'
        'grpc_status_code="Unavailable",method_name="/csi.v1.Node/NodeStageVolume",migrated="false"}',
        # kubernetes pkg/kubelet/cm/dra/... metrics: dra_grpc_operations_duration_seconds
        'dra_grpc_operations_duration_seconds_count{driver_name="gpu.example.com",'
        'method_name="/v1beta1.DRAPlugin/NodePrepareResources",grpc_status_code="Internal"}',
        # census-instrumentation/opencensus-go plugin/ocgrpc/stats_common.go: KeyServerStatus,
        # KeyClientStatus ("grpc_server_status", "grpc_client_status"), canonical code names;
        # on a traffic name (its own grpc.io/... views export as grpc_io_*, which the word "io"
        # makes saturation whatever the labels)
        'grpc_server_handled_total{grpc_server_method="svc/Get",grpc_server_status="UNAVAILABLE"}',
        'grpc_server_handled_total{grpc_client_method="svc/Get",grpc_client_status="DEADLINE_EXCEEDED"}',
        'grpc_server_handled_total{"grpc.client.status"="14"}',
    ],
)
def test_kubernetes_and_opencensus_grpc_status_labels_count_errors(name: str) -> None:
    """A gRPC status other than OK under ``grpc_status_code`` (CSI sidecars, kubelet CSI and DRA)
    or OpenCensus's ``grpc_server_status`` / ``grpc_client_status`` makes the count an error count."""
    assert metric_role(name) == "errors"
    assert metric_direction(name) == "up"


@pytest.mark.parametrize(
    "name",
    [
        'csi_sidecar_operations_seconds_count{grpc_status_code="OK"}',
        'grpc_server_handled_total{grpc_server_status="OK"}',
        'grpc_server_handled_total{grpc_client_status="0"}',
        'grpc_server_handled_total{grpc_service_code="14"}',
    ],
)
def test_ok_and_non_status_grpc_labels_stay_traffic(name: str) -> None:
    """OK under a status key, or a code under a key that is no status key, stays all requests."""
    assert metric_role(name) == "traffic"


@pytest.mark.parametrize(
    "name",
    [
        "response_milliseconds_total",
        "backend_response_microseconds_total",
        "response_nanoseconds_total",
        "response_us_total",
        "response_usec_total",
        # vozlt/nginx-module-vts README: upstream responseMsec -> nginx-vts-exporter
        # nginx_vts_upstream_response_msec_total
        "nginx_vts_upstream_response_msec_total",
    ],
)
def test_response_total_with_any_time_unit_stays_latency(name: str) -> None:
    """A ``response ... total`` name with any time unit word is a latency total, not a count."""
    assert metric_role(name) == "latency"
    assert metric_direction(name) == "up"
