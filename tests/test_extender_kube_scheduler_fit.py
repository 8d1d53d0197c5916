"""How the extender's answers fare inside kube-scheduler: when an error (not a 200) is the right
answer, what its prioritize gap is worth against the default score plugins, holds of pods that ran
elsewhere, which policy decides in fallback, and the body limit of node lists.

Upstream behaviour (kubernetes/kubernetes):

* ``findNodesThatPassExtenders`` (``pkg/scheduler/schedule_one.go``) skips an ``ignorable``
  extender only when its ``Filter`` returns an error; a 200 that fails every node leaves the pod
  unschedulable. ``HTTPExtender.send`` (``pkg/scheduler/extender.go``) turns any status but 200
  into an error without reading the body ("failed %v with extender at URL %v, code %v").
* ``prioritizeNodes`` (same file) adds ``score * weight * (MaxNodeScore / MaxExtenderPriority)``
  (100 / 10) per node to the score plugins' sum; the default plugins' weights are in
  ``pkg/scheduler/apis/config/v1/default_plugins.go`` (TaintToleration 3, NodeAffinity 2,
  NodeResourcesFit 1, PodTopologySpread 2, InterPodAffinity 2, NodeResourcesBalancedAllocation 1,
  ImageLocality 1), each plugin's score normalised to 0..100; BalancedAllocation with CPU and
  memory scores ``(1 - |f_cpu - f_mem| / 2) * 100`` (``balanced_allocation.go``), 50..100.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from fastapi.testclient import TestClient

from fleetmind.data.paths import REPO_ROOT
from fleetmind.serving.app import create_app
from fleetmind.serving.db import Database
from fleetmind.serving.middleware import SCHEDULER_MAX_BYTES, BodyLimitMiddleware
from fleetmind.serving.scheduler.extender import (
    MAX_EXTENDER_PRIORITY,
    OTHERS_MAX,
    Decision,
)
from fleetmind.serving.scheduler.placement import Option
from fleetmind.serving.scheduler.reservations import DbReservations
from fleetmind.serving.schemas import JobSpec
from fleetmind.serving.settings import Settings
from fleetmind.serving.telemetry.base import FleetSnapshot, GpuState, NodeState
from fleetmind.serving.telemetry.prometheus import build_nodes, fleet_queries
from fleetmind.serving.telemetry.sim import SimSource

FILTER = "/api/v1/scheduler/filter"
PRIORITIZE = "/api/v1/scheduler/prioritize"


def _gpu_node(name: str, gpus: int = 8, missing: bool = False) -> NodeState:
    return NodeState(
        name,
        "local",
        [GpuState(i, "NVIDIA H100", missing=missing, healthy=not missing) for i in range(gpus)],
        96000,
        96000,
        500000,
        500000,
    )


def _cpu_node(name: str) -> NodeState:
    return NodeState(name, "local", [], 64000, 64000, 256000, 256000)


def _pod(gpu: str | None = "1", name: str = "p") -> dict[str, Any]:
    limits = {"cpu": "1", "memory": "1Gi"}
    if gpu is not None:
        limits["nvidia.com/gpu"] = gpu
    return {
        "metadata": {"name": name, "namespace": "ml", "uid": f"uid-{name}"},
        "spec": {"containers": [{"name": "main", "resources": {"limits": limits}}]},
    }


def _settings(tmp: Path, **kw: Any) -> Settings:
    base: dict[str, Any] = {
        "database_url": f"sqlite:///{tmp}/fm.db",
        "rca_model": "baseline:upstream-coverage",
        "placement_model": "heuristic:builtin-bestfit",
        "incident_worker": False,
    }
    return Settings(**{**base, **kw})


@pytest.fixture
def client(tmp_path: Path) -> Iterator[TestClient]:
    with TestClient(create_app(_settings(tmp_path))) as c:
        yield c


def _telemetry(c: TestClient, nodes: list[NodeState]) -> None:
    c.app.state.services.telemetry = SimSource(nodes)


# ------------------------------------------------------------- no GPU telemetry: an error
@pytest.mark.parametrize(
    "nodes",
    [[], [_cpu_node("cpu-1")], [_gpu_node("gpu-1", missing=True)]],
    ids=["empty", "cpu-nodes-only", "only-placeholder-gpus"],
)
def test_no_gpu_telemetry_is_a_503_that_ignorable_skips(
    client: TestClient, nodes: list[NodeState]
) -> None:
    """Prometheus up but no DCGM series: a GPU pod gets 503 (kube-scheduler skips an ignorable
    extender on an error only), not a 200 that fails every node; a CPU-only pod still passes."""
    _telemetry(client, nodes)
    args = {"Pod": _pod(), "NodeNames": ["gpu-1", "gpu-2"]}
    for path in (FILTER, PRIORITIZE):
        r = client.post(path, json=args)
        assert r.status_code == 503, r.text
        assert "no GPU" in r.json()["detail"] and "fleetmind doctor" in r.json()["detail"]
    cpu = {"Pod": _pod(gpu=None), "NodeNames": ["gpu-1", "cpu-1"]}
    r = client.post(FILTER, json=cpu)
    assert r.status_code == 200 and r.json()["NodeNames"] == ["gpu-1", "cpu-1"]


def test_candidates_all_unknown_is_a_503_some_unknown_fail_per_node(client: TestClient) -> None:
    _telemetry(client, [_gpu_node("gpu-1")])
    r = client.post(FILTER, json={"Pod": _pod(), "NodeNames": ["other-1", "other-2"]})
    assert r.status_code == 503, r.text
    assert "none of the 2 candidate node(s)" in r.json()["detail"]
    # one known: the documented per-node answer
    r = client.post(FILTER, json={"Pod": _pod(), "NodeNames": ["gpu-1", "other-1"]})
    assert r.status_code == 200, r.text
    out = r.json()
    assert out["NodeNames"] == ["gpu-1"]
    assert out["FailedNodes"] == {}  # unresolvable: preempting there would not change FleetMind
    assert out["FailedAndUnresolvableNodes"] == {
        "other-1": "FleetMind: no GPU telemetry for this node"
    }


# ------------------------------------------------------------------- the prioritize gap
def _decision(n: int, cpu_only: bool = False, gpu_nodes: frozenset[str] = frozenset()) -> Decision:
    names = [f"n{i}" for i in range(n)]
    options = [Option("local", name, (0,), float(-i)) for i, name in enumerate(names)]
    return Decision(names, options=options, cpu_only=cpu_only, gpu_nodes=gpu_nodes)


def test_the_choice_leads_every_other_node_by_six_points() -> None:
    for n in (2, 3, 11):
        scores = _decision(n).scores()
        assert scores["n0"] == MAX_EXTENDER_PRIORITY
        others = [scores[f"n{i}"] for i in range(1, n)]
        assert max(others) == OTHERS_MAX and min(others) == (0 if n > 2 else OTHERS_MAX)
        assert others == sorted(others, reverse=True)  # the policy's order kept
    # CPU-only pod: the CPU nodes first (4..3), the GPU nodes 2..0
    gpu = frozenset({"n3", "n4", "n5"})
    scores = _decision(6, cpu_only=True, gpu_nodes=gpu).scores()
    assert scores["n0"] == 10
    assert {scores["n1"], scores["n2"]} <= {3, 4} and {scores[g] for g in gpu} <= {0, 1, 2}
    assert max(scores[g] for g in gpu) == 2


def test_the_gap_beats_the_resource_plugins_and_not_a_stated_preference() -> None:
    """At the shipped weight the lead is 6 x 3 x 10 = 180 points: more than NodeResourcesFit's
    LeastAllocated (weight 1, 0..100) and BalancedAllocation (weight 1, 50..100) can take back
    together, less than a preferred NodeAffinity at full strength (weight 2 x 100); the former
    10-vs-9 scores led by 50 at weight 5, which LeastAllocated alone overturned."""
    config = yaml.safe_load((REPO_ROOT / "deploy" / "kube-scheduler-config.yaml").read_text())
    (ext,) = config["extenders"]
    weight = ext["weight"]
    scores = _decision(5).scores()
    lead = min(scores["n0"] - s for n, s in scores.items() if n != "n0")
    points = lead * weight * (100 // MAX_EXTENDER_PRIORITY)  # prioritizeNodes' finalscore
    resources = 1 * 100 + 1 * (100 - 50)  # LeastAllocated + BalancedAllocation, at their widest
    node_affinity = 2 * 100
    assert resources < points < node_affinity, points


def test_prioritize_answers_the_wide_gap(client: TestClient) -> None:
    _telemetry(client, [_gpu_node("gpu-1"), _gpu_node("gpu-2"), _gpu_node("gpu-3")])
    args = {"Pod": _pod(), "NodeNames": ["gpu-1", "gpu-2", "gpu-3"]}
    scores = sorted(h["Score"] for h in client.post(PRIORITIZE, json=args).json())
    assert scores[-1] == 10 and scores[-2] <= OTHERS_MAX


# -------------------------------------------------------------------- holds and telemetry
def test_a_hold_ends_when_telemetry_shows_the_pod_on_another_node(tmp_path: Path) -> None:
    """Another node ends the hold only with the held pod's uid (kube_pod_info's ``uid`` label)."""
    db = Database(f"sqlite:///{tmp_path}/holds.db")
    db.migrate()
    res = DbReservations(db)
    job = JobSpec(num_gpu=4, gpu_milli=1000, cpu_milli=48000, memory_mib=0)
    res.hold("default/train-0", Option("local", "node-a", (0, 1, 2, 3), 1.0), job, uid="u-1")
    a, b = _gpu_node("node-a"), _gpu_node("node-b")
    assert res.view(FleetSnapshot("sim", [a, b], time.time())).gpu_used("local", "node-a", 0)
    b.pods = frozenset({"default/train-0"})  # kube-scheduler bound it to node-b after all
    b.pod_uids = frozenset({"u-1"})
    view = res.view(FleetSnapshot("sim", [a, b], time.time()))
    assert view.gpu_used("local", "node-a", 0) == 0 and view.cpu_used("local", "node-a") == 0
    # the same uid in another cluster is not this hold's cluster: the hold stays
    other = NodeState("node-b", "elsewhere", [], pods=frozenset({"default/train-0"}))
    other.pod_uids = frozenset({"u-1"})
    b.pods, b.pod_uids = frozenset(), frozenset()
    view = res.view(FleetSnapshot("sim", [a, b, other], time.time()))
    assert view.gpu_used("local", "node-a", 0) == 1000


def _holds_with_an_old_incarnation(tmp_path: Path, uid: str | None) -> DbReservations:
    """A hold of ``ml/job-worker-0`` on node-a, for the pod of uid ``uid``."""
    db = Database(f"sqlite:///{tmp_path}/holds.db")
    db.migrate()
    res = DbReservations(db)
    job = JobSpec(num_gpu=8, gpu_milli=1000, cpu_milli=48000, memory_mib=0)
    res.hold("ml/job-worker-0", Option("local", "node-a", tuple(range(8)), 1.0), job, uid=uid)
    return res


def test_a_re_created_pod_keeps_its_hold_while_its_namesake_is_still_scraped(
    tmp_path: Path,
) -> None:
    """A pod deleted and created again under its name (a StatefulSet's, a training operator's
    ``job-worker-0``) is a new pod with a new ``metadata.uid`` (Kubernetes' object names and IDs:
    "a UID ... to distinguish between historical occurrences of similar entities"); the old one's
    ``kube_pod_info`` stays in Prometheus until its staleness (a scrape interval). Its sighting on
    another node must not free the new pod's GPUs for a third pod."""
    res = _holds_with_an_old_incarnation(tmp_path, uid="uid-new")
    a, b = _gpu_node("node-a"), _gpu_node("node-b")
    b.pods, b.pod_uids = frozenset({"ml/job-worker-0"}), frozenset({"uid-old"})
    view = res.view(FleetSnapshot("sim", [a, b], time.time()))
    assert view.gpu_used("local", "node-a", 0) == 1000 and view.cpu_used("local", "node-a")
    # the new pod itself, by its uid, on another node: the hold is done
    b.pod_uids = frozenset({"uid-old", "uid-new"})
    assert res.view(FleetSnapshot("sim", [a, b], time.time())).gpu_used("local", "node-a", 0) == 0
    # on the held node the name is enough, whatever the uids (its usage is in the scrape)
    b.pods, b.pod_uids = frozenset(), frozenset()
    a.pods = frozenset({"ml/job-worker-0"})
    assert res.view(FleetSnapshot("sim", [a, b], time.time())).gpu_used("local", "node-a", 0) == 0


def test_a_hold_without_a_uid_ends_on_its_own_node_only(tmp_path: Path) -> None:
    res = _holds_with_an_old_incarnation(tmp_path, uid=None)
    a, b = _gpu_node("node-a"), _gpu_node("node-b")
    b.pods, b.pod_uids = frozenset({"ml/job-worker-0"}), frozenset({"uid-old"})
    assert res.view(FleetSnapshot("sim", [a, b], time.time())).gpu_used("local", "node-a", 0)
    a.pods = frozenset({"ml/job-worker-0"})
    assert res.view(FleetSnapshot("sim", [a, b], time.time())).gpu_used("local", "node-a", 0) == 0


def test_telemetry_without_uids_ends_a_hold_by_name_on_another_node(tmp_path: Path) -> None:
    """A kube-state-metrics series whose ``uid`` was relabelled or federated away: the name on
    another node is all telemetry can say, and a pod bound elsewhere must not keep its phantom
    hold for the whole TTL."""
    res = _holds_with_an_old_incarnation(tmp_path, uid="uid-new")
    a, b = _gpu_node("node-a"), _gpu_node("node-b")
    b.pods = frozenset({"ml/job-worker-0"})  # no pod_uids on this node
    assert res.view(FleetSnapshot("sim", [a, b], time.time())).gpu_used("local", "node-a", 0) == 0


def test_kube_state_metrics_uids_reach_the_snapshot() -> None:
    """``kube_pod_info{uid}`` (kube-state-metrics docs/metrics/workload/pod-metrics.md) is kept by
    the server-mode query and lands in ``NodeState.pod_uids`` of the pod's node."""
    assert "uid" in fleet_queries()["kube_pod_info"].split("(")[1].split(")")[0]
    ksm = [
        ("kube_pod_info", {"namespace": "ml", "pod": "w-0", "uid": "u-old", "node": "b"}, 1.0),
        ("kube_pod_info", {"namespace": "ml", "pod": "w-0", "uid": "u-new", "node": "a"}, 1.0),
        ("kube_pod_info", {"namespace": "ml", "pod": "x", "node": "a"}, 1.0),
        ("kube_node_status_allocatable", {"node": "a", "resource": "cpu"}, 8.0),
        ("kube_node_status_allocatable", {"node": "b", "resource": "cpu"}, 8.0),
    ]
    nodes = {n.name: n for n in build_nodes([], ksm)}
    assert nodes["a"].pod_uids == {"u-new"} and nodes["b"].pod_uids == {"u-old"}


# ---------------------------------------------------------------- the fallback's name
def test_the_fallback_policy_is_the_one_counted_and_named(tmp_path: Path) -> None:
    """Without the PPO model the extender decides with the registry's fallback and counts its
    decisions under that policy's name, the one GET /api/v1/models gives (not 'fallback'): the
    count grows under that name and under no other."""
    settings = _settings(tmp_path, placement_model=str(tmp_path / "absent"))
    with TestClient(create_app(settings)) as c:
        _telemetry(c, [_gpu_node("gpu-1")])
        model = c.get("/api/v1/models").json()["placement"]
        assert model["fallback_reason"] and model["method"].startswith("heuristic:")
        assert c.post(FILTER, json={"Pod": _pod(), "NodeNames": ["gpu-1"]}).status_code == 200
        text = c.get("/metrics").text
    # the served policy's series exist at 0 from the load on (Metrics.set_models), so a line of
    # the policy proves nothing: its filter count is what must have grown, and no other's
    from prometheus_client.parser import text_string_to_metric_families

    counted: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name == "fleetmind_placements_total" and s.labels["path"] == "filter":
                counted[s.labels["policy"]] = counted.get(s.labels["policy"], 0.0) + s.value
    assert counted.get(model["method"], 0.0) > 0, counted
    assert all(v == 0 for p, v in counted.items() if p != model["method"]), counted


# ----------------------------------------------------------- node lists and the body limit
def test_the_extender_takes_node_lists_beyond_the_global_body_limit(tmp_path: Path) -> None:
    """nodeCacheCapable: false sends every candidate's v1.Node (~15 KB each): the extender routes
    have their own limit (5,000 nodes x 16 KiB), other routes keep FLEETMIND_MAX_BODY_BYTES."""
    assert SCHEDULER_MAX_BYTES >= 5_000 * 16 * 1024
    with TestClient(create_app(_settings(tmp_path, max_body_bytes=2048))) as c:
        _telemetry(c, [_gpu_node(f"gpu-{i}") for i in range(8)])
        items = [{"metadata": {"name": f"gpu-{i}", "labels": {"pad": "x" * 600}}} for i in range(8)]
        args = {"Pod": _pod(), "Nodes": {"items": items}}
        assert len(json.dumps(args)) > 2048
        r = c.post(FILTER, json=args)
        assert r.status_code == 200, r.text
        assert len(r.json()["Nodes"]["items"]) == 8
        assert c.post("/api/v1/rca", json={"alerts": [], "pad": "x" * 4096}).status_code == 413


def test_an_operator_can_lower_the_extender_limit(tmp_path: Path) -> None:
    """FLEETMIND_MAX_SCHEDULER_BYTES sets the extender's limit (default the 5,000-node one), never
    below FLEETMIND_MAX_BODY_BYTES, as FLEETMIND_MAX_WEBHOOK_BYTES does for the webhook."""
    assert Settings.model_fields["max_scheduler_bytes"].default == SCHEDULER_MAX_BYTES
    settings = _settings(tmp_path, max_body_bytes=2048, max_scheduler_bytes=4096)
    with TestClient(create_app(settings)) as c:
        _telemetry(c, [_gpu_node("gpu-1")])
        for pad, status in ((3000, 200), (5000, 413)):
            items = [{"metadata": {"name": "gpu-1", "labels": {"pad": "x" * pad}}}]
            r = c.post(FILTER, json={"Pod": _pod(), "Nodes": {"items": items}})
            assert r.status_code == status, (pad, r.text)
    settings = _settings(tmp_path, max_body_bytes=8192, max_scheduler_bytes=4096)
    with TestClient(create_app(settings)) as c:
        _telemetry(c, [_gpu_node("gpu-1")])
        items = [{"metadata": {"name": "gpu-1", "labels": {"pad": "x" * 5000}}}]
        assert c.post(FILTER, json={"Pod": _pod(), "Nodes": {"items": items}}).status_code == 200


def test_the_extender_limit_applies_while_streaming() -> None:
    """A chunked body (no Content-Length) is counted as it arrives, against the route's limit."""
    seen: list[bytes] = []
    statuses: list[int] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        seen.append((await receive())["body"])
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":
            statuses.append(message["status"])

    mw = BodyLimitMiddleware(app, max_bytes=1024, scheduler_bytes=4096)
    for size in (3000, 5000):
        chunks = [
            {"type": "http.request", "body": b"x" * (size // 2), "more_body": True},
            {"type": "http.request", "body": b"x" * (size - size // 2), "more_body": False},
        ]

        async def receive(chunks: list[dict[str, Any]] = chunks) -> dict[str, Any]:
            return chunks.pop(0)

        scope = {"type": "http", "method": "POST", "path": FILTER, "headers": []}
        asyncio.run(mw(scope, receive, send))
    assert statuses == [200, 413] and seen == [b"x" * 3000]


# ------------------------------------------------------------------------- minor answers
def test_repeated_node_names_are_answered_once(client: TestClient) -> None:
    _telemetry(client, [_gpu_node("gpu-1"), _gpu_node("gpu-2")])
    args = {"Pod": _pod(), "NodeNames": ["gpu-1", "gpu-2", "gpu-1"]}
    assert client.post(FILTER, json=args).json()["NodeNames"] == ["gpu-1", "gpu-2"]
    hosts = [h["Host"] for h in client.post(PRIORITIZE, json=args).json()]
    assert hosts == ["gpu-1", "gpu-2"]


def test_a_pod_beyond_the_bounds_fails_every_node_with_the_reason(client: TestClient) -> None:
    """nvidia.com/gpu "100" is a valid pod no node holds: unresolvable on every node, with the
    reason (a 422 would reach the pod as an opaque 'code 422', or be skipped when ignorable)."""
    _telemetry(client, [_gpu_node("gpu-1")])
    for pod in (_pod(gpu="100"), _pod(gpu=None) | {"spec": {"containers": [
            {"name": "m", "resources": {"requests": {"cpu": "1e306"}}}]}}):  # fmt: skip
        args = {"Pod": pod, "NodeNames": ["gpu-1", "cpu-9"]}
        r = client.post(FILTER, json=args)
        assert r.status_code == 200, r.text
        out = r.json()
        assert out["NodeNames"] == [] and set(out["FailedAndUnresolvableNodes"]) == {
            "gpu-1",
            "cpu-9",
        }
        assert "supported" in out["FailedAndUnresolvableNodes"]["gpu-1"]
        r = client.post(PRIORITIZE, json=args)
        assert r.status_code == 200 and all(h["Score"] == 0 for h in r.json())


def test_a_job_bigger_than_any_node_says_so(client: TestClient) -> None:
    _telemetry(client, [_gpu_node("gpu-1"), _gpu_node("gpu-2")])
    r = client.post("/api/v1/placements", json={"num_gpu": 64})
    assert r.status_code == 409
    assert "no node has 64 healthy GPUs, free or not: the most on one node is 8" in r.text
