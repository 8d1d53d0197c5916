"""GAT training: a tiny `fleetmind rca train` run tracked in a tmp MLflow store, and the champion rule."""

from __future__ import annotations

import json
import os

import pytest
import torch
from gat_helpers import toy_dataset


@pytest.fixture(scope="module")
def mlflow_uri(tmp_path_factory):
    """One tmp MLflow store for the module (creating the SQLite schema costs seconds)."""
    tmp = tmp_path_factory.mktemp("mlflow")
    uri = f"sqlite:///{tmp}/mlflow.db"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("MLFLOW_TRACKING_URI", uri)
        mp.setenv("MLFLOW_DISABLE_TELEMETRY", "true")
        mp.chdir(tmp)  # ./mlruns artifacts land in tmp
        import mlflow

        mlflow.set_tracking_uri(uri)
        yield uri


def test_champion_moves_only_when_val_ac1_improves(mlflow_uri) -> None:
    from mlflow import MlflowClient

    from fleetmind.training.tracking import CHAMPION, promote_if_better

    REGISTERED_MODEL = "test-champion-rule"
    c = MlflowClient(mlflow_uri)
    c.create_registered_model(REGISTERED_MODEL)

    def new_version(acc: float) -> tuple[str, bool, str | None]:
        v = c.create_model_version(REGISTERED_MODEL, source="file:///nowhere").version
        promoted, prev, _ = promote_if_better(
            c, REGISTERED_MODEL, str(v), tag="val_ac1", score=acc, higher_is_better=True
        )
        return str(v), promoted, prev

    assert new_version(0.80) == ("1", True, None)
    assert new_version(0.70) == ("2", False, "1")  # worse: champion stays
    assert new_version(0.80) == ("3", False, "1")  # a tie does not move it either
    assert new_version(0.85) == ("4", True, "1")
    assert str(c.get_model_version_by_alias(REGISTERED_MODEL, CHAMPION).version) == "4"
    assert c.get_model_version(REGISTERED_MODEL, "2").tags["val_ac1"] == "0.700000"


def test_tiny_cli_training_run_registers_and_loads(mlflow_uri, tmp_path) -> None:
    from fleetmind.cli import main
    from fleetmind.rca.gat_analyzer import GATAnalyzer

    data = toy_dataset(tmp_path / "toy", n_train=24, n_val=8, n_test=8)
    out_json = tmp_path / "run.json"
    old = torch.get_num_threads()
    try:
        rc = main(
            [
                "rca", "train", "--data", str(data), "--epochs", "2", "--hidden", "16",
                "--heads", "2", "--layers", "2", "--batch-size", "8",
                "--out", str(tmp_path / "runs"), "--json", str(out_json),
            ]
        )  # fmt: skip
    finally:
        torch.set_num_threads(old)
    assert rc == 0
    res = json.loads(out_json.read_text())
    assert res["run_id"] and res["version"] == "1" and res["champion"] is True
    assert set(res["metrics"]) == {"val", "test"} and res["metrics"]["test"]["n"] == 8
    import mlflow

    run = mlflow.get_run(res["run_id"])
    assert run.data.params["epochs"] == "2" and "val/ac1" in run.data.metrics
    hist = mlflow.MlflowClient().get_metric_history(res["run_id"], "train/loss")
    assert len(hist) == 2  # one value per epoch
    gat = GATAnalyzer.load("models:/fleetmind-rca@champion")
    assert gat.version == "fleetmind-rca/1"
    local = GATAnalyzer.load(res["artifact"])
    assert local.model.config.hidden == 16
    ckpts = os.listdir(os.path.join(os.path.dirname(res["artifact"]), "checkpoints"))
    assert any(c.startswith("best") for c in ckpts)


def test_train_flags_reach_the_fit_and_the_release_command(monkeypatch) -> None:
    """``--dropout``, ``--weight-decay``, ``--neighbours`` and ``--thin-share`` reach :class:`Args`, and the command
    written into a release's model card repeats them (a card without ``--neighbours`` would
    rebuild another model)."""
    import argparse

    from fleetmind.training import rca_train

    p = argparse.ArgumentParser()
    rca_train.add_arguments(p)
    argv = ["--data", "d", "--dropout", "0.2", "--weight-decay", "0.001", "--neighbours"]
    argv += ["--thin-share", "0.25"]
    ns = p.parse_args([*argv, "--release", "out"])
    tail = rca_train._argv_tail(ns)
    assert {"--dropout 0.2", "--weight-decay 0.001", "--neighbours", "--thin-share 0.25"} <= set(
        tail
    )
    assert not {"--dropout 0.1", "--neighbours"} & set(
        rca_train._argv_tail(p.parse_args(["--data", "d"]))
    )
    fb = p.parse_args(
        ["--data", "d", "--feedback-db", "postgresql://u:secret@db/fm", "--patience", "7"]
        + ["--feedback-weight", "3", "--release", "out"]
    )
    fb_tail = rca_train._argv_tail(fb)
    assert {"--patience 7", "--feedback-weight 3"} <= set(fb_tail)
    assert "--feedback-db postgresql://u:***@db/fm" in fb_tail  # the card never holds a password
    assert "secret" not in " ".join(fb_tail)
    seen = {}
    monkeypatch.setattr(rca_train, "run", lambda a: (seen.setdefault("args", a), {"rank": 1})[1])
    assert rca_train.cli(ns) == 0
    a = seen["args"]
    assert (a.dropout, a.weight_decay, a.neighbours, a.thin_share) == (0.2, 0.001, True, 0.25)


@pytest.mark.parametrize("neighbours", [False, True])
def test_release_card_says_what_the_model_reads(tmp_path, neighbours: bool) -> None:
    """A released card names the import path users load, a neighbour model's neighbour inputs (a
    card of the 2026-12-03 release called all 157 inputs alert features) and thinned training
    copies as training data, not as a test split."""
    from fleetmind.rca.features.neighbours import NUM_NODE_EXTRA
    from fleetmind.training import rca_train

    art = tmp_path / "art"
    art.mkdir()
    cfg = {"layers": 3, "hidden": 48, "heads": 4, "edge_dim": 16, "feature_version": 2}
    cfg |= {"in_dim": 131 + (NUM_NODE_EXTRA if neighbours else 0), "fault_types": ["a", "b"]}
    cfg["neighbours"] = neighbours
    (art / "config.json").write_text(json.dumps({"version": "gat-x", "model": cfg, "data": {}}))
    (art / "model.pt").write_bytes(b"")
    res = {"artifact": str(art), "run_id": "r", "run_name": "n", "epochs": 1, "fit_seconds": 1.0}
    data = {"n_train": 10, "n_val": 2, "n_test": 3} | ({"n_thinned": 4} if neighbours else {})
    res |= {"metrics": {"val": {"n": 1, "ac@1": 1, "ac@3": 1, "ac@5": 1, "mrr": 1}}, "data": data}
    card = (rca_train.release(res, tmp_path / "rel", command="c") / "MODEL_CARD.md").read_text()
    assert "`fleetmind.rca.gat_analyzer.GATAnalyzer.load(None)`" in card
    assert ("neighbour inputs" in card) is neighbours
    assert (f"{cfg['in_dim']} per-node alert features" in card) is not neighbours
    assert "3 `test` incidents" in card and "`thinned` incidents" not in card
    assert ("plus 4 thinned copies of training incidents" in card) is neighbours
    if neighbours:
        assert (
            f"131 alert features (feature version 2, `rca/features/`) and {NUM_NODE_EXTRA}" in card
        )
