"""Ctrl-C in ``fleetmind rca train`` after the fit (evaluation, calibration, MLflow logging and
registration, ``--release`` writing): ``fleetmind: interrupted`` on stderr, exit status 130, no traceback, the MLflow run not left ``RUNNING`` nor marked ``FINISHED``
while it logged nothing final (``KILLED``), nothing registered, no ``--release`` folder. The
interrupt is raised from a replaced step rather than sent as a timed signal (deterministic).

A Ctrl-C while ``--release`` is written comes after the run was logged and registered whole: the
run stays ``FINISHED`` (its registered version is a complete one) and no release folder, nor its
temporary folder, is left."""

from __future__ import annotations

import os
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


@pytest.mark.parametrize("where", ["after_the_fit", "in_the_fit"])
def test_ctrl_c_with_the_store_down_tries_to_kill_the_run_once(
    where: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The store went away (connection refused) and the user presses Ctrl-C: marking the run
    ``KILLED`` is one HTTP attempt (:func:`fleetmind.training.tracking.single_try`), not MLflow's
    retry policy (``MLFLOW_HTTP_REQUEST_MAX_RETRIES``, default 7 with backoff: a minute or more
    before the interrupt reached the CLI). MLflow retries a refused connection through urllib3's
    ``Retry`` (``mlflow/utils/request_utils.py`` ``_get_request_session``), each try opening a new
    connection with ``urllib3.util.connection.create_connection``; those opens are counted. The
    environment asks for 3 retries without backoff, so the retry policy would show as 4 opens."""
    import socket

    import urllib3.util.connection as u3conn

    monkeypatch.setenv("MLFLOW_DISABLE_TELEMETRY", "true")
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "3")
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR", "0")
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_BACKOFF_JITTER", "0")
    closed = socket.socket()  # bound, never listening: connections to it are refused
    closed.bind(("127.0.0.1", 0))
    uri = f"http://127.0.0.1:{closed.getsockname()[1]}"
    opens: list[tuple[str, int]] = []
    real_open = u3conn.create_connection

    def counted_open(address: tuple[str, int], *args: object, **kwargs: object) -> socket.socket:
        opens.append(address)
        return real_open(address, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(u3conn, "create_connection", counted_open)

    class Logger:  # Lightning's MLFlowLogger once its run exists
        _run_id = "0123456789abcdef0123456789abcdef"

    try:
        if where == "after_the_fit":
            killer = rca_train._KilledOnCtrlC(uri)
            killer.logger = Logger()
            with pytest.raises(KeyboardInterrupt), killer:
                raise KeyboardInterrupt
        else:
            rca_train._interrupted(None, uri, Logger(), tmp_path / "none")
    finally:
        closed.close()
    assert opens == [("127.0.0.1", int(uri.rsplit(":", 1)[1]))]
    assert os.environ["MLFLOW_HTTP_REQUEST_MAX_RETRIES"] == "3"  # the environment given back
