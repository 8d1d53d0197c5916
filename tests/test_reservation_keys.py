"""A ``reserve=true`` placement's hold and a pod's hold never share a key.

Pods are held under ``namespace/name``; placement jobs were held under ``placement/<job id>``, which
is the key of the pod ``<job id>`` in namespace ``placement`` (a valid DNS-1123 label). So that
pod's extender call replaced the job's hold (an upsert on one key: the job's GPUs free again, then
booked twice), its ``/bound`` on another node answered ``"moved"`` and dropped the job's hold, and
telemetry listing it ended the job's hold. Jobs are now held under ``placement:<job id>``: ``:`` is
in no DNS-1123 label (Kubernetes, "Object Names and IDs": lower-case alphanumerics and ``-``), so
no pod key equals it.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from serving_helpers import two_a100_hosts

from fleetmind.serving.app import create_app
from fleetmind.serving.scheduler.reservations import DbReservations, job_key, reservations_table
from fleetmind.serving.settings import Settings
from fleetmind.serving.telemetry.sim import SimSource

os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")


@pytest.fixture
def client(tmp_path: Path) -> Iterator[TestClient]:
    settings = Settings(
        database_url=f"sqlite:///{tmp_path}/keys.db",
        rca_model="baseline:upstream-coverage",
        placement_model="heuristic:builtin-bestfit",
        incident_worker=False,
    )
    with TestClient(create_app(settings)) as c:
        c.app.state.services.telemetry = SimSource(two_a100_hosts())
        assert isinstance(c.app.state.services.reservations, DbReservations)
        with c.app.state.services.db.write() as conn:
            conn.execute(reservations_table.delete())
        yield c


def _reserve(c: TestClient, job_id: str) -> str:
    r = c.post("/api/v1/placements", json={"job_id": job_id, "num_gpu": 1, "reserve": True})
    assert r.status_code == 200, r.text
    return r.json()["node"]


def _pod(name: str) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": "placement", "uid": f"uid-{name}"},
        "spec": {"containers": [{"name": "m", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]},
    }


def _held(c: TestClient) -> dict[str, str]:
    return {r["pod_key"]: r["node"] for r in c.app.state.services.reservations.rows()}


def test_the_job_key_is_no_pod_key() -> None:
    assert job_key("web-0") == "placement:web-0"


def test_a_pod_in_namespace_placement_does_not_replace_a_jobs_hold(client: TestClient) -> None:
    job_node = _reserve(client, "web-0")
    other = ({"gpu-a", "gpu-b"} - {job_node}).pop()
    # the pod placement/web-0 is scored: the job's GPU is taken, so only the other node can win
    r = client.post(
        "/api/v1/scheduler/prioritize", json={"Pod": _pod("web-0"), "NodeNames": [job_node, other]}
    )
    assert r.status_code == 200, r.text
    assert [h["Host"] for h in r.json() if h["Score"] == 10] == [other]
    assert _held(client) == {"placement:web-0": job_node, "placement/web-0": other}
    # both GPUs held: a third job fits nowhere (before: the pod's upsert freed the job's GPU)
    r = client.post("/api/v1/placements", json={"job_id": "x", "num_gpu": 1, "reserve": True})
    assert r.status_code == 409, r.text


def test_bound_of_a_pod_in_namespace_placement_keeps_a_jobs_hold(client: TestClient) -> None:
    job_node = _reserve(client, "job-7")
    other = ({"gpu-a", "gpu-b"} - {job_node}).pop()
    r = client.post(
        "/api/v1/scheduler/bound",
        json={"PodName": "job-7", "PodNamespace": "placement", "PodUID": "u7", "Node": other},
    )
    assert r.status_code == 200 and r.json()["Outcome"] == "unknown", r.text  # before: "moved"
    assert _held(client) == {"placement:job-7": job_node}


def test_telemetry_of_a_pod_in_namespace_placement_does_not_end_a_jobs_hold(
    client: TestClient,
) -> None:
    job_node = _reserve(client, "job-8")
    services = client.app.state.services
    services.telemetry = SimSource(two_a100_hosts({job_node: frozenset({"placement/job-8"})}))
    view = services.reservations.view(services.telemetry.snapshot())
    assert view.gpu_items() == [(("k8s", job_node, 0), 1000)]
