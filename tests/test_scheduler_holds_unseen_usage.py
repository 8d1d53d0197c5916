"""Holds of pods that kube-state-metrics lists before the snapshot shows their GPU use.

A hold used to end as soon as ``kube_pod_info`` listed its pod on the held node ("its usage is in
the same scrape"). Two kinds of pod are listed without their GPU use in the snapshot:

* a GPU-sharing pod (``alibabacloud.com/gpu-milli``) whose annotations carry no
  ``alibabacloud.com/gpu-index``: nothing in FleetMind's deployment writes it (the extender returns
  scores only), so the snapshot cannot tell which GPU the share is on. Its hold is that assignment:
  it now stays while the pod is listed there, past its TTL, and ends one TTL after the pod leaves.
  (``tests/k8s_helpers.py``'s ``LiveFleet`` writes ``gpu-index`` from FleetMind's own holds, which
  hid this: the pods here have none, or no annotation series at all.)
* a whole-GPU (``nvidia.com/gpu``) pod that dcgm-exporter names on no GPU: for up to one
  dcgm-exporter collection interval plus a scrape after the kubelet allocated its devices (at
  admission, before any image pull; dcgm-exporter reads the kubelet's PodResources ``List``, running
  or not), and for the pod's whole life where dcgm-exporter's Kubernetes mapping is off (``-k``
  unset) or, time-sliced, when another pod on the GPU is the one it names (no
  ``--kubernetes-virtual-gpus``). kube-state-metrics'
  ``kube_pod_container_resource_requests{resource="nvidia_com_gpu"}`` (kube-state-metrics
  ``docs/pod-metrics.md``: ``resource``/``unit`` labels, the resource name sanitised,
  ``nvidia.com/gpu`` -> ``nvidia_com_gpu``) now marks that many devices taken, and that charge
  places the pod's GPU use: its hold ends on listing, whichever GPUs the device plugin chose (a hold
  kept as well would count the pod twice, for its whole life where DCGM never names it).

The snapshots come from :func:`build_nodes` over kube-state-metrics and DCGM samples, and the
extender, ``/bound``, ``/api/v1/fleet`` and ``/api/v1/placements`` routes run as served.
Deterministic: a fake clock; no timing asserts.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from fastapi.testclient import TestClient

os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")

from fleetmind.serving.app import create_app  # noqa: E402
from fleetmind.serving.scheduler.placement import Option  # noqa: E402
from fleetmind.serving.scheduler.reservations import _view  # noqa: E402
from fleetmind.serving.schemas import JobSpec  # noqa: E402
from fleetmind.serving.settings import Settings  # noqa: E402
from fleetmind.serving.telemetry import base  # noqa: E402
from fleetmind.serving.telemetry.base import (  # noqa: E402
    FleetSnapshot,
    GpuState,
    NodeState,
    TelemetrySource,
)
from fleetmind.serving.telemetry.prometheus import (  # noqa: E402
    ANN_INDEX,
    ANN_MILLI,
    build_nodes,
    fleet_queries,
)

NODE, NS = "gpu-a", "ml"
TTL_S = 120.0


class Clock:
    """Unix seconds, moved by hand (the holds' and the telemetry's clock)."""

    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


class Fleet(TelemetrySource):
    """One node of ``n_gpus`` idle A100s seen through DCGM and kube-state-metrics samples;
    :attr:`pods` are what kube-state-metrics lists (``publish``), :attr:`named` the pods DCGM
    names on a GPU (``{gpu: "ns/name"}``, a started container)."""

    name = "prometheus"

    def __init__(self, clock: Clock, n_gpus: int, replicas: int = 1) -> None:
        super().__init__(ttl_s=0.0)
        self.clock, self.n_gpus, self.replicas = clock, n_gpus, replicas
        self.pods: list[dict[str, Any]] = []
        self.named: dict[int, str] = {}
        self.busy: set[int] = set()  # GPUs in use that DCGM names no pod on (mapping off)

    def dcgm(self) -> list[tuple[str, dict[str, str], float]]:
        out = []
        for g in range(self.n_gpus):
            lab = {"gpu": str(g), "UUID": f"GPU-{g}", "modelName": "NVIDIA A100-SXM4-80GB",
                   "Hostname": NODE}  # fmt: skip
            if g in self.named:
                ns, pod = self.named[g].split("/")
                lab = {**lab, "namespace": ns, "pod": pod, "container": "main"}
            busy = g in self.named or g in self.busy
            out += [("DCGM_FI_DEV_GPU_UTIL", lab, 90.0 if busy else 0.0),
                    ("DCGM_FI_DEV_FB_USED", lab, 40000.0 if busy else 0.0),
                    ("DCGM_FI_DEV_FB_FREE", lab, 41000.0 if busy else 81000.0)]  # fmt: skip
        return out

    def ksm(self) -> list[tuple[str, dict[str, str], float]]:
        out: list[tuple[str, dict[str, str], float]] = [
            ("kube_node_status_allocatable", {"node": NODE, "resource": "cpu"}, 96.0),
            ("kube_node_status_allocatable", {"node": NODE, "resource": "memory"}, 2.0**40),
        ]
        if self.replicas > 1:  # time-slicing: capacity counts replicas, GFD labels the node
            cap = {"__name__": "kube_node_status_capacity", "node": NODE}
            out.append(("node_gpus", cap, float(self.n_gpus * self.replicas)))
            rep = {"node": NODE, "label_nvidia_com_gpu_replicas": str(self.replicas)}
            out.append(("node_gpu_replicas", rep, 1.0))
        for p in self.pods:
            pod = {"namespace": NS, "pod": p["name"], "uid": "u-" + p["name"]}
            out.append(("kube_pod_info", {**pod, "node": NODE, "created_by_kind": "Job"}, 1.0))
            out.append(("kube_pod_status_phase", {**pod, "phase": p.get("phase", "Pending")}, 1.0))
            req = {**pod, "container": "main", "node": NODE}
            out.append(("kube_pod_container_resource_requests", {**req, "resource": "cpu"}, 1.0))
            if p.get("gpus"):  # kube-state-metrics' name for nvidia.com/gpu
                res = {**req, "resource": "nvidia_com_gpu", "unit": "integer"}
                out.append(("kube_pod_container_resource_requests", res, float(p["gpus"])))
            if p.get("annotations") is not None:
                out.append(("kube_pod_annotations", {**pod, **p["annotations"]}, 1.0))
        return out

    def collect(self) -> FleetSnapshot:
        return FleetSnapshot("prometheus", build_nodes(self.dcgm(), self.ksm()), self.clock())

    def snapshot(self) -> FleetSnapshot:
        return self.collect()  # a fresh scrape on every call (the fake clock may stand still)


def share_pod(name: str, milli: int = 500) -> dict[str, Any]:
    """A ``v1.Pod`` of the GPU-sharing scheduler: ``milli`` of one GPU."""
    ann = {"alibabacloud.com/gpu-milli": str(milli), "alibabacloud.com/gpu-count": "1"}
    return {
        "metadata": {"name": name, "namespace": NS, "uid": "u-" + name, "annotations": ann},
        "spec": {"containers": [{"name": "main", "resources": {"requests": {"cpu": "1"}}}]},
    }


def whole_pod(name: str, gpus: int = 1) -> dict[str, Any]:
    """A ``v1.Pod`` requesting ``gpus`` whole GPUs (``nvidia.com/gpu``)."""
    res = {"requests": {"cpu": "1", "nvidia.com/gpu": str(gpus)},
           "limits": {"nvidia.com/gpu": str(gpus)}}  # fmt: skip
    return {
        "metadata": {"name": name, "namespace": NS, "uid": "u-" + name},
        "spec": {"containers": [{"name": "main", "resources": res}]},
    }


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    c = Clock()
    monkeypatch.setattr(base.time, "time", c)  # the telemetry cache's clock
    return c


@pytest.fixture
def client(tmp_path: Path, clock: Clock) -> Iterator[TestClient]:
    settings = Settings(
        database_url=f"sqlite:///{tmp_path}/holds.db",
        rca_model="baseline:upstream-coverage",
        placement_model="heuristic:builtin-bestfit",
        incident_worker=False,
        reservation_ttl_s=TTL_S,
    )
    with TestClient(create_app(settings)) as c:
        res = c.app.state.services.reservations
        res.clock, res.cache_s, res.ttl_s = clock, 0, TTL_S
        yield c


def schedule(c: TestClient, pod: dict[str, Any]) -> str | None:
    """kube-scheduler with FleetMind as its extender: filter, then prioritize (which holds the node
    it scores 10); the node chosen, or None when filter passes none."""
    args = {"Pod": pod, "NodeNames": [NODE]}
    r = c.post("/api/v1/scheduler/filter", json=args)
    assert r.status_code == 200, r.text
    if not r.json()["NodeNames"]:
        return None
    r = c.post("/api/v1/scheduler/prioritize", json=args)
    assert r.status_code == 200, r.text
    return max(r.json(), key=lambda h: h["Score"])["Host"]


def free(c: TestClient) -> list[int]:
    """``free_milli`` of each GPU as ``GET /api/v1/fleet`` shows it (telemetry minus holds)."""
    r = c.get("/api/v1/fleet")
    assert r.status_code == 200, r.text
    return [g["free_milli"] for g in r.json()["nodes"][0]["gpus"]]


def holds(c: TestClient) -> dict[str, dict[str, Any]]:
    return {h["pod_key"]: h for h in c.app.state.services.reservations.rows()}


def test_shares_without_gpu_index_stay_held_while_listed(client: TestClient, clock: Clock) -> None:
    fleet = Fleet(clock, n_gpus=2)
    client.app.state.services.telemetry = fleet
    names = [f"s{i}" for i in range(4)]
    for name in names:  # 4 x 500 milli fill both GPUs
        assert schedule(client, share_pod(name)) == NODE
    assert free(client) == [0, 0]
    # kube-state-metrics lists them where FleetMind chose: two with gpu-milli and no gpu-index,
    # two with no annotation series at all (no --metric-annotations-allowlist)
    for i, name in enumerate(names):
        ann = {ANN_MILLI: "500"} if i < 2 else None
        fleet.pods.append({"name": name, "annotations": ann})
    assert free(client) == [0, 0]  # used to read [1000, 1000]: the shares were forgotten
    clock.now += 10 * TTL_S  # long past the TTL, no call in between: still listed, still held
    assert free(client) == [0, 0]
    assert schedule(client, share_pod("late")) is None  # used to be held on a full GPU
    assert all(h["expires_ts"] > clock.now for h in holds(client).values())  # renewed
    # the pods finish and leave kube_pod_info: their holds end one TTL later at most
    fleet.pods.clear()
    clock.now += TTL_S / 2
    assert free(client) == [0, 0]
    clock.now += TTL_S / 2 + 1
    assert free(client) == [1000, 1000]
    assert holds(client) == {}


def test_shares_with_gpu_index_end_on_listing_as_before(client: TestClient, clock: Clock) -> None:
    fleet = Fleet(clock, n_gpus=2)
    client.app.state.services.telemetry = fleet
    assert schedule(client, share_pod("s0")) == NODE
    (hold,) = holds(client).values()
    (gpu,) = hold["gpus"]
    ann = {ANN_MILLI: "500", ANN_INDEX: str(gpu)}
    fleet.pods.append({"name": "s0", "annotations": ann})
    snap = fleet.snapshot()
    (node,) = snap.nodes
    assert node.gpu_pods == frozenset({f"{NS}/s0"})
    view = client.app.state.services.reservations.view(snap)
    assert view.gpu_used("local", NODE, gpu) == 0  # the hold ended: the annotation places it
    expected = [500 if g == gpu else 1000 for g in range(2)]
    assert free(client) == expected


def test_whole_gpu_pods_dcgm_names_nowhere_yet_keep_their_gpus(
    client: TestClient, clock: Clock
) -> None:
    fleet = Fleet(clock, n_gpus=4)
    client.app.state.services.telemetry = fleet
    for name in ("w0", "w1"):
        assert schedule(client, whole_pod(name)) == NODE
        r = client.post("/api/v1/scheduler/bound",
                        json={"PodName": name, "PodNamespace": NS, "Node": NODE})  # fmt: skip
        assert r.json()["Outcome"] == "held", r.text
    # bound: kube-state-metrics lists them with their nvidia_com_gpu requests, DCGM names no pod
    # yet (its next collection) and every GPU reads idle
    fleet.pods += [{"name": "w0", "gpus": 1}, {"name": "w1", "gpus": 1}]
    clock.now += 60  # past /bound's grace (30 s)
    assert sorted(free(client)) == [0, 0, 1000, 1000]  # used to read 4 free GPUs
    r = client.post("/api/v1/placements", json={"num_gpu": 3})
    assert r.status_code == 409, r.text  # two GPUs left, not four
    # DCGM names the pods on their GPUs; nothing is counted twice
    fleet.named = {0: f"{NS}/w0", 1: f"{NS}/w1"}
    assert free(client) == [0, 0, 1000, 1000]
    assert client.post("/api/v1/placements", json={"num_gpu": 2}).status_code == 200


def test_requested_gpus_are_marked_once(clock: Clock) -> None:
    fleet = Fleet(clock, n_gpus=4)
    fleet.pods = [
        {"name": "unnamed", "gpus": 2},  # DCGM names it nowhere (yet): marked on GPUs 0 and 1
        {"name": "running", "gpus": 1},  # DCGM names it on GPU 3: already counted there
        {"name": "done", "gpus": 1, "phase": "Succeeded"},  # finished: holds nothing
    ]
    fleet.named = {3: f"{NS}/running"}
    (node,) = fleet.snapshot().nodes
    assert [g.free_milli for g in node.gpus] == [0, 0, 1000, 0]
    # both pods' GPU use is counted (named, or charged by the marking): their holds end on listing
    assert node.gpu_pods == frozenset({f"{NS}/unnamed", f"{NS}/running"})
    assert node.pods == frozenset({f"{NS}/unnamed", f"{NS}/running"})


def test_a_whole_gpu_hold_on_other_gpus_than_the_marked_ones_ends_on_listing(
    client: TestClient, clock: Clock
) -> None:
    """The request is marked on the lowest idle GPU; a hold naming another one ends all the same
    (the marking counts the pod): the pod's one GPU is counted once, not twice. 592fdb8 kept it
    (3 GPUs read taken for 1 pod until DCGM named it)."""
    fleet = Fleet(clock, n_gpus=4)
    res = client.app.state.services.reservations
    res.hold(f"{NS}/w", Option("local", NODE, (3,), 0.0), JobSpec(num_gpu=1), uid="u-w")
    fleet.pods = [{"name": "w", "gpus": 1}]
    snap = fleet.snapshot()
    assert [g.free_milli for g in snap.nodes[0].gpus] == [0, 1000, 1000, 1000]
    assert res.view(snap).gpu_used("local", NODE, 3) == 0
    res.hold(f"{NS}/w", Option("local", NODE, (0,), 0.0), JobSpec(num_gpu=1), uid="u-w")
    assert res.view(snap).gpu_used("local", NODE, 0) == 0


def test_pods_dcgm_never_names_are_counted_once_for_life(client: TestClient, clock: Clock) -> None:
    """dcgm-exporter's Kubernetes mapping off (``-k``/``DCGM_EXPORTER_KUBERNETES`` unset: the
    binary's default; its Helm chart, ``deployment/templates/daemonset.yaml``, turns it on): it
    names no pod, ever.
    Four 1-GPU pods held on GPUs 0-3 (best fit, lowest index) run on GPUs 4-7 (the device
    plugin's choice), which read busy. 592fdb8 kept the four holds for the pods' whole life and
    marked their requests too: 0 of 8 GPUs free where 4 are idle."""
    fleet = Fleet(clock, n_gpus=8)
    client.app.state.services.telemetry = fleet
    for i in range(4):
        assert schedule(client, whole_pod(f"w{i}")) == NODE
        r = client.post("/api/v1/scheduler/bound",
                        json={"PodName": f"w{i}", "PodNamespace": NS, "Node": NODE})  # fmt: skip
        assert r.json()["Outcome"] == "held", r.text
    assert sorted(h["gpus"][0] for h in holds(client).values()) == [0, 1, 2, 3]
    fleet.pods = [{"name": f"w{i}", "gpus": 1, "phase": "Running"} for i in range(4)]
    fleet.busy = {4, 5, 6, 7}
    clock.now += 86400  # a day later, all four still running
    assert free(client) == [1000] * 4 + [0] * 4
    assert holds(client) == {}
    assert client.post("/api/v1/placements", json={"num_gpu": 4}).status_code == 200


def test_time_sliced_pods_dcgm_names_one_of_are_counted_once(
    client: TestClient, clock: Clock
) -> None:
    """Time-slicing, 3 GPUs x 4 replicas (12 ``nvidia.com/gpu`` devices, 250 milli each). Four
    1-replica pods held on GPU 0 (best fit packs) run two per GPU on GPUs 0 and 1 (the device
    plugin spreads them); dcgm-exporter without ``--kubernetes-virtual-gpus`` names one pod per GPU
    (p0, p1), and the other two requests are marked on GPU 2. 592fdb8 kept p2's and p3's holds
    (250 milli each on GPU 0) for life: 6 free replicas where 8 are."""
    fleet = Fleet(clock, n_gpus=3, replicas=4)
    res = client.app.state.services.reservations
    for i in range(4):
        opt = Option("local", NODE, (0,), 0.0)
        res.hold(f"{NS}/p{i}", opt, JobSpec(num_gpu=1, gpu_milli=250), uid=f"u-p{i}")
    fleet.pods = [{"name": f"p{i}", "gpus": 1, "phase": "Running"} for i in range(4)]
    fleet.named = {0: f"{NS}/p0", 1: f"{NS}/p1"}
    snap = fleet.snapshot()
    (node,) = snap.nodes
    assert [g.free_milli for g in node.gpus] == [750, 750, 500]
    assert node.gpu_pods == frozenset(f"{NS}/p{i}" for i in range(4))
    view = res.view(snap)
    assert [view.gpu_used("local", NODE, g) for g in range(3)] == [0, 0, 0]
    clock.now += 3600
    view = res.view(fleet.snapshot())
    assert [view.gpu_used("local", NODE, g) for g in range(3)] == [0, 0, 0]
    assert {h["pod_key"] for h in res.rows()} == set()


def test_the_fleet_query_reads_gpu_requests_per_pod() -> None:
    q = fleet_queries()["pod_gpu_requests"]
    assert 'resource="nvidia_com_gpu"' in q
    assert q.startswith("sum by (cluster, node, namespace, pod) ")


def test_a_running_kept_share_is_not_counted_twice(client: TestClient, clock: Clock) -> None:
    """A ``gpu-milli`` pod without ``gpu-index`` runs: its framebuffer (40 of 81 GB) already lowers
    its GPU's free share (about 506 milli), so its kept hold adds only what that reading leaves
    over 1000 - 500: about 500 free, and a second 500-milli pod fits. 1de2f0e booked the kept
    500 on top of the reading: 6 free, and ``s1`` was refused."""
    fleet = Fleet(clock, n_gpus=1)
    client.app.state.services.telemetry = fleet
    assert schedule(client, share_pod("s0")) == NODE
    fleet.pods.append({"name": "s0", "annotations": {ANN_MILLI: "500"}})
    assert free(client) == [500]  # idle yet (pulling its image): the kept hold is the whole share
    fleet.pods[-1]["phase"] = "Running"
    fleet.busy = {0}  # s0 runs; share pods are not named by DCGM
    clock.now += 600
    assert free(client) == [500]  # not 6: the reading and the hold are one pod's use
    assert f"{NS}/s0" in holds(client)  # still kept (renewed by that view)
    view = client.app.state.services.reservations.view(fleet.snapshot())
    assert view.cpu_used("local", NODE) == 0  # its CPU request is in the scrape: not held again
    assert schedule(client, share_pod("s1")) == NODE


def test_an_indexed_and_a_kept_share_on_one_gpu_both_count(
    client: TestClient, clock: Clock
) -> None:
    """One GPU: ``s0`` annotated with ``gpu-index`` 0 (telemetry places its 500 milli there) and
    ``s1`` kept (no ``gpu-index``, held on GPU 0): nothing is left, whatever DCGM reads."""
    fleet = Fleet(clock, n_gpus=1)
    client.app.state.services.telemetry = fleet
    res = client.app.state.services.reservations
    res.hold(f"{NS}/s1", Option("local", NODE, (0,), 0.0), JobSpec(num_gpu=1, gpu_milli=500))
    fleet.pods = [
        {"name": "s0", "annotations": {ANN_MILLI: "500", ANN_INDEX: "0"}},
        {"name": "s1", "annotations": {ANN_MILLI: "500"}},
    ]
    (node,) = fleet.snapshot().nodes
    assert node.gpus[0].share_milli == 500
    assert free(client) == [0]
    fleet.busy = {0}
    clock.now += 600
    assert free(client) == [0]
    assert schedule(client, share_pod("s2", milli=100)) is None


def test_a_whole_gpu_hold_the_snapshot_does_not_place_ends_once_running(
    client: TestClient, clock: Clock
) -> None:
    """A whole-GPU hold of a pod whose GPU request is no ``nvidia.com/gpu`` (a MIG-mixed
    ``nvidia.com/mig-*`` instance, a ``gpu-count`` annotation pod) and which dcgm-exporter names
    nowhere (mapping off): it stays while the pod is Pending (every GPU idle), then the device
    plugin's choice, GPU 1, reads busy. 1de2f0e kept the hold on GPU 0 for the pod's life (GPU 0
    read taken, GPU 1 busy: both lost); it ends once the pod runs."""
    fleet = Fleet(clock, n_gpus=2)
    client.app.state.services.telemetry = fleet
    res = client.app.state.services.reservations
    res.hold(f"{NS}/m0", Option("local", NODE, (0,), 0.0), JobSpec(num_gpu=1), uid="u-m0")
    fleet.pods = [{"name": "m0"}]  # Pending: pulling its image
    clock.now += 600
    assert free(client) == [0, 1000]  # kept past its TTL while not running
    fleet.pods = [{"name": "m0", "phase": "Running"}]
    fleet.busy = {1}
    assert free(client)[0] == 1000
    clock.now += 86400
    assert free(client)[0] == 1000
    assert holds(client) == {}


def test_time_sliced_pods_sharing_a_named_gpu_are_counted(clock: Clock) -> None:
    """Time-slicing, 2 GPUs x 4 replicas; six 1-replica pods run, three per GPU, and
    dcgm-exporter without ``--kubernetes-virtual-gpus`` names one per GPU (p0, p1). The four
    others' requests take the named GPUs' free replicas: 2 free, not 6 (1de2f0e marked nothing,
    both GPUs being named, yet counted the four pods as placed)."""
    fleet = Fleet(clock, n_gpus=2, replicas=4)
    fleet.pods = [{"name": f"p{i}", "gpus": 1, "phase": "Running"} for i in range(6)]
    fleet.named = {0: f"{NS}/p0", 1: f"{NS}/p1"}
    (node,) = fleet.snapshot().nodes
    assert [g.free_milli for g in node.gpus] == [0, 500]
    assert node.gpu_pods == frozenset(f"{NS}/p{i}" for i in range(6))


def test_a_pod_whose_devices_find_no_replica_is_not_counted_placed(clock: Clock) -> None:
    """1 GPU x 2 replicas, p0 named on it, p1 and p2 unnamed: one free replica takes p1's
    request; p2's finds none, so the snapshot does not count p2's GPU use (a hold of it stays)."""
    fleet = Fleet(clock, n_gpus=1, replicas=2)
    fleet.pods = [{"name": f"p{i}", "gpus": 1, "phase": "Running"} for i in range(3)]
    fleet.named = {0: f"{NS}/p0"}
    (node,) = fleet.snapshot().nodes
    assert [g.free_milli for g in node.gpus] == [0]
    assert node.gpu_pods == frozenset({f"{NS}/p0", f"{NS}/p1"})


def test_an_unstarted_kept_share_is_not_absorbed_by_foreign_use(
    client: TestClient, clock: Clock
) -> None:
    """Pod ``x`` (500 milli, no FleetMind hold) runs on the only GPU (about 506 milli free); ``s0``
    (400) is held there and listed Pending. Its share is in no reading yet, so it counts in full
    (about 106 free) and ``s1`` (400) is refused. 62aefe9 let ``x``'s framebuffer absorb ``s0``
    (506 free) and placed ``s1``: 1300 milli handed out on one GPU."""
    fleet = Fleet(clock, n_gpus=1)
    client.app.state.services.telemetry = fleet
    fleet.busy = {0}
    fleet.pods.append({"name": "x", "annotations": {ANN_MILLI: "500"}, "phase": "Running"})
    (read,) = free(client)
    assert schedule(client, share_pod("s0", 400)) == NODE
    fleet.pods.append({"name": "s0", "annotations": {ANN_MILLI: "400"}})
    clock.now += 600
    assert free(client) == [read - 400]
    assert schedule(client, share_pod("s1", 400)) is None


def test_a_gpu_count_pod_pulling_its_image_keeps_its_gpu(client: TestClient, clock: Clock) -> None:
    """A ``gpu-count`` annotation pod (1000 milli, no ``nvidia.com/gpu`` request) is listed
    Pending while its image is pulled: its GPU reads idle, so its hold stays and a second one is
    refused. Once it runs, its GPU reads busy and the hold ends: counted once. 62aefe9 ended the
    hold on listing and placed the second pod on the idle GPU."""
    fleet = Fleet(clock, n_gpus=1)
    client.app.state.services.telemetry = fleet
    ann = {ANN_MILLI: "1000", "annotation_alibabacloud_com_gpu_count": "1"}
    assert schedule(client, share_pod("g0", 1000)) == NODE
    fleet.pods.append({"name": "g0", "annotations": ann})
    clock.now += 600
    assert free(client) == [0]
    assert schedule(client, share_pod("g1", 1000)) is None
    fleet.pods[-1]["phase"] = "Running"
    fleet.busy = {0}
    (gpu,) = fleet.snapshot().nodes[0].gpus
    assert free(client) == [gpu.free_milli]  # the reading alone: the hold no longer counts
    clock.now += 600
    assert free(client) == [gpu.free_milli]
    assert schedule(client, share_pod("g1", 1000)) is None


def _row(key: str, gpu: int, milli: int) -> Any:
    return SimpleNamespace(pod_key=key, pod_uid="u-" + key, cluster="c", node="n", gpus=[gpu],
                           gpu_milli=milli, cpu_milli=1000, memory_mib=100, bound_ts=None,
                           expires_ts=1e12)  # fmt: skip


def _snap(free_milli: list[int], pods: list[str], pending: frozenset[str] | None) -> FleetSnapshot:
    gpus = [GpuState(index=i, model="A100", free_milli=f) for i, f in enumerate(free_milli)]
    node = NodeState(name="n", cluster="c", gpus=gpus, pods=frozenset(pods),
                     pod_uids=frozenset("u-" + p for p in pods), gpu_pods=frozenset(),
                     pending_pods=pending, cpu_milli=96000, cpu_milli_free=96000,
                     memory_mib=10**6, memory_mib_free=10**6)  # fmt: skip
    return FleetSnapshot("prometheus", [node], 0.0)


@pytest.mark.parametrize(
    ("pending", "left"),
    [(None, [300]), (frozenset({"ns/b"}), [300]), (frozenset(), [600])],
)
def test_a_kept_share_counts_in_full_until_its_pod_runs(
    pending: frozenset[str] | None, left: list[int]
) -> None:
    """Foreign use (a share pod with no hold, 400 milli of framebuffer) on GPU 0 and kept ``b``
    (300, held on GPU 0): while ``b`` is not running (or telemetry cannot tell) it counts in full
    (300 left); once it runs, the reading may hold it (the residual case: a running kept share
    that has allocated nothing yet beside foreign use counts as nothing, 600)."""
    snap = _snap([600], ["ns/b", "ns/x"], pending)
    res = _view([_row("ns/b", 0, 300)], snap)
    assert [g.free_milli - res.gpu_used("c", "n", g.index) for g in snap.nodes[0].gpus] == left


def test_pending_pods_come_from_the_phase_series() -> None:
    """``NodeState.pending_pods``: listed pods in phase ``Pending`` (or ``Unknown``) = 1, from raw
    ``kube_pod_status_phase`` series (kube-state-metrics writes one 0/1 series per phase of every
    pod: Pending, Running, Succeeded, Failed, Unknown; its docs/metrics/workload/pod-metrics.md) or
    from the fleet query's answers (``pod_phase``: only pods not running; ``phase_running``: a
    count per cluster); ``None`` where no Pending/Running phase is reported at all."""
    alloc = ("kube_node_status_allocatable", {"node": NODE, "resource": "cpu"}, 96.0)
    pods = [
        ("kube_pod_info", {"namespace": NS, "pod": p, "uid": "u-" + p, "node": NODE}, 1.0)
        for p in ("a", "b", "c")
    ]
    phases = [
        ("kube_pod_status_phase", {"namespace": NS, "pod": "a", "phase": "Running"}, 1.0),
        ("kube_pod_status_phase", {"namespace": NS, "pod": "a", "phase": "Pending"}, 0.0),
        ("kube_pod_status_phase", {"namespace": NS, "pod": "b", "phase": "Running"}, 1.0),
        ("kube_pod_status_phase", {"namespace": NS, "pod": "c", "phase": "Running"}, 0.0),
        ("kube_pod_status_phase", {"namespace": NS, "pod": "c", "phase": "Pending"}, 1.0),
    ]
    (node,) = build_nodes([], [alloc, *pods, *phases])
    assert node.pending_pods == frozenset({f"{NS}/c"})
    answers = [
        ("phase_running", {}, 2.0),
        ("pod_phase", {"namespace": NS, "pod": "c", "phase": "Pending"}, 1.0),
    ]
    (node,) = build_nodes([], [alloc, *pods, *answers])
    assert node.pending_pods == frozenset({f"{NS}/c"})
    (node,) = build_nodes([], [alloc, *pods])
    assert node.pending_pods is None
    assert "pod_phase" in fleet_queries()
