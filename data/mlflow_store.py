"""Talking to an MLflow tracking store without hanging, and saying in one line why it failed.

MLflow retries a failed HTTP request 7 times with exponential backoff (its
``MLFLOW_HTTP_REQUEST_MAX_RETRIES``, ``MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR`` 2 and
``MLFLOW_HTTP_REQUEST_TIMEOUT`` 120 s): against a tracking server that is down, ``fleetmind rca
evaluate --model models:/fleetmind-rca@champion`` sat silent for 4 min 12 s before it failed
(measured 2026-12-04, a closed local port). Where a person or a starting service waits,
:func:`bounded_requests` lowers those three to :data:`BOUNDED` for the duration of a block, unless
the user set them: a server that refuses connections is then reported within seconds (7.9 s for
that command, imports included), one that never answers after three tries of 30 s at most.

A database store (``postgresql://``, ``mysql://``, ``mssql://``, ``sqlite://``) has its own
retries: MLflow tries to open it 10 times (``MAX_RETRY_COUNT`` in ``mlflow/store/db/utils.py``,
waiting 0.1, 0.3, 0.7, ... 51.1 s between tries) and logs a five-line warning at each failure, so
a PostgreSQL server that refuses connections took 111 s and 40 lines of warnings before its
one-line error (measured 2026-12-04, a closed local port). Inside :func:`bounded_requests` it is
tried :data:`DB_TRIES` times, and those warnings are not shown (the last error is what
:func:`reason` reports).

:func:`reason` turns MLflow's errors (a connection pool's retry report, a database driver's error
with its SQL, a registry that does not take the URI's scheme) into one short line, and
:func:`fleetmind.redact.safe_uri` masks the password of a URL (``http://user:pass@host``) wherever one is shown.
:func:`is_mlflow_uri` tells an MLflow URI from a local path and :func:`download` fetches a model
into a folder the caller removes, an alias resolved once, for both model loaders.

Used by the model loaders (:mod:`fleetmind.rca.gat_analyzer`, :mod:`fleetmind.rl.policy_adapter`)
and by :func:`fleetmind.training.tracking.ready_store`, which every tracked command calls first.
"""

from __future__ import annotations

import logging
import os
import re
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import unquote

from fleetmind.data.errors import ModelLoadError
from fleetmind.redact import safe_uri

BOUNDED: dict[str, str] = {
    "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "2",
    "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR": "1",
    "MLFLOW_HTTP_REQUEST_TIMEOUT": "30",
}
"""MLflow's HTTP settings inside :func:`bounded_requests` (retries, backoff factor, seconds per
request), each applied only where the environment does not set it."""

DB_TRIES = 2
"""How many times MLflow tries to open a database store inside :func:`bounded_requests` (its own
``MAX_RETRY_COUNT`` is 10): one retry, 0.1 s after the first failure."""
_DB_RETRY_LOGGER = "mlflow.store.db.utils"
_DB_RETRY_MESSAGE = "SQLAlchemy engine could not be created"
"""MLflow's logger and the start of the warning it logs before each database retry."""

_lock = threading.Lock()
_depth = 0
_added: list[str] = []
_saved_tries: list[int] = []


def _not_a_db_retry(record: logging.LogRecord) -> bool:
    """Logging filter: drop MLflow's warning before a database retry."""
    return not str(record.msg).startswith(_DB_RETRY_MESSAGE)


@contextmanager
def bounded_requests() -> Iterator[None]:
    """Within the block, MLflow's HTTP requests use :data:`BOUNDED` where the environment sets
    nothing else, and a database store is tried :data:`DB_TRIES` times, without MLflow's warning
    before each retry. Nested and concurrent blocks share one setting; the last one out restores
    the environment and MLflow's retry count."""
    global _depth
    with _lock:
        if _depth == 0:
            _added[:] = [k for k in BOUNDED if k not in os.environ]
            for k in _added:
                os.environ[k] = BOUNDED[k]
            _bound_db_retries()
        _depth += 1
    try:
        yield
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0:
                for k in _added:
                    os.environ.pop(k, None)
                _added.clear()
                _unbound_db_retries()


def _bound_db_retries() -> None:
    """Lower MLflow's database retry count to :data:`DB_TRIES` and hide its retry warnings."""
    import mlflow.store.db.utils as db_utils

    _saved_tries[:] = [db_utils.MAX_RETRY_COUNT]
    db_utils.MAX_RETRY_COUNT = min(DB_TRIES, db_utils.MAX_RETRY_COUNT)
    logging.getLogger(_DB_RETRY_LOGGER).addFilter(_not_a_db_retry)


def _unbound_db_retries() -> None:
    """Put back what :func:`_bound_db_retries` changed."""
    import mlflow.store.db.utils as db_utils

    if _saved_tries:
        db_utils.MAX_RETRY_COUNT = _saved_tries.pop()
    logging.getLogger(_DB_RETRY_LOGGER).removeFilter(_not_a_db_retry)


_ERRNO = re.compile(r"\[Errno -?\d+\] ([^\"')\]]+)")
_SQL = re.compile(r"\((?:sqlite3|psycopg2?|pymysql)\.[\w.]+\) ([^\n\[]+)")
_STATUS = re.compile(r"too many (\d{3} )?error responses")
_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]+:/")
_MORE_LINES = 3
_MORE_CHARS = 300
"""How many lines after a first line that ends with a colon :func:`reason` adds, and the
characters of each (MLflow's download errors list every file that failed, with the server's
answer)."""


def is_mlflow_uri(ref: str) -> bool:
    """Whether ``ref`` is a URI for MLflow to resolve rather than a local path: a scheme of two
    or more characters and ``:/`` (``models:/``, ``runs:/``, ``mlflow-artifacts:/``,
    ``file:///``, ``s3://``); ``C:/models`` (a drive letter) and ``models/rca`` stay local."""
    return _SCHEME.match(ref) is not None


def download(uri: str, dst: str | Path) -> tuple[Path, str, str | None]:
    """Download the MLflow model or artifacts at ``uri`` into the folder ``dst`` (which the caller
    owns and removes); returns ``(local path, the URI downloaded, "name/version" or None)``.

    A ``models:/name@alias`` is resolved once, and ``models:/name/<version>`` downloaded: the
    version reported is the one served even when the alias moves meanwhile (``download_artifacts``
    would resolve the alias a second time). Call within :func:`bounded_requests`; MLflow's errors
    pass through (:func:`reason` says them in one line). A ``models:/`` URI whose registry store
    (a ``runs:/`` URI whose tracking store) is a local SQLite file that does not exist raises
    :class:`~fleetmind.data.errors.ModelLoadError` before MLflow creates that file. MLflow's
    client opens the tracking store too (``MlflowClient.__init__``), so a ``models:/`` load with
    only ``MLFLOW_REGISTRY_URI`` set leaves an empty tracking database (default ``mlflow.db`` in
    the working directory).
    """
    import mlflow

    if uri.startswith("models:/"):
        registry = mlflow.get_registry_uri()  # the tracking URI unless one is set of its own
        own = registry != mlflow.get_tracking_uri()
        _check_store(registry, "MLFLOW_REGISTRY_URI" if own else "MLFLOW_TRACKING_URI")
    elif uri.startswith("runs:/"):
        _check_store(mlflow.get_tracking_uri(), "MLFLOW_TRACKING_URI")
    pinned, version = uri, None
    if uri.startswith("models:/"):
        spec = uri[len("models:/") :]
        if "@" in spec:
            name, alias = spec.split("@", 1)
            mv = mlflow.MlflowClient().get_model_version_by_alias(name, alias)
            version = f"{name}/{mv.version}"
            pinned = f"models:/{version}"
        elif "/" in spec and spec.split("/", 1)[1].isdigit():
            version = spec
    local = mlflow.artifacts.download_artifacts(artifact_uri=pinned, dst_path=str(dst))
    return Path(local), pinned, version


def _check_store(uri: str | None, variable: str) -> None:
    """Refuse ``uri`` when it is a local SQLite store whose file does not exist: MLflow would
    create it, schema and all (about 1 MB), in the working directory of a caller that merely
    forgot ``MLFLOW_TRACKING_URI`` (its default is ``sqlite:///mlflow.db``), and then report the
    model as not registered. The path is percent-decoded as SQLAlchemy does (older releases of
    MLflow's own ``path_to_local_sqlite_uri`` wrote a space as ``%20``); ``variable`` is the
    environment variable the message names.

    Raises:
        ModelLoadError: ``no MLflow registry at <absolute path>; set <variable>``.
    """
    if not uri or not uri.startswith("sqlite:///"):
        return
    name = unquote(uri.removeprefix("sqlite:///").split("?", 1)[0])
    if name in ("", ":memory:"):
        return
    db = Path(name).absolute()
    if not db.exists():
        raise ModelLoadError(f"no MLflow registry at {db}; set {variable}")


def reason(err: BaseException) -> str:
    """One short line saying why an MLflow call failed, any password in it masked.

    A request that never got an answer reads ``the server did not answer (<socket error>)``,
    one that timed out names ``MLFLOW_HTTP_REQUEST_TIMEOUT``, one that got only 5xx answers says
    so; a database error reads as the driver's message without its SQL; anything else is the
    error's first line, joined with the next when it ends with a colon (MLflow's download errors
    put the cause there; see :func:`_first_lines`), or its type's name when it has no text.
    """
    text = safe_uri(str(err))
    # urllib3 reports a read timeout and too many 5xx answers as "Max retries exceeded ...
    # (Caused by ReadTimeoutError / ResponseError)": those come before the connection failure
    if "Read timed out" in text or "ReadTimeoutError" in text:
        return "the server did not answer in time (MLFLOW_HTTP_REQUEST_TIMEOUT sets the seconds)"
    m = _STATUS.search(text)
    if m:
        code = f"HTTP {m.group(1).strip()}" if m.group(1) else "errors"
        return (
            f"the server answered with {code} on every try (MLFLOW_HTTP_REQUEST_MAX_RETRIES sets "
            "how often to retry)"
        )
    if "Max retries exceeded" in text or "Failed to establish a new connection" in text:
        m = _ERRNO.search(text)
        why = m.group(1).strip() if m else "connection failed"
        return (
            f"the server did not answer ({why}; MLFLOW_HTTP_REQUEST_MAX_RETRIES sets how often "
            "to retry)"
        )
    m = _SQL.search(text)
    if m:
        return m.group(1).strip()
    return _first_lines(text) or type(err).__name__


def _first_lines(text: str) -> str:
    """The first line of ``text``; while it ends with a colon, the next ones joined to it
    (``##### File model.pt #####`` headers read ``model.pt:``), each of those cut to
    :data:`_MORE_CHARS` characters, :data:`_MORE_LINES` at most."""
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    out = lines[0] if lines else ""
    for line in lines[1 : 1 + _MORE_LINES]:
        if not out.endswith(":"):
            break
        line = re.sub(r"^#+\s*File (.+?)\s*#+$", r"\1:", line)
        if len(line) > _MORE_CHARS:
            line = line[: _MORE_CHARS - 3].rstrip() + "..."
        out = f"{out} {line}"
    return out
