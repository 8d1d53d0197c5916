"""The CLI skeleton: help works, groups are wired, user errors are one line with status 2."""

from __future__ import annotations

import pytest

from fleetmind import cli
from fleetmind.data.errors import DataError


def test_help_lists_every_group(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        cli.main(["--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    for group in cli.GROUPS:
        assert group in out


def test_user_error_is_one_line_exit_2(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def boom(args: object) -> int:
        raise DataError("trace file x.csv: row 3 has no cpu_milli")

    parser = cli.build_parser()
    args = parser.parse_args(["fleet", "show"])
    monkeypatch.setattr(cli, "build_parser", lambda: parser)
    parser.set_defaults()
    args.func = boom
    monkeypatch.setattr(parser, "parse_args", lambda argv=None: args)
    assert cli.main([]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["fleetmind: error: trace file x.csv: row 3 has no cpu_milli"]


@pytest.mark.parametrize("mode", ["fgd", "dynamic"])
def test_sched_train_unknown_trace_writes_nothing(
    mode: str,
    shared_data: object,
    tmp_path: object,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A misspelt trace is one line, before any MLflow store or run folder is created."""
    monkeypatch.chdir(tmp_path)  # type: ignore[arg-type]
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    argv = ["sched", "train", "--mode", mode, "--trace", "default", "--trace", "defualt"]
    assert cli.main([*argv, "--timesteps", "10", "--out", "runs/x"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "unknown openb trace 'defualt'" in err[0]
    assert list(tmp_path.iterdir()) == []  # type: ignore[attr-defined]
