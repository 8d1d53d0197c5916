"""The ``fleetmind`` command under a hostile process environment: stdout or stderr closed
(``>&-``), a reader that goes away before the ``--json`` file is written, SIGTERM from a supervisor,
Ctrl-C during a multi-process command, a stdout that cannot encode a path, and an ``--out`` folder
holding the user's own files. The contract is :mod:`fleetmind.cli.runner`'s docstring: files are
written whole, no traceback, 141 / 130 / 143 as a shell reports them.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

import fleetmind.cli as cli
from fleetmind.cli.runner import STDOUT_CLOSED_STATUS, run_main

os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")

TINY = ["--incidents", "5", "--min-nodes", "50", "--max-nodes", "60", "--workers", "1"]
"""``rca generate`` arguments for a dataset that takes a second."""


def _env(**extra: str) -> dict[str, str]:
    return dict(os.environ, MLFLOW_DISABLE_TELEMETRY="true", **extra)


def _fleetmind(args: list[str], **kw: object) -> subprocess.CompletedProcess:
    kw.setdefault("env", _env())
    kw.setdefault("timeout", 300)
    return subprocess.run([sys.executable, "-m", "fleetmind.cli", *args], **kw)  # type: ignore[call-overload]


def _close_fd(fd: int):  # noqa: ANN202
    def pre_exec() -> None:
        os.close(fd)

    return pre_exec


def test_a_closed_stdout_still_writes_the_file(tmp_path: Path) -> None:
    """``fleetmind ... >&-``: Python sets ``sys.stdout`` to None; the command wrote its file and
    then failed with ``'NoneType' object has no attribute 'flush'`` (status 1)."""
    out = tmp_path / "v.csv"
    proc = _fleetmind(
        ["sched", "variants", "--kind", "cpu", "--level", "3.7", "--seed", "1", "--out", str(out)],
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=_close_fd(1),
    )
    assert proc.stderr == "", proc.stderr
    assert proc.returncode == STDOUT_CLOSED_STATUS  # it had a line to print nobody could take
    assert out.read_text().count("\n") > 1


def test_a_closed_stderr_does_not_stop_the_command(tmp_path: Path) -> None:
    """``fleetmind rca generate ... 2>&-``: the progress bar (tqdm) wrote to a None stderr and the
    command died before writing the dataset."""
    out = tmp_path / "ds"
    proc = _fleetmind(
        ["rca", "generate", "--out", str(out), *TINY],
        stdout=subprocess.PIPE,
        text=True,
        # the bar is what wrote to the closed stderr (the suite's conftest sets TQDM_DISABLE)
        env={k: v for k, v in _env().items() if k != "TQDM_DISABLE"},
        preexec_fn=_close_fd(2),
    )
    assert proc.returncode == 0
    assert json.loads((out / "meta.json").read_text())["complete"] is True
    assert proc.stdout.startswith(f"wrote {out}")


def _into_a_closed_pipe(args: list[str]) -> subprocess.CompletedProcess:
    read_end, write_end = os.pipe()
    os.close(read_end)  # the reader is gone before the command prints
    try:
        return _fleetmind(args, stdout=write_end, stderr=subprocess.PIPE, text=True)
    finally:
        os.close(write_end)


def test_evaluate_json_survives_a_reader_that_went_away(tmp_path: Path) -> None:
    """``sched evaluate --json X | true`` and ``rca evaluate --json X | true``: the table was
    printed before X was written, so the closed pipe ended the command before the file (as
    ``fleet show`` already avoids)."""
    out = tmp_path / "sched.json"
    proc = _into_a_closed_pipe(
        ["sched", "evaluate", "--trace", "default", "--policies", "BestFit", "--seeds", "42"]
        + ["--json", str(out)]
    )
    assert proc.returncode == STDOUT_CLOSED_STATUS, proc.stderr
    assert "Traceback" not in proc.stderr
    assert "BestFit" in json.loads(out.read_text())["policies"]

    data = tmp_path / "ds"
    made = _fleetmind(["rca", "generate", "--out", str(data), *TINY], capture_output=True)
    assert made.returncode == 0
    out = tmp_path / "rca.json"
    proc = _into_a_closed_pipe(
        ["rca", "evaluate", "--data", str(data), "--limit", "2", "--methods", "random"]
        + ["--json", str(out)]
    )
    assert proc.returncode == STDOUT_CLOSED_STATUS, proc.stderr
    assert "Traceback" not in proc.stderr
    assert "random" in json.loads(out.read_text())["methods"]


def _wait_for_children(proc: subprocess.Popen, n: int, timeout_s: float = 120) -> list:
    parent = psutil.Process(proc.pid)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        kids = parent.children(recursive=True)
        if len(kids) >= n:
            return kids
        assert proc.poll() is None, "the command ended before its workers started"
        time.sleep(0.1)
    raise AssertionError("the workers did not start")


def test_sigterm_stops_sched_evaluate_workers(tmp_path: Path) -> None:
    """``kill <pid>`` of ``sched evaluate --workers 2`` left the pool's processes running their
    simulations (orphaned to init) for minutes."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "fleetmind.cli", "sched", "evaluate", "--trace", "default"]
        + ["--policies", "BestFit", "FGD", "DotProd", "--seeds", "42-45", "--workers", "2"]
        + ["--json", str(tmp_path / "e.json")],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env=_env(),
    )
    kids: list = []
    try:
        kids = _wait_for_children(proc, 2)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 128 + signal.SIGTERM  # unwound as on Ctrl-C
        _, alive = psutil.wait_procs(kids, timeout=30)
        alive = [p for p in alive if p.status() != psutil.STATUS_ZOMBIE]
        assert alive == [], f"workers left running: {alive}"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for kid in kids:  # only the processes this test started
            try:
                kid.kill()
            except psutil.NoSuchProcess:
                pass


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_stopping_rca_generate_prints_no_worker_tracebacks(tmp_path: Path, sig: int) -> None:
    """Ctrl-C (SIGINT to the whole process group) or SIGTERM during ``rca generate``: each pool
    worker printed its own KeyboardInterrupt traceback (about 20 lines)."""
    err = tmp_path / "err"
    with err.open("w") as fh:
        proc = subprocess.Popen(
            [sys.executable, "-m", "fleetmind.cli", "rca", "generate"]
            + ["--out", str(tmp_path / "ds"), "--incidents", "30000", "--workers", "2"],
            stdout=subprocess.DEVNULL,
            stderr=fh,
            env=_env(),
            start_new_session=True,
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
        )
        try:
            _wait_for_children(proc, 2)
            deadline = time.monotonic() + 120
            train = tmp_path / "ds" / "train.jsonl"
            while time.monotonic() < deadline and not (train.exists() and train.stat().st_size):
                time.sleep(0.05)  # until the workers have finished a job and run the next
            if sig == signal.SIGINT:
                os.killpg(proc.pid, sig)
            else:
                proc.send_signal(sig)
            rc = proc.wait(timeout=60)
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
    text = err.read_text()
    assert "Traceback" not in text, text[-3000:]
    assert rc == (130 if sig == signal.SIGINT else 128 + signal.SIGTERM)
    assert json.loads((tmp_path / "ds" / "meta.json").read_text())["complete"] is False


def test_a_path_stdout_cannot_encode_is_escaped(tmp_path: Path) -> None:
    """``PYTHONIOENCODING=ascii fleetmind sched variants --out vä.csv`` wrote the file, then failed
    with UnicodeEncodeError (status 1) printing its name."""
    out = tmp_path / "vä.csv"
    proc = _fleetmind(
        ["sched", "variants", "--kind", "cpu", "--level", "3.7", "--seed", "1", "--out", str(out)],
        capture_output=True,
        env=_env(PYTHONIOENCODING="ascii"),
    )
    assert proc.returncode == 0, proc.stderr
    assert b"v\\xe4.csv: " in proc.stdout
    assert out.exists()


def test_rca_generate_keeps_a_folder_of_the_users_files(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``rca generate --out DIR`` unlinked every ``*.jsonl`` in DIR and replaced its meta.json, even
    when DIR was not a dataset."""
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "events.jsonl").write_text('{"my": "precious"}\n')
    (mine / "meta.json").write_text('{"mine": 1}\n')
    assert cli.main(["rca", "generate", "--out", str(mine), *TINY]) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.startswith(f"fleetmind: error: {mine} is not empty and not a FleetMind dataset")
    assert (mine / "events.jsonl").read_text() == '{"my": "precious"}\n'
    assert (mine / "meta.json").read_text() == '{"mine": 1}\n'
    assert sorted(p.name for p in mine.iterdir()) == ["events.jsonl", "meta.json"]


def test_rca_generate_replaces_only_a_datasets_split_files(tmp_path: Path) -> None:
    """Generating into an earlier dataset replaces its splits and keeps a file of the user's."""
    ds = tmp_path / "ds"
    assert cli.main(["rca", "generate", "--out", str(ds), *TINY]) == 0
    (ds / "notes.jsonl").write_text("{}\n")
    (ds / "test_large.jsonl").write_text("stale\n")
    assert cli.main(["rca", "generate", "--out", str(ds), *TINY, "--large-fraction", "0"]) == 0
    assert (ds / "notes.jsonl").read_text() == "{}\n"
    assert not (ds / "test_large.jsonl").exists()
    meta = json.loads((ds / "meta.json").read_text())
    assert meta["complete"] is True and "test_large" not in meta["counts"]


def test_interrupted_starts_a_line_of_its_own(capsys: pytest.CaptureFixture[str]) -> None:
    """Ctrl-C while a progress bar is drawn: ``fleetmind: interrupted`` trailed the bar's line."""
    from tqdm import tqdm

    def fn() -> int:
        bar = tqdm(total=10, desc="work", file=sys.stderr, disable=False)
        bar.update(3)
        raise KeyboardInterrupt

    assert run_main(fn, prog="fleetmind") == 130
    err = capsys.readouterr().err
    assert err.endswith("\nfleetmind: interrupted\n"), repr(err[-200:])


def test_replay_reads_a_utf8_storm_under_the_c_locale(tmp_path: Path) -> None:
    """JSON is UTF-8 (RFC 8259 section 8.1); the storm file was read with the locale's encoding,
    so ``LC_ALL=C PYTHONUTF8=0`` refused a valid file."""
    storm = tmp_path / "storm.json"
    alert = {
        "labels": {"alertname": "DNSFailure", "summary": "lookup failed — both clusters"},
        "startsAt": "2024-01-01T00:00:00Z",
    }
    storm.write_text(json.dumps({"alerts": [alert]}, ensure_ascii=False), encoding="utf-8")
    code = "import sys; from fleetmind.training.replay import load_storm; load_storm(sys.argv[1])"
    proc = subprocess.run(
        [sys.executable, "-c", code, str(storm)],
        capture_output=True,
        text=True,
        env=_env(LC_ALL="C", LANG="C", PYTHONUTF8="0"),
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr


def test_regenerating_a_folder_an_older_interrupted_run_left(tmp_path: Path) -> None:
    """Before ``complete`` existed, an interrupted ``rca generate`` left a ``meta.json`` holding
    only ``counts``; the loader tells the user to regenerate that folder with ``rca generate
    --out``, which must therefore take it."""
    from fleetmind.data.rca_dataset import DatasetWriter

    old = tmp_path / "old"
    (old / "graphs").mkdir(parents=True)
    (old / "train.jsonl").write_text("{}\n")
    (old / "meta.json").write_text(json.dumps({"counts": {"train": 1}}))
    with DatasetWriter(old):  # refused before: "not a FleetMind dataset folder"
        assert not (old / "train.jsonl").exists()  # the old split is replaced
