"""Train the GAT root-cause ranker on an RCA dataset folder, tracked in MLflow (CleanRL-style script).

    fleetmind rca train --data DIR [--epochs 30] [--seed 0] [--out runs/rca] [--json P]

What a run does:

1. Seeds everything, reads the dataset (:class:`fleetmind.rca.lightning_module.RCADataModule`), computes features.
2. Trains :class:`fleetmind.rca.lightning_module.GATLightning` with Lightning: per-epoch ``train/*`` and ``val/*``
   metrics, early stopping and best-checkpointing on ``val/mrr``, a wall-clock cap (``max_minutes``).
   ``--accelerator``/``--devices``/``--strategy``/``--num-nodes`` go to the Lightning ``Trainer``
   (``--devices 2 --strategy ddp`` is two-process data parallel; on CPU over gloo): each rank trains
   on its shard (Lightning's ``DistributedSampler``), epoch metrics are reduced over ranks
   (``sync_dist``), and steps 3-4 run on rank zero only, from the checkpoint rank zero saved.
3. Restores the best checkpoint, evaluates every test split (``test``, ``test_large``, ...), writes the
   artifact folder (``<out>/<run name>/model``: ``config.json`` + ``model.pt``, see
   :mod:`fleetmind.rca.gat_analyzer`) and calibrates it: the score temperature is fitted on the
   validation incidents, as ``fleetmind rca calibrate --write`` would
   (:func:`fleetmind.training.rca_calibrate.fit_calibration`), and stored under ``calibration``
   in ``config.json``; with fewer than 30 usable validation incidents (or a temperature on a
   bound of the search range) it stores ``calibration: null`` and the reason, and warns.
4. Logs params (the settings, and what the data is: :func:`data_params`), tags (the command, the
   commit and the versions: :func:`_log_inputs`), metrics and the model (a pyfunc wrapper around
   the artifact, explicit pip requirements) to MLflow, registers a new version of
   ``fleetmind-rca`` tagged with its ``val_ac1`` and its validation set (:func:`validation_set`),
   and moves the ``champion`` alias to it only when its ``val_ac1`` beats the current champion's
   on the same validation set (:func:`fleetmind.training.tracking.promote_if_better`).

Tracking URI: ``MLFLOW_TRACKING_URI`` or the embedded ``sqlite:///mlflow.db``. The pyfunc wrapper lives in
:mod:`fleetmind.training.rca_pyfunc` (it must be importable by name when MLflow loads the model).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import math
import os
import random
import shlex
import sys
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from fleetmind import argtypes
from fleetmind.data.errors import ConfigError, DataError
from fleetmind.data.files import read_json
from fleetmind.data.mlflow_store import safe_uri
from fleetmind.data.rca_dataset import check_folder_complete, load_dataset, read_incidents
from fleetmind.errors import Terminated
from fleetmind.folders import write_folder_whole
from fleetmind.progress import show_bar
from fleetmind.provenance import file_sha256, graphs_sha256
from fleetmind.rca.base import torch_threads
from fleetmind.rca.features.neighbours import NUM_EDGE_FEATURES, NUM_NODE_EXTRA
from fleetmind.rca.gat_analyzer import GATAnalyzer, save_artifact
from fleetmind.training.io import new_run_dir, write_json
from fleetmind.training.progress import stderr_progress_bar
from fleetmind.training.pyfunc_entries import RCA
from fleetmind.training.rca_calibrate import (
    TooFewToFit,
    calibration_record,
    fit_calibration,
    write_calibration,
)
from fleetmind.training.rca_feedback import feedback_period, merge_feedback, merged_dir, safe_url
from fleetmind.training.tracking import (
    EVAL_SET_TAG,
    EvalSet,
    fluent_run,
    lightning_mlflow_logger,
    log_pyfunc_model,
    ready_store,
    single_try,
    tracking_guard,
    tracking_uri,
)

REGISTERED_MODEL = "fleetmind-rca"


@dataclass
class Args:
    """Settings of one training run (``fleetmind rca train`` flags)."""

    data: str = ""
    """dataset folder (``fleetmind rca generate --out DIR``)"""
    epochs: int = 15
    """maximum epochs"""
    seed: int = 0
    """seed of weights, splits and batch order"""
    out: str = "runs/rca"
    """folder for checkpoints and the artifact (``<out>/<run name>/``)"""
    batch_size: int = 32
    """graphs per batch"""
    lr: float = 3e-3
    """AdamW learning rate"""
    weight_decay: float = 1e-4
    """AdamW weight decay"""
    hidden: int = 32
    """hidden channels"""
    heads: int = 4
    """attention heads per layer"""
    layers: int = 3
    """GATv2 layers"""
    dropout: float = 0.1
    """dropout"""
    fault_weight: float = 0.5
    """weight of the fault-type loss"""
    crop_hops: int = 1
    """candidate subgraph radius around recently alerting nodes (training and inference)"""
    neighbours: bool = False
    """also read the neighbour-comparison inputs (``fleetmind.rca.features.neighbours``)"""
    thin_share: float = 0.0
    """share of training incidents that also get a thinned copy (``fleetmind.rca.thinning``)"""
    patience: int = 6
    """early stopping: epochs without val/mrr improvement"""
    max_minutes: float = 8.0
    """wall-clock cap of the fit loop (Lightning ``max_time``)"""
    max_train: int | None = None
    """use at most this many training incidents (None: all)"""
    threads: int | None = 1
    """torch threads (None: torch default; 1 is fastest on a shared 2-core machine)"""
    register: bool = True
    """register the model in the MLflow registry and maybe move the champion alias"""
    tracking_uri: str | None = None
    """MLflow tracking URI (default: MLFLOW_TRACKING_URI or sqlite:///mlflow.db)"""
    experiment: str = "fleetmind-rca"
    """MLflow experiment name"""
    progress: bool = True
    """show progress bars"""
    feedback_db: str | None = None
    """the service's database URL: its confirmed/corrected incidents join the training split"""
    feedback_weight: int = 1
    """copies of each feedback incident in the training split"""
    feedback_since: str | None = None
    """only feedback given at or after this ISO 8601 date(-time) (UTC without an offset)"""
    feedback_until: str | None = None
    """only feedback given before this ISO 8601 date(-time): later feedback stays aside to test on"""
    accelerator: str = "auto"
    """Lightning accelerator (``auto``: a GPU when one is visible, else CPU)"""
    devices: str = "auto"
    """devices per node: a count (``2``), a list (``0,1``) or ``auto``"""
    strategy: str = "auto"
    """Lightning strategy (``ddp``, ``ddp_spawn``, ``auto``, ...); CPU DDP uses the gloo backend"""
    num_nodes: int = 1
    """machines taking part (multi-node DDP: start the command on each with the usual
    ``MASTER_ADDR``/``MASTER_PORT``/``NODE_RANK`` environment)"""
    shard_log: str | None = None
    """write ``rank<R>.json`` (this rank's training sample indices per epoch) to this folder"""


def log_and_register(
    artifact_dir: Path, val_ac1: float, register: bool = True, val_set: EvalSet | None = None
) -> dict[str, Any]:
    """Log the artifact as a pyfunc model in the active run; register and maybe promote it
    (``val_set``: what ``val_ac1`` was measured on, see :func:`validation_set`)."""
    return log_pyfunc_model(
        RCA,
        {"gat": str(artifact_dir)},
        ("torch", "torch-geometric", "numpy", "scipy", "mlflow"),
        REGISTERED_MODEL if register else None,
        tag="val_ac1",
        score=val_ac1,
        higher_is_better=True,
        params={"top_k": 5},
        eval_set=val_set,
    )


def validation_set(data_dir: str | Path, seed: int, val_fraction: float, n_val: int) -> EvalSet:
    """The identity of a run's validation set, so that only scores on the same set compare.

    The fingerprint is the SHA-256 (hex) of the folder's ``val`` incidents (each as canonical
    JSON, sorted, so their order in the file does not matter) and of the graphs they name; a
    folder without a ``val`` split (:class:`fleetmind.rca.lightning_module.RCADataModule` then
    holds out ``val_fraction`` of the training graphs, drawn with ``seed``) hashes
    ``train.jsonl``, every ``graphs/*.json``, ``seed`` and ``val_fraction``. Two trainings on the
    same data share it: the same folder, or one regenerated with the same settings. :func:`run`
    passes the ``--data`` folder, not the copy with feedback added: feedback never enters
    validation, so a run with feedback and one without share it.

    Args:
        data_dir: the dataset folder training read.
        seed: the run's seed.
        val_fraction: the data module's held-out share of training graphs (without ``val``).
        n_val: validation incidents the run scored (``RCADataModule.info["n_val"]``).
    """
    root = Path(data_dir)
    h = hashlib.sha256()
    val = root / "val.jsonl"
    incidents = read_incidents(val) if val.is_file() else []
    if incidents:
        h.update(b"val\n")
        for line in sorted(_canonical(inc) for inc in incidents):
            h.update(line.encode() + b"\n")
        for name in sorted({str(inc["graph"]) for inc in incidents}):
            graph = read_json(root / "graphs" / f"{name}.json", "graph file")
            h.update(_canonical(graph).encode() + b"\n")
    else:
        h.update(f"held-out\n{seed}\n{val_fraction!r}\n".encode())
        for path in [root / "train.jsonl", *sorted((root / "graphs").glob("*.json"))]:
            h.update(path.name.encode() + b"\n")
            with path.open("rb") as fh:
                for block in iter(lambda: fh.read(1 << 20), b""):
                    h.update(block)
    return EvalSet(h.hexdigest(), int(n_val))


def _canonical(obj: Any) -> str:
    """``obj`` as JSON with sorted keys and no spaces (one form per value)."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"))


def parse_devices(value: str | int) -> Any:
    """Lightning ``devices`` from a CLI string: ``"auto"``, a count ``"2"`` or a list ``"0,1"``."""
    v = str(value).strip()
    if v == "auto":
        return "auto"
    if "," in v:
        return [int(x) for x in v.split(",") if x.strip()]
    try:
        return int(v)
    except ValueError:
        raise ConfigError(
            f"--devices must be auto, a count or a list like 0,1; got {v!r}"
        ) from None


def _shard_log_callback() -> Any:
    import pytorch_lightning as pl

    class ShardLog(pl.Callback):
        """Writes this rank's training sample indices (per epoch) to ``<dir>/rank<R>.json``."""

        def __init__(self, out_dir: str) -> None:
            self.out = Path(out_dir)
            self.epochs: list[list[int]] = []

        def on_train_epoch_start(self, trainer: Any, pl_module: Any) -> None:
            loader = trainer.train_dataloader
            sampler = getattr(loader, "sampler", None)
            if sampler is not None and hasattr(sampler, "set_epoch"):
                sampler.set_epoch(trainer.current_epoch)
            self.epochs.append([int(i) for i in iter(sampler)] if sampler is not None else [])
            self.out.mkdir(parents=True, exist_ok=True)
            (self.out / f"rank{trainer.global_rank}.json").write_text(
                json.dumps(
                    {
                        "rank": trainer.global_rank,
                        "world_size": trainer.world_size,
                        "sampler": type(sampler).__name__,
                        "epochs": self.epochs,
                    }
                )
            )

    return ShardLog


def ShardLog(out_dir: str) -> Any:  # noqa: N802 - a class factory (pytorch_lightning imported lazily)
    """A Lightning callback that logs each rank's training shard (see :attr:`Args.shard_log`)."""
    return _shard_log_callback()(out_dir)


def _gat_module(args: Args, fault_types: Any) -> Any:
    """The :class:`~fleetmind.rca.lightning_module.GATLightning` of ``args``'s hyper-parameters
    over ``fault_types`` (the data module's)."""
    from fleetmind.rca.lightning_module import GATLightning

    return GATLightning(
        fault_types=fault_types,
        hidden=args.hidden,
        heads=args.heads,
        layers=args.layers,
        dropout=args.dropout,
        lr=args.lr,
        weight_decay=args.weight_decay,
        fault_weight=args.fault_weight,
        epochs=args.epochs,
        crop_hops=args.crop_hops,
        neighbours=args.neighbours,
    )


# process-wide settings a training run changes and :func:`run` gives back on return
_QUIET_LOGGERS = ("pytorch_lightning", "lightning", "lightning.pytorch", "lightning_fabric")
_RUN_ENV = ("MLFLOW_TRACKING_URI", "PL_GLOBAL_SEED", "PL_SEED_WORKERS", "MLFLOW_DISABLE_TELEMETRY")


@contextlib.contextmanager
def _process_state_kept(threads: int | None) -> Iterator[None]:
    """Inside the block torch runs on ``threads`` intra-op threads (``None`` or 0: unchanged);
    on leaving it, also on an exception, the process gets back its torch thread count, warnings
    filters, the levels of :data:`_QUIET_LOGGERS`, MLflow's tracking URI, torch's deterministic
    algorithms setting (Lightning's ``Trainer(deterministic=False)`` calls
    ``torch.use_deterministic_algorithms(False)``) and the :data:`_RUN_ENV` environment variables
    (Lightning's ``seed_everything`` sets ``PL_GLOBAL_SEED``/``PL_SEED_WORKERS``,
    ``mlflow.set_tracking_uri`` sets ``MLFLOW_TRACKING_URI``)."""
    import warnings

    import torch

    det = torch.are_deterministic_algorithms_enabled()
    warn_only = torch.is_deterministic_algorithms_warn_only_enabled()
    levels = {name: logging.getLogger(name).level for name in _QUIET_LOGGERS}
    env = {name: os.environ.get(name) for name in _RUN_ENV}
    uri = _mlflow_uri()
    threads_kept = torch_threads(threads) if threads else contextlib.nullcontext()
    try:
        with threads_kept, warnings.catch_warnings():
            yield
    finally:
        torch.use_deterministic_algorithms(det, warn_only=warn_only)
        for name, level in levels.items():
            logging.getLogger(name).setLevel(level)
        if "mlflow" in sys.modules and _mlflow_uri() != uri:
            sys.modules["mlflow"].set_tracking_uri(uri)
        for name, value in env.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def _mlflow_uri() -> str | None:
    """The tracking URI set by ``mlflow.set_tracking_uri`` in this process (``None``: none set,
    or MLflow not imported yet)."""
    utils = sys.modules.get("mlflow.tracking._tracking_service.utils")
    return getattr(utils, "_tracking_uri", None)


def run(args: Args) -> dict[str, Any]:
    """Train, evaluate, log and register; returns the JSON summary (run id, metrics, registry info).

    Seeds Python's, NumPy's and torch's global random generators with ``args.seed`` (the run is
    reproducible from its seed) and leaves them as the run left them. Everything else it changes
    for the process is given back on return or on an exception: the torch thread count
    (``args.threads``), warnings filters, Lightning's logger levels, MLflow's tracking URI, torch's
    deterministic algorithms setting and the ``MLFLOW_TRACKING_URI``/``PL_GLOBAL_SEED``/
    ``PL_SEED_WORKERS`` environment variables."""
    with _process_state_kept(args.threads if args.threads is None else max(0, args.threads)):
        return _run(args)


def _run(args: Args) -> dict[str, Any]:
    """:func:`run` inside :func:`_process_state_kept`."""
    os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
    import mlflow

    from fleetmind.rca.lightning_module import GATLightning, evaluate_ranks

    _check_and_seed(args)
    uri = tracking_uri(args.tracking_uri)
    # before the data: a store that cannot be used, or a deleted experiment, stops the run at once
    ready_store(uri, experiment=args.experiment)
    dm, feedback, t_feat = _data_module(args)
    # a folder of its own, even beside a run with the same seed started in the same second; made
    # by rank zero only (Lightning starts the other DDP ranks with LOCAL_RANK set)
    first_rank = os.environ.get("LOCAL_RANK", "0") == "0"
    run_name, out_dir = new_run_dir(
        args.out, f"rca__gat__{args.seed}__{int(time.time())}", first_rank
    )
    mlflow.set_tracking_uri(uri)
    # the store answered ready_store; one that fails from here on (a server stopped mid-run) is
    # an error in seconds and one line naming out_dir, which keeps the checkpoints and model/
    killer = _KilledOnCtrlC(uri)
    with tracking_guard(uri, out_dir), _removed_if_empty(out_dir, first_rank), killer:
        # Lightning's MLFlowLogger, ending the run in one try once the store failed in the fit
        logger = lightning_mlflow_logger(
            experiment_name=args.experiment, run_name=run_name, tracking_uri=uri
        )
        module = _gat_module(args, dm.fault_types)
        _log_inputs(logger, args, dm.info)
        trainer, ckpt = _trainer(args, logger, out_dir, len(dm.train_data))
        t_fit = time.time()
        _fit(trainer, module, dm, uri, logger, out_dir)
        killer.logger = logger  # from here a Ctrl-C or SIGTERM ends the run KILLED (not FINISHED)
        fit_s = time.time() - t_fit
        if not trainer.is_global_zero:
            # evaluation, the artifact and MLflow registration happen once, on rank zero
            return {"rank": int(trainer.global_rank), "world_size": int(trainer.world_size)}

        # -------------------------------------------------------------- best weights + evaluation
        if ckpt.best_model_path:
            best = GATLightning.load_from_checkpoint(ckpt.best_model_path, map_location="cpu")
            model = best.model
        else:  # pragma: no cover - no validation ran
            model = module.model
        model.eval()
        metrics: dict[str, Any] = {"val": evaluate_ranks(model, dm.val_data)}
        for name, data in dm.test_sets.items():
            metrics[name] = evaluate_ranks(model, data)
        if feedback:
            feedback = _feedback_record(args, feedback, dm, logger.run_id, run_name)
            feedback["fit"] = evaluate_ranks(model, dm.feedback_data)
        artifact = save_artifact(
            model,
            out_dir / "model",
            metrics=metrics,
            data={
                "dir": str(args.data),
                **dm.info,
                "seed": args.seed,
                **({"feedback": _without(feedback, "fit", "dir", "graphs")} if feedback else {}),
            },
        )
        times = {
            "time/features_s": t_feat,
            "time/fit_s": fit_s,
            "time/epochs": trainer.current_epoch,
        }
        # the dataset's own folder: validation never holds feedback (RCADataModule), so a run with
        # feedback and one without are measured on the same validation set and their scores compare
        val_set = validation_set(args.data, args.seed, dm.val_fraction, dm.info["n_val"])
        cal = calibrate_artifact(args, dm, artifact, val_set)  # before MLflow logs the folder
        logged = {**times, **calibration_metrics(cal["calibration"])}
        reg = _log_final(uri, logger.run_id, metrics, logged, artifact, args.register, val_set)
    return {
        "run_id": logger.run_id,
        "run_name": run_name,
        "rank": 0,
        "world_size": int(trainer.world_size),
        "checkpoint": str(ckpt.best_model_path),
        "tracking_uri": safe_uri(uri),
        "artifact": str(artifact),
        "epochs": int(trainer.current_epoch),
        "fit_seconds": round(fit_s, 1),
        "feature_seconds": round(t_feat, 1),
        "data": dm.info,
        "metrics": metrics,
        **cal,
        **({"feedback": feedback} if feedback else {}),
        **reg,
    }


class _KilledOnCtrlC:
    """Around what follows the fit (evaluation, calibration, MLflow logging and registration): a
    Ctrl-C there ends the MLflow run of :attr:`logger` ``KILLED`` before the interrupt goes on
    (the CLI prints ``fleetmind: interrupted`` and returns 130). Lightning's logger ended the run
    ``FINISHED`` at the end of the fit and ``mlflow.start_run`` ends it ``FAILED`` on an interrupt
    inside it, so the run of an interrupted command read as a finished or failed one. A Ctrl-C
    in the fit is :func:`_fit`'s (``logger`` is still ``None`` then); the store not answering
    leaves the run as it was after one try of at most 10 s
    (:func:`~fleetmind.training.tracking.single_try`; MLflow's retries kept the interrupt from the
    CLI a minute or more)."""

    def __init__(self, uri: str) -> None:
        self.uri = uri
        self.logger: Any = None

    def __enter__(self) -> _KilledOnCtrlC:
        return self

    def __exit__(self, kind: type[BaseException] | None, *rest: object) -> None:
        run_id = getattr(self.logger, "_run_id", None)
        if kind is None or not issubclass(kind, KeyboardInterrupt) or run_id is None:
            return
        with contextlib.suppress(Exception), single_try():  # one try: the store may be down
            from mlflow.tracking import MlflowClient

            MlflowClient(tracking_uri=self.uri).set_terminated(run_id, status="KILLED")


@contextlib.contextmanager
def _removed_if_empty(out_dir: Path, owner: bool) -> Iterator[None]:
    """On an error or an interrupt inside (a store failure, a Ctrl-C before the first
    checkpoint), remove the run folder ``out_dir`` if it is still empty (and this rank, ``owner``,
    made it), so that a failed run leaves no empty folder behind."""
    try:
        yield
    except BaseException:
        if owner:
            with contextlib.suppress(OSError):  # not empty, or already gone: kept as it is
                out_dir.rmdir()
        raise


def _fit(trainer: Any, module: Any, dm: Any, uri: str, logger: Any, out_dir: Path) -> None:
    """``trainer.fit(module, datamodule=dm)``, a Ctrl-C in it raised as :class:`KeyboardInterrupt`
    and a SIGTERM as :class:`fleetmind.errors.Terminated` (the CLI's 143, not Lightning's 0).

    Lightning catches the interrupt itself (``_call_and_handle_interrupt`` in
    ``pytorch_lightning/trainer/call.py``): it ignores SIGINT from then on, ends the MLflow run
    ``FAILED`` and calls ``sys.exit(1)``. Here that exit becomes the interrupt again, so
    that the CLI prints ``fleetmind: interrupted`` and returns 130 (143 for SIGTERM), the SIGINT
    handler is put back, the MLflow run is marked ``KILLED`` and a warning names the partial run
    folder ``out_dir`` (nothing is registered: registration comes after the fit). Lightning stops
    on SIGTERM at a batch or epoch boundary (``SIGTERMException``); a SIGTERM it noted after its
    last check (the last epoch's end) let the fit return as if complete: it is a stop too.
    """
    import signal

    from pytorch_lightning.utilities.exceptions import SIGTERMException

    handler = signal.getsignal(signal.SIGINT)
    try:
        trainer.fit(module, datamodule=dm)
    except SIGTERMException:
        # Lightning stops every rank at a batch boundary on SIGTERM and raises this SystemExit
        # with no code, which would end the command with status 0: the CLI's 143 instead
        _interrupted(handler, uri, logger, out_dir)
        raise Terminated(signal.SIGTERM) from None
    except SystemExit as err:
        # Lightning's sys.exit(1) is raised while it handles the KeyboardInterrupt (a Ctrl-C, or
        # a SIGTERM before its own handler was installed)
        if not (trainer.interrupted and isinstance(err.__context__, KeyboardInterrupt)):
            raise
        _interrupted(handler, uri, logger, out_dir)
        if isinstance(err.__context__, Terminated):
            raise Terminated(err.__context__.signum) from None
        raise KeyboardInterrupt from None
    except KeyboardInterrupt:  # a launcher that lets it through
        _interrupted(handler, uri, logger, out_dir)
        raise
    if getattr(trainer, "received_sigterm", False):  # noted after Lightning's last check
        _interrupted(handler, uri, logger, out_dir)
        raise Terminated(signal.SIGTERM)


def _interrupted(handler: Any, uri: str, logger: Any, out_dir: Path) -> None:
    """After a Ctrl-C in the fit: SIGINT's ``handler`` restored, the MLflow run of ``logger``
    ended ``KILLED`` (left as Lightning ended it when the store does not answer its one try of at
    most 10 s: :func:`~fleetmind.training.tracking.single_try`) and one
    ``fleetmind: warning:`` line on stderr naming ``out_dir`` when the run left files there."""
    import contextlib
    import signal

    if handler is not None and signal.getsignal(signal.SIGINT) is not handler:
        with contextlib.suppress(ValueError, TypeError):  # not the main thread
            signal.signal(signal.SIGINT, handler)
    with contextlib.suppress(Exception), single_try():  # one try: the store may be down
        from mlflow.tracking import MlflowClient

        run_id = getattr(logger, "_run_id", None)  # None: the run was never created
        if run_id is not None:
            MlflowClient(tracking_uri=uri).set_terminated(run_id, status="KILLED")
    if out_dir.exists() and any(out_dir.iterdir()):
        print(
            f"fleetmind: warning: training stopped before the end: {out_dir} is a partial run"
            " (checkpoints only, no model/ folder); delete it or train again",
            file=sys.stderr,
        )


CALIBRATION_HINT = (
    "generate more incidents, or run `fleetmind rca calibrate --data DIR --model ARTIFACT --write` "
    "on a larger validation split and serve that folder"
)
"""What ``rca train``'s warning suggests when the validation split is too small to calibrate."""


def calibrate_artifact(args: Args, dm: Any, artifact: Path, val_set: EvalSet) -> dict[str, Any]:
    """Fit the score temperature of the artifact folder ``artifact`` on the run's validation
    incidents and store it in its ``config.json``, as ``fleetmind rca calibrate --write`` does
    (:func:`fleetmind.training.rca_calibrate.fit_calibration`: logits after the lone-alert rule,
    only incidents with their root among the candidates); ECE is also reported on every test
    split. The validation split is the one that chose the checkpoint (temperature scaling's
    protocol, Guo et al. 2017), so its ECE is in-sample; the test splits' is not.

    With fewer than :data:`fleetmind.training.rca_calibrate.MIN_FIT_INCIDENTS` usable validation
    incidents, or a temperature on a bound of the search range, ``config.json`` gets
    ``calibration: null`` and ``calibration_skipped`` (the reason), and one warning goes to stderr.

    Returns:
        ``{"calibration": the stored entry or None}`` plus ``calibration_skipped`` when skipped.
    """
    ds, val, split = _validation_incidents(dm)
    payload: dict[str, Any] = {}
    if len(val) != dm.info["n_val"]:  # pragma: no cover - the data module's split rule changed
        skipped: str | None = (
            f"the validation split redrawn for calibration has {len(val)} incidents, the one "
            f"training scored {dm.info['n_val']}"
        )
    else:
        try:
            payload, skipped = fit_calibration(
                GATAnalyzer.load(str(artifact)),
                ds,
                val,
                {s: ds.split(s) for s in dm.test_sets},
                "val",
                args.data,
                hint=CALIBRATION_HINT,
                progress=show_bar(args.progress),  # no bar frames in a log file
            )
        except TooFewToFit as err:
            skipped = str(err)
        except Exception as err:  # the trained model is kept and registered, uncalibrated
            skipped = f"fitting the temperature failed: {type(err).__name__}: {err}"
    if skipped is not None:
        verb = "registering" if args.register else "logging"
        reason = f"{verb} the model uncalibrated (scores at T = 1): {skipped}"
        print(f"fleetmind: warning: {reason}", file=sys.stderr)
        write_calibration(artifact, None, reason)
        return {"calibration": None, "calibration_skipped": reason}
    record = calibration_record(payload)
    record["fitted_on"].update(split=split, eval_set=val_set.fingerprint, in_sample=["val"])
    write_calibration(artifact, record)
    return {"calibration": record}


def _validation_incidents(dm: Any) -> tuple[Any, list[dict[str, Any]], str]:
    """``(dataset, validation incidents, their split's name)`` of the data module ``dm``: the
    folder's ``val`` (read with the test splits only), or the training graphs it held out,
    redrawn with its seed by its own rule (``RCADataModule._splits``)."""
    root = Path(dm.data_dir)
    tests = list(dm.test_sets)
    if (root / "val.jsonl").is_file():
        ds = load_dataset(root, ["val", *tests])
        if ds.splits["val"]:
            return ds, ds.split("val"), "val"
    ds = load_dataset(root)
    _, val = dm._splits(ds, np.random.default_rng(dm.seed))
    return ds, val, f"val (training graphs held out with seed {dm.seed})"


def calibration_metrics(record: dict[str, Any] | None) -> dict[str, float]:
    """MLflow metrics of a calibration entry (:func:`calibrate_artifact`): ``calibration/temperature``
    and per split ``<split>/ece`` and ``<split>/ece_uncalibrated`` (probability units); none when
    the run was not calibrated."""
    if record is None:
        return {}
    out = {"calibration/temperature": float(record["temperature"])}
    for split, e in record["ece"].items():
        out[f"{split}/ece"] = float(e["calibrated"])
        out[f"{split}/ece_uncalibrated"] = float(e["uncalibrated"])
    return out


def calibration_line(res: dict[str, Any]) -> str | None:
    """The line ``rca train`` prints about the temperature it stored (``None`` when it stored
    none: :func:`calibrate_artifact` has warned). Validation ECE is in-sample: that split also
    chose the checkpoint."""
    cal = res.get("calibration")
    if not cal:
        return None
    ece = cal["ece"]
    parts = [
        f"{s} {e['uncalibrated']:.3f} -> {e['calibrated']:.3f}"
        + (" (in-sample: val chose the checkpoint and T)" if s == "val" else "")
        for s, e in ece.items()
    ]
    return (
        f"calibrated: temperature {cal['temperature']:.4f} fitted on {cal['fitted_on']['n']} "
        f"validation incidents; top-score ECE {', '.join(parts)}"
    )


def _feedback_record(
    args: Args, merged: dict[str, Any], dm: Any, run_id: str, run_name: str
) -> dict[str, Any]:
    """What a run trained on from the feedback database (the ``feedback`` of its JSON and of
    its artifact's ``config.json`` ``data``, where ``fleetmind rca evaluate --feedback-db``
    finds which incidents training used): the merge summary of
    :func:`fleetmind.training.rca_feedback.merge_feedback` plus the database (password masked),
    the period, the run, and the incidents trained on and dropped (root outside the candidate
    subgraph), by id."""
    out = {**merged, "db": safe_url(args.feedback_db or ""), "run_id": run_id, "run": run_name}
    out.update(since=args.feedback_since, until=args.feedback_until)
    out.update(
        incidents=list(dm.feedback.get("incidents", [])),
        dropped=list(dm.feedback.get("dropped", [])),
        dropped_copies=int(dm.feedback.get("dropped_copies", 0)),
    )
    return out


TRAIN_PACKAGES = ("torch_geometric", "pytorch_lightning", "mlflow", "scikit-learn")
"""The packages whose versions the run's tags record beside Python, torch, numpy and fleetmind."""

META_PARAM_MAX = 250
"""Longest ``data_meta/*`` parameter value logged: Lightning's MLflow logger cuts a parameter to
250 characters, so a longer one (the graph names of each split) is left out, not cut."""


def _log_inputs(logger: Any, args: Args, info: dict[str, Any]) -> None:
    """Log the run's parameters and tags through Lightning's MLflow ``logger``: ``args``
    (:func:`_shown_args`), the data module's ``info`` as ``data/<key>``, what the data is
    (:func:`data_params`) and what made the run
    (:func:`fleetmind.training.recipes.tracking.provenance_tags` of :func:`train_command`)."""
    from mlflow.entities import RunTag

    from fleetmind.training.recipes.tracking import provenance_tags

    logger.log_hyperparams(
        {
            **_shown_args(args),
            **{f"data/{k}": v for k, v in info.items()},
            **data_params(args.data),
        }
    )
    tags = provenance_tags(train_command(args), TRAIN_PACKAGES)
    # rank zero's client (Lightning gives the other DDP ranks one that does nothing)
    logger.experiment.log_batch(run_id=logger.run_id, tags=[RunTag(k, v) for k, v in tags.items()])


def data_params(data: str | Path) -> dict[str, Any]:
    """MLflow parameters that say which dataset a run read, whatever ``--data`` was called:
    ``data_abs`` (the folder, absolute), ``data_sha256/<split>`` (SHA-256 of each
    ``<split>.jsonl`` in it, hex), ``data_graphs_sha256`` (one SHA-256 over its ``graphs/*.json``,
    :func:`fleetmind.provenance.graphs_sha256`: the records only name their topologies) and ``data_meta/<field>`` (the
    generator settings of its ``meta.json``, nested fields joined by ``/``, lists as JSON; values
    over :data:`META_PARAM_MAX` characters left out; none when the folder has no readable
    ``meta.json``)."""
    root = Path(data)
    out: dict[str, Any] = {"data_abs": str(root.resolve())}
    for split in sorted(root.glob("*.jsonl")):
        out[f"data_sha256/{split.stem}"] = file_sha256(split)
    out["data_graphs_sha256"] = graphs_sha256(root)
    try:
        meta = read_json(root / "meta.json", "dataset meta.json")
    except DataError:
        meta = None

    def flat(prefix: str, value: Any) -> None:
        if isinstance(value, dict):
            for k, v in value.items():
                flat(f"{prefix}/{k}", v)
            return
        text = json.dumps(value) if isinstance(value, list) else value
        if len(str(text)) <= META_PARAM_MAX:
            out[prefix] = text

    if isinstance(meta, dict):
        flat("data_meta", meta)
    return out


def train_command(args: Args) -> str:
    """The ``fleetmind rca train`` line that reruns ``args``, quoted for a POSIX shell: the
    flags that shape the model (:func:`_argv_tail`), then where it went and how it ran
    (``--out``, ``--threads``, ``--shard-log``, ``--no-register``, ``--tracking-uri`` without its
    password) when they differ from the defaults; ``--json`` is not among the settings."""
    words = [w for item in _argv_tail(args) for w in item.split(" ", 1)]
    d = Args()
    for flag, name in (("--out", "out"), ("--threads", "threads"), ("--shard-log", "shard_log")):
        if getattr(args, name) != getattr(d, name):
            words += [flag, str(getattr(args, name))]
    if not args.register:
        words.append("--no-register")
    if args.tracking_uri:
        words += ["--tracking-uri", safe_uri(args.tracking_uri)]
    return shlex.join(["fleetmind", "rca", "train", *words])


def _without(d: dict[str, Any], *keys: str) -> dict[str, Any]:
    """``d`` without ``keys``."""
    return {k: v for k, v in d.items() if k not in keys}


def _shown_args(args: Args) -> dict[str, Any]:
    """``args`` as the run's MLflow params: the feedback database URL and the tracking URI
    without their passwords (MLflow shows params to everyone who can read the experiment)."""
    shown = asdict(args)
    if args.feedback_db:
        shown["feedback_db"] = safe_url(args.feedback_db)
    if args.tracking_uri:
        shown["tracking_uri"] = safe_uri(args.tracking_uri)
    return shown


MAX_HIDDEN = 8192
"""The widest GAT ``rca train`` accepts (the released one has 48 channels; 8192 already needs
gigabytes per batch): a larger value is a typo, refused before torch tries to allocate it."""


def check_args(args: Args) -> None:
    """Raise :class:`ConfigError` (one line, the option's name) for a value training cannot use,
    before any data is read: torch would otherwise stop minutes later with a traceback."""
    if not args.data:
        raise ConfigError("--data DIR is required (a dataset folder from `fleetmind rca generate`)")
    at_least_one = {
        "--epochs": args.epochs,
        "--batch-size": args.batch_size,
        "--hidden": args.hidden,
        "--heads": args.heads,
        "--patience": args.patience,
    }
    for flag, value in at_least_one.items():
        if value < 1:
            raise ConfigError(f"{flag} must be >= 1, got {value}")
    if args.layers < 2:  # the GAT's input layer and its output layer (rca.model.GAT)
        raise ConfigError(f"--layers must be >= 2, got {args.layers}")
    if not (args.lr > 0 and math.isfinite(args.lr)):
        raise ConfigError(f"--lr must be a positive number, got {args.lr}")
    if not (args.weight_decay >= 0 and math.isfinite(args.weight_decay)):
        raise ConfigError(f"--weight-decay must be >= 0, got {args.weight_decay}")
    if not 0.0 <= args.dropout < 1.0:
        raise ConfigError(f"--dropout must lie in [0, 1), got {args.dropout}")
    if not 0.0 <= args.thin_share <= 1.0:
        raise ConfigError(f"--thin-share must lie in [0, 1], got {args.thin_share}")
    if not (args.max_minutes > 0 and math.isfinite(args.max_minutes)):
        raise ConfigError(f"--max-minutes must be a positive number, got {args.max_minutes}")
    if args.hidden % args.heads:
        raise ConfigError(
            f"--hidden must be a multiple of --heads (each head gets hidden/heads channels), got "
            f"{args.hidden} and {args.heads}"
        )
    if args.hidden > MAX_HIDDEN:
        raise ConfigError(f"--hidden must be <= {MAX_HIDDEN}, got {args.hidden}")
    if not 0 <= args.seed < argtypes.SEED_LIMIT:
        raise ConfigError(f"--seed must lie in [0, 2**32), got {args.seed}")
    if args.max_train is not None and args.max_train < 1:
        raise ConfigError(f"--max-train must be >= 1, got {args.max_train}")
    if args.threads is not None and args.threads < 0:
        raise ConfigError(f"--threads must be >= 0 (0: torch's default), got {args.threads}")
    feedback_period(args)


def _check_and_seed(args: Args) -> None:
    """Refuse a run without data or epochs, quiet Lightning's chatter, seed every generator (the
    torch thread count is :func:`run`'s, for the whole run)."""
    import warnings

    import pytorch_lightning as pl
    import torch

    check_args(args)
    for noisy in _QUIET_LOGGERS:
        logging.getLogger(noisy).setLevel(logging.WARNING)
    _check_devices(args)
    if not Path(args.data).is_dir():  # before the tracking store is created, which leaves files
        raise DataError(f"dataset folder not found: {args.data}")
    warnings.filterwarnings("ignore", message=".*does not have many workers.*")
    warnings.filterwarnings("ignore", message=".*treespec.*")
    random.seed(args.seed)
    np.random.seed(args.seed)
    torch.manual_seed(args.seed)
    pl.seed_everything(args.seed, workers=True, verbose=False)


def _check_devices(args: Args) -> None:
    """Refuse, before any data is read, an accelerator, device list, strategy or node count that
    Lightning would refuse when the real trainer is built (a GPU that is not there, ``--devices
    0``, a strategy name it does not know): a throwaway trainer is built from those four alone.

    Raises:
        fleetmind.errors.ConfigError: Lightning's reason, on one line, naming the options.
    """
    import pytorch_lightning as pl

    try:
        pl.Trainer(
            accelerator=args.accelerator,
            devices=parse_devices(args.devices),
            strategy=args.strategy,
            num_nodes=args.num_nodes,
            logger=False,
            enable_checkpointing=False,
            enable_progress_bar=False,
            enable_model_summary=False,
        )
    except ConfigError:
        raise
    except (
        Exception
    ) as err:  # Lightning's MisconfigurationException, ValueError, TypeError, ImportError
        why = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise ConfigError(
            f"--accelerator {args.accelerator} --devices {args.devices} --strategy "
            f"{args.strategy} --num-nodes {args.num_nodes}: {why}"
        ) from None


def _data_module(args: Args) -> tuple[Any, dict[str, Any] | None, float]:
    """``(RCADataModule set up, feedback merge summary or None, feature seconds)``: the dataset,
    merged with the feedback database's incidents when ``args.feedback_db`` is given."""
    from fleetmind.rca.lightning_module import RCADataModule

    # the feature cache spares the data module from reading the folder: check it was finished
    check_folder_complete(args.data)
    data_dir, feedback = args.data, None
    if args.feedback_db:
        since, until = feedback_period(args)
        w = args.feedback_weight
        target = merged_dir(args.out, args.data, args.feedback_db, w, since, until)
        feedback = merge_feedback(args.data, args.feedback_db, target, w, since, until)
        data_dir = feedback["dir"]
    t_start = time.time()
    dm = RCADataModule(
        data_dir,
        batch_size=args.batch_size,
        seed=args.seed,
        max_train=args.max_train,
        progress=args.progress,
        crop_hops=args.crop_hops,
        neighbours=args.neighbours,
        thin_share=args.thin_share,
    )
    dm.setup()
    if feedback:
        print(feedback_summary(args, feedback, dm.feedback))
    return dm, feedback, time.time() - t_start


def feedback_summary(args: Args, merged: dict[str, Any], outcome: dict[str, Any]) -> str:
    """The lines ``rca train`` prints about its feedback: how many incidents (and copies) it
    trains on, how many of them have no fault type (they train the ranking only), and which it
    dropped and why, by incident id.

    Args:
        args: the run's settings (database, weight, period).
        merged: :func:`fleetmind.training.rca_feedback.merge_feedback`'s summary.
        outcome: :attr:`fleetmind.rca.lightning_module.RCADataModule.feedback`.
    """
    w = merged["weight"]
    used, dropped = outcome.get("incidents", []), outcome.get("dropped", [])
    period = "".join(
        f" {word} {v}"
        for word, v in (("since", args.feedback_since), ("until", args.feedback_until))
        if v is not None
    )
    lines = [
        f"training with {len(used)} of {merged['n_feedback']} feedback incidents "
        f"(x{w}: {outcome.get('copies', 0)} copies) from {safe_url(args.feedback_db or '')}"
        f"{period}"
    ]
    if merged.get("n_untyped"):
        lines.append(
            f"  {merged['n_untyped']} of them without a fault type (none given, or none the "
            "catalog allows at the node): they train the ranking, not the fault-type head"
        )
    if dropped:
        lines.append(
            f"  dropped {len(dropped)} feedback incidents ({outcome.get('dropped_copies', 0)} "
            f"copies): the labelled root lies outside the {args.crop_hops}-hop candidate "
            f"subgraph around the alerting nodes, so the model cannot rank it: "
            f"{', '.join(dropped)}"
        )
    return "\n".join(lines)


def _trainer(args: Args, logger: Any, out_dir: Path, n_train: int) -> tuple[Any, Any]:
    """``(pl.Trainer, its ModelCheckpoint)``: best and last checkpoints on ``val/mrr``, early
    stopping, the wall-clock cap and the distributed settings of ``args``."""
    import pytorch_lightning as pl
    from pytorch_lightning.callbacks import EarlyStopping, ModelCheckpoint

    ckpt = ModelCheckpoint(
        dirpath=out_dir / "checkpoints",
        filename="best-{epoch:02d}",
        monitor="val/mrr",
        mode="max",
        save_top_k=1,
        save_last=True,
    )
    callbacks: list[Any] = [
        ckpt,
        EarlyStopping(monitor="val/mrr", mode="max", patience=args.patience, min_delta=1e-4),
    ]
    if args.progress:
        callbacks.append(stderr_progress_bar(refresh_rate=10))  # stdout: the results table
    if args.shard_log:
        callbacks.append(ShardLog(args.shard_log))
    # every 10 steps, or once per epoch when an epoch is shorter (a tiny run logs its loss at all,
    # and Lightning does not warn that the interval exceeds the epoch)
    batches_per_epoch = max(1, -(-n_train // args.batch_size))
    trainer = pl.Trainer(
        max_epochs=args.epochs,
        max_time={"minutes": args.max_minutes},
        logger=logger,
        callbacks=callbacks,
        accelerator=args.accelerator,
        devices=parse_devices(args.devices),
        strategy=args.strategy,
        num_nodes=args.num_nodes,
        deterministic=False,
        enable_progress_bar=args.progress,
        enable_model_summary=False,
        log_every_n_steps=min(10, batches_per_epoch),
        num_sanity_val_steps=0,
    )
    return trainer, ckpt


def _log_final(
    uri: str,
    run_id: str,
    metrics: dict[str, Any],
    times: dict[str, float],
    artifact: Path,
    register: bool,
    val_set: EvalSet | None = None,
) -> dict[str, Any]:
    """Log the final metrics (``final/<split>/<metric>``, and ``final/<k>`` for each of ``times``:
    ``time/*`` and :func:`calibration_metrics`) to the run, log and
    register the model (``val_set``: see :func:`validation_set`), end the run; return the registry
    summary of :func:`log_and_register`."""
    import mlflow

    client = mlflow.MlflowClient(tracking_uri=uri)
    flat = {
        f"{split}/{k.replace('@', '')}": v
        for split, m in metrics.items()
        for k, v in m.items()
        if k != "n"
    }
    flat.update(times)
    for k, v in flat.items():
        client.log_metric(run_id, f"final/{k}", float(v))
    if val_set is not None:
        client.set_tag(run_id, EVAL_SET_TAG, val_set.fingerprint)
    with fluent_run(run_id=run_id):  # a store that fails here: the run ended in one try
        reg = log_and_register(artifact, metrics["val"]["ac@1"], register, val_set)
    client.set_terminated(run_id)
    return reg


# ---------------------------------------------------------------------------------------- CLI
def add_arguments(p: Any) -> None:
    """Add the ``fleetmind rca train`` flags (one per :class:`Args` field that users change)."""
    d = Args()
    p.add_argument(
        "--data", required=True, help="dataset folder (fleetmind rca generate --out DIR)"
    )
    p.add_argument(
        "--epochs", type=int, default=d.epochs, help=f"maximum epochs (default {d.epochs})"
    )
    p.add_argument("--seed", type=argtypes.seed, default=d.seed, help=f"seed (default {d.seed})")
    p.add_argument(
        "--out", default=d.out, help=f"checkpoints and artifact folder (default {d.out})"
    )
    p.add_argument("--batch-size", type=int, default=d.batch_size, help="graphs per batch")
    p.add_argument("--lr", type=float, default=d.lr, help="AdamW learning rate")
    p.add_argument("--weight-decay", type=float, default=d.weight_decay, help="AdamW weight decay")
    p.add_argument("--dropout", type=float, default=d.dropout, help="dropout between layers")
    p.add_argument("--hidden", type=int, default=d.hidden, help="hidden channels")
    p.add_argument("--heads", type=int, default=d.heads, help="attention heads")
    p.add_argument("--layers", type=int, default=d.layers, help="GATv2 layers (>= 2)")
    p.add_argument(
        "--patience", type=int, default=d.patience, help="early-stopping patience (epochs)"
    )
    p.add_argument(
        "--max-minutes", type=float, default=d.max_minutes, help="wall-clock cap of the fit loop"
    )
    p.add_argument("--max-train", type=int, default=d.max_train, help="cap training incidents")
    p.add_argument("--threads", type=int, default=d.threads, help="torch threads (default 1)")
    p.add_argument(
        "--accelerator",
        default=d.accelerator,
        help="Lightning accelerator: auto (GPU when visible, else CPU), cpu, gpu (default auto)",
    )
    p.add_argument(
        "--devices",
        default=d.devices,
        help="devices per node: auto, a count (2) or a list (0,1) (default auto)",
    )
    p.add_argument(
        "--strategy",
        default=d.strategy,
        help="Lightning strategy: auto, ddp, ddp_spawn, ... (CPU DDP uses gloo; default auto)",
    )
    p.add_argument(
        "--num-nodes", type=int, default=d.num_nodes, help="machines taking part (default 1)"
    )
    p.add_argument(
        "--shard-log",
        default=None,
        metavar="DIR",
        help="write each rank's training sample indices to DIR/rank<R>.json",
    )
    p.add_argument(
        "--no-register", action="store_true", help="log the model but do not register it"
    )
    p.add_argument("--tracking-uri", default=None, help="MLflow tracking URI")
    _add_feedback_arguments(p, d)
    p.add_argument(
        "--release",
        default=None,
        metavar="DIR",
        help="also copy the artifact to DIR and write its model card (e.g. models/rca)",
    )
    p.add_argument(
        "--neighbours",
        action="store_true",
        help="also read neighbour comparisons: per-edge caller/callee inputs, the propagation "
        "ranker's verdict and alert label values (XID codes)",
    )
    p.add_argument(
        "--thin-share",
        type=float,
        default=d.thin_share,
        help="also train on thinned copies (the root's alerts and 0-3 other alerting nodes) of "
        "this share of the training incidents, drawn with --seed (default 0: none)",
    )
    p.add_argument("--json", default=None, help="write run id, metrics and registry info here")


def _add_feedback_arguments(p: Any, d: Args) -> None:
    """The ``--feedback-*`` flags of ``fleetmind rca train`` (``d``: the defaults)."""
    p.add_argument(
        "--feedback-db",
        default=None,
        metavar="URL",
        help="the service's database URL: incidents engineers confirmed or corrected join training",
    )
    p.add_argument(
        "--feedback-weight",
        type=int,
        default=d.feedback_weight,
        help="copies of each feedback incident in the training split (default 1)",
    )
    p.add_argument(
        "--feedback-since",
        default=None,
        metavar="WHEN",
        help="only feedback given at or after WHEN (ISO 8601 date or date-time, UTC without an "
        "offset; default: all)",
    )
    p.add_argument(
        "--feedback-until",
        default=None,
        metavar="WHEN",
        help="only feedback given before WHEN, so that later feedback can test the model "
        "(rca evaluate --feedback-since WHEN; default: all)",
    )


def cli(args: Any) -> int:
    """Handler of ``fleetmind rca train``: prints the run id and metrics, optional ``--json``."""

    a = Args(
        data=args.data,
        epochs=args.epochs,
        seed=args.seed,
        out=args.out,
        batch_size=args.batch_size,
        lr=args.lr,
        weight_decay=args.weight_decay,
        dropout=args.dropout,
        hidden=args.hidden,
        heads=args.heads,
        layers=args.layers,
        patience=args.patience,
        max_minutes=args.max_minutes,
        max_train=args.max_train,
        threads=args.threads,
        register=not args.no_register,
        tracking_uri=args.tracking_uri,
        feedback_db=args.feedback_db,
        feedback_weight=args.feedback_weight,
        feedback_since=getattr(args, "feedback_since", None),
        feedback_until=getattr(args, "feedback_until", None),
        accelerator=args.accelerator,
        devices=args.devices,
        strategy=args.strategy,
        num_nodes=args.num_nodes,
        shard_log=args.shard_log,
        neighbours=getattr(args, "neighbours", False),
        thin_share=getattr(args, "thin_share", 0.0),
    )
    res = run(a)
    if res.get("rank", 0) != 0:  # other DDP ranks: rank zero reports
        return 0
    if args.release:
        release(res, args.release, command=_regenerate_command(args))
        res["release"] = str(args.release)
    print(f"run {res['run_id']} ({res['run_name']}) at {res['tracking_uri']}")
    print(f"{'split':<12}{'n':>6}{'AC@1':>8}{'AC@3':>8}{'AC@5':>8}{'MRR':>8}")
    for split, m in res["metrics"].items():
        if m.get("n"):
            print(
                f"{split:<12}{m['n']:>6}{m['ac@1']:>8.3f}{m['ac@3']:>8.3f}{m['ac@5']:>8.3f}{m['mrr']:>8.3f}"
            )
    fit = res.get("feedback", {}).get("fit", {})
    if fit.get("n"):
        print(
            f"feedback (training fit, not a test): AC@1 {fit['ac@1']:.3f}, MRR {fit['mrr']:.3f} "
            f"on the {fit['n']} feedback incidents it trained on"
        )
    cal_line = calibration_line(res)
    if cal_line:
        print(cal_line)
    if "version" in res:
        print(promotion_line(res))
    print(f"artifact {res['artifact']}")
    write_json(args.json, res)
    return 0


def promotion_line(res: dict[str, Any]) -> str:
    """The line ``rca train`` prints about the registered version: both validation AC@1 scores
    (as the registry stores and compares them; 3 decimals, 6 where 3 would hide a difference)
    and what became of the champion alias (``res``: the registry keys of
    :func:`fleetmind.training.tracking.log_pyfunc_model`)."""
    head = f"registered {res['registered_model']} version {res['version']}"
    mine, theirs, prev = res["score"], res.get("champion_score"), res.get("previous_champion")
    close = theirs is not None and mine != theirs and f"{mine:.3f}" == f"{theirs:.3f}"
    digits = 6 if close else 3
    ours = f"val AC@1 {mine:.{digits}f}"
    score = "none" if theirs is None else f"{theirs:.{digits}f}"
    if res.get("champion_refused"):  # the reason first, then the scores that did not compare
        return (
            f"{head} ({res['champion_refused']})\n  {ours} (this version); {score} (champion "
            f"version {prev}): not compared"
        )
    if prev is None:
        return f"{head} ({ours}; no champion before: champion now)"
    champ = f"champion version {prev}'s {score}"
    if res["champion"]:
        return f"{head} ({ours} beats {champ}: champion now)"
    if mine == theirs:
        return f"{head} ({ours} equals {champ}; tie: champion kept)"
    return f"{head} ({ours}, {champ}: champion stays {prev})"


def _regenerate_command(args: Any) -> str:
    """The model card's "Regenerate" command: ``fleetmind rca train`` and :func:`_argv_tail`,
    quoted for a POSIX shell (``shlex.join``: a ``--data`` folder with a space or a quote reruns
    as it is)."""
    words = [w for item in _argv_tail(args) for w in item.split(" ", 1)]  # flag, value
    return shlex.join(["fleetmind", "rca", "train", *words])


def _argv_tail(args: Any) -> list[str]:
    """The ``fleetmind rca train`` flags that shape the model, as given (the model card's
    "Regenerate" command): ``"<flag> <value>"`` or ``"<flag>"`` per item, unquoted. Where the run
    went (``--out``, ``--tracking-uri``, ``--json``) and how many threads it used are left out; a
    feedback database URL is shown without its password."""
    out = [f"--data {args.data}", f"--epochs {args.epochs}", f"--seed {args.seed}"]
    d = Args()
    for flag, name in (
        ("--batch-size", "batch_size"),
        ("--lr", "lr"),
        ("--weight-decay", "weight_decay"),
        ("--dropout", "dropout"),
        ("--hidden", "hidden"),
        ("--heads", "heads"),
        ("--layers", "layers"),
        ("--patience", "patience"),
        ("--max-train", "max_train"),
        ("--max-minutes", "max_minutes"),
        ("--thin-share", "thin_share"),
        ("--feedback-weight", "feedback_weight"),
        ("--accelerator", "accelerator"),
        ("--devices", "devices"),
        ("--strategy", "strategy"),
        ("--num-nodes", "num_nodes"),
    ):
        if getattr(args, name, getattr(d, name)) != getattr(d, name):
            out.append(f"{flag} {getattr(args, name)}")
    if getattr(args, "feedback_db", None):
        out.append(f"--feedback-db {safe_url(args.feedback_db)}")
        for flag, name in (
            ("--feedback-since", "feedback_since"),
            ("--feedback-until", "feedback_until"),
        ):
            if getattr(args, name, None) is not None:
                out.append(f"{flag} {getattr(args, name)}")
    if getattr(args, "neighbours", False):
        out.append("--neighbours")
    if getattr(args, "release", None) is not None:  # the CLI's; :class:`Args` has none
        out.append(f"--release {args.release}")
    return out


def _inputs_text(cfg: dict[str, Any]) -> str:
    """The model card's words for what a model reads: base alert features, plus neighbour inputs."""
    version = f"feature version {cfg['feature_version']}, `rca/features/`"
    if not cfg.get("neighbours"):
        return f" as attention edge features; {cfg['in_dim']} per-node alert features ({version})"
    base = cfg["in_dim"] - NUM_NODE_EXTRA
    return (
        f" plus a projection of each dependency edge's caller/callee comparison ({NUM_EDGE_FEATURES} columns)"
        f" as attention edge features; {cfg['in_dim']} per-node inputs: {base} alert features"
        f" ({version}) and {NUM_NODE_EXTRA} neighbour inputs (the propagation ranker's tier, score and"
        " rank; XID and link label counts; `rca/features/neighbours.py`)"
    )


def _calibration_text(meta: dict[str, Any]) -> str:
    """The model card's paragraph on the score temperature stored in ``config.json``."""
    cal = meta.get("calibration")
    if not cal:
        why = meta.get("calibration_skipped") or "no temperature stored"
        return f"**Calibration.** None: scores are the raw softmax (T = 1); {why}."
    ece = "; ".join(
        f"`{s}` {e['uncalibrated']:.3f} -> {e['calibrated']:.3f} ({e['n']} incidents)"
        for s, e in cal["ece"].items()
    )
    return (
        f"**Calibration.** Temperature {cal['temperature']:.4f} fitted on {cal['fitted_on']['n']} "
        f"validation incidents (`rca train`, as `rca calibrate`); top-score expected calibration "
        f"error uncalibrated -> calibrated: {ece}. The validation figure is in-sample (that split "
        "also chose the checkpoint)."
    )


def release(res: dict[str, Any], dest: str | Path, command: str) -> Path:
    """Copy the run's artifact to ``dest`` (e.g. ``models/rca``) with ``MODEL_CARD.md``, all three
    files at once or none (:func:`fleetmind.folders.write_folder_whole`: a failed write leaves the
    earlier release as it was)."""
    dest = Path(dest)
    src = Path(res["artifact"])
    meta = json.loads((src / "config.json").read_text())
    rows = "\n".join(
        f"| {split} | {m['n']} | {m['ac@1']:.3f} | {m['ac@3']:.3f} | {m['ac@5']:.3f} | {m['mrr']:.3f} |"
        for split, m in res["metrics"].items()
        if m.get("n")
    )
    cfg = meta["model"]
    d = res["data"]
    tests = "".join(
        f", {v} `{k[2:]}` incidents"
        for k, v in d.items()
        if k.startswith("n_") and k not in ("n_train", "n_val", "n_thinned")
    )
    thinned = (
        f" plus {d['n_thinned']} thinned copies of training incidents (`--thin-share`,"
        " `rca/thinning.py`)"
        if d.get("n_thinned")
        else ""
    )
    card = f"""# FleetMind RCA model card: GAT root-cause ranker (`{meta["version"]}`)

**What it does.** Ranks every node of a dependency graph (services, pods, hosts, GPUs, links, clusters,
shared infra) as the root cause of an alert storm (Alertmanager v4 alerts) and predicts the fault
type; each cause comes with the highest-attention propagation path to an alerting node. Loaded by
`fleetmind.rca.gat_analyzer.GATAnalyzer.load(None)` (the service, `fleetmind rca evaluate`, the demo).

**Model.** {cfg["layers"]} residual GATv2 layers (Brody et al., ICLR 2022), hidden {cfg["hidden"]},
{cfg["heads"]} heads, edge-type embeddings (both directions of each of the 6 edge kinds + self loop,
dim {cfg["edge_dim"]}){_inputs_text(cfg)}; listwise softmax cross-entropy over each
graph's nodes plus a fault-type head ({len(cfg["fault_types"])} classes). Weights: `model.pt`
(state dict), hyper-parameters and metrics: `config.json`.

**Data.** Simulated incidents from `data/rca_gen` read from `{meta["data"].get("dir")}`:
{d.get("n_train")} training incidents on {d.get("train_graphs")} topologies{thinned}, {d.get("n_val")} validation
incidents on {d.get("val_graphs")} other topologies{tests}. Validation and test splits use topologies
that no training incident uses; `test_large` uses graphs with more clusters than any training graph.
Candidate subgraph radius {d.get("crop_hops")} hop(s); {d.get("train_root_outside_crop")} training
incidents had their root outside it and were dropped.

**Regenerate.**

```
{command}
```

(MLflow run `{res["run_id"]}`, `{res["run_name"]}`; {res["epochs"]} epochs, fit {res["fit_seconds"]} s.)

**Metrics** (ranks over all nodes of each graph; AC@k = share of incidents whose root is in the top k).

| split | incidents | AC@1 | AC@3 | AC@5 | MRR |
| --- | --- | --- | --- | --- | --- |
{rows}

{_calibration_text(meta)}

**Limits.** Trained on simulated data only: alert names outside the simulator's catalog fall into an
`other` bucket plus keyword groups; real fleets (e.g. PetShop) differ in graph shape and alert timing.
Baseline comparisons and speed figures: `docs/gat.md`, `benchmarks/results/rca/gat_*.json`.
"""
    files = {
        "model.pt": src / "model.pt",
        "config.json": src / "config.json",
        "MODEL_CARD.md": card,
    }
    write_folder_whole(dest, files)
    return dest
