"""What a metric *is*, from its name alone: its role, the direction that counts as a symptom, its alertname.

Real systems name their metrics in many ways (``latency``, ``p90_latency_ms``, ``cpu_usage``,
``MemoryUtilization``, ``request_count``, ``success_rate``, ``http_5xx``, ...). The PetShop adapter
(:mod:`fleetmind.data.petshop`) and the incident synthesiser of ``fleetmind rca fit`` (:mod:`fleetmind.data.synth_incidents`)
map every metric name to one of six roles with :func:`metric_role`, by its words (split at
characters other than letters and digits and at camelCase boundaries: ``CPUUtilization`` -> cpu,
utilization; ``5XXError`` -> 5xx, error; ``p90LatencyMs`` -> p90, latency, ms; digits after two or
more letters dropped: ``node_load1`` -> node, load), first matching rule wins:

=============  =========  ===================================================================  ==============
role           direction  words (any of)                                                       alertname
=============  =========  ===================================================================  ==============
``success``    down       availability, success, successful, succeeded, ok, 2xx, uptime,       HighErrorRate
                          apdex, health, healthy, up
``errors``     up         error(s), err(s), fail(s/ed/ure/ures), fault(s), 4xx, 5xx,            HighErrorRate
                          exception(s), timeout(s), reject(ed/s), drop(s/ped), retry/retries,
                          unhealthy, unavailable, unavailability, unsuccessful, non2xx
``latency``    up         latency, duration, rt, response, delay, p50, p75, p90, p95, p99,      HighLatency
                          p999, wait
``saturation`` up         cpu, mem, memory, rss, heap, gc, disk, filesystem, fs, io, iops,      HighSaturation
                          load, util, utilization, usage, saturation, queue, threads,
                          connections, fd, swap, throttle(s/d), throttling
``latency``    up         time, ms, seconds (unit words: only when no word above matched and    HighLatency
                          the name is not a point in time: start, boot, timestamp, created,
                          unixtime)
``traffic``    both       request(s), req, rps, qps, tps, throughput, calls, call, count,        TrafficAnomaly
                          invocations, hits, traffic, bytes, packets, sent, received, handled,
                          rq, responses
``other``      both       anything else                                                        <Metric>Anomaly
=============  =========  ===================================================================  ==============

``errors`` comes before ``traffic`` so ``error_count`` is an error metric; ``success`` before
``latency`` so ``success_time`` is not a latency; a resource word before the unit words, so
``container_cpu_usage_seconds_total`` is saturation, not latency. Amendments follow the table:

* a success word right after a negation (un, non, not, no) names failures: ``errors``
  (AWS ALB ``UnHealthyHostCount``, ``non_2xx_responses``, ``not_ok``);
* a latency name whose only latency word is ``response`` and that has a size word (size, bytes, body,
  length) is a payload size: ``traffic``, as ``request_size_bytes`` is (OpenTelemetry
  ``http_server_response_body_size``, ``istio_response_bytes_sum``; no direction of a size change is
  known to be the symptom);

* a latency name whose last word is ``count`` counts requests (Prometheus histograms'
  ``http_request_duration_seconds_count``): ``traffic``;
* a latency name whose only latency word is ``response`` and that holds ``total`` counts responses
  (Linkerd's ``response_total``, https://linkerd.io/2/reference/proxy-metrics/): ``traffic``; a
  unit word keeps it a latency (``nginx_vts_upstream_response_seconds_total``, ``response_ms_total``);
* a name with a headroom word (remaining, avail, available, free, freeable, balance) measures what is
  left, so its direction is ``down`` whatever its role (``node_memory_MemAvailable_bytes``,
  ``node_filesystem_avail_bytes``, AWS RDS ``FreeableMemory`` and EC2 ``CPUCreditBalance`` are
  saturation metrics whose drop is the symptom), and an error
  name becomes ``success`` (``error_budget_remaining``: a falling budget is the symptom).

Counts (``traffic``, or any name with ``count``, ``total``, ``sum`` or ``num``) get the Poisson floor
of :class:`fleetmind.data.petshop.DetectorConfig`, which fits dimensionless event counts only: a name
whose unit word (:data:`UNIT_WORDS`: seconds, ms, bytes, percent, ratio, cores, ...) stands where the
Prometheus naming guide puts the unit, ``<name>_<unit>_total`` (https://prometheus.io/docs/practices/naming/),
is no count: the word right before a ``total``/``sum`` suffix, or the last word when there is no such
suffix, and not after ``per`` (``container_cpu_usage_seconds_total`` counts CPU seconds,
``jvm_gc_pause_seconds_sum`` sums seconds; ``requests_per_minute``, ``events_per_minute_total``,
``time_series_total`` and ``ns_requests_total`` count events). Two units count wherever they stand:
a per-second rate (``per`` then ``second``/``sec``/``s``: ``requests_per_second``,
``requestsPerSecond``) and bytes (``haproxy_backend_bytes_in_total``,
``mysql_global_status_bytes_received``) are no counts. A name whose last word is ``count``
is a count (a histogram's ``http_request_duration_seconds_count`` counts requests). A role-map
override to ``traffic`` makes a count, one to a resource or latency role (``latency``,
``saturation``, ``cpu``, ``memory``) makes none, and any other (``errors``, ``success``, ``other``)
keeps the name's answer (``kube_pod_container_status_restarts_total: errors`` still counts restarts).

A column named as a Prometheus series (``http_server_requests_seconds{outcome="SUCCESS"}``) is read
by its metric name before the first ``{`` only, or by the quoted name inside the braces of Prometheus
3's UTF-8 syntax (:func:`metric_name_part`): label values (``outcome="SUCCESS"``,
``cluster="gke-us-central1"``) set no direction, count or unit, and no role but one: a traffic count
whose labels select failed requests is ``errors`` (:func:`metric_role`).

A name the rules get wrong is overridden with a :class:`RoleMap` (a ``roles.yaml`` in the scenario
folder, or ``--roles FILE``; :func:`scenario_role_map`), e.g. ``ok_ratio: success``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

import yaml

from fleetmind.data.errors import DataError
from fleetmind.data.files import read_text

ROLES: tuple[str, ...] = ("latency", "errors", "traffic", "saturation", "other")
"""Roles a model sees (``success`` is folded into ``errors``: both say "requests fail")."""

_UNIT_WORDS = frozenset("time ms seconds".split())
"""Latency words that only name a unit: a name that is a point in time carries them too."""

_RULES: tuple[tuple[str, frozenset[str]], ...] = (
    (
        "success",
        frozenset(
            "availability success successful succeeded ok 2xx uptime apdex health healthy "
            "up".split()
        ),
    ),
    (
        "errors",
        frozenset(
            "error errors err errs fail fails failed failure failures fault faults 4xx 5xx "
            "exception exceptions timeout timeouts reject rejected rejects drop drops dropped "
            "retry retries unhealthy unavailable unavailability unsuccessful non2xx".split()
        ),
    ),
    (
        "latency",
        frozenset("latency duration rt response delay p50 p75 p90 p95 p99 p999 wait".split()),
    ),
    (
        "saturation",
        frozenset(
            "cpu mem memory rss heap gc disk filesystem fs io iops load util utilization usage "
            "saturation queue threads connections fd swap throttle throttles throttled "
            "throttling".split()
        ),
    ),
    ("latency", _UNIT_WORDS),
    (
        "traffic",
        frozenset(
            "request requests req rps qps tps throughput calls call count invocations hits "
            "traffic bytes packets sent received handled rq responses".split()
        ),
    ),
)
"""``(role, words)`` in the order tried (the module table); latency is tried twice, by its own
words before the resource words and by the unit words ``time``/``ms``/``seconds`` after them."""

_POINT_IN_TIME = frozenset("start boot timestamp created unixtime".split())
"""Words of a name that is a point in time (``process_start_time_seconds``): not a latency."""

_HEADROOM = frozenset("remaining avail available free freeable balance".split())
"""Words of a name that measures what is left (``node_memory_MemAvailable_bytes``, AWS RDS
``FreeableMemory``, EC2 ``CPUCreditBalance``): the symptom is a drop."""

_NEGATION = frozenset("un non not no".split())
"""Words that negate the success word right after them (AWS ALB ``UnHealthyHostCount``,
``non_2xx_responses``, ``not_ok``): such a name counts failures."""

_SIZE_WORDS = frozenset("size bytes body length".split())
"""Words of a payload size (OpenTelemetry ``http.server.response.body.size``, Istio
``istio_response_bytes``): with ``response``/``request`` they name a size, not a latency."""

_PROPER_LATENCY = frozenset("latency duration rt delay p50 p75 p90 p95 p99 p999 wait time".split())
"""Latency words other than ``response``: a name with one of them is a latency even with a size
word."""

_TRAILING_DIGITS = re.compile(r"^([a-z]{2,})[0-9]+$")
"""A word of two or more letters followed by digits (``load1``, ``cpu0``): the digits are an
index or a window, dropped (``p90`` and ``5xx`` stay whole)."""

DIRECTION_OF_ROLE: dict[str, str] = {
    "success": "down",
    "errors": "up",
    "latency": "up",
    "saturation": "up",
    "traffic": "both",
    "other": "both",
}
"""Which deviation is a symptom for each role: ``up``, ``down`` or ``both``."""

ALERTNAME_OF_ROLE: dict[str, str] = {
    "success": "HighErrorRate",
    "errors": "HighErrorRate",
    "latency": "HighLatency",
    "saturation": "HighSaturation",
    "traffic": "TrafficAnomaly",
}

_COUNT_WORDS = frozenset("count total sum num".split())

UNIT_WORDS: frozenset[str] = frozenset(
    "seconds second secs ms millis milliseconds micros microseconds ns nanos nanoseconds "
    "minutes minute hours hour days time bytes byte kb mb gb tb kib mib gib tib bits bit "
    "percent percentage pct ratio ratios fraction cores core celsius kelvin volts watts joules "
    "hertz hz meters".split()
)
"""Words of a metric name that give it a unit: such a metric measures an amount in that unit, not
a number of events, so it gets no Poisson floor (:func:`is_count_metric`) when the word stands
where a unit goes (:func:`unit_word`)."""

_RESPONSE_UNIT_WORDS = UNIT_WORDS | _UNIT_WORDS | frozenset("msec usec us nsec".split())
"""Unit words that keep a ``response ... total`` name a latency total (:func:`_name_role`):
every :data:`UNIT_WORDS` entry plus the short forms ``msec`` (nginx-module-vts
``nginx_vts_upstream_response_msec_total``), ``usec``, ``us`` and ``nsec``, so
``response_milliseconds_total`` or ``response_us_total`` is no count of responses."""

_UNIT_SUFFIXES = frozenset("total sum".split())
"""Suffixes written after the unit (``<name>_<unit>_total``, ``<name>_<unit>_sum``)."""

_PER_SECOND = frozenset("second seconds sec secs s".split())
"""Words after ``per`` that make a name a per-second rate (``requests_per_second``): a rate is no
count of events per sample, whatever its magnitude (:func:`unit_word`)."""

_BYTE_WORDS = frozenset("bytes byte".split())
"""Words that make a name an amount of bytes wherever they stand (:func:`unit_word`)."""

_NO_COUNT_OVERRIDES = frozenset("latency saturation".split())
"""Override roles of amounts (a latency, a resource's use): such a metric is no event count."""
_CAMEL = re.compile(r"(?<=[a-z])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])|(?<=[0-9])(?=[A-Z][a-z])")
"""camelCase boundaries: lower -> upper (``memoryUsage``), the end of an acronym (``CPUUtil``),
digits -> a capitalised word (``p90Latency``); a digit followed by capitals stays one word
(``5XXError`` -> ``5XX``, ``Error``), as AWS CloudWatch writes its status classes."""


_MATCHER = re.compile(
    r'(?:"((?:[^"\\]|\\.)*)"|([A-Za-z_][A-Za-z0-9_.:]*))'
    r'\s*(?:(!=|=~|!~|=)\s*"((?:[^"\\]|\\.)*)")?'
)
"""One item of a label block: a quoted or bare key with its matcher and value, or (Prometheus 3
UTF-8 syntax) a quoted metric name standing alone."""


def _label_items(labels: str) -> Iterator[tuple[str, str, str, str]]:
    """The items of a label block (the text after ``{``), left to right: ``(quoted, bare, op,
    value)`` as :data:`_MATCHER` groups them (``""`` for a group that did not match).

    Each item is matched where the previous one ended (``match(pos)``) and characters no item
    starts with are skipped, so the work is linear in ``len(labels)``. A quote that opens no closed
    string ends the block: no quoted name or value after it can close (every later quote is inside
    that unclosed string or escaped in it), so nothing after it is read. ``findall`` restarted a
    scan to the end of the text at every such quote: quadratic, seconds for 10,000 escaped quotes."""
    pos, n = 0, len(labels)
    while pos < n:
        m = _MATCHER.match(labels, pos)
        if m is not None:
            quoted, bare, op, value = m.groups()
            yield quoted or "", bare or "", op or "", value or ""
            pos = m.end()
        elif labels[pos] == '"':
            return  # an unclosed quoted string: the rest of the block is inside it
        else:
            pos += 1


def metric_name_part(name: str) -> str:
    """The metric name of a column name written as a Prometheus series: the text before the first
    ``{`` (``'http_server_requests_seconds{outcome="SUCCESS"}'`` ->
    ``"http_server_requests_seconds"``); when nothing stands before it, the name written inside the
    braces in Prometheus 3's UTF-8 syntax, the first quoted string not followed by a matcher
    (``'{"http.server.request.duration","http.request.method"="GET"}'`` ->
    ``"http.server.request.duration"``, https://prometheus.io/docs/guides/utf8/), else the value
    of a ``__name__="..."`` matcher; a name without ``{`` is returned whole. Label values are not
    the metric's name, so they never set its role, direction, count detection or unit."""
    head, brace, labels = str(name).partition("{")
    if head.strip() or not brace:
        return head
    by_label = None
    for quoted, bare, op, value in _label_items(labels):
        if quoted and not op:
            return quoted
        if bare == "__name__" and op == "=" and by_label is None:
            by_label = value
    return head if by_label is None else by_label


def words(name: str) -> list[str]:
    """Lower-case words of a metric name: ``"p90LatencyMs"`` -> ``["p90", "latency", "ms"]``,
    ``"HTTPCode_Target_5XX_Count"`` -> ``["http", "code", "target", "5xx", "count"]``,
    ``"node_load1"`` -> ``["node", "load"]`` (digits after two or more letters dropped); only the
    name before a label block counts (:func:`metric_name_part`)."""
    return [
        _TRAILING_DIGITS.sub(r"\1", w)
        for w in re.split(r"[^a-z0-9]+", _CAMEL.sub("_", metric_name_part(name)).lower())
        if w
    ]


@lru_cache(maxsize=4096)
def metric_role(name: str) -> str:
    """The role of a metric name: ``success``, ``errors``, ``latency``, ``saturation``, ``traffic``
    or ``other`` (see the module table and its amendments); a count whose labels select failed
    requests (``http_requests_total{status="5xx"}``) is ``errors``."""
    role = _name_role(name)
    if role == "traffic" and _counts_errors(name):
        return "errors"  # a label picks the failed requests out of all of them
    return role


def _name_role(name: str) -> str:
    """:func:`metric_role` from the metric's name alone (:func:`words`)."""
    ws = words(name)
    role = "other"
    for rule, vocab in _RULES:
        if not any(w in vocab for w in ws):
            continue
        if vocab is _UNIT_WORDS and any(w in _POINT_IN_TIME for w in ws):
            continue  # process_start_time_seconds: a point in time, not a duration
        role = rule
        break
    if role == "success" and any(
        a in _NEGATION and b in _RULES[0][1] for a, b in zip(ws, ws[1:], strict=False)
    ):
        return "errors"  # UnHealthyHostCount, non_2xx_responses: negated success counts failures
    if (
        role == "latency"
        and any(w in _SIZE_WORDS for w in ws)
        and not any(w in _PROPER_LATENCY for w in ws)
    ):
        return "traffic"  # http_server_response_body_size: a payload size, not a latency
    if role == "latency" and ws and ws[-1] == "count":
        return "traffic"  # http_request_duration_seconds_count: how many requests
    if (
        role == "latency"
        and "response" in ws
        and "total" in ws
        and not any(w in _PROPER_LATENCY or w in _RESPONSE_UNIT_WORDS for w in ws)
    ):
        return "traffic"  # Linkerd response_total: a counter of responses, not a latency
    if role == "errors" and _has_headroom(ws):
        return "success"  # error_budget_remaining: a drop is the symptom
    return role


_ERROR_VALUES = frozenset("error errors server_error failure failed fail".split())
_GRPC_FAILURES = frozenset(
    "canceled cancelled unknown invalidargument deadlineexceeded notfound alreadyexists permissiondenied "
    "resourceexhausted failedprecondition aborted outofrange unimplemented internal unavailable "
    "dataloss unauthenticated".split()
)
"""gRPC status codes other than ``OK`` (grpc/grpc ``doc/statuscodes.md``), as grpc-go's and
go-grpc-prometheus's ``grpc_code`` label writes them (``Canceled``, grpc-go ``codes/code_string.go``;
``CANCELLED`` in the spec), compared lower-case without ``_``; as numbers they are 1 to 16."""

_RPC_STATUS_KEYS = frozenset(
    "grpc_code grpc_status grpc_response_status rpc_grpc_status_code "
    "rpc_response_status_code grpc_status_code grpc_server_status grpc_client_status".split()
)
"""Label keys (lower-case, ``.`` read as ``_``) that hold a gRPC status: go-grpc-prometheus's
``grpc_code``, gRPC's OpenTelemetry ``grpc.status`` (gRFC A66), Istio's ``grpc_response_status``,
OpenTelemetry's ``rpc.grpc.status_code`` and ``rpc.response.status_code``, Kubernetes'
``grpc_status_code`` (csi-lib-utils ``csi_sidecar_operations_seconds``, kubelet
``csi_operations_seconds`` and ``dra_grpc_operations_duration_seconds``) and OpenCensus's
``grpc_server_status`` / ``grpc_client_status``. Other keys naming gRPC (``grpc_method``,
``grpc_service``, ``grpc_service_code``) hold no status, whatever their value."""

_DNS_FAILURES = frozenset({"servfail"})
"""DNS response codes that say the server failed to answer, under a label key ``rcode`` (CoreDNS
``coredns_dns_responses_total`` and ``coredns_forward_responses_total``,
https://github.com/coredns/coredns/blob/master/plugin/metrics/README.md; the coredns-mixin's
``CoreDNSErrorsHigh`` alerts on ``rcode="SERVFAIL"`` alone). ``NXDOMAIN`` (no such name) and
``REFUSED`` (a policy answer, as an HTTP 403 is) are answers, not failures of the server."""


def _rpc_failure(key: str, value: str) -> bool:
    """Whether label ``key="value"`` (both lower-case, key with ``_`` for ``.``) names a gRPC call
    that failed: under a gRPC status key (:data:`_RPC_STATUS_KEYS`), a code name other than
    ``OK`` or a code number 1 to 16 (one or two ASCII digits: ``"14"``, ``"01"``)."""
    if key not in _RPC_STATUS_KEYS:
        return False
    if value.replace("_", "") in _GRPC_FAILURES:
        return True
    return re.fullmatch(r"[0-9]{1,2}", value) is not None and 1 <= int(value) <= 16


def _counts_errors(name: str) -> bool:
    """Whether the label block of a series name (``{...}``) selects failed requests: a matcher
    ``key="value"`` (or ``=~``; :func:`_label_items`) with a status class or code ``5xx`` /
    ``5NN`` / ``=~"5.."`` under a key holding ``code`` or ``status`` (not ``le="500"``), an
    outcome or result such as ``error``, ``SERVER_ERROR`` or ``failure``, a gRPC code other than
    ``OK`` by name or number under a gRPC status key (:func:`_rpc_failure`:
    ``grpc_response_status="14"``, ``rpc_response_status_code="UNAVAILABLE"``), a DNS
    ``rcode="SERVFAIL"`` (:data:`_DNS_FAILURES`), or a non-empty OpenTelemetry ``error_type``
    (``error.type``: set only on failed operations).
    The metric's name sets the role (:func:`metric_name_part`); this only tells a count of failed
    requests from a count of all requests, as Prometheus series tell them apart."""
    _, brace, labels = str(name).partition("{")
    if not brace:
        return False
    for quoted_key, key, op, value in _label_items(labels):
        if op not in ("=", "=~"):
            continue  # a name standing alone, or a negative matcher (!=, !~)
        v = value.strip().lower()
        k = (key or quoted_key).lower().replace(".", "_")
        if ("code" in k or "status" in k) and re.fullmatch(r"5(?:xx|[0-9]{2}|\.\.)", v):
            return True  # a status class or code (not le="500", tenant="512")
        if v in _ERROR_VALUES or _rpc_failure(k, v):
            return True
        if k == "rcode" and v in _DNS_FAILURES:
            return True  # CoreDNS: the server could not answer
        if k == "error_type" and v:
            return True  # OpenTelemetry error.type: set on failed operations only
    return False


def roles_line(name: str, roles: dict[str, dict[str, str]]) -> str:
    """The console line naming each metric's role, as ``rca petshop`` and ``rca fit`` print it:
    ``"<name>: metric roles latency=latency, ok_ratio=success*  (* = role map override)"`` from a
    :meth:`RoleMap.report` (``{metric: {"role", "source"}}``); a metric marked
    ``"baseline": "none"`` (no column with enough normal values) is printed ``(no baseline)``."""
    return (
        f"{name}: metric roles "
        + ", ".join(
            f"{m}={r['role']}"
            + ("*" if r["source"] == "override" else "")
            + (" (no baseline)" if r.get("baseline") == "none" else "")
            for m, r in roles.items()
        )
        + "  (* = role map override)"
    )


def _has_headroom(ws: list[str]) -> bool:
    """Whether words ``ws`` hold a headroom word; ``balance`` after ``load`` names load balancing
    (``load_balance_latency_ms``, ``load_balance_errors``), not what is left."""
    return any(
        w in _HEADROOM and not (w == "balance" and i and ws[i - 1] == "load")
        for i, w in enumerate(ws)
    )


def _headroom(name: str) -> bool:
    """Whether a name measures what is left (a headroom word): its symptom is a drop."""
    return _has_headroom(words(name))


def model_role(name: str) -> str:
    """:func:`metric_role` with ``success`` folded into ``errors`` (one of :data:`ROLES`)."""
    role = metric_role(name)
    return "errors" if role == "success" else role


def metric_direction(name: str) -> str:
    """``up``, ``down`` or ``both``: which deviation of metric ``name`` is a symptom (its role's,
    but ``down`` for a name with a headroom word: ``MemAvailable``, ``avail``, ``free``)."""
    return "down" if _headroom(name) else DIRECTION_OF_ROLE[metric_role(name)]


def metric_alertname(name: str) -> str:
    """Alertname for an anomaly of metric ``name`` (``<Metric>Anomaly`` for role ``other``)."""
    role = metric_role(name)
    return ALERTNAME_OF_ROLE.get(role, f"{str(name)[:1].upper()}{str(name)[1:]}Anomaly")


def unit_word(name: str) -> str | None:
    """The unit of metric ``name``: ``per_second`` for a per-second rate (``per`` followed by
    ``second``/``seconds``/``sec``/``secs``/``s`` anywhere: ``requests_per_second``,
    ``requestsPerSecond``), ``bytes`` for a name with a byte word anywhere (``bytes``, ``byte`` or
    a word starting with ``bytes``: ``haproxy_backend_bytes_in_total``,
    ``mysql_global_status_bytes_received``), else the unit where the Prometheus naming guide puts
    it (``<name>_<unit>_total``, https://prometheus.io/docs/practices/naming/): the word right
    before a ``total``/``sum`` suffix, else the last word, when it is one of :data:`UNIT_WORDS`
    and does not follow ``per`` (``container_cpu_usage_seconds_total`` -> ``seconds``;
    ``requests_per_minute``, ``time_series_total``, ``ns_requests_total`` -> ``None``)."""
    ws = words(name)
    if any(a == "per" and b in _PER_SECOND for a, b in zip(ws, ws[1:], strict=False)):
        return "per_second"
    if any(w in _BYTE_WORDS or w.startswith("bytes") for w in ws):
        return "bytes"
    i = len(ws) - 2 if len(ws) >= 2 and ws[-1] in _UNIT_SUFFIXES else len(ws) - 1
    if i < 0 or ws[i] not in UNIT_WORDS or (i and ws[i - 1] == "per"):
        return None
    return ws[i]


def is_count_metric(name: str) -> bool:
    """Whether metric ``name`` counts dimensionless events: a name whose last word is ``count``
    (``http_request_duration_seconds_count``), else none with a unit (:func:`unit_word`:
    ``container_cpu_usage_seconds_total`` counts CPU seconds), else traffic or a
    count/total/sum/num of something, all by the metric's name alone (:func:`metric_name_part`: a
    label that selects failed requests, ``nginx_ingress_controller_requests{status="500"}``, leaves
    a count of events a count)."""
    ws = words(name)
    if ws and ws[-1] == "count":
        return True
    if unit_word(name) is not None:
        return False  # container_cpu_usage_seconds_total: CPU seconds, not events
    return _name_role(name) == "traffic" or any(w in _COUNT_WORDS for w in ws)


# ---------------------------------------------------------------------------- role maps
OVERRIDE_ROLES: dict[str, str] = {
    "latency": "latency",
    "errors": "errors",
    "success": "success",
    "traffic": "traffic",
    "saturation": "saturation",
    "cpu": "saturation",
    "memory": "saturation",
    "other": "other",
}
"""Role names a role-map override may use, and the role each stands for (CPU and memory are
saturation metrics; ``success`` is an error role whose symptom is a drop)."""

ROLE_MAP_FILE = "roles.yaml"
"""Name of the role-map override file a scenario folder may hold."""


@dataclass
class RoleMap:
    """Metric name -> role, detected by name (:func:`metric_role`) unless overridden.

    A dataclass, so that a :class:`fleetmind.data.petshop.DetectorConfig` holding one stays
    ``asdict``/JSON-friendly.

    Args:
        overrides: ``{metric name: role}`` with roles from :data:`OVERRIDE_ROLES` (``cpu`` and
            ``memory`` are stored as ``saturation``; names are stripped of surrounding whitespace,
            as metric names read from a header are); names not listed are detected by name.

    Raises:
        ValueError: an override names an unknown role, or two overrides name the same metric once
            stripped.
    """

    overrides: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        given = dict(self.overrides or {})
        self.overrides = {}
        for name, role in given.items():
            r = str(role).strip().lower()
            if r not in OVERRIDE_ROLES:
                raise ValueError(
                    f"metric {name!r}: unknown role {role!r}; "
                    f"use one of {', '.join(OVERRIDE_ROLES)}"
                )
            key = str(name).strip()
            if key in self.overrides:
                raise ValueError(
                    f"metric {key!r} is named more than once (names are compared without "
                    "surrounding spaces); give each metric one role"
                )
            self.overrides[key] = OVERRIDE_ROLES[r]

    def role(self, name: str) -> str:
        """The role of metric ``name`` (one of ``success``, ``errors``, ``latency``,
        ``saturation``, ``traffic``, ``other``)."""
        return self.overrides.get(str(name)) or metric_role(str(name))

    def model_role(self, name: str) -> str:
        """:meth:`role` with ``success`` folded into ``errors`` (one of :data:`ROLES`)."""
        role = self.role(name)
        return "errors" if role == "success" else role

    def direction(self, name: str) -> str:
        """``up``, ``down`` or ``both``: which deviation of metric ``name`` is a symptom (an
        override's role decides alone; a name detected by its words: :func:`metric_direction`)."""
        if str(name) in self.overrides:
            return DIRECTION_OF_ROLE[self.overrides[str(name)]]
        return metric_direction(str(name))

    def alertname(self, name: str) -> str:
        """Alertname for an anomaly of metric ``name``."""
        role = self.role(name)
        return ALERTNAME_OF_ROLE.get(role, f"{str(name)[:1].upper()}{str(name)[1:]}Anomaly")

    def is_count(self, name: str) -> bool:
        """Whether metric ``name`` counts dimensionless events: an override to ``traffic`` is a
        count, one to ``latency`` or ``saturation`` (``cpu``, ``memory``) is not, and any other
        (``errors``, ``success``, ``other``) keeps the name's answer (:func:`is_count_metric`:
        ``kube_pod_container_status_restarts_total`` overridden to ``errors`` counts restarts)."""
        role = self.overrides.get(str(name))
        if role == "traffic":
            return True
        if role in _NO_COUNT_OVERRIDES:
            return False
        return is_count_metric(str(name))

    def report(self, metrics: Iterable[str]) -> dict[str, dict[str, str]]:
        """``{metric: {"role", "source"}}`` for ``metrics`` (source ``override`` or ``name``)."""
        return {
            str(m): {
                "role": self.role(m),
                "source": "override" if str(m) in self.overrides else "name",
            }
            for m in sorted({str(m) for m in metrics})
        }

    def unmatched(self, metrics: Iterable[str]) -> list[str]:
        """Override entries (sorted) that name none of ``metrics``: they change nothing."""
        present = {str(m) for m in metrics}
        return sorted(m for m in self.overrides if m not in present)

    def to_dict(self) -> dict[str, str]:
        """The overrides (``{metric: role}``), as stored in a fitted model's ``config.json``."""
        return dict(self.overrides)


class _DuplicateKey(yaml.YAMLError):
    """A mapping of a role-map file names a key twice."""


class _UniqueKeyLoader(yaml.SafeLoader):
    """``yaml.SafeLoader`` that refuses a mapping naming a key twice (``yaml.safe_load`` keeps the
    last value silently)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict:  # type: ignore[override]
        seen: set[object] = set()
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue  # `<<: *anchor` merges another mapping; its keys may be overridden
            key = self.construct_object(key_node, deep=deep)  # type: ignore[no-untyped-call]
            try:
                repeated = key in seen
            except TypeError:  # an unhashable key: the caller's type check refuses it
                continue
            if repeated:
                raise _DuplicateKey(
                    f"metric {key!r} is named more than once (line {key_node.start_mark.line + 1}); "
                    "give each metric one role"
                )
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


def load_role_map(path: str | Path) -> RoleMap:
    """Read a role-map override file: a YAML (or JSON) mapping ``metric name: role``.

    Example ``roles.yaml``::

        p90: latency
        ok_ratio: success
        rps: traffic
        container_cpu: cpu

    Raises:
        DataError: the file is missing or not a regular file (a folder, a FIFO), not a mapping of
            strings, names an unknown role, or names a metric twice (also when the names differ
            only by surrounding spaces).
    """
    p = Path(path)
    if not p.exists():
        raise DataError(f"role map not found: {p}")
    if p.is_dir():
        raise DataError(f"role map {p} is a folder, not a file")
    if not p.is_file():  # a FIFO or a device would block or never end
        raise DataError(f"role map {p} is not a regular file")
    text = read_text(p, "role map")
    try:
        obj = yaml.load(text, Loader=_UniqueKeyLoader)  # noqa: S506 - a SafeLoader subclass
    except _DuplicateKey as err:
        raise DataError(f"{p}: {err}") from None
    except yaml.YAMLError as err:
        raise DataError(f"{p}: not YAML: {str(err).splitlines()[0]}") from None
    if obj is None:
        obj = {}
    if not isinstance(obj, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in obj.items()
    ):
        raise DataError(f"{p}: expected a mapping 'metric name: role' of strings")
    try:
        return RoleMap(obj)
    except ValueError as err:
        raise DataError(f"{p}: {err}") from None


def role_map_source(folder: str | Path, path: str | Path | None = None) -> str | None:
    """The file :func:`scenario_role_map` reads (``path``, else ``folder/roles.yaml`` when present,
    whatever it is: :func:`load_role_map` refuses a folder there), or ``None`` when roles are
    detected by name only."""
    if path is not None:
        return str(path)
    p = Path(folder) / ROLE_MAP_FILE
    return str(p) if p.exists() else None


def check_role_map(roles: RoleMap, metrics: Iterable[str], where: str) -> list[str]:
    """Check a role map against the metric names of the data it is applied to.

    Args:
        roles: the role map.
        metrics: metric names present in the data (e.g. the normal period's second header row).
        where: the role map's file, named in the error.

    Returns:
        The override entries that name no metric of ``metrics`` (sorted; empty when all match or
        there are no overrides); the caller warns about them.

    Raises:
        DataError: the map has overrides and none of them names a metric of the data.
    """
    unmatched = roles.unmatched(metrics)
    if roles.overrides and len(unmatched) == len(roles.overrides):
        present = sorted({str(m) for m in metrics})
        shown = ", ".join(present[:8]) + (", ..." if len(present) > 8 else "")
        raise DataError(
            f"{where}: none of its entries ({', '.join(unmatched)}) names a metric of the data "
            f"(metrics: {shown or 'none'})"
        )
    return unmatched


def scenario_role_map(folder: str | Path, path: str | Path | None = None) -> RoleMap:
    """The role map of a scenario: ``path`` when given, else ``folder/roles.yaml`` when present,
    else detection by name only."""
    if path is not None:
        return load_role_map(path)
    p = Path(folder) / ROLE_MAP_FILE
    return load_role_map(p) if p.exists() else RoleMap()
