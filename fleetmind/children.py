"""Child processes that end with the FleetMind process that started them.

A command stopped by SIGTERM (``kill``, a Job's deadline, a supervisor) unwinds and ends with 143
(``fleetmind.cli.runner``), or ends by the signal where its handler is not installed (``fleetmind
serve`` outside PID 1, a process killed with SIGKILL). Its worker pools and the demo's service
would then keep running, orphaned. :func:`die_with_parent`, run first in each such child, asks the
Linux kernel to send the child SIGTERM when its parent ends (``prctl(PR_SET_PDEATHSIG)``,
prctl(2)); elsewhere it does nothing.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import signal
import sys

PR_SET_PDEATHSIG = 1
"""``prctl`` option (``<linux/prctl.h>``): the signal a process gets when its parent ends."""


def die_with_parent(parent_pid: int | None = None, sig: int = signal.SIGTERM) -> None:
    """In a child process: get ``sig`` when the parent ends (Linux; a no-op elsewhere).

    ``parent_pid``: the pid of the process that started this one, when known: a parent that ended
    before the request was made (``os.getppid()`` no longer names it) ends this process at once.
    ``sig``: SIGTERM for a child that shuts down gracefully (the demo's service); SIGKILL for pool
    workers, which have nothing to clean up and may have inherited SIGTERM ignored
    (``trap '' TERM``). The kernel sends it when the thread that started the child ends: start
    children from a thread that lives as long as they should (the main thread, here).
    """
    if not sys.platform.startswith("linux"):
        return
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, int(sig), 0, 0, 0)
    except (OSError, AttributeError):  # pragma: no cover - no libc with prctl
        return
    if parent_pid is not None and os.getppid() != parent_pid:
        os.kill(os.getpid(), sig)
