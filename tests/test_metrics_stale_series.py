"""Gauges that must not keep a value nothing refreshes any more.

Prometheus keeps the last sample of a series for as long as the target exports it (Prometheus docs,
"Querying basics: Staleness": a series is stale only once a scrape no longer has it), so a gauge a
process set once and never again reads the same forever:

* ``fleetmind_open_incidents`` of a replica that does not lead: it loaded the open incidents at
  start-up; only the leader groups alerts. The shipped dashboard shows
  ``sum(fleetmind_open_incidents)`` across replicas, so a follower exports 0, the leader the count.
* ``fleetmind_cluster_health{cluster}`` of a cluster gone from the telemetry (or whose health became
  unknown): client_python, github.com/prometheus/client_python/issues/277 ("remove labels"):
  mirroring external state is a custom collector's job, so the series goes when the cluster does.
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

from serving_helpers import alert

from fleetmind.serving.db import Database
from fleetmind.serving.defaults.example import build_example_graph
from fleetmind.serving.graphstore import GraphStore
from fleetmind.serving.health import HealthService
from fleetmind.serving.incidents import IncidentManager
from fleetmind.serving.metrics import Metrics
from fleetmind.serving.registry import ModelRegistry
from fleetmind.serving.routers.alerts import alert_row
from fleetmind.serving.schemas import AlertIn
from fleetmind.serving.telemetry.base import FleetSnapshot, GpuState, NodeState

GPU = {"alertname": "GpuXid", "cluster": "c0", "node": "c0-h1", "gpu": "3"}


def _replica(url: str) -> tuple[IncidentManager, Metrics]:
    reg = ModelRegistry("baseline:upstream-coverage", "heuristic:builtin-bestfit")
    reg.load()
    metrics = Metrics()
    return IncidentManager(
        Database(url), GraphStore(build_example_graph(), "t"), reg, metrics=metrics
    ), metrics


def _open(metrics: Metrics) -> float | None:
    return metrics.registry.get_sample_value("fleetmind_open_incidents")


def test_only_the_leading_replica_exports_the_open_incidents(tmp_path: Path) -> None:
    """Replicas A (leads) and B on one database: while one incident is open the sum and the max
    over replicas read 1; after its alert resolved both read 0 (B read 1 forever). B taking over
    exports the count, and A, no longer leading, 0."""
    url = f"sqlite:///{tmp_path}/r.db"
    Database(url).create_all()
    a, ma = _replica(url)
    b, mb = _replica(url)
    assert a.leader.acquire()
    a.take_over()
    a.db.store_alerts([alert_row(AlertIn.model_validate(alert(GPU, fingerprint="f")), 1000.0)])
    assert a.process_pending() == 1
    b.load_open()  # B starts (``start()``) while A leads
    for replica in (a, b):
        replica.lag.refresh()  # what every worker loop runs, leading or not
    assert (_open(ma), _open(mb)) == (1.0, 0.0)
    resolved = alert(GPU, fingerprint="f", status="resolved")
    a.db.store_alerts([alert_row(AlertIn.model_validate(resolved), 1001.0)])
    assert a.process_pending() == 1
    for replica in (a, b):
        replica.lag.refresh()
    assert a.open_count == 0 and (_open(ma), _open(mb)) == (0.0, 0.0)
    a.db.store_alerts([alert_row(AlertIn.model_validate(alert(GPU, fingerprint="g")), 1002.0)])
    assert a.process_pending() == 1
    a.leader.release()  # A stops leading; B takes the lease and over
    assert b.leader.acquire()
    b.take_over()
    for replica in (a, b):
        replica.lag.refresh()
    assert (_open(ma), _open(mb)) == (0.0, 1.0)
    b.leader.release()


def _node(name: str, cluster: str, util: float | None) -> NodeState:
    gpu = GpuState(0, "A100", util_pct=util, mem_used_mib=None, mem_total_mib=None)
    return NodeState(name, cluster, [gpu], 1000, 500, 1000, 500)


class _Telemetry:
    def __init__(self) -> None:
        self.snap = FleetSnapshot("prometheus", [])

    def snapshot(self) -> FleetSnapshot:
        return self.snap


def test_cluster_health_drops_clusters_gone_or_unknown() -> None:
    """c2 leaves the telemetry and c1's health becomes unknown (no signal left): their series go;
    an app restarted on the same metrics (a second service) exports its own model's values."""
    m = Metrics()
    settings = SimpleNamespace(
        health_latency_slo_s=1.0, health_latency_histogram="h", telemetry_cluster=None
    )
    t = _Telemetry()
    t.snap = FleetSnapshot(
        "prometheus", [_node("a", "c0", 90), _node("b", "c1", 10), _node("c", "c2", 50)]
    )
    service = HealthService(settings, m.registry)
    service.current(t)

    def health(c: str) -> float | None:
        return m.registry.get_sample_value("fleetmind_cluster_health", {"cluster": c})

    assert all(health(c) is not None for c in ("c0", "c1", "c2"))
    t.snap = FleetSnapshot("prometheus", [_node("a", "c0", 90), _node("b", "c1", None)])
    service.current(t)
    assert health("c0") is not None
    assert health("c1") is None and health("c2") is None
    t.snap = FleetSnapshot("prometheus", [_node("b", "c1", 10)])
    HealthService(settings, m.registry).current(t)  # the app restarted: a new service, same metrics
    assert health("c1") is not None and health("c0") is None
    assert m.registry.get_sample_value("fleetmind_fleet_skew") == 0.0
