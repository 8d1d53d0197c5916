"""When a progress bar draws: on a terminal only, never into a log file or a pipe.

Every FleetMind progress bar is a tqdm bar on ``sys.stderr`` (tqdm's default stream), so that
stdout holds only what a command prints as its result (a table, a JSON document). A bar redraws
its line with carriage returns several times a second; written to a file (``2> log``, a cron or CI
capture) that is dozens of ``\\r`` frames per bar, so a bar is drawn only when its stream is a
terminal. :func:`bar_disable` gives the value of tqdm's ``disable`` argument that says so.

That terminal-only rule is the command line's. An explicit ``progress=True`` of four library
functions draws their bar wherever stderr goes, a notebook and a log file included, as
``tqdm.auto`` bars do (their tqdm call takes :func:`progress_disable`):
:func:`fleetmind.envs.fgd_mode.evaluate_fgd`, :func:`fleetmind.rca.metrics.evaluate_methods`,
:func:`fleetmind.rca.petshop_eval.evaluate_scenario` and
:func:`fleetmind.training.rca_calibrate.fit_calibration`. The other ``progress`` options
(:func:`fleetmind.training.rca_fit.fit`, ``RCADataModule(progress=True)``,
:func:`fleetmind.rca.lightning_module.incidents_to_data`) draw on a terminal only
(:func:`bar_disable`). A CLI handler or a benchmark passes ``progress=show_bar(...)``
(:func:`show_bar`) so that its bars stay off a log file. :func:`quiet_library_bars` does the
same for the bar MLflow draws on its own.
"""

from __future__ import annotations

import os
import sys


def bar_disable(show: bool = True) -> bool | None:
    """tqdm's ``disable`` argument for a bar on stderr.

    Args:
        show: ``False`` when the caller does not want a bar at all (a ``progress=False`` option).

    Returns:
        ``True`` when ``show`` is false or the environment sets ``TQDM_DISABLE`` (tqdm reads that
        variable only as the default of ``disable``, which an explicit value overrides, so it is
        honoured here: any non-empty value turns bars off, as in tqdm); otherwise ``None``, which
        tqdm reads as "off when the stream is not a terminal" (``tqdm.std.tqdm.__init__``).
    """
    if not show or os.environ.get("TQDM_DISABLE"):
        return True
    return None


def progress_disable(progress: bool) -> bool:
    """tqdm's ``disable`` argument for a library function's ``progress`` option: ``False`` (a bar,
    whatever stderr is: a terminal, a notebook, a file) when ``progress`` is true and the
    environment does not set ``TQDM_DISABLE``; ``True`` otherwise."""
    return bar_disable(progress) is True


def show_bar(wanted: bool = True) -> bool:
    """The ``progress`` value a CLI handler passes to a library function: ``wanted`` when stderr is
    a terminal and ``TQDM_DISABLE`` is unset, else ``False`` (no ``\\r`` frames in a log file)."""
    if not wanted or os.environ.get("TQDM_DISABLE"):
        return False
    stderr = sys.stderr
    try:
        return bool(stderr is not None and stderr.isatty())
    except (AttributeError, ValueError):  # not a stream, or closed
        return False


MLFLOW_BAR_ENV = "MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR"
"""MLflow's switch for its own tqdm bar over artifact transfers (``mlflow.environment_variables``;
on by default, read at each transfer), which logging a model draws."""


def quiet_library_bars() -> None:
    """Turn off the progress bars that libraries draw on their own (MLflow's artifact bar) when
    stderr is not a terminal, unless the environment already says whether to draw them."""
    stderr = sys.stderr
    if stderr is None or not getattr(stderr, "isatty", lambda: False)():
        os.environ.setdefault(MLFLOW_BAR_ENV, "false")
