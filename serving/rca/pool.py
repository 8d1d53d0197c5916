"""Ranking processes for ``POST /api/v1/rca``: requests, not connections, spread over the cores.

Ranking a 200-alert incident is ~6 ms of CPU-bound Python and torch, and parsing its 115 KB body
another ~1-2 ms; one process does that on one core at a time. ``uvicorn --workers N`` gives each
worker the connections it happened to accept, so a few busy keep-alive connections can all land
on one worker. With ``FLEETMIND_RCA_PROCESSES=N`` the server process keeps HTTP, routing and
everything else, and queues each RCA request's raw body for ``N`` ranking processes
(:class:`RankingPool`): first come, first served, a process takes up to
``FLEETMIND_RCA_PROCESS_MAX_BATCH`` queued requests whenever it has answered its previous ones,
parses the bodies, ranks them together (``find_root_causes_many``, as :mod:`fleetmind.serving.rca.batcher`
does in-process) and returns the finished response JSON.

What a ranking process ranks with is shipped from the server process, never loaded on its own:
the served model (``registry.current.rca``, the :class:`fleetmind.serving.registry.LoadedModel`) and graph
objects are pickled to a ranking process the first time a request needs them there, under a
token; the request names the tokens. So a request is ranked by exactly the model and graph it read
in the server process: a model reload or a graph ``PUT`` swaps the server's reference as before,
requests in flight finish on the objects they read, and later requests ship the new ones (no
request fails during a swap, and no process serves a model the server does not). When the server
drops its last reference to an object, the ranking processes forget it too.

Protocol, over one ``socketpair`` per process: frames of a 4-byte big-endian length and a pickle.
Server -> process: ``("config", dict)`` first, ``("obj", token, pickled_object)``,
``("drop", token)``, ``("rca", job, model_token, graph_token, body)``. Process -> server:
``("ready", pid)`` and ``("results", [(job, kind, payload), ...], [batch sizes])`` where ``kind`` is
``"ok"`` (payload: the response JSON bytes), ``"invalid"`` (the body failed validation: the server
parses it again to answer the exact 422) or ``"error"`` (payload: the pickled exception, raised in
the server as the in-process path would raise it). The server turns each into a typed answer,
:class:`Ranked`, :class:`Invalid` or :class:`Failed` (the error unpickled), which
:meth:`RankingPool.rank` returns; the kinds stay strings on the wire, where an exception travels as
its own pickle so that one that does not unpickle spoils only its own answer.

If a ranking process dies, its requests in flight are ranked in the server process instead
(:class:`PoolUnavailable`) and the process is started again.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import os
import pickle
import select
import signal
import socket
import struct
import subprocess
import sys
import weakref
from collections import deque
from dataclasses import dataclass, field
from typing import Any

import fleetmind.rca.gat_analyzer  # noqa: F401 - loaded before a ranking process freezes its GC, as in the server
from fleetmind.data.graph import DependencyGraph
from fleetmind.serving.rca.batcher import rank_group
from fleetmind.serving.rca.request import parse_for, response_json
from fleetmind.serving.tuning import set_torch_threads, tune_gc, tune_malloc

log = logging.getLogger("fleetmind.serving")

_LEN = struct.Struct("!I")


class PoolUnavailable(Exception):
    """No ranking process can take the request (none alive, or it died with the request)."""


@dataclass(frozen=True, slots=True)
class Ranked:
    """A ranking process ranked the request: ``body`` is the finished response JSON (UTF-8 bytes),
    answered as is."""

    body: bytes


@dataclass(frozen=True, slots=True)
class Invalid:
    """The request body failed validation: the caller parses it again to raise the exact 422."""


@dataclass(frozen=True, slots=True)
class Failed:
    """Parsing or ranking raised ``error``: the caller raises it, as the in-process path would."""

    error: BaseException


@dataclass(frozen=True, slots=True)
class Unavailable:
    """No ranking process could answer (:class:`PoolUnavailable`): the caller ranks in-process."""


PoolAnswer = Ranked | Invalid | Failed
"""What :meth:`RankingPool.rank` returns."""
PoolOutcome = Ranked | Invalid | Failed | Unavailable
"""What asking the ranking processes came to, :class:`Unavailable` included (the route and its
fast lane hand it on to the in-process path)."""


def _frame(msg: Any) -> bytes:
    data = pickle.dumps(msg, protocol=pickle.HIGHEST_PROTOCOL)
    return _LEN.pack(len(data)) + data


@dataclass(eq=False)
class _Child:
    slot: int
    proc: subprocess.Popen[bytes]
    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter
    ready: asyncio.Future[int]
    bell: socket.socket
    pending: dict[int, asyncio.Future[PoolAnswer]] = field(default_factory=dict)
    installed: set[int] = field(default_factory=set)
    alive: bool = True
    served: int = 0
    task: asyncio.Task[None] | None = None


class RankingPool:
    """``processes`` ranking processes fed request by request from the server's event loop.

    Args:
        processes: number of ranking processes (about one per core).
        config: what each process applies at start: ``torch_threads``, ``gc_gen0_threshold``,
            ``malloc_mmap_threshold_mb``, ``max_batch``, ``nice`` (see
            :class:`fleetmind.serving.settings.Settings`).
        on_batch: called with the size of every batch a process ranked (metrics).
        start_timeout_s: how long a process may take to import its libraries and say ready.
    """

    def __init__(
        self,
        processes: int,
        config: dict[str, Any],
        on_batch: Any = None,
        start_timeout_s: float = 120.0,
    ) -> None:
        if processes < 1:
            raise ValueError("processes must be >= 1")
        self.processes = processes
        self.config = dict(config)
        self.on_batch = on_batch
        self.start_timeout_s = start_timeout_s
        self.restarts = 0
        self._failed_starts = 0
        self._children: list[_Child | None] = [None] * processes
        self._loop: asyncio.AbstractEventLoop | None = None
        self._tokens: dict[int, int] = {}  # id(object) -> token, while the object lives
        self._blobs: dict[int, bytes] = {}  # token -> the object's pickle
        self._next_token = 0
        self._next_job = 0
        self._turn = 0
        self.max_batch = int(config.get("max_batch") or 16)
        self._queue: deque[tuple[Any, Any, bytes, asyncio.Future[PoolAnswer]]] = deque()
        self._stopping = False

    # ------------------------------------------------------------------ lifecycle
    async def start(self) -> None:
        """Start every process and wait until each has imported its libraries."""
        self._loop = asyncio.get_running_loop()
        children = [await self._spawn(i) for i in range(self.processes)]
        try:
            await asyncio.wait_for(
                asyncio.gather(*(c.ready for c in children)), self.start_timeout_s
            )
        except (TimeoutError, PoolUnavailable) as err:
            await self.stop()
            raise RuntimeError(f"RCA ranking processes did not start: {err!r}") from None

    async def stop(self) -> None:
        """Close the processes' sockets (they exit on end of input) and reap them."""
        self._stopping = True
        for c in self._children:
            if c is not None:
                c.writer.close()
                c.bell.close()
        for c in self._children:
            if c is None:
                continue
            try:
                await asyncio.wait_for(asyncio.to_thread(c.proc.wait), 10)
            except TimeoutError:
                c.proc.kill()
            if c.task is not None:
                c.task.cancel()
        self._children = [None] * self.processes

    @property
    def pids(self) -> list[int]:
        """Process ids of the live ranking processes."""
        return [c.proc.pid for c in self._children if c is not None and c.alive]

    def served(self) -> list[int]:
        """Requests handed to each live process so far (by slot order)."""
        return [c.served for c in self._children if c is not None and c.alive]

    @property
    def objects(self) -> int:
        """Objects (models, graphs) the server process has shipped and still holds."""
        return len(self._tokens)

    async def _spawn(self, slot: int) -> _Child:
        parent, child_sock = socket.socketpair()
        bell, child_bell = socket.socketpair()
        try:  # room for a batch of bodies in the socket where the system allows it
            parent.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 2 << 20)
        except OSError:
            pass
        fds = [child_sock.fileno(), child_bell.fileno()]
        proc = subprocess.Popen(
            [sys.executable, "-m", "fleetmind.serving.rca.pool", *map(str, fds)],
            pass_fds=fds,
        )
        child_sock.close()
        child_bell.close()
        bell.setblocking(False)
        reader, writer = await asyncio.open_unix_connection(sock=parent)
        assert self._loop is not None
        child = _Child(slot, proc, reader, writer, self._loop.create_future(), bell)
        child.writer.write(_frame(("config", self.config)))
        child.task = asyncio.create_task(self._read(child))
        self._children[slot] = child
        return child

    async def _respawn(self, slot: int) -> None:
        await asyncio.sleep(1.0)
        if self._stopping:
            return
        self.restarts += 1
        try:
            child = await self._spawn(slot)
            await asyncio.wait_for(child.ready, self.start_timeout_s)
        except Exception as err:  # noqa: BLE001 - keep serving with the others / in-process
            log.error("RCA ranking process %d could not be restarted: %r", slot, err)

    # ------------------------------------------------------------------ requests
    async def rank(self, model: Any, graph: Any, body: bytes) -> PoolAnswer:
        """Have a ranking process answer an RCA request (first come, first served).

        Requests wait in one queue, in arrival order; a process takes up to ``max_batch`` of them
        whenever it has none left to answer (a lone request goes at once to an idle process).
        So a request never waits behind another process's batch while a process is free, and it
        waits for at most one batch of its own.

        Args:
            model: the served :class:`fleetmind.serving.registry.LoadedModel` (read once by the caller).
            graph: the served :class:`fleetmind.data.graph.DependencyGraph` (the body may name another).
            body: the raw request body.

        Returns:
            :class:`Ranked` (the response JSON), :class:`Invalid` (the caller parses the body to
            raise the exact 422) or :class:`Failed` (the caller raises its error).

        Raises:
            PoolUnavailable: no process alive, or the process died before answering.
        """
        if not any(c is not None and c.alive for c in self._children):
            raise PoolUnavailable("no RCA ranking process is running")
        assert self._loop is not None
        fut: asyncio.Future[PoolAnswer] = self._loop.create_future()
        self._queue.append((model, graph, body, fut))
        self._pump()
        return await fut

    def _pump(self) -> None:
        """Hand queued requests to processes that have nothing left to answer."""
        live = [c for c in self._children if c is not None and c.alive and c.ready.done()]
        if not live:
            if not any(c is not None and c.alive for c in self._children):
                while self._queue:  # none will come back: rank them in the server
                    fut = self._queue.popleft()[3]
                    if not fut.done():
                        fut.set_exception(PoolUnavailable("no RCA ranking process is running"))
            return
        n = len(live)
        while self._queue:
            # an idle process; ties go round the processes, so a lone client's requests spread
            self._turn += 1
            idle = [c for c in (live[(self._turn + i) % n] for i in range(n)) if not c.pending]
            if not idle:
                return
            child = idle[0]
            taken = 0
            while self._queue and taken < self.max_batch:
                model, graph, body, fut = self._queue.popleft()
                if fut.done():  # the client went away while it waited
                    continue
                self._send(child, model, graph, body, fut)
                taken += 1

    def _send(self, child: _Child, model: Any, graph: Any, body: bytes, fut: Any) -> None:
        tokens = []
        for obj in (model, graph):
            tok = self._token(obj)
            if tok not in child.installed:
                child.writer.write(_frame(("obj", tok, self._blobs[tok])))
                child.installed.add(tok)
            tokens.append(tok)
        job = self._next_job
        self._next_job += 1
        child.pending[job] = fut
        child.served += 1
        child.writer.write(_frame(("rca", job, tokens[0], tokens[1], body)))
        try:  # one byte: the process waits for this request before it starts its next batch
            child.bell.send(b"\x01")
        except OSError:  # full or closed: the process just does not wait for it
            pass

    def _token(self, obj: Any) -> int:
        tok = self._tokens.get(id(obj))
        if tok is None:
            tok = self._next_token
            self._next_token += 1
            self._blobs[tok] = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
            self._tokens[id(obj)] = tok
            weakref.finalize(obj, self._forget, id(obj), tok)
        return tok

    def _forget(self, oid: int, tok: int) -> None:
        """The server dropped the object: forget it here and in the processes (any thread)."""
        self._tokens.pop(oid, None)
        self._blobs.pop(tok, None)
        loop = self._loop
        if loop is None or loop.is_closed():
            return
        try:
            loop.call_soon_threadsafe(self._send_drop, tok)
        except RuntimeError:  # loop closed meanwhile
            pass

    def _send_drop(self, tok: int) -> None:
        for c in self._children:
            if c is not None and c.alive and tok in c.installed:
                c.installed.discard(tok)
                c.writer.write(_frame(("drop", tok)))

    async def _read(self, child: _Child) -> None:
        try:
            while True:
                (n,) = _LEN.unpack(await child.reader.readexactly(_LEN.size))
                msg = pickle.loads(await child.reader.readexactly(n))
                if msg[0] == "results":
                    for job, kind, payload in msg[1]:
                        fut = child.pending.pop(job, None)
                        if fut is not None and not fut.done():
                            fut.set_result(_answer(kind, payload))
                    if self.on_batch is not None:
                        for size in msg[2]:
                            self.on_batch(size)
                    self._pump()
                elif msg[0] == "ready" and not child.ready.done():
                    child.ready.set_result(msg[1])
                    self._pump()
        except (asyncio.IncompleteReadError, ConnectionError, OSError):
            pass
        finally:
            child.alive = False
            gone = PoolUnavailable(f"RCA ranking process {child.proc.pid} exited")
            started = child.ready.done()
            if not started:
                child.ready.set_exception(gone)
                self._failed_starts += 1
            for fut in child.pending.values():
                if not fut.done():
                    fut.set_exception(gone)
            child.pending.clear()
            child.writer.close()
            child.bell.close()
            if not self._stopping:
                if self._failed_starts > 3 * self.processes:
                    log.error("RCA ranking processes keep failing to start; ranking in the server")
                else:
                    log.error("RCA ranking process %d exited; starting another", child.proc.pid)
                    asyncio.get_running_loop().create_task(self._respawn(child.slot))
                self._pump()  # the others take the queue (or it is ranked in the server)


def _answer(kind: str, payload: Any) -> PoolAnswer:
    """The typed answer of one ``(job, kind, payload)`` entry of a ``results`` frame."""
    if kind == "ok":
        return Ranked(payload)
    if kind == "invalid":
        return Invalid()
    return Failed(_load_error(payload))


def _load_error(blob: bytes) -> BaseException:
    try:
        err = pickle.loads(blob)
    except Exception as e:  # noqa: BLE001
        return RuntimeError(f"ranking failed (its error could not be read: {e!r})")
    return err if isinstance(err, BaseException) else RuntimeError(str(err))


def _dump_error(err: BaseException) -> bytes:
    try:
        return pickle.dumps(err, protocol=pickle.HIGHEST_PROTOCOL)
    except Exception:  # noqa: BLE001 - an exception that does not pickle
        return pickle.dumps(RuntimeError(f"{type(err).__name__}: {err}"))


# ---------------------------------------------------------------------------------- the process
class _Inbox:
    """Frames from the server: blocks for the first, then takes every job already sent.

    A 115 KB request body does not fit twice in a socket buffer (~200 KB by default), so most
    requests queued for this process wait in the server's write buffer, not in the socket. The
    server rings ``bell`` (one byte per request it hands this process) as it queues each one;
    :meth:`take` then waits for every request rung so far, so a batch holds everything the server
    has queued here, as the in-process batcher's does.
    """

    def __init__(self, sock: socket.socket, bell: socket.socket | None = None) -> None:
        self.sock = sock
        self.bell = bell
        self.buf = bytearray()
        self.announced = 0  # requests the server has rung for
        self.received = 0  # requests read

    def _fill(self, block: bool) -> bool:
        if not block and not select.select([self.sock], [], [], 0)[0]:
            return False
        data = self.sock.recv(1 << 20)
        if not data:
            raise EOFError
        self.buf += data
        return True

    def _rings(self) -> int:
        n = 0
        while self.bell is not None:
            try:
                got = self.bell.recv(1 << 16)
            except (BlockingIOError, InterruptedError):
                break
            if not got:
                break
            n += len(got)
        return n

    def _frames(self) -> list[Any]:
        out = []
        pos, buf = 0, self.buf
        while len(buf) - pos >= _LEN.size:
            (n,) = _LEN.unpack_from(buf, pos)
            if len(buf) - pos - _LEN.size < n:
                break
            out.append(pickle.loads(buf[pos + _LEN.size : pos + _LEN.size + n]))
            pos += _LEN.size + n
        del buf[:pos]
        self.received += sum(1 for m in out if m[0] == "rca")
        return out

    def take(self) -> list[Any]:
        """At least one message (blocks), plus every complete one already received and every
        request the server has rung for by now."""
        while True:
            while self._fill(False):
                pass
            msgs = self._frames()
            if msgs:
                break
            self._fill(True)
        self.announced += self._rings()
        while self.received < self.announced:
            self._fill(True)
            msgs += self._frames()
        return msgs


def _serve(sock: socket.socket, bell: socket.socket | None = None) -> None:
    inbox = _Inbox(sock, bell)
    first = inbox.take()
    config = first[0][1] if first and first[0][0] == "config" else {}
    backlog = first[1:]

    if config.get("nice"):
        os.nice(int(config["nice"]))
    set_torch_threads(config.get("torch_threads"))
    tune_malloc(config.get("malloc_mmap_threshold_mb"))
    from fastapi.exceptions import RequestValidationError

    gc.collect()
    tune_gc(config.get("gc_gen0_threshold"))
    max_batch = int(config.get("max_batch") or 16)
    sock.sendall(_frame(("ready", os.getpid())))

    objs: dict[int, Any] = {}
    while True:
        msgs = backlog or inbox.take()
        backlog = []
        jobs: list[tuple[Any, ...]] = []
        drops: list[int] = []
        for m in msgs:
            if m[0] == "obj":
                objs[m[1]] = pickle.loads(m[2])
            elif m[0] == "drop":
                drops.append(m[1])  # after this round's jobs, which may still use it
            elif m[0] == "rca":
                jobs.append(m)
        for i in range(0, len(jobs), max_batch):
            out: list[tuple[int, str, Any]] = []
            groups: dict[tuple[int, int], list[tuple[int, Any, Any, Any, int]]] = {}
            for _, job, mtok, gtok, body in jobs[i : i + max_batch]:
                try:
                    model, graph = objs[mtok], objs[gtok]
                    try:
                        req, alerts = parse_for(model.impl, graph, body)
                    except RequestValidationError:
                        out.append((job, "invalid", None))
                        continue
                    if req.graph is not None:
                        graph = DependencyGraph.from_model(req.graph)
                except Exception as err:  # noqa: BLE001 - answered as the server would raise it
                    out.append((job, "error", _dump_error(err)))
                    continue
                key = (id(model.impl), id(graph))
                groups.setdefault(key, []).append((job, model, graph, alerts, req.top_k))
            sizes = []
            for group in groups.values():
                outcomes = rank_group(group[0][1].impl, [(g, a, k) for _, _, g, a, k in group])
                sizes.append(len(group))
                for (job, model, graph, alerts, top_k), (result, error) in zip(
                    group, outcomes, strict=True
                ):
                    if error is not None:
                        out.append((job, "error", _dump_error(error)))
                        continue
                    try:
                        out.append((job, "ok", response_json(model, graph, alerts, top_k, result)))
                    except Exception as err:  # noqa: BLE001
                        out.append((job, "error", _dump_error(err)))
            sock.sendall(_frame(("results", out, sizes)))
        for tok in drops:
            objs.pop(tok, None)


def main(argv: list[str]) -> int:
    """``python -m serving.rca.pool FD [BELL_FD]``: serve ranking requests on socket ``FD`` until
    it closes (``BELL_FD``: the server's one byte per request handed over, see :class:`_Inbox`)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the server, which closes us
    sock = socket.socket(fileno=int(argv[1]))
    bell = socket.socket(fileno=int(argv[2])) if len(argv) > 2 else None
    if bell is not None:
        bell.setblocking(False)
    try:
        _serve(sock, bell)
    except (EOFError, ConnectionError, BrokenPipeError):
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
