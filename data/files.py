"""Reading the files a user names (``fleetmind.data.files``).

:func:`read_text` and :func:`read_json` turn every way a named file can be unreadable into one
:class:`~fleetmind.errors.DataError` line that says which file and what is wrong with it: missing,
a folder, unreadable (permissions, I/O), bytes that are not UTF-8, not JSON. The loaders of graph
files, fleet files, role maps, dataset metadata, PetShop targets and recorded Kubernetes lists use
them, so that the CLI prints ``fleetmind: error: ...`` and ``fleetmind serve`` refuses a bad
``--graph`` in one line instead of a traceback.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from fleetmind.errors import DataError


def read_text(path: str | os.PathLike[str], what: str = "file") -> str:
    """The whole file as UTF-8 text.

    Args:
        path: the file.
        what: how the message names it (``"graph file"``, ``"fleet file"``, ...).

    Raises:
        DataError: missing, a folder, not readable, or not UTF-8 (with the offset of the first bad
            byte).
    """
    p = Path(path)
    try:
        raw = p.read_bytes()
    except FileNotFoundError:
        raise DataError(f"{what} not found: {p}") from None
    except IsADirectoryError:
        raise DataError(f"{what} {p} is a folder, not a file") from None
    except NotADirectoryError:
        raise DataError(f"{what} {p}: a part of the path is a file, not a folder") from None
    except OSError as err:
        raise DataError(f"cannot read {what} {p}: {err.strerror or err}") from None
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as err:
        raise DataError(
            f"{what} {p} is not UTF-8 text (byte 0x{raw[err.start]:02x} at offset {err.start})"
        ) from None


def read_json(path: str | os.PathLike[str], what: str = "file") -> Any:
    """The file's JSON value; raises :class:`DataError` as :func:`read_text` does, and for text
    that is not JSON (with line and column)."""
    text = read_text(path, what)
    try:
        return json.loads(text)
    except json.JSONDecodeError as err:
        raise DataError(f"{what} {Path(path)} is not valid JSON: {err}") from None


def require_dir(path: str | os.PathLike[str], what: str = "folder") -> Path:
    """``path`` as a :class:`Path` when it is an existing folder; :class:`DataError` otherwise."""
    p = Path(path)
    if not p.exists():
        raise DataError(f"{what} not found: {p}")
    if not p.is_dir():
        raise DataError(f"{what} {p} is a file, not a folder")
    return p
