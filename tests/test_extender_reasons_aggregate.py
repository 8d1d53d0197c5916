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

import logging
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from fleetmind.serving.app import create_app
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
    telemetry causes says "held", and a placeholder GPU points at the exporter, not health."""
    nodes = [
        _node("busy", free=2),
        _node("noread", free=0, missing=True, healthy=False),
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
