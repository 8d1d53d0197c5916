"""Prometheus metrics of the service (prometheus-client), on a per-app registry.

| metric | type | labels |
| --- | --- | --- |
| ``fleetmind_http_request_duration_seconds`` | histogram | ``method``, ``route`` (template), ``status`` |
| ``fleetmind_alerts_ingested_total`` | counter | ``status`` (firing, resolved) |
| ``fleetmind_alerts_truncated_total`` | counter | - (alerts Alertmanager reported left out, ``truncatedAlerts``) |
| ``fleetmind_alerts_rejected_total`` | counter | - (invalid alerts left out of an otherwise stored webhook) |
| ``fleetmind_alerts_unmapped_total`` | counter | ``reason`` (no_cluster, unknown_cluster, no_match: alerts grouped that matched no graph node, :func:`fleetmind.serving.health.unmapped_reason`) |
| ``fleetmind_http_bodies_too_large_total`` | counter | ``route`` (``/api/v1/alerts``, ``other``: requests refused with 413 for their body size) |
| ``fleetmind_open_incidents`` | gauge | - (exported by the process that leads the incident worker; 0 in the others) |
| ``fleetmind_alerts_grouped_total`` | counter | - (pending alerts the incident worker has grouped) |
| ``fleetmind_incident_grouping_lag_seconds`` | gauge | - (age of the oldest ungrouped alert, read at every worker loop; 0 when none is pending) |
| ``fleetmind_model_info`` | gauge (1) | ``kind``, ``method``, ``version``, ``fallback`` |
| ``fleetmind_model_loads_total`` | counter | ``kind``, ``result`` (success, failure) |
| ``fleetmind_rca_duration_seconds`` | histogram | ``method`` |
| ``fleetmind_placements_total`` | counter | ``policy``, ``result`` (placed, infeasible; the extender's paths also cpu_only, passthrough: ``placed`` counts GPU pods only there), ``path`` (placements, filter, prioritize: the placement route or the kube-scheduler extender's) |
| ``fleetmind_ready`` | gauge | - (1 ready, 0 not: the verdict of the last ``/readyz`` answer, or of a check at the scrape when no ``/readyz`` was answered for :data:`READY_STALE_S`) |
| ``fleetmind_tls_handshake_failures_total`` | counter | - (TLS handshakes refused: a client certificate the scheduler CA did not sign or that expired, a client that does not trust the server's, plain HTTP to the HTTPS port; :mod:`fleetmind.serving.tls`) |

``fleetmind_model_loads_total`` is the series the ``ModelWeightLoadFailures`` rule in
``deploy/fleetmind-rules.yml`` watches, and ``fleetmind_incident_grouping_lag_seconds`` the
``FleetMindIncidentGroupingLag`` rule's. Its four series (:data:`MODEL_KINDS` x
:data:`LOAD_RESULTS`) exist at 0 from the start: a series born at 1 on its first failure shows
``rate()`` no increase, so the rule would never see it (Prometheus, "Instrumentation: Avoid
missing metrics"). So do the other labelled counters whose label values are known: the
``status`` series of ``fleetmind_alerts_ingested_total`` (:data:`ALERT_STATUSES`, so the
dashboard's ingestion rate shows the first resolved alerts), the ``reason`` series of
``fleetmind_alerts_unmapped_total``, the ``route`` series of
``fleetmind_http_bodies_too_large_total``, the ``fleetmind_placements_total`` series of the
served placement policy (:data:`PLACEMENT_RESULTS`) and the ``fleetmind_rca_duration_seconds``
series of the served ranking method, both created as they are loaded (those of the policy and
method served before a reload stay: requests still answering with the old models count on them).
The HTTP series (``route`` x
``status``) are open-ended and born at their first request.

**Several worker processes** (``fleetmind serve --workers N``): the CLI points
``PROMETHEUS_MULTIPROC_DIR`` at an empty directory before uvicorn starts the workers
(:func:`prepare_multiprocess_dir`), so prometheus-client keeps every value in a per-process file
there, and ``/metrics`` answers the files of all workers merged (client_python, "Multiprocess
Mode"): counters and histograms summed (an exited worker's counts stay in the total), the gauges
the maximum over live workers (``livemax``). Workers that exited are found at every scrape and
their gauge files dropped (:func:`mark_dead_workers`; uvicorn's supervisor has no hook to call
``mark_process_dead``). A run killed outright leaves its directory; the next start removes it
when that is safe to judge (:func:`sweep_stale_multiprocess_dirs`). ``fleetmind_ready`` is
``livemostrecent``: the verdict most recently given by any live worker, whichever worker answered
(``livemin`` would read a worker that has not yet been asked as not ready, its gauge being 0 from
creation; ``livemax`` would hide a worker whose database fails while another's last verdict was
1). Collectors that read objects
of their own process (``fleetmind_cluster_health``, ``fleetmind_fleet_skew``) live on
:attr:`Metrics.process_registry` and are answered by the worker that serves the scrape. Without the variable (one process, the
default, and the tests) everything is on one private registry. Those files are written through
``mmap``, where a full disk is a SIGBUS: the start checks the directory's room
(:data:`BYTES_PER_WORKER`) and each worker reserves the files' blocks before they are mapped
(:class:`ReservedMmapedDict`), so a disk that fills later stops that worker's metrics, not it.
"""

from __future__ import annotations

import contextlib
import errno
import faulthandler
import logging
import os
import re
import shutil
import stat
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import Future
from typing import Any

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)
from prometheus_client import mmap_dict as prom_mmap_dict
from prometheus_client import values as prom_values
from prometheus_client.mmap_dict import MmapedDict
from prometheus_client.multiprocess import MultiProcessCollector, mark_process_dead

from fleetmind.data.errors import ConfigError
from fleetmind.serving.health import UNMAPPED_REASONS, unmapped_reason

log = logging.getLogger("fleetmind.serving")

LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
"""Upper bounds (s) of the request and RCA latency histograms. 5.0 is kube-scheduler's extender
``httpTimeout`` in deploy/kube-scheduler-config.yaml: the ``FleetMindExtenderSlow`` rule counts the
extender calls above it, which kube-scheduler gave up on."""
MODEL_KINDS = ("rca", "placement")
"""The ``kind`` label of the model metrics (:class:`fleetmind.serving.registry.ModelRegistry`'s)."""
LOAD_RESULTS = ("success", "failure")
"""The ``result`` label of ``fleetmind_model_loads_total``."""
ALERT_STATUSES = ("firing", "resolved")
"""The ``status`` label of ``fleetmind_alerts_ingested_total`` (an Alertmanager alert's status)."""
PLACEMENT_RESULTS = {
    "placements": ("placed", "infeasible"),
    "filter": ("placed", "infeasible", "cpu_only", "passthrough"),
    "prioritize": ("placed", "infeasible", "cpu_only", "passthrough"),
}
"""``path`` -> its ``result`` labels of ``fleetmind_placements_total`` (the placement route's, and
the kube-scheduler extender's: :func:`fleetmind.serving.scheduler.router._outcome`)."""
HOLDS_COUNT_S = 2.0
"""Seconds a scrape waits for the scheduler holds count (``fleetmind_scheduler_holds``, a query of
the database), the same bound as the scrape's readiness check
(:data:`fleetmind.serving.routers.health.READY_CHECK_S`): a database that no longer answers
leaves the sample out instead of hanging ``/metrics``."""
READY_STALE_S = 30.0
"""Seconds after the last readiness verdict (``/readyz``) past which a ``/metrics`` scrape checks
readiness itself before answering (:func:`fleetmind.serving.routers.health.metrics`): where no
probe calls ``/readyz`` (Docker's healthcheck calls ``/healthz``), ``fleetmind_ready`` is still
the verdict of the scrape. The Kubernetes readiness probe (every 5 s) keeps it fresher."""
MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"
"""prometheus-client's multiprocess switch, read when it is imported: set before workers start."""
_LIVE_GAUGE_FILE = re.compile(r"gauge_live[a-z]+_(\d+)\.db")


DIR_PREFIX = "fleetmind-metrics-"
"""How the name of every directory :func:`prepare_multiprocess_dir` makes begins."""
_OWNED_DIR = re.compile(re.escape(DIR_PREFIX) + r"([0-9a-f]{16})-(\d+)-[^/]+")
SWEEP_MIN_AGE_S = 60.0
"""Seconds since a directory last changed before :func:`sweep_stale_multiprocess_dirs` may remove
it."""
BYTES_PER_WORKER = 1 << 20
"""Bytes of free space :func:`prepare_multiprocess_dir` requires in the metrics directory per
worker. Each worker keeps one file per metric type and gauge mode there (``counter_``,
``histogram_``, ``gauge_livemax_``, ``gauge_livemostrecent_<pid>.db``), each created at
prometheus-client's ``_INITIAL_MMAP_SIZE`` (64 KiB) and doubled as series appear; the
request-latency histogram's file is the one that grows, by one entry per bucket (14 with
``+Inf``) plus ``_sum`` and ``_count`` for each method/route/status series."""
_FULL = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG})
"""The ``posix_fallocate`` errors that mean no room (full disk, quota, file size limit). Any other
(``EOPNOTSUPP``, ``ENOSYS``, ``EINVAL``, ...) means the file system cannot reserve blocks: nothing
is reserved and the file is used as before, never taken for a full disk. Where the file system
has no ``fallocate`` (NFS, FUSE, older ZFS) glibc emulates it by writing into every block, and
answers ``EBADF`` on an ``O_APPEND`` descriptor: reservations therefore use descriptors without
it."""


def host_tag() -> str | None:
    """16 hex digits naming this boot of this host and this process's PID namespace (a digest of
    ``/proc/sys/kernel/random/boot_id`` and the ``/proc/self/ns/pid`` link), or ``None`` where
    they cannot be read (not Linux, no ``/proc``, or a ``/proc`` of another PID namespace). Two
    processes running at the same time with the same tag see the same process IDs. The kernel
    reuses a freed namespace's number (a container restarted, its new init again PID 1, gets the
    same tag): a tag recorded by a process that is gone then names a namespace that is gone, whose
    process IDs are all gone; another container running now has a number of its own."""
    import hashlib

    try:
        with open("/proc/sys/kernel/random/boot_id", encoding="ascii") as f:
            boot_id = f.read().strip()
        namespace = os.readlink("/proc/self/ns/pid")
        if int(os.readlink("/proc/self")) != os.getpid():  # /proc of another PID namespace
            return None
    except (OSError, ValueError):
        return None
    if not boot_id:
        return None
    return hashlib.sha256(f"{boot_id}\0{namespace}".encode()).hexdigest()[:16]


def _stale(path: str, tag: str, now: float, min_age_s: float) -> bool:
    """Whether ``path`` is a directory of :func:`prepare_multiprocess_dir` made under ``tag``, owned
    by this user, unchanged for ``min_age_s`` seconds, whose creating process and every process
    with a live gauge file in it are gone.

    This process's own ID counts as gone: the sweep runs before this process makes its directory,
    so a directory naming this ID was made by an earlier process that had it (a restarted
    container's PID 1, in a namespace whose number the kernel reused); only the directory this
    process uses now (:data:`MULTIPROC_ENV`) is never stale."""
    m = _OWNED_DIR.fullmatch(os.path.basename(path))
    if m is None or m.group(1) != tag or _in_use(path):
        return False
    try:
        st = os.lstat(path)
        if not stat.S_ISDIR(st.st_mode) or now - st.st_mtime < min_age_s:
            return False
        if hasattr(os, "getuid") and st.st_uid != os.getuid():
            return False
        pids = {int(m.group(2))}
        for name in os.listdir(path):
            live = _LIVE_GAUGE_FILE.fullmatch(name)
            if live:
                pids.add(int(live.group(1)))
    except OSError:
        return False
    return not any(pid != os.getpid() and _alive(pid) for pid in pids)


def _in_use(path: str) -> bool:
    """Whether ``path`` is the directory :data:`MULTIPROC_ENV` points this process at."""
    current = os.environ.get(MULTIPROC_ENV)
    return bool(current) and os.path.realpath(current) == os.path.realpath(path)


def sweep_stale_multiprocess_dirs(
    parent: str, min_age_s: float = SWEEP_MIN_AGE_S, now: float | None = None
) -> list[str]:
    """Remove the directories of :func:`prepare_multiprocess_dir` in ``parent`` that runs ended
    without their cleanup left behind (a SIGKILL, the OOM killer); returns the paths removed.

    Best effort, and only what is safe to judge: a directory whose name carries this host's
    :func:`host_tag` (same boot; this PID namespace, or a dead one whose number it reuses, whose
    process IDs are then all gone),
    owned by this user, unchanged for ``min_age_s`` seconds (``now``: the time, seconds since the
    epoch; default the clock), whose creating process and every process named by a live gauge file
    (``gauge_live*_<pid>.db``) are gone (this process's own ID included: see :func:`_stale`). A
    directory another running container, another host or boot made (shared volume), or one of an
    older release (no tag), is left alone; with no tag here nothing is swept.
    """
    tag = host_tag()
    if tag is None:
        return []
    now = time.time() if now is None else now
    try:
        names = os.listdir(parent)
    except OSError:
        return []
    removed = []
    for name in sorted(names):
        path = os.path.join(parent, name)
        if name.startswith(DIR_PREFIX) and _stale(path, tag, now, min_age_s):
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path)
    return removed


def prepare_multiprocess_dir(workers: int = 1) -> tuple[str, str | None]:
    """Point :data:`MULTIPROC_ENV` at a new, empty directory for the workers about to start.

    A directory of this run's own: inside the one the operator set (which may be shared with
    other instances, whose live files must not be removed or merged into this one's), else in
    the system's temporary directory. Its name carries :func:`host_tag` and this process's ID, so
    that a later start can tell it was left by a run that is gone: the directories such runs left
    there are removed first (:func:`sweep_stale_multiprocess_dirs`). Returns the directory and the
    variable's value before (:func:`cleanup_multiprocess_dir` removes the one and restores the
    other).

    The directory must hold ``workers`` x :data:`BYTES_PER_WORKER` bytes (:func:`check_space`):
    the workers' metrics must not start on a full disk.

    Raises:
        ConfigError: one line naming the folder, its free space and the remedy, when the
            directory cannot be made or lacks that room (the variable is left as it was).
    """
    given = os.environ.get(MULTIPROC_ENV) or None
    parent = given or tempfile.gettempdir()
    try:
        if given:
            os.makedirs(given, exist_ok=True)
        sweep_stale_multiprocess_dirs(parent)
        tag = host_tag()
        prefix = f"{DIR_PREFIX}{tag}-{os.getpid()}-" if tag else DIR_PREFIX
        path = tempfile.mkdtemp(prefix=prefix, dir=given)
    except OSError as err:
        raise ConfigError(_space_message(parent, given, workers, err)) from None
    try:
        check_space(path, workers * BYTES_PER_WORKER)
    except OSError as err:
        shutil.rmtree(path, ignore_errors=True)
        raise ConfigError(_space_message(parent, given, workers, err)) from None
    os.environ[MULTIPROC_ENV] = path
    return path, given


def check_space(path: str, size: int) -> None:
    """Reserve ``size`` bytes of real blocks in the directory ``path`` (``posix_fallocate`` of a
    probe file, then removed), to know before the workers start that their metrics files fit.

    Why real blocks: prometheus-client grows each file with ``truncate`` (a sparse file, which
    succeeds on a full disk) and writes through ``mmap``; a full file system then answers the
    write with SIGBUS, killing the worker without a line, and uvicorn restarts it into the same
    death. Nothing is checked where the file system cannot reserve (any error but :data:`_FULL`)
    or Python has no ``posix_fallocate`` (macOS).

    Raises:
        OSError: no room (``ENOSPC``, ``EDQUOT``), or the probe could not be made.
    """
    if not hasattr(os, "posix_fallocate") or size <= 0:
        return
    probe = os.path.join(path, ".space-probe")  # not *.db: never read as a metrics file
    fd = os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        _reserve(fd, size)
    finally:
        os.close(fd)
        os.unlink(probe)


def _space_message(parent: str, given: str | None, workers: int, err: OSError) -> str:
    """The one line :func:`prepare_multiprocess_dir` stops on: the folder, its free space (MiB)
    and what to do."""
    try:
        st = os.statvfs(parent)
        free = f"{st.f_bavail * st.f_frsize / 2**20:.1f} MiB free"
    except (OSError, AttributeError):
        free = "free space unknown"
    need = workers * BYTES_PER_WORKER / 2**20
    where = f"{MULTIPROC_ENV}={parent}" if given else f"the temporary folder {parent}"
    remedy = (
        f"point {MULTIPROC_ENV} at a writable folder with more room, or unset it and run "
        "--workers 1"
        if given
        else f"set {MULTIPROC_ENV} to a writable folder with more room, or run --workers 1"
    )
    return (
        f"cannot keep the metrics of {workers} worker(s) in {where} "
        f"({err.strerror or err}; {free}, {need:.0f} MiB needed): {remedy}"
    )


def _reserve(fd: int, size: int) -> None:
    """``posix_fallocate`` the first ``size`` bytes of the file ``fd`` (a descriptor without
    ``O_APPEND``; its size grows to at least ``size``); nothing where the file system cannot
    (any error but :data:`_FULL`) or Python has no ``posix_fallocate`` (macOS).

    Raises:
        OSError: no room (:data:`_FULL`: ``ENOSPC``, ``EDQUOT``, ``EFBIG``).
    """
    if not hasattr(os, "posix_fallocate"):
        return
    try:
        os.posix_fallocate(fd, 0, size)
    except OSError as err:
        if err.errno in _FULL:
            raise


def cleanup_multiprocess_dir(path: str, previous: str | None) -> None:
    """Undo :func:`prepare_multiprocess_dir` once the workers are gone."""
    shutil.rmtree(path, ignore_errors=True)
    if previous is None:
        os.environ.pop(MULTIPROC_ENV, None)
    else:
        os.environ[MULTIPROC_ENV] = previous


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, another user's
        return True
    return True


def mark_dead_workers(path: str) -> list[int]:
    """``mark_process_dead`` for every process with ``live*`` gauge files in ``path`` that is gone.

    Their gauges then leave the merged values (client_python: "live" modes count only processes
    not marked dead); counters and histograms keep their files (the totals do not drop). Returns
    the pids marked.
    """
    dead = set()
    for name in os.listdir(path):
        m = _LIVE_GAUGE_FILE.fullmatch(name)
        if m and int(m.group(1)) != os.getpid() and not _alive(int(m.group(1))):
            dead.add(int(m.group(1)))
    for pid in sorted(dead):
        mark_process_dead(pid, path)
    return sorted(dead)


class _ReservingFile:
    """The file object of a :class:`ReservedMmapedDict`: every ``truncate`` (prometheus-client's
    way to grow the file before mapping it larger) first reserves the blocks (:func:`_reserve`),
    so that a full disk raises ``OSError`` here instead of SIGBUS at the write through the map.
    The library opens the file ``a+b`` (``O_APPEND``), on which glibc's ``fallocate`` emulation
    answers ``EBADF``; the flag is cleared here (the library writes only through the map and
    ``truncate``, which ``O_APPEND`` does not affect)."""

    def __init__(self, f: Any) -> None:
        self._file = f
        with contextlib.suppress(OSError, AttributeError, ImportError):
            import fcntl  # POSIX only

            flags = fcntl.fcntl(f.fileno(), fcntl.F_GETFL)
            fcntl.fcntl(f.fileno(), fcntl.F_SETFL, flags & ~os.O_APPEND)

    def truncate(self, size: int) -> int:
        _reserve(self._file.fileno(), size)
        return self._file.truncate(size)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._file, name)


class ReservedMmapedDict(MmapedDict):
    """prometheus-client's per-process metrics file (:class:`MmapedDict`) whose every byte is
    backed by reserved blocks before it is written through ``mmap``.

    The library creates the file sparse (``truncate`` to ``_INITIAL_MMAP_SIZE``, doubled to grow)
    and writes through the map: on a full file system that write is a SIGBUS that kills the
    worker without a line, and uvicorn restarts it into the same death while every request is
    refused. Here the file is reserved (``posix_fallocate``) before the library maps it and at
    every growth, so a full disk is an ``OSError``; the dict then leaves the file for process
    memory (:meth:`_degrade`): the worker keeps serving (alert intake matters more than its
    metrics); only this file freezes (a counter or histogram file stays at its last values, a
    ``live`` gauge file is removed: a frozen gauge would be exported as current), the worker's
    other files keep updating, and one warning per kind of file says so.
    Installed by :func:`install_mmap_guard`; ``tests/test_metrics_disk_full.py`` pins the
    library internals this relies on (``_INITIAL_MMAP_SIZE``, ``_f``, ``_m``, ``_positions``,
    ``_init_value``, ``values.MmapedDict``).
    """

    def __init__(self, filename: str, read_mode: bool = False) -> None:
        self._memory: dict[str, tuple[float, float]] | None = None
        if not read_mode:
            try:
                self._reserve_file(filename)
            except OSError as err:
                self._f, self._m, self._fname, self._positions = None, None, filename, {}
                self._degrade(err)
                return
        super().__init__(filename, read_mode)
        if not read_mode:
            self._f = _ReservingFile(self._f)

    @staticmethod
    def _reserve_file(filename: str) -> None:
        """Reserve what the library maps first: the whole file, at least ``_INITIAL_MMAP_SIZE``
        bytes (the library then finds it non-empty and maps it as it is). A file this call
        created is removed when that fails: an empty ``.db`` file breaks every scrape. The
        descriptor has no ``O_APPEND`` (see :data:`_FULL`)."""
        fd = os.open(filename, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            size = os.fstat(fd).st_size
            try:
                _reserve(fd, max(size, prom_mmap_dict._INITIAL_MMAP_SIZE))
            except OSError:
                if size == 0:
                    os.unlink(filename)
                raise
        finally:
            os.close(fd)

    def _degrade(self, err: OSError) -> dict[str, tuple[float, float]]:
        """Move this dict to process memory after ``err`` (its values so far kept), close the
        file, remove it if it is a ``live`` gauge's, and warn once per kind of file; returns the
        memory (key -> value, timestamp)."""
        memory: dict[str, tuple[float, float]] = {}
        if self._m is not None:
            for key in self._positions:
                memory[key] = super().read_value(key)
            super().close()
        self._memory = memory
        self._f = self._m = None
        if _LIVE_GAUGE_FILE.fullmatch(os.path.basename(self._fname)):
            with contextlib.suppress(OSError):
                os.unlink(self._fname)
        _warn_degraded(self._fname, err)
        return memory

    def _init_value(self, key: str) -> None:
        memory = self._memory
        if memory is None:
            try:
                super()._init_value(key)
                return
            except OSError as err:  # the growth could not be reserved: nothing was written
                memory = self._degrade(err)
        memory.setdefault(key, (0.0, 0.0))

    def read_value(self, key: str) -> tuple[float, float]:
        if self._memory is None and key not in self._positions:
            self._init_value(key)
        if self._memory is not None:
            return self._memory.setdefault(key, (0.0, 0.0))
        return super().read_value(key)

    def write_value(self, key: str, value: float, timestamp: float) -> None:
        if self._memory is None and key not in self._positions:
            self._init_value(key)
        if self._memory is not None:
            self._memory[key] = (value, timestamp)
            return
        super().write_value(key, value, timestamp)

    def read_all_values(self) -> Any:
        if self._memory is None:
            return super().read_all_values()
        return ((k, v, ts) for k, (v, ts) in self._memory.items())

    def close(self) -> None:
        if self._memory is None:
            super().close()

    @property
    def degraded(self) -> bool:
        """Whether the values are kept in process memory (no longer updated in the file)."""
        return self._memory is not None


_warned_degraded: set[str] = set()
"""The kinds of file (``counter``, ``histogram``, ``gauge_livemax``, ...) already warned about."""


def _warn_degraded(filename: str, err: OSError) -> None:
    """One warning per kind of file (its name less ``_<pid>.db``) and process, naming what froze:
    only that file stops; the worker's other files keep updating."""
    name = os.path.basename(filename)
    kind = name.rsplit("_", 1)[0] if "_" in name else name
    if kind in _warned_degraded:
        return
    _warned_degraded.add(kind)
    gauge = _LIVE_GAUGE_FILE.fullmatch(name) is not None
    shown = "dropped from /metrics" if gauge else "kept at their last values in /metrics"
    log.warning(
        "%s metrics of worker pid %d no longer updated: cannot grow %s (%s); they are %s, the "
        "worker keeps serving and its other metrics keep updating; free space there (or point "
        "%s at a folder with more room) and restart the service",
        kind,
        os.getpid(),
        filename,
        err.strerror or err,
        shown,
        MULTIPROC_ENV,
    )


def install_mmap_guard() -> None:
    """Have prometheus-client's multiprocess values use :class:`ReservedMmapedDict` in this
    process (a worker: before its first metric), and print a trace on a fatal signal
    (``faulthandler``): where the file system cannot reserve blocks (see :data:`_FULL`) a full
    disk can still SIGBUS a worker, which then at least says where. Files already open keep
    their class, so call it before any metric is made."""
    # values.MultiProcessValue looks the class up at every new file
    prom_values.MmapedDict = ReservedMmapedDict  # type: ignore[misc]
    if not faulthandler.is_enabled():
        faulthandler.enable()


class _HoldsCollector:
    """``fleetmind_scheduler_holds``: :attr:`Metrics.holds_count` at each scrape (no sample before
    it is set, or when the count fails or takes over :data:`HOLDS_COUNT_S`).

    The count runs in a thread of its own, at most one at a time: a scrape that finds one running
    (concurrent scrapes, or a database that hangs) waits for it only until :data:`HOLDS_COUNT_S`
    after it started, so a hung database keeps one thread, not one per scrape. A count still
    running :data:`READY_STALE_S` after it started (a connection that never returns) is given up
    and the next scrape counts again, with at most :attr:`ABANDONED_COUNTS_MAX` given-up counts
    running at once (beyond that the sample stays out)."""

    ABANDONED_COUNTS_MAX = 2
    """Given-up counts whose threads may stay stuck at once."""

    def __init__(self, metrics: Metrics) -> None:
        self.metrics = metrics
        self._lock = threading.Lock()
        self._running: tuple[Future[int], float] | None = None  # the count, its monotonic start
        self._abandoned: list[Future[int]] = []  # given-up counts, maybe still running

    def _give_up(self, running: tuple[Future[int], float]) -> bool:
        """Leave ``running`` (past :data:`READY_STALE_S`) to its thread so that a new count can
        start; ``False`` where :attr:`ABANDONED_COUNTS_MAX` given-up counts still run."""
        self._abandoned = [f for f in self._abandoned if not f.done()]
        if len(self._abandoned) >= self.ABANDONED_COUNTS_MAX:
            return False
        self._abandoned.append(running[0])
        log.warning(
            "fleetmind_scheduler_holds: the holds count started %.0f s ago has no answer yet; "
            "left running (%d such counts now) and a new count started",
            time.monotonic() - running[1],
            len(self._abandoned),
        )
        return True

    def _start(self, count: Callable[[], int]) -> tuple[Future[int], float, bool]:
        """The count in flight, its start, and whether this call started it."""
        with self._lock:
            held = self._running
            if held is not None and not held[0].done():
                if time.monotonic() - held[1] <= READY_STALE_S or not self._give_up(held):
                    return (*held, False)
            fut: Future[int] = Future()

            def run() -> None:
                try:
                    fut.set_result(count())
                except BaseException as err:  # handed to the scrape that waits
                    fut.set_exception(err)

            self._running = (fut, time.monotonic())
            threading.Thread(target=run, name="fleetmind-holds-count", daemon=True).start()
            return (*self._running, True)

    def value(self) -> int | None:
        """The holds now, or ``None`` (no counter set, the count failed or is still running)."""
        count = self.metrics.holds_count
        if count is None:
            return None
        fut, started, mine = self._start(count)
        try:
            return fut.result(timeout=max(0.0, started + HOLDS_COUNT_S - time.monotonic()))
        except TimeoutError:
            if mine:  # one line per hang, not one per scrape
                log.warning(
                    "fleetmind_scheduler_holds: the holds count (a database query) took over "
                    "%.1f s; left out of /metrics until it answers",
                    HOLDS_COUNT_S,
                )
            return None
        except Exception:  # a database error must not fail the scrape
            log.warning("fleetmind_scheduler_holds: counting the holds failed", exc_info=True)
            return None

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import GaugeMetricFamily

        value = self.value()
        if value is not None:
            yield GaugeMetricFamily(
                "fleetmind_scheduler_holds",
                "live holds of the kube-scheduler extender and reserve=true placements (GPUs, "
                "CPU, memory kept for pods FleetMind placed, not yet seen bound): GET "
                "/api/v1/scheduler/holds lists them",
                value=value,
            )


_TLS_FAILURES: list[Counter] = []
"""The ``fleetmind_tls_handshake_failures_total`` counter of the latest :class:`Metrics` made in
this process (a TLS handshake happens before any request, so it has no app to find it through)."""


def count_tls_handshake_failure() -> None:
    """Count one refused TLS handshake (:class:`fleetmind.serving.tls.HandshakeCountingSSLObject`)
    in the latest :class:`Metrics`' counter; nothing before one exists."""
    if _TLS_FAILURES:
        _TLS_FAILURES[-1].inc()


class Metrics:
    """The service's collectors, registered on their own :class:`CollectorRegistry`.

    With :data:`MULTIPROC_ENV` set, the counters, histograms and gauges write their values to that
    directory and :meth:`render` merges every worker's; :attr:`process_registry` holds what only
    this process can answer. Without it, :attr:`process_registry` is :attr:`registry`.
    """

    def __init__(self) -> None:
        self.multiprocess_dir = os.environ.get(MULTIPROC_ENV) or None
        if self.multiprocess_dir:
            install_mmap_guard()
        self.registry = CollectorRegistry()
        self.process_registry = CollectorRegistry() if self.multiprocess_dir else self.registry
        self._model_labels: list[tuple[str, str, str, str]] = []
        r = self.registry
        self.request_latency = Histogram(
            "fleetmind_http_request_duration_seconds",
            "HTTP request latency by route template",
            ["method", "route", "status"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.alerts_ingested = Counter(
            "fleetmind_alerts_ingested",
            "alerts durably stored, once per delivery (an Alertmanager HA replica's or a retry's"
            " repeat of a stored alert counts again; status as delivered)",
            ["status"],
            registry=r,
        )
        for status in ALERT_STATUSES:  # at 0 from the start: rate() sees the first alerts
            self.alerts_ingested.labels(status)
        self.alerts_truncated = Counter(
            "fleetmind_alerts_truncated",
            "alerts Alertmanager left out of its notifications (truncatedAlerts)",
            registry=r,
        )
        self.alerts_rejected = Counter(
            "fleetmind_alerts_rejected",
            "invalid alerts left out of a webhook whose other alerts were stored",
            registry=r,
        )
        self.alerts_unmapped = Counter(
            "fleetmind_alerts_unmapped",
            "alerts grouped that matched no graph node, so their incident has no ranked cause "
            "(reason: no_cluster, unknown_cluster, no_match)",
            ["reason"],
            registry=r,
        )
        for reason in UNMAPPED_REASONS:  # at 0 from the start, as fleetmind_model_loads_total
            self.alerts_unmapped.labels(reason)
        self.bodies_too_large = Counter(
            "fleetmind_http_bodies_too_large",
            "requests refused with 413 for their body size (route: the webhook's path, or other)",
            ["route"],
            registry=r,
        )
        # gauges: the largest value of the live workers (only the leader exports open incidents;
        # the lag is read from the shared database by every worker; model_info is 1 or 0)
        self.open_incidents = Gauge(
            "fleetmind_open_incidents",
            "incidents now open",
            registry=r,
            multiprocess_mode="livemax",
        )
        self.alerts_grouped = Counter(
            "fleetmind_alerts_grouped", "pending alerts grouped into incidents", registry=r
        )
        self.grouping_lag = Gauge(
            "fleetmind_incident_grouping_lag_seconds",
            "seconds since the oldest ungrouped alert (or status change) was stored, read at every "
            "loop of the incident worker whether or not it succeeds (0 when none is pending)",
            registry=r,
            multiprocess_mode="livemax",
        )
        self.model_info = Gauge(
            "fleetmind_model_info",
            "served models (value 1)",
            ["kind", "method", "version", "fallback"],
            registry=r,
            multiprocess_mode="livemax",
        )
        self.model_loads = Counter(
            "fleetmind_model_loads", "model load attempts", ["kind", "result"], registry=r
        )
        for kind in MODEL_KINDS:  # at 0 before any load: rate() needs the 0 to see a failure
            for result in LOAD_RESULTS:
                self.model_loads.labels(kind, result)
        self.rca_latency = Histogram(
            "fleetmind_rca_duration_seconds",
            "time to rank one alert set",
            ["method"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.rca_batch_size = Histogram(
            "fleetmind_rca_batch_size",
            "synchronous RCA requests ranked together in one batch",
            buckets=(1, 2, 4, 8, 16, 32, 64),
            registry=r,
        )
        self.placements = Counter(
            "fleetmind_placements", "placement decisions", ["policy", "result", "path"], registry=r
        )
        self._add_reachability(r)

    def _add_reachability(self, r: CollectorRegistry) -> None:
        """``fleetmind_ready`` and ``fleetmind_tls_handshake_failures_total`` (the failures that
        leave no request behind: a pod out of its Service, a handshake refused), and
        ``fleetmind_scheduler_holds`` (read at each scrape)."""
        self.ready = Gauge(
            "fleetmind_ready",
            "1 ready, 0 not: the last readiness verdict (/readyz, or a check at the scrape when no "
            "/readyz was answered for 30 s)",
            registry=r,
            multiprocess_mode="livemostrecent",
        )
        self.ready_at: float | None = None
        """``time.monotonic()`` of this process's last :meth:`set_ready` (``None``: never)."""
        self.ready_check: tuple[Future[list[str]], float] | None = None
        """The readiness check last started (its problems, :mod:`fleetmind.serving.routers.health`)
        and its ``time.monotonic()`` start, kept so that ``/readyz`` and scrapes share it."""
        self.tls_handshake_failures = Counter(
            "fleetmind_tls_handshake_failures",
            "TLS handshakes refused before any request (a client certificate not signed by the "
            "scheduler CA or expired, a client not trusting the server certificate, plain HTTP)",
            registry=r,
        )
        _TLS_FAILURES[:] = [self.tls_handshake_failures]
        self.holds_count: Callable[[], int] | None = None
        """Live scheduler holds now (``fleetmind_scheduler_holds``), read from the shared database
        at each scrape by the worker answering it and judged against the last telemetry snapshot
        that worker read; set by :func:`fleetmind.serving.app.build_services` (no sample without
        it)."""
        self.process_registry.register(_HoldsCollector(self))

    def count_unmapped(self, graph: Any, labels: Mapping[str, Any]) -> str:
        """Count one alert (its ``labels``) that matched no node of ``graph`` (a
        :class:`fleetmind.data.graph.DependencyGraph`) in ``fleetmind_alerts_unmapped_total``;
        returns the reason (:func:`fleetmind.serving.health.unmapped_reason`). Called where an
        alert is grouped (the incident manager), once per alert."""
        reason = unmapped_reason(graph, labels)
        self.alerts_unmapped.labels(reason).inc()
        return reason

    def set_ready(self, ready: bool) -> None:
        """Export a readiness verdict (``fleetmind_ready`` 1 or 0) and note when it was given."""
        self.ready.set(1 if ready else 0)
        self.ready_at = time.monotonic()

    def ready_is_stale(self) -> bool:
        """Whether this process gave no verdict in the last :data:`READY_STALE_S` seconds."""
        return self.ready_at is None or time.monotonic() - self.ready_at > READY_STALE_S

    def on_model_load(self, kind: str, ok: bool) -> None:
        self.model_loads.labels(kind, "success" if ok else "failure").inc()

    def set_models(self, models: Any) -> None:
        """Expose the served model set (a :class:`fleetmind.serving.registry.ModelSet`).

        In multiprocess mode a series cannot be removed from the worker's file (client_python:
        ``clear`` is not implemented there): the models this worker no longer serves read 0.
        The placement policy's ``fleetmind_placements_total`` series and the ranking method's
        ``fleetmind_rca_duration_seconds`` series are created at 0 (:meth:`_precreate_served`).
        """
        labels = [
            (m.kind, m.method, m.version or "", "true" if m.fallback_reason else "false")
            for m in (models.rca, models.placement)
        ]
        if self.multiprocess_dir:
            for old in self._model_labels:
                if old not in labels:
                    self.model_info.labels(*old).set(0)
        else:
            self.model_info.clear()
        self._model_labels = labels
        for values in labels:
            self.model_info.labels(*values).set(1)
        self._precreate_served(models.placement.method, models.rca.method)

    def _precreate_served(self, policy: str, method: str) -> None:
        """Create the ``fleetmind_placements_total`` series of ``policy`` (:data:`PLACEMENT_RESULTS`)
        and the ``fleetmind_rca_duration_seconds`` series of ``method`` at 0, so that ``rate()``
        sees their first count. The series of a policy or method served before stay: requests
        still answering with the old models count on them after the reload, and removing a
        series between their ``labels()`` and ``inc()`` would lose that count (client_python's
        ``remove`` takes no part in the child's increment)."""
        for path, results in PLACEMENT_RESULTS.items():  # at 0 from the load on: see rate()
            for result in results:
                self.placements.labels(policy, result, path)
        self.rca_latency.labels(method)

    def render(self) -> tuple[bytes, str]:
        """The exposition text of ``/metrics`` and its content type."""
        if not self.multiprocess_dir:
            return generate_latest(self.registry), CONTENT_TYPE_LATEST
        mark_dead_workers(self.multiprocess_dir)
        merged = CollectorRegistry()
        MultiProcessCollector(merged, self.multiprocess_dir)
        body = generate_latest(merged) + generate_latest(self.process_registry)
        return body, CONTENT_TYPE_LATEST


HTTP_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})
"""Methods kept as the ``method`` label; any other verb is counted as ``other``."""


class MetricsMiddleware:
    """Pure ASGI middleware timing every HTTP request by route template."""

    def __init__(
        self, app: Any, metrics: Metrics, route_of: Callable[[Any, Any], Any] | None = None
    ) -> None:
        """``route_of(app, scope)``: the route of a request that routing never reached (refused
        by a middleware before it: 401, 403, 413, 415, ...); ``None``: such requests count as
        ``unmatched``."""
        self.app = app
        self.metrics = metrics
        self.route_of = route_of

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        status = {"code": 500}

        async def _send(message: Any) -> None:
            if message["type"] == "http.response.start":
                status["code"] = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, _send)
        finally:
            route = scope.get("route")
            if route is None and self.route_of is not None:
                route = self.route_of(scope.get("app"), scope)
            template = getattr(route, "path", None) or "unmatched"
            method = scope.get("method", "")
            if method not in HTTP_METHODS:  # a client-chosen verb must not create series
                method = "other"
            self.metrics.request_latency.labels(method, template, str(status["code"])).observe(
                time.perf_counter() - start
            )
