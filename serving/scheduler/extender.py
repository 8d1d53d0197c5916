"""kube-scheduler extender: a Pod in, feasible node names and 0-10 scores out.

The wire format is ``k8s.io/kube-scheduler/extender/v1`` (``staging/src/k8s.io/kube-scheduler/
extender/v1/types.go`` in kubernetes/kubernetes). Its Go structs carry no JSON tags, so the keys
are the Go field names: ``ExtenderArgs{Pod, Nodes, NodeNames}``, ``ExtenderFilterResult{Nodes,
NodeNames, FailedNodes, FailedAndUnresolvableNodes, Error}``, ``HostPriorityList = [HostPriority{Host,
Score}]`` with scores in ``0..MaxExtenderPriority`` (10). Go's decoder matches keys
case-insensitively, so this module reads keys the same way; it always writes the Go names.

``nodeCacheCapable: true`` makes kube-scheduler send ``NodeNames`` only (the extender knows the
nodes from telemetry); ``false`` sends the full ``Nodes`` (a ``v1.NodeList``) and expects the passing
``Nodes`` back. Both are served.

What a Pod asks for (:func:`pod_request`), as Kubernetes counts it (the effective request of
"Effective Pod requests and limits", https://kubernetes.io/docs/concepts/resource-management/
effective-pod-requests-limits/, computed by ``PodRequests``/``AggregateContainerRequests`` in
``staging/src/k8s.io/component-helpers/resource/helpers.go``), per resource:

* app containers and sidecars (``initContainers`` with ``restartPolicy: Always``) add up; each
  regular init container needs its own request plus the sidecars listed before it; the pod needs
  the larger of the two;
* pod-level ``spec.resources.requests`` (``cpu``, ``memory``), where set, replaces the containers'
  sum for that resource;
* ``spec.overhead`` (the RuntimeClass's) is added.

Per container a resource's request is ``resources.requests``, else ``resources.limits`` (the API
server's defaulting). Resources read:

* CPU and memory, in millicores and MiB.
* GPUs, whole: the extended resource ``nvidia.com/gpu``. On a node of the device plugin's MIG
  strategy ``mixed`` these are only the GPUs with MIG disabled (see MIG strategies below).
* MIG instances of the device plugin's mixed strategy: ``nvidia.com/mig-<profile>`` (e.g.
  ``nvidia.com/mig-3g.40gb``), one GPU each, only on MIG instances of that profile (telemetry names
  them ``"<model> MIG <profile>"``; the device plugin writes a profile's ``+`` as ``.``, so
  ``nvidia.com/mig-1g.10gb.me`` is DCGM's ``1g.10gb+me``). One profile per pod.
* GPUs, shared (the openb trace's scheduler, Alibaba's GPU-sharing scheduler; the names of the
  ``kubernetes-scheduler-simulator`` of the FGD paper): annotations
  ``alibabacloud.com/gpu-milli`` (share of each GPU, 1..1000), ``alibabacloud.com/gpu-count``
  (number of GPUs; ``gpu-milli`` 0, or ``gpu-count`` 0 without a ``gpu-milli``, makes a CPU-only
  pod, and ``gpu-count`` 0 with a share is refused, as the FGD simulator reads them:
  :func:`_shared_gpus`) and
  ``alibabacloud.com/gpu-card-model`` (allowed models, ``|``- or ``,``-separated, each the whole
  model name or whole tokens of it:
  :func:`fleetmind.serving.scheduler.placement.gpu_model_matches`; one that names no model, such
  as ``"|"``, leaves the pod unschedulable). When ``gpu-count`` or ``gpu-milli`` is present
  beside ``nvidia.com/gpu`` they must agree (the same count of whole GPUs), else the pod is
  refused: the kubelet gives it the device plugin's GPUs whatever the annotations say.

MIG strategies (NVIDIA's k8s-device-plugin ``--mig-strategy``; ``mig-strategy.go``): ``mixed``
advertises each MIG profile as ``nvidia.com/mig-<profile>`` and ``nvidia.com/gpu`` only for the
GPUs with MIG disabled; ``single`` (the GPU Operator's default ``mig.strategy: single``) advertises
the MIG instances as ``nvidia.com/gpu`` and refuses a node with MIG instances of several profiles
or beside GPUs with MIG disabled. The strategy is inferred per node from telemetry
(:func:`fleetmind.serving.scheduler.placement.mig_mixed`): a node with MIG instances of two or more
profiles, or beside GPUs with MIG disabled, is ``mixed``: a GPU pod that does not ask for
``nvidia.com/mig-<profile>`` (``nvidia.com/gpu`` or the GPU-sharing annotations; a
``gpu-card-model`` naming a MIG profile does not change that) may use only its GPUs with MIG
disabled, and a node without any fails as unresolvable ("MIG instances here are
nvidia.com/mig-<profile> resources (mixed strategy), not nvidia.com/gpu: ask for one"). A node whose GPUs are all
MIG instances of one profile may be either strategy: its instances take ``nvidia.com/gpu`` pods
(``single``) and ``nvidia.com/mig-<profile>`` pods of that profile (``mixed``).

Input is checked before it is used: names follow Kubernetes' rules (a pod name and a node name are
DNS-1123 subdomains, a namespace a DNS-1123 label), a uid is at most :data:`MAX_UID_CHARS`
printable ASCII characters; anything else is a :class:`DataError` (422). A valid pod that asks for
more than FleetMind's bounds (:data:`MAX_CPU_MILLI`, :data:`MAX_MEMORY_MIB`, :data:`MAX_GPUS`:
:class:`PodOutOfBounds`), or for GPUs in a way FleetMind cannot place (:class:`PodUnsupported`:
``nvidia.com/gpu`` beside a MIG profile, two MIG profiles, a ``gpu-milli`` above 1000 or
negative, a share on several GPUs, annotations that say no GPU beside ``nvidia.com/gpu`` or a
MIG resource, a ``gpu-card-model`` with a NUL character or whose models are each longer than
:data:`MAX_MODEL_CHARS`), fails every node as unresolvable, with
the reason, rather than with an error: kube-scheduler reads any answer but 200 as an error without
its body (``send`` in ``pkg/scheduler/extender.go``), which leaves an opaque "code 422" on the pod
or, with ``ignorable: true``, schedules it without FleetMind.

Decisions come from the served placement policy (:mod:`fleetmind.serving.registry`: the released
PPO agent, or the heuristic the registry fell back to, as ``GET /api/v1/models`` names it).
Prioritize gives the policy's choice :data:`MAX_EXTENDER_PRIORITY` (10) and the other feasible
nodes ``0..``:data:`OTHERS_MAX` (4) by the policy's scores (BestFit's for PPO, which ranks
candidates only): see :meth:`Decision.scores` for what that gap is worth in kube-scheduler. On
nodes of more than 8 GPUs, which the policies' state cannot hold, the decision is BestFit's
(:meth:`fleetmind.serving.scheduler.placement.PeerPolicyPlacer.place`). CPU-only
pods prefer nodes without GPUs: the choice is one of those, the other such nodes score 4..3, nodes
with GPUs 2..0.

Dynamic Resource Allocation (``resource.k8s.io/v1``, GA in Kubernetes 1.34; NVIDIA's DRA driver
``gpu.nvidia.com``): a pod's ``spec.resourceClaims`` name ResourceClaims (or templates of them)
whose device requests kube-scheduler does not send to an extender, so FleetMind cannot count
them. A pod with claims and no GPU read above (:data:`GPU_RESOURCE`, MIG, the GPU-sharing
annotations) is not taken for CPU-only, which would rank nodes without free GPUs first: every
candidate passes, every score is 0 (no pull anywhere), nothing is held, and its devices are left
to kube-scheduler's DynamicResources plugin (:func:`decide`). A pod with claims that also asks
for ``nvidia.com/gpu`` is placed by that request, as before.

Accelerators of other vendors (``amd.com/gpu``, ``habana.ai/gaudi``, ``google.com/tpu``,
``gpu.intel.com/*``, ``aws.amazon.com/neuron*``:
:func:`~fleetmind.data.graph_build.is_other_device`) are not modelled: a pod asking for
them and no GPU read above passes every node with score 0 and no hold, as a pod with claims
(:attr:`PodRequest.other_devices`), and kube-scheduler's NodeResourcesFit places the devices. A
node where telemetry or the request's ``Nodes`` show such devices (capacity or allocatable: an
unhealthy device leaves allocatable only) is an accelerator node: CPU-only pods prefer nodes
without GPUs or such devices (:func:`with_node_devices`).

Without GPU telemetry to decide on (no GPU in the snapshot, or none of the candidate nodes in it),
a GPU pod gets 503 (:func:`decide`): kube-scheduler then skips the extender when it is
``ignorable`` (``findNodesThatPassExtenders`` in ``pkg/scheduler/schedule_one.go`` skips an
ignorable extender only when its filter returns an error; a 200 failing every node would leave
every GPU pod pending).
"""

from __future__ import annotations

import dataclasses
import logging
import math
import re
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from fleetmind.data.errors import DataError, NotAvailableError
from fleetmind.data.graph_build import is_other_device
from fleetmind.redact import terminal_safe
from fleetmind.serving.scheduler.placement import (
    GPU_CAUSES,
    Option,
    Placer,
    Reservations,
    cpu_nodes_first,
    free_gpus,
    gpu_allowed,
    gpu_cause,
    gpu_model_matches,
    is_mig,
    mig_mixed,
    names_mig,
    parse_gpu_models,
)
from fleetmind.serving.schemas import JobSpec
from fleetmind.serving.telemetry.base import (
    MIG_CHANGE,
    FleetSnapshot,
    GpuState,
    NodeState,
    profile_key,
)

log = logging.getLogger("fleetmind.serving")

MAX_EXTENDER_PRIORITY = 10
OTHERS_MAX = 4
"""The highest prioritize score of a feasible node other than the policy's choice (which scores
:data:`MAX_EXTENDER_PRIORITY`): the choice leads every other node by at least 6 points, ``6 x
weight x 10`` in kube-scheduler's sum (:meth:`Decision.scores`)."""
GPU_RESOURCE = "nvidia.com/gpu"
ANN_GPU_MILLI = "alibabacloud.com/gpu-milli"
ANN_GPU_COUNT = "alibabacloud.com/gpu-count"
ANN_GPU_MODEL = "alibabacloud.com/gpu-card-model"
MIG_PREFIX = "nvidia.com/mig-"
MAX_CPU_MILLI = 10_000_000
MAX_MEMORY_MIB = 100_000_000
MAX_GPUS = 64
MAX_UID_CHARS = 128
MAX_MODEL_CHARS = 200
"""Longest allowed-models text of a placement request (``JobSpec.gpu_model``, ``|``-joined): only
the ``gpu-card-model`` entries that fit are used, whole (:func:`clip_models`)."""
MAX_CLAIM_PODS_LOGGED = 4096
"""Pod keys remembered as already logged for their Dynamic Resource Allocation claims
(:meth:`NodeIndex.warn_claims`); the oldest is forgotten past this."""
_BOUND = {"cpu": MAX_CPU_MILLI / 1000, "memory": MAX_MEMORY_MIB * 2.0**20}
"""Largest quantity accepted per resource (cores, bytes; GPUs and MIG instances: :data:`MAX_GPUS`)."""

_QTY = re.compile(r"^([+-]?[0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)([a-zA-Z]*)$")
_SUFFIX = {
    "": 1.0,
    "m": 1e-3,
    "u": 1e-6,
    "n": 1e-9,
    "k": 1e3,
    "M": 1e6,
    "G": 1e9,
    "T": 1e12,
    "P": 1e15,
    "E": 1e18,
    "Ki": 2.0**10,
    "Mi": 2.0**20,
    "Gi": 2.0**30,
    "Ti": 2.0**40,
    "Pi": 2.0**50,
    "Ei": 2.0**60,
}
# matched with fullmatch: ``$`` also matches before a final newline ("job\n" would pass)
_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_UID = re.compile(r"[\x21-\x7e]+")
_GO_INT = re.compile(r"[+-]?[0-9]{1,18}")
"""What Go's ``strconv.Atoi`` (as the GPU-share scheduler plugins read annotations) takes: ASCII
digits with an optional sign, no ``_``, no spaces, no other scripts' digits (Python's ``int``
takes ``"1_0"`` and ``"٣"``)."""


class PodRefused(DataError):
    """A pod Kubernetes accepts that FleetMind places on no node. The extender fails every node
    as unresolvable with this message (:func:`decide`): kube-scheduler discards the body of any
    answer but 200 (``send`` in ``pkg/scheduler/extender.go``), so a 422 would show only "code 422"
    on the pod, or with ``ignorable: true`` schedule it without FleetMind. Elsewhere it is a 422
    like any :class:`DataError`.

    Attributes:
        key: the pod's ``namespace/name`` when it was read before the refusal.
    """

    key: str | None = None


class PodOutOfBounds(PodRefused):
    """A valid pod that asks for more than FleetMind supports (:data:`MAX_CPU_MILLI`,
    :data:`MAX_MEMORY_MIB`, :data:`MAX_GPUS`): no node could hold it (:class:`PodRefused`)."""


class PodUnsupported(PodRefused):
    """A valid pod whose GPU request FleetMind cannot place (:class:`PodRefused`): ``nvidia.com/gpu``
    beside ``nvidia.com/mig-<profile>``, or two MIG profiles (both valid under the device plugin's
    mixed strategy), an ``alibabacloud.com/gpu-milli`` above 1000 or negative, a negative
    ``alibabacloud.com/gpu-count``, a GPU-sharing annotation that is not an integer (``"half"``,
    ``"1_0"``, ``"500 "``), a ``alibabacloud.com/gpu-card-model`` with a NUL character or naming
    no model of at most :data:`MAX_MODEL_CHARS` characters, or a share of a GPU on several GPUs
    (annotations are free text to Kubernetes); any request the placement request
    (:class:`~fleetmind.serving.schemas.JobSpec`) would still refuse."""


def _shown(value: Any) -> str:
    """``value`` for an error message: ASCII-escaped (NUL, lone surrogates) and cut to 80 chars."""
    text = ascii(value)
    return text if len(text) <= 80 else text[:77] + "..."


def parse_quantity(value: Any, what: str = "quantity", bound: float = math.inf) -> float:
    """A Kubernetes resource quantity (``"500m"``, ``"2"``, ``"16Gi"``, ``"1e3"``) as a float.

    Args:
        bound: the largest value accepted (in the resource's base unit).

    Raises:
        DataError: not a quantity or negative; :class:`PodOutOfBounds` above ``bound``.
    """
    if isinstance(value, bool):
        raise DataError(f"{what}: {_shown(value)} is not a Kubernetes quantity")
    if isinstance(value, int | float):
        value = repr(value)
    m = _QTY.match(str(value).strip()) if isinstance(value, str) and len(value) <= 64 else None
    if not m or m.group(2) not in _SUFFIX:
        raise DataError(f"{what}: {_shown(value)} is not a Kubernetes quantity")
    try:
        out = float(m.group(1)) * _SUFFIX[m.group(2)]
    except (ValueError, OverflowError):
        raise DataError(f"{what}: {_shown(value)} is not a Kubernetes quantity") from None
    if not math.isfinite(out) or out < 0:
        raise DataError(f"{what}: {_shown(value)} is not a finite, non-negative quantity")
    if out > bound:
        raise PodOutOfBounds(f"{what}: {_shown(value)} is more than the {bound:g} supported")
    return out


def check_name(value: Any, what: str, label: bool = False) -> str:
    """``value`` if it is a Kubernetes name: a DNS-1123 subdomain (at most 253 characters), or with
    ``label`` a DNS-1123 label (at most 63; namespaces).

    Raises:
        DataError: anything else (empty, too long, upper case, NUL, lone surrogates, ...).
    """
    limit, rule = (63, _DNS_LABEL) if label else (253, _DNS_SUBDOMAIN)
    if not isinstance(value, str) or not value or len(value) > limit or not rule.fullmatch(value):
        kind = "DNS-1123 label" if label else "DNS-1123 subdomain"
        chars = "'-'" if label else "'-', '.'"
        raise DataError(
            f"{what} must be a Kubernetes name (a {kind}: lower-case letters, digits, {chars}; "
            f"at most {limit} characters), got {_shown(value)}"
        )
    return value


def check_uid(value: Any, what: str = "Pod.metadata.uid") -> str | None:
    """A pod uid (Kubernetes makes UUIDs): at most :data:`MAX_UID_CHARS` printable ASCII
    characters; ``None`` for none.

    Raises:
        DataError: longer, or with other characters.
    """
    if value is None or value == "":
        return None
    if not isinstance(value, str) or len(value) > MAX_UID_CHARS or not _UID.fullmatch(value):
        raise DataError(
            f"{what} must be at most {MAX_UID_CHARS} printable ASCII characters, got {_shown(value)}"
        )
    return value


def get_ci(obj: Any, key: str) -> Any:
    """``obj[key]`` matched case-insensitively (as Go's encoding/json does); None when absent."""
    if not isinstance(obj, dict):
        return None
    if key in obj:
        return obj[key]
    low = key.lower()
    for k, v in obj.items():
        if isinstance(k, str) and k.lower() == low:
            return v
    return None


@dataclass(frozen=True)
class PodRequest:
    """What a Pod asks for, in openb units (millicores, MiB, GPUs x milli-GPU each)."""

    key: str
    """``namespace/name`` (the reservation key; stored with the held node's cluster,
    :func:`fleetmind.serving.scheduler.reservations.stored_key`)."""
    uid: str | None
    cpu_milli: int
    memory_mib: int
    num_gpu: int
    gpu_milli: int
    gpu_models: tuple[str, ...] = ()
    gpu_model_spec: str = ""
    """The ``gpu-card-model`` annotation as given (clipped): one that names no model (``"|"``,
    ``" "``) matches no node, where an absent or empty one allows any."""
    models_ignored: int = 0
    """Entries of the ``gpu-card-model`` annotation left out of ``gpu_models`` because they do not
    fit in :data:`MAX_MODEL_CHARS` characters (:func:`clip_models`): a node failed for its model
    says so (:func:`_model_reason`)."""
    device_gpus: bool = False
    """The GPUs are ``nvidia.com/gpu`` devices (no MIG; GPU-sharing annotations absent or agreeing
    with the request, :func:`_shared_gpus`): on a time-sliced node each is one replica of a GPU
    (:meth:`need`)."""
    mig: bool = False
    """The GPUs are ``nvidia.com/mig-<profile>`` instances (``gpu_models`` names the profile); any
    other GPU pod gets only the GPUs with MIG disabled of a node of the MIG mixed strategy."""
    resource_claims: int = 0
    """Entries of ``spec.resourceClaims``: devices asked through Dynamic Resource Allocation
    (``resource.k8s.io/v1``), which FleetMind does not count (:func:`claim_names`). A pod with
    claims and no GPU counted above is left to kube-scheduler (:func:`decide`)."""
    other_devices: tuple[str, ...] = ()
    """Accelerators of other vendors the pod's containers ask for, above 0 (``amd.com/gpu``,
    ``habana.ai/gaudi``, ``google.com/tpu``, ``gpu.intel.com/*``:
    :func:`~fleetmind.data.graph_build.is_other_device`), sorted: devices FleetMind does not
    model. A pod asking for some and no GPU counted above is left to kube-scheduler
    (:func:`decide`)."""

    def need(self, replicas: int = 1) -> int:
        """Milli-GPU the pod takes of each GPU it gets on a node with ``replicas`` time-slicing
        replicas per GPU (or per MIG instance of the pod's profile): one ``nvidia.com/gpu`` (or
        ``nvidia.com/mig-<profile>``) there is one replica, ``1000 // replicas`` (floor, as the
        telemetry's ``1000 * (r - k) // r`` free share of a GPU ``k`` pods hold)."""
        if (self.device_gpus or self.mig) and replicas > 1:
            return max(1, 1000 // replicas)  # a label above 1000 replicas: one milli each
        return self.gpu_milli

    def job(self, cluster: str | None = None, replicas: int = 1) -> JobSpec:
        """The placement request (``gpu_model``: the allowed models, ``|``-separated) on nodes
        with ``replicas`` time-slicing replicas per GPU (:meth:`need`)."""
        return JobSpec(
            job_id=self.key[:200],
            gpu_model="|".join(self.gpu_models) or None if self.num_gpu else None,
            num_gpu=self.num_gpu,
            gpu_milli=self.need(replicas) if self.num_gpu else 1000,
            cpu_milli=self.cpu_milli,
            memory_mib=self.memory_mib,
            cluster=cluster,
            alternatives=0,
        )


def _named(field: str, i: int, c: Any) -> str:
    """A container as a reason names it: ``containers[0] ("trainer")`` (index alone without a
    name)."""
    name = c.get("name") if isinstance(c, dict) else None
    if not isinstance(name, str) or not name:
        return f"{field}[{i}]"
    return f'{field}[{i}] ("{ascii(name)[1:-1][:63]}")'


def _given(ann: dict[str, Any]) -> str:
    """The GPU-sharing annotations the pod sets, as a reason quotes them (never a default FleetMind
    filled in): ``alibabacloud.com/gpu-milli 'half'``, both joined with ``and``."""
    return " and ".join(f"{k} {_shown(ann[k])}" for k in (ANN_GPU_COUNT, ANN_GPU_MILLI) if k in ann)


def _container_requests(c: Any, where: str) -> dict[str, float]:
    """One container's requests (``requests``, else ``limits``) of the resources read, bounded."""
    if not isinstance(c, dict):
        raise DataError(f"{where} is not an object")
    res = c.get("resources") or {}
    if not isinstance(res, dict):
        raise DataError(f"{where}.resources is not an object")
    req = res.get("requests") or {}
    lim = res.get("limits") or {}
    if not isinstance(req, dict) or not isinstance(lim, dict):
        raise DataError(f"{where}.resources.requests/limits must be objects")
    return _resources(req, lim, where)


def _resources(req: dict[str, Any], lim: dict[str, Any], where: str) -> dict[str, float]:
    out: dict[str, float] = {}
    for name in {*req, *lim}:
        if not isinstance(name, str):
            continue
        if name in _BOUND:
            bound = _BOUND[name]
        elif name == GPU_RESOURCE or name.startswith(MIG_PREFIX):
            bound = float(MAX_GPUS)
        else:
            continue
        v = req.get(name, lim.get(name))
        if v is not None:
            out[name] = parse_quantity(v, f"{where} {_shown(name)}", bound)
    return out


def effective_requests(spec: dict[str, Any]) -> dict[str, float]:
    """The pod's effective request per resource (see the module docstring: sidecars, init
    containers, pod-level resources, overhead); cores, bytes, GPUs.

    Raises:
        DataError: malformed containers or quantities.
    """
    containers = spec.get("containers") or []
    inits = spec.get("initContainers") or []
    if not isinstance(containers, list) or not isinstance(inits, list):
        raise DataError("Pod.spec.containers and initContainers must be lists")
    total: dict[str, float] = defaultdict(float)
    for i, c in enumerate(containers):
        for k, v in _container_requests(c, _named("containers", i, c)).items():
            total[k] += v
    sidecars: dict[str, float] = defaultdict(float)
    init_peak: dict[str, float] = defaultdict(float)
    for i, c in enumerate(inits):
        own = _container_requests(c, _named("initContainers", i, c))
        if isinstance(c, dict) and c.get("restartPolicy") == "Always":  # a sidecar
            for k, v in own.items():
                total[k] += v
                sidecars[k] += v
            during = dict(sidecars)
        else:
            during = {k: own.get(k, 0.0) + sidecars.get(k, 0.0) for k in {*own, *sidecars}}
        for k, v in during.items():
            init_peak[k] = max(init_peak[k], v)
    for k, v in init_peak.items():
        total[k] = max(total[k], v)
    pod_level = spec.get("resources") or {}
    overhead = spec.get("overhead") or {}
    if not isinstance(pod_level, dict) or not isinstance(overhead, dict):
        raise DataError("Pod.spec.resources and Pod.spec.overhead must be objects")
    preq = pod_level.get("requests") or {}
    plim = pod_level.get("limits") or {}
    if not isinstance(preq, dict) or not isinstance(plim, dict):
        raise DataError("Pod.spec.resources.requests/limits must be objects")
    for k, v in _resources(preq, plim, "spec.resources").items():
        if k in _BOUND:  # pod-level resources: CPU and memory only
            total[k] = v
    for k, v in _resources(overhead, {}, "spec.overhead").items():
        total[k] += v
    return dict(total)


def pod_request(pod: Any) -> PodRequest:
    """Read a ``v1.Pod`` (JSON) into a :class:`PodRequest` (see the module docstring).

    Raises:
        DataError: not a Pod, a name or uid Kubernetes would not accept, a malformed quantity or
            annotation (e.g. a non-integer GPU count).
        PodOutOfBounds: (a :class:`DataError`) a quantity above FleetMind's bounds, with the
            pod's key.
        PodUnsupported: (a :class:`DataError`) a GPU request FleetMind cannot place (two MIG
            profiles, ``nvidia.com/gpu`` and MIG, a GPU share above 1000 milli, negative or on
            several GPUs, GPU-sharing annotations that say no GPU beside ``nvidia.com/gpu`` or a
            MIG resource, a ``gpu-card-model`` with a NUL or with no model that fits
            :data:`MAX_MODEL_CHARS`), with the pod's key.
    """
    if not isinstance(pod, dict):
        raise DataError("ExtenderArgs.Pod must be a v1.Pod object")
    meta = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    if not isinstance(meta, dict) or not isinstance(spec, dict):
        raise DataError("Pod.metadata and Pod.spec must be objects")
    raw_name = meta.get("name") or meta.get("generateName")
    if not raw_name:
        raise DataError("Pod.metadata.name is missing")
    name = check_name(raw_name, "Pod.metadata.name")
    ns = meta.get("namespace") or "default"
    key = f"{check_name(ns, 'Pod.metadata.namespace', label=True)}/{name}"
    uid = check_uid(meta.get("uid"))
    claims = len(claim_names(spec))
    try:
        req = _requests(key, uid, meta, spec)
    except PodRefused as err:
        err.key = key
        raise
    devices = other_device_requests(spec)  # the containers are checked by now
    if claims or devices:
        req = dataclasses.replace(req, resource_claims=claims, other_devices=devices)
    return req


def other_device_requests(spec: dict[str, Any]) -> tuple[str, ...]:
    """The accelerators of other vendors (:func:`~fleetmind.data.graph_build.is_other_device`:
    ``amd.com/gpu``, ``habana.ai/gaudi``, ``google.com/tpu``, ``gpu.intel.com/i915``, ...) that
    any container or init container of the pod asks for (``resources.requests``, else ``limits``:
    an extended resource may be given in ``limits`` alone), above 0, sorted; ``()`` for none.
    Kubernetes resource names as the pod writes them.

    Raises:
        DataError: malformed containers, or a quantity of such a resource that is not one.
    """
    found: set[str] = set()
    for field_name in ("containers", "initContainers"):
        containers = spec.get(field_name) or []
        if not isinstance(containers, list):
            raise DataError(f"Pod.spec.{field_name} must be a list")
        for i, c in enumerate(containers):
            res = c.get("resources") if isinstance(c, dict) else None
            if not isinstance(res, dict):
                continue  # effective_requests refuses what is malformed
            req, lim = res.get("requests") or {}, res.get("limits") or {}
            if not isinstance(req, dict) or not isinstance(lim, dict):
                continue
            for name in {*req, *lim}:
                v = req.get(name, lim.get(name))
                if isinstance(name, str) and v is not None and is_other_device(name):
                    if parse_quantity(v, f"{field_name}[{i}] {_shown(name)}") > 0:
                        found.add(name)
    return tuple(sorted(found))


def claim_names(spec: dict[str, Any]) -> list[str]:
    """The names of a pod's ``spec.resourceClaims`` (Dynamic Resource Allocation, GA in
    Kubernetes 1.34: ``PodResourceClaim{name, resourceClaimName | resourceClaimTemplateName}`` of
    ``k8s.io/api/core/v1``), in order; ``[]`` for none. The devices a claim asks for (e.g. NVIDIA's
    DRA driver's ``gpu.nvidia.com``) are in its ResourceClaim or ResourceClaimTemplate, which
    kube-scheduler does not send to an extender, so they are not counted.

    Raises:
        DataError: ``resourceClaims`` is not a list of objects.
    """
    claims = spec.get("resourceClaims")
    if claims is None:
        return []
    if not isinstance(claims, list) or not all(isinstance(c, dict) for c in claims):
        raise DataError("Pod.spec.resourceClaims must be a list of objects")
    return [str(c.get("name") or "") for c in claims]


def _shared_gpus(
    count: int, milli: int, device: float, ann: dict[str, Any]
) -> tuple[int, int, bool]:
    """``(num_gpu, gpu_milli, device_gpus)`` of a pod sized by the GPU-sharing annotations
    (``count`` GPUs of ``milli`` each; ``device``: its ``nvidia.com/gpu`` request, 0 for none).

    ``gpu-milli`` 0 is a CPU-only pod, and so is ``gpu-count`` 0 without a ``gpu-milli``: the FGD
    simulator's Filter (``open_gpu_share.go``) passes a pod whose ``gpu-milli`` is <= 0 at once.
    ``gpu-count`` 0 with a share of 1..1000 is refused: the simulator's Filter goes on to
    ``AllocateGpuId`` (``open-gpu-share/cache/gpunodeinfo.go``), which finds no GPU for a count
    <= 0, so the pod fails every node. Annotations that disagree with a ``nvidia.com/gpu`` request
    (no GPU, another count, a share of one) are refused too: the kubelet gives the pod the device
    plugin's whole GPUs whatever FleetMind counts, so no reading of the pod is right. Annotations
    that agree with it leave it a ``nvidia.com/gpu`` pod (``device_gpus`` True): the kubelet still
    gives it the device plugin's devices, one time-slicing replica each on a time-sliced node
    (:func:`replicas_for`).

    Raises:
        PodUnsupported: a count below 0, a share outside 0..1000, or a request named above.
    """
    if count < 0 or not 0 <= milli <= 1000:
        raise PodUnsupported(
            f"{ANN_GPU_MILLI} must be 1..1000 (0: no GPU) and {ANN_GPU_COUNT} >= 0, got "
            f"{_given(ann)}"
        )
    if count == 0 and milli > 0 and ANN_GPU_MILLI in ann:
        raise PodUnsupported(
            f"{ANN_GPU_COUNT} 0 with {ANN_GPU_MILLI} {milli}: a GPU share on no GPU (the FGD "
            "simulator fails such a pod on every node)"
        )
    no_gpu = count == 0 or milli == 0
    if device > 0 and (no_gpu or count != device or milli < 1000):
        if no_gpu:
            asked = f"no GPU ({ANN_GPU_COUNT if count == 0 else ANN_GPU_MILLI} 0)"
        else:
            asked = f"{count} GPU(s) of {milli} milli"
        raise PodUnsupported(
            f"conflicting GPU requests: annotations say {asked}, {GPU_RESOURCE} asks {device:g}"
        )
    return (0, 0, False) if no_gpu else (count, milli, device > 0)


def _requests(key: str, uid: str | None, meta: dict[str, Any], spec: dict[str, Any]) -> PodRequest:
    """The resource part of :func:`pod_request` (the pod's name and uid already checked)."""
    total = effective_requests(spec)
    cpu_milli = math.ceil(total.get("cpu", 0.0) * 1000 - 1e-9)
    memory_mib = math.ceil(total.get("memory", 0.0) / 2**20 - 1e-9)
    if cpu_milli > MAX_CPU_MILLI or memory_mib > MAX_MEMORY_MIB:
        raise PodOutOfBounds(
            f"the pod asks for {cpu_milli} mCPU and {memory_mib} MiB; at most "
            f"{MAX_CPU_MILLI} mCPU and {MAX_MEMORY_MIB} MiB are supported"
        )
    models: tuple[str, ...] = ()
    mig = {k: v for k, v in total.items() if k.startswith(MIG_PREFIX) and v > 0}
    if len(mig) > 1:
        raise PodUnsupported(
            f"the pod asks for several MIG profiles ({', '.join(sorted(mig))}); FleetMind "
            "places pods of one profile only"
        )
    gpus = total.get(GPU_RESOURCE, 0.0)
    if mig:
        if gpus:
            raise PodUnsupported(
                f"the pod asks for both {GPU_RESOURCE} and MIG instances ({next(iter(mig))}); "
                "FleetMind places pods of one GPU resource only"
            )
        ((res, gpus),) = mig.items()
        models = (f"MIG {res[len(MIG_PREFIX) :]}",)
    if gpus != int(gpus):
        raise DataError(f"GPUs must be a whole number, got {gpus:g}")
    if gpus > MAX_GPUS:
        raise PodOutOfBounds(f"the pod asks for {gpus:g} GPUs; at most {MAX_GPUS} are supported")
    num_gpu, gpu_milli, device_gpus = int(gpus), 1000, not mig
    ann = meta.get("annotations") or {}
    if not isinstance(ann, dict):
        raise DataError("Pod.metadata.annotations must be an object")
    if ANN_GPU_COUNT in ann or ANN_GPU_MILLI in ann:
        count, milli = str(ann.get(ANN_GPU_COUNT, 1)), str(ann.get(ANN_GPU_MILLI, 1000))
        ints = bool(_GO_INT.fullmatch(count) and _GO_INT.fullmatch(milli))
        if not mig:  # a MIG pod's size is its MIG resource: annotations sizing it are ignored
            if not ints:
                raise PodUnsupported(  # free text to the API server: kube-scheduler sends such pods
                    f"annotations {ANN_GPU_COUNT} and {ANN_GPU_MILLI} must be integers "
                    f"(ASCII digits), got {_given(ann)}"
                )
            num_gpu, gpu_milli, device_gpus = _shared_gpus(int(count), int(milli), gpus, ann)
        elif ints and (int(count) == 0 or int(milli) == 0):
            # annotations that say no GPU beside a MIG request: the kubelet still gives it the
            # instances, so no reading of the pod is right
            zero = ANN_GPU_COUNT if int(count) == 0 else ANN_GPU_MILLI
            raise PodUnsupported(
                f"conflicting GPU requests: annotations say no GPU ({zero} 0), "
                f"{next(iter(mig))} asks {gpus:g}"
            )
    if num_gpu > MAX_GPUS:
        raise PodOutOfBounds(f"the pod asks for {num_gpu} GPUs; at most {MAX_GPUS} are supported")
    if num_gpu > 1 and gpu_milli < 1000:
        raise PodUnsupported(
            f"a multi-GPU pod takes whole GPUs: {ANN_GPU_MILLI} must be 1000 with "
            f"{ANN_GPU_COUNT} {num_gpu}, got {gpu_milli}"
        )
    given = "" if mig else str(ann.get(ANN_GPU_MODEL) or "")
    spec = given[:1000]
    if num_gpu and "\x00" in given:  # free text to the API server; no model name holds a NUL
        raise PodUnsupported(
            f"annotation {ANN_GPU_MODEL} must not contain NUL characters, got {_shown(spec)}"
        )
    named = models if mig else parse_gpu_models(given)
    models = clip_models(named)
    if num_gpu and named and not models:
        if mig:
            raise PodUnsupported(
                f"MIG resource {_shown(next(iter(mig)))} names a profile longer than "
                f"{MAX_MODEL_CHARS} characters"
            )
        raise PodUnsupported(
            f"annotation {ANN_GPU_MODEL} names no GPU model of at most {MAX_MODEL_CHARS} "
            f"characters, got {_shown(given)}"
        )
    req = PodRequest(
        key=key,
        uid=uid,
        cpu_milli=cpu_milli,
        memory_mib=memory_mib,
        num_gpu=num_gpu,
        gpu_milli=gpu_milli if num_gpu else 0,
        gpu_models=models,
        gpu_model_spec=spec,
        models_ignored=len(named) - len(models) if num_gpu else 0,
        device_gpus=device_gpus and num_gpu > 0,
        mig=bool(mig) and num_gpu > 0,
    )
    try:  # the placement request it becomes (checked above; any value JobSpec still refuses)
        req.job()
    except ValidationError as err:
        first = err.errors()[0] if err.errors() else {}
        raise PodUnsupported(
            f"the pod's request cannot be placed: {'.'.join(map(str, first.get('loc', ())))} "
            f"{first.get('msg', 'is invalid')}"
        ) from None
    return req


def clip_models(models: tuple[str, ...]) -> tuple[str, ...]:
    """The entries of ``models`` (:func:`parse_gpu_models`), whole and in order, that fit in
    :data:`MAX_MODEL_CHARS` characters ``|``-joined (an entry that does not fit is skipped): never
    a name cut short, which would match more GPUs (``A100-40GB`` cut to ``A100``); fewer entries
    only allow fewer GPUs. ``()`` when none fits."""
    kept: list[str] = []
    used = -1
    for m in models:
        if used + 1 + len(m) <= MAX_MODEL_CHARS:
            kept.append(m)
            used += 1 + len(m)
    return tuple(kept)


@dataclass
class Decision:
    """The extender's view of one Pod on the candidate nodes.

    ``options`` are the feasible nodes, best first (the policy's choice first); ``failed`` and
    ``unresolvable`` map the others to a reason (unresolvable: the node could not hold the Pod even
    empty, so preemption would not help).
    """

    names: list[str]
    options: list[Option] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)
    unresolvable: dict[str, str] = field(default_factory=dict)
    passthrough: list[str] = field(default_factory=list)
    cpu_only: bool = False
    """The pod asks for no GPU: nodes without GPUs (``gpu_nodes`` lists the others) come first."""
    gpu_nodes: frozenset[str] = frozenset()
    replicas: dict[str, int] = field(default_factory=dict)
    """Time-slicing replicas per GPU of the candidate nodes that have them (> 1): the hold on such
    a node is ``PodRequest.job(replicas=...)``."""

    def scores(self) -> dict[str, int]:
        """Host -> 0..10: the policy's choice 10, the other feasible nodes ``0..``:data:`OTHERS_MAX`
        (4) by policy score (the best of them 4, the worst 0; all 4 when they tie), others 0.

        A CPU-only pod with feasible nodes both with and without GPUs: the first node without GPUs
        (the choice) 10, the other such nodes 4..3, the GPU nodes 2..0, each in policy order (a
        CPU-only pod should not take a GPU node's CPU and memory while a CPU node has room).

        What the gap is worth: kube-scheduler adds ``score x weight x 10`` per node
        (``finalscore := score * weight * (MaxNodeScore / MaxExtenderPriority)``, ``prioritizeNodes``
        in ``pkg/scheduler/schedule_one.go``) to its score plugins' weighted 0..100 scores, so the
        choice leads any other node by at least ``6 x weight x 10``: 180 at the ``weight: 3`` of
        ``deploy/kube-scheduler-config.yaml``. The default plugins' weights
        (``pkg/scheduler/apis/config/v1/default_plugins.go``) make that more than the resource
        plugins can take back together (NodeResourcesFit's LeastAllocated 1 x 100, which prefers
        the emptier node that bin packing avoids, plus BalancedAllocation 1 x 50: with CPU and
        memory its score is ``(1 - |f_cpu - f_mem| / 2) x 100``, 50..100), and less than one
        preference a user states at full strength (a preferred NodeAffinity 2 x 100,
        PodTopologySpread or InterPodAffinity 2 x 100, a PreferNoSchedule taint the pod does not
        tolerate 3 x 100), which therefore still wins."""
        out = dict.fromkeys(self.names, 0)
        if not self.options:
            return out
        choice, rest = self.options[0], self.options[1:]
        gpu = [o for o in rest if o.node in self.gpu_nodes]
        if self.cpu_only and gpu and choice.node not in self.gpu_nodes:
            cpu = [o for o in rest if o.node not in self.gpu_nodes]
            for i, o in enumerate(cpu):
                out[o.node] = OTHERS_MAX - (2 * i) // len(cpu)  # 4..3
            for i, o in enumerate(gpu):
                out[o.node] = OTHERS_MAX - 2 - (3 * i) // len(gpu)  # 2..0
        elif rest:
            lo = min(o.score for o in rest)
            hi = max(o.score for o in rest)
            for o in rest:
                frac = (o.score - lo) / (hi - lo) if hi > lo else 1.0
                out[o.node] = int(math.floor(OTHERS_MAX * frac + 1e-9))
        out[choice.node] = MAX_EXTENDER_PRIORITY
        return out


def _wants(node: NodeState, req: PodRequest) -> tuple[str, ...] | None:
    """The models ``req`` may take on ``node`` (``()``: any; ``None``: none).

    On a node of the MIG mixed strategy (:func:`mig_mixed`) a pod that does not ask for
    ``nvidia.com/mig-<profile>`` gets only GPUs with MIG disabled: its wanted names that name MIG
    (a ``gpu-card-model`` of ``"MIG 1g.10gb"``, which only the single strategy's ``nvidia.com/gpu``
    can give) are dropped, and with them all of a list of only such names (``None``). What remains
    never takes a MIG instance there (:func:`gpu_allowed`)."""
    if req.mig or not req.gpu_models or not mig_mixed(node):
        return req.gpu_models
    kept = tuple(w for w in req.gpu_models if not names_mig(w))
    return kept or None


def _eligible(node: NodeState, req: PodRequest) -> list[GpuState]:
    """The GPUs of ``node`` that ``req`` may take, healthy or not (:func:`_wants`,
    :func:`gpu_allowed`)."""
    wants = _wants(node, req)
    if wants is None:
        return []
    mixed = mig_mixed(node)
    return [g for g in node.gpus if gpu_allowed(g, wants, mixed)]


def _model_ok(node: NodeState, req: PodRequest) -> bool:
    """Whether a GPU of ``node`` is one ``req`` may take: a model it allows
    (:func:`gpu_model_matches`) and, on a node of the MIG mixed strategy, a MIG instance only for
    a ``nvidia.com/mig-<profile>`` pod (:func:`_eligible`)."""
    if not req.gpu_models:
        if req.gpu_model_spec:
            return False  # an annotation that names no model allows none
        if not mig_mixed(node):
            return True  # any model (a node without GPUs fails later, for their count)
    return bool(_eligible(node, req))


def _model_reason(node: NodeState, req: PodRequest) -> tuple[str, str]:
    """Why no GPU of ``node`` is one ``req`` may take (:func:`_model_ok` is False): the reason,
    one fixed phrase per cause with only the pod's own request in it and no ``", "`` (the
    separator of kube-scheduler's ``FitError``), and the node's figures for the DEBUG line."""
    mixed_migs = [g for g in node.gpus if not g.missing and is_mig(g)] if mig_mixed(node) else []
    models = ", ".join(sorted({g.model for g in node.gpus})) or "none"
    if (
        not req.mig
        and not (req.gpu_model_spec and not req.gpu_models)
        and any(gpu_model_matches(g.model, req.gpu_models) for g in mixed_migs)
    ):
        profiles = sorted({_profile(g.model) for g in mixed_migs} - {""})
        wants = ", ".join(f"{MIG_PREFIX}{p.replace('+', '.')}" for p in profiles)
        reason = (
            f"MIG instances here are {MIG_PREFIX}<profile> resources (mixed strategy), "
            f"not {GPU_RESOURCE}: ask for one"
        )
        return reason, f"GPU model {models}; ask for one of {wants or 'see the node'}"
    if req.gpu_model_spec and not req.gpu_models:
        reason = f"annotation {ANN_GPU_MODEL} names no GPU model"
        return reason, f"GPU model {models}; annotation {req.gpu_model_spec!r}"
    reason = (
        f"no GPU of the pod's model ({' or '.join(req.gpu_models)}) here"
        if req.gpu_models
        else "no GPU with MIG disabled here"  # a mixed MIG node whose instances have no reading
    )
    if req.models_ignored:
        total = len(req.gpu_models) + req.models_ignored
        # clip_models skips each name that does not fit and keeps later ones that do: a single
        # over-long name is skipped too, so "the list is cut" would not be true
        reason += (
            f" ({len(req.gpu_models)} of {total} models read: names that would take the list "
            f"past {MAX_MODEL_CHARS} characters are skipped)"
        )
    return reason, f"GPU model {models}"


def _profile(model: str) -> str:
    """The MIG profile of telemetry's ``"<model> MIG <profile>"`` (``""`` when not so named)."""
    head, sep, tail = model.rpartition(" MIG ")
    return tail.strip() if sep and head else ""


def replicas_for(node: NodeState, req: PodRequest) -> int:
    """Time-slicing replicas per device the pod would get on ``node`` (1: whole devices): the
    node's ``nvidia.com/gpu.replicas`` for ``nvidia.com/gpu``, its profile's
    ``nvidia.com/mig-<profile>.replicas`` for ``nvidia.com/mig-<profile>`` (GPU feature discovery
    labels replicas per resource), none for a pod sized by the GPU-sharing annotations alone (one
    that also asks ``nvidia.com/gpu`` gets the device plugin's replicas)."""
    if req.device_gpus:
        return max(1, node.gpu_replicas)
    if req.mig and req.gpu_models:
        profile = req.gpu_models[0].removeprefix("MIG ").strip()
        return max(1, node.mig_replicas.get(profile_key(profile), 1))
    return 1


REASON_PREFIX = "FleetMind: "
"""Starts every reason the extender gives a node itself, so that it reads as FleetMind's in the
pod's ``FailedScheduling`` event beside kube-scheduler's own plugins' reasons."""


def _unknown_reason(name: str, index: NodeIndex) -> str:
    """The reason for a node name telemetry has no one node for: one fixed phrase per cause (the
    clusters that share the name go to a DEBUG line)."""
    if name in index.ambiguous:
        clusters = ", ".join(index.ambiguous[name])
        log.debug(
            "kube-scheduler extender: node %s is in clusters %s",
            terminal_safe(name),
            terminal_safe(clusters),
        )
        return (
            f"{REASON_PREFIX}node name is in several clusters: set FLEETMIND_SCHEDULER_CLUSTER "
            "to this scheduler's cluster"
        )
    return f"{REASON_PREFIX}no GPU telemetry for this node"


def _why_not(node: NodeState, req: PodRequest, res: Reservations) -> tuple[str, bool]:
    """One-line reason a feasible-looking node was refused, and whether it is unresolvable.

    The wording is fixed per cause (:data:`~fleetmind.serving.scheduler.placement.GPU_CAUSES`),
    with only the pod's own request in it, never a node's figures: kube-scheduler's
    ``FitError.Error()`` counts identical reasons ("0/150 nodes are available: 112 <reason>, ...")
    and the ``FailedScheduling`` event is cut at 1024 bytes, so one reason per node would fill it
    with the first few nodes. The figures go to a DEBUG log line (logger ``fleetmind.serving``),
    and FleetMind's holds to ``GET /api/v1/scheduler/holds``.

    GPUs count only when the pod may take them (:func:`_eligible`: a model it allows; on a MIG
    node of the mixed strategy, which has instances of several profiles, MIG instances only for a
    ``nvidia.com/mig-<profile>`` pod of their profile)."""
    reason, final, detail = _cause(node, req, res)
    log.debug(
        "kube-scheduler extender: pod %s not on node %s: %s",
        req.key,
        terminal_safe(node.name),
        terminal_safe(detail),
    )
    return REASON_PREFIX + reason, final


def _cause(node: NodeState, req: PodRequest, res: Reservations) -> tuple[str, bool, str]:
    """:func:`_why_not`'s reason (without the prefix), whether it is final, and the figures."""
    eligible = _eligible(node, req)
    ids = {g.index for g in eligible}
    healthy = [g for g in eligible if g.healthy]
    kind = f"{' or '.join(req.gpu_models)} " if req.gpu_models else ""
    r = replicas_for(node, req)
    # the device plugin's distributed policy picks each replica from the GPU with the fewest
    # allocated, so it may give one pod two replicas of one GPU; FleetMind holds one replica on
    # each of n GPUs as its estimate until telemetry shows where the pod really runs
    own = " (FleetMind holds each replica on its own GPU)" if r > 1 and req.num_gpu > 1 else ""
    if req.num_gpu and len(healthy) < req.num_gpu:
        missing = sum(g.missing for g in eligible)
        detail = (
            f"{len(healthy)} healthy, {missing} without a DCGM reading, {len(eligible)} in all "
            f"of {kind}GPU(s); pod needs {req.num_gpu}"
        )
        if len(eligible) < req.num_gpu and node.device_plugin == MIG_CHANGE:
            # the MIG manager stopped the device plugin and dcgm-exporter: no GPU until it is done
            why = f"GPUs paused for a MIG change (nvidia.com/gpu.deploy.device-plugin={MIG_CHANGE})"
            return why, True, detail
        if len(eligible) < req.num_gpu:
            return f"node has fewer {kind}GPUs than the pod's {req.num_gpu}{own}", True, detail
        cause = "no_reading" if missing else "unhealthy"
        return f"too few healthy {kind}GPUs: some {GPU_CAUSES[cause]}{own}", True, detail
    if req.cpu_milli and node.cpu_milli and node.cpu_milli < req.cpu_milli:
        detail = f"{node.cpu_milli} mCPU allocatable, pod needs {req.cpu_milli}"
        return f"node's allocatable CPU is below the pod's {req.cpu_milli} mCPU", True, detail
    if req.memory_mib and node.memory_mib and node.memory_mib < req.memory_mib:
        detail = f"{node.memory_mib} MiB allocatable, pod needs {req.memory_mib}"
        return f"node's allocatable memory is below the pod's {req.memory_mib} MiB", True, detail
    if req.num_gpu:
        need = req.need(r)
        fit = sum(f >= need for i, f in free_gpus(node, res) if i in ids)
        if fit < req.num_gpu:
            cause = gpu_cause(node, res, ids, need, req.num_gpu)
            detail = (
                f"{fit} {kind}GPU(s) with {need} milli free after holds, pod needs {req.num_gpu}"
            )
            return f"not enough free {kind}GPUs ({GPU_CAUSES[cause]}){own}", False, detail
    if req.cpu_milli and node.cpu_milli:
        free = node.cpu_milli_free - res.cpu_used(node.cluster, node.name)
        if free < req.cpu_milli:
            detail = f"{free} mCPU free after holds, pod needs {req.cpu_milli}"
            return "CPU held for pods FleetMind placed, not yet seen bound", False, detail
    if req.memory_mib and node.memory_mib:
        free = node.memory_mib_free - res.mem_used(node.cluster, node.name)
        if free < req.memory_mib:
            detail = f"{free} MiB free after holds, pod needs {req.memory_mib}"
            return "memory held for pods FleetMind placed, not yet seen bound", False, detail
    why = "the placement policy found no room for the pod here"
    return why, False, why


class NodeIndex:
    """Snapshot nodes by name (one cluster when ``cluster`` is set), rebuilt per snapshot.

    Without a cluster, a name that several clusters of the telemetry use is *ambiguous*: which
    node kube-scheduler means cannot be known (``FLEETMIND_SCHEDULER_CLUSTER`` says it).
    """

    def __init__(self, cluster: str | None = None) -> None:
        self.cluster = cluster
        self._snap: FleetSnapshot | None = None
        self._by_name: dict[str, NodeState] = {}
        self.ambiguous: dict[str, list[str]] = {}
        """Node name -> the clusters that have it (empty when ``cluster`` is set)."""
        self.nodes = 0
        """Nodes of the last snapshot looked up (of ``cluster`` when set)."""
        self.gpus = 0
        """GPUs telemetry reports on those nodes (placeholders for GPUs it does not report left
        out): 0 means no GPU telemetry at all."""
        self.claim_pods: dict[str, None] = {}
        """Keys of the pods with Dynamic Resource Allocation claims already logged
        (:meth:`warn_claims`), oldest first, at most :data:`MAX_CLAIM_PODS_LOGGED`."""
        self.claim_pods_seen = 0
        """Pods with claims or other vendors' accelerators (:attr:`PodRequest.other_devices`) and
        no GPU FleetMind counts, each key counted once (while remembered)."""

    def warn_claims(self, req: PodRequest) -> None:
        """Log one WARNING per pod key (not per call) that a pod asks for devices through Dynamic
        Resource Allocation, which FleetMind does not read, or for accelerators of other vendors,
        which it does not model, and count it in :attr:`claim_pods_seen`."""
        if req.key in self.claim_pods:
            return
        if len(self.claim_pods) >= MAX_CLAIM_PODS_LOGGED:
            del self.claim_pods[next(iter(self.claim_pods))]
        self.claim_pods[req.key] = None
        self.claim_pods_seen += 1
        if not req.resource_claims:
            log.warning(
                "kube-scheduler extender: pod %s asks for %s, accelerators FleetMind does not "
                "model: every node passes, all score 0, nothing is held; kube-scheduler's "
                "NodeResourcesFit places the devices (logged once per pod; %d such pod(s) so far)",
                req.key,
                terminal_safe(", ".join(req.other_devices)),
                self.claim_pods_seen,
            )
            return
        log.warning(
            "kube-scheduler extender: pod %s asks for devices through Dynamic Resource Allocation "
            "(%d spec.resourceClaims), which FleetMind does not read: every node passes, all "
            "score 0, nothing is held; kube-scheduler's DynamicResources plugin places its devices "
            "(logged once per pod; %d such pod(s) so far)",
            req.key,
            req.resource_claims,
            self.claim_pods_seen,
        )

    def lookup(self, snap: FleetSnapshot, names: list[str]) -> dict[str, NodeState]:
        """``{name: node}`` for the ``names`` the snapshot knows (ambiguous names left out)."""
        if snap is not self._snap:
            by_name: dict[str, NodeState] = {}
            clusters: dict[str, set[str]] = {}
            nodes = gpus = 0
            for n in snap.nodes:
                if self.cluster is None or n.cluster == self.cluster:
                    by_name.setdefault(n.name, n)
                    clusters.setdefault(n.name, set()).add(str(n.cluster))
                    nodes += 1
                    gpus += sum(not g.missing for g in n.gpus)
            self.nodes, self.gpus = nodes, gpus
            ambiguous = {k: sorted(v) for k, v in clusters.items() if len(v) > 1}
            changed, self.ambiguous = ambiguous != self.ambiguous, ambiguous
            if ambiguous and changed:  # once per change, not per snapshot
                log.warning(
                    "kube-scheduler extender: %d node names are in several clusters (%s); set "
                    "FLEETMIND_SCHEDULER_CLUSTER to the scheduler's cluster",
                    len(self.ambiguous),
                    terminal_safe(", ".join(sorted(self.ambiguous)[:5])),
                )
            self._snap, self._by_name = snap, by_name
        return {
            n: self._by_name[n] for n in names if n in self._by_name and n not in self.ambiguous
        }


def candidate_names(args: dict[str, Any]) -> tuple[list[str], dict[str, Any] | None]:
    """Node names of ``ExtenderArgs`` (each once, in the order given) and, when it carried
    ``Nodes``, the node objects by name (a repeated name: its last object).

    Raises:
        DataError: neither ``Nodes`` nor ``NodeNames``, or malformed.
    """
    names = get_ci(args, "NodeNames")
    nodes = get_ci(args, "Nodes")
    if nodes is not None:
        items = get_ci(nodes, "items") if isinstance(nodes, dict) else None
        if not isinstance(items, list):
            raise DataError("ExtenderArgs.Nodes must be a v1.NodeList with 'items'")
        objs: dict[str, Any] = {}
        for i, item in enumerate(items):
            meta = item.get("metadata") if isinstance(item, dict) else None
            name = meta.get("name") if isinstance(meta, dict) else None
            if name is None or name == "":
                raise DataError(f"ExtenderArgs.Nodes.items[{i}].metadata.name is missing")
            objs[check_name(name, f"ExtenderArgs.Nodes.items[{i}].metadata.name")] = item
        return list(objs), objs
    if isinstance(names, list) and all(isinstance(n, str) for n in names):
        checked = (check_name(n, f"ExtenderArgs.NodeNames[{i}]") for i, n in enumerate(names))
        return list(dict.fromkeys(checked)), None
    raise DataError("ExtenderArgs needs Nodes (a v1.NodeList) or NodeNames (a list of strings)")


def _place(
    snapshot: FleetSnapshot,
    req: PodRequest,
    d: Decision,
    cands: list[NodeState],
    reservations: Reservations,
    placer: Placer,
    cluster: str | None,
) -> list[Option]:
    """The placer's options on ``cands``, best first: one call per time-slicing replica count
    (the pod's share of a GPU differs between them, :meth:`PodRequest.need`; a fleet without
    time-slicing is one call, as before).

    Candidates that mix replica counts: the scores of separate calls are not comparable (a
    policy's own pick, a one-node call's rank), so the groups are not merged by score. Exclusive
    GPUs come first (a pod asking ``nvidia.com/gpu`` gets a whole GPU where one is free, as the
    device plugin gives it on a node without time-slicing), then fewer replicas before more, each
    group in its policy's order; the options are re-scored by that order for prioritize.

    A pod that names MIG and whole-GPU models in ``gpu-card-model`` without asking for
    ``nvidia.com/mig-<profile>`` is placed on nodes of the MIG mixed strategy with the whole-GPU
    names only (:func:`_wants`): one more call for those nodes, after the call with the pod's own
    names at the same replica count."""
    groups: dict[tuple[int, tuple[str, ...]], list[NodeState]] = {}
    for node in cands:
        # None: refused before (_model_ok); a CPU-only pod's models are not used
        wants = (_wants(node, req) or ()) if req.num_gpu else req.gpu_models
        groups.setdefault((d.replicas.get(node.name, 1), wants), []).append(node)
    options: list[Option] = []
    # fewer replicas first; within a count the pod's own models, then the others by name: the
    # order never depends on the order kube-scheduler listed the nodes in
    order = sorted(groups.items(), key=lambda kv: (kv[0][0], kv[0][1] != req.gpu_models, kv[0][1]))
    for (r, wants), nodes in order:
        job = req if wants == req.gpu_models else dataclasses.replace(req, gpu_models=wants)
        options += placer.place(
            snapshot,
            job.job(cluster, r),
            reservations,
            len(nodes),
            allowed={(n.cluster, n.name) for n in nodes},
            alternative_gpus=False,  # only the choice is held: its GPUs are enough
        )
    if len(groups) > 1:
        options = [dataclasses.replace(o, score=-float(i)) for i, o in enumerate(options)]
    return options


def decide(
    args: dict[str, Any],
    snapshot: FleetSnapshot,
    reservations: Reservations | Callable[[PodRequest], Reservations],
    placer: Placer,
    index: NodeIndex,
) -> tuple[PodRequest, Decision]:
    """Filter and rank the candidate nodes of ``args`` for its Pod with ``placer``.

    ``reservations``: held capacity, or a function of the pod giving it (to leave out the pod's own
    hold). Nodes the telemetry does not know (or whose name several clusters use) fail for GPU
    pods as unresolvable ("no GPU telemetry"; preemption there would change nothing FleetMind can
    see, so kube-scheduler must not evict pods for them: ``FailedAndUnresolvableNodes`` of
    ``k8s.io/kube-scheduler/extender/v1``, which ``findNodesThatPassExtenders`` in
    ``pkg/scheduler/schedule_one.go`` marks ``UnschedulableAndUnresolvable``, where ``FailedNodes``
    become ``Unschedulable``, candidates for preemption) and pass unranked for CPU-only pods
    (kube-scheduler's own resource filter has checked them). A pod beyond
    FleetMind's bounds (:class:`PodOutOfBounds`) or with a GPU request it cannot place
    (:class:`PodUnsupported`) fails every node as unresolvable, with the reason. A pod with
    Dynamic Resource Allocation claims (``spec.resourceClaims``) and no GPU request FleetMind
    counts passes every node, all scoring 0, and gets no hold: the claims' devices are in
    ResourceClaims kube-scheduler does not send, and its DynamicResources plugin decides where
    they fit (one warning per pod: :meth:`NodeIndex.warn_claims`). So does a pod asking for
    accelerators of other vendors (:attr:`PodRequest.other_devices`) and no GPU FleetMind counts.

    Raises:
        DataError: ``args`` is not ``ExtenderArgs`` (or its pod is malformed).
        NotAvailableError: a GPU pod, and telemetry has no GPU at all (of the scheduler's cluster)
            or knows none of the candidate nodes: FleetMind cannot judge any of them, and an error
            is what makes kube-scheduler skip an ``ignorable`` extender (a 200 that fails every
            node leaves the pod pending).
    """
    if not isinstance(args, dict):
        raise DataError("the body must be an ExtenderArgs object")
    try:
        req = pod_request(get_ci(args, "Pod"))
    except PodRefused as err:
        names, _ = candidate_names(args)
        # The pod as far as it was read: only its key is used (nothing passes, nothing is held).
        unread = PodRequest(err.key or "", None, 0, 0, 0, 0)
        return unread, Decision(names, unresolvable=dict.fromkeys(names, REASON_PREFIX + str(err)))
    names, objs = candidate_names(args)
    if (req.resource_claims or req.other_devices) and not req.num_gpu:
        # devices asked through DRA (their count is in the ResourceClaim, not sent here) or
        # accelerators of other vendors (not modelled): kube-scheduler places them
        index.warn_claims(req)
        return req, Decision(names, passthrough=list(names))
    known = index.lookup(snapshot, names)
    kinds = with_node_devices(known, objs)  # accelerator nodes (other vendors' too)
    if req.num_gpu:  # a node without any DCGM reading yet is judged as one telemetry lacks
        unread = unscraped(known)
        known = {n: node for n, node in known.items() if n not in unread}
        if names:
            _require_gpu_telemetry(snapshot, names, known, index, unread)
    if callable(reservations):
        reservations = reservations(req)
    d = Decision(
        names,
        cpu_only=not req.num_gpu,
        gpu_nodes=frozenset(n for n, node in kinds.items() if node.accelerator_node),
    )
    cands: list[NodeState] = []
    for name in names:
        node = known.get(name)
        if node is None:
            if not req.num_gpu:
                d.passthrough.append(name)
            else:  # unresolvable: preemption frees nothing FleetMind sees
                d.unresolvable[name] = _unknown_reason(name, index)
            continue
        if req.num_gpu and not _model_ok(node, req):
            reason, detail = _model_reason(node, req)
            log.debug(
                "kube-scheduler extender: pod %s not on node %s: %s",
                req.key,
                terminal_safe(name),
                terminal_safe(detail),
            )
            d.unresolvable[name] = REASON_PREFIX + reason
            continue
        r = replicas_for(node, req)
        if r > 1:
            d.replicas[name] = r
        cands.append(node)
    snapshot, cands = kube_scheduler_fit(snapshot, req, cands)
    d.options = _place(snapshot, req, d, cands, reservations, placer, index.cluster)
    if d.cpu_only:  # nodes without GPUs first (stable: policy order within each kind)
        d.options = cpu_nodes_first(d.options, kinds.values())
    chosen = {o.node for o in d.options}
    for node in cands:
        if node.name not in chosen:
            reason, final = _why_not(node, req, reservations)
            (d.unresolvable if final else d.failed)[node.name] = reason
    return req, d


def with_node_devices(
    known: dict[str, NodeState], objs: dict[str, Any] | None
) -> dict[str, NodeState]:
    """``known`` (telemetry's nodes by name) with each node's
    :attr:`~fleetmind.serving.telemetry.base.NodeState.other_devices` completed from its
    ``v1.Node``'s ``status.capacity`` and ``status.allocatable``, where kube-scheduler sent
    ``Nodes`` (``nodeCacheCapable: false``; ``objs``: :func:`candidate_names`): an AMD, Gaudi or
    TPU node is an accelerator node even where telemetry has no kube-state-metrics series of it.
    Capacity counts too: a device plugin takes its unhealthy devices out of allocatable only
    (capacity 8, allocatable 0 while all 8 are unhealthy), and such a node is no CPU node; with
    the plugin gone the kubelet zeroes both. For telling CPU nodes from accelerator nodes only
    (the nodes placed on stay telemetry's); a quantity that is not one counts as none."""
    if not objs:
        return known
    out = dict(known)
    for name, node in known.items():
        status = get_ci(objs.get(name), "status")
        found: set[str] = set()
        for part in ("capacity", "allocatable"):
            listed = get_ci(status, part)
            for res, qty in listed.items() if isinstance(listed, dict) else ():
                if isinstance(res, str) and is_other_device(res):
                    try:
                        if parse_quantity(qty) > 0:
                            found.add(profile_key(res))  # kube-state-metrics' name: amd_com_gpu
                    except DataError:
                        continue
        if found - node.other_devices:
            out[name] = dataclasses.replace(node, other_devices=node.other_devices | found)
    return out


def kube_scheduler_fit(
    snapshot: FleetSnapshot, req: PodRequest, cands: list[NodeState]
) -> tuple[FleetSnapshot, list[NodeState]]:
    """``snapshot`` and ``cands`` with the free CPU (millicores) and memory (MiB) of each candidate
    raised to at least the pod's request, where the pod asks for some and telemetry reports the
    resource: ``max(telemetry's free, request)``, before FleetMind's holds are subtracted.

    Every node kube-scheduler sends an extender has passed its own filters
    (``findNodesThatPassFilters`` runs before ``findNodesThatPassExtenders`` in
    ``pkg/scheduler/schedule_one.go``), NodeResourcesFit among them: the pod's CPU and memory fit
    there in kube-scheduler's exact accounting (``PodRequests``, which for an infeasible in-place
    resize counts the resources still allocated). Telemetry reading less free on such a node is
    wrong, not stricter: kube-state-metrics reads a resized pod's spec (128 cores on a 96-core
    node, where the kubelet keeps the 4 allocated), and lags a scrape. Failing the node there
    would put it in ``FailedNodes``, where kube-scheduler may preempt pods for nothing. So no sent
    node is judged on CPU or memory by telemetry again, whether it reads none free or some but
    too little (the same rule for both: a node reading 0 free never passes where one reading a
    core free fails); only what kube-scheduler does not know still counts: FleetMind's holds (the
    placers subtract :class:`Reservations` from the raised amount, so a node fails on CPU or
    memory only for them). A node with more free than the request keeps its values and its
    ranking; ``POST /api/v1/placements``, which has no kube-scheduler in front, reads telemetry
    as it is. The same snapshot is returned when no candidate is raised."""
    raised: dict[int, NodeState] = {}
    for node in cands:
        cpu, mem = node.cpu_milli_free, node.memory_mib_free
        if node.cpu_milli and req.cpu_milli:
            cpu = max(cpu, req.cpu_milli)
        if node.memory_mib and req.memory_mib:
            mem = max(mem, req.memory_mib)
        if (cpu, mem) != (node.cpu_milli_free, node.memory_mib_free):
            raised[id(node)] = dataclasses.replace(node, cpu_milli_free=cpu, memory_mib_free=mem)
    if not raised:
        return snapshot, cands
    nodes = [raised.get(id(n), n) for n in snapshot.nodes]
    return dataclasses.replace(snapshot, nodes=nodes), [raised.get(id(n), n) for n in cands]


def unscraped(known: dict[str, NodeState]) -> set[str]:
    """The names in ``known`` whose GPUs are all placeholders (``GpuState.missing``): the kubelet
    counts ``nvidia.com/gpu`` there but dcgm-exporter reports none of them, as on a node that just
    joined (Cluster Autoscaler, Karpenter) before its exporter is scraped. FleetMind cannot judge
    such a node, so :func:`decide` treats it as a node telemetry does not know: a 503 when no
    candidate is left (kube-scheduler skips an ``ignorable`` extender), else unresolvable as an
    unknown node. A node reporting some of its GPUs is judged (its placeholders unhealthy):
    :attr:`NodeState.unscraped`, which cluster health reads too."""
    return {n for n, node in known.items() if node.unscraped}


_UNSCRAPED_HINT = (
    "dcgm-exporter reports no GPU of {shown} yet: a node that just joined (Cluster Autoscaler, "
    "Karpenter) before its dcgm-exporter is scraped, or its exporter down; "
)


def _require_gpu_telemetry(
    snapshot: FleetSnapshot,
    names: list[str],
    known: dict[str, NodeState],
    index: NodeIndex,
    unread: set[str] | frozenset[str] = frozenset(),
) -> None:
    """Raise :class:`NotAvailableError` (503) when telemetry cannot judge any candidate of a GPU
    pod: it reports no GPU (of ``index.cluster``), or knows none of ``names`` (``known``, without
    the ``unread`` ones whose GPUs have no DCGM reading at all: :func:`unscraped`)."""
    where = f"cluster {index.cluster!r}" if index.cluster else "any cluster"
    mine = [n for n in names if n in unread]
    joined = _UNSCRAPED_HINT.format(shown=", ".join(repr(n) for n in mine[:3])) if mine else ""
    if not index.gpus:
        raise NotAvailableError(
            f"FleetMind's telemetry ({snapshot.source}) reports no GPU in {where} "
            f"({index.nodes} node(s)): {joined}no DCGM series? With a Prometheus server in "
            "FLEETMIND_PROMETHEUS_URL run `fleetmind doctor --prometheus URL`; with one exporter's "
            "/metrics URL, `curl URL` and look for DCGM_FI_DEV_FB_USED. "
            "Answering 503 so that kube-scheduler skips this extender (ignorable: true)"
        )
    if not known:
        shown = ", ".join(repr(n) for n in names[:3]) + (", ..." if len(names) > 3 else "")
        cause = (
            "their names are in several clusters: set FLEETMIND_SCHEDULER_CLUSTER"
            if any(n in index.ambiguous for n in names)
            else "telemetry names nodes differently, or FLEETMIND_SCHEDULER_CLUSTER or "
            "FLEETMIND_TELEMETRY_CLUSTER names another cluster"
        )
        why = joined if len(mine) == len(names) else f"{joined}{cause}. "
        raise NotAvailableError(
            f"none of the {len(names)} candidate node(s) ({shown}) is in FleetMind's telemetry "
            f"({index.nodes} node(s) in {where}): {why}Answering 503 so that "
            "kube-scheduler skips this extender (ignorable: true)"
        )


def filter_result(d: Decision, node_objs: dict[str, Any] | None) -> dict[str, Any]:
    """``ExtenderFilterResult`` (Go field names) for a decision."""
    passed = [o.node for o in d.options] + d.passthrough
    keep = set(passed)
    ordered = [n for n in d.names if n in keep]
    out: dict[str, Any] = {
        "FailedNodes": d.failed,
        "FailedAndUnresolvableNodes": d.unresolvable,
        "Error": "",
    }
    if node_objs is None:
        out["NodeNames"] = ordered
        out["Nodes"] = None
    else:
        out["Nodes"] = {
            "kind": "NodeList",
            "apiVersion": "v1",
            "items": [node_objs[n] for n in ordered],
        }
        out["NodeNames"] = None
    return out


def priority_list(d: Decision) -> list[dict[str, Any]]:
    """``HostPriorityList`` (Go field names) for a decision, in the order the nodes came."""
    scores = d.scores()
    return [{"Host": n, "Score": scores[n]} for n in d.names]


class ExtenderState:
    """Per-app extender state: the node index (rebuilt per telemetry snapshot)."""

    def __init__(self, cluster: str | None = None) -> None:
        self.index = NodeIndex(cluster)
        self.cluster = cluster

    def cluster_of(self, node: str, snapshot: FleetSnapshot | None) -> str | None:
        """The cluster of node ``node`` for ``/bound``: ``FLEETMIND_SCHEDULER_CLUSTER`` when set,
        else the one cluster of ``snapshot`` with a node of that name; ``None`` when that cannot
        be told (no snapshot, a node it does not list, a name several of its clusters use), which
        :meth:`fleetmind.serving.scheduler.reservations.DbReservations.bound` then resolves by the
        pod's uid or node. Never a guess: a node missing from the snapshot (its cluster's
        telemetry down a while) is not taken for the only cluster the snapshot has.

        Args:
            snapshot: the last telemetry snapshot read (``TelemetrySource.last_snapshot``), so
                ``/bound`` never waits on a read; ``None``: none read yet, or no telemetry. Only
                its nodes are scanned (not :attr:`index`, which the deciding calls rebuild under
                ``Services.place_lock``).
        """
        if self.cluster is not None:
            return self.cluster
        if snapshot is None:
            return None
        found = {str(n.cluster) for n in snapshot.nodes if n.name == node}
        return found.pop() if len(found) == 1 else None

    def clusters_without(self, node: str, snapshot: FleetSnapshot | None) -> frozenset[str]:
        """The clusters of ``snapshot`` that list no node named ``node`` (empty without a
        snapshot, or with ``FLEETMIND_SCHEDULER_CLUSTER`` set): for ``/bound``, the clusters a
        pod bound to ``node`` is known not to be in."""
        if self.cluster is not None or snapshot is None:
            return frozenset()
        clusters = {str(n.cluster) for n in snapshot.nodes}
        return frozenset(clusters - {str(n.cluster) for n in snapshot.nodes if n.name == node})
