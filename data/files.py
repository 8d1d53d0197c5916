"""Reading the files a user names (``fleetmind.data.files``).

:func:`read_text` and :func:`read_json` turn every way a named file can be unreadable into one
:class:`~fleetmind.errors.DataError` line that says which file and what is wrong with it: missing,
a folder, unreadable (permissions, I/O), bytes that are not UTF-8, not JSON (or JSON that Python
cannot hold: an integer of more than 4,300 digits, nesting too deep). A UTF-8 byte order mark (what
Excel's and Notepad's "UTF-8" exports write first) is dropped. The loaders of graph
files, fleet files, role maps, dataset metadata, PetShop targets and recorded Kubernetes lists use
them, so that the CLI prints ``fleetmind: error: ...`` and ``fleetmind serve`` refuses a bad
``--graph`` in one line instead of a traceback.
"""

from __future__ import annotations

import codecs
import json
import os
import sys
from pathlib import Path
from typing import Any

from fleetmind.errors import DataError


def read_text(path: str | os.PathLike[str], what: str = "file") -> str:
    """The whole file as UTF-8 text, without a leading byte order mark (as ``utf-8-sig`` reads it).

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
    skip = len(codecs.BOM_UTF8) if raw.startswith(codecs.BOM_UTF8) else 0
    try:
        return raw[skip:].decode("utf-8")
    except UnicodeDecodeError as err:
        at = skip + err.start  # an offset into the file, its byte order mark included
        raise DataError(
            f"{what} {p} is not UTF-8 text (byte 0x{raw[at]:02x} at offset {at})"
        ) from None


def read_json(path: str | os.PathLike[str], what: str = "file") -> Any:
    """The file's JSON value; raises :class:`DataError` as :func:`read_text` does, and as
    :func:`parse_json` does for text that is not JSON (with line and column)."""
    return parse_json(read_text(path, what), f"{what} {Path(path)}")


def parse_json(text: str, where: str) -> Any:
    """``json.loads(text)``, with every way the text can fail as one :class:`DataError` line that
    starts with ``where`` (e.g. ``"graph file g.json"``): not JSON (line and column), an integer
    of more than ``sys.get_int_max_str_digits()`` digits (4,300 by default: CPython refuses to
    convert longer ones, CVE-2020-10735), or arrays/objects nested deeper than the interpreter's
    recursion limit. A leading byte order mark is ignored."""
    if text.startswith("\ufeff"):
        text = text[1:]
    try:
        return json.loads(text)
    except json.JSONDecodeError as err:
        raise DataError(f"{where} is not valid JSON: {err}") from None
    except ValueError as err:  # int(): "Exceeds the limit (4300 digits) for integer string ..."
        raise DataError(f"{where} is malformed: {value_error_text(err)}") from None
    except RecursionError:
        raise DataError(f"{where} is malformed: arrays or objects nested too deeply") from None


def value_error_text(err: ValueError) -> str:
    """What a ``ValueError`` of a parser says, in one line; Python's refusal of a long integer
    becomes ``"a number has more than 4,300 digits"`` (its advice to call
    ``sys.set_int_max_str_digits()`` is for programmers, not for whoever wrote the file)."""
    text = " ".join(str(err).split())
    if text.startswith("Exceeds the limit") and "integer string conversion" in text:
        return f"a number has more than {sys.get_int_max_str_digits():,} digits"
    return text


def require_dir(path: str | os.PathLike[str], what: str = "folder") -> Path:
    """``path`` as a :class:`Path` when it is an existing folder; :class:`DataError` otherwise."""
    p = Path(path)
    if not p.exists():
        raise DataError(f"{what} not found: {p}")
    if not p.is_dir():
        raise DataError(f"{what} {p} is a file, not a folder")
    return p
