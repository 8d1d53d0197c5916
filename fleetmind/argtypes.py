"""Command-line value types shared by every layer's ``add_arguments`` (the CLI in
:mod:`fleetmind.cli` and the training modules that define their own options).

* :func:`seed`: an ``argparse`` type for seeds, ``0 <= seed < 2**32``, the range every generator
  FleetMind seeds takes (NumPy refuses negative seeds; Lightning's ``seed_everything`` refuses
  seeds from ``2**32`` on); a value outside is a one-line usage error rather than a traceback
  from deep inside a run;
* :func:`finite_float`: an ``argparse`` type for numbers that must be finite;
* :func:`positive_int` and :func:`nonnegative_int`: ``argparse`` types for counts (``>= 1`` and
  ``>= 0``), so that a negative count is a usage error up front rather than an ``IndexError`` or a
  silent empty run later;
* :func:`check_writable_file` and :func:`check_creatable`: an output path checked before any
  work, so that a bad ``--json`` or ``--out`` is a one-line error, not a run lost at its end;
  :func:`output_file` and :func:`output_path` are the same check as ``argparse`` types;
  :func:`write_problem` says why a path cannot be written (no permission, or a read-only file
  system), for every such check; ``--json -`` (:data:`STDOUT`, :func:`is_stdout`) is stdout,
  which the check lets through, and ``-`` for any other output option a one-line error
  (:func:`refuse_stdout`);
* :func:`utf8_text`: an ``argparse`` type for text that names something (a cluster, a node), not a
  file: the bytes of a non-ASCII argument under a locale that cannot decode them (``LC_ALL=C``
  without Python's UTF-8 mode) read as the UTF-8 they are.
"""

from __future__ import annotations

import argparse
import math
import os
from pathlib import Path
from typing import Any

from fleetmind.errors import ConfigError

SEED_LIMIT = 2**32
"""Seeds lie in ``[0, SEED_LIMIT)``."""

STDOUT = "-"
"""The output path that means stdout (``--json - | jq``), as for ``tar -f -`` or ``curl -o -``."""


def is_stdout(path: Any) -> bool:
    """Whether the output path ``path`` (a ``str``, a path-like or ``None``) is :data:`STDOUT`."""
    return isinstance(path, str | os.PathLike) and os.fspath(path) == STDOUT


def seed(text: str) -> int:
    """``argparse`` type: ``text`` as a seed in ``[0, 2**32)``.

    Raises:
        argparse.ArgumentTypeError: not an integer, or outside that range.
    """
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer seed, got {text!r}") from None
    if not 0 <= value < SEED_LIMIT:
        raise argparse.ArgumentTypeError(f"a seed lies in [0, 2**32), got {value}")
    return value


def finite_float(text: str) -> float:
    """``argparse`` type: ``text`` as a finite float (``nan`` and ``inf`` parse as floats, and
    then pass every ``>= 0`` check or loop forever).

    Raises:
        argparse.ArgumentTypeError: not a number, or not finite.
    """
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"expected a finite number, got {text!r}")
    return value


_ESCAPED_BYTES = range(0xDC80, 0xDD00)
"""The lone surrogates ``surrogateescape`` decodes an undecodable byte ``0xXX`` to (``U+DCXX``)."""


def utf8_text(text: str) -> str:
    """``argparse`` type: ``text`` (an argument that names something: a cluster, a node, a
    context; never a file) as the UTF-8 it was typed in.

    Python decodes the command line with the locale's encoding; under ``LC_ALL=C`` without UTF-8
    mode (``PYTHONUTF8=0 PYTHONCOERCECLOCALE=0``) that is ASCII, and each byte of ``prod-é`` comes
    as a lone surrogate (``prod-\\udcc3\\udca9``) that no JSON, YAML or pydantic model takes. Such
    an argument is re-read from its bytes as UTF-8; one without surrogates is returned unchanged
    (a locale that decoded it, such as Latin-1, meant what it decoded). A file path is not passed
    through here: under such a locale Python opens files by those surrogates (the file system
    encoding is ASCII too), and ``é`` itself would not open.

    Raises:
        argparse.ArgumentTypeError: the bytes are not UTF-8 either (shown as ``\\xXX``).
    """
    if not any(ord(c) in _ESCAPED_BYTES for c in text):
        return text
    raw = os.fsencode(text)
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        shown = raw.decode("ascii", "backslashreplace")
        raise argparse.ArgumentTypeError(f"not UTF-8 text: {shown}") from None


def _int(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None


def positive_int(text: str) -> int:
    """``argparse`` type: ``text`` as an integer ``>= 1`` (a count of items, steps, repetitions).

    Raises:
        argparse.ArgumentTypeError: not an integer, or below 1.
    """
    value = _int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def nonnegative_int(text: str) -> int:
    """``argparse`` type: ``text`` as an integer ``>= 0`` (a count that may be zero: warm-up
    steps, an optional limit).

    Raises:
        argparse.ArgumentTypeError: not an integer, or negative.
    """
    value = _int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {value}")
    return value


def write_problem(path: str | os.PathLike[str], mode: int = os.W_OK) -> str | None:
    """Why this process may not use ``path`` as ``mode`` asks (``os.W_OK``, plus ``os.X_OK`` for a
    folder to create files in): ``None`` when :func:`os.access` allows it, ``"read-only file
    system"`` when ``path`` lies on one (``statvfs`` ``ST_RDONLY``: ``access(2)`` then fails with
    ``EROFS``, for root too, and no permission change helps), else ``"permission denied"``."""
    if os.access(path, mode):
        return None
    try:
        if os.statvfs(path).f_flag & os.ST_RDONLY:
            return "read-only file system"
    except (OSError, AttributeError):  # gone meanwhile, or no statvfs (Windows)
        pass
    return "permission denied"


def check_creatable(path: Path, flag: str) -> None:
    """Check that ``path`` can be created: its nearest existing ancestor is a writable folder
    (the missing folders between are created by the writer).

    Raises:
        ConfigError: naming ``flag``, the path and the ancestor that blocks it.
    """
    anc = path.parent
    while not anc.exists() and anc != anc.parent:
        anc = anc.parent
    if not anc.is_dir():
        raise ConfigError(f"{flag} {path}: {anc} is a file, where a folder is needed")
    problem = write_problem(anc, os.W_OK | os.X_OK)
    if problem:
        raise ConfigError(f"{flag} {path}: cannot write in {anc} ({problem})")


def refuse_stdout(
    path: str | os.PathLike[str] | None,
    flag: str,
    *,
    stdout_without: bool = False,
    no_json: bool = False,
) -> None:
    """Refuse ``-`` (:data:`STDOUT`) as the value of the output option ``flag`` when ``flag`` is
    not ``--json``: only ``--json -`` writes to stdout; any other output would make a file named
    ``-`` in the working folder and print nothing, where its help promised stdout. Nothing for
    ``--json``, for another path, or for an empty ``flag`` (an ``argparse`` type, which does not
    know its option: :func:`output_file`). ``stdout_without``: the command writes to stdout when
    ``flag`` is left out (``graph schema``), which the message says instead; ``no_json``: the
    command has no ``--json`` (``graph build``, ``rca generate``) and writes nothing to stdout.

    Raises:
        ConfigError: one line naming ``flag`` and how to name a file ``-`` (``./-``).
    """
    if flag and flag != "--json" and is_stdout(path):
        if no_json:
            raise ConfigError(
                f"{flag} -: this command writes nothing to stdout; give ./- to name it -"
            )
        way = (
            f"leave out {flag} to write to stdout"
            if stdout_without
            else "only --json writes to stdout"
        )
        raise ConfigError(f"{flag} -: {way}; give ./- for a file named -")


def check_writable_file(path: str | Path | None, flag: str) -> None:
    """Check, before any work, that the file ``path`` can be written: not a folder, writable if
    it exists, else :func:`check_creatable`; nothing for ``None``, nor for ``--json -`` (stdout:
    :func:`fleetmind.training.io.write_json` writes it there). ``-`` for any other ``flag`` is
    refused (:func:`refuse_stdout`).

    Raises:
        ConfigError: naming ``flag``, the path and what blocks it.
    """
    if path is None or (flag == "--json" and is_stdout(path)):  # stdout: nothing to check
        return
    refuse_stdout(path, flag)
    p = Path(path)
    if p.is_dir():
        raise ConfigError(f"{flag} {p}: a folder is there; {flag} names a file")
    if p.exists():
        problem = write_problem(p)
        if problem:
            raise ConfigError(f"{flag} {p}: cannot write this file ({problem})")
        return
    check_creatable(p, flag)


def output_file(text: str) -> str:
    """``argparse`` type: ``text`` as the path of a file to write, checked by
    :func:`check_writable_file` when the options are parsed (so a bad path is a usage error before
    any work, not a run lost at its end); returned unchanged (a ``str``).

    Raises:
        argparse.ArgumentTypeError: the file cannot be written there (a folder in its place, a
            file where a folder is needed, no permission, a read-only file system).
    """
    try:
        check_writable_file(text, "")
    except ConfigError as err:
        raise argparse.ArgumentTypeError(str(err).strip()) from None
    return text


def output_path(text: str) -> Path:
    """:func:`output_file` returning a :class:`pathlib.Path`."""
    return Path(output_file(text))
