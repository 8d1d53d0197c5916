"""kube-prometheus-stack's default alerts about hostNetwork static pods, cluster-scoped objects,
pods the graph does not hold yet and PersistentVolumeClaims land on their subject, not on the
exporter that reported them.

The cluster is ``tests/data/k8s/kps_cluster.json`` (see ``tests/test_alert_mapping_kp.py``), built
with ``fleetmind graph build --cluster prod-eu``; here two of its pods also mount claims. The label
sets are the ones Prometheus delivers with the chart's defaults:

* etcd (``templates/exporters/kube-etcd/service.yaml`` and ``servicemonitor.yaml``): the static pod
  ``etcd-cp-0`` runs with ``hostNetwork``, so its ``instance`` is the control plane node's address
  (``10.0.1.5:2381``), beside the target labels ``pod``/``namespace``/``service``/``endpoint`` and
  ``job="kube-etcd"``; ``etcdNoLeader`` (``etcd_server_has_leader == 0``) and
  ``etcdHighNumberOfFailedGRPCRequests`` keep them (``templates/prometheus/rules-1.14/etcd.yaml``).
* kube-state-metrics (``honorLabels: true``): ``KubePersistentVolumeErrors``
  (``kube_persistentvolume_status_phase{persistentvolume, phase}``, a cluster-scoped object: the
  target's ``namespace`` stays; ``rules-1.14/kubernetes-storage.yaml``), ``KubeHpaMaxedOut`` and
  ``KubeHpaReplicasMismatch`` (``kube_horizontalpodautoscaler_*{namespace,
  horizontalpodautoscaler}``; ``rules-1.14/kubernetes-apps.yaml``), ``KubeQuotaExceeded``
  (``kube_resourcequota{...} / ignoring(instance, job, type) ...``: no ``instance``/``job``;
  ``rules-1.14/kubernetes-resources.yaml``), ``KubePodCrashLooping``
  (``kube_pod_container_status_waiting_reason``; ``kubernetes-apps.yaml``). Label names: the
  kube-state-metrics ``docs/metrics/*`` pages.
* kubelet: ``KubePersistentVolumeFillingUp`` (``kubelet_volume_stats_available_bytes /
  kubelet_volume_stats_capacity_bytes``: the kubelet's target labels ``instance``, ``node``,
  ``service="kps-kubelet"``, ``endpoint``, ``metrics_path`` and the claim's ``namespace``,
  ``persistentvolumeclaim``; ``rules-1.14/kubernetes-storage.yaml``).

Before, the etcd alerts landed on the host (``instance``'s address made the pod "the exporter"),
the object alerts on the kube-state-metrics pod (a critical page blaming it), a new pod's crash
loop on kube-state-metrics' Service, and a claim filling up on the kubelet's host or Service.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from fleetmind.data.graph import DependencyGraph
from fleetmind.data.graph_build import build_graph
from fleetmind.rca.features.mapping import map_alerts
from fleetmind.serving.alertmap import node_for_alert

DATA = Path(__file__).parent / "data" / "k8s"
C = "prod-eu"
EXT = {"prometheus": "monitoring/kps-prometheus"}  # kube-prometheus-stack's only external label
KSM_POD = "kps-kube-state-metrics-6d5f8b7c9-abcde"
KSM = {
    "job": "kube-state-metrics",
    "instance": "10.244.0.108:8080",
    "container": "kube-state-metrics",
    "endpoint": "http",
    "service": "kps-kube-state-metrics",
    "pod": KSM_POD,
    "namespace": "monitoring",
}
ETCD = {
    "job": "kube-etcd",
    "instance": "10.0.1.5:2381",
    "endpoint": "http-metrics",
    "namespace": "kube-system",
    "pod": "etcd-cp-0",
    "service": "kps-kube-etcd",
}
PROM_CLAIM = "prometheus-kps-prometheus-db-prometheus-kps-prometheus-0"
"""The claim of kube-prometheus-stack's Prometheus (``storageSpec.volumeClaimTemplate``: the
Operator's StatefulSet names its template ``prometheus-<name>-db``)."""


def _alert(name: str, severity: str, labels: dict[str, str]) -> dict[str, str]:
    return {"alertname": name, **labels, "severity": severity, **EXT}


def _kubelet(ip: str, node: str, namespace: str, claim: str) -> dict[str, str]:
    return {"job": "kubelet", "instance": f"{ip}:10250", "endpoint": "https-metrics",
            "metrics_path": "/metrics", "service": "kps-kubelet", "node": node,
            "namespace": namespace, "persistentvolumeclaim": claim}  # fmt: skip


def _cluster_with_claims() -> dict[str, Any]:
    """The recorded cluster, with the StatefulSet claims its pods mount (a StatefulSet's
    ``volumeClaimTemplates`` appear in the pod as ``persistentVolumeClaim.claimName``
    ``<template>-<pod>``) and a generic ephemeral volume (claim ``<pod>-<volume>``)."""
    k = copy.deepcopy(json.loads((DATA / "kps_cluster.json").read_text()))
    volumes = {
        "llama-train-0": [{"name": "data", "persistentVolumeClaim": {"claimName": "data-llama-train-0"}}],
        "llama-train-1": [{"name": "data", "persistentVolumeClaim": {"claimName": "data-llama-train-1"}}],
        "prometheus-kps-prometheus-0": [
            {"name": "prometheus-kps-prometheus-db", "persistentVolumeClaim": {"claimName": PROM_CLAIM}},
            {"name": "config", "secret": {"secretName": "prometheus-kps-prometheus"}},
        ],
        "ranker-7f9c6d5b4-abcde": [{"name": "scratch", "ephemeral": {"volumeClaimTemplate": {}}}],
    }  # fmt: skip
    for p in k["pods"]["items"]:
        if p["metadata"]["name"] in volumes:
            p["spec"]["volumes"] = volumes[p["metadata"]["name"]]
    return k


@pytest.fixture(scope="module")
def graph() -> DependencyGraph:
    k = _cluster_with_claims()
    model = build_graph(k["nodes"], k["pods"], k["services"], k["endpointslices"], cluster=C)
    return DependencyGraph.from_model(model)


def _both(graph: DependencyGraph, labels: dict[str, str]) -> str | None:
    """The slow path's node, after checking that both fast paths agree with it."""
    slow = graph.node_for_alert(labels)
    assert node_for_alert(graph, labels) == slow
    (fast,) = map_alerts(graph, [{"labels": labels}])
    assert (None if fast is None else graph.nodes[fast].id) == slow
    return slow


STATIC_POD_CASES = {  # etcd.yaml: the hostNetwork static pod, not its host
    "etcdNoLeader": (_alert("etcdNoLeader", "critical", ETCD), f"{C}/pod/kube-system/etcd-cp-0"),
    "etcdHighNumberOfFailedGRPCRequests": (
        _alert(
            "etcdHighNumberOfFailedGRPCRequests",
            "critical",
            {**ETCD, "grpc_method": "Range", "grpc_service": "etcdserverpb.KV"},
        ),
        f"{C}/pod/kube-system/etcd-cp-0",
    ),
}
OBJECT_CASES = {  # kube-state-metrics' object alerts: never its own pod
    "KubePersistentVolumeErrors": (
        _alert(
            "KubePersistentVolumeErrors",
            "critical",
            {**KSM, "persistentvolume": "pvc-0b6f8f62", "phase": "Failed"},
        ),
        C,
    ),
    "KubeHpaMaxedOut_monitoring": (
        _alert("KubeHpaMaxedOut", "warning", {**KSM, "horizontalpodautoscaler": "kps-grafana"}),
        C,
    ),
    "KubeHpaReplicasMismatch_monitoring": (
        _alert(
            "KubeHpaReplicasMismatch", "warning", {**KSM, "horizontalpodautoscaler": "kps-grafana"}
        ),
        C,
    ),
    "KubeQuotaExceeded_monitoring": (  # ignoring(instance, job, type) drops those labels
        _alert(
            "KubeQuotaExceeded",
            "warning",
            {
                **{k: v for k, v in KSM.items() if k not in ("instance", "job")},
                "resourcequota": "monitoring-quota",
                "resource": "requests.cpu",
            },
        ),
        C,
    ),
}
NEW_POD_CASES = {  # KubePodCrashLooping of a pod the graph does not hold yet
    "grafana_pod_in_ksm_namespace": (
        _alert(
            "KubePodCrashLooping",
            "warning",
            {
                **KSM,
                "pod": "kps-grafana-5c7d9f6b8-zzzzz",
                "container": "grafana",
                "reason": "CrashLoopBackOff",
                "uid": "5d1c",
            },
        ),  # fmt: skip
        C,
    ),
}
CLAIM_CASES = {  # kubernetes-storage.yaml: the pod that mounts the claim
    "KubePersistentVolumeFillingUp_statefulset": (
        _alert(
            "KubePersistentVolumeFillingUp",
            "critical",
            _kubelet("10.0.1.10", "gpu-a100-0", "ml", "data-llama-train-0"),
        ),
        f"{C}/pod/ml/llama-train-0",
    ),
    "KubePersistentVolumeInodesFillingUp_other_replica": (
        _alert(
            "KubePersistentVolumeInodesFillingUp",
            "warning",
            _kubelet("10.0.1.11", "gpu-a100-1", "ml", "data-llama-train-1"),
        ),
        f"{C}/pod/ml/llama-train-1",
    ),
    "KubePersistentVolumeFillingUp_prometheus": (
        _alert(
            "KubePersistentVolumeFillingUp",
            "warning",
            _kubelet("10.0.1.20", "cpu-0", "monitoring", PROM_CLAIM),
        ),
        f"{C}/pod/monitoring/prometheus-kps-prometheus-0",
    ),
    "KubePersistentVolumeFillingUp_ephemeral": (
        _alert(
            "KubePersistentVolumeFillingUp",
            "critical",
            _kubelet("10.0.1.10", "gpu-a100-0", "ml", "ranker-7f9c6d5b4-abcde-scratch"),
        ),
        f"{C}/pod/ml/ranker-7f9c6d5b4-abcde",
    ),
    "KubePersistentVolumeFillingUp_no_pod_kube_system": (  # not the kubelet's Service
        _alert(
            "KubePersistentVolumeFillingUp",
            "critical",
            _kubelet("10.0.1.5", "cp-0", "kube-system", "etcd-backup"),
        ),
        f"{C}/host/cp-0",
    ),
}
STILL_CASES = {  # what mapped right before still does
    "KubePodCrashLooping_ksm_itself": (
        _alert(
            "KubePodCrashLooping",
            "warning",
            {**KSM, "reason": "CrashLoopBackOff", "uid": "9a0e"},
        ),
        f"{C}/pod/monitoring/{KSM_POD}",
    ),
    "KubePodCrashLooping_new_ksm_pod": (  # a new pod of the Service's own Deployment
        _alert(
            "KubePodCrashLooping",
            "warning",
            {**KSM, "pod": "kps-kube-state-metrics-6d5f8b7c9-qqqqq", "reason": "CrashLoopBackOff"},
        ),
        f"{C}/svc/monitoring/kps-kube-state-metrics",
    ),
    "app_alert_of_a_new_ranker_pod": (
        _alert(
            "HighErrorRate",
            "warning",
            {"namespace": "ml", "service": "ranker", "pod": "ranker-7f9c6d5b4-zzzzz"},
        ),
        f"{C}/svc/ml/ranker",
    ),
    "NodeFilesystemSpaceFillingUp": (  # a DaemonSet's hostNetwork pod is the exporter
        _alert(
            "NodeFilesystemSpaceFillingUp",
            "warning",
            {
                "job": "node-exporter",
                "instance": "10.0.1.10:9100",
                "container": "node-exporter",
                "endpoint": "http-metrics",
                "service": "kps-prometheus-node-exporter",
                "namespace": "monitoring",
                "pod": "kps-prometheus-node-exporter-7hq9d",
                "device": "/dev/nvme0n1p1",
                "fstype": "ext4",
                "mountpoint": "/",
            },
        ),  # fmt: skip
        f"{C}/host/gpu-a100-0",
    ),
    "KubeDeploymentReplicasMismatch_monitoring": (
        _alert("KubeDeploymentReplicasMismatch", "warning", {**KSM, "deployment": "kps-grafana"}),
        f"{C}/svc/monitoring/kps-grafana",
    ),
    "KubePersistentVolumeFillingUp_no_pod_ml": (
        _alert(
            "KubePersistentVolumeFillingUp",
            "critical",
            _kubelet("10.0.1.10", "gpu-a100-0", "ml", "old-claim"),
        ),
        f"{C}/host/gpu-a100-0",
    ),
}


@pytest.mark.parametrize("case", sorted(STATIC_POD_CASES))
def test_a_host_network_static_pods_alert_stays_on_the_pod(
    graph: DependencyGraph, case: str
) -> None:
    labels, expected = STATIC_POD_CASES[case]
    assert graph.alert_subject(labels)["node"] == "cp-0"  # instance's address is the host's
    assert _both(graph, labels) == expected


@pytest.mark.parametrize("case", sorted(OBJECT_CASES))
def test_an_alert_about_a_kubernetes_object_is_not_the_exporters(
    graph: DependencyGraph, case: str
) -> None:
    labels, expected = OBJECT_CASES[case]
    assert _both(graph, labels) == expected


@pytest.mark.parametrize("case", sorted(NEW_POD_CASES))
def test_a_pod_unknown_to_the_graph_is_not_the_exporters_service(
    graph: DependencyGraph, case: str
) -> None:
    labels, expected = NEW_POD_CASES[case]
    assert _both(graph, labels) == expected


def test_graph_build_records_the_claims_a_pod_mounts(graph: DependencyGraph) -> None:
    assert graph.node(f"{C}/pod/ml/llama-train-0").attrs["claims"] == ["data-llama-train-0"]
    assert graph.node(f"{C}/pod/monitoring/prometheus-kps-prometheus-0").attrs["claims"] == [
        PROM_CLAIM
    ]
    assert graph.node(f"{C}/pod/ml/ranker-7f9c6d5b4-abcde").attrs["claims"] == [
        "ranker-7f9c6d5b4-abcde-scratch"
    ]
    assert "claims" not in graph.node(f"{C}/pod/ml/ranker-7f9c6d5b4-fghij").attrs


@pytest.mark.parametrize("case", sorted(CLAIM_CASES))
def test_a_claim_alert_lands_on_the_pod_that_mounts_it(graph: DependencyGraph, case: str) -> None:
    labels, expected = CLAIM_CASES[case]
    assert _both(graph, labels) == expected


def test_a_claim_shared_by_two_pods_lands_on_the_first_by_id(graph: DependencyGraph) -> None:
    obj = copy.deepcopy(graph.to_json())  # the module's graph stays as it was for the others
    for n in obj["nodes"]:
        if n["id"] in (f"{C}/pod/ml/llama-train-0", f"{C}/pod/ml/llama-train-1"):
            n["attrs"]["claims"] = ["shared-dataset"]
    shared = DependencyGraph.from_json(obj)
    labels = _alert(
        "KubePersistentVolumeFillingUp",
        "critical",
        _kubelet("10.0.1.11", "gpu-a100-1", "ml", "shared-dataset"),
    )
    assert _both(shared, labels) == f"{C}/pod/ml/llama-train-0"


@pytest.mark.parametrize("case", sorted(STILL_CASES))
def test_alerts_that_mapped_right_before_still_do(graph: DependencyGraph, case: str) -> None:
    labels, expected = STILL_CASES[case]
    assert _both(graph, labels) == expected


def test_a_pod_without_a_recorded_owner_is_still_taken_for_the_exporter(
    graph: DependencyGraph,
) -> None:
    """A hand-written graph without ``owner`` attrs keeps the old reading of ``instance``."""
    obj = copy.deepcopy(graph.to_json())  # the module's graph stays as it was for the others
    for n in obj["nodes"]:
        n["attrs"].pop("owner", None)
    bare = DependencyGraph.from_json(obj)
    labels, _ = STATIC_POD_CASES["etcdNoLeader"]
    assert _both(bare, labels) == f"{C}/host/cp-0"


def _without_owners(graph: DependencyGraph) -> DependencyGraph:
    """``graph`` as a hand-written or older graph has it: no pod records its ``owner``."""
    obj = copy.deepcopy(graph.to_json())
    for n in obj["nodes"]:
        n["attrs"].pop("owner", None)
    return DependencyGraph.from_json(obj)


RANKER_NEW_REPLICASET = {  # an application alert of a pod of a ReplicaSet the graph lacks
    "alertname": "HighErrorRate",
    "namespace": "ml",
    "service": "ranker",
    "job": "ranker",
    "pod": "ranker-5b8f9c7d6-zzzzz",
}


@pytest.mark.parametrize("owners", [True, False], ids=["owners", "no_owners"])
def test_a_new_replicasets_pod_keeps_its_service_with_or_without_owners(
    graph: DependencyGraph, owners: bool
) -> None:
    """A Deployment's rollout makes a ReplicaSet ``<deployment>-<pod-template-hash>`` whose pods
    are ``<replicaset>-<5 chars>`` (Kubernetes ``pkg/controller/deployment/sync.go``
    ``getNewReplicaSet``; the pods' ``GenerateName`` ``<replicaset>-`` in
    ``pkg/controller/controller_utils.go``). With owners recorded,
    ``ranker-`` is the workload's prefix; without them the graph cannot tell a new ReplicaSet's
    pod from a foreign one, so the Service is kept (as before the foreign-pod rule)."""
    g = graph if owners else _without_owners(graph)
    assert _both(g, RANKER_NEW_REPLICASET) == f"{C}/svc/ml/ranker"


def test_without_owners_a_new_pod_in_the_exporters_namespace_keeps_the_old_reading(
    graph: DependencyGraph,
) -> None:
    """The foreign-pod rule needs the members' owners: on a graph without them kube-state-metrics'
    Service label is read as before (the Service), with them the cluster node (NEW_POD_CASES)."""
    labels, expected = NEW_POD_CASES["grafana_pod_in_ksm_namespace"]
    assert _both(graph, labels) == expected == C
    assert _both(_without_owners(graph), labels) == f"{C}/svc/monitoring/kps-kube-state-metrics"
