"""The RCA label-set memos stay bounded by bytes whatever label text clients send, still hit on
repeated (realistic) label sets, and never change a result.

The memos: per graph (``rca.features.mapping._GraphStatic``) ``label_info`` (filled by
``rca.features.columnar``), ``alert_cache`` (``map_alerts``), ``label_json`` and
``label_json_dicts`` (``serving.rca.parse.plain_columns``); per process the alertname keywords
(``mapping._KW_CACHE``), the validated ``annotations`` texts (``parse._ANNOTATIONS_OK``) and the
timestamp layouts (``parse._LAYOUTS``). Each was capped by its number of entries (100,000), not
their size, so a client sending large distinct label sets kept ~2x their bytes in memory (128 KB
label sets: ~25 GB at the cap). The bounds are checked on the memos' own contents (the text their
keys and values hold), not on the process's memory.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from fleetmind.data.graph import DependencyGraph
from fleetmind.data.rca_gen.alerts import AlertSimConfig, IncidentSimulator
from fleetmind.rca.features import columnar, mapping
from fleetmind.rca.features.columnar import alert_columns, incident_crop
from fleetmind.rca.features.mapping import _static, map_alerts
from fleetmind.serving.defaults.example import build_example_graph
from fleetmind.serving.rca import parse
from fleetmind.serving.rca.parse import plain_columns, read_times

MIB = 1024 * 1024
LABEL_MEMO_LIMIT = 16 * MIB
"""What one label-set memo may hold (``mapping.MEMO_BUDGET``)."""
PROCESS_MEMO_LIMIT = 4 * MIB
"""What the per-process memos (alertname keywords, annotations texts) may hold."""


@pytest.fixture
def graph() -> DependencyGraph:
    """A fresh graph for each test (its memos start empty)."""
    return build_example_graph(clusters=2, hosts=4, gpus=8, services=4, pods=2, name="cache-test")


@pytest.fixture(autouse=True)
def _empty_process_memos() -> Iterator[None]:
    parse._ANNOTATIONS_OK.clear()
    mapping._KW_CACHE.clear()
    yield
    parse._ANNOTATIONS_OK.clear()
    mapping._KW_CACHE.clear()


def text_bytes(obj: Any) -> int:
    """The string and bytes lengths ``obj`` holds (containers walked; other objects count 0)."""
    if isinstance(obj, str | bytes):
        return len(obj)
    if isinstance(obj, dict):
        return sum(text_bytes(k) + text_bytes(v) for k, v in obj.items())
    if isinstance(obj, tuple | list | set | frozenset):
        return sum(text_bytes(x) for x in obj)
    return 0


def held(memo: Any) -> int:
    """:func:`text_bytes` of a memo's keys and values (a set: its keys)."""
    return text_bytes(list(memo.items()) if isinstance(memo, dict) else list(memo))


def big_alerts(n: int, n_labels: int, vlen: int, seed: int = 0) -> list[dict[str, Any]]:
    """``n`` alerts with distinct label sets of ``n_labels`` extra values of ``vlen`` characters
    (and an annotation as large), on a real node's labels."""
    out = []
    for i in range(n):
        pad = f"{seed:04d}{i:08d}".ljust(vlen, "x")
        labels = {"alertname": "GpuXid", "cluster": "c0", "node": "c0-h0", "severity": "critical"}
        labels.update({f"pad{k}": pad for k in range(n_labels)})
        out.append({"labels": labels, "annotations": {"summary": pad}, "status": "firing"})
    return out


def bodies(alerts: list[dict[str, Any]], per: int = 2000) -> list[bytes]:
    """Request bodies of ``per`` alerts each (a body holds at most 10,000)."""
    return [
        json.dumps({"alerts": alerts[i : i + per], "top_k": 3}).encode()
        for i in range(0, len(alerts), per)
    ]


def storms(graph: DependencyGraph, n: int, seed: int) -> list[list[dict[str, Any]]]:
    """Simulated incidents (realistic label sets, repeated within and across incidents)."""
    sim = IncidentSimulator(graph, AlertSimConfig(noise_per_node=0.2))
    rng = np.random.default_rng(seed)
    return [sim.simulate(rng, f"cache-{i}")["alerts"] for i in range(n)]


FLOODS = {
    "2kb-sets": (12_000, 1, 2000),  # 24 MB of distinct label sets a memo would keep
    "128kb-sets": (200, 252, 512),  # 128 KB label sets (256 labels at most): 26 MB
}


# ------------------------------------------------------------------------- bounded by bytes
@pytest.mark.parametrize("flood", FLOODS, ids=list(FLOODS))
def test_label_info_memo_stays_within_its_byte_budget(graph: DependencyGraph, flood: str) -> None:
    alerts = big_alerts(*FLOODS[flood])
    for i in range(0, len(alerts), 2000):
        alert_columns(graph, alerts[i : i + 2000])
    memo = _static(graph).label_info
    n = held(memo)
    assert n <= LABEL_MEMO_LIMIT, f"label_info holds {n / MIB:.1f} MB of label text"
    assert n <= memo.nbytes <= mapping.MEMO_BUDGET <= LABEL_MEMO_LIMIT


@pytest.mark.parametrize("flood", FLOODS, ids=list(FLOODS))
def test_alert_cache_stays_within_its_byte_budget(graph: DependencyGraph, flood: str) -> None:
    map_alerts(graph, big_alerts(*FLOODS[flood]))
    memo = _static(graph).alert_cache
    n = held(memo)
    assert n <= LABEL_MEMO_LIMIT, f"alert_cache holds {n / MIB:.1f} MB of label text"
    assert n <= memo.nbytes <= LABEL_MEMO_LIMIT


@pytest.mark.parametrize("flood", FLOODS, ids=list(FLOODS))
def test_parse_memos_stay_within_their_byte_budgets(graph: DependencyGraph, flood: str) -> None:
    for body in bodies(big_alerts(*FLOODS[flood])):
        assert plain_columns(body, graph, labels=True) is not None
    st = _static(graph)
    for name, memo, limit in (
        ("label_json", st.label_json, LABEL_MEMO_LIMIT),
        ("label_json_dicts", st.label_json_dicts, LABEL_MEMO_LIMIT),
        ("annotations", parse._ANNOTATIONS_OK, PROCESS_MEMO_LIMIT),
    ):
        n = held(memo)
        assert n <= limit, f"{name} holds {n / MIB:.1f} MB of label text"
        assert n <= memo.nbytes <= limit


def test_alertname_keyword_memo_stays_within_its_byte_budget() -> None:
    for i in range(10_000):
        mapping._keywords(f"{i:06d}".ljust(800, "n"))
    n = held(mapping._KW_CACHE)
    assert n <= PROCESS_MEMO_LIMIT, f"the keyword memo holds {n / MIB:.1f} MB of alertnames"
    assert n <= mapping._KW_CACHE.nbytes <= PROCESS_MEMO_LIMIT


def test_timestamp_layouts_memoise_no_client_chosen_length() -> None:
    for n in range(40, 1040):
        with pytest.raises(parse._Unsure):  # no strict timestamp (past nanoseconds)
            read_times(["2026-01-01T00:00:00." + "1" * (n - 20)])
    assert not [k for k in parse._LAYOUTS if k[0] > 35], "a layout per client-chosen length"
    assert read_times(["2026-01-01T00:00:00.123456789+01:00"])[0] == pytest.approx(
        1767222000.123456
    )


# --------------------------------------------------------------------- still hits when it should
def test_repeated_realistic_label_sets_hit_the_memos(
    graph: DependencyGraph, monkeypatch: pytest.MonkeyPatch
) -> None:
    incidents = storms(graph, 6, seed=3)
    for a in incidents:
        alert_columns(graph, a)
        map_alerts(graph, a)
        assert plain_columns(bodies(a)[0], graph, labels=True) is not None
    st = _static(graph)
    first = {k: st.label_info[k] for k in list(st.label_info)}
    calls = {"label_info": 0, "alert_cache": 0, "label_json": 0}

    def counting(name: str, fn: Any) -> Any:
        def wrapped(*args: Any, **kwargs: Any) -> Any:
            calls[name] += 1
            return fn(*args, **kwargs)

        return wrapped

    monkeypatch.setattr(
        columnar, "node_index_for_alert", counting("label_info", columnar.node_index_for_alert)
    )
    monkeypatch.setattr(
        mapping, "node_index_for_alert", counting("alert_cache", mapping.node_index_for_alert)
    )
    monkeypatch.setattr(parse, "label_info_str", counting("label_json", parse.label_info_str))
    for a in incidents:  # the same incidents again: every label set from a memo
        alert_columns(graph, a)
        map_alerts(graph, a)
        assert plain_columns(bodies(a)[0], graph, labels=True) is not None
        for alert in a:
            labels = alert.get("labels") or {}
            assert columnar._label_info(graph, st, labels) is first[tuple(labels.items())]
            if alert.get("annotations"):
                assert json.dumps(alert["annotations"]).encode() in parse._ANNOTATIONS_OK
    assert calls == {"label_info": 0, "alert_cache": 0, "label_json": 0}
    assert len(first) > 100  # realistic storms: many distinct label sets, all kept


def test_a_flood_of_large_label_sets_leaves_realistic_ones_memoised(graph: DependencyGraph) -> None:
    realistic = storms(graph, 2, seed=5)
    for a in realistic:
        alert_columns(graph, a)
    st = _static(graph)
    kept = len(st.label_info)
    alert_columns(graph, big_alerts(*FLOODS["128kb-sets"]))  # over the per-entry size: not kept
    assert len(st.label_info) == kept


# ----------------------------------------------------------------------------- same results
def _columns_fields(cols: Any) -> list[Any]:
    return [
        cols.rows,
        cols.sev,
        cols.name_col,
        cols.name_u,
        cols.names,
        cols.starts,
        cols.ends,
        cols.firing,
        cols.unmapped,
        cols.count,
        cols.labels,
    ]


def _results(graph: DependencyGraph, incidents: list[list[dict[str, Any]]]) -> list[Any]:
    out: list[Any] = []
    for a in incidents:
        crop = incident_crop(graph, a, 2)
        out += [crop.x, crop.keep, crop.edge_index, crop.edge_type, crop.alerting, crop.unmapped]
        out += _columns_fields(alert_columns(graph, a))
        out.append(map_alerts(graph, a))
        parsed = plain_columns(bodies(a)[0], graph, labels=True)
        assert parsed is not None
        out += _columns_fields(parsed[1])
    return out


def _assert_same(a: list[Any], b: list[Any]) -> None:
    assert len(a) == len(b)
    for x, y in zip(a, b, strict=True):
        if isinstance(x, np.ndarray):
            np.testing.assert_array_equal(x, y)
        else:
            assert x == y


def test_results_are_the_same_with_and_without_the_memos(
    graph: DependencyGraph, monkeypatch: pytest.MonkeyPatch
) -> None:
    incidents = storms(graph, 4, seed=7)
    big = big_alerts(40, 3, 3000)  # over the per-entry size: computed each time
    incidents.append(incidents[0][:50] + big + incidents[1][:50])
    cold = _results(graph, incidents)
    warm = _results(graph, incidents)
    _assert_same(cold, warm)
    with monkeypatch.context() as m:  # nothing memoised
        m.setattr(mapping.ByteMemo, "put", lambda self, key, value, size: None)
        for memo in (parse._ANNOTATIONS_OK, mapping._KW_CACHE):
            memo.clear()
        fresh = build_example_graph(
            clusters=2, hosts=4, gpus=8, services=4, pods=2, name="cache-test"
        )
        _assert_same(cold, _results(fresh, incidents))
    with monkeypatch.context() as m:  # everything memoised, large label sets too
        m.setattr(mapping, "MEMO_MAX_ENTRY", 1 << 40)
        m.setattr(mapping.ByteMemo.__init__, "__defaults__", (1 << 40, 1 << 40))
        fresh = build_example_graph(
            clusters=2, hosts=4, gpus=8, services=4, pods=2, name="cache-test"
        )
        once = _results(fresh, incidents)
        assert any(len(k) > 3000 for k in _static(fresh).label_json)  # the large ones were kept
        _assert_same(cold, once)
        _assert_same(cold, _results(fresh, incidents))


# ------------------------------------------------------------------------------- ByteMemo
def test_byte_memo_clears_on_overflow_and_skips_large_entries() -> None:
    memo = mapping.ByteMemo(budget=1000, max_entry=400)
    memo.put("a", 1, 400)
    memo.put("b", 2, 401)  # over max_entry: not kept
    memo.put("c", 3, 300)
    assert dict(memo) == {"a": 1, "c": 3} and memo.nbytes == 700
    memo.put("a", 9, 100)  # already there: unchanged, not counted again
    assert memo["a"] == 1 and memo.nbytes == 700
    memo.put("d", 4, 301)  # would pass the budget: emptied first
    assert dict(memo) == {"d": 4} and memo.nbytes == 301
    memo["e"] = "x" * 50  # counted by approx_bytes
    assert memo.nbytes == 301 + mapping.ENTRY_BYTES + 1 + 50
    memo.clear()
    assert not memo and memo.nbytes == 0


def test_byte_memo_counts_exactly_under_concurrent_writers() -> None:
    memo = mapping.ByteMemo(budget=50_000, max_entry=1000)
    sizes: dict[tuple[int, int], int] = {}

    def fill(t: int) -> None:
        for i in range(20_000):
            key = (t, i % 3000)
            size = 10 + (i * 7 + t) % 500
            sizes.setdefault(key, size)
            memo.put(key, i, sizes[key])

    threads = [threading.Thread(target=fill, args=(t,)) for t in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert memo.nbytes <= memo.budget
    assert memo.nbytes == sum(sizes[k] for k in memo)
