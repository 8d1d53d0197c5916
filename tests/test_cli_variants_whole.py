"""``sched variants --out`` and ``fleet discover --out`` (``dump_fleet_yaml``) write their file
whole or not at all: a write that fails part-way (``ulimit -f``, a full disk) leaves the earlier
file as it was. Before the fix both wrote in place, so a failed write left a truncated trace whose
last row still parsed (``sched evaluate`` then accepted it). And ``sched variants --out
/dev/stdout | head -1`` ends quietly with status 141, as :mod:`fleetmind.cli.runner` promises,
instead of ``error: cannot write /dev/stdout: Broken pipe`` (status 2)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from fleetmind.data.fleet_io import dump_fleet_yaml, load_fleet
from fleetmind.data.openb_variants import write_variant

REPO = Path(__file__).resolve().parents[1]
LIMIT = 2048
"""``RLIMIT_FSIZE`` of the child (bytes): a write past it fails with ``EFBIG`` (Python ignores
``SIGXFSZ``)."""


def _write_fails(setup: str, write: str, cwd: Path) -> None:
    """Run ``setup`` then the statement ``write`` in a child Python whose files may not grow past
    :data:`LIMIT` bytes: the write raises ``OSError``."""
    code = f"{setup}try:\n    {write}\nexcept OSError as err:\n    print('failed', err.errno)\n"
    prelude = (
        "import resource\n"
        f"resource.setrlimit(resource.RLIMIT_FSIZE, ({LIMIT}, {LIMIT}))\n"
    )  # fmt: skip
    env = {**os.environ, "MLFLOW_DISABLE_TELEMETRY": "true"}
    proc = subprocess.run(
        [sys.executable, "-c", prelude + code],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("failed"), proc.stdout


def test_write_variant_that_fails_leaves_the_old_trace(tmp_path: Path) -> None:
    out = tmp_path / "trace.csv"
    old = "name,cpu_milli\n" + "".join(f"old-{i},1000\n" for i in range(50))
    out.write_text(old)
    os.chmod(out, 0o640)
    setup = (
        "from fleetmind.data.openb_variants import write_variant\n"
        "text = 'name,cpu_milli\\n' + ''.join(f'new-{i},2000\\n' for i in range(2000))\n"
    )
    _write_fails(setup, "write_variant('trace.csv', text)", tmp_path)
    assert out.read_text() == old  # not a truncated new trace
    assert [p.name for p in tmp_path.iterdir()] == ["trace.csv"]  # no temporary file left
    # a write that succeeds replaces it, keeping its permission bits
    digest = write_variant(out, "name,cpu_milli\np,1\n")
    assert out.read_text() == "name,cpu_milli\np,1\n"
    assert len(digest) == 64
    assert out.stat().st_mode & 0o777 == 0o640


def test_dump_fleet_yaml_that_fails_leaves_the_old_file(tmp_path: Path) -> None:
    out = tmp_path / "fleet.yaml"
    old = "# an earlier fleet\n" + "x: 1\n" * 50
    out.write_text(old)
    fleet = REPO / "data" / "fleets" / "example_multicluster.yaml"
    assert len(dump_fleet_yaml(load_fleet(str(fleet)))) > LIMIT  # the write must hit the limit
    setup = (
        "from fleetmind.data.fleet_io import dump_fleet_yaml, load_fleet\n"
        f"fleet = load_fleet({str(fleet)!r})\n"
    )
    _write_fails(setup, "dump_fleet_yaml(fleet, 'fleet.yaml')", tmp_path)
    assert out.read_text() == old


def test_write_file_whole_follows_a_link_and_writes_devices_in_place(tmp_path: Path) -> None:
    from fleetmind.folders import write_file_whole

    target = tmp_path / "real.csv"
    target.write_bytes(b"old\n")
    link = tmp_path / "link.csv"
    link.symlink_to(target)
    write_file_whole(link, b"new\n")
    assert link.is_symlink()
    assert target.read_bytes() == b"new\n"
    write_file_whole(os.devnull, b"discarded\n")  # a device: written in place, not replaced
    write_file_whole(tmp_path / "sub" / "new.csv", b"x\n")  # parents made
    assert (tmp_path / "sub" / "new.csv").read_bytes() == b"x\n"


@pytest.mark.skipif(not Path("/dev/stdout").exists(), reason="needs /dev/stdout")
def test_sched_variants_to_a_reader_that_leaves_is_quiet(tmp_path: Path) -> None:
    env = {**os.environ, "MLFLOW_DISABLE_TELEMETRY": "true"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "fleetmind.cli", "sched", "variants", "--kind", "cpu"]
        + ["--level", "3.7", "--seed", "1", "--out", "/dev/stdout"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=tmp_path,
        env=env,
    )
    assert proc.stdout is not None and proc.stderr is not None
    first = proc.stdout.readline()  # what `head -1` reads, then the reader goes
    proc.stdout.close()
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == 141, err
    assert first.startswith(b"name,")
    assert err == ""


def test_sched_variants_to_a_fifo_whose_reader_left_is_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A broken pipe that is not stdout's (``--out fifo`` whose reader left) is an error about
    that path, status 2 (was: the ``BrokenPipeError`` re-raised without a path, a traceback)."""
    import errno

    import fleetmind.data.openb_variants as variants
    from fleetmind.cli import main
    from fleetmind.cli.runner import run_main

    def broken(out: object, text: str) -> str:
        raise BrokenPipeError(errno.EPIPE, "Broken pipe")  # what writing to the FIFO raises

    monkeypatch.setattr(variants, "write_variant", broken)
    argv = ["sched", "variants", "--kind", "cpu", "--level", "3.7", "--seed", "1", "--out", "fifo"]
    assert run_main(lambda: main(argv), prog="fleetmind") == 2
    err = [ln for ln in capsys.readouterr().err.splitlines() if not ln.startswith("note:")]
    assert err[-1:] == ["fleetmind: error: fifo: Broken pipe"], err


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs")
def test_sched_variants_to_a_real_fifo_whose_reader_left(tmp_path: Path) -> None:
    """The reader opens the FIFO and closes it unread; the trace (far more than a pipe's 64 KiB)
    cannot all go in: ``EPIPE``."""
    import threading

    fifo = tmp_path / "f"
    os.mkfifo(fifo)

    def reader() -> None:
        with open(fifo, "rb"):
            pass

    t = threading.Thread(target=reader, daemon=True)
    t.start()
    env = {**os.environ, "MLFLOW_DISABLE_TELEMETRY": "true"}
    proc = subprocess.run(
        [sys.executable, "-m", "fleetmind.cli", "sched", "variants", "--kind", "cpu"]
        + ["--level", "3.7", "--seed", "1", "--out", "f"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    t.join(timeout=10)
    if t.is_alive():  # the command never opened it: let the reader go
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
    err = [ln for ln in proc.stderr.splitlines() if not ln.startswith("note:")]
    assert proc.returncode == 2, proc.stderr
    assert err == ["fleetmind: error: f: Broken pipe"], proc.stderr
    assert proc.stdout == ""
