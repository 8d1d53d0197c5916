"""Where a benchmark result came from: the command, the commit, the date, the machine, the versions.

Every benchmark that writes a JSON starts it with :func:`provenance`, so that each file in
``benchmarks/results/<area>/`` says how to reproduce it and ``python -m benchmarks.index`` can list it::

    from benchmarks.provenance import RESULTS, load_now, provenance

    load0 = load_now()
    ...  # the measurement
    out = {**provenance(__spec__.name, argv, load_start=load0), "figures": ...}

The keys are ``command`` (``python -m <module> <args>``, quoted for a POSIX shell), ``commit`` (``git rev-parse HEAD`` of
the checkout that ``fleetmind`` was imported from, or ``None`` when it is not a git checkout, e.g.
an installed wheel), ``code_modified`` (that checkout's library folders had uncommitted changes; both
``None``, with ``mixed_checkouts`` listing the roots, when ``fleetmind`` and its subpackages come
from different checkouts: :func:`fleetmind.provenance.code_roots`), ``date`` (UTC, ISO 8601), ``machine`` (platform, processor, cores, load averages at the
start and end) and ``versions`` (Python, torch, numpy and any ``packages`` asked for).
"""

from __future__ import annotations

import datetime as dt
import shlex
import shutil
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from fleetmind.provenance import LIBRARY_FOLDERS, code_root, git_commit, load_now, machine, versions

__all__ = [
    "AREAS",
    "LIBRARY_FOLDERS",
    "RESULTS",
    "REPO_ROOT",
    "code_root",
    "command",
    "git_commit",
    "load_now",
    "machine",
    "provenance",
    "versions",
]

REPO_ROOT = Path(__file__).resolve().parents[1]
"""The checkout's root folder (the one holding ``pyproject.toml``)."""

RESULTS = REPO_ROOT / "benchmarks" / "results"
"""Where the benchmarks write their JSON results, one folder per area (:data:`AREAS`)."""

AREAS = ("rca", "placement", "dynamic", "serving")
"""The folders of :data:`RESULTS`, named after the benchmark packages. A result goes to the area it
measures, whichever script wrote it: dynamic-mode runs of ``benchmarks.placement.headroom`` go to
``dynamic/``, the dated experiments' results to the area they studied (``benchmarks/README.md``)."""


def fleetmind_command() -> list[str]:
    """The argv prefix that runs the ``fleetmind`` CLI in a child process: the console script
    next to this interpreter, else one on ``PATH``, else ``python -m fleetmind.cli``."""
    exe = Path(sys.executable).with_name("fleetmind")
    if exe.exists():
        return [str(exe)]
    found = shutil.which("fleetmind")
    return [found] if found else [sys.executable, "-m", "fleetmind.cli"]


def command(module: str, argv: Sequence[str] | None = None) -> str:
    """The command line that reruns ``module`` with ``argv`` (default: this process's arguments),
    each argument quoted for a POSIX shell where it needs it (``--note '2-core machine'``), so that
    the line pastes back into a shell as the same arguments."""
    args = [str(a) for a in (sys.argv[1:] if argv is None else argv)]
    return shlex.join(["python", "-m", module, *args])


def provenance(
    module: str,
    argv: Sequence[str] | None = None,
    *,
    load_start: list[float] | None = None,
    packages: Iterable[str] = (),
    **machine_extra: Any,
) -> dict[str, Any]:
    """The provenance keys a result JSON starts with (see the module docstring).

    Args:
        module: the benchmark's module name; pass ``__spec__.name``.
        argv: its arguments when ``main(argv)`` was called directly; ``None`` reads ``sys.argv``.
        load_start: :func:`load_now` taken before the measurement.
        packages: more distributions whose versions matter to the figures.
        machine_extra: more facts about the machine (CPU model, idle driver, ...).
    """
    return {
        "command": command(module, argv),
        **git_commit(),
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "machine": machine(load_start, **machine_extra),
        "versions": versions(packages),
    }
