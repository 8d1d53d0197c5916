"""``fleetmind.cli``, the folder ``cli/``.

The ``fleetmind`` command line: :func:`main` and the parser it builds. The CLI is the one layer
that may import every other (it trains, evaluates, starts the service); nothing in the library
imports it. ``python -m fleetmind.cli`` runs it as the ``fleetmind`` console script does.

:data:`GROUPS` names the command groups and their help lines. For each one, :func:`build_parser`
imports the module ``fleetmind.cli.<group>`` (the file ``cli/<group>.py``) and calls its
``register(subparsers, name, help_text) -> None`` with the group's name and help line. ``register``
adds the group's parser (through :func:`fleetmind.cli.common.add_group` when the group has
sub-commands, which also stores the group parser as ``group_parser`` so that a bare ``fleetmind
<group>`` prints its help) and sets ``func`` on every leaf parser: ``func(args: argparse.Namespace)
-> int | None``, the exit status (``None`` counts as 0). Group modules import heavy libraries
(torch, mlflow, ...) inside their handlers, so that ``fleetmind --help`` stays fast.

Errors caused by the user (:class:`fleetmind.errors.FleetMindError`) print one line,
``fleetmind: error: <reason>``, and exit with status 2; so does an :class:`OSError` about a path
(``fleetmind: error: <path>: <reason>``), which no handler caught: a file the command could not
read or write is the user's to fix, and the path says which; and a write that found no room (a full
disk, ``ulimit -f``), which flushing or closing a file reports without its name. A reader of stdout that goes away
(``fleetmind ... | head``) ends the command quietly with status 141 (:func:`_stdout_closed`); a
``BrokenPipeError`` while stdout is still open (a child process or a connection that went away) is
an :class:`OSError` like any other.
"""

from __future__ import annotations

import argparse
import errno
import importlib
import os
import select
import sys
from collections.abc import Sequence

from fleetmind.errors import FleetMindError

GROUPS: dict[str, str] = {
    "fleet": "fleet topology: show clusters, nodes and GPU link matrices",
    "rca": "root-cause analysis: generate incidents, train and evaluate the GAT, PetShop benchmark",
    "sched": "placement: evaluate heuristics and the PPO agent, train the agent",
    "serve": "run the inference service (FastAPI) on the embedded defaults",
    "graph": "dependency graph: build it from a Kubernetes cluster, print its JSON Schema",
    "demo": "end-to-end demo: data, models, service, an alert storm and a placement",
    "replay": "post a stored alert storm (examples/*.json) to a running service, as Alertmanager would",
    "data": "public datasets: download openb or PetShop and verify them",
    "doctor": "check the metrics FleetMind needs on a live Prometheus (--prometheus URL)",
}


def build_parser() -> argparse.ArgumentParser:
    """Build the full argument parser with every command group registered."""
    parser = argparse.ArgumentParser(
        prog="fleetmind",
        description="FleetMind: root-cause analysis and learned GPU placement for multi-cluster AI fleets.",
    )
    parser.add_argument("--version", action="version", version=f"fleetmind {_version()}")
    sub = parser.add_subparsers(dest="group", metavar="{" + ",".join(GROUPS) + "}")
    for name, help_text in GROUPS.items():
        module = importlib.import_module(f"fleetmind.cli.{name}")
        module.register(sub, name, help_text)
    return parser


OPENB_FALLBACK_GROUPS = ("sched", "fleet")
"""Groups whose openb names fall back to the synthetic openb-schema trace when the data is missing
(``demo`` does the same in its placement step)."""


def _openb_fallback_note() -> None:
    from fleetmind.cli.data import synthetic_openb_note

    note = synthetic_openb_note()
    if note is not None:
        print(
            f"fleetmind: note: openb data not found; using a {note}; "
            "`fleetmind data fetch openb` downloads the real trace",
            file=sys.stderr,
        )


def _version() -> str:
    try:
        from importlib.metadata import version

        return version("fleetmind")
    except Exception:  # pragma: no cover - not installed, e.g. run from a bare checkout
        return "unknown"


def _end_progress_bars() -> None:
    """Close the tqdm bars a failed command left open, so that its error starts a line of its own
    instead of trailing a half-drawn bar."""
    tqdm_module = sys.modules.get("tqdm.std")
    if tqdm_module is None:  # no bar was ever drawn
        return
    for bar in list(getattr(tqdm_module.tqdm, "_instances", ())):
        bar.close()


STDOUT_CLOSED_STATUS = 141
"""Exit status when the reader of stdout went away (``fleetmind ... | head``): 128 + SIGPIPE, what a
shell reports for a program that SIGPIPE ended (``yes | head``), so ``set -o pipefail`` still sees
the output was cut short."""


def _stdout_closed() -> int:
    """The reader of stdout went away: point stdout at ``os.devnull`` so that Python's flush at exit
    does not raise again, and return :data:`STDOUT_CLOSED_STATUS` (the recipe of the Python docs'
    "Note on SIGPIPE", :mod:`signal`). Files the command wrote before are complete."""
    try:
        fd = sys.stdout.fileno()
    except (AttributeError, OSError, ValueError):  # not a file (a test's capture): nothing to flush
        return STDOUT_CLOSED_STATUS
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, fd)
    os.close(devnull)
    return STDOUT_CLOSED_STATUS


def _stdout_broken() -> bool:
    """Whether stdout's reader went away (and not some other pipe of the command): flushing what
    stdout holds fails with ``BrokenPipeError``, or, with nothing left to flush, its file reports an
    error or a hang-up (``poll``: Linux's pipe(7) write end whose read end is closed gives
    ``POLLERR``; BSD and macOS give ``POLLHUP``). A stdout that is not a file (a test's capture)
    is not broken."""
    try:
        sys.stdout.flush()
    except BrokenPipeError:
        return True
    except (AttributeError, OSError, ValueError):
        return False
    try:
        fd = sys.stdout.fileno()
    except (AttributeError, OSError, ValueError):
        return False
    if not hasattr(select, "poll"):  # Windows: a closed pipe there is EINVAL, not BrokenPipeError
        return False
    poller = select.poll()
    poller.register(fd, select.POLLOUT)
    return any(ev & (select.POLLERR | select.POLLHUP) for _, ev in poller.poll(0))


NO_ROOM_ERRNOS = frozenset({errno.ENOSPC, getattr(errno, "EDQUOT", errno.ENOSPC), errno.EFBIG})
"""A write that found no room: the disk is full, the quota is spent, or the file would pass the
size limit (``ulimit -f``). Flushing or closing a file raises them without a file name."""


def _path_error(err: OSError) -> int | None:
    """Print the one line of an :class:`OSError` about a path and return 2; ``None`` when it is not
    about a path (a bug or the system's trouble: the caller re-raises, keeping the traceback).

    A write that found no room (:data:`NO_ROOM_ERRNOS`) is the user's to fix too, with or without
    a file name: ``fleetmind: error: writing a file failed: No space left on device``."""
    if not err.filename:
        if err.errno not in NO_ROOM_ERRNOS:
            return None
        _end_progress_bars()
        print(f"fleetmind: error: writing a file failed: {err.strerror or err}", file=sys.stderr)
        return 2
    # A path the command could not read or write (an --out under a file, a folder it may not
    # create, a disk that is full): the path and the reason say all a user can act on.
    _end_progress_bars()
    where = f"{err.filename} -> {err.filename2}" if err.filename2 else str(err.filename)
    reason = err.strerror or str(err)
    if isinstance(err, FileExistsError) and os.path.isfile(err.filename):
        reason = "a file is where a folder is needed"  # mkdir(exist_ok=True) on a file
    print(f"fleetmind: error: {where}: {reason}", file=sys.stderr)
    return 2


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``fleetmind`` console script; returns the process exit status."""
    # no usage telemetry from the libraries: MLflow's, and ONNX Runtime's (1.29 and later send
    # events to mobile.events.data.microsoft.com on Linux too, unless this is set before import)
    os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
    os.environ.setdefault("ORT_DISABLE_TELEMETRY", "1")
    parser = build_parser()
    args = parser.parse_args(argv)
    func = getattr(args, "func", None)
    if func is None:
        # A group without a sub-command: show that group's help.
        target = getattr(args, "group_parser", None) or parser
        target.print_help()
        return 0 if args.group is None else 2
    from fleetmind.data.paths import OPENB_FALLBACK_ENV

    saved = os.environ.get(OPENB_FALLBACK_ENV)
    try:
        if args.group in OPENB_FALLBACK_GROUPS:
            _openb_fallback_note()
        status = int(func(args) or 0)
        sys.stdout.flush()  # a reader that stopped early (| head) shows here, not at exit
        return status
    except BrokenPipeError as err:
        if _stdout_broken():
            return _stdout_closed()
        status = _path_error(err)  # another pipe: an OSError like any other
        if status is None:
            raise
        return status
    except FleetMindError as err:
        _end_progress_bars()
        # one line whatever the message quotes (an HTML error page, a multi-line library error)
        print(f"fleetmind: error: {' '.join(str(err).split())}", file=sys.stderr)
        return 2
    except OSError as err:
        status = _path_error(err)
        if status is None:  # not about a path: a bug or the system's trouble, keep the traceback
            raise
        return status
    except KeyboardInterrupt:
        print("fleetmind: interrupted", file=sys.stderr)
        return 130
    finally:  # in-process callers (tests, notebooks) get their environment back
        if saved is None:
            os.environ.pop(OPENB_FALLBACK_ENV, None)
        else:
            os.environ[OPENB_FALLBACK_ENV] = saved
