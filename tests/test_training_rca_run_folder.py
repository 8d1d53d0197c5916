"""``rca train`` makes its run folder (``<out>/<run name>/``) before the fit; a run that stops
before writing anything there (a Ctrl-C before the first checkpoint, an error in setting up the
logger or the model) removes it again, so that no empty run folders pile up; one with files is
kept (it holds the checkpoints of a partial run)."""

from __future__ import annotations

from pathlib import Path

import pytest

from fleetmind.training import rca_train


def _stopping(monkeypatch: pytest.MonkeyPatch, stop: BaseException, write: bool) -> None:
    """Stub out the store and the data; the logger's setup, right after the run folder is made,
    raises ``stop`` (after writing a file in the run folder when ``write``)."""
    monkeypatch.setenv("MLFLOW_DISABLE_TELEMETRY", "true")
    monkeypatch.setattr(rca_train, "ready_store", lambda *a, **k: None)
    monkeypatch.setattr(rca_train, "_data_module", lambda args: (object(), None, 0.0))
    made: list[Path] = []
    new_run_dir = rca_train.new_run_dir

    def recording(*args: object) -> tuple[str, Path]:
        name, folder = new_run_dir(*args)  # type: ignore[arg-type]
        made.append(folder)
        return name, folder

    def logger(**kwargs: object) -> None:
        if write:
            (made[0] / "checkpoints").mkdir()
        raise stop

    monkeypatch.setattr(rca_train, "new_run_dir", recording)
    monkeypatch.setattr(rca_train, "lightning_mlflow_logger", logger)


@pytest.mark.parametrize("stop", [KeyboardInterrupt(), RuntimeError("boom")])
def test_a_run_stopped_before_writing_leaves_no_empty_run_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, stop: BaseException
) -> None:
    import mlflow

    _stopping(monkeypatch, stop, write=False)
    args = rca_train.Args(
        data=str(tmp_path), out=str(tmp_path / "runs"), tracking_uri=f"sqlite:///{tmp_path}/m.db"
    )
    try:
        with pytest.raises(type(stop)):
            rca_train.run(args)
    finally:
        mlflow.set_tracking_uri(None)
    assert (tmp_path / "runs").is_dir() and list((tmp_path / "runs").iterdir()) == []


def test_a_stopped_run_that_wrote_keeps_its_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import mlflow

    _stopping(monkeypatch, KeyboardInterrupt(), write=True)
    args = rca_train.Args(
        data=str(tmp_path), out=str(tmp_path / "runs"), tracking_uri=f"sqlite:///{tmp_path}/m.db"
    )
    try:
        with pytest.raises(KeyboardInterrupt):
            rca_train.run(args)
    finally:
        mlflow.set_tracking_uri(None)
    [run] = (tmp_path / "runs").iterdir()
    assert (run / "checkpoints").is_dir()
