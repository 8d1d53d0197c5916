"""Reload the served dependency graph from its file on a schedule (``FLEETMIND_GRAPH_REFRESH_S``).

``fleetmind graph build`` (e.g. a CronJob) rewrites the file; this thread notices a changed file
(modification time or size) and swaps the graph in (:meth:`fleetmind.serving.graphstore.GraphStore.replace`),
as ``PUT /api/v1/graph`` does. A file that fails validation (not JSON, malformed, no nodes) keeps
the served graph, is logged at ERROR in one line and is kept in :attr:`GraphRefresher.last_error`.
"""

from __future__ import annotations

import logging
import os
import threading

from fleetmind.data.errors import DataError
from fleetmind.data.graph import DependencyGraph
from fleetmind.serving.graphstore import GraphStore

log = logging.getLogger("fleetmind.serving.graph")


class GraphRefresher:
    """Check ``path`` every ``interval_s`` seconds; load and swap the graph when it changed."""

    def __init__(self, graphs: GraphStore, path: str, interval_s: float) -> None:
        self.graphs = graphs
        self.path = path
        self.interval_s = interval_s
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._seen = self._stamp()
        self.reloads = 0
        self.last_error: str | None = None

    def _stamp(self) -> tuple[float, int] | None:
        try:
            st = os.stat(self.path)
        except OSError:
            return None
        return (st.st_mtime, st.st_size)

    def check(self) -> bool:
        """Reload once if the file changed; True when a new graph is served."""
        stamp = self._stamp()
        if stamp is None or stamp == self._seen:
            return False
        self._seen = stamp
        try:
            graph = DependencyGraph.load(self.path)
        except DataError as err:
            self.last_error = str(err)
            log.error("graph %s not reloaded: %s", self.path, err)
            return False
        self.graphs.replace(graph, source=self.path)
        self.reloads += 1
        self.last_error = None
        log.info("graph reloaded from %s (%d nodes)", self.path, graph.num_nodes)
        return True

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                self.check()
            except Exception as err:  # never let the thread die; say it where errors are read
                self.last_error = f"graph {self.path} not reloaded: {type(err).__name__}: {err}"
                log.exception("graph refresh failed")

    def start(self) -> None:
        self._thread = threading.Thread(
            target=self._run, name="fleetmind-graph-refresh", daemon=True
        )
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
