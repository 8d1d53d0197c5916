"""What Kubernetes itself says about a node's health: GPUs the NVIDIA device plugin took out of
allocatable, and cordoned or not-Ready nodes, as telemetry reads them and placements use them.

Upstream behaviour the fixtures follow:

* The NVIDIA device plugin marks a device ``Unhealthy`` on every XID but 13, 31, 43, 45, 68 and
  109 (``ignoredXids`` of ``getDisabledHealthCheckXids`` in ``internal/rm/health.go``,
  NVIDIA/k8s-device-plugin) and never marks it healthy again; the kubelet's device manager
  counts every device in ``capacity`` and only healthy ones in ``allocatable`` (``GetCapacity``
  in ``pkg/kubelet/cm/devicemanager/manager.go``, kubernetes/kubernetes). kube-state-metrics
  exports them as ``kube_node_status_capacity`` / ``_allocatable{resource="nvidia_com_gpu",
  unit="integer"}``; dcgm-exporter keeps exporting the GPU (``gpu``, ``UUID``, ``modelName``,
  ``Hostname`` labels; ``DCGM_FI_DEV_XID_ERRORS`` holds the last XID).
* kube-state-metrics' node collector (``docs/metrics/cluster/node-metrics.md``) exports
  ``kube_node_spec_unschedulable{node}`` (1 when ``spec.unschedulable``: ``kubectl cordon``) and
  ``kube_node_status_condition{node,condition,status}``, one series per status
  (``true|false|unknown``), 1 on the current one; ``status="unknown"`` once the node controller
  stops hearing from the kubelet.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from k8s_helpers import dcgm_text, ksm_allocatable, ksm_pod_info, ksm_prometheus
from serving_helpers import serving_settings

from fleetmind.serving.app import create_app
from fleetmind.serving.scheduler.placement_router import schedulable_part
from fleetmind.serving.telemetry.base import FleetSnapshot, NodeState
from fleetmind.serving.telemetry.prometheus import (
    KSM_FLEET_QUERY,
    PrometheusApiSource,
    Sample,
    build_nodes,
)
from fleetmind.serving.telemetry.sim import SimSource
from fleetmind.serving.ui import auth

os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")

H100 = "NVIDIA H100 80GB HBM3"
TOKEN = "fleet-health-token"


def dcgm(node: str, gpus: int, xids: dict[int, float] | None = None) -> list[Sample]:
    """dcgm-exporter samples of ``gpus`` idle GPUs on ``node``; ``xids``: GPU -> last XID."""
    out: list[Sample] = []
    for g in range(gpus):
        lab = {"gpu": str(g), "UUID": f"GPU-{node}-{g}", "modelName": H100, "Hostname": node}
        out += [
            ("DCGM_FI_DEV_FB_USED", lab, 0.0),
            ("DCGM_FI_DEV_FB_FREE", lab, 81559.0),
            ("DCGM_FI_DEV_GPU_UTIL", lab, 0.0),
        ]
        if xids and g in xids:
            out.append(("DCGM_FI_DEV_XID_ERRORS", lab, xids[g]))
    return out


def ksm_node(node: str, capacity: float | None, allocatable: float | None) -> list[Sample]:
    """The fleet query's answers for ``node``: CPU/memory allocatable and ``node_gpus``."""
    out: list[Sample] = [
        ("kube_node_status_allocatable", {"node": node, "resource": "cpu"}, 64.0),
        ("kube_node_status_allocatable", {"node": node, "resource": "memory"}, 5e11),
    ]
    for metric, v in (("capacity", capacity), ("allocatable", allocatable)):
        if v is not None:
            out.append(("node_gpus", {"__name__": f"kube_node_status_{metric}", "node": node}, v))
    return out


def states(node: NodeState) -> list[tuple[int, bool, int, bool]]:
    return [(g.index, g.healthy, g.free_milli, g.unallocatable) for g in node.gpus]


# ------------------------------------------------------------------ GPUs out of allocatable
def test_xid_69_gpu_out_of_allocatable_is_unhealthy() -> None:
    """XID 69 is not a FleetMind hardware XID, but the device plugin took GPU 3 out: 7 of 8."""
    (n,) = build_nodes(dcgm("n1", 8, {3: 69.0}), ksm_node("n1", 8.0, 7.0))
    assert states(n)[3] == (3, False, 0, True)
    assert [g.index for g in n.gpus if g.healthy] == [0, 1, 2, 4, 5, 6, 7]


def test_raw_kube_state_metrics_series_count_too() -> None:
    """Raw ``kube_node_status_capacity``/``_allocatable`` series, as kube-state-metrics exports
    them, give the same answer as the fleet query's ``node_gpus``."""
    ksm: list[Sample] = [
        ("kube_node_status_allocatable", {"node": "n1", "resource": "cpu"}, 64.0),
        ("kube_node_status_allocatable", {"node": "n1", "resource": "nvidia_com_gpu"}, 7.0),
        ("kube_node_status_capacity", {"node": "n1", "resource": "nvidia_com_gpu"}, 8.0),
    ]
    (n,) = build_nodes(dcgm("n1", 8, {3: 69.0}), ksm)
    assert [g.index for g in n.gpus if not g.healthy] == [3]


def test_without_a_device_plugin_xid_the_highest_index_goes() -> None:
    """XID 13 is one the device plugin ignores: GPU 2 keeps its place; GPUs 7 and 6 go."""
    (n,) = build_nodes(dcgm("n1", 8, {2: 13.0}), ksm_node("n1", 8.0, 6.0))
    assert [g.index for g in n.gpus if g.unallocatable] == [6, 7]
    assert n.gpus[2].healthy


def test_a_gpu_out_for_a_hardware_xid_is_not_counted_twice() -> None:
    """XID 79 already takes GPU 5 out; allocatable 7 leaves the other seven healthy."""
    (n,) = build_nodes(dcgm("n1", 8, {5: 79.0}), ksm_node("n1", 8.0, 7.0))
    assert [(g.index, g.unallocatable) for g in n.gpus if not g.healthy] == [(5, False)]


@pytest.mark.parametrize(
    "capacity, allocatable",
    [(8.0, None), (8.0, 8.0), (None, None), (None, 7.0), (None, 0.0), (8.0, float("nan"))],
)
def test_nothing_is_marked_where_allocatable_does_not_say_so(
    capacity: float | None, allocatable: float | None
) -> None:
    """A missing series (kube-state-metrics not scraping it) or a NaN is no reading. Allocatable 0
    with capacity known is a reading (the device plugin not serving: every device of its stopped
    endpoint unhealthy, ``markResourceUnhealthy`` in kubernetes
    ``pkg/kubelet/cm/devicemanager/manager.go``); see tests/test_fleet_health_device_plugin.py."""
    (n,) = build_nodes(dcgm("n1", 8, {3: 69.0}), ksm_node("n1", capacity, allocatable))
    assert all(g.healthy for g in n.gpus)


def test_a_replicas_label_the_devices_do_not_match_takes_no_gpu_out() -> None:
    """Capacity = allocatable: the kubelet counts no device out, whatever the replicas label says."""
    labels = {"node": "ts", "label_nvidia_com_gpu_replicas": "2"}
    (n,) = build_nodes(
        dcgm("ts", 2), [*ksm_node("ts", 2.0, 2.0), ("node_gpu_replicas", labels, 1.0)]
    )
    assert all(g.healthy for g in n.gpus)


def test_time_sliced_gpu_out_of_allocatable() -> None:
    """4 replicas per GPU: 2 GPUs are 8 devices; allocatable 4 is one GPU's replicas."""
    labels = {"node": "ts", "label_nvidia_com_gpu_replicas": "4"}
    ksm = [*ksm_node("ts", 8.0, 4.0), ("node_gpu_replicas", labels, 1.0)]
    (n,) = build_nodes(dcgm("ts", 2, {0: 93.0}), ksm)  # XID 93: no FleetMind hardware XID
    assert n.gpu_replicas == 4
    assert states(n) == [(0, False, 0, True), (1, True, 1000, False)]


def _mig(node: str, instances: list[tuple[int, int, str]]) -> list[Sample]:
    """dcgm-exporter samples of MIG instances ``(gpu, GPU_I_ID, GPU_I_PROFILE)`` on ``node``."""
    out: list[Sample] = []
    for gpu, gi, profile in instances:
        lab = {"gpu": str(gpu), "GPU_I_ID": str(gi), "GPU_I_PROFILE": profile,
               "UUID": f"GPU-{node}-{gpu}", "modelName": H100, "Hostname": node}  # fmt: skip
        out += [("DCGM_FI_DEV_FB_USED", lab, 0.0), ("DCGM_FI_DEV_FB_FREE", lab, 9000.0),
                ("DCGM_FI_PROF_GR_ENGINE_ACTIVE", lab, 0.0)]  # fmt: skip
    return out


def test_mig_mixed_strategy_counts_the_whole_gpus_only() -> None:
    """Mixed strategy: ``nvidia.com/gpu`` is GPU 0 (MIG disabled) only; GPU 1's instances are
    ``nvidia.com/mig-1g.10gb`` devices, which FleetMind does not read: they stay as they are."""
    samples = dcgm("mx", 1) + _mig("mx", [(1, 1, "1g.10gb"), (1, 2, "1g.10gb")])
    (n,) = build_nodes(samples, ksm_node("mx", 1.0, 1.0))
    assert all(g.healthy for g in n.gpus)
    (n,) = build_nodes(samples, ksm_node("mx", 1.0, 0.0))  # GPU 0 out; the instances stay
    assert [(g.index, g.healthy, g.unallocatable) for g in n.gpus] == [
        (0, False, True), (201, True, False), (202, True, False)]  # fmt: skip


def test_mig_single_strategy_counts_instances() -> None:
    """Single strategy: the instances are ``nvidia.com/gpu``; allocatable 2 of 3 takes the last."""
    samples = _mig("sg", [(0, 1, "3g.40gb"), (0, 2, "3g.40gb"), (1, 1, "3g.40gb")])
    (n,) = build_nodes(samples, ksm_node("sg", 3.0, 2.0))
    assert [(g.index, g.healthy) for g in n.gpus] == [(101, True), (102, True), (201, False)]


# ------------------------------------------------------------------ cordoned and not-Ready nodes
def ksm_status(node: str, cordoned: bool, ready: str) -> list[Sample]:
    """Raw kube-state-metrics series of ``node``'s cordon and Ready condition."""
    out: list[Sample] = [("kube_node_spec_unschedulable", {"node": node}, float(cordoned))]
    for status in ("true", "false", "unknown"):
        lab = {"node": node, "condition": "Ready", "status": status}
        out.append(("kube_node_status_condition", lab, float(status == ready)))
    lab = {"node": node, "condition": "MemoryPressure", "status": "unknown"}
    out.append(("kube_node_status_condition", lab, 1.0))  # another condition: not read
    return out


def test_node_status_from_raw_series() -> None:
    ksm = [*ksm_node("n1", 8.0, 8.0), *ksm_status("n1", True, "unknown"),
           *ksm_node("n2", 8.0, 8.0), *ksm_status("n2", False, "false"),
           *ksm_node("n3", 8.0, 8.0), *ksm_status("n3", False, "true")]  # fmt: skip
    nodes = {n.name: n for n in build_nodes(dcgm("n1", 8) + dcgm("n2", 8) + dcgm("n3", 8), ksm)}
    assert (nodes["n1"].cordoned, nodes["n1"].not_ready) == (True, "unknown")
    assert (nodes["n2"].cordoned, nodes["n2"].not_ready) == (False, "false")
    assert nodes["n3"].schedulable and not nodes["n2"].schedulable
    assert nodes["n1"].unschedulable_reason == "cordoned, not ready (status unknown)"


def test_nodes_without_status_series_stay_schedulable() -> None:
    (n,) = build_nodes(dcgm("n1", 2), ksm_node("n1", 2.0, 2.0))
    assert n.schedulable and not n.cordoned and n.not_ready is None


def test_one_snapshot_gives_one_schedulable_node_list() -> None:
    """The served placer keeps its model of the fleet per node list (``id(snapshot.nodes)``): the
    part without cordoned nodes must be the same list for the same snapshot, or every placement
    rebuilds that model (at 5,000 nodes ~1 ms became 55-100 ms a placement)."""
    nodes = build_nodes(
        dcgm("n1", 8) + dcgm("n2", 8),
        [*ksm_node("n1", 8.0, 8.0), *ksm_status("n1", True, "true"), *ksm_node("n2", 8.0, 8.0)],
    )
    snap = FleetSnapshot("prometheus", nodes)
    first, out = schedulable_part(snap)
    again, out_again = schedulable_part(snap)
    assert [n.name for n in first.nodes] == ["n2"] and [n.name for n in out] == ["n1"]
    assert again is first and again.nodes is first.nodes and out_again == out
    other = FleetSnapshot("prometheus", list(nodes))  # a new snapshot: its own answer
    assert schedulable_part(other)[0].nodes is not first.nodes
    whole = FleetSnapshot("prometheus", [n for n in nodes if n.schedulable])
    assert schedulable_part(whole)[0] is whole


def test_fleet_query_reads_cordons_and_conditions() -> None:
    assert "kube_node_spec_unschedulable" in KSM_FLEET_QUERY
    assert 'kube_node_status_condition{condition="Ready",status!="true"}' in KSM_FLEET_QUERY


@pytest.mark.external
def test_real_prometheus_reads_cordoned_and_not_ready_nodes(tmp_path: Path) -> None:
    """kube-state-metrics scraped with ``honor_labels: false`` on a target with its own ``node``:
    its node is in ``exported_node``, which the queries read back."""
    nodes = ("gpu-a", "gpu-b", "gpu-c")
    ksm = ["# TYPE kube_node_status_allocatable gauge"]
    for n in nodes:
        ksm += ksm_allocatable(n, 2)
    ksm += ["# TYPE kube_pod_info gauge", ksm_pod_info("ml", "train-0", "gpu-a")]
    ksm += ["# TYPE kube_node_spec_unschedulable gauge"]
    ksm += [f'kube_node_spec_unschedulable{{node="{n}"}} {int(n == "gpu-a")}' for n in nodes]
    ksm += ["# TYPE kube_node_status_condition gauge"]
    ready = {"gpu-a": "true", "gpu-b": "unknown", "gpu-c": "true"}
    for n in nodes:
        for status in ("true", "false", "unknown"):
            ksm.append(
                f'kube_node_status_condition{{node="{n}",condition="Ready",status="{status}"}} '
                f"{int(ready[n] == status)}"
            )
    text = "\n".join(ksm) + "\n"
    dcgm_jobs = {f"dcgm-{n[-1]}": (f"dcgm-exporter-{n[-1]}", dcgm_text("Hostname", n, [{}, {}]))
                 for n in nodes}  # fmt: skip
    target = {"node": "infra-0", "pod": "kube-state-metrics-0", "namespace": "monitoring"}
    with ksm_prometheus(tmp_path, dcgm_jobs, text, target, 6 + 1) as url:
        src = PrometheusApiSource(url, ttl_s=0.0)
        try:
            got = {n.name: (n.cordoned, n.not_ready) for n in src.collect().nodes}
        finally:
            src.close()
    assert got == {"gpu-a": (True, None), "gpu-b": (False, "unknown"), "gpu-c": (False, None)}


# ------------------------------------------------------------------ the service
@pytest.fixture
def client(tmp_path: Path) -> Iterator[TestClient]:
    with TestClient(create_app(serving_settings(tmp_path, api_token=TOKEN))) as c:
        c.headers["Authorization"] = f"Bearer {TOKEN}"
        yield c


def _serve(c: TestClient, nodes: list[NodeState]) -> None:
    c.app.state.services.telemetry = SimSource(nodes)


def test_placements_never_reserve_a_gpu_out_of_allocatable(client: TestClient) -> None:
    _serve(client, build_nodes(dcgm("n1", 8, {3: 69.0}), ksm_node("n1", 8.0, 7.0)))
    job = {"job_id": "j8", "num_gpu": 8, "gpu_milli": 1000, "reserve": True}
    assert client.post("/api/v1/placements", json=job).status_code == 409
    r = client.post("/api/v1/placements", json={**job, "job_id": "j7", "num_gpu": 7})
    assert r.status_code == 200, r.text
    assert 3 not in r.json()["gpus"]
    gpus = client.get("/api/v1/fleet").json()["nodes"][0]["gpus"]
    assert (gpus[3]["healthy"], gpus[3]["free_milli"], gpus[3]["unallocatable"]) == (False, 0, True)


def _two_nodes(cordoned: bool, ready: str) -> list[NodeState]:
    ksm = [*ksm_node("n1", 8.0, 8.0), *ksm_status("n1", cordoned, ready),
           *ksm_node("n2", 8.0, 8.0), *ksm_status("n2", False, "true")]  # fmt: skip
    samples = dcgm("n1", 8) + dcgm("n2", 8)
    n2_busy = [(m, lab, 40000.0 if m == "DCGM_FI_DEV_FB_USED" else v) for m, lab, v in samples
               if lab["Hostname"] == "n2" and lab["gpu"] in "0123"]  # fmt: skip
    # n2 has 4 GPUs in use, so best-fit would prefer the emptier n1 were it a candidate
    keep = [s for s in samples if not (s[1]["Hostname"] == "n2" and s[1]["gpu"] in "0123")]
    return build_nodes(keep + n2_busy, ksm)


@pytest.mark.parametrize("cordoned, ready", [(True, "true"), (False, "false"), (False, "unknown")])
def test_placements_skip_cordoned_and_not_ready_nodes(
    client: TestClient, cordoned: bool, ready: str
) -> None:
    _serve(client, _two_nodes(cordoned, ready))
    r = client.post("/api/v1/placements", json={"num_gpu": 2, "gpu_milli": 1000, "reserve": True})
    assert r.status_code == 200, r.text
    assert r.json()["node"] == "n2"
    assert all(o["node"] == "n2" for o in r.json()["alternatives"])


def test_placements_say_every_node_is_cordoned_or_not_ready(client: TestClient) -> None:
    ksm = [*ksm_node("n1", 8.0, 8.0), *ksm_status("n1", True, "unknown")]
    _serve(client, build_nodes(dcgm("n1", 8), ksm))
    r = client.post("/api/v1/placements", json={"job_id": "j", "num_gpu": 4, "reserve": True})
    assert r.status_code == 409
    detail = r.json()["detail"]
    assert "every node is cordoned, not Ready or being removed" in detail
    assert "n1 (cordoned, not ready (status unknown))" in detail
    fleet = client.get("/api/v1/fleet").json()["nodes"][0]
    assert all(g["free_milli"] == 1000 for g in fleet["gpus"])  # nothing was reserved
    assert (fleet["schedulable"], fleet["cordoned"], fleet["not_ready"]) == (False, True, "unknown")


def test_a_409_names_the_nodes_left_out(client: TestClient) -> None:
    """n2 is too small for 6 GPUs (4 in use); n1 could hold them but is cordoned."""
    _serve(client, _two_nodes(True, "true"))
    r = client.post("/api/v1/placements", json={"num_gpu": 6, "gpu_milli": 1000})
    assert r.status_code == 409
    assert (
        "1 node(s) cordoned, not Ready or being removed were left out: n1 (cordoned)"
        in r.json()["detail"]
    )


def test_fleet_page_shows_cordoned_nodes(client: TestClient) -> None:
    _serve(client, _two_nodes(True, "false"))
    client.get("/ui/login")
    csrf = client.cookies.get(auth.CSRF_COOKIE)
    client.post("/ui/login", data={"token": TOKEN, "csrf": csrf, "next": "/ui/fleet"})
    page = client.get("/ui/fleet").text
    assert 'class="unschedulable"' in page
    assert "cordoned, not ready</span>" in page
    assert page.count('class="unschedulable"') == 1  # n2 is schedulable
