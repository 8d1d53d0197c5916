"""A NUL in the ``alibabacloud.com/gpu-card-model`` annotation of a GPU pod.

Annotations are free text to the API server, and JSON carries ``\\u0000``. A NUL after a valid
model (``"H100|\\u0000x"``) let a node pass, and the placement request built for it
(``JobSpec.gpu_model``, which refuses NUL) raised: filter and prioritize answered 500. The pod is
now refused like the other unplaceable GPU requests: every node unresolvable, with the reason
(kube-scheduler drops the body of any answer but 200).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")

from fleetmind.serving.app import create_app  # noqa: E402
from fleetmind.serving.settings import Settings  # noqa: E402
from fleetmind.serving.telemetry.base import GpuState, NodeState  # noqa: E402
from fleetmind.serving.telemetry.sim import SimSource  # noqa: E402

FILTER, PRIO = "/api/v1/scheduler/filter", "/api/v1/scheduler/prioritize"


@pytest.fixture()
def client(tmp_path: Path) -> Iterator[TestClient]:
    settings = Settings(
        database_url=f"sqlite:///{tmp_path}/fm.db",
        rca_model="baseline:upstream-coverage",
        placement_model="heuristic:builtin-bestfit",
        incident_worker=False,
    )
    with TestClient(create_app(settings), raise_server_exceptions=False) as c:
        nodes = [
            NodeState(f"g{i}", "local", [GpuState(j, "NVIDIA H100") for j in range(8)],
                      96_000, 96_000, 500_000, 500_000)
            for i in (1, 2)
        ]  # fmt: skip
        c.app.state.services.telemetry = SimSource(nodes)
        yield c


def _body(model: str, gpus: str | None = "1") -> str:
    limits = f'"nvidia.com/gpu":"{gpus}"' if gpus else '"cpu":"1"'
    return (
        '{"Pod":{"metadata":{"name":"p","namespace":"ml","uid":"u1","annotations":'
        f'{{"alibabacloud.com/gpu-card-model":"{model}"}}}},"spec":{{"containers":[{{"name":"a",'
        f'"resources":{{"limits":{{{limits}}}}}}}]}}}},"Nodes":null,"NodeNames":["g1","g2"]}}'
    )


@pytest.mark.parametrize("model", ["H100|\\u0000x", "H100\\u0000", "\\u0000H100"])
def test_a_nul_in_the_model_fails_every_node_with_the_reason(
    client: TestClient, model: str
) -> None:
    headers = {"Content-Type": "application/json"}
    r = client.post(FILTER, content=_body(model), headers=headers)
    assert r.status_code == 200, r.text
    out = r.json()
    assert out["NodeNames"] == [] and set(out["FailedAndUnresolvableNodes"]) == {"g1", "g2"}
    assert "NUL" in out["FailedAndUnresolvableNodes"]["g1"]
    r = client.post(PRIO, content=_body(model), headers=headers)
    assert r.status_code == 200, r.text
    assert r.json() == [{"Host": "g1", "Score": 0}, {"Host": "g2", "Score": 0}]
    assert client.app.state.services.reservations.view().gpu_items() == []


def test_a_cpu_only_pod_ignores_its_model_annotation(client: TestClient) -> None:
    r = client.post(FILTER, content=_body("H100|\\u0000x", gpus=None),
                    headers={"Content-Type": "application/json"})  # fmt: skip
    assert r.status_code == 200, r.text
    assert r.json()["NodeNames"] == ["g1", "g2"]
