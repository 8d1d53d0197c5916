"""The tracking helper both trainers share (training/tracking.py): one champion rule, with the
direction each trainer's score needs (RCA: higher val_ac1 wins; placement: lower eval_unalloc)."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest
from tracking_helpers import FakeRegistry

from fleetmind.data.errors import ConfigError
from fleetmind.training import rca_train
from fleetmind.training.recipes import tracking as placement_tracking
from fleetmind.training.tracking import (
    pip_requirements,
    promote_if_better,
    ready_store,
    tracking_uri,
)


@pytest.mark.parametrize(
    "higher,scores,promoted",
    [
        (True, [0.8, 0.7, 0.8, 0.85], [True, False, False, True]),  # RCA: val_ac1
        (False, [12.0, 13.0, 12.0, 11.5], [True, False, False, True]),  # placement: eval_unalloc
    ],
)
def test_champion_moves_only_on_a_strictly_better_score(higher, scores, promoted) -> None:
    reg = FakeRegistry()
    got = [
        promote_if_better(reg, "m", str(v), tag="s", score=s, higher_is_better=higher)[0]
        for v, s in enumerate(scores, 1)
    ]
    assert got == promoted and reg.alias == "4"
    assert reg.tags["2"]["s"] == f"{scores[1]:.6f}"


def test_a_champion_without_a_readable_tag_is_replaced() -> None:
    reg = FakeRegistry()
    reg.alias, reg.tags["1"] = "1", {"s": "not a number"}
    assert promote_if_better(reg, "m", "2", tag="s", score=0.0, higher_is_better=False) == (
        True,
        "1",
        None,
    )


def test_both_trainers_use_the_one_helper(monkeypatch: pytest.MonkeyPatch) -> None:
    assert rca_train.tracking_uri is tracking_uri
    assert placement_tracking.tracking_uri is tracking_uri
    assert rca_train.log_pyfunc_model is placement_tracking.log_pyfunc_model
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    assert tracking_uri() == "sqlite:///mlflow.db"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "sqlite:///x.db")
    assert tracking_uri() == "sqlite:///x.db" and tracking_uri("file:/y") == "file:/y"
    (numpy,) = pip_requirements(["numpy"])
    assert numpy.startswith("numpy==")


_FIRST_USE = """
import sys, time
from pathlib import Path
import mlflow
from fleetmind.training.tracking import ready_store
uri, box, i, lock = sys.argv[1], Path(sys.argv[2]), sys.argv[3], sys.argv[4] == "1"
(box / f"ready-{i}").touch()
while not (box / "go").exists():
    time.sleep(0.01)
if lock:
    ready_store(uri)
mlflow.set_tracking_uri(uri)
mlflow.set_experiment(f"exp-{i}")
"""


def _first_use_together(tmp_path, n: int, lock: bool) -> list[subprocess.CompletedProcess]:
    """``n`` processes that first use one new SQLite store at the same moment (a file barrier)."""
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    env = {**os.environ, "MLFLOW_DISABLE_TELEMETRY": "true"}
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _FIRST_USE, uri, str(tmp_path), str(i), "1" if lock else "0"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        for i in range(n)
    ]
    deadline = time.monotonic() + 120
    while len(list(tmp_path.glob("ready-*"))) < n and time.monotonic() < deadline:
        time.sleep(0.05)
    (tmp_path / "go").touch()
    return [
        subprocess.CompletedProcess(p.args, p.wait(timeout=120), *p.communicate()) for p in procs
    ]


def test_runs_started_together_on_a_new_store_all_start(tmp_path) -> None:
    """Two training runs started together on the default embedded store used to race to create
    its tables (``sqlite3.OperationalError: table ... already exists`` in the slower one);
    ``ready_store`` creates them under a lock, so every run starts and the store holds them all."""
    import mlflow

    done = _first_use_together(tmp_path, 3, lock=True)
    assert [p.returncode for p in done] == [0, 0, 0], [p.stderr[-400:] for p in done]
    names = {
        e.name
        for e in mlflow.MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}").search_experiments()
    }
    assert {"exp-0", "exp-1", "exp-2"} <= names
    assert (tmp_path / "mlflow.db.lock").exists()


def test_ready_store_locks_only_sqlite_and_asks_every_store(tmp_path, monkeypatch) -> None:
    uri = f"file:{tmp_path / 'mlruns'}"
    # MLflow 3 refuses file stores unless told otherwise (its message says how): one line here
    monkeypatch.delenv("MLFLOW_ALLOW_FILE_STORE", raising=False)
    with pytest.raises(ConfigError, match=r"cannot be used: .*MLFLOW_ALLOW_FILE_STORE"):
        ready_store(uri)
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    ready_store(uri)
    assert not list(tmp_path.glob("*.lock"))
