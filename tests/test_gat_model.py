"""GAT ranker: features, shapes, training signal, node-order invariance, artifacts and explanations."""

from __future__ import annotations

import json
import pickle
import warnings

import numpy as np
import pytest
import torch
from gat_helpers import toy_graph, toy_incident
from torch_geometric.data import Batch

from fleetmind.data.errors import ModelLoadError
from fleetmind.data.graph import DependencyGraph
from fleetmind.rca.explain import edge_costs, propagation_paths
from fleetmind.rca.features.dense import alert_features
from fleetmind.rca.features.layout import FEATURE_NAMES, NUM_FEATURES
from fleetmind.rca.features.times import parse_time
from fleetmind.rca.gat_analyzer import GATAnalyzer, save_artifact
from fleetmind.rca.lightning_module import incident_to_data
from fleetmind.rca.model import GATConfig, GATRanker, listwise_loss, message_graph, root_ranks

COL = {n: i for i, n in enumerate(FEATURE_NAMES)}
FAULTS = ["gpu_xid", "host_down", "svc_error"]


@pytest.fixture(autouse=True)
def _one_thread():
    """One torch thread: much faster than two on a shared 2-core machine, and deterministic."""
    old = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(old)


def _alert(
    labels: dict, start: str, status: str = "firing", end: str = "0001-01-01T00:00:00Z"
) -> dict:
    return {"labels": labels, "startsAt": start, "endsAt": end, "status": status}


def _model(seed: int = 0, **kw) -> GATRanker:
    torch.manual_seed(seed)
    return GATRanker(GATConfig(fault_types=FAULTS, hidden=16, heads=2, layers=2, **kw)).eval()


# ------------------------------------------------------------------------------------------ features
def test_features_count_time_and_unseen_names() -> None:
    g = toy_graph("f", hosts=2, gpus=1, services=2)
    alerts = [
        _alert(
            {
                "alertname": "GPUXidError",
                "severity": "critical",
                "cluster": "c0",
                "node": "h0",
                "gpu": "0",
            },
            "2026-01-01T00:00:00Z",
        ),
        _alert(
            {
                "alertname": "MyBrandNewGpuAlarm",
                "severity": "page",
                "cluster": "c0",
                "node": "h0",
                "gpu": "0",
            },
            "2026-01-01T00:01:00.123456789Z",
        ),
        _alert(
            {"alertname": "HighLatency", "severity": "warning", "cluster": "c0", "service": "s0"},
            "2026-01-01T00:02:00+00:00",
            "resolved",
            "2026-01-01T00:04:00Z",
        ),
        _alert(
            {"alertname": "Watchdog", "severity": "none", "cluster": "c0", "scope": "cluster"},
            "2025-12-01T00:00:00Z",
        ),
        _alert({"alertname": "X", "cluster": "nowhere"}, "2026-01-01T00:00:00Z"),
    ]
    f = alert_features(g, alerts)
    assert f.x.shape == (g.num_nodes, NUM_FEATURES) and f.x.dtype == np.float32
    assert f.unmapped == 1
    gpu, svc, host, cl = (
        g.index[k] for k in ("c0/host/h0/gpu0", "c0/svc/s0", "c0/host/h1", "c0/cluster")
    )
    assert f.alerting[[gpu, svc, cl]].all() and not f.alerting[host]
    assert f.x[gpu, COL["name:GPUXidError"]] == pytest.approx(np.log1p(1))
    assert f.x[gpu, COL["name:other"]] == pytest.approx(np.log1p(1))  # the unseen name
    assert f.x[gpu, COL["kw:gpu"]] == pytest.approx(np.log1p(2))  # both names say "gpu"
    assert f.x[gpu, COL["sev:other"]] > 0 and f.x[svc, COL["kw:latency"]] > 0
    # timing: the Watchdog from a month ago is stale; the GPU alert starts the incident
    assert f.x[cl, COL["time:stale"]] == 1 and f.x[gpu, COL["time:stale"]] == 0
    assert f.x[gpu, COL["time:earliest"]] == 1 and f.x[svc, COL["time:earliest"]] == 0
    assert f.x[gpu, COL["time:first_rank"]] < f.x[svc, COL["time:first_rank"]]
    assert f.x[svc, COL["time:firing_share"]] == 0 and f.x[gpu, COL["time:firing_share"]] == 1
    assert f.x[host, COL["time:first_rank"]] == 1 and f.x[host, COL["alert"]] == 0
    # the GPU's host has an alerting dependent over attached_to (in-direction)
    assert f.x[g.index["c0/host/h0"], COL["nbr:in:attached_to:share"]] == 1.0
    assert f.x[gpu, COL[f"kind:{'gpu'}"]] == 1


def test_parse_time_rejects_garbage() -> None:
    from fleetmind.data.errors import DataError

    assert parse_time("0001-01-01T00:00:00Z") is None
    assert parse_time("2026-01-01T00:00:00Z") == parse_time("2026-01-01T01:00:00+01:00")
    with pytest.raises(DataError, match="RFC 3339"):
        parse_time("yesterday")


# ------------------------------------------------------------------------------------------ model
def test_output_shapes_single_and_batched() -> None:
    rng = np.random.default_rng(0)
    graphs = [toy_graph("a", 1, 2, 2, 3), toy_graph("b", 2, 2, 1, 2)]
    data = [
        incident_to_data(g, toy_incident(g, rng, i)["alerts"], g.nodes[0].id, 1)
        for i, g in enumerate(graphs)
    ]
    m = _model()
    d = data[0]
    logits, h, att = m(d.x, d.edge_index, d.edge_type, return_attention=True)
    n, e = d.num_nodes, d.edge_index.size(1)
    assert logits.shape == (n,) and h.shape == (n, 16)
    assert len(att) == 2 and all(a.shape == (2 * e + n, 2) for a in att)
    assert m.fault_logits(h, torch.tensor([0, 3])).shape == (2, len(FAULTS))
    b = Batch.from_data_list(data)
    logits_b, h_b, _ = m(b.x, b.edge_index, b.edge_type, b.batch)
    assert logits_b.shape == (b.num_nodes,)
    # batching does not mix graphs: each graph's logits equal its own forward pass
    torch.testing.assert_close(logits_b[: d.num_nodes], logits, rtol=1e-5, atol=1e-5)
    assert b.root_index.tolist() == [0, data[0].num_nodes]
    assert m.fault_logits(h_b, b.root_index, b.batch).shape == (2, len(FAULTS))
    assert root_ranks(logits_b, b.batch, b.root_index).shape == (2,)
    ei, rel = message_graph(d.edge_index, d.edge_type, n)
    assert ei.shape == (2, 2 * e + n) and int(rel.max()) == 12


def test_config_validation() -> None:
    with pytest.raises(ValueError, match="layers"):
        GATRanker(GATConfig(layers=1))
    with pytest.raises(ValueError, match="unknown"):
        GATConfig.from_dict({"hidden": 8, "bogus": 1})


def test_tiny_training_lowers_loss() -> None:
    rng = np.random.default_rng(1)
    graphs = [toy_graph("t0", 1, 2, 2, 3), toy_graph("t1", 2, 2, 1, 3)]
    data = []
    for i in range(32):
        g = graphs[i % 2]
        inc = toy_incident(g, rng, i)
        data.append(
            incident_to_data(g, inc["alerts"], inc["root_cause"], FAULTS.index(inc["fault_type"]))
        )
    torch.manual_seed(0)
    m = GATRanker(GATConfig(fault_types=FAULTS, hidden=16, heads=2, layers=2, dropout=0.0))
    opt = torch.optim.Adam(m.parameters(), lr=1e-2)
    b = Batch.from_data_list(data)

    def loss_now() -> float:
        with torch.no_grad():
            lo, _, _ = m(b.x, b.edge_index, b.edge_type, b.batch)
            return float(listwise_loss(lo, b.batch, b.root_index))

    before = loss_now()
    for _ in range(25):
        lo, h, _ = m(b.x, b.edge_index, b.edge_type, b.batch)
        loss = listwise_loss(lo, b.batch, b.root_index) + torch.nn.functional.cross_entropy(
            m.fault_logits(h, b.root_index, b.batch), b.fault
        )
        opt.zero_grad()
        loss.backward()
        opt.step()
    after = loss_now()
    assert after < 0.5 * before, (before, after)


def _permuted(g: DependencyGraph, seed: int) -> DependencyGraph:
    rng = np.random.default_rng(seed)
    nodes = [g.nodes[i] for i in rng.permutation(g.num_nodes)]
    edges = [g.edges[i] for i in rng.permutation(g.num_edges)]
    return DependencyGraph(g.name, nodes, edges)


@pytest.fixture
def artifact(tmp_path):
    m = _model(3)
    return save_artifact(m, tmp_path / "art", metrics={"val": {"ac@1": 0.5}}), m


def test_scores_invariant_to_node_order(artifact) -> None:
    path, _ = artifact
    gat = GATAnalyzer.load(path)
    g = toy_graph("p", 2, 2, 2, 3)
    inc = toy_incident(g, np.random.default_rng(5), 0)
    p1 = gat.score(g, inc["alerts"])
    gp = _permuted(g, 7)
    p2 = gat.score(gp, inc["alerts"])
    for node in g.nodes:
        assert p1[g.index[node.id]] == pytest.approx(p2[gp.index[node.id]], rel=1e-4, abs=1e-7)
    r1 = gat.find_root_causes(g, inc["alerts"], top_k=5)
    r2 = gat.find_root_causes(gp, inc["alerts"], top_k=5)
    assert r1.ranked_nodes() == r2.ranked_nodes()
    assert [c.fault_type for c in r1.causes] == [c.fault_type for c in r2.causes]


def test_save_load_round_trip_identical_scores(artifact) -> None:
    path, m = artifact
    g = toy_graph("r", 1, 2, 2, 3)
    inc = toy_incident(g, np.random.default_rng(2), 0)
    d = incident_to_data(g, inc["alerts"])
    gat = GATAnalyzer.load(path)
    with torch.no_grad():
        ref = m(d.x, d.edge_index, d.edge_type)[0]
        got = gat.model(d.x, d.edge_index, d.edge_type)[0]
    assert torch.equal(ref, got)
    for k, v in m.state_dict().items():
        assert torch.equal(v, gat.model.state_dict()[k]), k
    again = GATAnalyzer.load(path / "config.json")
    assert np.array_equal(again.score(g, inc["alerts"]), gat.score(g, inc["alerts"]))
    top = gat.find_root_causes(g, inc["alerts"], top_k=1).causes[0]
    assert top.node == g.nodes[int(torch.argmax(ref))].id
    assert gat.version == json.loads((path / "config.json").read_text())["version"]
    assert gat.version.startswith("gat-")


def test_artifact_names_the_commit_and_versions_that_made_it(artifact) -> None:
    """A model folder found on its own says which code and which torch made it."""
    import re

    from fleetmind.provenance import code_root, git_commit

    path, _ = artifact
    prov = json.loads((path / "config.json").read_text())["provenance"]
    assert prov["versions"]["torch"] == torch.__version__
    assert prov["versions"]["fleetmind"] and prov["versions"]["torch_geometric"]
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\+00:00", prov["created"])
    assert prov["commit"] == git_commit(code_root())["commit"]
    assert GATAnalyzer.load(path).version.startswith("gat-")  # loading ignores the extra key


def test_find_root_causes_result(artifact) -> None:
    path, _ = artifact
    gat = GATAnalyzer.load(path)
    g = toy_graph("e", 2, 2, 2, 3)
    inc = toy_incident(g, np.random.default_rng(4), 0)
    res = gat.find_root_causes(g, inc["alerts"], top_k=4)
    assert res.method == "gat" and res.model_version == gat.version and len(res.causes) == 4
    scores = [c.score for c in res.causes]
    assert scores == sorted(scores, reverse=True)
    alerting = set(alert_features(g, inc["alerts"]).alerting.nonzero()[0].tolist())
    adj = {(e.src, e.dst) for e in g.edges} | {(e.dst, e.src) for e in g.edges}
    for c in res.causes:
        assert (
            c.fault_type in FAULTS
            and c.kind == g.node(c.node).kind
            and c.cluster == g.node(c.node).cluster
        )
        assert c.path[0] == c.node and g.index[c.path[-1]] in alerting
        assert all((a, b) in adj for a, b in zip(c.path, c.path[1:], strict=False))
    full = gat.find_root_causes(g, inc["alerts"])
    assert len(full.causes) == g.num_nodes
    assert sum(c.score for c in full.causes) == pytest.approx(1.0, abs=1e-6)


def test_propagation_paths_follow_attention() -> None:
    # 0 -> 1 -> 3 (alerting) is strongly attended; 0 -> 2 -> 3 weakly; 4 is isolated
    ei = np.array([[0, 1, 0, 2, 3], [1, 3, 2, 3, 3]])
    att = [np.array([0.9, 0.8, 0.1, 0.1, 1.0])]
    costs = edge_costs(ei, att, 5)
    alerting = np.array([False, False, False, True, False])
    assert propagation_paths(costs, [0, 3, 4], alerting) == [(0, 1, 3), (3,), (4,)]


# ------------------------------------------------------------------------------------------ bad artifacts
def test_corrupt_or_incompatible_artifacts(artifact, tmp_path) -> None:
    import shutil

    path, _ = artifact

    def variant(name: str):
        d = tmp_path / name
        shutil.copytree(path, d)
        return d

    with pytest.raises(ModelLoadError, match="not found"):
        GATAnalyzer.load(tmp_path / "nope")
    d = variant("truncated")
    (d / "model.pt").write_bytes((d / "model.pt").read_bytes()[:100])
    with pytest.raises(ModelLoadError, match="corrupt"):
        GATAnalyzer.load(d)
    d = variant("foreign-pickle")  # torch warns before it refuses: the warning stays silent
    (d / "model.pt").write_bytes(pickle.dumps({"w": [1.0]}, protocol=4))
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        with pytest.raises(ModelLoadError, match="corrupt or not a state dict"):
            GATAnalyzer.load(d)
    assert not [w for w in seen if "pickle" in str(w.message)]
    d = variant("badjson")
    (d / "config.json").write_text("{not json")
    with pytest.raises(ModelLoadError, match="not valid JSON"):
        GATAnalyzer.load(d)
    for key, value, msg in [
        ("format_version", 99, "format version"),
        ("format", "something-else", "not a fleetmind-rca-gat"),
    ]:
        d = variant(f"meta-{key}")
        meta = json.loads((d / "config.json").read_text())
        meta[key] = value
        (d / "config.json").write_text(json.dumps(meta))
        with pytest.raises(ModelLoadError, match=msg):
            GATAnalyzer.load(d)
    d = variant("featver")
    meta = json.loads((d / "config.json").read_text())
    meta["model"]["feature_version"] = -1
    (d / "config.json").write_text(json.dumps(meta))
    with pytest.raises(ModelLoadError, match="feature version"):
        GATAnalyzer.load(d)
    d = variant("shape")
    meta = json.loads((d / "config.json").read_text())
    meta["model"]["hidden"] = 32  # weights were saved for hidden=16
    (d / "config.json").write_text(json.dumps(meta))
    with pytest.raises(ModelLoadError, match="does not fit"):
        GATAnalyzer.load(d)
    d = variant("nopt")
    (d / "model.pt").unlink()
    with pytest.raises(ModelLoadError, match="missing"):
        GATAnalyzer.load(d)
    d = variant("pickle")
    (d / "model.pt").write_bytes(pickle.dumps({"weights": object()}))
    with pytest.raises(ModelLoadError):
        GATAnalyzer.load(d)


def test_vectorised_alert_mapping_matches_graph_rules() -> None:
    from fleetmind.rca.features.mapping import node_index_for_alert
    from fleetmind.serving.alertmap import node_for_alert as service_node_for_alert

    g = toy_graph("m", 2, 2, 2, 3)
    rng = np.random.default_rng(0)
    label_sets = [dict(n.match) for n in g.nodes]
    for _ in range(200):  # random mixes of two nodes' labels: ambiguous and partial matches
        a, b = (label_sets[int(i)] for i in rng.integers(len(label_sets), size=2))
        mixed = {**a, **{k: v for k, v in b.items() if rng.random() < 0.5}}
        label_sets.append(mixed)
    label_sets += [
        {"instance": "h1:9100", "cluster": "c1"},
        {"fleetmind_node": "c0/svc/s2", "cluster": "c1"},
        {"cluster": "c9"},
        {},
    ]
    for labels in label_sets:
        ref = g.node_for_alert(labels)
        assert node_index_for_alert(g, labels) == (None if ref is None else g.index[ref]), labels
        assert service_node_for_alert(g, labels) == ref, labels


def test_elu_of_an_element_does_not_depend_on_its_place_in_the_tensor() -> None:
    """The layer activation gives a node the same bits alone and inside a batch (``F.elu`` runs a
    scalar ``expm1`` over the last partial vector block, which broke batched == single serving for
    the 2026-12-03 release), equals ``F.elu`` on whole blocks and keeps finite gradients."""
    from fleetmind.rca.model import elu

    g = torch.Generator().manual_seed(0)
    for n in (1, 3, 7, 13, 17, 31, 53, 100, 2544, 2545, 3000):
        x = torch.randn(n, generator=g) * 3
        big = torch.cat([torch.randn(8453, generator=g), x, torch.randn(37, generator=g)])
        assert torch.equal(elu(x), elu(big)[8453 : 8453 + n])
    x = torch.randn(4096, generator=g) * 3
    assert torch.equal(elu(x), torch.nn.functional.elu(x))  # 4096: no partial block
    y = torch.tensor([-200.0, -1.0, 0.0, 1.0, 200.0], requires_grad=True)
    elu(y).sum().backward()
    assert torch.isfinite(y.grad).all() and y.grad.tolist() == pytest.approx(
        [0.0, float(torch.exp(torch.tensor(-1.0))), 1.0, 1.0, 1.0]
    )


def test_a_process_that_builds_the_gat_leaves_no_rendered_sources_in_tmpdir(tmp_path) -> None:
    """torch_geometric renders ``GATv2Conv.propagate``/``edge_updater`` into ``$TMPDIR`` and never
    deletes the files (``torch_geometric/template.py``, ``NamedTemporaryFile(delete=False)``):
    two files per process. A fresh process (the rendering happens once per process) builds the
    model in four threads at once (torch_geometric renders without a lock), then runs one,
    raises inside the rendered code, and must leave ``$TMPDIR`` without them while tracebacks
    and ``inspect.getsource`` still show the rendered source."""
    import os
    import subprocess
    import sys

    script = """
import inspect, traceback, torch
from torch_geometric.nn import GATv2Conv
from fleetmind.rca.model import GATConfig, GATRanker
import threading
gate = threading.Barrier(4)  # four threads build the process's first model at once
def build():
    gate.wait()
    GATRanker(GATConfig(hidden=8, heads=2, layers=2))
threads = [threading.Thread(target=build) for _ in range(4)]
for t in threads:
    t.start()
for t in threads:
    t.join()
torch.manual_seed(0)
model = GATRanker(GATConfig(hidden=8, heads=2, layers=2)).eval()
x = torch.randn(3, model.config.in_dim)
logits, _, _ = model(x, torch.tensor([[0, 1], [1, 2]]), torch.tensor([0, 0]))
assert logits.shape == (3,), logits.shape
assert "def propagate(" in inspect.getsource(GATv2Conv.propagate)
try:  # a wrong edge_index fails inside the rendered propagate()
    model.convs[0](torch.randn(3, 8), torch.tensor([[0, 1], [1, 7]]), edge_attr=torch.randn(2, 16))
except IndexError as err:
    rendered = [f for f in traceback.extract_tb(err.__traceback__) if "GATv2Conv_" in f.filename]
    assert rendered, traceback.format_exc()
    assert all(f.line for f in rendered), traceback.format_exc()  # source lines still shown
else:
    raise AssertionError("a bad edge_index did not raise")
print("ok")
"""
    env = {**os.environ, "TMPDIR": str(tmp_path), "MLFLOW_DISABLE_TELEMETRY": "true"}
    run = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300
    )
    assert run.returncode == 0 and run.stdout.strip() == "ok", run.stderr[-3000:]
    left = sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("torch_geometric"))
    assert left == [], left
