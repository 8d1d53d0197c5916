"""A reader of stdout that goes away (``fleetmind fleet show --json out.json | head``) ends the
command quietly with status 141, and the ``--json`` file is written all the same.

Python ignores SIGPIPE, so a write to a pipe whose reader has gone raises ``BrokenPipeError``: the
command printed a traceback and, since it wrote ``--json`` after printing, lost the file. The
handling follows the Python docs' "Note on SIGPIPE" (:mod:`signal`): point stdout at
``os.devnull`` and exit; 141 is 128 + SIGPIPE, what a shell reports for ``yes | head``.
"""

from __future__ import annotations

import argparse
import json
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
