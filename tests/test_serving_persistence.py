"""Persistence against SQLite (WAL) and a real PostgreSQL: durable idempotent writes, resolved
close-out, incident state across restarts, concurrent writers, the leader lock.

PostgreSQL: a throwaway cluster is created in a temporary folder with ``initdb``/``pg_ctl`` (as the
``postgres`` user when the tests run as root) on a free loopback port; skipped with the reason when
the binaries are absent (Debian package ``postgresql``).
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from serving_helpers import alert, free_port, webhook

from fleetmind.serving.db import Database, LeaderLock
from fleetmind.serving.defaults.example import build_example_graph
from fleetmind.serving.graphstore import GraphStore
from fleetmind.serving.incidents import IncidentManager
from fleetmind.serving.registry import ModelRegistry
from fleetmind.serving.routers.alerts import alert_row
from fleetmind.serving.schemas import AlertIn


def _pg_bin() -> Path | None:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    if found:
        return Path(found[-1]).parent
    initdb = shutil.which("initdb")
    return Path(initdb).parent if initdb else None


@pytest.fixture(scope="module")
def postgres_url() -> Iterator[str]:
    bindir = _pg_bin()
    if bindir is None:
        pytest.skip("PostgreSQL binaries not installed (Debian package postgresql)")
    import psycopg  # noqa: F401  (a declared dependency: fail loudly if it is missing)

    root = Path(tempfile.mkdtemp(prefix="fleetmind-pg-"))
    data = root / "data"
    prefix: list[str] = []
    if os.geteuid() == 0:
        runuser = shutil.which("runuser")
        if runuser is None:
            pytest.skip("running as root without runuser: cannot start PostgreSQL as another user")
        shutil.chown(root, "postgres", "postgres")
        os.chmod(root, 0o700)
        prefix = [runuser, "-u", "postgres", "--"]
    port = free_port()

    def run(*args: str) -> None:
        out = subprocess.run([*prefix, *args], capture_output=True, text=True)
        if out.returncode != 0:
            raise RuntimeError(f"{args[0]} failed: {out.stdout}{out.stderr}")

    run(
        str(bindir / "initdb"),
        "-D",
        str(data),
        "-U",
        "postgres",
        "-A",
        "trust",
        "--no-sync",
        "-E",
        "UTF8",
    )
    opts = f"-p {port} -k {root} -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=100"
    run(str(bindir / "pg_ctl"), "-D", str(data), "-l", str(root / "log"), "-o", opts, "-w", "start")
    try:
        yield f"postgresql+psycopg://postgres@127.0.0.1:{port}/postgres"
    finally:
        subprocess.run(
            [*prefix, str(bindir / "pg_ctl"), "-D", str(data), "-m", "immediate", "stop"],
            capture_output=True,
        )
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(params=["sqlite", "postgresql"])
def db(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Database]:
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path}/p.db"
    else:
        url = request.getfixturevalue("postgres_url")
    d = Database(url)
    if request.param == "postgresql":
        from fleetmind.serving.db import metadata

        metadata.drop_all(d.engine)  # each test starts from empty tables
        with d.engine.begin() as conn:
            from sqlalchemy import text

            conn.execute(text("DROP TABLE IF EXISTS alembic_version"))
    d.create_all()
    yield d
    d.dispose()


def rows(*alerts: dict) -> list[dict]:
    return [alert_row(AlertIn.model_validate(a), 1000.0) for a in alerts]


GPU = {"alertname": "GpuXid", "cluster": "c0", "node": "c0-h1", "gpu": "3"}
HOST = {"alertname": "HostDown", "cluster": "c0", "node": "c0-h1"}


def test_store_is_idempotent_and_resolves(db: Database) -> None:
    a = alert(GPU, fingerprint="f1")
    db.store_alerts(rows(a, alert(HOST, fingerprint="f2")))
    db.store_alerts(rows(a))  # re-delivery
    assert db.count_alerts() == 2
    db.store_alerts(rows(alert(GPU, fingerprint="f1", status="resolved")))
    assert db.count_alerts() == 2 and db.count_alerts("resolved") == 1
    (r,) = db.list_alerts(status="resolved")
    assert r["fingerprint"] == "f1" and r["ends_ts"] is not None and r["pending"]


def test_incidents_survive_restart(db: Database) -> None:
    graph = build_example_graph()
    reg = ModelRegistry("baseline:upstream-coverage", "heuristic:builtin-bestfit")
    reg.load()
    m1 = IncidentManager(db, GraphStore(graph, "t"), reg)
    db.store_alerts(rows(alert(GPU), alert(HOST)))
    assert m1.process_pending() == 2
    (inc,) = db.list_incidents()
    assert inc["alert_count"] == 2 and inc["causes"] and inc["causes"][0]["path"]

    # a new process (fresh manager, fresh engine) continues the same incident
    db2 = Database(db.url)
    m2 = IncidentManager(db2, GraphStore(graph, "t"), reg)
    m2.load_open()
    assert m2.open_count == 1
    db2.store_alerts(
        rows(alert({"alertname": "GpuXid", "cluster": "c0", "node": "c0-h1", "gpu": "4"}))
    )
    m2.process_pending()
    (inc2,) = db2.list_incidents()
    assert inc2["id"] == inc["id"] and inc2["alert_count"] == 3
    db2.dispose()


def test_concurrent_writers_lose_nothing(db: Database) -> None:
    errors: list[Exception] = []

    def writer(w: int) -> None:
        try:
            for b in range(10):
                db.store_alerts(
                    rows(*[alert(GPU, fingerprint=f"w{w}-b{b}-{i}") for i in range(20)])
                )
        except Exception as err:  # pragma: no cover - reported below
            errors.append(err)

    threads = [threading.Thread(target=writer, args=(w,)) for w in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == [] and db.count_alerts() == 4 * 10 * 20


def test_duplicate_keys_in_one_webhook(db: Database, tmp_path: Path) -> None:
    from fastapi.testclient import TestClient

    from fleetmind.serving.app import create_app
    from fleetmind.serving.settings import Settings

    settings = Settings(
        database_url=db.url,
        rca_model="baseline:upstream-coverage",
        placement_model="heuristic:builtin-bestfit",
        incident_worker=False,
    )
    with TestClient(create_app(settings)) as c:
        a = alert(GPU, fingerprint="dup")
        r = c.post(
            "/api/v1/alerts", json=webhook([a, a, alert(GPU, fingerprint="dup", status="resolved")])
        )
        assert r.status_code == 200
        (stored,) = c.get("/api/v1/alerts").json()
        assert stored["status"] == "resolved"


def test_leader_lock_has_one_holder(db: Database) -> None:
    first, second = LeaderLock(db), LeaderLock(Database(db.url))
    assert first.acquire()
    assert not second.acquire()
    first.release()
    assert second.acquire()
    second.release()


def test_incident_counts_in_one_batch_match_the_alerts(db: Database) -> None:
    """Counts are refreshed for all touched incidents at once: each equals a direct count of its
    alerts, through new alerts, resolutions and an incident whose alerts all resolve."""
    from sqlalchemy import func, select

    from fleetmind.serving.db import alerts

    graph = build_example_graph()
    reg = ModelRegistry("baseline:upstream-coverage", "heuristic:builtin-bestfit")
    reg.load()
    m = IncidentManager(db, GraphStore(graph, "t"), reg)
    c0 = [alert({**GPU, "gpu": str(g)}, fingerprint=f"a{g}") for g in range(4)]
    c1 = [
        alert({"alertname": "GpuXid", "cluster": "c1", "node": "c1-h2", "gpu": str(g)},
              fingerprint=f"b{g}")
        for g in range(3)
    ]  # fmt: skip
    db.store_alerts(rows(*c0, *c1))
    assert m.process_pending() == 7  # one batch, two incidents (clusters are not crossed)

    def by_cluster() -> dict[str, dict]:
        return {i["clusters"][0]: i for i in db.list_incidents(None, limit=10)}

    def direct(inc_id: int) -> tuple[int, int]:
        with db.read() as conn:
            n = conn.execute(select(func.count()).where(alerts.c.incident_id == inc_id))
            f = conn.execute(
                select(func.count()).where(
                    (alerts.c.incident_id == inc_id) & (alerts.c.status == "firing")
                )
            )
            return int(n.scalar_one()), int(f.scalar_one())

    incs = by_cluster()
    assert (incs["c0"]["alert_count"], incs["c0"]["firing_count"]) == (4, 4)
    assert (incs["c1"]["alert_count"], incs["c1"]["firing_count"]) == (3, 3)
    assert incs["c0"]["nodes"] and incs["c0"]["status"] == "open"

    # one batch: two c0 alerts resolve, all three c1 alerts resolve, one new c0 alert fires
    resolved = [{**a, "status": "resolved", "endsAt": "2026-01-01T01:00:00Z"} for a in c0[:2] + c1]
    db.store_alerts(rows(*resolved, alert({**GPU, "gpu": "7"}, fingerprint="a7")))
    m.process_pending()
    incs = by_cluster()
    for inc in incs.values():
        assert (inc["alert_count"], inc["firing_count"]) == direct(inc["id"])
    assert (incs["c0"]["alert_count"], incs["c0"]["firing_count"]) == (5, 3)
    assert incs["c0"]["status"] == "open"
    assert (incs["c1"]["alert_count"], incs["c1"]["firing_count"]) == (3, 0)
    assert incs["c1"]["status"] == "resolved" and incs["c1"]["closed_ts"] is not None
    assert m.open_count == 1


def test_grouping_with_many_open_incidents_far_apart_in_time(db: Database) -> None:
    """A batch only scans the open incidents near its alerts' start times; alerts still join the
    incident they belong to: an old one near their time, or one opened earlier in the same batch."""
    graph = build_example_graph()
    reg = ModelRegistry("baseline:upstream-coverage", "heuristic:builtin-bestfit")
    reg.load()
    m = IncidentManager(db, GraphStore(graph, "t"), reg, window_s=600.0)

    def at(hours: float, gpu: int, fp: str) -> dict:
        t = f"2026-01-0{1 + int(hours // 24)}T{int(hours % 24):02d}:{int(hours * 60 % 60):02d}:00Z"
        return alert({**GPU, "gpu": str(gpu)}, starts=t, fingerprint=fp)

    # twelve open incidents on the same host, two hours apart (outside each other's window)
    db.store_alerts(rows(*[at(2 * k, 0, f"old{k}") for k in range(12)]))
    m.process_pending()
    assert m.open_count == 12
    ids = {i["first_alert_ts"]: i["id"] for i in db.list_incidents(limit=100)}
    first = sorted(ids)
    # one batch: 5 min after incident 3's alert, 5 min after incident 9's, and two alerts at 30 h
    # (far from every incident: the first opens one, the second must join it)
    db.store_alerts(rows(at(6 + 5 / 60, 1, "n1"), at(18 + 5 / 60, 2, "n2"),
                         at(30, 3, "n3"), at(30 + 1 / 60, 4, "n4")))  # fmt: skip
    m.process_pending()
    assert m.open_count == 13
    inc = {r["fingerprint"]: r["incident_id"] for r in db.list_alerts(limit=100)}
    assert inc["n1"] == ids[first[3]] and inc["n2"] == ids[first[9]]
    assert inc["n3"] == inc["n4"] and inc["n3"] not in ids.values()
    counts = {i["id"]: i["alert_count"] for i in db.list_incidents(limit=100)}
    assert counts[ids[first[3]]] == counts[ids[first[9]]] == counts[inc["n3"]] == 2


def test_newest_alerts_of_an_incident_need_no_sort(tmp_path: Path) -> None:
    """Ranking reads an incident's newest alerts (``ORDER BY id DESC LIMIT``): SQLite walks
    ``ix_alerts_incident`` backwards and stops, instead of sorting every alert of the incident;
    the counts read the index alone."""
    from sqlalchemy import case, func, select

    from fleetmind.serving.db import alerts

    d = Database(f"sqlite:///{tmp_path}/plan.db")
    d.create_all()
    newest = select(alerts).where(alerts.c.incident_id == 1).order_by(alerts.c.id.desc()).limit(9)
    counts = (
        select(alerts.c.incident_id, func.count(), func.sum(case((alerts.c.status == "firing", 1))))
        .where(alerts.c.incident_id.in_([1, 2]))
        .group_by(alerts.c.incident_id)
    )
    with d.read() as conn:
        for q, want in ((newest, "USING INDEX ix_alerts_incident"), (counts, "COVERING INDEX")):
            sql = str(q.compile(d.engine, compile_kwargs={"literal_binds": True}))
            plan = " | ".join(r[3] for r in conn.exec_driver_sql("EXPLAIN QUERY PLAN " + sql))
            assert want in plan and "TEMP B-TREE" not in plan, plan
    d.dispose()


def test_counts_of_more_incidents_than_one_query_takes(db: Database) -> None:
    """More than 500 incidents touched in one batch: the grouped count runs in chunks and every
    incident still gets its own count."""
    graph = build_example_graph()
    reg = ModelRegistry("baseline:upstream-coverage", "heuristic:builtin-bestfit")
    reg.load()
    m = IncidentManager(db, GraphStore(graph, "t"), reg, window_s=600.0)
    # 620 alerts an hour apart (each its own incident), two of them twice (a second GPU)
    hours = [
        f"2026-{1 + k // 672:02d}-{1 + k // 24 % 28:02d}T{k % 24:02d}:00:00Z" for k in range(620)
    ]
    batch = [alert({**GPU, "gpu": "0"}, starts=t, fingerprint=f"h{k}") for k, t in enumerate(hours)]
    batch += [alert({**GPU, "gpu": "1"}, starts=hours[k], fingerprint=f"x{k}") for k in (0, 555)]
    db.store_alerts(rows(*batch))
    assert m.process_pending(limit=1000) == 622
    incs = db.list_incidents(limit=1000)
    assert len(incs) == 620
    counts = sorted(i["alert_count"] for i in incs)
    assert counts == [1] * 618 + [2, 2]
    assert all(i["firing_count"] == i["alert_count"] for i in incs)


def test_an_incident_reopened_in_a_batch_takes_the_batch_s_new_alerts(db: Database) -> None:
    """A re-firing alert reopens its resolved incident; a new alert of the same batch next to it
    joins that incident (the batch's pool of open incidents gains the reopened one)."""
    graph = build_example_graph()
    reg = ModelRegistry("baseline:upstream-coverage", "heuristic:builtin-bestfit")
    reg.load()
    m = IncidentManager(db, GraphStore(graph, "t"), reg, window_s=600.0)
    first = alert(GPU, starts="2026-01-01T00:00:00Z", fingerprint="f1")
    db.store_alerts(rows(first))
    m.process_pending()
    db.store_alerts(rows({**first, "status": "resolved", "endsAt": "2026-01-01T00:05:00Z"}))
    m.process_pending()
    (closed,) = db.list_incidents("resolved")
    assert m.open_count == 0
    # one batch: f1 fires again (reopening), and a new alert one minute after it on the host
    db.store_alerts(
        rows({**first, "endsAt": "2026-01-01T00:10:00Z"},
             alert({**GPU, "gpu": "5"}, starts="2026-01-01T00:01:00Z", fingerprint="f2"))
    )  # fmt: skip
    m.process_pending()
    (inc,) = db.list_incidents("open")
    assert inc["id"] == closed["id"] and inc["alert_count"] == 2 and inc["firing_count"] == 2


def test_auto_resolve_spares_incidents_whose_alerts_are_still_sent(db: Database) -> None:
    """Alertmanager re-sends a firing alert every ``repeat_interval`` (identical, ``endsAt``
    0001-01-01): a re-send is the sign that it still fires. Re-sends changed no row, so
    auto-resolve closed every incident still firing after 24 h, and its later re-sends could not
    reopen it."""
    import time

    graph = build_example_graph()
    reg = ModelRegistry("baseline:upstream-coverage", "heuristic:builtin-bestfit")
    reg.load()
    m = IncidentManager(db, GraphStore(graph, "t"), reg, window_s=60.0)
    now = time.time()
    resent = alert(GPU, starts="2026-01-01T00:00:00Z", fingerprint="still")
    quiet = alert({**HOST, "cluster": "c1", "node": "c1-h2"}, starts="2026-01-01T00:00:00Z")
    db.store_alerts([alert_row(AlertIn.model_validate(a), now) for a in (resent, quiet)])
    m.process_pending()
    assert len(db.list_incidents("open")) == 2  # two clusters: two incidents
    # 5 h later Alertmanager re-sends the one that still fires (repeat_interval 4 h)
    db.store_alerts([alert_row(AlertIn.model_validate(resent), now + 5 * 3600)])
    (stored,) = [a for a in db.list_alerts() if a["fingerprint"] == "still"]
    assert stored["status"] == "firing" and not stored["pending"]  # a re-send changes no state
    ids = db.auto_resolve(quiet_before=now + 3 * 3600, now=now + 6 * 3600)
    (open_inc,) = db.list_incidents("open")
    (closed,) = db.list_incidents("resolved")
    assert ids == [closed["id"]] and "c0/gpu/c0-h1/3" in open_inc["nodes"]
    assert "c1/host/c1-h2" in closed["nodes"]


def test_incident_ids_are_not_handed_out_again_after_retention(db: Database) -> None:
    """SQLite gives a new row the largest id plus one: once retention deleted the newest
    incident, the next one took its id, and that id's feedback label (and notification, and the
    page link on-call got) named an unrelated incident."""
    import time

    from fleetmind.serving.db import incident_feedback

    graph = build_example_graph()
    reg = ModelRegistry("baseline:upstream-coverage", "heuristic:builtin-bestfit")
    reg.load()
    m = IncidentManager(db, GraphStore(graph, "t"), reg, window_s=60.0)
    gone = alert(GPU, fingerprint="old")
    db.store_alerts(rows(gone))
    m.process_pending()
    (old,) = db.list_incidents("open")
    with db.write() as conn:
        conn.execute(
            incident_feedback.insert().values(
                incident_id=old["id"], root_cause="global/dns", by="alice", created_ts=1.0,
                graph_digest="0" * 64, alerts=[],
            )
        )  # fmt: skip
    db.store_alerts(rows({**gone, "status": "resolved", "endsAt": "2026-01-01T00:05:00Z"}))
    m.process_pending()
    assert db.purge(time.time() + 1) == (1, 1)  # the incident and its alert are gone
    db.store_alerts(rows(alert(HOST, fingerprint="new", starts="2026-02-01T00:00:00Z")))
    m.process_pending()
    (new,) = db.list_incidents("open")
    assert new["id"] > old["id"]
