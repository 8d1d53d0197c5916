"""A retraining that reproduces the champion's score exactly ties with it, and a tie keeps the
champion (training/tracking.py ``promote_if_better``; docs/gat.md, "Training"): the score is
stored as a tag at 6 decimals, so the comparison is made on that same rounding. MLflow stores tag
values as strings (``MlflowClient.set_model_version_tag``), hence the rounding on the way in."""

from __future__ import annotations

import pytest
from tracking_helpers import FakeRegistry

from fleetmind.training.tracking import EvalSet, promote_if_better


@pytest.mark.parametrize(
    "higher,score",
    [
        (True, 1 / 12),  # RCA val_ac1 on 12 incidents: the tag reads 0.083333 < 0.0833333...
        (False, 2 / 3),  # placement eval_unalloc: the tag reads 0.666667 > 0.6666666...
        (True, 0.8),
    ],
)
def test_an_identical_retraining_keeps_the_champion(higher: bool, score: float) -> None:
    reg = FakeRegistry()
    ev = EvalSet("abc", 40)
    first = promote_if_better(
        reg, "m", "1", tag="s", score=score, higher_is_better=higher, eval_set=ev
    )
    again = promote_if_better(
        reg, "m", "2", tag="s", score=score, higher_is_better=higher, eval_set=ev
    )
    assert first.promoted and not again.promoted and again.refused is None
    assert reg.alias == "1" and reg.tags["2"]["s"] == f"{score:.6f}"


def test_a_better_score_within_the_sixth_decimal_still_ties() -> None:
    """Scores equal at the stored precision are a tie: the champion stays."""
    reg = FakeRegistry()
    promote_if_better(reg, "m", "1", tag="s", score=0.5, higher_is_better=True)
    assert not promote_if_better(reg, "m", "2", tag="s", score=0.5 + 1e-9, higher_is_better=True)[0]
    assert promote_if_better(reg, "m", "3", tag="s", score=0.500001, higher_is_better=True)[0]
    assert reg.alias == "3"
