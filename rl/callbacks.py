"""Stable-Baselines3 callbacks of the placement training runs.

:class:`MlflowEvalCallback` is the one both recipes (:mod:`fleetmind.training.recipes.fgd`,
:mod:`fleetmind.training.recipes.dynamic`) pass to ``model.learn``: it logs each finished
episode's metrics and (optionally) PPO's losses to the active MLflow run, calls the recipe's
evaluation every ``eval_freq`` environment steps, and stops PPO after a wall-time cap. It holds
no recipe state: what an evaluation measures, logs and keeps is the ``evaluate`` callable's job.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import mlflow
from stable_baselines3.common.callbacks import BaseCallback

from fleetmind.data.errors import ConfigError


class MlflowEvalCallback(BaseCallback):
    """Episode metrics (and losses) to MLflow, a periodic evaluation, a wall-time cap.

    Args:
        evaluate: called with the number of environment steps so far (summed over the vectorised
            envs, SB3's ``num_timesteps``) each time ``eval_freq`` more steps have passed.
        eval_freq: environment steps between evaluations (>= 1; ConfigError otherwise).
        episode_metrics: ``info -> {metric name: value}`` for an info dict whose episode has just
            ended (one with an ``"episode"`` entry, from ``VecMonitor``); logged at the current
            step. An empty dict logs nothing.
        max_minutes: stop PPO once this many minutes (wall time) have passed since ``learn``
            started (``None``: run every step).
        checkpoint_dir: after each periodic evaluation, also save the model there as
            ``step_<num_timesteps>.zip``.
        log_losses: log SB3's ``train/*`` values (each PPO update's losses, ``n_updates``...)
            as ``losses/*``, once per update, at the step the update ran (``num_timesteps`` when
            it ran: the end of the rollout it learnt from). PPO's ``learn`` loop collects a
            rollout (``on_rollout_end``), clears the logger (``dump_logs``) and only then
            updates (``train``: ``sb3_contrib/ppo_mask/ppo_mask.py`` ``MaskablePPO.learn``,
            sb3-contrib 2.9), so an update's values are read when the next rollout starts and,
            for the last update, when training ends.
    """

    def __init__(
        self,
        evaluate: Callable[[int], Any],
        eval_freq: int,
        episode_metrics: Callable[[Mapping[str, Any]], dict[str, float]],
        *,
        max_minutes: float | None = None,
        checkpoint_dir: Path | None = None,
        log_losses: bool = False,
    ) -> None:
        super().__init__()
        if eval_freq < 1:  # 0 or less would evaluate (and checkpoint) at every step
            raise ConfigError(
                f"--eval-freq must be >= 1 (PPO steps between evaluations), got {eval_freq}"
            )
        self.evaluate, self.eval_freq = evaluate, eval_freq
        self.episode_metrics, self.log_losses = episode_metrics, log_losses
        self.max_minutes, self.checkpoint_dir = max_minutes, checkpoint_dir
        self._next_eval = eval_freq
        self._started = time.perf_counter()
        self._last_losses: dict[str, float] | None = None  # the update logged last

    def _on_training_start(self) -> None:
        self._started = time.perf_counter()
        self._last_losses = None

    def _on_step(self) -> bool:
        for info in self.locals.get("infos", []):
            if info.get("episode") is None:
                continue
            metrics = self.episode_metrics(info)
            if metrics:
                mlflow.log_metrics(metrics, step=self.num_timesteps)
        if self.num_timesteps >= self._next_eval:
            self._next_eval += self.eval_freq
            self.evaluate(self.num_timesteps)
            if self.checkpoint_dir is not None:
                self.model.save(self.checkpoint_dir / f"step_{self.num_timesteps}.zip")
        limit = self.max_minutes
        return limit is None or time.perf_counter() - self._started <= 60 * limit

    def _on_rollout_start(self) -> None:
        self._log_update()  # the update that ran after the previous rollout

    def _on_training_end(self) -> None:
        self._log_update()  # the last update (no rollout starts after it)

    def _log_update(self) -> None:
        """Log the last PPO update's ``train/*`` values as ``losses/*`` at the current step,
        unless there are none (no update yet) or they are the ones logged last (a run stopped
        by the time cap mid-rollout: no update since that rollout started)."""
        if not self.log_losses:
            return
        vals = {
            f"losses/{k.split('/')[-1]}": float(v)
            for k, v in self.model.logger.name_to_value.items()
            if k.startswith("train/")
        }
        if vals and vals != self._last_losses:
            mlflow.log_metrics(vals, step=self.num_timesteps)
            self._last_losses = vals
