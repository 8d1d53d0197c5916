"""Cluster health and the doctor read an HA Prometheus pair once, not once per replica.

kube-prometheus-stack runs Prometheus as an HA pair whose replicas differ only in the external label
``prometheus_replica`` (prometheus-operator's ``replicaExternalLabelName`` default); Thanos Query
without deduplication (or a federation with ``honor_labels: true``) answers every series once per
replica. A real Prometheus scrapes such a view here (``honor_labels: true``): cluster ``prod`` has
the pair, cluster ``edge`` one Prometheus, and both serve 10 requests/s. The pair's replicas scrape
on their own schedules, so their series differ: replica 0 reads exactly ``edge``'s buckets,
replica 1 fewer, with fewer slow requests. Summing the pair read ``prod`` at 18 requests/s (skewing
``fleetmind_fleet_skew``) and its P99 lower than ``edge``'s; the doctor counted one GPU's XID and
one target down twice each.

Cluster ``ray`` runs one Prometheus and two workload replicas at 5 requests/s each, told apart by
the ``replica`` label Ray Serve puts on every ``ray.serve`` metric (``REPLICA_TAG`` in
``ray/serve/metrics.py``): deduplicating ``replica`` as well read it at 5 requests/s, not 10.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from typing import Any

import pytest
from k8s_helpers import ExporterServer, Prometheus, prometheus_binary

from fleetmind.serving.health import ClusterSignals, add_latency
from fleetmind.serving.telemetry.doctor import _targets_down, _xids
from fleetmind.serving.telemetry.prometheus import PrometheusApiSource

os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")

PAIR = ("prometheus-k8s-0", "prometheus-k8s-1")
HIST = "http_server_request_duration_seconds"
LES = ("0.1", "1", "+Inf")
FULL = (5, 10, 10)
"""Requests/s at or under each of :data:`LES` (cumulative): ``edge``, ``prod``'s replica 0."""
BUCKETS = {"prod": (FULL, (5, 8, 8)), "edge": (FULL,), "ray": ((0, 5, 5), (5, 5, 5))}
"""Per cluster, per series (HA replica or workload replica) the rates of :data:`LES`."""


def _series(name: str, labels: dict[str, str], value: float) -> str:
    return (
        name + "{" + ",".join(f'{k}="{v}"' for k, v in sorted(labels.items())) + "} " + f"{value:g}"
    )


def _labels(cluster: str, i: int) -> dict[str, str]:
    """Series ``i`` of ``cluster``: a replica of the HA pair (``prod``), a Ray Serve replica
    (``ray``)."""
    lab = {"cluster": cluster, "job": "inference", "instance": "10.2.0.1:8080"}
    if cluster == "prod":
        lab |= {"prometheus_replica": PAIR[i], "prometheus": "monitoring/k8s"}
    if cluster == "ray":
        lab |= {"deployment": "llm", "replica": ("llm#abc", "llm#def")[i]}
    return lab


def ha_text(now: float, t0: float) -> str:
    """The exposition a Thanos Query without dedup would show, with counters at ``now``. Every
    counter is its rate times the same whole number of seconds, so the rates Prometheus computes
    from one scrape are exactly proportional to :data:`BUCKETS`."""
    secs = int(now - t0)
    lines = []
    for cluster, per_series in BUCKETS.items():
        for i, rates in enumerate(per_series):
            lab = _labels(cluster, i)
            for le, r in zip(LES, rates, strict=True):
                lines.append(_series(f"{HIST}_bucket", {**lab, "le": le}, r * secs))
            lines.append(_series(f"{HIST}_count", lab, rates[-1] * secs))
    for r in PAIR:
        ext = {"cluster": "prod", "prometheus": "monitoring/k8s", "prometheus_replica": r}
        gpu = {"gpu": "1", "UUID": "GPU-n2-1", "Hostname": "n2", "node": "n2",
               "instance": "10.0.0.2:9400", "job": "dcgm-exporter"}  # fmt: skip
        lines.append(_series("DCGM_FI_DEV_XID_ERRORS", {**ext, **gpu}, 43))
        lines.append(_series("DCGM_FI_DEV_FB_USED", {**ext, **gpu}, 10))
        target = {"job": "dcgm-exporter", "instance": "10.0.0.3:9400", "node": "n3"}
        lines.append(_series("up", {**ext, **target}, 0))
    return "\n".join(lines) + "\n"


class _Live(dict):
    """Texts rendered at each scrape (counters that grow)."""

    def __init__(self, t0: float) -> None:
        super().__init__()
        self.t0 = t0

    def get(self, key: Any, default: Any = None) -> Any:
        return ha_text(time.time(), self.t0) if key == "/ha" else default


@pytest.fixture(scope="module")
def src(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PrometheusApiSource]:
    if prometheus_binary() is None:
        pytest.skip("Prometheus not installed (Debian package prometheus)")
    t0 = time.time() - 60
    exporter = ExporterServer({})
    exporter.texts = _Live(t0)
    prom = Prometheus(tmp_path_factory.mktemp("ha"), exporter, {"ha": "/ha"})
    source = PrometheusApiSource(prom.url, timeout_s=10)
    try:
        # three scrapes of every counter: rate() has samples to compare
        n = sum(len(per_series) for per_series in BUCKETS.values())
        prom.wait_for(f"count_over_time({HIST}_count[5m]) >= 3", n)
        yield source
    finally:
        source.close()
        prom.stop()
        exporter.close()


@pytest.mark.external
def test_request_rate_counts_an_ha_pair_once(src: PrometheusApiSource) -> None:
    sig: dict[str, ClusterSignals] = {}
    add_latency(sig, src.query, HIST)
    prod, edge = sig["prod"], sig["edge"]
    assert edge.request_rate and edge.request_rate > 0
    # same scrapes: the pair's rate is exactly the single Prometheus' one (below 10/s while the
    # series are younger than rate()'s 5-minute window), not 18/10 of it
    assert prod.request_rate == pytest.approx(edge.request_rate, rel=1e-9)
    # the pair's larger buckets are replica 0's, edge's: the same P99 (the sum's is lower, more
    # of its requests being fast)
    assert edge.p99_latency_s and 0.1 < edge.p99_latency_s < 1
    assert prod.p99_latency_s == pytest.approx(edge.p99_latency_s, rel=1e-9)
    assert prod.p95_latency_s == pytest.approx(edge.p95_latency_s, rel=1e-9)


@pytest.mark.external
def test_workload_replicas_each_count(src: PrometheusApiSource) -> None:
    """Two Ray Serve replicas at 5 requests/s each (their ``replica`` label) serve as many as
    ``edge``: only ``prometheus_replica`` is deduplicated."""
    sig: dict[str, ClusterSignals] = {}
    add_latency(sig, src.query, HIST)
    assert sig["ray"].request_rate == pytest.approx(sig["edge"].request_rate, rel=1e-9)


@pytest.mark.external
def test_doctor_counts_each_target_and_gpu_once(src: PrometheusApiSource) -> None:
    down = [f.message for f in _targets_down(src)]
    assert len(down) == 1 and down[0].startswith("1 dcgm-exporter target(s) down (n3)"), down
    app = [f.message for f in _xids(src) if f.level == "info"]
    assert len(app) == 1 and app[0].startswith(
        "1 GPU(s) show an application XID as their last XID (43)"
    ), app
