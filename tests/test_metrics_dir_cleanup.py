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
* ``fleetmind serve`` as a container's PID 1 (the image's ENTRYPOINT) with ``/tmp`` kept over a
  restart (a Kubernetes ``emptyDir``): the restarted container's PID namespace gets the freed
  namespace's number back (``proc_alloc_inum`` allocates it from an IDA, the lowest free number:
  https://github.com/torvalds/linux/blob/master/fs/proc/generic.c; measured here, two
  ``unshare -pf`` runs a second apart both read ``pid:[4026532175]``), so the tag matches, and
  the killed run's directory names PID 1, the new run's own ID. The sweep counted its own ID as
  alive and never removed it; it runs before this process makes its directory, so its own ID in
  a name is an earlier process's.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
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


@pytest.fixture
def live_pid() -> Iterator[int]:
    """The ID of a running process other than this one (ended after the test)."""
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    try:
        yield child.pid
    finally:
        child.kill()
        child.wait()


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
def test_sweep_rules(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, live_pid: int) -> None:
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
    (worker_alive / f"gauge_liveall_{live_pid}.db").write_bytes(b"x")
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


@needs_tag
def test_own_pid_in_an_earlier_directory_counts_as_gone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A directory naming this process's ID (creator and live gauge file) was left by an earlier
    process with that ID: swept. The directory :data:`MULTIPROC_ENV` points this process at (here
    through a symbolic link) is never swept."""
    tag, mine = host_tag(), os.getpid()
    earlier = tmp_path / f"{DIR_PREFIX}{tag}-{mine}-killed01"
    current = tmp_path / f"{DIR_PREFIX}{tag}-{mine}-current1"
    for d in (earlier, current):
        d.mkdir()
        (d / f"gauge_livemax_{mine}.db").write_bytes(b"x")
        (d / f"counter_{mine}.db").write_bytes(b"x")
        _backdate(d)
    (tmp_path / "link").symlink_to(current)
    monkeypatch.setenv(metrics.MULTIPROC_ENV, str(tmp_path / "link"))
    assert sweep_stale_multiprocess_dirs(str(tmp_path)) == [str(earlier)]
    assert sorted(os.listdir(tmp_path)) == sorted([current.name, "link"])


_PID1_RUN = """
import json, os, sys, time
from fleetmind.serving import metrics
path, given = metrics.prepare_multiprocess_dir()
if sys.argv[1] == "kill":  # written as a worker does, then ended with no cleanup (a SIGKILL)
    open(os.path.join(path, f"gauge_livemax_{os.getpid()}.db"), "wb").close()
    past = time.time() - 600
    os.utime(path, (past, past))
    print(json.dumps([os.getpid(), os.readlink("/proc/self/ns/pid")]), flush=True)
    os._exit(0)
left = sorted(os.listdir(given))
metrics.cleanup_multiprocess_dir(path, given)
print(json.dumps([os.getpid(), os.readlink("/proc/self/ns/pid"), os.path.basename(path), left]))
"""


def _as_pid1(tmp_path: Path, prom: Path, mode: str) -> list:
    """Run :data:`_PID1_RUN` as PID 1 of a new PID namespace (``unshare -pf --mount-proc``, as a
    container's ENTRYPOINT); its JSON answer."""
    env = {**os.environ, metrics.MULTIPROC_ENV: str(prom), "MLFLOW_DISABLE_TELEMETRY": "true"}
    out = subprocess.run(
        ["unshare", "-pf", "--mount-proc", sys.executable, "-c", _PID1_RUN, mode],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


def _can_unshare() -> bool:
    if host_tag() is None or shutil.which("unshare") is None:
        return False
    probe = ["unshare", "-pf", "--mount-proc", "true"]
    try:
        return subprocess.run(probe, capture_output=True, timeout=30).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


@pytest.mark.skipif(not _can_unshare(), reason="needs unshare -pf --mount-proc (root, Linux)")
def test_a_restarted_pid1_sweeps_the_directory_its_killed_run_left(tmp_path: Path) -> None:
    """PID 1 killed, PID 1 again in a new namespace that got the old one's number back: the
    killed run's directory is swept. When the kernel hands out another number (a namespace made
    elsewhere in between), the tags differ and the directory is rightly kept: tried again."""
    prom = tmp_path / "prom"
    prom.mkdir()
    pid, namespace = _as_pid1(tmp_path, prom, "kill")
    (killed,) = os.listdir(prom)
    assert pid == 1 and killed.startswith(DIR_PREFIX) and killed.split("-")[3] == "1"
    for _ in range(10):
        time.sleep(1.0)  # the dead namespace's number is freed once its last reference goes
        pid, again, made, left = _as_pid1(tmp_path, prom, "sweep")
        assert pid == 1 and made.startswith(DIR_PREFIX)
        if again == namespace:  # the same number: the same tag, and the same PID 1 in the name
            assert made.split("-")[2:4] == killed.split("-")[2:4]
            assert left == [made], "the killed PID 1 run's directory was not swept"
            assert os.listdir(prom) == []
            return
        assert left == sorted([killed, made])  # another namespace: another tag, left alone
    pytest.skip("the kernel gave no new namespace the killed one's number")
