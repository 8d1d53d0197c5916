"""A run whose kept checkpoint is its behaviour clone (best_step 0) is not credited to PPO, nor
is the untrained initial policy of a run that cloned nothing (``--bc-episodes 0``) called a clone.

Observed: ``fleetmind sched train --trace default --bc-episodes 1 --timesteps 2048 --n-envs 2
--eval-freq 1024 --seed 3`` scores 4.69 at steps 0, 1024 and 2048 and keeps step 0, yet its card
opened "PPO GPU placement agent ... trained with sb3-contrib MaskablePPO" and its printed line gave
only the kept score.
"""

from __future__ import annotations

import json
import os
import tempfile
import warnings
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

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
        "bc": {"samples": 12},  # the recipes record the clone's demonstrations here
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


def _card_head(card: dict) -> str:
    """The card's text before its field table, whitespace folded."""
    with tempfile.TemporaryDirectory() as d:
        text = write_model_card(Path(d), card).read_text()
    return " ".join(text.split("| field | value |")[0].split())


def test_card_of_a_run_that_cloned_nothing_does_not_call_step_0_a_clone() -> None:
    # --bc-episodes 0: step 0 is the random initialisation, not a behaviour clone
    for steps in (0, 2048):
        card = {**_card(0), "bc_samples": 0, "ppo_timesteps": steps}
        head = _card_head(card)
        assert "behaviour clone" not in head and "cloned from" not in head, steps
        assert "clone itself" not in head, steps
        assert ("did not improve" in head) == bool(steps), steps  # PPO ran only when steps > 0
        assert "untrained initial policy" in head.split(" Permutation")[0], steps
    # no bc_samples recorded: the command's --bc-episodes decides
    card = {k: v for k, v in _card(0).items()}
    card["command"] += " --bc-episodes 0"
    assert "untrained initial policy" in _card_head(card)


def test_card_of_a_run_without_ppo_steps_does_not_say_ppo_failed_to_improve() -> None:
    # the released dynamic model's command ran --timesteps 0 (models/placement-dynamic/model_card.md)
    card = {**_card(0), "bc_samples": 12288, "ppo_timesteps": 0}
    head = _card_head(card)
    assert "did not improve" not in head
    assert head.startswith(
        "# fleetmind-placement: GPU placement agent, the behaviour clone (no PPO steps were run)"
    )
    assert "no PPO steps were run (`--timesteps 0`)" in head


def test_ppo_checkpoint_of_a_run_that_cloned_nothing_has_no_warm_start() -> None:
    head = _card_head({**_card(2048), "bc_samples": 0})
    assert head.startswith("# fleetmind-placement: PPO GPU placement agent")
    assert "imitation warm start (teacher" not in head
    assert "no imitation warm start, `--bc-episodes 0`" in head


def test_train_line_of_a_run_that_cloned_nothing() -> None:
    # the fgd and dynamic recipes record ``bc`` only when --bc-episodes > 0
    summary = {"run_id": "x", "metrics": {}, "artifact": "/a", "best_step": 0, "history": HISTORY}
    line = json.loads(train_line(summary))
    assert line["kept"] == "initial" and "clone_validation" not in line
    assert line["initial_validation"] == {"unalloc100": 4.69}
    line = json.loads(train_line({**summary, "best_step": 2048}))
    assert line["kept"] == "trained" and "initial_validation" in line


@pytest.fixture(scope="module")
def dynamic_runs(tmp_path_factory, shared_data) -> dict[int, dict[str, Any]]:
    """Two tiny seeded dynamic-mode runs with ``--timesteps 0``: cloned (1 episode), not (0)."""
    from fleetmind.training.recipes.dynamic import DynamicArgs, run

    out: dict[int, dict[str, Any]] = {}
    for bc in (1, 0):
        folder = tmp_path_factory.mktemp(f"dyn_bc{bc}")
        args = DynamicArgs(
            traces=["default"],
            dyn_jobs=96,
            n_candidates=8,
            timesteps=0,
            n_envs=1,
            n_steps=64,
            batch_size=32,
            bc_episodes=bc,
            bc_epochs=1,
            teacher="fgd",
            eval_seeds=[1100],
            eval_freq=64,
            seed=0,
            out=str(folder / "runs"),
            tracking_uri=f"sqlite:///{folder}/mlflow.db",
            progress=False,
            release=False,
        )
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # 96 jobs cannot reach the target load (expected)
            out[bc] = run(args)
    return out


def _table(text: str) -> dict[str, str]:
    rows = (line.split(" | ", 1) for line in text.splitlines() if line.startswith("| "))
    return {k[2:]: v.rstrip(" |") for k, v in rows if len((k, v)) == 2}


def test_dynamic_card_gives_the_clone_score_and_says_no_ppo_ran(dynamic_runs) -> None:
    summary = dynamic_runs[1]
    text = (Path(summary["artifact"]) / "model_card.md").read_text()
    assert text.splitlines()[0] == (
        "# fleetmind-placement-dynamic: placement agent for dynamic mode, the behaviour clone"
        " (no PPO steps were run)"
    )
    table = _table(text)
    step0 = next(h for h in summary["history"] if h["step"] == 0)
    assert json.loads(table["validation_clone (step 0)"]) == {
        k: v for k, v in step0.items() if k != "step"
    }
    assert json.loads(train_line(summary))["kept"] == "clone"


def test_dynamic_card_of_a_run_that_cloned_nothing(dynamic_runs) -> None:
    summary = dynamic_runs[0]
    text = (Path(summary["artifact"]) / "model_card.md").read_text()
    first = text.splitlines()[0]
    assert first.startswith("# fleetmind-placement-dynamic: placement agent for dynamic mode,")
    assert "untrained initial policy" in first and "clone" not in first
    assert "validation_initial (step 0, nothing cloned)" in _table(text)
    line = json.loads(train_line(summary))
    assert line["kept"] == "initial" and "initial_validation" in line
