"""The GAT's neighbour inputs (``GATConfig.neighbours``): values on a hand-made graph, shapes, and that a
config without the switch (the released model's) builds and scores exactly the model it did before."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch
from gat_helpers import toy_graph, toy_incident
from torch_geometric.data import Batch

from fleetmind.data.graph import DependencyGraph, GraphEdge, GraphNode
from fleetmind.data.paths import MODELS_DIR
from fleetmind.data.rca_gen.alerts import AlertSimConfig, IncidentSimulator
from fleetmind.rca.features.columnar import AlertColumns, alert_columns, incident_crop
from fleetmind.rca.features.layout import NUM_FEATURES
from fleetmind.rca.features.neighbours import (
    EDGE_FEATURE_NAMES,
    NODE_EXTRA_NAMES,
    NUM_EDGE_FEATURES,
    NUM_NODE_EXTRA,
    edge_features,
    label_columns,
    neighbour_inputs,
    propagation_columns,
)
from fleetmind.rca.features.times import parse_time
from fleetmind.rca.gat_analyzer import GATAnalyzer, GATAnalyzerConfig, save_artifact
from fleetmind.rca.lightning_module import incident_to_data
from fleetmind.rca.model import GATConfig, GATRanker, input_width
from fleetmind.rca.propagation import PropagationConfig, PropagationRanker
from fleetmind.serving.defaults.example import build_example_graph
from fleetmind.serving.rca.request import parse_alerts, parse_for

EDGE = {n: i for i, n in enumerate(EDGE_FEATURE_NAMES)}
NODE = {n: i for i, n in enumerate(NODE_EXTRA_NAMES)}
FAULTS = ["gpu_xid", "host_down", "svc_error"]


@pytest.fixture(autouse=True)
def _one_thread():
    old = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(old)


def _chain() -> DependencyGraph:
    """``front -> mid -> back`` (caller -> callee), plus a GPU ``g0`` attached to host ``h0``."""
    nodes = [
        GraphNode("c/svc/front", "service", "c", {"cluster": "c", "service": "front"}),
        GraphNode("c/svc/mid", "service", "c", {"cluster": "c", "service": "mid"}),
        GraphNode("c/svc/back", "service", "c", {"cluster": "c", "service": "back"}),
        GraphNode("c/host/h0", "host", "c", {"cluster": "c", "node": "h0"}),
        GraphNode("c/host/h0/gpu0", "gpu", "c", {"cluster": "c", "node": "h0", "gpu": "0"}),
    ]
    edges = [
        GraphEdge("c/svc/front", "c/svc/mid", "calls"),
        GraphEdge("c/svc/mid", "c/svc/back", "calls"),
        GraphEdge("c/host/h0/gpu0", "c/host/h0", "attached_to"),
    ]
    return DependencyGraph("chain", nodes, edges)


def _a(labels: dict, start: str) -> dict:
    return {
        "labels": labels,
        "startsAt": start,
        "endsAt": "0001-01-01T00:00:00Z",
        "status": "firing",
    }


def _storm() -> list[dict]:
    """``back`` alerts first (latency, critical, and errors), ``mid`` a minute later (latency);
    ``front`` is silent; the GPU reports XIDs 79 and 999 and an NVLink alert."""
    svc = {"cluster": "c"}
    gpu = {"cluster": "c", "node": "h0", "gpu": "0"}
    return [
        _a({**svc, "service": "back", "alertname": "ServiceLatencyHigh", "severity": "critical"},
           "2026-01-01T00:00:00Z"),
        _a({**svc, "service": "back", "alertname": "ServiceErrorRateHigh", "severity": "warning"},
           "2026-01-01T00:00:00Z"),
        _a({**svc, "service": "mid", "alertname": "ServiceLatencyHigh", "severity": "warning"},
           "2026-01-01T00:01:00Z"),
        _a({**gpu, "alertname": "GPUXidError", "xid": "79", "severity": "critical"},
           "2026-01-01T00:00:30Z"),
        _a({**gpu, "alertname": "GPUXidError", "xid": "999", "severity": "warning"},
           "2026-01-01T00:00:30Z"),
        _a({**gpu, "alertname": "NVLinkDown", "link": "nvl-0-1", "severity": "warning"},
           "2026-01-01T00:00:30Z"),
    ]  # fmt: skip


def _edge_row(g: DependencyGraph, crop, src: str, dst: str, ef: np.ndarray) -> np.ndarray:
    sub = {int(v): i for i, v in enumerate(crop.keep)}
    s, d = sub[g.index[src]], sub[g.index[dst]]
    cols = np.flatnonzero((crop.edge_index[0] == s) & (crop.edge_index[1] == d))
    assert cols.size == 1
    return ef[cols[0]]


def test_edge_features_compare_caller_and_callee() -> None:
    g = _chain()
    crop = incident_crop(g, _storm(), 1)
    ef = edge_features(crop.x, crop.edge_index)
    assert ef.shape == (crop.edge_index.shape[1], NUM_EDGE_FEATURES) and ef.dtype == np.float32
    # mid -> back: both alert; roles {latency} vs {latency, error}; back started 60 s earlier over a
    # 60 s span; strength back 2 + 1 = 3, mid 1
    mb = _edge_row(g, crop, "c/svc/mid", "c/svc/back", ef)
    assert mb[EDGE["edge:both_alert"]] == 1.0
    assert mb[EDGE["edge:same_role"]] == pytest.approx(0.5)
    assert mb[EDGE["edge:onset_diff"]] == pytest.approx(1.0)
    assert mb[EDGE["edge:callee_first"]] == 1.0
    assert mb[EDGE["edge:z_ratio"]] == pytest.approx(math.log(4.0) - math.log(2.0), rel=1e-5)
    # front -> mid: the caller is silent; only the strength difference speaks
    fm = _edge_row(g, crop, "c/svc/front", "c/svc/mid", ef)
    assert fm[EDGE["edge:both_alert"]] == 0.0
    assert fm[EDGE["edge:same_role"]] == 0.0
    assert fm[EDGE["edge:onset_diff"]] == 0.0
    assert fm[EDGE["edge:callee_first"]] == 0.0
    assert fm[EDGE["edge:z_ratio"]] == pytest.approx(math.log(2.0), rel=1e-5)


def test_edge_features_sign_flips_when_the_caller_starts_first() -> None:
    g = _chain()
    storm = _storm()
    storm[2]["startsAt"] = "2025-12-31T23:59:00Z"  # mid now a minute before back
    crop = incident_crop(g, storm, 1)
    mb = _edge_row(g, crop, "c/svc/mid", "c/svc/back", edge_features(crop.x, crop.edge_index))
    assert mb[EDGE["edge:onset_diff"]] < 0.0
    assert mb[EDGE["edge:callee_first"]] == 0.0


def test_label_and_propagation_columns() -> None:
    g = _chain()
    storm = _storm()
    lab = label_columns(g, storm)
    gpu = g.index["c/host/h0/gpu0"]
    off = NODE["xid:13"]  # label columns start at the first xid column
    assert lab[gpu, NODE["xid:79"] - off] == pytest.approx(math.log(2.0))
    assert lab[gpu, NODE["xid:other"] - off] == pytest.approx(math.log(2.0))
    assert lab[gpu, NODE["link:nvlink"] - off] == pytest.approx(math.log(2.0))
    assert lab[gpu, NODE["link:pcie"] - off] == 0.0
    assert lab[g.index["c/svc/back"]].sum() == 0.0
    prop = propagation_columns(g, storm)
    back, mid, front = (g.index[f"c/svc/{s}"] for s in ("back", "mid", "front"))
    assert prop[back, NODE["prop:root"]] == 1.0  # nothing explains back's alerts
    assert prop[mid, NODE["prop:explained"]] == 1.0  # back's alerts explain mid's
    assert prop[front, NODE["prop:silent"]] == 1.0
    assert prop[back, NODE["prop:inv_rank"]] > prop[mid, NODE["prop:inv_rank"]]
    assert prop[:, :3].sum(1).tolist() == [1.0] * g.num_nodes  # exactly one tier per node


def _ranker_columns(g: DependencyGraph, alerts: list[dict]) -> np.ndarray:
    """The ``prop:*`` block as the propagation ranker's public output gives it (the reference)."""
    res = PropagationRanker(PropagationConfig(explain_top=0)).find_root_causes(g, alerts)
    out = np.zeros((g.num_nodes, 5), dtype=np.float32)
    for rank, c in enumerate(res.causes):
        v, s = g.index[c.node], float(c.score)
        tier = 0 if s >= 2.0e6 else 1 if s >= 1.0e6 else 2
        out[v, tier] = 1.0
        out[v, 3] = np.log1p(max(s - (2.0e6, 1.0e6, 0.0)[tier], 0.0))
        out[v, 4] = 1.0 / (1.0 + rank)
    return out


def _epoch(alerts: list[dict]) -> list[dict]:
    """The alerts with ``startsAt`` / ``endsAt`` as unix seconds (what the service passes)."""
    out = []
    for a in alerts:
        b = dict(a)
        for k in ("startsAt", "endsAt"):
            t = parse_time(a.get(k))
            b[k] = None if t is None else t
        out.append(b)
    return out


def test_propagation_columns_are_the_rankers_in_any_time_form() -> None:
    # the fast columns equal the ranker's own output, for RFC 3339 times and for unix seconds (the
    # service's form; the ranker once read seconds as time 0, unlike the training data)
    g = toy_graph("p", 2, 2, 2, 3)
    rng = np.random.default_rng(11)
    for i in range(12):
        alerts = toy_incident(g, rng, i)["alerts"]
        ref = _ranker_columns(g, alerts)
        assert np.array_equal(propagation_columns(g, alerts), ref)
        assert np.array_equal(propagation_columns(g, _epoch(alerts)), ref)
        assert np.array_equal(_ranker_columns(g, _epoch(alerts)), ref)


def test_service_columns_give_the_inputs_of_the_alert_dicts(tmp_path) -> None:
    # the service parses bodies straight into columns with labels; the neighbour inputs and the
    # ranking must be those of the alert dicts the slower parse builds
    g = toy_graph("s", 2, 2, 2, 3)
    rng = np.random.default_rng(12)
    torch.manual_seed(2)
    m = GATRanker(
        GATConfig(fault_types=FAULTS, hidden=16, heads=2, layers=2, in_dim=input_width(True),
                  neighbours=True)
    ).eval()  # fmt: skip
    gat = GATAnalyzer(GATAnalyzerConfig(model=str(save_artifact(m, tmp_path / "svc"))))
    for i in range(6):
        alerts = toy_incident(g, rng, i)["alerts"]
        body = json.dumps({"alerts": alerts, "top_k": 5}).encode()
        _, cols = parse_for(gat, g, body)
        _, dicts = parse_alerts(body, True)
        assert isinstance(cols, AlertColumns) and cols.labels is not None
        c1, c2 = incident_crop(g, cols, 1), incident_crop(g, dicts, 1)
        n1, e1 = neighbour_inputs(g, cols, c1.x, c1.keep, c1.edge_index)
        n2, e2 = neighbour_inputs(g, dicts, c2.x, c2.keep, c2.edge_index)
        assert np.array_equal(n1, n2) and np.array_equal(e1, e2)
        r1, r2 = gat.find_root_causes(g, cols, 5), gat.find_root_causes(g, dicts, 5)
        assert [(c.node, c.score) for c in r1.causes] == [(c.node, c.score) for c in r2.causes]
    # columns without their labels are refused with a clear error
    bare = alert_columns(g, alerts)
    with pytest.raises(TypeError, match="label values"):
        gat.find_root_causes(g, bare, 5)


def test_neighbour_data_shapes_and_model_needs_edge_inputs() -> None:
    g = toy_graph("n", 2, 2, 2, 3)
    rng = np.random.default_rng(3)
    incs = [toy_incident(g, rng, i) for i in range(3)]
    ds = [incident_to_data(g, i["alerts"], i["root_cause"], 0, 1, neighbours=True) for i in incs]
    for d in ds:
        assert d.x.shape[1] == NUM_FEATURES + NUM_NODE_EXTRA == input_width(True)
        assert d.edge_attr.shape == (d.edge_index.shape[1], NUM_EDGE_FEATURES)
    old = incident_to_data(g, incs[0]["alerts"], incs[0]["root_cause"], 0, 1)
    assert old.x.shape[1] == NUM_FEATURES and "edge_attr" not in old
    assert torch.equal(ds[0].x[:, :NUM_FEATURES], old.x)
    b = Batch.from_data_list(ds)
    torch.manual_seed(0)
    m = GATRanker(
        GATConfig(fault_types=FAULTS, hidden=16, heads=2, layers=2, in_dim=input_width(True),
                  neighbours=True)
    ).eval()  # fmt: skip
    logits, h, _ = m(b.x, b.edge_index, b.edge_type, b.batch, edge_attr=b.edge_attr)
    assert logits.shape == (b.num_nodes,) and h.shape == (b.num_nodes, 16)
    with pytest.raises(ValueError, match="edge_attr"):
        m(b.x, b.edge_index, b.edge_type, b.batch)
    # the edge inputs reach the scores
    with torch.no_grad():
        other = m(b.x, b.edge_index, b.edge_type, b.batch, edge_attr=b.edge_attr + 1.0)[0]
    assert not torch.allclose(logits, other)


def test_neighbours_artifact_round_trip(tmp_path) -> None:
    torch.manual_seed(1)
    m = GATRanker(
        GATConfig(fault_types=FAULTS, hidden=16, heads=2, layers=2, in_dim=input_width(True),
                  neighbours=True)
    ).eval()  # fmt: skip
    path = save_artifact(m, tmp_path / "nb")
    assert json.loads((path / "config.json").read_text())["model"]["neighbours"] is True
    gat = GATAnalyzer.load(path)
    assert gat.model.config.neighbours and gat.accepts_alert_columns and gat.reads_alert_labels
    g = toy_graph("r", 1, 2, 2, 3)
    inc = toy_incident(g, np.random.default_rng(2), 0)
    d = incident_to_data(g, inc["alerts"], crop_hops=1, neighbours=True)
    with torch.no_grad():
        ref = torch.softmax(m(d.x, d.edge_index, d.edge_type, edge_attr=d.edge_attr)[0], 0)
    res = gat.find_root_causes(g, inc["alerts"], top_k=3)
    crop = incident_crop(g, inc["alerts"], 1)
    top = int(torch.argmax(ref))
    assert res.causes[0].node == g.nodes[int(crop.keep[top])].id
    assert res.causes[0].score == pytest.approx(float(ref[top]), rel=1e-5)
    p = gat.score(g, inc["alerts"])
    assert p[crop.keep[top]] == pytest.approx(float(ref[top]), rel=1e-5)
    # a batch gives each incident's single-incident result, bit for bit (here on a larger graph:
    # crops of a handful of nodes are ranked alone)
    big = build_example_graph(clusters=2, hosts=4, gpus=8, services=4, pods=2, name="nb-batch")
    sim, srng = IncidentSimulator(big, AlertSimConfig(noise_per_node=0.2)), np.random.default_rng(9)
    incs = [sim.simulate(srng, f"b{k}")["alerts"] for k in range(4)]
    assert all(incident_crop(big, a, 1).keep.size >= 16 for a in incs)
    many = gat.find_root_causes_many([(big, a, 4) for a in incs])
    for a, r_many in zip(incs, many, strict=True):
        r_one = gat.find_root_causes(big, a, 4)
        assert [(c.node, c.score, c.fault_type, c.path) for c in r_many.causes] == [
            (c.node, c.score, c.fault_type, c.path) for c in r_one.causes
        ]
    # the fast inference path agrees with forward (another summation order: float rounding)
    with torch.no_grad():
        lf, hf, af = m(d.x, d.edge_index, d.edge_type, return_attention=True, edge_attr=d.edge_attr)
        li, hi, ai = m.infer(d.x, d.edge_index, d.edge_type, edge_attr=d.edge_attr)
    assert torch.allclose(lf, li, atol=1e-5) and torch.allclose(hf, hi, atol=1e-5)
    assert all(torch.allclose(p, q, atol=1e-6) for p, q in zip(af, ai, strict=True))
    node, edge = neighbour_inputs(g, inc["alerts"], crop.x, crop.keep, crop.edge_index)
    assert node.shape == (crop.keep.size, NUM_NODE_EXTRA)
    assert edge.shape == (crop.edge_index.shape[1], NUM_EDGE_FEATURES)


# Scores of the GAT released until 2026-12-02 (base inputs, 1,760 training incidents; its artifact is
# kept in tests/data/rca_legacy_gat) on four toy incidents, computed with the code as it was before
# the neighbours switch (commit e161885, `GATAnalyzer.load(None)` on toy_graph("g", clusters=2) and
# toy_incident(g, default_rng(7), i) for i in 0..3): top 3 causes and their scores.
LEGACY_DIR = Path(__file__).parent / "data" / "rca_legacy_gat"
RELEASED_REFERENCE = [
    [("c1/svc/s2", 0.711904), ("c1/svc/s1", 0.287463), ("c1/svc/s0", 0.000595)],
    [("c1/host/h1/gpu1", 0.769767), ("c1/host/h1", 0.16288), ("c1/host/h1/gpu0", 0.042752)],
    [("c1/host/h1", 0.307557), ("c1/host/h0", 0.293752), ("c0/host/h1/gpu0", 0.258501)],
    [("c1/svc/s2", 0.4187), ("c1/pod/s2-0", 0.277156), ("c1/host/h0", 0.138829)],
]


def test_released_model_reads_neighbours_through_the_service_columns() -> None:
    # released 2026-12-03: a neighbours model, served through the columnar parse with labels
    meta = json.loads((MODELS_DIR / "rca" / "config.json").read_text())
    assert meta["model"]["neighbours"] is True
    gat = GATAnalyzer.load(None)
    assert gat.accepts_alert_columns and gat.reads_alert_labels


def test_an_artifact_saved_before_the_switch_keeps_its_model_and_scores() -> None:
    meta = json.loads((LEGACY_DIR / "config.json").read_text())
    assert "neighbours" not in meta["model"]
    cfg = GATConfig.from_dict(meta["model"])
    assert cfg.neighbours is False and cfg.in_dim == NUM_FEATURES
    assert cfg.to_dict() == meta["model"]  # re-saving writes the same config
    state = torch.load(LEGACY_DIR / "model.pt", map_location="cpu", weights_only=True)
    assert set(GATRanker(cfg).state_dict()) == set(state)  # no new parameters
    # the model's own ranking: the lone-alert rule (on by default since) reorders incidents 2 and 3
    gat = GATAnalyzer.load(str(LEGACY_DIR), lone_alert_margin=None)
    assert gat.accepts_alert_columns
    g = toy_graph("g", clusters=2)
    rng = np.random.default_rng(7)
    for i, ref in enumerate(RELEASED_REFERENCE):
        inc = toy_incident(g, rng, i)
        got = gat.find_root_causes(g, inc["alerts"], top_k=3).causes
        assert [c.node for c in got] == [n for n, _ in ref]
        for c, (_, s) in zip(got, ref, strict=True):
            assert c.score == pytest.approx(s, abs=2e-6)
