"""``fleetmind serve`` names a read-only file system under its SQLite database as such.

``access(2)`` refuses ``W_OK`` with ``EROFS`` on a read-only mount, for root too (Linux man page
access(2): "EROFS: Write permission was requested for a file on a read-only filesystem"), so
"give the service's user write access" cannot help there. Neither a read-only mount nor a
non-root user is needed: ``os.access`` and ``os.statvfs`` are replaced for the one folder.
"""

from __future__ import annotations

import os
from pathlib import Path
from types import SimpleNamespace

import pytest
from sqlalchemy.engine import make_url

from fleetmind.cli import serve
from fleetmind.errors import ConfigError


def _refuse_under(root: Path, read_only: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """``os.access`` refuses writes under ``root``; ``os.statvfs`` says whether it is mounted
    read-only."""
    real_access, real_statvfs = os.access, os.statvfs

    def access(path: object, mode: int, *args: object, **kw: object) -> bool:
        if str(path).startswith(str(root)) and mode & os.W_OK:
            return False
        return real_access(path, mode, *args, **kw)  # type: ignore[arg-type]

    def statvfs(path: object) -> object:
        if str(path).startswith(str(root)):
            return SimpleNamespace(f_flag=os.ST_RDONLY if read_only else 0)
        return real_statvfs(path)  # type: ignore[arg-type]

    monkeypatch.setattr(os, "access", access)
    monkeypatch.setattr(os, "statvfs", statvfs)


def _db(path: Path) -> SimpleNamespace:
    """What :func:`serve._check_sqlite_writable` reads of a ``Database``."""
    return SimpleNamespace(
        engine=SimpleNamespace(url=make_url(f"sqlite:///{path}")), is_sqlite=True
    )


@pytest.mark.parametrize("exists", [True, False], ids=["file", "folder"])
@pytest.mark.parametrize("read_only", [True, False], ids=["read-only", "permission"])
def test_the_sqlite_check_names_a_read_only_file_system(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, exists: bool, read_only: bool
) -> None:
    db = tmp_path / "fm.db"
    if exists:
        db.write_bytes(b"")
    _refuse_under(tmp_path, read_only, monkeypatch)
    with pytest.raises(ConfigError) as info:
        serve._check_sqlite_writable(_db(db))  # noqa: SLF001
    msg = str(info.value)
    assert "\n" not in msg and str(db) in msg and "FLEETMIND_DATABASE_URL" in msg
    if read_only:
        assert "(read-only file system)" in msg and "write access" not in msg, msg
    else:
        assert "(permission denied)" in msg and "write access" in msg, msg


def test_a_writable_database_passes(tmp_path: Path) -> None:
    db = tmp_path / "fm.db"
    db.write_bytes(b"")
    serve._check_sqlite_writable(_db(db))  # noqa: SLF001
