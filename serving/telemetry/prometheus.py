"""The ``prometheus`` telemetry source: the whole fleet from Prometheus, or one DCGM exporter.

``FLEETMIND_PROMETHEUS_URL`` chooses the mode:

* a **Prometheus server** (``http://prometheus:9090``, any URL whose path does not end in
  ``/metrics``): four concurrent instant queries to ``/api/v1/query`` per refresh
  (:func:`fleet_queries`, the kube-state-metrics ones joined as in :data:`KSM_FLEET_QUERY` so that
  they read one scrape; aggregations keep only the labels used and sum requests per node) read
  every node of the fleet, DCGM series from dcgm-exporter and node and pod series from
  kube-state-metrics (:class:`PrometheusApiSource`);
* a **DCGM exporter** (``http://node:9400/metrics``): its exposition text, one node
  (:class:`PrometheusSource`, the original mode).

DCGM series (dcgm-exporter's default counters; units as exported):

| metric | unit | becomes |
| --- | --- | --- |
| ``DCGM_FI_DEV_GPU_UTIL`` | % | ``util_pct`` |
| ``DCGM_FI_PROF_GR_ENGINE_ACTIVE`` | ratio | ``util_pct`` (x100) where GPU_UTIL is absent (MIG) |
| ``DCGM_FI_DEV_FB_USED`` / ``DCGM_FI_DEV_FB_FREE`` | MiB | ``mem_used_mib``, ``mem_total_mib`` |
| ``DCGM_FI_DEV_FB_TOTAL`` | MiB | ``mem_total_mib`` where ``DCGM_FI_DEV_FB_FREE`` is absent (optional) |
| ``DCGM_FI_DEV_XID_ERRORS`` | last XID (never reset) | ``xid_errors``; a hardware XID marks the GPU unhealthy |
| ``DCGM_EXP_XID_ERRORS_COUNT{xid}`` | XIDs in the exporter's window | when exported for the node: a hardware ``xid`` counted in the window marks the GPU unhealthy (instead of the last XID) |
| ``modelName`` / ``UUID`` labels | - | ``model``, ``uuid`` |
| ``exported_pod`` / ``exported_namespace``, else ``pod`` / ``namespace`` labels | - | the pod holding the GPU (dcgm-exporter's Kubernetes mapping) |

Scrape styles. dcgm-exporter's Helm chart scrapes with ``honorLabels: false`` (its ServiceMonitor
default, ``deployment/templates/service-monitor.yaml`` and ``values.yaml`` of NVIDIA/dcgm-exporter),
so Prometheus sets ``pod``/``namespace``/``container`` to the *exporter's own* target and renames the
exporter's labels for the workload to ``exported_pod``/``exported_namespace``/``exported_container``.
With ``honor_labels: true`` the workload keeps ``pod``, and a GPU that no pod holds still gets the
target's ``pod`` (the exporter's). So the workload is ``exported_pod`` when present, else ``pod``
unless that is the exporter's own pod: a DaemonSet pod (``kube_pod_info{created_by_kind}``), a pod
seen next to an ``exported_pod``, the pod named by a ``Hostname`` label, or a name like
``dcgm-exporter-x7k2p``. kube-state-metrics scraped with ``honor_labels: false`` (its
ServiceMonitor without ``honorLabels: true``, bitnami/charts#7690) is read the same way: its
``namespace``/``pod``/``container``/``uid``/``node`` (the object a series describes) are
``exported_<label>`` where set, else ``<label>`` (:data:`KSM_OBJECT_LABELS`); otherwise every series
would carry the kube-state-metrics pod's own labels, and one finished pod would drop them all. On a
target that sets ``node`` too, a pod is on the node of its ``exported_node`` only: one not yet
scheduled has none, and is on no node (:func:`placed_on_node`).

Health. ``DCGM_FI_DEV_XID_ERRORS`` holds the *last* XID and is never reset (NVIDIA/dcgm-exporter#500,
NVIDIA/DCGM#277), so one application XID (13, 31, 43, 45: a user program's fault) must not take a
GPU out for good. Only :data:`HARDWARE_XIDS` mark a GPU unhealthy; where the exporter exports the
windowed ``DCGM_EXP_XID_ERRORS_COUNT`` for a node, its GPUs are judged by that window instead, so
they come back once the window holds no hardware XID. The NVIDIA device plugin is stricter: it
marks a device unhealthy, for good, on every XID but 13, 31, 43, 45, 68 and 109
(:data:`DEVICE_PLUGIN_IGNORED_XIDS`), and the kubelet leaves it out of allocatable
``nvidia.com/gpu``; where a node's healthy reported GPUs exceed that allocatable, the surplus is
marked unhealthy too (:func:`mark_unallocatable_gpus`): Kubernetes will never allocate it. An
allocatable of 0 with capacity N (the device plugin not serving: restarting, crash-looping,
paused for a driver upgrade) takes every GPU with MIG disabled out, until the plugin serves again;
both 0, which the kubelet also keeps for good once a resource is retired, only where nothing says
the GPUs are served otherwise (see :func:`mark_unallocatable_gpus`).

Schedulable nodes. A cordoned node (``kube_node_spec_unschedulable`` = 1) and one whose ``Ready``
condition is ``False`` or ``Unknown`` (``kube_node_status_condition``) are flagged on the node
(``NodeState.cordoned``, ``NodeState.not_ready``); ``POST /api/v1/placements`` leaves them out.
So does it a node an autoscaler is removing, which neither Cluster Autoscaler (its FAQ:
``--cordon-node-before-terminating`` defaults to false) nor Karpenter cordons: a
``kube_node_spec_taint{key, effect}`` (kube-state-metrics docs/metrics/cluster/node-metrics.md,
exported by default) of :data:`DRAINING_TAINTS` with effect ``NoSchedule`` or ``NoExecute``
(``NodeState.draining``, :func:`_draining_nodes`).

No reading. DCGM's blank values (:data:`DCGM_BLANKS`, e.g. ``9223372036854775794`` or
``140737488355328`` for a field the GPU does not support), a utilisation outside 0-100 % and a
``DCGM_FI_PROF_GR_ENGINE_ACTIVE`` outside 0-1 are no reading (:func:`is_reading`), as if the series
were absent; so is a NaN or infinite value of any field (the last XID too), but for the windowed
``DCGM_EXP_XID_ERRORS_COUNT``, a count: +Inf is above 0, an XID happened (:func:`is_xid_count`).
A NaN or infinite kube-state-metrics allocatable is no reading of its resource; a NaN or infinite
request leaves the node's sum unknown, and none of that resource free (as does a finite CPU value
that overflows once read in milli-cores). A ``gpu-milli`` annotation outside 1..1000 once its
fraction is cut (:func:`share_milli`) holds no share.

MIG: a series with a ``GPU_I_ID`` label is one MIG instance; each instance becomes its own GPU of
the node, ``index = 100 * (gpu + 1) + GPU_I_ID`` (never a physical index), ``model`` =
``"<modelName> MIG <GPU_I_PROFILE>"``, ``mig_parent`` = the physical index. When the exporter
monitors both the GPUs and their instances (``-d a``), the physical GPU's own series (those without
``GPU_I_ID``) are left out: its instances hold its framebuffer; a hardware XID it reports marks
each of its instances.

kube-state-metrics series (Prometheus server mode):

| metric | becomes |
| --- | --- |
| ``kube_node_status_allocatable{resource="cpu"|"memory"}`` (cores, bytes) | ``cpu_milli``, ``memory_mib`` |
| ``kube_node_status_allocatable`` and ``_capacity`` of other vendors' accelerators (``amd_com_gpu``, ``habana_ai_gaudi``, ``google_com_tpu``, ``gpu_intel_com_*``: :data:`~fleetmind.data.graph_build.OTHER_DEVICE_PATTERN`) | ``other_devices`` (those above 0 in either; a device plugin takes unhealthy devices out of allocatable only): an accelerator node, which CPU-only pods avoid; the devices are not modelled |
| ``kube_pod_container_resource_requests{resource="cpu"|"memory", node}``, and ``kube_pod_init_container_resource_requests`` of sidecars | summed per node: ``*_free`` = allocatable - requests (see CPU and memory) |
| kube-scheduler's ``kube_pod_resource_request{resource="cpu"|"memory", node}`` (``/metrics/resources``) | where present, a pod's CPU and memory in place of kube-state-metrics' (see CPU and memory) |
| ``kube_pod_container_resource_requests{resource="nvidia_com_gpu", node}`` | whole GPUs a pod requests (kube-state-metrics writes ``nvidia.com/gpu`` as ``nvidia_com_gpu``): those of pods DCGM names on no GPU are marked taken, and the pod's GPU use counts as placed (see Requested GPUs) |
| ``kube_pod_init_container_resource_requests{resource="nvidia_com_gpu", node}`` | whole GPUs each of the pod's init containers (sidecars included) requests: with its containers', the pod's devices (see Init containers) |
| ``kube_pod_init_container_info{restart_policy="Always"}`` | the init containers that are sidecars; any series of a pod not yet running: the kubelet reported its init containers (see Init containers) |
| ``kube_pod_info{node, pod, namespace, uid}`` | ``NodeState.pods`` (pods bound there) and ``NodeState.pod_uids`` (their uids), the node of an exporter pod |
| ``kube_pod_status_phase{phase="Succeeded"|"Failed"}`` = 1 | finished pods, left out of requests and pods, and holding no GPU DCGM names them on (see Finished pods) |
| ``kube_pod_status_phase{phase="Pending"|"Unknown"}`` = 1, and a count of ``Running`` ones per cluster | ``NodeState.pending_pods``: listed pods not yet running, whose GPU holds count in full (``None`` where the cluster has no phase series) |
| ``kube_node_status_capacity`` / ``_allocatable`` ``{resource="nvidia_com_gpu"}`` | GPU devices per node: placeholders for GPUs DCGM does not report (see Missing GPUs), GPUs out of allocatable |
| ``kube_node_status_allocatable`` of ``nvidia_com_gpu_<name>`` and ``nvidia_com_mig_<profile>`` | whether the node's GPUs are served under another resource (a stale ``nvidia.com/gpu`` of 0 then marks nothing) |
| ``kube_node_labels{label_nvidia_com_gpu_replicas, label_cloud_google_com_gke_max_shared_clients_per_gpu, label_nvidia_com_mig_<profile>_replicas, label_nvidia_com_gpu_deploy_device_plugin, label_nvidia_com_gpu_product, label_cloud_google_com_gke_gpu_partition_size}`` | ``gpu_replicas`` (GKE's label where larger: :data:`GKE_REPLICAS_LABEL`) and ``mig_replicas``, time-slicing replicas per GPU with MIG disabled and per MIG instance of each profile; the GPU Operator's device-plugin state (``device_plugin``); the MIG ``single`` strategy's instances per GPU (:data:`PRODUCT_LABEL`, on GKE :data:`GKE_PARTITION_LABEL`) |
| ``kube_pod_annotations{annotation_alibabacloud_com_gpu_milli, ..._gpu_index}`` | GPU shares held by pods of the GPU-sharing scheduler (needs ``--metric-annotations-allowlist=pods=[alibabacloud.com/gpu-milli,alibabacloud.com/gpu-index]``) |

Node name of a DCGM series, first match: the ``node`` label (the usual relabelling of
``__meta_kubernetes_pod_node_name``), ``kubernetes_node``, then ``Hostname`` (``hostname`` in
dcgm-exporter's newest code). The pitfalls:

* dcgm-exporter in a DaemonSet without ``hostNetwork`` reports the *exporter pod's* name as
  ``Hostname`` (``dcgm-exporter-x7k2p``). When ``Hostname`` is the name of a pod that
  kube-state-metrics places on a node, that node is used instead.
* dcgm-exporter reading a remote DCGM host engine (``DCGM_REMOTE_HOSTENGINE_INFO=nvidia-dcgm:5555``,
  the GPU Operator's standalone DCGM) reports the engine's host as ``Hostname`` on every node
  (``GetHostname``/``parseRemoteHostname`` in NVIDIA/dcgm-exporter
  ``internal/pkg/hostname/hostname.go``). A name that series of different machines carry (one
  ``gpu`` index with two ``UUID`` values, or scrape targets ``instance`` that kube-state-metrics
  places on different nodes) is not used: each target's series go to the node of its exporter
  pod (``kube_pod_info``), else of a workload pod it names, else to the target's address. A
  single exporter (``/metrics`` URL) cannot be told apart this way: its GPUs stay under that name.
* A series without a usable ``Hostname`` (an exporter pod name nothing resolves, or none:
  dcgm-exporter ``-n``) goes to its scrape target's address (``instance``); a single exporter's
  (``/metrics`` URL), which has no ``instance``, to this host's node as the ``nvml`` source names
  it (``NODE_NAME``, else the host name; :data:`LOCAL_NODE`) when the URL is on this machine,
  to ``NODE_NAME`` (else the address) when it is an IP address, else to the URL's host name
  (:func:`exporter_node`).

Free share of a GPU (openb milli-GPU): 0 when unhealthy; else 1000 minus the shares held by
GPU-sharing pods on it (annotations); else, when workload pods hold it (see Scrape styles),
``1000 * (r - pods) // r`` with ``r`` the GPU's time-slicing replicas (1 without time-slicing: 0
free; a MIG instance's are its profile's, see Missing GPUs) and ``pods`` the replicas held: one per
pod, or one per distinct ``(pod, vgpu)`` where series carry ``vgpu`` (see Virtual GPUs); else 1000 when idle: under 5 % of its
framebuffer used (driver-reserved memory,
:data:`fleetmind.serving.telemetry.base.IDLE_MEMORY_FRACTION`) and, where read, utilisation under
5 % (:data:`~fleetmind.serving.telemetry.base.IDLE_UTIL_PCT`); otherwise the free framebuffer
fraction. A GPU whose exporter's counters CSV has ``DCGM_FI_DEV_FB_USED`` but neither
``DCGM_FI_DEV_FB_FREE`` nor ``DCGM_FI_DEV_FB_TOTAL`` has no known framebuffer size
(``mem_total_mib`` ``None``): its pods come from ``DCGM_FI_DEV_FB_USED``'s labels, and with none it
is 1000 free when its utilisation is under 5 %, else 0 (a warning is logged once per such node).

Finished pods. The kubelet's podresources ``List()`` keeps reporting the devices of pods in a
terminal phase (kubernetes/kubernetes#119423), so dcgm-exporter keeps naming a ``Succeeded`` or
``Failed`` pod on its GPU until the pod is deleted (NVIDIA/dcgm-exporter#140): a completed Job's
pods stay until its TTL. Where kube-state-metrics lists pods for the cluster (``kube_pod_info``), a
workload pod DCGM names that it does not place, not finished, in that cluster (finished, deleted)
holds nothing, and the GPU's free share comes from its framebuffer and utilisation. Without
kube-state-metrics (a ``/metrics`` URL) every pod DCGM names holds its GPU.

Requested GPUs. A pod bound to a node shows in ``kube_pod_info`` at once, but dcgm-exporter names
it on its GPUs only from its next collection after the kubelet allocated them: the kubelet
allocates devices at admission (before any image pull), and dcgm-exporter maps pods through the
kubelet's PodResources ``List`` API, running or not, so the gap is up to one dcgm-exporter
collection interval (``-c``, 30 s by default) plus one Prometheus scrape; where its Kubernetes
mapping is off (``-k``/``DCGM_EXPORTER_KUBERNETES`` unset: the binary's default, though its Helm
chart sets ``DCGM_EXPORTER_KUBERNETES=true``, ``deployment/templates/daemonset.yaml``) it names no
pod, ever,
and with time-slicing but without ``--kubernetes-virtual-gpus`` it names one pod per shared GPU.
So, per node, the ``nvidia.com/gpu`` devices of the pods listed there (not finished) that DCGM
names on no GPU are marked taken (:func:`mark_requested_gpus`), and so are those of a pod DCGM names
on fewer devices than it holds (its devices less the ``(GPU, vgpu)`` pairs it is named on and the
GPUs its share annotation's ``gpu-index`` names): the kubelet's PodResources ``List`` reports
the devices of the pod's app containers and, since Kubernetes 1.29, of its sidecars (restartable
init containers: ``List`` in ``pkg/kubelet/apis/podresources/server_v1.go``,
kubernetes/kubernetes#120718), but never a regular init container's, so a device only a regular
init container holds is named on no pod while the pod's others are (dcgm-exporter's chart names
pods by default). A named pod's devices left over are first taken by the node's missing GPUs that
are still allocatable (placeholders beyond capacity - allocatable, see Missing GPUs): their series
are gone, so they would have named it, and they already read taken. Marked
are first the GPUs that read in use (framebuffer, utilisation) with no pod named on them and no
share annotated (their usage is the unnamed pods'), then idle ones, lowest index first; one device
is one time-slicing replica (``1000 // gpu_replicas`` milli), and on a time-sliced node the devices
still left then take free replicas of the GPUs a pod is named on (the pods DCGM does not name share them). Only GPUs with
MIG disabled take them, unless the node's GPUs are all MIG instances (the ``single`` strategy).
Init containers (see below) count in a pod's devices. ``NodeState.gpu_pods`` names the pods whose
GPU use the snapshot counts (DCGM names them on a GPU, their share annotation has ``gpu-index``,
or their ``nvidia_com_gpu`` request was marked so; where devices found no free replica, the last
pods in name order are left out): a hold of a listed pod outside it (a ``gpu-milli`` share without ``gpu-index``) is still the pod's
GPU assignment (:mod:`fleetmind.serving.scheduler.reservations`).

Init containers. The kubelet allocates an init container's devices before the app containers'
(``Allocate`` in ``pkg/kubelet/cm/devicemanager/manager.go`` of kubernetes/kubernetes): a regular
init container's devices are then reusable by the containers after it (``devicesToReuse``), a
sidecar's (``restartPolicy: Always``) are not, and all stay the pod's until it ends. So the pod
holds as many devices as kube-scheduler charges it (``PodRequests`` in
``staging/src/k8s.io/component-helpers/resource/helpers.go``: the larger of containers plus
sidecars and of each regular init container plus the sidecars before it). kube-state-metrics
exports each init container's requests (``kube_pod_init_container_resource_requests``,
``internal/store/pod.go``) and, for an init container whose status the kubelet reported,
``kube_pod_init_container_info`` with ``restart_policy`` ``"Always"`` for a sidecar
(kubernetes/kube-state-metrics#2240; empty for a regular one). So a pod's devices are
(:func:`pod_gpu_devices`) the larger of its containers' ``nvidia_com_gpu`` requests plus its
sidecars' and of each regular init container's plus its sidecars': kube-scheduler's count, except
that no series gives the order of init containers, so every sidecar counts beside every regular
init container (an upper bound: a regular init container 1 before a sidecar 1 counts 2 where the
kubelet gives 1). A GPU asked only by an init container is the pod's from admission: it never
reads free while the pod lives. An init container no ``restart_policy="Always"`` series names is
read as a regular one: a GPU sidecar counts too few (sidecar 1 + app 1: 1, where the kubelet gives
2) on a kube-state-metrics before kubernetes/kube-state-metrics#2240. A pod not yet running
(``Pending``, ``Unknown``) whose init containers request GPUs but have no
``kube_pod_init_container_info`` series yet (kube-state-metrics exports it only once the kubelet
reported the init containers' statuses) is read with an upper bound: every init container counts
as a sidecar (its devices are its containers' requests plus all its init containers', app 4 +
init 1: 5, where the kubelet gives 4 for a regular init container and 5 for a sidecar). That is
never below the kubelet's count, so the extender's hold on the pod can end once it is read
(:mod:`fleetmind.serving.scheduler.reservations`) without a GPU read free too early, and a pod
placed without FleetMind counts its GPUs as well; it over-counts only by regular init
containers' GPUs until the kubelet reports them (seconds: its first ``SyncPod`` writes a
``Waiting`` status for every init container). Where ``kube_pod_init_container_info`` is never
collected (an allowlist, denylist or relabelling drops it), such pods are read with this upper
bound for their whole ``Pending`` phase, never as 0 GPUs.

CPU and memory. A node's free CPU and memory are its allocatable less the requests of the pods
placed on it (finished pods left out), each pod's as kube-scheduler's ``PodRequests`` counts it
where telemetry can tell (``staging/src/k8s.io/component-helpers/resource/helpers.go``):
:func:`node_requests_query`, :func:`_add_pod_requests`. A pod's request is kube-scheduler's own
``kube_pod_resource_request{resource}`` (``pkg/scheduler/metrics/resources/resources.go``: labels
``namespace``, ``pod``, ``node``, ``scheduler``, ``priority``, ``resource``, ``unit``; ``PodRequests``
of every pod not finished: pod-level ``spec.resources``, sidecars, init containers and
``spec.overhead`` included) where that series is there and places the pod on the node
``kube_pod_info`` places it on; else kube-state-metrics' sum of its containers' requests and its
sidecars' (``kube_pod_init_container_resource_requests`` of the init containers that
``kube_pod_init_container_info{restart_policy="Always"}`` names; kubernetes/kube-state-metrics
``docs/metrics/workload/pod-metrics.md``). kube-state-metrics exports no pod-level
``spec.resources`` (kubernetes/kube-state-metrics#3107, #3027), so a pod sized only there counts
nothing without kube-scheduler's series, which kube-scheduler serves at ``/metrics/resources``,
an endpoint kube-prometheus-stack's ``kubeScheduler`` ServiceMonitor does not scrape (its one
endpoint is ``/metrics``). Regular init containers (the larger of one and the app containers
counts in ``PodRequests``) and ``spec.overhead`` are read only from kube-scheduler's series.

Missing GPUs. ``kube_node_status_capacity`` (else ``_allocatable``) ``{resource="nvidia_com_gpu"}``
counts the node's GPU devices; a node whose DCGM series report fewer (a GPU fallen off the bus, an
exporter target down: its series go stale) gets unhealthy placeholders with nothing free
(:func:`add_missing_gpus`). Time-slicing advertises ``r`` devices per GPU (k8s-device-plugin
``sharing.timeSlicing.resources[].replicas``, https://docs.nvidia.com/datacenter/cloud-native/
gpu-operator/latest/gpu-sharing.html); ``r`` is GPU feature discovery's ``nvidia.com/gpu.replicas``
node label, which kube-state-metrics exports with
``--metric-labels-allowlist=nodes=[nvidia.com/gpu.replicas]`` (``kube_node_labels``), and
becomes ``NodeState.gpu_replicas``. GPU feature discovery labels replicas per resource
(``<resource>.replicas``, ``resourceLabeler.key("replicas")`` in ``internal/lm/resource.go`` of
NVIDIA/k8s-device-plugin): ``nvidia.com/gpu.replicas`` covers the GPUs with MIG disabled, and each
MIG profile of the mixed strategy has its own ``nvidia.com/mig-<profile>.replicas``
(``NodeState.mig_replicas``, :func:`_replicas_of`).

Virtual GPUs. dcgm-exporter's ``--kubernetes-virtual-gpus`` (its mode for time-slicing and MPS)
exports one series per replica a pod holds, labelled ``vgpu`` with the replica (a pod the device
plugin gave two replicas of one GPU has two series there, counted as two replicas held), and none
at all for a GPU no pod holds (``PodMapper.Process`` in
``internal/pkg/transformation/kubernetes.go`` of NVIDIA/dcgm-exporter builds each counter's series
from the pods of the device only, ``toDeviceToSharingPods`` one entry per device id;
NVIDIA/dcgm-exporter#549, #611). The flag is one for the whole DaemonSet, and ``vgpu`` is set only
for a shared replica id, so a whole-GPU node of such a cluster loses its idle GPUs without any
series of its own carrying ``vgpu``: in a cluster where any series carries ``vgpu``, every node's
GPUs counted but not reported are therefore idle, added healthy with every replica free (as many
as allocatable leaves room for), not as placeholders. A node where no pod holds a GPU exports its
GPUs as usual since NVIDIA/dcgm-exporter#554; before, nothing, and a cluster where no pod holds a
GPU then still gets placeholders.

Stale series. Every series read is kept only while its newest sample is younger than
``max_age_s`` (``FLEETMIND_TELEMETRY_MAX_AGE_S``, :data:`DEFAULT_MAX_AGE_S`; :func:`fresh`).
Federated samples carry their own timestamps, and "Staleness will not be marked for time series
that have timestamps included in their scrapes. Only the 5 minute threshold will be applied"
(Prometheus docs, ``docs/querying/basics.md``): without the bound a federated cluster that stopped
sending stays in the fleet, with its last free GPUs, for 5 minutes.

Partial answers. Queries send ``partial_response=false``: Thanos Query, whose default is to answer
without a store that failed (naming it in ``warnings``), then fails the query instead. An answer
that still has ``warnings`` other than PromQL's annotations (:data:`ANNOTATION_PREFIXES`) is
refused (:class:`NotAvailableError`, naming the first warning): series may be missing anywhere (a
Thanos Receive hashring shards a node's series over ingesters), and a fleet missing a node's pod
requests shows its CPU free; no snapshot is safer than a wrong one. The fleet routes answer 503
with the warning and ``/ui/fleet`` shows it; ``fleetmind doctor`` stops with it. VictoriaMetrics
cluster's vmselect answers without an unavailable vmstorage node by default, marking the answer
``"isPartial": true`` (no ``warnings``; VictoriaMetrics CHANGELOG v1.47.0, and its cluster docs:
``-search.denyPartialResponse`` or the query argument ``deny_partial_response=1`` fail it instead):
queries send ``deny_partial_response=1`` too, and an answer with ``isPartial`` true is refused
the same way.
"""

from __future__ import annotations

import base64
import html
import ipaddress
import logging
import math
import re
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fleetmind.data.errors import ConfigError, DataError, NotAvailableError
from fleetmind.data.fleet_io import local_node_name
from fleetmind.data.graph import DCGM_EXPORTER_POD, instance_address
from fleetmind.data.graph_build import (
    MIG_SUFFIX,
    OTHER_DEVICE_PATTERN,
    SHARED_SUFFIX,
    _mig_instances_per_gpu,
    is_other_device,
)
from fleetmind.http_client import client as proxied_client
from fleetmind.http_client import proxied_answer_note, proxy_note
from fleetmind.redact import safe_uri, terminal_safe
from fleetmind.serving.telemetry.base import (
    IDLE_UTIL_PCT,
    MIG_CHANGE,
    FleetSnapshot,
    GpuState,
    NodeState,
    TelemetrySource,
    free_milli_from_memory,
    profile_key,
)

log = logging.getLogger(__name__)

_FIELDS = {
    "DCGM_FI_DEV_GPU_UTIL": "util",
    "DCGM_FI_PROF_GR_ENGINE_ACTIVE": "gr_active",
    "DCGM_FI_DEV_FB_USED": "used",
    "DCGM_FI_DEV_FB_FREE": "free",
    "DCGM_FI_DEV_FB_TOTAL": "total",
    "DCGM_FI_DEV_XID_ERRORS": "xid",
    "DCGM_EXP_XID_ERRORS_COUNT": "xid_count",
}
HARDWARE_XIDS: frozenset[int] = frozenset(
    {48, 54, 61, 62, 63, 64, 74, 79, 92, 94, 95, 119, 120, 121, 136, 140, 143}
    | set(range(144, 151))
    | {155, 157, 158, 161, 165, 166, 167, 168, 169, 170, 171, 172}
)
"""XIDs that say the GPU itself (memory, NVLink, PCIe bus, firmware, power) is at fault; they mark
it unhealthy until the exporter stops reporting them. From NVIDIA's "XID Errors" catalogue
(https://docs.nvidia.com/deploy/xid-errors/, the "HW Error" / "Bus Error" / "FB Corruption" and
"Reset GPU" columns; the same table is ``internal/pkg/collector/xid_errors.go`` in
NVIDIA/dcgm-exporter): 48 double-bit ECC, 54 aux power, 61/62/169 micro-controller halt,
63/64 row remapping event/failure, 74 NVLink, 79 fallen off the bus, 92 high single-bit ECC rate,
94/95 contained/uncontained ECC, 119/120 GSP, 121 C2C link, 136 ALI training, 140 unrecovered ECC,
143 init failure, 144-150/155/166/170 NVLink, 157/161 resource retirement failures, 158/167 fatal
timeouts, 165 power smoothing circuitry exhausted, 168/171/172 DRAM/SRAM. Every other XID, e.g. 13
(graphics engine exception), 31 (memory page fault), 43 (GPU stopped processing), 45 (preemptive
cleanup), comes from a user program or the driver's handling of one, and leaves the GPU usable."""


DEVICE_PLUGIN_IGNORED_XIDS: frozenset[int] = frozenset({13, 31, 43, 45, 68, 109})
"""XIDs the NVIDIA device plugin ignores (``ignoredXids`` of ``getDisabledHealthCheckXids`` in
``internal/rm/health.go`` of NVIDIA/k8s-device-plugin: application errors and the context switch
timeout); any other XID marks the device ``Unhealthy`` for good, and the kubelet counts only
healthy devices in allocatable. Only ranks which GPU :func:`mark_unallocatable_gpus` takes first;
:data:`HARDWARE_XIDS` alone marks a GPU unhealthy from its XID."""


def is_hardware_xid(value: float | None) -> bool:
    """Whether a ``DCGM_FI_DEV_XID_ERRORS`` value (an XID number, 0 for none) is a hardware XID."""
    if value is None or not math.isfinite(value) or value <= 0:
        return False  # NaN or +-Inf: no reading
    return int(value) == value and int(value) in HARDWARE_XIDS


DCGM_BLANKS: tuple[float, ...] = (float(0x7FFFFFF0), 140737488355328.0, float(0x7FFFFFFFFFFFFFF0))
"""Bases of DCGM's blank values, which dcgm-exporter may export for a field it could not read
(``DCGM_INT32_BLANK``, ``DCGM_FP64_BLANK`` = 2**47 and ``DCGM_INT64_BLANK`` of ``dcgm_structs.h``
in NVIDIA/DCGM; each base + 0..15 is a blank: not found, not supported, not permissioned...)."""
READING_RANGES: dict[str, tuple[float, float]] = {"util": (0.0, 100.0), "gr_active": (0.0, 1.0)}
"""Valid range of a reading (``DCGM_FI_DEV_GPU_UTIL`` in %, ``DCGM_FI_PROF_GR_ENGINE_ACTIVE`` a
ratio); a value outside it (or NaN) is no reading."""


def is_dcgm_blank(value: float) -> bool:
    """Whether ``value`` is one of DCGM's blank sentinels (:data:`DCGM_BLANKS`): no reading."""
    return any(base <= value <= base + 15 for base in DCGM_BLANKS)


def is_reading(field_name: str, value: float) -> bool:
    """Whether ``value`` of a DCGM field (its name in ``_FIELDS``: ``util``, ``gr_active``...) is
    a reading: finite (NaN and +-Inf are none), not a blank sentinel, and inside
    :data:`READING_RANGES` where the field has one."""
    if not math.isfinite(value) or is_dcgm_blank(value):
        return False
    bounds = READING_RANGES.get(field_name)
    return bounds is None or bounds[0] <= value <= bounds[1]


def is_xid_count(value: float) -> bool:
    """Whether a ``DCGM_EXP_XID_ERRORS_COUNT`` value (XIDs counted in the exporter's window) says
    an XID happened: above 0, +Inf included (a count is not a reading that can be out of range: an
    infinite count still counts). NaN and DCGM's blanks (:func:`is_dcgm_blank`) are no count."""
    return not math.isnan(value) and not is_dcgm_blank(value) and value > 0


DCGM_QUERY = "{__name__=~%r}" % "|".join(_FIELDS)  # noqa: UP031 - PromQL wants the quotes
KSM_QUERY = (
    '{__name__=~"kube_node_status_allocatable|kube_pod_container_resource_requests|kube_pod_info'
    '|kube_pod_annotations|kube_pod_status_phase",resource=~"cpu|memory|",phase=~"Pending|Running|Unknown|Succeeded|Failed|"}'
)
MAX_PLACEHOLDERS = 64
GPU_RESOURCES = "nvidia_com_gpu|nvidia_com_gpu_.+|nvidia_com_mig_.+"
"""The NVIDIA GPU resources ``node_gpus`` reads (kube-state-metrics' names): ``nvidia.com/gpu``,
a renamed one (time-slicing's ``renameByDefault``: ``nvidia.com/gpu.shared``) and the ``mixed``
MIG strategy's ``nvidia.com/mig-<profile>``; not every ``nvidia.com/`` resource (the Network
Operator's SR-IOV NICs use that prefix too)."""
OTHER_GPU_ALLOCATABLE = "other_gpu_allocatable"
"""Key, in a node's ``counted`` (:func:`mark_unallocatable_gpus`), of the largest allocatable of
its NVIDIA GPU resources other than ``nvidia.com/gpu`` (:data:`GPU_RESOURCES`)."""
OTHER_GPU_DEVICES = "other_gpu_devices"
"""Key, in a node's ``counted`` (:func:`add_missing_gpus`), of the largest capacity or allocatable
of its NVIDIA GPU resources other than ``nvidia.com/gpu``: above 0 where the node advertises such
devices even when the device plugin counts every one unhealthy (allocatable 0, capacity kept)."""
DEVICE_PLUGIN_LABEL = "label_nvidia_com_gpu_deploy_device_plugin"
"""The GPU Operator's node label ``nvidia.com/gpu.deploy.device-plugin`` as kube-state-metrics
exports it (``kube_node_labels``, where ``--metric-labels-allowlist`` names it):
``paused-for-driver-upgrade`` while its driver manager has the plugin stopped, ``false`` where the
plugin is turned off on the node (:func:`mark_unallocatable_gpus`)."""
"""Most placeholder GPUs added to one node (a bogus capacity value must not build millions)."""
PRODUCT_LABEL = "label_nvidia_com_gpu_product"
"""GPU feature discovery's node label ``nvidia.com/gpu.product`` as kube-state-metrics exports it
(``kube_node_labels``, where ``--metric-labels-allowlist`` names it): ``<model>-MIG-<profile>``
under the MIG ``single`` strategy gives the instances per GPU (:func:`add_missing_gpus`)."""
GKE_PARTITION_LABEL = "label_cloud_google_com_gke_gpu_partition_size"
"""GKE's node label ``cloud.google.com/gke-gpu-partition-size`` as kube-state-metrics exports it
(allowlist ``nodes=[...,cloud.google.com/gke-gpu-partition-size]``): the MIG profile of a GKE MIG
node (GKE runs no GPU feature discovery to write :data:`PRODUCT_LABEL`), read as a product
``-MIG-<profile>`` where the node has no :data:`PRODUCT_LABEL` (:func:`add_missing_gpus`; GKE
docs "Running multi-instance GPUs", https://cloud.google.com/kubernetes-engine/docs/how-to/gpus-multi)."""
REPLICAS_LABEL = "label_nvidia_com_gpu_replicas"
"""GPU feature discovery's node label ``nvidia.com/gpu.replicas`` as kube-state-metrics exports it
(``kube_node_labels``, with ``--metric-labels-allowlist=nodes=[nvidia.com/gpu.replicas]``): the
replicas of the ``nvidia.com/gpu`` resource, i.e. of the GPUs with MIG disabled (and of the MIG
instances of the ``single`` strategy, which advertises them as ``nvidia.com/gpu``)."""
GKE_REPLICAS_LABEL = "label_cloud_google_com_gke_max_shared_clients_per_gpu"
"""GKE's node label ``cloud.google.com/gke-max-shared-clients-per-gpu`` as kube-state-metrics
exports it (allowlist ``nodes=[...,cloud.google.com/gke-max-shared-clients-per-gpu]``): the
containers per GPU of GKE's time-sharing and MPS, whose own device plugin advertises allocatable
``nvidia.com/gpu`` = GPUs x this, and which runs no GPU feature discovery to write
:data:`REPLICAS_LABEL` (GKE docs "Share GPUs with multiple workloads using GPU time-sharing",
https://cloud.google.com/kubernetes-engine/docs/how-to/timesharing-gpus). A node's replicas are
the larger of the two labels."""
MIG_REPLICAS_LABEL = re.compile(r"label_nvidia_com_mig_(\w+)_replicas")
"""GPU feature discovery's per-resource label ``nvidia.com/mig-<profile>.replicas`` (GFD labels
``<resource>.replicas`` for each resource, ``resourceLabeler.key("replicas")`` in
``internal/lm/resource.go`` of NVIDIA/k8s-device-plugin) as kube-state-metrics exports it: every
character that is not a letter, digit or ``_`` becomes ``_`` (``1g.10gb`` -> ``1g_10gb``); the
group is the profile so sanitised (:func:`profile_key`)."""
VGPU_LABEL = "vgpu"
"""The label dcgm-exporter's ``--kubernetes-virtual-gpus`` mode puts on the series of a shared GPU
(``vgpuAttribute`` of ``internal/pkg/transformation/const.go`` in NVIDIA/dcgm-exporter): the
replica a pod holds. That mode exports a GPU only for the pods that hold it (see Virtual GPUs)."""
ANN_MILLI = "annotation_alibabacloud_com_gpu_milli"
ANN_INDEX = "annotation_alibabacloud_com_gpu_index"
SIDECAR_RESTART_POLICY = "Always"
"""``kube_pod_init_container_info{restart_policy}`` of a sidecar (an init container with
``restartPolicy: Always``); empty for a regular init container (kubernetes/kube-state-metrics#2240,
see Init containers)."""
_GPU_KEY = "cluster, node, kubernetes_node, Hostname, hostname, instance, gpu, GPU_I_ID"
_POD_LABELS = "pod, namespace, exported_pod, exported_namespace"
KSM_OBJECT_LABELS: tuple[str, ...] = ("namespace", "pod", "container", "node", "uid")
"""Labels kube-state-metrics sets for the object a series describes (``kube_pod_*``: ``namespace``,
``pod``, ``uid``, ``node``, ``container``; ``kube_node_*``: ``node``) that a scrape target's own
labels can also carry: prometheus-operator gives every ServiceMonitor endpoint ``namespace``,
``pod``, ``container``, ``service``, ``endpoint`` (``pkg/prometheus/promcfg.go``,
``generateServiceMonitorConfig``), and plain ``kubernetes_sd`` jobs often set ``node`` from
``__meta_kubernetes_pod_node_name`` (the ``kubernetes-service-endpoints`` job of
prometheus-community's ``prometheus`` chart). Scraped with ``honor_labels: false`` (the default;
kube-state-metrics' ServiceMonitor without ``honorLabels: true``, bitnami/charts#7690,
prometheus-community/helm-charts#1368), Prometheus keeps kube-state-metrics' value of each such
label as ``exported_<label>`` and sets the target's (the kube-state-metrics pod's) in its place;
:func:`ksm_object_labels` reads ``exported_<label>`` back where it is set. Prometheus renames only
a non-empty label (``mutateSampleLabels`` in ``scrape/scrape.go``), so where the target sets
``node``, a pod not yet scheduled (kube-state-metrics' ``node`` empty) would show on the
kube-state-metrics pod's node: its requests would use up that node, and its uid seen there would
end the extender's hold on the node it was placed on. So a target that renames ``node`` (any of
its ``kube_pod_info`` carries ``exported_node``) places a pod only by ``exported_node``
(:func:`placed_on_node`, :data:`KSM_PLACED`); targets that never rename it (``honor_labels: true``,
a ServiceMonitor) read ``node`` as before."""
POD_REQUESTS = "kube_pod_container_resource_requests"
"""kube-state-metrics' requests of a pod's app containers (its init containers': ``init_``)."""
SCHEDULER_REQUESTS = "kube_pod_resource_request"
"""kube-scheduler's request of a pod, ``PodRequests`` (``/metrics/resources``; see CPU and memory)."""
KSM_PLACED: tuple[str, ...] = (
    "kube_pod_info",
    "kube_pod_container_resource_requests",
    "kube_pod_init_container_resource_requests",
)
"""kube-state-metrics metrics whose ``node`` places a pod (empty while it is not scheduled)."""
_KSM_TARGET = ("cluster", "job", "instance")
"""The labels of one kube-state-metrics scrape target (``on (...)`` in :func:`placed_on_node`)."""
_KSM_READ: dict[str, tuple[str, ...]] = {
    "kube_pod_container_resource_requests": ("namespace", "pod", "container", "node"),
    "kube_pod_init_container_resource_requests": ("namespace", "pod", "container", "node"),
    "kube_pod_init_container_info": ("namespace", "pod", "container"),
    "kube_pod_resource_request": ("namespace", "pod", "node"),
    "kube_pod_info": ("namespace", "pod", "uid", "node"),
    "kube_pod_annotations": ("namespace", "pod"),
    "kube_pod_status_phase": ("namespace", "pod"),
    "kube_node_status_allocatable": ("node",),
    "kube_node_status_capacity": ("node",),
    "kube_node_labels": ("node",),
    "kube_node_spec_unschedulable": ("node",),
    "kube_node_status_condition": ("node",),
    "kube_node_spec_taint": ("node",),
}
""":data:`KSM_OBJECT_LABELS` that :func:`fleet_queries` reads, per kube-state-metrics metric."""


def ksm_object_labels(selector: str, labels: Iterable[str]) -> str:
    """``selector`` (kube-state-metrics series) with each of ``labels`` set to ``exported_<label>``
    where that is non-empty (a scrape with ``honor_labels: false``, see
    :data:`KSM_OBJECT_LABELS`); series without it are unchanged, so a scrape with
    ``honor_labels: true`` reads exactly as before. ``exported_<label>`` is kept, so no two series
    end up with the same labels."""
    for label in labels:
        selector = f'label_replace({selector}, "{label}", "$1", "exported_{label}", "(.+)")'
    return selector


def placed_on_node(
    metric: str, matchers: str, max_age_s: float, read: Callable[[str, str], str]
) -> str:
    """The series of ``metric`` (one of :data:`KSM_PLACED`) matching ``matchers`` that place a pod
    on a node: ``read(metric, matchers)`` (the selector as :func:`fleet_queries` reads it) with
    ``node!=""``, except that on a scrape target renaming ``node`` (one with any fresh
    ``kube_pod_info{exported_node!=""}``) only the series with ``exported_node`` count, since there
    a pod not yet scheduled carries the target's ``node`` (see :data:`KSM_OBJECT_LABELS`). Without
    such a target (``honor_labels: true``, a ServiceMonitor) the answer is ``read``'s alone."""
    on = ", ".join(_KSM_TARGET)
    own = f'{matchers},node!="",exported_node!=""' if matchers else 'node!="",exported_node!=""'
    any_node = f'{matchers},node!=""' if matchers else 'node!=""'
    renaming = fresh('kube_pod_info{exported_node!=""}', max_age_s)
    return (
        f"({read(metric, own)} or ({read(metric, any_node)} "
        f"unless on ({on}) group by ({on}) ({renaming})))"
    )


_TARGET_LABELS = "instance, job, pod, namespace, container, service, endpoint, exported_node"
"""Labels of kube-state-metrics' own scrape target: two of its targets at once (a rolling update)
give a node's ``kube_node_labels`` twice, once each (``exported_node``: kube-state-metrics' own
``node`` where the target also sets one, already read back into ``node``)."""
_PHASE_DONE = 'kube_pod_status_phase{phase=~"Succeeded|Failed"}'
_DONE = (
    "unless on (cluster, namespace, pod) "
    f"({ksm_object_labels(_PHASE_DONE, _KSM_READ['kube_pod_status_phase'])} == 1)"
)
SKEW_TOLERANCE_S = 5.0
"""How far (s) Prometheus's clock, as its answers' HTTP ``Date`` tells it, may move from the offset
the fleet queries already allow for before they are evaluated again at its time: beyond the
``Date`` header's 1 s resolution and the time an answer takes to arrive, far below
:data:`DEFAULT_MAX_AGE_S` (:meth:`PrometheusApiSource.collect`)."""
DEFAULT_MAX_AGE_S = 120.0
"""Series whose newest sample is older than this (s) are left out (``FLEETMIND_TELEMETRY_MAX_AGE_S``;
see Stale series in the module docstring): about two scrape intervals of 30 s, doubled for
federation, where a sample reaches the federating Prometheus up to one interval of each late."""


def fresh(selector: str, max_age_s: float) -> str:
    """``selector`` (one metric name) without the series whose newest sample is ``max_age_s``
    seconds old or more; ``selector`` itself when ``max_age_s`` is 0.

    ``timestamp()`` of a vector selector is its sample's own timestamp (Prometheus docs,
    querying/functions.md); it drops the metric name, so a selector of several names would give
    series with the same labels ("vector cannot contain metrics with the same labelset"): one
    name per selector, joined with ``or``.
    """
    if max_age_s <= 0:
        return selector
    return f"({selector} and (time() - timestamp({selector}) < {float(max_age_s)!r}))"


_NAME_TAG = "fleetmind_name"
DRAINING_TAINTS = (
    "ToBeDeletedByClusterAutoscaler",
    "karpenter.sh/disrupted",
    "karpenter.sh/disruption",
)
"""Taint keys of a node an autoscaler is removing: Cluster Autoscaler's scale-down
(``ToBeDeletedByClusterAutoscaler:NoSchedule``, cluster-autoscaler
utils/taints/taints.go), Karpenter's disruption (``karpenter.sh/disrupted:NoSchedule`` since
v1, pkg/controllers/disruption/queue.go; ``karpenter.sh/disruption=disrupting`` before)."""
DRAINING_EFFECTS = ("NoSchedule", "NoExecute")
"""Taint effects that keep new pods off a node (``PreferNoSchedule`` does not)."""
DRAINING_TAINT_MATCHERS = (
    f'key=~"{"|".join(k.replace(".", "[.]") for k in DRAINING_TAINTS)}",'
    f'effect=~"{"|".join(DRAINING_EFFECTS)}"'
)
"""PromQL label matchers of :data:`DRAINING_TAINTS` with :data:`DRAINING_EFFECTS` (a literal dot
as ``[.]``: a backslash would need escaping again in a PromQL string)."""


def fleet_queries(max_age_s: float = DEFAULT_MAX_AGE_S) -> dict[str, str]:
    """The PromQL the server mode runs, by the name its samples get (DCGM: their own);
    aggregations keep only the labels used; series older than ``max_age_s`` (0: no bound) are
    left out before aggregating."""

    def sel(metric: str, matchers: str = "") -> str:
        selector = fresh(f"{metric}{{{matchers}}}" if matchers else metric, max_age_s)
        return ksm_object_labels(selector, _KSM_READ.get(metric, ()))  # see KSM_OBJECT_LABELS

    def any_of(names: Iterable[str], matchers: str = "") -> str:
        # `or` matches label sets without the metric name: series of two names with the same
        # labels would keep only the first, so each name is tagged apart (the aggregation over
        # them drops the tag)
        return " or ".join(
            f'label_replace({sel(n, matchers)}, "{_NAME_TAG}", "{n}", "", "")' for n in names
        )

    dcgm = ("DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_XID_ERRORS",
            "DCGM_FI_PROF_GR_ENGINE_ACTIVE", "DCGM_FI_DEV_FB_TOTAL")  # fmt: skip
    # CPU, memory and the other vendors' accelerators (NodeState.other_devices), these by the
    # larger of allocatable and capacity (tagged apart): unhealthy devices leave allocatable only
    allocatable = f'resource=~"cpu|memory|{OTHER_DEVICE_PATTERN}"'
    other = f'resource=~"{OTHER_DEVICE_PATTERN}"'
    shared, node = f'{ANN_MILLI}!=""', 'node!=""'
    gpus = 'resource="nvidia_com_gpu"'
    gpu_resources = f'resource=~"{GPU_RESOURCES}"'
    sidecar = f'restart_policy="{SIDECAR_RESTART_POLICY}"'
    unstarted, running = 'phase=~"Pending|Unknown"', 'phase="Running"'
    return {
        "DCGM": f"max by (__name__, {_GPU_KEY}, modelName, UUID) ({any_of(dcgm)})",
        # the pod, MIG profile and vgpu labels: from FB_FREE, else (a counters CSV without it)
        # from FB_USED of the GPUs with no FB_FREE, named apart (one series per GPU either way)
        "DCGM_FI_DEV_FB_FREE": f"max by (__name__, {_GPU_KEY}, GPU_I_PROFILE, modelName, UUID, "
        f"{_POD_LABELS}, {VGPU_LABEL}) ({sel('DCGM_FI_DEV_FB_FREE')} "
        f"or on ({_GPU_KEY}) {sel('DCGM_FI_DEV_FB_USED')})",
        "DCGM_EXP_XID_ERRORS_COUNT": f"max by ({_GPU_KEY}, xid) "
        f"({sel('DCGM_EXP_XID_ERRORS_COUNT')})",
        "kube_node_status_allocatable": "max by (cluster, node, resource) "
        f"({sel('kube_node_status_allocatable', allocatable)} or label_replace("
        f"""{sel("kube_node_status_capacity", other)}, "{_NAME_TAG}", "capacity", "", ""))""",
        # CPU and memory requested per node, as kube-scheduler counts them where it can tell
        "node_requests": node_requests_query(max_age_s, sel),
        # whole GPUs per pod (kube-state-metrics names nvidia.com/gpu nvidia_com_gpu) of its
        # containers, one value per container before the sum, as node_requests
        "pod_gpu_requests": "sum by (cluster, node, namespace, pod) "
        "(max by (cluster, node, namespace, pod, container) "
        f"({placed_on_node('kube_pod_container_resource_requests', gpus, max_age_s, sel)} "
        f"{_DONE}))",
        # ... and of each init container, one value each: the pod's devices are the larger of
        # its containers plus sidecars and of each regular init container plus the sidecars
        # (see Init containers), which a sum cannot give
        "pod_init_gpu_requests": "max by (cluster, node, namespace, pod, container) "
        f"({placed_on_node('kube_pod_init_container_resource_requests', gpus, max_age_s, sel)} "
        f"{_DONE})",
        # the init containers that are sidecars (restartPolicy Always), only those asking GPUs:
        # a service mesh's native sidecar is in every pod
        "pod_sidecars": "max by (cluster, namespace, pod, container) "
        f"({sel('kube_pod_init_container_info', sidecar)} "
        "and on (cluster, namespace, pod, container) "
        f"{sel('kube_pod_init_container_resource_requests', gpus)})",
        # the pods not yet running, asking init GPUs, whose init containers' statuses the kubelet
        # reported (any kube_pod_init_container_info): the others' sidecars are not known yet
        "pod_init_reported": "count by (cluster, namespace, pod) "
        f"({sel('kube_pod_init_container_info')} "
        "and on (cluster, namespace, pod) "
        f"{sel('kube_pod_init_container_resource_requests', gpus)} "
        "and on (cluster, namespace, pod) "
        f"({sel('kube_pod_status_phase', unstarted)} == 1))",
        "kube_pod_info": "max by (cluster, namespace, pod, uid, node, created_by_kind) "
        f"({placed_on_node('kube_pod_info', '', max_age_s, sel)}) {_DONE}",
        "kube_pod_annotations": f"max by (cluster, namespace, pod, {ANN_MILLI}, {ANN_INDEX}) "
        f"({sel('kube_pod_annotations', shared)}) {_DONE}",
        # pods not yet running (Pending: scheduled, pulling images; Unknown), for
        # NodeState.pending_pods, and per cluster whether phases are there at all: one series
        # per cluster, not one per running pod (as many as kube_pod_info's at 150,000 pods)
        "pod_phase": "max by (cluster, namespace, pod, phase) "
        f"({sel('kube_pod_status_phase', unstarted)} == 1)",
        "phase_running": f"count by (cluster) ({sel('kube_pod_status_phase', running)} == 1)",
        # whole GPUs per node as the kubelet counts them (capacity: healthy and unhealthy devices;
        # allocatable: healthy ones), and the time-slicing replicas GPU feature discovery labels
        # (per resource: nvidia.com/gpu.replicas, nvidia.com/mig-<profile>.replicas; label names
        # cannot be matched by a pattern, so every node's labels come, one series per node);
        # the node's other NVIDIA GPU resources (nvidia.com/gpu.shared, nvidia.com/mig-<profile>)
        # too, per resource: whether the GPUs are served under another name
        "node_gpus": "max by (__name__, cluster, node, resource) "
        f"({any_of(('kube_node_status_capacity', 'kube_node_status_allocatable'), gpu_resources)})",
        "node_gpu_replicas": f"max without ({_TARGET_LABELS}) ({sel('kube_node_labels', node)})",
        # cordoned nodes (spec.unschedulable) and nodes whose Ready condition is False or Unknown
        # (kube-state-metrics docs/metrics/cluster/node-metrics.md: one series per status, 1 for
        # the current one); only those, one series each: the others are schedulable
        "node_unschedulable": "max by (cluster, node) "
        f"({sel('kube_node_spec_unschedulable')} == 1)",
        "node_not_ready": "max by (cluster, node, status) "
        f"""({sel("kube_node_status_condition", 'condition="Ready",status!="true"')} == 1)""",
        # nodes an autoscaler is removing (NodeState.draining): only its taints, one series each
        "node_draining": "max by (cluster, node, key) "
        f"({sel('kube_node_spec_taint', DRAINING_TAINT_MATCHERS)} == 1)",
    }


def node_requests_query(max_age_s: float, read: Callable[[str, str], str]) -> str:
    """PromQL of the CPU (cores) and memory (bytes) requested per ``(cluster, node, resource)``
    (see CPU and memory in the module docstring): per pod, kube-scheduler's
    ``kube_pod_resource_request`` where it places the pod where ``kube_pod_info`` does, else
    kube-state-metrics' requests of its app containers and sidecars; finished pods left out.
    ``read(metric, matchers)`` is the selector as :func:`fleet_queries` reads it.

    One value per container (and per pod of kube-scheduler's) before the sum: two
    kube-state-metrics targets at once (a rolling update, two replicas) give each request twice
    (as the kubernetes-mixin rules deduplicate), and every kube-scheduler replica exports every
    pod."""
    cpu_mem = 'resource=~"cpu|memory"'
    sidecar = f'restart_policy="{SIDECAR_RESTART_POLICY}"'
    inits = placed_on_node("kube_pod_init_container_resource_requests", cpu_mem, max_age_s, read)
    containers = (
        "max by (cluster, node, namespace, pod, container, resource) "
        f"({placed_on_node(POD_REQUESTS, cpu_mem, max_age_s, read)} or ({inits} "
        f"and on (cluster, namespace, pod, container) {read('kube_pod_init_container_info', sidecar)}))"
    )
    scheduler = (
        "max by (cluster, node, namespace, pod, resource) "
        f"({read(SCHEDULER_REQUESTS, cpu_mem)} and on (cluster, namespace, pod, node) "
        f"{placed_on_node('kube_pod_info', '', max_age_s, read)})"
    )
    return (
        "sum by (cluster, node, resource) "
        f"((({containers} unless on (cluster, namespace, pod, resource) {scheduler}) "
        f"or {scheduler}) {_DONE})"
    )


_KSM_NAMES = (
    "kube_node_status_allocatable",
    "node_requests",
    "pod_gpu_requests",
    "pod_init_gpu_requests",
    "pod_sidecars",
    "pod_init_reported",
    "kube_pod_info",
    "kube_pod_annotations",
    "pod_phase",
    "phase_running",
    "node_gpus",
    "node_gpu_replicas",
    "node_unschedulable",
    "node_not_ready",
    "node_draining",
)
_QUERY_TAG = "fleetmind_query"


def ksm_fleet_query(queries: dict[str, str]) -> str:
    """The kube-state-metrics entries of ``queries`` (:func:`fleet_queries`) as **one** query,
    each answer tagged with ``fleetmind_query`` (see :data:`KSM_FLEET_QUERY`)."""
    return " or ".join(
        f'label_replace({queries[n]}, "{_QUERY_TAG}", "{n}", "", "")' for n in _KSM_NAMES
    )


FLEET_QUERIES: dict[str, str] = fleet_queries()
""":func:`fleet_queries` with the default bound on the age of a sample."""
KSM_FLEET_QUERY = ksm_fleet_query(FLEET_QUERIES)
"""The kube-state-metrics entries of :data:`FLEET_QUERIES` as **one** query, each answer tagged
with ``fleetmind_query``. One query sees whole scrapes only (Prometheus TSDB isolation, since 2.17,
prometheus/prometheus#6841), so a pod, its requests and its GPU-share annotation come from the same
kube-state-metrics scrape; four separate queries could each see a different one (a scrape committed
between them lists a new pod before its share is read, and its hold would end too early)."""
EXPORTER_POD = DCGM_EXPORTER_POD  # (the name doctor and the tests import)
_DCGM_SAMPLES = ("DCGM", "DCGM_FI_DEV_FB_FREE", "DCGM_EXP_XID_ERRORS_COUNT")

Sample = tuple[str, dict[str, str], float]
"""``(metric name, labels, value)``."""


# ----------------------------------------------------------------------------- exporter mode
class PrometheusSource(TelemetrySource):
    """Scrape ``url`` (a DCGM exporter, or anything serving the same series) on each snapshot,
    sending ``headers`` (``FLEETMIND_PROMETHEUS_HEADERS``) and the bearer token with each scrape;
    ``timeout_s``: each scrape's limit (s)."""

    name = "prometheus"

    def __init__(
        self,
        url: str,
        default_cluster: str = "local",
        timeout_s: float = 2.0,
        ttl_s: float = 5.0,
        bearer_token_file: str | None = None,
        ca_file: str | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(ttl_s)
        self.url = url
        self.shown_url = safe_uri(url)
        self.default_cluster = default_cluster
        self.bearer_token_file = bearer_token_file
        self.headers = dict(headers or {})
        self.timeout_s = timeout_s
        self._client = http_client(timeout_s, ca_file)

    def collect(self) -> FleetSnapshot:
        import httpx

        headers = {**self.headers, **bearer_headers(self.bearer_token_file)}
        read_ts = time.time()  # the snapshot's time: before the scrape, not after parsing it
        try:
            resp = self._client.get(self.url, headers=headers)
            resp.raise_for_status()
        except httpx.HTTPError as err:
            raise NotAvailableError(
                f"cannot scrape DCGM exporter at {self.shown_url}: "
                f"{request_problem(err, self.timeout_s, self.url)}"
            ) from None
        nodes = parse_dcgm(resp.text, self.default_cluster, exporter_node(self.url))
        return FleetSnapshot("prometheus", nodes, read_ts, received_ts=time.time())

    def close(self) -> None:
        super().close()
        self._client.close()


def exporter_node(url: str) -> str:
    """The node of a single exporter's series that name none (no usable ``Hostname``).

    * a loopback URL (``localhost``, ``127.0.0.1``: the default ``http://127.0.0.1:9400/metrics``):
      the node FleetMind runs on (:func:`~fleetmind.data.fleet_io.local_node_name`: ``NODE_NAME``,
      else the host name);
    * an IP address (in a pod, the exporter reached through the node's ``status.hostIP`` or a
      ``hostPort``): ``NODE_NAME`` when set (the downward API's ``spec.nodeName``: FleetMind runs
      beside the exporter), else the address;
    * a name (``http://gpu-node-0:9400/metrics``): that name, never this node for another's GPUs.
    """
    import os
    from urllib.parse import urlsplit

    host = (urlsplit(url).hostname or "").rstrip(".").lower()
    if not host or host == "localhost" or host.endswith(".localhost"):
        return local_node_name()
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        return host
    mapped = getattr(ip, "ipv4_mapped", None)
    if ip.is_loopback or (mapped is not None and mapped.is_loopback):
        return local_node_name()
    return (os.environ.get("NODE_NAME") or "").strip() or host


def parse_dcgm(
    text: str, default_cluster: str = "local", fallback_node: str | None = None
) -> list[NodeState]:
    """Parse DCGM-exporter exposition text into nodes with GPUs. ``fallback_node``: the node of
    series that name none (:func:`exporter_node`; default: the node FleetMind runs on).

    Raises:
        DataError: the text is not Prometheus exposition format.
    """
    from prometheus_client.parser import text_string_to_metric_families

    samples: list[Sample] = []
    # the node when the series name none (_node_name)
    local = {LOCAL_NODE: fallback_node or local_node_name()}
    try:
        for family in text_string_to_metric_families(text):
            for s in family.samples:
                if s.name in _FIELDS:
                    samples.append((s.name, {**s.labels, **local}, float(s.value)))
    except ValueError as err:
        raise DataError(
            f"DCGM exporter answered text that is not Prometheus format: {err}"
        ) from None
    return build_nodes(samples, [], default_cluster)


# ----------------------------------------------------------------------------- server mode
class PrometheusApiSource(TelemetrySource):
    """Every node of the fleet from a Prometheus server's HTTP API (four concurrent queries: the
    three DCGM entries of :func:`fleet_queries` and their kube-state-metrics entries joined as in
    :data:`KSM_FLEET_QUERY`); series older than ``max_age_s`` seconds are left out (0: only
    Prometheus's own 5-minute lookback applies). ``headers``: sent with every query
    (``FLEETMIND_PROMETHEUS_HEADERS``, e.g. Grafana Mimir's tenant ``X-Scope-OrgID``), beside the
    bearer token's ``Authorization``; ``timeout_s``: each request's limit (s)."""

    name = "prometheus"

    def __init__(
        self,
        url: str,
        default_cluster: str = "local",
        timeout_s: float = 2.0,
        ttl_s: float = 5.0,
        max_age_s: float = DEFAULT_MAX_AGE_S,
        bearer_token_file: str | None = None,
        ca_file: str | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(ttl_s)
        from concurrent.futures import ThreadPoolExecutor

        self.url = url.rstrip("/")
        self.shown_url = safe_uri(self.url)
        self.default_cluster = default_cluster
        self.max_age_s = max_age_s
        self.queries = fleet_queries(max_age_s)
        self.ksm_query = ksm_fleet_query(self.queries)
        self.bearer_token_file = bearer_token_file
        self.headers = dict(headers or {})
        self.timeout_s = timeout_s
        self._client = http_client(timeout_s, ca_file)
        self._pool = ThreadPoolExecutor(len(_DCGM_SAMPLES) + 1, thread_name_prefix="fleetmind-prom")
        self._clock_offset_s = 0.0  # Prometheus's clock minus FleetMind's, as the queries allow
        # that offset by the Date headers of this collect's answers: the largest (_note_date)
        self._date_offset_s: float | None = None
        self._date_lock = threading.Lock()  # the concurrent queries each note their answer's

    def query(self, promql: str, name: str | None = None, at: float | None = None) -> list[Sample]:
        """One instant query; its vector as samples (named ``name`` when given, else by
        ``__name__``), evaluated at ``at`` (Unix seconds, sent as the API's ``time`` parameter to
        the millisecond, with ``nocache=1``; ``None``: Prometheus's own now).

        ``nocache=1`` keeps VictoriaMetrics' vmselect from moving a ``time`` within its
        ``-search.latencyOffset`` (30 s by default) of its now back to now minus that offset
        (``app/vmselect/prometheus/prometheus.go``, "Adjust start time only if `nocache` arg isn't
        set"), which would date the data up to 30 s before ``at``; Prometheus and Thanos Query
        ignore a form parameter they do not know.

        Sends ``partial_response=false`` (Thanos Query then fails a query that a store did not
        answer instead of answering it without that store's series; Prometheus ignores the
        parameter) and ``deny_partial_response=1`` (VictoriaMetrics' vmselect then fails a query a
        vmstorage node did not answer); refuses an answer with ``warnings`` other than PromQL's
        own annotations (``PromQL info:``/``PromQL warning:`` about the expression) or with
        ``"isPartial": true`` (vmselect): see Partial answers in the module docstring.

        Raises:
            NotAvailableError: Prometheus cannot be reached, refuses the query, or answers
                something that is not a whole instant-query answer (the message says which: an
                HTTP status, a redirect, a body that is not JSON, a partial answer).
        """
        import httpx
        import msgspec

        headers = {**self.headers, **bearer_headers(self.bearer_token_file)}
        # Thanos Query and VictoriaMetrics cluster: fail rather than answer without a store
        form = {"query": promql, "partial_response": "false", "deny_partial_response": "1"}
        if at is not None:
            form["time"] = f"{at:.3f}"
            form["nocache"] = "1"  # VictoriaMetrics: evaluate at `time`, not now - latencyOffset
        try:
            with self._client.stream(
                "POST", self.url + "/api/v1/query", data=form, headers=headers
            ) as resp:
                headers_at = time.time()  # before the body: a slow download does not count
                resp.read()
        except httpx.HTTPError as err:
            raise NotAvailableError(
                f"cannot query Prometheus at {self.shown_url}: "
                f"{request_problem(err, self.timeout_s, self.url)}"
            ) from None
        try:
            body = msgspec.json.decode(resp.content)  # ~3x faster than json for 5 MB answers
        except msgspec.DecodeError:
            body = None
        problem = http_problem(resp, body)
        if problem is not None:
            raise NotAvailableError(f"Prometheus at {self.shown_url} {problem}")
        assert isinstance(body, dict)  # http_problem refuses any other answer
        self._note_date(resp.headers.get("date"), headers_at)
        data = body.get("data")
        result = data.get("result") if isinstance(data, dict) else None
        if not isinstance(data, dict) or not isinstance(result, list | None):
            raise NotAvailableError(
                f"Prometheus at {self.shown_url} answered a query with a body that is not an "
                "instant-query answer (api/v1/query: data.resultType, data.result)"
            )
        if data.get("resultType") != "vector":
            raise NotAvailableError(f"Prometheus answered {data.get('resultType')!r}, not a vector")
        out: list[Sample] = []
        for r in result or []:
            labels = r.get("metric") if isinstance(r, dict) else None
            if not isinstance(labels, dict) or not all(isinstance(v, str) for v in labels.values()):
                continue  # not a sample of a vector: skipped as a value that is not a number is
            labels = dict(labels)
            try:
                value = float(r["value"][1])
            except (KeyError, IndexError, TypeError, ValueError):
                continue
            tag = labels.pop(_QUERY_TAG, None)
            out.append((name or tag or labels.get("__name__", ""), labels, value))
        return out

    def _note_date(self, date: str | None, now: float) -> None:
        """Estimate Prometheus's clock offset (s, its minus FleetMind's) from an answer's HTTP
        ``Date`` header (RFC 9110 section 6.6.1, whole seconds; Go's net/http, which Prometheus,
        Thanos and VictoriaMetrics answer with, stamps it as it writes the headers) and ``now``,
        FleetMind's clock when those headers arrived; keep the largest estimate of the current
        :meth:`collect`. The time an answer takes to arrive can only lower the estimate (its
        ``Date`` was stamped that much before ``now``), so one slow answer among the four does
        not move it. Nothing when there is no header or it cannot be read."""
        if not date:
            return
        from email.utils import parsedate_to_datetime

        try:
            sent = parsedate_to_datetime(date).timestamp()
        except (TypeError, ValueError, IndexError, OverflowError):
            return
        seen = sent + 0.5 - now  # the header truncates to the second
        with self._date_lock:
            if self._date_offset_s is None or seen > self._date_offset_s:
                self._date_offset_s = seen

    def collect(self) -> FleetSnapshot:
        """Run the DCGM entries of :attr:`queries` and :attr:`ksm_query` concurrently and build
        the snapshot.

        Every query is evaluated at one instant: FleetMind's now, taken (to the millisecond)
        before they are sent, is the snapshot's ``collected_ts`` (its date, on FleetMind's clock,
        which the holds and the cache compare it with), and it goes to Prometheus as ``time``
        plus Prometheus's clock offset. That date is not when the answers (2-16 s later at
        1,000-5,000 nodes) were read, since the bound-pod grace and the "as of" times count from
        it. The time the last answer was read is its ``received_ts``, which the cache's TTL and
        stale bounds count from: a refresh slower than the TTL still serves the requests that
        follow it.

        The offset is the largest the HTTP ``Date`` headers of one collect's answers show
        (:meth:`_note_date`). Sent on FleetMind's clock alone, a FleetMind clock 2 min ahead of
        Prometheus's made every series look older than ``max_age_s`` to the fresh filter and gave
        an empty fleet without an error. The ``Date`` header costs no query: an extra ``time()``
        query would add a round trip before the four on every refresh (the path requests wait
        on). When the answers show an offset more than :data:`SKEW_TOLERANCE_S` from the one sent
        (the first read, or the clocks stepped), the queries run once more with it and the offset
        is logged; later refreshes send it from the start."""
        offset = self._clock_offset_s
        snap = self._collect_at(offset)
        seen = self._date_offset_s
        if seen is None or abs(seen - offset) <= SKEW_TOLERANCE_S:
            return snap
        self._clock_offset_s = seen
        log.warning(
            "telemetry prometheus: Prometheus at %s answers with a clock %.0f s %s FleetMind's "
            "(its HTTP Date header); fleet queries are now evaluated at Prometheus's time",
            self.shown_url,
            abs(seen),
            "behind" if seen < 0 else "ahead of",
        )
        return self._collect_at(seen)

    def _collect_at(self, offset: float) -> FleetSnapshot:
        """:meth:`collect` with the queries evaluated at FleetMind's now plus ``offset`` (s); the
        ``Date`` headers of these answers alone give :attr:`_date_offset_s`."""
        with self._date_lock:
            self._date_offset_s = None
        now = round(time.time(), 3)
        at = round(now + offset, 3)
        futures = {
            n: self._pool.submit(self.query, self.queries[n], _sample_name(n), at)
            for n in _DCGM_SAMPLES
        }
        ksm = self._pool.submit(self.query, self.ksm_query, None, at).result()
        dcgm = [x for n in _DCGM_SAMPLES for x in futures[n].result()]
        nodes = build_nodes(dcgm, ksm, self.default_cluster)
        return FleetSnapshot("prometheus", nodes, now, received_ts=time.time())

    def close(self) -> None:
        super().close()
        self._pool.shutdown(wait=False)
        self._client.close()


def _sample_name(query: str) -> str | None:
    """The name the samples of the DCGM entry ``query`` of :func:`fleet_queries` get: their own
    (``None``: ``__name__``) where the entry reads several fields, else the entry's name."""
    return None if query in ("DCGM", "DCGM_FI_DEV_FB_FREE") else query


ANNOTATION_PREFIXES = ("PromQL info:", "PromQL warning:")
"""How Prometheus's PromQL annotations begin (``util/annotations`` of prometheus/prometheus): notes
on the expression (a histogram with a malformed bucket, a rate over a name that is not a counter),
not data left out of the answer."""


def http_client(timeout_s: float, ca_file: str | None = None) -> Any:
    """An ``httpx.Client`` with ``timeout_s`` (s) that does not follow redirects and trusts
    httpx's CAs (``SSL_CERT_FILE`` or ``SSL_CERT_DIR`` when set, else certifi's bundle) and, when
    given, those of ``ca_file`` (a PEM bundle) too; proxies from the environment by Go's rules
    (:mod:`fleetmind.http_client`).

    Raises:
        ConfigError: ``ca_file`` cannot be read as PEM certificates, or a proxy variable names a
            proxy httpx cannot use.
    """
    import ssl

    import httpx

    if ca_file is None:
        return proxied_client(timeout=timeout_s)
    try:
        ctx = httpx.create_ssl_context()
        ctx.load_verify_locations(cafile=ca_file)
    except (OSError, ssl.SSLError) as err:
        raise ConfigError(
            f"FLEETMIND_PROMETHEUS_CA_FILE {ca_file!r} is not a readable PEM CA bundle: {err}"
        ) from None
    return proxied_client(timeout=timeout_s, verify=ctx)


def bearer_headers(token_file: str | None) -> dict[str, str]:
    """``Authorization: Bearer <token>`` read from ``token_file`` now (each request: a Kubernetes
    service-account token is rotated in place), or no header when ``token_file`` is None.

    Raises:
        NotAvailableError: the file cannot be read or is empty.
    """
    if token_file is None:
        return {}
    try:
        # a leading byte-order mark (a Windows editor's UTF-8) is no part of the token
        token = Path(token_file).read_text(encoding="utf-8").removeprefix("\ufeff").strip()
    except (OSError, UnicodeDecodeError) as err:
        raise NotAvailableError(
            f"cannot read FLEETMIND_PROMETHEUS_BEARER_TOKEN_FILE {token_file!r}: "
            f"{type(err).__name__}: {getattr(err, 'strerror', None) or _decode_problem(err)}"
        ) from None
    if not token or any(c in token for c in "\r\n"):
        raise NotAvailableError(
            f"FLEETMIND_PROMETHEUS_BEARER_TOKEN_FILE {token_file!r} holds no token (empty, or "
            "several lines)"
        )
    if not all("!" <= c <= "~" for c in token):  # the token itself is never shown
        raise NotAvailableError(
            f"FLEETMIND_PROMETHEUS_BEARER_TOKEN_FILE {token_file!r} holds a character that is not "
            "visible ASCII (a bearer token is b64token text, RFC 6750 section 2.1)"
        )
    return {"Authorization": f"Bearer {token}"}


def _decode_problem(err: Exception) -> str:
    """A file that is not UTF-8, said without quoting its bytes (they may be the token)."""
    if isinstance(err, UnicodeDecodeError):
        return f"not UTF-8 text (at byte {err.start})"
    return type(err).__name__


def request_problem(err: Exception, timeout_s: float | None = None, url: str = "") -> str:
    """An ``httpx`` error as a message: a protocol error this side made (an illegal header
    value) is named only, as its text quotes the header, ``Authorization`` included; a timeout
    says how long was waited (``timeout_s``, s) and which setting sets it (httpx's own text is
    only "timed out"); a connection that failed through a proxy names the proxy
    (:func:`fleetmind.http_client.proxy_note`; ``url``: the request's)."""
    import httpx

    if isinstance(err, httpx.LocalProtocolError):
        return "the request could not be sent (an invalid header value)"
    via = proxy_note(err, url)
    if isinstance(err, httpx.TimeoutException):
        what = "no connection" if isinstance(err, httpx.ConnectTimeout) else "no answer"
        within = f" within {timeout_s:g} s" if timeout_s is not None else ""
        return (
            f"{what}{within}{via} (the limit is FLEETMIND_TELEMETRY_TIMEOUT_S for the service, "
            "--timeout for fleetmind doctor)"
        )
    return safe_uri(str(err)) + via


def http_problem(resp: Any, body: Any) -> str | None:
    """Why an ``/api/v1/query`` answer cannot be used (the end of a sentence that begins
    "Prometheus at URL"), or None when it is a successful JSON answer.

    ``resp``: the ``httpx.Response``; ``body``: its JSON (None when it is not JSON). The status is
    read before the body: a 401 from an auth proxy, a proxy's HTML 502 or Prometheus's own
    ``404 page not found`` (the route prefix missing) is no JSON, and is reported as its status.
    An error status of a plain ``http://`` query sent through a proxy names the proxy, whose
    answer it may be (:func:`fleetmind.http_client.proxied_answer_note`), and gives no advice
    meant for Prometheus's answer alone (credentials for a 401 or 403).
    """
    code = resp.status_code
    by = "" if 200 <= code < 300 else _proxied_answer(resp)
    then = "; if it is Prometheus's, " if by else ": "
    if 300 <= code < 400:
        where = resp.headers.get("location")
        if not where:
            return f"answered HTTP {code} (a redirect) without a Location{by}"
        where = str(resp.url.join(where))  # a relative Location, from the query's URL
        base = where.split("?")[0].removesuffix("/api/v1/query")
        return (
            f"redirected to {safe_uri(where)} (HTTP {code}; a query is not followed){by}{then}"
            f"set FLEETMIND_PROMETHEUS_URL to {safe_uri(base)}"
        )
    if code in (401, 403):  # before a JSON error: Grafana Cloud's gateway answers one to a 401
        return _auth_problem(resp, body, by)
    if isinstance(body, dict) and body.get("status") == "error":
        return f"refused the query: {_clean(str(body.get('error') or code), _sent(resp), 500)}"
    if code == 404:
        return (
            f"answered HTTP 404 for /api/v1/query{by}{then}is the URL missing Prometheus's route "
            "prefix (--web.route-prefix / --web.external-url, e.g. http://host:9090/prometheus)?"
        )
    if code != 200:
        return f"answered {_status(resp)}{by}"
    if not isinstance(body, dict):
        kind = resp.headers.get("content-type", "no content type").split(";")[0]
        return f"answered HTTP 200 with a body that is not a JSON object ({_clean(kind)})"
    if body.get("status") != "success":
        why = str(body.get("error") or body.get("status"))
        return f"refused the query: {_clean(why, _sent(resp), 500)}"
    warnings = body.get("warnings") or []
    warnings = [str(w) for w in (warnings if isinstance(warnings, list) else [warnings])]
    partial = [w for w in warnings if not w.startswith(ANNOTATION_PREFIXES)]
    if partial:
        return (
            f"answered a partial result ({len(partial)} warning(s): "
            f"{_clean(partial[0], _sent(resp), 300)}); "
            "FleetMind does not place on a fleet with series missing"
        )
    if body.get("isPartial") is True:  # VictoriaMetrics cluster: a vmstorage node did not answer
        return (
            "answered a partial result (isPartial: true, a VictoriaMetrics vmstorage node did not "
            "answer); FleetMind does not place on a fleet with series missing"
        )
    return None


def _proxied_answer(resp: Any) -> str:
    """:func:`fleetmind.http_client.proxied_answer_note` for the request ``resp`` answers; ""
    for a response made without its request."""
    try:
        url = str(resp.request.url)
    except RuntimeError:
        return ""
    return proxied_answer_note(url)


def _status(resp: Any) -> str:
    """``HTTP <code> <reason phrase>``, the phrase (the server's own words) as :func:`_clean`
    shows it: printable only, 60 characters at most."""
    return f"HTTP {resp.status_code} {_clean(resp.reason_phrase or '', limit=60)}".rstrip()


_AWS_SIGNATURE_ERRORS = ("InvalidSignature", "SignatureDoesNotMatch")
"""``x-amzn-ErrorType`` prefixes of a SigV4 signature AWS computed otherwise: the signer's region,
host or service name is not the workspace's."""
_AWS_CREDENTIAL_ERRORS = ("ExpiredToken", "UnrecognizedClient", "InvalidClientTokenId")
"""``x-amzn-ErrorType`` prefixes of a signer whose AWS credentials expired or are unknown (AWS
"Common Errors": ``ExpiredTokenException``, ``UnrecognizedClientException``,
``InvalidClientTokenId``, each HTTP 403)."""


def _auth_problem(resp: Any, body: Any, by: str = "") -> str:
    """A 401 or 403 as a message: the start of what the server said (:func:`_said_text`, as
    :func:`_clean` shows it) and what it usually needs (:func:`_auth_hint`, matched on the server's text before any credential in it
    is masked). ``by``: the proxy the answer may come from (:func:`_proxied_answer`, "" when
    none); then an answer no server is recognised in gets that instead of the credentials
    advice (Squid's ``ERR_ACCESS_DENIED`` page is a 403 too)."""
    raw = _said_text(resp, body)
    said = _clean(raw, _sent(resp))
    words = " ".join(raw[:2000].split()).lower()
    hint = _auth_hint(words, resp.headers.get("x-amzn-errortype", ""))
    head = f"answered {_status(resp)}"
    if by and hint == _CREDENTIALS_HINT:
        return head + (f" (the answer said: {said})" if said else "") + by
    if said:
        head += f" (server said: {said})"
    return f"{head}: {hint}"


def _auth_hint(words: str, aws: str) -> str:
    """What a 401/403 usually needs, from the server's text (``words``: lower case, whitespace
    runs as one space) and Amazon's ``x-amzn-ErrorType`` (``aws``, "" when none). Grafana Mimir
    and Cortex answer ``no org id`` to a query without a tenant (weaveworks/common ``user``
    package, ``ErrNoOrgID``); Amazon Managed Service for Prometheus answers ``Missing
    Authentication Token`` (``MissingAuthenticationTokenException``) to a request not signed with
    AWS SigV4, ``InvalidSignatureException`` to one signed for another region or host,
    ``ExpiredTokenException`` / ``UnrecognizedClientException`` / ``InvalidClientTokenId`` to one
    signed with expired or unknown credentials, and ``AccessDeniedException`` to a signed one
    whose IAM identity may not ``aps:QueryMetrics``."""
    if "no org id" in words:
        return (
            "Grafana Mimir and Cortex need a tenant on every query: set "
            "FLEETMIND_PROMETHEUS_HEADERS=X-Scope-OrgID=<tenant>"
        )
    if aws.startswith(("MissingAuthenticationToken", "IncompleteSignature")) or (
        "missing authentication token" in words
    ):
        return (
            "Amazon Managed Service for Prometheus needs requests signed with AWS SigV4: "
            "run aws-sigv4-proxy beside FleetMind and set FLEETMIND_PROMETHEUS_URL to it"
        )
    if aws.startswith(_AWS_SIGNATURE_ERRORS):
        return (
            "the request was signed with AWS SigV4, but not as the workspace expects: "
            "aws-sigv4-proxy's --name aps, --region <region> and --host "
            "aps-workspaces.<region>.amazonaws.com must be the workspace's"
        )
    if aws.startswith(_AWS_CREDENTIAL_ERRORS):
        return (
            "the request was signed with AWS SigV4, but with credentials AWS does not accept "
            "(expired or unknown): renew those aws-sigv4-proxy signs with (the pod's IAM role, "
            "e.g. IRSA's web identity token, or its access keys)"
        )
    if aws.startswith("AccessDenied"):
        return (
            "the request was signed, but the AWS identity that signed it may not query "
            "this workspace: its IAM policy needs aps:QueryMetrics"
        )
    return _CREDENTIALS_HINT


_CREDENTIALS_HINT = (
    "it wants credentials (basic auth as user:password@ in "
    "FLEETMIND_PROMETHEUS_URL, a token in FLEETMIND_PROMETHEUS_BEARER_TOKEN_FILE, or a "
    "header in FLEETMIND_PROMETHEUS_HEADERS)"
)
"""What a 401 or 403 no server is recognised in usually needs (:func:`_auth_hint`)."""


_UNSECRET_HEADERS = frozenset(
    {"host", "accept", "accept-encoding", "connection", "user-agent", "content-length"}
    | {"content-type"}
)
"""Request headers httpx sets itself: their values are no credential."""


_AUTH_HEADERS = frozenset({"authorization", "proxy-authorization"})
"""Headers whose value is ``<scheme> <credential>`` (RFC 9110 section 11.6.2)."""


def _sent(resp: Any) -> list[str]:
    """What FleetMind sent that a server may echo and no message may show, longest first: every
    value of a header it added (``FLEETMIND_PROMETHEUS_HEADERS``, the bearer token's
    ``Authorization``, the Basic one httpx builds from the URL's ``user:password@``), of an
    ``Authorization`` of any scheme the credential after its scheme (the scheme stays readable:
    ``http_auth:Bearer ***``), a Basic credential without its ``=`` padding and decoded, with its
    password, and the URL's password, decoded and as written. Values under 3 characters are left
    (masking "1" would mask every "1")."""
    try:
        req = resp.request
    except RuntimeError:  # a Response built without its request
        return []
    raw_password = req.url.userinfo.decode("ascii", "replace").partition(":")[2]
    found = {req.url.password or "", raw_password}
    for name, value in req.headers.items():
        if name.lower() in _UNSECRET_HEADERS:
            continue
        scheme, _, cred = value.strip().partition(" ")
        cred = cred.strip()
        is_auth = name.lower() in _AUTH_HEADERS or scheme.lower() in ("basic", "bearer")
        if not is_auth or not cred:
            found.add(value)
            continue
        found.update({cred, cred.rstrip("=")})
        if scheme.lower() == "basic":
            try:
                pair = base64.b64decode(cred, validate=True).decode()
            except (ValueError, UnicodeDecodeError):
                continue
            found.update({pair, pair.partition(":")[2]})
    return sorted((v for v in found if len(v) >= 3), key=len, reverse=True)


def _said_text(resp: Any, body: Any) -> str:
    """What a reply's body says, unmasked and unshortened: a JSON body's ``error`` or
    ``message`` when it has one, else the text (an HTML page, e.g. an auth proxy's sign-in or
    error page: its ``<title>``, else its text without tags, :func:`_html_text`)."""
    text: Any = None
    if isinstance(body, dict):
        text = next((body[k] for k in ("error", "message", "Message") if body.get(k)), None)
    if not isinstance(text, str):
        try:
            text = resp.text
        except (UnicodeDecodeError, LookupError):
            return ""
        kind = resp.headers.get("content-type", "").lower()
        if "html" in kind or text.lstrip()[:1] == "<":
            text = _html_text(text)
    return text


HTML_READ_CHARS = 8192
"""How much of an HTML page :func:`_html_text` reads (characters): an auth proxy's title or error
sits near the top, and every scan of it is linear in this."""

_ASCII_LOWER = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")
"""Lower case for tag names that keeps every index (``str.lower`` may lengthen a character)."""

_OPEN_TITLE = re.compile(r"<title\b", re.I)
_OPEN_SCRIPT = re.compile(r"<(script|style)\b", re.I)


def _html_text(page: str) -> str:
    """An HTML page's ``<title>`` (oauth2-proxy's error page: ``403 Forbidden``), else its text:
    tags, comments, scripts and styles dropped (one left open: to the end), character references
    decoded. Only the first :data:`HTML_READ_CHARS` characters are read, and each is looked at a
    bounded number of times (no backtracking pattern: a page of ``<title>`` or ``<!--`` repeated
    costs what its length does)."""
    page = page[:HTML_READ_CHARS]
    lower = page.translate(_ASCII_LOWER)
    opening = _OPEN_TITLE.search(page)
    gt = lower.find(">", opening.end()) if opening else -1
    closing = _closing_tag(lower, "title", gt + 1) if gt >= 0 else None
    if closing is not None:
        title = _strip_tags(page[gt + 1 : closing[0]])
        if title.strip():
            return title
    kept, pos = [], 0
    while (found := _OPEN_SCRIPT.search(page, pos)) is not None:
        kept.append(page[pos : found.start()])
        closing = _closing_tag(lower, found.group(1).lower(), found.end())
        pos = len(page) if closing is None else closing[1]
    kept.append(page[pos:])
    return _strip_tags(" ".join(kept))


def _closing_tag(lower: str, name: str, pos: int) -> tuple[int, int] | None:
    """``(start, end)`` in ``lower`` of the first ``</name>`` (spaces allowed before ``>``) at or
    after ``pos``, or None."""
    tag = "</" + name
    while (start := lower.find(tag, pos)) >= 0:
        pos = start + len(tag)
        while pos < len(lower) and lower[pos].isspace():
            pos += 1
        if lower.startswith(">", pos):
            return start, pos + 1
    return None


def _strip_tags(text: str) -> str:
    """``text`` with each tag and comment as one space (a comment left open: to the end; a ``<``
    no ``>`` closes: kept), character references decoded; one pass, no backtracking."""
    out, pos = [], 0
    while (lt := text.find("<", pos)) >= 0:
        if text.startswith("<!--", lt):
            end = text.find("-->", lt + 4)
            stop = len(text) if end < 0 else end + 3
        else:
            end = text.find(">", lt + 1)
            if end < 0:
                break
            stop = end + 1
        out += [text[pos:lt], " "]
        pos = stop
    out.append(text[pos:])
    return html.unescape("".join(out))


SHORT_SECRET_CHARS = 8
"""A credential shorter than this (characters) is masked only as a whole token (no letter, digit
or ``_`` on either side): a password ``the`` leaves "other" and "authentication" readable."""


def _clean(text: str, secrets: Iterable[str] = (), limit: int = 200) -> str:
    """``text`` from a server as a message may show it: each of ``secrets`` (:func:`_sent`) as
    ``***`` (one under :data:`SHORT_SECRET_CHARS` characters only where it stands alone),
    printable characters only (a terminal escape is no part of it), whitespace runs as one
    space, URL credentials masked, at most ``limit`` characters."""
    for secret in secrets:
        if len(secret) >= SHORT_SECRET_CHARS:
            text = text.replace(secret, "***")
        else:
            text = re.sub(rf"(?<!\w){re.escape(secret)}(?!\w)", "***", text)
    text = " ".join("".join(c if c.isprintable() else " " for c in text[: limit * 4]).split())
    text = safe_uri(text)
    return text if len(text) <= limit else text[: limit - 3].rstrip() + "..."


def is_exporter_url(url: str) -> bool:
    """True for a ``/metrics`` URL (one exporter), False for a Prometheus server."""
    from urllib.parse import urlparse

    return urlparse(url).path.rstrip("/").endswith("/metrics")


# ----------------------------------------------------------------------------- shared parsing
def _gpu_indices(text: str) -> list[int]:
    out = []
    for part in re.split(r"[-,\s]+", text.strip()):
        if part.isdigit():
            out.append(int(part))
    return out


@dataclass
class _KsmView:
    """What kube-state-metrics says, per ``(cluster, node)`` and per pod (see :func:`build_nodes`)."""

    pod_node: dict[tuple[str, str], tuple[str, str]] = field(default_factory=dict)
    pod_by_name: dict[tuple[str, str], str] = field(default_factory=dict)
    """``(cluster, pod name) -> node``: two clusters may each run a pod of the same name (a
    DaemonSet pod's suffix is random per cluster, a StatefulSet's is not)."""
    daemonset: dict[tuple[str, str], str] = field(default_factory=dict)
    alloc: dict[tuple[str, str], dict[str, float]] = field(
        default_factory=lambda: defaultdict(dict)
    )
    requests: dict[tuple[str, str], dict[str, float]] = field(
        default_factory=lambda: defaultdict(lambda: defaultdict(float))
    )
    pod_requests: dict[tuple[str, str, str, str], dict[tuple[str, str, str], float]] = field(
        default_factory=lambda: defaultdict(dict)
    )
    """``(cluster, node, namespace, pod) -> {(metric, container, resource): value}`` of
    kube-state-metrics' CPU and memory requests (cores, bytes), containers' and init containers'
    (:func:`_add_pod_requests` sums them per node)."""
    scheduler_requests: dict[tuple[str, str, str, str], dict[str, float]] = field(
        default_factory=lambda: defaultdict(dict)
    )
    """``(cluster, node, namespace, pod) -> {resource: value}`` of kube-scheduler's
    ``kube_pod_resource_request`` (cores, bytes; see CPU and memory)."""
    shares: list[tuple[dict[str, str], int, list[int]]] = field(default_factory=list)
    gpu_count: dict[tuple[str, str], dict[str, float]] = field(
        default_factory=lambda: defaultdict(dict)
    )
    """``kube_node_status_capacity`` / ``_allocatable`` ``nvidia_com_gpu`` per node, by metric."""
    replicas: dict[tuple[str, str], int] = field(default_factory=dict)
    mig_replicas: dict[tuple[str, str], dict[str, int]] = field(
        default_factory=lambda: defaultdict(dict)
    )
    """``(cluster, node) -> {profile key: replicas}`` from ``nvidia.com/mig-<profile>.replicas``
    (:data:`MIG_REPLICAS_LABEL`; keys as :func:`profile_key` writes the profile)."""
    pod_uids: dict[tuple[str, str], set[str]] = field(default_factory=lambda: defaultdict(set))
    """``(cluster, node) -> uids`` of every running pod ``kube_pod_info`` places there (a pod
    deleted and created again under its name may show both incarnations for a scrape interval)."""
    pod_clusters: set[str] = field(default_factory=set)
    """Clusters with any ``kube_pod_info`` series (finished pods' included): there, a pod DCGM
    names that is not in ``running`` holds no GPU (:func:`_pod_running`)."""
    running: set[tuple[str, str, str]] = field(default_factory=set)
    """``(cluster, namespace, pod)`` of every pod ``kube_pod_info`` places on a node, finished
    pods left out (``pod_node`` without its cluster: two clusters may each run ``ml/train-0``)."""
    gpu_requests: dict[tuple[str, str, str, str], float] = field(
        default_factory=lambda: defaultdict(float)
    )
    """``(cluster, node, namespace, pod) -> nvidia.com/gpu`` devices the pod holds: the larger of
    its containers' and sidecars' requests and of each regular init container's plus the
    sidecars' (:func:`pod_gpu_devices`; see Init containers in the module docstring), finished
    pods left out."""
    app_gpus: dict[tuple[str, str, str, str], float] = field(
        default_factory=lambda: defaultdict(float)
    )
    """``(cluster, node, namespace, pod) -> nvidia.com/gpu`` its containers request
    (``kube_pod_container_resource_requests``, summed)."""
    init_gpus: dict[tuple[str, str, str, str], dict[str, float]] = field(
        default_factory=lambda: defaultdict(dict)
    )
    """``(cluster, node, namespace, pod) -> {init container: nvidia.com/gpu}``
    (``kube_pod_init_container_resource_requests``)."""
    sidecars: set[tuple[str, str, str, str]] = field(default_factory=set)
    """``(cluster, namespace, pod, container)`` of the init containers that are sidecars
    (``kube_pod_init_container_info{restart_policy="Always"}``)."""
    init_reported: set[tuple[str, str, str]] = field(default_factory=set)
    """``(cluster, namespace, pod)`` of the pods with any ``kube_pod_init_container_info`` series
    (the kubelet reported their init containers' statuses; server mode asks only about pods not
    yet running that request init GPUs)."""
    init_unknown: set[tuple[str, str, str, str]] = field(default_factory=set)
    """``(cluster, node, namespace, pod)`` of the pods not yet running (``unstarted``) whose init
    containers request ``nvidia.com/gpu`` but which have no ``kube_pod_init_container_info``
    series yet: which are sidecars is unknown, so every init container is read as one, an upper
    bound of the kubelet's count (see Init containers)."""
    phase_clusters: set[str] = field(default_factory=set)
    """Clusters with any ``kube_pod_status_phase{phase="Pending"|"Running"} == 1`` series: there a
    listed pod in phase ``Pending`` or ``Unknown`` is not yet running (``NodeState.pending_pods``)."""
    unstarted: set[tuple[str, str, str]] = field(default_factory=set)
    """``(cluster, namespace, pod)`` of the pods in phase ``Pending`` or ``Unknown``."""
    cordoned: set[tuple[str, str]] = field(default_factory=set)
    """``(cluster, node)`` of the cordoned nodes (:func:`_node_status`)."""
    not_ready: dict[tuple[str, str], str] = field(default_factory=dict)
    """``(cluster, node) -> "false" | "unknown"``: the nodes not Ready (:func:`_node_status`)."""
    draining: dict[tuple[str, str], str] = field(default_factory=dict)
    """``(cluster, node) -> taint key``: the nodes an autoscaler is removing
    (:func:`_draining_nodes`)."""
    device_plugin: dict[tuple[str, str], str] = field(default_factory=dict)
    """``(cluster, node) -> value`` of :data:`DEVICE_PLUGIN_LABEL`, where exported."""
    product: dict[tuple[str, str], str] = field(default_factory=dict)
    """``(cluster, node) -> value`` of :data:`PRODUCT_LABEL`, where exported."""


def _read_node_gpus(counted: dict[str, float], lab: dict[str, str], v: float) -> None:
    """One ``node_gpus`` sample into the node's ``counted``: ``nvidia.com/gpu`` (a sample without
    ``resource`` is one) by metric name; the other GPU resources' allocatable as their largest
    finite value under :data:`OTHER_GPU_ALLOCATABLE`, and their capacity or allocatable under
    :data:`OTHER_GPU_DEVICES`."""
    name = lab.get("__name__", "")
    if lab.get("resource", "nvidia_com_gpu") == "nvidia_com_gpu":
        counted[name] = v
        return
    if name in ("kube_node_status_capacity", "kube_node_status_allocatable") and math.isfinite(v):
        counted[OTHER_GPU_DEVICES] = max(v, counted.get(OTHER_GPU_DEVICES, 0.0))
    if name == "kube_node_status_allocatable" and math.isfinite(v):
        counted[OTHER_GPU_ALLOCATABLE] = max(v, counted.get(OTHER_GPU_ALLOCATABLE, 0.0))


def _read_node_labels(view: _KsmView, where: tuple[str, str], lab: dict[str, str]) -> None:
    """One ``node_gpu_replicas`` sample (``kube_node_labels``) of node ``where`` into ``view``:
    device-plugin state, product (:data:`PRODUCT_LABEL`, else ``-MIG-<profile>`` from
    :data:`GKE_PARTITION_LABEL`), replicas per GPU and per MIG profile."""
    if lab.get(DEVICE_PLUGIN_LABEL):
        view.device_plugin[where] = lab[DEVICE_PLUGIN_LABEL]
    if lab.get(PRODUCT_LABEL):
        view.product[where] = lab[PRODUCT_LABEL]
    elif lab.get(GKE_PARTITION_LABEL):  # GKE runs no GPU feature discovery
        view.product.setdefault(where, MIG_SUFFIX + lab[GKE_PARTITION_LABEL])
    reps = [lab.get(k, "") for k in (REPLICAS_LABEL, GKE_REPLICAS_LABEL)]
    reps = [int(r) for r in reps if r.isdigit() and int(r) >= 1]
    if reps:
        view.replicas[where] = max(reps)
    for label, value in lab.items():
        mig = MIG_REPLICAS_LABEL.fullmatch(label)
        if mig and value.isdigit() and int(value) >= 1:
            view.mig_replicas[where][mig.group(1)] = int(value)


def _object_labels(lab: dict[str, str], unplaced: bool = False) -> dict[str, str]:
    """A kube-state-metrics series' labels with its own value of each :data:`KSM_OBJECT_LABELS`
    label: ``exported_<label>`` where set (scraped with ``honor_labels: false``), as
    :func:`ksm_object_labels` reads them in PromQL; ``node`` emptied when ``unplaced`` (the
    target's own ``node`` on a pod not yet scheduled, :func:`placed_on_node`)."""
    own = {k: lab[f"exported_{k}"] for k in KSM_OBJECT_LABELS if lab.get(f"exported_{k}")}
    if unplaced:
        own["node"] = ""
    return {**lab, **own} if own else lab


def _ksm_object_series(ksm: list[Sample]) -> list[Sample]:
    """``ksm`` with each series' object labels (:func:`_object_labels`): on a scrape target that
    renames ``node`` (any ``kube_pod_info`` of it with ``exported_node``), a series of
    :data:`KSM_PLACED` without ``exported_node`` is on no node, as :func:`placed_on_node` reads it."""
    renaming = {
        tuple(lab.get(k, "") for k in _KSM_TARGET)
        for name, lab, _ in ksm
        if name == "kube_pod_info" and lab.get("exported_node")
    }
    return [
        (
            name,
            _object_labels(
                lab,
                unplaced=name in KSM_PLACED
                and not lab.get("exported_node")
                and tuple(lab.get(k, "") for k in _KSM_TARGET) in renaming,
            ),
            v,
        )
        for name, lab, v in ksm
    ]


def _with_node_gpus(ksm: list[Sample]) -> list[Sample]:
    """``ksm`` plus each raw ``kube_node_status_capacity`` / ``_allocatable`` series of
    ``nvidia_com_gpu`` as :func:`fleet_queries`' ``node_gpus`` answers it (the metric in
    ``__name__``), so that raw kube-state-metrics series count the node's GPUs too."""
    names = ("kube_node_status_capacity", "kube_node_status_allocatable")
    return ksm + [
        ("node_gpus", {**lab, "__name__": name}, v)
        for name, lab, v in ksm
        if name in names and re.fullmatch(GPU_RESOURCES, lab.get("resource", ""))
    ]


def _read_ksm(ksm: list[Sample], default_cluster: str) -> _KsmView:
    """Finished pods left out: pod placement, requests, allocatable and GPU shares."""
    ksm = _with_node_gpus(_ksm_object_series(ksm))
    finished = {
        (lab.get("namespace", ""), lab.get("pod", ""))
        for name, lab, v in ksm
        if name == "kube_pod_status_phase"
        and v == 1
        and lab.get("phase") in ("Succeeded", "Failed")
    }
    view = _KsmView()
    for name, lab, v in ksm:
        cluster = lab.get("cluster") or default_cluster
        key = (lab.get("namespace", ""), lab.get("pod", ""))
        if name == "kube_pod_info":
            view.pod_clusters.add(cluster)
        if name in ("kube_pod_init_container_info", "pod_init_reported"):
            view.init_reported.add((cluster, *key))
        if name == "phase_running":  # a count of running pods per cluster
            view.phase_clusters.add(cluster)
        elif name in ("kube_pod_status_phase", "pod_phase") and v == 1:
            if lab.get("phase") in ("Pending", "Running"):
                view.phase_clusters.add(cluster)
            if lab.get("phase") in ("Pending", "Unknown"):
                view.unstarted.add((cluster, *key))
        if name in _NODE_RESOURCES and lab.get("node"):  # the node is listed either way
            _read_node_resource(view.alloc[(cluster, lab["node"])], name, lab, v)
        elif name == "kube_pod_info" and lab.get("node") and key not in finished:
            view.pod_node[key] = (cluster, lab["node"])
            view.running.add((cluster, *key))
            view.pod_by_name.setdefault((cluster, key[1]), lab["node"])
            if lab.get("uid"):
                view.pod_uids[(cluster, lab["node"])].add(lab["uid"])
            if lab.get("created_by_kind"):
                view.daemonset[key] = lab["created_by_kind"]
        elif _is_pod_request(name, lab) and key not in finished and lab.get("node"):
            _read_pod_request(view, name, lab, v, cluster)  # CPU, memory; containers' GPUs
        elif name == "pod_gpu_requests" and lab.get("node"):  # summed per pod by Prometheus
            if math.isfinite(v):
                view.app_gpus[(cluster, lab["node"], *key)] += v
        elif (
            name in ("kube_pod_init_container_resource_requests", "pod_init_gpu_requests")
            and key not in finished
            and lab.get("node")
            and lab.get("resource", "nvidia_com_gpu") == "nvidia_com_gpu"
            and math.isfinite(v)
        ):  # one value per init container (see Init containers); CPU and memory are not read
            own = view.init_gpus[(cluster, lab["node"], *key)]
            own[lab.get("container", "")] = max(v, own.get(lab.get("container", ""), 0.0))
        elif name == "pod_sidecars" or (
            name == "kube_pod_init_container_info"
            and lab.get("restart_policy") == SIDECAR_RESTART_POLICY
        ):
            view.sidecars.add((cluster, *key, lab.get("container", "")))
        elif name == "node_requests" and lab.get("node"):  # summed per node by Prometheus
            view.requests[(cluster, lab["node"])][lab.get("resource", "")] += v
        elif name == "node_gpus" and lab.get("node"):  # NaN/Inf: add_missing_gpus adds none
            _read_node_gpus(view.gpu_count[(cluster, lab["node"])], lab, v)
        elif name == "node_gpu_replicas" and lab.get("node"):
            _read_node_labels(view, (cluster, lab["node"]), lab)
        elif name == "kube_pod_annotations" and key not in finished and lab.get(ANN_MILLI):
            milli = share_milli(lab[ANN_MILLI])
            if milli is None:
                continue
            view.shares.append((lab, milli, _gpu_indices(lab.get(ANN_INDEX, ""))))
    for where in {*view.app_gpus, *view.init_gpus}:
        c, _, ns, pod = where
        inits = view.init_gpus.get(where, {})
        if (
            (c, ns, pod) in view.unstarted
            and (c, ns, pod) not in view.init_reported
            and any(v > 0 for v in inits.values())
        ):
            # which init containers are sidecars is not known yet: read every one as a sidecar,
            # an upper bound of the kubelet's count (see Init containers)
            view.init_unknown.add(where)
            sidecars = dict(inits)
        else:
            sidecars = {n: v for n, v in inits.items() if (c, ns, pod, n) in view.sidecars}
        regular = [v for n, v in inits.items() if n not in sidecars]
        view.gpu_requests[where] = pod_gpu_devices(
            view.app_gpus.get(where, 0.0), regular, sum(sidecars.values())
        )
    _add_pod_requests(view)
    view.cordoned, view.not_ready = _node_status(ksm, default_cluster)
    view.draining = _draining_nodes(ksm, default_cluster)
    return view


_NODE_RESOURCES = ("kube_node_status_allocatable", "kube_node_status_capacity")


def _read_node_resource(res: dict[str, float], name: str, lab: dict[str, str], v: float) -> None:
    """One ``kube_node_status_allocatable`` or ``_capacity`` sample (``name``) into its node's
    ``res`` (``_KsmView.alloc``): the allocatable of CPU and memory, and of other vendors'
    accelerators (:func:`~fleetmind.data.graph_build.is_other_device`) the larger of allocatable
    and capacity, as :func:`fleet_queries` reads them: a device plugin takes an unhealthy device
    out of allocatable only, so a node of 8 unhealthy AMD GPUs (capacity 8, allocatable 0) stays
    an accelerator node. NaN or +-Inf is no reading of the resource."""
    r = lab.get("resource", "")
    if not math.isfinite(v):
        return
    if is_other_device(r):
        res[r] = max(v, res.get(r, v))
    elif name == "kube_node_status_allocatable":
        res[r] = v


def _is_pod_request(name: str, lab: dict[str, str]) -> bool:
    """Whether a raw series is read by :func:`_read_pod_request`: an app container's request (any
    resource), an init container's or kube-scheduler's CPU or memory request."""
    if name == POD_REQUESTS:
        return True
    cpu_mem = lab.get("resource") in ("cpu", "memory")
    return cpu_mem and name in ("kube_pod_init_container_resource_requests", SCHEDULER_REQUESTS)


def _read_pod_request(
    view: _KsmView, name: str, lab: dict[str, str], v: float, cluster: str
) -> None:
    """One request series (:func:`_is_pod_request`) of a pod placed on ``lab["node"]``: CPU and
    memory kept per pod (cores, bytes; one value per container and resource, as a second
    kube-state-metrics target repeats them) for :func:`_add_pod_requests`; another resource of an
    app container added to the node's sum, an ``nvidia_com_gpu`` one to the pod's GPUs too."""
    where = (cluster, lab["node"], lab.get("namespace", ""), lab.get("pod", ""))
    resource = lab.get("resource", "")
    if name == SCHEDULER_REQUESTS:  # one per kube-scheduler replica: the largest
        own = view.scheduler_requests[where]
        own[resource] = max(own.get(resource, v), v)
    elif resource in ("cpu", "memory"):
        view.pod_requests[where][(name, lab.get("container", ""), resource)] = v
    else:
        view.requests[(cluster, lab["node"])][resource] += v
        if resource == "nvidia_com_gpu" and math.isfinite(v):
            view.app_gpus[where] += v


def _add_pod_requests(view: _KsmView) -> None:
    """Add each pod's CPU and memory request (cores, bytes) to its node's sum (``view.requests``),
    as kube-scheduler counts it where telemetry can tell (see CPU and memory): kube-scheduler's
    own ``kube_pod_resource_request`` where it places the pod where ``kube_pod_info`` does, else
    its app containers' requests plus its sidecars' (init containers that
    ``kube_pod_init_container_info{restart_policy="Always"}`` names). A NaN or infinite request
    stays in the node's sum: its free CPU or memory is then unknown, and build_nodes shows none
    free."""
    for where in {*view.pod_requests, *view.scheduler_requests}:
        c, node, ns, pod = where
        placed = view.pod_node.get((ns, pod)) == (c, node)
        scheduler = view.scheduler_requests.get(where, {}) if placed else {}
        for resource in ("cpu", "memory"):
            if resource in scheduler:
                view.requests[(c, node)][resource] += scheduler[resource]
                continue
            own = [
                v
                for (name, container, r), v in view.pod_requests.get(where, {}).items()
                if r == resource
                and (name == POD_REQUESTS or (c, ns, pod, container) in view.sidecars)
            ]
            if own:
                view.requests[(c, node)][resource] += sum(own)


def _node_status(
    ksm: list[Sample], default_cluster: str
) -> tuple[set[tuple[str, str]], dict[tuple[str, str], str]]:
    """The cordoned nodes and the not-Ready ones (``(cluster, node)`` -> ``"false"`` or
    ``"unknown"``) from kube-state-metrics' ``kube_node_spec_unschedulable`` (1: cordoned) and
    ``kube_node_status_condition{condition="Ready",status}`` (1 on the current status), or
    :func:`fleet_queries`' ``node_unschedulable`` / ``node_not_ready`` answers."""
    cordoned: set[tuple[str, str]] = set()
    not_ready: dict[tuple[str, str], str] = {}
    for name, lab, v in ksm:
        where = (lab.get("cluster") or default_cluster, lab.get("node", ""))
        if not where[1] or v != 1:
            continue
        if name in ("kube_node_spec_unschedulable", "node_unschedulable"):
            cordoned.add(where)
        elif name in ("kube_node_status_condition", "node_not_ready"):
            status = lab.get("status", "").lower()
            if lab.get("condition", "Ready") == "Ready" and status in ("false", "unknown"):
                not_ready[where] = status
    return cordoned, not_ready


def _draining_nodes(ksm: list[Sample], default_cluster: str) -> dict[tuple[str, str], str]:
    """``(cluster, node) -> taint key`` of the nodes an autoscaler is removing: kube-state-metrics'
    ``kube_node_spec_taint{node, key, value, effect}`` (1 per taint the node has) of a
    :data:`DRAINING_TAINTS` key with a :data:`DRAINING_EFFECTS` effect, or :func:`fleet_queries`'
    ``node_draining`` answers (already only those)."""
    draining: dict[tuple[str, str], str] = {}
    for name, lab, v in ksm:
        where = (lab.get("cluster") or default_cluster, lab.get("node", ""))
        if not where[1] or v != 1 or lab.get("key") not in DRAINING_TAINTS:
            continue
        if name == "node_draining" or (
            name == "kube_node_spec_taint" and lab.get("effect") in DRAINING_EFFECTS
        ):
            draining[where] = lab["key"]
    return draining


def pod_gpu_devices(containers: float, regular_inits: Iterable[float], sidecars: float) -> float:
    """``nvidia.com/gpu`` devices a pod holds (see Init containers in the module docstring): the
    larger of its containers' requests plus its sidecars' and of each regular init container's
    plus the sidecars', as kube-scheduler's ``PodRequests`` counts them with every sidecar
    started before every regular init container (kube-state-metrics gives no order: an upper
    bound). All are device counts."""
    return max([containers + sidecars, *(v + sidecars for v in regular_inits)])


def _exporter_pods(view: _KsmView, dcgm: list[Sample]) -> set[str]:
    """The exporter's own pods: DaemonSet pods, pods named by Hostname, pods next to an
    exported_pod."""
    own_pods = {key[1] for key, kind in view.daemonset.items() if kind == "DaemonSet"}
    for _, lab, _ in dcgm:
        if lab.get("exported_pod") and lab.get("pod"):
            own_pods.add(lab["pod"])
        for h in ("Hostname", "hostname"):
            if lab.get(h):
                own_pods.add(lab[h])
    return own_pods


def _target_nodes(
    dcgm: list[Sample],
    view: _KsmView,
    own_pods: set[str],
    default_cluster: str,
    by_host: bool = False,
) -> dict[tuple[str, ...], str]:
    """``(cluster, instance) -> node`` (``by_host``: ``(cluster, instance, Hostname)``, see
    :func:`_host_of`) of each scrape target whose pods kube-state-metrics places: the exporter's own pod (its target's ``pod``)
    first, else a workload pod it names (a pod holding a GPU runs on that GPU's node)."""
    found: dict[tuple[str, ...], tuple[int, str]] = {}
    for _, lab, _ in dcgm:
        inst = lab.get("instance")
        if not inst:
            continue
        cluster = lab.get("cluster") or default_cluster
        target = (cluster, inst, _host_of(lab)) if by_host else (cluster, inst)
        pod, exported = lab.get("pod", ""), lab.get("exported_pod", "")
        own = 0 if pod in own_pods or EXPORTER_POD.match(pod) else 1
        for rank, key in (
            (own, (lab.get("namespace", ""), pod)),
            (2, (lab.get("exported_namespace", ""), exported)),
        ):
            where = view.pod_node.get(key) if key[1] else None
            if where is not None and where[0] == cluster:
                if rank < found.get(target, (3, ""))[0]:
                    found[target] = (rank, where[1])
                break
    return {key: node for key, (_, node) in found.items()}


def _host_of(lab: dict[str, str]) -> str:
    """A DCGM series' ``Hostname`` (or ``hostname``; ``""``: none): with ``instance``, which
    exporter of a scrape address it came from (the DCGM entries keep no ``job``)."""
    return lab.get("Hostname") or lab.get("hostname") or ""


def _series_nodes(
    dcgm: list[Sample], view: _KsmView, own_pods: set[str], default_cluster: str
) -> list[tuple[str, str]]:
    """``(cluster, node)`` of each DCGM sample (see the module docstring, Node name).

    A name that series of different machines carry (one GPU index with two UUIDs, or scrape
    targets that kube-state-metrics places on different nodes: dcgm-exporter reading a remote host
    engine names every node after the engine's address) is not used: each target's series go to
    its node (:func:`_target_nodes`), else to the target's address, so two GPUs never merge.

    A name that kube-state-metrics' nodes (``kube_node_status_allocatable``/``_capacity``) do
    not hold, from a target it places on one of them, is that node: with the dcgm-exporter chart's
    ``hostNetwork: true`` ``Hostname`` is the OS host name, which differs from the Kubernetes
    node name where the kubelet runs with ``--hostname-override`` (EKS: ``ip-10-0-1-5`` on node
    ``ip-10-0-1-5.ec2.internal``). Without kube-state-metrics' nodes the name is kept.
    """
    named = []
    uuids: dict[tuple[str, str, str], set[str]] = defaultdict(set)
    machines: dict[tuple[str, str], set[str]] = defaultdict(set)
    targets = _target_nodes(dcgm, view, own_pods, default_cluster)
    known = set(view.alloc) | set(view.gpu_count)
    placed = _target_nodes(dcgm, view, own_pods, default_cluster, by_host=True) if known else {}
    for _, lab, _ in dcgm:
        cluster = lab.get("cluster") or default_cluster
        host = _node_name(lab, view.pod_by_name, cluster)
        if (cluster, host) not in known:  # hostNetwork: the OS host name (see above)
            own = placed.get((cluster, lab.get("instance", ""), _host_of(lab)))
            host = own if own is not None and (cluster, own) in known else host
        named.append((cluster, host))
        if lab.get("UUID"):
            uuids[(cluster, host, lab.get("gpu", ""))].add(lab["UUID"])
        target = targets.get((cluster, lab.get("instance", "")))
        if target is not None:
            machines[(cluster, host)].add(target)
    shared = {(c, h) for (c, h, _), u in uuids.items() if len(u) > 1}
    shared |= {key for key, nodes in machines.items() if len(nodes) > 1}
    if not shared:
        return named
    out = []
    for (_, lab, _), (cluster, host) in zip(dcgm, named, strict=True):
        inst = lab.get("instance")
        if (cluster, host) in shared and inst:
            host = targets.get((cluster, inst)) or instance_address(inst)
        out.append((cluster, host))
    return out


def _read_dcgm(
    dcgm: list[Sample], view: _KsmView, own_pods: set[str], default_cluster: str
) -> tuple[dict[tuple[str, str, int], dict[str, Any]], set[tuple[str, str]]]:
    """One record per ``(cluster, node, gpu[, MIG instance])``, and the nodes whose exporter
    serves the windowed ``DCGM_EXP_XID_ERRORS_COUNT``. Blank and out-of-range values are no
    reading (:func:`is_reading`); a physical GPU with MIG instances is left out
    (:func:`_drop_mig_parents`)."""
    gpus: dict[tuple[str, str, int], dict[str, Any]] = defaultdict(dict)
    windowed: set[tuple[str, str]] = set()
    where = _series_nodes(dcgm, view, own_pods, default_cluster)
    for (name, lab, v), (cluster, host) in zip(dcgm, where, strict=True):
        field_name = _FIELDS.get(name)
        if field_name is None:
            continue
        try:
            phys = int(lab.get("gpu", "0"))
        except ValueError:
            continue
        gi = lab.get("GPU_I_ID")
        idx = phys
        if gi not in (None, ""):
            try:
                idx = 100 * (phys + 1) + int(gi)
            except ValueError:
                continue
        g = gpus[(cluster, host, idx)]
        if field_name == "xid_count":
            windowed.add((cluster, host))
            try:
                xid = int(lab.get("xid", ""))
            except ValueError:
                continue
            if is_xid_count(v) and xid in HARDWARE_XIDS:
                g.setdefault("hw_xids", set()).add(xid)
            continue
        if is_reading(field_name, v):
            g[field_name] = v
        elif field_name == "free":
            g["free_blank"] = True  # exported with no reading: memory unknown, nothing free
        if idx != phys:
            g["parent"] = phys
            g.setdefault("profile", gi)
            if lab.get("GPU_I_PROFILE"):
                g["profile"] = lab["GPU_I_PROFILE"]
        if lab.get("modelName") and "model" not in g:
            g["model"] = lab["modelName"]
        if lab.get("UUID") and "uuid" not in g:
            g["uuid"] = lab["UUID"]
        if lab.get(VGPU_LABEL):
            g["vgpu"] = True  # exported by --kubernetes-virtual-gpus (see Virtual GPUs)
        pod = workload_pod(lab, own_pods)
        if pod and _pod_running(pod, cluster, view):
            # one replica per (pod, vgpu): --kubernetes-virtual-gpus exports one series per
            # replica a pod holds, and the device plugin may give one pod two replicas of a GPU
            g.setdefault("pods", set()).add((pod, lab.get(VGPU_LABEL, "")))
    _drop_mig_parents(gpus)
    return gpus, windowed


def _pod_running(pod: str, cluster: str, view: _KsmView) -> bool:
    """Whether the workload pod ``pod`` (``namespace/name``) that a DCGM series names may hold the
    GPU: kube-state-metrics places it, not finished, in ``cluster``; or kube-state-metrics has no
    pods of ``cluster`` to judge by (exporter mode, or no ``kube_pod_info``), and DCGM is trusted.

    The kubelet's podresources ``List()`` keeps reporting the devices of pods in a terminal phase
    (kubernetes/kubernetes#119423), so dcgm-exporter keeps a ``Succeeded`` Job pod's name on its
    GPU until the pod is deleted (NVIDIA/dcgm-exporter#140); :func:`_read_ksm` leaves
    ``Succeeded``/``Failed`` pods (and deleted ones, which it no longer lists) out of
    ``view.running``.
    """
    if cluster not in view.pod_clusters:
        return True
    ns, _, name = pod.partition("/")
    return (cluster, ns, name) in view.running


def _drop_mig_parents(gpus: dict[tuple[str, str, int], dict[str, Any]]) -> None:
    """Leave out the record of a physical GPU that has MIG instances (dcgm-exporter ``-d a``
    exports both, ``handleGPUOptions`` in NVIDIA/dcgm-exporter
    ``internal/pkg/devicemonitoring/device_monitoring.go``): its framebuffer is its instances'.
    A hardware XID it had marks each of its instances."""
    parents = {(c, h, g["parent"]) for (c, h, _), g in gpus.items() if "parent" in g}
    for key in parents & gpus.keys():
        phys = gpus.pop(key)
        for (c, h, _), g in gpus.items():
            if (c, h) != key[:2] or g.get("parent") != key[2]:
                continue
            if phys.get("hw_xids"):
                g.setdefault("hw_xids", set()).update(phys["hw_xids"])
            if is_hardware_xid(phys.get("xid")) and not is_hardware_xid(g.get("xid")):
                g["xid"] = phys["xid"]


def share_milli(text: str) -> int | None:
    """The GPU share an ``alibabacloud.com/gpu-milli`` annotation holds (milli-GPU, 1..1000), or
    ``None`` when it holds none: not a number, NaN or infinite (``"inf"``, ``"1e999"``), or
    outside 1..1000 once a fraction is cut to whole milli (0 is a CPU-only pod; a negative or
    larger value holds no share). Any number Python's ``float`` reads is taken (``"1e3"``,
    ``"+1000"``, ``"999.9"`` -> 999, ``"1000.5"`` -> 1000): more lenient than the extender, which
    refuses a pod whose annotation is not an integer (:mod:`fleetmind.serving.scheduler.extender`),
    as a pod another scheduler placed holds its GPUs whatever FleetMind would have said."""
    try:
        value = float(text)
    except ValueError:
        return None
    if not math.isfinite(value):
        return None
    milli = int(value)
    return milli if 1 <= milli <= 1000 else None


_WARNED_MEMORY: set[tuple[str, str]] = set()
"""``(cluster, node)`` pairs :func:`_warn_unknown_memory` has logged (once each per process)."""


def _warn_unknown_memory(gpus: dict[tuple[str, str, int], dict[str, Any]]) -> None:
    """Log a warning, once per node, for a node whose GPUs export ``DCGM_FI_DEV_FB_USED`` but
    neither ``DCGM_FI_DEV_FB_FREE`` nor ``DCGM_FI_DEV_FB_TOTAL`` (a dcgm-exporter ``-f`` counters
    CSV without them; the upstream ``etc/default-counters.csv`` has FB_FREE): their framebuffer
    size is unknown (``mem_total_mib`` ``None``), and such a GPU no pod holds counts free when its
    utilisation is under :data:`~fleetmind.serving.telemetry.base.IDLE_UTIL_PCT`."""
    for (cluster, host, _), g in gpus.items():
        if not _memory_unknown(g):
            continue
        if (cluster, host) in _WARNED_MEMORY:
            continue
        _WARNED_MEMORY.add((cluster, host))
        log.warning(
            "node %s/%s: its DCGM exporter exports DCGM_FI_DEV_FB_USED but not "
            "DCGM_FI_DEV_FB_FREE (nor DCGM_FI_DEV_FB_TOTAL): GPU memory is unknown there, and a "
            "GPU no pod holds counts free when its utilisation is under %g %%; add "
            "DCGM_FI_DEV_FB_FREE to the exporter's counters CSV",
            terminal_safe(cluster),  # Prometheus label values: a newline would forge a line
            terminal_safe(host),
            IDLE_UTIL_PCT,
        )


def _memory_unknown(g: dict[str, Any]) -> bool:
    """Whether the DCGM record ``g`` has ``DCGM_FI_DEV_FB_USED`` but no ``DCGM_FI_DEV_FB_FREE``
    series (not even a blank one) and no ``DCGM_FI_DEV_FB_TOTAL``: a counters CSV without them."""
    return "used" in g and not {"free", "free_blank", "total"} & g.keys()


def _gpu_state(
    g: dict[str, Any], idx: int, healthy: bool, share: int | None, replicas: int = 1
) -> GpuState:
    """One GPU from its DCGM record; ``share`` is the milli-GPUs pods hold on it (or ``None``);
    ``replicas`` the node's time-slicing replicas per GPU (1: none). The record's ``pods`` are
    ``(namespace/pod, vgpu)`` pairs, one per replica held (``vgpu`` is ``""`` outside
    ``--kubernetes-virtual-gpus``: one per pod)."""
    used, free = g.get("used"), g.get("free")
    # a blank FB_FREE (DCGM's no-reading value) leaves the size unknown, whatever FB_TOTAL says
    total = (
        used + free
        if used is not None and free is not None
        else (None if "free_blank" in g else g.get("total"))
    )
    if total is not None and not math.isfinite(total):
        total = None  # two finite readings that sum past the float range: no reading
    util = g.get("util")
    if util is None and g.get("gr_active") is not None:
        util = 100.0 * g["gr_active"]
    if not healthy:
        free_milli = 0
    elif share is not None:  # a sum of shares of 1..1000 each (share_milli): 1 or more
        free_milli = max(0, 1000 - share)
    elif g.get("pods"):
        # each workload pod holds one replica (k8s-device-plugin sharing.timeSlicing), or one per
        # vgpu label it has here (--kubernetes-virtual-gpus: a pod given two replicas of this GPU
        # has two series); without time-slicing one pod holds the whole GPU. dcgm-exporter may
        # name only one of the pods of a time-sliced GPU in its default mode: free is then an
        # upper bound, and kube-scheduler still refuses a node whose allocatable nvidia.com/gpu
        # replicas are all requested.
        free_milli = max(0, replicas - len(g["pods"])) * 1000 // replicas
    elif _memory_unknown(g) and util is not None:
        # a counters CSV without FB_FREE (nor FB_TOTAL): the framebuffer's size is not known, so
        # a GPU no pod holds is free when idle by utilisation alone (see _warn_unknown_memory)
        free_milli = 1000 if util < IDLE_UTIL_PCT else 0
    else:
        free_milli = free_milli_from_memory(used, total, util)
    model = str(g.get("model", "unknown"))
    if "parent" in g:
        model = f"{model} MIG {g['profile']}"
    return GpuState(
        index=idx,
        model=model,
        uuid=g.get("uuid"),
        util_pct=util,
        mem_used_mib=used,
        mem_total_mib=total,
        xid_errors=g.get("xid"),
        free_milli=free_milli,
        healthy=healthy,
        mig_parent=g.get("parent"),
        share_milli=share,
        memory_unknown=_memory_unknown(g),
    )


def build_nodes(
    dcgm: Iterable[Sample], ksm: Iterable[Sample], default_cluster: str = "local"
) -> list[NodeState]:
    """Nodes from DCGM samples and kube-state-metrics samples (see the module docstring).

    Returns the nodes sorted by (cluster, name); GPUs by index.
    """
    view = _read_ksm(list(ksm), default_cluster)
    dcgm = list(dcgm)
    own_pods = _exporter_pods(view, dcgm)
    pods_on: dict[tuple[str, str], set[str]] = defaultdict(set)
    for (ns, pod), where in view.pod_node.items():
        pods_on[where].add(f"{ns}/{pod}")
    held: dict[tuple[str, str, int], int] = defaultdict(int)
    gpu_pods: dict[tuple[str, str], set[str]] = defaultdict(set)  # GPU use placed on given GPUs
    for lab, milli, idx in view.shares:
        where = view.pod_node.get((lab.get("namespace", ""), lab.get("pod", "")))
        if where is not None:
            for g in idx:
                held[(*where, g)] += milli
            if idx:
                gpu_pods[where].add(f"{lab.get('namespace', '')}/{lab.get('pod', '')}")
    gpus, windowed = _read_dcgm(dcgm, view, own_pods, default_cluster)
    _warn_unknown_memory(gpus)
    for (c, h, _), g in gpus.items():
        gpu_pods[(c, h)].update(pod for pod, _ in g.get("pods", ()))
    taken = {key for key, g in gpus.items() if g.get("pods")} | set(held)
    virtual_clusters = {c for (c, _, _), g in gpus.items() if g.get("vgpu")}
    kinds: dict[tuple[str, str], set[str | None]] = defaultdict(set)
    for (c, h, _), g in gpus.items():
        kinds[(c, h)].add(str(g.get("profile")) if "parent" in g else None)

    nodes: dict[tuple[str, str], NodeState] = {}
    for (cluster, host, idx), g in sorted(gpus.items()):
        node = nodes.setdefault((cluster, host), NodeState(name=host, cluster=cluster))
        if (cluster, host) in windowed:
            healthy = not g.get("hw_xids")
        else:
            healthy = not is_hardware_xid(g.get("xid"))
        share = held.get((cluster, host, g.get("parent", idx)))
        replicas = _replicas_of(g, (cluster, host), kinds[(cluster, host)], view)
        node.gpus.append(_gpu_state(g, idx, healthy, share, replicas))
    for key, counted in view.gpu_count.items():
        node = nodes.setdefault(key, NodeState(name=key[1], cluster=key[0]))
        node.gpu_replicas = view.replicas.get(key, 1)
        # dcgm-exporter --kubernetes-virtual-gpus (one flag for the whole DaemonSet) exports no
        # GPU that no pod holds on any node: in its cluster an unreported GPU is idle, not lost,
        # whole-GPU nodes too (their series carry no vgpu; see Virtual GPUs)
        idle, plugin = key[0] in virtual_clusters, view.device_plugin.get(key, "")
        add_missing_gpus(node, counted, idle, view.product.get(key, ""), plugin)
        mark_unallocatable_gpus(node, counted, plugin)
    for key, res in view.alloc.items():
        node = nodes.setdefault(key, NodeState(name=key[1], cluster=key[0]))
        _set_cpu_memory(node, res, view.requests.get(key, {}))
        node.other_devices = frozenset(r for r, v in res.items() if v > 0 and is_other_device(r))
    # the devices the snapshot already places each pod on: one per (GPU, vgpu) DCGM names it on,
    # one per GPU its share annotation's gpu-index names
    named: dict[tuple[str, str], set[tuple[str, int, str]]] = defaultdict(set)
    for (c, h, idx), g in gpus.items():
        for pod, vgpu in g.get("pods", ()):
            named[(c, pod)].add((h, idx, vgpu))
    for lab, _, idx in view.shares:
        where = view.pod_node.get((lab.get("namespace", ""), lab.get("pod", "")))
        if where is not None:
            pod = f"{lab.get('namespace', '')}/{lab.get('pod', '')}"
            named[(where[0], pod)].update((where[1], g, "share") for g in idx)
    # devices of pods placed on fewer devices than they hold, per node: (pod, devices left,
    # named anywhere), in pod order (all of a pod DCGM names nowhere; the rest of one it names:
    # a regular init container's, which the kubelet's PodResources List leaves out, where it
    # lists sidecars since Kubernetes 1.29, or one on a GPU without series)
    unnamed: dict[tuple[str, str], list[tuple[str, float, bool]]] = defaultdict(list)
    for (c, h, ns, pod), n in sorted(view.gpu_requests.items()):
        on = len(named.get((c, f"{ns}/{pod}"), ()))
        if (c, ns, pod) in view.running and n - on > 0:
            unnamed[(c, h)].append((f"{ns}/{pod}", n - on, on > 0))
    taken_on: dict[tuple[str, str], set[int]] = defaultdict(set)
    for c, h, i in taken:
        taken_on[(c, h)].add(i)
    for key, node in nodes.items():
        node.pods = frozenset(pods_on.get(key, ()))
        node.pod_uids = frozenset(view.pod_uids.get(key, ()))
        node.pending_pods = _pending_pods(view, key, node.pods)
        node.gpu_replicas = view.replicas.get(key, 1)
        node.mig_replicas = dict(view.mig_replicas.get(key, {}))
        node.cordoned, node.not_ready = key in view.cordoned, view.not_ready.get(key)
        node.draining = view.draining.get(key, "")
        node.device_plugin = view.device_plugin.get(key, "")
        asks = _absorbed(node, unnamed.get(key, []), view.gpu_count.get(key, {}))
        left = mark_requested_gpus(node, sum(n for _, n in asks), taken_on.get(key, set()))
        # the devices left unmarked are the last pods' (in pod order): their GPU use is not
        # counted, so they stay out of gpu_pods (a share hold of theirs stays theirs)
        for pod, n in reversed(asks):
            if left <= 0:
                gpu_pods[key].add(pod)  # its request is charged to the node's GPUs
            left -= n
        node.gpu_pods = frozenset(gpu_pods.get(key, ()))
    return [nodes[k] for k in sorted(nodes)]


MAX_NODE_AMOUNT = 2**62
"""Milli-cores or MiB of one node's allocatable or request sum below which a reading counts
(:func:`_set_cpu_memory`): far above any real node (2**62 MiB is 4 ZiB), and within the signed
64-bit arrays the placers build (``serving/scheduler/placement.py``)."""


def _set_cpu_memory(node: NodeState, res: dict[str, float], req: dict[str, float]) -> None:
    """``node``'s CPU (milli-cores) and memory (MiB), allocatable and free, from kube-state-metrics'
    allocatable ``res`` and request sums ``req`` (cores, bytes). A request sum that is NaN or
    infinite (a pod's request was) leaves nothing known free. Values are checked once scaled to
    milli-cores and MiB: one of :data:`MAX_NODE_AMOUNT` or more (a finite count above ~1.8e305
    cores even overflows to +-Inf) is no reading of the allocatable and an unknown request sum,
    so that the placers' 64-bit arrays can hold every value. Requests listed above the allocatable
    (kube-state-metrics reads an infeasible in-place resize's spec) leave 0 free, never less."""
    if "cpu" in res and abs(res["cpu"] * 1000) < MAX_NODE_AMOUNT:
        node.cpu_milli = int(round(res["cpu"] * 1000))
        cpu = req.get("cpu", 0.0) * 1000
        if abs(cpu) < MAX_NODE_AMOUNT:
            node.cpu_milli_free = max(0, node.cpu_milli - int(round(cpu)))
    if "memory" in res and abs(res["memory"] / 2**20) < MAX_NODE_AMOUNT:
        node.memory_mib = int(res["memory"] // 2**20)
        mem = req.get("memory", 0.0)
        if abs(mem / 2**20) < MAX_NODE_AMOUNT:
            node.memory_mib_free = max(0, node.memory_mib - int(-(-mem // 2**20)))


def _absorbed(
    node: NodeState, asks: list[tuple[str, float, bool]], counted: dict[str, float]
) -> list[tuple[str, float]]:
    """``asks`` (pod, devices left, whether DCGM names the pod on any device) less the devices
    of named pods that ``node``'s missing placeholders account for: a placeholder still in
    allocatable (those beyond capacity - allocatable, the devices the device plugin took out) is
    a GPU whose series is gone but which a pod may hold, and a pod DCGM names elsewhere has its
    other devices there as likely as anywhere; it already reads taken, so marking another GPU for
    them would count one GPU twice. Devices, in pod order; placeholders absorb whole GPUs of
    ``gpu_replicas`` devices each. A pod DCGM names nowhere is marked as before."""
    cap = counted.get("kube_node_status_capacity", counted.get("kube_node_status_allocatable"))
    alloc = counted.get("kube_node_status_allocatable", cap)
    spare = 0.0
    if cap is not None and alloc is not None and math.isfinite(cap) and math.isfinite(alloc):
        placeholders = sum(1 for g in node.gpus if g.missing) * max(1, node.gpu_replicas)
        spare = max(0.0, placeholders - max(0.0, cap - alloc))
    out: list[tuple[str, float]] = []
    for pod, n, on in asks:
        if on and spare > 0:
            took = min(n, spare)
            spare -= took
            n -= took
        out.append((pod, n))
    return out


def _pending_pods(
    view: _KsmView, key: tuple[str, str], pods: frozenset[str]
) -> frozenset[str] | None:
    """Of ``pods`` (``namespace/name``) listed on node ``key``, those not yet running
    (``kube_pod_status_phase{phase="Pending"|"Unknown"} == 1``: scheduled, pulling images); ``None``
    where the cluster reports no ``Pending``/``Running`` phase at all. A pod with no phase series
    in this scrape counts as running (only the pods not running are read, to keep the answer
    small)."""
    if key[0] not in view.phase_clusters:
        return None
    return frozenset(p for p in pods if (key[0], *p.split("/", 1)) in view.unstarted)


def mark_requested_gpus(node: NodeState, devices: float, named: set[int]) -> int:
    """Mark ``devices`` requested ``nvidia.com/gpu`` devices taken on ``node``: those of pods
    listed there that DCGM names on no GPU (see Requested GPUs in the module docstring).

    Args:
        devices: devices (whole GPUs, or time-slicing replicas of ``1000 // gpu_replicas`` milli
            each) to mark.
        named: indices of the GPUs whose use the snapshot already gives to a pod (DCGM names one
            there, or a share annotation places one there): not marked while other GPUs take
            the devices.

    The GPUs that read in use with no pod named on them account for the devices first (one
    replica per ``1000 // gpu_replicas`` milli in use, rounded up; such a GPU is left with its
    free replicas only), then free replicas of the other GPUs, lowest index first. On a
    time-sliced node (``gpu_replicas`` > 1) devices still left take the free replicas of the
    named GPUs, lowest index first: dcgm-exporter without ``--kubernetes-virtual-gpus`` names one
    pod per shared GPU, and the others share it.

    Returns:
        The devices that found no free replica (0 when all were marked).
    """
    need = int(math.ceil(devices - 1e-9)) if math.isfinite(devices) else 0
    if need <= 0:
        return 0
    plain = [g for g in node.gpus if g.mig_parent is None]
    pool = [
        g
        for g in (plain or node.gpus)
        if g.healthy and not g.missing and g.index not in named and g.mig_parent not in named
    ]
    unit = max(1, 1000 // max(1, node.gpu_replicas))
    for g in sorted(pool, key=lambda g: (g.free_milli >= 1000, g.index)):
        if need <= 0:
            return 0
        if g.free_milli < 1000:  # in use, by no pod named: the unnamed pods' usage
            used = -(-(1000 - max(g.free_milli, 0)) // unit)
            need -= used
            g.free_milli = max(0, 1000 - used * unit)
        while need > 0 and g.free_milli >= unit:
            g.free_milli -= unit
            need -= 1
    if need > 0 and node.gpu_replicas > 1:
        for g in sorted((plain or node.gpus), key=lambda g: g.index):
            if g.healthy and not g.missing and (g.index in named or g.mig_parent in named):
                while need > 0 and g.free_milli >= unit:
                    g.free_milli -= unit
                    need -= 1
    return max(0, need)


def _replicas_of(
    g: dict[str, Any], where: tuple[str, str], kinds: set[str | None], view: _KsmView
) -> int:
    """Time-slicing replicas of one GPU record (1: none). GPU feature discovery labels them per
    resource (``<resource>.replicas``, ``internal/lm/resource.go`` of NVIDIA/k8s-device-plugin): a
    MIG instance has its profile's ``nvidia.com/mig-<profile>.replicas``; a GPU with MIG disabled
    the node's ``nvidia.com/gpu.replicas``, which a MIG instance takes only on a node whose GPU
    records are all instances of one profile (the ``single`` strategy may advertise them as
    ``nvidia.com/gpu``; a node with two profiles, or with a GPU with MIG disabled, is ``mixed``,
    where ``nvidia.com/gpu`` is the GPUs with MIG disabled only). ``kinds``: the MIG profiles of
    the node's GPU records, ``None`` for a GPU with MIG disabled."""
    whole = view.replicas.get(where, 1)
    if "parent" not in g:
        return whole
    by_profile = view.mig_replicas.get(where, {})
    key = profile_key(str(g.get("profile", "")))
    if key in by_profile:
        return by_profile[key]
    return whole if len(kinds) == 1 else 1


def _mig_instances_counted(node: NodeState, product: str = "", mixed: bool = False) -> int | None:
    """MIG instances per GPU where the node's ``nvidia.com/gpu`` counts MIG instances (the
    ``single`` strategy); None where it counts GPUs with MIG disabled (no MIG, or the ``mixed``
    strategy: ``mixed`` set, i.e. a ``nvidia.com/mig-<profile>`` resource advertised (capacity or
    allocatable above 0, :data:`OTHER_GPU_DEVICES`), a
    reported GPU with MIG disabled, or instances of two profiles), 0 where it counts instances of
    a number per GPU not known (GFD's ``-MIG-INVALID``, a profile not known and no reported
    instance).

    Reported instances give the profile and model (``"<model> MIG <profile>"``), read as
    ``graph build`` reads them (:func:`fleetmind.data.graph_build._mig_instances_per_gpu`): live
    series win over a label left from an earlier layout; else, with no instance reported,
    ``product``: GPU feature discovery's ``nvidia.com/gpu.product`` (``<model>-MIG-<profile>``
    under the ``single`` strategy), or ``-MIG-<profile>`` from GKE's
    ``cloud.google.com/gke-gpu-partition-size``. Instances without ``modelName`` (model
    ``unknown``) keep the label's model. A profile not known falls back to the most
    instances any reported GPU has."""
    parents: dict[int, int] = defaultdict(int)
    seen: dict[str, str] = {}  # profile -> model of the reported instances
    for g in node.gpus:
        if g.mig_parent is None:
            return None
        parents[g.mig_parent] += 1
        own_model, _, own_profile = g.model.rpartition(" MIG ")
        if own_model != "unknown" or own_profile not in seen:
            seen[own_profile] = own_model
    model, mig, profile = product.removesuffix(SHARED_SUFFIX).partition(MIG_SUFFIX)
    if mig and profile == "INVALID":  # GFD: the single strategy's GPUs disagree
        return 0
    if mixed or len(seen) > 1 or not (mig or parents):
        return None
    if seen:  # the instances' own profile and model, not a label left from another layout
        ((profile, own_model),) = seen.items()
        model = model if own_model == "unknown" and model else own_model
    return _mig_instances_per_gpu(profile, model) or max(parents.values(), default=0)


def _idle_instance_model(node: NodeState, product: str) -> str:
    """``"<model> MIG <profile>"`` of the MIG instances of a ``single``-strategy GPU that no pod
    holds (:func:`add_missing_gpus`): the reported instances' model and profile, else (or where
    their model is ``unknown``) those of ``product`` (:data:`PRODUCT_LABEL` ``<model>-MIG-<profile>``,
    or GKE's ``-MIG-<profile>``)."""
    model, _, profile = product.removesuffix(SHARED_SUFFIX).partition(MIG_SUFFIX)
    for g in node.gpus:
        if g.mig_parent is not None:
            own_model, _, profile = g.model.rpartition(" MIG ")
            model = model if own_model == "unknown" and model else own_model
            break
    return f"{model or 'unknown'} MIG {profile}"


def add_missing_gpus(
    node: NodeState,
    counted: dict[str, float],
    idle: bool = False,
    product: str = "",
    device_plugin: str = "",
) -> None:
    """Append placeholders for the GPUs the kubelet counts on ``node`` but DCGM does not report.

    ``counted``: ``kube_node_status_capacity`` and/or ``kube_node_status_allocatable`` of
    ``nvidia_com_gpu``. Capacity wins: the device plugin takes an unhealthy GPU out of allocatable
    but not out of capacity. A placeholder (a GPU fallen off the bus, a node whose exporter target
    is down) is unhealthy with nothing free, so nothing is placed on it, at the lowest physical
    index no GPU of the node uses, below the node's physical GPU count.

    Devices are counted in physical GPUs: with time-slicing the device plugin advertises
    ``node.gpu_replicas`` devices per GPU (read from GPU feature discovery's ``nvidia.com/gpu.replicas``
    node label; guessing it from devices / reported GPUs would read a 2-GPU node that lost one as 2
    replicas and hide the loss). The MIG ``single`` strategy advertises each instance as
    ``nvidia.com/gpu``: devices are divided by the instances per GPU (``product``, GPU feature
    discovery's ``nvidia.com/gpu.product`` ``<model>-MIG-<profile>``, or the reported GPUs'
    instances: :func:`_mig_instances_counted`) and compared with the physical GPUs reported, so
    an 8-GPU node of 56 ``1g.10gb`` instances whose exporter is paused has 8 placeholders, not
    56; a node of MIG instances whose count per GPU is not known gets none. The ``mixed``
    strategy (a ``nvidia.com/mig-<profile>`` resource advertised: capacity or allocatable above 0,
    :data:`OTHER_GPU_DEVICES`, so a node whose instances are all unhealthy stays mixed) leaves MIG
    GPUs out of ``nvidia.com/gpu``: its devices are compared with the GPUs with MIG
    disabled, the MIG GPUs adding to the physical count. ``device_plugin``
    (:data:`DEVICE_PLUGIN_LABEL`'s value) ``paused-for-mig-change``: none is added (the MIG
    manager stopped the plugin, exporter and GPU feature discovery, whose labels it may have
    taken: nothing is lost).

    ``idle``: the node's exporter exports only the GPUs that pods hold (dcgm-exporter
    ``--kubernetes-virtual-gpus``, see Virtual GPUs in the module docstring): the GPUs it does not
    report are added healthy and idle (1000 free, every replica), not as placeholders, as many as
    allocatable (healthy devices, less the node's reported healthy GPUs) leaves room for; the rest
    of capacity stays placeholders (the device plugin takes a failed GPU's replicas out of
    allocatable only, so a reported unhealthy GPU takes no share of allocatable). On a MIG node
    of the ``single`` strategy each such GPU is added as its instances per GPU, idle (1000 free),
    as reported instances are (``index = 100 * (gpu + 1) + n``, ``n`` 0 up: the exporter gives no
    GPU instance id for them; ``mig_parent`` the GPU; model ``"<model> MIG <profile>"``,
    :func:`_idle_instance_model`), so an idle MIG node is placeable (allocatable less the healthy
    reported instances, over the instances per GPU); a MIG GPU of the ``mixed`` strategy is never
    added.
    """
    devices = counted.get("kube_node_status_capacity", counted.get("kube_node_status_allocatable"))
    if not devices or not math.isfinite(devices) or device_plugin == MIG_CHANGE:
        return
    parents = {g.mig_parent for g in node.gpus if g.mig_parent is not None}
    per_gpu = _mig_instances_counted(node, product, counted.get(OTHER_GPU_DEVICES, 0.0) > 0)
    if per_gpu == 0:
        return
    if per_gpu is None:  # nvidia.com/gpu counts the GPUs with MIG disabled
        plain = len(node.gpus) - sum(g.mig_parent is not None for g in node.gpus)
        physical = int(devices) // max(1, node.gpu_replicas) + len(parents)
        missing = physical - len(parents) - plain
    else:  # the single strategy: nvidia.com/gpu counts MIG instances
        physical = int(devices) // (max(1, node.gpu_replicas) * per_gpu)
        missing = physical - len(parents)
    missing = min(MAX_PLACEHOLDERS, missing)
    if missing <= 0:
        return
    used = {g.index for g in node.gpus} | parents
    models = {g.model.split(" MIG ")[0] for g in node.gpus if g.model != "unknown"}
    model = models.pop() if len(models) == 1 else "unknown"
    free_indices = [i for i in range(min(physical, len(used) + missing)) if i not in used]
    free_indices = free_indices[:missing]
    alloc = counted.get("kube_node_status_allocatable", devices)
    n_idle = 0
    if idle and math.isfinite(alloc):
        # allocatable counts the healthy devices only: a reported unhealthy GPU's replicas are
        # already out of it, so only the healthy reported GPUs (or instances) take their share
        healthy = sum(g.healthy for g in node.gpus if (g.mig_parent is None) == (per_gpu is None))
        n_idle = max(0, (int(alloc) // max(1, node.gpu_replicas) - healthy) // (per_gpu or 1))
    instance = _idle_instance_model(node, product) if per_gpu else ""
    for k, idx in enumerate(free_indices):
        if k < n_idle and per_gpu:  # a MIG GPU no pod holds: its instances, idle
            node.gpus += [
                GpuState(index=100 * (idx + 1) + n, model=instance, mig_parent=idx)
                for n in range(per_gpu)
            ]
        elif k < n_idle:
            node.gpus.append(GpuState(index=idx, model=model))
        else:
            node.gpus.append(
                GpuState(index=idx, model=model, free_milli=0, healthy=False, missing=True)
            )
    node.gpus.sort(key=lambda g: g.index)


def mark_unallocatable_gpus(
    node: NodeState, counted: dict[str, float], device_plugin_label: str = ""
) -> None:
    """Mark unhealthy, with nothing free, the GPUs of ``node`` beyond its allocatable
    ``nvidia.com/gpu`` (``counted``, as :func:`add_missing_gpus` reads it, plus
    :data:`OTHER_GPU_ALLOCATABLE`; ``device_plugin_label``: :data:`DEVICE_PLUGIN_LABEL`'s value,
    ``""`` where not exported).

    The NVIDIA device plugin marks a device unhealthy on any XID but
    :data:`DEVICE_PLUGIN_IGNORED_XIDS`, and never back; the kubelet then leaves it out of
    allocatable (``GetCapacity`` in ``pkg/kubelet/cm/devicemanager/manager.go``), so Kubernetes
    will never allocate it, though dcgm-exporter still reports it and :data:`HARDWARE_XIDS` (a
    narrower list) leaves it healthy. Where the node's healthy reported GPUs, in devices
    (``gpu_replicas`` per GPU with time-slicing), exceed allocatable, the surplus GPUs are marked
    (``unallocatable``): first those whose last XID the device plugin does not ignore, then the
    highest index. Counted as ``nvidia.com/gpu`` counts them: the GPUs with MIG disabled, or on a
    node whose records are all MIG instances of one profile (the ``single`` strategy) the
    instances. Only where the kubelet itself counts devices out (allocatable below capacity, both
    known): nothing is marked where either series is missing or not finite (kube-state-metrics
    not scraping it: no reading), or where the two agree (a replicas label that does not match
    the devices advertised then takes no GPU out).

    Allocatable 0 is the device plugin not serving (its DaemonSet restarting or crash-looping, or
    the GPU Operator's driver manager pausing it with ``nvidia.com/gpu.deploy.device-plugin=
    paused-for-driver-upgrade``): the kubelet marks every device of a stopped endpoint unhealthy
    (capacity N, allocatable 0) and, once the endpoint's 5-minute grace period ends, sets both to
    0 (``runEndpoint`` -> ``markResourceUnhealthy``, ``GetCapacity`` in
    ``pkg/kubelet/cm/devicemanager/manager.go``). Then every reported GPU with MIG disabled is
    marked; MIG instances are not (a ``mixed`` MIG node advertises them as
    ``nvidia.com/mig-<profile>``; a ``single`` one's are not covered).

    Capacity N with allocatable 0 marks on its own: the kubelet itself counts the devices
    unhealthy. Both 0 does not: ``MachineInfo`` in ``pkg/kubelet/nodestatus/setters.go`` never
    removes a device-plugin resource from the node status, it keeps it at 0 for good
    (kubernetes#92396), so a node whose GPUs are served under another name (time-slicing's
    ``renameByDefault``: ``nvidia.com/gpu.shared``), by the NVIDIA DRA driver or by no plugin
    reads 0/0 too. Both 0 marks where :data:`DEVICE_PLUGIN_LABEL` is
    ``paused-for-driver-upgrade``, or where it is not ``false`` (the plugin turned off on the
    node) and no other NVIDIA GPU resource (:data:`GPU_RESOURCES`) is allocatable above 0: a plugin
    down past its grace period, and equally a node moved to the DRA driver whose label is not
    ``false`` (its stale ``nvidia.com/gpu`` reads as a plugin down)."""
    alloc = counted.get("kube_node_status_allocatable")
    cap = counted.get("kube_node_status_capacity")
    if alloc is None or cap is None or not math.isfinite(alloc) or not math.isfinite(cap):
        return
    plain = [g for g in node.gpus if g.mig_parent is None]
    profiles = {g.model for g in node.gpus if g.mig_parent is not None}
    if alloc <= 0:  # the device plugin serves no nvidia.com/gpu device
        if cap <= 0 and not _plugin_down(counted, device_plugin_label):
            return  # 0/0 for good: a resource retired, served otherwise (see above)
        pool = plain
    elif alloc < cap:
        pool = plain if plain else (node.gpus if len(profiles) == 1 else [])
    else:
        return
    healthy = [g for g in pool if g.healthy and not g.missing]
    surplus = len(healthy) - int(alloc) // max(1, node.gpu_replicas)
    if surplus <= 0:
        return

    def device_plugin_fault(g: GpuState) -> bool:
        x = g.xid_errors
        return (
            x is not None
            and math.isfinite(x)
            and x > 0
            and int(x) not in DEVICE_PLUGIN_IGNORED_XIDS
        )

    for g in sorted(healthy, key=lambda g: (not device_plugin_fault(g), -g.index))[:surplus]:
        g.healthy, g.free_milli, g.unallocatable = False, 0, True


def _plugin_down(counted: dict[str, float], device_plugin_label: str) -> bool:
    """Whether a node's ``nvidia.com/gpu`` capacity and allocatable of 0 is its device plugin not
    serving (:func:`mark_unallocatable_gpus`): the GPU Operator pausing it, or neither the plugin
    turned off on the node nor another NVIDIA GPU resource allocatable there."""
    if device_plugin_label == "paused-for-driver-upgrade":
        return True
    return device_plugin_label != "false" and counted.get(OTHER_GPU_ALLOCATABLE, 0.0) <= 0


def workload_pod(lab: dict[str, str], own_pods: set[str] | frozenset[str] = frozenset()) -> str:
    """``namespace/name`` of the workload pod a DCGM series names, or ``""`` when none.

    ``exported_pod`` (the chart's default scrape) wins; else ``pod`` unless it is one of
    ``own_pods`` (the exporter's own pods) or named like a dcgm-exporter pod (see Scrape styles).
    """
    if lab.get("exported_pod"):
        return f"{lab.get('exported_namespace', '')}/{lab['exported_pod']}"
    pod = lab.get("pod", "")
    if not pod or pod in own_pods or EXPORTER_POD.match(pod):
        return ""
    return f"{lab.get('namespace', '')}/{pod}"


LOCAL_NODE = "__fleetmind_local_node__"
"""A label :func:`parse_dcgm` (the single-exporter mode) adds to every series it reads: this host's
node (:func:`~fleetmind.data.fleet_io.local_node_name`: ``NODE_NAME``, else the host name), the
node of series that name none. A ``__`` name is reserved in Prometheus: no exporter exports it."""


def _node_name(lab: dict[str, str], pod_by_name: dict[tuple[str, str], str], cluster: str) -> str:
    """The node of a DCGM series (see the module docstring for the order and the pitfall): the
    ``node`` or ``kubernetes_node`` label, else ``Hostname`` unless it is an exporter pod's name
    (then that pod's node where kube-state-metrics places it), else the scrape target's address
    (``instance``: Prometheus server mode), else :data:`LOCAL_NODE` (single-exporter mode, whose
    exposition carries no ``instance``: dcgm-exporter run with ``-n`` exports no ``Hostname``), never
    an unresolved exporter pod name."""
    for key in ("node", "kubernetes_node"):
        if lab.get(key):
            return lab[key]
    host = lab.get("Hostname") or lab.get("hostname")
    if host:
        where = pod_by_name.get((cluster, host))
        if where is not None:
            return where  # Hostname is the exporter pod's name: use the pod's node
        if not EXPORTER_POD.match(host):
            return host
    if lab.get("instance"):
        return instance_address(lab["instance"])  # [fd00::5]:9400 -> fd00::5
    return lab.get(LOCAL_NODE) or "unknown"
