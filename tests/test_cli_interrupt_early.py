"""Ctrl-C while ``fleetmind`` builds its parser (the group modules import in the first second or
so) ends with one line and status 130, as Ctrl-C does later (``fleetmind.cli.runner.run_main``),
instead of a 40-60 line ``KeyboardInterrupt`` traceback."""

from __future__ import annotations

import pytest

import fleetmind.cli as cli


def _interrupt(*args: object, **kwargs: object) -> None:
    raise KeyboardInterrupt


def _main(argv: list[str]) -> int:
    try:
        return cli.main(argv)
    except KeyboardInterrupt:  # caught here: it would stop the whole pytest session
        pytest.fail("KeyboardInterrupt escaped fleetmind.cli.main (a traceback on the terminal)")


def test_ctrl_c_while_building_the_parser(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(cli, "build_parser", _interrupt)
    assert _main(["rca", "train", "--data", "d"]) == 130
    captured = capsys.readouterr()
    assert captured.err == "fleetmind: interrupted\n" and captured.out == ""


def test_ctrl_c_while_parsing(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    real = cli.build_parser

    def parser_that_is_interrupted() -> object:
        parser = real()
        monkeypatch.setattr(parser, "parse_args", _interrupt)
        return parser

    monkeypatch.setattr(cli, "build_parser", parser_that_is_interrupted)
    assert _main(["--help"]) == 130
    assert capsys.readouterr().err == "fleetmind: interrupted\n"
