"""Helpers shared by the serving tests: settings, alert payloads, free ports, a uvicorn process."""

from __future__ import annotations

import contextlib
import logging
import logging.config
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx

from fleetmind.data.paths import REPO_ROOT
from fleetmind.serving.app import uvicorn_log_config
from fleetmind.serving.settings import Settings


@contextlib.contextmanager
def serve_logging(level: str = "info") -> Iterator[None]:
    """The logging ``fleetmind serve`` sets up (:func:`fleetmind.serving.app.uvicorn_log_config`),
    its handlers writing to the ``sys.stderr`` of the moment (pytest's ``capsys``), undone on exit."""
    config = uvicorn_log_config(level)
    saved = {}
    for name in config["loggers"]:
        logger = logging.getLogger(name)
        saved[name] = (logger.handlers[:], logger.level, logger.propagate, logger.disabled)
    logging.config.dictConfig(config)
    try:
        yield
    finally:
        for name, (handlers, old_level, propagate, disabled) in saved.items():
            logger = logging.getLogger(name)
            logger.handlers[:] = handlers
            logger.setLevel(old_level)
            logger.propagate = propagate
            logger.disabled = disabled


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def alert(
    labels: dict[str, str],
    starts: str = "2026-01-01T00:00:00Z",
    status: str = "firing",
    fingerprint: str | None = None,
    **extra: Any,
) -> dict[str, Any]:
    a: dict[str, Any] = {"status": status, "labels": labels, "annotations": {}, "startsAt": starts}
    if status == "resolved":
        a["endsAt"] = "2026-01-01T01:00:00Z"
    else:
        a["endsAt"] = "0001-01-01T00:00:00Z"
    if fingerprint:
        a["fingerprint"] = fingerprint
    a.update(extra)
    return a


def webhook(alerts: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    body = {
        "version": "4",
        "groupKey": '{}:{alertname="x"}',
        "truncatedAlerts": 0,
        "status": "firing",
        "receiver": "fleetmind",
        "groupLabels": {},
        "commonLabels": {},
        "commonAnnotations": {},
        "externalURL": "http://alertmanager:9093",
        "alerts": alerts,
    }
    body.update(extra)
    return body


class Server:
    """``uvicorn fleetmind.serving.app:create_app --factory`` in a child process on 127.0.0.1, or
    with ``cli=True`` ``fleetmind serve`` (its start checks and connection guards,
    :mod:`fleetmind.serving.http_guard`)."""

    def __init__(
        self,
        env: dict[str, str],
        port: int | None = None,
        log: Path | None = None,
        cli: bool = False,
    ) -> None:
        self.port = port or free_port()
        self.env = {**os.environ, "MLFLOW_DISABLE_TELEMETRY": "true", **env}
        self.log = log
        self.cli = cli
        self.proc: subprocess.Popen[bytes] | None = None

    def _command(self) -> list[str]:
        if self.cli:
            return [sys.executable, "-m", "fleetmind.cli", "serve", "--port", str(self.port)]
        app = ["uvicorn", "fleetmind.serving.app:create_app", "--factory", "--host", "127.0.0.1"]
        return [sys.executable, "-m", *app, "--port", str(self.port)]

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout: float = 30.0) -> Server:
        out = open(self.log, "ab") if self.log else subprocess.DEVNULL  # noqa: SIM115
        self.proc = subprocess.Popen(
            [*self._command(), "--log-level", "warning"],
            cwd=REPO_ROOT,
            env=self.env,
            stdout=out,
            stderr=out,
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited with {self.proc.returncode} (log: {self.log})")
            try:
                if httpx.get(self.url + "/readyz", timeout=1.0).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        self.kill()
        raise RuntimeError(f"server not ready within {timeout} s (log: {self.log})")

    def kill(self) -> None:
        """SIGKILL: no shutdown hooks run (the crash test)."""
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.kill()

    def __enter__(self) -> Server:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def wait_for(predicate: Any, timeout: float = 15.0, interval: float = 0.1) -> Any:
    """Poll ``predicate()`` until it returns a truthy value; returns it (or the last value)."""
    deadline = time.monotonic() + timeout
    value = predicate()
    while not value and time.monotonic() < deadline:
        time.sleep(interval)
        value = predicate()
    return value


def pg_bindir() -> Path | None:
    """The folder of PostgreSQL's ``initdb``/``pg_ctl`` (Debian package ``postgresql``), if any."""
    import glob
    import shutil

    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    if found:
        return Path(found[-1]).parent
    initdb = shutil.which("initdb")
    return Path(initdb).parent if initdb else None


class PgCluster:
    """A throwaway PostgreSQL cluster on a free loopback port (as ``postgres`` when run as root).

    ``stop()``/``start()`` take the server down and up again on the same data and port (the fault
    tests); ``close()`` removes everything. Raises ``RuntimeError`` when a step fails.
    """

    def __init__(self, bindir: Path, max_connections: int = 100, port: int | None = None) -> None:
        import shutil
        import tempfile

        self.bindir = bindir
        self.root = Path(tempfile.mkdtemp(prefix="fleetmind-pg-"))
        self.data = self.root / "data"
        self.prefix: list[str] = []
        if os.geteuid() == 0:
            runuser = shutil.which("runuser")
            if runuser is None:
                raise RuntimeError("running as root without runuser")
            shutil.chown(self.root, "postgres", "postgres")
            os.chmod(self.root, 0o700)
            self.prefix = [runuser, "-u", "postgres", "--"]
        self.port = port or free_port()
        self.max_connections = max_connections
        self._run(
            "initdb",
            "-D",
            str(self.data),
            "-U",
            "postgres",
            "-A",
            "trust",
            "--no-sync",
            "-E",
            "UTF8",
        )

    @property
    def url(self) -> str:
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/postgres"

    def _run(self, tool: str, *args: str) -> None:
        out = subprocess.run(
            [*self.prefix, str(self.bindir / tool), *args], capture_output=True, text=True
        )
        if out.returncode != 0:
            raise RuntimeError(f"{tool} failed: {out.stdout}{out.stderr}")

    def start(self) -> PgCluster:
        opts = (
            f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1 -c fsync=off "
            f"-c max_connections={self.max_connections}"
        )
        log = str(self.root / "log")
        self._run("pg_ctl", "-D", str(self.data), "-l", log, "-o", opts, "-w", "start")
        return self

    def stop(self, mode: str = "immediate") -> None:
        self._run("pg_ctl", "-D", str(self.data), "-m", mode, "-w", "stop")

    def psql(self, sql: str) -> str:
        """Run ``sql`` with psycopg (autocommit); the first column of each row, joined by lines."""
        import psycopg

        with psycopg.connect(
            f"host=127.0.0.1 port={self.port} user=postgres dbname=postgres", autocommit=True
        ) as conn:
            cur = conn.execute(sql)
            return "\n".join(str(r[0]) for r in cur.fetchall()) if cur.description else ""

    def close(self) -> None:
        import shutil

        subprocess.run(
            [
                *self.prefix,
                str(self.bindir / "pg_ctl"),
                "-D",
                str(self.data),
                "-m",
                "immediate",
                "stop",
            ],
            capture_output=True,
        )
        shutil.rmtree(self.root, ignore_errors=True)


def two_a100_hosts(
    pods: dict[str, frozenset[str]] | None = None, used: set[str] = frozenset()
) -> list[Any]:
    """Telemetry of two hosts, ``gpu-a`` and ``gpu-b``, with one A100 each (a ``used`` one has no
    free share; ``pods``: the pods telemetry sees on each), for the scheduler tests."""
    from fleetmind.serving.telemetry.base import GpuState, NodeState

    pods = pods or {}
    return [
        NodeState(
            name=n,
            cluster="k8s",
            gpus=[GpuState(index=0, model="A100", free_milli=0 if n in used else 1000)],
            cpu_milli=32_000,
            cpu_milli_free=32_000,
            memory_mib=131_072,
            memory_mib_free=131_072,
            pods=pods.get(n, frozenset()),
        )
        for n in ("gpu-a", "gpu-b")
    ]


@contextlib.contextmanager
def untimed_connection(pg: PgCluster) -> Iterator[Any]:
    """A plain psycopg connection to ``pg`` with no statement or idle timeouts of its own: a peer
    that holds a transaction (a lock, a hung replica) as long as a test needs."""
    import psycopg

    conn = psycopg.connect(pg.url.replace("postgresql+psycopg://", "postgresql://"))
    conn.execute("SET statement_timeout = 0")
    conn.execute("SET idle_in_transaction_session_timeout = 0")
    conn.commit()
    try:
        yield conn
    finally:
        conn.close()


@contextlib.contextmanager
def fresh_database(pg: PgCluster, statement_timeout_s: float) -> Iterator[Any]:
    """A :class:`fleetmind.serving.db.Database` on ``pg`` with an empty ``public`` schema,
    migrated to the head revision, with ``statement_timeout_s``; disposed of afterwards."""
    from fleetmind.serving.db import Database

    pg.psql("DROP SCHEMA public CASCADE; CREATE SCHEMA public")
    d = Database(pg.url, statement_timeout_s=statement_timeout_s)
    d.migrate()
    try:
        yield d
    finally:
        d.dispose()


def serving_settings(tmp_path: Path, **kw: object) -> Settings:
    """Settings of an app under test: SQLite ``fm.db`` under ``tmp_path``, the baseline ranker, the
    built-in best-fit placer, no incident worker; ``kw`` wins."""
    base: dict[str, object] = {
        "database_url": f"sqlite:///{tmp_path}/fm.db",
        "rca_model": "baseline:upstream-coverage",
        "placement_model": "heuristic:builtin-bestfit",
        "incident_worker": False,
    }
    return Settings(**{**base, **kw})


@contextlib.contextmanager
def app_on_graph(tmp_path: Path, graph: Any, **kw: object) -> Iterator[Any]:
    """A ``TestClient`` of the app with its default (released) RCA model on ``graph`` (a
    :class:`fleetmind.data.graph.DependencyGraph`, saved as ``graph.json`` under ``tmp_path``),
    SQLite ``fm.db`` there, the built-in best-fit placer, no incident worker; ``kw`` wins."""
    from fastapi.testclient import TestClient

    from fleetmind.serving.app import create_app

    graph.save(tmp_path / "graph.json")
    settings = Settings(**{
        "database_url": f"sqlite:///{tmp_path}/fm.db",
        "graph": str(tmp_path / "graph.json"),
        "placement_model": "heuristic:builtin-bestfit",
        "incident_worker": False,
        **kw,
    })  # fmt: skip
    with TestClient(create_app(settings)) as c:
        yield c


NOTIFY_AM = "http://am.test:9093"
"""The Alertmanager the notifier tests post FleetMindRootCause alerts to (a mock transport)."""
NOTIFY_HOOK = "http://hooks.test/slack"
"""The chat webhook the notifier tests post to (a mock transport)."""


def notify_settings(tmp_path: Path, **kw: object) -> Settings:
    """Settings of the notifier tests: SQLite under ``tmp_path``, the baseline ranker, no incident
    worker, both notification targets set (30 s settle, 60 s re-send, no back-off); ``kw`` wins."""
    base: dict[str, object] = {
        "database_url": f"sqlite:///{tmp_path}/n.db",
        "rca_model": "baseline:upstream-coverage",
        "placement_model": "heuristic:builtin-bestfit",
        "incident_worker": False,
        "public_url": "https://fleetmind.example.org",
        "notify_alertmanager_url": NOTIFY_AM,
        "notify_webhook_url": NOTIFY_HOOK,
        "notify_settle_s": 30.0,
        "notify_resend_s": 60.0,
        "notify_backoff_s": 0.0,
        "notify_retries": 2,
    }
    base.update(kw)
    return Settings(**base)


class NotifyPosts:
    """An httpx transport that takes every post and records it."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, object]] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        import json

        self.calls.append((str(request.url), json.loads(request.content)))
        return httpx.Response(200)

    def to(self, url: str) -> list:
        return [body for u, body in self.calls if u == url]


class TickClock:
    """A notifier clock one second later at every read."""

    def __init__(self) -> None:
        self.t = 2_000_000_000.0

    def __call__(self) -> float:
        self.t += 1.0
        return self.t


def mock_notifier(client: Any, posts: NotifyPosts) -> Any:
    """A ``Notifier`` of the app behind ``client`` posting to ``posts`` on a :class:`TickClock`."""
    from fleetmind.serving.notify import Notifier

    svc = client.app.state.services
    return Notifier(svc.db, svc.settings, clock=TickClock(), transport=httpx.MockTransport(posts))
