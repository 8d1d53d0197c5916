"""The embedded SQLite tracking store is created atomically, and a store whose creation an older
release left half-made is named in one line (training/tracking.py ``ready_store``,
``_create_sqlite_store``; docs/gat.md, "Training").

MLflow creates a new store's tables and then runs its schema migrations one after another
(mlflow/store/db/utils.py ``_initialize_tables``: ``InitialBase.metadata.create_all`` then
``_upgrade_db``, which calls ``alembic.command.upgrade(config, "heads")``), and SQLite commits each
DDL statement on its own: a process killed part-way left a store that every later use failed on
with ``table ... already exists``. The child process here stalls that upgrade at a chosen
revision (the real migrations up to it, then a sleep) and is killed with SIGKILL there.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from fleetmind.errors import ConfigError
from fleetmind.training.tracking import ready_store

CHILD = r"""
import sys, time
from alembic.runtime.migration import HeadMaintainer
real = HeadMaintainer.update_to_step
stop, uri, how = int(sys.argv[1]), sys.argv[2], sys.argv[3]
done = []
def stalled(self, step):
    if len(done) == stop:  # migration number ``stop`` ran, its revision not recorded yet
        print("STALLED", flush=True)
        time.sleep(600)
    done.append(step)
    real(self, step)
HeadMaintainer.update_to_step = stalled
if how == "ready_store":  # this release
    from fleetmind.training.tracking import ready_store
    ready_store(uri)
else:  # MLflow's own first use, in place: what older releases did
    import mlflow
    mlflow.MlflowClient(uri).search_experiments()
"""


USE = """
import sys
import mlflow
from fleetmind.training.tracking import ready_store
uri = f"sqlite:///{sys.argv[1]}/mlflow.db"
ready_store(uri)
client = mlflow.MlflowClient(uri, registry_uri=uri)
run = client.create_run(client.create_experiment("e"))
client.set_terminated(run.info.run_id)
"""
"""What :func:`_use` does, in a new process (the next CLI run)."""


def _migrations() -> int:
    """How many schema migrations MLflow runs on a new store."""
    from alembic.script import ScriptDirectory
    from mlflow.store.db.utils import _get_alembic_config

    return len(list(ScriptDirectory.from_config(_get_alembic_config("")).walk_revisions()))


def _kill_mid_creation(folder: Path, stop: int, how: str) -> None:
    """Run a child that creates ``folder/mlflow.db`` (``how``: as this release does, or as MLflow
    does on first use), stalled once migration number ``stop`` (from 0) has run but before its
    revision is recorded in ``alembic_version``, and SIGKILL it there."""
    env = dict(os.environ, MLFLOW_DISABLE_TELEMETRY="true")
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(stop), "sqlite:///mlflow.db", how],
        cwd=folder,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert child.stdout is not None
        assert child.stdout.readline().strip() == "STALLED"
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=30)


def _use(folder: Path) -> None:
    """What a training run does with the store: ready it, then log a run and register a model."""
    import mlflow

    uri = f"sqlite:///{folder / 'mlflow.db'}"
    ready_store(uri)
    client = mlflow.MlflowClient(uri, registry_uri=uri)
    exp = client.create_experiment("e")
    run = client.create_run(exp)
    client.log_metric(run.info.run_id, "m", 1.0)
    client.set_terminated(run.info.run_id)
    client.create_registered_model("m")


@pytest.mark.parametrize("point", ["first", "second", "middle", "last"])
def test_a_first_use_killed_while_the_store_is_made_leaves_none(tmp_path: Path, point: str) -> None:
    n = _migrations()
    stop = {"first": 0, "second": 1, "middle": n // 2, "last": n - 1}[point]
    _kill_mid_creation(tmp_path, stop, "ready_store")
    _use(tmp_path)  # the next run creates the store and works
    assert sorted(p.name for p in tmp_path.iterdir() if "mlflow.db" in p.name) == [
        "mlflow.db",
        "mlflow.db.lock",
    ]  # the killed creation's temporary file is gone


@pytest.mark.parametrize("point", ["first", "middle"])
def test_a_store_half_made_by_an_older_release_is_named_and_kept(
    tmp_path: Path, point: str
) -> None:
    """Killed in its first migration, the store records no revision; later, one behind the tables
    it holds (MLflow then fails with ``table ... already exists``): each is named. (Killed in
    its last, MLflow calls it out of date and names its own way out, ``mlflow db upgrade``, which
    finishes it: that message stands, as for any store at an older schema, data or not.)"""
    n = _migrations()
    _kill_mid_creation(tmp_path, {"first": 0, "middle": n // 2}[point], "mlflow")
    db = tmp_path / "mlflow.db"
    size = db.stat().st_size
    with pytest.raises(ConfigError) as err:
        ready_store(f"sqlite:///{db}")
    line = str(err.value)
    assert "\n" not in line and "creation was interrupted" in line and "delete it" in line
    assert str(db) in line
    assert db.stat().st_size == size  # the user's file: named, not deleted
    db.unlink()  # what the line says to do; the next run (a new process, as the CLI) then works
    subprocess.run(
        [sys.executable, "-c", USE, str(tmp_path)],
        env=dict(os.environ, MLFLOW_DISABLE_TELEMETRY="true"),
        check=True,
        timeout=120,
    )


def test_a_store_with_data_is_never_called_interrupted(tmp_path: Path) -> None:
    """A store that holds runs is used as before (no false alarm from the half-made check)."""
    _use(tmp_path)
    ready_store(f"sqlite:///{tmp_path / 'mlflow.db'}")


def test_an_empty_file_or_a_link_is_made_in_place(tmp_path: Path) -> None:
    """An existing empty ``mlflow.db`` (a bind-mounted file: a rename onto it fails with EBUSY;
    one made with the operator's own mode) and a link (its target must become the store) are
    left to MLflow, which makes the store in place, as before."""
    empty = tmp_path / "a" / "mlflow.db"
    empty.parent.mkdir()
    empty.touch(mode=0o640)
    empty.chmod(0o640)
    inode = empty.stat().st_ino
    ready_store(f"sqlite:///{empty}")
    assert empty.stat().st_ino == inode and empty.stat().st_size > 0  # the same file, filled
    assert oct(empty.stat().st_mode & 0o777) == "0o640"
    target = tmp_path / "elsewhere" / "store.db"
    target.parent.mkdir()
    link = tmp_path / "b" / "mlflow.db"
    link.parent.mkdir()
    link.symlink_to(target)  # dangling until the store is made
    ready_store(f"sqlite:///{link}")
    assert link.is_symlink() and target.stat().st_size > 0


def test_a_store_holding_any_row_is_not_called_interrupted(tmp_path: Path) -> None:
    """Only runs, registered models and experiments counted as data: a store whose Default
    experiment held traces or logged models (or any other row) and that MLflow refused was called
    a data-less store to delete. Any row but MLflow's own seed is data now."""
    import sqlite3

    from fleetmind.training.tracking import _interrupted_store

    db = tmp_path / "mlflow.db"
    ready_store(f"sqlite:///{db}")
    con = sqlite3.connect(db)
    con.execute("DELETE FROM alembic_version")  # what a cut creation leaves: no revision
    con.commit()
    assert _interrupted_store(db) is not None  # nothing in it: named
    con.execute("INSERT INTO experiment_tags (key, value, experiment_id) VALUES ('k', 'v', 0)")
    con.commit()
    con.close()
    assert _interrupted_store(db) is None  # a row of the user's: MLflow's own message stands
