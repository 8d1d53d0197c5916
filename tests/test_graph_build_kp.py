"""``fleetmind graph build`` keeps what maps kube-prometheus-stack's alerts to hosts.

* A Node's ``status.addresses`` (``InternalIP``, ``Hostname``) become its host's attr
  ``addresses``: node-exporter's ServiceMonitor (prometheus-community/helm-charts
  ``charts/prometheus-node-exporter/templates/servicemonitor.yaml``, no ``relabelings`` by
  default) scrapes the exporter on ``hostNetwork``, so ``instance`` is ``<InternalIP>:9100``.
* The Prometheus Operator's kubelet Service (``kps-kubelet`` in ``kube-system``, kube-prometheus-
  stack's ``prometheusOperator.kubeletService``) has no selector; its EndpointSlice endpoints are
  the Nodes (``targetRef.kind: Node``). They become ``runs_on`` edges from the Service to each
  host, so ``TargetDown{service="kps-kubelet"}`` (kube-prometheus
  ``manifests/kubePrometheus-prometheusRule.yaml``) joins a down host's storm; before, the Service
  hung off the cluster alone.

The cluster is ``tests/data/k8s/kps_cluster.json`` (see ``tests/test_alert_mapping_kp.py``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from fleetmind.data.graph_build import build_graph

DATA = Path(__file__).parent / "data" / "k8s"
C = "prod-eu"
KUBELET = f"{C}/svc/kube-system/kps-kubelet"


def _cluster() -> dict[str, Any]:
    return json.loads((DATA / "kps_cluster.json").read_text())


def _build(k: dict[str, Any]) -> dict[str, Any]:
    return build_graph(
        k["nodes"], k["pods"], k["services"], k["endpointslices"], cluster=C
    ).model_dump()


def _kubelet_slice(k: dict[str, Any]) -> dict[str, Any]:
    return next(
        s for s in k["endpointslices"]["items"] if s["metadata"]["name"] == "kps-kubelet-abc"
    )


def test_a_nodes_addresses_are_kept_on_its_host() -> None:
    nodes = {n["id"]: n for n in _build(_cluster())["nodes"]}
    assert nodes[f"{C}/host/gpu-a100-0"]["attrs"]["addresses"] == ["10.0.1.10"]
    assert nodes[f"{C}/host/cp-0"]["attrs"]["addresses"] == ["10.0.1.5"]  # Hostname = its name


def test_node_endpoints_of_the_kubelet_service_run_on_their_hosts() -> None:
    edges = {(e["src"], e["dst"], e["kind"]) for e in _build(_cluster())["edges"]}
    hosts = ("cp-0", "gpu-a100-0", "gpu-a100-1", "cpu-0")
    assert {(KUBELET, f"{C}/host/{h}", "runs_on") for h in hosts} <= edges


def test_a_not_ready_or_unknown_node_endpoint_is_left_out() -> None:
    k = _cluster()
    endpoints = _kubelet_slice(k)["endpoints"]
    endpoints[1]["conditions"]["ready"] = False  # gpu-a100-0
    endpoints[2]["targetRef"]["name"] = "gone-node"  # gpu-a100-1 renamed: no such Node
    out = {e["dst"] for e in _build(k)["edges"] if e["src"] == KUBELET and e["kind"] == "runs_on"}
    assert out == {f"{C}/host/cp-0", f"{C}/host/cpu-0"}
