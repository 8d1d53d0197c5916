"""Result files of training and evaluation runs.

:func:`write_json` writes a run's summary (the ``--json`` file of ``fleetmind rca ...`` and
``fleetmind sched ...``); the trainers in this package and the CLI share it. Both it and
:func:`write_text_whole` write a file whole or not at all (a temporary file renamed over it).
``--json -`` writes the JSON to stdout instead, alone there while :func:`stdout_for_json` holds
(the command's tables and notes then go to stderr), so that ``... --json - | jq`` reads it.
:func:`json_safe` turns the floats JSON cannot carry (NaN, infinities) into ``null``.
:func:`new_run_dir` makes a training run's own folder.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TextIO

from fleetmind.argtypes import is_stdout
from fleetmind.folders import write_file_whole

_JSON_STDOUT: list[TextIO] = []
"""The stdout of each :func:`stdout_for_json` entered and not left, innermost last."""


def json_safe(value: Any) -> Any:
    """``value`` with every float that JSON cannot carry (NaN, infinities) replaced by None,
    through dicts, lists and tuples (numpy scalars as Python numbers), so that
    ``json.dumps(..., allow_nan=False)`` accepts it.

    In fgd mode ``unallocated_gpu_pct_at_130`` (or ``_100``) is NaN when no pod record lands near
    that arrived level, as on a node list of a few nodes, where one pod moves the arrived % by more
    than a point; the JSON then says null (and ``sched evaluate``'s table ``-``).
    """
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [json_safe(v) for v in value]
    if hasattr(value, "item") and getattr(value, "shape", None) == ():  # a numpy scalar
        return json_safe(value.item())
    return value


@contextlib.contextmanager
def stdout_for_json() -> Iterator[None]:
    """Keep stdout for the JSON of ``--json -`` while the body runs: what the body prints to
    ``sys.stdout`` (tables, notes) goes to ``sys.stderr``, and :func:`write_json` of ``-`` writes
    to the ``sys.stdout`` of entry. A redirection of ``sys.stdout`` alone: a child process or a
    C library writing to file descriptor 1 still reaches stdout."""
    _JSON_STDOUT.append(sys.stdout)
    try:
        with contextlib.redirect_stdout(sys.stderr):
            yield
    finally:
        _JSON_STDOUT.pop()


def write_json(path: str | Path | None, payload: dict[str, Any]) -> None:
    """Write ``payload`` as indented, strict JSON to ``path`` (parent folders created) whole or
    not at all (:func:`write_text_whole`); no-op for ``None``.

    ``-`` (:data:`fleetmind.argtypes.STDOUT`) writes it to stdout, flushed: the stdout of the
    innermost :func:`stdout_for_json`, else ``sys.stdout``. A reader that went away raises
    ``BrokenPipeError`` (:func:`fleetmind.cli.runner.run_main` ends the command quietly, 141).

    A value JSON cannot carry (NaN, an infinity: a metric undefined for the run, such as a
    percentile of no samples) is written as ``null`` (:func:`json_safe`), never as the bare
    ``NaN`` that strict parsers (``jq``, JavaScript's ``JSON.parse``) refuse.
    """
    if path is None:
        return
    text = json.dumps(json_safe(payload), indent=2, sort_keys=False, allow_nan=False)
    if is_stdout(path):
        stream = _JSON_STDOUT[-1] if _JSON_STDOUT else sys.stdout
        stream.write(text + "\n")
        stream.flush()
        return
    write_text_whole(path, text + "\n")


def new_run_dir(parent: str | os.PathLike[str], name: str, create: bool = True) -> tuple[str, Path]:
    """Create the run folder ``parent/name`` (parent folders created) for this run alone:
    ``(run name, folder)``. When a folder of that name is already there (two runs with the same
    seed started in the same second), the name gets a suffix, ``-2``, ``-3``..., so that no two
    runs share a folder (one run's model would replace the other's). ``create=False`` (the other
    ranks of a distributed run, whose rank zero makes the folder): the name and path only.

    Raises:
        OSError: the folder cannot be created (a file in its way, no permission).
    """
    root = Path(parent)
    if not create:
        return name, root / name
    root.mkdir(parents=True, exist_ok=True)
    for i in range(1, 1000):
        run_name = name if i == 1 else f"{name}-{i}"
        try:
            (root / run_name).mkdir()
        except FileExistsError:
            continue
        return run_name, root / run_name
    raise FileExistsError(f"{root}: no free run folder name for {name}")


def write_text_whole(path: str | os.PathLike[str], text: str) -> None:
    """Write ``text`` (UTF-8) to ``path``, parent folders created, whole or not at all where it
    can be renamed over (:func:`fleetmind.folders.write_file_whole`).

    A regular file (or a path not there yet) gets the text through a temporary file in the same
    folder, flushed (``fsync``) and renamed over it (``os.replace``, atomic on POSIX file
    systems): a reader sees the old file or the new one, and a write that fails (a full disk, an
    interrupted run) leaves the old file as it was. The new file keeps the permission bits and,
    where the process may set them, the owner and group of the one it replaces; a new one gets
    ``0666`` less the umask (applied by the kernel). A symbolic link is followed (its target is
    replaced). An existing file this process may not write is refused with the system's reason,
    as a shell redirection refuses it: ``Permission denied`` (``0444``, not root), ``Read-only
    file system`` (a read-only mount), ``Operation not permitted`` (``chattr +i``).

    The file this process's stdout or stderr writes to (``--json /dev/stdout``, on a terminal, a
    pipe or a file ``>`` redirected it to) gets the text through that stream, after what was
    printed before. Written in place instead, as a shell redirection would: anything else that is
    not a regular file (a FIFO, a device); a file with other hard links (a rename would part
    them); a file whose folder this process may not write (the rename needs it; the file itself
    may be writable); and a file the system refuses to rename over (a file bind-mounted on its
    own, another user's file in a sticky folder such as ``/tmp``). Such a write is not whole: one
    that fails part way (a full disk) leaves the file truncated, as ``>`` does.

    Raises:
        PermissionError: the file is there and this process may not write it (``EACCES``,
            ``EPERM``).
        OSError: the one that stopped the write, naming ``path`` (the temporary file is removed).
    """
    Path(path).parent.mkdir(parents=True, exist_ok=True)  # a file in its way: FileExistsError
    try:
        st = os.stat(path)
    except FileNotFoundError:
        st = None
    stream = _std_stream(st)
    if stream is not None:  # --json /dev/stdout: after what the command printed, not over it
        stream.flush()
        stream.write(text)
        stream.flush()
        return
    write_file_whole(path, text.encode("utf-8"))


def _std_stream(st: os.stat_result | None) -> Any:
    """``sys.stdout`` or ``sys.stderr`` when the file of ``st`` is the one they write to (a
    terminal, a pipe, or the file ``>`` redirected them to), else ``None``."""
    if st is None:
        return None
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(AttributeError, OSError, ValueError):
            std = os.fstat(stream.fileno())
            if (std.st_dev, std.st_ino) == (st.st_dev, st.st_ino):
                return stream
    return None
