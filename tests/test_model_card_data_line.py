"""A placement model card's ``Data:`` line names what the model was trained and evaluated on: a
user's own trace CSV is not Alibaba's openb trace (the line attributed every model to openb), an
openb trace is openb's whether given by name or by path, the synthetic fallback is not Alibaba's,
and the line never needs the shared data folder (a library user training on their own trace
without it lost the card and the run)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from fleetmind.data.openb_synthetic import SYNTHETIC_LABEL
from fleetmind.data.paths import OPENB_FALLBACK_ENV
from fleetmind.training.recipes.common import OPENB_DATA, write_model_card
from fleetmind.training.recipes.paired import write_learner_card


def _data(tmp_path: Path, card: dict) -> str:
    text = write_model_card(tmp_path, card).read_text()
    return next(ln for ln in text.splitlines() if ln.startswith("Data:"))


@pytest.fixture
def no_shared_data(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FLEETMIND_SHARED_DATA", str(tmp_path / "missing"))
    monkeypatch.delenv(OPENB_FALLBACK_ENV, raising=False)


def test_openb_names_keep_the_attribution(tmp_path: Path, shared_data: os.PathLike[str]) -> None:
    card = {"train_traces": ["default", "cpu050"], "eval_traces": ["default"]}
    assert _data(tmp_path, card) == f"Data: {OPENB_DATA}."


def test_an_openb_trace_given_by_path_is_openb(
    tmp_path: Path, shared_data: os.PathLike[str]
) -> None:
    path = str(Path(shared_data) / "openb" / "csv" / "openb_pod_list_default.csv")
    assert _data(tmp_path, {"train_traces": [path], "eval_traces": ["default"]}) == (
        f"Data: {OPENB_DATA}."
    )


def test_a_users_csv_is_named_as_such(tmp_path: Path, shared_data: os.PathLike[str]) -> None:
    line = _data(tmp_path, {"train_traces": ["/data/mine.csv"], "eval_traces": ["/data/mine.csv"]})
    assert line == "Data: the user's trace file(s) /data/mine.csv."
    mixed = _data(tmp_path, {"train_traces": ["/data/mine.csv"], "eval_traces": ["default"]})
    assert "/data/mine.csv" in mixed and OPENB_DATA in mixed


def test_a_users_csv_needs_no_shared_data(tmp_path: Path, no_shared_data: None) -> None:
    own = tmp_path / "own.csv"
    own.write_text("name\n")
    card = {"train_traces": [str(own)], "eval_traces": [str(own), "default"]}
    line = _data(tmp_path, card)
    assert line == f"Data: the user's trace file(s) {own}, default."
    assert OPENB_DATA not in line


def test_the_synthetic_fallback_is_not_alibabas(
    tmp_path: Path, no_shared_data: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FLEETMIND_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv(OPENB_FALLBACK_ENV, "synthetic")
    line = _data(tmp_path, {"train_traces": ["default"], "eval_traces": ["default"]})
    assert line == f"Data: the {SYNTHETIC_LABEL}."


def test_the_dynamic_learners_card_names_its_traces(tmp_path: Path, no_shared_data: None) -> None:
    (tmp_path / "metadata.json").write_text(json.dumps({"train_traces": ["/data/mine.csv"]}))
    best = {"gap_pct": -1.0, "ci_pct": [-2.0, 0.0], "p99_ratio": 1.0}
    summary = {
        "run_name": "r",
        "iterations": 1,
        "best_iteration": 1,
        "validation_best": best,
        "wall_time_s": 1,
    }
    write_learner_card(tmp_path, ["# t"], summary, "--algo es", 4)
    text = (tmp_path / "model_card.md").read_text()
    assert text.splitlines()[-1] == "Data: the user's trace file(s) /data/mine.csv."
