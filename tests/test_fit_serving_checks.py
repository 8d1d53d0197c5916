"""How the service loads, checks and ranks with a model of ``fleetmind rca fit`` (method ``gat_fit``).

* a ``model.pt`` that does not fit its ``config.json`` network falls back with a one-line reason
  (torch's ``load_state_dict`` error is one line per tensor: a 6 kB, 40-line ``fallback_reason``);
* a ``config.json`` whose ``observed`` / ``roles`` / ``nodes`` has the wrong type is refused at
  load (it used to load, then fail every ranking with a 500);
* a graph whose nodes the fit did not know is logged once per graph, with the same words as
  ``fleetmind rca petshop --model`` (:func:`fleetmind.rca.fit_model.fit_node_overlap`);
* the served ranking takes the fitted model's logits (``scores``) and builds causes for ``top_k``
  only;
* the incident page and notifier say "uncalibrated scores" for ``gat_fit``, whose scores are a
  softmax (a probability in form) without a fitted temperature (docs/serving/api.md "Scores").
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from serving_helpers import notify_settings

from fleetmind.data.graph import DependencyGraph, GraphNode
from fleetmind.rca.fit_model import FittedGATAnalyzer
from fleetmind.serving.notify import confidence_words
from fleetmind.serving.registry import FittedProbabilityAnalyzer, ModelRegistry

T0 = "2026-12-07T12:00:00Z"


@pytest.fixture(autouse=True)
def _no_telemetry(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MLFLOW_DISABLE_TELEMETRY", "true")


def _edit_config(folder: Path, **changes: Any) -> None:
    cfg = json.loads((folder / "config.json").read_text())
    cfg.update(changes)
    (folder / "config.json").write_text(json.dumps(cfg))


def _served_rca(folder: Path) -> Any:
    return ModelRegistry(str(folder), "heuristic:builtin-bestfit").load().rca


def test_a_model_pt_of_another_network_falls_back_with_one_line(rca_fit_folder: Path) -> None:
    cfg = json.loads((rca_fit_folder / "config.json").read_text())
    _edit_config(rca_fit_folder, model={**cfg["model"], "hidden": 16})
    rca = _served_rca(rca_fit_folder)
    assert rca.method != "gat_fit"
    reason = rca.fallback_reason
    assert "\n" not in reason and len(reason) < 500, reason
    assert "size mismatch for" in reason, reason


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("observed", {"a": 5}),
        ("observed", "abc"),
        ("observed", {"a": None}),
        ("roles", ["latency"]),
        ("roles", {"http_requests_total": "nonsense"}),
        ("nodes", "abc"),
    ],
)
def test_a_config_json_of_wrong_types_falls_back_at_load(
    rca_fit_folder: Path, field: str, value: Any
) -> None:
    _edit_config(rca_fit_folder, **{field: value})
    rca = _served_rca(rca_fit_folder)
    assert rca.method != "gat_fit", rca
    assert f"'{field}'" in rca.fallback_reason and "\n" not in rca.fallback_reason


def _graph(name: str, ids: str) -> DependencyGraph:
    return DependencyGraph(name, [GraphNode(id=n, kind="service") for n in ids], [])


def _alerts(node: str) -> list[dict[str, Any]]:
    return [{"labels": {"service": node, "alertname": "HighLatency"}, "startsAt": T0}]


def test_a_graph_of_another_system_is_logged_once(
    rca_fit_folder: Path, caplog: pytest.LogCaptureFixture
) -> None:
    served = FittedProbabilityAnalyzer(FittedGATAnalyzer.load(rca_fit_folder))
    with caplog.at_level(logging.WARNING, logger="fleetmind.serving"):
        served.find_root_causes(_graph("mysys", "abc"), _alerts("b"), 2)
        assert not [r for r in caplog.records if "gat_fit" in r.getMessage()]
        other = _graph("other", "xyz")
        for _ in range(2):
            res = served.find_root_causes(other, _alerts("y"), 2)
        few = _graph("mixed", "axyz")
        served.find_root_causes(few, _alerts("a"), 2)
    said = [r.getMessage() for r in caplog.records if "gat_fit" in r.getMessage()]
    assert len(said) == 2, said
    assert "include none of the 3 graph nodes of the served graph 'other'" in said[0]
    assert "only 1 of the 4 graph nodes of the served graph 'mixed'" in said[1]
    # served on: unknown nodes count as unmonitored (docs/serving/api.md)
    assert res.method == "gat_fit" and len(res.causes) == 2


class _LogitsOnly:
    """A fitted model that only has ``scores`` (what the served ranking needs), with ties."""

    meta: dict[str, Any] = {"nodes": list("abcd"), "version": "gat_fit-test"}
    version = "gat_fit-test"

    def scores(self, graph: DependencyGraph, alerts: Any) -> np.ndarray:
        return np.array([0.5, 2.0, 0.5, 2.0])


def test_the_served_ranking_softmaxes_the_logits_in_their_stable_order() -> None:
    res = FittedProbabilityAnalyzer(_LogitsOnly()).find_root_causes(
        _graph("mysys", "abcd"), _alerts("b"), 3
    )
    assert [c.node for c in res.causes] == ["b", "d", "a"]
    e = np.exp(np.array([0.5, 2.0, 0.5, 2.0]) - 2.0)
    p = e / e.sum()
    assert [c.score for c in res.causes] == pytest.approx([p[1], p[3], p[0]])
    assert [c.path for c in res.causes] == [("b",), ("d",), ("a",)]


def test_gat_fit_confidence_reads_uncalibrated_not_no_probability(tmp_path: Path) -> None:
    s = notify_settings(tmp_path)
    fit = confidence_words(0.9, s, "gat_fit")
    assert fit.startswith("confidence unknown (uncalibrated scores): "), fit
    base = confidence_words(3.4, s, "upstream-coverage")
    assert base.startswith("confidence unknown (this ranker's scores are not probabilities)")
