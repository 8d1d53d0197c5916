"""The PPO model's logger: losses reach the callbacks, and nothing is written to the temp folder.

SB3's default (``stable_baselines3.common.utils.configure_logger`` with ``verbose=0`` calls
``logger.configure(None, [""])``) creates ``$TMPDIR/SB3-<timestamp>`` at every ``learn()``.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from ppo_helpers import load_tiny
from stable_baselines3.common.callbacks import BaseCallback

from fleetmind.rl.ppo import PPOHyperparams, make_model, make_vec_env


class _LossProbe(BaseCallback):
    """Copies the logger's recorded values at each rollout end (where the callbacks read them)."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[dict[str, float]] = []

    def _on_step(self) -> bool:
        return True

    def _on_rollout_end(self) -> None:
        self.seen.append(dict(self.model.logger.name_to_value))


def test_learn_writes_no_temp_folder_and_keeps_losses(tmp_path: Path, monkeypatch) -> None:
    data, tmp = tmp_path / "data", tmp_path / "tmp"
    data.mkdir()
    tmp.mkdir()
    nodes, trace = load_tiny(data)
    venv = make_vec_env(1, 0, {"traces": trace, "nodes": nodes, "n_candidates": 8})
    monkeypatch.setattr(tempfile, "tempdir", str(tmp))
    model = make_model(venv, PPOHyperparams(n_steps=32, batch_size=16, n_epochs=1), seed=0)
    probe = _LossProbe()
    model.learn(total_timesteps=64, callback=probe)
    venv.close()
    assert [p.name for p in tmp.iterdir() if p.name.startswith("SB3-")] == []
    # the second rollout ends after one update: its losses are what MlflowEvalCallback logs
    assert "train/value_loss" in probe.seen[-1]
