"""A tracking server that dies mid-run: the run is ended in one request, not after a second round
of retries, so the command stops about a minute after the server went away (docs/gat.md).

Found on 2026-12-06 against ``mlflow server`` 3.17.2 (killed mid-run): ``fleetmind sched train``
and ``fleetmind rca train`` failed about 128 s after the kill, not the documented minute. The
request that met the dead server spent its retries (:data:`RUN_PHASE_REQUESTS`, about 60 s), and
then ending the run spent as much again: MLflow's ``ActiveRun.__exit__`` calls
``end_run("FAILED")`` (``mlflow/tracking/fluent.py``) for the placement recipes, and Lightning's
``_interrupt`` calls ``MLFlowLogger.finalize("failed")`` (``pytorch_lightning/trainer/call.py``),
which asks for the run and ends it, for the RCA trainer.

A stand-in server on a local port counts the requests: alive, it answers the few calls a run
makes; dead, every request gets a 503 (which MLflow retries as it retries a refused connection).
The retries are lowered to 2 with no backoff, so it is fast; no timing is asserted.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import pytest

from fleetmind.data.errors import NotAvailableError
from fleetmind.training import tracking as fm_tracking
from tests.mlflow_helpers import RecipeArgs

PORTS = range(19110, 19120)
"""The local ports this test may listen on."""
RETRIES = 2
"""MLflow's retries per request in this test: a request to the dead server is 1 + 2 tries."""

RUN_ID = "0123456789abcdef0123456789abcdef"
EXPERIMENT = {
    "experiment_id": "1",
    "name": "fleetmind-test",
    "artifact_location": "mlflow-artifacts:/1",
    "lifecycle_stage": "active",
}
RUN = {
    "info": {
        "run_id": RUN_ID,
        "run_uuid": RUN_ID,
        "experiment_id": "1",
        "run_name": "r1",
        "status": "RUNNING",
        "start_time": 1,
        "artifact_uri": f"mlflow-artifacts:/1/{RUN_ID}/artifacts",
        "lifecycle_stage": "active",
    },
    "data": {},
}
ANSWERS: dict[str, dict[str, Any]] = {
    "experiments/search": {"experiments": [EXPERIMENT]},
    "registered-models/search": {"registered_models": []},
    "experiments/get": {"experiment": {**EXPERIMENT, "experiment_id": "0", "name": "Default"}},
    "experiments/get-by-name": {"experiment": EXPERIMENT},
    "runs/create": {"run": RUN},
    "runs/get": {"run": RUN},
}
"""What the live server answers, by endpoint (``/api/2.0/mlflow/<endpoint>``); others get ``{}``."""


class FakeServer:
    """A stand-in MLflow server that records each request's endpoint, alive until ``dead``."""

    def __init__(self) -> None:
        self.dead = False
        self.seen: list[str] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def _answer(self) -> None:
                n = int(self.headers.get("Content-Length") or 0)
                self.rfile.read(n)
                endpoint = urlparse(self.path).path.removeprefix("/api/2.0/mlflow/")
                server.seen.append(endpoint)
                status, body = (503, b"{}") if server.dead else (200, b"")
                if not body:
                    body = json.dumps(ANSWERS.get(endpoint, {})).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_GET = do_POST = _answer  # noqa: N815

            def log_message(self, *args: Any) -> None:
                pass

        for port in PORTS:
            try:
                self.httpd = ThreadingHTTPServer(("127.0.0.1", port), Handler)
                break
            except OSError:
                continue
        else:  # pragma: no cover
            pytest.skip(f"no free port in {PORTS}")
        self.uri = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def since(self, mark: int) -> list[str]:
        """The endpoints asked for after the first ``mark`` requests."""
        return self.seen[mark:]

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeServer]:
    import mlflow

    monkeypatch.setenv("MLFLOW_DISABLE_TELEMETRY", "true")
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_BACKOFF_JITTER", "0")
    # ending a run asks for it first, to print its URL (``_log_url`` in
    # mlflow/tracking/_tracking_service/client.py), unless this is set
    monkeypatch.delenv("MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT", raising=False)
    for k in fm_tracking.RUN_PHASE_REQUESTS:
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setattr(
        fm_tracking,
        "RUN_PHASE_REQUESTS",
        {
            "MLFLOW_HTTP_REQUEST_MAX_RETRIES": str(RETRIES),
            "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR": "0",
            "MLFLOW_HTTP_REQUEST_TIMEOUT": "10",
        },
    )
    srv = FakeServer()
    try:
        yield srv
    finally:
        srv.close()
        while mlflow.active_run() is not None:  # pragma: no cover - a failed assertion's leftover
            mlflow.tracking.fluent._active_run_stack.get().pop()  # noqa: SLF001
        mlflow.set_tracking_uri(None)


def test_placement_run_is_ended_in_one_request_after_the_store_failed(
    server: FakeServer, tmp_path: Path
) -> None:
    import mlflow

    from fleetmind.training.recipes.tracking import tracked_run

    args = RecipeArgs(out=str(tmp_path / "runs"), tracking_uri=server.uri)
    with pytest.raises(NotAvailableError) as info, tracked_run(args, "r1", {}):
        server.dead = True
        mark = len(server.seen)
        mlflow.log_metric("x", 1.0, step=1)
    assert "failed during the run" in str(info.value) and "\n" not in str(info.value)
    # the failing request with its retries, then one try to end the run, which fails at its
    # first request (runs/get, for the URL MLflow prints; MLflow's ActiveRun.__exit__ made
    # 1 + RETRIES of those)
    assert server.since(mark) == ["runs/log-metric"] * (1 + RETRIES) + ["runs/get"]
    assert mlflow.active_run() is None  # ended: nothing ends it again at exit
    assert "MLFLOW_HTTP_REQUEST_MAX_RETRIES" not in __import__("os").environ  # given back


def test_rca_logger_ends_its_run_in_one_request_after_the_store_failed(
    server: FakeServer, tmp_path: Path
) -> None:
    """A real Lightning fit (``BoringModel``) logging to the stand-in server, which dies in the
    second epoch; Lightning then calls the logger's ``finalize("failed")``."""
    import pytorch_lightning as pl
    from pytorch_lightning.demos.boring_classes import BoringModel

    logger = fm_tracking.lightning_mlflow_logger(
        experiment_name="fleetmind-test", run_name="r1", tracking_uri=server.uri
    )
    assert logger.run_id == RUN_ID
    marks: list[int] = []

    class DieInSecondEpoch(pl.Callback):
        def on_train_epoch_start(self, trainer: Any, pl_module: Any) -> None:
            if trainer.current_epoch == 1:
                server.dead = True
                marks.append(len(server.seen))
                trainer.logger.log_metrics({"x": 1.0}, step=1)

    trainer = pl.Trainer(
        max_epochs=3,
        logger=logger,
        callbacks=[DieInSecondEpoch()],
        limit_train_batches=2,
        limit_val_batches=0,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        default_root_dir=str(tmp_path),
        accelerator="cpu",
        devices=1,
    )
    with pytest.raises(NotAvailableError), fm_tracking.tracking_guard(server.uri, tmp_path):
        trainer.fit(BoringModel())
    # the failing log-batch with its retries, then one try of finalize's get-run (Lightning's
    # MLFlowLogger.finalize made 1 + RETRIES of those)
    assert server.since(marks[0]) == ["runs/log-batch"] * (1 + RETRIES) + ["runs/get"]


def test_a_live_store_ends_runs_as_mlflow_does(server: FakeServer, tmp_path: Path) -> None:
    """No failure: ``fluent_run`` ends the run ``FINISHED``, and an error that is not the store's
    ends it ``FAILED`` with the usual retries (the store answers: MLflow's get-run, for the URL
    it prints, and update)."""
    import mlflow

    mlflow.set_tracking_uri(server.uri)
    with fm_tracking.fluent_run(run_name="r1", experiment_id="1"):
        mark = len(server.seen)
    assert server.since(mark) == ["runs/get", "runs/update"] and mlflow.active_run() is None
    with pytest.raises(ZeroDivisionError), fm_tracking.fluent_run(experiment_id="1"):
        mark = len(server.seen)
        raise ZeroDivisionError
    assert server.since(mark) == ["runs/get", "runs/update"] and mlflow.active_run() is None


def test_single_try_gives_the_environment_back(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "5")
    monkeypatch.delenv("MLFLOW_HTTP_REQUEST_TIMEOUT", raising=False)
    import os

    with fm_tracking.single_try():
        assert os.environ["MLFLOW_HTTP_REQUEST_MAX_RETRIES"] == "0"
        assert os.environ["MLFLOW_HTTP_REQUEST_TIMEOUT"] == "10"
    assert os.environ["MLFLOW_HTTP_REQUEST_MAX_RETRIES"] == "5"
    assert "MLFLOW_HTTP_REQUEST_TIMEOUT" not in os.environ


def test_the_logger_class_pickles(tmp_path: Path) -> None:
    """``ddp_spawn`` pickles the trainer and its loggers: the class is found by name."""
    import pickle

    cls = fm_tracking.TrackedMLFlowLogger
    assert pickle.loads(pickle.dumps(cls)) is cls
