"""Helpers shared by the CLI group modules."""

from __future__ import annotations

import argparse
import fnmatch
import os
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any


def add_group(
    subparsers: argparse._SubParsersAction, name: str, help_text: str
) -> tuple[argparse.ArgumentParser, argparse._SubParsersAction]:
    """Add a command group and return ``(group_parser, its_subparsers)``.

    The group parser is stored as ``group_parser`` in the parsed namespace, so that ``fleetmind
    <group>`` without a sub-command prints the group's help (:func:`fleetmind.cli.main`).
    """
    group = subparsers.add_parser(name, help=help_text, description=help_text)
    group.set_defaults(group_parser=group)
    return group, group.add_subparsers(dest="command", metavar="COMMAND")


DATASET_FILES = ("*.jsonl", "meta.json", "graph.csv", "graphs/*", ".fleetmind_cache/*")
"""Files of a dataset folder (``rca generate --out``) a command reads: :data:`FolderInput`."""

MODEL_FILES = (
    "*.onnx",
    "*.pt",
    "*.zip",
    "*.ckpt",
    "config.json",
    "metadata.json",
    "teacher*.json",
    "MLmodel",
)
"""Files of a model folder (``--model``) the loaders read: :data:`FolderInput`."""

SCENARIO_FILES = ("*.csv", "*.yaml", "*.yml", "roles*.json")
"""Files of a PetShop-format scenario folder (``--scenario``) the commands read."""

FolderInput = tuple[str, Any, Sequence[str]]
"""``(flag, value, patterns)``: an input option, its value (a path, a list of paths, an openb
name, an ``sqlite:///`` URL or ``None``) and, for a folder, the ``fnmatch`` patterns (relative to
the folder, ``*`` crossing ``/``) of the files in it that the command reads."""


def model_input(model: str | None, released: str | os.PathLike[str]) -> FolderInput:
    """The model input of a command, for :func:`refuse_input_as_output`: ``--model`` when it is
    given, else the released model folder ``released`` that the command reads instead (named
    ``the released model <folder>`` in the refusal)."""
    if model is not None:
        return ("--model", model, MODEL_FILES)
    return (f"the released model {released}", str(released), MODEL_FILES)


def _local_file(value: Any) -> str | None:
    """The local path ``value`` names: an ``sqlite:///PATH`` URL's path, else ``value`` itself;
    ``None`` for other URLs (``models:/``, ``http://``, ...)."""
    text = str(value)
    if text.startswith("sqlite:///"):
        return text[len("sqlite:///") :].split("?", 1)[0] or None
    if "://" in text or text.startswith("models:/") or text.startswith("runs:/"):
        return None
    return text


def _may_hold(rel_dir: str, pattern: str) -> bool:
    """Whether files under the folder ``rel_dir`` (relative, ending in ``/``) may match
    ``pattern``: its literal part before the first wildcard leads into the folder or past it."""
    cut = min((i for i, ch in enumerate(pattern) if ch in "*?["), default=len(pattern))
    literal = pattern[:cut]
    return rel_dir.startswith(literal) or literal.startswith(rel_dir)


def _file_key(path: str | os.PathLike[str]) -> tuple[int, int] | None:
    """``(st_dev, st_ino)`` of the file ``path`` (links followed), or None when it is not there."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino


def _within(path: str, top: str) -> bool:
    """Whether ``path`` (links resolved) is ``top`` or inside it (``top``: a real path)."""
    real = os.path.realpath(path)
    return real == top or real.startswith(top.rstrip(os.sep) + os.sep)


def _same_file_in(out: str, root: str, patterns: Sequence[str]) -> bool:
    """Whether a file matching ``patterns`` in the folder ``root`` (its sub-folders and the linked
    folders inside it included) is the existing file ``out`` under another name: a hard link of
    it, or a symbolic link to it. Only folders that may hold a match are listed and only matching
    names are stat'ed; when ``out`` has a single hard link, only the symbolic links among them. A
    link to a folder outside ``root`` is not followed (a link to ``/`` would walk the machine):
    an output that is a hard link of a file only such a link reaches is not found."""
    try:
        st = os.stat(out)
    except OSError:
        return False
    key, hard = (st.st_dev, st.st_ino), st.st_nlink > 1
    top = os.path.realpath(root)
    seen: set[tuple[int, int]] = set()
    stack = [(root, "")]
    while stack:
        folder, rel = stack.pop()
        folder_key = _file_key(folder)
        if folder_key is None or folder_key in seen:  # a link loop or a folder seen already
            continue
        seen.add(folder_key)
        try:
            entries = list(os.scandir(folder))
        except OSError:
            continue
        for entry in entries:
            name = rel + entry.name
            try:
                is_dir = entry.is_dir()
            except OSError:
                continue
            if is_dir:
                if entry.is_symlink() and not _within(entry.path, top):
                    continue  # a link out of the folder (to / at worst): not walked
                if any(_may_hold(name + "/", pat) for pat in patterns):
                    stack.append((entry.path, name + "/"))
                continue
            if not any(fnmatch.fnmatchcase(name, pat) for pat in patterns):
                continue
            if not hard and not entry.is_symlink():
                continue  # another name of a file with one link can only be a symbolic link
            if _file_key(entry.path) == key:
                return True
    return False


def _names_input(out: str, value: str, patterns: Sequence[str]) -> bool:
    """Whether the existing file ``out`` is the input ``value`` (a file: the same file, links and
    hard links included) or one of the files matching ``patterns`` in the folder ``value`` (under
    its own name, or as a hard link or a symbolic link of it)."""
    if os.path.isdir(value):
        root = os.path.realpath(value)
        real = os.path.realpath(out)
        if real.startswith(root.rstrip(os.sep) + os.sep):
            rel = Path(os.path.relpath(real, root)).as_posix()
            if any(fnmatch.fnmatchcase(rel, pat) for pat in patterns):
                return True
        return _same_file_in(out, value, patterns)
    try:
        return os.path.samefile(out, value)
    except OSError:  # the input is not there (an openb name, a file not made yet)
        return False


def refuse_input_as_output(
    out: str | os.PathLike[str] | None, flag: str, inputs: Iterable[FolderInput]
) -> None:
    """Refuse, before any work, an output file ``out`` (given as ``flag``) that is one of the
    command's input files, which writing the result would replace: a ``--json`` that names the
    ``--trace`` it reads, a file of the ``--data`` folder. Nothing for ``out`` ``None`` or not yet
    there (no input is a file that does not exist), nor for ``--json -`` (stdout, not the file
    ``./-``).

    Raises:
        ConfigError: one line naming ``flag``, the path and the input option.
    """
    from fleetmind import argtypes
    from fleetmind.data.errors import ConfigError

    if out is None or (flag == "--json" and argtypes.is_stdout(out)) or not os.path.isfile(out):
        return
    for in_flag, value, patterns in inputs:
        values = value if isinstance(value, (list, tuple)) else [value]
        for v in values:
            path = None if v is None else _local_file(v)
            if path is not None and _names_input(str(out), path, patterns):
                raise ConfigError(
                    f"{flag} {out} is an input of this command ({in_flag}); choose another path"
                )


def refuse_same_output(outputs: Sequence[tuple[str, str | os.PathLike[str] | None]]) -> None:
    """Refuse two output options (``(flag, path)`` pairs; ``None``: not given) that name one file:
    the second write would replace the first. ``--json -`` is stdout, no file, so it names none;
    ``-`` for any other option is refused (:func:`fleetmind.argtypes.refuse_stdout`).

    Raises:
        ConfigError: one line naming both flags and the path, or the option given ``-``.
    """
    from fleetmind import argtypes
    from fleetmind.data.errors import ConfigError

    seen: dict[Any, str] = {}
    for flag, path in outputs:
        argtypes.refuse_stdout(path, flag)
        if path is None or argtypes.is_stdout(path):  # --json -: stdout, not the file ./-
            continue
        # the same path, or (for files already there) the same file under another name: a
        # symbolic link or a hard link
        keys = [os.path.realpath(path), _file_key(path)]
        keys = [k for k in keys if k is not None]
        for key in keys:
            if key in seen:
                raise ConfigError(
                    f"{flag} {path} is also {seen[key]}: one would replace the other; "
                    "choose another path"
                )
        for key in keys:
            seen[key] = flag
