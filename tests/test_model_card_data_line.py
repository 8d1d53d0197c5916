"""A placement model card's ``Data:`` line names what the model was trained and evaluated on: a
user's own trace CSV is not Alibaba's openb trace (the line attributed every model to openb)."""

from __future__ import annotations

from pathlib import Path

from fleetmind.training.recipes.common import OPENB_DATA, write_model_card


def _data(tmp_path: Path, card: dict) -> str:
    text = write_model_card(tmp_path, card).read_text()
    return next(ln for ln in text.splitlines() if ln.startswith("Data:"))


def test_openb_names_keep_the_attribution(tmp_path: Path) -> None:
    card = {"train_traces": ["default", "cpu050"], "eval_traces": ["default"]}
    assert _data(tmp_path, card) == f"Data: {OPENB_DATA}."


def test_a_users_csv_is_named_as_such(tmp_path: Path) -> None:
    line = _data(tmp_path, {"train_traces": ["/data/mine.csv"], "eval_traces": ["/data/mine.csv"]})
    assert line == "Data: the user's trace file(s) /data/mine.csv."
    mixed = _data(tmp_path, {"train_traces": ["/data/mine.csv"], "eval_traces": ["default"]})
    assert "/data/mine.csv" in mixed and OPENB_DATA in mixed
