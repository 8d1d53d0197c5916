"""The commands in the "command" column of ``docs/results.md`` get past their parser as written.

A reader pastes them into a shell; one that lacks a required argument stops at argparse with exit
status 2 before measuring anything. Each command is parsed by its own module's parser (captured
when the module's ``main`` asks it to parse, so nothing runs) with every argument type and choice
list switched off: placeholders such as ``DIR`` or ``S`` are fine, a missing required option or
positional is not.
"""

from __future__ import annotations

import argparse
import os
import re
import runpy
import shlex
import sys
from pathlib import Path

import pytest

os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "results.md"
COMMAND = re.compile(r"`((?:python -m|fleetmind) [^`]*)`")


def _commands(text: str) -> list[str]:
    """The commands quoted in the third column of the "Every figure" table of ``text``."""
    table = text.split("## Every figure", 1)[1].split("\n## ", 1)[0]
    found: list[str] = []
    for line in table.splitlines():
        if not line.startswith("| ") or line.startswith("| ---"):
            continue
        cells = line.strip().strip("|").split(" | ")
        if len(cells) < 4 or cells[2] == "command":
            continue
        found.extend(COMMAND.findall(cells[2]))
    return list(dict.fromkeys(found))


def _tokens(command: str) -> list[str]:
    """``command`` as argv: ``[--opt VALUE]`` brackets dropped (the optional part is kept) and an
    elided ``...`` removed."""
    return [t for t in shlex.split(command.replace("[", "").replace("]", "")) if t != "..."]


class _Captured(Exception):
    def __init__(self, parser: argparse.ArgumentParser) -> None:
        super().__init__()
        self.parser = parser


def _untyped(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """``parser`` (and its sub-parsers) accepting any value: no types, no choices (sub-command
    names are still checked)."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                _untyped(sub)
        else:
            action.type = None
            action.choices = None
    return parser


def _module_parser(module: str, monkeypatch: pytest.MonkeyPatch) -> argparse.ArgumentParser:
    """The parser that ``python -m module`` builds, taken at its first ``parse_args`` call."""

    def capture(self: argparse.ArgumentParser, *args: object, **kwargs: object) -> None:
        raise _Captured(self)

    monkeypatch.setattr(argparse.ArgumentParser, "parse_args", capture)
    monkeypatch.setattr(argparse.ArgumentParser, "parse_known_args", capture)
    monkeypatch.setattr(sys, "argv", [module])
    try:
        runpy.run_module(module, run_name="__main__")
    except _Captured as got:
        return got.parser
    raise AssertionError(f"python -m {module} never parsed its arguments")


def _parser_and_argv(
    command: str, monkeypatch: pytest.MonkeyPatch
) -> tuple[argparse.ArgumentParser, list[str]]:
    argv = _tokens(command)
    if argv[0] == "fleetmind":
        from fleetmind.cli import build_parser

        return build_parser(), argv[1:]
    assert argv[:2] == ["python", "-m"], command
    with monkeypatch.context() as patch:
        parser = _module_parser(argv[2], patch)
    return parser, argv[3:]


def test_the_table_has_commands() -> None:
    commands = _commands(DOC.read_text(encoding="utf-8"))
    assert len(commands) >= 20, commands


def test_a_command_without_its_required_option_is_reported(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    parser, argv = _parser_and_argv("fleetmind rca petshop", monkeypatch)
    with pytest.raises(SystemExit):
        _untyped(parser).parse_args(argv)
    assert "--scenario" in capsys.readouterr().err


@pytest.mark.parametrize("command", _commands(DOC.read_text(encoding="utf-8")))
def test_every_results_command_parses_as_written(
    command: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    parser, argv = _parser_and_argv(command, monkeypatch)
    try:
        _untyped(parser).parse_args(argv)
    except SystemExit as stop:
        err = capsys.readouterr().err.strip().splitlines()
        pytest.fail(f"{command!r} stops at argparse (exit {stop.code}): {err[-1] if err else ''}")
