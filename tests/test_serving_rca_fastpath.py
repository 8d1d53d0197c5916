"""The fast RCA path of the service computes exactly what the generic one computes.

* ``rca.features.columnar.incident_crop`` = ``rca.lightning_module.crop_incident`` (features of the whole
  graph, then cropped), bit for bit, on simulated storms and on awkward alerts.
* ``GATRanker.infer`` = ``GATRanker.forward(..., return_attention=True)`` bit for bit (logits,
  embeddings, attention), for the released model and a freshly initialised one.
* ``POST /api/v1/rca``'s fast body parsing (``parse_alerts``) gives the analyzers the alerts the
  ``RCARequest`` path gave them, and every rejected body the same 422 as ``RCARequest``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from fastapi.exceptions import RequestValidationError

from fleetmind.data.graph import DependencyGraph
from fleetmind.data.rca_gen.alerts import AlertSimConfig, IncidentSimulator
from fleetmind.rca.explain import _mean_attention, attention_paths, edge_costs, propagation_paths
from fleetmind.rca.features.columnar import AlertColumns, alert_columns, incident_crop
from fleetmind.rca.features.times import parse_time
from fleetmind.rca.gat_analyzer import RELEASED_DIR, GATAnalyzer
from fleetmind.rca.lightning_module import crop_incident
from fleetmind.rca.model import GATConfig, GATRanker
from fleetmind.serving.defaults.example import build_example_graph
from fleetmind.serving.rca.parse import (
    PlainRequest,
    _plain_time,
    _Unsure,
    plain_alerts,
    plain_columns,
    read_times,
)
from fleetmind.serving.rca.request import _model_alerts, parse_alerts, parse_request
from fleetmind.serving.schemas import RCARequest, RCARequestFast


@pytest.fixture(scope="module")
def graph() -> DependencyGraph:
    return build_example_graph(clusters=2, hosts=4, gpus=8, services=4, pods=2, name="fast-test")


def storms(graph: DependencyGraph, n: int, seed: int) -> list[list[dict[str, Any]]]:
    sim = IncidentSimulator(graph, AlertSimConfig(noise_per_node=0.2))
    rng = np.random.default_rng(seed)
    return [sim.simulate(rng, f"fast-{i}")["alerts"] for i in range(n)]


def awkward(graph: DependencyGraph, base: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """Alert sets that exercise the corner cases of the feature code."""
    first = base[0]
    no_time = [{k: v for k, v in a.items() if k not in ("startsAt", "endsAt")} for a in base]
    stale = [dict(a) for a in base]
    stale[0] = {**stale[0], "startsAt": "2020-01-01T00:00:00Z"}  # far older than the horizon
    resolved = [
        {**a, "status": "resolved", "endsAt": "2030-01-01T00:00:00.123456789Z"} for a in base[:5]
    ]
    as_seconds = [
        {**a, "startsAt": parse_time(a.get("startsAt")), "endsAt": parse_time(a.get("endsAt"))}
        for a in base
    ]
    odd = [
        {"labels": {"alertname": "X", "cluster": "nowhere"}},  # unmapped
        {"labels": {**first["labels"], "extra": 3}, "startsAt": first.get("startsAt")},
        {"labels": {**first["labels"], "weird": ["unhashable"]}, "status": "FIRING"},
        {"labels": {**first["labels"], "severity": "CRITICAL"}, "startsAt": None},
    ]
    return [[], no_time, stale, resolved, as_seconds, odd, [odd[0]], base[:1]]


def test_incident_crop_equals_cropped_alert_features(graph: DependencyGraph) -> None:
    cases = storms(graph, 12, seed=11)
    cases += awkward(graph, cases[0])
    checked = 0
    for alerts in cases:
        for hops in (1, 2, None):
            ref = crop_incident(graph, alerts, hops)
            got = incident_crop(graph, alerts, hops)
            assert got.x.dtype == ref.x.dtype and got.x.shape == ref.x.shape
            assert got.x.tobytes() == ref.x.tobytes()  # bit for bit
            assert np.array_equal(got.keep, ref.keep)
            assert np.array_equal(got.edge_index, ref.edge_index)
            assert np.array_equal(got.edge_type, ref.edge_type)
            assert np.array_equal(got.alerting, ref.features.alerting)
            assert got.unmapped == ref.features.unmapped
            checked += 1
    assert checked == 3 * len(cases)


LEGACY_DIR = Path(__file__).parent / "data" / "rca_legacy_gat"
"""A trained GAT without neighbour inputs (released until 2026-12-02), for the base-input paths."""


def _models() -> list[GATRanker]:
    """Base-input models: a fresh one and a trained one (the released model reads neighbour
    inputs; :func:`test_released_neighbours_model_infer_agrees_with_forward` covers it)."""
    torch.manual_seed(0)
    fresh = GATRanker(GATConfig(fault_types=["a", "b"])).eval()
    return [fresh, GATAnalyzer.load(LEGACY_DIR).model]


def test_released_neighbours_model_infer_agrees_with_forward(graph: DependencyGraph) -> None:
    # per-edge inputs are added in another order than forward's: equal to float rounding
    if not (RELEASED_DIR / "model.pt").is_file():
        pytest.skip("no released GAT artifact")
    gat = GATAnalyzer.load(None)
    assert gat.model.config.neighbours
    for alerts in storms(graph, 4, seed=7):
        c = incident_crop(graph, alerts, 1)
        x, ea = gat._inputs(graph, alerts, c.x, c.keep, c.edge_index)
        args = (torch.from_numpy(x), torch.from_numpy(c.edge_index), torch.from_numpy(c.edge_type))
        with torch.inference_mode():
            logits, h, att = gat.model(*args, return_attention=True, edge_attr=torch.from_numpy(ea))
            logits2, h2, att2 = gat.model.infer(*args, edge_attr=torch.from_numpy(ea))
        assert torch.allclose(logits, logits2, atol=1e-5) and torch.allclose(h, h2, atol=1e-5)
        assert all(torch.allclose(a, b, atol=1e-6) for a, b in zip(att, att2, strict=True))
        assert int(logits.argmax()) == int(logits2.argmax())


@pytest.mark.parametrize("model", _models(), ids=lambda m: f"hidden{m.config.hidden}")
def test_infer_equals_forward_bit_for_bit(graph: DependencyGraph, model: GATRanker) -> None:
    crops = [incident_crop(graph, a, 1) for a in storms(graph, 6, seed=5)]
    crops.append(incident_crop(graph, [], 1))  # nothing alerts: the whole graph
    with torch.inference_mode():
        for c in crops:
            args = (
                torch.from_numpy(c.x),
                torch.from_numpy(c.edge_index),
                torch.from_numpy(c.edge_type),
            )
            logits, h, att = model(*args, return_attention=True)
            logits2, h2, att2 = model.infer(*args)
            assert torch.equal(logits, logits2) and torch.equal(h, h2)
            assert len(att) == len(att2)
            assert all(torch.equal(a, b) for a, b in zip(att, att2, strict=True))


def test_infer_tables_follow_new_weights(graph: DependencyGraph) -> None:
    model = _models()[0]
    c = incident_crop(graph, storms(graph, 1, seed=2)[0], 1)
    args = (torch.from_numpy(c.x), torch.from_numpy(c.edge_index), torch.from_numpy(c.edge_type))
    model.infer(*args)  # caches the relation tables
    with torch.no_grad():
        model.convs[0].lin_edge.weight.mul_(1.5)
        model.rel_emb.weight.add_(0.1)
        logits, _, att = model(*args, return_attention=True)
        logits2, _, att2 = model.infer(*args)
    assert torch.equal(logits, logits2) and torch.equal(att[0], att2[0])


def _body(alerts: list[dict[str, Any]], **extra: Any) -> bytes:
    return json.dumps({"alerts": alerts, **extra}).encode()


def test_fast_parse_gives_the_analyzers_the_same_alerts(graph: DependencyGraph) -> None:
    alerts = storms(graph, 3, seed=9)[1]
    alerts[0] = {**alerts[0], "startsAt": "2026-01-01T01:00:00+01:00", "routeLabels": {"a": "b"}}
    alerts[1] = {**alerts[1], "startsAt": "2026-01-01T00:00:00"}  # naive: taken as UTC
    alerts[2] = {**alerts[2], "startsAt": "0001-01-01T00:00:00Z"}  # Alertmanager's zero time
    alerts[3] = {k: v for k, v in alerts[3].items() if k != "startsAt"}
    alerts[4] = {**alerts[4], "startsAt": "2026-01-01T00:00:00.123456789Z"}
    body = _body(alerts, top_k=7)
    slow = parse_request(body)
    fast, iso = parse_alerts(body, False)
    assert isinstance(fast, RCARequestFast) and fast.top_k == slow.top_k == 7
    # the ISO form (non-GAT analyzers) is unchanged
    assert iso == _model_alerts(slow.alerts, False)
    # the GAT gets unix seconds: what it parsed from the ISO strings before
    _, secs = parse_alerts(body, True)
    assert _model_alerts(slow.alerts, True) == secs
    assert [a["startsAt"] for a in secs] == [parse_time(a["startsAt"]) for a in iso]
    assert [(a["status"], a["labels"]) for a in secs] == [(a["status"], a["labels"]) for a in iso]
    assert secs[2]["startsAt"] is None and secs[3]["startsAt"] is None


BAD_BODIES = [
    b"{not json",
    b'{"alerts": []}',
    b'{"alerts": [{"labels": {"a": "x\\u0000"}}]}',
    b'{"alerts": [{"labels": {}}], "top_k": 0}',
    b'{"alerts": [{"labels": {}, "status": "weird"}]}',
    b'{"alerts": [{"labels": {}, "startsAt": "yesterday"}]}',
    b'{"alerts": [{"labels": {}, "annotations": null}]}',
    b'{"alerts": [{"labels": {"a": 1}}]}',
    b'{"alerts": [{"labels": {}, "fingerprint": "' + b"f" * 300 + b'"}]}',
    # valid timestamps that AlertIn rejects once moved to UTC
    b'{"alerts": [{"labels": {}, "startsAt": "0001-01-01T00:00:00+01:00"}]}',
    b'{"alerts": [{"labels": {}, "endsAt": "9999-12-31T23:59:59-01:00"}]}',
    b'{"alerts": {"labels": {}}}',
    b"[]",
]


@pytest.mark.parametrize("raw", BAD_BODIES, ids=range(len(BAD_BODIES)))
def test_fast_parse_rejects_what_rcarequest_rejects_with_its_errors(raw: bytes) -> None:
    with pytest.raises(RequestValidationError) as slow:
        parse_request(raw)
    with pytest.raises(RequestValidationError) as fast:
        parse_alerts(raw, True)
    assert _plain(fast.value.errors()) == _plain(slow.value.errors())


def _plain(errors: Any) -> Any:
    """Errors with exception objects (``ctx.error``) as their text (exceptions compare by identity)."""
    return json.loads(json.dumps(list(errors), default=repr))


def test_fast_model_accepts_what_rcarequest_accepts(tmp_path: Path) -> None:
    ok = [
        {"alerts": [{"labels": {"cluster": "c0"}}]},
        {"alerts": [{"labels": {}, "startsAt": None, "endsAt": None, "extra": [1, 2]}], "top_k": 1},
        {"alerts": [{"labels": {"a": "b"}, "status": "resolved", "generatorURL": None}]},
        {"alerts": [{"labels": {}, "startsAt": "9999-12-31T23:59:59+00:00"}]},
    ]
    for body in ok:
        raw = json.dumps(body).encode()
        RCARequest.model_validate_json(raw)
        req, alerts = parse_alerts(raw, True)
        assert isinstance(req, PlainRequest | RCARequestFast)
        assert len(alerts) == len(body["alerts"])


_T = "2026-01-01T00:00:00"
PLAIN_CASES: list[Any] = [
    {"alerts": [{"labels": {"a": "b"}}]},
    {"alerts": [{"labels": {"a": "b"}}], "top_k": 1000, "graph": None, "other": {"x": [1]}},
    {"alerts": [{"labels": {}, "status": "resolved", "annotations": {}, "extra": None}]},
    {"alerts": [{"labels": {"a": "b"}, "generatorURL": None, "fingerprint": None}]},
    {"alerts": [{"labels": {"a": "x" * 8192, "k" * 256: ""}, "fingerprint": "f" * 256}]},
    {"alerts": [{"labels": {f"l{i}": "v" for i in range(256)}}]},
    # as many labels as an allow-all kube-state-metrics sends (no count limit, as in Prometheus)
    {"alerts": [{"labels": {f"l{i}": "v" for i in range(3000)}}]},
    # too long, too many, empty names, wrong types: RCARequest rejects them
    {"alerts": [{"labels": {"a": "x" * 8193}}]},
    {"alerts": [{"labels": {"k" * 257: "v"}}]},
    {"alerts": [{"labels": {"": "v"}}]},
    {"alerts": [{"labels": {"a": 1}}]},
    {"alerts": [{"labels": {"a": None}}]},
    {"alerts": [{"labels": {"a": "b"}, "annotations": None}]},
    {"alerts": [{"labels": {"a": "b"}, "annotations": {"d": ["x"]}}]},
    {"alerts": [{"labels": {"a": "b"}, "fingerprint": "f" * 257}]},
    {"alerts": [{"labels": {"a": "b"}, "generatorURL": 3}]},
    {"alerts": [{"labels": {"a": "b"}, "status": None}]},
    {"alerts": [{"labels": {"a": "b"}, "status": "FIRING"}]},
    {"alerts": [{"status": "firing"}]},
    {"alerts": [["labels"]]},
    {"alerts": []},
    {"alerts": None},
    {"alerts": [{"labels": {"a": "b"}}], "top_k": 0},
    {"alerts": [{"labels": {"a": "b"}}], "top_k": 1001},
    # accepted by RCARequest but left to it: non-int top_k, a graph
    {"alerts": [{"labels": {"a": "b"}}], "top_k": 5.0},
    {"alerts": [{"labels": {"a": "b"}}], "top_k": "5"},
    {"alerts": [{"labels": {"a": "b"}}], "top_k": True},
    {"alerts": [{"labels": {"a": "b"}}], "graph": {"nodes": [], "edges": []}},
]
PLAIN_TIMES = [
    f"{_T}Z",
    f"{_T}.1Z",
    f"{_T}.123456Z",
    f"{_T}.1234567Z",
    f"{_T}.999999999Z",
    f"{_T}.123456789+02:00",
    f"{_T}.1234567891Z",
    f"{_T}+05:30",
    f"{_T}-23:59",
    f"{_T}+24:00",
    _T,
    f"{_T}z",
    "2026-01-01 00:00:00Z",
    "2026-01-01T24:00:00Z",
    "2026-12-31T23:59:60Z",
    "2026-02-30T00:00:00Z",
    "0000-01-01T00:00:00Z",
    "0001-01-01T00:00:00Z",
    "0001-01-01T00:00:00+01:00",
    "0001-01-01T00:59:59-01:00",
    "9999-12-31T23:59:59-01:00",
    "9999-12-31T23:59:59+01:00",
    "1969-12-31T23:59:59.999Z",
    "1970-01-01T00:00:00Z",
    "\u0662026-01-01T00:00:00Z",
    "2026-01-01",
    "yesterday",
    "",  # an empty endsAt reached a 500 in the column parser (schemathesis, released GAT)
    "Z",
    "+05:30",
    1767225600,
    None,
]
PLAIN_CASES += [
    {"alerts": [{"labels": {"a": "b"}, "startsAt": t, "endsAt": t}]} for t in PLAIN_TIMES
]


@pytest.mark.parametrize("body", PLAIN_CASES, ids=range(len(PLAIN_CASES)))
def test_plain_parse_accepts_only_what_rcarequest_accepts_and_reads_it_alike(body: Any) -> None:
    raw = json.dumps(body).encode()
    plain = plain_alerts(raw)
    try:
        slow = parse_request(raw)
    except RequestValidationError:
        assert plain is None  # rejected bodies go to pydantic, which answers the 422
        return
    if plain is None:  # left to pydantic: only what plain_alerts does not read itself
        return
    req, alerts = plain
    assert req.top_k == slow.top_k and req.graph is None
    assert alerts == _model_alerts(slow.alerts, True)
    assert [list(a["labels"]) for a in alerts] == [list(m.labels) for m in slow.alerts]


def test_plain_parse_reads_simulated_storms_and_duplicate_keys_as_pydantic(
    graph: DependencyGraph,
) -> None:
    for alerts in storms(graph, 3, seed=21):
        raw = _body(alerts, top_k=9)
        plain = plain_alerts(raw)
        assert plain is not None  # the common body takes the cheap path
        assert plain[1] == _model_alerts(parse_request(raw).alerts, True)
    raw = b'{"alerts": [{"labels": {"a": "1", "b": "2", "a": "3"}, "status": "resolved"}], '
    raw += b'"top_k": 2, "top_k": 3}'
    plain = plain_alerts(raw)
    slow = parse_request(raw)
    assert plain is not None and plain[0].top_k == slow.top_k == 3
    assert plain[1] == _model_alerts(slow.alerts, True)
    assert list(plain[1][0]["labels"]) == list(slow.alerts[0].labels)
    for bad in (b'{"alerts": [{"labels": {"a": "x\\u0000"}}]}', b'{"alerts": [{"labels": {"a"'):
        assert plain_alerts(bad) is None


def test_tune_malloc_applies_on_glibc_and_can_be_off() -> None:
    import platform
    import sys

    from fleetmind.serving.tuning import tune_malloc

    assert tune_malloc(0) is False and tune_malloc(None) is False
    if sys.platform.startswith("linux") and platform.libc_ver()[0] == "glibc":
        assert tune_malloc(32) is True


RAW_BODIES = [
    b'{"alerts":[{"labels":{"a":"\\ud800"}}]}',  # lone surrogate
    b'{"alerts":[{"labels":{"a":"\xff"}}]}',  # not UTF-8
    b'\xef\xbb\xbf{"alerts":[{"labels":{"a":"b"}}]}',  # byte order mark
    b'{"alerts":[{"labels":{"a":"b"}}]} x',  # trailing garbage
    b'{"alerts":[{"labels":{"a":"b"}}],"top_k":NaN}',
    b'{"alerts":[{"labels":{"a":"b"}}],"top_k":99999999999999999999999}',
    b'{"alerts":[{"labels":{"a":"b"}}],"top_k":5e0}',
    b' {"alerts":[{"labels":{"a":"b"}}]} ',
    b'{"alerts":[{"labels":{"a":"b\\u0001"}}]}',
    b'{"alerts":[{"labels":{"a":"b"},"status":"firing","status":"x"}]}',
    b'{"alerts":[{"labels":{"a":"b"},"labels":{"c":"d"}}]}',
    b'{"alerts":[{"labels":{"a":"b"}}],"graph":null,"graph":{"nodes":[]}}',
    b'{"alerts":[{"labels":{"a":"b"}}],"graph":{"nodes":[]},"graph":null}',
]


@pytest.mark.parametrize("raw", RAW_BODIES, ids=range(len(RAW_BODIES)))
def test_plain_parse_of_raw_bytes_never_accepts_more_than_rcarequest(raw: bytes) -> None:
    plain = plain_alerts(raw)
    try:
        slow = parse_request(raw)
    except RequestValidationError:
        assert plain is None
        return
    if plain is not None:
        assert plain[0].top_k == slow.top_k
        assert plain[1] == _model_alerts(slow.alerts, True)


# ------------------------------------------------------------- body straight to alert columns
def _columns_equal(got: AlertColumns, ref: AlertColumns) -> None:
    assert got.graph is ref.graph and got.count == ref.count and got.unmapped == ref.unmapped
    assert got.names == ref.names
    for field in ("rows", "sev", "name_col", "name_u", "starts", "ends", "firing"):
        a, b = getattr(got, field), getattr(ref, field)
        assert a.dtype == b.dtype and a.tobytes() == b.tobytes(), field  # NaNs included


@pytest.mark.parametrize("body", PLAIN_CASES, ids=range(len(PLAIN_CASES)))
def test_plain_columns_accept_only_what_rcarequest_accepts_and_read_it_alike(
    graph: DependencyGraph, body: Any
) -> None:
    raw = json.dumps(body).encode()
    fast = plain_columns(raw, graph)
    try:
        slow = parse_request(raw)
    except RequestValidationError:
        assert fast is None
        return
    assert (fast is None) == (plain_alerts(raw) is None)  # the same bodies take the cheap path
    if fast is None:
        return
    assert fast[0].top_k == slow.top_k and fast[0].graph is None
    _columns_equal(fast[1], alert_columns(graph, _model_alerts(slow.alerts, True)))


@pytest.mark.parametrize("raw", RAW_BODIES + BAD_BODIES, ids=range(len(RAW_BODIES + BAD_BODIES)))
def test_plain_columns_of_raw_bytes_never_accept_more_than_rcarequest(
    graph: DependencyGraph, raw: bytes
) -> None:
    fast = plain_columns(raw, graph)
    try:
        slow = parse_request(raw)
    except RequestValidationError:
        assert fast is None
        return
    if fast is not None:
        assert fast[0].top_k == slow.top_k
        _columns_equal(fast[1], alert_columns(graph, _model_alerts(slow.alerts, True)))


def test_plain_columns_memo_is_per_graph_and_rejects_bad_text_every_time(
    graph: DependencyGraph,
) -> None:
    other = build_example_graph(clusters=1, hosts=2, gpus=2, services=1, pods=1, name="other")
    alerts = storms(graph, 1, seed=31)[0]
    raw = _body(alerts)
    for g in (graph, other, graph):  # label texts seen on one graph are mapped again on another
        got = plain_columns(raw, g)
        assert got is not None
        _columns_equal(got[1], alert_columns(g, _model_alerts(parse_request(raw).alerts, True)))
    with pytest.raises(ValueError, match="another graph"):
        incident_crop(other, got[1], 1)
    bad = b'{"alerts": [{"labels": {"a": "b"}, "annotations": {"d": 1}}]}'
    for _ in range(2):  # an invalid annotations text is never remembered as valid
        assert plain_columns(bad, graph) is None


def test_plain_columns_rank_as_find_root_causes(graph: DependencyGraph) -> None:
    """Crops from the columns are bit for bit the crops from the alert dicts, and the GAT ranks
    them the same (single and batched), on simulated storms with awkward alerts mixed in."""
    if not (RELEASED_DIR / "model.pt").is_file():
        pytest.skip("no released GAT artifact")
    gat = GATAnalyzer.load(None)
    cases = storms(graph, 6, seed=41)
    cases[1][0] = {**cases[1][0], "startsAt": "2026-01-01T01:00:00.5+01:00", "status": "resolved"}
    cases[2][1] = {k: v for k, v in cases[2][1].items() if k != "startsAt"}
    cases[3][0] = {**cases[3][0], "labels": {"alertname": "X", "cluster": "nowhere"}}
    items_cols, items_dicts = [], []
    for alerts in cases:
        raw = _body(alerts, top_k=7)
        cols = plain_columns(raw, graph, labels=gat.reads_alert_labels)
        assert cols is not None
        dicts = _model_alerts(parse_request(raw).alerts, True)
        for hops in (1, 2, None):
            a, b = incident_crop(graph, cols[1], hops), incident_crop(graph, dicts, hops)
            assert a.x.tobytes() == b.x.tobytes() and np.array_equal(a.keep, b.keep)
            assert np.array_equal(a.edge_index, b.edge_index) and a.unmapped == b.unmapped
        items_cols.append((graph, cols[1], 7))
        items_dicts.append((graph, dicts, 7))
        assert gat.find_root_causes(graph, cols[1], 7) == gat.find_root_causes(graph, dicts, 7)
    assert gat.find_root_causes_many(items_cols) == [
        gat.find_root_causes(g, a, k) for g, a, k in items_dicts
    ]


def _random_times(n: int, seed: int) -> list[Any]:
    """Timestamps of every layout :func:`read_times` reads column-wise, valid and not."""
    rng = np.random.default_rng(seed)
    out: list[Any] = []
    for _ in range(n):
        y = int(rng.choice([1, 1899, 1900, 1969, 1970, 2000, 2024, 2026, 2100, 2200, 2201, 9999]))
        mo, d = int(rng.integers(0, 14)), int(rng.integers(0, 33))
        h, mi, s = int(rng.integers(0, 25)), int(rng.integers(0, 61)), int(rng.integers(0, 61))
        if rng.random() < 0.7:  # mostly valid fields
            mo, d, h, mi, s = 1 + mo % 12, 1 + d % 28, h % 24, mi % 60, s % 60
            if rng.random() < 0.2:
                d = int(rng.choice([29, 30, 31]))
        t = f"{y:04d}-{mo:02d}-{d:02d}T{h:02d}:{mi:02d}:{s:02d}"
        k = int(rng.choice([0, 1, 2, 3, 6, 7, 9, 10]))
        if k:
            t += "." + "".join(str(int(c)) for c in rng.integers(0, 10, k))
        t += str(rng.choice(["Z", "", "+05:30", "-08:00", "+00:00", "+24:00", "-23:59", "z"]))
        if rng.random() < 0.05:  # a broken character somewhere
            i = int(rng.integers(0, len(t)))
            t = t[:i] + str(rng.choice([" ", "x", "\u0663", ",", "+"])) + t[i + 1 :]
        out.append(t)
    return out


def _scalar(values: list[Any]) -> np.ndarray | None:
    try:
        got = [_plain_time(v) for v in values]
    except _Unsure:
        return None
    return np.array([np.nan if t is None else t for t in got], dtype=np.float64)


@pytest.mark.parametrize("seed", range(4))
def test_read_times_reads_each_timestamp_as_plain_time(seed: int) -> None:
    values = _random_times(3000, seed) + [t for t in PLAIN_TIMES if not isinstance(t, int)]
    checked = 0
    for v in values:  # one by one: the value, or the same refusal
        ref = _scalar([v])
        if ref is None:
            with pytest.raises(_Unsure):
                read_times([v])
        else:
            assert read_times([v]).tobytes() == ref.tobytes(), v
            checked += 1
    assert checked > 1000
    good = [v for v in values if _scalar([v]) is not None]
    rng = np.random.default_rng(seed)
    for _ in range(20):  # columns of mixed lengths and layouts, with None and "no end"
        cols = list(rng.choice(np.array(good, dtype=object), 200))
        cols[:3] = [None, "0001-01-01T00:00:00Z", None]
        rng.shuffle(cols)
        assert read_times(cols).tobytes() == _scalar(cols).tobytes()


# ------------------------------------------------------------------------ attention paths
def _forward_outputs(
    graph: DependencyGraph, model: GATRanker, seed: int, on: DependencyGraph | None = None
) -> list[Any]:
    """Per simulated storm of ``graph``, what a path needs of the forward on ``on`` (or ``graph``)."""
    out = []
    for alerts in storms(graph, 5, seed=seed):
        c = incident_crop(on or graph, alerts, 1)
        with torch.inference_mode():
            logits, _, att = model.infer(
                torch.from_numpy(c.x), torch.from_numpy(c.edge_index), torch.from_numpy(c.edge_type)
            )
        m = c.keep.size
        loops = np.arange(m, dtype=c.edge_index.dtype)
        mei = np.concatenate([c.edge_index, c.edge_index[::-1], np.stack([loops, loops])], axis=1)
        out.append((mei, [a.numpy() for a in att], m, c.alerting[c.keep], logits.numpy()))
    return out


@pytest.mark.parametrize("model", _models(), ids=lambda m: f"hidden{m.config.hidden}")
def test_attention_paths_are_the_dijkstra_paths(graph: DependencyGraph, model: GATRanker) -> None:
    """The shortcut (a cheapest edge to an alerting node) gives Dijkstra's paths, for every node
    as a cause; the parallel edges of a two-way dependency keep their cheapest cost."""
    doc = graph.to_json()
    doc["edges"] = (
        doc["edges"]
        + [  # five edges both ways
            {**e, "src": e["dst"], "dst": e["src"]} for e in doc["edges"][:5]
        ]
    )
    both_ways = DependencyGraph.from_json(doc)
    assert both_ways.num_edges == graph.num_edges + 5
    cases = _forward_outputs(graph, model, seed=51)
    cases += _forward_outputs(graph, model, seed=52, on=both_ways)
    short = 0
    for mei, att, m, alerting, logits in cases:
        costs = edge_costs(mei, att, m)
        every = list(range(m))
        got = attention_paths(mei, att, m, every, alerting)
        assert got == propagation_paths(costs, every, alerting)
        top = np.argsort(-logits)[:5]
        assert attention_paths(mei, att, m, top, alerting) == propagation_paths(
            costs, top, alerting
        )
        short += sum(len(p) == 2 for p in got)
    assert short > 0
    # nothing alerts, or no cause: no paths
    mei, att, m, alerting, _ = cases[0]
    assert attention_paths(mei, att, m, [0, 1], np.zeros(m, dtype=bool)) == [(0,), (1,)]
    assert attention_paths(mei, att, m, [], alerting) == []


def test_mean_attention_is_numpys_mean_bit_for_bit() -> None:
    rng = np.random.default_rng(3)
    for heads, layers in [(4, 3), (1, 1), (7, 2), (8, 3), (2, 9)]:
        att = [rng.random((500, heads), dtype=np.float32) for _ in range(layers)]
        ref = np.mean([a.reshape(a.shape[0], -1).mean(axis=1) for a in att], axis=0)
        got = _mean_attention(att)
        assert got.dtype == ref.dtype and got.tobytes() == ref.tobytes()
    flat = [rng.random(300, dtype=np.float32) for _ in range(3)]  # one head, 1-D
    ref = np.mean([a.reshape(a.shape[0], -1).mean(axis=1) for a in flat], axis=0)
    assert _mean_attention(flat).tobytes() == ref.tobytes()


def test_infer_without_logits_and_score(graph: DependencyGraph) -> None:
    model = _models()[-1]
    c = incident_crop(graph, storms(graph, 1, seed=61)[0], 1)
    args = (torch.from_numpy(c.x), torch.from_numpy(c.edge_index), torch.from_numpy(c.edge_type))
    with torch.inference_mode():
        logits, h, att = model.infer(*args)
        none, h2, att2 = model.infer(*args, logits=False)
        assert none is None and torch.equal(h, h2)
        assert all(torch.equal(a, b) for a, b in zip(att, att2, strict=True))
        assert torch.equal(model.score(h), logits)
        assert torch.equal(model.score_head(h).squeeze(-1), logits)
