"""``fleetmind graph build``: recorded Kubernetes API list responses (and OTLP / Jaeger span
exports) become the documented graph JSON; one pydantic model validates it everywhere and is the
source of ``docs/graph.schema.json``; the service reloads a rebuilt file."""

from __future__ import annotations

import json
import shutil
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from fleetmind.cli import main
from fleetmind.data.errors import DataError
from fleetmind.data.graph import DependencyGraph
from fleetmind.data.graph_build import build_graph, calls_from_spans
from fleetmind.data.graph_schema import GraphModel, graph_json_schema
from fleetmind.data.paths import REPO_ROOT
from fleetmind.serving.app import create_app
from fleetmind.serving.settings import Settings

DATA = Path(__file__).parent / "data" / "k8s"


def _lists() -> tuple[dict, dict, dict, dict]:
    return tuple(  # type: ignore[return-value]
        json.loads((DATA / f"api_{k}.json").read_text())
        for k in ("nodes", "pods", "services", "endpointslices")
    )


def _edges(g: GraphModel) -> set[tuple[str, str, str]]:
    return {(e.src, e.dst, e.kind) for e in g.edges}


def test_graph_from_recorded_api_lists() -> None:
    nodes, pods, services, slices = _lists()
    calls = calls_from_spans(json.loads((DATA / "spans_otlp.json").read_text()))
    g = build_graph(
        nodes, pods, services, slices, calls=calls, nvlinks={"gpu-a100-0": [0, 1, 2, 3]}
    )
    graph = DependencyGraph.from_model(g)  # ids unique, edge ends exist
    kinds = {n.id: n.kind for n in g.nodes}
    assert g.name == "k8s-prod-eu" and kinds["prod-eu"] == "cluster"  # cluster from node labels
    assert sum(k == "host" for k in kinds.values()) == 3
    assert sum(k == "gpu" for k in kinds.values()) == 8  # 4 + 4 + none on the CPU node
    gpu = graph.node("prod-eu/gpu/gpu-a100-0/3")
    assert gpu.attrs["model"] == "NVIDIA-A100-SXM4-80GB" and gpu.match["gpu"] == "3"
    assert graph.node("prod-eu/host/gpu-a100-0").attrs["zone"] == "eu-west-1a"
    e = _edges(g)
    ranker0 = "prod-eu/pod/ml/ranker-0"
    assert (ranker0, "prod-eu/host/gpu-a100-0", "runs_on") in e
    assert {d for s, d, k in e if s == ranker0 and k == "runs_on" and "/gpu/" in d} == {
        "prod-eu/gpu/gpu-a100-0/1",
        "prod-eu/gpu/gpu-a100-0/2",
    }  # from alibabacloud.com/gpu-index
    assert (ranker0, "prod-eu/svc/ml/ranker", "member_of") in e
    # ranker-1 is not in the EndpointSlice (not ready): no membership although labels match
    assert not any(s == "prod-eu/pod/ml/ranker-1" and k == "member_of" for s, _, k in e)
    assert graph.node("prod-eu/pod/ml/ranker-1").attrs["owner"] == "StatefulSet/ranker"
    assert "prod-eu/pod/ml/batch-embed-28xzq" not in kinds  # Succeeded
    assert ("prod-eu/svc/shop/frontend", "prod-eu/svc/shop/checkout", "calls") in e
    assert ("prod-eu/svc/shop/checkout", "prod-eu/svc/ml/ranker", "calls") in e
    assert ("prod-eu/svc/shop/checkout", "prod-eu/svc/payments-saas", "calls") in e
    links = {d for s, d, k in e if s == "prod-eu/link/gpu-a100-0/nvlink"}
    assert len(links) == 4
    # alerts map onto the built nodes
    assert (
        graph.node_for_alert({"cluster": "prod-eu", "namespace": "ml", "pod": "ranker-0"})
        == ranker0
    )
    assert graph.node_for_alert({"cluster": "prod-eu", "node": "gpu-a100-1", "gpu": "2"}) == (
        "prod-eu/gpu/gpu-a100-1/2"
    )


def test_selectors_stand_in_for_endpoint_slices() -> None:
    nodes, pods, services, _ = _lists()
    e = _edges(build_graph(nodes, pods, services, None, cluster="eu"))
    assert ("eu/pod/ml/ranker-1", "eu/svc/ml/ranker", "member_of") in e
    assert ("eu/pod/shop/frontend-7c9d-abcde", "eu/svc/shop/frontend", "member_of") in e
    assert not any(s.startswith("eu/pod/shop/") and d == "eu/svc/ml/ranker" for s, d, _ in e)


def test_otlp_and_jaeger_exports_give_the_same_calls() -> None:
    otlp = calls_from_spans(json.loads((DATA / "spans_otlp.json").read_text()))
    jaeger = calls_from_spans(json.loads((DATA / "spans_jaeger.json").read_text()))
    assert (
        otlp
        == jaeger
        == [
            ("checkout", "payments-saas"),
            ("checkout", "ranker"),
            ("frontend", "checkout"),
        ]
    )
    with pytest.raises(DataError, match="OTLP JSON"):
        calls_from_spans({"spans": []})


def test_committed_json_schema_is_generated_from_the_model() -> None:
    committed = json.loads((REPO_ROOT / "docs" / "graph.schema.json").read_text())
    assert committed == graph_json_schema()
    jsonschema = pytest.importorskip("jsonschema")
    example = json.loads((REPO_ROOT / "serving" / "defaults" / "graph.json").read_text())
    jsonschema.validate(example, committed)
    bad = {**example, "nodes": [{**example["nodes"][0], "kind": "toaster"}]}
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(bad, committed)


def test_one_model_rejects_bad_graphs_with_the_place() -> None:
    with pytest.raises(DataError, match=r"nodes\.0\.kind"):
        DependencyGraph.from_json({"nodes": [{"id": "a", "kind": "toaster"}], "edges": []})
    with pytest.raises(DataError, match="unknown node 'b'"):
        DependencyGraph.from_json({"nodes": [{"id": "a", "kind": "host"}], "edges": [
            {"src": "a", "dst": "b", "kind": "calls"}]})  # fmt: skip
    g = DependencyGraph.from_json(
        {"nodes": [{"id": 7, "kind": "host", "match": {"node": 7}}], "edges": []}
    )
    assert g.nodes[0].id == "7" and g.nodes[0].match == {"node": "7"}  # numbers become text


def _k8s_node(name: str, gpus: str | None = None) -> dict:
    alloc = {} if gpus is None else {"nvidia.com/gpu": gpus}
    return {"metadata": {"name": name, "labels": {}}, "status": {"allocatable": alloc}}


def _k8s_pod(name: str, namespace: str, host: str) -> dict:
    return {"metadata": {"name": name, "namespace": namespace}, "spec": {"nodeName": host},
            "status": {"phase": "Running"}}  # fmt: skip


def test_longest_kubernetes_names_make_valid_ids() -> None:
    host, ns, pod = "h" * 253, "n" * 63, "p" * 253  # DNS subdomain / label limits
    c = "c" * 63  # a label value
    g = build_graph({"items": [_k8s_node(host, "8")]}, {"items": [_k8s_pod(pod, ns, host)]},
                    {"items": []}, cluster=c)  # fmt: skip
    graph = DependencyGraph.from_model(g)
    pid = f"{c}/pod/{ns}/{pod}"
    assert len(pid) == 385 and graph.node(pid).match["pod"] == pod
    assert (pid, f"{c}/host/{host}", "runs_on") in _edges(g)


def test_build_refuses_what_a_graph_cannot_hold(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from fleetmind.data import graph_build

    empty = {"items": []}
    # more GPUs than a node has: that node gets none, with a warning, the cluster is still built
    with pytest.warns(
        graph_build.GraphBuildWarning,
        match=r"node 'big' left out: allocatable nvidia.com/gpu gives 1,000 GPUs, more than 64",
    ):
        big = build_graph({"items": [_k8s_node("big", "1000")]}, empty, empty)
    assert [n.kind for n in big.nodes] == ["cluster", "host"]
    assert graph_build._gpu_count(_k8s_node("dgx", "64")) == 64
    monkeypatch.setattr(graph_build, "MAX_GRAPH_NODES", 20)
    with pytest.raises(DataError, match="more than 20 graph nodes"):
        build_graph({"items": [_k8s_node(f"n{i}", "8") for i in range(3)]}, empty, empty)
    monkeypatch.undo()
    with pytest.raises(DataError, match=r"^cannot build the graph: graph 'k8s-c.*: name: String"):
        build_graph(empty, empty, empty, cluster="c" * 300)
    with pytest.raises(DataError, match=r"^cannot build the graph: service '.*\(606 characters\)"):
        build_graph(empty, empty, empty, cluster="c", calls=[("a", "s" * 600)])
    rec = tmp_path / "rec"
    rec.mkdir()
    (rec / "nodes.json").write_text(json.dumps({"items": [_k8s_node("n", "8")]}))
    (rec / "pods.json").write_text(json.dumps(empty))
    (rec / "services.json").write_text(json.dumps(empty))
    out = tmp_path / "g.json"
    args = ["graph", "build", "--from-dir", str(rec), "--out", str(out), "--cluster", "c" * 300]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert err.startswith("fleetmind: error: cannot build the graph: graph 'k8s-c")
    assert err.count("\n") == 1 and not out.exists()


def _fake_api(tmp_path: Path) -> tuple[ThreadingHTTPServer, Path]:
    paths = {
        "/api/v1/nodes": "api_nodes.json",
        "/api/v1/pods": "api_pods.json",
        "/api/v1/services": "api_services.json",
        "/apis/discovery.k8s.io/v1/endpointslices": "api_endpointslices.json",
    }

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802
            f = paths.get(self.path.split("?", 1)[0])
            if f is None:
                self.send_error(404)
                return
            body = (DATA / f).read_bytes()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    kubeconfig = tmp_path / "kubeconfig"
    url = f"http://127.0.0.1:{server.server_address[1]}"
    kubeconfig.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "test",
        "clusters": [{"name": "test", "cluster": {"server": url}}],
        "contexts": [{"name": "test", "context": {"cluster": "test", "user": "u"}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
    }))  # fmt: skip
    return server, kubeconfig


def test_cli_builds_from_the_api_and_from_recorded_files(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("kubernetes")
    server, kubeconfig = _fake_api(tmp_path)
    try:
        out = tmp_path / "api.json"
        rc = main(["graph", "build", "--kubeconfig", str(kubeconfig), "--spans",
                   str(DATA / "spans_jaeger.json"), "--out", str(out)])  # fmt: skip
    finally:
        server.shutdown()
        server.server_close()
    assert rc == 0 and "-> " in capsys.readouterr().out
    rec = tmp_path / "rec"
    rec.mkdir()
    for k in ("nodes", "pods", "services", "endpointslices"):
        shutil.copy(DATA / f"api_{k}.json", rec / f"{k}.json")
    out2 = tmp_path / "files.json"
    assert main(["graph", "build", "--from-dir", str(rec), "--spans", str(DATA / "spans_otlp.json"),
                 "--out", str(out2)]) == 0  # fmt: skip
    assert json.loads(out.read_text()) == json.loads(out2.read_text())
    assert main(["graph", "build", "--from-dir", str(tmp_path / "none"), "--out", str(out2)]) == 2


def test_service_reloads_a_rebuilt_graph(tmp_path: Path) -> None:
    nodes, pods, services, slices = _lists()
    path = tmp_path / "graph.json"
    path.write_text(build_graph(nodes, pods, services, slices).model_dump_json())
    settings = Settings(
        database_url=f"sqlite:///{tmp_path}/g.db",
        graph=str(path),
        graph_refresh_s=0.05,
        rca_model="baseline:upstream-coverage",
        placement_model="heuristic:builtin-bestfit",
        incident_worker=False,
    )
    with TestClient(create_app(settings)) as c:
        before = c.get("/api/v1/graph").json()
        assert before["name"] == "k8s-prod-eu"
        calls = calls_from_spans(json.loads((DATA / "spans_otlp.json").read_text()))
        path.write_text(
            build_graph(nodes, pods, services, slices, calls=calls, name="v2").model_dump_json()
        )
        deadline = time.time() + 10
        while c.get("/api/v1/graph").json()["name"] != "v2" and time.time() < deadline:
            time.sleep(0.05)
        after = c.get("/api/v1/graph").json()
        assert after["name"] == "v2" and len(after["edges"]) > len(before["edges"])
        path.write_text('{"nodes": [{"id": "x", "kind": "toaster"}], "edges": []}')
        refresher = c.app.state.graph_refresher
        deadline = time.time() + 10
        while refresher.last_error is None and time.time() < deadline:
            time.sleep(0.05)
        assert "nodes.0.kind" in refresher.last_error
        assert c.get("/api/v1/graph").json()["name"] == "v2"  # the bad file changed nothing
