"""MLflow tracking shared by both trainers: the RCA GAT (:mod:`fleetmind.training.rca_train`) and
the placement PPO recipes (:mod:`fleetmind.training.recipes.tracking`).

* :func:`tracking_uri`: where runs are tracked (an explicit URI, else ``MLFLOW_TRACKING_URI``, else
  the embedded :data:`DEFAULT_TRACKING_URI`);
* :func:`ready_store`: create an embedded SQLite store under a file lock (:func:`store_lock`), in a
  temporary file renamed into place once made, so that runs started together on a new store do not
  race to create it and a run stopped meanwhile leaves no half-made store (and keep MLflow from
  printing a tracking URI's password: :func:`hide_url_credentials`);
* :func:`tracking_guard`: bounded retries while a run trains and logs, and one line naming the
  local run folder when the store fails mid-run; :func:`fluent_run` and
  :func:`lightning_mlflow_logger` then end the run in one try (:func:`single_try`), not after a
  second round of retries;
* :func:`pip_requirements`: the pinned requirements a logged pyfunc model declares (pinned to the
  installed versions without a local label such as ``+cpu``; no slow inference of requirements);
* :func:`promote_if_better`: tag a registered model version with its score (and what it was
  measured on, an :class:`EvalSet`) and move the :data:`CHAMPION` alias to it when it beats the
  champion's on the same evaluation set (under :func:`store_lock`, and checked again after);
* :func:`log_pyfunc_model`: log a model to the active run as an MLflow pyfunc, then register and
  promote it.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple
from urllib.parse import unquote, urlparse

from fleetmind.data.mlflow_store import bounded_requests, reason, safe_uri
from fleetmind.errors import ConfigError, FleetMindError, NotAvailableError

DEFAULT_TRACKING_URI = "sqlite:///mlflow.db"
"""The embedded SQLite store, in the current folder."""
CHAMPION = "champion"
"""The registry alias of the best version of a registered model."""
EVAL_SET_TAG = "eval_set"
"""Model version tag: the fingerprint of the evaluation set its score was measured on."""
EVAL_N_TAG = "eval_n"
"""Model version tag: how many items (incidents) that evaluation set holds."""
MIN_EVAL_N = 30
"""The fewest items a score's evaluation set may hold to displace a champion that records no
evaluation set (one registered before versions recorded theirs): on fewer, AC@1 moves by 1/30 or
more per incident and says little about the model."""


@dataclass(frozen=True)
class EvalSet:
    """What a score was measured on: two scores compare only when their fingerprints are equal.

    Attributes:
        fingerprint: a digest of the evaluation items (e.g. SHA-256 hex of the validation
            incidents and their graphs); equal for two trainings on the same data.
        n: how many items it holds (incidents).
        unit: what one item is, as the refusal messages name it (``incidents`` for the RCA
            validation set, ``episodes`` for a placement evaluation: one trace and workload seed).
    """

    fingerprint: str
    n: int
    unit: str = "incidents"


class Promotion(NamedTuple):
    """The outcome of :func:`promote_if_better`.

    Attributes:
        promoted: whether :data:`CHAMPION` moved to the new version.
        previous: the champion's version before the call (``None``: there was none).
        refused: why the scores were not compared, on one line naming how to promote the version
            by hand (``None`` when they were, or when there was no champion).
    """

    promoted: bool
    previous: str | None
    refused: str | None = None


def tracking_uri(explicit: str | None = None) -> str:
    """The MLflow tracking URI to use: explicit, else ``MLFLOW_TRACKING_URI``, else the embedded one."""
    return explicit or os.environ.get("MLFLOW_TRACKING_URI") or DEFAULT_TRACKING_URI


def hide_url_credentials(uri: str) -> None:
    """When ``uri`` carries ``user:password@``, stop MLflow printing it: at the end of a run on a
    tracking server MLflow writes ``View run <name> at: <tracking URI>/#/...`` to stdout, the
    password included (``_log_url`` in ``mlflow/tracking/_tracking_service/client.py``), unless
    ``MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT`` is true (``mlflow/environment_variables.py``).
    That variable is set to ``true`` for this process; the credentials stay in the URI, where
    MLflow's HTTP client takes them for basic authentication. The commands print the run's
    location themselves with the password masked (:func:`fleetmind.data.mlflow_store.safe_uri`).
    """
    parsed = urlparse(uri)
    if parsed.scheme and "@" in parsed.netloc:
        os.environ["MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT"] = "true"


def tracking_failure(err: BaseException) -> bool:
    """Whether ``err``, or an error in its chain (``__cause__`` / ``__context__``), comes from
    the tracking store: an :class:`mlflow.exceptions.MlflowException` (MLflow wraps a server's
    connection errors in it: ``API request to ... failed with exception ...``) or a
    ``requests`` / ``urllib3`` error that reached the caller unwrapped."""
    return _store_error(err) is not None


def _store_error(err: BaseException) -> BaseException | None:
    """The first error of :func:`tracking_failure`'s kinds in ``err``'s chain, else ``None``."""
    from mlflow.exceptions import MlflowException
    from requests.exceptions import RequestException
    from urllib3.exceptions import HTTPError

    seen: set[int] = set()
    cur: BaseException | None = err
    while cur is not None and id(cur) not in seen:
        if isinstance(cur, (MlflowException, RequestException, HTTPError)):
            return cur
        seen.add(id(cur))
        cur = cur.__cause__ or (None if cur.__suppress_context__ else cur.__context__)
    return None


RUN_PHASE_REQUESTS: dict[str, str] = {
    "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "5",
    "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR": "2",
    "MLFLOW_HTTP_REQUEST_TIMEOUT": "60",
}
"""MLflow's HTTP settings while a run trains and logs (:func:`tracking_guard`), each applied only
where the environment sets nothing else: 5 retries with urllib3's backoff (0, 4, 8, 16, 32 s, plus
MLflow's jitter) ride out about a minute of refused connections, 5xx or 429 answers (MLflow's own default, 7
retries, about four minutes per call). Once a call has failed after them, the run is ended under
:data:`AFTER_FAILURE_REQUESTS` (:func:`fluent_run`, :func:`lightning_mlflow_logger`), so the
command stops about a minute after the store went away, not two."""

AFTER_FAILURE_REQUESTS: dict[str, str] = {
    "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "0",
    "MLFLOW_HTTP_REQUEST_TIMEOUT": "10",
}
"""MLflow's HTTP settings for ending a run once the store failed during it (a request already
spent :data:`RUN_PHASE_REQUESTS`' retries): one try of at most 10 s, whatever the environment sets
(MLflow reads ``MLFLOW_HTTP_REQUEST_*`` at each request: ``mlflow/utils/rest_utils.py``
``http_request``). A run that try cannot end stays ``RUNNING`` in the store."""


@contextmanager
def single_try() -> Iterator[None]:
    """Within the block, MLflow's HTTP requests follow :data:`AFTER_FAILURE_REQUESTS` (one try,
    10 s at most); the environment is given back as it was after it."""
    saved = {k: os.environ.get(k) for k in AFTER_FAILURE_REQUESTS}
    os.environ.update(AFTER_FAILURE_REQUESTS)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _failing_store() -> bool:
    """Whether the exception being handled (``sys.exc_info``) is the store's
    (:func:`tracking_failure`)."""
    import sys

    err = sys.exc_info()[1]
    return err is not None and tracking_failure(err)


@contextmanager
def fluent_run(**start_run: Any) -> Iterator[Any]:
    """``mlflow.start_run(**start_run)`` as a ``with`` block, ended as MLflow's own ``ActiveRun``
    ends it (``FINISHED``; ``FAILED`` on an error, ``mlflow/tracking/fluent.py``), except when the
    block fails on the store (:func:`tracking_failure`): then the run is ended ``FAILED`` in
    :func:`single_try`, and an error of that last request is dropped so that the store's first
    error goes on (to :func:`tracking_guard`). Yields the ``ActiveRun``."""
    import mlflow

    run = mlflow.start_run(**start_run)

    def ours() -> bool:  # still the active run (not ended inside the block)
        active = mlflow.active_run()
        return active is not None and active.info.run_id == run.info.run_id

    try:
        yield run
    except BaseException:
        if ours():
            if _failing_store():
                with single_try(), suppress(Exception):
                    mlflow.end_run("FAILED")  # pops the run first: nothing ends it again at exit
            else:
                mlflow.end_run("FAILED")
        raise
    if ours():
        mlflow.end_run("FINISHED")


def lightning_mlflow_logger(**kwargs: Any) -> Any:
    """Lightning's ``MLFlowLogger(**kwargs)`` whose ``finalize("failed")`` (Lightning's
    ``_interrupt`` calls it while it handles the error that stopped the fit:
    ``pytorch_lightning/trainer/call.py``) runs in :func:`single_try`, its own errors dropped, when
    that error is the store's: it would otherwise ask the store that just failed for the run and
    to end it, each with the full :data:`RUN_PHASE_REQUESTS` retries."""
    return _lightning_logger_class()(**kwargs)


def _lightning_logger_class() -> type:
    """The ``MLFlowLogger`` subclass of :func:`lightning_mlflow_logger`, made on first use (so that
    this module does not import Lightning) and kept as this module's ``TrackedMLFlowLogger``
    (:func:`__getattr__`), where pickle finds it (``ddp_spawn`` pickles the trainer)."""
    cls = globals().get("TrackedMLFlowLogger")
    if cls is not None:
        return cls
    from pytorch_lightning.loggers import MLFlowLogger

    class TrackedMLFlowLogger(MLFlowLogger):  # type: ignore[misc]
        """``MLFlowLogger`` that ends a run in one try after the store failed."""

        def finalize(self, status: str = "success") -> None:
            if status == "failed" and _failing_store():
                with single_try(), suppress(Exception):
                    super().finalize(status)
                return
            super().finalize(status)

    TrackedMLFlowLogger.__module__ = __name__
    TrackedMLFlowLogger.__qualname__ = "TrackedMLFlowLogger"
    globals()["TrackedMLFlowLogger"] = TrackedMLFlowLogger
    return TrackedMLFlowLogger


def __getattr__(name: str) -> Any:
    """``TrackedMLFlowLogger``, made on first use (:func:`_lightning_logger_class`)."""
    if name == "TrackedMLFlowLogger":
        return _lightning_logger_class()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


@contextmanager
def _run_phase_requests() -> Iterator[None]:
    """Within the block, :data:`RUN_PHASE_REQUESTS` where the environment sets nothing else."""
    added = [k for k in RUN_PHASE_REQUESTS if k not in os.environ]
    for k in added:
        os.environ[k] = RUN_PHASE_REQUESTS[k]
    try:
        yield
    finally:
        for k in added:
            os.environ.pop(k, None)


@contextmanager
def tracking_guard(uri: str, run_dir: Path) -> Iterator[None]:
    """The part of a training command that talks to the tracking store at ``uri`` while it
    trains and logs: MLflow's HTTP retries bounded to about a minute of outage
    (:data:`RUN_PHASE_REQUESTS`: a server that goes down mid-run is an error after that minute,
    not after 7 tries of up to 120 s each per call, while a blip of a few seconds or a rate limit
    does not end a long run; the run inside is ended in one try, :func:`fluent_run` and
    :func:`lightning_mlflow_logger`; the start-up check, :func:`ready_store`, keeps the tighter
    :func:`fleetmind.data.mlflow_store.bounded_requests`), and an error of the store
    (:func:`tracking_failure`) raised as one line naming ``run_dir``, the local folder that keeps
    what the run wrote (its checkpoints, and its ``model/`` once written).

    Raises:
        fleetmind.errors.NotAvailableError: the store failed; the CLI prints the line, exit 2.
    """
    try:
        with _run_phase_requests():
            yield
    except Exception as err:
        cause = None if isinstance(err, FleetMindError) else _store_error(err)
        if cause is None:  # not the store's, or already one line (a FleetMindError)
            raise
        model = run_dir / "model"
        kept = (
            f"the trained model is in {model}"
            if model.is_dir()
            else f"what the run wrote is in {run_dir}"
            if run_dir.exists()
            else "nothing was written locally"
        )
        raise NotAvailableError(
            f"MLflow tracking store {safe_uri(uri)} failed during the run: {reason(cause)}; the run"
            f" is not logged in full ({kept})"
        ) from None


def ready_store(
    uri: str, flag: str | None = "--tracking-uri", experiment: str | None = None
) -> None:
    """Make sure the tracking store at ``uri`` answers, an SQLite store's tables created and
    migrated; called before a command does any work it would track.

    MLflow creates an SQLite store's tables on first use; two processes that first use a new
    store at the same moment (two training runs started together, the default
    ``sqlite:///mlflow.db``) both try, and the slower one fails with ``table ... already
    exists``. Here the first use happens under an exclusive lock on ``<db>.lock`` beside the
    database (:func:`store_lock`), so the others wait and then find the tables made. A new store is
    made in a temporary file and renamed into place once complete (:func:`_create_sqlite_store`),
    so a run stopped while MLflow migrates it leaves none; a data-less one that an older release
    left half-made that way is refused, named, and left for the user to delete.

    Every store is asked for one experiment and one registered model, with MLflow's HTTP retries
    bounded (:func:`fleetmind.data.mlflow_store.bounded_requests`), so that a server that is down,
    a file that is not a database or a URI scheme MLflow does not take stops the command at once
    instead of after minutes of retries or a whole training run. Where the store keeps artifacts
    in a local folder (the embedded store's default: ``./mlruns`` beside where it was created), the
    folder above its Default experiment's is checked too (:func:`_artifact_root_problem`): a file
    in its place, or a folder the command may not write, used to fail only when the trained model
    was logged. When ``experiment`` is given and the store holds it deleted (deleted in the MLflow
    UI or by ``mlflow experiments delete``, not yet removed for good), the run could neither use
    nor re-create it (MLflow refuses to set a deleted experiment active, and its name is still
    taken): that stops the command here too, naming how to restore or purge it.

    Args:
        uri: the tracking URI.
        flag: the calling command's option that sets the URI, named in the error beside
            ``MLFLOW_TRACKING_URI`` (``None``: the command has none, e.g. ``fleetmind demo``).
        experiment: the MLflow experiment the command will log its run to (``None``: not checked).

    Raises:
        fleetmind.errors.ConfigError: the store cannot be used, or ``experiment`` is deleted on it;
            one line naming it and why.
    """
    import mlflow

    hide_url_credentials(uri)  # every command that tracks a run calls this first

    deleted: list[str] = []  # the id of ``experiment`` when the store holds it deleted

    def probe() -> str | None:
        client = mlflow.MlflowClient(tracking_uri=uri, registry_uri=uri)
        client.search_experiments(max_results=1)
        client.search_registered_models(max_results=1)
        if experiment is not None:
            exp = client.get_experiment_by_name(experiment)  # None: not there yet (runs create it)
            if exp is not None and exp.lifecycle_stage == "deleted":
                deleted.append(str(exp.experiment_id))
        try:  # MLflow's Default experiment (id 0): its folder's parent holds every new experiment's
            return client.get_experiment("0").artifact_location
        except Exception:  # deleted for good, or a store without it: nothing to check
            return None

    where = "MLFLOW_TRACKING_URI" + (f" or {flag}" if flag else "")
    db = _sqlite_db(uri)
    try:
        with bounded_requests(), store_lock(uri):
            if db is not None:
                _create_sqlite_store(db, uri)  # or refuse one whose creation was cut off
            location = probe()
    except OSError:
        raise  # a path the store needs (the CLI names it)
    except Exception as err:  # MLflow, SQLAlchemy and driver errors alike: the store is unusable
        why = str(err) if isinstance(err, FleetMindError) else reason(err)
        if db is not None and not isinstance(err, FleetMindError):
            why = _interrupted_store(db, why) or why
        raise ConfigError(
            f"MLflow tracking store {safe_uri(uri)} cannot be used: {why} (set {where}; the "
            f"default is {DEFAULT_TRACKING_URI})"
        ) from None
    if deleted:
        raise ConfigError(deleted_experiment_message(uri, str(experiment), deleted[0]))
    problem = _artifact_root_problem(location)
    if problem is not None:
        raise ConfigError(
            f"MLflow tracking store {safe_uri(uri)} cannot be used: {problem}; the models a run "
            f"logs go there (set {where}; the default is {DEFAULT_TRACKING_URI})"
        )


def _sqlite_db(uri: str) -> Path | None:
    """The database file of an SQLite tracking URI (``sqlite:///mlflow.db`` -> ``mlflow.db``, the
    path SQLAlchemy opens, without the URI's query); ``None`` for any other store or an in-memory
    database."""
    if not uri.startswith("sqlite:"):
        return None
    from sqlalchemy.engine import make_url

    try:
        database = make_url(uri).database
    except Exception:  # not a URL SQLAlchemy takes: MLflow says so when the store is asked
        return None
    if not database or database == ":memory:" or database.startswith("file:"):
        return None
    return Path(database)


@contextmanager
def store_lock(uri: str) -> Iterator[None]:
    """Within the block, an exclusive lock on ``<db>.lock`` beside an SQLite tracking store's
    database ``<db>`` (waiting for whichever process holds it); no lock for any other store.

    :func:`ready_store` creates a new store under it and :func:`promote_if_better` reads and
    moves the champion alias under it, so that two processes on one store take turns."""
    db = _sqlite_db(uri)
    if db is None:
        yield
        return
    import fcntl

    db.parent.mkdir(parents=True, exist_ok=True)
    with open(db.with_name(db.name + ".lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


CREATING_SUFFIX = ".creating-"
"""A new SQLite store is made in ``<db>.creating-<pid>`` beside ``<db>`` and renamed into place."""


def _create_sqlite_store(db: Path, uri: str) -> None:
    """Create the SQLite tracking store ``db`` (of ``uri``) when there is no file (nor link) of
    that name, atomically; refuse one whose creation an older release left half-made. An empty
    file or a link is left to MLflow, which makes the store in place as before (a bind-mounted
    file cannot be renamed onto, a link would be replaced). Called under :func:`store_lock`.

    MLflow creates a new store's tables and then runs each of its schema migrations in turn
    (``mlflow/store/db/utils.py`` ``_initialize_tables``: ``InitialBase.metadata.create_all``,
    then ``_upgrade_db``), which SQLite does not make one transaction: a process stopped half-way
    (Ctrl-C, SIGTERM, kill -9) left a store that every later use fails on (``table ... already
    exists``). Here the store is made in a temporary file beside ``db`` and renamed onto it
    (``os.replace``) only once every migration ran; what a killed creation left behind is removed
    first (no one else is creating: the lock is held).

    Raises:
        fleetmind.errors.ConfigError: ``db`` is such a half-made store (:func:`_interrupted_store`).
    """
    _remove_leftovers(db)
    if db.exists() or db.is_symlink():
        # a store (or what MLflow will say is none); an empty file or a link (a bind mount, a
        # file the operator made with its own mode) is made in place, as MLflow does: renaming
        # onto a mount point fails and onto a link replaces the link
        note = _interrupted_store(db) if db.is_file() and db.stat().st_size > 0 else None
        if note is not None:
            raise ConfigError(note)
        return
    try:  # MLflow's own creation (private names: a release without them makes it in place)
        from mlflow.store.db.utils import _initialize_tables, create_sqlalchemy_engine
    except ImportError:
        return
    from sqlalchemy.engine import make_url

    tmp = db.with_name(f"{db.name}{CREATING_SUFFIX}{os.getpid()}")
    engine = create_sqlalchemy_engine(
        make_url(uri).set(database=str(tmp)).render_as_string(hide_password=False)
    )
    try:
        _initialize_tables(engine)
    except BaseException:
        engine.dispose()
        _remove_leftovers(db)
        raise
    engine.dispose()
    os.replace(tmp, db)


def _remove_leftovers(db: Path) -> None:
    """Remove the temporary files (and SQLite journals) of a creation of ``db`` that was cut off."""
    import glob

    for left in db.parent.glob(glob.escape(db.name + CREATING_SUFFIX) + "*"):
        with suppress(FileNotFoundError):
            left.unlink()


def _interrupted_store(db: Path, error: str | None = None) -> str | None:
    """One line saying that the SQLite store ``db`` is one whose creation was cut off, or ``None``.

    Such a store holds some of MLflow's tables, no data (no run, no registered model, no
    experiment but MLflow's Default) and either no schema revision (``alembic_version`` missing or
    empty), a table left by a migration that did not finish (``_alembic_tmp_*``), or it fails with
    ``table ... already exists`` or ``duplicate column`` (``error``: why MLflow refused it); one
    at an older schema revision and no data is named likewise. Older releases made the store
    in place, so a run stopped while it was made left one; it is the user's file, so it is named,
    not deleted. A store that holds data is never one (MLflow's own error stands)."""
    import sqlite3

    try:
        con = sqlite3.connect(db.resolve().as_uri() + "?mode=ro", uri=True)
    except (sqlite3.Error, OSError):
        return None
    try:
        tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        if "experiments" not in tables:
            return None  # not MLflow's (or nothing yet): MLflow says what it is
        # any row but MLflow's own seed (the Default experiment and workspace, the schema
        # revision) is data: runs, traces, logged models, registered models, tags, ...
        seed = {"experiments": "experiment_id != 0", "workspaces": "name != 'default'"}
        queries = [
            f'SELECT COUNT(*) FROM "{t}"' + (f" WHERE {seed[t]}" if t in seed else "")
            for t in sorted(tables)
            if t != "alembic_version" and not t.startswith("sqlite_")
        ]
        if any(con.execute(q).fetchone()[0] for q in queries):
            return None  # it holds data: not a store whose creation was cut off
        row = None
        if "alembic_version" in tables:
            row = con.execute("SELECT version_num FROM alembic_version").fetchone()
        cut = (
            row is None
            or any(t.startswith("_alembic_tmp_") for t in tables)
            or any(s in (error or "") for s in ("already exists", "duplicate column"))
        )
    except sqlite3.Error:
        return None
    finally:
        con.close()
    empty = "it holds no runs, experiments or models: delete it and run again"
    if cut:
        return (
            f"{db} is a store whose creation was interrupted (a run was stopped while MLflow made "
            f"its tables); {empty}"
        )
    return None  # an older schema says so itself, with MLflow's way out (`mlflow db upgrade`)


def deleted_experiment_message(uri: str, experiment: str, experiment_id: str) -> str:
    """One line: ``experiment`` (id ``experiment_id``) is deleted on the store at ``uri``, and
    the two ways out, as MLflow's CLI spells them: ``mlflow experiments restore
    --experiment-id N`` (run with ``MLFLOW_TRACKING_URI`` set to the store) brings it back with
    its runs; ``mlflow gc --experiment-ids N`` (run against the store's backend database, e.g.
    ``--backend-store-uri``) removes it for good, so that the next run creates it anew."""
    backend = f" --backend-store-uri {safe_uri(uri)}" if uri.startswith("sqlite:") else ""
    return (
        f"MLflow experiment {experiment!r} (id {experiment_id}) is deleted on the tracking store "
        f"{safe_uri(uri)}: restore it (`mlflow experiments restore --experiment-id "
        f"{experiment_id}` with MLFLOW_TRACKING_URI set to the store) or delete it for good "
        f"(`mlflow gc{backend} --experiment-ids {experiment_id}`, run against the store's "
        "backend database) so that the next run creates it anew"
    )


def _artifact_root_problem(location: str | None) -> str | None:
    """Why the local folder above the artifact ``location`` of a store's Default experiment (where
    MLflow puts each new experiment's artifacts: ``<root>/<experiment id>``) cannot take them, on
    one line; ``None`` when it can, when it does not exist yet but its nearest existing parent is
    a writable folder (MLflow creates it), or when the artifacts are not in a local folder
    (``mlflow-artifacts:/``, ``s3://``...)."""
    if not location:
        return None
    parsed = urlparse(location)
    if parsed.scheme == "file":
        path = Path(unquote(parsed.path))
    elif parsed.scheme and len(parsed.scheme) > 1:  # a remote store (a drive letter is local)
        return None
    else:
        path = Path(location)
    root = path.parent
    probe = root
    while not probe.exists() and probe.parent != probe:
        probe = probe.parent
    if not probe.is_dir():
        if probe == root:
            return f"its artifact folder {root} is a file"
        return f"its artifact folder {root} cannot be made: {probe} is a file"
    if not os.access(probe, os.W_OK | os.X_OK):
        return f"its artifact folder {probe} is not writable"
    return None


def pip_requirements(packages: Sequence[str]) -> list[str]:
    """``packages`` pinned to their installed versions (``name==version``; a package that is not
    installed is listed unpinned), without a local version label: ``torch==2.13.0``, not
    ``torch==2.13.0+cpu``, which no index but the build's own serves (as MLflow's inferred
    requirements, ``mlflow.utils.requirements_utils._strip_local_version_label``)."""
    from importlib.metadata import version

    out = []
    for pkg in packages:
        try:
            out.append(f"{pkg}=={strip_local_version(version(pkg))}")
        except Exception:  # pragma: no cover
            out.append(pkg)
    return out


def strip_local_version(version: str) -> str:
    """``version`` without its PEP 440 local label (``2.13.0+cpu`` -> ``2.13.0``); a string that
    is no PEP 440 version is returned as it is."""
    from packaging.version import InvalidVersion, Version

    try:
        return Version(version).public
    except InvalidVersion:
        return version


def no_such_alias(err: BaseException) -> bool:
    """Whether an ``MlflowException`` of ``get_model_version_by_alias`` means that the model or
    the alias does not exist (MLflow's ``RESOURCE_DOES_NOT_EXIST``, or ``INVALID_PARAMETER_VALUE``
    for an alias no version holds), not that the store failed (a 503 after the retries, a
    refused connection), which must not be read as "no champion"."""
    code = getattr(err, "error_code", "")
    return code in ("RESOURCE_DOES_NOT_EXIST", "INVALID_PARAMETER_VALUE")


def promote_if_better(
    client: Any,
    name: str,
    version: str,
    *,
    tag: str,
    score: float,
    higher_is_better: bool,
    eval_set: EvalSet | None = None,
    untagged: str | None = None,
) -> Promotion:
    """Tag ``version`` of registered model ``name`` with ``tag`` = ``score`` (6 decimals) and move
    :data:`CHAMPION` to it if it beats the champion's ``tag``.

    A version beats the champion when its score is strictly better (a tie keeps the champion);
    the scores compare as stored, at 6 decimals, so that a retraining that reproduces the
    champion's score exactly (e.g. AC@1 = 1/12) ties with it. With no champion yet, or one without
    a readable tag, the new version becomes champion.

    With an ``eval_set``, the version is also tagged :data:`EVAL_SET_TAG` and :data:`EVAL_N_TAG`,
    and the scores are compared only when the champion's :data:`EVAL_SET_TAG` equals it: a score
    on another evaluation set does not compare, and the champion stays. A champion without that
    tag (registered before versions recorded it) is compared as before, but only by a score
    measured on at least :data:`MIN_EVAL_N` items, unless ``untagged`` is given: why the caller
    could not rebuild that champion's evaluation set (the placement rule,
    :func:`fleetmind.training.recipes.tracking.rebuild_champion_eval_set`); such a champion then
    stays, whatever the score. Without an ``eval_set`` the rule is the plain score comparison.

    Two processes promoting versions of one model at once take turns on an SQLite store
    (:func:`store_lock`, the lock :func:`ready_store` creates the store under). On any store
    (a tracking server has no such lock) the alias is read again after it is set: when another
    version holds it by then, the two are compared again, and the alias is moved back when this
    version is better (up to :data:`PROMOTION_TRIES` times), else this version is reported as not
    the champion, beside the version that holds it. So the result says what holds the alias.

    Returns:
        :class:`Promotion` ``(promoted, previous champion version or None, why not compared)``;
        when another process moved the alias meanwhile to a version as good, ``(False, that
        version, ...)``.
    """
    stored = f"{score:.6f}"
    client.set_model_version_tag(name, version, tag, stored)
    if eval_set is not None:
        client.set_model_version_tag(name, version, EVAL_SET_TAG, eval_set.fingerprint)
        client.set_model_version_tag(name, version, EVAL_N_TAG, str(eval_set.n))
    rule = _Rule(name, str(version), tag, float(stored), higher_is_better, eval_set, untagged)
    with store_lock(getattr(client, "_registry_uri", None) or ""):
        champ = _holder(client, name)
        outcome = rule.against(champ)
        for _ in range(PROMOTION_TRIES):
            if not outcome.promoted:
                return outcome
            client.set_registered_model_alias(name, CHAMPION, rule.version)
            holder = _holder(client, name)  # another process may have moved it since the read
            if holder is None or str(holder.version) == rule.version:
                return outcome
            again = rule.against(holder)
            outcome = Promotion(again.promoted, outcome.previous, again.refused)
            if not again.promoted:  # the version now holding it is as good: it stays champion
                return Promotion(False, str(holder.version), again.refused)
        return Promotion(False, str(holder.version))  # it kept moving: say who holds it last


PROMOTION_TRIES = 3
"""How many times :func:`promote_if_better` moves the alias back to a better version that another
process displaced meanwhile (a tracking server: no lock) before it reports the one holding it."""


def _holder(client: Any, name: str) -> Any:
    """The model version holding :data:`CHAMPION` of ``name``, or ``None`` when none does."""
    from mlflow.exceptions import MlflowException

    try:
        return client.get_model_version_by_alias(name, CHAMPION)
    except MlflowException as err:
        if not no_such_alias(err):
            raise  # the store failed: not a sign that there is no champion
        return None


@dataclass(frozen=True)
class _Rule:
    """The champion rule of :func:`promote_if_better` for one new version and its stored score."""

    name: str
    version: str
    tag: str
    mine: float  # the score as stored, at 6 decimals: the champion's was stored so too
    higher_is_better: bool
    eval_set: EvalSet | None
    untagged: str | None

    def against(self, champ: Any) -> Promotion:
        """Whether this version beats ``champ`` (a model version, or ``None``: no champion), as a
        :class:`Promotion` with ``champ`` as the previous champion."""
        if champ is None:
            return Promotion(True, None)
        prev = str(champ.version)
        if self.eval_set is not None:
            tags = dict(champ.tags or {})
            refused = _incomparable(
                self.name, self.version, self.tag, self.eval_set, prev, tags, self.untagged
            )
            if refused is not None:
                return Promotion(False, prev, refused)
        worst = float("-inf") if self.higher_is_better else float("inf")
        try:
            best = float((champ.tags or {}).get(self.tag, worst))
        except ValueError:
            best = worst
        mine = self.mine
        return Promotion(mine > best if self.higher_is_better else mine < best, prev)


def _incomparable(
    name: str,
    version: str,
    tag: str,
    eval_set: EvalSet,
    prev: str,
    champ_tags: dict[str, str],
    untagged: str | None = None,
) -> str | None:
    """Why ``version``'s score cannot be set against champion ``prev``'s (one line), or ``None``;
    ``untagged``: see :func:`promote_if_better`."""
    by_hand = (
        f"to promote it anyway: mlflow.MlflowClient().set_registered_model_alias("
        f"{name!r}, {CHAMPION!r}, {str(version)!r})"
    )
    theirs = champ_tags.get(EVAL_SET_TAG)
    if theirs is None and untagged is not None:
        return (
            f"champion stays version {prev}: it records no evaluation set to compare with and "
            f"{untagged}; {by_hand}"
        )
    if theirs is None:
        if eval_set.n < MIN_EVAL_N:
            return (
                f"champion stays version {prev}: this version's {tag} comes from {eval_set.n} "
                f"evaluation {eval_set.unit}, fewer than {MIN_EVAL_N}, and the champion records no "
                f"evaluation set to compare with; {by_hand}"
            )
        return None
    if theirs != eval_set.fingerprint:
        n = champ_tags.get(EVAL_N_TAG, "?")
        return (
            f"champion stays version {prev}: its {tag} was measured on another evaluation set "
            f"({n} {eval_set.unit}; this version's {eval_set.n}), so the scores do not compare;"
            f" {by_hand}"
        )
    return None


def _version_score(client: Any, name: str, version: str | None, tag: str) -> float | None:
    """Model version ``version``'s stored ``tag`` score (``None``: no version, or no readable
    tag)."""
    from mlflow.exceptions import MlflowException

    if version is None:
        return None
    try:
        return float(client.get_model_version(name, version).tags[tag])
    except (MlflowException, KeyError, TypeError, ValueError):
        return None


def _param_type(value: int | float | str | bool) -> str:
    """The MLflow parameter type of a default value (``bool`` before ``int``: it is one)."""
    for kind, name in ((bool, "boolean"), (int, "long"), (float, "double"), (str, "string")):
        if isinstance(value, kind):
            return name
    raise TypeError(f"no MLflow parameter type for {value!r}")


def log_pyfunc_model(
    entry: Path,
    artifacts: dict[str, str],
    packages: Sequence[str],
    registered_model: str | None,
    *,
    tag: str,
    score: float,
    higher_is_better: bool,
    params: dict[str, int | float | str | bool] | None = None,
    eval_set: EvalSet | None = None,
    untagged: str | None = None,
) -> dict[str, Any]:
    """Log the pyfunc built by the models-from-code file ``entry`` (see
    :mod:`fleetmind.training.pyfunc_entries`; with ``artifacts``, requiring ``packages`` pinned) as
    ``model`` in the active MLflow run; with a ``registered_model`` name, register it and
    :func:`promote_if_better`.

    ``params`` (name to default) become the signature's parameter schema, so that
    ``predict(..., params={...})`` and the ``params`` of a scoring server's ``/invocations`` body
    reach the wrapper (MLflow drops, with a warning, every parameter a signature does not declare).
    The inputs are left without a schema: the wrappers take free-form JSON rows. ``eval_set``
    (what ``score`` was measured on) and ``untagged`` go to :func:`promote_if_better`.

    Returns:
        ``{"model_uri"}``, plus ``registered_model``, ``version``, ``champion`` (moved to this
        version?), ``previous_champion``, ``score`` (this version's, as stored: 6 decimals) and
        ``champion_score`` (the previous champion's stored ``tag``, ``None`` without one or
        champion) when registered, and ``champion_refused`` (one line: why the scores were not
        compared) when the champion stayed for that reason.
    """
    import mlflow
    import mlflow.pyfunc
    from mlflow.models.signature import ModelSignature
    from mlflow.types.schema import ParamSchema, ParamSpec

    signature = None
    if params:
        signature = ModelSignature(
            params=ParamSchema([ParamSpec(k, _param_type(v), v) for k, v in params.items()])
        )
    with warnings.catch_warnings():
        # A signature without an input example draws a warning; the inputs are free-form JSON
        # rows, so there is no input schema that an example could check.
        warnings.filterwarnings("ignore", message=".*input example was not provided.*")
        info = mlflow.pyfunc.log_model(
            name="model",
            python_model=str(entry),
            artifacts=artifacts,
            pip_requirements=pip_requirements(packages),
            registered_model_name=registered_model,
            signature=signature,
        )
    out: dict[str, Any] = {"model_uri": info.model_uri}
    if registered_model is not None:
        version = str(info.registered_model_version)
        client = mlflow.MlflowClient()
        promoted, prev, refused = promote_if_better(
            client,
            registered_model,
            version,
            tag=tag,
            score=score,
            higher_is_better=higher_is_better,
            eval_set=eval_set,
            untagged=untagged,
        )
        out.update(
            registered_model=registered_model,
            version=version,
            champion=promoted,
            previous_champion=prev,
            score=float(f"{score:.6f}"),
            champion_score=_version_score(client, registered_model, prev, tag),
        )
        if refused is not None:
            out["champion_refused"] = refused
    return out
