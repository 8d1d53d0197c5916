"""RCA dataset IO, Alertmanager v4 alert validity, ranking metrics, baselines, and the CLI."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path
from typing import Literal

import numpy as np
import pytest
from pydantic import BaseModel, ConfigDict, field_validator

from fleetmind import cli
from fleetmind.data.errors import ConfigError, DataError
from fleetmind.data.rca_dataset import load_dataset, write_dataset
from fleetmind.data.rca_gen.alerts import AlertSimConfig, IncidentSimulator
from fleetmind.data.rca_gen.graphs import generate_graph
from fleetmind.rca.base import BaseAnalyzer
from fleetmind.rca.baselines import BASELINES
from fleetmind.rca.metrics import (
    ac_at_k,
    avg_at_k,
    evaluate_methods,
    make_analyzers,
    mrr,
    rank_of,
    register_method,
    summarize,
)

T0 = 1_767_225_600.0


class AlertV4(BaseModel):
    """One ``alerts[]`` entry of an Alertmanager webhook (version "4")."""

    model_config = ConfigDict(extra="forbid")
    status: Literal["firing", "resolved"]
    labels: dict[str, str]
    annotations: dict[str, str]
    startsAt: str
    endsAt: str
    generatorURL: str
    fingerprint: str

    @field_validator("startsAt", "endsAt")
    @classmethod
    def _rfc3339(cls, v: str) -> str:
        datetime.fromisoformat(v.replace("Z", "+00:00"))
        assert v.endswith("Z")
        return v

    @field_validator("fingerprint")
    @classmethod
    def _hex16(cls, v: str) -> str:
        assert len(v) == 16 and int(v, 16) >= 0
        return v


@pytest.fixture(scope="module")
def small():
    g = generate_graph("io-g", 21, n_nodes=300, n_clusters=2)
    sim = IncidentSimulator(g, AlertSimConfig(second_incident_rate=0.5))
    rng = np.random.default_rng(0)
    incs = [sim.simulate(rng, f"io-{k}", t_start=T0 + 7200 * k) for k in range(12)]
    return g, incs


def test_alerts_validate_as_alertmanager_v4(small) -> None:
    g, incs = small
    for inc in incs:
        for a in inc["alerts"]:
            m = AlertV4.model_validate(a)
            assert {"alertname", "severity"} <= set(m.labels)
            if m.status == "resolved":
                assert m.endsAt > m.startsAt
        # the same label set always gets the same fingerprint
        fp = {}
        for a in inc["alerts"]:
            key = json.dumps(a["labels"], sort_keys=True)
            assert fp.setdefault(key, a["fingerprint"]) == a["fingerprint"]


def test_dataset_roundtrip(tmp_path: Path, small) -> None:
    g, incs = small
    write_dataset(
        tmp_path / "ds", {"train": incs[:8], "val": incs[8:10], "test": incs[10:]}, [g], {"seed": 1}
    )
    ds = load_dataset(tmp_path / "ds")
    assert set(ds.splits) == {"train", "val", "test"}
    assert ds.splits["train"] == incs[:8]
    assert ds.graph_of(ds.splits["test"][0]).to_json() == g.to_json()
    assert ds.meta["seed"] == 1
    with pytest.raises(DataError, match="no split 'nope'"):
        ds.split("nope")


def _write(tmp_path: Path, small, mutate=None, graph=True) -> Path:
    g, incs = small
    d = tmp_path / "bad"
    write_dataset(d, {"train": incs[:2], "val": incs[:1], "test": incs[:1]}, [g] if graph else [])
    if mutate:
        mutate(d)
    return d


def test_bad_dataset_folders_get_clear_errors(tmp_path: Path, small) -> None:
    with pytest.raises(DataError, match="not found"):
        load_dataset(tmp_path / "missing")
    (tmp_path / "empty").mkdir()
    with pytest.raises(DataError, match="no split files"):
        load_dataset(tmp_path / "empty")

    d = _write(tmp_path, small, lambda d: (d / "val.jsonl").write_text('{"id": 1}\n'))
    with pytest.raises(DataError, match=r"val.jsonl:1: incident has no 'graph'"):
        load_dataset(d)
    d = _write(tmp_path, small, lambda d: (d / "test.jsonl").write_text("{not json\n"))
    with pytest.raises(DataError, match=r"test.jsonl:1: not valid JSON"):
        load_dataset(d)
    d = _write(tmp_path, small, lambda d: [p.unlink() for p in (d / "graphs").glob("*.json")])
    with pytest.raises(DataError, match="names graph 'io-g'"):
        load_dataset(d)

    def bad_root(d: Path) -> None:
        inc = json.loads((d / "test.jsonl").read_text().splitlines()[0])
        inc["root_cause"] = "mars/host/h0"
        (d / "test.jsonl").write_text(json.dumps(inc) + "\n")

    d = _write(tmp_path, small, bad_root)
    with pytest.raises(DataError, match="root_cause 'mars/host/h0' is not a node"):
        load_dataset(d)


def test_named_splits_only_read_those(tmp_path: Path, small) -> None:
    """A broken split does not stop another one being read; a missing one names those there."""
    d = _write(tmp_path, small, lambda d: (d / "test.jsonl").write_text("{not json\n"))
    ds = load_dataset(d, ["val"])
    assert list(ds.splits) == ["val"] and len(ds.split("val")) == 1
    with pytest.raises(DataError, match=r"no split 'tset' \(has: test, train, val\)"):
        load_dataset(d, ["tset"])


def test_metrics_on_hand_made_rankings() -> None:
    assert rank_of(["a", "b", "c"], "b") == 2
    assert rank_of(["a"], "z") is None
    ranks = [1, 2, 4, None]
    assert ac_at_k(ranks, 1) == 0.25
    assert ac_at_k(ranks, 3) == 0.5
    assert ac_at_k(ranks, 5) == 0.75
    # Avg@5 = mean(AC@1..AC@5) = mean(.25, .5, .5, .75, .75)
    assert avg_at_k(ranks, 5) == pytest.approx(0.55)
    assert mrr(ranks) == pytest.approx((1 + 0.5 + 0.25 + 0) / 4)
    s = summarize(ranks, [1.0, 3.0])
    assert (
        set(s) == {"ac@1", "ac@3", "ac@5", "avg@5", "mrr", "ms_per_incident"}
        and s["ms_per_incident"] == 2.0
    )
    assert ac_at_k([], 1) == 0.0 and mrr([]) == 0.0


def test_baselines_rank_alerting_nodes_with_paths(small) -> None:
    g, incs = small
    for name, cls in BASELINES.items():
        an = cls()
        assert isinstance(an, BaseAnalyzer)
        res = an.find_root_causes(g, incs[0]["alerts"], top_k=5)
        assert res.method == name and 0 < len(res.causes) <= 5
        scores = [c.score for c in res.causes]
        assert scores == sorted(scores, reverse=True)
        for c in res.causes:
            assert c.path[0] == c.node and c.node in g.index
            assert c.kind == g.node(c.node).kind


def test_evaluate_methods_shape_and_plugin_hook(small) -> None:
    g, incs = small

    class Oracle(BaseAnalyzer):
        name = "oracle"

        def find_root_causes(self, graph, alerts, top_k=None):
            from fleetmind.rca.base import RankedCause, RCAResult

            root = next(i["root_cause"] for i in incs if i["alerts"] is alerts)
            return RCAResult([RankedCause(root, graph.node(root).kind, None, 1.0)], "oracle")

    register_method("oracle", lambda model, seed: Oracle())
    analyzers = make_analyzers(["oracle", "deepest", "random"])
    res = evaluate_methods(incs, analyzers, {g.name: g})
    assert res["n_incidents"] == len(incs)
    assert res["methods"]["oracle"]["ac@1"] == 1.0 and res["methods"]["oracle"]["mrr"] == 1.0
    for m in res["methods"].values():
        assert 0 <= m["ac@1"] <= m["ac@3"] <= m["ac@5"] <= 1
    with pytest.raises(ConfigError, match="unknown method") as err:
        make_analyzers(["nope"])
    # every method --methods accepts is named, the learned baselines too
    assert all(name in str(err.value) for name in ("hop2_gbdt", "node_gbdt", "name_table"))


def test_untyped_incidents_are_no_fault_type_of_their_own(small) -> None:
    """Feedback that named no fault type is stored with ``fault_type`` null
    (``training/rca_feedback.py``): it counts in the methods' metrics, and ``by_fault_type`` lists
    the named types only (no ``"None"`` entry)."""
    g, incs = small
    typed = [dict(i) for i in incs[:4]]
    untyped = [{**i, "fault_type": None} for i in incs[4:6]]
    res = evaluate_methods(typed + untyped, make_analyzers(["deepest"]), {g.name: g})
    assert res["n_incidents"] == 6
    by_type = res["by_fault_type"]["deepest"]
    assert "None" not in by_type and set(by_type) == {str(i["fault_type"]) for i in typed}
    assert sum(v["n"] for v in by_type.values()) == 4


def test_a_model_that_was_asked_for_and_does_not_load_is_an_error(tmp_path: Path) -> None:
    """Without names or a model, a plug-in that cannot load is skipped (its row is missing); with
    ``model`` given (``rca evaluate --model X``), it is an error naming the model."""
    from fleetmind.data.errors import NotAvailableError

    bad = tmp_path / "not-a-model"
    bad.mkdir()
    with pytest.raises(NotAvailableError, match="method 'gat' could not be loaded.*not-a-model"):
        make_analyzers(model=str(bad))
    with pytest.raises(NotAvailableError, match="gat"):
        make_analyzers(model=str(tmp_path / "missing"))
    # a model with methods that would ignore it is an error, not a silently unused flag
    with pytest.raises(ConfigError, match="none of the methods deepest is a learned one"):
        make_analyzers(["deepest"], model=str(bad))
    assert "gat" in make_analyzers(["deepest", "gat"], model=None)  # the released GAT


def test_cli_generate_then_evaluate(tmp_path: Path) -> None:
    out = tmp_path / "ds"
    rc = cli.main(
        ["rca", "generate", "--out", str(out), "--incidents", "40", "--seed", "3", "--graphs", "2",
         "--min-nodes", "200", "--max-nodes", "300", "--max-clusters", "3", "--workers", "1"]
    )  # fmt: skip
    assert rc == 0
    ds = load_dataset(out)
    assert {"train", "val", "test", "test_large"} <= set(ds.splits)
    splits_graphs = {s: set(ds.graphs_in(s)) for s in ds.splits}
    names = list(splits_graphs)
    for i, a in enumerate(names):
        for b in names[i + 1 :]:
            assert not splits_graphs[a] & splits_graphs[b]  # splits never share a topology
    clusters = {n: sum(x.kind == "cluster" for x in g.nodes) for n, g in ds.graphs.items()}
    assert min(clusters[n] for n in splits_graphs["test_large"]) > max(
        clusters[n] for n in splits_graphs["train"]
    )
    js = tmp_path / "eval.json"
    rc = cli.main(
        [
            "rca",
            "evaluate",
            "--data",
            str(out),
            "--methods",
            "deepest",
            "most_alerts",
            "--json",
            str(js),
        ]
    )
    assert rc == 0
    res = json.loads(js.read_text())
    assert res["n_incidents"] == len(ds.splits["test"])
    assert set(res["methods"]) == {"deepest", "most_alerts"}
    assert cli.main(["rca", "evaluate", "--data", str(tmp_path / "nope")]) == 2
