"""A NUL in the ``alibabacloud.com/gpu-card-model`` annotation of a GPU pod.

Annotations are free text to the API server, and JSON carries ``\\u0000``. A NUL after a valid
model (``"H100|\\u0000x"``) let a node pass, and the placement request built for it
(``JobSpec.gpu_model``, which refuses NUL) raised: filter and prioritize answered 500. The pod is
now refused like the other unplaceable GPU requests: every node unresolvable, with the reason
(kube-scheduler drops the body of any answer but 200).

The allowed models become the placement request's ``gpu_model`` (at most 200 characters): the
``|``-joined text was cut at 200, so ``"-" * 250 + "H100"`` left only dashes, which ``JobSpec``
refuses (500 again), and a cut inside a name widened it (``A100-40GB`` cut to ``A100-``). Whole
entries that fit are now kept, a pod whose models fit none is refused with the reason, and any value
``JobSpec`` still refuses makes the pod unsupported instead of raising.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from serving_helpers import serving_settings

os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")

from fleetmind.serving.app import create_app  # noqa: E402
from fleetmind.serving.scheduler.extender import NodeIndex, decide, pod_request  # noqa: E402
from fleetmind.serving.scheduler.placement import BestFitPlacer, Reservations  # noqa: E402
from fleetmind.serving.telemetry.base import FleetSnapshot, GpuState, NodeState  # noqa: E402
from fleetmind.serving.telemetry.sim import SimSource  # noqa: E402

FILTER, PRIO = "/api/v1/scheduler/filter", "/api/v1/scheduler/prioritize"


@pytest.fixture()
def client(tmp_path: Path) -> Iterator[TestClient]:
    settings = serving_settings(tmp_path)
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


@pytest.mark.parametrize("model", ["-" * 250 + "H100", "H100-" + "x" * 200, " - |" + "z" * 201])
def test_a_model_list_that_fits_no_name_fails_every_node(client: TestClient, model: str) -> None:
    """Before: the text cut at 200 characters named no model and ``JobSpec`` raised (500)."""
    headers = {"Content-Type": "application/json"}
    r = client.post(FILTER, content=_body(model), headers=headers)
    assert r.status_code == 200, r.text
    out = r.json()
    assert out["NodeNames"] == [] and set(out["FailedAndUnresolvableNodes"]) == {"g1", "g2"}
    assert "at most 200 characters" in out["FailedAndUnresolvableNodes"]["g1"]
    r = client.post(PRIO, content=_body(model), headers=headers)
    assert r.status_code == 200, r.text
    assert r.json() == [{"Host": "g1", "Score": 0}, {"Host": "g2", "Score": 0}]
    assert client.app.state.services.reservations.view().gpu_items() == []


def _pod(model: str) -> dict:
    return {
        "metadata": {"name": "p", "namespace": "ml", "uid": "u1",
                     "annotations": {"alibabacloud.com/gpu-card-model": model}},
        "spec": {"containers": [{"name": "a", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]},
    }  # fmt: skip


@pytest.mark.parametrize(
    ("model", "kept"),
    [
        ("x" * 194 + "|A100-40GB", ("x" * 194,)),  # cut at 200: "A100-", any A100
        ("-" * 250 + "H100|A100-40GB", ("A100-40GB",)),
        ("A100|" + "|".join(["H100-80GB"] * 30), ("A100", *["H100-80GB"] * 19)),
        (" " * 1500 + "H100", ("H100",)),  # read whole, not cut at 1000 characters
    ],
    ids=["cut-inside", "long-first", "many", "padded"],
)
def test_the_placement_request_keeps_whole_model_names(model: str, kept: tuple[str, ...]) -> None:
    """Only whole entries reach ``JobSpec.gpu_model`` (fewer names allow fewer GPUs, a name cut
    short would allow more). Before: ``"x" * 194 + "|A100-40GB"`` asked for ``A100-``."""
    req = pod_request(_pod(model))
    assert req.gpu_models == kept
    gpu_model = req.job().gpu_model
    assert gpu_model is not None and tuple(gpu_model.split("|")) == kept
    assert len(gpu_model) <= 200


def test_a_request_jobspec_refuses_fails_every_node() -> None:
    """A lone surrogate in a model (JSON's ``\\ud800``; the HTTP body parser refuses it, a caller
    of ``decide`` may not) is no text ``JobSpec`` takes: the pod is unsupported on every node.
    Before: ``decide`` raised pydantic's ``ValidationError`` (a 500 behind a route)."""
    nodes = [NodeState(f"g{i}", "local", [GpuState(0, "NVIDIA H100")], 96_000, 96_000,
                       500_000, 500_000) for i in (1, 2)]  # fmt: skip
    _, d = decide({"Pod": _pod("H100|\ud800"), "NodeNames": ["g1", "g2"]},
                  FleetSnapshot(source="test", nodes=nodes), Reservations(), BestFitPlacer(),
                  NodeIndex())  # fmt: skip
    assert d.options == [] and set(d.unresolvable) == {"g1", "g2"}
    assert "gpu_model" in d.unresolvable["g1"]


def test_a_node_failed_for_its_model_says_how_many_models_were_ignored(
    client: TestClient,
) -> None:
    """A ``gpu-card-model`` list longer than 200 characters keeps the whole names that fit; a node
    whose model is among those left out fails with a reason that says some were ignored, and how
    many (before: the reason listed the kept models only, as if the node's was never asked)."""
    models = [
        "NVIDIA A100-SXM4-40GB", "NVIDIA A100-SXM4-80GB", "NVIDIA A100-PCIE-40GB",
        "NVIDIA A100 80GB PCIe", "NVIDIA A800-SXM4-80GB", "NVIDIA A30", "NVIDIA A40",
        "NVIDIA L40S", "NVIDIA RTX A6000", "Tesla V100-SXM2-32GB", "NVIDIA H100 80GB HBM3",
    ]  # fmt: skip
    assert len("|".join(models)) > 200 and len("|".join(models[:-1])) <= 200
    assert pod_request(_pod("|".join(models))).models_ignored == 1
    r = client.post(FILTER, content=_body("|".join(models)))
    assert r.status_code == 200
    failed = r.json()["FailedAndUnresolvableNodes"]
    assert set(failed) == {"g1", "g2"}
    assert (
        "(10 of 11 models read: names that would take the list past 200 characters are skipped)"
        in failed["g1"]
    )
    # a list that fits whole says nothing of the kind
    assert pod_request(_pod("NVIDIA A30|NVIDIA A40")).models_ignored == 0
