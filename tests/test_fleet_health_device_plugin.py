"""GPUs of a node whose NVIDIA device plugin is not serving, as telemetry reads them and placements
use them.

Upstream behaviour the fixtures follow (kubernetes/kubernetes):

* When the device plugin's endpoint stops (its DaemonSet pod restarting or crash-looping, or the
  GPU Operator's k8s-driver-manager pausing it with the node label
  ``nvidia.com/gpu.deploy.device-plugin=paused-for-driver-upgrade``), the kubelet's device manager
  marks every device of the resource unhealthy (``runEndpoint`` -> ``markResourceUnhealthy`` in
  ``pkg/kubelet/cm/devicemanager/manager.go``): ``GetCapacity`` then counts them in capacity only,
  so the node reports ``nvidia.com/gpu`` capacity N, allocatable 0.
* Once the endpoint's grace period (``endpointStopGracePeriod``, 5 minutes) ends, ``GetCapacity``
  returns the resource as deleted and ``MachineInfo`` in ``pkg/kubelet/nodestatus/setters.go``
  sets its capacity to 0 ("instead of removing the resource from the node status"), allocatable
  following: both 0, the series still exported by kube-state-metrics.
* dcgm-exporter keeps exporting the GPUs all the while: it reads NVML, not the device plugin.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from serving_helpers import serving_settings
from test_fleet_health_k8s import _mig, dcgm, ksm_node, ksm_status, states

from fleetmind.serving.app import create_app
from fleetmind.serving.telemetry.base import FleetSnapshot
from fleetmind.serving.telemetry.prometheus import build_nodes
from fleetmind.serving.telemetry.sim import SimSource

os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")

TOKEN = "device-plugin-token-0123456789"


@pytest.mark.parametrize(
    "capacity, allocatable",
    [(8.0, 0.0), (0.0, 0.0)],
    ids=["endpoint-stopped", "grace-period-over"],
)
def test_every_whole_gpu_is_out_while_the_device_plugin_serves_none(
    capacity: float, allocatable: float
) -> None:
    (n,) = build_nodes(dcgm("n1", 8), ksm_node("n1", capacity, allocatable))
    assert states(n) == [(i, False, 0, True) for i in range(8)]
    assert [g.missing for g in n.gpus] == [False] * 8  # reported by DCGM, not placeholders


def test_time_sliced_gpus_are_out_too() -> None:
    """4 replicas per GPU, 2 GPUs: 8 devices in capacity, none allocatable."""
    labels = {"node": "ts", "label_nvidia_com_gpu_replicas": "4"}
    (n,) = build_nodes(
        dcgm("ts", 2), [*ksm_node("ts", 8.0, 0.0), ("node_gpu_replicas", labels, 1.0)]
    )
    assert states(n) == [(0, False, 0, True), (1, False, 0, True)]


def test_the_gpus_come_back_when_the_plugin_serves_again() -> None:
    (n,) = build_nodes(dcgm("n1", 8), ksm_node("n1", 8.0, 8.0))
    assert states(n) == [(i, True, 1000, False) for i in range(8)]


@pytest.mark.parametrize("capacity, allocatable", [(0.0, None), (None, 0.0), (None, None)])
def test_a_missing_series_is_no_reading(capacity: float | None, allocatable: float | None) -> None:
    """kube-state-metrics not scraping capacity or allocatable: nothing is marked."""
    (n,) = build_nodes(dcgm("n1", 8), ksm_node("n1", capacity, allocatable))
    assert all(g.healthy and not g.unallocatable for g in n.gpus)


@pytest.mark.parametrize("capacity", [0.0, 2.0])
def test_mig_instances_of_a_mixed_node_stay(capacity: float) -> None:
    """A mixed-strategy node with every GPU in MIG mode advertises ``nvidia.com/mig-<profile>``;
    its ``nvidia.com/gpu`` is 0 (kept at 0 by the kubelet once registered) or, for the 5 minutes
    after a MIG reconfiguration, N unhealthy: its instances are not judged by it."""
    samples = _mig("mx", [(0, 1, "1g.10gb"), (0, 2, "1g.10gb"), (1, 1, "1g.10gb")])
    (n,) = build_nodes(samples, ksm_node("mx", capacity, 0.0))
    assert all(g.healthy and not g.unallocatable for g in n.gpus)


def test_placements_skip_a_node_whose_plugin_is_not_serving(tmp_path: Path) -> None:
    """n1's plugin is down (capacity 8, allocatable 0), n2 serves 8: the first 8-GPU reservation
    goes to n2, the second finds no node (409), where both used to be reserved."""
    nodes = build_nodes(
        dcgm("n1", 8) + dcgm("n2", 8),
        [
            *ksm_node("n1", 8.0, 0.0),
            *ksm_status("n1", False, "true"),
            *ksm_node("n2", 8.0, 8.0),
            *ksm_status("n2", False, "true"),
        ],
    )
    with TestClient(create_app(serving_settings(tmp_path, api_token=TOKEN))) as c:
        c.headers["Authorization"] = f"Bearer {TOKEN}"
        c.app.state.services.telemetry = SimSource(nodes)
        job = {"num_gpu": 8, "gpu_milli": 1000, "reserve": True}
        first = c.post("/api/v1/placements", json={**job, "job_id": "j1"})
        second = c.post("/api/v1/placements", json={**job, "job_id": "j2"})
        fleet = c.get("/api/v1/fleet").json()
    assert first.status_code == 200 and first.json()["node"] == "n2"
    assert second.status_code == 409
    n1 = next(n for n in fleet["nodes"] if n["name"] == "n1")
    assert all(g["unallocatable"] and not g["healthy"] for g in n1["gpus"])


def test_doctor_names_the_nodes_whose_plugin_is_not_serving() -> None:
    """n1 serves no device; n2 lost GPU 3 to XID 69: two lines, each about its own node."""
    from fleetmind.serving.telemetry import doctor

    nodes = build_nodes(
        dcgm("n1", 8) + dcgm("n2", 8, {3: 69.0}),
        [*ksm_node("n1", 8.0, 0.0), *ksm_node("n2", 8.0, 7.0)],
    )
    found = [f.message for f in doctor._unschedulable(FleetSnapshot("prometheus", nodes))]
    assert len(found) == 2
    assert "1 node(s) with allocatable nvidia.com/gpu 0" in found[0] and found[0].count("n1") == 1
    assert "device plugin is not serving" in found[0] and "n2" not in found[0]
    assert found[1].startswith("1 GPU(s) reported by dcgm-exporter") and "n2/3" in found[1]


# A retired resource: the kubelet never removes a device-plugin resource from the node status
# (``MachineInfo`` in ``pkg/kubelet/nodestatus/setters.go``: "Set the capacity of the removed
# resource to 0 instead of removing the resource"; kubernetes/kubernetes#92396), so a node whose
# GPUs moved to another resource keeps nvidia.com/gpu at 0/0 for good. kube-state-metrics exports
# a resource name with every character not a letter, digit or _ as _ (nvidia.com/gpu.shared ->
# nvidia_com_gpu_shared; kube-state-metrics internal/store/node.go, SanitizeLabelName).


def _raw(node: str, resource: str, capacity: float, allocatable: float) -> list:
    """Raw kube-state-metrics ``kube_node_status_capacity``/``_allocatable`` of ``resource``."""
    lab = {"node": node, "resource": resource, "unit": "integer"}
    return [
        ("kube_node_status_capacity", dict(lab), capacity),
        ("kube_node_status_allocatable", dict(lab), allocatable),
    ]


def _answer(node: str, resource: str, capacity: float, allocatable: float) -> list:
    """The same as :func:`fleet_queries`' ``node_gpus`` answers it (``resource`` kept)."""
    return [
        ("node_gpus", {"__name__": f"kube_node_status_{m}", "node": node, "resource": resource}, v)
        for m, v in (("capacity", capacity), ("allocatable", allocatable))
    ]


@pytest.mark.parametrize("form", [_raw, _answer], ids=["raw-series", "fleet-query-answer"])
def test_a_node_moved_to_renamed_time_slicing_keeps_its_gpus(form) -> None:
    """renameByDefault: 8 GPUs served as 32 nvidia.com/gpu.shared; nvidia.com/gpu stale at 0/0.
    The GPUs used to be all out, the cluster's health 0 and doctor blaming the plugin."""
    from fleetmind.serving.health import HealthModel, snapshot_signals
    from fleetmind.serving.telemetry import doctor

    ksm = [
        *form("ts", "nvidia_com_gpu", 0.0, 0.0),
        *form("ts", "nvidia_com_gpu_shared", 32.0, 32.0),
    ]
    (n,) = build_nodes(dcgm("ts", 8), ksm)
    assert states(n) == [(i, True, 1000, False) for i in range(8)]
    snap = FleetSnapshot("prometheus", [n])
    health = HealthModel().update(list(snapshot_signals(snap).values())).clusters[0].health
    assert health > 0.9
    assert doctor._unschedulable(snap) == []


def test_a_renamed_plugin_that_stops_still_takes_the_gpus_out() -> None:
    """The renamed resource itself at capacity 32, allocatable 0: the plugin is not serving."""
    ksm = [*ksm_node("ts", 0.0, 0.0), *_raw("ts", "nvidia_com_gpu_shared", 32.0, 0.0)]
    (n,) = build_nodes(dcgm("ts", 8), ksm)
    assert all(g.unallocatable for g in n.gpus)


def test_an_sriov_nic_resource_is_no_gpu_resource() -> None:
    """The Network Operator's SR-IOV NICs may be nvidia.com/<name> too: not a GPU served."""
    ksm = [*ksm_node("n1", 0.0, 0.0), *_raw("n1", "nvidia_com_cx7_sriov", 8.0, 8.0)]
    (n,) = build_nodes(dcgm("n1", 8), ksm)
    assert all(g.unallocatable for g in n.gpus)


@pytest.mark.parametrize(
    "label, capacity, marked",
    [
        ("paused-for-driver-upgrade", 0.0, True),
        ("false", 0.0, False),  # the plugin turned off on the node (the DRA driver serves it)
        ("false", 8.0, True),  # capacity N, allocatable 0: the kubelet's own count
        ("true", 0.0, True),
    ],
)
def test_the_gpu_operator_device_plugin_label(label: str, capacity: float, marked: bool) -> None:
    """``nvidia.com/gpu.deploy.device-plugin`` (GPU Operator; exported by kube-state-metrics with
    ``--metric-labels-allowlist=nodes=[nvidia.com/gpu.deploy.device-plugin]``)."""
    labels = {"node": "n1", "label_nvidia_com_gpu_deploy_device_plugin": label}
    ksm = [*ksm_node("n1", capacity, 0.0), ("node_gpu_replicas", labels, 1.0)]
    (n,) = build_nodes(dcgm("n1", 8), ksm)
    assert [g.unallocatable for g in n.gpus] == [marked] * 8


def test_paused_label_marks_though_another_resource_is_served() -> None:
    labels = {
        "node": "n1",
        "label_nvidia_com_gpu_deploy_device_plugin": "paused-for-driver-upgrade",
    }
    ksm = [*ksm_node("n1", 0.0, 0.0), *_raw("n1", "nvidia_com_gpu_shared", 32.0, 32.0),
           ("node_gpu_replicas", labels, 1.0)]  # fmt: skip
    (n,) = build_nodes(dcgm("n1", 8), ksm)
    assert all(g.unallocatable for g in n.gpus)


def test_the_query_reads_the_other_gpu_resources() -> None:
    from fleetmind.serving.telemetry.prometheus import fleet_queries

    q = fleet_queries()["node_gpus"]
    assert q.startswith("max by (__name__, cluster, node, resource) ")
    assert 'resource=~"nvidia_com_gpu|nvidia_com_gpu_.+|nvidia_com_mig_.+"' in q


def test_single_strategy_mig_is_not_covered() -> None:
    """As documented: a single-strategy MIG node whose plugin serves nothing marks nothing."""
    samples = _mig("sg", [(g, i, "1g.10gb") for g in range(2) for i in (1, 2, 3)])
    (n,) = build_nodes(samples, ksm_node("sg", 6.0, 0.0))
    assert not any(g.unallocatable for g in n.gpus)


def test_doctor_says_a_dra_node_reads_as_a_plugin_down() -> None:
    from fleetmind.serving.telemetry import doctor

    (n,) = build_nodes(dcgm("dra", 4), ksm_node("dra", 0.0, 0.0))
    (found,) = doctor._unschedulable(FleetSnapshot("prometheus", [n]))
    assert "DRA driver" in found.message
    assert "nvidia.com/gpu.deploy.device-plugin=false" in found.message


def test_prometheus_answers_the_query_per_gpu_resource(tmp_path: Path) -> None:
    """``promtool test rules`` (a real Prometheus engine) on the ``node_gpus`` query: the renamed
    resource comes with its ``resource`` label, an SR-IOV NIC's and the CPU's do not."""
    import shutil
    import subprocess

    import yaml

    from fleetmind.serving.telemetry.prometheus import fleet_queries

    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool not installed (Debian package prometheus)")
    series = [("capacity", "nvidia_com_gpu", 0), ("allocatable", "nvidia_com_gpu", 0),
              ("allocatable", "nvidia_com_gpu_shared", 32), ("allocatable", "nvidia_com_cx7_sriov", 8),
              ("allocatable", "cpu", 64)]  # fmt: skip
    name = 'kube_node_status_{}{{node="ts",resource="{}"}}'
    expected = [{"labels": name.format(m, r), "value": v} for m, r, v in series[:3]]
    (tmp_path / "r.yml").write_text("groups: []\n")
    test = {"rule_files": ["r.yml"], "evaluation_interval": "1m", "tests": [{
        "interval": "1m",
        "input_series": [{"series": name.format(m, r), "values": f"{v}x5"} for m, r, v in series],
        "promql_expr_test": [
            {"expr": fleet_queries(0)["node_gpus"], "eval_time": "2m", "exp_samples": expected}
        ]}]}  # fmt: skip
    (tmp_path / "t.yml").write_text(yaml.safe_dump(test))
    done = subprocess.run([promtool, "test", "rules", "t.yml"], cwd=tmp_path, capture_output=True,
                          text=True, timeout=60)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
