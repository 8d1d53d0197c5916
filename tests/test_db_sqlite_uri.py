"""A SQLite database named by a URI-form URL (``sqlite:///file:/srv/fm.db?uri=true``).

SQLAlchemy's pysqlite dialect passes the database part to ``sqlite3.connect(..., uri=True)`` when
the URL says ``uri=true`` (SQLAlchemy docs, dialects/sqlite, "URI Connections"), so the name is a
SQLite URI (https://www.sqlite.org/uri.html: the ``file:`` scheme, an empty or ``localhost``
authority, a percent-encoded path, the URI's own query). The lock files beside the database
(migration, incident worker) and the file-identity check were built from the raw string:
``file:/srv/fm.db.migrate.lock`` is in a folder named ``file:``, so the upgrade failed with "No such
file or directory", and at the newest revision the service started with an incident worker that
failed on every try (alerts never became incidents).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from serving_helpers import alert, wait_for, webhook
from sqlalchemy.engine import make_url
from sqlalchemy.exc import OperationalError

from fleetmind.serving.db import Database, LeaderLock
from fleetmind.serving.migrations import sqlite_path

GPU_ALERT = {"alertname": "GpuXidError", "cluster": "c0", "node": "c0-h1", "gpu": "3"}


@pytest.mark.parametrize(
    ("url", "path"),
    [
        ("sqlite:////srv/fm.db", "/srv/fm.db"),
        ("sqlite:///fm.db", "fm.db"),
        ("sqlite:///file:/srv/fm.db?uri=true", "/srv/fm.db"),
        ("sqlite:///file:///srv/fm.db?uri=true", "/srv/fm.db"),
        ("sqlite:///file://localhost/srv/fm.db?uri=true", "/srv/fm.db"),
        ("sqlite:///file:/srv/fm.db?mode=ro&uri=true", "/srv/fm.db"),
        ("sqlite:///file:fm.db?uri=true", "fm.db"),
        # SQLAlchemy decodes the URL once, SQLite the URI once more: %2520 is a space
        ("sqlite:///file:/srv/a%2520b.db?uri=true", "/srv/a b.db"),
        ("sqlite:///file:/srv/fm.db", "file:/srv/fm.db"),  # no uri=true: a plain file name
        ("sqlite://", None),
        ("sqlite:///:memory:", None),
        ("sqlite:///file::memory:?uri=true", None),
        ("sqlite:///file:fm?mode=memory&cache=shared&uri=true", None),
        ("sqlite:///file:?uri=true", None),
        ("postgresql+psycopg://u@h/db", None),
    ],
)
def test_the_file_of_a_sqlite_url(url: str, path: str | None) -> None:
    assert sqlite_path(make_url(url)) == path


def test_an_upgrade_through_a_uri_url_locks_beside_the_file(tmp_path: Path) -> None:
    file = tmp_path / "fm.db"
    db = Database(f"sqlite:///file:{file}?uri=true")
    try:
        assert db.migrate() == "none"  # was: No such file or directory: 'file:/...migrate.lock'
    finally:
        db.dispose()
    assert file.is_file() and (tmp_path / "fm.db.migrate.lock").is_file()


def test_the_worker_lock_of_a_uri_url_is_beside_the_file_and_exclusive(tmp_path: Path) -> None:
    file = tmp_path / "fm.db"
    url = f"sqlite:///file:{file}?uri=true"
    first, second = Database(url), Database(url)
    first.migrate()
    a, b = LeaderLock(first), LeaderLock(second)
    try:
        assert a.acquire()  # was: FileNotFoundError, on every try of the worker
        assert (tmp_path / "fm.db.worker.lock").is_file()
        assert not b.acquire()  # one holder per database
        a.release()
        assert b.acquire()
    finally:
        a.release()
        b.release()
        first.dispose()
        second.dispose()


def test_a_deleted_file_is_noticed_through_a_uri_url(tmp_path: Path) -> None:
    """The identity check stat()ed ``file:/...`` (never there), so it never fired."""
    file = tmp_path / "fm.db"
    db = Database(f"sqlite:///file:{file}?uri=true")
    try:
        db.migrate()
        db.check_file()
        os.unlink(file)
        with pytest.raises(OperationalError, match="was deleted while the service ran"):
            db.check_file()
    finally:
        db.dispose()


def test_the_incident_worker_groups_alerts_on_a_uri_url(tmp_path: Path) -> None:
    from fleetmind.serving.app import create_app
    from fleetmind.serving.settings import Settings

    file = tmp_path / "fm.db"
    done = Database(f"sqlite:///{file}")  # already at the newest revision, as after an upgrade
    done.migrate()
    done.dispose()
    settings = Settings(
        database_url=f"sqlite:///file:{file}?uri=true",
        rca_model="baseline:upstream-coverage",
        placement_model="heuristic:builtin-bestfit",
        incident_worker=True,
    )
    with TestClient(create_app(settings)) as c:
        assert c.post("/api/v1/alerts", json=webhook([alert(GPU_ALERT)])).status_code == 200
        incs = wait_for(lambda: c.get("/api/v1/incidents").json(), timeout=30.0)
        assert [i["alert_count"] for i in incs] == [1]
