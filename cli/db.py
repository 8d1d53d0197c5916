"""``fleetmind db``: the service database's schema revision: show it, upgrade it, roll it back.

The database is the one ``fleetmind serve`` would open: ``--database-url``, else
``FLEETMIND_DATABASE_URL`` (read through :class:`fleetmind.serving.settings.Settings`, with the
same connect and statement timeouts), else ``sqlite:///fleetmind.db``.

* ``fleetmind db current [--json]``: the database's revision, this release's newest (head) and
  whether it is up to date. Changes nothing (a missing SQLite file is reported, not created).
* ``fleetmind db upgrade``: what the service's start does first (:meth:`Database.migrate
  <fleetmind.serving.db.Database.migrate>`), for a Job or an init container.
* ``fleetmind db downgrade --to REV [--yes]``: undo the revisions above ``REV``
  (:func:`fleetmind.serving.migrations.downgrade`), run with the release that wrote them, before
  starting an older release on the database (``docs/serving/operations.md#rolling-back``). It
  drops their tables and columns with the data in them, so it asks first; without a terminal it
  needs ``--yes``.

Exit status 0: done (or nothing to do); 1: a downgrade not confirmed at the prompt; 2: bad input
(an unknown revision, one above the database's, a database that cannot be opened, a SQLite
database a server on this host still runs on), one line.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

from fleetmind.cli.common import add_group
from fleetmind.data.errors import ConfigError


def register(subparsers: argparse._SubParsersAction, name: str, help_text: str) -> None:
    _, sub = add_group(subparsers, name, help_text)
    url_help = (
        "SQLAlchemy URL of the service database (default: FLEETMIND_DATABASE_URL, else "
        "sqlite:///fleetmind.db, as fleetmind serve)"
    )
    p = sub.add_parser(
        "current",
        help="the database's schema revision and whether this release's newest",
        description="Print the database's schema revision, this release's newest (head) and "
        "whether the database is up to date. Changes nothing.",
    )
    p.add_argument("--database-url", help=url_help)
    p.add_argument("--json", action="store_true", help="print one JSON object instead")
    p.set_defaults(func=run_current)
    p = sub.add_parser(
        "upgrade",
        help="upgrade the schema to this release's newest revision (what the service's start does)",
        description="Upgrade the database schema to this release's newest revision, as the "
        "service does at start (for a Job or an init container).",
    )
    p.add_argument("--database-url", help=url_help)
    p.set_defaults(func=run_upgrade)
    p = sub.add_parser(
        "downgrade",
        help="roll the schema back to an older revision (drops the newer revisions' data)",
        description="Undo the schema revisions above REV, newest first, so that an older release "
        "can start on the database. Run it with the newer release (the one that wrote them), "
        "with the service stopped, after a backup: it drops the tables and columns those "
        "revisions added, with their data (docs/serving/operations.md#rolling-back).",
    )
    p.add_argument("--database-url", help=url_help)
    p.add_argument(
        "--to",
        required=True,
        metavar="REV",
        help="the revision to go back to: the older release's newest (e.g. 0004 for 0.2.0)",
    )
    p.add_argument(
        "--yes", action="store_true", help="do not ask (needed when stdin is not a terminal)"
    )
    p.set_defaults(func=run_downgrade)


def _open(args: argparse.Namespace, create: bool) -> Any:
    """The service's :class:`~fleetmind.serving.db.Database` for ``args`` (``--database-url``,
    else the settings). ``create`` false: a SQLite file that does not exist is refused rather
    than created (reading the revision must not leave an empty database behind)."""
    from pydantic import ValidationError

    from fleetmind.cli.serve import _settings_error
    from fleetmind.serving.db import Database
    from fleetmind.serving.settings import Settings

    try:  # with the flag, the environment's URL is not read (init arguments come first): the
        # flag's is checked by Database below, which names it rather than the setting
        given = {"database_url": "sqlite://"} if args.database_url else {}
        settings = Settings(**given)
    except ValidationError as err:
        raise ConfigError(_settings_error(err)) from None
    db = Database(
        args.database_url or settings.database_url,
        settings.sqlite_synchronous,
        settings.db_connect_timeout_s,
        settings.db_statement_timeout_s,
    )
    try:
        db.refuse_in_memory()
        from fleetmind.serving.migrations import sqlite_path

        path = sqlite_path(db.engine.url) if db.is_sqlite else None
        if not create and path is not None and not os.path.exists(path):
            raise ConfigError(f"no SQLite database at {path} (check --database-url)")
    except ConfigError:
        db.dispose()
        raise
    return db


def _shown(db: Any) -> str:
    """The database URL without its password."""
    from fleetmind.redact import safe_uri

    return safe_uri(db.engine.url.render_as_string(hide_password=True))


def _unreachable(db: Any, err: Exception) -> ConfigError:
    """One line for a database that could not be reached or read
    (:func:`fleetmind.serving.db.open_error`: the URL and the driver's reason masked)."""
    from fleetmind.serving.db import open_error

    return ConfigError(open_error(db.engine.url, err))


def _describe(rev: str | None, tables: bool, head: str, known: set[str]) -> str:
    """One line on the revision ``rev`` against this release's newest ``head``."""
    if rev is None:
        if tables:
            return (
                "none: tables made by a build before migrations; `fleetmind db upgrade` (or the "
                "service's start) adopts and upgrades them"
            )
        return "none: an empty database; `fleetmind db upgrade` (or the service's start) creates it"
    if rev == head:
        return f"{rev}: up to date (this release's newest)"
    if rev not in known:
        return (
            f"{rev}: newer than this release (its newest is {head}); to run this release on it, "
            f"run `fleetmind db downgrade --to {head}` with the release that wrote it"
        )
    return (
        f"{rev}: behind this release's newest, {head}; `fleetmind db upgrade` (or the "
        "service's start) upgrades it"
    )


def run_current(args: argparse.Namespace) -> int:
    from sqlalchemy.exc import SQLAlchemyError

    from fleetmind.serving import migrations

    db = _open(args, create=False)
    try:
        try:
            rev, tables = migrations.state(db.engine)
        except SQLAlchemyError as err:
            raise _unreachable(db, err) from None
        head, known = migrations.head(), migrations.known_revisions()
        if args.json:
            doc = {
                "database": _shown(db),
                "revision": rev,
                "head": head,
                "up_to_date": rev == head,
                "known": rev is None or rev in known,
                "tables": tables,
            }
            print(json.dumps(doc))
        else:
            print(f"database {_shown(db)}: revision {_describe(rev, tables, head, known)}")
    finally:
        db.dispose()
    return 0


def run_upgrade(args: argparse.Namespace) -> int:
    from fleetmind.serving.migrations import head

    db = _open(args, create=True)
    try:
        before = db.migrate(apply=True)  # the start's own path: one-line errors, the same lock
    finally:
        db.dispose()
    if before == head():
        print(f"database {_shown(db)}: already at revision {head()}, this release's newest")
    else:
        print(f"database {_shown(db)}: schema upgraded from {before} to {head()}")
    return 0


def _confirm(plan: str, yes: bool) -> bool:
    """Whether to go on with the downgrade ``plan`` (one line): ``--yes``, or "y" at the prompt.
    Without ``--yes`` and a terminal on stdin, refuses (``ConfigError``)."""
    if yes:
        return True
    if not sys.stdin.isatty():
        raise ConfigError(f"{plan}; stdin is not a terminal: pass --yes to go on")
    print(plan, file=sys.stderr)
    try:
        answer = input("Downgrade? [y/N] ")
    except EOFError:
        answer = ""
    return answer.strip().lower() in ("y", "yes")


def _refuse_if_served(path: str) -> None:
    """Refuse (``ConfigError``, one line) a downgrade of the SQLite file at ``path`` while a
    server still runs on it on this host: the process of ``fleetmind serve`` that runs the incident
    worker holds an exclusive ``flock`` on ``<path>.worker.lock`` for as long as it runs
    (:class:`fleetmind.serving.db.LeaderLock`). Probed without waiting and without creating the
    file; a lock file that cannot be opened or locked for another reason is no evidence of a
    server, and the downgrade goes on (a server started with ``FLEETMIND_INCIDENT_WORKER=false``
    holds no such lock and is not seen)."""
    import errno
    import fcntl

    lock = path + ".worker.lock"
    fd = -1
    for mode in (os.O_RDWR, os.O_RDONLY):
        try:
            fd = os.open(lock, mode)
            break
        except OSError:
            continue
    if fd < 0:
        return  # no server has run on this file here (or its lock cannot be read)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as err:
        if err.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
            return
        raise ConfigError(
            f"a server still runs on {path}: {lock} is locked by its incident worker; stop "
            "every replica first, then run the downgrade again; nothing changed "
            "(docs/serving/operations.md#rolling-back)"
        ) from None
    finally:
        os.close(fd)  # closing drops the probe's own lock


def run_downgrade(args: argparse.Namespace) -> int:
    from sqlalchemy.exc import SQLAlchemyError

    from fleetmind.serving import migrations

    order = migrations.revisions()
    if args.to not in order:  # before opening anything
        raise ConfigError(
            f"--to {args.to!r} is not a schema revision of this release ({order[0]} to "
            f"{order[-1]}; a release's newest is in docs/serving/operations.md#rolling-back)"
        )
    db = _open(args, create=False)
    try:
        try:
            rev = migrations.check(db.engine)
        except SQLAlchemyError as err:
            raise _unreachable(db, err) from None
        if rev == args.to:
            print(f"database {_shown(db)}: already at revision {rev}; nothing changed")
            return 0
        refusal = migrations.downgrade_refusal(rev, args.to, order)
        if refusal is not None:
            raise ConfigError(refusal)
        path = migrations.sqlite_path(db.engine.url) if db.is_sqlite else None
        if path is not None:
            _refuse_if_served(path)
        undone = order[order.index(args.to) + 1 : order.index(str(rev)) + 1][::-1]
        drops = "; ".join(f"{r}: {migrations.DOWNGRADE_DROPS.get(r, '?')}" for r in undone)
        plan = (
            f"downgrading {_shown(db)} from {rev} to {args.to} undoes {', '.join(undone)} and "
            f"drops, with their data: {drops} (back up first)"
        )
        if not _confirm(plan, args.yes):
            print("fleetmind: downgrade not confirmed; nothing changed", file=sys.stderr)
            return 1
        try:
            before = migrations.downgrade(db.engine, args.to)
        except SQLAlchemyError as err:
            raise _unreachable(db, err) from None
    finally:
        db.dispose()
    print(
        f"database {_shown(db)}: schema downgraded from {before} to {args.to} (undid {', '.join(undone)})"
    )
    return 0
