"""Ctrl-C in ``fleetmind rca train`` keeps the CLI's contract: ``fleetmind: interrupted`` on
stderr, exit status 130, a warning naming the partial run folder, the MLflow run ended ``KILLED``,
nothing registered, and SIGINT handled again afterwards.

Lightning catches the ``KeyboardInterrupt`` inside ``Trainer.fit`` itself
(``_call_and_handle_interrupt`` in ``pytorch_lightning/trainer/call.py``): it sets SIGINT to
``SIG_IGN``, ends the logger's run ``failed`` and calls ``sys.exit(1)``. Before the fix the command
exited 1 without a word. The interrupt is raised from a callback at the first training batch
(the second epoch's, once the first left checkpoints) rather than sent as a timed signal, so the test is deterministic.
"""

from __future__ import annotations

import signal
from pathlib import Path

import pytest
import torch

from fleetmind.cli import main
from fleetmind.data.rca_gen.generate import DatasetSpec, generate_dataset
from fleetmind.data.rca_gen.graphs import GraphGenConfig
from fleetmind.training import rca_train


def test_ctrl_c_in_the_fit_exits_130_and_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import mlflow
    import pytorch_lightning as pl
    from mlflow.tracking import MlflowClient

    monkeypatch.setenv("MLFLOW_DISABLE_TELEMETRY", "true")
    monkeypatch.chdir(tmp_path)  # ./mlruns artifacts land in tmp
    data = tmp_path / "ds"
    small = GraphGenConfig(min_nodes=50, max_nodes=120)
    generate_dataset(data, DatasetSpec(n_incidents=40, seed=1, graphs=small, workers=1))
    uri = f"sqlite:///{tmp_path}/mlflow.db"

    class CtrlC(pl.Callback):
        def on_train_batch_start(self, trainer: pl.Trainer, *args: object) -> None:
            if trainer.current_epoch == 1:  # after epoch 0 left its checkpoints
                raise KeyboardInterrupt

    build = rca_train._trainer

    def with_ctrl_c(*args: object, **kwargs: object) -> tuple:
        trainer, ckpt = build(*args, **kwargs)
        trainer.callbacks.append(CtrlC())
        return trainer, ckpt

    monkeypatch.setattr(rca_train, "_trainer", with_ctrl_c)
    before = signal.getsignal(signal.SIGINT)
    threads = torch.get_num_threads()
    try:
        rc = main(
            [
                "rca", "train", "--data", str(data), "--epochs", "2", "--hidden", "8",
                "--heads", "2", "--layers", "2", "--batch-size", "8",
                "--out", str(tmp_path / "runs"), "--tracking-uri", uri,
            ]
        )  # fmt: skip
    finally:
        torch.set_num_threads(threads)
        now = signal.getsignal(signal.SIGINT)
        signal.signal(signal.SIGINT, before)
        mlflow.set_tracking_uri(None)
    err = capsys.readouterr().err
    assert rc == 130
    assert "fleetmind: interrupted" in err
    partial = [ln for ln in err.splitlines() if "is a partial run" in ln]
    assert len(partial) == 1 and str(tmp_path / "runs") in partial[0], err
    assert now == before  # not left at SIG_IGN: a second Ctrl-C still stops the process
    client = MlflowClient(tracking_uri=uri)
    runs = client.search_runs([e.experiment_id for e in client.search_experiments()])
    assert [r.info.status for r in runs] == ["KILLED"]
    assert client.search_model_versions() == []


def test_sigterm_in_the_fit_ends_the_command_with_143(tmp_path: Path) -> None:
    """Lightning handles SIGTERM itself (``SignalConnector``): it stops every rank at the next
    batch boundary and raises ``SIGTERMException``, a ``SystemExit`` without a code, so a Job or a
    ``&&`` chain saw a stopped training end with status 0. It now ends as the CLI ends on SIGTERM
    (``fleetmind: interrupted``, status 143) after the MLflow run is marked ``KILLED``. The
    signal is sent from a callback at the second epoch's first batch, so the test is
    deterministic; it runs in a child process."""
    import json
    import os
    import subprocess
    import sys

    data = tmp_path / "ds"
    small = GraphGenConfig(min_nodes=50, max_nodes=120)
    generate_dataset(data, DatasetSpec(n_incidents=40, seed=1, graphs=small, workers=1))
    args = [
        "rca", "train", "--data", str(data), "--epochs", "3", "--hidden", "8", "--heads", "2",
        "--layers", "2", "--batch-size", "8", "--out", str(tmp_path / "runs"), "--no-register",
        "--tracking-uri", f"sqlite:///{tmp_path}/mlflow.db", "--json", str(tmp_path / "r.json"),
    ]  # fmt: skip
    code = f"""
import os, signal
import pytorch_lightning as pl
from fleetmind.cli import main
from fleetmind.training import rca_train

class Term(pl.Callback):
    def on_train_batch_start(self, trainer, *args):
        if trainer.current_epoch == 1 and not getattr(self, "sent", False):
            self.sent = True
            os.kill(os.getpid(), signal.SIGTERM)

build = rca_train._trainer
def with_term(*a, **k):
    trainer, ckpt = build(*a, **k)
    trainer.callbacks.append(Term())
    return trainer, ckpt
rca_train._trainer = with_term
raise SystemExit(main({json.dumps(args)}))
"""
    env = {**os.environ, "MLFLOW_DISABLE_TELEMETRY": "true", "TQDM_DISABLE": "1"}
    proc = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=600,
    )
    assert proc.returncode == 128 + signal.SIGTERM, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr
    assert proc.stderr.rstrip().splitlines()[-1] == "fleetmind: interrupted", proc.stderr[-2000:]
    assert not (tmp_path / "r.json").exists()  # no result of a stopped run
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path}/mlflow.db")
    runs = client.search_runs([e.experiment_id for e in client.search_experiments()])
    assert [r.info.status for r in runs] == ["KILLED"]
