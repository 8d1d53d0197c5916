"""Grouping alerts into incidents and keeping their ranked root causes current.

Ingestion only stores alerts (``pending`` = true) and wakes the :class:`IncidentManager`; its worker
thread then, per batch of pending alerts:

1. maps each new firing alert onto a graph node (:meth:`DependencyGraph.node_for_alert`);
2. joins it to an open incident when both hold: **time**, the alert started within
   ``incident_window_s`` of the incident's first..last alert; **graph**, some node of the incident lies
   within ``incident_hops`` undirected hops of the alert's node (``cluster`` nodes are not crossed).
   An alert no node matches joins an incident in the same ``cluster`` label within the window.
   An alert that connects several open incidents merges them into the oldest (the others get status
   ``merged`` and ``merged_into``). Otherwise it opens a new incident;
3. for a status change (``resolved``) updates the counts; an incident whose alerts are all resolved is
   ``resolved``;
4. re-runs the served RCA analyzer on every incident it touched and stores the ranked causes.

Because the pending flag is durable, alerts stored just before a crash are grouped after the restart.
Replicas on one database elect one worker through :class:`fleetmind.serving.db.LeaderLock` (a file lock on
SQLite, an advisory lock on PostgreSQL); the others take over when it dies.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from sqlalchemy import and_, bindparam, case, func, insert, select, update

from fleetmind.rca.anchoring import anchor_result, symptom_node
from fleetmind.serving.alertmap import node_for_alert
from fleetmind.serving.db import Database, LeaderLock, alerts, incidents
from fleetmind.serving.schemas import iso_utc

if TYPE_CHECKING:
    from fleetmind.serving.graphstore import GraphStore
    from fleetmind.serving.metrics import Metrics
    from fleetmind.serving.registry import ModelRegistry

log = logging.getLogger("fleetmind.serving")


@dataclass
class _Open:
    """In-memory view of one open incident (what grouping needs)."""

    id: int
    first_ts: float
    last_ts: float
    nodes: set[str] = field(default_factory=set)
    clusters: set[str] = field(default_factory=set)


# The incident worker's count refresh (IncidentManager._refresh_counts): built once, so each batch
# only binds parameters (building an update per incident cost more than the SQL itself).
_COUNTS = (
    select(
        alerts.c.incident_id,
        func.count(),
        func.sum(case((alerts.c.status == "firing", 1), else_=0)),
    )
    .where(alerts.c.incident_id.in_(bindparam("ids", expanding=True)))
    .group_by(alerts.c.incident_id)
)
_SET_COUNTS = (
    update(incidents)
    .where(incidents.c.id == bindparam("_id"))
    .values(
        alert_count=bindparam("_n"),
        firing_count=bindparam("_f"),
        updated_ts=bindparam("_now"),
        needs_ranking=True,  # durable: a crash before the ranking leaves it due
    )
)
_SET_OPEN = _SET_COUNTS.values(
    nodes=bindparam("_nodes", type_=incidents.c.nodes.type),
    clusters=bindparam("_clusters", type_=incidents.c.clusters.type),
    first_alert_ts=bindparam("_first"),
    last_alert_ts=bindparam("_last"),
)
_SET_RESOLVED = _SET_OPEN.values(status="resolved", closed_ts=bindparam("_now"))


def alert_dict(row: dict[str, Any]) -> dict[str, Any]:
    """A stored alert row as an Alertmanager v4 alert object (what analyzers take)."""
    return {
        "status": row["status"],
        "labels": row["labels"],
        "annotations": row["annotations"],
        "startsAt": row["starts_at"]
        if row["starts_at"] != "unknown"
        else _iso_seconds(row["starts_ts"]),
        "endsAt": _iso_seconds(row.get("ends_ts")),
        "fingerprint": row["fingerprint"],
    }


def _iso_seconds(t: float | None) -> str | None:
    """Stored unix seconds as an ISO 8601 string in UTC (``None`` stays ``None``)."""
    return iso_utc(t)  # clamped: rows stored before timestamps were bounded still read


class IncidentManager:
    """Groups pending alerts into incidents and re-runs RCA on each update.

    Args:
        db: the database.
        graphs: the served graph.
        registry: the served models (its current RCA analyzer ranks incidents).
        window_s: time window of grouping, seconds.
        hops: graph distance of grouping, hops.
        top_k: causes stored per incident.
        slo_alerts: alertnames of user-facing alerts (``FLEETMIND_SLO_ALERTS``): the incident's
            symptom is its first alert named here, else its highest-severity alert; ranked causes
            are anchored on it (:func:`fleetmind.rca.anchoring.anchor_result`).
        metrics: optional metrics (open incidents gauge, RCA latency).
    """

    def __init__(
        self,
        db: Database,
        graphs: GraphStore,
        registry: ModelRegistry,
        window_s: float = 600.0,
        hops: int = 2,
        top_k: int = 5,
        metrics: Metrics | None = None,
        rank_interval_s: float = 2.0,
        max_rank_alerts: int = 1000,
        auto_resolve_s: float = 0.0,
        retention_s: float = 0.0,
        leader_lease_s: float = 10.0,
        slo_alerts: frozenset[str] = frozenset(),
    ) -> None:
        self.db = db
        self.slo_alerts = slo_alerts
        self.graphs = graphs
        self.registry = registry
        self.window_s = window_s
        self.hops = hops
        self.top_k = top_k
        self.metrics = metrics
        self.rank_interval_s = rank_interval_s
        self.backlog_rank_s = 10.0
        self.max_rank_alerts = max_rank_alerts
        self._last_rank: dict[int, float] = {}
        self._due: dict[int, float] = {}
        self._open: dict[int, _Open] = {}
        # during a batch: the open incidents its alerts can join by time (see process_pending)
        self._batch_open: dict[int, _Open] | None = None
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._process_lock = threading.Lock()
        self.last_error: str | None = None
        self.failing_since: float | None = None  # monotonic time of the first failure in a row
        self.auto_resolve_s = auto_resolve_s
        self.retention_s = retention_s
        self.housekeeping_interval_s = 60.0
        self._next_housekeeping = 0.0
        self._oldest_pending: float | None = None
        self.leader = LeaderLock(db, leader_lease_s)

    # ------------------------------------------------------------------ lifecycle
    def load_open(self) -> None:
        """Rebuild the in-memory open incidents from the database."""
        self._open.clear()
        for row in self.db.list_incidents("open", limit=1_000_000):
            self._open[row["id"]] = _Open(
                row["id"],
                row["first_alert_ts"],
                row["last_alert_ts"],
                set(row["nodes"] or []),
                set(row["clusters"] or []),
            )
        self._set_gauge()

    def start(self) -> None:
        """Start the worker thread (idempotent); it groups alerts while it holds the leader lock."""
        if self._thread is not None:
            return
        self.load_open()
        self._thread = threading.Thread(target=self._run, name="fleetmind-incidents", daemon=True)
        self._thread.start()
        self._wake.set()

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None
        self.leader.release()

    def notify(self) -> None:
        """Tell the worker that new alerts are pending."""
        self._wake.set()

    def _run(self) -> None:
        while not self._stop.is_set():
            wait = 1.0
            if self._due:
                wait = max(0.01, min(wait, min(self._due.values()) - time.monotonic()))
            self._wake.wait(wait)
            self._wake.clear()
            try:
                if self.leader.held and not self.leader.check():
                    log.warning("incident worker: lost the leader lock; another replica may group")
                    self._due.clear()
                if not self.leader.held:
                    if not self.leader.acquire():
                        self.update_lag()
                        continue  # another process groups alerts; check again in a second
                    self.take_over()
                while not self._stop.is_set() and self.process_pending(defer=True) > 0:
                    self.rank_due(older_than_s=self.backlog_rank_s)  # no starvation in a long storm
                    if not self.leader.check():
                        break
                self.rank_due()
                self.housekeeping()
                self.last_error = None
                self.failing_since = None
            except Exception as err:  # keep the worker alive; the alerts stay pending
                self.last_error = f"{type(err).__name__}: {err}"
                if self.failing_since is None:
                    self.failing_since = time.monotonic()
                log.exception("incident worker failed; retrying")
                self._stop.wait(1.0)
            self.update_lag()

    def take_over(self) -> None:
        """Become the worker: reload the open incidents (the previous leader changed them) and
        queue the rankings it left undone (``needs_ranking``, durable across crashes)."""
        self.load_open()
        now = time.monotonic()
        for inc_id in self.db.incidents_needing_ranking():
            self._due.setdefault(inc_id, now)

    def update_lag(self) -> None:
        """Export the grouping lag: now minus when the oldest ungrouped alert was stored.

        Read from the database at every loop, whether or not a batch succeeded, so a worker that
        fails every batch (or a replica whose leader is stuck) shows a growing lag. When the
        database cannot be read the last oldest value seen keeps ageing.
        """
        try:
            self._oldest_pending = self.db.oldest_pending_ts()
        except Exception:  # the database is down: keep the last value seen (it keeps ageing)
            pass
        if self.metrics is not None:
            oldest = self._oldest_pending
            self.metrics.grouping_lag.set(0.0 if oldest is None else max(0.0, time.time() - oldest))

    def stuck_for(self) -> float:
        """Seconds the worker has failed every loop (0 when its last loop succeeded)."""
        return 0.0 if self.failing_since is None else time.monotonic() - self.failing_since

    def housekeeping(self, now: float | None = None, force: bool = False) -> None:
        """Auto-resolve quiet incidents and delete old closed ones (at most once a minute)."""
        mono = time.monotonic()
        if not force and mono < self._next_housekeeping:
            return
        self._next_housekeeping = mono + self.housekeeping_interval_s
        now = time.time() if now is None else now
        with self._process_lock:
            if self.auto_resolve_s > 0:
                for inc_id in self.db.auto_resolve(now - self.auto_resolve_s, now):
                    self._open.pop(inc_id, None)
                    self._due.pop(inc_id, None)
                self._set_gauge()
            if self.retention_s > 0:
                n_inc, n_alerts = self.db.purge(now - self.retention_s)
                if n_inc or n_alerts:
                    log.info("retention: deleted %d incidents and %d alerts", n_inc, n_alerts)

    # ------------------------------------------------------------------ processing
    def process_pending(self, limit: int = 500, defer: bool = False) -> int:
        """Group up to ``limit`` pending alerts and re-rank the touched incidents; returns how many.

        With ``defer`` (the worker thread), rankings are coalesced: while a backlog of pending
        alerts remains, touched incidents are ranked once it is grouped (or after
        ``backlog_rank_s``); an incident ranked less than ``rank_interval_s`` ago is re-ranked when
        that interval has passed. A storm thus costs a few rankings per incident, not one per batch.
        """
        with self._process_lock:
            view = self.graphs.view
            graph = view.graph
            touched: set[int] = set()
            done: list[dict[str, Any]] = []
            now = time.time()
            rows: list[dict[str, Any]] = []
            try:
                with self.db.write() as conn:
                    if not self.db.is_sqlite:
                        # Fencing: grouping transactions of all replicas run one at a time and
                        # read the pending rows inside, so two processes that both believe they
                        # lead (for the second before one notices it lost the lock) never group
                        # the same alert twice.
                        conn.execute(select(func.pg_advisory_xact_lock(LeaderLock.GROUP_KEY))).all()
                    rows = self.db.pending_alerts(limit, conn)
                    if not rows:
                        if self.metrics is not None:
                            self.metrics.grouping_lag.set(0.0)
                        self._oldest_pending = None
                        return 0
                    # Only the open incidents within the window of the batch's start times can
                    # take one of its alerts (the time test of _assign over the batch's range):
                    # a long-running service can hold thousands of open incidents, and each alert
                    # scanned them all. Incidents opened, reopened or merged during the batch
                    # enter or leave this pool.
                    starts = [r["starts_ts"] for r in rows]
                    lo, hi = min(starts) - self.window_s, max(starts) + self.window_s
                    self._batch_open = {
                        i: o for i, o in self._open.items() if o.first_ts <= hi and o.last_ts >= lo
                    }
                    for row in rows:
                        inc_id = row["incident_id"]
                        node = row["node"]
                        if inc_id is None:  # a new alert, or one resolved before it was grouped
                            node = node_for_alert(graph, row["labels"])
                            inc_id = self._assign(conn, row, node, view, now)
                        elif inc_id is not None and inc_id not in self._open:
                            # The incident was resolved or merged: re-firing reopens it.
                            inc_id = self._resolve_target(conn, inc_id)
                            if row["status"] == "firing":
                                self._reopen(conn, inc_id, row, node)
                        if inc_id is not None:
                            touched.add(inc_id)
                        done.append(
                            {
                                "_id": row["id"],
                                "_upd": row["updated_ts"],
                                "_inc": inc_id,
                                "_node": node,
                            }
                        )
                    conn.execute(
                        update(alerts)
                        .where(
                            and_(
                                alerts.c.id == bindparam("_id"),
                                alerts.c.updated_ts == bindparam("_upd"),
                            )
                        )
                        .values(
                            incident_id=bindparam("_inc"), node=bindparam("_node"), pending=False
                        ),
                        done,
                    )
                    self._refresh_counts(conn, touched, now)
            finally:
                self._batch_open = None
            self._set_gauge()
            if self.metrics is not None:
                # updated_ts: when the alert (or its latest status change) was stored
                oldest = min(r["updated_ts"] for r in rows)
                self.metrics.grouping_lag.set(max(0.0, time.time() - oldest))
                self.metrics.alerts_grouped.inc(len(rows))
            mono = time.monotonic()
            backlog = len(rows) >= limit  # more alerts are waiting: rank once they are grouped
            for inc_id in sorted(touched):
                last = self._last_rank.get(inc_id)
                if defer and backlog:
                    self._due.setdefault(inc_id, mono)
                elif defer and last is not None and mono - last < self.rank_interval_s:
                    self._due.setdefault(inc_id, last + self.rank_interval_s)
                else:
                    self._due.pop(inc_id, None)
                    self._rank(inc_id)
            return len(rows)

    def rank_due(self, older_than_s: float = 0.0) -> None:
        """Re-rank the incidents whose deferred ranking has been due for ``older_than_s`` seconds."""
        now = time.monotonic() - older_than_s
        for inc_id in [i for i, t in self._due.items() if t <= now]:
            self._due.pop(inc_id, None)
            self._rank(inc_id)

    def _resolve_target(self, conn: Any, inc_id: int) -> int:
        for _ in range(100):  # follow merged_into chains
            row = conn.execute(
                select(incidents.c.status, incidents.c.merged_into).where(incidents.c.id == inc_id)
            ).first()
            if row is None or row.status != "merged" or row.merged_into is None:
                return inc_id
            inc_id = row.merged_into
        return inc_id

    def _reopen(self, conn: Any, inc_id: int, row: dict[str, Any], node: str | None) -> None:
        if inc_id in self._open:
            return
        inc = conn.execute(select(incidents).where(incidents.c.id == inc_id)).first()
        if inc is None:
            return
        conn.execute(
            update(incidents).where(incidents.c.id == inc_id).values(status="open", closed_ts=None)
        )
        self._open[inc_id] = _Open(
            inc_id,
            inc.first_alert_ts,
            max(inc.last_alert_ts, row["starts_ts"]),
            set(inc.nodes),
            set(inc.clusters),
        )
        if self._batch_open is not None:
            self._batch_open[inc_id] = self._open[inc_id]

    def _assign(
        self, conn: Any, row: dict[str, Any], node: str | None, view: Any, now: float
    ) -> int:
        ts = row["starts_ts"]
        cluster = row["labels"].get("cluster")
        if node is not None:
            c = view.graph.node(node).cluster
            cluster = cluster or c
        w = self.window_s
        pool = self._open if self._batch_open is None else self._batch_open
        in_time = [o for o in pool.values() if o.first_ts - w <= ts <= o.last_ts + w]
        if node is not None:
            hood = view.neighbourhood(node, self.hops)
            matches = [o for o in in_time if o.nodes & hood]
        else:
            matches = [o for o in in_time if cluster is not None and cluster in o.clusters]
        if not matches:
            inc_id = conn.execute(
                insert(incidents).values(
                    status="open",
                    opened_ts=now,
                    updated_ts=now,
                    first_alert_ts=ts,
                    last_alert_ts=ts,
                    alert_count=0,
                    firing_count=0,
                    nodes=[],
                    clusters=[],
                    causes=[],
                )
            ).inserted_primary_key[0]
            target = _Open(int(inc_id), ts, ts)
            self._open[target.id] = target
            if self._batch_open is not None:
                self._batch_open[target.id] = target
        else:
            matches.sort(key=lambda o: o.id)
            target = matches[0]
            for other in matches[1:]:
                self._merge(conn, target, other, now)
        target.first_ts = min(target.first_ts, ts)
        target.last_ts = max(target.last_ts, ts)
        if node is not None:
            target.nodes.add(node)
        if cluster is not None:
            target.clusters.add(cluster)
        return target.id

    def _merge(self, conn: Any, target: _Open, other: _Open, now: float) -> None:
        conn.execute(
            update(alerts).where(alerts.c.incident_id == other.id).values(incident_id=target.id)
        )
        conn.execute(
            update(incidents)
            .where(incidents.c.id == other.id)
            .values(status="merged", merged_into=target.id, closed_ts=now, updated_ts=now)
        )
        target.nodes |= other.nodes
        target.clusters |= other.clusters
        target.first_ts = min(target.first_ts, other.first_ts)
        target.last_ts = max(target.last_ts, other.last_ts)
        self._open.pop(other.id, None)
        if self._batch_open is not None:
            self._batch_open.pop(other.id, None)

    def _refresh_counts(self, conn: Any, inc_ids: set[int], now: float) -> None:
        """Store the alert and firing counts (and, for open incidents, nodes, clusters and alert
        times) of ``inc_ids``; an open incident whose alerts are all resolved becomes ``resolved``.

        The counts are exact (``COUNT`` over the incidents' alerts, read from the covering index
        ``ix_alerts_incident`` in one grouped query), so every way an alert can move (a new
        alert, a status change, a merge) is counted without bookkeeping. The updates go out as
        three prepared statements with one parameter set per incident (SQLAlchemy builds and
        compiles each once), not a statement built per incident.
        """
        if not inc_ids:
            return
        ids = sorted(int(i) for i in inc_ids)
        counts = dict.fromkeys(ids, (0, 0))
        for i in range(0, len(ids), 500):  # bound the IN list (SQLite's variable limit)
            for inc_id, total, firing in conn.execute(_COUNTS, {"ids": ids[i : i + 500]}):
                counts[int(inc_id)] = (int(total), int(firing or 0))
        closed, open_rows, resolved_rows = [], [], []
        for inc_id, (total, firing) in sorted(counts.items()):
            values = {"_id": inc_id, "_n": total, "_f": firing, "_now": now}
            o = self._open.get(inc_id)
            if o is None:
                closed.append(values)
                continue
            values.update(
                _nodes=sorted(o.nodes),
                _clusters=sorted(o.clusters),
                _first=o.first_ts,
                _last=o.last_ts,
            )
            if firing == 0 and total > 0:
                resolved_rows.append(values)
                self._open.pop(inc_id, None)
                if self._batch_open is not None:
                    self._batch_open.pop(inc_id, None)
            else:
                open_rows.append(values)
        for stmt, params in (
            (_SET_COUNTS, closed),
            (_SET_OPEN, open_rows),
            (_SET_RESOLVED, resolved_rows),
        ):
            if params:
                conn.execute(stmt, params)

    def _rank(self, inc_id: int) -> None:
        self._last_rank[inc_id] = time.monotonic()
        model = self.registry.current.rca
        with self.db.read() as conn:
            state = conn.execute(
                select(incidents.c.updated_ts).where(incidents.c.id == inc_id)
            ).scalar()
            rows = self.db.incident_alerts(conn, inc_id, self.max_rank_alerts)
        if not rows:
            return
        start = time.perf_counter()
        try:
            graph, alerts = self.graphs.graph, [alert_dict(r) for r in rows]
            result = model.impl.find_root_causes(graph, alerts, self.top_k)
            symptom = symptom_node(graph, alerts, self.slo_alerts)
            result = anchor_result(result, graph, alerts, symptom)
        except Exception as err:
            log.warning("RCA failed on incident %s: %s", inc_id, err)
            return
        if self.metrics is not None:
            self.metrics.rca_latency.labels(model.method).observe(time.perf_counter() - start)
        self.db.set_incident_rca(
            inc_id,
            [c.to_json() for c in result.causes],
            result.method or model.method,
            result.model_version or model.version,
            ranked_state=state,
        )

    def _set_gauge(self) -> None:
        if self.metrics is not None:
            self.metrics.open_incidents.set(len(self._open))

    @property
    def open_count(self) -> int:
        return len(self._open)
