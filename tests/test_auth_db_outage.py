"""The API docs' ``/ui`` session lookup (in :class:`fleetmind.serving.deps.AuthMiddleware`, before
the app's exception handlers) with the database failing: a 503 with the API's body and one
throttled log line shared with the API's database handler, never a 500 with a traceback that
holds the SQL and its parameters."""

from __future__ import annotations

import logging
import os
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from sqlalchemy.exc import DataError

from fleetmind.serving import deps
from fleetmind.serving.app import create_app
from fleetmind.serving.settings import Settings
from fleetmind.serving.ui import auth

TOKEN = "auth-db-outage-token-0123456789abcdef"
COOKIE = "abcdef0123456789"  # any value: the lookup fails before it is compared


def _settings(db: Path) -> Settings:
    return Settings(
        database_url=f"sqlite:///{db}",
        incident_worker=False,
        rca_model="baseline:upstream-coverage",
        placement_model="heuristic:builtin-bestfit",
        api_token=TOKEN,
    )


def _drop(db: Path, *tables: str) -> None:
    con = sqlite3.connect(db)
    for table in tables:
        con.execute(f"DROP TABLE {table}")
    con.commit()
    con.close()


def _db_lines(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if "database" in r.getMessage()]


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[TestClient, Path]]:
    db = tmp_path / "auth.db"
    with TestClient(create_app(_settings(db)), raise_server_exceptions=False) as client:
        yield client, db


def test_docs_with_a_session_cookie_and_no_sessions_table_is_a_503_and_one_line(
    served: tuple[TestClient, Path], caplog: pytest.LogCaptureFixture
) -> None:
    """The ``ui_sessions`` table gone: three ``GET /docs`` with a session cookie answer 503 with
    the API's JSON body and log one line, no traceback, no SQL; the docs with a bearer token (no
    database read) still open."""
    client, db = served
    _drop(db, "ui_sessions")
    caplog.clear()
    with caplog.at_level(logging.DEBUG):
        answers = [
            client.get("/docs", headers={"Cookie": f"{auth.SESSION_COOKIE}={COOKIE}"})
            for _ in range(3)
        ]
    assert [r.status_code for r in answers] == [503, 503, 503]
    assert all(r.json() == {"detail": "database unavailable; try again"} for r in answers)
    lines = _db_lines(caplog)
    assert len(lines) == 1, [r.getMessage() for r in lines]
    text = lines[0].getMessage()
    assert text == (
        "database error on GET /docs: OperationalError: no such table: ui_sessions "
        f"(worker pid {os.getpid()})"
    )
    assert not [r for r in caplog.records if r.exc_info], "a traceback was logged"
    logged = "\n".join(r.getMessage() for r in caplog.records)
    assert "SELECT" not in logged and "[SQL" not in logged and COOKIE not in logged
    bearer = {"Authorization": f"Bearer {TOKEN}"}
    assert client.get("/openapi.json", headers=bearer).status_code == 200


def test_the_docs_and_the_api_share_one_limiter(
    served: tuple[TestClient, Path], caplog: pytest.LogCaptureFixture
) -> None:
    """A failing docs lookup and failing API reads of the same exception class in one process:
    one line in all (the limiter is the API handler's, per process), every answer a 503; a write
    to the docs path gets the API's "nothing was stored" body."""
    client, db = served
    _drop(db, "ui_sessions", "incidents")
    cookie = {"Cookie": f"{auth.SESSION_COOKIE}={COOKIE}"}
    bearer = {"Authorization": f"Bearer {TOKEN}"}
    caplog.clear()
    with caplog.at_level(logging.DEBUG):
        codes = [client.get("/openapi.json", headers=cookie).status_code for _ in range(3)]
        codes += [client.get("/api/v1/incidents", headers=bearer).status_code for _ in range(3)]
        post = client.post("/docs", headers=cookie)
    assert codes == [503] * 6
    assert post.status_code == 503
    assert post.json() == {"detail": "database unavailable; nothing was stored"}
    lines = _db_lines(caplog)
    assert len(lines) == 1, [r.getMessage() for r in lines]
    assert lines[0].getMessage().startswith("database error on GET /openapi.json: OperationalError")


def test_a_value_the_database_refuses_in_the_lookup_is_a_422(
    served: tuple[TestClient, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """An input error (SQLSTATE class 22) in the lookup is the request's value, not an outage:
    the 422 the API's handler gives, not a 503."""
    client, _ = served

    def refuse(*_args: object) -> None:
        raise DataError("SELECT ...", {}, Exception("value too long"))

    monkeypatch.setattr(deps, "session_of_cookies", refuse)
    r = client.get("/docs", headers={"Cookie": f"{auth.SESSION_COOKIE}={COOKIE}"})
    assert r.status_code == 422
    assert r.json() == {"detail": "the database refused a value of this request (Exception)"}


def test_ui_pages_with_no_sessions_table_answer_503_not_500(
    served: tuple[TestClient, Path],
) -> None:
    """The ``/ui`` pages read the session in the route (the app's handler): a 503 too."""
    client, db = served
    _drop(db, "ui_sessions")
    r = client.get("/ui/", headers={"Cookie": f"{auth.SESSION_COOKIE}={COOKIE}"})
    assert r.status_code == 503
