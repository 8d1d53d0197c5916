"""The grouping rules of the incident worker, over plain in-memory data.

A :class:`Grouper` holds the open incidents (their alert time span, graph nodes and clusters) and
decides, for each newly grouped alert, which incident it joins:

* **time**: the alert started within ``window_s`` seconds of the incident's first..last alert;
* **graph**: some node of the incident lies within ``hops`` undirected hops of the alert's node
  (the caller's ``neighbourhood`` function says which nodes those are; the service's
  :meth:`fleetmind.serving.graphstore.GraphView.neighbourhood` neither crosses nor reaches
  ``cluster`` nodes, nor nodes that run on two or more hosts such as the kubelet's Service: a
  cluster-level alert joins only incidents on its cluster node; it reaches but does not cross
  infrastructure that nodes of several clusters depend on, such as a global DNS);
  an alert no node matches joins an incident holding its ``cluster`` label instead;
* an alert that fits several open incidents **merges** them into the oldest (lowest id), which
  takes their time spans, nodes and clusters; the others are no longer open;
* an alert that fits none **opens** a new incident;
* a **firing** alert of an incident that is no longer open (resolved, or merged into one that is
  not open) **reopens** it, and so does a new episode of a fingerprint (a re-fire: new
  ``startsAt``) that starts at most ``window_s`` seconds after its previous episode's incident
  closed as resolved (:meth:`Grouper.reopens_episode`; the caller finds that incident);
* after a batch, an open incident whose alerts are all resolved **settles** as ``resolved``;
* an alert that **resolved before it was grouped** and fits no open incident joins, by the same
  time and graph rules, a ``resolved`` incident that closed at most ``window_s`` seconds before its
  resolution was stored (the lowest id of those that fit), which stays resolved; only if none fits
  does it open one (resolved at once). A storm that resolves while the worker is still grouping it
  is one incident: its first batches' incident resolves as soon as the alerts grouped so far have
  resolved, and the rest of the storm, grouped in later batches, joins it (``ClosedIncident``).

It reads no clock, database or thread state: times (unix seconds) and counts are passed in, and the
caller stores what it decides (:mod:`fleetmind.serving.incidents.store`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from typing import Literal

Neighbourhood = Callable[[str, int], AbstractSet[str]]
"""``(node id, hops) -> node ids within hops`` of the served graph."""


@dataclass
class OpenIncident:
    """What grouping knows of one open incident.

    Attributes:
        id: the incident's id (the database's primary key).
        first_ts: start of its earliest alert, unix seconds.
        last_ts: start of its latest alert, unix seconds.
        nodes: graph node ids its alerts mapped onto.
        clusters: cluster labels of its alerts (from the label, else from the alert's node).
    """

    id: int
    first_ts: float
    last_ts: float
    nodes: set[str] = field(default_factory=set)
    clusters: set[str] = field(default_factory=set)


@dataclass
class ClosedIncident:
    """A ``resolved`` incident that an alert resolved before it was grouped may join.

    Attributes:
        incident: what grouping knows of it (as stored when it closed).
        closed_ts: when it resolved, unix seconds.
    """

    incident: OpenIncident
    closed_ts: float


@dataclass(frozen=True)
class Assignment:
    """Where one alert went.

    Attributes:
        incident: the id of the open incident it joined.
        opened: whether that incident was opened for it.
        merged: the ids of incidents merged into ``incident`` by it, ascending.
        closed: whether ``incident`` is a resolved incident it joined (it stays resolved).
    """

    incident: int
    opened: bool = False
    merged: tuple[int, ...] = ()
    closed: bool = False


@dataclass(frozen=True)
class Settled:
    """An incident's alert counts after a batch, and what it became.

    Attributes:
        id: the incident id.
        total: its alerts.
        firing: its firing alerts.
        state: ``"open"`` (still open), ``"resolved"`` (was open, all its alerts resolved) or
            ``"closed"`` (was not open: resolved or merged before; its counts change, and the
            span, nodes and clusters of a resolved one a late resolution joined).
        incident: the open incident's state; for ``"closed"``, that of a resolved incident
            alerts resolved before grouping joined in the batch, else ``None``.
    """

    id: int
    total: int
    firing: int
    state: Literal["open", "resolved", "closed"]
    incident: OpenIncident | None = None


class Grouper:
    """The open incidents and the rules that group alerts into them.

    Args:
        window_s: time window of grouping, seconds.
        hops: graph distance of grouping, undirected hops.
    """

    def __init__(self, window_s: float = 600.0, hops: int = 2) -> None:
        self.window_s = window_s
        self.hops = hops
        self._open: dict[int, OpenIncident] = {}
        # during a batch: the open incidents its alerts can join by time (see batch())
        self._pool: dict[int, OpenIncident] | None = None
        # during a batch: the resolved incidents its late resolutions joined (see assign())
        self._late: dict[int, OpenIncident] = {}

    # ------------------------------------------------------------------ state
    def load(self, incidents: Iterable[OpenIncident]) -> None:
        """Replace the open incidents (read back from the database)."""
        self._open = {o.id: o for o in incidents}

    def is_open(self, incident_id: int) -> bool:
        return incident_id in self._open

    def get(self, incident_id: int) -> OpenIncident | None:
        """The open incident ``incident_id`` (``None`` when it is not open)."""
        return self._open.get(incident_id)

    @property
    def open_count(self) -> int:
        return len(self._open)

    def forget(self, incident_ids: Iterable[int]) -> None:
        """Drop incidents closed elsewhere (auto-resolved by housekeeping)."""
        for inc_id in incident_ids:
            self._drop(inc_id)

    @contextlib.contextmanager
    def batch(self, starts: Sequence[float]) -> Iterator[None]:
        """Group one batch of alerts whose start times (unix s) are ``starts``.

        Only the open incidents within the window of the batch's start range can take one of its
        alerts: a long-running service can hold thousands of open incidents, and each alert would
        scan them all. Incidents opened, reopened or merged during the batch enter or leave this
        pool. Decisions are the same with or without it.
        """
        lo, hi = min(starts) - self.window_s, max(starts) + self.window_s
        self._pool = {i: o for i, o in self._open.items() if o.first_ts <= hi and o.last_ts >= lo}
        self._late = {}
        try:
            yield
        finally:
            self._pool = None
            self._late = {}

    # ------------------------------------------------------------------ rules
    def assign(
        self,
        ts: float,
        node: str | None,
        cluster: str | None,
        neighbourhood: Neighbourhood,
        new_id: Callable[[], int],
        *,
        into: int | None = None,
        resolved_ts: float | None = None,
        closed: Iterable[ClosedIncident] = (),
    ) -> Assignment:
        """Join a new alert to an open incident, merging or opening incidents as the rules say.

        Args:
            ts: the alert's start, unix seconds.
            node: the graph node it maps onto (``None``: no node matches).
            cluster: its cluster (its ``cluster`` label, else its node's cluster), if any.
            neighbourhood: node ids within a number of hops of a node (called with ``hops``).
            new_id: called once, only when a new incident opens: stores it, returns its id.
            into: an open incident the alert joins besides those the rules match (the incident
                of its fingerprint's previous episode, reopened: :meth:`reopens_episode`).
            resolved_ts: for an alert that resolved before it was grouped, when its resolution
                was stored, unix seconds (``None``: the alert fires).
            closed: ``resolved`` incidents such an alert may join when no open one fits: those
                that fit by the same rules and closed at most ``window_s`` before
                ``resolved_ts``; the lowest id is taken and stays resolved (see the module).
        """
        w = self.window_s
        pool = self._open if self._pool is None else self._pool
        hood = neighbourhood(node, self.hops) if node is not None else None
        matches = [o for o in pool.values() if self._fits(o, ts, hood, cluster)]
        extra = self._open.get(into) if into is not None else None
        if extra is not None and all(o.id != extra.id for o in matches):
            matches.append(extra)
        if not matches and resolved_ts is not None:
            late = [
                c.incident
                for c in closed
                if c.closed_ts >= resolved_ts - w
                and c.incident.id not in self._open  # reopened in this batch: open rules apply
                and self._fits(c.incident, ts, hood, cluster)
            ]
            if late:
                target = min(late, key=lambda o: o.id)
                self._extend(target, ts, node, cluster)
                self._late[target.id] = target
                return Assignment(target.id, closed=True)
        if matches:
            matches.sort(key=lambda o: o.id)
            target, others = matches[0], matches[1:]
            for other in others:
                self._merge(target, other)
            placed = Assignment(target.id, merged=tuple(o.id for o in others))
        else:
            target = OpenIncident(int(new_id()), ts, ts)
            self._add(target)
            placed = Assignment(target.id, opened=True)
        self._extend(target, ts, node, cluster)
        return placed

    def reopens(self, incident_id: int, status: str) -> bool:
        """Whether an alert of ``incident_id`` (merges followed) with ``status`` reopens it."""
        return status == "firing" and incident_id not in self._open

    def reopens_episode(self, status: str, closed_ts: float | None, ts: float) -> bool:
        """Whether a new firing episode of a fingerprint reopens its previous episode's incident.

        Prometheus gives an alert that fires again after it resolved a new ``startsAt`` (a new
        ``activeAt``, ``rules/alerting.go``), so Alertmanager and FleetMind see a new alert of
        the same fingerprint. It reopens the incident of the previous episode when that incident
        is ``resolved`` (not merged, not open) and the new episode starts at most ``window_s``
        after the incident closed; later, it is grouped as any new alert.

        Args:
            status: the previous episode's incident's status.
            closed_ts: when that incident closed, unix seconds (``None``: it is open), on the
                sender's clock of ``ts`` (the service's, shifted by how far the episode's
                ``startsAt`` is ahead of its first delivery:
                :meth:`fleetmind.serving.incidents.store.IncidentStore.previous_episodes`).
            ts: the new episode's start, unix seconds.
        """
        return status == "resolved" and closed_ts is not None and ts <= closed_ts + self.window_s

    def reopen(self, stored: OpenIncident, ts: float) -> None:
        """Open ``stored`` (a closed incident as stored) again for an alert that started at ``ts``.

        Its span extends to ``ts``; the alert's node was recorded when it first joined.
        """
        if stored.id in self._open:
            return
        stored.last_ts = max(stored.last_ts, ts)
        self._add(stored)

    def widen(self, incident_id: int, ts: float) -> None:
        """Move the open incident ``incident_id``'s first alert time back to ``ts`` (unix s) when
        earlier: an alert of it now starts there (moved to an earlier ``startsAt`` by an
        Alertmanager HA peer's delivery, :data:`fleetmind.serving.db._MOVE_START`). Only ever
        earlier: a move never makes a start later. Not open: nothing changes."""
        o = self._open.get(incident_id)
        if o is None or ts >= o.first_ts:
            return
        o.first_ts = ts
        if self._pool is not None:  # it may now take alerts of the batch by time
            self._pool[o.id] = o
        if self._pool is not None:  # it may now take alerts of the batch by time
            self._pool[o.id] = o

    def late_joined(self) -> set[int]:
        """During a batch: the ``resolved`` incidents that alerts resolved before grouping joined
        and that stay resolved (not reopened in the batch). They gain counts, not evidence: their
        causes stay those ranked while their alerts fired (and sent to on-call)."""
        return {i for i in self._late if i not in self._open}

    def settle(self, counts: Mapping[int, tuple[int, int]]) -> list[Settled]:
        """What each counted incident becomes, by id.

        Args:
            counts: incident id -> ``(alerts, firing alerts)`` after the batch.

        Returns:
            One :class:`Settled` per incident, ascending ids; those ``resolved`` are no longer open.
        """
        out = []
        for inc_id, (total, firing) in sorted(counts.items()):
            o = self._open.get(inc_id)
            if o is None:
                out.append(Settled(inc_id, total, firing, "closed", self._late.get(inc_id)))
                continue
            resolved = firing == 0 and total > 0
            if resolved:
                self._drop(inc_id)
            out.append(Settled(inc_id, total, firing, "resolved" if resolved else "open", o))
        return out

    # ------------------------------------------------------------------ helpers
    def _fits(
        self, o: OpenIncident, ts: float, hood: AbstractSet[str] | None, cluster: str | None
    ) -> bool:
        """Whether an alert starting at ``ts`` (unix s) fits ``o`` by time and graph: ``hood``
        is its node's neighbourhood (``None``: no node matches; then its ``cluster`` decides)."""
        if not o.first_ts - self.window_s <= ts <= o.last_ts + self.window_s:
            return False
        if hood is not None:
            return bool(o.nodes & hood)
        return cluster is not None and cluster in o.clusters

    @staticmethod
    def _extend(target: OpenIncident, ts: float, node: str | None, cluster: str | None) -> None:
        target.first_ts = min(target.first_ts, ts)
        target.last_ts = max(target.last_ts, ts)
        if node is not None:
            target.nodes.add(node)
        if cluster is not None:
            target.clusters.add(cluster)

    def _merge(self, target: OpenIncident, other: OpenIncident) -> None:
        target.nodes |= other.nodes
        target.clusters |= other.clusters
        target.first_ts = min(target.first_ts, other.first_ts)
        target.last_ts = max(target.last_ts, other.last_ts)
        self._drop(other.id)

    def _add(self, incident: OpenIncident) -> None:
        self._open[incident.id] = incident
        if self._pool is not None:
            self._pool[incident.id] = incident

    def _drop(self, incident_id: int) -> None:
        self._open.pop(incident_id, None)
        if self._pool is not None:
            self._pool.pop(incident_id, None)
