"""Folders written whole: a model folder's files all at once or not at all.

:func:`write_folder_whole` writes the files of a model folder into a new folder beside it and
swaps that in for the old one, so that a reader sees the old files or the new ones and a write
that fails (a full disk, an interrupted run) leaves the old folder as it was. Standard library
only, so every layer may use it (``rca``'s fitted models, ``training``'s releases);
:func:`write_file_whole` does the same for one file (``training``'s result files through
:func:`fleetmind.training.io.write_text_whole`, ``data``'s variant traces and fleet files).
:func:`remove_at_exit` removes a temporary folder when the process exits, however it exits.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import ctypes.util
import errno
import os
import re
import secrets
import shutil
import stat
import sys
import time
from collections.abc import Collection, Mapping
from pathlib import Path

_AT_EXIT: list[str] = []
"""Folders :func:`remove_at_exit` is to remove."""


def remove_at_exit(folder: str | os.PathLike[str]) -> None:
    """Remove the temporary ``folder`` when the process exits (``atexit``), or earlier through
    :func:`remove_now`, which an exit cut short by ``os._exit`` (a second Ctrl-C or SIGTERM while
    Python's exit runs: :mod:`fleetmind.cli.runner`) calls, since it skips ``atexit``."""
    _AT_EXIT.append(os.fspath(folder))
    atexit.register(shutil.rmtree, os.fspath(folder), ignore_errors=True)


def remove_now() -> None:
    """Remove the folders :func:`remove_at_exit` was given, now (the ``atexit`` calls then find
    them gone)."""
    while _AT_EXIT:
        shutil.rmtree(_AT_EXIT.pop(), ignore_errors=True)


def write_folder_whole(
    folder: str | os.PathLike[str],
    files: Mapping[str, bytes | str | os.PathLike[str]],
    remove: Collection[str] = (),
) -> Path:
    """Write ``files`` into the folder ``folder`` (parent folders created) all at once or not at
    all, so that a reader sees the old set of files or the new one, never a mix, and a write that
    fails (a full disk, an interrupted run) leaves the old folder as it was.

    ``files`` maps a file name to its content: ``bytes`` as they are, a ``str`` as UTF-8 text, a
    ``Path`` (any ``os.PathLike``) the file whose bytes to copy. Entries already in the folder
    that ``files`` does not name are kept (hard-linked or copied into the new folder), except the
    regular files and symbolic links that ``remove`` names, which are removed with the same write
    (a release removes the earlier model's files that the new model does not write, which would
    be read as the new model's: :data:`RELEASE_MODEL_FILES`). A folder is never removed, whatever
    its name, nor any entry ``remove`` does not name (an operator's notes, a run's output folder,
    an MLflow store, a file system's ``lost+found``).

    The files are written (``fsync``) into a new folder beside it, which then takes the old one's
    place: one atomic exchange (``renameat2(RENAME_EXCHANGE)``, Linux), else two renames (for a
    moment no folder is there); the old folder is then removed. The new folder keeps the old one's
    permission bits and, where the process may set them, owner and group; a new one gets ``0777``
    less the umask. A file that replaces one of the old folder keeps that file's permission bits
    (whatever the umask) and, where the process may set them, its owner and group; a new file gets
    ``0666`` less the umask. A symbolic link is followed (its target folder is replaced).
    Temporary folders beside it that a write stopped by a crash left (``.<name>.<pid>.<hex>.tmp``
    or ``.old`` of a process no longer running), and files set aside in it by such a write (below),
    are removed first.

    Written file by file instead, each whole (a temporary file renamed over it, its bits kept), in
    the order of ``files``, where the folder cannot be swapped: its parent this process may not
    write; it is a mount point; it is, or holds, the process's working folder (a swap would leave
    the process in the removed old folder, where relative paths no longer resolve); or the system
    refuses to rename it (``EXDEV``: overlayfs renaming a folder of an image's lower layer;
    ``EPERM``, ``EBUSY``: a seccomp filter, a mount point). The files ``remove`` names are then
    first renamed aside (hidden names, ``.<name>.<pid>.<hex>.old``; a rename that fails puts the
    moved ones back and leaves the old files as they were), then the new files are renamed in, then
    the set-aside files are deleted (best effort: one that cannot be deleted stays under its hidden
    name, which no loader reads, and no later write carries). A failure of the first renaming-in
    puts the set-aside files back (the old files as they were); a later one may leave some files
    new and the others old (the set-aside ones then deleted).

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
    _remove_stale(target)
    if st is not None:
        _remove_stale_aside(target)
    if _in_place(target, st):
        _write_in_place(target, files, remove)
        return path
    tmp = _temporary_dir(target)
    try:
        _fill(tmp, target, st, files, remove)
        try:
            if st is None:
                os.rename(tmp, target)
            else:
                _swap(tmp, target)
        except OSError as err:
            if err.errno not in _NO_SWAP:
                raise
            shutil.rmtree(tmp, ignore_errors=True)
            _write_in_place(target, files, remove)
            return path
        _fsync_dir(target.parent)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return path


def write_file_whole(path: str | os.PathLike[str], data: bytes) -> None:
    """Write ``data`` to the file ``path`` (parent folders created), whole or not at all where it
    can be renamed over (below: in place otherwise).

    A regular file (or a path not there yet) gets the bytes through a temporary file in the same
    folder, flushed (``fsync``) and renamed over it (``os.replace``, atomic on POSIX file
    systems): a reader sees the old file or the new one, and a write that fails (a full disk,
    ``ulimit -f``, an interrupted run, ``Ctrl-C``) leaves the old file as it was and removes the
    temporary file. The new file keeps the permission bits and, where the process may set them,
    the owner and group of the one it replaces (an owner it may not set, ``EPERM``, or one a user
    namespace cannot map, ``EINVAL``, is left as the writer's, as :func:`write_folder_whole`
    does); a new one gets ``0666`` less the umask. A symbolic link is followed (its target is
    replaced).

    Written in place instead, as a shell redirection (``>``) would (the file opened without
    ``O_CREAT``, which a sticky folder refuses for another user's file under
    ``fs.protected_regular``, then truncated, written and, a regular file, flushed): anything that
    is not a regular file (``/dev/stdout``, a FIFO, a device); a file with other hard links (a
    rename would part them); a file whose folder this process may not write (the rename needs
    it); and a file the system refuses to rename over (``EXDEV``, ``EPERM``, ``EBUSY``: a file
    bind-mounted on its own, a file of another user in a sticky folder such as ``/tmp``, a
    seccomp filter), the temporary file then removed. Such a write is not whole: one that fails
    part way (a full disk) leaves the file truncated, a part of the new bytes in it, as ``>``
    does. An existing regular file this process may not write is refused, as ``>`` refuses it,
    not replaced, with the system's own error: ``Permission denied`` (``0444``, not root),
    ``Read-only file system`` (a read-only mount, ``docker -v f:/x:ro``), ``Operation not
    permitted`` (``chattr +i``).

    Raises:
        PermissionError: the file is there and this process may not write it (``EACCES``,
            ``EPERM``).
        FileExistsError: a file is where a parent folder is needed (from ``mkdir``).
        OSError: the one that stopped the write (``EROFS``: a read-only file system; ``ENOSPC``:
            a full disk), naming ``path`` (``filename``), never the temporary file; the temporary
            file is removed.
    """
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    try:
        try:
            st = os.stat(path)
        except FileNotFoundError:
            st = None
        target = Path(os.path.realpath(path))
        if st is not None and stat.S_ISREG(st.st_mode) and not os.access(path, os.W_OK):
            _check_writable(path)
        if st is not None and (
            not stat.S_ISREG(st.st_mode) or st.st_nlink > 1 or not os.access(target.parent, os.W_OK)
        ):
            _write_file_in_place(path, data)
            return
        tmp = _staged_file(target, data)
        renamed = False
        try:
            os.replace(tmp, target)
            renamed = True
        except OSError as err:
            if err.errno not in _NO_SWAP:
                raise
        finally:
            if not renamed:  # a refused rename, another error, or Ctrl-C: no temporary file left
                with contextlib.suppress(OSError):
                    os.unlink(tmp)
        if not renamed:
            _write_file_in_place(path, data)  # this file cannot be renamed over here
            return
        _fsync_dir(target.parent)
    except OSError as err:
        if err.errno is None:
            raise
        reason = err.strerror if err.strerror is not None else os.strerror(err.errno)
        raise OSError(err.errno, reason, os.fspath(path)) from None


def _check_writable(path: str | os.PathLike[str]) -> None:
    """Raise the error the system gives for writing the file ``path`` (``os.access`` said no):
    ``EACCES``, ``EROFS`` (a read-only mount), ``EPERM`` (an immutable file). Opened for writing
    only (no ``O_TRUNC``, no ``O_CREAT``: nothing changes); where that succeeds anyway (``access``
    checks the real user, not the effective one) the write goes on."""
    fd = os.open(path, os.O_WRONLY | getattr(os, "O_CLOEXEC", 0))
    os.close(fd)


def _write_file_in_place(path: str | os.PathLike[str], data: bytes) -> None:
    """Write ``data`` into the file ``path`` itself (truncated first), as ``>`` would, and flush
    it (``fsync``) where it is a regular file. An existing file is opened without ``O_CREAT``
    (which ``fs.protected_regular`` refuses for another user's file in a sticky folder, root
    too); a missing one is made (``0666`` less the umask)."""
    cloexec = getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_TRUNC | cloexec)
    except FileNotFoundError:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | cloexec, 0o666)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
        f.flush()
        if stat.S_ISREG(os.fstat(f.fileno()).st_mode):  # a pipe or a terminal has no fsync
            os.fsync(f.fileno())


RELEASE_MODEL_FILES: frozenset[str] = frozenset(
    {
        # the policy, as the service and ``sched evaluate --policies ppo`` load it
        "policy.onnx",
        "policy.pt",
        "ppo.zip",
        "metadata.json",
        "model_card.md",
        "train_summary.json",
        # the behaviour clone and the PPO stage's last policy
        "clone.onnx",
        "clone.pt",
        "clone_train_summary.json",
        "final.onnx",
        "ppo_policy.onnx",
        # the teachers (``rl.named_policies.teacher_file`` prefers ``teacher_strand.json``)
        "teacher.json",
        "teacher_strand.json",
        "teacher_mean.json",
    }
)
"""The model files a placement recipe's ``--release`` writes to a released model folder
(``models/placement/``, ``models/placement-dynamic/``; ``remove`` of :func:`write_folder_whole`):
those of the earlier release that the new run does not write are removed, so that none is read as
the new model's. Every other entry stays (an operator's notes, a run's output folder or
``mlflow.db`` when the release folder is the working folder, a mount's ``lost+found``)."""

_NO_SWAP = (errno.EXDEV, errno.EPERM, errno.EBUSY)
"""Errors of a folder rename that mean this folder cannot be renamed here (not a failed write):
the folder is then written file by file."""


def _in_place(target: Path, st: os.stat_result | None) -> bool:
    """Whether ``target`` (a real path; ``st`` its ``stat``, ``None``: not there) is written file
    by file: its parent not writable, a mount point, or the working folder or one above it."""
    if not os.access(target.parent, os.W_OK | os.X_OK):
        return True
    if st is None:
        return False
    if target.is_mount():
        return True
    try:
        cwd = os.path.realpath(os.getcwd())
    except OSError:  # the working folder was removed
        return False
    return cwd == str(target) or cwd.startswith(str(target).rstrip(os.sep) + os.sep)


def _write_in_place(
    target: Path,
    files: Mapping[str, bytes | str | os.PathLike[str]],
    remove: Collection[str] = (),
) -> None:
    """Write ``files`` into the folder ``target`` (made if missing), each whole: every file is
    written and flushed beside its old one first, then the files ``remove`` names (and ``files``
    does not) are renamed aside, then each new file is renamed over its old one, then the set-aside
    files are deleted. A write that fails (a full disk) or a renaming-aside that fails leaves every
    old file as it was; only the renaming-in can be cut short; a set-aside file that cannot be
    deleted stays under its hidden name. A renaming-in that fails before any new file is in puts
    the set-aside files back (the old set as it was); one that fails later deletes them, as a
    write that succeeds does (the new set partly in)."""
    target.mkdir(exist_ok=True)
    staged: list[tuple[str, Path]] = []
    try:
        for name, content in files.items():
            staged.append((_staged_file(target / name, content), target / name))
        aside = _set_aside(target, [n for n in remove if n not in files])
        renamed_in = False
        try:
            while staged:
                tmp, path = staged[0]
                os.replace(tmp, path)
                renamed_in = True
                staged.pop(0)
        except BaseException:
            if not renamed_in:  # nothing new in yet: the old set as it was
                for moved, original in reversed(aside):
                    with contextlib.suppress(OSError):
                        os.rename(moved, original)
                aside = []
            _delete(aside)
            raise
        _delete(aside)
    finally:
        for tmp, _ in staged:
            with contextlib.suppress(OSError):
                os.unlink(tmp)


def _delete(aside: list[tuple[Path, Path]]) -> None:
    """Delete the set-aside files of :func:`_set_aside` (best effort)."""
    for moved, _ in aside:
        with contextlib.suppress(OSError):
            os.unlink(moved)


def _removable(path: Path) -> bool:
    """Whether ``path`` is a regular file or a symbolic link (what ``remove`` may remove)."""
    try:
        mode = os.lstat(path).st_mode
    except OSError:
        return False
    return stat.S_ISREG(mode) or stat.S_ISLNK(mode)


def _set_aside(target: Path, names: Collection[str]) -> list[tuple[Path, Path]]:
    """Rename the regular files and links of the folder ``target`` that ``names`` names to hidden
    names beside them; returns ``(hidden, original)`` pairs. On an error the ones already moved are
    put back (the folder as it was) and the error is raised."""
    moved: list[tuple[Path, Path]] = []
    try:
        for name in sorted(names):
            path = target / name
            if _removable(path):
                hidden = _temporary_name(path, "old")
                os.rename(path, hidden)
                moved.append((hidden, path))
    except BaseException:
        for hidden, path in reversed(moved):
            with contextlib.suppress(OSError):
                os.rename(hidden, path)
        raise
    return moved


def _fill(
    tmp: Path,
    target: Path,
    st: os.stat_result | None,
    files: Mapping[str, bytes | str | os.PathLike[str]],
    remove: Collection[str] = (),
) -> None:
    """Make the new folder ``tmp``: the old folder ``target``'s bits and kept entries (``st``:
    its ``stat``, ``None``: no old folder; ``remove``: :func:`write_folder_whole`'s, the regular
    files and links not carried; nor a file set aside by a file-by-file write,
    ``.<name>.<pid>.<hex>.old``) and ``files``, flushed to disk."""
    if st is not None:
        os.chmod(tmp, st.st_mode & 0o7777)
        with contextlib.suppress(OSError):  # EPERM; EINVAL: an owner a user namespace cannot map
            os.chown(tmp, st.st_uid, st.st_gid)
        for entry in os.scandir(target):
            if entry.name in files or _set_aside_file(entry):
                continue
            if entry.name in remove and _removable(Path(entry.path)):
                continue
            _carry(entry, tmp / entry.name)
    for name, content in files.items():
        _write_new(tmp / name, content, _old_file(target / name) if st is not None else None)
    _fsync_dir(tmp)


def _old_file(path: Path) -> os.stat_result | None:
    """``stat`` of the regular file ``path`` of the old folder (``None``: none there)."""
    try:
        st = os.stat(path, follow_symlinks=False)  # a link's target gives the new file nothing
    except OSError:
        return None
    return st if stat.S_ISREG(st.st_mode) else None


_RENAME_EXCHANGE = 2
"""``renameat2`` flag (``<linux/fs.h>``): swap two paths atomically."""

_AT_FDCWD = -100
"""``<fcntl.h>``: paths relative to the working folder."""


def _swap(new: Path, old: Path) -> None:
    """Put the folder ``new`` in ``old``'s place and remove ``old``'s folder. On an error ``old``
    is as it was (and ``new`` still there)."""
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
        if rc == 0:  # new now holds the old folder
            shutil.rmtree(new, ignore_errors=True)
            return
        if err not in (errno.ENOSYS, errno.EINVAL, errno.ENOTSUP, *_NO_SWAP):
            raise OSError(err, os.strerror(err), str(old))
    # no exchange here (an older kernel or file system, a seccomp filter refusing renameat2; an
    # EXDEV or EBUSY the first rename meets again, before anything moved)
    aside = _temporary_name(old, "old")
    os.rename(old, aside)
    try:
        os.rename(new, old)
    except BaseException:
        os.rename(aside, old)
        raise
    shutil.rmtree(aside, ignore_errors=True)


_STALE = re.compile(r"\.(?P<name>.+)\.(?P<pid>[0-9]+)\.[0-9a-f]{8}\.(?:tmp|old)")
"""Name of a temporary folder of :func:`_temporary_name` (the folder's name, the writer's pid)."""


def _remove_stale(target: Path) -> None:
    """Remove the temporary folders beside ``target`` that a write of a process no longer running
    left (a crash between making and swapping them) and that are older than
    :data:`STALE_AFTER_S`; best effort. The age matters where processes of other PID namespaces
    (two containers sharing one models volume) write beside it: their pids mean nothing here."""
    with contextlib.suppress(OSError):
        entries = list(os.scandir(target.parent))
        now = time.time()
        for entry in entries:
            m = _STALE.fullmatch(entry.name)
            if m is None or m["name"] != target.name or not entry.is_dir(follow_symlinks=False):
                continue
            st = entry.stat(follow_symlinks=False)  # a rename sets ctime, not mtime: an old
            # folder set aside a moment ago keeps the mtime of its last change
            old = now - max(st.st_mtime, st.st_ctime) > STALE_AFTER_S
            if old and not pid_running(int(m["pid"])):
                shutil.rmtree(entry.path, ignore_errors=True)


def _set_aside_file(entry: os.DirEntry[str]) -> bool:
    """Whether ``entry`` is a regular file or link named as :func:`_set_aside` names the files it
    renames aside (``.<name>.<pid>.<hex>.old``), which no loader reads and no write carries."""
    m = _STALE.fullmatch(entry.name)
    return m is not None and entry.name.endswith(".old") and _removable(Path(entry.path))


def _remove_stale_aside(target: Path) -> None:
    """Remove the files of the folder ``target`` that a file-by-file write of a process no longer
    running set aside and left (a crash before it deleted them) and that are older than
    :data:`STALE_AFTER_S` (as :func:`_remove_stale`); best effort."""
    with contextlib.suppress(OSError):
        entries = list(os.scandir(target))
        now = time.time()
        for entry in entries:
            if not _set_aside_file(entry):
                continue
            st = entry.stat(follow_symlinks=False)
            m = _STALE.fullmatch(entry.name)
            old = now - max(st.st_mtime, st.st_ctime) > STALE_AFTER_S
            if m is not None and old and not pid_running(int(m["pid"])):
                with contextlib.suppress(OSError):
                    os.unlink(entry.path)


STALE_AFTER_S = 3600.0
"""Seconds after which a dead writer's temporary folder is removed (:func:`_remove_stale`)."""


def pid_running(pid: int) -> bool:
    """Whether a process ``pid`` runs (one this process may not signal counts as running)."""
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError, ValueError):
        return True
    return True


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


def _write_new(
    path: Path, content: bytes | str | os.PathLike[str], like: os.stat_result | None = None
) -> None:
    """Write a new file ``path`` and flush it to disk: ``like``'s permission bits (whatever the
    umask) and, where the process may set them, owner and group; with no ``like``, ``0666`` less
    the umask. With a ``like``, the file is made ``0600`` and gets ``like``'s owner and bits only
    after the write: never more readable than its final bits allow while it is being written."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666 if like is None else 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(_content(content))
        f.flush()
        if like is not None:  # after the write, which would clear set-user-ID for a non-root
            _same_owner_and_bits(f.fileno(), like)
        os.fsync(f.fileno())


def _same_owner_and_bits(fd: int, like: os.stat_result) -> None:
    """Give the open file ``fd`` the owner and group of ``like`` (where the process may) and then
    its permission bits (a change of owner clears set-user-ID). When the owner or group could not
    be kept, set-user-ID, set-group-ID and sticky are left off, as GNU ``cp -p`` does (coreutils
    ``copy.c``): a root set-user-ID file must not become one of the writer's."""
    now = os.fstat(fd)
    if (like.st_uid, like.st_gid) != (now.st_uid, now.st_gid):
        with contextlib.suppress(OSError):  # EPERM; EINVAL: an owner a user namespace cannot map
            os.fchown(fd, like.st_uid, like.st_gid)
        now = os.fstat(fd)
    kept = (like.st_uid, like.st_gid) == (now.st_uid, now.st_gid)
    os.fchmod(fd, like.st_mode & (0o7777 if kept else 0o0777))


def _staged_file(path: Path, content: bytes | str | os.PathLike[str]) -> str:
    """Write ``content`` into a temporary file beside ``path`` and flush it; returns its path, to
    be renamed over ``path``. A regular file at ``path`` gives it its bits and, where the process
    may, owner and group; anything else there (a symbolic link) gives nothing."""
    st = _old_file(path)
    # 0600 until the write is done and the old owner and bits are set (never more readable)
    fd, tmp = temporary_file(path, 0o666 if st is None else 0o600)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(_content(content))
            f.flush()
            if st is not None:  # the old owner and bits, after the write (which clears set-user-ID)
                _same_owner_and_bits(f.fileno(), st)
            os.fsync(f.fileno())
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    return tmp


def _fsync_dir(folder: Path) -> None:
    """Flush ``folder``'s entries to disk (where the system allows it)."""
    with contextlib.suppress(OSError):
        fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def temporary_file(target: Path, mode: int) -> tuple[int, str]:
    """A new file beside ``target`` (created with ``mode``, less the umask), open for writing:
    ``(descriptor, path)``."""
    for _ in range(100):
        tmp = str(target.parent / f".{target.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
        try:
            return os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode), tmp
        except FileExistsError:
            continue
    raise FileExistsError(f"no free temporary name beside {target}")
