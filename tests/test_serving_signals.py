"""``fleetmind serve`` as a process: SIGHUP does not end a single-process server.

SIGHUP's default action ends a process at once: a single-process ``fleetmind serve`` died with its
requests in flight (uvicorn handles SIGINT and SIGTERM, and SIGHUP only in its multi-process
supervisor), so a systemd unit with ``ExecReload=kill -HUP $MAINPID`` caused an outage.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from serving_helpers import free_port


@pytest.mark.skipif(not hasattr(signal, "SIGHUP"), reason="no SIGHUP on this platform")
def test_sighup_is_logged_and_ignored(tmp_path: Path) -> None:
    port = free_port()
    env = {
        **os.environ,
        "FLEETMIND_DATABASE_URL": f"sqlite:///{tmp_path}/s.db",
        "FLEETMIND_RCA_MODEL": "baseline:upstream-coverage",
        "FLEETMIND_PLACEMENT_MODEL": "heuristic:builtin-bestfit",
        "MLFLOW_DISABLE_TELEMETRY": "true",
    }
    log = (tmp_path / "serve.log").open("w")
    proc = subprocess.Popen(
        [sys.executable, "-m", "fleetmind.cli", "serve", "--port", str(port)],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        cwd=tmp_path,
    )
    url = f"http://127.0.0.1:{port}/healthz"
    try:
        deadline = time.monotonic() + 60
        while True:
            assert proc.poll() is None, (tmp_path / "serve.log").read_text()
            try:
                if httpx.get(url, timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, "the service did not start"
            time.sleep(0.2)
        proc.send_signal(signal.SIGHUP)
        time.sleep(1.0)
        assert proc.poll() is None, "SIGHUP ended the server"
        assert httpx.get(url, timeout=5).status_code == 200
        proc.send_signal(signal.SIGTERM)  # still stops (uvicorn re-raises it after shutdown)
        assert proc.wait(timeout=30) in (0, -signal.SIGTERM)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        log.close()
    assert "SIGHUP received: ignored" in (tmp_path / "serve.log").read_text()
