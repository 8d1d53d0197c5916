"""Probe alerts land on what they probe, not on the exporter that probed it.

The graph is ``fleetmind graph build --cluster prod-eu`` of ``tests/data/k8s/kps_cluster.json``
(kube-prometheus-stack release ``kps``, see ``tests/test_alert_mapping_kp.py``) plus the two
probers as the prometheus-community charts deploy them: ``prometheus-blackbox-exporter`` and
``prometheus-snmp-exporter`` (a Deployment and its Service in ``monitoring``). Their
``templates/servicemonitor.yaml``
(https://github.com/prometheus-community/helm-charts/blob/main/charts/prometheus-blackbox-exporter/templates/servicemonitor.yaml,
https://github.com/prometheus-community/helm-charts/blob/main/charts/prometheus-snmp-exporter/templates/servicemonitor.yaml)
scrape the exporter's Service with ``params.target`` and rewrite, in ``metricRelabelings``,
``instance`` to the probe's target (``.url``, ``.target``) and ``target`` to its ``.name``: every
probe series keeps the exporter's ``pod``/``namespace``/``service``/``container``/``endpoint``.

Loki ruler alerts carry the stream labels of the logs they count: Promtail's chart relabels
``__meta_kubernetes_pod_node_name`` to ``node_name`` (grafana/helm-charts
``charts/promtail/values.yaml``, ``config.snippets.common``), and Loki's "Configure Promtail"
journal example relabels ``__journal__hostname`` to ``host``
(https://grafana.com/docs/loki/latest/send-data/promtail/configuration/, ``journal``).

Before, every probe alert of the charts landed on the exporter's pod (a ToR switch down named the
snmp-exporter pod the root cause, 0.525), a blackbox HTTP probe's URL ``instance`` was read as the
host ``https``/``http://10.0.1.10``, and Loki alerts by ``node_name`` or ``host`` fell back to the
cluster node.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from fleetmind.data.graph import DependencyGraph, instance_address, instance_has_port
from fleetmind.data.graph_build import build_graph, slim_list_items
from fleetmind.rca.features.mapping import map_alerts
from fleetmind.serving.alertmap import node_for_alert

KPS = Path(__file__).parent / "data" / "k8s" / "kps_cluster.json"
C = "prod-eu"
BB_POD = "blackbox-prometheus-blackbox-exporter-5d9c8b7f6-k2j4x"
SNMP_POD = "snmp-prometheus-snmp-exporter-6c8d7b5f4-p9q8r"
BB = {
    "job": "blackbox-prometheus-blackbox-exporter",  # jobLabel: the release name's label
    "namespace": "monitoring",
    "pod": BB_POD,
    "service": "blackbox-prometheus-blackbox-exporter",
    "container": "blackbox-exporter",
    "endpoint": "http",
}
"""Target labels of the blackbox chart's probe series (``port: http``)."""
SNMP = {
    "job": "snmp-prometheus-snmp-exporter",
    "namespace": "monitoring",
    "pod": SNMP_POD,
    "service": "snmp-prometheus-snmp-exporter",
    "container": "snmp-exporter",
    "endpoint": "http",
}
"""Target labels of the snmp chart's series."""


def _add_exporter(k: dict[str, Any], name: str, app: str, ip: str, port: int) -> None:
    """A chart's Deployment pod (on ``cpu-0``) with its Service and EndpointSlice."""
    rs = name.rsplit("-", 1)[0]
    svc = name.split("-")[0] + "-" + app
    k["pods"]["items"].append(
        {
            "metadata": {
                "name": name,
                "namespace": "monitoring",
                "labels": {"app.kubernetes.io/name": app},
                "ownerReferences": [{"kind": "ReplicaSet", "name": rs, "controller": True}],
            },
            "spec": {"nodeName": "cpu-0", "containers": [{"name": app}]},
            "status": {"phase": "Running", "podIP": ip, "podIPs": [{"ip": ip}]},
        }
    )
    k["services"]["items"].append(
        {
            "metadata": {"name": svc, "namespace": "monitoring"},
            "spec": {"selector": {"app.kubernetes.io/name": app}, "ports": [{"port": port}]},
        }
    )
    k["endpointslices"]["items"].append(
        {
            "metadata": {
                "name": f"{svc}-x1",
                "namespace": "monitoring",
                "labels": {"kubernetes.io/service-name": svc},
            },
            "addressType": "IPv4",
            "endpoints": [
                {
                    "addresses": [ip],
                    "conditions": {"ready": True},
                    "targetRef": {"kind": "Pod", "namespace": "monitoring", "name": name},
                }
            ],
        }
    )


def _cluster() -> dict[str, Any]:
    k = json.loads(KPS.read_text())
    _add_exporter(k, BB_POD, "prometheus-blackbox-exporter", "10.244.0.130", 9115)
    _add_exporter(k, SNMP_POD, "prometheus-snmp-exporter", "10.244.0.131", 9116)
    return k


def _graph(k: dict[str, Any], tor: bool = True) -> DependencyGraph:
    """The built graph; with ``tor``, the ToR switch ``tor-1`` as docs/rca-data.md models one (a
    ``network`` node matched by ``component``, the snmp chart's ``additionalMetricsRelabels``),
    which the GPU hosts ``depends_on``."""
    model = build_graph(k["nodes"], k["pods"], k["services"], k["endpointslices"], cluster=C)
    j = DependencyGraph.from_model(model).to_json()
    if tor:
        j["nodes"].append(
            {
                "id": f"{C}/net/tor-1",
                "kind": "network",
                "cluster": C,
                "match": {"cluster": C, "component": "tor-1"},
                "attrs": {},
            }  # fmt: skip
        )
        j["edges"].append({"src": f"{C}/net/tor-1", "dst": C, "kind": "member_of"})
        for h in ("gpu-a100-0", "gpu-a100-1"):
            j["edges"].append(
                {"src": f"{C}/host/{h}", "dst": f"{C}/net/tor-1", "kind": "depends_on"}
            )
    return DependencyGraph.from_json(j)


@pytest.fixture(scope="module")
def graph() -> DependencyGraph:
    return _graph(_cluster())


def _both(graph: DependencyGraph, labels: dict[str, str]) -> str | None:
    """The slow path's node, after checking that both fast paths agree with it."""
    slow = graph.node_for_alert(labels)
    assert node_for_alert(graph, labels) == slow
    (fast,) = map_alerts(graph, [{"labels": labels}])
    assert (None if fast is None else graph.nodes[fast].id) == slow
    return slow


PROBES = [
    # blackbox ICMP of a host's InternalIP: no port
    ({**BB, "alertname": "BlackboxProbeFailed", "instance": "10.0.1.10", "target": "a0-icmp"},
     f"{C}/host/gpu-a100-0"),
    # blackbox TCP to a host's ssh port
    ({**BB, "alertname": "BlackboxProbeFailed", "instance": "10.0.1.11:22", "target": "a1-ssh"},
     f"{C}/host/gpu-a100-1"),
    # blackbox HTTP probe: instance is the URL
    ({**BB, "alertname": "BlackboxProbeHttpFailure", "instance": "https://10.0.1.10:443/healthz",
      "target": "a0-https"}, f"{C}/host/gpu-a100-0"),
    ({**BB, "alertname": "BlackboxProbeHttpFailure", "instance": "http://gpu-a100-1:8080/"},
     f"{C}/host/gpu-a100-1"),
    # an endpoint outside the graph: the cluster, as an unknown subject's alerts do
    ({**BB, "alertname": "BlackboxProbeFailed", "instance": "https://api.example.com",
      "target": "api"}, C),
    # SNMP interface down on the ToR, relabelled component=tor-1
    ({**SNMP, "alertname": "SwitchInterfaceDown", "instance": "10.0.1.254", "target": "tor-1",
      "component": "tor-1", "ifName": "Ethernet1/3"}, f"{C}/net/tor-1"),
    # ... an SNMP agent with a port and the chart's target label, without component
    ({**SNMP, "alertname": "SwitchInterfaceDown", "instance": "10.0.1.253:161", "target": "tor-2",
      "ifName": "Ethernet1/3"}, C),
]  # fmt: skip


@pytest.mark.parametrize(("labels", "node"), PROBES)
def test_a_probe_alert_lands_on_its_target(
    graph: DependencyGraph, labels: dict[str, str], node: str
) -> None:
    assert _both(graph, labels) == node


OWN = [
    # the prober's own series (selfMonitor, TargetDown-like): instance is its pod IP and port
    ({**BB, "alertname": "BlackboxExporterConfigReloadFailure", "instance": "10.244.0.130:9115"},
     f"{C}/pod/monitoring/{BB_POD}"),
    # instance relabelled to the pod's name
    ({**SNMP, "alertname": "SnmpExporterDown", "instance": SNMP_POD}, f"{C}/pod/monitoring/{SNMP_POD}"),
    # a StatefulSet pod recreated with a new IP under its old name: its own scrape, not a probe
    ({"alertname": "TrainingStalled", "job": "llama-train", "namespace": "ml", "pod": "llama-train-0",
      "service": "llama-train", "container": "trainer", "endpoint": "metrics",
      "instance": "10.244.0.217:8000"}, f"{C}/pod/ml/llama-train-0"),
    # a hostNetwork static pod: instance is its host's address, which is its own
    ({"alertname": "etcdNoLeader", "job": "kube-etcd", "namespace": "kube-system", "pod": "etcd-cp-0",
      "service": "kps-kube-etcd", "endpoint": "http-metrics", "instance": "10.0.1.5:2381"},
     f"{C}/pod/kube-system/etcd-cp-0"),
    # ... with instance relabelled to its node's name (docs/graph.md: stays on the etcd pod)
    ({"alertname": "etcdNoLeader", "job": "kube-etcd", "namespace": "kube-system", "pod": "etcd-cp-0",
      "service": "kps-kube-etcd", "endpoint": "http-metrics", "instance": "cp-0"},
     f"{C}/pod/kube-system/etcd-cp-0"),
]  # fmt: skip

RANKER = {"job": "ranker", "namespace": "ml", "pod": "ranker-7f9c6d5b4-abcde", "service": "ranker",
          "container": "ranker", "endpoint": "metrics", "alertname": "RankerSlow"}  # fmt: skip
"""An app pod's own series, scraped through its Service's ServiceMonitor."""

APP_OWN = [
    # instance relabelled to a fixed name without a port
    {**RANKER, "instance": "ranker"},
    # instance relabelled from __meta_kubernetes_pod_node_name: its node's name
    {**RANKER, "instance": "gpu-a100-0"},
    # Telegraf's host label is os.Hostname(): the pod's own name
    {**RANKER, "instance": "10.244.0.115:8080", "host": "ranker-7f9c6d5b4-abcde"},
    # a node_name label on the pod's series (Promtail-style relabelling)
    {**RANKER, "instance": "10.244.0.115:8080", "node_name": "gpu-a100-0"},
    {**RANKER, "instance": "10.244.0.115:8080", "host": "gpu-a100-0"},
    # the app's own scrape with a target label of its own: instance is its pod IP
    {**RANKER, "instance": "10.244.0.115:8080", "target": "ranker"},
]  # fmt: skip


@pytest.mark.parametrize("labels", APP_OWN)
def test_an_app_pods_own_alert_is_no_probe(graph: DependencyGraph, labels: dict[str, str]) -> None:
    """Neither a port-less or host-named ``instance`` nor a ``host``/``node_name`` label moves an
    app pod's alert to its host or to the cluster: only a URL ``instance`` or a ``target`` label
    shows a probe."""
    assert _both(graph, labels) == f"{C}/pod/ml/ranker-7f9c6d5b4-abcde"


def test_a_recreated_statefulset_pod_keeps_its_portless_alert(graph: DependencyGraph) -> None:
    """A StatefulSet pod back under its old name with a new IP, ``instance`` without a port."""
    labels = {"alertname": "PrometheusBad", "job": "kps-prometheus", "namespace": "monitoring",
              "pod": "prometheus-kps-prometheus-0", "service": "kps-prometheus",
              "container": "prometheus", "endpoint": "http-web", "instance": "10.244.0.201"}  # fmt: skip
    assert _both(graph, labels) == f"{C}/pod/monitoring/prometheus-kps-prometheus-0"


ROLLED_BB = {**BB, "pod": "blackbox-prometheus-blackbox-exporter-5d9c8b7f6-zzzzz"}
ROLLED_SNMP = {**SNMP, "pod": "snmp-prometheus-snmp-exporter-6c8d7b5f4-zzzzz"}
"""The probers' target labels after a rollout: a pod the graph does not hold yet."""


@pytest.mark.parametrize(
    ("labels", "node"),
    [
        ({**ROLLED_BB, "alertname": "BlackboxProbeFailed", "instance": "10.0.1.10", "target": "a0"},
         f"{C}/host/gpu-a100-0"),
        ({**ROLLED_BB, "alertname": "BlackboxProbeHttpFailure", "instance": "https://10.0.1.10/",
          "target": "a0"}, f"{C}/host/gpu-a100-0"),
        ({**ROLLED_SNMP, "alertname": "SwitchInterfaceDown", "instance": "10.0.1.254",
          "target": "tor-1", "component": "tor-1"}, f"{C}/net/tor-1"),
        # the new prober pod's own alert (no probe shown) keeps its Service
        ({**ROLLED_BB, "alertname": "BlackboxExporterDown", "instance": "10.244.0.140:9115"},
         f"{C}/svc/monitoring/blackbox-prometheus-blackbox-exporter"),
    ],
)  # fmt: skip
def test_a_rolled_out_probers_probe_lands_on_its_target(
    graph: DependencyGraph, labels: dict[str, str], node: str
) -> None:
    assert _both(graph, labels) == node


@pytest.mark.parametrize(("labels", "node"), OWN)
def test_a_pods_own_alert_stays_on_it(
    graph: DependencyGraph, labels: dict[str, str], node: str
) -> None:
    assert _both(graph, labels) == node


def test_graph_build_records_pod_addresses_also_from_slimmed_lists() -> None:
    k = _cluster()
    bb = next(p for p in k["pods"]["items"] if p["metadata"]["name"] == BB_POD)
    bb["status"].update(podIP="10.244.0.130", podIPs=[{"ip": "10.244.0.130"}, {"ip": "fd00::82"}])
    slim = {what: {"items": slim_list_items(what, k[what]["items"])} for what in k}
    for doc in (k, slim):
        g = _graph(doc, tor=False)
        assert g.node(f"{C}/pod/monitoring/{BB_POD}").attrs["addresses"] == [
            "10.244.0.130",
            "fd00::82",
        ]
        # only status.podIP recorded (the test cluster's pods): that one
        assert g.node(f"{C}/pod/ml/llama-train-0").attrs["addresses"] == ["10.244.0.117"]
        assert g.node(f"{C}/pod/kube-system/etcd-cp-0").attrs["addresses"] == ["10.0.1.5"]


def test_a_graph_without_pod_addresses_knows_a_prober_by_a_url_only() -> None:
    """A graph built before pods recorded ``addresses``: an ICMP probe keeps landing on the
    prober (its own scrape cannot be told apart), an HTTP probe's URL lands on the target."""
    j = _graph(_cluster()).to_json()
    for n in j["nodes"]:
        if n["kind"] == "pod":
            n["attrs"].pop("addresses", None)
    old = DependencyGraph.from_json(j)
    icmp = {**BB, "alertname": "BlackboxProbeFailed", "instance": "10.0.1.10", "target": "a0"}
    http = {**BB, "alertname": "BlackboxProbeHttpFailure", "instance": "https://10.0.1.10/"}
    assert _both(old, icmp) == f"{C}/pod/monitoring/{BB_POD}"
    assert _both(old, http) == f"{C}/host/gpu-a100-0"
    own = {**BB, "alertname": "BlackboxExporterDown", "instance": "10.244.0.130:9115"}
    assert _both(old, own) == f"{C}/pod/monitoring/{BB_POD}"


@pytest.mark.parametrize(("snmp", "bb"), [(SNMP, BB), (ROLLED_SNMP, ROLLED_BB)])
def test_a_tor_switch_down_ranks_the_switch_not_the_snmp_exporter(
    graph: DependencyGraph, snmp: dict[str, str], bb: dict[str, str]
) -> None:
    """The first minutes of a ToR failure (before ``KubeNodeNotReady``'s ``for: 15m``): SNMP
    interface-down alerts and blackbox ICMP failures of the two hosts, chart-labelled (each with
    its ``target``), from the probers in the graph and from probers rolled out since."""
    from fleetmind.rca.gat_analyzer import GATAnalyzer
    from fleetmind.rca.incident_graph import incident_graph

    alerts: list[dict[str, Any]] = []
    for s, labels in enumerate(
        [
            {**snmp, "alertname": "SwitchInterfaceDown", "instance": "10.0.1.254",
             "target": "tor-1", "component": "tor-1", "ifName": "Ethernet1/3"},
            {**snmp, "alertname": "SwitchInterfaceDown", "instance": "10.0.1.254",
             "target": "tor-1", "component": "tor-1", "ifName": "Ethernet1/4"},
            {**bb, "alertname": "BlackboxProbeFailed", "instance": "10.0.1.10", "target": "a0"},
            {**bb, "alertname": "BlackboxProbeFailed", "instance": "10.0.1.11", "target": "a1"},
        ]
    ):  # fmt: skip
        alerts.append(
            {
                "status": "firing",
                "labels": {"severity": "critical", **labels},
                "annotations": {},
                "startsAt": f"2026-12-01T09:00:{s:02d}Z",
                "endsAt": "0001-01-01T00:00:00Z",
                "fingerprint": f"{s:016x}",
            }  # fmt: skip
        )
    g, a = incident_graph(graph, copy.deepcopy(alerts))
    causes = GATAnalyzer.load(None).find_root_causes(g, a, top_k=3).causes
    assert causes[0].node == f"{C}/net/tor-1"
    assert not any("exporter" in c.node for c in causes)


@pytest.mark.parametrize(
    ("instance", "address", "port"),
    [
        ("https://10.0.1.10:443/", "10.0.1.10", False),
        ("http://10.0.1.10:8080/healthz", "10.0.1.10", False),
        ("https://gpu-a100-0/", "gpu-a100-0", False),
        ("tcp://10.0.1.10:22", "10.0.1.10", False),
        ("https://[FD00:10:0::5]:8443/x", "fd00:10::5", False),
        ("http://[fd00::5", "http://[fd00::5", False),  # no URL: left as it is
        ("10.0.1.10:9100", "10.0.1.10", True),
        ("[fd00::5]:9100", "fd00::5", True),
        ("fd00::5", "fd00::5", False),
        ("10.0.1.254", "10.0.1.254", False),
        ("gpu-0:9100", "gpu-0", True),
        ("gpu-0", "gpu-0", False),
    ],
)
def test_instance_address_of_a_url_is_its_host(instance: str, address: str, port: bool) -> None:
    assert instance_address(instance) == address
    assert instance_has_port(instance) is port


@pytest.mark.parametrize(
    ("labels", "node"),
    [
        # Promtail chart stream labels, a Loki ruler rule `sum by (node_name) (...)`
        ({"alertname": "GpuXidInKernelLog", "node_name": "gpu-a100-0"}, f"{C}/host/gpu-a100-0"),
        # journal scrape: __journal__hostname -> host
        ({"alertname": "GpuXidInKernelLog", "job": "systemd-journal", "host": "gpu-a100-1"},
         f"{C}/host/gpu-a100-1"),
        # a host name no host of the graph has: the cluster, not a host of that name
        ({"alertname": "GpuXidInKernelLog", "host": "api.example.com"}, C),
        # a pod's stream keeps landing on the pod
        ({"alertname": "HighErrorLogs", "namespace": "ml", "pod": "ranker-7f9c6d5b4-abcde",
          "container": "ranker", "job": "ml/ranker", "node_name": "gpu-a100-0"},
         f"{C}/pod/ml/ranker-7f9c6d5b4-abcde"),
    ],
)  # fmt: skip
def test_loki_node_labels_name_the_host(
    graph: DependencyGraph, labels: dict[str, str], node: str
) -> None:
    assert _both(graph, labels) == node
