"""Reload the served dependency graph from its file on a schedule (``FLEETMIND_GRAPH_REFRESH_S``).

``fleetmind graph build`` (e.g. a CronJob) rewrites the file; this thread notices a rewritten file
(its inode, size, modification or change time differ) and, when its bytes differ from the last file
content it loaded (SHA-256), swaps the graph in
(:meth:`fleetmind.serving.graphstore.GraphStore.replace_if`), as ``PUT /api/v1/graph`` does. So a
graph uploaded with ``PUT`` is served until the file's content changes: the same bytes written
again (a CronJob run on an unchanged cluster, a ``touch``) keep it. An upload that arrives while a
changed file loads (seconds for a large graph) is kept too: the swap happens only if the graph
served when the change was noticed is still served; otherwise that content counts as seen, is
logged at INFO, and the next content change replaces the upload.

What keeps the served graph:

- content that fails validation (not UTF-8, not JSON, malformed, no nodes): logged at ERROR in one
  line and kept in :attr:`GraphRefresher.last_error`; that version of the file is not read again.
- a file that cannot be read (deleted, moved away, permissions, I/O): logged once at WARNING and
  kept in :attr:`GraphRefresher.last_error`; read again at every check, so it loads once readable.

``/readyz`` (which needs no token) lists only the kind of failure under ``warnings`` (the file
cannot be read, is not valid JSON, or is not a valid graph: :meth:`GraphRefresher.warning`); the
full reason, which may quote node ids or names from the file, stays in the log and in
:attr:`GraphRefresher.last_error`. The service stays ready.
"""

from __future__ import annotations

import codecs
import hashlib
import json
import logging
import os
import threading

from fleetmind.data.errors import DataError
from fleetmind.data.graph import DependencyGraph
from fleetmind.serving.graphstore import FileVersion, GraphStore

log = logging.getLogger("fleetmind.serving.graph")

Stamp = tuple[int, int, int, int]
"""``(inode, size in bytes, mtime in ns, ctime in ns)`` of a file (:attr:`FileVersion.stamp`)."""


UNREADABLE, NOT_JSON, NOT_GRAPH = (
    "the file cannot be read",
    "the file is not valid JSON",
    "the file is not a valid graph",
)
FAILED = "loading it failed"
"""The kinds of failure ``/readyz`` names (:meth:`GraphRefresher.warning`): the file is gone or
cannot be read; its bytes are not UTF-8 JSON that Python parses; the JSON is no graph of the data
contract (malformed, duplicate ids, no nodes); anything else (a bug: its traceback is logged)."""


def _content_kind(raw: bytes) -> str:
    """The kind of failure of graph file bytes ``raw`` that :meth:`DependencyGraph.load` refused:
    :data:`NOT_JSON` when they are not JSON text as it reads them (UTF-8, an optional byte order
    mark; RFC 8259 section 8.1), else :data:`NOT_GRAPH`."""
    try:
        json.loads(raw.removeprefix(codecs.BOM_UTF8).decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        return NOT_JSON
    return NOT_GRAPH


def _stamp(st: os.stat_result) -> Stamp:
    return (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def file_stamp(path: str) -> Stamp | None:
    """``path``'s :data:`Stamp` from ``os.stat``, ``None`` when it cannot be read."""
    try:
        return _stamp(os.stat(path))
    except OSError:
        return None


def read_file(path: str) -> tuple[FileVersion, bytes]:
    """The file's version and bytes, both from one open file.

    Raises:
        OSError: the file is missing, a folder, or cannot be read.
    """
    with open(path, "rb") as f:
        st = os.fstat(f.fileno())
        raw = f.read()
    return FileVersion(_stamp(st), hashlib.sha256(raw).hexdigest()), raw


def file_version(path: str) -> FileVersion | None:
    """The version of the file at ``path`` (:func:`read_file`), ``None`` when it cannot be read.

    ``build_services`` takes it before loading the graph, so the refresher reloads a file that
    changed while the service started (the models take seconds to load).
    """
    try:
        return read_file(path)[0]
    except OSError:
        return None


class GraphRefresher:
    """Check ``path`` every ``interval_s`` seconds; load and swap the graph when its content changed.

    Args:
        graphs: the store to swap graphs into.
        path: the graph file (``FLEETMIND_GRAPH``).
        interval_s: seconds between checks.
        loaded: the version of the file the served graph was read from (:func:`file_version`,
            taken before the read). ``None``: the file as it is now counts as seen, its content as
            unknown (the next rewritten file is loaded whatever its bytes).
    """

    def __init__(
        self,
        graphs: GraphStore,
        path: str,
        interval_s: float,
        loaded: FileVersion | None = None,
    ) -> None:
        self.graphs = graphs
        self.path = path
        self.interval_s = interval_s
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._seen: Stamp | None = file_stamp(path) if loaded is None else loaded.stamp
        self._loaded_sha256 = None if loaded is None else loaded.sha256
        self._content_error: str | None = None  # why the file version in _seen is not served
        self._content_kind: str | None = None  # ... and its kind (NOT_JSON, NOT_GRAPH)
        self._read_error: str | None = None  # why the file cannot be read now
        self.reloads = 0
        self.last_error: str | None = None
        """Why the file's graph is not served (its content is invalid, or it cannot be read), in
        one line; ``None`` when nothing is wrong. It may quote the file's path and contents."""
        self.last_error_kind: str | None = None
        """The kind of :attr:`last_error` (:data:`UNREADABLE`, :data:`NOT_JSON`,
        :data:`NOT_GRAPH` or :data:`FAILED`): all that ``/readyz`` shows of it."""

    def check(self) -> bool:
        """Reload once if the file's content changed; True when a new graph is served."""
        try:
            stamp = _stamp(os.stat(self.path))
            if stamp == self._seen:
                self._readable()
                return False
            served = self.graphs.view.version  # an upload swapped in after this one wins
            version, raw = read_file(self.path)
        except OSError as err:
            self._unreadable(err)
            return False
        self._readable()
        if version.sha256 == self._loaded_sha256:  # the same bytes again: an upload stays served
            self._settle(version.stamp, None)
            return False
        try:
            graph = DependencyGraph.load(self.path)
        except DataError as err:  # the file's content (read just above)
            self._settle(version.stamp, str(err), _content_kind(raw))
            log.error("graph %s not reloaded: %s", self.path, err)
            return False
        swapped = self.graphs.replace_if(graph, self.path, served)
        if file_stamp(self.path) == version.stamp:
            self._loaded_sha256 = version.sha256
            self._settle(version.stamp, None)
        else:  # rewritten while it was loaded: which bytes it holds is unknown; look again
            # (bytes that lost to an upload stay seen: the same bytes written again keep it)
            self._loaded_sha256 = version.sha256 if swapped is None else None
            self._settle(None, None)
        if swapped is None:  # this content counts as seen: the same bytes again keep the upload
            log.info(
                "graph %s changed, but graph version %d was swapped in while it loaded; serving "
                "that one until the file's content changes again",
                self.path,
                self.graphs.view.version,
            )
            return False
        self.reloads += 1
        log.info("graph reloaded from %s (%d nodes)", self.path, graph.num_nodes)
        return True

    def _settle(
        self, stamp: Stamp | None, content_error: str | None, kind: str | None = None
    ) -> None:
        """Mark the file version ``stamp`` as dealt with: loaded, or refused for its content
        (``content_error``, of kind ``kind``)."""
        self._seen = stamp
        self._content_error = content_error
        self._content_kind = kind if content_error is not None else None
        self.last_error, self.last_error_kind = content_error, self._content_kind

    def _unreadable(self, err: OSError) -> None:
        if isinstance(err, FileNotFoundError):
            why = "the file is gone (deleted or moved away)"
        else:
            why = f"cannot read it: {err.strerror or err}"
        text = f"graph {self.path} not reloaded: {why}"
        if text != self._read_error:  # once per problem, not at every check
            log.warning("%s; serving the graph loaded before", text)
        self._read_error = self.last_error = text
        self.last_error_kind = UNREADABLE

    def _readable(self) -> None:
        if self._read_error is not None:
            log.info("graph %s is readable again", self.path)
            self._read_error = None
            self.last_error, self.last_error_kind = self._content_error, self._content_kind

    def warning(self) -> str | None:
        """The ``/readyz`` warning of :attr:`last_error`, ``None`` when nothing is wrong.

        ``/readyz`` needs no token, so it names the kind of failure only
        (:attr:`last_error_kind`), not the path (``FLEETMIND_GRAPH``) nor the reason, which may
        quote node ids from the file (``duplicate node id '<cluster>/pod/<ns>/<name>'``); the
        reason is logged when the file is refused."""
        if self.last_error is None:
            return None
        return (
            f"graph: FLEETMIND_GRAPH not loaded, still serving graph version "
            f"{self.graphs.view.version} (a restart would fail): "
            f"{self.last_error_kind or FAILED}; the reason is in the service's log"
        )

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                self.check()
            except Exception as err:  # never let the thread die; say it where errors are read
                self.last_error = f"graph {self.path} not reloaded: {type(err).__name__}: {err}"
                self.last_error_kind = FAILED
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
