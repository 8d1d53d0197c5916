"""The tracking helper both trainers share (training/tracking.py): one champion rule, with the
direction each trainer's score needs (RCA: higher val_ac1 wins; placement: lower eval_unalloc)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from mlflow.exceptions import MlflowException

from fleetmind.training import rca_train
from fleetmind.training.recipes import tracking as placement_tracking
from fleetmind.training.tracking import (
    CHAMPION,
    pip_requirements,
    promote_if_better,
    tracking_uri,
)


class FakeRegistry:
    """The three MlflowClient calls the rule makes, on one registered model, in memory."""

    def __init__(self) -> None:
        self.tags: dict[str, dict[str, str]] = {}
        self.alias: str | None = None

    def set_model_version_tag(self, name: str, version: str, key: str, value: str) -> None:
        self.tags.setdefault(version, {})[key] = value

    def get_model_version_by_alias(self, name: str, alias: str) -> SimpleNamespace:
        if self.alias is None:
            raise MlflowException("no alias")
        return SimpleNamespace(version=self.alias, tags=self.tags.get(self.alias, {}))

    def set_registered_model_alias(self, name: str, alias: str, version: str) -> None:
        assert alias == CHAMPION
        self.alias = version


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
