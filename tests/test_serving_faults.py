"""Fault injection with real processes: the service (uvicorn child processes), a real PostgreSQL,
and the real Prometheus Alertmanager as the sender, so that its retries are the real ones.

Each case sends a storm through Alertmanager (or, for the disk case, straight to the webhook),
injects a fault, and asserts that every alert that was accepted ends up stored exactly once and
grouped into exactly one incident (the sum of the incidents' alert counts equals the number of
stored alerts, each alert has an incident, nothing is left pending):

* PostgreSQL stopped for 20 s in the middle of a storm, then restarted;
* the service killed with SIGKILL while ingesting and while rankings are deferred, then restarted:
  the rankings it left undone are done after the restart;
* two replicas on one PostgreSQL: the leader's process killed, and separately its lock backend
  terminated; the other replica leads within 10 s;
* the disk full under SQLite (a small tmpfs): the webhook answers 503 and nothing it acknowledged
  is lost, and it recovers when space returns;
* slow clients holding connections open: other clients are still served.

Missing binaries (``postgresql``, ``prometheus-alertmanager``) or no permission to mount a tmpfs
skip the case with the reason. The measured figures go to ``docs/serving/operations.md`` (Guarantees).
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from alertmanager_helpers import answers_200, running_alertmanager
from serving_helpers import PgCluster, Server, alert, free_port, pg_bindir, wait_for, webhook

from fleetmind.data.paths import REPO_ROOT

pytestmark = pytest.mark.slow

INGEST, READ = "ingest-token-0123456789", "read-token-0123456789"
LOCK_KEY = 0x464C4D44  # serving.db.LeaderLock.PG_KEY
BASE_ENV = {
    "FLEETMIND_RCA_MODEL": "baseline:upstream-coverage",
    "FLEETMIND_PLACEMENT_MODEL": "heuristic:builtin-bestfit",
    "FLEETMIND_INGEST_TOKEN": INGEST,
    "FLEETMIND_READ_TOKEN": READ,
    "FLEETMIND_LEADER_LEASE_S": "5",
    "FLEETMIND_WORKER_STUCK_S": "5",
}
FIGURES: dict[str, Any] = {}


@pytest.fixture(scope="module")
def pg() -> Iterator[PgCluster]:
    bindir = pg_bindir()
    if bindir is None:
        pytest.skip("PostgreSQL binaries not installed (Debian package postgresql)")
    cluster = PgCluster(bindir, max_connections=200).start()
    try:
        yield cluster
    finally:
        cluster.close()


def new_db(pg: PgCluster, name: str, app: str = "fleetmind") -> str:
    pg.psql(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
    pg.psql(f"CREATE DATABASE {name}")
    return f"postgresql+psycopg://postgres@127.0.0.1:{pg.port}/{name}?application_name={app}"


def query(pg: PgCluster, db: str, sql: str) -> list[tuple[Any, ...]]:
    import psycopg

    with psycopg.connect(
        f"host=127.0.0.1 port={pg.port} user=postgres dbname={db}", autocommit=True
    ) as conn:
        return list(conn.execute(sql).fetchall())


@contextlib.contextmanager
def alertmanager(tmp_path: Path, urls: list[str]) -> Iterator[str]:
    """A real Alertmanager delivering every alert to each of ``urls`` (group_wait and
    group_interval 1 s); yields its base URL."""
    (tmp_path / "token").write_text(INGEST)
    cfg = {
        "global": {"resolve_timeout": "5m"},
        "route": {
            "receiver": "fleetmind",
            "group_by": ["cluster", "alertname"],
            "group_wait": "1s",
            "group_interval": "1s",
            "repeat_interval": "1h",
        },
        "receivers": [
            {
                "name": "fleetmind",
                "webhook_configs": [
                    {
                        "url": u + "/api/v1/alerts",
                        "send_resolved": True,
                        "max_alerts": 10000,
                        "http_config": {
                            "authorization": {
                                "type": "Bearer",
                                "credentials_file": str(tmp_path / "token"),
                            }
                        },
                    }
                    for u in urls
                ],
            }
        ],
    }
    path = tmp_path / "am.yml"
    path.write_text(yaml.safe_dump(cfg))
    with running_alertmanager(path, tmp_path / "am-data", log=tmp_path / "am.log") as url:
        yield url


def storm(case: str, lo: int, hi: int, cluster: str = "c0") -> list[dict[str, Any]]:
    """Alerts ``lo..hi-1`` of a storm on a cluster of the example graph (4 hosts, 8 GPUs)."""
    now = datetime.now(UTC).isoformat()
    return [
        {
            "labels": {
                "alertname": "GpuXidError",
                "cluster": cluster,
                "node": f"{cluster}-h{i % 4}",
                "gpu": str(i % 8),
                "idx": str(i),
                "case": case,
            },
            "annotations": {"summary": "fault test"},
            "startsAt": now,
        }
        for i in range(lo, hi)
    ]


def send(am: str, alerts: list[dict[str, Any]]) -> None:
    assert httpx.post(am + "/api/v2/alerts", json=alerts, timeout=10).status_code == 200


def grouped_once(pg: PgCluster, db: str, expected: set[str]) -> bool:
    """Every expected alert stored once, grouped, and counted in exactly one incident."""
    try:
        rows = query(pg, db, "SELECT labels->>'idx', incident_id, pending FROM alerts")
        counts = query(pg, db, "SELECT id, alert_count FROM incidents WHERE status != 'merged'")
        actual = dict(
            query(pg, db, "SELECT incident_id, count(*) FROM alerts GROUP BY incident_id")
        )
    except Exception:  # the database is down or the tables do not exist yet
        return False
    idx = [r[0] for r in rows]
    if set(idx) != expected:
        return False
    assert len(idx) == len(set(idx)), "an alert stored twice"
    if any(r[2] or r[1] is None for r in rows):
        return False
    # each alert in exactly one incident, and each incident counts exactly its own alerts
    assert sum(n for _, n in counts) == len(rows), (counts, len(rows))
    assert all(actual.get(i, 0) == n for i, n in counts), (counts, actual)
    return True


def leader(pg: PgCluster, db: str) -> str | None:
    rows = query(
        pg,
        db,
        "SELECT a.application_name FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid "
        f"WHERE l.locktype = 'advisory' AND l.granted AND l.objid = {LOCK_KEY} "
        "AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())",
    )
    return rows[0][0] if rows else None


# ----------------------------------------------------------------------------- PostgreSQL down
def test_postgresql_down_20s_during_a_storm(pg: PgCluster, tmp_path: Path) -> None:
    url = new_db(pg, "pgdown")
    env = {**BASE_ENV, "FLEETMIND_DATABASE_URL": url, "FLEETMIND_DB_CONNECT_TIMEOUT_S": "2"}
    with Server(env, log=tmp_path / "fm.log") as fm, alertmanager(tmp_path, [fm.url]) as am:
        send(am, storm("pgdown", 0, 150))
        assert wait_for(lambda: grouped_once(pg, "pgdown", {str(i) for i in range(150)}), 30)
        pg.stop()
        t_down = time.monotonic()
        try:
            send(am, storm("pgdown", 150, 300))  # arrives while the database is down
            time.sleep(3)
            ready = httpx.get(fm.url + "/readyz", timeout=10)
            assert ready.status_code == 503 and "database" in ready.text
            time.sleep(max(0.0, 20 - (time.monotonic() - t_down)))
        finally:
            pg.start()
        t_up = time.monotonic()
        expected = {str(i) for i in range(300)}
        assert wait_for(lambda: grouped_once(pg, "pgdown", expected), timeout=60, interval=0.5)
        FIGURES["pg_down"] = {"sent": 300, "lost": 0, "caught_up_s": time.monotonic() - t_up}


# ----------------------------------------------------------------------------- SIGKILL
def test_sigkill_while_ingesting_and_ranking_then_restart(pg: PgCluster, tmp_path: Path) -> None:
    url = new_db(pg, "kill9")
    env = {**BASE_ENV, "FLEETMIND_DATABASE_URL": url, "FLEETMIND_INCIDENT_RANK_INTERVAL_S": "60"}
    port = free_port()
    fm = Server(env, port=port, log=tmp_path / "fm.log").start()
    try:
        with alertmanager(tmp_path, [fm.url]) as am:
            send(am, storm("kill9", 0, 100))
            assert wait_for(lambda: grouped_once(pg, "kill9", {str(i) for i in range(100)}), 30)
            # wave 2 joins the ranked incidents: their re-ranking is deferred 60 s
            send(am, storm("kill9", 100, 400))

            def deferred() -> bool:
                rows = query(pg, "kill9", "SELECT count(*) FROM incidents WHERE needs_ranking")
                stored = query(pg, "kill9", "SELECT count(*) FROM alerts")[0][0]
                return rows[0][0] > 0 and stored > 100

            assert wait_for(deferred, timeout=30, interval=0.05)
            fm.kill()  # SIGKILL: ingestion of wave 2 may be midway, the rankings are not done
            t_kill = time.time()
            # arrives while the service is dead; another cluster, so it touches other incidents:
            # the ones of wave 2 get ranked after the restart only if their due ranking survived
            send(am, storm("kill9", 400, 500, cluster="c1"))
            time.sleep(2)
            fm = Server(env, port=port, log=tmp_path / "fm2.log").start()
            expected = {str(i) for i in range(500)}
            assert wait_for(lambda: grouped_once(pg, "kill9", expected), timeout=60, interval=0.5)

            def ranked() -> bool:
                rows = query(
                    pg,
                    "kill9",
                    "SELECT count(*) FILTER (WHERE needs_ranking OR rca_ts IS NULL OR "
                    "rca_ts < updated_ts), count(*) FROM incidents WHERE status = 'open'",
                )
                return rows[0][0] == 0 and rows[0][1] > 0

            assert wait_for(ranked, timeout=30, interval=0.5), "rankings did not resume"
            assert t_kill > 0
            FIGURES["sigkill"] = {"sent": 500, "lost": 0}
    finally:
        fm.kill()


# ----------------------------------------------------------------------------- two replicas
@pytest.mark.parametrize("fault", ["kill_leader", "terminate_lock_backend"])
def test_two_replicas_take_over_within_10s(pg: PgCluster, tmp_path: Path, fault: str) -> None:
    """The standby takes the lock as soon as the leader's lock session ends, not when a lease
    runs out: the lease is set far past the wait below, so a take-over that waited for it
    (``idle_session_timeout``) would not happen at all, and the standby tries once a second
    (``docs/serving/operations.md``), so one not seen within 15 s means it stopped trying. That
    wait is a behaviour bound, 15 tries; the time it took (0.7-0.9 s here) is reported in the
    figures, not asserted."""
    db = f"repl_{fault}"
    base = new_db(pg, db).split("?")[0]
    lease_s = 600  # far past the 15 s wait for a new leader
    servers = [
        Server(
            {
                **BASE_ENV,
                "FLEETMIND_LEADER_LEASE_S": str(lease_s),
                "FLEETMIND_DATABASE_URL": f"{base}?application_name=r{i}",
            },
            log=tmp_path / f"r{i}.log",
        )
        for i in (1, 2)
    ]
    servers[0].start()
    try:
        assert wait_for(lambda: leader(pg, db) == "r1", timeout=10)
        servers[1].start()
        with alertmanager(tmp_path, [s.url for s in servers]) as am:
            send(am, storm(db, 0, 200))
            assert wait_for(lambda: grouped_once(pg, db, {str(i) for i in range(200)}), 30)
            send(am, storm(db, 200, 400))  # the fault lands during this wave
            t0 = time.monotonic()
            if fault == "kill_leader":
                servers[0].kill()
                new = wait_for(lambda: leader(pg, db) == "r2", timeout=15, interval=0.05)
            else:
                pg.psql(
                    "SELECT pg_terminate_backend(l.pid) FROM pg_locks l WHERE "
                    f"l.locktype = 'advisory' AND l.objid = {LOCK_KEY} AND l.granted AND "
                    f"l.database = (SELECT oid FROM pg_database WHERE datname = '{db}')"
                )
                new = wait_for(lambda: leader(pg, db) is not None, timeout=15, interval=0.05)
            took = time.monotonic() - t0  # reported, not asserted
            assert new, f"no replica took over within 15 s of the fault ({fault})"
            send(am, storm(db, 400, 500))
            expected = {str(i) for i in range(500)}
            assert wait_for(lambda: grouped_once(pg, db, expected), timeout=60, interval=0.5)
            FIGURES[fault] = {"sent": 500, "lost": 0, "take_over_s": round(took, 2)}
    finally:
        for s in servers:
            s.kill()


# ----------------------------------------------------------------------------- disk full
@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    mnt = tmp_path / "disk"
    mnt.mkdir()
    out = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=3m", "tmpfs", str(mnt)], capture_output=True
    )
    if out.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs: {out.stderr.decode().strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], capture_output=True)


def test_disk_full_answers_503_and_loses_nothing_acknowledged(
    small_disk: Path, tmp_path: Path
) -> None:
    import sqlite3

    db = small_disk / "fm.db"
    env = {**BASE_ENV, "FLEETMIND_DATABASE_URL": f"sqlite:///{db}"}
    acked: list[str] = []
    codes: list[int] = []
    with Server(env, log=tmp_path / "fm.log") as fm:
        filler = small_disk / "filler"
        filler.write_bytes(b"\0" * (2 * 1024 * 1024))  # leave well under a megabyte free
        auth = {"Authorization": f"Bearer {INGEST}"}
        with httpx.Client(base_url=fm.url, timeout=10, headers=auth) as c:
            for batch in range(200):
                fps = [f"disk-{batch}-{i}" for i in range(20)]
                body = webhook(
                    [
                        alert(
                            {"alertname": "Fill", "cluster": "c0", "node": f"c0-h{i % 4}"},
                            fingerprint=fp,
                            annotations={"pad": "x" * 4000},
                        )
                        for i, fp in enumerate(fps)
                    ]
                )
                r = c.post("/api/v1/alerts", json=body)
                codes.append(r.status_code)
                if r.status_code == 200:
                    acked.extend(fps)
                elif r.status_code == 503:
                    break
            assert codes[-1] == 503, f"the disk never filled: {codes[-5:]}"
            assert set(codes) <= {200, 503}
            filler.unlink()  # space returns: the service writes again
            ok = webhook([alert({"alertname": "After", "cluster": "c0"}, fingerprint="after")])
            assert wait_for(lambda: c.post("/api/v1/alerts", json=ok).status_code == 200, 10)
    with sqlite3.connect(db) as conn:
        stored = {r[0] for r in conn.execute("SELECT fingerprint FROM alerts")}
    assert acked and not set(acked) - stored
    FIGURES["disk_full"] = {"acknowledged": len(acked), "lost": len(set(acked) - stored)}


# ----------------------------------------------------------------------------- slow clients
def test_slow_clients_do_not_starve_others(tmp_path: Path) -> None:
    env = {**BASE_ENV, "FLEETMIND_DATABASE_URL": f"sqlite:///{tmp_path}/slow.db"}
    port = free_port()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "fleetmind.cli",
            "serve",
            "--port",
            str(port),
            "--log-level",
            "warning",
        ],
        cwd=REPO_ROOT,
        env={**os.environ, "MLFLOW_DISABLE_TELEMETRY": "true", **env},
        stdout=subprocess.DEVNULL,
        stderr=open(tmp_path / "serve.log", "wb"),  # noqa: SIM115
    )
    url = f"http://127.0.0.1:{port}"
    held: list[socket.socket] = []
    try:
        assert wait_for(lambda: answers_200(url + "/readyz"), timeout=60), (
            "fleetmind serve not ready"
        )
        head = (
            "POST /api/v1/alerts HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            f"Authorization: Bearer {INGEST}\r\nContent-Length: 100000\r\n\r\n"
        ).encode()
        for i in range(100):  # authorised clients that send a bit of their body, then stall
            s = socket.create_connection(("127.0.0.1", port))
            s.sendall(head + b'{"alerts": [' if i % 2 else head[:30])
            held.append(s)
        t0 = time.monotonic()
        auth = {"Authorization": f"Bearer {INGEST}"}
        with httpx.Client(base_url=url, timeout=5) as c:
            for i in range(20):
                body = webhook([alert({"alertname": "Fast", "cluster": "c0"}, fingerprint=f"s{i}")])
                assert c.post("/api/v1/alerts", json=body, headers=auth).status_code == 200
                assert c.get("/healthz").status_code == 200
        FIGURES["slow_clients"] = {"held": len(held), "served_s": time.monotonic() - t0}
    finally:
        for s in held:
            s.close()
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()


def teardown_module() -> None:
    out = os.environ.get("FLEETMIND_FAULT_FIGURES")
    if out:
        import json

        Path(out).write_text(json.dumps(FIGURES, indent=2))
