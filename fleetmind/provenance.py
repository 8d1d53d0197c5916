"""Where a result or a model came from: the checkout's commit and the versions it ran with.

Shared by the benchmarks (every result JSON) and the model writers (each artifact's
``config.json`` holds ``provenance``), so that a model folder found on its own still says which
code and which torch made it::

    >>> from fleetmind.provenance import artifact_provenance
    >>> sorted(artifact_provenance())                                   # doctest: +SKIP
    ['code_modified', 'commit', 'created', 'versions']
"""

from __future__ import annotations

import datetime as dt
import hashlib
import importlib.metadata as md
import os
import platform
import subprocess
from collections.abc import Iterable
from pathlib import Path
from typing import Any

LIBRARY_FOLDERS = (
    "fleetmind",
    "data",
    "rca",
    "envs",
    "rl",
    "training",
    "serving",
    "models",
    "cli",
    "benchmarks",
)
"""Folders whose uncommitted changes make ``code_modified`` true: the library, the CLI that drives
it and the benchmark scripts (a result written by an edited script does not come from the commit
it names). Result files under ``benchmarks/results/`` do not count."""


MAPPED_PACKAGES = ("data", "rca", "envs", "rl", "training", "serving", "models", "cli")
"""The subpackages of ``fleetmind`` that a source checkout keeps in top-level folders of the same
names, mapped under ``fleetmind`` by ``package-dir`` in ``pyproject.toml`` (``rca/`` is
``fleetmind.rca``); in a wheel they lie inside the ``fleetmind`` folder."""


def code_root() -> Path:
    """The folder above the imported ``fleetmind`` package: a checkout's root in a source install."""
    return Path(__file__).resolve().parents[1]


def code_roots() -> list[Path]:
    """Every checkout root that ``fleetmind`` and its :data:`MAPPED_PACKAGES` are imported from,
    :func:`code_root` first: one root normally; more when they come from different checkouts
    (a second checkout's ``fleetmind/`` found first on ``sys.path`` while the environment's editable
    install maps ``fleetmind.serving`` and the others to the first checkout's folders).

    Found with :func:`importlib.util.find_spec`, which imports ``fleetmind`` (light) but none of
    the subpackages. A subpackage inside the ``fleetmind`` folder (a wheel) has ``fleetmind``'s
    root.
    """
    import importlib.util

    first = code_root()
    package_dir = Path(__file__).resolve().parent
    roots = [first]
    for name in MAPPED_PACKAGES:
        try:
            spec = importlib.util.find_spec(f"fleetmind.{name}")
        except (ImportError, ValueError):
            continue
        if spec is None:
            continue
        if spec.origin and spec.origin not in ("namespace", "built-in", "frozen"):
            folder = Path(spec.origin).resolve().parent
        elif spec.submodule_search_locations:
            folder = Path(next(iter(spec.submodule_search_locations))).resolve()
        else:
            continue
        root = first if folder.parent == package_dir else folder.parent
        if root not in roots:
            roots.append(root)
    return roots


def git_commit(root: Path | None = None) -> dict[str, Any]:
    """``{"commit": HEAD or None, "code_modified": bool or None}`` of the checkout at ``root``
    (default: :func:`code_root`, so a run with another checkout's environment names that one).

    Both are ``None`` outside a git checkout (an installed wheel) or without ``git``. Without
    ``root``, when ``fleetmind`` and its subpackages come from different checkouts
    (:func:`code_roots`), no one commit made the run: both are ``None`` and ``mixed_checkouts``
    lists the roots (absolute paths, :func:`code_root` first).
    """
    if root is None:
        roots = code_roots()
        if len(roots) > 1:
            return {
                "commit": None,
                "code_modified": None,
                "mixed_checkouts": [str(r) for r in roots],
            }
    root = root or code_root()

    def git(*args: str) -> str:
        return subprocess.run(
            ["git", *args], cwd=root, capture_output=True, text=True, check=True, timeout=30
        ).stdout.strip()

    try:
        if Path(git("rev-parse", "--show-toplevel")).resolve() != root:
            raise OSError(f"{root} is not the root of a git checkout")
        head = git("rev-parse", "HEAD")
        dirty = git("status", "--porcelain", "--", *LIBRARY_FOLDERS, ":(exclude)benchmarks/results")
    except (OSError, subprocess.SubprocessError):
        return {"commit": None, "code_modified": None}
    return {"commit": head, "code_modified": bool(dirty)}


def versions(packages: Iterable[str] = ()) -> dict[str, str | None]:
    """Python, torch and numpy versions, and those of ``packages`` (``None`` if not installed)."""
    out: dict[str, str | None] = {"python": platform.python_version()}
    for pkg in ("torch", "numpy", *packages):
        try:
            out[pkg] = md.version(pkg)
        except md.PackageNotFoundError:
            out[pkg] = None
    return out


def artifact_provenance(packages: Iterable[str] = ()) -> dict[str, Any]:
    """``{"commit", "code_modified", "created" (UTC, ISO 8601), "versions"}`` for a model's
    ``config.json``; ``versions`` always names ``fleetmind`` and ``torch_geometric`` too."""
    return {
        **git_commit(),
        "created": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "versions": versions(("fleetmind", "torch_geometric", *packages)),
    }


def file_sha256(path: str | Path) -> str:
    """SHA-256 (hex) of a file's bytes, read in 1 MiB blocks."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def graphs_sha256(data: str | Path) -> str | None:
    """One SHA-256 (hex) over every ``graphs/*.json`` of the RCA dataset folder ``data``, in name
    order: each file's name, its size in bytes and its bytes, so that a renamed, edited, added or
    removed graph changes it; None without a ``graphs/`` folder. ``rca evaluate --json`` records it
    as ``graphs_sha256`` and ``rca train`` logs it as ``data_graphs_sha256``, so a result and the
    model it scores can be matched to the same topologies. Read in 1 MiB blocks."""
    folder = Path(data) / "graphs"
    if not folder.is_dir():
        return None
    h = hashlib.sha256()
    for path in sorted(p for p in folder.glob("*.json") if p.is_file()):
        h.update(f"{path.name}\0{path.stat().st_size}\0".encode())
        with path.open("rb") as fh:
            for block in iter(lambda fh=fh: fh.read(1 << 20), b""):
                h.update(block)
    return h.hexdigest()


def input_file(given: str, path: str | Path) -> dict[str, str]:
    """One input file of a run, ``{"given": as the user named it (an openb trace name, a relative
    CSV path), "path": absolute, "sha256": of its bytes}``, so that a result says which bytes it
    read even when the name later means another file."""
    resolved = Path(path).resolve()
    return {"given": str(given), "path": str(resolved), "sha256": file_sha256(resolved)}


def load_now() -> list[float] | None:
    """The 1, 5 and 15-minute load averages, rounded (``None`` where the OS has none)."""
    if not hasattr(os, "getloadavg"):
        return None
    return [round(x, 2) for x in os.getloadavg()]


def machine(load_start: list[float] | None = None, **extra: Any) -> dict[str, Any]:
    """Platform, processor, core count, Python, and the load averages at the start
    (``load_start``) and now, plus ``extra``."""
    return {
        "platform": platform.platform(),
        "processor": platform.processor() or platform.machine(),
        "cpu_count": os.cpu_count(),
        "python": platform.python_version(),
        "loadavg_start": load_start,
        "loadavg_end": load_now(),
        **extra,
    }


def run_provenance(
    command: str, load_start: list[float] | None, packages: Iterable[str] = ()
) -> dict[str, Any]:
    """The provenance keys a result JSON starts with (those of ``benchmarks/provenance.py``, which
    the CLI may not import: DESIGN.md): ``command``, ``commit`` and ``code_modified``
    (:func:`git_commit`), ``date`` (UTC, ISO 8601), ``machine`` (:func:`machine`) and
    ``versions`` (:func:`versions` of ``fleetmind`` and ``packages``)."""
    return {
        "command": command,
        **git_commit(),
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "machine": machine(load_start),
        "versions": versions(("fleetmind", *packages)),
    }
