"""A tracking store that fails while a training command runs: one line and exit status 2, in
seconds, naming the local run folder.

Before, ``fleetmind rca train`` against an MLflow server stopped 12 s into the run went on for
about 8.5 minutes (MLflow's 7 HTTP tries with backoff per request, ``MLFLOW_HTTP_REQUEST_*``) and
ended with tracebacks (``MlflowException: API request to .../runs/log-batch failed ...
Connection refused``): the Lightning logger and the model logging ran outside
:func:`fleetmind.data.mlflow_store.bounded_requests` and nothing caught MLflow's error. Now both
trainers run under :func:`fleetmind.training.tracking.tracking_guard`.

Deterministic and fast: the server that fails is either an MlflowException raised from a
Lightning callback in the second epoch (as the Lightning logger raises it), or a tracking URI on
a local port where nothing listens, with the bounded retries lowered to none.
"""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest
import torch

from fleetmind.cli import main
from fleetmind.data.errors import NotAvailableError
from fleetmind.data.rca_gen.generate import DatasetSpec, generate_dataset
from fleetmind.data.rca_gen.graphs import GraphGenConfig
from fleetmind.training import rca_train
from fleetmind.training import tracking as fm_tracking
from tests.mlflow_helpers import RecipeArgs

PORT = 18261
"""A local port where nothing listens (the range this test may use)."""

REFUSED = (
    "API request to endpoint /api/2.0/mlflow/runs/log-batch failed with exception"
    " HTTPConnectionPool(host='127.0.0.1', port=18261): Max retries exceeded with url:"
    ' /api/2.0/mlflow/runs/log-batch (Caused by NewConnectionError("HTTPConnection(host='
    "'127.0.0.1', port=18261): Failed to establish a new connection: [Errno 111] Connection"
    ' refused"))'
)
"""What MLflow raised in the reported run (mlflow/utils/rest_utils.py), with this test's port."""


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("rca") / "ds"
    small = GraphGenConfig(min_nodes=50, max_nodes=120)
    generate_dataset(folder, DatasetSpec(n_incidents=40, seed=1, graphs=small, workers=1))
    return folder


def _train(data: Path, out: Path, uri: str) -> int:
    import mlflow

    threads = torch.get_num_threads()
    try:
        return main(
            [
                "rca", "train", "--data", str(data), "--epochs", "2", "--hidden", "8",
                "--heads", "2", "--layers", "2", "--batch-size", "8",
                "--out", str(out), "--tracking-uri", uri, "--json", str(out / "r.json"),
            ]
        )  # fmt: skip
    finally:
        torch.set_num_threads(threads)
        mlflow.set_tracking_uri(None)


def _port_is_free(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) != 0


def test_store_lost_mid_fit_is_one_line_naming_the_run_folder(
    data: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    import pytorch_lightning as pl
    from mlflow.exceptions import MlflowException

    monkeypatch.setenv("MLFLOW_DISABLE_TELEMETRY", "true")
    monkeypatch.chdir(tmp_path)

    class ServerGone(pl.Callback):
        def on_train_batch_start(self, trainer: pl.Trainer, *args: object) -> None:
            if trainer.current_epoch == 1:  # after epoch 0 left its checkpoints
                raise MlflowException(REFUSED)

    build = rca_train._trainer

    def with_server_gone(*args: object, **kwargs: object) -> tuple:
        trainer, ckpt = build(*args, **kwargs)
        trainer.callbacks.append(ServerGone())
        return trainer, ckpt

    monkeypatch.setattr(rca_train, "_trainer", with_server_gone)
    out = tmp_path / "runs"
    rc = _train(data, out, f"sqlite:///{tmp_path}/mlflow.db")
    err = capsys.readouterr().err
    assert rc == 2, err
    assert "Traceback" not in err
    lines = [ln for ln in err.splitlines() if ln.startswith("fleetmind: error:")]
    assert len(lines) == 1, err
    assert "failed during the run" in lines[0] and "Connection refused" in lines[0]
    (run_dir,) = out.glob("rca__gat__*")
    assert str(run_dir) in lines[0]
    assert any(run_dir.rglob("*.ckpt"))  # what the run wrote is still there


def test_store_down_is_reported_in_seconds_not_after_minutes_of_retries(
    data: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The tracking URI names a port where nothing listens; ``ready_store`` is skipped, as if the
    server stopped right after it answered. Inside ``bounded_requests`` (lowered here to no
    retries) that is an error at once; outside it, MLflow's own 7 tries with backoff would run.
    The run phase's own budget is checked apart (``test_the_run_phase_bounds_mlflow_retries``)."""
    if not _port_is_free(PORT):  # pragma: no cover
        pytest.skip(f"port {PORT} is in use")
    monkeypatch.setenv("MLFLOW_DISABLE_TELEMETRY", "true")
    monkeypatch.chdir(tmp_path)
    for k in fm_tracking.RUN_PHASE_REQUESTS:
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setattr(
        fm_tracking,
        "RUN_PHASE_REQUESTS",
        {
            "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "0",
            "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR": "0",
            "MLFLOW_HTTP_REQUEST_TIMEOUT": "5",
        },
    )
    monkeypatch.setattr(rca_train, "ready_store", lambda uri, **kw: None)
    rc = _train(data, tmp_path / "runs", f"http://127.0.0.1:{PORT}")
    err = capsys.readouterr().err
    assert rc == 2, err
    assert "Traceback" not in err
    lines = [ln for ln in err.splitlines() if ln.startswith("fleetmind: error:")]
    assert len(lines) == 1 and "failed during the run" in lines[0], err
    assert f"127.0.0.1:{PORT}" in lines[0]


def test_placement_recipes_report_a_lost_store_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import mlflow
    from mlflow.exceptions import MlflowException

    from fleetmind.training.recipes.tracking import tracked_run

    monkeypatch.setenv("MLFLOW_DISABLE_TELEMETRY", "true")
    monkeypatch.chdir(tmp_path)
    args = RecipeArgs(out=str(tmp_path / "runs"), tracking_uri=f"sqlite:///{tmp_path}/m.db")
    (tmp_path / "runs" / "r1").mkdir(parents=True)
    summary: dict = {}
    try:
        with pytest.raises(NotAvailableError) as info, tracked_run(args, "r1", summary):
            raise MlflowException(REFUSED)
    finally:
        mlflow.set_tracking_uri(None)
    text = str(info.value)
    assert "\n" not in text and "failed during the run" in text
    assert str(tmp_path / "runs" / "r1") in text


def test_other_errors_pass_through_the_guard(tmp_path: Path) -> None:
    with (
        pytest.raises(ZeroDivisionError),
        fm_tracking.tracking_guard("sqlite:///x.db", tmp_path),
    ):
        raise ZeroDivisionError


def test_a_wrapped_connection_error_counts_as_the_store(tmp_path: Path) -> None:
    import requests

    try:
        try:
            raise requests.exceptions.ConnectionError("Connection refused")
        except requests.exceptions.ConnectionError as inner:
            raise RuntimeError("finalize failed") from inner
    except RuntimeError as err:
        assert fm_tracking.tracking_failure(err)
    assert not fm_tracking.tracking_failure(ValueError("x"))


def test_a_one_line_error_passes_through_the_guard(tmp_path: Path) -> None:
    from mlflow.exceptions import MlflowException

    from fleetmind.data.errors import DataError

    with pytest.raises(DataError, match="already one line"):
        with fm_tracking.tracking_guard("sqlite:///x.db", tmp_path):
            try:
                raise MlflowException(REFUSED)
            except MlflowException:
                raise DataError("already one line") from None


def test_the_run_phase_bounds_mlflow_retries(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Inside the guard MLflow retries about a minute (5 retries, backoff 2: a blip or a rate
    limit does not end a long run, a stopped server does), unless the environment says otherwise;
    outside it the environment is as it was."""
    for k in fm_tracking.RUN_PHASE_REQUESTS:
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "7")
    with fm_tracking.tracking_guard("http://127.0.0.1:9", tmp_path):
        inside = {k: os.environ.get(k) for k in fm_tracking.RUN_PHASE_REQUESTS}
    assert inside == {
        "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "5",
        "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR": "2",
        "MLFLOW_HTTP_REQUEST_TIMEOUT": "7",
    }
    assert "MLFLOW_HTTP_REQUEST_MAX_RETRIES" not in os.environ


class _Registry:
    """A registry whose alias lookup fails as ``error_code`` says."""

    def __init__(self, error_code: str) -> None:
        self.error_code = error_code
        self.aliased: list[str] = []

    def get_model_version_by_alias(self, name: str, alias: str) -> object:
        from mlflow.exceptions import MlflowException
        from mlflow.protos.databricks_pb2 import ErrorCode

        raise MlflowException("lookup failed", error_code=ErrorCode.Value(self.error_code))

    def set_registered_model_alias(self, name: str, alias: str, version: str) -> None:
        self.aliased.append(version)

    def set_model_version_tag(self, *args: object) -> None:
        pass


def test_a_failed_champion_lookup_promotes_nothing() -> None:
    """A store that fails the alias lookup (HTTP 503 after the retries: MLflow's
    ``TEMPORARILY_UNAVAILABLE``) is not "no champion": promoting then could make a worse model
    the champion. A missing alias (``INVALID_PARAMETER_VALUE``) or model
    (``RESOURCE_DOES_NOT_EXIST``), as MLflow's SQL store answers them, still lets the first version
    become it."""
    from mlflow.exceptions import MlflowException

    down = _Registry("TEMPORARILY_UNAVAILABLE")
    with pytest.raises(MlflowException):
        fm_tracking.promote_if_better(
            down, "m", "2", tag="val_ac1", score=0.5, higher_is_better=True
        )
    assert down.aliased == []
    for code in ("INVALID_PARAMETER_VALUE", "RESOURCE_DOES_NOT_EXIST"):
        empty = _Registry(code)
        fm_tracking.promote_if_better(
            empty, "m", "1", tag="val_ac1", score=0.5, higher_is_better=True
        )
        assert empty.aliased == ["1"]
