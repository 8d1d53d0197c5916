"""The rerun ``command`` that ``rca petshop`` / ``rca fit`` record in their ``--json`` and the
"Regenerate" command of ``rca train``'s model card are quoted for a POSIX shell (``shlex.join``),
as ``rca evaluate`` records its command, with a URL's password masked. Before the fix they were
the arguments joined by spaces: a scenario folder ``scén ü`` reran as two arguments."""

from __future__ import annotations

import argparse
import json
import shlex
import shutil
import sys
from pathlib import Path

import pytest

from fleetmind.cli import main

SLICE = Path(__file__).parent / "data" / "petshop_slice"


def test_rca_petshop_command_is_shell_quoted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("MLFLOW_DISABLE_TELEMETRY", "true")
    scenario = tmp_path / "scén ü"
    shutil.copytree(SLICE, scenario)
    out = tmp_path / "ps q.json"
    argv = ["rca", "petshop", "--scenario", str(scenario), "--methods", "nsigma"]
    argv += ["--json", str(out)]
    monkeypatch.setattr(sys, "argv", ["fleetmind", *argv])  # what the command records
    assert main(argv) == 0
    command = json.loads(out.read_text())["command"]
    assert shlex.split(command) == ["fleetmind", *argv]


def test_rerun_command_masks_a_password() -> None:
    from fleetmind.training.rca_fit import rerun_command

    argv = ["rca", "fit", "--scenario", "a b", "--out", "postgresql://u:s3cr3t@db/fm"]
    command = rerun_command(argv)
    assert "s3cr3t" not in command
    assert shlex.split(command)[:5] == ["fleetmind", "rca", "fit", "--scenario", "a b"]


def test_rca_train_regenerate_command_is_shell_quoted() -> None:
    from fleetmind.training.rca_train import Args, _argv_tail

    args = argparse.Namespace(**vars(Args()))
    args.data = "my data/it's"
    args.release = "models/rca gat"
    args.feedback_db = "postgresql://fm:s3cr3t@db/fm"
    args.feedback_since = None
    args.feedback_until = None
    from fleetmind.training import rca_train

    command = (
        rca_train._regenerate_command(args)
        if hasattr(rca_train, "_regenerate_command")
        else " ".join(["fleetmind rca train", *_argv_tail(args)])  # the old form
    )
    words = shlex.split(command)
    assert words[:5] == ["fleetmind", "rca", "train", "--data", "my data/it's"]
    assert words[words.index("--release") + 1] == "models/rca gat"
    assert "s3cr3t" not in command
