"""A run whose kept checkpoint is its behaviour clone (best_step 0) is not credited to PPO.

Observed: ``fleetmind sched train --trace default --bc-episodes 1 --timesteps 2048 --n-envs 2
--eval-freq 1024 --seed 3`` scores 4.69 at steps 0, 1024 and 2048 and keeps step 0, yet its card
opened "PPO GPU placement agent ... trained with sb3-contrib MaskablePPO" and its printed line gave
only the kept score.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from types import SimpleNamespace

os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")

from fleetmind.training.recipes import fgd  # noqa: E402
from fleetmind.training.recipes.common import write_model_card  # noqa: E402
from fleetmind.training.recipes.dynamic import _retitle_card  # noqa: E402
from fleetmind.training.recipes.paired import train_line  # noqa: E402

HISTORY = [
    {"step": 0, "unalloc100": 4.69},
    {"step": 1024, "unalloc100": 4.69},
    {"step": 2048, "unalloc100": 4.69},
]


def _card(best_step: int) -> dict:
    return {
        "run": "r",
        "command": "--trace default --mode fgd --timesteps 2048 --seed 3",
        "teacher": "fgd",
        "ppo_timesteps": 2048,
        "best_step": best_step,
        "eval_ppo_unalloc100": 4.69,
        "eval_clone_unalloc100 (step 0)": 4.69,
    }


def test_card_of_a_run_that_kept_its_clone(tmp_path: Path) -> None:
    text = write_model_card(tmp_path, _card(0)).read_text()
    head = text.split("| field | value |")[0]
    assert "PPO GPU placement agent" not in head
    assert "trained with" not in head
    assert "the behaviour clone" in head.splitlines()[0]
    assert "did not improve on it on validation (best_step 0)" in " ".join(head.split())
    assert "| best_step | 0 |" in text
    assert "| eval_clone_unalloc100 (step 0) | 4.69 |" in text


def test_card_of_a_run_that_kept_a_ppo_checkpoint(tmp_path: Path) -> None:
    text = write_model_card(tmp_path, _card(2048)).read_text()
    assert text.startswith("# fleetmind-placement: PPO GPU placement agent\n")
    assert "trained with" in text


def test_dynamic_card_keeps_its_own_title(tmp_path: Path) -> None:
    path = write_model_card(tmp_path, _card(0))
    _retitle_card(path)
    first = path.read_text().splitlines()[0]
    assert first.startswith("# fleetmind-placement-dynamic:") and "behaviour clone" in first
    assert "`fleetmind/MultiClusterPlacement-v0`" in path.read_text()


def test_train_line_puts_the_clone_beside_the_kept_score() -> None:
    summary = {
        "run_id": "x",
        "metrics": {"eval_unalloc100": 4.69, "eval_clone_unalloc100": 4.69},
        "artifact": "/a",
        "best_step": 0,
        "history": HISTORY,
    }
    line = json.loads(train_line(summary))
    assert line["best_step"] == 0 and line["kept"] == "clone"
    assert line["clone_validation"] == {"unalloc100": 4.69}
    line = json.loads(train_line({**summary, "best_step": 2048}))
    assert line["kept"] == "trained" and line["clone_validation"] == {"unalloc100": 4.69}


def test_paired_line_names_the_kept_iteration() -> None:
    val = [
        {"iteration": 0, "gap_pct": 0.0, "per_stream_ratio": [1.0, 1.0]},
        {"iteration": 5, "gap_pct": -3.1},
    ]
    line = json.loads(
        train_line({"run_id": "x", "metrics": {}, "artifact": "/a", "best_iteration": 5,
                    "validation": val})
    )  # fmt: skip
    assert line["best_iteration"] == 5 and line["kept"] == "trained"
    assert line["clone_validation"] == {"gap_pct": 0.0}


def test_fgd_clone_score_is_step_zero() -> None:
    r = SimpleNamespace(state={"history": [{"step": 0, "unalloc100": 4.7}, *HISTORY[1:]]})
    assert fgd._clone_score(r) == 4.7  # noqa: SLF001
