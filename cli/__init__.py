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
disk, ``ulimit -f``), which flushing or closing a file reports without its name (stdout on a full
disk, ``> /dev/full``, too). A reader of stdout that goes away (``fleetmind ... | head``) ends the
command quietly with status 141 (:func:`_stdout_closed`), ``--help``, ``--version`` and a group's
help included: parsing runs under the same contract; a
``BrokenPipeError`` while stdout is still open (a child process or a connection that went away) is
an :class:`OSError` like any other. :func:`fleetmind.cli.runner.run_main` keeps this contract; the
benchmark modules (``python -m benchmarks.<area>.<name>``) call it too, with their own name in
place of ``fleetmind``.

``--json -`` (every command with a ``--json`` file) writes the JSON to stdout alone: the command
runs under :func:`fleetmind.training.io.stdout_for_json`, so what it prints (tables, notes) goes
to stderr and ``fleetmind rca evaluate ... --json - | jq`` reads the JSON. The options of
:data:`NAME_OPTIONS` name things, not files: their values are read as UTF-8
(:func:`fleetmind.argtypes.utf8_text`) under a locale that cannot decode them.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from fleetmind import argtypes

# the error contract lives in runner.py, which the benchmarks share; the status and the path
# error stay importable from here for the callers and tests that used them
from fleetmind.cli.runner import (  # noqa: F401
    STDOUT_CLOSED_STATUS,
    StdoutCheckingParser,
    _path_error,
    _stdout_closed,
    leave_sigterm_default,
    run_main,
)

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
    "db": "the service database's schema: show its revision, upgrade it, roll it back",
}


NAME_OPTIONS = frozenset({"--cluster", "--context", "--name", "--node"})
"""Options whose value names something (a cluster, a kubeconfig context, a graph, a node), never a
file: :func:`build_parser` gives each one without a type of its own
:func:`fleetmind.argtypes.utf8_text`, so that ``--cluster prod-é`` under ``LC_ALL=C`` without
UTF-8 mode is ``prod-é``, not the surrogates of its bytes. Paths keep those surrogates: Python
opens files by them under such a locale."""


def _names_as_text(parser: argparse.ArgumentParser) -> None:
    """Give the :data:`NAME_OPTIONS` of ``parser`` and its sub-parsers (those that take a value
    and have no type) the type :func:`fleetmind.argtypes.utf8_text`."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                _names_as_text(sub)
        elif (
            action.type is None and action.nargs != 0 and NAME_OPTIONS & set(action.option_strings)
        ):
            action.type = argtypes.utf8_text


def build_parser() -> argparse.ArgumentParser:
    """Build the full argument parser with every command group registered.

    It and its sub-parsers are :class:`fleetmind.cli.runner.StdoutCheckingParser`: help and
    version text that stdout cannot take ends the command by the error contract (141, or 2 and
    one line) instead of exiting 0 as if it was printed. The :data:`NAME_OPTIONS` read their
    value as text (:func:`_names_as_text`)."""
    parser = StdoutCheckingParser(
        prog="fleetmind",
        description="FleetMind: root-cause analysis and learned GPU placement for multi-cluster AI fleets.",
    )
    parser.add_argument("--version", action="version", version=f"fleetmind {_version()}")
    sub = parser.add_subparsers(dest="group", metavar="{" + ",".join(GROUPS) + "}")
    for name, help_text in GROUPS.items():
        module = importlib.import_module(f"fleetmind.cli.{name}")
        module.register(sub, name, help_text)
    _names_as_text(parser)
    return parser


OPENB_FALLBACK_GROUPS = ("sched", "fleet")
"""Groups whose openb names fall back to the synthetic openb-schema trace when the data is missing
(``demo`` does the same in its placement step)."""


OWN_SIGTERM_GROUPS = ("serve",)
"""Groups that handle SIGTERM themselves: ``fleetmind serve`` (uvicorn's graceful shutdown, then
the signal raised again: docs/serving/operations.md, "Signals"). Every other command unwinds on
SIGTERM as on Ctrl-C and exits with 143 (:mod:`fleetmind.cli.runner`)."""


def _matplotlib_dir_writable() -> None:
    """Point ``MPLCONFIGDIR`` at a temporary folder, removed at exit, when it is unset and the
    folders matplotlib would use (``$XDG_CONFIG_HOME`` or ``~/.config``, and ``$XDG_CACHE_HOME``
    or ``~/.cache``, each ``/matplotlib``) cannot be written (a read-only home in a container or a
    CI runner). matplotlib, which ``rca train`` imports through its libraries, otherwise printed two
    warnings (``mkdir -p failed for path ...``, ``Matplotlib created a temporary cache
    directory ...``: ``_get_config_or_cache_dir`` in ``matplotlib/__init__.py``) among the
    command's own one-line messages. Nothing is created in the home folder here."""
    if os.environ.get("MPLCONFIGDIR") or "matplotlib" in sys.modules:
        return
    try:
        home = Path.home()
    except (RuntimeError, KeyError):  # no home at all: the command reports it (or never needs it)
        return
    bases = [
        Path(os.environ.get("XDG_CONFIG_HOME") or home / ".config"),
        Path(os.environ.get("XDG_CACHE_HOME") or home / ".cache"),
    ]
    if all(_writable(base / "matplotlib") for base in bases):
        return
    import tempfile

    from fleetmind.folders import remove_at_exit

    folder = tempfile.mkdtemp(prefix="fleetmind-matplotlib-")
    remove_at_exit(folder)
    os.environ["MPLCONFIGDIR"] = folder


def _writable(folder: Path) -> bool:
    """Whether ``folder`` can be written, or made: the folder itself when it exists, else its
    nearest existing parent."""
    for path in (folder, *folder.parents):
        if path.exists():
            return path.is_dir() and os.access(path, os.W_OK | os.X_OK)
    return False


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


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``fleetmind`` console script; returns the process exit status."""
    # no usage telemetry from the libraries: MLflow's, and ONNX Runtime's (1.29 and later send
    # events to mobile.events.data.microsoft.com on Linux too, unless this is set before import),
    # and Ray's (on by default: a local Ray would report to usage-stats.ray.io)
    os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
    os.environ.setdefault("ORT_DISABLE_TELEMETRY", "1")
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    from fleetmind.progress import quiet_library_bars

    quiet_library_bars()  # no bar redraws (\r) from MLflow in a log file either

    def run() -> int | None:
        # everything that imports runs under run_main: Ctrl-C while fleetmind.data.paths (numpy)
        # or the group modules import (the first second or so) is one line; and the output of
        # --help, --version and a group's help meets the same contract as a command's (a closed
        # pipe is a quiet 141, a full disk one line)
        from fleetmind.data.paths import OPENB_FALLBACK_ENV

        saved = os.environ.get(OPENB_FALLBACK_ENV)
        try:
            return _parse_and_run(argv)
        finally:  # in-process callers (tests, notebooks) get their environment back
            if saved is None:
                os.environ.pop(OPENB_FALLBACK_ENV, None)
            else:
                os.environ[OPENB_FALLBACK_ENV] = saved

    _matplotlib_dir_writable()
    # main() with no arguments is the console script (or `python -m fleetmind.cli`): the process
    # ends when run_main returns, so a late Ctrl-C is ignored instead of breaking Python's exit
    return run_main(run, prog="fleetmind", at_exit=argv is None)


def _parse_and_run(argv: Sequence[str] | None) -> int | None:
    """Parse ``argv`` and run the command it names; a group without its command prints the
    group's help (status 2), no group at all the top help (status 0). A command given ``--json -``
    runs with stdout kept for the JSON (:func:`fleetmind.training.io.stdout_for_json`)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    func = getattr(args, "func", None)
    if func is None:
        target = getattr(args, "group_parser", None) or parser
        target.print_help()
        # the help is this path's output: a stdout that cannot take it decides the status (141,
        # or 2 and one line), as for --help, not the 2 of a missing command
        sys.stdout.flush()
        return 0 if args.group is None else 2
    if args.group in OWN_SIGTERM_GROUPS:
        leave_sigterm_default()
    if args.group in OPENB_FALLBACK_GROUPS:
        _openb_fallback_note()
    if argtypes.is_stdout(getattr(args, "json", None)):
        from fleetmind.training.io import stdout_for_json

        with stdout_for_json():
            return func(args)
    return func(args)
