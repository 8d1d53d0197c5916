"""In a graph of several clusters, an address or pod name is looked up in the alert's own cluster.

Clusters in separate networks reuse private addresses: ``eksctl create cluster`` gives every
cluster its own VPC with the same default CIDR ``192.168.0.0/16`` (eksctl user guide, "VPC
Configuration"), and so on for any provider default. Both clusters here are ``fleetmind graph
build`` of ``tests/data/k8s/kps_cluster.json`` (kube-prometheus-stack release ``kps``, see
``tests/test_alert_mapping_kp.py``), ``prod-eu`` as recorded and ``prod-us`` with other node and
exporter pod names but the same ``InternalIP`` s, merged into one graph.

The label sets are the ones Prometheus delivers with the charts' defaults:

* node-exporter (prometheus-community/helm-charts ``charts/prometheus-node-exporter``:
  ``hostNetwork: true``, ``templates/servicemonitor.yaml`` without ``relabelings``): ``instance``
  is ``<node InternalIP>:9100``, no ``node`` label, the target labels ``job``/``service``/
  ``namespace``/``pod``/``container``/``endpoint``; ``NodeFilesystemSpaceFillingUp`` keeps them
  with ``device``/``fstype``/``mountpoint`` (kube-prometheus
  ``manifests/nodeExporter-prometheusRule.yaml``).
* dcgm-exporter (NVIDIA GPU Operator, no ``hostNetwork``, ServiceMonitor ``honorLabels: false``):
  ``Hostname`` is the exporter pod's name, ``instance`` the pod's address.
* ``cluster`` comes from ``prometheus.prometheusSpec.externalLabels`` of each cluster's
  kube-prometheus-stack, the only way a graph of several clusters maps anything (docs/graph.md).

Before, an address both clusters use named two hosts and was dropped: ``node`` stayed the bare IP
and node-exporter's alerts landed on the node-exporter pod (of either cluster) instead of the host;
a dcgm-exporter pod name both clusters hold landed the XID on the dcgm-exporter pod.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from fleetmind.data.graph import DependencyGraph
from fleetmind.data.graph_build import build_graph
from fleetmind.rca.features.mapping import map_alerts
from fleetmind.serving.alertmap import node_for_alert

DATA = Path(__file__).parent / "data" / "k8s"
EXT = {"prometheus": "monitoring/kps-prometheus"}
NODES = re.compile(r"\b(cp-0|gpu-a100-0|gpu-a100-1|cpu-0)\b")
US_PODS = {"4xk2p": "p8v2r", "7hq9d": "d3k7w", "m2c8v": "n6t4b", "zt5rw": "x5j9q"}
"""prod-us's node-exporter pods (DaemonSet pods: the same names would be a coincidence)."""
NE = {  # cluster -> host -> (node-exporter pod, InternalIP)
    "prod-eu": {
        "gpu-a100-0": ("kps-prometheus-node-exporter-7hq9d", "10.0.1.10"),
        "cpu-0": ("kps-prometheus-node-exporter-zt5rw", "10.0.1.20"),
    },
    "prod-us": {
        "us-gpu-a100-0": ("kps-prometheus-node-exporter-d3k7w", "10.0.1.10"),
        "us-cpu-0": ("kps-prometheus-node-exporter-x5j9q", "10.0.1.20"),
    },
}


def _recorded(cluster: str, *, us_pods: dict[str, str], us_ips: dict[str, str]) -> dict[str, Any]:
    """The recorded cluster; for prod-us its nodes renamed ``us-<name>``, the pod name suffixes in
    ``us_pods`` and the addresses in ``us_ips`` replaced."""
    text = (DATA / "kps_cluster.json").read_text()
    if cluster == "prod-us":
        text = NODES.sub(lambda m: f"us-{m.group(1)}", text)
        for old, new in {**us_pods, **us_ips}.items():
            text = text.replace(f'{old}"', f'{new}"')
    return json.loads(text)


def _two_clusters(
    us_pods: dict[str, str] = US_PODS, us_ips: dict[str, str] | None = None
) -> DependencyGraph:
    graphs = []
    for c in ("prod-eu", "prod-us"):
        k = _recorded(c, us_pods=us_pods, us_ips=us_ips or {})
        model = build_graph(k["nodes"], k["pods"], k["services"], k["endpointslices"], cluster=c)
        graphs.append(DependencyGraph.from_model(model).to_json())
    return DependencyGraph.from_json(
        {
            "name": "two",
            "nodes": [n for g in graphs for n in g["nodes"]],
            "edges": [e for g in graphs for e in g["edges"]],
        }
    )


@pytest.fixture(scope="module")
def graph() -> DependencyGraph:
    return _two_clusters()


def _both(graph: DependencyGraph, labels: dict[str, str]) -> str | None:
    """The slow path's node, after checking that both fast paths agree with it."""
    slow = graph.node_for_alert(labels)
    assert node_for_alert(graph, labels) == slow
    (fast,) = map_alerts(graph, [{"labels": labels}])
    assert (None if fast is None else graph.nodes[fast].id) == slow
    return slow


def _ne(cluster: str | None, pod: str, ip: str) -> dict[str, str]:
    labels = {"alertname": "NodeFilesystemSpaceFillingUp", "job": "node-exporter",
              "instance": f"{ip}:9100", "container": "node-exporter", "endpoint": "http-metrics",
              "service": "kps-prometheus-node-exporter", "namespace": "monitoring", "pod": pod,
              "device": "/dev/nvme0n1p1", "fstype": "ext4", "mountpoint": "/",
              "severity": "warning", **EXT}  # fmt: skip
    return labels if cluster is None else {**labels, "cluster": cluster}


def _dcgm(cluster: str, pod: str, gpu: int) -> dict[str, str]:
    return {"alertname": "GpuXidError", "job": "nvidia-dcgm-exporter",
            "instance": "10.244.0.105:9400", "container": "nvidia-dcgm-exporter",
            "endpoint": "gpu-metrics", "service": "nvidia-dcgm-exporter",
            "namespace": "gpu-operator", "pod": pod, "gpu": str(gpu),
            "UUID": f"GPU-{cluster}-{gpu}", "device": f"nvidia{gpu}",
            "modelName": "NVIDIA A100-SXM4-80GB", "DCGM_FI_DRIVER_VERSION": "550.54.15",
            "Hostname": pod, "xid": "79", "severity": "critical", "cluster": cluster,
            **EXT}  # fmt: skip


CASES = [(c, host) for c in sorted(NE) for host in sorted(NE[c])]


@pytest.mark.parametrize(("cluster", "host"), CASES)
def test_node_exporter_alert_lands_on_its_clusters_host(
    graph: DependencyGraph, cluster: str, host: str
) -> None:
    """Both clusters' ``10.0.1.10``/``10.0.1.20``: the host of the alert's cluster (before: the
    node-exporter pod, ``node`` left as the bare address)."""
    pod, ip = NE[cluster][host]
    labels = _ne(cluster, pod, ip)
    assert graph.alert_subject(labels)["node"] == host
    assert _both(graph, labels) == f"{cluster}/host/{host}"


def test_a_dcgm_pod_name_both_clusters_hold_is_the_alerts_clusters() -> None:
    """dcgm-exporter's ``Hostname`` is its pod's name; a name both clusters hold (a cluster and
    its restored copy) is looked up in the alert's cluster: the XID lands on that cluster's GPU
    (before: on the dcgm-exporter pod)."""
    g = _two_clusters(us_pods={})
    assert _both(g, _dcgm("prod-eu", "nvidia-dcgm-exporter-9fx2k", 3)) == (
        "prod-eu/gpu/gpu-a100-0/3"
    )
    assert _both(g, _dcgm("prod-us", "nvidia-dcgm-exporter-q7w4n", 5)) == (
        "prod-us/gpu/us-gpu-a100-1/5"
    )


def test_without_cluster_only_an_address_one_host_holds_names_it() -> None:
    """An alert without ``cluster`` on a graph of several clusters: an address one host of the
    graph holds still names it, one both clusters use stays the bare address; neither maps to a
    node (the alert could be either cluster's, docs/graph.md)."""
    g = _two_clusters(us_ips={"10.0.1.20": "10.0.2.20"})
    unique = _ne(None, "kps-prometheus-node-exporter-x5j9q", "10.0.2.20")
    shared = _ne(None, "kps-prometheus-node-exporter-7hq9d", "10.0.1.10")
    assert g.alert_subject(unique)["node"] == "us-cpu-0"
    assert g.alert_subject(shared)["node"] == "10.0.1.10"
    assert _both(g, unique) is None
    assert _both(g, shared) is None
    assert _both(g, {**unique, "cluster": "prod-us"}) == "prod-us/host/us-cpu-0"
    assert _both(g, _ne("prod-eu", "kps-prometheus-node-exporter-zt5rw", "10.0.1.20")) == (
        "prod-eu/host/cpu-0"
    )


def test_an_address_of_another_cluster_names_no_host_of_this_one() -> None:
    """prod-us's ``10.0.2.20`` in an alert of prod-eu names no host of prod-eu: the bare address
    (before: ``us-cpu-0``, a host of the other cluster)."""
    g = _two_clusters(us_ips={"10.0.1.20": "10.0.2.20"})
    labels = _ne("prod-eu", "kps-prometheus-node-exporter-zzzzz", "10.0.2.20")
    assert g.alert_subject(labels)["node"] == "10.0.2.20"
