"""An MLflow experiment deleted on the tracking store (in the MLflow UI, or ``mlflow experiments
delete``; MLflow keeps it, lifecycle stage ``deleted``, until ``mlflow gc``): both training
commands stop at once with one line naming it and the two ways out, before any work.

Found on 2026-12-06 against ``mlflow server`` 3.17.2: ``fleetmind sched train`` crashed with a
32-line traceback (``MlflowException: Cannot set a deleted experiment 'fleetmind-placement' as
the active experiment``, ``mlflow.set_experiment``) after creating an empty run folder, and
``fleetmind rca train`` featurised its data and then failed with a misleading ``UNIQUE
constraint failed: experiments.workspace, experiments.name`` (Lightning's ``MLFlowLogger`` found
no active experiment of that name and tried to create it). An embedded SQLite store behaves the
same way (the name stays taken while the experiment is deleted), so it stands in for the server.
"""

from __future__ import annotations

from pathlib import Path

import mlflow
import pytest

from fleetmind import cli
from fleetmind.data.errors import ConfigError
from fleetmind.training.tracking import ready_store
from tests.mlflow_helpers import RCA_TRAIN_ARGV, SCHED_TRAIN_ARGV, RecipeArgs


@pytest.fixture(autouse=True)
def _no_telemetry(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MLFLOW_DISABLE_TELEMETRY", "true")


def _deleted(uri: str, name: str) -> str:
    """Create experiment ``name`` on ``uri`` and delete it (as the MLflow UI does); its id."""
    client = mlflow.MlflowClient(tracking_uri=uri)
    exp_id = client.create_experiment(name)
    client.delete_experiment(exp_id)
    assert client.get_experiment_by_name(name).lifecycle_stage == "deleted"
    return str(exp_id)


def test_ready_store_names_a_deleted_experiment_and_the_way_out(tmp_path: Path) -> None:
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    exp_id = _deleted(uri, "fleetmind-placement")
    ready_store(uri)  # no experiment asked for: the store itself is fine
    ready_store(uri, experiment="another-one")  # one that does not exist yet: runs create it
    with pytest.raises(ConfigError) as info:
        ready_store(uri, experiment="fleetmind-placement")
    msg = str(info.value)
    assert "\n" not in msg
    assert msg.startswith(
        f"MLflow experiment 'fleetmind-placement' (id {exp_id}) is deleted on the tracking store "
        f"{uri}: restore it (`mlflow experiments restore --experiment-id {exp_id}`"
    )
    assert f"`mlflow gc --backend-store-uri {uri} --experiment-ids {exp_id}`" in msg
    # restored, the experiment can be used again
    mlflow.MlflowClient(tracking_uri=uri).restore_experiment(exp_id)
    ready_store(uri, experiment="fleetmind-placement")


@pytest.mark.parametrize(
    "argv,experiment",
    [
        (  # the store is checked before the data is read (an empty folder: no dataset in it)
            RCA_TRAIN_ARGV,
            "fleetmind-rca",
        ),
        (
            SCHED_TRAIN_ARGV,
            "fleetmind-placement",
        ),
    ],
    ids=["rca-train", "sched-train"],
)
def test_training_into_a_deleted_experiment_is_one_line_before_any_work(
    argv: list[str],
    experiment: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "empty-dataset").mkdir()
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    exp_id = _deleted(uri, experiment)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    try:
        rc = cli.main([*argv, "--out", str(tmp_path / "runs")])
    finally:
        mlflow.set_tracking_uri(None)
    err = capsys.readouterr().err
    assert rc == 2, err
    assert "Traceback" not in err
    last = err.strip().splitlines()[-1]
    assert last.startswith(
        f"fleetmind: error: MLflow experiment '{experiment}' (id {exp_id}) is deleted on the "
        f"tracking store {uri}: restore it"
    ), err
    assert not (tmp_path / "runs").exists()  # no run folder, nothing trained


def test_tracked_run_refuses_a_deleted_experiment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The placement recipes' :func:`tracked_run` (called by ``recipe.run`` from Python, not only
    through the CLI) checks too: one line, not MLflow's ``set_experiment`` traceback."""
    from fleetmind.training.recipes.tracking import tracked_run

    monkeypatch.chdir(tmp_path)
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    _deleted(uri, "fleetmind-test")
    try:
        with pytest.raises(ConfigError, match=r"is deleted on the tracking store"):
            with tracked_run(RecipeArgs(out=str(tmp_path / "runs"), tracking_uri=uri), "r1", {}):
                pytest.fail("the run started")  # pragma: no cover
    finally:
        mlflow.set_tracking_uri(None)
