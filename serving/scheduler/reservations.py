"""Reservations that live in the database: held capacity shared by every replica of the service.

A *hold* books GPU shares, CPU and memory on one node for one pod (or one ``reserve=true``
placement) so that the next decisions, on any replica, see that capacity as used before telemetry
shows it. A hold ends when

* the pod is **seen bound**: ``POST /api/v1/scheduler/bound`` (kube-scheduler's
  ``ExtenderBindingArgs``), after which the hold stays until a telemetry snapshot collected
  ``bound_grace_s`` after the binding (by then the scrape shows the pod's usage; default 30 s, two
  Prometheus scrape intervals), or at once when telemetry lists the pod on that node
  (``NodeState.pods``, from kube-state-metrics); a binding to another node drops the hold;
* or its **TTL** expires (``FLEETMIND_RESERVATION_TTL_S``, default 120 s): the pod was never bound
  (kube-scheduler chose another node, or gave up). Expired rows are deleted on the next write.

Table ``reservations`` (:data:`fleetmind.serving.db.reservations`, Alembic revision ``0004``): one row per pod key
(``namespace/name`` for pods, ``placement/<job id>`` for the placement route).

Concurrency: kube-scheduler schedules one pod at a time (one leader), so extender calls do not
race; two replicas answering ``POST /api/v1/placements`` at the same instant may both see the same
free capacity (one request wide), as with any optimistic scheduler.
"""

from __future__ import annotations

import contextlib
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from sqlalchemy import delete, or_, select
from sqlalchemy.exc import OperationalError, StatementError

from fleetmind.data.errors import DataError
from fleetmind.serving.db import Database, reservations
from fleetmind.serving.scheduler.placement import Option, Reservations
from fleetmind.serving.schemas import JobSpec
from fleetmind.serving.telemetry.base import FleetSnapshot

reservations_table = reservations


MAX_KEY_CHARS = 320
"""Longest pod key (``namespace/name``: 63 + 1 + 253, or ``placement/<job id>``), as stored."""


def job_key(job_id: str) -> str:
    """The hold key of a ``POST /api/v1/placements`` job (``placement/<job id>``)."""
    return f"placement/{job_id}"


def _checked_key(key: str, uid: str | None = None) -> None:
    """Refuse what the table cannot hold before the database sees it (PostgreSQL refuses NUL and
    over-long strings with an error that is not about being down)."""
    if len(key) > MAX_KEY_CHARS or "\x00" in key:
        raise DataError(f"a reservation key is at most {MAX_KEY_CHARS} characters without NUL")
    if uid is not None and (len(uid) > 128 or "\x00" in uid):
        raise DataError("a pod uid is at most 128 characters without NUL")


@contextlib.contextmanager
def _bad_input_is_422() -> Iterator[None]:
    """The database refusing a value (not being down) is the caller's error: :class:`DataError`
    (422). ``OperationalError`` (unreachable, timed out) still propagates (503)."""
    try:
        yield
    except OperationalError:
        raise
    except (StatementError, ValueError, UnicodeError) as err:
        reason = type(getattr(err, "orig", None) or err).__name__
        raise DataError(f"the database refused the reservation's values ({reason})") from None


def _view(rows: Iterable[Any]) -> Reservations:
    """In-memory sums of held capacity (the interface the placers read)."""
    res = Reservations()
    for r in rows:
        opt = Option(r.cluster, r.node, tuple(int(g) for g in r.gpus or ()), 0.0)
        job = JobSpec(
            num_gpu=len(opt.gpus), gpu_milli=r.gpu_milli, cpu_milli=r.cpu_milli,
            memory_mib=r.memory_mib,
        )  # fmt: skip
        res.book(opt, job)
    return res


class DbReservations(Reservations):
    """Holds in the ``reservations`` table; also serves the in-process :class:`Reservations`
    interface (for the placement and fleet routes) from a view at most ``cache_s`` old.

    Args:
        db: the service database.
        ttl_s: lifetime of an unbound hold (s).
        bound_grace_s: how long after a binding the hold stays (until telemetry shows the pod).
        cache_s: age of the cached view behind ``gpu_used``/``gpu_items``...; own writes clear it.
        clock: time source (Unix seconds); tests pass a fake one.
    """

    def __init__(
        self,
        db: Database,
        ttl_s: float = 120.0,
        bound_grace_s: float = 30.0,
        cache_s: float = 0.25,
        clock: Callable[[], float] = time.time,
    ) -> None:
        super().__init__()
        self.db = db
        self.ttl_s = ttl_s
        self.bound_grace_s = bound_grace_s
        self.cache_s = cache_s
        self.clock = clock
        self._cached: tuple[float, Reservations] | None = None
        self._cache_lock = threading.Lock()

    # ------------------------------------------------------------------ holds
    def hold(self, key: str, option: Option, job: JobSpec, uid: str | None = None) -> None:
        """Hold ``option`` for pod ``key`` (replacing the pod's earlier hold)."""
        _checked_key(key, uid)
        now = self.clock()
        t = reservations_table
        with _bad_input_is_422(), self.db.write() as conn:
            conn.execute(delete(t).where(or_(t.c.pod_key == key, t.c.expires_ts <= now)))
            conn.execute(
                t.insert().values(
                    pod_key=key,
                    pod_uid=uid,
                    cluster=option.cluster,
                    node=option.node,
                    gpus=list(option.gpus),
                    gpu_milli=job.gpu_milli if option.gpus else 0,
                    cpu_milli=job.cpu_milli,
                    memory_mib=job.memory_mib,
                    created_ts=now,
                    expires_ts=now + self.ttl_s,
                    bound_ts=None,
                )
            )
        self._cached = None

    def bound(self, key: str, node: str) -> str:
        """Record that pod ``key`` was bound to ``node``.

        Returns:
            ``"held"`` (the hold now waits for telemetry), ``"moved"`` (bound elsewhere: the hold is
            dropped) or ``"unknown"`` (no live hold for that pod).
        """
        _checked_key(key)
        if len(node) > 256 or "\x00" in node:
            raise DataError("a node name is at most 256 characters without NUL")
        now = self.clock()
        t = reservations_table
        with _bad_input_is_422(), self.db.write() as conn:
            row = conn.execute(
                select(t.c.node).where(t.c.pod_key == key, t.c.expires_ts > now)
            ).first()
            if row is None:
                return "unknown"
            if row.node != node:
                conn.execute(delete(t).where(t.c.pod_key == key))
                outcome = "moved"
            else:
                conn.execute(
                    t.update()
                    .where(t.c.pod_key == key)
                    .values(bound_ts=now, expires_ts=now + max(self.bound_grace_s, 0.0) + 1e-3)
                )
                outcome = "held"
        self._cached = None
        return outcome

    def release(self, key: str) -> bool:
        """Drop pod ``key``'s hold; True when there was one."""
        _checked_key(key)
        t = reservations_table
        with _bad_input_is_422(), self.db.write() as conn:
            n = conn.execute(delete(t).where(t.c.pod_key == key)).rowcount
        self._cached = None
        return bool(n)

    def rows(self) -> list[dict[str, Any]]:
        """Live holds (not expired), oldest first."""
        t = reservations_table
        with self.db.read() as conn:
            rs = conn.execute(
                select(t).where(t.c.expires_ts > self.clock()).order_by(t.c.created_ts)
            ).all()
        return [dict(r._mapping) for r in rs]

    def view(
        self, snapshot: FleetSnapshot | None = None, exclude: str | None = None
    ) -> Reservations:
        """Held capacity now, as the placers read it.

        Args:
            snapshot: telemetry in use: a bound hold ends once the snapshot was collected
                ``bound_grace_s`` after the binding, or lists the pod on its node.
            exclude: a pod key whose own hold is left out (a retried pod must not block itself).
        """
        now = self.clock()
        t = reservations_table
        with self.db.read() as conn:
            rows = conn.execute(select(t).where(t.c.expires_ts > now)).all()
        seen: dict[tuple[str, str], Any] = {}
        if snapshot is not None and rows:
            seen = {(n.cluster, n.name): n.pods for n in snapshot.nodes if n.pods}
        live = []
        for r in rows:
            if r.pod_key == exclude:
                continue
            if r.pod_key in seen.get((r.cluster, r.node), ()):
                continue  # telemetry shows the pod's usage on that node
            if (
                r.bound_ts is not None
                and snapshot is not None
                and snapshot.collected_ts >= r.bound_ts + self.bound_grace_s
            ):
                continue
            live.append(r)
        return _view(live)

    def _current(self) -> Reservations:
        now = self.clock()
        cached = self._cached
        if cached is not None and now - cached[0] <= self.cache_s:
            return cached[1]
        with self._cache_lock:
            view = self.view()
            self._cached = (now, view)
        return view

    # ------------------------------------------------------- Reservations interface
    def gpu_used(self, cluster: str, node: str, gpu: int) -> int:
        return self._current().gpu_used(cluster, node, gpu)

    def cpu_used(self, cluster: str, node: str) -> int:
        return self._current().cpu_used(cluster, node)

    def mem_used(self, cluster: str, node: str) -> int:
        return self._current().mem_used(cluster, node)

    def gpu_items(self) -> list[tuple[tuple[str, str, int], int]]:
        return self._current().gpu_items()

    def cpu_items(self) -> list[tuple[tuple[str, str], int]]:
        return self._current().cpu_items()

    def mem_items(self) -> list[tuple[tuple[str, str], int]]:
        return self._current().mem_items()

    def book(self, opt: Option, job: JobSpec) -> None:
        """A ``reserve=true`` placement: held under :func:`job_key` for the TTL (a job without an
        id under a fresh one)."""
        self.hold(job_key(job.job_id or uuid.uuid4().hex), opt, job)
