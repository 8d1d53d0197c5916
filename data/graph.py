"""The dependency graph of the data contract (DESIGN.md) and the alert -> node mapping.

On disk a graph is JSON::

    {"name": "g0007",
     "nodes": [{"id": "c0/host/h12", "kind": "host", "cluster": "c0",
                "match": {"cluster": "c0", "node": "h12"}, "attrs": {...}}, ...],
     "edges": [{"src": "c0/pod/gateway-1", "dst": "c0/host/h12", "kind": "runs_on"}, ...]}

* ``kind`` of a node is one of :data:`NODE_KINDS`; of an edge one of :data:`EDGE_KINDS`.
* **Edges point from the dependent to its dependency** (``src`` needs ``dst``): a service ``calls`` the
  service it sends requests to, a pod ``runs_on`` its host and GPUs, a GPU is ``attached_to`` its host, a
  link is ``attached_to`` the two GPUs it joins, anything ``member_of`` its service/cluster,
  ``depends_on`` shared infrastructure. Faults therefore mostly travel against edge direction.
* ``match`` holds the alert labels that identify the node (see :meth:`DependencyGraph.node_for_alert`).

This module is plain Python + numpy (no torch), so datasets are readable without the ML stack.
"""

from __future__ import annotations

import functools
import ipaddress
import json
import re
import urllib.parse
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from fleetmind.data.errors import DataError
from fleetmind.data.files import read_json
from fleetmind.data.graph_schema import EDGE_KINDS, NODE_KINDS, GraphModel, validation_message

_KIND_SPECIFICITY: dict[str, int] = {
    "link": 100,
    "gpu": 90,
    "pod": 80,
    "host": 70,
    "service": 60,
    "registry": 6,
    "dns": 5,
    "config": 4,
    "storage": 3,
    "network": 2,
    "infra": 1,
    "cluster": 0,
}
"""Node kind -> rank; a more specific kind wins when an alert's labels match several nodes equally
well. The cluster ranks last: Prometheus' ``cluster`` external label (docs/graph.md) puts ``cluster``
on every alert, also on alerts about cluster-less shared infrastructure (``{"service": "dns",
"cluster": "c0"}`` is the DNS node, not the cluster)."""

DCGM_EXPORTER_POD = re.compile(r"^(nvidia-)?dcgm-exporter-[a-z0-9]{5}$")
"""A dcgm-exporter DaemonSet pod's name (the GPU Operator's ``nvidia-dcgm-exporter-*``, the
standalone chart's ``dcgm-exporter-*``): the exporter, never the workload its series name."""

OVERRIDE_LABEL = "fleetmind_node"
"""An alert label whose value is a node id maps the alert to that node directly."""

NODE_NAME_LABELS = ("kubernetes_node", "Hostname", "hostname")
"""Labels that stand in for a missing ``node`` when their value names a host of the graph, in this
order (then :data:`HOST_NAME_LABELS`, then ``instance``'s host): ``kubernetes_node`` from the
common relabelling of ``__meta_kubernetes_pod_node_name``, ``Hostname`` of dcgm-exporter
(``hostname`` in its newest code). dcgm-exporter in a pod without ``hostNetwork`` reports its own
pod name as ``Hostname``: a value that names a pod of the graph stands for the host that pod runs
on."""

HOST_NAME_LABELS = ("node_name", "host")
"""Labels that stand in for a missing ``node`` only on an alert without a ``pod`` label, and only
when their value names a host of the graph (never a pod): ``node_name`` from Promtail's chart
(grafana/helm-charts ``charts/promtail/values.yaml``, ``snippets.common``: the stream label of
every pod log, so of a Loki ruler alert grouped by node), ``host`` of a systemd journal stream
(Loki's "Configure Promtail" journal example relabels ``__journal__hostname`` to ``host``). On a
pod's own series they name something else: Telegraf sets ``host`` to ``os.Hostname()``, the pod's
own name, and a pod's log stream carries ``node_name`` beside ``pod``; such an alert stays on its
pod. A host named this way counts as one named by ``instance``'s address alone (see
:meth:`DependencyGraph.is_scrape_target`): only a DaemonSet's pod is then the exporter."""

WORKLOAD_LABELS = {
    "deployment": "Deployment",
    "statefulset": "StatefulSet",
    "daemonset": "DaemonSet",
    "job_name": "Job",
}
"""kube-state-metrics' label naming a workload controller -> the controller's kind, as the pods'
``owner`` attr (``Kind/name``, from ``fleetmind graph build``) names it; the labels of
kube-prometheus' ``KubeDeploymentReplicasMismatch``, ``KubeStatefulSetReplicasMismatch``,
``KubeDaemonSetRolloutStuck``, ``KubeJobFailed`` and their kin."""

OBJECT_LABELS = frozenset(
    {
        "persistentvolume",
        "persistentvolumeclaim",
        "horizontalpodautoscaler",
        "verticalpodautoscaler",
        "resourcequota",
        "limitrange",
        "poddisruptionbudget",
        "replicaset",
        "replicationcontroller",
        "cronjob",
        "ingress",
        "networkpolicy",
        "configmap",
        "secret",
        "storageclass",
        "volumeattachment",
        "certificatesigningrequest",
        "lease",
    }
)
"""kube-state-metrics' labels naming a Kubernetes object other than a workload controller
(:data:`WORKLOAD_LABELS`), a pod, a node, a namespace or a Service (its ``docs/metrics``
pages: ``kube_persistentvolume_status_phase{persistentvolume}``,
``kube_persistentvolumeclaim_info{persistentvolumeclaim}``,
``kube_horizontalpodautoscaler_*{horizontalpodautoscaler}``, ``kube_resourcequota{resourcequota}``
...). An alert carrying one is about that object (kube-prometheus' ``KubePersistentVolumeErrors``,
``KubeHpaMaxedOut``, ``KubeQuotaExceeded``), never about the exporter that reported it; kubelet's
``kubelet_volume_stats_*`` name the claim the same way (``KubePersistentVolumeFillingUp``)."""

CLAIM_LABEL = "persistentvolumeclaim"
"""The label naming a PersistentVolumeClaim (kube-state-metrics' and the kubelet's volume metrics);
with ``namespace`` it finds the pods whose attr ``claims`` (``fleetmind graph build``) lists it."""

_SUBJECT_KINDS = frozenset({"pod", "gpu", "host", "link"})
"""Kinds an alert naming a workload controller keeps when its labels match one (not the exporter):
a pod, GPU, host or link the alert names is more specific than its controller."""

TARGET_LABELS = frozenset({"pod", "namespace", "service", "container", "endpoint"})
"""The labels a Prometheus Operator ``ServiceMonitor`` gives every series of a scrape target (the
exporter's own Service, pod, namespace, container and port), which its alerts keep."""

_SERVICE_TARGET_LABELS = TARGET_LABELS - {"pod", "namespace"}
"""The target labels set aside when a Service matched by ``service`` is not the alert's pod's
(:meth:`DependencyGraph.names_foreign_pod`): the alert's ``pod``/``namespace`` are its subject's."""

_CLAIM_KEEPS = frozenset({"pod", "gpu", "link"})
"""Kinds an alert naming a PersistentVolumeClaim keeps when its labels match one (not the
exporter); a host it matches is the kubelet's ``node`` target label, not the claim's subject."""

_ClusterTable = tuple[dict[str | None, dict[str, str]], dict[str, str]]
"""A lookup of :func:`_in_cluster`: per cluster (``None``: nodes whose ``match`` has no
``cluster``) a key -> its one value there, and key -> value for keys with one value in the graph."""


@dataclass
class GraphNode:
    """One typed node: ``id`` (unique), ``kind`` (in NODE_KINDS), ``cluster`` (or None for global)."""

    id: str
    kind: str
    cluster: str | None = None
    match: dict[str, str] = field(default_factory=dict)
    attrs: dict[str, Any] = field(default_factory=dict)


@dataclass
class GraphEdge:
    """One typed edge ``src -> dst`` meaning "src depends on dst"."""

    src: str
    dst: str
    kind: str


class DependencyGraph:
    """A typed dependency graph with integer indices for array code.

    Attributes:
        name: the topology name (datasets refer to graphs by it).
        nodes: list of :class:`GraphNode`; ``index[node_id]`` is its row in every array.
        edges: list of :class:`GraphEdge`.
        edge_index: int64 array, shape ``(2, |E|)``, rows ``(src_idx, dst_idx)``.
        edge_type: int64 array, shape ``(|E|,)``, index into :data:`EDGE_KINDS`.
        node_type: int64 array, shape ``(|V|,)``, index into :data:`NODE_KINDS`.
    """

    def __init__(self, name: str, nodes: Iterable[GraphNode], edges: Iterable[GraphEdge]) -> None:
        self.name = name
        self.nodes: list[GraphNode] = list(nodes)
        # A repeated edge (same ends, same kind) is one dependency: kept twice, it would count
        # twice in every degree and message of the models.
        unique: dict[tuple[str, str, str], GraphEdge] = {}
        for e in edges:
            unique.setdefault((e.src, e.dst, e.kind), e)
        self.edges: list[GraphEdge] = list(unique.values())
        self.index: dict[str, int] = {}
        for i, n in enumerate(self.nodes):
            if n.kind not in NODE_KINDS:
                raise DataError(f"graph {name!r}: node {n.id!r} has unknown kind {n.kind!r}")
            if n.id in self.index:
                raise DataError(f"graph {name!r}: duplicate node id {n.id!r}")
            self.index[n.id] = i
        src, dst, etype = [], [], []
        for e in self.edges:
            if e.kind not in EDGE_KINDS:
                raise DataError(
                    f"graph {name!r}: edge {e.src}->{e.dst} has unknown kind {e.kind!r}"
                )
            for end in (e.src, e.dst):
                if end not in self.index:
                    raise DataError(
                        f"graph {name!r}: edge {e.src}->{e.dst} names unknown node {end!r}"
                    )
            src.append(self.index[e.src])
            dst.append(self.index[e.dst])
            etype.append(EDGE_KINDS.index(e.kind))
        self.edge_index = np.array([src, dst], dtype=np.int64).reshape(2, -1)
        self.edge_type = np.array(etype, dtype=np.int64)
        self.node_type = np.array([NODE_KINDS.index(n.kind) for n in self.nodes], dtype=np.int64)
        # _best_match's table: (match keys, {their values: best node}) per key set of the nodes
        self._label_index: list[tuple[tuple[str, ...], dict[tuple[str, ...], int]]] | None = None
        self._derived: dict[str, Any] = {}  # caches of the alert mapping (host names, pod services)

    # ------------------------------------------------------------------ basics
    @property
    def num_nodes(self) -> int:
        return len(self.nodes)

    @property
    def num_edges(self) -> int:
        return len(self.edges)

    def node(self, node_id: str) -> GraphNode:
        """Return the node with id ``node_id``; raises DataError naming it when unknown."""
        try:
            return self.nodes[self.index[node_id]]
        except KeyError:
            raise DataError(f"graph {self.name!r} has no node {node_id!r}") from None

    def __repr__(self) -> str:
        return f"DependencyGraph({self.name!r}, |V|={self.num_nodes}, |E|={self.num_edges})"

    # ------------------------------------------------------------------ alert mapping
    def node_for_alert(self, labels: Mapping[str, Any]) -> str | None:
        """Map an alert's labels onto a node id, or ``None`` when nothing matches.

        Rules: a ``fleetmind_node`` label naming a node wins. Otherwise the labels are read as the
        alert's subject (:meth:`alert_subject`: the graph's one cluster standing in for a missing
        ``cluster``; ``exported_pod``/``exported_namespace`` over the scrape target's
        ``pod``/``namespace``; :data:`NODE_NAME_LABELS`, then ``instance`` (``host:port``, a host's
        name or one of its ``addresses``), standing in for a missing ``node``), and the node whose
        ``match`` labels are all present in the alert with equal values, with the most match
        labels, wins; ties go to the more specific kind (:data:`_KIND_SPECIFICITY`: link > gpu >
        pod > host > service > shared infrastructure > cluster), except that a host matched by a
        ``node`` the alert did not name (only ``instance``'s address or a
        :data:`HOST_NAME_LABELS` label gave it) gives way to a shared-infrastructure node the other
        labels, less the exporter's :data:`TARGET_LABELS`, match with as many labels as the host
        (``{cluster, component}`` of a switch whose exporter runs on that host,
        :meth:`_named_component`). An alert naming a workload
        controller (:data:`WORKLOAD_LABELS`) lands on the controller's node (:meth:`workload_node`)
        unless its labels match a pod, GPU, host or link that is not its exporter; one naming a
        PersistentVolumeClaim (:data:`CLAIM_LABEL`) lands on the first pod using it
        (:meth:`claim_node`) unless its labels match a pod, GPU or link that is not its exporter.
        When the match is the exporter that reported the alert (:meth:`is_scrape_target`, also
        for a ``node`` the graph does not hold yet), the alert is matched again without the
        target's labels (:data:`TARGET_LABELS`), and that match wins if there is one (for a node
        the graph does not hold, its cluster node). A Service matched by its ``service`` label while the alert's ``pod``
        is no pod of it (:meth:`names_foreign_pod`) gives way to a match without ``service``,
        ``container`` and ``endpoint``.
        """
        i = self.resolve_alert(
            {str(k): str(v) for k, v in labels.items() if v is not None}, self._best_match
        )
        return None if i is None else self.nodes[i].id

    def resolve_alert(
        self, labels: dict[str, str], match: Callable[[Mapping[str, str]], int | None]
    ) -> int | None:
        """The node index of :meth:`node_for_alert` for ``str -> str`` ``labels``, with ``match``
        finding the best node of a label set (:meth:`_best_match`, or the fast tables of
        :func:`fleetmind.rca.features.mapping.node_index_for_alert`: both paths share these rules)."""
        direct = labels.get(OVERRIDE_LABEL)
        if direct is not None and direct in self.index:
            return self.index[direct]
        labels, node_named = self._subject(labels)
        if not node_named:
            match = functools.partial(self._named_component, match)
        best = match(labels)
        target = best is not None and self.is_scrape_target(best, labels, node_named)
        if CLAIM_LABEL in labels:
            claim = self.claim_node(labels)
            if claim is not None and (
                best is None or target or self.nodes[best].kind not in _CLAIM_KEEPS
            ):
                return claim
        workload = (
            self.workload_node(labels) if not labels.keys().isdisjoint(WORKLOAD_LABELS) else None
        )
        if target:
            if workload is not None:
                return workload
            other = match({k: v for k, v in labels.items() if k not in TARGET_LABELS})
            return other if other is not None else best
        if workload is not None and (best is None or self.nodes[best].kind not in _SUBJECT_KINDS):
            return workload
        if best is not None and self.names_foreign_pod(best, labels):
            other = match({k: v for k, v in labels.items() if k not in _SERVICE_TARGET_LABELS})
            return other if other is not None else best
        return best

    def _named_component(
        self, match: Callable[[Mapping[str, str]], int | None], labels: Mapping[str, str]
    ) -> int | None:
        """``match(labels)`` for an alert whose ``node`` it did not name (taken from ``instance``'s
        address or a :data:`HOST_NAME_LABELS` label, see :meth:`_subject`), except that a host
        matched by that ``node`` gives way to the shared-infrastructure node (a ``network``,
        ``dns``, ``storage`` ... node: ranked below a Service, above the cluster in
        :data:`_KIND_SPECIFICITY`) that the labels match without ``node`` and the exporter's
        target labels (:data:`TARGET_LABELS`), when it matches at least as many labels as the host.

        Such a ``node`` names where the exporter runs, while labels that match a shared node
        (``{cluster, component}`` of an IB or ToR switch, docs/rca-data.md) name what the alert is
        about: treydock/infiniband_exporter runs on a host with an active IB interface, so every
        ``InfinibandSwitchPortDown`` of a switch carries that host's ``instance``."""
        best = match(labels)
        if best is None or self.nodes[best].kind != "host" or "node" not in self.nodes[best].match:
            return best
        # without the exporter's own target labels too: its Service ({cluster, service}) must not
        # stand in for its pod when the pod is not in the graph yet (a DaemonSet rollout)
        other = match({k: v for k, v in labels.items() if k != "node" and k not in TARGET_LABELS})
        if other is None or len(self.nodes[other].match) < len(self.nodes[best].match):
            return best  # a shared node matching fewer labels than the host leaves it the alert
        rank = _KIND_SPECIFICITY.get(self.nodes[other].kind, 0)
        return other if _KIND_SPECIFICITY["cluster"] < rank < _KIND_SPECIFICITY["service"] else best

    def alert_subject(self, labels: dict[str, str]) -> dict[str, str]:
        """An alert's ``str -> str`` labels as they identify its subject (a new dict when changed).

        * A label with an empty value is no label: in Prometheus an empty label value is the same
          as an absent label (Prometheus docs, "Data model"), and Alertmanager removes them from
          the alerts it receives (``removeEmptyLabels`` in prometheus/alertmanager
          ``api/v2/api.go``). ``cluster=""`` is a missing ``cluster``, never a cluster named "".
        * A missing ``cluster`` is the graph's cluster when its nodes name exactly one
          (kube-prometheus-stack adds only ``prometheus=<namespace>/<name>`` as an external label
          unless ``prometheus.prometheusSpec.externalLabels`` sets ``cluster``).
        * With ``honor_labels: false`` (Prometheus's default, and dcgm-exporter's ServiceMonitor),
          an exporter's own ``pod``/``namespace`` labels (the workload it reports on) are renamed
          ``exported_pod``/``exported_namespace`` and ``pod``/``namespace`` name the exporter; the
          exported ones are the subject's.
        * A missing ``node`` is taken from the first of :data:`NODE_NAME_LABELS` that names a host
          of the graph, or a pod of the graph that runs on one host (dcgm-exporter without
          ``hostNetwork`` reports its pod's name as ``Hostname``): that host; else, without a
          ``pod`` label, from the first of :data:`HOST_NAME_LABELS` that names a host; else from
          ``instance`` without its port (a URL's host), or the host that address is one of the
          ``addresses`` of (node-exporter's ``instance`` is ``<InternalIP>:9100`` without
          relabelling). Pod names
          and addresses are looked up among the hosts of the alert's ``cluster`` (clusters in
          separate networks reuse private addresses); for an alert without one, among all hosts,
          where they must name one host.
        """
        return self._subject(labels)[0]

    def _subject(self, labels: dict[str, str]) -> tuple[dict[str, str], bool]:
        """:meth:`alert_subject`'s labels, and whether their ``node`` names a host by a node label
        of the alert (``node`` itself or one of :data:`NODE_NAME_LABELS`) rather than by
        ``instance``'s address or a :data:`HOST_NAME_LABELS` label alone (a ``hostNetwork`` pod's
        ``instance`` is its host's address too: etcd's, the API server's)."""
        if "" in labels.values():
            labels = {k: v for k, v in labels.items() if v != ""}
        if "cluster" not in labels:
            sole = self._sole_cluster()
            if sole is not None:
                labels = {**labels, "cluster": sole}
        if "exported_pod" in labels or "exported_namespace" in labels:
            labels = dict(labels)
            for key in ("pod", "namespace"):
                if f"exported_{key}" in labels:
                    labels[key] = labels[f"exported_{key}"]
        if "node" not in labels:
            hosts, cluster = self._host_names(), labels.get("cluster")
            for key in NODE_NAME_LABELS:
                value = labels.get(key)
                if value is None:
                    continue
                host = value if value in hosts else _in_cluster(self._pod_hosts(), cluster, value)
                if host is not None:
                    return {**labels, "node": host}, True
            if "pod" not in labels:
                for key in HOST_NAME_LABELS:
                    if labels.get(key) in hosts:
                        return {**labels, "node": labels[key]}, False
            if "instance" in labels:
                addr = instance_address(labels["instance"])
                host = _in_cluster(self._host_addresses(), cluster, addr)
                return {**labels, "node": addr if host is None else host}, False
        return labels, True

    def is_scrape_target(self, i: int, labels: Mapping[str, str], node_named: bool = True) -> bool:
        """Whether node ``i``, matched by an alert's subject ``labels``, is the exporter that
        reported the alert rather than its subject.

        * A pod that belongs to the Service the alert's ``service`` (or ``job``) label names, while
          the alert names a Kubernetes object (:data:`WORKLOAD_LABELS`, :data:`OBJECT_LABELS`) or
          its ``node`` names a host, or, named by the alert's own ``node`` (or a
          :data:`NODE_NAME_LABELS` label), a node the graph does not hold yet (one that joined
          after the graph was built: its alerts then fall back as an unknown pod's do, to the
          cluster node, instead of landing on the exporter). kube-state-metrics' node alerts
          (``KubeNodeNotReady``),
          workload alerts (``KubeDeploymentReplicasMismatch`` of a Deployment in its own
          namespace) and object alerts (``KubePersistentVolumeErrors``, ``KubeHpaMaxedOut``,
          ``KubeQuotaExceeded``), node-exporter's and dcgm-exporter's carry the exporter pod's
          ``pod``/``namespace``/``service`` as target labels (:data:`TARGET_LABELS`) beside what
          they are about; a pod's own alerts name Services it does not belong to
          (kube-state-metrics' ``service`` label) or no node.
        * With ``node_named`` false (the host came from ``instance``'s address alone, see
          :meth:`_subject`) and no object named, only a DaemonSet's pod is the exporter (or a pod
          whose ``owner`` the graph does not record): node-exporter's ``instance`` is its host's
          address, and so is a ``hostNetwork`` static pod's (etcd, the API server), whose alerts
          (``etcdNoLeader``) are about that pod.
        * A Service the alert's ``service`` label names, while the alert names a Kubernetes object
          other than a workload controller (:data:`OBJECT_LABELS`): the kubelet's Service on
          ``KubePersistentVolumeFillingUp`` of a claim in ``kube-system``; or while it has a
          ``node`` (a host, or a node the graph does not hold yet) or carries ``gpu``, as for a
          pod: the exporter's pod is one the graph does not hold yet (a DaemonSet rollout since
          the graph was built, or the exporter pod of a new node), so the Service matched in its
          place. With ``node_named`` false only a Service whose member pods are all DaemonSet
          pods (:meth:`_daemon_pod`) is the exporter: a ``hostNetwork`` Deployment's
          ``instance`` is its host's address too. When that address is no host's of the graph
          (node-exporter's ``<InternalIP>:9100`` on a new node), every member must record a
          DaemonSet ``owner``: a Service of pods without recorded owners (a hand-written graph)
          whose ``instance`` is a pod's own address keeps the alert.
        * A prober: a pod of the alert's Service that probes elsewhere (:meth:`probes_elsewhere`),
          or the Service itself when none of its member pods holds the probed address
          (:meth:`probing_service`: the prober's pod after a rollout, not in the graph yet).
        """
        kind = self.nodes[i].kind
        objects = not labels.keys().isdisjoint(OBJECT_LABELS)
        if kind == "service":
            if self.nodes[i].match.get("service") != labels.get("service"):
                return False
            if objects or self.probing_service(i, labels):
                return True
            if "node" not in labels and "gpu" not in labels:
                return False
            if node_named:
                return True
            return self._daemon_service(i, strict=labels["node"] not in self._host_names())
        if kind != "pod" or ("service" not in labels and "job" not in labels):
            return False
        services = self._pod_services().get(i, ())
        if labels.get("service") not in services and labels.get("job") not in services:
            return False
        if self.probes_elsewhere(i, labels):
            return True
        if not objects and labels.keys().isdisjoint(WORKLOAD_LABELS):
            if "node" not in labels:
                return False
            if labels["node"] not in self._host_names() and not node_named:
                return False
            if not node_named and not self._daemon_pod(i):
                return False
        return True

    def probes_elsewhere(self, i: int, labels: Mapping[str, str]) -> bool:
        """Whether pod ``i``, matched by an alert's target labels, is a prober whose ``instance``
        names the probed target, not the pod (blackbox- and SNMP-exporter).

        The prometheus-community charts ``prometheus-blackbox-exporter`` and
        ``prometheus-snmp-exporter`` (``templates/servicemonitor.yaml``) set ``instance`` to the
        probe's target and ``target`` to its name in ``metricRelabelings``, so each probe series
        keeps the exporter's ``pod``/``namespace``/``service``/``container``/``endpoint``. The pod
        is the prober when the alert shows a probe (:func:`shows_probe`: a URL ``instance`` or a
        ``target`` label) and ``instance``'s address (:func:`instance_address`) is none of its own
        (attr ``addresses``, its ``status.podIPs``, or its name). An ``instance`` without a port,
        or one naming a host, shows no probe by itself: an app's ``instance`` relabelled to
        ``ranker`` or to its node's name, a StatefulSet pod back under its old name with a new IP,
        a ``hostNetwork`` pod (``etcdNoLeader`` with ``instance`` ``cp-0``) keep their alerts. An
        alert with ``exported_pod``/``exported_namespace`` is about that pod; an exporter's own
        alerts (``instance`` its pod IP and port) stay on it. On a graph built without pod
        ``addresses`` only a URL ``instance`` shows a prober (a pod's own scrape never is one):
        rebuild the graph to have ICMP, TCP and SNMP probes land on their targets.
        """
        if not shows_probe(labels):
            return False
        node, instance = self.nodes[i], labels["instance"]
        addresses = node.attrs.get("addresses")
        if not isinstance(addresses, list):
            return "://" in instance
        own = {canonical_address(str(a)) for a in addresses} | {str(node.match.get("pod"))}
        return instance_address(instance) not in own

    def probing_service(self, i: int, labels: Mapping[str, str]) -> bool:
        """Whether Service ``i``, matched by an alert's ``service`` label, is a prober's Service
        whose alert shows a probe (:func:`shows_probe`) of an address none of its member pods
        holds (:meth:`probes_elsewhere` for each; a Service without members holds none). After a
        rollout the prober's new pod is not in the graph yet, so the alert matches its Service:
        the probe still lands on its target, not on the Service."""
        if not shows_probe(labels):
            return False
        return all(self.probes_elsewhere(j, labels) for j in self._service_members().get(i, ()))

    def _daemon_service(self, i: int, strict: bool = False) -> bool:
        """Whether Service ``i`` has member pods and all are :meth:`_daemon_pod`'s (with
        ``strict``, all record an ``owner`` and it is a DaemonSet)."""
        members = self._service_members().get(i, ())
        if strict:
            owners = [self.nodes[j].attrs.get("owner") for j in members]
            return bool(owners) and all(
                isinstance(o, str) and o.startswith("DaemonSet/") for o in owners
            )
        return bool(members) and all(self._daemon_pod(j) for j in members)

    def _service_members(self) -> dict[int, frozenset[int]]:
        """Service index -> the indices of its ``member_of`` pods (cached)."""
        cached = self._derived.get("service_members")
        if cached is None:
            out: dict[int, set[int]] = {}
            for e in self.edges:
                i, j = self.index[e.src], self.index[e.dst]
                if e.kind == "member_of" and self.nodes[i].kind == "pod":
                    if self.nodes[j].kind == "service":
                        out.setdefault(j, set()).add(i)
            cached = self._derived["service_members"] = {k: frozenset(v) for k, v in out.items()}
        return cached

    def _daemon_pod(self, i: int) -> bool:
        """Whether pod ``i`` is a DaemonSet's (attr ``owner`` ``DaemonSet/...``), or the graph
        does not record its owner."""
        owner = self.nodes[i].attrs.get("owner")
        return not isinstance(owner, str) or owner.startswith("DaemonSet/")

    def names_foreign_pod(self, i: int, labels: Mapping[str, str]) -> bool:
        """Whether node ``i`` is a Service matched by the alert's ``service`` label while the
        alert's ``pod`` (in its ``namespace``) is none of the Service's pods: neither a member nor
        named like one of its members' controllers (``<controller>-...``: a pod of the same
        workload the graph does not hold yet). kube-state-metrics keeps its own Service as a
        target label on every alert about a pod (``KubePodCrashLooping`` of a new pod in its own
        namespace); a Service without members proves nothing, and neither does one with a member
        whose ``owner`` the graph does not record (a hand-written or older graph): without it a
        Deployment's pod of a new ReplicaSet (``ranker-5b8f9c7d6-zzzzz``) cannot be told from a
        foreign one, so the alert keeps the Service."""
        node = self.nodes[i]
        pod = labels.get("pod")
        if (
            node.kind != "service"
            or pod is None
            or node.match.get("service") != labels.get("service")
        ):
            return False
        prefixes = self._service_pods().get(i)
        if not prefixes:
            return False
        names, stems = prefixes
        return (labels.get("namespace"), pod) not in names and not pod.startswith(stems)

    def claim_node(self, labels: Mapping[str, str]) -> int | None:
        """The pod an alert naming a PersistentVolumeClaim lands on, or ``None``.

        The claim is named by :data:`CLAIM_LABEL` and ``namespace``; the pods using it are the
        graph's pods in that namespace whose attr ``claims`` (``spec.volumes[]
        .persistentVolumeClaim.claimName``, recorded by ``fleetmind graph build``) lists it, in
        the alert's ``cluster``; the first by id (a ``ReadWriteMany`` claim may have several)."""
        namespace, claim = labels.get("namespace"), labels.get(CLAIM_LABEL)
        if namespace is None or claim is None:
            return None
        claims = self._claims()
        found = claims.get((labels.get("cluster"), namespace, claim))
        if found is None and "cluster" not in labels:
            found = claims.get((None, namespace, claim))
        return found

    def workload_node(self, labels: Mapping[str, str]) -> int | None:
        """The node an alert about a workload controller lands on, or ``None``.

        The controller is named by one of :data:`WORKLOAD_LABELS` (kube-state-metrics' labels)
        and ``namespace``; its pods are the graph's pods whose attr ``owner`` is that controller
        (a Deployment's pods are owned by its ReplicaSets, ``ReplicaSet/<deployment>-<hash>``) in
        the alert's ``cluster``. It lands on a Service whose member pods are all the controller's
        (one selecting every pod first, then one named like the controller, then the first by
        id); without one, on the controller's first pod by id: an alert about a controller lands
        where its pods run, never on the cluster."""
        namespace = labels.get("namespace")
        if namespace is None:
            return None
        workloads = self._workloads()
        for key, kind in WORKLOAD_LABELS.items():
            name = labels.get(key)
            if name is None:
                continue
            found = workloads.get((labels.get("cluster"), namespace, kind, name))
            if found is None and "cluster" not in labels:
                found = workloads.get((None, namespace, kind, name))
            if found is not None:
                return found
        return None

    def _host_names(self) -> frozenset[str]:
        """The ``node`` match values of the graph's hosts (cached)."""
        cached = self._derived.get("hosts")
        if cached is None:
            cached = self._derived["hosts"] = frozenset(
                str(n.match["node"]) for n in self.nodes if n.kind == "host" and "node" in n.match
            )
        return cached

    def _pod_services(self) -> dict[int, frozenset[str]]:
        """Pod index -> the ``service`` match values of the Services it is ``member_of`` (cached)."""
        cached = self._derived.get("pod_services")
        if cached is None:
            out: dict[int, set[str]] = {}
            for e in self.edges:
                if e.kind != "member_of":
                    continue
                src, dst = self.nodes[self.index[e.src]], self.nodes[self.index[e.dst]]
                if src.kind == "pod" and dst.kind == "service" and "service" in dst.match:
                    out.setdefault(self.index[e.src], set()).add(str(dst.match["service"]))
            cached = self._derived["pod_services"] = {k: frozenset(v) for k, v in out.items()}
        return cached

    def _service_pods(
        self,
    ) -> dict[int, tuple[frozenset[tuple[str | None, str]], tuple[str, ...]]]:
        """Service index -> its member pods' ``(namespace, pod)`` match values, and the name
        prefixes (``<controller>-``, else the pod name without its last ``-`` part) a pod of the
        same workloads has (cached). Services with a member pod whose attr ``owner`` is not
        recorded are left out: their pods' workloads are not known."""
        cached = self._derived.get("service_pods")
        if cached is None:
            names: dict[int, set[tuple[str | None, str]]] = {}
            stems: dict[int, set[str]] = {}
            unowned: set[int] = set()
            for e in self.edges:
                if e.kind != "member_of":
                    continue
                i, j = self.index[e.src], self.index[e.dst]
                src, dst = self.nodes[i], self.nodes[j]
                if src.kind != "pod" or dst.kind != "service" or "pod" not in src.match:
                    continue
                if not isinstance(src.attrs.get("owner"), str):
                    unowned.add(j)
                pod, ns = str(src.match["pod"]), src.match.get("namespace")
                names.setdefault(j, set()).add((None if ns is None else str(ns), pod))
                ctl = _controller(src)
                stem = ctl[2] if ctl is not None else pod.rsplit("-", 1)[0]
                stems.setdefault(j, set()).add(f"{stem}-")
            cached = {
                j: (frozenset(m), tuple(sorted(stems[j])))
                for j, m in names.items()
                if j not in unowned
            }
            self._derived["service_pods"] = cached
        return cached

    def _claims(self) -> dict[tuple[str | None, str, str], int]:
        """``(cluster, namespace, claim) -> pod index`` of :meth:`claim_node` (the first pod by
        id); the same key with cluster ``None`` for a claim found in one cluster only (cached)."""
        cached = self._derived.get("claims")
        if cached is None:
            pods: dict[tuple[str | None, str, str], list[int]] = {}
            for i, n in enumerate(self.nodes):
                claims = n.attrs.get("claims") if n.kind == "pod" else None
                namespace = n.match.get("namespace")
                if not isinstance(claims, list) or namespace is None:
                    continue
                for c in claims:
                    pods.setdefault((n.match.get("cluster"), str(namespace), str(c)), []).append(i)
            cached = {k: min(v, key=lambda i: self.nodes[i].id) for k, v in pods.items()}
            clusters: dict[tuple[str, str], list[int]] = {}
            for key, target in cached.items():
                clusters.setdefault(key[1:], []).append(target)
            cached.update({(None, *k): t[0] for k, t in clusters.items() if len(t) == 1})
            self._derived["claims"] = cached
        return cached

    def cluster_names(self) -> frozenset[str]:
        """The ``cluster`` match values of the graph's nodes (cached)."""
        cached = self._derived.get("cluster_names")
        if cached is None:
            cached = frozenset(str(n.match["cluster"]) for n in self.nodes if "cluster" in n.match)
            self._derived["cluster_names"] = cached
        return cached

    def _sole_cluster(self) -> str | None:
        """The ``cluster`` match value when the graph's nodes name exactly one, else None."""
        clusters = self.cluster_names()
        return next(iter(clusters)) if len(clusters) == 1 else None

    def _host_addresses(self) -> _ClusterTable:
        """Host ``addresses`` attr values (IPs, DNS names) -> the host's ``node`` match value, per
        cluster, for addresses that name one host of it (see :func:`_in_cluster`; cached).
        Clusters in separate networks reuse private addresses (the same default VPC CIDR): an
        address is only ever looked up in the alert's own cluster."""
        cached = self._derived.get("host_addresses")
        if cached is None:
            owners: list[tuple[str | None, str, str]] = []
            for n in self.nodes:
                addrs = n.attrs.get("addresses") if n.kind == "host" else None
                if "node" in n.match and isinstance(addrs, list):
                    cluster = n.match.get("cluster")
                    owners += [
                        (
                            None if cluster is None else str(cluster),
                            canonical_address(str(a)),
                            str(n.match["node"]),
                        )
                        for a in addrs
                    ]
            cached = self._derived["host_addresses"] = _cluster_table(owners)
        return cached

    def _pod_hosts(self) -> _ClusterTable:
        """Pod ``pod`` match value -> the ``node`` match value of the one host it ``runs_on``, per
        cluster, for pod names that run on one host of it (see :func:`_in_cluster`; cached)."""
        cached = self._derived.get("pod_hosts")
        if cached is None:
            owners: list[tuple[str | None, str, str]] = []
            for e in self.edges:
                if e.kind != "runs_on":
                    continue
                src, dst = self.nodes[self.index[e.src]], self.nodes[self.index[e.dst]]
                if src.kind == "pod" and dst.kind == "host" and "pod" in src.match:
                    if "node" in dst.match:
                        cluster = src.match.get("cluster")
                        owners.append(
                            (
                                None if cluster is None else str(cluster),
                                str(src.match["pod"]),
                                str(dst.match["node"]),
                            )
                        )
            cached = self._derived["pod_hosts"] = _cluster_table(owners)
        return cached

    def _workloads(self) -> dict[tuple[str | None, str, str, str], int]:
        """``(cluster, namespace, controller kind, name) -> node index`` of :meth:`workload_node`;
        the same key with cluster ``None`` for a controller found in one cluster only (cached)."""
        cached = self._derived.get("workloads")
        if cached is None:
            pods: dict[tuple[str | None, str, str, str], list[int]] = {}
            for i, n in enumerate(self.nodes):
                ctl = _controller(n) if n.kind == "pod" else None
                if ctl is not None:
                    pods.setdefault((n.match.get("cluster"), *ctl), []).append(i)
            members: dict[int, set[int]] = {}  # service index -> its member pods
            for e in self.edges:
                j = self.index[e.dst]
                if e.kind == "member_of" and self.nodes[j].kind == "service":
                    members.setdefault(j, set()).add(self.index[e.src])
            services: dict[int, list[int]] = {}  # pod index -> its services
            for j, m in members.items():
                for i in m:
                    services.setdefault(i, []).append(j)
            cached = {
                key: self._workload_target(ids, key[3], members, services)
                for key, ids in pods.items()
            }
            clusters: dict[tuple[str, str, str], list[int]] = {}
            for key, target in cached.items():
                clusters.setdefault(key[1:], []).append(target)
            cached.update({(None, *k): t[0] for k, t in clusters.items() if len(t) == 1})
            self._derived["workloads"] = cached
        return cached

    def _workload_target(
        self,
        pods: list[int],
        name: str,
        members: Mapping[int, set[int]],
        services: Mapping[int, list[int]],
    ) -> int:
        """A controller's Service (see :meth:`workload_node`), else its first pod by id."""
        mine = set(pods)
        ranked = sorted(
            (members[j] != mine, self.nodes[j].match.get("service") != name, self.nodes[j].id, j)
            for j in {j for i in pods for j in services.get(i, ())}
            if members[j] <= mine
        )
        return ranked[0][3] if ranked else min(pods, key=lambda i: self.nodes[i].id)

    def _best_match(self, labels: Mapping[str, str]) -> int | None:
        """Index of the node whose ``match`` labels all equal ``labels``'s, most of them first,
        then the more specific kind, then the first node; ``None`` when none matches (a node with
        an empty ``match`` matches nothing).

        Nodes are grouped by their ``match`` keys (a graph has few such key sets); per key set, the
        alert's values of those keys look up the nodes that match with them, so an alert costs one
        lookup per key set, whatever the number of nodes that share one of its labels (``cluster``).
        """
        table = self._label_index
        if table is None:
            groups: dict[tuple[str, ...], dict[tuple[str, ...], int]] = {}
            for i, n in enumerate(self.nodes):
                if not n.match:
                    continue
                keys = tuple(sorted(n.match, key=str))
                by_values = groups.setdefault(keys, {})
                values = tuple(str(n.match[k]) for k in keys)
                j = by_values.get(values)
                # equal match labels: the more specific kind, then the first node
                if j is None or _KIND_SPECIFICITY.get(n.kind, 0) > _KIND_SPECIFICITY.get(
                    self.nodes[j].kind, 0
                ):
                    by_values[values] = i
            table = self._label_index = list(groups.items())
        best: tuple[int, int, int] | None = None
        for keys, by_values in table:
            try:
                values = tuple([labels[k] for k in keys])
            except KeyError:
                continue
            i = by_values.get(values)
            if i is not None:
                key = (len(keys), _KIND_SPECIFICITY.get(self.nodes[i].kind, 0), -i)
                if best is None or key > best:
                    best = key
        return None if best is None else -best[2]

    # ------------------------------------------------------------------ JSON
    def to_json(self) -> dict[str, Any]:
        """Return the JSON-able dict of the data contract.

        ``match`` and ``attrs`` are copies (nested lists and dicts included): a caller that edits
        the dict, say to build a variant graph from it, leaves this graph as it was. The copy
        cost 50-110 ms on a graph of 48,000 pod nodes with an ``owner`` and a ``claims`` attr
        (13 ms without it), next to about 0.9 s that FastAPI spends encoding the dict for
        ``GET /api/v1/graph``.
        """
        return {
            "name": self.name,
            "nodes": [
                {
                    "id": n.id,
                    "kind": n.kind,
                    "cluster": n.cluster,
                    "match": dict(n.match),
                    "attrs": _json_copy(n.attrs),
                }
                for n in self.nodes
            ],
            "edges": [{"src": e.src, "dst": e.dst, "kind": e.kind} for e in self.edges],
        }

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> DependencyGraph:
        """Build a graph from the JSON dict; raises DataError naming the first bad entry.

        The structure is checked by :class:`fleetmind.data.graph_schema.GraphModel` (the one model behind
        ``docs/graph.schema.json``), ids and edge ends by the constructor.
        """
        from pydantic import ValidationError

        if not isinstance(obj, Mapping):
            raise DataError("graph JSON must be an object with 'name', 'nodes' and 'edges'")
        try:
            model = GraphModel.model_validate(dict(obj))
        except ValidationError as err:
            raise DataError(f"malformed graph JSON: {validation_message(err)}") from None
        return cls.from_model(model)

    @classmethod
    def from_model(cls, model: Any) -> DependencyGraph:
        """Build a graph from a validated :class:`fleetmind.data.graph_schema.GraphModel`.

        Raises:
            DataError: the graph has no nodes (served, it would map no alert and rank no cause;
                a file or ``PUT /api/v1/graph`` that empties it is a mistake, not a topology).
        """
        if not model.nodes:
            raise DataError(f"graph {model.name!r} has no nodes; a graph needs at least one")
        nodes = [
            GraphNode(
                id=n.id, kind=n.kind, cluster=n.cluster, match=dict(n.match), attrs=dict(n.attrs)
            )
            for n in model.nodes
        ]
        edges = [GraphEdge(e.src, e.dst, e.kind) for e in model.edges]
        return cls(model.name, nodes, edges)

    def save(self, path: str | Path) -> None:
        """Write the graph JSON to ``path``."""
        Path(path).write_text(json.dumps(self.to_json(), separators=(",", ":")))

    @classmethod
    def load(cls, path: str | Path) -> DependencyGraph:
        """Read a graph JSON file; raises DataError for a missing or malformed file."""
        return cls.from_json(read_json(path, "graph file"))


_CONTAINERS = (dict, list)


def cached_for_edges(graph: Any, key: str, build: Callable[[], Any]) -> Any:
    """``build()``, cached in ``graph``'s derived-data dict (``_derived``) under ``key`` for the
    graph's current edge list (the same list object and length). An incident's graph with extra
    edges (:mod:`fleetmind.rca.incident_graph`) shares that dict with its served graph and has
    its own list, so it gets its own value (replacing the entry). Built each time for an object
    without such a dict. The caller must not change the edge list or the value."""
    cache = getattr(graph, "_derived", None)
    hit = cache.get(key) if isinstance(cache, dict) else None
    if hit is not None and hit[0] is graph.edges and hit[1] == len(graph.edges):
        return hit[2]
    value = build()
    if isinstance(cache, dict):
        cache[key] = (graph.edges, len(graph.edges), value)
    return value


def _json_copy(value: Any) -> Any:
    """A copy of JSON-like ``value``: its dicts and lists copied at every depth, the rest shared
    (strings, numbers, booleans and ``None`` cannot change)."""
    if isinstance(value, dict):
        return {k: _json_copy(v) if isinstance(v, _CONTAINERS) else v for k, v in value.items()}
    if isinstance(value, list):
        return [_json_copy(v) if isinstance(v, _CONTAINERS) else v for v in value]
    return value


def _controller(node: GraphNode) -> tuple[str, str, str] | None:
    """``(namespace, controller kind, name)`` of the workload controller a pod node belongs to,
    from its ``owner`` attr: a ReplicaSet ``<deployment>-<hash>`` is its Deployment's."""
    owner, namespace = node.attrs.get("owner"), node.match.get("namespace")
    if not isinstance(owner, str) or "/" not in owner or namespace is None:
        return None
    kind, name = owner.split("/", 1)
    if kind == "ReplicaSet" and "-" in name:
        kind, name = "Deployment", name.rsplit("-", 1)[0]
    return str(namespace), kind, name


def canonical_address(text: str) -> str:
    """``text`` (brackets allowed) in the IP address's canonical form (lower-case, IPv6
    compressed: ``[FD00:10:0::5]`` -> ``fd00:10::5``), so spellings of one address compare equal;
    an IPv4-mapped IPv6 address as its IPv4 address (``::ffff:10.0.0.5`` -> ``10.0.0.5``); a name
    or anything else as it is."""
    try:
        ip = ipaddress.ip_address(text.strip().removeprefix("[").removesuffix("]"))
    except ValueError:
        return text
    return str(getattr(ip, "ipv4_mapped", None) or ip)


def instance_address(instance: str) -> str:
    """The address part of a Prometheus ``instance`` label, without its port: ``10.0.0.5:9100``,
    ``[fd00:10::5]:9100``, a bare IPv6 address (``fd00:10::5``, which holds colons but no port)
    or a name (``gpu-0:9100``), IP addresses in their canonical form (:func:`canonical_address`).
    A URL (a blackbox-exporter HTTP probe's ``instance``, ``https://10.0.1.10:443/healthz``) gives
    its host (``10.0.1.10``; ``https://[fd00::5]/`` -> ``fd00::5``; a host name in lower case), a
    URL without one (``file:///x``, ``http://[fd00::5``) itself."""
    text = instance.strip()
    if "://" in text:
        try:
            host = urllib.parse.urlsplit(text).hostname
        except ValueError:  # an unbalanced IPv6 bracket: no address to take
            host = None
        return canonical_address(host) if host else text
    if text.startswith("["):
        inner, sep, rest = text[1:].partition("]")
        if sep and (not rest or rest.startswith(":")):
            return canonical_address(inner)
    try:
        ipaddress.ip_address(text)
    except ValueError:
        return canonical_address(text.rpartition(":")[0] if ":" in text else text)
    return canonical_address(text)


def shows_probe(labels: Mapping[str, str]) -> bool:
    """Whether an alert's labels show a blackbox- or SNMP-exporter probe: a URL ``instance``
    (``https://10.0.1.10/healthz``) or the ``target`` label both prometheus-community charts set
    on every probe series (``templates/servicemonitor.yaml``, ``metricRelabelings``), and no
    ``exported_pod``/``exported_namespace`` (an alert about that pod)."""
    instance = labels.get("instance")
    if instance is None or "exported_pod" in labels or "exported_namespace" in labels:
        return False
    return "://" in instance or "target" in labels


def instance_has_port(instance: str) -> bool:
    """Whether a Prometheus ``instance`` label ends in a port (``10.0.0.5:9100``,
    ``[fd00::5]:9100``, ``gpu-0:9100``), as every scrape of a pod or host target does; a probe's
    target relabelled into ``instance`` often has none (blackbox ICMP ``10.0.1.10``, SNMP
    ``10.0.1.254``) or is a URL (not counted as a port here)."""
    text = instance.strip()
    if "://" in text:
        return False
    if text.startswith("["):
        return "]:" in text
    try:
        ipaddress.ip_address(text)
    except ValueError:
        head, sep, port = text.rpartition(":")
        return bool(head and sep) and port.isdigit()
    return False


def _cluster_table(owners: Iterable[tuple[str | None, str, str]]) -> _ClusterTable:
    """The :data:`_ClusterTable` of ``(cluster, key, value)`` triples: a key with two values in a
    cluster is left out of that cluster's table, one with two values in the graph out of the
    graph-wide one."""
    per: dict[str | None, dict[str, set[str]]] = {}
    anywhere: dict[str, set[str]] = {}
    for cluster, key, value in owners:
        per.setdefault(cluster, {}).setdefault(key, set()).add(value)
        anywhere.setdefault(key, set()).add(value)
    return (
        {c: {k: next(iter(v)) for k, v in t.items() if len(v) == 1} for c, t in per.items()},
        {k: next(iter(v)) for k, v in anywhere.items() if len(v) == 1},
    )


def _in_cluster(table: _ClusterTable, cluster: str | None, key: str) -> str | None:
    """``key``'s value in ``cluster`` (an alert's ``cluster`` label), else among nodes without a
    ``cluster`` match label (they match every cluster's alerts); for an alert without ``cluster``,
    its value when the graph holds one; else ``None``."""
    per, anywhere = table
    if cluster is None:
        return anywhere.get(key)
    found = per.get(cluster, {}).get(key)
    return found if found is not None else per.get(None, {}).get(key)
