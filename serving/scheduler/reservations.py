"""Reservations that live in the database: held capacity shared by every replica of the service.

A *hold* books GPU shares, CPU and memory on one node for one pod (or one ``reserve=true``
placement) so that the next decisions, on any replica, see that capacity as used before telemetry
shows it. A hold ends when

* the pod is **seen bound**: ``POST /api/v1/scheduler/bound`` (kube-scheduler's
  ``ExtenderBindingArgs``), after which the hold stays until a telemetry snapshot collected
  ``bound_grace_s`` after the binding is in use (by then the scrape shows the pod's usage; default
  30 s, two Prometheus scrape intervals); a binding to another node drops the hold. The row itself
  is kept ``snapshot_lag_s`` longer than that (the oldest snapshot a decision may still use: the
  telemetry TTL plus ``FLEETMIND_TELEMETRY_MAX_STALE_S`` with stale-while-refresh), so that a
  decision on a snapshot collected before the grace ran out still sees the hold;
* or telemetry lists the pod on the **held node** (``NodeState.pods``, from kube-state-metrics'
  ``kube_pod_info``; where that node's telemetry has uids, ``NodeState.pod_uids``, the hold's uid
  must be among them: a same-named earlier pod, deleted and created again and still scraped,
  neither ends nor keeps the hold) and places its usage there: CPU and memory are in that scrape
  (its requests), and a hold without GPUs ends. A hold with GPUs ends only when the snapshot also
  counts the pod's GPU use (``NodeState.gpu_pods``: DCGM names the pod on a GPU, its GPU-sharing
  annotations carry ``gpu-index``, or its ``nvidia_com_gpu`` request is charged to the node's GPUs:
  kube-state-metrics' requests of pods DCGM names nowhere are marked taken,
  :func:`fleetmind.serving.telemetry.prometheus.mark_requested_gpus`, whichever GPUs the device
  plugin chose). A whole-GPU hold (1000 milli or more) that nothing places stays only while its pod
  is not yet running (``NodeState.pending_pods``: pulling images, its GPU idle) and ends once it
  runs: its real GPU reads busy. Until then a share hold is the pod's GPU assignment (a
  ``gpu-milli`` share without ``gpu-index``, which nothing in FleetMind's deployment writes and which requests no
  ``nvidia.com/gpu``): it stays while telemetry lists the pod there, past its TTL and past
  ``/bound``'s grace, and each view that sees it so renews its deadline to one TTL ahead
  (:meth:`DbReservations.view`), so it ends at most one TTL after the pod leaves
  ``kube_pod_info`` (finished, deleted), or with the bound grace when ``/bound`` saw it. Such a
  kept hold counts in full while its pod is not yet running; once it runs, a kept share adds to
  its GPU only what telemetry does not already read there (a running pod's framebuffer lowers
  ``free_milli``: :func:`_kept_use`); no CPU or memory;
* or telemetry lists the pod, by its **uid**, on **another node** of the hold's cluster
  (``NodeState.pod_uids``): a later extender or a score plugin chose otherwise, and no ``/bound``
  said so, so the held capacity is not the pod's at all. By uid, not by name: a pod deleted and
  created again under its name (a StatefulSet's ``web-0``, a training operator's ``job-worker-0``)
  is another pod, and the old one's ``kube_pod_info`` stays in Prometheus for up to a scrape
  interval (``FLEETMIND_TELEMETRY_MAX_AGE_S`` with federation) after its deletion. A hold without
  a uid ends on the held node only; where a node's telemetry has no uids, the name on it ends holds;
* or its **TTL** expires (``FLEETMIND_RESERVATION_TTL_S``, default 120 s): the pod was never bound
  (kube-scheduler chose another node, or gave up). Expired rows are deleted on the next write.
  The TTL is a clock deadline, not a snapshot rule: it is also what ends the hold of a pod bound
  without ``/bound`` (the call is optional) should no snapshot list it first, and of every
  ``reserve=true`` placement (no pod has its key). A decision at the deadline may read a snapshot
  ``snapshot_lag_s`` old, so such a pod, or the job a placement held for, must show in telemetry
  (binding, a kube-state-metrics scrape, federation) within ``ttl_s - snapshot_lag_s`` of the
  hold (85 s by default: 120 - 5 - 30), or its capacity may be given again once.

Table ``reservations`` (:data:`fleetmind.serving.db.reservations`, Alembic revision ``0004``): one
row per stored key: ``<cluster>/<namespace>/<name>`` for pods (:func:`stored_key`; ``cluster`` is
the held node's cluster, also in its own column; a cluster name too long for that, or one starting
with ``placement:`` or ``#``, stands there as a digest: ``#<digest>/...``), ``placement:<job id>``
for the placement route (a key no pod has, see :func:`job_key`). One FleetMind may serve the
schedulers of several clusters (``FLEETMIND_SCHEDULER_CLUSTER`` unset, node names distinct),
whose pods can share a ``namespace/name`` (two identical Helm releases' StatefulSet
``trainer-0``): keyed by name alone, one cluster's hold replaced the other's, and the capacity it held was handed out again. Rows
written before the cluster was part of the key (``namespace/name``, their ``cluster`` column set)
read as that pod's hold in that cluster (:func:`pod_name`): ``/bound`` and
:meth:`DbReservations.release` end them, telemetry ends them as any hold, the pod's next hold
replaces them, and they expire by their TTL otherwise.

Who holds: the extender's **prioritize** holds the node it scores 10, and its **filter** holds the
one node it passes when it passes exactly one (kube-scheduler then skips prioritize: "When only one
node after predicate, just use it.", ``schedulePod`` in ``pkg/scheduler/schedule_one.go``); a
``reserve=true`` placement holds its first option. A pod's later hold replaces its earlier one in
its cluster.

Concurrency: extender calls do race (kube-scheduler's ``httpTimeout`` with ``ignorable: true`` moves
on while FleetMind still answers; several scheduler profiles or replicas). In one process the routes
decide and hold under ``Services.place_lock``; across replicas :meth:`DbReservations.hold`, given the
snapshot and the view the decision read, re-reads the node's holds inside its write transaction
(PostgreSQL: a transaction advisory lock per node; SQLite: the database write lock, taken by the
transaction's first statement) and refuses when capacity taken since then leaves the option no
room; the caller decides again. A pod's hold is an upsert on its key, so the same pod held twice at
once ends with one row, never a unique-key error. ``reserve=true`` placements hold the same way
(:func:`fleetmind.serving.scheduler.placement_router.place_and_hold`); only :meth:`DbReservations.book`
(no snapshot, no view) holds unchecked.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import threading
import time
import uuid
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any

from sqlalchemy import delete, func, select, text
from sqlalchemy.exc import SQLAlchemyError

from fleetmind.data.errors import DataError
from fleetmind.redact import terminal_safe
from fleetmind.serving.db import Database, is_input_error, pg_lock_wait, reservations
from fleetmind.serving.scheduler.placement import Option, Reservations, free_gpus
from fleetmind.serving.schemas import JobSpec
from fleetmind.serving.telemetry.base import FleetSnapshot, NodeState

if TYPE_CHECKING:
    from fleetmind.serving.settings import Settings

reservations_table = reservations
log = logging.getLogger(__name__)


_PG_LOCK_CLASS = 0x464D5256
"""First key of the two-key PostgreSQL advisory locks taken per node by :meth:`DbReservations.hold`
(``"FMRV"``; the two-key space is apart from the one-key locks of migrations and leadership)."""

MAX_KEY_CHARS = 320
"""Longest key a caller gives (``namespace/name``: 63 + 1 + 253, or ``placement:<job id>``), and
longest stored key (the ``pod_key`` column, :func:`stored_key`)."""

DIGEST_PREFIX = "#"
"""First character of a pod's stored key when its cluster stands there as a digest
(:func:`stored_key`): ``#<32 hex digits>/<namespace>/<name>``, or ``#<32 hex digits>~<packed
namespace/name>`` when even that is too long. No key of the plain form ``<cluster>/...`` starts
with it (a cluster whose name does is stored by its digest too), nor any job key or pod key of
FleetMind 0.2.0 and earlier (a namespace is a DNS-1123 label)."""

_DIGEST_BYTES = 16
"""Bytes of the cluster digest of a :data:`DIGEST_PREFIX` key (BLAKE2b, 32 hex digits: two
clusters sharing one is as likely as a random 128-bit collision)."""

_POD_CHARS = "abcdefghijklmnopqrstuvwxyz0123456789-./"
"""The characters of a pod key (a DNS-1123 namespace, ``/``, a DNS-1123 subdomain name)."""
_POD_DIGIT = {c: i + 1 for i, c in enumerate(_POD_CHARS)}
_PACK_CHARS = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
_PACK_DIGIT = {c: i for i, c in enumerate(_PACK_CHARS)}


def _pack(key: str) -> str:
    """``key`` (characters of :data:`_POD_CHARS` only) in fewer characters, reversibly
    (:func:`_unpack`): its characters as the digits 1..39 of a base-40 number, written in base 64.
    The longest pod key (317 characters) takes 282."""
    n = 0
    for ch in key:
        n = n * 40 + _POD_DIGIT[ch]
    out = []
    while n:
        n, d = divmod(n, 64)
        out.append(_PACK_CHARS[d])
    return "".join(reversed(out))


def _unpack(text: str) -> str | None:
    """The key :func:`_pack` wrote as ``text``; ``None`` when it wrote no such text."""
    n = 0
    for ch in text:
        d = _PACK_DIGIT.get(ch)
        if d is None:
            return None
        n = n * 64 + d
    out = []
    while n:
        n, d = divmod(n, 40)
        if d == 0:
            return None
        out.append(_POD_CHARS[d - 1])
    return "".join(reversed(out))


JOB_KEY_PREFIX = "placement:"
"""Prefix of the hold keys of ``POST /api/v1/placements`` jobs. Pods are held under
``namespace/name``, and a namespace is a DNS-1123 label (lower-case letters, digits, ``-``), which
the extender and ``/bound`` check: no pod key contains ``:``, so no pod (not even one in a
namespace called ``placement``) can replace, bind or drop a placement job's hold, nor be taken for
one in telemetry. A pod's stored key (:func:`stored_key`) never starts with it either: a cluster
whose name starts with ``placement:`` is stored by its digest (:data:`DIGEST_PREFIX`).

Keys of the former form ``placement/<job id>`` (FleetMind 0.2.0 and earlier) are not migrated: they read
exactly as the pod ``<job id>`` of namespace ``placement`` would, so no rule can tell the two apart.
Every hold expires (``expires_ts``: the reservation TTL, 120 s by default), so such rows end by
themselves within one TTL after the upgrade; until then a job that places itself again with
``reserve=true`` may hold twice (old row and new), which is capacity held too long, never
double-booked."""


def job_key(job_id: str) -> str:
    """The hold key of a ``POST /api/v1/placements`` job (``placement:<job id>``; see
    :data:`JOB_KEY_PREFIX` for why no pod's ``namespace/name`` key can equal it)."""
    return f"{JOB_KEY_PREFIX}{job_id}"


def stored_key(cluster: str, key: str) -> str:
    """The stored key of pod ``key`` (``namespace/name``) held in ``cluster``:
    ``<cluster>/<namespace>/<name>``, so same-named pods of two clusters hold apart. A job key
    (``placement:<job id>``, :func:`job_key`) is stored as it is: a job is no cluster's pod.

    Where that key would be longer than :data:`MAX_KEY_CHARS`, or ``cluster`` starts with
    :data:`JOB_KEY_PREFIX` or :data:`DIGEST_PREFIX` (its pods' keys would pass for a job's, or for
    another cluster's digest key), a 128-bit digest of the cluster stands for it:
    ``#<32 hex digits>/<namespace>/<name>``, and where even that does not fit (a long pod key),
    ``#<32 hex digits>~`` and the pod key packed (:func:`_pack`). Either way the key is the
    cluster's and the pod's alone, and :func:`pod_name` reads the pod key back; the ``cluster``
    column keeps the cluster's name, which every lookup also matches.

    Raises:
        DataError: a key too long for the digest form that is no pod key (characters other than
            a DNS name's and ``/``).
    """
    if key.startswith(JOB_KEY_PREFIX):
        return key
    full = f"{cluster}/{key}"
    if len(full) <= MAX_KEY_CHARS and not cluster.startswith((JOB_KEY_PREFIX, DIGEST_PREFIX)):
        return full
    blob = cluster.encode("utf-8", "surrogatepass")
    head = DIGEST_PREFIX + hashlib.blake2b(blob, digest_size=_DIGEST_BYTES).hexdigest()
    if len(head) + 1 + len(key) <= MAX_KEY_CHARS:
        return f"{head}/{key}"
    if key and all(ch in _POD_DIGIT for ch in key):
        return f"{head}~{_pack(key)}"
    raise DataError(
        f"a reservation key of {len(key)} characters held in a cluster of {len(cluster)} "
        "does not fit: a longer key than a pod's namespace/name"
    )


_HEAD_CHARS = 1 + 2 * _DIGEST_BYTES
"""Characters of a :data:`DIGEST_PREFIX` key before its separator (``/`` or ``~``)."""


def pod_name(key: str, cluster: str) -> str:
    """The caller's key of a stored row (``pod_key`` ``key``, column ``cluster``):
    ``namespace/name`` for a pod held as :func:`stored_key` writes it, and ``key`` itself
    otherwise (a job key, or a pod's row written before the cluster was part of the key, which the
    ``cluster`` column then places)."""
    name: str | None = None
    if key.startswith(DIGEST_PREFIX):
        sep, rest = key[_HEAD_CHARS : _HEAD_CHARS + 1], key[_HEAD_CHARS + 1 :]
        name = rest if sep == "/" else _unpack(rest) if sep == "~" else None
    else:
        parts = key.rsplit("/", 2)
        if len(parts) == 3:
            name = f"{parts[1]}/{parts[2]}"
    if name:
        try:
            if stored_key(cluster, name) == key:
                return name
        except DataError:
            pass
    return key


def _name(r: Any) -> str:
    """:func:`pod_name` of row ``r``."""
    return pod_name(r.pod_key, r.cluster)


def snapshot_lag_s(settings: Settings) -> float:
    """The age (s) of the oldest telemetry snapshot a decision may use under ``settings``:
    ``FLEETMIND_TELEMETRY_TTL_S`` plus ``FLEETMIND_TELEMETRY_MAX_STALE_S`` for ``prometheus``
    telemetry (stale-while-refresh, 5 + 30 = 35 s by default; the TTL alone when stale serving is
    off), the TTL for ``nvml`` (a snapshot is reused that long), 0 for ``sim`` (read every time).
    The ``snapshot_lag_s`` of :class:`DbReservations`."""
    ttl = max(settings.telemetry_ttl_s, 0.0)
    if settings.telemetry == "nvml":
        return ttl
    if settings.telemetry != "prometheus":
        return 0.0
    stale = settings.telemetry_max_stale_s if ttl > 0 else 0.0
    return ttl + max(stale, 0.0)


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
    (422), as :func:`fleetmind.serving.db.is_input_error` tells. Every other database error
    (unreachable, timed out, read-only, failing) propagates: 503."""
    try:
        yield
    except SQLAlchemyError as err:
        if not is_input_error(err):
            raise
        reason = type(getattr(err, "orig", None) or err).__name__
        raise DataError(f"the database refused the reservation's values ({reason})") from None
    except (ValueError, UnicodeError) as err:
        reason = type(err).__name__
        raise DataError(f"the database refused the reservation's values ({reason})") from None


def _node_lock_key(cluster: str, node: str) -> int:
    """A signed 32-bit key for the node's advisory lock (a collision only serialises two nodes)."""
    digest = hashlib.blake2b(f"{cluster}\x00{node}".encode(), digest_size=4).digest()
    return int.from_bytes(digest, "big", signed=True)


def _fits(node: NodeState, option: Option, job: JobSpec, held: Reservations) -> bool:
    """Whether ``option`` still has room on ``node`` after ``held`` (the placers' arithmetic)."""
    free = dict(free_gpus(node, held))
    if any(free.get(g, 0) < job.gpu_milli for g in option.gpus):
        return False
    if job.cpu_milli and node.cpu_milli:
        if node.cpu_milli_free - held.cpu_used(node.cluster, node.name) < job.cpu_milli:
            return False
    if job.memory_mib and node.memory_mib:
        if node.memory_mib_free - held.mem_used(node.cluster, node.name) < job.memory_mib:
            return False
    return True


def _taken(option: Option, seen: Reservations, now: Reservations) -> bool:
    """Whether holds on ``option``'s node or GPUs grew between the decision's view and now."""
    c, n = option.cluster, option.node
    return (
        any(now.gpu_used(c, n, g) > seen.gpu_used(c, n, g) for g in option.gpus)
        or now.cpu_used(c, n) > seen.cpu_used(c, n)
        or now.mem_used(c, n) > seen.mem_used(c, n)
    )


def _not_running(r: Any, node: NodeState) -> bool:
    """Whether the pod of hold ``r`` is not yet running on ``node`` (``node.pending_pods``;
    ``None``: cannot tell, so not running)."""
    return node.pending_pods is None or _name(r) in node.pending_pods


def _unplaced(r: Any, node: NodeState) -> bool:
    """Whether GPU hold ``r``, whose pod ``node`` lists, is still the pod's GPU assignment: its
    use the snapshot places on no GPU of ``node`` (not in ``node.gpu_pods``: DCGM names it on no
    GPU, no ``gpu-index`` places it, no ``nvidia.com/gpu`` request is charged), and it is a share
    (``gpu_milli`` under 1000), or a whole-GPU hold (MIG instances, ``gpu-count`` pods) of a pod
    not yet running (``node.pending_pods``: its GPU reads idle while images are pulled). Once that
    pod runs, its real GPU reads busy, and a kept whole hold would hold the wrong GPU for the
    pod's life where the device plugin chose another one, so it ends."""
    name = _name(r)
    if not r.gpus or node.gpu_pods is None or name in node.gpu_pods:
        return False
    if r.gpu_milli >= 1000 and (node.pending_pods is None or name not in node.pending_pods):
        return False
    if r.pod_uid and node.pod_uids and r.pod_uid not in node.pod_uids:
        return False  # that name on the node is another pod (deleted and created again)
    return True  # nothing in the snapshot says which GPU it is on


def kept_by(rows: Iterable[Any], snapshot: FleetSnapshot | None) -> set[str]:
    """Stored keys of the GPU share holds among ``rows`` whose pod ``snapshot`` lists on the held
    node (by name, on that node of the hold's cluster) without placing its GPU use there
    (:func:`_unplaced`): they stay, past their TTL too, while it does."""
    rows = [r for r in rows if r.gpus]
    if snapshot is None or not rows:
        return set()
    wanted = {(r.cluster, r.node) for r in rows}
    nodes = {(n.cluster, n.name): n for n in snapshot.nodes if (n.cluster, n.name) in wanted}
    return {
        r.pod_key
        for r in rows
        if (node := nodes.get((r.cluster, r.node))) is not None
        and _name(r) in node.pods
        and _unplaced(r, node)
    }


def _outranked(r: Any, outranks: tuple[str, int] | None) -> bool:
    """Whether hold ``r`` is on the node a preemptor was nominated to (``outranks``: that node's
    name and the preemptor's priority) and is for a pod of lower priority whose request
    kube-scheduler counts itself (a recorded ``pod_priority``; ``NULL``: never left out).

    kube-scheduler nominates a pod to a node (``status.nominatedNodeName``) after evicting the
    pods of lower priority there that keep it out (``DefaultPreemption``): a hold of such a pod
    holds capacity it no longer has (evicted before telemetry listed it), and until its TTL every
    retry of the preemptor failed that node and preempted again elsewhere. Only the holds of pods
    whose whole request kube-scheduler's ``NodeResourcesFit`` counts for bound and assumed pods
    (CPU, memory, ``nvidia.com/gpu``, ``nvidia.com/mig-<profile>``) record a priority
    (:meth:`DbReservations.hold`). ``NodeResourcesFit`` counts devices, not which GPU or how much
    of it: a GPU share (the ``alibabacloud.com/gpu-milli`` annotations) and a ``reserve: true``
    job's hold record none and always count (nominating a node evicts nothing for them, nor at
    all under ``NominatedNodeNameForExpectation``, KEP-5278), and where the node carries any such
    use kube-scheduler does not see, a lower-priority pod that was not evicted could be handed a
    GPU already partly used, so the caller leaves holds out only where :func:`_uncounted` finds
    none. The node is matched by name: the candidate nodes of one decision are all of one
    cluster."""
    if outranks is None or r.node != outranks[0]:
        return False
    prio = getattr(r, "pod_priority", None)
    return prio is not None and prio < outranks[1]


def _uncounted(rows: Iterable[Any], snapshot: FleetSnapshot | None, node: str) -> bool:
    """Whether ``node`` (by name) may carry GPU use kube-scheduler does not count, so no hold
    there may be left out for a preemptor (:func:`_outranked`): a hold among ``rows`` there with
    no recorded priority (a GPU share, a ``reserve: true`` job, a row from before ``0011``), the
    node missing from ``snapshot`` (or no snapshot), or a healthy GPU of it read partly used
    (``free_milli`` strictly between 0 and 1000, milli-GPUs) or carrying shares telemetry places
    there (``share_milli``). A GPU wholly free or wholly used (a device pod; the victim before
    its eviction shows) is what ``NodeResourcesFit``'s device count sees."""
    if any(r.node == node and getattr(r, "pod_priority", None) is None for r in rows):
        return True
    states = [n for n in snapshot.nodes if n.name == node] if snapshot is not None else []
    if not states:
        return True
    return any(
        g.healthy and (0 < g.free_milli < 1000 or (g.share_milli or 0) > 0)
        for n in states
        for g in n.gpus
    )


def _chunks(keys: list[str], size: int = 500) -> Iterator[list[str]]:
    """``keys`` in lists of at most ``size`` (bound parameters per statement)."""
    for i in range(0, len(keys), size):
        yield keys[i : i + size]


def _kept_use(
    rows: Iterable[Any], kept: set[str], snapshot: FleetSnapshot | None
) -> dict[tuple[str, str, int], int]:
    """Milli-GPUs the kept holds (``kept``, :func:`kept_by`) among ``rows`` add, per GPU
    ``(cluster, node, index)``, to what ``snapshot`` reads there.

    A kept hold whose pod is not yet running (``NodeState.pending_pods``; whole-GPU holds are kept
    only then) counts in full: nothing of it is in any reading. A running share pod's framebuffer
    already lowers its GPU's ``free_milli``, so booking its whole share again would count it
    twice: on a GPU carrying running kept shares summing to ``run`` milli and not-running ones
    summing to ``full``, the kept holds add ``full + min(run, max(0, free - (cap - run)))``, where
    ``cap`` is 1000 less the shares telemetry places there itself (``GpuState.share_milli``,
    annotations with ``gpu-index``). A GPU the snapshot does not show gets the whole holds."""
    if not kept:
        return {}
    nodes = {(n.cluster, n.name): n for n in snapshot.nodes} if snapshot is not None else {}
    full: dict[tuple[str, str, int], int] = defaultdict(int)
    run: dict[tuple[str, str, int], int] = defaultdict(int)
    for r in rows:
        if r.pod_key in kept:
            node = nodes.get((r.cluster, r.node))
            sums = full if node is None or _not_running(r, node) else run
            for g in r.gpus or ():
                sums[(r.cluster, r.node, int(g))] += int(r.gpu_milli)
    gpus = {(n.cluster, n.name, g.index): g for n in nodes.values() for g in n.gpus}
    out: dict[tuple[str, str, int], int] = dict(full)
    for key, held in run.items():
        g = gpus.get(key)
        if g is None:
            out[key] = out.get(key, 0) + held
            continue
        read = g.free_milli if g.healthy else 0
        cap = 1000 - (g.share_milli or 0)
        out[key] = out.get(key, 0) + min(held, max(0, read - (cap - held)))
    return out


def _view(rows: Iterable[Any], snapshot: FleetSnapshot | None = None) -> Reservations:
    """In-memory sums of held capacity (the interface the placers read). The share holds
    ``snapshot`` keeps (:func:`kept_by`) add only the GPU share it does not already read
    (:func:`_kept_use`), and no CPU or memory: the pod is listed there, its requests in the
    scrape."""
    rows = list(rows)
    kept = kept_by(rows, snapshot)
    res = Reservations()
    for r in rows:
        if kept and r.pod_key in kept:
            continue
        opt = Option(r.cluster, r.node, tuple(int(g) for g in r.gpus or ()), 0.0)
        job = JobSpec.model_construct(  # unvalidated: a stored hold is read as it was written
            num_gpu=len(opt.gpus), gpu_milli=r.gpu_milli, cpu_milli=r.cpu_milli,
            memory_mib=r.memory_mib,
        )  # fmt: skip
        res.book(opt, job)
    for (cluster, node, gpu), milli in sorted(_kept_use(rows, kept, snapshot).items()):
        if milli > 0:
            job = JobSpec.model_construct(num_gpu=1, gpu_milli=milli, cpu_milli=0, memory_mib=0)
            res.book(Option(cluster, node, (gpu,), 0.0), job)
    return res


class DbReservations(Reservations):
    """Holds in the ``reservations`` table; also serves the in-process :class:`Reservations`
    interface (for the placement and fleet routes) from a view at most ``cache_s`` old.

    Args:
        db: the service database.
        ttl_s: lifetime of an unbound hold (s).
        bound_grace_s: how long after a binding the hold stays (until telemetry shows the pod):
            it ends once a snapshot collected this long (s) after the binding is in use.
        cache_s: age of the cached view behind ``gpu_used``/``gpu_items``...; own writes clear it.
        clock: time source (Unix seconds); tests pass a fake one.
        snapshot_lag_s: the age (s) of the oldest snapshot a decision may use (telemetry TTL plus
            stale-while-refresh's ``max_stale_s``: :func:`snapshot_lag_s`); a bound hold's row is
            kept this much longer than ``bound_grace_s``, so a decision on an older snapshot
            (collected before the grace ran out) still counts it. 0: the row ends with the grace.
    """

    def __init__(
        self,
        db: Database,
        ttl_s: float = 120.0,
        bound_grace_s: float = 30.0,
        cache_s: float = 0.25,
        clock: Callable[[], float] = time.time,
        snapshot_lag_s: float = 0.0,
    ) -> None:
        super().__init__()
        self.db = db
        self.ttl_s = ttl_s
        self.bound_grace_s = bound_grace_s
        self.snapshot_lag_s = snapshot_lag_s
        self.cache_s = cache_s
        self.clock = clock
        # (clock(), time.monotonic(), view) when the view was read
        self._cached: tuple[float, float, Reservations] | None = None
        self._cache_lock = threading.Lock()

    # ------------------------------------------------------------------ holds
    def hold(
        self,
        key: str,
        option: Option,
        job: JobSpec,
        uid: str | None = None,
        snapshot: FleetSnapshot | None = None,
        seen: Reservations | None = None,
        priority: int | None = None,
        nominated: str | None = None,
    ) -> bool:
        """Hold ``option`` for pod ``key`` (``namespace/name``, or a :func:`job_key`), replacing the
        pod's earlier hold in ``option``'s cluster in one upsert (stored under :func:`stored_key`;
        a same-named pod's hold in another cluster is another row, left alone).

        With ``snapshot`` and ``seen`` (the view the decision was made on), the node's holds are
        read again inside the write transaction, under a per-node lock: when others held capacity
        on the option's node since ``seen`` and the option no longer fits the snapshot after them,
        nothing is held and False comes back (decide again on a fresh view).

        ``priority`` (the pod's ``spec.priority``, given only for a pod whose whole request
        kube-scheduler counts itself; ``None``: a GPU share, a job, a hold no preemptor may leave
        out) is stored with the hold; ``nominated`` (the pod's ``status.nominatedNodeName``)
        leaves out, as :meth:`view` did, the holds of such pods of lower priority on that node
        (:func:`_outranked`).

        On PostgreSQL a lock wait (the node's lock, a row another transaction holds) lasting
        :data:`fleetmind.serving.db.PG_LOCK_WAIT_S` fails the hold with SQLSTATE 55P03 (a
        database error: 503), as when a replica hangs inside its own hold.

        Returns:
            True when the hold was written.
        """
        _checked_key(key, uid)
        now = self.clock()
        t = reservations_table
        own = stored_key(option.cluster, key)
        values = {
            "pod_key": own,
            "pod_uid": uid,
            "cluster": option.cluster,
            "node": option.node,
            "gpus": list(option.gpus),
            "gpu_milli": job.gpu_milli if option.gpus else 0,
            "cpu_milli": job.cpu_milli,
            "memory_mib": job.memory_mib,
            "created_ts": now,
            "expires_ts": now + self.ttl_s,
            "bound_ts": None,
            "pod_priority": priority,
        }
        with _bad_input_is_422(), self.db.write() as conn:
            if not self.db.is_sqlite:  # before any row lock: no lock-order cycle between nodes
                # a peer hung inside its own hold (ended by idle_in_transaction_session_timeout)
                # fails this one (55P03: 503) after PG_LOCK_WAIT_S, not the statement timeout
                pg_lock_wait(conn)
                conn.execute(
                    text("SELECT pg_advisory_xact_lock(CAST(:c AS integer), CAST(:k AS integer))"),
                    {"c": _PG_LOCK_CLASS, "k": _node_lock_key(option.cluster, option.node)},
                )
            # On SQLite this first statement writes, which takes the database's write lock (as
            # BEGIN IMMEDIATE would): the reads below see every committed hold, and no replica
            # commits another until this transaction ends.
            conn.execute(
                delete(t).where(t.c.expires_ts <= now, t.c.pod_key != own, t.c.gpu_milli <= 0)
            )
            self._sweep(conn, own, snapshot, now)
            if snapshot is not None and seen is not None:
                outranks = (nominated, priority) if nominated and priority is not None else None
                if not self._room_left(conn, key, option, job, (snapshot, seen), now, outranks):
                    return False
            before = conn.execute(select(t.c.node, t.c.gpus).where(t.c.pod_key == own)).first()
            conn.execute(self._upsert(values))
            if own != key:  # the pod's row from before the cluster was in the key, if any
                conn.execute(delete(t).where(t.c.pod_key == key, t.c.cluster == option.cluster))
        self._cached = None
        where = (option.node, values["gpus"])
        if before is None or (before.node, list(before.gpus or [])) != where:
            log.info(
                "scheduler hold: %s on node %s (cluster %s): GPUs %s at %d milli, %d mCPU, %d MiB, "
                "for %.0f s unless seen bound (GET /api/v1/scheduler/holds)",
                terminal_safe(key), terminal_safe(option.node), terminal_safe(option.cluster),
                values["gpus"], values["gpu_milli"],
                job.cpu_milli, job.memory_mib, self.ttl_s,
            )  # fmt: skip
        return True

    def _sweep(self, conn: Any, key: str, snapshot: FleetSnapshot | None, now: float) -> None:
        """Delete the expired GPU holds (other than stored key ``key``'s), except those ``snapshot``
        keeps (:func:`kept_by`), whose deadline moves one TTL ahead instead."""
        t = reservations_table
        expired = conn.execute(
            select(t.c.pod_key, t.c.pod_uid, t.c.cluster, t.c.node, t.c.gpus, t.c.gpu_milli).where(
                t.c.expires_ts <= now, t.c.pod_key != key
            )
        ).all()
        kept = kept_by(expired, snapshot)
        gone = sorted(r.pod_key for r in expired if r.pod_key not in kept)
        for part in _chunks(gone):
            conn.execute(delete(t).where(t.c.pod_key.in_(part), t.c.expires_ts <= now))
        for part in _chunks(sorted(kept)):
            conn.execute(
                t.update().where(t.c.pod_key.in_(part)).values(expires_ts=now + self.ttl_s)
            )

    def _renew(self, rows: list[Any], snapshot: FleetSnapshot | None, now: float) -> None:
        """Move the deadline of the holds ``snapshot`` keeps (:func:`kept_by`) to one TTL ahead
        when under half a TTL is left. Best effort: a database that refuses the write (read-only,
        busy) leaves the deadlines as they were, logged; a later view renews them."""
        kept = kept_by(rows, snapshot)
        due = sorted(
            r.pod_key for r in rows if r.pod_key in kept and r.expires_ts < now + self.ttl_s / 2
        )
        if not due:
            return
        t = reservations_table
        try:
            with self.db.write() as conn:
                if not self.db.is_sqlite:
                    pg_lock_wait(conn)
                for part in _chunks(due):
                    conn.execute(
                        t.update()
                        .where(t.c.pod_key.in_(part), t.c.expires_ts < now + self.ttl_s)
                        .values(expires_ts=now + self.ttl_s)
                    )
        except SQLAlchemyError as err:
            log.warning("could not renew %d held GPU assignments: %s", len(due), type(err).__name__)
            return
        self._cached = None

    def _upsert(self, values: dict[str, Any]) -> Any:
        if self.db.is_sqlite:
            from sqlalchemy.dialects.sqlite import insert
        else:
            from sqlalchemy.dialects.postgresql import insert
        stmt = insert(reservations_table).values(**values)
        return stmt.on_conflict_do_update(
            index_elements=["pod_key"],
            set_={k: stmt.excluded[k] for k in values if k != "pod_key"},
        )

    def _room_left(
        self,
        conn: Any,
        key: str,
        option: Option,
        job: JobSpec,
        read: tuple[FleetSnapshot, Reservations],
        now: float,
        outranks: tuple[str, int] | None = None,
    ) -> bool:
        """The capacity check of :meth:`hold`, inside its transaction: False when holds taken
        after ``seen`` (``read``: the decision's snapshot and view) leave ``option`` without room
        on its node (pod ``key``'s own holds there, of either key form, and those ``outranks``
        leaves out, :func:`_outranked`, left out as ``seen`` left them out)."""
        snapshot, seen = read
        t = reservations_table
        rows = conn.execute(
            select(t).where(
                t.c.cluster == option.cluster,
                t.c.node == option.node,
                t.c.expires_ts > now,
                t.c.pod_key.not_in([stored_key(option.cluster, key), key]),
            )
        ).all()
        held = _view(self._live(rows, snapshot, outranks=outranks), snapshot)
        if not _taken(option, seen, held):
            return True  # nothing new on this node: the decision's view still holds
        node = next(
            (n for n in snapshot.nodes if n.cluster == option.cluster and n.name == option.node),
            None,
        )
        return node is None or _fits(node, option, job, held)

    def bound(
        self,
        key: str,
        node: str,
        uid: str | None = None,
        cluster: str | None = None,
        ruled_out: frozenset[str] = frozenset(),
    ) -> str:
        """Record that pod ``key`` (``namespace/name``) was bound to ``node``.

        Args:
            uid: the bound pod's uid, when known: a hold recorded with another uid belongs to
                another pod of the same name (deleted and recreated, or in another cluster) and
                is left alone.
            cluster: the cluster of ``node`` (``FLEETMIND_SCHEDULER_CLUSTER``, or the telemetry
                cluster that has a node of that name): only that cluster's hold of ``key`` is the
                bound pod's. ``None`` (the node's cluster unknown): a hold of ``key`` is the pod's
                where it has the pod's ``uid`` or is on ``node``, else where all its holds are in
                one cluster not in ``ruled_out``; holds of ``key`` in several clusters that
                neither tells apart are left to telemetry and their TTL (``"unknown"``).
            ruled_out: clusters ``node`` is known not to be in (those of the last snapshot, which
                does not list it there): a hold there is a same-named pod's of another cluster.
                Empty when no snapshot was read (a replica that made no decision yet, a restart),
                the common case of one cluster, whose pod bound elsewhere then drops its hold.

        The hold then lasts until a snapshot collected ``bound_grace_s`` after now is in use
        (:meth:`view`); its row, ``bound_grace_s + snapshot_lag_s``.

        Returns:
            ``"held"`` (the hold now waits for telemetry), ``"moved"`` (bound elsewhere: the hold is
            dropped) or ``"unknown"`` (no live hold for that pod).
        """
        _checked_key(key, uid)
        if len(node) > 256 or "\x00" in node:
            raise DataError("a node name is at most 256 characters without NUL")
        now = self.clock()
        t = reservations_table
        with _bad_input_is_422(), self.db.write() as conn:
            rows = [
                r
                for r in self._rows_of(conn, key, cluster, now)
                if uid is None or r.pod_uid is None or r.pod_uid == uid
            ]
            if cluster is None:  # which cluster's pod: only its uid or its node can tell
                # "all its holds in one cluster" only where the snapshot does not rule it out:
                # cluster A listed without this node (B's telemetry lost) means A's hold is A's
                # same-named pod's, still unbound, which "moved" would drop
                one = {r.cluster for r in rows}
                rows = (
                    [r for r in rows if uid is not None and r.pod_uid == uid]
                    or [r for r in rows if r.node == node]
                    or (rows if len(one) == 1 and not one & ruled_out else [])
                )
            if not rows:
                return "unknown"
            there = [r.pod_key for r in rows if r.node == node]
            if not there:
                gone = [r.pod_key for r in rows]
                conn.execute(delete(t).where(t.c.pod_key.in_(gone)))
                outcome = "moved"
            else:
                # a clock deadline the snapshot rule of _live always reaches first: a decision
                # may read a snapshot snapshot_lag_s old, collected before the grace ran out,
                # that does not show the pod yet (ending the row with the grace double-booked)
                keep_s = max(self.bound_grace_s, 0.0) + max(self.snapshot_lag_s, 0.0)
                conn.execute(
                    t.update()
                    .where(t.c.pod_key.in_(there))
                    .values(bound_ts=now, expires_ts=now + keep_s + 1e-3)
                )
                outcome = "held"
        self._cached = None
        return outcome

    def _rows_of(self, conn: Any, key: str, cluster: str | None, now: float | None) -> list[Any]:
        """The rows (live at ``now``; any with ``None``) that hold pod ``key``: stored under
        :func:`stored_key` or, written before the cluster was in the key, under ``key`` itself;
        in ``cluster`` only, when given."""
        t = reservations_table
        if key.startswith(JOB_KEY_PREFIX):
            match = t.c.pod_key == key
        elif cluster is not None:
            match = t.c.pod_key.in_([stored_key(cluster, key), key])
        else:
            match = (t.c.pod_key == key) | t.c.pod_key.endswith("/" + key, autoescape=True)
            if key and all(ch in _POD_DIGIT for ch in key):  # a digest key with the pod packed
                match = match | t.c.pod_key.endswith("~" + _pack(key), autoescape=True)
        stmt = select(t.c.pod_key, t.c.pod_uid, t.c.cluster, t.c.node).where(match)
        if now is not None:
            stmt = stmt.where(t.c.expires_ts > now)
        rows = conn.execute(stmt).all()
        return [r for r in rows if _name(r) == key and (cluster is None or r.cluster == cluster)]

    def release(self, key: str, cluster: str | None = None) -> bool:
        """Drop pod ``key``'s hold (``namespace/name``, or a :func:`job_key`): in ``cluster``, or
        in every cluster when ``None``; rows of either key form (see :func:`pod_name`).

        Returns:
            True when there was one.
        """
        _checked_key(key)
        t = reservations_table
        with _bad_input_is_422(), self.db.write() as conn:
            gone = [r.pod_key for r in self._rows_of(conn, key, cluster, None)]
            n = conn.execute(delete(t).where(t.c.pod_key.in_(gone))).rowcount if gone else 0
        self._cached = None
        return bool(n)

    def _held_rows(self, snapshot: FleetSnapshot, now: float) -> list[Any]:
        """The rows that hold capacity under ``snapshot`` at ``now`` (s), as :meth:`view` selects
        and filters them (:meth:`_live`), the soonest to expire first."""
        t = reservations_table
        with self.db.read() as conn:
            rows = conn.execute(select(t)).all()  # expired too: one the snapshot keeps holds
        live = self._live(rows, snapshot, now=now)
        return sorted(live, key=lambda r: (r.expires_ts, r.pod_key))

    def count(self, snapshot: FleetSnapshot | None = None) -> int:
        """Live holds now: ``fleetmind_scheduler_holds``. With ``snapshot``, those the placers
        count under it (:meth:`view`: a hold whose pod the snapshot shows, or whose bound grace
        passed, ends); without, every row not expired."""
        now = self.clock()
        if snapshot is not None:
            return len(self._held_rows(snapshot, now))
        t = reservations_table
        with self.db.read() as conn:
            q = select(func.count()).select_from(t).where(t.c.expires_ts > now)
            return int(conn.execute(q).scalar_one())

    def listing(
        self, limit: int, snapshot: FleetSnapshot | None = None
    ) -> tuple[list[dict[str, Any]], int]:
        """At most ``limit`` live holds, the soonest to expire first, for
        ``GET /api/v1/scheduler/holds``, and how many are live in all: with ``snapshot``, the
        holds the placers count under it (as :meth:`count`). Each: ``pod`` (the pod's
        ``namespace/name``, or a ``reserve=true`` job's :func:`job_key`), ``uid``, ``cluster``,
        ``node``, ``gpus`` (indices), ``gpu_milli`` (per GPU), ``cpu_milli``, ``memory_mib``,
        ``bound`` (kube-scheduler reported the binding; the hold waits for telemetry to show the
        pod), ``expires_at`` (Unix seconds) and ``seconds_left``."""
        t = reservations_table
        now = self.clock()
        if snapshot is not None:
            held = self._held_rows(snapshot, now)
            total, rs = len(held), held[:limit]
        else:
            with self.db.read() as conn:
                live = t.c.expires_ts > now
                q = select(func.count()).select_from(t).where(live)
                total = int(conn.execute(q).scalar_one())
                rs = conn.execute(
                    select(t).where(live).order_by(t.c.expires_ts, t.c.pod_key).limit(limit)
                ).all()
        out = [
            {
                "pod": _name(r),
                "uid": r.pod_uid,
                "cluster": r.cluster,
                "node": r.node,
                "gpus": list(r.gpus or []),
                "gpu_milli": int(r.gpu_milli),
                "cpu_milli": int(r.cpu_milli),
                "memory_mib": int(r.memory_mib),
                "bound": r.bound_ts is not None,
                "expires_at": float(r.expires_ts),
                "seconds_left": round(max(0.0, r.expires_ts - now), 1),
            }
            for r in rs
        ]
        return out, total

    def rows(self) -> list[dict[str, Any]]:
        """Live holds (not expired), oldest first. ``pod_key`` is the caller's key (the pod's
        ``namespace/name`` or the job's key, :func:`pod_name`); ``cluster`` says whose pod."""
        t = reservations_table
        with self.db.read() as conn:
            rs = conn.execute(
                select(t).where(t.c.expires_ts > self.clock()).order_by(t.c.created_ts)
            ).all()
        return [{**r._mapping, "pod_key": _name(r)} for r in rs]

    def view(
        self,
        snapshot: FleetSnapshot | None = None,
        exclude: str | None = None,
        outranks: tuple[str, int] | None = None,
    ) -> Reservations:
        """Held capacity now, as the placers read it.

        Args:
            snapshot: telemetry in use: a bound hold ends once the snapshot was collected
                ``bound_grace_s`` after the binding; any hold ends once the snapshot lists its pod
                on the held node (by name, and by uid where that node's telemetry has uids), or on
                any node of the hold's cluster by its uid;
                except a GPU hold whose pod the snapshot lists on the held node without placing
                its GPU use (:func:`kept_by`), which stays, past its TTL too, and whose deadline
                this renews (one TTL ahead, once under half a TTL is left).
            exclude: a pod key (``namespace/name``) or job key whose own hold is left out (a
                retried pod must not block itself); in every cluster, as the caller does not know
                which one it is deciding in: a decision's candidate nodes are all of one cluster
                (the scheduler's), so another cluster's hold of that name changes nothing there.
            outranks: ``(node, priority)`` of a pod kube-scheduler nominated to ``node`` after
                preempting there (``status.nominatedNodeName``, ``spec.priority``): the holds on
                that node of pods of lower priority whose request kube-scheduler counts are left
                out (:func:`_outranked`) where the node carries no use kube-scheduler does not
                count (:func:`_uncounted`); give it only for such a pod itself.
        """
        now = self.clock()
        t = reservations_table
        with self.db.read() as conn:
            # with a snapshot, expired rows too: one it keeps (kept_by) holds past its TTL
            stmt = select(t) if snapshot is not None else select(t).where(t.c.expires_ts > now)
            rows = conn.execute(stmt).all()
        live = self._live(rows, snapshot, exclude, now, outranks)
        self._renew(rows, snapshot, now)
        return _view(live, snapshot)

    def _live(
        self,
        rows: list[Any],
        snapshot: FleetSnapshot | None,
        exclude: str | None = None,
        now: float | None = None,
        outranks: tuple[str, int] | None = None,
    ) -> list[Any]:
        """The rows that still hold capacity under ``snapshot`` (see :meth:`view`); rows expired
        at ``now`` (s) count only where the snapshot keeps them (:func:`kept_by`); none that
        ``outranks`` leaves out (:func:`_outranked`), unless its node may carry use
        kube-scheduler does not count (:func:`_uncounted`)."""
        kept = kept_by(rows, snapshot)
        placed: dict[tuple[str, str, str], frozenset[str]] = {}  # -> that node's listed uids
        running: set[tuple[str, str]] = set()
        named: set[tuple[str, str]] = set()  # by name, on nodes whose telemetry has no uids
        if snapshot is not None and rows:
            # intersect per node: rows are few, pods many
            keys = {_name(r) for r in rows}
            uids = {r.pod_uid for r in rows if r.pod_uid}
            for n in snapshot.nodes:
                placed.update(((n.cluster, n.name, p), n.pod_uids) for p in n.pods & keys)
                running.update((n.cluster, u) for u in n.pod_uids & uids)
                if n.pods and not n.pod_uids:
                    # a kube-state-metrics series without ``uid`` (relabelled or federated away):
                    # the name is all there is, as before uids were read
                    named.update((n.cluster, p) for p in n.pods & keys)
        live = []
        for r in rows:
            name = _name(r)
            if name == exclude:
                continue
            if r.pod_key in kept:
                live.append(r)  # the pod's only GPU assignment while telemetry lists it there
                continue
            if now is not None and r.expires_ts <= now:
                continue
            listed = placed.get((r.cluster, r.node, name))
            if listed is not None and (not r.pod_uid or not listed or r.pod_uid in listed):
                # running on the held node: its usage is in the snapshot. Where the node's
                # telemetry has uids and none is the hold's, that name is an earlier pod (a
                # StatefulSet's web-0 deleted and created again, still scraped): it ends nothing
                continue
            if r.pod_uid and (r.cluster, r.pod_uid) in running:
                # this very pod runs (on the held node or another one, where the held capacity was
                # never taken): the hold has nothing left to do. A name on another node may be an
                # earlier pod of that name, deleted but still scraped: it ends nothing.
                continue
            if (r.cluster, name) in named:
                continue  # bound elsewhere, as far as uid-less telemetry can tell
            if (
                r.bound_ts is not None
                and snapshot is not None
                and snapshot.collected_ts >= r.bound_ts + self.bound_grace_s
            ):
                continue
            live.append(r)
        if outranks is not None and not _uncounted(live, snapshot, outranks[0]):
            live = [r for r in live if not _outranked(r, outranks)]
        return live

    def _current(self) -> Reservations:
        """The holds view, reread once it is older than ``cache_s`` seconds by ``clock`` or by
        :func:`time.monotonic` (a wall clock stepped back must not keep an old view, which misses
        other replicas' holds, for as long as the step). The holds' own expiry stays on
        ``clock``: the rows are shared and compared in the database."""
        now, mono = self.clock(), time.monotonic()
        cached = self._cached
        if cached is not None and max(now - cached[0], mono - cached[1]) <= self.cache_s:
            return cached[2]
        with self._cache_lock:
            view = self.view()
            self._cached = (now, mono, view)
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
