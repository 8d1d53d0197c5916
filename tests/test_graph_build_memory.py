"""``fleetmind graph build`` keeps of each listed item only what the graph is built from.

A pod from the API server is about 7 KB of JSON (``managedFields``, ``env``, probes, statuses),
38 KB once parsed; kept whole, 30,000 of them took 1.4 GB and the graph CronJob's 1 GiB limit
OOMKilled every run. :func:`fleetmind.data.graph_build.slim_list_items` cuts each page's items down
to :data:`~fleetmind.data.graph_build.READ_FIELDS`; these tests check that the graph stays the same
byte for byte (recorded lists, a seeded synthetic cluster with every field the builder reads, fields
of the wrong type, the CLI against a paging API server) and that every field the builder reads is
listed there.

The bulk added to each item follows what ``kubectl get -o json`` shows of a Deployment's pod, a
Node, a Service and an EndpointSlice on Kubernetes 1.30 (``k8s.io/api`` ``core/v1`` and
``discovery/v1`` types; ``metadata.managedFields`` entries of ``fieldsType: FieldsV1`` written by
server-side apply, "Server-Side Apply", kubernetes.io).
"""

from __future__ import annotations

import copy
import json
import random
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

import pytest

from fleetmind.cli import graph as graph_cli
from fleetmind.cli import main
from fleetmind.data.graph_build import (
    GPU_INDEX_ANNOTATION,
    READ_FIELDS,
    build_graph,
    slim_list_items,
)

DATA = Path(__file__).parent / "data" / "k8s"
KINDS = ("nodes", "pods", "services", "endpointslices")
LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"


# -- realistic items ----------------------------------------------------------------------------


def _managed(manager: str, fields: dict[str, Any], subresource: str | None = None) -> dict:
    entry = {"manager": manager, "operation": "Update", "apiVersion": "v1",
             "time": "2026-01-01T00:00:00Z", "fieldsType": "FieldsV1", "fieldsV1": fields}  # fmt: skip
    return entry | ({"subresource": subresource} if subresource else {})


def _bulk_meta(meta: Any, kind: str) -> None:
    if not isinstance(meta, dict):
        return
    meta.setdefault("uid", f"{kind}-0b3c7e2a-1f4d-4c8e-9a6b")
    meta.setdefault("resourceVersion", "1000001")
    meta.setdefault("creationTimestamp", "2026-01-01T00:00:00Z")
    notes = meta.setdefault("annotations", {})
    if isinstance(notes, dict):
        notes[LAST_APPLIED] = json.dumps({"kind": kind, "metadata": {"name": meta.get("name")}})
        notes["deployment.kubernetes.io/revision"] = "3"
    meta["managedFields"] = [
        _managed("kubectl-client-side-apply", {"f:metadata": {"f:labels": {".": {}},
                                                              "f:annotations": {".": {}}}}),
        _managed("kube-controller-manager", {"f:status": {f"f:c{i}": {} for i in range(20)}},
                 "status"),
    ]  # fmt: skip


def _bulk_container(ct: Any, i: int) -> None:
    if not isinstance(ct, dict):
        return
    ct.setdefault("image", f"registry.example.com/app:{i}")
    ct["env"] = [{"name": f"ENV_{k}", "value": f"value-{k}-xxxxxxxxxxxxxxxx"} for k in range(15)]
    ct["envFrom"] = [{"configMapRef": {"name": "app-config"}}]
    probe = {"httpGet": {"path": "/healthz", "port": 8080, "scheme": "HTTP"}, "periodSeconds": 10}
    ct["readinessProbe"] = ct["livenessProbe"] = ct["startupProbe"] = probe
    ct["volumeMounts"] = [{"name": "kube-api-access-abcde", "readOnly": True,
                           "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount"}]  # fmt: skip
    ct["ports"] = [{"containerPort": 8080, "protocol": "TCP", "name": "http"}]
    ct["terminationMessagePath"] = "/dev/termination-log"
    res = ct.setdefault("resources", {})
    if isinstance(res, dict):
        for field in ("limits", "requests"):
            if isinstance(res.setdefault(field, {}), dict):
                res[field].setdefault("cpu", "1")
                res[field].setdefault("memory", "2Gi")


def _bulk(kind: str, item: Any) -> Any:
    """``item`` (a copy) with what a real API server adds to it and the builder never reads."""
    item = copy.deepcopy(item)
    if not isinstance(item, dict):
        return item
    item.setdefault("apiVersion", "v1")
    _bulk_meta(item.get("metadata"), kind)
    spec, status = item.get("spec"), item.get("status")
    if kind == "pods" and isinstance(spec, dict):
        for field in ("containers", "initContainers"):
            for i, ct in enumerate(
                spec.get(field) or [] if isinstance(spec.get(field), list) else []
            ):
                _bulk_container(ct, i)
        vols = spec.setdefault("volumes", [])
        if isinstance(vols, list):
            vols.append({"name": "kube-api-access-abcde", "projected": {"defaultMode": 420,
                         "sources": [{"serviceAccountToken": {"path": "token"}}]}})  # fmt: skip
        spec["tolerations"] = [{"key": "node.kubernetes.io/not-ready", "operator": "Exists",
                                "effect": "NoExecute", "tolerationSeconds": 300}]  # fmt: skip
        spec.update(serviceAccountName="app", dnsPolicy="ClusterFirst", restartPolicy="Always")
    if kind == "pods" and isinstance(status, dict):
        status["conditions"] = [{"type": t, "status": "True", "lastProbeTime": None,
                                 "lastTransitionTime": "2026-01-01T00:00:00Z"}
                                for t in ("Initialized", "Ready", "ContainersReady", "PodScheduled")]  # fmt: skip
        status["containerStatuses"] = [{"name": "app", "ready": True, "restartCount": 0,
                                        "imageID": "sha256:" + "a" * 64, "started": True,
                                        "state": {"running": {"startedAt": "2026-01-01T00:00:00Z"}}}]  # fmt: skip
        status.update(hostIP="10.0.0.1", podIP="10.1.2.3", qosClass="Burstable")
    if kind == "nodes" and isinstance(status, dict):
        status["images"] = [{"names": [f"registry.example.com/img{k}@sha256:{'c' * 64}"],
                             "sizeBytes": 1_000_000 + k} for k in range(40)]  # fmt: skip
        status["conditions"] = [{"type": t, "status": "False", "reason": f"No{t}"}
                                for t in ("MemoryPressure", "DiskPressure", "PIDPressure")]  # fmt: skip
        status["nodeInfo"] = {
            "kubeletVersion": "v1.30.4",
            "containerRuntimeVersion": "containerd://1.7",
        }
        status["daemonEndpoints"] = {"kubeletEndpoint": {"Port": 10250}}
    if kind == "nodes":
        item["spec"] = {"podCIDR": "10.244.0.0/24", "providerID": "aws:///us-east-1a/i-0abc"}
    if kind == "services" and isinstance(spec, dict):
        spec.update(clusterIP="10.96.0.10", type="ClusterIP", sessionAffinity="None",
                    ports=[{"name": "http", "port": 80, "targetPort": 8080, "protocol": "TCP"}])  # fmt: skip
    if kind == "endpointslices":
        item.update(addressType="IPv4", ports=[{"name": "http", "port": 8080, "protocol": "TCP"}])
        for ep in item.get("endpoints") or [] if isinstance(item.get("endpoints"), list) else []:
            if isinstance(ep, dict):
                ep.update(addresses=["10.1.2.3"], nodeName="n0", zone="us-east-1a",
                          hints={"forZones": [{"name": "us-east-1a"}]})  # fmt: skip
    return item


def _bulky(lists: dict[str, Any]) -> dict[str, Any]:
    return {k: None if lists.get(k) is None else {**lists[k], "items": [_bulk(k, x) for x in lists[k]["items"]]}
            for k in KINDS}  # fmt: skip


def _synthetic(seed: int, n_nodes: int = 12, n_pods: int = 120) -> dict[str, Any]:
    """A seeded cluster using every field the builder reads: GPU labels (MIG, shared, replicas,
    GKE), capacity and allocatable, addresses, owners, the GPU-index annotation, GPU requests in
    containers, init containers and sidecars, claims, phases, selectors and EndpointSlices with
    Pod and Node endpoints, ready, not ready and unset."""
    rng = random.Random(seed)
    products = ["NVIDIA-A100-SXM4-80GB", "NVIDIA-H100-80GB-HBM3-MIG-3g.40gb",
                "Tesla-T4-SHARED", "NVIDIA-A100-SXM4-40GB-MIG-1g.10gb", None]  # fmt: skip
    nodes = []
    for i in range(n_nodes):
        labels: dict[str, str] = {"kubernetes.io/hostname": f"n{i}",
                                  "topology.kubernetes.io/zone": f"z{i % 3}",
                                  "topology.kubernetes.io/region": "r1",
                                  "fleetmind.io/cluster": "prod"}  # fmt: skip
        product = rng.choice(products)
        gpus = rng.choice([0, 4, 8])
        per = 2 if product and "3g" in product else 4 if product and "1g.10gb" in product else 1
        if product:
            labels["nvidia.com/gpu.product"] = product
            labels["nvidia.com/gpu.count"] = str(gpus * per)
        if product and product.endswith("SHARED"):
            labels["nvidia.com/gpu.replicas"] = "4"
            per = 4
        cap = {"cpu": "64", "memory": "512Gi"} | (
            {"nvidia.com/gpu": str(gpus * per)} if gpus else {}
        )
        nodes.append({"metadata": {"name": f"n{i}", "labels": labels},
                      "status": {"capacity": cap, "allocatable": dict(cap),
                                 "addresses": [{"type": "InternalIP", "address": f"10.0.0.{i}"},
                                               {"type": "Hostname", "address": f"ip-10-0-0-{i}"},
                                               {"type": "ExternalIP", "address": f"3.3.3.{i}"}]}})  # fmt: skip
    apps = [f"app{k}" for k in range(6)]
    pods = []
    for i in range(n_pods):
        app, node = rng.choice(apps), f"n{rng.randrange(n_nodes)}"
        gpu = {"nvidia.com/gpu": str(rng.choice([1, 2, 8]))} if rng.random() < 0.4 else {}
        res = rng.choice([{"limits": gpu}, {"requests": gpu}, {"limits": {}, "requests": gpu}])
        spec: dict[str, Any] = {"nodeName": node, "containers": [{"name": "app", "resources": res}]}
        if rng.random() < 0.3:
            spec["initContainers"] = [{"name": "side", "restartPolicy": "Always",
                                       "resources": {"limits": {"nvidia.com/gpu": "1"}}},
                                      {"name": "init", "resources": {"limits": dict(gpu)}}]  # fmt: skip
        if rng.random() < 0.3:
            spec["volumes"] = [{"name": "data", "persistentVolumeClaim": {"claimName": f"data-{i}"}},
                               {"name": "scratch", "ephemeral": {"volumeClaimTemplate": {"spec": {}}}}]  # fmt: skip
        owner = {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": f"{app}-7f9c",
                 "uid": "u", "controller": rng.random() < 0.8}  # fmt: skip
        meta: dict[str, Any] = {"name": f"{app}-{i}", "namespace": rng.choice(["prod", "ml"]),
                                "labels": {"app": app, "tier": rng.choice(["a", "b"])},
                                "ownerReferences": [owner]}  # fmt: skip
        if rng.random() < 0.3:
            meta["annotations"] = {GPU_INDEX_ANNOTATION: rng.choice(["0", "1-2", "0,3", "9"])}
        phase = rng.choice(["Running"] * 6 + ["Pending", "Succeeded", "Failed"])
        pods.append({"metadata": meta, "spec": spec, "status": {"phase": phase}})
    services, slices = [], []
    for ns in ("prod", "ml"):
        for app in apps:
            sel = {"app": app} | ({"tier": "a"} if app == "app1" else {})
            services.append({"metadata": {"name": app, "namespace": ns}, "spec": {"selector": sel}})
            eps = []
            for p in pods:
                if p["metadata"]["namespace"] == ns and p["metadata"]["labels"]["app"] == app:
                    ready = rng.choice([True, False, None])
                    ref = {"kind": "Pod", "name": p["metadata"]["name"]}
                    if rng.random() < 0.5:
                        ref["namespace"] = ns
                    eps.append(
                        {"targetRef": ref}
                        | ({} if ready is None else {"conditions": {"ready": ready}})
                    )
            slices.append({"metadata": {"name": f"{app}-x1", "namespace": ns,
                                        "labels": {"kubernetes.io/service-name": app}},
                           "endpoints": eps})  # fmt: skip
    services.append({"metadata": {"name": "kubelet", "namespace": "kube-system"}, "spec": {}})
    slices.append({"metadata": {"name": "kubelet-1", "namespace": "kube-system",
                                "labels": {"kubernetes.io/service-name": "kubelet"}},
                   "endpoints": [{"targetRef": {"kind": "Node", "name": n["metadata"]["name"]}}
                                 for n in nodes]})  # fmt: skip
    return {k: {"kind": "List", "items": v}
            for k, v in zip(KINDS, (nodes, pods, services, slices), strict=True)}  # fmt: skip


def _recorded() -> dict[str, Any]:
    return {k: json.loads((DATA / f"api_{k}.json").read_text()) for k in KINDS}


def _kps() -> dict[str, Any]:
    return json.loads((DATA / "kps_cluster.json").read_text())


def _slim(lists: dict[str, Any]) -> dict[str, Any]:
    return {k: None if lists.get(k) is None else {**lists[k], "items": slim_list_items(k, lists[k]["items"])}
            for k in KINDS}  # fmt: skip


def _graph(lists: dict[str, Any], **kw: Any) -> str:
    return build_graph(*(lists.get(k) for k in KINDS), **kw).model_dump_json()


def _benchmark_cluster() -> dict[str, Any]:
    """The cluster ``benchmarks.serving.graph_build_memory`` serves, small."""
    from benchmarks.serving.graph_build_memory import _Cluster

    cluster = _Cluster(6, 3)
    return {k: cluster.page(k, 0, 0) for k in KINDS}


CLUSTERS = {
    "benchmark": _benchmark_cluster,
    "recorded": _recorded,
    "kps": _kps,
    "synthetic0": lambda: _synthetic(0),
    "synthetic1": lambda: _synthetic(1),
    "synthetic2-no-slices": lambda: {**_synthetic(2), "endpointslices": None},
}


# -- the graph stays the same -------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(CLUSTERS))
def test_slimmed_items_build_the_same_graph(name: str) -> None:
    lists = _bulky(CLUSTERS[name]())
    full = _graph(lists, nvlinks={"n0": [0, 1]} if name.startswith("synthetic") else None)
    slim = _graph(_slim(lists), nvlinks={"n0": [0, 1]} if name.startswith("synthetic") else None)
    assert slim == full
    assert json.loads(full)["edges"]  # a graph with something in it


def test_fields_of_the_wrong_type_read_the_same_after_slimming() -> None:
    """A field of the wrong type reads as absent (docs/graph.md); slimming keeps every type."""
    lists = _synthetic(3, n_nodes=4, n_pods=20)
    odd = [
        ("nodes", ("metadata", "labels"), ["x"]),
        ("nodes", ("status",), "Ready"),
        ("nodes", ("status", "addresses"), {"type": "InternalIP"}),
        ("pods", ("metadata", "annotations"), [GPU_INDEX_ANNOTATION]),
        ("pods", ("metadata", "ownerReferences"), {"kind": "Job", "name": "j"}),
        ("pods", ("spec", "containers"), {"resources": {"limits": {"nvidia.com/gpu": "8"}}}),
        ("pods", ("spec", "volumes"), [["data"], 3, {"name": "v", "ephemeral": "yes"}]),
        ("pods", ("status",), ["Running"]),
        ("services", ("spec", "selector"), ["app"]),
        ("endpointslices", ("endpoints",), {"targetRef": {}}),
    ]
    for i, (kind, path, value) in enumerate(odd):
        obj = lists[kind]["items"][i % len(lists[kind]["items"])]
        for key in path[:-1]:
            obj = obj.setdefault(key, {})
        obj[path[-1]] = value
    lists["pods"]["items"] += ["not an object", None, 7]
    assert _graph(_slim(_bulky(lists))) == _graph(_bulky(lists))


class _Recorded(dict):
    """A JSON object that notes the path of every key read from it (``get``, ``[]``, ``in``)."""

    def __init__(self, value: dict, path: tuple[str, ...], seen: set[tuple[str, ...]]) -> None:
        super().__init__({k: _record(v, (*path, k), seen) for k, v in value.items()})
        self._path, self._seen = path, seen

    def get(self, key: Any, default: Any = None) -> Any:
        self._seen.add((*self._path, key))
        return super().get(key, default)

    def __getitem__(self, key: Any) -> Any:
        self._seen.add((*self._path, key))
        return super().__getitem__(key)

    def __contains__(self, key: object) -> bool:
        self._seen.add((*self._path, str(key)))
        return super().__contains__(key)


def _record(value: Any, path: tuple[str, ...], seen: set[tuple[str, ...]]) -> Any:
    if isinstance(value, dict):
        return _Recorded(value, path, seen)
    if isinstance(value, list):
        return [_record(v, path, seen) for v in value]
    return value


def _listed(path: tuple[str, ...], keep: Any) -> bool:
    for key in path:
        if keep is True:
            return True
        if not isinstance(keep, dict) or key not in keep:
            return False
        keep = keep[key]
    return True


def test_every_field_the_builder_reads_is_kept() -> None:
    """Guards READ_FIELDS against a builder that learns to read a new field: every key the builder
    reads of an item, on a cluster that uses all of them, is one slimming keeps."""
    lists = _bulky(_synthetic(4))
    seen: dict[str, set[tuple[str, ...]]] = {k: set() for k in KINDS}
    recorded = {k: {"items": [_record(x, (), seen[k]) for x in lists[k]["items"]]} for k in KINDS}
    build_graph(*(recorded[k] for k in KINDS), nvlinks={"n0": [0, 1]})
    for kind in KINDS:
        assert seen[kind], kind
        missed = sorted(p for p in seen[kind] if not _listed(p, READ_FIELDS[kind]))
        assert not missed, f"{kind}: build_graph reads {missed}, which READ_FIELDS drops"


# -- what is dropped ----------------------------------------------------------------------------


def test_slimming_drops_what_the_builder_never_reads() -> None:
    pod = _bulk("pods", _synthetic(5)["pods"]["items"][0])
    pod["metadata"]["annotations"][GPU_INDEX_ANNOTATION] = "0"
    node = _bulk("nodes", _synthetic(5)["nodes"]["items"][0])
    (slim_pod,) = slim_list_items("pods", [pod])
    (slim_node,) = slim_list_items("nodes", [node])
    assert "managedFields" not in slim_pod["metadata"]
    assert slim_pod["metadata"]["annotations"] == {GPU_INDEX_ANNOTATION: "0"}  # no LAST_APPLIED
    assert slim_pod["metadata"]["labels"] == pod["metadata"]["labels"]
    (ct,) = slim_pod["spec"]["containers"]
    assert set(ct) <= {"resources", "restartPolicy"}  # no env, envFrom, probes, volumeMounts, ...
    assert set(ct["resources"]["limits"]) <= {"nvidia.com/gpu"}
    keep = ("phase", "podIP", "podIPs")  # no conditions, statuses
    assert slim_pod["status"] == {k: pod["status"][k] for k in keep if k in pod["status"]}
    assert "tolerations" not in slim_pod["spec"]
    assert "managedFields" not in slim_node["metadata"]
    assert set(slim_node["status"]) == {"capacity", "allocatable", "addresses"}  # no images
    assert "spec" not in slim_node
    assert len(json.dumps(slim_pod)) * 10 < len(json.dumps(pod))
    assert len(json.dumps(slim_node)) * 10 < len(json.dumps(node))
    assert slim_list_items("configmaps", [pod]) == [pod]  # a resource the builder does not read


class _Page:
    def __init__(self, doc: dict[str, Any]) -> None:
        self.data = json.dumps(doc).encode()


def test_list_all_keeps_only_the_read_fields_of_each_page() -> None:
    lists = _bulky(_synthetic(6))
    items = lists["pods"]["items"]

    def list_pods(limit: int, _continue: str = "0", **kw: Any) -> _Page:
        start = int(_continue)
        meta = {"continue": str(start + 7)} if start + 7 < len(items) else {}
        return _Page({"kind": "PodList", "metadata": meta, "items": items[start : start + 7]})

    doc = graph_cli._list_all(list_pods, "pods", "http://k", 5.0)
    assert doc["items"] == slim_list_items("pods", items)
    assert not any("managedFields" in x["metadata"] for x in doc["items"])
    assert _graph({**lists, "pods": doc}) == _graph(lists)


# -- end to end: the CLI against an API server that pages its lists ------------------------------


@pytest.fixture
def api_server(tmp_path: Path) -> Iterator[tuple[Path, dict[str, Any]]]:
    """A fake API server paging the bulky synthetic cluster three items at a time; a kubeconfig."""
    lists = _bulky(_synthetic(7))
    paths = {"/api/v1/nodes": "nodes", "/api/v1/pods": "pods", "/api/v1/services": "services",
             "/apis/discovery.k8s.io/v1/endpointslices": "endpointslices"}  # fmt: skip

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802
            u = urlparse(self.path)
            items = lists[paths[u.path]]["items"]
            start = int(parse_qs(u.query).get("continue", ["0"])[0])
            meta = {"continue": str(start + 3)} if start + 3 < len(items) else {}
            body = json.dumps({"kind": "List", "metadata": meta, "items": items[start : start + 3]})
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body.encode())

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    kc = tmp_path / "kubeconfig"
    kc.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "t",
        "clusters": [{"name": "t", "cluster": {"server": f"http://127.0.0.1:{server.server_address[1]}"}}],
        "contexts": [{"name": "t", "context": {"cluster": "t", "user": "u"}}],
        "users": [{"name": "u", "user": {"token": "x"}}],
    }))  # fmt: skip
    yield kc, lists
    server.shutdown()
    server.server_close()


def test_cli_build_from_the_api_writes_the_graph_of_the_full_items(
    api_server: tuple[Path, dict[str, Any]], tmp_path: Path
) -> None:
    pytest.importorskip("kubernetes")
    kc, lists = api_server
    out = tmp_path / "graph.json"
    assert main(["graph", "build", "--kubeconfig", str(kc), "--out", str(out)]) == 0
    assert out.read_text() == _graph(lists) + "\n"
