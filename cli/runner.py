"""``fleetmind.cli.runner``: the error contract of a command-line entry point, shared by the
``fleetmind`` command (:func:`fleetmind.cli.main`) and the benchmark modules
(``python -m benchmarks.<area>.<name>``).

:func:`run_main` calls an entry point and turns what a user can fix into one line on stderr:

* a :class:`fleetmind.errors.FleetMindError` prints ``<prog>: error: <reason>`` and gives status 2;
* so does an :class:`OSError` about a path (``<prog>: error: <path>: <reason>``) that nothing
  caught: a file the command could not read or write is the user's to fix, and the path says
  which; and a write that found no room (a full disk, ``ulimit -f``), which flushing or closing a
  file reports without its name;
* a reader of stdout that goes away (``... | head``) ends the command quietly with status 141
  (:data:`STDOUT_CLOSED_STATUS`); a ``BrokenPipeError`` while stdout is still open (a child
  process or a connection that went away) is an :class:`OSError` like any other;
* a home folder that cannot be made out (``HOME`` unset and a user without a passwd entry, which
  :meth:`pathlib.Path.home` reports as a ``RuntimeError``) prints one line telling to set
  ``HOME`` and gives status 2;
* Ctrl-C prints ``<prog>: interrupted`` and gives status 130;
* SIGTERM (``kill``, ``timeout``, a CI job's cancel, systemd, Kubernetes) unwinds the command like
  Ctrl-C: the handler :func:`_end_on_sigterm` raises :class:`fleetmind.errors.Terminated` (a
  ``KeyboardInterrupt``) where the command was, so ``finally`` blocks and context managers run (an
  MLflow run is ended ``KILLED``, temporary folders are removed), then ``<prog>: interrupted`` and
  status 143 (128 + SIGTERM); as PID 1 (a container's exec-form entrypoint, where the kernel drops
  a signal left to its default action) too. A handler a library installs while it runs (Lightning's
  in the fit, uvicorn's in ``fleetmind serve``) takes over meanwhile; ``fleetmind serve`` keeps
  SIGTERM's default action (:func:`leave_sigterm_default`). Worker pools and the demo's service
  are started to die with the command (:func:`fleetmind.children.die_with_parent`);
* once the command's work and output are done, SIGINT or SIGTERM during the console script's exit
  (``at_exit``) ends the process at once, quietly, with the command's status: a Ctrl-C in Python's
  shutdown printed ``Exception ignored in atexit callback ... KeyboardInterrupt`` and exited 0
  after a complete run; an exit that hangs (a tracking server that does not answer) stays
  stoppable;
* a stdout or stderr that was closed (``>&-``, ``2>&-``) reads as ``os.devnull``: the command
  still writes its files (status 141 when a closed stdout had something to print), and a path
  stdout cannot encode (``PYTHONIOENCODING=ascii``, a C locale without UTF-8 mode, a non-UTF-8
  file name) is printed with backslash escapes instead of failing a command that succeeded (the
  bytes of a file name that ``surrogateescape`` decoded are written back as they were).

Any other exception is a bug or the system's trouble and keeps its traceback. ``SystemExit``
(argparse's usage errors, status 2; ``--help`` and ``--version``, status 0) passes through once what
stdout holds is flushed: a closed pipe there is the quiet 141, a full disk (``--help > /dev/full``)
the one line and status 2. argparse itself drops a failed write of its help or version
(``ArgumentParser._print_message`` ignores ``OSError``), which hid a closed or full stdout when the
write reached the file at once (``PYTHONUNBUFFERED=1``, or a help over the 8 KiB buffer): a parser
of :class:`StdoutCheckingParser` lets that error through to the same contract.

Which status wins when the command fails and stdout fails too: the command's. A command that
returned a non-zero status, raised ``SystemExit`` with one, or failed with an error above (its one
line printed) keeps that status and line. The output stdout could not take is then dropped: quietly
for a reader that went away or after the command's own error line; a command that failed with a
status alone (``fleetmind doctor > /dev/full``) still gets the one ``writing a file failed`` line
for a write that found no room, so that the loss of its output shows. Stdout's failure (141, or 2
and the ``writing a file failed`` line) decides the status only of a command that succeeded
(status 0). Whatever the status, stdout output that could not be
written is dropped (stdout then points at ``os.devnull``), so Python's flush at exit adds no
``Exception ignored`` lines and does not turn the status into 120.

This module imports only :mod:`fleetmind.errors`, :mod:`fleetmind.redact` and the standard
library, so a benchmark can use
it without loading the command groups.
"""

from __future__ import annotations

import argparse
import codecs
import contextlib
import errno
import functools
import io
import os
import select
import signal
import sys
from collections.abc import Callable
from typing import IO

from fleetmind.errors import FleetMindError, Terminated
from fleetmind.folders import remove_now
from fleetmind.redact import terminal_safe

STDOUT_CLOSED_STATUS = 141
"""Exit status when the reader of stdout went away (``fleetmind ... | head``): 128 + SIGPIPE, what a
shell reports for a program that SIGPIPE ended (``yes | head``), so ``set -o pipefail`` still sees
the output was cut short."""

NO_ROOM_ERRNOS = frozenset({errno.ENOSPC, getattr(errno, "EDQUOT", errno.ENOSPC), errno.EFBIG})
"""A write that found no room: the disk is full, the quota is spent, or the file would pass the
size limit (``ulimit -f``). Flushing or closing a file raises them without a file name."""

NO_HOME_MESSAGE = "Could not determine home directory"
"""The start of the ``RuntimeError`` of :meth:`pathlib.Path.home` (and ``expanduser``) when
``HOME`` is unset and the user has no passwd entry (``docker run --user 12345``, ``env -i``):
MLflow's import and other libraries ask for the home folder."""
NO_HOME_HELP = (
    "no home folder: HOME is not set and this user has no passwd entry; set HOME "
    "(or FLEETMIND_CACHE_DIR for FleetMind's cache)"
)
"""The one line :func:`run_main` prints for that error."""


def _end_progress_bars() -> None:
    """Close the tqdm bars a failed command left open, so that its error starts a line of its own
    instead of trailing a half-drawn bar."""
    tqdm_module = sys.modules.get("tqdm.std")
    if tqdm_module is None:  # no bar was ever drawn
        return
    for bar in list(getattr(tqdm_module.tqdm, "_instances", ())):
        bar.close()


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


def _drop_unwritable_stdout(prog: str | None = None) -> None:
    """Flush stdout; when that fails (a full disk, a reader gone, an I/O error), point stdout at
    ``os.devnull`` (:func:`_stdout_closed`) so that the output it could not take is dropped:
    Python's own flush at exit would fail on it again, print ``Exception ignored in:
    <_io.TextIOWrapper name='<stdout>'>`` and a traceback, and exit with status 120.

    With ``prog`` (a command that failed with its own status and printed no error line), a write
    that found no room (:data:`NO_ROOM_ERRNOS`) still prints the one ``<prog>: error: writing a
    file failed: <reason>`` line, so that the lost output is not lost silently; the caller keeps
    the command's status. A reader that went away stays quiet."""
    try:
        sys.stdout.flush()
    except OSError as err:
        _stdout_closed()
        if prog is not None and err.errno in NO_ROOM_ERRNOS:
            _end_progress_bars()
            try:  # a stderr with no room either (`> log 2>&1` on a full disk): the status stays
                print(
                    f"{prog}: error: writing a file failed: {err.strerror or err}", file=sys.stderr
                )
            except OSError:  # drop what stderr holds, or Python's exit flush fails on it (120)
                devnull = os.open(os.devnull, os.O_WRONLY)
                os.dup2(devnull, sys.stderr.fileno())
                os.close(devnull)
    except (AttributeError, ValueError):  # not a file, or closed: nothing Python will flush
        pass


def _flush_at_exit(prog: str) -> int | None:
    """Flush stdout before a ``SystemExit`` (argparse's ``--help``, ``--version`` and usage
    errors) leaves :func:`run_main`: ``None`` when stdout took everything (the exit goes on),
    else the status of the error contract: 141 when stdout's reader went away, 2 and one line for a
    write that found no room (``fleetmind --help > /dev/full``). An :class:`OSError` of another
    kind is raised."""
    try:
        sys.stdout.flush()
    except BrokenPipeError:
        return _stdout_closed()
    except OSError as err:
        _stdout_closed()  # the exit flush must not fail again
        status = _path_error(err, prog)
        if status is None:
            raise
        return status
    except (AttributeError, ValueError):  # not a file, or closed: nothing to flush
        return None
    return None


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


def _path_error(err: OSError, prog: str = "fleetmind") -> int | None:
    """Print the one line of an :class:`OSError` about a path and return 2; ``None`` when it is not
    about a path (a bug or the system's trouble: the caller re-raises, keeping the traceback).

    A write that found no room (:data:`NO_ROOM_ERRNOS`) is the user's to fix too, with or without
    a file name: ``fleetmind: error: writing a file failed: No space left on device``."""
    if not err.filename:
        if err.errno not in NO_ROOM_ERRNOS:
            return None
        _end_progress_bars()
        print(f"{prog}: error: writing a file failed: {err.strerror or err}", file=sys.stderr)
        return 2
    # A path the command could not read or write (an --out under a file, a folder it may not
    # create, a disk that is full): the path and the reason say all a user can act on.
    _end_progress_bars()
    where = f"{err.filename} -> {err.filename2}" if err.filename2 else str(err.filename)
    reason = err.strerror or str(err)
    if isinstance(err, FileExistsError) and os.path.isfile(err.filename):
        reason = "a file is where a folder is needed"  # mkdir(exist_ok=True) on a file
    print(f"{prog}: error: {where}: {reason}", file=sys.stderr)
    return 2


class StdoutCheckingParser(argparse.ArgumentParser):
    """An :class:`argparse.ArgumentParser` whose help and version text that stdout cannot take (a
    full disk, a reader gone) raises the ``OSError`` instead of dropping it, so that
    :func:`run_main` ends the command by its contract: 141 when stdout's reader went away, 2 and
    one line for a write that found no room. argparse's own ``_print_message`` ignores the error
    and the command exits 0 as if the help was printed. Its sub-parsers (``add_subparsers``) are
    of this class too. Messages to another file (usage errors on stderr) keep argparse's
    behaviour."""

    def _print_message(self, message: str, file: IO[str] | None = None) -> None:
        if message and file is not None and file is sys.stdout:
            file.write(message)  # an OSError here is run_main's to report
            return
        super()._print_message(message, file)


class _ClosedStream(io.TextIOWrapper):
    """What a closed stdout or stderr reads as: ``os.devnull``, remembering whether anything was
    written (a closed stdout that had output to take ends the command with status 141)."""

    written = False

    def write(self, text: str) -> int:
        if text:
            self.written = True
        return super().write(text)


def _open_streams() -> tuple[_ClosedStream | None, list[Callable[[], None]]]:
    """Give a closed stdout or stderr (``None``: the process started with fd 1 or 2 closed) an
    ``os.devnull`` stream, and make stdout and stderr print what they cannot encode with backslash
    escapes. Return the stream that stands for a closed stdout (None: stdout is open) and how to
    put the streams back. The ``os.devnull`` streams stay for the rest of the process: what runs
    at exit (logging, tqdm) may still write to them."""
    undo: list[Callable[..., None]] = []
    closed_stdout = None
    for name in ("stdout", "stderr"):
        stream = getattr(sys, name)
        if stream is None:
            raw = open(os.devnull, "wb")  # noqa: SIM115 - open for the rest of the process
            closed = _ClosedStream(raw, encoding="utf-8", line_buffering=True)
            setattr(sys, name, closed)
            if name == "stdout":
                closed_stdout = closed
        elif isinstance(stream, io.TextIOWrapper) and stream.errors in _ESCAPED:
            old = stream.errors
            try:
                stream.reconfigure(errors=_ESCAPED[old])
            except (AttributeError, ValueError, OSError):  # pragma: no cover - a detached stream
                continue
            undo.append(functools.partial(stream.reconfigure, errors=old))
    return closed_stdout, undo


def _close_streams(undo: list[Callable[[], None]]) -> None:
    """Give stdout and stderr their encoding errors back (for in-process callers: tests,
    notebooks)."""
    for reconfigure in reversed(undo):
        try:
            reconfigure()
        except (AttributeError, ValueError, OSError):  # pragma: no cover - a detached stream
            pass


def _surrogate_or_backslash(err: UnicodeError) -> tuple[bytes, int]:
    """Encoding error handler ``fleetmind.surrogateescape``: a lone surrogate that
    ``surrogateescape`` decoded from an undecodable byte (``U+DC80``-``U+DCFF``, a non-UTF-8 file
    name) becomes that byte again, as ``surrogateescape`` would write it; any other character the
    encoding lacks is written with a backslash escape (``\\xfc``), as ``backslashreplace`` would,
    instead of failing the command part-way (a C locale without UTF-8 mode gives stdout the
    ``ascii`` encoding with ``surrogateescape``)."""
    if not isinstance(err, UnicodeEncodeError):
        raise err
    out = bytearray()
    for ch in err.object[err.start : err.end]:
        code = ord(ch)
        if 0xDC80 <= code <= 0xDCFF:
            out.append(code - 0xDC00)
        else:
            out += ch.encode("ascii", "backslashreplace")
    return bytes(out), err.end


codecs.register_error("fleetmind.surrogateescape", _surrogate_or_backslash)
_ESCAPED = {"strict": "backslashreplace", "surrogateescape": "fleetmind.surrogateescape"}
"""The encoding error handlers of stdout and stderr that :func:`run_main` replaces while a
command runs, and their replacements: what the stream cannot encode is escaped, not an error."""


_SIGTERM_OWNER: list[int] = []
"""The process that installed :func:`_end_on_sigterm` (a forked child inherits the handler)."""
_SIGTERM_SEEN: list[int] = []
"""The SIGTERMs :func:`_end_on_sigterm` raised as ``Terminated`` in this run: C code the exception
passes through may turn it into another (numpy's import of ``datetime`` into an ``ImportError``),
which :func:`_run` then still reads as the stop it was."""


def _end_on_sigterm(signum: int, _frame: object) -> None:
    """SIGTERM handler of a command: raises :class:`fleetmind.errors.Terminated` where the main
    thread was, so that the command unwinds as on Ctrl-C and :func:`run_main` ends it with
    ``<prog>: interrupted`` and status 128 + ``signum`` (143). Before, SIGTERM's default action
    ended the process where it was: no ``finally``, no MLflow end-run (the run stayed ``RUNNING``
    for ever), MLflow's temporary model copy left in ``$TMPDIR``; and as PID 1 of a PID namespace
    (the image's exec-form ``ENTRYPOINT``) the kernel drops a signal left to its default action
    (pid_namespaces(7)), so the command ran on until SIGKILL.

    It does nothing when it is no longer the installed handler: Lightning calls the handler it
    replaced from its own, and keeps its stop at a batch boundary (``_SignalConnector`` in
    ``pytorch_lightning/trainer/connectors/signal_connector.py``). A forked child (a worker pool's
    process) that inherited it ends by the signal, as without one. The handler stays installed:
    should the exception be swallowed (raised inside a finaliser, "Exception ignored in ..."), a
    later SIGTERM still stops the command."""
    if signal.getsignal(signum) is not _end_on_sigterm:
        return
    if _SIGTERM_OWNER and os.getpid() != _SIGTERM_OWNER[-1]:
        signal.signal(signum, signal.SIG_DFL)
        signal.raise_signal(signum)
        return
    _SIGTERM_SEEN.append(signum)
    raise Terminated(signum)


def _guard_sigterm() -> Callable[[], None]:
    """Install :func:`_end_on_sigterm` for SIGTERM when SIGTERM has its default action (in the
    main thread: only it may install handlers); return what puts the default back (for
    in-process callers). A handler someone else installed is left alone."""
    if signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
        return lambda: None
    try:
        signal.signal(signal.SIGTERM, _end_on_sigterm)
    except ValueError:  # not the main thread
        return lambda: None
    _SIGTERM_OWNER.append(os.getpid())
    _SIGTERM_SEEN.clear()

    def undo() -> None:
        _SIGTERM_OWNER.pop()
        if signal.getsignal(signal.SIGTERM) in (_end_on_sigterm, _end_serve_as_pid1):
            signal.signal(signal.SIGTERM, signal.SIG_DFL)

    return undo


def leave_sigterm_default() -> None:
    """Give SIGTERM its default action back for a command that handles it itself
    (``fleetmind serve``: uvicorn's graceful shutdown, then the signal raised again; see
    ``fleetmind.cli.serve``). As PID 1, where the default action is to drop the signal,
    :func:`_end_serve_as_pid1` takes its place instead."""
    if signal.getsignal(signal.SIGTERM) is _end_on_sigterm:
        signal.signal(signal.SIGTERM, signal.SIG_DFL if os.getpid() != 1 else _end_serve_as_pid1)


def _end_serve_as_pid1(signum: int, _frame: object) -> None:
    """SIGTERM handler of ``fleetmind serve`` as PID 1 (the image's exec-form ``ENTRYPOINT``):
    ends the start-up (imports, the schema upgrade) before uvicorn installs its own handler, and
    the process after uvicorn's graceful shutdown (uvicorn puts this handler back and raises the
    signal again), with status 128 + ``signum`` (143) by ``SystemExit``. Not
    :class:`fleetmind.errors.Terminated`: ``uvicorn.run`` swallows a ``KeyboardInterrupt``
    (``uvicorn/main.py``, ``except KeyboardInterrupt: pass``), so a stopped pod read as exited 0
    (a Job "Completed"). A forked child that inherited it ends by the signal."""
    if signal.getsignal(signum) is not _end_serve_as_pid1:
        return
    if os.getpid() != 1:
        signal.signal(signum, signal.SIG_DFL)
        signal.raise_signal(signum)
        return
    raise SystemExit(128 + signum)


EXIT_GRACE_S = 10.0
"""Seconds an interrupted command's exit may take (Python's ``atexit`` work: a worker pool's
threads, MLflow's last calls) before it is cut short (:func:`_bound_the_exit`)."""


def _exit_now(status: int) -> None:
    """End the process at once with ``status``: the streams flushed and the temporary folders
    removed (:func:`fleetmind.folders.remove_now`), the rest of Python's exit skipped."""
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):  # a stream closed or busy: nothing to lose
            stream.flush()
    with contextlib.suppress(Exception):
        remove_now()
    os._exit(status)


def _bound_the_exit(status: int) -> None:
    """After an interrupted command (Ctrl-C, SIGTERM), end the process :data:`EXIT_GRACE_S` after
    its exit began if the exit has not ended by then: a worker pool whose workers were killed can
    leave a thread that ``multiprocessing``'s exit joins for ever (its feeder blocked writing a job
    into the dead workers' pipe), and a stopped command must end."""
    import threading

    timer = threading.Timer(EXIT_GRACE_S, _exit_now, (status,))
    timer.daemon = True
    timer.start()


def _exit_on_stop_signals(status: int | None) -> None:
    """From here on (the console script's exit: the command's work and output are done), SIGINT
    and SIGTERM end the process at once, quietly, with the command's ``status`` (128 + the
    signal's number when it has none). A Ctrl-C in Python's shutdown printed ``Exception ignored
    in atexit callback ... KeyboardInterrupt`` with a traceback; ignoring the signals instead
    would leave an exit that hangs (MLflow's last call to a tracking server that does not answer)
    stoppable by SIGKILL only. What is left of the exit's cleanup is skipped but for the
    temporary folders (:func:`_exit_now`): the outputs are written, the streams flushed."""

    def handler(signum: int, _frame: object) -> None:
        _exit_now(128 + signum if status is None else status)

    for signum in (signal.SIGINT, signal.SIGTERM):
        try:
            signal.signal(signum, handler)
        except ValueError:  # pragma: no cover - not the main thread
            return


def run_main(fn: Callable[[], int | None], prog: str, at_exit: bool = False) -> int:
    """Call the entry point ``fn`` and return the process exit status, keeping the error contract
    of the module docstring: ``fn``'s own status (``None`` counts as 0), 2 with one line on stderr
    for an error the user can fix, 141 when stdout's reader went away, 130 on Ctrl-C, 143 on
    SIGTERM. With ``at_exit`` (the process ends when it returns: a console script), SIGINT and
    SIGTERM end the process quietly with that status from the end of ``fn`` on
    (:func:`_exit_on_stop_signals`).

    Use it as ``raise SystemExit(run_main(main, prog="benchmarks.rca.gat_speed"))``; ``prog``
    starts each error line, argparse's usage errors of a parser built inside ``fn`` included
    (under ``python -m``, ``sys.argv[0]``, argparse's default ``prog``, is ``prog`` while ``fn``
    runs: it would name the file, ``gat_speed.py``; a console script's path is left alone). Exceptions that are not the user's keep their
    traceback.
    """
    saved = sys.argv[0] if sys.argv else None
    main = sys.modules.get("__main__")
    # only under `python -m`, where a relauncher runs `-m <module>`: Lightning's DDP relaunches a
    # console script (`fleetmind rca train --devices 2`) as `python sys.argv[0] ...`, which must
    # stay the script's path
    renamed = saved is not None and getattr(main, "__spec__", None) is not None
    if renamed:
        sys.argv[0] = prog
    closed_stdout, undo = _open_streams()
    unguard = _guard_sigterm()
    status: int | None = None
    try:
        try:
            status = _run(fn, prog)
        except SystemExit as exc:  # --help, --version: what they printed had no reader either
            if closed_stdout is not None and closed_stdout.written and exc.code in (0, None):
                status = STDOUT_CLOSED_STATUS
                return status
            status = exc.code if isinstance(exc.code, int) else None
            raise
        if closed_stdout is not None and closed_stdout.written and status == 0:
            status = STDOUT_CLOSED_STATUS
            return status  # the output could not be taken; the files are written
        return status
    finally:
        if at_exit:  # the work and the output are done: a late Ctrl-C ends the exit quietly
            _exit_on_stop_signals(status)
            if status in (128 + signal.SIGINT, 128 + signal.SIGTERM):
                _bound_the_exit(status)
        _drop_unwritable_stdout()  # an error part way left output stdout cannot take
        _close_streams(undo)
        unguard()
        if renamed and sys.argv:
            sys.argv[0] = saved


def _run(fn: Callable[[], int | None], prog: str) -> int:
    """:func:`run_main` once ``sys.argv[0]`` is set; an error that a SIGTERM turned into (the
    ``Terminated`` raised inside C code that replaced it, :data:`_SIGTERM_SEEN`) ends the command
    as the stop it was: ``<prog>: interrupted``, 143."""
    try:
        return _run_once(fn, prog)
    except Exception:
        if not _SIGTERM_SEEN:
            raise
        _end_progress_bars()
        print(f"{prog}: interrupted", file=sys.stderr)
        return 128 + _SIGTERM_SEEN[-1]


def _run_once(fn: Callable[[], int | None], prog: str) -> int:
    """:func:`_run`, the error contract of the module docstring."""
    try:
        status = int(fn() or 0)
        if status != 0:  # the command failed: its status wins over stdout's (module docstring)
            _drop_unwritable_stdout(prog)
            return status
        sys.stdout.flush()  # a reader that stopped early (| head) shows here, not at exit
        return status
    except SystemExit as exc:  # argparse's --help, --version or usage error: flush what it printed
        if exc.code not in (0, None):  # a failed exit keeps its status, whatever stdout does
            _drop_unwritable_stdout(prog)
            raise
        status = _flush_at_exit(prog)
        if status is None:
            raise
        return status
    except BrokenPipeError as err:
        if _stdout_broken():
            return _stdout_closed()
        status = _path_error(err, prog)  # another pipe: an OSError like any other
        if status is None:
            raise
        return status
    except FleetMindError as err:
        _end_progress_bars()
        # one line whatever the message quotes (an HTML error page, a multi-line library error),
        # with the terminal escapes of a quoted remote body shown, not run
        print(f"{prog}: error: {terminal_safe(' '.join(str(err).split()))}", file=sys.stderr)
        return 2
    except OSError as err:
        status = _path_error(err, prog)
        if status is None:  # not about a path: a bug or the system's trouble, keep the traceback
            raise
        return status
    except RuntimeError as err:
        if not str(err).startswith(NO_HOME_MESSAGE):  # a bug or the system's trouble
            raise
        _end_progress_bars()
        print(f"{prog}: error: {NO_HOME_HELP}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as stop:
        _end_progress_bars()  # the line starts on a line of its own, not after a bar
        print(f"{prog}: interrupted", file=sys.stderr)
        return 128 + stop.signum if isinstance(stop, Terminated) else 130
