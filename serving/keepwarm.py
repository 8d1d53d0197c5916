"""Keep the CPUs from going idle while requests flow (opt-in: ``FLEETMIND_KEEP_WARM_S``).

Why. On a virtual machine whose idle vCPUs halt without polling first (the Firecracker microVM
the benchmarks run on: no guest idle driver on one host build, ``haltpoll`` with
``guest_halt_poll_ns=0`` on another), a vCPU that idles for a moment hands its physical
core back to the host; the next request then runs on a core whose caches other work has used,
and waits for the vCPU to be woken. Between two RCA batches the ranking processes and the server
idle for fractions of a millisecond, so under load this happens hundreds of times a second. In
quiet-machine runs of 2026-11-30 (``docs/research/2026-11-30-serving-keep-warm.md``) two external ``nice 19`` busy
loops beside the server cut the CPU per RCA request by 20-30 % (a few exploratory runs); the
idle-priority loops this module starts cut it by 5-8 % in the pre-registered series, without
lowering the p99 at the default batch of 4. Hence opt-in.

What. One process per CPU this process may run on (``os.sched_getaffinity``), in the idle
scheduling class (``SCHED_IDLE``; ``nice 19`` where that is refused): it runs only when nothing
else wants its CPU, and gives the CPU up as soon as anything does. Each spins while the server has
seen a request within the last ``keep_warm_s`` seconds, and otherwise sleeps, waking every 20 ms
to look. The server marks activity by writing a deadline (``time.monotonic()`` seconds, one clock
for every process of the host) into 8 bytes of shared memory (``memfd``) that the spinners read.
So an idle service burns nothing, and a busy one keeps its vCPUs; the spinners' CPU time is time
the CPUs would otherwise have spent idle, which on a shared host is time taken from other tenants.

Linux only (``memfd_create``, ``SCHED_IDLE``). The spinners exit with the server: on
:meth:`KeepWarm.stop`, and on their own when their parent process is gone (``kill -9``).
"""

from __future__ import annotations

import logging
import mmap
import os
import signal
import struct
import subprocess
import sys
import time

log = logging.getLogger("fleetmind.serving")

_DEADLINE = struct.Struct("d")
IDLE_POLL_S = 0.02  # how often a sleeping spinner looks at the deadline
SPIN_SLICE_S = 0.05  # a spinning one re-reads the deadline (and checks its parent) this often


class KeepWarm:
    """Idle-priority busy loops, one per CPU, active until ``linger_s`` after the last :meth:`touch`.

    Args:
        linger_s: seconds the CPUs are kept busy after the last request (> 0).
        processes: spinners to start (default: the CPUs this process may run on).

    Raises:
        ValueError: ``linger_s`` or ``processes`` is not positive.
    """

    def __init__(self, linger_s: float, processes: int | None = None) -> None:
        if not linger_s > 0:
            raise ValueError(f"linger_s must be > 0, got {linger_s!r}")
        if processes is None:
            processes = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else 1
        if processes < 1:
            raise ValueError(f"processes must be >= 1, got {processes!r}")
        self.linger_s = float(linger_s)
        self.processes = processes
        self._fd: int | None = None
        self._buf: mmap.mmap | None = None
        self._procs: list[subprocess.Popen[bytes]] = []

    def start(self) -> None:
        """Start the spinners (sleeping until the first :meth:`touch`).

        Raises:
            OSError: shared memory or the processes could not be created (e.g. not Linux).
        """
        if not hasattr(os, "memfd_create"):
            raise OSError("keep-warm needs Linux (os.memfd_create)")
        fd = os.memfd_create("fleetmind-keepwarm")
        try:
            os.ftruncate(fd, _DEADLINE.size)
            buf = mmap.mmap(fd, _DEADLINE.size)
            _DEADLINE.pack_into(buf, 0, 0.0)
            procs = []
            for _ in range(self.processes):
                procs.append(
                    subprocess.Popen(
                        [
                            sys.executable,
                            "-m",
                            "fleetmind.serving.keepwarm",
                            str(fd),
                            str(os.getpid()),
                        ],
                        pass_fds=[fd],
                        stdin=subprocess.DEVNULL,
                    )
                )
        except BaseException:
            os.close(fd)
            raise
        self._fd, self._buf, self._procs = fd, buf, procs

    def touch(self) -> None:
        """A request arrived: keep the CPUs busy until ``linger_s`` from now (cheap: one write)."""
        buf = self._buf
        if buf is not None:
            _DEADLINE.pack_into(buf, 0, time.monotonic() + self.linger_s)

    @property
    def deadline(self) -> float:
        """``time.monotonic()`` until which the spinners spin (0.0 before the first touch)."""
        return _DEADLINE.unpack_from(self._buf, 0)[0] if self._buf is not None else 0.0

    @property
    def pids(self) -> list[int]:
        """Process ids of the spinners still running."""
        return [p.pid for p in self._procs if p.poll() is None]

    def stop(self) -> None:
        """Stop the spinners and free the shared memory (idempotent)."""
        for p in self._procs:
            if p.poll() is None:
                p.terminate()
        for p in self._procs:
            try:
                p.wait(5)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(5)
        self._procs = []
        if self._buf is not None:
            self._buf.close()
            self._buf = None
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


class KeepWarmMiddleware:
    """ASGI middleware: every HTTP request touches the app's :class:`KeepWarm`, if it has one."""

    def __init__(self, app: object) -> None:
        self.app = app

    async def __call__(self, scope: dict, receive: object, send: object) -> None:
        if scope["type"] == "http":
            services = getattr(getattr(scope.get("app"), "state", None), "services", None)
            keep_warm = getattr(services, "keep_warm", None)
            if keep_warm is not None:
                keep_warm.touch()
        await self.app(scope, receive, send)  # type: ignore[operator]


def _spin(fd: int, parent: int) -> None:
    """A spinner's life: spin while the deadline is ahead, sleep otherwise, exit with the parent."""
    try:
        os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
    except (AttributeError, OSError):
        os.nice(19)
    buf = mmap.mmap(fd, _DEADLINE.size, prot=mmap.PROT_READ)
    mono, unpack = time.monotonic, _DEADLINE.unpack_from
    while os.getppid() == parent:
        now = mono()
        deadline = unpack(buf, 0)[0]
        if now < deadline:
            end = min(deadline, now + SPIN_SLICE_S)
            while mono() < end:
                pass
        else:
            time.sleep(IDLE_POLL_S)


def main(argv: list[str]) -> int:
    """``python -m serving.keepwarm FD PARENT_PID``: one spinner (see :class:`KeepWarm`)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the server, which stops us
    _spin(int(argv[1]), int(argv[2]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
