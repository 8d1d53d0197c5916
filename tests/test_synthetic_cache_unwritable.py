"""The synthetic openb trace when the cache folder cannot be written.

A container run as a uid without a passwd entry gets ``HOME=/`` and, with a read-only root
filesystem (``readOnlyRootFilesystem: true``), ``/.cache`` cannot be made: ``fleetmind sched
evaluate --trace default`` and ``fleetmind fleet show`` failed with "[Errno 30] Read-only file
system: '/.cache'". Now the trace is generated into a temporary folder (removed at exit) with one
warning naming ``FLEETMIND_CACHE_DIR``. The same holds for a cache folder this user cannot enter,
and the folder generated into the cache is 0755 (not ``mkdtemp``'s 0700), so a cache shared
between uids stays readable.
"""

from __future__ import annotations

import errno
import os
import stat
import subprocess
import sys
import tempfile
import warnings
from pathlib import Path

import pytest

from fleetmind.data import openb_synthetic as syn


@pytest.fixture(autouse=True)
def _fresh(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(syn, "_TEMP_ROOT", None, raising=False)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # the fallback folder goes here
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)


def _expected_files(tmp_path: Path) -> dict[str, bytes]:
    csv = syn.write_synthetic_openb(tmp_path / "ref")
    return {p.name: p.read_bytes() for p in csv.iterdir()}


def test_a_cache_path_under_a_regular_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    monkeypatch.setenv("FLEETMIND_CACHE_DIR", str(blocker / "cache"))
    with pytest.warns(RuntimeWarning, match="FLEETMIND_CACHE_DIR") as rec:
        csv = syn.synthetic_openb_dir()
    assert len(rec) == 1 and "not writable" in str(rec[0].message)
    assert not str(csv).startswith(str(blocker))
    assert {p.name: p.read_bytes() for p in csv.iterdir()} == _expected_files(tmp_path)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # warned once: the second call reuses the folder
        assert syn.synthetic_openb_dir() == csv


@pytest.mark.parametrize("code", [errno.EROFS, errno.EACCES, errno.EPERM])
def test_a_read_only_or_forbidden_cache(
    code: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cache = tmp_path / "ro"
    monkeypatch.setenv("FLEETMIND_CACHE_DIR", str(cache))
    real_mkdir = Path.mkdir

    def refuse(self: Path, *a: object, **kw: object) -> None:
        if self == cache:
            raise OSError(code, os.strerror(code), str(self))
        real_mkdir(self, *a, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(Path, "mkdir", refuse)
    with pytest.warns(RuntimeWarning, match=os.strerror(code)):
        csv = syn.synthetic_openb_dir()
    assert (csv.parent / syn.MARKER).is_file() and not cache.exists()


def test_other_errors_are_not_hidden(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FLEETMIND_CACHE_DIR", str(tmp_path / "c"))

    def full(self: Path, *a: object, **kw: object) -> None:
        raise OSError(errno.ENOSPC, "No space left on device", str(self))

    monkeypatch.setattr(Path, "mkdir", full)
    with pytest.raises(OSError, match="No space left"):
        syn.synthetic_openb_dir()


def test_no_temporary_folder_either_is_a_config_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    monkeypatch.setenv("FLEETMIND_CACHE_DIR", str(blocker / "cache"))
    monkeypatch.setattr(tempfile, "tempdir", str(blocker))  # mkdtemp under a file: ENOTDIR
    with pytest.raises(syn.ConfigError, match="set FLEETMIND_CACHE_DIR to a writable folder"):
        syn.synthetic_openb_dir()


def test_the_temporary_folder_is_removed_at_exit(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    code = (
        "import warnings; warnings.simplefilter('ignore')\n"
        "from fleetmind.data.openb_synthetic import synthetic_openb_dir\n"
        "print(synthetic_openb_dir())\n"
    )
    env = {**os.environ, "FLEETMIND_CACHE_DIR": str(blocker / "cache"), "TMPDIR": str(tmp_path)}
    res = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300
    )
    assert res.returncode == 0, res.stderr[-2000:]
    csv = Path(res.stdout.strip())
    assert csv.is_relative_to(tmp_path) and csv.name == "csv"
    assert not csv.parent.exists()


def test_a_cache_folder_this_user_cannot_enter_falls_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a shared FLEETMIND_CACHE_DIR filled by another uid with a 0700 openb-synthetic-v1/: on Python
    # 3.11 ``Path.is_file`` raises PermissionError there (it ignores only ENOENT, ENOTDIR, EBADF
    # and ELOOP: https://github.com/python/cpython/blob/3.11/Lib/pathlib.py, ``_ignore_error``),
    # and the CLI stopped with ".../SYNTHETIC.md: Permission denied"
    cache = tmp_path / "shared"
    monkeypatch.setenv("FLEETMIND_CACHE_DIR", str(cache))
    other = cache / f"openb-synthetic-v{syn.SYNTHETIC_VERSION}"
    real_is_file = Path.is_file

    def forbidden(self: Path) -> bool:
        if self.is_relative_to(other):
            raise PermissionError(errno.EACCES, "Permission denied", str(self))
        return real_is_file(self)

    monkeypatch.setattr(Path, "is_file", forbidden)
    with pytest.warns(RuntimeWarning, match="Permission denied") as rec:
        csv = syn.synthetic_openb_dir()
    assert len(rec) == 1 and "FLEETMIND_CACHE_DIR" in str(rec[0].message)
    assert not csv.is_relative_to(cache)
    monkeypatch.setattr(Path, "is_file", real_is_file)
    assert {p.name: p.read_bytes() for p in csv.iterdir()} == _expected_files(tmp_path)


def test_the_generated_cache_folder_is_readable_by_other_users(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # tempfile.mkdtemp makes its folder 0700 and the rename into place keeps the mode
    monkeypatch.setenv("FLEETMIND_CACHE_DIR", str(tmp_path / "cache"))
    old_umask = os.umask(0o022)
    try:
        csv = syn.synthetic_openb_dir()
    finally:
        os.umask(old_umask)
    root = csv.parent
    assert root == tmp_path / "cache" / f"openb-synthetic-v{syn.SYNTHETIC_VERSION}"
    assert stat.S_IMODE(root.stat().st_mode) == 0o755
    for p in [csv, *root.rglob("*")]:
        assert p.stat().st_mode & stat.S_IROTH, p  # others may read it
    assert not [p for p in root.parent.iterdir() if p.name.startswith(".openb-synthetic-")]


def test_a_restrictive_umask_still_leaves_every_file_readable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Under umask 027 the csv/ folder would be 0750 and its files 0640: another uid would pass
    the marker check and then fail to read the CSVs. Every folder is 0755, every file 0644."""
    monkeypatch.setenv("FLEETMIND_CACHE_DIR", str(tmp_path / "cache"))
    old_umask = os.umask(0o027)
    try:
        csv = syn.synthetic_openb_dir()
    finally:
        os.umask(old_umask)
    root = csv.parent
    inside = list(root.rglob("*"))
    assert csv in inside and [p for p in inside if p.is_file()]
    for p in [root, *inside]:
        want = 0o755 if p.is_dir() else 0o644
        assert stat.S_IMODE(p.stat().st_mode) == want, (p, oct(p.stat().st_mode))
