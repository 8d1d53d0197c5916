"""PPO's ``losses/*`` reach MLflow once per update, at the step of that update, the last one
included (docs/ppo.md, step 5: "``losses/*`` per update").

Found on 2026-12-06 against ``mlflow server`` 3.17.2: a run of two rollouts logged one value per
``losses/*`` key, the first update's, at the second rollout's step, and never the second
update's. ``MaskablePPO.learn`` (``sb3_contrib/ppo_mask/ppo_mask.py``, sb3-contrib 2.9) runs
``collect_rollouts`` (which calls ``on_rollout_end``), then ``dump_logs`` (which clears the
logger's values) and only then ``train`` (which records ``train/*``); the callback read them at
``on_rollout_end``, one update late.

A real, tiny MaskablePPO run (seeded) with ``mlflow.log_metrics`` captured: deterministic, no
store needed.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from ppo_helpers import load_tiny

from fleetmind.rl import callbacks
from fleetmind.rl.callbacks import MlflowEvalCallback
from fleetmind.rl.ppo import PPOHyperparams, make_model, make_vec_env


def test_every_update_is_logged_at_its_own_step(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    logged: list[tuple[dict[str, float], int]] = []
    monkeypatch.setattr(
        callbacks.mlflow, "log_metrics", lambda m, step: logged.append((dict(m), step))
    )
    nodes, trace = load_tiny(tmp_path)
    venv = make_vec_env(1, 0, {"traces": trace, "nodes": nodes, "n_candidates": 8})
    model = make_model(venv, PPOHyperparams(n_steps=32, batch_size=16, n_epochs=2), seed=0)
    cb = MlflowEvalCallback(lambda step: None, 10_000, lambda info: {}, log_losses=True)
    try:
        model.learn(total_timesteps=64, callback=cb)  # two rollouts of 32 steps, two updates
    finally:
        venv.close()
    losses: list[tuple[dict[str, Any], int]] = [
        (m, step) for m, step in logged if any(k.startswith("losses/") for k in m)
    ]
    # SB3 counts n_updates in epochs: n_epochs (2) per update
    assert [(m["losses/n_updates"], step) for m, step in losses] == [(2.0, 32), (4.0, 64)]
    assert all("losses/value_loss" in m and "losses/policy_gradient_loss" in m for m, _ in losses)
    assert losses[0][0] != losses[1][0]


def test_a_run_stopped_by_the_time_cap_logs_its_last_update_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``--max-minutes`` stops PPO inside a rollout (``on_step`` answers False): no update ran
    since that rollout started, whose losses were logged then, so training's end logs nothing
    more."""
    logged: list[tuple[dict[str, float], int]] = []
    monkeypatch.setattr(
        callbacks.mlflow, "log_metrics", lambda m, step: logged.append((dict(m), step))
    )
    nodes, trace = load_tiny(tmp_path)
    venv = make_vec_env(1, 0, {"traces": trace, "nodes": nodes, "n_candidates": 8})
    model = make_model(venv, PPOHyperparams(n_steps=32, batch_size=16, n_epochs=1), seed=0)

    class StopInSecondRollout(MlflowEvalCallback):
        def _on_step(self) -> bool:
            super()._on_step()
            return self.num_timesteps < 40  # the time cap, at step 40

    cb = StopInSecondRollout(lambda step: None, 10_000, lambda info: {}, log_losses=True)
    try:
        model.learn(total_timesteps=96, callback=cb)
    finally:
        venv.close()
    steps = [(m["losses/n_updates"], step) for m, step in logged if "losses/n_updates" in m]
    assert steps == [(1.0, 32)]
