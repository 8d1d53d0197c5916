"""The placement recipes' shared SB3 callback (rl/callbacks.py), driven through SB3's own
``BaseCallback`` entry points (``init_callback``, ``on_training_start``, ``on_step``,
``on_rollout_end``, ``on_training_end``) with a stand-in model, so no training is needed."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from fleetmind.rl import callbacks
from fleetmind.rl.callbacks import MlflowEvalCallback


class FakeModel:
    def __init__(self) -> None:
        self.num_timesteps = 0
        self.saved: list[str] = []
        self.logger = SimpleNamespace(name_to_value={"train/value_loss": 2.5, "time/fps": 9.0})

    def get_env(self) -> None:
        return None

    def save(self, path: Path) -> None:
        self.saved.append(Path(path).name)


@pytest.fixture
def logged(monkeypatch: pytest.MonkeyPatch) -> list[tuple[dict[str, float], int]]:
    out: list[tuple[dict[str, float], int]] = []
    monkeypatch.setattr(callbacks.mlflow, "log_metrics", lambda m, step: out.append((m, step)))
    return out


def drive(cb: MlflowEvalCallback, steps: list[tuple[int, list[dict[str, Any]]]]) -> list[bool]:
    model = FakeModel()
    cb.init_callback(model)  # type: ignore[arg-type]
    cb.on_training_start({}, {})
    answers = []
    for n, infos in steps:
        model.num_timesteps = n
        cb.update_locals({"infos": infos})
        answers.append(cb.on_step())
    cb.on_rollout_end()
    cb.on_training_end()  # the last update's losses are logged here
    return answers


def test_evaluates_every_eval_freq_steps_and_checkpoints(logged, tmp_path: Path) -> None:
    evals: list[int] = []
    cb = MlflowEvalCallback(
        evals.append,
        64,
        lambda info: {"train/r": float(info["episode"]["r"])},
        checkpoint_dir=tmp_path,
        log_losses=True,
    )
    ends = [{"episode": {"r": 1.5}}, {"no": "episode"}, {"episode": None}]
    assert drive(cb, [(32, ends), (64, []), (96, []), (130, [])]) == [True] * 4
    assert evals == [64, 130]
    assert cb.model.saved == ["step_64.zip", "step_130.zip"]  # type: ignore[attr-defined]
    assert logged[0] == ({"train/r": 1.5}, 32)  # only the info whose episode ended
    assert logged[-1] == ({"losses/value_loss": 2.5}, 130)  # train/* only, renamed


def test_empty_episode_metrics_log_nothing_and_the_time_cap_stops(logged) -> None:
    cb = MlflowEvalCallback(lambda step: None, 10, lambda info: {}, max_minutes=0.0)
    cb._started = 0.0  # noqa: SLF001 - learn() started long ago
    model = FakeModel()
    cb.init_callback(model)  # type: ignore[arg-type]
    cb.update_locals({"infos": [{"episode": {"r": 1.0}}]})
    assert cb.on_step() is False
    assert logged == []  # no losses either: log_losses is off
    cb.on_rollout_end()
    assert logged == []
