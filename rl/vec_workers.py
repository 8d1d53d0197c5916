"""``SubprocVecEnv`` workers that end cleanly: the parent never waits forever for a worker that
has ended, and a FleetMind error in a worker (``ConfigError``, ``DataError``...) is raised in the
parent as that same error, one line in the CLI, instead of SB3's pipe-error traceback.

A worker reports its error with :func:`worker_exit` (a file ``worker-<rank>.txt`` in the folder
the parent made, then ``os._exit``); :func:`subproc_vec_env` reads it back when a pipe ends.
Each worker first asks to get SIGKILL when the process that built the ``SubprocVecEnv`` ends
(:func:`fleetmind.children.die_with_parent`), so a command stopped by SIGTERM or SIGKILL leaves no
worker behind: forked workers hold copies of each other's pipe ends and would never see the end of
their own pipe.
Used by :func:`fleetmind.rl.ppo.make_vec_env` (fgd mode) and the dynamic-mode recipe.
"""

from __future__ import annotations

import os
import signal
import tempfile
from pathlib import Path
from typing import Any, NoReturn

import numpy as np

from fleetmind.children import die_with_parent
from fleetmind.data.errors import (
    ConfigError,
    DataError,
    FleetMindError,
    ModelLoadError,
    NotAvailableError,
)

_WORKER_GONE = (EOFError, ConnectionError)
"""What the parent of a ``SubprocVecEnv`` sees when a worker process has ended."""


def worker_exit(err_dir: str | None, rank: int, err: FleetMindError) -> NoReturn:
    """In a ``SubprocVecEnv`` worker: leave ``err`` (class and message) for the parent in
    ``err_dir`` and end the process at once, without a traceback; re-raise it elsewhere."""
    if err_dir is None:
        raise err
    Path(err_dir, f"worker-{rank}.txt").write_text(f"{type(err).__name__}\n{err}", "utf-8")
    os._exit(2)


def worker_error(err_dir: str) -> FleetMindError | None:
    """The FleetMind error a worker left in ``err_dir`` (:func:`worker_exit`), or None."""
    classes = {c.__name__: c for c in (ConfigError, DataError, ModelLoadError, NotAvailableError)}
    for f in sorted(Path(err_dir).glob("worker-*.txt")):
        name, _, msg = f.read_text("utf-8").partition("\n")
        return classes.get(name, FleetMindError)(msg)
    return None


class PolledPipe:
    """The parent's end of a ``SubprocVecEnv`` worker's pipe whose ``recv`` raises ``EOFError``
    once that worker process has ended with nothing left to read.

    SB3 forks the workers one after another and closes the parent's copy of each worker's end
    only after forking it (``stable_baselines3/common/vec_env/subproc_vec_env.py``,
    ``SubprocVecEnv.__init__``), so worker 0 holds a copy of the ends of workers 1, 2...: when
    one of those ends, a plain ``recv`` here never sees end-of-file and waits forever.
    ``poll_s`` (seconds) is how often the worker is checked while nothing has come; an answer
    is read as soon as it comes.
    """

    def __init__(self, conn: Any, process: Any, poll_s: float = 1.0) -> None:
        self._conn, self._process, self._poll_s = conn, process, float(poll_s)

    def recv(self) -> Any:
        while not self._conn.poll(self._poll_s):
            if not self._process.is_alive() and not self._conn.poll(0):
                raise EOFError(f"worker process {self._process.pid} ended")
        return self._conn.recv()

    def __getattr__(self, name: str) -> Any:  # send, poll, close...: the pipe's own
        return getattr(self._conn, name)


class DieWithParent:
    """An env factory that, in the worker process, first asks for SIGKILL when ``parent_pid`` ends
    (:func:`fleetmind.children.die_with_parent`), then builds the env with ``fn``."""

    def __init__(self, fn: Any, parent_pid: int) -> None:
        self.fn, self.parent_pid = fn, int(parent_pid)

    def __call__(self) -> Any:
        die_with_parent(self.parent_pid, signal.SIGKILL)
        return self.fn()


def subproc_vec_env(fns: list[Any], err_dir: tempfile.TemporaryDirectory[str]) -> Any:
    """A ``SubprocVecEnv`` (``fork``) of ``fns`` whose calls, when a worker (any rank) has
    ended on a FleetMind error (:func:`worker_exit`), raise that error instead of the pipe
    error its end causes here (one line in the CLI). A worker that ended any other way gives
    ``EOFError`` (never a wait without end, :class:`PolledPipe`). Each worker ends with this
    process, however it ends (:class:`DieWithParent`)."""
    from stable_baselines3.common.vec_env import SubprocVecEnv

    parent_pid = os.getpid()  # taken before the fork: the workers' parent
    fns = [DieWithParent(fn, parent_pid) for fn in fns]

    def _raise_worker_error(venv: Any) -> None:
        err = worker_error(err_dir.name)
        if err is None:
            return
        if venv is not None:
            venv.close()
        err_dir.cleanup()
        raise err

    class _Subproc(SubprocVecEnv):
        def __init__(self, env_fns: list[Any], start_method: str) -> None:
            super().__init__(env_fns, start_method=start_method)
            # every later recv (step_wait, reset, env_method, get_attr...) is polled
            self.remotes = tuple(
                PolledPipe(r, p) for r, p in zip(self.remotes, self.processes, strict=True)
            )

        def _guard(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
            try:
                return fn(*args, **kwargs)
            except _WORKER_GONE:
                _raise_worker_error(self)
                raise

        def reset(self) -> Any:
            return self._guard(super().reset)

        def step_async(self, actions: np.ndarray) -> None:
            self._guard(super().step_async, actions)

        def step_wait(self) -> Any:
            return self._guard(super().step_wait)

        def env_method(self, *args: Any, **kwargs: Any) -> Any:
            return self._guard(super().env_method, *args, **kwargs)

        def get_attr(self, *args: Any, **kwargs: Any) -> Any:
            return self._guard(super().get_attr, *args, **kwargs)

        def set_attr(self, *args: Any, **kwargs: Any) -> Any:
            return self._guard(super().set_attr, *args, **kwargs)

        def _end_workers(self) -> None:
            """A worker has ended: end the others (an answer they sent may already have been
            read, so waiting for one could take forever) and close the pipes."""
            for proc in self.processes:
                if proc.is_alive():
                    proc.terminate()
            for proc in self.processes:
                proc.join()
            for remote in self.remotes:
                remote.close()
            self.closed = True

        def close(self) -> None:
            if not self.closed:
                if all(proc.is_alive() for proc in self.processes):
                    try:
                        super().close()
                    except (*_WORKER_GONE, OSError):  # one ended meanwhile
                        self._end_workers()
                else:
                    self._end_workers()
            err_dir.cleanup()

    try:
        return _Subproc(fns, start_method="fork")
    except _WORKER_GONE:
        _raise_worker_error(None)
        raise
