"""What ``fleetmind serve`` logs per request stays readable and bounded.

* A database outage: every API request that failed on it logged SQLAlchemy's whole message (3-7
  lines with ``[SQL: ...]`` and ``[parameters: (...)]``, the request's values), unthrottled: 1000
  requests, 7015 lines. Now one line per exception class (its class, the first line of the
  driver's message, method and route template), then one a minute at most with a count.
* The guard's own answers (:mod:`fleetmind.serving.http_guard`: 408 for a stalled body, 431 for
  headers too large) are written to the socket, not through uvicorn's response path, so they had
  no access line, and the metrics counted the 408 as 499. Now both get uvicorn's access line and
  the metrics record the 408 (a 431 never reaches the app, so no middleware can count it).
* ``FLEETMIND_ACCESS_LOG`` (``all``, ``no-probes`` the default, ``off``): the probes and the
  scrape no longer write ~28,800 lines a day per idle pod.

uvicorn's access line format: ``uvicorn/protocols/http/httptools_impl.py``,
``RequestResponseCycle.send`` (``'%s - "%s %s HTTP/%s" %d'``); its ``access_log=False`` empties
the ``uvicorn.access`` handlers in ``uvicorn/config.py`` ``Config.configure_logging``, which
every ``--workers`` process runs (``uvicorn/_subprocess.py`` ``subprocess_started``).
"""

from __future__ import annotations

import logging
import logging.config
import os
import socket
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient
from serving_helpers import REPO_ROOT, free_port, wait_for
from sqlalchemy.exc import OperationalError

from fleetmind.cli import serve as cli_serve
from fleetmind.data.errors import ConfigError
from fleetmind.serving.app import (
    ACCESS_LOGGER,
    ProbeAccessFilter,
    create_app,
    uvicorn_log_config,
)
from fleetmind.serving.failure_log import RequestFailureLog
from fleetmind.serving.settings import Settings

SECRET_VALUE = "checkout-secret-7f3a"


class FakeClock:
    def __init__(self) -> None:
        self.t = 500.0

    def __call__(self) -> float:
        return self.t


def _db_records(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == "fleetmind.serving" and "database" in r.msg]


def test_a_database_outage_logs_one_line_not_one_per_request(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The incidents table gone (a restore of an older dump): 200 failing reads log one line,
    without the SQL or the request's values; every request still gets its 503."""
    db = tmp_path / "outage.db"
    settings = Settings(
        database_url=f"sqlite:///{db}",
        incident_worker=False,
        rca_model="baseline:upstream-coverage",
        placement_model="heuristic:builtin-bestfit",
    )
    with TestClient(create_app(settings), raise_server_exceptions=False) as client:
        con = sqlite3.connect(db)
        con.execute("DROP TABLE incidents")
        con.commit()
        con.close()
        caplog.clear()
        with caplog.at_level(logging.INFO, logger="fleetmind.serving"):
            codes = {
                client.get(f"/api/v1/incidents?status=open&service={SECRET_VALUE}").status_code
                for _ in range(200)
            }
    assert codes == {503}
    lines = _db_records(caplog)
    assert len(lines) == 1, [r.getMessage() for r in lines]
    text = lines[0].getMessage()
    assert "\n" not in text and lines[0].exc_info is None
    assert text.endswith(
        f"GET /api/v1/incidents: OperationalError: no such table: incidents (worker pid {os.getpid()})"
    )
    assert SECRET_VALUE not in text and "SELECT" not in text and "[SQL" not in text


def test_request_failures_repeat_one_line_a_minute_with_a_count(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = FakeClock()
    failures = RequestFailureLog(logging.getLogger("fleetmind.serving"), 60.0, clock)
    down = OperationalError(
        "SELECT * FROM incidents WHERE service = %(s)s",
        {"s": SECRET_VALUE},
        Exception("connection refused\n\tIs the server running on that host?"),
    )
    with caplog.at_level(logging.INFO, logger="fleetmind.serving"):
        for _ in range(30):  # 30 failures within a second
            failures.failed(down, "POST", "/api/v1/alerts")
            clock.t += 0.03
        assert len(_db_records(caplog)) == 1
        clock.t += 60
        failures.failed(down, "GET", "/api/v1/incidents/{incident_id}")
        failures.failed(ValueError("another class\nline 2"), "GET", "/api/v1/fleet")
    lines = [r.getMessage() for r in _db_records(caplog)]
    pid = os.getpid()  # the throttle is per server process: each worker's lines name it
    assert lines == [
        f"database error on POST /api/v1/alerts: OperationalError: connection refused "
        f"(worker pid {pid})",
        "database error on GET /api/v1/incidents/{incident_id}: OperationalError: connection "
        f"refused (worker pid {pid}; 29 more failed like it in the last 61 s)",
        f"database error on GET /api/v1/fleet: ValueError: another class (worker pid {pid})",
    ]


# ---------------------------------------------------------------- FLEETMIND_ACCESS_LOG


def _access_record(method: str, target: str, status: int) -> logging.LogRecord:
    return logging.getLogger(ACCESS_LOGGER).makeRecord(
        ACCESS_LOGGER,
        logging.INFO,
        __file__,
        1,
        '%s - "%s %s HTTP/%s" %d',
        ("127.0.0.1:5000", method, target, "1.1", status),
        None,
    )


@pytest.mark.parametrize(
    ("method", "target", "status", "kept"),
    [
        ("GET", "/healthz", 200, False),
        ("HEAD", "/readyz", 200, False),
        ("GET", "/metrics?x=1", 200, False),
        ("GET", "/readyz", 503, True),  # an unready pod is still logged
        ("GET", "/metrics", 401, True),
        ("POST", "/healthz", 405, True),
        ("GET", "/healthz/x", 404, True),
        ("GET", "/api/v1/incidents", 200, True),
    ],
)
def test_no_probes_drops_only_successful_probe_lines(
    method: str, target: str, status: int, kept: bool
) -> None:
    assert ProbeAccessFilter().filter(_access_record(method, target, status)) is kept


@contextmanager
def _logging(config: dict[str, Any]) -> Iterator[None]:
    """Apply ``config`` (as each server process does), its handlers on the ``sys.stdout`` and
    ``sys.stderr`` of the moment; undone on exit (as ``serving_helpers.serve_logging``)."""
    saved = {}
    for name in config["loggers"]:
        logger = logging.getLogger(name)
        saved[name] = (logger.handlers[:], logger.level, logger.propagate, logger.filters[:])
        logger.filters[:] = []  # as in a fresh process: dictConfig adds filters, removes none
    logging.config.dictConfig(config)
    try:
        yield
    finally:
        for name, (handlers, level, propagate, filters) in saved.items():
            logger = logging.getLogger(name)
            logger.handlers[:], logger.filters[:] = handlers, filters
            logger.setLevel(level)
            logger.propagate = propagate


@pytest.mark.parametrize("mode", ["all", "no-probes", "off"])
def test_access_log_modes_through_the_serve_log_config(
    mode: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """The log config ``fleetmind serve`` applies in every worker, per mode."""
    capsys.readouterr()
    with _logging(uvicorn_log_config("info", mode)):
        logger = logging.getLogger(ACCESS_LOGGER)
        for target, status in (("/healthz", 200), ("/readyz", 503), ("/api/v1/fleet", 200)):
            logger.info('%s - "%s %s HTTP/%s" %d', "127.0.0.1:1", "GET", target, "1.1", status)
    out = capsys.readouterr().out
    shown = {t for t in ("/healthz", "/readyz", "/api/v1/fleet") if f"GET {t} " in out}
    expected = {
        "all": {"/healthz", "/readyz", "/api/v1/fleet"},
        "no-probes": {"/readyz", "/api/v1/fleet"},
        "off": set(),
    }[mode]
    assert shown == expected, out


@pytest.fixture
def _serve_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[list[dict[str, Any]]]:
    import uvicorn

    monkeypatch.setenv("FLEETMIND_DATABASE_URL", f"sqlite:///{tmp_path / 'serve.db'}")
    monkeypatch.delenv("FLEETMIND_WORKERS", raising=False)
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(tmp_path / "prom"))
    seen: list[dict[str, Any]] = []
    monkeypatch.setattr(uvicorn, "run", lambda *a, **kw: seen.append(kw))
    import signal

    before = signal.getsignal(signal.SIGHUP) if hasattr(signal, "SIGHUP") else None
    yield seen
    if before is not None:
        signal.signal(signal.SIGHUP, before)


def _serve_args(*argv: str) -> Any:
    import argparse

    parser = argparse.ArgumentParser()
    cli_serve.register(parser.add_subparsers(), "serve", "serve")
    return parser.parse_args(["serve", *argv])


@pytest.mark.parametrize(("mode", "on"), [("off", False), ("all", True), ("no-probes", True)])
def test_serve_hands_the_access_log_mode_to_every_worker(
    mode: str, on: bool, _serve_env: list[dict[str, Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """--workers 2: the mode travels in the ``log_config`` and ``access_log`` that uvicorn gives
    each worker process."""
    monkeypatch.setenv("FLEETMIND_ACCESS_LOG", mode)
    assert cli_serve.run(_serve_args("--workers", "2")) == 0
    kw = _serve_env[0]
    assert kw["workers"] == 2 and kw["access_log"] is on
    assert kw["log_config"] == uvicorn_log_config("info", mode)
    filters = kw["log_config"]["loggers"][ACCESS_LOGGER]["filters"]
    assert ("fleetmind_probes" in filters) is (mode == "no-probes")


def test_a_wrong_access_log_value_is_one_line(
    _serve_env: list[dict[str, Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FLEETMIND_ACCESS_LOG", "quiet")
    with pytest.raises(ConfigError) as caught:
        cli_serve.run(_serve_args())
    assert "FLEETMIND_ACCESS_LOG" in str(caught.value) and "\n" not in str(caught.value)
    assert _serve_env == []
    with pytest.raises(ConfigError):
        uvicorn_log_config("info", "quiet")


# ---------------------------------------------------------------- the guard's answers, served


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    """``fleetmind serve --log-level info`` (the access lines shown) with a 0.5 s body timeout."""
    tmp = tmp_path_factory.mktemp("reqlog")
    port, log = free_port(), tmp / "serve.log"
    env = {
        **os.environ,
        "MLFLOW_DISABLE_TELEMETRY": "true",
        "FLEETMIND_DATABASE_URL": f"sqlite:///{tmp}/reqlog.db",
        "FLEETMIND_RCA_MODEL": "baseline:upstream-coverage",
        "FLEETMIND_PLACEMENT_MODEL": "heuristic:builtin-bestfit",
        "FLEETMIND_BODY_TIMEOUT_S": "0.5",
    }
    env.pop("FLEETMIND_ACCESS_LOG", None)  # the default: no-probes
    cmd = [sys.executable, "-m", "fleetmind.cli", "serve", "--port", str(port)]
    with open(log, "ab") as out:
        proc = subprocess.Popen(
            [*cmd, "--log-level", "info"], cwd=REPO_ROOT, env=env, stdout=out, stderr=out
        )
    url = f"http://127.0.0.1:{port}"

    def ready() -> bool:
        try:
            return httpx.get(url + "/readyz", timeout=1).status_code == 200
        except httpx.HTTPError:
            return proc.poll() is not None

    try:
        wait_for(ready, timeout=90)
        if proc.poll() is not None or not ready():
            pytest.fail("fleetmind serve not ready: " + log.read_text()[-2000:])
        yield url, log
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


def _raw(url: str, payload: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", int(url.rsplit(":", 1)[1])), timeout=10) as s:
        s.sendall(payload)
        got = b""
        try:
            while data := s.recv(65536):
                got += data
        except ConnectionResetError:
            pass
    return got


def test_guard_answers_are_logged_and_counted(served: tuple[str, Path]) -> None:
    url, log = served
    stalled = (
        b"POST /api/v1/alerts HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        b'Content-Length: 1000\r\n\r\n{"a":'
    )
    for _ in range(2):
        assert _raw(url, stalled).startswith(b"HTTP/1.1 408")
    huge = b"GET /api/v1/fleet HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 40_000 + b"\r\n\r\n"
    assert _raw(url, huge).startswith(b"HTTP/1.1 431")
    for _ in range(3):
        assert httpx.get(url + "/healthz", timeout=5).status_code == 200
    assert httpx.get(url + "/api/v1/fleet", timeout=5).status_code == 200

    def scraped() -> str:
        text = httpx.get(url + "/metrics", timeout=5).text
        return text if 'status="408"' in text else ""

    metrics = wait_for(scraped, timeout=10)
    alerts = [ln for ln in metrics.splitlines() if 'route="/api/v1/alerts"' in ln]
    assert any('status="408"' in ln and ln.split()[-1] == "2.0" for ln in alerts if "_count" in ln)
    assert not any('status="499"' in ln for ln in alerts), alerts
    time.sleep(0.3)  # the access lines of the last answers
    text = log.read_text()
    assert text.count('"POST /api/v1/alerts HTTP/1.1" 408') == 2, text[-3000:]
    assert '"GET /api/v1/fleet HTTP/1.1" 431' in text
    assert '"GET /api/v1/fleet HTTP/1.1" 200' in text  # other requests are logged
    assert "GET /healthz" not in text and "GET /metrics" not in text  # no-probes: the default
