"""``fleetmind graph build`` against what upstream components really produce: GPU Operator
time-slicing and MIG labels, EndpointSlice readiness, the OpenTelemetry Collector's file exporter,
service namespaces in traces, a pod's node name for NVML, and API servers that hang, refuse, or
page their lists."""

from __future__ import annotations

import json
import shutil
import sys
import threading
import time
import types
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlparse

import pytest

from fleetmind.cli import main
from fleetmind.data import graph_build
from fleetmind.data.graph_build import build_graph, calls_from_spans

DATA = Path(__file__).parent / "data" / "k8s"
EMPTY: dict = {"items": []}
API_PATHS = {
    "/api/v1/nodes": "nodes",
    "/api/v1/pods": "pods",
    "/api/v1/services": "services",
    "/apis/discovery.k8s.io/v1/endpointslices": "endpointslices",
}


def _lists() -> dict[str, dict]:
    return {k: json.loads((DATA / f"api_{k}.json").read_text()) for k in API_PATHS.values()}


def _node(name: str, alloc: str | None, **labels: str) -> dict:
    return {
        "metadata": {"name": name, "labels": labels},
        "status": {"allocatable": {} if alloc is None else {"nvidia.com/gpu": alloc}},
    }


def _gpus(g) -> dict[str, int]:  # noqa: ANN001
    out: dict[str, int] = {}
    for n in g.nodes:
        if n.kind == "gpu":
            out[n.match["node"]] = out.get(n.match["node"], 0) + 1
    return out


def _edges(g) -> set[tuple[str, str, str]]:  # noqa: ANN001
    return {(e.src, e.dst, e.kind) for e in g.edges}


# -- 1. time-sliced and MIG GPU nodes ------------------------------------------------------------


def test_time_sliced_and_mig_mixed_nodes_count_physical_gpus() -> None:
    """GPU Operator time-slicing advertises ``nvidia.com/gpu`` = GPUs x replicas, with GFD labels
    ``nvidia.com/gpu.count`` (physical), ``nvidia.com/gpu.replicas``,
    ``nvidia.com/gpu.sharing-strategy`` and the product suffixed ``-SHARED`` (NVIDIA GPU Operator
    docs, "Time-Slicing GPUs in Kubernetes"); dcgm-exporter's ``gpu`` label stays 0-7. With the MIG
    ``mixed`` strategy allocatable ``nvidia.com/gpu`` counts only non-MIG GPUs (NVIDIA "GPU Operator
    with MIG", ``mig.strategy``)."""
    ts = {
        "nvidia.com/gpu.count": "8",
        "nvidia.com/gpu.product": "Tesla-T4-SHARED",
        "nvidia.com/gpu.sharing-strategy": "time-slicing",
    }
    nodes = {
        "items": [
            _node("ts10", "80", **ts, **{"nvidia.com/gpu.replicas": "10"}),
            _node("ts4", "32", **ts, **{"nvidia.com/gpu.replicas": "4"}),
            _node("ts-no-count", "32", **{"nvidia.com/gpu.replicas": "4"}),
            _node(
                "mig-mixed",
                "0",
                **{"nvidia.com/gpu.count": "8", "nvidia.com/mig.strategy": "mixed"},
            ),
            _node(
                "plain",
                "4",
                **{
                    "nvidia.com/gpu.count": "4",
                    "nvidia.com/gpu.replicas": "1",
                    "nvidia.com/gpu.sharing-strategy": "none",
                },
            ),
        ]
    }
    g = build_graph(nodes, EMPTY, EMPTY)
    assert _gpus(g) == {"ts10": 8, "ts4": 8, "ts-no-count": 8, "mig-mixed": 8, "plain": 4}
    host = next(n for n in g.nodes if n.id == "default/host/ts10")
    assert host.attrs["gpu_model"] == "Tesla-T4"
    gpu7 = next(n for n in g.nodes if n.id == "default/gpu/ts10/7")
    assert gpu7.attrs["model"] == "Tesla-T4"
    # the bound applies to physical GPUs: past it the node gets none, with a warning
    big = _node("big", "650", **{"nvidia.com/gpu.count": "65", "nvidia.com/gpu.replicas": "10"})
    with pytest.warns(
        graph_build.GraphBuildWarning,
        match=r"node 'big' left out: label nvidia.com/gpu.count gives 65 GPUs, more than 64",
    ):
        assert _gpus(build_graph({"items": [big]}, EMPTY, EMPTY)) == {}


# -- 2. EndpointSlice readiness ------------------------------------------------------------------


def test_not_ready_endpoints_are_not_members() -> None:
    """EndpointSlice ``conditions.ready``: "nil should be interpreted as true" and a pod that is
    not ready is listed with ``ready: false`` (kubernetes.io, "EndpointSlices", Conditions;
    ``discovery.k8s.io/v1`` ``EndpointConditions``). The recorded ``ml/ranker-x1`` slice lists
    ``ranker-1`` with ``ready: false``."""
    lists = _lists()
    ranker_eps = lists["endpointslices"]["items"][2]["endpoints"]
    assert any(ep["conditions"]["ready"] is False for ep in ranker_eps)  # the fixture's not-ready
    e = _edges(
        build_graph(lists["nodes"], lists["pods"], lists["services"], lists["endpointslices"])
    )
    assert ("prod-eu/pod/ml/ranker-0", "prod-eu/svc/ml/ranker", "member_of") in e
    assert not any(s == "prod-eu/pod/ml/ranker-1" and k == "member_of" for s, _, k in e)
    # ready missing or null counts as ready
    for ep in ranker_eps:
        ep["conditions"] = {"ready": None} if ep["targetRef"]["name"] == "ranker-1" else {}
    e = _edges(
        build_graph(lists["nodes"], lists["pods"], lists["services"], lists["endpointslices"])
    )
    assert ("prod-eu/pod/ml/ranker-1", "prod-eu/svc/ml/ranker", "member_of") in e
    assert ("prod-eu/pod/ml/ranker-0", "prod-eu/svc/ml/ranker", "member_of") in e


# -- 3., 4. span files: JSON Lines, parents in other files ---------------------------------------


def _recorded_dir(tmp_path: Path) -> Path:
    rec = tmp_path / "rec"
    rec.mkdir()
    for k in API_PATHS.values():
        shutil.copy(DATA / f"api_{k}.json", rec / f"{k}.json")
    return rec


def _calls(path: Path) -> set[tuple[str, str]]:
    return {
        (e["src"], e["dst"]) for e in json.loads(path.read_text())["edges"] if e["kind"] == "calls"
    }


def test_collector_file_exporter_json_lines(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The OpenTelemetry Collector's file exporter writes one OTLP JSON export request per line
    (opentelemetry-collector-contrib, ``exporter/fileexporter/README.md``: "the data is written as
    JSON Lines"); ``spans_otlp_fileexporter.jsonl`` is the recorded trace in that shape (each
    service's spans on its own line, so every parent is on another line)."""
    out = tmp_path / "g.json"
    rc = main(
        [
            "graph",
            "build",
            "--from-dir",
            str(_recorded_dir(tmp_path)),
            "--spans",
            str(DATA / "spans_otlp_fileexporter.jsonl"),
            "--out",
            str(out),
        ]
    )
    assert rc == 0, capsys.readouterr().err
    assert _calls(out) == {
        ("prod-eu/svc/shop/frontend", "prod-eu/svc/shop/checkout"),
        ("prod-eu/svc/shop/checkout", "prod-eu/svc/ml/ranker"),
        ("prod-eu/svc/shop/checkout", "prod-eu/svc/payments-saas"),
    }
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"resourceSpans": []}\n{"resourceSpans": [\n')
    assert (
        main(
            [
                "graph",
                "build",
                "--from-dir",
                str(tmp_path / "rec"),
                "--spans",
                str(bad),
                "--out",
                str(out),
            ]
        )
        == 2
    )
    err = capsys.readouterr().err
    assert err.startswith(f"fleetmind: error: span file {bad} line 2 is not valid JSON")
    assert err.count("\n") == 1


def test_parent_span_in_another_file_gives_the_call(tmp_path: Path) -> None:
    """A trace's spans reach a file exporter in separate export requests, one per batch and per
    service (OpenTelemetry specification, "Trace SDK", BatchSpanProcessor; fileexporter
    ``rotation`` splits files), so a span's parent is often in another file. Each service's spans
    of the recorded OTLP trace go to their own file here."""
    doc = json.loads((DATA / "spans_otlp.json").read_text())
    files = []
    for i, rs in enumerate(doc["resourceSpans"]):
        files.append(tmp_path / f"part{i}.json")
        files[-1].write_text(json.dumps({"resourceSpans": [rs]}))
    docs = [json.loads(f.read_text()) for f in files]
    assert (
        calls_from_spans(*docs)
        == calls_from_spans(doc)
        == [("checkout", "payments-saas"), ("checkout", "ranker"), ("frontend", "checkout")]
    )
    out = tmp_path / "g.json"
    rc = main(
        [
            "graph",
            "build",
            "--from-dir",
            str(_recorded_dir(tmp_path)),
            "--spans",
            *map(str, files),
            "--out",
            str(out),
        ]
    )
    assert rc == 0
    assert ("prod-eu/svc/shop/frontend", "prod-eu/svc/shop/checkout") in _calls(out)
    assert ("prod-eu/svc/shop/checkout", "prod-eu/svc/ml/ranker") in _calls(out)


# -- 5. trace services in namespaces -------------------------------------------------------------


def _svc(ns: str, name: str) -> dict:
    return {"metadata": {"namespace": ns, "name": name}, "spec": {}}


def _otlp(service: str, spans: list[tuple[str, str]], **attrs: str) -> dict:
    a = [
        {"key": k, "value": {"stringValue": v}}
        for k, v in {"service.name": service, **attrs}.items()
    ]
    return {
        "resource": {"attributes": a},
        "scopeSpans": [
            {"spans": [{"traceId": "t1", "spanId": s, "parentSpanId": p} for s, p in spans]}
        ],
    }


def test_trace_calls_go_to_the_namespace_the_resource_names() -> None:
    """OpenTelemetry semantic conventions: resource attributes ``k8s.namespace.name`` (Kubernetes
    resource conventions) and ``service.namespace`` ("a namespace for service.name") qualify
    ``service.name``; the same Service name in two namespaces is two Services
    (kubernetes.io, "Namespaces": names are unique within a namespace)."""
    services = {
        "items": [_svc(ns, n) for ns in ("shop", "staging") for n in ("frontend", "checkout")]
    }
    staging = {
        "resourceSpans": [
            _otlp("frontend", [("f1", ""), ("f2", "f1")], **{"k8s.namespace.name": "staging"}),
            _otlp("checkout", [("c1", "f2")], **{"service.namespace": "staging"}),
        ]
    }
    calls = calls_from_spans(staging)
    assert calls == [(("staging", "frontend"), ("staging", "checkout"))]
    e = _edges(build_graph(EMPTY, EMPTY, services, calls=calls))
    assert {(s, d) for s, d, k in e if k == "calls"} == {
        ("default/svc/staging/frontend", "default/svc/staging/checkout")
    }
    # bare names that two namespaces share: no edge to a guessed namespace, a warning instead
    bare = calls_from_spans(
        {"resourceSpans": [_otlp("frontend", [("f1", "")]), _otlp("checkout", [("c1", "f1")])]}
    )
    with pytest.warns(
        graph_build.GraphBuildWarning, match=r"'frontend' left out: .* in 2 namespaces"
    ):
        e = _edges(build_graph(EMPTY, EMPTY, services, calls=bare))
    assert not any(k == "calls" for _, _, k in e)
    # a bare name one namespace has is that Service; one no Service has is outside the cluster
    one = {"items": [_svc("shop", "frontend")]}
    e = _edges(build_graph(EMPTY, EMPTY, one, calls=bare))
    assert ("default/svc/shop/frontend", "default/svc/checkout", "calls") in e


# -- 6. the Kubernetes Node name of an NVML host -------------------------------------------------


@pytest.fixture
def fake_nvml(monkeypatch: pytest.MonkeyPatch) -> None:
    """A pynvml with 4 GPUs all NVLinked through NVSwitch, on a host named like a pod."""
    nv = types.ModuleType("pynvml")

    class NVMLError(Exception):
        pass

    class Pci:
        def __init__(self, bus: str) -> None:
            self.busId = bus.encode()

    funcs: dict[str, Callable[..., object]] = {
        "nvmlInit": lambda: None,
        "nvmlShutdown": lambda: None,
        "nvmlDeviceGetCount": lambda: 4,
        "nvmlDeviceGetHandleByIndex": lambda i: i,
        "nvmlDeviceGetName": lambda h: "NVIDIA H100 80GB HBM3",
        "nvmlDeviceGetPciInfo": lambda h: Pci(f"00000000:{0x18 + h:02X}:00.0"),
        "nvmlDeviceGetTopologyCommonAncestor": lambda a, b: 40,
        "nvmlDeviceGetNvLinkState": lambda h, link: 1,
        "nvmlDeviceGetNvLinkRemotePciInfo": lambda h, link: Pci("00000000:FF:00.0"),
        "nvmlDeviceGetNumaNodeId": lambda h: 0,
    }
    for k, v in funcs.items():
        setattr(nv, k, v)
    nv.NVMLError = NVMLError  # type: ignore[attr-defined]
    nv.NVML_NVLINK_MAX_LINKS = 2  # type: ignore[attr-defined]
    nv.NVML_FEATURE_ENABLED = 1  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "pynvml", nv)
    monkeypatch.setattr("socket.gethostname", lambda: "graph-build-28xzq-abcde")
    monkeypatch.delenv("NODE_NAME", raising=False)


def test_nvml_links_use_the_pods_node_name(
    fake_nvml: None,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """In a pod the hostname is the pod's name; the Node comes from the downward API
    (kubernetes.io, "Expose Pod Information to Containers Through Environment Variables":
    ``fieldRef: fieldPath: spec.nodeName``), as ``NODE_NAME`` here, or ``--node``."""
    rec = _recorded_dir(tmp_path)
    out = tmp_path / "g.json"

    def links() -> int:
        return sum(
            e["src"] == "prod-eu/link/gpu-a100-0/nvlink"
            for e in json.loads(out.read_text())["edges"]
        )

    assert main(["graph", "build", "--from-dir", str(rec), "--nvml", "--out", str(out)]) == 0
    err = capsys.readouterr().err
    assert "warning: NVLinks of node 'graph-build-28xzq-abcde' left out" in err and links() == 0
    monkeypatch.setenv("NODE_NAME", "gpu-a100-0")
    assert main(["graph", "build", "--from-dir", str(rec), "--nvml", "--out", str(out)]) == 0
    assert links() == 4 and "warning" not in capsys.readouterr().err
    monkeypatch.setenv("NODE_NAME", "elsewhere")
    assert (
        main(
            [
                "graph",
                "build",
                "--from-dir",
                str(rec),
                "--nvml",
                "--node",
                "gpu-a100-0",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    assert links() == 4


# -- 7.-9. the Kubernetes API: timeouts, errors, paging, --traces --------------------------------


Responder = Callable[[str, dict[str, list[str]]], tuple | None]
"""``(status, body)`` or ``(status, body, headers)``; ``None``: never answer."""


@pytest.fixture
def api(tmp_path: Path) -> Iterator[Callable[[Responder], Path]]:
    """Start a fake API server whose answers ``respond(path, query)`` gives (None: never answer);
    return a kubeconfig for it."""
    release = threading.Event()
    servers: list[ThreadingHTTPServer] = []

    def start(respond: Responder) -> Path:
        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802
                u = urlparse(self.path)
                answer = respond(u.path, parse_qs(u.query))
                if answer is None:
                    release.wait(30)
                    return
                body = json.dumps(answer[1]).encode()
                self.send_response(answer[0])
                for name, value in (answer[2] if len(answer) > 2 else {}).items():
                    self.send_header(name, value)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        server.daemon_threads = True
        servers.append(server)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        kc = tmp_path / f"kubeconfig-{len(servers)}"
        kc.write_text(
            json.dumps(
                {
                    "apiVersion": "v1",
                    "kind": "Config",
                    "current-context": "t",
                    "clusters": [
                        {
                            "name": "t",
                            "cluster": {"server": f"http://127.0.0.1:{server.server_address[1]}"},
                        }
                    ],
                    "contexts": [{"name": "t", "context": {"cluster": "t", "user": "u"}}],
                    "users": [{"name": "u", "user": {"token": "x"}}],
                }
            )
        )
        return kc

    yield start
    release.set()
    for s in servers:
        s.shutdown()
        s.server_close()


def _status(code: int, reason: str, message: str) -> tuple[int, dict]:
    return code, {
        "kind": "Status",
        "apiVersion": "v1",
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }


def _recorded(path: str, query: dict[str, list[str]]) -> tuple[int, dict]:
    return 200, _lists()[API_PATHS[path]]


def _one_error_line(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err
    assert err.startswith("fleetmind: error: ") and err.count("\n") == 1, err
    return err


@pytest.mark.timeout(120)  # a guard against a hang, not the assertion
def test_api_that_never_answers_times_out(
    api: Callable[[Responder], Path],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The kubernetes Python client waits forever unless a request has ``_request_timeout``
    (kubernetes-client/python ``kubernetes/client/rest.py``: "(connection, read) timeouts");
    ``kubectl --request-timeout`` is the same idea."""
    pytest.importorskip("kubernetes")
    from kubernetes.client import rest

    timeouts: list[object] = []
    real = rest.RESTClientObject.request

    def request(self: object, *args: object, **kw: object) -> object:
        timeouts.append(kw.get("_request_timeout"))
        return real(self, *args, **kw)

    monkeypatch.setattr(rest.RESTClientObject, "request", request)
    kc = api(lambda path, q: None)
    rc = main(
        [
            "graph",
            "build",
            "--kubeconfig",
            str(kc),
            "--timeout",
            "0.5",
            "--out",
            str(tmp_path / "g.json"),
        ]
    )
    assert rc == 2
    # every request carried --timeout (none would wait forever; pytest-timeout guards a hang)
    assert timeouts and all(t == (0.5, 0.5) for t in timeouts), timeouts
    err = _one_error_line(capsys)
    assert "cannot list nodes from the Kubernetes API at http://127.0.0.1:" in err
    assert "no answer within 0.5 s (--timeout)" in err


def test_a_long_retry_after_does_not_outlast_the_timeout(
    api: Callable[[Responder], Path],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """API Priority and Fairness answers 429 with ``Retry-After`` (kubernetes.io "API Priority and
    Fairness"); urllib3 sleeps for any ``Retry-After`` unless told a maximum (``retry_after_max``),
    so a proxy's ``Retry-After: 100`` held ``--timeout 0.5`` for 200 s (two retries)."""
    pytest.importorskip("kubernetes")
    seen: list[str] = []

    def busy(path: str, q: dict[str, list[str]]) -> tuple:
        seen.append(path)
        answer = _status(429, "TooManyRequests", "too many requests, please try again later")
        return (*answer, {"Retry-After": "100"})

    kc = api(busy)
    slept: list[float] = []  # urllib3's waits (``Retry.sleep_for_retry``), recorded, not waited
    monkeypatch.setattr(time, "sleep", slept.append)
    rc = main(
        [
            "graph",
            "build",
            "--kubeconfig",
            str(kc),
            "--timeout",
            "0.5",
            "--out",
            str(tmp_path / "g"),
        ]
    )
    assert rc == 2
    assert slept and all(0 < t <= 0.5 for t in slept), slept  # each at most --timeout, not 100 s
    assert len(seen) == 3  # the request and its two retries, each after at most --timeout
    assert "429 Too Many Requests" in _one_error_line(capsys)


def test_api_errors_name_the_resource_status_and_message(
    api: Callable[[Responder], Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A refused request answers a ``Status`` object with ``reason`` and ``message``
    (kubernetes.io "Kubernetes API Concepts", and the API conventions' "Response Status Kind"); a
    missing ``discovery.k8s.io/v1`` answers 404, one the account may not list 403."""
    pytest.importorskip("kubernetes")
    out = tmp_path / "g.json"
    forbidden = (
        'nodes is forbidden: User "system:serviceaccount:ops:graph" cannot list resource "nodes"'
    )
    kc = api(lambda path, q: _status(403, "Forbidden", forbidden))
    assert main(["graph", "build", "--kubeconfig", str(kc), "--out", str(out)]) == 2
    err = _one_error_line(capsys)
    assert "cannot list nodes from the Kubernetes API at http://127.0.0.1:" in err
    assert f": 403 Forbidden: {forbidden}" in err
    # an EndpointSlice failure other than 404/403 is an error, not a silent fallback
    kc = api(
        lambda path, q: (
            _status(500, "InternalError", "etcdserver: request timed out")
            if "endpointslices" in path
            else _recorded(path, q)
        )
    )
    assert main(["graph", "build", "--kubeconfig", str(kc), "--out", str(out)]) == 2
    err = _one_error_line(capsys)
    assert (
        "cannot list endpointslices" in err
        and "500 Internal Server Error: etcdserver: request" in err
    )
    kc = api(
        lambda path, q: (
            _status(403, "Forbidden", "endpointslices.discovery.k8s.io is forbidden")
            if "endpointslices" in path
            else _recorded(path, q)
        )
    )
    assert main(["graph", "build", "--kubeconfig", str(kc), "--out", str(out)]) == 0
    assert "fleetmind: warning: cannot list endpointslices" in capsys.readouterr().err
    missing = tmp_path / "nonexist.yaml"
    assert main(["graph", "build", "--kubeconfig", str(missing), "--out", str(out)]) == 2
    assert f"kubeconfig file not found: {missing} (--kubeconfig" in _one_error_line(capsys)


def test_api_lists_are_read_page_by_page(
    api: Callable[[Responder], Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """List chunking: a client sends ``limit`` and follows ``metadata.continue`` until it is empty;
    the server may return fewer items than ``limit`` (kubernetes.io "Kubernetes API Concepts",
    "Retrieving large results sets in chunks"). This server answers two items a page."""
    pytest.importorskip("kubernetes")
    asked: list[str] = []

    def paged(path: str, q: dict[str, list[str]]) -> tuple[int, dict]:
        asked.append(q.get("limit", ["none"])[0])
        doc = _lists()[API_PATHS[path]]
        start = int(q.get("continue", ["0"])[0])
        items = doc["items"][start : start + 2]
        meta = {"resourceVersion": "1"}
        if start + 2 < len(doc["items"]):
            meta |= {
                "continue": str(start + 2),
                "remainingItemCount": len(doc["items"]) - start - 2,
            }
        return 200, {**doc, "items": items, "metadata": meta}

    kc = api(paged)
    out = tmp_path / "api.json"
    assert (
        main(
            [
                "graph",
                "build",
                "--kubeconfig",
                str(kc),
                "--spans",
                str(DATA / "spans_otlp.json"),
                "--out",
                str(out),
            ]
        )
        == 0
    )
    assert asked and all(a.isdigit() for a in asked)
    files = tmp_path / "files.json"
    assert (
        main(
            [
                "graph",
                "build",
                "--from-dir",
                str(_recorded_dir(tmp_path)),
                "--spans",
                str(DATA / "spans_otlp.json"),
                "--out",
                str(files),
            ]
        )
        == 0
    )
    capsys.readouterr()
    assert json.loads(out.read_text()) == json.loads(files.read_text())
    assert sum(n["kind"] == "pod" for n in json.loads(out.read_text())["nodes"]) == 4


def test_traces_is_an_alias_of_spans(tmp_path: Path) -> None:
    """DESIGN.md's CLI table gives the contract ``fleetmind graph build [--kubeconfig ...]
    [--traces FILE] --out G``; ``--traces`` names the same span files as ``--spans``."""
    rec = _recorded_dir(tmp_path)
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    spans = str(DATA / "spans_jaeger.json")
    assert main(["graph", "build", "--from-dir", str(rec), "--traces", spans, "--out", str(a)]) == 0
    assert main(["graph", "build", "--from-dir", str(rec), "--spans", spans, "--out", str(b)]) == 0
    assert json.loads(a.read_text()) == json.loads(b.read_text())
    assert ("prod-eu/svc/shop/frontend", "prod-eu/svc/shop/checkout") in _calls(a)
