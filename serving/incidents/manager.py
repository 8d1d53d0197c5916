"""Grouping alerts into incidents and keeping their ranked root causes current.

Ingestion only stores alerts (``pending`` = true) and wakes the :class:`IncidentManager`; its worker
thread (:mod:`fleetmind.serving.incidents.worker`) then, per batch of pending alerts:

1. maps each new firing alert onto a graph node (:func:`fleetmind.serving.alertmap.node_for_alert`);
2. joins it to an open incident, merges incidents or opens one, by the rules of
   :class:`fleetmind.serving.incidents.grouper.Grouper` (time window, graph hops, cluster);
3. for a status change (``resolved``) updates the counts; an incident whose alerts are all resolved is
   ``resolved``, and a re-firing alert reopens it: the same alert firing again, or a new episode
   of its fingerprint (new ``startsAt``) that starts within the window of the incident's closing;
   an alert resolved before it was grouped may join a recently resolved incident instead of
   opening one (:class:`fleetmind.serving.incidents.grouper.Grouper`), so a storm that resolves
   while it is grouped, batch after batch, stays one incident;
4. re-runs the served RCA analyzer on every incident that gained evidence (an alert grouped for the
   first time, or one firing again) and stores the ranked causes. Resolutions alone do not re-rank
   (a storm recovering root first would otherwise move its top cause to a symptom and page on-call
   again), but for one: the last firing alert on the top cause's own node resolved while another
   ranked cause, with at least :data:`LIVE_CAUSE_SHARE` of the score, still has a firing alert on
   its own node and does not depend on the top cause (:func:`live_ranking`). Then a second fault
   outlived the first, and the incident is ranked on its firing alerts, so that the fault still
   firing is named again. The top cause is stored with the incident's alert nodes that depend on
   it (:data:`EXPLAINS`), which the notifier reads. An incident none of whose alerts matches a
   graph node gets no causes (there is nothing to rank; it is never notified).

The SQL is in :mod:`fleetmind.serving.incidents.store`. Because the pending flag is durable, alerts
stored just before a crash are grouped after the restart. Replicas on one database elect one worker
through :class:`fleetmind.serving.db.LeaderLock`; the others take over when it dies.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sqlalchemy import select
from sqlalchemy.exc import DataError, DBAPIError
from sqlalchemy.exc import TimeoutError as PoolTimeout

from fleetmind.data.graph import cached_for_edges
from fleetmind.rca.anchoring import anchor_result, named_symptom
from fleetmind.rca.incident_graph import incident_graph
from fleetmind.serving.alertmap import node_for_alert
from fleetmind.serving.db import Database, LeaderLock, alerts, incidents, is_input_error
from fleetmind.serving.incidents.grouper import ClosedIncident, Grouper
from fleetmind.serving.incidents.store import IncidentStore, alert_dict
from fleetmind.serving.incidents.worker import GroupingLag, IncidentWorker, RankSchedule
from fleetmind.serving.notify import ALERTNAME as OWN_ALERTNAME

if TYPE_CHECKING:
    from sqlalchemy.engine import Connection

    from fleetmind.serving.graphstore import GraphStore, GraphView
    from fleetmind.serving.metrics import Metrics
    from fleetmind.serving.registry import ModelRegistry

log = logging.getLogger("fleetmind.serving")

DATA_SOURCE_REASONS = frozenset({"error", "nodata"})
"""Values of Grafana's ``grafana_state_reason`` annotation (lower-cased) on an alert that fires
because its rule's query failed (``Error``) or returned nothing (``NoData``), the rule's "Alert
state if execution error / no data" being ``Alerting``: news about the data source, like
``DatasourceError`` and ``DatasourceNoData``, not about the fleet."""


def is_data_source_state(row: dict[str, Any]) -> bool:
    """Whether a stored alert (a row of
    :meth:`fleetmind.serving.db.Database.pending_alerts`) carries a ``grafana_state_reason`` of
    :data:`DATA_SOURCE_REASONS`, compared case-insensitively and without the spaces around it:
    the rule the database applies when it stores the alert's deliveries (SQL ``lower(trim(...))``,
    :func:`fleetmind.serving.db._state_reason_sql`; ``trim`` removes spaces only, not tabs or
    newlines), so the alert and its resolution are judged alike."""
    reason = row.get("state_reason")
    return isinstance(reason, str) and reason.strip(" ").lower() in DATA_SOURCE_REASONS


EXPLAINS = "explains"
"""Key of a stored top cause (the first of an incident's ``causes``): the incident's alert nodes
(the nodes its alerts were mapped to when grouped, firing or resolved) that depend on the cause,
directly or through other nodes, on the graph it was ranked on (with the pod-to-GPU edges its
alerts name, :mod:`fleetmind.rca.incident_graph`): the nodes a fault of the cause reaches
(:func:`explained_nodes`; a host's pods and GPUs, a pod's Service, a callee's callers, a link's
GPUs, never another GPU of the host). Nearest first, pods after every other kind, at most
:data:`EXPLAINS_MAX`. The notifier withdraws
an earlier cause it sent that is listed here (a symptom of the new top cause) and keeps one that is
not (a second fault, :data:`fleetmind.serving.notify.KEPT`). Absent from causes ranked before it
was stored; the served API does not show it."""

EXPLAINS_MAX = 256
"""Most nodes :data:`EXPLAINS` lists (those nearest the cause, breadth first, pods last): an incident is ranked
on its newest ``max_rank_alerts`` (1,000) alerts, and the notifier only asks about earlier top
causes, which lie near the new one (a pod on the GPU, a GPU on the host)."""

LIVE_CAUSE_SHARE = 0.05
"""Least score of a ranked cause other than the top for a resolution to re-rank its incident
(:func:`live_ranking`): two unrelated faults share a single-root ranking (the example XID and
host-down storms together: 0.59 and 0.41), while what a single fault breaks is ranked near 0
(0.001 for the XID storm's host)."""


def live_ranking(causes: list[dict[str, Any]], firing_nodes: set[str]) -> bool:
    """Whether an incident ranked ``causes`` (stored, best first) is to be ranked on its firing
    alerts alone, their nodes ``firing_nodes``: no firing alert is left on the top cause's own
    node, while another cause with a score of at least :data:`LIVE_CAUSE_SHARE` has one on its
    own node (a second fault outlived the top one) and is not among the nodes the top cause
    explains (:data:`EXPLAINS`: what depends on it, a symptom still firing after its root
    recovered, is no second fault). Nodes under a cause (a GPU under a host) do not count for it:
    they are causes of their own."""
    if not causes or not firing_nodes or causes[0].get("node") in firing_nodes:
        return False
    explained = set(causes[0].get(EXPLAINS) or ())
    return any(
        c.get("node") in firing_nodes
        and c.get("node") not in explained
        and float(c.get("score") or 0.0) >= LIVE_CAUSE_SHARE
        for c in causes[1:]
    )


_DEPENDENTS_KEY = "incident_dependents"
"""Key of :func:`_dependents`' entry in the graph's own cache dict (``graph._derived``)."""

_PODS_LAST = frozenset({"pod"})
"""Node kinds :func:`explained_nodes` lists after all others: a host or a Service can have
hundreds of alerting pods one hop away, which must not crowd the Service, GPUs or links out of
the :data:`EXPLAINS_MAX` nodes listed."""


def _dependents(graph: Any) -> dict[str, list[str]]:
    """The nodes a fault of each node of ``graph`` reaches in one hop, cached in the graph's
    ``_derived`` dict for its edge list (build it for the served graph, and pass an incident's
    extra edges to :func:`explained_nodes`, so that incidents share one table): the nodes that
    depend on it (an edge's ``src`` from its ``dst``), but for two kinds of edge, one direction
    of the two that :func:`fleetmind.rca.anchoring.dependencies` reads: ``member_of`` a group
    other than a cluster goes from the member to the group only (a pod's crash costs its Service
    capacity; a Service does not pass it on to the other pods), and a ``link``'s ``attached_to``
    goes from the link to its GPUs only (a broken link hangs the GPUs it joins; a GPU does not
    explain the link, nor through it the other GPUs of its host)."""

    def build() -> dict[str, list[str]]:
        out: dict[str, list[str]] = {}
        for e in graph.edges:
            if e.kind == "member_of" and graph.node(e.dst).kind != "cluster":
                out.setdefault(e.src, []).append(e.dst)
            elif e.kind == "attached_to" and graph.node(e.src).kind == "link":
                out.setdefault(e.src, []).append(e.dst)
            else:
                out.setdefault(e.dst, []).append(e.src)
        return out

    return cached_for_edges(graph, _DEPENDENTS_KEY, build)


def dependents(graph: Any) -> Mapping[str, list[str]]:
    """node id -> the node ids a fault of it reaches in one hop on ``graph``: the directed table
    :func:`explained_nodes` walks (:func:`_dependents`, cached per graph; do not change it), for
    walks that draw what a cause explains (:func:`fleetmind.serving.ui.svg.propagation_tree`)."""
    return _dependents(graph)


def explained_nodes(
    graph: Any,
    top: str,
    nodes: Iterable[str],
    limit: int = EXPLAINS_MAX,
    extra: Iterable[Any] = (),
    max_depth: int | None = None,
    max_visits: int | None = None,
) -> list[str]:
    """Of node ids ``nodes`` (an incident's alert nodes), those a fault of node ``top`` of
    ``graph`` (a :class:`fleetmind.data.graph.DependencyGraph`) plus edges ``extra`` (an
    incident's ``pod -runs_on-> GPU`` edges, :mod:`fleetmind.rca.incident_graph`) reaches,
    directly or through other nodes (:func:`_dependents`: what depends on it, and a pod's
    Service), breadth first (nearest first), at most ``limit``: pods after every other kind
    (:data:`_PODS_LAST`), so that many pods do not hide their Service; ``top`` itself is not
    listed. Empty when ``top`` is not a node of ``graph``. ``max_depth`` (hops from ``top``) and
    ``max_visits`` (nodes reached, ``top`` included) bound the walk where given (the incident
    page's drawing: 4 and 50,000); unbounded by default (what the ranking stores for the
    notifier, :data:`EXPLAINS`, which :data:`EXPLAINS_MAX` bounds)."""
    wanted = {n for n in nodes if n != top}
    if not wanted or top not in graph.index:
        return []
    reach, more = _dependents(graph), {}
    for e in extra:
        more.setdefault(e.dst, []).append(e.src)
    kinds = {n: graph.node(n).kind for n in wanted if n in graph.index}
    rest = {n for n, k in kinds.items() if k not in _PODS_LAST}
    n_last = len(kinds) - len(rest)
    seen, todo = {top: 0}, deque([top])  # node -> hops from top
    first: list[str] = []  # found nodes of other kinds than pods, nearest first
    last: list[str] = []  # found pods, nearest first
    while todo and (
        len(first) < min(limit, len(rest)) or len(last) < min(limit - len(first), n_last)
    ):
        u = todo.popleft()
        if max_depth is not None and seen[u] >= max_depth:
            continue
        for v in (*reach.get(u, ()), *more.get(u, ())):
            if v not in seen:
                if max_visits is not None and len(seen) >= max_visits:
                    return (first + last)[:limit]
                seen[v] = seen[u] + 1
                todo.append(v)
                if v in wanted:
                    (first if v in rest else last).append(v)
    return (first + last)[:limit]


RANK_RETRY_S = 5.0
"""A ranking that failed on the database for a passing reason (a lock wait, a lost connection) is
due again this long after (or after ``rank_interval_s`` when longer), seconds."""


def _transient(err: Exception) -> bool:
    """Whether a ranking's ``err`` may pass on its own rather than come back at every try: any
    database error but a refused value (:func:`fleetmind.serving.db.is_input_error`, SQLSTATE
    classes 22 and 23), as the service reads them elsewhere (an outage, 503): a lock wait, a
    statement timeout, a lost connection, a full pool, a database turned read-only (a failover
    to a standby, ``default_transaction_read_only``: ``InternalError``), DDL under way
    (``ProgrammingError``, ``NotSupportedError``). A refused value and a bug (not a database
    error) come back at every try."""
    if isinstance(err, PoolTimeout):
        return True
    return isinstance(err, DBAPIError) and not is_input_error(err)


@dataclass(frozen=True)
class IncidentConfig:
    """How the incident worker groups, ranks and keeps house.

    Attributes:
        window_s: time window of grouping, seconds.
        hops: graph distance of grouping, undirected hops.
        top_k: causes stored per incident.
        rank_interval_s: during storms an incident is re-ranked at most this often, seconds.
        max_rank_alerts: an incident is ranked on its newest this many alerts.
        auto_resolve_s: open incidents unchanged this long are resolved, seconds (0: never).
        retention_s: closed incidents and their alerts are deleted this long after closing,
            seconds (0: kept).
        leader_lease_s: how long a vanished leader holds the lease, seconds (PostgreSQL).
        backlog_rank_s: during a backlog, incidents deferred this long are ranked, seconds.
        housekeeping_interval_s: auto-resolve and retention run at most this often, seconds.
        slo_alerts: alertnames of user-facing alerts (``FLEETMIND_SLO_ALERTS``): when an incident
            has one, its first such alert is the symptom and ranked causes are anchored on it
            (:func:`fleetmind.rca.anchoring.named_symptom`,
            :func:`fleetmind.rca.anchoring.anchor_result`); otherwise the ranking is the model's.
        ungrouped_alerts: alertnames stored but never grouped (``FLEETMIND_UNGROUPED_ALERTS``):
            heartbeats such as kube-prometheus' Watchdog, which always fires, InfoInhibitor, and
            Grafana's DatasourceError, DatasourceNoData and TestAlert (the settings' default);
            alerts with ``severity="none"``, FleetMind's own FleetMindRootCause and alerts a
            Grafana rule fired on a failed or empty query (:data:`DATA_SOURCE_REASONS`) are
            never grouped either.
    """

    window_s: float = 600.0
    hops: int = 2
    top_k: int = 5
    rank_interval_s: float = 2.0
    max_rank_alerts: int = 1000
    auto_resolve_s: float = 0.0
    retention_s: float = 0.0
    leader_lease_s: float = 10.0
    backlog_rank_s: float = 10.0
    housekeeping_interval_s: float = 60.0
    slo_alerts: frozenset[str] = frozenset()
    ungrouped_alerts: frozenset[str] = frozenset(
        {"Watchdog", "InfoInhibitor", "DatasourceError", "DatasourceNoData", "TestAlert"}
    )


def _followed(merges: dict[int, int], inc_id: int | None) -> int | None:
    """``inc_id`` after the merges of a batch (``merges``: merged-away id -> target)."""
    for _ in range(len(merges)):
        if inc_id not in merges:
            break
        inc_id = merges[inc_id]
    return inc_id


class IncidentManager:
    """Groups pending alerts into incidents and re-runs RCA on each update.

    Args:
        db: the database.
        graphs: the served graph.
        registry: the served models (its current RCA analyzer ranks incidents).
        config: grouping, ranking and housekeeping settings (default: :class:`IncidentConfig`).
        metrics: optional metrics (open incidents gauge, grouping lag, RCA latency).
        clock: the wall clock, unix seconds (incidents' opening, update and closing times).
        **overrides: fields of :class:`IncidentConfig` by name (``window_s=300.0``), applied over
            ``config``; an unknown name raises ``TypeError``.
    """

    def __init__(
        self,
        db: Database,
        graphs: GraphStore,
        registry: ModelRegistry,
        config: IncidentConfig | None = None,
        metrics: Metrics | None = None,
        clock: Callable[[], float] = time.time,
        **overrides: Any,
    ) -> None:
        self.config = dataclasses.replace(config or IncidentConfig(), **overrides)
        self.clock = clock
        self.db = db
        self.graphs = graphs
        self.registry = registry
        self.metrics = metrics
        self._unmapped: list[dict[str, Any]] = []
        self.store = IncidentStore(db)
        self.grouper = Grouper(self.config.window_s, self.config.hops)
        self.schedule = RankSchedule(self.config.rank_interval_s)
        self.leader = LeaderLock(db, self.config.leader_lease_s)
        self.lag = _LoopGauges(db, metrics, self._follow)
        self.worker = IncidentWorker(
            self, self.leader, self.schedule, self.lag, self.config.backlog_rank_s, db
        )
        self._process_lock = threading.Lock()
        self._next_housekeeping = 0.0
        # a grouping transaction failed: the open incidents in memory may name rows it rolled back
        self._open_stale = False
        self.set_aside = 0  # alerts whose grouping the database refused (:meth:`_set_aside`)
        self.rankings_dropped = 0  # rankings that failed for good (:meth:`_rank_all`)
        self._dropped_traced: dict[str, float] = {}  # exception type -> last traceback logged
        self._batch_read: list[dict[str, Any]] = []  # the pending rows the last batch read

    # ------------------------------------------------------------------ lifecycle
    def load_open(self) -> None:
        """Rebuild the in-memory open incidents from the database.

        The open-incident gauge is not set here: only the process that groups alerts (the leader,
        :meth:`take_over`) exports the count, so a replica that loaded it at start-up does not
        export that value forever."""
        self.grouper.load(self.store.open_incidents())

    def start(self) -> None:
        """Start the worker thread (idempotent); it groups alerts while it holds the leader lock."""
        if self.worker.running:
            return
        self.load_open()
        self.worker.start()

    def stop(self, timeout: float = 5.0) -> None:
        """Stop the worker thread and release the leader lock."""
        self.worker.stop(timeout)

    def notify(self) -> None:
        """Tell the worker that new alerts are pending."""
        self.worker.notify()

    def take_over(self) -> None:
        """Become the worker: reload the open incidents (the previous leader changed them) and
        queue the rankings it left undone (``needs_ranking``, durable across crashes)."""
        self.load_open()
        self._set_gauge()
        self.schedule.queue(self.db.incidents_needing_ranking(), time.monotonic())

    def update_lag(self) -> None:
        """Export the grouping lag (:meth:`fleetmind.serving.incidents.worker.GroupingLag.refresh`)."""
        self.lag.refresh()

    def stuck_for(self) -> float:
        """Seconds the worker has failed every loop (0 when its last loop succeeded)."""
        return self.worker.stuck_for()

    @property
    def last_error(self) -> str | None:
        """The worker's last failure, ``"Type: message"`` (``None`` once a loop succeeds)."""
        return self.worker.last_error

    @property
    def failing_since(self) -> float | None:
        """Monotonic time of the worker's first failure in a row (``None``: not failing)."""
        return self.worker.failing_since

    @property
    def open_count(self) -> int:
        return self.grouper.open_count

    @property
    def window_s(self) -> float:
        """Time window of grouping, seconds; set, it applies to the next alerts grouped."""
        return self.grouper.window_s

    @window_s.setter
    def window_s(self, value: float) -> None:
        self.grouper.window_s = value
        self.config = dataclasses.replace(self.config, window_s=value)

    @property
    def hops(self) -> int:
        """Graph distance of grouping, hops; set, it applies to the next alerts grouped."""
        return self.grouper.hops

    @hops.setter
    def hops(self, value: int) -> None:
        self.grouper.hops = value
        self.config = dataclasses.replace(self.config, hops=value)

    def housekeeping(self, now: float | None = None, force: bool = False) -> None:
        """Auto-resolve quiet incidents, delete old closed ones and move feedback left on merged
        incidents to the incident each ended in (at most once a minute, by the leader; its
        first loop runs it). Such feedback comes during a rolling upgrade from replicas of
        releases whose merges did not move it
        (:meth:`~fleetmind.serving.incidents.store.IncidentStore.move_merged_feedback`; on a
        clean database one read of the feedback table, milliseconds at 100,000 incidents). Rows
        a ``merged_into`` cycle keeps on merged incidents are warned about once, not moved again
        every minute."""
        mono = time.monotonic()
        if not force and mono < self._next_housekeeping:
            return
        self._next_housekeeping = mono + self.config.housekeeping_interval_s
        now = self.clock() if now is None else now
        cfg = self.config
        with self._process_lock:
            if cfg.auto_resolve_s > 0:
                ids = self.db.auto_resolve(now - cfg.auto_resolve_s, now)
                self.grouper.forget(ids)
                self.schedule.drop(ids)
                self._set_gauge()
            if cfg.retention_s > 0:
                n_inc, n_alerts = self.db.purge(now - cfg.retention_s)
                if n_inc or n_alerts:
                    log.info("retention: deleted %d incidents and %d alerts", n_inc, n_alerts)
            moved, settled = self.store.move_merged_feedback()
            if moved:
                log.log(
                    logging.INFO if settled else logging.WARNING,
                    "feedback: moved %d rows left on merged incidents to the incident each ended"
                    " in%s",
                    moved,
                    "" if settled else " (some chain loops or is too long: rows remain on one)",
                )

    # ------------------------------------------------------------------ grouping
    def process_pending(self, limit: int = 500, defer: bool = False) -> int:
        """Group up to ``limit`` pending alerts and re-rank the touched incidents; returns how many.

        With ``defer`` (the worker thread), rankings are coalesced: while a backlog of pending
        alerts remains, touched incidents are ranked once it is grouped (or after
        ``backlog_rank_s``); an incident ranked less than ``rank_interval_s`` ago is re-ranked when
        that interval has passed. A storm thus costs a few rankings per incident, not one per batch.
        """
        with self._process_lock:
            try:
                rows, evidence = self._group_batch(limit)
            except DataError:
                return self._group_singly(limit, defer)
            return self._after_batch(rows, evidence, limit, defer)

    def _after_batch(
        self, rows: list[dict[str, Any]], evidence: set[int], limit: int, defer: bool
    ) -> int:
        """Metrics and rankings (deferred with ``defer``) of a grouped batch; returns its size."""
        if not rows:
            return 0
        self._set_gauge()
        # updated_ts: when the alert (or its latest status change) was stored
        self.lag.show(min(r["updated_ts"] for r in rows))
        if self.metrics is not None:
            self.metrics.alerts_grouped.inc(len(rows))
        backlog = len(rows) >= limit  # more alerts are waiting: rank once they are grouped
        self._rank_all(self.schedule.after_batch(evidence, time.monotonic(), defer, backlog))
        return len(rows)

    def _group_singly(self, limit: int, defer: bool) -> int:
        """After the database refused a value of a batch (SQLSTATE class 22, a data exception: a
        value the column or the database's encoding cannot hold), group its alerts one per
        transaction and set the one refused aside (:meth:`_set_aside`), rather than fail the
        same batch at every pass forever while every later alert waits. Returns how many alerts
        were grouped or set aside; the next pass takes full batches again."""
        done = 0
        for _ in range(limit):
            try:
                rows, evidence = self._group_batch(1)
            except DataError as err:
                return done + self._set_aside(err)
            if not rows:
                break
            done += self._after_batch(rows, evidence, 1, defer)
        return done

    def _set_aside(self, err: Exception) -> int:
        """Clear ``pending`` of the alert whose grouping the database refused (``err``): the one
        row the failed one-alert batch read (:attr:`_batch_read`), not whichever is oldest now
        (another alert may have become pending meanwhile). It keeps the incident and node it
        had (an alert grouped before and pending again after a status change stays in its
        incident; a new one stays without), logged once and counted in :attr:`set_aside`.
        Returns 1, or 0 when that row changed since it was read (``updated_ts``: it stays pending
        and is grouped again with its new status) or none was read."""
        if len(self._batch_read) != 1:
            return 0
        row = self._batch_read[0]
        with self.store.grouping() as conn:
            changed = self.store.mark_grouped(
                conn,
                [
                    {
                        "_id": row["id"],
                        "_upd": row["updated_ts"],
                        "_inc": row["incident_id"],
                        "_node": row["node"],
                    }
                ],
            )
        if changed != 1:  # its status changed since it was read: grouped again as it is now
            return 0
        self.set_aside += 1
        reason = str(getattr(err, "orig", None) or err).strip().splitlines()
        log.warning(
            "alert %d (%s) is stored but not grouped: the database refused a value of its "
            "grouping: %s",
            row["id"],
            row["labels"].get("alertname", "?"),
            reason[0] if reason else type(err).__name__,
        )
        return 1

    def rank_due(self, older_than_s: float = 0.0) -> None:
        """Re-rank the incidents whose deferred ranking has been due for ``older_than_s`` seconds."""
        self._rank_all(self.schedule.take_due(time.monotonic() - older_than_s))

    def _rank_all(self, incident_ids: list[int]) -> None:
        """Rank ``incident_ids`` in order.

        A ranking that fails for a passing reason (:func:`_transient`: a lock wait, an outage)
        stops the pass: that incident is due again after :data:`RANK_RETRY_S` (or
        ``rank_interval_s``), the rest are due now (the next loop ranks them, after the lease was
        checked), and the error is raised. Any other failure (a value the database refuses, such
        as a non-number score; a bug) comes back at every try: it is logged, that ranking is
        dropped (the incident keeps ``needs_ranking``, so a new leader tries once more) and the
        rest are ranked, so one incident cannot stop the others' rankings or housekeeping."""
        for n, inc_id in enumerate(incident_ids):
            try:
                self._rank(inc_id)
            except Exception as err:
                if not _transient(err):
                    self._log_dropped(inc_id, err)
                    continue
                now = time.monotonic()
                self.schedule.queue(incident_ids[n + 1 :], now)
                self.schedule.queue([inc_id], now + max(RANK_RETRY_S, self.config.rank_interval_s))
                raise

    def _log_dropped(self, inc_id: int, err: Exception) -> None:
        """Log a dropped ranking (counted in :attr:`rankings_dropped`): one line, with the
        traceback of a bug (not a database error) once per exception type and minute, so a bug
        that fails every ranking is visible without flooding the log."""
        self.rankings_dropped += 1
        reason = str(getattr(err, "orig", None) or err).strip().splitlines()
        now, kind = time.monotonic(), type(err).__name__
        trace = not isinstance(err, DBAPIError) and now - self._dropped_traced.get(kind, -1e9) > 60
        if trace:
            self._dropped_traced[kind] = now
        log.warning(
            "ranking incident %s failed and is dropped (%d so far): %s: %s",
            inc_id,
            self.rankings_dropped,
            kind,
            reason[0] if reason else "",
            exc_info=trace,
        )

    def _group_batch(self, limit: int) -> tuple[list[dict[str, Any]], set[int]]:
        """Group the oldest ``limit`` pending alerts in one transaction: ``(rows, ids of the
        incidents that gained evidence)``, the ones to re-rank."""
        view = self.graphs.view
        now = self.clock()
        touched: set[int] = set()
        if self._open_stale:  # read back what the database kept before grouping more alerts
            self.load_open()
            self._open_stale = False
        self._unmapped = []  # labels of the batch's alerts that match no node
        try:
            rows, touched, evidence = self._group_rows(limit, view, now, touched)
            if self.metrics is not None:  # fleetmind_alerts_unmapped_total, once per alert
                for labels in self._unmapped:
                    self.metrics.count_unmapped(view.graph, labels)
            return rows, evidence
        except Exception:
            # The transaction rolled back, but the grouper may hold incidents it opened, merged or
            # reopened inside it; later alerts must not join an id that was never stored.
            self._open_stale = True
            raise

    def _group_rows(
        self, limit: int, view: GraphView, now: float, touched: set[int]
    ) -> tuple[list[dict[str, Any]], set[int], set[int]]:
        """The transaction of :meth:`_group_batch`: ``(rows, touched, evidence)``; ``touched``
        collects the incident ids whose counts changed, ``evidence`` those that gained evidence."""
        evidence: set[int] = set()
        with self.store.grouping() as conn:
            rows = self.store.pending(conn, limit)
            self._batch_read = rows  # what a refused one-alert batch sets aside (_set_aside)
            if not rows:
                self.lag.clear()
                return rows, touched, evidence
            done = []
            merges: dict[int, int] = {}  # incidents merged away in this batch -> their target
            refires = [
                r["id"] for r in rows if r["incident_id"] is None and r["status"] == "firing"
            ]
            episodes = self.store.previous_episodes(conn, refires, self.grouper.window_s)
            closed = self._closed_for_late(conn, rows)
            with self.grouper.batch([r["starts_ts"] for r in rows]):
                for row in rows:
                    new = row["incident_id"] is None or row["status"] == "firing"
                    inc_id, node = self._group_alert(conn, row, view, now, merges, episodes, closed)
                    if inc_id is not None:
                        touched.add(inc_id)
                        if new:
                            evidence.add(inc_id)
                    done.append(
                        {"_id": row["id"], "_upd": row["updated_ts"], "_inc": inc_id, "_node": node}
                    )
                if merges:  # an alert grouped before its incident merged away follows the merge
                    for d in done:
                        d["_inc"] = _followed(merges, d["_inc"])
                    touched |= {_followed(merges, i) for i in touched}
                    touched |= set(merges)  # their alerts moved away: recounted to 0
                    evidence = {_followed(merges, i) for i in evidence}
                # a resolved incident late resolutions joined keeps the ranking that paged
                evidence -= self.grouper.late_joined()
                self.store.mark_grouped(conn, done)
                evidence |= self._outlived(conn, touched - evidence - self.grouper.late_joined())
                if touched:
                    counts = self.store.counts(conn, touched)
                    self.store.write_counts(conn, self.grouper.settle(counts), now, evidence)
        return rows, touched, evidence

    def _group_alert(
        self,
        conn: Connection,
        row: dict[str, Any],
        view: GraphView,
        now: float,
        merges: dict[int, int],
        episodes: dict[int, tuple[int, str, float | None]],
        closed: list[ClosedIncident],
    ) -> tuple[int | None, str | None]:
        """One pending alert's ``(incident id, node)``, storing incidents opened, merged or
        reopened for it; ``merges`` collects the incidents merged away (id -> target);
        ``episodes`` holds the incidents of earlier episodes of the batch's new firing alerts
        (:meth:`fleetmind.serving.incidents.store.IncidentStore.previous_episodes`); ``closed``
        the resolved incidents its alerts resolved before grouping may join
        (:meth:`_closed_for_late`)."""
        inc_id, node = row["incident_id"], row["node"]
        name = row["labels"].get("alertname")
        if name == OWN_ALERTNAME:
            self._own_alert_came_back()
            return None, None  # stored, never grouped: it would open an incident about itself
        if name in self.config.ungrouped_alerts or row["labels"].get("severity") == "none":
            return None, None  # a heartbeat or an inhibitor helper: no fault of any node
        if inc_id is None and row["status"] == "firing" and is_data_source_state(row):
            return None, None  # a Grafana rule firing on a failed or empty query: no evidence
        if inc_id is None:  # a new alert, or one resolved before it was grouped
            node = node_for_alert(view.graph, row["labels"])
            if node is None and self.metrics is not None:  # counted once the batch commits
                self._unmapped.append(row["labels"])
            ts = row["starts_ts"]
            cluster = row["labels"].get("cluster") or None  # "": no cluster (Prometheus)
            if node is not None:
                cluster = cluster or view.graph.node(node).cluster
            prior = episodes.get(row["id"]) if row["status"] == "firing" else None
            placed = self.grouper.assign(
                ts,
                node,
                cluster,
                view.neighbourhood,
                lambda: self.store.insert_incident(conn, ts, now),
                into=self._reopen_episode(conn, prior, ts, merges),
                resolved_ts=row["updated_ts"] if row["status"] == "resolved" else None,
                closed=closed,
            )
            for other in placed.merged:
                self.store.merge(conn, placed.incident, other, now)
                merges[other] = placed.incident
            return placed.incident, node
        if not self.grouper.is_open(inc_id):
            # The incident was resolved or merged: re-firing reopens it.
            inc_id = self.store.follow_merges(conn, inc_id)
            if self.grouper.reopens(inc_id, row["status"]):
                stored = self.store.reopen(conn, inc_id)
                if stored is not None:
                    self.grouper.reopen(stored, row["starts_ts"])
        # its start may have moved earlier (an HA peer's delivery, perhaps resolved since): the
        # span covers it (a merge earlier in the batch included; not open: nothing changes). Only
        # ever earlier: a late firing copy stored resolved starts inside its alert's episode,
        # never before the incident's first alert
        self.grouper.widen(inc_id, row["starts_ts"])
        return inc_id, node

    @staticmethod
    def _outlived(conn: Connection, ids: set[int]) -> set[int]:
        """Of the open incidents ``ids`` that gained no evidence, those a resolution leaves to be
        ranked on their firing alerts (:func:`live_ranking`)."""
        if not ids:
            return set()
        i, a = incidents.c, alerts.c
        q = select(i.id, i.causes).where(i.id.in_(sorted(ids)), i.status == "open")
        ranked = {int(r[0]): r[1] for r in conn.execute(q) if r[1]}
        if not ranked:
            return set()
        firing: dict[int, set[str]] = {k: set() for k in ranked}
        q2 = (
            select(a.incident_id, a.node)
            .where(a.incident_id.in_(sorted(ranked)), a.status == "firing", a.node.is_not(None))
            .distinct()
        )
        for inc_id, node in conn.execute(q2):
            firing[int(inc_id)].add(str(node))
        return {k for k, causes in ranked.items() if live_ranking(causes, firing[k])}

    def _closed_for_late(
        self, conn: Connection, rows: list[dict[str, Any]]
    ) -> list[ClosedIncident]:
        """The resolved incidents the batch's alerts resolved before grouping may join: those
        within the window of their starts that closed at most the window before their
        resolutions were stored (``updated_ts``), read from the database, so that a storm
        grouped over several batches, or across a restart, stays one incident."""
        late = [r for r in rows if r["incident_id"] is None and r["status"] == "resolved"]
        if not late:
            return []
        w = self.grouper.window_s
        starts = [r["starts_ts"] for r in late]
        since = min(r["updated_ts"] for r in late) - w
        return self.store.resolved_near(conn, min(starts) - w, max(starts) + w, since)

    def _reopen_episode(
        self,
        conn: Connection,
        prior: tuple[int, str, float | None] | None,
        ts: float,
        merges: dict[int, int],
    ) -> int | None:
        """The incident a new firing episode starting at ``ts`` joins besides what grouping
        matches: its previous episode's (``prior``: id, status, closed_ts as the batch began),
        reopened here (or earlier in the batch) because it resolved at most the window before
        ``ts``; else ``None``. A previous episode's incident still open takes the episode only
        by the time and graph rules, as any alert."""
        if prior is None or not self.grouper.reopens_episode(prior[1], prior[2], ts):
            return None  # none, still open, merged, or closed too long before ts
        inc_id = _followed(merges, prior[0])
        if inc_id is None or self.grouper.is_open(inc_id):
            return inc_id
        stored = self.store.reopen(conn, inc_id)
        if stored is None:
            return None
        self.grouper.reopen(stored, ts)
        return inc_id

    def _own_alert_came_back(self) -> None:
        """Say once per process that Alertmanager routes FleetMind's own root-cause alerts back to
        its webhook: with Alertmanager's default single route each FleetMindRootCause opened an
        incident about itself, which was ranked and notified in turn, and so on."""
        if getattr(self, "_warned_own", False):
            return
        self._warned_own = True
        log.warning(
            "%s alerts arrive at the webhook: they are stored but never grouped; route them away "
            'from FleetMind in Alertmanager (a matcher alertname!="%s" on FleetMind\'s route, as '
            "deploy/alertmanager.yml does)",
            OWN_ALERTNAME,
            OWN_ALERTNAME,
        )

    # ------------------------------------------------------------------ ranking
    def _rank(self, inc_id: int) -> None:
        self.schedule.ranked(inc_id, time.monotonic())
        model = self.registry.current.rca
        state, rows = self.store.rank_input(inc_id, self.config.max_rank_alerts)
        if not rows:
            return
        graph = self.graphs.graph
        # Mapped on the graph it is ranked on: the node stored at grouping time names the graph
        # served then, and a replaced graph (a cluster removed) may match none of the alerts.
        if all(node_for_alert(graph, r["labels"]) is None for r in rows):
            # No alert names a node of the graph (Watchdog, TargetDown of an unknown job): a
            # ranking would rest on the graph alone and page someone about a guess.
            self.db.set_incident_rca(inc_id, [], model.method, model.version, ranked_state=state)
            return
        start = time.perf_counter()
        try:
            result = self._find(model, graph, rows)
            causes = self._explained(graph, rows, result)
            firing = [r for r in rows if r["status"] == "firing"]
            nodes = {str(r["node"]) for r in firing if r["node"] is not None}
            if live_ranking(causes, nodes):
                # a second fault outlived the top one: ranked on what still fires, it is named
                result = self._find(model, graph, firing)
                causes = self._explained(graph, rows, result)
        except Exception as err:
            log.warning("RCA failed on incident %s: %s", inc_id, err)
            return
        if self.metrics is not None:
            self.metrics.rca_latency.labels(model.method).observe(time.perf_counter() - start)
        if not all(math.isfinite(c["score"]) for c in causes):
            # JSON has no NaN or infinity: PostgreSQL refuses the write (a DataError at every
            # try), and a stored one could not be served as JSON; the last ranking is kept
            log.warning(
                "RCA failed on incident %s: %s ranked a cause with a non-finite score; not stored",
                inc_id,
                result.method or model.method,
            )
            return
        self.db.set_incident_rca(
            inc_id,
            causes,
            result.method or model.method,
            result.model_version or model.version,
            ranked_state=state,
        )

    @staticmethod
    def _explained(graph: Any, rows: list[dict[str, Any]], result: Any) -> list[dict[str, Any]]:
        """``result``'s causes as stored, the top one with :data:`EXPLAINS`: which of the nodes
        of stored alerts ``rows`` depend on it, on the incident's graph (the served ``graph``
        plus the pod-to-GPU edges all of ``rows`` name)."""
        causes = [c.to_json() for c in result.causes]
        if causes:
            g, _ = incident_graph(graph, [alert_dict(r) for r in rows])
            nodes = {str(r["node"]) for r in rows if r["node"] is not None}
            extra = g.edges[len(graph.edges) :]  # its pod-to-GPU edges (the table is graph's)
            causes[0][EXPLAINS] = explained_nodes(graph, str(causes[0]["node"]), nodes, extra=extra)
        return causes

    def _find(self, model: Any, graph: Any, rows: list[dict[str, Any]]) -> Any:
        """The served analyzer's anchored ranking of stored alerts ``rows`` on ``graph``."""
        found = [alert_dict(r) for r in rows]
        graph, found = incident_graph(graph, found)  # + the pod-to-GPU edges alerts name
        result = model.impl.find_root_causes(graph, found, self.config.top_k)
        symptom = named_symptom(graph, found, self.config.slo_alerts)
        return anchor_result(result, graph, found, symptom)

    def _set_gauge(self) -> None:
        """Export the open incidents this process groups (the leader, or a caller grouping)."""
        if self.metrics is not None:
            self.metrics.open_incidents.set(self.grouper.open_count)

    def _follow(self) -> None:
        """At every worker loop: a process that does not lead exports 0 open incidents (the
        leader exports the count), so ``sum`` and ``max`` over replicas both read the count."""
        if self.metrics is not None and not self.leader.held:
            self.metrics.open_incidents.set(0)


class _LoopGauges(GroupingLag):
    """The grouping lag, and the followers' open-incident gauge, refreshed at every worker loop.

    Args:
        db: the database (its oldest pending alert).
        metrics: the gauges' owner (``None``: nothing is exported).
        follow: sets the open-incident gauge of a process that does not lead.
    """

    def __init__(self, db: Database, metrics: Metrics | None, follow: Callable[[], None]) -> None:
        super().__init__(db, metrics)
        self._follow = follow

    def refresh(self) -> None:
        """Export the grouping lag, then the follower's open-incident gauge."""
        super().refresh()
        self._follow()
