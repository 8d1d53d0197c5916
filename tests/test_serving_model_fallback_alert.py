"""A model that does not load raises `FleetMindModelFallback`, on the series the service exports.

The service answers with a heuristic when its model cannot load (docs/serving/api.md, "Models and
fallbacks"), so that ingestion never stops; the rule in deploy/fleetmind-rules.yml is what tells
on-call. `promtool test rules` (tests/test_serving_e2e.py) checks the rule on input series written
in deploy/fleetmind-rules.test.yml; this test checks that those series are the ones the running
service exports, with the real GAT loader and a truncated artifact, read with prometheus_client's
own text parser, so the rule's fixture cannot drift from the exporter.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import yaml
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families

from fleetmind.serving.app import create_app
from fleetmind.serving.settings import Settings

ROOT = Path(__file__).resolve().parents[1]
DEPLOY = ROOT / "deploy"


def _model_info(metrics_text: str) -> list[dict[str, str]]:
    """Label sets of the ``fleetmind_model_info`` samples whose value is 1."""
    for family in text_string_to_metric_families(metrics_text):
        if family.name == "fleetmind_model_info":
            return [dict(s.labels) for s in family.samples if s.value == 1.0]
    return []


def _rule_fixture_series() -> list[dict[str, str]]:
    """The ``fleetmind_model_info`` input series of the rule's promtool test, as label dicts."""
    doc = yaml.safe_load((DEPLOY / "fleetmind-rules.test.yml").read_text())
    out = []
    for case in doc["tests"]:
        for s in case["input_series"]:
            m = re.fullmatch(r"fleetmind_model_info\{(.*)\}", s["series"])
            if m:
                out.append(dict(re.findall(r'(\w+)="([^"]*)"', m.group(1))))
    return out


def test_a_corrupt_rca_model_is_exported_as_the_rule_expects(tmp_path: Path) -> None:
    model = tmp_path / "gat"
    shutil.copytree(ROOT / "models" / "rca", model)
    (model / "model.pt").write_bytes((model / "model.pt").read_bytes()[:3000])  # truncated copy
    settings = Settings(
        database_url=f"sqlite:///{tmp_path}/f.db",
        rca_model=str(model),
        placement_model="heuristic:builtin-bestfit",
        incident_worker=False,
    )
    with TestClient(create_app(settings)) as client:
        assert "corrupt" in client.get("/api/v1/models").json()["rca"]["fallback_reason"]
        exported = _model_info(client.get("/metrics").text)
    rca = [s for s in exported if s["kind"] == "rca"]
    assert rca == [{"kind": "rca", "method": "deepest", "version": "", "fallback": "true"}]
    placement = [s for s in exported if s["kind"] == "placement"]
    assert len(placement) == 1 and placement[0]["fallback"] == "false"

    # the rule's test series carry exactly these labels, plus what Prometheus adds on scrape
    fixture = _rule_fixture_series()
    assert any(f.get("fallback") == "true" for f in fixture)
    for series in fixture:
        assert set(series) - {"instance", "job"} == set(rca[0])
    firing = [f for f in fixture if f["fallback"] == "true"]
    assert [(f["kind"], f["method"]) for f in firing] == [(rca[0]["kind"], rca[0]["method"])]
    rules = yaml.safe_load((DEPLOY / "fleetmind-rules.yml").read_text())
    exprs = {r.get("alert"): r["expr"] for g in rules["groups"] for r in g["rules"]}
    assert 'fleetmind_model_info{fallback="true"}' in exprs["FleetMindModelFallback"]
