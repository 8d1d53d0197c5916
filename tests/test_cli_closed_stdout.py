"""A reader of stdout that goes away (``fleetmind fleet show --json out.json | head``) ends the
command quietly with status 141, and the ``--json`` file is written all the same.

Python ignores SIGPIPE, so a write to a pipe whose reader has gone raises ``BrokenPipeError``: the
command printed a traceback and, since it wrote ``--json`` after printing, lost the file. The
handling follows the Python docs' "Note on SIGPIPE" (:mod:`signal`): point stdout at
``os.devnull`` and exit; 141 is 128 + SIGPIPE, what a shell reports for ``yes | head``.
"""

from __future__ import annotations

import argparse
import errno
import io
import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest

import fleetmind.cli as cli

REPO = Path(__file__).resolve().parents[1]


def test_fleet_show_into_a_closed_pipe_keeps_the_json(tmp_path: Path) -> None:
    out = tmp_path / "fleet.json"
    read_end, write_end = os.pipe()
    os.close(read_end)  # the reader is gone before the command writes anything
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "fleetmind.cli", "fleet", "show"]
            + ["--topology", str(REPO / "data" / "fleets" / "small.yaml"), "--json", str(out)],
            stdout=write_end,
            stderr=subprocess.PIPE,
            text=True,
            timeout=60,
        )
    finally:
        os.close(write_end)
    assert proc.stderr == "", proc.stderr  # no traceback, no "Exception ignored" at exit
    assert proc.returncode == 141
    assert json.loads(out.read_text())["shown_node"]["name"]


def _parser_raising(err: BaseException) -> argparse.ArgumentParser:
    """A ``fleetmind`` parser whose one command raises ``err``."""

    def command(args: argparse.Namespace) -> int:
        raise err

    parser = argparse.ArgumentParser(prog="fleetmind")
    parser.set_defaults(func=command, group="x")
    return parser


def test_a_broken_pipe_elsewhere_is_not_a_closed_stdout(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A child process or a connection that went away raises ``BrokenPipeError`` too; while stdout
    is still read, that is an error of the command (an OSError not about a path keeps its
    traceback), not a quiet 141."""
    monkeypatch.setattr(cli, "build_parser", lambda: _parser_raising(BrokenPipeError(32, "x")))
    with pytest.raises(BrokenPipeError):
        cli.main([])
    named = BrokenPipeError(32, "Broken pipe", "/run/fleetmind.fifo")
    monkeypatch.setattr(cli, "build_parser", lambda: _parser_raising(named))
    assert cli.main([]) == 2
    assert capsys.readouterr().err == "fleetmind: error: /run/fleetmind.fifo: Broken pipe\n"


def test_a_closed_stdout_with_nothing_left_to_flush_is_still_141(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Linux reports a pipe's write end whose reader is gone as ``POLLERR`` (pipe(7)): stdout is
    known closed even when the failed write left nothing buffered."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    out = open(write_end, "w", closefd=True)  # noqa: SIM115 - closed below
    try:
        monkeypatch.setattr(sys, "stdout", out)
        monkeypatch.setattr(cli, "build_parser", lambda: _parser_raising(BrokenPipeError(32, "")))
        assert cli.main([]) == cli.STDOUT_CLOSED_STATUS
    finally:
        monkeypatch.undo()
        out.close()


# A stdout that cannot take the output: a full disk (``> /dev/full``, ENOSPC) or a reader that went
# away (EPIPE). Python's flush of stdout at exit failed again on what stdout still held, printed
# "Exception ignored in: <_io.TextIOWrapper name='<stdout>'>" and a traceback, and turned the status
# into 120; the output of --help and --version was printed outside the error contract. Python's
# docs, "Note on SIGPIPE" (:mod:`signal`), point stdout at os.devnull so the exit flush is quiet.
# Each runs buffered, as a user's shell does, and with PYTHONUNBUFFERED=1 (the shipped container
# sets it, deploy/container/Dockerfile), where every write reaches the file at once: argparse's
# ArgumentParser._print_message (CPython Lib/argparse.py) ignores the OSError of that write, and the
# help exited 0 as if printed; so did a help over the 8 KiB buffer (`sched train --help`), whose
# write reaches the file at once buffered too.

NO_ROOM_LINE = "fleetmind: error: writing a file failed: No space left on device\n"
SMALL_FLEET = str(REPO / "data" / "fleets" / "small.yaml")


BUFFERING = pytest.mark.parametrize("unbuffered", [False, True], ids=["buffered", "unbuffered"])
SCHED_TRAIN_HELP = ["sched", "train", "--help"]  # over 8 KiB: written past the buffer


def _env(unbuffered: bool) -> dict[str, str]:
    env = dict(os.environ, MLFLOW_DISABLE_TELEMETRY="true")
    env.pop("PYTHONUNBUFFERED", None)
    if unbuffered:
        env["PYTHONUNBUFFERED"] = "1"
    return env


def _fleetmind(
    args: list[str], stdout: int, cwd: Path, unbuffered: bool = False
) -> subprocess.CompletedProcess[str]:
    return _python(["-m", "fleetmind.cli", *args], stdout, cwd, unbuffered)


def _python(
    args: list[str], stdout: int, cwd: Path, unbuffered: bool = False
) -> subprocess.CompletedProcess[str]:
    env = _env(unbuffered)
    return subprocess.run(
        [sys.executable, *args],
        stdout=stdout,
        stderr=subprocess.PIPE,
        text=True,
        timeout=120,
        env=env,
        cwd=cwd,
    )


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full (Linux)")
@pytest.mark.parametrize(
    "args",
    [
        ["fleet", "show", "--topology", SMALL_FLEET],
        ["graph", "schema"],
        ["--help"],
        ["--version"],
        SCHED_TRAIN_HELP,
        ["rca"],  # a group without its command: the group's help (status 2)
        ["rca", "generate", "--out", "gen", "--incidents", "4", "--graphs", "1"]
        + ["--workers", "1", "--seed", "0"],
    ],
    ids=["fleet-show", "graph-schema", "help", "version", "sched-train-help", "rca-help"]
    + ["rca-generate"],
)
@BUFFERING
def test_stdout_on_a_full_disk_is_one_line_and_status_2(
    args: list[str], unbuffered: bool, tmp_path: Path
) -> None:
    with open("/dev/full", "w") as full:
        proc = _fleetmind(args, full.fileno(), tmp_path, unbuffered)
    assert proc.stderr == NO_ROOM_LINE  # no "Exception ignored" at exit
    assert proc.returncode == 2


@pytest.mark.parametrize(
    "args",
    [["--version"], ["--help"], SCHED_TRAIN_HELP, ["rca"], ["graph", "schema"]],
    ids=["version", "help", "sched-train-help", "rca-help", "graph-schema"],
)
@BUFFERING
def test_stdout_into_a_closed_pipe_is_quiet_141(
    args: list[str], unbuffered: bool, tmp_path: Path
) -> None:
    read_end, write_end = os.pipe()
    os.close(read_end)  # the reader is gone before the command writes anything
    try:
        proc = _fleetmind(args, write_end, tmp_path, unbuffered)
    finally:
        os.close(write_end)
    assert proc.stderr == ""  # no BrokenPipeError traceback at exit
    assert proc.returncode == cli.STDOUT_CLOSED_STATUS


def test_sched_train_help_is_over_the_stdout_buffer() -> None:
    """The case above stays a write past the buffer (io.DEFAULT_BUFFER_SIZE, 8 KiB)."""
    parser = cli.build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    sched = sub.choices["sched"]
    sched_sub = next(a for a in sched._actions if isinstance(a, argparse._SubParsersAction))
    assert len(sched_sub.choices["train"].format_help().encode()) > io.DEFAULT_BUFFER_SIZE


# A command that failed and a stdout that failed too: the command's status (and its error line)
# wins, a failure with a status alone adding the no-room line of a full stdout; stdout's failure (141, or 2 and the no-room line) decides only for a command that succeeded
# (fleetmind.cli.runner's docstring). The command printed first, buffered: under PYTHONUNBUFFERED
# that print itself raises and the command never gets to fail, so these run buffered.
FAILING_COMMAND = """
import sys
from fleetmind.cli.runner import run_main
from fleetmind.errors import FleetMindError

def command():
    print("a line the command printed before it failed")
    mode = sys.argv[1]
    if mode == "return-1":
        return 1
    if mode == "exit-3":
        raise SystemExit(3)
    if mode == "error":
        raise FleetMindError("the real failure")
    return 0

raise SystemExit(run_main(command, prog="fleetmind"))
"""
FAILURES = pytest.mark.parametrize(
    "mode, status, err",
    [
        ("return-1", 1, ""),
        ("exit-3", 3, ""),
        ("error", 2, "fleetmind: error: the real failure\n"),
    ],
)


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full (Linux)")
@pytest.mark.parametrize(
    "mode, status, err",
    [
        # a failure with a status alone still says its output was lost (no room), not silently
        ("return-1", 1, NO_ROOM_LINE),
        ("exit-3", 3, NO_ROOM_LINE),
        # a failure that printed its own error line keeps that one line
        ("error", 2, "fleetmind: error: the real failure\n"),
    ],
)
def test_a_failed_command_keeps_its_status_on_a_full_disk(
    mode: str, status: int, err: str, tmp_path: Path
) -> None:
    with open("/dev/full", "w") as full:
        proc = _python(["-c", FAILING_COMMAND, mode], full.fileno(), tmp_path)
    assert (proc.returncode, proc.stderr) == (status, err)


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full (Linux)")
@pytest.mark.parametrize(("mode", "status"), [("return-1", 1), ("exit-3", 3)])
def test_a_failed_command_keeps_its_status_when_stderr_is_full_too(
    mode: str, status: int, tmp_path: Path
) -> None:
    """`> log 2>&1` on a full disk: the no-room line cannot be written either, and what stderr
    holds must not fail Python's exit flush (status 120): the command's status stays."""
    with open("/dev/full", "w") as full:
        proc = subprocess.run(
            [sys.executable, "-c", FAILING_COMMAND, mode],
            stdout=full.fileno(),
            stderr=full.fileno(),
            timeout=120,
            env=_env(False),
            cwd=tmp_path,
        )
    assert proc.returncode == status


@FAILURES
def test_a_failed_command_keeps_its_status_into_a_closed_pipe(
    mode: str, status: int, err: str, tmp_path: Path
) -> None:
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        proc = _python(["-c", FAILING_COMMAND, mode], write_end, tmp_path)
    finally:
        os.close(write_end)
    assert (proc.returncode, proc.stderr) == (status, err)


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full (Linux)")
def test_a_command_that_succeeded_still_reports_its_stdout(tmp_path: Path) -> None:
    """The other side of the precedence: status 0 and a stdout that failed is stdout's status."""
    with open("/dev/full", "w") as full:
        proc = _python(["-c", FAILING_COMMAND, "succeed"], full.fileno(), tmp_path)
    assert (proc.returncode, proc.stderr) == (2, NO_ROOM_LINE)
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        proc = _python(["-c", FAILING_COMMAND, "succeed"], write_end, tmp_path)
    finally:
        os.close(write_end)
    assert (proc.returncode, proc.stderr) == (cli.STDOUT_CLOSED_STATUS, "")


def test_help_still_exits_0_and_a_usage_error_2(capsys: pytest.CaptureFixture[str]) -> None:
    """Parsing under the error contract keeps argparse's own exits (in-process: SystemExit)."""
    with pytest.raises(SystemExit) as exc:
        cli.main(["--help"])
    assert exc.value.code == 0 and "usage: fleetmind" in capsys.readouterr().out
    with pytest.raises(SystemExit) as exc:
        cli.main(["--no-such-option"])
    assert exc.value.code == 2
    assert "unrecognized arguments: --no-such-option" in capsys.readouterr().err


def test_access_log_into_a_closed_pipe_is_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``fleetmind serve | tee log`` whose tee died: uvicorn's access handler wrote to the closed
    stdout and logging printed a '--- Logging error ---' block (its traceback, ~100 lines) on
    stderr for every request. The access lines stay on stdout (uvicorn's LOGGING_CONFIG puts its
    "access" handler on ext://sys.stdout); the first failed one prints one line and stops them."""
    from serving_helpers import serve_logging

    from fleetmind.serving.app import ACCESS_LOG_OFF_NOTE, ACCESS_LOGGER, StdoutAccessHandler

    read_end, write_end = os.pipe()
    os.close(read_end)
    stdout = open(write_end, "w", closefd=True)  # noqa: SIM115 - closed below
    try:
        monkeypatch.setattr(sys, "stdout", stdout)  # what ext://sys.stdout resolves to
        with serve_logging("info"):
            access = logging.getLogger(ACCESS_LOGGER)
            for _ in range(3):  # uvicorn's call (httptools_impl.py, h11_impl.py)
                access.info('%s - "%s %s HTTP/%s" %d', "127.0.0.1:5000", "GET", "/", "1.1", 200)
            handlers = [h for h in access.handlers if isinstance(h, StdoutAccessHandler)]
            assert len(handlers) == 1 and handlers[0].off
        stdout.flush()  # what the failed write left went to os.devnull: no error at exit
    finally:
        monkeypatch.undo()
        stdout.close()
    assert capsys.readouterr().err == ACCESS_LOG_OFF_NOTE + "\n"


def test_other_access_handler_errors_stay_logging_s(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Only a reader that went away stops the access log; another error is reported as logging
    reports it, and the next line is written."""
    from fleetmind.serving.app import StdoutAccessHandler

    class Failing(io.StringIO):
        fail = True

        def write(self, text: str) -> int:
            if self.fail:
                self.fail = False
                raise OSError(errno.EIO, "Input/output error")
            return super().write(text)

    stream = Failing()
    handler = StdoutAccessHandler(stream)
    monkeypatch.setattr(logging, "raiseExceptions", True)
    record = logging.makeLogRecord({"msg": "a line", "levelno": logging.INFO})
    handler.handle(record)
    handler.handle(record)
    assert not handler.off and stream.getvalue() == "a line\n"
    assert "--- Logging error ---" in capsys.readouterr().err
