"""An output path (and `fleetmind serve`'s SQLite database) on a read-only file system is
reported as such, not as "permission denied".

``access(2)`` refuses ``W_OK`` with ``EROFS`` on a read-only mount, for root too (Linux man page
access(2), "EROFS: Write permission was requested for a file on a read-only filesystem"), so no
permission change helps; :func:`fleetmind.argtypes.write_problem` tells the two apart through
``statvfs``'s ``ST_RDONLY`` flag. Neither a read-only mount nor a non-root user is needed here:
``os.access`` and ``os.statvfs`` are replaced.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace

import pytest
from sqlalchemy.engine import make_url

from fleetmind import argtypes
from fleetmind.cli import serve
from fleetmind.cli.rca import check_model_folder
from fleetmind.errors import ConfigError
from fleetmind.training.rca_fit import check_out_dir


def _refuse_under(
    root: Path, read_only: bool, monkeypatch: pytest.MonkeyPatch, writes_only: bool = False
) -> None:
    """``os.access`` refuses every path under ``root``; ``os.statvfs`` says whether its file
    system is mounted read-only. ``writes_only``: refuse ``W_OK`` only (reads still pass).
    """
    real_access, real_statvfs = os.access, os.statvfs

    def access(path: object, mode: int, *args: object, **kw: object) -> bool:
        if str(path).startswith(str(root)) and (mode & os.W_OK or not writes_only):
            return False
        return real_access(path, mode, *args, **kw)  # type: ignore[arg-type]

    def statvfs(path: object) -> object:
        if str(path).startswith(str(root)):
            return SimpleNamespace(f_flag=os.ST_RDONLY if read_only else 0)
        return real_statvfs(path)  # type: ignore[arg-type]

    monkeypatch.setattr(os, "access", access)
    monkeypatch.setattr(os, "statvfs", statvfs)


CHECKS: dict[str, Callable[[Path], object]] = {
    "check_creatable": lambda p: argtypes.check_creatable(p / "new" / "m1", "--out"),
    "check_writable_file": lambda p: argtypes.check_writable_file(p / "fit.json", "--json"),
    "check_model_folder": lambda p: check_model_folder(p / "empty", "--release"),
    "check_out_dir": lambda p: check_out_dir(p / "empty"),
}


@pytest.mark.parametrize("name", sorted(CHECKS))
@pytest.mark.parametrize("read_only", [True, False])
def test_the_reason_names_a_read_only_file_system(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str, read_only: bool
) -> None:
    (tmp_path / "fit.json").write_text("{}")
    (tmp_path / "empty").mkdir()
    _refuse_under(tmp_path, read_only, monkeypatch)
    with pytest.raises(ConfigError) as info:
        CHECKS[name](tmp_path)
    msg = str(info.value)
    assert "\n" not in msg and "cannot write" in msg
    if read_only:
        assert msg.endswith("(read-only file system)") and "permission" not in msg
    else:
        assert msg.endswith("(permission denied)")


def test_output_file_type_says_read_only(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _refuse_under(tmp_path, True, monkeypatch)
    with pytest.raises(argparse.ArgumentTypeError, match=r"\(read-only file system\)$"):
        argtypes.output_file(str(tmp_path / "out.json"))


def test_write_problem(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert argtypes.write_problem(tmp_path, os.W_OK | os.X_OK) is None
    _refuse_under(tmp_path, True, monkeypatch)
    assert argtypes.write_problem(tmp_path) == "read-only file system"
    monkeypatch.setattr(os, "statvfs", lambda p: (_ for _ in ()).throw(OSError("gone")))
    assert argtypes.write_problem(tmp_path) == "permission denied"


# `fleetmind serve`'s SQLite database: the same refusal for the file and its folder


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
    _refuse_under(tmp_path, read_only, monkeypatch, writes_only=True)
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
