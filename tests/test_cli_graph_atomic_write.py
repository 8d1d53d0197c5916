"""``fleetmind graph build --out`` and ``graph schema --out`` replace the file whole or not at all.

The served graph file is what ``fleetmind serve`` loads at start and the refresher re-reads; a
write that fails half-way (a full disk, ``ulimit -f``, a CronJob killed mid-write) used to leave it
truncated, so the next start failed, and printed a traceback. The file is now written to a
temporary file in the same folder, ``fsync``-ed and renamed over the old one, the recipe of
kubelet's ``AtomicWriter`` (``pkg/volume/util/atomic_writer.go``) and of Python's
``os.replace`` documentation ("the renaming will be an atomic operation" on POSIX); a failure is one
line naming the ``--out`` path, exit status 2. A write that found no room prints one line even
when the error names no file (``close()`` reports ``EFBIG``/``ENOSPC`` without one).
"""

from __future__ import annotations

import errno
import json
import os
import resource
import shutil
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from fleetmind import cli
from fleetmind.cli import graph as graph_cli

DATA = Path(__file__).parent / "data" / "k8s"
OLD = '{"name": "served", "nodes": [{"id": "a", "kind": "host"}], "edges": []}\n'


def _recorded(tmp_path: Path) -> Path:
    rec = tmp_path / "rec"
    rec.mkdir()
    for k in ("nodes", "pods", "services", "endpointslices"):
        shutil.copy(DATA / f"api_{k}.json", rec / f"{k}.json")
    return rec


def _limit_file_size() -> None:  # ``ulimit -f 4``: the child may write files of 4 KiB at most
    resource.setrlimit(resource.RLIMIT_FSIZE, (4096, resource.RLIM_INFINITY))


def test_a_write_past_the_file_size_limit_keeps_the_served_graph(tmp_path: Path) -> None:
    rec, out = _recorded(tmp_path), tmp_path / "graphs" / "graph.json"
    out.parent.mkdir()
    out.write_text(OLD)
    cmd = [sys.executable, "-m", "fleetmind.cli", "graph", "build", "--from-dir", str(rec)]
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    r = subprocess.run(
        [*cmd, "--out", str(out)],
        capture_output=True,
        text=True,
        env=env,
        preexec_fn=_limit_file_size,
        timeout=60,
    )
    assert r.returncode == 2, r.stderr
    assert r.stderr.splitlines() == [f"fleetmind: error: {out}: not written: File too large"]
    assert out.read_text() == OLD  # the served file as it was
    assert sorted(p.name for p in out.parent.iterdir()) == ["graph.json"]  # no temporary left
    # without the limit the same command replaces it
    assert subprocess.run([*cmd, "--out", str(out)], env=env, timeout=60).returncode == 0
    assert json.loads(out.read_text())["name"] == "k8s-prod-eu"


def test_the_new_file_keeps_the_old_ones_mode(tmp_path: Path) -> None:
    out = tmp_path / "schema.json"
    out.write_text("{}")
    out.chmod(0o640)
    assert cli.main(["graph", "schema", "--out", str(out)]) == 0
    assert out.stat().st_mode & 0o777 == 0o640 and json.loads(out.read_text())["$schema"]
    fresh = tmp_path / "fresh.json"
    umask = os.umask(0o022)
    try:
        graph_cli.write_whole(fresh, "{}\n")
    finally:
        os.umask(umask)
    assert fresh.stat().st_mode & 0o777 == 0o644 and fresh.read_text() == "{}\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fresh.json", "schema.json"]


def test_no_room_without_a_file_name_is_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def full(_args: Any) -> int:  # what close() raises on a full disk: no file name
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(graph_cli, "_schema", full)
    assert cli.main(["graph", "schema", "--out", "x.json"]) == 2
    assert capsys.readouterr().err.splitlines() == [
        f"fleetmind: error: writing a file failed: {os.strerror(errno.ENOSPC)}"
    ]
    # anything else without a file name is a bug or the system's trouble: main keeps its traceback
    assert cli._path_error(OSError(errno.EINVAL, os.strerror(errno.EINVAL))) is None


# Only a regular file (or a missing one) is replaced by rename. A FIFO, a pipe or a character device
# is written in place, as the shell's ``>`` redirection does (POSIX open(2) with O_TRUNC "shall
# have no effect on FIFO special files or terminal device files"); renaming over it would turn
# ``--out /dev/null`` into a regular file as root, and fails for ``--out /dev/stdout | ...``.
# Never test this against real device files: a FIFO in tmp_path and a pipe stand in for them.


def test_a_fifo_is_written_in_place_not_replaced(tmp_path: Path) -> None:
    fifo = tmp_path / "graph.fifo"
    os.mkfifo(fifo)
    rfd = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)  # a reader, so opening to write won't block
    try:
        graph_cli.write_whole(fifo, '{"name": "g"}\n')
        got = os.read(rfd, 4096)
    except BlockingIOError:
        got = b""
    finally:
        os.close(rfd)
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)  # still the FIFO, not a regular file
    assert got == b'{"name": "g"}\n'
    assert sorted(p.name for p in tmp_path.iterdir()) == ["graph.fifo"]  # no temporary left


def test_out_dev_stdout_into_a_pipe(tmp_path: Path) -> None:
    r = subprocess.run(
        [sys.executable, "-m", "fleetmind.cli", "graph", "schema", "--out", "/dev/stdout"],
        capture_output=True,  # stdout a pipe: /dev/stdout -> /proc/self/fd/1 -> it, as in ``| jq``
        text=True,
        cwd=tmp_path,
        env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"},
        timeout=60,
    )
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["$schema"]
    assert list(tmp_path.iterdir()) == []
