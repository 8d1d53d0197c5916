"""A database URL whose password holds an unencoded ``@`` is refused before anything connects,
and no error line shows any part of that password.

SQLAlchemy's ``make_url`` ends the password at its first ``@`` (``_parse_url`` in
``sqlalchemy/engine/url.py``: ``(?::(?P<password>[^@]*))?@``), so
``postgresql+psycopg://fm:S3cr@tP4ss@db/fm`` is the password ``S3cr`` and the host
``tP4ss@db``, and psycopg's reason quotes that host (``failed to resolve host 'tP4ss@db'``).
The setting ``FLEETMIND_DATABASE_URL``, every ``--database-url`` and :class:`Database` refuse it
with one line that says to percent-encode the ``@`` (RFC 3986 section 3.2.1: ``@`` in userinfo is
written ``%40``). The line ``cannot open the database at <url>: <reason>`` keeps its ``:`` after
a masked ``?password=``.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from pydantic import ValidationError
from sqlalchemy.engine import make_url

from fleetmind import cli
from fleetmind.cli.serve import _settings_error
from fleetmind.data.errors import ConfigError
from fleetmind.serving.db import Database, open_error
from fleetmind.serving.settings import Settings, database_url_problem

if TYPE_CHECKING:
    from serving_helpers import PgCluster

BAD = "postgresql+psycopg://fm:S3cr@tP4ss@127.0.0.1:1/fm"
FRAGMENTS = ("S3cr", "P4ss")
"""Parts of the password ``S3cr@tP4ss`` (or ``S3cr@t P4ss``): none may appear in any line shown."""


def _clean(line: str) -> None:
    assert not any(f in line for f in FRAGMENTS), line
    assert "%40" in line, line


@pytest.mark.parametrize(
    "url",
    [
        BAD,
        "postgres://fm:S3cr@tP4ss@db/fm",
        "postgresql+psycopg://fm:S3cr@tP4ss/x@db/fm",  # the rest would be the database name
        "postgresql+psycopg://fm:S3cr@t P4ss@db/fm",  # whitespace ends safe_uri's mask
        "postgresql+psycopg://fm@srv:S3cr@tP4ss@db/fm",
        "postgresql+psycopg://fm:S3cr@tP4ss@db/fm?application_name=x",
    ],
)
def test_a_password_with_an_unencoded_at_is_a_problem(url: str) -> None:
    problem = database_url_problem(url)
    assert problem is not None
    _clean(problem)


@pytest.mark.parametrize(
    "url",
    [
        "postgresql+psycopg://fm:S3cr%40tP4ss@db/fm",
        "postgresql+psycopg://fm@srv:pw@db/fm",  # an Azure-style user name holding an @
        "postgresql+psycopg://fm@srv@db/fm",  # no password
        "postgresql+psycopg://fm:pw@db/fm?application_name=a%40b",
        # an @ in the query is parsed as meant (SQLAlchemy passes application_name=ops@fleet)
        "postgresql+psycopg://fm:pw@db/fm?application_name=ops@fleet",
        "postgres://fm:pw@db/fm?host=/run/p@g&sslrootcert=/etc/ca@x.pem",
        "postgresql+psycopg://fm:pw@db/f%40m",  # a database name's @ written %40
        "sqlite:////srv/a@b@c/fleetmind.db",
        "sqlite:///fleetmind.db",
        "host=db password=x@y@z",  # not a URL: Database's own check describes it
    ],
)
def test_encoded_or_unambiguous_urls_pass(url: str) -> None:
    assert database_url_problem(url) is None


@pytest.mark.parametrize("url", [BAD, BAD.replace("S3cr@t", "S3cr@t ")])
def test_the_setting_refuses_it_without_quoting_it(
    monkeypatch: pytest.MonkeyPatch, url: str
) -> None:
    """Also a password holding a space, which ends :func:`safe_uri`'s mask of the value."""
    monkeypatch.setenv("FLEETMIND_DATABASE_URL", url)
    with pytest.raises(ValidationError) as info:
        Settings()
    line = _settings_error(info.value)
    _clean(line + str(info.value))
    assert "FLEETMIND_DATABASE_URL (value hidden" in line and "\n" not in line


def test_database_refuses_it_before_connecting() -> None:
    with pytest.raises(ConfigError) as info:
        Database(BAD, connect_timeout_s=1)
    _clean(str(info.value))
    assert "cannot use database URL" in str(info.value)


@pytest.mark.parametrize("command", ["current", "upgrade", "downgrade"])
def test_every_database_url_option_refuses_it(
    command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    extra = ["--to", "0001"] if command == "downgrade" else []
    rc = cli.main(["db", command, "--database-url", BAD, *extra])
    out, err = capsys.readouterr()
    assert rc == 2 and out == ""
    _clean(err)


@pytest.mark.parametrize("url", [BAD, BAD.replace("S3cr@t", "S3cr@t ")])
def test_the_feedback_database_paths_do_not_show_it(url: str) -> None:
    """``--feedback-db`` (``fleetmind rca train``/``evaluate``) reads through :class:`Database`
    and shows its URL in logs, MLflow params and errors (``safe_url``)."""
    from fleetmind.data.errors import NotAvailableError
    from fleetmind.serving.feedback import feedback_incidents
    from fleetmind.training.rca_feedback import safe_url

    with pytest.raises(NotAvailableError) as info:
        feedback_incidents(url)
    _clean(str(info.value))
    assert safe_url(url) == "<database URL>"


def test_open_error_masks_a_host_holding_an_at() -> None:
    """A host holding an ``@`` that reached a driver anyway is masked in its reason."""
    url = make_url(BAD)
    assert url.host == "tP4ss@127.0.0.1"  # SQLAlchemy's parse, as modelled above
    err = OSError("failed to resolve host 'tP4ss@127.0.0.1': Name or service not known")
    line = open_error(url, err)
    assert not any(f in line for f in FRAGMENTS), line
    assert line.endswith("failed to resolve host '***@127.0.0.1': Name or service not known")


def test_open_error_keeps_the_colon_after_a_masked_query_password() -> None:
    url = "postgresql+psycopg://fm@127.0.0.1:1/fm?password=DBSECRETPW"
    with pytest.raises(ConfigError) as info:
        Database(url, connect_timeout_s=1).migrate()
    line = str(info.value)
    assert "DBSECRETPW" not in line
    assert line.startswith("cannot open the database at postgresql+psycopg://***@127.0.0.1:1/fm?")
    assert "?password=***: " in line, line


def _fleetmind(*args: str, url: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLEETMIND_")}
    if url is not None:
        env["FLEETMIND_DATABASE_URL"] = url
    return subprocess.run(
        [sys.executable, "-m", "fleetmind.cli", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )


def test_real_postgresql_never_sees_the_cut_password(pg: PgCluster) -> None:
    """End to end against PostgreSQL (trust authentication, so the encoded URL connects): the
    unencoded URL is refused by ``serve`` and ``db`` with no part of the password printed, on the
    command line and in the setting; written with ``%40`` it opens the same server."""
    bad = f"postgresql+psycopg://postgres:S3cr@tP4ss@127.0.0.1:{pg.port}/postgres"
    runs = [
        _fleetmind("db", "current", "--database-url", bad),
        _fleetmind("db", "current", url=bad),
        _fleetmind("serve", "--port", "1", "--database-url", bad),
        _fleetmind("serve", "--port", "1", url=bad),
    ]
    for run in runs:
        assert run.returncode == 2, run.stderr
        _clean(run.stdout + run.stderr)
        assert len(run.stderr.strip().splitlines()) == 1, run.stderr
    good = _fleetmind("db", "current", "--database-url", bad.replace("S3cr@", "S3cr%40"))
    assert good.returncode == 0, good.stderr
    assert "revision none" in good.stdout and "127.0.0.1" in good.stdout


def test_the_flag_is_used_when_the_environment_holds_a_refused_url(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``fleetmind db current --database-url GOOD`` with a refused ``FLEETMIND_DATABASE_URL`` in
    the environment reads the flag's database, as before the refusal existed."""
    monkeypatch.setenv("FLEETMIND_DATABASE_URL", BAD)
    import sqlite3

    sqlite3.connect(tmp_path / "fm.db").close()
    good = f"sqlite:///{tmp_path}/fm.db"
    rc = cli.main(["db", "current", "--database-url", good])
    out, err = capsys.readouterr()
    assert rc == 0, err
    assert not any(f in out + err for f in FRAGMENTS)


def test_feedback_database_lines_mask_a_password_holding_a_space(
    tmp_path: Path,
) -> None:
    """``safe_uri``'s mask stops at whitespace: the feedback database's errors and the rerun
    command of ``rca evaluate`` printed ``fm:S3cr tP4ss@...`` whole."""
    from fleetmind.cli import build_parser
    from fleetmind.cli.rca import _evaluate_command
    from fleetmind.data.errors import NotAvailableError
    from fleetmind.serving.feedback import feedback_incidents

    url = "postgresql+psycopg://fm:S3cr tP4ss@127.0.0.1:1/fm"
    with pytest.raises(NotAvailableError) as info:
        feedback_incidents(url)
    assert not any(f in str(info.value) for f in FRAGMENTS), str(info.value)
    assert "://fm:***@127.0.0.1:1/fm" in str(info.value)
    args = build_parser().parse_args(["rca", "evaluate", "--feedback-db", url])
    line = _evaluate_command(args)
    assert not any(f in line for f in FRAGMENTS), line
