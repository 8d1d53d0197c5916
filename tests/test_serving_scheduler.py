"""The kube-scheduler extender (``/api/v1/scheduler``): recorded ExtenderArgs against the simulator.

The fleet is every 30th openb GPU node, filled by a seeded FGD run in the simulator; the service sees
the same state through its telemetry, and its filter/prioritize answers must equal the simulator's
feasible set and the policy's choice for the same pod (PPO as released; when PPO is missing, the
registry's fallback, BestFit, which ``GET /api/v1/models`` and the placement route name too).
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from fastapi.testclient import TestClient
from k8s_helpers import extender_args, filled_state, node_json, state_nodes

from fleetmind.data.errors import DataError
from fleetmind.data.openb import gpu_spec_mask, load_openb_nodes, load_openb_trace
from fleetmind.envs.core import ClusterState, Pod
from fleetmind.envs.policies import FGD, BestFit
from fleetmind.envs.policies.fgd import typical_from_json
from fleetmind.rl.policy_adapter import RELEASED_DIR, load_ppo_policy
from fleetmind.serving.app import create_app
from fleetmind.serving.scheduler.extender import PodRefused, parse_quantity, pod_request
from fleetmind.serving.settings import Settings
from fleetmind.serving.telemetry.sim import SimSource

DATA = Path(__file__).parent / "data" / "k8s"
RECORDED = [
    "extender_args_gpu_share.json",
    "extender_args_whole_gpus.json",
    "extender_args_gpu_model.json",
]


def _typical() -> Any:
    return typical_from_json(
        json.loads((RELEASED_DIR / "metadata.json").read_text())["typical_pods"]
    )


@pytest.fixture(scope="module")
def fleet() -> ClusterState:
    nodes = load_openb_nodes()
    idx = np.arange(0, len(nodes), 30)
    state = ClusterState(
        nodes.cpu_milli[idx],
        nodes.memory_mib[idx],
        nodes.num_gpu[idx],
        nodes.model_id[idx],
        names=nodes.names[idx],
    )
    filled_state(state, load_openb_trace("default"), FGD(typical=_typical()), 120, seed=7)
    return state


def _client(tmp_path: Path, fleet: ClusterState, placement_model: str | None) -> TestClient:
    settings = Settings(
        database_url=f"sqlite:///{tmp_path}/fm.db",
        rca_model="baseline:upstream-coverage",
        placement_model=placement_model,
        incident_worker=False,
    )
    client = TestClient(create_app(settings))
    client.__enter__()
    client.app.state.services.telemetry = SimSource(state_nodes(fleet))
    return client


@pytest.fixture(scope="module")
def ppo_client(
    tmp_path_factory: pytest.TempPathFactory, fleet: ClusterState
) -> Iterator[TestClient]:
    c = _client(tmp_path_factory.mktemp("ppo"), fleet, None)
    assert c.app.state.services.registry.current.placement.method == "ppo"
    yield c
    c.__exit__(None, None, None)


@pytest.fixture(scope="module")
def fallback_client(
    tmp_path_factory: pytest.TempPathFactory, fleet: ClusterState
) -> Iterator[TestClient]:
    c = _client(tmp_path_factory.mktemp("fb"), fleet, str(tmp_path_factory.mktemp("absent")))
    assert c.app.state.services.registry.current.placement.fallback_reason
    yield c
    c.__exit__(None, None, None)


def _recorded(name: str) -> dict[str, Any]:
    return json.loads((DATA / name).read_text())


def _sim_pod(args: dict[str, Any]) -> Pod:
    """The recorded Pod as the simulator's Pod (read independently of fleetmind.serving.scheduler.extender)."""
    meta = args["Pod"]["metadata"]
    ann = meta.get("annotations", {})
    c = args["Pod"]["spec"]["containers"][0]["resources"]
    inits = args["Pod"]["spec"].get("initContainers", [])
    cpu = max(
        [parse_quantity(c["requests"]["cpu"])]
        + [parse_quantity(i["resources"]["requests"]["cpu"]) for i in inits]
    )
    mem = parse_quantity(c["requests"]["memory"]) / 2**20
    if "alibabacloud.com/gpu-milli" in ann:
        num, milli = int(ann["alibabacloud.com/gpu-count"]), int(ann["alibabacloud.com/gpu-milli"])
    else:
        num, milli = int(c["limits"].get("nvidia.com/gpu", 0)), 1000
    mask = gpu_spec_mask(ann.get("alibabacloud.com/gpu-card-model", ""))
    return Pod(int(round(cpu * 1000)), int(mem), num, milli if num else 0, mask)


def _as_sent(args: dict[str, Any], fleet: ClusterState) -> dict[str, Any]:
    """``args`` with only the nodes kube-scheduler would send the extender: those its
    NodeResourcesFit passes, the pod's CPU and memory within the node's allocatable less its pods'
    requests (``fitsRequest`` in kubernetes ``pkg/scheduler/framework/plugins/noderesources/
    fit.go``; the fleet's free amounts). The extender takes CPU and memory of sent nodes as
    fitting, so a recording that sent every node would pass nodes kube-scheduler filtered."""
    pod = _sim_pod(args)
    fits = {
        n.name
        for n in state_nodes(fleet)
        if n.cpu_milli_free >= pod.cpu_milli and n.memory_mib_free >= pod.memory_mib
    }
    return {**args, "NodeNames": [n for n in args["NodeNames"] if n in fits]}


def _simulate(state: ClusterState, pod: Pod, policy: Any) -> tuple[set[str], str]:
    """The simulator's feasible set and choice for ``pod`` on a copy of ``state``."""
    st = state.copy()
    policy.reset(st)
    mask = st.feasible(pod)
    node, _ = policy.select(st, pod, mask)
    return {str(st.names[i]) for i in np.flatnonzero(mask)}, str(st.names[node])


@pytest.mark.parametrize("name", RECORDED)
@pytest.mark.parametrize("node_cache_capable", [True, False])
def test_recorded_args_match_the_simulator_with_ppo(
    ppo_client: TestClient, fleet: ClusterState, name: str, node_cache_capable: bool
) -> None:
    args = _as_sent(_recorded(name), fleet)
    if not node_cache_capable:  # the same candidates as a v1.NodeList
        nodes = {n.name: n for n in state_nodes(fleet)}
        args = extender_args(args["Pod"], [nodes[n] for n in args["NodeNames"]], False)
    feasible, choice = _simulate(fleet, _sim_pod(args), load_ppo_policy())
    assert 0 < len(feasible) < fleet.n_nodes  # the state constrains this pod

    r = ppo_client.post("/api/v1/scheduler/filter", json=args)
    assert r.status_code == 200, r.text
    out = r.json()
    assert out["Error"] == ""
    if node_cache_capable:
        passed = set(out["NodeNames"])
        assert out["Nodes"] is None
    else:
        passed = {item["metadata"]["name"] for item in out["Nodes"]["items"]}
        assert out["NodeNames"] is None
        assert out["Nodes"]["items"][0] == node_json(
            state_nodes(fleet)[
                fleet.names.tolist().index(out["Nodes"]["items"][0]["metadata"]["name"])
            ]
        )
    assert passed == feasible
    failed = set(out["FailedNodes"]) | set(out["FailedAndUnresolvableNodes"])
    sent = set(_as_sent(_recorded(name), fleet)["NodeNames"])
    assert failed == sent - feasible
    assert all(isinstance(v, str) and v for v in out["FailedNodes"].values())

    r = ppo_client.post("/api/v1/scheduler/prioritize", json=args)
    assert r.status_code == 200, r.text
    scores = {h["Host"]: h["Score"] for h in r.json()}
    assert set(scores) == sent
    assert all(0 <= s <= 10 and isinstance(s, int) for s in scores.values())
    assert [h for h, s in scores.items() if s == 10] == [choice]
    assert all(scores[n] == 0 for n in failed)


def test_model_constraint_fails_other_models_unresolvably(ppo_client: TestClient) -> None:
    out = ppo_client.post(
        "/api/v1/scheduler/filter", json=_recorded("extender_args_gpu_model.json")
    ).json()
    wrong = [
        n
        for n, why in out["FailedAndUnresolvableNodes"].items()
        if "pod's model (V100M32 or A10)" in why
    ]
    assert wrong and not set(wrong) & set(out["NodeNames"])


@pytest.mark.parametrize("name", RECORDED)
def test_the_registry_fallback_places_and_matches_the_simulator(
    fallback_client: TestClient, fleet: ClusterState, name: str
) -> None:
    """Without PPO the extender places with the policy the registry fell back to (BestFit), the
    one /api/v1/models names, not a second fallback of its own."""
    served = fallback_client.get("/api/v1/models").json()["placement"]["method"]
    assert served == "heuristic:BestFit"
    args = _as_sent(_recorded(name), fleet)
    feasible, choice = _simulate(fleet, _sim_pod(args), BestFit())
    out = fallback_client.post("/api/v1/scheduler/filter", json=args).json()
    assert set(out["NodeNames"]) == feasible
    scores = fallback_client.post("/api/v1/scheduler/prioritize", json=args).json()
    assert [h["Host"] for h in scores if h["Score"] == 10] == [choice]


def test_unknown_nodes_fail_gpu_pods_and_pass_cpu_pods(ppo_client: TestClient) -> None:
    args = _recorded("extender_args_gpu_share.json")
    args["NodeNames"] = [*args["NodeNames"][:3], "not-in-telemetry"]
    out = ppo_client.post("/api/v1/scheduler/filter", json=args).json()
    assert "not-in-telemetry" in out["FailedAndUnresolvableNodes"]
    cpu = copy.deepcopy(args)
    cpu["Pod"]["metadata"]["annotations"] = {}
    out = ppo_client.post("/api/v1/scheduler/filter", json=cpu).json()
    assert "not-in-telemetry" in out["NodeNames"]


# ------------------------------------------------------------------------------- pod parsing
def test_pod_request_reads_resources_annotations_and_init_containers() -> None:
    req = pod_request(_recorded("extender_args_whole_gpus.json")["Pod"])
    assert (req.key, req.num_gpu, req.gpu_milli) == ("training/resnet-train-0", 2, 1000)
    assert req.cpu_milli == 20_000  # the init container asks for more than the main one
    assert req.memory_mib == 48 * 1024
    share = pod_request(_recorded("extender_args_gpu_share.json")["Pod"])
    assert (share.num_gpu, share.gpu_milli, share.cpu_milli) == (1, 250, 4000)
    model = pod_request(_recorded("extender_args_gpu_model.json")["Pod"])
    assert model.gpu_models == ("V100M32", "A10")
    assert parse_quantity("1.5Gi") == 1.5 * 2**30 and parse_quantity("250m") == 0.25


@pytest.mark.parametrize(
    "mutate",
    [
        lambda p: p["spec"]["containers"][0]["resources"]["requests"].update(cpu="lots"),
        lambda p: p["spec"]["containers"][0]["resources"]["limits"].update(
            {"nvidia.com/gpu": "0.5"}
        ),
        lambda p: p["metadata"]["annotations"].update({"alibabacloud.com/gpu-milli": "1500"}),
        lambda p: p["metadata"]["annotations"].update(
            {"alibabacloud.com/gpu-milli": "500", "alibabacloud.com/gpu-count": "2"}
        ),
        lambda p: p["metadata"].pop("name"),
    ],
)
def test_bad_pods_are_refused_with_a_reason(ppo_client: TestClient, mutate: Any) -> None:
    args = _recorded("extender_args_whole_gpus.json")
    mutate(args["Pod"])
    with pytest.raises(DataError) as err:
        pod_request(args["Pod"])
    r = ppo_client.post("/api/v1/scheduler/prioritize", json=args)
    if isinstance(err.value, PodRefused):  # annotations Kubernetes accepts: every node scores 0
        assert r.status_code == 200 and {h["Score"] for h in r.json()} == {0}
    else:
        assert r.status_code == 422 and r.json()["detail"]


@pytest.mark.parametrize(
    "body",
    [
        [],
        {"Pod": {}},
        {"Pod": _recorded("extender_args_gpu_share.json")["Pod"]},
        {"Pod": 1, "NodeNames": ["a"]},
    ],
)
def test_malformed_args_get_422(ppo_client: TestClient, body: Any) -> None:
    r = ppo_client.post("/api/v1/scheduler/filter", json=body)
    assert r.status_code == 422


def test_node_names_two_clusters_share_are_not_guessed() -> None:
    """One FleetMind whose telemetry holds two clusters with the same node names (``worker-1``
    in each) cannot know which one kube-scheduler means: without FLEETMIND_SCHEDULER_CLUSTER a GPU
    pod fails those nodes with a reason that says what to set (it used to take the first cluster's
    node: a wrong model verdict and a hold in the other cluster); with it, the names resolve."""
    from fleetmind.serving.scheduler import extender as ext
    from fleetmind.serving.scheduler.placement import BestFitPlacer, Reservations
    from fleetmind.serving.telemetry.base import FleetSnapshot, GpuState, NodeState

    def node(cluster: str, name: str, model: str) -> NodeState:
        gpus = [GpuState(index=i, model=model) for i in range(2)]
        return NodeState(name, cluster, gpus, 32000, 32000, 131072, 131072)

    snap = FleetSnapshot(
        "test",
        [
            node("east", "worker-1", "A100"),
            node("east", "worker-2", "A100"),
            node("west", "worker-1", "H100"),
            node("west", "worker-3", "H100"),
        ],
    )
    args = json.loads(json.dumps(_recorded("extender_args_gpu_model.json")))
    args["Pod"]["metadata"]["annotations"]["alibabacloud.com/gpu-card-model"] = "H100"
    args["NodeNames"] = ["worker-1", "worker-2", "worker-3"]

    _, d = ext.decide(args, snap, Reservations(), BestFitPlacer(), ext.NodeIndex())
    assert "in several clusters" in d.unresolvable["worker-1"]
    assert "FLEETMIND_SCHEDULER_CLUSTER" in d.unresolvable["worker-1"]
    assert "pod's model (H100)" in d.unresolvable["worker-2"]  # names one cluster has still resolve
    assert [o.node for o in d.options] == ["worker-3"]

    _, d = ext.decide(args, snap, Reservations(), BestFitPlacer(), ext.NodeIndex("west"))
    assert sorted(o.node for o in d.options) == ["worker-1", "worker-3"]
    assert {o.cluster for o in d.options} == {"west"}
    assert "worker-2" in d.unresolvable  # not a node of west's telemetry

    cpu = json.loads(json.dumps(args))  # a CPU-only pod: kube-scheduler's own filter decides
    cpu["Pod"]["metadata"]["annotations"] = {}
    for c in cpu["Pod"]["spec"]["containers"]:
        c.get("resources", {}).get("limits", {}).pop("nvidia.com/gpu", None)
        c.get("resources", {}).get("requests", {}).pop("nvidia.com/gpu", None)
    _, d = ext.decide(cpu, snap, Reservations(), BestFitPlacer(), ext.NodeIndex())
    assert "worker-1" in d.passthrough and not d.failed
