"""``fleetmind-placement@champion`` moves only between scores measured on the same evaluation set.

An fgd-mode run's ``eval_unalloc`` is the mean unallocated GPU % at 100 % arrived over its
evaluation episodes (traces x seeds, with an FGD prefix, on a node list): a score on a trivial
trace is not better than one on ``default``, only different. The rule followed is MLflow's model
registry one the RCA trainer already uses (``fleetmind.training.tracking.promote_if_better`` with an
``EvalSet``): a registered model version carries tags (``MlflowClient.set_model_version_tag``) and
the alias moves with ``MlflowClient.set_registered_model_alias``; nothing in MLflow compares the
tags, so the comparison, and what it may compare, is ours.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import mlflow
import pytest

from fleetmind.training.recipes import tracking as placement_tracking
from fleetmind.training.recipes.settings import FgdArgs
from fleetmind.training.tracking import CHAMPION, EVAL_SET_TAG, ready_store

REPO = Path(__file__).resolve().parents[1]
RELEASED_PLACEMENT = REPO / "models" / "placement"

HEADER = "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,creation_time,deletion_time\n"
NODES = "sn,cpu_milli,memory_mib,gpu,model\nn0,64000,262144,8,T4\nn1,64000,262144,4,T4\n"


def _pods(n: int, milli: int) -> str:
    return HEADER + "".join(f"p{i},1000,1024,1,{milli},,{i},{i + 100}\n" for i in range(n))


@pytest.fixture
def store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    monkeypatch.setenv("MLFLOW_DISABLE_TELEMETRY", "true")
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"  # a file store in tmp_path
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    monkeypatch.chdir(tmp_path)  # artifacts land under tmp_path/mlruns
    ready_store(uri)
    yield uri
    mlflow.set_tracking_uri(None)  # later tests see the environment's store again


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
    """One tracked run that logs the released model with ``score`` as the recipe does."""
    summary: dict = {}
    with placement_tracking.tracked_run(args, "test-run", summary):
        entry = placement_tracking.log_placement_pyfunc(RELEASED_PLACEMENT, score)
    return {**summary, "registry": entry}


def test_a_score_on_another_evaluation_set_leaves_the_champion(store, files) -> None:
    first = _register(_args(files, "hard.csv"), 4.69)
    assert first["registry"]["champion"] is True
    # a much lower score, measured on a trivial trace: not comparable, the champion stays
    second = _register(_args(files, "easy.csv"), 0.14)
    reg = second["registry"]
    assert reg["champion"] is False and reg["previous_champion"] == "1"
    assert "another evaluation set" in reg["champion_refused"]
    client = mlflow.MlflowClient()
    assert str(client.get_model_version_by_alias("fleetmind-placement", CHAMPION).version) == "1"
    assert second["eval_set"]["fingerprint"] != first["eval_set"]["fingerprint"]
    # the version records what it was measured on
    tags = client.get_model_version("fleetmind-placement", "2").tags
    assert tags[EVAL_SET_TAG] == second["eval_set"]["fingerprint"]
    # a better score on the champion's own evaluation set still wins
    third = _register(_args(files, "hard.csv"), 4.5)
    assert third["registry"]["champion"] is True and "champion_refused" not in third["registry"]


def test_the_fingerprint_follows_the_files_and_settings_not_their_names(files, tmp_path) -> None:
    base = _args(files, "hard.csv")
    fp, record = placement_tracking.placement_eval_set(base)
    assert record["n"] == 1 and record["traces"][0]["given"] == files["hard.csv"]
    copy = tmp_path / "renamed.csv"
    copy.write_bytes(Path(files["hard.csv"]).read_bytes())
    same = FgdArgs(eval_traces=[str(copy)], nodes=files["nodes.csv"])
    assert placement_tracking.placement_eval_set(same)[0].fingerprint == fp.fingerprint
    for other in (
        _args(files, "easy.csv"),
        _args(files, "hard.csv", eval_seeds=[43]),
        _args(files, "hard.csv", eval_fgd_until_pct=0.0),
    ):
        assert placement_tracking.placement_eval_set(other)[0].fingerprint != fp.fingerprint


def test_the_default_node_list_is_another_evaluation_set(files, shared_data) -> None:
    fp = placement_tracking.placement_eval_set(_args(files, "hard.csv"))[0].fingerprint
    default_nodes = FgdArgs(eval_traces=[files["hard.csv"]])  # the openb GPU node list
    assert placement_tracking.placement_eval_set(default_nodes)[0].fingerprint != fp
