"""``rca fit`` / ``rca train`` check their output paths before any work.

* ``--json`` in the model folder the command writes (``rca fit --out D --json D/config.json``,
  ``rca train --release D --json D/config.json``) is refused: the summary used to replace the
  model's ``config.json`` (status 0, a model that no longer loads).
* ``rca train`` checks ``--json`` and ``--release`` writable before training (docs/layout.md),
  not after the fit, the MLflow run and the registration.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from fleetmind.cli import main

os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")


@pytest.fixture
def no_training(monkeypatch: pytest.MonkeyPatch) -> list[object]:
    """Replace the trainers: a call is recorded (and 'succeeds') instead of training."""
    from fleetmind.training import rca_fit, rca_train

    calls: list[object] = []
    monkeypatch.setattr(rca_train, "cli", lambda args: calls.append(args) or 0)
    monkeypatch.setattr(rca_fit, "run", lambda args: calls.append(args) or 0)
    return calls


def _error(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    return err[0]


def _fit(tmp_path: Path, *extra: str) -> int:
    return main(["rca", "fit", "--scenario", str(tmp_path / "scen"), *extra])


def _train(tmp_path: Path, *extra: str) -> int:
    argv = ["rca", "train", "--data", str(tmp_path / "data"), "--out", str(tmp_path / "runs")]
    return main([*argv, *extra])


@pytest.mark.parametrize("inside", ["config.json", "model.pt", "sub/summary.json", "."])
def test_fit_refuses_json_in_its_out_folder(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], no_training: list[object], inside: str
) -> None:
    out = tmp_path / "fit"
    assert _fit(tmp_path, "--out", str(out), "--json", str(out / inside)) == 2
    line = _error(capsys)
    assert line.startswith("fleetmind: error: --json ") and "model folder --out" in line
    assert not no_training


def test_fit_refuses_json_in_its_out_folder_under_another_name(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], no_training: list[object]
) -> None:
    out = tmp_path / "fit"
    out.mkdir()
    (out / "config.json").write_text("{}")
    (tmp_path / "via-link").symlink_to(out)
    os.link(out / "config.json", tmp_path / "hard.json")
    for json_path in (tmp_path / "via-link" / "config.json", tmp_path / "hard.json"):
        assert _fit(tmp_path, "--out", str(out), "--json", str(json_path)) == 2
        assert "model folder --out" in _error(capsys)
    assert not no_training


def test_fit_json_beside_its_out_folder_is_fine(tmp_path: Path, no_training: list[object]) -> None:
    out = tmp_path / "fit"
    assert _fit(tmp_path, "--out", str(out), "--json", str(tmp_path / "fit.json")) == 0
    assert _fit(tmp_path, "--out", str(out), "--json", str(tmp_path / "fit2")) == 0  # a prefix
    assert len(no_training) == 2


def test_train_refuses_json_in_its_release_folder(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], no_training: list[object]
) -> None:
    rel = tmp_path / "rel"
    assert _train(tmp_path, "--release", str(rel), "--json", str(rel / "config.json")) == 2
    line = _error(capsys)
    assert line.startswith("fleetmind: error: --json ") and "model folder --release" in line
    assert not no_training


def test_train_checks_json_and_release_before_training(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], no_training: list[object]
) -> None:
    """Both used to be found only after the whole fit (and registration)."""
    afile = tmp_path / "afile"
    afile.write_text("x\n")
    assert _train(tmp_path, "--json", str(afile / "x.json")) == 2
    assert "--json" in _error(capsys)
    assert _train(tmp_path, "--release", str(afile / "rel")) == 2
    assert "--release" in _error(capsys)
    assert _train(tmp_path, "--release", str(afile)) == 2
    assert "a file is there" in _error(capsys)
    assert _train(tmp_path, "--json", str(tmp_path)) == 2
    assert "a folder is there" in _error(capsys)
    assert not no_training
    ok = ("--release", str(tmp_path / "rel"), "--json", str(tmp_path / "rel.json"))
    assert _train(tmp_path, *ok) == 0
    assert len(no_training) == 1


@pytest.mark.parametrize(
    "argv",
    [
        ["rca", "evaluate", "--data", "{missing}"],
        ["rca", "petshop", "--scenario", "{missing}"],
        ["fleet", "show"],
    ],
)
def test_a_json_path_that_cannot_be_written_is_refused_before_any_work(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str]
) -> None:
    """``rca evaluate`` and ``rca petshop`` ran their whole evaluation (minutes on the default
    dataset) and then failed on a ``--json`` that is a folder, losing the results; the input they
    would read is missing here, so the first error shows which check comes first."""
    args = [a.format(missing=tmp_path / "missing") for a in argv]
    assert main([*args, "--json", str(tmp_path)]) == 2
    line = _error(capsys)
    assert "--json" in line and "a folder is there" in line, line
