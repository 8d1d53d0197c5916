"""Extender holds that cannot over-commit a GPU: filter holds the only node it passes, decisions and
holds are atomic in a process and re-checked across replicas, a pod held twice at once is one row,
and a late binding of an earlier pod of the same name leaves a recreated pod's hold alone.

Upstream reference: kube-scheduler's ``schedulePod`` (``pkg/scheduler/schedule_one.go`` in
kubernetes/kubernetes) returns the only feasible node without running prioritize ("When only one
node after predicate, just use it."), so the extender's prioritize is not called for that pod.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from serving_helpers import two_a100_hosts
from test_serving_persistence import postgres_url  # noqa: F401 (fixture)

from fleetmind.serving.app import create_app
from fleetmind.serving.db import Database
from fleetmind.serving.scheduler import extender
from fleetmind.serving.scheduler.placement import Option
from fleetmind.serving.scheduler.reservations import DbReservations, reservations_table
from fleetmind.serving.schemas import JobSpec
from fleetmind.serving.settings import Settings
from fleetmind.serving.telemetry.sim import SimSource

NODES = ("gpu-a", "gpu-b")
PRIORITIZE = "/api/v1/scheduler/prioritize"
FILTER = "/api/v1/scheduler/filter"


def _pod(name: str, milli: int | None = None, uid: str | None = None) -> dict[str, Any]:
    """A pod of one whole GPU, or a share of ``milli`` (``alibabacloud.com/gpu-milli``)."""
    limits = {"cpu": "1", "memory": "1Gi"}
    ann = {}
    if milli is None:
        limits["nvidia.com/gpu"] = "1"
    else:
        ann["alibabacloud.com/gpu-milli"] = str(milli)
    return {
        "metadata": {
            "name": name,
            "namespace": "ml",
            "uid": uid or f"uid-{name}",
            "annotations": ann,
        },
        "spec": {"containers": [{"name": "main", "resources": {"limits": limits}}]},
    }


def _args(pod: dict[str, Any]) -> dict[str, Any]:
    return {"Pod": pod, "Nodes": None, "NodeNames": list(NODES)}


def _settings(url: str) -> Settings:
    return Settings(
        database_url=url,
        rca_model="baseline:upstream-coverage",
        placement_model="heuristic:builtin-bestfit",
        incident_worker=False,
    )


@contextmanager
def _apps(url: str, n: int = 1, used: set[str] = frozenset()) -> Iterator[list[TestClient]]:
    """``n`` replicas (own apps and engines) on one database, with empty holds."""
    with ExitStack() as stack:
        clients = [stack.enter_context(TestClient(create_app(_settings(url)))) for _ in range(n)]
        for c in clients:
            c.app.state.services.telemetry = SimSource(two_a100_hosts(used=used))
            assert isinstance(c.app.state.services.reservations, DbReservations)
        with clients[0].app.state.services.db.write() as conn:
            conn.execute(reservations_table.delete())
        yield clients


def _url(request: pytest.FixtureRequest, kind: str, tmp_path: Path) -> str:
    if kind == "sqlite":
        return f"sqlite:///{tmp_path}/holds.db"
    return request.getfixturevalue("postgres_url")


def _held_milli(c: TestClient) -> Counter[tuple[str, int]]:
    """Held milli-GPU per (node, GPU), from the table."""
    per: Counter[tuple[str, int]] = Counter()
    for r in c.app.state.services.reservations.rows():
        for g in r["gpus"]:
            per[(r["node"], g)] += r["gpu_milli"]
    return per


def _top(r: Any) -> str:
    assert r.status_code == 200, r.text
    (top,) = [h["Host"] for h in r.json() if h["Score"] == 10]
    return top


# ----------------------------------------------------------------- 1. filter with one node left
def test_filter_holds_the_only_node_that_passes(tmp_path: Path) -> None:
    """kube-scheduler skips prioritize when one node passes (schedule_one.go, ``schedulePod``):
    filter must hold it, or share pods over-commit the last GPU (1800 milli on a 1000-milli GPU)."""
    with _apps(f"sqlite:///{tmp_path}/f.db", used={"gpu-a"}) as (c,):
        out = c.post(FILTER, json=_args(_pod("share-1", 600))).json()
        assert out["NodeNames"] == ["gpu-b"]
        rows = c.app.state.services.reservations.rows()
        assert [(r["pod_key"], r["node"], r["gpu_milli"]) for r in rows] == [
            ("ml/share-1", "gpu-b", 600)
        ]
        # the next share pod no longer fits there
        out = c.post(FILTER, json=_args(_pod("share-2", 600))).json()
        assert out["NodeNames"] == []
        assert "held for pods FleetMind placed" in out["FailedNodes"]["gpu-b"]
        # the held pod, retried, is not blocked by its own hold; prioritize replaces the hold
        assert c.post(FILTER, json=_args(_pod("share-1", 600))).json()["NodeNames"] == ["gpu-b"]
        assert _top(c.post(PRIORITIZE, json=_args(_pod("share-1", 600)))) == "gpu-b"
        assert _held_milli(c) == Counter({("gpu-b", 0): 600})


def test_filter_with_several_nodes_passing_holds_nothing(tmp_path: Path) -> None:
    """With two nodes passing, prioritize follows and holds; filter writes nothing."""
    with _apps(f"sqlite:///{tmp_path}/f.db") as (c,):
        out = c.post(FILTER, json=_args(_pod("job-1"))).json()
        assert out["NodeNames"] == list(NODES)
        assert c.app.state.services.reservations.rows() == []


# ------------------------------------------------------------ 2. concurrent decide-and-hold
@pytest.mark.parametrize("kind", ["sqlite", "postgresql"])
def test_a_decision_overtaken_by_another_replica_is_made_again(
    request: pytest.FixtureRequest, kind: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Replica B decides and holds pod-2 while replica A is between deciding pod-1 and holding it
    (injected interleaving): A's hold re-reads the node in its transaction, finds the GPU taken and
    decides again; the two pods end on different GPUs."""
    with _apps(_url(request, kind, tmp_path), n=2) as (a, b):
        real = extender.decide
        nested: list[Any] = []

        def decide(*args: Any, **kw: Any) -> Any:
            out = real(*args, **kw)
            if not nested:  # A's first decision: B overtakes it before A holds
                nested.append(None)
                nested[0] = b.post(PRIORITIZE, json=_args(_pod("job-2")))
            return out

        monkeypatch.setattr(extender, "decide", decide)
        first = _top(a.post(PRIORITIZE, json=_args(_pod("job-1"))))
        second = _top(nested[0])
        assert first != second
        held = _held_milli(a)
        assert held == Counter({("gpu-a", 0): 1000, ("gpu-b", 0): 1000})


def test_one_process_decides_and_holds_one_pod_at_a_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two prioritize calls in one process: the second starts while the first is between deciding
    and holding. It must wait (``Services.place_lock``) and decide on the first one's hold."""
    events: list[str] = []
    with _apps(f"sqlite:///{tmp_path}/p.db") as (c,):
        real_decide, real_hold = extender.decide, DbReservations.hold
        second: dict[str, Any] = {}

        def run_second() -> None:
            second["r"] = c.post(PRIORITIZE, json=_args(_pod("job-2")))

        worker = threading.Thread(target=run_second)

        def decide(args: Any, *rest: Any, **kw: Any) -> Any:
            out = real_decide(args, *rest, **kw)
            events.append(f"decide {args['Pod']['metadata']['name']}")
            if not worker.is_alive() and "r" not in second:
                worker.start()
                worker.join(timeout=1.0)  # bounded: with the lock it waits for us
            return out

        def hold(self: DbReservations, key: str, *args: Any, **kw: Any) -> bool:
            events.append(f"hold {key.split('/')[1]}")
            return real_hold(self, key, *args, **kw)

        monkeypatch.setattr(extender, "decide", decide)
        monkeypatch.setattr(DbReservations, "hold", hold)
        first = _top(c.post(PRIORITIZE, json=_args(_pod("job-1"))))
        worker.join()
        assert first != _top(second["r"])
        assert events == ["decide job-1", "hold job-1", "decide job-2", "hold job-2"]
        assert _held_milli(c) == Counter({("gpu-a", 0): 1000, ("gpu-b", 0): 1000})


# ------------------------------------------------------- 3. the same pod held twice at once
def test_the_same_pod_held_at_once_on_postgresql_is_one_row(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Replica A's hold of a pod is inserted but not committed when replica B holds the same pod
    (kube-scheduler retried after its httpTimeout). B waits for A, then replaces A's row: no unique
    violation (it was a 422 "the database refused the reservation's values")."""
    import psycopg

    url = request.getfixturevalue("postgres_url")
    dbs = [Database(url), Database(url)]
    try:
        for d in dbs:
            d.migrate()
        with dbs[0].write() as conn:
            conn.execute(reservations_table.delete())
        res_a, res_b = DbReservations(dbs[0]), DbReservations(dbs[1])
        in_tx, go = threading.Event(), threading.Event()
        real_write = dbs[0].write

        @contextmanager
        def paused_write() -> Iterator[Any]:
            with real_write() as conn:
                yield conn
                in_tx.set()  # A's statements ran; its commit waits for B to be waiting
                assert go.wait(60)

        monkeypatch.setattr(dbs[0], "write", paused_write)
        job = JobSpec(job_id="ml/same", num_gpu=1, cpu_milli=1000, memory_mib=1024)
        errors: list[BaseException] = []

        def hold(res: DbReservations, node: str) -> None:
            try:
                res.hold("ml/same", Option("k8s", node, (0,), 0.0), job, uid="uid-same")
            except BaseException as err:  # noqa: BLE001 - reported by the assertion below
                errors.append(err)

        ta = threading.Thread(target=hold, args=(res_a, "gpu-a"))
        ta.start()
        assert in_tx.wait(60)
        tb = threading.Thread(target=hold, args=(res_b, "gpu-b"))
        tb.start()
        pg = url.replace("postgresql+psycopg://", "postgresql://")
        with psycopg.connect(pg, autocommit=True) as conn:
            for _ in range(600):  # until B's transaction waits on A's (at most 60 s)
                n = conn.execute(
                    "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
                ).fetchone()
                if n and n[0]:
                    break
                threading.Event().wait(0.1)
        go.set()
        ta.join()
        tb.join()
        assert errors == []
        rows = res_a.rows()
        assert [(r["pod_key"], r["node"]) for r in rows] == [("ml/same", "gpu-b")]
    finally:
        for d in dbs:
            d.dispose()


# ------------------------------------------------------------- 4. /bound of an earlier pod
def test_a_late_binding_of_an_earlier_pod_leaves_the_new_pods_hold(tmp_path: Path) -> None:
    """``ml/job-1`` was deleted and recreated (new uid); the old pod's late ``/bound`` must not mark
    the new pod's hold as bound (it would end within the grace period)."""
    with _apps(f"sqlite:///{tmp_path}/b.db") as (c,):
        node = _top(c.post(PRIORITIZE, json=_args(_pod("job-1", uid="uid-new"))))
        bind = {"PodName": "job-1", "PodNamespace": "ml", "Node": node}
        r = c.post("/api/v1/scheduler/bound", json={**bind, "PodUID": "uid-old"})
        assert r.status_code == 200 and r.json() == {"Error": "", "Outcome": "unknown"}
        (row,) = c.app.state.services.reservations.rows()
        assert row["bound_ts"] is None and row["pod_uid"] == "uid-new"
        r = c.post("/api/v1/scheduler/bound", json={**bind, "PodUID": "uid-new"})
        assert r.json()["Outcome"] == "held"


def test_a_binding_without_uid_still_ends_the_hold(tmp_path: Path) -> None:
    with _apps(f"sqlite:///{tmp_path}/b.db") as (c,):
        node = _top(c.post(PRIORITIZE, json=_args(_pod("job-1"))))
        r = c.post(
            "/api/v1/scheduler/bound", json={"PodName": "job-1", "PodNamespace": "ml", "Node": node}
        )
        assert r.json()["Outcome"] == "held"
