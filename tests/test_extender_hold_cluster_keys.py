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
import hashlib
import os
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from serving_helpers import serving_settings

from fleetmind.serving.app import create_app
from fleetmind.serving.scheduler.placement import Option
from fleetmind.serving.scheduler.reservations import (
    DIGEST_PREFIX,
    JOB_KEY_PREFIX,
    MAX_KEY_CHARS,
    DbReservations,
    job_key,
    pod_name,
    reservations_table,
    stored_key,
)
from fleetmind.serving.schemas import JobSpec
from fleetmind.serving.telemetry.base import FleetSnapshot, GpuState, NodeState, TelemetrySource
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
    settings = serving_settings(tmp_path, reservation_ttl_s=TTL, reservation_bound_grace_s=GRACE)
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
    assert "held for pods FleetMind placed" in out["FailedNodes"]["gke-a-1"]
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
    settings = serving_settings(tmp_path, scheduler_cluster="B")
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
        ("#x", "prod/trainer-0"),
        ("", "prod/trainer-0"),
    ],
)
def test_stored_keys_fit_and_read_back(cluster: str, key: str) -> None:
    stored = stored_key(cluster, key)
    assert len(stored) <= MAX_KEY_CHARS
    assert stored != key and not stored.startswith(JOB_KEY_PREFIX)
    # the pod key as it is, or packed after a digest (the longest pod key in a long cluster)
    assert stored.endswith("/" + key) or stored.startswith(DIGEST_PREFIX)
    assert pod_name(stored, cluster) == key
    assert pod_name(key, cluster) == key  # an old row reads as the pod's own key
    assert stored_key(cluster, "placement:job-1") == "placement:job-1"
    assert pod_name("placement:job-1", cluster) == "placement:job-1"


# --------------------------------------------- /bound: a node telemetry does not know (yet)
SPEC = JobSpec(num_gpu=3, gpu_milli=1000, cpu_milli=1000, memory_mib=1024)


@pytest.fixture(params=["sqlite", "postgresql"])
def db_app(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[TestClient]:
    """The service (scheduler cluster unset) on SQLite and on PostgreSQL, no telemetry set."""
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path}/holds.db"
    else:
        pg = request.getfixturevalue("pg")
        pg.psql("DROP SCHEMA public CASCADE; CREATE SCHEMA public")
        url = pg.url
    with TestClient(create_app(serving_settings(tmp_path, database_url=url))) as c:
        res = c.app.state.services.reservations
        assert isinstance(res, DbReservations)
        with c.app.state.services.db.write() as conn:
            conn.execute(reservations_table.delete())
        yield c


def test_bound_to_a_node_missing_from_telemetry_guesses_no_cluster(db_app: TestClient) -> None:
    """Cluster A's telemetry is missing from the snapshot a while (its Prometheus or federation
    target down): ``/bound`` of A's pod (no uid) to A's node ``gke-a-1`` took the node for the
    only cluster the snapshot had (B) and dropped B's same-named hold as ``moved``. Now the node's
    cluster is unknown, so the hold on that node (A's) is the pod's, and B's stays."""
    c = db_app
    s = c.app.state.services
    res = s.reservations
    assert res.hold("prod/trainer-0", Option("A", "gke-a-1", (0, 1, 2), 0.0), SPEC)
    assert res.hold("prod/trainer-0", Option("B", "gke-b-1", (0, 1, 2), 0.0), SPEC)
    s.telemetry = SimSource([_node("B", "gke-b-1"), _node("B", "gke-b-2")])
    s.telemetry.snapshot()  # the snapshot the extender's calls read: B only
    assert _bound(c, "gke-a-1", None) == "held"
    held = {(r["cluster"], r["node"], r["bound_ts"] is not None) for r in res.rows()}
    assert held == {("A", "gke-a-1", True), ("B", "gke-b-1", False)}


class CountingSource(TelemetrySource):
    """Telemetry that counts its reads (a slow Prometheus: ``/bound`` must not wait on one)."""

    name = "counting"

    def __init__(self, nodes: list[NodeState]) -> None:
        super().__init__(ttl_s=0.0)  # every snapshot() reads again
        self.nodes = nodes
        self.reads = 0

    def collect(self) -> FleetSnapshot:
        self.reads += 1
        return FleetSnapshot(source=self.name, nodes=self.nodes)


def test_bound_reads_no_telemetry(app: Any) -> None:
    """``/bound`` read a snapshot (``telemetry.snapshot()``: with the cache expired, a collect
    that kube-scheduler's binding call waited on, Prometheus taking seconds) and looked it up in
    the extender's node index outside ``Services.place_lock``. It now reads the last snapshot
    read, and no collect runs: with none read yet, the pod's uid or node tells its hold."""
    c, _ = app
    s = c.app.state.services
    res = s.reservations
    assert res.hold("prod/trainer-0", Option("A", "gke-a-1", (0, 1, 2), 0.0), SPEC, uid="uid-A")
    assert res.hold("prod/trainer-0", Option("B", "gke-b-1", (0, 1, 2), 0.0), SPEC, uid="uid-B")
    src = s.telemetry = CountingSource(_fleet())
    assert _bound(c, "gke-a-1", "uid-A") == "held"  # nothing read yet: by uid
    assert src.reads == 0
    src.snapshot()  # now one is cached (and expired: ttl_s=0)
    src.reads = 0
    # B's pod bound elsewhere in B: the cached snapshot says gke-b-2 is B's, without a read
    assert _bound(c, "gke-b-2", None) == "moved"
    assert src.reads == 0
    assert {(r["cluster"], r["node"]) for r in res.rows()} == {("A", "gke-a-1")}


# ----------------------------------------------------------------------- long keys, odd names
LONGEST = "n" * 63 + "/" + "p" * 253
"""The longest pod key: a namespace of 63 characters, a name of 253."""


def _old_digest(cluster: str) -> str:
    """The two hex digits that stood for a cluster beside the longest pod key before (blake2b,
    8 bytes, cut to the room left: 320 - 1 - 317)."""
    return hashlib.blake2b(cluster.encode(), digest_size=8).hexdigest()[:2]


def test_long_keys_of_two_clusters_hold_apart(migrated_db: Any) -> None:
    """Beside the longest pod key a cluster stood as 2 hex digits of its digest: 1 in 256 pairs
    of clusters shared them, and one's hold replaced the other's. Two such clusters (found with
    the former digest), and a cluster literally named as another's former digest, now hold
    apart, and each pod key reads back."""
    res = DbReservations(migrated_db, ttl_s=TTL, clock=Clock())
    seen: dict[str, str] = {}
    for i in range(300):  # more clusters than 2 hex digits tell apart
        c = f"cluster-{i}"
        if _old_digest(c) in seen:
            c1, c2 = seen[_old_digest(c)], c
            break
        seen[_old_digest(c)] = c
    literal = _old_digest("prod-east")  # "prod-east" stood as this; a cluster of that name
    holds = [(c1, "n1", "u1"), (c2, "n2", "u2"), ("prod-east", "n3", "u3"), (literal, "n4", "u4")]
    for cluster, node, uid in holds:
        assert res.hold(LONGEST, Option(cluster, node, (0, 1, 2), 0.0), SPEC, uid=uid)
    rows = {(r["cluster"], r["pod_key"], r["node"], r["pod_uid"]) for r in res.rows()}
    assert rows == {(c, LONGEST, n, u) for c, n, u in holds}
    # /bound in one cluster ends that cluster's hold only; release too
    assert res.bound(LONGEST, "n9", uid="u1", cluster=c1) == "moved"
    assert res.release(LONGEST, cluster="prod-east")
    assert {r["cluster"] for r in res.rows()} == {c2, literal}
    # without the cluster, the hold on the node is the pod's (the packed key is found)
    assert res.bound(LONGEST, "n2", cluster=None) == "held"
    assert res.release(LONGEST)
    assert res.rows() == []


def test_a_cluster_named_like_a_job_key_holds_no_job(migrated_db: Any) -> None:
    """Pod ``prod/trainer-0`` of a cluster named ``placement:x`` was stored under
    ``placement:x/prod/trainer-0``: the job key of job ``x/prod/trainer-0``. The pod's hold
    replaced the job's (and ``release`` of the job dropped the pod's). No pod's stored key starts
    with the job prefix now (:data:`JOB_KEY_PREFIX`)."""
    res = DbReservations(migrated_db, ttl_s=TTL, clock=Clock())
    job = JobSpec(job_id="x/prod/trainer-0", num_gpu=2, gpu_milli=1000)
    res.book(Option("other", "n9", (0, 1), 0.0), job)
    pod = JobSpec(num_gpu=1, gpu_milli=1000)
    assert res.hold("prod/trainer-0", Option("placement:x", "n1", (0,), 0.0), pod, uid="u")
    rows = {(r["pod_key"], r["cluster"], r["node"]) for r in res.rows()}
    assert rows == {
        (job_key("x/prod/trainer-0"), "other", "n9"),
        ("prod/trainer-0", "placement:x", "n1"),
    }
    assert not stored_key("placement:x", "prod/trainer-0").startswith(JOB_KEY_PREFIX)
    assert res.release(job_key("x/prod/trainer-0"))
    assert {(r["pod_key"], r["cluster"]) for r in res.rows()} == {("prod/trainer-0", "placement:x")}
    assert res.bound("prod/trainer-0", "n1", uid="u", cluster="placement:x") == "held"


def test_stored_keys_are_one_per_cluster_and_pod() -> None:
    """No two (cluster, pod key) pairs share a stored key, none is a job key, an old row's key
    (``namespace/name``) or longer than the column, and each reads back: clusters named like
    other clusters' digest keys, like job keys, with ``/``, empty, and of every length (seeded)."""
    rng = random.Random(0)
    keys = [LONGEST, "prod/trainer-0", "p/" + "q" * 280, "a/b", "n" * 63 + "/" + "x." * 126 + "y"]
    clusters = ["", "A", "a/b", "placement:", "placement:x", "#", "x" * 256]
    clusters += [stored_key("c" * 300, k).split("/")[0] for k in keys[1:]]  # "#<digest>" names
    clusters += [stored_key(f"k{i}" * 40, LONGEST)[:256] for i in range(3)]
    clusters += ["".join(rng.choices("ab/#:~-", k=rng.randint(1, 256))) for _ in range(200)]
    clusters += [_old_digest(f"cluster-{i}") for i in range(50)]
    seen: dict[str, tuple[str, str]] = {}
    for cluster in dict.fromkeys(clusters):
        for key in keys:
            stored = stored_key(cluster, key)
            assert seen.setdefault(stored, (cluster, key)) == (cluster, key)
            assert len(stored) <= MAX_KEY_CHARS and stored.count("/") != 1
            assert not stored.startswith(JOB_KEY_PREFIX)
            assert pod_name(stored, cluster) == key


def test_a_uidless_bound_to_a_node_of_no_known_cluster_drops_no_hold(
    app: tuple[TestClient, Clock],
) -> None:
    """Cluster A holds its ``prod/trainer-0``; the last snapshot lists cluster A only (B's
    Prometheus target down, or none read yet after a restart) and B's own ``prod/trainer-0`` is
    bound to B's node without a ``PodUID``. Nothing ties that call to A's hold: the answer is
    ``unknown`` and A's GPUs stay held (it used to be ``moved``, A's hold dropped, because all
    holds of that name were in one cluster)."""
    c, _ = app
    s = c.app.state.services
    assert _filter(c, POD, "uid-A", 3, ["gke-a-1"])["NodeNames"] == ["gke-a-1"]
    s.telemetry = SimSource([_node("A", "gke-a-1"), _node("A", "gke-a-2")])
    s.telemetry.snapshot()
    assert _bound(c, "gke-b-1", None) == "unknown"
    assert {h[0] for h in _holds(c)} == {"A"}
