"""Result files of training and evaluation runs.

:func:`write_json` writes a run's summary (the ``--json`` file of ``fleetmind rca ...`` and
``fleetmind sched ...``); the trainers in this package and the CLI share it. Both it and
:func:`write_text_whole` write a file whole or not at all (a temporary file renamed over it).
"""

from __future__ import annotations

import contextlib
import json
import os
import stat
import tempfile
from pathlib import Path
from typing import Any


def write_json(path: str | Path | None, payload: dict[str, Any]) -> None:
    """Write ``payload`` as indented JSON to ``path`` (parent folders created) whole or not at
    all (:func:`write_text_whole`); no-op for ``None``."""
    if path is None:
        return
    write_text_whole(path, json.dumps(payload, indent=2, sort_keys=False) + "\n")


def write_text_whole(path: str | os.PathLike[str], text: str) -> None:
    """Write ``text`` (UTF-8) to ``path``, parent folders created, whole or not at all.

    A regular file (or a path not there yet) gets the text through a temporary file in the same
    folder, flushed (``fsync``) and renamed over it (``os.replace``, atomic on POSIX file
    systems): a reader sees the old file or the new one, and a write that fails (a full disk, an
    interrupted run) leaves the old file as it was. The new file keeps the permission bits of the
    one it replaces, else ``0666`` less the umask. A symbolic link is followed (its target is
    replaced). Anything else (``/dev/stdout``, a pipe, a FIFO) is written in place, as a shell
    redirection would.

    Raises:
        OSError: the one that stopped the write (the temporary file is removed).
    """
    Path(path).parent.mkdir(parents=True, exist_ok=True)  # a file in its way: FileExistsError
    try:
        st = os.stat(path)
    except FileNotFoundError:
        st = None
    if st is not None and not stat.S_ISREG(st.st_mode):
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
        return
    target = Path(os.path.realpath(path))
    if st is not None:
        mode = st.st_mode & 0o7777
    else:
        umask = os.umask(0)
        os.umask(umask)
        mode = 0o666 & ~umask
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
