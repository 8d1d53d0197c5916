"""A ``fleetmind-placement`` champion registered before versions recorded their evaluation set
(no ``eval_set`` tag) compares on the same rule as any other once its set is rebuilt from its
source run's logged parameters (``eval_traces``, ``eval_seeds``, ``eval_fgd_until_pct``,
``nodes``). The RCA rule for such a champion (``MIN_EVAL_N`` = 30 items) refused every default
``sched train`` (one trace x seed 42: one episode) forever after an upgrade, while 30 seeds of a
trivial trace replaced it. When the set cannot be rebuilt, the champion stays and the refusal says
why and how to promote by hand.

MLflow's model registry keeps version tags (``MlflowClient.set_model_version_tag``,
``delete_model_version_tag``) and a run's parameters (``MlflowClient.get_run(id).data.params``);
what they may be compared on is ours.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import mlflow
import pytest

from fleetmind.training.recipes import tracking as placement_tracking
from fleetmind.training.recipes.settings import FgdArgs
from fleetmind.training.tracking import (
    CHAMPION,
    EVAL_N_TAG,
    EVAL_SET_TAG,
    EvalSet,
    promote_if_better,
    ready_store,
)

REPO = Path(__file__).resolve().parents[1]
RELEASED_PLACEMENT = REPO / "models" / "placement"
NAME = "fleetmind-placement"

HEADER = "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,creation_time,deletion_time\n"
NODES = "sn,cpu_milli,memory_mib,gpu,model\nn0,64000,262144,8,T4\nn1,64000,262144,4,T4\n"


def _pods(n: int, milli: int) -> str:
    return HEADER + "".join(f"p{i},1000,1024,1,{milli},,{i},{i + 100}\n" for i in range(n))


@pytest.fixture
def store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    monkeypatch.setenv("MLFLOW_DISABLE_TELEMETRY", "true")
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    monkeypatch.chdir(tmp_path)
    ready_store(uri)
    yield uri
    mlflow.set_tracking_uri(None)


@pytest.fixture
def files(tmp_path: Path) -> dict[str, str]:
    out = {}
    for name, text in (
        ("hard.csv", _pods(30, 700)),
        ("easy.csv", _pods(5, 100)),
        ("nodes.csv", NODES),
    ):
        (tmp_path / name).write_text(text)
        out[name] = str(tmp_path / name)
    return out


def _args(files: dict[str, str], trace: str, **kw: object) -> FgdArgs:
    return FgdArgs(
        traces=[files[trace]], eval_traces=[files[trace]], nodes=files["nodes.csv"], **kw
    )


def _register(args: FgdArgs, score: float) -> dict:
    summary: dict = {}
    with placement_tracking.tracked_run(args, "test-run", summary):
        entry = placement_tracking.log_placement_pyfunc(RELEASED_PLACEMENT, score)
    return {**summary, "registry": entry}


def _old_champion(args: FgdArgs, score: float) -> dict:
    """Version 1, champion, as an older registry holds it: no ``eval_set``/``eval_n`` tags."""
    first = _register(args, score)
    client = mlflow.MlflowClient()
    for tag in (EVAL_SET_TAG, EVAL_N_TAG):
        client.delete_model_version_tag(NAME, "1", tag)
    assert EVAL_SET_TAG not in client.get_model_version(NAME, "1").tags
    return first


def _champion() -> str:
    return str(mlflow.MlflowClient().get_model_version_by_alias(NAME, CHAMPION).version)


def test_a_default_run_on_the_same_set_can_replace_an_untagged_champion(store, files) -> None:
    first = _old_champion(_args(files, "hard.csv"), 4.69)
    second = _register(_args(files, "hard.csv"), 4.5)  # one episode, the champion's own set
    assert second["registry"]["champion"] is True, second["registry"].get("champion_refused")
    assert _champion() == "2"
    tags = mlflow.MlflowClient().get_model_version(NAME, "1").tags  # rebuilt and kept
    assert tags[EVAL_SET_TAG] == first["eval_set"]["fingerprint"] and tags[EVAL_N_TAG] == "1"


def test_many_seeds_of_another_trace_do_not_replace_an_untagged_champion(store, files) -> None:
    _old_champion(_args(files, "hard.csv"), 4.69)
    trivial = _args(files, "easy.csv", eval_seeds=list(range(30)))  # 30 episodes, another set
    reg = _register(trivial, 0.14)["registry"]
    assert reg["champion"] is False and "another evaluation set" in reg["champion_refused"]
    assert _champion() == "1"


def test_an_untagged_champion_whose_files_are_gone_stays(store, files) -> None:
    _old_champion(_args(files, "hard.csv"), 4.69)
    Path(files["hard.csv"]).rename(Path(files["hard.csv"]).with_name("moved.csv"))
    reg = _register(_args(files, "easy.csv", eval_seeds=list(range(30))), 0.14)["registry"]
    assert reg["champion"] is False and _champion() == "1"
    refused = reg["champion_refused"]
    assert "records no evaluation set" in refused and "cannot be rebuilt" in refused
    assert "hard.csv" in refused  # names the file it could not find
    assert f"set_registered_model_alias('{NAME}', 'champion', '2')" in refused
    assert EVAL_SET_TAG not in mlflow.MlflowClient().get_model_version(NAME, "1").tags


def test_a_relative_path_in_the_champions_run_is_not_guessed(store, files) -> None:
    _old_champion(FgdArgs(traces=["hard.csv"], eval_traces=["hard.csv"], nodes="nodes.csv"), 4.69)
    reg = _register(_args(files, "hard.csv"), 4.5)["registry"]
    assert reg["champion"] is False and "relative path" in reg["champion_refused"]


def test_the_rca_rule_for_an_untagged_champion_is_unchanged(store) -> None:
    client = mlflow.MlflowClient()
    client.create_registered_model("rca")
    for _ in range(3):
        client.create_model_version("rca", "file:///nowhere", None)
    client.set_registered_model_alias("rca", CHAMPION, "1")
    client.set_model_version_tag("rca", "1", "ac1", "0.5")
    few = promote_if_better(client, "rca", "2", tag="ac1", score=0.9, higher_is_better=True,
                            eval_set=EvalSet("x", 12))  # fmt: skip
    assert few.promoted is False and "fewer than 30" in few.refused
    client.delete_model_version_tag("rca", "2", EVAL_SET_TAG)
    many = promote_if_better(client, "rca", "3", tag="ac1", score=0.9, higher_is_better=True,
                             eval_set=EvalSet("y", 30))  # fmt: skip
    assert many.promoted is True
