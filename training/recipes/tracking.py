"""MLflow tracking shared by the placement training recipes.

* run naming (:func:`run_dirs`: CleanRL-style ``<env>__ppo__<seed>__<time>``, its folder and
  checkpoint folder);
* one tracked run (:func:`tracked_run`): tracking URI (:func:`tracking_uri`), experiment, and the
  recipe's settings logged as parameters once, at the start (the PPO recipes' also
  ``timesteps_effective``, :func:`effective_timesteps`), with the command, commit and versions
  as tags (:func:`provenance_tags`);
* what an fgd-mode run's evaluation score is measured on (:func:`placement_eval_set`: the
  evaluation traces' contents, seeds, FGD prefix and node list), recorded on the run;
* the exported model as an MLflow pyfunc (:func:`log_placement_pyfunc`: the
  :class:`fleetmind.training.placement_pyfunc.PlacementPyfunc` wrapper, explicit pip requirements,
  registration as ``fleetmind-placement`` and the ``champion`` alias moved when it wins on the
  same evaluation set).

Tracking URI, pinned requirements and the champion rule are the ones both trainers share
(:mod:`fleetmind.training.tracking`; here the champion is the lowest ``eval_unalloc``, and two
scores compare only when their evaluation sets are the same).
"""

from __future__ import annotations

import hashlib
import json
import os
import shlex
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import asdict
from pathlib import Path
from typing import Any

import mlflow

from fleetmind.data.errors import DataError
from fleetmind.data.mlflow_store import safe_uri
from fleetmind.data.openb import load_openb_nodes, trace_file
from fleetmind.data.paths import openb_is_synthetic
from fleetmind.provenance import input_file, run_provenance
from fleetmind.redact import safe_uri as redact
from fleetmind.training.io import new_run_dir
from fleetmind.training.pyfunc_entries import PLACEMENT
from fleetmind.training.tracking import (
    CHAMPION,
    EVAL_N_TAG,
    EVAL_SET_TAG,
    EvalSet,
    fluent_run,
    log_pyfunc_model,
    no_such_alias,
    ready_store,
    single_try,
    tracking_guard,
    tracking_uri,
)

REGISTERED_MODEL = "fleetmind-placement"
EVAL_SET_FORMAT = "fleetmind-placement-eval/1"
"""The version of :func:`placement_eval_set`'s fingerprint (what it hashes, and how)."""


def run_dirs(args: Any, env_id: str) -> tuple[str, Path, Path]:
    """CleanRL-style run name ``<env>__ppo__<seed>__<time>``, its folder and checkpoint folder
    (both created; a run folder of its own: ``-2``... appended when the name is taken,
    :func:`fleetmind.training.io.new_run_dir`)."""
    run_name, run_dir = new_run_dir(args.out, f"{env_id}__ppo__{args.seed}__{int(time.time())}")
    ckpt_dir = run_dir / "checkpoints"
    ckpt_dir.mkdir()
    return run_name, run_dir, ckpt_dir


TRAIN_PACKAGES = ("gymnasium", "onnxruntime", "mlflow", "stable-baselines3", "sb3-contrib")
"""The packages whose versions a placement training run's tags record beside torch and numpy
(those ``sched train --json`` records)."""


def process_command() -> str:
    """The command line of this process (``sys.argv``: ``fleetmind sched train ...`` as typed,
    the console script's path first), quoted for a POSIX shell, URIs with credentials redacted
    (:func:`fleetmind.redact.safe_uri`)."""
    return shlex.join(redact(str(w)) for w in sys.argv)


def provenance_tags(command: str, packages: tuple[str, ...] = ()) -> dict[str, str]:
    """MLflow tags that say what made a run, from :func:`fleetmind.provenance.run_provenance`
    (a console script leaves MLflow's own ``mlflow.source.git.commit`` empty):
    ``fleetmind.command`` (cut to MLflow's 8,000 characters), ``fleetmind.commit`` and ``fleetmind.code_modified`` (JSON text:
    ``null`` outside a git checkout, ``true``/``false``), ``fleetmind.versions.<package>`` for
    Python, torch, numpy, fleetmind and ``packages``, and ``mlflow.source.git.commit`` when the
    commit is known; ``fleetmind.mixed_checkouts`` when the code came from several checkouts."""
    prov = run_provenance(command, None, packages)
    tags = {
        "fleetmind.command": command if len(command) <= 8000 else command[:7997] + "...",
        "fleetmind.commit": json.dumps(prov["commit"]).strip('"'),
        "fleetmind.code_modified": json.dumps(prov["code_modified"]),
    }
    if prov["commit"]:
        tags["mlflow.source.git.commit"] = prov["commit"]
    if prov.get("mixed_checkouts"):
        tags["fleetmind.mixed_checkouts"] = json.dumps(prov["mixed_checkouts"])
    for pkg, version in prov["versions"].items():
        tags[f"fleetmind.versions.{pkg}"] = json.dumps(version).strip('"')
    return tags


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
    logs :func:`run_params` once, tags it with :func:`provenance_tags` of this process's command
    line (:func:`process_command`) and yields the active run. ``summary`` gets ``tracking_uri`` and
    ``run_id``. The run's body is under
    :func:`fleetmind.training.tracking.tracking_guard`: a store that fails mid-run stops it
    once a request has spent its retries (about a minute), with one line naming the run folder
    ``<args.out>/<run_name>``; the run is then ended ``FAILED`` in one try
    (:func:`fleetmind.training.tracking.fluent_run`)."""
    os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
    uri = tracking_uri(args.tracking_uri)
    ready_store(uri, experiment=args.experiment)  # a deleted experiment: one line, no traceback
    mlflow.set_tracking_uri(uri)
    mlflow.set_experiment(args.experiment)
    summary["tracking_uri"] = safe_uri(uri)
    evals = placement_eval_set(args) if _has_eval_set(args) else None
    # a store that fails mid-run: bounded retries, the run ended in one try (not a second round
    # of retries), one line naming the run folder
    with (
        tracking_guard(uri, Path(args.out) / run_name),
        fluent_run(run_name=run_name) as mlrun,
    ):
        summary["run_id"] = mlrun.info.run_id
        mlflow.log_params(run_params(args))
        mlflow.set_tags(provenance_tags(process_command(), TRAIN_PACKAGES))
        if evals is not None:  # what eval_unalloc is measured on (log_placement_pyfunc reads it)
            eval_set, summary["eval_set"] = evals
            mlflow.set_tags({EVAL_SET_TAG: eval_set.fingerprint, EVAL_N_TAG: str(eval_set.n)})
        try:
            yield mlrun
        except KeyboardInterrupt:  # Ctrl-C or SIGTERM (fleetmind.errors.Terminated)
            _end_killed(mlrun.info.run_id)
            raise


def _end_killed(run_id: str) -> None:
    """End the active MLflow run ``run_id`` ``KILLED``, MLflow's status of a stopped run (as
    ``rca train`` does), before :func:`~fleetmind.training.tracking.fluent_run` sees the interrupt
    and ends it ``FAILED``: a stopped run read as a crashed one. One try of at most 10 s
    (:func:`~fleetmind.training.tracking.single_try`): a store that does not answer leaves the run
    to ``fluent_run``."""
    active = mlflow.active_run()
    if active is None or active.info.run_id != run_id:
        return
    with single_try(), suppress(Exception):
        mlflow.end_run("KILLED")


def _has_eval_set(args: Any) -> bool:
    """Whether ``args`` are an fgd-mode recipe's, whose score :func:`placement_eval_set` names."""
    return getattr(args, "mode", None) == "fgd" and hasattr(args, "eval_traces")


def placement_eval_set(args: Any) -> tuple[EvalSet, dict[str, Any]]:
    """What an fgd-mode run's ``eval_unalloc`` (mean unallocated GPU % at 100 % arrived over the
    evaluation episodes) is measured on, so that only scores on the same set compare.

    The fingerprint is the SHA-256 (hex) of :data:`EVAL_SET_FORMAT`, the SHA-256 of each
    evaluation trace file's bytes (``args.eval_traces``, names or paths), the evaluation seeds
    (``args.eval_seeds``), the FGD prefix (``args.eval_fgd_until_pct``, % of GPU capacity) and the
    SHA-256 of the node list file (``args.nodes``; default the openb GPU node list). Traces and
    seeds are taken as multisets: their order does not change the mean, a repeat does. Two runs
    on the same files and settings share it, whatever the files are called.

    Returns:
        ``(EvalSet(fingerprint, n episodes, "episode(s)"), record)``; ``record`` is the run
        summary's ``eval_set``: the fingerprint, ``n``, each trace and the node list as
        :func:`fleetmind.provenance.input_file` records them (as given, absolute path, SHA-256),
        the seeds and the prefix.

    Raises:
        DataError: a trace or the node list that cannot be found.
    """
    traces = [input_file(t, trace_file(t)) for t in args.eval_traces]
    nodes = input_file(str(args.nodes or "gpu_node"), load_openb_nodes(args.nodes).source)
    seeds = [int(s) for s in args.eval_seeds]
    prefix = float(args.eval_fgd_until_pct)
    content = {
        "format": EVAL_SET_FORMAT,
        "traces": sorted(t["sha256"] for t in traces),
        "seeds": sorted(seeds),
        "eval_fgd_until_pct": prefix,
        "nodes": nodes["sha256"],
    }
    digest = hashlib.sha256(json.dumps(content, sort_keys=True).encode()).hexdigest()
    n = len(traces) * len(seeds)
    record = {
        "fingerprint": digest,
        "n": n,
        "traces": traces,
        "seeds": seeds,
        "eval_fgd_until_pct": prefix,
        "nodes": nodes,
    }
    return EvalSet(digest, n, "episode(s)"), record


def _run_eval_set() -> EvalSet | None:
    """The :class:`EvalSet` :func:`tracked_run` recorded on the active run (None: none)."""
    run = mlflow.active_run()
    if run is None:
        return None
    tags = mlflow.MlflowClient().get_run(run.info.run_id).data.tags
    if EVAL_SET_TAG not in tags or EVAL_N_TAG not in tags:
        return None
    return EvalSet(tags[EVAL_SET_TAG], int(tags[EVAL_N_TAG]), "episode(s)")


def _is_path(given: str) -> bool:
    """Whether a trace or node list argument is a file path (as :func:`trace_file` reads it: a
    ``.csv`` name or an existing file) rather than an openb name."""
    return Path(given).suffix == ".csv" or Path(given).exists()


def _logged_eval_args(params: dict[str, str]) -> Any:
    """The evaluation settings an fgd-mode run logged (:func:`run_params`: ``eval_traces``,
    ``eval_seeds``, ``eval_fgd_until_pct``, ``nodes``) as the fields :func:`placement_eval_set`
    reads. Raises DataError naming what is missing, or a file the run's settings no longer name
    for sure: a relative path (the run's folder is not recorded) or an openb name while the
    synthetic trace stands in for the openb data."""
    from types import SimpleNamespace

    missing = [k for k in ("eval_traces", "eval_seeds", "eval_fgd_until_pct") if k not in params]
    if missing:
        raise DataError(f"its run logged no {', '.join(missing)}")
    try:
        traces = [str(t) for t in json.loads(params["eval_traces"])]
        seeds = [int(s) for s in json.loads(params["eval_seeds"])]
        prefix = float(params["eval_fgd_until_pct"])
    except (TypeError, ValueError) as err:
        raise DataError(f"its run's evaluation parameters do not read ({err})") from err
    nodes = params.get("nodes")
    nodes = None if nodes in (None, "", "None") else nodes
    for given in [*traces, nodes or "gpu_node"]:
        if _is_path(given) and not Path(given).is_absolute():
            raise DataError(f"its run names {given!r}, a relative path from an unrecorded folder")
        if not _is_path(given) and openb_is_synthetic():
            raise DataError(f"its run names openb's {given!r}, and the openb data is missing")
    return SimpleNamespace(
        eval_traces=traces, eval_seeds=seeds, eval_fgd_until_pct=prefix, nodes=nodes
    )


def rebuild_champion_eval_set(client: Any, name: str = REGISTERED_MODEL) -> str | None:
    """Give a champion that records no evaluation set (one registered before versions recorded
    theirs) its :data:`EVAL_SET_TAG` and :data:`EVAL_N_TAG`, rebuilt by :func:`placement_eval_set`
    from its source run's logged parameters (:func:`_logged_eval_args`) while those files still
    resolve, so that the next score compares with it on the same rule as any other.

    Returns:
        ``None`` when there is no champion, it has its tags, or they were rebuilt; else why they
        could not be (one clause, for the refusal :func:`log_placement_pyfunc` reports).
    """
    from mlflow.exceptions import MlflowException

    try:
        champ = client.get_model_version_by_alias(name, CHAMPION)
    except MlflowException as err:
        if not no_such_alias(err):
            raise  # the store failed (tracking_guard reports it), not "no champion"
        return None
    if EVAL_SET_TAG in (champ.tags or {}):
        return None
    if not champ.run_id:
        return "its evaluation set cannot be rebuilt: it has no source run"
    try:
        params = client.get_run(champ.run_id).data.params
        eval_set, _ = placement_eval_set(_logged_eval_args(params))
    except (DataError, MlflowException, OSError) as err:
        return f"its evaluation set cannot be rebuilt from run {champ.run_id}: {err}"
    client.set_model_version_tag(name, str(champ.version), EVAL_SET_TAG, eval_set.fingerprint)
    client.set_model_version_tag(name, str(champ.version), EVAL_N_TAG, str(eval_set.n))
    return None


def log_placement_pyfunc(
    model_dir: Path, score: float, eval_set: EvalSet | None = None
) -> dict[str, Any]:
    """Log ``model_dir`` as a pyfunc model in the active run, register it as
    :data:`REGISTERED_MODEL` and move :data:`CHAMPION` to it when ``score`` (mean unallocated GPU
    % at 100 % arrived; lower is better) beats the champion's on the same evaluation set.

    ``eval_set``: what ``score`` was measured on (:func:`placement_eval_set`); default the one
    :func:`tracked_run` recorded on the active run. A champion measured on another set stays
    (:func:`fleetmind.training.tracking.promote_if_better`); one that records none (an older
    registry's) first has its set rebuilt from its run's parameters
    (:func:`rebuild_champion_eval_set`) and compares as any other, or stays when it cannot be
    rebuilt. The entry's ``champion_refused`` then says why. Returns the registry entry of the
    run summary.
    """
    eval_set = eval_set if eval_set is not None else _run_eval_set()
    untagged = None
    if eval_set is not None:
        untagged = rebuild_champion_eval_set(mlflow.MlflowClient())
    return log_pyfunc_model(
        PLACEMENT,
        {"placement": str(model_dir)},
        ("numpy", "onnxruntime", "mlflow"),
        REGISTERED_MODEL,
        tag="eval_unalloc",
        score=score,
        higher_is_better=False,
        eval_set=eval_set,
        untagged=untagged,
    )
