"""Micro-batching of synchronous RCA requests (``POST /api/v1/rca``).

Ranking is CPU-bound Python and torch, so one process ranks one incident at a time whatever the
number of threads. Instead of a lock, requests queue for one ranking thread; each time that thread is
free it takes **everything queued** (up to ``max_batch``) and ranks it together: requests for the same
analyzer and graph go through the analyzer's ``find_root_causes_many`` (the GAT runs one batched
forward for all of them, see :meth:`fleetmind.rca.gat_analyzer.GATAnalyzer.find_root_causes_many`, which returns
exactly what ``find_root_causes`` returns per incident), other analyzers are called one by one. There
is no waiting for a batch to fill: an idle server ranks a lone request at once, a busy one batches the
requests that arrived while it was busy, which is when batching pays.

Results are never shared between requests: two requests with the same alerts are ranked twice.
"""

from __future__ import annotations

import asyncio
import queue
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from fleetmind.data.graph import DependencyGraph
from fleetmind.rca.base import RCAResult
from fleetmind.rca.incident_graph import incident_graph


@dataclass
class _Job:
    analyzer: Any
    graph: DependencyGraph
    alerts: Sequence[Mapping[str, Any]]
    top_k: int | None
    loop: asyncio.AbstractEventLoop
    future: asyncio.Future[RCAResult]


def _on_incident_graph(
    item: tuple[DependencyGraph, Any, int | None],
) -> tuple[DependencyGraph, Any, int | None]:
    """``item`` on :func:`fleetmind.rca.incident_graph.incident_graph` (unchanged where the alerts
    cannot be read: the analyzer answers those with its own error)."""
    graph, alerts, top_k = item
    try:
        graph, alerts = incident_graph(graph, alerts)
    except Exception:
        pass
    return graph, alerts, top_k


def rank_group(
    analyzer: Any,
    items: Sequence[tuple[DependencyGraph, Sequence[Mapping[str, Any]], int | None]],
) -> list[tuple[RCAResult | None, Exception | None]]:
    """Rank ``(graph, alerts, top_k)`` items with one analyzer: ``(result, None)`` or
    ``(None, error)`` per item, in order.

    Several items go through ``analyzer.find_root_causes_many`` when it has one (the batched GAT,
    same results as one by one); if that fails, every item is ranked alone so that a bad request
    fails alone with its own error.
    """
    # each incident on its own graph: the served one plus the pod-to-GPU edges its alerts name
    items = [_on_incident_graph(item) for item in items]
    many = getattr(analyzer, "find_root_causes_many", None)
    if many is not None and len(items) > 1:
        try:
            return [(r, None) for r in many(list(items))]
        except Exception:  # one bad request: rank them singly below to answer each its own way
            pass
    out: list[tuple[RCAResult | None, Exception | None]] = []
    for graph, alerts, top_k in items:
        try:
            out.append((analyzer.find_root_causes(graph, alerts, top_k), None))
        except Exception as err:
            out.append((None, err))
    return out


def _deliver(fut: asyncio.Future[RCAResult], result: Any, error: BaseException | None) -> None:
    if fut.cancelled():  # the client went away
        return
    if error is not None:
        fut.set_exception(error)
    else:
        fut.set_result(result)


class RCABatcher:
    """One ranking thread per process that coalesces queued requests into batches.

    Args:
        max_batch: most requests ranked together (bounds the latency a batch adds to its first
            request and the memory of one batched forward).
        on_batch: called after each group with ``(size, seconds)`` (metrics).
    """

    def __init__(
        self, max_batch: int = 16, on_batch: Callable[[int, float], None] | None = None
    ) -> None:
        if max_batch < 1:
            raise ValueError("max_batch must be >= 1")
        self.max_batch = max_batch
        self.on_batch = on_batch
        self._queue: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._stopped = False

    async def rank(
        self,
        analyzer: Any,
        graph: DependencyGraph,
        alerts: Sequence[Mapping[str, Any]],
        top_k: int | None,
    ) -> RCAResult:
        """Rank ``alerts`` on ``graph`` with ``analyzer`` (a ``BaseAnalyzer``); awaits the result.

        Raises whatever ``analyzer.find_root_causes`` raises for these alerts.
        """
        self._ensure_thread()
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[RCAResult] = loop.create_future()
        self._queue.put(_Job(analyzer, graph, alerts, top_k, loop, fut))
        return await fut

    def stop(self, timeout: float = 5.0) -> None:
        """Stop the ranking thread after the queued requests (idempotent)."""
        with self._lock:
            self._stopped = True
            thread = self._thread
            self._thread = None
        if thread is not None:
            self._queue.put(None)
            thread.join(timeout)

    # ------------------------------------------------------------------ worker
    def _ensure_thread(self) -> None:
        if self._thread is not None:
            return
        with self._lock:
            if self._stopped:
                raise RuntimeError("the RCA batcher is stopped")
            if self._thread is None:
                t = threading.Thread(target=self._run, name="fleetmind-rca", daemon=True)
                t.start()
                self._thread = t

    def _run(self) -> None:
        while True:
            job = self._queue.get()
            if job is None:
                return
            jobs = [job]
            stop = False
            while len(jobs) < self.max_batch:
                try:
                    nxt = self._queue.get_nowait()
                except queue.Empty:
                    break
                if nxt is None:
                    stop = True
                    break
                jobs.append(nxt)
            groups: dict[tuple[int, int], list[_Job]] = {}
            for j in jobs:
                groups.setdefault((id(j.analyzer), id(j.graph)), []).append(j)
            for group in groups.values():
                self._rank_group(group)
            if stop:
                return

    def _rank_group(self, jobs: list[_Job]) -> None:
        start = time.perf_counter()
        outcomes = rank_group(jobs[0].analyzer, [(j.graph, j.alerts, j.top_k) for j in jobs])
        for j, (result, error) in zip(jobs, outcomes, strict=True):
            try:
                j.loop.call_soon_threadsafe(_deliver, j.future, result, error)
            except RuntimeError:  # that request's event loop is closed (server shutting down)
                pass
        if self.on_batch is not None:
            self.on_batch(len(jobs), time.perf_counter() - start)
