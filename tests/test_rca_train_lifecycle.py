"""The RCA training lifecycle around the model: a dataset folder a writer finished, a feedback
database that is only read, a temperature fitted on enough incidents, and a champion that yields
only to a better score on the same validation set.

Each test here failed before its fix: an interrupted ``rca generate`` left a ``meta.json`` that
looked finished and ``rca train`` used the partial folder; a version scored on one validation
incident displaced a champion scored on 90 others; ``rca calibrate`` fitted ``T = T_MIN`` on one
incident without a word; a mistyped ``--feedback-db`` left an empty SQLite file behind.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from gat_helpers import toy_dataset
from tracking_helpers import FakeRegistry

from fleetmind.cli import main
from fleetmind.data.errors import DataError, NotAvailableError
from fleetmind.data.rca_dataset import DatasetWriter, load_dataset
from fleetmind.data.rca_gen.generate import DatasetSpec, generate_dataset
from fleetmind.data.rca_gen.graphs import GraphGenConfig
from fleetmind.rca.calibration import T_MAX, T_MIN
from fleetmind.serving.feedback import feedback_incidents
from fleetmind.training import rca_calibrate
from fleetmind.training.rca_train import validation_set
from fleetmind.training.tracking import (
    CHAMPION,
    EVAL_N_TAG,
    EVAL_SET_TAG,
    MIN_EVAL_N,
    EvalSet,
    promote_if_better,
)

SMALL = GraphGenConfig(min_nodes=50, max_nodes=120)
"""Small graphs: a few dozen incidents generate in about a second."""


def _generate(out: Path, n: int, seed: int = 1) -> Path:
    generate_dataset(out, DatasetSpec(n_incidents=n, seed=seed, graphs=SMALL, workers=1))
    return out


def _one_error_line(capsys: pytest.CaptureFixture[str]) -> str:
    err = [ln for ln in capsys.readouterr().err.strip().splitlines() if ln.startswith("fleetmind")]
    assert len(err) == 1, err
    return err[0]


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """One tmp MLflow store for the module; the process-wide tracking URI is reset afterwards."""
    import mlflow

    tmp = tmp_path_factory.mktemp("mlflow")
    uri = f"sqlite:///{tmp}/mlflow.db"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("MLFLOW_TRACKING_URI", uri)
        mp.setenv("MLFLOW_DISABLE_TELEMETRY", "true")
        mp.chdir(tmp)  # ./mlruns artifacts land in tmp
        mlflow.set_tracking_uri(uri)
        try:
            yield uri
        finally:
            mlflow.set_tracking_uri(None)


def _train(data: Path, out: Path, *extra: str) -> int:
    old = torch.get_num_threads()
    try:
        return main(
            [
                "rca", "train", "--data", str(data), "--epochs", "1", "--hidden", "8",
                "--heads", "2", "--layers", "2", "--batch-size", "8", "--out", str(out), *extra,
            ]
        )  # fmt: skip
    finally:
        torch.set_num_threads(old)


# ------------------------------------------------------------------ the champion rule
def _register(reg: FakeRegistry, version: int, score: float, eval_set: EvalSet | None) -> tuple:
    return promote_if_better(
        reg, "m", str(version), tag="val_ac1", score=score, higher_is_better=True, eval_set=eval_set
    )


def test_a_score_on_another_validation_set_does_not_move_the_champion() -> None:
    big, tiny = EvalSet("a" * 64, 90), EvalSet("b" * 64, 1)
    reg = FakeRegistry()
    assert _register(reg, 1, 0.789, big) == (True, None, None)
    promoted, prev, refused = _register(reg, 2, 1.0, tiny)  # perfect, on one incident
    assert (promoted, prev, reg.alias) == (False, "1", "1")
    assert "another evaluation set (90 incidents; this version's 1)" in refused
    assert "set_registered_model_alias('m', 'champion', '2')" in refused
    assert "\n" not in refused
    assert reg.tags["2"] == {"val_ac1": "1.000000", EVAL_SET_TAG: "b" * 64, EVAL_N_TAG: "1"}
    # on the champion's own validation set the better score wins and a tie does not
    assert _register(reg, 3, 0.789, big) == (False, "1", None)
    assert _register(reg, 4, 0.8, big) == (True, "1", None) and reg.alias == "4"


def test_a_champion_without_a_validation_set_yields_only_to_enough_incidents() -> None:
    reg = FakeRegistry()
    reg.alias, reg.tags["1"] = "1", {"val_ac1": "0.789000"}  # registered before versions had sets
    promoted, _, refused = _register(reg, 2, 1.0, EvalSet("b" * 64, MIN_EVAL_N - 1))
    assert not promoted and reg.alias == "1"
    assert f"from {MIN_EVAL_N - 1} evaluation incidents, fewer than {MIN_EVAL_N}" in refused
    assert _register(reg, 3, 0.7, EvalSet("c" * 64, MIN_EVAL_N)) == (False, "1", None)
    assert _register(reg, 4, 0.8, EvalSet("c" * 64, MIN_EVAL_N)) == (True, "1", None)
    # without a set (the placement trainer), the plain score rule
    assert _register(reg, 5, 0.9, None) == (True, "4", None)


def test_the_validation_fingerprint_is_shared_by_the_same_data_only(tmp_path: Path) -> None:
    a = _generate(tmp_path / "a", 40, seed=1)
    again = _generate(tmp_path / "again", 40, seed=1)
    other = _generate(tmp_path / "other", 40, seed=2)
    fp = validation_set(a, 0, 0.15, 6)
    assert fp == validation_set(again, 7, 0.15, 6)  # the val split: the seed plays no part
    assert fp.n == 6 and len(fp.fingerprint) == 64
    assert validation_set(other, 0, 0.15, 6).fingerprint != fp.fingerprint
    # line order does not matter
    lines = (a / "val.jsonl").read_text().splitlines()
    (again / "val.jsonl").write_text("\n".join(reversed(lines)) + "\n")
    assert validation_set(again, 0, 0.15, 6) == fp
    # without a val split the training graphs held out depend on the seed
    (a / "val.jsonl").unlink()
    held = validation_set(a, 0, 0.15, 5)
    assert held.fingerprint != fp.fingerprint
    assert held == validation_set(a, 0, 0.15, 5) != validation_set(a, 1, 0.15, 5)


def test_training_on_other_data_leaves_the_champion_and_says_so(
    store: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import mlflow

    first = toy_dataset(tmp_path / "first", n_train=16, n_val=8, n_test=4, seed=0)
    other = toy_dataset(tmp_path / "other", n_train=8, n_val=1, n_test=2, seed=1)
    assert _train(first, tmp_path / "runs1", "--json", str(tmp_path / "1.json")) == 0
    res = json.loads((tmp_path / "1.json").read_text())
    assert res["champion"] is True
    capsys.readouterr()
    assert _train(other, tmp_path / "runs2", "--json", str(tmp_path / "2.json")) == 0
    res2 = json.loads((tmp_path / "2.json").read_text())
    out = capsys.readouterr().out
    v1, v2 = res["version"], res2["version"]
    line = next(ln for ln in out.splitlines() if ln.startswith("registered"))
    assert line.startswith(f"registered fleetmind-rca version {v2} (champion stays version {v1}:")
    assert "another evaluation set (8 incidents; this version's 1)" in line
    assert res2["champion"] is False and res2["champion_refused"] in line
    client = mlflow.MlflowClient(store)
    assert str(client.get_model_version_by_alias("fleetmind-rca", CHAMPION).version) == v1
    tags = client.get_model_version("fleetmind-rca", v2).tags
    assert tags[EVAL_N_TAG] == "1"
    assert tags[EVAL_SET_TAG] == validation_set(other, 0, 0.15, 1).fingerprint


# ------------------------------------------------------------------ a finished dataset folder
class Stop(KeyboardInterrupt):
    """Ctrl-C in the middle of a dataset."""


def test_an_interrupted_generate_leaves_a_folder_nothing_reads(
    store: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = _generate(tmp_path / "d", 40)  # a finished folder first: its meta.json must not stay
    assert json.loads((out / "meta.json").read_text())["complete"] is True
    seen = []

    def progress(n: int) -> None:
        seen.append(n)
        if len(seen) == 3:
            raise Stop

    spec = DatasetSpec(n_incidents=400, seed=3, graphs=SMALL, workers=1)
    with pytest.raises(Stop):
        generate_dataset(out, spec, progress=progress)
    meta = json.loads((out / "meta.json").read_text())
    assert meta["complete"] is False and meta["stopped_by"] == "Stop"
    assert meta["counts"]["train"] == sum(seen) and meta["counts"]["val"] == 0
    with pytest.raises(
        DataError, match=r"is incomplete: its writer stopped .*\(Stop\); regenerate"
    ):
        load_dataset(out)
    assert _train(out, tmp_path / "runs", "--no-register") == 2
    assert "regenerate it" in _one_error_line(capsys)


def test_a_feature_cache_does_not_let_a_partial_folder_through(
    store: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from fleetmind.rca.lightning_module import RCADataModule

    out = _generate(tmp_path / "d", 40)
    RCADataModule(out).setup()  # features cached, keyed by the split files alone
    meta = json.loads((out / "meta.json").read_text())
    (out / "meta.json").write_text(json.dumps({"counts": meta["counts"]}))
    cached = RCADataModule(out)
    cached.setup()  # the cache answers without reading the folder
    assert len(cached.val_data) == 6
    assert _train(out, tmp_path / "runs", "--no-register") == 2
    assert "holds only split counts" in _one_error_line(capsys)


def test_a_writer_that_is_killed_leaves_its_first_marker(tmp_path: Path) -> None:
    w = DatasetWriter(tmp_path / "d").__enter__()  # a process killed now never reaches __exit__
    w.add_incident("train", {"id": "x"})
    assert json.loads((tmp_path / "d" / "meta.json").read_text()) == {"complete": False}


def test_old_folders_load_unless_their_meta_json_only_counts(tmp_path: Path) -> None:
    out = _generate(tmp_path / "d", 40)
    meta = json.loads((out / "meta.json").read_text())
    # a folder finished by a release that did not record "complete" still loads
    old = {k: v for k, v in meta.items() if k != "complete"}
    (out / "meta.json").write_text(json.dumps(old))
    assert len(load_dataset(out).splits["val"]) == 6
    # a meta.json of counts alone is what an interrupted generate used to leave
    (out / "meta.json").write_text(json.dumps({"counts": meta["counts"]}))
    with pytest.raises(DataError, match="holds only split counts.*regenerate it"):
        load_dataset(out)
    # a folder without meta.json (made by hand) loads as it is
    (out / "meta.json").unlink()
    assert load_dataset(out).meta == {}


def test_split_files_that_disagree_with_the_counts_are_refused(tmp_path: Path) -> None:
    out = _generate(tmp_path / "d", 40)
    val = (out / "val.jsonl").read_text().splitlines()
    (out / "val.jsonl").write_text("\n".join(val[:-1]) + "\n")
    with pytest.raises(DataError, match=r"val\.jsonl holds 5 incidents but meta\.json records 6"):
        load_dataset(out)
    assert len(load_dataset(out, ["train", "test"]).splits["test"]) == 6  # only splits read
    # training incidents appended to a copy (rca train --feedback-db, merge_train) are fine
    (out / "val.jsonl").write_text("\n".join(val) + "\n")
    train = (out / "train.jsonl").read_text()
    (out / "train.jsonl").write_text(train + train.splitlines()[0] + "\n")
    assert len(load_dataset(out).splits["train"]) == 29
    (out / "train.jsonl").write_text("".join(train.splitlines(keepends=True)[:-1]))
    with pytest.raises(
        DataError, match=r"train\.jsonl holds 27 incidents but meta\.json records 28"
    ):
        load_dataset(out)


# ------------------------------------------------------------------ rca calibrate
def test_calibrate_refuses_a_validation_split_too_small_to_fit(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = _generate(tmp_path / "d", 7)  # one validation incident
    assert main(["rca", "calibrate", "--data", str(data)]) == 2
    line = _one_error_line(capsys)
    assert "has 1 incident; fitting a temperature needs at least 30" in line


def test_calibrate_warns_when_the_temperature_sits_on_a_search_bound(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    assert rca_calibrate.bound_warning(1.0) is None
    assert rca_calibrate.bound_warning(T_MIN * 1.01) is None
    assert "search bound T_MAX = 20" in (rca_calibrate.bound_warning(T_MAX) or "")
    data = _generate(tmp_path / "d", 240)  # 36 validation incidents
    monkeypatch.setattr(rca_calibrate, "fit_temperature", lambda z, y: T_MIN * (1 + 1e-5))
    assert main(["rca", "calibrate", "--data", str(data), "--eval-splits"]) == 0
    err = capsys.readouterr().err
    warn = [ln for ln in err.splitlines() if ln.startswith("fleetmind: warning:")]
    assert len(warn) == 1 and "lies on the search bound T_MIN = 0.05" in warn[0]


# ------------------------------------------------------------------ the feedback database
def test_a_missing_feedback_database_is_refused_and_not_created(
    store: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    nope = tmp_path / "nope.db"
    with pytest.raises(NotAvailableError, match=r"no such file .*nope\.db"):
        feedback_incidents(f"sqlite:///{nope}")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(NotAvailableError, match="no such file rel.db"):
        feedback_incidents("sqlite:///rel.db")
    data = toy_dataset(tmp_path / "toy", n_train=8, n_val=2, n_test=2)
    assert _train(data, tmp_path / "runs", "--feedback-db", f"sqlite:///{nope}") == 2
    assert "no such file" in _one_error_line(capsys)
    assert not nope.exists() and not (tmp_path / "rel.db").exists()
    shutil.rmtree(tmp_path / "runs", ignore_errors=True)
