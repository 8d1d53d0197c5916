"""The metrics directory ``fleetmind serve`` makes inside ``PROMETHEUS_MULTIPROC_DIR`` does not
pile up there.

* ``--workers 1`` stopped by SIGTERM left its ``fleetmind-metrics-*`` directory behind: uvicorn's
  single-process server puts back the SIGTERM handler it found after its graceful shutdown and
  raises the signal again (``Server.capture_signals`` in uvicorn 0.55's ``uvicorn/server.py``,
  https://github.com/encode/uvicorn/blob/master/uvicorn/server.py), whose default action ended the
  process before the cleanup ran. The process still ends by the signal (-15 here, 143 in a shell).
* A run killed outright (SIGKILL, the OOM killer) cannot clean up; the next start removes such a
  directory when its name says it was made on this boot in this PID namespace and none of its
  processes is left (:func:`fleetmind.serving.metrics.sweep_stale_multiprocess_dirs`). A directory
  another container or host made, or a young one, is left alone.
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

from fleetmind.serving import metrics
from fleetmind.serving.metrics import DIR_PREFIX, host_tag, sweep_stale_multiprocess_dirs

TOKEN = "metrics-dir-test-token-0123456789abcdef"
needs_tag = pytest.mark.skipif(host_tag() is None, reason="needs Linux /proc of this namespace")


def _env(tmp_path: Path, prom: Path) -> dict[str, str]:
    return {
        **os.environ,
        "PROMETHEUS_MULTIPROC_DIR": str(prom),
        "FLEETMIND_DATABASE_URL": f"sqlite:///{tmp_path}/s.db",
        "FLEETMIND_API_TOKEN": TOKEN,
        "FLEETMIND_RCA_MODEL": "baseline:upstream-coverage",
        "FLEETMIND_PLACEMENT_MODEL": "heuristic:builtin-bestfit",
        "MLFLOW_DISABLE_TELEMETRY": "true",
    }


def _start(tmp_path: Path, prom: Path, log: Path) -> tuple[subprocess.Popen, int]:
    """``fleetmind serve --workers 1`` up and scraped once (its gauge files written)."""
    port = free_port()
    with log.open("w") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "fleetmind.cli", "serve", "--port", str(port), "--workers", "1"],
            env=_env(tmp_path, prom),
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=tmp_path,
        )
    deadline = time.monotonic() + 90
    while True:
        assert proc.poll() is None, log.read_text()
        try:
            if httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=1).status_code == 200:
                break
        except httpx.HTTPError:
            pass
        assert time.monotonic() < deadline, "the service did not start:\n" + log.read_text()
        time.sleep(0.2)
    r = httpx.get(
        f"http://127.0.0.1:{port}/metrics", headers={"Authorization": f"Bearer {TOKEN}"}, timeout=10
    )
    assert r.status_code == 200, r.text
    return proc, port


def _stop(proc: subprocess.Popen, sig: int) -> int:
    try:
        proc.send_signal(sig)
        return proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def _backdate(path: Path, seconds: float = 600.0) -> None:
    past = time.time() - seconds
    os.utime(path, (past, past))


def _dead_pid() -> int:
    """The ID of a process that has exited (and been reaped)."""
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def test_sigterm_removes_the_directory_and_still_ends_by_the_signal(tmp_path: Path) -> None:
    prom = tmp_path / "prom"
    prom.mkdir()
    proc, _ = _start(tmp_path, prom, tmp_path / "serve.log")
    (made,) = os.listdir(prom)
    assert made.startswith(DIR_PREFIX) and os.listdir(prom / made), "no per-process files"
    rc = _stop(proc, signal.SIGTERM)
    text = (tmp_path / "serve.log").read_text()
    assert rc == -signal.SIGTERM, text  # ends by the signal: 143 in a shell, as before
    assert "Application shutdown complete" in text and "Traceback" not in text, text
    assert os.listdir(prom) == [], "the run's metrics directory was left behind"


@needs_tag
def test_next_start_sweeps_a_killed_runs_directory_only(tmp_path: Path) -> None:
    """A SIGKILLed run's directory is removed by the next start; a directory whose name carries
    another boot's or namespace's tag, an untagged one (an older release), and a directory a live
    process still writes are left."""
    prom = tmp_path / "prom"
    prom.mkdir()
    proc, _ = _start(tmp_path, prom, tmp_path / "first.log")
    (killed,) = os.listdir(prom)
    assert _stop(proc, signal.SIGKILL) == -signal.SIGKILL
    assert os.listdir(prom / killed), "a SIGKILLed run cannot clean up"
    foreign = prom / f"{DIR_PREFIX}{'0' * 16}-{_dead_pid()}-abcd1234"
    untagged = prom / f"{DIR_PREFIX}zz9f0k2a"
    live = prom / f"{DIR_PREFIX}{host_tag()}-{_dead_pid()}-live0001"
    for d in (foreign, untagged, live):
        d.mkdir()
        (d / "counter_1.db").write_bytes(b"x")
    (live / f"gauge_livemax_{os.getpid()}.db").write_bytes(b"x")  # this test process is alive
    for d in (prom / killed, foreign, untagged, live):
        _backdate(d)
    proc, _ = _start(tmp_path, prom, tmp_path / "second.log")
    try:
        left = set(os.listdir(prom))
        assert killed not in left, "the killed run's directory was not swept"
        assert {foreign.name, untagged.name, live.name} <= left
    finally:
        assert _stop(proc, signal.SIGTERM) == -signal.SIGTERM
    assert set(os.listdir(prom)) == {foreign.name, untagged.name, live.name}


@needs_tag
def test_sweep_rules(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Which directories :func:`sweep_stale_multiprocess_dirs` removes, and that it leaves
    everything when the host's tag cannot be read."""
    tag = host_tag()
    dead = _dead_pid()
    gone = tmp_path / f"{DIR_PREFIX}{tag}-{dead}-gone0001"
    young = tmp_path / f"{DIR_PREFIX}{tag}-{dead}-young001"
    creator_alive = tmp_path / f"{DIR_PREFIX}{tag}-{os.getppid()}-alive001"
    worker_alive = tmp_path / f"{DIR_PREFIX}{tag}-{dead}-worker01"
    other = tmp_path / f"{DIR_PREFIX}{'f' * 16}-{dead}-other001"
    not_ours = tmp_path / f"other-{tag}-{dead}-x"
    for d in (gone, young, creator_alive, worker_alive, other, not_ours):
        d.mkdir()
        (d / f"gauge_livemax_{dead}.db").write_bytes(b"x")
    (worker_alive / f"gauge_liveall_{os.getpid()}.db").write_bytes(b"x")
    link = tmp_path / f"{DIR_PREFIX}{tag}-{dead}-link0001"
    link.symlink_to(gone)
    for d in (gone, creator_alive, worker_alive, other, not_ours):
        _backdate(d)
    _backdate(young, 10.0)
    past = time.time() - 600
    os.utime(link, (past, past), follow_symlinks=False)
    with monkeypatch.context() as m:
        m.setattr(metrics, "host_tag", lambda: None)
        assert sweep_stale_multiprocess_dirs(str(tmp_path)) == []
    assert sweep_stale_multiprocess_dirs(str(tmp_path)) == [str(gone)]
    assert sorted(os.listdir(tmp_path)) == sorted(
        p.name for p in (young, creator_alive, worker_alive, other, not_ours, link)
    )
    assert sweep_stale_multiprocess_dirs(str(tmp_path), now=time.time() + 3600) == [str(young)]
    assert sweep_stale_multiprocess_dirs(str(tmp_path / "missing")) == []


def test_prepared_directory_is_named_for_the_sweep(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The directory's name carries the host tag and the creating process's ID (none where no tag
    can be read), and it is empty, as prometheus-client needs."""
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(tmp_path))
    path, given = metrics.prepare_multiprocess_dir()
    try:
        name = os.path.basename(path)
        tag = host_tag()
        want = f"{DIR_PREFIX}{tag}-{os.getpid()}-" if tag else DIR_PREFIX
        assert name.startswith(want) and os.listdir(path) == [] and given == str(tmp_path)
    finally:
        metrics.cleanup_multiprocess_dir(path, given)
    assert os.listdir(tmp_path) == []
