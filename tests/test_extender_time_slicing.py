"""The kube-scheduler extender on time-sliced GPUs.

The NVIDIA device plugin's ``sharing.timeSlicing`` advertises ``replicas`` ``nvidia.com/gpu``
devices per physical GPU, and "each replica can be handed out independently to a pod"
(https://docs.nvidia.com/datacenter/cloud-native/gpu-operator/latest/gpu-sharing.html). The
telemetry gives a GPU that ``k`` of ``r`` replicas hold ``1000 * (r - k) // r`` free
(``NodeState.gpu_replicas``); the extender must ask one replica (``1000 // r``) per
``nvidia.com/gpu`` there, not a whole GPU, or a node with free replicas is refused once each of
its GPUs holds a pod.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fastapi.testclient import TestClient

from fleetmind.serving.app import create_app
from fleetmind.serving.scheduler.extender import NodeIndex, decide
from fleetmind.serving.scheduler.placement import BestFitPlacer, Reservations
from fleetmind.serving.settings import Settings
from fleetmind.serving.telemetry.base import FleetSnapshot, GpuState, NodeState
from fleetmind.serving.telemetry.sim import SimSource


def _node(name: str, free: int, replicas: int = 1) -> NodeState:
    return NodeState(
        name=name,
        cluster="k8s",
        gpus=[GpuState(index=0, model="A100", free_milli=free)],
        cpu_milli=32_000,
        cpu_milli_free=32_000,
        memory_mib=131_072,
        memory_mib_free=131_072,
        gpu_replicas=replicas,
    )


def _args(gpus: str = "1", ann: dict[str, str] | None = None, name: str = "p") -> dict[str, Any]:
    limits = {"cpu": "1", "memory": "1Gi"}
    if gpus:
        limits["nvidia.com/gpu"] = gpus
    pod = {
        "metadata": {
            "name": name,
            "namespace": "ml",
            "uid": f"uid-{name}",
            "annotations": ann or {},
        },
        "spec": {"containers": [{"name": "main", "resources": {"limits": limits}}]},
    }
    return {"Pod": pod, "NodeNames": ["ts", "whole"]}


def _decide(args: dict[str, Any], nodes: list[NodeState]) -> Any:
    snap = FleetSnapshot(source="test", nodes=nodes)
    return decide(args, snap, Reservations(), BestFitPlacer(), NodeIndex())


def test_a_time_sliced_gpu_with_free_replicas_takes_one_more_pod() -> None:
    """One of four replicas taken (750 free): a ``nvidia.com/gpu: 1`` pod fits there (250); the
    whole-GPU node whose GPU is taken still fails, with the whole GPU it needs."""
    req, d = _decide(_args(), [_node("ts", 750, replicas=4), _node("whole", 0)])
    assert [o.node for o in d.options] == ["ts"] and d.replicas == {"ts": 4}
    assert req.need(4) == 250 and req.job(replicas=4).gpu_milli == 250
    assert d.failed["whole"].startswith("FleetMind: not enough free GPUs (")
    # all four replicas taken: no room, and the reason names the replica's share
    _, full = _decide(_args(), [_node("ts", 0, replicas=4), _node("whole", 0)])
    assert full.options == [] and "not enough free GPUs" in full.failed["ts"]


def _multi(name: str, free: list[int], replicas: int) -> NodeState:
    node = _node(name, 0, replicas)
    node.gpus = [GpuState(index=i, model="A100", free_milli=f) for i, f in enumerate(free)]
    return node


def test_several_replicas_in_one_pod_take_one_replica_of_as_many_gpus() -> None:
    """``nvidia.com/gpu: 2`` on a time-sliced node: the device plugin grants it unless
    ``failRequestsGreaterThanOne`` is set ("Setting ``failRequestsGreaterThanOne=true`` is
    recommended, but it is set to ``false`` by default to retain backwards compatibility": the
    time-slicing section of NVIDIA/k8s-device-plugin's README), handing out two replica devices.
    Its default ``distributed`` allocation policy picks them one at a time from the GPU with the
    fewest replicas allocated (``greedyAlloc`` with the distributed comparator, ``distributedAlloc``
    in older releases, ``internal/rm/allocate.go``), so it may give the pod two replicas of one GPU.
    FleetMind holds one replica (``1000 // r``) on each of two GPUs as its estimate until the
    telemetry shows where the pod really runs; it used to refuse every time-sliced node for it as
    unresolvable."""
    req, d = _decide(_args("2"), [_multi("ts", [750, 500], 4), _node("whole", 1000)])
    assert [o.node for o in d.options] == ["ts"] and d.options[0].gpus in ((0, 1), (1, 0))
    job = req.job(replicas=d.replicas["ts"])
    assert (job.num_gpu, job.gpu_milli) == (2, 250)
    assert "the pod's 2" in d.unresolvable["whole"]  # one whole GPU there
    # one GPU with a free replica: refused (resolvable: a replica freed elsewhere fits it)
    _, busy = _decide(_args("2"), [_multi("ts", [750, 0], 4), _node("whole", 0)])
    assert busy.options == [] and "each replica on its own GPU" in busy.failed["ts"]


def test_several_replicas_on_a_one_gpu_time_sliced_node_say_why() -> None:
    """FleetMind does not hold two replicas of one GPU for one pod (the device plugin may grant
    them there): a one-GPU node is refused with the reason."""
    _, d = _decide(_args("2"), [_node("ts", 1000, replicas=4), _node("whole", 1000)])
    assert d.options == []
    assert d.unresolvable["ts"] == (
        "FleetMind: node has fewer GPUs than the pod's 2 (FleetMind holds each replica on its own GPU)"
    )


def test_the_hold_of_several_replicas_is_one_replica_per_gpu(tmp_path: Path) -> None:
    """Filter holds the two replicas (250 milli on each of two GPUs), so the node's remaining
    free replicas are what kube-scheduler's next pod sees."""
    settings = Settings(
        database_url=f"sqlite:///{tmp_path}/ts2.db",
        rca_model="baseline:upstream-coverage",
        placement_model="heuristic:builtin-bestfit",
        incident_worker=False,
    )
    with TestClient(create_app(settings)) as c:
        c.app.state.services.telemetry = SimSource([_multi("ts", [250, 250], 4)])
        first = c.post("/api/v1/scheduler/filter", json=_args("2", name="p0")).json()
        again = c.post("/api/v1/scheduler/filter", json=_args("1", name="p1")).json()
        assert first["NodeNames"] == ["ts"] and again["NodeNames"] == []
        rows = c.app.state.services.reservations.rows()
        assert [(sorted(r["gpus"]), r["gpu_milli"]) for r in rows] == [([0, 1], 250)]


def test_sharing_annotations_keep_their_share_on_time_sliced_nodes() -> None:
    """A pod sized by ``alibabacloud.com/gpu-milli`` asks that share wherever it lands."""
    ann = {"alibabacloud.com/gpu-milli": "500"}
    req, d = _decide(_args("", ann), [_node("ts", 250, replicas=4), _node("whole", 1000)])
    assert not req.device_gpus and req.need(4) == 500
    assert [o.node for o in d.options] == ["whole"] and d.replicas == {}


def test_the_hold_on_a_time_sliced_node_is_one_replica(tmp_path: Path) -> None:
    """Filter holds the lone node that passes (kube-scheduler skips prioritize then,
    ``schedule_one.go``): on a time-sliced node the hold is one replica, so the node takes
    exactly its free replicas and refuses the next pod."""
    settings = Settings(
        database_url=f"sqlite:///{tmp_path}/ts.db",
        rca_model="baseline:upstream-coverage",
        placement_model="heuristic:builtin-bestfit",
        incident_worker=False,
    )
    with TestClient(create_app(settings)) as c:
        nodes = [_node("ts", 750, replicas=4), _node("whole", 0)]
        c.app.state.services.telemetry = SimSource(nodes)
        passed = []
        for i in range(4):
            out = c.post("/api/v1/scheduler/filter", json=_args(name=f"p{i}")).json()
            passed.append(out["NodeNames"])
        assert passed == [["ts"], ["ts"], ["ts"], []]
        rows = c.app.state.services.reservations.rows()
        assert sorted(r["gpu_milli"] for r in rows) == [250, 250, 250]


def test_exclusive_gpus_come_first_in_a_mixed_fleet() -> None:
    """Scores of separate placer calls are not comparable (a policy's own pick against another
    call's rank), so a fleet mixing time-sliced and whole-GPU nodes is not merged by score: the
    whole GPU first (the device plugin's exclusive GPU), then the replica, re-scored in that
    order so prioritize gives the choice 10 and the rest less."""
    nodes = [_node("ts", 750, replicas=4), _node("whole", 1000)]
    _, d = _decide(_args(), nodes)
    assert [o.node for o in d.options] == ["whole", "ts"]
    assert [o.score for o in d.options] == [0.0, -1.0]
    assert d.scores() == {"whole": 10, "ts": 4}  # the best of the others: OTHERS_MAX


def test_a_replica_label_above_1000_asks_one_milli_not_zero() -> None:
    """A bogus ``nvidia.com/gpu.replicas`` (1024) would ask 0 milli, which no job may ask (422
    inside the extender: a 500 for every GPU pod); it asks the smallest share, one milli."""
    req, d = _decide(_args(), [_node("ts", 1000, replicas=1024), _node("whole", 0)])
    assert req.need(1024) == 1 and [o.node for o in d.options] == ["ts"]
