"""``fleetmind rca train`` registers a calibrated model: the temperature is fitted on the run's
validation split (through ``rca calibrate``'s :func:`fit_calibration`) and stored in the
``config.json`` that MLflow logs and registers, so ``models:/fleetmind-rca@champion`` serves the
calibrated scores the notifier's severity thresholds assume. Too small a validation split is
registered uncalibrated, with one warning and ``calibration: null`` plus the reason.

Before this, ``rca train`` saved the artifact without ``calibration`` (T = 1) and registered it,
and ``rca calibrate --write`` could only edit a local folder: the first test failed.

Protocol (temperature fitted on the validation split, by the true root's NLL): Guo et al., "On
Calibration of Modern Neural Networks", ICML 2017, section 4.2.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from gat_helpers import toy_dataset

from fleetmind.cli import main
from fleetmind.rca.gat_analyzer import GATAnalyzer
from fleetmind.training.rca_calibrate import MIN_FIT_INCIDENTS
from fleetmind.training.rca_train import validation_set


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """One tmp MLflow store for the module; the process-wide tracking URI is reset afterwards."""
    import mlflow

    tmp = tmp_path_factory.mktemp("mlflow")
    uri = f"sqlite:///{tmp}/mlflow.db"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("MLFLOW_TRACKING_URI", uri)
        mp.setenv("MLFLOW_DISABLE_TELEMETRY", "true")
        mp.chdir(tmp)  # ./mlruns artifacts land in tmp
        mlflow.set_tracking_uri(uri)
        try:
            yield uri
        finally:
            mlflow.set_tracking_uri(None)


def _train(data: Path, out: Path, res: Path) -> dict:
    # two epochs at a high learning rate: after one, the toy model's logits differ by ~0.05 and
    # the fit runs to the search bound T_MIN (underconfident scores), which is no calibration
    old = torch.get_num_threads()
    try:
        rc = main(
            [
                "rca", "train", "--data", str(data), "--epochs", "2", "--lr", "0.1",
                "--hidden", "8", "--heads", "2", "--layers", "2", "--batch-size", "8",
                "--out", str(out), "--json", str(res),
            ]
        )  # fmt: skip
    finally:
        torch.set_num_threads(old)
    assert rc == 0
    return json.loads(res.read_text())


def _registered_config(store: str, version: str) -> dict:
    """``config.json`` of registered version ``version``, as the service downloads it."""
    import mlflow

    local = Path(mlflow.artifacts.download_artifacts(f"models:/fleetmind-rca/{version}"))
    return json.loads(next(local.rglob("config.json")).read_text())


def test_train_registers_a_model_calibrated_on_its_validation_split(
    store: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = toy_dataset(tmp_path / "d", n_train=16, n_val=MIN_FIT_INCIDENTS + 4, n_test=6, seed=0)
    res = _train(data, tmp_path / "runs", tmp_path / "res.json")
    cfg = _registered_config(store, res["version"])
    cal = cfg["calibration"]
    assert cal is not None and 0.05 < cal["temperature"] < 20.0 and cal["temperature"] != 1.0
    assert cal["fitted_on"]["split"] == "val" and cal["fitted_on"]["n"] >= MIN_FIT_INCIDENTS
    n_val = MIN_FIT_INCIDENTS + 4
    assert cal["fitted_on"]["eval_set"] == validation_set(data, 0, 0.15, n_val).fingerprint
    assert cal["fitted_on"]["in_sample"] == ["val"]
    assert set(cal["ece"]) == {"val", "test"}
    for e in cal["ece"].values():
        assert 0.0 <= e["uncalibrated"] <= 1.0 and 0.0 <= e["calibrated"] <= 1.0
    assert cal["ece"]["val"]["n"] == n_val
    assert res["calibration"] == cal
    out = capsys.readouterr().out
    line = next(ln for ln in out.splitlines() if ln.startswith("calibrated: temperature"))
    assert "in-sample" in line
    local = GATAnalyzer.load(res["artifact"])
    assert local.temperature == cal["temperature"]
    # one code path: `rca calibrate` on the registered version fits the same temperature
    uri = f"models:/fleetmind-rca/{res['version']}"
    argv = ["rca", "calibrate", "--data", str(data), "--model", uri, "--eval-splits", "test"]
    assert main([*argv, "--json", str(tmp_path / "cal.json")]) == 0
    again = json.loads((tmp_path / "cal.json").read_text())
    assert again["temperature"] == cal["temperature"]
    assert again["splits"]["test"]["calibrated"]["ece"] == cal["ece"]["test"]["calibrated"]


def test_too_small_a_validation_split_registers_uncalibrated_with_one_warning(
    store: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = toy_dataset(tmp_path / "d", n_train=16, n_val=5, n_test=3, seed=1)
    res = _train(data, tmp_path / "runs", tmp_path / "res.json")
    err = capsys.readouterr().err
    warn = [ln for ln in err.splitlines() if ln.startswith("fleetmind: warning:")]
    assert len(warn) == 1, warn
    assert "registering the model uncalibrated (scores at T = 1)" in warn[0]
    assert f"needs at least {MIN_FIT_INCIDENTS}" in warn[0]
    cfg = _registered_config(store, res["version"])
    assert "calibration" in cfg and cfg["calibration"] is None
    assert cfg["calibration_skipped"] == res["calibration_skipped"] == warn[0].split(": ", 2)[2]
    assert GATAnalyzer.load(res["artifact"]).temperature == 1.0


def test_calibrate_write_names_what_to_do_with_a_registry_uri(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = toy_dataset(tmp_path / "d", n_train=4, n_val=2, n_test=1, seed=2)
    argv = ["rca", "calibrate", "--data", str(data), "--model", "models:/fleetmind-rca@champion"]
    assert main([*argv, "--write"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "is an MLflow model" in err[0] and "rca train" in err[0]
