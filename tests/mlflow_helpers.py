"""Test helpers for MLflow tracking stores: the training commands that check their store before
any work, and the settings a placement recipe's :func:`tracked_run` reads."""

from __future__ import annotations

from dataclasses import dataclass

# ``fleetmind rca train`` on an empty folder (no dataset in it): the store is checked before the
# data is read, so a store it cannot use stops it before that folder is a problem.
RCA_TRAIN_ARGV = ["rca", "train", "--data", "empty-dataset", "--epochs", "1"]
# ``fleetmind sched train`` for a few steps (it has no ``--tracking-uri``).
SCHED_TRAIN_ARGV = ["sched", "train", "--trace", "default", "--timesteps", "64", "--max-minutes", "1"]  # fmt: skip


@dataclass
class RecipeArgs:
    """The fields :func:`tracked_run` reads of a placement recipe's settings."""

    out: str
    tracking_uri: str
    experiment: str = "fleetmind-test"
    seed: int = 0
    mode: str = "dynamic"
