"""``fleetmind rca train --data`` with a folder that is not there stops with one line before the
MLflow tracking store is created: the README promises one line and exit status 2, and a
``mlflow.db`` left in the working folder by a run that never started misleads the next one."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from fleetmind.data.errors import DataError
from fleetmind.training import rca_train


def test_missing_dataset_stops_before_the_store(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("MLFLOW_DISABLE_TELEMETRY", "true")
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(DataError, match="dataset folder not found: nope"):
        rca_train.run(rca_train.Args(data="nope"))
    assert os.listdir(tmp_path) == []  # no mlflow.db, no lock file, no run folder
