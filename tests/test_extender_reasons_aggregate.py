"""What an operator sees for a pod the extender keeps pending: reasons kube-scheduler can count,
the right cause named, CPU/memory judged as kube-scheduler judged it, and the holds made visible.

Upstream behaviour modelled (kubernetes/kubernetes):

* ``FitError.Error()`` (``pkg/scheduler/framework/types.go``) counts identical reason strings of
  all failed nodes ("0/150 nodes are available: 3 <reason>, 5 <reason>.", sorted), and the
  ``FailedScheduling`` event is cut at 1024 bytes (``truncateMessage`` in
  ``pkg/scheduler/schedule_one.go``, ``validation.NoteLengthLimit``).
* every node sent to an extender passed ``NodeResourcesFit``
  (``pkg/scheduler/framework/plugins/noderesources/fit.go``) with exact CPU/memory accounting.
"""

from __future__ import annotations

import dataclasses
import itertools
import logging
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from fleetmind.serving.app import create_app
from fleetmind.serving.scheduler.extender import ANN_GPU_MODEL
from fleetmind.serving.scheduler.placement import GPU_CAUSES
from fleetmind.serving.settings import Settings
from fleetmind.serving.telemetry.base import GpuState, NodeState
from fleetmind.serving.telemetry.sim import SimSource

FILTER = "/api/v1/scheduler/filter"
PRIORITIZE = "/api/v1/scheduler/prioritize"
HOLDS = "/api/v1/scheduler/holds"


@pytest.fixture
def client(tmp_path: Path) -> Iterator[TestClient]:
    settings = Settings(
        database_url=f"sqlite:///{tmp_path}/fm.db",
        rca_model="baseline:upstream-coverage",
        placement_model="heuristic:builtin-bestfit",
        incident_worker=False,
    )
    with TestClient(create_app(settings)) as c:
        yield c


def _pod(name: str, gpus: int, cpu: str = "8", memory: str = "32Gi") -> dict[str, Any]:
    req = {"cpu": cpu, "memory": memory, "nvidia.com/gpu": str(gpus)}
    return {
        "metadata": {"name": name, "namespace": "ml", "uid": f"u-{name}"},
        "spec": {"containers": [{"name": "m", "resources": {"requests": req, "limits": req}}]},
    }


def _node(name: str, free: int = 8, cpu_free: int = 95500, **gpu: Any) -> NodeState:
    gpus = [GpuState(i, "NVIDIA H100", free_milli=1000 if i < free else 0, **gpu) for i in range(8)]
    return NodeState(name, "local", gpus, 95500, cpu_free, 500000, 400000)


def _fit_error(total: int, answer: dict[str, Any]) -> str:
    """kube-scheduler's ``FitError.Error()`` over the extender's failed nodes, cut as the event."""
    counts: dict[str, int] = {}
    for failed in (answer["FailedNodes"], answer["FailedAndUnresolvableNodes"]):
        for reason in failed.values():
            counts[reason] = counts.get(reason, 0) + 1
    text = ", ".join(sorted(f"{v} {k}" for k, v in counts.items()))
    return f"0/{total} nodes are available: {text}."


def test_failed_nodes_aggregate_into_a_few_reasons_that_fit_the_event(client: TestClient) -> None:
    """150 nodes, each with its own free CPU and GPU count: the reasons are a handful, all
    FleetMind's, and the whole message fits the 1024-byte event (before: 75 distinct reasons,
    4,152 bytes, cut before any GPU reason)."""
    rnd = random.Random(2)
    nodes = [
        _node(f"gpu-{i:03d}", free=rnd.randint(0, 3), cpu_free=rnd.randint(0, 95) * 1000)
        for i in range(150)
    ]
    client.app.state.services.telemetry = SimSource(nodes)
    names = [n.name for n in nodes]
    r = client.post(FILTER, json={"Pod": _pod("train-0", 4, cpu="48"), "NodeNames": names})
    assert r.status_code == 200
    answer = r.json()
    assert not answer["NodeNames"]
    reasons = set(answer["FailedNodes"].values())
    assert reasons == {f"FleetMind: not enough free GPUs ({GPU_CAUSES['busy']})"}
    assert len(_fit_error(150, answer).encode()) <= 1024


def test_each_cause_is_named_apart(client: TestClient) -> None:
    """Busy per DCGM, no DCGM reading, unhealthy and held read differently; none of the
    telemetry causes says "held", and a placeholder GPU points at the exporter, not health
    (on a node that reports some GPUs: one reporting none is judged as an unknown node)."""
    noread = _node("noread", free=0, missing=True, healthy=False)
    noread.gpus[:2] = _node("noread", free=0).gpus[:2]  # 2 report, busy; 6 placeholders
    nodes = [
        _node("busy", free=2),
        noread,
        _node("sick", healthy=False),
        _node("free"),
    ]
    client.app.state.services.telemetry = SimSource(nodes)
    names = [n.name for n in nodes]
    first = client.post(PRIORITIZE, json={"Pod": _pod("a", 8), "NodeNames": names})
    assert {h["Host"]: h["Score"] for h in first.json()}["free"] == 10  # held for pod a
    answer = client.post(FILTER, json={"Pod": _pod("b", 4), "NodeNames": names}).json()
    failed = {**answer["FailedNodes"], **answer["FailedAndUnresolvableNodes"]}
    assert failed["busy"] == f"FleetMind: not enough free GPUs ({GPU_CAUSES['busy']})"
    assert failed["free"] == f"FleetMind: not enough free GPUs ({GPU_CAUSES['held']})"
    assert "fleetmind doctor" in failed["noread"] and "no DCGM reading" in failed["noread"]
    assert GPU_CAUSES["unhealthy"] in failed["sick"]
    assert "noread" in answer["FailedAndUnresolvableNodes"]
    assert all(v.startswith("FleetMind: ") for v in failed.values())


def test_sent_nodes_judge_cpu_by_holds_only(client: TestClient) -> None:
    """A node telemetry reads with 0 cores free and one with 1 core free both pass a 4-core pod
    (kube-scheduler's NodeResourcesFit passed them); a FleetMind CPU hold fails a node, so named."""
    nodes = [_node("zero", cpu_free=0), _node("one", cpu_free=1000)]
    client.app.state.services.telemetry = SimSource(nodes)
    pod = _pod("c", 1, cpu="4")
    answer = client.post(FILTER, json={"Pod": pod, "NodeNames": ["zero", "one"]}).json()
    assert sorted(answer["NodeNames"]) == ["one", "zero"]
    client.post(PRIORITIZE, json={"Pod": _pod("d", 1, cpu="4"), "NodeNames": ["one"]})
    answer = client.post(FILTER, json={"Pod": pod, "NodeNames": ["one"]}).json()
    assert answer["FailedNodes"] == {
        "one": "FleetMind: CPU held for pods FleetMind placed, not yet seen bound"
    }


def test_holds_are_listed_counted_and_logged(
    client: TestClient, caplog: pytest.LogCaptureFixture
) -> None:
    """Each new hold logs one INFO line; GET /holds lists it (bounded by ``limit``) and
    ``fleetmind_scheduler_holds`` counts it."""
    client.app.state.services.telemetry = SimSource([_node("n1"), _node("n2")])
    with caplog.at_level(logging.INFO, logger="fleetmind"):
        for name in ("h1", "h2"):
            client.post(PRIORITIZE, json={"Pod": _pod(name, 2), "NodeNames": ["n1", "n2"]})
    lines = [m for m in caplog.messages if m.startswith("scheduler hold: ")]
    assert len(lines) == 2 and "ml/h1" in lines[0]
    body = client.get(HOLDS, params={"limit": 1}).json()
    assert body["total"] == 2 and len(body["holds"]) == 1
    hold = body["holds"][0]
    assert hold["pod"] == "ml/h1" and hold["uid"] == "u-h1" and len(hold["gpus"]) == 2
    assert hold["cpu_milli"] == 8000 and hold["memory_mib"] == 32768
    assert 0 < hold["seconds_left"] <= 120 and hold["bound"] is False
    assert client.get(HOLDS, params={"limit": 0}).status_code == 422
    metrics = client.get("/metrics").text
    assert "fleetmind_scheduler_holds 2.0" in metrics


def test_placements_409_names_placeholder_gpus(client: TestClient) -> None:
    """POST /api/v1/placements' 409 uses the same phrase for GPUs without a DCGM reading."""
    client.app.state.services.telemetry = SimSource(
        [_node("n1", free=0, missing=True, healthy=False)]
    )
    r = client.post("/api/v1/placements", json={"num_gpu": 1, "gpu_milli": 1000})
    assert r.status_code == 409
    assert GPU_CAUSES["no_reading"] in r.json()["detail"]


def test_unknown_twin_and_wrong_model_nodes_aggregate(client: TestClient) -> None:
    """Node names in two clusters, unknown names and mixed MIG layouts fail with a few fixed,
    prefixed reasons and no ", " inside one, so the FitError fits the 1024-byte event (before:
    62 distinct reasons, 6,726 bytes for 60 twins; 11 distinct, 1,294 bytes for the MIG nodes)."""
    twins = [
        dataclasses.replace(_node(f"gpu-{i:03d}", free=0), cluster=c)
        for c in ("east", "west")
        for i in range(60)
    ]
    profiles = ["1g.10gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"]
    migs = []
    for i, pair in enumerate(itertools.combinations(profiles, 2)):
        gpus = [GpuState(k, f"NVIDIA A100-SXM4-80GB MIG {p}") for k, p in enumerate(pair * 2)]
        gpus.append(GpuState(9, "NVIDIA A100-SXM4-80GB", free_milli=0))
        migs.append(NodeState(f"mig-{i}", "local", gpus, 95500, 95500, 500000, 400000))
    plain = [_node(f"h100-{i}", free=0) for i in range(20)]
    client.app.state.services.telemetry = SimSource([*twins, *migs, *plain])
    names = [f"gpu-{i:03d}" for i in range(60)] + ["unknown-1", "unknown-2", "h100-0"]
    answer = client.post(FILTER, json={"Pod": _pod("x", 1), "NodeNames": names}).json()
    assert answer["FailedNodes"] == {
        "h100-0": f"FleetMind: not enough free GPUs ({GPU_CAUSES['busy']})"
    }
    reasons = set(answer["FailedAndUnresolvableNodes"].values())
    assert reasons == {
        "FleetMind: node name is in several clusters: set FLEETMIND_SCHEDULER_CLUSTER to this "
        "scheduler's cluster",
        "FleetMind: no GPU telemetry for this node",
    }
    assert len(_fit_error(len(names), answer).encode()) <= 1024
    pod = _pod("y", 2)
    pod["metadata"]["annotations"] = {ANN_GPU_MODEL: "H100"}
    names = [n.name for n in [*migs, *plain]]
    answer = client.post(FILTER, json={"Pod": pod, "NodeNames": names}).json()
    failed = {**answer["FailedNodes"], **answer["FailedAndUnresolvableNodes"]}
    assert set(failed.values()) == {
        "FleetMind: no GPU of the pod's model (H100) here",
        "FleetMind: not enough free H100 GPUs (in use per DCGM)",
    }, set(failed.values())
    assert all(", " not in r for r in failed.values())
    assert len(_fit_error(len(names), answer).encode()) <= 1024


def test_holds_listed_and_counted_as_the_placers_count_them(client: TestClient) -> None:
    """A hold whose pod telemetry shows on the held node no longer counts for the placers
    (``DbReservations.view``); GET /holds and ``fleetmind_scheduler_holds`` drop it too (before:
    both kept it until its TTL ran out, 2 minutes)."""
    client.app.state.services.telemetry = SimSource([_node("n1"), _node("n2")])
    for name in ("seen", "unseen"):
        client.post(PRIORITIZE, json={"Pod": _pod(name, 8), "NodeNames": ["n1", "n2"]})
    body = client.get(HOLDS).json()
    assert body["total"] == 2
    held_on = {h["pod"]: h["node"] for h in body["holds"]}
    node = held_on["ml/seen"]
    shown = dataclasses.replace(
        _node(node, free=0), pods=frozenset({"ml/seen"}), pod_uids=frozenset({"u-seen"})
    )
    other = "n2" if node == "n1" else "n1"
    client.app.state.services.telemetry = SimSource([shown, _node(other, free=0)])
    client.post(FILTER, json={"Pod": _pod("probe", 1), "NodeNames": [node]})  # a snapshot read
    body = client.get(HOLDS).json()
    assert body["total"] == 1 and [h["pod"] for h in body["holds"]] == ["ml/unseen"]
    assert "fleetmind_scheduler_holds 1.0" in client.get("/metrics").text
