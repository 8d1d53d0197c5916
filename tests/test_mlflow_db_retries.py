"""A database tracking store that refuses connections fails within seconds, in one line.

MLflow tries to open a database store ``MAX_RETRY_COUNT`` = 10 times, sleeping
``0.1 * (2**attempt - 1)`` s between tries and logging a warning before each
(``mlflow/store/db/utils.py``, ``create_sqlalchemy_engine_with_retry``): a PostgreSQL server that
was down took 111 s and 40 lines of warnings before ``fleetmind rca train`` said why.
``fleetmind.data.mlflow_store.bounded_requests`` tries it ``DB_TRIES`` times, without the warnings.
"""

from __future__ import annotations

import logging
import socket
import time

import mlflow.store.db.utils as db_utils
import pytest

from fleetmind.data import mlflow_store
from fleetmind.data.errors import ConfigError
from fleetmind.training.tracking import ready_store


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # closed again when the block ends: connections are refused


def test_a_refused_database_is_tried_twice_and_fails_in_one_line(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    made: list[str] = []
    real = db_utils.create_sqlalchemy_engine

    def counting(db_uri: str) -> object:
        made.append(db_uri)
        return real(db_uri)

    monkeypatch.setattr(db_utils, "create_sqlalchemy_engine", counting)
    monkeypatch.setattr(time, "sleep", lambda s: None)  # MLflow's backoff: not waited for here
    uri = f"postgresql+psycopg://u:secret@127.0.0.1:{_closed_port()}/db"
    caplog.set_level(logging.WARNING, logger="mlflow.store.db.utils")
    with pytest.raises(ConfigError) as exc:
        ready_store(uri)
    msg = str(exc.value)
    assert "Connection refused" in msg and "\n" not in msg and "secret" not in msg
    assert len(made) <= 2, len(made)  # MLflow alone: 10
    assert mlflow_store.DB_TRIES == 2
    assert not [r for r in caplog.records if "could not be created" in r.getMessage()]
    assert db_utils.MAX_RETRY_COUNT == 10  # given back after the block


def test_a_refused_database_fails_within_seconds(monkeypatch: pytest.MonkeyPatch) -> None:
    """The behaviour a user sees (111 s before): the backoff MLflow would sleep between tries is
    recorded instead of waited for, and adds up to a fraction of a second (MLflow alone:
    ``0.1 * (2**attempt - 1)`` summed over 10 tries, about 100 s); not a clock reading."""
    slept: list[float] = []
    monkeypatch.setattr(time, "sleep", slept.append)
    uri = f"postgresql+psycopg://u:p@127.0.0.1:{_closed_port()}/db"
    with pytest.raises(ConfigError, match="Connection refused") as exc:
        ready_store(uri)
    assert "\n" not in str(exc.value)
    assert sum(slept) < 1.0, slept
