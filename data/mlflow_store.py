"""Talking to an MLflow tracking store without hanging, and saying in one line why it failed.

MLflow retries a failed HTTP request 7 times with exponential backoff (its
``MLFLOW_HTTP_REQUEST_MAX_RETRIES``, ``MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR`` 2 and
``MLFLOW_HTTP_REQUEST_TIMEOUT`` 120 s): against a tracking server that is down, ``fleetmind rca
evaluate --model models:/fleetmind-rca@champion`` sat silent for 4 min 12 s before it failed
(measured 2026-12-04, a closed local port). Where a person or a starting service waits,
:func:`bounded_requests` lowers those three to :data:`BOUNDED` for the duration of a block, unless
the user set them: a server that refuses connections is then reported within seconds (7.9 s for
that command, imports included), one that never answers after three tries of 30 s at most.

:func:`reason` turns MLflow's errors (a connection pool's retry report, a database driver's error
with its SQL, a registry that does not take the URI's scheme) into one short line.

Used by the model loaders (:mod:`fleetmind.rca.gat_analyzer`, :mod:`fleetmind.rl.policy_adapter`)
and by :func:`fleetmind.training.tracking.ready_store`, which every tracked command calls first.
"""

from __future__ import annotations

import os
import re
import threading
from collections.abc import Iterator
from contextlib import contextmanager

BOUNDED: dict[str, str] = {
    "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "2",
    "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR": "1",
    "MLFLOW_HTTP_REQUEST_TIMEOUT": "30",
}
"""MLflow's HTTP settings inside :func:`bounded_requests` (retries, backoff factor, seconds per
request), each applied only where the environment does not set it."""

_lock = threading.Lock()
_depth = 0
_added: list[str] = []


@contextmanager
def bounded_requests() -> Iterator[None]:
    """Within the block, MLflow's HTTP requests use :data:`BOUNDED` where the environment sets
    nothing else. Nested and concurrent blocks share one setting; the last one out restores the
    environment."""
    global _depth
    with _lock:
        if _depth == 0:
            _added[:] = [k for k in BOUNDED if k not in os.environ]
            for k in _added:
                os.environ[k] = BOUNDED[k]
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


_ERRNO = re.compile(r"\[Errno -?\d+\] ([^\"')\]]+)")
_SQL = re.compile(r"\((?:sqlite3|psycopg2?|pymysql)\.[\w.]+\) ([^\n\[]+)")


def reason(err: BaseException) -> str:
    """One short line saying why an MLflow call failed.

    A request that never got an answer reads ``the server did not answer (<socket error>)``;
    a database error reads as the driver's message without its SQL; anything else is the error's
    first line (its type's name when it has no text).
    """
    text = str(err)
    if "Max retries exceeded" in text or "Failed to establish a new connection" in text:
        m = _ERRNO.search(text)
        why = m.group(1).strip() if m else "connection failed"
        return (
            f"the server did not answer ({why}; MLFLOW_HTTP_REQUEST_MAX_RETRIES sets how often "
            "to retry)"
        )
    if "Read timed out" in text:
        return "the server did not answer in time (MLFLOW_HTTP_REQUEST_TIMEOUT sets the seconds)"
    m = _SQL.search(text)
    if m:
        return m.group(1).strip()
    first = text.strip().splitlines()[0].strip() if text.strip() else ""
    return first or type(err).__name__
