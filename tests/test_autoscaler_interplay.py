"""FleetMind beside Cluster Autoscaler and Karpenter (docs/serving/cluster.md, "Cluster Autoscaler
and Karpenter").

- A node an autoscaler removes is tainted, not cordoned: Cluster Autoscaler's
  ``ToBeDeletedByClusterAutoscaler:NoSchedule`` (cluster-autoscaler utils/taints/taints.go;
  ``--cordon-node-before-terminating`` defaults to false, its FAQ), Karpenter's
  ``karpenter.sh/disrupted:NoSchedule`` (karpenter pkg/apis/v1/taints.go, applied by
  pkg/controllers/disruption/queue.go). kube-state-metrics exports every taint as
  ``kube_node_spec_taint{node, key, value, effect} 1`` (docs/metrics/cluster/node-metrics.md,
  https://github.com/kubernetes/kube-state-metrics). Such a node is no spare: placements leave it
  out and cluster health does not count it.
- A node that just joined is in kube-state-metrics (its ``nvidia.com/gpu``) before its
  dcgm-exporter is scraped: every GPU a placeholder. The extender judges it as a node telemetry
  does not know (a 503 kube-scheduler skips with ``ignorable: true`` when no other candidate is
  judged), not as a final refusal; a node reporting some GPUs is still refused for the others.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from fastapi.testclient import TestClient
from serving_helpers import serving_settings
from test_fleet_health_k8s import dcgm, ksm_node, ksm_status

from fleetmind.serving.app import create_app
from fleetmind.serving.health import HealthModel, fleet_health
from fleetmind.serving.telemetry.base import FleetSnapshot, NodeState
from fleetmind.serving.telemetry.prometheus import (
    FLEET_QUERIES,
    KSM_FLEET_QUERY,
    Sample,
    build_nodes,
    fleet_queries,
)
from fleetmind.serving.telemetry.sim import SimSource

os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")

TOKEN = "autoscaler-interplay-token-0123456789"
FILTER = "/api/v1/scheduler/filter"
CA_KEY, KARPENTER_KEY = "ToBeDeletedByClusterAutoscaler", "karpenter.sh/disrupted"


def taint(node: str, key: str, effect: str = "NoSchedule", value: str = "") -> Sample:
    """kube-state-metrics' raw ``kube_node_spec_taint`` series of one taint (value 1)."""
    labels = {"node": node, "key": key, "value": value, "effect": effect}
    return ("kube_node_spec_taint", labels, 1.0)


def busy(node: str, gpus: int = 8) -> list[Sample]:
    """dcgm-exporter samples of ``gpus`` GPUs of ``node``, each held by a workload pod."""
    out: list[Sample] = []
    for g in range(gpus):
        lab = {"gpu": str(g), "UUID": f"GPU-{node}-{g}", "modelName": "NVIDIA H100 80GB HBM3",
               "Hostname": node, "pod": f"w{g}", "namespace": "ml"}  # fmt: skip
        out += [("DCGM_FI_DEV_FB_USED", lab, 70000.0), ("DCGM_FI_DEV_FB_FREE", lab, 11559.0),
                ("DCGM_FI_DEV_GPU_UTIL", lab, 95.0)]  # fmt: skip
    return out


def ksm(*names: str) -> list[Sample]:
    """kube-state-metrics' series of Ready, uncordoned 8-GPU nodes."""
    return [s for n in names for s in (*ksm_node(n, 8.0, 8.0), *ksm_status(n, False, "true"))]


def drained_fleet() -> list[NodeState]:
    """busy-1 full; ca-1 and kp-1 idle and being removed by Cluster Autoscaler / Karpenter."""
    series = [*ksm("busy-1", "ca-1", "kp-1"), taint("ca-1", CA_KEY), taint("kp-1", KARPENTER_KEY)]
    # every GPU node of the GPU Operator carries nvidia.com/gpu:NoSchedule: not a removal
    series.append(taint("busy-1", "nvidia.com/gpu"))
    return build_nodes(busy("busy-1") + dcgm("ca-1", 8) + dcgm("kp-1", 8), series)


@pytest.fixture
def client(tmp_path: Path) -> Iterator[TestClient]:
    with TestClient(create_app(serving_settings(tmp_path, api_token=TOKEN))) as c:
        c.headers["Authorization"] = f"Bearer {TOKEN}"
        yield c


def _pod(gpus: int = 8) -> dict[str, object]:
    limits = {"nvidia.com/gpu": str(gpus)}
    return {"metadata": {"name": "train", "namespace": "ml", "uid": "u1"},
            "spec": {"containers": [{"name": "m", "resources": {"limits": limits}}]}}  # fmt: skip


# ------------------------------------------------------------------ nodes being removed
def test_autoscaler_taints_make_a_node_unschedulable() -> None:
    nodes = {n.name: n for n in drained_fleet()}
    assert nodes["busy-1"].schedulable and nodes["busy-1"].draining == ""
    assert (nodes["ca-1"].draining, nodes["kp-1"].draining) == (CA_KEY, KARPENTER_KEY)
    assert not nodes["ca-1"].schedulable and not nodes["ca-1"].cordoned
    assert nodes["kp-1"].unschedulable_reason == f"being removed ({KARPENTER_KEY})"


@pytest.mark.parametrize(
    ("key", "effect", "removed"),
    [
        (CA_KEY, "NoExecute", True),
        ("karpenter.sh/disruption", "NoSchedule", True),  # Karpenter before v1 (value disrupting)
        # Cluster Autoscaler's soft mark of a candidate: new pods may still go there
        ("DeletionCandidateOfClusterAutoscaler", "PreferNoSchedule", False),
        (CA_KEY, "PreferNoSchedule", False),
        ("nvidia.com/gpu", "NoSchedule", False),
    ],
)
def test_only_removal_taints_that_keep_pods_off_count(key: str, effect: str, removed: bool) -> None:
    (n,) = build_nodes(dcgm("n1", 8), [*ksm("n1"), taint("n1", key, effect)])
    assert n.schedulable is not removed


def test_the_fleet_query_answer_marks_the_node_too() -> None:
    """The server mode's ``node_draining`` answer (already filtered by PromQL) reads the same."""
    answer = ("node_draining", {"cluster": "east", "node": "n1", "key": CA_KEY}, 1.0)
    (n,) = build_nodes(dcgm("n1", 8), [*ksm("n1"), answer], default_cluster="east")
    assert n.draining == CA_KEY and not n.schedulable
    assert "kube_node_spec_taint" in FLEET_QUERIES["node_draining"]
    assert 'fleetmind_query", "node_draining"' in KSM_FLEET_QUERY


def test_placements_neither_recommend_nor_reserve_a_node_being_removed(client: TestClient) -> None:
    """Before: ca-1 then kp-1 were recommended and reserved (200, 200)."""
    client.app.state.services.telemetry = SimSource(drained_fleet())
    for job in ("j1", "j2"):
        body = {"job_id": job, "num_gpu": 8, "gpu_milli": 1000, "reserve": True}
        r = client.post("/api/v1/placements", json=body)
        assert r.status_code == 409, r.text
        assert f"ca-1 (being removed ({CA_KEY}))" in r.json()["detail"]


def test_cluster_health_does_not_count_a_node_being_removed_as_spare() -> None:
    """They count as cordoned nodes do. Before: the two idle nodes being removed lifted the
    cluster's health from 0.09 to 0.70."""
    series = [*ksm("busy-1"), *ksm_node("ca-1", 8.0, 8.0), *ksm_status("ca-1", True, "true"),
              *ksm_node("kp-1", 8.0, 8.0), *ksm_status("kp-1", True, "true")]  # fmt: skip
    cordoned = build_nodes(busy("busy-1") + dcgm("ca-1", 8) + dcgm("kp-1", 8), series)
    with_drained = fleet_health(HealthModel(), FleetSnapshot(source="p", nodes=drained_fleet()))
    alone = fleet_health(HealthModel(), FleetSnapshot(source="p", nodes=cordoned))
    assert with_drained.clusters[0].health == pytest.approx(alone.clusters[0].health)
    assert with_drained.clusters[0].health < 0.2


@pytest.mark.skipif(shutil.which("promtool") is None, reason="needs promtool")
def test_promtool_answers_the_taint_query_with_removal_taints_only(tmp_path: Path) -> None:
    """The ``node_draining`` PromQL on kube-state-metrics' raw series (a scrape with
    ``honor_labels: false``, ``exported_node`` the node's name, as on the chart's default)."""
    target = 'job="kube-state-metrics",instance="ksm:8080",node="ksm-node"'
    series = [
        {"series": f'kube_node_spec_taint{{{target},exported_node="{n}",key="{k}",value="",'
                   f'effect="{e}"}}', "values": "1x3"}
        for n, k, e in [("ca-1", CA_KEY, "NoSchedule"), ("kp-1", KARPENTER_KEY, "NoSchedule"),
                        ("gpu-1", "nvidia.com/gpu", "NoSchedule"),
                        ("cand-1", "DeletionCandidateOfClusterAutoscaler", "PreferNoSchedule"),
                        ("kpX", "karpenterXsh/disrupted", "NoSchedule")]
    ]  # fmt: skip
    expected = [{"labels": f'{{key="{k}",node="{n}"}}', "value": 1}
                for n, k in [("ca-1", CA_KEY), ("kp-1", KARPENTER_KEY)]]  # fmt: skip
    test = {"tests": [{"interval": "1m", "input_series": series, "promql_expr_test": [
        {"expr": fleet_queries(0)["node_draining"], "eval_time": "2m", "exp_samples": expected}
    ]}]}  # fmt: skip
    (tmp_path / "t.yml").write_text(yaml.safe_dump(test))
    done = subprocess.run(["promtool", "test", "rules", "t.yml"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=60)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr


# ------------------------------------------------------------ a node that just joined
def test_a_new_node_without_dcgm_series_gets_the_skippable_503(client: TestClient) -> None:
    """old-1 reported; ca-new-1 in kube-state-metrics, dcgm-exporter not yet scraped. Before: a
    200 with ca-new-1 in FailedAndUnresolvableNodes ("some with no DCGM reading"), which
    ``ignorable: true`` does not skip, though a scrape earlier (node not listed) got a 503."""
    nodes = build_nodes(dcgm("old-1", 8), ksm("old-1", "ca-new-1"))
    client.app.state.services.telemetry = SimSource(nodes)
    r = client.post(FILTER, json={"Pod": _pod(), "NodeNames": ["ca-new-1"]})
    assert r.status_code == 503, r.text
    detail = r.json()["detail"]
    assert "'ca-new-1'" in detail and "just joined" in detail and "dcgm-exporter" in detail
    assert "ignorable: true" in detail


def test_a_new_node_beside_judged_ones_fails_as_an_unknown_node(client: TestClient) -> None:
    nodes = build_nodes(dcgm("old-1", 8), ksm("old-1", "ca-new-1"))
    client.app.state.services.telemetry = SimSource(nodes)
    r = client.post(FILTER, json={"Pod": _pod(), "NodeNames": ["old-1", "ca-new-1"]})
    assert r.status_code == 200
    answer = r.json()
    assert answer["NodeNames"] == ["old-1"]
    unknown = "FleetMind: no GPU telemetry for this node"
    assert answer["FailedAndUnresolvableNodes"] == {"ca-new-1": unknown}


def test_a_node_reporting_some_gpus_is_still_refused_for_the_others(client: TestClient) -> None:
    """Four GPUs reported, the kubelet counts eight: the final refusal stays."""
    nodes = build_nodes(dcgm("half-1", 4), ksm("half-1"))
    client.app.state.services.telemetry = SimSource(nodes)
    r = client.post(FILTER, json={"Pod": _pod(), "NodeNames": ["half-1"]})
    assert r.status_code == 200
    reason = r.json()["FailedAndUnresolvableNodes"]["half-1"]
    assert "no DCGM reading" in reason


def test_a_new_node_is_left_alone_for_cpu_only_pods(client: TestClient) -> None:
    nodes = build_nodes(dcgm("old-1", 8), ksm("old-1", "ca-new-1"))
    client.app.state.services.telemetry = SimSource(nodes)
    pod = {"metadata": {"name": "web", "namespace": "ml", "uid": "u2"},
           "spec": {"containers": [{"name": "m", "resources": {"requests": {"cpu": "1"}}}]}}  # fmt: skip
    r = client.post(FILTER, json={"Pod": pod, "NodeNames": ["ca-new-1"]})
    assert r.status_code == 200 and r.json()["NodeNames"] == ["ca-new-1"]


def test_the_refusal_alert_is_documented_with_a_runbook() -> None:
    """FleetMindFilterRefusingAll reads the labels the placement counter has, says what to do
    and links the own-alerts section (its promtool tests: deploy/fleetmind-rules.test.yml)."""
    rules_file = Path(__file__).resolve().parents[1] / "deploy" / "fleetmind-rules.yml"
    groups = yaml.safe_load(rules_file.read_text())["groups"]
    (rule,) = [
        r for g in groups for r in g["rules"] if r.get("alert") == "FleetMindFilterRefusingAll"
    ]
    assert 'path="filter",result="infeasible"' in rule["expr"]
    # GPU placements only (CPU-only and passed-through pods have their own result values), summed
    # over a deployment's replicas (kube-scheduler's calls are load-balanced between them)
    assert 'path="filter",result="placed"' in rule["expr"]
    assert "by (instance)" not in rule["expr"] and "on (namespace, job)" in rule["expr"]
    assert rule["annotations"]["runbook_url"] == "docs/deploy.md#fleetminds-own-alerts"
    assert "nodeSelector" in rule["annotations"]["description"]


def test_health_leaves_out_a_just_joined_node_without_readings() -> None:
    """An idle 8-GPU node in kube-state-metrics whose dcgm-exporter is not yet scraped (every GPU
    a placeholder, :attr:`NodeState.unscraped`) is not judged: before, its placeholders counted
    as unhealthy GPUs and the cluster's health fell from 1.0 to 0.733."""
    before = build_nodes(dcgm("old-1", 8), ksm("old-1"))
    after = build_nodes(dcgm("old-1", 8), ksm("old-1", "ca-new-1"))
    new = {n.name: n for n in after}["ca-new-1"]
    assert new.unscraped and not {n.name: n for n in after}["old-1"].unscraped
    for nodes in (before, after):
        health = fleet_health(HealthModel(), FleetSnapshot(source="p", nodes=nodes))
        assert health.clusters[0].health == pytest.approx(1.0)
    # a node reporting some of its GPUs is judged: its placeholders count as unhealthy
    (half,) = build_nodes(dcgm("half-1", 4), ksm("half-1"))
    assert not half.unscraped
    health = fleet_health(HealthModel(), FleetSnapshot(source="p", nodes=[half]))
    assert health.clusters[0].health < 0.9


def test_the_fleet_api_names_the_removal_taint(client: TestClient) -> None:
    """GET /api/v1/fleet: ``schedulable`` false for a node being removed, and ``draining`` says
    why (neither cordoned nor not Ready explains it)."""
    client.app.state.services.telemetry = SimSource(drained_fleet())
    nodes = {n["name"]: n for n in client.get("/api/v1/fleet").json()["nodes"]}
    assert (nodes["ca-1"]["draining"], nodes["kp-1"]["draining"]) == (CA_KEY, KARPENTER_KEY)
    assert not nodes["ca-1"]["schedulable"] and not nodes["ca-1"]["cordoned"]
    assert nodes["busy-1"]["draining"] == "" and nodes["busy-1"]["schedulable"]


def test_a_node_paused_for_a_mig_change_is_refused_as_such(client: TestClient) -> None:
    """The GPU Operator's MIG manager sets ``nvidia.com/gpu.deploy.device-plugin`` to
    ``paused-for-mig-change`` and stops dcgm-exporter (NVIDIA/mig-parted,
    deployments/gpu-operator/reconfigure-mig.sh): the node has no GPU then. Before, the reason
    was "node has fewer GPUs than the pod's 1"."""
    paused = ("node_gpu_replicas", {"node": "mig-0",
              "label_nvidia_com_gpu_deploy_device_plugin": "paused-for-mig-change"}, 1.0)  # fmt: skip
    nodes = build_nodes(dcgm("old-1", 8), [*ksm("old-1", "mig-0"), paused])
    client.app.state.services.telemetry = SimSource(nodes)
    r = client.post(FILTER, json={"Pod": _pod(1), "NodeNames": ["old-1", "mig-0"]})
    assert r.status_code == 200, r.text
    reason = r.json()["FailedAndUnresolvableNodes"]["mig-0"]
    assert "paused for a MIG change" in reason and "fewer GPUs" not in reason


def test_the_doctor_asks_for_the_device_plugin_label() -> None:
    """Without ``nvidia.com/gpu.deploy.device-plugin`` in kube-state-metrics' allowlist a node
    paused for a MIG change cannot be told from one whose exporter is down."""
    from fleetmind.serving.telemetry.doctor import _missing_gpus

    snap = FleetSnapshot(source="p", nodes=build_nodes(dcgm("half-1", 4), ksm("half-1")))
    (finding,) = _missing_gpus(snap)
    assert "nvidia.com/gpu.deploy.device-plugin" in finding.message


def _results(client: TestClient) -> dict[str, float]:
    """``fleetmind_placements_total{path="filter"}`` by ``result`` from /metrics."""
    from prometheus_client.parser import text_string_to_metric_families

    return {
        s.labels["result"]: s.value
        for f in text_string_to_metric_families(client.get("/metrics").text)
        for s in f.samples
        if s.name == "fleetmind_placements_total" and s.labels["path"] == "filter"
    }


def test_the_filter_counts_gpu_placements_apart(client: TestClient) -> None:
    """``result="placed"`` counts GPU pods only, so pods asking no GPU (``cpu_only``) or devices
    FleetMind leaves to kube-scheduler (``passthrough``, a DRA claim) do not silence
    FleetMindFilterRefusingAll while every GPU pod is refused. Before, all three were "placed"."""
    client.app.state.services.telemetry = SimSource(build_nodes(dcgm("old-1", 8), ksm("old-1")))
    cpu = {"metadata": {"name": "web", "namespace": "ml", "uid": "u2"},
           "spec": {"containers": [{"name": "m", "resources": {"requests": {"cpu": "1"}}}]}}  # fmt: skip
    dra = {"metadata": {"name": "dra", "namespace": "ml", "uid": "u3"},
           "spec": {"containers": [{"name": "m"}],
                    "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "one"}]}}  # fmt: skip
    bodies = [cpu, dra, _pod(1), _pod(9)]
    before = _results(client)
    for body in bodies:
        r = client.post(FILTER, json={"Pod": body, "NodeNames": ["old-1"]})
        assert r.status_code == 200, r.text
    after = _results(client)
    delta = {k: after[k] - before.get(k, 0.0) for k in after if after[k] != before.get(k, 0.0)}
    assert delta == {"cpu_only": 1.0, "passthrough": 1.0, "placed": 1.0, "infeasible": 1.0}


@pytest.mark.skipif(shutil.which("promtool") is None, reason="needs promtool")
def test_the_refusal_alert_passes_its_promtool_tests() -> None:
    """deploy/fleetmind-rules.test.yml: refusing from the start fires after 20 minutes, the last
    GPU placement at 21m fires 30 minutes later, CPU-only placements do not silence it, and one
    refusing replica beside a placing one stays silent."""
    deploy = Path(__file__).resolve().parents[1] / "deploy"
    done = subprocess.run(["promtool", "test", "rules", "fleetmind-rules.test.yml"], cwd=deploy,
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
