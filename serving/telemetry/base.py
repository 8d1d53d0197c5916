"""The telemetry interface and the fleet snapshot every source returns.

A snapshot lists nodes (hosts) with their GPUs. Placement needs, per GPU, how much is free in openb
units (``free_milli``, 0..1000 of one GPU); each source derives it from what it observes (the
simulator's bookkeeping, or used/total framebuffer memory for NVML and DCGM). The service adds its
own reservations on top (:class:`fleetmind.serving.scheduler.placement.Reservations`).
"""

from __future__ import annotations

import copy
import logging
import math
import re
import threading
import time
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from time import monotonic  # by name: tests replace it and ``base.time`` apart (clock steps)
from typing import TYPE_CHECKING, Any

from fleetmind.data.errors import ConfigError, DataError, NotAvailableError

if TYPE_CHECKING:
    from fleetmind.data.graph import DependencyGraph
    from fleetmind.serving.settings import Settings

log = logging.getLogger(__name__)

MIG_CHANGE = "paused-for-mig-change"
"""The value the GPU Operator's MIG manager gives node label ``nvidia.com/gpu.deploy.device-plugin``
(and the other ``nvidia.com/gpu.deploy.*`` labels) while it changes the node's MIG layout: it
stops the device plugin, GPU feature discovery and dcgm-exporter, applies the layout, then sets
the labels back to ``true`` (``maybe_set_paused`` in ``deployments/gpu-operator/reconfigure-mig.sh``
of NVIDIA/mig-parted). It does not cordon the node."""


@dataclass
class GpuState:
    """One GPU as observed. Units: percent, MiB, count; ``None`` where the source has no reading."""

    index: int
    model: str
    uuid: str | None = None
    util_pct: float | None = None
    mem_used_mib: float | None = None
    mem_total_mib: float | None = None
    xid_errors: float | None = None
    free_milli: int = 1000
    healthy: bool = True
    mig_parent: int | None = None
    """Physical GPU index when this is a MIG instance (``index`` is then ``100 (parent + 1) + GI``)."""
    missing: bool = False
    """A placeholder: the kubelet counts this GPU on the node but its exporter reports nothing
    (fallen off the bus, exporter down); always unhealthy with nothing free."""
    share_milli: int | None = None
    """Milli-GPUs that GPU-sharing pods placed on this GPU (annotations with ``gpu-index``; a MIG
    instance: its parent's) take, as telemetry counts them in ``free_milli``; ``None`` where none
    are or the source cannot tell. A kept share hold on this GPU adds only what ``free_milli`` does
    not already show (:mod:`fleetmind.serving.scheduler.reservations`)."""
    unallocatable: bool = False
    """Reported healthy by its exporter, but out of the node's allocatable ``nvidia.com/gpu``: the
    NVIDIA device plugin marked it unhealthy (for good, after some XIDs) or is not serving (its
    pod restarting or paused for a driver upgrade: allocatable 0), so Kubernetes will not allocate
    it while that lasts; shown unhealthy with nothing free
    (:func:`~fleetmind.serving.telemetry.prometheus.mark_unallocatable_gpus`)."""
    memory_unknown: bool = False
    """Its exporter exports ``DCGM_FI_DEV_FB_USED`` but neither ``DCGM_FI_DEV_FB_FREE`` (not even
    DCGM's blank value) nor ``DCGM_FI_DEV_FB_TOTAL``: a counters CSV (``-f``) without them, so the
    framebuffer's size is unknown and, with no pod on it, the GPU is free by utilisation alone."""


@dataclass
class NodeState:
    """One host: its cluster, CPU/memory capacity (millicores, MiB), GPUs and bound pods."""

    name: str
    cluster: str
    gpus: list[GpuState] = field(default_factory=list)
    cpu_milli: int = 0
    cpu_milli_free: int = 0
    memory_mib: int = 0
    memory_mib_free: int = 0
    pods: frozenset[str] = frozenset()
    """``namespace/name`` of the pods telemetry shows on this node (empty when it cannot tell)."""
    gpu_replicas: int = 1
    """Time-slicing replicas per physical GPU (the device plugin's ``sharing.timeSlicing``
    ``replicas``; 1 without time-slicing): one ``nvidia.com/gpu`` a pod requests here is one
    replica, ``1000 // gpu_replicas`` milli-GPU of a GPU."""
    mig_replicas: dict[str, int] = field(default_factory=dict)
    """Time-slicing replicas per MIG instance of each profile (GPU feature discovery's
    ``nvidia.com/mig-<profile>.replicas``), keyed by the profile with every character that is not
    a letter, digit or ``_`` as ``_`` (``1g_10gb``); a profile not named has none (1)."""
    pod_uids: frozenset[str] = frozenset()
    """The uids (``metadata.uid``) of the pods telemetry shows on this node, where it carries them
    (kube-state-metrics' ``kube_pod_info{uid}``; empty when it cannot tell). Unlike a pod's name,
    a uid is never reused: a pod deleted and created again under its name gets a new one."""
    pending_pods: frozenset[str] | None = None
    """``namespace/name`` of the pods in ``pods`` that are not yet running (kube-state-metrics'
    ``kube_pod_status_phase``: no ``Running`` = 1, e.g. ``Pending`` while images are pulled);
    ``None`` where the source cannot tell (every listed pod counts as not running). A GPU hold of
    such a pod counts in full: its GPU use is in no reading yet
    (:mod:`fleetmind.serving.scheduler.reservations`)."""
    gpu_pods: frozenset[str] | None = None
    """``namespace/name`` of the pods whose GPU use this snapshot already counts on this node's
    GPUs: DCGM names the pod there, its GPU-sharing annotations carry ``gpu-index``, or its
    ``nvidia.com/gpu`` request is charged to the node's GPUs (kube-state-metrics' requests of pods
    DCGM names nowhere, marked taken); ``None`` where the source cannot tell (a pod it lists
    counts as placed). A GPU hold of a pod listed in ``pods`` but not here stays the pod's GPU
    assignment (:mod:`fleetmind.serving.scheduler.reservations`)."""
    cordoned: bool = False
    """The node is cordoned (``spec.unschedulable``, kube-state-metrics'
    ``kube_node_spec_unschedulable`` = 1): kube-scheduler places no new pod there."""
    draining: str = ""
    """The taint key of a node an autoscaler is removing (kube-state-metrics'
    ``kube_node_spec_taint`` with effect ``NoSchedule`` or ``NoExecute``: Cluster Autoscaler's
    ``ToBeDeletedByClusterAutoscaler``, Karpenter's ``karpenter.sh/disrupted``). Neither cordons
    the node, but kube-scheduler places no new pod there and the node goes away; ``""`` when not
    tainted so or the source cannot tell."""
    not_ready: str | None = None
    """The status of the node's ``Ready`` condition when it is not ``True`` (kube-state-metrics'
    ``kube_node_status_condition{condition="Ready"}``): ``"false"`` (the kubelet reports the node
    unhealthy) or ``"unknown"`` (the kubelet stopped posting status); ``None`` when the node is
    Ready or the source cannot tell (no kube-state-metrics: NVML, the simulator)."""
    device_plugin: str = ""
    """The GPU Operator's node label ``nvidia.com/gpu.deploy.device-plugin`` where
    kube-state-metrics exports it (``paused-for-mig-change`` while its MIG manager reconfigures
    the node's GPUs, :func:`fleetmind.serving.health.snapshot_signals`); ``""`` where not known."""
    other_devices: frozenset[str] = frozenset()
    """Accelerator resources of other vendors on this node (capacity or allocatable above 0: a
    node whose devices are all unhealthy keeps them), as kube-state-metrics names them
    (``amd_com_gpu``, ``habana_ai_gaudi``, ``google_com_tpu``:
    :func:`fleetmind.data.graph_build.is_other_device`). FleetMind does not model these devices,
    but a node that has them is an accelerator node, which CPU-only pods avoid as they avoid GPU
    nodes (:func:`fleetmind.serving.scheduler.placement.cpu_nodes_first`). Empty where there are
    none or the source cannot tell (NVML, the simulator)."""

    @property
    def accelerator_node(self) -> bool:
        """Whether the node has accelerators: GPUs in telemetry (healthy or not) or
        :attr:`other_devices`."""
        return bool(self.gpus or self.other_devices)

    @property
    def unscraped(self) -> bool:
        """Whether every GPU of the node is a placeholder (:attr:`GpuState.missing`): the kubelet
        counts ``nvidia.com/gpu`` there but dcgm-exporter reports none of them, as on a node that
        just joined (Cluster Autoscaler, Karpenter) before its exporter is scraped. Such a node
        cannot be judged: the extender treats it as a node telemetry does not know
        (:func:`fleetmind.serving.scheduler.extender.unscraped`) and cluster health leaves it out
        (:func:`fleetmind.serving.health.takes_no_work`). ``False`` for a node without GPUs or
        reporting some of them (its placeholders count as unhealthy GPUs)."""
        return bool(self.gpus) and all(g.missing for g in self.gpus)

    @property
    def schedulable(self) -> bool:
        """Whether new work may go to this node: neither cordoned, being removed by an
        autoscaler (:attr:`draining`), nor known not Ready."""
        return not self.cordoned and not self.draining and self.not_ready is None

    @property
    def unschedulable_reason(self) -> str | None:
        """Why new work may not go here (``cordoned``, ``being removed (<taint key>)``, ``not
        ready``, ``not ready (status unknown)``, joined by ``, ``), or ``None`` when it may."""
        why = ["cordoned"] if self.cordoned else []
        if self.draining:
            why.append(f"being removed ({self.draining})")
        if self.not_ready == "unknown":
            why.append("not ready (status unknown)")
        elif self.not_ready is not None:
            why.append("not ready")
        return ", ".join(why) or None


@dataclass
class FleetSnapshot:
    """The fleet at ``collected_ts`` (Unix seconds) as seen by ``source``.

    ``collected_ts`` is the time the data describes on FleetMind's clock (a Prometheus server:
    FleetMind's now when the queries were sent, which went as their ``time`` plus Prometheus's
    clock offset), which the bound-pod grace and the "as of" times count from;
    ``received_ts`` (Unix seconds; ``None``: ``collected_ts``) is when the source had answered,
    which the cache's TTL and stale bounds count from, so a read slower than the TTL still serves
    the requests that follow it (:meth:`TelemetrySource.snapshot`); once the snapshot is cached,
    its age counts on :func:`time.monotonic`, so a wall clock stepped back does not make it look
    younger, nor one stepped forward older.
    """

    source: str
    nodes: list[NodeState]
    collected_ts: float = field(default_factory=time.time)
    received_ts: float | None = None

    def __post_init__(self) -> None:
        if self.received_ts is None:
            self.received_ts = self.collected_ts

    @property
    def age_ts(self) -> float:
        """The time (Unix seconds) the cache's TTL and stale bounds count from:
        ``received_ts``, else ``collected_ts``."""
        return self.collected_ts if self.received_ts is None else self.received_ts

    @property
    def num_gpus(self) -> int:
        return sum(len(n.gpus) for n in self.nodes)


class TelemetrySource(ABC):
    """A plug-in that reports the live fleet state.

    Subclasses implement :meth:`collect`; :meth:`snapshot` caches it for ``ttl_s`` seconds so that
    bursts of placement requests do not each scrape, and runs one :meth:`collect` at a time: the
    requests that find the cache expired while a refresh is under way wait for it and share its
    snapshot (or its error) instead of each querying a slow Prometheus.

    With ``max_stale_s`` > 0 (and ``ttl_s`` > 0), a snapshot older than ``ttl_s`` but not older
    than ``ttl_s + max_stale_s`` seconds is returned at once while one refresh runs in a
    background thread (stale-while-refresh), so that no request waits for a slow source (a
    Prometheus answering a 5,000-node fleet in 2-7 s, beyond kube-scheduler's 5 s extender
    ``httpTimeout``) unless the snapshot is older than that bound or there is none yet.
    """

    name: str = "base"

    def __init__(self, ttl_s: float = 5.0, max_stale_s: float = 0.0) -> None:
        """``ttl_s`` (s): how long a snapshot is reused as it is; ``max_stale_s`` (s): how much
        longer it is still served while a background refresh runs (0: callers wait for the
        refresh, as with ``ttl_s`` = 0)."""
        self.ttl_s = ttl_s
        self.max_stale_s = max_stale_s
        self._cached: FleetSnapshot | None = None
        self._refresh = threading.Lock()
        self._refreshes = 0  # refreshes finished (ok or failed); a waiter sharing that outcome
        self._error: Exception | None = None  # that of the last refresh, None when it worked
        self._failed_ts: float | None = None  # when the last refresh failed (None: it worked)
        self._failed_mono: float | None = None  # monotonic() of that failure
        # _cached and the monotonic() instant it was 0 s old (see _age_s)
        self._cached_mono: tuple[FleetSnapshot, float] | None = None
        self._background = threading.Lock()  # held while a background refresh is pending or runs
        self._failing = False  # background refreshes failing since the last that worked (logged)
        self._closed = False  # set by close(): no more background refreshes, no failure warnings

    @abstractmethod
    def collect(self) -> FleetSnapshot:
        """Read the fleet state now; raises NotAvailableError/DataError when it cannot."""

    def _age_s(self, snap: FleetSnapshot) -> float:
        """How old (s) the cached ``snap`` is for the TTL, stale and log bounds: its wall-clock
        age when it was cached (now - ``age_ts`` then, at least 0) plus the :func:`time.monotonic`
        time since; by the wall clock alone (now - ``age_ts``) for a snapshot cached without that
        record.

        The wall clock is read once, when the snapshot is cached: NTP stepping it afterwards
        changes no age. Stepped back (a host clock that ran ahead), the wall-clock age would be
        negative and the snapshot served as fresh until the clock caught up (an hour for a 1 h
        step); stepped forward (a VM resumed, a clock that lagged), a snapshot seconds old would
        count as expired, skip stale-while-refresh and fail requests while the source is down."""
        mono = getattr(self, "_cached_mono", None)
        if mono is not None and mono[0] is snap:
            return monotonic() - mono[1]
        return time.time() - snap.age_ts

    def _fresh(self) -> FleetSnapshot | None:
        snap = self._cached
        if snap is None or self._age_s(snap) > self.ttl_s:
            return None
        return snap

    def _failed_within_ttl(self) -> bool:
        """Whether the last refresh failed less than ``ttl_s`` seconds ago, by
        :func:`time.monotonic` (the wall clock when the failure has no monotonic record), so a
        clock stepped either way neither stretches nor ends the window."""
        failed_mono = getattr(self, "_failed_mono", None)
        if failed_mono is not None:
            return monotonic() - failed_mono < self.ttl_s
        failed = getattr(self, "_failed_ts", None)
        return failed is not None and time.time() - failed < self.ttl_s

    def _servable_stale(self) -> FleetSnapshot | None:
        """The cached snapshot when it is past ``ttl_s`` but within ``max_stale_s`` more (and
        stale-while-refresh is on), else ``None``."""
        snap = self._cached
        if snap is None or self.max_stale_s <= 0 or self.ttl_s <= 0:
            return None
        if self._age_s(snap) > self.ttl_s + self.max_stale_s:
            return None
        return snap

    def snapshot(self) -> FleetSnapshot:
        """The cached snapshot while younger than ``ttl_s`` seconds, else a new one (single-flight:
        one :meth:`collect` at a time, shared by every caller that waited for it).

        With stale-while-refresh on (``max_stale_s`` > 0), a snapshot up to ``ttl_s +
        max_stale_s`` seconds old is returned at once and one background refresh started; only
        older snapshots (or none) make the caller wait.

        Raises:
            NotAvailableError, DataError: as :meth:`collect`; callers that waited for a refresh
                that failed get (a copy of) its error.
        """
        snap = self._fresh()
        if snap is not None:
            return snap
        snap = self._servable_stale()
        if snap is not None:
            self._refresh_in_background()
            return snap
        return self._wait_for_refresh()

    def fresh_snapshot(self) -> FleetSnapshot:
        """The cached snapshot while younger than ``ttl_s`` seconds, else a new one where it can
        be had: with stale-while-refresh on, the caller joins the refresh under way (the
        background one included) or reads itself, so it waits at most one :meth:`collect` (the
        source's timeout, ``FLEETMIND_TELEMETRY_TIMEOUT_S`` for Prometheus). For the decisions a
        stale snapshot gets wrong: a pod kube-scheduler retries on the node it preempted.

        When that read fails, what :meth:`snapshot` serves without reading again: the stale
        snapshot within ``ttl_s + max_stale_s``, else the read's error. For ``ttl_s`` seconds
        after a refresh failed (no refresh worked since), no such read is made and this is
        :meth:`snapshot`, which makes no read beyond what any call makes (none within the stale
        bound; past it one, as any other call): a source that is down costs each call at most one
        read, not one more per call (within kube-scheduler's 5 s ``httpTimeout`` at the
        default 2 s timeout).

        Raises:
            NotAvailableError, DataError: as :meth:`snapshot`.
        """
        snap = self._fresh()
        if snap is not None:
            return snap
        if self._failed_within_ttl():
            return self.snapshot()  # a read failed within the TTL: only what any call reads
        try:
            return self._wait_for_refresh()
        except (NotAvailableError, DataError):
            snap = self._servable_stale()
            if snap is None:
                raise
            return snap

    def _wait_for_refresh(self) -> FleetSnapshot:
        """Refresh (single-flight): share the outcome of a refresh that ended while this caller
        waited for the lock, else collect."""
        seen = self._refreshes
        with self._refresh:
            if self._refreshes != seen:  # another caller refreshed while this one waited
                if self._error is not None:
                    raise _copy(self._error) from None
                if self._cached is not None:
                    return self._cached
            snap = self._fresh()
            if snap is not None:
                return snap
            return self._collect_locked()

    def _collect_locked(self) -> FleetSnapshot:
        """Run :meth:`collect` (``self._refresh`` held) and record its outcome."""
        try:
            snap = self.collect()
        except Exception as err:
            self._error = err
            self._failed_ts, self._failed_mono = time.time(), monotonic()
            raise
        else:
            self._error = None
            self._failed_ts = self._failed_mono = None
            # the monotonic instant the snapshot was 0 s old (its wall-clock age now, >= 0)
            origin = monotonic() - max(0.0, time.time() - snap.age_ts)
            self._cached, self._cached_mono = snap, (snap, origin)
            if self._failing:
                self._failing = False
                log.info("telemetry %s: refreshing works again", self.name)
        finally:
            self._refreshes += 1
        return snap

    def _refresh_in_background(self) -> None:
        """Start one background refresh unless one is pending or running (single-flight), or the
        source is closed."""
        if getattr(self, "_closed", False) or not self._background.acquire(blocking=False):
            return
        try:
            threading.Thread(
                target=self._refresh_now, name=f"fleetmind-telemetry-{self.name}", daemon=True
            ).start()
        except RuntimeError:  # no thread to be had: the next caller past the bound refreshes
            self._background.release()

    def _refresh_now(self) -> None:
        """The background refresh: collect unless another caller refreshed meanwhile; a failure
        keeps the old snapshot (served until it is past the bound) and is logged once per
        streak of failures."""
        try:
            seen = self._refreshes
            with self._refresh:
                if self._refreshes != seen or self._fresh() is not None:
                    return
                try:
                    self._collect_locked()
                except Exception as err:
                    self._background_failed(err)
        finally:
            self._background.release()

    def _background_failed(self, err: Exception) -> None:
        """Log a failed background refresh once per streak of failures: nothing after
        :meth:`close` (a read cut off by the closed client at shutdown), and no claim of a last
        snapshot being served when there is none (the start-up read failed) or when it is already
        older than ``ttl_s + max_stale_s`` (expired while the read ran)."""
        if getattr(self, "_closed", False):
            log.debug("telemetry %s: background read ended by close (%s)", self.name, err)
            return
        if self._failing:
            return
        self._failing = True
        snap = self._cached
        if snap is None:
            log.warning(
                "telemetry %s: background read of the first snapshot failed (%s); there is no "
                "snapshot yet, so requests read telemetry themselves (and wait) until one works",
                self.name,
                err,
            )
            return
        age, bound = max(0.0, self._age_s(snap)), self.ttl_s + self.max_stale_s
        if age > bound:  # past the bound already (a read that ran into its timeout): not served
            log.warning(
                "telemetry %s: background refresh failed (%s); the last snapshot (%.0f s old) "
                "has expired (older than %g s), so requests now wait for a fresh read (and fail "
                "while reads do)",
                self.name,
                err,
                age,
                bound,
            )
            return
        log.warning(
            "telemetry %s: background refresh failed (%s); the last snapshot (%.0f s old) is "
            "served until it is %g s old, then requests wait for a refresh",
            self.name,
            err,
            age,
            bound,
        )

    def prefetch(self) -> None:
        """Start reading the first snapshot in the background (service start-up), so that the
        first requests wait for less than a whole :meth:`collect`, or not at all; only with
        stale-while-refresh on and no snapshot yet, else nothing."""
        if self._cached is None and self.max_stale_s > 0 and self.ttl_s > 0:
            self._refresh_in_background()

    def last_snapshot(self) -> FleetSnapshot | None:
        """The last snapshot read, whatever its age, without reading a new one (``None`` before
        the first); for probes that must not wait on the source."""
        return self._cached

    def close(self) -> None:
        """Release resources (NVML handle, HTTP client). Subclasses that override it call
        ``super().close()`` first: the source is then closed, so no background refresh starts
        and one still running (cut off by the closed client) logs no failure."""
        self._closed = True


def _copy(err: Exception) -> Exception:
    """A copy of ``err`` to raise in another thread (one exception object raised by several threads
    at once would mix their tracebacks); ``err`` itself when it cannot be copied."""
    try:
        return copy.copy(err)
    except Exception:
        return err


def make_source(settings: Settings, graph: DependencyGraph | None = None) -> TelemetrySource:
    """Build the source named by ``settings.telemetry``.

    Raises:
        NotAvailableError: the source cannot run here (e.g. no NVML library); the message names the
            other sources.
        ConfigError: unknown source name, or a CA file that cannot be read.
    """
    kind = settings.telemetry
    if kind == "sim":
        from fleetmind.serving.telemetry.sim import SimSource

        return SimSource.from_graph(graph, ttl_s=0.0)
    if kind == "nvml":
        from fleetmind.serving.telemetry.nvml import NvmlSource

        return NvmlSource(cluster=settings.telemetry_cluster, ttl_s=settings.telemetry_ttl_s)
    if kind == "prometheus":
        from fleetmind.serving.telemetry.prometheus import (
            PrometheusApiSource,
            PrometheusSource,
            is_exporter_url,
        )

        common: dict[str, Any] = {
            "default_cluster": settings.telemetry_cluster,
            "timeout_s": settings.telemetry_timeout_s,
            "ttl_s": settings.telemetry_ttl_s,
            # an empty value (a manifest's `value: ""`) means unset
            "bearer_token_file": settings.prometheus_bearer_token_file or None,
            "ca_file": settings.prometheus_ca_file or None,
            "headers": settings.prometheus_header_map(),  # FLEETMIND_PROMETHEUS_HEADERS
        }
        source: TelemetrySource
        if is_exporter_url(settings.prometheus_url):
            source = PrometheusSource(settings.prometheus_url, **common)
        else:
            source = PrometheusApiSource(
                settings.prometheus_url, max_age_s=settings.telemetry_max_age_s, **common
            )
        # stale-while-refresh for the one source that waits on a network service (sim and nvml
        # answer in milliseconds and stay synchronous); see Settings.telemetry_max_stale_s
        source.max_stale_s = settings.telemetry_max_stale_s
        return source
    raise ConfigError(f"unknown telemetry source {kind!r}; use sim, nvml or prometheus")


IDLE_MEMORY_FRACTION = 0.05
"""A GPU with less than this fraction of its framebuffer used can count as idle (fully free): NVML's
``used`` is reserved plus allocated memory (``nvmlMemory_t``, "Sum of Reserved and Allocated device
memory", https://docs.nvidia.com/deploy/nvml-api/structnvmlMemory__t.html), and the driver reserves
some of it on every GPU (about 580 MiB of an idle H100's 81559 MiB), so an idle GPU never reads
0 used; dcgm-exporter's ``DCGM_FI_DEV_FB_USED`` is the same reading. Little memory alone does not
make a GPU idle: see :data:`IDLE_UTIL_PCT` and :func:`free_milli_from_memory`."""

IDLE_UTIL_PCT = 5.0
"""A GPU busy at this utilisation (%) or more is not idle, however little memory it uses: a small
inference process (3.5 GiB of an 80 GB H100, under :data:`IDLE_MEMORY_FRACTION`) can keep it 98 %
busy. Utilisation is the share of the sample period in which a kernel ran
(``nvmlUtilization_t.gpu``, https://docs.nvidia.com/deploy/nvml-api/structnvmlUtilization__t.html;
``DCGM_FI_DEV_GPU_UTIL`` is the same reading, whole percent); an idle GPU reads 0 (monitoring
queries launch no kernels), so 5 % leaves room for a stray kernel while a GPU in real use reads far
above it."""


def free_milli_from_memory(
    used_mib: float | None,
    total_mib: float | None,
    util_pct: float | None = None,
    busy: bool = False,
) -> int:
    """Free share of a GPU in openb milli-GPU units (0..1000), from framebuffer memory (MiB).

    1000 when the GPU is idle: under :data:`IDLE_MEMORY_FRACTION` of the framebuffer used
    (driver-reserved memory alone), utilisation ``util_pct`` (%) under :data:`IDLE_UTIL_PCT` where
    known (``None``, NaN or infinite: not known), and not ``busy`` (a compute process runs on it,
    where the source can tell); else the free fraction. 0 when memory is unknown (missing, NaN or
    infinite: Prometheus returns NaN for a sample it has as NaN, and one such GPU must not fail
    the whole snapshot).
    """
    if used_mib is None or total_mib is None:
        return 0
    if not (math.isfinite(used_mib) and math.isfinite(total_mib)) or total_mib <= 0:
        return 0
    quiet = util_pct is None or not math.isfinite(util_pct) or util_pct < IDLE_UTIL_PCT
    if used_mib / total_mib < IDLE_MEMORY_FRACTION and quiet and not busy:
        return 1000
    # the free fraction (0..1) first: 1000 * total_mib overflows to +Inf past ~1.8e305 MiB
    return int(1000 * (max(0.0, min(total_mib, total_mib - used_mib)) / total_mib))


def profile_key(profile: str) -> str:
    """A MIG profile (``1g.10gb``, ``1g.10gb+me``, or the resource's ``1g.10gb.me``) as
    kube-state-metrics writes it in a label name: each character that is not a letter, digit or
    ``_`` becomes ``_`` (``1g_10gb``, ``1g_10gb_me``)."""
    return re.sub(r"[^a-zA-Z0-9_]", "_", profile)
