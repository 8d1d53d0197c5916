"""What commands hand to machines (stdout JSON, ``--json`` files, result folders) stays usable:

- ``sched search-teacher`` on a trace / node list too small for its metric (unallocated GPU % at
  100 % arrived is NaN when no pod arrives within a point of 100 %, ``envs.fgd_mode.unallocated_at``)
  printed ``{"fgd_score": NaN, ...}``, wrote NaN into ``--json`` and a scorer file, exit 0: it now
  refuses in one line (exit 2) and writes neither file;
- ``write_json`` writes strict JSON (NaN -> null, as ``sched evaluate`` already did);
- ``rca train --layers 1`` passed the argument check and stopped with a traceback once the model
  was built (``rca.model.GAT`` needs >= 2 layers): one line, exit 2, before any data is read;
- ``doctor --json F | head -1``: the findings were printed before F was written, so a reader that
  stops early lost F;
- two ``rca generate`` runs on one ``--out``: the second deleted the split files the first was
  writing (both exit 0, one's data lost, ``meta.json`` wrong): the second is refused.
"""

from __future__ import annotations

import argparse
import builtins
import json
import math
import os
import threading
from pathlib import Path

import pytest

os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")

from fleetmind.cli import main  # noqa: E402
from fleetmind.data.errors import ConfigError, DataError  # noqa: E402

LOCK_NAME = ".fleetmind-writing.lock"
"""``fleetmind.data.rca_dataset.LOCK_NAME`` (spelt out: the tests run against code without it)."""

NODES = "sn,cpu_milli,memory_mib,gpu,model\n" + "".join(
    f"n{i},64000,262144,{[2, 4, 8][i % 3]},{['T4', 'P100', 'V100'][i % 3]}\n" for i in range(4)
)
PODS = "name,cpu_milli,memory_mib,num_gpu,gpu_milli\n" + "".join(
    f"p{i:02d},{1000 + 500 * (i % 3)},1024,{1 + i % 2},{1000 if i % 2 else [250, 500, 1000][i % 3]}\n"
    for i in range(30)
)
"""Four nodes (14 GPUs): one pod moves the arrived GPU % by several points, so no pod record lands
within a point of 100 % and the search metric is NaN."""


def _strict(text: str) -> object:
    def refuse(c: str) -> object:
        raise ValueError(f"invalid JSON constant {c}")

    return json.loads(text, parse_constant=refuse)


def _one_error_line(err: str) -> str:
    assert "Traceback" not in err, err
    lines = [ln for ln in err.splitlines() if ln.startswith("fleetmind: error:")]
    assert len(lines) == 1, err
    return lines[0]


# search-teacher -------------------------------------------------------------------------------


def test_search_teacher_refuses_an_undefined_metric(tmp_path: Path, capsys) -> None:
    (tmp_path / "nodes.csv").write_text(NODES)
    (tmp_path / "pods.csv").write_text(PODS)
    out, summary = tmp_path / "scorer.json", tmp_path / "summary.json"
    argv = ["sched", "search-teacher", "--trace", str(tmp_path / "pods.csv")]
    argv += ["--nodes", str(tmp_path / "nodes.csv"), "--episode-seeds", "1000"]
    argv += ["--generations", "1", "--population", "2", "--workers", "1"]
    rc = main([*argv, "--out", str(out), "--json", str(summary)])
    cap = capsys.readouterr()
    assert rc == 2, cap.out
    assert cap.out == ""  # no NaN on stdout
    line = _one_error_line(cap.err)
    assert "undefined" in line and "100 % arrived" in line
    assert not out.exists() and not summary.exists()


def test_cmaes_search_refuses_nan_scores_before_the_search(monkeypatch) -> None:
    from fleetmind.rl import teacher_search

    monkeypatch.setattr(teacher_search, "run_tasks", lambda fn, jobs, **k: [math.nan] * len(jobs))
    cfg = {"traces": ["x"], "fgd_until_pct": 80.0, "stop_arrived_pct": 101.0}
    with pytest.raises(ConfigError, match="FGD's baseline score is not a number"):
        teacher_search.cmaes_search(cfg, [("x", 1)], generations=1, population=2)


def test_cmaes_search_refuses_a_generation_of_nan_scores(monkeypatch) -> None:
    from fleetmind.rl import teacher_search

    calls = iter([[5.0], [math.nan, math.nan]])  # FGD's score, then the first generation's
    monkeypatch.setattr(teacher_search, "run_tasks", lambda fn, jobs, **k: next(calls))
    cfg = {"traces": ["x"], "fgd_until_pct": 80.0, "stop_arrived_pct": 101.0}
    with pytest.raises(ConfigError, match="every score of generation 0"):
        teacher_search.cmaes_search(cfg, [("x", 1)], generations=1, population=2, seed=0)


def test_write_json_writes_strict_json(tmp_path: Path) -> None:
    import numpy as np

    from fleetmind.training.io import write_json

    path = tmp_path / "r.json"
    write_json(path, {"a": math.nan, "b": [1.0, math.inf, np.float64("nan")], "c": 3})
    assert _strict(path.read_text()) == {"a": None, "b": [1.0, None, None], "c": 3}


# rca train --layers ---------------------------------------------------------------------------


def test_rca_train_refuses_one_layer_before_any_work() -> None:
    from fleetmind.training.rca_train import Args, check_args

    with pytest.raises(ConfigError, match=r"--layers must be >= 2, got 1"):
        check_args(Args(data="nowhere", layers=1))
    check_args(Args(data="nowhere", layers=2))  # the smallest model GAT builds


# doctor --json before the screen --------------------------------------------------------------


def test_doctor_writes_json_before_printing(tmp_path: Path, monkeypatch) -> None:
    from fleetmind.cli import doctor as doctor_cli
    from fleetmind.serving.telemetry import doctor

    findings = [doctor.Finding("error", "metrics", f"finding {i}") for i in range(3)]
    monkeypatch.setattr(doctor, "diagnose", lambda url, timeout_s, cluster: findings)

    def closed_pipe(*a: object, **k: object) -> None:  # `| head -1` gone: stdout is closed
        raise BrokenPipeError(32, "Broken pipe")

    monkeypatch.setattr(builtins, "print", closed_pipe)
    out = tmp_path / "doctor.json"
    args = argparse.Namespace(prometheus="http://127.0.0.1:9", timeout=10.0, cluster=None, json=out)
    with pytest.raises(BrokenPipeError):
        doctor_cli.run(args)
    assert _strict(out.read_text())["errors"] == 3


# two rca generate runs on one --out -----------------------------------------------------------


def test_a_second_dataset_writer_of_a_folder_is_refused(tmp_path: Path) -> None:
    from fleetmind.data.rca_dataset import DatasetWriter, write_dataset

    out = tmp_path / "ds"
    entered, finish = threading.Event(), threading.Event()
    errors: list[BaseException] = []

    def first() -> None:
        try:
            with DatasetWriter(out) as w:
                w.add_incident("train", {"id": "a"})
                entered.set()
                assert finish.wait(30)
                w.add_incident("train", {"id": "b"})
        except BaseException as err:  # noqa: BLE001 - reported by the test below
            errors.append(err)
            entered.set()

    t = threading.Thread(target=first)
    t.start()
    try:
        assert entered.wait(30)
        with pytest.raises(DataError, match=rf"{out} is being written by another process \(pid "):
            write_dataset(out, {"train": [{"id": "z"}]}, [])
        assert (out / "train.jsonl").exists()  # the first writer's file is still there
    finally:
        finish.set()
        t.join(30)
    assert not errors
    meta = json.loads((out / "meta.json").read_text())
    assert meta["complete"] is True and meta["counts"] == {"train": 2}
    assert [json.loads(ln)["id"] for ln in (out / "train.jsonl").read_text().splitlines()] == [
        "a",
        "b",
    ]
    assert not (out / LOCK_NAME).exists()  # removed at the end: the folder's files are as before
    write_dataset(out, {"train": [{"id": "z"}]}, [])  # the next writer, once the first ended


def test_rca_generate_refuses_a_folder_another_process_writes(tmp_path: Path, capsys) -> None:
    """The CLI's line, with the lock held by another process (a child holding ``flock``)."""
    import subprocess
    import sys

    out = tmp_path / "ds"
    out.mkdir()
    marker = '{"complete": false}\n'  # what the other writer's folder holds while it writes
    (out / "meta.json").write_text(marker)
    (out / "train.jsonl").write_text('{"id": "a"}\n')
    holder = (
        "import fcntl, os, sys\n"
        f"fd = os.open({str(out / LOCK_NAME)!r}, os.O_RDWR | os.O_CREAT)\n"
        "fcntl.flock(fd, fcntl.LOCK_EX)\n"
        "os.pwrite(fd, f'{os.getpid()}\\n'.encode(), 0)\n"
        "print('locked', flush=True)\n"
        "sys.stdin.read()\n"
    )
    child = subprocess.Popen(
        [sys.executable, "-c", holder], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "locked"
        rc = main(["rca", "generate", "--out", str(out), "--incidents", "20", "--seed", "0"])
        line = _one_error_line(capsys.readouterr().err)
        assert rc == 2
        assert f"{out} is being written by another process (pid {child.pid})" in line
        assert (out / "meta.json").read_text() == marker  # the other writer's files untouched
        assert (out / "train.jsonl").read_text() == '{"id": "a"}\n'
    finally:
        assert child.stdin is not None
        child.stdin.close()
        child.wait(30)


# rca generate on a file system that cannot lock -----------------------------------------------


@pytest.mark.parametrize("code", ["ENOLCK", "EOPNOTSUPP", "ENOSYS"])
def test_rca_generate_writes_where_the_file_system_cannot_lock(
    tmp_path: Path, capsys, monkeypatch, code: str
) -> None:
    """NFS without ``lockd`` answers ``flock`` with ``ENOLCK`` (``nfs(5)``, ``flock(2)``); other
    file systems ``EOPNOTSUPP``/``ENOSYS``: no other writer holds anything, so the dataset is
    written, with one warning line (the stale lock file a killed writer left is no obstacle)."""
    import errno
    import fcntl

    def no_locks(fd: int, op: int) -> None:
        raise OSError(getattr(errno, code), os.strerror(getattr(errno, code)))

    out = tmp_path / "ds"
    out.mkdir()
    (out / LOCK_NAME).write_text("424242\n")  # a killed writer's pid
    monkeypatch.setattr(fcntl, "flock", no_locks)
    rc = main(["rca", "generate", "--out", str(out), "--incidents", "20", "--seed", "0"])
    err = capsys.readouterr().err
    assert rc == 0, err
    assert "fleetmind: error:" not in err and "Traceback" not in err, err
    warning = (
        f"fleetmind: warning: {out}: the file system does not support locks "
        f"({os.strerror(getattr(errno, code))}); not guarded against a second writer"
    )
    assert warning in err.splitlines(), err
    assert json.loads((out / "meta.json").read_text())["complete"] is True
    assert not (out / LOCK_NAME).exists()


def test_the_no_lock_warning_is_a_line_of_its_own_under_a_progress_bar(
    tmp_path: Path, monkeypatch
) -> None:
    """The CLI's progress bar is on stderr while ``rca generate`` opens the folder: the warning,
    printed after the bar's last frame, ran on from it (``... 0/10 [00:00<?, ?it/s]fleetmind:
    warning: ...``). Written with ``tqdm.write``, the bar is cleared first and drawn again after
    the line (tqdm's documented way of printing beside a bar)."""
    import errno
    import fcntl
    import io
    import re
    import sys

    from tqdm import tqdm

    from fleetmind.data.rca_dataset import DatasetWriter

    def no_locks(fd: int, op: int) -> None:
        raise OSError(errno.ENOLCK, os.strerror(errno.ENOLCK))

    monkeypatch.setattr(fcntl, "flock", no_locks)
    err = io.StringIO()
    monkeypatch.setattr(sys, "stderr", err)
    out = tmp_path / "ds"
    bar = tqdm(total=10, file=sys.stderr, disable=False)
    try:
        with DatasetWriter(out):
            pass
    finally:
        bar.close()
    warning = (
        f"fleetmind: warning: {out}: the file system does not support locks "
        f"({os.strerror(errno.ENOLCK)}); not guarded against a second writer"
    )
    text = err.getvalue()
    assert re.search(r"(^|[\r\n])" + re.escape(warning) + "\n", text), repr(text)


def test_rca_generate_refuses_when_flock_says_the_lock_is_held(
    tmp_path: Path, capsys, monkeypatch
) -> None:
    import errno
    import fcntl

    def held(fd: int, op: int) -> None:
        raise BlockingIOError(errno.EWOULDBLOCK, os.strerror(errno.EWOULDBLOCK))

    out = tmp_path / "ds"
    monkeypatch.setattr(fcntl, "flock", held)
    rc = main(["rca", "generate", "--out", str(out), "--incidents", "20", "--seed", "0"])
    assert rc == 2
    assert f"{out} is being written by another process" in _one_error_line(capsys.readouterr().err)
    assert not (out / "meta.json").exists()


# doctor --json that cannot be written ---------------------------------------------------------


@pytest.mark.parametrize("where", ["folder", "under_a_file", "no_permission"])
def test_doctor_refuses_an_unwritable_json_before_probing(
    tmp_path: Path, capsys, monkeypatch, where: str
) -> None:
    from fleetmind.serving.telemetry import doctor

    def probe(*a: object, **k: object) -> list:
        raise AssertionError("probed Prometheus before checking --json")

    monkeypatch.setattr(doctor, "diagnose", probe)
    if where == "folder":
        out = tmp_path / "d"
        out.mkdir()
    elif where == "under_a_file":
        (tmp_path / "f").write_text("x")
        out = tmp_path / "f" / "sub" / "doctor.json"
    else:
        if os.geteuid() == 0:
            pytest.skip("root writes anywhere")
        ro = tmp_path / "ro"
        ro.mkdir()
        ro.chmod(0o500)
        out = ro / "doctor.json"
    rc = main(["doctor", "--prometheus", "http://127.0.0.1:9", "--json", str(out)])
    line = _one_error_line(capsys.readouterr().err)
    assert rc == 2
    assert line.startswith(f"fleetmind: error: --json {out}"), line


@pytest.mark.parametrize(
    "errno_", [28, 32], ids=["disk-full", "reader-gone"]
)  # 32: a --json pipe or FIFO whose reader went away (not stdout): still the findings, then a line
def test_doctor_prints_the_findings_when_json_fails_after_probing(
    tmp_path: Path, capsys, monkeypatch, errno_: int
) -> None:
    from fleetmind.serving.telemetry import doctor
    from fleetmind.training import io

    findings = [doctor.Finding("error", "metrics", f"finding {i}") for i in range(3)]
    monkeypatch.setattr(doctor, "diagnose", lambda url, timeout_s, cluster: findings)

    def full_disk(path: object, payload: object) -> None:  # the disk filled during the probes
        raise OSError(errno_, os.strerror(errno_), str(path))  # 32 makes a BrokenPipeError

    monkeypatch.setattr(io, "write_json", full_disk)
    out = tmp_path / "doctor.json"
    rc = main(["doctor", "--prometheus", "http://127.0.0.1:9", "--json", str(out)])
    captured = capsys.readouterr()
    assert rc == 2
    assert [ln for ln in captured.out.splitlines() if "finding" in ln] == [
        f.line() for f in findings
    ]
    line = _one_error_line(captured.err)
    assert line.startswith(f"fleetmind: error: --json {out}: cannot write the findings"), line
