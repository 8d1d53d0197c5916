"""Training progress bars on stderr: stable-baselines3's timestep bar and Lightning's epoch bars.

stable-baselines3's ``learn(progress_bar=True)`` draws a ``tqdm.rich`` bar, and rich's console
writes to ``sys.stdout``; Lightning's :class:`~pytorch_lightning.callbacks.TQDMProgressBar` creates
its bars with ``file=sys.stdout``. A command whose stdout is its result (``sched train`` prints
JSON, ``rca train`` its results table) would then mix bar frames into that result, so the bars
here draw on ``sys.stderr``, and only when stderr is a terminal (:func:`fleetmind.progress.bar_disable`).
Both libraries are imported on first use (class factories), so importing this module is cheap.
"""

from __future__ import annotations

import sys
from typing import Any

from fleetmind.progress import bar_disable


def timestep_bar(show: bool = True) -> Any:
    """A stable-baselines3 callback drawing a tqdm bar of timesteps done out of the run's total
    (what ``learn(progress_bar=True)`` shows, after ``ProgressBarCallback`` in
    ``stable_baselines3/common/callbacks.py``), on stderr.

    Args:
        show: ``False`` for a bar that never draws (the callback still runs, and costs nothing).

    Returns:
        A ``BaseCallback`` instance to pass in ``learn``'s ``callback`` (a ``CallbackList`` item).
    """
    from stable_baselines3.common.callbacks import BaseCallback
    from tqdm import tqdm

    class TimestepBar(BaseCallback):
        """tqdm bar counted in environment timesteps (``num_envs`` per ``env.step()``)."""

        def _on_training_start(self) -> None:
            # timesteps a previous learn() call did are not this run's work (as in SB3)
            total = self.locals["total_timesteps"] - self.model.num_timesteps
            self.bar = tqdm(
                total=total, desc="PPO", unit="step", file=sys.stderr, disable=bar_disable(show)
            )

        def _on_step(self) -> bool:
            self.bar.update(self.training_env.num_envs)
            return True

        def _on_training_end(self) -> None:
            self.bar.refresh()
            self.bar.close()

    return TimestepBar()


def stderr_progress_bar(refresh_rate: int = 1) -> Any:
    """Lightning's :class:`~pytorch_lightning.callbacks.TQDMProgressBar` with every bar on stderr
    and off when stderr is not a terminal.

    The ``init_*_tqdm`` methods repeat Lightning's (``pytorch_lightning/callbacks/progress/
    tqdm_progress.py``, 2.x) with ``file=sys.stderr``: a bar prints its first frame when it is
    made, so its stream cannot be changed afterwards.

    Args:
        refresh_rate: redraw the bars every this many batches.

    Returns:
        A ``TQDMProgressBar`` instance for the ``Trainer``'s ``callbacks``.
    """
    from pytorch_lightning.callbacks import TQDMProgressBar
    from pytorch_lightning.callbacks.progress.tqdm_progress import Tqdm

    class StderrTQDMProgressBar(TQDMProgressBar):
        """Lightning's ``TQDMProgressBar`` drawing on ``sys.stderr``."""

        def _bar(self, desc: str, position: int, leave: bool, **kw: Any) -> Tqdm:
            disable = True if self.is_disabled else bar_disable()
            return Tqdm(
                desc=desc,
                position=position,
                disable=disable,
                leave=leave,
                dynamic_ncols=True,
                file=sys.stderr,
                bar_format=self.BAR_FORMAT,
                **kw,
            )

        def init_sanity_tqdm(self) -> Tqdm:
            return self._bar(self.sanity_check_description, 2 * self.process_position, False)

        def init_train_tqdm(self) -> Tqdm:
            pos = 2 * self.process_position
            return self._bar(self.train_description, pos, True, smoothing=0)

        def init_predict_tqdm(self) -> Tqdm:
            pos = 2 * self.process_position
            return self._bar(self.predict_description, pos, True, smoothing=0)

        def init_validation_tqdm(self) -> Tqdm:
            has_main_bar = self.trainer.state.fn != "validate"  # none in trainer.validate()
            pos = 2 * self.process_position + has_main_bar
            return self._bar(self.validation_description, pos, not has_main_bar)

        def init_test_tqdm(self) -> Tqdm:
            return self._bar("Testing", 2 * self.process_position, True)

    return StderrTQDMProgressBar(refresh_rate=refresh_rate)
