"""Build the RCA dependency graph from a Kubernetes cluster, NVML topology and trace spans.

Inputs are plain JSON documents, so the builder needs no client library and tests feed recorded
responses: the Kubernetes API's list responses (``v1.NodeList``, ``v1.PodList``,
``v1.ServiceList``, optionally ``discovery.k8s.io/v1`` ``EndpointSliceList``), as
``fleetmind graph build`` fetches them with the ``kubernetes`` client; call edges from an OTLP
JSON export (``resourceSpans``) or a Jaeger JSON export (``data[].spans``); NVLink topology from
:func:`fleetmind.data.fleet_io.discover_local_fleet` when run on a GPU host.

What becomes what (ids follow ``serving/defaults/graph.json``; ``match`` labels are the alert
labels Prometheus rules carry):

| Kubernetes | node | edges |
| --- | --- | --- |
| the cluster (``--cluster``, else node label ``fleetmind.io/cluster``, else ``default``) | ``<c>`` ``cluster`` | |
| ``Node`` | ``<c>/host/<node>`` ``host``, attrs ``gpu_model`` (labels ``nvidia.com/gpu.product`` without GFD's ``-SHARED`` and ``-MIG-<profile>`` suffixes, or ``alibabacloud.com/gpu-card-model``, or the model of GKE's :data:`GKE_ACCELERATOR_LABEL`: :func:`_gpu_model`), ``region``, ``zone``, ``addresses`` (``status.addresses`` ``InternalIP``/``Hostname`` other than its name) | ``member_of`` cluster |
| its physical GPUs (:func:`_gpu_count`; none, with a warning, past :data:`MAX_NODE_GPUS`) | ``<c>/gpu/<node>/<i>`` ``gpu``, attrs ``model`` (the host's ``gpu_model``), ``memory_mib`` (label :data:`GPU_MEMORY_LABEL`, MiB, where it describes a whole GPU) | ``attached_to`` host |
| NVLink (NVML, this host) | ``<c>/link/<node>/nvlink`` ``link`` | ``attached_to`` each NVLinked GPU |
| the interconnect of the GPU model's template (every other GPU host whose ``gpu_model`` and GPU count have one, :func:`fleetmind.data.fleet_io.known_telemetry_template`; one :class:`GraphBuildWarning` names the GPU hosts with no ``gpu_model``; not MIG nodes, nor SXM / board GPUs at a count other than their board's, :func:`fleetmind.data.fleet_io.names_board_part`; with ``template_links=True``, ``fleetmind graph build --template-links``) | ``<c>/link/<node>/nvl-<i>-<j>`` per NVLink-connected pair, or ``<c>/link/<node>/pcie-sw<k>`` per shared PCIe switch ``link`` (match ``cluster``, ``node``, ``link``; attrs ``level``, ``bandwidth_gbps``: the link nodes of the RCA training graphs, :func:`fleetmind.data.topology.template_links`) | ``attached_to`` each GPU it joins |
| ``Service`` | ``<c>/svc/<ns>/<name>`` ``service`` (match ``service``, ``namespace``) | ``member_of`` cluster; ``runs_on`` each host its EndpointSlices name as a ``Node`` endpoint (the kubelet's Service) |
| ``Pod`` (not ``Succeeded``/``Failed``) | ``<c>/pod/<ns>/<name>`` ``pod``, attrs ``owner`` (its owner reference ``Kind/name``, which maps workload alerts), ``claims`` (the PersistentVolumeClaims it mounts, :func:`_claim_names`, which map volume alerts), ``addresses`` (its IPs, :func:`_pod_addresses`, which tell a prober's target ``instance`` from its own) | ``runs_on`` host; ``runs_on`` the GPUs of annotation ``alibabacloud.com/gpu-index``, and every GPU of its node when its ``nvidia.com/gpu`` request is all the node's devices (:func:`_whole_gpu_nodes`; a partial request names no GPU, nor do Dynamic Resource Allocation claims, ``spec.resourceClaims``: one :class:`GraphBuildWarning` counts such pods); ``member_of`` each Service whose EndpointSlices name it as an endpoint not marked ``ready: false``, or (no slices) whose selector matches its labels |
| a span whose parent span is in another service (across all span files) | | ``calls`` caller service -> callee service (:func:`_add_calls` resolves the names; a service not in the cluster becomes ``<c>/svc/<name>``); none from a span whose resource attribute ``k8s.cluster.name`` names another cluster than a named one (:class:`SpanCalls`) |
"""

from __future__ import annotations

import json
import os
import re
import warnings
from collections.abc import Iterable, Mapping
from typing import Any, TypeAlias

from pydantic import ValidationError

from fleetmind.data.errors import DataError
from fleetmind.data.files import read_text
from fleetmind.data.fleet_io import (
    discover_local_fleet,
    known_telemetry_template,
    names_board_part,
)
from fleetmind.data.graph_schema import (
    MAX_GRAPH_EDGES,
    MAX_GRAPH_NODES,
    GraphModel,
    validation_message,
)
from fleetmind.data.topology import template_links as topology_template_links

CLUSTER_LABEL = "fleetmind.io/cluster"
GPU_INDEX_ANNOTATION = "alibabacloud.com/gpu-index"
SHARED_SUFFIX = "-SHARED"
"""What GPU feature discovery appends to label ``nvidia.com/gpu.product`` on a node whose GPUs are
shared (time-slicing or MPS, ``renameByDefault: false``); stripped from the model name."""
NODE_ADDRESS_TYPES = ("InternalIP", "Hostname")
"""The ``status.addresses`` types of a Node kept as its host's attr ``addresses``: the
``instance`` label of a target scraped on the node's network (node-exporter's ``<InternalIP>:9100``
without relabelling), mapped back to the host by :meth:`fleetmind.data.graph.DependencyGraph.alert_subject`."""
SPAN_NAMESPACE_KEYS = ("k8s.namespace.name", "service.namespace")
"""Resource attributes (OTLP) or process tags (Jaeger) that give a span's service its Kubernetes
namespace, the first present wins."""
SPAN_CLUSTER_KEY = "k8s.cluster.name"
"""The resource attribute (OTLP) or process tag (Jaeger) that names a span's Kubernetes cluster
(OpenTelemetry semantic conventions, Kubernetes resource attributes); a span that names a cluster
other than the graph's is left out (:class:`SpanCalls`)."""
MIG_SUFFIX = "-MIG-"
"""What GPU feature discovery puts between the GPU model and the MIG profile in label
``nvidia.com/gpu.product`` under the MIG ``single`` strategy (``NVIDIA-A100-SXM4-40GB-MIG-1g.5gb``,
or ``-MIG-INVALID`` on a node the strategy does not fit); the profile is cut from the model name."""
GPU_RESOURCE = "nvidia.com/gpu"
MIG_RESOURCE_PREFIX = "nvidia.com/mig-"
"""The resources of MIG instances under the device plugin's MIG ``mixed`` strategy
(``nvidia.com/mig-3g.40gb``), beside ``nvidia.com/gpu``, which then counts only the GPUs not in MIG
mode (NVIDIA, "MIG Support in Kubernetes", the ``mixed`` strategy; k8s-device-plugin
``internal/lm/mig-strategy.go``). Only a positive quantity marks MIG instances: the kubelet keeps a
resource the device plugin no longer advertises at ``"0"`` (``pkg/kubelet/nodestatus/setters.go``)."""
MIG_STRATEGY_LABEL = "nvidia.com/mig.strategy"
"""GPU feature discovery's label of the cluster's MIG strategy (``single``, ``mixed``). GFD writes
it on every GPU node whenever the strategy is not ``none``, MIG-capable or not, MIG instances or
not (k8s-device-plugin ``internal/lm/strategy.go``, ``internal/lm/mig-strategy.go``), so it does
not tell that a node has MIG instances."""
GPU_MEMORY_LABEL = "nvidia.com/gpu.memory"
"""GPU feature discovery's label of one GPU's framebuffer (MiB, as NVML reports it: ``15360`` on a
T4, ``40960`` on an A100-SXM4-40GB). Under the MIG ``single`` strategy it is a MIG instance's, and
``0`` with ``-MIG-INVALID`` (k8s-device-plugin ``internal/lm/mig-strategy.go``), so it is kept
(GPU attr ``memory_mib``) only where the product names no MIG profile."""
GKE_SHARED_CLIENTS_LABEL = "cloud.google.com/gke-max-shared-clients-per-gpu"
"""GKE's node label of GPU time-sharing and MPS: containers per physical GPU (allocatable
``nvidia.com/gpu`` is GPUs x this)."""
GKE_PARTITION_LABEL = "cloud.google.com/gke-gpu-partition-size"
"""GKE's node label of MIG: the profile every GPU of the node is cut into (allocatable
``nvidia.com/gpu`` counts the instances)."""
GKE_ACCELERATOR_LABEL = "cloud.google.com/gke-accelerator"
"""GKE's node label of the GPU type of a GPU node pool (the ``--accelerator type=`` of
``gcloud container node-pools create``). GKE runs no GPU feature discovery by default, so its
nodes carry no ``nvidia.com/gpu.product``; :data:`GKE_ACCELERATOR_MODELS` names the model."""
GKE_ACCELERATOR_MODELS: dict[str, str] = {
    "nvidia-gb200": "NVIDIA-GB200",
    "nvidia-b200": "NVIDIA-B200",
    "nvidia-h200-141gb": "NVIDIA-H200",
    "nvidia-h100-mega-80gb": "NVIDIA-H100-80GB-HBM3",
    "nvidia-h100-80gb": "NVIDIA-H100-80GB-HBM3",
    "nvidia-a100-80gb": "NVIDIA-A100-SXM4-80GB",
    "nvidia-tesla-a100": "NVIDIA-A100-SXM4-40GB",
    "nvidia-l4": "NVIDIA-L4",
    "nvidia-tesla-t4": "Tesla-T4",
}
"""GPU model, spelled as GPU feature discovery's ``nvidia.com/gpu.product`` would (NVML's name,
dashes for spaces), per :data:`GKE_ACCELERATOR_LABEL` value, for a node without that label. The
values and their machine series are GKE's "Run GPUs in GKE Standard node pools"
(https://cloud.google.com/kubernetes-engine/docs/how-to/gpus): ``nvidia-gb200`` A4X
(``a4x-highgpu-4g``, 4 GB200 GPUs per node, one tray of a GB200 NVL72 rack: ``gb200-4`` in
``src/xpk/core/system_characteristics.py`` of AI-Hypercomputer/xpk, ``chips_per_vm=4``; the
``gb200-tray`` template), ``nvidia-b200`` A4 (HGX B200),
``nvidia-h200-141gb`` A3 Ultra (HGX H200), ``nvidia-h100-80gb`` A3 High and
``nvidia-h100-mega-80gb`` A3 Mega (both the H100 SXM5 80 GB HBM3 board), ``nvidia-tesla-a100`` A2
Standard (A100 SXM4 40 GB) and ``nvidia-a100-80gb`` A2 Ultra (A100 SXM4 80 GB), ``nvidia-l4`` G2,
``nvidia-tesla-t4``. Other values (``nvidia-rtx-pro-6000``, ``nvidia-tesla-v100``...) name no
model: no built-in template describes them, or their form factor is not documented there."""
OTHER_DEVICE_PATTERN = (
    "amd_com_gpu(_[pv]f)?|amd_com_[a-z]px_nps[0-9]+"
    "|habana_ai_.+|google_com_tpu|gpu_intel_com_.+|aws_amazon_com_neuron.*"
)
"""Extended resources of accelerators FleetMind does not model, as kube-state-metrics names them
(each character of the resource name that is not a letter, digit or ``_`` becomes ``_``,
``SanitizeLabelName`` in ``internal/store/node.go`` of kubernetes/kube-state-metrics), as a
regular expression matched whole (PromQL's RE2 and Python's ``re`` read it alike, no
lookahead): AMD's GPUs as ROCm/k8s-device-plugin names them (``amd.com/gpu``; ``amd.com/gpu_vf``
and ``amd.com/gpu_pf`` of its passthrough drivers, ``DeviceTypeGPUVF`` / ``DeviceTypeGPUPF`` in
``internal/pkg/types/constants.go``; and under ``--resource_naming_strategy=mixed`` one resource
per partition mode, the GPU's ``current_compute_partition`` and ``current_memory_partition``
lowercased and joined by ``_``, ``internal/pkg/amdgpu/amdgpu.go``: ``amd.com/cpx_nps4``,
``amd.com/spx_nps1``), Intel Gaudi (``habana.ai/gaudi``), Google TPUs (``google.com/tpu``),
Intel GPUs (``gpu.intel.com/i915``, ``gpu.intel.com/xe``) and AWS Neuron
(``aws.amazon.com/neuron``, ``aws.amazon.com/neuroncore``). Not every resource of other vendors:
not SR-IOV NICs under ``intel.com/``, nor the NICs of AMD's network operator (``amd.com/nic``,
``amd.com/vnic``: ``docs/device_plugin/deviceplugin.md`` of ROCm/network-operator); and no
NVIDIA resource (those are GPUs FleetMind reads)."""


def is_other_device(resource: str) -> bool:
    """Whether ``resource`` (a Kubernetes resource name, ``amd.com/gpu``, or kube-state-metrics'
    ``amd_com_gpu``) is an accelerator FleetMind does not model (:data:`OTHER_DEVICE_PATTERN`)."""
    return bool(re.fullmatch(OTHER_DEVICE_PATTERN, re.sub(r"[^a-zA-Z0-9_]", "_", resource)))


MAX_NODE_GPUS = 64
"""Most physical GPUs one Kubernetes node may report (see :func:`_gpu_count`): the scheduler
extender's per-pod bound
(``serving/scheduler/extender.py`` ``MAX_GPUS``); a real node has at most a few dozen (8 on a
DGX/HGX board, 16 on an HGX-2). A node with a larger count gets no GPU nodes, with a
:class:`GraphBuildWarning`: typically a time-sliced node without GPU feature discovery's labels,
whose allocatable ``nvidia.com/gpu`` counts every replica."""
MIG_INSTANCES_PER_GPU: dict[str, int] = {
    "1g.5gb": 7, "1g.6gb": 4, "1g.10gb": 7, "1g.12gb": 7, "1g.18gb": 7, "1g.20gb": 4,
    "1g.23gb": 7, "1g.24gb": 4, "1g.35gb": 4, "1g.36gb": 4, "1g.45gb": 4, "1g.47gb": 4,
    "2g.10gb": 3, "2g.12gb": 2, "2g.20gb": 3, "2g.24gb": 3, "2g.35gb": 3, "2g.36gb": 3,
    "2g.45gb": 3, "2g.47gb": 3, "2g.48gb": 2,
}  # fmt: skip
"""MIG instances of a ``1g`` or ``2g`` profile that one GPU is cut into under the MIG ``single``
strategy, as the NVIDIA GPU Operator's ``default-mig-parted-config`` fills a GPU with it
(``all-<profile>``, ``assets/state-mig-manager/0400_configmap.yaml``); ``1g.10gb`` makes 4 on a
40 GB A100/A800. Every ``3g`` profile makes 2, ``4g`` and ``7g`` 1, a ``+me`` (media extensions)
profile 1; ``+gfx`` and ``-me`` variants as their base profile (:func:`_mig_instances_per_gpu`)."""


SpanService: TypeAlias = str | tuple[str, str]
"""A service of a trace: its bare ``service.name``, or ``(namespace, name)`` when the span's
resource names its namespace (:data:`SPAN_NAMESPACE_KEYS`)."""


class SpanCalls(list[tuple[SpanService, SpanService]]):
    """What :func:`calls_from_spans` answers: the ``(caller service, callee service)`` pairs of
    every span, whatever its cluster, sorted (a plain list of them to any other reader), and which
    of them a graph of one cluster keeps (:meth:`of_cluster`).

    A span whose resource names its cluster (:data:`SPAN_CLUSTER_KEY`) belongs to that cluster
    only; one that names none belongs to every cluster, as before spans named clusters. A call
    counts for cluster ``c`` when neither of its two spans names another cluster. When no span
    names ``c`` itself, the spans' names are no names of the graph's clusters (GKE's cluster name
    where the graph is named after the alerts' ``cluster`` label) and every pair counts.
    """

    def __init__(
        self,
        pairs: Iterable[tuple[SpanService, SpanService]] = (),
        needs: Mapping[tuple[SpanService, SpanService], set[tuple[str, ...]]] | None = None,
        spans_of: Mapping[str, int] | None = None,
    ) -> None:
        super().__init__(pairs)
        self.needs = dict(needs or {})
        """Each pair's ways to be drawn: the clusters its two spans name, one tuple per pair of
        spans that shows the call (``()``: neither names one)."""
        self.spans_of = dict(spans_of or {})
        """Spans per cluster name they carry (those with none not counted)."""

    def of_cluster(self, cluster: str) -> tuple[list[tuple[SpanService, SpanService]], int]:
        """The pairs a graph of ``cluster`` draws, and how many spans it leaves out: those that
        name another cluster, when some span names ``cluster``; else every pair, none left out."""
        if cluster not in self.spans_of:
            return list(self), 0
        keep = [p for p in self if any(set(k) <= {cluster} for k in self.needs.get(p, [()]))]
        return keep, sum(n for name, n in self.spans_of.items() if name != cluster)


class GraphBuildWarning(UserWarning):
    """Something the build left out of the graph (an ambiguous trace service name, NVLinks of a
    node name that is no Node of the cluster, the GPUs of a node whose GPU count cannot be made
    out: :func:`_gpu_count`, template links of GPU hosts of no known model, accelerators other
    than NVIDIA GPUs). The CLI prints it as ``fleetmind: warning: ...``."""


def _items(doc: Any, what: str) -> list[dict[str, Any]]:
    if doc is None:
        return []
    if not isinstance(doc, Mapping) or not isinstance(doc.get("items"), list):
        raise DataError(f"{what} must be a Kubernetes list response with 'items'")
    return [x for x in doc["items"] if isinstance(x, Mapping)]


def _meta(obj: Mapping[str, Any]) -> dict[str, Any]:
    m = obj.get("metadata")
    return m if isinstance(m, dict) else {}


def _obj(value: Any) -> Mapping[str, Any]:
    """``value`` when it is a JSON object, else ``{}``: a field of the wrong type in a list item
    (``labels`` as a list, ``status`` as a string) is read as absent, as :func:`_meta` reads a
    wrong ``metadata``."""
    return value if isinstance(value, Mapping) else {}


def _seq(value: Any) -> list[Any]:
    """``value`` when it is a JSON array, else ``[]`` (see :func:`_obj`)."""
    return value if isinstance(value, list) else []


def _labels(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    """The item's ``metadata.labels`` (``{}`` when absent or not an object)."""
    return _obj(_meta(obj).get("labels"))


class _Builder:
    def __init__(self, name: str) -> None:
        self.name = name
        self.nodes: dict[str, dict[str, Any]] = {}
        self.edges: set[tuple[str, str, str]] = set()
        self.on_gpus: set[str] = set()  # sources of a runs_on edge to a GPU node

    def node(
        self, nid: str, kind: str, cluster: str | None, match: dict[str, str], **attrs: Any
    ) -> str:
        if nid not in self.nodes:
            if len(self.nodes) >= MAX_GRAPH_NODES:
                raise DataError(
                    f"the cluster makes more than {MAX_GRAPH_NODES:,} graph nodes (hosts, GPUs, "
                    f"services, pods), the most a graph may hold; at {kind} {_short(nid)}"
                )
            self.nodes[nid] = {"id": nid, "kind": kind, "cluster": cluster, "match": match,
                               "attrs": {k: v for k, v in attrs.items() if v not in (None, "")}}  # fmt: skip
        return nid

    def edge(self, src: str, dst: str, kind: str) -> None:
        if src != dst:
            if len(self.edges) >= MAX_GRAPH_EDGES and (src, dst, kind) not in self.edges:
                raise DataError(
                    f"the cluster makes more than {MAX_GRAPH_EDGES:,} graph edges, the most a "
                    f"graph may hold; at {kind} {_short(src)} -> {_short(dst)}"
                )
            self.edges.add((src, dst, kind))
            if kind == "runs_on" and self.nodes.get(dst, {}).get("kind") == "gpu":
                self.on_gpus.add(src)

    def model(self) -> GraphModel:
        """The graph, validated.

        Raises:
            DataError: a value the graph JSON cannot hold (e.g. a ``--cluster`` name longer than
                256 characters, a span's service name that makes an id longer than the limit),
                naming the graph node or edge.
        """
        nodes = list(self.nodes.values())
        edges = [{"src": s, "dst": d, "kind": k} for s, d, k in sorted(self.edges)]
        try:
            return GraphModel.model_validate({"name": self.name, "nodes": nodes, "edges": edges})
        except ValidationError as err:
            loc = err.errors(include_url=False)[0].get("loc", ())
            what = f"graph {_short(self.name)}"
            if len(loc) >= 2 and loc[0] == "nodes" and isinstance(loc[1], int):
                what = f"{nodes[loc[1]]['kind']} {_short(nodes[loc[1]]['id'])}"
            elif len(loc) >= 2 and loc[0] == "edges" and isinstance(loc[1], int):
                e = edges[loc[1]]
                what = f"{e['kind']} edge {_short(e['src'])} -> {_short(e['dst'])}"
            raise DataError(f"cannot build the graph: {what}: {validation_message(err)}") from None


def _short(text: str, keep: int = 100) -> str:
    """``text`` quoted, its middle elided when longer than ``keep`` characters (with its length)."""
    if len(text) <= keep:
        return repr(text)
    return repr(f"{text[: keep // 2]}...{text[-keep // 2 :]}") + f" ({len(text):,} characters)"


def _int_or_none(value: Any) -> int | None:
    try:
        return None if value is None else max(0, int(str(value)))
    except ValueError:
        return None


def _gpu_count(node: Mapping[str, Any]) -> int:
    """Physical GPUs of a Kubernetes node: the indices dcgm-exporter's ``gpu`` label takes (it
    reports a MIG instance under its GPU's index, with ``GPU_I_ID``).

    The larger of two counts, each left out when its fields are absent:

    * the devices the device plugin advertises, capacity ``nvidia.com/gpu`` (healthy and
      unhealthy; else allocatable, which drops a GPU the plugin marks unhealthy after an XID:
      kubelet's device manager counts capacity as healthy + unhealthy devices, allocatable as the
      healthy ones), divided by the devices per GPU;
    * GPU feature discovery's label ``nvidia.com/gpu.count`` (physical GPUs; MIG instances under
      the ``single`` strategy, then divided by the instances per GPU).

    Devices per GPU: replicas (time-slicing or MPS: label ``nvidia.com/gpu.replicas``, GKE's
    :data:`GKE_SHARED_CLIENTS_LABEL`) x MIG instances per GPU under the ``single`` strategy
    (label ``nvidia.com/gpu.product`` ``<model>-MIG-<profile>``, GKE's
    :data:`GKE_PARTITION_LABEL`; :func:`_mig_instances_per_gpu`). With the MIG ``mixed`` strategy
    capacity counts only the GPUs not in MIG mode and the label every GPU, so the label counts.
    0 when none of these is an integer.

    A node whose count cannot be made out gets 0 and a :class:`GraphBuildWarning` naming it,
    rather than GPU nodes dcgm-exporter never reports: a MIG profile of unknown instances per GPU,
    MIG instances that are no whole number of GPUs, or more than :data:`MAX_NODE_GPUS` GPUs.
    """
    name = _short(str(_meta(node).get("name") or ""))
    status, labels = _obj(node.get("status")), _labels(node)
    product = str(labels.get("nvidia.com/gpu.product") or "").removesuffix(SHARED_SUFFIX)
    model, _, profile = product.partition(MIG_SUFFIX)
    profile = profile or str(labels.get(GKE_PARTITION_LABEL) or "")
    per_gpu = _mig_instances_per_gpu(profile, model) if profile else 1
    if per_gpu is None:
        if profile == "INVALID":
            return _no_gpus(name, "GPU feature discovery marks its MIG configuration invalid")
        return _no_gpus(name, f"how many instances of MIG profile {_short(profile)} make a GPU is "
                              "not known")  # fmt: skip
    replicas = _replicas(labels)
    counts: list[tuple[int, str]] = []  # (GPUs, or MIG instances, what counted them)
    for field in ("capacity", "allocatable"):
        devices = _int_or_none(_obj(status.get(field)).get(GPU_RESOURCE))
        if devices is not None:
            per = f" / {replicas} replicas" if replicas > 1 else ""
            counts.append((devices // replicas, f"{field} {GPU_RESOURCE}{per}"))
            break
    label = _int_or_none(labels.get("nvidia.com/gpu.count"))
    if label is not None:
        counts.append((label, "label nvidia.com/gpu.count"))
    for n, what in counts:
        if n % per_gpu:
            return _no_gpus(name, f"{what} is {n:,} MIG instances of profile {_short(profile)}, "
                                  f"no whole number of GPUs of {per_gpu} each")  # fmt: skip
    n, what = max(counts, default=(0, ""))
    if n // per_gpu > MAX_NODE_GPUS:
        why = f"{what} gives {n // per_gpu:,} GPUs, more than {MAX_NODE_GPUS} on one node"
        if not what.startswith("label") and replicas == 1:
            why += " (time-slicing without GPU feature discovery's labels counts every replica)"
        return _no_gpus(name, why)
    return n // per_gpu


def _replicas(labels: Mapping[str, Any]) -> int:
    """Devices the device plugin makes of one GPU by time-slicing or MPS (label
    ``nvidia.com/gpu.replicas``, GKE's :data:`GKE_SHARED_CLIENTS_LABEL`); 1 without sharing."""
    return max(
        _int_or_none(labels.get("nvidia.com/gpu.replicas")) or 1,
        _int_or_none(labels.get(GKE_SHARED_CLIENTS_LABEL)) or 1,
    )


def _mig_instances_per_gpu(profile: str, model: str = "") -> int | None:
    """MIG instances of ``profile`` (``1g.5gb``, ``3g.40gb``, ``1g.10gb+me``) that one GPU of
    ``model`` is cut into (:data:`MIG_INSTANCES_PER_GPU`); None for a profile not known."""
    base, plus, variant = profile.partition("+")
    if plus and variant.startswith("me"):  # +me, +me.all: the one instance with the media engines
        return 1
    if plus and variant != "gfx":
        return None
    base = base.removesuffix("-me")
    if base == "1g.10gb" and "40GB" in model.upper():
        return 4
    g, dot, memory = base.partition("g.")
    if not dot or not memory.endswith("gb"):
        return None
    return {"3": 2, "4": 1, "7": 1}.get(g, MIG_INSTANCES_PER_GPU.get(base))


def _no_gpus(name: str, why: str) -> int:
    """0, after a :class:`GraphBuildWarning` that node ``name`` gets no GPU nodes because ``why``."""
    warnings.warn(f"GPU nodes of node {name} left out: {why}", GraphBuildWarning, stacklevel=4)
    return 0


def build_graph(
    nodes: Any,
    pods: Any,
    services: Any,
    endpoint_slices: Any = None,
    *,
    cluster: str | None = None,
    calls: Iterable[tuple[str, str]] = (),
    nvlinks: Mapping[str, Iterable[int]] | None = None,
    name: str | None = None,
    template_links: bool = False,
) -> GraphModel:
    """The dependency graph of one cluster (see the module docstring).

    Args:
        nodes, pods, services, endpoint_slices: list responses of the Kubernetes API (JSON).
        cluster: cluster name (default: node label ``fleetmind.io/cluster``, else ``default``).
        calls: ``(caller service, callee service)`` pairs (:func:`calls_from_spans`), each service
            a bare name or ``(namespace, name)`` (:data:`SpanService`). Of a :class:`SpanCalls`,
            the spans that name another cluster (:data:`SPAN_CLUSTER_KEY`) are left out, with a
            :class:`GraphBuildWarning` counting them, when the cluster is named (``cluster`` or
            the node label; all are kept under the ``default`` fallback).
        nvlinks: ``{node name: GPU indices with an active NVLink}`` (:func:`nvlinks_from_nvml`); a
            name that is no Node gives a :class:`GraphBuildWarning`. A host named here gets
            these links only, not its template's.
        name: graph name (default ``k8s-<cluster>``).
        template_links: add the link nodes of each GPU host's template (the module docstring's
            table), as the RCA model's training graphs have them: without them a broken NVLink
            cannot be named as a cause. Off by default: 28 NVLink pairs per 8-GPU SXM host more
            than double the nodes and memory of a large GPU fleet's graph (docs/graph.md).

    Raises:
        DataError: a document is not a list response; the graph would pass
            :data:`MAX_GRAPH_NODES` nodes or :data:`MAX_GRAPH_EDGES` edges; or a value the graph
            JSON cannot hold (one line naming the graph node or edge). A field of the wrong type
            in a list item (``labels`` as a list, ``status`` as a string) is read as absent; a
            node whose GPUs cannot be counted (:func:`_gpu_count`) gets none, with a
            :class:`GraphBuildWarning`.
    """
    node_items = _items(nodes, "nodes")
    pod_items = _items(pods, "pods")
    svc_items = _items(services, "services")
    slice_items = _items(endpoint_slices, "endpoint slices") if endpoint_slices else []
    named = cluster is not None
    if cluster is None:
        labelled = [_labels(n).get(CLUSTER_LABEL) for n in node_items]
        cluster = next((c for c in labelled if c), None)
        named, cluster = cluster is not None, cluster or "default"
    c = str(cluster)
    b = _Builder(name or f"k8s-{c}")
    b.node(c, "cluster", c, {"cluster": c})
    gpus_of = _add_hosts(b, c, node_items, nvlinks or {}, template_links)
    whole = _whole_gpu_nodes(node_items, gpus_of)
    svc_ids, selectors = _add_services(b, c, svc_items)
    members, node_endpoints = _slice_members(slice_items, svc_ids)
    for sid, nm in sorted(node_endpoints):
        if f"{c}/host/{nm}" in b.nodes:
            b.edge(sid, f"{c}/host/{nm}", "runs_on")
    by_ns: dict[Any, list[tuple[str, Mapping[str, Any]]]] = {}
    for sns, sid, sel in selectors:  # a pod meets only its own namespace's selectors
        by_ns.setdefault(sns, []).append((sid, sel))
    claimed: list[str] = []  # pods on a host of the graph with DRA claims: devices not drawn
    for p in pod_items:
        pod = _add_pod(b, c, p, gpus_of, whole)
        if pod is None:
            continue
        pid, ns, nm, labels = pod
        spec = _obj(p.get("spec"))
        # a pod whose nvidia.com/gpu request drew its GPU edges claims other devices (a NIC)
        if (
            _seq(spec.get("resourceClaims"))
            and pid not in b.on_gpus
            and f"{c}/host/{spec.get('nodeName')}" in b.nodes
        ):
            claimed.append(f"{ns}/{nm}")
        if slice_items:
            for sid in members.get((ns, nm), ()):
                b.edge(pid, sid, "member_of")
        else:
            for sid, sel in by_ns.get(ns, ()):
                if all(labels.get(k) == v for k, v in sel.items()):
                    b.edge(pid, sid, "member_of")
    if claimed:
        _warn_claimed(claimed)
    _add_calls(b, c, _calls_of_cluster(calls, c, named), svc_ids)
    return b.model()


def _warn_claimed(claimed: list[str]) -> None:
    """One :class:`GraphBuildWarning` counting the pods (``namespace/name``) that ask for devices
    through Dynamic Resource Allocation (``spec.resourceClaims``): the devices their
    ResourceClaims were allocated are not read, so these pods get no ``runs_on`` GPU edge."""
    shown = ", ".join(_short(k, 60) for k in claimed[:3]) + (", ..." if len(claimed) > 3 else "")
    warnings.warn(
        f"GPU edges of {len(claimed)} pod(s) with Dynamic Resource Allocation claims "
        f"(spec.resourceClaims: {shown}) not drawn: the devices of their ResourceClaims "
        "(e.g. NVIDIA's DRA driver, gpu.nvidia.com) are not read",
        GraphBuildWarning,
        stacklevel=3,
    )


def _calls_of_cluster(
    calls: Iterable[tuple[SpanService, SpanService]], c: str, named: bool
) -> Iterable[tuple[SpanService, SpanService]]:
    """The calls the graph of cluster ``c`` draws: of :class:`SpanCalls`, those whose spans name
    no other cluster (:meth:`SpanCalls.of_cluster`), with one :class:`GraphBuildWarning` counting
    the spans left out. A cluster the build only defaulted to (``named`` false: no ``--cluster``,
    no node label) is no name the spans can carry, so all are kept, with a warning when they name
    several clusters. So are they when no span names ``c`` (the spans carry another name for the
    cluster, as GKE's cluster name under resourcedetection's ``gcp`` detector), with one warning
    naming the spans' clusters and the graph's."""
    if not isinstance(calls, SpanCalls) or not calls.spans_of:
        return calls
    others = sorted(set(calls.spans_of) - {c})
    listed = ", ".join(_short(n, 60) for n in others[:3]) + (", ..." if len(others) > 3 else "")
    if named and c not in calls.spans_of:
        n = sum(calls.spans_of.values())
        warnings.warn(
            f"{n} span{'s' if n != 1 else ''} kept whose resource attribute {SPAN_CLUSTER_KEY} "
            f"names cluster{'s' if len(others) > 1 else ''} {listed}, none the graph's "
            f"{_short(c)}: every call drawn; to draw only the graph's cluster's calls, have "
            f"{SPAN_CLUSTER_KEY} carry the graph's cluster name (--cluster, or node label "
            f"{CLUSTER_LABEL})",
            GraphBuildWarning,
            stacklevel=3,
        )
        return calls
    if not named:
        if len(calls.spans_of) > 1:
            warnings.warn(
                f"spans of {len(calls.spans_of)} clusters ({listed}) all drawn into cluster "
                f"{_short(c)}: name the graph's cluster (--cluster, or node label "
                f"{CLUSTER_LABEL}) as the spans' resource attribute {SPAN_CLUSTER_KEY} does to "
                "keep only its spans",
                GraphBuildWarning,
                stacklevel=3,
            )
        return calls
    keep, skipped = calls.of_cluster(c)
    if skipped:
        warnings.warn(
            f"{skipped} span{'s' if skipped != 1 else ''} left out: {'their' if skipped != 1 else 'its'} "
            f"resource attribute {SPAN_CLUSTER_KEY} names another cluster ({listed}) than the "
            f"graph's {_short(c)}",
            GraphBuildWarning,
            stacklevel=3,
        )
    return keep


def _add_hosts(
    b: _Builder,
    c: str,
    node_items: list[dict[str, Any]],
    nvlinks: Mapping[str, Iterable[int]],
    template_links: bool = False,
) -> dict[str, int]:
    """Add each Kubernetes node as a host with its GPUs and NVLink (NVML's, else its template's
    when ``template_links``); return GPUs per node name."""
    gpus_of: dict[str, int] = {}
    links_of: dict[tuple[str, int], tuple[tuple[str, tuple[int, ...], str, float], ...]] = {}
    no_model: list[tuple[str, Any]] = []  # (GPU host, its GKE accelerator) without a GPU model
    for n in node_items:
        nm = str(_meta(n).get("name") or "")
        if not nm:
            continue
        labels = _labels(n)
        model, mig = _gpu_model(labels)
        # a MIG instance's framebuffer under the single strategy, not the GPU's
        whole_gpu = not mig and not labels.get(GKE_PARTITION_LABEL)
        memory = _int_or_none(labels.get(GPU_MEMORY_LABEL)) if whole_gpu else None
        host = b.node(f"{c}/host/{nm}", "host", c, {"cluster": c, "node": nm}, gpu_model=model,
                      region=labels.get("topology.kubernetes.io/region"),
                      zone=labels.get("topology.kubernetes.io/zone"),
                      addresses=_node_addresses(n, nm))  # fmt: skip
        b.edge(host, c, "member_of")
        k = _gpu_count(n)
        gpus_of[nm] = k
        for i in range(k):
            g = b.node(f"{c}/gpu/{nm}/{i}", "gpu", c, {"cluster": c, "node": nm, "gpu": str(i)},
                       model=model, memory_mib=memory or None)  # fmt: skip
            b.edge(g, host, "attached_to")
        if template_links and whole_gpu and nm not in nvlinks and k and not model:
            no_model.append((nm, labels.get(GKE_ACCELERATOR_LABEL)))
        if template_links and whole_gpu and nm not in nvlinks and model:
            if (str(model), k) not in links_of:
                links_of[(str(model), k)] = _template_links(str(model), k)
            _add_template_links(b, c, nm, links_of[(str(model), k)])
        linked = sorted(set(nvlinks.get(nm, ())))
        if len(linked) > 1:
            link = b.node(f"{c}/link/{nm}/nvlink", "link", c,
                          {"cluster": c, "node": nm, "link": "nvlink"})  # fmt: skip
            for i in linked:
                if i < k:
                    b.edge(link, f"{c}/gpu/{nm}/{i}", "attached_to")
    if no_model:
        _warn_no_model(no_model)
    _warn_other_accelerators(node_items, gpus_of)
    for nm in sorted(set(nvlinks) - set(gpus_of)):
        warnings.warn(
            f"NVLinks of node {_short(nm)} left out: no Node of the cluster has that name (the "
            "NVML host is named by --node, else the NODE_NAME environment variable, which a pod "
            "sets from the downward API's spec.nodeName, else its hostname)",
            GraphBuildWarning,
            stacklevel=3,
        )
    return gpus_of


def _gpu_model(labels: Mapping[str, Any]) -> tuple[str | None, bool]:
    """``(GPU model, whether the product names a MIG profile)`` of a node's labels: GPU feature
    discovery's ``nvidia.com/gpu.product`` without its :data:`SHARED_SUFFIX` and
    ``-MIG-<profile>``, else ``alibabacloud.com/gpu-card-model``, else the model of GKE's
    :data:`GKE_ACCELERATOR_LABEL` (:data:`GKE_ACCELERATOR_MODELS`); None when none names one."""
    product = str(labels.get("nvidia.com/gpu.product") or "").removesuffix(SHARED_SUFFIX)
    model, mig, _ = product.partition(MIG_SUFFIX)
    gke = GKE_ACCELERATOR_MODELS.get(str(labels.get(GKE_ACCELERATOR_LABEL) or ""))
    found = model or labels.get("alibabacloud.com/gpu-card-model") or gke
    return (str(found) if found else None), bool(mig)


def _warn_no_model(hosts: list[tuple[str, Any]]) -> None:
    """One :class:`GraphBuildWarning` naming the GPU hosts (``(node name, its GKE accelerator
    label or None)``) that ``template_links`` gave no link nodes because no label names their GPU
    model (:func:`_gpu_model`)."""
    shown = ", ".join(
        _short(nm, 60) + (f" ({GKE_ACCELERATOR_LABEL}={_short(str(gke), 40)})" if gke else "")
        for nm, gke in hosts[:3]
    ) + (", ..." if len(hosts) > 3 else "")
    warnings.warn(
        f"template links of {len(hosts)} GPU host(s) not added ({shown}): no GPU model, node "
        "label nvidia.com/gpu.product absent (written by NVIDIA GPU feature discovery, which the "
        "GPU Operator runs; managed clusters run none by default) and no "
        f"{GKE_ACCELERATOR_LABEL} value FleetMind knows ({', '.join(GKE_ACCELERATOR_MODELS)})",
        GraphBuildWarning,
        stacklevel=4,
    )


def _warn_other_accelerators(node_items: list[dict[str, Any]], gpus_of: Mapping[str, int]) -> None:
    """One :class:`GraphBuildWarning` naming the nodes that advertise a positive capacity (else
    allocatable) of an accelerator other than NVIDIA GPUs (:func:`is_other_device`): the graph
    has no nodes for those devices. ``gpus_of``: NVIDIA GPUs per node name (:func:`_gpu_count`);
    a node with none is in the graph without GPU nodes, one with some with its NVIDIA GPUs only,
    and the warning names the two apart."""
    bare: list[str] = []  # no NVIDIA GPU: the host has no GPU nodes
    beside: list[str] = []  # NVIDIA GPUs too: only those are in the graph
    for n in node_items:
        status = _obj(n.get("status"))
        res: dict[str, int] = {}
        for field in ("allocatable", "capacity"):  # capacity wins: it counts unhealthy devices
            for r, v in _obj(status.get(field)).items():
                if is_other_device(str(r)) and (_int_or_none(v) or 0) > 0:
                    res[str(r)] = _int_or_none(v) or 0
        if res:
            nm = str(_meta(n).get("name") or "")
            what = ", ".join(f"{r} x{q}" for r, q in sorted(res.items()))
            (beside if gpus_of.get(nm) else bare).append(f"{_short(nm, 60)} ({what})")
    parts = []
    for found, where in (
        (bare, "in the graph without GPU nodes"),
        (beside, "in the graph with their NVIDIA GPUs only"),
    ):
        if found:
            shown = "; ".join(found[:3]) + ("; ..." if len(found) > 3 else "")
            parts.append(f"{len(found)} host(s) {where}: {shown}")
    if parts:
        warnings.warn(
            f"accelerators of {len(bare) + len(beside)} node(s) not modelled (FleetMind models "
            f"NVIDIA GPUs only); {'; '.join(parts)}",
            GraphBuildWarning,
            stacklevel=4,
        )


def _template_links(model: str, n_gpus: int) -> tuple[tuple[str, tuple[int, ...], str, float], ...]:
    """The link nodes (:func:`fleetmind.data.topology.template_links`) of the template of
    ``n_gpus`` GPUs of ``model``; none when the model is unknown (no template), and none when an
    SXM / board GPU (:func:`fleetmind.data.fleet_io.names_board_part`) falls back to a
    ``pcie-<n>gpu`` template for a count that is not its board's (4 GPUs of an 8-GPU H100 board):
    its NVLinks are not that template's PCIe switches."""
    t = known_telemetry_template(model, n_gpus)
    if t is None or t.n_gpus != n_gpus:
        return ()
    if t.name.startswith("pcie-") and names_board_part(model):
        return ()
    return topology_template_links(t)


def _add_template_links(
    b: _Builder, c: str, nm: str, links: tuple[tuple[str, tuple[int, ...], str, float], ...]
) -> None:
    """Add node ``nm``'s ``links`` (``(label, GPU indices, level, GB/s)``) as ``link`` nodes
    named, matched and connected as the RCA training graphs' (:mod:`fleetmind.data.rca_gen.graphs`)."""
    for label, gpus, level, bw in links:
        link = b.node(f"{c}/link/{nm}/{label}", "link", c,
                      {"cluster": c, "node": nm, "link": label}, level=level,
                      bandwidth_gbps=bw)  # fmt: skip
        for i in gpus:
            b.edge(link, f"{c}/gpu/{nm}/{i}", "attached_to")


def _node_addresses(node: Mapping[str, Any], name: str) -> list[str] | None:
    """The Node's ``status.addresses`` of :data:`NODE_ADDRESS_TYPES` other than its name, in
    order, or None: what a scrape of the node's own port (node-exporter, the kubelet) puts in
    ``instance``."""
    out: list[str] = []
    for a in _seq(_obj(node.get("status")).get("addresses")):
        if isinstance(a, dict) and a.get("type") in NODE_ADDRESS_TYPES and a.get("address"):
            addr = str(a["address"])
            if addr != name and addr not in out:
                out.append(addr)
    return out or None


def _add_services(
    b: _Builder, c: str, svc_items: list[dict[str, Any]]
) -> tuple[dict[tuple[str, str], str], list[tuple[str, str, dict[str, str]]]]:
    """Add each Service; return its ids by ``(namespace, name)`` and ``(namespace, id, selector)``
    of those with a selector."""
    svc_ids: dict[tuple[str, str], str] = {}
    selectors: list[tuple[str, str, dict[str, str]]] = []
    for s in svc_items:
        m = _meta(s)
        ns, nm = str(m.get("namespace") or "default"), str(m.get("name") or "")
        if not nm:
            continue
        sid = b.node(
            f"{c}/svc/{ns}/{nm}", "service", c, {"cluster": c, "namespace": ns, "service": nm}
        )
        b.edge(sid, c, "member_of")
        svc_ids[(ns, nm)] = sid
        sel = _obj(s.get("spec")).get("selector")
        if isinstance(sel, dict) and sel:
            selectors.append((ns, sid, {str(k): str(v) for k, v in sel.items()}))
    return svc_ids, selectors


def _slice_members(
    slice_items: list[dict[str, Any]], svc_ids: dict[tuple[str, str], str]
) -> tuple[dict[tuple[str, str], set[str]], set[tuple[str, str]]]:
    """Service ids per pod ``(namespace, name)``, and ``(service id, node name)`` of endpoints
    that are Nodes, as the EndpointSlices name them.

    A Node endpoint is a Service served by the nodes themselves: the Prometheus Operator's kubelet
    Service (``<release>-kubelet`` in ``kube-system``, kube-prometheus-stack's
    ``prometheusOperator.kubeletService``), whose endpoints' ``targetRef`` is ``kind: Node``.
    An endpoint whose ``conditions.ready`` is ``false`` is left out; a missing (null) ``ready``
    means ready, as the ``discovery.k8s.io/v1`` API defines it."""
    members: dict[tuple[str, str], set[str]] = {}
    node_endpoints: set[tuple[str, str]] = set()
    for sl in slice_items:
        m = _meta(sl)
        svc = _labels(sl).get("kubernetes.io/service-name")
        sid = svc_ids.get((str(m.get("namespace") or "default"), str(svc)))
        if sid is None:
            continue
        for ep in _seq(sl.get("endpoints")):
            cond = ep.get("conditions") if isinstance(ep, dict) else None
            if not isinstance(ep, dict) or (isinstance(cond, dict) and cond.get("ready") is False):
                continue
            ref = ep.get("targetRef")
            if isinstance(ref, dict) and ref.get("kind") == "Pod" and ref.get("name"):
                key = (
                    str(ref.get("namespace") or m.get("namespace") or "default"),
                    str(ref["name"]),
                )
                members.setdefault(key, set()).add(sid)
            elif isinstance(ref, dict) and ref.get("kind") == "Node" and ref.get("name"):
                node_endpoints.add((sid, str(ref["name"])))
    return members, node_endpoints


def _whole_gpu_nodes(
    node_items: list[dict[str, Any]], gpus_of: dict[str, int]
) -> dict[str, tuple[int, int]]:
    """Node name -> ``(devices, GPUs)`` for the nodes whose device plugin advertises a whole
    number of ``nvidia.com/gpu`` devices per physical GPU (capacity, else allocatable, divided by
    the time-slicing replicas, :func:`_replicas`: one per GPU, or MIG instances of every GPU alike),
    at least one GPU: a pod whose ``nvidia.com/gpu`` request is all ``devices`` holds every GPU of
    the node. Never on a node with MIG instances under the ``mixed`` strategy (a positive
    ``nvidia.com/mig-<profile>`` capacity or allocatable, :data:`MIG_RESOURCE_PREFIX`):
    ``nvidia.com/gpu`` counts only its GPUs outside MIG mode, times their replicas, so all of it is
    not every GPU; nor where capacity is unreadable. Label :data:`MIG_STRATEGY_LABEL` ``mixed``
    alone does not count (GFD sets it on every GPU node of a ``mixed`` cluster), nor does a stale
    ``"0"`` MIG resource."""
    out: dict[str, tuple[int, int]] = {}
    for n in node_items:
        nm = str(_meta(n).get("name") or "")
        k = gpus_of.get(nm, 0)
        status, labels = _obj(n.get("status")), _labels(n)
        mixed = any(
            str(r).startswith(MIG_RESOURCE_PREFIX) and (_int_or_none(v) or 0) > 0
            for field in ("capacity", "allocatable")
            for r, v in _obj(status.get(field)).items()
        )
        replicas = _replicas(labels)
        for field in ("capacity", "allocatable"):
            devices = _int_or_none(_obj(status.get(field)).get(GPU_RESOURCE))
            if devices is not None:
                per_replica, rest = divmod(devices, replicas)
                if k > 0 and not mixed and not rest and per_replica >= k and per_replica % k == 0:
                    out[nm] = (devices, k)
                break
    return out


def _pod_gpu_devices(pod: Mapping[str, Any]) -> int:
    """The ``nvidia.com/gpu`` devices a pod is given: its effective request as the scheduler
    counts it (Kubernetes docs "Init Containers", "Resource sharing within containers"): the
    larger of the app containers' sum (sidecars, init containers with ``restartPolicy: Always``,
    included) and the largest other init container's; each container's ``limits`` (an extended
    resource's request equals its limit), else its ``requests``."""

    def devices(container: Any) -> int:
        res = _obj(_obj(container).get("resources"))
        for field in ("limits", "requests"):
            n = _int_or_none(_obj(res.get(field)).get(GPU_RESOURCE))
            if n is not None:
                return n
        return 0

    spec = _obj(pod.get("spec"))
    inits = [_obj(ct) for ct in _seq(spec.get("initContainers"))]
    sidecars = [ct for ct in inits if ct.get("restartPolicy") == "Always"]  # run beside the app
    app = sum(devices(ct) for ct in [*_seq(spec.get("containers")), *sidecars])
    init = max((devices(ct) for ct in inits if ct.get("restartPolicy") != "Always"), default=0)
    return max(app, init)


def _add_pod(
    b: _Builder,
    c: str,
    p: Mapping[str, Any],
    gpus_of: dict[str, int],
    whole: Mapping[str, tuple[int, int]] | None = None,
) -> tuple[str, str, str, Mapping[str, Any]] | None:
    """Add a running pod with its ``runs_on`` edges (host, annotated GPUs, and every GPU of a node
    of ``whole`` (:func:`_whole_gpu_nodes`) whose devices it requests all of); return ``(id,
    namespace, name, labels)``, or None for a finished or nameless pod."""
    m = _meta(p)
    phase = _obj(p.get("status")).get("phase")
    if phase in ("Succeeded", "Failed"):
        return None
    ns, nm = str(m.get("namespace") or "default"), str(m.get("name") or "")
    if not nm:
        return None
    owners = [o for o in _seq(m.get("ownerReferences")) if isinstance(o, dict)]
    owner = next((f"{o.get('kind')}/{o.get('name')}" for o in owners if o.get("controller")), None)
    pid = b.node(f"{c}/pod/{ns}/{nm}", "pod", c, {"cluster": c, "namespace": ns, "pod": nm},
                 owner=owner or (f"{owners[0].get('kind')}/{owners[0].get('name')}" if owners else None),
                 claims=_claim_names(p, nm) or None, addresses=_pod_addresses(p))  # fmt: skip
    host = _obj(p.get("spec")).get("nodeName")
    if isinstance(host, str) and f"{c}/host/{host}" in b.nodes:
        b.edge(pid, f"{c}/host/{host}", "runs_on")
        for part in (
            str(_obj(m.get("annotations")).get(GPU_INDEX_ANNOTATION, ""))
            .replace(",", "-")
            .split("-")
        ):
            if part.strip().isdigit() and int(part) < gpus_of.get(host, 0):
                b.edge(pid, f"{c}/gpu/{host}/{int(part)}", "runs_on")
        devices, k = (whole or {}).get(host, (0, 0))
        if k and _pod_gpu_devices(p) == devices:  # every device of the node: its every GPU
            for i in range(k):
                b.edge(pid, f"{c}/gpu/{host}/{i}", "runs_on")
    return pid, ns, nm, _labels(p)


def _pod_addresses(pod: Mapping[str, Any]) -> list[str] | None:
    """The pod's IPs, ``status.podIPs[].ip`` then ``status.podIP``, in order without repeats, or
    None: what ``instance`` holds on a scrape of the pod itself (a ``hostNetwork`` pod's are its
    host's), as opposed to a prober's target (:meth:`fleetmind.data.graph.DependencyGraph.probes_elsewhere`)."""
    status = _obj(pod.get("status"))
    ips = [_obj(a).get("ip") for a in _seq(status.get("podIPs"))] + [status.get("podIP")]
    out: list[str] = []
    for ip in ips:
        if isinstance(ip, str) and ip and ip not in out:
            out.append(ip)
    return out or None


def _claim_names(pod: Mapping[str, Any], name: str) -> list[str]:
    """The PersistentVolumeClaims a pod mounts, sorted: ``spec.volumes[].persistentVolumeClaim
    .claimName`` (a StatefulSet's ``volumeClaimTemplates`` are filled in there as
    ``<template>-<pod>``), and ``<pod>-<volume>`` of each generic ephemeral volume
    (``spec.volumes[].ephemeral``: Kubernetes names the claim it creates so, docs "Ephemeral
    Volumes", "PersistentVolumeClaim naming")."""
    out: set[str] = set()
    for v in _seq(_obj(pod.get("spec")).get("volumes")):
        v = _obj(v)
        claim = _obj(v.get("persistentVolumeClaim")).get("claimName")
        if isinstance(claim, str) and claim:
            out.add(claim)
        elif isinstance(v.get("ephemeral"), dict) and isinstance(v.get("name"), str) and v["name"]:
            out.add(f"{name}-{v['name']}")
    return sorted(out)


def _add_calls(
    b: _Builder,
    c: str,
    calls: Iterable[tuple[SpanService, SpanService]],
    svc_ids: dict[tuple[str, str], str],
) -> None:
    """Add a ``calls`` edge per pair.

    A service ``(namespace, name)`` is the Service of that namespace and name; one not found, and a
    bare name, is the one Service of that name in any namespace. A bare name that several
    namespaces' Services share is ambiguous: its edges are left out with a
    :class:`GraphBuildWarning` (a wrong edge would blame the other namespace). A name no Service
    has is outside the cluster and becomes ``<c>/svc/<name>``.
    """
    by_name: dict[str, list[str]] = {}
    for (_, nm), sid in sorted(svc_ids.items()):
        by_name.setdefault(nm, []).append(sid)
    ambiguous: set[str] = set()
    for caller, callee in calls:
        ids = []
        for svc in (caller, callee):
            ns, nm = svc if isinstance(svc, tuple) else (None, str(svc))
            found = [svc_ids[(ns, nm)]] if (ns, nm) in svc_ids else by_name.get(nm, [])
            if len(found) > 1:
                ambiguous.add(nm)
                break
            if not found:
                found = [b.node(f"{c}/svc/{nm}", "service", c, {"cluster": c, "service": nm})]
                b.edge(found[0], c, "member_of")
            ids.append(found[0])
        if len(ids) == 2:
            b.edge(ids[0], ids[1], "calls")
    for nm in sorted(ambiguous):
        warnings.warn(
            f"calls of trace service {_short(nm)} left out: Services of that name are in "
            f"{len(by_name[nm])} namespaces and its spans name none of them (set resource "
            f"attribute k8s.namespace.name or service.namespace)",
            GraphBuildWarning,
            stacklevel=3,
        )


def _is_span_export(doc: Any) -> bool:
    return isinstance(doc, Mapping) and (
        isinstance(doc.get("resourceSpans"), list) or isinstance(doc.get("data"), list)
    )


def read_span_file(path: str | os.PathLike[str]) -> list[Any]:
    """The trace exports in one span file, for :func:`calls_from_spans`.

    The file is one JSON document (an OTLP JSON export, a Jaeger JSON export), or JSON Lines: one
    export per line, as the OpenTelemetry Collector's file exporter writes them (blank lines
    skipped).

    Raises:
        DataError: unreadable, not JSON nor JSON Lines, or a document that is neither format
            (naming the file and the line).
    """
    text = read_text(path, "span file")
    try:
        docs = [(0, json.loads(text))]
    except json.JSONDecodeError as err:
        if err.msg != "Extra data":  # not several documents: a broken one
            raise DataError(f"span file {path} is not valid JSON: {err}") from None
        docs = []
        for n, line in enumerate(text.splitlines(), 1):
            try:
                docs += [(n, json.loads(line))] if line.strip() else []
            except json.JSONDecodeError as err:
                raise DataError(f"span file {path} line {n} is not valid JSON: {err}") from None
    for n, doc in docs:
        if not _is_span_export(doc):
            raise DataError(
                f"span file {path}{f' line {n}' if n else ''} is neither an OTLP JSON export "
                "(resourceSpans) nor a Jaeger JSON export (data)"
            )
    return [doc for _, doc in docs]


def calls_from_spans(*docs: Any) -> SpanCalls:
    """``(caller service, callee service)`` pairs from OTLP JSON or Jaeger JSON trace exports.

    A span whose parent span belongs to another service is a call from the parent's service to
    the span's; spans are paired across all ``docs`` (``(trace id, span id)``), so a parent in
    another file or export batch counts. OTLP: ``resourceSpans[].resource.attributes``
    ``service.name`` and ``scopeSpans[].spans[]`` (``traceId``, ``spanId``, ``parentSpanId``);
    Jaeger: ``data[].spans[]`` (``traceID``, ``spanID``, ``references[]`` ``CHILD_OF``,
    ``processID``) and ``data[].processes`` (``serviceName``, ``tags``). A service is
    ``(namespace, name)`` when the resource attributes or process tags name the namespace
    (:data:`SPAN_NAMESPACE_KEYS`), else its bare name. The cluster a span's resource names
    (:data:`SPAN_CLUSTER_KEY`) is kept with the pairs, for :func:`build_graph` to leave out other
    clusters' spans (:class:`SpanCalls`).

    Raises:
        DataError: a document of neither format.
    """
    service_of: dict[tuple[str, str], SpanService] = {}
    parent_of: dict[tuple[str, str], tuple[str, str]] = {}
    cluster_of: dict[tuple[str, str], str] = {}
    for doc in docs:
        if not _is_span_export(doc):
            raise DataError(
                "spans must be an OTLP JSON export (resourceSpans) or a Jaeger JSON export (data)"
            )
        if isinstance(doc.get("resourceSpans"), list):
            _otlp_spans(doc["resourceSpans"], service_of, parent_of, cluster_of)
        else:
            _jaeger_spans(doc["data"], service_of, parent_of, cluster_of)
    needs: dict[tuple[SpanService, SpanService], set[tuple[str, ...]]] = {}
    for sid, parent in parent_of.items():
        a, b = service_of.get(parent), service_of.get(sid)
        if a and b and a != b:
            named = {cluster_of[k] for k in (parent, sid) if k in cluster_of}
            needs.setdefault((a, b), set()).add(tuple(sorted(named)))
    spans_of: dict[str, int] = {}
    for name in cluster_of.values():
        spans_of[name] = spans_of.get(name, 0) + 1
    pairs = sorted(needs, key=lambda p: tuple(s if isinstance(s, tuple) else ("", s) for s in p))
    return SpanCalls(pairs, needs, spans_of)


def _span_service(name: str, tags: Mapping[str, str]) -> SpanService:
    ns = next((tags[k] for k in SPAN_NAMESPACE_KEYS if tags.get(k)), None)
    return (ns, name) if ns else name


def _otlp_spans(
    resource_spans: list[Any],
    service_of: dict[tuple[str, str], SpanService],
    parent_of: dict[tuple[str, str], tuple[str, str]],
    cluster_of: dict[tuple[str, str], str],
) -> None:
    for rs in map(_obj, resource_spans):
        attrs = [a for a in _seq(_obj(rs.get("resource")).get("attributes")) if isinstance(a, dict)]
        tags = {str(a.get("key")): str(_obj(a.get("value")).get("stringValue")) for a in attrs
                if _obj(a.get("value")).get("stringValue")}  # fmt: skip
        svc = _span_service(tags.get("service.name", "unknown"), tags)
        cluster = tags.get(SPAN_CLUSTER_KEY)
        for ss in map(_obj, _seq(rs.get("scopeSpans") or rs.get("instrumentationLibrarySpans"))):
            for sp in map(_obj, _seq(ss.get("spans"))):
                tid, sid = str(sp.get("traceId") or ""), sp.get("spanId")
                if sid:
                    service_of[(tid, str(sid))] = svc
                    if cluster:
                        cluster_of[(tid, str(sid))] = cluster
                    if sp.get("parentSpanId"):
                        parent_of[(tid, str(sid))] = (tid, str(sp["parentSpanId"]))


def _jaeger_spans(
    data: list[Any],
    service_of: dict[tuple[str, str], SpanService],
    parent_of: dict[tuple[str, str], tuple[str, str]],
    cluster_of: dict[tuple[str, str], str],
) -> None:
    for tr in map(_obj, data):
        procs = _obj(tr.get("processes"))
        for sp in map(_obj, _seq(tr.get("spans"))):
            tid, sid = str(sp.get("traceID") or ""), sp.get("spanID")
            if not sid:
                continue
            proc = _obj(procs.get(str(sp.get("processID"))))
            tags = {str(t.get("key")): str(t.get("value")) for t in _seq(proc.get("tags"))
                    if isinstance(t, dict) and t.get("value")}  # fmt: skip
            service_of[(tid, str(sid))] = _span_service(
                str(proc.get("serviceName", "unknown")), tags
            )
            if tags.get(SPAN_CLUSTER_KEY):
                cluster_of[(tid, str(sid))] = tags[SPAN_CLUSTER_KEY]
            for ref in map(_obj, _seq(sp.get("references"))):
                if ref.get("refType") == "CHILD_OF" and ref.get("spanID"):
                    parent = (str(ref.get("traceID") or tid), str(ref["spanID"]))
                    parent_of[(tid, str(sid))] = parent


def nvlinks_from_nvml(node: str | None = None) -> dict[str, list[int]]:
    """``{node: GPU indices with an NVLink to another GPU}`` of this host through NVML.

    Args:
        node: the Kubernetes Node this host is (default: this host's name, which in a pod is the
            pod's name; ``fleetmind graph build`` passes ``--node`` or ``NODE_NAME``).

    Raises:
        NotAvailableError: NVML is absent (see :func:`fleetmind.data.fleet_io.discover_local_fleet`).
    """
    fleet = discover_local_fleet(node_name=node)
    out = {}
    for n, name in enumerate(fleet.node_names):
        nv = fleet.templates[int(fleet.node_template[n])].nvlinks
        out[str(name)] = [i for i in range(len(nv)) if any(int(x) > 0 for x in nv[i])]
    return out


_GPU_RESOURCES: dict[str, Any] = {GPU_RESOURCE: True}
_CONTAINER_FIELDS: dict[str, Any] = {
    "restartPolicy": True,
    "resources": {"limits": _GPU_RESOURCES, "requests": _GPU_RESOURCES},
}
READ_FIELDS: dict[str, dict[str, Any]] = {
    "nodes": {
        "metadata": {"name": True, "labels": True},
        "status": {"addresses": True, "capacity": True, "allocatable": True},
    },
    "pods": {
        "metadata": {
            "name": True,
            "namespace": True,
            "labels": True,
            "annotations": {GPU_INDEX_ANNOTATION: True},
            "ownerReferences": {"kind": True, "name": True, "controller": True},
        },
        "spec": {
            "nodeName": True,
            "volumes": {
                "name": True,
                "persistentVolumeClaim": {"claimName": True},
                "ephemeral": {},
            },
            "containers": _CONTAINER_FIELDS,
            "initContainers": _CONTAINER_FIELDS,
            "resourceClaims": {"name": True},
        },
        "status": {"phase": True, "podIP": True, "podIPs": {"ip": True}},
    },
    "services": {"metadata": {"name": True, "namespace": True}, "spec": {"selector": True}},
    "endpointslices": {
        "metadata": {"namespace": True, "labels": True},
        "endpoints": {
            "conditions": {"ready": True},
            "targetRef": {"kind": True, "name": True, "namespace": True},
        },
    },
}
"""Every field :func:`build_graph` reads of a list item, per resource (the ``what`` of
:func:`slim_list_items`): ``True`` keeps a field whole, a dict keeps only its keys (of an object,
or of each object of an array). A new field read in this module must be added here, or a graph
built from the API (``fleetmind graph build`` without ``--from-dir``) misses it;
``tests/test_graph_build_memory.py`` builds a realistic cluster with and without slimming."""


def _project(value: Any, keep: Any) -> Any:
    """``value`` cut down to the fields of ``keep`` (see :data:`READ_FIELDS`); every type is kept
    (an object stays an object, an array an array, a scalar as it is), so a field of the wrong type
    reads as it did before."""
    if keep is True:
        return value
    if isinstance(value, dict):
        return {k: _project(value[k], sub) for k, sub in keep.items() if k in value}
    if isinstance(value, list):
        return [_project(v, keep) for v in value]
    return value


def slim_list_items(what: str, items: list[Any]) -> list[Any]:
    """The items of one page of a Kubernetes list response, each cut down to the fields
    :func:`build_graph` reads (:data:`READ_FIELDS`); the graph built from them is the same.

    ``fleetmind graph build`` keeps only these of each page it lists: a pod from the API is about
    7 KB of JSON (``managedFields``, ``env``, probes, statuses) and 38 KB as Python objects, of
    which a few hundred bytes are read, so a cluster of 30,000 pods no longer needs 1.4 GB.

    Args:
        what: ``nodes``, ``pods``, ``services`` or ``endpointslices``; any other name keeps the
            items whole.
        items: the page's ``items``.
    """
    keep = READ_FIELDS.get(what)
    return items if keep is None else [_project(x, keep) for x in items]
