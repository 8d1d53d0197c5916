"""Extender holds are keyed by cluster too: one FleetMind serving the schedulers of two clusters
(``FLEETMIND_SCHEDULER_CLUSTER`` unset, node names distinct: ``docs/serving/settings.md``) keeps
both holds of a ``namespace/name`` the two clusters share (identical Helm releases' StatefulSet
``trainer-0``), ``/bound`` and ``release`` end only the bound cluster's hold, telemetry of a pod in
cluster B ends no hold of cluster A, and rows stored before the cluster was in the key
(``namespace/name``) are still bound, released, replaced and expired.

Keyed by ``namespace/name`` alone, cluster B's hold of ``prod/trainer-0`` replaced cluster A's in
one upsert, and A's three held GPUs were handed to the next pod.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from fleetmind.serving.app import create_app
from fleetmind.serving.scheduler.placement import Option
from fleetmind.serving.scheduler.reservations import (
    MAX_KEY_CHARS,
    DbReservations,
    pod_name,
    reservations_table,
    stored_key,
)
from fleetmind.serving.schemas import JobSpec
from fleetmind.serving.settings import Settings
from fleetmind.serving.telemetry.base import FleetSnapshot, GpuState, NodeState
from fleetmind.serving.telemetry.sim import SimSource

os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")

TTL = 120.0
GRACE = 30.0
POD = "trainer-0"
FILTER = "/api/v1/scheduler/filter"
BOUND = "/api/v1/scheduler/bound"


class Clock:
    def __init__(self) -> None:
        self.t = 1_800_000_000.0

    def __call__(self) -> float:
        return self.t


def _node(cluster: str, name: str, pods: dict[str, str] | None = None) -> NodeState:
    """A node of 4 idle A100s; ``pods``: name -> uid of the pods telemetry lists there (their GPU
    use placed)."""
    pods = pods or {}
    return NodeState(
        name=name,
        cluster=cluster,
        gpus=[GpuState(index=i, model="A100", free_milli=1000) for i in range(4)],
        cpu_milli=64_000,
        cpu_milli_free=64_000,
        memory_mib=262_144,
        memory_mib_free=262_144,
        pods=frozenset(pods),
        pod_uids=frozenset(pods.values()),
        gpu_pods=frozenset(pods),
        pending_pods=frozenset(),
    )


def _fleet() -> list[NodeState]:
    return [
        _node("A", "gke-a-1"),
        _node("A", "gke-a-2"),
        _node("B", "gke-b-1"),
        _node("B", "gke-b-2"),
    ]


def _args(name: str, uid: str, gpus: int, nodes: list[str]) -> dict[str, Any]:
    limits = {"nvidia.com/gpu": str(gpus), "cpu": "1", "memory": "1Gi"}
    pod = {
        "metadata": {"name": name, "namespace": "prod", "uid": uid},
        "spec": {"containers": [{"name": "main", "resources": {"limits": limits}}]},
    }
    return {"Pod": pod, "NodeNames": nodes}


@pytest.fixture
def app(tmp_path: Path) -> Iterator[tuple[TestClient, Clock]]:
    """One service, scheduler cluster unset, telemetry of clusters A and B, a fake clock."""
    settings = Settings(
        database_url=f"sqlite:///{tmp_path}/holds.db",
        rca_model="baseline:upstream-coverage",
        placement_model="heuristic:builtin-bestfit",
        incident_worker=False,
        reservation_ttl_s=TTL,
        reservation_bound_grace_s=GRACE,
    )
    assert settings.scheduler_cluster is None
    clock = Clock()
    with TestClient(create_app(settings)) as c:
        s = c.app.state.services
        s.telemetry = SimSource(_fleet())
        assert isinstance(s.reservations, DbReservations)
        s.reservations.clock = clock
        with s.db.write() as conn:
            conn.execute(reservations_table.delete())
        yield c, clock


def _filter(c: TestClient, name: str, uid: str, gpus: int, nodes: list[str]) -> dict[str, Any]:
    r = c.post(FILTER, json=_args(name, uid, gpus, nodes))
    assert r.status_code == 200, r.text
    return r.json()


def _holds(c: TestClient) -> set[tuple[str, str, str, str | None]]:
    """(cluster, pod key, node, uid) of the live holds."""
    res = c.app.state.services.reservations
    return {(r["cluster"], r["pod_key"], r["node"], r["pod_uid"]) for r in res.rows()}


def _bound(c: TestClient, node: str, uid: str | None) -> str:
    body = {"PodName": POD, "PodNamespace": "prod", "Node": node}
    if uid is not None:
        body["PodUID"] = uid
    r = c.post(BOUND, json=body)
    assert r.status_code == 200, r.text
    return r.json()["Outcome"]


def _both_held(c: TestClient) -> None:
    """Cluster A's and cluster B's schedulers each filter their own ``prod/trainer-0`` (3 GPUs)
    onto one node: each filter passes one node, so each holds it."""
    assert _filter(c, POD, "uid-A", 3, ["gke-a-1"])["NodeNames"] == ["gke-a-1"]
    assert _filter(c, POD, "uid-B", 3, ["gke-b-1"])["NodeNames"] == ["gke-b-1"]


# ------------------------------------------------------------------- the finding's scenario
def test_same_named_pods_of_two_clusters_hold_apart(app: Any) -> None:
    """The hunter's repro: B's ``prod/trainer-0`` (another uid) no longer replaces A's hold, so
    the next 3-GPU pod does not get A's held GPUs (before: it passed ``gke-a-1``)."""
    c, _ = app
    _both_held(c)
    assert _holds(c) == {
        ("A", "prod/trainer-0", "gke-a-1", "uid-A"),
        ("B", "prod/trainer-0", "gke-b-1", "uid-B"),
    }
    out = _filter(c, "other-0", "uid-A-o", 3, ["gke-a-1"])
    assert out["NodeNames"] == []
    assert "after reservations" in out["FailedNodes"]["gke-a-1"]
    # the fleet view books both clusters' GPUs
    fleet = c.get("/api/v1/fleet").json()
    free = {
        (n["cluster"], n["name"]): sum(g["free_milli"] for g in n["gpus"]) for n in fleet["nodes"]
    }
    assert free[("A", "gke-a-1")] == 1000 and free[("B", "gke-b-1")] == 1000
    # a retried pod still does not block itself, and its hold stays one row
    assert _filter(c, POD, "uid-A", 3, ["gke-a-1"])["NodeNames"] == ["gke-a-1"]
    assert len(c.app.state.services.reservations.rows()) == 2


# ---------------------------------------------------------------------------- /bound, release
def test_bound_ends_only_the_bound_clusters_hold(app: Any) -> None:
    c, clock = app
    _both_held(c)
    res = c.app.state.services.reservations
    assert _bound(c, "gke-b-1", "uid-B") == "held"
    bound = {r["cluster"]: r["bound_ts"] for r in res.rows()}
    assert bound == {"A": None, "B": clock.t}
    # A's pod bound elsewhere in A: A's hold is dropped, B's stays
    assert _bound(c, "gke-a-2", "uid-A") == "moved"
    assert {h[0] for h in _holds(c)} == {"B"}
    # B's pod bound elsewhere in B leaves a new A hold alone, even without a uid
    assert _filter(c, POD, "uid-A", 3, ["gke-a-1"])["NodeNames"] == ["gke-a-1"]
    assert _bound(c, "gke-b-2", None) == "moved"
    assert _holds(c) == {("A", "prod/trainer-0", "gke-a-1", "uid-A")}
    # B's pod's uid on A's node: A's hold belongs to another pod
    assert _bound(c, "gke-a-1", "uid-B") == "unknown"
    assert _holds(c) == {("A", "prod/trainer-0", "gke-a-1", "uid-A")}


def test_bound_with_the_scheduler_cluster_set(tmp_path: Path) -> None:
    """``FLEETMIND_SCHEDULER_CLUSTER``: that cluster's hold is the bound pod's, whatever the
    node name, without reading telemetry."""
    settings = Settings(
        database_url=f"sqlite:///{tmp_path}/one.db",
        rca_model="baseline:upstream-coverage",
        placement_model="heuristic:builtin-bestfit",
        incident_worker=False,
        scheduler_cluster="B",
    )
    with TestClient(create_app(settings)) as c:
        s = c.app.state.services
        s.telemetry = SimSource(_fleet())
        res = s.reservations
        assert isinstance(res, DbReservations)
        spec = JobSpec(num_gpu=3, gpu_milli=1000, cpu_milli=1000, memory_mib=1024)
        assert res.hold("prod/trainer-0", Option("A", "gke-a-1", (0, 1, 2), 0.0), spec, uid="u")
        assert res.hold("prod/trainer-0", Option("B", "gke-b-1", (0, 1, 2), 0.0), spec, uid="u")
        s.telemetry = None  # not read: the setting says the cluster
        assert _bound(c, "gke-b-2", "u") == "moved"
        assert {(r["cluster"], r["node"]) for r in res.rows()} == {("A", "gke-a-1")}


def test_release_per_cluster(app: Any) -> None:
    c, _ = app
    _both_held(c)
    res = c.app.state.services.reservations
    assert res.release("prod/trainer-0", cluster="A")
    assert {h[0] for h in _holds(c)} == {"B"}
    assert not res.release("prod/trainer-0", cluster="A")
    _both_held(c)
    assert res.release("prod/trainer-0")  # every cluster's
    assert _holds(c) == set()


# ------------------------------------------------------------------------------ telemetry
@pytest.mark.parametrize("uids", [True, False], ids=["uids", "names-only"])
def test_a_pod_running_in_cluster_b_ends_no_hold_of_cluster_a(app: Any, uids: bool) -> None:
    """kube-state-metrics lists B's ``prod/trainer-0`` on ``gke-b-1`` (and, uid-less, by name
    only): B's hold ends, A's stays, on the same snapshot."""
    c, _ = app
    _both_held(c)
    res = c.app.state.services.reservations
    b1 = _node("B", "gke-b-1", {"prod/trainer-0": "uid-B"})
    if not uids:
        b1 = dataclasses.replace(b1, pod_uids=frozenset())
    nodes = [_node("A", "gke-a-1"), _node("A", "gke-a-2"), b1, _node("B", "gke-b-2")]
    snap = FleetSnapshot(source="sim", nodes=nodes, collected_ts=res.clock())
    held = res.view(snap)
    assert held.gpu_items() == [(("A", "gke-a-1", g), 1000) for g in range(3)]
    # B's pod listed by name on another node of B (uid-less telemetry) ends B's hold, not A's
    b2 = dataclasses.replace(
        _node("B", "gke-b-2", {"prod/trainer-0": "uid-B"}), pod_uids=frozenset()
    )
    nodes = [_node("A", "gke-a-1"), _node("A", "gke-a-2"), _node("B", "gke-b-1"), b2]
    snap = FleetSnapshot(source="sim", nodes=nodes, collected_ts=res.clock())
    assert {k[0] for k, _ in res.view(snap).gpu_items()} == {"A"}


# ------------------------------------------------------------------------------ old rows
def _old_row(c: TestClient, now: float, node: str = "gke-a-1", cluster: str = "A") -> None:
    """A hold as stored before the cluster was part of the key: ``namespace/name``."""
    with c.app.state.services.db.write() as conn:
        conn.execute(
            reservations_table.insert().values(
                pod_key="prod/trainer-0",
                pod_uid="uid-A",
                cluster=cluster,
                node=node,
                gpus=[0, 1, 2],
                gpu_milli=1000,
                cpu_milli=1000,
                memory_mib=1024,
                created_ts=now,
                expires_ts=now + TTL,
                bound_ts=None,
            )  # fmt: skip
        )


def test_old_rows_are_held_bound_released_and_expire(app: Any) -> None:
    c, clock = app
    res = c.app.state.services.reservations
    _old_row(c, clock.t)
    assert _holds(c) == {("A", "prod/trainer-0", "gke-a-1", "uid-A")}
    # it holds A's GPUs, and B's same-named pod neither replaces nor ends it
    assert _filter(c, "other-0", "o", 3, ["gke-a-1"])["NodeNames"] == []
    assert _filter(c, POD, "uid-B", 3, ["gke-b-1"])["NodeNames"] == ["gke-b-1"]
    assert {h[0] for h in _holds(c)} == {"A", "B"}
    # /bound finds it in A (by the node's cluster)
    assert _bound(c, "gke-a-1", "uid-A") == "held"
    assert {r["cluster"]: r["bound_ts"] for r in res.rows()}["A"] == clock.t
    # release by cluster finds it too
    assert res.release("prod/trainer-0", cluster="A")
    assert {h[0] for h in _holds(c)} == {"B"}
    # the pod's next hold in A replaces an old row (one row, the new key)
    _old_row(c, clock.t)
    assert _filter(c, POD, "uid-A", 3, ["gke-a-1"])["NodeNames"] == ["gke-a-1"]
    with c.app.state.services.db.read() as conn:
        keys = sorted(r.pod_key for r in conn.execute(reservations_table.select()))
    assert keys == ["A/prod/trainer-0", "B/prod/trainer-0"]
    # an old row nobody binds expires by its TTL, and the next write deletes it
    assert res.release("prod/trainer-0")
    _old_row(c, clock.t, node="gke-a-2")
    clock.t += TTL + 1
    assert _holds(c) == set()
    assert _filter(c, "other-0", "o", 3, ["gke-a-2"])["NodeNames"] == ["gke-a-2"]
    with c.app.state.services.db.read() as conn:
        keys = sorted(r.pod_key for r in conn.execute(reservations_table.select()))
    assert keys == ["A/prod/other-0"]


# ------------------------------------------------------------------------------ key form
@pytest.mark.parametrize(
    ("cluster", "key"),
    [
        ("A", "prod/trainer-0"),
        ("gke_proj_us-central1_prod/x", "prod/trainer-0"),  # a cluster name with '/'
        ("c" * 256, "n" * 63 + "/" + "p" * 253),  # the longest pod key, a long cluster
        ("c" * 256, "prod/trainer-0"),
        ("placement:x", "prod/trainer-0"),
    ],
)
def test_stored_keys_fit_and_read_back(cluster: str, key: str) -> None:
    stored = stored_key(cluster, key)
    assert len(stored) <= MAX_KEY_CHARS
    assert stored != key and stored.endswith("/" + key)
    assert pod_name(stored, cluster) == key
    assert pod_name(key, cluster) == key  # an old row reads as the pod's own key
    assert stored_key(cluster, "placement:job-1") == "placement:job-1"
    assert pod_name("placement:job-1", cluster) == "placement:job-1"
