"""Ctrl-C in ``fleetmind rca train`` after the fit (evaluation, calibration, MLflow logging and
registration, ``--release`` writing): ``fleetmind: interrupted`` on stderr, exit status 130, no traceback, the MLflow run not left ``RUNNING`` nor marked ``FINISHED``
while it logged nothing final (``KILLED``), nothing registered, no ``--release`` folder. The
interrupt is raised from a replaced step rather than sent as a timed signal (deterministic).

A Ctrl-C while ``--release`` is written comes after the run was logged and registered whole: the
run stays ``FINISHED`` (its registered version is a complete one) and no release folder, nor its
temporary folder, is left."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest
import torch

from fleetmind.cli import main
from fleetmind.data.rca_gen.generate import DatasetSpec, generate_dataset
from fleetmind.data.rca_gen.graphs import GraphGenConfig
from fleetmind.training import rca_train


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    data = tmp_path_factory.mktemp("ds") / "ds"
    small = GraphGenConfig(min_nodes=50, max_nodes=120)
    generate_dataset(data, DatasetSpec(n_incidents=40, seed=1, graphs=small, workers=1))
    return data


def _ctrl_c(*args: object, **kwargs: object) -> None:
    raise KeyboardInterrupt


@pytest.mark.parametrize(
    "step",
    ["evaluate_ranks", "calibrate_artifact", "log_and_register", "release"],
)
def test_ctrl_c_after_the_fit_exits_130_and_kills_the_run(
    step: str,
    dataset: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    import mlflow
    from mlflow.tracking import MlflowClient

    import fleetmind.folders as folders
    import fleetmind.rca.lightning_module as lm

    monkeypatch.setenv("MLFLOW_DISABLE_TELEMETRY", "true")
    monkeypatch.chdir(tmp_path)  # ./mlruns artifacts land in tmp
    if step == "evaluate_ranks":
        monkeypatch.setattr(lm, step, _ctrl_c)
    elif step == "release":  # Ctrl-C once every file of the release is in its temporary folder
        real_fill = folders._fill

        def fill_then_ctrl_c(*args: object, **kwargs: object) -> None:
            real_fill(*args, **kwargs)
            raise KeyboardInterrupt

        monkeypatch.setattr(folders, "_fill", fill_then_ctrl_c)
    else:
        monkeypatch.setattr(rca_train, step, _ctrl_c)
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    rel = tmp_path / "rel"
    before = signal.getsignal(signal.SIGINT)
    threads = torch.get_num_threads()
    try:
        rc = main(
            [
                "rca", "train", "--data", str(dataset), "--epochs", "1", "--hidden", "8",
                "--heads", "2", "--layers", "2", "--batch-size", "8",
                "--out", str(tmp_path / "runs"), "--tracking-uri", uri, "--release", str(rel),
            ]
        )  # fmt: skip
    finally:
        torch.set_num_threads(threads)
        signal.signal(signal.SIGINT, before)
        mlflow.set_tracking_uri(None)
    err = capsys.readouterr().err
    assert rc == 130, err
    assert "fleetmind: interrupted" in err and "Traceback" not in err, err
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith((".rel", "rel"))) == []
    client = MlflowClient(tracking_uri=uri)
    runs = client.search_runs([e.experiment_id for e in client.search_experiments()])
    if step == "release":  # the run was whole (logged, registered) before the copy began
        assert [r.info.status for r in runs] == ["FINISHED"], err
        return
    assert [r.info.status for r in runs] == ["KILLED"], err
    assert client.search_model_versions() == []
