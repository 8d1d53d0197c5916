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
| ``Node`` | ``<c>/host/<node>`` ``host``, attrs ``gpu_model`` (labels ``nvidia.com/gpu.product`` or ``alibabacloud.com/gpu-card-model``), ``region``, ``zone`` | ``member_of`` cluster |
| its GPUs (allocatable ``nvidia.com/gpu``, else label ``nvidia.com/gpu.count``; at most :data:`MAX_NODE_GPUS`) | ``<c>/gpu/<node>/<i>`` ``gpu`` | ``attached_to`` host |
| NVLink (NVML, this host) | ``<c>/link/<node>/nvlink`` ``link`` | ``attached_to`` each NVLinked GPU |
| ``Service`` | ``<c>/svc/<ns>/<name>`` ``service`` (match ``service``, ``namespace``) | ``member_of`` cluster |
| ``Pod`` (not ``Succeeded``/``Failed``) | ``<c>/pod/<ns>/<name>`` ``pod``, attrs ``owner`` (its owner reference ``Kind/name``) | ``runs_on`` host; ``runs_on`` the GPUs of annotation ``alibabacloud.com/gpu-index``; ``member_of`` each Service whose EndpointSlices name it, or (no slices) whose selector matches its labels |
| a span whose parent span is in another service | | ``calls`` caller service -> callee service (a service not in the cluster becomes ``<c>/svc/<name>``) |
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from pydantic import ValidationError

from fleetmind.data.errors import DataError
from fleetmind.data.fleet_io import discover_local_fleet
from fleetmind.data.graph_schema import (
    MAX_GRAPH_EDGES,
    MAX_GRAPH_NODES,
    GraphModel,
    validation_message,
)

CLUSTER_LABEL = "fleetmind.io/cluster"
GPU_INDEX_ANNOTATION = "alibabacloud.com/gpu-index"
MAX_NODE_GPUS = 64
"""Most GPUs one Kubernetes node may report (allocatable ``nvidia.com/gpu`` or label
``nvidia.com/gpu.count``): the scheduler extender's per-pod bound
(``serving/scheduler/extender.py`` ``MAX_GPUS``); a real node has at most a few dozen (8 on a
DGX/HGX board, 56 MIG instances of 8 GPUs with 7 each). A larger count is refused before any GPU
node is made."""


def _items(doc: Any, what: str) -> list[dict[str, Any]]:
    if doc is None:
        return []
    if not isinstance(doc, Mapping) or not isinstance(doc.get("items"), list):
        raise DataError(f"{what} must be a Kubernetes list response with 'items'")
    return [x for x in doc["items"] if isinstance(x, Mapping)]


def _meta(obj: Mapping[str, Any]) -> dict[str, Any]:
    m = obj.get("metadata")
    return m if isinstance(m, dict) else {}


class _Builder:
    def __init__(self, name: str) -> None:
        self.name = name
        self.nodes: dict[str, dict[str, Any]] = {}
        self.edges: set[tuple[str, str, str]] = set()

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


def _gpu_count(node: Mapping[str, Any]) -> int:
    """GPUs of a Kubernetes node: allocatable ``nvidia.com/gpu``, else label
    ``nvidia.com/gpu.count``; 0 when neither is an integer.

    Raises:
        DataError: more than :data:`MAX_NODE_GPUS` (names the node).
    """
    alloc = (node.get("status") or {}).get("allocatable") or {}
    labels = _meta(node).get("labels") or {}
    for key, v in (
        ("allocatable nvidia.com/gpu", alloc.get("nvidia.com/gpu")),
        ("label nvidia.com/gpu.count", labels.get("nvidia.com/gpu.count")),
    ):
        try:
            if v is None:
                continue
            k = max(0, int(str(v)))
        except ValueError:
            continue
        if k > MAX_NODE_GPUS:
            raise DataError(
                f"node {_short(str(_meta(node).get('name') or ''))}: {key} is {k:,}; at most "
                f"{MAX_NODE_GPUS} GPUs per node"
            )
        return k
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
) -> GraphModel:
    """The dependency graph of one cluster (see the module docstring).

    Args:
        nodes, pods, services, endpoint_slices: list responses of the Kubernetes API (JSON).
        cluster: cluster name (default: node label ``fleetmind.io/cluster``, else ``default``).
        calls: ``(caller service, callee service)`` pairs (:func:`calls_from_spans`).
        nvlinks: ``{node name: GPU indices with an active NVLink}`` (:func:`nvlinks_from_nvml`).
        name: graph name (default ``k8s-<cluster>``).

    Raises:
        DataError: a document is not a list response; a node reports more than
            :data:`MAX_NODE_GPUS` GPUs; the graph would pass :data:`MAX_GRAPH_NODES` nodes or
            :data:`MAX_GRAPH_EDGES` edges; or a value the graph JSON cannot hold (one line naming
            the graph node or edge).
    """
    node_items = _items(nodes, "nodes")
    pod_items = _items(pods, "pods")
    svc_items = _items(services, "services")
    slice_items = _items(endpoint_slices, "endpoint slices") if endpoint_slices else []
    if cluster is None:
        labelled = [(_meta(n).get("labels") or {}).get(CLUSTER_LABEL) for n in node_items]
        cluster = next((c for c in labelled if c), "default")
    c = str(cluster)
    b = _Builder(name or f"k8s-{c}")
    b.node(c, "cluster", c, {"cluster": c})
    gpus_of = _add_hosts(b, c, node_items, nvlinks or {})
    svc_ids, by_name, selectors = _add_services(b, c, svc_items)
    members = _slice_members(slice_items, svc_ids)
    for p in pod_items:
        pod = _add_pod(b, c, p, gpus_of)
        if pod is None:
            continue
        pid, ns, nm, labels = pod
        if slice_items:
            for sid in members.get((ns, nm), ()):
                b.edge(pid, sid, "member_of")
        else:
            for sns, sid, sel in selectors:
                if sns == ns and all(labels.get(k) == v for k, v in sel.items()):
                    b.edge(pid, sid, "member_of")
    _add_calls(b, c, calls, by_name)
    return b.model()


def _add_hosts(
    b: _Builder, c: str, node_items: list[dict[str, Any]], nvlinks: Mapping[str, Iterable[int]]
) -> dict[str, int]:
    """Add each Kubernetes node as a host with its GPUs and NVLink; return GPUs per node name."""
    gpus_of: dict[str, int] = {}
    for n in node_items:
        nm = str(_meta(n).get("name") or "")
        if not nm:
            continue
        labels = _meta(n).get("labels") or {}
        model = labels.get("nvidia.com/gpu.product") or labels.get(
            "alibabacloud.com/gpu-card-model"
        )
        host = b.node(f"{c}/host/{nm}", "host", c, {"cluster": c, "node": nm}, gpu_model=model,
                      region=labels.get("topology.kubernetes.io/region"),
                      zone=labels.get("topology.kubernetes.io/zone"))  # fmt: skip
        b.edge(host, c, "member_of")
        k = _gpu_count(n)
        gpus_of[nm] = k
        for i in range(k):
            g = b.node(f"{c}/gpu/{nm}/{i}", "gpu", c, {"cluster": c, "node": nm, "gpu": str(i)},
                       model=model)  # fmt: skip
            b.edge(g, host, "attached_to")
        linked = sorted(set(nvlinks.get(nm, ())))
        if len(linked) > 1:
            link = b.node(f"{c}/link/{nm}/nvlink", "link", c,
                          {"cluster": c, "node": nm, "link": "nvlink"})  # fmt: skip
            for i in linked:
                if i < k:
                    b.edge(link, f"{c}/gpu/{nm}/{i}", "attached_to")
    return gpus_of


def _add_services(
    b: _Builder, c: str, svc_items: list[dict[str, Any]]
) -> tuple[dict[tuple[str, str], str], dict[str, str], list[tuple[str, str, dict[str, str]]]]:
    """Add each Service; return its ids by ``(namespace, name)``, the first id per bare name, and
    ``(namespace, id, selector)`` of those with a selector."""
    svc_ids: dict[tuple[str, str], str] = {}
    by_name: dict[str, str] = {}
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
        by_name.setdefault(nm, sid)
        sel = (s.get("spec") or {}).get("selector") or {}
        if isinstance(sel, dict) and sel:
            selectors.append((ns, sid, {str(k): str(v) for k, v in sel.items()}))
    return svc_ids, by_name, selectors


def _slice_members(
    slice_items: list[dict[str, Any]], svc_ids: dict[tuple[str, str], str]
) -> dict[tuple[str, str], set[str]]:
    """Service ids per pod ``(namespace, name)``, as the EndpointSlices name them."""
    members: dict[tuple[str, str], set[str]] = {}
    for sl in slice_items:
        m = _meta(sl)
        svc = (m.get("labels") or {}).get("kubernetes.io/service-name")
        sid = svc_ids.get((str(m.get("namespace") or "default"), str(svc)))
        if sid is None:
            continue
        for ep in sl.get("endpoints") or []:
            ref = ep.get("targetRef") if isinstance(ep, dict) else None
            if isinstance(ref, dict) and ref.get("kind") == "Pod" and ref.get("name"):
                key = (
                    str(ref.get("namespace") or m.get("namespace") or "default"),
                    str(ref["name"]),
                )
                members.setdefault(key, set()).add(sid)
    return members


def _add_pod(
    b: _Builder, c: str, p: Mapping[str, Any], gpus_of: dict[str, int]
) -> tuple[str, str, str, dict[str, Any]] | None:
    """Add a running pod with its ``runs_on`` edges (host, annotated GPUs); return ``(id,
    namespace, name, labels)``, or None for a finished or nameless pod."""
    m = _meta(p)
    phase = (p.get("status") or {}).get("phase")
    if phase in ("Succeeded", "Failed"):
        return None
    ns, nm = str(m.get("namespace") or "default"), str(m.get("name") or "")
    if not nm:
        return None
    owners = [o for o in m.get("ownerReferences") or [] if isinstance(o, dict)]
    owner = next((f"{o.get('kind')}/{o.get('name')}" for o in owners if o.get("controller")), None)
    pid = b.node(f"{c}/pod/{ns}/{nm}", "pod", c, {"cluster": c, "namespace": ns, "pod": nm},
                 owner=owner or (f"{owners[0].get('kind')}/{owners[0].get('name')}" if owners else None))  # fmt: skip
    host = (p.get("spec") or {}).get("nodeName")
    if host and f"{c}/host/{host}" in b.nodes:
        b.edge(pid, f"{c}/host/{host}", "runs_on")
        for part in (
            str((m.get("annotations") or {}).get(GPU_INDEX_ANNOTATION, ""))
            .replace(",", "-")
            .split("-")
        ):
            if part.strip().isdigit() and int(part) < gpus_of.get(host, 0):
                b.edge(pid, f"{c}/gpu/{host}/{int(part)}", "runs_on")
    return pid, ns, nm, m.get("labels") or {}


def _add_calls(
    b: _Builder, c: str, calls: Iterable[tuple[str, str]], by_name: dict[str, str]
) -> None:
    """Add a ``calls`` edge per pair; a service not in the cluster becomes ``<c>/svc/<name>``."""
    for caller, callee in calls:
        ids = []
        for svc in (caller, callee):
            sid = by_name.get(svc)
            if sid is None:
                sid = b.node(f"{c}/svc/{svc}", "service", c, {"cluster": c, "service": svc})
                b.edge(sid, c, "member_of")
                by_name[svc] = sid
            ids.append(sid)
        b.edge(ids[0], ids[1], "calls")


def calls_from_spans(doc: Any) -> list[tuple[str, str]]:
    """``(caller service, callee service)`` pairs from an OTLP JSON or Jaeger JSON trace export.

    A span whose parent span belongs to another service is a call from the parent's service to
    the span's. OTLP: ``resourceSpans[].resource.attributes`` ``service.name`` and
    ``scopeSpans[].spans[]`` (``spanId``, ``parentSpanId``); Jaeger: ``data[].spans[]``
    (``spanID``, ``references[]`` ``CHILD_OF``, ``processID``) and ``data[].processes``.

    Raises:
        DataError: neither format.
    """
    service_of: dict[str, str] = {}
    parent_of: dict[str, str] = {}
    if isinstance(doc, Mapping) and isinstance(doc.get("resourceSpans"), list):
        for rs in doc["resourceSpans"]:
            attrs = ((rs.get("resource") or {}).get("attributes")) or []
            svc = next(
                (str((a.get("value") or {}).get("stringValue")) for a in attrs
                 if a.get("key") == "service.name"),
                "unknown",
            )  # fmt: skip
            for ss in rs.get("scopeSpans") or rs.get("instrumentationLibrarySpans") or []:
                for sp in ss.get("spans") or []:
                    sid = sp.get("spanId")
                    if sid:
                        service_of[sid] = svc
                        if sp.get("parentSpanId"):
                            parent_of[sid] = sp["parentSpanId"]
    elif isinstance(doc, Mapping) and isinstance(doc.get("data"), list):
        for tr in doc["data"]:
            procs = tr.get("processes") or {}
            for sp in tr.get("spans") or []:
                sid = sp.get("spanID")
                if not sid:
                    continue
                service_of[sid] = str(
                    (procs.get(sp.get("processID")) or {}).get("serviceName", "unknown")
                )
                for ref in sp.get("references") or []:
                    if ref.get("refType") == "CHILD_OF" and ref.get("spanID"):
                        parent_of[sid] = ref["spanID"]
    else:
        raise DataError(
            "spans must be an OTLP JSON export (resourceSpans) or a Jaeger JSON export (data)"
        )
    pairs = set()
    for sid, parent in parent_of.items():
        a, b = service_of.get(parent), service_of.get(sid)
        if a and b and a != b:
            pairs.add((a, b))
    return sorted(pairs)


def nvlinks_from_nvml() -> dict[str, list[int]]:
    """``{this host: GPU indices with an NVLink to another GPU}`` through NVML.

    Raises:
        NotAvailableError: NVML is absent (see :func:`fleetmind.data.fleet_io.discover_local_fleet`).
    """
    fleet = discover_local_fleet()
    out = {}
    for n, name in enumerate(fleet.node_names):
        nv = fleet.templates[int(fleet.node_template[n])].nvlinks
        out[str(name)] = [i for i in range(len(nv)) if any(int(x) > 0 for x in nv[i])]
    return out
