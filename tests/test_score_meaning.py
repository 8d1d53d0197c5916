"""What a served root-cause score means, and how the service says so.

* a model written by ``fleetmind rca fit`` (``config.json`` format ``fleetmind-rca-fit``) is served
  as ``gat_fit``, its scores a softmax over the graph's nodes, ``calibrated: false``; it used to
  fall back silently to the ``deepest`` baseline ("... is not a fleetmind-rca-gat artifact");
* ``GET /api/v1/models`` names the incidents the released GAT's temperature was fitted on
  (``calibration_fitted_on``: simulated ones), and the incident page says "calibrated on
  simulated incidents", not a bare "calibrated";
* a baseline's score bars are relative to the incident's top score: ``deepest`` scores depths
  (1004.02), and every cause's bar was drawn full.
"""

from __future__ import annotations

import html
import json
import re
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pytest
from fastapi.testclient import TestClient
from serving_helpers import notify_settings, webhook
from ui_helpers import ranked_storm, storm_alerts

from fleetmind.data.graph import DependencyGraph, GraphNode
from fleetmind.serving.app import create_app
from fleetmind.serving.registry import ModelRegistry

REPO = Path(__file__).resolve().parents[1]
T0 = datetime.now(UTC) - timedelta(minutes=5)


@pytest.fixture(autouse=True)
def _no_telemetry(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MLFLOW_DISABLE_TELEMETRY", "true")


def _settings(tmp_path: Path, **kw: object) -> object:
    return notify_settings(
        tmp_path, **{"notify_alertmanager_url": "", "notify_webhook_url": "", **kw}
    )


# ------------------------------------------------------------------ rca fit models are served
def test_a_fitted_model_is_served_as_gat_fit_with_softmax_scores(
    tmp_path: Path, rca_fit_folder: Path
) -> None:
    """Before: ``method: deepest`` and ``fallback_reason: "GAT model not loaded: ... is not a
    fleetmind-rca-gat artifact"``."""
    storm = json.loads((REPO / "examples/storm-dns.json").read_text())
    with TestClient(create_app(_settings(tmp_path, rca_model=str(rca_fit_folder)))) as c:
        rca = c.get("/api/v1/models").json()["rca"]
        assert rca["method"] == "gat_fit", rca
        assert rca["fallback_reason"] is None
        assert rca["calibrated"] is False and rca["calibration_fitted_on"] is None
        assert rca["version"].startswith("gat_fit-")
        r = c.post("/api/v1/rca", json={"alerts": storm["alerts"], "top_k": 1000})
        assert r.status_code == 200, r.text
        body = r.json()
        assert body["method"] == "gat_fit" and body["fallback_reason"] is None
        scores = [x["score"] for x in body["causes"]]
        assert scores and all(0.0 <= s <= 1.0 for s in scores)
        assert scores == sorted(scores, reverse=True)
        # every node of the served graph is a candidate: the softmax sums to 1 over them
        assert len(scores) == _graph_size(c)
        assert sum(scores) == pytest.approx(1.0, abs=1e-6)


def _graph_size(c: TestClient) -> int:
    return c.app.state.services.graphs.graph.num_nodes


def test_softmax_keeps_the_fitted_ranking_and_cuts_after(rca_fit_folder: Path) -> None:
    from fleetmind.rca.fit_model import FittedGATAnalyzer
    from fleetmind.serving.registry import FittedProbabilityAnalyzer

    raw = FittedGATAnalyzer.load(rca_fit_folder)
    served = FittedProbabilityAnalyzer(FittedGATAnalyzer.load(rca_fit_folder))
    g = DependencyGraph("mysys", [GraphNode(id=n, kind="service") for n in "abcd"], [])
    alerts = [{"labels": {"service": "b", "alertname": "HighLatency"}, "startsAt": T0.isoformat()}]
    logits = [c.score for c in raw.find_root_causes(g, alerts).causes]
    top2 = served.find_root_causes(g, alerts, top_k=2)
    assert [c.node for c in top2.causes] == [
        c.node for c in raw.find_root_causes(g, alerts, 2).causes
    ]
    e = np.exp(np.array(logits) - max(logits))
    assert [c.score for c in top2.causes] == pytest.approx(list((e / e.sum())[:2]))
    assert top2.method == "gat_fit" and top2.model_version == raw.version


# ------------------------------------------------------------------ what "calibrated" means
def test_models_name_the_simulated_incidents_the_temperature_was_fitted_on() -> None:
    info = ModelRegistry(None, "heuristic:builtin-bestfit").load().rca.info()
    assert info["calibrated"] is True
    fitted_on = json.loads((REPO / "models/rca/config.json").read_text())["calibration"]
    assert info["calibration_fitted_on"] == fitted_on["fitted_on"]
    assert info["calibration_fitted_on"]["n"] > 0


def _page(c: TestClient, inc_id: int) -> str:
    return c.get(f"/ui/incidents/{inc_id}").text


def _storm_incident(c: TestClient) -> dict:
    return next(i for i in c.get("/api/v1/incidents").json() if i["alert_count"] == 7)


def test_the_page_says_calibrated_on_simulated_incidents(tmp_path: Path) -> None:
    with ranked_storm(_settings(tmp_path), T0) as c:
        inc = _storm_incident(c)
        causes = [dict(x) for x in inc["causes"]]
        causes[0]["score"] = 0.93
        causes[0]["fault_type"] = causes[0].get("fault_type") or "host_not_ready"
        c.app.state.services.db.set_incident_rca(inc["id"], causes, "gat", None)
        c.app.state.services.registry.set_current(_as_calibrated_gat(c))
        page = _page(c, inc["id"])
        words = html.unescape(re.search(r'id="confidence">(.*?)</div>', page, re.S).group(1))
        assert "(93 %, calibrated on simulated incidents)" in words, words
        # a calibrated gat's bars are its probabilities, not relative to the top score (100)
        assert _bars(page)[0] == round(100 * 0.93) == 93


def _as_calibrated_gat(c: TestClient) -> object:
    """The served set with its RCA entry relabelled a calibrated GAT (the page reads ``calibrated``
    of the served model that ranked the incident)."""
    from dataclasses import replace

    cur = c.app.state.services.registry.current
    rca = replace(cur.rca, method="gat", calibrated=True)
    return replace(cur, rca=rca)


# ------------------------------------------------------------------ baseline score bars
def _bars(page: str) -> list[int]:
    return [int(w) for w in re.findall(r'<i style="width:(\d+)%"></i>', page)]


@pytest.fixture
def deepest(tmp_path: Path) -> Iterator[TestClient]:
    with TestClient(create_app(_settings(tmp_path, rca_model="baseline:deepest"))) as c:
        c.post("/api/v1/alerts", json=webhook(storm_alerts(T0))).raise_for_status()
        c.app.state.services.incidents.process_pending()
        c.app.state.services.incidents.rank_due()
        yield c


def test_baseline_bars_are_relative_to_the_top_score(deepest: TestClient) -> None:
    """``deepest`` scores are depths (> 1): every bar read 100 %."""
    inc = _storm_incident(deepest)
    scores = [x["score"] for x in inc["causes"]]
    assert inc["method"] == "deepest" and max(scores) > 1 and len(set(scores)) > 1
    page = _page(deepest, inc["id"])
    bars = _bars(page)
    assert bars[0] == 100
    assert sorted(bars) == sorted(round(100 * s / max(scores)) for s in scores)
    assert min(bars) < 100
    assert "not calibrated probabilities: bars are relative" in page


def test_incidents_ranked_by_a_fitted_model_page_as_warnings(
    tmp_path: Path, rca_fit_folder: Path
) -> None:
    """``gat_fit`` is outside ``CALIBRATED_METHODS``: its page says "confidence unknown" and draws
    relative bars, whatever its softmax top score."""
    with ranked_storm(_settings(tmp_path, rca_model=str(rca_fit_folder)), T0) as c:
        inc = _storm_incident(c)
        assert inc["method"] == "gat_fit" and inc["causes"]
        page = _page(c, inc["id"])
        assert "confidence unknown (uncalibrated scores)" in page
        assert "are not calibrated probabilities: bars are relative" in page
        assert max(_bars(page)) == 100
