"""``sched train`` (fgd mode) records each evaluated step once in the run's ``history``.

Upstream behaviour behind the expectations: Stable-Baselines3's ``OnPolicyAlgorithm.learn`` loops
``collect_rollouts`` (callbacks' ``_on_step`` once per environment step, ``num_timesteps``
counting) then ``train()`` (the policy update) until ``num_timesteps >= total_timesteps``, and
stops without that update when a callback returns False. So a periodic evaluation inside the last
rollout scores the policy before the last update, under the step the final evaluation uses.
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

N_STEPS = 256
"""Steps per rollout of the fake PPO below (SB3's ``n_steps x n_envs``)."""


class FakeCallback:
    """Keeps what ``rl.callbacks.MlflowEvalCallback`` gets: the evaluation and its frequency."""

    def __init__(self, evaluate: Any, eval_freq: int, episode_metrics: Any, **kw: Any) -> None:
        self.evaluate, self.eval_freq = evaluate, eval_freq
        self.max_minutes = kw.get("max_minutes")


class FakePPO:
    """SB3's loop: rollouts of :data:`N_STEPS` steps, each followed by one update; ``stop_at``
    plays a wall-time cap that stops right after an evaluation (no update follows)."""

    def __init__(self, stop_at: int | None = None) -> None:
        self.num_timesteps, self.updates, self.stop_at = 0, 0, stop_at

    def learn(self, total_timesteps: int, callback: list) -> None:
        callback = next(c for c in callback if isinstance(c, FakeCallback))  # [it, the bar]
        while self.num_timesteps < total_timesteps:
            for _ in range(N_STEPS):
                self.num_timesteps += 1
                if self.num_timesteps % callback.eval_freq == 0:
                    callback.evaluate(self.num_timesteps)
                    if self.num_timesteps == self.stop_at:
                        return
            self.updates += 1


def _history(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, ppo: FakePPO, **a: Any) -> list:
    from fleetmind.training.recipes import fgd

    monkeypatch.setattr(fgd, "MlflowEvalCallback", FakeCallback)
    monkeypatch.setattr(fgd, "save_onnx", lambda *args, **kw: None)
    monkeypatch.setattr(fgd, "actor_from_model", lambda model: None)
    args = SimpleNamespace(max_minutes=None, progress=False, **a)
    r = SimpleNamespace(
        args=args, model=ppo, ckpt_dir=tmp_path, dir=tmp_path, state={"history": []}
    )
    r.venv = SimpleNamespace(close=lambda: None)
    # the run's own evaluation, reduced to what it records: the step and the policy's updates
    r.evaluate_policy = lambda step: r.state["history"].append(
        {"step": step, "updates": ppo.updates}
    )
    fgd._learn(r)
    return [(h["step"], h["updates"]) for h in r.state["history"]]


def test_the_final_step_is_recorded_once_with_the_trained_policy(monkeypatch, tmp_path) -> None:
    got = _history(monkeypatch, tmp_path, FakePPO(), timesteps=512, eval_freq=256)
    # the clone at 0, step 256 (one update behind), and the end after both updates, once
    assert got == [(0, 0), (256, 0), (512, 2)]


def test_a_stop_right_after_an_evaluation_is_not_evaluated_again(monkeypatch, tmp_path) -> None:
    got = _history(monkeypatch, tmp_path, FakePPO(stop_at=256), timesteps=1024, eval_freq=256)
    assert got == [(0, 0), (256, 0)]
    got = _history(monkeypatch, tmp_path, FakePPO(), timesteps=700, eval_freq=300)
    assert got == [(0, 0), (300, 1), (600, 2), (768, 3)]  # 600 < 700: a periodic one, kept
