"""``fleetmind serve`` stops on SIGTERM in bounded time, while it serves and while it starts.

* uvicorn waits for every connection to close after SIGTERM, without limit unless
  ``timeout_graceful_shutdown`` is set (``Server.shutdown`` in ``uvicorn/server.py``): one client
  sending a request body a byte at a time (each byte within ``FLEETMIND_BODY_TIMEOUT_S``) kept
  the server running until SIGKILL, which also skipped the app's shutdown. It now waits
  ``FLEETMIND_GRACEFUL_SHUTDOWN_S``.
* As PID 1 of a PID namespace (the image's exec-form ``ENTRYPOINT``) the kernel drops a signal
  left to its default action (pid_namespaces(7)): a SIGTERM during the imports and the schema
  upgrade, before uvicorn installs its handler, was ignored. :func:`fleetmind.cli.runner.run_main`
  now installs one there that ends the command with status 143.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest
from serving_helpers import alert, free_port, webhook

from fleetmind.serving.http_guard import server_options
from fleetmind.serving.settings import Settings

TOKEN = "sigterm-test-token-0123456789abcdef"


def _env(tmp_path: Path, **extra: str) -> dict[str, str]:
    return {
        **os.environ,
        "FLEETMIND_DATABASE_URL": f"sqlite:///{tmp_path}/s.db",
        "FLEETMIND_API_TOKEN": TOKEN,
        "FLEETMIND_RCA_MODEL": "baseline:upstream-coverage",
        "FLEETMIND_PLACEMENT_MODEL": "heuristic:builtin-bestfit",
        "MLFLOW_DISABLE_TELEMETRY": "true",
        **extra,
    }


def _wait_up(proc: subprocess.Popen, port: int, log: Path) -> None:
    deadline = time.monotonic() + 90
    while True:
        assert proc.poll() is None, log.read_text()
        try:
            if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        assert time.monotonic() < deadline, "the service did not start"
        time.sleep(0.2)


def test_setting_reaches_uvicorn() -> None:
    """``FLEETMIND_GRACEFUL_SHUTDOWN_S`` is uvicorn's ``timeout_graceful_shutdown`` (every
    ``--workers`` process gets the same ``uvicorn.Config``); 0 and unbounded values are refused."""
    assert server_options(Settings())["timeout_graceful_shutdown"] == 20.0
    assert server_options(Settings(graceful_shutdown_s=2.5))["timeout_graceful_shutdown"] == 2.5
    for bad in (0, -1, 3601):
        with pytest.raises(ValueError, match="graceful_shutdown_s"):
            Settings(graceful_shutdown_s=bad)


def test_trickling_body_does_not_hold_sigterm(tmp_path: Path) -> None:
    """A client trickling an authenticated webhook body (one byte per 0.5 s, far within the 20 s
    body timeout) no longer keeps the server from exiting: it exits within the graceful shutdown
    time plus a margin, runs the app's shutdown, and an alert acknowledged before is stored."""
    port = free_port()
    log = tmp_path / "serve.log"
    env = _env(tmp_path, FLEETMIND_GRACEFUL_SHUTDOWN_S="2")
    with log.open("w") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "fleetmind.cli", "serve", "--port", str(port)],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=tmp_path,
        )
    stop = threading.Event()
    try:
        _wait_up(proc, port, log)
        # the webhook body Alertmanager POSTs (https://prometheus.io/docs/alerting/latest/configuration/#webhook_config)
        body = webhook([alert({"alertname": "GpuXidError", "node": "n1"}, fingerprint="f-before")])
        r = httpx.post(
            f"http://127.0.0.1:{port}/api/v1/alerts",
            json=body,
            headers={"Authorization": f"Bearer {TOKEN}"},
            timeout=30,
        )
        assert r.status_code == 200, r.text
        slow = socket.create_connection(("127.0.0.1", port))
        slow.sendall(
            b"POST /api/v1/alerts HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            + f"Authorization: Bearer {TOKEN}\r\nContent-Length: 100000\r\n\r\n{{".encode()
        )

        def trickle() -> None:
            while not stop.wait(0.5):
                try:
                    slow.sendall(b" ")
                except OSError:
                    return

        sender = threading.Thread(target=trickle, daemon=True)
        sender.start()
        time.sleep(1.0)  # the request is in flight (its body read has begun)
        started = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        try:
            rc = proc.wait(timeout=2 + 13)
        except subprocess.TimeoutExpired:
            pytest.fail("SIGTERM did not stop the server: it waits for the trickling request")
        took = time.monotonic() - started
        text = log.read_text()
        assert rc == -signal.SIGTERM, text  # uvicorn raises the signal again after its shutdown
        assert took >= 1.5, f"exited after {took:.1f} s: the request in flight got no grace time"
        assert "timeout graceful shutdown exceeded" in text, text
        assert "Application shutdown complete" in text, text  # the app's shutdown ran
        stop.set()
        slow.close()
    finally:
        stop.set()
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    db = sqlite3.connect(tmp_path / "s.db")  # the stopped server's file, as a restart reads it
    try:
        stored = [json.loads(row[0]) for row in db.execute("SELECT labels FROM alerts")]
    finally:
        db.close()
    assert [labels.get("node") for labels in stored] == ["n1"]


_AS_PID1 = """
import os, signal, sys
sys.path[:0] = [{root!r}]
os.getpid = lambda: 1  # the runner's view: PID 1 of a namespace
from fleetmind.cli.runner import run_main
def command():
    signal.raise_signal(signal.SIGTERM)  # SIGTERM while the command imports or migrates
    print("SIGTERM was ignored")
    return 0
sys.exit(run_main(command, prog="fleetmind"))
"""


def test_pid1_guard_ends_command_with_143() -> None:
    """The guard of :func:`fleetmind.cli.runner.run_main` ends a command that PID 1 would
    otherwise keep running with 143, no traceback. (Outside a PID namespace the default action
    kills the process; with ``os.getpid`` answering 1 the guard takes the PID-1 path.)"""
    root = str(Path(__file__).resolve().parents[1])
    proc = subprocess.run(
        [sys.executable, "-c", _AS_PID1.format(root=root)],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "MLFLOW_DISABLE_TELEMETRY": "true"},
    )
    assert proc.returncode == 143, (proc.returncode, proc.stdout, proc.stderr)
    assert "ignored" not in proc.stdout and "Traceback" not in proc.stderr, proc.stderr
    assert proc.stderr.strip() == "fleetmind: interrupted", proc.stderr


def _pid_namespaces_work() -> bool:
    if not sys.platform.startswith("linux") or shutil.which("unshare") is None:
        return False
    try:
        return subprocess.run(["unshare", "--pid", "--fork", "true"], timeout=10).returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False


def _sigterm_caught(pid: int) -> bool:
    """Whether ``pid`` has a handler for SIGTERM (``SigCgt`` of ``/proc/<pid>/status``)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("SigCgt:"):
            return bool(int(line.split()[1], 16) & (1 << (signal.SIGTERM - 1)))
    return False


def _serve_as_pid1(tmp_path: Path) -> tuple[subprocess.Popen, Path]:
    """``fleetmind serve`` as PID 1 of a new PID namespace (``unshare --pid --fork``, as the
    container image's exec-form entrypoint runs it), its output in ``serve.log``."""
    log = tmp_path / "serve.log"
    cmd = [sys.executable, "-m", "fleetmind.cli", "serve", "--port", str(free_port())]
    with log.open("w") as out:
        proc = subprocess.Popen(
            ["unshare", "--pid", "--fork", *cmd],
            env=_env(tmp_path),
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=tmp_path,
        )
    return proc, log


@pytest.mark.skipif(not _pid_namespaces_work(), reason="needs unshare --pid (root or userns)")
def test_sigterm_during_startup_as_pid1(tmp_path: Path) -> None:
    """``fleetmind serve`` as PID 1 of a new PID namespace, as in the container image: a SIGTERM
    sent as soon as the process has a handler (the start's imports: uvicorn installs its own
    seconds later) ends it within seconds with 143; before, it ran on and served."""
    proc, log = _serve_as_pid1(tmp_path)
    try:
        deadline = time.monotonic() + 60
        child = None
        while time.monotonic() < deadline and proc.poll() is None:
            children = Path(f"/proc/{proc.pid}/task/{proc.pid}/children").read_text().split()
            child = int(children[0]) if children else None
            if child is not None and _sigterm_caught(child):
                break
            time.sleep(0.01)
        assert child is not None and proc.poll() is None, log.read_text()
        started = time.monotonic()
        os.kill(child, signal.SIGTERM)  # from the parent namespace, as the kubelet's runtime does
        try:
            rc = proc.wait(timeout=20)  # unshare exits with its child's status
        except subprocess.TimeoutExpired:
            pytest.fail("SIGTERM during the start was ignored:\n" + log.read_text())
        text = log.read_text()
        assert rc == 143, text
        assert "Application startup complete" not in text, "the SIGTERM came after the start"
        assert "Traceback" not in text, text
        assert time.monotonic() - started < 20
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_pid1_keeps_its_handler_when_the_exit_is_swallowed(monkeypatch: pytest.MonkeyPatch) -> None:
    """An exception raised inside a finaliser is swallowed ("Exception ignored in ..."); as PID 1
    the handler must stay, or the kernel drops every later SIGTERM (the default action)."""
    import signal

    from fleetmind.cli import runner
    from fleetmind.errors import Terminated

    monkeypatch.setattr(runner.os, "getpid", lambda: 1)
    before = signal.getsignal(signal.SIGTERM)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    undo = runner._guard_sigterm()
    try:
        with pytest.raises(Terminated) as ended:
            runner._end_on_sigterm(signal.SIGTERM, None)
        assert ended.value.signum == signal.SIGTERM
        # `fleetmind serve` as PID 1 keeps a handler too, one that ends it by SystemExit(143):
        # uvicorn.run swallows a KeyboardInterrupt (Terminated is one), so the pod exited 0
        runner.leave_sigterm_default()
        assert signal.getsignal(signal.SIGTERM) is runner._end_serve_as_pid1
        with pytest.raises(SystemExit) as stopped:
            runner._end_serve_as_pid1(signal.SIGTERM, None)
        assert stopped.value.code == 143
    finally:
        undo()
        signal.signal(signal.SIGTERM, before)


@pytest.mark.skipif(not _pid_namespaces_work(), reason="needs unshare --pid (root or userns)")
def test_sigterm_after_startup_as_pid1_exits_143(tmp_path: Path) -> None:
    """``fleetmind serve`` as PID 1, stopped once serving (a pod deleted, a Job's deadline):
    uvicorn's graceful shutdown, then status 143, so a stopped Job does not read "Completed";
    a handler raising ``Terminated`` (a ``KeyboardInterrupt``) was swallowed by ``uvicorn.run``
    (``uvicorn/main.py``, ``except KeyboardInterrupt: pass``) and the pod exited 0."""
    proc, log = _serve_as_pid1(tmp_path)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and proc.poll() is None:
            if "Application startup complete" in log.read_text():
                break
            time.sleep(0.1)
        assert proc.poll() is None and "Application startup complete" in log.read_text(), (
            log.read_text()
        )
        children = Path(f"/proc/{proc.pid}/task/{proc.pid}/children").read_text().split()
        os.kill(int(children[0]), signal.SIGTERM)  # from the parent namespace
        try:
            rc = proc.wait(timeout=30)  # unshare exits with its child's status
        except subprocess.TimeoutExpired:
            pytest.fail("SIGTERM after the start did not stop the service:\n" + log.read_text())
        text = log.read_text()
        assert rc == 143, text
        assert "Traceback" not in text, text
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
