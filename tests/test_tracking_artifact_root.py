"""A tracking store whose local artifact folder cannot take the model stops a command before any
work, in one line.

MLflow puts a new experiment's artifacts in ``<default artifact root>/<experiment id>``; for the
embedded SQLite store that root is ``./mlruns`` where the store was made
(``mlflow.store.tracking.DEFAULT_LOCAL_FILE_AND_ARTIFACT_PATH``). With a file named ``mlruns``
there, ``fleetmind rca train`` ran its whole fit and then failed ``.../mlruns/1: Not a directory``;
docs/gat.md says the store is checked before any data is read.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from fleetmind.data.errors import ConfigError
from fleetmind.training.tracking import _artifact_root_problem, ready_store


def test_a_file_where_the_artifact_folder_goes_stops_ready_store(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "mlruns").write_text("not a folder\n")
    with pytest.raises(ConfigError) as exc:
        ready_store(f"sqlite:///{tmp_path / 'mlflow.db'}")
    msg = str(exc.value)
    assert f"its artifact folder {tmp_path / 'mlruns'} is a file" in msg and "\n" not in msg
    (tmp_path / "mlruns").unlink()
    ready_store(f"sqlite:///{tmp_path / 'mlflow.db'}")  # the folder can be made: fine


def test_which_locations_are_checked(tmp_path: Path) -> None:
    (tmp_path / "f").write_text("")
    assert _artifact_root_problem(f"file://{tmp_path}/f/mlruns/0") == (
        f"its artifact folder {tmp_path / 'f' / 'mlruns'} cannot be made: {tmp_path / 'f'} is a file"
    )
    assert _artifact_root_problem(str(tmp_path / "new" / "mlruns" / "0")) is None  # made later
    assert _artifact_root_problem(f"file://{tmp_path}/mlruns/0") is None
    for remote in ("mlflow-artifacts:/0", "s3://bucket/mlruns/0", None):
        assert _artifact_root_problem(remote) is None
