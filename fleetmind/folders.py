"""Folders written whole: a model folder's files all at once or not at all.

:func:`write_folder_whole` writes the files of a model folder into a new folder beside it and
swaps that in for the old one, so that a reader sees the old files or the new ones and a write
that fails (a full disk, an interrupted run) leaves the old folder as it was. Standard library
only, so every layer may use it (``rca``'s fitted models, ``training``'s releases);
:func:`fleetmind.training.io.write_text_whole` does the same for one text file.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import errno
import os
import secrets
import shutil
import stat
import sys
from collections.abc import Mapping
from pathlib import Path


def write_folder_whole(
    folder: str | os.PathLike[str], files: Mapping[str, bytes | str | os.PathLike[str]]
) -> Path:
    """Write ``files`` into the folder ``folder`` (parent folders created) all at once or not at
    all, so that a reader sees the old set of files or the new one, never a mix, and a write that
    fails (a full disk, an interrupted run) leaves the old folder as it was.

    ``files`` maps a file name to its content: ``bytes`` as they are, a ``str`` as UTF-8 text, a
    ``Path`` (any ``os.PathLike``) the file whose bytes to copy. Files already in the folder that
    ``files`` does not name are kept (hard-linked or copied into the new folder).

    The files are written (``fsync``) into a new folder beside it, which then takes the old one's
    place: one atomic exchange (``renameat2(RENAME_EXCHANGE)``, Linux), else two renames (for a
    moment no folder is there); the old folder is then removed. The new folder keeps the old one's
    permission bits and, where the process may set them, owner and group; a new one gets ``0777``
    less the umask. A symbolic link is followed (its target folder is replaced). A folder whose
    parent this process may not write, or a mount point, is written file by file instead, each
    whole (a temporary file renamed over it), in the order of ``files``.

    Returns:
        ``folder`` as a ``Path``.

    Raises:
        NotADirectoryError: a file that is not a folder is at ``folder``.
        OSError: the one that stopped the write (the new folder is removed).
    """
    path = Path(folder)
    target = Path(os.path.realpath(path))
    target.parent.mkdir(parents=True, exist_ok=True)
    try:
        st = os.stat(target)
    except FileNotFoundError:
        st = None
    if st is not None and not stat.S_ISDIR(st.st_mode):
        raise NotADirectoryError(errno.ENOTDIR, "not a folder", str(path))
    if not os.access(target.parent, os.W_OK | os.X_OK) or (st is not None and target.is_mount()):
        target.mkdir(exist_ok=True)
        for name, content in files.items():
            _replace_file(target / name, content)
        return path
    tmp = _temporary_dir(target)
    try:
        if st is not None:
            os.chmod(tmp, st.st_mode & 0o7777)
            with contextlib.suppress(PermissionError):
                os.chown(tmp, st.st_uid, st.st_gid)
            for entry in os.scandir(target):
                if entry.name not in files:
                    _carry(entry, tmp / entry.name)
        for name, content in files.items():
            _write_new(tmp / name, content)
        _fsync_dir(tmp)
        if st is None:
            os.rename(tmp, target)
        else:
            _exchange(tmp, target)  # tmp is now the old folder
            shutil.rmtree(tmp, ignore_errors=True)
        _fsync_dir(target.parent)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return path


_RENAME_EXCHANGE = 2
"""``renameat2`` flag (``<linux/fs.h>``): swap two paths atomically."""

_AT_FDCWD = -100
"""``<fcntl.h>``: paths relative to the working folder."""


def _exchange(new: Path, old: Path) -> None:
    """Put the folder ``new`` in ``old``'s place, and ``old``'s folder at ``new``."""
    if sys.platform.startswith("linux"):
        try:
            libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
            rc = libc.renameat2(
                _AT_FDCWD, os.fsencode(new), _AT_FDCWD, os.fsencode(old), _RENAME_EXCHANGE
            )
        except (OSError, AttributeError):  # no renameat2 in this libc
            rc, err = -1, errno.ENOSYS
        else:
            err = ctypes.get_errno()
        if rc == 0:
            return
        if err not in (errno.ENOSYS, errno.EINVAL, errno.ENOTSUP):
            raise OSError(err, os.strerror(err), str(old))
    aside = _temporary_name(old, "old")
    os.rename(old, aside)
    try:
        os.rename(new, old)
    except BaseException:
        os.rename(aside, old)
        raise
    os.rename(aside, new)


def _temporary_name(target: Path, kind: str) -> Path:
    """A name beside ``target`` for a temporary folder (not created)."""
    return target.parent / f".{target.name}.{os.getpid()}.{secrets.token_hex(4)}.{kind}"


def _temporary_dir(target: Path) -> Path:
    """A new empty folder beside ``target`` (``0777`` less the umask)."""
    for _ in range(100):
        tmp = _temporary_name(target, "tmp")
        try:
            os.mkdir(tmp, 0o777)
            return tmp
        except FileExistsError:
            continue
    raise FileExistsError(f"no free temporary name beside {target}")


def _carry(entry: os.DirEntry[str], dest: Path) -> None:
    """Put ``entry`` (of the old folder) at ``dest`` in the new one: hard link, else copy."""
    if entry.is_symlink():
        os.symlink(os.readlink(entry.path), dest)
    elif entry.is_dir():
        shutil.copytree(entry.path, dest, symlinks=True, copy_function=_link_or_copy)
    else:
        _link_or_copy(entry.path, dest)


def _link_or_copy(src: str | os.PathLike[str], dest: str | os.PathLike[str]) -> None:
    try:
        os.link(src, dest, follow_symlinks=False)
    except OSError:
        shutil.copy2(src, dest)


def _content(content: bytes | str | os.PathLike[str]) -> bytes:
    if isinstance(content, bytes):
        return content
    if isinstance(content, str):
        return content.encode("utf-8")
    return Path(content).read_bytes()


def _write_new(path: Path, content: bytes | str | os.PathLike[str]) -> None:
    """Write a new file ``path`` (``0666`` less the umask) and flush it to disk."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    with os.fdopen(fd, "wb") as f:
        f.write(_content(content))
        f.flush()
        os.fsync(f.fileno())


def _replace_file(path: Path, content: bytes | str | os.PathLike[str]) -> None:
    """Write ``path`` whole: a temporary file beside it, renamed over it (its bits kept)."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        st = None
    fd, tmp = _temporary(path, 0o666 if st is None else st.st_mode & 0o7777)
    try:
        if st is not None:
            os.fchmod(fd, st.st_mode & 0o7777)  # the old bits, whatever the umask
        with os.fdopen(fd, "wb") as f:
            f.write(_content(content))
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def _fsync_dir(folder: Path) -> None:
    """Flush ``folder``'s entries to disk (where the system allows it)."""
    with contextlib.suppress(OSError):
        fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def _temporary(target: Path, mode: int) -> tuple[int, str]:
    """A new file beside ``target`` (created with ``mode``, less the umask), open for writing:
    ``(descriptor, path)``."""
    for _ in range(100):
        tmp = str(target.parent / f".{target.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
        try:
            return os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode), tmp
        except FileExistsError:
            continue
    raise FileExistsError(f"no free temporary name beside {target}")
