"""What a Pod asks for, as Kubernetes counts it, and extender input Kubernetes would never send.

The effective request rule is upstream's: "Effective Pod requests and limits"
(https://kubernetes.io/docs/concepts/resource-management/effective-pod-requests-limits/) as
``PodRequests``/``AggregateContainerRequests`` compute it in kubernetes/kubernetes
``staging/src/k8s.io/component-helpers/resource/helpers.go``: app containers and sidecars
(``restartPolicy: Always`` init containers) add up; a regular init container needs its own request
plus the sidecars started before it; the larger wins; pod-level ``spec.resources.requests`` (CPU,
memory) replace the containers' sum; ``spec.overhead`` is added. MIG resources are the device
plugin's mixed strategy names (``nvidia.com/mig-<profile>``, NVIDIA/k8s-device-plugin).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient

from fleetmind.data.errors import DataError
from fleetmind.serving.app import create_app
from fleetmind.serving.scheduler.extender import (
    MAX_GPUS,
    PodOutOfBounds,
    check_name,
    parse_quantity,
    pod_request,
)
from fleetmind.serving.settings import Settings
from fleetmind.serving.telemetry.base import GpuState, NodeState
from fleetmind.serving.telemetry.sim import SimSource


def c(name: str, cpu: str | None = None, mem: str | None = None, gpu: str | None = None,
      restart: str | None = None, **extra: str) -> dict[str, Any]:  # fmt: skip
    req = {k: v for k, v in (("cpu", cpu), ("memory", mem)) if v is not None}
    lim = {k: v for k, v in (("nvidia.com/gpu", gpu), *extra.items()) if v is not None}
    out: dict[str, Any] = {
        "name": name,
        "image": "x",
        "resources": {"requests": req, "limits": lim},
    }
    if restart:
        out["restartPolicy"] = restart
    return out


def pod(containers: list[dict[str, Any]], inits: list[dict[str, Any]] | None = None,
        **spec: Any) -> dict[str, Any]:  # fmt: skip
    return {
        "metadata": {"name": "p", "namespace": "ml", "uid": "6f1c5a9e-0000-4000-8000-000000000001"},
        "spec": {"containers": containers, "initContainers": inits or [], **spec},
    }


def test_init_containers_and_sidecars_count_as_kubernetes_counts_them() -> None:
    # regular init containers only: max(sum of containers, biggest init) per resource
    r = pod_request(pod([c("a", "500m", "1Gi"), c("b", "200m", "512Mi")],
                        [c("i1", "1", "2Gi"), c("i2", "2", "1Gi")]))  # fmt: skip
    assert (r.cpu_milli, r.memory_mib) == (2000, 2048)
    # a sidecar runs with the app: it adds to the containers, and to every init container after it
    r = pod_request(pod([c("app", "1", "1Gi")],
                        [c("i1", "2", "1Gi"), c("log", "500m", "256Mi", restart="Always"),
                         c("i2", "1800m", "64Mi")]))  # fmt: skip
    # containers + sidecar = 1.5 CPU; i1 alone = 2; i2 + sidecar = 2.3 -> 2300 m
    # memory: 1Gi + 256Mi = 1280 Mi; i1 = 1024; i2 + sidecar = 320 -> 1280 Mi
    assert (r.cpu_milli, r.memory_mib) == (2300, 1280)
    # an init container listed before the sidecar does not run with it
    r = pod_request(pod([c("app", "1")], [c("i1", "1200m"), c("log", "500m", restart="Always")]))
    assert r.cpu_milli == 1500


def test_overhead_and_pod_level_resources() -> None:
    shape = pod(
        [c("a", "1", "1Gi"), c("b", "1", "1Gi")], overhead={"cpu": "250m", "memory": "120Mi"}
    )
    assert (pod_request(shape).cpu_milli, pod_request(shape).memory_mib) == (2250, 2168)
    # pod-level requests replace the containers' sum (CPU and memory only), overhead still added
    shape["spec"]["resources"] = {"requests": {"cpu": "1500m"}, "limits": {"memory": "4Gi"}}
    r = pod_request(shape)
    assert (r.cpu_milli, r.memory_mib) == (1750, 4096 + 120)
    # pod-level limits without requests: the API server defaults requests to them
    shape["spec"]["resources"] = {"limits": {"cpu": "3"}}
    assert pod_request(shape).cpu_milli == 3250
    # GPUs are not a pod-level resource: the containers' count stays
    gpu = pod([c("a", "1", gpu="2")], resources={"requests": {"cpu": "2", "nvidia.com/gpu": "8"}})
    assert pod_request(gpu).num_gpu == 2


def test_gpus_in_sidecars_and_init_containers() -> None:
    assert pod_request(pod([c("a", gpu="2")], [c("i", gpu="4")])).num_gpu == 4
    assert pod_request(pod([c("a", gpu="2")], [c("s", gpu="1", restart="Always")])).num_gpu == 3


def test_mig_mixed_strategy_resources() -> None:
    r = pod_request(pod([c("a", "1", **{"nvidia.com/mig-3g.40gb": "1"})]))
    assert (r.num_gpu, r.gpu_milli, r.gpu_models) == (1, 1000, ("MIG 3g.40gb",))
    with pytest.raises(DataError, match="several MIG profiles"):
        pod_request(pod([c("a", **{"nvidia.com/mig-3g.40gb": "1", "nvidia.com/mig-1g.10gb": "1"})]))
    with pytest.raises(DataError, match="both"):
        pod_request(pod([c("a", gpu="1", **{"nvidia.com/mig-1g.10gb": "1"})]))


@pytest.mark.parametrize(
    "bad",
    [
        {"cpu": "1e306"},  # overflowed to inf in millicores
        {"memory": "9Ei"},
        {"cpu": "-1"},
        {"cpu": "1e400"},
        {"cpu": "x" * 100},
        {"cpu": "1.2.3"},
    ],
)
def test_quantities_are_bounded(bad: dict[str, str]) -> None:
    with pytest.raises(DataError):
        pod_request(pod([{"name": "a", "resources": {"requests": bad}}]))


def test_two_huge_gpu_requests_are_refused() -> None:
    with pytest.raises(PodOutOfBounds, match="more than the 64"):
        pod_request(pod([c("a", gpu="1e308"), c("b", gpu="1e308")]))
    with pytest.raises(PodOutOfBounds, match=f"at most {MAX_GPUS}"):
        pod_request(pod([c("a", gpu="40"), c("b", gpu="40")]))
    assert parse_quantity("64", bound=64) == 64


@pytest.mark.parametrize(
    ("value", "label", "ok"),
    [
        ("train-0", False, True),
        ("a.b-c", False, True),
        ("a" * 253, False, True),
        ("a" * 254, False, False),
        ("Train", False, False),
        ("ml\x00x", False, False),
        ("ml\ud800", False, False),
        ("-a", False, False),
        ("kube-system", True, True),
        ("a.b", True, False),
        ("a" * 64, True, False),
        ("train-0\n", False, False),  # a regex ending in $ let a final newline through
        ("ml\n", True, False),
    ],
)
def test_kubernetes_names(value: str, label: bool, ok: bool) -> None:
    if ok:
        assert check_name(value, "x", label=label) == value
    else:
        with pytest.raises(DataError) as err:
            check_name(value, "x", label=label)
        str(err.value).encode("ascii")  # the message escapes what it quotes


# ------------------------------------------------------------------ through the service
@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    d = tmp_path_factory.mktemp("ext")
    settings = Settings(
        database_url=f"sqlite:///{d}/ext.db",
        rca_model="baseline:upstream-coverage",
        placement_model="heuristic:builtin-bestfit",
        incident_worker=False,
    )
    nodes = [
        NodeState(
            "gpu-1",
            "local",
            [GpuState(i, "NVIDIA H100", mem_total_mib=80000.0, mem_used_mib=0.0) for i in range(8)],
            96000,
            96000,
            500000,
            500000,
        ),  # fmt: skip
        NodeState("cpu-1", "local", [], 64000, 64000, 256000, 256000),
        NodeState("cpu-2", "local", [], 64000, 64000, 256000, 256000),
    ]
    with TestClient(create_app(settings)) as c_:
        c_.app.state.services.telemetry = SimSource(nodes)
        yield c_


def test_cpu_only_pods_prefer_cpu_nodes(client: TestClient) -> None:
    args = {"Pod": pod([c("a", "2", "4Gi")]), "NodeNames": ["gpu-1", "cpu-1", "cpu-2"]}
    scores = {
        h["Host"]: h["Score"] for h in client.post("/api/v1/scheduler/prioritize", json=args).json()
    }
    assert sorted([scores["cpu-1"], scores["cpu-2"]]) == [4, 10] and scores["gpu-1"] < 3
    # the hold is on the node scored 10
    (hold,) = [r for r in client.app.state.services.reservations.rows() if r["pod_key"] == "ml/p"]
    assert scores[hold["node"]] == 10
    args["Pod"] = pod([c("a", "2", "4Gi", gpu="1")])
    scores = {
        h["Host"]: h["Score"] for h in client.post("/api/v1/scheduler/prioritize", json=args).json()
    }
    assert scores["gpu-1"] == 10


def test_extender_decisions_count_in_placements_total(client: TestClient) -> None:
    from prometheus_client.parser import text_string_to_metric_families

    def counts() -> dict[tuple[str, str], float]:
        text = client.get("/metrics").text
        return {
            (s.labels["path"], s.labels["result"]): s.value
            for f in text_string_to_metric_families(text)
            if f.name == "fleetmind_placements"
            for s in f.samples
            if s.name == "fleetmind_placements_total"
        }

    before = counts()
    ok = {"Pod": pod([c("a", "1", gpu="1")]), "NodeNames": ["gpu-1"]}
    too_big = {"Pod": pod([c("a", "1", gpu="9")]), "NodeNames": ["gpu-1"]}
    client.post("/api/v1/scheduler/filter", json=ok)
    client.post("/api/v1/scheduler/filter", json=too_big)
    client.post("/api/v1/scheduler/prioritize", json=ok)
    after = counts()
    for key, n in (
        (("filter", "placed"), 1),
        (("filter", "infeasible"), 1),
        (("prioritize", "placed"), 1),
    ):
        assert after.get(key, 0) - before.get(key, 0) == n, key


@pytest.mark.parametrize(
    "body",
    [
        '{"Pod": {"metadata": {"name": "p\\u0000"}, "spec": {"containers": []}}, "NodeNames": ["cpu-1"]}',
        '{"Pod": {"metadata": {"name": "p", "namespace": "\\ud800"}, "spec": {"containers": []}}, "NodeNames": ["cpu-1"]}',
        '{"Pod": {"metadata": {"name": "p", "uid": "'
        + "u" * 300
        + '"}, "spec": {"containers": []}}, "NodeNames": ["cpu-1"]}',
        '{"Pod": {"metadata": {"name": "p", "uid": "u\\u0000"}, "spec": {"containers": []}}, "NodeNames": ["cpu-1"]}',
        '{"Pod": {"metadata": {"name": "p"}, "spec": {"containers": []}}, "NodeNames": ["cpu-1\\ud800"]}',
        '{"Pod": {"metadata": {"name": "p", "annotations": {"alibabacloud.com/gpu-card-model": "Z\\ud800"}}, "spec": {"containers": [{"name": "a", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}}, "NodeNames": ["cpu-1"]}',
        '{"Pod": {"metadata": {"name": "p"}, "spec": {"containers": []}}, "Nodes": {"items": [{"metadata": {"name": "cpu-1", "labels": {"x": "\\udc00"}}}]}}',
        '{"Pod": {"metadata": {"name": "p"}, "spec": {"containers": []}}, "Nodes": {"items": [{"metadata": {"name": "cpu-1"}, "status": {"x": NaN}}]}}',
        '{"Pod": {"metadata": {"name": "p\\n"}, "spec": {"containers": []}}, "NodeNames": ["cpu-1"]}',
        '["not", "an", "object"]',
    ],
    ids=[
        "nul-name",
        "surrogate-namespace",
        "uid-300",
        "nul-uid",
        "surrogate-node",
        "surrogate-echoed-in-a-reason",
        "surrogate-in-an-echoed-node",
        "nan-in-an-echoed-node",
        "newline-name",
        "not-an-object",
    ],  # fmt: skip
)
@pytest.mark.parametrize("verb", ["filter", "prioritize"])
def test_bad_input_is_a_clear_422(client: TestClient, body: str, verb: str) -> None:
    r = client.post(f"/api/v1/scheduler/{verb}", content=body.encode(),
                    headers={"content-type": "application/json"})  # fmt: skip
    assert r.status_code == 422, r.text
    assert r.json()["detail"]


@pytest.mark.parametrize(
    "count, milli",
    [("1_0", "500"), ("\u0663", "500"), ("1", "half"), ("1.5", "500"), ("1", "500 ")],
    ids=["underscore-count", "arabic-indic-count", "word", "fraction", "trailing-space"],
)
@pytest.mark.parametrize("verb", ["filter", "prioritize"])
def test_a_gpu_sharing_annotation_that_is_no_integer_fails_every_node(
    client: TestClient, count: str, milli: str, verb: str
) -> None:
    """Annotations are free text to the API server, so kube-scheduler sends such pods: a 422 would
    be dropped by kube-scheduler (it reads any answer but 200 as the extender failing, ``send`` in
    ``pkg/scheduler/extender.go``); every node fails as unresolvable with the reason instead."""
    ann = {"alibabacloud.com/gpu-count": count, "alibabacloud.com/gpu-milli": milli}
    pod = {"metadata": {"name": "p", "annotations": ann}, "spec": {"containers": []}}
    r = client.post(f"/api/v1/scheduler/{verb}", json={"Pod": pod, "NodeNames": ["cpu-1"]})
    assert r.status_code == 200, r.text
    if verb == "filter":
        failed = r.json()["FailedAndUnresolvableNodes"]
        assert set(failed) == {"cpu-1"} and "must be integers" in failed["cpu-1"]
        assert not r.json()["NodeNames"]
    else:
        assert [h["Score"] for h in r.json()] == [0]


@pytest.mark.parametrize(
    "body",
    [
        {"PodName": "p\x00", "PodNamespace": "ml", "Node": "cpu-1"},
        {"PodName": "p", "PodNamespace": "ml\ud800", "Node": "cpu-1"},
        {"PodName": "p", "PodNamespace": "ml", "Node": "n" * 300},
        {"PodName": "p", "PodNamespace": "ml", "PodUID": "u" * 300, "Node": "cpu-1"},
        ["not", "an", "object"],
    ],
)
def test_bad_binding_args_are_a_422(client: TestClient, body: Any) -> None:
    import json

    raw = json.dumps(body).encode()
    r = client.post(
        "/api/v1/scheduler/bound", content=raw, headers={"content-type": "application/json"}
    )
    assert r.status_code == 422, r.text


# ------------------------------------------------------------------ on PostgreSQL
@pytest.mark.slow
def test_postgresql_refusals_are_422_not_database_unavailable(tmp_path: Any) -> None:
    """PostgreSQL refuses NUL and over-long strings (SQLite stores them); those refusals are the
    caller's error (422), not "database unavailable" (503)."""
    from serving_helpers import PgCluster, pg_bindir

    from fleetmind.serving.scheduler.placement import Option
    from fleetmind.serving.scheduler.reservations import DbReservations
    from fleetmind.serving.schemas import JobSpec

    bindir = pg_bindir()
    if bindir is None:
        pytest.skip("PostgreSQL binaries not installed (Debian package postgresql)")
    cluster = PgCluster(bindir).start()
    try:
        settings = Settings(
            database_url=cluster.url,
            rca_model="baseline:upstream-coverage",
            placement_model="heuristic:builtin-bestfit",
            incident_worker=False,
        )
        with TestClient(create_app(settings)) as cl:
            cl.app.state.services.telemetry = SimSource(
                [NodeState("cpu-1", "local", [], 64000, 64000, 256000, 256000)]
            )
            for uid in ("u" * 300, "u\x00"):
                body = {"Pod": pod([c("a", "1")]), "NodeNames": ["cpu-1"]}
                body["Pod"]["metadata"]["uid"] = uid
                r = cl.post("/api/v1/scheduler/prioritize", json=body)
                assert r.status_code == 422, r.text
            res = cl.app.state.services.reservations
            assert isinstance(res, DbReservations)
            # a value past the extender's checks that PostgreSQL still refuses (NUL in a text
            # column): the database's refusal becomes DataError, not an OperationalError
            with pytest.raises(DataError, match="refused"):
                res.hold("ml/p", Option("c\x00", "cpu-1", (), 0.0), JobSpec(num_gpu=0, cpu_milli=1))
            body = {"Pod": pod([c("a", "1")]), "NodeNames": ["cpu-1"]}
            assert cl.post("/api/v1/scheduler/prioritize", json=body).status_code == 200
            assert [r["pod_key"] for r in res.rows()] == ["ml/p"]
    finally:
        cluster.close()
