"""GPU model constraints of the placement route and the extender match whole model names.

Upstream behaviour behind the expectations: the FGD simulator (hkust-adsl/kubernetes-scheduler-
simulator, ``pkg/utils``: ``IsNodeAccessibleToPodByType``) splits a pod's ``gpu_spec`` on ``|``
and requires a wanted type to *equal* the node's GPU type, so ``A10`` never admits an ``A100``
node; FleetMind's own simulator does the same (``data.openb.gpu_spec_mask``). The extender reads
``alibabacloud.com/gpu-milli`` as 1..1000 (a GPU pod with 0 milli is, in FGD's
``GetNodePodFrag``, a CPU-only pod).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import pytest
from fastapi.testclient import TestClient
from pydantic import ValidationError
from serving_helpers import serving_settings

from fleetmind.envs.policies import make_policy
from fleetmind.serving.app import create_app
from fleetmind.serving.scheduler.extender import NodeIndex, decide
from fleetmind.serving.scheduler.placement import (
    BestFitPlacer,
    PeerPolicyPlacer,
    Reservations,
    gpu_model_matches,
    parse_gpu_models,
    why_no_fit,
)
from fleetmind.serving.scheduler.reservations import _view
from fleetmind.serving.schemas import JobSpec
from fleetmind.serving.telemetry.base import FleetSnapshot, GpuState, NodeState
from fleetmind.serving.telemetry.sim import SimSource


def node(name: str, model: str, n_gpus: int = 1, cluster: str = "c0") -> NodeState:
    return NodeState(
        name=name,
        cluster=cluster,
        gpus=[GpuState(index=i, model=model, free_milli=1000) for i in range(n_gpus)],
        cpu_milli=64_000,
        cpu_milli_free=64_000,
        memory_mib=262_144,
        memory_mib_free=262_144,
    )


def placers() -> list[object]:
    return [BestFitPlacer(), PeerPolicyPlacer(make_policy("BestFit"), "heuristic:BestFit")]


# -------------------------------------------------------------------------------- the matcher
def test_whole_names_and_whole_tokens_match_substrings_do_not() -> None:
    assert gpu_model_matches("A100", ["a100"])
    assert gpu_model_matches("NVIDIA A100-SXM4-80GB", ["A100"])
    assert gpu_model_matches("NVIDIA A100-SXM4-80GB", ["a100-sxm4-80gb"])
    assert gpu_model_matches("NVIDIA A100 MIG 3g.40gb", ["MIG 3g.40gb"])
    assert gpu_model_matches("V100M32", ["V100M32"])
    for model, want in [
        ("A100", "A10"),
        ("A100", "A1"),
        ("NVIDIA A100-SXM4-80GB", "A10"),
        ("V100M32", "V100"),
        ("NVIDIA A100 MIG 1g.10gb+me", "MIG 1g.10gb"),
    ]:
        assert not gpu_model_matches(model, [want]), (model, want)
    assert gpu_model_matches("H100", ["A10", "H100"]) and gpu_model_matches("T4", [])


def test_specs_split_on_bars_and_commas_and_drop_empty_entries() -> None:
    assert parse_gpu_models(" A100 | H100,T4 ") == ("A100", "H100", "T4")
    for spec in (None, "", "|", " ", " | , "):
        assert parse_gpu_models(spec) == ()


# ------------------------------------------------------------------------------ the placers
@pytest.mark.parametrize("want", ["A10", "A1", " A100x", "V100"])
def test_a10_job_is_not_placed_on_an_a100(want: str) -> None:
    snap = FleetSnapshot(source="test", nodes=[node("a100", "A100"), node("v", "V100M32")])
    job = JobSpec(num_gpu=1, gpu_model=want)
    for placer in placers():
        assert placer.place(snap, job, Reservations(), 3) == [], placer
    assert why_no_fit(snap, job, Reservations()).startswith(
        f"no GPU model matches {want.strip()!r} (models here: A100, V100M32)"
    )


def test_wanted_models_match_telemetry_names_and_lists() -> None:
    nodes = [node("sxm", "NVIDIA A100-SXM4-80GB"), node("h", "H100"), node("t", "T4")]
    snap = FleetSnapshot(source="test", nodes=nodes)
    for want, where in [(" A100 ", {"sxm"}), ("A100|H100", {"sxm", "h"}), ("h100,t4", {"h", "t"})]:
        for placer in placers():
            got = {o.node for o in placer.place(snap, JobSpec(gpu_model=want), Reservations(), 5)}
            assert got == where, (placer, want)


def test_409_reason_reads_each_model_of_a_list() -> None:
    """9 GPUs of two 8-GPU nodes: the models exist, no node has that many GPUs (not 'no model
    matches'); 5 GPUs where each node has 4 free: the free GPU of both models is split."""
    snap = FleetSnapshot(source="test", nodes=[node("a", "A100", 8), node("h", "H100", 8)])
    job = JobSpec(num_gpu=9, gpu_model="A100|H100")
    assert BestFitPlacer().place(snap, job, Reservations(), 1) == []
    r = why_no_fit(snap, job, Reservations())
    assert (
        r == "no node has 9 healthy 'A100' or 'H100' GPUs, free or not: the most on one node is 8"
    )
    for n in snap.nodes:
        for g in n.gpus[:4]:
            g.free_milli = 0
    job = JobSpec(num_gpu=5, gpu_model="A100|H100")
    assert BestFitPlacer().place(snap, job, Reservations(), 1) == []
    r = why_no_fit(snap, job, Reservations())
    assert r.startswith("free GPU is split: 8000 milli free on healthy 'A100' or 'H100' GPUs")


# ------------------------------------------------------------------------------ the schema
def test_a_gpu_job_takes_at_least_one_milli_and_names_a_model() -> None:
    with pytest.raises(ValidationError, match="gpu_milli must be 1..1000"):
        JobSpec(num_gpu=1, gpu_milli=0)
    for spec in ("|", " ", " | , "):
        with pytest.raises(ValidationError, match="names no GPU model"):
            JobSpec(num_gpu=1, gpu_model=spec)
    assert JobSpec(num_gpu=0, gpu_milli=0).gpu_milli == 0  # CPU-only: gpu_milli is ignored
    assert JobSpec(num_gpu=1, gpu_model="").gpu_model == ""  # empty = unset (any model)
    assert JobSpec(num_gpu=1, gpu_milli=1).gpu_milli == 1


def test_a_hold_stored_before_the_check_still_reads() -> None:
    """A hold written with 0 milli by an older release is read back, not a validation error."""
    row = SimpleNamespace(
        cluster="c0", node="a", gpus=[0], gpu_milli=0, cpu_milli=500, memory_mib=9
    )
    res = _view([row])
    assert res.gpu_used("c0", "a", 0) == 0 and res.cpu_used("c0", "a") == 500


@pytest.fixture
def client(tmp_path: Path) -> Iterator[TestClient]:
    settings = serving_settings(tmp_path)
    with TestClient(create_app(settings)) as c:
        c.app.state.services.telemetry = SimSource([node("a100", "A100"), node("h", "H100", 8)])
        yield c


def test_placement_route_matches_whole_models_and_refuses_empty_specs(client: TestClient) -> None:
    url = "/api/v1/placements"
    r = client.post(url, json={"num_gpu": 1, "gpu_model": "A10", "alternatives": 0})
    assert r.status_code == 409 and "no GPU model matches 'A10'" in r.json()["detail"]
    r = client.post(url, json={"num_gpu": 1, "gpu_model": "a100", "alternatives": 0})
    assert r.status_code == 200 and r.json()["node"] == "a100"
    r = client.post(url, json={"num_gpu": 9, "gpu_model": "A100|H100"})
    assert r.status_code == 409 and "no GPU model matches" not in r.json()["detail"]
    for body in ({"num_gpu": 1, "gpu_model": "|"}, {"num_gpu": 1, "gpu_model": " "}):
        r = client.post(url, json=body)
        assert r.status_code == 422 and "names no GPU model" in r.text, r.text
    r = client.post(url, json={"num_gpu": 1, "gpu_milli": 0, "reserve": True})
    assert r.status_code == 422 and "gpu_milli must be 1..1000" in r.text
    assert client.post(url, json={"num_gpu": 0, "gpu_milli": 0}).status_code == 200


# ------------------------------------------------------------------------------ the extender
def _args(annotation: str | None, names: list[str]) -> dict[str, object]:
    ann = {} if annotation is None else {"alibabacloud.com/gpu-card-model": annotation}
    pod = {
        "metadata": {"name": "p", "namespace": "default", "uid": "u1", "annotations": ann},
        "spec": {"containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]},
    }
    return {"Pod": pod, "NodeNames": names}


@pytest.mark.parametrize(
    ("annotation", "passing"),
    [
        ("A10", set()),  # the lone A100 node must not pass (nor be held)
        ("A100", {"a100"}),
        ("T4|a100", {"a100"}),
        ("A10,H100", {"h"}),
        ("|", set()),  # names no model: unschedulable, with the reason
        (" ", set()),
        (None, {"a100", "h"}),
        ("", {"a100", "h"}),
    ],
)
def test_extender_filter_matches_whole_models(annotation: str | None, passing: set[str]) -> None:
    snap = FleetSnapshot(source="test", nodes=[node("a100", "A100"), node("h", "H100")])
    req, d = decide(
        _args(annotation, ["a100", "h"]), snap, Reservations(), BestFitPlacer(), NodeIndex()
    )
    assert {o.node for o in d.options} == passing
    for name in {"a100", "h"} - passing:
        assert d.unresolvable[name].startswith("FleetMind: "), d.unresolvable
    if annotation in ("|", " "):
        assert "names no GPU model" in d.unresolvable["a100"]
    else:
        for why in d.unresolvable.values():
            assert why.startswith("FleetMind: no GPU of the pod's model ("), why


def test_wanted_words_may_skip_the_form_factor_in_nvidias_names() -> None:
    """NVIDIA's model names put the form factor between the model and its memory
    (``nvidia-smi``/NVML ``nvmlDeviceGetName``: "NVIDIA A100-SXM4-40GB", "NVIDIA A100 80GB PCIe",
    "Tesla V100-SXM2-16GB"), so a job asking for a memory variant names words that are not
    adjacent there; the words must still come in order and be whole."""
    assert gpu_model_matches("A100-SXM4-40GB", ["A100-40GB"])
    assert gpu_model_matches("NVIDIA A100-SXM4-80GB", ["A100 80GB"])
    assert gpu_model_matches("NVIDIA A100 80GB PCIe", ["A100-80GB"])
    assert gpu_model_matches("Tesla V100-SXM2-16GB", ["V100-16GB"])
    assert not gpu_model_matches("NVIDIA A100-SXM4-80GB", ["A100-40GB"])
    assert not gpu_model_matches("NVIDIA A100-SXM4-80GB", ["80GB A100"])  # out of order
    assert not gpu_model_matches("NVIDIA A100-SXM4-80GB", ["A10-80GB"])


@pytest.mark.parametrize("spec", ["-", "_", " - ", "-|_"])
def test_a_spec_of_separators_names_no_model(spec: str) -> None:
    """A spec whose entries have no word would match no GPU at all: it names no model (422),
    as ``"|"`` does."""
    assert parse_gpu_models(spec) == ()
    with pytest.raises(ValidationError, match="names no GPU model"):
        JobSpec(num_gpu=1, gpu_milli=500, gpu_model=spec)
