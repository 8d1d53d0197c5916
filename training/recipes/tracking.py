"""MLflow tracking shared by the placement training recipes.

* run naming (:func:`run_dirs`: CleanRL-style ``<env>__ppo__<seed>__<time>``, its folder and
  checkpoint folder);
* one tracked run (:func:`tracked_run`): tracking URI (:func:`tracking_uri`), experiment, and the
  recipe's settings logged as parameters once, at the start (the PPO recipes' also
  ``timesteps_effective``, :func:`effective_timesteps`);
* the exported model as an MLflow pyfunc (:func:`log_placement_pyfunc`: the
  :class:`fleetmind.training.placement_pyfunc.PlacementPyfunc` wrapper, explicit pip requirements,
  registration as ``fleetmind-placement`` and the ``champion`` alias moved when it wins).

Tracking URI, pinned requirements and the champion rule are the ones both trainers share
(:mod:`fleetmind.training.tracking`; here the champion is the lowest ``eval_unalloc``).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict
from pathlib import Path
from typing import Any

import mlflow

from fleetmind.data.mlflow_store import safe_uri
from fleetmind.training.pyfunc_entries import PLACEMENT
from fleetmind.training.tracking import log_pyfunc_model, ready_store, tracking_uri

REGISTERED_MODEL = "fleetmind-placement"


def run_dirs(args: Any, env_id: str) -> tuple[str, Path, Path]:
    """CleanRL-style run name ``<env>__ppo__<seed>__<time>``, its folder and checkpoint folder."""
    run_name = f"{env_id}__ppo__{args.seed}__{int(time.time())}"
    run_dir = Path(args.out) / run_name
    ckpt_dir = run_dir / "checkpoints"
    ckpt_dir.mkdir(parents=True, exist_ok=True)
    return run_name, run_dir, ckpt_dir


def run_params(args: Any) -> dict[str, Any]:
    """A recipe's settings as MLflow parameters: its ``mode``, then every field (lists and dicts
    as JSON)."""
    params: dict[str, Any] = {"mode": args.mode}
    for k, v in asdict(args).items():
        params[k] = json.dumps(v) if isinstance(v, (list, dict)) else v
        if isinstance(params[k], str):  # a tracking URI with user:password@ shows no password
            params[k] = safe_uri(params[k])
    if all(hasattr(args, k) for k in ("timesteps", "n_steps", "n_envs")):  # the PPO recipes
        params["timesteps_effective"] = effective_timesteps(
            args.timesteps, args.n_steps, args.n_envs
        )
    return params


def effective_timesteps(timesteps: int, n_steps: int, n_envs: int) -> int:
    """The PPO steps a run of ``timesteps`` takes: MaskablePPO collects whole rollouts of
    ``n_steps`` x ``n_envs`` steps, so it rounds ``timesteps`` up to a multiple of that (a time
    limit, ``--max-minutes``, may stop it earlier)."""
    rollout = max(1, n_steps * n_envs)
    return 0 if timesteps <= 0 else -(-timesteps // rollout) * rollout


@contextmanager
def tracked_run(args: Any, run_name: str, summary: dict[str, Any]) -> Iterator[Any]:
    """The MLflow run of one training run: sets the tracking URI and experiment, starts the run,
    logs :func:`run_params` once and yields the active run. ``summary`` gets ``tracking_uri`` and
    ``run_id``."""
    os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
    uri = tracking_uri(args.tracking_uri)
    ready_store(uri)
    mlflow.set_tracking_uri(uri)
    mlflow.set_experiment(args.experiment)
    summary["tracking_uri"] = safe_uri(uri)
    with mlflow.start_run(run_name=run_name) as mlrun:
        summary["run_id"] = mlrun.info.run_id
        mlflow.log_params(run_params(args))
        yield mlrun


def log_placement_pyfunc(model_dir: Path, score: float) -> dict[str, Any]:
    """Log ``model_dir`` as a pyfunc model in the active run, register it as
    :data:`REGISTERED_MODEL` and move :data:`CHAMPION` to it when ``score`` (lower is better)
    beats the champion's. Returns the registry entry of the run summary."""
    return log_pyfunc_model(
        PLACEMENT,
        {"placement": str(model_dir)},
        ("numpy", "onnxruntime", "mlflow"),
        REGISTERED_MODEL,
        tag="eval_unalloc",
        score=score,
        higher_is_better=False,
    )
