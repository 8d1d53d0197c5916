"""The extender and kube-scheduler's preemption: a preemptor retried on the node it was nominated
to must pass there once the victims are gone.

kube-scheduler's ``DefaultPreemption`` (``pkg/scheduler/framework/plugins/defaultpreemption``)
evicts pods of lower priority on one node, sets the preemptor's ``status.nominatedNodeName`` to
it and tries the pod again once the victims are gone; an extender's ``FailedNodes`` count as ``Unschedulable``
(``findNodesThatPassExtenders``), so a node FleetMind fails on that retry sends kube-scheduler to
preempt again on another node (``DryRunPreemption``: a second, needless eviction). Two causes:

* the snapshot: stale-while-refresh served one up to ``FLEETMIND_TELEMETRY_TTL_S +
  FLEETMIND_TELEMETRY_MAX_STALE_S`` old, from before the eviction, to that retry; it now reads a
  snapshot no older than the TTL (joining the refresh under way), other pods still never wait;
* a hold of the evicted pod (made for it when one node passed), which nothing ended before the
  reservation TTL (120 s): holds now record ``spec.priority``, and the holds of lower priority on
  the nominated node do not count for the preemptor, where kube-scheduler counts both pods'
  requests itself (CPU, memory, ``nvidia.com/gpu``, MIG devices). A GPU share of the
  ``alibabacloud.com/gpu-milli`` annotations (kube-scheduler does not count it: a share pod that
  was not evicted keeps its share) and a ``reserve: true`` job's hold always count.

While telemetry is down, a nominated call makes at most one read (for a TTL after one failed,
none beyond what any call makes), so it stays within kube-scheduler's 5 s extender
``httpTimeout``. Lower-priority holds are left out only where the nominated node carries nothing
kube-scheduler's device count cannot see (no share or job hold, no GPU read partly used).

The bodies are ``ExtenderArgs`` as kube-scheduler sends them
(``k8s.io/kube-scheduler/extender/v1`` ``types.go``: ``Pod``, ``Nodes`` null with
``nodeCacheCapable``, ``NodeNames``), the Pod a ``v1.Pod`` in its JSON form
(``k8s.io/api/core/v1`` ``types.go``: ``spec.priority`` ``*int32``, ``status.nominatedNodeName``).
Deterministic: a fake clock for the telemetry cache, events (no sleeps) for the refresh threads.
"""

from __future__ import annotations

import os
import threading
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from serving_helpers import serving_settings
from sqlalchemy import create_engine, insert, inspect, select

from fleetmind.data.errors import NotAvailableError
from fleetmind.serving import migrations
from fleetmind.serving.app import create_app
from fleetmind.serving.db import Database, reservations
from fleetmind.serving.scheduler.reservations import DbReservations, reservations_table
from fleetmind.serving.telemetry import base
from fleetmind.serving.telemetry.base import FleetSnapshot, GpuState, NodeState, TelemetrySource

os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")

FILTER = "/api/v1/scheduler/filter"
TTL_S, MAX_STALE_S = 5.0, 30.0


class Clock:
    """Unix seconds, moved by hand (the telemetry cache's clock)."""

    def __init__(self) -> None:
        self.t = 1_800_000_000.0

    def __call__(self) -> float:
        return self.t


def _node(name: str, busy: bool) -> NodeState:
    """One node of one A100: all taken (``busy``, a victim's pod runs there) or idle."""
    gpu = GpuState(0, "A100", mem_total_mib=81920, mem_used_mib=70000 if busy else 500,
                   util_pct=95 if busy else 0, free_milli=0 if busy else 1000)  # fmt: skip
    return NodeState(
        name=name,
        cluster="local",
        gpus=[gpu],
        cpu_milli=64_000,
        cpu_milli_free=64_000,
        memory_mib=262_144,
        memory_mib_free=262_144,
        pods=frozenset(),
        pod_uids=frozenset(),
        gpu_pods=frozenset(),
        pending_pods=frozenset(),
    )


class Prometheus(TelemetrySource):
    """Stale-while-refresh as with ``prometheus`` telemetry; ``busy`` nodes read fully taken.
    ``gate``, when given, blocks the background refresh's :meth:`collect` until it is set (a
    slow read); a caller's own read is not held up."""

    name = "fake-prometheus"

    def __init__(self, clock: Clock, busy: set[str]) -> None:
        super().__init__(ttl_s=TTL_S, max_stale_s=MAX_STALE_S)
        self.clock, self.busy = clock, busy
        self.reads = 0
        self.tries = 0  # reads made by callers themselves (not the background refresh), failed too
        self.gate: threading.Event | None = None
        self.entered = threading.Event()
        self.down = False

    def collect(self) -> FleetSnapshot:
        background = threading.current_thread().name.startswith("fleetmind-telemetry")
        if background:
            self.entered.set()
        else:
            self.tries += 1
        if self.gate is not None and background:
            assert self.gate.wait(10), "the test never let the read finish"
        if self.down:
            raise NotAvailableError("Prometheus did not answer")
        self.reads += 1
        nodes = [_node(n, n in self.busy) for n in ("gpu-a", "gpu-b")]
        return FleetSnapshot("prometheus", nodes, self.clock())


def _args(
    name: str, nodes: list[str], priority: int | None = None, nominated: str | None = None
) -> dict[str, Any]:
    """``ExtenderArgs`` of a pod asking one whole GPU (as kube-scheduler sends it)."""
    res = {"requests": {"cpu": "4", "memory": "16Gi", "nvidia.com/gpu": "1"},
           "limits": {"nvidia.com/gpu": "1"}}  # fmt: skip
    spec: dict[str, Any] = {"containers": [{"name": "main", "image": "x", "resources": res}]}
    if priority is not None:
        spec["priority"] = priority
    status: dict[str, Any] = {"phase": "Pending"}
    if nominated is not None:
        status["nominatedNodeName"] = nominated
    pod = {
        "metadata": {"name": name, "namespace": "ml", "uid": "uid-" + name},
        "spec": spec,
        "status": status,
    }
    return {"Pod": pod, "Nodes": None, "NodeNames": nodes}


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    c = Clock()
    monkeypatch.setattr(base, "time", types.SimpleNamespace(time=c))  # the cache's clock only
    monkeypatch.setattr(base, "monotonic", c)  # the cache ages snapshots on monotonic()
    return c


@pytest.fixture
def client(tmp_path: Path) -> Iterator[TestClient]:
    with TestClient(create_app(serving_settings(tmp_path))) as c:
        assert isinstance(c.app.state.services.reservations, DbReservations)
        yield c


def _filter(c: TestClient, args: dict[str, Any]) -> dict[str, Any]:
    r = c.post(FILTER, json=args)
    assert r.status_code == 200, r.text
    return r.json()


# --------------------------------------------------------------------------- the stale snapshot


def _evicted(client: TestClient, clock: Clock) -> Prometheus:
    """gpu-a's victim evicted after the last read, which is now 10 s old (past the TTL, well
    within the stale bound); background refreshes hang until ``gate`` is set."""
    src = Prometheus(clock, busy={"gpu-a", "gpu-b"})
    client.app.state.services.telemetry = src
    src.snapshot()  # the read before the eviction
    src.busy.discard("gpu-a")  # preemption evicted the victim on gpu-a
    clock.t += TTL_S + 5
    src.gate = threading.Event()
    return src


def test_a_nominated_pod_is_decided_on_a_fresh_snapshot(client: TestClient, clock: Clock) -> None:
    """The preemptor nominated to gpu-a passes there at once; it used to be decided on the stale
    snapshot, fail gpu-a, and kube-scheduler preempted again on gpu-b."""
    src = _evicted(client, clock)
    try:
        hi = _filter(client, _args("hi", ["gpu-a", "gpu-b"], priority=1000, nominated="gpu-a"))
    finally:
        src.gate.set()
    assert hi["NodeNames"] == ["gpu-a"], hi
    assert set(hi["FailedNodes"]) == {"gpu-b"}
    assert src.reads == 2  # the start-up read and the call's own


def test_a_failed_fresh_read_falls_back_to_the_stale_snapshot(
    client: TestClient, clock: Clock
) -> None:
    """Prometheus down: the nominated pod is answered from the stale snapshot, as before."""
    src = _evicted(client, clock)
    src.down = True
    src.gate.set()
    hi = _filter(client, _args("hi", ["gpu-a", "gpu-b"], priority=1000, nominated="gpu-a"))
    assert hi["NodeNames"] == [] and set(hi["FailedNodes"]) == {"gpu-a", "gpu-b"}


def test_other_pods_are_still_served_the_stale_snapshot(client: TestClient, clock: Clock) -> None:
    """A pod not nominated gets the stale snapshot at once while the refresh runs (no wait)."""
    src = _evicted(client, clock)
    try:
        other = _filter(client, _args("other", ["gpu-a", "gpu-b"], priority=5))
        assert src.entered.wait(10)  # it started the background refresh, which still hangs
        assert src.reads == 1
    finally:
        src.gate.set()
    assert other["NodeNames"] == [] and set(other["FailedNodes"]) == {"gpu-a", "gpu-b"}


def test_a_nominated_node_not_among_the_candidates_waits_for_nothing(
    client: TestClient, clock: Clock
) -> None:
    """``nominatedNodeName`` naming a node not sent (kube-scheduler's filter left it out) is no
    reason to wait: the stale snapshot is served."""
    src = Prometheus(clock, busy={"gpu-b"})
    client.app.state.services.telemetry = src
    src.snapshot()
    reads = src.reads
    clock.t += TTL_S + 5
    src.gate = threading.Event()  # the background refresh hangs until the end of the test
    try:
        d = _filter(client, _args("p", ["gpu-b"], priority=1000, nominated="gpu-a"))
        assert d["NodeNames"] == [] and src.reads == reads  # stale answer, no read finished
    finally:
        src.gate.set()


def test_fresh_snapshot_joins_the_background_refresh(clock: Clock) -> None:
    """A fresh read waits for the background refresh under way and shares it: one read."""
    src = Prometheus(clock, busy={"gpu-a"})
    src.snapshot()
    clock.t += TTL_S + 1
    src.busy.clear()
    src.gate = threading.Event()
    stale = src.snapshot()  # served at once; starts the background refresh, which hangs
    assert stale.nodes[0].gpus[0].free_milli == 0
    assert src.entered.wait(10)
    out: list[FleetSnapshot] = []
    waiter = threading.Thread(target=lambda: out.append(src.fresh_snapshot()))
    waiter.start()
    waiter.join(0.2)
    assert waiter.is_alive() and not out  # it waits for the refresh, not served stale
    src.gate.set()
    waiter.join(10)
    assert out and out[0].nodes[0].gpus[0].free_milli == 1000
    assert src.reads == 2  # the start-up read and the shared refresh


# --------------------------------------------------------------------------- holds and priority


def _sim(client: TestClient) -> None:
    """Telemetry read every time (no cache) that never lists the pods: holds alone book."""

    class Sim(TelemetrySource):
        name = "sim"

        def collect(self) -> FleetSnapshot:
            return FleetSnapshot("sim", [_node("gpu-a", False), _node("gpu-b", False)])

    client.app.state.services.telemetry = Sim(ttl_s=0.0)


def test_lower_priority_holds_on_the_nominated_node_do_not_count(client: TestClient) -> None:
    """The hold of the pod kube-scheduler evicted used to fail the nominated node for every
    retry until the reservation TTL (120 s)."""
    _sim(client)
    for pod, node in (("low-a", "gpu-a"), ("low-b", "gpu-b")):
        assert _filter(client, _args(pod, [node], priority=10))["NodeNames"] == [node]
    rows = {r["pod_key"]: r for r in client.app.state.services.reservations.rows()}
    assert rows["ml/low-a"]["pod_priority"] == 10  # recorded with the hold
    # before preemption: the holds count (FailedNodes: kube-scheduler's trigger to preempt)
    first = _filter(client, _args("hi", ["gpu-a", "gpu-b"], priority=1000))
    assert first["NodeNames"] == [] and set(first["FailedNodes"]) == {"gpu-a", "gpu-b"}
    # kube-scheduler evicted low-a and nominated gpu-a: gpu-a passes, low-b's hold still counts
    retry = _filter(client, _args("hi", ["gpu-a", "gpu-b"], priority=1000, nominated="gpu-a"))
    assert retry["NodeNames"] == ["gpu-a"] and set(retry["FailedNodes"]) == {"gpu-b"}


def test_equal_or_higher_priority_holds_still_count(client: TestClient) -> None:
    """Preemption never evicts a pod of the preemptor's priority or higher; a hold without
    ``spec.priority`` is priority 0 (the Kubernetes default)."""
    _sim(client)
    assert _filter(client, _args("peer", ["gpu-a"], priority=100))["NodeNames"] == ["gpu-a"]
    assert _filter(client, _args("plain", ["gpu-b"]))["NodeNames"] == ["gpu-b"]
    same = _filter(client, _args("p", ["gpu-a"], priority=100, nominated="gpu-a"))
    assert same["NodeNames"] == [] and "gpu-a" in same["FailedNodes"]
    zero = _filter(client, _args("z", ["gpu-b"], nominated="gpu-b"))
    assert zero["NodeNames"] == [] and "gpu-b" in zero["FailedNodes"]
    one = _filter(client, _args("o", ["gpu-b"], priority=1, nominated="gpu-b"))
    assert one["NodeNames"] == ["gpu-b"]


@pytest.mark.parametrize(
    ("field", "value"),
    [("priority", "high"), ("priority", 2**31), ("priority", True), ("nominated", 5)],
)
def test_bad_priority_or_nomination_is_a_422(client: TestClient, field: str, value: Any) -> None:
    _sim(client)
    args = _args("p", ["gpu-a"], priority=value if field == "priority" else None)
    if field == "nominated":
        args["Pod"]["status"]["nominatedNodeName"] = value
    r = client.post(FILTER, json=args)
    assert r.status_code == 422, r.text
    assert "Traceback" not in r.text


def test_a_database_of_the_previous_revision_upgrades(tmp_path: Path) -> None:
    """A database at revision 0010 with a live hold gains ``pod_priority``; the old row (no
    priority: it may be a GPU share, which kube-scheduler does not count) counts for a preemptor
    of any priority."""
    from alembic import command

    url = f"sqlite:///{tmp_path}/old.db"
    engine = create_engine(url)
    with engine.connect() as conn:
        command.upgrade(migrations._config(conn), "0010")
        conn.commit()
    assert "pod_priority" not in {c["name"] for c in inspect(engine).get_columns("reservations")}
    with engine.begin() as conn:  # the statement names only the columns given: 0010's
        conn.execute(
            insert(reservations).values(
                pod_key="local/ml/old",
                pod_uid="u-old",
                cluster="local",
                node="gpu-a",
                gpus=[0],
                gpu_milli=1000,
                cpu_milli=0,
                memory_mib=0,
                created_ts=0.0,
                expires_ts=4e9,
                bound_ts=None,
            )  # fmt: skip
        )
    engine.dispose()
    db = Database(url)
    assert db.migrate() == "0010"
    with db.read() as conn:
        row = conn.execute(select(reservations_table)).one()
    assert row.pod_priority is None
    res = DbReservations(db, cache_s=0)
    assert res.view(outranks=("gpu-a", 0)).gpu_used("local", "gpu-a", 0) == 1000
    assert res.view(outranks=("gpu-a", 1)).gpu_used("local", "gpu-a", 0) == 1000
    assert res.view(outranks=("gpu-a", 2**31 - 1)).gpu_used("local", "gpu-a", 0) == 1000


# ------------------------------------------------- holds kube-scheduler does not count: always


def _share(name: str, nodes: list[str], priority: int, nominated: str | None = None) -> dict:
    """``ExtenderArgs`` of a pod asking 600 milli of one GPU by the GPU-sharing annotations only
    (``alibabacloud.com/gpu-milli`` / ``gpu-count``, as the openb trace's pods and the FGD paper's
    ``kubernetes-scheduler-simulator``, ``open-gpu-share``, read them): no ``nvidia.com/gpu``,
    so kube-scheduler's ``NodeResourcesFit`` counts no GPU of it."""
    args = _args(name, nodes, priority, nominated)
    pod = args["Pod"]
    pod["metadata"]["annotations"] = {
        "alibabacloud.com/gpu-milli": "600",
        "alibabacloud.com/gpu-count": "1",
    }
    pod["spec"]["containers"][0]["resources"] = {"requests": {"cpu": "4", "memory": "16Gi"}}
    return args


@pytest.mark.parametrize(
    ("held", "preemptor"), [("share", "share"), ("share", "device"), ("device", "share")]
)
def test_a_hold_kube_scheduler_does_not_count_is_never_outranked(
    client: TestClient, held: str, preemptor: str
) -> None:
    """A share pod that was not evicted keeps its share (nominating the node evicted another pod
    there, or none at all under KEP-5278's ``NominatedNodeNameForExpectation``): a preemptor was
    given the same GPU (1200 milli on one GPU). A device preemptor beside a held share, or a
    share preemptor beside a held device, is not checked by kube-scheduler for that GPU either."""
    _sim(client)
    make = {"share": _share, "device": _args}
    assert _filter(client, make[held]("x", ["gpu-a"], priority=0))["NodeNames"] == ["gpu-a"]
    retry = _filter(client, make[preemptor]("b", ["gpu-a"], priority=1000, nominated="gpu-a"))
    assert retry["NodeNames"] == [] and "gpu-a" in retry["FailedNodes"], retry
    rows = client.app.state.services.reservations.rows()
    assert [(r["pod_key"], r["pod_priority"]) for r in rows] == [
        ("ml/x", None if held == "share" else 0)
    ]


def test_a_reserve_true_job_hold_is_never_outranked(client: TestClient) -> None:
    """A job's hold (``placement:<job_id>``) was stored as priority 0 and left out for any
    nominated pod of priority 1 or more, which was then given the job's GPU."""
    _sim(client)
    for job in ("j1", "j2"):
        r = client.post("/api/v1/placements", json={"job_id": job, "num_gpu": 1, "reserve": True})
        assert r.status_code == 200 and r.json()["reserved"], r.text
    nominated = _filter(client, _args("b", ["gpu-a", "gpu-b"], priority=1, nominated="gpu-a"))
    assert nominated["NodeNames"] == [] and set(nominated["FailedNodes"]) == {"gpu-a", "gpu-b"}
    rows = client.app.state.services.reservations.rows()
    assert sorted((r["pod_key"], r["pod_priority"]) for r in rows) == [
        ("placement:j1", None),
        ("placement:j2", None),
    ]


def _two_gpus(client: TestClient, free: tuple[int, int]) -> None:
    """Telemetry of one node, ``gpu-a``, with two A100s reading ``free`` milli-GPUs free each."""

    def gpu(i: int) -> GpuState:
        used = 500 + (1000 - free[i]) * 80
        return GpuState(i, "A100", mem_total_mib=81920, mem_used_mib=used,
                        util_pct=0 if free[i] == 1000 else 60, free_milli=free[i])  # fmt: skip

    class Sim(TelemetrySource):
        name = "sim"

        def collect(self) -> FleetSnapshot:
            node = _node("gpu-a", False)
            node.gpus = [gpu(0), gpu(1)]
            return FleetSnapshot("sim", [node])

    client.app.state.services.telemetry = Sim(ttl_s=0.0)


def test_a_counted_hold_beside_a_share_hold_still_counts(client: TestClient) -> None:
    """A share (600 milli on GPU 0, which kube-scheduler does not count) and a priority-0 device
    pod's hold of GPU 1: kube-scheduler sees one of two devices taken, evicts nothing and
    nominates the node; leaving the device hold out handed GPU 1, or the share's GPU, to the
    preemptor, beside a pod that still runs there."""
    _two_gpus(client, (1000, 1000))
    assert _filter(client, _share("s", ["gpu-a"], priority=0))["NodeNames"] == ["gpu-a"]
    assert _filter(client, _args("a", ["gpu-a"], priority=0))["NodeNames"] == ["gpu-a"]
    nom = _filter(client, _args("b", ["gpu-a"], priority=1000, nominated="gpu-a"))
    assert nom["NodeNames"] == [] and "gpu-a" in nom["FailedNodes"], nom


def test_a_counted_hold_beside_gpu_use_only_telemetry_sees_still_counts(
    client: TestClient,
) -> None:
    """GPU 0 reads 400 milli free (a running share pod, or use outside Kubernetes: nothing
    kube-scheduler counts), a priority-0 device pod holds GPU 1: the preemptor nominated there
    was given GPU 1 while that pod, not evicted, was still to start on it."""
    _two_gpus(client, (400, 1000))
    assert _filter(client, _args("a", ["gpu-a"], priority=0))["NodeNames"] == ["gpu-a"]
    nom = _filter(client, _args("b", ["gpu-a"], priority=1000, nominated="gpu-a"))
    assert nom["NodeNames"] == [] and "gpu-a" in nom["FailedNodes"], nom


# --------------------------------------------------------------- telemetry down: one read at most


def _down(client: TestClient, clock: Clock, monkeypatch: pytest.MonkeyPatch) -> Prometheus:
    """Prometheus answered once, then stopped answering; background refreshes are recorded, not
    run (this counts the reads the calls make themselves)."""
    src = Prometheus(clock, busy={"gpu-b"})
    client.app.state.services.telemetry = src
    src.snapshot()
    src.tries = 0
    src.down = True
    monkeypatch.setattr(src, "_refresh_in_background", lambda: None)
    return src


def test_a_nominated_call_does_not_read_again_within_the_ttl_of_a_failed_read(
    client: TestClient, clock: Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Within the stale bound every nominated call made its own read (each up to
    ``FLEETMIND_TELEMETRY_TIMEOUT_S``); now the first reads, the next ones within the TTL are
    served the stale snapshot at once, and after the TTL one reads again."""
    src = _down(client, clock, monkeypatch)
    clock.t += TTL_S + 5  # past the TTL, within the stale bound
    for _ in range(3):
        hi = _filter(client, _args("hi", ["gpu-a"], priority=1000, nominated="gpu-a"))
        assert hi["NodeNames"] == ["gpu-a"]  # the stale snapshot: gpu-a was idle
    assert src.tries == 1
    src.down = False
    src.busy.add("gpu-a")
    clock.t += TTL_S  # the failure is a TTL old: read again
    hi = _filter(client, _args("hi", ["gpu-a"], priority=1000, nominated="gpu-a"))
    assert src.tries == 2 and hi["NodeNames"] == [] and "gpu-a" in hi["FailedNodes"]


def test_past_the_stale_bound_a_nominated_call_reads_once(
    client: TestClient, clock: Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Past the stale bound a failed fresh read was followed by a second read (``snapshot()``):
    two timeouts per call, 4 s at the default 2 s, near kube-scheduler's 5 s ``httpTimeout``.
    Now one read per call, and the 503 names the source's error (no traceback)."""
    src = _down(client, clock, monkeypatch)
    clock.t += TTL_S + MAX_STALE_S + 5
    for n in range(1, 4):
        r = client.post(FILTER, json=_args("hi", ["gpu-a"], priority=1000, nominated="gpu-a"))
        assert r.status_code == 503 and "did not answer" in r.text, r.text
        assert "Traceback" not in r.text
        assert src.tries == n
