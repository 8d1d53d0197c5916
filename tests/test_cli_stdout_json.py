"""``--json -`` writes the JSON to stdout alone, so that ``fleetmind ... --json - | jq`` reads it.

It created a file named ``-`` in the working folder and printed the table on stdout
(``fleet show``, ``sched evaluate``, the ``rca`` commands: every command with a ``--json`` file).
Now the command runs with its tables and notes on stderr and the JSON, flushed, on stdout; a
reader of stdout that went away still ends the command quietly with status 141. ``--json -`` is
no file for the collision checks (it was "also --out", "in the model folder" as ``$PWD/-``), and
``-`` for any other output option (``graph schema --out -``, which wrote ``./-`` and printed
nothing) is one error line: ``./-`` names that file.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from fleetmind import argtypes
from fleetmind.cli import STDOUT_CLOSED_STATUS, main
from fleetmind.training import io as training_io


def _env() -> dict[str, str]:
    env = {**os.environ, "MLFLOW_DISABLE_TELEMETRY": "true"}
    env.pop("PYTHONUNBUFFERED", None)
    return env


def _fleetmind(args: list[str], cwd: Path, **kw: object) -> subprocess.CompletedProcess[str]:
    kw.setdefault("stdout", subprocess.PIPE)
    return subprocess.run(  # type: ignore[call-overload]
        [sys.executable, "-m", "fleetmind.cli", *args],
        cwd=cwd,
        stderr=subprocess.PIPE,
        text=True,
        env=_env(),
        timeout=120,
        **kw,
    )


FLEET_SHOW = ["fleet", "show", "--topology", "small"]


def test_fleet_show_json_dash_is_the_json_alone_on_stdout(tmp_path: Path) -> None:
    proc = _fleetmind([*FLEET_SHOW, "--json", "-"], cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    summary = json.loads(proc.stdout)  # the whole of stdout: no table before or after it
    assert summary["name"] == "small" and summary["n_gpus"] == 16
    assert "cluster" in proc.stderr and "GPU0" in proc.stderr  # the table went to stderr
    assert not (tmp_path / "-").exists()
    # the same JSON as a --json file holds
    assert _fleetmind([*FLEET_SHOW, "--json", "f.json"], cwd=tmp_path).returncode == 0
    assert json.loads((tmp_path / "f.json").read_text()) == summary


def test_json_dash_into_a_closed_pipe_is_quiet_141(tmp_path: Path) -> None:
    read_end, write_end = os.pipe()
    os.close(read_end)  # `| true`: the reader is gone before the JSON is written
    try:
        proc = _fleetmind([*FLEET_SHOW, "--json", "-"], cwd=tmp_path, stdout=write_end)
    finally:
        os.close(write_end)
    assert proc.returncode == STDOUT_CLOSED_STATUS, proc.stderr
    assert "Traceback" not in proc.stderr and "error" not in proc.stderr
    assert not (tmp_path / "-").exists()


def _run_in_process(capsys: pytest.CaptureFixture[str], argv: list[str]) -> tuple[dict, str]:
    capsys.readouterr()
    status = main(argv)
    out, err = capsys.readouterr()
    assert status == 0, err
    return json.loads(out), err


def test_rca_and_sched_evaluate_json_dash(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MLFLOW_DISABLE_TELEMETRY", "true")
    stdout = sys.stdout
    tiny = ["--incidents", "5", "--min-nodes", "50", "--max-nodes", "60", "--workers", "1"]
    assert main(["rca", "generate", "--out", "ds", "--seed", "0", *tiny]) == 0
    argv = ["rca", "evaluate", "--data", "ds", "--limit", "2", "--methods", "random"]
    res, err = _run_in_process(capsys, [*argv, "--json", "-"])
    assert "random" in res["methods"] and "AC@1" in err
    argv = ["sched", "evaluate", "--trace", "default", "--policies", "BestFit", "--seeds", "42"]
    res, err = _run_in_process(capsys, [*argv, "--json", "-"])
    assert "BestFit" in res["policies"] and "BestFit" in err
    assert not (tmp_path / "-").exists()
    assert sys.stdout is stdout  # given back after each command


def test_write_json_dash_outside_the_cli_writes_to_stdout(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    training_io.write_json("-", {"a": float("nan")})
    training_io.write_json(Path("-"), {"b": 1})  # doctor's --json is a Path
    out = capsys.readouterr().out
    assert out == '{\n  "a": null\n}\n{\n  "b": 1\n}\n'
    assert not (tmp_path / "-").exists()


def test_json_dash_needs_no_writable_working_folder(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(argtypes, "write_problem", lambda *a, **k: "permission denied")
    argtypes.check_writable_file("-", "--json")  # stdout: nothing to check
    with pytest.raises(argtypes.ConfigError, match="permission denied"):
        argtypes.check_writable_file("./-", "--out")  # the file named -, checked as a file


def test_dash_for_another_output_is_one_error_line() -> None:
    # only --json writes to stdout: "--out -" would be a file ./- and print nothing
    with pytest.raises(argtypes.ConfigError, match=r"^--out -: only --json writes to stdout; "):
        argtypes.check_writable_file("-", "--out")
    argtypes.refuse_stdout("-", "")  # an argparse type does not know its option: unchanged


ONLY_JSON = "only --json writes to stdout; give ./- for a file named -"
NO_JSON = "this command writes nothing to stdout; give ./- to name it -"
DASH_OUT = {  # argv, how the error says to reach stdout
    "graph schema": (
        ["graph", "schema", "--out", "-"],
        "leave out --out to write to stdout; give ./- for a file named -",
    ),
    "graph build": (["graph", "build", "--from-dir", ".", "--out", "-"], NO_JSON),
    "rca generate": (["rca", "generate", "--incidents", "3", "--out", "-"], NO_JSON),
    "fleet discover": (["fleet", "discover", "--out", "-", "--json", "-"], ONLY_JSON),
    "sched search-teacher": (
        ["sched", "search-teacher", "--trace", "default", "--out", "-"],
        ONLY_JSON,
    ),
}


@pytest.mark.parametrize(("argv", "way"), DASH_OUT.values(), ids=DASH_OUT.keys())
def test_out_dash_is_refused_not_a_silent_file(tmp_path: Path, argv: list[str], way: str) -> None:
    proc = _fleetmind(argv, cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.splitlines()[-1] == (f"fleetmind: error: --out -: {way}")
    assert proc.stdout == "" and "Traceback" not in proc.stderr
    assert not (tmp_path / "-").exists()


def test_graph_schema_out_dot_slash_dash_is_the_file(tmp_path: Path) -> None:
    proc = _fleetmind(["graph", "schema", "--out", "./-"], cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert json.loads((tmp_path / "-").read_text())["title"]


def test_json_dash_is_no_file_to_collide_with(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``--json -`` is stdout: the checks that refuse an output file colliding with another
    output, an input or the model folder resolved it to ``$PWD/-`` and refused it."""
    from fleetmind.cli.common import refuse_input_as_output, refuse_same_output
    from fleetmind.cli.rca import refuse_output_in_folder

    monkeypatch.chdir(tmp_path)
    (tmp_path / "-").write_text("{}")  # a file named - in the working folder, as an input
    refuse_output_in_folder("-", "--json", ".", "--out")  # rca fit --out . --json -
    refuse_same_output([("--out", "./-"), ("--json", "-")])
    refuse_input_as_output("-", "--json", [("--trace", "./-", ())])
    # the same checks still refuse a real collision
    with pytest.raises(argtypes.ConfigError, match="is also --out"):
        refuse_same_output([("--out", "./-"), ("--json", "./-")])
    with pytest.raises(argtypes.ConfigError, match=r"an input of this command \(--trace\)"):
        refuse_input_as_output("./-", "--json", [("--trace", "-", ())])
    with pytest.raises(argtypes.ConfigError, match="in the model folder"):
        refuse_output_in_folder("./-", "--json", ".", "--out")
