"""A pod deleted and created again under its name on the same node keeps its new hold.

A StatefulSet recreates ``web-0`` under the same name with a new ``metadata.uid`` as soon as the
old one is deleted (Kubernetes ``pkg/controller/statefulset/stateful_set_control.go``: a missing
ordinal is created again), and the extender may hold it on the node the old one ran on. The old
pod's ``kube_pod_info{uid}`` series (kube-state-metrics ``docs/metrics/workload/pod-metrics.md``)
stays in the snapshot for a scrape interval plus the snapshot's age. That listing is another pod:
it used to end the new pod's hold by name on the held node, the GPU read free, and a second share
pod was placed on it (600 + 600 milli on a 1000-milli GPU). Where the node's telemetry carries no
uids at all, the name still ends the hold, as before uids were read.

Snapshots come from :func:`build_nodes` over kube-state-metrics and DCGM samples (the fleet of
``tests/test_scheduler_holds_unseen_usage.py``, each pod with its own uid); the extender routes
and ``/api/v1/fleet`` run as served. Deterministic: a fake clock, no timing asserts.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from test_scheduler_holds_unseen_usage import (
    NODE,
    NS,
    TTL_S,
    Clock,
    Fleet,
    free,
    holds,
    schedule,
    share_pod,
)

from fleetmind.serving.app import create_app
from fleetmind.serving.scheduler.placement import Option
from fleetmind.serving.schemas import JobSpec
from fleetmind.serving.settings import Settings
from fleetmind.serving.telemetry import base
from fleetmind.serving.telemetry.prometheus import ANN_MILLI


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


class UidFleet(Fleet):
    """:class:`Fleet` whose pods carry their own uid (``{"uid": ...}``; default ``u-<name>``),
    or none at all when ``with_uids`` is False (a ``uid`` label relabelled or federated away)."""

    with_uids = True

    def ksm(self) -> list[tuple[str, dict[str, str], float]]:
        uids = {p["name"]: p.get("uid", "u-" + p["name"]) for p in self.pods}
        out = []
        for name, lab, v in super().ksm():
            if "uid" in lab and lab.get("pod") in uids:
                lab = {**lab, "uid": uids[lab["pod"]]}
                if not self.with_uids:
                    lab.pop("uid")
            out.append((name, lab, v))
        return out


def _pod(name: str, milli: int, uid: str) -> dict[str, Any]:
    pod = share_pod(name, milli)
    pod["metadata"]["uid"] = uid
    return pod


def test_a_recreated_share_pod_keeps_its_hold_while_the_old_one_is_scraped(
    client: TestClient, clock: Clock
) -> None:
    fleet = UidFleet(clock, n_gpus=1)
    client.app.state.services.telemetry = fleet
    assert schedule(client, _pod("web-0", 600, "uid-old")) == NODE
    old = {"name": "web-0", "uid": "uid-old", "phase": "Running", "annotations": {ANN_MILLI: "600"}}
    fleet.pods.append(old)
    fleet.busy = {0}  # running: its framebuffer shows
    clock.now += 30
    assert free(client) == [400]
    # web-0 deleted (its process gone, the GPU idle) and created again at once with a new uid; the
    # old pod's series is still scraped
    fleet.busy = set()
    assert schedule(client, _pod("web-0", 600, "uid-new")) == NODE
    assert holds(client)[f"{NS}/web-0"]["pod_uid"] == "uid-new"
    assert free(client) == [400]  # read [1000]: the old listing ended the new hold by name
    assert schedule(client, _pod("other-0", 600, "uid-other")) is None  # was placed: 1200 milli
    # the old series goes stale, the new pod is listed: its share stays held (no gpu-index)
    fleet.pods = [{"name": "web-0", "uid": "uid-new", "annotations": {ANN_MILLI: "600"}}]
    clock.now += 30
    assert free(client) == [400]
    assert schedule(client, _pod("other-0", 600, "uid-other")) is None


@pytest.mark.parametrize(
    ("listed_uid", "with_uids", "held"),
    [
        ("uid-old", True, True),  # an earlier pod of that name: ends nothing
        ("uid-new", True, False),  # this very pod, its requests in the scrape
        ("uid-old", False, False),  # no uids on the node: the name is all there is
    ],
)
def test_a_cpu_hold_ends_on_the_held_node_only_by_its_own_uid(
    client: TestClient, clock: Clock, listed_uid: str, with_uids: bool, held: bool
) -> None:
    """A hold without GPUs: no GPU rule keeps it, the listing alone decides."""
    fleet = UidFleet(clock, n_gpus=1)
    fleet.with_uids = with_uids
    fleet.pods = [{"name": "web-0", "uid": listed_uid, "phase": "Running"}]
    res = client.app.state.services.reservations
    job = JobSpec(num_gpu=0, cpu_milli=4000, memory_mib=0)
    res.hold(f"{NS}/web-0", Option("local", NODE, (), 0.0), job, uid="uid-new")
    view = res.view(fleet.snapshot())
    assert view.cpu_used("local", NODE) == (4000 if held else 0)


def test_a_recreated_whole_gpu_pod_keeps_its_hold_while_the_old_request_is_charged(
    client: TestClient, clock: Clock
) -> None:
    """The old pod's ``nvidia_com_gpu`` request is charged to GPU 0 and places ``web-0`` by name
    (``NodeState.gpu_pods``); the new pod's hold of GPU 1 counts as well until it is listed (over,
    for a scrape, never under)."""
    fleet = UidFleet(clock, n_gpus=2)
    fleet.pods = [{"name": "web-0", "uid": "uid-old", "gpus": 1, "phase": "Running"}]
    res = client.app.state.services.reservations
    res.hold(f"{NS}/web-0", Option("local", NODE, (1,), 0.0), JobSpec(num_gpu=1), uid="uid-new")
    snap = fleet.snapshot()
    assert f"{NS}/web-0" in snap.nodes[0].gpu_pods
    assert res.view(snap).gpu_used("local", NODE, 1) == 1000
    fleet.pods = [{"name": "web-0", "uid": "uid-new", "gpus": 1}]  # listed, its request charged
    assert res.view(fleet.snapshot()).gpu_used("local", NODE, 1) == 0
