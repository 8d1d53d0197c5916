"""``fleetmind graph build --spans``: spans of another Kubernetes cluster draw no calls.

One trace store (Tempo, Jaeger) often takes the spans of several clusters; the OpenTelemetry
semantic conventions name a span's cluster in the resource attribute ``k8s.cluster.name``
(https://opentelemetry.io/docs/specs/semconv/resource/k8s/#cluster: "k8s.cluster.name: The name
of the cluster"). The Collector's resourcedetection processor sets it by default with its
``gcp`` detector (GKE's cluster name); its ``eks`` and ``aks`` detectors have it
``enabled: false``, to be turned on (opentelemetry-collector-contrib,
``processor/resourcedetectionprocessor/internal/{gcp,aws/eks,azure/aks}/metadata.yaml``). A span
whose resource names another cluster than the graph's is left out, with one warning counting
them; a span that names none is kept as before. When no span names the graph's cluster (GKE's
cluster name ``gke-prod-europe-west1`` while ``--cluster`` is the alerts' ``cluster`` label
``prod``) the names are no names of the graph's cluster, and every span is kept, with one
warning. The shape below is two clusters sharing one Helm release: cluster A's frontend calls
checkout, cluster B's frontend calls ranker and a ``fraud-check`` service that only B runs.
"""

from __future__ import annotations

import copy
import json
import shutil
import warnings
from pathlib import Path
from typing import Any

import pytest

from fleetmind.cli import main
from fleetmind.data.graph_build import GraphBuildWarning, build_graph, calls_from_spans

DATA = Path(__file__).parent / "data" / "k8s"
TA, TB = "a" * 32, "b" * 32


def _lists() -> list[Any]:
    return [
        json.loads((DATA / f"api_{k}.json").read_text())
        for k in ("nodes", "pods", "services", "endpointslices")
    ]


def _res(svc: str, ns: str, cluster: str | None, spans: list[dict]) -> dict:
    attrs = [
        {"key": "service.name", "value": {"stringValue": svc}},
        {"key": "k8s.namespace.name", "value": {"stringValue": ns}},
    ]
    if cluster is not None:
        attrs.append({"key": "k8s.cluster.name", "value": {"stringValue": cluster}})
    return {"resource": {"attributes": attrs}, "scopeSpans": [{"spans": spans}]}


def _sp(trace: str, span: str, parent: str | None = None) -> dict:
    d = {"traceId": trace, "spanId": span, "name": "op", "kind": 2}
    return {**d, "parentSpanId": parent} if parent else d


def _shared(a: str = "A", b: str = "B") -> dict:
    """The hunter's shape: one OTLP export holding clusters ``a`` and ``b``."""
    return {
        "resourceSpans": [
            _res("frontend", "shop", a, [_sp(TA, "a1")]),
            _res("checkout", "shop", a, [_sp(TA, "a2", "a1")]),
            _res("frontend", "shop", b, [_sp(TB, "b1")]),
            _res("ranker", "ml", b, [_sp(TB, "b2", "b1")]),
            _res("fraud-check", "shop", b, [_sp(TB, "b3", "b1")]),
        ]
    }


def _build(calls: Any, **kw: Any) -> tuple[set[tuple[str, str]], set[str], list[str]]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", GraphBuildWarning)
        g = build_graph(*_lists(), calls=calls, **kw)
    c = g.name.removeprefix("k8s-")
    calls_ = {(e.src, e.dst) for e in g.edges if e.kind == "calls"}
    svcs = {n.id.removeprefix(f"{c}/svc/") for n in g.nodes if n.kind == "service"}
    msgs = [str(w.message) for w in caught if issubclass(w.category, GraphBuildWarning)]
    return calls_, svcs, msgs


def test_spans_of_another_cluster_draw_no_calls_and_are_counted_once() -> None:
    calls = calls_from_spans(_shared())
    got, svcs, msgs = _build(calls, cluster="A")
    assert got == {("A/svc/shop/frontend", "A/svc/shop/checkout")}
    assert "fraud-check" not in svcs  # no phantom service of cluster B
    assert msgs == [
        "3 spans left out: their resource attribute k8s.cluster.name names another cluster "
        "('B') than the graph's 'A'"
    ]
    got, svcs, msgs = _build(calls, cluster="B")
    assert got == {
        ("B/svc/shop/frontend", "B/svc/ml/ranker"),
        ("B/svc/shop/frontend", "B/svc/fraud-check"),
    }
    assert len(msgs) == 1 and msgs[0].startswith("2 spans left out")


def test_spans_without_a_cluster_are_kept_and_the_pairs_read_as_before() -> None:
    doc = _shared()
    for rs in doc["resourceSpans"][1:2]:  # checkout's SDK sets no k8s.cluster.name
        rs["resource"]["attributes"] = rs["resource"]["attributes"][:2]
    calls = calls_from_spans(doc)
    assert calls == [  # to any other reader, every call of every cluster, as before
        (("shop", "frontend"), ("ml", "ranker")),
        (("shop", "frontend"), ("shop", "checkout")),
        (("shop", "frontend"), ("shop", "fraud-check")),
    ]
    got, _, msgs = _build(calls, cluster="A")
    assert got == {("A/svc/shop/frontend", "A/svc/shop/checkout")}
    assert msgs[0].startswith("3 spans left out")
    plain, _, _ = _build(list(calls), cluster="A")  # a plain list of pairs: no cluster known
    assert len(plain) == 3


def test_a_call_between_two_clusters_belongs_to_neither() -> None:
    doc = {
        "resourceSpans": [
            _res("frontend", "shop", "A", [_sp(TA, "a1")]),
            _res("checkout", "shop", "B", [_sp(TA, "a2", "a1")]),
        ]
    }
    for cluster in ("A", "B"):
        got, svcs, msgs = _build(calls_from_spans(doc), cluster=cluster)
        assert got == set() and len(msgs) == 1 and msgs[0].startswith("1 span left out: its")


def test_jaeger_process_tags_name_the_cluster_too() -> None:
    def proc(svc: str, cluster: str) -> dict:
        tags = [{"key": "k8s.namespace.name", "type": "string", "value": "shop"},
                {"key": "k8s.cluster.name", "type": "string", "value": cluster}]  # fmt: skip
        return {"serviceName": svc, "tags": tags}

    def trace(t: str, cluster: str, callee: str) -> dict:
        ref = [{"refType": "CHILD_OF", "traceID": t, "spanID": "s1"}]
        return {
            "traceID": t,
            "spans": [
                {"traceID": t, "spanID": "s1", "processID": "p1"},
                {"traceID": t, "spanID": "s2", "processID": "p2", "references": ref},
            ],
            "processes": {"p1": proc("frontend", cluster), "p2": proc(callee, cluster)},
        }

    doc = {"data": [trace(TA, "A", "checkout"), trace(TB, "B", "fraud-check")]}
    got, svcs, msgs = _build(calls_from_spans(doc), cluster="A")
    assert got == {("A/svc/shop/frontend", "A/svc/shop/checkout")}
    assert "fraud-check" not in svcs and msgs[0].startswith("2 spans left out")


def test_the_node_label_names_the_cluster_and_the_default_fallback_keeps_all() -> None:
    calls = calls_from_spans(_shared("prod-eu", "staging"))
    got, _, msgs = _build(calls)  # the recorded nodes carry fleetmind.io/cluster=prod-eu
    assert got == {("prod-eu/svc/shop/frontend", "prod-eu/svc/shop/checkout")}
    assert msgs[0].startswith("3 spans left out")
    nodes, pods, services, slices = _lists()
    nodes = copy.deepcopy(nodes)
    for n in nodes["items"]:
        n["metadata"].get("labels", {}).pop("fleetmind.io/cluster", None)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", GraphBuildWarning)
        g = build_graph(nodes, pods, services, slices, calls=calls)
    # "default" is no name a span carries: nothing is left out, and the mix is pointed out
    assert g.name == "k8s-default"
    assert len([e for e in g.edges if e.kind == "calls"]) == 3
    [w] = [str(w.message) for w in caught]
    assert w.startswith("spans of 2 clusters ('prod-eu', 'staging') all drawn into cluster")


def test_cli_prints_one_warning_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rec = tmp_path / "rec"
    rec.mkdir()
    for k in ("nodes", "pods", "services", "endpointslices"):
        shutil.copy(DATA / f"api_{k}.json", rec / f"{k}.json")
    spans = tmp_path / "spans.json"
    spans.write_text(json.dumps(_shared()))
    out = tmp_path / "g.json"
    args = ["graph", "build", "--from-dir", str(rec), "--cluster", "A", "--spans", str(spans)]
    assert main([*args, "--out", str(out)]) == 0
    err = capsys.readouterr().err
    assert err.count("fleetmind: warning:") == 1 and "3 spans left out" in err
    edges = json.loads(out.read_text())["edges"]
    assert [(e["src"], e["dst"]) for e in edges if e["kind"] == "calls"] == [
        ("A/svc/shop/frontend", "A/svc/shop/checkout")
    ]


def test_spans_naming_no_cluster_of_the_graph_are_all_kept_with_one_warning() -> None:
    """GKE: resourcedetection's ``gcp`` detector names the spans' cluster after the GKE cluster,
    while ``--cluster`` must be the alerts' ``cluster`` label; no span names the graph's cluster,
    so the names say nothing of it and no call is left out."""
    calls = calls_from_spans(_shared("gke-prod-europe-west1", "gke-prod-europe-west1"))
    got, svcs, msgs = _build(calls, cluster="prod")
    assert got == {
        ("prod/svc/shop/frontend", "prod/svc/shop/checkout"),
        ("prod/svc/shop/frontend", "prod/svc/ml/ranker"),
        ("prod/svc/shop/frontend", "prod/svc/fraud-check"),
    }
    assert msgs == [
        "5 spans kept whose resource attribute k8s.cluster.name names cluster "
        "'gke-prod-europe-west1', none the graph's 'prod': every call drawn; to draw only the "
        "graph's cluster's calls, have k8s.cluster.name carry the graph's cluster name "
        "(--cluster, or node label fleetmind.io/cluster)"
    ]
    assert calls.of_cluster("prod") == (list(calls), 0)
    # several names, none the graph's: all named in the one warning, every call kept
    got, _, msgs = _build(calls_from_spans(_shared("gke-a", "gke-b")), cluster="prod")
    assert len(got) == 3 and len(msgs) == 1
    assert "names clusters 'gke-a', 'gke-b', none the graph's 'prod'" in msgs[0]


def test_cli_keeps_every_call_when_no_span_names_the_graphs_cluster(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rec = tmp_path / "rec"
    rec.mkdir()
    for k in ("nodes", "pods", "services", "endpointslices"):
        shutil.copy(DATA / f"api_{k}.json", rec / f"{k}.json")
    spans = tmp_path / "spans.json"
    spans.write_text(json.dumps(_shared("gke-prod-europe-west1", "gke-prod-europe-west1")))
    out = tmp_path / "g.json"
    args = ["graph", "build", "--from-dir", str(rec), "--cluster", "prod", "--spans", str(spans)]
    assert main([*args, "--out", str(out)]) == 0
    err = capsys.readouterr().err
    assert err.count("fleetmind: warning:") == 1 and "5 spans kept" in err
    edges = json.loads(out.read_text())["edges"]
    assert len([e for e in edges if e["kind"] == "calls"]) == 3
